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

/* ---- per-chip setup and main loop ------------------------------------------------ */
sp_shape spi_shape_of(const sp_exec *ex, int decode, int64_t step)
{
    sp_shape sh;
    sh.batch = ex->B;
    sh.q_len = decode ? 1 : ex->P;
    sh.context = decode ? ex->P + step : ex->P;
    sh.max_context = ex->P + (ex->role == 1 ? 0 : ex->G);   /* a prefill group keeps the prompt's cache */
    if (ex->ragged) sh.max_context = ex->ragged->max_context;   /* the longest sequence's */
    sh.act_dtype = SP_DT_F32;
    sh.passes_left = 0;
    return sh;
}

int64_t spi_exec_arena_delta;

/* One arena: blocks carved in order, each on SP_MEM_ALIGN. */
typedef struct arena {
    char *base;
    int64_t size, used;
} arena;

/* the next block of `bytes` (NULL for 0); SP_EINTERNAL, naming the block, when the arena is too small */
static sp_status take(chip *ch, arena *a, int64_t bytes, const char *what, void **out)
{
    *out = NULL;
    if (bytes <= 0) return SP_OK;
    int64_t b = sp_mem_align(bytes);
    if (a->used + b > a->size)
        return spi_fail(SP_EINTERNAL, "chip %d: %s (%lld bytes) does not fit its arena of %lld bytes (%lld used): "
                                      "the lowering's memory sizes do not cover what the executor holds",
                        ch->rank, what, (long long)bytes, (long long)a->size, (long long)a->used);
    *out = a->base + a->used;
    a->used += b;
    return SP_OK;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Every block a chip holds, carved from its arena (sp_lower_mem_sizes'
 * total; on a device with its own memory the sp_scr_host slots come from a
 * host arena of their size), in this order: buffers, KV cache, layer weights
 * (shard, scales, bias), model weights, workspace, scratch.  Weight shards
 * are built on the host (in place on the CPU) and uploaded into their
 * blocks. */
sp_status spi_chip_setup(chip *ch)
{
    sp_exec *ex = ch->ex;
    sp_shape sp = spi_shape_of(ex, 0, 0), sd = spi_shape_of(ex, 1, ex->G);
    ch->pf = malloc(sizeof *ch->pf);
    ch->dc = malloc(sizeof *ch->dc);
    if (!ch->pf || !ch->dc) return spi_fail(SP_ENOMEM, "programs");
    /* a group of separate groups runs its phase alone: its memory is that phase's */
    sp_mem_sizes ms;
    if (ex->ragged) {
        /* a ragged batch: this replica's sequences and each micro-batch's (sp_lower.h, "Ragged
         * batches"); the programs sized for every micro-batch's largest step (the arena holds them all) */
        int M = ch->l->microbatches > 1 ? ch->l->microbatches : 1, R = ch->l->replicas;
        int64_t per = ex->B / R;
        SP_CHECK(sp_ragged_slice(ex->ragged, ch->replica * per, per, &ch->rg));
        if (!(ch->rgm = calloc((size_t)M, sizeof *ch->rgm))) return spi_fail(SP_ENOMEM, "micro-batches");
        for (int j = 0; j < M; j++) SP_CHECK(sp_ragged_micro(ex->ragged, R, M, ch->replica, j, &ch->rgm[j]));
        SP_CHECK(sp_lower_ragged_mem(ch->m, &ex->l, &sp, &sd, ch->rgm, M, ch->stage, ch->pf, ch->dc, &ms));
    } else {
        /* lowered for the job's layout (under stage_mesh each stage's program indexes its view, ch->l) */
        if (ex->role != 2) SP_CHECK(sp_lower(ch->m, &ex->l, SP_PHASE_PREFILL, &sp, ch->stage, ch->pf));
        if (ex->role != 1) SP_CHECK(sp_lower(ch->m, &ex->l, SP_PHASE_DECODE, &sd, ch->stage, ch->dc));
    }
    if (ex->role == 1) *ch->dc = *ch->pf;
    if (ex->role == 2) *ch->pf = *ch->dc;
    const sp_program *pf = ch->pf, *dc = ch->dc;
    if (ch->l->kv != SP_DT_F32 && ch->l->kv != SP_DT_BF16)
        return spi_fail(SP_ENOTSUP, "KV cache dtype %s (the executor keeps f32 or bf16)", sp_dtype_name(ch->l->kv));
    ch->dev.ops = ex->ops;
    SP_CHECK(ex->ops->open(&ch->dev));
    ch->ops = ex->ops;
    const spi_xops *o = ch->ops;
    spi_xdev *d = &ch->dev;
    int64_t first, cnt;
    sp_layout_stage_layers(ch->l, ch->m->n_layers, ch->stage, &first, &cnt);
    ch->first_layer = first;

    /* the arenas: what the lowering predicts, and nothing else */
    if (!ex->ragged) SP_CHECK(sp_lower_mem_sizes(pf, dc, &ms));
    ch->pred_bytes = ms.total;
    int64_t host_part = 0;
    if (!o->host_memory)
        for (int i = 0; i < SP_SCR_COUNT; i++)
            if (sp_scr_host((sp_scr)i)) host_part += sp_mem_align(max64(pf->scratch_bytes[i], dc->scratch_bytes[i]));
    arena dev = {NULL, ms.total - host_part + spi_exec_arena_delta, 0}, host = {NULL, host_part, 0};
    if (dev.size < 0) dev.size = 0;
    if (o->alloc(d, (size_t)dev.size, &ch->arena))
        return spi_fail(SP_ENOMEM, "chip %d: arena of %lld bytes: %s", ch->rank, (long long)dev.size, sp_last_error());
    dev.base = ch->arena;
    if (host.size > 0 && !(ch->harena = calloc(1, (size_t)host.size)))
        return spi_fail(SP_ENOMEM, "chip %d: host arena of %lld bytes", ch->rank, (long long)host.size);
    host.base = ch->harena;
    ch->arena_bytes = dev.size + host.size;
    /* offload: the host arena of what the layout keeps in host memory */
    int64_t W = pf->w_streamed, H = pf->kv_host_seqs;
    if ((W > 0 || H > 0) && !o->host_memory)
        return spi_fail(SP_ENOTSUP, "offload_weights / offload_kv on the %s device: not implemented (CPU chips only)",
                        o->name);
    arena off = {NULL, ms.host_total, 0};
    ch->host_pred_bytes = ms.host_total;
    if (off.size > 0 && !(ch->oarena = calloc(1, (size_t)off.size)))
        return spi_fail(SP_ENOMEM, "chip %d: offload arena of %lld bytes", ch->rank, (long long)off.size);
    off.base = ch->oarena;
    ch->oarena_bytes = off.size;

    /* buffers: the larger of the two programs' */
    for (int b = 1; b < SP_BUF_COUNT; b++)
        SP_CHECK(take(ch, &dev, max64(pf->buf_bytes[b], dc->buf_bytes[b]), sp_buf_name(b), &ch->buf[b]));
    /* KV cache (n_layers, M, kv_seqs − H, ctx_max, kvh, D), K then V; the host-held H
     * sequences' in the offload arena, same order */
    ch->ctx_max = spi_shape_of(ex, 0, 0).max_context;
    ch->kv_mb_elems = (pf->kv_seqs - H) * ch->ctx_max * pf->kv_heads_cache * ch->m->d_head;
    ch->kv_layer_elems = ch->kv_mb_elems * ch->l->microbatches;
    int64_t kvb = ch->kv_layer_elems * cnt * sp_dtype_bytes(ch->l->kv);
    SP_CHECK(take(ch, &dev, kvb, "K cache", &ch->kc));
    SP_CHECK(take(ch, &dev, kvb, "V cache", &ch->vc));
    ch->hkv_mb_elems = H * ch->ctx_max * pf->kv_heads_cache * ch->m->d_head;
    ch->hkv_layer_elems = ch->hkv_mb_elems * ch->l->microbatches;
    int64_t hkvb = ch->hkv_layer_elems * cnt * sp_dtype_bytes(ch->l->kv);
    SP_CHECK(take(ch, &off, hkvb, "host K cache", &ch->hkc));
    SP_CHECK(take(ch, &off, hkvb, "host V cache", &ch->hvc));
    /* layer weights: shard, whole-column scales (INT8/FP8), whole bias */
    ch->lw = calloc((size_t)(cnt * SP_W_COUNT), sizeof *ch->lw);
    ch->lscale = calloc((size_t)(cnt * SP_W_COUNT), sizeof *ch->lscale);
    ch->lb = calloc((size_t)(cnt * SP_W_COUNT), sizeof *ch->lb);
    if (!ch->lw || !ch->lscale || !ch->lb) return spi_fail(SP_ENOMEM, "weight tables");
    if (W > 0) {
        ch->hlw = calloc((size_t)(W * SP_W_COUNT), sizeof *ch->hlw);
        ch->hlscale = calloc((size_t)(W * SP_W_COUNT), sizeof *ch->hlscale);
        ch->hlb = calloc((size_t)(W * SP_W_COUNT), sizeof *ch->hlb);
        ch->hbase = calloc((size_t)(W * SP_WKIND_COUNT), sizeof *ch->hbase);
        if (!ch->hlw || !ch->hlscale || !ch->hlb || !ch->hbase) return spi_fail(SP_ENOMEM, "host weight tables");
    }
    /* experts split over the replicas: replica r holds the r-th block of them (sp_layout.h) */
    ch->expert0 = ch->l->experts > 1 ? (int64_t)ch->coords[SP_AXIS_REPLICA] * pf->wspec[SP_W_IN].count : 0;
    for (int64_t li = 0; li < cnt; li++) {
        /* a streamed part's blocks (attention's, then the FFN's: sp_weight_wkind follows the
         * kinds' order), contiguous in the offload arena as in its place of the staging block */
        for (int w = SP_W_FIRST_LAYER; w < SP_W_COUNT; w++) {
            const sp_wkind kd = sp_weight_wkind((sp_weight)w);
            const int streamed = li < pf->w_kind_streamed[kd];
            arena *wa = streamed ? &off : &dev;
            if (streamed && !ch->hbase[li * SP_WKIND_COUNT + kd]) ch->hbase[li * SP_WKIND_COUNT + kd] = off.base + off.used;
            const sp_weight_spec *s = &pf->wspec[w];
            /* the kinds this layer holds: experts in MoE layers, the dense FFN in the others */
            if (!s->present || !sp_weight_in_layer(ch->m, (sp_weight)w, first + li)) continue;
            int64_t i = li * SP_W_COUNT + w;
            int q8 = s->dtype == SP_DT_INT8 || s->dtype == SP_DT_FP8;
            /* a MoE layer's local experts one after the other, each shard on its own
             * SP_MEM_ALIGN boundary (count × the aligned shard, as the lowering counts) */
            int64_t shard = s->local_rows * s->local_cols * sp_dtype_bytes(s->dtype);
            SP_CHECK(take(ch, wa, s->count > 1 ? s->count * sp_mem_align(shard) : shard, sp_weight_name(w),
                          &ch->lw[i]));
            /* INT8/FP8: each local expert's whole-column scales (one block of cols fp32 each, aligned) */
            SP_CHECK(take(ch, wa, q8 ? s->count * sp_mem_align(s->cols * 4) : 0, "weight scales", (void **)&ch->lscale[i]));
            SP_CHECK(take(ch, wa, s->bias ? s->cols_real * 4 : 0, "bias", (void **)&ch->lb[i]));
            if (s->count > 1 && s->bias)
                return spi_fail(SP_ENOTSUP, "%s of %lld experts with a bias: not implemented", sp_weight_name(w),
                                (long long)s->count);
            /* a MoE layer's FFN matrices: the chip's experts, its replica's block of them */
            int experts = ch->m->n_experts > 0 && (w == SP_W_IN || w == SP_W_UP || w == SP_W_OUT);
            for (int64_t e = 0; e < s->count; e++)
                SP_CHECK(spi_build_shard(ch, s, first + li, experts ? ch->expert0 + e : 0,
                                         (char *)ch->lw[i] + e * sp_mem_align(shard),
                                         q8 ? ch->lscale[i] + e * (sp_mem_align(s->cols * 4) / 4) : NULL));
            if (s->bias) SP_CHECK(spi_build_bias(ch, s, first + li, ch->lb[i]));
            if (streamed) {
                /* the host copy, which a host-load copies into staging; until then the layer has
                 * no weights on the device (a step that ran before its load would find none) */
                ch->hlw[i] = ch->lw[i];
                ch->hlscale[i] = ch->lscale[i];
                ch->hlb[i] = ch->lb[i];
                ch->lw[i] = NULL;
                ch->lscale[i] = NULL;
                ch->lb[i] = NULL;
            }
        }
        for (int k = 0; k < SP_WKIND_COUNT && li < W; k++) {
            /* each streamed part takes what the lowering's load of it moves */
            char *b = ch->hbase[li * SP_WKIND_COUNT + k];
            char *e = k + 1 < SP_WKIND_COUNT && ch->hbase[li * SP_WKIND_COUNT + k + 1] ? ch->hbase[li * SP_WKIND_COUNT + k + 1]
                                                                                      : off.base + off.used;
            if (li < pf->w_kind_streamed[k] && (!b || e - b != pf->kind_weight_bytes[k]))
                return spi_fail(SP_EINTERNAL, "chip %d: layer %lld's %s weights take %lld bytes, the lowering's load %lld",
                                ch->rank, (long long)li, sp_wkind_name((sp_wkind)k), (long long)(b ? e - b : 0),
                                (long long)pf->kind_weight_bytes[k]);
        }
    }
    /* model weights: final norm, vocabulary tables, learned positions */
    for (int w = 1; w < SP_W_FIRST_LAYER; w++) {
        const sp_weight_spec *s = &pf->wspec[w];
        if (!s->present) continue;
        if (s->dtype == SP_DT_INT8 || s->dtype == SP_DT_FP8 || s->bias)
            return spi_fail(SP_EINTERNAL, "%s stored as %s%s", sp_weight_name(w), sp_dtype_name(s->dtype),
                            s->bias ? " with a bias" : "");
        SP_CHECK(take(ch, &dev, s->local_rows * s->local_cols * sp_dtype_bytes(s->dtype), sp_weight_name(w), &ch->wt[w]));
        SP_CHECK(spi_build_shard(ch, s, 0, 0, ch->wt[w], NULL));
    }
    /* the dequantisation tile of matmuls and logits over 16/8-bit weights */
    SP_CHECK(take(ch, &dev, ms.workspace, "workspace", &d->ws));
    d->ws_bytes = (size_t)ms.workspace;
    /* scratch */
    for (int i = 0; i < SP_SCR_COUNT; i++) {
        int64_t v = max64(pf->scratch_bytes[i], dc->scratch_bytes[i]);
        SP_CHECK(take(ch, !o->host_memory && sp_scr_host((sp_scr)i) ? &host : &dev, v, sp_scr_name((sp_scr)i),
                      &ch->scr[i]));
        ch->scr_bytes[i] = v;
    }
    ch->qs = ch->scr[SP_SCR_Q];
    ch->ks = ch->scr[SP_SCR_K];
    ch->vs = ch->scr[SP_SCR_V];
    ch->pos = ch->scr[SP_SCR_POS];
    ch->hrow = ch->scr[SP_SCR_LOGITS_ROW];
    ch->dtok = ch->scr[SP_SCR_TOKENS];
    d->at_scr = ch->scr[SP_SCR_SCORES];
    d->at_bytes = (size_t)ch->scr_bytes[SP_SCR_SCORES];
    /* every byte of the arenas is some block's: the prediction is not larger than the need either */
    if (dev.used != dev.size || host.used != host.size) {
        if (!ch->mismatches)
            snprintf(ch->first_mismatch, sizeof ch->first_mismatch,
                     "chip %d memory: %lld bytes carved of an arena of %lld (predicted %lld)", ch->grank,
                     (long long)(dev.used + host.used), (long long)(dev.size + host.size), (long long)ms.total);
        ch->mismatches++;
    }
    if (off.used != off.size) {
        if (!ch->mismatches)
            snprintf(ch->first_mismatch, sizeof ch->first_mismatch,
                     "chip %d offload memory: %lld bytes carved of a host arena of %lld (predicted)", ch->rank,
                     (long long)off.used, (long long)off.size);
        ch->mismatches++;
    }
    return spi_handoff_setup(ch);
}

void spi_chip_teardown(chip *ch)
{
    spi_handoff_free(ch);
    if (ch->ops) {
        ch->ops->release(&ch->dev, ch->arena);   /* every device block is the arena's */
        ch->ops->close(&ch->dev);
    } else if (ch->dev.ops) {
        ch->dev.ops->close(&ch->dev);   /* open failed part way */
    }
    ch->arena = NULL;
    free(ch->harena);
    free(ch->oarena);
    free(ch->hlw);
    free(ch->hlscale);
    free(ch->hlb);
    free(ch->hbase);
    free(ch->lb);
    free(ch->lw);
    free(ch->lscale);
    free(ch->pf);
    free(ch->dc);
    free(ch->rgm);
}
