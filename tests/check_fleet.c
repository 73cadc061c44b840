/* check_fleet.c: the fleet solver.  The load model against a discrete-event
 * simulation of Poisson arrivals (one server, and whole fleets the solver
 * chose); the program against brute-force enumeration of instance counts
 * (random candidate sets, and the priced candidates of a small instance);
 * the program's size as the sum of the candidates; each side's KV handoff
 * priced by the cost model (sp_cost_kv_xfer); JSON keys. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "sp_fleet.h"
#include "spi_fleet.h"

static unsigned rng_state;
static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 16) % n;
}

static sp_hw g_h100, g_a100;
static sp_model g_model;

static void setup(void)
{
    sp_error err;
    ck_assert_int_eq(sp_hw_find("h100", &g_h100, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("a100-80g", &g_a100, &err), SP_OK);
    ck_assert_int_eq(sp_model_find("tiny-llama", &g_model, &err), SP_OK);
}

/* A hand-built fleet of pools (no solve), for the simulation alone. */
static sp_fleet *fleet_of(double rate, const sp_fleet_pool *pools, int n)
{
    sp_fleet *f = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    f->request.rate = rate;
    f->request.prompt = 1;
    f->request.gen = 1;
    f->n_kinds = 1;
    f->kinds[0].hw = &g_h100;
    f->best.found = 1;
    f->best.n_pools = n;
    f->best.pools = calloc((size_t)n, sizeof *f->best.pools);
    memcpy(f->best.pools, pools, (size_t)n * sizeof *pools);
    return f;
}

/* ---- the batch wait: one greedy batch server, Poisson arrivals ---- */
static const int64_t wait_b[] = {1, 4, 16, 64, 256};
static const double wait_rho[] = {0.2, 0.5, 0.8, 0.9};
START_TEST(test_batch_wait_vs_simulation)
{
    int64_t b = wait_b[_i / 4];
    double rho = wait_rho[_i % 4], S = 0.5, lam = rho * (double)b / S;
    sp_fleet_pool p = {.role = SP_FLEET_COLOCATED, .instances = 1, .batch = b, .service_s = S, .rate = lam};
    sp_fleet *f = fleet_of(lam, &p, 1);
    sp_fleet_sim_pool s;
    ck_assert_int_eq(sp_fleet_simulate(f, 200000, 7, &s), SP_OK);
    double model = sp_fleet_batch_wait(lam, S, b);
    /* the model bounds the simulated mean (1.5 % for the simulation's noise) ... */
    ck_assert_msg(s.mean_wait_s <= 1.015 * model, "b %lld rho %.2f: simulated wait %.4g above the model's %.4g",
                  (long long)b, rho, s.mean_wait_s, model);
    /* ... and is not loose where the cap lets pools run (rho >= 0.5): within 1.75x from 4 requests
     * a batch; at one request a batch (M/D/1, mean wait rho S / (2(1 - rho))) the half service the
     * model adds for the batch in progress makes it up to 2x at rho = 0.5 */
    if (rho >= 0.5)
        ck_assert_msg(model <= (b >= 4 ? 1.75 : 2.02) * s.mean_wait_s, "b %lld rho %.2f: model %.4g more than 1.75x the simulated %.4g",
                      (long long)b, rho, model, s.mean_wait_s);
    /* served work over capacity is the utilisation the model states */
    ck_assert_msg(fabs(s.utilisation - rho) <= 0.03 * rho, "b %lld: utilisation %.4f vs %.4f", (long long)b,
                  s.utilisation, rho);
    sp_fleet_free(f);
}
END_TEST

/* The simulation is a function of its seed: the same seed, the same figures to the bit; another
 * seed, other figures (the arrivals are random, not a fixed pattern). */
START_TEST(test_simulation_seeded)
{
    sp_fleet_pool p[2] = {
        {.role = SP_FLEET_PREFILL, .instances = 3, .batch = 4, .service_s = 0.2, .prefill_s = 0.15,
         .handoff_s = 0.01, .rate = 30},
        {.role = SP_FLEET_DECODE, .instances = 2, .batch = 16, .service_s = 0.8, .handoff_s = 0.02, .rate = 30},
    };
    sp_fleet *f = fleet_of(30, p, 2);
    sp_fleet_sim_pool a[2], b[2], c[2];
    ck_assert_int_eq(sp_fleet_simulate(f, 20000, 5, a), SP_OK);
    ck_assert_int_eq(sp_fleet_simulate(f, 20000, 5, b), SP_OK);
    ck_assert_int_eq(sp_fleet_simulate(f, 20000, 6, c), SP_OK);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert(a[0].mean_wait_s != c[0].mean_wait_s && a[1].mean_wait_s != c[1].mean_wait_s);
    ck_assert_int_eq(a[0].served, 18000);   /* every measured request is prefilled, then decoded */
    ck_assert_int_eq(a[1].served, 18000);
    ck_assert_int_eq(sp_fleet_simulate(f, 99, 5, a), SP_EINVAL);
    sp_fleet_free(f);
}
END_TEST

/* ---- the slot wait: b slots held H, fed by a prefill pool that never queues ---- */
static const int64_t slot_b[] = {1, 8, 64};
static const double slot_rho[] = {0.5, 0.8};
START_TEST(test_slot_wait_vs_simulation)
{
    int64_t b = slot_b[_i / 2];
    double rho = slot_rho[_i % 2], H = 2.0, lam = rho * (double)b / H;
    sp_fleet_pool p[2] = {
        /* a prefill pool of many one-request instances with a tiny service: no queueing, a
         * constant delay, so the decode pool sees Poisson arrivals */
        {.role = SP_FLEET_PREFILL, .instances = 100000, .batch = 1, .service_s = 1e-9, .rate = lam},
        {.role = SP_FLEET_DECODE, .instances = 1, .batch = b, .service_s = H, .rate = lam},
    };
    sp_fleet *f = fleet_of(lam, p, 2);
    sp_fleet_sim_pool s[2];
    ck_assert_int_eq(sp_fleet_simulate(f, 100000, 11, s), SP_OK);
    double model = sp_fleet_slot_wait(lam, H, b);
    ck_assert_msg(s[1].mean_wait_s <= 1.02 * model + 1e-3 * H, "b %lld rho %.2f: simulated slot wait %.4g above %.4g",
                  (long long)b, rho, s[1].mean_wait_s, model);
    ck_assert_msg(fabs(s[1].utilisation - rho) <= 0.03 * rho, "slots: utilisation %.4f vs %.4f", s[1].utilisation,
                  rho);
    sp_fleet_free(f);
}
END_TEST

/* ---- a fleet the solver chose, simulated ----
 * llama3.1-8b on h100 and a100-80g (up to 2 chips an instance, batches to
 * 64), 512 + 128 tokens, TTFT 500 ms, TPOT 30 ms: at 60 requests/s a
 * colocated pool of several instances; disaggregated only at 20, a prefill
 * and a decode pool; at 100
 * requests/s disaggregated, prefill pools of both kinds. */
static const double fleet_rate[] = {60, 20, 100};
static const int fleet_colocated[] = {1, 0, 0};
START_TEST(test_fleet_vs_simulation)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("llama3.1-8b", &m, &err), SP_OK);
    sp_fleet_kind k[2] = {{&g_h100, 0}, {&g_a100, 0}};
    sp_fleet_request q = {.rate = fleet_rate[_i], .prompt = 512, .gen = 128};
    sp_fleet_opts o;
    sp_fleet_opts_init(&o);
    o.ttft_s = 0.5;
    o.tpot_s = 0.03;
    o.max_instance_chips = 2;
    o.max_batch = 64;
    o.alternatives = 0;
    o.colocated = fleet_colocated[_i];
    sp_fleet *f;
    ck_assert_int_eq(sp_fleet_solve(&m, k, 2, &q, &o, &f), SP_OK);
    ck_assert_int_eq(f->result, SP_PLAN_OPTIMAL);
    ck_assert(f->best.found);
    int inst = 0, roles = 0;
    for (int i = 0; i < f->best.n_pools; i++) inst += f->best.pools[i].instances, roles |= 1 << f->best.pools[i].role;
    /* the cases exercise what they are meant to: several instances, and prefill + decode pools */
    ck_assert_int_ge(inst, 2);
    if (!o.colocated) ck_assert_int_eq(roles, 1 << SP_FLEET_PREFILL | 1 << SP_FLEET_DECODE);
    double served = 0;
    for (int i = 0; i < f->best.n_pools; i++)
        if (f->best.pools[i].role != SP_FLEET_DECODE) served += f->best.pools[i].rate;
    /* each side's handoff is the cost model's transfer between instances apart: the
     * prefill's batch, or one request of the decode's batch, in one message per chip */
    for (int i = 0; i < f->best.n_pools; i++) {
        const sp_fleet_pool *p = &f->best.pools[i];
        if (p->role == SP_FLEET_COLOCATED) continue;
        double bytes = (double)p->kv_bytes_per_chip, want;
        if (p->role == SP_FLEET_DECODE) bytes /= (double)p->batch;
        ck_assert_int_gt(p->kv_bytes_per_chip, 0);
        ck_assert_int_eq(sp_cost_kv_xfer_apart(k[p->kind].hw, bytes, &want), SP_OK);
        ck_assert_double_eq_tol(p->handoff_s, want, 1e-12 * want);
    }
    ck_assert_double_eq_tol(served, q.rate, 1e-6 * q.rate);
    sp_fleet_sim_pool s[16];
    ck_assert_int_le(f->best.n_pools, 16);
    ck_assert_int_eq(sp_fleet_simulate(f, 100000, 3, s), SP_OK);
    for (int i = 0; i < f->best.n_pools; i++) {
        const sp_fleet_pool *p = &f->best.pools[i];
        ck_assert(p->utilisation <= o.util_cap + 1e-9);
        ck_assert_msg(fabs(s[i].utilisation - p->utilisation) <= 0.05 * p->utilisation + 1e-3,
                      "pool %d (%s): simulated utilisation %.4f, model %.4f", i, sp_fleet_role_name(p->role),
                      s[i].utilisation, p->utilisation);
        if (p->role != SP_FLEET_DECODE) {
            ck_assert(p->ttft_s <= o.ttft_s * (1 + 1e-9));
            ck_assert_msg(s[i].mean_ttft_s <= 1.02 * p->ttft_s, "pool %d: simulated TTFT %.4g above the model's %.4g",
                          i, s[i].mean_ttft_s, p->ttft_s);
        } else {
            ck_assert(s[i].mean_wait_s <= 1.02 * p->wait_s + 1e-6);
        }
        if (p->role != SP_FLEET_PREFILL) ck_assert(p->tpot_s <= o.tpot_s * (1 + 1e-9));
    }
    sp_fleet_free(f);
}
END_TEST

/* ---- the program against brute force ---- */

/* The cheapest N over 0..U_j each (the same bound the program uses), by
 * its own feasibility rule: colocated capacity plus the smaller of the
 * prefill and decode capacities covers R, every kind within its chips. */
typedef struct bf {
    const spi_fleet_cand *c;
    int n, K;
    const sp_fleet_kind *k;
    double R;
    sp_fleet_objective obj;
    int homog;
    int N[16], U[16];
    double best;
    long long visited;
} bf;

static double objective_of(const spi_fleet_cand *c, int n, const int *N, sp_fleet_objective obj)
{
    double v = 0;
    for (int j = 0; j < n; j++) v += N[j] * (obj == SP_FLEET_MIN_COST ? c[j].price : (double)c[j].chips);
    return v;
}

static void bf_walk(bf *s, int j)
{
    if (j == s->n) {
        s->visited++;
        double cap[SP_FLEET_ROLE_COUNT] = {0};
        int used[SP_FLEET_ROLE_COUNT] = {0};
        double chips[8] = {0};
        for (int i = 0; i < s->n; i++) {
            cap[s->c[i].role] += s->c[i].max_rate * s->N[i];
            used[s->c[i].role] += s->N[i] > 0;
            chips[s->c[i].kind] += (double)s->c[i].chips * s->N[i];
        }
        for (int k = 0; k < s->K; k++)
            if (s->k[k].available > 0 && chips[k] > (double)s->k[k].available) return;
        if (s->homog)
            for (int r = 0; r < SP_FLEET_ROLE_COUNT; r++)
                if (used[r] > 1) return;
        double dis = fmin(cap[SP_FLEET_PREFILL], cap[SP_FLEET_DECODE]);
        if (cap[SP_FLEET_COLOCATED] + dis < s->R * (1 - 1e-9)) return;
        double v = objective_of(s->c, s->n, s->N, s->obj);
        if (v < s->best) s->best = v;
        return;
    }
    for (int x = 0; x <= s->U[j]; x++) {
        s->N[j] = x;
        bf_walk(s, j + 1);
    }
    s->N[j] = 0;
}

static double brute_force(const spi_fleet_cand *c, int n, const sp_fleet_kind *k, int K, double R,
                          sp_fleet_objective obj, int homog, long long *visited)
{
    bf s = {.c = c, .n = n, .K = K, .k = k, .R = R, .obj = obj, .homog = homog, .best = INFINITY};
    ck_assert_int_le(n, 16);
    for (int j = 0; j < n; j++) {
        double u = ceil(R / c[j].max_rate);
        if (k[c[j].kind].available > 0) u = fmin(u, floor((double)k[c[j].kind].available / c[j].chips));
        s.U[j] = (int)u;
    }
    bf_walk(&s, 0);
    if (visited) *visited = s.visited;
    return s.best;
}

static void check_against_bf(const spi_fleet_cand *c, int n, const sp_fleet_kind *k, int K, double R,
                             sp_fleet_objective obj, int homog, const char *what)
{
    int N[64];
    double r[64];
    sp_plan_result res;
    sp_fleet_stats st;
    memset(&st, 0, sizeof st);
    ck_assert_int_le(n, 64);
    ck_assert_int_eq(spi_fleet_pick(c, n, k, K, R, obj, NULL, homog, 10000, &res, N, r, &st), SP_OK);
    /* the program's size is the sum of the candidates, not their product */
    ck_assert_int_eq(st.rows, 2 * n + 2 + K + SP_FLEET_ROLE_COUNT);
    ck_assert_int_eq(st.cols, 3 * n);
    long long visited;
    double want = brute_force(c, n, k, K, R, obj, homog, &visited);
    if (!isfinite(want)) {
        ck_assert_msg(res == SP_PLAN_INFEASIBLE, "%s: brute force finds nothing, the program %d", what, res);
        return;
    }
    ck_assert_msg(res == SP_PLAN_OPTIMAL, "%s: program result %d, brute force %.6g", what, res, want);
    double got = objective_of(c, n, N, obj);
    ck_assert_msg(fabs(got - want) <= 1e-6 * fmax(1, want), "%s: program %.9g, brute force %.9g (%lld vectors)", what,
                  got, want, visited);
    /* the program's own answer is feasible by the brute force's rule */
    double cap[SP_FLEET_ROLE_COUNT] = {0}, served = 0, pre = 0, dec = 0;
    for (int j = 0; j < n; j++) {
        cap[c[j].role] += c[j].max_rate * N[j];
        ck_assert(r[j] <= c[j].max_rate * N[j] * (1 + 1e-7) + 1e-9);
        if (c[j].role != SP_FLEET_DECODE) served += r[j];
        if (c[j].role == SP_FLEET_PREFILL) pre += r[j];
        if (c[j].role == SP_FLEET_DECODE) dec += r[j];
    }
    ck_assert_double_eq_tol(served, R, 1e-6 * R);
    ck_assert_double_eq_tol(pre, dec, 1e-6 * R);
}

/* Random candidate sets: 2 kinds (one with few chips), every role, rates and
 * prices drawn so that mixing pays off on some. */
START_TEST(test_program_vs_brute_force_random)
{
    rng_state = 1000u + (unsigned)_i;
    sp_fleet_kind k[2] = {{&g_h100, 0}, {&g_a100, 0}};
    if (rnd(2)) k[0].available = 2 + rnd(8);
    if (rnd(2)) k[1].available = 2 + rnd(8);
    spi_fleet_cand c[8];
    int n = 4 + (int)rnd(4);
    memset(c, 0, sizeof c);
    /* rates from R/4 to 1.2 R: at most 4 instances of one candidate carry R alone, which keeps
     * the enumeration (5^7 vectors) small */
    double R = 2 + rnd(30);
    for (int j = 0; j < n; j++) {
        c[j].role = (sp_fleet_role)rnd(3);
        c[j].kind = (int)rnd(2);
        c[j].chips = 1 << rnd(3);
        c[j].max_rate = R * (0.26 + rnd(20) / 20.0);
        c[j].price = c[j].chips * (1.0 + rnd(10) / 2.0);
        c[j].batch = 1;
    }
    for (int obj = 0; obj < SP_FLEET_OBJECTIVE_COUNT; obj++)
        for (int homog = 0; homog < 2; homog++) {
            char what[64];
            snprintf(what, sizeof what, "random set %d, objective %d, homogeneous %d", _i, obj, homog);
            check_against_bf(c, n, k, 2, R, (sp_fleet_objective)obj, homog, what);
        }
}
END_TEST

/* The priced candidates of a small instance (tiny-llama, one chip of h100 or
 * a100-80g, batches 1..4): every candidate the solver builds, against brute
 * force; and sp_fleet_solve's own fleet costs what brute force says. */
START_TEST(test_program_vs_brute_force_priced)
{
    sp_fleet_kind k[2] = {{&g_h100, 0}, {&g_a100, 3}};
    sp_fleet_request q = {.prompt = 128, .gen = 32};
    sp_fleet_opts o;
    sp_fleet_opts_init(&o);
    o.max_instance_chips = 1;
    o.max_batch = 4;
    o.ttft_s = 0.02;
    o.tpot_s = 0.002;
    spi_fleet_cand *c;
    int n;
    sp_fleet_stats st;
    memset(&st, 0, sizeof st);
    char notes[256] = "";
    ck_assert_int_eq(spi_fleet_candidates(&g_model, k, 2, &q, &o, &c, &n, notes, sizeof notes, &st), SP_OK);
    ck_assert_int_ge(n, 3);
    ck_assert_int_le(n, 16);
    int roles[SP_FLEET_ROLE_COUNT] = {0};
    double lmax = 0;
    for (int j = 0; j < n; j++) {
        roles[c[j].role]++;
        lmax = fmax(lmax, c[j].max_rate);
        /* every building block's admissible rate keeps its pool within the cap and targets */
        double w = c[j].role == SP_FLEET_DECODE ? sp_fleet_slot_wait(c[j].max_rate, c[j].service_s, c[j].batch)
                                                : sp_fleet_batch_wait(c[j].max_rate, c[j].service_s, c[j].batch);
        ck_assert(c[j].max_rate * c[j].service_s / (double)c[j].batch <= o.util_cap * (1 + 1e-9));
        if (c[j].role == SP_FLEET_DECODE) ck_assert(w <= o.tpot_s * (1 + 1e-6));
        else ck_assert(w + c[j].prefill_s <= o.ttft_s * (1 + 1e-9));
    }
    for (int r = 0; r < SP_FLEET_ROLE_COUNT; r++) ck_assert_int_ge(roles[r], 1);
    for (int m = 1; m <= 3; m++) {
        q.rate = lmax * m * 0.7;
        char what[64];
        snprintf(what, sizeof what, "priced, rate %.4g", q.rate);
        check_against_bf(c, n, k, 2, q.rate, SP_FLEET_MIN_COST, 0, what);
        sp_fleet *f;
        o.alternatives = 1;
        ck_assert_int_eq(sp_fleet_solve(&g_model, k, 2, &q, &o, &f), SP_OK);
        double want = brute_force(c, n, k, 2, q.rate, SP_FLEET_MIN_COST, 0, NULL);
        ck_assert(f->best.found);
        ck_assert_double_eq_tol(f->best.cost_per_hour, want, 1e-6 * want);
        /* its program: two rows and three columns per candidate, plus the shared rows */
        int sum = 0;
        for (int r = 0; r < SP_FLEET_ROLE_COUNT; r++) sum += f->stats.candidates[r];
        ck_assert_int_eq(sum, n);
        ck_assert_int_eq(f->stats.rows, 2 * n + 2 + 2 + SP_FLEET_ROLE_COUNT);
        ck_assert_int_eq(f->stats.cols, 3 * n);
        /* no alternative beats the best fleet */
        for (int a = 0; a < f->n_alts; a++)
            if (f->alts[a].fleet.found) ck_assert(f->alts[a].fleet.cost_per_hour >= f->best.cost_per_hour * (1 - 1e-9));
        sp_fleet_free(f);
    }
    free(c);
}
END_TEST

/* The program grows with the sum of the candidates: doubling the batches and
 * chip counts adds rows and columns linearly. */
START_TEST(test_program_size_sum)
{
    sp_fleet_kind k[2] = {{&g_h100, 0}, {&g_a100, 0}};
    sp_fleet_request q = {.rate = 20, .prompt = 128, .gen = 32};
    int prev_n = 0;
    for (int mb = 4; mb <= 64; mb *= 4) {
        sp_fleet_opts o;
        sp_fleet_opts_init(&o);
        o.max_instance_chips = 2;
        o.max_batch = mb;
        o.alternatives = 0;
        sp_fleet *f;
        ck_assert_int_eq(sp_fleet_solve(&g_model, k, 2, &q, &o, &f), SP_OK);
        int n = 0;
        for (int r = 0; r < SP_FLEET_ROLE_COUNT; r++) n += f->stats.candidates[r];
        ck_assert_int_ge(n, prev_n);
        ck_assert_int_eq(f->stats.rows, 2 * n + 2 + 2 + SP_FLEET_ROLE_COUNT);
        ck_assert_int_eq(f->stats.cols, 3 * n);
        prev_n = n;
        sp_fleet_free(f);
    }
}
END_TEST

START_TEST(test_refusals)
{
    sp_fleet_kind k[1] = {{&g_h100, 0}};
    sp_fleet_request q = {.rate = 1, .prompt = 16, .gen = 4};
    sp_fleet *f = (sp_fleet *)1;
    sp_hw free_hw = g_h100;
    free_hw.chip_cost_per_hour = 0;
    sp_fleet_kind kf[1] = {{&free_hw, 0}};
    ck_assert_int_eq(sp_fleet_solve(&g_model, kf, 1, &q, NULL, &f), SP_EINVAL);
    ck_assert_ptr_null(f);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "cost_per_chip_hour"));
    sp_fleet_opts o;
    sp_fleet_opts_init(&o);
    o.objective = SP_FLEET_MIN_CHIPS;
    ck_assert_int_eq(sp_fleet_solve(&g_model, kf, 1, &q, &o, &f), SP_OK);   /* chips need no price */
    sp_fleet_free(f);
    q.rate = 0;
    ck_assert_int_eq(sp_fleet_solve(&g_model, k, 1, &q, NULL, &f), SP_EINVAL);
    q.rate = 1;
    o.util_cap = 1;
    ck_assert_int_eq(sp_fleet_solve(&g_model, k, 1, &q, &o, &f), SP_EINVAL);
    sp_fleet_kind two[2] = {{&g_h100, 0}, {&g_h100, 0}};
    ck_assert_int_eq(sp_fleet_solve(&g_model, two, 2, &q, NULL, &f), SP_EINVAL);
    /* a TTFT no instance meets: solved, infeasible */
    sp_fleet_opts_init(&o);
    o.ttft_s = 1e-9;
    ck_assert_int_eq(sp_fleet_solve(&g_model, k, 1, &q, &o, &f), SP_OK);
    ck_assert_int_eq(f->result, SP_PLAN_INFEASIBLE);
    ck_assert(!f->best.found);
    sp_fleet_free(f);
    /* more requests than the available chips can serve: infeasible */
    sp_fleet_opts_init(&o);
    o.ttft_s = 0.05;
    k[0].available = 1;
    q.rate = 1e9;   /* one chip serves about 1e6 tiny-llama requests of 20 tokens a second */
    ck_assert_int_eq(sp_fleet_solve(&g_model, k, 1, &q, &o, &f), SP_OK);
    ck_assert_int_eq(f->result, SP_PLAN_INFEASIBLE);
    sp_fleet_free(f);
}
END_TEST

/* The fleet's price of one side of a handoff is sp_cost_kv_xfer's: between one
 * prefill chip and one decode chip apart, every byte goes in one message. */
START_TEST(test_handoff_is_the_cost_models)
{
    sp_hw hw = g_h100;
    hw.coll_latency = 3e-6;   /* every term of the price counts */
    hw.net_bw_eff = 0.7;
    sp_layout one, l;
    sp_error err;
    ck_assert_msg(sp_layout_parse("mesh=1x1x1", &one, &err) == SP_OK, "%s", err.text);
    ck_assert_int_eq(sp_layout_disaggregate(&one, &one, &l), SP_OK);
    sp_kv_xfer_cost x;
    ck_assert_int_eq(sp_cost_kv_xfer(&g_model, &hw, &l, 2, 16, SP_XFER_APART, &x), SP_OK);
    ck_assert_int_eq(x.messages, 1);
    ck_assert_int_gt(x.bytes, 0);
    double side;
    ck_assert_int_eq(sp_cost_kv_xfer_apart(&hw, (double)x.bytes, &side), SP_OK);
    ck_assert_double_eq_tol(side, x.seconds, 1e-12 * x.seconds);
    double want = hw.coll_latency + hw.inter_latency + (double)x.bytes / (hw.inter_bw * hw.net_bw_eff);
    ck_assert_double_eq_tol(side, want, 1e-12 * want);
    /* a torus has no network between slices; nonsense sizes are refused */
    sp_hw tpu;
    ck_assert_int_eq(sp_hw_find("tpu-v4", &tpu, &err), SP_OK);
    ck_assert_int_eq(sp_cost_kv_xfer_apart(&tpu, 1e6, &side), SP_ENOTSUP);
    ck_assert_int_eq(sp_cost_kv_xfer_apart(&hw, -1, &side), SP_EINVAL);
    ck_assert_int_eq(sp_cost_kv_xfer_apart(&hw, NAN, &side), SP_EINVAL);
}
END_TEST

START_TEST(test_json)
{
    sp_fleet_kind k[2] = {{&g_h100, 0}, {&g_a100, 0}};
    sp_fleet_request q = {.rate = 50, .prompt = 256, .gen = 64};
    sp_fleet_opts o;
    sp_fleet_opts_init(&o);
    o.max_instance_chips = 2;
    o.max_batch = 32;
    o.ttft_s = 0.05;
    sp_fleet *f;
    ck_assert_int_eq(sp_fleet_solve(&g_model, k, 2, &q, &o, &f), SP_OK);
    json_t *j = sp_fleet_to_json(f);
    ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "optimal");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "chips")), f->best.chips);
    ck_assert(json_real_value(json_object_get(j, "cost_per_hour")) > 0);
    json_t *pools = json_object_get(j, "pools");
    ck_assert_int_eq((int)json_array_size(pools), f->best.n_pools);
    static const char *const keys[] = {"role", "hw", "instances", "chips_per_instance", "layout", "batch", "ttft_s",
                                       "tpot_s", "utilisation", "cost_per_hour"};
    for (size_t i = 0; i < json_array_size(pools); i++)
        for (size_t x = 0; x < sizeof keys / sizeof keys[0]; x++)
            ck_assert_msg(json_object_get(json_array_get(pools, i), keys[x]), "pools[%zu] lacks %s", i, keys[x]);
    ck_assert(json_is_array(json_object_get(j, "alternatives")));
    json_decref(j);
    sp_fleet_free(f);
}
END_TEST

static Suite *fleet_suite(void)
{
    Suite *s = suite_create("fleet");
    TCase *tc = tcase_create("fleet");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_batch_wait_vs_simulation, 0, 20);
    tcase_add_loop_test(tc, test_slot_wait_vs_simulation, 0, 6);
    tcase_add_test(tc, test_simulation_seeded);
    tcase_add_loop_test(tc, test_fleet_vs_simulation, 0, 3);
    tcase_add_loop_test(tc, test_program_vs_brute_force_random, 0, 40);
    tcase_add_test(tc, test_program_vs_brute_force_priced);
    tcase_add_test(tc, test_program_size_sum);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_handoff_is_the_cost_models);
    tcase_add_test(tc, test_json);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fleet_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
