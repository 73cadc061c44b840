/* exec_xfer.c: the KV transfer between separate prefill and decode chip
 * groups (sp_lower.h: sp_lower_kv_xfer's blocks), on the job's flat
 * communicator (one rank per chip of both groups, prefill first).  A chip's
 * blocks to one peer travel as one message (the lowering's rule, priced so
 * by sp_cost_kv_xfer): a prefill chip packs and sends its messages in
 * ascending decode rank, a decode chip receives in ascending prefill rank.
 * Sends are synchronous, and the message (decode d, prefill p) that is
 * least in (d, p) order among those not yet done always has both ends
 * waiting for it, so the exchange cannot deadlock. */
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "exec/spi_exec.h"

typedef struct mine {
    int role, me;           /* 1: prefill chip (keeps blocks it sends), 2: decode chip (blocks it receives) */
    sp_xfer_block *b;
    int64_t n, cap;
} mine;

/* Room for one more of *n elements of `size` bytes in *arr (*cap of them, doubled from
 * `first` when full); `what` names them in the error. */
static sp_status room_for_one(void **arr, int64_t n, int64_t *cap, size_t size, int64_t first, const char *what)
{
    if (n < *cap) return SP_OK;
    int64_t c = *cap ? 2 * *cap : first;
    void *nb = realloc(*arr, (size_t)c * size);
    if (!nb) return spi_fail(SP_ENOMEM, "%s: %lld blocks", what, (long long)c);
    *arr = nb;
    *cap = c;
    return SP_OK;
}

static sp_status keep(void *ctx, const sp_xfer_block *b)
{
    mine *k = ctx;
    if ((k->role == 1 ? b->src : b->dst) != k->me) return SP_OK;
    SP_CHECK(room_for_one((void **)&k->b, k->n, &k->cap, sizeof *k->b, 64, "KV transfer"));
    k->b[k->n++] = *b;
    return SP_OK;
}

/* Element offset in this chip's K (or V) cache of layer l, sequence q, KV
 * head h, position 0 (cache (layers, M, kv_seqs, ctx_max, kvh, D)); -1 when
 * the chip's block does not hold them (a lowering and executor out of step). */
static int64_t cache_off(const chip *ch, const sp_program *p, int64_t h0, int64_t blk, int64_t l, int64_t q,
                         int64_t h, int64_t heads)
{
    int64_t Br = ch->ex->B / ch->l->replicas, ql = q - ch->replica * Br, ll = l - ch->first_layer;
    if (ql < 0 || ql >= Br || ll < 0 || ll >= p->n_layers || h < h0 || h + heads > h0 + p->kv_heads_cache) return -1;
    int64_t mb = ql / p->micro_batch, slot = ql % p->micro_batch - blk * p->kv_seqs;
    if (slot < 0 || slot >= p->kv_seqs) return -1;
    return ll * ch->kv_layer_elems + mb * ch->kv_mb_elems + (slot * ch->ctx_max * p->kv_heads_cache + (h - h0)) *
                                                                ch->m->d_head;
}

/* Copies block b between the chip's cache (and current tokens) and the
 * message at msg: out = 1 packs (cache -> msg), 0 unpacks. */
static sp_status copy_block(chip *ch, const sp_program *p, int64_t h0, int64_t blk, const sp_xfer_block *b, char *msg,
                            int32_t *cur, int out)
{
    int64_t Br = ch->ex->B / ch->l->replicas;
    if (b->tokens) {
        for (int64_t q = b->seq0; q < b->seq0 + b->seqs; q++) {
            int64_t ql = q - ch->replica * Br;
            if (ql < 0 || ql >= Br) return spi_fail(SP_EINTERNAL, "KV transfer: sequence %lld is not in chip %d's replica",
                                                    (long long)q, ch->rank);
            if (out) memcpy(msg, &cur[ql], sizeof *cur);
            else memcpy(&cur[ql], msg, sizeof *cur);
            msg += sizeof *cur;
        }
        return SP_OK;
    }
    int eb = sp_dtype_bytes(ch->l->kv);
    int64_t D = ch->m->d_head, P = ch->ex->P, run = b->heads * D * eb, kvh = p->kv_heads_cache;
    for (int kv = 0; kv < 2; kv++) {   /* K, then V */
        char *cache = kv ? ch->vc : ch->kc;
        for (int64_t l = b->layer0; l < b->layer0 + b->layers; l++)
            for (int64_t q = b->seq0; q < b->seq0 + b->seqs; q++) {
                int64_t off = cache_off(ch, p, h0, blk, l, q, b->head0, b->heads);
                if (off < 0)
                    return spi_fail(SP_EINTERNAL, "KV transfer: chip %d's cache does not hold layer %lld, sequence %lld, "
                                                  "KV heads %lld..%lld", ch->rank, (long long)l, (long long)q,
                                    (long long)b->head0, (long long)(b->head0 + b->heads - 1));
                /* positions 0..P-1 of the sequence: one run of heads × D per position */
                for (int64_t t = 0; t < P; t++) {
                    char *c = cache + (off + t * kvh * D) * eb;
                    if (out) memcpy(msg, c, (size_t)run);
                    else memcpy(c, msg, (size_t)run);
                    msg += run;
                }
            }
    }
    return SP_OK;
}

/* (peer, walk position): sorting by it groups a chip's blocks by peer, each peer's in
 * walk order (one message per peer, packed and unpacked in the same order) */
typedef struct pos { int peer; int64_t i; } pos;
static int by_peer(const void *a, const void *b)
{
    const pos *x = a, *y = b;
    return x->peer != y->peer ? (x->peer > y->peer) - (x->peer < y->peer) : (x->i > y->i) - (x->i < y->i);
}

static sp_status sort_by_peer(mine *k)
{
    pos *o = malloc((size_t)(k->n ? k->n : 1) * sizeof *o);
    sp_xfer_block *nb = malloc((size_t)(k->n ? k->n : 1) * sizeof *nb);
    if (!o || !nb) {
        free(o);
        free(nb);
        return spi_fail(SP_ENOMEM, "KV transfer: %lld blocks", (long long)k->n);
    }
    for (int64_t i = 0; i < k->n; i++) o[i] = (pos){k->role == 1 ? k->b[i].dst : k->b[i].src, i};
    qsort(o, (size_t)k->n, sizeof *o, by_peer);
    for (int64_t i = 0; i < k->n; i++) nb[i] = k->b[o[i].i];
    free(o);
    free(k->b);
    k->b = nb;
    k->cap = k->n;
    return SP_OK;
}

/* one message on the chip's timeline (write_timeline names it: sp_trace.h's KV transfer ids) */
static sp_status record_msg(chip *ch, int peer, int64_t bytes, double t0, double t1)
{
    if (ch->nev == ch->cap_ev) SP_CHECK(spi_timeline_reserve(ch, ch->cap_ev ? 2 * ch->cap_ev : 1024));
    spi_event *e = &ch->ev[ch->nev++];
    memset(e, 0, sizeof *e);
    e->t0 = t0;
    e->t1 = t1;
    e->part = ch->ex->role == 1 ? SPI_EVENT_KV_SEND : SPI_EVENT_KV_RECV;
    e->index = peer;
    e->bytes = bytes;
    return SP_OK;
}

sp_status spi_xfer_run(chip *ch, sp_comm *xc, int32_t *cur)
{
    sp_exec *ex = ch->ex;
    mine k = {ex->role, ch->rank, NULL, 0, 0};
    sp_status st = sp_lower_kv_xfer(ch->m, &ex->job, ex->B, ex->P, keep, &k);
    /* the walk lists the KV blocks by decode chip and the token blocks after them:
     * regrouped by peer (ascending, the order the exchange needs) */
    if (!st) st = sort_by_peer(&k);
    const sp_program *p = k.role == 1 ? ch->pf : ch->dc;
    int64_t h0 = sp_lower_kv_head0(ch->m, p, ch->rank), blk = sp_lower_axes_index(ch->l, ch->rank, p->kv_batch_axes);
    char *msg = NULL;
    int64_t cap = 0, moved = 0, predicted = 0;
    sp_comm_counters a, b;
    if (!st) st = sp_comm_stats(xc, &a);
    for (int64_t i = 0; i < k.n && !st;) {
        int peer = k.role == 1 ? k.b[i].dst : k.b[i].src;
        int64_t j = i, bytes = 0;
        while (j < k.n && (k.role == 1 ? k.b[j].dst : k.b[j].src) == peer) bytes += k.b[j++].bytes;
        if (bytes > cap) {
            char *nm = realloc(msg, (size_t)bytes);
            if (!nm) {
                st = spi_fail(SP_ENOMEM, "KV transfer: a message of %lld bytes", (long long)bytes);
                break;
            }
            msg = nm;
            cap = bytes;
        }
        /* the peer's rank on the flat communicator (the prefill group first) */
        int gpeer = ex->xfer_peer_first + peer;
        char *at = msg;
        if (k.role == 1) {
            for (int64_t x = i; x < j && !st; x++) {
                st = copy_block(ch, p, h0, blk, &k.b[x], at, cur, 1);
                at += k.b[x].bytes;
            }
            double t0 = spi_now_s();
            if (!st) st = sp_comm_send(xc, gpeer, msg, (size_t)bytes, SP_DT_INT8);
            if (!st && ex->trace) st = record_msg(ch, gpeer, bytes, t0, spi_now_s());
        } else {
            double t0 = spi_now_s();
            st = sp_comm_recv(xc, gpeer, msg, (size_t)bytes, SP_DT_INT8);
            if (!st && ex->trace) st = record_msg(ch, gpeer, bytes, t0, spi_now_s());
            for (int64_t x = i; x < j && !st; x++) {
                st = copy_block(ch, p, h0, blk, &k.b[x], at, cur, 0);
                at += k.b[x].bytes;
            }
        }
        predicted += bytes;
        ch->comm_steps++;
        i = j;
    }
    if (!st) st = sp_comm_stats(xc, &b);
    if (!st) {
        /* byte-counted like every step: what the backend moved against what the lowering said */
        if (k.role == 1) {
            moved = (int64_t)(b.bytes_sent[SP_COLL_SENDRECV] - a.bytes_sent[SP_COLL_SENDRECV]);
            ch->meas[SP_COLL_SENDRECV] += (uint64_t)moved;
            ch->pred[SP_COLL_SENDRECV] += (uint64_t)predicted;
            ch->expect[SP_COLL_SENDRECV] += (uint64_t)predicted;
        } else {
            moved = (int64_t)(b.bytes_recv[SP_COLL_SENDRECV] - a.bytes_recv[SP_COLL_SENDRECV]);
            ch->measr[SP_COLL_SENDRECV] += (uint64_t)moved;
            ch->predr[SP_COLL_SENDRECV] += (uint64_t)predicted;
            ch->expectr[SP_COLL_SENDRECV] += (uint64_t)predicted;
        }
        if (moved != predicted && !ch->mismatches++)
            snprintf(ch->first_mismatch, sizeof ch->first_mismatch,
                     "KV transfer, %s chip %d: %lld bytes moved, %lld predicted", k.role == 1 ? "prefill" : "decode",
                     ch->rank, (long long)moved, (long long)predicted);
    }
    free(msg);
    free(k.b);
    return st;
}

/* ---- the stage hand-off between stages of their own meshes ------------------------
 * The lowering decides which chip sends which rows and columns to which
 * (sp_lower_stage_xfer_progs over this stage's program and its neighbour's);
 * the executor keeps the blocks naming this chip and moves them as they
 * are.  A block is one message when it is contiguous on both chips (one
 * row, or whole rows of both chips' blocks), else one message per row:
 * the program reserves no packing room for the hand-off, so nothing is
 * staged outside the arena the lowering sized.  Sends are synchronous; a
 * sender sends in ascending receiver order, a receiver receives in
 * ascending sender order (the walk's order: replica, receiver, sender), and
 * no chip both sends and receives in one hand-off, so the least pair not
 * yet done always has both ends waiting for it. */
typedef struct ho_keep {
    int me;
    spi_handoff *send, *recv;
} ho_keep;

static sp_status ho_push(spi_handoff *h, const sp_stage_block *b)
{
    SP_CHECK(room_for_one((void **)&h->b, h->n, &h->cap, sizeof *h->b, 16, "stage hand-off"));
    h->b[h->n++] = *b;
    return SP_OK;
}

static sp_status ho_keep_mine(void *ctx, const sp_stage_block *b)
{
    ho_keep *k = ctx;
    if (k->send && b->src == k->me) SP_CHECK(ho_push(k->send, b));
    if (k->recv && b->dst == k->me) SP_CHECK(ho_push(k->recv, b));
    return SP_OK;
}

/* the block shape (m, n) of p's hand-off step of kind k (the last in its part), 0 when it has none */
static void ho_shape(const sp_program *p, sp_step_kind k, int64_t *m, int64_t *n)
{
    const sp_steps *ss = k == SP_STEP_SEND ? &p->post : &p->pre;
    *m = *n = 0;
    for (int i = 0; i < ss->n; i++)
        if (ss->s[i].kind == k) {
            *m = ss->s[i].m;
            *n = ss->s[i].n;
        }
}

sp_status spi_handoff_setup(chip *ch)
{
    sp_exec *ex = ch->ex;
    if (!ex->hetero) return SP_OK;
    sp_program *nb = malloc(sizeof *nb);
    if (!nb) return spi_fail(SP_ENOMEM, "stage hand-off: program");
    sp_status st = SP_OK;
    for (int ph = 0; ph < SP_PHASE_COUNT && !st; ph++) {
        const sp_program *me = ph == SP_PHASE_PREFILL ? ch->pf : ch->dc;
        for (int dir = 0; dir < 2 && !st; dir++) {   /* 0: to the next stage, 1: from the one before */
            int other = dir == 0 ? ch->stage + 1 : ch->stage - 1;
            if (other < 0 || other >= ex->l.stages) continue;
            spi_handoff *h = &ch->ho[ph][dir];
            /* the neighbour's program of the same step (the blocks depend on both stages' layouts) */
            if ((st = sp_lower(ch->m, &ex->l, (sp_phase)ph, &me->shape, other, nb))) break;
            ho_keep k = {ch->grank, dir == 0 ? h : NULL, dir == 1 ? h : NULL};
            int64_t pm;
            ho_shape(me, dir == 0 ? SP_STEP_SEND : SP_STEP_RECV, &h->own_m, &h->own_n);
            ho_shape(nb, dir == 0 ? SP_STEP_RECV : SP_STEP_SEND, &pm, &h->peer_n);
            st = dir == 0 ? sp_lower_stage_xfer_progs(&ex->l, me, nb, ho_keep_mine, &k)
                          : sp_lower_stage_xfer_progs(&ex->l, nb, me, ho_keep_mine, &k);
        }
    }
    free(nb);
    return st;
}

void spi_handoff_free(chip *ch)
{
    for (int ph = 0; ph < SP_PHASE_COUNT; ph++)
        for (int dir = 0; dir < 2; dir++) {
            free(ch->ho[ph][dir].b);
            memset(&ch->ho[ph][dir], 0, sizeof ch->ho[ph][dir]);
        }
}

int spi_exec_handoff_fault;

sp_status spi_handoff_run(chip *ch, const sp_step *s)
{
    if (spi_exec_handoff_fault == 2) return SP_OK;
    int dir = s->kind == SP_STEP_RECV;
    const spi_handoff *h = &ch->ho[ch->prog->phase][dir];
    /* every pass and decode step of a phase hands off blocks of one shape: the walk's */
    if (s->m != h->own_m || s->n != h->own_n)
        return spi_fail(SP_EINTERNAL, "stage hand-off: chip %d's %s step holds (%lld, %lld), its blocks were walked "
                                      "for (%lld, %lld)", ch->grank, sp_step_kind_name(s->kind), (long long)s->m,
                        (long long)s->n, (long long)h->own_m, (long long)h->own_n);
    size_t eb = (size_t)sp_dtype_bytes(s->coll.dtype);
    /* this chip's block of the activations: rows [r0, r0 + m), columns [c0, c0 + n) */
    int64_t r0 = (int64_t)spi_aidx(ch, s->batch_axes) * s->m, c0 = (int64_t)spi_aidx(ch, s->axes) * s->n;
    char *buf = ch->buf[dir ? s->dst : s->src];
    for (int64_t i = 0; i < h->n; i++) {
        const sp_stage_block *b = &h->b[i];
        int peer = dir ? b->src : b->dst;
        if (b->row0 < r0 || b->row0 + b->rows > r0 + s->m || b->col0 < c0 || b->col0 + b->cols > c0 + s->n)
            return spi_fail(SP_EINTERNAL, "stage hand-off: block rows %lld+%lld, columns %lld+%lld is not in chip %d's "
                                          "block at (%lld, %lld)", (long long)b->row0, (long long)b->rows,
                            (long long)b->col0, (long long)b->cols, ch->grank, (long long)r0, (long long)c0);
        char *at = buf + (size_t)((b->row0 - r0) * s->n + (b->col0 - c0)) * eb;
        int whole = b->rows == 1 || (b->cols == s->n && b->cols == h->peer_n);
        int64_t msgs = whole ? 1 : b->rows, elems = whole ? b->rows * b->cols : b->cols;
        for (int64_t r = 0; r < msgs; r++) {
            char *row = at + (size_t)(r * s->n) * eb;
            SP_CHECK(dir ? sp_comm_recv(ch->fc, peer, row, (size_t)elems, s->coll.dtype)
                         : sp_comm_send(ch->fc, peer, row, (size_t)elems, s->coll.dtype));
            if (dir && spi_exec_handoff_fault == 1) memset(row, 0, (size_t)elems * eb);
        }
    }
    return SP_OK;
}
