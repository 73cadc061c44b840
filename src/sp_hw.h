/*
 * sp_hw.h: hardware descriptions: one kind of chip and the network that joins
 * many of them (a 3D torus, or a two-tier cluster of nodes).
 *
 * Read from shardplan's JSON format (doc/formats.md).  Plain data, nothing
 * heap-owned.  Units: bytes, bytes/s, FLOP/s, seconds.
 */
#ifndef SP_HW_H
#define SP_HW_H
#include <stdint.h>
#include "sp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sp_dtype (data types) lives in sp_common.h. */

typedef enum sp_topo_kind { SP_TOPO_TORUS = 0, SP_TOPO_CLUSTER = 1, SP_TOPO_COUNT } sp_topo_kind;

/* Whether the collectives the program marks overlappable run under compute
 * (cost model and simulator; sp_cost.h):
 *  NONE:     no: every collective holds the compute stream while it runs
 *  FULL:     yes: a marked collective runs on the communication stream
 *  FRACTION: as FULL, and the compute stream is slowed by (1 - f) of each
 *            marked collective's time (f = overlap_fraction: the part hidden) */
typedef enum sp_overlap { SP_OVERLAP_NONE = 0, SP_OVERLAP_FULL = 1, SP_OVERLAP_FRACTION = 2, SP_OVERLAP_COUNT } sp_overlap;

#define SP_HW_EFF_POINTS 8
#define SP_HW_ROWS_SIZES 6   /* weight-size classes of the rows curves (matmul_rows_by_weights) */
#define SP_HW_CAL_PARAMS 24

/* Where a profile's fitted numbers come from: the "calibration" section
 * that `calibrate --fit --out` writes (doc/formats.md).  A fitted parameter
 * is one of sp_hw_param_path()'s fields; prior is its uncalibrated value. */
typedef struct sp_hw_calibration {
    int present;
    char date[16];                    /* YYYY-MM-DD */
    char fitted_to[192];              /* training files, comma-separated */
    char transferred_from[64];        /* "": fitted to this chip's rows; else the profile whose fitted
                                         overheads this one shares (its own peaks and bandwidths) */
    int rows, models;                 /* training rows and distinct models of the fit */
    double prior_weight;              /* the fit's pull toward the prior (sp_fit_opts.prior_weight);
                                         0 in a section that does not state one */
    double median_abs_err, worst_abs_err;               /* |predicted / measured - 1| of the fit */
    double median_abs_err_prior, worst_abs_err_prior;   /* ... of the uncalibrated profile */
    double median_abs_err_lomo, worst_abs_err_lomo;     /* leave one model out; < 0: not run */
    int n_params;
    struct {
        int param;                    /* sp_hw_param index */
        int fitted;                   /* 0: no training row depends on it (kept at the prior) */
        double prior, value;
    } params[SP_HW_CAL_PARAMS];
} sp_hw_calibration;
#define SP_HW_SLICE_SHAPES 16

/* The elementwise kernels a compute step runs besides its FLOPs
 * (sp_lower_step_elems counts their elements): a CPU runs them at a rate of
 * their own, far below its memory bandwidth (a norm's statistics are one
 * dependent chain of double additions a row; RoPE evaluates a sine and a
 * cosine an element), so a profile may price each per element. */
typedef enum sp_hw_elem {
    SP_ELEM_NORM_STATS = 0,   /* a row's sum and sum of squares (sp_kern_norm_stats) */
    SP_ELEM_NORM_APPLY = 1,   /* normalise, gain, bias (sp_kern_norm_apply) */
    SP_ELEM_ADD = 2,          /* residual, bias and position adds */
    SP_ELEM_COPY = 3,         /* block copies: slices, attention's and the KV cache's staging and appends */
    SP_ELEM_ROPE = 4,         /* rotary positions, per rotated element */
    SP_ELEM_EMBED = 5,        /* embedding rows gathered, per output element */
    SP_ELEM_COUNT
} sp_hw_elem;
/* "norm_stats", "norm_apply", "add", "copy", "rope", "embed" (the JSON keys of chip.step_elem_s) */
const char *sp_hw_elem_name(sp_hw_elem e);

typedef struct sp_hw {
    char name[64];
    /* chip */
    double peak_flops[SP_DT_COUNT];   /* FLOP/s of a matmul whose weights are that dtype; 0 = unsupported */
    int64_t hbm_bytes;
    double hbm_bw;                    /* bytes/s */
    double dispatch_s;                /* seconds each compute step pays to start (kernel launch, op
                                         dispatch); 0 by default */
    double act_elem_s[2];             /* seconds per output element of an activation step when it is
                                         bound by its arithmetic (CPU transcendental kernels):
                                         [0] GELU, [1] SiLU·gate (SwiGLU); 0 = priced by bytes only */
    double step_elem_s[SP_ELEM_COUNT]; /* seconds per element of each elementwise kernel (sp_hw_elem);
                                         a step takes the larger of their sum and its bytes' time;
                                         0 = that kernel priced by bytes only */
    double token_sync_s;              /* the runtime synchronises every chip after each generated
                                         token (a barrier; pipelines return the tokens to stage 0):
                                         > 0 prices it at this many seconds per chip beyond the first,
                                         and a decode step then runs its stages and micro-batches as
                                         a flow shop, like prefill; 0 = the generation schedule of
                                         sp_cost.h (no per-token sync) */
    double idle_wake_s;               /* a collective (send/recv included) whose first member slept
                                         on an idle core waits this long for the core to wake: added
                                         in full with a core per chip, divided by the chips per core
                                         when they share (another chip then runs on the waking core);
                                         0 = none.  wake_points > 0 replaces that rule: */
    int wake_points;                  /* chip.idle_wake_by_share: [chips per core >= 1, seconds] pairs,
                                         shares increasing; what each collective adds at that many
                                         chips running per core (sp_hw_curve between points, the end
                                         values beyond them); idle_wake_s is then ignored */
    double wake_share[SP_HW_EFF_POINTS];
    double wake_s[SP_HW_EFF_POINTS];
    int stretch_points;               /* chip.compute_stretch_by_share: [chips per core > 1, factor]
                                         pairs, shares increasing: a compute step of chips that
                                         time-share cores takes share × factor times as long as on a
                                         core of its own (cores switched between the chips at every
                                         collective lose their caches to each other; calibrate
                                         measures it); sp_hw_curve between points, the end values
                                         beyond them, 1 at one chip a core or without points */
    double stretch_share[SP_HW_EFF_POINTS];
    double stretch[SP_HW_EFF_POINTS];
    int fetch_points;                 /* chip.weight_fetch_s_by_working_set: [bytes > 0, seconds per
                                         weight byte >= 0] pairs, bytes increasing: what a matmul of
                                         2 or more rows pays per byte of its weights beyond its time
                                         with them in cache, when the chip's cores hold a working set
                                         of that many bytes (a CPU's BLAS packs the weights before it
                                         multiplies, and that read is as slow as the level of cache,
                                         or memory, the pass's weights live in; calibrate measures
                                         it); sp_hw_weight_fetch */
    double fetch_bytes[SP_HW_EFF_POINTS];
    double fetch_s[SP_HW_EFF_POINTS];
    int shared_cores;                 /* CPU chips (threads, ranks) of one node time-share this many
                                         cores: a compute step of n chips running at once takes
                                         max(1, n / shared_cores) times as long; 0 = not shared */
    int comm_shares_cores;            /* 1: the collective, send/recv and token_sync_s figures are
                                         those of chips each with a core, and time-sharing stretches
                                         them like a compute step (max(1, n / shared_cores)); 0: they
                                         are what n chips take as they are (needs shared_cores > 0) */
    /* topology */
    sp_topo_kind topo;
    int torus_dims[3];                /* torus: X, Y, Z of the full slice (chips = product) */
    double link_bw;                   /* torus: bytes/s one direction per link */
    int links_per_chip;               /* torus: 6 for a 3D torus */
    double hop_latency;               /* torus: seconds per collective step (one hop of a ring) */
    double coll_latency;              /* seconds every collective pays once, beyond its steps (launch
                                         and rendezvous of the group: a CPU executor's handoffs); 0 by
                                         default, either topology */
    /* torus: the slices a user can rent (sp_hw_slice_rentable).  No shapes
     * and no cuboid rule: any sub-cuboid of torus_dims. */
    int n_slice_shapes;
    int slice_shapes[SP_HW_SLICE_SHAPES][3];   /* offered shapes, any orientation */
    int slice_multiple;               /* and cuboids with every side a multiple of this ... */
    int slice_min_chips;              /* ... of at least this many chips (0: no cuboid rule) */
    int chips_per_node;               /* cluster: G */
    double intra_bw;                  /* cluster: bytes/s per chip inside a node (one direction) */
    double intra_latency;             /* cluster: seconds per collective step inside a node */
    double inter_bw;                  /* cluster: bytes/s per chip between nodes (one direction) */
    double inter_latency;             /* cluster: seconds per collective step between nodes */
    int max_chips;                    /* largest system described (0: unbounded) */
    /* host */
    int64_t host_bytes;
    double host_link_bw;              /* bytes/s, chip <-> host */
    /* efficiency knobs */
    int eff_points;                   /* matmul efficiency curve: points (local FLOPs, efficiency) */
    double eff_flops[SP_HW_EFF_POINTS];
    double eff_value[SP_HW_EFF_POINTS];
    int matmul_tile[3];               /* M, N, K granularity: a matmul dimension d runs at
                                         d / (ceil(d / tile) * tile) of the curve's efficiency; 0 = 1 */
    int rows_points[SP_DT_COUNT];     /* matmul rows, per weight dtype: points (M, the activation rows
                                         of a local matmul; fraction of the FLOPs curve's efficiency a
                                         matmul of M rows reaches); none: 1 for every M.  A CPU's
                                         small-M kernels (decode) run far below the rate of the same
                                         FLOPs at large M, and each weight dtype takes its own path */
    double rows_m[SP_DT_COUNT][SP_HW_EFF_POINTS];
    double rows_value[SP_DT_COUNT][SP_HW_EFF_POINTS];
    int rows_sizes[SP_DT_COUNT];      /* matmul rows by weight size, per weight dtype: classes (0: none,
                                         rows_* above apply), each a rows curve measured on weights of
                                         rows_w[c] elements (K·N, increasing); a matmul of K·N weight
                                         elements takes the two classes around K·N, each at its M,
                                         linear in log(K·N) between them (the end classes beyond).
                                         Large weights run few rows slower than small ones at the same
                                         FLOPs curve (sgemm's blocking: T = 16 at 2048x5632 reached 0.82
                                         of T = 16 at 512x512 here) */
    double rows_w[SP_DT_COUNT][SP_HW_ROWS_SIZES];
    int rows_w_points[SP_DT_COUNT][SP_HW_ROWS_SIZES];
    double rows_w_m[SP_DT_COUNT][SP_HW_ROWS_SIZES][SP_HW_EFF_POINTS];
    double rows_w_value[SP_DT_COUNT][SP_HW_ROWS_SIZES][SP_HW_EFF_POINTS];
    int logits_sizes;                 /* logits rows by weight size (efficiency.logits_rows_by_weights):
                                         classes as rows_sizes, for the logits step of an f32 table,
                                         each point the fraction of the f32 peak (not of the FLOPs
                                         curve) the kernel reached (0: none; the matmul's curves apply).  A CPU computes logits
                                         x · tableᵀ, a transposed operand the matmul points never
                                         time: OpenBLAS ran 8 × 128 · (512 × 128)ᵀ 3× slower than the
                                         same FLOPs untransposed, and 8 × 2048 · (5632 × 2048)ᵀ 1.4×
                                         faster (2026-11-24) */
    double logits_w[SP_HW_ROWS_SIZES];
    int logits_w_points[SP_HW_ROWS_SIZES];
    double logits_w_m[SP_HW_ROWS_SIZES][SP_HW_EFF_POINTS];
    double logits_w_value[SP_HW_ROWS_SIZES][SP_HW_EFF_POINTS];
    int mem_points;                   /* memory-bound steps: points (bytes moved, fraction of HBM
                                         bandwidth); none: hbm_bw_eff for every size */
    double mem_bytes[SP_HW_EFF_POINTS];
    double mem_value[SP_HW_EFF_POINTS];
    int ws_points;                    /* weight streams: points (weight bytes one pass of a chip's
                                         program reads, fraction of HBM bandwidth); when present a
                                         step that reads weights uses it at the pass's bytes instead
                                         of the memory curve at its own bytes (CPU caches) */
    double ws_bytes[SP_HW_EFF_POINTS];
    double ws_value[SP_HW_EFF_POINTS];
    int wsa_points;                   /* weight streams of a chip computing alone: points as ws_*; when
                                         present, chips share cores (shared_cores > 1) and a layout has
                                         one chip computing at once (1 chip; stages with 1 micro-batch),
                                         it replaces ws_* (CPU chips share the memory bandwidth: one
                                         streams faster than each of two at once) */
    double wsa_bytes[SP_HW_EFF_POINTS];
    double wsa_value[SP_HW_EFF_POINTS];
    int attn_points;                  /* attention: points (head width d_head, fraction of the peak
                                         its FLOPs run at); none: the matmul curve by FLOPs */
    double attn_dhead[SP_HW_EFF_POINTS];
    double attn_value[SP_HW_EFF_POINTS];
    double hbm_usable;                /* fraction of HBM usable for weights+KV+activations (default 0.9) */
    double hbm_bw_eff;                /* achieved fraction of HBM bandwidth (default 1.0) */
    double net_bw_eff;                /* achieved fraction of every network bandwidth (link_bw,
                                         intra_bw, inter_bw; default 1.0): one efficiency for all tiers */
    sp_overlap overlap;               /* default FULL */
    double overlap_fraction;          /* for SP_OVERLAP_FRACTION */
    double chip_cost_per_hour;        /* optional, for cost reports; 0 = unknown */
    sp_hw_calibration calibration;    /* provenance of fitted values (present = 0: none) */
} sp_hw;

void sp_hw_init(sp_hw *hw);
sp_status sp_hw_load_file(const char *path, unsigned flags, sp_hw *out, sp_error *err);
sp_status sp_hw_loads(const char *text, unsigned flags, sp_hw *out, sp_error *err);
/* NAME (bundled: data/hw/NAME.json) or a file path.  A ":uncalibrated"
 * suffix (a100-80g:uncalibrated) gives the profile with every calibrated
 * parameter back at its prior (sp_hw_uncalibrate). */
sp_status sp_hw_find(const char *name_or_path, sp_hw *out, sp_error *err);
sp_status sp_hw_validate(const sp_hw *hw, sp_error *err);

/* The fields a calibration may set, by their JSON path ("/chip/dispatch_s",
 * "/efficiency/matmul/2/1": the efficiency of the third curve point, ...). */
int sp_hw_param_count(void);
const char *sp_hw_param_path(int i);
int sp_hw_param_find(const char *path);              /* index, or -1 */
double *sp_hw_param(sp_hw *hw, int i);               /* the field */
/* Every calibrated parameter back to its prior; the calibration section is
 * dropped.  A profile without one is unchanged. */
void sp_hw_uncalibrate(sp_hw *hw);

/* A curve of n points (x increasing, values y) at v: piecewise-linear in
 * log(x) between points, clamped at the ends; `none` when n = 0. */
double sp_hw_curve(int n, const double *x, const double *y, double v, double none);
/* What each collective (send/recv included) waits for an idle core to wake
 * when `share` chips run per core (>= 1): chip.idle_wake_by_share at share
 * when given, else chip.idle_wake_s / share (0 in every datasheet profile). */
double sp_hw_idle_wake(const sp_hw *hw, double share);
/* The factor beyond `share` itself by which a compute step of chips running
 * `share` per core (>= 1) is slower: 1 at share <= 1 or without
 * chip.compute_stretch_by_share. */
double sp_hw_compute_stretch(const sp_hw *hw, double share);
/* Seconds a matmul of 2 or more rows whose weights take w bytes adds beyond
 * its cached time (the matmul curves: timed with its weights alone, in cache)
 * when its weights come from a working set of ws bytes per core:
 * w · max(0, F(ws) − F(w)) with F chip.weight_fetch_s_by_working_set
 * (sp_hw_curve); 0 without points. */
double sp_hw_weight_fetch(const sp_hw *hw, double w, double ws);
/* The rows factor of a matmul of m activation rows whose local weights
 * hold `weights` elements (K·N) in dtype dt: efficiency.matmul_rows_by_weights
 * when the profile has it for dt (the classes around weights, linear in
 * log(weights) between them), else efficiency.matmul_rows (1 without either).
 * Part of sp_hw_matmul_shape_eff. */
double sp_hw_rows_eff(const sp_hw *hw, sp_dtype dt, int64_t m, double weights);
/* The FLOP/s a matmul with weights of that dtype runs at before
 * efficiencies: f32's peak (bf16's when the chip has none) for f32 weights,
 * bf16's for every other (weight-only quantisation dequantises to bf16). */
double sp_hw_compute_peak(const sp_hw *hw, sp_dtype weights);
/* Matmul efficiency at a local problem of `flops` FLOPs: the efficiency
 * curve at flops; 1.0 with no curve. */
double sp_hw_matmul_eff(const sp_hw *hw, double flops);
/* ... and at a local shape (m, k) · (k, n) with weights of dtype dt:
 * sp_hw_matmul_eff × the tile utilisation of each dimension (matmul_tile)
 * × dt's rows curve at m. */
double sp_hw_matmul_shape_eff(const sp_hw *hw, sp_dtype dt, int64_t m, int64_t n, int64_t k);
/* The efficiency of a logits step of m rows over an f32 table of n · k
 * elements: efficiency.logits_rows_by_weights (a fraction of the f32 peak by
 * rows and table size, no FLOPs curve: the kernel was timed itself) × the
 * tile utilisation when the profile has it, else sp_hw_matmul_shape_eff. */
double sp_hw_logits_shape_eff(const sp_hw *hw, int64_t m, int64_t n, int64_t k);
/* Efficiency of an attention step of `flops` FLOPs at head width d_head:
 * the attention curve at d_head when the profile has one, else the matmul
 * curve at flops. */
double sp_hw_attention_eff(const sp_hw *hw, double flops, int64_t d_head);
/* Fraction of HBM bandwidth a step moving `bytes` achieves: the memory
 * curve at bytes, else hbm_bw_eff. */
double sp_hw_memory_eff(const sp_hw *hw, double bytes);
/* 1 if a torus slice of this shape (any orientation) can be rented: it fits
 * torus_dims and is one of the offered shapes or a cuboid by the rule; any
 * sub-cuboid when the profile lists neither.  0 on a cluster. */
int sp_hw_slice_rentable(const sp_hw *hw, const int shape[3]);

#ifdef __cplusplus
}
#endif
#endif
