/* hw.c: hardware descriptions (chip, topology, host, efficiency knobs). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include "spi_common.h"
#include "spi_json.h"
#include "sp_hw.h"

static const char *const topo_names[] = {"torus", "cluster"};
static_assert(SPI_ARRAY_LEN(topo_names) == SP_TOPO_COUNT, "one name per sp_topo_kind");

void sp_hw_init(sp_hw *hw)
{
    memset(hw, 0, sizeof *hw);
    hw->links_per_chip = 6;
    hw->hbm_usable = 0.9;
    hw->hbm_bw_eff = 1.0;
    hw->net_bw_eff = 1.0;
    hw->overlap = SP_OVERLAP_FULL;
}

double sp_hw_curve(int n, const double *x, const double *y, double v, double none)
{
    if (n <= 0) return none;
    if (n > SP_HW_EFF_POINTS) n = SP_HW_EFF_POINTS;
    if (!(v > x[0])) return y[0];
    if (v >= x[n - 1]) return y[n - 1];
    for (int i = 1; i < n; i++) {
        if (v <= x[i]) {
            /* linear in log(v) between the two points */
            double t = log(v / x[i - 1]) / log(x[i] / x[i - 1]);
            return y[i - 1] + t * (y[i] - y[i - 1]);
        }
    }
    return y[n - 1];
}

double sp_hw_idle_wake(const sp_hw *hw, double share)
{
    if (hw->wake_points > 0) return sp_hw_curve(hw->wake_points, hw->wake_share, hw->wake_s, share, 0.0);
    return hw->idle_wake_s > 0 ? hw->idle_wake_s / (share > 1 ? share : 1) : 0.0;
}

double sp_hw_compute_stretch(const sp_hw *hw, double share)
{
    if (!(share > 1) || hw->stretch_points <= 0) return 1.0;
    return sp_hw_curve(hw->stretch_points, hw->stretch_share, hw->stretch, share, 1.0);
}

double sp_hw_weight_fetch(const sp_hw *hw, double w, double ws)
{
    if (hw->fetch_points <= 0 || !(w > 0) || !(ws > w)) return 0.0;
    double d = sp_hw_curve(hw->fetch_points, hw->fetch_bytes, hw->fetch_s, ws, 0.0) -
               sp_hw_curve(hw->fetch_points, hw->fetch_bytes, hw->fetch_s, w, 0.0);
    return d > 0 ? w * d : 0.0;
}

double sp_hw_compute_peak(const sp_hw *hw, sp_dtype weights)
{
    /* weight-only quantisation dequantises to bf16 before the matmul */
    if (weights == SP_DT_F32) return hw->peak_flops[SP_DT_F32] > 0 ? hw->peak_flops[SP_DT_F32] : hw->peak_flops[SP_DT_BF16];
    return hw->peak_flops[SP_DT_BF16];
}

double sp_hw_matmul_eff(const sp_hw *hw, double flops)
{
    return hw ? sp_hw_curve(hw->eff_points, hw->eff_flops, hw->eff_value, flops, 1.0) : 1.0;
}

static double tile_util(int64_t d, int tile)
{
    if (tile <= 1 || d <= 0) return 1.0;
    int64_t padded = (d + tile - 1) / tile * tile;
    return (double)d / (double)padded;
}

/* A rows factor from nc weight-size classes (w[c] elements, a curve by M each): the two
 * classes around `weights` at m, linear in log(weights) between them. */
static double classes_eff(int nc, const double *w, const int *np, const double (*cm)[SP_HW_EFF_POINTS],
                          const double (*cv)[SP_HW_EFF_POINTS], int64_t m, double weights)
{
    if (nc > SP_HW_ROWS_SIZES) nc = SP_HW_ROWS_SIZES;
    int lo = 0, hi = 0;   /* the classes around weights (equal at and beyond the ends) */
    if (weights >= w[nc - 1]) lo = hi = nc - 1;
    else if (weights > w[0])
        for (hi = 1; hi < nc - 1 && weights > w[hi]; hi++) lo = hi;
    double a = sp_hw_curve(np[lo], cm[lo], cv[lo], (double)m, 1.0);
    if (hi == lo) return a;
    double b = sp_hw_curve(np[hi], cm[hi], cv[hi], (double)m, 1.0);
    double t = log(weights / w[lo]) / log(w[hi] / w[lo]);
    return a + t * (b - a);
}

double sp_hw_rows_eff(const sp_hw *hw, sp_dtype dt, int64_t m, double weights)
{
    if ((unsigned)dt >= SP_DT_COUNT) return 1.0;
    int nc = hw->rows_sizes[dt];
    if (nc <= 0) return sp_hw_curve(hw->rows_points[dt], hw->rows_m[dt], hw->rows_value[dt], (double)m, 1.0);
    return classes_eff(nc, hw->rows_w[dt], hw->rows_w_points[dt], hw->rows_w_m[dt], hw->rows_w_value[dt], m, weights);
}

static double tiles_util(const sp_hw *hw, int64_t m, int64_t n, int64_t k)
{
    return tile_util(m, hw->matmul_tile[0]) * tile_util(n, hw->matmul_tile[1]) * tile_util(k, hw->matmul_tile[2]);
}

double sp_hw_matmul_shape_eff(const sp_hw *hw, sp_dtype dt, int64_t m, int64_t n, int64_t k)
{
    double e = sp_hw_matmul_eff(hw, 2.0 * (double)m * (double)n * (double)k);
    if (!hw) return e;
    if ((unsigned)dt < SP_DT_COUNT) e *= sp_hw_rows_eff(hw, dt, m, (double)n * (double)k);
    return e * tiles_util(hw, m, n, k);
}

double sp_hw_logits_shape_eff(const sp_hw *hw, int64_t m, int64_t n, int64_t k)
{
    if (hw->logits_sizes <= 0) return sp_hw_matmul_shape_eff(hw, SP_DT_F32, m, n, k);
    return classes_eff(hw->logits_sizes, hw->logits_w, hw->logits_w_points, hw->logits_w_m, hw->logits_w_value, m,
                       (double)n * (double)k) * tiles_util(hw, m, n, k);
}

double sp_hw_attention_eff(const sp_hw *hw, double flops, int64_t d_head)
{
    if (hw->attn_points > 0) return sp_hw_curve(hw->attn_points, hw->attn_dhead, hw->attn_value, (double)d_head, 1.0);
    return sp_hw_matmul_eff(hw, flops);
}

double sp_hw_memory_eff(const sp_hw *hw, double bytes)
{
    return sp_hw_curve(hw->mem_points, hw->mem_bytes, hw->mem_value, bytes, hw->hbm_bw_eff > 0 ? hw->hbm_bw_eff : 1.0);
}

static void sort3(int a[3])
{
    for (int x = 0; x < 3; x++)
        for (int y = x + 1; y < 3; y++)
            if (a[y] < a[x]) { int v = a[x]; a[x] = a[y]; a[y] = v; }
}

int sp_hw_slice_rentable(const sp_hw *hw, const int shape[3])
{
    if (!hw || hw->topo != SP_TOPO_TORUS) return 0;
    int s[3] = {shape[0], shape[1], shape[2]}, t[3] = {hw->torus_dims[0], hw->torus_dims[1], hw->torus_dims[2]};
    sort3(s);
    sort3(t);
    for (int i = 0; i < 3; i++)
        if (s[i] < 1 || s[i] > t[i]) return 0;
    if (hw->n_slice_shapes == 0 && hw->slice_min_chips == 0) return 1;
    for (int i = 0; i < hw->n_slice_shapes && i < SP_HW_SLICE_SHAPES; i++) {
        int o[3] = {hw->slice_shapes[i][0], hw->slice_shapes[i][1], hw->slice_shapes[i][2]};
        sort3(o);
        if (o[0] == s[0] && o[1] == s[1] && o[2] == s[2]) return 1;
    }
    if (hw->slice_min_chips > 0 && hw->slice_multiple > 0 && (long long)s[0] * s[1] * s[2] >= hw->slice_min_chips &&
        s[0] % hw->slice_multiple == 0 && s[1] % hw->slice_multiple == 0 && s[2] % hw->slice_multiple == 0)
        return 1;
    return 0;
}

static sp_status hfail(const char *source, sp_error *err, const char *path, const char *text)
{
    return spi_error_set(err, SP_EINVAL, source, 0, 0, path, "%s", text);
}

/* Physical ranges: wide enough for any chip built or planned, narrow enough
 * that every time the cost model derives (bytes / bandwidth, FLOPs / peak,
 * with sizes up to 2^63) is a finite double and every capacity is an exact
 * int64.  Out of range is bad input (the message names field and range). */
#define HW_RATE_MIN 1e6          /* FLOP/s and bytes/s */
#define HW_RATE_MAX 1e18
#define HW_BYTES_MIN (INT64_C(1) << 20)
#define HW_BYTES_MAX (INT64_C(1) << 50)
#define HW_LATENCY_MAX 1.0       /* seconds per hop or collective step */
#define HW_FRACTION_MIN 0.01     /* efficiencies and usable fractions */

static sp_status range_fail(const char *src, sp_error *err, const char *path, double lo, double hi, const char *unit,
                            double v, int zero_ok)
{
    char t[200];
    snprintf(t, sizeof t, "must be %sin [%g, %g] %s, got %g", zero_ok ? "0 or " : "", lo, hi, unit, v);
    return hfail(src, err, path, t);
}

/* v in [lo, hi] (or exactly 0 when zero_ok); NaN is outside every range */
static int in_range(double v, double lo, double hi, int zero_ok) { return (zero_ok && v == 0) || (v >= lo && v <= hi); }

#define RANGE_(v, lo, hi, unit, zero_ok, path)                                               \
    do {                                                                                      \
        if (!in_range((double)(v), (lo), (hi), (zero_ok)))                                    \
            return range_fail(src, err, (path), (lo), (hi), (unit), (double)(v), (zero_ok)); \
    } while (0)

/* A curve of n points (x increasing and > 0, values in [HW_FRACTION_MIN, 1]) at path. */
static sp_status check_curve(const char *src, sp_error *err, const char *path, const char *xname, int n,
                             const double *x, const double *y)
{
    char t[96];
    if (n < 0 || n > SP_HW_EFF_POINTS) return hfail(src, err, path, "at most 8 points");
    for (int i = 0; i < n; i++) {
        snprintf(t, sizeof t, "%s/%d", path, i);
        char why[64];
        if (!(x[i] > 0) || !isfinite(x[i])) {
            snprintf(why, sizeof why, "%s must be > 0", xname);
            return hfail(src, err, t, why);
        }
        if (i > 0 && !(x[i] > x[i - 1])) {
            snprintf(why, sizeof why, "%s must increase from point to point", xname);
            return hfail(src, err, t, why);
        }
        if (!(y[i] >= HW_FRACTION_MIN && y[i] <= 1)) return hfail(src, err, t, "efficiency must be in [0.01, 1]");
    }
    return SP_OK;
}

/* Weight-size classes at path (matmul_rows_by_weights/<dtype>, logits_rows_by_weights):
 * weights > 0 and increasing, each a curve by M of at least one point. */
static sp_status check_classes(const char *src, sp_error *err, const char *path, int nc, const double *w, const int *np,
                               const double (*cm)[SP_HW_EFF_POINTS], const double (*cv)[SP_HW_EFF_POINTS])
{
    char t[128];
    for (int c = 0; c < nc; c++) {
        snprintf(t, sizeof t, "%s/%d/weights", path, c);
        if (!(w[c] > 0) || !isfinite(w[c]) || (c > 0 && !(w[c] > w[c - 1])))
            return hfail(src, err, t, "weight elements must be > 0 and increase from class to class");
        snprintf(t, sizeof t, "%s/%d/rows", path, c);
        if (np[c] < 1) return hfail(src, err, t, "at least 1 point");
        SP_CHECK(check_curve(src, err, t, "M", np[c], cm[c], cv[c]));
    }
    return SP_OK;
}

static sp_status hw_validate_src(const sp_hw *hw, const char *src, sp_error *err)
{
    char t[200];
    if (!hw) return spi_error_set(err, SP_EINVAL, src, 0, 0, "", "no hardware description");
    for (int i = 0; i < SP_DT_COUNT; i++) {
        snprintf(t, sizeof t, "/chip/peak_flops/%s", sp_dtype_name((sp_dtype)i));
        RANGE_(hw->peak_flops[i], HW_RATE_MIN, HW_RATE_MAX, "FLOP/s", i != SP_DT_BF16, t);
    }
    RANGE_(hw->hbm_bytes, (double)HW_BYTES_MIN, (double)HW_BYTES_MAX, "bytes", 0, "/chip/hbm_bytes");
    if (!(hw->dispatch_s >= 0 && hw->dispatch_s <= 1)) return hfail(src, err, "/chip/dispatch_s", "seconds in [0, 1]");
    RANGE_(hw->hbm_bw, HW_RATE_MIN, HW_RATE_MAX, "bytes/s", 0, "/chip/hbm_bw");
    if (hw->topo == SP_TOPO_TORUS) {
        long long chips = 1;
        for (int i = 0; i < 3; i++) {
            RANGE_(hw->torus_dims[i], 1, 4096, "chips", 0, "/topology/dims");
            chips *= hw->torus_dims[i];
        }
        if (chips > (1 << 24)) return hfail(src, err, "/topology/dims", "more than 2^24 chips");
        RANGE_(hw->link_bw, HW_RATE_MIN, HW_RATE_MAX, "bytes/s", 0, "/topology/link_bw");
        RANGE_(hw->links_per_chip, 1, 64, "links", 0, "/topology/links_per_chip");
        RANGE_(hw->hop_latency, 0, HW_LATENCY_MAX, "seconds", 0, "/topology/hop_latency");
        if (hw->n_slice_shapes < 0 || hw->n_slice_shapes > SP_HW_SLICE_SHAPES)
            return hfail(src, err, "/topology/slices/shapes", "at most 16 shapes");
        for (int i = 0; i < hw->n_slice_shapes; i++)
            for (int d = 0; d < 3; d++)
                if (hw->slice_shapes[i][d] < 1 || hw->slice_shapes[i][d] > 4096) {
                    snprintf(t, sizeof t, "/topology/slices/shapes/%d", i);
                    return hfail(src, err, t, "each side an integer in [1, 4096]");
                }
        if (hw->slice_min_chips < 0) return hfail(src, err, "/topology/slices/cuboid_min_chips", "must be >= 0");
        if (hw->slice_min_chips > 0 && hw->slice_multiple < 1)
            return hfail(src, err, "/topology/slices/cuboid_multiple", "must be >= 1 with cuboid_min_chips");
    } else if (hw->topo == SP_TOPO_CLUSTER) {
        RANGE_(hw->chips_per_node, 1, 1 << 16, "chips", 0, "/topology/chips_per_node");
        RANGE_(hw->intra_bw, HW_RATE_MIN, HW_RATE_MAX, "bytes/s", 0, "/topology/intra_node_bw");
        RANGE_(hw->inter_bw, HW_RATE_MIN, HW_RATE_MAX, "bytes/s", 0, "/topology/inter_node_bw");
        RANGE_(hw->intra_latency, 0, HW_LATENCY_MAX, "seconds", 0, "/topology/intra_node_latency");
        RANGE_(hw->inter_latency, 0, HW_LATENCY_MAX, "seconds", 0, "/topology/inter_node_latency");
        RANGE_(hw->max_chips, 0, 1 << 24, "chips (0: unbounded)", 0, "/topology/max_chips");
    } else {
        return hfail(src, err, "/topology/kind", "must be one of torus, cluster");
    }
    RANGE_(hw->coll_latency, 0, HW_LATENCY_MAX, "seconds", 0, "/topology/collective_latency");
    RANGE_(hw->host_bytes, 0, (double)HW_BYTES_MAX, "bytes", 0, "/host/memory_bytes");
    RANGE_(hw->host_link_bw, HW_RATE_MIN, HW_RATE_MAX, "bytes/s", 1, "/host/link_bw");
    SP_CHECK(check_curve(src, err, "/efficiency/matmul", "FLOPs", hw->eff_points, hw->eff_flops, hw->eff_value));
    for (int i = 0; i < 3; i++)
        if (hw->matmul_tile[i] < 0 || hw->matmul_tile[i] > 65536)
            return hfail(src, err, "/efficiency/matmul_tile", "each of M, N, K an integer in [0, 65536] (0: no tiling)");
    for (int d = 0; d < SP_DT_COUNT; d++) {
        snprintf(t, sizeof t, "/efficiency/matmul_rows/%s", sp_dtype_name((sp_dtype)d));
        SP_CHECK(check_curve(src, err, t, "M", hw->rows_points[d], hw->rows_m[d], hw->rows_value[d]));
        if (hw->rows_sizes[d] < 0 || hw->rows_sizes[d] > SP_HW_ROWS_SIZES) {
            snprintf(t, sizeof t, "/efficiency/matmul_rows_by_weights/%s", sp_dtype_name((sp_dtype)d));
            return hfail(src, err, t, "at most 6 weight sizes");
        }
        snprintf(t, sizeof t, "/efficiency/matmul_rows_by_weights/%s", sp_dtype_name((sp_dtype)d));
        SP_CHECK(check_classes(src, err, t, hw->rows_sizes[d], hw->rows_w[d], hw->rows_w_points[d], hw->rows_w_m[d], hw->rows_w_value[d]));
    }
    if (hw->logits_sizes < 0 || hw->logits_sizes > SP_HW_ROWS_SIZES)
        return hfail(src, err, "/efficiency/logits_rows_by_weights", "at most 6 weight sizes");
    SP_CHECK(check_classes(src, err, "/efficiency/logits_rows_by_weights", hw->logits_sizes, hw->logits_w, hw->logits_w_points,
                           hw->logits_w_m, hw->logits_w_value));
    SP_CHECK(check_curve(src, err, "/efficiency/memory", "bytes", hw->mem_points, hw->mem_bytes, hw->mem_value));
    SP_CHECK(check_curve(src, err, "/efficiency/weight_stream", "bytes", hw->ws_points, hw->ws_bytes, hw->ws_value));
    SP_CHECK(check_curve(src, err, "/efficiency/weight_stream_alone", "bytes", hw->wsa_points, hw->wsa_bytes,
                         hw->wsa_value));
    SP_CHECK(check_curve(src, err, "/efficiency/attention", "d_head", hw->attn_points, hw->attn_dhead, hw->attn_value));
    for (int i = 0; i < 2; i++)
        if (!(hw->act_elem_s[i] >= 0 && hw->act_elem_s[i] <= 1))
            return hfail(src, err, i ? "/chip/act_elem_s/swiglu" : "/chip/act_elem_s/gelu", "seconds in [0, 1]");
    for (int i = 0; i < SP_ELEM_COUNT; i++)
        if (!(hw->step_elem_s[i] >= 0 && hw->step_elem_s[i] <= 1)) {
            char et[64];
            snprintf(et, sizeof et, "/chip/step_elem_s/%s", sp_hw_elem_name((sp_hw_elem)i));
            return hfail(src, err, et, "seconds in [0, 1]");
        }
    if (!(hw->token_sync_s >= 0 && hw->token_sync_s <= 1)) return hfail(src, err, "/chip/token_sync_s", "seconds in [0, 1]");
    if (!(hw->idle_wake_s >= 0 && hw->idle_wake_s <= 1)) return hfail(src, err, "/chip/idle_wake_s", "seconds in [0, 1]");
    if (hw->wake_points < 0 || hw->wake_points > SP_HW_EFF_POINTS)
        return hfail(src, err, "/chip/idle_wake_by_share", "at most 8 points");
    for (int i = 0; i < hw->wake_points; i++) {
        char wt[64];
        snprintf(wt, sizeof wt, "/chip/idle_wake_by_share/%d", i);
        if (!(hw->wake_share[i] >= 1) || !isfinite(hw->wake_share[i]) || (i > 0 && !(hw->wake_share[i] > hw->wake_share[i - 1])))
            return hfail(src, err, wt, "chips per core must be >= 1 and increase from point to point");
        if (!(hw->wake_s[i] >= 0 && hw->wake_s[i] <= 1)) return hfail(src, err, wt, "seconds in [0, 1]");
    }
    if (hw->stretch_points < 0 || hw->stretch_points > SP_HW_EFF_POINTS)
        return hfail(src, err, "/chip/compute_stretch_by_share", "at most 8 points");
    for (int i = 0; i < hw->stretch_points; i++) {
        char wt[64];
        snprintf(wt, sizeof wt, "/chip/compute_stretch_by_share/%d", i);
        if (!(hw->stretch_share[i] > 1) || !isfinite(hw->stretch_share[i]) ||
            (i > 0 && !(hw->stretch_share[i] > hw->stretch_share[i - 1])))
            return hfail(src, err, wt, "chips per core must be > 1 and increase from point to point");
        if (!(hw->stretch[i] > 0 && hw->stretch[i] <= 16)) return hfail(src, err, wt, "factor in (0, 16]");
    }
    if (hw->fetch_points < 0 || hw->fetch_points > SP_HW_EFF_POINTS)
        return hfail(src, err, "/chip/weight_fetch_s_by_working_set", "at most 8 points");
    for (int i = 0; i < hw->fetch_points; i++) {
        char wt[64];
        snprintf(wt, sizeof wt, "/chip/weight_fetch_s_by_working_set/%d", i);
        if (!(hw->fetch_bytes[i] > 0) || !isfinite(hw->fetch_bytes[i]) ||
            (i > 0 && !(hw->fetch_bytes[i] > hw->fetch_bytes[i - 1])))
            return hfail(src, err, wt, "bytes must be > 0 and increase from point to point");
        if (!(hw->fetch_s[i] >= 0 && hw->fetch_s[i] <= 1e-6)) return hfail(src, err, wt, "seconds per byte in [0, 1e-6]");
    }
    if (hw->stretch_points && !hw->shared_cores)
        return hfail(src, err, "/chip/compute_stretch_by_share", "needs chip.shared_cores > 0 (the cores the chips share)");
    if (hw->shared_cores < 0 || hw->shared_cores > 65536)
        return hfail(src, err, "/chip/shared_cores", "an integer in [0, 65536] (0: chips do not share cores)");
    if (hw->comm_shares_cores != 0 && hw->comm_shares_cores != 1)
        return hfail(src, err, "/chip/comm_shares_cores", "true or false");
    if (hw->comm_shares_cores && !hw->shared_cores)
        return hfail(src, err, "/chip/comm_shares_cores", "true needs chip.shared_cores > 0 (the cores the chips share)");
    RANGE_(hw->hbm_usable, HW_FRACTION_MIN, 1, "(fraction)", 0, "/efficiency/hbm_usable");
    RANGE_(hw->hbm_bw_eff, HW_FRACTION_MIN, 1, "(fraction)", 0, "/efficiency/hbm_bw");
    RANGE_(hw->net_bw_eff, HW_FRACTION_MIN, 1, "(fraction)", 0, "/efficiency/network");
    if ((unsigned)hw->overlap >= SP_OVERLAP_COUNT)
        return hfail(src, err, "/efficiency/overlap", "must be \"full\", \"none\" or {\"fraction\": f}");
    if (hw->overlap == SP_OVERLAP_FRACTION && !(hw->overlap_fraction >= 0 && hw->overlap_fraction <= 1))
        return hfail(src, err, "/efficiency/overlap/fraction", "must be in [0, 1]");
    RANGE_(hw->chip_cost_per_hour, 0, 1e6, "per chip-hour", 0, "/cost_per_chip_hour");
    if (!memchr(hw->name, '\0', sizeof hw->name)) return hfail(src, err, "/name", "not terminated");
    return SP_OK;
}
#undef RANGE_

sp_status sp_hw_validate(const sp_hw *hw, sp_error *err) { return hw_validate_src(hw, NULL, err); }

/* ---- JSON format ---- */
static const char *const top_keys[] = {"name", "chip", "topology", "host", "efficiency", "cost_per_chip_hour",
                                       "calibration", "measured", NULL};   /* measured: not read (calibrate --backend's points) */
static const char *const chip_keys[] = {"peak_flops", "hbm_bytes", "hbm_bw", "dispatch_s", "shared_cores",
                                        "comm_shares_cores", "act_elem_s", "step_elem_s", "token_sync_s", "idle_wake_s", "idle_wake_by_share", "compute_stretch_by_share",
                                        "weight_fetch_s_by_working_set", NULL};
static const char *const act_keys[] = {"gelu", "swiglu", NULL};
static const char *const elem_keys[SP_ELEM_COUNT + 1] = {"norm_stats", "norm_apply", "add", "copy", "rope", "embed", NULL};

const char *sp_hw_elem_name(sp_hw_elem e) { return (unsigned)e < SP_ELEM_COUNT ? elem_keys[e] : "?"; }
static const char *const torus_keys[] = {"kind", "dims", "link_bw", "links_per_chip", "hop_latency", "slices",
                                         "collective_latency", NULL};
static const char *const slice_keys[] = {"shapes", "cuboid_multiple", "cuboid_min_chips", NULL};
static const char *const cluster_keys[] = {"kind", "chips_per_node", "intra_node_bw", "intra_node_latency", "collective_latency",
                                           "inter_node_bw", "inter_node_latency", "max_chips", NULL};
static const char *const host_keys[] = {"memory_bytes", "link_bw", NULL};
static const char *const eff_keys[] = {"matmul", "matmul_tile", "matmul_rows", "matmul_rows_by_weights", "logits_rows_by_weights", "memory", "weight_stream",
                                       "weight_stream_alone", "attention",
                                       "hbm_usable", "hbm_bw", "network", "overlap", NULL};
static const char *const dtype_keys[] = {"f32", "bf16", "f16", "int8", "fp8", NULL};
static const char *const rows_class_keys[] = {"weights", "rows", NULL};

#define C_(call) SP_CHECK(call)

/* 1..SP_HW_EFF_POINTS pairs [x, y] of arr, the array at `prefix`, into x, y
 * and *n_out; `head` names a point in the count's error ("FLOPs,
 * efficiency"), `pair` a pair in an element's ("[FLOPs > 0, efficiency in
 * (0, 1]]").  Ranges are hw_validate_src's. */
static sp_status read_points(const spi_jctx *c, const char *prefix, const json_t *arr, const char *head,
                             const char *pair, int *n_out, double *x, double *y)
{
    size_t n = json_array_size(arr);
    const char *key = strrchr(prefix, '/') + 1;
    char parent[64];
    snprintf(parent, sizeof parent, "%.*s", (int)(key - 1 - prefix), prefix);
    if (n < 1 || n > SP_HW_EFF_POINTS)
        return spi_json_fail(c, SP_EINVAL, parent, key, "must hold 1 to %d points [%s], got %zu", SP_HW_EFF_POINTS,
                             head, n);
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(arr, i);
        char k[24];   /* a size_t's digits */
        snprintf(k, sizeof k, "%zu", i);
        if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_number(json_array_get(p, 0)) ||
            !json_is_number(json_array_get(p, 1)))
            return spi_json_fail(c, SP_EINVAL, prefix, k, "must be a pair %s", pair);
        x[i] = json_number_value(json_array_get(p, 0));
        y[i] = json_number_value(json_array_get(p, 1));
    }
    *n_out = (int)n;
    return SP_OK;
}

/* chip.<key>: pairs [chips per core, value] (read_points; absent: *n_out untouched). */
static sp_status read_share_pairs(const spi_jctx *c, const json_t *chip, const char *key, const char *what,
                                  const char *pair, double *x, double *y, int *n_out)
{
    json_t *a;
    SP_CHECK(spi_json_get_child(c, "/chip", chip, key, 0, JSON_ARRAY, &a));
    if (!a) return SP_OK;
    char at[64], head[64];
    snprintf(at, sizeof at, "/chip/%s", key);
    snprintf(head, sizeof head, "chips per core, %s", what);
    return read_points(c, at, a, head, pair, n_out, x, y);
}

static sp_status read_chip(const spi_jctx *c, const json_t *chip, sp_hw *hw)
{
    json_t *pf;
    C_(spi_json_check_keys(c, "/chip", chip, chip_keys));
    C_(spi_json_get_child(c, "/chip", chip, "peak_flops", 1, JSON_OBJECT, &pf));
    C_(spi_json_check_keys(c, "/chip/peak_flops", pf, dtype_keys));
    for (int i = 0; i < SP_DT_COUNT; i++)
        C_(spi_json_get_num(c, "/chip/peak_flops", pf, sp_dtype_name((sp_dtype)i), i == SP_DT_BF16, i == SP_DT_BF16, 0, HUGE_VAL,
                            "FLOP/s; bf16 > 0, others >= 0", &hw->peak_flops[i]));
    C_(spi_json_get_int(c, "/chip", chip, "hbm_bytes", 1, 1, INT64_MAX, "bytes > 0", &hw->hbm_bytes));
    C_(spi_json_get_num(c, "/chip", chip, "hbm_bw", 1, 1, 0, HUGE_VAL, "bytes/s > 0", &hw->hbm_bw));
    C_(spi_json_get_num(c, "/chip", chip, "dispatch_s", 0, 0, 0, 1, "seconds in [0, 1] per compute step",
                        &hw->dispatch_s));
    int64_t sc = 0;
    C_(spi_json_get_int(c, "/chip", chip, "shared_cores", 0, 0, 65536, "integer in [0, 65536]; 0: not shared", &sc));
    hw->shared_cores = (int)sc;
    C_(spi_json_get_bool(c, "/chip", chip, "comm_shares_cores", 0, &hw->comm_shares_cores));
    C_(spi_json_get_num(c, "/chip", chip, "token_sync_s", 0, 0, 0, 1, "seconds in [0, 1] per generated token",
                        &hw->token_sync_s));
    C_(spi_json_get_num(c, "/chip", chip, "idle_wake_s", 0, 0, 0, 1, "seconds in [0, 1] per collective",
                        &hw->idle_wake_s));
    C_(read_share_pairs(c, chip, "idle_wake_by_share", "seconds", "[chips per core >= 1, seconds in [0, 1]]",
                        hw->wake_share, hw->wake_s, &hw->wake_points));
    C_(read_share_pairs(c, chip, "compute_stretch_by_share", "factor", "[chips per core > 1, factor in (0, 16]]",
                        hw->stretch_share, hw->stretch, &hw->stretch_points));
    json_t *wf;
    C_(spi_json_get_child(c, "/chip", chip, "weight_fetch_s_by_working_set", 0, JSON_ARRAY, &wf));
    if (wf)
        C_(read_points(c, "/chip/weight_fetch_s_by_working_set", wf, "working-set bytes, seconds per weight byte",
                       "[bytes > 0, seconds per byte in [0, 1e-6]]", &hw->fetch_points, hw->fetch_bytes, hw->fetch_s));
    json_t *ae;
    C_(spi_json_get_child(c, "/chip", chip, "act_elem_s", 0, JSON_OBJECT, &ae));
    if (ae) {
        C_(spi_json_check_keys(c, "/chip/act_elem_s", ae, act_keys));
        for (int i = 0; i < 2; i++)
            C_(spi_json_get_num(c, "/chip/act_elem_s", ae, act_keys[i], 0, 0, 0, 1, "seconds in [0, 1] per element",
                                &hw->act_elem_s[i]));
    }
    json_t *se;
    C_(spi_json_get_child(c, "/chip", chip, "step_elem_s", 0, JSON_OBJECT, &se));
    if (se) {
        C_(spi_json_check_keys(c, "/chip/step_elem_s", se, elem_keys));
        for (int i = 0; i < SP_ELEM_COUNT; i++)
            C_(spi_json_get_num(c, "/chip/step_elem_s", se, elem_keys[i], 0, 0, 0, 1, "seconds in [0, 1] per element",
                                &hw->step_elem_s[i]));
    }
    return SP_OK;
}

/* An array of integer triples, each side in [1, 4096]. */
static sp_status read_slices(const spi_jctx *c, const json_t *sl, sp_hw *hw)
{
    json_t *shapes;
    C_(spi_json_check_keys(c, "/topology/slices", sl, slice_keys));
    C_(spi_json_get_child(c, "/topology/slices", sl, "shapes", 0, JSON_ARRAY, &shapes));
    if (shapes) {
        size_t n = json_array_size(shapes);
        if (n > SP_HW_SLICE_SHAPES)
            return spi_json_fail(c, SP_EINVAL, "/topology/slices", "shapes", "at most %d shapes, got %zu",
                                 SP_HW_SLICE_SHAPES, n);
        for (size_t i = 0; i < n; i++) {
            json_t *a = json_array_get(shapes, i);
            char key[8];
            snprintf(key, sizeof key, "%zu", i);
            if (!json_is_array(a) || json_array_size(a) != 3)
                return spi_json_fail(c, SP_EINVAL, "/topology/slices/shapes", key, "must be [X, Y, Z]");
            for (int d = 0; d < 3; d++) {
                json_t *v = json_array_get(a, (size_t)d);
                if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 4096)
                    return spi_json_fail(c, SP_EINVAL, "/topology/slices/shapes", key,
                                         "must be [X, Y, Z], each an integer in [1, 4096]");
                hw->slice_shapes[i][d] = (int)json_integer_value(v);
            }
        }
        hw->n_slice_shapes = (int)n;
    }
    int64_t mul = 0, mn = 0;
    C_(spi_json_get_int(c, "/topology/slices", sl, "cuboid_multiple", 0, 1, 4096, "integer in [1, 4096]", &mul));
    C_(spi_json_get_int(c, "/topology/slices", sl, "cuboid_min_chips", 0, 1, 1 << 24, "integer in [1, 2^24]", &mn));
    if ((mul > 0) != (mn > 0))
        return spi_json_fail(c, SP_EINVAL, "/topology/slices", mul > 0 ? "cuboid_min_chips" : "cuboid_multiple",
                             "cuboid_multiple and cuboid_min_chips go together");
    hw->slice_multiple = (int)mul;
    hw->slice_min_chips = (int)mn;
    return SP_OK;
}

/* An efficiency curve: 1..8 points [x > 0 increasing, efficiency in (0, 1]]
 * (checked in full by validation). */
static sp_status read_curve(const spi_jctx *c, const char *prefix, const json_t *arr, const char *xname, int *n_out,
                            double *x, double *y)
{
    char head[64], pair[96];
    snprintf(head, sizeof head, "%s, efficiency", xname);
    snprintf(pair, sizeof pair, "[%s > 0, efficiency in (0, 1]]", xname);
    return read_points(c, prefix, arr, head, pair, n_out, x, y);
}

/* An array at path of 1 to SP_HW_ROWS_SIZES weight-size classes {weights, rows}. */
static sp_status read_classes(const spi_jctx *c, const char *path, const json_t *cl, int *nc, double *w, int *np,
                              double (*cm)[SP_HW_EFF_POINTS], double (*cv)[SP_HW_EFF_POINTS])
{
    const char *key = strrchr(path, '/') + 1;
    char parent[96];
    snprintf(parent, sizeof parent, "%.*s", (int)(key - 1 - path), path);
    size_t n = json_array_size(cl);
    if (n < 1 || n > SP_HW_ROWS_SIZES)
        return spi_json_fail(c, SP_EINVAL, parent, key, "must hold 1 to %d weight sizes, got %zu", SP_HW_ROWS_SIZES, n);
    for (size_t i = 0; i < n; i++) {
        char cp[128], rp[144];
        json_t *o = json_array_get(cl, i), *rv;
        snprintf(cp, sizeof cp, "%s/%zu", path, i);
        if (!json_is_object(o)) return spi_json_fail(c, SP_EINVAL, path, cp + strlen(path) + 1, "must be an object {weights, rows}");
        SP_CHECK(spi_json_check_keys(c, cp, o, rows_class_keys));
        SP_CHECK(spi_json_get_num(c, cp, o, "weights", 1, 0, 1, 1e18, "weight elements K·N > 0", &w[i]));
        SP_CHECK(spi_json_get_child(c, cp, o, "rows", 1, JSON_ARRAY, &rv));
        snprintf(rp, sizeof rp, "%s/rows", cp);
        SP_CHECK(read_curve(c, rp, rv, "M", &np[i], cm[i], cv[i]));
    }
    *nc = (int)n;
    return SP_OK;
}

static sp_status read_topology(const spi_jctx *c, const json_t *t, sp_hw *hw)
{
    int kind = 0;
    C_(spi_json_get_enum(c, "/topology", t, "kind", 1, topo_names, SP_TOPO_COUNT, &kind));
    hw->topo = (sp_topo_kind)kind;
    if (hw->topo == SP_TOPO_TORUS) {
        json_t *dims;
        C_(spi_json_check_keys(c, "/topology", t, torus_keys));
        C_(spi_json_get_child(c, "/topology", t, "dims", 1, JSON_ARRAY, &dims));
        if (json_array_size(dims) != 3)
            return spi_json_fail(c, SP_EINVAL, "/topology", "dims", "must be an array of 3 integers [X, Y, Z], got %zu",
                                 json_array_size(dims));
        for (int i = 0; i < 3; i++) {
            json_t *d = json_array_get(dims, (size_t)i);
            if (!json_is_integer(d) || json_integer_value(d) <= 0 || json_integer_value(d) > 4096)
                return spi_json_fail(c, SP_EINVAL, "/topology/dims", i == 0 ? "0" : i == 1 ? "1" : "2",
                                     "must be an integer in [1, 4096]");
            hw->torus_dims[i] = (int)json_integer_value(d);
        }
        C_(spi_json_get_num(c, "/topology", t, "link_bw", 1, 1, 0, HUGE_VAL, "bytes/s > 0, one direction per link",
                            &hw->link_bw));
        int64_t links = hw->links_per_chip;
        C_(spi_json_get_int(c, "/topology", t, "links_per_chip", 0, 1, 64, "integer in [1, 64]", &links));
        hw->links_per_chip = (int)links;
        C_(spi_json_get_num(c, "/topology", t, "hop_latency", 1, 0, 0, 1, "seconds >= 0", &hw->hop_latency));
        json_t *sl;
        C_(spi_json_get_child(c, "/topology", t, "slices", 0, JSON_OBJECT, &sl));
        if (sl) C_(read_slices(c, sl, hw));
    } else {
        C_(spi_json_check_keys(c, "/topology", t, cluster_keys));
        int64_t g = 0, mx = 0;
        C_(spi_json_get_int(c, "/topology", t, "chips_per_node", 1, 1, 1 << 16, "integer > 0", &g));
        hw->chips_per_node = (int)g;
        C_(spi_json_get_num(c, "/topology", t, "intra_node_bw", 1, 1, 0, HUGE_VAL,
                            "bytes/s > 0 per chip, one direction", &hw->intra_bw));
        C_(spi_json_get_num(c, "/topology", t, "intra_node_latency", 1, 0, 0, 1, "seconds >= 0",
                            &hw->intra_latency));
        C_(spi_json_get_num(c, "/topology", t, "inter_node_bw", 1, 1, 0, HUGE_VAL,
                            "bytes/s > 0 per chip, one direction", &hw->inter_bw));
        C_(spi_json_get_num(c, "/topology", t, "inter_node_latency", 1, 0, 0, 1, "seconds >= 0",
                            &hw->inter_latency));
        C_(spi_json_get_int(c, "/topology", t, "max_chips", 0, 0, 1 << 24, "integer >= 0; 0: unbounded", &mx));
        hw->max_chips = (int)mx;
    }
    C_(spi_json_get_num(c, "/topology", t, "collective_latency", 0, 0, 0, 1, "seconds >= 0", &hw->coll_latency));
    return SP_OK;
}

static sp_status read_efficiency(const spi_jctx *c, const json_t *e, sp_hw *hw)
{
    json_t *mm;
    C_(spi_json_check_keys(c, "/efficiency", e, eff_keys));
    C_(spi_json_get_child(c, "/efficiency", e, "matmul", 0, JSON_ARRAY, &mm));
    if (mm) C_(read_curve(c, "/efficiency/matmul", mm, "FLOPs", &hw->eff_points, hw->eff_flops, hw->eff_value));
    C_(spi_json_get_child(c, "/efficiency", e, "matmul_rows", 0, JSON_OBJECT, &mm));
    if (mm) {
        C_(spi_json_check_keys(c, "/efficiency/matmul_rows", mm, dtype_keys));
        for (int d = 0; d < SP_DT_COUNT; d++) {
            char path[64];
            json_t *cv;
            snprintf(path, sizeof path, "/efficiency/matmul_rows/%s", sp_dtype_name((sp_dtype)d));
            C_(spi_json_get_child(c, "/efficiency/matmul_rows", mm, sp_dtype_name((sp_dtype)d), 0, JSON_ARRAY, &cv));
            if (cv) C_(read_curve(c, path, cv, "M", &hw->rows_points[d], hw->rows_m[d], hw->rows_value[d]));
        }
    }
    C_(spi_json_get_child(c, "/efficiency", e, "matmul_rows_by_weights", 0, JSON_OBJECT, &mm));
    if (mm) {
        C_(spi_json_check_keys(c, "/efficiency/matmul_rows_by_weights", mm, dtype_keys));
        for (int d = 0; d < SP_DT_COUNT; d++) {
            char path[96];
            json_t *cl;
            const char *dn = sp_dtype_name((sp_dtype)d);
            snprintf(path, sizeof path, "/efficiency/matmul_rows_by_weights/%s", dn);
            C_(spi_json_get_child(c, "/efficiency/matmul_rows_by_weights", mm, dn, 0, JSON_ARRAY, &cl));
            if (cl)
                C_(read_classes(c, path, cl, &hw->rows_sizes[d], hw->rows_w[d], hw->rows_w_points[d], hw->rows_w_m[d],
                                hw->rows_w_value[d]));
        }
    }
    C_(spi_json_get_child(c, "/efficiency", e, "logits_rows_by_weights", 0, JSON_ARRAY, &mm));
    if (mm)
        C_(read_classes(c, "/efficiency/logits_rows_by_weights", mm, &hw->logits_sizes, hw->logits_w, hw->logits_w_points,
                        hw->logits_w_m, hw->logits_w_value));
    C_(spi_json_get_child(c, "/efficiency", e, "memory", 0, JSON_ARRAY, &mm));
    if (mm) C_(read_curve(c, "/efficiency/memory", mm, "bytes", &hw->mem_points, hw->mem_bytes, hw->mem_value));
    C_(spi_json_get_child(c, "/efficiency", e, "weight_stream", 0, JSON_ARRAY, &mm));
    if (mm) C_(read_curve(c, "/efficiency/weight_stream", mm, "bytes", &hw->ws_points, hw->ws_bytes, hw->ws_value));
    C_(spi_json_get_child(c, "/efficiency", e, "weight_stream_alone", 0, JSON_ARRAY, &mm));
    if (mm)
        C_(read_curve(c, "/efficiency/weight_stream_alone", mm, "bytes", &hw->wsa_points, hw->wsa_bytes, hw->wsa_value));
    C_(spi_json_get_child(c, "/efficiency", e, "attention", 0, JSON_ARRAY, &mm));
    if (mm) C_(read_curve(c, "/efficiency/attention", mm, "d_head", &hw->attn_points, hw->attn_dhead, hw->attn_value));
    C_(spi_json_get_child(c, "/efficiency", e, "matmul_tile", 0, JSON_ARRAY, &mm));
    if (mm) {
        if (json_array_size(mm) != 3)
            return spi_json_fail(c, SP_EINVAL, "/efficiency", "matmul_tile", "must be [M, N, K]");
        for (int d = 0; d < 3; d++) {
            json_t *v = json_array_get(mm, (size_t)d);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 65536)
                return spi_json_fail(c, SP_EINVAL, "/efficiency/matmul_tile", d == 0 ? "0" : d == 1 ? "1" : "2",
                                     "must be an integer in [0, 65536] (0: no tiling)");
            hw->matmul_tile[d] = (int)json_integer_value(v);
        }
    }
    C_(spi_json_get_num(c, "/efficiency", e, "hbm_usable", 0, 1, 0, 1, "fraction in (0, 1]", &hw->hbm_usable));
    C_(spi_json_get_num(c, "/efficiency", e, "hbm_bw", 0, 1, 0, 1, "fraction in (0, 1]", &hw->hbm_bw_eff));
    C_(spi_json_get_num(c, "/efficiency", e, "network", 0, 1, 0, 1, "fraction in (0, 1]", &hw->net_bw_eff));
    json_t *ov = json_object_get(e, "overlap");
    if (ov && json_is_string(ov)) {
        if (!strcmp(json_string_value(ov), "full")) hw->overlap = SP_OVERLAP_FULL;
        else if (!strcmp(json_string_value(ov), "none")) hw->overlap = SP_OVERLAP_NONE;
        else ov = json_null(); /* falls through to the error below */
    } else if (ov && json_is_object(ov)) {
        static const char *const fk[] = {"fraction", NULL};
        C_(spi_json_check_keys(c, "/efficiency/overlap", ov, fk));
        C_(spi_json_get_num(c, "/efficiency/overlap", ov, "fraction", 1, 0, 0, 1, "fraction in [0, 1]",
                            &hw->overlap_fraction));
        hw->overlap = SP_OVERLAP_FRACTION;
    }
    if (ov && !json_is_string(ov) && !json_is_object(ov))
        return spi_json_fail(c, SP_EINVAL, "/efficiency", "overlap", "must be \"full\", \"none\" or {\"fraction\": f}");
    return SP_OK;
}

static sp_status hw_from_json(const char *source, const json_t *r, sp_hw *out, sp_error *err)
{
    spi_jctx c = {source, err};
    sp_hw hw;
    json_t *chip, *topo, *host, *eff;
    sp_hw_init(&hw);
    C_(spi_json_expect_object(&c, "", r));
    C_(spi_json_check_keys(&c, "", r, top_keys));
    C_(spi_json_get_str(&c, "", r, "name", 1, hw.name, sizeof hw.name));
    C_(spi_json_get_child(&c, "", r, "chip", 1, JSON_OBJECT, &chip));
    C_(read_chip(&c, chip, &hw));
    C_(spi_json_get_child(&c, "", r, "topology", 1, JSON_OBJECT, &topo));
    C_(read_topology(&c, topo, &hw));
    C_(spi_json_get_child(&c, "", r, "host", 0, JSON_OBJECT, &host));
    if (host) {
        C_(spi_json_check_keys(&c, "/host", host, host_keys));
        C_(spi_json_get_int(&c, "/host", host, "memory_bytes", 0, 0, INT64_MAX, "bytes >= 0", &hw.host_bytes));
        C_(spi_json_get_num(&c, "/host", host, "link_bw", 0, 0, 0, HUGE_VAL, "bytes/s >= 0", &hw.host_link_bw));
    }
    C_(spi_json_get_child(&c, "", r, "efficiency", 0, JSON_OBJECT, &eff));
    if (eff) C_(read_efficiency(&c, eff, &hw));
    C_(spi_json_get_num(&c, "", r, "cost_per_chip_hour", 0, 0, 0, HUGE_VAL, "dollars >= 0", &hw.chip_cost_per_hour));
    json_t *cal = json_object_get(r, "calibration");
    if (cal) C_(spi_hw_read_calibration(&c, cal, &hw));
    C_(hw_validate_src(&hw, source, err));
    *out = hw;
    return SP_OK;
}

sp_status sp_hw_load_file(const char *path, unsigned flags, sp_hw *out, sp_error *err)
{
    json_t *root;
    (void)flags;
    if (!out) return spi_fail(SP_EINVAL, "sp_hw_load_file: NULL output");
    C_(spi_json_load_file(path, &root, err));
    sp_status s = hw_from_json(path, root, out, err);
    json_decref(root);
    return s;
}

sp_status sp_hw_loads(const char *text, unsigned flags, sp_hw *out, sp_error *err)
{
    json_t *root;
    (void)flags;
    if (!out) return spi_fail(SP_EINVAL, "sp_hw_loads: NULL output");
    C_(spi_json_loads(text, "<string>", &root, err));
    sp_status s = hw_from_json("<string>", root, out, err);
    json_decref(root);
    return s;
}

static sp_status hw_find(const char *name_or_path, sp_hw *out, sp_error *err);

sp_status sp_hw_find(const char *name_or_path, sp_hw *out, sp_error *err)
{
    static const char suffix[] = ":uncalibrated";
    size_t n = name_or_path ? strlen(name_or_path) : 0, ns = sizeof suffix - 1;
    if (n > ns && !strcmp(name_or_path + n - ns, suffix)) {
        char base[1024];
        if (n - ns >= sizeof base) return spi_error_set(err, SP_EINVAL, "", 0, 0, "", "hardware name too long");
        memcpy(base, name_or_path, n - ns);
        base[n - ns] = '\0';
        SP_CHECK(hw_find(base, out, err));
        sp_hw_uncalibrate(out);
        return SP_OK;
    }
    return hw_find(name_or_path, out, err);
}

static sp_status hw_find(const char *name_or_path, sp_hw *out, sp_error *err)
{
    struct stat st;
    if (!name_or_path || !name_or_path[0])
        return spi_error_set(err, SP_EINVAL, "", 0, 0, "", "no hardware name given");
    if (stat(name_or_path, &st) == 0 && S_ISREG(st.st_mode)) return sp_hw_load_file(name_or_path, 0, out, err);
    char rel[300], path[1024];
    if (strchr(name_or_path, '/') || snprintf(rel, sizeof rel, "hw/%s.json", name_or_path) >= (int)sizeof rel)
        return spi_error_set(err, SP_EIO, name_or_path, 0, 0, "", "no such file");
    if (sp_data_path(rel, path, sizeof path) != SP_OK)
        return spi_error_set(err, SP_EIO, name_or_path, 0, 0, "",
                             "no such file, and no bundled hardware of that name (see 'shardplan hw')");
    return sp_hw_load_file(path, 0, out, err);
}

/* A curve as [[x, efficiency], ...] under key; nothing when it has no points. */
static void curve_json(json_t *e, const char *key, int n, const double *x, const double *y)
{
    if (n <= 0) return;
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_pack("[ff]", x[i], y[i]));
    json_object_set_new(e, key, a);
}

static json_t *classes_json(int nc, const double *w, const int *np, const double (*cm)[SP_HW_EFF_POINTS],
                            const double (*cv)[SP_HW_EFF_POINTS])
{
    json_t *cl = json_array();
    for (int c = 0; c < nc; c++) {
        json_t *o = json_pack("{s:f}", "weights", w[c]);
        curve_json(o, "rows", np[c], cm[c], cv[c]);
        json_array_append_new(cl, o);
    }
    return cl;
}

json_t *spi_hw_to_json(const sp_hw *hw)
{
    json_t *j = json_object(), *chip = json_object(), *pf = json_object(), *t = json_object();
    json_object_set_new(j, "name", json_string(hw->name));
    for (int i = 0; i < SP_DT_COUNT; i++)
        if (hw->peak_flops[i] > 0) json_object_set_new(pf, sp_dtype_name((sp_dtype)i), json_real(hw->peak_flops[i]));
    json_object_set_new(chip, "peak_flops", pf);
    json_object_set_new(chip, "hbm_bytes", json_integer(hw->hbm_bytes));
    json_object_set_new(chip, "hbm_bw", json_real(hw->hbm_bw));
    json_object_set_new(chip, "dispatch_s", json_real(hw->dispatch_s));
    if (hw->shared_cores) json_object_set_new(chip, "shared_cores", json_integer(hw->shared_cores));
    if (hw->comm_shares_cores) json_object_set_new(chip, "comm_shares_cores", json_true());
    if (hw->act_elem_s[0] > 0 || hw->act_elem_s[1] > 0)
        json_object_set_new(chip, "act_elem_s", json_pack("{s:f,s:f}", "gelu", hw->act_elem_s[0], "swiglu",
                                                          hw->act_elem_s[1]));
    int any_elem = 0;
    for (int i = 0; i < SP_ELEM_COUNT; i++) any_elem |= hw->step_elem_s[i] > 0;
    if (any_elem) {
        json_t *se = json_object();
        for (int i = 0; i < SP_ELEM_COUNT; i++) json_object_set_new(se, elem_keys[i], json_real(hw->step_elem_s[i]));
        json_object_set_new(chip, "step_elem_s", se);
    }
    if (hw->token_sync_s > 0) json_object_set_new(chip, "token_sync_s", json_real(hw->token_sync_s));
    if (hw->idle_wake_s > 0) json_object_set_new(chip, "idle_wake_s", json_real(hw->idle_wake_s));
    if (hw->wake_points > 0) {
        json_t *a = json_array();
        for (int i = 0; i < hw->wake_points; i++) json_array_append_new(a, json_pack("[ff]", hw->wake_share[i], hw->wake_s[i]));
        json_object_set_new(chip, "idle_wake_by_share", a);
    }
    if (hw->stretch_points > 0) {
        json_t *a = json_array();
        for (int i = 0; i < hw->stretch_points; i++)
            json_array_append_new(a, json_pack("[ff]", hw->stretch_share[i], hw->stretch[i]));
        json_object_set_new(chip, "compute_stretch_by_share", a);
    }
    if (hw->fetch_points > 0) {
        json_t *a = json_array();
        for (int i = 0; i < hw->fetch_points; i++)
            json_array_append_new(a, json_pack("[ff]", hw->fetch_bytes[i], hw->fetch_s[i]));
        json_object_set_new(chip, "weight_fetch_s_by_working_set", a);
    }
    json_object_set_new(j, "chip", chip);
    json_object_set_new(t, "kind", json_string(topo_names[hw->topo == SP_TOPO_CLUSTER]));
    if (hw->coll_latency > 0) json_object_set_new(t, "collective_latency", json_real(hw->coll_latency));
    if (hw->topo == SP_TOPO_TORUS) {
        json_object_set_new(t, "dims", json_pack("[iii]", hw->torus_dims[0], hw->torus_dims[1], hw->torus_dims[2]));
        json_object_set_new(t, "link_bw", json_real(hw->link_bw));
        json_object_set_new(t, "links_per_chip", json_integer(hw->links_per_chip));
        json_object_set_new(t, "hop_latency", json_real(hw->hop_latency));
        if (hw->n_slice_shapes || hw->slice_min_chips) {
            json_t *sl = json_object(), *sh = json_array();
            for (int i = 0; i < hw->n_slice_shapes; i++)
                json_array_append_new(sh, json_pack("[iii]", hw->slice_shapes[i][0], hw->slice_shapes[i][1],
                                                    hw->slice_shapes[i][2]));
            json_object_set_new(sl, "shapes", sh);
            if (hw->slice_min_chips) {
                json_object_set_new(sl, "cuboid_multiple", json_integer(hw->slice_multiple));
                json_object_set_new(sl, "cuboid_min_chips", json_integer(hw->slice_min_chips));
            }
            json_object_set_new(t, "slices", sl);
        }
    } else {
        json_object_set_new(t, "chips_per_node", json_integer(hw->chips_per_node));
        json_object_set_new(t, "intra_node_bw", json_real(hw->intra_bw));
        json_object_set_new(t, "intra_node_latency", json_real(hw->intra_latency));
        json_object_set_new(t, "inter_node_bw", json_real(hw->inter_bw));
        json_object_set_new(t, "inter_node_latency", json_real(hw->inter_latency));
        json_object_set_new(t, "max_chips", json_integer(hw->max_chips));
    }
    json_object_set_new(j, "topology", t);
    json_object_set_new(j, "host", json_pack("{s:I,s:f}", "memory_bytes", (json_int_t)hw->host_bytes, "link_bw",
                                             hw->host_link_bw));
    json_t *e = json_object();
    curve_json(e, "matmul", hw->eff_points, hw->eff_flops, hw->eff_value);
    json_t *rows = json_object();
    for (int d = 0; d < SP_DT_COUNT; d++)
        curve_json(rows, sp_dtype_name((sp_dtype)d), hw->rows_points[d], hw->rows_m[d], hw->rows_value[d]);
    if (json_object_size(rows)) json_object_set_new(e, "matmul_rows", rows);
    else json_decref(rows);
    json_t *byw = json_object();
    for (int d = 0; d < SP_DT_COUNT; d++)
        if (hw->rows_sizes[d] > 0)
            json_object_set_new(byw, sp_dtype_name((sp_dtype)d),
                                classes_json(hw->rows_sizes[d], hw->rows_w[d], hw->rows_w_points[d], hw->rows_w_m[d], hw->rows_w_value[d]));
    if (json_object_size(byw)) json_object_set_new(e, "matmul_rows_by_weights", byw);
    else json_decref(byw);
    if (hw->logits_sizes > 0)
        json_object_set_new(e, "logits_rows_by_weights", classes_json(hw->logits_sizes, hw->logits_w, hw->logits_w_points,
                                                                      hw->logits_w_m, hw->logits_w_value));
    curve_json(e, "memory", hw->mem_points, hw->mem_bytes, hw->mem_value);
    curve_json(e, "weight_stream", hw->ws_points, hw->ws_bytes, hw->ws_value);
    curve_json(e, "weight_stream_alone", hw->wsa_points, hw->wsa_bytes, hw->wsa_value);
    curve_json(e, "attention", hw->attn_points, hw->attn_dhead, hw->attn_value);
    if (hw->matmul_tile[0] || hw->matmul_tile[1] || hw->matmul_tile[2])
        json_object_set_new(e, "matmul_tile", json_pack("[iii]", hw->matmul_tile[0], hw->matmul_tile[1],
                                                        hw->matmul_tile[2]));
    json_object_set_new(e, "hbm_usable", json_real(hw->hbm_usable));
    json_object_set_new(e, "hbm_bw", json_real(hw->hbm_bw_eff));
    json_object_set_new(e, "network", json_real(hw->net_bw_eff));
    if (hw->overlap == SP_OVERLAP_FRACTION)
        json_object_set_new(e, "overlap", json_pack("{s:f}", "fraction", hw->overlap_fraction));
    else
        json_object_set_new(e, "overlap", json_string(hw->overlap == SP_OVERLAP_NONE ? "none" : "full"));
    json_object_set_new(j, "efficiency", e);
    json_object_set_new(j, "cost_per_chip_hour", json_real(hw->chip_cost_per_hour));
    json_t *cal = spi_hw_calibration_to_json(hw);
    if (cal) json_object_set_new(j, "calibration", cal);
    return j;
}
