/* check_plan_offload.c: the offload program (plan --offload) against
 * exhaustive enumeration.  On small random models whose HBM is too small for
 * some or all layouts, every layout of the planner's space (even splits) is
 * priced with every offload choice: every count of streamed layers on every
 * stage times every KV fraction offered, each by sp_cost_eval; the best
 * admissible objective must equal the plan's, for several objectives and
 * bounds.  Where nothing fits without offload the plan without it is
 * infeasible.  The program's size grows with the sum of the choices, not
 * their product. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "sp_plan.h"
#include "spi_plan.h"

static unsigned rng_state;
static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 16) % n;
}

static void random_model(sp_model *m, int layers)
{
    sp_model_init(m);
    snprintf(m->name, sizeof m->name, "rand");
    static const int64_t E[] = {64, 128, 256};
    m->n_layers = layers;
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

static const double fracs[] = {0, 0.25, 0.5, 0.75, 1};

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

/* Every layout of the space (priced once, shared by the objectives) with every offload choice. */
typedef struct bf_point {
    sp_cost c;
    sp_layout l;
    int offloads;
} bf_point;
typedef struct bf_all {
    int n, cap;
    bf_point *p;
    long combos;
} bf_all;

static void enumerate(const sp_model *m, const sp_hw *hw, int N, const sp_workload *w, bf_all *out)
{
    spi_space s;
    spi_space_init(&s, m, hw);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    spi_space_narrow(&s, &o);
    ck_assert_int_eq(spi_space_add(&s, N, w, SP_PLAN_W_AUTO, SP_DT_BF16), SP_OK);
    memset(out, 0, sizeof *out);
    /* one cache for the enumeration (a call without one makes and zeroes its own,
     * megabytes each), every phase priced afresh: not the planner's memo */
    sp_cost_cache *cc;
    ck_assert_int_eq(sp_cost_cache_create(&cc), SP_OK);
    for (int i = 0; i < s.n; i++) {
        const sp_layout *tl = &s.c[i].layout;
        const int S = tl->stages;
        int64_t cnt[SP_LAYOUT_MAX_STAGES];
        for (int st = 0; st < S; st++) {
            int64_t first;
            sp_layout_stage_layers(tl, m->n_layers, st, &first, &cnt[st]);
        }
        for (size_t f = 0; f < sizeof fracs / sizeof fracs[0]; f++) {
            /* stage st's choice k: 0 nothing streamed, else 1 + mode·cnt + (layers − 1), mode 0 every
             * part of the weights (offload_weights), 1 the attention's, 2 the FFN's */
            int k[SP_LAYOUT_MAX_STAGES] = {0};
            for (;;) {
                sp_layout l = *tl;
                l.offload_kv = fracs[f];
                int any[3] = {0};
                int16_t v[3][SP_LAYOUT_MAX_STAGES] = {{0}};
                for (int st = 0; st < S; st++)
                    if (k[st] > 0) {
                        int md = (int)((k[st] - 1) / cnt[st]);
                        v[md][st] = (int16_t)((k[st] - 1) % cnt[st] + 1);
                        any[md] = 1;
                    }
                memcpy(l.offload_layers, v[0], sizeof l.offload_layers);
                l.offload_stages = any[0] ? S : 0;
                memcpy(l.offload_kind_layers[SP_WKIND_ATTN], v[1], sizeof v[1]);
                l.offload_kind_stages[SP_WKIND_ATTN] = any[1] ? S : 0;
                memcpy(l.offload_kind_layers[SP_WKIND_FFN], v[2], sizeof v[2]);
                l.offload_kind_stages[SP_WKIND_FFN] = any[2] ? S : 0;
                sp_cost_opts co;
                sp_cost_opts_init(&co);
                co.quiet = 1;
                co.cache = cc, co.fresh = 1;
                bf_point pt;
                sp_status st = sp_cost_eval(m, hw, &l, w, &co, &pt.c);
                out->combos++;
                if (st == SP_OK) {
                    pt.offloads = sp_layout_offloads(&l);
                    pt.l = l;
                    if (out->n == out->cap) {
                        out->cap = out->cap ? 2 * out->cap : 1024;
                        out->p = realloc(out->p, (size_t)out->cap * sizeof *out->p);
                        ck_assert_ptr_nonnull(out->p);
                    }
                    out->p[out->n++] = pt;
                } else ck_assert_int_eq(st, SP_EINVAL);
                int d = 0;   /* the next vector of counts (odometer) */
                while (d < S && ++k[d] > 3 * cnt[d]) k[d++] = 0;
                if (d == S) break;
            }
        }
    }
    spi_space_free(&s);
    sp_cost_cache_free(cc);
}

static int n_compared, n_needed, n_offloaded, n_infeasible, n_part;

static void compare(const sp_model *m, const sp_hw *hw, int N, const sp_workload *w, const bf_all *bf,
                    const sp_plan_opts *base)
{
    double best = INFINITY, best0 = INFINITY;
    int bi = -1;
    for (int i = 0; i < bf->n; i++) {
        if (!admissible(&bf->p[i].c, base)) continue;
        double v = obj_of(&bf->p[i].c, base);
        if (v < best) best = v, bi = i;
        if (!bf->p[i].offloads && v < best0) best0 = v;
    }
    sp_plan_opts o = *base;
    o.offload = 1;
    sp_plan *p;
    ck_assert_int_eq(sp_plan_solve(m, hw, N, w, &o, &p), SP_OK);
    if (isinf(best)) {
        ck_assert_msg(p->result == SP_PLAN_INFEASIBLE, "enumeration: nothing admissible; plan: %s",
                      sp_plan_result_name(p->result));
        n_infeasible++;
    } else {
        ck_assert_msg(p->result == SP_PLAN_OPTIMAL, "plan --offload: %s", sp_plan_result_name(p->result));
        double v = obj_of(&p->chosen.cost, &o);
        char t[320];
        char t2[320];
        ck_assert_msg(fabs(v - best) <= 1e-9 * fabs(best), "offload plan (better %d, obj %d lm %d) %s: objective %.12g, enumeration %.12g (%s)", p->stats.offload_better, o.objective, o.latency_metric,
                      sp_layout_format(&p->chosen.layout, t, sizeof t), v, best,
                      sp_layout_format(&bf->p[bi].l, t2, sizeof t2));
        ck_assert(admissible(&p->chosen.cost, &o));
        n_offloaded += sp_layout_offloads(&p->chosen.layout);
        /* each stage reports its offload */
        ck_assert_int_eq(p->n_stages, p->chosen.layout.stages);
        for (int s = 0; s < p->n_stages; s++) {
            ck_assert_int_eq(p->stages[s].offload_layers, sp_layout_offload_layers(&p->chosen.layout, s));
            n_part += sp_layout_offload_kind_layers(&p->chosen.layout, s, SP_WKIND_ATTN) !=
                      sp_layout_offload_kind_layers(&p->chosen.layout, s, SP_WKIND_FFN);
            ck_assert(p->stages[s].offload_kv == p->chosen.layout.offload_kv);
            ck_assert(p->stages[s].host_bytes >= 0 && (sp_layout_offloads(&p->chosen.layout) || p->stages[s].host_bytes == 0));
        }
        n_compared++;
    }
    sp_plan_free(p);
    /* without the flag nothing is offloaded: the best without offload, or infeasible */
    o.offload = 0;
    ck_assert_int_eq(sp_plan_solve(m, hw, N, w, &o, &p), SP_OK);
    if (isinf(best0)) {
        ck_assert(p->result == SP_PLAN_INFEASIBLE);
        if (!isinf(best)) n_needed++;
    } else {
        ck_assert(p->has_chosen && !sp_layout_offloads(&p->chosen.layout));
        ck_assert(fabs(obj_of(&p->chosen.cost, &o) - best0) <= 1e-9 * fabs(best0));
    }
    sp_plan_free(p);
}

START_TEST(test_offload_brute)
{
    rng_state = 16;
    long combos = 0;
    for (int it = 0; it < 4; it++) {
        sp_model m;
        random_model(&m, 2 + (int)rnd(3));
        sp_hw hw;
        sp_error err;
        ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
        hw.chips_per_node = 2;
        const int N = 1 + (int)rnd(2);
        sp_workload w = {4, 8 + 8 * (int64_t)rnd(3), 4 + 4 * (int64_t)rnd(2)};
        /* HBM: 15 %..105 % of what the mesh=1x1x1 bf16 layout needs per chip over N chips, so
         * that offload matters; the host from too small for half the weights to ample */
        sp_layout l1;
        sp_layout_init(&l1);
        sp_cost c1;
        ck_assert_int_eq(sp_cost_eval(&m, &hw, &l1, &w, NULL, &c1), SP_OK);
        double frac = 0.3 + 0.1 * rnd(10);
        hw.hbm_bytes = (int64_t)(frac * (double)c1.mem.total / N / hw.hbm_usable);
        hw.host_bytes = rnd(3) == 0 ? c1.mem.weights / 4 : c1.mem.weights * 4;
        bf_all bf;
        enumerate(&m, &hw, N, &w, &bf);
        combos += bf.combos;
        sp_plan_opts o;
        sp_plan_opts_init(&o);
        o.even_stages = 1;   /* the space's splits: what the offload program decides on */
        o.frontier = 0;
        o.rivals = 0;
        o.search_min_chips = 0;
        const sp_plan_objective objs[] = {SP_PLAN_MIN_LATENCY, SP_PLAN_MIN_COST, SP_PLAN_MAX_THROUGHPUT};
        const sp_plan_latency lms[] = {SP_PLAN_LAT_TOTAL, SP_PLAN_LAT_DECODE, SP_PLAN_LAT_PREFILL};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                o.objective = objs[a];
                o.latency_metric = lms[b];
                o.max_latency_s = 0;
                compare(&m, &hw, N, &w, &bf, &o);
            }
        /* a latency bound between the enumeration's least and greatest admissible latency */
        o.objective = SP_PLAN_MAX_THROUGHPUT;
        o.latency_metric = SP_PLAN_LAT_DECODE;
        double lo = INFINITY, hi = 0;
        for (int i = 0; i < bf.n; i++)
            if (bf.p[i].c.feasible) {
                double v = bf.p[i].c.decode_step_s;
                lo = fmin(lo, v), hi = fmax(hi, v);
            }
        if (hi > 0) {
            o.max_latency_s = 0.5 * (lo + hi);
            compare(&m, &hw, N, &w, &bf, &o);
        }
        free(bf.p);
    }
    printf("offload: %d plans equal to the enumeration of %ld (layout, offload) combinations, %d of them offloading "
           "(%d stages streaming one part of their weights); %d where nothing fits without offload; %d infeasible "
           "either way\n", n_compared, combos, n_offloaded, n_part, n_needed, n_infeasible);
    ck_assert_int_gt(n_offloaded, 0);
    ck_assert_int_gt(n_part, 0);   /* the enumeration's optimum streams one part somewhere */
    ck_assert_int_gt(n_needed, 0);
    ck_assert_int_gt(n_compared, 20);
}
END_TEST

/* The program's size: the sum of the choices per template, not their product. */
START_TEST(test_offload_size)
{
    rng_state = 7;
    sp_model m;
    random_model(&m, 12);
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    hw.chips_per_node = 4;
    sp_workload w = {4, 16, 8};
    sp_layout l1;
    sp_layout_init(&l1);
    sp_cost c1;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l1, &w, NULL, &c1), SP_OK);
    hw.hbm_bytes = (int64_t)(0.29 * (double)c1.mem.total / hw.hbm_usable);
    hw.host_bytes = c1.mem.total * 4;
    spi_space s;
    spi_space_init(&s, &m, &hw);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    ck_assert_int_eq(spi_space_add(&s, 4, &w, SP_PLAN_W_AUTO, SP_DT_BF16), SP_OK);
    int fits = 0, smax = 1;
    for (int i = 0; i < s.n; i++) {
        fits += s.c[i].mem_over <= 0;
        if (s.c[i].layout.stages > smax) smax = s.c[i].layout.stages;
    }
    printf("offload program, 12 layers on 4 chips: %d of %d layouts fit without offload\n", fits, s.n);
    ck_assert_int_eq(smax, 4);
    /* the 4-stage layouts only, every one in one program */
    int n4 = 0;
    for (int i = 0; i < s.n; i++)
        if (s.c[i].layout.stages == 4) s.c[n4++] = s.c[i];
    s.n = n4;
    spi_offload_req r = {.o = &o, .incumbent = INFINITY, .batch = 1 << 20, .max_templates = 16};
    spi_offload_out out;
    ck_assert_int_eq(spi_offload_solve(&s, 0, &r, &out, NULL), SP_OK);
    ck_assert_int_eq(out.solved, 1);
    ck_assert_int_eq(out.kept, 16);
    ck_assert(!out.unproven);
    /* columns: x, 5 z, Σ_{s,f} (J + tail) <= Σ_{s,f} n_s, 6 (X, V); rows: 1 + per template 1 + Σ_{s,f} (J +
     * tail) + 2S + 1 + Σ_φ (S + forms <= 2) + (S − 3) + 3 bounds */
    ck_assert_msg(out.cols <= out.choices_sum + 12.0 * out.kept, "%d columns, sum of choices %.0f over %d templates",
                  out.cols, out.choices_sum, out.kept);
    ck_assert_msg(out.rows <= out.choices_sum + (double)(7 * smax + 5) * out.kept + 4,
                  "%d rows, sum of choices %.0f over %d templates", out.rows, out.choices_sum, out.kept);
    ck_assert_msg(out.choices_product > 4.0 * (out.rows + out.cols), "product %.0f, program %d x %d",
                  out.choices_product, out.rows, out.cols);
    printf("offload program, 12 layers on 4 chips: %d templates, %d rows x %d columns; sum of choices %.0f, "
           "product %.0f; %ld nodes\n", out.kept, out.rows, out.cols, out.choices_sum, out.choices_product, out.nodes);
    /* the plan over every layout does at least as well as the sample's */
    o.even_stages = 1;
    o.offload = 1;
    o.frontier = o.rivals = o.search_min_chips = 0;
    sp_plan *p;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 4, &w, &o, &p), SP_OK);
    ck_assert(p->has_chosen);
    ck_assert(!out.found || p->chosen.latency_s <= out.phi * (1 + 1e-6));   /* the sample's best, or better */
    sp_plan_free(p);
    spi_space_free(&s);
}
END_TEST

/* Where the hardware states no host memory, offload is not offered, and the plan says so. */
START_TEST(test_offload_refused)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", &m, &err), SP_OK);
    sp_hw hw;
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    hw.host_bytes = 0;
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.offload = 1;
    sp_workload w = {2, 8, 4};
    sp_plan *p;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 1, &w, &o, &p), SP_OK);
    ck_assert(p->has_chosen && !sp_layout_offloads(&p->chosen.layout));
    ck_assert_ptr_nonnull(strstr(p->offload_note, "host memory"));
    sp_plan_free(p);
    o.offload = 0;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 1, &w, &o, &p), SP_OK);
    ck_assert_str_eq(p->offload_note, "");
    sp_plan_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan_offload");
    TCase *tc = tcase_create("offload");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_offload_brute);
    tcase_add_test(tc, test_offload_size);
    tcase_add_test(tc, test_offload_refused);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
