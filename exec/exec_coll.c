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

static unsigned mask_of(const char *a)
{
    unsigned mk = 0;
    for (; *a; a++) mk |= 1u << spi_axis_of(*a);
    return mk;
}

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
    char all[16];
    snprintf(all, sizeof all, "%s%s", co->row_axes, co->col_axes);
    unsigned mask = mask_of(all);
    /* the group is row_axes ∪ col_axes as a set (all-to-all names the same
     * axes twice); its size comes from the mesh, not from co->group */
    int K = sp_mesh_group_size(&ch->ex->mesh, mask);
    int members[64];
    if (K > 64) return spi_fail(SP_ENOTSUP, "group of %d chips", K);
    sp_mesh_group_members(&ch->ex->mesh, ch->rank, mask, members);
    int nra = spi_asize(ch, co->row_axes), nca = spi_asize(ch, co->col_axes);
    int eb = sp_dtype_bytes(co->dtype);
    int64_t rows = co->rows, cols = co->cols, blk = rows * cols;
    char *t1 = ch->tmp1, *t2 = ch->tmp2;
    if ((size_t)(K * co->elems * eb) > ch->tmp_bytes) return spi_fail(SP_EINVAL, "collective scratch too small");
    sp_status st = SP_OK;
    switch (co->kind) {
    case SP_COLL_ALLGATHER: {
        const void *src;
        sp_weight w = SP_W_NONE;
        if (co->is_weight) {
            switch (s->dst) {
            case SP_BUF_WQ: w = SP_W_Q; break;
            case SP_BUF_WK: w = SP_W_K; break;
            case SP_BUF_WV: w = SP_W_V; break;
            case SP_BUF_WO: w = SP_W_O; break;
            case SP_BUF_WIN: w = SP_W_IN; break;
            case SP_BUF_WUP: w = SP_W_UP; break;
            case SP_BUF_WOUT: w = SP_W_OUT; break;
            default: return spi_fail(SP_EINVAL, "weight gather into %s", sp_buf_name(s->dst));
            }
            src = ch->lw[ch->li * SP_W_COUNT + w];
        } else {
            src = ch->buf[s->src];
        }
        SP_CHECK(ch->ops->sync(&ch->dev));
        st = sp_comm_allgather(ch->c, mask, src, t1, (size_t)blk, co->dtype);
        if (st) return st;
        char *dst = ch->buf[s->dst];
        int64_t ld = cols * nca;
        if (co->is_weight) {
            /* gathered column block cb holds the storage column block of its source */
            const sp_weight_spec *ws = &ch->prog->wspec[w];
            if (nca > 64) return spi_fail(SP_EINVAL, "weight gather into %s", sp_buf_name(s->dst));
            ch->wb_ncb[s->dst] = nca;
            for (int g = 0; g < K; g++)
                ch->wb_cblk[s->dst][sp_lower_axes_index(ch->l, members[g], co->col_axes)] =
                    sp_lower_axes_index(ch->l, members[g], ws->col_axes);
        }
        for (int g = 0; g < K; g++) {
            int rb = sp_lower_axes_index(ch->l, members[g], co->row_axes);
            int cb = sp_lower_axes_index(ch->l, members[g], co->col_axes);
            SP_CHECK(spi_copy_block(ch, dst + (rb * rows * ld + cb * cols) * eb, ld, t1 + g * blk * eb, cols, rows, cols,
                                eb));
        }
        (void)nra;
        break;
    }
    case SP_COLL_REDUCESCATTER: {
        const char *src = ch->buf[s->src];
        int64_t ld = cols * nca;
        for (int g = 0; g < K; g++) {
            int rb = sp_lower_axes_index(ch->l, members[g], co->row_axes);
            int cb = sp_lower_axes_index(ch->l, members[g], co->col_axes);
            SP_CHECK(spi_copy_block(ch, t1 + g * blk * eb, cols, src + (rb * rows * ld + cb * cols) * eb, ld, rows, cols,
                                eb));
        }
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
        if (co->a2a_to_batch) {
            /* src (rows, cols): row block rb(g) to g; dst (rows/K, cols·K): g's heads at col block cb(g) */
            for (int g = 0; g < K; g++) {
                int rb = sp_lower_axes_index(ch->l, members[g], co->row_axes);
                SP_CHECK(spi_copy_flat(ch, t1 + g * chunk * eb, src + rb * chunk * eb, chunk, eb));
            }
            SP_CHECK(ch->ops->sync(&ch->dev));
            st = sp_comm_alltoall(ch->c, mask, t1, t2, (size_t)chunk, co->dtype);
            if (st) return st;
            for (int g = 0; g < K; g++) {
                int cb = sp_lower_axes_index(ch->l, members[g], co->col_axes);
                SP_CHECK(spi_copy_block(ch, dst + cb * cols * eb, cols * K, t2 + g * chunk * eb, cols, rk, cols, eb));
            }
        } else {
            /* src (rows/K, cols·K): col block cb(g) to g; dst (rows, cols): g's rows at row block rb(g) */
            for (int g = 0; g < K; g++) {
                int cb = sp_lower_axes_index(ch->l, members[g], co->col_axes);
                SP_CHECK(spi_copy_block(ch, t1 + g * chunk * eb, cols, src + cb * cols * eb, cols * K, rk, cols, eb));
            }
            SP_CHECK(ch->ops->sync(&ch->dev));
            st = sp_comm_alltoall(ch->c, mask, t1, t2, (size_t)chunk, co->dtype);
            if (st) return st;
            for (int g = 0; g < K; g++) {
                int rb = sp_lower_axes_index(ch->l, members[g], co->row_axes);
                SP_CHECK(spi_copy_flat(ch, dst + rb * chunk * eb, t2 + g * chunk * eb, chunk, eb));
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
