/*
 * plan_groups.c: separate prefill and decode chip groups in the planner
 * (sp_plan_opts.disaggregate; doc/planner.md, "Separate groups").
 *
 * DATA
 *   P          prefill-group candidates: every layout of the space on Np
 *              chips (for every Np the topology allows with N − Np allowed
 *              too) with both phases in prefill's layout, priced as a
 *              prefill group (sp_cost_eval_group: the prompt alone) and
 *              fitting in memory; pf_p its prefill_s, n_p its chips.
 *   D          decode-group candidates: likewise on Nd chips, priced as a
 *              decode group (the generated tokens alone); dc_d its decode_s,
 *              st_d its decode step, n_d its chips, xb_d a lower bound on
 *              the KV transfer into it from any prefill group
 *              (sp_cost_kv_xfer_bound).
 *   K          the values of the keys both groups share (weights, kv,
 *              micro-batches, placement, experts, capacity); k(c) a
 *              candidate's.
 *
 * VARIABLES
 *   x_p ∈ {0,1} (p ∈ P), y_d ∈ {0,1} (d ∈ D); t ≥ 0 (period measures only)
 *
 * CONSTRAINTS
 *   Σ_p x_p = 1, Σ_d y_d = 1                      one group of each
 *   Σ_p n_p x_p + Σ_d n_d y_d = N                 the chips split
 *   Σ_{p: k(p)=k} x_p − Σ_{d: k(d)=k} y_d = 0  ∀k  the shared keys agree
 *   t ≥ Σ pf_p x_p + Σ xb_d y_d,
 *   t ≥ Σ (dc_d + xb_d) y_d                       period ≥ max(pf, dc) + xfer bound
 *   bound rows (the latency bound, the throughput target) on the same terms
 *   x_p = 0, y_d = 0 for each group whose pairs are all priced (below)
 *
 * OBJECTIVE (a measure the plan's objective is monotone in, without the
 * pair's own transfer beyond xb_d: a lower bound of the pair's price)
 *   latency total      Σ pf x + Σ (dc + xb) y     (one batch: prefill + transfer + decode)
 *   latency decode     Σ st y;  latency prefill  Σ pf x
 *   throughput, cost   t                          (steady state: a batch per period)
 *   cost per phase     as the latency of its phase
 *
 * SOLVE (exact)
 *   The program's optimum is a lower bound on every pair of groups whose
 *   columns are still free.  Repeat: solve; stop when the bound, as the
 *   objective, is no better than the best priced pair (the incumbent);
 *   otherwise, for the chosen prefill group p, price exactly every pair
 *   (p, d) the program's own terms do not rule out against the incumbent
 *   (sp_cost_eval of sp_layout_disaggregate(p, d): its own KV transfer),
 *   keeping a pair that fits, meets the bounds and beats the incumbent,
 *   and fix x_p = 0: every pair of p is priced or cannot win, and the
 *   incumbent only improves.  Likewise for the chosen decode group d.
 *   Then every group whose own term plus the least term of the other
 *   side's free groups cannot beat the incumbent is fixed at 0 too.  So
 *   the answer is the best pair under the cost model's group pricing; the
 *   program keeps |P| + |D| (+1) columns and its rows, never |P| · |D|
 *   (column bounds change, no row is added), and each solve retires two
 *   groups.
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

void spi_groups_free(spi_groups *g)
{
    free(g->pf);
    free(g->dc);
    memset(g, 0, sizeof *g);
}

/* the keys both groups share, as one comparable tuple */
static int same_shared(const sp_layout *a, const sp_layout *b)
{
    return a->weights == b->weights && a->kv == b->kv && a->microbatches == b->microbatches &&
           !memcmp(a->placement, b->placement, sizeof a->placement) && a->experts == b->experts &&
           a->capacity == b->capacity;
}

static sp_status push(spi_gcand **v, int *n, int *cap, const spi_gcand *c)
{
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 256;
        spi_gcand *nv = realloc(*v, (size_t)nc * sizeof *nv);
        if (!nv) return spi_fail(SP_ENOMEM, "planner: out of memory for %d group candidates", nc);
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = *c;
    return SP_OK;
}

/* The chip counts a group may take: allowed by the topology, the other
 * group's count too; on a cluster of several nodes the prefill group fills
 * whole nodes (sp_layout_check's rule for separate groups). */
static int group_ok(const sp_hw *hw, const int *cnt, int k, int chips, int n, sp_phase ph)
{
    int other = 0;
    for (int i = 0; i < k; i++) other |= cnt[i] == chips - n;
    if (!other) return 0;
    int np = ph == SP_PHASE_PREFILL ? n : chips - n;
    if (hw->topo == SP_TOPO_CLUSTER && hw->chips_per_node > 0 && chips > hw->chips_per_node &&
        np % hw->chips_per_node)
        return 0;
    return 1;
}

sp_status spi_groups_cands(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w, const sp_plan_opts *o,
                           spi_groups *g)
{
    memset(g, 0, sizeof *g);
    if (chips < 2) return SP_OK;
    int cnt[4096];
    int k = sp_plan_chip_counts(hw, 1, chips - 1, cnt, 4096);
    int capp = 0, capd = 0;
    sp_status st = SP_OK;
    for (int i = 0; i < k && st == SP_OK; i++)
        for (int ph = 0; ph < SP_PHASE_COUNT && st == SP_OK; ph++) {
            if (!group_ok(hw, cnt, k, chips, cnt[i], (sp_phase)ph)) continue;
            spi_space s;
            spi_space_init(&s, m, hw);
            spi_space_narrow(&s, o);
            s.tie_phases = 1;   /* a group runs one phase: its layout is that phase's */
            s.decode_group = ph == SP_PHASE_DECODE;
            sp_workload wg = {w->batch, w->prompt, ph == SP_PHASE_DECODE ? w->gen : 0};
            st = spi_space_add(&s, cnt[i], &wg, o->weights, o->kv);
            g->eval_s += s.eval_s;
            g->priced += s.priced;
            for (int c = 0; c < s.n && st == SP_OK; c++) {
                const spi_cand *x = &s.c[c];
                if (x->mem_over > 0) continue;
                /* a decode group's total_s is its decode_s (no prefill) */
                spi_gcand gc = {x->layout, cnt[i], ph == SP_PHASE_DECODE ? x->total_s : x->prefill_s, x->decode_step_s,
                                0, -1};
                if (ph == SP_PHASE_DECODE) {
                    double t0 = now_s();
                    /* a decode layout whose cache no prefill group could fill (none here) bounds nothing */
                    if (sp_cost_kv_xfer_bound(m, hw, &x->layout, w->batch, w->prompt, &gc.xb) != SP_OK) gc.xb = 0;
                    g->eval_s += now_s() - t0;
                    st = push(&g->dc, &g->nd, &capd, &gc);
                } else {
                    st = push(&g->pf, &g->np, &capp, &gc);
                }
            }
            spi_space_free(&s);
        }
    /* the shared keys' values, numbered in order of first appearance */
    for (int side = 0; side < 2 && st == SP_OK; side++) {
        spi_gcand *v = side ? g->dc : g->pf;
        int n = side ? g->nd : g->np;
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < g->nkeys && v[i].key < 0; j++) {
                const spi_gcand *r = g->key_of[j] < 0 ? &g->dc[-g->key_of[j] - 1] : &g->pf[g->key_of[j]];
                if (same_shared(&v[i].layout, &r->layout)) v[i].key = j;
            }
            if (v[i].key >= 0) continue;
            if (g->nkeys == (int)SPI_ARRAY_LEN(g->key_of)) {
                st = spi_fail(SP_ENOTSUP, "planner: more than %d values of the keys separate groups share",
                              (int)SPI_ARRAY_LEN(g->key_of));
                break;
            }
            g->key_of[g->nkeys] = side ? -i - 1 : i;
            v[i].key = g->nkeys++;
        }
    }
    if (st != SP_OK) spi_groups_free(g);
    return st;
}

/* The measure the program minimises for o's objective (see the top). */
typedef enum { M_SUM, M_PF, M_DC, M_PERIOD } measure;
static measure measure_of(const sp_plan_opts *o)
{
    sp_plan_latency lat = o->latency_metric;
    if (o->objective == SP_PLAN_MAX_THROUGHPUT) return M_PERIOD;
    if (o->objective == SP_PLAN_MIN_COST && (o->cost_metric == SP_PLAN_COST_TOTAL || lat == SP_PLAN_LAT_TOTAL))
        return M_PERIOD;
    return lat == SP_PLAN_LAT_DECODE ? M_DC : lat == SP_PLAN_LAT_PREFILL ? M_PF : M_SUM;
}

/* The plan's objective (smaller is better) of a priced layout on `chips`,
 * as the planner ranks every candidate (spi_cand_objective). */
static double objective_of(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                           const sp_plan_opts *o, const spi_cand *c)
{
    spi_space s;
    spi_space_init(&s, m, hw);
    s.n_inst = 1;
    s.inst[0] = (spi_inst){chips, w->batch, *w};
    return spi_cand_objective(&s, c, o);
}

double spi_groups_objective(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                            const sp_plan_opts *o, const sp_cost *c)
{
    spi_cand x;
    memset(&x, 0, sizeof x);
    x.prefill_s = c->prefill_s;
    x.decode_step_s = c->decode_step_s;
    x.total_s = c->total_s;
    x.tokens_per_s = c->tokens_per_s;
    x.cost_total = c->cost_chip_s_per_token;
    return objective_of(m, hw, chips, w, o, &x);
}

int spi_groups_admissible(const sp_cost *c, const sp_plan_opts *o)
{
    double lat = o->latency_metric == SP_PLAN_LAT_DECODE    ? c->decode_step_s
                 : o->latency_metric == SP_PLAN_LAT_PREFILL ? c->prefill_s
                                                            : c->total_s;
    return c->feasible && (o->max_latency_s <= 0 || lat <= o->max_latency_s) &&
           (o->min_tokens_per_s <= 0 || c->tokens_per_s >= o->min_tokens_per_s);
}

/* The objective a measure value v bounds from below (the pair's transfer beyond the bound left out). */
static double bound_objective(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                              const sp_plan_opts *o, measure k, double v)
{
    spi_cand x;
    memset(&x, 0, sizeof x);
    double gen = (double)w->batch * (double)w->gen;
    switch (k) {
    case M_PF: x.prefill_s = v; break;
    case M_DC: x.decode_step_s = v; break;
    case M_SUM: x.total_s = v; break;
    case M_PERIOD:
        x.tokens_per_s = v > 0 ? gen / v : INFINITY;
        x.cost_total = (double)chips * v / gen;
        break;
    }
    return objective_of(m, hw, chips, w, o, &x);
}

sp_status spi_groups_price(sp_cost_cache *cache, const sp_model *m, const sp_hw *hw, const sp_workload *w,
                           const spi_gcand *pf, const spi_gcand *dc, sp_layout *l, sp_cost *c)
{
    SP_CHECK(sp_layout_disaggregate(&pf->layout, &dc->layout, l));
    sp_cost_opts co;
    sp_cost_opts_init(&co);
    co.quiet = 1;
    co.cache = cache;
    return sp_cost_eval(m, hw, l, w, &co, c);
}

/* Whether pair (p, d) may still beat the incumbent inc: the chips split, the
 * shared keys agree, and the program's terms (its measure and bound rows)
 * admit it with an objective below inc. */
static int pair_open(const spi_groups *g, const sp_plan_opts *o, int chips, const sp_workload *w, measure k,
                     const sp_model *m, const sp_hw *hw, int p, int d, double inc)
{
    const spi_gcand *a = &g->pf[p], *b = &g->dc[d];
    if (a->chips + b->chips != chips || a->key != b->key) return 0;
    double pside = a->t + b->xb, dside = b->t + b->xb, period = pside > dside ? pside : dside;
    if (o->min_tokens_per_s > 0 && period > (double)w->batch * (double)w->gen / o->min_tokens_per_s) return 0;
    if (o->max_latency_s > 0) {
        double lat = o->latency_metric == SP_PLAN_LAT_DECODE    ? b->t2
                     : o->latency_metric == SP_PLAN_LAT_PREFILL ? a->t
                                                                : a->t + b->t + b->xb;
        if (lat > o->max_latency_s) return 0;
    }
    double v = k == M_SUM ? a->t + b->t + b->xb : k == M_PF ? a->t : k == M_DC ? b->t2 : period;
    return bound_objective(m, hw, chips, w, o, k, v) < inc;
}

/* Prices pair (p, d) exactly; keeps it in out when it fits, meets the bounds and beats the incumbent. */
static sp_status price_pair(sp_cost_cache *cache, const spi_groups *g, const sp_model *m, const sp_hw *hw, int chips,
                            const sp_workload *w, const sp_plan_opts *o, int p, int d, spi_groups_out *out)
{
    sp_layout l;
    sp_cost c;
    double te = now_s();
    sp_status ps = spi_groups_price(cache, m, hw, w, &g->pf[p], &g->dc[d], &l, &c);
    out->eval_s += now_s() - te;
    out->priced++;
    if (ps != SP_OK) return ps == SP_EINVAL ? SP_OK : ps;   /* a pair that does not apply */
    if (!spi_groups_admissible(&c, o)) return SP_OK;
    double v = spi_groups_objective(m, hw, chips, w, o, &c);
    if (v < out->objective) {
        out->objective = v;
        out->found = 1;
        out->layout = l;
        out->cost = c;
        out->pf = p;
        out->dc = d;
    }
    return SP_OK;
}

/* Fixes at 0 every free group whose pairs cannot beat the incumbent inc by
 * a bound of its own side: its term plus the least term any free group of
 * the other side adds (exact: each pair's measure is at least that).
 * O(|P| + |D|); returns the groups fixed. */
static int retire_hopeless(glp_prob *P, const spi_groups *g, const sp_model *m, const sp_hw *hw, int chips,
                           const sp_workload *w, const sp_plan_opts *o, measure k, double inc)
{
    const int np = g->np, nd = g->nd;
    double pf_min = INFINITY, xb_min = INFINITY, dcx_min = INFINITY;
    for (int p = 0; p < np; p++)
        if (glp_get_col_type(P, 1 + p) != GLP_FX && g->pf[p].t < pf_min) pf_min = g->pf[p].t;
    for (int d = 0; d < nd; d++)
        if (glp_get_col_type(P, 1 + np + d) != GLP_FX) {
            if (g->dc[d].xb < xb_min) xb_min = g->dc[d].xb;
            if (g->dc[d].t + g->dc[d].xb < dcx_min) dcx_min = g->dc[d].t + g->dc[d].xb;
        }
    if (isinf(pf_min) || isinf(xb_min)) return 0;
    int fixed = 0;
    for (int p = 0; p < np && k != M_DC; p++) {
        if (glp_get_col_type(P, 1 + p) == GLP_FX) continue;
        double v = k == M_SUM ? g->pf[p].t + dcx_min : k == M_PF ? g->pf[p].t : g->pf[p].t + xb_min;
        if (!(bound_objective(m, hw, chips, w, o, k, v) < inc)) glp_set_col_bnds(P, 1 + p, GLP_FX, 0, 0), fixed++;
    }
    for (int d = 0; d < nd && k != M_PF; d++) {
        if (glp_get_col_type(P, 1 + np + d) == GLP_FX) continue;
        const spi_gcand *b = &g->dc[d];
        double v = k == M_SUM ? b->t + b->xb + pf_min : k == M_DC ? b->t2 : (b->t > pf_min ? b->t : pf_min) + b->xb;
        if (!(bound_objective(m, hw, chips, w, o, k, v) < inc)) glp_set_col_bnds(P, 1 + np + d, GLP_FX, 0, 0), fixed++;
    }
    return fixed;
}

sp_status spi_groups_solve(const spi_groups *g, const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                           const sp_plan_opts *o, spi_groups_out *out)
{
    memset(out, 0, sizeof *out);
    out->objective = INFINITY;
    out->proven = 1;
    if (!g->np || !g->nd) return SP_OK;
    const measure k = measure_of(o);
    const int period = k == M_PERIOD, np = g->np, nd = g->nd;
    /* one pricing cache for every pair priced (sp_cost_eval would make one per call) */
    sp_cost_cache *cache;
    SP_CHECK(sp_cost_cache_create(&cache));
    int holds = 0;
    sp_status ge = spi_glpk_env_get(&holds);
    if (ge != SP_OK) {
        sp_cost_cache_free(cache);
        return ge;
    }
    double t0 = now_s();
    int term = glp_term_out(GLP_OFF);
    glp_prob *P = glp_create_prob();
    glp_set_obj_dir(P, GLP_MIN);
    int n = np + nd + period;
    glp_add_cols(P, n);
    for (int j = 1; j <= np + nd; j++) glp_set_col_kind(P, j, GLP_BV);
    if (period) glp_set_col_bnds(P, n, GLP_LO, 0, 0);
    int *ind = malloc((size_t)(n + 1) * sizeof *ind);
    double *val = malloc((size_t)(n + 1) * sizeof *val);
    sp_status st = SP_OK;
    if (!ind || !val) {
        st = spi_fail(SP_ENOMEM, "planner: out of memory");
        goto done;
    }
    /* one row from (ind, val)[1..cnt] */
#define ROW(type, lo, hi)                                                                                            \
    do {                                                                                                             \
        int r_ = glp_add_rows(P, 1);                                                                                 \
        glp_set_mat_row(P, r_, cnt, ind, val);                                                                       \
        glp_set_row_bnds(P, r_, type, lo, hi);                                                                       \
    } while (0)
    int cnt;
    /* one of each; the chips */
    for (int side = 0; side < 3; side++) {
        cnt = 0;
        for (int p = 0; p < np && side != 1; p++) ind[++cnt] = 1 + p, val[cnt] = side == 2 ? g->pf[p].chips : 1;
        for (int d = 0; d < nd && side != 0; d++) ind[++cnt] = 1 + np + d, val[cnt] = side == 2 ? g->dc[d].chips : 1;
        ROW(GLP_FX, side == 2 ? chips : 1, side == 2 ? chips : 1);
    }
    /* the shared keys agree */
    for (int key = 0; key < g->nkeys; key++) {
        cnt = 0;
        for (int p = 0; p < np; p++)
            if (g->pf[p].key == key) ind[++cnt] = 1 + p, val[cnt] = 1;
        for (int d = 0; d < nd; d++)
            if (g->dc[d].key == key) ind[++cnt] = 1 + np + d, val[cnt] = -1;
        ROW(GLP_FX, 0, 0);
    }
    /* terms: [0] prefill side + transfer bound, [1] decode side + transfer bound (period rows),
     * the objective, the bound rows */
    double max_lat = o->max_latency_s > 0 ? o->max_latency_s : INFINITY;
    double max_period = o->min_tokens_per_s > 0 ? (double)w->batch * (double)w->gen / o->min_tokens_per_s : INFINITY;
    for (int row = 0; row < 2; row++) {
        /* row 0: Σ pf x + Σ xb y; row 1: Σ (dc + xb) y */
        if (!period && isinf(max_period)) break;
        cnt = 0;
        for (int p = 0; p < np && row == 0; p++) ind[++cnt] = 1 + p, val[cnt] = g->pf[p].t;
        for (int d = 0; d < nd; d++) ind[++cnt] = 1 + np + d, val[cnt] = g->dc[d].xb + (row ? g->dc[d].t : 0);
        if (period) {
            ind[++cnt] = n, val[cnt] = -1;
            ROW(GLP_UP, 0, 0);
            cnt--;
        }
        if (!isinf(max_period)) ROW(GLP_UP, 0, max_period);
    }
    if (!isinf(max_lat)) {   /* the latency metric's terms */
        cnt = 0;
        sp_plan_latency lm = o->latency_metric;
        for (int p = 0; p < np && lm != SP_PLAN_LAT_DECODE; p++) ind[++cnt] = 1 + p, val[cnt] = g->pf[p].t;
        for (int d = 0; d < nd && lm != SP_PLAN_LAT_PREFILL; d++)
            ind[++cnt] = 1 + np + d, val[cnt] = lm == SP_PLAN_LAT_DECODE ? g->dc[d].t2 : g->dc[d].t + g->dc[d].xb;
        ROW(GLP_UP, 0, max_lat);
    }
    for (int p = 0; p < np; p++) glp_set_obj_coef(P, 1 + p, k == M_SUM || k == M_PF ? g->pf[p].t : 0);
    for (int d = 0; d < nd; d++)
        glp_set_obj_coef(P, 1 + np + d, k == M_SUM ? g->dc[d].t + g->dc[d].xb : k == M_DC ? g->dc[d].t2 : 0);
    if (period) glp_set_obj_coef(P, n, 1);
    out->rows = glp_get_num_rows(P);
    out->cols = glp_get_num_cols(P);
    for (;;) {
        if (o->time_limit_ms > 0 && (now_s() - t0) * 1e3 > o->time_limit_ms) {
            out->proven = 0;
            break;
        }
        /* the relaxation from the last basis (a cut adds one row: the dual simplex restores it), then
         * branch and bound on that optimal basis */
        glp_smcp sm;
        glp_init_smcp(&sm);
        sm.msg_lev = GLP_MSG_OFF;
        sm.meth = GLP_DUALP;
        int lp = glp_simplex(P, &sm);
        if (lp != 0 && (lp = glp_simplex(P, NULL)) != 0) {   /* a lost basis: from scratch */
            st = spi_fail(SP_ESOLVER, "planner: the groups' program: glp_simplex failed (code %d)", lp);
            break;
        }
        sp_plan_result res;
        if (glp_get_status(P) == GLP_NOFEAS) break;   /* every pair priced or cut off */
        glp_iocp parm;
        glp_init_iocp(&parm);
        parm.presolve = GLP_OFF;
        parm.msg_lev = GLP_MSG_OFF;
        parm.tm_lim = o->time_limit_ms > 0 ? o->time_limit_ms : 10000;
        int ret = glp_intopt(P, &parm);
        out->solved++;
        if (ret == GLP_ENOPFS || ret == GLP_ENODFS) res = SP_PLAN_INFEASIBLE;
        else if ((st = spi_glpk_result(ret, glp_mip_status(P), &res)) != SP_OK) break;
        if (res == SP_PLAN_INFEASIBLE) break;   /* every pair priced or cut off */
        if (res != SP_PLAN_OPTIMAL) {
            out->proven = 0;
            if (res == SP_PLAN_TIME_LIMIT) break;
        }
        double lb = bound_objective(m, hw, chips, w, o, k, glp_mip_obj_val(P));
        if (res == SP_PLAN_OPTIMAL && !(lb < out->objective)) break;   /* no pair left can beat the incumbent */
        int pc = -1, dc = -1;
        for (int p = 0; p < np; p++)
            if (glp_mip_col_val(P, 1 + p) > 0.5) pc = p;
        for (int d = 0; d < nd; d++)
            if (glp_mip_col_val(P, 1 + np + d) > 0.5) dc = d;
        if (pc < 0 || dc < 0) {
            st = spi_fail(SP_EINTERNAL, "planner: the groups' program chose no pair");
            break;
        }
        /* every pair of the chosen prefill group, then of the chosen decode group, that the
         * program's terms do not rule out: priced, then the group's column fixed at 0 */
        for (int side = 0; side < 2 && st == SP_OK; side++) {
            int fix = side ? dc : pc, nother = side ? np : nd;
            if (glp_get_col_type(P, 1 + (side ? np : 0) + fix) == GLP_FX) continue;
            for (int j = -1; j < nother && st == SP_OK; j++) {
                /* the chosen pair first (the least bound), then the others in order */
                int p = side ? (j < 0 ? pc : j) : pc, d = side ? dc : (j < 0 ? dc : j);
                if (j >= 0 && (side ? p == pc : d == dc)) continue;
                if (glp_get_col_type(P, 1 + (side ? p : np + d)) == GLP_FX) continue;   /* priced with it already */
                if (j < 0 && side) continue;   /* priced on side 0 */
                if (!pair_open(g, o, chips, w, k, m, hw, p, d, out->objective)) continue;
                st = price_pair(cache, g, m, hw, chips, w, o, p, d, out);
            }
            glp_set_col_bnds(P, 1 + (side ? np : 0) + fix, GLP_FX, 0, 0);
            out->retired++;
        }
        /* and every group its own side's bound rules out against the incumbent */
        if (out->found) out->retired += retire_hopeless(P, g, m, hw, chips, w, o, k, out->objective);
        if (res != SP_PLAN_OPTIMAL) break;
    }
#undef ROW
done:
    out->glpk_s += now_s() - t0 - out->eval_s;
    glp_delete_prob(P);
    glp_term_out(term);
    spi_glpk_env_put(&holds);
    sp_cost_cache_free(cache);
    free(ind);
    free(val);
    return st;
}
