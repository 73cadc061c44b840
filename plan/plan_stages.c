/*
 * plan_stages.c: the pipeline program.  Decides how a pipeline's layers are
 * split over its stages, and which pipeline, by a mixed-integer program over
 * priced building blocks; never enumerates the splits.
 *
 * DATA (from the cost model, sp_cost_stage_eval and sp_cost_pipe_terms)
 *   T          templates: the priced layouts of the space with 2 <= S <= 32
 *              stages (their even split is a candidate of the space); a
 *              template fixes everything but the split: mesh, replicas,
 *              micro-batches M, precision, phase layouts.
 *   K          stage kinds: first (embedding), middle, last (final norm and
 *              LM head); kind(s) of stage position s.
 *   N_t        layer counts a stage of t may hold: the window
 *              [max(1, b − W), min(L − S + 1, b + 1 + W)], b = floor(L/S),
 *              W = max(3, ceil(b/8)) (doc/planner.md).
 *   blocks     (t, k, n): a stage of kind k holding n layers under t,
 *              priced by the lowering: τ_φ(t,k,n) picoseconds per phase φ
 *              (prefill, first and last decode step) and its chip's memory
 *              over the usable HBM, μ(t,k,n) (ceil, MiB).  A stage's price
 *              does not depend on the other stages' layers (sp_lower_key).
 *   forms      sp_cost_pipe: phase φ of t takes max over the forms f of
 *              (a_f·Σ_s τ + b_f·max_s τ) / d_f + c_f, in ps (d_f: prefill
 *              passes per micro-batch, chunked prefill; else 1).
 *
 * VARIABLES
 *   x_t ∈ {0,1}             template t is the pipeline
 *   z_tsn ∈ {0,1}           stage s of t holds n layers        (n ∈ N_t)
 *   X_tφ >= 0               the slowest stage of t in phase φ
 *   V_tφ >= 0               phase φ's time under t
 *
 * CONSTRAINTS
 *   Σ_t x_t = 1                                   one pipeline
 *   Σ_n z_tsn − x_t = 0               ∀t, s       one layer count per stage
 *   Σ_{s,n} n·z_tsn − L·x_t = 0       ∀t          the stages hold every layer
 *                                                 (contiguous blocks in stage
 *                                                 order: stage 0 the first)
 *   Σ_n μ(t,kind(s),n)·z_tsn <= 0     ∀t, s       each stage's chip fits
 *   X_tφ − Σ_n τ_φ(t,kind(s),n)·z_tsn >= 0   ∀t, s, φ      the bottleneck
 *   X_tφ − m_tφ·x_t >= 0              ∀t, φ       its bound (REDUCTIONS)
 *   V_tφ − (a_f·Σ_{s,n} τ_φ z_tsn + b_f·X_tφ) / d_f − c_f·x_t >= 0  ∀t, φ, f
 *   Σ_n n·z_tsn − Σ_n n·z_t,s+1,n >= 0   ∀t, middle s < S − 2
 *                                                 (middle stages are alike:
 *                                                 their counts descend)
 *   Λ <= max_latency, Θ <= batch·tokens / min_tokens_per_s   (when asked)
 *   Φ <= Φ*, the best measure among the space's admissible layouts (when
 *   there is one: only a split at least as good can change the plan)
 *
 * OBJECTIVE
 *   min Φ, Φ the phase measure the plan's objective is monotone in, for
 *   one instance: total = V_prefill + gen/2·(V_decode1 + V_decode), one
 *   decode step V_decode, or the prompt V_prefill (sp_cost_eval's roll-up);
 *   Λ the latency metric's measure, Θ the total.  Unchosen templates have
 *   every z, X and V at 0, so the sums over t need no big-M.
 *
 * SIZE
 *   columns Σ_t (1 + Σ_s |N_t| + 6), rows 1 + Σ_t (2S + 1 +
 *   (S + 1)·phases + forms + max(0, S − 3)) + bounds: the sum of the choices.  The
 *   splits alone are Π_s |N_t| per template (the compositions of L).
 *
 * STAGE MESHES (a cluster; doc/planner.md "Stages of their own mesh")
 *   C_t        the template's mesh and up to 3 neighbours (cand_meshes);
 *              blocks (t, k, M, n) per mesh M, and e_φ(a, b) >= 0 the
 *              extra time of a stage of mesh a handing off to one of mesh
 *              b (hand_off).  With |C_t| > 1: u_tsM ∈ {0,1} (stage s has
 *              mesh M), y_tsMj (the incremental form per mesh), w_tsq >= 0
 *              per ordered pair q = (a, b) with some e != 0;
 *   Σ_M u_tsM = x_t,  Σ_{s,M} chips(M)·u_tsM = S·chips(m_t)·x_t,
 *   w_tsq >= u_ts,a + u_t,s+1,b − 1, and τ_s gains Σ_q e_q·w_tsq; the
 *   middle stages' descent only where no pair column exists.  The first
 *   bound takes two cases, every stage on m or some stage on a smaller
 *   mesh (mesh_bound); the second bound's dynamic programme counts chips
 *   too (dp_bound).
 *
 * REDUCTIONS (exact)
 *   A template whose lower bound Φ_LB >= the best Φ among the space's
 *   admissible candidates (the incumbent) cannot give a strictly better
 *   layout and is dropped before its blocks are priced.  Φ_LB: some stage
 *   holds at least ceil(L/S) layers, and a stage's time does not fall when
 *   it holds more layers, so max_s τ >= m = min_k τ(t,k,ceil(L/S)) over
 *   the kinds k of an S-stage pipeline (not the middle kind alone: a
 *   middle stage also receives, and in prefill the last stage is often the
 *   faster), and Σ_s τ >= max_s τ: each phase >= max_f (a_f + b_f)·m +
 *   c_f.  The same m bounds X_tφ in the program.
 */
#include <glpk.h>
#include <pthread.h>
#include <stdio.h>
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

enum { PH_PF = SPI_PH_PF, PH_D1 = SPI_PH_D1, PH_DN = SPI_PH_DN, PH_COUNT = SPI_PH_COUNT };
enum { K_FIRST = 0, K_MID = 1, K_LAST = 2, K_COUNT = 3 };

/* the times' unit in the program: microseconds keep its coefficients near 1 */
#define PS_PER_UNIT 1e6

/* the most stage meshes a template offers: its own, and one axis scaled by
 * 1/2, 3/2 or 2 (cand_meshes) */
#define MAX_MESHES 4

typedef struct tmpl {
    const spi_cand *c;
    int S, M, lo, hi, nn;      /* stages, micro-batches, window [lo, hi] of nn counts */
    int nm;                    /* stage meshes offered (1: the template's alone, the program as before) */
    int mesh[MAX_MESHES][3];   /* mesh[0]: the template's */
    int chips[MAX_MESHES];     /* X·Y·Z of each */
    int np;                    /* ordered pairs (a, b), a != b, whose hand-off costs more than a's own */
    int pair[MAX_MESHES * (MAX_MESHES - 1)][2];
    int64_t *hand;             /* [nm][nm][PH]: a stage of mesh a sending to one of mesh b, ps over a to a */
    sp_cost_pipe pipe;
    int64_t units;             /* prefill passes per micro-batch (the blocks say) */
    int64_t *tau;              /* [K][nm][nn][PH]: ps */
    double *mu;                /* [K][nm][nn]: ceil((bytes − capacity) / MiB) */
    int64_t mb[PH_COUNT];      /* the bottleneck's lower bound m per phase (REDUCTIONS) */
    double lb;                 /* Φ_LB, seconds */
    int mb_wait;               /* mb lacks the smaller meshes' case until the blocks are priced (mesh_bound) */
    int col_x, col_z, col_X, col_V, col_w;   /* first column of each group */
} tmpl;

#define TAUX(t, kd, mi, j) (&(t)->tau[((((kd) * (t)->nm + (mi)) * (t)->nn) + (j)) * PH_COUNT])
#define MUX(t, kd, mi, j) ((t)->mu[((kd) * (t)->nm + (mi)) * (t)->nn + (j)])

void spi_split_window(int64_t L, int S, int *lo, int *hi)
{
    int64_t b = L / S, W = (b + 7) / 8 > 3 ? (b + 7) / 8 : 3;
    int64_t a = b - W > 1 ? b - W : 1, z = b + 1 + W < L - S + 1 ? b + 1 + W : L - S + 1;
    *lo = (int)a;
    *hi = (int)z;
}

int spi_split_kind(int s, int S) { return s == 0 ? K_FIRST : s == S - 1 ? K_LAST : K_MID; }

typedef spi_measure measure;

static void phase_weights(const sp_workload *w, sp_plan_latency lm, double out[PH_COUNT])
{
    memset(out, 0, PH_COUNT * sizeof *out);
    if (lm == SP_PLAN_LAT_DECODE) out[PH_DN] = 1;
    else if (lm == SP_PLAN_LAT_PREFILL) out[PH_PF] = 1;
    else {
        out[PH_PF] = w->prompt > 0;
        out[PH_D1] = out[PH_DN] = w->gen > 0 ? 0.5 * (double)w->gen : 0;
    }
}

/* The phase measure f1 is monotone in, for one instance (spi_cand_objective). */
static sp_plan_latency objective_measure(const sp_plan_opts *o, const sp_workload *w)
{
    if (o->objective == SP_PLAN_MIN_LATENCY) return o->latency_metric;
    if (o->objective == SP_PLAN_MIN_COST && o->cost_metric == SP_PLAN_COST_PHASE) {
        if (o->latency_metric == SP_PLAN_LAT_DECODE) return SP_PLAN_LAT_DECODE;
        if (o->latency_metric == SP_PLAN_LAT_PREFILL && w->prompt > 0) return SP_PLAN_LAT_PREFILL;
    }
    return SP_PLAN_LAT_TOTAL;   /* cost: chips·total/tokens; throughput: tokens/total */
}

void spi_measure_init(const sp_plan_opts *o, const sp_workload *w, spi_measure *ms)
{
    memset(ms, 0, sizeof *ms);
    ms->ph[PH_PF] = w->prompt > 0;
    ms->ph[PH_D1] = ms->ph[PH_DN] = w->gen > 0;
    phase_weights(w, objective_measure(o, w), ms->w_obj);
    phase_weights(w, o->latency_metric, ms->w_lat);
    phase_weights(w, SP_PLAN_LAT_TOTAL, ms->w_tot);
    ms->max_lat = o->max_latency_s > 0 ? o->max_latency_s : INFINITY;
    ms->max_tot = INFINITY;
    if (o->min_tokens_per_s > 0)
        ms->max_tot = (double)w->batch * (double)(w->gen > 0 ? w->gen : w->prompt) / o->min_tokens_per_s;
}

static double cand_measure(const spi_cand *c, sp_plan_latency lm)
{
    return lm == SP_PLAN_LAT_DECODE ? c->decode_step_s : lm == SP_PLAN_LAT_PREFILL ? c->prefill_s : c->total_s;
}

/* A layout of template tl (S stages) whose stage at position s (of kind k)
 * holds n layers, the other stages sharing the rest evenly; every stage of
 * mesh `mesh` (NULL: the template's).  A stage's price does not depend on
 * the other stages' meshes but through its hand-off (hand_off), so the
 * block is priced with its neighbours alike. */
static void block_layout(const sp_layout *tl, int64_t L, int k, int n, const int *mesh, sp_layout *l, int *pos)
{
    *l = *tl;
    if (mesh) memcpy(l->mesh, mesh, sizeof l->mesh);
    int S = tl->stages, s = k == K_FIRST ? 0 : k == K_LAST ? S - 1 : 1;
    int64_t rest = L - n;
    for (int i = 0, j = 0; i < S; i++) {
        if (i == s) {
            l->stage_layers[i] = (int16_t)n;
            continue;
        }
        l->stage_layers[i] = (int16_t)(rest / (S - 1) + (j < rest % (S - 1) ? 1 : 0));
        j++;
    }
    *pos = s;
}

/* The block (kind k, n layers) of template tl: τ per phase (ps), μ (MiB over
 * the usable HBM, ceil) and the prefill passes per micro-batch. */
static sp_status stage_block(sp_cost_cache *cache, const sp_model *m, const sp_hw *hw, const sp_layout *tl,
                             const sp_workload *w, int k, int n, const int *mesh, int64_t tau[PH_COUNT], double *mu,
                             int64_t *units)
{
    sp_layout l;
    int pos;
    block_layout(tl, m->n_layers, k, n, mesh, &l, &pos);
    sp_cost_opts q;
    sp_cost_opts_init(&q);
    q.quiet = 1;
    q.cache = cache;
    sp_stage_cost sc;
    SP_CHECK(sp_cost_stage_eval(m, hw, &l, w, &q, pos, &sc));
    tau[PH_PF] = sc.prefill_ps;
    tau[PH_D1] = sc.decode1_ps;
    tau[PH_DN] = sc.decode_ps;
    *units = sc.prefill_units;
    int64_t cap = (int64_t)(hw->hbm_bytes * hw->hbm_usable);
    *mu = ceil((double)(sc.mem.total - cap) / 1048576.0);
    return SP_OK;
}

static sp_status price_block(const spi_space *sp, const sp_workload *w, tmpl *t, int k, int mi, int n,
                             int64_t tau[PH_COUNT], double *mu)
{
    int64_t units;
    SP_CHECK(stage_block(spi_space_cache(sp), sp->m, sp->hw, &t->c->layout, w, k, n, mi ? t->mesh[mi] : NULL, tau, mu,
                         &units));
    if (units != t->units) {   /* prefill passes per micro-batch: every stage alike */
        t->units = units;
        sp_cost_pipe_terms(sp->hw, &t->c->layout, t->units, &t->pipe);
    }
    return SP_OK;
}

int spi_split_is_template(const sp_layout *l, int64_t L)
{
    return l->stages >= 2 && !sp_layout_offloads(l) && l->stages <= SP_LAYOUT_MAX_STAGES && !sp_layout_uneven(l) &&
           L <= SP_LAYOUT_MAX_STAGE_LAYERS;
}

void spi_split_bound_of(const sp_stage_time *st, int S, int64_t m_ps[PH_COUNT], int64_t *units)
{
    /* some stage of any split holds at least ceil(L/S) layers, and a
     * stage's time does not fall when it holds more layers, so the slowest
     * stage takes at least min_k τ(k, ceil(L/S)) over the kinds k a stage
     * can be, and so at least min_k τ(k, n_k) for any n_k <= ceil(L/S):
     * the even split's stages 0 (first), 1 (the largest middle) and S − 1
     * (last) hold such counts.  Not τ(middle) alone: a middle stage also
     * receives, and in prefill a last stage of as many layers (one token's
     * logits) is often faster (palm-540b on 64 TPU v4 in 4 stages: 1,360 of
     * 2,005 layer counts near L/S). */
    const int at[3] = {0, S >= 3 ? 1 : 0, S - 1};
    for (int p = 0; p < PH_COUNT; p++) m_ps[p] = INT64_MAX;
    for (int i = 0; i < 3; i++) {
        const sp_stage_time *t = &st[at[i]];
        int64_t tau[PH_COUNT] = {t->prefill_ps, t->decode1_ps, t->decode_ps};
        for (int p = 0; p < PH_COUNT; p++)
            if (tau[p] < m_ps[p]) m_ps[p] = tau[p];
    }
    *units = st[S - 1].prefill_units;
}

sp_status spi_split_bound(sp_cost_cache *cache, const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                          int64_t m_ps[PH_COUNT], int64_t *units)
{
    const int S = l->stages;
    sp_stage_time st[SP_LAYOUT_MAX_STAGES];
    const int at[3] = {0, S >= 3 ? 1 : 0, S - 1};
    if (S < 2 || S > SP_LAYOUT_MAX_STAGES || sp_layout_uneven(l))
        return spi_fail(SP_EINVAL, "spi_split_bound: %d stages split evenly, not a template", S);
    sp_cost_opts o;
    sp_cost_opts_init(&o);
    o.cache = cache;
    for (int i = 0; i < 3; i++) {   /* the even split's stages, priced as sp_cost_eval prices them */
        sp_stage_cost sc;
        SP_CHECK(sp_cost_stage_eval(m, hw, l, w, &o, at[i], &sc));
        st[at[i]] = (sp_stage_time){sc.prefill_ps, sc.decode1_ps, sc.decode_ps, sc.prefill_units};
    }
    spi_split_bound_of(st, S, m_ps, units);
    return SP_OK;
}

/* The first bound of template t at ceil(L/S) layers for every stage kind
 * (its blocks priced), where the even split's stages hold fewer: the last
 * stage holds floor(L/S) layers when S does not divide L, and with a large
 * S one layer is much of a stage (palm-540b in 64 stages: one or two).
 * Raises t->mb where that is tighter; a block that does not apply leaves
 * it as it is. */
static sp_status refine_bound(const spi_space *sp, sp_cost_cache *cache, const sp_workload *w, tmpl *t)
{
    const int64_t L = sp->m->n_layers;
    const int S = t->S, n = (int)((L + S - 1) / S);
    int64_t m2[PH_COUNT];
    for (int p = 0; p < PH_COUNT; p++) m2[p] = INT64_MAX;
    for (int k = 0; k < K_COUNT; k++) {
        if (k == K_MID && S < 3) continue;
        int64_t tau[PH_COUNT], u;
        double mu;
        sp_status bs = stage_block(cache, sp->m, sp->hw, &t->c->layout, w, k, n, NULL, tau, &mu, &u);
        if (bs == SP_EINVAL) return SP_OK;
        SP_CHECK(bs);
        for (int p = 0; p < PH_COUNT; p++)
            if (tau[p] < m2[p]) m2[p] = tau[p];
    }
    for (int p = 0; p < PH_COUNT; p++)
        if (m2[p] > t->mb[p]) t->mb[p] = m2[p];
    return SP_OK;
}

/* Lower bound of a phase (ps) from the bottleneck bound m (REDUCTIONS). */
static double phase_lb(const sp_cost_pipe_phase *f, int64_t m)
{
    double best = 0;
    for (int i = 0; i < f->n_forms; i++) {
        double v = (double)(f->sum_coef[i] + f->max_coef[i]) * (double)m;
        if (v > best) best = v;
    }
    return best / (double)f->div + (double)f->const_ps;
}

static const sp_cost_pipe_phase *pipe_of(const tmpl *t, int ph)
{
    return &t->pipe.phase[ph == PH_PF ? SP_PHASE_PREFILL : SP_PHASE_DECODE];
}

double spi_split_first_lb(const spi_measure *ms, const sp_cost_pipe *pipe, const int64_t m_ps[PH_COUNT])
{
    double lb = 0;
    for (int p = 0; p < PH_COUNT; p++)
        if (ms->ph[p] && ms->w_obj[p] > 0)
            lb += ms->w_obj[p] * phase_lb(&pipe->phase[p == PH_PF ? SP_PHASE_PREFILL : SP_PHASE_DECODE], m_ps[p]) * 1e-12;
    return lb;
}

int spi_split_one_mesh(const sp_hw *hw, const sp_layout *l, int same_mesh)
{
    return same_mesh || hw->topo == SP_TOPO_TORUS || l->experts != 1 || sp_layout_offloads(l) ||
           l->stages > SPI_SPLIT_MESH_STAGES;
}

/* The least decode-step times (first and last step, ps) of a stage of each
 * kind holding lo layers in `view` (a template's decode view on one of its
 * meshes, dc_view), each stage priced for decode alone
 * (sp_cost_stage_eval_decode: the decode programs, keys and times
 * sp_cost_stage_eval has, without lowering a prefill or the other stages)
 * in the layout whose stage of that kind holds lo layers, the others the
 * rest (block_layout: a stage's price depends on its own layers and kind
 * alone).  SP_EINVAL: some stage does not lower (the caller then prices
 * the template's blocks). */
static sp_status decode_lo_of(const spi_space *sp, sp_cost_cache *cache, const sp_workload *w, const tmpl *t,
                              const sp_layout *view, int64_t out[2])
{
    out[0] = out[1] = INT64_MAX;
    sp_cost_opts q;
    sp_cost_opts_init(&q);
    q.quiet = 1;
    q.cache = cache;
    for (int k = 0; k < K_COUNT; k++) {
        if (k == K_MID && t->S < 3) continue;
        sp_layout l;
        int pos;
        block_layout(view, sp->m->n_layers, k, t->lo, NULL, &l, &pos);
        sp_stage_cost sc;
        SP_CHECK(sp_cost_stage_eval_decode(sp->m, sp->hw, &l, w, &q, pos, &sc));
        if (sc.decode1_ps < out[0]) out[0] = sc.decode1_ps;
        if (sc.decode_ps < out[1]) out[1] = sc.decode_ps;
    }
    return SP_OK;
}

/* The decode's view of template tl on mesh `mesh`: the prefill taking the
 * decode's FFN and attention layouts, prefill_chunk and prefill_tokens
 * cleared (what sp_layout_phase_group gives a decode group).  A decode
 * program's key clears exactly those (sp_lower_key, src/lower.c), so the
 * view's decode programs are tl's, and the templates that differ only in
 * their prefill (palm-540b on 256 h100: up to ten prefill layouts and chunk
 * sizes a decode layout) share one view. */
static void dc_view(const sp_layout *tl, const int *mesh, sp_layout *v)
{
    memcpy(v, tl, sizeof *v);
    v->phase[SP_PHASE_PREFILL] = v->phase[SP_PHASE_DECODE];
    v->prefill_chunk = v->prefill_tokens = 0;
    memcpy(v->mesh, mesh, sizeof v->mesh);
}

/* decode_lo_of's results by view, one memo per pricing thread: a view
 * prices the same wherever it is taken, so the bounds do not depend on the
 * threads.  Views are compared with memcmp (padding bytes that differ only
 * cost a second pricing). */
enum { DC_MEMO_SLOTS = 512 };
typedef struct dc_memo {
    unsigned char used[DC_MEMO_SLOTS];
    struct {
        sp_layout key;
        sp_status st;   /* SP_OK or SP_EINVAL */
        int64_t out[2];
    } slot[DC_MEMO_SLOTS];
} dc_memo;

static unsigned dc_slot(const sp_layout *v)
{
    /* FNV-1a over the view's 4-byte words */
    _Static_assert(sizeof(sp_layout) % 4 == 0, "sp_layout is hashed by 4-byte words");
    const unsigned char *b = (const unsigned char *)v;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof *v; i += 4) {
        uint32_t x;
        memcpy(&x, b + i, sizeof x);
        h = (h ^ x) * 16777619u;
    }
    return (h ^ (h >> 15)) % DC_MEMO_SLOTS;
}

/* decode_lo_of on t's decode view on its mesh mi, through memo (NULL: none). */
static sp_status decode_lo(const spi_space *sp, sp_cost_cache *cache, dc_memo *memo, const sp_workload *w,
                           const tmpl *t, int mi, int64_t out[2])
{
    sp_layout v;
    dc_view(&t->c->layout, t->mesh[mi], &v);
    if (!memo) return decode_lo_of(sp, cache, w, t, &v, out);
    unsigned i = dc_slot(&v);
    if (!memo->used[i] || memcmp(&memo->slot[i].key, &v, sizeof v)) {
        memo->used[i] = 0;
        sp_status st = decode_lo_of(sp, cache, w, t, &v, memo->slot[i].out);
        if (st != SP_OK && st != SP_EINVAL) return st;
        memo->slot[i].key = v;
        memo->slot[i].st = st;
        memo->used[i] = 1;
    }
    memcpy(out, memo->slot[i].out, 2 * sizeof *out);
    return memo->slot[i].st;
}

/* The least first and last decode step (ps) of the stages at lo layers on
 * t's meshes of fewer chips than its own (decode_lo on each; INT64_MAX
 * where none is smaller); SP_EINVAL where some layout does not lower.
 * What the space's decode bound kept in t's candidate (spi_cand.has_dlo,
 * spi_split_decode_lb) when it priced the same: the same decode view on
 * the same meshes (cand_meshes reads the layout's mesh, replicas, stages
 * and experts, which the full pricing's chunked variant keeps, and the
 * view clears what that variant sets), and the memos are exact, so the
 * kept figures are the ones pricing would give. */
static sp_status smaller_decode(const spi_space *sp, sp_cost_cache *cache, dc_memo *memo, const sp_workload *w,
                                const tmpl *t, int64_t d[2])
{
    if (t->c->has_dlo) {
        memcpy(d, t->c->dlo_ps, 2 * sizeof *d);
        return t->c->dlo_st;
    }
    d[0] = d[1] = INT64_MAX;
    for (int mi = 1; mi < t->nm; mi++) {
        if (t->chips[mi] >= t->chips[0]) continue;
        int64_t e[2];
        SP_CHECK(decode_lo(sp, cache, memo, w, t, mi, e));
        if (e[0] < d[0]) d[0] = e[0];
        if (e[1] < d[1]) d[1] = e[1];
    }
    return SP_OK;
}

/* hd's decode steps lowered to the smaller meshes' (smaller_decode's d) */
static void fold_smaller(int64_t hd[PH_COUNT], const int64_t d[2])
{
    if (d[0] < hd[PH_D1]) hd[PH_D1] = d[0];
    if (d[1] < hd[PH_DN]) hd[PH_DN] = d[1];
}

/* The decode-first bound of mesh_bound's smaller meshes' case (below): the
 * prefill at 0 (any stage's time is >= 0) and each decode step at the
 * least of the smaller meshes' stages at lo layers (smaller_decode), a
 * bound on the slowest stage of every pipeline with a stage on a smaller
 * mesh.  Reads t->mesh and t->chips; SP_EINVAL where some layout does not
 * lower. */
static sp_status decode_first(const spi_space *sp, sp_cost_cache *cache, dc_memo *memo, const sp_workload *w,
                              const tmpl *t, int64_t hd[PH_COUNT])
{
    hd[PH_PF] = 0;
    hd[PH_D1] = hd[PH_DN] = INT64_MAX;
    int64_t d[2];
    SP_CHECK(smaller_decode(sp, cache, memo, w, t, d));
    fold_smaller(hd, d);
    return SP_OK;
}

/* The first bound over t's other meshes.  The replica's chips are fixed
 * (Σ_s chips(M_s) = S·chips(m)), and m is the one candidate of its size
 * (cand_meshes: the others are m scaled by 1/2, 3/2 or 2), so a pipeline
 * whose stages do not all have m has a stage on a mesh of fewer chips (and
 * one on a mesh of more).  That stage holds at least lo layers and its time
 * does not fall with more layers, nor with its hand-off (one message or
 * more of its block, no nearer tier: hand_off), so the slowest stage takes
 * at least min over the kinds k and the smaller meshes M of τ(k, M, n_kM),
 * n_kM the least count in the window whose block applies (where none does,
 * no stage of kind k has M).  With m everywhere the bound m_φ stands; so
 * Φ_LB is the least of the two cases' bounds (each case's bottleneck
 * holds in every phase at once), and the program's rows take m_φ at the
 * least of the two per phase.  Where no candidate is smaller or none
 * larger, every stage has m and m_φ stands as it is.  Before any prefill
 * is lowered, the decode alone (decode_first) may already drop t.
 * Only the smaller meshes are priced, at the window's lower end: not every mesh at
 * ceil(L/S) (palm-540b on 256 h100: 3 blocks or fewer a template, not 6 to
 * 9, and a tighter bound).  *done: t->mb is final (0: the bound stopped
 * once it could not drop t, *lb then no more than t's; t->mb waits for t's
 * blocks: called again after price_blocks, it reads the same blocks from
 * t->tau instead of pricing them). */
static sp_status mesh_bound(const spi_space *sp, sp_cost_cache *cache, dc_memo *memo, const sp_workload *w,
                            const measure *ms, double inc, tmpl *t, double *lb, int *done)
{
    int smaller = 0, larger = 0;
    *done = 1;
    for (int mi = 1; mi < t->nm; mi++) {
        smaller |= t->chips[mi] < t->chips[0];
        larger |= t->chips[mi] > t->chips[0];
    }
    if (!smaller || !larger) return SP_OK;
    /* Φ_LB is the least of the two cases' bounds: every stage on m (the
     * even one, from t->mb), or some stage on a smaller mesh (from h); the
     * program's rows take the least per phase (t->mb below) */
    const double lb_even = spi_split_first_lb(ms, &t->pipe, t->mb);
    if (!t->tau && (*lb = lb_even) < inc) {   /* t stays: its blocks will say */
        *done = 0;
        return SP_OK;
    }
    if (!t->tau && !isinf(inc) && ms->ph[PH_DN] && (ms->w_obj[PH_D1] > 0 || ms->w_obj[PH_DN] > 0)) {
        /* First the decode alone: the smaller meshes' case with its prefill
         * at 0 (any stage's time is >= 0) and its decode steps from the
         * smaller meshes' stages at lo layers (a stage holds at least lo and
         * its time does not fall with more) is a bound of that case; where
         * it reaches the incumbent, so does Φ_LB (the even case does
         * already), and t is dropped without lowering a prefill.  The
         * decode programs are shared by every template of the same decode
         * layout (palm-540b on 256 h100: 47k distinct of 313k look-ups,
         * against 172k of 314k for the prefill, which also depends on the
         * decode's cache layout), so this is the cheap half. */
        int64_t hd[PH_COUNT];
        sp_status ds = decode_first(sp, cache, memo, w, t, hd);
        if (ds != SP_OK && ds != SP_EINVAL) return ds;
        double lbd;
        if (ds == SP_OK && (lbd = spi_split_first_lb(ms, &t->pipe, hd)) >= inc) {
            for (int p = 0; p < PH_COUNT; p++)   /* weaker than the blocks', still a bound: t is dropped */
                if (hd[p] < t->mb[p]) t->mb[p] = hd[p];
            *lb = lbd < lb_even ? lbd : lb_even;
            return SP_OK;
        }
    }
    int64_t h[PH_COUNT] = {INT64_MAX, INT64_MAX, INT64_MAX};   /* the smaller meshes' case */
    for (int mi = 1; mi < t->nm; mi++) {
        if (t->chips[mi] >= t->chips[0]) continue;
        for (int k = 0; k < K_COUNT; k++) {
            if (k == K_MID && t->S < 3) continue;
            for (int j = 0; j < t->nn; j++) {
                int64_t tau[PH_COUNT], u;
                double mu;
                if (t->tau) {   /* priced by price_blocks */
                    if (isinf(MUX(t, k, mi, j))) continue;
                    memcpy(tau, TAUX(t, k, mi, j), sizeof tau);
                } else {
                    sp_status bs = stage_block(cache, sp->m, sp->hw, &t->c->layout, w, k, t->lo + j,
                                               t->mesh[mi], tau, &mu, &u);
                    if (bs == SP_EINVAL) continue;
                    SP_CHECK(bs);
                }
                for (int p = 0; p < PH_COUNT; p++)
                    if (tau[p] < h[p]) h[p] = tau[p];
                break;
            }
            /* the case's bound only falls with more kinds priced; the even
             * case's reaches the incumbent */
            if (!t->tau && (*lb = spi_split_first_lb(ms, &t->pipe, h)) < inc) {   /* t stays whatever the rest is */
                *done = 0;
                return SP_OK;
            }
        }
    }
    for (int p = 0; p < PH_COUNT; p++)
        if (h[p] < t->mb[p]) t->mb[p] = h[p];
    double lh = spi_split_first_lb(ms, &t->pipe, h);
    *lb = lh < lb_even ? lh : lb_even;
    return SP_OK;
}

typedef struct bctx {
    const spi_space *sp;
    const sp_workload *w;
    int64_t L;
    const sp_plan_opts *o;
    const measure *msp;
    double max_lat, max_tot, inc;
} bctx;

/* The stage meshes template t offers (doc/planner.md, "Stages of their own
 * mesh"): its own mesh m and, for each ratio 1/2, 3/2 and 2, m with one
 * axis scaled by it: the longest axis whose scaled length is an integer
 * (Z before Y before X on a tie), at most the replica's chips less one
 * per other stage; on a cluster of several nodes only a mesh whose stage
 * (replicas × mesh) fills whole nodes and whose axes fit the nodes, as
 * sp_layout_check asks.  One mesh (the program as for even meshes) on a
 * torus (a slice is one box), with experts, beyond SPI_SPLIT_MESH_STAGES
 * stages, or when the request asks for even meshes. */
static void cand_meshes(const spi_space *sp, tmpl *t, int same_mesh)
{
    const sp_layout *tl = &t->c->layout;
    const sp_hw *hw = sp->hw;
    memcpy(t->mesh[0], tl->mesh, sizeof t->mesh[0]);
    t->chips[0] = tl->mesh[0] * tl->mesh[1] * tl->mesh[2];
    t->nm = 1;
    if (spi_split_one_mesh(hw, tl, same_mesh)) return;
    const int64_t per_replica = (int64_t)t->S * t->chips[0], N = per_replica * tl->replicas;
    const int several_nodes = hw->chips_per_node > 0 && N > hw->chips_per_node;
    static const int num[3] = {1, 3, 2}, den[3] = {2, 2, 1};
    for (int r = 0; r < 3; r++) {
        int best = -1;
        for (int ax = 2; ax >= 0; ax--) {
            int d = tl->mesh[ax];
            if ((d * num[r]) % den[r] || d * num[r] / den[r] < 1) continue;
            if (best < 0 || d > tl->mesh[best]) best = ax;
        }
        if (best < 0) continue;
        int v[3];
        memcpy(v, tl->mesh, sizeof v);
        v[best] = tl->mesh[best] * num[r] / den[r];
        int64_t c = (int64_t)v[0] * v[1] * v[2];
        if (c > per_replica - (t->S - 1)) continue;
        if (several_nodes && (c * tl->replicas) % hw->chips_per_node) continue;
        sp_layout view = *tl;
        memcpy(view.mesh, v, sizeof v);
        if (!sp_layout_fits_nodes(&view, hw, NULL)) continue;
        memcpy(t->mesh[t->nm], v, sizeof v);
        t->chips[t->nm++] = (int)c;
    }
}

/* A template of layout tl (in *c, which t points to) with its first bound
 * m_ps (t->mb) and its pipeline forms for `units` prefill passes, offering
 * its stage meshes (cand_meshes) */
static void tmpl_of(const spi_space *sp, const sp_layout *tl, const int64_t m_ps[PH_COUNT], int64_t units,
                    int same_mesh, spi_cand *c, tmpl *t)
{
    memset(c, 0, sizeof *c);
    c->layout = *tl;
    memset(t, 0, sizeof *t);
    t->c = c;
    t->S = tl->stages;
    spi_split_window(sp->m->n_layers, t->S, &t->lo, &t->hi);
    t->nn = t->hi - t->lo + 1;
    memcpy(t->mb, m_ps, sizeof t->mb);
    t->units = units;
    sp_cost_pipe_terms(sp->hw, tl, units, &t->pipe);
    cand_meshes(sp, t, same_mesh);
}

sp_status spi_split_mesh_bound(const spi_space *sp, const sp_workload *w, const sp_layout *tl, int64_t m_ps[SPI_PH_COUNT],
                               int64_t dc_ps[SPI_PH_COUNT], int *hetero)
{
    const int64_t none[PH_COUNT] = {INT64_MAX, INT64_MAX, INT64_MAX};
    spi_cand c;
    tmpl t;
    tmpl_of(sp, tl, none, 1, 0, &c, &t);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    measure ms;
    spi_measure_init(&o, w, &ms);
    double lb;
    int done;
    SP_CHECK(mesh_bound(sp, spi_space_cache(sp), NULL, w, &ms, -INFINITY, &t, &lb, &done));
    memcpy(m_ps, t.mb, sizeof t.mb);
    /* the decode-first bound of the smaller meshes' case (every pipeline of
     * stage meshes has a smaller-mesh stage) */
    sp_status ds = decode_first(sp, spi_space_cache(sp), NULL, w, &t, dc_ps);
    if (ds == SP_EINVAL)
        for (int p = 0; p < PH_COUNT; p++) dc_ps[p] = 0;
    else SP_CHECK(ds);
    *hetero = 0;
    for (int p = 0; p < PH_COUNT; p++) *hetero |= m_ps[p] != INT64_MAX;
    return SP_OK;
}

void spi_split_decode_lb(const spi_space *sp, const spi_measure *ms, const sp_layout *tl, const sp_stage_time *st,
                         int same_mesh, spi_split_dlb *d, double *lb)
{
    spi_split_bound_of(st, tl->stages, d->m_ps, &d->units);
    d->m_ps[PH_PF] = 0;   /* no prefill ran; any stage's is >= 0 */
    spi_cand c;
    tmpl t;
    tmpl_of(sp, tl, d->m_ps, d->units, same_mesh, &c, &t);
    int smaller = 0, larger = 0;
    for (int mi = 1; mi < t.nm; mi++) {
        smaller |= t.chips[mi] < t.chips[0];
        larger |= t.chips[mi] > t.chips[0];
    }
    d->same_mesh = same_mesh;
    d->smaller = smaller && larger;   /* mesh_bound's two cases: the smaller meshes' waits */
    *lb = spi_split_first_lb(ms, &t.pipe, d->m_ps);
}

sp_status spi_split_decode_lb_smaller(const spi_space *sp, sp_cost_cache *cache, const sp_workload *w,
                                      const spi_measure *ms, spi_cand *tc, const spi_split_dlb *d, double *lb)
{
    spi_cand c;
    tmpl t;
    tmpl_of(sp, &tc->layout, d->m_ps, d->units, d->same_mesh, &c, &t);
    int64_t hd[PH_COUNT], e[2];
    memcpy(hd, d->m_ps, sizeof hd);
    tc->has_dlo = 0;
    sp_status ds = smaller_decode(sp, cache, NULL, w, &t, e);
    if (ds != SP_OK && ds != SP_EINVAL) return ds;
    /* kept for the program's mesh bound (smaller_decode: the same figures
     * wherever they are priced) */
    tc->has_dlo = 1;
    tc->dlo_st = ds;
    memcpy(tc->dlo_ps, e, sizeof e);
    if (ds == SP_EINVAL) {
        *lb = -INFINITY;   /* the smaller meshes' case unknown: no bound */
        return SP_OK;
    }
    fold_smaller(hd, e);   /* decode_first's h, from m_ps (its prefill at 0 already) */
    *lb = spi_split_first_lb(ms, &t.pipe, hd);
    return SP_OK;
}

/* The hand-off of a stage of mesh a to a next stage of mesh b (a != b):
 * the sending stage's SEND step meets every chip of b whose block of the
 * activations overlaps its own, one message each (sp_lower_stage_xfer), so
 * its time depends on both meshes; the receive costs the receiver nothing
 * (the sender's transfer carries it).  Priced as the sending stage's time
 * in a layout whose next stage has mesh b, less its block's (neighbours
 * alike, one message): the SEND is the stage's last step and blocks both
 * streams, so the difference is the same at every layer count and for
 * the first and middle kinds (the re-pricing by sp_cost_eval checks it).
 * *bad: the pair does not lower (then the program forbids it). */
static sp_status hand_off(const spi_space *sp, const sp_workload *w, const tmpl *t, int a, int b,
                          int64_t out[PH_COUNT], int *bad)
{
    memset(out, 0, PH_COUNT * sizeof *out);
    *bad = 0;
    for (int kd = K_FIRST; kd <= K_MID; kd++) {
        if (kd == K_MID && t->S < 3) break;
        for (int j = 0; j < t->nn; j++) {
            if (isinf(MUX(t, kd, a, j))) continue;
            sp_layout l;
            int pos;
            block_layout(&t->c->layout, sp->m->n_layers, kd, t->lo + j, t->mesh[a], &l, &pos);
            /* the other stages one chip each: the pipeline's chips stay within a node when the
             * template's do (the hand-off's tier, sp_cost), and exceed one when they do */
            for (int s = 0; s < t->S; s++) l.stage_mesh[s][0] = l.stage_mesh[s][1] = l.stage_mesh[s][2] = 1;
            memcpy(l.stage_mesh[pos], t->mesh[a], sizeof l.stage_mesh[pos]);
            memcpy(l.stage_mesh[pos + 1], t->mesh[b], sizeof l.stage_mesh[pos + 1]);
            if (pos > 0) memcpy(l.stage_mesh[0], t->mesh[a], sizeof l.stage_mesh[0]);
            memcpy(l.mesh, l.stage_mesh[0], sizeof l.mesh);
            sp_cost_opts q;
            sp_cost_opts_init(&q);
            q.quiet = 1;
            q.cache = spi_space_cache(sp);
            sp_stage_cost sc;
            sp_status st = sp_cost_stage_eval(sp->m, sp->hw, &l, w, &q, pos, &sc);
            if (st == SP_EINVAL) {
                *bad = 1;
                return SP_OK;
            }
            SP_CHECK(st);
            const int64_t *base = TAUX(t, kd, a, j);
            out[PH_PF] = sc.prefill_ps - base[PH_PF];
            out[PH_D1] = sc.decode1_ps - base[PH_D1];
            out[PH_DN] = sc.decode_ps - base[PH_DN];
            return SP_OK;
        }
    }
    return SP_OK;   /* a mesh no sending stage can have: its hand-off never counts */
}

/* Prices every block (kind, mesh, layers in the window) of t, and the
 * hand-offs between its meshes. */
static sp_status price_blocks(const spi_space *sp, const sp_workload *w, const measure *ms, tmpl *t,
                              spi_split_out *out)
{
    double t_eval = now_s();
    sp_status st = SP_OK;
    const int nm = t->nm;
    t->tau = malloc((size_t)(K_COUNT * nm * t->nn * PH_COUNT) * sizeof *t->tau);
    t->mu = malloc((size_t)(K_COUNT * nm * t->nn) * sizeof *t->mu);
    t->hand = calloc((size_t)(nm * nm * PH_COUNT), sizeof *t->hand);
    if (!t->tau || !t->mu || !t->hand) return spi_fail(SP_ENOMEM, "planner: out of memory");
    for (int k = 0; k < K_COUNT && st == SP_OK; k++)
        for (int mi = 0; mi < nm && st == SP_OK; mi++)
            for (int j = 0; j < t->nn && st == SP_OK; j++) {
                int64_t *tau = TAUX(t, k, mi, j);
                double *mu = &MUX(t, k, mi, j);
                if (k == K_MID && t->S < 3) {
                    memset(tau, 0, PH_COUNT * sizeof *tau);
                    *mu = 0;
                    continue;
                }
                sp_status bs = price_block(sp, w, t, k, mi, t->lo + j, tau, mu);
                if (bs == SP_EINVAL) *mu = INFINITY;   /* does not apply: the block is fixed at 0 */
                else st = bs;
                out->blocks++;
            }
    t->np = 0;
    for (int a = 0; a < nm && st == SP_OK; a++)
        for (int b = 0; b < nm && st == SP_OK; b++) {
            if (a == b) continue;
            int64_t *e = &t->hand[(a * nm + b) * PH_COUNT];
            int bad;
            if ((st = hand_off(sp, w, t, a, b, e, &bad)) != SP_OK) break;
            out->blocks++;
            int used = bad;
            for (int p = 0; p < PH_COUNT; p++) used |= ms->ph[p] && e[p] != 0;
            if (bad) e[0] = INT64_MIN;   /* forbidden (pair rows) */
            if (!used) continue;
            t->pair[t->np][0] = a;
            t->pair[t->np++][1] = b;
        }
    out->eval_s += now_s() - t_eval;
    return st;
}

static int gcd_int(int a, int b) { return b ? gcd_int(b, a % b) : a; }

/* The second bound (REDUCTIONS), from t's priced blocks: per phase, the
 * least Σ_s τ and the least max_s τ over the splits (and stage meshes
 * using the replica's chips exactly) whose stages all fit, each by dynamic
 * programming over the stages (state: layers and chips so far), minimised
 * apart, the hand-offs left out (each >= 0, less the most negative where
 * one is below: rounding); +inf when no split fits. */
static double dp_bound(const tmpl *t, int64_t L, const measure *ms)
{
    const int S = t->S, nn = t->nn, nm = t->nm;
    int unit[MAX_MESHES], g = 0, B = 0;
    for (int mi = 0; mi < nm; mi++) g = gcd_int(g, t->chips[mi]);
    for (int mi = 0; mi < nm; mi++) unit[mi] = nm > 1 ? t->chips[mi] / g : 0;
    if (nm > 1) B = S * t->chips[0] / g;
    const int C = B + 1, W = ((int)L + 1) * C;
    double slack = 0;   /* a hand-off below its block's time (ps), at most (S − 1) of them */
    for (int q = 0; t->hand && q < t->np; q++)
        for (int p = 0; p < PH_COUNT; p++) {
            int64_t e = t->hand[(t->pair[q][0] * nm + t->pair[q][1]) * PH_COUNT + p];
            if (e != INT64_MIN && e < 0 && (double)-e > slack) slack = (double)-e;
        }
    double *f = malloc((size_t)(2 * W) * sizeof *f), *gm = malloc((size_t)(2 * W) * sizeof *gm);
    if (!f || !gm) {
        free(f);
        free(gm);
        return 0;   /* no bound: the template stays */
    }
    double lb = 0;
    for (int p = 0; p < PH_COUNT && !isinf(lb); p++) {
        if (!ms->ph[p] || ms->w_obj[p] <= 0) continue;
        double *fs = f, *fn = f + W, *gs = gm, *gn = gm + W;
        for (int r = 0; r < W; r++) fs[r] = gs[r] = INFINITY;
        fs[0] = gs[0] = 0;
        for (int s = 0; s < S; s++) {
            int kd = spi_split_kind(s, S);
            for (int r = 0; r < W; r++) fn[r] = gn[r] = INFINITY;
            for (int r = 0; r <= (int)L; r++)
                for (int c = 0; c < C; c++) {
                    double f0 = fs[r * C + c], g0 = gs[r * C + c];
                    if (isinf(f0)) continue;
                    for (int mi = 0; mi < nm; mi++) {
                        int cc = c + unit[mi];
                        if (cc > B) continue;
                        for (int j = 0; j < nn && r + t->lo + j <= (int)L; j++) {
                            if (MUX(t, kd, mi, j) > 0) continue;   /* does not fit, or does not apply */
                            double tau = (double)TAUX(t, kd, mi, j)[p];
                            int q = (r + t->lo + j) * C + cc;
                            if (f0 + tau < fn[q]) fn[q] = f0 + tau;
                            double mx = g0 > tau ? g0 : tau;
                            if (mx < gn[q]) gn[q] = mx;
                        }
                    }
                }
            double *x = fs;
            fs = fn, fn = x;
            x = gs, gs = gn, gn = x;
        }
        double sum = fs[L * C + B] - (S - 1) * slack, mx = gs[L * C + B] - slack;
        if (isinf(sum)) {
            lb = INFINITY;
            break;
        }
        const sp_cost_pipe_phase *fm = pipe_of(t, p);
        double best = 0;
        for (int i = 0; i < fm->n_forms; i++) {
            double v = (double)fm->sum_coef[i] * sum + (double)fm->max_coef[i] * mx;
            if (v > best) best = v;
        }
        lb += ms->w_obj[p] * (best / (double)fm->div + (double)fm->const_ps) * 1e-12;
    }
    free(f);
    free(gm);
    return lb;
}

/* GLPK callback: the branch-and-bound tree's node count so far (every node
 * created, the removed ones included) into *(int *)info */
void spi_glpk_count_nodes(glp_tree *T, void *info)
{
    int a, n, t;
    glp_ios_tree_size(T, &a, &n, &t);
    if (t > *(int *)info) *(int *)info = t;
}

static int cmp_lb(const void *a, const void *b)
{
    const tmpl *x = a, *y = b;
    if (x->lb != y->lb) return x->lb < y->lb ? -1 : 1;
    return (x->c > y->c) - (x->c < y->c);   /* the space's order */
}

/* Columns of template t's stage s: u(s, mesh mi) (x_t itself when t offers
 * one mesh) and y(s, mi, j), j = 1 .. nn − 1; pair q's w at boundary s. */
static int stage_width(const tmpl *t) { return t->nm * (t->nn - 1) + (t->nm > 1 ? t->nm : 0); }
static int col_u(const tmpl *t, int s, int mi) { return t->nm > 1 ? t->col_z + s * stage_width(t) + mi : t->col_x; }
static int col_y(const tmpl *t, int s, int mi, int j)
{
    return t->col_z + s * stage_width(t) + (t->nm > 1 ? t->nm : 0) + mi * (t->nn - 1) + j - 1;
}
static int col_w(const tmpl *t, int s, int q) { return t->col_w + s * t->np + q; }
static double tau_u(const tmpl *t, int kd, int mi, int j, int p)
{
    return (double)TAUX(t, kd, mi, j)[p] / PS_PER_UNIT;
}
static int hand_bad(const tmpl *t, int a, int b) { return t->hand[(a * t->nm + b) * PH_COUNT] == INT64_MIN; }
static double hand_u(const tmpl *t, int a, int b, int p)
{
    return (double)t->hand[(a * t->nm + b) * PH_COUNT + p] / PS_PER_UNIT;
}

/* Appends coef × (stage s's time in phase p less its base at lo layers
 * when t offers one mesh, which the caller puts on x_t) to ind/val from
 * *k: every mesh's base on its u, the telescoped steps on the y's, the
 * hand-off to the next stage on the pair columns. */
static void stage_time_terms(const tmpl *t, int s, int p, double coef, int *ind, double *val, int *k)
{
    const int kd = spi_split_kind(s, t->S);
    for (int mi = 0; mi < t->nm; mi++) {
        if (t->nm > 1 && tau_u(t, kd, mi, 0, p) != 0) ind[++*k] = col_u(t, s, mi), val[*k] = coef * tau_u(t, kd, mi, 0, p);
        for (int j = 1; j < t->nn; j++) {
            double d = tau_u(t, kd, mi, j, p) - tau_u(t, kd, mi, j - 1, p);
            if (d != 0) ind[++*k] = col_y(t, s, mi, j), val[*k] = coef * d;
        }
    }
    for (int q = 0; s + 1 < t->S && q < t->np; q++) {
        int a = t->pair[q][0], b = t->pair[q][1];
        if (!hand_bad(t, a, b) && hand_u(t, a, b, p) != 0) ind[++*k] = col_w(t, s, q), val[*k] = coef * hand_u(t, a, b, p);
    }
}

/* Prices the blocks of templates T[0..nt) and solves their program, cut off
 * at b->inc; a split better than out's best goes to out. */
static sp_status solve_batch(const bctx *b, tmpl **B, int nt, spi_split_out *out, double *glpk_s)
{
    const spi_space *sp = b->sp;
    const int64_t L = b->L;
    const sp_plan_opts *o = b->o;
    const measure ms = *b->msp;
    const double inc = b->inc;
    sp_status st = SP_OK;
    /* the program */
    int env, term;
    glp_prob *P;
    double t0 = now_s();
    SP_CHECK(spi_glpk_open(&P, &env, &term));
    /* columns: x_t; per stage u_tsm (more than one mesh) and y_tsmj (j = 1 .. nn − 1); X_tφ,
     * V_tφ; the pairs' w_tsq */
    int ncol = 0;
    for (int i = 0; i < nt; i++) {
        tmpl *t = B[i];
        t->col_x = ncol + 1;
        t->col_z = t->col_x + 1;
        t->col_X = t->col_z + t->S * stage_width(t);
        t->col_V = t->col_X + PH_COUNT;
        t->col_w = t->col_V + PH_COUNT;
        ncol = t->col_w + (t->S - 1) * t->np - 1;
    }
    glp_add_cols(P, ncol);
    for (int i = 0; i < nt; i++) {
        tmpl *t = B[i];
        glp_set_col_kind(P, t->col_x, GLP_BV);
        for (int c = t->col_z; c < t->col_X; c++) glp_set_col_kind(P, c, GLP_BV);
        spi_measure_cols(P, &ms, t->col_X, t->col_V);
        for (int c = t->col_w; c < t->col_w + (t->S - 1) * t->np; c++) glp_set_col_bnds(P, c, GLP_LO, 0, 0);
    }
    int cap = 8;
    for (int i = 0; i < nt; i++) cap += 2 * B[i]->S * (stage_width(B[i]) + B[i]->np) + 8;
    int *ind = malloc((size_t)(cap + 1) * sizeof *ind);
    double *val = malloc((size_t)(cap + 1) * sizeof *val);
    int *colv = malloc((size_t)nt * sizeof *colv);
    if (!ind || !val || !colv) {
        st = spi_fail(SP_ENOMEM, "planner: out of memory");
        goto prob_done;
    }
#define ROW(type, lb, ub)                                                  \
    do {                                                                   \
        int r_ = glp_add_rows(P, 1);                                       \
        glp_set_row_bnds(P, r_, type, lb, ub);                             \
        glp_set_mat_row(P, r_, k, ind, val);                               \
        out->rows++;                                                       \
    } while (0)
    /* y_tsmj = [stage s of t has mesh m and holds at least lo + j layers]:
     * a stage's price at n layers telescopes, f(m, n) = f(m, lo)·u_tsm +
     * Σ_{j <= n − lo} (f(m, lo + j) − f(m, lo + j − 1))·y_tsmj, and
     * branching on y_tsmj splits the range of n (the incremental form; its
     * relaxation is each stage's convex hull); u_tsm = [stage s has mesh
     * m], Σ_m u_tsm = x_t (with one mesh u_ts0 is x_t) */
#define TAU(t, kd, mi, j, p) tau_u(t, kd, mi, j, p)
    int k = 0;
    for (int i = 0; i < nt; i++) ind[++k] = B[i]->col_x, val[k] = 1;
    ROW(GLP_FX, 1, 1);
    for (int i = 0; i < nt; i++) {
        tmpl *t = B[i];
        const int S = t->S, nn = t->nn, nm = t->nm;
        for (int s = 0; s < S; s++) {
            int kd = spi_split_kind(s, S);
            if (nm > 1) {   /* one mesh per stage */
                k = 0;
                for (int mi = 0; mi < nm; mi++) ind[++k] = col_u(t, s, mi), val[k] = 1;
                ind[++k] = t->col_x, val[k] = -1;
                ROW(GLP_FX, 0, 0);
            }
            for (int mi = 0; mi < nm; mi++) {
                for (int j = 1; j < nn; j++) {   /* y_tsm1 <= u_tsm, y_tsmj+1 <= y_tsmj */
                    k = 0;
                    ind[++k] = col_y(t, s, mi, j), val[k] = 1;
                    ind[++k] = j == 1 ? col_u(t, s, mi) : col_y(t, s, mi, j - 1), val[k] = -1;
                    ROW(GLP_UP, 0, 0);
                }
                for (int j = 0; j < nn; j++) {   /* a block that does not apply: n_s != lo + j */
                    if (!isinf(MUX(t, kd, mi, j))) continue;
                    k = 0;
                    if (j == 0) ind[++k] = col_u(t, s, mi), val[k] = 1;
                    else ind[++k] = col_y(t, s, mi, j), val[k] = 1;
                    if (j + 1 < nn) ind[++k] = col_y(t, s, mi, j + 1), val[k] = -1;
                    ROW(GLP_FX, 0, 0);   /* j > 0: y at j equals y at j + 1; j = 0: n_s >= lo + 1 */
                }
            }
        }
        /* the template's bound (REDUCTIONS): Φ_t >= Φ_LB·x_t, which tightens the relaxation */
        k = spi_measure_lb_terms(&ms, t->col_V, t->col_x, t->lb, PS_PER_UNIT, ind, val);
        if (k > 1) ROW(GLP_LO, 0, 0);
        k = 0;   /* every layer: Σ_s n_s = L */
        for (int s = 0; s < S; s++)
            for (int mi = 0; mi < nm; mi++)
                for (int j = 1; j < nn; j++) ind[++k] = col_y(t, s, mi, j), val[k] = 1;
        ind[++k] = t->col_x, val[k] = (double)S * t->lo - (double)L;
        ROW(GLP_FX, 0, 0);
        if (nm > 1) {   /* every chip of the replica: Σ_s chips(m_s) = S·chips(template's mesh) */
            k = 0;
            for (int s = 0; s < S; s++)
                for (int mi = 0; mi < nm; mi++) ind[++k] = col_u(t, s, mi), val[k] = t->chips[mi];
            ind[++k] = t->col_x, val[k] = -(double)S * t->chips[0];
            ROW(GLP_FX, 0, 0);
        }
        for (int s = 0; s < S; s++) {   /* memory */
            int kd = spi_split_kind(s, S);
            k = 0;
            for (int mi = 0; mi < nm; mi++) {
                double prev = isinf(MUX(t, kd, mi, 0)) ? 0 : MUX(t, kd, mi, 0);
                if (prev != 0) ind[++k] = col_u(t, s, mi), val[k] = prev;
                for (int j = 1; j < nn; j++) {
                    double cur = isinf(MUX(t, kd, mi, j)) ? prev : MUX(t, kd, mi, j);
                    if (cur != prev) ind[++k] = col_y(t, s, mi, j), val[k] = cur - prev;
                    prev = cur;
                }
            }
            ROW(GLP_UP, 0, 0);
        }
        for (int p = 0; p < PH_COUNT; p++) {
            if (!ms.ph[p]) continue;
            k = 0;   /* the bottleneck's bound (REDUCTIONS), which tightens the relaxation */
            ind[++k] = t->col_X + p, val[k] = 1;
            ind[++k] = t->col_x, val[k] = -(double)t->mb[p] / PS_PER_UNIT;
            ROW(GLP_LO, 0, 0);
            for (int s = 0; s < S; s++) {   /* the bottleneck */
                int kd = spi_split_kind(s, S);
                k = 0;
                ind[++k] = t->col_X + p, val[k] = 1;
                if (nm == 1) ind[++k] = t->col_x, val[k] = -TAU(t, kd, 0, 0, p);
                stage_time_terms(t, s, p, -1, ind, val, &k);
                ROW(GLP_LO, 0, 0);
            }
            const sp_cost_pipe_phase *f = pipe_of(t, p);
            for (int fi = 0; fi < f->n_forms; fi++) {   /* the phase's forms */
                k = 0;
                ind[++k] = t->col_V + p, val[k] = 1;
                double cx = -(double)f->const_ps / PS_PER_UNIT;
                const double cs = (double)f->sum_coef[fi] / (double)f->div;
                if (f->sum_coef[fi])
                    for (int s = 0; s < S; s++) {
                        if (nm == 1) cx -= cs * TAU(t, spi_split_kind(s, S), 0, 0, p);
                        stage_time_terms(t, s, p, -cs, ind, val, &k);
                    }
                if (f->max_coef[fi]) ind[++k] = t->col_X + p, val[k] = -(double)f->max_coef[fi] / (double)f->div;
                if (cx != 0) ind[++k] = t->col_x, val[k] = cx;
                ROW(GLP_LO, 0, 0);
            }
        }
        for (int s = 0; s + 1 < S; s++)   /* the hand-offs: w_tsq >= u_s,a + u_s+1,b − 1 */
            for (int q = 0; q < t->np; q++) {
                int a = t->pair[q][0], bb = t->pair[q][1], neg = 0;
                for (int p = 0; p < PH_COUNT; p++) neg |= ms.ph[p] && hand_u(t, a, bb, p) < 0;
                k = 0;
                if (!hand_bad(t, a, bb)) ind[++k] = col_w(t, s, q), val[k] = 1;
                ind[++k] = col_u(t, s, a), val[k] = -1;
                ind[++k] = col_u(t, s + 1, bb), val[k] = -1;
                ROW(GLP_LO, -1, 0);   /* a pair that does not lower: u_s,a + u_s+1,b <= 1 */
                for (int e = 0; neg && !hand_bad(t, a, bb) && e < 2; e++) {   /* w = u·u' exactly */
                    k = 0;
                    ind[++k] = col_w(t, s, q), val[k] = 1;
                    ind[++k] = col_u(t, s + e, e ? bb : a), val[k] = -1;
                    ROW(GLP_UP, 0, 0);
                }
            }
        /* middle stages are alike when no hand-off tells their meshes apart: their
         * layer counts descend, n_s >= n_s+1 (one mesh: step by step) */
        for (int s = 1; s + 1 < S - 1 && t->np == 0; s++) {
            if (nm == 1)
                for (int j = 1; j < nn; j++) {
                    k = 0;
                    ind[++k] = col_y(t, s, 0, j), val[k] = 1;
                    ind[++k] = col_y(t, s + 1, 0, j), val[k] = -1;
                    ROW(GLP_LO, 0, 0);
                }
            else {
                k = 0;
                for (int mi = 0; mi < nm; mi++)
                    for (int j = 1; j < nn; j++) {
                        ind[++k] = col_y(t, s, mi, j), val[k] = 1;
                        ind[++k] = col_y(t, s + 1, mi, j), val[k] = -1;
                    }
                ROW(GLP_LO, 0, 0);
            }
        }
    }
    for (int i = 0; i < nt; i++) colv[i] = B[i]->col_V;
    out->rows += spi_measure_bound_rows(P, &ms, inc, colv, nt, PS_PER_UNIT, ind, val);
#undef ROW
#undef TAU
    out->cols += ncol;
    for (int i = 0; i < nt; i++) out->pair_cols += (B[i]->S - 1) * B[i]->np;
    {
        int chosen;
        for (int i = 0; i < nt; i++) colv[i] = B[i]->col_x;
        st = spi_glpk_choose(P, o->time_limit_ms, colv, nt, "pipeline", &out->nodes, &out->unproven, &chosen);
        out->solved++;
        if (st == SP_OK && chosen >= 0) {
            tmpl *t = B[chosen];
            sp_layout l = t->c->layout;
            memset(l.stage_layers, 0, sizeof l.stage_layers);
            memset(l.stage_mesh, 0, sizeof l.stage_mesh);
            int64_t sum = 0, chips = 0;
            int hetero = 0;
            for (int s = 0; s < t->S; s++) {
                int mi = 0;
                for (int m2 = 1; m2 < t->nm; m2++)
                    if (glp_mip_col_val(P, col_u(t, s, m2)) > 0.5) mi = m2;
                int n = t->lo;
                for (int j = 1; j < t->nn; j++) n += glp_mip_col_val(P, col_y(t, s, mi, j)) > 0.5;
                l.stage_layers[s] = (int16_t)n;
                memcpy(l.stage_mesh[s], t->mesh[mi], sizeof l.stage_mesh[s]);
                hetero |= mi != 0;
                sum += n;
                chips += t->chips[mi];
            }
            if (hetero) memcpy(l.mesh, l.stage_mesh[0], sizeof l.mesh);
            else memset(l.stage_mesh, 0, sizeof l.stage_mesh);   /* one form per meaning (sp_layout.h) */
            if (sum != L || chips != (int64_t)t->S * t->chips[0]) {
                st = spi_fail(SP_EINTERNAL, "planner: the pipeline program's stages hold %lld of %lld layers on %lld "
                                            "of %lld chips per replica",
                              (long long)sum, (long long)L, (long long)chips, (long long)t->S * t->chips[0]);
                goto prob_done;
            }
            double v = glp_mip_obj_val(P) * PS_PER_UNIT * 1e-12;
            if (v < out->phi) {
                out->found = 1;
                out->layout = l;
                out->template_cand = (int)(t->c - sp->c);
                out->phi = v;
            }
        }
    }
prob_done:
    free(colv);
    free(ind);
    free(val);
    spi_glpk_close(P, &env, term);
    if (glpk_s) *glpk_s += now_s() - t0;
    return st;
}

/* The first bound of template t (REDUCTIONS) into t->mb and t->lb: the
 * even split's stage times (from the space's pricing, else priced now),
 * refined at ceil(L/S) where that may drop t, and the smaller meshes' case
 * (mesh_bound).  One template's work, priced on `cache`: the templates are
 * independent, and so is each one's bound of the order they are taken in
 * (the caches' memos are exact). */
static sp_status first_bound(const spi_space *sp, sp_cost_cache *cache, dc_memo *memo, const sp_workload *w,
                             const measure *ms, double inc, int same_mesh, tmpl *t)
{
    const spi_cand *c = t->c;
    const int64_t L = sp->m->n_layers;
    if (c->has_bound) {
        memcpy(t->mb, c->bound_ps, sizeof t->mb);
        t->units = c->bound_units;
    } else SP_CHECK(spi_split_bound(cache, sp->m, sp->hw, &c->layout, w, t->mb, &t->units));
    sp_cost_pipe_terms(sp->hw, &c->layout, t->units, &t->pipe);
    double lb = spi_split_first_lb(ms, &t->pipe, t->mb);
    /* not dropped by the even split's stages: each kind at ceil(L/S) layers may */
    if (lb < inc && !isinf(inc) && L % t->S != 0) {
        SP_CHECK(refine_bound(sp, cache, w, t));
        lb = spi_split_first_lb(ms, &t->pipe, t->mb);
    }
    cand_meshes(sp, t, same_mesh);
    if (t->nm > 1) {   /* a stage of a smaller mesh may be the slowest */
        int done;
        SP_CHECK(mesh_bound(sp, cache, memo, w, ms, inc, t, &lb, &done));
        t->mb_wait = !done;
    }
    t->lb = lb;
    return SP_OK;
}

typedef struct fb_job {
    const spi_space *sp;
    const sp_workload *w;
    const measure *ms;
    double inc;
    int same_mesh;
    tmpl *T;
    int n;
    pthread_mutex_t mu;
    int next;                  /* the next template to take */
    double eval_s;             /* seconds pricing, summed over the workers */
    sp_status st;              /* the first failure, in template order */
    int st_at;
    char msg[512];             /* its message (sp_last_error is the failing thread's) */
} fb_job;

typedef struct fb_worker {
    fb_job *j;
    sp_cost_cache *cache;
    dc_memo *memo;             /* decode_lo's, this thread's (NULL: out of memory, none) */
} fb_worker;

static void *fb_main(void *arg)
{
    const fb_worker *wk = arg;
    fb_job *j = wk->j;
    enum { CHUNK = 64 };
    double t0 = now_s();
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int i0 = j->next;
        j->next += CHUNK;
        pthread_mutex_unlock(&j->mu);
        if (i0 >= j->n) break;
        for (int i = i0; i < i0 + CHUNK && i < j->n; i++) {
            sp_status st = first_bound(j->sp, wk->cache, wk->memo, j->w, j->ms, j->inc, j->same_mesh, &j->T[i]);
            if (st == SP_OK) continue;
            pthread_mutex_lock(&j->mu);
            if (j->st == SP_OK || i < j->st_at) {
                j->st = st, j->st_at = i;
                snprintf(j->msg, sizeof j->msg, "%s", sp_last_error());
            }
            j->next = j->n;   /* the others stop */
            pthread_mutex_unlock(&j->mu);
            break;
        }
    }
    pthread_mutex_lock(&j->mu);
    j->eval_s += now_s() - t0;
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* The first bounds of j's templates on the pricing threads the space uses
 * (SHARDPLAN_THREADS, else the processors; worker 0 the calling thread with
 * the space's cache, the others each a cache of their own) */
static sp_status first_bounds(fb_job *j)
{
    int nw = spi_workers(j->n, 256);
    pthread_t th[SPI_WORKERS];
    fb_worker wk[SPI_WORKERS];
    int started = 0;
    for (long k = 1; k < nw; k++) {
        sp_cost_cache *c;
        if (sp_cost_cache_create(&c) != SP_OK) break;
        wk[started + 1] = (fb_worker){j, c, calloc(1, sizeof(dc_memo))};
        if (pthread_create(&th[started], NULL, fb_main, &wk[started + 1]) != 0) {
            sp_cost_cache_free(c);
            free(wk[started + 1].memo);
            break;
        }
        started++;
    }
    wk[0] = (fb_worker){j, spi_space_cache(j->sp), calloc(1, sizeof(dc_memo))};
    if (!wk[0].cache) {
        j->st = SP_ENOMEM, j->next = j->n;
        snprintf(j->msg, sizeof j->msg, "planner: out of memory");
    }
    fb_main(&wk[0]);   /* this thread works too; with no helper it does everything */
    free(wk[0].memo);
    for (int k = 0; k < started; k++) {
        pthread_join(th[k], NULL);
        sp_cost_cache_free(wk[k + 1].cache);
        free(wk[k + 1].memo);
    }
    return j->st == SP_OK ? SP_OK : spi_fail(j->st, "%s", j->msg);
}

sp_status spi_split_solve(const spi_space *sp, int inst, const spi_split_req *r, spi_split_out *out, double *glpk_s)
{
    memset(out, 0, sizeof *out);
    out->phi = INFINITY;
    const sp_model *m = sp->m;
    const sp_workload *w = &sp->inst[inst].w;
    const int64_t L = m->n_layers;
    const sp_plan_opts *o = r->o;
    measure ms;
    spi_measure_init(o, w, &ms);
    const double max_lat = ms.max_lat, max_tot = ms.max_tot;

    /* the incumbent: the best admissible candidate of the instance */
    double inc = r->incumbent;
    tmpl *T = calloc((size_t)(sp->n ? sp->n : 1), sizeof *T);
    if (!T) return spi_fail(SP_ENOMEM, "planner: out of memory");
    int nt = 0;
    sp_status st = SP_OK;
    for (int i = 0; i < sp->n; i++) {
        const spi_cand *c = &sp->c[i];
        if (c->inst != inst) continue;
        int S = c->layout.stages;
        if (!spi_split_is_template(&c->layout, L) || (r->max_stages > 0 && S > r->max_stages)) continue;
        tmpl *t = &T[nt++];
        memset(t, 0, sizeof *t);
        t->c = c;
        t->S = S;
        t->M = c->layout.microbatches;
        spi_split_window(L, S, &t->lo, &t->hi);
        t->nn = t->hi - t->lo + 1;
    }
    out->templates = nt;
    /* every template's first bound, on the pricing workers; then, in the
     * space's order, the templates it does not drop */
    fb_job fj = {sp, w, &ms, inc, r->same_mesh, T, nt, PTHREAD_MUTEX_INITIALIZER, 0, 0, SP_OK, 0, {0}};
    st = first_bounds(&fj);
    out->eval_s += fj.eval_s;
    int kept = 0;
    for (int i = 0; st == SP_OK && i < nt; i++) {
        if (T[i].lb >= inc) out->pruned++;
        else T[kept++] = T[i];
    }
    nt = kept;
    if (st != SP_OK || nt == 0) {
        free(T);
        return st;
    }
    /* the templates in the order of their bounds, in programs of `batch`
     * templates: each program is cut off at the best measure so far, and the
     * templates whose bound reaches it are dropped unpriced */
    /* price the blocks of the templates under the incumbent, in the order of
     * their first bound; the second bound (from the blocks) drops more */
    qsort(T, (size_t)nt, sizeof *T, cmp_lb);
    if (r->max_templates > 0 && nt > r->max_templates) nt = r->max_templates;   /* a sample (spi_split_req) */
    int np = 0;
    for (int i = 0; i < nt && st == SP_OK; i++) {
        tmpl *t = &T[i];
        if (t->lb >= inc) {
            out->pruned += nt - i;
            break;
        }
        if ((st = price_blocks(sp, w, &ms, t, out)) != SP_OK) break;
        if (t->mb_wait) {   /* the mesh bound from the blocks just priced */
            double lb0;
            int done;
            if ((st = mesh_bound(sp, spi_space_cache(sp), NULL, w, &ms, inc, t, &lb0, &done)) != SP_OK) break;
            t->mb_wait = 0;
        }
        t->lb = dp_bound(t, L, &ms);
        if (t->lb >= inc) {
            out->pruned++;
            free(t->tau);
            free(t->mu);
            free(t->hand);
            t->tau = NULL;
            t->mu = NULL;
            t->hand = NULL;
            continue;
        }
        T[np++] = *t;   /* np <= i: moves down, or stays */
        if (np - 1 != i) t->tau = NULL, t->mu = NULL, t->hand = NULL;
    }
    for (int i = np; i < nt; i++) {
        free(T[i].tau);
        free(T[i].mu);
        free(T[i].hand);
        T[i].tau = NULL;
        T[i].mu = NULL;
        T[i].hand = NULL;
    }
    nt = np;
    /* programs of `batch` templates in the order of the second bound, each
     * cut off at the best measure so far */
    qsort(T, (size_t)nt, sizeof *T, cmp_lb);
    int batch = r->batch > 0 ? r->batch : 16;
    tmpl **B = malloc((size_t)(nt ? nt : 1) * sizeof *B);
    if (!B && st == SP_OK) st = spi_fail(SP_ENOMEM, "planner: out of memory");
    for (int i0 = 0; st == SP_OK && i0 < nt;) {
        if (T[i0].lb >= inc) {
            out->pruned += nt - i0;
            break;
        }
        int nb = 0;
        while (i0 + nb < nt && nb < batch && T[i0 + nb].lb < inc) B[nb] = &T[i0 + nb], nb++;
        bctx bc = {sp, w, L, o, &ms, max_lat, max_tot, inc};
        st = solve_batch(&bc, B, nb, out, glpk_s);
        if (out->found && out->phi < inc) inc = out->phi;
        out->kept += nb;
        i0 += nb;
    }
    free(B);
    for (int i = 0; i < nt; i++) {   /* after an error */
        free(T[i].tau);
        free(T[i].mu);
        free(T[i].hand);
    }
    free(T);
    return st;
}

double spi_split_measure(const spi_space *s, const spi_cand *c, const sp_plan_opts *o)
{
    return cand_measure(c, objective_measure(o, &s->inst[c->inst].w));
}
