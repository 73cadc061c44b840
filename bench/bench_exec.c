/* bench_exec.c: the executor on one chip (one thread) against this machine's
 * measured peaks: prefill GFLOP/s vs the 1-thread OpenBLAS SGEMM peak, and
 * decode bytes/s vs the memcpy bandwidth, on bench-1b (~1.1B parameters).
 * Validate, then time.
 *
 *   bench/bench_exec [model] [weights f32|bf16|int8|fp8] [prompt] [gen]
 *   defaults: bench-1b f32 256 4
 *   bench/bench_exec --trace-overhead [rounds] [layout] [prompt] [gen] [model]
 *   defaults: 6 mesh=2x1x1 16 8 bench-1b (f32; see trace_overhead)
 *
 * Napkin math (bench-1b: 22 layers, E 2048, F 5632 SwiGLU, 32 q / 4 kv heads
 * of 64, V 32000, untied):
 *   matmul weights per layer = E*(E + 2*256) + E*E + 3*E*F = 2048*2560 + 4.19M
 *     + 34.6M = 44.0M; x 22 = 968M, + LM head 65.5M = 1.03G multiplied per token.
 *   prefill, batch 1, P = 256: 2 * 1.03G * 256 = 530 GFLOP of matmul (+ ~1%
 *     attention; the LM head only for the last token), at ~100 GFLOP/s of one
 *     core's SGEMM -> ~5.3 s.  Local shapes (256 x 2048 x 5632 ...) are large
 *     enough for OpenBLAS to sit near its peak: the target is >= 70 % of it.
 *   decode, batch 1: every weight read once per token: 4.1 GB (f32), 2.1 GB
 *     (bf16), 1.0 GB (int8 + fp32 scales); KV read 22 * 2 * P * 256 * 4 B =
 *     11.5 MB at P = 256: negligible.  1 token = 2 FLOPs per weight against
 *     1-4 bytes: memory bound; at ~15-20 GB/s of one core -> 0.2-0.3 s (f32),
 *     0.06-0.07 s (int8).  The target is >= 70 % of the copy bandwidth.
 * Figures: GFLOP/s = program FLOPs (sp_lower's steps: pre + n_layers * layer
 * + post) / prefill_s; decode GB/s = (weight_bytes + kv_bytes_read of the
 * decode program at the middle context) / decode_step_s; copy GB/s =
 * bytes copied / t (read + write traffic is twice that, printed too).
 */
#include "spi_common.h"
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <cblas.h>
#include "exec/sp_exec.h"
#include "exec/sp_ref.h"
#include "sp_validate.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define DIE_IF(c, ...)                                                   \
    do {                                                                 \
        if (c) {                                                         \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                       \
            fprintf(stderr, " (%s)\n", sp_last_error());                 \
            exit(1);                                                     \
        }                                                                \
    } while (0)

static double sgemm_peak(void)
{
    int n = 2048;
    float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4), *c = malloc((size_t)n * n * 4);
    DIE_IF(!a || !b || !c, "alloc");
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
    double best = INFINITY;
    for (int r = 0; r < 4; r++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t = now() - t;
        if (r && t < best) best = t;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * n * n * (double)n / best;
}

static double copy_bw(void)
{
    size_t n = (size_t)512 << 20;
    char *s = malloc(n), *d = malloc(n);
    DIE_IF(!s || !d, "alloc");
    memset(s, 1, n);
    memset(d, 2, n);
    double best = INFINITY;
    for (int r = 0; r < 5; r++) {
        double t = now();
        memcpy(d, s, n);
        t = now() - t;
        if (r && t < best) best = t;
    }
    free(s);
    free(d);
    return (double)n / best;
}

static int64_t steps_sum(const sp_steps *ss, int what)
{
    int64_t v = 0;
    for (int i = 0; i < ss->n; i++)
        v += what == 0 ? ss->s[i].flops : ss->s[i].weight_bytes + ss->s[i].kv_bytes_read;
    return v;
}
static int64_t prog_sum(const sp_program *p, int what)
{
    return steps_sum(&p->pre, what) + p->n_layers * steps_sum(&p->layer, what) + steps_sum(&p->post, what);
}

/* validation: a small model, the same dtype, the executor's greedy tokens equal the reference's */
static void validate(const char *wdt)
{
    sp_model m;
    sp_error err;
    sp_layout l;
    char ls[256];
    snprintf(ls, sizeof ls, "mesh=1x1x1,weights=%s,kv=f32,prefill=ws1d/heads,decode=ws1d/heads", wdt);
    DIE_IF(sp_model_find("tiny-llama", &m, &err) || sp_layout_parse(ls, &l, &err), "validate setup");
    sp_weights w;
    DIE_IF(sp_weights_build_random(&m, 5, &w) || sp_weights_quantize(&w, l.weights) ||
               sp_weights_round_tables(&w, sp_lower_table_dtype(l.weights)), "weights");
    int64_t B = 2, P = 8, G = 8, V = m.vocab;
    int32_t prompt[16], et[16], rt[16], cur[2];
    float *rl = malloc((size_t)(B * V) * 4);
    uint64_t s = 3;
    for (int i = 0; i < B * P; i++) prompt[i] = (int32_t)(sp_kern_rng_next(&s) % (uint64_t)V);
    sp_ref *r;
    DIE_IF(sp_ref_build(&m, &w, B, P + G, &r) || sp_ref_forward(r, prompt, P, rl, SP_REF_LAST), "reference");
    for (int64_t g = 0; g < G; g++) {
        if (g) DIE_IF(sp_ref_forward(r, cur, 1, rl, SP_REF_LAST), "reference");
        for (int64_t b = 0; b < B; b++) cur[b] = rt[b * G + g] = sp_kern_argmax(rl + b * V, V);
    }
    sp_ref_free(r);
    sp_exec *ex;
    DIE_IF(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex) || sp_exec_run(ex, prompt, NULL, et, NULL, NULL),
           "executor");
    DIE_IF(memcmp(et, rt, sizeof et), "tiny-llama %s: executor tokens differ from the reference", wdt);
    sp_exec_free(ex);
    sp_weights_free(&w);
    free(rl);
    printf("# validated: tiny-llama %s, executor tokens == reference tokens (B %lld, P %lld, G %lld)\n", wdt,
           (long long)B, (long long)P, (long long)G);
}

/* Does `run --trace` perturb the run?  (Required: < 2 % on bench-1b.)  One
 * executor, one set of weights, runs without and with a trace alternately
 * (ABBA: round r runs untraced first when r is even, traced first when odd,
 * so a drifting machine load cancels), and the median over rounds of each
 * round's traced / untraced ratio of the measured prefill time, decode step
 * time and the whole sp_exec_run call (setup, and the trace written after the
 * run, included), in wall time and in the process's CPU time (user + system,
 * every thread: what tracing adds in work, far less sensitive than wall time
 * to other jobs on a loaded machine).  In process rather than `shardplan run` twice: the same code
 * path (run --trace is sp_exec_set_trace + sp_exec_run) without building
 * 1.1 G random weights per run.
 * Napkin math (bench-1b, 2 chips ws1d, f32): every step is timed whether
 * traced or not (two clock_gettime, ~25 ns each: the per-class totals); a
 * trace adds one 64-byte event per step (~10-50 ns: a store and a doubling
 * array, ~4,000 events a chip for P 16 + G 8 = 256 KiB).  Steps per token per
 * chip: ~20 a layer x 22 layers + ~10 = ~450 -> ~450 x 50 ns = 23 us against a
 * ~220 ms decode step (1e-4) and a ~2.6 s prefill (1e-5).  Writing the JSON
 * (~9,000 events x ~1 us = ~10 ms) happens after the measured phases: it
 * shows only in the call's wall time, against ~10 s of setup and run (1e-3). */
static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

static void trace_overhead(int rounds, const char *layout, int64_t P, int64_t G, const char *model)
{
    sp_model m;
    sp_error err;
    sp_layout l;
    DIE_IF(sp_model_find(model, &m, &err), "model %s: %s", model, err.text);
    DIE_IF(sp_layout_parse(layout, &l, &err), "layout: %s", err.text);
    double t = now();
    sp_weights w;
    DIE_IF(sp_weights_build_random(&m, 1, &w), "weights");
    printf("# %s: %.2f GB of fp32 weights built in %.1f s; layout %s, batch 1, prompt %lld, gen %lld\n", model,
           (double)w.bytes * 1e-9, now() - t, layout, (long long)P, (long long)G);
    const int64_t B = 1;
    int32_t *prompt = malloc((size_t)(B * P) * 4), *tok[2] = {malloc((size_t)(B * G) * 4), malloc((size_t)(B * G) * 4)};
    DIE_IF(!prompt || !tok[0] || !tok[1], "alloc");
    uint64_t s = 11;
    for (int64_t i = 0; i < B * P; i++) prompt[i] = (int32_t)(sp_kern_rng_next(&s) % (uint64_t)m.vocab);
    sp_exec *ex;
    DIE_IF(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex), "exec build");
    char path[64];
    snprintf(path, sizeof path, "/tmp/sp_bench_trace.%ld.json", (long)getpid());
    enum { PF, DS, WALL, CPU, NFIG };
    double *ratio[NFIG], v[2][NFIG];
    for (int f = 0; f < NFIG; f++) DIE_IF(!(ratio[f] = malloc((size_t)rounds * sizeof(double))), "alloc");
    printf("%-5s %-8s %10s %10s %10s %10s\n", "round", "trace", "prefill_s", "step_s", "run_s", "run_cpu_s");
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int traced = (r % 2) ? !k : k;   /* ABBA */
            sp_exec_stats st;
            DIE_IF(sp_exec_set_trace(ex, traced ? path : NULL), "set trace");
            t = now();
            double c0 = cpu_s();
            DIE_IF(sp_exec_run(ex, prompt, NULL, tok[traced], NULL, &st), "exec run");
            v[traced][CPU] = cpu_s() - c0;
            v[traced][WALL] = now() - t;
            v[traced][PF] = st.prefill_s;
            v[traced][DS] = st.decode_step_s;
            printf("%-5d %-8s %10.4f %10.4f %10.3f %10.3f\n", r, traced ? "traced" : "none", st.prefill_s,
                   st.decode_step_s, v[traced][WALL], v[traced][CPU]);
        }
        /* validation: the traced run computes the same tokens and writes a trace */
        DIE_IF(memcmp(tok[0], tok[1], (size_t)(B * G) * 4), "traced and untraced runs give different tokens");
        FILE *f = fopen(path, "r");
        DIE_IF(!f || fseek(f, 0, SEEK_END) || ftell(f) < 1000, "no trace written to %s", path);
        fclose(f);
        for (int k = 0; k < NFIG; k++) ratio[k][r] = v[1][k] / v[0][k];
    }
    remove(path);
    double lavg[3] = {0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &lavg[0], &lavg[1], &lavg[2]) != 3) lavg[0] = lavg[1] = lavg[2] = 0;
        fclose(la);
    }
    printf("# traced / untraced, median of %d rounds' ratios (load average %.2f %.2f %.2f; target < 1.02)\n", rounds,
           lavg[0], lavg[1], lavg[2]);
    printf("%-12s %8s %8s %8s\n", "figure", "median", "min", "max");
    const char *names[NFIG] = {"prefill", "decode_step", "run_call", "run_cpu"};
    for (int f = 0; f < NFIG; f++) {
        double lo = INFINITY, hi = 0;
        for (int r = 0; r < rounds; r++) lo = fmin(lo, ratio[f][r]), hi = fmax(hi, ratio[f][r]);
        printf("%-12s %8.4f %8.4f %8.4f\n", names[f], sp_abs_median(rounds, ratio[f]), lo, hi);
        free(ratio[f]);
    }
    sp_exec_free(ex);
    sp_weights_free(&w);
    free(prompt);
    free(tok[0]);
    free(tok[1]);
}

int main(int argc, char **argv)
{
#if defined(SP_BUILDDIR) && defined(SP_SRCDATADIR)
    spi_use_build_tree_data(SP_BUILDDIR, SP_SRCDATADIR);   /* bundled models and hardware, uninstalled */
#endif
    if (argc > 1 && !strcmp(argv[1], "--trace-overhead")) {
        int rounds = argc > 2 ? atoi(argv[2]) : 6;
        DIE_IF(rounds < 1, "rounds must be >= 1");
        trace_overhead(rounds, argc > 3 ? argv[3] : "mesh=2x1x1", argc > 4 ? atoll(argv[4]) : 16,
                       argc > 5 ? atoll(argv[5]) : 8, argc > 6 ? argv[6] : "bench-1b");
        return 0;
    }
    const char *model = argc > 1 ? argv[1] : "bench-1b", *wdt = argc > 2 ? argv[2] : "f32";
    int64_t P = argc > 3 ? atoll(argv[3]) : 256, G = argc > 4 ? atoll(argv[4]) : 4, B = 1;
    sp_kern_set_blas_threads(1);
    double peak = sgemm_peak(), bw = copy_bw();
    printf("# machine: 1-thread OpenBLAS SGEMM 2048^3: %.1f GFLOP/s; memcpy 512 MiB: %.1f GB/s copied "
           "(%.1f GB/s read + write)\n", peak * 1e-9, bw * 1e-9, 2 * bw * 1e-9);
    validate(wdt);

    sp_model m;
    sp_error err;
    sp_layout l;
    char ls[256];
    snprintf(ls, sizeof ls, "mesh=1x1x1,weights=%s,kv=f32,prefill=ws1d/heads,decode=ws1d/heads", wdt);
    DIE_IF(sp_model_find(model, &m, &err), "model %s: %s", model, err.text);
    DIE_IF(sp_layout_parse(ls, &l, &err), "layout: %s", err.text);
    double t = now();
    sp_weights w;
    DIE_IF(sp_weights_build_random(&m, 1, &w), "weights");
    DIE_IF(sp_weights_quantize(&w, l.weights) || sp_weights_round_tables(&w, sp_lower_table_dtype(l.weights)),
           "quantize");
    printf("# %s: %.2f GB of fp32 weights built (and round-tripped through %s) in %.1f s\n", model,
           (double)w.bytes * 1e-9, wdt, now() - t);

    /* the programs, for the FLOPs and bytes the figures divide by */
    sp_program *pp = malloc(sizeof *pp), *pd = malloc(sizeof *pd);
    sp_shape sp = {B, P, P, P + G, SP_DT_F32, 0}, sd = {B, 1, P + G / 2, P + G, SP_DT_F32, 0};
    DIE_IF(!pp || !pd || sp_lower(&m, &l, SP_PHASE_PREFILL, &sp, 0, pp) || sp_lower(&m, &l, SP_PHASE_DECODE, &sd, 0, pd),
           "lower");
    double flops = (double)prog_sum(pp, 0), dbytes = (double)prog_sum(pd, 1);

    int32_t *prompt = malloc((size_t)(B * P) * 4), *tok = malloc((size_t)(B * G) * 4);
    float *lg = malloc((size_t)(B * m.vocab) * 4);
    uint64_t s = 11;
    for (int64_t i = 0; i < B * P; i++) prompt[i] = (int32_t)(sp_kern_rng_next(&s) % (uint64_t)m.vocab);
    sp_exec *ex;
    DIE_IF(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex), "exec build");
    sp_exec_stats st;
    t = now();
    DIE_IF(sp_exec_run(ex, prompt, NULL, tok, lg, &st), "exec run");
    double total = now() - t;
    /* sanity: finite logits, a second run gives the same tokens */
    for (int64_t i = 0; i < m.vocab; i++) DIE_IF(!isfinite(lg[i]), "non-finite logit %lld", (long long)i);
    int32_t *tok2 = malloc((size_t)(B * G) * 4);
    sp_exec_stats st2;
    DIE_IF(sp_exec_run(ex, prompt, NULL, tok2, NULL, &st2), "exec run 2");
    DIE_IF(memcmp(tok, tok2, (size_t)(B * G) * 4), "two runs differ");
    double pf = fmin(st.prefill_s, st2.prefill_s), ds = fmin(st.decode_step_s, st2.decode_step_s);
    printf("# %s weights %s, batch %lld, prompt %lld, gen %lld (run incl. setup %.1f s; best of 2 runs)\n", model,
           wdt, (long long)B, (long long)P, (long long)G, total);
    printf("%-8s %-6s %10s %12s %12s %8s\n", "phase", "dtype", "time_s", "work", "rate", "%peak");
    printf("%-8s %-6s %10.4f %9.1f GF %8.1f GF/s %7.0f%%\n", "prefill", wdt, pf, flops * 1e-9, flops / pf * 1e-9,
           100 * flops / pf / peak);
    if (G > 1)
        printf("%-8s %-6s %10.4f %9.3f GB %8.2f GB/s %7.0f%%\n", "decode", wdt, ds, dbytes * 1e-9, dbytes / ds * 1e-9,
               100 * dbytes / ds / bw);
    sp_exec_free(ex);
    sp_weights_free(&w);
    free(pp);
    free(pd);
    free(prompt);
    free(tok);
    free(tok2);
    free(lg);
    return 0;
}
