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
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "spi_common.h"
#include "sp_plan.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
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
    for (int i = 0; i < runs; i++) {
        sp_plan *p;
        double t0 = now_s();
        if (sp_plan_solve(&m, &hw, 64, &w, NULL, &p) != SP_OK || !p->has_chosen) {
            fprintf(stderr, "bench_plan: plan failed: %s\n", sp_last_error());
            return 1;
        }
        t[i] = now_s() - t0;
        ev += p->stats.eval_s;
        gl += p->stats.glpk_s;
        st = p->stats;
        sp_plan_free(p);
    }
    qsort(t, (size_t)runs, sizeof *t, cmpd);
    printf("%-10s %8s %10s %10s %10s %8s %8s %7s\n", "bench", "runs", "median_ms", "eval_ms", "glpk_ms", "glpk_%",
           "layouts", "solves");
    printf("%-10s %8d %10.1f %10.1f %10.1f %8.1f %8d %7d  (%d columns after reductions)\n", "plan", runs,
           t[runs / 2] * 1e3, ev / runs * 1e3, gl / runs * 1e3, 100 * gl / (ev + gl), st.candidates, st.solves,
           st.columns);
    free(t);
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
