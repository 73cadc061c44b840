/* bench_kern.c: this machine's 1-thread SGEMM peak and memcpy bandwidth, then
 * sp_kern_matmul (F32 / BF16 / INT8 weight views) for prefill- and
 * decode-like shapes.  Validate, then time.
 *
 * Napkin math (2 FLOPs per weight per token; W is K x N):
 *   prefill T=512, K=N=2048: 2*512*2048^2 = 4.3 GFLOP over 16 MiB (f32) of
 *     weights -> 256 FLOP per weight byte (f32), far above any CPU's
 *     FLOP/byte balance (~5-20): compute bound, the target is the SGEMM peak.
 *     BF16/INT8 add a dequantisation pass of K*N elements per call (~4M
 *     elements, ~1 ns each at worst) -- small against 4.3 GFLOP at ~50-100
 *     GFLOP/s (~40-90 ms).
 *   decode T=1..8, K=N=4096: 2*T FLOPs per weight, 4/2/1 bytes per weight
 *     -> 0.5*T .. 2*T FLOP/byte: memory bound; the target is reading the
 *     64/32/16 MiB of weights at memory bandwidth, so time ~ bytes / BW and
 *     the win of BF16/INT8 is the 2x/4x fewer bytes -- if dequantisation keeps
 *     up (it goes through a 512 KiB scratch tile, so it is extra L2 traffic).
 * Derived metrics: GFLOP/s = 2*T*K*N / t; weight GB/s = K*N*bytes(dt) / t
 * (weights only, activations ignored); memcpy GB/s = 2*bytes / t (read + write).
 */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cblas.h>
#include "kernels/cpu/sp_kern.h"
#include "exec/sp_weights.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) p[i] = sp_kern_rng_float(&seed) * 2.0f - 1.0f;
}

#define CHECK_OR_DIE(c, ...)                         \
    do {                                             \
        if (!(c)) {                                  \
            fprintf(stderr, "FAIL: " __VA_ARGS__);   \
            fprintf(stderr, "\n");                   \
            exit(1);                                 \
        }                                            \
    } while (0)

/* Runs fn until at least min_s seconds and 3 calls pass (after one warmup);
 * best seconds per call (the machine is shared: the minimum is the least noisy). */
typedef void (*bench_fn)(void *);
static double time_it(bench_fn fn, void *arg, double min_s)
{
    fn(arg);
    int reps = 0;
    double t0 = now(), best = INFINITY;
    do {
        double t1 = now();
        fn(arg);
        double dt = now() - t1;
        if (dt < best) best = dt;
        reps++;
    } while (now() - t0 < min_s || reps < 3);
    return best;
}

typedef struct sgemm_arg { int n; float *a, *b, *c; } sgemm_arg;
static void run_sgemm(void *p)
{
    sgemm_arg *s = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->n, s->n, s->n, 1.0f, s->a, s->n, s->b, s->n, 0.0f, s->c,
                s->n);
}

typedef struct copy_arg { size_t n; char *src, *dst; } copy_arg;
static void run_copy(void *p)
{
    copy_arg *c = p;
    memcpy(c->dst, c->src, c->n);
}

typedef struct mm_arg {
    float *out, *in;
    sp_kern_wview w;
    int64_t T, K, N;
    void *scr;
    size_t sb;
} mm_arg;
static void run_mm(void *p)
{
    mm_arg *m = p;
    sp_kern_matmul(m->out, m->in, &m->w, NULL, m->T, m->K, m->N, SP_KERN_OVERWRITE, m->scr, m->sb);
}

int main(int argc, char **argv)
{
    double min_s = argc > 1 ? atof(argv[1]) : 0.5;
    if (sp_kern_set_blas_threads(1) != SP_OK) fprintf(stderr, "note: cannot set BLAS threads: %s\n", sp_last_error());

    /* ---- peak: 1-thread SGEMM, 2048^3 ---- */
    sgemm_arg sg = {2048, NULL, NULL, NULL};
    size_t nn = (size_t)sg.n * (size_t)sg.n;
    sg.a = malloc(nn * 4); sg.b = malloc(nn * 4); sg.c = malloc(nn * 4);
    CHECK_OR_DIE(sg.a && sg.b && sg.c, "out of memory");
    fill(sg.a, nn, 1); fill(sg.b, nn, 2);
    double t_sg = time_it(run_sgemm, &sg, min_s);
    double peak = 2.0 * sg.n * (double)sg.n * sg.n / t_sg / 1e9;
    free(sg.a); free(sg.b); free(sg.c);

    /* ---- memcpy bandwidth, 256 MiB ---- */
    copy_arg cp = {256u << 20, NULL, NULL};
    cp.src = malloc(cp.n); cp.dst = malloc(cp.n);
    CHECK_OR_DIE(cp.src && cp.dst, "out of memory");
    memset(cp.src, 1, cp.n); memset(cp.dst, 2, cp.n);
    double t_cp = time_it(run_copy, &cp, min_s);
    double bw = 2.0 * (double)cp.n / t_cp / 1e9;
    free(cp.src); free(cp.dst);

    printf("# machine: 1-thread OpenBLAS SGEMM 2048^3: %.1f GFLOP/s; memcpy 256 MiB: %.1f GB/s (read+write)\n", peak, bw);
    printf("%-6s %5s %5s %5s %10s %9s %7s %9s %7s\n", "dtype", "T", "K", "N", "time_ms", "GFLOP/s", "%peak",
           "wGB/s", "%bw");

    struct { int64_t T, K, N; } shapes[] = {
        {512, 2048, 2048}, {1, 4096, 4096}, {2, 4096, 4096}, {4, 4096, 4096}, {8, 4096, 4096},
    };
    sp_dtype dts[] = {SP_DT_F32, SP_DT_BF16, SP_DT_INT8};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        int64_t T = shapes[si].T, K = shapes[si].K, N = shapes[si].N;
        float *W = malloc((size_t)(K * N) * 4), *in = malloc((size_t)(T * K) * 4), *out = malloc((size_t)(T * N) * 4);
        CHECK_OR_DIE(W && in && out, "out of memory");
        fill(W, (size_t)(K * N), 3); fill(in, (size_t)(T * K), 4);
        for (size_t di = 0; di < sizeof dts / sizeof *dts; di++) {
            sp_dtype dt = dts[di];
            int eb = sp_dtype_bytes(dt);
            void *q = malloc((size_t)(K * N) * (size_t)eb);
            float *scale = malloc((size_t)N * 4);
            CHECK_OR_DIE(q && scale, "out of memory");
            CHECK_OR_DIE(sp_weights_quant_block(W, K, N, 0, K, 0, N, dt, NULL, q, scale) == SP_OK, "%s", sp_last_error());
            mm_arg m = {out, in, {dt, q, N, dt == SP_DT_INT8 ? scale : NULL}, T, K, N, NULL, 0};
            m.sb = sp_kern_matmul_scratch_bytes(&m.w, K, N);
            m.scr = m.sb ? malloc(m.sb) : NULL;
            /* validate 64 sampled outputs against a double dot product of the dequantised weights */
            run_mm(&m);
            uint64_t rs = 99;
            for (int s = 0; s < 64; s++) {
                int64_t t = (int64_t)(sp_kern_rng_next(&rs) % (uint64_t)T), n = (int64_t)(sp_kern_rng_next(&rs) % (uint64_t)N);
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    double wv;
                    if (dt == SP_DT_F32) wv = ((float *)q)[k * N + n];
                    else if (dt == SP_DT_BF16) wv = sp_kern_bf16_to_f32(((uint16_t *)q)[k * N + n]);
                    else wv = (float)((int8_t *)q)[k * N + n] * scale[n];
                    ref += in[t * K + k] * wv;
                    mag += fabs(in[t * K + k] * wv);
                }
                CHECK_OR_DIE(fabs(out[t * N + n] - ref) <= 1e-5 * mag + 1e-6, "%s T=%lld: out[%lld,%lld] = %g, want %g",
                             sp_dtype_name(dt), (long long)T, (long long)t, (long long)n, out[t * N + n], ref);
            }
            double t_mm = time_it(run_mm, &m, min_s);
            double gf = 2.0 * (double)T * (double)K * (double)N / t_mm / 1e9;
            double gbs = (double)K * (double)N * eb / t_mm / 1e9;
            printf("%-6s %5lld %5lld %5lld %10.3f %9.1f %6.0f%% %9.1f %6.0f%%\n", sp_dtype_name(dt), (long long)T,
                   (long long)K, (long long)N, t_mm * 1e3, gf, 100 * gf / peak, gbs, 100 * gbs / bw);
            fflush(stdout);
            free(q); free(scale); free(m.scr);
        }
        free(W); free(in); free(out);
    }
    return 0;
}
