/*
 * sp_cuda.h: CUDA kernels of the executor (cuBLAS GEMM + own small kernels).
 * Built when configure found the toolkit (HAVE_CUDA); at run time every entry
 * point needs a visible GPU: sp_cuda_available() says whether there is one
 * and, if not, why (the cudaGetDeviceCount error), so `--backend cuda` can
 * report it and exit 2.
 *
 * All pointers passed to the kernels are DEVICE pointers, row-major, same
 * shapes and semantics as kernels/cpu/sp_kern.h: activations fp32; weights
 * (sp_cuda_matmul_wv) F32, BF16, F16, INT8 or FP8 with fp32 column scales,
 * tables F32, BF16 or F16, KV cache F32 or BF16, decoded and encoded by the
 * CPU kernels' own conversions (kernels/spi_conv.h).  Calls are
 * asynchronous on the context's stream; sp_cuda_sync waits and reports the
 * first error.  Results match the CPU kernels within float tolerance (not
 * bit-exactly: cuBLAS and the reductions here sum in another order).
 */
#ifndef SP_CUDA_H
#define SP_CUDA_H
#include <stddef.h>
#include <stdint.h>
#include "sp_common.h"
#include "sp_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if at least one CUDA device is visible; else 0 and the reason in why. */
int sp_cuda_available(char *why, size_t size);

typedef struct sp_cuda_ctx sp_cuda_ctx;   /* one device, one stream, one cuBLAS handle */
/* device < 0: the calling thread's current device (cudaGetDevice). */
sp_status sp_cuda_ctx_create(int device, sp_cuda_ctx **out);
void sp_cuda_ctx_free(sp_cuda_ctx *c);
sp_status sp_cuda_sync(sp_cuda_ctx *c);
/* device < 0: the current one.  Its name (into name, size bytes) and memory in bytes. */
sp_status sp_cuda_device_info(int device, char *name, size_t size, int64_t *bytes);

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
/* As sp_kern_rope_freqs: leading R dims, inv_freq (R/2 doubles) on the device, cos/sin times scale. */
sp_status sp_cuda_rope_freqs(sp_cuda_ctx *c, float *x, int64_t T, int64_t nh, int64_t D, int64_t R, const int64_t *pos,
                             const double *inv_freq, double scale);
/* Causal attention as sp_kern_attention, cache (dt F32 or BF16) in the CPU's layout:
 * k/v (B, ctx_max, KVHl, D) holding kv heads [kv0, kv0 + KVHl) of KVH; q/out
 * (B, Lq, Hl, D), local query heads [h0, h0 + Hl) of H; query i sits at
 * pos0 + i and attends keys 0 .. pos0+i; global head h reads kv head
 * h / (H / KVH), which must be local.  Context up to 12288 positions. */
sp_status sp_cuda_attention(sp_cuda_ctx *c, float *out, const float *q, sp_dtype dt, const void *k,
                            const void *v, int64_t B, int64_t ctx_max, int64_t KVHl, int64_t D, int64_t Lq, int64_t pos0,
                            int64_t H, int64_t KVH, int64_t h0, int64_t Hl, int64_t kv0);
sp_status sp_cuda_gelu(sp_cuda_ctx *c, float *out, const float *x, int64_t n);
sp_status sp_cuda_swiglu(sp_cuda_ctx *c, float *out, const float *gate, const float *up, int64_t n);
/* As sp_kern_act: out = act(x), times up when up is not NULL. */
sp_status sp_cuda_act(sp_cuda_ctx *c, float *out, const float *x, const float *up, int64_t n, sp_act_kind kind);
/* out (T, E) = rows tokens[t] - v0 of table (Vl rows, stride ld elements, dt F32 / BF16 / F16),
 * as fp32; zero rows outside [v0, v0+Vl). */
sp_status sp_cuda_embed(sp_cuda_ctx *c, float *out, const int32_t *tokens, int64_t T, sp_dtype dt, const void *table,
                        int64_t ld, int64_t E, int64_t v0, int64_t Vl);
/* Greedy sampling: tokens[t] = argmax over V of logits (T, V) (lowest index on ties). */
sp_status sp_cuda_argmax(sp_cuda_ctx *c, int32_t *tokens, const float *logits, int64_t T, int64_t V);


/* ---- device memory on the context's stream ------------------------------------- */
/* Zeroed allocation (cudaMalloc + memset on the stream); free with sp_cuda_free. */
sp_status sp_cuda_alloc(sp_cuda_ctx *c, size_t bytes, void **out);
void sp_cuda_free(sp_cuda_ctx *c, void *p);   /* NULL is a no-op */
/* Host -> device, queued on the stream (the host buffer may be reused at return). */
sp_status sp_cuda_upload(sp_cuda_ctx *c, void *dst, const void *src, size_t bytes);
/* Device -> host: waits for the stream, so dst holds the result at return. */
sp_status sp_cuda_download(sp_cuda_ctx *c, void *dst, const void *src, size_t bytes);
/* Device -> device block copy: rows of width bytes, pitches in bytes. */
sp_status sp_cuda_copy2d(sp_cuda_ctx *c, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t rows);
sp_status sp_cuda_zero(sp_cuda_ctx *c, void *p, size_t bytes);

/* ---- the executor's split kernels (same semantics as sp_kern.h) ------------------- */
/* stats (T, 2) = (sum, sumsq) of each row of x (T, Cl), accumulated in double. */
sp_status sp_cuda_norm_stats(sp_cuda_ctx *c, const float *x, int64_t T, int64_t Cl, float *stats);
/* out (T, Cl) from summed stats over the global width C, as sp_kern_norm_apply;
 * gain required, bias may be NULL; out may equal x. */
sp_status sp_cuda_norm_apply(sp_cuda_ctx *c, const float *x, const float *stats, int64_t C, int64_t T, int64_t Cl,
                             const float *gain, const float *bias, float eps, int layernorm, float *out);
/* out (T, N) += bias[j] on the columns j < nvalid. */
sp_status sp_cuda_bias_add(sp_cuda_ctx *c, float *out, const float *bias, int64_t T, int64_t N, int64_t nvalid);
sp_status sp_cuda_add(sp_cuda_ctx *c, float *out, const float *x, int64_t n);   /* out += x */
/* x (T, El) += table[pos[t] * ld + j] (table offset by the first column; dt F32 / BF16 / F16);
 * pos (T) device int64. */
sp_status sp_cuda_pos_add(sp_cuda_ctx *c, float *x, int64_t T, int64_t El, sp_dtype dt, const void *table,
                          int64_t ld, const int64_t *pos);
/* logits (T, Vl) = x (T, E) . table (Vl, E)^T, table rows of stride ld.  F32: one SGEMM; BF16 / F16:
 * tiles of as many rows as ws (ws_bytes, fp32 scratch) holds are decoded there, then SGEMM each
 * (SP_EINVAL when ws holds no row of E). */
sp_status sp_cuda_logits(sp_cuda_ctx *c, float *logits, const float *x, sp_dtype dt, const void *table, int64_t ld,
                         int64_t T, int64_t E, int64_t Vl, float *ws, size_t ws_bytes);

/* ---- stored dtypes -------------------------------------------------------------------- */
/* sp_kern_matmul on a weight view, without bias: out (T, N) = in (T, K) . W (K, N), accumulate:
 * out += ...; W element (k, n) at w[k * ld + n] of dtype dt, scale (N) per column for INT8 / FP8
 * (w = q * scale[n]).  F32: one SGEMM, ws unused.  Other dtypes: column tiles of W, as many
 * columns of K rows as the fp32 scratch ws (ws_bytes) holds, are dequantised there and
 * multiplied by SGEMM in turn (SP_EINVAL when ws holds no column).  ws is the caller's
 * workspace: the executor passes the lowering's, 64 columns of its tallest stored shard, so a
 * stored shard goes 64 or more columns a tile, a weight gathered over its rows (K = the shard's
 * rows times the gather group, at most 64 chips) fewer, never none.  T = 0 is a no-op. */
sp_status sp_cuda_matmul_wv(sp_cuda_ctx *c, float *out, const float *in, sp_dtype dt, const void *w, int64_t ld,
                            const float *scale, int64_t T, int64_t K, int64_t N, int accumulate, float *ws,
                            size_t ws_bytes);
/* sp_kern_kv_append on a cache of dt F32 or BF16 (converted on store, round to nearest even):
 * k, v (B, Lq, row) fp32 into positions pos0 .. pos0+Lq-1 of kc, vc (B, ctx_max, row). */
sp_status sp_cuda_kv_append(sp_cuda_ctx *c, sp_dtype dt, void *kc, void *vc, int64_t B, int64_t ctx_max, int64_t row,
                            const float *k, const float *v, int64_t Lq, int64_t pos0);

#ifdef __cplusplus
}
#endif
#endif /* SP_CUDA_H */
