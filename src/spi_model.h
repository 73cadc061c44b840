/* spi_model.h: model internals shared by model.c and the lowering (not installed). */
#ifndef SPI_MODEL_H
#define SPI_MODEL_H
#include <stddef.h>
#include "sp_model.h"

/* The first field of m that is not computed at `context` tokens per
 * sequence (0: max_context), as a JSON pointer into shardplan's model
 * format, with the reason in text (may be NULL: no formatting, for the
 * lowering's quiet checks); NULL when everything is.  sp_model_check_run
 * is this plus validation, into an sp_error. */
const char *spi_model_refusal(const sp_model *m, int64_t context, char *text, size_t size);
#endif
