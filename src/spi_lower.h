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

/* Whether the last of the lowering's checks that failed on this thread
 * (sp_lower_begin, sp_lower_check_key, sp_lower: every phase's checks run
 * in each) is one that reads neither of the prefill phase's layouts
 * (sp_layout.phase[SP_PHASE_PREFILL]'s ffn and attn): the same call for a
 * layout that differs in those alone fails too.  0 when it may read them,
 * when no check failed since spi_lower_fail_clear, or when the last
 * lowering's checks passed (each run clears it first).  A caller that
 * asks after an SP_EINVAL from a pricing clears it before the pricing: an
 * SP_EINVAL from elsewhere (the cost model's own checks) then reads 0,
 * as does one raised after the last checks passed. */
int spi_lower_failed_decode_alone(void);
void spi_lower_fail_clear(void);
#endif
