/* spi_hf.h: Hugging Face checkpoints as a source of weight blocks (internal;
 * safetensors.c).  One mapping from our tensor kinds to the checkpoint's
 * names serves both the whole-model loader and per-chip slice reads. */
#ifndef SPI_HF_H
#define SPI_HF_H
#include "exec/sp_weights.h"

typedef struct spi_hf_src spi_hf_src;

/* Opens the *.safetensors of dir and recognises Llama or GPT-2 naming. */
sp_status spi_hf_open(const char *dir, const sp_model *m, spi_hf_src **out, sp_error *err);
void spi_hf_close(spi_hf_src *h);   /* NULL is a no-op */
/* Reads whole every tensor w holds (w->t[kind] != NULL) and checks that
 * every tensor the model needs is present with the right shape. */
sp_status spi_hf_fill(const spi_hf_src *h, const sp_model *m, sp_weights *w, sp_error *err);
/* Block [r0, r1) x [c0, c1) of our (rows, cols) view of kind t, layer l
 * (mmapped: only those rows of the file are touched). */
sp_status spi_hf_read_block(const spi_hf_src *h, const sp_model *m, sp_weight t, int64_t l, int64_t r0, int64_t r1,
                            int64_t c0, int64_t c1, float *out, int *absent, sp_error *err);
#endif
