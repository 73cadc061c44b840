/* xdev_cuda.c: the executor's CUDA device (spi_xdev.h): device memory on the
 * chip's GPU, one stream and one cuBLAS handle per chip (sp_cuda_ctx), the
 * kernels of kernels/cuda.  Used with the NCCL communicator.
 *
 * Supported: what the CPU device takes.  Weights F32 (straight to cuBLAS) or
 * BF16, F16, INT8, FP8 (column tiles dequantised into the lowering's
 * workspace, d->ws, then SGEMM); vocabulary / position tables F32, BF16 or
 * F16 (decoded in the embed / position kernels; the LM head in row tiles
 * through the same workspace); KV cache F32 or BF16 in the CPU's layout
 * (B, ctx_max, KVHl, D), converted on append, decoded by attention.  Every
 * decode and encode is the CPU kernels' (kernels/spi_conv.h).  Token ids and
 * positions come from the host and are staged into device buffers that grow
 * on demand; greedy picks run sp_cuda_argmax on the device. */
#include "config.h"
#include <stdlib.h>
#include "spi_common.h"
#include "exec/spi_xdev.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/sp_cuda.h"

typedef struct cuda_dev {
    sp_cuda_ctx *ctx;
    int32_t *tok;      /* staged token ids (ntok) */
    int64_t *pos;      /* staged positions (npos) */
    double *freq;      /* staged RoPE inverse frequencies (nfreq) */
    int32_t *pick;     /* argmax result (1) */
    size_t ntok, npos, nfreq;
} cuda_dev;

static sp_cuda_ctx *ctx_of(const spi_xdev *d) { return ((cuda_dev *)d->impl)->ctx; }

/* a table view's data offset by e0 columns */
static const void *table_at(const sp_kern_wview *t, int64_t e0)
{
    return (const char *)t->data + e0 * sp_dtype_bytes(t->dt);
}

static sp_status cu_open(spi_xdev *d)
{
    cuda_dev *c = calloc(1, sizeof *c);
    if (!c) return spi_fail(SP_ENOMEM, "CUDA device state");
    sp_status st = sp_cuda_ctx_create(-1, &c->ctx);
    if (!st) st = sp_cuda_alloc(c->ctx, sizeof *c->pick, (void **)&c->pick);
    d->impl = c;
    return st;
}

static void cu_close(spi_xdev *d)
{
    cuda_dev *c = d->impl;
    if (!c) return;
    if (c->ctx) {
        (void)sp_cuda_sync(c->ctx);
        sp_cuda_free(c->ctx, c->tok);
        sp_cuda_free(c->ctx, c->pos);
        sp_cuda_free(c->ctx, c->freq);
        sp_cuda_free(c->ctx, c->pick);
        sp_cuda_ctx_free(c->ctx);
    }
    free(c);
    d->impl = NULL;
}

static sp_status cu_alloc(spi_xdev *d, size_t bytes, void **out) { return sp_cuda_alloc(ctx_of(d), bytes, out); }

static void cu_release(spi_xdev *d, void *p)
{
    if (p && d->impl) sp_cuda_free(ctx_of(d), p);
}

static sp_status cu_upload(spi_xdev *d, void *dst, const void *host, size_t bytes)
{
    return sp_cuda_upload(ctx_of(d), dst, host, bytes);
}

static sp_status cu_download(spi_xdev *d, void *host, const void *src, size_t bytes)
{
    return sp_cuda_download(ctx_of(d), host, src, bytes);
}

static sp_status cu_copy2d(spi_xdev *d, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                           size_t rows)
{
    return sp_cuda_copy2d(ctx_of(d), dst, dpitch, src, spitch, width, rows);
}

static sp_status cu_zero(spi_xdev *d, void *p, size_t bytes) { return sp_cuda_zero(ctx_of(d), p, bytes); }
static sp_status cu_sync(spi_xdev *d) { return sp_cuda_sync(ctx_of(d)); }

/* host values into a device buffer that grows to n elements of es bytes */
static sp_status stage(spi_xdev *d, void **buf, size_t *have, const void *host, size_t n, size_t es)
{
    if (n > *have) {
        /* the old buffer may still be read by queued kernels */
        SP_CHECK(cu_sync(d));
        sp_cuda_free(ctx_of(d), *buf);
        *buf = NULL;
        *have = 0;
        SP_CHECK(sp_cuda_alloc(ctx_of(d), n * es, buf));
        *have = n;
    }
    return sp_cuda_upload(ctx_of(d), *buf, host, n * es);
}

static sp_status cu_embed(spi_xdev *d, float *out, const int32_t *tok, int64_t T, const sp_kern_wview *table,
                          int64_t v0, int64_t Vl, int64_t e0, int64_t El)
{
    cuda_dev *c = d->impl;
    SP_CHECK(stage(d, (void **)&c->tok, &c->ntok, tok, (size_t)T, sizeof *tok));
    return sp_cuda_embed(c->ctx, out, c->tok, T, table->dt, table_at(table, e0), table->ld, El, v0, Vl);
}

static sp_status cu_pos_add(spi_xdev *d, float *x, int64_t T, int64_t El, const sp_kern_wview *table, int64_t e0,
                            const int64_t *pos)
{
    cuda_dev *c = d->impl;
    SP_CHECK(stage(d, (void **)&c->pos, &c->npos, pos, (size_t)T, sizeof *pos));
    return sp_cuda_pos_add(c->ctx, x, T, El, table->dt, table_at(table, e0), table->ld, c->pos);
}

static sp_status cu_norm_stats(spi_xdev *d, const float *x, int64_t T, int64_t Cl, float *stats)
{
    return sp_cuda_norm_stats(ctx_of(d), x, T, Cl, stats);
}

static sp_status cu_norm_apply(spi_xdev *d, const float *x, const float *stats, int64_t C, int64_t T, int64_t Cl,
                               const float *gain, const float *bias, float eps, sp_norm_kind kind, float *out)
{
    return sp_cuda_norm_apply(ctx_of(d), x, stats, C, T, Cl, gain, bias, eps, kind == SP_NORM_LAYERNORM, out);
}

static sp_status cu_matmul(spi_xdev *d, float *out, const float *in, const sp_kern_wview *w, int64_t T, int64_t K,
                           int64_t N, int mode)
{
    return sp_cuda_matmul_wv(ctx_of(d), out, in, w->dt, w->data, w->ld, w->scale, T, K, N, mode == SP_KERN_ACCUMULATE,
                             d->ws, d->ws_bytes);
}

static sp_status cu_bias_add(spi_xdev *d, float *out, const float *b, int64_t T, int64_t N, int64_t nvalid)
{
    return sp_cuda_bias_add(ctx_of(d), out, b, T, N, nvalid);
}

static sp_status cu_act(spi_xdev *d, float *out, const float *x, const float *up, int64_t n, sp_act_kind kind)
{
    return sp_cuda_act(ctx_of(d), out, x, up, n, kind);
}

static sp_status cu_add(spi_xdev *d, float *out, const float *x, int64_t n) { return sp_cuda_add(ctx_of(d), out, x, n); }

static sp_status cu_rope(spi_xdev *d, float *x, int64_t T, int64_t nh, int64_t D, int64_t R, const int64_t *pos,
                         const double *inv_freq, double scale)
{
    cuda_dev *c = d->impl;
    if (T <= 0) return SP_OK;
    SP_CHECK(stage(d, (void **)&c->pos, &c->npos, pos, (size_t)T, sizeof *pos));
    SP_CHECK(stage(d, (void **)&c->freq, &c->nfreq, inv_freq, (size_t)(R / 2), sizeof *inv_freq));
    return sp_cuda_rope_freqs(c->ctx, x, T, nh, D, R, c->pos, c->freq, scale);
}

static sp_status cu_kv_append(spi_xdev *d, sp_kern_kv *kv, const float *k, const float *v, int64_t Lq, int64_t pos0)
{
    return sp_cuda_kv_append(ctx_of(d), kv->dt, kv->k, kv->v, kv->B, kv->ctx_max, kv->KVHl * kv->D, k, v, Lq, pos0);
}

static sp_status cu_attention(spi_xdev *d, float *out, const float *q, const sp_kern_kv *kv, int64_t Lq, int64_t pos0,
                              int64_t H, int64_t KVH, int64_t h0, int64_t Hl, int64_t kv0)
{
    return sp_cuda_attention(ctx_of(d), out, q, kv->dt, kv->k, kv->v, kv->B, kv->ctx_max, kv->KVHl, kv->D, Lq, pos0,
                             H, KVH, h0, Hl, kv0);
}

static sp_status cu_logits(spi_xdev *d, float *logits, const float *x, const sp_kern_wview *table, int64_t T,
                           int64_t E, int64_t Vl)
{
    return sp_cuda_logits(ctx_of(d), logits, x, table->dt, table->data, table->ld, T, E, Vl, d->ws, d->ws_bytes);
}

static sp_status cu_argmax(spi_xdev *d, const float *logits, int64_t V, int32_t *tok)
{
    cuda_dev *c = d->impl;
    SP_CHECK(sp_cuda_argmax(c->ctx, c->pick, logits, 1, V));
    return sp_cuda_download(c->ctx, tok, c->pick, sizeof *tok);
}

static const spi_xops cuda_ops = {
    .name = "cuda",
    .host_memory = 0,
    .open = cu_open,
    .close = cu_close,
    .alloc = cu_alloc,
    .release = cu_release,
    .upload = cu_upload,
    .download = cu_download,
    .copy2d = cu_copy2d,
    .zero = cu_zero,
    .sync = cu_sync,
    .embed = cu_embed,
    .pos_add = cu_pos_add,
    .norm_stats = cu_norm_stats,
    .norm_apply = cu_norm_apply,
    .matmul = cu_matmul,
    .bias_add = cu_bias_add,
    .act = cu_act,
    .add = cu_add,
    .rope = cu_rope,
    .kv_append = cu_kv_append,
    .attention = cu_attention,
    .logits = cu_logits,
    .argmax = cu_argmax,
};

const spi_xops *spi_xops_cuda(void) { return &cuda_ops; }
#else
const spi_xops *spi_xops_cuda(void) { return NULL; }
#endif
