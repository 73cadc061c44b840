/*
 * fleet.c: fleets sized for a request rate (sp_fleet.h; doc/planner.md, "Fleets").
 *
 * NAME
 *   the fleet program
 *
 * DATA (building blocks, priced by the planner's space and the cost model)
 *   J          pool candidates: (role, kind, chips n_j, batch b_j) with the
 *              layout that lets one instance take the most requests/s within
 *              the targets (fleet_candidates below); at most one per
 *              (role, kind, chips, batch), dominated ones dropped (exact:
 *              same role and kind, no more requests/s on no fewer chips).
 *   λ_j        admissible requests/s of one instance (cap and targets, sp_fleet.h)
 *   p_j        n_j · cost_per_chip_hour (objective cost) or n_j (chips)
 *   U_j        instances of j worth considering: ceil(R / λ_j), and no more
 *              than the kind's available chips hold
 *   A_k        chips of kind k available (no row when unlimited)
 *
 * VARIABLES (3·|J| columns)
 *   N_j ∈ Z+   instances of candidate j
 *   y_j ∈ {0,1} candidate j is used (a pool)
 *   r_j ≥ 0    requests/s candidate j's pool serves
 *
 * CONSTRAINTS (2·|J| + 2 + K + 3 rows)
 *   r_j − λ_j N_j ≤ 0                     ∀j   each instance within its admissible rate
 *   N_j − U_j y_j ≤ 0                     ∀j   a pool's instances only if it is used
 *   Σ_{colocated, prefill} r_j = R             every request is prefilled once
 *   Σ_prefill r_j − Σ_decode r_j = 0           ... and decoded where it was not
 *                                              colocated (any prefill instance
 *                                              may hand to any decode instance:
 *                                              the handoff rule is per side)
 *   Σ_{j of kind k} n_j N_j ≤ A_k         ∀k   available chips
 *   Σ_{j of role o} y_j ≤ 1 (free)        ∀o   homogeneous alternative only
 *
 * OBJECTIVE
 *   min Σ_j p_j N_j  (+ 1e-9 of the other measure, to break ties toward it)
 *
 * ALTERNATIVES (one solve each, column bounds and the role rows)
 *   colocated only / disaggregated only (whichever the best fleet is not),
 *   homogeneous (one candidate per role: the role rows bounded by 1) when
 *   the best fleet mixes, and each chip kind alone.
 *
 * SOLVER
 *   glp_intopt with its presolver, tm_lim = opts.time_limit_ms; its return
 *   code and glp_mip_status map to sp_plan_result (spi_glpk_result).
 */
#include <glpk.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sp_fleet.h"
#include "sp_cost.h"
#include "spi_common.h"
#include "spi_plan.h"
#include "spi_fleet.h"

static const char *const role_names[SP_FLEET_ROLE_COUNT] = {"colocated", "prefill", "decode"};
_Static_assert(sizeof role_names / sizeof role_names[0] == SP_FLEET_ROLE_COUNT, "role names");
static const char *const obj_names[SP_FLEET_OBJECTIVE_COUNT] = {"cost", "chips"};
_Static_assert(sizeof obj_names / sizeof obj_names[0] == SP_FLEET_OBJECTIVE_COUNT, "objective names");

const char *sp_fleet_role_name(sp_fleet_role r)
{
    return (unsigned)r < SP_FLEET_ROLE_COUNT ? role_names[r] : "?";
}

const char *sp_fleet_objective_name(sp_fleet_objective o)
{
    return (unsigned)o < SP_FLEET_OBJECTIVE_COUNT ? obj_names[o] : "?";
}

sp_status sp_fleet_objective_parse(const char *s, sp_fleet_objective *out)
{
    for (int i = 0; s && i < SP_FLEET_OBJECTIVE_COUNT; i++)
        if (!strcmp(s, obj_names[i])) {
            *out = (sp_fleet_objective)i;
            return SP_OK;
        }
    return spi_fail(SP_EINVAL, "fleet objective \"%s\": expected cost or chips", s ? s : "");
}

void sp_fleet_opts_init(sp_fleet_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->objective = SP_FLEET_MIN_COST;
    o->util_cap = 0.8;
    o->max_instance_chips = 8;
    o->max_batch = 256;
    o->colocated = 1;
    o->disaggregated = 1;
    o->weights = SP_PLAN_W_AUTO;
    o->kv = SP_DT_BF16;
    o->time_limit_ms = 10000;
    o->alternatives = 1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the load model (sp_fleet.h) ---------------------------------------------- */

double sp_fleet_batch_wait(double lambda, double S, int64_t b)
{
    if (!(lambda >= 0) || !(S > 0) || b < 1) return INFINITY;
    double rho = lambda * S / (double)b;
    if (rho >= 1) return INFINITY;
    return S / 2 + rho * S / (2 * (double)b * (1 - rho));
}

double sp_fleet_slot_wait(double lambda, double H, int64_t b)
{
    if (!(lambda >= 0) || !(H > 0) || b < 1) return INFINITY;
    double a = lambda * H;   /* offered load in slots */
    if (a >= (double)b) return INFINITY;
    /* Erlang B by its stable recursion, then C = B / (1 − ρ(1 − B)) */
    double B = 1;
    for (int64_t k = 1; k <= b; k++) B = a * B / ((double)k + a * B);
    double rho = a / (double)b;
    double C = B / (1 - rho * (1 - B));
    return C * H / ((double)b - a);
}

/* ---- pool candidates ------------------------------------------------------------ */


typedef struct cands {
    int n, cap;
    spi_fleet_cand *c;
} cands;

static sp_status cands_push(cands *cs, const spi_fleet_cand *c)
{
    if (cs->n == cs->cap) {
        int nc = cs->cap ? 2 * cs->cap : 64;
        spi_fleet_cand *p = realloc(cs->c, (size_t)nc * sizeof *p);
        if (!p) return spi_fail(SP_ENOMEM, "fleet: out of memory (%d candidates)", nc);
        cs->c = p;
        cs->cap = nc;
    }
    cs->c[cs->n++] = *c;
    return SP_OK;
}

/* Requests/s one batch server (service S, b per batch, prefill p) may take:
 * ρ ≤ cap and, with a TTFT target, W + p ≤ ttft (W of sp_fleet_batch_wait
 * solved for ρ: ρ/(1−ρ) ≤ 2b(ttft − p − S/2)/S).  0 when none. */
static double batch_max_rate(const sp_fleet_opts *o, double S, double p, int64_t b)
{
    if (!(S > 0)) return 0;
    double rho = o->util_cap;
    if (o->ttft_s > 0) {
        double slack = o->ttft_s - p - S / 2;
        if (slack < 0) return 0;
        double a = 2 * (double)b * slack / S;
        if (a / (1 + a) < rho) rho = a / (1 + a);
    }
    return rho * (double)b / S;
}

/* Requests/s one decode instance (b slots held H) may take: λH/b ≤ cap and,
 * with a TPOT target, the slot wait ≤ tpot (monotone in λ: bisection). */
static double slot_max_rate(const sp_fleet_opts *o, double H, int64_t b)
{
    if (!(H > 0)) return 0;
    double hi = o->util_cap * (double)b / H;
    if (!(o->tpot_s > 0) || sp_fleet_slot_wait(hi, H, b) <= o->tpot_s) return hi;
    double lo = 0;
    for (int it = 0; it < 60; it++) {
        double mid = 0.5 * (lo + hi);
        if (sp_fleet_slot_wait(mid, H, b) <= o->tpot_s) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* KV bytes per chip of layout l's cache of `batch` sequences at the prompt
 * (the lowering's figure, through the cost model's memory sizes). */
static sp_status kv_at_prompt(sp_cost_cache *cache, const sp_model *m, const sp_hw *hw, const sp_layout *l,
                              int64_t batch, int64_t prompt, int64_t *out)
{
    sp_workload w = {.batch = batch, .prompt = prompt, .gen = 0};
    sp_cost_opts co;
    sp_cost_opts_init(&co);
    co.quiet = 1;
    co.cache = cache;
    sp_cost c;
    SP_CHECK(sp_cost_eval(m, hw, l, &w, &co, &c));
    *out = c.mem.kv;
    return SP_OK;
}

/* The best layout per role of every (chips, batch) of one kind and one
 * workload (whole: colocated and decode; prompt only: prefill). */
static sp_status kind_candidates(const sp_model *m, const sp_fleet_kind *k, int kind, const sp_fleet_request *q,
                                 const sp_fleet_opts *o, int whole, int disagg, cands *out, sp_fleet_stats *stats)
{
    const sp_hw *hw = k->hw;
    int counts[64];
    int nc = sp_plan_chip_counts(hw, 1, o->max_instance_chips, counts, 64);
    if (k->available > 0)
        while (nc > 0 && counts[nc - 1] > k->available) nc--;
    sp_plan_opts po;
    sp_plan_opts_init(&po);
    if (!o->full_space) {
        po.tensor_1d = 1;
        po.microbatches_per_stage = 1;
    }
    sp_status st = SP_OK;
    for (int ci = 0; ci < nc && st == SP_OK; ci++) {
        spi_space s;
        spi_space_init(&s, m, hw);
        spi_space_narrow(&s, &po);
        s.tie_phases = !whole;   /* a prefill pool never decodes: its decode layout is moot */
        for (int64_t b = 1; b <= o->max_batch && st == SP_OK; b *= 2) {
            sp_workload w = {.batch = b, .prompt = q->prompt, .gen = whole ? q->gen : 0};
            st = spi_space_add(&s, counts[ci], &w, o->weights, o->kv);
        }
        stats->layouts += s.priced;
        stats->eval_s += s.eval_s;
        /* per instance (batch) and role: the candidate of the largest admissible rate */
        enum { R_COL = 0, R_PRE = 1, R_DEC = 2 };
        int best[64][3];
        double rate[64][3];
        for (int i = 0; i < s.n_inst && i < 64; i++)
            for (int r = 0; r < 3; r++) best[i][r] = -1, rate[i][r] = 0;
        for (int c = 0; c < s.n && st == SP_OK; c++) {
            const spi_cand *x = &s.c[c];
            if (x->mem_over > 0 || x->inst >= 64) continue;
            int64_t b = s.inst[x->inst].batch;
            int tpot_ok = !(o->tpot_s > 0) || x->decode_step_s <= o->tpot_s;
            double lam[3] = {0, 0, 0};
            if (whole && o->colocated && tpot_ok) lam[R_COL] = batch_max_rate(o, x->total_s, x->prefill_s, b);
            if (!whole) lam[R_PRE] = batch_max_rate(o, x->prefill_s, x->prefill_s, b);
            if (whole && disagg && tpot_ok) lam[R_DEC] = slot_max_rate(o, (double)(q->gen + 1) * x->decode_step_s, b);
            for (int r = 0; r < 3; r++)
                if (lam[r] > rate[x->inst][r]) rate[x->inst][r] = lam[r], best[x->inst][r] = c;
        }
        for (int i = 0; i < s.n_inst && i < 64 && st == SP_OK; i++)
            for (int r = 0; r < 3; r++) {
                if (best[i][r] < 0) continue;
                const spi_cand *x = &s.c[best[i][r]];
                spi_fleet_cand c;
                memset(&c, 0, sizeof c);
                c.role = r == R_COL ? SP_FLEET_COLOCATED : r == R_PRE ? SP_FLEET_PREFILL : SP_FLEET_DECODE;
                c.kind = kind;
                c.chips = counts[ci];
                c.batch = s.inst[i].batch;
                c.layout = x->layout;
                c.price = (double)c.chips * hw->chip_cost_per_hour;
                if (c.role == SP_FLEET_COLOCATED) {
                    c.prefill_s = x->prefill_s;
                    c.decode_step_s = x->decode_step_s;
                    c.service_s = x->total_s;
                    c.max_rate = rate[i][r];
                } else {
                    /* the layout was chosen by its compute; its handoff is priced now
                     * (the receive or send rarely decides between layouts) */
                    if ((st = kv_at_prompt(spi_space_cache(&s), m, hw, &x->layout, c.batch, q->prompt, &c.kv_chip)) != SP_OK) break;
                    /* prefill sends its whole batch's cache at once; a decode instance
                     * receives each request's as it comes: its chip's cache over the batch
                     * (exact when every sequence spreads over the chips, as head-sharded
                     * attention keeps it; the mean over the chips when batch-sharded) */
                    /* each chip moves its share in one message over its own share of the
                     * network between nodes, priced as the cost model prices a transfer
                     * between instances apart */
                    if ((st = sp_cost_kv_xfer_apart(hw, c.role == SP_FLEET_PREFILL ? (double)c.kv_chip
                                                                                   : (double)c.kv_chip / (double)c.batch,
                                                    &c.handoff_s)) != SP_OK)
                        break;
                    if (o->tpot_s > 0 && c.handoff_s > o->tpot_s) continue;
                    if (c.role == SP_FLEET_PREFILL) {
                        c.prefill_s = x->prefill_s;
                        c.service_s = x->prefill_s + c.handoff_s;
                        c.max_rate = batch_max_rate(o, c.service_s, c.prefill_s, c.batch);
                    } else {
                        c.decode_step_s = x->decode_step_s;
                        c.service_s = c.handoff_s + (double)(q->gen + 1) * x->decode_step_s;
                        c.max_rate = slot_max_rate(o, c.service_s, c.batch);
                    }
                }
                if (c.max_rate > 0) st = cands_push(out, &c);
            }
        spi_space_free(&s);
    }
    return st;
}

/* Drops candidates another of the same role and kind beats: at least the
 * rate on at most the chips (one strictly).  Exact: swapping its instances
 * one for one never raises cost or chips nor breaks a row. */
static void drop_dominated(cands *cs)
{
    int k = 0;
    for (int i = 0; i < cs->n; i++) {
        const spi_fleet_cand *a = &cs->c[i];
        int dom = 0;
        for (int j = 0; j < cs->n && !dom; j++) {
            const spi_fleet_cand *b = &cs->c[j];
            if (j == i || b->role != a->role || b->kind != a->kind) continue;
            if (b->chips <= a->chips && b->max_rate >= a->max_rate &&
                (b->chips < a->chips || b->max_rate > a->max_rate || j < i))
                dom = 1;
        }
        if (!dom) cs->c[k++] = *a;
    }
    cs->n = k;
}

sp_status spi_fleet_candidates(const sp_model *m, const sp_fleet_kind *kinds, int n_kinds, const sp_fleet_request *q,
                               const sp_fleet_opts *o, spi_fleet_cand **out, int *n, char *notes, size_t notes_len,
                               sp_fleet_stats *stats)
{
    cands cs = {0};
    sp_status st = SP_OK;
    double t0 = now_s();
    for (int k = 0; k < n_kinds && st == SP_OK; k++) {
        const sp_hw *hw = kinds[k].hw;
        int disagg = o->disaggregated && hw->topo == SP_TOPO_CLUSTER && hw->inter_bw > 0;
        if (o->disaggregated && !disagg && notes && strlen(notes) + 1 < notes_len)
            snprintf(notes + strlen(notes), notes_len - strlen(notes),
                     "%s%s: no prefill or decode pools (the profile gives no network between instances to move "
                     "the KV cache over)",
                     notes[0] ? "; " : "", hw->name);
        if (o->colocated || disagg) st = kind_candidates(m, &kinds[k], k, q, o, 1, disagg, &cs, stats);
        if (st == SP_OK && disagg) st = kind_candidates(m, &kinds[k], k, q, o, 0, disagg, &cs, stats);
    }
    (void)t0;
    if (st != SP_OK) {
        free(cs.c);
        return st;
    }
    drop_dominated(&cs);
    for (int j = 0; j < cs.n; j++) stats->candidates[cs.c[j].role]++;
    *out = cs.c;
    *n = cs.n;
    return SP_OK;
}

/* ---- the program ------------------------------------------------------------------ */

typedef struct prog {
    glp_prob *P;
    int holds;
    int n, K;
    double *U;           /* N_j's upper bound U_j */
    int row_rate, row_flow, row_avail0, row_role0;
} prog;

static sp_status prog_build(const spi_fleet_cand *cs, int n, const sp_fleet_kind *kinds, int K, double R,
                            sp_fleet_objective obj, prog *g)
{
    memset(g, 0, sizeof *g);
    g->n = n;
    g->K = K;
    SP_CHECK(spi_glpk_env_get(&g->holds));
    glp_prob *P = g->P = glp_create_prob();
    glp_set_obj_dir(P, GLP_MIN);
    if (n > 0) glp_add_cols(P, 3 * n);
    int rows = 2 * n + 2 + K + SP_FLEET_ROLE_COUNT;
    glp_add_rows(P, rows);
    g->row_rate = 2 * n + 1;
    g->row_flow = 2 * n + 2;
    g->row_avail0 = 2 * n + 3;
    g->row_role0 = 2 * n + 3 + K;
    if (!(g->U = calloc((size_t)(n ? n : 1), sizeof *g->U))) return spi_fail(SP_ENOMEM, "fleet: out of memory");
    /* nonzeros: 2 per candidate row pair, 1-2 per candidate in the shared rows */
    int cap = 8 * n + 8;
    int *ia = malloc((size_t)(cap + 1) * sizeof *ia), *ja = malloc((size_t)(cap + 1) * sizeof *ja);
    double *ar = malloc((size_t)(cap + 1) * sizeof *ar);
    if (!ia || !ja || !ar) {
        free(ia), free(ja), free(ar);
        return spi_fail(SP_ENOMEM, "fleet: out of memory (program of %d candidates)", n);
    }
    int nz = 0;
#define NZ(r, c, v) (++nz, ia[nz] = (r), ja[nz] = (c), ar[nz] = (v))
    for (int j = 0; j < n; j++) {
        const spi_fleet_cand *c = &cs[j];
        int colN = 1 + j, colY = 1 + n + j, colR = 1 + 2 * n + j;
        double U = ceil(R / c->max_rate);
        if (U > 1e6) U = 1e6;   /* a pool of more instances is not a pool anyone builds */
        if (kinds[c->kind].available > 0) U = fmin(U, floor((double)kinds[c->kind].available / c->chips));
        g->U[j] = U;
        glp_set_col_kind(P, colN, GLP_IV);
        glp_set_col_bnds(P, colN, U > 0 ? GLP_DB : GLP_FX, 0, U);
        glp_set_col_kind(P, colY, GLP_BV);
        glp_set_col_bnds(P, colR, GLP_LO, 0, 0);
        double chips = c->chips, cost = c->price;
        glp_set_obj_coef(P, colN, obj == SP_FLEET_MIN_COST ? cost + 1e-9 * chips : chips + 1e-9 * cost);
        /* r_j − λ_j N_j ≤ 0 */
        glp_set_row_bnds(P, 1 + j, GLP_UP, 0, 0);
        NZ(1 + j, colR, 1.0);
        NZ(1 + j, colN, -c->max_rate);
        /* N_j − U_j y_j ≤ 0 */
        glp_set_row_bnds(P, 1 + n + j, GLP_UP, 0, 0);
        NZ(1 + n + j, colN, 1.0);
        NZ(1 + n + j, colY, -(U > 0 ? U : 1));
        if (c->role != SP_FLEET_DECODE) NZ(g->row_rate, colR, 1.0);
        if (c->role == SP_FLEET_PREFILL) NZ(g->row_flow, colR, 1.0);
        if (c->role == SP_FLEET_DECODE) NZ(g->row_flow, colR, -1.0);
        NZ(g->row_avail0 + c->kind, colN, chips);
        NZ(g->row_role0 + c->role, colY, 1.0);
    }
#undef NZ
    glp_set_row_bnds(P, g->row_rate, GLP_FX, R, R);
    glp_set_row_bnds(P, g->row_flow, GLP_FX, 0, 0);
    for (int k = 0; k < K; k++)
        if (kinds[k].available > 0) glp_set_row_bnds(P, g->row_avail0 + k, GLP_UP, 0, (double)kinds[k].available);
        else glp_set_row_bnds(P, g->row_avail0 + k, GLP_FR, 0, 0);
    for (int r = 0; r < SP_FLEET_ROLE_COUNT; r++) glp_set_row_bnds(P, g->row_role0 + r, GLP_FR, 0, 0);
    glp_load_matrix(P, nz, ia, ja, ar);
    free(ia), free(ja), free(ar);
    return SP_OK;
}

static void prog_free(prog *g)
{
    if (g->P) glp_delete_prob(g->P);
    g->P = NULL;
    free(g->U);
    g->U = NULL;
    spi_glpk_env_put(&g->holds);
}

/* One solve of a built program: allow (NULL: all) and homogeneous as in spi_fleet_pick. */
static sp_status prog_solve(prog *g, const unsigned char *allow, int homogeneous, int tm_lim, sp_plan_result *res,
                            int *N, double *r)
{
    glp_prob *P = g->P;
    int n = g->n;
    for (int j = 0; j < n; j++) {
        int on = (!allow || allow[j]) && g->U[j] > 0;
        glp_set_col_bnds(P, 1 + j, on ? GLP_DB : GLP_FX, 0, on ? g->U[j] : 0);
    }
    for (int o = 0; o < SP_FLEET_ROLE_COUNT; o++)
        glp_set_row_bnds(P, g->row_role0 + o, homogeneous ? GLP_UP : GLP_FR, 0, homogeneous ? 1 : 0);
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    parm.tm_lim = tm_lim > 0 ? tm_lim : 10000;
    int ret = glp_intopt(P, &parm);
    sp_status st = spi_glpk_result(ret, glp_mip_status(P), res);
    if (st == SP_OK && (*res == SP_PLAN_OPTIMAL || *res == SP_PLAN_FEASIBLE))
        for (int j = 0; j < n; j++) {
            N[j] = (int)lround(glp_mip_col_val(P, 1 + j));
            r[j] = glp_mip_col_val(P, 1 + 2 * n + j);
        }
    return st;
}

sp_status spi_fleet_pick(const spi_fleet_cand *c, int n, const sp_fleet_kind *kinds, int n_kinds, double R,
                         sp_fleet_objective obj, const unsigned char *allow, int homogeneous, int time_limit_ms,
                         sp_plan_result *res, int *N, double *r, sp_fleet_stats *stats)
{
    double t0 = now_s();
    *res = SP_PLAN_INFEASIBLE;
    for (int j = 0; j < n; j++) N[j] = 0, r[j] = 0;
    prog g;
    sp_status st = prog_build(c, n, kinds, n_kinds, R, obj, &g);
    if (st == SP_OK) {
        stats->rows = glp_get_num_rows(g.P);
        stats->cols = glp_get_num_cols(g.P);
        int any = 0;
        for (int j = 0; j < n; j++) any |= !allow || allow[j];
        if (any) {
            st = prog_solve(&g, allow, homogeneous, time_limit_ms, res, N, r);
            stats->solves++;
        }
    }
    prog_free(&g);
    stats->glpk_s += now_s() - t0;
    return st;
}

/* ---- the fleet from a solve ---------------------------------------------------------- */

/* One pool's figures at its load (rate over its instances). */
static void pool_fill(const spi_fleet_cand *c, const sp_fleet_kind *kinds, int N, double rate, sp_fleet_pool *p)
{
    memset(p, 0, sizeof *p);
    p->role = c->role;
    p->kind = c->kind;
    p->instances = N;
    p->chips_per_instance = c->chips;
    p->chips = (int64_t)N * c->chips;
    p->batch = c->batch;
    p->layout = c->layout;
    p->rate = rate;
    p->max_rate = c->max_rate;
    p->service_s = c->service_s;
    double lam = N > 0 ? rate / N : 0;
    p->utilisation = lam * c->service_s / (double)c->batch;
    p->prefill_s = c->prefill_s;
    p->decode_step_s = c->decode_step_s;
    p->handoff_s = c->handoff_s;
    p->kv_bytes_per_chip = c->kv_chip;
    if (c->role == SP_FLEET_DECODE) {
        p->wait_s = sp_fleet_slot_wait(lam, c->service_s, c->batch);
        p->tpot_s = c->decode_step_s;
    } else {
        p->wait_s = sp_fleet_batch_wait(lam, c->service_s, c->batch);
        p->ttft_s = p->wait_s + c->prefill_s;
        if (c->role == SP_FLEET_COLOCATED) p->tpot_s = c->decode_step_s;
    }
    p->cost_per_hour = (double)p->chips * kinds[c->kind].hw->chip_cost_per_hour;
}

static sp_status choice_fill(const spi_fleet_cand *cs, int nc, const sp_fleet_kind *kinds, const sp_fleet_request *q,
                             sp_plan_result res, const int *N, const double *r, sp_fleet_choice *ch)
{
    memset(ch, 0, sizeof *ch);
    ch->result = res;
    if (res != SP_PLAN_OPTIMAL && res != SP_PLAN_FEASIBLE) return SP_OK;
    int k = 0;
    for (int j = 0; j < nc; j++) k += N[j] > 0;
    if (!(ch->pools = calloc((size_t)(k ? k : 1), sizeof *ch->pools))) return spi_fail(SP_ENOMEM, "fleet: out of memory");
    /* roles in order: colocated, prefill, decode */
    for (int role = 0; role < SP_FLEET_ROLE_COUNT; role++)
        for (int j = 0; j < nc; j++) {
            if (N[j] <= 0 || (int)cs[j].role != role) continue;
            sp_fleet_pool *p = &ch->pools[ch->n_pools++];
            pool_fill(&cs[j], kinds, N[j], r[j], p);
            spi_ckd ck = SPI_CKD_INIT;
            ch->chips = spi_ck_add(&ck, "fleet chips", ch->chips, p->chips);
            if (ck.overflow) return spi_fail(SP_EINVAL, "fleet: chip count overflows 64 bits");
            ch->cost_per_hour += p->cost_per_hour;
        }
    ch->found = ch->n_pools > 0;
    ch->cost_per_mtok = ch->cost_per_hour / (q->rate * (double)q->gen * 3600.0) * 1e6;
    return SP_OK;
}

static void choice_free(sp_fleet_choice *ch)
{
    free(ch->pools);
    ch->pools = NULL;
    ch->n_pools = 0;
}

void sp_fleet_free(sp_fleet *f)
{
    if (!f) return;
    choice_free(&f->best);
    for (int i = 0; i < f->n_alts; i++) choice_free(&f->alts[i].fleet);
    free(f);
}

static int choice_has_role(const sp_fleet_choice *c, sp_fleet_role r)
{
    for (int i = 0; i < c->n_pools; i++)
        if (c->pools[i].role == r) return 1;
    return 0;
}

static int choice_mixed(const sp_fleet_choice *c)
{
    int per[SP_FLEET_ROLE_COUNT] = {0};
    for (int i = 0; i < c->n_pools; i++)
        if (++per[c->pools[i].role] > 1) return 1;
    return 0;
}

/* The one kind a fleet uses, or -1 when it uses several. */
static int choice_kind(const sp_fleet_choice *c)
{
    int k = -2;
    for (int i = 0; i < c->n_pools; i++) {
        if (k == -2) k = c->pools[i].kind;
        else if (k != c->pools[i].kind) return -1;
    }
    return k < 0 ? -1 : k;
}

static void alt_reason(const sp_fleet *f, sp_fleet_alt *a, int n_allowed)
{
    const sp_fleet_choice *b = &f->best, *x = &a->fleet;
    if (!n_allowed) {
        snprintf(a->reason, sizeof a->reason, "no pool of this kind meets the targets (latency, memory%s)",
                 f->notes[0] ? "; see notes" : "");
        return;
    }
    if (x->result == SP_PLAN_INFEASIBLE) {
        snprintf(a->reason, sizeof a->reason, "cannot serve %.4g requests/s within the targets%s", f->request.rate,
                 f->n_kinds > 0 ? " and the available chips" : "");
        return;
    }
    if (!x->found) {
        snprintf(a->reason, sizeof a->reason, "not solved: %s", sp_plan_result_name(x->result));
        return;
    }
    double dc = x->cost_per_hour - b->cost_per_hour;
    long long dn = (long long)(x->chips - b->chips);
    if (f->opts.objective == SP_FLEET_MIN_COST)
        snprintf(a->reason, sizeof a->reason, "costs $%.2f/h more (+%.1f%%), %+lld chips", dc,
                 b->cost_per_hour > 0 ? 100 * dc / b->cost_per_hour : 0.0, dn);
    else
        snprintf(a->reason, sizeof a->reason, "needs %lld more chips (%+.1f%% cost per hour)", dn,
                 b->cost_per_hour > 0 ? 100 * dc / b->cost_per_hour : 0.0);
}

sp_status sp_fleet_solve(const sp_model *m, const sp_fleet_kind *kinds, int n_kinds, const sp_fleet_request *q,
                         const sp_fleet_opts *opts, sp_fleet **out)
{
    double t0 = now_s();
    if (!out) return spi_fail(SP_EINVAL, "sp_fleet_solve: NULL out");
    *out = NULL;
    if (!m || !kinds || !q) return spi_fail(SP_EINVAL, "sp_fleet_solve: NULL argument");
    if (n_kinds < 1 || n_kinds > 8) return spi_fail(SP_EINVAL, "fleet: 1 to 8 chip kinds (got %d)", n_kinds);
    sp_fleet_opts o;
    sp_fleet_opts_init(&o);
    if (opts) o = *opts;
    if (!(q->rate > 0) || !isfinite(q->rate)) return spi_fail(SP_EINVAL, "fleet: rate must be > 0 requests/s");
    if (q->prompt < 1 || q->gen < 1)
        return spi_fail(SP_EINVAL, "fleet: prompt and gen must be >= 1 (got %lld, %lld)", (long long)q->prompt,
                        (long long)q->gen);
    if (!(o.util_cap > 0 && o.util_cap < 1)) return spi_fail(SP_EINVAL, "fleet: util_cap must be in (0, 1)");
    if (o.ttft_s < 0 || o.tpot_s < 0 || !isfinite(o.ttft_s) || !isfinite(o.tpot_s))
        return spi_fail(SP_EINVAL, "fleet: targets must be >= 0 (0: none)");
    if (o.max_batch < 1 || o.max_batch > (int64_t)1 << 20 || o.max_instance_chips < 1)
        return spi_fail(SP_EINVAL, "fleet: max_batch in 1..2^20 and max_instance_chips >= 1");
    if (!o.colocated && !o.disaggregated) return spi_fail(SP_EINVAL, "fleet: neither colocated nor disaggregated pools allowed");
    if ((unsigned)o.objective >= SP_FLEET_OBJECTIVE_COUNT) return spi_fail(SP_EINVAL, "fleet: bad objective");
    for (int k = 0; k < n_kinds; k++) {
        if (!kinds[k].hw) return spi_fail(SP_EINVAL, "fleet: kind %d has no hardware", k);
        if (kinds[k].available < 0) return spi_fail(SP_EINVAL, "fleet: %s: available chips < 0", kinds[k].hw->name);
        for (int j = 0; j < k; j++)
            if (!strcmp(kinds[j].hw->name, kinds[k].hw->name))
                return spi_fail(SP_EINVAL, "fleet: chip kind %s given twice", kinds[k].hw->name);
        if (o.objective == SP_FLEET_MIN_COST && !(kinds[k].hw->chip_cost_per_hour > 0))
            return spi_fail(SP_EINVAL,
                            "fleet: %s has no cost_per_chip_hour in its profile: the cost objective cannot price it "
                            "(objective chips, or add the price to the profile)",
                            kinds[k].hw->name);
    }
    sp_workload whole = {.batch = 1, .prompt = q->prompt, .gen = q->gen};
    SP_CHECK(sp_cost_check_workload(m, &whole));

    sp_fleet *f = calloc(1, sizeof *f);
    if (!f) return spi_fail(SP_ENOMEM, "fleet: out of memory");
    f->request = *q;
    f->opts = o;
    f->n_kinds = n_kinds;
    memcpy(f->kinds, kinds, (size_t)n_kinds * sizeof *kinds);
    spi_fleet_cand *cs = NULL;
    int nc = 0;
    int *N = NULL;
    double *r = NULL;
    unsigned char *allow = NULL;
    sp_status st = spi_fleet_candidates(m, kinds, n_kinds, q, &o, &cs, &nc, f->notes, sizeof f->notes, &f->stats);
    if (st == SP_OK) {
        N = calloc((size_t)(nc ? nc : 1), sizeof *N);
        r = calloc((size_t)(nc ? nc : 1), sizeof *r);
        allow = calloc((size_t)(nc ? nc : 1), 1);
        if (!N || !r || !allow) st = spi_fail(SP_ENOMEM, "fleet: out of memory");
    }
    sp_plan_result res = SP_PLAN_INFEASIBLE;
    if (st == SP_OK)
        st = spi_fleet_pick(cs, nc, kinds, n_kinds, q->rate, o.objective, NULL, 0, o.time_limit_ms, &res, N, r,
                            &f->stats);
    if (st == SP_OK) st = choice_fill(cs, nc, kinds, q, res, N, r, &f->best);
    f->result = res;
    /* the best fleet of each other kind */
    if (st == SP_OK && o.alternatives && f->best.found) {
        const sp_fleet_choice *b = &f->best;
        int dis = choice_has_role(b, SP_FLEET_PREFILL), col = choice_has_role(b, SP_FLEET_COLOCATED);
        int bk = choice_kind(b);
        for (int a = 0; a < 3 + n_kinds && st == SP_OK && f->n_alts < SP_FLEET_MAX_ALTS; a++) {
            sp_fleet_alt *x = &f->alts[f->n_alts];
            int homog = 0, n_allowed = 0;
            if (a == 0) {   /* colocated only, when the best fleet disaggregates */
                if (!dis || !o.colocated) continue;
                snprintf(x->kind, sizeof x->kind, "colocated");
                for (int j = 0; j < nc; j++) allow[j] = cs[j].role == SP_FLEET_COLOCATED;
            } else if (a == 1) {   /* disaggregated only, when it colocates */
                if (!col || !o.disaggregated) continue;
                snprintf(x->kind, sizeof x->kind, "disaggregated");
                for (int j = 0; j < nc; j++) allow[j] = cs[j].role != SP_FLEET_COLOCATED;
            } else if (a == 2) {   /* one pool per role, when it mixes */
                if (!choice_mixed(b)) continue;
                snprintf(x->kind, sizeof x->kind, "homogeneous");
                memset(allow, 1, (size_t)nc);
                homog = 1;
            } else {   /* one chip kind alone, other than the one the best fleet uses */
                int k = a - 3;
                if (k == bk) continue;
                snprintf(x->kind, sizeof x->kind, "hw:%s", kinds[k].hw->name);
                for (int j = 0; j < nc; j++) allow[j] = cs[j].kind == k;
            }
            for (int j = 0; j < nc; j++) n_allowed += allow[j];
            sp_plan_result ar = SP_PLAN_INFEASIBLE;
            sp_fleet_stats as = f->stats;   /* the program's size stays the main solve's */
            st = spi_fleet_pick(cs, nc, kinds, n_kinds, q->rate, o.objective, allow, homog, o.time_limit_ms, &ar, N,
                                r, &as);
            f->stats.solves = as.solves;
            f->stats.glpk_s = as.glpk_s;
            if (st == SP_OK) st = choice_fill(cs, nc, kinds, q, ar, N, r, &x->fleet);
            f->n_alts++;
            alt_reason(f, x, n_allowed);
        }
    }
    free(N);
    free(r);
    free(allow);
    free(cs);
    f->stats.total_s = now_s() - t0;
    if (st != SP_OK) {
        sp_fleet_free(f);
        return st;
    }
    *out = f;
    return SP_OK;
}

/* ---- discrete-event simulation (sp_fleet_simulate) ------------------------------------- */

static double rng_u(uint64_t *s)
{
    /* xorshift64: 53 random bits in (0, 1) */
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return ((double)(*s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* A pool by its share of the requests of its stage: u in (0, 1) over pools
 * `sel` (roles) weighted by rate. */
static int pick_pool(const sp_fleet_choice *b, int decode, double u)
{
    double tot = 0, acc = 0;
    int last = -1;
    for (int i = 0; i < b->n_pools; i++)
        if ((b->pools[i].role == SP_FLEET_DECODE) == decode) tot += b->pools[i].rate;
    for (int i = 0; i < b->n_pools; i++) {
        if ((b->pools[i].role == SP_FLEET_DECODE) != decode || !(b->pools[i].rate > 0)) continue;
        last = i;
        acc += b->pools[i].rate;
        if (u * tot < acc) return i;
    }
    return last;
}

typedef struct sim_req {
    double t;          /* arrival at the stage */
    int pool, inst;
    int measured;
} sim_req;

static int cmp_sim_t(const void *a, const void *b)
{
    const sim_req *x = a, *y = b;
    if (x->pool != y->pool) return x->pool - y->pool;
    if (x->inst != y->inst) return x->inst - y->inst;
    return (x->t > y->t) - (x->t < y->t);
}

sp_status sp_fleet_simulate(const sp_fleet *f, int64_t requests, uint64_t seed, sp_fleet_sim_pool *out)
{
    if (!f || !out || !f->best.found || requests < 100 || requests > ((int64_t)1 << 28))
        return spi_fail(SP_EINVAL, "sp_fleet_simulate: need a fleet and 100 to 2^28 requests");
    const sp_fleet_choice *b = &f->best;
    memset(out, 0, (size_t)b->n_pools * sizeof *out);
    size_t n = (size_t)requests;
    sim_req *a = malloc(n * sizeof *a), *d = malloc(n * sizeof *d);
    double *wsum = calloc((size_t)b->n_pools, sizeof *wsum);
    if (!a || !d || !wsum) {
        free(a), free(d), free(wsum);
        return spi_fail(SP_ENOMEM, "fleet simulation: %lld requests", (long long)requests);
    }
    uint64_t s = seed ? seed : 0x9E3779B97F4A7C15ull;
    double t = 0;
    size_t warm = n / 10;
    for (size_t i = 0; i < n; i++) {
        t += -log(rng_u(&s)) / f->request.rate;
        a[i].t = t;
        a[i].pool = pick_pool(b, 0, rng_u(&s));
        a[i].inst = (int)(rng_u(&s) * b->pools[a[i].pool].instances);
        a[i].measured = i >= warm;
    }
    double t_first = a[warm].t, span = a[n - 1].t - t_first;
    /* each instance's arrivals in time order (a stable order: pool, instance, time) */
    qsort(a, n, sizeof *a, cmp_sim_t);
    size_t nd = 0;
    double *slots = NULL;
    sp_status st = SP_OK;
    for (size_t i = 0; i < n;) {
        /* one instance: greedy batches of up to `batch` whenever it is free */
        size_t e = i;
        while (e < n && a[e].pool == a[i].pool && a[e].inst == a[i].inst) e++;
        const sp_fleet_pool *p = &b->pools[a[i].pool];
        double free_at = 0;
        for (size_t k = i; k < e;) {
            double start = free_at > a[k].t ? free_at : a[k].t;
            size_t m = 0;
            while (k + m < e && (int64_t)m < p->batch && a[k + m].t <= start) m++;
            for (size_t j = k; j < k + m; j++) {
                if (a[j].measured) {
                    out[a[j].pool].served++;
                    wsum[a[j].pool] += start - a[j].t;
                }
                if (p->role == SP_FLEET_PREFILL) {
                    int dp = pick_pool(b, 1, rng_u(&s));
                    const sp_fleet_pool *q = &b->pools[dp];
                    double h = p->handoff_s > q->handoff_s ? p->handoff_s : q->handoff_s;
                    d[nd].t = start + p->prefill_s + h;
                    d[nd].pool = dp;
                    d[nd].inst = (int)(rng_u(&s) * q->instances);
                    d[nd].measured = a[j].measured;
                    nd++;
                }
            }
            k += m;
            free_at = start + p->service_s;
        }
        i = e;
    }
    /* decode: each instance's `batch` slots, first come first served */
    qsort(d, nd, sizeof *d, cmp_sim_t);
    for (size_t i = 0; i < nd && st == SP_OK;) {
        size_t e = i;
        while (e < nd && d[e].pool == d[i].pool && d[e].inst == d[i].inst) e++;
        const sp_fleet_pool *p = &b->pools[d[i].pool];
        free(slots);
        if (!(slots = calloc((size_t)p->batch, sizeof *slots))) {
            st = spi_fail(SP_ENOMEM, "fleet simulation: %lld slots", (long long)p->batch);
            break;
        }
        for (size_t k = i; k < e; k++) {
            int64_t m = 0;
            for (int64_t x = 1; x < p->batch; x++)
                if (slots[x] < slots[m]) m = x;
            double start = slots[m] > d[k].t ? slots[m] : d[k].t;
            slots[m] = start + p->service_s;
            if (d[k].measured) {
                out[d[k].pool].served++;
                wsum[d[k].pool] += start - d[k].t;
            }
        }
        i = e;
    }
    for (int i = 0; i < b->n_pools; i++) {
        const sp_fleet_pool *p = &b->pools[i];
        sp_fleet_sim_pool *o = &out[i];
        if (o->served > 0) o->mean_wait_s = wsum[i] / (double)o->served;
        if (p->role != SP_FLEET_DECODE) o->mean_ttft_s = o->mean_wait_s + p->prefill_s;
        if (span > 0) o->utilisation = (double)o->served * p->service_s / ((double)p->batch * p->instances * span);
    }
    free(slots);
    free(a);
    free(d);
    free(wsum);
    return st;
}

/* ---- JSON ------------------------------------------------------------------------------- */

static json_t *choice_json(const sp_fleet *f, const sp_fleet_choice *c)
{
    json_t *j = json_object();
    json_object_set_new(j, "status", json_string(sp_plan_result_name(c->result)));
    if (!c->found) return j;
    json_object_set_new(j, "chips", json_integer(c->chips));
    json_object_set_new(j, "cost_per_hour", json_real(c->cost_per_hour));
    json_object_set_new(j, "cost_per_mtok", json_real(c->cost_per_mtok));
    json_t *pools = json_array();
    for (int i = 0; i < c->n_pools; i++) {
        const sp_fleet_pool *p = &c->pools[i];
        json_t *x = json_object();
        char lay[512];
        json_object_set_new(x, "role", json_string(sp_fleet_role_name(p->role)));
        json_object_set_new(x, "hw", json_string(f->kinds[p->kind].hw->name));
        json_object_set_new(x, "instances", json_integer(p->instances));
        json_object_set_new(x, "chips_per_instance", json_integer(p->chips_per_instance));
        json_object_set_new(x, "chips", json_integer(p->chips));
        json_object_set_new(x, "layout", json_string(sp_layout_format(&p->layout, lay, sizeof lay)));
        json_object_set_new(x, "batch", json_integer(p->batch));
        json_object_set_new(x, "rate", json_real(p->rate));
        json_object_set_new(x, "max_rate_per_instance", json_real(p->max_rate));
        json_object_set_new(x, "utilisation", json_real(p->utilisation));
        json_object_set_new(x, "ttft_s", json_real(p->ttft_s));
        json_object_set_new(x, "tpot_s", json_real(p->tpot_s));
        /* a saturated pool's wait is unbounded: null, never a negative sentinel */
        json_object_set_new(x, "wait_s", isfinite(p->wait_s) ? json_real(p->wait_s) : json_null());
        json_object_set_new(x, "service_s", json_real(p->service_s));
        json_object_set_new(x, "prefill_s", json_real(p->prefill_s));
        json_object_set_new(x, "decode_step_s", json_real(p->decode_step_s));
        json_object_set_new(x, "handoff_s", json_real(p->handoff_s));
        json_object_set_new(x, "kv_bytes_per_chip", json_integer(p->kv_bytes_per_chip));
        json_object_set_new(x, "cost_per_hour", json_real(p->cost_per_hour));
        json_array_append_new(pools, x);
    }
    json_object_set_new(j, "pools", pools);
    return j;
}

void *sp_fleet_to_json(const sp_fleet *f)
{
    if (!f) return NULL;
    json_t *j = choice_json(f, &f->best);
    json_object_set_new(j, "status", json_string(sp_plan_result_name(f->result)));
    json_object_set_new(j, "objective", json_string(sp_fleet_objective_name(f->opts.objective)));
    json_t *rq = json_object();
    json_object_set_new(rq, "rate", json_real(f->request.rate));
    json_object_set_new(rq, "prompt", json_integer(f->request.prompt));
    json_object_set_new(rq, "gen", json_integer(f->request.gen));
    json_object_set_new(j, "request", rq);
    json_t *tg = json_object();
    json_object_set_new(tg, "ttft_s", json_real(f->opts.ttft_s));
    json_object_set_new(tg, "tpot_s", json_real(f->opts.tpot_s));
    json_object_set_new(tg, "util_cap", json_real(f->opts.util_cap));
    json_object_set_new(j, "targets", tg);
    if (!f->best.found) {
        json_object_set_new(j, "chips", json_integer(0));
        json_object_set_new(j, "cost_per_hour", json_real(0));
        json_object_set_new(j, "pools", json_array());
    }
    json_t *alts = json_array();
    for (int i = 0; i < f->n_alts; i++) {
        json_t *x = choice_json(f, &f->alts[i].fleet);
        json_object_set_new(x, "kind", json_string(f->alts[i].kind));
        json_object_set_new(x, "reason", json_string(f->alts[i].reason));
        json_array_append_new(alts, x);
    }
    json_object_set_new(j, "alternatives", alts);
    json_object_set_new(j, "notes", json_string(f->notes));
    json_t *st = json_object();
    json_object_set_new(st, "layouts_priced", json_integer(f->stats.layouts));
    for (int r = 0; r < SP_FLEET_ROLE_COUNT; r++) {
        char k[48];
        snprintf(k, sizeof k, "candidates_%s", sp_fleet_role_name((sp_fleet_role)r));
        json_object_set_new(st, k, json_integer(f->stats.candidates[r]));
    }
    json_object_set_new(st, "rows", json_integer(f->stats.rows));
    json_object_set_new(st, "cols", json_integer(f->stats.cols));
    json_object_set_new(st, "solves", json_integer(f->stats.solves));
    json_object_set_new(st, "eval_s", json_real(f->stats.eval_s));
    json_object_set_new(st, "glpk_s", json_real(f->stats.glpk_s));
    json_object_set_new(st, "total_s", json_real(f->stats.total_s));
    json_object_set_new(j, "stats", st);
    return j;
}
