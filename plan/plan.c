/*
 * plan.c: the planner's mixed-integer program (GLPK) and what is built on it.
 *
 * NAME
 *   the layout MILP
 *
 * DATA (precomputed by the cost model, plan_space.c)
 *   C          candidates: every layout of the space (sp_plan.h) that
 *              sp_cost_eval prices (SP_EINVAL ones are not in the space);
 *              one candidate per combination of decision values.
 *   D          decisions: instance (chips, batch), mesh (X, Y, Z, placement),
 *              pipeline (stages, replicas, micro-batches), weight precision,
 *              prefill (FFN, attention), decode (FFN, attention).
 *   V_d        the values decision d takes over C; v(c, d) candidate c's value.
 *   mem_c      ceil((worst-stage bytes per chip − capacity) / MiB) of c.
 *   g_bc       the value of bound b for c (latency metric, −tokens/s), h_b its limit.
 *   f1_c, f2_c the objective term and the tie-break term of c.
 *
 * VARIABLES
 *   x_c ∈ {0,1}       candidate c is the layout            (c ∈ C)
 *   y_dv ∈ {0,1}      decision d takes value v             (d ∈ D, v ∈ V_d)
 *
 * CONSTRAINTS
 *   Σ_v y_dv = 1                          ∀d        exactly one value per decision
 *   Σ_{c: v(c,d)=v} x_c − y_dv = 0        ∀d, v     links: with the rows above,
 *                                                   Σ x_c = 1 and c is chosen iff
 *                                                   all its decision values are
 *                                                   (storage compatibility holds
 *                                                   because incompatible
 *                                                   combinations are not in C)
 *   Σ_c mem_c x_c ≤ 0                               memory per chip fits
 *   Σ_c ρ_b(c) x_c ≤ r_b                  ∀b        g_bc ≤ h_b (latency bound,
 *                                                   throughput target, frontier ε)
 *   Σ_{c ∈ F} x_c = 0                               forbidden set (rivals)
 *
 * OBJECTIVE
 *   min Σ_c π_c x_c
 *   π_c is c's position in the order of (f1_c, f2_c, c): an order-preserving
 *   integer recoding of the cost-model terms, so the minimum of the program is
 *   the lexicographic minimum of (f1, f2) exactly (no floating tolerance, a
 *   unique optimum, ties broken by the fixed candidate order).  Likewise
 *   ρ_b(c) is the rank of g_bc among the distinct values of g_b and r_b the
 *   number of distinct values ≤ h_b, so a bound row admits exactly the
 *   candidates with g_bc ≤ h_b.
 *
 * USES
 *   objective      f1 = latency metric | cost metric | −tokens/s; f2 = cost or latency
 *   frontier       epsilon-constraint: f1 = cost, f2 = latency, bound latency ≤ ε;
 *                  ε starts at +∞ (or max_latency_s) and is set just below the
 *                  latency of the point found; one solve per point; the
 *                  (cost, latency) lexicographic minimum makes every point
 *                  non-dominated and the sequence complete.
 *   rivals         per kind: F = candidates sharing the chosen value of that
 *                  kind, memory row and bounds dropped; the optimum is the best
 *                  layout of another kind, and its costs say why it lost.
 *
 * REDUCTIONS (exact; doc/planner.md, plan_space.c spi_space_reduce)
 *   Before the program is built, only candidates that may be the optimum of
 *   one of the plan's solves stay: the admissible rank-minimum (main), the
 *   non-dominated admissible (cost, latency) set (frontier), one candidate
 *   per value of each rival kind (rivals); frontier instances are reduced as
 *   they are priced.  Candidate order is kept, so ties break as before.
 *
 * SOLVER
 *   One glp_prob per plan (spi_milp_new) re-solved per use: objective
 *   coefficients, row bounds (glp_set_row_bnds: ε / bounds / memory / forbid
 *   rows) and implied column fixings change; glp_simplex (presolve off) from
 *   the last basis, then glp_intopt with presolve off on that optimal basis,
 *   tm_lim = opts.time_limit_ms, messages off.  Its return code and
 *   glp_mip_status are both checked: OPTIMAL, FEASIBLE (a solution, not proven
 *   optimal: time limit), INFEASIBLE, TIME_LIMIT (no solution in time) go to
 *   sp_plan.result; a GLPK failure is the sp_status SP_ESOLVER.
 */
#include <glpk.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
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

/* ---- names ---- */
static const char *const objective_names[] = {"latency", "cost", "throughput"};
static const char *const latency_names[] = {"total", "decode", "prefill"};
static const char *const weights_names[] = {"auto", "bf16", "int8", "fp8"};
static const char *const result_names[] = {"optimal", "feasible", "infeasible", "time_limit"};
static const char *const rival_names[] = {"ffn", "attention", "mesh", "precision", "pipeline", "experts", "offload"};
static const char *const loss_names[] = {"memory", "bound", "objective"};
_Static_assert(SPI_ARRAY_LEN(objective_names) == SP_PLAN_OBJECTIVE_COUNT, "objective names");
_Static_assert(SPI_ARRAY_LEN(latency_names) == SP_PLAN_LAT_COUNT, "latency names");
_Static_assert(SPI_ARRAY_LEN(weights_names) == SP_PLAN_W_COUNT, "weights names");
_Static_assert(SPI_ARRAY_LEN(result_names) == SP_PLAN_RESULT_COUNT, "result names");
_Static_assert(SPI_ARRAY_LEN(rival_names) == SP_RIVAL_KIND_COUNT, "rival names");
_Static_assert(SPI_ARRAY_LEN(loss_names) == SP_LOSS_COUNT, "loss names");

#define NAME_OF(tab, i) ((unsigned)(i) < SPI_ARRAY_LEN(tab) ? (tab)[i] : "?")
const char *sp_plan_objective_name(sp_plan_objective o) { return NAME_OF(objective_names, o); }
const char *sp_plan_latency_name(sp_plan_latency l) { return NAME_OF(latency_names, l); }
const char *sp_plan_weights_name(sp_plan_weights w) { return NAME_OF(weights_names, w); }
const char *sp_plan_result_name(sp_plan_result r) { return NAME_OF(result_names, r); }
const char *sp_plan_rival_kind_name(sp_plan_rival_kind k) { return NAME_OF(rival_names, k); }

static sp_status parse_name(const char *what, const char *s, const char *const *names, int n, int *out)
{
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return SP_OK;
        }
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, names[i], sizeof list - strlen(list) - 1);
        if (i + 1 < n) strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return spi_fail(SP_EINVAL, "%s \"%s\": must be one of %s", what, s ? s : "(null)", list);
}
sp_status sp_plan_objective_parse(const char *s, sp_plan_objective *out)
{
    int v = 0;
    SP_CHECK(parse_name("objective", s, objective_names, SP_PLAN_OBJECTIVE_COUNT, &v));
    *out = (sp_plan_objective)v;
    return SP_OK;
}
sp_status sp_plan_latency_parse(const char *s, sp_plan_latency *out)
{
    int v = 0;
    SP_CHECK(parse_name("latency metric", s, latency_names, SP_PLAN_LAT_COUNT, &v));
    *out = (sp_plan_latency)v;
    return SP_OK;
}
sp_status sp_plan_weights_parse(const char *s, sp_plan_weights *out)
{
    int v = 0;
    SP_CHECK(parse_name("weights", s, weights_names, SP_PLAN_W_COUNT, &v));
    *out = (sp_plan_weights)v;
    return SP_OK;
}

void sp_plan_opts_init(sp_plan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->objective = SP_PLAN_MIN_LATENCY;
    o->latency_metric = SP_PLAN_LAT_TOTAL;
    o->cost_metric = SP_PLAN_COST_TOTAL;
    o->weights = SP_PLAN_W_AUTO;
    o->kv = SP_DT_BF16;
    o->time_limit_ms = 10000;
    o->frontier = 1;
    o->max_frontier_points = 256;
    o->rivals = 1;
    o->search_min_chips = 1;
}

/* ---- the MILP ---- */
struct spi_milp {
    glp_prob *P;
    const spi_space *s;
    int n;                       /* x_c columns 1..n */
    int mrow, lrow, trow;        /* memory, latency (bound and ε), throughput rows */
    int frow0, frow_of;          /* forbid rows (one per rival kind) and the candidate they forbid around */
    const double *lat, *ntps;
    double *ul, *ut;             /* distinct latency and −tokens/s values, ascending */
    int nul, nut;
    int *ord;
    double *pi;
    unsigned char *fixed;        /* column currently fixed at 0 */
    int *ind;
    double *coef;
    int holds_env;               /* counted in glpk_users (glpk_env_get) */
};

/* GLPK keeps one environment per thread (glp_init_env, thread-local) and
 * frees it only on glp_free_env: a sweep worker or a caller's thread that
 * plans and exits would leak it (about 5 KB a thread).  The planner frees
 * the environment when the last of its problems in this thread is gone, but
 * only one it created itself: a caller that uses GLPK keeps its own. */
static _Thread_local int glpk_users, glpk_env_ours;

sp_status spi_glpk_env_get(int *holds)
{
    if (glpk_users == 0) {
        int r = glp_init_env();   /* 0: created now, 1: the caller's, else failed */
        if (r != 0 && r != 1) return spi_fail(SP_ENOMEM, "planner: GLPK cannot set up its environment (%d)", r);
        glpk_env_ours = r == 0;
    }
    glpk_users++;
    *holds = 1;
    return SP_OK;
}

void spi_glpk_env_put(int *holds)
{
    if (!*holds) return;
    *holds = 0;
    if (--glpk_users == 0 && glpk_env_ours) {
        glp_free_env();
        glpk_env_ours = 0;
    }
}

sp_status spi_glpk_result(int ret, int mst, sp_plan_result *res)
{
    switch (ret) {
    case 0:
        if (mst == GLP_OPT) *res = SP_PLAN_OPTIMAL;
        else if (mst == GLP_FEAS) *res = SP_PLAN_FEASIBLE;
        else if (mst == GLP_NOFEAS) *res = SP_PLAN_INFEASIBLE;
        else return spi_fail(SP_ESOLVER, "glp_intopt returned 0 but the MIP status is %d", mst);
        return SP_OK;
    case GLP_ENOPFS: *res = SP_PLAN_INFEASIBLE; return SP_OK;
    case GLP_ETMLIM:
    case GLP_EMIPGAP:
    case GLP_ESTOP: *res = mst == GLP_FEAS || mst == GLP_OPT ? SP_PLAN_FEASIBLE : SP_PLAN_TIME_LIMIT; return SP_OK;
    default: return spi_fail(SP_ESOLVER, "glp_intopt failed (code %d, MIP status %d)", ret, mst);
    }
}

void spi_measure_cols(glp_prob *P, const spi_measure *ms, int col_X, int col_V)
{
    for (int p = 0; p < SPI_PH_COUNT; p++) {
        /* a phase the workload does not run: fixed at 0 (counted, not used) */
        glp_set_col_bnds(P, col_X + p, ms->ph[p] ? GLP_LO : GLP_FX, 0, 0);
        glp_set_col_bnds(P, col_V + p, ms->ph[p] ? GLP_LO : GLP_FX, 0, 0);
        glp_set_obj_coef(P, col_V + p, ms->ph[p] ? ms->w_obj[p] : 0);
    }
}

int spi_measure_lb_terms(const spi_measure *ms, int col_V, int col_x, double lb_s, double ps_per_unit, int *ind,
                         double *val)
{
    int k = 0;
    for (int p = 0; p < SPI_PH_COUNT; p++)
        if (ms->ph[p] && ms->w_obj[p] != 0) ind[++k] = col_V + p, val[k] = ms->w_obj[p];
    /* relaxed by 1e-9: the bound may be the optimum itself, summed in another order */
    ind[++k] = col_x, val[k] = -lb_s * (1 - 1e-9) * 1e12 / ps_per_unit;
    return k;
}

int spi_measure_bound_rows(glp_prob *P, const spi_measure *ms, double inc, const int *col_V, int nt,
                           double ps_per_unit, int *ind, double *val)
{
    int rows = 0;
    for (int bi = 0; bi < 3; bi++) {   /* latency bound, throughput target, the incumbent */
        double lim = bi == 0 ? ms->max_lat : bi == 1 ? ms->max_tot : inc;
        const double *wt = bi == 0 ? ms->w_lat : bi == 1 ? ms->w_tot : ms->w_obj;
        if (isinf(lim)) continue;
        int k = 0;
        for (int i = 0; i < nt; i++)
            for (int p = 0; p < SPI_PH_COUNT; p++)
                if (ms->ph[p] && wt[p] != 0) ind[++k] = col_V[i] + p, val[k] = wt[p];
        int r = glp_add_rows(P, 1);
        glp_set_row_bnds(P, r, GLP_UP, 0, lim * 1e12 / ps_per_unit);
        glp_set_mat_row(P, r, k, ind, val);
        rows++;
    }
    return rows;
}

sp_status spi_glpk_intopt(glp_prob *P, int time_limit_ms, int *nodes, sp_plan_result *res)
{
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    parm.tm_lim = time_limit_ms > 0 ? time_limit_ms : 10000;
    parm.cb_func = spi_glpk_count_nodes;
    parm.cb_info = nodes;
    int ret = glp_intopt(P, &parm);
    *res = SP_PLAN_INFEASIBLE;
    /* presolve finds the relaxation without a primal or a dual solution: no point of the program */
    if (ret == GLP_ENOPFS || ret == GLP_ENODFS) return SP_OK;
    return spi_glpk_result(ret, glp_mip_status(P), res);
}

sp_status spi_glpk_open(glp_prob **P, int *env, int *term)
{
    *env = 0;
    SP_CHECK(spi_glpk_env_get(env));
    *term = glp_term_out(GLP_OFF);
    *P = glp_create_prob();
    glp_set_obj_dir(*P, GLP_MIN);
    return SP_OK;
}

void spi_glpk_close(glp_prob *P, int *env, int term)
{
    glp_delete_prob(P);
    glp_term_out(term);
    spi_glpk_env_put(env);
}

sp_status spi_glpk_choose(glp_prob *P, int time_limit_ms, const int *col_x, int nt, const char *what, long *nodes,
                          int *unproven, int *chosen)
{
    int n = 0;
    sp_plan_result res;
    *chosen = -1;
    sp_status st = spi_glpk_intopt(P, time_limit_ms, &n, &res);
    *nodes += n;
    if (st != SP_OK) return st;
    if (res == SP_PLAN_FEASIBLE || res == SP_PLAN_TIME_LIMIT) *unproven = 1;
    if (res != SP_PLAN_OPTIMAL && res != SP_PLAN_FEASIBLE) return SP_OK;
    int nx = 0;
    for (int i = 0; i < nt; i++)
        if (glp_mip_col_val(P, col_x[i]) > 0.5) *chosen = i, nx++;
    if (nx != 1) {
        *chosen = -1;
        return spi_fail(SP_EINTERNAL, "planner: the %s program chose %d templates", what, nx);
    }
    return SP_OK;
}

typedef struct order_ctx {
    const double *k1, *k2;
} order_ctx;
static _Thread_local order_ctx g_ord;

static int cmp_order(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (g_ord.k1[i] != g_ord.k1[j]) return g_ord.k1[i] < g_ord.k1[j] ? -1 : 1;
    if (g_ord.k2 && g_ord.k2[i] != g_ord.k2[j]) return g_ord.k2[i] < g_ord.k2[j] ? -1 : 1;
    return (i > j) - (i < j);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorted distinct values of val[0..n) into *u (new), count in *nu. */
static sp_status distinct(int n, const double *val, double **u, int *nu)
{
    double *s = malloc((size_t)(n ? n : 1) * sizeof *s);
    if (!s) return spi_fail(SP_ENOMEM, "planner: out of memory");
    memcpy(s, val, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_dbl);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!k || s[i] != s[k - 1]) s[k++] = s[i];
    *u = s;
    *nu = k;
    return SP_OK;
}

/* Number of values in u[0..n) below v (strictly) or, with or_equal, <= v. */
static int count_below(const double *u, int n, double v, int or_equal)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (u[mid] < v || (or_equal && u[mid] == v)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

void spi_milp_free(spi_milp *q)
{
    if (!q) return;
    if (q->P) glp_delete_prob(q->P);
    spi_glpk_env_put(&q->holds_env);
    free(q->ul);
    free(q->ut);
    free(q->ord);
    free(q->pi);
    free(q->fixed);
    free(q->ind);
    free(q->coef);
    free(q);
}

sp_status spi_milp_new(const spi_space *s, const double *lat, const double *ntps, spi_milp **out, double *glpk_s)
{
    const int n = s->n;
    *out = NULL;
    spi_milp *q = calloc(1, sizeof *q);
    if (!q) return spi_fail(SP_ENOMEM, "planner: out of memory");
    q->s = s;
    q->n = n;
    q->lat = lat;
    q->ntps = ntps;
    q->ord = malloc((size_t)(n ? n : 1) * sizeof *q->ord);
    q->pi = malloc((size_t)(n ? n : 1) * sizeof *q->pi);
    q->fixed = calloc((size_t)(n ? n : 1), 1);
    q->ind = malloc((size_t)(n + 32) * sizeof *q->ind);
    q->coef = malloc((size_t)(n + 32) * sizeof *q->coef);
    sp_status st = SP_OK;
    if (!q->ord || !q->pi || !q->fixed || !q->ind || !q->coef) {
        st = spi_fail(SP_ENOMEM, "planner: out of memory");
        goto fail;
    }
    SP_CHECKGOTO(distinct(n, lat, &q->ul, &q->nul), st, fail);
    SP_CHECKGOTO(distinct(n, ntps, &q->ut, &q->nut), st, fail);
    SP_CHECKGOTO(spi_glpk_env_get(&q->holds_env), st, fail);
    double t0 = now_s();
    int term = glp_term_out(GLP_OFF);
    glp_prob *P = q->P = glp_create_prob();
    glp_set_obj_dir(P, GLP_MIN);
    /* columns: x_c, then y_dv per decision */
    if (n) glp_add_cols(P, n);
    for (int c = 0; c < n; c++) glp_set_col_kind(P, c + 1, GLP_BV);
    int ycol[SPI_DEC_COUNT], ny = 0;
    for (int d = 0; d < SPI_DEC_COUNT; d++) ny += s->nval[d];
    int y0 = ny ? glp_add_cols(P, ny) : n + 1;
    for (int d = 0, k = y0; d < SPI_DEC_COUNT; d++) {
        ycol[d] = k;
        for (int v = 0; v < s->nval[d]; v++, k++) glp_set_col_kind(P, k, GLP_BV);
    }
    /* exactly one value per decision */
    glp_add_rows(P, SPI_DEC_COUNT);
    for (int d = 0; d < SPI_DEC_COUNT; d++) glp_set_row_bnds(P, 1 + d, GLP_FX, 1.0, 1.0);
    /* links Σ_{c: v(c,d)=v} x_c − y_dv = 0, memory, latency, throughput rows, built column-wise */
    int row0 = ny ? glp_add_rows(P, ny) : 0;
    for (int k = 0; k < ny; k++) glp_set_row_bnds(P, row0 + k, GLP_FX, 0.0, 0.0);
    q->mrow = glp_add_rows(P, 3);
    q->lrow = q->mrow + 1;
    q->trow = q->mrow + 2;
    glp_set_row_bnds(P, q->mrow, GLP_UP, 0.0, 0.0);
    glp_set_row_bnds(P, q->lrow, GLP_FR, 0.0, 0.0);
    glp_set_row_bnds(P, q->trow, GLP_FR, 0.0, 0.0);
    for (int c = 0; c < n; c++) {
        const spi_cand *cd = &s->c[c];
        int m = 0;
        for (int d = 0; d < SPI_DEC_COUNT; d++) {
            q->ind[++m] = row0 + (ycol[d] - y0) + cd->val[d];
            q->coef[m] = 1.0;
        }
        double mib = ceil((double)cd->mem_over / 1048576.0);
        if (mib != 0.0) {
            q->ind[++m] = q->mrow;
            q->coef[m] = mib;
        }
        q->ind[++m] = q->lrow;   /* ρ: rank among the distinct values */
        q->coef[m] = 1 + count_below(q->ul, q->nul, lat[c], 0);
        q->ind[++m] = q->trow;
        q->coef[m] = 1 + count_below(q->ut, q->nut, ntps[c], 0);
        glp_set_mat_col(P, c + 1, m, q->ind, q->coef);
    }
    for (int d = 0; d < SPI_DEC_COUNT; d++)
        for (int v = 0; v < s->nval[d]; v++) {
            int k = ycol[d] - y0 + v;
            q->ind[1] = 1 + d;
            q->coef[1] = 1.0;
            q->ind[2] = row0 + k;
            q->coef[2] = -1.0;
            glp_set_mat_col(P, y0 + k, 2, q->ind, q->coef);
        }
    glp_adv_basis(P, 0);
    glp_term_out(term);
    if (glpk_s) *glpk_s += now_s() - t0;
    *out = q;
    return SP_OK;
fail:
    spi_milp_free(q);
    return st;
}

/* The forbid rows: row k has x_c for the candidates sharing the value of
 * rival kind k with candidate `of`. */
static void set_forbid_rows(spi_milp *q, int of)
{
    const spi_space *s = q->s;
    if (!q->frow0) {
        q->frow0 = glp_add_rows(q->P, SP_RIVAL_KIND_COUNT);
        for (int k = 0; k < SP_RIVAL_KIND_COUNT; k++) glp_set_row_bnds(q->P, q->frow0 + k, GLP_FR, 0.0, 0.0);
    } else if (q->frow_of == of) return;
    for (int k = 0; k < SP_RIVAL_KIND_COUNT; k++) {
        int64_t mine = spi_cand_kind_value(&s->c[of], (sp_plan_rival_kind)k);
        int m = 0;
        for (int c = 0; c < q->n; c++)
            if (spi_cand_kind_value(&s->c[c], (sp_plan_rival_kind)k) == mine) {
                q->ind[++m] = c + 1;
                q->coef[m] = 1.0;
            }
        glp_set_mat_row(q->P, q->frow0 + k, m, q->ind, q->coef);
    }
    q->frow_of = of;
}

static int forbidden(const spi_milp *q, const spi_milp_req *r, int c)
{
    return r->forbid_kind >= 0 && spi_cand_kind_value(&q->s->c[c], (sp_plan_rival_kind)r->forbid_kind) ==
                                      spi_cand_kind_value(&q->s->c[r->forbid_of], (sp_plan_rival_kind)r->forbid_kind);
}

sp_status spi_milp_solve(spi_milp *q, const spi_milp_req *r, sp_plan_result *res, int *chosen, int *solved,
                         double *glpk_s)
{
    const int n = q->n;
    const spi_space *s = q->s;
    glp_prob *P = q->P;
    *chosen = -1;
    *solved = 0;
    /* objective: π_c = position in the order of (key1, key2, c) */
    for (int c = 0; c < n; c++) q->ord[c] = c;
    g_ord.k1 = r->key1;
    g_ord.k2 = r->key2;
    qsort(q->ord, (size_t)n, sizeof *q->ord, cmp_order);
    for (int i = 0; i < n; i++) q->pi[q->ord[i]] = i;
    /* the implied fixings: exactly one x_c is 1, so the memory, bound and
     * forbid rows reduce to conditions on it alone */
    int free_cols = 0;
    for (int c = 0; c < n; c++) {
        int out = (!r->ignore_memory && s->c[c].mem_over > 0) || q->lat[c] > r->max_lat || q->ntps[c] > r->max_ntps ||
                  forbidden(q, r, c);
        q->fixed[c] = (unsigned char)(out | 2 * q->fixed[c]);   /* bit 1: before */
        free_cols += !out;
    }
    if (!free_cols) {
        for (int c = 0; c < n; c++) q->fixed[c] = (unsigned char)(q->fixed[c] >> 1);
        *res = SP_PLAN_INFEASIBLE;
        return SP_OK;
    }
    double t0 = now_s();
    int term = glp_term_out(GLP_OFF);
    sp_status st = SP_OK;
    for (int c = 0; c < n; c++) {
        glp_set_obj_coef(P, c + 1, q->pi[c]);
        int now = q->fixed[c] & 1, before = q->fixed[c] >> 1;
        if (now != before) {
            if (now) glp_set_col_bnds(P, c + 1, GLP_FX, 0.0, 0.0);
            else glp_set_col_bnds(P, c + 1, GLP_DB, 0.0, 1.0);
        }
        q->fixed[c] = (unsigned char)now;
    }
    glp_set_row_bnds(P, q->mrow, r->ignore_memory ? GLP_FR : GLP_UP, 0.0, 0.0);
    if (isinf(r->max_lat)) glp_set_row_bnds(P, q->lrow, GLP_FR, 0.0, 0.0);
    else glp_set_row_bnds(P, q->lrow, GLP_UP, 0.0, count_below(q->ul, q->nul, r->max_lat, 1));
    if (isinf(r->max_ntps)) glp_set_row_bnds(P, q->trow, GLP_FR, 0.0, 0.0);
    else glp_set_row_bnds(P, q->trow, GLP_UP, 0.0, count_below(q->ut, q->nut, r->max_ntps, 1));
    if (r->forbid_kind >= 0) set_forbid_rows(q, r->forbid_of);
    if (q->frow0)
        for (int k = 0; k < SP_RIVAL_KIND_COUNT; k++)
            glp_set_row_bnds(P, q->frow0 + k, k == r->forbid_kind ? GLP_FX : GLP_FR, 0.0, 0.0);
    /* the LP from the last basis (warm start), then branch and bound on it */
    glp_smcp sm;
    glp_init_smcp(&sm);
    sm.msg_lev = GLP_MSG_OFF;
    sm.meth = GLP_DUALP;
    sm.presolve = GLP_OFF;
    int ret = glp_simplex(P, &sm);
    if (ret == GLP_EBADB || ret == GLP_ESING || ret == GLP_ECOND || ret == GLP_EFAIL) {
        glp_adv_basis(P, 0);   /* the basis did not survive: start afresh */
        ret = glp_simplex(P, &sm);
    }
    *solved = 1;
    int lps = glp_get_status(P);
    if (ret != 0) st = spi_fail(SP_ESOLVER, "glp_simplex failed (code %d)", ret);
    else if (lps == GLP_NOFEAS) *res = SP_PLAN_INFEASIBLE;
    else if (lps != GLP_OPT) st = spi_fail(SP_ESOLVER, "glp_simplex: LP status %d", lps);
    else {
        glp_iocp parm;
        glp_init_iocp(&parm);
        parm.presolve = GLP_OFF;   /* the LP basis above is optimal */
        parm.msg_lev = GLP_MSG_OFF;
        parm.tm_lim = r->time_limit_ms > 0 ? r->time_limit_ms : 10000;
        ret = glp_intopt(P, &parm);
        st = spi_glpk_result(ret, glp_mip_status(P), res);
        if (st == SP_OK && (*res == SP_PLAN_OPTIMAL || *res == SP_PLAN_FEASIBLE)) {
            int k = 0;
            for (int c = 0; c < n; c++)
                if (glp_mip_col_val(P, c + 1) > 0.5) {
                    *chosen = c;
                    k++;
                }
            if (k != 1) st = spi_fail(SP_EINTERNAL, "planner: the MILP chose %d candidates", k);
        }
    }
    glp_term_out(term);
    if (glpk_s) *glpk_s += now_s() - t0;
    /* the integer recoding makes this exact; check it anyway */
    if (st == SP_OK && *chosen >= 0) {
        int c = *chosen;
        int ok = (r->ignore_memory || s->c[c].mem_over <= 0) && q->lat[c] <= r->max_lat &&
                 q->ntps[c] <= r->max_ntps && !forbidden(q, r, c);
        if (!ok) st = spi_fail(SP_EINTERNAL, "planner: the MILP's layout breaks a constraint");
    }
    return st;
}

/* ---- plans ---- */
typedef struct plan_ctx {
    const spi_space *s;
    const sp_plan_opts *o;
    double *obj, *obj2, *lat, *cost, *ntps;
    spi_milp *q;
    sp_plan *p;
} plan_ctx;

static sp_status point_fill(const plan_ctx *x, int c, sp_plan_point *pt)
{
    const spi_cand *cd = &x->s->c[c];
    const spi_inst *in = &x->s->inst[cd->inst];
    memset(pt, 0, sizeof *pt);
    pt->layout = cd->layout;
    pt->chips = in->chips;
    pt->batch = in->batch;
    pt->latency_s = x->lat[c];
    pt->cost_s = x->cost[c];
    double t0 = now_s();
    sp_cost_opts co;
    sp_cost_opts_init(&co);
    co.cache = spi_space_cache(x->s);
    sp_status st = x->s->ragged ? sp_cost_eval_ragged(x->s->m, x->s->hw, &cd->layout, x->s->ragged, &co, &pt->cost)
                                : sp_cost_eval(x->s->m, x->s->hw, &cd->layout, &in->w, &co, &pt->cost);
    x->p->stats.eval_s += now_s() - t0;
    return st;
}

static void base_request(const plan_ctx *x, spi_milp_req *r)
{
    memset(r, 0, sizeof *r);
    r->time_limit_ms = x->o->time_limit_ms;
    r->max_lat = x->o->max_latency_s > 0 ? x->o->max_latency_s : INFINITY;
    r->max_ntps = x->o->min_tokens_per_s > 0 ? -x->o->min_tokens_per_s : INFINITY;
    r->forbid_kind = -1;
}

static sp_status solve(plan_ctx *x, const spi_milp_req *r, sp_plan_result *res, int *chosen)
{
    int solved;
    sp_status st = spi_milp_solve(x->q, r, res, chosen, &solved, &x->p->stats.glpk_s);
    x->p->stats.solves += solved;
    return st;
}

/* epsilon-constraint: (cost, latency) lexicographically under latency <= ε,
 * ε lowered below each point found (one row bound changed per solve) */
static sp_status trace_frontier(plan_ctx *x)
{
    sp_plan *p = x->p;
    int cap = x->o->max_frontier_points > 0 ? x->o->max_frontier_points : 256;
    p->frontier = calloc((size_t)cap, sizeof *p->frontier);
    if (!p->frontier) return spi_fail(SP_ENOMEM, "planner: out of memory");
    spi_milp_req r;
    base_request(x, &r);
    r.key1 = x->cost;
    r.key2 = x->lat;
    while (p->n_frontier < cap) {
        sp_plan_result res;
        int c;
        SP_CHECK(solve(x, &r, &res, &c));
        if (c < 0) break;
        SP_CHECK(point_fill(x, c, &p->frontier[p->n_frontier++]));
        r.max_lat = nextafter(x->lat[c], -INFINITY);
    }
    return SP_OK;
}

static void kind_text(const sp_layout *l, sp_plan_rival_kind k, char *buf, size_t n)
{
    static const char ax[] = "srxyz";
    switch (k) {
    case SP_RIVAL_FFN:
        snprintf(buf, n, "ffn %s/%s", sp_ffn_layout_name(l->phase[0].ffn), sp_ffn_layout_name(l->phase[1].ffn));
        break;
    case SP_RIVAL_ATTN:
        snprintf(buf, n, "attention %s/%s", sp_attn_layout_name(l->phase[0].attn),
                 sp_attn_layout_name(l->phase[1].attn));
        break;
    case SP_RIVAL_MESH:
        snprintf(buf, n, "mesh %dx%dx%d placement %c%c%c", l->mesh[0], l->mesh[1], l->mesh[2], ax[l->placement[0]],
                 ax[l->placement[1]], ax[l->placement[2]]);
        break;
    case SP_RIVAL_PRECISION: snprintf(buf, n, "weights %s", sp_dtype_name(l->weights)); break;
    case SP_RIVAL_OFFLOAD:
        /* which weights and KV an offloading rival keeps in host memory: its layout (the point's) */
        snprintf(buf, n, "%s", sp_layout_offloads(l) ? "with offload" : "no offload (weights and KV cache in HBM)");
        break;
    case SP_RIVAL_EXPERTS:
        if (l->experts > 1) snprintf(buf, n, "experts %d (split over the replicas)", l->experts);
        else snprintf(buf, n, "experts 1 (no expert parallelism: every replica holds every expert)");
        break;
    default:
        snprintf(buf, n, "stages %d replicas %d microbatches %d", l->stages, l->replicas, l->microbatches);
        break;
    }
}

/* The cost term that grew most from chosen to rival (decode terms weighted
 * by the steps the latency metric counts). */
static void worst_term(const sp_plan *p, const sp_cost *a, const sp_cost *b, sp_plan_rival *rv)
{
    double best = 0;
    rv->term[0] = rv->term_phase[0] = '\0';
    rv->term_delta_s = 0;
    for (int ph = 0; ph < 2; ph++) {
        sp_plan_latency lm = p->opts.latency_metric;
        double wgt = ph == 0 ? 1.0 : (double)p->workload.gen;
        if (p->opts.objective != SP_PLAN_MIN_LATENCY || lm == SP_PLAN_LAT_TOTAL) {
            /* total_s counts both phases */
        } else if ((lm == SP_PLAN_LAT_DECODE) != (ph == 1)) continue;
        else wgt = 1.0;
        const sp_phase_cost *x = ph ? &a->decode : &a->prefill, *y = ph ? &b->decode : &b->prefill;
        double d[2 + SP_COLL_COUNT];
        const char *nm[2 + SP_COLL_COUNT];
        d[0] = y->compute_s - x->compute_s, nm[0] = "compute";
        d[1] = y->memory_s - x->memory_s, nm[1] = "memory";
        for (int k = 0; k < SP_COLL_COUNT; k++)
            d[2 + k] = y->coll_s[k] - x->coll_s[k], nm[2 + k] = sp_coll_kind_name((sp_coll_kind)k);
        for (int i = 0; i < 2 + SP_COLL_COUNT; i++)
            if (d[i] * wgt > best) {
                best = d[i] * wgt;
                snprintf(rv->term, sizeof rv->term, "%s", nm[i]);
                snprintf(rv->term_phase, sizeof rv->term_phase, "%s", ph ? "decode" : "prefill");
                rv->term_delta_s = d[i];
            }
    }
}

static sp_status find_rivals(plan_ctx *x, int chosen)
{
    sp_plan *p = x->p;
    const spi_space *s = x->s;
    p->rivals = calloc(SP_RIVAL_KIND_COUNT, sizeof *p->rivals);
    if (!p->rivals) return spi_fail(SP_ENOMEM, "planner: out of memory");
    sp_status st = SP_OK;
    for (int k = 0; k < SP_RIVAL_KIND_COUNT && st == SP_OK; k++) {
        if (k == SP_RIVAL_OFFLOAD && !x->o->offload) continue;   /* nothing in the space offloads */
        spi_milp_req r;
        memset(&r, 0, sizeof r);
        r.time_limit_ms = x->o->time_limit_ms;
        r.key1 = x->obj;
        r.key2 = x->obj2;
        r.max_lat = r.max_ntps = INFINITY;
        r.forbid_kind = k;
        r.forbid_of = chosen;
        r.ignore_memory = 1;
        sp_plan_result res;
        int c;
        if ((st = solve(x, &r, &res, &c)) != SP_OK || c < 0) continue;
        sp_plan_rival *rv = &p->rivals[p->n_rivals++];
        rv->kind = (sp_plan_rival_kind)k;
        if ((st = point_fill(x, c, &rv->point)) != SP_OK) break;
        const spi_cand *cd = &s->c[c];
        rv->objective_delta = x->obj[c] - x->obj[chosen];
        if (p->opts.objective == SP_PLAN_MAX_THROUGHPUT) rv->objective_delta = -rv->objective_delta;
        int breaks = (x->o->max_latency_s > 0 && x->lat[c] > x->o->max_latency_s) ||
                     (x->o->min_tokens_per_s > 0 && cd->tokens_per_s < x->o->min_tokens_per_s);
        rv->loss = cd->mem_over > 0 ? SP_LOSS_MEMORY : breaks ? SP_LOSS_BOUND : SP_LOSS_OBJECTIVE;
        rv->shortfall_bytes = rv->point.cost.shortfall_bytes;
        worst_term(p, &p->chosen.cost, &rv->point.cost, rv);
        char what[96];
        kind_text(&cd->layout, (sp_plan_rival_kind)k, what, sizeof what);
        const char *unit = p->opts.objective == SP_PLAN_MIN_COST ? "chip-s/token"
                         : p->opts.objective == SP_PLAN_MAX_THROUGHPUT ? "tokens/s" : "s";
        double base = fabs(x->obj[chosen]) > 0 ? fabs(x->obj[chosen]) : 1.0;
        if (rv->loss == SP_LOSS_MEMORY)
            snprintf(rv->reason, sizeof rv->reason, "%s: does not fit: %.3f GiB per chip over capacity", what,
                     (double)rv->shortfall_bytes / 1073741824.0);
        else if (rv->loss == SP_LOSS_BOUND)
            snprintf(rv->reason, sizeof rv->reason, "%s: breaks the %s (%s latency %.4g s, %.4g tokens/s)", what,
                     x->lat[c] > x->o->max_latency_s && x->o->max_latency_s > 0 ? "latency bound"
                                                                                 : "throughput target",
                     sp_plan_latency_name(x->o->latency_metric), x->lat[c], cd->tokens_per_s);
        else if (rv->objective_delta == 0)
            snprintf(rv->reason, sizeof rv->reason, "%s: ties the chosen layout (%s); the fixed candidate order "
                     "broke the tie", what, p->opts.objective == SP_PLAN_MIN_LATENCY ? "same latency" : "same objective");
        else if (rv->term[0])
            snprintf(rv->reason, sizeof rv->reason, "%s: %s by %.4g %s (%+.1f%%); %s %s +%.4g s", what,
                     p->opts.objective == SP_PLAN_MAX_THROUGHPUT ? "lower" : "worse", rv->objective_delta, unit,
                     100.0 * rv->objective_delta / base, rv->term_phase, rv->term, rv->term_delta_s);
        else
            snprintf(rv->reason, sizeof rv->reason, "%s: %s by %.4g %s (%+.1f%%)", what,
                     p->opts.objective == SP_PLAN_MAX_THROUGHPUT ? "lower" : "worse", rv->objective_delta, unit,
                     100.0 * rv->objective_delta / base);
    }
    return st;
}

static int check_opts(const sp_plan_opts *o)
{
    return o->size == sizeof *o && (unsigned)o->objective < SP_PLAN_OBJECTIVE_COUNT &&
           (unsigned)o->latency_metric < SP_PLAN_LAT_COUNT && (unsigned)o->cost_metric < SP_PLAN_COST_COUNT &&
           (unsigned)o->weights < SP_PLAN_W_COUNT && (unsigned)o->kv < SP_DT_COUNT && o->max_latency_s >= 0 &&
           o->min_tokens_per_s >= 0 && o->tensor_1d >= 0 && o->microbatches_per_stage >= 0 && o->even_stages >= 0 &&
           (o->disaggregate == 0 || o->disaggregate == 1) && o->offload >= 0 && o->exhaustive >= 0;
}

/* Solves the (reduced) space into p: chosen, frontier, rivals, on one MILP. */
static sp_status plan_space(const spi_space *s, const sp_plan_opts *o, sp_plan *p, int want_rivals)
{
    plan_ctx x = {.s = s, .o = o, .p = p};
    int n = s->n;
    sp_status st = SP_OK;
    p->stats.candidates = s->priced;
    p->stats.rejected = s->rejected;
    p->stats.feasible = s->feasible;
    p->stats.columns = n;
    p->min_shortfall_bytes = s->min_short;
    if (n == 0) {
        p->result = SP_PLAN_INFEASIBLE;
        return SP_OK;
    }
    double *buf = malloc((size_t)n * 5 * sizeof *buf);
    if (!buf) return spi_fail(SP_ENOMEM, "planner: out of memory");
    x.obj = buf, x.obj2 = buf + n, x.lat = buf + 2 * n, x.cost = buf + 3 * n, x.ntps = buf + 4 * n;
    for (int c = 0; c < n; c++) {
        const spi_cand *cd = &s->c[c];
        x.lat[c] = spi_cand_latency(s, cd, o->latency_metric);
        x.cost[c] = spi_cand_cost(s, cd, o->latency_metric, o->cost_metric);
        x.ntps[c] = -cd->tokens_per_s;
        x.obj[c] = spi_cand_objective(s, cd, o);
        x.obj2[c] = spi_cand_objective2(s, cd, o);
    }
    SP_CHECKGOTO(spi_milp_new(s, x.lat, x.ntps, &x.q, &p->stats.glpk_s), st, out);
    spi_milp_req r;
    base_request(&x, &r);
    r.key1 = x.obj;
    r.key2 = x.obj2;
    int chosen;
    SP_CHECKGOTO(solve(&x, &r, &p->result, &chosen), st, out);
    if (chosen >= 0) {
        p->has_chosen = 1;
        SP_CHECKGOTO(point_fill(&x, chosen, &p->chosen), st, out);
        if (o->frontier) SP_CHECKGOTO(trace_frontier(&x), st, out);
        if (want_rivals && o->rivals) SP_CHECKGOTO(find_rivals(&x, chosen), st, out);
    }
out:
    spi_milp_free(x.q);
    free(buf);
    return st;
}

static sp_status check_args(const sp_model *m, const sp_hw *hw, const sp_workload *w, sp_plan **out)
{
    if (!m || !hw || !w || !out) return spi_fail(SP_EINVAL, "planner: NULL argument");
    *out = NULL;
    if (w->prompt < 0 || w->gen < 0 || (w->prompt == 0 && w->gen == 0))
        return spi_fail(SP_EINVAL, "workload: prompt %lld, gen %lld: need prompt >= 0, gen >= 0, not both 0",
                        (long long)w->prompt, (long long)w->gen);
    if (w->batch >= 1) SP_CHECK(sp_cost_check_workload(m, w));   /* representable before any search */
    return SP_OK;
}

static sp_status plan_new(const sp_plan_opts *opts, const sp_workload *w, int chips, sp_plan_opts *o, sp_plan **out)
{
    if (opts) *o = *opts;
    else sp_plan_opts_init(o);
    if (!check_opts(o)) return spi_fail(SP_EINVAL, "planner: bad sp_plan_opts (not initialised with sp_plan_opts_init?)");
    sp_plan *p = calloc(1, sizeof *p);
    if (!p) return spi_fail(SP_ENOMEM, "planner: out of memory");
    p->opts = *o;
    p->workload = *w;
    p->chips = chips;
    *out = p;
    return SP_OK;
}

static int max_chips_of(const sp_hw *hw, const sp_plan_opts *o)
{
    if (o->max_chips > 0) return o->max_chips;
    if (hw->max_chips > 0) return hw->max_chips;
    if (hw->topo == SP_TOPO_TORUS) return hw->torus_dims[0] * hw->torus_dims[1] * hw->torus_dims[2];
    return 4096;
}

/* A lower bound, monotone in the chip count, on what any layout needs: each
 * weight and each KV number is held by at least one chip, in at least one
 * byte, so no count below (parameters + batch × context × KV numbers per
 * token) / usable HBM per chip fits.  INT64_MAX when that does not fit in
 * 64 bits. */
static int64_t fit_chips_bound(const sp_model *m, const sp_hw *hw, const sp_workload *w)
{
    sp_model_stats st;
    spi_ckd ck = SPI_CKD_INIT;
    int64_t ctx = spi_ck_add(&ck, "context", w->prompt, w->gen);
    if (ck.overflow || sp_model_derive(m, ctx, &st) != SP_OK) return INT64_MAX;
    /* kv_bytes_per_token counts bf16: 2 bytes a number */
    int64_t need = spi_ck_add(&ck, "bytes", st.params_total,
                              spi_ck_mul3(&ck, "bytes", w->batch, ctx, st.kv_bytes_per_token / 2));
    int64_t cap = (int64_t)((double)hw->hbm_bytes * hw->hbm_usable);
    if (ck.overflow) return INT64_MAX;
    return cap > 0 ? need / cap + (need % cap != 0) : INT64_MAX;
}

/* Smallest chip count above `chips` with a layout that fits in memory:
 * counts below the monotone bound are skipped unpriced, and the search
 * stops at opts.time_limit_ms (min_chips_searched says how far it got). */
static sp_status search_fit(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                            const sp_plan_opts *o, sp_plan *p)
{
    double t0 = now_s();
    int hi = max_chips_of(hw, o);
    p->min_chips_bound = fit_chips_bound(m, hw, w);
    p->min_chips_searched = hi;
    if (chips >= hi || p->min_chips_bound > hi) return SP_OK;
    int lo = chips + 1 > p->min_chips_bound ? chips + 1 : (int)p->min_chips_bound;
    int cap = 4096, *cnt = malloc((size_t)cap * sizeof *cnt);
    if (!cnt) return spi_fail(SP_ENOMEM, "planner: out of memory");
    int k = sp_plan_chip_counts(hw, lo, hi, cnt, cap);
    /* memory only: no bounds, a constant objective */
    sp_plan_opts of = *o;
    of.max_latency_s = 0;
    of.min_tokens_per_s = 0;
    spi_reduce red = {.o = &of, .main = 1, .fit_only = 1};
    sp_status st = SP_OK;
    spi_space s;
    spi_space_init(&s, m, hw);
    for (int i = 0; i < k && st == SP_OK; i++) {
        if (o->time_limit_ms > 0 && (now_s() - t0) * 1e3 > o->time_limit_ms) {
            p->min_chips_searched = i > 0 ? cnt[i - 1] : chips;
            break;
        }
        spi_space_free(&s);
        spi_space_init(&s, m, hw);
        spi_space_narrow(&s, o);
        st = spi_space_add(&s, cnt[i], w, o->weights, o->kv);
        p->stats.eval_s += s.eval_s;
        if (st == SP_OK) st = spi_space_reduce(&s, 0, &red);
        if (st == SP_OK) st = spi_space_finish(&s);
        if (st != SP_OK || !s.n) continue;
        double z[1] = {0.0}, lat[1] = {0.0}, ntps[1] = {0.0};
        spi_milp *q;
        if ((st = spi_milp_new(&s, lat, ntps, &q, &p->stats.glpk_s)) != SP_OK) break;
        spi_milp_req r = {.key1 = z, .key2 = z, .max_lat = INFINITY, .max_ntps = INFINITY, .forbid_kind = -1,
                          .time_limit_ms = o->time_limit_ms};
        sp_plan_result res;
        int c, solved;
        st = spi_milp_solve(q, &r, &res, &c, &solved, &p->stats.glpk_s);
        p->stats.solves += solved;
        spi_milp_free(q);
        if (st == SP_OK && c >= 0) {
            p->min_chips_fit = cnt[i];
            break;
        }
    }
    spi_space_free(&s);
    free(cnt);
    return st;
}

/* The best measure (spi_split_measure) among the space's admissible
 * candidates: fitting, within the bounds; INFINITY when none is. */
static double incumbent(const spi_space *s, const sp_plan_opts *o)
{
    double inc = INFINITY;
    for (int i = 0; i < s->n; i++) {
        const spi_cand *c = &s->c[i];
        double v = spi_split_measure(s, c, o);
        if (spi_cand_admissible(s, c, o) && v < inc) inc = v;
    }
    return inc;
}

/* A layout a program over priced stages found (the pipeline program's
 * split, the offload program's choice), priced by sp_cost_eval like every
 * candidate, checked against the program's optimum phi (the programs state
 * the cost model's roll-up, not a copy of its figures: equal to 1e-6), and
 * pushed into the space when it fits and beats the incumbent inc.  *better
 * says whether it did. */
static sp_status join_space(spi_space *s, const sp_plan_opts *o, sp_plan *p, const char *what, int from,
                            const sp_layout *l, double phi, double inc, int *better)
{
    spi_cand c = s->c[from];
    c.layout = *l;
    if (sp_layout_uneven(l)) c.key[SPI_DEC_PIPE] |= (int64_t)1 << 62;   /* an uneven split: a pipeline value of its own */
    if (sp_layout_hetero(l)) {
        /* stages of their own mesh: a pipeline value of its own, and a layout the checks take
         * (the program offers only meshes that fill whole nodes: sp_layout_check says so) */
        c.key[SPI_DEC_PIPE] |= (int64_t)1 << 61;
        sp_error err;
        if (sp_layout_check(l, s->m, s->hw, sp_layout_chips(l), s->inst[0].w.batch, &err) != SP_OK) {
            char t[320];
            return spi_fail(SP_EINTERNAL, "planner: the %s chose %s, which the layout checks refuse: %s", what,
                            sp_layout_format(l, t, sizeof t), err.text);
        }
    }
    sp_cost cost;
    sp_cost_opts co;
    sp_cost_opts_init(&co);
    co.cache = spi_space_cache(s);
    double t0 = now_s();
    SP_CHECK(sp_cost_eval(s->m, s->hw, &c.layout, &s->inst[0].w, &co, &cost));
    p->stats.eval_s += now_s() - t0;
    c.mem_over = cost.mem.total - cost.capacity;
    if (cost.host_shortfall_bytes > 0 && cost.host_shortfall_bytes > c.mem_over) c.mem_over = cost.host_shortfall_bytes;
    c.prefill_s = cost.prefill_s;
    c.decode_step_s = cost.decode_step_s;
    c.total_s = cost.total_s;
    c.tokens_per_s = cost.tokens_per_s;
    c.cost_total = cost.cost_chip_s_per_token;
    double v = spi_split_measure(s, &c, o);
    if (!(fabs(v - phi) <= 1e-6 * v + 1e-12) || c.mem_over > 0) {
        char t[320];
        return spi_fail(SP_EINTERNAL, "planner: the %s priced %s at %.9g s%s, the cost model at %.9g s", what,
                        sp_layout_format(&c.layout, t, sizeof t), phi, c.mem_over > 0 ? " (fitting)" : "", v);
    }
    *better = v < inc;
    return *better ? spi_space_push(s, &c) : SP_OK;
}

/* The offload program over the space's layouts (plan_offload.c): its
 * layout joins the space when it beats every admissible layout there. */
static sp_status offload_layouts(spi_space *s, const sp_plan_opts *o, sp_plan *p)
{
    int weights;
    const char *why = spi_offload_refusal(s->m, s->hw, &weights);
    if (why) {
        snprintf(p->offload_note, sizeof p->offload_note, "offload not offered: %s", why);
        return SP_OK;
    }
    if (!weights)
        snprintf(p->offload_note, sizeof p->offload_note,
                 "weights not offered for offload: %s has dense layers between its MoE layers (KV only)", s->m->name);
    double inc = incumbent(s, o);
    spi_offload_req r = {.o = o, .incumbent = inc};
    spi_offload_out so;
    SP_CHECK(spi_offload_solve(s, 0, &r, &so, &p->stats.glpk_s));
    p->stats.eval_s += so.eval_s;
    p->stats.solves += so.solved;
    p->stats.offload_templates = so.templates;
    p->stats.offload_kept = so.kept;
    p->stats.offload_blocks = so.blocks;
    p->stats.offload_rows = so.rows;
    p->stats.offload_cols = so.cols;
    p->stats.offload_nodes = so.nodes;
    if (!so.found) return SP_OK;
    return join_space(s, o, p, "offload program", so.template_cand, &so.layout, so.phi, inc, &p->stats.offload_better);
}

/* The pipeline program over the space's pipelines (plan_stages.c): when its
 * split is better than every admissible layout of the space, the split,
 * priced by sp_cost_eval like every candidate, joins the space. */
static sp_status split_pipelines(spi_space *s, const sp_plan_opts *o, sp_plan *p)
{
    double inc = incumbent(s, o);
    spi_split_req r = {.o = o, .incumbent = inc, .batch = 0};
    spi_split_out so;
    SP_CHECK(spi_split_solve(s, 0, &r, &so, &p->stats.glpk_s));
    p->stats.eval_s += so.eval_s;
    p->stats.solves += so.solved;
    p->stats.split_templates = so.templates;
    p->stats.split_kept = so.kept;
    p->stats.split_blocks = so.blocks;
    p->stats.split_rows = so.rows;
    p->stats.split_cols = so.cols;
    p->stats.split_nodes = so.nodes;
    if (!so.found) return SP_OK;
    return join_space(s, o, p, "pipeline program", so.template_cand, &so.layout, so.phi, inc, &p->stats.split_better);
}

/* The chosen layout's stages, priced one by one. */
static sp_status fill_stages(sp_cost_cache *cache, const sp_model *m, const sp_hw *hw, sp_plan *p)
{
    if (!p->has_chosen) return SP_OK;
    const sp_layout *l = &p->chosen.layout;
    p->stages = calloc((size_t)l->stages, sizeof *p->stages);
    if (!p->stages) return spi_fail(SP_ENOMEM, "planner: out of memory");
    sp_workload w = p->workload;
    w.batch = p->chosen.batch;   /* a frontier's point carries its own */
    sp_cost_opts co;
    sp_cost_opts_init(&co);
    co.cache = cache;
    for (int s = 0; s < l->stages; s++) {
        sp_stage_cost sc;
        if (p->opts.workload) SP_CHECK(sp_cost_stage_eval_ragged(m, hw, l, p->opts.workload, &co, s, &sc));
        else SP_CHECK(sp_cost_stage_eval(m, hw, l, &w, &co, s, &sc));
        sp_plan_stage *x = &p->stages[p->n_stages++];
        x->first_layer = sc.first_layer;
        x->layers = sc.layers;
        x->chips = (int)sp_layout_stage_chips(l, s);   /* replicas × the stage's mesh (its own: stage_mesh) */
        sp_layout_stage_mesh(l, s, x->mesh);
        x->prefill_s = (double)sc.prefill_ps * 1e-12;
        x->decode_step_s = (double)sc.decode_ps * 1e-12;
        x->memory_bytes = sc.mem.total;
        x->offload_layers = sp_layout_offload_layers(l, s);
        for (int k = 0; k < SP_WKIND_COUNT; k++) x->offload_kind_layers[k] = sp_layout_offload_kind_layers(l, s, (sp_wkind)k);
        x->offload_kv = l->offload_kv;
        x->host_bytes = sc.mem.host_total;
    }
    return SP_OK;
}

/* Separate groups (plan_groups.c): the best pair, chosen over the shared
 * layout when its objective is smaller. */
static sp_status plan_groups(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                             const sp_plan_opts *o, sp_plan *p)
{
    sp_plan_groups *r = &p->groups;
    r->objective = r->shared_objective = INFINITY;
    if (chips < 2 || w->prompt < 1 || w->gen < 1) return SP_OK;
    r->searched = 1;
    spi_groups g;
    SP_CHECK(spi_groups_cands(m, hw, chips, w, o, &g));
    r->prefill_candidates = g.np;
    r->decode_candidates = g.nd;
    spi_groups_out go;
    sp_status st = spi_groups_solve(&g, m, hw, chips, w, o, &go);
    p->stats.eval_s += g.eval_s + go.eval_s;
    p->stats.glpk_s += go.glpk_s;
    p->stats.solves += go.solved;
    r->eval_s = g.eval_s + go.eval_s;
    spi_groups_free(&g);
    SP_CHECK(st);
    r->rows = go.rows;
    r->cols = go.cols;
    r->priced = go.priced;
    r->retired = go.retired;
    r->solves = go.solved;
    r->proven = go.proven;
    if (p->has_chosen) r->shared_objective = spi_groups_objective(m, hw, chips, w, o, &p->chosen.cost);
    if (!go.found) return SP_OK;
    r->found = 1;
    r->objective = go.objective;
    sp_plan_point *b = &r->best;
    b->layout = go.layout;
    b->cost = go.cost;
    b->chips = chips;
    b->batch = w->batch;
    b->latency_s = o->latency_metric == SP_PLAN_LAT_DECODE    ? go.cost.decode_step_s
                   : o->latency_metric == SP_PLAN_LAT_PREFILL ? go.cost.prefill_s
                                                              : go.cost.total_s;
    /* cost per token: the cost metric of the phase where it asks, else the steady state's */
    b->cost_s = o->cost_metric == SP_PLAN_COST_PHASE && o->latency_metric == SP_PLAN_LAT_DECODE
                    ? chips * go.cost.decode_step_s / (double)w->batch
                : o->cost_metric == SP_PLAN_COST_PHASE && o->latency_metric == SP_PLAN_LAT_PREFILL
                    ? chips * go.cost.prefill_s / ((double)w->batch * (double)w->prompt)
                    : go.cost.cost_chip_s_per_token;
    if (!(go.objective < r->shared_objective)) return SP_OK;   /* ties keep the shared layout */
    r->chosen = 1;
    p->chosen = *b;
    p->has_chosen = 1;
    p->result = go.proven && (p->result == SP_PLAN_OPTIMAL || p->result == SP_PLAN_INFEASIBLE) ? SP_PLAN_OPTIMAL
                                                                                              : SP_PLAN_FEASIBLE;
    free(p->stages);   /* a shared layout's stages */
    p->stages = NULL;
    p->n_stages = 0;
    return SP_OK;
}

/* A plan of a ragged batch (sp_plan_opts.workload): w its padded batch; what the planner does
 * not do for one refused by name */
static sp_status workload_check(const sp_plan_opts *o, const sp_workload *w)
{
    const sp_ragged *r = o->workload;
    if (!r) return SP_OK;
    if (o->offload || o->disaggregate)
        return spi_fail(SP_ENOTSUP, "plan of a workload file (a ragged batch) with %s: not implemented",
                        o->offload ? "offload" : "separate prefill and decode groups (disaggregate)");
    sp_workload pw = sp_workload_padded(r);
    if (w->batch != pw.batch || w->prompt != pw.prompt || w->gen != pw.gen)
        return spi_fail(SP_EINVAL, "plan of a ragged batch: the workload must be its padded batch (batch %lld, prompt "
                                   "%lld, gen %lld), got %lld, %lld, %lld", (long long)pw.batch, (long long)pw.prompt,
                        (long long)pw.gen, (long long)w->batch, (long long)w->prompt, (long long)w->gen);
    return SP_OK;
}

sp_status sp_plan_solve(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                        const sp_plan_opts *opts, sp_plan **out)
{
    double t0 = now_s();
    SP_CHECK(check_args(m, hw, w, out));
    if (chips < 1) return spi_fail(SP_EINVAL, "chips must be >= 1 (got %d)", chips);
    if (w->batch < 1) return spi_fail(SP_EINVAL, "batch must be >= 1 (got %lld)", (long long)w->batch);
    sp_plan_opts o;
    sp_plan *p;
    SP_CHECK(plan_new(opts, w, chips, &o, &p));
    sp_status st;
    if ((st = workload_check(&o, w))) {
        sp_plan_free(p);
        return st;
    }
    spi_space s;
    spi_space_init(&s, m, hw);
    spi_space_narrow(&s, &o);
    s.ragged = o.workload;
    /* the pipeline program prices a stage by its position and layer count; with dense layers
     * between MoE layers a stage's price also depends on its first layer: even splits only
     * (and for a ragged batch, which it does not price) */
    const int split = !o.even_stages && sp_model_dense_ff(m) == 0 && !o.workload;
    s.split_bounds = split;   /* each template's bound priced with it */
    /* layouts whose decode proves they change no answer are not priced further (the offload
     * program reads every layout of the space as a template: not with it) */
    if (!o.exhaustive && !o.offload && !o.workload) s.prune = &o;
    spi_reduce red = {.o = &o, .main = 1, .frontier = o.frontier, .rivals = o.rivals};
    SP_CHECKGOTO(spi_space_add(&s, chips, w, o.weights, o.kv), st, fail);
    if (o.offload) SP_CHECKGOTO(offload_layouts(&s, &o, p), st, fail);
    if (split) SP_CHECKGOTO(split_pipelines(&s, &o, p), st, fail);
    SP_CHECKGOTO(spi_space_reduce(&s, 0, &red), st, fail);
    SP_CHECKGOTO(spi_space_finish(&s), st, fail);
    p->stats.eval_s += s.eval_s;
    p->stats.pruned = s.pruned;
    SP_CHECKGOTO(plan_space(&s, &o, p, 1), st, fail);
    SP_CHECKGOTO(fill_stages(spi_space_cache(&s), m, hw, p), st, fail);
    if (o.disaggregate) SP_CHECKGOTO(plan_groups(m, hw, chips, w, &o, p), st, fail);
    if (p->result == SP_PLAN_INFEASIBLE && o.search_min_chips && p->min_shortfall_bytes != 0)
        SP_CHECKGOTO(search_fit(m, hw, chips, w, &o, p), st, fail);
    spi_space_free(&s);
    p->stats.total_s = now_s() - t0;
    *out = p;
    return SP_OK;
fail:
    spi_space_free(&s);
    sp_plan_free(p);
    return st;
}

/* The frontiers of n_lm latency metrics over one pricing of the union of
 * the (chips, batch) spaces.  Each instance is priced into `raw` (its buffer
 * reused from one instance to the next) and reduced into each metric's space
 * as soon as it is priced, so only candidates that may be that metric's
 * optimum or frontier points are kept; the union is reduced once more. */
static sp_status frontier_impl(const sp_model *m, const sp_hw *hw, const int *chips, int n_chips,
                               const int64_t *batches, int n_batches, const sp_workload *w,
                               const sp_plan_opts *opts, const sp_plan_latency *lms, int n_lm, sp_plan **out)
{
    double t0 = now_s();
    if (!out) return spi_fail(SP_EINVAL, "planner: NULL argument");
    for (int k = 0; k < n_lm; k++) out[k] = NULL;
    SP_CHECK(check_args(m, hw, w, &out[0]));
    if (!chips || !batches || n_chips < 1 || n_batches < 1 || n_chips * n_batches > 128)
        return spi_fail(SP_EINVAL, "frontier: need 1 to 128 (chips, batch) pairs (got %d × %d)", n_chips, n_batches);
    if (!lms || n_lm < 1 || n_lm > SP_PLAN_LAT_COUNT)
        return spi_fail(SP_EINVAL, "frontier: need 1 to %d latency metrics (got %d)", SP_PLAN_LAT_COUNT, n_lm);
    for (int k = 0; k < n_lm; k++)
        if ((unsigned)lms[k] >= SP_PLAN_LAT_COUNT) return spi_fail(SP_EINVAL, "frontier: bad latency metric %d", lms[k]);
    sp_plan_opts o[SP_PLAN_LAT_COUNT];
    spi_space s[SP_PLAN_LAT_COUNT], raw;
    spi_reduce red[SP_PLAN_LAT_COUNT];
    spi_space_init(&raw, m, hw);
    for (int k = 0; k < n_lm; k++) spi_space_init(&s[k], m, hw);
    sp_status st = SP_OK;
    for (int k = 0; k < n_lm; k++) {
        SP_CHECKGOTO(plan_new(opts, w, chips[0], &o[k], &out[k]), st, fail);
        if (k == 0) spi_space_narrow(&raw, &o[0]);
        o[k].frontier = 1;
        o[k].latency_metric = lms[k];
        out[k]->opts = o[k];
        red[k] = (spi_reduce){.o = &o[k], .main = 1, .frontier = 1};
    }
    if (o[0].disaggregate) {
        st = spi_fail(SP_ENOTSUP, "a frontier across instances with separate prefill and decode groups "
                                  "(sp_plan_opts.disaggregate) is not implemented (sp_plan_solve searches them)");
        goto fail;
    }
    if (o[0].workload) {
        st = spi_fail(SP_ENOTSUP, "a frontier across instances of a workload file (sp_plan_opts.workload: one batch "
                                  "of its own sequences) is not implemented (sp_plan_solve plans it)");
        goto fail;
    }
    for (int i = 0; i < n_chips; i++)
        for (int j = 0; j < n_batches; j++) {
            if (chips[i] < 1 || batches[j] < 1) {
                st = spi_fail(SP_EINVAL, "frontier: chips and batch must be >= 1");
                goto fail;
            }
            sp_workload wi = *w;
            wi.batch = batches[j];
            SP_CHECKGOTO(sp_cost_check_workload(m, &wi), st, fail);
            raw.n = 0;
            SP_CHECKGOTO(spi_space_add(&raw, chips[i], &wi, o[0].weights, o[0].kv), st, fail);
            for (int k = 0; k < n_lm; k++) SP_CHECKGOTO(spi_space_append(&s[k], &raw, &red[k]), st, fail);
        }
    for (int k = 0; k < n_lm; k++) {
        sp_plan *p = out[k];
        SP_CHECKGOTO(spi_space_reduce(&s[k], 0, &red[k]), st, fail);
        SP_CHECKGOTO(spi_space_finish(&s[k]), st, fail);
        s[k].priced = raw.priced;
        s[k].rejected = raw.rejected;
        s[k].feasible = raw.feasible;
        s[k].min_short = raw.min_short;
        p->stats.eval_s += raw.eval_s;
        SP_CHECKGOTO(plan_space(&s[k], &o[k], p, 0), st, fail);
        if (p->n_frontier > 0) p->chosen = p->frontier[0];
        SP_CHECKGOTO(fill_stages(spi_space_cache(&raw), m, hw, p), st, fail);
        p->stats.total_s = now_s() - t0;
    }
    for (int k = 0; k < n_lm; k++) spi_space_free(&s[k]);
    spi_space_free(&raw);
    return SP_OK;
fail:
    for (int k = 0; k < n_lm; k++) {
        spi_space_free(&s[k]);
        sp_plan_free(out[k]);
        out[k] = NULL;
    }
    spi_space_free(&raw);
    return st;
}

sp_status sp_plan_frontier(const sp_model *m, const sp_hw *hw, const int *chips, int n_chips,
                           const int64_t *batches, int n_batches, const sp_workload *w,
                           const sp_plan_opts *opts, sp_plan **out)
{
    sp_plan_opts o;
    if (opts) o = *opts;
    else sp_plan_opts_init(&o);
    if (!check_opts(&o)) return spi_fail(SP_EINVAL, "planner: bad sp_plan_opts (not initialised with sp_plan_opts_init?)");
    return frontier_impl(m, hw, chips, n_chips, batches, n_batches, w, &o, &o.latency_metric, 1, out);
}

sp_status sp_plan_frontiers(const sp_model *m, const sp_hw *hw, const int *chips, int n_chips,
                            const int64_t *batches, int n_batches, const sp_workload *w, const sp_plan_opts *opts,
                            const sp_plan_latency *metrics, int n_metrics, sp_plan **out)
{
    return frontier_impl(m, hw, chips, n_chips, batches, n_batches, w, opts, metrics, n_metrics, out);
}

int sp_plan_chip_counts(const sp_hw *hw, int lo, int hi, int *out, int cap)
{
    int k = 0;
    if (lo < 1) lo = 1;
    if (hw->topo == SP_TOPO_TORUS) {
        int t[3] = {hw->torus_dims[0], hw->torus_dims[1], hw->torus_dims[2]};
        for (int n = lo; n <= hi && k < cap; n++) {
            int ok = 0;
            for (int a = 1; a <= n && !ok; a++) {
                if (n % a) continue;
                for (int b = 1; b <= n / a && !ok; b++) {
                    if ((n / a) % b) continue;
                    int mesh[3] = {a, b, n / a / b};
                    ok = mesh[0] <= t[0] && mesh[1] <= t[1] && mesh[2] <= t[2];
                }
            }
            if (ok) out[k++] = n;
        }
        return k;
    }
    int g = hw->chips_per_node > 0 ? hw->chips_per_node : 1;
    for (int n = 1; n < g && n <= hi && k < cap; n *= 2)
        if (n >= lo && g % n == 0) out[k++] = n;
    for (int n = g; n <= hi && k < cap; n += g)
        if (n >= lo) out[k++] = n;
    return k;
}

/* The chip counts a capacity query tries, ascending: those the topology
 * allows from the fit bound (no count below it can hold the weights and KV
 * cache) to max_chips_of.  *cnt is new (caller frees); SP_EINFEASIBLE with
 * a message when the bound is above the limit. */
static sp_status min_chips_counts(const sp_model *m, const sp_hw *hw, const sp_workload *w, const sp_plan_opts *o,
                                  int **cnt, int *k)
{
    int hi = max_chips_of(hw, o);
    int64_t bound = fit_chips_bound(m, hw, w);   /* no count below it fits: not solved */
    if (bound > hi)
        return spi_fail(SP_EINFEASIBLE, "no chip count up to %d fits: the weights and KV cache need at least %lld chips",
                        hi, (long long)bound);
    int cap = 4096;
    if (!(*cnt = malloc((size_t)cap * sizeof **cnt))) return spi_fail(SP_ENOMEM, "planner: out of memory");
    *k = sp_plan_chip_counts(hw, bound > 1 ? (int)bound : 1, hi, *cnt, cap);
    return SP_OK;
}

sp_status sp_plan_min_chips(const sp_model *m, const sp_hw *hw, const sp_workload *w, const sp_plan_opts *opts,
                            int *chips_out, sp_plan **out)
{
    if (!chips_out) return spi_fail(SP_EINVAL, "sp_plan_min_chips: NULL argument");
    SP_CHECK(check_args(m, hw, w, out));
    sp_plan_opts o;
    if (opts) o = *opts;
    else sp_plan_opts_init(&o);
    if (!check_opts(&o)) return spi_fail(SP_EINVAL, "planner: bad sp_plan_opts");
    int *cnt = NULL, k = 0;
    SP_CHECK(min_chips_counts(m, hw, w, &o, &cnt, &k));
    sp_plan_opts oi = o;
    oi.search_min_chips = 0;
    for (int i = 0; i < k; i++) {
        sp_plan *p = NULL;
        sp_status st = sp_plan_solve(m, hw, cnt[i], w, &oi, &p);
        if (st != SP_OK) {
            free(cnt);
            return st;
        }
        if (p->has_chosen) {
            *chips_out = cnt[i];
            *out = p;
            free(cnt);
            return SP_OK;
        }
        sp_plan_free(p);
    }
    free(cnt);
    return spi_fail(SP_EINFEASIBLE, "no chip count up to %d meets the targets", max_chips_of(hw, &o));
}

sp_status sp_plan_min_chips_targets(const sp_model *m, const sp_hw *hw, const sp_workload *w, const sp_plan_opts *opts,
                                    const double *targets_s, int n, int *chips_out, sp_plan **out)
{
    if (!chips_out || (n > 0 && !targets_s)) return spi_fail(SP_EINVAL, "sp_plan_min_chips_targets: NULL argument");
    SP_CHECK(check_args(m, hw, w, out));
    for (int t = 0; t < n; t++) {
        if (!(targets_s[t] > 0)) return spi_fail(SP_EINVAL, "sp_plan_min_chips_targets: target %d is not > 0", t);
        chips_out[t] = 0;
        out[t] = NULL;
    }
    sp_plan_opts o;
    if (opts) o = *opts;
    else sp_plan_opts_init(&o);
    if (!check_opts(&o)) return spi_fail(SP_EINVAL, "planner: bad sp_plan_opts");
    int *cnt = NULL, k = 0;
    sp_status st = min_chips_counts(m, hw, w, &o, &cnt, &k);
    if (st == SP_EINFEASIBLE) return SP_OK;   /* no count fits: every target unmet */
    SP_CHECK(st);
    /* per count: the least latency (bounds other than the latency kept);
     * a target it meets gets this count and the cheapest layout meeting it */
    sp_plan_opts ol = o, oc = o;
    ol.objective = SP_PLAN_MIN_LATENCY, ol.max_latency_s = 0, ol.frontier = 0, ol.rivals = 0, ol.search_min_chips = 0;
    oc.objective = SP_PLAN_MIN_COST, oc.frontier = 0, oc.rivals = 0, oc.search_min_chips = 0;
    int left = n;
    for (int i = 0; i < k && left > 0 && st == SP_OK; i++) {
        sp_plan *p = NULL;
        if ((st = sp_plan_solve(m, hw, cnt[i], w, &ol, &p)) != SP_OK) break;
        double best = p->has_chosen ? p->chosen.latency_s : INFINITY;
        sp_plan_free(p);
        for (int t = 0; t < n && st == SP_OK; t++) {
            if (chips_out[t] || !(best <= targets_s[t])) continue;
            oc.max_latency_s = targets_s[t];
            if ((st = sp_plan_solve(m, hw, cnt[i], w, &oc, &p)) != SP_OK) break;
            if (p->has_chosen) chips_out[t] = cnt[i], out[t] = p, left--;
            else sp_plan_free(p);   /* the bound sits at the least latency within the solver's tolerance */
        }
    }
    free(cnt);
    if (st != SP_OK)
        for (int t = 0; t < n; t++) {
            sp_plan_free(out[t]);
            out[t] = NULL;
            chips_out[t] = 0;
        }
    return st;
}

void sp_plan_free(sp_plan *p)
{
    if (!p) return;
    free(p->frontier);
    free(p->rivals);
    free(p->stages);
    free(p);
}

/* ---- JSON ---- */
static json_t *point_json(const sp_plan_point *pt)
{
    json_t *o = json_object();
    json_object_set_new(o, "chips", json_integer(pt->chips));
    json_object_set_new(o, "batch", json_integer(pt->batch));
    json_object_set_new(o, "latency_s", json_real(pt->latency_s));
    json_object_set_new(o, "cost_chip_s_per_token", json_real(pt->cost_s));
    json_object_set_new(o, "layout", (json_t *)sp_layout_to_json(&pt->layout));
    json_object_set_new(o, "costs", (json_t *)sp_cost_to_json(&pt->cost, &pt->layout));
    return o;
}

void *sp_plan_to_json(const sp_plan *p)
{
    if (!p) return NULL;
    json_t *o = json_object();
    json_object_set_new(o, "status", json_string(sp_plan_result_name(p->result)));
    json_object_set_new(o, "objective", json_string(sp_plan_objective_name(p->opts.objective)));
    json_object_set_new(o, "latency_metric", json_string(sp_plan_latency_name(p->opts.latency_metric)));
    json_object_set_new(o, "cost_metric", json_string(p->opts.cost_metric == SP_PLAN_COST_PHASE ? "phase" : "total"));
    if (p->opts.max_latency_s > 0) json_object_set_new(o, "max_latency_s", json_real(p->opts.max_latency_s));
    if (p->opts.min_tokens_per_s > 0) json_object_set_new(o, "min_tokens_per_s", json_real(p->opts.min_tokens_per_s));
    json_object_set_new(o, "chips", json_integer(p->chips));
    json_object_set_new(o, "workload", json_pack("{sIsIsI}", "batch", (json_int_t)p->workload.batch, "prompt",
                                                 (json_int_t)p->workload.prompt, "gen", (json_int_t)p->workload.gen));
    if (p->has_chosen) {
        json_t *ch = json_object();
        json_object_set_new(ch, "layout", (json_t *)sp_layout_to_json(&p->chosen.layout));
        char text[256];
        json_object_set_new(ch, "layout_text", json_string(sp_layout_format(&p->chosen.layout, text, sizeof text)));
        json_object_set_new(ch, "chips", json_integer(p->chosen.chips));
        json_object_set_new(ch, "batch", json_integer(p->chosen.batch));
        json_object_set_new(ch, "costs", (json_t *)sp_cost_to_json(&p->chosen.cost, &p->chosen.layout));
        const sp_layout *l = &p->chosen.layout;
        json_t *sa = json_array();
        for (int i = 0; i < p->n_stages; i++) {
            const sp_plan_stage *x = &p->stages[i];
            json_t *j = json_object();
            json_object_set_new(j, "stage", json_integer(i));
            json_object_set_new(j, "first_layer", json_integer(x->first_layer));
            json_object_set_new(j, "layers", json_integer(x->layers));
            json_object_set_new(j, "embedding", json_boolean(i == 0));
            json_object_set_new(j, "lm_head", json_boolean(i == p->n_stages - 1));
            json_object_set_new(j, "chips", json_integer(x->chips));
            json_object_set_new(j, "replicas", json_integer(l->replicas));
            json_object_set_new(j, "mesh", json_pack("[iii]", x->mesh[0], x->mesh[1], x->mesh[2]));
            json_object_set_new(j, "layout", json_pack("{sss{ssss}s{ssss}}", "weights", sp_dtype_name(l->weights),
                                                        "prefill", "ffn", sp_ffn_layout_name(l->phase[0].ffn), "attn",
                                                        sp_attn_layout_name(l->phase[0].attn), "decode", "ffn",
                                                        sp_ffn_layout_name(l->phase[1].ffn), "attn",
                                                        sp_attn_layout_name(l->phase[1].attn)));
            json_object_set_new(j, "prefill_s", json_real(x->prefill_s));
            json_object_set_new(j, "decode_step_s", json_real(x->decode_step_s));
            json_object_set_new(j, "memory_bytes", json_integer(x->memory_bytes));
            if (p->opts.offload || sp_layout_offloads(l)) {   /* the offload decision (plan --offload) */
                json_object_set_new(j, "offload_layers", json_integer(x->offload_layers));
                json_object_set_new(j, "offload_attn_layers", json_integer(x->offload_kind_layers[SP_WKIND_ATTN]));
                json_object_set_new(j, "offload_ffn_layers", json_integer(x->offload_kind_layers[SP_WKIND_FFN]));
                json_object_set_new(j, "offload_kv", json_real(x->offload_kv));
                json_object_set_new(j, "host_bytes", json_integer(x->host_bytes));
            }
            json_array_append_new(sa, j);
        }
        json_object_set_new(ch, "stages", sa);
        json_object_set_new(o, "chosen", ch);
    } else json_object_set_new(o, "chosen", json_null());
    json_t *fr = json_array();
    for (int i = 0; i < p->n_frontier; i++) json_array_append_new(fr, point_json(&p->frontier[i]));
    json_object_set_new(o, "frontier", fr);
    json_t *rv = json_array();
    for (int i = 0; i < p->n_rivals; i++) {
        const sp_plan_rival *r = &p->rivals[i];
        json_t *j = point_json(&r->point);
        json_object_set_new(j, "kind", json_string(sp_plan_rival_kind_name(r->kind)));
        json_object_set_new(j, "loss", json_string(NAME_OF(loss_names, r->loss)));
        json_object_set_new(j, "reason", json_string(r->reason));
        json_object_set_new(j, "shortfall_bytes", json_integer(r->shortfall_bytes));
        json_object_set_new(j, "objective_delta", json_real(r->objective_delta));
        json_object_set_new(j, "term", json_string(r->term));
        json_object_set_new(j, "term_phase", json_string(r->term_phase));
        json_object_set_new(j, "term_delta_s", json_real(r->term_delta_s));
        json_array_append_new(rv, j);
    }
    json_object_set_new(o, "rivals", rv);
    if (p->result == SP_PLAN_INFEASIBLE) {
        /* Only true figures: the -1 and 0 sentinels of sp_plan become a flag
         * ("no_layout_applies") and an absent "min_chips_fit". */
        json_t *inf = json_object();
        if (p->min_shortfall_bytes < 0)
            json_object_set_new(inf, "no_layout_applies", json_true());
        else
            json_object_set_new(inf, "min_shortfall_bytes", json_integer((json_int_t)p->min_shortfall_bytes));
        if (p->min_chips_fit > 0) json_object_set_new(inf, "min_chips_fit", json_integer(p->min_chips_fit));
        json_object_set_new(o, "infeasible", inf);
    }
    if (p->result == SP_PLAN_INFEASIBLE && p->min_chips_searched > 0) {
        json_t *inf = json_object_get(o, "infeasible");
        json_object_set_new(inf, "min_chips_searched", json_integer(p->min_chips_searched));
        json_object_set_new(inf, "min_chips_bound", json_integer((json_int_t)p->min_chips_bound));
    }
    json_object_set_new(o, "stats", json_pack("{sisisisisisfsfsf}", "candidates", p->stats.candidates, "rejected",
                                              p->stats.rejected, "pruned", p->stats.pruned, "feasible", p->stats.feasible, "solves",
                                              p->stats.solves, "eval_s", p->stats.eval_s, "glpk_s", p->stats.glpk_s,
                                              "total_s", p->stats.total_s));
    if (p->groups.searched) {
        /* separate prefill and decode groups: the best pair, its split, and how it was found */
        const sp_plan_groups *g = &p->groups;
        json_t *j = json_object();
        json_object_set_new(j, "chosen", json_boolean(g->chosen));
        json_object_set_new(j, "proven", json_boolean(g->proven));
        if (g->found) {
            json_t *b = point_json(&g->best);
            char text[320];
            json_object_set_new(b, "layout_text", json_string(sp_layout_format(&g->best.layout, text, sizeof text)));
            json_object_set_new(b, "prefill_chips", json_integer(g->best.cost.group_chips[SP_PHASE_PREFILL]));
            json_object_set_new(b, "decode_chips", json_integer(g->best.cost.group_chips[SP_PHASE_DECODE]));
            json_object_set_new(j, "best", b);
            json_object_set_new(j, "objective", json_real(g->objective));
        } else json_object_set_new(j, "best", json_null());
        json_object_set_new(j, "shared_objective", isinf(g->shared_objective) ? json_null() : json_real(g->shared_objective));
        json_object_set_new(j, "program", json_pack("{sisisisisisisi}", "prefill_candidates", g->prefill_candidates,
                                                    "decode_candidates", g->decode_candidates, "rows", g->rows,
                                                    "columns", g->cols, "pairs_priced", g->priced, "groups_retired",
                                                    g->retired, "solves", g->solves));
        json_object_set_new(o, "groups", j);
    }
    json_object_set_new(json_object_get(o, "stats"), "pipeline_program",
                        json_pack("{sisisisisisIsb}", "templates", p->stats.split_templates, "kept", p->stats.split_kept,
                                  "blocks", p->stats.split_blocks, "rows", p->stats.split_rows, "columns",
                                  p->stats.split_cols, "nodes", (json_int_t)p->stats.split_nodes, "better",
                                  p->stats.split_better));
    if (p->opts.offload) {
        json_object_set_new(o, "offload", json_pack("{sbss}", "allowed", 1, "note", p->offload_note));
        json_object_set_new(json_object_get(o, "stats"), "offload_program",
                            json_pack("{sisisisisisIsb}", "templates", p->stats.offload_templates, "kept",
                                      p->stats.offload_kept, "blocks", p->stats.offload_blocks, "rows",
                                      p->stats.offload_rows, "columns", p->stats.offload_cols, "nodes",
                                      (json_int_t)p->stats.offload_nodes, "better", p->stats.offload_better));
    }
    return o;
}
