/*
 * exec_weights.c: weight shards (see spi_exec.h): a chip's shard of each
 * matrix per the program's wspec, its biases and norms, and the INT8/FP8
 * scales of a matmul's local columns.
 */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "exec/spi_exec.h"

/* ---- weights ---------------------------------------------------------------- */
/* the global bias of a matrix and its length (NULL when the model has none) */
const float *spi_global_bias(const chip *ch, int64_t layer, sp_weight w, int64_t *len)
{
    sp_weight b = sp_weight_bias(w);
    int64_t rows;
    sp_weight_shape(ch->m, b, &rows, len);
    return sp_weights_tensor(ch->ex->w, b, layer);
}

/* this chip's copy of the current layer's bias of a matrix (NULL: none) */
const float *spi_bias_of(const chip *ch, sp_weight w, int64_t *len)
{
    spi_global_bias(ch, ch->first_layer + ch->li, w, len);
    return ch->lb[ch->li * SP_W_COUNT + w];
}

/* this chip's copy of a norm: (1 or 2, E) fp32, gain row then LayerNorm bias row */
void spi_norm_of(const chip *ch, sp_weight w, const float **g, const float **b)
{
    const float *n = sp_weight_per_layer(w) ? (const float *)ch->lw[ch->li * SP_W_COUNT + w] : (const float *)ch->wt[w];
    *g = n;
    *b = ch->m->norm == SP_NORM_LAYERNORM ? n + ch->m->d_model : NULL;
}

/* Where a block of the chip's device memory is built: in place on a device
 * in host memory (the arena is zeroed), else in a zeroed host copy that
 * from_host uploads into it and frees. */
static void *host_side(chip *ch, void *dst, size_t bytes)
{
    return ch->ops->host_memory ? dst : calloc(1, bytes ? bytes : 1);
}

static sp_status from_host(chip *ch, void *dst, void *h, size_t bytes, sp_status st)
{
    if (ch->ops->host_memory) return st;
    if (!st) st = ch->ops->upload(&ch->dev, dst, h, bytes);
    free(h);   /* an upload has read the host block when it returns */
    return st;
}

/* Builds this chip's shard of one weight per its spec into dst (its block of
 * the arena: local_rows × local_cols of the storage dtype); padded rows/cols
 * are zeros.  INT8/FP8: scale_dst (cols fp32) gets the scales of every
 * global column (padded ones 0): the lowering keeps them whole on every chip. */
sp_status spi_build_shard(chip *ch, const sp_weight_spec *s, int64_t layer, int64_t expert, void *dst, float *scale_dst)
{
    /* expert e of a MoE layer: rows [e·rows_real, (e+1)·rows_real) of the stacked tensor (sp_weight) */
    const int64_t roff = expert * s->rows_real;
    int rb = spi_aidx(ch, s->row_axes), cb = spi_aidx(ch, s->col_axes);
    int64_t r0 = rb * s->local_rows, c0 = cb * s->local_cols;
    int64_t r1 = r0 + s->local_rows, c1 = c0 + s->local_cols;
    if (r1 > s->rows_real) r1 = s->rows_real;
    if (c1 > s->cols_real) c1 = s->cols_real;
    sp_weight w = s->weight;
    sp_dtype dt = s->dtype;   /* norms are fp32 in the spec; vocab tables f32, bf16 or f16 */
    int eb = sp_dtype_bytes(dt);
    size_t bytes = (size_t)(s->local_rows * s->local_cols * eb);
    char *shard = host_side(ch, dst, bytes);
    if (!shard) return spi_fail(SP_ENOMEM, "weight shard %s", sp_weight_name(w));
    float *lsc = NULL;
    sp_status st = SP_OK;
    if (dt == SP_DT_INT8 || dt == SP_DT_FP8) {
        size_t sb = (size_t)s->cols * sizeof(float);
        float *full = host_side(ch, scale_dst, sb);
        lsc = malloc((size_t)s->local_cols * sizeof *lsc);
        if (!full || !lsc) {
            st = spi_fail(SP_ENOMEM, "weight scales");
        } else {
            /* zero rows: only the scales of the whole real column range */
            int8_t none;
            st = sp_weights_block(ch->ex->w, w, layer, roff, roff, 0, s->cols_real, dt, &none, full);   /* the expert's */
        }
        if (full) st = from_host(ch, scale_dst, full, sb, st);
    }
    if (!st && r1 > r0 && c1 > c0 && sp_weight_is_matrix(w)) {
        char *blk = malloc((size_t)((r1 - r0) * (c1 - c0) * eb));
        if (!blk) st = spi_fail(SP_ENOMEM, "weight block");
        else st = sp_weights_block(ch->ex->w, w, layer, roff + r0, roff + r1, c0, c1, dt, blk, lsc);
        if (!st) spi_copy_block_host(shard, s->local_cols, blk, c1 - c0, r1 - r0, c1 - c0, eb);
        free(blk);
    } else if (!st && r1 > r0 && c1 > c0) {
        if (w == SP_W_EMBED || w == SP_W_LMHEAD || w == SP_W_POS) {
            /* the chip's rows of a vocabulary / positions table, read as fp32
             * (from the checkpoint's slice when the weights are opened lazily) */
            sp_weight vt = w == SP_W_LMHEAD && ch->m->tied_embeddings ? SP_W_EMBED : w;
            int64_t nr = r1 - r0, nc = c1 - c0;
            float *blk = malloc((size_t)(nr * nc) * sizeof *blk);   // (nr, nc)
            if (!blk) st = spi_fail(SP_ENOMEM, "table block");
            else st = sp_weights_block(ch->ex->w, vt, 0, r0, r1, c0, c1, SP_DT_F32, blk, NULL);
            if (!st && dt == SP_DT_F32) {
                spi_copy_block_host(shard, s->local_cols, (const char *)blk, nc, nr, nc, 4);
            } else if (!st && (dt == SP_DT_BF16 || dt == SP_DT_F16)) {
                uint16_t *h = (uint16_t *)(void *)shard;   // (local_rows, local_cols)
                for (int64_t r = 0; r < nr; r++)
                    for (int64_t c = 0; c < nc; c++) {
                        float v = blk[r * nc + c];
                        h[r * s->local_cols + c] = dt == SP_DT_BF16 ? sp_kern_f32_to_bf16(v) : sp_kern_f32_to_f16(v);
                    }
            } else if (!st) {
                st = spi_fail(SP_ENOTSUP, "%s stored as %s: vocabulary tables are f32, bf16 or f16",
                              sp_weight_name(w), sp_dtype_name(dt));
            }
            free(blk);
        } else if (w == SP_W_NORM1 || w == SP_W_NORM2 || w == SP_W_NORMF) {
            /* gain row, then the LayerNorm bias row */
            const float *rowv[2] = {sp_weights_tensor(ch->ex->w, w, layer),
                                    sp_weights_tensor(ch->ex->w, sp_weight_bias(w), layer)};
            for (int64_t r = r0; r < r1; r++)
                if (rowv[r]) memcpy(shard + (r - r0) * s->local_cols * eb, rowv[r] + c0, (size_t)((c1 - c0) * eb));
        }
    }
    free(lsc);
    return from_host(ch, dst, shard, bytes, st);
}

/* A layer matrix's bias, whole (cols_real fp32), into dst; zeros where the
 * model's weights hold none for it. */
sp_status spi_build_bias(chip *ch, const sp_weight_spec *s, int64_t layer, float *dst)
{
    int64_t len;
    const float *g = spi_global_bias(ch, layer, s->weight, &len);
    if (len != s->cols_real)
        return spi_fail(SP_EINTERNAL, "bias of %s: %lld values, the lowering keeps %lld", sp_weight_name(s->weight),
                        (long long)len, (long long)s->cols_real);
    size_t bytes = (size_t)len * sizeof(float);
    float *h = host_side(ch, dst, bytes);
    if (!h) return spi_fail(SP_ENOMEM, "bias");
    if (g) memcpy(h, g, bytes);
    return from_host(ch, dst, h, bytes, SP_OK);
}

/* Scales of the n local columns of a matmul's weight (device memory): the
 * stored shard holds global columns [cb·lc, cb·lc + lc); a gathered buffer
 * holds, for each gathered column block, the storage block recorded at its
 * gather (copied into the scales scratch slot). */
sp_status spi_matmul_scales(chip *ch, const sp_step *s, const sp_weight_spec *ws, const float **out)
{
    const float *full = ch->lscale[ch->li * SP_W_COUNT + s->weight];
    int64_t lc = ws->local_cols;
    if (!s->wbuf) {
        *out = full + (int64_t)spi_aidx(ch, ws->col_axes) * lc;
        return SP_OK;
    }
    int ncb = ch->wb_ncb[s->wbuf];
    if (ncb * lc != s->n)
        return spi_fail(SP_EINVAL, "matmul %s: gathered buffer %s holds %d column blocks, step wants %lld cols",
                        sp_weight_name(s->weight), sp_buf_name(s->wbuf), ncb, (long long)s->n);
    if (ncb * lc * 4 > ch->scr_bytes[SP_SCR_SCALES])
        return spi_fail(SP_EINTERNAL, "matmul %s: %lld gathered scales, the scales slot holds %lld bytes",
                        sp_weight_name(s->weight), (long long)(ncb * lc), (long long)ch->scr_bytes[SP_SCR_SCALES]);
    float *scl = ch->scr[SP_SCR_SCALES];
    for (int b = 0; b < ncb; b++)
        SP_CHECK(spi_copy_flat(ch, scl + b * lc, full + (int64_t)ch->wb_cblk[s->wbuf][b] * lc, lc, 4));
    *out = scl;
    return SP_OK;
}
