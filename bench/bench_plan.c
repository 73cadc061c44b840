/* bench_plan.c: planner time (make bench; ./bench/bench_plan [runs]).
 *
 * 1. plan: palm-540b on 64 tpu-v4, batch 64, prompt 2048, gen 64 (objective
 *    total latency, frontier and rivals on), median of `runs` runs.
 * 2. frontier: chips {8,...,256} x batch {1,2,4,...,1024}, decode and prefill
 *    (sp_plan_frontiers: every layout priced once for both).
 * For each: wall time, time in sp_cost_eval, time in glp_* calls, candidates.
 *
 * Napkin math: 64 = 2^6 chips split into (S, R, X, Y, Z) is C(10,4) = 210
 * ordered factorisations, fewer once the 4x4x4-fitting, stage <= 118 layers and
 * micro-batch rules apply; x 2 precisions (tpu-v4 has no fp8) x up to 3
 * micro-batch counts x 68 (prefill, decode) layout pairs = ~56k layouts, of
 * which the cost model accepts ~12k.  sp_cost_eval lowers 2 programs per
 * pipeline stage (~6 us each) and prices 3: ~13 us at S = 1, S times more at S
 * stages: ~15-20 us on average => ~200 ms of pricing, against a 50 ms target.
 * GLPK: the exact reductions (doc/planner.md) leave ~140 columns of the 12k
 * (the admissible rank-minimum, the non-dominated frontier set, one per value
 * of each rival kind); one problem, warm-started: ~0.2 ms per solve.
 * The frontier sweep prices every layout of 66 (chips, batch) pairs, ~10^5-10^6
 * layouts: tens of seconds of sp_cost_eval against a 2 s target.
 * Since then the cost model prices each stage kind once and memoises each
 * phase's prices by its sp_lower_key (~1-1.5 us per layout), and the planner
 * prices on one thread per CPU.  Measured on this 2-core VM (load ~1): plan
 * median 23-24 ms in process, GLPK 1.3 ms (5.5 %); whole process (sh
 * bench/plan_process.sh) median 36-37 ms; frontier 0.92 s.
 *
 * 3. plan256 / split256 / split256s: the plan on 256 chips (target < 1 s),
 *    and the pipeline program over the pipelines of up to 8 stages: the
 *    full product's size (Σ over templates of the splits in the window),
 *    the program's size before the reductions (doc/planner.md "Size"),
 *    what the reductions keep, its solve time and GLPK's nodes; with the
 *    space's incumbent (as plan runs it), and on a sample of the 16
 *    templates of least bound without one (the program at work).
 *    Napkin math: 256 = 2^8 chips give ~131k layouts tried, ~12k priced
 *    (1/4 of 64 chips' pricing: fewer meshes fit the torus slices); the
 *    program prices ~36 blocks per kept template.  Counted (callgrind, one
 *    pricing thread): 2.00G instructions for the plan (~0.2 s of one core
 *    at ~3 instructions a cycle);
 *    8,012 templates, 1.5e9 (layout, split) pairs, 575,285 x 367,764
 *    before the reductions, none kept; the sample: 1,128 x 714, 57 nodes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <time.h>
#include "spi_common.h"
#include "sp_plan.h"
#include "spi_plan.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Splits of L layers over S stages with every count in [lo, hi]: the
 * compositions the full product would price per template (a double: the
 * count outgrows 64 bits for long windows). */
static double splits_in_window(int L, int S, int lo, int hi)
{
    double *f = calloc((size_t)L + 1, sizeof *f), *g = calloc((size_t)L + 1, sizeof *g);
    if (!f || !g) {
        free(f);
        free(g);
        return 0;
    }
    f[0] = 1;
    for (int s = 0; s < S; s++) {
        for (int r = 0; r <= L; r++) g[r] = 0;
        for (int r = 0; r <= L; r++)
            for (int n = lo; n <= hi && r + n <= L; n++) g[r + n] += f[r];
        double *x = f;
        f = g, g = x;
    }
    double n = f[L];
    free(f);
    free(g);
    return n;
}

/* 3. The pipeline program for palm-540b on 256 tpu-v4 chips, pipelines of
 * up to 8 stages, for workload w under objective o: the space priced (on
 * every core, each template's bound with it, as sp_plan_solve does), the
 * incumbent taken from it, then the program: its templates, the full
 * product's size beside the program's, its solve time and GLPK's nodes. */
static int bench_split256(const sp_model *m, const sp_hw *hw, const sp_workload *w, const sp_plan_opts *o,
                          int sample, const char *name)
{
    spi_space s;
    spi_space_init(&s, m, hw);
    s.split_bounds = 1;
    double t0 = now_s();
    if (spi_space_add(&s, 256, w, o->weights, o->kv) != SP_OK) {
        fprintf(stderr, "bench_plan: pricing 256 chips failed: %s\n", sp_last_error());
        spi_space_free(&s);
        return 1;
    }
    double t_space = now_s() - t0;
    double inc = INFINITY, product = 0;
    long rows0 = 1, cols0 = 0;   /* the program over every template, before the reductions */
    int templates = 0;
    for (int i = 0; i < s.n; i++) {
        const spi_cand *c = &s.c[i];
        int adm = c->mem_over <= 0 && (o->max_latency_s <= 0 || spi_cand_latency(&s, c, o->latency_metric) <= o->max_latency_s) &&
                  (o->min_tokens_per_s <= 0 || c->tokens_per_s >= o->min_tokens_per_s);
        double v = spi_split_measure(&s, c, o);
        if (adm && v < inc) inc = v;
        if (!spi_split_is_template(&c->layout, m->n_layers) || c->layout.stages > 8) continue;
        int lo, hi;
        spi_split_window(m->n_layers, c->layout.stages, &lo, &hi);
        int S = c->layout.stages, nn = hi - lo + 1;
        product += splits_in_window((int)m->n_layers, S, lo, hi);
        cols0 += 1 + S * (nn - 1) + 6;   /* doc/planner.md "Size" (forms: 1 prefill, 2 decode) */
        rows0 += S * (nn - 1) + 2 + S + 3 * (1 + S) + 3 + (S > 3 ? (long)(S - 3) * (nn - 1) : 0);
        templates++;
    }
    /* sample > 0: no incumbent, the `sample` templates of least bound in one
     * program (the program at work, where the bound would drop them all) */
    spi_split_req r = {.o = o, .incumbent = sample ? INFINITY : inc, .batch = sample, .max_stages = 8,
                       .max_templates = sample};
    spi_split_out so;
    double glpk_s = 0;
    t0 = now_s();
    sp_status st = spi_split_solve(&s, 0, &r, &so, &glpk_s);
    double t_split = now_s() - t0;
    spi_space_free(&s);
    if (st != SP_OK) {
        fprintf(stderr, "bench_plan: pipeline program failed: %s\n", sp_last_error());
        return 1;
    }
    printf("%-10s templates %d (S <= 8): full product %.3g (layout, split) pairs; program before reductions %ld rows x "
           "%ld columns; %s %d kept, %d blocks priced, solved: %d rows x %d columns, %ld B&B nodes; space %.1f ms, "
           "program %.1f ms (blocks %.1f, GLPK %.1f)%s\n",
           name, templates, product, rows0, cols0, sample ? "sampled, no incumbent:" : "with the space's incumbent:",
           so.kept, so.blocks, so.rows, so.cols, so.nodes, t_space * 1e3, t_split * 1e3, so.eval_s * 1e3,
           glpk_s * 1e3, so.found ? "; a split found" : "");
    return 0;
}

/* `runs` plans of chips chips: wall seconds of each into t, the pricing and
 * GLPK seconds summed into *ev and *gl, the last plan's stats into *st. */
static int plan_runs(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w, int runs, double *t,
                     double *ev, double *gl, sp_plan_stats *st)
{
    *ev = *gl = 0;
    for (int i = 0; i < runs; i++) {
        sp_plan *p;
        double t0 = now_s();
        if (sp_plan_solve(m, hw, chips, w, NULL, &p) != SP_OK || !p->has_chosen) {
            fprintf(stderr, "bench_plan: plan of %d chips failed: %s\n", chips, sp_last_error());
            return 1;
        }
        t[i] = now_s() - t0;
        *ev += p->stats.eval_s;
        *gl += p->stats.glpk_s;
        *st = p->stats;
        sp_plan_free(p);
    }
    return 0;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
#if defined(SP_BUILDDIR) && defined(SP_SRCDATADIR)
    spi_use_build_tree_data(SP_BUILDDIR, SP_SRCDATADIR);   /* bundled models and hardware, uninstalled */
#endif
    int runs = argc > 1 ? atoi(argv[1]) : 5;
    int do_frontier = argc > 2 ? atoi(argv[2]) : 1;
    if (runs < 1) runs = 1;
    sp_model m;
    sp_hw hw;
    sp_error err;
    if (sp_model_find("palm-540b", &m, &err) != SP_OK || sp_hw_find("tpu-v4", &hw, &err) != SP_OK) {
        fprintf(stderr, "bench_plan: cannot load palm-540b / tpu-v4: %s\n", sp_last_error());
        return 1;
    }
    sp_workload w = {64, 2048, 64};
    double *t = malloc((size_t)runs * sizeof *t), ev = 0, gl = 0;
    sp_plan_stats st = {0};
    if (plan_runs(&m, &hw, 64, &w, runs, t, &ev, &gl, &st)) return 1;
    qsort(t, (size_t)runs, sizeof *t, cmpd);
    printf("%-10s %8s %10s %10s %10s %8s %8s %7s\n", "bench", "runs", "median_ms", "eval_ms", "glpk_ms", "glpk_%",
           "layouts", "solves");
    printf("%-10s %8d %10.1f %10.1f %10.1f %8.1f %8d %7d  (%d columns after reductions)\n", "plan", runs,
           t[runs / 2] * 1e3, ev / runs * 1e3, gl / runs * 1e3, 100 * gl / (ev + gl), st.candidates, st.solves,
           st.columns);
    free(t);
    /* 256 chips: the whole plan (median of runs, target < 1 s), and the
     * pipeline program of pipelines up to 8 stages, for the default
     * objective and for throughput at a large batch, where uneven splits win */
    t = malloc((size_t)runs * sizeof *t);
    if (plan_runs(&m, &hw, 256, &w, runs, t, &ev, &gl, &st)) return 1;
    qsort(t, (size_t)runs, sizeof *t, cmpd);
    printf("%-10s %8d %10.1f %10.1f %10.1f %8.1f %8d %7d  (256 chips; pipeline program: %d of %d templates kept, "
           "%d x %d, %ld nodes; target < 1000 ms)\n",
           "plan256", runs, t[runs / 2] * 1e3, ev / runs * 1e3, gl / runs * 1e3, 100 * gl / (ev + gl), st.candidates,
           st.solves, st.split_kept, st.split_templates, st.split_rows, st.split_cols, st.split_nodes);
    free(t);
    sp_plan_opts po;
    sp_plan_opts_init(&po);
    if (bench_split256(&m, &hw, &w, &po, 0, "split256")) return 1;
    if (bench_split256(&m, &hw, &w, &po, 16, "split256s")) return 1;
    if (!do_frontier) return 0;
    int chips[] = {8, 16, 32, 64, 128, 256};
    int64_t batches[11];
    for (int i = 0; i < 11; i++) batches[i] = (int64_t)1 << i;
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.cost_metric = SP_PLAN_COST_PHASE;
    o.rivals = 0;
    /* both phases from one pricing (sp_plan_frontiers, as the CLI's frontier verb) */
    sp_plan_latency ph[2] = {SP_PLAN_LAT_DECODE, SP_PLAN_LAT_PREFILL};
    sp_plan *fp[2];
    double t0 = now_s(), fe = 0, fg = 0;
    int cand = 0, solves = 0, pts = 0, cols = 0;
    if (sp_plan_frontiers(&m, &hw, chips, 6, batches, 11, &w, &o, ph, 2, fp) != SP_OK) {
        fprintf(stderr, "bench_plan: frontier failed: %s\n", sp_last_error());
        return 1;
    }
    double tf = now_s() - t0;
    fe = fp[0]->stats.eval_s, cand = fp[0]->stats.candidates;   /* shared by both phases */
    for (int k = 0; k < 2; k++) {
        fg += fp[k]->stats.glpk_s, solves += fp[k]->stats.solves, pts += fp[k]->n_frontier;
        cols += fp[k]->stats.columns;
        sp_plan_free(fp[k]);
    }
    printf("%-10s %8d %10.1f %10.1f %10.1f %8.1f %8d %7d  (%d points; %d columns after reductions; "
           "layouts priced once for both phases)\n",
           "frontier", 1, tf * 1e3, fe * 1e3, fg * 1e3, 100 * fg / (fe + fg), cand, solves, pts, cols);
    return 0;
}
