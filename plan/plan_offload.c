/*
 * plan_offload.c: the offload program.  Decides, for the layouts of the
 * space, how many layers' weights each pipeline stage streams from host
 * memory, which part of them (mode: every part, the attention's or the
 * FFN's: offload_weights, offload_attn, offload_ffn) and what fraction of
 * each chip's KV sequences
 * lives there (offload_kv), by a mixed-integer program over priced
 * building blocks; never enumerates the combinations.
 *
 * DATA (from the cost model: sp_cost_stage_eval, sp_cost_pipe_terms)
 *   T          templates: the priced layouts of the space, split evenly,
 *              offloading nothing (everything but the offload is fixed:
 *              stages, mesh, replicas, micro-batches, precision, phase
 *              layouts, prefill passes).
 *   F          KV fractions {0, 1/4, 1/2, 3/4, 1}; F_t those that apply to
 *              t (a whole number of sequences per chip and micro-batch, no
 *              chunked prefill: the lowering refuses the others).
 *   classes    the stages of t alike (same kind: first, middle, last; same
 *              layer count n): a stage's price depends on its own layers,
 *              kind and streamed layers k only (sp_lower_key).
 *   blocks     (t, class, f, m, k): the stage priced by the lowering with f
 *              of its KV and its first k layers' weights of mode m in host
 *              memory (k = 0: one block for every mode):
 *              v_q(k) for q = prefill, first and last decode step (ps),
 *              device bytes, host bytes.
 *   pieces     per (t, class, f, m): k = 0..J priced (J = min(n, 3)), and
 *              k = n; where every v_q(n) − v_q(J) = (n − J)·(v_q(J) −
 *              v_q(J − 1)) (the copies overlap the previous layer's
 *              compute, so each further streamed layer adds max(c, h) − c
 *              of time, one layer's weights to the host and takes them
 *              from HBM: linear in k past the staging blocks' fill and the
 *              first copy, which nothing hides) the tail is that slope d_q;
 *              otherwise every k is priced (J = n, no tail).
 *
 * VARIABLES
 *   x_t ∈ {0,1}              template t is the layout
 *   z_tf ∈ {0,1}             its KV fraction is f              (f ∈ F_t)
 *   y_tsfmj ∈ {0,1}          stage s streams at least j layers of mode m (j = 1..J), under f
 *   r_tsfm ∈ {0..n − J}      the layers streamed past J, under f and m (tail only)
 *   X_tφ >= 0, V_tφ >= 0     the slowest stage, the phase's time
 *   A stage's figure is v_q(s, f, m, k) = v_q(0)·z_tf + Σ_m (Σ_j (v_qm(j)
 *   − v_qm(j − 1))·y_tsfmj + d_qm·r_tsfm) (incremental form: exact at
 *   every k, one mode's y on at a time), its choice c_s = Σ_f Σ_m (n +
 *   1)^m·(Σ_j y_tsfmj + r_tsfm) (distinct for distinct (m, k)).
 *
 * CONSTRAINTS
 *   Σ_t x_t = 1;  Σ_f z_tf − x_t = 0                      one layout, one fraction
 *   Σ_m y_tsfm1 <= z_tf, y_tsfm,j+1 <= y_tsfmj, r_tsfm <= (n − J)·y_tsfmJ   (order)
 *   Σ_f v_dev(s, f, k) <= HBM usable         ∀t, s    each stage's chip fits
 *   Σ_f v_host(s, f, k) <= host memory       ∀t, s    and its host part
 *   X_tφ >= Σ_f v_φ(s, f, k)                 ∀t, s, φ the bottleneck
 *   V_tφ >= (a_f·Σ_s Σ_f v_φ + b_f·X_tφ) / d_f + c_f·x_t   ∀ forms (sp_cost_pipe)
 *   c_s >= c_s+1 for middle stages of one class (alike: removes permutations)
 *   Φ_t >= Φ_t(0)·x_t (offload never makes a layout faster)
 *   Λ <= max_latency, Θ <= batch·tokens / min_tokens_per_s, Φ <= Φ*
 *
 * OBJECTIVE
 *   min Φ = Σ_t Σ_φ w_φ·V_tφ (spi_measure: the measure the plan's
 *   objective is monotone in for one instance).
 *
 * SIZE
 *   columns Σ_t (1 + |F_t| + Σ_s Σ_f Σ_m (J + tail) + 6), rows 1 + Σ_t
 *   (1 + Σ_s Σ_f Σ_m (J + tail) + 2S + (S + 1)·phases + forms + 1 +
 *   middle pairs) + bounds: the sum of the choices.  The combinations
 *   number |F_t|·Π_s (1 + 3·n_s) per template.
 *
 * REDUCTIONS (exact)
 *   Streaming a layer or holding KV in host memory adds copies and removes
 *   nothing from a stage's work, so no offload makes a layout faster, nor
 *   one that breaks the latency bound or the throughput target meet it: a
 *   template whose own measure reaches Φ*, the best measure among the
 *   space's admissible layouts, is dropped before its blocks are priced
 *   (every template that already fits is so dropped).  The rest go in the
 *   order of their measure, in programs of 16, each cut off at the best
 *   found so far.
 */
#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "spi_common.h"
#include "spi_plan.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the figures of a block: three phase times (ps), device and host bytes */
enum { Q_DEV = SPI_PH_COUNT, Q_HOST = SPI_PH_COUNT + 1, Q_COUNT = SPI_PH_COUNT + 2 };
/* the KV fractions offered */
static const double kv_fracs[] = {0, 0.25, 0.5, 0.75, 1};
#define NF ((int)(sizeof kv_fracs / sizeof kv_fracs[0]))
/* What a stage's streamed layers stream (offload_weights, offload_attn, offload_ffn): every
 * part of their weights, the attention's alone, the FFN's alone */
enum { M_ALL = 0, M_ATTN = 1, M_FFN = 2, NM = 3 };
#define MAX_CLS 4
/* times in microseconds and memory in MiB keep the coefficients near 1 */
#define PS_PER_UNIT 1e6
#define MIB 1048576.0

typedef struct piece {
    int ok;                /* the fraction applies to this class */
    int J, tail;           /* k = 0..J priced; tail: the layers past J at slope d */
    int64_t *v;            /* [J + 1][Q_COUNT] */
    int64_t d[Q_COUNT];
} piece;

typedef struct otmpl {
    const spi_cand *c;
    int S, ncls;
    int cls_of[SP_LAYOUT_MAX_STAGES];
    int cls_kind[MAX_CLS], cls_n[MAX_CLS], cls_rep[MAX_CLS];
    piece pc[MAX_CLS][NF][NM];
    int fok[NF];           /* fraction applies to every class */
    sp_cost_pipe pipe;
    int64_t units;
    double lb;
    int col_x, col_z, col_X, col_V;
    int col_y[SP_LAYOUT_MAX_STAGES][NF][NM];   /* first y column of (s, f, mode); the tail r follows the J y's */
} otmpl;

const char *spi_offload_refusal(const sp_model *m, const sp_hw *hw, int *weights)
{
    *weights = sp_model_dense_ff(m) == 0;
    if (hw->host_bytes <= 0 || hw->host_link_bw <= 0)
        return "the hardware states no host memory or host link (host.memory_bytes, host.link_bw)";
    return NULL;
}

/* Sets stage `stage` of l (offloading no weights so far on it) to stream
 * k layers' weights of `mode`. */
static void stage_stream(sp_layout *l, int stage, int mode, int k)
{
    if (k <= 0) return;
    int *n = mode == M_ALL ? &l->offload_stages : &l->offload_kind_stages[mode == M_ATTN ? SP_WKIND_ATTN : SP_WKIND_FFN];
    int16_t *v = mode == M_ALL ? l->offload_layers : l->offload_kind_layers[mode == M_ATTN ? SP_WKIND_ATTN : SP_WKIND_FFN];
    *n = l->stages;
    v[stage] = (int16_t)k;
}

/* Layout l of template t with fraction f and stage `stage` streaming k
 * layers' weights of `mode` (every other stage none). */
static void block_layout(const sp_layout *tl, double f, int stage, int mode, int k, sp_layout *l)
{
    *l = *tl;
    l->offload_kv = f;
    l->offload_stages = 0;
    memset(l->offload_layers, 0, sizeof l->offload_layers);
    memset(l->offload_kind_stages, 0, sizeof l->offload_kind_stages);
    memset(l->offload_kind_layers, 0, sizeof l->offload_kind_layers);
    stage_stream(l, stage, mode, k);
}

static sp_status price(const spi_space *sp, const sp_workload *w, otmpl *t, int cls, double f, int mode, int k,
                       int64_t q[Q_COUNT], spi_offload_out *out)
{
    sp_layout l;
    block_layout(&t->c->layout, f, t->cls_rep[cls], mode, k, &l);
    sp_cost_opts co;
    sp_cost_opts_init(&co);
    co.quiet = 1;
    sp_stage_cost sc;
    out->blocks++;
    SP_CHECK(sp_cost_stage_eval(sp->m, sp->hw, &l, w, &co, t->cls_rep[cls], &sc));
    q[SPI_PH_PF] = sc.prefill_ps;
    q[SPI_PH_D1] = sc.decode1_ps;
    q[SPI_PH_DN] = sc.decode_ps;
    q[Q_DEV] = sc.mem.total;
    q[Q_HOST] = sc.mem.host_total;
    if (t->units == 0) {
        t->units = sc.prefill_units;
        sp_cost_pipe_terms(sp->hw, &t->c->layout, t->units, &t->pipe);
    }
    return SP_OK;
}

/* Prices the piece (class, fraction fi, mode) of t: k = 0..J and, past J,
 * the tail's slope checked at k = n, or every k where the figures are not
 * linear there.  A block that does not apply at k = 0 leaves the piece
 * out; at k > 0 it ends the piece there (no tail).  Every mode's k = 0 is
 * the same block (nothing streamed), priced once: mode M_ALL's. */
static sp_status price_piece(const spi_space *sp, const sp_workload *w, int weights, otmpl *t, int cls, int fi,
                             int mode, spi_offload_out *out)
{
    piece *p = &t->pc[cls][fi][mode];
    const int n = t->cls_n[cls];
    int J = weights ? (n < 3 ? n : 3) : 0;
    p->v = malloc((size_t)(n + 1) * Q_COUNT * sizeof *p->v);
    if (!p->v) return spi_fail(SP_ENOMEM, "planner: out of memory");
    for (int k = 0; k <= J; k++) {
        if (k == 0 && mode != M_ALL) {
            if (!t->pc[cls][fi][M_ALL].ok) return SP_OK;
            memcpy(p->v, t->pc[cls][fi][M_ALL].v, Q_COUNT * sizeof *p->v);
            continue;
        }
        sp_status st = price(sp, w, t, cls, kv_fracs[fi], mode, k, &p->v[k * Q_COUNT], out);
        if (st == SP_EINVAL) {
            if (k == 0) return SP_OK;   /* p->ok stays 0 */
            J = k - 1;
            break;
        }
        SP_CHECK(st);
    }
    p->ok = 1;
    p->J = J;
    if (J < 3 || n == J) return SP_OK;
    int64_t vn[Q_COUNT];
    sp_status st = price(sp, w, t, cls, kv_fracs[fi], mode, n, vn, out);
    if (st == SP_EINVAL) return SP_OK;
    SP_CHECK(st);
    int lin = 1;
    for (int q = 0; q < Q_COUNT; q++) {
        p->d[q] = p->v[J * Q_COUNT + q] - p->v[(J - 1) * Q_COUNT + q];
        lin &= vn[q] - p->v[J * Q_COUNT + q] == (int64_t)(n - J) * p->d[q];
    }
    if (lin) {
        p->tail = 1;
        return SP_OK;
    }
    /* not linear past J: every count priced (exact, J = n) */
    for (int k = J + 1; k < n; k++) {
        st = price(sp, w, t, cls, kv_fracs[fi], mode, k, &p->v[k * Q_COUNT], out);
        if (st == SP_EINVAL) {
            p->J = k - 1;
            return SP_OK;
        }
        SP_CHECK(st);
    }
    memcpy(&p->v[n * Q_COUNT], vn, sizeof vn);
    p->J = n;
    return SP_OK;
}

static void free_tmpl(otmpl *t)
{
    for (int c = 0; c < MAX_CLS; c++)
        for (int f = 0; f < NF; f++)
            for (int md = 0; md < NM; md++) {
                free(t->pc[c][f][md].v);
                t->pc[c][f][md].v = NULL;
            }
}

/* The stage classes of t (kind, layers); MAX_CLS suffice for an even split. */
static void classes(const spi_space *sp, otmpl *t)
{
    t->ncls = 0;
    for (int s = 0; s < t->S; s++) {
        int64_t first, cnt;
        sp_layout_stage_layers(&t->c->layout, sp->m->n_layers, s, &first, &cnt);
        int kd = spi_split_kind(s, t->S), c;
        for (c = 0; c < t->ncls; c++)
            if (t->cls_kind[c] == kd && t->cls_n[c] == cnt) break;
        if (c == t->ncls) {
            t->cls_kind[c] = kd;
            t->cls_n[c] = (int)cnt;
            t->cls_rep[c] = s;
            t->ncls++;
        }
        t->cls_of[s] = c;
    }
}

static int cmp_lb(const void *a, const void *b)
{
    const otmpl *x = a, *y = b;
    if (x->lb != y->lb) return x->lb < y->lb ? -1 : 1;
    return (x->c > y->c) - (x->c < y->c);   /* the space's order */
}

typedef struct octx {
    const spi_space *sp;
    const sp_workload *w;
    const sp_plan_opts *o;
    const spi_measure *ms;
    double inc;
    int64_t cap, hcap;
} octx;

/* Value of the piece's figure q at k = 0 and its increments j = 1..J. */
#define PV(p, k, q) ((p)->v[(k) * Q_COUNT + (q)])

static double unit_of(int q) { return q < SPI_PH_COUNT ? PS_PER_UNIT : MIB; }

/* Appends to (ind, val) from *k the terms of stage s's figure q in t, each
 * scaled by `scale` (figures in their unit: µs or MiB; `base` subtracted
 * from the k = 0 figure: a capacity). */
static void stage_terms(const otmpl *t, int s, int q, double scale, int64_t base, int *ind, double *val, int *k)
{
    const int c = t->cls_of[s];
    const double u = unit_of(q);
    for (int fi = 0; fi < NF; fi++) {
        if (!t->fok[fi]) continue;
        double v0 = (double)(PV(&t->pc[c][fi][M_ALL], 0, q) - base) / u;   /* every mode's k = 0 */
        if (v0 != 0) ind[++*k] = t->col_z + fi, val[*k] = scale * v0;
        for (int md = 0; md < NM; md++) {
            const piece *p = &t->pc[c][fi][md];
            if (!p->ok) continue;
            int y = t->col_y[s][fi][md];
            for (int j = 1; j <= p->J; j++) {
                double d = (double)(PV(p, j, q) - PV(p, j - 1, q)) / u;
                if (d != 0) ind[++*k] = y + j - 1, val[*k] = scale * d;
            }
            if (p->tail && p->d[q] != 0) ind[++*k] = y + p->J, val[*k] = scale * (double)p->d[q] / u;
        }
    }
}

/* Stage s's choice as one number: Σ_f Σ_mode (n + 1)^mode·(Σ_j y + r)
 * (n its layers; one mode streams at a time, so distinct (mode, count)
 * choices get distinct numbers), coefficient `sign`. */
static void count_terms(const otmpl *t, int s, double sign, int *ind, double *val, int *k)
{
    const int c = t->cls_of[s];
    for (int fi = 0; fi < NF; fi++) {
        if (!t->fok[fi]) continue;
        double wt = 1;
        for (int md = 0; md < NM; md++, wt *= t->cls_n[c] + 1) {
            const piece *p = &t->pc[c][fi][md];
            if (!p->ok) continue;
            for (int j = 0; j < p->J + p->tail; j++) ind[++*k] = t->col_y[s][fi][md] + j, val[*k] = sign * wt;
        }
    }
}

/* Sums the coefficients of repeated columns in (ind, val)[1..k] (pos: one
 * zeroed slot per column, left zeroed); returns the new length. */
static int merge_terms(int *ind, double *val, int k, int *pos)
{
    int n = 0;
    for (int i = 1; i <= k; i++) {
        if (pos[ind[i]]) {
            val[pos[ind[i]]] += val[i];
            continue;
        }
        pos[ind[i]] = ++n;
        ind[n] = ind[i], val[n] = val[i];
    }
    for (int i = 1; i <= n; i++) pos[ind[i]] = 0;
    return n;
}

static sp_status solve_batch(const octx *b, otmpl **B, int nt, spi_offload_out *out, double *glpk_s)
{
    const spi_measure ms = *b->ms;
    sp_status st = SP_OK;
    int env, term;
    glp_prob *P;
    double t0 = now_s();
    SP_CHECK(spi_glpk_open(&P, &env, &term));
    /* columns: x_t, z_tf, (y_tsfj, r_tsf) per stage and fraction, X_tφ, V_tφ */
    int ncol = 0, width = 0;
    for (int i = 0; i < nt; i++) {
        otmpl *t = B[i];
        t->col_x = ++ncol;
        t->col_z = ncol + 1;
        ncol += NF;
        int per = 0;
        for (int s = 0; s < t->S; s++)
            for (int fi = 0; fi < NF; fi++)
                for (int md = 0; md < NM; md++) {
                    const piece *p = &t->pc[t->cls_of[s]][fi][md];
                    t->col_y[s][fi][md] = ncol + 1;
                    if (t->fok[fi] && p->ok) ncol += p->J + p->tail, per += p->J + p->tail + 1;
                }
        t->col_X = ncol + 1;
        t->col_V = t->col_X + SPI_PH_COUNT;
        ncol = t->col_V + SPI_PH_COUNT - 1;
        width += 2 * per + 2 * NF + 16;
    }
    glp_add_cols(P, ncol);
    int cap = width + 2 * nt + 16;
    int *ind = malloc((size_t)(cap + 1) * sizeof *ind);
    double *val = malloc((size_t)(cap + 1) * sizeof *val);
    int *pos = calloc((size_t)ncol + 1, sizeof *pos);   /* merges a row's repeated columns */
    int *colv = malloc((size_t)nt * sizeof *colv);
    if (!ind || !val || !pos || !colv) {
        st = spi_fail(SP_ENOMEM, "planner: out of memory");
        goto done;
    }
    /* a fraction that does not apply: its z column fixed at 0 (counted, not used) */
    for (int i = 0; i < nt; i++) {
        otmpl *t = B[i];
        glp_set_col_kind(P, t->col_x, GLP_BV);
        for (int fi = 0; fi < NF; fi++) {
            glp_set_col_kind(P, t->col_z + fi, GLP_BV);
            if (!t->fok[fi]) glp_set_col_bnds(P, t->col_z + fi, GLP_FX, 0, 0);
        }
        for (int s = 0; s < t->S; s++)
            for (int fi = 0; fi < NF; fi++)
                for (int md = 0; md < NM; md++) {
                    const piece *p = &t->pc[t->cls_of[s]][fi][md];
                    if (!t->fok[fi] || !p->ok) continue;
                    for (int j = 0; j < p->J; j++) glp_set_col_kind(P, t->col_y[s][fi][md] + j, GLP_BV);
                    if (p->tail) {
                        int r = t->col_y[s][fi][md] + p->J;
                        glp_set_col_kind(P, r, GLP_IV);
                        glp_set_col_bnds(P, r, GLP_DB, 0, t->cls_n[t->cls_of[s]] - p->J);
                    }
                }
        spi_measure_cols(P, &ms, t->col_X, t->col_V);
    }
#define ROW(type, lo, up)                                                  \
    do {                                                                   \
        k = merge_terms(ind, val, k, pos);                                 \
        int r_ = glp_add_rows(P, 1);                                       \
        glp_set_row_bnds(P, r_, type, lo, up);                             \
        glp_set_mat_row(P, r_, k, ind, val);                               \
        out->rows++;                                                       \
    } while (0)
    int k = 0;
    for (int i = 0; i < nt; i++) ind[++k] = B[i]->col_x, val[k] = 1;
    ROW(GLP_FX, 1, 1);
    for (int i = 0; i < nt; i++) {
        otmpl *t = B[i];
        const int S = t->S;
        k = 0;   /* one fraction */
        for (int fi = 0; fi < NF; fi++)
            if (t->fok[fi]) ind[++k] = t->col_z + fi, val[k] = 1;
        ind[++k] = t->col_x, val[k] = -1;
        ROW(GLP_FX, 0, 0);
        for (int s = 0; s < S; s++)
            for (int fi = 0; fi < NF; fi++) {
                /* order: Σ_mode y_1 <= z (one mode streams), y_j+1 <= y_j, r <= (n − J)·y_J */
                if (!t->fok[fi]) continue;
                k = 0;
                for (int md = 0; md < NM; md++) {
                    const piece *p = &t->pc[t->cls_of[s]][fi][md];
                    if (p->ok && p->J + p->tail > 0) ind[++k] = t->col_y[s][fi][md], val[k] = 1;
                }
                if (k) {
                    ind[++k] = t->col_z + fi, val[k] = -1;
                    ROW(GLP_UP, 0, 0);
                }
                for (int md = 0; md < NM; md++) {
                    const piece *p = &t->pc[t->cls_of[s]][fi][md];
                    if (!p->ok) continue;
                    int y = t->col_y[s][fi][md];
                    for (int j = 2; j <= p->J + p->tail; j++) {
                        k = 0;
                        ind[++k] = y + j - 1, val[k] = 1;
                        double c = j > p->J ? (double)(t->cls_n[t->cls_of[s]] - p->J) : 1;
                        ind[++k] = y + j - 2, val[k] = -c;
                        ROW(GLP_UP, 0, 0);
                    }
                }
            }
        for (int s = 0; s < S; s++) {   /* the stage's chip fits: HBM, host (bytes are whole: half a byte of
                                            margin on x_t, above GLPK's tolerance) */
            for (int q = Q_DEV; q <= Q_HOST; q++) {
                k = 0;
                stage_terms(t, s, q, 1, q == Q_DEV ? b->cap : b->hcap, ind, val, &k);
                ind[++k] = t->col_x, val[k] = 0.5 / MIB;
                ROW(GLP_UP, 0, 0);
            }
        }
        /* Φ_t >= Φ_t(0)·x_t: offload never makes a layout faster */
        k = spi_measure_lb_terms(&ms, t->col_V, t->col_x, t->lb, PS_PER_UNIT, ind, val);
        if (k > 1) ROW(GLP_LO, 0, 0);
        for (int p = 0; p < SPI_PH_COUNT; p++) {
            if (!ms.ph[p]) continue;
            for (int s = 0; s < S; s++) {   /* the bottleneck */
                k = 0;
                ind[++k] = t->col_X + p, val[k] = 1;
                stage_terms(t, s, p, -1, 0, ind, val, &k);
                ROW(GLP_LO, 0, 0);
            }
            const sp_cost_pipe_phase *f = &t->pipe.phase[p == SPI_PH_PF ? SP_PHASE_PREFILL : SP_PHASE_DECODE];
            for (int fm = 0; fm < f->n_forms; fm++) {   /* the phase's forms */
                k = 0;
                ind[++k] = t->col_V + p, val[k] = 1;
                if (f->sum_coef[fm])
                    for (int s = 0; s < S; s++)
                        stage_terms(t, s, p, -(double)f->sum_coef[fm] / (double)f->div, 0, ind, val, &k);
                if (f->max_coef[fm]) ind[++k] = t->col_X + p, val[k] = -(double)f->max_coef[fm] / (double)f->div;
                if (f->const_ps) ind[++k] = t->col_x, val[k] = -(double)f->const_ps / PS_PER_UNIT;
                ROW(GLP_LO, 0, 0);
            }
        }
        for (int s = 1; s + 1 < S - 1; s++) {   /* middle stages of one class stream descending counts */
            if (t->cls_of[s] != t->cls_of[s + 1]) continue;
            k = 0;
            count_terms(t, s, 1, ind, val, &k);
            count_terms(t, s + 1, -1, ind, val, &k);
            if (k) ROW(GLP_LO, 0, 0);
        }
    }
    for (int i = 0; i < nt; i++) colv[i] = B[i]->col_V;
    out->rows += spi_measure_bound_rows(P, &ms, b->inc, colv, nt, PS_PER_UNIT, ind, val);
#undef ROW
    out->cols += ncol;
    {
        int chosen;
        for (int i = 0; i < nt; i++) colv[i] = B[i]->col_x;
        st = spi_glpk_choose(P, b->o->time_limit_ms, colv, nt, "offload", &out->nodes, &out->unproven, &chosen);
        out->solved++;
        if (st != SP_OK || chosen < 0) goto done;
        otmpl *t = B[chosen];
        int fsel = -1;
        for (int fi = 0; fi < NF; fi++)
            if (t->fok[fi] && glp_mip_col_val(P, t->col_z + fi) > 0.5) fsel = fi;
        if (fsel < 0) {
            st = spi_fail(SP_EINTERNAL, "planner: the offload program chose no KV fraction");
            goto done;
        }
        sp_layout l;
        block_layout(&t->c->layout, kv_fracs[fsel], 0, M_ALL, 0, &l);
        for (int s = 0; s < t->S; s++) {
            int modes = 0;
            for (int md = 0; md < NM; md++) {
                const piece *p = &t->pc[t->cls_of[s]][fsel][md];
                if (!p->ok) continue;
                double n = 0;
                for (int j = 0; j < p->J + p->tail; j++) n += glp_mip_col_val(P, t->col_y[s][fsel][md] + j);
                if (lround(n) > 0) stage_stream(&l, s, md, (int)lround(n)), modes++;
            }
            if (modes > 1) {
                st = spi_fail(SP_EINTERNAL, "planner: the offload program streams %d parts of stage %d's weights",
                              modes, s);
                goto done;
            }
        }
        double v = glp_mip_obj_val(P) * PS_PER_UNIT * 1e-12;
        if (v < out->phi) {
            out->found = 1;
            out->layout = l;
            out->template_cand = (int)(t->c - b->sp->c);
            out->phi = v;
        }
    }
done:
    free(colv);
    free(pos);
    free(ind);
    free(val);
    spi_glpk_close(P, &env, term);
    if (glpk_s) *glpk_s += now_s() - t0;
    return st;
}

sp_status spi_offload_solve(const spi_space *sp, int inst, const spi_offload_req *r, spi_offload_out *out,
                            double *glpk_s)
{
    memset(out, 0, sizeof *out);
    out->phi = INFINITY;
    int weights;
    if (spi_offload_refusal(sp->m, sp->hw, &weights)) return SP_OK;
    const sp_workload *w = &sp->inst[inst].w;
    const sp_plan_opts *o = r->o;
    spi_measure ms;
    spi_measure_init(o, w, &ms);
    double inc = r->incumbent;
    otmpl *T = calloc((size_t)(sp->n ? sp->n : 1), sizeof *T);
    if (!T) return spi_fail(SP_ENOMEM, "planner: out of memory");
    int nt = 0;
    for (int i = 0; i < sp->n; i++) {
        const spi_cand *c = &sp->c[i];
        if (c->inst != inst || sp_layout_uneven(&c->layout) || sp_layout_offloads(&c->layout) ||
            sp_layout_disaggregated(&c->layout) || c->layout.stages > SP_LAYOUT_MAX_STAGES)
            continue;
        out->templates++;
        double lb = spi_split_measure(sp, c, o);
        /* no offload makes a layout faster: one that reaches Φ* or breaks a bound stays so */
        if (lb >= inc || spi_cand_latency(sp, c, o->latency_metric) > ms.max_lat ||
            (o->min_tokens_per_s > 0 && c->tokens_per_s < o->min_tokens_per_s)) {
            out->pruned++;
            continue;
        }
        otmpl *t = &T[nt++];
        t->c = c;
        t->S = c->layout.stages;
        t->lb = lb;
    }
    qsort(T, (size_t)nt, sizeof *T, cmp_lb);
    if (r->max_templates > 0 && nt > r->max_templates) nt = r->max_templates;
    const int batch = r->batch > 0 ? r->batch : 16;
    otmpl **B = malloc((size_t)(batch) * sizeof *B);
    sp_status st = B ? SP_OK : spi_fail(SP_ENOMEM, "planner: out of memory");
    octx bc = {sp, w, o, &ms, inc, (int64_t)(sp->hw->hbm_bytes * sp->hw->hbm_usable), sp->hw->host_bytes};
    for (int i0 = 0; st == SP_OK && i0 < nt;) {
        if (T[i0].lb >= inc) {
            out->pruned += nt - i0;
            break;
        }
        int nb = 0;
        double t_eval = now_s();
        for (; i0 < nt && nb < batch && T[i0].lb < inc && st == SP_OK; i0++) {
            otmpl *t = &T[i0];
            classes(sp, t);
            int any = 0;
            for (int fi = 0; fi < NF && st == SP_OK; fi++) {
                t->fok[fi] = 1;
                for (int c = 0; c < t->ncls && st == SP_OK && t->fok[fi]; c++) {
                    for (int md = 0; md < NM && st == SP_OK; md++)
                        st = price_piece(sp, w, weights, t, c, fi, md, out);
                    t->fok[fi] = t->pc[c][fi][M_ALL].ok;
                }
                if (st == SP_OK && t->fok[fi]) {
                    double sum = 0, prod = 1;
                    for (int s = 0; s < t->S; s++) {
                        int ks = 0;   /* the stage's choices: nothing, or a mode and 1..its counts */
                        for (int md = 0; md < NM; md++) {
                            const piece *p = &t->pc[t->cls_of[s]][fi][md];
                            if (p->ok) ks += p->tail ? t->cls_n[t->cls_of[s]] : p->J;
                        }
                        sum += ks + 1;
                        prod *= ks + 1;
                    }
                    out->choices_sum += sum;
                    out->choices_product += prod;
                }
                any |= t->fok[fi];
            }
            if (st == SP_OK && any) B[nb++] = t;
        }
        out->eval_s += now_s() - t_eval;
        if (st != SP_OK || nb == 0) continue;
        bc.inc = inc;
        st = solve_batch(&bc, B, nb, out, glpk_s);
        if (out->found && out->phi < inc) inc = out->phi;
        out->kept += nb;
    }
    for (int i = 0; i < nt; i++) free_tmpl(&T[i]);
    free(B);
    free(T);
    return st;
}
