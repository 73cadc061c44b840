/*
 * spi_conv.h: the scalar dtype conversions of the kernels (internal), one
 * copy for both sides: gcc compiles them into the CPU kernels (C11, static
 * inline), nvcc into host and device code of kernels/cuda (SPI_CONV_FN is
 * __host__ __device__ there).  The CPU and the GPU therefore decode every
 * stored weight, table and KV entry to the same fp32 value.
 *
 *   bf16  the top half of an fp32; encode rounds to nearest even, NaN stays NaN
 *   f16   IEEE half; encode rounds to nearest even
 *   fp8   OCP E4M3 (fn): bias 7, no inf, 0x7f/0xff NaN; encode rounds to
 *         nearest (ties to the even code), saturates at +-448
 *   int8  weight-only: w = q * scale (one fp32 scale per output column)
 *
 * sp_kern.h exports the same conversions as sp_kern_*_to_* (wrappers).
 */
#ifndef SPI_CONV_H
#define SPI_CONV_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Always inlined: GCC does not inline a plain inline function into the CPU
 * kernels' loops compiled with their own optimize / target_clones attributes,
 * and a call per element costs those loops their vectorisation (10x). */
#if defined(__CUDACC__)
#define SPI_CONV_FN static __forceinline__ __host__ __device__
#elif defined(__GNUC__)
#define SPI_CONV_FN static inline __attribute__((always_inline))
#else
#define SPI_CONV_FN static inline
#endif

SPI_CONV_FN float spi_f32_from_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

SPI_CONV_FN uint32_t spi_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

/* bf16 -> the bits of its fp32: the CPU's widening loops store these through a
 * uint32_t view of their float rows (the form GCC vectorises best there) */
SPI_CONV_FN uint32_t spi_bf16_to_f32_bits(uint16_t h) { return (uint32_t)h << 16; }
SPI_CONV_FN float spi_bf16_to_f32(uint16_t h) { return spi_f32_from_bits(spi_bf16_to_f32_bits(h)); }

SPI_CONV_FN uint16_t spi_f32_to_bf16(float f)
{
    uint32_t u = spi_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

SPI_CONV_FN float spi_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        float f = ldexpf((float)man, -24);   /* zero or subnormal */
        return sign ? -f : f;
    }
    if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else u = sign | ((exp + 112u) << 23) | (man << 13);
    return spi_f32_from_bits(u);
}

SPI_CONV_FN uint16_t spi_f32_to_f16(float f)
{
    uint32_t u = spi_f32_bits(f);
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

SPI_CONV_FN float spi_fp8_to_f32(uint8_t b)
{
    int sign = b & 0x80, exp = (b >> 3) & 0xf, man = b & 0x7;
    float f;
    if (exp == 0xf && man == 0x7) return NAN;
    if (exp == 0) f = ldexpf((float)man, -9);
    else f = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -f : f;
}

SPI_CONV_FN uint8_t spi_f32_to_fp8(float f)
{
    if (isnan(f)) return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f) return (uint8_t)(sign | 0x7e);
    /* Search the 127 non-negative finite codes: monotone in the code. */
    int lo = 0, hi = 0x7e;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (spi_fp8_to_f32((uint8_t)mid) <= a) lo = mid; else hi = mid;
    }
    float dl = a - spi_fp8_to_f32((uint8_t)lo), dh = spi_fp8_to_f32((uint8_t)hi) - a;
    int c = (dl < dh || (dl == dh && !(lo & 1))) ? lo : hi;
    return (uint8_t)(sign | c);
}

/* weight-only int8 / fp8: the stored code times its column's scale */
SPI_CONV_FN float spi_int8_to_f32(int8_t q, float scale) { return (float)q * scale; }
SPI_CONV_FN float spi_fp8_scaled_to_f32(uint8_t b, float scale) { return spi_fp8_to_f32(b) * scale; }

#endif /* SPI_CONV_H */
