/*
 * lower.c: layout × phase × shapes → per-chip program (see sp_lower.h).
 *
 * Glossary: T rows of this chip (sequences × tokens), E d_model, F d_ff
 * (padded Fp), H query heads (padded Hp), KVH key/value heads, D d_head,
 * V vocab (padded Vp), n = X·Y·Z.
 *
 * K/V projections.  Case A (KVH % n == 0): K/V weights are sharded exactly
 * like Q's and follow Q through every collective.  Case B (otherwise, e.g.
 * multiquery): K/V weights keep their rows split like Q's rows but all
 * KVH·D columns on every chip (replicated); head-sharded attention then
 * computes every KV head (all-reducing over Rx when the contraction is
 * split), and batch-sharded attention computes them for its own sequences
 * only.  The KV cache always has the decode phase's layout; prefill writes
 * it directly, or after the handoff step that moves its K/V to decode's
 * placement (kv_handoff): a local slice, an all-gather or an all-to-all over
 * the axes the two placements disagree on, once per layer, priced and
 * counted like every other step.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include "spi_common.h"
#include "sp_lower.h"
#include "spi_lower.h"
#include "spi_model.h"

static const char *const step_names[SP_STEP_COUNT] = {
    "embed", "pos", "norm-stats", "norm-apply", "matmul", "bias", "act", "attn",
    "add", "coll", "slice", "logits", "send", "recv", "kv-store", "route", "dispatch", "combine", "gate-scale",
    "host-load", "host-store", "host-wait"};
static const char *const buf_names[] = {
    "none", "x", "xg", "stats", "q", "k", "v", "qb", "kb", "vb", "att", "attb", "h", "h2",
    "hs", "hs2", "y", "y2", "last", "logits", "logits-all", "kvin", "kp", "vp",
    "qp", "attg", "emb", "xf", "rlog", "gate", "disp", "exp", "wstream", "kvstream"};
static const char *const scr_names[SP_SCR_COUNT] = {
    "pack", "pack2", "q", "k", "v", "scores", "pos", "scales", "sample", "tokens", "logits-row"};
_Static_assert(SPI_ARRAY_LEN(step_names) == SP_STEP_COUNT, "step names");
_Static_assert(SPI_ARRAY_LEN(buf_names) == SP_BUF_GATHERED, "buf names");
_Static_assert(SPI_ARRAY_LEN(scr_names) == SP_SCR_COUNT, "scratch names");

const char *sp_step_kind_name(sp_step_kind k) { return k < SP_STEP_COUNT ? step_names[k] : "?"; }
const char *sp_buf_name(sp_buf b)
{
    return b < SP_BUF_GATHERED ? buf_names[b]
           : b < SP_BUF_COUNT  ? sp_weight_name((sp_weight)(b - SP_BUF_GATHERED + SP_W_FIRST_LAYER))
                               : "?";
}
const char *sp_scr_name(sp_scr s) { return s < SP_SCR_COUNT ? scr_names[s] : "?"; }

static const char *const class_names[SP_CLASS_COUNT] = {
    "matmul", "attention", "all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send-recv", "other", "host-copy"};
_Static_assert(SPI_ARRAY_LEN(class_names) == SP_CLASS_COUNT, "class names");
_Static_assert(SP_CLASS_ALLGATHER + SP_COLL_ALLGATHER == SP_CLASS_ALLGATHER &&
                   SP_CLASS_ALLGATHER + SP_COLL_SENDRECV == SP_CLASS_SENDRECV &&
                   SP_CLASS_ALLGATHER + SP_COLL_COUNT == SP_CLASS_OTHER,
               "one class per collective kind, in sp_coll_kind's order");
const char *sp_step_class_name(sp_step_class c) { return (unsigned)c < SP_CLASS_COUNT ? class_names[c] : "?"; }

sp_step_class sp_step_class_of(const sp_step *s)
{
    switch (s->kind) {
    case SP_STEP_HOST_LOAD: case SP_STEP_HOST_STORE: return SP_CLASS_HOST;
    case SP_STEP_MATMUL: case SP_STEP_LOGITS: return SP_CLASS_MATMUL;
    case SP_STEP_ATTN: return SP_CLASS_ATTN;
    case SP_STEP_COLL: return (sp_step_class)(SP_CLASS_ALLGATHER + s->coll.kind);
    case SP_STEP_SEND: case SP_STEP_RECV: return SP_CLASS_SENDRECV;
    default: return SP_CLASS_OTHER;
    }
}
int sp_scr_host(sp_scr s)
{
    return s == SP_SCR_SCORES || s == SP_SCR_POS || s == SP_SCR_SAMPLE || s == SP_SCR_LOGITS_ROW;
}

/* ---- axis sequences ---- */
static int axis_dim(const sp_layout *l, char c)
{
    switch (c) {
    case 'x': return l->mesh[0];
    case 'y': return l->mesh[1];
    case 'z': return l->mesh[2];
    case 's': return l->stages;
    case 'r': return l->replicas;
    default: return 1;
    }
}

static inline int axes_size(const sp_layout *l, const char *axes)
{
    int n = 1;
    for (; *axes; axes++) n *= axis_dim(l, *axes);
    return n;
}

int sp_lower_axes_size(const sp_layout *l, const char *axes) { return axes_size(l, axes); }

/* the mesh axis an axis letter names */
static inline int axis_of(char a)
{
    return a == 'x' ? SP_AXIS_X : a == 'y' ? SP_AXIS_Y : a == 'z' ? SP_AXIS_Z : a == 's' ? SP_AXIS_STAGE
                                                                                           : SP_AXIS_REPLICA;
}

/* the mesh axes of an axis sequence as a set (SP_AXES_*) */
static inline unsigned mesh_mask(const char *axes)
{
    unsigned m = 0;
    for (; *axes; axes++) m |= 1u << axis_of(*axes);
    return m;
}

/* block index of coordinates c on an axis sequence (major first) */
static int coords_index(const sp_mesh *mesh, const int *c, const char *axes)
{
    int idx = 0;
    for (; *axes; axes++) idx = idx * mesh->dims[axis_of(*axes)] + c[axis_of(*axes)];
    return idx;
}

int sp_lower_axes_index(const sp_layout *l, int rank, const char *axes)
{
    sp_mesh mesh;
    int c[SP_AXIS_COUNT];
    sp_layout_mesh(l, &mesh);
    sp_mesh_coords(&mesh, rank, c);
    return coords_index(&mesh, c, axes);
}

/* tensor axes of a sequence as a bit set: bit 0 x, bit 1 y, bit 2 z */
static inline unsigned xyz_mask(const char *a)
{
    unsigned m = 0;
    for (; *a; a++)
        if (*a >= 'x' && *a <= 'z') m |= 1u << (*a - 'x');
    return m;
}
/* chips in the group of a tensor-axis set */
static inline int mask_size(const sp_layout *l, unsigned m)
{
    return (m & 1 ? l->mesh[0] : 1) * (m & 2 ? l->mesh[1] : 1) * (m & 4 ? l->mesh[2] : 1);
}
/* letters of a in canonical x, y, z order */
static void axes_sorted(const char *a, char *out)
{
    unsigned m = xyz_mask(a);
    int n = 0;
    for (int i = 0; i < 3; i++)
        if (m & (1u << i)) out[n++] = (char)('x' + i);
    out[n] = '\0';
}
/* letters of a that are (in) / are not (!in) in b, keeping a's order */
static void axes_filter(const char *a, const char *b, int in, char *out)
{
    unsigned mb = xyz_mask(b);
    int n = 0;
    for (; *a; a++)
        if (((mb >> (*a - 'x')) & 1) == (unsigned)in) out[n++] = *a;
    out[n] = '\0';
}

/* letters of a whose axes span more than one chip in l, keeping a's order */
static void axes_wide(const sp_layout *l, const char *a, char *out)
{
    int n = 0;
    for (; *a && n < SP_AXSEQ_MAX - 1; a++)
        if (axis_dim(l, *a) > 1) out[n++] = *a;
    out[n] = '\0';
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* copy / concatenate axis sequences (at most SP_AXSEQ_MAX-1 letters) */
static void axcpy(char *dst, const char *a)
{
    int n = 0;
    while (a[n] && n < SP_AXSEQ_MAX - 1) {
        dst[n] = a[n];
        n++;
    }
    dst[n] = '\0';
}
/* 1u << axis_of(a), by table: the letters' bits xor SP_AXES_REPLICA, so that every
 * other letter, 0 in the table, is the replica axis as axis_of has it */
static const unsigned char axis_bit_x[256] = {
    ['x'] = SP_AXES_X ^ SP_AXES_REPLICA, ['y'] = SP_AXES_Y ^ SP_AXES_REPLICA, ['z'] = SP_AXES_Z ^ SP_AXES_REPLICA,
    ['s'] = SP_AXES_STAGE ^ SP_AXES_REPLICA};
static inline unsigned axis_bit(char a) { return axis_bit_x[(unsigned char)a] ^ SP_AXES_REPLICA; }
/* axcpy, returning the sequence's mesh axes as a set (mesh_mask) */
static inline unsigned axcpy_mask(char *dst, const char *a)
{
    _Static_assert(SP_AXIS_COUNT <= 8, "an axis bit fits the table's bytes");
    unsigned m = 0;
    int n = 0;
    for (; *a; a++) {
        m |= axis_bit(*a);
        if (n < SP_AXSEQ_MAX - 1) dst[n++] = *a;
    }
    dst[n] = '\0';
    return m;
}
static void axcat(char *dst, const char *a, const char *b)
{
    int n = 0;
    for (; *a && n < SP_AXSEQ_MAX - 1; a++) dst[n++] = *a;
    for (; *b && n < SP_AXSEQ_MAX - 1; b++) dst[n++] = *b;
    dst[n] = '\0';
}

/* ---- per-phase sharding (table in sp_lower.h) ---- */
typedef struct shard {
    const char *N, *Rx, *C, *G, *act;   /* static strings of the table below */
    int nN, nRx, nC, nG, nact;
} shard;

static void phase_shard(const sp_layout *l, sp_ffn_layout f, shard *s)
{
    static const char *const tab[SP_FL_COUNT][5] = {
        /* N      Rx    C      G      act */
        {"", "", "xyz", "xyz", "xyz"},   /* ws1d */
        {"", "x", "zy", "zyx", "xzy"},   /* ws2d */
        {"x", "", "zy", "zy", "zy"},     /* wg-x */
        {"xy", "", "z", "z", "z"},       /* wg-xy */
        {"xyz", "", "", "", ""},         /* wg-xyz */
    };
    /* the same table as axis bit sets (x 1, y 2, z 4), for the sizes */
    static const unsigned char mtab[SP_FL_COUNT][5] = {
        {0, 0, 7, 7, 7}, {0, 1, 6, 7, 7}, {1, 0, 6, 6, 6}, {3, 0, 4, 4, 4}, {7, 0, 0, 0, 0},
    };
    s->N = tab[f][0];
    s->Rx = tab[f][1];
    s->C = tab[f][2];
    s->G = tab[f][3];
    s->act = tab[f][4];
    /* the sizes of the eight axis sets, made once for the five looked up */
    int sz[8];
    for (unsigned m = 0; m < 8; m++) sz[m] = mask_size(l, m);
    s->nN = sz[mtab[f][0]];
    s->nRx = sz[mtab[f][1]];
    s->nC = sz[mtab[f][2]];
    s->nG = sz[mtab[f][3]];
    s->nact = sz[mtab[f][4]];
}

/* ---- lowering context ---- */
typedef struct ctx {
    const sp_model *m;
    const sp_layout *l;
    sp_program *p;
    shard sh;          /* this phase */
    shard shd;         /* decode phase (KV cache layout) */
    int one_d;         /* storage is 1D */
    int case_a;        /* KV heads sharded like Q */
    int64_t E, D, Hp, KVH, Fp, Vp, n;
    int64_t Fsp;       /* the shared experts' hidden width (sp_model_shared_ff), padded like Fp; 0: none */
    int64_t Fdp;       /* the dense layers' FFN width between MoE layers (sp_model_dense_ff), padded; 0: none */
    int dense_layer;   /* emitting the dense layer of a model with MoE layers between dense ones */
    int64_t T;         /* rows of this chip between layers: (mb / |N|) * L */
    int64_t seqs;      /* sequences of this chip between layers: mb / |N| */
    int kv;            /* how prefill's K/V reach the cache (kv_mode) */
    char kv_rows[SP_AXSEQ_MAX], kv_cols[SP_AXSEQ_MAX];   /* the handoff's axes (kv_handoff) */
    int act_b;         /* bytes per activation element */
    int w_b;           /* bytes per weight element */
    /* MoE (n_experts > 0): experts held (NE / layout experts), slots per
     * expert per source chip, and the local experts expected to be chosen
     * by at least one token of a step (the mean over expert groups) */
    int64_t experts_local, slots;
    double experts_active;
    int w_any;         /* bit k: some stage of the layout streams weights of part k (sp_wkind) */
    spi_ckd ck;        /* the first size that overflowed int64 (checked where a shape multiplies) */
} ctx;

/* How prefill's K/V reach a KV cache laid out for decode (the handoff).
 * A phase's K/V placement: the sequences of the micro-batch split over the
 * axes `seq` (major first), the KV heads over the axes `head` (major first;
 * "" when every chip holds every KV head: batch-sharded attention, or KV
 * heads replicated, case B).  In the layout catalogue `seq` is always a
 * prefix of "xyz" (N, or N followed by the sorted head group for batch
 * attention, which is "xyz") and, in case A, `head` holds the remaining
 * axes, so two placements of one mesh differ by a set of axes D moving
 * between the two: */
typedef enum kv_mode {
    KV_DIRECT = 0,    /* same placement (and always in decode): nothing moves */
    KV_SLICE = 1,     /* decode splits sequences over more axes, every KV head here: keep decode's rows (local) */
    KV_A2A = 2,       /* decode splits sequences over D, prefill split heads over D: all-to-all over D, heads
                         gathered, sequences scattered */
    KV_GATHER = 3,    /* decode splits sequences over fewer axes, every KV head here: all-gather rows over D */
    KV_A2A_BACK = 4,  /* decode splits heads over D, prefill split sequences over D: all-to-all over D,
                         sequences gathered, heads scattered */
    KV_BAD = 5        /* placements that no one collective relates (none in the catalogue) */
} kv_mode;

typedef struct kv_place {
    char seq[SP_AXSEQ_MAX], head[SP_AXSEQ_MAX];
} kv_place;

/* the K/V placement of a phase with FFN sharding s and attention al; heads
 * are split (over G) only when KV heads are sharded like Q (case A) */
static void kv_place_of(const ctx *c, const shard *s, sp_attn_layout al, kv_place *out)
{
    if (al == SP_AL_BATCH) {
        char Gs[SP_AXSEQ_MAX];
        axes_sorted(s->G, Gs);
        axcat(out->seq, s->N, Gs);
        out->head[0] = '\0';
    } else {
        axcpy(out->seq, s->N);
        axcpy(out->head, c->case_a ? s->G : "");
    }
}

/* The collective that turns prefill's placement into decode's (ps: prefill's
 * FFN sharding, phase_shard, which setup has made already).  rows:
 * the axes D (in decode's sequence order, or prefill's when sequences
 * gather); cols: the same axes in the head order of the side that splits
 * heads over them (all-to-alls only). */
static kv_mode kv_handoff_of(const ctx *c, const shard *ps, char rows[SP_AXSEQ_MAX], char cols[SP_AXSEQ_MAX])
{
    const sp_layout *l = c->l;
    kv_place pf, dc;
    kv_place_of(c, ps, l->phase[SP_PHASE_PREFILL].attn, &pf);
    kv_place_of(c, &c->shd, l->phase[SP_PHASE_DECODE].attn, &dc);
    rows[0] = cols[0] = '\0';
    size_t np = strlen(pf.seq), nd = strlen(dc.seq);
    if (np == nd && !strcmp(pf.seq, dc.seq)) return !strcmp(pf.head, dc.head) ? KV_DIRECT : KV_BAD;
    int more = nd > np;   /* decode splits sequences over more axes */
    const kv_place *few = more ? &pf : &dc, *many = more ? &dc : &pf;
    size_t nf = strlen(few->seq);
    if (strncmp(many->seq, few->seq, nf)) return KV_BAD;
    axcpy(rows, many->seq + nf);
    /* the side with fewer sequence axes splits heads over D as its minor head axes, the rest as the other side's */
    size_t hf = strlen(few->head), hm = strlen(many->head);
    if (!hf && !hm) return more ? KV_SLICE : KV_GATHER;
    if (hf != hm + strlen(rows) || strncmp(few->head, many->head, hm) || xyz_mask(few->head + hm) != xyz_mask(rows))
        return KV_BAD;
    axcpy(cols, few->head + hm);
    return more ? KV_A2A : KV_A2A_BACK;
}

/* kv_handoff_of, memoised: its answer depends only on the two phases'
 * (FFN, attention) layouts and case A (the placements are axis strings of
 * the sharding table, whatever the mesh's sizes), 200 combinations; setup
 * asks for every layout a search tries (the string work was ~1 % of a
 * plan's instructions).  Each thread fills its own table as combinations
 * come. */
typedef struct kv_handoff_memo {
    unsigned char done, mode;
    char rows[SP_AXSEQ_MAX], cols[SP_AXSEQ_MAX];
} kv_handoff_memo;

static kv_mode kv_handoff(const ctx *c, const shard *ps, char rows[SP_AXSEQ_MAX], char cols[SP_AXSEQ_MAX])
{
    static _Thread_local kv_handoff_memo tab[SP_FL_COUNT][SP_AL_COUNT][SP_FL_COUNT][SP_AL_COUNT][2];
    const sp_phase_layout *pf = &c->l->phase[SP_PHASE_PREFILL], *dc = &c->l->phase[SP_PHASE_DECODE];
    if ((unsigned)pf->ffn >= SP_FL_COUNT || (unsigned)pf->attn >= SP_AL_COUNT || (unsigned)dc->ffn >= SP_FL_COUNT ||
        (unsigned)dc->attn >= SP_AL_COUNT)
        return kv_handoff_of(c, ps, rows, cols);
    kv_handoff_memo *e = &tab[pf->ffn][pf->attn][dc->ffn][dc->attn][c->case_a != 0];
    if (!e->done) {
        e->mode = (unsigned char)kv_handoff_of(c, ps, e->rows, e->cols);
        e->done = 1;
    }
    memcpy(rows, e->rows, SP_AXSEQ_MAX);
    memcpy(cols, e->cols, SP_AXSEQ_MAX);
    return (kv_mode)e->mode;
}

static sp_step *emit(sp_steps *ss, sp_step_kind k)
{
    sp_step *s = &ss->s[ss->n++];
    memset(s, 0, sizeof *s);
    s->kind = k;
    return s;
}

/* A collective step.  rows × cols is this chip's block as described in sp_coll. */
static sp_step *emit_coll(ctx *c, sp_steps *ss, sp_coll_kind kind, sp_buf dst, sp_buf src, const char *row_axes,
                          const char *col_axes, int64_t rows, int64_t cols, sp_dtype dt, int is_weight)
{
    /* the group is the set of axes in either sequence (all-to-all names the
     * same axes twice: once for the batch order, once for the head order);
     * its tensor axes x, y, z are the mesh set's bits SP_AXIS_X.. (sp_mesh.h) */
    _Static_assert(SP_AXIS_Y == SP_AXIS_X + 1 && SP_AXIS_Z == SP_AXIS_X + 2, "x, y, z are consecutive mesh axes");
    char ra[SP_AXSEQ_MAX] = {0}, ca[SP_AXSEQ_MAX] = {0};   /* zero past the letters, as emit leaves a step */
    unsigned mask = axcpy_mask(ra, row_axes) | axcpy_mask(ca, col_axes);
    int K = mask_size(c->l, (mask >> SP_AXIS_X) & 7u);
    if (K <= 1) return NULL;     /* a group of one chip moves nothing: no step */
    sp_step *s = emit(ss, SP_STEP_COLL);
    s->dst = dst;
    s->src = src;
    sp_coll *co = &s->coll;
    co->kind = kind;
    memcpy(co->row_axes, ra, sizeof ra);
    memcpy(co->col_axes, ca, sizeof ca);
    co->group = K;
    co->rows = rows;
    co->cols = cols;
    co->dtype = dt;
    co->is_weight = is_weight;
    co->mask = mask;
    int64_t eb = sp_dtype_bytes(dt);
    spi_ckd *ck = &c->ck;
    int64_t block = spi_ck_mul(ck, "collective elements", rows, cols);
    switch (kind) {
    case SP_COLL_ALLGATHER:
    case SP_COLL_REDUCESCATTER:
        co->elems = block;
        co->bytes_sent = co->bytes_recv = spi_ck_mul3(ck, "collective bytes", K - 1, block, eb);
        s->act_bytes = is_weight ? 0 : spi_ck_mul3(ck, "collective bytes", K, block, eb);
        break;
    case SP_COLL_ALLREDUCE:
        /* padded so every chip's chunk is equal: ring reduce-scatter + all-gather */
        co->elems = spi_ck_add(ck, "collective elements", block, K - 1) / K * K;
        co->bytes_sent = co->bytes_recv = spi_ck_mul4(ck, "collective bytes", 2, K - 1, co->elems / K, eb);
        s->act_bytes = spi_ck_mul3(ck, "collective bytes", 2, co->elems, eb);
        break;
    case SP_COLL_ALLTOALL:
        co->elems = block;
        co->bytes_sent = co->bytes_recv = spi_ck_mul3(ck, "collective bytes", K - 1, block / K, eb);
        co->overlappable = 1;
        s->act_bytes = spi_ck_mul3(ck, "collective bytes", 2, block, eb);
        break;
    default:
        break;
    }
    if (is_weight) co->overlappable = 1;
    return s;
}

static sp_step *emit_matmul(ctx *c, sp_steps *ss, sp_buf dst, sp_buf src, sp_weight w, sp_buf wbuf, int64_t m,
                            int64_t k, int64_t n, int acc)
{
    sp_step *s = emit(ss, SP_STEP_MATMUL);
    s->dst = dst;
    s->src = src;
    s->weight = w;
    s->wbuf = wbuf;
    s->accumulate = acc;
    s->m = m;
    s->k = k;
    s->n = n;
    s->flops = spi_ck_mul4(&c->ck, "matmul FLOPs", 2, m, k, n);
    s->weight_bytes = spi_ck_mul3(&c->ck, "matmul weight bytes", k, n, c->w_b);
    s->act_bytes = spi_ck_mul(&c->ck, "matmul activation bytes",
                              spi_ck_add(&c->ck, "matmul activation bytes", spi_ck_mul(&c->ck, "matmul input elements", m, k),
                                         spi_ck_mul(&c->ck, "matmul output elements", m, n)),
                              c->act_b);
    return s;
}

static void emit_norm(ctx *c, sp_steps *ss, sp_buf buf, sp_weight gain, int64_t rows, int64_t cols,
                      const char *col_axes, const char *reduce_axes)
{
    sp_step *s = emit(ss, SP_STEP_NORM_STATS);
    s->dst = SP_BUF_STATS;
    s->src = buf;
    s->m = rows;
    s->n = cols;
    s->k = c->E;
    s->act_bytes = spi_ck_mul3(&c->ck, "norm activation bytes", rows, cols, c->act_b);
    /* statistics are always fp32: 2 numbers per row */
    emit_coll(c, ss, SP_COLL_ALLREDUCE, SP_BUF_STATS, SP_BUF_STATS, "", reduce_axes, rows, 2, SP_DT_F32, 0);
    s = emit(ss, SP_STEP_NORM_APPLY);
    s->dst = buf;
    s->src = buf;
    s->weight = gain;
    s->m = rows;
    s->n = cols;
    s->k = c->E;
    axcpy(s->axes, col_axes);
    s->act_bytes = spi_ck_mul4(&c->ck, "norm activation bytes", 2, rows, cols, c->act_b);
}

static void emit_bias(ctx *c, sp_steps *ss, sp_buf buf, sp_weight w, int64_t rows, int64_t cols, const char *col_axes)
{
    /* w is a matrix (every caller): its stored spec says it (storage_specs: bias = sp_weight_present of its bias) */
    const sp_weight_spec *ws = &c->p->wspec[w];
    if (!(ws->present ? ws->bias : sp_weight_present(c->m, sp_weight_bias(w)))) return;
    sp_step *s = emit(ss, SP_STEP_BIAS);
    s->dst = buf;
    s->weight = w;
    s->m = rows;
    s->n = cols;
    axcpy(s->axes, col_axes);
    s->act_bytes = spi_ck_mul4(&c->ck, "bias activation bytes", 2, rows, cols, c->act_b);
}

/* ---- weight storage ---- */
/* sp_mem_align, checked */
static int64_t ck_align(spi_ckd *ck, const char *what, int64_t bytes)
{
    return spi_ck_add(ck, what, bytes, SP_MEM_ALIGN - 1) / SP_MEM_ALIGN * SP_MEM_ALIGN;
}

static void set_spec(ctx *c, sp_weight w, int64_t rows, int64_t cols, int64_t rows_real, int64_t cols_real,
                     const char *ra, const char *ca, sp_dtype dt)
{
    sp_weight_spec *s = &c->p->wspec[w];
    s->weight = w;
    s->present = 1;
    s->bias = 0;
    s->rows = rows;
    s->cols = cols;
    s->rows_real = rows_real;
    s->cols_real = cols_real;
    axcpy(s->row_axes, ra);
    axcpy(s->col_axes, ca);
    s->local_rows = rows / axes_size(c->l, ra);
    s->local_cols = cols / axes_size(c->l, ca);
    s->dtype = dt;
    s->count = 1;
    s->bytes = ck_align(&c->ck, "weight shard bytes",
                        spi_ck_mul3(&c->ck, "weight shard bytes", s->local_rows, s->local_cols, sp_dtype_bytes(dt)));
    /* weight-only int8/fp8 keep one fp32 scale per global output column */
    if (dt == SP_DT_INT8 || dt == SP_DT_FP8) s->bytes = spi_ck_add(&c->ck, "weight shard bytes", s->bytes, sp_mem_align(cols * 4));
}

sp_dtype sp_lower_table_dtype(sp_dtype weights)
{
    return weights == SP_DT_INT8 || weights == SP_DT_FP8 ? SP_DT_BF16 : weights;
}

static void storage_specs(ctx *c, int first_stage, int last_stage)
{
    const sp_model *m = c->m;
    sp_dtype wd = c->l->weights;
    /* 2D storage splits F (and heads) z-major: gathering over y (wg-xy)
     * then leaves each chip one contiguous z block */
    const char *in_r = c->one_d ? "" : "x", *in_c = c->one_d ? "xyz" : "zy";
    const char *out_r = c->one_d ? "xyz" : "zy", *out_c = c->one_d ? "" : "x";
    int64_t HD = c->Hp * c->D, KD = c->KVH * c->D;
    set_spec(c, SP_W_Q, c->E, HD, c->E, m->n_heads * c->D, in_r, in_c, wd);
    set_spec(c, SP_W_K, c->E, KD, c->E, KD, in_r, c->case_a ? in_c : "", wd);
    set_spec(c, SP_W_V, c->E, KD, c->E, KD, in_r, c->case_a ? in_c : "", wd);
    set_spec(c, SP_W_O, HD, c->E, m->n_heads * c->D, c->E, out_r, out_c, wd);
    set_spec(c, SP_W_IN, c->E, c->Fp, c->E, m->d_ff, in_r, in_c, wd);
    if (m->ffn == SP_FFN_SWIGLU) set_spec(c, SP_W_UP, c->E, c->Fp, c->E, m->d_ff, in_r, in_c, wd);
    set_spec(c, SP_W_OUT, c->Fp, c->E, m->d_ff, c->E, out_r, out_c, wd);
    if (m->n_experts > 0) {
        /* every chip holds its replica's experts, each sharded like the dense FFN */
        static const sp_weight ew[] = {SP_W_IN, SP_W_UP, SP_W_OUT};
        for (size_t i = 0; i < sizeof ew / sizeof ew[0]; i++) {
            sp_weight_spec *ws = &c->p->wspec[ew[i]];
            if (!ws->present) continue;
            ws->count = c->experts_local;
            ws->bytes = spi_ck_mul(&c->ck, "expert weight bytes", ws->bytes, c->experts_local);
        }
        set_spec(c, SP_W_ROUTER, c->E, m->n_experts, c->E, m->n_experts, in_r, "", wd);
        /* the shared experts: one dense FFN of Fs columns, sharded like the dense FFN */
        int64_t Fs = sp_model_shared_ff(m);
        if (Fs > 0) {
            set_spec(c, SP_W_SH_IN, c->E, c->Fsp, c->E, Fs, in_r, in_c, wd);
            if (m->ffn == SP_FFN_SWIGLU) set_spec(c, SP_W_SH_UP, c->E, c->Fsp, c->E, Fs, in_r, in_c, wd);
            set_spec(c, SP_W_SH_OUT, c->Fsp, c->E, Fs, c->E, out_r, out_c, wd);
            if (m->shared_expert_gate) set_spec(c, SP_W_SH_GATE, c->E, 1, c->E, 1, in_r, "", wd);
        }
        /* the dense layers' FFN (moe_every > 1), sharded like the dense FFN */
        int64_t Fd = sp_model_dense_ff(m);
        if (Fd > 0) {
            set_spec(c, SP_W_D_IN, c->E, c->Fdp, c->E, Fd, in_r, in_c, wd);
            if (m->ffn == SP_FFN_SWIGLU) set_spec(c, SP_W_D_UP, c->E, c->Fdp, c->E, Fd, in_r, in_c, wd);
            set_spec(c, SP_W_D_OUT, c->Fdp, c->E, Fd, c->E, out_r, out_c, wd);
        }
    }
    /* norm gains (and LayerNorm biases) are tiny: replicated, fp32 */
    int nrm = m->norm == SP_NORM_LAYERNORM ? 2 : 1;
    set_spec(c, SP_W_NORM1, nrm, c->E, nrm, c->E, "", "", SP_DT_F32);
    if (m->block != SP_BLOCK_PARALLEL) set_spec(c, SP_W_NORM2, nrm, c->E, nrm, c->E, "", "", SP_DT_F32);
    if (last_stage) set_spec(c, SP_W_NORMF, nrm, c->E, nrm, c->E, "", "", SP_DT_F32);
    /* the embedding table is vocab-sharded over the whole tensor mesh; a
     * tied LM head is the same table (a copy when it lives on another stage) */
    if (first_stage || (last_stage && m->tied_embeddings))
        set_spec(c, SP_W_EMBED, c->Vp, c->E, m->vocab, c->E, "xyz", "", sp_lower_table_dtype(wd));
    if (last_stage && !m->tied_embeddings)
        set_spec(c, SP_W_LMHEAD, c->Vp, c->E, m->vocab, c->E, "xyz", "", sp_lower_table_dtype(wd));
    /* biases are small: fp32, replicated whole (unpadded) on every chip, with their matrix */
    for (int w = 1; w < SP_W_COUNT; w++)
        if (c->p->wspec[w].present && sp_weight_is_matrix(w) && sp_weight_present(m, sp_weight_bias(w))) {
            c->p->wspec[w].bias = 1;
            c->p->wspec[w].bytes += sp_mem_align(c->p->wspec[w].cols_real * 4);
        }
    if (first_stage && m->positions == SP_POS_LEARNED)
        set_spec(c, SP_W_POS, m->max_context, c->E, m->max_context, c->E, "", "", sp_lower_table_dtype(wd));
}

/* The storage of a stage's weights depends only on the model, the tensor
 * mesh, the weight dtype, 1D or 2D storage, the experts' split and whether
 * the stage holds the first or last layers; a search lowers many programs
 * that share all of these, so a memo keeps sets of them (compared by
 * value), each in the slot its small fields hash to: a job's own
 * (JOB_STORAGE slots, sp_lower_begin/finish: a search's pricing), else the
 * thread's (TLS_STORAGE, small: every thread a search starts zeroes it).  A
 * plan of palm-540b on 64 TPU v4 meets ~920 sets (stage meshes x dtypes x
 * stage kinds x storages): the 8 last sets a thread kept missed 16.0k of its
 * 58.6k lowerings; a job's 64 slots (~240 KB, touched as they fill) miss
 * 7.8k of 50.3k.  256 slots missed 4.3k, 1.3 % fewer instructions for the
 * plan, but no less CPU time (one thread, task-clock: a slot's 3.3 KB copied
 * from further out in the caches).  Whether a slot is used is kept apart
 * from the slots (storage_memo.used): a probe of an empty slot reads no page
 * of the slots, so each page's first touch is the write that fills it.  A
 * read first maps the kernel's shared zero page, and the write after it
 * copies the page and flushes the TLBs of every CPU the process runs on:
 * with the planner's two threads, ~60 such faults a plan, each an
 * interrupt to the other thread's CPU (perf: ~3 % of the plan's CPU time
 * on the 2-core VM). */
typedef struct storage_key {
    sp_model m;
    int mesh[3];
    sp_dtype wd;
    int one_d, first, last, experts;
} storage_key;
typedef struct storage_slot {
    storage_key key;
    sp_weight_spec wspec[SP_W_COUNT];
} storage_slot;
enum { TLS_STORAGE = 8, JOB_STORAGE = 64 };
_Static_assert(!(TLS_STORAGE & (TLS_STORAGE - 1)) && !(JOB_STORAGE & (JOB_STORAGE - 1)), "slot counts are powers of 2");

/* A memo's n slots (a power of 2) and which of them hold a set (used[i]) */
typedef struct storage_memo {
    storage_slot *slot;
    unsigned char *used;
    unsigned n;
} storage_memo;

/* memo: a job's (storage_memo.slot NULL: the thread's) */
static void stage_storage(ctx *c, storage_memo memo, int first_stage, int last_stage)
{
    static _Thread_local storage_slot tls[TLS_STORAGE];
    static _Thread_local unsigned char tls_used[TLS_STORAGE];
    if (!memo.slot) memo = (storage_memo){tls, tls_used, TLS_STORAGE};
    sp_program *p = c->p;
    const int *mesh = c->l->mesh;
    /* the small fields in one word (mesh sides < 2^16, dtype, experts < 2^8: a hash alone), mixed (fmix64) */
    uint64_t h = (uint64_t)mesh[0] ^ (uint64_t)mesh[1] << 16 ^ (uint64_t)mesh[2] << 32 ^ (uint64_t)c->l->weights << 48 ^
                 (uint64_t)(c->one_d | first_stage << 1 | last_stage << 2) << 53 ^ (uint64_t)c->l->experts << 56;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    unsigned i = (unsigned)h & (memo.n - 1);
    storage_slot *e = &memo.slot[i];
    storage_key *q = &e->key;
    /* probed field by field, the model (the big part) last */
    if (memo.used[i] && q->mesh[0] == mesh[0] && q->mesh[1] == mesh[1] && q->mesh[2] == mesh[2] &&
        q->wd == c->l->weights && q->one_d == c->one_d && q->experts == c->l->experts && q->first == first_stage &&
        q->last == last_stage && !memcmp(&q->m, c->m, sizeof q->m)) {
        memcpy(p->wspec, e->wspec, sizeof p->wspec);
        return;
    }
    memset(p->wspec, 0, sizeof p->wspec);
    storage_specs(c, first_stage, last_stage);
    memset(q, 0, sizeof *q);   /* padding too: the model is compared with memcmp */
    memcpy(&q->m, c->m, sizeof q->m);
    memcpy(q->mesh, mesh, sizeof q->mesh);
    q->wd = c->l->weights;
    q->one_d = c->one_d;
    q->experts = c->l->experts;
    q->first = first_stage;
    q->last = last_stage;
    memo.used[i] = 1;
    memcpy(e->wspec, p->wspec, sizeof p->wspec);
}

/* gather a stored weight over the phase's weight-gathered axes N into its
 * buffer (SP_BUF_GATHERED_OF(w)); returns the buffer to multiply from
 * (SP_BUF_NONE: use the stored shard) */
static sp_buf gather_weight(ctx *c, sp_steps *ss, sp_weight w)
{
    if (!c->sh.N[0]) return SP_BUF_NONE;
    sp_buf buf = SP_BUF_GATHERED_OF(w);
    const sp_weight_spec *s = &c->p->wspec[w];
    char ra[8], ca[8];
    axes_filter(s->row_axes, c->sh.N, 1, ra);
    axes_filter(s->col_axes, c->sh.N, 1, ca);
    /* nothing to gather when the N axes this weight is split over are all of size 1 */
    sp_step *g = emit_coll(c, ss, SP_COLL_ALLGATHER, buf, SP_BUF_NONE, ra, ca, s->local_rows, s->local_cols,
                           s->dtype, 1);
    if (!g) return SP_BUF_NONE;
    g->weight = w;
    int64_t bytes = spi_ck_mul(&c->ck, "gathered weight bytes",
                               spi_ck_mul3(&c->ck, "gathered weight bytes", s->local_rows, axes_size(c->l, ra),
                                           s->local_cols),
                               (int64_t)axes_size(c->l, ca) * sp_dtype_bytes(s->dtype));
    if (bytes > c->p->buf_bytes[buf]) c->p->buf_bytes[buf] = bytes;
    return buf;
}

/* KV heads a chip keeps per sequence when KV is replicated (case B) and q
 * heads are split over nG shards: the most any shard's q heads touch. */
static int64_t kv_heads_needed(const sp_model *m, int64_t Hp, int nG)
{
    int64_t Hl = Hp / nG, grp = m->n_heads / m->n_kv_heads, best = 1;
    /* aligned blocks: each block covers whole groups, or sits inside one */
    if (Hl % grp == 0) return Hl / grp;
    if (grp % Hl == 0) return 1;
    for (int g = 0; g < nG; g++) {
        int64_t q0 = g * Hl;
        if (q0 >= m->n_heads) break;
        int64_t q1 = q0 + Hl - 1 < m->n_heads - 1 ? q0 + Hl - 1 : m->n_heads - 1;
        int64_t span = q1 / grp - q0 / grp + 1;
        if (span > best) best = span;
    }
    return best;
}

/* ---- ragged batches (sp_lower.h, "Ragged batches") ----
 * Whether batch sequence b runs in pass p, and then its tokens and first
 * position: the one rule sp_lower_ragged_seq and the step figures follow. */
static int ragged_at_in(const sp_program *p, const sp_ragged *r, int64_t b, int64_t *q_len, int64_t *pos0)
{
    if (p->phase == SP_PHASE_PREFILL) {
        /* prefill pass `step`: unchunked, every sequence; prefill_chunk, of each cache block
         * (kv_seqs consecutive sequences, micro_batch / kv_seqs blocks) its k = pass_seqs /
         * blocks sequences [step·k, (step + 1)·k), as a uniform batch's passes fill the blocks
         * (sp_lower_pass_seq) */
        *q_len = r->prompt[b];
        *pos0 = 0;
        if (p->passes_seq <= 1) return 1;
        int64_t k = p->pass_seqs / (p->micro_batch / p->kv_seqs);
        return b % p->kv_seqs / k == p->step;
    }
    *q_len = 1;
    *pos0 = r->prompt[b] + p->step - 1;
    return sp_ragged_active(r, b, p->step);
}

static int ragged_at(const sp_program *p, int64_t b, int64_t *q_len, int64_t *pos0)
{
    return ragged_at_in(p, p->ragged, b, q_len, pos0);
}

/* Experts split over replicas (experts = replicas > 1) with a ragged batch: micro-batch
 * mb of every replica runs each prefill pass and decode step together, the expert
 * all-to-alls joining them (a replica whose micro-batch has no sequence left in a step
 * still runs it, with no rows).  The view's peers: micro-batch mb of each replica
 * (sp_ragged_micro).  *t_max, *t_sum: their tokens in this pass or step (ragged_at_in),
 * the most and the sum; *last: the last decode step any of them runs. */
static sp_status ragged_peers(const sp_program *p, int64_t *t_max, int64_t *t_sum, int64_t *last)
{
    const sp_ragged *r = p->ragged;
    *t_max = *t_sum = *last = 0;
    for (int g = 0; g < r->replicas; g++) {
        sp_ragged v;
        SP_CHECK(sp_ragged_micro(r->whole, r->replicas, r->microbatches, g, r->mb, &v));
        int64_t t = 0, q, pos0;
        for (int64_t b = 0; b < v.n; b++)
            if (ragged_at_in(p, &v, b, &q, &pos0)) t += q;
        if (t > *t_max) *t_max = t;
        *t_sum += t;
    }
    *last = sp_ragged_peers_max_gen(r);
    return SP_OK;
}

int sp_lower_ragged_lockstep(const sp_model *m, const sp_layout *l)
{
    return m->n_experts > 0 && l->experts > 1 ? l->replicas : 1;
}

void sp_lower_ragged_seq(const sp_program *p, int64_t i, int64_t *seq, int64_t *row0, int64_t *q_len, int64_t *pos0)
{
    if (!p->ragged) {
        *seq = i;
        *q_len = p->shape.q_len;
        *row0 = i * *q_len;
        *pos0 = p->shape.context - *q_len;
        return;
    }
    int64_t slot;
    sp_lower_ragged_blk_seq(p, 1, 0, i, seq, &slot, row0, q_len, pos0);
}

void sp_lower_ragged_blk_seq(const sp_program *p, int nblk, int blk, int64_t i, int64_t *seq, int64_t *slot,
                             int64_t *row0, int64_t *q_len, int64_t *pos0)
{
    const sp_ragged *r = p->ragged;
    int64_t per = nblk > 0 ? r->n / nblk : 0, b0 = blk * per, rows = 0, k = 0;
    for (int64_t b = b0; b < b0 + per && b < r->n; b++) {
        if (!ragged_at(p, b, q_len, pos0)) continue;
        if (k++ == i) {
            *seq = b;
            *slot = b - b0;
            *row0 = rows;
            return;
        }
        rows += *q_len;
    }
    *seq = *slot = *row0 = *q_len = *pos0 = -1;   /* i past the block's sequences */
}

void sp_lower_ragged_io(const sp_program *p, int64_t i, int64_t *seq, int64_t *in_row0, int64_t *out_row,
                        int64_t *q_len, int64_t *pos0)
{
    const sp_ragged *r = p->ragged;
    int64_t nb = p->rag_blocks > 0 ? p->rag_blocks : 1, per = r->n / nb, k = 0, rows = 0, seqs = 0;
    for (int64_t b = 0; b < r->n; b++) {
        if (b % per == 0) rows = seqs = 0;   /* a block's first sequence */
        if (!ragged_at(p, b, q_len, pos0)) continue;
        if (k++ == i) {
            *seq = b;
            *in_row0 = b / per * p->rag_rows + rows;
            *out_row = b / per * p->rag_seqs + seqs;
            return;
        }
        rows += *q_len;
        seqs++;
    }
    *seq = *in_row0 = *out_row = *q_len = *pos0 = -1;
}

void sp_lower_ragged_blk_rows(const sp_program *p, int nblk, int blk, int64_t *row0, int64_t *rows)
{
    const sp_ragged *r = p->ragged;
    int64_t per = nblk > 0 ? r->n / nblk : 0, q, pos0;
    *row0 = *rows = 0;
    for (int64_t b = 0; b < (blk + 1) * per && b < r->n; b++)
        if (ragged_at(p, b, &q, &pos0)) *(b < blk * per ? row0 : rows) += q;
}

/* A ragged program's host-held sequences (offload_kv): the last kv_host_seqs slots of each
 * sequence block of the cache (kv_batch_axes: nblk blocks of kv_seqs consecutive sequences;
 * one block when every chip holds every sequence), as a uniform batch offloads them, so
 * which sequences live in host memory follows their place in the batch, not their lengths
 * (the host bytes are then those sequences' own contexts; choosing them by length is not
 * done).  Of block blk's, those taking part in the pass: *n, their tokens stored before it
 * (Σ pos0_b: a decode step loads them) and their new tokens (Σ q_len_b: it stores them). */
static void ragged_host(const sp_program *p, int blk, int64_t *n, int64_t *stored, int64_t *rows)
{
    *n = *stored = *rows = 0;
    int64_t b0 = blk * p->kv_seqs;
    for (int64_t b = b0 + p->kv_seqs - p->kv_host_seqs; b < b0 + p->kv_seqs; b++) {
        int64_t q, pos0;
        if (!ragged_at(p, b, &q, &pos0)) continue;
        ++*n;
        *stored += pos0;
        *rows += q;
    }
}

/* The same, the most of any block (a step's figures: the fullest block's) */
static void ragged_host_max(const sp_program *p, int64_t *n, int64_t *stored, int64_t *rows)
{
    int nblk = axes_size(&p->layout, p->kv_batch_axes);
    *n = *stored = *rows = 0;
    for (int g = 0; g < nblk; g++) {
        int64_t a, b, c;
        ragged_host(p, g, &a, &b, &c);
        if (a > *n) *n = a;
        if (b > *stored) *stored = b;
        if (c > *rows) *rows = c;
    }
}

int64_t sp_lower_ragged_host_bytes(const sp_program *p, const sp_step *s, int blk)
{
    if (!s->ragged) return s->host_bytes;
    int64_t n, stored, rows;
    ragged_host(p, blk, &n, &stored, &rows);
    /* no more than the block's share of the KV cache the lowering sized with its
     * overflow checks (stored and rows are tokens of that cache) */
    int64_t one = 2 * s->kv_heads * s->d_head * sp_dtype_bytes(p->layout.kv);
    return one * (s->kind == SP_STEP_HOST_LOAD ? stored : rows);
}

/* The fullest of the nblk sequence blocks of the pass (sp_lower_ragged_blk_seq):
 * the most rows, the most attention context (Σ_t pos0 + t) and the most
 * context tokens after the pass, each the largest over the blocks. */
static void ragged_blk_max(ctx *c, int nblk, int64_t *rows, int64_t *ctx_sum, int64_t *ctx_tokens)
{
    spi_ckd *ck = &c->ck;
    const sp_ragged *r = c->p->ragged;
    int64_t per = r->n / nblk;
    *rows = *ctx_sum = *ctx_tokens = 0;
    for (int g = 0; g < nblk; g++) {
        int64_t n = 0, seen = 0, tok = 0;
        for (int64_t b = g * per; b < (g + 1) * per; b++) {
            int64_t q, pos0;
            if (!ragged_at(c->p, b, &q, &pos0)) continue;
            n += q;
            seen = spi_ck_add(ck, "attention context sum", seen,
                              spi_ck_add(ck, "attention context sum", spi_ck_mul(ck, "attention context sum", q, pos0),
                                         spi_ck_mul(ck, "attention context sum", q, q + 1) / 2));
            tok += pos0 + q;
        }
        if (n > *rows) *rows = n;
        if (seen > *ctx_sum) *ctx_sum = seen;
        if (tok > *ctx_tokens) *ctx_tokens = tok;
    }
}

/* a ragged batch's all-to-all between the packed rows and the sequence blocks over its row
 * axes, each block `rows` rows (sp_lower.h, "Ragged batches") */
static void ragged_blocks(sp_step *s, int on, int64_t rows)
{
    if (!on) return;
    s->ragged = 1;
    s->blk_rows = rows;
}

/* ---- attention ----
 * in: XG (T, E/|Rx|) normed.  out: Y (T, E/|Rx|) partial over C (accumulates if acc). */
static void emit_attention(ctx *c, sp_steps *ss, int acc)
{
    const shard *sh = &c->sh;
    sp_phase phase = c->p->phase;
    sp_attn_layout al = c->l->phase[phase].attn;
    int64_t T = c->T, Ein = c->E / sh->nRx, D = c->D, L = c->p->shape.q_len;
    int64_t Hl = c->Hp / sh->nG, KVl = c->case_a ? c->KVH / sh->nG : c->KVH;
    char Gs[4];
    axes_sorted(sh->G, Gs);
    int64_t grp_rows = T / sh->nG;   /* rows per head-group member in batch mode */
    /* a ragged batch's sequence blocks over the head group (batch-sharded attention): the
     * fullest block's rows, each block padded to them where blocks meet (sp_lower.h) */
    int rag_blk = c->p->ragged && al == SP_AL_BATCH;
    int nblk = sh->nN * (al == SP_AL_BATCH ? sh->nG : 1);   /* the attention's sequence blocks */
    int64_t blk_seen = 0, blk_tok = 0, blk_rows = 0;
    if (c->p->ragged) ragged_blk_max(c, nblk, &blk_rows, &blk_seen, &blk_tok);
    if (rag_blk) grp_rows = blk_rows;
    int64_t a2a_rows = rag_blk ? spi_ck_mul(&c->ck, "rows per chip", grp_rows, sh->nG) : T;

    /* Q: (T, Hp·D/|C|) [partial over Rx] -> (T, Hl·D) */
    sp_buf wq = gather_weight(c, ss, SP_W_Q);
    if (sh->nRx > 1) {
        emit_matmul(c, ss, SP_BUF_QP, SP_BUF_XG, SP_W_Q, wq, T, Ein, c->Hp * D / sh->nC, 0);
        emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_Q, SP_BUF_QP, "", sh->Rx, T, Hl * D, c->p->shape.act_dtype, 0);
    } else {
        emit_matmul(c, ss, SP_BUF_Q, SP_BUF_XG, SP_W_Q, wq, T, Ein, Hl * D, 0);
    }
    char qaxes[8];
    axcat(qaxes, sh->C, sh->Rx);
    emit_bias(c, ss, SP_BUF_Q, SP_W_Q, T, Hl * D, qaxes);

    /* K, V */
    sp_buf wk = gather_weight(c, ss, SP_W_K);
    sp_buf wv = gather_weight(c, ss, SP_W_V);
    sp_buf kbuf = SP_BUF_K, vbuf = SP_BUF_V;
    int64_t k_rows = T;   /* rows of K/V as computed */
    int k_all_heads = !c->case_a;
    if (c->case_a) {
        if (sh->nRx > 1) {
            emit_matmul(c, ss, SP_BUF_KP, SP_BUF_XG, SP_W_K, wk, T, Ein, c->KVH * D / sh->nC, 0);
            emit_matmul(c, ss, SP_BUF_VP, SP_BUF_XG, SP_W_V, wv, T, Ein, c->KVH * D / sh->nC, 0);
            emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_K, SP_BUF_KP, "", sh->Rx, T, KVl * D, c->p->shape.act_dtype, 0);
            emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_V, SP_BUF_VP, "", sh->Rx, T, KVl * D, c->p->shape.act_dtype, 0);
        } else {
            emit_matmul(c, ss, SP_BUF_K, SP_BUF_XG, SP_W_K, wk, T, Ein, KVl * D, 0);
            emit_matmul(c, ss, SP_BUF_V, SP_BUF_XG, SP_W_V, wv, T, Ein, KVl * D, 0);
        }
        emit_bias(c, ss, SP_BUF_K, SP_W_K, T, KVl * D, qaxes);
        emit_bias(c, ss, SP_BUF_V, SP_W_V, T, KVl * D, qaxes);
    } else if (al == SP_AL_HEADS) {
        /* every KV head for all rows; contraction split over Rx -> all-reduce */
        emit_matmul(c, ss, SP_BUF_K, SP_BUF_XG, SP_W_K, wk, T, Ein, c->KVH * D, 0);
        emit_matmul(c, ss, SP_BUF_V, SP_BUF_XG, SP_W_V, wv, T, Ein, c->KVH * D, 0);
        emit_coll(c, ss, SP_COLL_ALLREDUCE, SP_BUF_K, SP_BUF_K, "", sh->Rx, T, c->KVH * D, c->p->shape.act_dtype, 0);
        emit_coll(c, ss, SP_COLL_ALLREDUCE, SP_BUF_V, SP_BUF_V, "", sh->Rx, T, c->KVH * D, c->p->shape.act_dtype, 0);
        emit_bias(c, ss, SP_BUF_K, SP_W_K, T, c->KVH * D, "");
        emit_bias(c, ss, SP_BUF_V, SP_W_V, T, c->KVH * D, "");
    } else {
        /* batch-sharded, replicated KV weights: compute K/V for this chip's
         * sequences only.  Rows are blocks over sorted(G); keep the blocks
         * matching this chip on C, then reduce-scatter rows over Rx. */
        sp_step *s = emit(ss, SP_STEP_SLICE);
        s->dst = SP_BUF_KVIN;
        s->src = SP_BUF_XG;
        axcpy(s->batch_axes, Gs);
        axes_sorted(sh->C, s->axes);
        s->k = T;
        s->m = T / sh->nC;
        s->n = Ein;
        if (rag_blk && sh->nG > 1) {
            /* the kept blocks' rows, each block padded to the fullest's (nG 1: every row, the chip's) */
            s->ragged = 1;
            s->blk_rows = grp_rows;
            s->m = spi_ck_mul(&c->ck, "rows per chip", grp_rows, sh->nG / sh->nC);
        }
        s->act_bytes = spi_ck_mul4(&c->ck, "K/V input bytes", 2, s->m, Ein, c->act_b);
        int64_t rows_in = s->m;
        if (sh->nRx > 1) {
            emit_matmul(c, ss, SP_BUF_KP, SP_BUF_KVIN, SP_W_K, wk, rows_in, Ein, c->KVH * D, 0);
            emit_matmul(c, ss, SP_BUF_VP, SP_BUF_KVIN, SP_W_V, wv, rows_in, Ein, c->KVH * D, 0);
            emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_KB, SP_BUF_KP, sh->Rx, "", grp_rows, c->KVH * D,
                      c->p->shape.act_dtype, 0);
            emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_VB, SP_BUF_VP, sh->Rx, "", grp_rows, c->KVH * D,
                      c->p->shape.act_dtype, 0);
        } else {
            emit_matmul(c, ss, SP_BUF_KB, SP_BUF_KVIN, SP_W_K, wk, rows_in, Ein, c->KVH * D, 0);
            emit_matmul(c, ss, SP_BUF_VB, SP_BUF_KVIN, SP_W_V, wv, rows_in, Ein, c->KVH * D, 0);
        }
        emit_bias(c, ss, SP_BUF_KB, SP_W_K, grp_rows, c->KVH * D, "");
        emit_bias(c, ss, SP_BUF_VB, SP_W_V, grp_rows, c->KVH * D, "");
        kbuf = SP_BUF_KB;
        vbuf = SP_BUF_VB;
        k_rows = grp_rows;
    }

    /* batch-sharded attention: heads -> batch */
    sp_buf qsrc = SP_BUF_Q;
    int64_t a_seqs = c->seqs, a_heads = Hl;
    char a_head_axes[8], a_batch_axes[8];
    axcpy(a_head_axes, sh->G);
    axcpy(a_batch_axes, sh->N);
    if (al == SP_AL_BATCH) {
        sp_step *s = emit_coll(c, ss, SP_COLL_ALLTOALL, SP_BUF_QB, SP_BUF_Q, Gs, sh->G, a2a_rows, Hl * D,
                               c->p->shape.act_dtype, 0);
        if (s) {
            s->coll.a2a_to_batch = 1;
            ragged_blocks(s, rag_blk, grp_rows);
            qsrc = SP_BUF_QB;
        }
        if (c->case_a) {
            s = emit_coll(c, ss, SP_COLL_ALLTOALL, SP_BUF_KB, SP_BUF_K, Gs, sh->G, a2a_rows, KVl * D,
                          c->p->shape.act_dtype, 0);
            if (s) {
                s->coll.a2a_to_batch = 1;
                ragged_blocks(s, rag_blk, grp_rows);
                kbuf = SP_BUF_KB;
            }
            s = emit_coll(c, ss, SP_COLL_ALLTOALL, SP_BUF_VB, SP_BUF_V, Gs, sh->G, a2a_rows, KVl * D,
                          c->p->shape.act_dtype, 0);
            if (s) {
                s->coll.a2a_to_batch = 1;
                ragged_blocks(s, rag_blk, grp_rows);
                vbuf = SP_BUF_VB;
            }
            k_rows = grp_rows;
        }
        a_seqs = c->seqs / sh->nG;
        a_heads = c->Hp;
        k_all_heads = 1;
        a_head_axes[0] = '\0';
        axcat(a_batch_axes, sh->N, Gs);
    }
    (void)k_rows;

    /* KV cache store, in the decode phase's layout: the handoff (kv_handoff)
     * first.  kbuf/vbuf: (a_seqs·L, kv_src·D), read again by the attention
     * below, so the handoff writes the other of K and KB. */
    sp_buf kst = kbuf, vst = vbuf;
    int64_t kv_src = k_all_heads ? c->KVH : KVl, src_rows = spi_ck_mul(&c->ck, "K/V rows", a_seqs, L);
    int nD = axes_size(c->l, c->kv_rows);
    if (c->kv != KV_DIRECT && nD > 1) {
        sp_buf out[2] = {kbuf == SP_BUF_K ? SP_BUF_KB : SP_BUF_K, vbuf == SP_BUF_V ? SP_BUF_VB : SP_BUF_V};
        sp_buf in[2] = {kbuf, vbuf};
        for (int kvi = 0; kvi < 2; kvi++) {
            sp_step *s = NULL;
            switch (c->kv) {
            case KV_SLICE:   /* keep this chip's block of rows over D */
                s = emit(ss, SP_STEP_SLICE);
                s->dst = out[kvi];
                s->src = in[kvi];
                axcpy(s->batch_axes, c->kv_rows);
                axcpy(s->axes, c->kv_rows);
                s->k = src_rows;
                s->m = src_rows / nD;
                s->n = kv_src * D;
                if (c->p->ragged) {
                    /* the packed rows of every sequence -> the chip's block of decode's cache, padded to
                     * the fullest block's rows (the KV_STORE's blocks: sp_lower.h, "Ragged batches") */
                    int64_t seen, tok;
                    s->ragged = 1;
                    s->k = c->T;
                    ragged_blk_max(c, nD, &s->blk_rows, &seen, &tok);
                    s->m = s->blk_rows;
                }
                break;
            case KV_GATHER:  /* (src_rows, KVH·D) -> (nD·src_rows, KVH·D) */
                s = emit_coll(c, ss, SP_COLL_ALLGATHER, out[kvi], in[kvi], c->kv_rows, "", src_rows, kv_src * D,
                              c->p->shape.act_dtype, 0);
                break;
            case KV_A2A:     /* (src_rows, kv_src·D) -> (src_rows/nD, nD·kv_src·D) */
                s = emit_coll(c, ss, SP_COLL_ALLTOALL, out[kvi], in[kvi], c->kv_rows, c->kv_cols, src_rows,
                              kv_src * D, c->p->shape.act_dtype, 0);
                if (s) s->coll.a2a_to_batch = 1;
                break;
            case KV_A2A_BACK: /* (src_rows, kv_src·D) -> (nD·src_rows, kv_src/nD·D) */
                s = emit_coll(c, ss, SP_COLL_ALLTOALL, out[kvi], in[kvi], c->kv_rows, c->kv_cols,
                              spi_ck_mul(&c->ck, "K/V rows", src_rows, nD), kv_src / nD * D, c->p->shape.act_dtype, 0);
                if (s) s->coll.a2a_to_batch = 0;
                break;
            default: break;
            }
            if (s) *(kvi ? &vst : &kst) = out[kvi];
        }
    }
    /* every KV head of the rows, or (case A) the heads of decode's head block */
    int64_t st_heads = c->case_a ? c->KVH / axes_size(c->l, c->p->kv_head_axes) : c->KVH, st_seqs = c->p->kv_pass_seqs;
    {
        sp_step *s = emit(ss, SP_STEP_KV_STORE);
        s->src2 = kst;
        s->src3 = vst;
        s->batch = st_seqs;
        s->q_len = L;
        s->kv_heads_src = st_heads;
        s->kv_heads = c->p->kv_heads_cache;
        s->kv_repl = c->p->kv_repl;
        s->d_head = D;
        s->pos0 = c->p->shape.context - L;
        s->context = c->p->shape.context;
        axcpy(s->axes, c->p->kv_head_axes);
        axcpy(s->batch_axes, c->p->kv_batch_axes);
        s->kv_bytes_written = spi_ck_mul4(&c->ck, "KV cache bytes written per step", 2 * st_seqs, L, s->kv_heads,
                                          D * sp_dtype_bytes(c->l->kv));
        if (c->p->ragged) {
            /* each sequence's own rows into its own slot (sp_lower_ragged_blk_seq over the cache's
             * sequence blocks, kv_batch_axes; the fullest block's rows) */
            int nb = axes_size(c->l, c->p->kv_batch_axes);
            int64_t seen, tok;
            s->ragged = 1;
            s->m = c->T;
            s->batch = c->seqs;
            if (nb > 1) {
                ragged_blk_max(c, nb, &s->m, &seen, &tok);
                s->batch = c->p->ragged->n / nb;
                s->blk_rows = s->m;
            }
            s->pos0 = 0;
            s->kv_bytes_written = spi_ck_mul4(&c->ck, "KV cache bytes written per step", 2, s->m, s->kv_heads,
                                              D * sp_dtype_bytes(c->l->kv));
        }
    }
    if (c->p->kv_host_seqs > 0) {
        /* the rows just stored for the host-held sequences go back to host memory: K and V,
         * (kv_host_seqs, L, kv_heads_cache, D) each */
        sp_step *s = emit(ss, SP_STEP_HOST_STORE);
        s->src2 = kst;
        s->src3 = vst;
        s->batch = c->p->kv_host_seqs;
        s->q_len = L;
        s->kv_heads = c->p->kv_heads_cache;
        s->d_head = D;
        s->pos0 = c->p->shape.context - L;
        s->context = c->p->shape.context;
        s->host_bytes = spi_ck_mul4(&c->ck, "host bytes per step", 2 * c->p->kv_host_seqs, L, s->kv_heads,
                                    D * sp_dtype_bytes(c->l->kv));
        if (c->p->ragged) {
            /* each host-held sequence taking part stores its own new rows (ragged_host) */
            int64_t n, stored, rows;
            ragged_host_max(c->p, &n, &stored, &rows);
            s->ragged = 1;
            s->batch = n;
            s->m = rows;
            axcpy(s->batch_axes, c->p->kv_batch_axes);
            s->host_bytes = spi_ck_mul4(&c->ck, "host bytes per step", 2 * rows, s->kv_heads, D, sp_dtype_bytes(c->l->kv));
        }
    }

    /* attention core */
    {
        sp_step *s = emit(ss, SP_STEP_ATTN);
        sp_buf out = al == SP_AL_BATCH ? SP_BUF_ATTB : SP_BUF_ATT;
        s->dst = out;
        s->src = qsrc;
        s->src2 = kbuf;
        s->src3 = vbuf;
        /* decode, and incremental prefill (prefill_tokens): the keys and values of the
         * context are in the cache, the pass's own just stored */
        s->from_cache = phase == SP_PHASE_DECODE || c->p->passes_tok > 1;
        s->batch = a_seqs;
        s->q_len = L;
        s->heads = a_heads;
        s->kv_heads_src = k_all_heads ? c->KVH : KVl;
        s->kv_heads = s->from_cache ? c->p->kv_heads_cache : s->kv_heads_src;
        s->kv_repl = s->from_cache ? c->p->kv_repl : (k_all_heads && al == SP_AL_HEADS);
        s->d_head = D;
        s->context = c->p->shape.context;
        s->pos0 = c->p->shape.context - L;
        axcpy(s->axes, a_head_axes);
        axcpy(s->batch_axes, a_batch_axes);
        /* QK^T and AV: 2 FLOPs per multiply-add each; causal prefill sums
         * contexts pos0+1 .. pos0+L */
        spi_ckd *ck = &c->ck;
        int64_t ctx_sum = spi_ck_add(ck, "attention context sum", spi_ck_mul(ck, "attention context sum", L, s->pos0),
                                     spi_ck_mul(ck, "attention context sum", L, L + 1) / 2);
        s->flops = spi_ck_mul4(ck, "attention FLOPs", spi_ck_mul(ck, "attention FLOPs", 4, a_seqs), a_heads, D, ctx_sum);
        if (s->from_cache)
            s->kv_bytes_read = spi_ck_mul4(ck, "KV cache bytes read per step", spi_ck_mul(ck, "KV cache bytes", 2, a_seqs),
                                           s->context, s->kv_heads, D * sp_dtype_bytes(c->l->kv));
        s->act_bytes = spi_ck_mul4(ck, "attention activation bytes", spi_ck_mul(ck, "attention activation bytes", 2, a_seqs),
                                   L, a_heads, D * c->act_b);
        if (c->p->ragged) {
            /* each sequence over its own context: every sequence of the pass (head-sharded), or the
             * chip's block of them (batch-sharded), the fullest block's figures */
            int64_t seen = blk_seen, tokens = blk_tok, rows = blk_rows;
            s->ragged = 1;
            s->m = rows;
            if (nblk > 1) {
                s->batch = c->p->ragged->n / nblk;
                s->blk_rows = rows;
            }
            s->pos0 = 0;
            s->flops = spi_ck_mul4(ck, "attention FLOPs", 4, a_heads, D, seen);
            if (s->from_cache)
                s->kv_bytes_read = spi_ck_mul4(ck, "KV cache bytes read per step", 2, tokens, s->kv_heads,
                                               D * sp_dtype_bytes(c->l->kv));
            s->act_bytes = spi_ck_mul4(ck, "attention activation bytes", 2, rows, a_heads, D * c->act_b);
        }
        if (al == SP_AL_BATCH) {
            sp_step *b = emit_coll(c, ss, SP_COLL_ALLTOALL, SP_BUF_ATT, SP_BUF_ATTB, Gs, sh->G, a2a_rows, Hl * D,
                                   c->p->shape.act_dtype, 0);
            if (b) {
                b->coll.a2a_to_batch = 0;
                ragged_blocks(b, rag_blk, grp_rows);
            } else {
                s->dst = SP_BUF_ATT;
            }
        }
    }

    /* output projection: (T, Hl·D) -> [all-gather Rx] -> (T, Hp·D/|C|) · WO -> Y (T, Ein) partial over C */
    sp_buf att = SP_BUF_ATT;
    if (sh->nRx > 1) {
        emit_coll(c, ss, SP_COLL_ALLGATHER, SP_BUF_ATTG, SP_BUF_ATT, "", sh->Rx, T, Hl * D, c->p->shape.act_dtype, 0);
        att = SP_BUF_ATTG;
    }
    sp_buf wo = gather_weight(c, ss, SP_W_O);
    emit_matmul(c, ss, SP_BUF_Y, att, SP_W_O, wo, T, c->Hp * D / sh->nC, Ein, acc);
}

/* ---- feed-forward ----
 * in: (T, E/|Rx|) normed rows.  out: (T, E/|Rx|) partial over C (accumulates
 * if acc).  Dense: XG -> Y, T = c->T.  MoE experts (experts > 0): T slot
 * rows in `experts` blocks, each block through its own expert's matrices. */
static sp_step *ffn_matmul(ctx *c, sp_steps *ss, sp_buf dst, sp_buf src, sp_weight w, sp_buf wbuf, int64_t T,
                           int64_t k, int64_t n, int acc, int64_t experts)
{
    sp_step *s = emit_matmul(c, ss, dst, src, w, wbuf, T, k, n, acc);
    if (experts > 0) {
        /* the weights of the experts some token chose (sp_lower.h) */
        s->experts = experts;
        s->capacity = c->slots;
        s->weight_bytes = (int64_t)ceil(c->experts_active * (double)s->weight_bytes);
    }
    return s;
}

/* The matrices of one FFN and its padded hidden width: the dense FFN (or
 * every expert's, stacked), or the shared experts'. */
typedef struct ffn_weights {
    sp_weight in, up, out;
    int64_t Fp;
} ffn_weights;

/* gate (SP_BUF_NONE: none): (T, 1) logits; the hidden rows are scaled by
 * their sigmoid before the output matmul (= scaling the FFN's output rows) */
static void emit_ffn_rows(ctx *c, sp_steps *ss, const ffn_weights *fw, sp_buf in, sp_buf out, int64_t T, int acc,
                          int64_t experts, sp_buf gate)
{
    const shard *sh = &c->sh;
    int swiglu = c->m->ffn == SP_FFN_SWIGLU;
    int64_t Ein = c->E / sh->nRx, FC = fw->Fp / sh->nC;
    sp_dtype ad = c->p->shape.act_dtype;
    char haxes[8];
    axcat(haxes, sh->C, sh->Rx);

    sp_buf win = gather_weight(c, ss, fw->in);
    ffn_matmul(c, ss, SP_BUF_H, in, fw->in, win, T, Ein, FC, 0, experts);
    if (swiglu) {
        sp_buf wup = gather_weight(c, ss, fw->up);
        ffn_matmul(c, ss, SP_BUF_H2, in, fw->up, wup, T, Ein, FC, 0, experts);
    }
    sp_buf h = SP_BUF_H, h2 = SP_BUF_H2;
    int64_t hcols = FC;
    if (sh->nRx > 1) {
        /* partial over Rx: reduce-scatter into F_(C,Rx) before the nonlinearity */
        hcols = FC / sh->nRx;
        emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_HS, SP_BUF_H, "", sh->Rx, T, hcols, ad, 0);
        if (swiglu) emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_HS2, SP_BUF_H2, "", sh->Rx, T, hcols, ad, 0);
        h = SP_BUF_HS;
        h2 = SP_BUF_HS2;
    }
    emit_bias(c, ss, h, fw->in, T, hcols, haxes);
    if (swiglu) emit_bias(c, ss, h2, fw->up, T, hcols, haxes);
    sp_step *s = emit(ss, SP_STEP_ACT);
    s->dst = h;
    s->src = h;
    s->src2 = swiglu ? h2 : SP_BUF_NONE;
    s->m = T;
    s->n = hcols;
    s->act_bytes = spi_ck_mul4(&c->ck, "ffn activation bytes", swiglu ? 3 : 2, T, hcols, c->act_b);
    if (gate != SP_BUF_NONE) {
        s = emit(ss, SP_STEP_GATE_SCALE);
        s->dst = h;
        s->src = gate;
        s->m = T;
        s->n = hcols;
        s->act_bytes = spi_ck_add(&c->ck, "gate bytes", spi_ck_mul4(&c->ck, "gate bytes", 2, T, hcols, c->act_b),
                                  spi_ck_mul(&c->ck, "gate bytes", T, c->act_b));
    }
    if (sh->nRx > 1) emit_coll(c, ss, SP_COLL_ALLGATHER, SP_BUF_H, SP_BUF_HS, "", sh->Rx, T, hcols, ad, 0);
    sp_buf wout = gather_weight(c, ss, fw->out);
    ffn_matmul(c, ss, out, SP_BUF_H, fw->out, wout, T, FC, Ein, acc, experts);
}

/* An all-to-all of MoE slot rows over the replica axis (the expert-parallel
 * group): `rows` × `cols` slots in, N equal row blocks, block g to replica g;
 * only the occupied slots move (routed: 1 dispatch, 2 combine), so the bytes
 * are the expected value (sp_lower.h). */
static void emit_expert_a2a(ctx *c, sp_steps *ss, sp_buf dst, sp_buf src, int64_t rows, int64_t cols, int routed)
{
    int64_t N = c->l->experts;
    if (N <= 1) return;
    sp_step *s = emit(ss, SP_STEP_COLL);
    s->dst = dst;
    s->src = src;
    s->src2 = SP_BUF_GATE;
    s->experts = c->m->n_experts;
    s->capacity = c->slots;
    sp_coll *co = &s->coll;
    spi_ckd *ck = &c->ck;
    int64_t eb = c->act_b;
    co->kind = SP_COLL_ALLTOALL;
    axcpy(co->row_axes, "r");
    co->group = (int)N;
    co->rows = rows;
    co->cols = cols;
    co->dtype = c->p->shape.act_dtype;
    co->mask = SP_AXES_REPLICA;
    co->routed = routed;
    co->elems = spi_ck_mul(ck, "expert all-to-all elements", rows, cols);
    /* expected rows each way: each of the T·k choices is another chip's with probability (N-1)/N */
    double rows_out = (double)c->T * (double)c->m->top_k * (double)(N - 1) / (double)N;
    int64_t moved = spi_ck_mul3(ck, "expert all-to-all bytes", (int64_t)llround(rows_out), cols, eb);
    if (routed == 1)
        moved = spi_ck_add(ck, "expert all-to-all bytes", moved,
                           spi_ck_mul3(ck, "expert count bytes", N - 1, c->m->n_experts / N, 8));
    co->bytes_sent = co->bytes_recv = moved;
    co->overlappable = 1;
    s->act_bytes = spi_ck_mul3(ck, "expert all-to-all bytes", 2, co->elems, eb);
}

/* The expert all-to-all is coordinated with the tensor group (sp_lower.h)
 * when experts are split over replicas whose tensor mesh splits the FFN's
 * output columns (C), in a serial block (a parallel block sums attention and
 * FFN before one reduce-scatter, so its FFN output stays partial over C). */
static int moe_coordinated(const ctx *c)
{
    return c->m->n_experts > 0 && !c->dense_layer && c->l->experts > 1 && c->sh.nC > 1 && c->m->block == SP_BLOCK_SERIAL;
}

/* MoE FFN (sp_lower.h): router, routing, dispatch, the local experts, combine.
 * Coordinated: the output lands reduce-scattered in Y2 (T, E/|act|), not in Y. */
static void emit_moe(ctx *c, sp_steps *ss, int acc)
{
    const shard *sh = &c->sh;
    const sp_model *m = c->m;
    spi_ckd *ck = &c->ck;
    int64_t T = c->T, Ein = c->E / sh->nRx, NE = m->n_experts, K = m->top_k;
    int64_t rows = spi_ck_mul(ck, "expert slot rows", NE, c->slots);
    int ep = c->l->experts > 1, coord = moe_coordinated(c);
    int64_t Ed = coord ? Ein / sh->nC : Ein;   /* columns a chip dispatches */
    sp_dtype ad = c->p->shape.act_dtype;

    if (c->Fsp > 0) {
        /* the shared experts: a dense FFN on every token into Y (reduce-scattered into Y2 when
         * coordinated); the routed experts' combine then adds to it.  Its gate's (T, 1) logits
         * use the router's buffer before the router does */
        sp_buf gate = SP_BUF_NONE;
        if (m->shared_expert_gate) {
            emit_matmul(c, ss, SP_BUF_RLOG, SP_BUF_XG, SP_W_SH_GATE, SP_BUF_NONE, T, Ein, 1, 0);
            emit_coll(c, ss, SP_COLL_ALLREDUCE, SP_BUF_RLOG, SP_BUF_RLOG, "", sh->Rx, T, 1, ad, 0);
            gate = SP_BUF_RLOG;
        }
        ffn_weights sw = {SP_W_SH_IN, SP_W_SH_UP, SP_W_SH_OUT, c->Fsp};
        emit_ffn_rows(c, ss, &sw, SP_BUF_XG, SP_BUF_Y, T, coord ? 0 : acc, 0, gate);
        if (coord) emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_Y2, SP_BUF_Y, "", sh->C, T, Ed, ad, 0);
        acc = 1;
    }
    emit_matmul(c, ss, SP_BUF_RLOG, SP_BUF_XG, SP_W_ROUTER, SP_BUF_NONE, T, Ein, NE, 0);
    emit_coll(c, ss, SP_COLL_ALLREDUCE, SP_BUF_RLOG, SP_BUF_RLOG, "", sh->Rx, T, NE, ad, 0);
    sp_step *s = emit(ss, SP_STEP_ROUTE);
    s->dst = SP_BUF_GATE;
    s->src = SP_BUF_RLOG;
    s->m = T;
    s->n = NE;
    s->k = K;
    s->act_bytes = spi_ck_add(ck, "routing bytes", spi_ck_mul3(ck, "routing bytes", T, NE, c->act_b),
                              spi_ck_mul3(ck, "routing bytes", T, K, SP_ROUTE_BYTES));
    s = emit(ss, SP_STEP_DISPATCH);
    s->dst = SP_BUF_DISP;
    s->src = SP_BUF_XG;
    s->src2 = SP_BUF_GATE;
    s->m = T;
    s->n = Ed;
    s->k = K;
    s->experts = NE;
    s->capacity = c->slots;
    if (coord) {
        s->src_cols = Ein;
        axcpy(s->axes, sh->C);
    }
    s->act_bytes = spi_ck_mul3(ck, "dispatch bytes", spi_ck_add(ck, "dispatch rows", rows, spi_ck_mul(ck, "dispatch rows", T, K)), Ed,
                               c->act_b);
    sp_buf xin = SP_BUF_DISP;
    if (ep) {
        emit_expert_a2a(c, ss, SP_BUF_EXP, SP_BUF_DISP, rows, Ed, 1);
        xin = SP_BUF_EXP;
        if (coord) {
            /* each token crossed once per tensor group; whole rows again within the replica */
            emit_coll(c, ss, SP_COLL_ALLGATHER, SP_BUF_DISP, SP_BUF_EXP, "", sh->C, rows, Ed, ad, 0);
            xin = SP_BUF_DISP;
        }
    }
    ffn_weights ew = {SP_W_IN, SP_W_UP, SP_W_OUT, c->Fp};
    emit_ffn_rows(c, ss, &ew, xin, xin, rows, 0, c->experts_local, SP_BUF_NONE);
    if (ep) {
        if (coord) emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_EXP, SP_BUF_DISP, "", sh->C, rows, Ed, ad, 0);
        emit_expert_a2a(c, ss, SP_BUF_DISP, SP_BUF_EXP, rows, Ed, 2);
    }
    s = emit(ss, SP_STEP_COMBINE);
    s->dst = coord ? SP_BUF_Y2 : SP_BUF_Y;
    s->src = SP_BUF_DISP;
    s->src2 = SP_BUF_GATE;
    s->accumulate = coord ? c->Fsp > 0 : acc;
    s->m = T;
    s->n = Ed;
    s->k = K;
    s->experts = NE;
    s->capacity = c->slots;
    s->act_bytes = spi_ck_mul3(ck, "combine bytes", spi_ck_mul(ck, "combine rows", T, K + 1), Ed, c->act_b);
}

static void emit_ffn(ctx *c, sp_steps *ss, int acc)
{
    if (c->dense_layer) {
        /* a dense layer between MoE layers: its own FFN (SP_W_D_*), every token */
        ffn_weights fw = {SP_W_D_IN, SP_W_D_UP, SP_W_D_OUT, c->Fdp};
        emit_ffn_rows(c, ss, &fw, SP_BUF_XG, SP_BUF_Y, c->T, acc, 0, SP_BUF_NONE);
    } else if (c->m->n_experts > 0) emit_moe(c, ss, acc);
    else {
        ffn_weights fw = {SP_W_IN, SP_W_UP, SP_W_OUT, c->Fp};
        emit_ffn_rows(c, ss, &fw, SP_BUF_XG, SP_BUF_Y, c->T, acc, 0, SP_BUF_NONE);
    }
}

/* all-gather the layer input over C, normalise (statistics all-reduced over Rx) */
static void emit_block_input(ctx *c, sp_steps *ss, sp_weight gain)
{
    const shard *sh = &c->sh;
    int64_t T = c->T, Ec = c->E / sh->nact, Ein = c->E / sh->nRx;
    if (sh->nC > 1)
        emit_coll(c, ss, SP_COLL_ALLGATHER, SP_BUF_XG, SP_BUF_X, "", sh->C, T, Ec, c->p->shape.act_dtype, 0);
    else {
        sp_step *s = emit(ss, SP_STEP_SLICE);   /* a copy: XG = X */
        s->dst = SP_BUF_XG;
        s->src = SP_BUF_X;
        s->k = T;
        s->m = T;
        s->n = Ein;
        s->act_bytes = spi_ck_mul4(&c->ck, "layer input bytes", 2, T, Ein, c->act_b);
    }
    emit_norm(c, ss, SP_BUF_XG, gain, T, Ein, sh->Rx, sh->Rx);
}

/* reduce-scatter the block's partial output over C and add it to the residual
 * (scattered: the output is already reduce-scattered, in Y2) */
static void emit_block_output(ctx *c, sp_steps *ss, sp_weight bias_of, int scattered)
{
    const shard *sh = &c->sh;
    int64_t T = c->T, Ec = c->E / sh->nact;
    sp_buf y = scattered ? SP_BUF_Y2 : SP_BUF_Y;
    if (sh->nC > 1 && !scattered) {
        emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_Y2, SP_BUF_Y, "", sh->C, T, Ec, c->p->shape.act_dtype, 0);
        y = SP_BUF_Y2;
    }
    emit_bias(c, ss, y, bias_of, T, Ec, sh->act);
    if (c->m->block != SP_BLOCK_SERIAL && bias_of == SP_W_O) emit_bias(c, ss, y, SP_W_OUT, T, Ec, sh->act);
    sp_step *s = emit(ss, SP_STEP_ADD);
    s->dst = SP_BUF_X;
    s->src = y;
    s->m = T;
    s->n = Ec;
    s->act_bytes = spi_ck_mul4(&c->ck, "residual bytes", 3, T, Ec, c->act_b);
}

static void emit_layer(ctx *c, sp_steps *ss)
{
    if (c->m->block == SP_BLOCK_PARALLEL) {
        /* PaLM: one input all-gather and one output reduce-scatter for both */
        emit_block_input(c, ss, SP_W_NORM1);
        emit_attention(c, ss, 0);
        emit_ffn(c, ss, 1);
        emit_block_output(c, ss, SP_W_O, 0);
    } else if (c->m->block == SP_BLOCK_PARALLEL2) {
        /* GPT-NeoX: X is unchanged until the one output, so the FFN's input
         * is gathered and normed again (with its own gain) after attention */
        emit_block_input(c, ss, SP_W_NORM1);
        emit_attention(c, ss, 0);
        emit_block_input(c, ss, SP_W_NORM2);
        emit_ffn(c, ss, 1);
        emit_block_output(c, ss, SP_W_O, 0);
    } else {
        emit_block_input(c, ss, SP_W_NORM1);
        emit_attention(c, ss, 0);
        emit_block_output(c, ss, SP_W_O, 0);
        emit_block_input(c, ss, SP_W_NORM2);
        emit_ffn(c, ss, 0);
        emit_block_output(c, ss, SP_W_OUT, moe_coordinated(c));
    }
}

/* stage 0: embedding (vocab-sharded partial sums, reduce-scattered into X) */
static void emit_embed(ctx *c, sp_steps *ss)
{
    const shard *sh = &c->sh;
    int64_t L = c->p->shape.q_len, rows = spi_ck_mul(&c->ck, "tokens per pass", c->p->pass_seqs, L);
    if (c->p->ragged) rows = spi_ck_mul(&c->ck, "tokens per pass", c->T, sh->nN);   /* packed, in blocks over N */
    int64_t Ec = c->E / sh->nact;
    sp_step *s = emit(ss, SP_STEP_EMBED);
    s->dst = SP_BUF_EMB;
    s->weight = SP_W_EMBED;
    s->m = rows;
    s->n = c->E;
    axcpy(s->axes, "xyz");
    /* rows read from the table: at most one per token */
    s->weight_bytes = spi_ck_mul3(&c->ck, "embedding bytes read", rows, c->E, sp_dtype_bytes(sp_lower_table_dtype(c->l->weights))) /
                      (c->n > 0 ? c->n : 1);
    s->act_bytes = spi_ck_mul3(&c->ck, "embedding activation bytes", rows, c->E, c->act_b);
    if (c->n > 1) {
        char Ns[4];
        axes_sorted(sh->N, Ns);
        emit_coll(c, ss, SP_COLL_REDUCESCATTER, SP_BUF_X, SP_BUF_EMB, Ns, sh->act, c->T, Ec, c->p->shape.act_dtype, 0);
    } else {
        s->dst = SP_BUF_X;
    }
    if (c->m->positions == SP_POS_LEARNED) {
        s = emit(ss, SP_STEP_POS);
        s->dst = SP_BUF_X;
        s->weight = SP_W_POS;
        s->m = c->T;
        s->n = Ec;
        s->pos0 = c->p->shape.context - L;
        s->q_len = L;
        if (c->p->ragged) {
            s->ragged = 1;   /* each row at its sequence's position (sp_lower_ragged_blk_seq over N) */
            s->batch = c->seqs;
            s->blk_rows = sh->nN > 1 ? c->T : 0;
            s->pos0 = 0;
        }
        axcpy(s->axes, sh->act);
        axcpy(s->batch_axes, sh->N);
        s->act_bytes = spi_ck_mul4(&c->ck, "position embedding bytes", 2, c->T, Ec, c->act_b);
    }
}

/* last stage: last-token rows, gathered whole, final norm, vocab-sharded logits, gathered */
static void emit_logits(ctx *c, sp_steps *ss)
{
    const shard *sh = &c->sh;
    int64_t L = c->p->shape.q_len, Ec = c->E / sh->nact;
    sp_dtype ad = c->p->shape.act_dtype;
    sp_buf x = SP_BUF_X;
    if (c->T > c->seqs) {   /* some sequence has more than one token in the pass (uniform: L > 1) */
        sp_step *s = emit(ss, SP_STEP_SLICE);
        s->dst = SP_BUF_LAST;
        s->src = SP_BUF_X;
        s->every = L;
        s->k = c->T;
        s->m = c->seqs;
        s->n = Ec;
        if (c->p->ragged) {
            /* row row0 + q_len − 1 of each sequence of the chip's block over N (sp_lower_ragged_blk_seq),
             * then zero rows up to the block's seqs */
            s->ragged = 1;
            s->every = 0;
            s->batch = c->seqs;
            axcpy(s->batch_axes, sh->N);
        }
        x = SP_BUF_LAST;
    }
    char Ns[4];
    axes_sorted(sh->N, Ns);
    if (c->n > 1) {
        emit_coll(c, ss, SP_COLL_ALLGATHER, SP_BUF_XF, x, Ns, sh->act, c->seqs, Ec, ad, 0);
    } else {
        sp_step *s = emit(ss, SP_STEP_SLICE);
        s->dst = SP_BUF_XF;
        s->src = x;
        s->k = c->seqs;
        s->m = c->seqs;
        s->n = c->E;
    }
    int64_t B = c->p->ragged ? spi_ck_mul(&c->ck, "logits rows", c->seqs, sh->nN) : c->p->pass_seqs;
    emit_norm(c, ss, SP_BUF_XF, SP_W_NORMF, B, c->E, "", "");
    sp_step *s = emit(ss, SP_STEP_LOGITS);
    s->dst = SP_BUF_LOGITS;
    s->src = SP_BUF_XF;
    s->weight = c->m->tied_embeddings ? SP_W_EMBED : SP_W_LMHEAD;
    s->m = B;
    s->k = c->E;
    s->n = c->Vp / c->n;
    axcpy(s->axes, "xyz");
    s->flops = spi_ck_mul4(&c->ck, "logits FLOPs", 2, B, c->E, s->n);
    s->weight_bytes = spi_ck_mul3(&c->ck, "logits weight bytes", c->E, s->n, sp_dtype_bytes(sp_lower_table_dtype(c->l->weights)));
    s->act_bytes = spi_ck_mul(&c->ck, "logits activation bytes",
                              spi_ck_add(&c->ck, "logits activation bytes", spi_ck_mul(&c->ck, "logits input elements", B, c->E),
                                         spi_ck_mul(&c->ck, "logits elements", B, s->n)),
                              c->act_b);
    if (c->n > 1)
        emit_coll(c, ss, SP_COLL_ALLGATHER, SP_BUF_LOGITS_ALL, SP_BUF_LOGITS, "", "xyz", B, c->Vp / c->n, ad, 0);
}

/* Blocks [i·a, (i+1)·a) of a length split in n blocks of a meet at most
 * this many blocks of size b (the same length split in blocks of b). */
static int64_t blocks_met(int64_t a, int64_t n, int64_t b)
{
    int64_t most = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = (i * a + a - 1) / b - i * a / b + 1;
        if (k > most) most = k;
    }
    return most;
}

/* The most peers one chip of this stage meets at its boundary with stage
 * nb (the stage before or after, of its own mesh): its block of rows
 * (sequences over N) and columns (E over act) against the neighbour's. */
static int p2p_peers(ctx *c, int nb)
{
    sp_layout v = *c->l;
    sp_layout_stage_mesh(c->l, nb, v.mesh);
    shard o;
    phase_shard(&v, c->l->phase[c->p->phase].ffn, &o);
    int64_t mb = c->seqs * c->sh.nN;   /* sequences of the micro-batch (or pass) */
    if (mb % o.nN || c->E % o.nact) return 1;   /* the neighbour's own lowering refuses its mesh */
    int64_t rows = blocks_met(mb / c->sh.nN, c->sh.nN, mb / o.nN);
    int64_t cols = blocks_met(c->E / c->sh.nact, c->sh.nact, c->E / o.nact);
    return (int)(rows * cols);
}

static sp_step *emit_p2p(ctx *c, sp_steps *ss, sp_step_kind k)
{
    sp_step *s = emit(ss, k);
    int64_t Ec = c->E / c->sh.nact;
    s->src = s->dst = SP_BUF_X;
    s->m = c->T;
    s->n = Ec;
    s->coll.kind = SP_COLL_SENDRECV;
    s->coll.group = 2;
    if (sp_layout_hetero(c->l)) {
        /* the neighbour stage has a mesh of its own: the blocks (sp_lower_stage_xfer) follow
         * this stage's row blocks (batch_axes) and column blocks (axes) */
        axcpy(s->axes, c->sh.act);
        axcpy(s->batch_axes, c->sh.N);
        s->coll.group = 1 + p2p_peers(c, k == SP_STEP_SEND ? c->p->stage + 1 : c->p->stage - 1);
    }
    s->coll.rows = c->T;
    s->coll.cols = Ec;
    s->coll.elems = spi_ck_mul(&c->ck, "pipeline transfer elements", c->T, Ec);
    s->coll.dtype = c->p->shape.act_dtype;
    int64_t bytes = spi_ck_mul(&c->ck, "pipeline transfer bytes", s->coll.elems, c->act_b);
    if (k == SP_STEP_SEND) s->coll.bytes_sent = bytes;
    else s->coll.bytes_recv = bytes;
    return s;
}

/* ---- buffer sizes: every buffer must hold the largest tensor any step puts in it ---- */
/* buf[b] raised to elems × eb bytes (buf: a program's buf_bytes, or its layer part's alone) */
static void need(spi_ckd *ck, int64_t *buf, sp_buf b, int64_t elems, int eb)
{
    if (b == SP_BUF_NONE) return;
    int64_t bytes = spi_ck_mul(ck, "buffer bytes", elems, eb);
    if (bytes > buf[b]) buf[b] = bytes;
}

/* query rows of an ATTN or KV_STORE step: packed (ragged) or sequences × tokens */
static int64_t step_rows(spi_ckd *ck, const sp_step *s)
{
    return s->ragged ? s->m : spi_ck_mul(ck, "buffer elements", s->batch, s->q_len);
}

/* the buffer bytes the steps of ss need, raised into buf (SP_BUF_COUNT sizes) */
static void size_buffers(spi_ckd *ck, const sp_program *p, const sp_steps *ss, int64_t E, int64_t *buf)
{
    int ab = sp_dtype_bytes(p->shape.act_dtype);
#define EL(a, b) spi_ck_mul(ck, "buffer elements", (a), (b))
    for (int i = 0; i < ss->n; i++) {
        const sp_step *s = &ss->s[i];
        const sp_coll *co = &s->coll;
        switch (s->kind) {
        case SP_STEP_MATMUL: need(ck, buf, s->dst, EL(s->m, s->n), ab); need(ck, buf, s->src, EL(s->m, s->k), ab); break;
        case SP_STEP_NORM_STATS: need(ck, buf, s->dst, EL(s->m, 2), 4); need(ck, buf, s->src, EL(s->m, s->n), ab); break;
        case SP_STEP_SLICE: need(ck, buf, s->dst, EL(s->m, s->n), ab); need(ck, buf, s->src, EL(s->k, s->n), ab); break;
        case SP_STEP_EMBED: need(ck, buf, s->dst, EL(s->m, E), ab); break;
        case SP_STEP_LOGITS: need(ck, buf, s->dst, EL(s->m, s->n), ab); break;
        case SP_STEP_ACT: case SP_STEP_ADD: case SP_STEP_BIAS: case SP_STEP_POS:
            need(ck, buf, s->dst, EL(s->m, s->n), ab);
            if (s->src) need(ck, buf, s->src, EL(s->m, s->n), ab);
            if (s->src2) need(ck, buf, s->src2, EL(s->m, s->n), ab);
            break;
        case SP_STEP_ATTN:
            need(ck, buf, s->dst, EL(step_rows(ck, s), s->heads * s->d_head), ab);
            need(ck, buf, s->src, EL(step_rows(ck, s), s->heads * s->d_head), ab);
            if (!s->from_cache) {
                need(ck, buf, s->src2, EL(step_rows(ck, s), s->kv_heads_src * s->d_head), ab);
                need(ck, buf, s->src3, EL(step_rows(ck, s), s->kv_heads_src * s->d_head), ab);
            }
            break;
        case SP_STEP_KV_STORE:
            need(ck, buf, s->src2, EL(step_rows(ck, s), s->kv_heads_src * s->d_head), ab);
            need(ck, buf, s->src3, EL(step_rows(ck, s), s->kv_heads_src * s->d_head), ab);
            break;
        case SP_STEP_SEND: case SP_STEP_RECV: need(ck, buf, SP_BUF_X, co->elems, ab); break;
        case SP_STEP_ROUTE:
            /* the per-expert token counts (own, received), then the (m, k) routing choices */
            need(ck, buf, s->dst, spi_ck_add(ck, "routing bytes", EL(EL(s->m, s->k), SP_ROUTE_BYTES), EL(s->n, 16)), 1);
            need(ck, buf, s->src, EL(s->m, s->n), ab);
            break;
        case SP_STEP_GATE_SCALE:
            need(ck, buf, s->dst, EL(s->m, s->n), ab);
            need(ck, buf, s->src, s->m, ab);
            break;
        case SP_STEP_DISPATCH:
            need(ck, buf, s->dst, EL(EL(s->experts, s->capacity), s->n), ab);
            need(ck, buf, s->src, EL(s->m, s->src_cols ? s->src_cols : s->n), ab);
            break;
        case SP_STEP_COMBINE:
            need(ck, buf, s->dst, EL(s->m, s->n), ab);
            need(ck, buf, s->src, EL(EL(s->experts, s->capacity), s->n), ab);
            break;
        case SP_STEP_COLL: {
            int eb = co->is_weight ? sp_dtype_bytes(co->dtype) : (co->dtype == SP_DT_F32 ? 4 : ab);
            int64_t big = EL(co->elems, co->group);
            switch (co->kind) {
            case SP_COLL_ALLGATHER: need(ck, buf, s->dst, big, eb); if (!co->is_weight) need(ck, buf, s->src, co->elems, eb); break;
            case SP_COLL_REDUCESCATTER: need(ck, buf, s->dst, co->elems, eb); need(ck, buf, s->src, big, eb); break;
            case SP_COLL_ALLREDUCE: need(ck, buf, s->dst, co->elems, eb); break;
            case SP_COLL_ALLTOALL: need(ck, buf, s->dst, co->elems, eb); need(ck, buf, s->src, co->elems, eb); break;
            default: break;
            }
            break;
        }
        default: break;
        }
    }
#undef EL
}

/* Fills the context and the program's scalar fields and checks that the
 * layout applies; emits nothing.  quiet: no message (the planner probes
 * many layouts that do not apply). */
/* the blocks decode's KV cache splits a micro-batch's sequences into (kv_batch_axes) */
static int kv_blocks(const ctx *c, const sp_layout *l)
{
    return l->phase[SP_PHASE_DECODE].attn == SP_AL_BATCH ? (int)c->n : c->shd.nN;
}

#define BAD(...) return quiet ? SP_EINVAL : spi_fail(SP_EINVAL, __VA_ARGS__)
/* Whether the last of setup's checks that failed on this thread read
 * neither of the prefill phase's layouts (l->phase[SP_PHASE_PREFILL].ffn,
 * .attn, nor a shard of them): spi_lower_failed_decode_alone.  BAD leaves
 * it 0 (setup clears it first); BAD_DEC(1, ...) marks a check that reads
 * no such thing, BAD_DEC(cond, ...) one that reads none when cond holds. */
static _Thread_local int fail_dec_alone;
#define BAD_DEC(dec, ...)                                                                                             \
    do {                                                                                                            \
        fail_dec_alone = (dec);                                                                                     \
        BAD(__VA_ARGS__);                                                                                           \
    } while (0)

int spi_lower_failed_decode_alone(void) { return fail_dec_alone; }

void spi_lower_fail_clear(void) { fail_dec_alone = 0; }

/* a tensor mesh (X·Y·Z) larger than any torus or cluster sp_hw describes (2^24 chips) */
#define SP_LOWER_MAX_MESH (1 << 24)
static sp_status setup(ctx *cp, const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape,
                       const sp_ragged *rg, int64_t step, int stage, sp_program *p, int quiet)
{
    fail_dec_alone = 0;
    if (!m || !l || !shape || !p || phase >= SP_PHASE_COUNT) BAD( "sp_lower: bad arguments");
    if (sp_layout_disaggregated(l))
        BAD("a layout with separate prefill and decode chip groups is lowered group by group "
            "(sp_layout_phase_group), its KV transfer by sp_lower_kv_xfer");
    if (stage < 0 || stage >= l->stages) BAD_DEC(1, "stage %d outside 0..%d", stage, l->stages - 1);
    if (sp_layout_hetero(l)) {
        char why[200];
        if (sp_layout_stage_mesh_check(l, why, sizeof why) != SP_OK) BAD("stage_mesh: %s", why);
        if (rg) BAD("stage_mesh: a ragged batch through stages of their own mesh is not implemented");
    }
    if (shape->batch <= 0 || shape->q_len <= 0 || shape->context < shape->q_len)
        BAD_DEC(1, "shape: batch %lld, tokens %lld, context %lld is not a valid step",
                        (long long)shape->batch, (long long)shape->q_len, (long long)shape->context);
    {   /* a model feature nothing computes: refused, never approximated */
        char why[400];
        const char *field = spi_model_refusal(m, shape->max_context, quiet ? NULL : why, sizeof why);
        if (field) BAD_DEC(1, "model %s: %s: %s", m->name, field, why);
    }
    p->pre.n = p->layer.n = p->post.n = p->dense.n = 0;
    p->phase = phase;
    p->layout = *l;
    if (sp_layout_hetero(l)) {
        /* a stage of its own mesh is lowered on that mesh: the program's layout is the stage's view */
        sp_layout_stage_mesh(l, stage, p->layout.mesh);
        l = &p->layout;
    }
    p->shape = *shape;
    p->stage = stage;
    p->ragged = rg;
    p->step = rg ? step : 0;   /* decode step, or prefill pass (ragged_at) */

    ctx *c = cp;   /* filled in place: the checks run for every layout a search tries */
    memset(c, 0, sizeof *c);
    c->m = m;
    c->l = l;
    c->p = p;
    /* chips of one stage of one replica: each axis is at most 2^20, the product checked */
    c->n = spi_ck_mul3(&c->ck, "tensor mesh chips", l->mesh[0], l->mesh[1], l->mesh[2]);
    if (c->ck.overflow || c->n < 1 || c->n > SP_LOWER_MAX_MESH)
        BAD_DEC(1, "mesh %dx%dx%d: more than %d chips in one tensor mesh", l->mesh[0], l->mesh[1], l->mesh[2],
            SP_LOWER_MAX_MESH);
    /* written in place, not copied: a copy of just-written fields stalls the loads */
    phase_shard(l, l->phase[phase].ffn, &c->sh);
    phase_shard(l, l->phase[SP_PHASE_DECODE].ffn, &c->shd);
    shard prefill_sh;
    if (phase != SP_PHASE_PREFILL) phase_shard(l, l->phase[SP_PHASE_PREFILL].ffn, &prefill_sh);
    const shard *both[SP_PHASE_COUNT] = {phase == SP_PHASE_PREFILL ? &c->sh : &prefill_sh, &c->shd};
    c->one_d = sp_ffn_layout_is_1d(l->phase[phase].ffn);
    if (c->one_d != sp_ffn_layout_is_1d(l->phase[!phase].ffn))
        BAD( "prefill %s and decode %s store weights differently (1D vs 2D); "
                        "a reshard between phases is not supported",
                        sp_ffn_layout_name(l->phase[0].ffn), sp_ffn_layout_name(l->phase[1].ffn));
    c->E = m->d_model;
    c->D = m->d_head;
    c->KVH = m->n_kv_heads;
    c->case_a = (c->KVH % c->n) == 0;
    /* the commonest reason a layout does not apply: decided first */
    c->kv = kv_handoff(c, both[SP_PHASE_PREFILL], c->kv_rows, c->kv_cols);
    if (c->kv == KV_BAD)
        BAD("the KV cache written by prefill (%s/%s) and read by decode (%s/%s) are placed so that no single "
            "collective turns one into the other",
            sp_ffn_layout_name(l->phase[0].ffn), sp_attn_layout_name(l->phase[0].attn),
            sp_ffn_layout_name(l->phase[1].ffn), sp_attn_layout_name(l->phase[1].attn));
    int kv_pair = c->kv;   /* the phases' handoff, whichever phase is lowered */
    if (phase != SP_PHASE_PREFILL) c->kv = KV_DIRECT;
    c->Hp = round_up(m->n_heads, c->n);
    c->Fp = round_up(m->d_ff, c->n);
    c->Fsp = sp_model_shared_ff(m) > 0 ? round_up(sp_model_shared_ff(m), c->n) : 0;
    c->Fdp = sp_model_dense_ff(m) > 0 ? round_up(sp_model_dense_ff(m), c->n) : 0;
    c->Vp = round_up(m->vocab, c->n);
    if (c->E % c->n)
        BAD_DEC(1, "d_model %lld is not divisible by the %lld-chip tensor mesh", (long long)c->E,
                        (long long)c->n);
    if (!c->case_a && c->n % c->KVH)
        BAD_DEC(1, "%lld KV heads and a %lld-chip tensor mesh: one must divide the other",
                        (long long)c->KVH, (long long)c->n);
    int64_t per_replica = shape->batch / l->replicas;
    if (shape->batch % l->replicas || per_replica % l->microbatches)
        BAD_DEC(1, "batch %lld does not split into %d replicas × %d micro-batches",
                        (long long)shape->batch, l->replicas, l->microbatches);
    p->micro_batch = per_replica / l->microbatches;
    p->rope_dims = m->positions == SP_POS_ROPE ? sp_model_rotary_dims(m) : 0;
    /* prefill passes (sp_layout.h): the sequences of one pass, in either phase (both phases'
     * checks run in each); the token passes in prefill, where the prompt is known */
    if (l->prefill_chunk < 0 || l->prefill_tokens < 0)
        BAD_DEC(1, "prefill_chunk %d, prefill_tokens %d: must be positive (0: not chunked)", l->prefill_chunk,
            l->prefill_tokens);
    int64_t pass_seqs = l->prefill_chunk ? l->prefill_chunk : p->micro_batch;
    if (p->micro_batch % pass_seqs)
        BAD_DEC(1, "prefill_chunk=%d does not divide the micro-batch (%lld sequences: batch %lld over %d replicas × %d "
            "micro-batches)", l->prefill_chunk, (long long)p->micro_batch, (long long)shape->batch, l->replicas,
            l->microbatches);
    p->pass_seqs = phase == SP_PHASE_PREFILL ? pass_seqs : p->micro_batch;
    p->passes_seq = p->micro_batch / p->pass_seqs;
    p->passes_tok = 1;
    p->logits = 1;
    if (phase == SP_PHASE_PREFILL && l->prefill_tokens) {
        int64_t P = shape->q_len, pt = l->prefill_tokens;
        if (pt > P) BAD("prefill_tokens=%d: more than the prompt's %lld tokens", l->prefill_tokens, (long long)P);
        if (P % pt) BAD("prefill_tokens=%d does not divide the prompt (%lld tokens)", l->prefill_tokens, (long long)P);
        p->passes_tok = P / pt;
        if (shape->passes_left < 0 || shape->passes_left >= p->passes_tok)
            BAD("prefill pass %lld from the last: the prompt has %lld passes of %lld tokens",
                (long long)shape->passes_left, (long long)p->passes_tok, (long long)pt);
        p->shape.q_len = pt;
        p->shape.context = shape->context - shape->passes_left * pt;
        p->logits = shape->passes_left == 0;
    } else {
        p->shape.passes_left = 0;
    }
    /* one pass's rows: what the program moves and holds */
    const char *chunk_key = l->prefill_chunk ? "prefill_chunk" : "the micro-batch";
    if (p->pass_seqs % c->sh.nN)   /* c->sh: the lowered phase's shard */
        BAD_DEC(phase == SP_PHASE_DECODE, "%s needs %s (%lld sequences) divisible by %d", sp_ffn_layout_name(l->phase[phase].ffn),
             phase == SP_PHASE_PREFILL ? chunk_key : "the micro-batch", (long long)p->pass_seqs, c->sh.nN);
    c->seqs = p->pass_seqs / c->sh.nN;
    c->T = spi_ck_mul(&c->ck, "rows per chip (sequences × tokens)", c->seqs, p->shape.q_len);
    if (c->ck.overflow)
        BAD_DEC(phase == SP_PHASE_DECODE, "%s: %lld × %lld overflows 64 bits", c->ck.what, (long long)c->seqs, (long long)p->shape.q_len);
    if (rg) {
        /* a ragged batch (sp_lower.h, "Ragged batches"): every chip holds every sequence's tokens */
        const sp_ragged *r = rg;
        if (r->n != p->micro_batch)
            BAD("ragged batch of %lld sequences lowered for a micro-batch of %lld (batch %lld over %d replicas × %d "
                "micro-batches: each micro-batch's program takes its own sequences, sp_ragged_micro)", (long long)r->n,
                (long long)p->micro_batch, (long long)shape->batch, l->replicas, l->microbatches);
        /* prefill_chunk: pass i a ragged sub-batch of consecutive sequences (ragged_at), when
         * every chip holds every sequence's slot (no sequence blocks to interleave passes over) */
        if (l->prefill_tokens)
            BAD("ragged batches with prefill_tokens (token passes of each prompt): not implemented "
                "(prefill_chunk is)");
        /* the cache blocks a chunked prefill's passes fill a share of each of (ragged_at; the KV
         * geometry below sets the same; a pass that does not divide so is refused there) */
        p->kv_seqs = p->micro_batch;
        if (l->prefill_chunk && pass_seqs % kv_blocks(c, l) == 0) p->kv_seqs = p->micro_batch / kv_blocks(c, l);
        /* offload_weights streams each layer's weights whatever the tokens: as for a uniform batch.
         * offload_kv: each block's host-held slots' own tokens (ragged_host) */
        /* mixture of experts: the router, dispatch, experts and combine run on the packed tokens
         * (T rows, the slots per expert from T) as every token-parallel step does.  Experts split
         * over replicas: the expert all-to-all joins replicas whose sequences differ, so their
         * micro-batch runs each pass and step together (ragged_peers), priced as the slowest
         * replica's (cost.c, ragged_round); with more than one unit per micro-batch (stages,
         * micro-batches, prefill passes) the cost model's and the simulator's compositions of
         * that lockstep would differ, so those are refused */
        int ep = sp_lower_ragged_lockstep(m, l) > 1;
        if (ep && (l->stages > 1 || l->microbatches > 1 || l->prefill_chunk))
            BAD("ragged batches of model %s with experts=%d and %d stages × %d micro-batches, prefill_chunk %d: not "
                "implemented (the replicas run each pass together; with one stage, one micro-batch and no "
                "prefill_chunk it is)", m->name, l->experts, l->stages, l->microbatches, l->prefill_chunk);
        if (ep && (!r->whole || r->replicas != l->replicas || r->microbatches != l->microbatches))
            BAD("ragged batches of model %s with experts=%d: the program needs its micro-batch's place in the batch "
                "(sp_ragged_micro), whose replicas run it together", m->name, l->experts);
        for (int ph = 0; ph < SP_PHASE_COUNT; ph++) {
            if (both[ph]->nN > 1 && both[ph]->nG > 1 && l->phase[ph].attn == SP_AL_BATCH)
                BAD("ragged batches with %s and batch-sharded attention in %s (sequence blocks split again over "
                    "the head group): not implemented (head-sharded attention is)", sp_ffn_layout_name(l->phase[ph].ffn),
                    sp_phase_name((sp_phase)ph));
        }
        /* the handoff a ragged batch takes: none, or prefill's every KV head of every sequence sliced
         * into decode's sequence blocks (KV_SLICE: KV heads replicated in prefill, batch-sharded
         * attention in decode) */
        int slice_ok = kv_pair == KV_SLICE && both[SP_PHASE_PREFILL]->nN == 1 &&
                       axes_size(l, c->kv_rows) == (int)c->n;
        if (kv_pair != KV_DIRECT && axes_size(l, c->kv_rows) > 1 && !slice_ok)
            BAD("ragged batches with a KV handoff between prefill (%s/%s) and decode (%s/%s): not implemented "
                "(the same attention layout in both phases is, and head-sharded prefill with replicated KV heads "
                "before batch-sharded decode)", sp_ffn_layout_name(l->phase[0].ffn),
                sp_attn_layout_name(l->phase[0].attn), sp_ffn_layout_name(l->phase[1].ffn),
                sp_attn_layout_name(l->phase[1].attn));
        if (shape->max_context < r->max_context)
            BAD("ragged batch: KV cache of %lld tokens per sequence, the longest sequence needs %lld",
                (long long)shape->max_context, (long long)r->max_context);
        if (phase == SP_PHASE_PREFILL) {
            if (shape->q_len != r->max_prompt || shape->context != r->max_prompt)
                BAD("ragged prefill: shape tokens %lld, context %lld; the longest prompt is %lld",
                    (long long)shape->q_len, (long long)shape->context, (long long)r->max_prompt);
            if (step < 0 || step >= p->passes_seq)
                BAD("ragged prefill pass %lld: the micro-batch's %lld sequences run in %lld passes of %lld",
                    (long long)step, (long long)r->n, (long long)p->passes_seq, (long long)p->pass_seqs);
            /* the pass's sequences (pass_seqs of them; all of them unchunked), packed */
            c->seqs = p->pass_seqs;
            c->T = 0;
            for (int64_t b = 0, q, pos0; b < r->n; b++)
                if (ragged_at(p, b, &q, &pos0)) c->T += q;
        } else {
            /* experts over replicas: the steps of every replica's micro-batch (ragged_peers) */
            int64_t last = r->max_gen, t_max, t_sum;
            sp_status pe = ep ? ragged_peers(p, &t_max, &t_sum, &last) : SP_OK;
            if (pe) return pe;
            if (shape->q_len != 1 || step < 1 || step > last)
                BAD("ragged decode step %lld (tokens %lld): steps run 1 .. %lld, one token each",
                    (long long)step, (long long)shape->q_len, (long long)last);
            int64_t ctx_max = 1;   /* no sequence left (ragged_peers): its q_len alone, attending nothing */
            for (int64_t b = 0; b < r->n; b++)
                if (sp_ragged_active(r, b, step) && r->prompt[b] + step > ctx_max) ctx_max = r->prompt[b] + step;
            c->seqs = c->T = p->pass_seqs = sp_ragged_active_count(r, step);
            p->shape.context = ctx_max;
        }
        /* weight-gathered FFNs: each chip's rows are its block's over N, the fullest block's many
         * (sp_lower.h, "Ragged batches"); decode: one row per sequence taking part */
        p->rag_blocks = c->sh.nN;
        if (c->sh.nN > 1) {
            int64_t seen, tok;
            ragged_blk_max(c, c->sh.nN, &c->T, &seen, &tok);
            c->seqs = phase == SP_PHASE_PREFILL ? p->pass_seqs / c->sh.nN : c->T;   /* the pass's, per block */
        }
        p->rag_rows = c->T;
        p->rag_seqs = c->seqs;
    }
    /* attention batch sharding splits a chip's sequences over the head group; a prefill
     * pass's sequences split like decode's micro-batch too (they fill its KV cache) */
    for (int ph = 0; ph < SP_PHASE_COUNT; ph++) {
        int64_t seqs = ph == SP_PHASE_PREFILL ? pass_seqs : p->micro_batch;
        const char *what = ph == SP_PHASE_PREFILL ? chunk_key : "the micro-batch";
        if (l->phase[ph].attn == SP_AL_BATCH && (seqs % (both[ph]->nN * both[ph]->nG)))
            BAD_DEC(ph == SP_PHASE_DECODE, "%s attention in %s needs %s (%lld sequences) divisible by %d",
                            sp_attn_layout_name(l->phase[ph].attn), sp_phase_name((sp_phase)ph), what,
                            (long long)seqs, both[ph]->nN * both[ph]->nG);
    }
    {
        int kvdiv = kv_blocks(c, l);
        if (pass_seqs % kvdiv && l->prefill_chunk)   /* kv_blocks: decode's layout alone */
            BAD_DEC(1, "prefill_chunk=%d: decode's KV cache (%s/%s) splits sequences %d ways; a pass must fill whole "
                "blocks of it", l->prefill_chunk, sp_ffn_layout_name(l->phase[1].ffn),
                sp_attn_layout_name(l->phase[1].attn), kvdiv);
        if (pass_seqs % kvdiv)
            BAD_DEC(1, "decode's KV cache (%s/%s) splits sequences %d ways: the micro-batch (%lld sequences) does not "
                "divide so", sp_ffn_layout_name(l->phase[1].ffn), sp_attn_layout_name(l->phase[1].attn), kvdiv,
                (long long)pass_seqs);
    }
    if (l->prefill_tokens && (l->phase[0].attn != l->phase[1].attn || strcmp(both[0]->N, c->shd.N) ||
                              strcmp(both[0]->G, c->shd.G)))
        BAD("prefill_tokens=%d: incremental prefill attends to the KV cache, which is kept in decode's layout "
            "(%s/%s); prefill's (%s/%s) shards attention differently (use the same layout in both phases)",
            l->prefill_tokens, sp_ffn_layout_name(l->phase[1].ffn), sp_attn_layout_name(l->phase[1].attn),
            sp_ffn_layout_name(l->phase[0].ffn), sp_attn_layout_name(l->phase[0].attn));
    c->act_b = sp_dtype_bytes(shape->act_dtype);
    c->w_b = sp_dtype_bytes(l->weights);
    if (m->n_experts > 0) {
        /* experts split over the replicas (sp_layout.h) */
        int N = l->experts;
        if (N < 1 || m->n_experts % N || (N != 1 && N != l->replicas))
            BAD_DEC(1, "experts=%d: must divide the model's %lld experts and be 1 or replicas (%d)", N,
                (long long)m->n_experts, l->replicas);
        if (!(l->capacity >= 1)) BAD_DEC(1, "capacity=%g: the capacity factor must be >= 1", l->capacity);
        for (int ph = 0; ph < SP_PHASE_COUNT; ph++)
            if (both[ph]->nN > 1)
                BAD_DEC(ph == SP_PHASE_DECODE, "%s in %s: weight-gathered expert FFNs are not implemented (ws1d and ws2d are)",
                    sp_ffn_layout_name(l->phase[ph].ffn), sp_phase_name((sp_phase)ph));
        c->experts_local = m->n_experts / N;
        double distinct, q_max;
        /* the tokens routed in one step over the N replicas, and those that size the slots (a
         * ragged batch's replicas differ: the most of any, ragged_peers, so every source's
         * blocks of the all-to-all have the same slots) */
        int64_t t_cap = c->T, t_all = spi_ck_mul(&c->ck, "tokens routed per step", c->T, N), last;
        sp_status pe = rg && N > 1 ? ragged_peers(p, &t_cap, &t_all, &last) : SP_OK;
        if (pe) return pe;
        sp_model_moe_routing(m, (double)t_all, &distinct, &q_max);
        c->experts_active = distinct / N;
        double sl = ceil(l->capacity * (double)t_cap * q_max);
        c->slots = sl >= (double)t_cap ? t_cap : sl < 1 ? 1 : (int64_t)sl;
    } else if (l->experts != 1 || l->capacity != 1.0) {
        BAD_DEC(1, "experts=%d, capacity=%g: model %s has no experts", l->experts, l->capacity, m->name);
    }
    p->heads_padded = c->Hp;
    p->ffn_padded = c->Fp;
    p->vocab_padded = c->Vp;

    /* KV cache geometry: the decode layout's */
    {
        sp_attn_layout dal = l->phase[SP_PHASE_DECODE].attn;
        const shard *d = &c->shd;
        p->kv_repl = 0;
        p->kv_head_axes[0] = '\0';
        if (dal == SP_AL_BATCH) {
            axcpy(p->kv_batch_axes, "xyz");
            p->kv_seqs = p->micro_batch / c->n;
            p->kv_pass_seqs = p->pass_seqs / c->n;
            p->kv_heads_cache = c->KVH;
        } else {
            axcpy(p->kv_batch_axes, d->N);
            p->kv_seqs = p->micro_batch / d->nN;
            p->kv_pass_seqs = p->pass_seqs / d->nN;
            if (rg) p->kv_pass_seqs = p->kv_seqs;   /* a pass indexes the slots of the whole batch */
            axcpy(p->kv_head_axes, d->G);
            if (c->case_a) {
                p->kv_heads_cache = c->KVH / d->nG;
            } else {
                p->kv_heads_cache = kv_heads_needed(m, c->Hp, d->nG);
                p->kv_repl = 1;
            }
        }
    }

    int64_t first;
    {
        char why[160];
        if (sp_layout_split_check(l, m->n_layers, why, sizeof why) != SP_OK) BAD_DEC(1, "stage_layers: %s", why);
    }
    sp_layout_stage_layers(l, m->n_layers, stage, &first, &p->n_layers);
    if (p->n_layers < 1)
        BAD_DEC(1, "%d stages for %lld layers leaves stage %d empty", l->stages, (long long)m->n_layers, stage);
    p->first_layer = first;
    p->n_dense_layers = 0;
    p->moe_every = sp_model_dense_ff(m) > 0 ? m->moe_every : 1;
    if (sp_model_dense_ff(m) > 0) {
        /* MoE layers are (g + 1) % k == 0 (sp_model_layer_is_moe): those up to first + n, less those before first */
        int64_t k = m->moe_every;
        p->n_dense_layers = p->n_layers - ((first + p->n_layers) / k - first / k);
    }

    /* offload: which layers' weights and which sequences' KV live in host memory */
    p->w_streamed = p->kv_host_seqs = 0;
    memset(p->w_kind_streamed, 0, sizeof p->w_kind_streamed);
    c->w_any = 0;
    if (sp_layout_offloads(l)) {
        char why[160];
        if (sp_layout_offload_check(l, m->n_layers, why, sizeof why) != SP_OK) BAD("%s", why);
        p->w_streamed = sp_layout_offload_layers(l, stage);
        for (int k = 0; k < SP_WKIND_COUNT; k++) {
            p->w_kind_streamed[k] = sp_layout_offload_kind_layers(l, stage, (sp_wkind)k);
            for (int s = 0; s < l->stages; s++)
                if (sp_layout_offload_kind_layers(l, s, (sp_wkind)k) > 0) c->w_any |= 1 << k;
        }
        if (c->w_any && sp_model_dense_ff(m) > 0)
            BAD("offload_weights (offload_attn, offload_ffn) for model %s, whose layers differ (dense layers between "
                "MoE ones): not implemented",
                m->name);
        if (l->offload_kv > 0) {
            if (l->prefill_chunk || l->prefill_tokens)
                BAD("offload_kv with prefill_chunk or prefill_tokens: not implemented (prefill writes whole prompts "
                    "of host-held sequences)");
            double h = l->offload_kv * (double)p->kv_seqs;
            if (fabs(h - nearbyint(h)) > 1e-9 * (double)p->kv_seqs || h < 1)
                BAD("offload_kv=%g of the %lld KV sequences each chip holds per micro-batch is not a whole number "
                    "of sequences (>= 1)", l->offload_kv, (long long)p->kv_seqs);
            p->kv_host_seqs = (int64_t)nearbyint(h);
        }
    }
    return SP_OK;
}
#undef BAD
#undef BAD_DEC

sp_status sp_lower_check(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape, int stage)
{
    return sp_lower_check_key(m, l, phase, shape, stage, NULL);
}

/* The lowering's checks of one (not disaggregated) layout for sp_layout_check:
 * both phases of stage 0, with a message (sp_lower, not the quiet checks). */
static sp_status layout_lowers(const sp_layout *l, const sp_model *m, int64_t batch, sp_error *err)
{
    int64_t q = l->prefill_tokens > 0 ? l->prefill_tokens : 1;
    sp_shape sh = {.batch = batch, .q_len = q, .context = q, .max_context = q, .act_dtype = SP_DT_BF16};
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        static _Thread_local sp_program prog;   /* ~sizeof(sp_program): too large for the stack */
        if (sp_lower(m, l, (sp_phase)p, &sh, 0, &prog) != SP_OK)
            return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "", "%s", sp_last_error());
    }
    return SP_OK;
}

sp_status sp_layout_check(const sp_layout *l, const sp_model *m, const sp_hw *hw, int64_t chips, int64_t batch,
                          sp_error *err)
{
    sp_status st = sp_layout_check_base(l, m, hw, chips, batch, err);
    if (st != SP_OK) return st;
    if (sp_layout_hetero(l)) {
        /* stages of their own meshes: every stage lowers on its own mesh (the
         * divisibility of its dimensions), each phase */
        sp_shape sh = {.batch = batch, .q_len = 1, .context = 1, .max_context = 1, .act_dtype = SP_DT_BF16};
        sp_program *prog = malloc(sizeof *prog);
        if (!prog) return spi_error_set(err, SP_ENOMEM, "<layout>", 0, 0, "stage_mesh", "out of memory");
        char b[256] = "";
        for (int s = 0; s < l->stages && !st; s++)
            for (int p = 0; p < SP_PHASE_COUNT && !st; p++)
                if ((st = sp_lower(m, l, (sp_phase)p, &sh, s, prog)) != SP_OK)
                    snprintf(b, sizeof b, "stage %d: %s", s, sp_last_error());
        free(prog);
        if (st) return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "stage_mesh", "%s", b);
        return SP_OK;
    }
    if (!sp_layout_disaggregated(l)) return layout_lowers(l, m, batch, err);
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        sp_layout g;
        sp_layout_phase_group(l, (sp_phase)p, &g);
        if ((st = layout_lowers(&g, m, batch, err)) != SP_OK) {
            spi_error_prefix(err, sp_phase_name((sp_phase)p), "group");
            return st;
        }
    }
    return SP_OK;
}

/* The layer part's sizes as a job's last lowering of program p found them
 * (size_buffers, size_scratch and its tallest matmul operand, of the layer
 * part alone): spi_lower_finish_keep_layer takes them for the layer it keeps
 * in p instead of sizing it again.  They read the layer's steps, the
 * activation dtype and the layer weights' storage (stage_storage: the same
 * on every stage of a mesh), so the kept layer (the same layout, phase and
 * shape, the stage's mesh) has the same sizes.  A plan of palm-540b on 64
 * TPU v4 keeps the layer of 29k of the 50k programs it lowers.  Only a
 * layout of more than one stage fills them (a one-stage layout has no later
 * stage to keep its layer for; a keep that finds none sizes the layer). */
typedef struct layer_sizes {
    const sp_program *p;   /* the program whose layer these are (NULL: none) */
    int n;                 /* its layer steps */
    int64_t buf[SP_BUF_COUNT], scr[SP_SCR_COUNT], k_max;
} layer_sizes;

/* sp_lower_begin's context, for sp_lower_finish (sp_lower.h) */
struct sp_lower_job {
    const sp_program *p;   /* NULL: none pending */
    ctx c;
    storage_slot *storage;   /* JOB_STORAGE slots: stage_storage's memo (job_storage; NULL until the first lowering) */
    unsigned char storage_used[JOB_STORAGE];   /* which of them hold a set (zeroed with the job) */
    layer_sizes lsz;         /* the layer part's sizes of the job's last lowering (emit_program) */
};

sp_status sp_lower_job_create(sp_lower_job **out)
{
    if (!out) return spi_fail(SP_EINVAL, "sp_lower_job_create: NULL argument");
    if (!(*out = calloc(1, sizeof **out))) return spi_fail(SP_ENOMEM, "sp_lower_job_create: out of memory");
    return SP_OK;
}

/* The job's storage memo, made on its first lowering (a job that only
 * checks or prices never pays for it); its slots NULL when they cannot be made: the
 * thread's then serves (stage_storage) */
static storage_memo job_storage(sp_lower_job *job)
{
    /* not zeroed (storage_used says which slots hold a set): a page costs when a slot on it is
     * first filled, and that write is its first touch */
    if (!job->storage) job->storage = malloc(JOB_STORAGE * sizeof *job->storage);
    return (storage_memo){job->storage, job->storage_used, JOB_STORAGE};
}

void sp_lower_job_free(sp_lower_job *job)
{
    if (!job) return;
    free(job->storage);
    free(job);
}

static sp_status begin_ctx(ctx *c, const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape,
                           int stage, sp_lower_key *key, sp_program *p);

sp_status sp_lower_begin(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape, int stage,
                         sp_lower_key *key, sp_program *p, sp_lower_job *job)
{
    if (!job) return spi_fail(SP_EINVAL, "sp_lower_begin: NULL job");
    job->p = NULL;
    SP_CHECK(begin_ctx(&job->c, m, l, phase, shape, stage, key, p));
    job->p = p;
    return SP_OK;
}

/* sp_lower_begin's checks and key, into c */
static sp_status begin_ctx(ctx *c, const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape,
                           int stage, sp_lower_key *key, sp_program *p)
{
    if (setup(c, m, l, phase, shape, NULL, 0, stage, p, 1) != SP_OK) return SP_EINVAL;
    if (!key) return SP_OK;
    /* the layout copied whole (its padding as the caller's, as a struct copy
     * would), the rest zeroed, padding included: the memo compares keys
     * with memcmp */
    _Static_assert(offsetof(sp_lower_key, layout) == 0, "the key starts with the layout");
    memcpy(&key->layout, &p->layout, sizeof key->layout);   /* a stage of its own mesh: its view (that mesh) */
    memset((char *)key + sizeof key->layout, 0, sizeof *key - sizeof key->layout);
    memset(&key->layout.phase[!phase], 0, sizeof key->layout.phase[!phase]);
    if (phase == SP_PHASE_DECODE) key->layout.prefill_chunk = key->layout.prefill_tokens = 0;   /* prefill's passes */
    /* the stage's layers are in the key (n_layers, first, last): the split of
     * the other stages is not, so every split shares the stage's price */
    memset(key->layout.stage_layers, 0, sizeof key->layout.stage_layers);
    /* likewise the stage's offloaded layers, not the other stages' */
    key->w_streamed = p->w_streamed;
    memcpy(key->w_kind, p->w_kind_streamed, sizeof key->w_kind);
    key->w_any = c->w_any;
    key->layout.offload_stages = 0;
    memset(key->layout.offload_layers, 0, sizeof key->layout.offload_layers);
    memset(key->layout.offload_kind_stages, 0, sizeof key->layout.offload_kind_stages);
    memset(key->layout.offload_kind_layers, 0, sizeof key->layout.offload_kind_layers);
    key->shape.batch = shape->batch;   /* field by field: the key's padding stays zero */
    key->shape.q_len = shape->q_len;
    key->shape.context = shape->context;
    key->shape.max_context = shape->max_context;
    key->shape.act_dtype = shape->act_dtype;
    key->shape.passes_left = shape->passes_left;
    key->first_stage = stage == 0;
    key->last_stage = stage == l->stages - 1;
    key->n_layers = p->n_layers;
    key->moe_phase = sp_model_dense_ff(m) > 0 ? p->first_layer % m->moe_every : 0;
    key->kv_seqs = p->kv_seqs;
    key->kv_heads_cache = p->kv_heads_cache;
    /* not p->kv_repl: only the executor reads it (which heads a chip stores) */
    /* The handoff (emit_attention) and what pins down its axes: the mode and
     * the cache's axes as they are, when prefill emits one (a mode other
     * than direct over more than one chip).  Otherwise the program reads the
     * cache's axes only through their sizes (the KV store's heads and
     * blocks) and copies them into the KV store step, where only the
     * executor reads them: the key keeps the axes of more than one chip
     * (mesh 1x2x32: "x"/"zy" and ""/"zyx" lower to the same steps but for
     * those strings) and no mode, so that such prefill programs share a
     * price (a plan of palm-540b on 64 TPU v4, one thread: 58.6k programs
     * lowered and priced -> 51.4k). */
    int handoff = c->kv != KV_DIRECT && axes_size(c->l, c->kv_rows) > 1;
    key->kv_mode = handoff ? c->kv : KV_DIRECT;
    if (handoff) {
        axcpy(key->kv_batch_axes, p->kv_batch_axes);
        axcpy(key->kv_head_axes, p->kv_head_axes);
    } else {
        axes_wide(c->l, p->kv_batch_axes, key->kv_batch_axes);
        axes_wide(c->l, p->kv_head_axes, key->kv_head_axes);
    }
    return SP_OK;
}

sp_status sp_lower_check_key(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape, int stage,
                             sp_lower_key *key)
{
    static _Thread_local sp_program scratch;   /* the checks write only its scalar fields */
    ctx c;
    return begin_ctx(&c, m, l, phase, shape, stage, key, &scratch);
}

/* scr[slot] raised to bytes (a checked product; scr: a program's scratch_bytes, or its layer part's alone) */
static void scr_max(int64_t *scr, sp_scr slot, int64_t bytes)
{
    if (bytes > scr[slot]) scr[slot] = bytes;
}
static void need_scr(sp_program *p, sp_scr slot, int64_t bytes) { scr_max(p->scratch_bytes, slot, bytes); }

/* The executor's scratch for the steps of ss (see sp_scr): what it copies
 * into while it packs a collective, runs attention, applies positions or
 * reads a gathered INT8/FP8 weight's scales.  q/k/v are fp32 rows of the
 * activations' dtype width (ab). */
/* into scr (SP_SCR_COUNT sizes), and *k_max raised to the tallest MATMUL operand of ss */
static void size_scratch(spi_ckd *ck, const sp_program *p, const sp_steps *ss, int64_t *scr, int64_t *k_max)
{
#define SCR(...) spi_ck_mul4(ck, "scratch bytes", __VA_ARGS__)
    int ab = sp_dtype_bytes(p->shape.act_dtype);
    const sp_weight_spec *wq = &p->wspec[SP_W_Q];
    int padded_heads = wq->present && wq->cols_real < wq->cols;   /* some chip's q block runs past the real heads */
    for (int i = 0; i < ss->n; i++) {
        const sp_step *s = &ss->s[i];
        const sp_coll *co = &s->coll;
        int64_t rows, D = s->d_head;   /* rows: attention's and the KV store's */
        switch (s->kind) {
        case SP_STEP_COLL: {
            int64_t blk = spi_ck_mul(ck, "scratch bytes", co->elems, sp_dtype_bytes(co->dtype));
            if (co->kind == SP_COLL_ALLGATHER || co->kind == SP_COLL_REDUCESCATTER) scr_max(scr, SP_SCR_PACK, spi_ck_mul(ck, "scratch bytes", co->group, blk));
            if (co->kind == SP_COLL_ALLTOALL) {
                scr_max(scr, SP_SCR_PACK, blk);
                scr_max(scr, SP_SCR_PACK2, blk);
            }
            break;
        }
        case SP_STEP_ATTN:
            rows = step_rows(ck, s);
            scr_max(scr, SP_SCR_Q, SCR(rows, s->heads, D, ab));
            scr_max(scr, SP_SCR_POS, spi_ck_mul(ck, "scratch bytes", rows, 8));
            scr_max(scr, SP_SCR_SCORES, spi_ck_mul(ck, "scratch bytes", s->context, 4));
            if (!s->from_cache) scr_max(scr, SP_SCR_K, SCR(rows, s->kv_heads_src, D, ab));
            if (s->from_cache && padded_heads) {
                /* the real heads computed densely: queries in V, outputs in K */
                scr_max(scr, SP_SCR_K, SCR(rows, s->heads, D, ab));
                scr_max(scr, SP_SCR_V, SCR(rows, s->heads, D, ab));
            }
            break;
        case SP_STEP_KV_STORE:
            rows = step_rows(ck, s);
            scr_max(scr, SP_SCR_K, SCR(rows, s->kv_heads, D, ab));
            scr_max(scr, SP_SCR_V, SCR(rows, s->kv_heads, D, ab));
            scr_max(scr, SP_SCR_POS, spi_ck_mul(ck, "scratch bytes", rows, 8));
            break;
        case SP_STEP_POS: scr_max(scr, SP_SCR_POS, spi_ck_mul(ck, "scratch bytes", s->m, 8)); break;
        case SP_STEP_MATMUL:
            if (s->k > *k_max) *k_max = s->k;
            if (s->wbuf && (p->wspec[s->weight].dtype == SP_DT_INT8 || p->wspec[s->weight].dtype == SP_DT_FP8))
                scr_max(scr, SP_SCR_SCALES, s->n * 4);
            break;
        case SP_STEP_LOGITS:
            /* the last stage samples (or reads back) one row at a time */
            scr_max(scr, SP_SCR_SAMPLE, p->vocab_padded * SP_SAMPLE_CAND_BYTES);
            scr_max(scr, SP_SCR_LOGITS_ROW, p->vocab_padded * 4);
            break;
        default: break;
        }
    }
#undef SCR
}

/* ---- offload (sp_lower.h, "Offload") ---- */
/* one host-held sequence's K and V of one layer at `tokens` positions */
static int64_t kv_host_tok_bytes(ctx *c)
{
    return spi_ck_mul4(&c->ck, "host bytes per step", 2 * c->p->kv_host_seqs, c->p->kv_heads_cache, c->D,
                       sp_dtype_bytes(c->l->kv));
}

/* a load into dst; a weights load (dst SP_BUF_WSTREAM) copies part k of a layer's weights */
static sp_step *emit_host_load(ctx *c, sp_steps *ss, sp_buf dst, int on, sp_wkind k)
{
    sp_program *p = c->p;
    sp_step *s = emit(ss, SP_STEP_HOST_LOAD);
    s->dst = dst;
    s->on = on;
    s->context = p->shape.context;
    if (dst == SP_BUF_WSTREAM) {
        s->wkind = k;
        s->host_bytes = p->kind_weight_bytes[k];
    } else {
        /* the stored tokens: every position before this pass's */
        s->q_len = p->shape.q_len;
        s->batch = p->kv_host_seqs;
        s->kv_heads = p->kv_heads_cache;
        s->d_head = c->D;
        s->host_tok_bytes = kv_host_tok_bytes(c);
        s->host_bytes = spi_ck_mul(&c->ck, "host bytes per step", s->host_tok_bytes, p->shape.context - p->shape.q_len);
        if (p->ragged) {
            /* each host-held sequence taking part: its own stored tokens (ragged_host), one more per
             * token of context */
            int64_t n, stored, rows, one = kv_host_tok_bytes(c) / p->kv_host_seqs;
            ragged_host_max(p, &n, &stored, &rows);
            s->ragged = 1;
            s->batch = n;
            axcpy(s->batch_axes, p->kv_batch_axes);
            s->host_tok_bytes = spi_ck_mul(&c->ck, "host bytes per step", one, n);
            s->host_bytes = spi_ck_mul(&c->ck, "host bytes per step", one, stored);
        }
    }
    return s;
}

/* decode reads the host-held sequences' cache; prefill (whole prompts: kv offload refuses
 * chunked prefill) only writes it */
static int kv_loads(const ctx *c) { return c->p->kv_host_seqs > 0 && c->p->phase == SP_PHASE_DECODE; }

static void emit_offload_pre(ctx *c, sp_steps *ss)
{
    for (int k = 0; k < SP_WKIND_COUNT; k++)
        if (c->p->w_kind_streamed[k] > 0) emit_host_load(c, ss, SP_BUF_WSTREAM, SP_ON_EVERY, (sp_wkind)k);
    if (kv_loads(c)) emit_host_load(c, ss, SP_BUF_KVSTREAM, SP_ON_EVERY, SP_WKIND_ATTN);
}

static void emit_offload_layer(ctx *c, sp_steps *ss)
{
    if (c->w_any) {
        sp_step *w = emit(ss, SP_STEP_HOST_WAIT);
        w->src = SP_BUF_WSTREAM;
        w->on = SP_ON_STREAMED;
        for (int k = 0; k < SP_WKIND_COUNT; k++)
            if (c->w_any & 1 << k) emit_host_load(c, ss, SP_BUF_WSTREAM, SP_ON_STREAM_NEXT, (sp_wkind)k);
    }
    if (kv_loads(c)) {
        sp_step *w = emit(ss, SP_STEP_HOST_WAIT);
        w->src = SP_BUF_KVSTREAM;
        emit_host_load(c, ss, SP_BUF_KVSTREAM, SP_ON_NEXT, SP_WKIND_ATTN);
    }
}

/* the staging buffers: two blocks where a layer prefetches the next one's, else one */
static void size_staging(ctx *c)
{
    sp_program *p = c->p;
    if (p->w_streamed > 0)
        p->buf_bytes[SP_BUF_WSTREAM] = spi_ck_mul(&c->ck, "staging bytes", p->w_streamed > 1 ? 2 : 1, p->layer_weight_bytes);
    if (p->kv_host_seqs > 0) {
        int blocks = kv_loads(c) && p->n_layers > 1 ? 2 : 1;
        int64_t one = ck_align(&c->ck, "staging bytes",
                               spi_ck_mul(&c->ck, "staging bytes", kv_host_tok_bytes(c) / 2, p->shape.max_context));
        p->buf_bytes[SP_BUF_KVSTREAM] = spi_ck_mul(&c->ck, "staging bytes", 2 * blocks, one);
    }
}

int sp_lower_step_runs(const sp_program *p, const sp_step *s, int64_t li)
{
    switch (s->on) {
    case SP_ON_STREAMED: return li < p->w_streamed;
    case SP_ON_STREAM_NEXT: return (unsigned)s->wkind < SP_WKIND_COUNT && li + 1 < p->w_kind_streamed[s->wkind];
    case SP_ON_NEXT: return li + 1 < p->n_layers;
    default: return 1;
    }
}

int64_t sp_lower_step_layers(const sp_program *p, sp_prog_part part, const sp_step *s)
{
    if (s->on == SP_ON_EVERY) return sp_program_part_runs(p, part);
    int64_t n = 0;   /* offload's steps: the layers of this part where it runs */
    for (int64_t li = 0; li < p->n_layers; li++) n += sp_program_layer_part(p, li) == part && sp_lower_step_runs(p, s, li);
    return n;
}

int64_t sp_lower_host_bytes(const sp_step *s, int64_t at)
{
    if (at <= 0 || !s->host_tok_bytes) return s->host_bytes;
    return s->host_bytes + s->host_tok_bytes * (at - s->context);
}

void sp_lower_step_elems(const sp_program *p, const sp_step *s, double out[SP_ELEM_COUNT])
{
    for (int k = 0; k < SP_ELEM_COUNT; k++) out[k] = 0.0;
    /* counts in double: they only scale per-element times, and the products of
     * the KV store (4 copies) could pass int64 where the buffer sizes do not */
    double mn = (double)s->m * (double)s->n, R = (double)p->rope_dims;
    double rows = s->ragged ? (double)s->m : (double)s->batch * (double)s->q_len;
    switch (s->kind) {
    case SP_STEP_NORM_STATS: out[SP_ELEM_NORM_STATS] = mn; break;
    case SP_STEP_NORM_APPLY: out[SP_ELEM_NORM_APPLY] = mn; break;
    case SP_STEP_ADD:
    case SP_STEP_BIAS:
    case SP_STEP_POS: out[SP_ELEM_ADD] = mn; break;
    case SP_STEP_SLICE: out[SP_ELEM_COPY] = mn; break;
    case SP_STEP_EMBED: out[SP_ELEM_EMBED] = mn; break;
    case SP_STEP_KV_STORE:
        /* K and V (rows, cached heads, d_head): staged from the projections, then appended */
        out[SP_ELEM_COPY] = 4.0 * rows * (double)s->kv_heads * (double)s->d_head;
        out[SP_ELEM_ROPE] = rows * (double)s->kv_heads * R;
        break;
    case SP_STEP_ATTN: {
        /* the queries (rows, heads, d_head) staged and rotated; a pass not reading the cache
         * stages and rotates its keys too */
        double h = (double)s->heads + (s->from_cache ? 0.0 : (double)s->kv_heads_src);
        out[SP_ELEM_COPY] = rows * h * (double)s->d_head;
        out[SP_ELEM_ROPE] = rows * h * R;
        break;
    }
    default: break;
    }
}

/* What the lowering and the memory roll-up read of each weight kind
 * (sp_weight_per_layer, sp_weight_layer_kind, sp_weight_wkind), in a table
 * made once from those functions: the roll-up (sp_lower_mem_stage) runs for
 * every program a search prices, and the calls, out of line in model.c,
 * were most of its instructions. */
typedef struct weight_attr {
    unsigned char per_layer, layer_kind, wkind;
} weight_attr;
static weight_attr wattr[SP_W_COUNT];
static pthread_once_t wattr_once = PTHREAD_ONCE_INIT;

static void wattr_fill(void)
{
    for (int w = 0; w < SP_W_COUNT; w++)
        wattr[w] = (weight_attr){(unsigned char)sp_weight_per_layer((sp_weight)w),
                                 (unsigned char)sp_weight_layer_kind((sp_weight)w),
                                 (unsigned char)sp_weight_wkind((sp_weight)w)};
}

static const weight_attr *weight_attrs(void)
{
    pthread_once(&wattr_once, wattr_fill);
    return wattr;
}

/* the stage's layers that hold per-layer weight kind `where` (sp_weight_layer_kind) */
static int64_t kind_layers(const sp_program *p, int where)
{
    return p->moe_every <= 1 || where == 0 ? p->n_layers : where == 1 ? p->n_layers - p->n_dense_layers : p->n_dense_layers;
}

/* p's buffer and scratch sizes and tallest operand raised to at least buf, scr, k_max */
static void sizes_max(sp_program *p, const int64_t *buf, const int64_t *scr, int64_t k_max)
{
    for (int i = 0; i < SP_BUF_COUNT; i++)
        if (buf[i] > p->buf_bytes[i]) p->buf_bytes[i] = buf[i];
    for (int i = 0; i < SP_SCR_COUNT; i++)
        if (scr[i] > p->scratch_bytes[i]) p->scratch_bytes[i] = scr[i];
    if (k_max > p->matmul_k_max) p->matmul_k_max = k_max;
}

/* emits the steps of the program the context was set up for; SP_EINVAL, naming
 * the quantity, when one of its sizes overflows int64 (the shape is too large
 * to represent, whatever the chips) */
/* storage: stage_storage's memo (its slots NULL: the thread's); lsz: the job's layer
 * sizes (NULL: none kept), taken when p's kept layer is the one they are of,
 * else written for p's layer when it is sized */
static sp_status emit_program(ctx *c, int layer_steps, storage_memo storage, layer_sizes *lsz)
{
    sp_program *p = c->p;
    int lsz_hit = lsz && layer_steps >= 0 && lsz->p == p && lsz->n == layer_steps;
    if (lsz && !lsz_hit) lsz->p = NULL;   /* until this lowering succeeds */
    /* callers that keep sp_program in static storage pay only for what is written */
    memset(p->buf_bytes, 0, sizeof p->buf_bytes);
    memset(p->scratch_bytes, 0, sizeof p->scratch_bytes);
    int first_stage = p->stage == 0, last_stage = p->stage == c->l->stages - 1;
    stage_storage(c, storage, first_stage, last_stage);

    if (first_stage) emit_embed(c, &p->pre);
    else emit_p2p(c, &p->pre, SP_STEP_RECV);
    p->layer_weight_bytes = 0;
    memset(p->kind_weight_bytes, 0, sizeof p->kind_weight_bytes);
    const weight_attr *wa = weight_attrs();
    for (int w = SP_W_FIRST_LAYER; w < SP_W_COUNT; w++)
        if (p->wspec[w].present) {
            int64_t *b = &p->kind_weight_bytes[wa[w].wkind];
            *b = spi_ck_add(&c->ck, "layer weight bytes", *b, p->wspec[w].bytes);
        }
    for (int k = 0; k < SP_WKIND_COUNT; k++)
        if (p->w_kind_streamed[k] > 0)
            p->layer_weight_bytes = spi_ck_add(&c->ck, "layer weight bytes", p->layer_weight_bytes, p->kind_weight_bytes[k]);
    emit_offload_pre(c, &p->pre);
    if (layer_steps < 0) {
        emit_offload_layer(c, &p->layer);
        emit_layer(c, &p->layer);
    } else {
        p->layer.n = layer_steps;   /* kept (spi_lower_finish_keep_layer) */
    }
    if (c->Fdp > 0) {
        /* the dense layer (emitted again when the MoE layer is kept: it is short) */
        c->dense_layer = 1;
        emit_offload_layer(c, &p->dense);
        emit_layer(c, &p->dense);
        c->dense_layer = 0;
    }
    if (!last_stage) emit_p2p(c, &p->post, SP_STEP_SEND);
    else if (p->logits) emit_logits(c, &p->post);   /* an earlier prefill pass: no logits */

    /* the parts that run on this stage size its buffers, scratch and dequantisation tile (a
     * stage of dense layers only holds no MoE buffers); the tallest matmul operand.  The
     * layer part is sized alone (from zero) into lsz, then joined to the rest by max, when a
     * later stage's lowering may keep this layer (spi_lower_finish_keep_layer): a layout of
     * one stage has none, and sizes it into p with the rest (a keep that finds no sizes in
     * lsz sizes the kept steps) */
    layer_sizes *alone = lsz && c->l->stages > 1 ? lsz : NULL;
    p->matmul_k_max = 0;
    int layer_sized = 0;
    for (int k = 0; k < SP_PART_COUNT; k++) {
        if (!sp_program_part_runs(p, (sp_prog_part)k)) continue;
        const sp_steps *ss = sp_program_part(p, (sp_prog_part)k);
        if (k == SP_PART_LAYER && (lsz_hit || alone)) {
            if (!lsz_hit) {
                memset(lsz->buf, 0, sizeof lsz->buf);
                memset(lsz->scr, 0, sizeof lsz->scr);
                lsz->k_max = 0;
                size_buffers(&c->ck, p, ss, c->E, lsz->buf);
                size_scratch(&c->ck, p, ss, lsz->scr, &lsz->k_max);
                layer_sized = 1;
            }
            sizes_max(p, lsz->buf, lsz->scr, lsz->k_max);
            continue;
        }
        size_buffers(&c->ck, p, ss, c->E, p->buf_bytes);
        size_scratch(&c->ck, p, ss, p->scratch_bytes, &p->matmul_k_max);
    }
    size_staging(c);
    /* the sampled tokens of the replica's sequences cross to stage 0 through device memory */
    if (c->l->stages > 1 && (first_stage || last_stage))
        need_scr(p, SP_SCR_TOKENS, spi_ck_mul3(&c->ck, "token hand-off bytes", p->micro_batch, c->l->microbatches, 4));
    if (c->ck.overflow)
        return spi_fail(SP_EINVAL, "%s do not fit in 64 bits: batch %lld × %lld tokens of %s is too large to represent",
                        c->ck.what, (long long)p->shape.batch, (long long)p->shape.q_len, c->m->name);
    if (layer_sized) {
        lsz->p = p;
        lsz->n = p->layer.n;
    }
    return SP_OK;
}

const sp_steps *sp_program_part(const sp_program *p, sp_prog_part k)
{
    return k == SP_PART_PRE ? &p->pre : k == SP_PART_LAYER ? &p->layer : k == SP_PART_DENSE ? &p->dense : &p->post;
}

int64_t sp_program_part_runs(const sp_program *p, sp_prog_part k)
{
    return k == SP_PART_LAYER ? p->n_layers - p->n_dense_layers : k == SP_PART_DENSE ? p->n_dense_layers : 1;
}

int64_t sp_program_steps(const sp_program *p)
{
    int64_t n = 0;
    for (int k = 0; k < SP_PART_COUNT; k++) n += sp_program_part(p, (sp_prog_part)k)->n * sp_program_part_runs(p, (sp_prog_part)k);
    return n;
}

sp_prog_part sp_program_layer_part(const sp_program *p, int64_t li)
{
    /* the model's layer first_layer + li is MoE when (first_layer + li + 1) % moe_every == 0 (sp_model_layer_is_moe) */
    return p->moe_every <= 1 || (p->first_layer + li + 1) % p->moe_every == 0 ? SP_PART_LAYER : SP_PART_DENSE;
}

int64_t sp_program_weight_layers(const sp_program *p, sp_weight w)
{
    if ((unsigned)w >= SP_W_COUNT) return 1;
    const weight_attr *a = &weight_attrs()[w];
    return a->per_layer ? kind_layers(p, a->layer_kind) : 1;
}

sp_status sp_lower_finish(sp_lower_job *job, sp_program *p)
{
    if (!job || !p || job->p != p)
        return spi_fail(SP_EINVAL, "sp_lower_finish: no successful sp_lower_begin for this program in this job");
    job->p = NULL;
    return emit_program(&job->c, -1, job_storage(job), &job->lsz);
}

sp_status spi_lower_finish_keep_layer(sp_lower_job *job, sp_program *p, int layer_steps)
{
    if (!job || !p || job->p != p || layer_steps < 0 || layer_steps > SP_PROG_MAX_STEPS)
        return spi_fail(SP_EINVAL, "spi_lower_finish_keep_layer: no successful sp_lower_begin for this program in this job");
    job->p = NULL;
    return emit_program(&job->c, layer_steps, job_storage(job), &job->lsz);
}

int sp_lower_pass_terms(const sp_program *p, int64_t left[3], int64_t num[3])
{
    int64_t ns = p->passes_seq > 0 ? p->passes_seq : 1, nt = p->passes_tok > 0 ? p->passes_tok : 1;
    left[0] = 0;
    num[0] = 2 * ns;
    if (nt == 1) return 1;
    /* the first and the second-to-last token pass (the same one when there are two) */
    left[1] = nt - 1;
    left[2] = 1;
    num[1] = num[2] = ns * (nt - 1);
    return 3;
}

sp_status sp_lower(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape, int stage,
                   sp_program *p)
{
    return sp_lower_ragged(m, l, phase, shape, NULL, 0, stage, p);
}

sp_status sp_lower_ragged(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape,
                          const sp_ragged *r, int64_t step, int stage, sp_program *p)
{
    ctx c;
    SP_CHECK(setup(&c, m, l, phase, shape, r, step, stage, p, 0));
    return emit_program(&c, -1, (storage_memo){NULL, NULL, 0}, NULL);
}

/* b = max(a, b) for each buffer and scratch slot: a program whose arena holds both */
static void bufs_envelope(const sp_program *a, sp_program *b)
{
    for (int i = 0; i < SP_BUF_COUNT; i++)
        if (a->buf_bytes[i] > b->buf_bytes[i]) b->buf_bytes[i] = a->buf_bytes[i];
    for (int i = 0; i < SP_SCR_COUNT; i++)
        if (a->scratch_bytes[i] > b->scratch_bytes[i]) b->scratch_bytes[i] = a->scratch_bytes[i];
}

sp_status sp_lower_ragged_decode(const sp_model *m, const sp_layout *l, const sp_shape *shape, const sp_ragged *r,
                                 int stage, sp_program *out, sp_program *tmp)
{
    if (!r) return spi_fail(SP_EINVAL, "sp_lower_ragged_decode: no ragged batch");
    SP_CHECK(sp_lower_ragged(m, l, SP_PHASE_DECODE, shape, r, 1, stage, out));
    /* within a segment the rows stay and the contexts grow: its ends bound its steps */
    for (int64_t s0 = 1; s0 <= r->max_gen;) {
        int64_t s1 = sp_ragged_segment_end(r, s0);
        for (int e = 0; e < 2; e++) {
            int64_t step = e ? s1 : s0;
            if (step == 1) continue;
            SP_CHECK(sp_lower_ragged(m, l, SP_PHASE_DECODE, shape, r, step, stage, tmp));
            bufs_envelope(tmp, out);
        }
        s0 = s1 + 1;
    }
    return SP_OK;
}

sp_status sp_lower_ragged_mem(const sp_model *m, const sp_layout *l, const sp_shape *pf_sh, const sp_shape *dc_sh,
                              const sp_ragged *mb, int M, int stage, sp_program *pf, sp_program *dc,
                              sp_mem_sizes *mem)
{
    if (!mb || M < 1 || !dc || !mem) return spi_fail(SP_EINVAL, "sp_lower_ragged_mem: bad arguments");
    sp_program *tmp = malloc(2 * sizeof *tmp);   /* micro-batch j's program of a phase; sp_lower_ragged_decode's room */
    if (!tmp) return spi_fail(SP_ENOMEM, "programs of a ragged batch's %d micro-batches", M);
    sp_status st = SP_OK;
    for (int j = 0; j < M && !st; j++) {
        /* every prefill pass of the micro-batch (prefill_chunk: its own sequences each) */
        for (int64_t i = 0, n = 1; pf && i < n && !st; i++) {
            sp_shape x = *pf_sh;
            x.q_len = x.context = mb[j].max_prompt;
            if ((st = sp_lower_ragged(m, l, SP_PHASE_PREFILL, &x, &mb[j], i, stage, j || i ? &tmp[0] : pf))) break;
            n = (j || i ? &tmp[0] : pf)->passes_seq;
            if (j || i) bufs_envelope(&tmp[0], pf);
        }
        if (st) break;
        if ((st = sp_lower_ragged_decode(m, l, dc_sh, &mb[j], stage, j ? &tmp[0] : dc, &tmp[1]))) break;
        if (j) bufs_envelope(&tmp[0], dc);
    }
    free(tmp);
    return st ? st : sp_lower_mem_sizes(pf, dc, mem);
}

/* Dequantisation scratch of the matmul kernel: one tile of SP_DEQUANT_TILE
 * columns of the tallest weight operand (a gathered weight is taller than
 * its stored shard), fp32. */
#define SP_DEQUANT_TILE 64

static sp_status mem_overflow(const spi_ckd *ck)
{
    return spi_fail(SP_EINVAL, "memory per chip: %s do not fit in 64 bits (the request is too large to represent)",
                    ck->what);
}

/* Σ_i align(max(a[i], b[i])) over i in [i0, i1), checked.  Sizes under
 * 2^56 bytes cannot overflow that sum (at most 64 terms), so the common
 * case skips the per-term checks: the planner merges every layout's. */
static int64_t sum_aligned_max(spi_ckd *ck, const char *what, const int64_t *a, const int64_t *b, int i0, int i1)
{
    /* one pass in unsigned arithmetic (no overflow is undefined there), kept
     * when every larger size is >= 0 and under 2^56 (then it is exact) */
    uint64_t any = 0, usum = 0;
    for (int i = i0; i < i1; i++) {
        uint64_t x = (uint64_t)(a[i] > b[i] ? a[i] : b[i]);
        any |= x;
        usum += (x + SP_MEM_ALIGN - 1) / SP_MEM_ALIGN * SP_MEM_ALIGN;
    }
    if (any < (1ull << 56) && i1 - i0 <= 64) return (int64_t)usum;
    int64_t sum = 0;
    for (int i = i0; i < i1; i++) sum = spi_ck_add(ck, what, sum, ck_align(ck, what, a[i] > b[i] ? a[i] : b[i]));
    return sum;
}

/* any: a program of the stage (weights, KV geometry); bufs_a/bufs_b: the
 * buffer sizes of the two phases' programs (either may be NULL) */
sp_status sp_lower_mem_sizes_merge(const sp_mem_sizes *stage_sizes, const int64_t *bufs_a, const int64_t *bufs_b,
                                   sp_mem_sizes *out)
{
    static const int64_t none[SP_BUF_COUNT];
    const int64_t *a = bufs_a ? bufs_a : none, *b = bufs_b ? bufs_b : none;
    sp_mem_sizes r = *stage_sizes;
    spi_ckd ck = SPI_CKD_INIT;
    /* the activation buffers, then the gathered weights' (sum_aligned_max's
     * bound holds for each part: every term is one of the whole's) */
    int64_t act = sum_aligned_max(&ck, "activation bytes", a, b, 1, SP_BUF_WSTREAM);
    int64_t staging = sum_aligned_max(&ck, "staging bytes", a, b, SP_BUF_WSTREAM, SP_BUF_GATHERED);
    int64_t gathered = sum_aligned_max(&ck, "activation bytes", a, b, SP_BUF_GATHERED, SP_BUF_COUNT);
    r.gathered_weights = gathered;
    r.activations = act;
    r.staging = staging;
    r.total = spi_ck_add(&ck, "total bytes", spi_ck_add(&ck, "total bytes", r.weights, r.gathered_weights),
                         spi_ck_add(&ck, "total bytes", spi_ck_add(&ck, "total bytes", r.kv, r.activations),
                                    spi_ck_add(&ck, "total bytes", spi_ck_add(&ck, "total bytes", r.workspace, r.scratch),
                                               staging)));
    if (ck.overflow) return mem_overflow(&ck);
    *out = r;
    return SP_OK;
}

sp_status sp_lower_mem_scratch_merge(const int64_t *scr_a, const int64_t *scr_b, sp_mem_sizes *out)
{
    static const int64_t none[SP_SCR_COUNT];
    const int64_t *a = scr_a ? scr_a : none, *b = scr_b ? scr_b : none;
    spi_ckd ck = SPI_CKD_INIT;
    int64_t sum = sum_aligned_max(&ck, "scratch bytes", a, b, 0, SP_SCR_COUNT);
    int64_t total = spi_ck_add(&ck, "total bytes", out->total - out->scratch, sum);
    if (ck.overflow) return mem_overflow(&ck);
    out->total = total;
    out->scratch = sum;
    return SP_OK;
}

static int64_t dequant_workspace(const sp_program *p)
{
    return p->layout.weights != SP_DT_F32 ? p->matmul_k_max * SP_DEQUANT_TILE * 4 : 0;
}

/* K and V of `seqs` sequences of every micro-batch and layer of the stage at full capacity, one
 * aligned block each */
static int64_t kv_block_bytes(spi_ckd *ck, const sp_program *any, int64_t seqs)
{
    const sp_layout *l = &any->layout;
    int64_t d_head = any->wspec[SP_W_Q].present ? (any->wspec[SP_W_Q].cols / any->heads_padded) : 0;
    if (seqs <= 0) return 0;
    return spi_ck_mul(ck, "KV cache bytes", 2,
                      ck_align(ck, "KV cache bytes",
                               spi_ck_mul4(ck, "KV cache bytes", spi_ck_mul(ck, "KV cache bytes", seqs, l->microbatches),
                                           any->shape.max_context, any->kv_heads_cache,
                                           spi_ck_mul3(ck, "KV cache bytes", d_head, sp_dtype_bytes(l->kv), any->n_layers))));
}

sp_status sp_lower_mem_stage(const sp_program *any, sp_mem_sizes *out)
{
    memset(out, 0, sizeof *out);
    spi_ckd ck = SPI_CKD_INIT;
    const weight_attr *wa = weight_attrs();
    for (int w = 1; w < SP_W_COUNT; w++) {
        const sp_weight_spec *s = &any->wspec[w];
        if (!s->present) continue;
        /* a per-layer kind in the stage's layers that hold it (experts in MoE layers, the dense FFN
         * in the others); a streamed layer's weights are the host's (offload_weights: every layer holds
         * every per-layer kind, models with dense layers do not stream) */
        int per_layer = wa[w].per_layer;
        int64_t held = per_layer ? kind_layers(any, wa[w].layer_kind) : 1;
        int64_t streamed = per_layer ? any->w_kind_streamed[wa[w].wkind] : 0;
        spi_ck_addmul(&ck, "weight bytes", &out->weights, s->bytes, per_layer ? held - streamed : 1);
        if (per_layer) spi_ck_addmul(&ck, "host weight bytes", &out->host_weights, s->bytes, streamed);
    }
    /* KV: every micro-batch's sequences stay resident (in HBM, or the host-held ones in host memory) */
    out->kv = kv_block_bytes(&ck, any, any->kv_seqs - any->kv_host_seqs);
    out->host_kv = kv_block_bytes(&ck, any, any->kv_host_seqs);
    out->host_total = spi_ck_add(&ck, "host bytes", out->host_weights, out->host_kv);
    out->workspace = dequant_workspace(any);
    out->total = spi_ck_add(&ck, "total bytes", spi_ck_add(&ck, "total bytes", out->weights, out->kv), out->workspace);
    return ck.overflow ? mem_overflow(&ck) : SP_OK;
}

sp_status sp_lower_mem_sizes(const sp_program *pf, const sp_program *dc, sp_mem_sizes *out)
{
    const sp_program *any = pf ? pf : dc;
    if (!any) return spi_fail(SP_EINVAL, "sp_lower_mem_sizes: no program");
    SP_CHECK(sp_lower_mem_stage(any, out));
    if (pf && dc && dequant_workspace(dc) > out->workspace) out->workspace = dequant_workspace(dc);   /* the taller tile */
    SP_CHECK(sp_lower_mem_sizes_merge(out, pf ? pf->buf_bytes : NULL, dc ? dc->buf_bytes : NULL, out));
    return sp_lower_mem_scratch_merge(pf ? pf->scratch_bytes : NULL, dc ? dc->scratch_bytes : NULL, out);
}


/* ---- resolved operands ---- */
sp_status sp_lower_moe_a2a_bytes(const sp_program *p, const sp_step *s, int g, const int64_t *own,
                                 const int64_t *from, int64_t *sent, int64_t *recv)
{
    const sp_coll *co = &s->coll;
    if (!p || s->kind != SP_STEP_COLL || !co->routed || co->group < 1 || s->experts % co->group || g < 0 ||
        g >= co->group)
        return spi_fail(SP_EINVAL, "not a routed MoE all-to-all (or group rank %d outside it)", g);
    spi_ckd ck = SPI_CKD_INIT;
    int64_t N = co->group, NL = s->experts / N, out = 0, in = 0;
    for (int64_t e = 0; e < s->experts; e++)
        if (e / NL != g) out = spi_ck_add(&ck, "routed rows", out, own[e]);
    for (int64_t h = 0; h < N; h++)
        if (h != g)
            for (int64_t j = 0; j < NL; j++) in = spi_ck_add(&ck, "routed rows", in, from[h * NL + j]);
    int64_t row = spi_ck_mul(&ck, "all-to-all row bytes", co->cols, sp_dtype_bytes(co->dtype));
    int64_t counts = co->routed == 1 ? spi_ck_mul3(&ck, "expert count bytes", N - 1, NL, 8) : 0;
    int64_t bo = spi_ck_mul(&ck, "all-to-all bytes", out, row), bi = spi_ck_mul(&ck, "all-to-all bytes", in, row);
    *sent = spi_ck_add(&ck, "all-to-all bytes", co->routed == 1 ? bo : bi, counts);
    *recv = spi_ck_add(&ck, "all-to-all bytes", co->routed == 1 ? bi : bo, counts);
    if (ck.overflow) return spi_fail(SP_EINVAL, "%s overflows 64 bits", ck.what);
    return SP_OK;
}

sp_status sp_lower_coll_group(const sp_program *p, const sp_step *s, int rank, sp_coll_group *out)
{
    if (s->kind != SP_STEP_COLL) return spi_fail(SP_EINVAL, "sp_lower_coll_group: a %s step", sp_step_kind_name(s->kind));
    const sp_coll *co = &s->coll;
    sp_mesh mesh;
    sp_layout_mesh(&p->layout, &mesh);
    int K = sp_mesh_group_size(&mesh, co->mask);
    if (K > SP_COLL_GROUP_MAX) return spi_fail(SP_ENOTSUP, "a collective over %d chips (at most %d)", K, SP_COLL_GROUP_MAX);
    out->K = K;
    sp_mesh_group_members(&mesh, rank, co->mask, out->members);
    const char *store = co->is_weight ? p->wspec[s->weight].col_axes : "";
    for (int g = 0; g < K; g++) {
        int c[SP_AXIS_COUNT];
        sp_mesh_coords(&mesh, out->members[g], c);
        out->row_blk[g] = coords_index(&mesh, c, co->row_axes);
        out->col_blk[g] = coords_index(&mesh, c, co->col_axes);
        out->store_col_blk[g] = coords_index(&mesh, c, store);
    }
    return SP_OK;
}

/* First of the nkv KV heads a chip keeps when its query heads start at q0:
 * the group of q0's head, moved down so that nkv heads fit (kv_heads_needed
 * sized nkv for the widest block); 0 when it keeps every KV head. */
static int64_t kv_first(const sp_model *m, int64_t q0, int64_t nkv)
{
    if (nkv >= m->n_kv_heads) return 0;
    int64_t grp = m->n_heads / m->n_kv_heads;
    int64_t h = q0 < m->n_heads ? q0 : m->n_heads - 1;
    int64_t f = h / grp;
    if (f + nkv > m->n_kv_heads) f = m->n_kv_heads - nkv;
    return f;
}

void sp_lower_attn_heads(const sp_model *m, const sp_program *p, const sp_step *s, int rank, int64_t *q0,
                         int64_t *kv0)
{
    int blk = sp_lower_axes_index(&p->layout, rank, s->axes);
    if (s->kind == SP_STEP_KV_STORE) {
        /* the cache's q-head blocks follow the decode layout's head axes */
        *q0 = (int64_t)blk * (p->heads_padded / axes_size(&p->layout, s->axes));
        *kv0 = s->kv_heads_src != s->kv_heads ? kv_first(m, *q0, s->kv_heads) : 0;
    } else {
        *q0 = (int64_t)blk * s->heads;
        *kv0 = kv_first(m, *q0, s->kv_heads);
    }
}

int64_t sp_lower_kv_head0(const sp_model *m, const sp_program *p, int rank)
{
    int blk = sp_lower_axes_index(&p->layout, rank, p->kv_head_axes);
    int64_t q0 = (int64_t)blk * (p->heads_padded / axes_size(&p->layout, p->kv_head_axes));
    return kv_first(m, q0, p->kv_heads_cache);
}

int64_t sp_lower_pass_seq(const sp_program *p, int64_t chunk, int64_t row)
{
    if (p->ragged) {
        int64_t b, r0, q, pos0;
        sp_lower_ragged_seq(p, row, &b, &r0, &q, &pos0);
        return b;
    }
    int64_t k = p->kv_pass_seqs > 0 ? p->kv_pass_seqs : 1;
    return row / k * p->kv_seqs + chunk * k + row % k;
}

int sp_lower_slice_keeps(const sp_program *p, const sp_step *s, int rank, int blk)
{
    const char *seq = s->batch_axes[0] ? s->batch_axes : s->axes;
    sp_mesh mesh;
    int mine[SP_AXIS_COUNT], c[SP_AXIS_COUNT];
    sp_layout_mesh(&p->layout, &mesh);
    sp_mesh_coords(&mesh, rank, mine);
    memcpy(c, mine, sizeof c);
    /* coordinates of block blk on seq (mixed radix, major first) */
    for (int i = (int)strlen(seq) - 1; i >= 0; i--) {
        int a = axis_of(seq[i]);
        c[a] = blk % mesh.dims[a];
        blk /= mesh.dims[a];
    }
    for (const char *a = s->axes; *a; a++)
        if (strchr(seq, *a) && c[axis_of(*a)] != mine[axis_of(*a)]) return 0;
    return 1;
}
