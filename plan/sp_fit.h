/*
 * sp_fit.h: fits a hardware profile's free parameters to measurement sets
 * (sp_measure.h) and reports the error, in and out of sample.
 *
 *   sp_measure_set rows;  ...sp_measure_load_file("data/calibration/x.csv", &rows, &err)...
 *   sp_hw prior;          ...sp_hw_find("a100-80g", &prior, &err)...
 *   sp_fit_opts o; sp_fit_opts_init(&o);
 *   sp_fit *f;
 *   if (sp_fit_run(&rows, &prior, &o, &f) == SP_OK) {
 *       ... f->hw is the fitted profile, f->rows[i].pred beside .meas, f->median_abs_err ...
 *       sp_fit_free(f);
 *   }
 *
 * The model: a row's prediction is the cost model's figure for its layout
 * and workload on the profile (sp_cost_eval: latency_ms = total_s,
 * prefill_ms = prefill_s, decode_step_ms = decode_step_s, prefill_mfu =
 * mfu_prefill).  The free parameters are fields of sp_hw (sp_fit_params()
 * lists them with their physical bounds); the fit minimises the mean of
 * |log(predicted / measured)| over the rows, so a row 20 % high and a row
 * 20 % low weigh alike whatever their size, plus a pull toward the prior:
 * prior_weight times the mean over the fitted parameters of
 * log(value / prior)^2.  Without it the parameters trade against each other
 * (a dispatch cost driven to zero and paid back by low efficiencies) and the
 * fit predicts models it was not fitted to worse than the prior does; the
 * default weight is the one with the lowest leave-one-model-out error on
 * the bundled training rows (doc/fidelity.md).  The search is Nelder–Mead in
 * bounded coordinates (each parameter a logistic function of a free
 * variable between its bounds; log-scaled for latencies), from a fixed
 * start, with fixed restarts: deterministic, the same rows give the same
 * profile on every machine.  Parameters the rows cannot see (no row's price
 * moves with them) keep the prior's values and are reported as such.
 *
 * Leave-one-model-out: for each model of the rows, the fit is run again
 * without that model's rows and predicts them; their errors are the
 * out-of-sample estimate.
 */
#ifndef SP_FIT_H
#define SP_FIT_H
#include "sp_common.h"
#include "sp_hw.h"
#include "sp_measure.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One free parameter: a calibratable field of sp_hw (sp_hw_param_find). */
typedef struct sp_fit_param {
    const char *name;   /* the hardware JSON field path, e.g. "/efficiency/hbm_bw" */
    double lo, hi;      /* physical bounds, inclusive */
    int log_scale;      /* search in log(value) (latencies spanning decades) */
} sp_fit_param;
/* The parameters a fit may move, for a topology kind; *n gets their count. */
const sp_fit_param *sp_fit_params(sp_topo_kind topo, int *n);

/* A row's prediction on a profile: the metric's value (ms or a fraction). */
sp_status sp_fit_predict(const sp_measure *row, const sp_hw *hw, double *pred);

typedef struct sp_fit_opts {
    size_t size;          /* sizeof(sp_fit_opts) */
    int max_evals;        /* objective evaluations per Nelder–Mead run (default 8000) */
    int restarts;         /* restarts from the best point so far (default 8) */
    int leave_one_out;    /* 1: also the leave-one-model-out fits (default 1) */
    int predict_only;     /* 1: no fit: the profile as given (calibrated or not) predicts the rows;
                             pred = pred_prior, values unchanged (validation data) */
    double prior_weight;  /* >= 0: the pull toward the prior (default SP_FIT_PRIOR_WEIGHT; 0: none);
                             a prior of 0 is pulled toward as the parameter's lower bound */
} sp_fit_opts;
/* The default prior weight: the lowest leave-one-model-out median error on
 * the FasterTransformer training rows among the weights doc/fidelity.md lists. */
#define SP_FIT_PRIOR_WEIGHT 0.03
void sp_fit_opts_init(sp_fit_opts *o);

typedef struct sp_fit_row {
    const sp_measure *meas;   /* borrowed from the set given to sp_fit_run */
    double pred;              /* fitted profile's prediction */
    double err;               /* pred / meas - 1 */
    double pred_prior;        /* the prior's prediction */
    double err_prior;
    double pred_lomo;         /* prediction by the fit without this row's model (0: not run) */
    double err_lomo;
    int64_t shortfall_bytes;  /* > 0: the cost model says the measured layout does not fit by this much
                                 (priced all the same: the measured run found the memory) */
} sp_fit_row;

typedef struct sp_fit_value {
    const sp_fit_param *param;
    double prior, value;
    int moved;                /* 0: no row depends on it; kept at the prior */
} sp_fit_value;

typedef struct sp_fit {
    sp_hw hw;                 /* the prior with the fitted values */
    int n_rows;
    sp_fit_row *rows;         /* rows of the set that name the prior's hardware, in file order */
    int n_skipped;            /* rows for other hardware (not used) */
    int n_values;
    sp_fit_value *values;
    double objective;         /* at the fit: mean |log(pred/meas)| plus the pull toward the prior */
    double median_abs_err, worst_abs_err;             /* |pred/meas - 1| over the rows */
    double median_abs_err_prior, worst_abs_err_prior;
    double median_abs_err_lomo, worst_abs_err_lomo;   /* 0 when not run */
    int n_models;             /* distinct models among the rows */
    int evals;                /* objective evaluations spent */
} sp_fit;

/* Fits prior's free parameters to the rows of `set` whose hw is prior's
 * name, starting from prior's uncalibrated values (sp_hw_uncalibrate), so a
 * calibrated profile refits to itself.  out->hw.calibration records the
 * fit (its date and fitted_to are left for the caller).  SP_EINVAL when no row names it or a row does not price (its file
 * and line in the message).  *out is owned by the caller: sp_fit_free. */
sp_status sp_fit_run(const sp_measure_set *set, const sp_hw *prior, const sp_fit_opts *opts, sp_fit **out);
void sp_fit_free(sp_fit *f);

#ifdef __cplusplus
}
#endif
#endif
