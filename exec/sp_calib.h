/*
 * sp_calib.h: microbenchmarks of this machine's chips, and the fits that turn
 * them into the figures of a hardware profile (doc/formats.md), for
 * `shardplan calibrate --backend threads|mpi|cuda`.
 *
 *   sp_calib_opts o;
 *   sp_calib_opts_init(&o);
 *   o.backend = SP_COMM_BACKEND_THREADS; o.chips = 4;
 *   sp_calib_result *r;
 *   SP_CHECK(sp_calib_run(&o, &r));          // about 30-60 s on 2 cores
 *   sp_calib_fit f;
 *   SP_CHECK(sp_calib_fit_result(r, &f));
 *   ...                                      // write the profile from f and r's points
 *   sp_calib_free(r);
 *
 * What is measured, always through the code the executor runs (the chip's
 * device table, exec/spi_xdev.h: the CPU kernels, or on a GPU the CUDA kernels
 * and cuBLAS, with the device's queue drained at the end of each timed round):
 *   matmul   sp_kern_matmul (T, K) . (K, N) for each weight dtype over a grid
 *            of shapes; FLOP/s = 2·T·K·N / t.
 *   memory   sp_kern_matmul with T = 1 (a weight stream: the decode matmul,
 *            bound by the weight bytes), bytes = K·N·s + (K + N)·4; B/s = bytes / t,
 *            by working set (16 KiB .. 256 MiB; above 16 MiB a ring of
 *            matrices, one per call, as a decode step streams its layers);
 *            with more than one compute chip, once more on chip 0 alone
 *            (the chips share the memory bandwidth: a chip streaming while
 *            its peers wait, as in a pipeline of one micro-batch, is faster).
 *   collectives  every kind over groups of K = each divisor of the chip count
 *            above 1, twice: all N chips busy (N/K groups at once, as in a
 *            run of N chips) and one group alone (K chips, as in a run of
 *            K); one chip's block c of 256 B .. 1 MiB; send/recv between
 *            chip pairs.
 *   attention sp_kern_attention (decode: 1 query over 256 positions; prefill:
 *            64 causal queries) at head widths 8, 64, 128, FLOPs counted as
 *            the lowering counts them.
 *   activations  sp_kern_gelu and sp_kern_swiglu per element; the barrier
 *            over all chips that the executor holds after every token.
 *   dispatch the interpreter's seconds per step: sp_exec on a synthetic model
 *            whose kernels do almost nothing, at two layer counts; the
 *            difference in time over the difference in steps.
 * Chips.  The compute benchmarks run on min(chips, cores) chips at once
 * (each chip then has a core, the per-chip rate the profile states; more
 * chips than cores time-share them, which the profile's chip.shared_cores
 * tells the cost model).  A collective of n chips running at once on C
 * cores is a share s = max(1, n / C) of the cores' time: the fit and the
 * per-token barrier divide each time by its s (chip.comm_shares_cores: the
 * cost model multiplies by the run's own s), so one profile prices runs of
 * every chip count.
 * Timing: one untimed call (warm-up), then `rounds` (5) timed rounds of R calls
 * each (R fixed per point from its size), separated by barriers; the point is
 * the MINIMUM over rounds of the mean call time on chip 0 (robust against a
 * noisy shared machine: interference only ever adds time).
 * MPI: every rank calls sp_calib_run under mpirun with the same options;
 * rank 0's result holds the points (other ranks get them too, unfitted use).
 */
#ifndef SP_CALIB_H
#define SP_CALIB_H
#include <stdint.h>
#include <stdio.h>
#include "sp_common.h"
#include "sp_comm.h"
#include "sp_hw.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_calib_opts {
    size_t size;               /* sizeof(sp_calib_opts) */
    sp_comm_backend backend;   /* THREADS, MPI, or NCCL (cuda: one GPU, chips = 1; its compute,
                                  memory and dispatch, no collectives; a grid of GPU-sized shapes) */
    int chips;                 /* chips to measure at (threads: 1..64; MPI: the world size) */
    int cores;                 /* cores the chips share (0: online CPUs of this host) */
    int rounds;                /* timed rounds per point (default 5) */
    int quick;                 /* 1: a reduced grid (tests): seconds, not a minute */
    FILE *log;                 /* progress lines, or NULL */
} sp_calib_opts;
void sp_calib_opts_init(sp_calib_opts *o);

typedef enum sp_calib_coll {
    SP_CALIB_AG = 0, SP_CALIB_RS = 1, SP_CALIB_AR = 2, SP_CALIB_A2A = 3, SP_CALIB_SENDRECV = 4, SP_CALIB_COLL_COUNT
} sp_calib_coll;
const char *sp_calib_coll_name(sp_calib_coll k);   /* "all-gather", ... as sp_coll_kind_name */

#define SP_CALIB_MM_MAX 192   /* matmul, weight-stream, weight-fetch and logits points */
typedef struct sp_calib_mm {
    int dt;                    /* sp_dtype of the weights */
    int64_t T, K, N;
    int ring;                  /* weight matrices cycled through (working set ring·K·N) */
    double seconds;            /* one call */
    int alone;                 /* 1: chip 0 ran it with the other chips idle (a weight stream alone);
                                  0: on min(chips, cores) chips at once */
    int logits;                /* 1: the logits kernel, x (T, K) · table (N, K)ᵀ (f32 table) */
} sp_calib_mm;

typedef struct sp_calib_coll_pt {
    sp_calib_coll kind;
    int K;                     /* group size (2 for send/recv) */
    int64_t block_bytes;       /* one chip's block c (all-reduce: the whole vector is K·c; send: c) */
    double seconds;
    double steps;              /* algorithm steps (the α count): K-1, 2(K-1) for all-reduce, 1 for send */
    double beta_bytes;         /* bytes on β: (K-1)·c, 2(K-1)·c for all-reduce, c for send */
    int chips;                 /* chips running this benchmark at once (K: one group; N: all) */
} sp_calib_coll_pt;

typedef struct sp_calib_attn {
    int64_t B, Lq, pos0, H, D;   /* H query heads = H kv heads, one chip */
    double flops;                /* the lowering's count: 4·B·H·D·(Lq·pos0 + Lq(Lq+1)/2) */
    double seconds;
} sp_calib_attn;

#define SP_CALIB_WAKE_MAX 3
typedef struct sp_calib_result {
    char host[128];            /* hostname */
    char cpu[128];             /* /proc/cpuinfo model name */
    char device[128];          /* cuda: the GPU's name (empty for CPU chips) */
    int64_t chip_bytes;        /* memory of one chip: host memory / chips, or the GPU's */
    char date[32];             /* UTC, ISO 8601 */
    sp_comm_backend backend;
    int chips, cores, compute_chips;
    int n_mm, n_coll, n_attn;
    sp_calib_mm *mm;
    sp_calib_attn attn[16];
    sp_calib_coll_pt *coll;
    double act_s[2];           /* seconds per element: sp_kern_gelu, sp_kern_swiglu (64 Ki elements) */
    double elem_s[SP_ELEM_COUNT]; /* seconds per element of each elementwise kernel (sp_hw_elem, 64 Ki
                                     elements; CPU chips only, else 0) */
    double barrier_s;          /* sp_comm_barrier over all chips */
    /* dispatch: two runs of the synthetic model */
    int64_t disp_steps[2];
    double disp_seconds[2];
    /* the wake-up: the same model on K = 2, 4, 8 chips (those dividing chips; threads backend
     * with 2 cores or more; n_wake 0 otherwise): collective steps and seconds per token at the
     * two layer counts */
    int n_wake;
    int wake_chips[SP_CALIB_WAKE_MAX];
    int64_t wake_colls[SP_CALIB_WAKE_MAX][2];
    double wake_seconds[SP_CALIB_WAKE_MAX][2];
    /* compute while chips time-share the cores (threads backend, chips > cores): a unit of work
     * (a T × K · K × N f32 matmul, SP_CALIB_STRETCH_T/_KN) per chip, seconds per unit on chip 0:
     * stretch_unit alone on min(chips, cores) chips (no synchronisation); at K = 2, 4, ... times
     * the cores (K <= chips), each unit followed by a barrier of the K chips (stretch_sync) and the
     * barriers alone (stretch_bar) */
    int n_stretch;
    double stretch_unit;
    int stretch_chips[SP_CALIB_WAKE_MAX];
    double stretch_sync[SP_CALIB_WAKE_MAX], stretch_bar[SP_CALIB_WAKE_MAX];
    double seconds;            /* wall time of the whole calibration */
} sp_calib_result;
#define SP_CALIB_STRETCH_T 64
#define SP_CALIB_STRETCH_KN 256

/* Runs every benchmark.  Caller frees *out with sp_calib_free. */
sp_status sp_calib_run(const sp_calib_opts *o, sp_calib_result **out);
void sp_calib_free(sp_calib_result *r);   /* NULL is a no-op */

/* ---- fits ---- */
#define SP_CALIB_CURVE 8
typedef struct sp_calib_fit {
    double peak_flops[5];      /* per sp_dtype: the best compute-bound rate measured (0: not measured) */
    int eff_points;            /* matmul efficiency by local FLOPs (f32 points with T >= 64) */
    double eff_flops[SP_CALIB_CURVE], eff_value[SP_CALIB_CURVE];
    int rows_points[5];        /* per weight dtype: fraction of that efficiency (at the dtype's compute
                                  peak, sp_hw_compute_peak) by activation rows T, median over shapes */
    double rows_m[5][SP_CALIB_CURVE], rows_value[5][SP_CALIB_CURVE];
    int rows_sizes[5];         /* the same by weight shape: one curve per (K, N) measured (K·N
                                  increasing; at most SP_HW_ROWS_SIZES), each point rate / (peak ×
                                  FLOPs curve) of that shape alone */
    double rows_w[5][SP_HW_ROWS_SIZES];
    int rows_w_points[5][SP_HW_ROWS_SIZES];
    double rows_w_m[5][SP_HW_ROWS_SIZES][SP_CALIB_CURVE], rows_w_value[5][SP_HW_ROWS_SIZES][SP_CALIB_CURVE];
    int logits_sizes;          /* the logits kernel by table shape (K·N increasing), each point its
                                  rate / the f32 peak at T (efficiency.logits_rows_by_weights) */
    double logits_w[SP_HW_ROWS_SIZES];
    int logits_w_points[SP_HW_ROWS_SIZES];
    double logits_w_m[SP_HW_ROWS_SIZES][SP_CALIB_CURVE], logits_w_value[SP_HW_ROWS_SIZES][SP_CALIB_CURVE];
    int tile_m;                /* matmul_tile M (0: none): the T granularity that fits the points best */
    double mm_median_err;      /* |roofline model - measured| / measured over the f32 matmul points */
    int attn_points;           /* attention efficiency (fraction of the f32 peak) by d_head */
    double attn_dhead[SP_CALIB_CURVE], attn_value[SP_CALIB_CURVE];
    double mem_bw;             /* the best weight-stream rate, B/s */
    int mem_points;            /* fraction of mem_bw by bytes moved */
    double mem_bytes[SP_CALIB_CURVE], mem_value[SP_CALIB_CURVE];
    int wsa_points;            /* the same streams on one chip alone: fraction of mem_bw by bytes
                                  (0 points: none measured, e.g. chips = 1 or one core) */
    double wsa_bytes[SP_CALIB_CURVE], wsa_value[SP_CALIB_CURVE];
    double launch, alpha, beta; /* seconds per collective, per collective step, per byte, of chips
                                   each with a core (a point's time / sp_calib_share), fitted on the
                                   points whose chips shared cores when there are 3 or more */
    double coll_median_err, coll_worst_err;   /* |fit - measured| / measured over the points */
    double dispatch_s;         /* seconds per interpreter step */
    double act_elem_s[2];      /* r->act_s */
    double step_elem_s[SP_ELEM_COUNT]; /* r->elem_s */
    double token_sync_s;       /* r->barrier_s / (chips - 1) / sp_calib_share(r, chips) with 2
                                  chips or more, else 0 */
    double idle_wake_s;        /* the wake-up of a waiting chip's idle core, per collective, with a
                                  core per chip: wake_value at share 1 when measured (wake_points);
                                  else the median over the collective points whose chips each had
                                  a core, when points with chips sharing cores carried the fit, of
                                  max(0, time − fit); 0 otherwise */
    int wake_points;           /* per collective inside a program (r->wake_*), by chips per core
                                  (wake_share = max(1, K / cores)): max(0, what a collective adds to
                                  a token beyond the one-chip runs' time − the fit's price of it) */
    double wake_share[SP_CALIB_WAKE_MAX], wake_value[SP_CALIB_WAKE_MAX];
    int stretch_points;        /* compute at s = K / cores > 1 chips a core, per unit of work, over s
                                  times its time with a core per chip: (stretch_sync − stretch_bar)
                                  / (s · stretch_unit), by s (chip.compute_stretch_by_share) */
    double stretch_share[SP_CALIB_WAKE_MAX], stretch_value[SP_CALIB_WAKE_MAX];
    int fetch_points;          /* seconds per weight byte a matmul of several rows adds beyond its
                                  cached time, by working set: the f32 512 x 512 points cycled over
                                  rings of copies, (time − the ring-1 point's) / weight bytes at
                                  ring × weight bytes, after 0 at the matrix alone
                                  (chip.weight_fetch_s_by_working_set); 0 points: none measured */
    double fetch_bytes[SP_CALIB_CURVE], fetch_value[SP_CALIB_CURVE];
} sp_calib_fit;
sp_status sp_calib_fit_result(const sp_calib_result *r, sp_calib_fit *out);
/* The share of the cores' time one of n chips running at once gets the
 * inverse of: max(1, n / r->cores) for CPU chips, 1 for a GPU. */
double sp_calib_share(const sp_calib_result *r, int n);

/* Least squares of t ≈ λ + α·s + β·b in relative error (weights 1/t), every
 * coefficient >= 0 (the best non-negative subset).  Exposed for tests. */
void sp_calib_fit_coll(int n, const double *s, const double *b, const double *t, double *launch, double *alpha,
                       double *beta);
/* A curve of at most `max` points through (x_i, y_i), x > 0: points grouped
 * by x into `max` equal bins of log(x), each bin's mean log x and mean y;
 * x increasing.  Returns the number of points written.  Exposed for tests. */
int sp_calib_curve(int n, const double *x, const double *y, int max, double *cx, double *cy);

#ifdef __cplusplus
}
#endif
#endif
