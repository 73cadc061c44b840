/*
 * sp_ref.h: the single-chip reference forward pass, the oracle every layout
 * of the executor is compared against.  Deliberately simple: plain loops
 * (naive triple-loop matmuls), fp32, no BLAS and no sp_kern_* kernels, so a
 * bug in a fast kernel cannot hide in the reference.  It shares only the
 * weights struct (and, for sampled generation, sp_kern_sample so sampled
 * tokens can be compared).
 *
 *   sp_ref *r;
 *   sp_ref_build(&model, &weights, B, max_ctx, &r);
 *   sp_ref_forward(r, prompt, P, logits, SP_REF_ALL);   // prefill, logits (B, P, V)
 *   sp_ref_forward(r, next, 1, last, SP_REF_LAST);      // decode one token, (B, V)
 *   sp_ref_free(r);
 */
#ifndef SP_REF_H
#define SP_REF_H
#include <stdint.h>
#include "sp_common.h"
#include "sp_model.h"
#include "sp_weights.h"
#include "sp_kern.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_ref sp_ref;   /* opaque */

enum { SP_REF_ALL = 0, SP_REF_LAST = 1 };

/* Borrows model and weights (valid until sp_ref_free); allocates activations
 * for B sequences of up to max_ctx tokens and the fp32 KV cache
 * (NL, B, max_ctx, KVH, D) for K and V. */
sp_status sp_ref_build(const sp_model *m, const sp_weights *w, int64_t B, int64_t max_ctx, sp_ref **out);
void sp_ref_free(sp_ref *r);
/* Forgets the cached context (position back to 0). */
void sp_ref_reset(sp_ref *r);
/* Tokens already in the KV cache (the position of the next token). */
int64_t sp_ref_pos(const sp_ref *r);
/* Runs tokens (B, L) at positions pos .. pos+L-1 of every sequence, appends to
 * the KV cache, advances pos by L.  logits: (B, L, V) with SP_REF_ALL, (B, V)
 * (the last token of each sequence) with SP_REF_LAST; may be NULL. */
sp_status sp_ref_forward(sp_ref *r, const int32_t *tokens, int64_t L, float *logits, int which);
/* From a reset cache: prefill prompt (B, P), then generate G tokens per
 * sequence into out (B, G).  sample NULL (or temperature <= 0) = greedy
 * (argmax, ties -> lowest id); else sp_kern_sample with one RNG per sequence
 * seeded sample->seed + b. */
sp_status sp_ref_generate(sp_ref *r, const int32_t *prompt, int64_t P, int64_t G, const sp_kern_sample_opts *sample,
                          int32_t *out);

#ifdef __cplusplus
}
#endif
#endif
