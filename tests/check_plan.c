/* check_plan.c: the planner's MILP against exhaustive enumeration of the same
 * space on many small random problems (torus and two-tier cluster, every
 * objective, latency bounds, ties, infeasible cases), the frontier against the
 * enumerated Pareto set, autoconfig determinism, min chips, JSON keys. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "sp_plan.h"
#include "spi_plan.h"
#include "spi_lower.h"

/* ---- random small problems ---- */
static unsigned rng_state;
static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 16) % n;
}

static void random_model(sp_model *m)
{
    sp_model_init(m);
    snprintf(m->name, sizeof m->name, "rand");
    static const int64_t E[] = {64, 128, 256};
    m->n_layers = 1 + rnd(4);
    m->d_model = E[rnd(3)];
    m->n_heads = 16;
    m->d_head = m->d_model / 16;
    static const int64_t kvh[] = {1, 2, 4, 16};
    m->n_kv_heads = kvh[rnd(4)];
    m->d_ff = m->d_model * (2 + 2 * rnd(2));
    m->vocab = 256;
    m->ffn = rnd(2) ? SP_FFN_SWIGLU : SP_FFN_GELU;
    m->block = rnd(2) ? SP_BLOCK_PARALLEL : SP_BLOCK_SERIAL;
    m->norm = rnd(2) ? SP_NORM_RMSNORM : SP_NORM_LAYERNORM;
    m->positions = rnd(2) ? SP_POS_ROPE : SP_POS_LEARNED;
    m->max_context = 1024;
    ck_assert_int_eq(sp_model_validate(m, NULL), SP_OK);
}

/* m as a mixture of experts: 4 experts, 2 a token, every layer (no biases: refused with experts) */
static void moe_model(sp_model *m)
{
    m->n_experts = 4;
    m->top_k = 2;
    m->moe_every = 1;
    m->bias = 0;
}

/* A torus (tpu-v4 figures, a 4x2x2 slice) or a cluster (h100 figures, 4 per
 * node), with a small HBM so that memory matters. */
static void small_hw(sp_hw *hw, int cluster, int64_t hbm)
{
    sp_error err;
    ck_assert_int_eq(sp_hw_find(cluster ? "h100" : "tpu-v4", hw, &err), SP_OK);
    if (cluster) {
        hw->chips_per_node = 4;
    } else {
        hw->torus_dims[0] = 4;
        hw->torus_dims[1] = 2;
        hw->torus_dims[2] = 2;
    }
    hw->hbm_bytes = hbm;
}

/* ---- exhaustive enumeration, written independently of plan_space.c ---- */
typedef struct bf_cand {
    sp_layout l;
    sp_cost c;
} bf_cand;
typedef struct bf_space {
    int n;
    bf_cand *c;
} bf_space;

static const sp_axis perms[6][3] = {
    {SP_AXIS_Z, SP_AXIS_Y, SP_AXIS_X}, {SP_AXIS_Z, SP_AXIS_X, SP_AXIS_Y}, {SP_AXIS_Y, SP_AXIS_Z, SP_AXIS_X},
    {SP_AXIS_Y, SP_AXIS_X, SP_AXIS_Z}, {SP_AXIS_X, SP_AXIS_Z, SP_AXIS_Y}, {SP_AXIS_X, SP_AXIS_Y, SP_AXIS_Z},
};

/* The enumerations' pricing options: one cache for the test process (a
 * call without one makes and zeroes its own, megabytes each, which
 * dominated the suite under AddressSanitizer), every phase priced afresh so
 * the enumeration does not lean on the planner's memo. */
static const sp_cost_opts *bf_opts(void)
{
    static sp_cost_cache *cc;
    static sp_cost_opts co;
    if (!cc) {
        ck_assert_int_eq(sp_cost_cache_create(&cc), SP_OK);
        sp_cost_opts_init(&co);
        co.cache = cc, co.fresh = 1;
    }
    return &co;
}

static void brute(const sp_model *m, const sp_hw *hw, int N, const sp_workload *w, sp_plan_weights wsel, bf_space *out)
{
    int cap = 1024;
    out->n = 0;
    out->c = malloc((size_t)cap * sizeof *out->c);
    sp_dtype wts[3] = {SP_DT_BF16, SP_DT_INT8, SP_DT_FP8};
    for (int S = 1; S <= N; S++)
        for (int R = 1; R <= N; R++)
            for (int X = 1; X <= N; X++)
                for (int Y = 1; Y <= N; Y++)
                    for (int Z = 1; Z <= N; Z++) {
                        if (S * R * X * Y * Z != N) continue;
                        /* S, 2S, 4S dividing B/R; when none does, the largest divisor of B/R below S */
                        int64_t br = w->batch % R ? 0 : w->batch / R, below = 0;
                        for (int d = 1; d < S; d++)
                            if (br % d == 0) below = d;
                        int fills = br % S == 0;
                        for (int M = 1; M <= 4 * S; M++) {
                            if (S == 1 ? M != 1 : fills ? (M != S && M != 2 * S && M != 4 * S) : M != below) continue;
                            for (int p = 0; p < 6; p++)
                                for (int wi = 0; wi < 3; wi++) {
                                    if (wsel != SP_PLAN_W_AUTO && wsel != (sp_plan_weights)(wi + 1)) continue;
                                    if (wi == 2 && hw->peak_flops[SP_DT_FP8] <= 0) continue;
                                    for (int a = 0; a < (R > 1 ? 200 : 100); a++) {
                                        sp_layout l;
                                        sp_layout_init(&l);
                                        l.stages = S, l.replicas = R, l.mesh[0] = X, l.mesh[1] = Y, l.mesh[2] = Z;
                                        l.microbatches = M;
                                        memcpy(l.placement, perms[p], sizeof perms[p]);
                                        l.weights = wts[wi];
                                        l.phase[0].ffn = (sp_ffn_layout)(a % 100 / 20);
                                        l.phase[0].attn = (sp_attn_layout)(a / 10 % 2);
                                        l.phase[1].ffn = (sp_ffn_layout)(a / 2 % 5);
                                        l.phase[1].attn = (sp_attn_layout)(a % 2);
                                        /* experts over the replicas, or not; the check keeps the valid ones */
                                        l.experts = a < 100 ? 1 : R;
                                        if (sp_layout_check(&l, m, hw, N, w->batch, NULL) != SP_OK) continue;
                                        sp_cost c;
                                        /* the prefill chunked as the planner weighs it */
                                        sp_layout chosen;
                                        if (sp_cost_eval_chunked(m, hw, &l, w, bf_opts(), &chosen, &c) != SP_OK) continue;
                                        l = chosen;
                                        if (out->n == cap) out->c = realloc(out->c, (size_t)(cap *= 2) * sizeof *out->c);
                                        out->c[out->n].l = l;
                                        out->c[out->n++].c = c;
                                    }
                                }
                        }
                    }
}

static double lat_of(const sp_cost *c, sp_plan_latency lm)
{
    return lm == SP_PLAN_LAT_DECODE ? c->decode_step_s : lm == SP_PLAN_LAT_PREFILL ? c->prefill_s : c->total_s;
}
static double obj_of(const sp_cost *c, const sp_plan_opts *o)
{
    return o->objective == SP_PLAN_MIN_COST ? c->cost_chip_s_per_token
         : o->objective == SP_PLAN_MAX_THROUGHPUT ? -c->tokens_per_s : lat_of(c, o->latency_metric);
}
static int admissible(const sp_cost *c, const sp_plan_opts *o)
{
    return c->feasible && (o->max_latency_s <= 0 || lat_of(c, o->latency_metric) <= o->max_latency_s) &&
           (o->min_tokens_per_s <= 0 || c->tokens_per_s >= o->min_tokens_per_s);
}

static int close_to(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)); }

static int n_compared, n_infeasible, n_frontier_points, n_ties;

/* One problem: every objective and metric, with and without a bound. */
static void check_problem(const sp_model *m, const sp_hw *hw, int N, const sp_workload *w)
{
    bf_space bf;
    brute(m, hw, N, w, SP_PLAN_W_AUTO, &bf);
    for (int obj = 0; obj < SP_PLAN_OBJECTIVE_COUNT; obj++)
        for (int lm = 0; lm < SP_PLAN_LAT_COUNT; lm++)
            for (int bound = 0; bound < 2; bound++) {
                if (lm == SP_PLAN_LAT_DECODE && w->gen == 0) continue;
                if (lm == SP_PLAN_LAT_PREFILL && w->prompt == 0) continue;
                sp_plan_opts o;
                sp_plan_opts_init(&o);
                o.objective = (sp_plan_objective)obj;
                o.latency_metric = (sp_plan_latency)lm;
                o.search_min_chips = 0;
                o.even_stages = 1;   /* the enumerated space: even splits (test_split_* cover the rest) */
                o.rivals = bound == 0 && obj == 0;
                o.frontier = bound == 1;
                /* enumerated optimum and bound */
                double lo = INFINITY, hi = 0;
                for (int i = 0; i < bf.n; i++)
                    if (bf.c[i].c.feasible) {
                        double l = lat_of(&bf.c[i].c, o.latency_metric);
                        lo = fmin(lo, l), hi = fmax(hi, l);
                    }
                if (bound && isfinite(lo)) o.max_latency_s = lo + (hi - lo) * (rnd(3) / 3.0);
                int best = -1, nbest = 0;
                for (int i = 0; i < bf.n; i++) {
                    if (!admissible(&bf.c[i].c, &o)) continue;
                    double v = obj_of(&bf.c[i].c, &o);
                    if (best < 0 || v < obj_of(&bf.c[best].c, &o)) best = i, nbest = 1;
                    else if (v == obj_of(&bf.c[best].c, &o)) nbest++;
                }
                sp_plan *p = NULL;
                ck_assert_int_eq(sp_plan_solve(m, hw, N, w, &o, &p), SP_OK);
                n_compared++;
                if (best < 0) {
                    n_infeasible++;
                    ck_assert_int_eq(p->result, SP_PLAN_INFEASIBLE);
                    ck_assert(!p->has_chosen);
                    int64_t sf = -1;
                    for (int i = 0; i < bf.n; i++)
                        if (sf < 0 || bf.c[i].c.shortfall_bytes < sf) sf = bf.c[i].c.shortfall_bytes;
                    ck_assert_int_eq(p->min_shortfall_bytes, sf);
                } else {
                    ck_assert_msg(p->result == SP_PLAN_OPTIMAL, "result %s", sp_plan_result_name(p->result));
                    ck_assert(p->has_chosen);
                    if (nbest > 1) n_ties++;
                    double got = obj_of(&p->chosen.cost, &o), want = obj_of(&bf.c[best].c, &o);
                    ck_assert_msg(close_to(got, want), "objective %s/%s bound %g: MILP %.12g, enumeration %.12g",
                                  sp_plan_objective_name(o.objective), sp_plan_latency_name(o.latency_metric),
                                  o.max_latency_s, got, want);
                    ck_assert(admissible(&p->chosen.cost, &o));
                    ck_assert_int_eq(sp_layout_check(&p->chosen.layout, m, hw, N, w->batch, NULL), SP_OK);
                }
                if (o.frontier && best >= 0) {
                    /* enumerated Pareto set of (cost, latency) over admissible layouts */
                    int nf = 0;
                    for (int i = 0; i < bf.n; i++) {
                        if (!admissible(&bf.c[i].c, &o)) continue;
                        double ci = bf.c[i].c.cost_chip_s_per_token, li = lat_of(&bf.c[i].c, o.latency_metric);
                        int dominated = 0, dup = 0;
                        for (int j = 0; j < bf.n && !dominated; j++) {
                            if (!admissible(&bf.c[j].c, &o)) continue;
                            double cj = bf.c[j].c.cost_chip_s_per_token, lj = lat_of(&bf.c[j].c, o.latency_metric);
                            if (cj <= ci && lj <= li && (cj < ci || lj < li)) dominated = 1;
                            if (cj == ci && lj == li && j < i) dup = 1;
                        }
                        if (dominated || dup) continue;
                        nf++;
                        int found = 0;
                        for (int k = 0; k < p->n_frontier; k++)
                            found |= close_to(p->frontier[k].cost_s, ci) && close_to(p->frontier[k].latency_s, li);
                        ck_assert_msg(found, "enumerated frontier point (%.9g, %.9g) missing", ci, li);
                    }
                    ck_assert_int_eq(p->n_frontier, nf);
                    n_frontier_points += nf;
                    for (int k = 1; k < p->n_frontier; k++) {
                        ck_assert(p->frontier[k].cost_s > p->frontier[k - 1].cost_s);
                        ck_assert(p->frontier[k].latency_s < p->frontier[k - 1].latency_s);
                    }
                }
                if (o.rivals && p->has_chosen)
                    for (int k = 0; k < p->n_rivals; k++) {
                        ck_assert(p->rivals[k].reason[0]);
                        ck_assert(p->rivals[k].loss == SP_LOSS_MEMORY || p->rivals[k].objective_delta >= 0);
                    }
                sp_plan_free(p);
            }
    free(bf.c);
}

START_TEST(test_milp_equals_enumeration)
{
    rng_state = 1234u + 7919u * (unsigned)_i;
    sp_model m;
    random_model(&m);
    if (_i % 3 == 2) {   /* mixture of experts: expert parallelism is one more decision */
        moe_model(&m);
    }
    sp_hw hw;
    static const int chips[] = {1, 2, 4, 8, 16, 6, 12};
    int N = chips[rnd((unsigned)(sizeof chips / sizeof chips[0]))];
    int cluster = _i % 2;
    /* memory from roomy to tight: some problems fit nowhere */
    static const int64_t hbm[] = {1 << 20, 4 << 20, 16 << 20, 64 << 20, 1ll << 30};
    small_hw(&hw, cluster, hbm[rnd(5)]);
    static const int64_t batches[] = {1, 2, 4, 8, 16, 12};
    sp_workload w = {batches[rnd(6)], 8 * (1 + rnd(4)), rnd(4) ? 4 : 0};
    if (rnd(8) == 0) w.prompt = 0, w.gen = 4;
    check_problem(&m, &hw, N, &w);
}
END_TEST

/* ---- uneven pipelines: the pipeline program against the full product ---- */

/* Every split of L layers over S stages (each >= 1), in lexicographic order:
 * the next composition after c, 0 when c was the last. */
static int next_split(int16_t *c, int S, int64_t L)
{
    for (int i = S - 2; i >= 0; i--) {
        int64_t rest = 0;
        for (int j = i + 1; j < S; j++) rest += c[j];
        if (rest - (S - 1 - i) > 0) {   /* move one layer to stage i, the rest to the last */
            c[i]++;
            int64_t left = rest - 1;
            for (int j = i + 1; j < S - 1; j++) c[j] = 1, left--;
            c[S - 1] = (int16_t)left;
            return 1;
        }
    }
    return 0;
}

/* tiny-llama stretched to 12 layers on h100, batch 8, prompt 16, gen 8 */
static void split_instance(sp_model *m, sp_hw *hw, sp_workload *w)
{
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", m, &err), SP_OK);
    m->n_layers = 12;
    ck_assert_int_eq(sp_hw_find("h100", hw, &err), SP_OK);
    *w = (sp_workload){8, 16, 8};
}

/* The slowest stage per phase (prefill, first and last decode step) of u,
 * each stage's times in t (may be NULL), checked against a bound. */
static void slowest_stages(const sp_model *m, const sp_hw *hw, const sp_layout *u, const sp_workload *w,
                           const int64_t bound[3], int64_t (*t)[3])
{
    int64_t slowest[3] = {0, 0, 0};
    for (int s = 0; s < u->stages; s++) {
        sp_stage_cost sc;
        ck_assert_int_eq(sp_cost_stage_eval(m, hw, u, w, NULL, s, &sc), SP_OK);
        int64_t x[3] = {sc.prefill_ps, sc.decode1_ps, sc.decode_ps};
        for (int p = 0; p < 3; p++) {
            slowest[p] = x[p] > slowest[p] ? x[p] : slowest[p];
            if (t) t[s][p] = x[p];
        }
    }
    for (int p = 0; p < 3; p++)
        ck_assert_msg(slowest[p] >= bound[p], "phase %d: the bound %lld ps exceeds the slowest stage %lld ps", p,
                      (long long)bound[p], (long long)slowest[p]);
}

static int n_split_compared, n_split_better, n_split_product, n_bound_checked;

/* sp_plan_solve (the space and the pipeline program) against the full
 * product: every layout of the space and, for each pipeline, every split of
 * its layers, each priced by sp_cost_eval */
static void check_split_problem(const sp_model *m, const sp_hw *hw, int N, const sp_workload *w)
{
    bf_space bf;
    brute(m, hw, N, w, SP_PLAN_W_AUTO, &bf);
    int cap = 1024, n = 0;
    bf_cand *all = malloc((size_t)cap * sizeof *all);
    for (int i = 0; i < bf.n; i++) {
        const sp_layout *l = &bf.c[i].l;
        if (l->stages < 2) continue;
        int lo, hi;
        spi_split_window(m->n_layers, l->stages, &lo, &hi);
        ck_assert_int_eq(lo, 1);   /* small models: the window is every split */
        ck_assert_int_eq(hi, m->n_layers - l->stages + 1);
        sp_layout u = *l;
        for (int s = 0; s < l->stages; s++) u.stage_layers[s] = 1;
        u.stage_layers[l->stages - 1] = (int16_t)(m->n_layers - l->stages + 1);
        /* the pipeline program's first bound: no split's slowest stage is faster */
        int64_t bound[3], units;
        ck_assert_int_eq(spi_split_bound(NULL, m, hw, l, w, bound, &units), SP_OK);
        do {
            sp_cost c;
            ck_assert_int_eq(sp_cost_eval(m, hw, &u, w, bf_opts(), &c), SP_OK);
            slowest_stages(m, hw, &u, w, bound, NULL);
            n_bound_checked++;
            if (n == cap) all = realloc(all, (size_t)(cap *= 2) * sizeof *all);
            all[n].l = u;
            all[n++].c = c;
        } while (next_split(u.stage_layers, l->stages, m->n_layers));
    }
    n_split_product += n;
    for (int obj = 0; obj < SP_PLAN_OBJECTIVE_COUNT; obj++)
        for (int lm = 0; lm < SP_PLAN_LAT_COUNT; lm++) {
            if (lm == SP_PLAN_LAT_DECODE && w->gen == 0) continue;
            if (lm == SP_PLAN_LAT_PREFILL && w->prompt == 0) continue;
            sp_plan_opts o;
            sp_plan_opts_init(&o);
            o.objective = (sp_plan_objective)obj;
            o.latency_metric = (sp_plan_latency)lm;
            o.search_min_chips = 0;
            o.frontier = o.rivals = 0;
            double best = INFINITY, best_even = INFINITY;
            for (int i = 0; i < bf.n; i++)
                if (admissible(&bf.c[i].c, &o)) best_even = fmin(best_even, obj_of(&bf.c[i].c, &o));
            best = best_even;
            for (int i = 0; i < n; i++)
                if (admissible(&all[i].c, &o)) best = fmin(best, obj_of(&all[i].c, &o));
            sp_plan *p = NULL;
            ck_assert_int_eq(sp_plan_solve(m, hw, N, w, &o, &p), SP_OK);
            n_split_compared++;
            if (isinf(best)) {
                ck_assert(!p->has_chosen);
            } else {
                ck_assert(p->has_chosen);
                double got = obj_of(&p->chosen.cost, &o);
                /* the program's optimum is GLPK's, within its tolerance (1e-7 relative) */
                ck_assert_msg(fabs(got - best) <= 1e-7 * fabs(best), "%s/%s: plan %.12g, full product %.12g (even %.12g)",
                              sp_plan_objective_name(o.objective), sp_plan_latency_name(o.latency_metric), got, best,
                              best_even);
                ck_assert(admissible(&p->chosen.cost, &o));
                ck_assert_int_eq(sp_layout_check(&p->chosen.layout, m, hw, N, w->batch, NULL), SP_OK);
                if (best < best_even && fabs(best - best_even) > 1e-7 * fabs(best_even)) {
                    n_split_better++;
                    ck_assert(sp_layout_uneven(&p->chosen.layout));
                    ck_assert(p->stats.split_better);
                }
                /* the stages reported are the layout's */
                ck_assert_int_eq(p->n_stages, p->chosen.layout.stages);
                int64_t sum = 0;
                for (int s = 0; s < p->n_stages; s++) {
                    ck_assert_int_eq(p->stages[s].first_layer, sum);
                    sum += p->stages[s].layers;
                    ck_assert_int_le(p->stages[s].memory_bytes, p->chosen.cost.mem.total);
                }
                ck_assert_int_eq(sum, m->n_layers);
                /* where no split beats the space, the answer is the even space's, unchanged */
                sp_plan *q = NULL;
                o.even_stages = 1;
                ck_assert_int_eq(sp_plan_solve(m, hw, N, w, &o, &q), SP_OK);
                ck_assert(q->has_chosen);
                if (!p->stats.split_better) {
                    char a[320], b[320];
                    ck_assert_str_eq(sp_layout_format(&p->chosen.layout, a, sizeof a),
                                     sp_layout_format(&q->chosen.layout, b, sizeof b));
                } else ck_assert(obj_of(&p->chosen.cost, &o) < obj_of(&q->chosen.cost, &o));
                sp_plan_free(q);
            }
            sp_plan_free(p);
        }
    free(all);
    free(bf.c);
}

START_TEST(test_split_equals_enumeration)
{
    rng_state = 4321u + 104729u * (unsigned)_i;
    sp_model m;
    random_model(&m);
    m.n_layers = 5 + rnd(4);   /* 5..8 layers: splits that are not even */
    m.vocab = 4096;            /* a heavy LM head and embedding: stages that differ */
    sp_hw hw;
    static const int chips[] = {2, 4};
    int N = chips[rnd(2)];
    static const int64_t hbm[] = {4 << 20, 16 << 20, 1ll << 30};
    small_hw(&hw, _i % 2, hbm[rnd(3)]);
    static const int64_t batches[] = {4, 8};
    sp_workload w = {batches[rnd(2)], 8 * (1 + rnd(4)), 4 + 4 * rnd(4)};
    check_split_problem(&m, &hw, N, &w);
}
END_TEST

/* ---- stages of their own mesh: the pipeline program against the full product ---- */

/* The stage meshes the program offers a template (doc/planner.md): its mesh
 * and, for each ratio 1/2, 3/2 and 2, the mesh with its longest axis that
 * the ratio leaves whole (Z, then Y, then X on a tie) scaled by it, at most
 * the replica's chips less one per other stage; pipelines of at most
 * SPI_SPLIT_MESH_STAGES stages.  Written here from the rule, not from
 * plan_stages.c; which of them a layout may take is sp_layout_check's. */
static int stage_mesh_cands(const sp_layout *l, int out[][3])
{
    static const int num[3] = {1, 3, 2}, den[3] = {2, 2, 1};
    int n = 1, c0 = l->mesh[0] * l->mesh[1] * l->mesh[2];
    memcpy(out[0], l->mesh, sizeof out[0]);
    if (l->stages > SPI_SPLIT_MESH_STAGES) return 1;
    for (int r = 0; r < 3; r++) {
        int best = -1;
        for (int a = 2; a >= 0; a--)
            if (l->mesh[a] * num[r] % den[r] == 0 && l->mesh[a] * num[r] / den[r] >= 1 &&
                (best < 0 || l->mesh[a] > l->mesh[best]))
                best = a;
        if (best < 0) continue;
        int v[3] = {l->mesh[0], l->mesh[1], l->mesh[2]};
        v[best] = l->mesh[best] * num[r] / den[r];
        if (v[0] * v[1] * v[2] > l->stages * c0 - (l->stages - 1)) continue;
        memcpy(out[n++], v, sizeof v);
    }
    return n;
}

static int n_hetero_compared, n_hetero_better, n_hetero_product, n_mesh_bound_checked, n_dc_bound_checked,
    n_dlb_checked, n_dlo_checked, n_stage_decode_checked;

/* sp_plan_solve against the full product of (template, stage mesh of each
 * stage, split), each priced by sp_cost_eval; o narrows both sides alike
 * (weights, tensor_1d, micro-batches per stage). */
static void check_hetero_problem(const sp_model *m, const sp_hw *hw, int N, const sp_workload *w, const sp_plan_opts *base)
{
    bf_space bf;
    brute(m, hw, N, w, base->weights, &bf);
    int cap = 1024, n = 0, ne = 0;
    bf_cand *all = malloc((size_t)cap * sizeof *all);
    for (int i = 0; i < bf.n; i++) {   /* the narrowed space: even splits */
        const sp_layout *l = &bf.c[i].l;
        if (base->tensor_1d && (l->mesh[0] != 1 || l->mesh[1] != 1)) continue;
        if (base->microbatches_per_stage && l->stages > 1 && l->microbatches != base->microbatches_per_stage * l->stages)
            continue;
        if (n == cap) all = realloc(all, (size_t)(cap *= 2) * sizeof *all);
        all[n++] = bf.c[i];
    }
    ne = n;
    spi_space sp;   /* the pipeline program's pricing state, for its mesh bound */
    spi_space_init(&sp, m, hw);
    for (int i = 0; i < ne; i++) {
        const sp_layout l = all[i].l;
        if (l.stages < 2) continue;
        int cm[16][3], nc = stage_mesh_cands(&l, cm), S = l.stages, c0 = l.mesh[0] * l.mesh[1] * l.mesh[2];
        int idx[SP_LAYOUT_MAX_STAGES] = {0};
        /* the program's first bound over the other meshes: every pipeline of
         * stage meshes has a stage at least that slow (slowest_stages), and
         * where it says none exists, none does */
        int64_t mesh_lb[3], dc_lb[3];
        int hetero;
        ck_assert_int_eq(spi_split_mesh_bound(&sp, w, &l, mesh_lb, dc_lb, &hetero), SP_OK);
        ck_assert_int_eq(dc_lb[0], 0);   /* the decode-first bound: the prefill at 0 */
        /* the template's bound from its decode alone (what the space may
         * prune it by): below the total of each of its pipelines of stage
         * meshes, every split */
        double dlb;
        for (int s = 0; s < S; s++) {   /* the decode alone of one stage: sp_cost_stage_eval's decode */
            sp_stage_cost a, b;
            if (sp_cost_stage_eval(m, hw, &l, w, bf_opts(), s, &a) != SP_OK) continue;
            ck_assert_int_eq(sp_cost_stage_eval_decode(m, hw, &l, w, bf_opts(), s, &b), SP_OK);
            ck_assert(a.decode1_ps == b.decode1_ps && a.decode_ps == b.decode_ps && b.prefill_ps == 0);
            ck_assert(b.mem.total <= a.mem.total);
            n_stage_decode_checked++;
        }
        {
            sp_stage_time st[SP_LAYOUT_MAX_STAGES];
            sp_cost_opts q;
            sp_cost_opts_init(&q);
            q.stage_times = st;
            sp_cost dc;
            ck_assert_int_eq(sp_cost_eval_group(m, hw, &l, SP_PHASE_DECODE, w, &q, &dc), SP_OK);
            sp_plan_opts po;
            sp_plan_opts_init(&po);   /* latency, total: the measure is total_s */
            spi_measure ms;
            spi_measure_init(&po, w, &ms);
            spi_cand tc;
            memset(&tc, 0, sizeof tc);
            tc.layout = l;
            spi_split_dlb d;
            double even_lb;
            spi_split_decode_lb(&sp, &ms, &l, st, 0, &d, &even_lb);
            dlb = even_lb;
            if (d.smaller) {
                ck_assert_int_eq(spi_split_decode_lb_smaller(&sp, spi_space_cache(&sp), w, &ms, &tc, &d, &dlb), SP_OK);
                /* the even mesh's case is no less (what it cannot prune, the bound cannot) */
                ck_assert(dlb <= even_lb);
                ck_assert(tc.has_dlo);
            }
            /* what it keeps for the program's mesh bound is what that bound
             * prices itself (spi_split_mesh_bound's dc_lb: the decode-first
             * case from the smaller meshes alone), where both apply */
            if (tc.has_dlo) {
                n_dlo_checked++;
                if (tc.dlo_st == SP_OK) {
                    ck_assert(dc_lb[1] == tc.dlo_ps[0] && dc_lb[2] == tc.dlo_ps[1]);
                } else {
                    ck_assert_int_eq(tc.dlo_st, SP_EINVAL);
                    ck_assert(dlb == -INFINITY && dc_lb[1] == 0 && dc_lb[2] == 0);
                }
            }
        }
        for (;;) {   /* every assignment of the candidates to the stages */
            int chips = 0, same = 1;
            for (int s = 0; s < S; s++) chips += cm[idx[s]][0] * cm[idx[s]][1] * cm[idx[s]][2], same &= idx[s] == idx[0];
            sp_layout u = l;
            for (int s = 0; s < S; s++) memcpy(u.stage_mesh[s], cm[idx[s]], sizeof u.stage_mesh[s]);
            memcpy(u.mesh, u.stage_mesh[0], sizeof u.mesh);
            if (!same && chips == S * c0 && sp_layout_check(&u, m, hw, N, w->batch, NULL) == SP_OK) {
                for (int s = 0; s < S; s++) u.stage_layers[s] = 1;
                u.stage_layers[S - 1] = (int16_t)(m->n_layers - S + 1);
                do {   /* the even split among them: the layout checks take stage_layers that are even */
                    sp_cost c;
                    if (sp_cost_eval(m, hw, &u, w, bf_opts(), &c) != SP_OK) continue;
                    ck_assert_msg(hetero, "a pipeline of stage meshes where the mesh bound says none exists");
                    ck_assert_msg(c.total_s >= dlb * (1 - 1e-9), "decode bound %g s above a pipeline's %g s", dlb,
                                  c.total_s);
                    n_dlb_checked += dlb > 0;
                    slowest_stages(m, hw, &u, w, mesh_lb, NULL);
                    slowest_stages(m, hw, &u, w, dc_lb, NULL);
                    n_mesh_bound_checked++;
                    n_dc_bound_checked += dc_lb[1] > 0 || dc_lb[2] > 0;
                    if (n == cap) all = realloc(all, (size_t)(cap *= 2) * sizeof *all);
                    all[n].l = u;
                    all[n++].c = c;
                } while (next_split(u.stage_layers, S, m->n_layers));
            }
            int s = 0;
            while (s < S && ++idx[s] == nc) idx[s++] = 0;
            if (s == S) break;
        }
    }
    /* and every split of each even template on its own mesh */
    for (int i = 0; i < ne; i++) {
        sp_layout u = all[i].l;
        if (u.stages < 2) continue;
        for (int s = 0; s < u.stages; s++) u.stage_layers[s] = 1;
        u.stage_layers[u.stages - 1] = (int16_t)(m->n_layers - u.stages + 1);
        do {
            sp_cost c;
            ck_assert_int_eq(sp_cost_eval(m, hw, &u, w, bf_opts(), &c), SP_OK);
            if (n == cap) all = realloc(all, (size_t)(cap *= 2) * sizeof *all);
            all[n].l = u;
            all[n++].c = c;
        } while (next_split(u.stage_layers, u.stages, m->n_layers));
    }
    spi_space_free(&sp);
    n_hetero_product += n;
    for (int obj = 0; obj < SP_PLAN_OBJECTIVE_COUNT; obj++)
        for (int lm = 0; lm < SP_PLAN_LAT_COUNT; lm++) {
            if (lm == SP_PLAN_LAT_DECODE && w->gen == 0) continue;
            if (lm == SP_PLAN_LAT_PREFILL && w->prompt == 0) continue;
            sp_plan_opts o = *base;
            o.objective = (sp_plan_objective)obj;
            o.latency_metric = (sp_plan_latency)lm;
            o.search_min_chips = 0;
            o.frontier = o.rivals = 0;
            double best = INFINITY, best_same = INFINITY;
            const sp_layout *bl = NULL;
            for (int i = 0; i < n; i++) {
                if (!admissible(&all[i].c, &o)) continue;
                double v = obj_of(&all[i].c, &o);
                if (!sp_layout_hetero(&all[i].l)) best_same = fmin(best_same, v);
                if (v < best) best = v, bl = &all[i].l;
            }
            sp_plan *p = NULL;
            ck_assert_int_eq(sp_plan_solve(m, hw, N, w, &o, &p), SP_OK);
            n_hetero_compared++;
            if (isinf(best)) {
                ck_assert(!p->has_chosen);
                sp_plan_free(p);
                continue;
            }
            ck_assert(p->has_chosen);
            double got = obj_of(&p->chosen.cost, &o);
            char a[320], b[320];
            ck_assert_msg(fabs(got - best) <= 1e-7 * fabs(best), "%s/%s: plan %.12g (%s), full product %.12g (%s), one mesh %.12g",
                          sp_plan_objective_name(o.objective), sp_plan_latency_name(o.latency_metric), got,
                          sp_layout_format(&p->chosen.layout, a, sizeof a), best, sp_layout_format(bl, b, sizeof b),
                          best_same);
            ck_assert(admissible(&p->chosen.cost, &o));
            ck_assert_int_eq(sp_layout_check(&p->chosen.layout, m, hw, N, w->batch, NULL), SP_OK);
            if (best < best_same && fabs(best - best_same) > 1e-7 * fabs(best_same)) {
                n_hetero_better++;
                ck_assert(sp_layout_hetero(&p->chosen.layout));
            }
            /* the stages reported are the layout's: layers, chips and mesh */
            ck_assert_int_eq(p->n_stages, p->chosen.layout.stages);
            int64_t chips = 0;
            for (int s = 0; s < p->n_stages; s++) {
                int d[3];
                sp_layout_stage_mesh(&p->chosen.layout, s, d);
                ck_assert(!memcmp(d, p->stages[s].mesh, sizeof d));
                ck_assert_int_eq(p->stages[s].chips, (int64_t)p->chosen.layout.replicas * d[0] * d[1] * d[2]);
                chips += p->stages[s].chips;
            }
            ck_assert_int_eq(chips, N);
            sp_plan_free(p);
        }
    free(all);
    free(bf.c);
}

/* Random small models on 4 and 6 chips of a cluster whose nodes take any
 * mesh (one chip per node) or hold them all (8 per node) */
START_TEST(test_hetero_equals_enumeration)
{
    rng_state = 777u + 7919u * (unsigned)_i;
    sp_model m;
    random_model(&m);
    m.n_layers = 3 + rnd(3);
    m.n_heads = 12;
    m.d_head = 64 * (1 + rnd(2));
    m.d_model = m.d_head * 12;
    m.n_kv_heads = rnd(2) ? 12 : 1;
    m.d_ff = m.d_model * 4;
    m.vocab = 32768 * (1 + rnd(3));   /* heavy LM heads and embeddings */
    ck_assert_int_eq(sp_model_validate(&m, NULL), SP_OK);
    sp_hw hw;
    small_hw(&hw, 1, (int64_t)(32 << rnd(4)) << 20);
    hw.chips_per_node = _i % 2 ? 1 : 8;
    hw.dispatch_s = 0;   /* no per-kernel floor: the matmuls' share decides */
    if (_i % 2) hw.inter_bw = hw.intra_bw, hw.inter_latency = hw.intra_latency;
    int N = _i % 2 ? 4 : 6;
    sp_workload w = {12 * (1 + rnd(4)), 64 * (1 + rnd(4)), 8 + 8 * rnd(2)};
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.weights = SP_PLAN_W_INT8;
    o.tensor_1d = 1;
    o.microbatches_per_stage = 1;
    check_hetero_problem(&m, &hw, N, &w, &o);
}
END_TEST

/* The program with stage meshes: its columns are the sum of the choices
 * (per template 1 + S·(n_m·(n − 1) + n_m) + 6 + (S − 1)·pairs, n_m > 1; as
 * before with one mesh), its rows within the same sum's bounds, where the
 * full product of (stage meshes, split) is Π_s n_m·n per template; run
 * with even meshes it is the program before, to the row. */
START_TEST(test_hetero_program_size)
{
    sp_model m;
    sp_hw hw;
    sp_workload w;
    split_instance(&m, &hw, &w);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.time_limit_ms = 600000;
    o.ffn_layouts = 1u << SP_FL_WS2D;   /* a narrowed space: few templates, one program */
    o.attn_layouts = 1u << SP_AL_HEADS;
    o.microbatches_per_stage = 1;
    spi_space s;
    spi_space_init(&s, &m, &hw);
    spi_space_narrow(&s, &o);
    ck_assert_int_eq(spi_space_add(&s, 8, &w, SP_PLAN_W_BF16, SP_DT_BF16), SP_OK);
    spi_split_req r = {.o = &o, .incumbent = INFINITY, .batch = 1 << 20, .max_stages = 4};
    spi_split_out so, se;
    double glpk_s = 0;
    ck_assert_int_eq(spi_split_solve(&s, 0, &r, &so, &glpk_s), SP_OK);
    r.same_mesh = 1;
    ck_assert_int_eq(spi_split_solve(&s, 0, &r, &se, &glpk_s), SP_OK);
    ck_assert(so.found && se.found);
    ck_assert_int_eq(so.kept, so.templates);
    long cols = 0, rows_lo = 0, rows_hi = 0, cols_even = 0, pairs_hi = 0;
    double product = 0;
    int hetero = 0;
    for (int i = 0; i < s.n; i++) {
        const sp_layout *l = &s.c[i].layout;
        if (l->stages < 2 || l->stages > 4) continue;
        int S = l->stages, lo, hi, cm[4][3];
        spi_split_window(m.n_layers, S, &lo, &hi);
        long nn = hi - lo + 1;
        int nm = 0, n0 = stage_mesh_cands(l, cm);
        for (int k = 0; k < n0; k++) {   /* one node: every axis must fit it (sp_layout_fits_nodes) */
            sp_layout v = *l;
            memcpy(v.mesh, cm[k], sizeof v.mesh);
            nm += k == 0 || sp_layout_fits_nodes(&v, &hw, NULL);
        }
        cols_even += 1 + S * (nn - 1) + 6;
        if (nm == 1) {
            cols += 1 + S * (nn - 1) + 6;
            continue;
        }
        hetero++;
        cols += 1 + S * (nm * (nn - 1) + nm) + 6;
        pairs_hi += (long)(S - 1) * nm * (nm - 1);
        /* beyond the rows of one mesh: one mesh per stage, the other meshes' chains, the chips;
         * at most every block fixed out, every pair's rows (two more where a hand-off is cheaper);
         * the middle stages' order by step becomes one row per pair of stages, or none */
        long sym = S > 3 ? (long)(S - 3) * (nn - 1) : 0;
        rows_lo += S + (long)(nm - 1) * S * (nn - 1) + 1 - sym;
        rows_hi += S + (long)(nm - 1) * S * (nn - 1) + 1 + (long)S * nm * nn + 3L * (S - 1) * nm * (nm - 1);
        double prod = 1;
        for (int k = 0; k < S; k++) prod *= (double)nm * nn;
        product += prod;
    }
    ck_assert_int_gt(hetero, 2);
    ck_assert_int_eq(se.cols, cols_even);
    ck_assert_int_eq(so.cols, cols + so.pair_cols);
    ck_assert_int_le(so.pair_cols, pairs_hi);   /* (S − 1)·pairs, pairs <= n_m·(n_m − 1) */
    ck_assert_int_ge(so.rows - se.rows, rows_lo);
    ck_assert_int_le(so.rows - se.rows, rows_hi);
    ck_assert_msg(product > 100.0 * (double)(so.rows + so.cols), "product %g, program %d x %d", product, so.rows,
                  so.cols);
    /* with more meshes to choose from the optimum is no worse, and its layout prices as the program says */
    ck_assert(so.phi <= se.phi * (1 + 1e-9));
    sp_cost c;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &so.layout, &w, NULL, &c), SP_OK);
    ck_assert_msg(fabs(so.phi - c.total_s) <= 1e-6 * c.total_s, "program %.12g, priced %.12g", so.phi, c.total_s);
    printf("pipeline program with stage meshes: %d templates (%d offered several meshes), %d rows x %d columns "
           "(even meshes: %d x %d); the full product %.3g (stage meshes, split)\n",
           so.templates, hetero, so.rows, so.cols, se.rows, se.cols, product);
    spi_space_free(&s);
}
END_TEST

/* A heterogeneous pipeline wins: a model whose LM head weighs about five of
 * its three layers, on four chips one link apart each (every mesh fits a
 * node), no per-kernel floor: the layers run fastest on one chip (no
 * collectives), the LM head on three.  The program over the space's
 * pipelines (no incumbent) chooses stage meshes 1 and 3 chips, faster than
 * the best pipeline of even meshes; its layout, priced by sp_cost_eval,
 * agrees with the program. */
START_TEST(test_hetero_wins_program)
{
    sp_model m;
    sp_model_init(&m);
    snprintf(m.name, sizeof m.name, "head-heavy");
    m.n_layers = 3;
    m.d_model = 3072;
    m.n_heads = 24;
    m.d_head = 128;
    m.n_kv_heads = 1;
    m.d_ff = 12288;
    m.vocab = 196608;
    m.ffn = SP_FFN_GELU;
    m.block = SP_BLOCK_SERIAL;
    m.norm = SP_NORM_LAYERNORM;
    m.positions = SP_POS_ROPE;
    m.max_context = 8192;
    ck_assert_int_eq(sp_model_validate(&m, NULL), SP_OK);
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    hw.chips_per_node = 1;
    hw.inter_bw = hw.intra_bw;
    hw.inter_latency = hw.intra_latency;
    hw.dispatch_s = 0;
    sp_workload w = {48, 512, 64};
    spi_space s;
    spi_space_init(&s, &m, &hw);
    ck_assert_int_eq(spi_space_add(&s, 4, &w, SP_PLAN_W_INT8, SP_DT_BF16), SP_OK);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.objective = SP_PLAN_MAX_THROUGHPUT;
    spi_split_req r = {.o = &o, .incumbent = INFINITY};
    spi_split_out so, se;
    double glpk_s = 0;
    ck_assert_int_eq(spi_split_solve(&s, 0, &r, &so, &glpk_s), SP_OK);
    r.same_mesh = 1;
    ck_assert_int_eq(spi_split_solve(&s, 0, &r, &se, &glpk_s), SP_OK);
    ck_assert(so.found && se.found);
    char a[320], b[320];
    printf("heterogeneous pipeline: %s %.6g s; even meshes: %s %.6g s\n", sp_layout_format(&so.layout, a, sizeof a),
           so.phi, sp_layout_format(&se.layout, b, sizeof b), se.phi);
    ck_assert(sp_layout_hetero(&so.layout));
    ck_assert(so.phi < se.phi);
    ck_assert_int_eq(sp_layout_check(&so.layout, &m, &hw, 4, w.batch, NULL), SP_OK);
    sp_cost c;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &so.layout, &w, NULL, &c), SP_OK);
    ck_assert_msg(fabs(so.phi - c.total_s) <= 1e-6 * c.total_s, "program %.12g, priced %.12g", so.phi, c.total_s);
    spi_space_free(&s);
}
END_TEST

START_TEST(test_hetero_summary)
{
    printf("stages of their own mesh: %d plans = the full product (%d layouts priced), %d won by stage meshes; "
           "the mesh bound below the slowest stage of %d pipelines of stage meshes (its decode-first bound, "
           "nonzero, of %d); the decode-alone bound below %d pipelines' totals; its smaller meshes' decode kept "
           "for the program equal to the program's own for %d templates; one stage's decode alone equal to "
           "its full pricing's for %d stages\n",
           n_hetero_compared, n_hetero_product, n_hetero_better, n_mesh_bound_checked, n_dc_bound_checked, n_dlb_checked,
           n_dlo_checked, n_stage_decode_checked);
    ck_assert_int_gt(n_hetero_compared, 0);
    ck_assert_int_gt(n_mesh_bound_checked, 0);
    ck_assert_int_gt(n_dc_bound_checked, 0);
    ck_assert_int_gt(n_dlb_checked, 0);
    ck_assert_int_gt(n_dlo_checked, 0);
    ck_assert_int_gt(n_stage_decode_checked, 0);
}
END_TEST

/* An instance built for an uneven split to win: two chips a slow link
 * apart (tensor parallelism pays), a model that fits on neither alone, and
 * vocabulary tables that weigh as much as several layers (the stages of an
 * even split differ by them). */
/* A model whose LM head weighs as much as a few layers: the last stage of
 * an uneven split holds fewer layers. */
static void head_heavy(sp_model *m)
{
    sp_model_init(m);
    snprintf(m->name, sizeof m->name, "head-heavy");
    m->n_layers = 6;
    m->d_model = 256;
    m->n_heads = 16;
    m->d_head = 16;
    m->n_kv_heads = 16;
    m->d_ff = 1024;
    m->vocab = 16384;
    m->ffn = SP_FFN_GELU;
    m->block = SP_BLOCK_SERIAL;
    m->norm = SP_NORM_LAYERNORM;
    m->positions = SP_POS_ROPE;
    m->max_context = 1024;
    ck_assert_int_eq(sp_model_validate(m, NULL), SP_OK);
}

START_TEST(test_split_wins)
{
    sp_model m;
    head_heavy(&m);
    sp_hw hw;
    small_hw(&hw, 1, 24 << 20);
    hw.chips_per_node = 1;
    hw.inter_bw = 1e9;
    hw.dispatch_s = 0;   /* the same for every layer: on layers this small it would hide the heads' weight */
    sp_workload w = {4, 16, 64};
    check_split_problem(&m, &hw, 2, &w);
    ck_assert_int_gt(n_split_better, 0);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.latency_metric = SP_PLAN_LAT_DECODE;
    sp_plan *p, *q;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 2, &w, &o, &p), SP_OK);
    o.even_stages = 1;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 2, &w, &o, &q), SP_OK);
    ck_assert(p->has_chosen && q->has_chosen);
    char a[320], b[320];
    printf("head-heavy, decode step: %s %.6g s; even splits only: %s %.6g s\n",
           sp_layout_format(&p->chosen.layout, a, sizeof a), p->chosen.cost.decode_step_s,
           sp_layout_format(&q->chosen.layout, b, sizeof b), q->chosen.cost.decode_step_s);
    ck_assert(sp_layout_uneven(&p->chosen.layout));
    ck_assert(p->chosen.cost.decode_step_s < q->chosen.cost.decode_step_s);
    /* the stages reported hold the layout's counts */
    for (int k = 0; k < p->n_stages; k++) ck_assert_int_eq(p->stages[k].layers, p->chosen.layout.stage_layers[k]);
    sp_plan_free(p);
    sp_plan_free(q);
}
END_TEST

/* The program's size: columns Σ_t (1 + S_t·(n_t − 1) + 6), rows 1 + Σ_t
 * (S_t·(n_t − 1) + 2 + S_t + Σ_φ (1 + S_t + forms_φ) + (S_t − 3)·(n_t − 1) for
 * S_t > 3): the sum of the choices, where the splits alone are Π_s n_t per
 * template; and one program over every template (no incumbent) finds the
 * split the full product does. */
START_TEST(test_split_program_size)
{
    sp_model m;
    sp_hw hw;
    sp_workload w;
    split_instance(&m, &hw, &w);
    spi_space s;
    spi_space_init(&s, &m, &hw);
    ck_assert_int_eq(spi_space_add(&s, 8, &w, SP_PLAN_W_BF16, SP_DT_BF16), SP_OK);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    /* one program over every template: seconds of CPU, which GLPK's wall-clock limit (10 s by
     * default) cuts short on a loaded machine; the limit is not what this test checks */
    o.time_limit_ms = 600000;
    spi_split_req r = {.o = &o, .incumbent = INFINITY, .batch = 1 << 20, .same_mesh = 1};
    spi_split_out so;
    double glpk_s = 0;
    ck_assert_int_eq(spi_split_solve(&s, 0, &r, &so, &glpk_s), SP_OK);
    ck_assert_int_eq(so.solved, 1);
    ck_assert(so.found);
    ck_assert_int_gt(so.kept, 10);
    ck_assert_int_eq(so.kept + so.pruned, so.templates);
    long cols = 0, rows = 1;
    double product = 0;
    int templates = 0;
    for (int i = 0; i < s.n; i++) {
        const sp_layout *l = &s.c[i].layout;
        if (l->stages < 2) continue;
        templates++;
        int S = l->stages, lo, hi;
        spi_split_window(m.n_layers, S, &lo, &hi);
        int nn = hi - lo + 1;
        sp_cost_pipe pipe;
        sp_cost_pipe_terms(&hw, l, 1, &pipe);
        cols += 1 + S * (nn - 1) + 6;
        rows += S * (nn - 1) + 2 + S;
        rows += (1 + S + pipe.phase[SP_PHASE_PREFILL].n_forms) + 2 * (1 + S + pipe.phase[SP_PHASE_DECODE].n_forms);
        if (S > 3) rows += (long)(S - 3) * (nn - 1);
        double splits = 1;
        for (int k = 0; k < S; k++) splits *= nn;
        product += splits;
    }
    ck_assert_int_eq(templates, so.templates);
    ck_assert_int_eq(so.cols, cols);
    ck_assert_int_eq(so.rows, rows);
    /* the full product dwarfs the program */
    ck_assert_msg(product > 10.0 * (double)(so.rows + so.cols), "product %g, program %d x %d", product, so.rows,
                  so.cols);
    /* its split is the best of the full product (each split priced by sp_cost_eval) */
    sp_cost c;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &so.layout, &w, NULL, &c), SP_OK);
    double best = INFINITY;
    for (int i = 0; i < s.n; i++) {
        sp_layout u = s.c[i].layout;
        if (u.stages < 2) continue;
        for (int k = 0; k < u.stages; k++) u.stage_layers[k] = 1;
        u.stage_layers[u.stages - 1] = (int16_t)(m.n_layers - u.stages + 1);
        do {
            sp_cost x;
            if (sp_cost_eval(&m, &hw, &u, &w, bf_opts(), &x) == SP_OK && x.feasible) best = fmin(best, x.total_s);
        } while (next_split(u.stage_layers, u.stages, m.n_layers));
    }
    ck_assert_msg(fabs(c.total_s - best) <= 1e-7 * best, "program %.12g, full product %.12g", c.total_s, best);
    ck_assert_msg(fabs(so.phi - c.total_s) <= 1e-6 * best, "program's optimum %.12g, its split priced %.12g", so.phi,
                  c.total_s);
    printf("pipeline program: %d templates, %d rows x %d columns; the full product %.0f splits\n", so.templates,
           so.rows, so.cols, product);
    spi_space_free(&s);
}
END_TEST

/* The pipeline program's first bound (spi_split_bound) is no more than the
 * slowest stage of any split of its template, phase by phase: here a long
 * prompt on a small model, where a last stage (a receive, the final norm,
 * one token's logits) is often faster than a middle stage of as many
 * layers (a receive and a send), so the middle kind alone would overstate
 * it where L = S·(ceil(L/S) − 1) + 1. */
START_TEST(test_split_bound_below_splits)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", &m, &err), SP_OK);
    m.n_layers = 7;
    sp_hw hw;
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    sp_workload w = {8, 2048, 8};
    spi_space s;
    spi_space_init(&s, &m, &hw);
    /* 24 chips: 3 stages of one node each, and 7 = 3·2 + 1 layers, so the
     * split 2,2,3 puts ceil(7/3) layers on the last stage alone */
    ck_assert_int_eq(spi_space_add(&s, 24, &w, SP_PLAN_W_BF16, SP_DT_BF16), SP_OK);
    int templates = 0, splits = 0, last_faster = 0;
    for (int i = 0; i < s.n; i++) {
        const sp_layout *l = &s.c[i].layout;
        if (!spi_split_is_template(l, m.n_layers) || l->stages < 3) continue;
        templates++;
        int64_t bound[3], units;
        ck_assert_int_eq(spi_split_bound(NULL, &m, &hw, l, &w, bound, &units), SP_OK);
        sp_layout u = *l;
        for (int k = 0; k < u.stages; k++) u.stage_layers[k] = 1;
        u.stage_layers[u.stages - 1] = (int16_t)(m.n_layers - u.stages + 1);
        do {
            int64_t t[SP_LAYOUT_MAX_STAGES][3];
            slowest_stages(&m, &hw, &u, &w, bound, t);
            /* the case the bound must allow for: the last stage holding as many layers as a middle one, faster */
            for (int k = 1; k + 1 < u.stages; k++)
                last_faster += u.stage_layers[u.stages - 1] == u.stage_layers[k] && t[u.stages - 1][0] < t[k][0];
            splits++;
        } while (next_split(u.stage_layers, u.stages, m.n_layers));
    }
    ck_assert_int_gt(templates, 10);
    ck_assert_int_gt(last_faster, 0);
    printf("pipeline program's first bound: %d templates, %d splits, a faster last stage in %d\n", templates, splits,
           last_faster);
    spi_space_free(&s);
}
END_TEST

/* SHARDPLAN_THREADS as a test found it (threads_save), put back by
 * threads_restore after the test set its own. */
typedef struct threads_env {
    int had;
    char v[32];
} threads_env;

static threads_env threads_save(void)
{
    threads_env e = {0, ""};
    const char *was = getenv("SHARDPLAN_THREADS");
    if (was) e.had = 1, snprintf(e.v, sizeof e.v, "%s", was);
    return e;
}

static void threads_restore(const threads_env *e)
{
    if (e->had) setenv("SHARDPLAN_THREADS", e->v, 1);
    else unsetenv("SHARDPLAN_THREADS");
}

/* The pipeline program's first bounds are taken on the pricing threads:
 * its answer, what it prunes and the programs it builds are the same on one
 * thread and on three (tiny-llama on 8 h100: 3,162 templates, enough for
 * three), with the plan's incumbent and with one half as large again (templates then
 * reach the program). */
START_TEST(test_split_threads)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    sp_workload w = {8, 16, 8};
    spi_space s;
    spi_space_init(&s, &m, &hw);
    s.split_bounds = 1;
    ck_assert_int_eq(spi_space_add(&s, 8, &w, SP_PLAN_W_AUTO, SP_DT_BF16), SP_OK);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    double inc = INFINITY;
    for (int i = 0; i < s.n; i++)
        if (spi_cand_admissible(&s, &s.c[i], &o)) inc = fmin(inc, spi_split_measure(&s, &s.c[i], &o));
    threads_env te = threads_save();
    double incs[2] = {inc, inc * 1.5};
    for (int k = 0; k < 2; k++) {
        spi_split_req r = {.o = &o, .incumbent = incs[k]};
        spi_split_out x, y;
        double glpk_s = 0;
        setenv("SHARDPLAN_THREADS", "1", 1);
        ck_assert_int_eq(spi_split_solve(&s, 0, &r, &x, &glpk_s), SP_OK);
        setenv("SHARDPLAN_THREADS", "3", 1);
        ck_assert_int_eq(spi_split_solve(&s, 0, &r, &y, &glpk_s), SP_OK);
        ck_assert_int_ge(x.templates, 3 * 256);
        ck_assert_int_eq(x.templates, y.templates);
        ck_assert_int_eq(x.pruned, y.pruned);
        ck_assert_int_eq(x.kept, y.kept);
        ck_assert_int_eq(x.blocks, y.blocks);
        ck_assert_int_eq(x.rows, y.rows);
        ck_assert_int_eq(x.cols, y.cols);
        ck_assert_int_eq(x.found, y.found);
        ck_assert(x.phi == y.phi || (isinf(x.phi) && isinf(y.phi)));
        if (x.found) {
            ck_assert_int_eq(x.template_cand, y.template_cand);
            ck_assert(!memcmp(x.layout.stage_layers, y.layout.stage_layers, sizeof x.layout.stage_layers));
            ck_assert(!memcmp(x.layout.stage_mesh, y.layout.stage_mesh, sizeof x.layout.stage_mesh));
        }
        if (k == 1) ck_assert_int_gt(x.kept, 0);   /* an incumbent above the best: templates reach the program */
    }
    threads_restore(&te);
    spi_space_free(&s);
}
END_TEST

/* The pipeline program's bounds taken from the space's pricing (split_bounds:
 * each template's stage times) equal those it prices itself, and its
 * answer, what it prunes and the program it builds are the same either way,
 * with no incumbent and with one that prunes part of the templates. */
START_TEST(test_split_bounds_with_space)
{
    sp_model m;
    sp_hw hw;
    sp_workload w;
    split_instance(&m, &hw, &w);
    spi_space a, b;
    spi_space_init(&a, &m, &hw);
    spi_space_init(&b, &m, &hw);
    b.split_bounds = 1;
    ck_assert_int_eq(spi_space_add(&a, 8, &w, SP_PLAN_W_BF16, SP_DT_BF16), SP_OK);
    ck_assert_int_eq(spi_space_add(&b, 8, &w, SP_PLAN_W_BF16, SP_DT_BF16), SP_OK);
    ck_assert_int_eq(a.n, b.n);
    int with = 0;
    for (int i = 0; i < b.n; i++) {
        const spi_cand *c = &b.c[i];
        ck_assert(!a.c[i].has_bound);
        ck_assert_int_eq(c->has_bound, spi_split_is_template(&c->layout, m.n_layers));
        if (!c->has_bound) continue;
        with++;
        int64_t ps[3], units;
        ck_assert_int_eq(spi_split_bound(NULL, &m, &hw, &c->layout, &w, ps, &units), SP_OK);
        for (int p = 0; p < 3; p++) ck_assert_int_eq(ps[p], c->bound_ps[p]);
        ck_assert_int_eq(units, c->bound_units);
        ck_assert_int_gt(c->bound_ps[0], 0);
    }
    ck_assert_int_gt(with, 10);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    double inc[2] = {INFINITY, 0};
    for (int k = 0; k < 2; k++) {
        spi_split_req r = {.o = &o, .incumbent = inc[k], .batch = 4};
        spi_split_out x, y;
        double glpk_s = 0;
        ck_assert_int_eq(spi_split_solve(&a, 0, &r, &x, &glpk_s), SP_OK);
        ck_assert_int_eq(spi_split_solve(&b, 0, &r, &y, &glpk_s), SP_OK);
        ck_assert(x.found && y.found);
        ck_assert_int_eq(x.templates, y.templates);
        ck_assert_int_eq(x.pruned, y.pruned);
        ck_assert_int_eq(x.kept, y.kept);
        ck_assert_int_eq(x.rows, y.rows);
        ck_assert_int_eq(x.cols, y.cols);
        ck_assert_int_eq(x.template_cand, y.template_cand);
        ck_assert(x.phi == y.phi);
        ck_assert(!memcmp(x.layout.stage_layers, y.layout.stage_layers, sizeof x.layout.stage_layers));
        if (k == 1) ck_assert_int_gt(y.pruned, 0);
        /* next: an incumbent just above the optimum, so the bound prunes */
        inc[1] = x.phi * 1.02;
    }
    spi_space_free(&a);
    spi_space_free(&b);
}
END_TEST

/* The frontier over a union of (chips, batch) instances (each instance
 * reduced as it is priced, then the union) against the enumerated Pareto set
 * of the union, for the phase cost metric and both phases; sp_plan_frontiers
 * gives what sp_plan_frontier gives for each metric alone. */
START_TEST(test_union_frontier_equals_enumeration)
{
    rng_state = 4321u + 104729u * (unsigned)_i;
    sp_model m;
    random_model(&m);
    sp_hw hw;
    int cluster = _i % 2;
    static const int64_t hbm[] = {4 << 20, 16 << 20, 64 << 20, 1ll << 30};
    small_hw(&hw, cluster, hbm[rnd(4)]);
    static const int chips[] = {2, 4, 8};
    static const int64_t batches[] = {1, 4, 8};
    sp_workload w = {1, 8 * (1 + rnd(4)), 4};
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.cost_metric = SP_PLAN_COST_PHASE;
    o.rivals = 0;
    o.search_min_chips = 0;
    sp_plan_latency lms[2] = {SP_PLAN_LAT_DECODE, SP_PLAN_LAT_PREFILL};
    sp_plan *both[2];
    ck_assert_int_eq(sp_plan_frontiers(&m, &hw, chips, 3, batches, 3, &w, &o, lms, 2, both), SP_OK);
    /* the enumerated union */
    bf_space bf[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            sp_workload wi = w;
            wi.batch = batches[j];
            brute(&m, &hw, chips[i], &wi, SP_PLAN_W_AUTO, &bf[3 * i + j]);
        }
    for (int k = 0; k < 2; k++) {
        o.latency_metric = lms[k];
        sp_plan *p;
        ck_assert_int_eq(sp_plan_frontier(&m, &hw, chips, 3, batches, 3, &w, &o, &p), SP_OK);
        ck_assert_int_eq(p->n_frontier, both[k]->n_frontier);
        ck_assert_int_eq(p->stats.candidates, both[k]->stats.candidates);
        for (int f = 0; f < p->n_frontier; f++) {
            ck_assert(p->frontier[f].cost_s == both[k]->frontier[f].cost_s);
            ck_assert(p->frontier[f].latency_s == both[k]->frontier[f].latency_s);
            ck_assert(!memcmp(&p->frontier[f].layout, &both[k]->frontier[f].layout, sizeof p->frontier[f].layout));
        }
        /* enumerated Pareto set of (phase cost, phase latency) over layouts that fit */
        int nf = 0, total = 0;
        for (int a = 0; a < 9; a++) total += bf[a].n;
        ck_assert_int_gt(total, 0);   /* every placement: more than the planner's merged space */
        for (int a = 0; a < 9; a++)
            for (int i = 0; i < bf[a].n; i++) {
                const sp_cost *ci = &bf[a].c[i].c;
                if (!ci->feasible) continue;
                double N = chips[a / 3], B = (double)batches[a % 3];
                double cc = k == 0 ? N * ci->decode_step_s / B : N * ci->prefill_s / (B * (double)w.prompt);
                double li = lat_of(ci, lms[k]);
                int dominated = 0;
                for (int b = 0; b < 9 && !dominated; b++)
                    for (int j = 0; j < bf[b].n && !dominated; j++) {
                        const sp_cost *cj = &bf[b].c[j].c;
                        if (!cj->feasible) continue;
                        double Nb = chips[b / 3], Bb = (double)batches[b % 3];
                        double cb = k == 0 ? Nb * cj->decode_step_s / Bb : Nb * cj->prefill_s / (Bb * (double)w.prompt);
                        double lb = lat_of(cj, lms[k]);
                        if (cb <= cc && lb <= li && (cb < cc || lb < li)) dominated = 1;
                        if (cb == cc && lb == li && (b < a || (b == a && j < i))) dominated = 1;   /* duplicate */
                    }
                if (dominated) continue;
                nf++;
                int found = 0;
                for (int f = 0; f < p->n_frontier; f++)
                    found |= close_to(p->frontier[f].cost_s, cc) && close_to(p->frontier[f].latency_s, li) &&
                             p->frontier[f].chips == (int)N && p->frontier[f].batch == (int64_t)B;
                ck_assert_msg(found, "union frontier point %d:%d (%.9g, %.9g) missing", (int)N, (int)B, cc, li);
            }
        ck_assert_int_eq(p->n_frontier, nf);
        n_frontier_points += nf;
        if (nf) {
            ck_assert_int_eq(p->result, SP_PLAN_OPTIMAL);
            ck_assert_int_eq(p->chosen.chips, p->frontier[0].chips);
        } else ck_assert_int_eq(p->result, SP_PLAN_INFEASIBLE);
        sp_plan_free(p);
        sp_plan_free(both[k]);
    }
    for (int a = 0; a < 9; a++) free(bf[a].c);
}
END_TEST

/* ---- pruning by the decode bound: the same plan as pricing every layout ---- */

/* p's JSON without its statistics (what plan_identical.sh compares). */
static char *plan_answer(const sp_plan *p)
{
    json_t *j = sp_plan_to_json(p);
    json_object_del(j, "stats");
    char *t = json_dumps(j, JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_decref(j);
    return t;
}

static int n_prune_compared, n_prune_pruned, n_prune_templates, n_prune_split_better;

/* sp_plan_solve with pruning and with opts.exhaustive: the same answer, to
 * the bit (chosen, costs, stages, frontier, rivals, groups). */
static void check_prune(const sp_model *m, const sp_hw *hw, int N, const sp_workload *w, const sp_plan_opts *o)
{
    sp_plan_opts oe = *o;
    oe.exhaustive = 1;
    sp_plan *p = NULL, *q = NULL;
    sp_status a = sp_plan_solve(m, hw, N, w, o, &p), b = sp_plan_solve(m, hw, N, w, &oe, &q);
    ck_assert_int_eq(a, b);
    if (a == SP_OK) {
        char *x = plan_answer(p), *y = plan_answer(q);
        size_t d = 0;
        while (x[d] && x[d] == y[d]) d++;
        size_t from = d > 80 ? d - 80 : 0;
        ck_assert_msg(!x[d] && !y[d], "pruned and exhaustive plans differ (%d of %d layouts pruned) at byte %zu:\n"
                      "...%.160s\n...%.160s", p->stats.pruned, p->stats.pruned + p->stats.candidates, d, x + from,
                      y + from);
        ck_assert_int_eq(q->stats.pruned, 0);
        ck_assert_int_le(p->stats.candidates, q->stats.candidates);
        n_prune_compared++;
        n_prune_pruned += p->stats.pruned > 0;
        n_prune_templates += p->stats.split_templates < q->stats.split_templates;
        free(x);
        free(y);
    }
    sp_plan_free(p);
    sp_plan_free(q);
}

START_TEST(test_prune_equals_exhaustive)
{
    rng_state = 2718u + 15485863u * (unsigned)_i;
    sp_model m;
    random_model(&m);
    if (_i % 4 == 3) {   /* mixture of experts */
        moe_model(&m);
    }
    if (_i % 5 == 1) m.n_layers = 6 + rnd(7);   /* pipelines the pipeline program splits */
    sp_hw hw;
    static const int chips[] = {2, 4, 8, 16, 6, 12};
    int N = chips[rnd((unsigned)(sizeof chips / sizeof chips[0]))];
    static const int64_t hbm[] = {4 << 20, 16 << 20, 64 << 20, 1ll << 30};
    small_hw(&hw, _i % 2, hbm[rnd(4)]);
    static const int64_t batches[] = {1, 2, 4, 8, 16, 12};
    sp_workload w = {batches[rnd(6)], 8 * (1 + rnd(4)), 2 + 2 * rnd(3)};
    if (rnd(6) == 0) w.gen = 0;   /* nothing to bound by: priced whole */
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.objective = (sp_plan_objective)rnd(SP_PLAN_OBJECTIVE_COUNT);
    o.latency_metric = (sp_plan_latency)rnd(SP_PLAN_LAT_COUNT);
    if (w.gen == 0 && o.latency_metric == SP_PLAN_LAT_DECODE) o.latency_metric = SP_PLAN_LAT_TOTAL;
    o.cost_metric = (sp_plan_cost_metric)rnd(SP_PLAN_COST_COUNT);
    o.search_min_chips = rnd(2);
    o.even_stages = rnd(4) == 0;
    o.frontier = rnd(4) != 0;
    o.rivals = rnd(4) != 0;
    o.disaggregate = rnd(5) == 0;
    check_prune(&m, &hw, N, &w, &o);
    /* bounds at and near the best latency and throughput: the incumbents must meet them */
    sp_plan_opts ol = o;
    ol.objective = SP_PLAN_MIN_LATENCY;
    ol.frontier = ol.rivals = 0;
    ol.exhaustive = 1;
    sp_plan *p = NULL;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, N, &w, &ol, &p), SP_OK);
    if (p->has_chosen) {
        static const double f[] = {1.0, 1.02, 1.5};
        sp_plan_opts ob = o;
        ob.max_latency_s = p->chosen.latency_s * f[rnd(3)];
        if (rnd(2)) ob.min_tokens_per_s = p->chosen.cost.tokens_per_s / f[rnd(3)] / 2;
        check_prune(&m, &hw, N, &w, &ob);
    }
    sp_plan_free(p);
}
END_TEST

/* Bundled models on a torus and a cluster: templates of the pipeline
 * program pruned too. */
START_TEST(test_prune_bundled)
{
    static const struct { const char *m, *hw; int chips; sp_workload w; int obj, lm; } cs[] = {
        {"palm-62b", "tpu-v4", 16, {64, 1024, 64}, SP_PLAN_MIN_LATENCY, SP_PLAN_LAT_TOTAL},
        {"palm-62b", "tpu-v4", 32, {16, 512, 128}, SP_PLAN_MIN_COST, SP_PLAN_LAT_DECODE},
        {"llama2-70b", "h100", 16, {32, 1024, 128}, SP_PLAN_MAX_THROUGHPUT, SP_PLAN_LAT_TOTAL},
        {"mixtral-8x7b", "a100-80g", 8, {16, 512, 64}, SP_PLAN_MIN_LATENCY, SP_PLAN_LAT_TOTAL},
    };
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find(cs[_i].m, &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find(cs[_i].hw, &hw, &err), SP_OK);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.objective = (sp_plan_objective)cs[_i].obj;
    o.latency_metric = (sp_plan_latency)cs[_i].lm;
    check_prune(&m, &hw, cs[_i].chips, &cs[_i].w, &o);
}
END_TEST

/* Where the pipeline program's split beats every layout of the space (the
 * head-heavy model, on a torus and on a cluster): its templates are kept
 * for it. */
START_TEST(test_prune_split_wins)
{
    sp_model m;
    head_heavy(&m);
    sp_hw hw;
    small_hw(&hw, _i % 2, 24 << 20);
    if (_i % 2) hw.chips_per_node = 1, hw.inter_bw = 1e9;
    else {
        /* on a 4x4x4 torus a stage keeps its mesh, so the templates are pruned by their
         * program bound: 12 layers and a heavier head make the split win there */
        m.n_layers = 12;
        m.vocab = 65536;
        hw.torus_dims[0] = hw.torus_dims[1] = hw.torus_dims[2] = 4;
    }
    hw.dispatch_s = 0;
    sp_workload w = {4, 16, 64};
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.latency_metric = _i / 2 % 2 ? SP_PLAN_LAT_TOTAL : SP_PLAN_LAT_DECODE;
    /* without rivals and frontier only the best layout holds a template back: the
     * split's template is kept by its program bound alone */
    if (_i >= 4) o.rivals = o.frontier = 0;
    for (int N = _i % 2 ? 2 : 4; N <= 8; N *= 2) {
        sp_plan *p = NULL;
        ck_assert_int_eq(sp_plan_solve(&m, &hw, N, &w, &o, &p), SP_OK);
        n_prune_split_better += p->stats.split_better;
        sp_plan_free(p);
        check_prune(&m, &hw, N, &w, &o);
    }
}
END_TEST

/* The rivals under pruning (plan_space.c prunable: a layout is dropped when
 * two values of each rival kind, or its own, have priced layouts that beat
 * its bound): on small random problems with the rivals always asked for,
 * every rival (and the rest of the plan) is the exhaustive search's. */
static int n_prune_rivals;
START_TEST(test_prune_rivals)
{
    rng_state = 31337u + 2654435761u * (unsigned)_i;
    sp_model m;
    random_model(&m);
    if (_i % 3 == 2) {   /* mixture of experts: the experts kind takes two values */
        moe_model(&m);
    }
    sp_hw hw;
    static const int chips[] = {4, 8, 16, 12};
    int N = chips[rnd(4)];
    static const int64_t hbm[] = {16 << 20, 64 << 20, 1ll << 30};
    small_hw(&hw, _i % 2, hbm[rnd(3)]);   /* the cluster (h100) has fp8 weights too */
    sp_workload w = {(int64_t)4 << rnd(3), 8 * (1 + rnd(4)), 2 + 2 * rnd(3)};
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.objective = (sp_plan_objective)rnd(SP_PLAN_OBJECTIVE_COUNT);
    o.latency_metric = (sp_plan_latency)rnd(SP_PLAN_LAT_COUNT);
    o.cost_metric = (sp_plan_cost_metric)rnd(SP_PLAN_COST_COUNT);
    o.frontier = rnd(2);
    o.even_stages = rnd(3) == 0;
    o.rivals = 1;
    int before = n_prune_pruned;
    check_prune(&m, &hw, N, &w, &o);
    sp_plan *p = NULL;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, N, &w, &o, &p), SP_OK);
    n_prune_rivals += n_prune_pruned > before && p->n_rivals >= 3;
    sp_plan_free(p);
}
END_TEST

/* The pruned pricing's rounds decide on the rounds before them alone, not
 * on the pricing threads (plan_space.c, flush_pruned): palm-540b on 64
 * tpu-v4 (~59 000 layouts in parts of SPI_PEND_PART, batches on the
 * space's pool) plans the same answer, and prunes, rejects and prices the same
 * layouts, on 1, 2 and 3 threads. */
START_TEST(test_prune_threads)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find("palm-540b", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("tpu-v4", &hw, &err), SP_OK);
    sp_workload w = {64, 2048, 64};
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    if (_i == 1) {
        o.objective = SP_PLAN_MIN_COST;
        o.latency_metric = SP_PLAN_LAT_DECODE;
        o.min_tokens_per_s = 200;
    }
    threads_env te = threads_save();
    static const char *threads[] = {"1", "2", "3"};
    char *first = NULL;
    sp_plan_stats st0 = {0};
    for (int k = 0; k < 3; k++) {
        setenv("SHARDPLAN_THREADS", threads[k], 1);
        sp_plan *p = NULL;
        ck_assert_int_eq(sp_plan_solve(&m, &hw, 64, &w, &o, &p), SP_OK);
        char *x = plan_answer(p);
        if (!k) {
            first = x;
            st0 = p->stats;
            /* more than one part, and pruning at work */
            ck_assert_int_gt(st0.candidates + st0.rejected + st0.pruned, 2 * 4096);
            ck_assert_int_gt(st0.pruned, 0);
        } else {
            ck_assert_msg(!strcmp(first, x), "%s threads plan differently from 1", threads[k]);
            ck_assert_int_eq(p->stats.pruned, st0.pruned);
            ck_assert_int_eq(p->stats.rejected, st0.rejected);
            ck_assert_int_eq(p->stats.candidates, st0.candidates);
            ck_assert_int_eq(p->stats.feasible, st0.feasible);
            free(x);
        }
        sp_plan_free(p);
    }
    free(first);
    threads_restore(&te);
}
END_TEST

START_TEST(test_prune_summary)
{
    /* the comparisons ran, and pruning did prune (templates included) */
    ck_assert_int_ge(n_prune_compared, 60);
    ck_assert_int_ge(n_prune_pruned, 20);
    ck_assert_int_ge(n_prune_templates, 2);
    ck_assert_int_ge(n_prune_split_better, 8);
    /* of the 24 problems with rivals, many pruned layouts and still found three rivals or more
     * (11 with the space priced in parts of 512 layouts, 12 in parts of 4096) */
    ck_assert_int_ge(n_prune_rivals, 10);
}
END_TEST

START_TEST(test_equal_costs_tie)
{
    /* a symmetric torus: meshes 1x2x2 and 2x1x2 ... tie; the MILP returns one of them */
    sp_model m;
    rng_state = 42;
    random_model(&m);
    sp_hw hw;
    small_hw(&hw, 0, 1ll << 30);
    hw.torus_dims[0] = hw.torus_dims[1] = hw.torus_dims[2] = 4;
    sp_workload w = {4, 16, 4};
    check_problem(&m, &hw, 4, &w);
    ck_assert_int_gt(n_ties, 0);
}
END_TEST

START_TEST(test_autoconfig_deterministic)
{
    sp_model m;
    rng_state = 99;
    random_model(&m);
    sp_hw hw;
    small_hw(&hw, 1, 1ll << 30);
    sp_workload w = {0, 32, 8};
    sp_layout a, b;
    ck_assert_int_eq(sp_autoconfig(&m, &hw, 8, 8, &w, NULL, &a), SP_OK);
    ck_assert_int_eq(sp_autoconfig(&m, &hw, 8, 8, &w, NULL, &b), SP_OK);
    ck_assert(!memcmp(&a, &b, sizeof a));
    small_hw(&hw, 1, 1 << 10);
    ck_assert_int_eq(sp_autoconfig(&m, &hw, 8, 8, &w, NULL, &a), SP_EINFEASIBLE);
}
END_TEST

START_TEST(test_infeasible_reports_min_chips)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("palm-540b", &m, &err), SP_OK);
    sp_hw hw;
    ck_assert_int_eq(sp_hw_find("tpu-v4", &hw, &err), SP_OK);
    sp_workload w = {8, 128, 8};
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.frontier = 0;
    o.rivals = 0;
    sp_plan *p;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 4, &w, &o, &p), SP_OK);
    ck_assert_int_eq(p->result, SP_PLAN_INFEASIBLE);
    ck_assert_int_gt(p->min_shortfall_bytes, 0);
    int fit = p->min_chips_fit;
    ck_assert_int_gt(fit, 4);
    sp_plan_free(p);
    /* the count found fits, and the one below it (allowed by the torus) does not */
    o.search_min_chips = 0;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, fit, &w, &o, &p), SP_OK);
    ck_assert(p->has_chosen);
    sp_plan_free(p);
    int counts[4096];
    int k = sp_plan_chip_counts(&hw, 5, fit - 1, counts, 4096);
    for (int i = 0; i < k; i++) {
        ck_assert_int_eq(sp_plan_solve(&m, &hw, counts[i], &w, &o, &p), SP_OK);
        ck_assert(!p->has_chosen);
        sp_plan_free(p);
    }
    /* the capacity query agrees */
    int n = 0;
    ck_assert_int_eq(sp_plan_min_chips(&m, &hw, &w, &o, &n, &p), SP_OK);
    ck_assert_int_eq(n, fit);
    sp_plan_free(p);
}
END_TEST

/* Several latency targets at once = sp_plan_min_chips (objective cost, the
 * target as bound) for each: same count, same cheapest cost; a target below
 * every layout's latency is unmet in both. */
START_TEST(test_min_chips_targets)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("llama2-7b", &m, &err), SP_OK);
    sp_hw hw;
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    sp_workload w = {8, 128, 32};
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.frontier = 0;
    o.rivals = 0;
    o.search_min_chips = 0;
    o.latency_metric = SP_PLAN_LAT_DECODE;
    o.max_chips = 32;
    /* decode steps of 3.5 ms (8 chips) to 5.1 ms (one) on the calibrated profile */
    double t[5] = {1e-4, 4e-3, 6e-3, 1e-2, 2e-2};
    int chips[5];
    sp_plan *ps[5];
    ck_assert_int_eq(sp_plan_min_chips_targets(&m, &hw, &w, &o, t, 5, chips, ps), SP_OK);
    int met = 0;
    for (int i = 0; i < 5; i++) {
        sp_plan_opts oi = o;
        oi.objective = SP_PLAN_MIN_COST;
        oi.max_latency_s = t[i];
        int n = 0;
        sp_plan *p = NULL;
        sp_status st = sp_plan_min_chips(&m, &hw, &w, &oi, &n, &p);
        if (st == SP_EINFEASIBLE) {
            ck_assert_int_eq(chips[i], 0);
            ck_assert_ptr_null(ps[i]);
            continue;
        }
        ck_assert_int_eq(st, SP_OK);
        ck_assert_int_eq(chips[i], n);
        ck_assert_ptr_nonnull(ps[i]);
        ck_assert(ps[i]->chosen.latency_s <= t[i]);
        ck_assert_double_eq_tol(ps[i]->chosen.cost_s, p->chosen.cost_s, 1e-12 * p->chosen.cost_s);
        met++;
        sp_plan_free(p);
        sp_plan_free(ps[i]);
    }
    ck_assert_int_eq(chips[0], 0);   /* 0.1 ms per token: nothing */
    ck_assert_int_ge(met, 3);
    double bad = 0;
    ck_assert_int_eq(sp_plan_min_chips_targets(&m, &hw, &w, &o, &bad, 1, chips, ps), SP_EINVAL);
}
END_TEST

START_TEST(test_chip_counts)
{
    sp_hw hw;
    small_hw(&hw, 1, 1 << 30);
    hw.chips_per_node = 8;
    int c[16];
    int k = sp_plan_chip_counts(&hw, 1, 40, c, 16);
    static const int want[] = {1, 2, 4, 8, 16, 24, 32, 40};
    ck_assert_int_eq(k, 8);
    for (int i = 0; i < k; i++) ck_assert_int_eq(c[i], want[i]);
    small_hw(&hw, 0, 1 << 30);   /* 4x2x2 torus */
    k = sp_plan_chip_counts(&hw, 1, 16, c, 16);
    static const int want2[] = {1, 2, 3, 4, 6, 8, 12, 16};
    ck_assert_int_eq(k, 8);
    for (int i = 0; i < k; i++) ck_assert_int_eq(c[i], want2[i]);
}
END_TEST

START_TEST(test_json_keys)
{
    sp_model m;
    rng_state = 7;
    random_model(&m);
    sp_hw hw;
    small_hw(&hw, 0, 1ll << 30);
    sp_workload w = {8, 32, 8};
    sp_plan *p;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 8, &w, NULL, &p), SP_OK);
    json_t *j = sp_plan_to_json(p);
    ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "optimal");
    json_t *costs = json_object_get(json_object_get(j, "chosen"), "costs");
    static const char *const keys[] = {"layout", "feasible", "prefill_s", "decode_step_s", "total_s", "tokens_per_s",
                                       "mfu", "cost_chip_s_per_token", "comm_bytes_per_chip", "time_breakdown",
                                       "memory_per_chip"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) ck_assert_ptr_nonnull(json_object_get(costs, keys[i]));
    ck_assert(json_is_array(json_object_get(j, "frontier")));
    ck_assert(json_is_array(json_object_get(j, "rivals")));
    /* chosen.layout parses back to the chosen layout */
    char *s = json_dumps(json_object_get(json_object_get(j, "chosen"), "layout"), 0);
    sp_layout l;
    ck_assert_int_eq(sp_layout_parse(s, &l, NULL), SP_OK);
    ck_assert(!memcmp(&l, &p->chosen.layout, sizeof l));
    free(s);
    json_decref(j);
    sp_plan_free(p);
}
END_TEST

START_TEST(test_bad_args)
{
    sp_model m;
    rng_state = 5;
    random_model(&m);
    sp_hw hw;
    small_hw(&hw, 0, 1ll << 30);
    sp_workload w = {8, 0, 0};
    sp_plan *p = NULL;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 8, &w, NULL, &p), SP_EINVAL);
    w.prompt = 8;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 0, &w, NULL, &p), SP_EINVAL);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.weights = SP_PLAN_W_FP8;   /* tpu-v4 has no fp8 peak */
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 8, &w, &o, &p), SP_EINVAL);
    sp_plan_objective ob;
    ck_assert_int_eq(sp_plan_objective_parse("speed", &ob), SP_EINVAL);
    ck_assert_int_eq(sp_plan_objective_parse("cost", &ob), SP_OK);
    ck_assert_int_eq(ob, SP_PLAN_MIN_COST);
}
END_TEST

START_TEST(test_split_summary)
{
    printf("pipeline program: %d plans = the full product (%d splits priced), %d won by an uneven split; "
           "the first bound below every split's slowest stage (%d splits)\n",
           n_split_compared, n_split_product, n_split_better, n_bound_checked);
    ck_assert_int_gt(n_split_compared, 0);
    ck_assert_int_gt(n_bound_checked, 0);
}
END_TEST

START_TEST(test_summary)
{
    /* runs last in its case: the loop above must have compared real cases */
    fprintf(stderr, "check_plan: %d MILP solves compared with enumeration (%d infeasible, %d with ties), "
                    "%d frontier points\n", n_compared, n_infeasible, n_ties, n_frontier_points);
}
END_TEST


/* Separate groups (plan_groups.c): the program's answer equals brute force
 * over every (prefill candidate, decode candidate) pair that splits the
 * chips, each pair priced by sp_cost_eval, for the objectives and bounds a
 * plan takes; the program has one column per candidate of either group
 * (plus t for the steady state), never one per pair. */
static const struct {
    const char *model, *hw;
    int chips;
    sp_workload w;
    sp_plan_objective obj;
    sp_plan_latency lat;
    double max_lat, min_tps;
} group_cases[] = {
    {"tiny-llama", "a100-80g", 4, {8, 64, 16}, SP_PLAN_MIN_LATENCY, SP_PLAN_LAT_TOTAL, 0, 0},
    {"tiny-llama", "a100-80g", 4, {8, 64, 16}, SP_PLAN_MAX_THROUGHPUT, SP_PLAN_LAT_TOTAL, 0, 0},
    {"tiny-llama", "a100-80g", 6, {8, 64, 16}, SP_PLAN_MIN_COST, SP_PLAN_LAT_TOTAL, 0, 0},
    {"tiny-llama", "a100-80g", 4, {8, 64, 16}, SP_PLAN_MIN_LATENCY, SP_PLAN_LAT_DECODE, 0, 0},
    {"tiny-palm", "a100-80g", 4, {16, 32, 8}, SP_PLAN_MAX_THROUGHPUT, SP_PLAN_LAT_TOTAL, 2e-3, 0},
    {"tiny-gpt2", "tpu-v4", 8, {16, 32, 8}, SP_PLAN_MAX_THROUGHPUT, SP_PLAN_LAT_TOTAL, 0, 1e4},
};

START_TEST(test_groups_equal_brute_force)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find(group_cases[_i].model, &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find(group_cases[_i].hw, &hw, &err), SP_OK);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.objective = group_cases[_i].obj;
    o.latency_metric = group_cases[_i].lat;
    o.max_latency_s = group_cases[_i].max_lat;
    o.min_tokens_per_s = group_cases[_i].min_tps;
    int N = group_cases[_i].chips;
    const sp_workload *w = &group_cases[_i].w;
    spi_groups g;
    ck_assert_msg(spi_groups_cands(&m, &hw, N, w, &o, &g) == SP_OK, "%s", sp_last_error());
    ck_assert_int_gt(g.np, 0);
    ck_assert_int_gt(g.nd, 0);
    spi_groups_out out;
    ck_assert_msg(spi_groups_solve(&g, &m, &hw, N, w, &o, &out) == SP_OK, "%s", sp_last_error());
    ck_assert(out.proven);
    /* brute force: every pair that splits the chips */
    double best = INFINITY;
    int pairs = 0;
    for (int p = 0; p < g.np; p++)
        for (int d = 0; d < g.nd; d++) {
            if (g.pf[p].chips + g.dc[d].chips != N) continue;
            sp_layout l;
            sp_cost c;
            if (spi_groups_price(bf_opts()->cache, &m, &hw, w, &g.pf[p], &g.dc[d], &l, &c) != SP_OK) continue;
            pairs++;
            if (!spi_groups_admissible(&c, &o)) continue;
            double v = spi_groups_objective(&m, &hw, N, w, &o, &c);
            if (v < best) best = v;
        }
    ck_assert_int_gt(pairs, 1);
    ck_assert_int_eq(out.found, best < INFINITY);
    ck_assert_msg(out.objective == best, "case %d: program %.15g, brute force %.15g (%d pairs, %d priced)", _i,
                  out.objective, best, pairs, out.priced);
    if (out.found) {
        /* the answer is the pair as sp_cost_eval prices it */
        sp_cost c;
        ck_assert_int_eq(sp_cost_eval(&m, &hw, &out.layout, w, NULL, &c), SP_OK);
        ck_assert(sp_layout_disaggregated(&out.layout) && c.total_s == out.cost.total_s);
        ck_assert_int_eq(sp_layout_chips(&out.layout), N);
    }
    /* the program's size: the sum of the choices (one column each, t for the steady state) and
     * the rows of the formulation, before any cut */
    int period = o.objective != SP_PLAN_MIN_LATENCY;
    ck_assert_int_eq(out.cols, g.np + g.nd + period);
    ck_assert_int_eq(out.rows, 3 + g.nkeys + 2 * period + 2 * (o.min_tokens_per_s > 0) + (o.max_latency_s > 0));
    ck_assert_int_le(out.priced, pairs);
    spi_groups_free(&g);
}
END_TEST

/* sp_plan_solve with disaggregate: the groups searched, the choice by the
 * objective (a pair only when it beats the shared layout), reported in
 * JSON; without it no search and the same chosen layout. */
START_TEST(test_plan_disaggregate)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("a100-80g", &hw, &err), SP_OK);
    sp_workload w = {8, 64, 16};
    for (int obj = 0; obj < 3; obj++) {
        sp_plan_opts o;
        sp_plan_opts_init(&o);
        o.objective = (sp_plan_objective)obj;
        o.frontier = o.rivals = 0;
        sp_plan *a, *b;
        ck_assert_int_eq(sp_plan_solve(&m, &hw, 4, &w, &o, &a), SP_OK);
        o.disaggregate = 1;
        ck_assert_int_eq(sp_plan_solve(&m, &hw, 4, &w, &o, &b), SP_OK);
        ck_assert(!a->groups.searched && b->groups.searched && b->groups.found);
        ck_assert(a->has_chosen && b->has_chosen);
        double sa = b->groups.shared_objective, gb = b->groups.objective;
        ck_assert(sa < INFINITY);
        if (b->groups.chosen) {
            ck_assert(gb < sa && sp_layout_disaggregated(&b->chosen.layout) && b->n_stages == 0);
        } else {
            ck_assert(!memcmp(&a->chosen.layout, &b->chosen.layout, sizeof a->chosen.layout));
        }
        json_t *j = sp_plan_to_json(b), *ja = sp_plan_to_json(a);
        ck_assert_ptr_nonnull(json_object_get(json_object_get(j, "groups"), "best"));
        ck_assert_ptr_null(json_object_get(ja, "groups"));
        json_decref(j);
        json_decref(ja);
        sp_plan_free(a);
        sp_plan_free(b);
    }
    /* where the groups are not searched, the flag is refused by name */
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.disaggregate = 1;
    int chips[1] = {4};
    int64_t batches[1] = {8};
    sp_plan *f = NULL;
    ck_assert_int_eq(sp_plan_frontier(&m, &hw, chips, 1, batches, 1, &w, &o, &f), SP_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "separate prefill and decode groups"));
    sp_layout l;
    ck_assert_int_eq(sp_autoconfig(&m, &hw, 4, 8, &w, &o, &l), SP_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "separate prefill and decode groups"));
}
END_TEST

static long n_dec_alone, n_dec_alone_pf, n_dec_alone_fail;

/* The lowering's checks that read none of the prefill's layouts
 * (spi_lower_failed_decode_alone; bound_group rejects a decode group on
 * one): where one fails, the same call fails for every prefill (FFN,
 * attention) of the same 1D or 2D storage (the planner's groups), in
 * either phase, and no passing call reports one.  Random models (MoE
 * every fourth), meshes, stages, replicas, micro-batches, experts, prefill
 * chunks and token passes, batches and stages (some out of range). */
START_TEST(test_decode_alone_checks)
{
    rng_state = 31337u + 7919u * (unsigned)_i;
    sp_model m;
    random_model(&m);
    if (_i % 4 == 3) moe_model(&m);
    static const int dims[] = {1, 2, 4, 3};
    static const int64_t batches[] = {1, 2, 4, 8, 12, 16, 6};
    for (int t = 0; t < 400; t++) {
        sp_layout l;
        sp_layout_init(&l);
        for (int a = 0; a < 3; a++) l.mesh[a] = dims[rnd(4)];
        l.stages = 1 + (int)rnd(3);
        l.replicas = 1 + (int)rnd(2);
        l.microbatches = 1 + (int)rnd(4);
        if (m.n_experts > 0) l.experts = rnd(2) ? l.replicas : 1;
        l.prefill_chunk = rnd(3) ? 0 : 1 << rnd(3);
        l.prefill_tokens = rnd(4) ? 0 : 4 << rnd(2);
        l.weights = rnd(2) ? SP_DT_BF16 : SP_DT_INT8;
        sp_ffn_layout dcf = (sp_ffn_layout)rnd(SP_FL_COUNT);
        l.phase[SP_PHASE_DECODE].ffn = dcf;
        l.phase[SP_PHASE_DECODE].attn = (sp_attn_layout)rnd(SP_AL_COUNT);
        int64_t prompt = 8 << rnd(3), gen = 1 + rnd(4);
        sp_shape sh = {.batch = batches[rnd(7)], .max_context = prompt + gen, .act_dtype = SP_DT_BF16};
        sp_phase ph = (sp_phase)rnd(SP_PHASE_COUNT);
        if (ph == SP_PHASE_PREFILL) sh.q_len = sh.context = prompt;
        else sh.q_len = 1, sh.context = prompt + 1 + rnd((unsigned)gen);
        int stage = (int)rnd((unsigned)l.stages + 1);   /* one past the last: refused */
        /* the prefill's layouts of the decode's storage, the first as the call's */
        sp_layout v[2 * SP_FL_COUNT];
        int nv = 0;
        for (int f = 0; f < SP_FL_COUNT; f++)
            for (int a = 0; a < SP_AL_COUNT; a++)
                if (sp_ffn_layout_is_1d((sp_ffn_layout)f) == sp_ffn_layout_is_1d(dcf)) {
                    v[nv] = l;
                    v[nv].phase[SP_PHASE_PREFILL].ffn = (sp_ffn_layout)f;
                    v[nv++].phase[SP_PHASE_PREFILL].attn = (sp_attn_layout)a;
                }
        int first = (int)rnd((unsigned)nv);
        sp_status st = sp_lower_check_key(&m, &v[first], ph, &sh, stage, NULL);
        int alone = spi_lower_failed_decode_alone();
        if (st == SP_OK) {
            ck_assert_int_eq(alone, 0);
            continue;
        }
        ck_assert_int_eq(st, SP_EINVAL);
        n_dec_alone_fail++;
        if (!alone) continue;
        n_dec_alone++;
        n_dec_alone_pf += ph == SP_PHASE_PREFILL;
        for (int k = 0; k < nv; k++) {
            ck_assert_msg(sp_lower_check(&m, &v[k], ph, &sh, stage) == SP_EINVAL,
                          "a check of %s that reads no prefill layout failed with prefill %d/%d, not with %d/%d",
                          sp_phase_name(ph), v[first].phase[0].ffn, v[first].phase[0].attn, v[k].phase[0].ffn,
                          v[k].phase[0].attn);
        }
    }
}
END_TEST

START_TEST(test_decode_alone_summary)
{
    printf("decode-alone checks: %ld of %ld failed checks read no prefill layout (%ld in prefill), each "
           "failing for every prefill layout\n", n_dec_alone, n_dec_alone_fail, n_dec_alone_pf);
    ck_assert_int_gt(n_dec_alone, 1000);   /* not vacuous */
    ck_assert_int_gt(n_dec_alone_pf, 100);
    ck_assert_int_lt(n_dec_alone, n_dec_alone_fail);   /* some failures read the prefill's layout */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("milp");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_milp_equals_enumeration, 0, 60);
    tcase_add_loop_test(tc, test_union_frontier_equals_enumeration, 0, 8);
    tcase_add_test(tc, test_equal_costs_tie);
    tcase_add_test(tc, test_summary);
    TCase *t6 = tcase_create("prune");
    tcase_set_timeout(t6, 600);
    tcase_add_loop_test(t6, test_prune_equals_exhaustive, 0, 48);
    tcase_add_loop_test(t6, test_prune_bundled, 0, 4);
    tcase_add_loop_test(t6, test_prune_split_wins, 0, 8);
    tcase_add_loop_test(t6, test_prune_rivals, 0, 24);
    tcase_add_loop_test(t6, test_prune_threads, 0, 2);
    tcase_add_test(t6, test_prune_summary);
    tcase_add_loop_test(t6, test_decode_alone_checks, 0, 16);
    tcase_add_test(t6, test_decode_alone_summary);
    suite_add_tcase(s, t6);
    TCase *t3 = tcase_create("pipelines");
    tcase_set_timeout(t3, 600);
    tcase_add_loop_test(t3, test_split_equals_enumeration, 0, 8);
    tcase_add_test(t3, test_split_program_size);
    tcase_add_test(t3, test_split_bounds_with_space);
    tcase_add_test(t3, test_split_threads);
    tcase_add_test(t3, test_split_bound_below_splits);
    tcase_add_test(t3, test_split_wins);
    tcase_add_test(t3, test_split_summary);
    TCase *t5 = tcase_create("hetero");
    tcase_set_timeout(t5, 600);
    tcase_add_loop_test(t5, test_hetero_equals_enumeration, 0, 6);
    tcase_add_test(t5, test_hetero_program_size);
    tcase_add_test(t5, test_hetero_wins_program);
    tcase_add_test(t5, test_hetero_summary);
    suite_add_tcase(s, t5);
    suite_add_tcase(s, t3);
    suite_add_tcase(s, tc);
    TCase *t4 = tcase_create("groups");
    tcase_set_timeout(t4, 600);
    tcase_add_loop_test(t4, test_groups_equal_brute_force, 0, (int)(sizeof group_cases / sizeof group_cases[0]));
    tcase_add_test(t4, test_plan_disaggregate);
    suite_add_tcase(s, t4);
    TCase *t2 = tcase_create("api");
    tcase_set_timeout(t2, 600);
    tcase_add_test(t2, test_autoconfig_deterministic);
    tcase_add_test(t2, test_infeasible_reports_min_chips);
    tcase_add_test(t2, test_min_chips_targets);
    tcase_add_test(t2, test_chip_counts);
    tcase_add_test(t2, test_json_keys);
    tcase_add_test(t2, test_bad_args);
    suite_add_tcase(s, t2);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
