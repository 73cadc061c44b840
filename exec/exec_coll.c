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
sp_status spi_check_bytes(chip *ch, const sp_step *s, const sp_comm_counters *a, const sp_comm_counters *b,
                          sp_coll_kind k)
{
    uint64_t sent = b->bytes_sent[k] - a->bytes_sent[k], recv = b->bytes_recv[k] - a->bytes_recv[k];
    ch->meas[k] += sent;
    ch->measr[k] += recv;
    ch->pred[k] += (uint64_t)s->coll.bytes_sent;
    ch->predr[k] += (uint64_t)s->coll.bytes_recv;
    ch->comm_steps++;
    if (sent != (uint64_t)s->coll.bytes_sent || recv != (uint64_t)s->coll.bytes_recv) {
        if (!ch->mismatches)
            snprintf(ch->first_mismatch, sizeof ch->first_mismatch,
                     "chip %d %s %s %s->%s: measured sent %llu recv %llu, predicted %lld / %lld", ch->rank,
                     sp_step_kind_name(s->kind), sp_coll_kind_name(k), sp_buf_name(s->src), sp_buf_name(s->dst),
                     (unsigned long long)sent, (unsigned long long)recv, (long long)s->coll.bytes_sent,
                     (long long)s->coll.bytes_recv);
        ch->mismatches++;
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
        if (mask == SP_AXES_REPLICA) {
            /* MoE dispatch / combine over the replicas: row block g to replica g, and back in member order */
            SP_CHECK(ch->ops->sync(&ch->dev));
            st = sp_comm_alltoall(ch->c, mask, src, dst, (size_t)chunk, co->dtype);
        } else if (co->a2a_to_batch) {
            /* src (rows, cols): row block rb(g) to g; dst (rows/K, cols·K): g's heads at col block cb(g) */
            for (int g = 0; g < K; g++)
                SP_CHECK(spi_copy_flat(ch, t1 + g * chunk * eb, src + grp.row_blk[g] * chunk * eb, chunk, eb));
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
            for (int g = 0; g < K; g++)
                SP_CHECK(spi_copy_flat(ch, dst + grp.row_blk[g] * chunk * eb, t2 + g * chunk * eb, chunk, eb));
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
