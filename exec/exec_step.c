/*
 * exec_step.c: the interpreter (see spi_exec.h): one step of a
 * program on a chip, as lower.c defines it.
 */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "exec/spi_exec.h"

/* ---- attention helpers --------------------------------------------------------- */
/* a scratch slot holds `elems` fp32 values, as the lowering sized it */
static sp_status slot_holds(const chip *ch, sp_scr slot, int64_t elems)
{
    if (elems * 4 <= ch->scr_bytes[slot]) return SP_OK;
    return spi_fail(SP_EINTERNAL, "%lld values into the %s slot of %lld bytes", (long long)elems, sp_scr_name(slot),
                    (long long)ch->scr_bytes[slot]);
}

static sp_status rope_rows(chip *ch, float *x, int64_t B, int64_t Lq, int64_t nh, int64_t pos0)
{
    if (ch->m->positions != SP_POS_ROPE) return SP_OK;
    if (B * Lq * (int64_t)sizeof *ch->pos > ch->scr_bytes[SP_SCR_POS])
        return spi_fail(SP_EINTERNAL, "positions of %lld rows, the slot holds %lld bytes", (long long)(B * Lq),
                        (long long)ch->scr_bytes[SP_SCR_POS]);
    for (int64_t r = 0; r < B * Lq; r++) ch->pos[r] = pos0 + r % Lq;
    return ch->ops->rope(&ch->dev, x, B * Lq, nh, ch->m->d_head, sp_model_rotary_dims(ch->m), ch->pos, ch->ex->rope_inv,
                         ch->ex->rope_scale);
}

static int cache_views(chip *ch, int mb, sp_kern_kv kv[2], int64_t first[2]);
static char *kv_staging(chip *ch, int64_t li, int64_t *blk);

/* ---- ragged batches (sp_lower.h, "Ragged batches"): each sequence its own rows ---- */
/* The i-th sequence of a ragged step on this chip: of the chip's block of the step's
 * batch_axes (every sequence of the pass when they are none); *seq -1 past them. */
static void ragged_seq(const chip *ch, const sp_step *s, int64_t i, int64_t *seq, int64_t *slot, int64_t *row0,
                       int64_t *q, int64_t *pos0)
{
    sp_lower_ragged_blk_seq(ch->prog, spi_asize(ch, s->batch_axes), spi_aidx(ch, s->batch_axes), i, seq, slot, row0, q,
                            pos0);
}

/* positions of a ragged step's packed rows into ch->pos: row0_i + t -> pos0_i + t (a block's
 * zero rows past its tokens: position 0) */
static sp_status ragged_positions(chip *ch, const sp_step *s)
{
    if (s->m * (int64_t)sizeof *ch->pos > ch->scr_bytes[SP_SCR_POS])
        return spi_fail(SP_EINTERNAL, "positions of %lld rows, the slot holds %lld bytes", (long long)s->m,
                        (long long)ch->scr_bytes[SP_SCR_POS]);
    int64_t rows = 0;
    for (int64_t i = 0; i < s->batch; i++) {
        int64_t b, slot, row0, q, pos0;
        ragged_seq(ch, s, i, &b, &slot, &row0, &q, &pos0);
        if (b < 0) break;
        if (row0 + q > s->m) return spi_fail(SP_EINTERNAL, "ragged row block %lld of %lld", (long long)i, (long long)s->batch);
        for (int64_t t = 0; t < q; t++) ch->pos[row0 + t] = pos0 + t;
        rows += q;
    }
    if (rows != s->m && !(s->blk_rows && rows < s->m))
        return spi_fail(SP_EINTERNAL, "ragged step of %lld rows, its sequences hold %lld", (long long)s->m, (long long)rows);
    for (int64_t r = rows; r < s->m; r++) ch->pos[r] = 0;
    return SP_OK;
}

static sp_status ragged_rope(chip *ch, const sp_step *s, float *x, int64_t nh)
{
    if (ch->m->positions != SP_POS_ROPE) return SP_OK;
    SP_CHECK(ragged_positions(ch, s));
    return ch->ops->rope(&ch->dev, x, s->m, nh, ch->m->d_head, sp_model_rotary_dims(ch->m), ch->pos, ch->ex->rope_inv,
                         ch->ex->rope_scale);
}

/* cache slot b (the sequence's index in the chip's cache block of kv_seqs) alone (the slots
 * do not depend on which sequences a decode step runs); offload_kv: the last kv_host_seqs
 * slots are the host-held sequences', in layer li's staging block (the host copies move them) */
static sp_status ragged_slot(chip *ch, int mb, int64_t b, sp_kern_kv *kv)
{
    const sp_program *p = ch->prog;
    int64_t H = p->kv_host_seqs, dev = p->kv_seqs - H;
    if (b < 0 || b >= p->kv_seqs)
        return spi_fail(SP_EINTERNAL, "ragged cache slot %lld of %lld", (long long)b, (long long)p->kv_seqs);
    int eb = sp_dtype_bytes(ch->l->kv);
    int64_t row = p->kv_heads_cache * ch->m->d_head;
    if (b >= dev) {
        int64_t blk;
        char *st = kv_staging(ch, ch->li, &blk) + (b - dev) * ch->ctx_max * row * eb;
        kv->k = st;
        kv->v = st + blk;
    } else {
        size_t off = (size_t)((ch->li * ch->kv_layer_elems + mb * ch->kv_mb_elems + b * ch->ctx_max * row) * eb);
        kv->k = (char *)ch->kc + off;
        kv->v = (char *)ch->vc + off;
    }
    kv->dt = ch->l->kv;
    kv->B = 1;
    kv->ctx_max = ch->ctx_max;
    kv->KVHl = p->kv_heads_cache;
    kv->D = ch->m->d_head;
    return SP_OK;
}

static sp_status run_kv_store_ragged(chip *ch, const sp_step *s, int mb)
{
    const sp_model *m = ch->m;
    int64_t D = m->d_head, T = s->m, kvs = s->kv_heads_src, kvc = s->kv_heads;
    int64_t h0, off;
    sp_lower_attn_heads(m, ch->prog, s, ch->rank, &h0, &off);
    SP_CHECK(slot_holds(ch, SP_SCR_K, T * kvc * D));
    SP_CHECK(slot_holds(ch, SP_SCR_V, T * kvc * D));
    SP_CHECK(spi_copy_block(ch, ch->ks, kvc * D, (const float *)ch->buf[s->src2] + off * D, kvs * D, T, kvc * D, 4));
    SP_CHECK(spi_copy_block(ch, ch->vs, kvc * D, (const float *)ch->buf[s->src3] + off * D, kvs * D, T, kvc * D, 4));
    SP_CHECK(ragged_rope(ch, s, ch->ks, kvc));
    for (int64_t i = 0; i < s->batch; i++) {
        int64_t b, slot, row0, q, pos0;
        ragged_seq(ch, s, i, &b, &slot, &row0, &q, &pos0);
        if (b < 0) break;
        sp_kern_kv kv;
        SP_CHECK(ragged_slot(ch, mb, slot, &kv));
        SP_CHECK(ch->ops->kv_append(&ch->dev, &kv, ch->ks + row0 * kvc * D, ch->vs + row0 * kvc * D, q, pos0));
    }
    return SP_OK;
}

/* each sequence's queries over its own keys: prefill its prompt's (src2/src3), decode its cache slot */
static sp_status run_attn_ragged(chip *ch, const sp_step *s, int mb)
{
    const sp_model *m = ch->m;
    int64_t D = m->d_head, T = s->m, Hl = s->heads, H = m->n_heads, kvs = s->kv_heads_src;
    int64_t h0, kv0;
    sp_lower_attn_heads(m, ch->prog, s, ch->rank, &h0, &kv0);
    int64_t Hr = H - h0 < Hl ? H - h0 : Hl;
    if (Hr < 0) Hr = 0;
    float *out = ch->buf[s->dst];
    SP_CHECK(slot_holds(ch, SP_SCR_Q, T * Hl * D));
    SP_CHECK(spi_copy_flat(ch, ch->qs, ch->buf[s->src], T * Hl * D, 4));
    SP_CHECK(ragged_rope(ch, s, ch->qs, Hl));
    if (!s->from_cache) {
        SP_CHECK(slot_holds(ch, SP_SCR_K, T * kvs * D));
        SP_CHECK(spi_copy_flat(ch, ch->ks, ch->buf[s->src2], T * kvs * D, 4));
        SP_CHECK(ragged_rope(ch, s, ch->ks, kvs));
    }
    /* padded heads: the real ones computed densely (queries in V, outputs in K), then spread */
    float *q = ch->qs, *o = out;
    int64_t Hx = Hl;
    if (Hr != Hl) {
        SP_CHECK(ch->ops->zero(&ch->dev, out, (size_t)(T * Hl * D) * 4));
        if (Hr == 0) return SP_OK;
        if (!s->from_cache) return spi_fail(SP_ENOTSUP, "padded query heads in prefill attention");
        SP_CHECK(slot_holds(ch, SP_SCR_K, T * Hr * D));
        SP_CHECK(slot_holds(ch, SP_SCR_V, T * Hr * D));
        SP_CHECK(spi_copy_block(ch, ch->vs, Hr * D, ch->qs, Hl * D, T, Hr * D, 4));
        q = ch->vs;
        o = ch->ks;
        Hx = Hr;
    }
    if (s->blk_rows) SP_CHECK(ch->ops->zero(&ch->dev, o, (size_t)(T * Hx * D) * 4));   /* a block's zero rows */
    for (int64_t i = 0; i < s->batch; i++) {
        int64_t b, slot, row0, L, pos0;
        ragged_seq(ch, s, i, &b, &slot, &row0, &L, &pos0);
        if (b < 0) break;
        sp_kern_kv kv;
        if (s->from_cache) {
            SP_CHECK(ragged_slot(ch, mb, slot, &kv));
        } else {
            kv.dt = SP_DT_F32;
            kv.k = ch->ks + row0 * kvs * D;
            kv.v = (float *)ch->buf[s->src3] + row0 * kvs * D;
            kv.B = 1;
            kv.ctx_max = L;
            kv.KVHl = kvs;
            kv.D = D;
        }
        SP_CHECK(ch->ops->attention(&ch->dev, o + row0 * Hx * D, q + row0 * Hx * D, &kv, L, pos0, H, m->n_kv_heads, h0, Hx,
                                    kv0));
    }
    if (Hr != Hl) return spi_copy_block(ch, out, Hl * D, o, Hr * D, T, Hr * D, 4);
    return SP_OK;
}

/* The cache of the micro-batch's sequences this pass runs, in up to two parts
 * (offload): part 0 the device cache's sequences, part 1 the host-held ones'
 * staging block of layer li (sp_lower.h, "Offload").  Returns the number of
 * parts; *first[i] is part i's first sequence among the pass's. */
static int cache_views(chip *ch, int mb, sp_kern_kv kv[2], int64_t first[2])
{
    const sp_program *p = ch->prog;
    int eb = sp_dtype_bytes(ch->l->kv);
    int64_t H = p->kv_host_seqs, row = p->kv_heads_cache * ch->m->d_head;
    /* the micro-batch's block, then the sequences of the prefill pass being run (offload runs whole prefills) */
    int64_t seq0 = ch->pass_seq * p->kv_pass_seqs;
    size_t off = (size_t)((ch->li * ch->kv_layer_elems + mb * ch->kv_mb_elems + seq0 * ch->ctx_max * row) * eb);
    int n = 0;
    if (p->kv_pass_seqs - H > 0) {
        kv[n].dt = ch->l->kv;
        kv[n].k = (char *)ch->kc + off;
        kv[n].v = (char *)ch->vc + off;
        kv[n].B = p->kv_pass_seqs - H;
        kv[n].ctx_max = ch->ctx_max;
        kv[n].KVHl = p->kv_heads_cache;
        kv[n].D = ch->m->d_head;
        first[n++] = 0;
    }
    if (H > 0) {
        int64_t blk;
        char *b = kv_staging(ch, ch->li, &blk);
        kv[n].dt = ch->l->kv;
        kv[n].k = b;
        kv[n].v = b + blk;
        kv[n].B = H;
        kv[n].ctx_max = ch->ctx_max;
        kv[n].KVHl = p->kv_heads_cache;
        kv[n].D = ch->m->d_head;
        first[n++] = p->kv_pass_seqs - H;
    }
    return n;
}

static sp_status run_kv_store(chip *ch, const sp_step *s, int mb)
{
    if (s->ragged) return run_kv_store_ragged(ch, s, mb);
    const sp_model *m = ch->m;
    int64_t D = m->d_head, Bq = s->batch, Lq = s->q_len, kvs = s->kv_heads_src, kvc = s->kv_heads;
    if (Bq != ch->prog->kv_pass_seqs)
        return spi_fail(SP_EINVAL, "kv-store of %lld sequences into a cache block of %lld", (long long)Bq,
                        (long long)ch->prog->kv_pass_seqs);
    int64_t h0, off;   /* off: the cached heads' first head in k, v */
    sp_lower_attn_heads(m, ch->prog, s, ch->rank, &h0, &off);
    const float *k = ch->buf[s->src2], *v = ch->buf[s->src3];
    SP_CHECK(slot_holds(ch, SP_SCR_K, Bq * Lq * kvc * D));
    SP_CHECK(slot_holds(ch, SP_SCR_V, Bq * Lq * kvc * D));
    /* the cached heads [off, off + kvc) of every row of k, v (Bq·Lq, kvs, D) */
    SP_CHECK(spi_copy_block(ch, ch->ks, kvc * D, k + off * D, kvs * D, Bq * Lq, kvc * D, 4));
    SP_CHECK(spi_copy_block(ch, ch->vs, kvc * D, v + off * D, kvs * D, Bq * Lq, kvc * D, 4));
    SP_CHECK(rope_rows(ch, ch->ks, Bq, Lq, kvc, s->pos0));
    sp_kern_kv kv[2];
    int64_t first[2];
    int n = cache_views(ch, mb, kv, first);
    for (int i = 0; i < n; i++)
        SP_CHECK(ch->ops->kv_append(&ch->dev, &kv[i], ch->ks + first[i] * Lq * kvc * D, ch->vs + first[i] * Lq * kvc * D,
                                    Lq, s->pos0));
    return SP_OK;
}

static sp_status run_attn(chip *ch, const sp_step *s, int mb)
{
    if (s->ragged) return run_attn_ragged(ch, s, mb);
    const sp_model *m = ch->m;
    int64_t D = m->d_head, Bq = s->batch, Lq = s->q_len, Hl = s->heads, H = m->n_heads;
    int64_t h0, kv0;   /* first q head of this chip, first KV head of the keys/values it reads */
    sp_lower_attn_heads(m, ch->prog, s, ch->rank, &h0, &kv0);
    int64_t Hr = H - h0 < Hl ? H - h0 : Hl;
    if (Hr < 0) Hr = 0;
    float *out = ch->buf[s->dst];
    SP_CHECK(slot_holds(ch, SP_SCR_Q, Bq * Lq * Hl * D));
    SP_CHECK(spi_copy_flat(ch, ch->qs, ch->buf[s->src], Bq * Lq * Hl * D, 4));
    SP_CHECK(rope_rows(ch, ch->qs, Bq, Lq, Hl, s->pos0));
    sp_kern_kv kv[2];
    int64_t first[2] = {0, 0};
    int nparts = 1;
    int64_t pos0 = s->pos0;
    if (s->from_cache) {
        if (Bq != ch->prog->kv_pass_seqs)
            return spi_fail(SP_EINVAL, "attention over %lld sequences, cache block holds %lld", (long long)Bq,
                            (long long)ch->prog->kv_pass_seqs);
        nparts = cache_views(ch, mb, kv, first);
    } else {
        if (s->pos0 != 0) return spi_fail(SP_ENOTSUP, "prefill from position %lld (chunked prefill)", (long long)s->pos0);
        int64_t kvs = s->kv_heads_src;
        SP_CHECK(slot_holds(ch, SP_SCR_K, Bq * Lq * kvs * D));
        SP_CHECK(spi_copy_flat(ch, ch->ks, ch->buf[s->src2], Bq * Lq * kvs * D, 4));
        SP_CHECK(rope_rows(ch, ch->ks, Bq, Lq, kvs, 0));
        kv[0].dt = SP_DT_F32;
        kv[0].k = ch->ks;
        kv[0].v = ch->buf[s->src3];
        kv[0].B = Bq;
        kv[0].ctx_max = Lq;
        kv[0].KVHl = kvs;
        kv[0].D = D;
    }
    if (Hr == Hl) {
        /* the query heads of a chip are contiguous: compute in place of the copy's layout; each part
         * of the cache (offload: device, host-held) attends its own sequences' rows */
        for (int i = 0; i < nparts; i++) {
            int64_t r0 = first[i] * Lq * Hl * D;
            SP_CHECK(ch->ops->attention(&ch->dev, out + r0, ch->qs + r0, &kv[i], Lq, pos0, H, m->n_kv_heads, h0, Hl, kv0));
        }
        return SP_OK;
    }
    /* padded heads: compute the real ones densely, then spread */
    SP_CHECK(ch->ops->zero(&ch->dev, out, (size_t)(Bq * Lq * Hl * D) * 4));
    if (Hr == 0) return SP_OK;
    float *qd = ch->vs, *od = ch->ks == kv[0].k ? NULL : ch->ks;
    if (!od) return spi_fail(SP_ENOTSUP, "padded query heads in prefill attention");
    SP_CHECK(slot_holds(ch, SP_SCR_K, Bq * Lq * Hr * D));
    SP_CHECK(slot_holds(ch, SP_SCR_V, Bq * Lq * Hr * D));
    SP_CHECK(spi_copy_block(ch, qd, Hr * D, ch->qs, Hl * D, Bq * Lq, Hr * D, 4));
    for (int i = 0; i < nparts; i++) {
        int64_t r0 = first[i] * Lq * Hr * D;
        SP_CHECK(ch->ops->attention(&ch->dev, od + r0, qd + r0, &kv[i], Lq, pos0, H, m->n_kv_heads, h0, Hr, kv0));
    }
    return spi_copy_block(ch, out, Hl * D, od, Hr * D, Bq * Lq, Hr * D, 4);
}

/* ---- offload: copies over the host link (sp_lower.h, "Offload") ---- */
/* counts a host copy: measured as the executor moved it, predicted as the step says */
static void host_count(chip *ch, const sp_step *s, int64_t moved)
{
    /* a ragged step's: the chip's block's own (the step's figure is the fullest block's) */
    int64_t pred = s->ragged ? sp_lower_ragged_host_bytes(ch->prog, s, spi_aidx(ch, s->batch_axes))
                             : sp_lower_host_bytes(s, 0);
    ch->host_meas += (uint64_t)moved;
    ch->host_pred += (uint64_t)pred;
    if (moved != pred) {
        if (!ch->mismatches)
            snprintf(ch->first_mismatch, sizeof ch->first_mismatch, "chip %d %s layer %lld: %lld host bytes, predicted %lld",
                     ch->rank, sp_step_kind_name(s->kind), (long long)ch->li, (long long)moved, (long long)pred);
        ch->mismatches++;
    }
}

/* Layer li's staging block of the host-held sequences' K/V: block li mod blocks of
 * SP_BUF_KVSTREAM, K (kv_host_seqs, ctx_max, kvh, D), then V at *blk bytes, each SP_MEM_ALIGN'd */
static char *kv_staging(chip *ch, int64_t li, int64_t *blk)
{
    const sp_program *p = ch->prog;
    int64_t row = p->kv_heads_cache * ch->m->d_head * sp_dtype_bytes(ch->l->kv);
    *blk = sp_mem_align(p->kv_host_seqs * ch->ctx_max * row);
    int64_t blocks = p->buf_bytes[SP_BUF_KVSTREAM] / (2 * *blk);
    return (char *)ch->buf[SP_BUF_KVSTREAM] + (li % (blocks > 0 ? blocks : 1)) * 2 * *blk;
}

/* K and V rows [t0, t0 + nt) of host-held sequence q (0 .. kv_host_seqs − 1) of layer li,
 * micro-batch mb: host <-> staging block; the bytes moved */
static int64_t kv_host_seq_rows(chip *ch, int64_t li, int mb, int64_t q, int64_t t0, int64_t nt, int to_host)
{
    const sp_program *p = ch->prog;
    int eb = sp_dtype_bytes(ch->l->kv);
    int64_t row = p->kv_heads_cache * ch->m->d_head * eb, blk;
    char *st = kv_staging(ch, li, &blk);
    size_t hoff = (size_t)((li * ch->hkv_layer_elems + mb * ch->hkv_mb_elems) * eb);
    char *hk = (char *)ch->hkc + hoff, *hv = (char *)ch->hvc + hoff;
    if (nt <= 0) return 0;
    size_t o = (size_t)((q * ch->ctx_max + t0) * row), n = (size_t)(nt * row);
    memcpy(to_host ? hk + o : st + o, to_host ? st + o : hk + o, n);
    memcpy(to_host ? hv + o : st + blk + o, to_host ? st + blk + o : hv + o, n);
    return 2 * (int64_t)n;
}

/* K and V rows [t0, t0 + nt) of every host-held sequence of layer li, micro-batch mb */
static int64_t kv_host_rows(chip *ch, int64_t li, int mb, int64_t t0, int64_t nt, int to_host)
{
    int64_t moved = 0;
    for (int64_t q = 0; q < ch->prog->kv_host_seqs; q++) moved += kv_host_seq_rows(ch, li, mb, q, t0, nt, to_host);
    return moved;
}

/* A ragged step's host copies (sp_lower.h, "Ragged batches"): each host-held sequence taking
 * part, its own rows: a load its stored tokens [0, pos0), a store its new ones [pos0, pos0 + q) */
static int64_t kv_host_rows_ragged(chip *ch, const sp_step *s, int64_t li, int mb, int to_host)
{
    const sp_program *p = ch->prog;
    int64_t dev = p->kv_seqs - p->kv_host_seqs, moved = 0;
    for (int64_t i = 0;; i++) {
        int64_t b, slot, row0, q, pos0;   /* the chip's block's i-th sequence taking part (ragged_seq) */
        ragged_seq(ch, s, i, &b, &slot, &row0, &q, &pos0);
        if (b < 0) break;
        if (slot < dev) continue;
        moved += to_host ? kv_host_seq_rows(ch, li, mb, slot - dev, pos0, q, 1)
                         : kv_host_seq_rows(ch, li, mb, slot - dev, 0, pos0, 0);
    }
    return moved;
}

static sp_status run_host_load(chip *ch, const sp_step *s, int mb)
{
    const sp_program *p = ch->prog;
    /* the layer it fetches: layer 0 from the pre part, else the next one */
    int64_t j = ch->part == SP_PART_PRE ? 0 : ch->li + 1;
    if (s->dst == SP_BUF_WSTREAM) {
        const sp_wkind kd = s->wkind;
        if ((unsigned)kd >= SP_WKIND_COUNT || j >= p->w_kind_streamed[kd])
            return spi_fail(SP_EINTERNAL, "%s weights of layer %lld are not streamed", sp_wkind_name(kd), (long long)j);
        char *src = ch->hbase[j * SP_WKIND_COUNT + kd];
        /* the part's place in the block: attention first, then the FFN when the stage streams both */
        int64_t lw = p->layer_weight_bytes, blocks = p->buf_bytes[SP_BUF_WSTREAM] / (lw > 0 ? lw : 1), at = 0;
        for (int k = 0; k < (int)kd; k++)
            if (p->w_kind_streamed[k] > 0) at += p->kind_weight_bytes[k];
        char *dst = (char *)ch->buf[SP_BUF_WSTREAM] + (j % (blocks > 0 ? blocks : 1)) * lw + at;
        memcpy(dst, src, (size_t)p->kind_weight_bytes[kd]);
        /* layer j's weights of the part are now the staging block's, at the offsets they have in
         * host memory */
        for (int w = SP_W_FIRST_LAYER; w < SP_W_COUNT; w++) {
            int64_t i = j * SP_W_COUNT + w;
            if (sp_weight_wkind((sp_weight)w) != kd) continue;
            if (ch->hlw[i]) ch->lw[i] = dst + ((char *)ch->hlw[i] - src);
            if (ch->hlscale[i]) ch->lscale[i] = (float *)(dst + ((char *)ch->hlscale[i] - src));
            if (ch->hlb[i]) ch->lb[i] = (float *)(dst + ((char *)ch->hlb[i] - src));
        }
        host_count(ch, s, p->kind_weight_bytes[kd]);
        return SP_OK;
    }
    /* the host-held sequences' stored tokens, before this pass's */
    if (j >= p->n_layers) return spi_fail(SP_EINTERNAL, "host K/V of layer %lld of %lld", (long long)j, (long long)p->n_layers);
    host_count(ch, s, s->ragged ? kv_host_rows_ragged(ch, s, j, mb, 0) : kv_host_rows(ch, j, mb, 0, s->context - s->q_len, 0));
    return SP_OK;
}

/* ---- one step ----------------------------------------------------------------- */
static sp_status run_slice(chip *ch, const sp_step *s)
{
    const float *src = ch->buf[s->src];
    float *dst = ch->buf[s->dst];
    int64_t n = s->n, every = s->every > 1 ? s->every : 1, vrows = s->k / every;
    if (s->ragged && s->blk_rows) {
        /* the kept sequence blocks of the packed rows, each padded with zero rows to blk_rows */
        int nb = spi_asize(ch, s->batch_axes);
        int64_t out = 0;
        for (int b = 0; b < nb; b++) {
            if (!sp_lower_slice_keeps(ch->prog, s, ch->rank, b)) continue;
            int64_t r0, rows;
            sp_lower_ragged_blk_rows(ch->prog, nb, b, &r0, &rows);
            if (out + s->blk_rows > s->m || rows > s->blk_rows || r0 + rows > s->k)
                return spi_fail(SP_EINTERNAL, "ragged slice block %d: rows %lld at %lld", b, (long long)rows, (long long)r0);
            SP_CHECK(spi_copy_block(ch, dst + out * n, n, src + r0 * n, n, rows, n, 4));
            if (rows < s->blk_rows)
                SP_CHECK(ch->ops->zero(&ch->dev, dst + (out + rows) * n, (size_t)((s->blk_rows - rows) * n) * 4));
            out += s->blk_rows;
        }
        if (out != s->m) return spi_fail(SP_EINTERNAL, "ragged slice kept %lld rows, expected %lld", (long long)out, (long long)s->m);
        return SP_OK;
    }
    if (s->ragged) {
        /* each sequence's last row: row0 + q_len − 1 (sp_lower.h, "Ragged batches"), of the chip's
         * block over batch_axes; zero rows past the block's sequences */
        for (int64_t i = 0; i < s->m; i++) {
            int64_t b, slot, row0, q, pos0;
            ragged_seq(ch, s, i, &b, &slot, &row0, &q, &pos0);
            if (b < 0) {
                SP_CHECK(ch->ops->zero(&ch->dev, dst + i * n, (size_t)((s->m - i) * n) * 4));
                break;
            }
            if (row0 + q > s->k) return spi_fail(SP_EINTERNAL, "ragged slice row block %lld", (long long)i);
            SP_CHECK(spi_copy_block(ch, dst + i * n, n, src + (row0 + q - 1) * n, n, 1, n, 4));
        }
        return SP_OK;
    }
    /* visible row j of src (every `every`-th row, the last of each group); rows of dst follow on */
#define VROW(j) (src + ((j) * every + every - 1) * n)
    if (!s->batch_axes[0] && !s->axes[0]) return spi_copy_block(ch, dst, n, VROW(0), every * n, s->m, n, 4);
    const char *seq = s->batch_axes[0] ? s->batch_axes : s->axes;
    int nb = spi_asize(ch, seq);
    int64_t rb = vrows / nb, out = 0;
    for (int b = 0; b < nb; b++) {
        if (!sp_lower_slice_keeps(ch->prog, s, ch->rank, b)) continue;
        if (out + rb > s->m) return spi_fail(SP_EINVAL, "slice keeps more than %lld rows", (long long)s->m);
        SP_CHECK(spi_copy_block(ch, dst + out * n, n, VROW(b * rb), every * n, rb, n, 4));
        out += rb;
    }
#undef VROW
    if (out != s->m) return spi_fail(SP_EINVAL, "slice kept %lld rows, expected %lld", (long long)out, (long long)s->m);
    return SP_OK;
}

static sp_status run_step(chip *ch, const sp_step *s, int mb)
{
    const sp_model *m = ch->m;
    const sp_program *p = ch->prog;
    switch (s->kind) {
    case SP_STEP_EMBED: {
        const sp_weight_spec *ws = &p->wspec[SP_W_EMBED];
        int64_t Vl = ws->local_rows, v0 = (int64_t)spi_aidx(ch, s->axes) * Vl;
        sp_kern_wview tv = {ws->dtype, ch->wt[SP_W_EMBED], m->d_model, NULL};
        return ch->ops->embed(&ch->dev, ch->buf[s->dst], ch->in_tok, s->m, &tv, v0, Vl, 0, s->n);
    }
    case SP_STEP_POS: {
        int64_t e0 = (int64_t)spi_aidx(ch, s->axes) * s->n;
        if (s->ragged) SP_CHECK(ragged_positions(ch, s));
        else
            for (int64_t r = 0; r < s->m; r++) ch->pos[r] = s->pos0 + r % s->q_len;
        sp_kern_wview tv = {p->wspec[SP_W_POS].dtype, ch->wt[SP_W_POS], m->d_model, NULL};
        return ch->ops->pos_add(&ch->dev, ch->buf[s->dst], s->m, s->n, &tv, e0, ch->pos);
    }
    case SP_STEP_NORM_STATS: return ch->ops->norm_stats(&ch->dev, ch->buf[s->src], s->m, s->n, ch->buf[s->dst]);
    case SP_STEP_NORM_APPLY: {
        const float *g, *b;
        spi_norm_of(ch, s->weight, &g, &b);
        int64_t e0 = (int64_t)spi_aidx(ch, s->axes) * s->n;
        return ch->ops->norm_apply(&ch->dev, ch->buf[s->src], ch->buf[SP_BUF_STATS], s->k, s->m, s->n, g + e0,
                                   b ? b + e0 : NULL, (float)m->norm_eps, m->norm, ch->buf[s->dst]);
    }
    case SP_STEP_MATMUL: {
        sp_kern_wview v;
        const sp_weight_spec *ws = &p->wspec[s->weight];
        v.dt = ws->dtype;
        v.scale = NULL;
        if (s->wbuf) {
            v.data = ch->buf[s->wbuf];
            v.ld = s->n;
            if (s->n % ws->local_cols)
                return spi_fail(SP_EINVAL, "matmul %s: step (%lld, %lld) vs gathered shards of (%lld, %lld)",
                                sp_weight_name(s->weight), (long long)s->k, (long long)s->n,
                                (long long)ws->local_rows, (long long)ws->local_cols);
        } else if (s->experts > 0) {
            /* MoE: blocks of `capacity` slot rows, block b times local expert b mod experts (sp_lower.h) */
            if (ws->local_rows != s->k || ws->local_cols != s->n || s->capacity < 1 || s->m % s->capacity ||
                ws->count != s->experts)
                return spi_fail(SP_EINVAL, "expert matmul %s: step (%lld, %lld, %lld experts) vs shard (%lld, %lld, %lld)",
                                sp_weight_name(s->weight), (long long)s->k, (long long)s->n, (long long)s->experts,
                                (long long)ws->local_rows, (long long)ws->local_cols, (long long)ws->count);
            /* INT8/FP8: local expert e's scales follow expert e−1's, each block of cols aligned (exec_mem.c) */
            const float *sc0 = NULL;
            if (v.dt == SP_DT_INT8 || v.dt == SP_DT_FP8) SP_CHECK(spi_matmul_scales(ch, s, ws, &sc0));
            int64_t S = s->capacity, shard = sp_mem_align(ws->local_rows * ws->local_cols * sp_dtype_bytes(v.dt));
            int64_t sstride = sp_mem_align(ws->cols * 4) / 4;
            const char *w0 = ch->lw[ch->li * SP_W_COUNT + s->weight];
            v.ld = ws->local_cols;
            for (int64_t b = 0; b < s->m / S; b++) {
                v.data = w0 + (b % s->experts) * shard;
                if (sc0) v.scale = sc0 + (b % s->experts) * sstride;
                SP_CHECK(ch->ops->matmul(&ch->dev, (float *)ch->buf[s->dst] + b * S * s->n,
                                         (const float *)ch->buf[s->src] + b * S * s->k, &v, S, s->k, s->n,
                                         s->accumulate ? SP_KERN_ACCUMULATE : SP_KERN_OVERWRITE));
            }
            return SP_OK;
        } else {
            if (ws->local_rows != s->k || ws->local_cols != s->n)
                return spi_fail(SP_EINVAL, "matmul %s: step (%lld, %lld) vs shard (%lld, %lld)",
                                sp_weight_name(s->weight), (long long)s->k, (long long)s->n,
                                (long long)ws->local_rows, (long long)ws->local_cols);
            v.data = ch->lw[ch->li * SP_W_COUNT + s->weight];
            v.ld = ws->local_cols;
        }
        if (v.dt == SP_DT_INT8 || v.dt == SP_DT_FP8) SP_CHECK(spi_matmul_scales(ch, s, ws, &v.scale));
        return ch->ops->matmul(&ch->dev, ch->buf[s->dst], ch->buf[s->src], &v, s->m, s->k, s->n,
                               s->accumulate ? SP_KERN_ACCUMULATE : SP_KERN_OVERWRITE);
    }
    case SP_STEP_BIAS: {
        int64_t len;
        const float *b = spi_bias_of(ch, s->weight, &len);
        if (!b) return SP_OK;
        int64_t c0 = (int64_t)spi_aidx(ch, s->axes) * s->n;
        if (c0 >= len) return SP_OK;   /* padded columns only */
        return ch->ops->bias_add(&ch->dev, ch->buf[s->dst], b + c0, s->m, s->n, len - c0);
    }
    case SP_STEP_ACT:
        return ch->ops->act(&ch->dev, ch->buf[s->dst], ch->buf[s->src], s->src2 ? ch->buf[s->src2] : NULL, s->m * s->n,
                            sp_model_act(ch->m));
    case SP_STEP_ATTN: return run_attn(ch, s, mb);
    case SP_STEP_KV_STORE: return run_kv_store(ch, s, mb);
    case SP_STEP_HOST_LOAD: return run_host_load(ch, s, mb);
    case SP_STEP_HOST_STORE:
        host_count(ch, s, s->ragged ? kv_host_rows_ragged(ch, s, ch->li, mb, 1)
                                    : kv_host_rows(ch, ch->li, mb, s->pos0, s->q_len, 1));
        return SP_OK;
    case SP_STEP_HOST_WAIT: return SP_OK;   /* the copies above are synchronous */
    case SP_STEP_ADD: return ch->ops->add(&ch->dev, ch->buf[s->dst], ch->buf[s->src], s->m * s->n);
    case SP_STEP_SLICE: return run_slice(ch, s);
    case SP_STEP_LOGITS: {
        sp_weight w = s->weight;
        sp_kern_wview tv = {p->wspec[w].dtype, ch->wt[w], m->d_model, NULL};
        return ch->ops->logits(&ch->dev, ch->buf[s->dst], ch->buf[s->src], &tv, s->m, s->k, s->n);
    }
    case SP_STEP_COLL:
    case SP_STEP_SEND:
    case SP_STEP_RECV: {
        /* collectives within the chip's stage, the hand-off between stages on the flat communicator */
        sp_comm *cc = s->kind == SP_STEP_COLL ? ch->c : ch->fc;
        sp_comm_counters a, b;
        SP_CHECK(sp_comm_stats(cc, &a));
        sp_status st;
        if (s->kind != SP_STEP_COLL) SP_CHECK(ch->ops->sync(&ch->dev));   /* run_coll syncs after packing */
        if (s->kind == SP_STEP_COLL) st = spi_run_coll(ch, s);
        else if (ch->ex->hetero) st = spi_handoff_run(ch, s);   /* stages of their own meshes: the lowering's blocks */
        else if (s->kind == SP_STEP_SEND)
            st = sp_comm_send(cc, spi_peer_stage(ch, ch->stage + 1), ch->buf[s->src], (size_t)s->coll.elems,
                              s->coll.dtype);
        else
            st = sp_comm_recv(cc, spi_peer_stage(ch, ch->stage - 1), ch->buf[s->dst], (size_t)s->coll.elems,
                              s->coll.dtype);
        if (st) return st;
        SP_CHECK(sp_comm_stats(cc, &b));
        return spi_check_bytes(ch, s, &a, &b, s->coll.kind);
    }
    /* MoE routing on host memory (sp_exec_build keeps MoE models on the CPU device) */
    /* the routing buffer: 2·n_experts int64 counts, then the (m, k) choices (sp_lower.h) */
#define ROUTES(buf, n) ((sp_kern_route *)SP_ROUTE_CHOICES(buf, n))
    case SP_STEP_ROUTE:
        sp_kern_moe_route(ROUTES(ch->buf[s->dst], s->n), ch->buf[s->src], s->m, s->n, s->k,
                          m->router == SP_ROUTER_TOPK_RENORM, ch->buf[s->dst]);
        return SP_OK;
    case SP_STEP_DISPATCH:
    {
        /* the chip's column block `axes` of src's src_cols columns (coordinated all-to-all), or all of them */
        int64_t ld = s->src_cols ? s->src_cols : s->n;
        const float *x = (const float *)ch->buf[s->src] + (s->src_cols ? (int64_t)spi_aidx(ch, s->axes) * s->n : 0);
        return sp_kern_moe_dispatch(ch->buf[s->dst], x, ld, ROUTES(ch->buf[s->src2], s->experts), s->m, s->n, s->k,
                                    s->experts, s->capacity);
    }
    case SP_STEP_GATE_SCALE:
        sp_kern_sigmoid_scale_rows(ch->buf[s->dst], ch->buf[s->src], s->m, s->n);
        return SP_OK;
    case SP_STEP_COMBINE:
        sp_kern_moe_combine(ch->buf[s->dst], ch->buf[s->src], ROUTES(ch->buf[s->src2], s->experts), s->m, s->n, s->k,
                            s->capacity, s->accumulate);
        return SP_OK;
#undef ROUTES
    default: return spi_fail(SP_EINVAL, "step kind %d", (int)s->kind);
    }
}

sp_status spi_timeline_reserve(chip *ch, int64_t cap)
{
    if (cap <= ch->cap_ev) return SP_OK;
    uint64_t bytes;
    if (!spi_mul_u64((uint64_t)cap, sizeof *ch->ev, &bytes) || bytes > SIZE_MAX)
        return spi_fail(SP_ENOMEM, "timeline of %lld steps", (long long)cap);
    spi_event *ev = realloc(ch->ev, (size_t)bytes);
    if (!ev) return spi_fail(SP_ENOMEM, "timeline of %lld steps", (long long)cap);
    ch->ev = ev;
    ch->cap_ev = cap;
    return SP_OK;
}

/* appends one step's times to the chip's timeline (reserved for the whole
 * run by chip_run; grown here only if a run ever takes more steps) */
static sp_status record(chip *ch, const sp_step *s, sp_prog_part part, int i, int mb, double t0, double t1)
{
    if (ch->nev == ch->cap_ev) SP_CHECK(spi_timeline_reserve(ch, ch->cap_ev ? 2 * ch->cap_ev : 1024));
    spi_event *e = &ch->ev[ch->nev++];
    e->t0 = t0;
    e->t1 = t1;
    e->token = ch->token;
    {   /* sequence chunk i, token pass j: pass i·passes_tok + j (sp_trace.h) */
        const sp_program *p = ch->prog;
        int64_t nt = p->passes_tok > 1 ? p->passes_tok : 1, ns = p->passes_seq > 1 ? p->passes_seq : 1;
        e->pass = ch->token == 0 && ns * nt > 1 ? ch->pass_seq * nt + (nt - 1 - p->shape.passes_left) : -1;
    }
    e->layer = ch->li;
    e->flops = s->flops;
    e->bytes = sp_trace_step_bytes(s);
    e->part = part;
    e->index = i;
    e->mb = mb;
    return SP_OK;
}

sp_status spi_run_steps(chip *ch, sp_prog_part part, int mb)
{
    const sp_program *p = ch->prog;
    const sp_steps *ss = sp_program_part(p, part);
    double *cls = ch->class_s[p->phase == SP_PHASE_DECODE];
    /* a device that queues work is waited for after each step, so a step's time is its own */
    int wait = !ch->ops->host_memory;
    ch->part = part;
    for (int i = 0; i < ss->n; i++) {
        const sp_step *s = &ss->s[i];
        if ((part == SP_PART_LAYER || part == SP_PART_DENSE) && !sp_lower_step_runs(p, s, ch->li)) continue;
        double t0 = spi_now_s();
        sp_status st = run_step(ch, s, mb);
        if (!st && wait) st = ch->ops->sync(&ch->dev);
        double t1 = spi_now_s();
        if (st)
            return spi_fail(st, "chip %d %s step %d (%s): %s", ch->grank, sp_phase_name(p->phase), i,
                            sp_step_kind_name(s->kind), sp_last_error());
        cls[sp_step_class_of(s)] += t1 - t0;
        if (ch->ex->trace) SP_CHECK(record(ch, s, part, i, mb, t0, t1));
    }
    return SP_OK;
}
