/* kernels.cu: CUDA kernels of the executor (see sp_cuda.h). */
#include "config.h"
#include "kernels/cuda/spi_cuda_dl.h"
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/cuda/sp_cuda.h"
#include "kernels/spi_conv.h"

extern "C" sp_status spi_fail(sp_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

struct sp_cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
};

#define CU(call, what)                                                                          \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) return spi_fail(SP_ECUDA, "%s: %s", what, cudaGetErrorString(e_)); \
    } while (0)

static sp_status launched(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return spi_fail(SP_ECUDA, "%s launch: %s", what, cudaGetErrorString(e));
    return SP_OK;
}

extern "C" int sp_cuda_available(char *why, size_t size)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why && size) snprintf(why, size, "no usable CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 0;
    }
    if (n < 1) {
        if (why && size) snprintf(why, size, "no CUDA device visible (cudaGetDeviceCount = 0)");
        return 0;
    }
    if (why && size) snprintf(why, size, "%d CUDA device%s", n, n == 1 ? "" : "s");
    return 1;
}

extern "C" sp_status sp_cuda_device_info(int device, char *name, size_t size, int64_t *bytes)
{
    cudaDeviceProp p;
    if (device < 0) CU(cudaGetDevice(&device), "cudaGetDevice");
    CU(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    if (name && size) snprintf(name, size, "%s", p.name);
    if (bytes) *bytes = (int64_t)p.totalGlobalMem;
    return SP_OK;
}

extern "C" sp_status sp_cuda_ctx_create(int device, sp_cuda_ctx **out)
{
    if (!out) return spi_fail(SP_EINVAL, "sp_cuda_ctx_create: out is NULL");
    *out = NULL;
    char why[256];
    if (!sp_cuda_available(why, sizeof why)) return spi_fail(SP_ECUDA, "%s", why);
    sp_cuda_ctx *c = (sp_cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return spi_fail(SP_ENOMEM, "out of memory for a CUDA context");
    cudaError_t e = device < 0 ? cudaGetDevice(&device) : cudaSuccess;
    c->device = device;
    if (e == cudaSuccess) e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(c);
        return spi_fail(SP_ECUDA, "CUDA device %d: %s", device, cudaGetErrorString(e));
    }
    if (spi_cuda_dl_load(1, 0) != SP_OK) {
        cudaStreamDestroy(c->stream);
        free(c);
        return SP_ECUDA;
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(c->stream);
        free(c);
        return spi_fail(SP_ECUDA, "cublasCreate failed on device %d", device);
    }
    *out = c;
    return SP_OK;
}

extern "C" void sp_cuda_ctx_free(sp_cuda_ctx *c)
{
    if (!c) return;
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" sp_status sp_cuda_sync(sp_cuda_ctx *c)
{
    CU(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    return SP_OK;
}

static unsigned blocks_for(int64_t n, unsigned t) { return (unsigned)((n + t - 1) / t); }

/* out (T, N) += bias (nvalid) on columns j < nvalid */
__global__ void add_bias_k(float *out, const float *bias, int64_t T, int64_t N, int64_t nvalid)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < T * N && i % N < nvalid) out[i] += bias[i % N];
}

/* ---- stored dtypes (weights, tables) --------------------------------------------- */
static int is_stored_dt(sp_dtype dt) { return (unsigned)dt < (unsigned)SP_DT_COUNT; }
static int is_table_dt(sp_dtype dt) { return dt == SP_DT_F32 || dt == SP_DT_BF16 || dt == SP_DT_F16; }

/* element i of a stored array as fp32 (spi_conv.h, the CPU kernels' decoders);
 * INT8 / FP8 times scale, the element's column scale */
__device__ __forceinline__ float stored_at(const void *p, sp_dtype dt, int64_t i, float scale)
{
    switch (dt) {
    case SP_DT_BF16: return spi_bf16_to_f32(((const uint16_t *)p)[i]);
    case SP_DT_F16: return spi_f16_to_f32(((const uint16_t *)p)[i]);
    case SP_DT_INT8: return spi_int8_to_f32(((const int8_t *)p)[i], scale);
    case SP_DT_FP8: return spi_fp8_scaled_to_f32(((const uint8_t *)p)[i], scale);
    default: return ((const float *)p)[i];
    }
}

/* dst (rows, cols) fp32 = block [r0, r0+rows) x [c0, c0+cols) of src (row stride ld), column c scaled
 * by scale[c0 + c] (INT8 / FP8) */
__global__ void dequant_k(float *dst, const void *src, sp_dtype dt, int64_t ld, const float *scale, int64_t r0,
                          int64_t rows, int64_t c0, int64_t cols)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    int64_t r = i / cols, col = c0 + i % cols;
    dst[i] = stored_at(src, dt, (r0 + r) * ld + col, scale ? scale[col] : 1.0f);
}

static sp_status dequant(sp_cuda_ctx *c, float *dst, const void *src, sp_dtype dt, int64_t ld, const float *scale,
                         int64_t r0, int64_t rows, int64_t c0, int64_t cols)
{
    dequant_k<<<blocks_for(rows * cols, 256), 256, 0, c->stream>>>(dst, src, dt, ld, scale, r0, rows, c0, cols);
    return launched("dequant");
}

/* out (T, N) row stride ldo (+)= in (T, K) . w (K, N) row stride ldw, all fp32 */
static sp_status gemm_nn(sp_cuda_ctx *c, float *out, int64_t ldo, const float *in, const float *w, int64_t ldw,
                         int64_t T, int64_t K, int64_t N, float beta)
{
    const float alpha = 1.0f;
    /* Row-major out = in @ w is column-major out^T = w^T in^T. */
    cublasStatus_t s = cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)T, (int)K, &alpha, w, (int)ldw,
                                   in, (int)K, &beta, out, (int)ldo);
    if (s != CUBLAS_STATUS_SUCCESS) return spi_fail(SP_ECUDA, "cublasSgemm failed (status %d)", (int)s);
    return SP_OK;
}

/* Decode-sized products (T <= SMALL_T rows) over 16- and 8-bit weights, without
 * the workspace: out (T, N) (+)= in (T, K) . dec(W (K, ld))[:, :N].  A block is
 * 32 columns x 8 slices of K: each thread sums its slice of its column for the
 * T rows in registers (consecutive threads read consecutive columns of a weight
 * row), then the 8 slices add up in shared memory.  Bound by the weight bytes,
 * as a decode step is.  The tile path below launches a dequantisation and an
 * SGEMM per column tile of the workspace: calibrate --backend cuda measured it
 * at ~15 GB/s of bf16 weights at T = 1 on an H100 (the SGEMM path over fp32
 * weights: 2.9 TB/s). */
#define SMALL_T 8
#define SMALL_COLS 32
#define SMALL_SLICES 8
__global__ void matmul_wv_small_k(float *out, const float *in, sp_dtype dt, const void *w, int64_t ld,
                                  const float *scale, int T, int64_t K, int64_t N, int accumulate)
{
    __shared__ float part[SMALL_SLICES][SMALL_T][SMALL_COLS];
    int64_t n = (int64_t)blockIdx.x * SMALL_COLS + threadIdx.x;
    float acc[SMALL_T];
#pragma unroll
    for (int t = 0; t < SMALL_T; t++) acc[t] = 0.0f;
    if (n < N) {
        float s = scale ? scale[n] : 1.0f;
        for (int64_t k = threadIdx.y; k < K; k += SMALL_SLICES) {
            float v = stored_at(w, dt, k * ld + n, s);
#pragma unroll
            for (int t = 0; t < SMALL_T; t++)
                if (t < T) acc[t] += in[(int64_t)t * K + k] * v;
        }
    }
#pragma unroll
    for (int t = 0; t < SMALL_T; t++) part[threadIdx.y][t][threadIdx.x] = acc[t];
    __syncthreads();
    if (threadIdx.y || n >= N) return;
    for (int t = 0; t < T; t++) {
        float sum = 0.0f;
        for (int y = 0; y < SMALL_SLICES; y++) sum += part[y][t][threadIdx.x];
        float *o = out + (int64_t)t * N + n;
        *o = accumulate ? *o + sum : sum;
    }
}

extern "C" sp_status sp_cuda_matmul_wv(sp_cuda_ctx *c, float *out, const float *in, sp_dtype dt, const void *w,
                                       int64_t ld, const float *scale, int64_t T, int64_t K, int64_t N,
                                       int accumulate, float *ws, size_t ws_bytes)
{
    if (T == 0) return SP_OK;
    if (T < 0 || N <= 0 || K <= 0 || ld < N || T > INT32_MAX || K > INT32_MAX || ld > INT32_MAX)
        return spi_fail(SP_EINVAL, "sp_cuda_matmul_wv: bad shape T=%lld K=%lld N=%lld ld=%lld", (long long)T,
                        (long long)K, (long long)N, (long long)ld);
    if (!is_stored_dt(dt)) return spi_fail(SP_EINVAL, "sp_cuda_matmul_wv: unknown weight dtype %d", (int)dt);
    if ((dt == SP_DT_INT8 || dt == SP_DT_FP8) && !scale)
        return spi_fail(SP_EINVAL, "sp_cuda_matmul_wv: %s weights need per-column scales", sp_dtype_name(dt));
    float beta = accumulate ? 1.0f : 0.0f;
    if (dt == SP_DT_F32) return gemm_nn(c, out, N, in, (const float *)w, ld, T, K, N, beta);
    /* column tiles of as many columns as the workspace holds (K rows each) */
    int64_t nb = (int64_t)(ws ? ws_bytes / ((size_t)K * sizeof(float)) : 0);
    if (nb < 1)
        return spi_fail(SP_EINVAL, "sp_cuda_matmul_wv: a workspace of %zu bytes holds no column of %lld fp32 rows",
                        ws ? ws_bytes : 0, (long long)K);
    if (nb > N) nb = N;
    if (T <= SMALL_T) {   /* the workspace is the program's either way: checked above */
        dim3 block(SMALL_COLS, SMALL_SLICES);
        matmul_wv_small_k<<<(unsigned)((N + SMALL_COLS - 1) / SMALL_COLS), block, 0, c->stream>>>(
            out, in, dt, w, ld, scale, (int)T, K, N, accumulate);
        return launched("matmul_wv_small");
    }
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t cols = N - n0 < nb ? N - n0 : nb;
        /* ws (K, cols) = dequant(W[:, n0:n0+cols]); out[:, n0:n0+cols] (+)= in . ws.  One stream:
         * the next tile overwrites ws after this GEMM has read it. */
        sp_status st = dequant(c, ws, w, dt, ld, scale, 0, K, n0, cols);
        if (!st) st = gemm_nn(c, out + n0, N, in, ws, cols, T, K, cols, beta);
        if (st) return st;
    }
    return SP_OK;
}

extern "C" sp_status sp_cuda_matmul(sp_cuda_ctx *c, float *out, const float *in, const float *w,
                                    const float *bias, int64_t T, int64_t K, int64_t N, int accumulate)
{
    if (T <= 0 || N <= 0 || K < 0 || T > INT32_MAX || K > INT32_MAX || N > INT32_MAX)
        return spi_fail(SP_EINVAL, "sp_cuda_matmul: bad shape T=%lld K=%lld N=%lld", (long long)T,
                        (long long)K, (long long)N);
    sp_status st = gemm_nn(c, out, N, in, w, N, T, K, N, accumulate ? 1.0f : 0.0f);
    if (st || !bias) return st;
    add_bias_k<<<blocks_for(T * N, 256), 256, 0, c->stream>>>(out, bias, T, N, N);
    return launched("add_bias");
}

/* Sum and sum of squares of row (C) in double, by the whole block (256 threads);
 * every thread gets the totals. */
__device__ void row_stats(const float *row, int64_t C, double *sum, double *sumsq)
{
    __shared__ double ssum[256], ssq[256];
    double s = 0, q = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        s += row[i];
        q += (double)row[i] * row[i];
    }
    ssum[threadIdx.x] = s;
    ssq[threadIdx.x] = q;
    __syncthreads();
    for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) {
            ssum[threadIdx.x] += ssum[threadIdx.x + st];
            ssq[threadIdx.x] += ssq[threadIdx.x + st];
        }
        __syncthreads();
    }
    *sum = ssum[0];
    *sumsq = ssq[0];
}

/* One block per row. */
__global__ void norm_k(float *out, const float *x, int64_t C, const float *gain, const float *bias, float eps,
                       int layernorm)
{
    const float *row = x + (int64_t)blockIdx.x * C;
    float *orow = out + (int64_t)blockIdx.x * C;
    double sum, sumsq;
    row_stats(row, C, &sum, &sumsq);
    double mean = layernorm ? sum / (double)C : 0.0;
    double var = sumsq / (double)C - mean * mean;
    float inv = (float)(1.0 / sqrt(var + (double)eps));
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        float y = (row[i] - (float)mean) * inv;
        if (gain) y *= gain[i];
        if (bias) y += bias[i];
        orow[i] = y;
    }
}

extern "C" sp_status sp_cuda_norm(sp_cuda_ctx *c, float *out, const float *x, int64_t T, int64_t C,
                                  const float *gain, const float *bias, float eps, int layernorm)
{
    if (T <= 0 || C <= 0 || T > INT32_MAX) return spi_fail(SP_EINVAL, "sp_cuda_norm: bad shape");
    norm_k<<<(unsigned)T, 256, 0, c->stream>>>(out, x, C, gain, bias, eps, layernorm);
    return launched("norm");
}

/* inv: R/2 inverse frequencies (device), or NULL for theta^(-2p/R) */
__global__ void rope_k(float *x, int64_t T, int64_t nh, int64_t D, int64_t R, const int64_t *pos, const double *inv,
                       double theta, double scale)
{
    int64_t half = R / 2, n = T * nh * half;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t p = i % half, th = i / half, t = th / nh;
    double f = inv ? inv[p] : pow(theta, -2.0 * (double)p / (double)R);
    double a = (double)pos[t] * f;
    float cs = (float)(cos(a) * scale), sn = (float)(sin(a) * scale);
    /* HF rotate_half, as sp_kern_rope_freqs: pairs (p, p + R/2) of the leading R dims */
    float *v = x + th * D + p;
    float x0 = v[0], x1 = v[half];
    v[0] = x0 * cs - x1 * sn;
    v[half] = x1 * cs + x0 * sn;
}

extern "C" sp_status sp_cuda_rope(sp_cuda_ctx *c, float *x, int64_t T, int64_t nh, int64_t D, const int64_t *pos,
                                  double theta)
{
    if (T <= 0 || nh <= 0 || D <= 0 || D % 2) return spi_fail(SP_EINVAL, "sp_cuda_rope: bad shape (D must be even)");
    int64_t n = T * nh * (D / 2);
    rope_k<<<blocks_for(n, 256), 256, 0, c->stream>>>(x, T, nh, D, D, pos, NULL, theta, 1.0);
    return launched("rope");
}

extern "C" sp_status sp_cuda_rope_freqs(sp_cuda_ctx *c, float *x, int64_t T, int64_t nh, int64_t D, int64_t R,
                                        const int64_t *pos, const double *inv_freq, double scale)
{
    if (T <= 0 || nh <= 0 || D <= 0 || R <= 0 || R % 2 || R > D)
        return spi_fail(SP_EINVAL, "sp_cuda_rope_freqs: bad shape (R even, <= D)");
    int64_t n = T * nh * (R / 2);
    rope_k<<<blocks_for(n, 256), 256, 0, c->stream>>>(x, T, nh, D, R, pos, inv_freq, 0.0, scale);
    return launched("rope");
}

/* KV cache elements: fp32, or bf16 encoded / decoded as the CPU's cache */
__device__ __forceinline__ float kv_get(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float kv_get(const uint16_t *p, int64_t i) { return spi_bf16_to_f32(p[i]); }
__device__ __forceinline__ void kv_put(float *p, int64_t i, float x) { p[i] = x; }
__device__ __forceinline__ void kv_put(uint16_t *p, int64_t i, float x) { p[i] = spi_f32_to_bf16(x); }

/* k, v (B, Lq, row) into positions pos0.. of the caches (B, ctx_max, row) */
template <typename KV>
__global__ void kv_append_k(KV *kc, KV *vc, const float *k, const float *v, int64_t ctx_max, int64_t row, int64_t Lq,
                            int64_t pos0, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t b = i / (Lq * row), off = (b * ctx_max + pos0) * row + i % (Lq * row);
    kv_put(kc, off, k[i]);
    kv_put(vc, off, v[i]);
}

extern "C" sp_status sp_cuda_kv_append(sp_cuda_ctx *c, sp_dtype dt, void *kc, void *vc, int64_t B, int64_t ctx_max,
                                       int64_t row, const float *k, const float *v, int64_t Lq, int64_t pos0)
{
    if (dt != SP_DT_F32 && dt != SP_DT_BF16)
        return spi_fail(SP_ENOTSUP, "KV cache dtype %s not supported (F32 or BF16)", sp_dtype_name(dt));
    if (B <= 0 || row <= 0 || Lq < 0 || pos0 < 0 || pos0 + Lq > ctx_max)
        return spi_fail(SP_EINVAL, "KV append of %lld tokens at %lld overflows the cache of %lld", (long long)Lq,
                        (long long)pos0, (long long)ctx_max);
    int64_t n = B * Lq * row;
    if (n == 0) return SP_OK;
    if (dt == SP_DT_F32)
        kv_append_k<<<blocks_for(n, 256), 256, 0, c->stream>>>((float *)kc, (float *)vc, k, v, ctx_max, row, Lq,
                                                                pos0, n);
    else
        kv_append_k<<<blocks_for(n, 256), 256, 0, c->stream>>>((uint16_t *)kc, (uint16_t *)vc, k, v, ctx_max, row,
                                                                Lq, pos0, n);
    return launched("kv_append");
}

/* One block per (b, i, hl): scores in shared memory, max / exp / sum, then P @ V.
 * Cache (B, ctx_max, KVHl, D) as the CPU's; global query head h0 + hl reads
 * local kv head (h0 + hl) / (H / KVH) - kv0. */
template <typename KV>
__global__ void attention_k(float *out, const float *q, const KV *k, const KV *v, int64_t ctx_max,
                            int64_t KVHl, int64_t D, int64_t Lq, int64_t pos0, int64_t kv_mul, int64_t h0,
                            int64_t Hl, int64_t kv0)
{
    extern __shared__ float sm[];
    __shared__ float red[256];
    int64_t hl = blockIdx.x % Hl, bi = blockIdx.x / Hl, i = bi % Lq, b = bi / Lq;
    int64_t kvl = (h0 + hl) / kv_mul - kv0, nk = pos0 + i + 1;
    const float *qr = q + ((b * Lq + i) * Hl + hl) * D;   // (D)
    const KV *kb = k + (b * ctx_max * KVHl + kvl) * D, *vb = v + (b * ctx_max * KVHl + kvl) * D;
    int64_t kst = KVHl * D;                                 // stride between positions
    float scale = 1.0f / sqrtf((float)D), mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
        float s = 0;
        for (int64_t d = 0; d < D; d++) s += qr[d] * kv_get(kb, j * kst + d);
        sm[j] = s * scale;
        mx = fmaxf(mx, sm[j]);
    }
    red[threadIdx.x] = mx;
    __syncthreads();
    for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + st]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    float sum = 0;
    for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
        sm[j] = expf(sm[j] - mx);
        sum += sm[j];
    }
    red[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) red[threadIdx.x] += red[threadIdx.x + st];
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    float *o = out + ((b * Lq + i) * Hl + hl) * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0;
        for (int64_t j = 0; j < nk; j++) acc += sm[j] * kv_get(vb, j * kst + d);
        o[d] = acc * inv;
    }
}

extern "C" sp_status sp_cuda_attention(sp_cuda_ctx *c, float *out, const float *q, sp_dtype dt, const void *k,
                                       const void *v, int64_t B, int64_t ctx_max, int64_t KVHl, int64_t D, int64_t Lq,
                                       int64_t pos0, int64_t H, int64_t KVH, int64_t h0, int64_t Hl, int64_t kv0)
{
    if (B <= 0 || Lq <= 0 || H <= 0 || KVH <= 0 || H % KVH || D <= 0 || KVHl <= 0 || pos0 < 0 ||
        pos0 + Lq > ctx_max || h0 < 0 || Hl <= 0 || h0 + Hl > H || kv0 < 0 || kv0 + KVHl > KVH)
        return spi_fail(SP_EINVAL, "sp_cuda_attention: bad shape (B %lld, Lq %lld at %lld of %lld, heads [%lld, "
                        "%lld) of %lld, kv heads [%lld, %lld) of %lld)", (long long)B, (long long)Lq,
                        (long long)pos0, (long long)ctx_max, (long long)h0, (long long)(h0 + Hl), (long long)H,
                        (long long)kv0, (long long)(kv0 + KVHl), (long long)KVH);
    if (dt != SP_DT_F32 && dt != SP_DT_BF16)
        return spi_fail(SP_ENOTSUP, "KV cache dtype %s not supported (F32 or BF16)", sp_dtype_name(dt));
    int64_t kv_mul = H / KVH;
    if (h0 / kv_mul < kv0 || (h0 + Hl - 1) / kv_mul >= kv0 + KVHl)
        return spi_fail(SP_EINVAL, "sp_cuda_attention: query heads [%lld, %lld) need kv heads the cache lacks",
                        (long long)h0, (long long)(h0 + Hl));
    size_t shm = (size_t)(pos0 + Lq) * sizeof(float);
    if (shm > 48 * 1024)
        return spi_fail(SP_ENOTSUP, "sp_cuda_attention: context %lld > 12288 positions not supported yet",
                        (long long)(pos0 + Lq));
    if (B * Lq * Hl > INT32_MAX) return spi_fail(SP_ENOTSUP, "sp_cuda_attention: grid too large");
    unsigned grid = (unsigned)(B * Lq * Hl);
    if (dt == SP_DT_F32)
        attention_k<<<grid, 256, shm, c->stream>>>(out, q, (const float *)k, (const float *)v, ctx_max, KVHl, D, Lq,
                                                   pos0, kv_mul, h0, Hl, kv0);
    else
        attention_k<<<grid, 256, shm, c->stream>>>(out, q, (const uint16_t *)k, (const uint16_t *)v, ctx_max, KVHl, D,
                                                   Lq, pos0, kv_mul, h0, Hl, kv0);
    return launched("attention");
}

/* as sp_kern_act: act(x) (* up) */
__global__ void act_k(float *out, const float *x, const float *up, int64_t n, int kind)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float y = x[i], r;
    switch (kind) {
    case SP_ACT_GELU: r = 0.5f * y * (1.0f + erff(y * 0.7071067811865476f)); break;
    case SP_ACT_SILU: r = y / (1.0f + expf(-y)); break;
    case SP_ACT_RELU: r = y > 0.0f ? y : 0.0f; break;
    default: r = 0.5f * y * (1.0f + tanhf(0.7978845608f * (y + 0.044715f * y * y * y))); break;
    }
    out[i] = up ? r * up[i] : r;
}

extern "C" sp_status sp_cuda_act(sp_cuda_ctx *c, float *out, const float *x, const float *up, int64_t n, sp_act_kind kind)
{
    if (n <= 0) return SP_OK;
    act_k<<<blocks_for(n, 256), 256, 0, c->stream>>>(out, x, up, n, (int)kind);
    return launched("act");
}

extern "C" sp_status sp_cuda_gelu(sp_cuda_ctx *c, float *out, const float *x, int64_t n)
{
    return sp_cuda_act(c, out, x, NULL, n, SP_ACT_GELU_TANH);
}

extern "C" sp_status sp_cuda_swiglu(sp_cuda_ctx *c, float *out, const float *gate, const float *up, int64_t n)
{
    return sp_cuda_act(c, out, gate, up, n, SP_ACT_SILU);
}

__global__ void embed_k(float *out, const int32_t *tok, int64_t T, sp_dtype dt, const void *table, int64_t ld,
                        int64_t E, int64_t v0, int64_t Vl)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * E) return;
    int64_t t = i / E, e = i % E, r = (int64_t)tok[t] - v0;
    out[i] = (r >= 0 && r < Vl) ? stored_at(table, dt, r * ld + e, 1.0f) : 0.0f;
}

static sp_status table_dt_ok(sp_dtype dt)
{
    if (is_table_dt(dt)) return SP_OK;
    return spi_fail(SP_ENOTSUP, "tables are stored f32, bf16 or f16, not %s", sp_dtype_name(dt));
}

extern "C" sp_status sp_cuda_embed(sp_cuda_ctx *c, float *out, const int32_t *tokens, int64_t T, sp_dtype dt,
                                   const void *table, int64_t ld, int64_t E, int64_t v0, int64_t Vl)
{
    if (T <= 0 || E <= 0 || ld < E) return spi_fail(SP_EINVAL, "sp_cuda_embed: bad shape");
    sp_status st = table_dt_ok(dt);
    if (st) return st;
    embed_k<<<blocks_for(T * E, 256), 256, 0, c->stream>>>(out, tokens, T, dt, table, ld, E, v0, Vl);
    return launched("embed");
}

/* One block per row; lowest index wins ties. */
__global__ void argmax_k(int32_t *tok, const float *logits, int64_t V)
{
    __shared__ float bv[256];
    __shared__ int64_t bi[256];
    const float *row = logits + (int64_t)blockIdx.x * V;
    float best = -INFINITY;
    int64_t idx = V;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
        if (row[j] > best || (row[j] == best && j < idx)) best = row[j], idx = j;
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) {
            float ov = bv[threadIdx.x + st];
            int64_t oi = bi[threadIdx.x + st];
            if (ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < bi[threadIdx.x])) {
                bv[threadIdx.x] = ov;
                bi[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) tok[blockIdx.x] = (int32_t)(bi[0] < V ? bi[0] : 0);
}

extern "C" sp_status sp_cuda_argmax(sp_cuda_ctx *c, int32_t *tokens, const float *logits, int64_t T, int64_t V)
{
    if (T <= 0 || V <= 0 || T > INT32_MAX) return spi_fail(SP_EINVAL, "sp_cuda_argmax: bad shape");
    argmax_k<<<(unsigned)T, 256, 0, c->stream>>>(tokens, logits, V);
    return launched("argmax");
}

/* ---- memory ------------------------------------------------------------------- */
extern "C" sp_status sp_cuda_alloc(sp_cuda_ctx *c, size_t bytes, void **out)
{
    *out = NULL;
    CU(cudaMalloc(out, bytes ? bytes : 1), "cudaMalloc");
    cudaError_t e = cudaMemsetAsync(*out, 0, bytes ? bytes : 1, c->stream);
    if (e != cudaSuccess) {
        cudaFree(*out);
        *out = NULL;
        return spi_fail(SP_ECUDA, "cudaMemsetAsync: %s", cudaGetErrorString(e));
    }
    return SP_OK;
}

extern "C" void sp_cuda_free(sp_cuda_ctx *c, void *p)
{
    (void)c;
    if (p) cudaFree(p);
}

extern "C" sp_status sp_cuda_upload(sp_cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), "cudaMemcpyAsync H2D");
    return SP_OK;
}

extern "C" sp_status sp_cuda_download(sp_cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "cudaMemcpyAsync D2H");
    return sp_cuda_sync(c);
}

extern "C" sp_status sp_cuda_copy2d(sp_cuda_ctx *c, void *dst, size_t dpitch, const void *src, size_t spitch,
                                    size_t width, size_t rows)
{
    if (!width || !rows) return SP_OK;
    CU(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice, c->stream),
       "cudaMemcpy2DAsync");
    return SP_OK;
}

extern "C" sp_status sp_cuda_zero(sp_cuda_ctx *c, void *p, size_t bytes)
{
    if (bytes) CU(cudaMemsetAsync(p, 0, bytes, c->stream), "cudaMemsetAsync");
    return SP_OK;
}

/* ---- the split norm, bias, residual, positions, LM head --------------------------- */
/* One block per row: (sum, sumsq) of the row's Cl columns, in double, stored as float. */
__global__ void norm_stats_k(const float *x, int64_t Cl, float *stats)
{
    double sum, sumsq;
    row_stats(x + (int64_t)blockIdx.x * Cl, Cl, &sum, &sumsq);
    if (threadIdx.x == 0) {
        stats[2 * blockIdx.x] = (float)sum;
        stats[2 * blockIdx.x + 1] = (float)sumsq;
    }
}

extern "C" sp_status sp_cuda_norm_stats(sp_cuda_ctx *c, const float *x, int64_t T, int64_t Cl, float *stats)
{
    if (T <= 0) return SP_OK;
    if (Cl <= 0 || T > INT32_MAX) return spi_fail(SP_EINVAL, "sp_cuda_norm_stats: bad shape");
    norm_stats_k<<<(unsigned)T, 256, 0, c->stream>>>(x, Cl, stats);
    return launched("norm_stats");
}

/* As sp_kern_norm_apply: mean and variance from the summed stats in double. */
__global__ void norm_apply_k(const float *x, const float *stats, int64_t C, int64_t T, int64_t Cl, const float *gain,
                             const float *bias, float eps, int layernorm, float *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * Cl) return;
    int64_t t = i / Cl, j = i % Cl;
    double sumsq = stats[2 * t + 1] / (double)C, mean = 0.0, var = sumsq;
    if (layernorm) {
        mean = stats[2 * t] / (double)C;
        var = sumsq - mean * mean;
        if (var < 0.0) var = 0.0;
    }
    float rstd = (float)(1.0 / sqrt(var + eps)), m = (float)mean;
    float y = (x[i] - m) * rstd * gain[j];
    out[i] = bias ? y + bias[j] : y;
}

extern "C" sp_status sp_cuda_norm_apply(sp_cuda_ctx *c, const float *x, const float *stats, int64_t C, int64_t T,
                                        int64_t Cl, const float *gain, const float *bias, float eps, int layernorm,
                                        float *out)
{
    if (T <= 0 || Cl <= 0) return SP_OK;
    norm_apply_k<<<blocks_for(T * Cl, 256), 256, 0, c->stream>>>(x, stats, C, T, Cl, gain, bias, eps, layernorm,
                                                                   out);
    return launched("norm_apply");
}

extern "C" sp_status sp_cuda_bias_add(sp_cuda_ctx *c, float *out, const float *bias, int64_t T, int64_t N,
                                      int64_t nvalid)
{
    if (T <= 0 || N <= 0 || nvalid <= 0) return SP_OK;
    add_bias_k<<<blocks_for(T * N, 256), 256, 0, c->stream>>>(out, bias, T, N, nvalid);
    return launched("bias_add");
}

__global__ void add_k(float *out, const float *x, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += x[i];
}

extern "C" sp_status sp_cuda_add(sp_cuda_ctx *c, float *out, const float *x, int64_t n)
{
    if (n <= 0) return SP_OK;
    add_k<<<blocks_for(n, 256), 256, 0, c->stream>>>(out, x, n);
    return launched("add");
}

__global__ void pos_add_k(float *x, int64_t T, int64_t El, sp_dtype dt, const void *table, int64_t ld,
                          const int64_t *pos)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * El) return;
    int64_t t = i / El, j = i % El;
    x[i] += stored_at(table, dt, pos[t] * ld + j, 1.0f);
}

extern "C" sp_status sp_cuda_pos_add(sp_cuda_ctx *c, float *x, int64_t T, int64_t El, sp_dtype dt, const void *table,
                                     int64_t ld, const int64_t *pos)
{
    if (T <= 0 || El <= 0) return SP_OK;
    sp_status st = table_dt_ok(dt);
    if (st) return st;
    pos_add_k<<<blocks_for(T * El, 256), 256, 0, c->stream>>>(x, T, El, dt, table, ld, pos);
    return launched("pos_add");
}

/* logits (T, Vl) row stride ldo = x (T, E) . table (Vl, E)^T, table rows of stride ld, fp32 */
static sp_status gemm_nt(sp_cuda_ctx *c, float *logits, int64_t ldo, const float *x, const float *table, int64_t ld,
                         int64_t T, int64_t E, int64_t Vl)
{
    const float alpha = 1.0f, beta = 0.0f;
    /* row-major logits (T, Vl) = x (T, E) . table (Vl, E)^T is column-major
     * logits^T (Vl, T) = table^T' (Vl, E) x^T (E, T), table read as (E, Vl) ld */
    cublasStatus_t s = cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)Vl, (int)T, (int)E, &alpha, table, (int)ld,
                                   x, (int)E, &beta, logits, (int)ldo);
    if (s != CUBLAS_STATUS_SUCCESS) return spi_fail(SP_ECUDA, "cublasSgemm (logits) failed (status %d)", (int)s);
    return SP_OK;
}

extern "C" sp_status sp_cuda_logits(sp_cuda_ctx *c, float *logits, const float *x, sp_dtype dt, const void *table,
                                    int64_t ld, int64_t T, int64_t E, int64_t Vl, float *ws, size_t ws_bytes)
{
    if (T <= 0 || Vl <= 0) return SP_OK;
    if (E <= 0 || ld < E || T > INT32_MAX || E > INT32_MAX || Vl > INT32_MAX || ld > INT32_MAX)
        return spi_fail(SP_EINVAL, "sp_cuda_logits: bad shape");
    sp_status st = table_dt_ok(dt);
    if (st) return st;
    if (dt == SP_DT_F32) return gemm_nt(c, logits, Vl, x, (const float *)table, ld, T, E, Vl);
    /* row tiles of as many table rows as the workspace holds, dequantised, then SGEMM */
    int64_t vb = (int64_t)(ws ? ws_bytes / ((size_t)E * sizeof(float)) : 0);
    if (vb < 1)
        return spi_fail(SP_EINVAL, "sp_cuda_logits: a workspace of %zu bytes holds no %s table row of %lld",
                        ws ? ws_bytes : 0, sp_dtype_name(dt), (long long)E);
    if (vb > Vl) vb = Vl;
    for (int64_t v0 = 0; v0 < Vl && !st; v0 += vb) {
        int64_t rows = Vl - v0 < vb ? Vl - v0 : vb;
        st = dequant(c, ws, table, dt, ld, NULL, v0, rows, 0, E);   // ws (rows, E)
        if (!st) st = gemm_nt(c, logits + v0, Vl, x, ws, E, T, E, rows);
    }
    return st;
}
