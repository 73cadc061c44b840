/*
 * exec.c: the program interpreter (see sp_exec.h).  One thread per chip;
 * each runs the steps of its stage's programs as lower.c defines them.
 * Tensor data is touched only through the chip's device (spi_xdev.h): the
 * CPU kernels in host memory, or CUDA kernels in the GPU's memory.
 */
#include "config.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "spi_common.h"
#include "exec/sp_exec.h"
#include "exec/spi_xdev.h"

struct sp_exec {
    sp_model m;
    sp_layout l;
    sp_mesh mesh;
    int64_t B, P, G;
    const sp_weights *w;
    sp_comm_world *world;
    sp_comm_backend backend;
    const spi_xops *ops;             /* the chips' device: CPU, or CUDA under NCCL */
    int nchips;
    int local_first, local_count;    /* chips this process hosts (MPI: one) */
    /* run */
    const int32_t *prompt;
    sp_kern_sample_opts samp;
    int greedy;
    int32_t *tokens;
    float *last_logits;
    pthread_mutex_t mu;
    sp_exec_stats st;
    sp_status err;
    char errmsg[256];
};

typedef struct chip {
    sp_exec *ex;
    const sp_model *m;
    const sp_layout *l;
    int rank, stage, replica;
    int coords[SP_AXIS_COUNT];
    sp_comm *c;
    spi_xdev dev;                    /* where buffers, weights and the KV cache live */
    const spi_xops *ops;             /* dev.ops, NULL until the device is open */
    sp_program *pf, *dc, *prog;
    void *buf[SP_BUF_COUNT];
    int64_t first_layer;
    void *wt[SP_W_COUNT];            /* model-level shards (EMBED, LMHEAD) */
    void **lw;                       /* (n_layers, SP_W_COUNT) per-layer shards */
    float **lscale;                  /* (n_layers, SP_W_COUNT) INT8/FP8 scales of the WHOLE global
                                        column range (spec cols, padded cols 0), replicated, never moved;
                                        on the chip's device (counted with the weights) */
    float *scl;                      /* (max cols) scales of one matmul's local columns, on the device */
    float **lb;                      /* (n_layers, SP_W_COUNT) biases, whole, fp32 (bias models) */
    int64_t alloc_weights, alloc_gathered, alloc_kv, alloc_act;   /* bytes, vs sp_lower_mem_sizes */
    int64_t alloc_ws;                /* device workspace bytes (devices with their own memory), vs the same */
    /* gathered weight buffers: the storage column block of each gathered column block */
    int wb_ncb[SP_BUF_COUNT];
    int wb_cblk[SP_BUF_COUNT][64];
    void *kc, *vc;                   /* KV cache (n_layers, kv_seqs·M, ctx_max, kvh, D) */
    int64_t ctx_max, kv_layer_elems, kv_mb_elems;
    void *tmp1, *tmp2;               /* collective packing */
    size_t tmp_bytes;
    float *qs, *ks, *vs;             /* rope / pack scratch */
    int64_t *pos;                    /* host */
    void *sm_scr;                    /* host: sampling */
    size_t sm_bytes;
    float *hrow;                     /* host copy of one logits row (device backends) */
    int32_t *dtok;                   /* device copy of the token hand-off (device backends) */
    const int32_t *in_tok;           /* input tokens of the current micro-batch */
    int64_t li;                      /* current layer (stage-local) */
    /* local stats */
    uint64_t meas[SP_COLL_COUNT], pred[SP_COLL_COUNT], measr[SP_COLL_COUNT], predr[SP_COLL_COUNT];
    uint64_t token_bytes;
    int64_t comm_steps, mismatches;
    char first_mismatch[256];
    double prefill_s, decode_step_s, tokens_per_s;   /* chip 0 only */
} chip;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int axis_of(char c)
{
    switch (c) {
    case 'x': return SP_AXIS_X;
    case 'y': return SP_AXIS_Y;
    case 'z': return SP_AXIS_Z;
    case 's': return SP_AXIS_STAGE;
    default: return SP_AXIS_REPLICA;
    }
}
static unsigned mask_of(const char *a)
{
    unsigned mk = 0;
    for (; *a; a++) mk |= 1u << axis_of(*a);
    return mk;
}
static int aidx(const chip *ch, const char *axes) { return sp_lower_axes_index(ch->l, ch->rank, axes); }
static int asize(const chip *ch, const char *axes) { return sp_lower_axes_size(ch->l, axes); }

/* coordinates of block `blk` of an axis sequence: 1 if they match this chip on every axis of `match` */
static int block_matches(const chip *ch, const char *seq, int blk, const char *match)
{
    int n = (int)strlen(seq);
    int c[8];
    for (int i = n - 1; i >= 0; i--) {
        int d = ch->ex->mesh.dims[axis_of(seq[i])];
        c[i] = blk % d;
        blk /= d;
    }
    for (int i = 0; i < n; i++)
        if (strchr(match, seq[i]) && c[i] != ch->coords[axis_of(seq[i])]) return 0;
    return 1;
}

/* dst (rows, cols) of leading dimension dld <- src of sld; elements of eb bytes, on the chip's device */
static sp_status copy_block(chip *ch, void *dst, int64_t dld, const void *src, int64_t sld, int64_t rows,
                            int64_t cols, int eb)
{
    return ch->ops->copy2d(&ch->dev, dst, (size_t)(dld * eb), src, (size_t)(sld * eb), (size_t)(cols * eb),
                           (size_t)rows);
}

/* n contiguous elements */
static sp_status copy_flat(chip *ch, void *dst, const void *src, int64_t n, int eb)
{
    return copy_block(ch, dst, n, src, n, 1, n, eb);
}

/* the same in host memory (weight shards are built on the host) */
static void copy_block_host(char *dst, int64_t dld, const char *src, int64_t sld, int64_t rows, int64_t cols, int eb)
{
    (void)spi_xops_cpu.copy2d(NULL, dst, (size_t)(dld * eb), src, (size_t)(sld * eb), (size_t)(cols * eb),
                              (size_t)rows);
}

/* a block built in host memory, moved to the chip's device (the CPU's: stays);
 * on failure *p is NULL and nothing is held */
static sp_status to_device(chip *ch, void **p, size_t bytes)
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

/* ---- weights ---------------------------------------------------------------- */
static sp_wt wt_of(sp_weight w)
{
    switch (w) {
    case SP_W_Q: return SP_WT_WQ;
    case SP_W_K: return SP_WT_WK;
    case SP_W_V: return SP_WT_WV;
    case SP_W_O: return SP_WT_WO;
    case SP_W_IN: return SP_WT_W_IN;
    case SP_W_UP: return SP_WT_W_UP;
    case SP_W_OUT: return SP_WT_W_OUT;
    default: return SP_WT_COUNT;
    }
}

/* the global bias of a matrix and its length (NULL when the model has none) */
static const float *global_bias(const chip *ch, int64_t layer, sp_weight w, int64_t *len)
{
    const sp_weights_layer *L = &ch->ex->w->layers[layer];
    const sp_model *m = ch->m;
    int64_t HD = m->n_heads * m->d_head, KD = m->n_kv_heads * m->d_head;
    switch (w) {
    case SP_W_Q: *len = HD; return L->bq;
    case SP_W_K: *len = KD; return L->bk;
    case SP_W_V: *len = KD; return L->bv;
    case SP_W_O: *len = m->d_model; return L->bo;
    case SP_W_IN: *len = m->d_ff; return L->b_in;
    case SP_W_UP: *len = m->d_ff; return L->b_up;
    case SP_W_OUT: *len = m->d_model; return L->b_out;
    default: *len = 0; return NULL;
    }
}

/* this chip's copy of the current layer's bias of a matrix */
static const float *bias_of(const chip *ch, sp_weight w, int64_t *len)
{
    global_bias(ch, ch->first_layer + ch->li, w, len);
    return ch->lb ? ch->lb[ch->li * SP_W_COUNT + w] : NULL;
}

/* this chip's copy of a norm: (1 or 2, E) fp32, gain row then LayerNorm bias row */
static void norm_of(const chip *ch, sp_weight w, const float **g, const float **b)
{
    const float *n = w == SP_W_NORMF ? (const float *)ch->wt[w] : (const float *)ch->lw[ch->li * SP_W_COUNT + w];
    *g = n;
    *b = ch->m->norm == SP_NORM_LAYERNORM ? n + ch->m->d_model : NULL;
}

/* builds this chip's shard of one weight per its spec; padded rows/cols are
 * zeros.  INT8/FP8: *scale_out gets the scales of every global column
 * (spec cols, padded ones 0): the lowering keeps them whole on every chip */
static sp_status build_shard(chip *ch, const sp_weight_spec *s, int64_t layer, void **out, float **scale_out)
{
    int rb = aidx(ch, s->row_axes), cb = aidx(ch, s->col_axes);
    int64_t r0 = rb * s->local_rows, c0 = cb * s->local_cols;
    int64_t r1 = r0 + s->local_rows, c1 = c0 + s->local_cols;
    if (r1 > s->rows_real) r1 = s->rows_real;
    if (c1 > s->cols_real) c1 = s->cols_real;
    sp_weight w = s->weight;
    sp_wt t = wt_of(w);
    sp_dtype dt = s->dtype;   /* norms are fp32 in the spec; vocab tables f32, bf16 or f16 */
    int eb = sp_dtype_bytes(dt);
    size_t bytes = (size_t)(s->local_rows * s->local_cols * eb);
    char *shard = calloc((size_t)(s->local_rows * s->local_cols), (size_t)eb);
    if (!shard) return spi_fail(SP_ENOMEM, "weight shard %s", sp_weight_name(w));
    ch->alloc_weights += s->local_rows * s->local_cols * eb;
    float *lsc = NULL;
    if (dt == SP_DT_INT8 || dt == SP_DT_FP8) {
        float *full = calloc((size_t)s->cols, sizeof *full);
        lsc = malloc((size_t)s->local_cols * sizeof *lsc);
        if (!full || !lsc) {
            free(full);
            free(lsc);
            free(shard);
            return spi_fail(SP_ENOMEM, "weight scales");
        }
        ch->alloc_weights += s->cols * (int64_t)sizeof *full;
        /* zero rows: only the scales of the whole real column range */
        int8_t none;
        sp_status st = sp_weights_block(ch->ex->w, t, layer, 0, 0, 0, s->cols_real, dt, &none, full);
        if (!st) {
            /* on the chip's device beside the shard (the CPU's: stays) */
            *scale_out = full;
            st = to_device(ch, (void **)scale_out, (size_t)s->cols * sizeof *full);
        } else {
            free(full);
        }
        if (st) {
            free(lsc);
            free(shard);
            return st;
        }
    }
    sp_status st = SP_OK;
    if (r1 > r0 && c1 > c0 && t != SP_WT_COUNT) {
        char *blk = malloc((size_t)((r1 - r0) * (c1 - c0) * eb));
        if (!blk) st = spi_fail(SP_ENOMEM, "weight block");
        else st = sp_weights_block(ch->ex->w, t, layer, r0, r1, c0, c1, dt, blk, lsc);
        if (!st) copy_block_host(shard, s->local_cols, blk, c1 - c0, r1 - r0, c1 - c0, eb);
        free(blk);
    } else if (r1 > r0 && c1 > c0) {
        if (w == SP_W_EMBED || w == SP_W_LMHEAD || w == SP_W_POS) {
            /* the chip's rows of a vocabulary / positions table, read as fp32
             * (from the checkpoint's slice when the weights are opened lazily) */
            sp_wt vt = w == SP_W_POS ? SP_WT_POS : w == SP_W_EMBED || ch->m->tied_embeddings ? SP_WT_EMBED : SP_WT_LM_HEAD;
            int64_t nr = r1 - r0, nc = c1 - c0;
            float *blk = malloc((size_t)(nr * nc) * sizeof *blk);   // (nr, nc)
            if (!blk) st = spi_fail(SP_ENOMEM, "table block");
            else st = sp_weights_block(ch->ex->w, vt, 0, r0, r1, c0, c1, SP_DT_F32, blk, NULL);
            if (!st && dt == SP_DT_F32) {
                copy_block_host(shard, s->local_cols, (const char *)blk, nc, nr, nc, 4);
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
            const sp_weights *W = ch->ex->w;
            const sp_weights_layer *L = w == SP_W_NORMF ? NULL : &W->layers[layer];
            const float *rowv[2] = {w == SP_W_NORMF ? W->final_norm : w == SP_W_NORM1 ? L->attn_norm : L->ffn_norm,
                                    w == SP_W_NORMF ? W->final_norm_b : w == SP_W_NORM1 ? L->attn_norm_b : L->ffn_norm_b};
            for (int64_t r = r0; r < r1; r++)
                if (rowv[r]) memcpy(shard + (r - r0) * s->local_cols * eb, rowv[r] + c0, (size_t)((c1 - c0) * eb));
        }
    }
    free(lsc);
    if (st) {
        free(shard);
        return st;
    }
    *out = shard;
    return to_device(ch, out, bytes);
}

/* Scales of the n local columns of a matmul's weight (device memory): the
 * stored shard holds global columns [cb·lc, cb·lc + lc); a gathered buffer
 * holds, for each gathered column block, the storage block recorded at its
 * gather (copied into ch->scl). */
static sp_status matmul_scales(chip *ch, const sp_step *s, const sp_weight_spec *ws, const float **out)
{
    const float *full = ch->lscale[ch->li * SP_W_COUNT + s->weight];
    int64_t lc = ws->local_cols;
    if (!s->wbuf) {
        *out = full + (int64_t)aidx(ch, ws->col_axes) * lc;
        return SP_OK;
    }
    int ncb = ch->wb_ncb[s->wbuf];
    if (ncb * lc != s->n)
        return spi_fail(SP_EINVAL, "matmul %s: gathered buffer %s holds %d column blocks, step wants %lld cols",
                        sp_weight_name(s->weight), sp_buf_name(s->wbuf), ncb, (long long)s->n);
    for (int b = 0; b < ncb; b++)
        SP_CHECK(copy_flat(ch, ch->scl + b * lc, full + (int64_t)ch->wb_cblk[s->wbuf][b] * lc, lc, 4));
    *out = ch->scl;
    return SP_OK;
}

/* ---- collectives ------------------------------------------------------------ */
static sp_status check_bytes(chip *ch, const sp_step *s, const sp_comm_counters *a, const sp_comm_counters *b,
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

static sp_status run_coll(chip *ch, const sp_step *s)
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
    int nra = asize(ch, co->row_axes), nca = asize(ch, co->col_axes);
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
            SP_CHECK(copy_block(ch, dst + (rb * rows * ld + cb * cols) * eb, ld, t1 + g * blk * eb, cols, rows, cols,
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
            SP_CHECK(copy_block(ch, t1 + g * blk * eb, cols, src + (rb * rows * ld + cb * cols) * eb, ld, rows, cols,
                                eb));
        }
        SP_CHECK(ch->ops->sync(&ch->dev));
        st = sp_comm_reducescatter(ch->c, mask, t1, ch->buf[s->dst], (size_t)blk, co->dtype);
        break;
    }
    case SP_COLL_ALLREDUCE: {
        char *d = ch->buf[s->dst];
        if (s->src != s->dst) SP_CHECK(copy_flat(ch, d, ch->buf[s->src], blk, eb));
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
                SP_CHECK(copy_flat(ch, t1 + g * chunk * eb, src + rb * chunk * eb, chunk, eb));
            }
            SP_CHECK(ch->ops->sync(&ch->dev));
            st = sp_comm_alltoall(ch->c, mask, t1, t2, (size_t)chunk, co->dtype);
            if (st) return st;
            for (int g = 0; g < K; g++) {
                int cb = sp_lower_axes_index(ch->l, members[g], co->col_axes);
                SP_CHECK(copy_block(ch, dst + cb * cols * eb, cols * K, t2 + g * chunk * eb, cols, rk, cols, eb));
            }
        } else {
            /* src (rows/K, cols·K): col block cb(g) to g; dst (rows, cols): g's rows at row block rb(g) */
            for (int g = 0; g < K; g++) {
                int cb = sp_lower_axes_index(ch->l, members[g], co->col_axes);
                SP_CHECK(copy_block(ch, t1 + g * chunk * eb, cols, src + cb * cols * eb, cols * K, rk, cols, eb));
            }
            SP_CHECK(ch->ops->sync(&ch->dev));
            st = sp_comm_alltoall(ch->c, mask, t1, t2, (size_t)chunk, co->dtype);
            if (st) return st;
            for (int g = 0; g < K; g++) {
                int rb = sp_lower_axes_index(ch->l, members[g], co->row_axes);
                SP_CHECK(copy_flat(ch, dst + rb * chunk * eb, t2 + g * chunk * eb, chunk, eb));
            }
        }
        break;
    }
    default: return spi_fail(SP_EINVAL, "collective kind %d", (int)co->kind);
    }
    return st;
}

static int peer_stage(const chip *ch, int stage)
{
    int c[SP_AXIS_COUNT];
    memcpy(c, ch->coords, sizeof c);
    c[SP_AXIS_STAGE] = stage;
    return sp_mesh_rank(&ch->ex->mesh, c);
}

/* ---- attention helpers --------------------------------------------------------- */
/* first KV head of a chip whose q heads start at h0 and that keeps nkv KV heads */
static int64_t kv_first(const sp_model *m, int64_t h0, int64_t nkv)
{
    if (nkv >= m->n_kv_heads) return 0;
    int64_t grp = m->n_heads / m->n_kv_heads;
    int64_t h = h0 < m->n_heads ? h0 : m->n_heads - 1;
    int64_t f = h / grp;
    if (f + nkv > m->n_kv_heads) f = m->n_kv_heads - nkv;
    return f;
}

static sp_status rope_rows(chip *ch, float *x, int64_t B, int64_t Lq, int64_t nh, int64_t pos0)
{
    if (ch->m->positions != SP_POS_ROPE) return SP_OK;
    for (int64_t r = 0; r < B * Lq; r++) ch->pos[r] = pos0 + r % Lq;
    return ch->ops->rope(&ch->dev, x, B * Lq, nh, ch->m->d_head, ch->pos, ch->m->rope_theta);
}

static sp_kern_kv cache_view(chip *ch, int mb)
{
    const sp_program *p = ch->prog;
    sp_kern_kv kv;
    int eb = sp_dtype_bytes(ch->l->kv);
    size_t off = (size_t)((ch->li * ch->kv_layer_elems + mb * ch->kv_mb_elems) * eb);
    kv.dt = ch->l->kv;
    kv.k = (char *)ch->kc + off;
    kv.v = (char *)ch->vc + off;
    kv.B = p->kv_seqs;
    kv.ctx_max = ch->ctx_max;
    kv.KVHl = p->kv_heads_cache;
    kv.D = ch->m->d_head;
    return kv;
}

static sp_status run_kv_store(chip *ch, const sp_step *s, int mb)
{
    const sp_model *m = ch->m;
    int64_t D = m->d_head, Bq = s->batch, Lq = s->q_len, kvs = s->kv_heads_src, kvc = s->kv_heads;
    if (Bq != ch->prog->kv_seqs)
        return spi_fail(SP_EINVAL, "kv-store of %lld sequences into a cache of %lld", (long long)Bq,
                        (long long)ch->prog->kv_seqs);
    int64_t off = 0;
    if (kvs != kvc) {
        int na = asize(ch, s->axes);
        int64_t h0 = (int64_t)aidx(ch, s->axes) * (ch->prog->heads_padded / na);
        off = kv_first(m, h0, kvc);
    }
    const float *k = ch->buf[s->src2], *v = ch->buf[s->src3];
    /* the cached heads [off, off + kvc) of every row of k, v (Bq·Lq, kvs, D) */
    SP_CHECK(copy_block(ch, ch->ks, kvc * D, k + off * D, kvs * D, Bq * Lq, kvc * D, 4));
    SP_CHECK(copy_block(ch, ch->vs, kvc * D, v + off * D, kvs * D, Bq * Lq, kvc * D, 4));
    SP_CHECK(rope_rows(ch, ch->ks, Bq, Lq, kvc, s->pos0));
    sp_kern_kv kv = cache_view(ch, mb);
    return ch->ops->kv_append(&ch->dev, &kv, ch->ks, ch->vs, Lq, s->pos0);
}

static sp_status run_attn(chip *ch, const sp_step *s, int mb)
{
    const sp_model *m = ch->m;
    int64_t D = m->d_head, Bq = s->batch, Lq = s->q_len, Hl = s->heads, H = m->n_heads;
    int64_t h0 = (int64_t)aidx(ch, s->axes) * Hl;
    int64_t Hr = H - h0 < Hl ? H - h0 : Hl;
    if (Hr < 0) Hr = 0;
    float *out = ch->buf[s->dst];
    SP_CHECK(copy_flat(ch, ch->qs, ch->buf[s->src], Bq * Lq * Hl * D, 4));
    SP_CHECK(rope_rows(ch, ch->qs, Bq, Lq, Hl, s->pos0));
    sp_kern_kv kv;
    int64_t pos0 = s->pos0, kv0;
    if (s->from_cache) {
        if (Bq != ch->prog->kv_seqs)
            return spi_fail(SP_EINVAL, "attention over %lld sequences, cache holds %lld", (long long)Bq,
                            (long long)ch->prog->kv_seqs);
        kv = cache_view(ch, mb);
        kv0 = kv_first(m, h0, kv.KVHl);
    } else {
        if (s->pos0 != 0) return spi_fail(SP_ENOTSUP, "prefill from position %lld (chunked prefill)", (long long)s->pos0);
        int64_t kvs = s->kv_heads_src;
        SP_CHECK(copy_flat(ch, ch->ks, ch->buf[s->src2], Bq * Lq * kvs * D, 4));
        SP_CHECK(rope_rows(ch, ch->ks, Bq, Lq, kvs, 0));
        kv.dt = SP_DT_F32;
        kv.k = ch->ks;
        kv.v = ch->buf[s->src3];
        kv.B = Bq;
        kv.ctx_max = Lq;
        kv.KVHl = kvs;
        kv.D = D;
        kv0 = kv_first(m, h0, kvs);
    }
    if (Hr == Hl) {
        /* the query heads of a chip are contiguous: compute in place of the copy's layout */
        return ch->ops->attention(&ch->dev, out, ch->qs, &kv, Lq, pos0, H, m->n_kv_heads, h0, Hl, kv0);
    }
    /* padded heads: compute the real ones densely, then spread */
    SP_CHECK(ch->ops->zero(&ch->dev, out, (size_t)(Bq * Lq * Hl * D) * 4));
    if (Hr == 0) return SP_OK;
    float *qd = ch->vs, *od = ch->ks == kv.k ? NULL : ch->ks;
    if (!od) return spi_fail(SP_ENOTSUP, "padded query heads in prefill attention");
    SP_CHECK(copy_block(ch, qd, Hr * D, ch->qs, Hl * D, Bq * Lq, Hr * D, 4));
    SP_CHECK(ch->ops->attention(&ch->dev, od, qd, &kv, Lq, pos0, H, m->n_kv_heads, h0, Hr, kv0));
    return copy_block(ch, out, Hl * D, od, Hr * D, Bq * Lq, Hr * D, 4);
}

/* ---- one step ----------------------------------------------------------------- */
static sp_status run_slice(chip *ch, const sp_step *s)
{
    const float *src = ch->buf[s->src];
    float *dst = ch->buf[s->dst];
    int64_t n = s->n, every = s->every > 1 ? s->every : 1, vrows = s->k / every;
    /* visible row j of src (every `every`-th row, the last of each group); rows of dst follow on */
#define VROW(j) (src + ((j) * every + every - 1) * n)
    if (!s->batch_axes[0] && !s->axes[0]) return copy_block(ch, dst, n, VROW(0), every * n, s->m, n, 4);
    const char *seq = s->batch_axes[0] ? s->batch_axes : s->axes;
    int nb = asize(ch, seq);
    int64_t rb = vrows / nb, out = 0;
    for (int b = 0; b < nb; b++) {
        if (!block_matches(ch, seq, b, s->axes)) continue;
        if (out + rb > s->m) return spi_fail(SP_EINVAL, "slice keeps more than %lld rows", (long long)s->m);
        SP_CHECK(copy_block(ch, dst + out * n, n, VROW(b * rb), every * n, rb, n, 4));
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
        int64_t Vl = ws->local_rows, v0 = (int64_t)aidx(ch, s->axes) * Vl;
        sp_kern_wview tv = {ws->dtype, ch->wt[SP_W_EMBED], m->d_model, NULL};
        return ch->ops->embed(&ch->dev, ch->buf[s->dst], ch->in_tok, s->m, &tv, v0, Vl, 0, s->n);
    }
    case SP_STEP_POS: {
        int64_t e0 = (int64_t)aidx(ch, s->axes) * s->n;
        for (int64_t r = 0; r < s->m; r++) ch->pos[r] = s->pos0 + r % s->q_len;
        sp_kern_wview tv = {p->wspec[SP_W_POS].dtype, ch->wt[SP_W_POS], m->d_model, NULL};
        return ch->ops->pos_add(&ch->dev, ch->buf[s->dst], s->m, s->n, &tv, e0, ch->pos);
    }
    case SP_STEP_NORM_STATS: return ch->ops->norm_stats(&ch->dev, ch->buf[s->src], s->m, s->n, ch->buf[s->dst]);
    case SP_STEP_NORM_APPLY: {
        const float *g, *b;
        norm_of(ch, s->weight, &g, &b);
        int64_t e0 = (int64_t)aidx(ch, s->axes) * s->n;
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
        } else {
            if (ws->local_rows != s->k || ws->local_cols != s->n)
                return spi_fail(SP_EINVAL, "matmul %s: step (%lld, %lld) vs shard (%lld, %lld)",
                                sp_weight_name(s->weight), (long long)s->k, (long long)s->n,
                                (long long)ws->local_rows, (long long)ws->local_cols);
            v.data = ch->lw[ch->li * SP_W_COUNT + s->weight];
            v.ld = ws->local_cols;
        }
        if (v.dt == SP_DT_INT8 || v.dt == SP_DT_FP8) SP_CHECK(matmul_scales(ch, s, ws, &v.scale));
        return ch->ops->matmul(&ch->dev, ch->buf[s->dst], ch->buf[s->src], &v, s->m, s->k, s->n,
                               s->accumulate ? SP_KERN_ACCUMULATE : SP_KERN_OVERWRITE);
    }
    case SP_STEP_BIAS: {
        int64_t len;
        const float *b = bias_of(ch, s->weight, &len);
        if (!b) return SP_OK;
        int64_t c0 = (int64_t)aidx(ch, s->axes) * s->n;
        if (c0 >= len) return SP_OK;   /* padded columns only */
        return ch->ops->bias_add(&ch->dev, ch->buf[s->dst], b + c0, s->m, s->n, len - c0);
    }
    case SP_STEP_ACT:
        if (s->src2) return ch->ops->swiglu(&ch->dev, ch->buf[s->dst], ch->buf[s->src], ch->buf[s->src2], s->m * s->n);
        return ch->ops->gelu(&ch->dev, ch->buf[s->dst], ch->buf[s->src], s->m * s->n);
    case SP_STEP_ATTN: return run_attn(ch, s, mb);
    case SP_STEP_KV_STORE: return run_kv_store(ch, s, mb);
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
        sp_comm_counters a, b;
        SP_CHECK(sp_comm_stats(ch->c, &a));
        sp_status st;
        if (s->kind != SP_STEP_COLL) SP_CHECK(ch->ops->sync(&ch->dev));   /* run_coll syncs after packing */
        if (s->kind == SP_STEP_COLL) st = run_coll(ch, s);
        else if (s->kind == SP_STEP_SEND)
            st = sp_comm_send(ch->c, peer_stage(ch, ch->stage + 1), ch->buf[s->src], (size_t)s->coll.elems,
                              s->coll.dtype);
        else
            st = sp_comm_recv(ch->c, peer_stage(ch, ch->stage - 1), ch->buf[s->dst], (size_t)s->coll.elems,
                              s->coll.dtype);
        if (st) return st;
        SP_CHECK(sp_comm_stats(ch->c, &b));
        return check_bytes(ch, s, &a, &b, s->coll.kind);
    }
    default: return spi_fail(SP_EINVAL, "step kind %d", (int)s->kind);
    }
}

static sp_status run_steps(chip *ch, const sp_steps *ss, int mb)
{
    for (int i = 0; i < ss->n; i++) {
        sp_status st = run_step(ch, &ss->s[i], mb);
        if (st)
            return spi_fail(st, "chip %d %s step %d (%s): %s", ch->rank, sp_phase_name(ch->prog->phase), i,
                            sp_step_kind_name(ss->s[i].kind), sp_last_error());
    }
    return SP_OK;
}

/* ---- per-chip setup and main loop ------------------------------------------------ */
static sp_shape shape_of(const sp_exec *ex, int decode, int64_t step)
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

static sp_status chip_setup(chip *ch)
{
    sp_exec *ex = ch->ex;
    sp_shape sp = shape_of(ex, 0, 0), sd = shape_of(ex, 1, ex->G);
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
            SP_CHECK(build_shard(ch, &pf->wspec[w], first + li, &ch->lw[li * SP_W_COUNT + w],
                                 &ch->lscale[li * SP_W_COUNT + w]));
    }
    if (ch->m->bias) {
        if (!(ch->lb = calloc((size_t)(cnt * SP_W_COUNT), sizeof *ch->lb))) return spi_fail(SP_ENOMEM, "biases");
        for (int w = SP_W_Q; w <= SP_W_OUT; w++)
            for (int64_t li = 0; pf->wspec[w].present && li < cnt; li++) {
                int64_t len;
                const float *g = global_bias(ch, first + li, w, &len);
                if (!g) continue;
                float *b = malloc((size_t)len * sizeof *b);
                if (!b) return spi_fail(SP_ENOMEM, "biases");
                memcpy(b, g, (size_t)len * sizeof *b);
                ch->lb[li * SP_W_COUNT + w] = b;
                ch->alloc_weights += len * (int64_t)sizeof *b;
                SP_CHECK(to_device(ch, (void **)&ch->lb[li * SP_W_COUNT + w], (size_t)len * sizeof *b));
            }
    }
    int64_t maxc = 1;
    for (int w = SP_W_Q; w <= SP_W_OUT; w++)
        if (pf->wspec[w].present && pf->wspec[w].cols > maxc) maxc = pf->wspec[w].cols;
    if (o->alloc(d, (size_t)maxc * sizeof *ch->scl, (void **)&ch->scl)) return spi_fail(SP_ENOMEM, "scales: %s", sp_last_error());
    float *dummy = NULL;
    for (int w = SP_W_NORMF; w <= SP_W_POS; w++)
        if (pf->wspec[w].present) SP_CHECK(build_shard(ch, &pf->wspec[w], 0, &ch->wt[w], &dummy));
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

static void chip_teardown(chip *ch)
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

/* ---- host data through the communicator -------------------------------------------
 * The token hand-off and the result exchange move host data; where the
 * communicator moves device memory (NCCL) it goes through a device buffer.
 * Bytes are counted (4-byte elements, as the programs' hand-off) either way. */
static sp_status send_host(chip *ch, int peer, const void *buf, size_t bytes)
{
    if (ch->ops->host_memory) return sp_comm_send(ch->c, peer, buf, bytes / 4, SP_DT_F32);
    SP_CHECK(ch->ops->upload(&ch->dev, ch->dtok, buf, bytes));
    SP_CHECK(ch->ops->sync(&ch->dev));
    return sp_comm_send(ch->c, peer, ch->dtok, bytes / 4, SP_DT_F32);
}

static sp_status recv_host(chip *ch, int peer, void *buf, size_t bytes)
{
    if (ch->ops->host_memory) return sp_comm_recv(ch->c, peer, buf, bytes / 4, SP_DT_F32);
    SP_CHECK(sp_comm_recv(ch->c, peer, ch->dtok, bytes / 4, SP_DT_F32));
    return ch->ops->download(&ch->dev, buf, ch->dtok, bytes);
}

/* all-gather of blk bytes per chip over every chip */
static sp_status allgather_host(chip *ch, const void *send, void *recv, size_t blk)
{
    if (ch->ops->host_memory) return sp_comm_allgather(ch->c, SP_AXES_ALL, send, recv, blk, SP_DT_INT8);
    size_t n = (size_t)ch->ex->nchips;
    void *ds = NULL, *dr = NULL;
    sp_status st = ch->ops->alloc(&ch->dev, blk, &ds);
    if (!st) st = ch->ops->alloc(&ch->dev, blk * n, &dr);
    if (!st) st = ch->ops->upload(&ch->dev, ds, send, blk);
    if (!st) st = ch->ops->sync(&ch->dev);
    if (!st) st = sp_comm_allgather(ch->c, SP_AXES_ALL, ds, dr, blk, SP_DT_INT8);
    if (!st) st = ch->ops->download(&ch->dev, recv, dr, blk * n);
    ch->ops->release(&ch->dev, ds);
    ch->ops->release(&ch->dev, dr);
    return st;
}

/* ---- results across processes (MPI: one chip per process) -----------------------
 * Every chip contributes its statistics and its replica's rows of the tokens
 * and last logits (meaningful on the writer chips: last stage, x = y = z = 0);
 * an all-gather over the whole mesh gives every process the job's totals and
 * every sequence.  Bytes moved here are not part of any program step. */
typedef struct xstats {
    uint64_t meas[SP_COLL_COUNT], pred[SP_COLL_COUNT], measr[SP_COLL_COUNT], predr[SP_COLL_COUNT];
    uint64_t token_bytes;
    int64_t comm_steps, mismatches;
    double prefill_s, decode_step_s, tokens_per_s;
    char first_mismatch[256];
} xstats;

static void chip_xstats(const chip *ch, xstats *x)
{
    memset(x, 0, sizeof *x);
    memcpy(x->meas, ch->meas, sizeof x->meas);
    memcpy(x->pred, ch->pred, sizeof x->pred);
    memcpy(x->measr, ch->measr, sizeof x->measr);
    memcpy(x->predr, ch->predr, sizeof x->predr);
    x->token_bytes = ch->token_bytes;
    x->comm_steps = ch->comm_steps;
    x->mismatches = ch->mismatches;
    x->prefill_s = ch->prefill_s;
    x->decode_step_s = ch->decode_step_s;
    x->tokens_per_s = ch->tokens_per_s;
    memcpy(x->first_mismatch, ch->first_mismatch, sizeof x->first_mismatch);
}

/* adds chip totals x into st (the first mismatch text from the lowest rank) */
static void add_xstats(sp_exec_stats *st, const xstats *x, int rank)
{
    for (int k = 0; k < SP_COLL_COUNT; k++) {
        st->measured_bytes[k] += x->meas[k];
        st->predicted_bytes[k] += x->pred[k];
        st->measured_recv[k] += x->measr[k];
        st->predicted_recv[k] += x->predr[k];
    }
    st->token_bytes += x->token_bytes;
    st->comm_steps += x->comm_steps;
    if (x->mismatches && !st->mismatches)
        snprintf(st->first_mismatch, sizeof st->first_mismatch, "%s", x->first_mismatch);
    st->mismatches += x->mismatches;
    if (rank == 0) {
        st->prefill_s = x->prefill_s;
        st->decode_step_s = x->decode_step_s;
        st->tokens_per_s = x->tokens_per_s;
    }
}

static int is_writer(const sp_exec *ex, const int *c)
{
    return c[SP_AXIS_STAGE] == ex->l.stages - 1 && c[SP_AXIS_X] == 0 && c[SP_AXIS_Y] == 0 && c[SP_AXIS_Z] == 0;
}

static sp_status exchange_results(chip *ch, int64_t Br, int64_t base)
{
    sp_exec *ex = ch->ex;
    int n = ex->nchips;
    int64_t G = ex->G, V = ch->m->vocab, nl = ex->last_logits ? Br * V : 0;
    size_t blk = sizeof(xstats) + (size_t)(Br * G) * sizeof(int32_t) + (size_t)nl * sizeof(float);
    blk = (blk + 7) & ~(size_t)7;
    char *send = calloc(1, blk), *recv = malloc(blk * (size_t)n);
    int *members = malloc((size_t)n * sizeof *members);
    sp_status st = SP_OK;
    if (!send || !recv || !members) st = spi_fail(SP_ENOMEM, "result exchange");
    if (!st) {
        xstats x;
        chip_xstats(ch, &x);
        memcpy(send, &x, sizeof x);
        memcpy(send + sizeof x, ex->tokens + base * G, (size_t)(Br * G) * sizeof(int32_t));
        if (nl) memcpy(send + sizeof x + (size_t)(Br * G) * 4, ex->last_logits + base * V, (size_t)nl * sizeof(float));
        st = allgather_host(ch, send, recv, blk);
    }
    if (!st) {
        sp_mesh_group_members(&ex->mesh, ch->rank, SP_AXES_ALL, members);
        sp_exec_stats tot;
        memset(&tot, 0, sizeof tot);
        for (int g = 0; g < n; g++) {
            const char *b = recv + (size_t)g * blk;
            xstats x;
            memcpy(&x, b, sizeof x);
            add_xstats(&tot, &x, members[g]);
            int c[SP_AXIS_COUNT];
            sp_mesh_coords(&ex->mesh, members[g], c);
            if (!is_writer(ex, c) || (members[g] >= ex->local_first && members[g] < ex->local_first + ex->local_count))
                continue;
            int64_t rb = c[SP_AXIS_REPLICA] * Br;
            memcpy(ex->tokens + rb * G, b + sizeof x, (size_t)(Br * G) * sizeof(int32_t));
            if (nl) memcpy(ex->last_logits + rb * V, b + sizeof x + (size_t)(Br * G) * 4, (size_t)nl * sizeof(float));
        }
        pthread_mutex_lock(&ex->mu);
        ex->st = tot;
        pthread_mutex_unlock(&ex->mu);
    }
    free(send);
    free(recv);
    free(members);
    return st;
}

static sp_status chip_run(chip *ch)
{
    sp_exec *ex = ch->ex;
    const sp_layout *l = ch->l;
    SP_CHECK(sp_comm_open(ex->world, ch->rank, &ch->c));
    SP_CHECK(chip_setup(ch));
    int64_t Br = ex->B / l->replicas, base = ch->replica * Br, mbs = ch->pf->micro_batch;
    int64_t V = ch->m->vocab, Vp = ch->pf->vocab_padded, P = ex->P, G = ex->G;
    int last = ch->stage == l->stages - 1;
    int writer = last && ch->coords[SP_AXIS_X] == 0 && ch->coords[SP_AXIS_Y] == 0 && ch->coords[SP_AXIS_Z] == 0;
    int32_t *cur = calloc((size_t)Br, sizeof *cur);
    int32_t *in = malloc((size_t)(mbs * P) * sizeof *in);
    uint64_t *rng = calloc((size_t)Br, sizeof *rng);
    sp_program *dstep = malloc(sizeof *dstep);
    sp_status st = SP_OK;
    if (!cur || !in || !rng || !dstep) st = spi_fail(SP_ENOMEM, "run state");
    for (int64_t b = 0; b < Br && !st; b++) rng[b] = ex->samp.seed + (uint64_t)(base + b);
    double t0 = 0, t1 = 0;
    if (!st) st = sp_comm_barrier(ch->c, SP_AXES_ALL);
    if (ch->rank == 0) t0 = now_s();
    for (int64_t s = 0; s < G && !st; s++) {
        if (s == 0) ch->prog = ch->pf;
        else {
            sp_shape sh = shape_of(ex, 1, s);
            if ((st = sp_lower(ch->m, l, SP_PHASE_DECODE, &sh, ch->stage, dstep))) break;
            ch->prog = dstep;
        }
        const sp_program *p = ch->prog;
        int64_t L = p->shape.q_len;
        for (int mb = 0; mb < l->microbatches && !st; mb++) {
            int64_t r0 = (int64_t)mb * mbs;
            for (int64_t b = 0; b < mbs; b++)
                for (int64_t t = 0; t < L; t++)
                    in[b * L + t] = s == 0 ? ex->prompt[(base + r0 + b) * P + t] : cur[r0 + b];
            ch->in_tok = in;
            if ((st = run_steps(ch, &p->pre, mb))) break;
            for (ch->li = 0; ch->li < p->n_layers && !st; ch->li++) st = run_steps(ch, &p->layer, mb);
            if (st) break;
            ch->li = p->n_layers - 1;
            if ((st = run_steps(ch, &p->post, mb))) break;
            if (!last) continue;
            const float *lg = ch->buf[sp_layout_chips(l) / (l->stages * l->replicas) > 1 ? SP_BUF_LOGITS_ALL
                                                                                          : SP_BUF_LOGITS];
            for (int64_t b = 0; b < mbs && !st; b++) {
                const float *row = lg + b * Vp;   /* on the device */
                int keep = writer && s == G - 1 && ex->last_logits;
                int32_t tok = 0;
                if ((!ex->greedy || keep) && !ch->ops->host_memory) {
                    /* sampling and the kept logits read the row on the host */
                    if ((st = ch->ops->download(&ch->dev, ch->hrow, row, (size_t)V * sizeof(float)))) break;
                    row = ch->hrow;
                }
                if (ex->greedy) st = ch->ops->argmax(&ch->dev, lg + b * Vp, V, &tok);
                else st = sp_kern_sample(row, V, &ex->samp, &rng[r0 + b], ch->sm_scr, ch->sm_bytes, &tok);
                cur[r0 + b] = tok;
                if (writer) {
                    ex->tokens[(base + r0 + b) * G + s] = tok;
                    if (keep) memcpy(ex->last_logits + (base + r0 + b) * V, row, (size_t)V * sizeof(float));
                }
            }
        }
        if (st) break;
        if (last && l->stages > 1 && s < G - 1) {
            sp_comm_counters a, b;
            sp_comm_stats(ch->c, &a);
            if ((st = send_host(ch, peer_stage(ch, 0), cur, (size_t)Br * sizeof *cur))) break;
            sp_comm_stats(ch->c, &b);
            ch->token_bytes += b.bytes_sent[SP_COLL_SENDRECV] - a.bytes_sent[SP_COLL_SENDRECV];
        }
        if (s < G - 1 && ch->stage == 0 && l->stages > 1) {
            sp_comm_counters a, b;
            sp_comm_stats(ch->c, &a);
            if ((st = recv_host(ch, peer_stage(ch, l->stages - 1), cur, (size_t)Br * sizeof *cur))) break;
            sp_comm_stats(ch->c, &b);
            ch->token_bytes += b.bytes_recv[SP_COLL_SENDRECV] - a.bytes_recv[SP_COLL_SENDRECV];
        }
        if ((st = sp_comm_barrier(ch->c, SP_AXES_ALL))) break;
        if (s == 0 && ch->rank == 0) t1 = now_s();
    }
    if (!st && ch->rank == 0) {
        double t2 = now_s();
        ch->prefill_s = t1 - t0;
        ch->decode_step_s = G > 1 ? (t2 - t1) / (double)(G - 1) : 0;
        ch->tokens_per_s = t2 > t0 ? (double)(ex->B * G) / (t2 - t0) : 0;
    }
    if (!st && ex->local_count < ex->nchips) st = exchange_results(ch, Br, base);
    free(cur);
    free(in);
    free(rng);
    free(dstep);
    return st;
}

static void *chip_thread(void *arg)
{
    chip *ch = arg;
    sp_exec *ex = ch->ex;
    sp_status st = chip_run(ch);
    pthread_mutex_lock(&ex->mu);
    if (st && !ex->err) {
        ex->err = st;
        snprintf(ex->errmsg, sizeof ex->errmsg, "%s", sp_last_error());
    }
    if (ex->local_count == ex->nchips) {
        /* every chip is here: sum in place */
        xstats x;
        chip_xstats(ch, &x);
        add_xstats(&ex->st, &x, ch->rank);
    }
    pthread_mutex_unlock(&ex->mu);
    if (st) sp_comm_abort(ex->world, sp_last_error());
    sp_comm_close(ch->c);
    ch->c = NULL;
    chip_teardown(ch);
    return NULL;
}

/* ---- public ------------------------------------------------------------------ */
sp_status sp_exec_build(const sp_model *m, const sp_layout *l, int64_t batch, int64_t prompt, int64_t gen,
                        const sp_weights *w, sp_comm_backend backend, sp_exec **out)
{
    if (!m || !l || !w || !out) return spi_fail(SP_EINVAL, "sp_exec_build: bad arguments");
    *out = NULL;
    if (batch < 1 || prompt < 1 || gen < 1)
        return spi_fail(SP_EINVAL, "batch %lld, prompt %lld, gen %lld must be >= 1", (long long)batch,
                        (long long)prompt, (long long)gen);
    if (prompt + gen > m->max_context)
        return spi_fail(SP_EINVAL, "prompt + gen = %lld exceeds the model's context %lld", (long long)(prompt + gen),
                        (long long)m->max_context);
    const spi_xops *ops = &spi_xops_cpu;
    if (backend == SP_COMM_BACKEND_NCCL) {
        /* GPUs: buffers in device memory, moved by NCCL */
        if (!(ops = spi_xops_cuda()))
            return spi_fail(SP_ENOTSUP, "the CUDA executor is not in this build: reconfigure with --with-cuda=DIR "
                                        "(needs nvcc, cuBLAS, NCCL and MPI)");
    } else if (backend != SP_COMM_BACKEND_THREADS && backend != SP_COMM_BACKEND_MPI) {
        return spi_fail(SP_EINVAL, "unknown communicator backend %d", (int)backend);
    }
    if (l->weights != SP_DT_F32 && l->weights != SP_DT_BF16 && l->weights != SP_DT_F16 && l->weights != SP_DT_INT8 &&
        l->weights != SP_DT_FP8)
        return spi_fail(SP_ENOTSUP, "weights dtype %s", sp_dtype_name(l->weights));
    if (l->kv != SP_DT_F32 && l->kv != SP_DT_BF16)
        return spi_fail(SP_ENOTSUP, "KV cache dtype %s (the executor keeps f32 or bf16)", sp_dtype_name(l->kv));
    if (l->stages > 1 && l->microbatches < 1) return spi_fail(SP_EINVAL, "micro-batches");
    sp_program *p = malloc(sizeof *p);
    if (!p) return spi_fail(SP_ENOMEM, "program");
    sp_status st = SP_OK;
    for (int s = 0; s < l->stages && !st; s++) {
        sp_shape sh = {batch, prompt, prompt, prompt + gen, SP_DT_F32};
        st = sp_lower(m, l, SP_PHASE_PREFILL, &sh, s, p);
        sp_shape sd = {batch, 1, prompt + gen, prompt + gen, SP_DT_F32};
        if (!st) st = sp_lower(m, l, SP_PHASE_DECODE, &sd, s, p);
    }
    free(p);
    if (st) return st;
    sp_exec *ex = calloc(1, sizeof *ex);
    if (!ex) return spi_fail(SP_ENOMEM, "executor");
    ex->m = *m;
    ex->l = *l;
    ex->B = batch;
    ex->P = prompt;
    ex->G = gen;
    ex->w = w;
    sp_layout_mesh(l, &ex->mesh);
    ex->nchips = sp_mesh_size(&ex->mesh);
    pthread_mutex_init(&ex->mu, NULL);
    ex->backend = backend;
    ex->ops = ops;
    st = sp_comm_world_create(backend, &ex->mesh, &ex->world);
    if (!st) st = sp_comm_world_local_ranks(ex->world, &ex->local_first, &ex->local_count);
    if (st) {
        sp_exec_free(ex);
        return st;
    }
    *out = ex;
    return SP_OK;
}

void sp_exec_free(sp_exec *ex)
{
    if (!ex) return;
    sp_comm_world_free(ex->world);
    pthread_mutex_destroy(&ex->mu);
    free(ex);
}

sp_status sp_exec_run(sp_exec *ex, const int32_t *prompt, const sp_kern_sample_opts *sample, int32_t *tokens,
                      float *last_logits, sp_exec_stats *stats)
{
    if (!ex || !prompt || !tokens) return spi_fail(SP_EINVAL, "sp_exec_run: bad arguments");
    if (sp_comm_world_aborted(ex->world, NULL, 0))
        return spi_fail(SP_ECOMM, "sp_exec_run: the communicator was aborted by an earlier run");
    ex->prompt = prompt;
    if (sample) ex->samp = *sample;
    else sp_kern_sample_opts_init(&ex->samp);
    ex->greedy = ex->samp.temperature <= 0;
    ex->tokens = tokens;
    ex->last_logits = last_logits;
    memset(&ex->st, 0, sizeof ex->st);
    ex->err = SP_OK;
    ex->errmsg[0] = '\0';
    int n = ex->local_count;
    chip *chips = calloc((size_t)n, sizeof *chips);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    if (!chips || !th) {
        free(chips);
        free(th);
        return spi_fail(SP_ENOMEM, "threads");
    }
    sp_kern_set_blas_threads(1);
    int started = 0;
    for (int i = 0; i < n; i++) {
        chip *ch = &chips[i];
        int r = ex->local_first + i;
        ch->ex = ex;
        ch->m = &ex->m;
        ch->l = &ex->l;
        ch->rank = r;
        sp_mesh_coords(&ex->mesh, r, ch->coords);
        ch->stage = ch->coords[SP_AXIS_STAGE];
        ch->replica = ch->coords[SP_AXIS_REPLICA];
        if (pthread_create(&th[i], NULL, chip_thread, ch)) {
            sp_comm_abort(ex->world, "thread creation failed");
            if (!ex->err) {
                ex->err = SP_ENOMEM;
                snprintf(ex->errmsg, sizeof ex->errmsg, "pthread_create failed");
            }
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
    free(chips);
    free(th);
    if (stats) *stats = ex->st;
    if (ex->err) return spi_fail(ex->err, "%s", ex->errmsg);
    return SP_OK;
}
