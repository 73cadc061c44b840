/* lower_xfer.c: the KV transfer between separate prefill and decode chip
 * groups (sp_lower.h, "KV transfer between separate chip groups"). */
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "spi_ckd.h"
#include "sp_lower.h"
#include "sp_mesh.h"

/* What one chip's cache block holds (sp_program kv_*): layers [l0, l0+nl),
 * of each micro-batch the sequences [blk·kv_seqs, (blk+1)·kv_seqs) of the
 * micro-batch, KV heads [h0, h0+nh). */
typedef struct holding {
    int stage, replica, tensor;   /* coordinates; tensor = rank within the X·Y·Z mesh */
    int64_t l0, nl;
    int64_t blk;                  /* sequence block within a micro-batch (kv_batch_axes) */
    int64_t h0, nh;
} holding;

/* One group: its layout, geometry and every chip's holding. */
typedef struct group {
    sp_layout l;
    int n, nt;                    /* chips; chips of one stage of one replica */
    int64_t Br, mbs, kvs;         /* sequences per replica, per micro-batch, per cache block */
    holding *h;                   /* n, owned */
} group;

static sp_status group_build(const sp_model *m, const sp_layout *l, sp_phase ph, int64_t batch, int64_t prompt,
                             group *g)
{
    memset(g, 0, sizeof *g);
    sp_layout_phase_group(l, ph, &g->l);
    sp_mesh mesh;
    sp_layout_mesh(&g->l, &mesh);
    g->n = sp_mesh_size(&mesh);
    g->nt = sp_mesh_tp(&mesh);
    if (!(g->h = calloc((size_t)g->n, sizeof *g->h))) return spi_fail(SP_ENOMEM, "KV transfer: %d chips", g->n);
    /* the cache geometry does not depend on the context: one step of each phase */
    sp_shape sh = ph == SP_PHASE_PREFILL ? (sp_shape){batch, prompt, prompt, prompt + 1, SP_DT_BF16, 0}
                                         : (sp_shape){batch, 1, prompt + 1, prompt + 1, SP_DT_BF16, 0};
    sp_program *p = malloc(sizeof *p);
    if (!p) return spi_fail(SP_ENOMEM, "KV transfer: program");
    sp_status st = SP_OK;
    for (int s = 0; s < g->l.stages && !st; s++) {
        if ((st = sp_lower(m, &g->l, ph, &sh, s, p))) break;
        if (s == 0) {
            g->Br = batch / g->l.replicas;
            g->mbs = p->micro_batch;
            g->kvs = p->kv_seqs;
        }
        int64_t l0, nl;
        sp_layout_stage_layers(&g->l, m->n_layers, s, &l0, &nl);
        for (int r = 0; r < g->l.replicas; r++)
            for (int t = 0; t < g->nt; t++) {
                int rank = (s * g->l.replicas + r) * g->nt + t;
                holding *h = &g->h[rank];
                h->stage = s;
                h->replica = r;
                h->tensor = t;
                h->l0 = l0;
                h->nl = nl;
                h->blk = sp_lower_axes_index(&g->l, rank, p->kv_batch_axes);
                h->h0 = sp_lower_kv_head0(m, p, rank);
                h->nh = p->kv_heads_cache;
            }
    }
    free(p);
    if (!st && (g->kvs < 1 || g->mbs % g->kvs || g->Br % g->mbs))
        st = spi_fail(SP_EINTERNAL, "KV transfer: %s cache blocks of %lld sequences in micro-batches of %lld",
                      sp_phase_name(ph), (long long)g->kvs, (long long)g->mbs);
    return st;
}

typedef struct walk {
    const sp_model *m;
    group *pf, *dc;
    int64_t prompt;
    spi_ckd ck;
    sp_xfer_fn fn;
    void *ctx;
    int *cand;                    /* pf->nt candidate holders */
} walk;

static sp_status emit(walk *w, sp_xfer_block *b)
{
    if (b->tokens) b->bytes = spi_ck_mul(&w->ck, "KV transfer bytes", b->seqs, (int64_t)sizeof(int32_t));
    else
        b->bytes = spi_ck_mul4(&w->ck, "KV transfer bytes", 2 * b->layers, b->seqs, b->heads,
                               spi_ck_mul3(&w->ck, "KV transfer bytes", w->prompt, w->m->d_head,
                                           sp_dtype_bytes(w->pf->l.kv)));
    if (w->ck.overflow) return spi_fail(SP_EINVAL, "%s do not fit in 64 bits", w->ck.what);
    return w->fn(w->ctx, b);
}

/* Decode chip d's sequences [q0, q1) (one prefill cache block's worth:
 * the same prefill replica and block) of layers [l0, l1), heads [h0, h1). */
static sp_status piece(walk *w, int d, int64_t q0, int64_t q1, int64_t l0, int64_t l1, int64_t h0, int64_t h1)
{
    const group *pf = w->pf;
    int rp = (int)(q0 / pf->Br);
    int64_t blk = q0 % pf->Br % pf->mbs / pf->kvs;
    for (int s = 0; s < pf->l.stages; s++) {
        const holding *any = &pf->h[s * pf->l.replicas * pf->nt];
        int64_t a = l0 > any->l0 ? l0 : any->l0, e = l1 < any->l0 + any->nl ? l1 : any->l0 + any->nl;
        if (a >= e) continue;
        /* the stage's chips of replica rp whose cache holds block blk */
        int nc = 0, base = (s * pf->l.replicas + rp) * pf->nt;
        for (int t = 0; t < pf->nt; t++)
            if (pf->h[base + t].blk == blk) w->cand[nc++] = base + t;
        sp_xfer_block b = {.src = -1, .dst = d, .layer0 = a, .layers = e - a, .seq0 = q0, .seqs = q1 - q0};
        for (int64_t h = h0; h < h1; h++) {
            int holders = 0, pick = -1;
            for (int i = 0; i < nc; i++) {
                const holding *c = &pf->h[w->cand[i]];
                holders += h >= c->h0 && h < c->h0 + c->nh;
            }
            if (!holders)
                return spi_fail(SP_EINTERNAL, "KV transfer: no prefill chip holds KV head %lld of sequence %lld",
                                (long long)h, (long long)q0);
            for (int i = 0, k = d % holders; i < nc; i++) {
                const holding *c = &pf->h[w->cand[i]];
                if (h >= c->h0 && h < c->h0 + c->nh && k-- == 0) {
                    pick = w->cand[i];
                    break;
                }
            }
            if (pick != b.src) {
                if (b.src >= 0) SP_CHECK(emit(w, &b));
                b.src = pick;
                b.head0 = h;
                b.heads = 0;
            }
            b.heads++;
        }
        if (b.src >= 0) SP_CHECK(emit(w, &b));
    }
    return SP_OK;
}

sp_status sp_lower_kv_xfer(const sp_model *m, const sp_layout *l, int64_t batch, int64_t prompt, sp_xfer_fn fn,
                           void *ctx)
{
    if (!m || !l || !fn || batch < 1 || prompt < 1) return spi_fail(SP_EINVAL, "sp_lower_kv_xfer: bad arguments");
    if (!sp_layout_disaggregated(l))
        return spi_fail(SP_EINVAL, "sp_lower_kv_xfer: the layout's phases share their chips (no prefill.mesh / "
                                   "decode.mesh): nothing moves between groups");
    group pf, dc;
    sp_status st = group_build(m, l, SP_PHASE_PREFILL, batch, prompt, &pf);
    if (!st) st = group_build(m, l, SP_PHASE_DECODE, batch, prompt, &dc);
    else memset(&dc, 0, sizeof dc);
    walk w = {m, &pf, &dc, prompt, SPI_CKD_INIT, fn, ctx, NULL};
    if (!st && !(w.cand = malloc((size_t)pf.nt * sizeof *w.cand))) st = spi_fail(SP_ENOMEM, "KV transfer");
    for (int d = 0; d < dc.n && !st; d++) {
        const holding *h = &dc.h[d];
        for (int mb = 0; mb < dc.l.microbatches && !st; mb++) {
            int64_t q = (int64_t)h->replica * dc.Br + mb * dc.mbs + h->blk * dc.kvs, end = q + dc.kvs;
            while (q < end && !st) {
                /* up to the next prefill cache block boundary (blocks are kv_seqs-aligned in the batch) */
                int64_t next = (q / pf.kvs + 1) * pf.kvs;
                if (next > end) next = end;
                st = piece(&w, d, q, next, h->l0, h->l0 + h->nl, h->h0, h->h0 + h->nh);
                q = next;
            }
        }
    }
    /* the first tokens: the decode group's first stage embeds them */
    for (int d = 0; d < dc.n && !st; d++) {
        const holding *h = &dc.h[d];
        if (h->stage != 0) continue;
        int64_t q = (int64_t)h->replica * dc.Br, end = q + dc.Br;
        while (q < end && !st) {
            int64_t next = (q / pf.Br + 1) * pf.Br;
            if (next > end) next = end;
            int rp = (int)(q / pf.Br);
            sp_xfer_block b = {.src = ((pf.l.stages - 1) * pf.l.replicas + rp) * pf.nt + h->tensor % pf.nt,
                               .dst = d, .tokens = 1, .seq0 = q, .seqs = next - q};
            st = emit(&w, &b);
            q = next;
        }
    }
    free(w.cand);
    free(pf.h);
    free(dc.h);
    return st;
}

/* ---- the stage hand-off (sp_lower.h, "stage hand-off") ---- */

/* the last step of kind k in ss (the hand-off's SEND in post, RECV in pre) */
static const sp_step *find_step(const sp_steps *ss, sp_step_kind k)
{
    for (int i = ss->n - 1; i >= 0; i--)
        if (ss->s[i].kind == k) return &ss->s[i];
    return NULL;
}

/* chip t of replica r of the stage program p: its block's first row and column */
static void act_block(const sp_program *p, const sp_step *s, int r, int t, int64_t *row0, int64_t *col0)
{
    int T = sp_lower_axes_size(&p->layout, "xyz");
    int view = (p->stage * p->layout.replicas + r) * T + t;
    *row0 = (int64_t)sp_lower_axes_index(&p->layout, view, s->batch_axes) * s->m;
    *col0 = (int64_t)sp_lower_axes_index(&p->layout, view, s->axes) * s->n;
}

sp_status sp_lower_stage_xfer_progs(const sp_layout *l, const sp_program *from, const sp_program *to,
                                    sp_stage_xfer_fn fn, void *ctx)
{
    if (!l || !from || !to || !fn || from->stage < 0 || to->stage != from->stage + 1 || to->stage >= l->stages)
        return spi_fail(SP_EINVAL, "sp_lower_stage_xfer_progs: bad arguments (stages %d and %d of %d)",
                        from ? from->stage : -1, to ? to->stage : -1, l ? l->stages : 0);
    const sp_step *snd = find_step(&from->post, SP_STEP_SEND), *rcv = find_step(&to->pre, SP_STEP_RECV);
    if (!snd || !rcv)
        return spi_fail(SP_EINTERNAL, "stage hand-off: stage %d has no SEND or %d no RECV", from->stage, to->stage);
    int Ts = sp_lower_axes_size(&from->layout, "xyz"), Tr = sp_lower_axes_size(&to->layout, "xyz");
    int64_t fs = sp_layout_stage_first_chip(l, from->stage), fr = sp_layout_stage_first_chip(l, to->stage);
    int ab = sp_dtype_bytes(from->shape.act_dtype);
    spi_ckd ck = SPI_CKD_INIT;
    sp_status st = SP_OK;
    for (int r = 0; r < l->replicas && !st; r++)
        for (int d = 0; d < Tr && !st; d++) {
            int64_t dr, dc;
            act_block(to, rcv, r, d, &dr, &dc);
            for (int t = 0; t < Ts && !st; t++) {
                int64_t sr, sc;
                act_block(from, snd, r, t, &sr, &sc);
                int64_t r0 = sr > dr ? sr : dr, r1 = sr + snd->m < dr + rcv->m ? sr + snd->m : dr + rcv->m;
                int64_t c0 = sc > dc ? sc : dc, c1 = sc + snd->n < dc + rcv->n ? sc + snd->n : dc + rcv->n;
                if (r0 >= r1 || c0 >= c1) continue;
                sp_stage_block b = {.src = (int)(fs + (int64_t)r * Ts + t), .dst = (int)(fr + (int64_t)r * Tr + d),
                                    .row0 = r0, .rows = r1 - r0, .col0 = c0, .cols = c1 - c0};
                b.bytes = spi_ck_mul3(&ck, "stage hand-off bytes", b.rows, b.cols, ab);
                st = ck.overflow ? spi_fail(SP_EINVAL, "%s do not fit in 64 bits", ck.what) : fn(ctx, &b);
            }
        }
    return st;
}

sp_status sp_lower_stage_xfer(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape,
                              int boundary, sp_stage_xfer_fn fn, void *ctx)
{
    if (!m || !l || !shape || !fn || boundary < 0 || boundary + 1 >= l->stages)
        return spi_fail(SP_EINVAL, "sp_lower_stage_xfer: bad arguments (boundary %d of %d stages)", boundary,
                        l ? l->stages : 0);
    sp_program *p = malloc(2 * sizeof *p);
    if (!p) return spi_fail(SP_ENOMEM, "stage hand-off: programs");
    sp_status st = sp_lower(m, l, phase, shape, boundary, &p[0]);
    if (!st) st = sp_lower(m, l, phase, shape, boundary + 1, &p[1]);
    if (!st) st = sp_lower_stage_xfer_progs(l, &p[0], &p[1], fn, ctx);
    free(p);
    return st;
}
