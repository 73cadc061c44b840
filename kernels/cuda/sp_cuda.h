/*
 * sp_cuda.h: CUDA kernels of the executor (cuBLAS GEMM + own small kernels).
 * Built when configure found the toolkit (HAVE_CUDA); at run time every entry
 * point needs a visible GPU: sp_cuda_available() says whether there is one
 * and, if not, why (the cudaGetDeviceCount error), so `--backend cuda` can
 * report it and exit 2.
 *
 * All pointers passed to the kernels are DEVICE pointers, fp32 row-major,
 * same shapes and semantics as kernels/cpu/sp_kern.h.  Calls are
 * asynchronous on the context's stream; sp_cuda_sync waits and reports the
 * first error.  Results match the CPU kernels within float tolerance (not
 * bit-exactly: cuBLAS and the reductions here sum in another order).
 */
#ifndef SP_CUDA_H
#define SP_CUDA_H
#include <stddef.h>
#include <stdint.h>
#include "sp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if at least one CUDA device is visible; else 0 and the reason in why. */
int sp_cuda_available(char *why, size_t size);

typedef struct sp_cuda_ctx sp_cuda_ctx;   /* one device, one stream, one cuBLAS handle */
sp_status sp_cuda_ctx_create(int device, sp_cuda_ctx **out);
void sp_cuda_ctx_free(sp_cuda_ctx *c);
sp_status sp_cuda_sync(sp_cuda_ctx *c);

/* out (T,N) = in (T,K) @ w (K,N) [+ bias (N)]; accumulate: out += ... */
sp_status sp_cuda_matmul(sp_cuda_ctx *c, float *out, const float *in, const float *w, const float *bias,
                         int64_t T, int64_t K, int64_t N, int accumulate);
/* RMSNorm (layernorm = 0) or LayerNorm over rows of C; gain/bias may be NULL. */
sp_status sp_cuda_norm(sp_cuda_ctx *c, float *out, const float *x, int64_t T, int64_t C, const float *gain,
                       const float *bias, float eps, int layernorm);
/* Rotary embedding in place on x (T, nh, D), pos (T) int64: HF "rotate_half"
 * pairs (i, i + D/2), angle pos * theta^(-2i/D), as sp_kern_rope. */
sp_status sp_cuda_rope(sp_cuda_ctx *c, float *x, int64_t T, int64_t nh, int64_t D, const int64_t *pos,
                       double theta);
/* Causal attention over a KV cache k/v (B, KVH, Lmax, D) -- head-major, unlike
 * the CPU cache (B, ctx_max, KVHl, D) of sp_kern.h: q/out (B, Lq, H, D);
 * query i attends keys 0 .. pos0+i; head h reads kv head h / (H / KVH). */
sp_status sp_cuda_attention(sp_cuda_ctx *c, float *out, const float *q, const float *k, const float *v,
                            int64_t B, int64_t Lq, int64_t H, int64_t KVH, int64_t D, int64_t Lmax,
                            int64_t pos0);
sp_status sp_cuda_gelu(sp_cuda_ctx *c, float *out, const float *x, int64_t n);
sp_status sp_cuda_swiglu(sp_cuda_ctx *c, float *out, const float *gate, const float *up, int64_t n);
/* out (T, E) = rows tokens[t] - v0 of table (Vl rows, stride ld); zero rows outside [v0, v0+Vl). */
sp_status sp_cuda_embed(sp_cuda_ctx *c, float *out, const int32_t *tokens, int64_t T, const float *table,
                        int64_t ld, int64_t E, int64_t v0, int64_t Vl);
/* Greedy sampling: tokens[t] = argmax over V of logits (T, V) (lowest index on ties). */
sp_status sp_cuda_argmax(sp_cuda_ctx *c, int32_t *tokens, const float *logits, int64_t T, int64_t V);

#ifdef __cplusplus
}
#endif
#endif /* SP_CUDA_H */
