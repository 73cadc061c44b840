/*
 * sp_kern.h: CPU compute kernels of the executor (and of nothing else).
 *
 * Activations are fp32 and row-major.  Weights reach a matmul through a
 * *weight view* so a kernel can multiply by a sub-block of a larger matrix
 * stored in F32, BF16, F16, INT8 or FP8 (E4M3); INT8/FP8 carry one scale per
 * output column.  Kernels never allocate: scratch is the caller's, sized by
 * the matching *_scratch_bytes() function.  Kernels that can fail return
 * sp_status (SP_EINVAL with a message in sp_last_error()); the rest are void.
 *
 *   sp_kern_wview w = { SP_DT_BF16, wq_bf16, N, NULL };     // W (K, N)
 *   size_t sb = sp_kern_matmul_scratch_bytes(&w, K, N);
 *   void *scr = malloc(sb);                                  // once per run
 *   sp_kern_matmul(out, x, &w, bias, T, K, N, SP_KERN_OVERWRITE, scr, sb);
 *
 * Dimension names as in sp_common.h: T tokens (= B*L), K/N matmul inner and
 * output widths, C norm width, Cl the local (per-chip) part of C, Hl / KVHl
 * local query / kv heads, D head width, V vocab, Vl local vocab rows.
 */
#ifndef SP_KERN_H
#define SP_KERN_H
#include <stddef.h>
#include <stdint.h>
#include "sp_common.h"
#include "sp_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- scalar conversions (kernels/spi_conv.h's, shared with kernels/cuda) ---- */
float sp_kern_bf16_to_f32(uint16_t h);
uint16_t sp_kern_f32_to_bf16(float f);          /* round to nearest even; NaN stays NaN */
float sp_kern_f16_to_f32(uint16_t h);
uint16_t sp_kern_f32_to_f16(float f);           /* round to nearest even */
float sp_kern_fp8_to_f32(uint8_t b);            /* OCP E4M3 (fn): bias 7, no inf, 0x7f/0xff NaN */
uint8_t sp_kern_f32_to_fp8(float f);            /* round to nearest, saturates at +-448 */

/* ---- matmul ------------------------------------------------------------------ */
/* A weight matrix W (K, N), or a sub-block of a larger one: element (k, n) is at
 * data[k * ld + n] in dtype dt.  scale: (N) per output column, required for
 * INT8 and FP8 (w = q * scale[n]), ignored (may be NULL) otherwise. */
typedef struct sp_kern_wview {
    sp_dtype dt;
    const void *data;    /* (K, ld) */
    int64_t ld;          /* row stride in elements, >= N */
    const float *scale;  /* (N) */
} sp_kern_wview;

enum { SP_KERN_OVERWRITE = 0, SP_KERN_ACCUMULATE = 1 };

/* Scratch bytes of sp_kern_matmul's full dequantised tile for this view and
 * shape: 0 for F32, (min(K, 256), min(N, 512)) floats otherwise.  Less is
 * accepted down to one column of the tile (min(K, 256) floats): the tile
 * narrows to the columns that fit (the executor gives it the lowering's
 * workspace), with the same results. */
size_t sp_kern_matmul_scratch_bytes(const sp_kern_wview *w, int64_t K, int64_t N);

/* out (T, N) = in (T, K) . W (K, N) [+ bias (N)]; with SP_KERN_ACCUMULATE
 * out += ... instead.  F32 goes straight to cblas_sgemm; other dtypes are
 * dequantised tile by tile into scratch, then sgemm.  out must not alias in. */
sp_status sp_kern_matmul(float *out, const float *in, const sp_kern_wview *w, const float *bias,
                         int64_t T, int64_t K, int64_t N, int mode, void *scratch, size_t scratch_bytes);

/* One BLAS thread per calling thread is the executor's rule; this sets the
 * BLAS pool size (openblas_set_num_threads when configure found it, else a
 * no-op that returns SP_ENOTSUP). */
sp_status sp_kern_set_blas_threads(int n);

/* ---- norms -------------------------------------------------------------------- */
/* Partial statistics of each row's local columns: stats (T, 2) = (sum, sumsq),
 * accumulated in double, stored as float.  Sharded norm: each chip computes its
 * stats over its Cl columns, the stats are all-reduced (summed) over the chips
 * sharing a row, then every chip applies with C = global row width. */
void sp_kern_norm_stats(const float *x, int64_t T, int64_t Cl, float *stats);
/* out (T, Cl) = norm(x (T, Cl)) * gain (Cl) [+ bias (Cl)] from summed stats.
 * LayerNorm: (x - mean) / sqrt(var + eps), var = sumsq/C - mean^2;
 * RMSNorm: x / sqrt(sumsq/C + eps) (sum unused).  out may equal x. */
void sp_kern_norm_apply(const float *x, const float *stats, int64_t C, int64_t T, int64_t Cl,
                        const float *gain, const float *bias, float eps, sp_norm_kind kind, float *out);
/* Plain (unsharded) form: stats + apply with Cl = C.  stats: (T, 2) scratch. */
void sp_kern_norm(const float *x, int64_t T, int64_t C, const float *gain, const float *bias, float eps,
                  sp_norm_kind kind, float *stats, float *out);

/* ---- positions ---------------------------------------------------------------- */
/* In place on x (T, nh, D): HF Llama "rotate_half" RoPE, pairs (i, i + D/2),
 * inv_freq_i = theta^(-2i/D), angle = pos[t] * inv_freq_i.  D must be even. */
sp_status sp_kern_rope(float *x, int64_t T, int64_t nh, int64_t D, const int64_t *pos, double theta);
/* The general form (sp_model_rope_freqs gives the frequencies): rotate_half
 * on the leading R dims of each head (pairs (i, i + R/2), i < R/2; dims R..D
 * untouched: partial rotary), angle = pos[t] * inv_freq[i], cos and sin
 * multiplied by scale (yarn's attention factor, else 1).  R even, <= D. */
sp_status sp_kern_rope_freqs(float *x, int64_t T, int64_t nh, int64_t D, int64_t R, const int64_t *pos,
                             const double *inv_freq, double scale);
/* Learned positions: x (T, El) += table[pos[t] * ld + j], j < El (pass the
 * table already offset by the chip's first column e0). */
void sp_kern_pos_add(float *x, int64_t T, int64_t El, const float *table, int64_t ld, const int64_t *pos);

/* ---- embeddings and LM head --------------------------------------------------- */
/* out (T, El) = rows of a table shard.  table points at the row of token v0 and
 * holds Vl rows of stride ld; columns [e0, e0 + El) are read.  A token outside
 * [v0, v0 + Vl) gives a zero row, so summing vocab shards gives the full
 * embedding.  Negative tokens -> SP_EINVAL. */
sp_status sp_kern_embed(float *out, const int32_t *tokens, int64_t T, const float *table, int64_t ld,
                        int64_t v0, int64_t Vl, int64_t e0, int64_t El);
/* logits (T, Vl) = x (T, E) . table (Vl, E)^T (table rows stride ld): the LM
 * head for a vocab shard, tied or untied (both stored (V, E)). */
void sp_kern_logits(float *logits, const float *x, const float *table, int64_t ld, int64_t T, int64_t E,
                    int64_t Vl);

/* The same for tables stored F32, BF16 or F16 (a view with no scales): the
 * vocabulary tables and learned positions stay 16-bit under weight-only
 * int8/fp8 quantisation.  pos_add reads columns [e0, e0 + El) of the table. */
sp_status sp_kern_embed_wv(float *out, const int32_t *tokens, int64_t T, const sp_kern_wview *table, int64_t v0,
                           int64_t Vl, int64_t e0, int64_t El);
sp_status sp_kern_pos_add_wv(float *x, int64_t T, int64_t El, const sp_kern_wview *table, int64_t e0,
                             const int64_t *pos);
/* Scratch for sp_kern_logits_wv: 0 for F32, else SP_KERN_LOGITS_TILE rows of
 * E fp32; less is accepted down to one row (the tile takes the rows that fit). */
#define SP_KERN_LOGITS_TILE 64
size_t sp_kern_logits_scratch_bytes(const sp_kern_wview *table, int64_t E);
sp_status sp_kern_logits_wv(float *logits, const float *x, const sp_kern_wview *table, int64_t T, int64_t E,
                            int64_t Vl, void *scratch, size_t scratch_bytes);

/* ---- attention ---------------------------------------------------------------- */
/* KV cache of the local kv heads of one layer: k, v (B, ctx_max, KVHl, D),
 * F32 or BF16 elements. */
typedef struct sp_kern_kv {
    sp_dtype dt;
    void *k;             /* (B, ctx_max, KVHl, D) */
    void *v;             /* (B, ctx_max, KVHl, D) */
    int64_t B, ctx_max, KVHl, D;
} sp_kern_kv;

/* Writes k, v (B, Lq, KVHl, D) at positions pos0 .. pos0+Lq-1 of every sequence. */
sp_status sp_kern_kv_append(sp_kern_kv *kv, const float *k, const float *v, int64_t Lq, int64_t pos0);

size_t sp_kern_attention_scratch_bytes(int64_t ctx_max);

/* Causal attention of local query heads [h0, h0+Hl) of H global over the cache
 * of local kv heads [kv0, kv0+KVH_l) of KVH global (kv->KVHl).  Global query
 * head h reads kv head h / (H / KVH) which must be local.  Query i of sequence
 * b sits at position pos0+i and attends keys 0 .. pos0+i (already appended).
 * Scores scaled by 1/sqrt(D), softmax in fp32 with max subtraction.
 * q, out (B, Lq, Hl, D); out may not alias q.  scratch: attention_scratch_bytes. */
sp_status sp_kern_attention(float *out, const float *q, const sp_kern_kv *kv, int64_t Lq, int64_t pos0,
                            int64_t H, int64_t KVH, int64_t h0, int64_t Hl, int64_t kv0,
                            void *scratch, size_t scratch_bytes);

/* ---- elementwise -------------------------------------------------------------- */
void sp_kern_gelu(float *out, const float *x, int64_t n);             /* tanh approximation (GPT-2); out may equal x */
void sp_kern_swiglu(float *out, const float *gate, const float *up, int64_t n); /* silu(gate) * up */
/* out = act(x), or act(x) * up when up is not NULL (gated FFN); out may
 * equal x.  kind: GELU_TANH 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))),
 * GELU 0.5x(1 + erf(x/sqrt 2)), SILU x/(1 + e^-x), RELU max(x, 0); AUTO is
 * not a kind here (sp_model_act resolves it). */
void sp_kern_act(float *out, const float *x, const float *up, int64_t n, sp_act_kind kind);
void sp_kern_add(float *out, const float *x, int64_t n);              /* out += x (residual) */

/* ---- mixture of experts ---------------------------------------------------------- */
/* One routing choice of a token: its expert, the slot it takes among that
 * expert's tokens (in token order, then choice order), and its weight. */
typedef struct sp_kern_route {
    int32_t expert, slot;
    float weight;
} sp_kern_route;
/* route (T, k) from router logits (T, n): softmax over the n experts (fp64),
 * the k largest (ties: the lower expert), weights renormalised to sum 1 when
 * renorm (Mixtral) or kept as probabilities.  counts (n) is scratch: on
 * return the tokens each expert received. */
void sp_kern_moe_route(sp_kern_route *route, const float *logits, int64_t T, int64_t n, int64_t k, int renorm,
                       int64_t *counts);
/* slots (n·S, C) = each token's row x (T, C; rows ldx apart, ldx >= C) in
 * the slots of its k experts (expert e's slots are rows e·S .. e·S+S-1;
 * unused slots zero).  SP_EINFEASIBLE naming the expert when one receives
 * more than S tokens (no token is dropped). */
sp_status sp_kern_moe_dispatch(float *slots, const float *x, int64_t ldx, const sp_kern_route *route, int64_t T,
                               int64_t C, int64_t k, int64_t n, int64_t S);
/* x (T, C): row t *= sigmoid(g[t]) (Qwen2-MoE's shared expert gate). */
void sp_kern_sigmoid_scale_rows(float *x, const float *g, int64_t T, int64_t C);
/* y (T, C) (+)= Σ over a token's k choices of weight · its slot row. */
void sp_kern_moe_combine(float *y, const float *slots, const sp_kern_route *route, int64_t T, int64_t C, int64_t k,
                         int64_t S, int accumulate);

/* ---- sampling (full-vocab logits) ----------------------------------------------- */
/* splitmix64: state advances by a constant, output mixes it.  Deterministic. */
uint64_t sp_kern_rng_next(uint64_t *state);
float sp_kern_rng_float(uint64_t *state);                             /* [0, 1), 24 bits */
/* Greedy: index of the largest logit, ties -> lowest id; NaN never wins. */
int32_t sp_kern_argmax(const float *logits, int64_t V);

typedef struct sp_kern_sample_opts {
    float temperature;   /* <= 0: greedy */
    int64_t top_k;       /* <= 0 or >= V: no top-k cut */
    float top_p;         /* >= 1: no nucleus cut */
    uint64_t seed;       /* initial RNG state for sp_kern_sample callers that keep one */
} sp_kern_sample_opts;
void sp_kern_sample_opts_init(sp_kern_sample_opts *o);   /* greedy, top_k 0, top_p 1, seed 0 */
/* V candidates of SP_SAMPLE_CAND_BYTES (sp_lower.h sizes the executor's from it) */
size_t sp_kern_sample_scratch_bytes(int64_t V);
/* Samples one token: softmax(logits / temperature) restricted to the top_k
 * largest, then to the smallest prefix (by descending probability, ties by id)
 * with mass >= top_p; one draw from *rng. */
sp_status sp_kern_sample(const float *logits, int64_t V, const sp_kern_sample_opts *o, uint64_t *rng,
                         void *scratch, size_t scratch_bytes, int32_t *token);

#ifdef __cplusplus
}
#endif
#endif
