/* spi_ckd.h: overflow-checked int64 arithmetic for every product of shapes,
 * counts and bytes (the SQLite sqlite3MulInt64 / Linux check_mul_overflow
 * idea, on top of __builtin_*_overflow).  Internal, not installed.
 *
 * Two forms:
 *  - plain: spi_ckd_mul(a, b, &r) returns 1 and stores a*b, or returns 0 on
 *    overflow (r untouched);
 *  - sticky: a spi_ckd records the first quantity that overflowed (or went
 *    negative) and every later call returns 0, so a chain of products is
 *    written as plainly as the unchecked one and tested once at the end:
 *
 *        spi_ckd ck = SPI_CKD_INIT;
 *        int64_t kv = spi_ck_mul3(&ck, "KV cache bytes", seqs, ctx, heads * d);
 *        if (ck.overflow) return spi_fail(SP_EINVAL, "%s overflows 64 bits", ck.what);
 *
 *    A failed call returns 0, never a wrapped or saturated number, so no
 *    unchecked arithmetic that follows can overflow on it.  Operands are
 *    sizes: a negative operand is recorded like an overflow. */
#ifndef SPI_CKD_H
#define SPI_CKD_H
#include <stdint.h>

typedef struct spi_ckd {
    int overflow;       /* set by the first failing call */
    const char *what;   /* the quantity that failed (borrowed string literal) */
    const char *path;   /* optional: the input field to blame (model JSON path) */
} spi_ckd;
#define SPI_CKD_INIT {0, NULL, NULL}

static inline int spi_ckd_mul(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return 0;
    *out = r;
    return 1;
}

static inline int spi_ckd_add(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return 0;
    *out = r;
    return 1;
}

/* unsigned forms (byte counts of files and buffers): return 0 on overflow */
static inline int spi_mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline int spi_add_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }

static inline int64_t spi_ck_fail_(spi_ckd *c, const char *what)
{
    if (!c->overflow) c->overflow = 1, c->what = what;
    return 0;
}

static inline int64_t spi_ck_mul(spi_ckd *c, const char *what, int64_t a, int64_t b)
{
    int64_t r;
    if (c->overflow) return 0;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return spi_ck_fail_(c, what);
    return r;
}

static inline int64_t spi_ck_mul3(spi_ckd *c, const char *what, int64_t a, int64_t b, int64_t d)
{
    return spi_ck_mul(c, what, spi_ck_mul(c, what, a, b), d);
}

static inline int64_t spi_ck_mul4(spi_ckd *c, const char *what, int64_t a, int64_t b, int64_t d, int64_t e)
{
    return spi_ck_mul(c, what, spi_ck_mul3(c, what, a, b, d), e);
}

static inline int64_t spi_ck_add(spi_ckd *c, const char *what, int64_t a, int64_t b)
{
    int64_t r;
    if (c->overflow) return 0;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return spi_ck_fail_(c, what);
    return r;
}

/* a product of sizes, then a sum into an accumulator: acc += a * b */
static inline void spi_ck_addmul(spi_ckd *c, const char *what, int64_t *acc, int64_t a, int64_t b)
{
    *acc = spi_ck_add(c, what, *acc, spi_ck_mul(c, what, a, b));
}
#endif
