/* xdev_cpu.c: the executor's CPU device (spi_xdev.h): host memory and the
 * kernels of kernels/cpu, called exactly as the interpreter always has. */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "exec/spi_xdev.h"

static sp_status cpu_open(spi_xdev *d) { (void)d; return SP_OK; }
static void cpu_close(spi_xdev *d) { (void)d; }

static sp_status cpu_alloc(spi_xdev *d, size_t bytes, void **out)
{
    (void)d;
    if (!(*out = calloc(1, bytes ? bytes : 1))) return spi_fail(SP_ENOMEM, "%zu bytes", bytes);
    return SP_OK;
}

static void cpu_release(spi_xdev *d, void *p) { (void)d; free(p); }

static sp_status cpu_copy(spi_xdev *d, void *dst, const void *src, size_t bytes)
{
    (void)d;
    if (bytes) memcpy(dst, src, bytes);
    return SP_OK;
}

static sp_status cpu_copy2d(spi_xdev *d, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                            size_t rows)
{
    (void)d;
    for (size_t r = 0; r < rows; r++) memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return SP_OK;
}

static sp_status cpu_zero(spi_xdev *d, void *p, size_t bytes)
{
    (void)d;
    if (bytes) memset(p, 0, bytes);
    return SP_OK;
}

static sp_status cpu_sync(spi_xdev *d) { (void)d; return SP_OK; }

static sp_status cpu_embed(spi_xdev *d, float *out, const int32_t *tok, int64_t T, const sp_kern_wview *table,
                           int64_t v0, int64_t Vl, int64_t e0, int64_t El)
{
    (void)d;
    return sp_kern_embed_wv(out, tok, T, table, v0, Vl, e0, El);
}

static sp_status cpu_pos_add(spi_xdev *d, float *x, int64_t T, int64_t El, const sp_kern_wview *table, int64_t e0,
                             const int64_t *pos)
{
    (void)d;
    return sp_kern_pos_add_wv(x, T, El, table, e0, pos);
}

static sp_status cpu_norm_stats(spi_xdev *d, const float *x, int64_t T, int64_t Cl, float *stats)
{
    (void)d;
    sp_kern_norm_stats(x, T, Cl, stats);
    return SP_OK;
}

static sp_status cpu_norm_apply(spi_xdev *d, const float *x, const float *stats, int64_t C, int64_t T, int64_t Cl,
                                const float *gain, const float *bias, float eps, sp_norm_kind kind, float *out)
{
    (void)d;
    sp_kern_norm_apply(x, stats, C, T, Cl, gain, bias, eps, kind, out);
    return SP_OK;
}

static sp_status cpu_matmul(spi_xdev *d, float *out, const float *in, const sp_kern_wview *w, int64_t T, int64_t K,
                            int64_t N, int mode)
{
    return sp_kern_matmul(out, in, w, NULL, T, K, N, mode, d->ws, d->ws_bytes);
}

static sp_status cpu_bias_add(spi_xdev *d, float *out, const float *b, int64_t T, int64_t N, int64_t nvalid)
{
    (void)d;
    for (int64_t r = 0; r < T; r++)
        for (int64_t j = 0; j < N && j < nvalid; j++) out[r * N + j] += b[j];
    return SP_OK;
}

static sp_status cpu_act(spi_xdev *d, float *out, const float *x, const float *up, int64_t n, sp_act_kind kind)
{
    (void)d;
    sp_kern_act(out, x, up, n, kind);
    return SP_OK;
}

static sp_status cpu_add(spi_xdev *d, float *out, const float *x, int64_t n)
{
    (void)d;
    sp_kern_add(out, x, n);
    return SP_OK;
}

static sp_status cpu_rope(spi_xdev *d, float *x, int64_t T, int64_t nh, int64_t D, int64_t R, const int64_t *pos,
                          const double *inv_freq, double scale)
{
    (void)d;
    return sp_kern_rope_freqs(x, T, nh, D, R, pos, inv_freq, scale);
}

static sp_status cpu_kv_append(spi_xdev *d, sp_kern_kv *kv, const float *k, const float *v, int64_t Lq, int64_t pos0)
{
    (void)d;
    return sp_kern_kv_append(kv, k, v, Lq, pos0);
}

static sp_status cpu_attention(spi_xdev *d, float *out, const float *q, const sp_kern_kv *kv, int64_t Lq,
                               int64_t pos0, int64_t H, int64_t KVH, int64_t h0, int64_t Hl, int64_t kv0)
{
    return sp_kern_attention(out, q, kv, Lq, pos0, H, KVH, h0, Hl, kv0, d->at_scr, d->at_bytes);
}

static sp_status cpu_logits(spi_xdev *d, float *logits, const float *x, const sp_kern_wview *table, int64_t T,
                            int64_t E, int64_t Vl)
{
    return sp_kern_logits_wv(logits, x, table, T, E, Vl, d->ws, d->ws_bytes);
}

static sp_status cpu_argmax(spi_xdev *d, const float *logits, int64_t V, int32_t *tok)
{
    (void)d;
    *tok = sp_kern_argmax(logits, V);
    return SP_OK;
}

const spi_xops spi_xops_cpu = {
    .name = "cpu",
    .host_memory = 1,
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy2d = cpu_copy2d,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .embed = cpu_embed,
    .pos_add = cpu_pos_add,
    .norm_stats = cpu_norm_stats,
    .norm_apply = cpu_norm_apply,
    .matmul = cpu_matmul,
    .bias_add = cpu_bias_add,
    .act = cpu_act,
    .add = cpu_add,
    .rope = cpu_rope,
    .kv_append = cpu_kv_append,
    .attention = cpu_attention,
    .logits = cpu_logits,
    .argmax = cpu_argmax,
};
