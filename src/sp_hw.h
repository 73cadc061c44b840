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

/* How compute and communication overlap (cost model rule).
 *  NONE:     time = compute_or_memory + comm
 *  FULL:     time = max(compute_or_memory, comm)
 *  FRACTION: time = max(c, m) + (1 - f) * min(c, m)  with f = overlap_fraction */
typedef enum sp_overlap { SP_OVERLAP_NONE = 0, SP_OVERLAP_FULL = 1, SP_OVERLAP_FRACTION = 2, SP_OVERLAP_COUNT } sp_overlap;

#define SP_HW_EFF_POINTS 8
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

typedef struct sp_hw {
    char name[64];
    /* chip */
    double peak_flops[SP_DT_COUNT];   /* FLOP/s of a matmul whose weights are that dtype; 0 = unsupported */
    int64_t hbm_bytes;
    double hbm_bw;                    /* bytes/s */
    /* topology */
    sp_topo_kind topo;
    int torus_dims[3];                /* torus: X, Y, Z of the full slice (chips = product) */
    double link_bw;                   /* torus: bytes/s one direction per link */
    int links_per_chip;               /* torus: 6 for a 3D torus */
    double hop_latency;               /* torus: seconds per hop */
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
    double hbm_usable;                /* fraction of HBM usable for weights+KV+activations (default 0.9) */
    double hbm_bw_eff;                /* achieved fraction of HBM bandwidth (default 1.0) */
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

/* Matmul efficiency at a local problem of `flops` FLOPs: piecewise-linear in
 * log(flops) between curve points, clamped at the ends; 1.0 with no curve. */
double sp_hw_matmul_eff(const sp_hw *hw, double flops);

#ifdef __cplusplus
}
#endif
#endif
