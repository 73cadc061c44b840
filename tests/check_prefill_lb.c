/* check_prefill_lb.c: sp_cost_prefill_lb, the planner's lower bound on a
 * layout's prefill (doc/planner.md, "Pruning by the decode bound"), is at
 * most the prefill_s of every layout priced: each bundled model on each
 * bundled profile, every layout of the planner's space (every FFN and
 * attention layout of both phases, stages, replicas, meshes and their
 * placements, micro-batches, bf16/int8/fp8 weights, the chunked variant the
 * planner keeps), and beside a share of them every chunked variant
 * (sequences and tokens per pass), an uneven split and a smaller first
 * stage mesh.  And it is no vacuous bound: where the prefill is compute
 * bound it is more than half of it. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sp_plan.h"
#include "spi_plan.h"

static const char *const models[] = {
    "bench-1b",     "falcon-180b",  "gpt-1.3b-ft",  "gpt-175b-ft",      "gpt-20b-ft",       "gpt-350m-ft",
    "gpt-6.7b-ft",  "gpt-89b-ft",   "gpt-j-6b",     "gpt3-175b",        "llama2-13b",       "llama2-70b",
    "llama2-7b",    "llama3.1-405b", "llama3.1-70b", "llama3.1-8b",     "megatron-530b-ft", "mixtral-8x22b",
    "mixtral-8x7b", "mt-nlg-530b",  "palm-540b",    "palm-62b",         "palm-8b",          "qwen1.5-moe-a2.7b",
    "tiny-gpt2",    "tiny-llama",   "tiny-moe-every2", "tiny-moe-shared", "tiny-moe",       "tiny-palm",
    "bloom-176b",
};
static const char *const hws[] = {"a100-40g", "a100-80g", "h100", "h200", "tpu-v4"};
enum { N_MODELS = sizeof models / sizeof models[0], N_HW = sizeof hws / sizeof hws[0] };

/* over the whole suite */
static long n_checked, n_bounded, n_compute, n_tight, n_variants;
static double worst = 0.0;   /* the largest bound / prefill_s seen */

/* lb against the prefill of l priced by sp_cost_eval (SP_EINVAL: l does
 * not apply, nothing to compare); *c its cost when priced */
static int check_one(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                     sp_cost_cache *cache, sp_cost *c)
{
    sp_cost_opts o;
    sp_cost_opts_init(&o);
    o.quiet = 1;   /* many variants do not apply */
    o.cache = cache;
    sp_stage_time st[SP_LAYOUT_MAX_STAGES];
    o.stage_times = st;
    sp_status s = sp_cost_eval(m, hw, l, w, &o, c);
    if (s == SP_EINVAL) return 0;
    ck_assert_int_eq(s, SP_OK);
    double lb = sp_cost_prefill_lb(m, hw, l, w);
    ck_assert_msg(lb >= 0 && lb <= c->prefill_s, "%s on %s: bound %.17g s above the prefill %.17g s (stages %d, "
                  "replicas %d, mesh %dx%dx%d, M %d, chunk %d, tokens %d)", m->name, hw->name, lb, c->prefill_s,
                  l->stages, l->replicas, l->mesh[0], l->mesh[1], l->mesh[2], l->microbatches, l->prefill_chunk,
                  l->prefill_tokens);
    /* the pipeline program's share (plan_space.c bound_one): the busiest stage's micro-batch
     * takes at least the bound / M */
    int64_t busiest = 0;
    for (int k = 0; k < l->stages; k++)
        if (st[k].prefill_ps > busiest) busiest = st[k].prefill_ps;
    ck_assert_msg((int64_t)(lb * 1e12 / l->microbatches) <= busiest, "%s on %s: bound / M %.17g s above the busiest "
                  "stage's %lld ps", m->name, hw->name, lb / l->microbatches, (long long)busiest);
    if (lb > 0 && lb / c->prefill_s > worst) worst = lb / c->prefill_s;
    return 1;
}

START_TEST(test_prefill_lb_space)
{
    const char *mn = models[_i / N_HW], *hn = hws[_i % N_HW];
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find(mn, &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find(hn, &hw, &err), SP_OK);
    /* 8 chips, 16 on the torus's slices too (a layout priced need not fit: its prefill is a price all
     * the same); prompt and batch the passes divide */
    int chips = _i % 2 ? 8 : 16;
    sp_workload w = {16, 256, 8};
    if (m.max_context > 0 && w.prompt + w.gen > m.max_context) w.prompt = m.max_context / 2, w.gen = 4;
    sp_plan_opts po;
    sp_plan_opts_init(&po);
    spi_space s;
    spi_space_init(&s, &m, &hw);
    spi_space_narrow(&s, &po);
    sp_status st = spi_space_add(&s, chips, &w, SP_PLAN_W_AUTO, SP_DT_BF16);
    if (st != SP_OK) {   /* a model the planner refuses (bloom-176b: ALiBi) has no layout to bound */
        ck_assert_int_eq(st, SP_EINVAL);
        spi_space_free(&s);
        return;
    }
    sp_cost_cache *cache;
    ck_assert_int_eq(sp_cost_cache_create(&cache), SP_OK);
    int dense = m.n_experts == 0;
    for (int i = 0; i < s.n; i++) {
        const spi_cand *c = &s.c[i];
        double lb = sp_cost_prefill_lb(&m, &hw, &c->layout, &w);
        ck_assert_msg(lb >= 0 && lb <= c->prefill_s, "%s on %s: bound %.17g s above the planner's prefill %.17g s",
                      mn, hn, lb, c->prefill_s);
        n_checked++;
        n_bounded += lb > 0;
        if (dense) ck_assert_msg(lb > 0, "%s on %s: a dense model without a bound", mn, hn);
        /* every 5th layout: its breakdown, each chunked variant, an uneven split, a smaller first stage */
        if (i % 5) continue;
        sp_layout l = c->layout;
        l.prefill_chunk = l.prefill_tokens = 0;
        sp_cost cost;
        if (!check_one(&m, &hw, &l, &w, cache, &cost)) continue;
        /* compute bound: the prefill's compute terms (summed over its stages) are most of it, and its
         * time is the one stage's (no pipeline bubble to divide) */
        if (l.stages == 1 && l.microbatches == 1 && lb > 0 && cost.prefill.compute_s >= 0.9 * cost.prefill_s &&
            cost.prefill.compute_s >= cost.prefill.memory_s) {
            n_compute++;
            n_tight += lb > 0.5 * cost.prefill_s;
        }
        int64_t mb = w.batch / l.replicas / l.microbatches;
        for (int64_t ch = mb / 2; ch >= 1; ch /= 2) {
            if (mb % ch) continue;
            sp_layout v = l;
            v.prefill_chunk = (int)ch;
            n_variants += check_one(&m, &hw, &v, &w, cache, &cost);
            for (int t = (int)w.prompt / 2; t >= (int)w.prompt / 8; t /= 2) {
                v.prefill_tokens = t;
                n_variants += check_one(&m, &hw, &v, &w, cache, &cost);
            }
        }
        if (l.stages > 1 && m.n_layers > l.stages + 1) {
            sp_layout v = l;
            int64_t L = m.n_layers, S = v.stages;
            for (int k = 0; k < S; k++) v.stage_layers[k] = (int16_t)(L / S + (k < L % S ? 1 : 0));
            v.stage_layers[0]++;
            v.stage_layers[S - 1]--;
            n_variants += check_one(&m, &hw, &v, &w, cache, &cost);
            if (l.mesh[0] % 2 == 0) {
                v = l;
                for (int k = 0; k < S; k++) memcpy(v.stage_mesh[k], l.mesh, sizeof l.mesh);
                v.stage_mesh[0][0] /= 2;
                n_variants += check_one(&m, &hw, &v, &w, cache, &cost);
            }
        }
    }
    sp_cost_cache_free(cache);
    spi_space_free(&s);
}
END_TEST

/* Profiles whose curves take other paths: a FLOPs curve that peaks between
 * its points' ends, rows curves per weight dtype, and rows classes by
 * weight size (a CPU's kinds of curve), random, on small models. */
static unsigned rng = 1;
static double urand(void)
{
    rng = rng * 1103515245u + 12345u;
    return (double)(rng >> 8 & 0xffffff) / 16777216.0;
}

static void random_curve(int n, double *x, double *y, double x0)
{
    for (int i = 0; i < n; i++) {
        x[i] = x0 * pow(10.0, i + urand());
        y[i] = 0.05 + 0.95 * urand();
    }
}

START_TEST(test_prefill_lb_curves)
{
    static const char *const small[] = {"tiny-llama", "tiny-gpt2", "tiny-palm", "gpt-350m-ft", "palm-8b", "llama2-7b"};
    rng = 7u + 31u * (unsigned)_i;
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find(small[_i % 6], &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find(_i % 2 ? "h100" : "tpu-v4", &hw, &err), SP_OK);
    hw.eff_points = 3 + _i % 4;
    random_curve(hw.eff_points, hw.eff_flops, hw.eff_value, 1e6);
    for (int dt = 0; dt < SP_DT_COUNT; dt++) {
        if (_i % 3 == 0) continue;   /* no rows factor */
        if (_i % 3 == 1) {
            hw.rows_points[dt] = 4;
            random_curve(4, hw.rows_m[dt], hw.rows_value[dt], 1.0);
            continue;
        }
        hw.rows_sizes[dt] = 3;
        for (int c = 0; c < 3; c++) {
            hw.rows_w[dt][c] = 1e4 * pow(30.0, c);
            hw.rows_w_points[dt][c] = 4;
            random_curve(4, hw.rows_w_m[dt][c], hw.rows_w_value[dt][c], 1.0);
        }
    }
    sp_workload w = {8, 128, 4};
    sp_plan_opts po;
    sp_plan_opts_init(&po);
    spi_space s;
    spi_space_init(&s, &m, &hw);
    spi_space_narrow(&s, &po);
    ck_assert_int_eq(spi_space_add(&s, 4 << (_i % 2), &w, SP_PLAN_W_AUTO, SP_DT_BF16), SP_OK);
    sp_cost_cache *cache;
    ck_assert_int_eq(sp_cost_cache_create(&cache), SP_OK);
    for (int i = 0; i < s.n; i++) {
        double lb = sp_cost_prefill_lb(&m, &hw, &s.c[i].layout, &w);
        ck_assert_msg(lb > 0 && lb <= s.c[i].prefill_s, "%s: bound %.17g s, the planner's prefill %.17g s", m.name, lb,
                      s.c[i].prefill_s);
        n_checked++;
        sp_cost cost;
        n_variants += check_one(&m, &hw, &s.c[i].layout, &w, cache, &cost);
    }
    sp_cost_cache_free(cache);
    spi_space_free(&s);
}
END_TEST

START_TEST(test_prefill_lb_summary)
{
    printf("prefill bound: %ld layouts of the planner's spaces (%ld bounded), %ld variants more; %ld compute bound, "
           "%ld of them bounded above half their prefill; the tightest bound %.3f of its prefill\n",
           n_checked, n_bounded, n_variants, n_compute, n_tight, worst);
    ck_assert_int_gt(n_checked, 100000);
    ck_assert_int_gt(n_variants, 10000);
    ck_assert_int_gt(n_compute, 100);
    ck_assert_int_ge(n_tight, n_compute * 9 / 10);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("prefill_lb");
    TCase *t = tcase_create("bound");
    tcase_add_loop_test(t, test_prefill_lb_space, 0, N_MODELS * N_HW);
    tcase_add_loop_test(t, test_prefill_lb_curves, 0, 24);
    tcase_add_test(t, test_prefill_lb_summary);
    tcase_set_timeout(t, 600);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
