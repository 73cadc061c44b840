/*
 * exec_mem.c: chip memory (see spi_exec.h): every buffer, scratch block,
 * KV cache and weight a chip holds, allocated once at setup, checked against
 * sp_lower_mem_sizes, released at teardown.
 */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "exec/spi_exec.h"

/* dst (rows, cols) of leading dimension dld <- src of sld; elements of eb bytes, on the chip's device */
sp_status spi_copy_block(chip *ch, void *dst, int64_t dld, const void *src, int64_t sld, int64_t rows,
                            int64_t cols, int eb)
{
    return ch->ops->copy2d(&ch->dev, dst, (size_t)(dld * eb), src, (size_t)(sld * eb), (size_t)(cols * eb),
                           (size_t)rows);
}

/* n contiguous elements */
sp_status spi_copy_flat(chip *ch, void *dst, const void *src, int64_t n, int eb)
{
    return spi_copy_block(ch, dst, n, src, n, 1, n, eb);
}

/* the same in host memory (weight shards are built on the host) */
void spi_copy_block_host(char *dst, int64_t dld, const char *src, int64_t sld, int64_t rows, int64_t cols, int eb)
{
    (void)spi_xops_cpu.copy2d(NULL, dst, (size_t)(dld * eb), src, (size_t)(sld * eb), (size_t)(cols * eb),
                              (size_t)rows);
}

/* a block built in host memory, moved to the chip's device (the CPU's: stays);
 * on failure *p is NULL and nothing is held */
sp_status spi_to_device(chip *ch, void **p, size_t bytes)
{
    if (ch->ops->host_memory || !*p) return SP_OK;
    void *d = NULL;
    sp_status st = ch->ops->alloc(&ch->dev, bytes, &d);
    if (!st) st = ch->ops->upload(&ch->dev, d, *p, bytes);
    free(*p);   /* an upload has read the host block when it returns */
    if (st) {
        ch->ops->release(&ch->dev, d);
        d = NULL;
    }
    *p = d;
    return st;
}

/* ---- per-chip setup and main loop ------------------------------------------------ */
sp_shape spi_shape_of(const sp_exec *ex, int decode, int64_t step)
{
    sp_shape sh;
    sh.batch = ex->B;
    sh.q_len = decode ? 1 : ex->P;
    sh.context = decode ? ex->P + step : ex->P;
    sh.max_context = ex->P + ex->G;
    sh.act_dtype = SP_DT_F32;
    return sh;
}

static int64_t max_coll_bytes(const sp_steps *ss)
{
    int64_t mx = 0;
    for (int i = 0; i < ss->n; i++) {
        const sp_step *s = &ss->s[i];
        if (s->kind != SP_STEP_COLL) continue;
        int64_t b = (int64_t)s->coll.group * s->coll.elems * sp_dtype_bytes(s->coll.dtype);
        if (b > mx) mx = b;
    }
    return mx;
}

sp_status spi_chip_setup(chip *ch)
{
    sp_exec *ex = ch->ex;
    sp_shape sp = spi_shape_of(ex, 0, 0), sd = spi_shape_of(ex, 1, ex->G);
    ch->pf = malloc(sizeof *ch->pf);
    ch->dc = malloc(sizeof *ch->dc);
    if (!ch->pf || !ch->dc) return spi_fail(SP_ENOMEM, "programs");
    SP_CHECK(sp_lower(ch->m, ch->l, SP_PHASE_PREFILL, &sp, ch->stage, ch->pf));
    SP_CHECK(sp_lower(ch->m, ch->l, SP_PHASE_DECODE, &sd, ch->stage, ch->dc));
    const sp_program *pf = ch->pf, *dc = ch->dc;
    ch->dev.ops = ex->ops;
    SP_CHECK(ex->ops->open(&ch->dev));
    ch->ops = ex->ops;
    const spi_xops *o = ch->ops;
    spi_xdev *d = &ch->dev;
    int64_t first, cnt;
    sp_lower_stage_layers(ch->m->n_layers, ch->l->stages, ch->stage, &first, &cnt);
    ch->first_layer = first;
    /* buffers: the max over both programs, allocated once */
    int64_t maxb = 0;
    for (int b = 1; b < SP_BUF_COUNT; b++) {
        int64_t v = pf->buf_bytes[b] > dc->buf_bytes[b] ? pf->buf_bytes[b] : dc->buf_bytes[b];
        if (v > maxb) maxb = v;
        if (v > 0 && o->alloc(d, (size_t)v, &ch->buf[b])) return spi_fail(SP_ENOMEM, "buffer %s: %s", sp_buf_name(b), sp_last_error());
        if (b >= SP_BUF_WQ && b <= SP_BUF_WOUT) ch->alloc_gathered += v;
        else ch->alloc_act += v;
    }
    int64_t tb = 0, v;
    const sp_steps *all[6] = {&pf->pre, &pf->layer, &pf->post, &dc->pre, &dc->layer, &dc->post};
    for (int i = 0; i < 6; i++)
        if ((v = max_coll_bytes(all[i])) > tb) tb = v;
    ch->tmp_bytes = (size_t)tb;
    if (o->alloc(d, (size_t)tb + 64, &ch->tmp1) || o->alloc(d, (size_t)tb + 64, &ch->tmp2) ||
        o->alloc(d, (size_t)maxb + 64, (void **)&ch->qs) || o->alloc(d, (size_t)maxb + 64, (void **)&ch->ks) ||
        o->alloc(d, (size_t)maxb + 64, (void **)&ch->vs))
        return spi_fail(SP_ENOMEM, "scratch: %s", sp_last_error());
    int64_t maxrows = ex->B * ex->P + 16;
    ch->pos = malloc((size_t)maxrows * sizeof *ch->pos);
    d->mm_bytes = 256 * 512 * 4;
    d->mm_scr = malloc(d->mm_bytes);
    ch->ctx_max = ex->P + ex->G;
    d->at_bytes = sp_kern_attention_scratch_bytes(ch->ctx_max);
    d->at_scr = malloc(d->at_bytes + 64);
    ch->sm_bytes = sp_kern_sample_scratch_bytes(pf->vocab_padded);
    ch->sm_scr = malloc(ch->sm_bytes + 64);
    if (!ch->pos || !d->mm_scr || !d->at_scr || !ch->sm_scr) return spi_fail(SP_ENOMEM, "scratch");
    if (!o->host_memory) {
        /* host side of the device's logits rows and token hand-off */
        ch->hrow = malloc((size_t)pf->vocab_padded * sizeof *ch->hrow);
        if (!ch->hrow || o->alloc(d, (size_t)ex->B * sizeof *ch->dtok, (void **)&ch->dtok))
            return spi_fail(SP_ENOMEM, "logits row / token buffers");
    }
    /* KV cache */
    int64_t D = ch->m->d_head;
    ch->kv_mb_elems = pf->kv_seqs * ch->ctx_max * pf->kv_heads_cache * D;
    ch->kv_layer_elems = ch->kv_mb_elems * ch->l->microbatches;
    if (ch->l->kv != SP_DT_F32 && ch->l->kv != SP_DT_BF16)
        return spi_fail(SP_ENOTSUP, "KV cache dtype %s (the executor keeps f32 or bf16)", sp_dtype_name(ch->l->kv));
    size_t kvb = (size_t)(ch->kv_layer_elems * cnt * sp_dtype_bytes(ch->l->kv));
    if (o->alloc(d, kvb + 64, &ch->kc) || o->alloc(d, kvb + 64, &ch->vc))
        return spi_fail(SP_ENOMEM, "KV cache: %s", sp_last_error());
    ch->alloc_kv = 2 * (int64_t)kvb;
    /* weights */
    ch->lw = calloc((size_t)(cnt * SP_W_COUNT), sizeof *ch->lw);
    ch->lscale = calloc((size_t)(cnt * SP_W_COUNT), sizeof *ch->lscale);
    if (!ch->lw || !ch->lscale) return spi_fail(SP_ENOMEM, "weights");
    for (int w = SP_W_Q; w <= SP_W_NORM2; w++) {
        if (!pf->wspec[w].present) continue;
        for (int64_t li = 0; li < cnt; li++)
            SP_CHECK(spi_build_shard(ch, &pf->wspec[w], first + li, &ch->lw[li * SP_W_COUNT + w],
                                 &ch->lscale[li * SP_W_COUNT + w]));
    }
    if (ch->m->bias) {
        if (!(ch->lb = calloc((size_t)(cnt * SP_W_COUNT), sizeof *ch->lb))) return spi_fail(SP_ENOMEM, "biases");
        for (int w = SP_W_Q; w <= SP_W_OUT; w++)
            for (int64_t li = 0; pf->wspec[w].present && li < cnt; li++) {
                int64_t len;
                const float *g = spi_global_bias(ch, first + li, w, &len);
                if (!g) continue;
                float *b = malloc((size_t)len * sizeof *b);
                if (!b) return spi_fail(SP_ENOMEM, "biases");
                memcpy(b, g, (size_t)len * sizeof *b);
                ch->lb[li * SP_W_COUNT + w] = b;
                ch->alloc_weights += len * (int64_t)sizeof *b;
                SP_CHECK(spi_to_device(ch, (void **)&ch->lb[li * SP_W_COUNT + w], (size_t)len * sizeof *b));
            }
    }
    int64_t maxc = 1;
    for (int w = SP_W_Q; w <= SP_W_OUT; w++)
        if (pf->wspec[w].present && pf->wspec[w].cols > maxc) maxc = pf->wspec[w].cols;
    if (o->alloc(d, (size_t)maxc * sizeof *ch->scl, (void **)&ch->scl)) return spi_fail(SP_ENOMEM, "scales: %s", sp_last_error());
    float *dummy = NULL;
    for (int w = SP_W_NORMF; w <= SP_W_POS; w++)
        if (pf->wspec[w].present) SP_CHECK(spi_build_shard(ch, &pf->wspec[w], 0, &ch->wt[w], &dummy));
    int vocab_w = pf->wspec[SP_W_LMHEAD].present ? SP_W_LMHEAD : SP_W_EMBED;
    if (pf->wspec[vocab_w].present) {
        sp_kern_wview tv = {pf->wspec[vocab_w].dtype, NULL, ch->m->d_model, NULL};
        d->lg_bytes = sp_kern_logits_scratch_bytes(&tv, ch->m->d_model);
        if (d->lg_bytes && !(d->lg_scr = malloc(d->lg_bytes))) return spi_fail(SP_ENOMEM, "logits scratch");
    }
    /* what this chip holds must be what the cost model's pure size function says */
    sp_mem_sizes ms;
    SP_CHECK(sp_lower_mem_sizes(pf, dc, &ms));
    /* a device with its own memory gets the predicted dequantisation workspace and
     * nothing more: its matmul / logits kernels size their tiles to it, 64 columns
     * of a stored shard, fewer of a weight gathered over its rows (the CPU kernels
     * keep their host scratch above) */
    if (!o->host_memory && ms.workspace > 0) {
        d->ws_bytes = (size_t)ms.workspace;
        if (o->alloc(d, d->ws_bytes, &d->ws)) return spi_fail(SP_ENOMEM, "workspace: %s", sp_last_error());
        ch->alloc_ws = ms.workspace;
    }
    int64_t ws_pred = o->host_memory ? 0 : ms.workspace;
    if (ms.weights != ch->alloc_weights || ms.gathered_weights != ch->alloc_gathered || ms.kv != ch->alloc_kv ||
        ms.activations != ch->alloc_act || ws_pred != ch->alloc_ws) {
        if (!ch->mismatches)
            snprintf(ch->first_mismatch, sizeof ch->first_mismatch,
                     "chip %d memory: weights %lld/%lld, gathered %lld/%lld, kv %lld/%lld, activations %lld/%lld, "
                     "workspace %lld/%lld (allocated/predicted)",
                     ch->rank, (long long)ch->alloc_weights, (long long)ms.weights, (long long)ch->alloc_gathered,
                     (long long)ms.gathered_weights, (long long)ch->alloc_kv, (long long)ms.kv,
                     (long long)ch->alloc_act, (long long)ms.activations, (long long)ch->alloc_ws,
                     (long long)ws_pred);
        ch->mismatches++;
    }
    return SP_OK;
}

void spi_chip_teardown(chip *ch)
{
    int64_t cnt = ch->pf ? ch->pf->n_layers : 0;
    if (ch->ops) {
        /* what lives on the device (nothing was placed there before it opened) */
        const spi_xops *o = ch->ops;
        spi_xdev *d = &ch->dev;
        for (int b = 0; b < SP_BUF_COUNT; b++) o->release(d, ch->buf[b]);
        if (ch->lw)
            for (int64_t i = 0; i < cnt * SP_W_COUNT; i++) o->release(d, ch->lw[i]);
        if (ch->lb)
            for (int64_t i = 0; i < cnt * SP_W_COUNT; i++) o->release(d, ch->lb[i]);
        for (int w = 0; w < SP_W_COUNT; w++) o->release(d, ch->wt[w]);
        o->release(d, ch->kc);
        o->release(d, ch->vc);
        o->release(d, ch->tmp1);
        o->release(d, ch->tmp2);
        o->release(d, ch->qs);
        o->release(d, ch->ks);
        o->release(d, ch->vs);
        o->release(d, ch->dtok);
        o->release(d, ch->scl);
        o->release(d, ch->dev.ws);
        if (ch->lscale)
            for (int64_t i = 0; i < cnt * SP_W_COUNT; i++) o->release(d, ch->lscale[i]);
        o->close(d);
    } else if (ch->dev.ops) {
        ch->dev.ops->close(&ch->dev);   /* open failed part way */
    }
    free(ch->lb);
    free(ch->lw);
    free(ch->lscale);
    free(ch->dev.lg_scr);
    free(ch->pos);
    free(ch->dev.mm_scr);
    free(ch->dev.at_scr);
    free(ch->sm_scr);
    free(ch->hrow);
    free(ch->pf);
    free(ch->dc);
}
