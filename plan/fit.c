/* fit.c: hardware profiles fitted to measurement sets (sp_fit.h). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "costmodel/sp_cost.h"
#include "sp_fit.h"
#include "sp_layout.h"
#include "sp_model.h"
#include "sp_validate.h"
#include "spi_common.h"

/* Free parameters and their physical bounds.  Efficiencies are fractions of
 * a datasheet peak, in (0, 1]; latencies are seconds, >= 0 (the lower bound
 * 1e-9 s stands for "none": a logistic in log space cannot reach 0). */
#define P_(field, path, lo, hi, lg) {path, lo, hi, lg}
/* Cluster (GPU) profiles: every overhead and efficiency the training rows
 * can see, except the memory curve below 1 MiB: no training row separates a
 * small copy's bandwidth from its step's dispatch cost, and fitting both
 * let them trade against each other (leave-one-model-out error 15.8 % with
 * them, 14.9 % without, on the FasterTransformer rows). */
static const sp_fit_param cluster_params[] = {
    P_(dispatch_s, "/chip/dispatch_s", 1e-9, 1e-3, 1),
    P_(mem_value[2], "/efficiency/memory/2/1", 0.01, 1.0, 0),
    P_(mem_value[3], "/efficiency/memory/3/1", 0.01, 1.0, 0),
    P_(eff_value[0], "/efficiency/matmul/0/1", 0.01, 1.0, 0),
    P_(eff_value[1], "/efficiency/matmul/1/1", 0.01, 1.0, 0),
    P_(eff_value[2], "/efficiency/matmul/2/1", 0.01, 1.0, 0),
    P_(eff_value[3], "/efficiency/matmul/3/1", 0.01, 1.0, 0),
    P_(hbm_bw_eff, "/efficiency/hbm_bw", 0.05, 1.0, 0),
    P_(net_bw_eff, "/efficiency/network", 0.05, 1.0, 0),
    P_(intra_latency, "/topology/intra_node_latency", 1e-9, 1e-3, 1),
};
/* Two training rows (the paper's text figures) determine two parameters at
 * most: the achieved fraction of peak of the large matmuls the prefill row
 * runs, and the per-hop latency the decode row's many small collectives pay.
 * Everything else keeps its prior. */
static const sp_fit_param torus_params[] = {
    P_(eff_value[3], "/efficiency/matmul/3/1", 0.01, 1.0, 0),
    P_(hop_latency, "/topology/hop_latency", 1e-9, 1e-3, 1),
};
#undef P_

const sp_fit_param *sp_fit_params(sp_topo_kind topo, int *n)
{
    if (topo == SP_TOPO_TORUS) {
        *n = (int)SPI_ARRAY_LEN(torus_params);
        return torus_params;
    }
    *n = (int)SPI_ARRAY_LEN(cluster_params);
    return cluster_params;
}

void sp_fit_opts_init(sp_fit_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->max_evals = 8000;
    o->restarts = 8;
    o->leave_one_out = 1;
    o->prior_weight = SP_FIT_PRIOR_WEIGHT;
}

static double *field(sp_hw *hw, const sp_fit_param *p) { return sp_hw_param(hw, sp_hw_param_find(p->name)); }

/* ---- one row's prediction ------------------------------------------------------ */

typedef struct prepared {
    const sp_measure *meas;
    sp_model model;
    sp_layout layout;
    sp_workload w;
    int model_id;      /* index among the distinct models of the fit */
} prepared;

static sp_status prepare(const sp_measure *r, const sp_hw *hw, prepared *p)
{
    sp_error err;
    sp_error_init(&err);
    memset(p, 0, sizeof *p);
    p->meas = r;
    char buf[640];
    sp_status st = sp_model_find(r->model, &p->model, &err);
    if (st == SP_OK) {
        sp_error_init(&err);
        st = sp_layout_parse(r->layout, &p->layout, &err);
    }
    if (st == SP_OK) {
        sp_error_init(&err);
        if (r->chips > 1 << 20) st = spi_error_set(&err, SP_EINVAL, "", 0, 0, "", "too many chips");
        else st = sp_layout_check(&p->layout, &p->model, hw, (int)r->chips, r->batch, &err);
    }
    if (st != SP_OK)
        return spi_fail(st == SP_EIO ? SP_EIO : SP_EINVAL, "%s:%d: %s", r->file, r->line,
                        err.text[0] ? sp_error_format(&err, buf, sizeof buf) : sp_last_error());
    p->w.batch = r->batch;
    p->w.prompt = r->prompt;
    p->w.gen = r->gen;
    return SP_OK;
}

static sp_status predict_prepared(sp_cost_cache *cache, const prepared *p, const sp_hw *hw, double *pred,
                                  int64_t *shortfall)
{
    sp_cost c;
    sp_cost_opts o;
    sp_cost_opts_init(&o);
    o.quiet = 1;
    o.cache = cache;
    sp_status st = sp_cost_eval(&p->model, hw, &p->layout, &p->w, &o, &c);
    if (st != SP_OK)
        return spi_fail(st, "%s:%d: the layout does not price: %s", p->meas->file, p->meas->line,
                        sp_last_error()[0] ? sp_last_error() : sp_status_str(st));
    /* A measured figure is of a run that happened: a layout the cost model
     * says does not fit is still priced (the run's system found the memory),
     * and the report shows the disagreement. */
    if (shortfall) *shortfall = c.feasible ? 0 : c.shortfall_bytes;
    switch (p->meas->metric) {
    case SP_METRIC_LATENCY_MS: *pred = c.total_s * 1e3; break;
    case SP_METRIC_PREFILL_MS: *pred = c.prefill_s * 1e3; break;
    case SP_METRIC_DECODE_STEP_MS: *pred = c.decode_step_s * 1e3; break;
    case SP_METRIC_PREFILL_MFU: *pred = c.mfu_prefill; break;
    default: return spi_fail(SP_EINTERNAL, "unknown metric %d", (int)p->meas->metric);
    }
    if (!(*pred > 0) || !isfinite(*pred))
        return spi_fail(SP_EINTERNAL, "%s:%d: prediction %g is not a positive number", p->meas->file, p->meas->line,
                        *pred);
    return SP_OK;
}

sp_status sp_fit_predict(const sp_measure *row, const sp_hw *hw, double *pred)
{
    prepared p;
    SP_CHECK(prepare(row, hw, &p));
    return predict_prepared(NULL, &p, hw, pred, NULL);
}

/* ---- the search ---------------------------------------------------------------- */

#define NM_MAX 16

typedef struct problem {
    const prepared *rows;
    int n_rows;
    int exclude_model;           /* rows of this model id are left out (-1: none) */
    sp_hw hw;                    /* working copy */
    const sp_fit_param *params;  /* the moving ones */
    int np;
    int evals;
    sp_status st;                /* first failure inside the objective */
    sp_cost_cache *cache;        /* borrowed (NULL: none) */
    double prior_weight;         /* sp_fit_opts.prior_weight */
    double prior[NM_MAX];        /* the moving parameters' values at the start (the prior) */
} problem;

static double sigmoid(double u) { return 1.0 / (1.0 + exp(-u)); }

static double to_value(const sp_fit_param *p, double u)
{
    double s = sigmoid(u);
    double v = p->log_scale ? exp(log(p->lo) + (log(p->hi) - log(p->lo)) * s) : p->lo + (p->hi - p->lo) * s;
    return v < p->lo ? p->lo : v > p->hi ? p->hi : v;
}

static double to_coord(const sp_fit_param *p, double v)
{
    double s;
    if (p->log_scale) {
        double lv = log(v < p->lo ? p->lo : v > p->hi ? p->hi : v);
        s = (lv - log(p->lo)) / (log(p->hi) - log(p->lo));
    } else {
        s = (v - p->lo) / (p->hi - p->lo);
    }
    /* keep the start strictly inside the bounds */
    if (s < 1e-6) s = 1e-6;
    if (s > 1 - 1e-6) s = 1 - 1e-6;
    return log(s / (1 - s));
}

static void apply(problem *pb, const double *u)
{
    for (int i = 0; i < pb->np; i++) *field(&pb->hw, &pb->params[i]) = to_value(&pb->params[i], u[i]);
}

/* Mean |log(pred/meas)| over the included rows, plus prior_weight times the
 * mean over the moving parameters of log(value / prior)^2 (a pull toward the
 * prior in log space: a parameter leaves its datasheet value only as far as
 * the rows pay for it); HUGE_VAL on a failure. */
static double objective(problem *pb, const double *u)
{
    apply(pb, u);
    pb->evals++;
    double sum = 0;
    int n = 0;
    for (int i = 0; i < pb->n_rows; i++) {
        if (pb->rows[i].model_id == pb->exclude_model) continue;
        double pred;
        sp_status st = predict_prepared(pb->cache, &pb->rows[i], &pb->hw, &pred, NULL);
        if (st != SP_OK) {
            if (pb->st == SP_OK) pb->st = st;
            return HUGE_VAL;
        }
        sum += fabs(log(pred / pb->rows[i].meas->value));
        n++;
    }
    double pull = 0;
    if (pb->prior_weight > 0 && pb->np > 0) {
        for (int j = 0; j < pb->np; j++) {
            double d = log(*field(&pb->hw, &pb->params[j]) / pb->prior[j]);
            pull += d * d;
        }
        pull *= pb->prior_weight / pb->np;
    }
    return (n ? sum / n : 0) + pull;
}

/* Nelder–Mead (reflection 1, expansion 2, contraction 1/2, shrink 1/2) from
 * u with initial steps `step`; u gets the best vertex.  Deterministic. */
static double nelder_mead(problem *pb, double *u, double step, int max_evals)
{
    int n = pb->np;
    double x[NM_MAX + 1][NM_MAX], f[NM_MAX + 1];
    for (int v = 0; v <= n; v++) {
        memcpy(x[v], u, sizeof(double) * (size_t)n);
        if (v > 0) x[v][v - 1] += step;
        f[v] = objective(pb, x[v]);
    }
    int start = pb->evals;
    while (pb->evals - start < max_evals) {
        /* order: best first */
        for (int a = 1; a <= n; a++)
            for (int b = a; b > 0 && f[b] < f[b - 1]; b--) {
                double tf = f[b];
                f[b] = f[b - 1];
                f[b - 1] = tf;
                double tx[NM_MAX];
                memcpy(tx, x[b], sizeof tx);
                memcpy(x[b], x[b - 1], sizeof tx);
                memcpy(x[b - 1], tx, sizeof tx);
            }
        if (f[n] - f[0] < 1e-12 * (1 + fabs(f[0]))) break;
        double c[NM_MAX] = {0}, r[NM_MAX], e[NM_MAX], k[NM_MAX];
        for (int v = 0; v < n; v++)
            for (int i = 0; i < n; i++) c[i] += x[v][i] / n;
        for (int i = 0; i < n; i++) r[i] = c[i] + (c[i] - x[n][i]);
        double fr = objective(pb, r);
        if (fr < f[0]) {
            for (int i = 0; i < n; i++) e[i] = c[i] + 2 * (c[i] - x[n][i]);
            double fe = objective(pb, e);
            if (fe < fr) {
                memcpy(x[n], e, sizeof(double) * (size_t)n);
                f[n] = fe;
            } else {
                memcpy(x[n], r, sizeof(double) * (size_t)n);
                f[n] = fr;
            }
            continue;
        }
        if (fr < f[n - 1]) {
            memcpy(x[n], r, sizeof(double) * (size_t)n);
            f[n] = fr;
            continue;
        }
        int outside = fr < f[n];
        for (int i = 0; i < n; i++) k[i] = outside ? c[i] + 0.5 * (r[i] - c[i]) : c[i] + 0.5 * (x[n][i] - c[i]);
        double fk = objective(pb, k);
        if (fk < (outside ? fr : f[n])) {
            memcpy(x[n], k, sizeof(double) * (size_t)n);
            f[n] = fk;
            continue;
        }
        for (int v = 1; v <= n; v++) {
            for (int i = 0; i < n; i++) x[v][i] = x[0][i] + 0.5 * (x[v][i] - x[0][i]);
            f[v] = objective(pb, x[v]);
        }
    }
    int best = 0;
    for (int v = 1; v <= n; v++)
        if (f[v] < f[best]) best = v;
    memcpy(u, x[best], sizeof(double) * (size_t)n);
    return f[best];
}

/* Fits pb->params from the prior in pb->hw; leaves the fitted values there. */
static double search(problem *pb, const sp_fit_opts *o)
{
    double u[NM_MAX];
    for (int i = 0; i < pb->np; i++) {
        /* a prior of 0 (no dispatch cost stated) is pulled toward as its lower bound: the
         * search starts there too (to_coord clamps), and log(value / 0) has no meaning */
        double v = *field(&pb->hw, &pb->params[i]);
        pb->prior[i] = v > pb->params[i].lo ? v : pb->params[i].lo;
        u[i] = to_coord(&pb->params[i], v);
    }
    double best = objective(pb, u);
    if (pb->np == 0) return best;
    double step = 1.0;
    for (int r = 0; r <= o->restarts; r++) {
        double v = nelder_mead(pb, u, step, o->max_evals);
        if (v > best) v = best;
        best = v;
        step *= 0.5;
    }
    apply(pb, u);
    return objective(pb, u);
}

/* The profile records where its numbers come from. */
static void record_calibration(sp_fit *f, const sp_fit_param *all, int np_all, int lomo, double prior_weight)
{
    sp_hw_calibration *k = &f->hw.calibration;
    memset(k, 0, sizeof *k);
    k->present = 1;
    k->prior_weight = prior_weight;
    k->rows = f->n_rows;
    k->models = f->n_models;
    k->median_abs_err = f->median_abs_err;
    k->worst_abs_err = f->worst_abs_err;
    k->median_abs_err_prior = f->median_abs_err_prior;
    k->worst_abs_err_prior = f->worst_abs_err_prior;
    k->median_abs_err_lomo = lomo ? f->median_abs_err_lomo : -1;
    k->worst_abs_err_lomo = lomo ? f->worst_abs_err_lomo : -1;
    for (int j = 0; j < np_all && k->n_params < SP_HW_CAL_PARAMS; j++) {
        k->params[k->n_params].param = sp_hw_param_find(all[j].name);
        k->params[k->n_params].fitted = f->values[j].moved;
        k->params[k->n_params].prior = f->values[j].prior;
        k->params[k->n_params].value = f->values[j].value;
        k->n_params++;
    }
}

void sp_fit_free(sp_fit *f)
{
    if (!f) return;
    free(f->rows);
    free(f->values);
    free(f);
}

sp_status sp_fit_run(const sp_measure_set *set, const sp_hw *prior_in, const sp_fit_opts *opts, sp_fit **out)
{
    sp_fit_opts o;
    sp_fit_opts_init(&o);
    if (opts) o = *opts;
    if (!set || !prior_in || !out) return spi_fail(SP_EINVAL, "sp_fit_run: NULL argument");
    *out = NULL;
    if (!(o.prior_weight >= 0) || !isfinite(o.prior_weight))
        return spi_fail(SP_EINVAL, "sp_fit_run: prior_weight %g is not a number >= 0", o.prior_weight);
    sp_hw prior_hw = *prior_in;
    if (!o.predict_only) sp_hw_uncalibrate(&prior_hw);
    const sp_hw *prior = &prior_hw;
    int np_all;
    const sp_fit_param *all = sp_fit_params(prior->topo, &np_all);
    if (np_all > NM_MAX) return spi_fail(SP_EINTERNAL, "too many fit parameters");

    sp_status st = SP_OK;
    /* one cache for every prediction: the rows of one parameter vector share a profile */
    sp_cost_cache *cache = NULL;
    if (sp_cost_cache_create(&cache) != SP_OK) cache = NULL;   /* each prediction then makes its own */
    sp_fit *f = calloc(1, sizeof *f);
    prepared *rows = calloc((size_t)(set->n ? set->n : 1), sizeof *rows);
    double *e = calloc((size_t)(set->n ? set->n : 1) * 2, sizeof *e);
    sp_fit_param *moving = calloc((size_t)np_all, sizeof *moving);
    char (*names)[64] = calloc((size_t)(set->n ? set->n : 1), sizeof *names);
    if (!f || !rows || !e || !moving || !names) {
        st = spi_fail(SP_ENOMEM, "sp_fit_run: out of memory");
        goto fail;
    }
    f->hw = *prior;
    for (int i = 0; i < set->n; i++) {
        const sp_measure *r = &set->rows[i];
        sp_hw named;
        sp_error err;
        sp_error_init(&err);
        /* a row names its hardware as a bundled name or a file: compare the loaded name */
        if (strcmp(r->hw, prior->name)) {
            if (sp_hw_find(r->hw, &named, &err) != SP_OK || strcmp(named.name, prior->name)) {
                f->n_skipped++;
                continue;
            }
        }
        prepared *p = &rows[f->n_rows];
        SP_CHECKGOTO(prepare(r, prior, p), st, fail);
        int id = 0;
        while (id < f->n_models && strcmp(names[id], p->model.name)) id++;
        if (id == f->n_models) snprintf(names[f->n_models++], sizeof names[0], "%s", p->model.name);
        p->model_id = id;
        f->n_rows++;
    }
    if (f->n_rows == 0) {
        st = spi_fail(SP_EINVAL, "no measurement names the hardware '%s' (%d rows for other hardware)", prior->name,
                      f->n_skipped);
        goto fail;
    }
    f->rows = calloc((size_t)f->n_rows, sizeof *f->rows);
    f->values = calloc((size_t)np_all, sizeof *f->values);
    if (!f->rows || !f->values) {
        st = spi_fail(SP_ENOMEM, "sp_fit_run: out of memory");
        goto fail;
    }

    /* The prior's predictions, and which parameters any row can see: a
     * parameter moved by a tenth that changes no prediction is not fitted. */
    problem pb = {rows, f->n_rows, -1, *prior, NULL, 0, 0, SP_OK, cache, o.prior_weight, {0}};
    for (int i = 0; i < f->n_rows; i++) {
        f->rows[i].meas = rows[i].meas;
        SP_CHECKGOTO(predict_prepared(cache, &rows[i], prior, &f->rows[i].pred_prior, &f->rows[i].shortfall_bytes), st, fail);
        f->rows[i].err_prior = f->rows[i].pred_prior / rows[i].meas->value - 1;
    }
    int np = 0;
    for (int j = 0; j < np_all; j++) {
        sp_hw h = *prior;
        double *x = field(&h, &all[j]);
        double v0 = *x;
        *x = v0 * 1.1 <= all[j].hi ? v0 * 1.1 : v0 * 0.9;
        if (v0 <= 0) *x = all[j].log_scale ? all[j].lo * 10 : all[j].lo;
        int seen = 0;
        for (int i = 0; i < f->n_rows && !seen; i++) {
            double pred;
            SP_CHECKGOTO(predict_prepared(cache, &rows[i], &h, &pred, NULL), st, fail);
            seen = fabs(pred - f->rows[i].pred_prior) > 1e-9 * f->rows[i].pred_prior;
        }
        f->values[j].param = &all[j];
        f->values[j].prior = v0;
        f->values[j].value = v0;
        f->values[j].moved = seen;
        if (seen) moving[np++] = all[j];
    }
    f->n_values = np_all;
    pb.params = moving;
    pb.np = o.predict_only ? 0 : np;
    f->objective = search(&pb, &o);
    if (pb.st != SP_OK) {
        st = pb.st;
        goto fail;
    }
    f->hw = pb.hw;
    for (int j = 0; j < np_all; j++) f->values[j].value = *field(&f->hw, &all[j]);
    for (int i = 0; i < f->n_rows; i++) {
        SP_CHECKGOTO(predict_prepared(cache, &rows[i], &f->hw, &f->rows[i].pred, NULL), st, fail);
        f->rows[i].err = f->rows[i].pred / rows[i].meas->value - 1;
        e[i] = f->rows[i].err;
    }
    f->median_abs_err = sp_abs_median(f->n_rows, e);
    f->worst_abs_err = sp_abs_max(f->n_rows, e);
    for (int i = 0; i < f->n_rows; i++) e[i] = f->rows[i].err_prior;
    f->median_abs_err_prior = sp_abs_median(f->n_rows, e);
    f->worst_abs_err_prior = sp_abs_max(f->n_rows, e);
    f->evals = pb.evals;

    /* Leave one model out: needs a second model to fit to. */
    if (o.leave_one_out && !o.predict_only && f->n_models > 1) {
        for (int id = 0; id < f->n_models; id++) {
            problem lo = {rows, f->n_rows, id, *prior, moving, np, 0, SP_OK, cache, o.prior_weight, {0}};
            search(&lo, &o);
            if (lo.st != SP_OK) {
                st = lo.st;
                goto fail;
            }
            f->evals += lo.evals;
            for (int i = 0; i < f->n_rows; i++) {
                if (rows[i].model_id != id) continue;
                SP_CHECKGOTO(predict_prepared(cache, &rows[i], &lo.hw, &f->rows[i].pred_lomo, NULL), st, fail);
                f->rows[i].err_lomo = f->rows[i].pred_lomo / rows[i].meas->value - 1;
            }
        }
        for (int i = 0; i < f->n_rows; i++) e[i] = f->rows[i].err_lomo;
        f->median_abs_err_lomo = sp_abs_median(f->n_rows, e);
        f->worst_abs_err_lomo = sp_abs_max(f->n_rows, e);
    }
    /* a prediction alone keeps the section the profile was loaded with */
    if (!o.predict_only) record_calibration(f, all, np_all, f->n_models > 1 && o.leave_one_out, o.prior_weight);
    free(rows);
    free(e);
    free(moving);
    free(names);
    sp_cost_cache_free(cache);
    *out = f;
    return SP_OK;
fail:
    sp_cost_cache_free(cache);
    free(rows);
    free(e);
    free(moving);
    free(names);
    sp_fit_free(f);
    return st;
}
