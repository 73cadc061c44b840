/* matmul.c: dtype conversions and the weight-view matmul (CBLAS sgemm). */
#include "config.h"
#include <math.h>
#include <string.h>
#include <cblas.h>
#include "spi_common.h"
#include "kernels/cpu/sp_kern.h"

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int num_threads);
#endif

/* Dequantised tile: KT rows x NT columns of W. */
#define SPI_KT 256
#define SPI_NT 512

float sp_kern_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t sp_kern_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float sp_kern_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        float f = ldexpf((float)man, -24);   /* zero or subnormal */
        return sign ? -f : f;
    }
    if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else u = sign | ((exp + 112u) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t sp_kern_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u);   /* rounds to inf */
    if (a < 6.103515625e-05f) {                            /* subnormal: multiples of 2^-24 */
        float q = nearbyintf(a * 16777216.0f);             /* round half even (default mode) */
        return (uint16_t)(sign | (uint16_t)q);
    }
    uint32_t e = ((u >> 23) & 0xffu) - 112u, m = u & 0x7fffffu;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;   /* may carry into exp: fine */
    return (uint16_t)(sign | h);
}

float sp_kern_fp8_to_f32(uint8_t b)
{
    int sign = b & 0x80, exp = (b >> 3) & 0xf, man = b & 0x7;
    float f;
    if (exp == 0xf && man == 0x7) return NAN;
    if (exp == 0) f = ldexpf((float)man, -9);
    else f = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -f : f;
}

uint8_t sp_kern_f32_to_fp8(float f)
{
    if (isnan(f)) return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f) return (uint8_t)(sign | 0x7e);
    /* Search the 127 non-negative finite codes: monotone in the code. */
    int lo = 0, hi = 0x7e;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (sp_kern_fp8_to_f32((uint8_t)mid) <= a) lo = mid; else hi = mid;
    }
    float dl = a - sp_kern_fp8_to_f32((uint8_t)lo), dh = sp_kern_fp8_to_f32((uint8_t)hi) - a;
    int c = (dl < dh || (dl == dh && !(lo & 1))) ? lo : hi;
    return (uint8_t)(sign | c);
}

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
            for (int64_t n = 0; n < nb; n++) {
                uint32_t u = (uint32_t)src[n] << 16;
                memcpy(&dst[n], &u, sizeof u);
            }
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
            for (int64_t n = 0; n < nb; n++) dst[n] = (float)src[n] * s[n];
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
    float beta0 = mode == SP_KERN_ACCUMULATE ? 1.0f : 0.0f;
    if (w->dt == SP_DT_F32) {
        // out (T, N) = in (T, K) . W (K, N)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)N, (int)K, 1.0f, in, (int)K,
                    (const float *)w->data, (int)w->ld, beta0, out, (int)N);
    } else {
        size_t need = sp_kern_matmul_scratch_bytes(w, K, N);
        if (!scratch || scratch_bytes < need)
            return spi_fail(SP_EINVAL, "sp_kern_matmul: scratch of %zu bytes given, %zu needed", scratch_bytes, need);
        float *tile = scratch;   // (kb, nb)
        for (int64_t n0 = 0; n0 < N; n0 += SPI_NT) {
            int64_t nb = N - n0 < SPI_NT ? N - n0 : SPI_NT;
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
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(n);
    return SP_OK;
#else
    return spi_fail(SP_ENOTSUP, "BLAS thread count cannot be set: configure did not find openblas_set_num_threads");
#endif
}
