/* calib.c: microbenchmarks of the local chips (sp_calib.h). */
#include "config.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "spi_common.h"
#include "sp_layout.h"
#include "sp_lower.h"
#include "sp_model.h"
#include "sp_hw.h"
#include "sp_validate.h"
#include "exec/sp_calib.h"
#include "exec/sp_exec.h"
#include "exec/sp_weights.h"
#include "kernels/cpu/sp_kern.h"
#include "exec/spi_xdev.h"
#include "exec/spi_comm.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/sp_cuda.h"
#endif

void sp_calib_opts_init(sp_calib_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->backend = SP_COMM_BACKEND_THREADS;
    o->chips = 1;
    o->rounds = 5;
}

static const char *const coll_names[SP_CALIB_COLL_COUNT] = {"all-gather", "reduce-scatter", "all-reduce",
                                                            "all-to-all", "send-recv"};
const char *sp_calib_coll_name(sp_calib_coll k)
{
    return (unsigned)k < SP_CALIB_COLL_COUNT ? coll_names[k] : "?";
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the grids ----------------------------------------------------------------------
 * One grid per kind of chip.  CPU (threads, MPI): matmul shapes span the
 * executor's, tiny models (K, N of 32..512 per chip) to bench-1b (K = 2048,
 * N up to 5632 per chip), T = 2 (decode of a small batch) to 256 tokens
 * (prefill of a batch).  GPU (cuda): the shapes of the models a GPU is bought
 * for, K, N from 1024 to 8192 x 28672 (Llama-70B's FFN on one chip), T = 2 to
 * 4096.  Other weight dtypes (dequantised tile by tile, then SGEMM): fewer
 * shapes.  Weight streams (T = 1) by working set; above ring_elems elements a
 * ring of such matrices, one per call, so that each is evicted from the
 * caches before it comes round again (a decode step streams every layer's
 * weights once: what matters is the working set, not one matrix).  The CPU
 * ring is 2048 x 2048 (16 MiB, beyond the L2 and L3 of a VM); the GPU's
 * 8192 x 8192 (256 MiB, beyond an H100's 50 MB L2).  Attention points are
 * (B, Lq, pos0, H, D). */
typedef struct calib_grid {
    const int64_t (*mm_kn)[2];
    int n_mm_kn;
    const int64_t *mm_t;
    int n_mm_t;
    const int64_t (*dq_kn)[2];
    int n_dq_kn;
    const int64_t *dq_t;
    int n_dq_t;
    const int64_t (*mem_kn)[2];
    int n_mem;
    int64_t ring_elems;
    const int64_t (*attn)[5];
    int n_attn;
    double round_flops;   /* FLOPs a timed round aims at: ~1-10 ms on the chip */
    int64_t act_n;        /* elements of an activation point */
    const int *fetch_ring; /* weight fetches: the f32 FETCH_K x FETCH_N matmul at T = fetch_t, */
    int n_fetch;           /* cycled over each ring of copies (a working set of ring MiB) */
    int64_t fetch_t;
    const int64_t (*lg_kn)[2]; /* logits of an f32 table of N rows of K (x · tableᵀ) at each T */
    int n_lg_kn;
    const int64_t *lg_t;
    int n_lg_t;
} calib_grid;

/* The weight-fetch points: a 1 MiB f32 matrix, the hot point (ring 1) one of the grid's own. */
#define FETCH_K 512
#define FETCH_N 512

static const int64_t cpu_mm_kn[][2] = {{64, 64}, {128, 384}, {512, 512}, {2048, 1408}, {2048, 5632}};
static const int64_t cpu_mm_t[] = {2, 4, 8, 16, 32, 64, 256};
static const int64_t cpu_dq_kn[][2] = {{512, 512}, {2048, 1408}};
static const int64_t cpu_dq_t[] = {1, 2, 4, 8, 16, 64};
static const int64_t cpu_mem_kn[][2] = {{64, 64},     {128, 128},   {256, 256},   {512, 512},  {1024, 1024},
                                        {2048, 2048}, {2048, 8192}, {2048, 32768}};
static const int64_t cpu_attn[][5] = {{4, 1, 255, 8, 8}, {1, 64, 0, 8, 8},   {4, 1, 255, 8, 64},
                                      {1, 64, 0, 8, 64}, {4, 1, 255, 8, 128}, {1, 64, 0, 8, 128}};
/* working sets of 2 MiB (about a core's L2) to 256 MiB (beyond most L3s), densest around the L2
 * (1.75 MiB of weights a chip ran tiny-llama's 2-chip decode matmuls 1.2x their price with 4 MiB
 * the nearest point, 2026-11-24) */
static const int cpu_fetch_ring[] = {2, 3, 4, 8, 16, 64, 256};
static const int quick_fetch_ring[] = {4, 16};
static const int64_t quick_mm_kn[][2] = {{64, 64}, {512, 512}};
static const int64_t quick_lg_kn[][2] = {{512, 512}};
static const int64_t quick_lg_t[] = {4, 16, 64};
static const int64_t quick_mm_t[] = {4, 64};
static const int64_t quick_mem_kn[][2] = {{64, 64}, {256, 256}};

static const int64_t gpu_mm_kn[][2] = {{1024, 1024}, {4096, 4096}, {8192, 8192}, {8192, 28672}};
static const int64_t gpu_mm_t[] = {2, 8, 32, 128, 512, 2048, 4096};
static const int64_t gpu_dq_kn[][2] = {{4096, 4096}, {8192, 8192}};
static const int64_t gpu_dq_t[] = {1, 8, 64, 512, 2048};
static const int64_t gpu_mem_kn[][2] = {{256, 256},   {1024, 1024}, {2048, 2048},
                                        {4096, 4096}, {8192, 8192}, {8192, 32768}};
static const int64_t gpu_attn[][5] = {{8, 1, 2047, 32, 64},  {1, 512, 0, 32, 64},  {8, 1, 2047, 32, 128},
                                      {1, 512, 0, 32, 128}, {64, 1, 1023, 8, 128}, {1, 2048, 0, 8, 128}};
static const int64_t gpu_quick_mm_kn[][2] = {{1024, 1024}};
static const int64_t gpu_quick_mm_t[] = {8, 512};
static const int64_t gpu_quick_mem_kn[][2] = {{1024, 1024}, {4096, 4096}};

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define GRID_LIST(a) a, NELEM(a)

static const calib_grid grid_cpu = {GRID_LIST(cpu_mm_kn), GRID_LIST(cpu_mm_t), GRID_LIST(cpu_dq_kn),
                                    GRID_LIST(cpu_dq_t),  GRID_LIST(cpu_mem_kn), (int64_t)2048 * 2048,
                                    GRID_LIST(cpu_attn),  4e7, 65536, GRID_LIST(cpu_fetch_ring), 8,
                                    GRID_LIST(cpu_mm_kn), GRID_LIST(cpu_mm_t)};
static const calib_grid grid_cpu_quick = {GRID_LIST(quick_mm_kn), GRID_LIST(quick_mm_t), cpu_dq_kn, 1,
                                          GRID_LIST(cpu_dq_t),     GRID_LIST(quick_mem_kn), (int64_t)2048 * 2048,
                                          cpu_attn, 2,             4e7, 65536, GRID_LIST(quick_fetch_ring), 4,
                                          GRID_LIST(quick_lg_kn), GRID_LIST(quick_lg_t)};
static const calib_grid grid_gpu = {GRID_LIST(gpu_mm_kn), GRID_LIST(gpu_mm_t), GRID_LIST(gpu_dq_kn),
                                    GRID_LIST(gpu_dq_t),  GRID_LIST(gpu_mem_kn), (int64_t)8192 * 8192,
                                    GRID_LIST(gpu_attn),  4e10, (int64_t)1 << 24, NULL, 0, 0, NULL, 0, NULL, 0};
static const calib_grid grid_gpu_quick = {GRID_LIST(gpu_quick_mm_kn), GRID_LIST(gpu_quick_mm_t), gpu_dq_kn, 1,
                                          GRID_LIST(gpu_dq_t), GRID_LIST(gpu_quick_mem_kn), (int64_t)8192 * 8192,
                                          gpu_attn, 2, 4e10, (int64_t)1 << 24, NULL, 0, 0, NULL, 0, NULL, 0};

static const calib_grid *grid_of(const sp_calib_opts *o)
{
    if (o->backend == SP_COMM_BACKEND_NCCL) return o->quick ? &grid_gpu_quick : &grid_gpu;
    return o->quick ? &grid_cpu_quick : &grid_cpu;
}

/* From this many activation rows on, a matmul's rate depends on its FLOPs only. */
#define ROWS_FULL 64
/* One chip's block of a collective, bytes. */
static const int64_t coll_c[] = {256, 4096, 65536, 1048576};
static const int64_t coll_c_quick[] = {256, 65536};


/* ---- running a function on every chip ------------------------------------------------ */
typedef struct calib_ctx calib_ctx;
typedef sp_status (*chip_fn)(calib_ctx *cx, sp_comm *c);

struct calib_ctx {
    const sp_calib_opts *o;
    sp_calib_result *r;
    sp_comm_world *w;
    chip_fn fn;
    int K;                  /* collective group size of this world */
    int ystride;            /* its y extent: the global-rank distance of x neighbours */
    int first;              /* this process's first chip */
    pthread_mutex_t mu;
    sp_status err;
};

typedef struct chip_arg {
    calib_ctx *cx;
    int rank;
} chip_arg;

static void *chip_main(void *p)
{
    chip_arg *a = p;
    calib_ctx *cx = a->cx;
    sp_kern_set_blas_threads(1);   /* the executor's rules: one BLAS thread per chip, */
    if (cx->o->backend == SP_COMM_BACKEND_THREADS) spi_threads_pin(a->rank - cx->first);   /* each on its core */
    sp_comm *c = NULL;
    sp_status st = sp_comm_open(cx->w, a->rank, &c);
    if (!st) st = cx->fn(cx, c);
    if (st) sp_comm_abort(cx->w, sp_last_error());
    sp_comm_close(c);
    pthread_mutex_lock(&cx->mu);
    if (st && !cx->err) cx->err = st;
    pthread_mutex_unlock(&cx->mu);
    return NULL;
}

/* Runs fn on every local chip of a world of mesh (1, 1, x, y, 1). */
static sp_status on_chips(calib_ctx *cx, int x, int y, chip_fn fn)
{
    sp_mesh m = {{1, 1, x, y, 1}};
    sp_status st = sp_comm_world_create(cx->o->backend, &m, &cx->w);
    if (st) return st;
    cx->fn = fn;
    cx->err = SP_OK;
    int first = 0, count = 0;
    if ((st = sp_comm_world_local_ranks(cx->w, &first, &count))) goto out;
    cx->first = first;
    if (cx->o->backend != SP_COMM_BACKEND_THREADS) {
        chip_arg a = {cx, first};
        chip_main(&a);
    } else {
        pthread_t *th = calloc((size_t)count, sizeof *th);
        chip_arg *args = calloc((size_t)count, sizeof *args);
        int started = 0;
        if (!th || !args) st = SP_ENOMEM;
        for (int i = 0; !st && i < count; i++) {
            args[i] = (chip_arg){cx, first + i};
            if (pthread_create(&th[i], NULL, chip_main, &args[i])) {
                sp_comm_abort(cx->w, "calibrate: pthread_create failed");
                st = spi_fail(SP_ENOMEM, "calibrate: cannot start chip thread %d", i);
                break;
            }
            started++;
        }
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        free(th);
        free(args);
    }
    if (!st) st = cx->err;
out:
    sp_comm_world_free(cx->w);
    cx->w = NULL;
    return st;
}

/* ---- matmul and weight streams ------------------------------------------------------- */
typedef struct mm_job {
    int dt;
    int64_t T, K, N;
    int mem;   /* 1: a memory (weight stream) point */
    int ring;  /* weight matrices cycled through (a working set of ring · K · N elements) */
    int alone; /* 1: chip 0 only, the other chips idle */
    int logits; /* 1: the logits kernel, x (T, K) · table (N, K)ᵀ, not the matmul */
} mm_job;

static int64_t mm_reps(const calib_grid *g, double flops)
{
    double r = g->round_flops / (flops > 1 ? flops : 1);
    return r < 2 ? 2 : r > 2000 ? 2000 : (int64_t)r;
}

/* The grid's jobs; alone_too: the weight streams once more on chip 0 alone. */
static size_t jobs_of(const calib_grid *g, int alone_too, mm_job *jobs, size_t max)
{
    size_t n = 0;
    for (int i = 0; i < g->n_mm_kn; i++)
        for (int j = 0; j < g->n_mm_t && n < max; j++)
            jobs[n++] = (mm_job){SP_DT_F32, g->mm_t[j], g->mm_kn[i][0], g->mm_kn[i][1], 0, 1, 0, 0};
    for (int d = SP_DT_BF16; d <= SP_DT_FP8; d++)
        for (int i = 0; i < g->n_dq_kn; i++)
            for (int j = 0; j < g->n_dq_t && n < max; j++)
                jobs[n++] = (mm_job){d, g->dq_t[j], g->dq_kn[i][0], g->dq_kn[i][1], 0, 1, 0, 0};
    for (int i = 0; i < g->n_mem && n < max; i++) {
        int64_t e = g->mem_kn[i][0] * g->mem_kn[i][1], side = (int64_t)sqrt((double)g->ring_elems);
        if (e > g->ring_elems) jobs[n++] = (mm_job){SP_DT_F32, 1, side, side, 1, (int)(e / g->ring_elems), 0, 0};
        else jobs[n++] = (mm_job){SP_DT_F32, 1, g->mem_kn[i][0], g->mem_kn[i][1], 1, 1, 0, 0};
    }
    for (size_t i = n - (size_t)g->n_mem, end = n; alone_too && i < end && n < max; i++) {
        jobs[n] = jobs[i];
        jobs[n++].alone = 1;
    }
    /* weight fetches: a matmul of several rows whose weights come from beyond the cache, on
     * every compute chip at once (as a program's chips run) */
    for (int i = 0; i < g->n_fetch && n < max; i++)
        jobs[n++] = (mm_job){SP_DT_F32, g->fetch_t, FETCH_K, FETCH_N, 0, g->fetch_ring[i], 0, 0};
    for (int i = 0; i < g->n_lg_kn; i++)
        for (int j = 0; j < g->n_lg_t && n < max; j++)
            jobs[n++] = (mm_job){SP_DT_F32, g->lg_t[j], g->lg_kn[i][0], g->lg_kn[i][1], 0, 1, 0, 1};
    return n;
}

/* Fills the weight view's storage of dtype dt with small values that every
 * dtype represents (no NaN / inf), scales 1/64. */
static sp_status fill_weights(int dt, int64_t K, int64_t N, void **data, float **scale)
{
    int64_t n = K * N;
    size_t es = (size_t)sp_dtype_bytes((sp_dtype)dt);
    *data = malloc((size_t)n * es);
    *scale = NULL;
    if (!*data) return spi_fail(SP_ENOMEM, "calibrate: %lld x %lld weights", (long long)K, (long long)N);
    uint64_t rng = 7;
    for (int64_t i = 0; i < n; i++) {
        float v = sp_kern_rng_float(&rng) - 0.5f;
        switch (dt) {
        case SP_DT_F32: ((float *)*data)[i] = v; break;
        case SP_DT_BF16: ((uint16_t *)*data)[i] = sp_kern_f32_to_bf16(v); break;
        case SP_DT_F16: ((uint16_t *)*data)[i] = sp_kern_f32_to_f16(v); break;
        case SP_DT_INT8: ((int8_t *)*data)[i] = (int8_t)(v * 200.0f); break;
        default: ((uint8_t *)*data)[i] = sp_kern_f32_to_fp8(v); break;
        }
    }
    if (dt == SP_DT_INT8 || dt == SP_DT_FP8) {
        if (!(*scale = malloc((size_t)N * sizeof **scale))) return spi_fail(SP_ENOMEM, "calibrate: scales");
        for (int64_t i = 0; i < N; i++) (*scale)[i] = 1.0f / 64.0f;
    }
    return SP_OK;
}

/* A buffer of the chip's memory holding host's bytes (host NULL: zeroed). */
static sp_status dev_copy(spi_xdev *d, const void *host, size_t bytes, void **out)
{
    *out = NULL;
    sp_status st = d->ops->alloc(d, bytes, out);
    if (!st && host && bytes) st = d->ops->upload(d, *out, host, bytes);
    return st;
}

/* The timed rounds of one point, on the chip's device (the executor's
 * kernels through its device table); chips beyond the compute chips only keep
 * the barriers.  Each round: R calls, then the device's queue drained (a GPU
 * queues its kernels), so a round's time is that of R complete calls. */
typedef sp_status (*point_fn)(spi_xdev *d, void *arg, int64_t i);

static sp_status time_rounds(calib_ctx *cx, sp_comm *c, spi_xdev *d, int active, sp_status st, int64_t R,
                             point_fn fn, void *arg, double *best)
{
    *best = INFINITY;
    for (int round = 0; round < cx->o->rounds; round++) {
        sp_status bs = sp_comm_barrier(c, SP_AXES_ALL);
        if (bs) { st = bs; break; }
        if (!active || st) continue;
        double t0 = now_s();
        for (int64_t i = 0; i < R && !st; i++) st = fn(d, arg, i);
        if (!st) st = d->ops->sync(d);
        double t = (now_s() - t0) / (double)R;
        if (t < *best) *best = t;
    }
    sp_status bs = sp_comm_barrier(c, SP_AXES_ALL);
    return st ? st : bs;
}

typedef struct mm_args {
    const mm_job *j;
    sp_kern_wview wv;
    char *w;          /* ring · wbytes of weights, chip memory */
    size_t wbytes;
    float *x, *y;
} mm_args;

static sp_status mm_call(spi_xdev *d, void *arg, int64_t i)
{
    mm_args *a = arg;
    a->wv.data = a->w + a->wbytes * (size_t)(i % a->j->ring);
    if (a->j->logits) return d->ops->logits(d, a->y, a->x, &a->wv, a->j->T, a->j->K, a->j->N);
    return d->ops->matmul(d, a->y, a->x, &a->wv, a->j->T, a->j->K, a->j->N, SP_KERN_OVERWRITE);
}

/* One matmul point on every compute chip at once.  Chip 0 records the
 * minimum over rounds. */
static sp_status mm_point(calib_ctx *cx, sp_comm *c, spi_xdev *d, const mm_job *j, double *best)
{
    int active = sp_comm_rank(c) < (j->alone ? 1 : cx->r->compute_chips);
    void *wd = NULL;
    float *sc = NULL, *x = NULL, *dsc = NULL;
    double once = 0;
    sp_status st = SP_OK;
    /* a matmul's weights are K rows of N; a logits table N rows of K */
    mm_args a = {j, {(sp_dtype)j->dt, NULL, j->logits ? j->K : j->N, NULL}, NULL, 0, NULL, NULL};
    a.wbytes = (size_t)(j->K * j->N) * (size_t)sp_dtype_bytes((sp_dtype)j->dt);
    d->ws = NULL, d->ws_bytes = 0;
    if (active) {
        /* a ring of matrices: the first filled, the rest copies of it */
        st = fill_weights(j->dt, j->K, j->N, &wd, &sc);
        if (!st) st = d->ops->alloc(d, a.wbytes * (size_t)j->ring, (void **)&a.w);
        for (int i = 0; !st && i < j->ring; i++) st = d->ops->upload(d, a.w + a.wbytes * (size_t)i, wd, a.wbytes);
        if (!st && sc) st = dev_copy(d, sc, (size_t)j->N * sizeof *sc, (void **)&dsc);
        a.wv.scale = dsc;
        a.wv.data = a.w;
        x = malloc((size_t)(j->T * j->K) * sizeof *x);
        if (!st && !x) st = spi_fail(SP_ENOMEM, "calibrate: matmul input");
        for (int64_t i = 0; !st && i < j->T * j->K; i++) x[i] = (float)(i % 7) * 0.125f;
        if (!st) st = dev_copy(d, x, (size_t)(j->T * j->K) * sizeof *x, (void **)&a.x);
        if (!st) st = dev_copy(d, NULL, (size_t)(j->T * j->N) * sizeof(float), (void **)&a.y);
        d->ws_bytes = sp_kern_matmul_scratch_bytes(&a.wv, j->K, j->N);
        if (!st && d->ws_bytes) st = dev_copy(d, NULL, d->ws_bytes, &d->ws);
        if (!st) st = mm_call(d, &a, 0);   /* warm */
        if (!st) st = d->ops->sync(d);
        double t0 = now_s();   /* one call, timed: bounds the rounds below */
        if (!st) st = mm_call(d, &a, 0);
        if (!st) st = d->ops->sync(d);
        once = now_s() - t0;
    }
    int64_t R = mm_reps(grid_of(cx->o), 2.0 * (double)j->T * (double)j->K * (double)j->N);
    /* rounds of at most about 50 ms: a path far below the FLOP rate (a GPU's dequantising
     * tiles) would otherwise take seconds a point */
    if (once > 0 && (double)R * once > 0.05) R = (int64_t)(0.05 / once) < 2 ? 2 : (int64_t)(0.05 / once);
    if (R < 2 * j->ring) R = 2 * j->ring;   /* every matrix of the ring at least twice */
    st = time_rounds(cx, c, d, active, st, R, mm_call, &a, best);
    d->ops->release(d, a.w);
    d->ops->release(d, dsc);
    d->ops->release(d, a.x);
    d->ops->release(d, a.y);
    d->ops->release(d, d->ws);
    d->ws = NULL, d->ws_bytes = 0;
    free(wd);
    free(sc);
    free(x);
    return st;
}

typedef struct attn_args {
    float *q, *o;
    sp_kern_kv kv;
    int64_t Lq, pos0, H;
} attn_args;

static sp_status attn_call(spi_xdev *d, void *arg, int64_t i)
{
    attn_args *a = arg;
    (void)i;
    return d->ops->attention(d, a->o, a->q, &a->kv, a->Lq, a->pos0, a->H, a->H, 0, a->H, 0);
}

static sp_status attn_point(calib_ctx *cx, sp_comm *c, spi_xdev *d, const int64_t *g, double *best)
{
    int active = sp_comm_rank(c) < cx->r->compute_chips;
    int64_t B = g[0], Lq = g[1], pos0 = g[2], H = g[3], D = g[4], ctx = pos0 + Lq;
    sp_status st = SP_OK;
    float *kh = NULL;
    attn_args a = {NULL, NULL, {SP_DT_F32, NULL, NULL, B, ctx, H, D}, Lq, pos0, H};
    /* the CPU kernel's scores scratch (host memory; a GPU's kernel needs none) */
    d->at_bytes = sp_kern_attention_scratch_bytes(ctx);
    d->at_scr = malloc(d->at_bytes ? d->at_bytes : 1);
    if (active) {
        size_t n = (size_t)(B * ctx * H * D), nq = (size_t)(B * Lq * H * D);
        kh = malloc(n * sizeof *kh);
        if (!kh || !d->at_scr) st = spi_fail(SP_ENOMEM, "calibrate: attention buffers");
        for (size_t i = 0; !st && i < n; i++) kh[i] = (float)(i % 5) * 0.1f;
        if (!st) st = dev_copy(d, kh, n * sizeof *kh, (void **)&a.kv.k);
        if (!st) st = dev_copy(d, kh, n * sizeof *kh, (void **)&a.kv.v);
        if (!st) st = dev_copy(d, NULL, nq * sizeof(float), (void **)&a.q);
        if (!st) st = dev_copy(d, NULL, nq * sizeof(float), (void **)&a.o);
        if (!st) st = attn_call(d, &a, 0);   /* warm */
        if (!st) st = d->ops->sync(d);
    }
    double flops = 4.0 * (double)(B * H * D) * (double)(Lq * pos0 + Lq * (Lq + 1) / 2);
    st = time_rounds(cx, c, d, active, st, mm_reps(grid_of(cx->o), flops), attn_call, &a, best);
    d->ops->release(d, (void *)a.kv.k);
    d->ops->release(d, (void *)a.kv.v);
    d->ops->release(d, a.q);
    d->ops->release(d, a.o);
    free(kh);
    free(d->at_scr);
    d->at_scr = NULL, d->at_bytes = 0;
    return st;
}

typedef struct act_args {
    float *x, *g, *o;
    int64_t n;
    int which;
} act_args;

static sp_status act_call(spi_xdev *d, void *arg, int64_t i)
{
    act_args *a = arg;
    (void)i;
    return a->which ? d->ops->act(d, a->o, a->x, a->g, a->n, SP_ACT_SILU)     /* sp_kern_swiglu */
                    : d->ops->act(d, a->o, a->x, NULL, a->n, SP_ACT_GELU_TANH);   /* sp_kern_gelu */
}

/* Activations: seconds per element of GELU (tanh; which = 0) and SwiGLU (1). */
static sp_status act_point(calib_ctx *cx, sp_comm *c, spi_xdev *d, int which, double *best)
{
    int active = sp_comm_rank(c) < cx->r->compute_chips;
    act_args a = {NULL, NULL, NULL, grid_of(cx->o)->act_n, which};
    float *xh = NULL, *gh = NULL;
    sp_status st = SP_OK;
    size_t bytes = (size_t)a.n * sizeof(float);
    if (active) {
        xh = malloc(bytes), gh = malloc(bytes);
        if (!xh || !gh) st = spi_fail(SP_ENOMEM, "calibrate: activation buffers");
        for (int64_t i = 0; !st && i < a.n; i++) xh[i] = (float)(i % 17) * 0.25f - 2.0f, gh[i] = 0.5f;
        if (!st) st = dev_copy(d, xh, bytes, (void **)&a.x);
        if (!st) st = dev_copy(d, gh, bytes, (void **)&a.g);
        if (!st) st = dev_copy(d, NULL, bytes, (void **)&a.o);
        if (!st) st = act_call(d, &a, 0);   /* warm */
        if (!st) st = d->ops->sync(d);
    }
    st = time_rounds(cx, c, d, active, st, 10, act_call, &a, best);
    *best /= (double)a.n;
    d->ops->release(d, a.x);
    d->ops->release(d, a.g);
    d->ops->release(d, a.o);
    free(xh), free(gh);
    return st;
}

/* The elementwise kernels (sp_hw_elem) on act_n elements: rows of 1024
 * (a norm's row, a copied block, an embedding row), or heads of 8 × 128
 * (RoPE). */
enum { ELEM_COLS = 1024, ELEM_HEADS = 8, ELEM_DHEAD = 128, ELEM_VOCAB = 256 };
typedef struct elem_args {
    int kind;                 /* sp_hw_elem */
    int64_t T;                /* rows of ELEM_COLS */
    float *x, *y, *stats, *gain;
    int64_t *pos;             /* host: T positions */
    double *inv_freq;         /* host: ELEM_DHEAD / 2 */
    int32_t *tok;             /* host: T tokens */
    sp_kern_wview table;      /* ELEM_VOCAB × ELEM_COLS f32 */
} elem_args;

static sp_status elem_call(spi_xdev *d, void *arg, int64_t i)
{
    elem_args *a = arg;
    (void)i;
    switch (a->kind) {
    case SP_ELEM_NORM_STATS: return d->ops->norm_stats(d, a->x, a->T, ELEM_COLS, a->stats);
    case SP_ELEM_NORM_APPLY:
        return d->ops->norm_apply(d, a->x, a->stats, ELEM_COLS, a->T, ELEM_COLS, a->gain, NULL, 1e-5f, SP_NORM_RMSNORM, a->y);
    case SP_ELEM_ADD: return d->ops->add(d, a->y, a->x, a->T * ELEM_COLS);
    case SP_ELEM_COPY:
        return d->ops->copy2d(d, a->y, ELEM_COLS * sizeof(float), a->x, ELEM_COLS * sizeof(float), ELEM_COLS * sizeof(float),
                              (size_t)a->T);
    case SP_ELEM_ROPE:
        return d->ops->rope(d, a->x, a->T * ELEM_COLS / (ELEM_HEADS * ELEM_DHEAD), ELEM_HEADS, ELEM_DHEAD, ELEM_DHEAD, a->pos,
                            a->inv_freq, 1.0);
    default: return d->ops->embed(d, a->y, a->tok, a->T, &a->table, 0, ELEM_VOCAB, 0, ELEM_COLS);
    }
}

/* One elementwise kernel on every compute chip at once: seconds per element
 * (chip 0's minimum over rounds). */
static sp_status elem_point(calib_ctx *cx, sp_comm *c, spi_xdev *d, int kind, double *best)
{
    int active = sp_comm_rank(c) < cx->r->compute_chips;
    int64_t n = grid_of(cx->o)->act_n, T = n / ELEM_COLS;
    elem_args a = {.kind = kind, .T = T};
    float *xh = NULL;
    void *tab = NULL;
    sp_status st = SP_OK;
    /* host staging: the larger of the operand and the embedding table */
    size_t bytes = (size_t)n * sizeof(float), tb = (size_t)ELEM_VOCAB * ELEM_COLS * sizeof(float);
    size_t hb = tb > bytes ? tb : bytes;
    if (active) {
        xh = malloc(hb);
        a.pos = malloc((size_t)T * sizeof *a.pos);
        a.inv_freq = malloc(ELEM_DHEAD / 2 * sizeof *a.inv_freq);
        a.tok = malloc((size_t)T * sizeof *a.tok);
        if (!xh || !a.pos || !a.inv_freq || !a.tok) st = spi_fail(SP_ENOMEM, "calibrate: elementwise buffers");
        for (size_t i = 0; !st && i < hb / sizeof(float); i++) xh[i] = (float)(i % 13) * 0.125f - 0.75f;
        for (int64_t t = 0; !st && t < T; t++) a.pos[t] = t, a.tok[t] = (int32_t)((t * 37) % ELEM_VOCAB);
        for (int k = 0; !st && k < ELEM_DHEAD / 2; k++) a.inv_freq[k] = pow(10000.0, -2.0 * k / ELEM_DHEAD);
        if (!st) st = dev_copy(d, xh, bytes, (void **)&a.x);
        if (!st) st = dev_copy(d, xh, bytes, (void **)&a.y);
        if (!st) st = dev_copy(d, xh, (size_t)ELEM_COLS * sizeof(float), (void **)&a.gain);
        if (!st) st = dev_copy(d, NULL, (size_t)T * 2 * sizeof(float), (void **)&a.stats);
        if (!st) st = dev_copy(d, xh, tb, &tab);
        a.table = (sp_kern_wview){SP_DT_F32, tab, ELEM_COLS, NULL};
        if (!st && kind == SP_ELEM_NORM_APPLY) st = d->ops->norm_stats(d, a.x, T, ELEM_COLS, a.stats);
        if (!st) st = elem_call(d, &a, 0);   /* warm */
        if (!st) st = d->ops->sync(d);
    }
    st = time_rounds(cx, c, d, active, st, 10, elem_call, &a, best);
    *best /= (double)n;
    d->ops->release(d, a.x);
    d->ops->release(d, a.y);
    d->ops->release(d, a.gain);
    d->ops->release(d, a.stats);
    d->ops->release(d, tab);
    free(xh), free(a.pos), free(a.inv_freq), free(a.tok);
    return st;
}

/* The barrier over all chips (chip 0's time, minimum over rounds). */
static sp_status barrier_chip(calib_ctx *cx, sp_comm *c)
{
    double best = INFINITY;
    sp_status st = sp_comm_barrier(c, SP_AXES_ALL);
    for (int round = 0; round < cx->o->rounds && !st; round++) {
        double t0 = now_s();
        for (int i = 0; i < 100 && !st; i++) st = sp_comm_barrier(c, SP_AXES_ALL);
        double t = (now_s() - t0) / 100.0;
        if (t < best) best = t;
    }
    if (!st && sp_comm_rank(c) == 0) cx->r->barrier_s = best;
    return st;
}

/* The chip's device: the CPU's kernels (threads, MPI) or its GPU (cuda). */
static sp_status chip_dev_open(const sp_calib_opts *o, spi_xdev *d)
{
    memset(d, 0, sizeof *d);
    d->ops = o->backend == SP_COMM_BACKEND_NCCL ? spi_xops_cuda() : &spi_xops_cpu;
    if (!d->ops) return spi_fail(SP_ENOTSUP, "calibrate --backend cuda: this build has no CUDA");
    sp_status st = d->ops->open(d);
    if (st) d->ops->close(d);
    return st;
}

/* ---- compute while chips time-share the cores -------------------------------------------
 * A program's chips meet at every collective (tiny-llama prefill on 8 chips: every ~70 us of a
 * chip's compute); with n chips a core, the n take turns between meetings and each resumes on a
 * core whose caches the others used, and is preempted by their wake-ups.  The matmul and
 * elementwise points above run one chip a core, untouched.  Here one unit of work per chip
 * (T × K · K × N f32, about 70 us on this VM's cores) runs on every chip at once: alone (no
 * meeting, min(chips, cores) chips: the points' regime), and on K = s · cores chips each unit
 * followed by a barrier of all K, with the barriers timed alone beside it (at s > 1 no core
 * idles, so a barrier costs its own work).  Chip 0's seconds per unit, minimum over rounds.
 * arg: 0 alone, 1 unit + barrier, 2 barrier only. */
static int stretch_mode;

static sp_status stretch_chip(calib_ctx *cx, sp_comm *c)
{
    const int64_t T = SP_CALIB_STRETCH_T, KN = SP_CALIB_STRETCH_KN, R = 100;
    int mode = stretch_mode;
    sp_calib_result *r = cx->r;
    spi_xdev dev;
    sp_status st = chip_dev_open(cx->o, &dev);
    float *x = calloc((size_t)(T * KN), sizeof *x), *y = calloc((size_t)(T * KN), sizeof *y);
    float *w = calloc((size_t)(KN * KN), sizeof *w);
    if (!st && (!x || !y || !w)) st = SP_ENOMEM;
    for (int64_t i = 0; !st && i < KN * KN; i++) w[i] = (float)((i % 7) - 3) * 0.01f;
    for (int64_t i = 0; !st && i < T * KN; i++) x[i] = (float)((i % 5) - 2) * 0.1f;
    sp_kern_wview wv;
    memset(&wv, 0, sizeof wv);
    wv.dt = SP_DT_F32;
    wv.data = w;
    wv.ld = KN;
    double best = INFINITY;
    if (!st) st = sp_comm_barrier(c, SP_AXES_ALL);
    for (int round = 0; round <= cx->o->rounds && !st; round++) {   /* round 0 warms up */
        double t0 = now_s();
        for (int64_t i = 0; i < R && !st; i++) {
            if (mode != 2) st = dev.ops->matmul(&dev, y, x, &wv, T, KN, KN, SP_KERN_OVERWRITE);
            if (!st && mode != 0) st = sp_comm_barrier(c, SP_AXES_ALL);
        }
        double t = (now_s() - t0) / (double)R;
        if (round > 0 && t < best) best = t;
        if (!st) st = sp_comm_barrier(c, SP_AXES_ALL);
    }
    if (!st && sp_comm_rank(c) == 0) {
        int k = r->n_stretch;
        if (mode == 0) r->stretch_unit = best;
        else if (mode == 1) r->stretch_sync[k] = best;
        else r->stretch_bar[k] = best;
    }
    free(x);
    free(y);
    free(w);
    if (dev.ops) dev.ops->close(&dev);
    return st;
}

static sp_status mm_chip(calib_ctx *cx, sp_comm *c)
{
    mm_job jobs[SP_CALIB_MM_MAX];
    const calib_grid *g = grid_of(cx->o);
    size_t n = jobs_of(g, cx->r->compute_chips > 1, jobs, NELEM(jobs));
    sp_calib_result *r = cx->r;
    spi_xdev dev;
    sp_status st = chip_dev_open(cx->o, &dev);
    for (size_t i = 0; i < n && !st; i++) {
        double t;
        if ((st = mm_point(cx, c, &dev, &jobs[i], &t)) || sp_comm_rank(c) != 0) continue;
        r->mm[r->n_mm++] = (sp_calib_mm){jobs[i].dt, jobs[i].T, jobs[i].K, jobs[i].N, jobs[i].ring, t, jobs[i].alone, jobs[i].logits};
        if (cx->o->log)
            fprintf(cx->o->log, "%s %-4s%s T=%-4lld K=%-5lld N=%-5lld %10.3g s %8.2f GFLOP/s %8.2f GB/s\n",
                    jobs[i].logits ? "logits" : "matmul", sp_dtype_name((sp_dtype)jobs[i].dt), jobs[i].alone ? " alone" : "", (long long)jobs[i].T, (long long)jobs[i].K,
                    (long long)jobs[i].N, t, 2e-9 * (double)(jobs[i].T * jobs[i].K * jobs[i].N) / t,
                    1e-9 * (double)(jobs[i].K * jobs[i].N * sp_dtype_bytes((sp_dtype)jobs[i].dt)) / t);
    }
    for (int which = 0; which < 2 && !st; which++) {
        double t;
        if ((st = act_point(cx, c, &dev, which, &t)) || sp_comm_rank(c) != 0) continue;
        r->act_s[which] = t;
        if (cx->o->log) fprintf(cx->o->log, "%-8s %10.3g s per element\n", which ? "swiglu" : "gelu", t);
    }
    /* CPU chips only: a GPU's elementwise kernels are bound by their launch (dispatch_s) and bytes */
    for (int k = 0; k < SP_ELEM_COUNT && !st && cx->o->backend != SP_COMM_BACKEND_NCCL; k++) {
        double t;
        if ((st = elem_point(cx, c, &dev, k, &t)) || sp_comm_rank(c) != 0) continue;
        r->elem_s[k] = t;
        if (cx->o->log) fprintf(cx->o->log, "%-10s %10.3g s per element\n", sp_hw_elem_name((sp_hw_elem)k), t);
    }
    for (int i = 0; i < g->n_attn && i < NELEM(r->attn) && !st; i++) {
        double t;
        const int64_t *a = g->attn[i];
        if ((st = attn_point(cx, c, &dev, a, &t)) || sp_comm_rank(c) != 0) continue;
        double fl = 4.0 * (double)(a[0] * a[3] * a[4]) * (double)(a[1] * a[2] + a[1] * (a[1] + 1) / 2);
        r->attn[r->n_attn++] = (sp_calib_attn){a[0], a[1], a[2], a[3], a[4], fl, t};
        if (cx->o->log)
            fprintf(cx->o->log, "attention B=%lld Lq=%-3lld pos0=%-3lld H=%lld D=%-3lld %10.3g s %8.2f GFLOP/s\n",
                    (long long)a[0], (long long)a[1], (long long)a[2], (long long)a[3], (long long)a[4], t,
                    1e-9 * fl / t);
    }
    if (dev.ops) dev.ops->close(&dev);
    return st;
}

/* ---- collectives --------------------------------------------------------------------- */
static sp_status coll_once(sp_comm *c, sp_calib_coll k, float *snd, float *rcv, size_t cnt, int K, int g,
                           int ystride)
{
    switch (k) {
    case SP_CALIB_AG: return sp_comm_allgather(c, SP_AXES_X, snd, rcv, cnt, SP_DT_F32);
    case SP_CALIB_RS: return sp_comm_reducescatter(c, SP_AXES_X, snd, rcv, cnt, SP_DT_F32);
    case SP_CALIB_AR: return sp_comm_allreduce(c, SP_AXES_X, snd, rcv, cnt * (size_t)K, SP_DT_F32);
    case SP_CALIB_A2A: return sp_comm_alltoall(c, SP_AXES_X, snd, rcv, cnt, SP_DT_F32);
    default: {
        /* pairs along x (K = 2): x neighbours' global ranks differ by y's extent
         * (mixed radix, z fastest), ystride here */
        int me = sp_comm_rank(c);
        int peer = (g & 1) ? me - ystride : me + ystride;
        return (g & 1) ? sp_comm_recv(c, peer, rcv, cnt, SP_DT_F32) : sp_comm_send(c, peer, snd, cnt, SP_DT_F32);
    }
    }
}

static sp_status coll_chip(calib_ctx *cx, sp_comm *c)
{
    int K = cx->K, g = sp_comm_group_rank(c, SP_AXES_X), q = cx->o->quick;
    int nc = q ? NELEM(coll_c_quick) : NELEM(coll_c);
    sp_calib_result *r = cx->r;
    sp_status st = SP_OK;
    for (int kind = 0; kind < SP_CALIB_COLL_COUNT && !st; kind++) {
        /* send/recv once, between pairs (K = 2 world) */
        if (kind == SP_CALIB_SENDRECV && K != 2) continue;
        for (int i = 0; i < nc && !st; i++) {
            int64_t cb = q ? coll_c_quick[i] : coll_c[i];
            size_t cnt = (size_t)cb / sizeof(float);
            /* all-reduce and all-to-all: whole vectors of K blocks each side */
            float *snd = calloc(cnt * (size_t)K, sizeof *snd), *rcv = calloc(cnt * (size_t)K, sizeof *rcv);
            if (!snd || !rcv) st = spi_fail(SP_ENOMEM, "calibrate: collective buffers");
            /* the reduce-scatter input is K blocks; all-gather sends one */
            if (!st) st = coll_once(c, kind, snd, rcv, cnt, K, g, cx->ystride);
            double total = (double)cb * K;
            int64_t R = (int64_t)(4e6 / total);
            R = R < 3 ? 3 : R > 300 ? 300 : R;
            double best = INFINITY;
            for (int round = 0; round < cx->o->rounds && !st; round++) {
                if ((st = sp_comm_barrier(c, SP_AXES_ALL))) break;
                double t0 = now_s();
                for (int64_t j = 0; j < R && !st; j++) st = coll_once(c, kind, snd, rcv, cnt, K, g, cx->ystride);
                if (kind == SP_CALIB_SENDRECV && !st) st = sp_comm_barrier(c, SP_AXES_X);   /* the last copy done */
                double t = (now_s() - t0) / (double)R;
                if (t < best) best = t;
            }
            free(snd);
            free(rcv);
            if (st || sp_comm_rank(c) != 0) continue;
            sp_calib_coll_pt p = {kind, K, cb, best, 0, 0, K * cx->ystride};
            if (kind == SP_CALIB_SENDRECV) p.steps = 1, p.beta_bytes = (double)cb;
            else if (kind == SP_CALIB_AR) p.steps = 2.0 * (K - 1), p.beta_bytes = 2.0 * (K - 1) * (double)cb;
            else p.steps = K - 1, p.beta_bytes = (double)(K - 1) * (double)cb;
            r->coll[r->n_coll++] = p;
            if (cx->o->log)
                fprintf(cx->o->log, "%-14s K=%-2d c=%-8lld %10.3g s\n", sp_calib_coll_name(kind), K, (long long)cb,
                        best);
        }
    }
    return st;
}

/* ---- dispatch and an idle core's wake-up ---------------------------------------------
 * A model whose kernels do almost nothing (width 16, 8 heads of 2, vocab 64):
 * the time of a decode step is the interpreter's per-step cost plus each
 * token's fixed work; two layer counts separate the two.  The same model on
 * K chips (1D tensor-parallel, 4 collectives a layer) adds what a
 * collective costs between the steps of a real program: chips stay in
 * step, so at every collective all but the last to arrive wait, on an idle
 * core when each chip has one.  chips: 1, 2, 4 or 8 (K > 1: the threads
 * backend); *colls (may be NULL): collective steps in one decode step. */
static sp_status synth_run(sp_comm_backend backend, int layers, int chips, int64_t *steps, int64_t *colls,
                           double *seconds)
{
    char js[512];
    snprintf(js, sizeof js,
             "{\"name\":\"calib-dispatch\",\"n_layers\":%d,\"d_model\":16,\"d_ff\":32,\"n_heads\":8,"
             "\"n_kv_heads\":8,\"d_head\":2,\"vocab\":64,\"ffn\":\"swiglu\",\"block\":\"serial\","
             "\"norm\":\"rmsnorm\",\"positions\":\"rope\",\"tied_embeddings\":false,\"bias\":false,"
             "\"max_context\":64}",
             layers);
    sp_model m;
    sp_error err;
    memset(&err, 0, sizeof err);
    sp_status st = sp_model_loads(js, 0, &m, &err);
    if (st) return spi_fail(st, "calibrate: synthetic model: %s", err.text);
    sp_layout l;
    char ls[96];
    snprintf(ls, sizeof ls, "mesh=%dx1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads", chips);
    if ((st = sp_layout_parse(ls, &l, &err)))
        return st;
    const int64_t G = 48;
    sp_shape sh = {1, 1, 2, 1 + G, SP_DT_F32, 0};
    sp_program *p = malloc(sizeof *p);
    if (!p) return SP_ENOMEM;
    if ((st = sp_lower(&m, &l, SP_PHASE_DECODE, &sh, 0, p))) {
        free(p);
        return st;
    }
    *steps = sp_program_steps(p);
    if (colls) {
        *colls = 0;
        for (int k = 0; k < SP_PART_COUNT; k++) {
            const sp_steps *part = sp_program_part(p, (sp_prog_part)k);
            for (int i = 0; i < part->n; i++)
                if (part->s[i].kind == SP_STEP_COLL) *colls += sp_program_part_runs(p, (sp_prog_part)k);
        }
    }
    free(p);
    sp_weights w;
    if ((st = sp_weights_build_random(&m, 1, &w))) return st;
    sp_exec *ex = NULL;
    int32_t prompt[1] = {1}, tok[48];
    *seconds = INFINITY;
    st = sp_exec_build(&m, &l, 1, 1, G, &w, backend == SP_COMM_BACKEND_NCCL ? backend : SP_COMM_BACKEND_THREADS, &ex);
    /* one chip: the minimum of 4 runs after a warm-up (interference only adds
     * time).  Several chips: the median of 9.  Whether a waiting chip sleeps
     * is a matter of chance (chips that reach a collective within a
     * microsecond of each other never do), so a run may by luck stay in step
     * throughout (seen: 1.3 us a collective in one 2-chip run, 57 us in the
     * next); the median is the typical run, as the minimum is not. */
    double t[9];
    int runs = chips > 1 ? 9 : 4;
    for (int i = 0; !st && i <= runs; i++) {
        sp_exec_stats s;
        if (!(st = sp_exec_run(ex, prompt, NULL, tok, NULL, &s)) && i > 0) t[i - 1] = s.decode_step_s;   /* run 0 warms up */
    }
    if (!st && chips > 1) *seconds = sp_abs_median(runs, t);   /* times are > 0 */
    for (int i = 0; !st && chips == 1 && i < runs; i++)
        if (t[i] < *seconds) *seconds = t[i];
    sp_exec_free(ex);
    sp_weights_free(&w);
    return st;
}

/* ---- the whole run -------------------------------------------------------------------- */
static void machine_names(sp_calib_result *r)
{
    if (gethostname(r->host, sizeof r->host - 1)) snprintf(r->host, sizeof r->host, "unknown");
    snprintf(r->cpu, sizeof r->cpu, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\n")] = 0;
        snprintf(r->cpu, sizeof r->cpu, "%s", v);
        break;
    }
    if (f) fclose(f);
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(r->date, sizeof r->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

sp_status sp_calib_run(const sp_calib_opts *o, sp_calib_result **out)
{
    *out = NULL;
    if (o->backend == SP_COMM_BACKEND_NCCL && !spi_xops_cuda())
        return spi_fail(SP_ENOTSUP, "calibrate --backend cuda: this build has no CUDA (reconfigure --with-cuda=DIR)");
    /* one GPU: its compute, memory and dispatch; collectives over NCCL need one GPU per
     * rank under mpirun, which this calibration does not drive */
    if (o->backend == SP_COMM_BACKEND_NCCL && o->chips != 1)
        return spi_fail(SP_ENOTSUP, "calibrate --backend cuda measures one GPU (--chips 1): NCCL collectives "
                                    "over %d GPUs are not calibrated in this version", o->chips);
    if (o->chips < 1 || o->chips > 64 || o->rounds < 1)
        return spi_fail(SP_EINVAL, "calibrate: chips %d must be 1..64 and rounds %d >= 1", o->chips, o->rounds);
    double t0 = now_s();
    sp_calib_result *r = calloc(1, sizeof *r);
    if (!r) return SP_ENOMEM;
    r->mm = calloc(SP_CALIB_MM_MAX, sizeof *r->mm);
    r->coll = calloc(256, sizeof *r->coll);
    if (!r->mm || !r->coll) {
        sp_calib_free(r);
        return SP_ENOMEM;
    }
    machine_names(r);
    r->backend = o->backend;
    r->chips = o->chips;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    r->cores = o->cores > 0 ? o->cores : nc > 0 ? (int)nc : 1;
    r->compute_chips = r->chips < r->cores ? r->chips : r->cores;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    r->chip_bytes = pages > 0 && psz > 0 ? (int64_t)pages * psz / r->chips : (int64_t)8 << 30;
#ifdef HAVE_CUDA
    if (o->backend == SP_COMM_BACKEND_NCCL) {
        sp_status ds = sp_cuda_device_info(-1, r->device, sizeof r->device, &r->chip_bytes);
        if (ds) {
            sp_calib_free(r);
            return ds;
        }
    }
#endif
    calib_ctx cx;
    memset(&cx, 0, sizeof cx);
    cx.o = o;
    cx.r = r;
    pthread_mutex_init(&cx.mu, NULL);
    sp_status st = SP_OK;
    /* dispatch first, on one chip: the interpreter alone */
    if (!st) st = synth_run(o->backend, 2, 1, &r->disp_steps[0], NULL, &r->disp_seconds[0]);
    if (!st) st = synth_run(o->backend, 10, 1, &r->disp_steps[1], NULL, &r->disp_seconds[1]);
    /* the wake-up: K chips of the threads backend (K = 2 each on a core of its own when there
     * are 2 cores; 4 and 8 as the cores allow, sharing them) */
    for (int K = 2; !st && o->backend == SP_COMM_BACKEND_THREADS && r->cores >= 2 && K <= r->chips &&
                    r->n_wake < SP_CALIB_WAKE_MAX;
         K *= 2) {
        if (r->chips % K) continue;
        int w = r->n_wake;
        int64_t ws[2];
        r->wake_chips[w] = K;
        st = synth_run(o->backend, 2, K, &ws[0], &r->wake_colls[w][0], &r->wake_seconds[w][0]);
        if (!st) st = synth_run(o->backend, 10, K, &ws[1], &r->wake_colls[w][1], &r->wake_seconds[w][1]);
        if (!st) r->n_wake++;
        if (!st && o->log)
            fprintf(o->log, "%d chips: %.3g s a token at 2 layers, %.3g s at 10 (%lld, %lld collectives)\n", K,
                    r->wake_seconds[w][0], r->wake_seconds[w][1], (long long)r->wake_colls[w][0],
                    (long long)r->wake_colls[w][1]);
    }
    /* compute at s = 2, 4, ... chips a core (threads backend, chips > cores) */
    if (!st && o->backend == SP_COMM_BACKEND_THREADS && r->chips > r->cores) {
        stretch_mode = 0;
        st = on_chips(&cx, r->compute_chips, 1, stretch_chip);
        for (int K = 2 * r->cores; !st && K <= r->chips && r->n_stretch < SP_CALIB_WAKE_MAX; K *= 2) {
            r->stretch_chips[r->n_stretch] = K;
            stretch_mode = 1;
            st = on_chips(&cx, K, 1, stretch_chip);
            stretch_mode = 2;
            if (!st) st = on_chips(&cx, K, 1, stretch_chip);
            if (!st && o->log)
                fprintf(o->log, "%d chips on %d cores: %.3g s a unit of work with a barrier, %.3g s the barrier, "
                                "%.3g s the unit alone\n",
                        K, r->cores, r->stretch_sync[r->n_stretch], r->stretch_bar[r->n_stretch], r->stretch_unit);
            if (!st) r->n_stretch++;
        }
    }
    if (!st) st = on_chips(&cx, r->chips, 1, mm_chip);
    if (!st && r->chips > 1) st = on_chips(&cx, r->chips, 1, barrier_chip);
    if (!st && o->log && r->chips > 1) fprintf(o->log, "barrier over %d chips %10.3g s\n", r->chips, r->barrier_s);
    /* collectives: groups of every divisor K > 1 of the chips (at least 2 chips) */
    int n = r->chips < 2 && o->backend != SP_COMM_BACKEND_NCCL ? 2 : r->chips;
    if (o->backend == SP_COMM_BACKEND_MPI && r->chips < 2 && !st)
        st = spi_fail(SP_EINVAL, "calibrate --backend mpi needs at least 2 ranks to measure collectives");
    for (int K = 2; K <= n && !st; K++) {
        if (n % K) continue;
        if (o->quick && K > 2 && K != n) continue;
        cx.K = K;
        cx.ystride = n / K;
        st = on_chips(&cx, K, n / K, coll_chip);
        /* and one group alone: a run of K chips shares the cores less */
        if (!st && K < n && r->backend == SP_COMM_BACKEND_THREADS) {
            cx.ystride = 1;
            st = on_chips(&cx, K, 1, coll_chip);
        }
    }
    pthread_mutex_destroy(&cx.mu);
    r->seconds = now_s() - t0;
    if (st) {
        sp_calib_free(r);
        return st;
    }
    *out = r;
    return SP_OK;
}

void sp_calib_free(sp_calib_result *r)
{
    if (!r) return;
    free(r->mm);
    free(r->coll);
    free(r);
}

/* ---- fits ---------------------------------------------------------------------------- */
/* Least squares in relative error with every coefficient >= 0: each
 * subset of the P features is solved by its normal equations (rows
 * feature/t -> 1), the feasible solution with the least residual wins.
 * P <= 3, so 7 subsets: exact, and no iteration to converge. */
static void nnls_rel(int n, int P, const double *f, const double *t, double *x)
{
    double best = INFINITY;
    for (int j = 0; j < P; j++) x[j] = 0;
    for (unsigned set = 1; set < (1u << P); set++) {
        int idx[3], k = 0;
        for (int j = 0; j < P; j++)
            if (set & (1u << j)) idx[k++] = j;
        double A[3][4] = {{0}};   /* normal equations | right-hand side */
        for (int i = 0; i < n; i++)
            for (int r = 0; r < k; r++) {
                double u = f[i * P + idx[r]] / t[i];
                for (int c = 0; c < k; c++) A[r][c] += u * f[i * P + idx[c]] / t[i];
                A[r][k] += u;
            }
        int ok = 1;
        for (int c = 0; c < k && ok; c++) {   /* Gauss-Jordan, partial pivoting */
            int piv = c;
            for (int r = c + 1; r < k; r++)
                if (fabs(A[r][c]) > fabs(A[piv][c])) piv = r;
            if (!(fabs(A[piv][c]) > 0)) ok = 0;
            for (int cc = 0; cc <= k && ok; cc++) { double v = A[c][cc]; A[c][cc] = A[piv][cc]; A[piv][cc] = v; }
            for (int r = 0; r < k && ok; r++) {
                if (r == c) continue;
                double m = A[r][c] / A[c][c];
                for (int cc = c; cc <= k; cc++) A[r][cc] -= m * A[c][cc];
            }
        }
        double sol[3] = {0, 0, 0};
        for (int r = 0; r < k && ok; r++) {
            double v = A[r][k] / A[r][r];
            if (!(v >= 0) || !isfinite(v)) ok = 0;
            sol[idx[r]] = v;
        }
        if (!ok) continue;
        double res = 0;
        for (int i = 0; i < n; i++) {
            double e = -1;
            for (int j = 0; j < P; j++) e += sol[j] * f[i * P + j] / t[i];
            res += e * e;
        }
        if (res < best) {
            best = res;
            for (int j = 0; j < P; j++) x[j] = sol[j];
        }
    }
}

void sp_calib_fit_coll(int n, const double *s, const double *b, const double *t, double *launch, double *alpha,
                       double *beta)
{
    double *f = malloc((size_t)(n > 0 ? n : 1) * 3 * sizeof *f), x[3] = {0, 0, 0};
    if (f) {
        for (int i = 0; i < n; i++) f[3 * i] = 1, f[3 * i + 1] = s[i], f[3 * i + 2] = b[i];
        nnls_rel(n, 3, f, t, x);
        free(f);
    }
    *launch = x[0];
    *alpha = x[1];
    *beta = x[2];
}

int sp_calib_curve(int n, const double *x, const double *y, int max, double *cx, double *cy)
{
    if (n <= 0 || max <= 0) return 0;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        double lx = log(x[i]);
        if (lx < lo) lo = lx;
        if (lx > hi) hi = lx;
    }
    double w = (hi - lo) / max;
    int k = 0;
    for (int bin = 0; bin < max; bin++) {
        double sx = 0, sy = 0;
        int cnt = 0;
        for (int i = 0; i < n; i++) {
            double lx = log(x[i]);
            int bi = w > 0 ? (int)((lx - lo) / w) : 0;
            if (bi >= max) bi = max - 1;
            if (bi != bin) continue;
            sx += lx, sy += y[i], cnt++;
        }
        if (!cnt) continue;
        cx[k] = exp(sx / cnt);
        cy[k] = sy / cnt;
        k++;
    }
    return k;
}

double sp_calib_share(const sp_calib_result *r, int n)
{
    if (r->backend == SP_COMM_BACKEND_NCCL || r->cores < 1 || n <= r->cores) return 1.0;
    return (double)n / r->cores;
}

/* Rows curves by weight shape: for each (K, N) of dtype d (logits: the logits points, else
 * the matmuls on one matrix) timed at 3 T or more, K·N increasing, rate / (peak × the FLOPs
 * curve of fc, or peak alone when fc is NULL) by T, at most 1; at most SP_HW_ROWS_SIZES
 * shapes.  Returns the classes written. */
static int fit_classes(const sp_calib_result *r, int d, int logits, double peak, const sp_calib_fit *fc, double *cw,
                       int *cnp, double (*cm)[SP_HW_EFF_POINTS], double (*cv)[SP_HW_EFF_POINTS])
{
    int nc = 0;
    for (double wlo = 0; peak > 0 && nc < SP_HW_ROWS_SIZES;) {
        double wn = 0;   /* the next larger K·N measured */
        for (int i = 0; i < r->n_mm; i++) {
            const sp_calib_mm *p = &r->mm[i];
            double kn = (double)p->K * (double)p->N;
            if (p->dt == d && !(p->ring > 1) && !p->alone && !p->logits == !logits && kn > wlo && (!wn || kn < wn)) wn = kn;
        }
        if (!wn) break;
        wlo = wn;
        int np = 0;
        /* points by T increasing (the grid lists T increasing per shape; sorted here regardless) */
        for (int64_t T = 1, next; T > 0 && np < SP_CALIB_CURVE; T = next) {
            next = 0;
            double u = -1;
            for (int i = 0; i < r->n_mm; i++) {
                const sp_calib_mm *p = &r->mm[i];
                if (p->dt != d || p->ring > 1 || p->alone || !p->logits != !logits || (double)p->K * (double)p->N != wn) continue;
                if (p->T > T && (!next || p->T < next)) next = p->T;
                if (p->T != T) continue;
                double fl = 2.0 * (double)(p->T * p->K * p->N);
                u = fl / p->seconds / (peak * (fc ? sp_hw_curve(fc->eff_points, fc->eff_flops, fc->eff_value, fl, 1.0) : 1.0));
            }
            if (u < 0) continue;
            cm[nc][np] = (double)T;
            cv[nc][np++] = u > 1 ? 1 : u;
        }
        /* a rows curve needs rows: shapes timed at one T only (the f32
         * weight streams, T = 1) stay in the median curve alone */
        if (np < 3) continue;
        cw[nc] = wn;
        cnp[nc++] = np;
    }
    return nc;
}

sp_status sp_calib_fit_result(const sp_calib_result *r, sp_calib_fit *f)
{
    memset(f, 0, sizeof *f);
    double x[128], y[128];
    int n = 0;
    /* peak: the best rate with T >= 8 (weight reuse over tokens) */
    for (int i = 0; i < r->n_mm; i++) {
        const sp_calib_mm *p = &r->mm[i];
        if (p->T < 8 || p->logits) continue;
        double rate = 2.0 * (double)(p->T * p->K * p->N) / p->seconds;
        if (rate > f->peak_flops[p->dt]) f->peak_flops[p->dt] = rate;
    }
    if (f->peak_flops[SP_DT_F32] <= 0) return spi_fail(SP_EINVAL, "calibrate: no f32 matmul point with T >= 8");
    /* the FLOPs curve from the f32 points with T >= ROWS_FULL, where the
     * activation rows no longer limit the kernel */
    for (int i = 0; i < r->n_mm; i++) {
        const sp_calib_mm *p = &r->mm[i];
        if (p->T < ROWS_FULL || p->dt != SP_DT_F32 || p->logits) continue;
        double fl = 2.0 * (double)(p->T * p->K * p->N);
        x[n] = fl;
        y[n] = fl / p->seconds / f->peak_flops[SP_DT_F32];
        n++;
    }
    if (!n) return spi_fail(SP_EINVAL, "calibrate: no f32 matmul point with T >= %d", ROWS_FULL);
    f->eff_points = sp_calib_curve(n, x, y, SP_CALIB_CURVE, f->eff_flops, f->eff_value);
    /* the rows curves: for each weight dtype and each T measured,
     * the median over the shapes of measured rate / (the dtype's compute
     * peak × FLOPs curve) (T = 1 f32: the single-matrix
     * weight streams; the f32 curve is near 1 from ROWS_FULL on by
     * construction, the others need not be).
     * OpenBLAS's sgemm runs a few rows far below its rate at the same FLOPs
     * with many rows; quantised weights take a fused path up to T = 8 that
     * the weight bytes bound (kernels/cpu/matmul.c) */
    sp_hw pk;
    sp_hw_init(&pk);
    memcpy(pk.peak_flops, f->peak_flops, sizeof f->peak_flops);
    for (int d = 0; d < 5; d++) {
        double peak = sp_hw_compute_peak(&pk, (sp_dtype)d);
        f->rows_points[d] = 0;
        for (int64_t T = 1, next; T > 0 && f->rows_points[d] < SP_CALIB_CURVE && peak > 0; T = next) {
            int m = 0;
            next = 0;   /* the next larger T measured */
            for (int i = 0; i < r->n_mm && m < 128; i++) {
                const sp_calib_mm *p = &r->mm[i];
                if (p->dt != d || p->ring > 1 || p->alone || p->logits) continue;
                if (p->T > T && (!next || p->T < next)) next = p->T;
                if (p->T != T) continue;
                double fl = 2.0 * (double)(p->T * p->K * p->N);
                y[m++] = fl / p->seconds / (peak * sp_hw_curve(f->eff_points, f->eff_flops, f->eff_value, fl, 1.0));
            }
            if (!m) continue;
            double u = sp_abs_median(m, y);   /* rates: all > 0 */
            f->rows_m[d][f->rows_points[d]] = (double)T;
            f->rows_value[d][f->rows_points[d]++] = u > 1 ? 1 : u;
        }
    }
    /* and by weight shape: the same ratio, each (K, N) on its own (the
     * median above hides that large weights run few rows slower; T = 16:
     * 62.6 GFLOP/s at 2048x5632, 77.3 at 512x512, 2026-11-23) */
    for (int d = 0; d < 5; d++)
        f->rows_sizes[d] = fit_classes(r, d, 0, sp_hw_compute_peak(&pk, (sp_dtype)d), f, f->rows_w[d], f->rows_w_points[d],
                                       f->rows_w_m[d], f->rows_w_value[d]);
    /* the logits kernel (x · tableᵀ, f32 tables) by table shape, as fractions of the f32 peak:
     * OpenBLAS runs the transposed operand at a rate of its own */
    f->logits_sizes = fit_classes(r, SP_DT_F32, 1, f->peak_flops[SP_DT_F32], NULL, f->logits_w, f->logits_w_points,
                                  f->logits_w_m, f->logits_w_value);
    /* attention: fraction of the f32 peak by head width, mean over the shapes of each width */
    n = 0;
    for (int i = 0; i < r->n_attn; i++) {
        x[n] = (double)r->attn[i].D;
        y[n] = r->attn[i].flops / r->attn[i].seconds / f->peak_flops[SP_DT_F32];
        if (y[n] > 1) y[n] = 1;
        n++;
    }
    f->attn_points = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < f->attn_points && f->attn_dhead[k] != x[i]) k++;
        if (k == f->attn_points) {
            if (k == SP_CALIB_CURVE) continue;
            double sum = 0;
            int cnt = 0;
            for (int j = 0; j < n; j++)
                if (x[j] == x[i]) sum += y[j], cnt++;
            f->attn_dhead[k] = x[i];
            f->attn_value[k] = sum / cnt;
            f->attn_points++;
        }
    }
    /* memory: the T = 1 f32 weight streams (on the compute chips at once) */
    n = 0;
    for (int i = 0; i < r->n_mm; i++) {
        const sp_calib_mm *p = &r->mm[i];
        if (p->T != 1 || p->dt != SP_DT_F32 || p->alone || p->logits) continue;
        double by = (double)(p->K * p->N) * 4.0 + (double)(p->K + p->N) * 4.0;
        x[n] = by * p->ring;   /* the working set */
        y[n] = by / p->seconds;
        if (y[n] > f->mem_bw) f->mem_bw = y[n];
        n++;
    }
    if (f->mem_bw <= 0) return spi_fail(SP_EINVAL, "calibrate: no weight-stream point");
    for (int i = 0; i < n; i++) y[i] /= f->mem_bw;
    f->mem_points = sp_calib_curve(n, x, y, SP_CALIB_CURVE, f->mem_bytes, f->mem_value);
    for (int i = 0; i < f->mem_points; i++)
        if (f->mem_value[i] > 1) f->mem_value[i] = 1;   /* a bin's mean never exceeds its best */
    /* the same streams on chip 0 alone, as fractions of the same best rate
     * (at most 1: a cache-sized stream is no faster alone) */
    n = 0;
    for (int i = 0; i < r->n_mm; i++) {
        const sp_calib_mm *p = &r->mm[i];
        if (p->T != 1 || p->dt != SP_DT_F32 || !p->alone || p->logits) continue;
        double by = (double)(p->K * p->N) * 4.0 + (double)(p->K + p->N) * 4.0;
        x[n] = by * p->ring;
        y[n] = by / p->seconds / f->mem_bw;
        n++;
    }
    f->wsa_points = n ? sp_calib_curve(n, x, y, SP_CALIB_CURVE, f->wsa_bytes, f->wsa_value) : 0;
    for (int i = 0; i < f->wsa_points; i++)
        if (f->wsa_value[i] > 1) f->wsa_value[i] = 1;
    /* weight fetches: (cycled − cached) / weight bytes at each ring's working set, after a
     * point of 0 at the matrix alone (its cached time is what the matmul curves hold); rings
     * increasing, a negative difference (noise) as 0 */
    f->fetch_points = 0;
    for (int i = 0; i < r->n_mm; i++) {
        const sp_calib_mm *p = &r->mm[i];
        if (p->dt != SP_DT_F32 || p->ring <= 1 || p->alone || p->logits || p->T < 2 || p->K != FETCH_K || p->N != FETCH_N) continue;
        double hot = 0, wb = (double)(p->K * p->N) * 4.0;
        for (int j = 0; j < r->n_mm; j++) {
            const sp_calib_mm *q = &r->mm[j];
            if (q->dt == p->dt && q->T == p->T && q->K == p->K && q->N == p->N && q->ring <= 1 && !q->alone && !q->logits)
                hot = q->seconds;
        }
        if (!(hot > 0)) continue;
        if (!f->fetch_points) f->fetch_bytes[0] = wb, f->fetch_value[0] = 0, f->fetch_points = 1;
        if (f->fetch_points >= SP_CALIB_CURVE) continue;
        if (!(wb * p->ring > f->fetch_bytes[f->fetch_points - 1])) continue;
        f->fetch_bytes[f->fetch_points] = wb * p->ring;
        f->fetch_value[f->fetch_points++] = p->seconds > hot ? (p->seconds - hot) / wb : 0;
    }
    /* a larger working set is never nearer the core: the values made non-decreasing by pooling
     * adjacent violators (each violating run replaced by its mean; noise, not a faster memory) */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 1; i < f->fetch_points; i++) {
            if (!(f->fetch_value[i] < f->fetch_value[i - 1])) continue;
            int a = i - 1, b = i;   /* the run of equal values ending at i-1, pooled with i */
            while (a > 0 && f->fetch_value[a - 1] == f->fetch_value[i - 1]) a--;
            double m = 0;
            for (int k = a; k <= b; k++) m += f->fetch_value[k];
            m /= (double)(b - a + 1);
            for (int k = a; k <= b; k++) f->fetch_value[k] = m;
            changed = 1;
        }
    }
    /* matmul_tile M: the token granularity (none, 2 .. 32) under which the
     * roofline max(compute, memory) best matches every f32 point (with the
     * rows curve, a granularity seldom adds anything on a CPU) */
    static const int tiles[] = {0, 2, 4, 8, 16, 32};
    double best_err = INFINITY;
    for (int ti = 0; ti < NELEM(tiles); ti++) {
        int m = 0;
        for (int i = 0; i < r->n_mm && m < 128; i++) {
            const sp_calib_mm *p = &r->mm[i];
            if (p->dt != SP_DT_F32 || p->ring > 1 || p->alone || p->logits) continue;
            double fl = 2.0 * (double)(p->T * p->K * p->N), tm = (double)tiles[ti];
            double util = tm > 0 ? (double)p->T / (ceil((double)p->T / tm) * tm) : 1.0;
            double c = fl / (f->peak_flops[SP_DT_F32] * sp_hw_curve(f->eff_points, f->eff_flops, f->eff_value, fl, 1.0) *
                             sp_hw_curve(f->rows_points[SP_DT_F32], f->rows_m[SP_DT_F32], f->rows_value[SP_DT_F32], (double)p->T, 1.0) *
                             util);
            double by = (double)(p->K * p->N + p->T * p->K + p->T * p->N) * 4.0;
            double mt = by / (f->mem_bw * sp_hw_curve(f->mem_points, f->mem_bytes, f->mem_value, by, 1.0));
            x[m++] = ((c > mt ? c : mt) - p->seconds) / p->seconds;
        }
        double e = sp_abs_median(m, x);
        if (e < best_err) best_err = e, f->tile_m = tiles[ti];
    }
    f->mm_median_err = best_err;
    /* collectives: each point's time on a core of its own (t / share), so
     * the fit holds for runs of any chip count (errors are relative, the
     * same before and after the division) */
    /* Two regimes.  Chips that share cores (more chips than cores) never
     * leave a core idle: a waiting chip's core runs another chip.  Chips
     * each with a core leave it idle while they wait, and a collective then
     * also waits for that core to wake (on this 2-vCPU VM about 25 us, against
     * about 3 us a core for the same two-chip all-gather with 8 chips on 2
     * cores).  So λ, α, β come from the shared points when there are
     * enough, and the wake-up from what the others take beyond them. */
    double s[256], b[256], t[256], e[256];
    int n_shared = 0;
    for (int i = 0; i < r->n_coll; i++) n_shared += sp_calib_share(r, r->coll[i].chips) > 1;
    int split = n_shared >= 3 && n_shared < r->n_coll;
    n = 0;
    for (int i = 0; i < r->n_coll && n < 256; i++) {
        if (split && sp_calib_share(r, r->coll[i].chips) <= 1) continue;
        s[n] = r->coll[i].steps;
        b[n] = r->coll[i].beta_bytes;
        t[n] = r->coll[i].seconds / sp_calib_share(r, r->coll[i].chips);
        n++;
    }
    if (n) {
        sp_calib_fit_coll(n, s, b, t, &f->launch, &f->alpha, &f->beta);
        for (int i = 0; i < n; i++) e[i] = (f->launch + f->alpha * s[i] + f->beta * b[i] - t[i]) / t[i];
        f->coll_median_err = sp_abs_median(n, e);
        f->coll_worst_err = sp_abs_max(n, e);
    }
    n = 0;
    for (int i = 0; split && i < r->n_coll && n < 256; i++) {
        const sp_calib_coll_pt *p = &r->coll[i];
        if (sp_calib_share(r, p->chips) > 1) continue;
        double d = p->seconds - (f->launch + f->alpha * p->steps + f->beta * p->beta_bytes);
        e[n++] = d > 0 ? d : 0;
    }
    f->idle_wake_s = n ? sp_abs_median(n, e) : 0;
    /* Measured inside a program when possible: back-to-back collectives
     * (the points above) wake each other up more often than a program's,
     * whose chips stay in step between collectives (2-chip tiny-llama
     * decode, 2026-11-23: about 29 us a collective in the run's trace,
     * against 45-58 us back to back).  For K chips at share s: per layer,
     * the K-chip token less s times the one-chip token (the chips' compute
     * shares the cores), over the collectives the layers add, less what the
     * fit prices such a collective at (s·(λ + α·(K − 1)); its 64 bytes add
     * nothing measurable).  The 1/K of the (tiny, dispatch-bound) compute
     * that each chip no longer does is not added back, so this errs low by
     * at most that. */
    for (int w = 0; w < r->n_wake && r->disp_steps[1] > r->disp_steps[0]; w++) {
        if (r->wake_colls[w][1] <= r->wake_colls[w][0]) continue;
        double sh = sp_calib_share(r, r->wake_chips[w]);
        double per = ((r->wake_seconds[w][1] - r->wake_seconds[w][0]) -
                      sh * (r->disp_seconds[1] - r->disp_seconds[0])) /
                         (double)(r->wake_colls[w][1] - r->wake_colls[w][0]) -
                     sh * (f->launch + f->alpha * (r->wake_chips[w] - 1));
        /* one point per share (K chips on at most as many cores share 1) */
        if (f->wake_points && f->wake_share[f->wake_points - 1] >= sh) continue;
        f->wake_share[f->wake_points] = sh;
        f->wake_value[f->wake_points++] = per > 0 ? per : 0;
    }
    if (f->wake_points && f->wake_share[0] <= 1) f->idle_wake_s = f->wake_value[0];
    /* compute at s chips a core: what a unit costs beyond its barrier, over s units alone (a
     * point whose barrier alone took as long as unit + barrier measured nothing: left out, the
     * profile then prices that share by its neighbours, or by the share alone) */
    for (int k = 0; k < r->n_stretch && r->stretch_unit > 0; k++) {
        double sh = sp_calib_share(r, r->stretch_chips[k]), v = (r->stretch_sync[k] - r->stretch_bar[k]) / (sh * r->stretch_unit);
        if (!(sh > 1) || !(v > 0) || (f->stretch_points && !(sh > f->stretch_share[f->stretch_points - 1]))) continue;
        f->stretch_share[f->stretch_points] = sh;
        f->stretch_value[f->stretch_points++] = v;
    }
    f->act_elem_s[0] = r->act_s[0];
    f->act_elem_s[1] = r->act_s[1];
    memcpy(f->step_elem_s, r->elem_s, sizeof f->step_elem_s);
    /* per chip beyond the first, on a core of its own */
    f->token_sync_s = r->chips > 1 ? r->barrier_s / (r->chips - 1) / sp_calib_share(r, r->chips) : 0;
    if (r->disp_steps[1] > r->disp_steps[0]) {
        f->dispatch_s = (r->disp_seconds[1] - r->disp_seconds[0]) / (double)(r->disp_steps[1] - r->disp_steps[0]);
        if (f->dispatch_s < 0) f->dispatch_s = 0;
    }
    return SP_OK;
}
