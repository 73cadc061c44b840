/*
 * exec_coll.c: collective packing (see spi_exec.h): the blocks a
 * COLL step hands the communicator and where the results land, and the
 * bytes measured against the step's prediction.
 */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "exec/spi_exec.h"

/* ---- collectives ------------------------------------------------------------ */
/* Adds one step's measured bytes (counters a -> b) and its prediction to the
 * chip's totals; a difference is a mismatch.  expect_*: the lowering's
 * a-priori figure (differs from the prediction for routed all-to-alls only). */
static void check_step(chip *ch, const sp_step *s, const sp_comm_counters *a, const sp_comm_counters *b,
                       sp_coll_kind k, int64_t pred_sent, int64_t pred_recv)
{
    uint64_t sent = b->bytes_sent[k] - a->bytes_sent[k], recv = b->bytes_recv[k] - a->bytes_recv[k];
    ch->meas[k] += sent;
    ch->measr[k] += recv;
    ch->pred[k] += (uint64_t)pred_sent;
    ch->predr[k] += (uint64_t)pred_recv;
    ch->expect[k] += (uint64_t)s->coll.bytes_sent;
    ch->expectr[k] += (uint64_t)s->coll.bytes_recv;
    ch->comm_steps++;
    if (sent != (uint64_t)pred_sent || recv != (uint64_t)pred_recv) {
        if (!ch->mismatches)
            snprintf(ch->first_mismatch, sizeof ch->first_mismatch,
                     "chip %d %s %s %s->%s: measured sent %llu recv %llu, predicted %lld / %lld", ch->rank,
                     sp_step_kind_name(s->kind), sp_coll_kind_name(k), sp_buf_name(s->src), sp_buf_name(s->dst),
                     (unsigned long long)sent, (unsigned long long)recv, (long long)pred_sent, (long long)pred_recv);
        ch->mismatches++;
    }
}

sp_status spi_check_bytes(chip *ch, const sp_step *s, const sp_comm_counters *a, const sp_comm_counters *b,
                          sp_coll_kind k)
{
    int64_t ps = s->coll.bytes_sent, pr = s->coll.bytes_recv;
    if (s->kind == SP_STEP_COLL && s->coll.routed) {
        /* the routing decides the bytes: predict them from this chip's counts (sp_lower.h) */
        const int64_t *own = (const int64_t *)ch->buf[s->src2];
        SP_CHECK(sp_lower_moe_a2a_bytes(ch->prog, s, sp_comm_group_rank(ch->c, s->coll.mask), own,
                                        own + s->experts, &ps, &pr));
    }
    check_step(ch, s, a, b, k, ps, pr);
    return SP_OK;
}

/* Routed MoE all-to-all (sp_lower.h): slot rows of cols elements, expert
 * e's S slots at rows e·S.. on the dispatching side, (source h, local expert
 * j) at rows (h·NL + j)·S.. on the expert side; only the occupied slots move,
 * packed per peer in t1, unpacked from t2.  The dispatch first exchanges the
 * counts into the second half of the routing buffer. */
static sp_status run_routed_a2a(chip *ch, const sp_step *s, char *t1, char *t2)
{
    const sp_coll *co = &s->coll;
    const int K = co->group;
    const int64_t NL = s->experts / K, S = s->capacity, cols = co->cols;
    const size_t eb = (size_t)sp_dtype_bytes(co->dtype), row = (size_t)cols * eb;
    int64_t *own = (int64_t *)ch->buf[s->src2], *from = own + s->experts;
    const char *src = ch->buf[s->src];
    char *dst = ch->buf[s->dst];
    if (co->routed == 1)
        SP_CHECK(sp_comm_alltoall(ch->c, co->mask, own, from, (size_t)NL * sizeof(int64_t), SP_DT_INT8));
    /* dispatch: send own[e] rows of each expert, receive from[h·NL+j]; combine: the reverse */
    const int64_t *sc = co->routed == 1 ? own : from, *rc = co->routed == 1 ? from : own;
    size_t scnt[SP_COLL_GROUP_MAX], sdsp[SP_COLL_GROUP_MAX], rcnt[SP_COLL_GROUP_MAX], rdsp[SP_COLL_GROUP_MAX];
    size_t so = 0, ro = 0;
    for (int h = 0; h < K; h++) {
        sdsp[h] = so;
        rdsp[h] = ro;
        for (int64_t j = 0; j < NL; j++) {
            int64_t b = h * NL + j, n = sc[b];
            if (n < 0 || n > S || rc[b] < 0 || rc[b] > S)
                return spi_fail(SP_EINTERNAL, "routed all-to-all: block %lld holds %lld / %lld rows of %lld slots",
                                (long long)b, (long long)n, (long long)rc[b], (long long)S);
            SP_CHECK(spi_copy_flat(ch, t1 + so * eb, src + (size_t)b * (size_t)S * row, n * cols, (int)eb));
            so += (size_t)(n * cols);
            ro += (size_t)(rc[b] * cols);
        }
        scnt[h] = so - sdsp[h];
        rcnt[h] = ro - rdsp[h];
    }
    SP_CHECK(ch->ops->sync(&ch->dev));
    SP_CHECK(sp_comm_alltoallv(ch->c, co->mask, t1, scnt, sdsp, t2, rcnt, rdsp, co->dtype));
    ro = 0;
    for (int64_t b = 0; b < K * NL; b++) {
        char *d = dst + (size_t)b * (size_t)S * row;
        SP_CHECK(spi_copy_flat(ch, d, t2 + ro * eb, rc[b] * cols, (int)eb));
        /* the expert FFN runs every slot: unoccupied ones hold zeros, not a stale row */
        if (co->routed == 1 && rc[b] < S) SP_CHECK(ch->ops->zero(&ch->dev, d + (size_t)rc[b] * row, (size_t)(S - rc[b]) * row));
        ro += (size_t)(rc[b] * cols);
    }
    return SP_OK;
}

sp_status spi_run_coll(chip *ch, const sp_step *s)
{
    const sp_coll *co = &s->coll;
    /* the group and each member's blocks, as the lowering resolves them for this chip */
    sp_coll_group grp;
    SP_CHECK(sp_lower_coll_group(ch->prog, s, ch->rank, &grp));
    const int K = grp.K;
    const unsigned mask = co->mask;
    int eb = sp_dtype_bytes(co->dtype);
    int64_t rows = co->rows, cols = co->cols, blk = rows * cols;
    char *t1 = ch->scr[SP_SCR_PACK], *t2 = ch->scr[SP_SCR_PACK2];
    /* all-gather / reduce-scatter pack K blocks into t1; all-to-all its input into t1, its output into t2 */
    int64_t n1 = co->kind == SP_COLL_ALLTOALL ? blk * eb : co->kind == SP_COLL_ALLREDUCE ? 0 : K * blk * eb;
    int64_t n2 = co->kind == SP_COLL_ALLTOALL ? blk * eb : 0;
    if (n1 > ch->scr_bytes[SP_SCR_PACK] || n2 > ch->scr_bytes[SP_SCR_PACK2])
        return spi_fail(SP_EINTERNAL, "%s of %lld bytes: the packing slots hold %lld and %lld", sp_coll_kind_name(co->kind),
                        (long long)(K * blk * eb), (long long)ch->scr_bytes[SP_SCR_PACK],
                        (long long)ch->scr_bytes[SP_SCR_PACK2]);
    sp_status st = SP_OK;
    switch (co->kind) {
    case SP_COLL_ALLGATHER: {
        const void *src = co->is_weight ? ch->lw[ch->li * SP_W_COUNT + s->weight] : ch->buf[s->src];
        SP_CHECK(ch->ops->sync(&ch->dev));
        st = sp_comm_allgather(ch->c, mask, src, t1, (size_t)blk, co->dtype);
        if (st) return st;
        char *dst = ch->buf[s->dst];
        int nca = sp_lower_axes_size(ch->l, co->col_axes);
        int64_t ld = cols * nca;
        if (co->is_weight) {
            /* gathered column block cb holds the storage column block of its source */
            ch->wb_ncb[s->dst] = nca;
            for (int g = 0; g < K; g++) ch->wb_cblk[s->dst][grp.col_blk[g]] = grp.store_col_blk[g];
        }
        for (int g = 0; g < K; g++)
            SP_CHECK(spi_copy_block(ch, dst + (grp.row_blk[g] * rows * ld + grp.col_blk[g] * cols) * eb, ld,
                                    t1 + g * blk * eb, cols, rows, cols, eb));
        break;
    }
    case SP_COLL_REDUCESCATTER: {
        const char *src = ch->buf[s->src];
        int64_t ld = cols * sp_lower_axes_size(ch->l, co->col_axes);
        for (int g = 0; g < K; g++)
            SP_CHECK(spi_copy_block(ch, t1 + g * blk * eb, cols,
                                    src + (grp.row_blk[g] * rows * ld + grp.col_blk[g] * cols) * eb, ld, rows, cols,
                                    eb));
        SP_CHECK(ch->ops->sync(&ch->dev));
        st = sp_comm_reducescatter(ch->c, mask, t1, ch->buf[s->dst], (size_t)blk, co->dtype);
        break;
    }
    case SP_COLL_ALLREDUCE: {
        char *d = ch->buf[s->dst];
        if (s->src != s->dst) SP_CHECK(spi_copy_flat(ch, d, ch->buf[s->src], blk, eb));
        if (co->elems > blk) SP_CHECK(ch->ops->zero(&ch->dev, d + blk * eb, (size_t)((co->elems - blk) * eb)));
        SP_CHECK(ch->ops->sync(&ch->dev));
        st = sp_comm_allreduce(ch->c, mask, d, d, (size_t)co->elems, co->dtype);
        break;
    }
    case SP_COLL_ALLTOALL: {
        int64_t rk = rows / K, chunk = rk * cols;
        const char *src = ch->buf[s->src];
        char *dst = ch->buf[s->dst];
        if (co->routed) {
            st = run_routed_a2a(ch, s, t1, t2);
        } else if (co->a2a_to_batch) {
            /* src (rows, cols): row block rb(g) to g; dst (rows/K, cols·K): g's heads at col block cb(g).
             * A ragged batch's blocks: g's sequences' packed rows, then zero rows up to rows/K */
            for (int g = 0; g < K; g++) {
                if (!s->ragged) {
                    SP_CHECK(spi_copy_flat(ch, t1 + g * chunk * eb, src + grp.row_blk[g] * chunk * eb, chunk, eb));
                    continue;
                }
                int64_t r0, n;
                sp_lower_ragged_blk_rows(ch->prog, K, grp.row_blk[g], &r0, &n);
                if (n > rk) return spi_fail(SP_EINTERNAL, "ragged all-to-all: block of %lld rows, %lld sent", (long long)n, (long long)rk);
                SP_CHECK(spi_copy_flat(ch, t1 + g * chunk * eb, src + r0 * cols * eb, n * cols, eb));
                if (n < rk) SP_CHECK(ch->ops->zero(&ch->dev, t1 + (g * chunk + n * cols) * eb, (size_t)((rk - n) * cols * eb)));
            }
            SP_CHECK(ch->ops->sync(&ch->dev));
            st = sp_comm_alltoall(ch->c, mask, t1, t2, (size_t)chunk, co->dtype);
            if (st) return st;
            for (int g = 0; g < K; g++)
                SP_CHECK(spi_copy_block(ch, dst + grp.col_blk[g] * cols * eb, cols * K, t2 + g * chunk * eb, cols, rk,
                                        cols, eb));
        } else {
            /* src (rows/K, cols·K): col block cb(g) to g; dst (rows, cols): g's rows at row block rb(g) */
            for (int g = 0; g < K; g++)
                SP_CHECK(spi_copy_block(ch, t1 + g * chunk * eb, cols, src + grp.col_blk[g] * cols * eb, cols * K, rk,
                                        cols, eb));
            SP_CHECK(ch->ops->sync(&ch->dev));
            st = sp_comm_alltoall(ch->c, mask, t1, t2, (size_t)chunk, co->dtype);
            if (st) return st;
            for (int g = 0; g < K; g++) {
                int64_t r0 = grp.row_blk[g] * rk, n = rk;
                if (s->ragged) sp_lower_ragged_blk_rows(ch->prog, K, grp.row_blk[g], &r0, &n);   /* its tokens only */
                SP_CHECK(spi_copy_flat(ch, dst + r0 * cols * eb, t2 + g * chunk * eb, n * cols, eb));
            }
        }
        break;
    }
    default: return spi_fail(SP_EINVAL, "collective kind %d", (int)co->kind);
    }
    return st;
}

int spi_peer_stage(const chip *ch, int stage)
{
    int c[SP_AXIS_COUNT];
    memcpy(c, ch->coords, sizeof c);
    c[SP_AXIS_STAGE] = stage;
    return sp_mesh_rank(&ch->ex->mesh, c);
}
