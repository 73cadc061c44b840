/* matmul.c: dtype conversions and the weight-view matmul (CBLAS sgemm). */
#include "config.h"
#include <math.h>
#include <pthread.h>
#include <string.h>
#include "kernels/cpu/spi_blas_dl.h"
#include "spi_common.h"
#include "kernels/cpu/sp_kern.h"
#include "kernels/spi_conv.h"


/* Dequantised tile: KT rows x NT columns of W. */
#define SPI_KT 256
#define SPI_NT 512

/* the exported conversions: spi_conv.h's, shared with the CUDA kernels */
float sp_kern_bf16_to_f32(uint16_t h) { return spi_bf16_to_f32(h); }
uint16_t sp_kern_f32_to_bf16(float f) { return spi_f32_to_bf16(f); }
float sp_kern_f16_to_f32(uint16_t h) { return spi_f16_to_f32(h); }
uint16_t sp_kern_f32_to_f16(float f) { return spi_f32_to_f16(f); }
float sp_kern_fp8_to_f32(uint8_t b) { return spi_fp8_to_f32(b); }
uint8_t sp_kern_f32_to_fp8(float f) { return spi_f32_to_fp8(f); }

size_t sp_kern_matmul_scratch_bytes(const sp_kern_wview *w, int64_t K, int64_t N)
{
    if (!w || w->dt == SP_DT_F32) return 0;
    int64_t kb = K < SPI_KT ? K : SPI_KT, nb = N < SPI_NT ? N : SPI_NT;
    return (size_t)(kb * nb) * sizeof(float);
}

/* tile (kb, nb) = dequant(W[k0:k0+kb, n0:n0+nb]).  Vectorised even at -O2: the
 * dequantisation is the decode-time bottleneck. */
__attribute__((optimize("tree-vectorize"))) static void dequant_tile(float *tile, const sp_kern_wview *w, int64_t k0, int64_t kb, int64_t n0, int64_t nb)
{
    for (int64_t k = 0; k < kb; k++) {
        float *dst = tile + k * nb;
        int64_t off = (k0 + k) * w->ld + n0;
        switch (w->dt) {
        case SP_DT_BF16: {
            const uint16_t *src = (const uint16_t *)w->data + off;
            for (int64_t n = 0; n < nb; n++) dst[n] = spi_bf16_to_f32(src[n]);
            break;
        }
        case SP_DT_F16: {
            const uint16_t *src = (const uint16_t *)w->data + off;
            for (int64_t n = 0; n < nb; n++) dst[n] = sp_kern_f16_to_f32(src[n]);
            break;
        }
        case SP_DT_INT8: {
            const int8_t *src = (const int8_t *)w->data + off;
            const float *s = w->scale + n0;
            for (int64_t n = 0; n < nb; n++) dst[n] = spi_int8_to_f32(src[n], s[n]);
            break;
        }
        case SP_DT_FP8: {
            const uint8_t *src = (const uint8_t *)w->data + off;
            const float *s = w->scale + n0;
            for (int64_t n = 0; n < nb; n++) dst[n] = sp_kern_fp8_to_f32(src[n]) * s[n];
            break;
        }
        default:
            break;
        }
    }
}

/* ---- fused small-T path (decode) --------------------------------------------
 * For T <= SPI_SMALL_T the product is memory bound: 2T FLOPs per weight
 * against 1-2 bytes of it.  The tile path dequantises every weight into a
 * 512 KiB scratch tile first (a write and a re-read of 4 bytes per weight:
 * 3-5x the traffic of the int8/bf16 weight itself) and then calls sgemm on
 * a skinny product.  Here each weight row is read once, in column blocks of
 * SPI_NB, SPI_KU rows at a time: the rows are widened to fp32 in a small L1
 * buffer and accumulated into T fp32 rows (acc, L1) with SPI_KU FMAs per
 * load/store of acc; int8/fp8 column scales are applied once per output at
 * the end (w = q * s[n], so sum_k x_k q_kn s_n = s_n sum_k x_k q_kn).
 * Compiled for AVX2+FMA and AVX-512 too where the compiler can (target
 * clones, chosen at load time), else baseline. */
#define SPI_SMALL_T 8
#define SPI_NB 256
#define SPI_KU 8

/* Not under ThreadSanitizer: gcc's ifunc resolvers for the clones run before
 * the TSan runtime is initialised and crash the program at load. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    defined(__has_attribute)
#if __has_attribute(target_clones)
#define SPI_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef SPI_CLONES
#define SPI_CLONES
#endif

static float spi_fp8_lut[256];
static pthread_once_t spi_fp8_lut_once = PTHREAD_ONCE_INIT;

/* Filled once before any reader: chip threads used to fill it concurrently
 * with plain stores while others read it (a data race ThreadSanitizer found). */
static void spi_fp8_lut_fill(void)
{
    for (int b = 0; b < 256; b++) spi_fp8_lut[b] = spi_fp8_to_f32((uint8_t)b);
}

SPI_CLONES __attribute__((optimize("tree-vectorize", "no-math-errno"))) static void
matmul_small(float *restrict out, const float *restrict in, const sp_kern_wview *w, int64_t T, int64_t K,
             int64_t N, int mode)
{
    float acc[SPI_SMALL_T][SPI_NB] __attribute__((aligned(64)));   // (T, nb)
    float wb[SPI_KU][SPI_NB] __attribute__((aligned(64)));         // (ku, nb) widened rows
    const int64_t ld = w->ld;
    for (int64_t n0 = 0; n0 < N; n0 += SPI_NB) {
        const int64_t nb = N - n0 < SPI_NB ? N - n0 : SPI_NB;
        for (int64_t t = 0; t < T; t++)
            for (int64_t n = 0; n < nb; n++) acc[t][n] = 0.0f;
        for (int64_t k0 = 0; k0 < K; k0 += SPI_KU) {
            const int64_t ku = K - k0 < SPI_KU ? K - k0 : SPI_KU;
            // widen rows k0 .. k0+ku of W[:, n0:n0+nb] to fp32 (no scale yet)
            for (int64_t j = 0; j < SPI_KU; j++) {
                float *d = wb[j];
                if (j >= ku) {
                    for (int64_t n = 0; n < nb; n++) d[n] = 0.0f;
                    continue;
                }
                const int64_t off = (k0 + j) * ld + n0;
                switch (w->dt) {
                case SP_DT_BF16: {
                    const uint16_t *src = (const uint16_t *)w->data + off;
                    uint32_t *du = (uint32_t *)(void *)d;
                    for (int64_t n = 0; n < nb; n++) du[n] = spi_bf16_to_f32_bits(src[n]);
                    break;
                }
                case SP_DT_INT8: {
                    const int8_t *src = (const int8_t *)w->data + off;
                    for (int64_t n = 0; n < nb; n++) d[n] = (float)src[n];
                    break;
                }
                case SP_DT_FP8: {
                    const uint8_t *src = (const uint8_t *)w->data + off;
                    for (int64_t n = 0; n < nb; n++) d[n] = spi_fp8_lut[src[n]];
                    break;
                }
                case SP_DT_F16: {
                    const uint16_t *src = (const uint16_t *)w->data + off;
                    /* the exported wrapper: a call (inlined, the f16 decode costs the
                     * shared FMA loop below its register allocation) */
                    for (int64_t n = 0; n < nb; n++) d[n] = sp_kern_f16_to_f32(src[n]);
                    break;
                }
                default: {
                    const float *src = (const float *)w->data + off;
                    for (int64_t n = 0; n < nb; n++) d[n] = src[n];
                    break;
                }
                }
            }
            // acc[t] += sum_j x[t][k0+j] * wb[j]
            for (int64_t t = 0; t < T; t++) {
                const float *x = in + t * K + k0;
                float a[SPI_KU];
                for (int64_t j = 0; j < SPI_KU; j++) a[j] = j < ku ? x[j] : 0.0f;
                float *o = acc[t];
                for (int64_t n = 0; n < nb; n++)
                    o[n] += ((a[0] * wb[0][n] + a[1] * wb[1][n]) + (a[2] * wb[2][n] + a[3] * wb[3][n])) +
                            ((a[4] * wb[4][n] + a[5] * wb[5][n]) + (a[6] * wb[6][n] + a[7] * wb[7][n]));
            }
        }
        const float *sc = (w->dt == SP_DT_INT8 || w->dt == SP_DT_FP8) ? w->scale + n0 : NULL;
        for (int64_t t = 0; t < T; t++) {
            float *o = out + t * N + n0;
            const float *a = acc[t];
            if (sc) {
                if (mode == SP_KERN_ACCUMULATE)
                    for (int64_t n = 0; n < nb; n++) o[n] += a[n] * sc[n];
                else
                    for (int64_t n = 0; n < nb; n++) o[n] = a[n] * sc[n];
            } else {
                if (mode == SP_KERN_ACCUMULATE)
                    for (int64_t n = 0; n < nb; n++) o[n] += a[n];
                else
                    for (int64_t n = 0; n < nb; n++) o[n] = a[n];
            }
        }
    }
}

/* One row (T = 1), int8 weights: out (N) = x (K) . W (K, N) · s.  Rows are
 * read in order, four at a time, into an accumulator block that stays in L1
 * (NB columns), so the weights stream from memory once and the widening
 * happens in registers (measured 2.4x the tile path at 4096 x 4096). */
SPI_CLONES __attribute__((optimize("tree-vectorize", "no-math-errno"))) static void
gemv_int8(float *restrict out, const float *restrict x, const sp_kern_wview *w, int64_t K, int64_t N, int mode)
{
    enum { NB = 2048 };
    float acc[NB] __attribute__((aligned(64)));   // (nb)
    const int64_t ld = w->ld;
    const int8_t *q = (const int8_t *)w->data;
    for (int64_t n0 = 0; n0 < N; n0 += NB) {
        const int64_t nb = N - n0 < NB ? N - n0 : NB;
        for (int64_t n = 0; n < nb; n++) acc[n] = 0.0f;
        int64_t k = 0;
        for (; k + 4 <= K; k += 4) {
            const float a0 = x[k], a1 = x[k + 1], a2 = x[k + 2], a3 = x[k + 3];
            const int8_t *w0 = q + k * ld + n0, *w1 = w0 + ld, *w2 = w1 + ld, *w3 = w2 + ld;
            for (int64_t n = 0; n < nb; n++)
                acc[n] += (a0 * (float)w0[n] + a1 * (float)w1[n]) + (a2 * (float)w2[n] + a3 * (float)w3[n]);
        }
        for (; k < K; k++) {
            const float a = x[k];
            const int8_t *w0 = q + k * ld + n0;
            for (int64_t n = 0; n < nb; n++) acc[n] += a * (float)w0[n];
        }
        const float *sc = w->scale + n0;
        float *o = out + n0;
        if (mode == SP_KERN_ACCUMULATE)
            for (int64_t n = 0; n < nb; n++) o[n] += acc[n] * sc[n];
        else
            for (int64_t n = 0; n < nb; n++) o[n] = acc[n] * sc[n];
    }
}

sp_status sp_kern_matmul(float *out, const float *in, const sp_kern_wview *w, const float *bias,
                         int64_t T, int64_t K, int64_t N, int mode, void *scratch, size_t scratch_bytes)
{
    if (!out || !in || !w || !w->data || T < 0 || K <= 0 || N <= 0 || w->ld < N)
        return spi_fail(SP_EINVAL, "sp_kern_matmul: bad arguments (T=%lld K=%lld N=%lld ld=%lld)",
                        (long long)T, (long long)K, (long long)N, w ? (long long)w->ld : -1LL);
    if ((int)w->dt < 0 || w->dt >= SP_DT_COUNT)
        return spi_fail(SP_EINVAL, "sp_kern_matmul: unknown weight dtype %d", (int)w->dt);
    if ((w->dt == SP_DT_INT8 || w->dt == SP_DT_FP8) && !w->scale)
        return spi_fail(SP_EINVAL, "sp_kern_matmul: %s weights need per-column scales", sp_dtype_name(w->dt));
    if (T == 0) return SP_OK;
    SP_CHECK(spi_blas_load());
    float beta0 = mode == SP_KERN_ACCUMULATE ? 1.0f : 0.0f;
    /* the scratch contract holds whichever path runs */
    /* at least one column of a (kb, nb) tile; the tile takes as many columns as fit, up to SPI_NT */
    int64_t kt = K < SPI_KT ? K : SPI_KT, nt = (int64_t)(scratch_bytes / ((size_t)kt * sizeof(float)));
    if (nt > SPI_NT) nt = SPI_NT;
    if (w->dt != SP_DT_F32 && (!scratch || nt < 1))
        return spi_fail(SP_EINVAL, "sp_kern_matmul: scratch of %zu bytes given, at least %zu needed", scratch_bytes,
                        (size_t)kt * sizeof(float));
    if (w->dt == SP_DT_F32 && T == 1) {
        // out (N) = W (K, N)^T . in (K): OpenBLAS's gemv streams W at close to
        // memory bandwidth, where a one-row gemm runs at less than half of it
        cblas_sgemv(CblasRowMajor, CblasTrans, (int)K, (int)N, 1.0f, (const float *)w->data, (int)w->ld, in, 1,
                    beta0, out, 1);
    } else if (w->dt == SP_DT_F32) {
        // out (T, N) = in (T, K) . W (K, N)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)N, (int)K, 1.0f, in, (int)K,
                    (const float *)w->data, (int)w->ld, beta0, out, (int)N);
    } else if (T == 1 && w->dt == SP_DT_INT8) {
        gemv_int8(out, in, w, K, N, mode);
    } else if (T <= SPI_SMALL_T) {
        if (w->dt == SP_DT_FP8) pthread_once(&spi_fp8_lut_once, spi_fp8_lut_fill);
        matmul_small(out, in, w, T, K, N, mode);
    } else {
        float *tile = scratch;   // (kb, nb)
        for (int64_t n0 = 0; n0 < N; n0 += nt) {
            int64_t nb = N - n0 < nt ? N - n0 : nt;
            for (int64_t k0 = 0; k0 < K; k0 += SPI_KT) {
                int64_t kb = K - k0 < SPI_KT ? K - k0 : SPI_KT;
                // dequantise W[k0:k0+kb, n0:n0+nb], then out[:, n0:n0+nb] (+)= in[:, k0:k0+kb] . tile
                dequant_tile(tile, w, k0, kb, n0, nb);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)nb, (int)kb, 1.0f, in + k0,
                            (int)K, tile, (int)nb, k0 == 0 ? beta0 : 1.0f, out + n0, (int)N);
            }
        }
    }
    if (bias) {
        for (int64_t t = 0; t < T; t++) {
            float *o = out + t * N;
            for (int64_t n = 0; n < N; n++) o[n] += bias[n];
        }
    }
    return SP_OK;
}

sp_status sp_kern_set_blas_threads(int n)
{
    if (n < 1) return spi_fail(SP_EINVAL, "sp_kern_set_blas_threads: n = %d must be >= 1", n);
    SP_CHECK(spi_blas_load());
    if (!spi_blas_dl_table.set_num_threads)
        return spi_fail(SP_ENOTSUP, "BLAS thread count cannot be set: the CBLAS library has no openblas_set_num_threads");
    spi_blas_dl_table.set_num_threads(n);
    return SP_OK;
}
