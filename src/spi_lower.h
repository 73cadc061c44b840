/* spi_lower.h: the lowering's internal entry points (not installed). */
#ifndef SPI_LOWER_H
#define SPI_LOWER_H
#include "sp_lower.h"

/* sp_lower_finish for a program whose layer part is already there: p was
 * begun (sp_lower_begin, in job) for one stage of a model, layout, phase and shape,
 * and p->layer.s[0 .. layer_steps-1] still hold the layer that
 * sp_lower_finish emitted into p for another stage of the same model,
 * layout, phase and shape (a stage's layer does not depend on the stage:
 * only its pre and post parts and its layer count do).  Emits the pre and
 * post parts and sizes the whole program: the same program as
 * sp_lower_finish, without lowering the layer again.  The caller vouches
 * for the layer (a pipeline's stages priced one after the other). */
sp_status spi_lower_finish_keep_layer(sp_lower_job *job, sp_program *p, int layer_steps);
#endif
