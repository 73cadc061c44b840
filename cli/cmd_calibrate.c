/* cmd_calibrate.c: shardplan calibrate --fit CSV... --hw H [--out FILE]: fits a
 * hardware profile to measurement sets and reports its error in and out of
 * sample (sp_fit.h). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "sp_fit.h"
#include "sp_hw.h"
#include "sp_measure.h"
#include "spi_json.h"

static void help(void)
{
    printf("Usage: shardplan calibrate --fit CSV [--fit CSV ...] --hw NAME|FILE [--prior-weight W] [--out FILE] [--json]\n"
           "       shardplan calibrate --predict CSV [--predict CSV ...] --hw NAME|FILE [--json]\n"
           "       shardplan calibrate --share SRC --hw NAME|FILE --out FILE\n"
           "       shardplan calibrate --backend threads|mpi|cuda [--chips N] --out FILE   (this machine; --help there)\n\n"
           "Fits the hardware profile's free parameters (matmul efficiency curve, HBM\n"
           "bandwidth efficiency, collective latency per algorithm step) to the\n"
           "measurement rows that name that hardware, minimising the mean |log(predicted /\n"
           "measured)| plus a pull toward the uncalibrated values (the prior weight times\n"
           "the mean squared log of each parameter's ratio to its prior), and reports\n"
           "every row's error before and after the fit and the\n"
           "leave-one-model-out error (each model predicted by a fit without its rows).\n"
           "The fit is deterministic and starts from the profile's uncalibrated values.\n\n"
           "  --fit CSV     a measurement set (doc/formats.md, \"Measurement sets\"); repeatable\n"
           "  --predict CSV no fit: the profile as given (calibrated, or NAME:uncalibrated)\n"
           "                predicts the rows: validation data, never fitted to; repeatable\n"
           "  --hw H        the profile to fit (bundled name or file)\n"
           "  --prior-weight W  the pull toward the prior, >= 0 (default %g, chosen by the\n"
           "                leave-one-model-out error: doc/fidelity.md; 0: none)\n"
           "  --out FILE    write the fitted profile, with a \"calibration\" section, as JSON\n"
           "  --share SRC   no fit: H takes the fitted overheads and efficiencies of SRC (a\n"
           "                profile fitted with --fit), keeping its own peaks and bandwidths;\n"
           "                with --hw H --out FILE\n"
           "  --json        machine-readable report\n\n"
           "Bundled training sets: data/calibration/*.csv (installed under the data directory).\n",
           SP_FIT_PRIOR_WEIGHT);
}

static double pct(double e) { return 100.0 * e; }

static json_t *report_json(const sp_fit *f)
{
    json_t *rows = json_array();
    for (int i = 0; i < f->n_rows; i++) {
        const sp_fit_row *r = &f->rows[i];
        json_t *o = json_pack("{s:s,s:i,s:s,s:I,s:s,s:I,s:I,s:I,s:s,s:f,s:f,s:f,s:f,s:f}", "file", r->meas->file,
                              "line", r->meas->line, "model", r->meas->model, "chips", (json_int_t)r->meas->chips,
                              "layout", r->meas->layout, "batch", (json_int_t)r->meas->batch, "prompt",
                              (json_int_t)r->meas->prompt, "gen", (json_int_t)r->meas->gen, "metric",
                              sp_metric_name(r->meas->metric), "measured", r->meas->value, "predicted_prior",
                              r->pred_prior, "error_prior", r->err_prior, "predicted", r->pred, "error", r->err);
        if (r->shortfall_bytes > 0) json_object_set_new(o, "does_not_fit_by_bytes", json_integer(r->shortfall_bytes));
        if (r->pred_lomo > 0) {
            json_object_set_new(o, "predicted_leave_one_model_out", json_real(r->pred_lomo));
            json_object_set_new(o, "error_leave_one_model_out", json_real(r->err_lomo));
        }
        json_array_append_new(rows, o);
    }
    json_t *params = json_object();
    for (int j = 0; j < f->n_values; j++)
        json_object_set_new(params, f->values[j].param->name,
                            json_pack("{s:f,s:f,s:b}", "prior", f->values[j].prior, "value", f->values[j].value,
                                      "fitted", f->values[j].moved));
    json_t *o = json_pack("{s:s,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:o,s:o}", "hw", f->hw.name, "rows", f->n_rows,
                          "rows_other_hw", f->n_skipped, "models", f->n_models, "objective_mean_abs_log",
                          f->objective, "median_abs_err", f->median_abs_err, "worst_abs_err", f->worst_abs_err,
                          "median_abs_err_prior", f->median_abs_err_prior, "worst_abs_err_prior",
                          f->worst_abs_err_prior, "parameters", params, "per_row", rows);
    if (f->n_models > 1) {
        json_object_set_new(o, "median_abs_err_leave_one_model_out", json_real(f->median_abs_err_lomo));
        json_object_set_new(o, "worst_abs_err_leave_one_model_out", json_real(f->worst_abs_err_lomo));
    }
    return o;
}

/* The row's own columns (model, chips, batch, prompt, gen, metric, measured)
 * and the given profile's prediction with its error: 9 cells from c[0]. */
static void row_cells(const sp_fit_row *r, double pred, double err, char c[][300])
{
    const char *model = strrchr(r->meas->model, '/') ? strrchr(r->meas->model, '/') + 1 : r->meas->model;
    snprintf(c[0], sizeof c[0], "%s", model);
    snprintf(c[1], sizeof c[1], "%lld", (long long)r->meas->chips);
    snprintf(c[2], sizeof c[2], "%lld", (long long)r->meas->batch);
    snprintf(c[3], sizeof c[3], "%lld", (long long)r->meas->prompt);
    snprintf(c[4], sizeof c[4], "%lld", (long long)r->meas->gen);
    snprintf(c[5], sizeof c[5], "%s", sp_metric_name(r->meas->metric));
    snprintf(c[6], sizeof c[6], "%.4g%s", r->meas->value, r->shortfall_bytes > 0 ? " (!)" : "");
    snprintf(c[7], sizeof c[7], "%.4g", pred);
    snprintf(c[8], sizeof c[8], "%+.1f%%", pct(err));
}

/* --predict: the profile as given against rows it was not fitted to. */
static void predict_text(const sp_fit *f)
{
    const char *hdr[] = {"file:line", "model", "chips", "batch", "prompt", "gen", "metric", "measured", "predicted",
                         "error"};
    cli_table *t = cli_table_new(10, hdr);
    for (int i = 0; i < f->n_rows; i++) {
        const sp_fit_row *r = &f->rows[i];
        char c[10][300];
        const char *file = strrchr(r->meas->file, '/') ? strrchr(r->meas->file, '/') + 1 : r->meas->file;
        snprintf(c[0], sizeof c[0], "%s:%d", file, r->meas->line);
        row_cells(r, r->pred_prior, r->err_prior, c + 1);
        const char *cells[10];
        for (int k = 0; k < 10; k++) cells[k] = c[k];
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    printf("\n%d rows for %s (%d models); %d rows for other hardware not used\n", f->n_rows, f->hw.name,
           f->n_models, f->n_skipped);
    printf("|predicted/measured - 1|: median %.1f %%, worst %.1f %% (profile %s, %s)\n", pct(f->median_abs_err_prior),
           pct(f->worst_abs_err_prior), f->hw.name, f->hw.calibration.present ? "calibrated" : "uncalibrated");
}

static void report_text(const sp_fit *f)
{
    const char *hdr[] = {"model", "chips", "batch", "prompt", "gen", "metric", "measured", "prior", "err",
                         "fitted", "err", "leave-out", "err"};
    cli_table *t = cli_table_new(13, hdr);
    for (int i = 0; i < f->n_rows; i++) {
        const sp_fit_row *r = &f->rows[i];
        char c[13][300];
        row_cells(r, r->pred_prior, r->err_prior, c);
        snprintf(c[9], sizeof c[9], "%.4g", r->pred);
        snprintf(c[10], sizeof c[10], "%+.1f%%", pct(r->err));
        if (r->pred_lomo > 0) {
            snprintf(c[11], sizeof c[11], "%.4g", r->pred_lomo);
            snprintf(c[12], sizeof c[12], "%+.1f%%", pct(r->err_lomo));
        } else {
            strcpy(c[11], "-");
            strcpy(c[12], "-");
        }
        const char *cells[13];
        for (int k = 0; k < 13; k++) cells[k] = c[k];
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    int nofit = 0;
    for (int i = 0; i < f->n_rows; i++) nofit += f->rows[i].shortfall_bytes > 0;
    if (nofit)
        printf("(!) %d measured layouts the cost model says do not fit in memory (priced all the same)\n", nofit);
    printf("\n%d rows for %s (%d models); %d rows for other hardware not used\n", f->n_rows, f->hw.name,
           f->n_models, f->n_skipped);
    printf("|error|           median   worst\n");
    printf("  prior          %6.1f%%  %6.1f%%\n", pct(f->median_abs_err_prior), pct(f->worst_abs_err_prior));
    printf("  fitted         %6.1f%%  %6.1f%%\n", pct(f->median_abs_err), pct(f->worst_abs_err));
    if (f->n_models > 1)
        printf("  leave-one-out  %6.1f%%  %6.1f%%   (each model predicted by a fit to the others)\n",
               pct(f->median_abs_err_lomo), pct(f->worst_abs_err_lomo));
    else
        printf("  leave-one-out  not run (one model: nothing to hold out)\n");
    printf("\nparameter                             prior          fitted\n");
    for (int j = 0; j < f->n_values; j++)
        printf("  %-34s %-14.6g %.6g%s\n", f->values[j].param->name, f->values[j].prior, f->values[j].value,
               f->values[j].moved ? "" : "   (no row depends on it: kept)");
}

/* The fitted profile: the prior's file (its source and notes kept) with the
 * fitted fields and the calibration section written over it. */
static int write_profile(sp_fit *f, const char *hw_arg, const char *const *files, int n_files, const char *out_path)
{
    sp_hw_calibration *k = &f->hw.calibration;
    size_t used = 0;
    if (n_files) {   /* a fit made now; a shared fit keeps its source's date and files */
        time_t now = time(NULL);
        strftime(k->date, sizeof k->date, "%Y-%m-%d", gmtime(&now));
    }
    for (int i = 0; i < n_files; i++) {
        const char *b = strrchr(files[i], '/');
        b = b ? b + 1 : files[i];
        if (used + strlen(b) + 3 > sizeof k->fitted_to) {
            cli_errorf("--fit: file names too long to record (%zu bytes)", sizeof k->fitted_to);
            return CLI_EXIT_USAGE;
        }
        used += (size_t)snprintf(k->fitted_to + used, sizeof k->fitted_to - used, "%s%s", i ? ", " : "", b);
    }
    char path[1024], rel[320];
    json_t *base = NULL;
    snprintf(rel, sizeof rel, "hw/%.300s.json", hw_arg);
    if (!strchr(hw_arg, '/') && !strchr(hw_arg, ':') && sp_data_path(rel, path, sizeof path) == SP_OK)
        base = json_load_file(path, 0, NULL);
    else if (!strchr(hw_arg, ':'))
        base = json_load_file(hw_arg, 0, NULL);
    if (!base) base = json_object();
    json_t *upd = spi_hw_to_json(&f->hw);
    json_object_del(base, "calibration");
    json_object_update_recursive(base, upd);
    json_decref(upd);
    int rc = CLI_EXIT_OK;
    if (json_dump_file(base, out_path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10))) {
        cli_errorf("cannot write %s", out_path);
        rc = CLI_EXIT_USAGE;
    }
    json_decref(base);
    return rc;
}

/* --share SRC: H takes the fitted overheads and efficiencies of SRC's fit
 * (its own peaks and bandwidths stay); the section says where they came from. */
static int share_profile(const char *src_arg, const char *hw_arg, const char *out_path)
{
    sp_hw src, hw;
    sp_error err;
    sp_error_init(&err);
    sp_status st = sp_hw_find(src_arg, &src, &err);
    if (st != SP_OK) return cli_report(st, &err);
    sp_error_init(&err);
    if ((st = sp_hw_find(hw_arg, &hw, &err)) != SP_OK) return cli_report(st, &err);
    if (!src.calibration.present || src.calibration.transferred_from[0]) {
        cli_errorf("--share %s: not a profile fitted to measurements (no calibration section of its own)", src_arg);
        return CLI_EXIT_USAGE;
    }
    if (src.topo != hw.topo) {
        cli_errorf("--share %s: a %s profile cannot lend its fit to a %s one", src_arg,
                   src.topo == SP_TOPO_TORUS ? "torus" : "cluster", hw.topo == SP_TOPO_TORUS ? "torus" : "cluster");
        return CLI_EXIT_USAGE;
    }
    sp_hw_uncalibrate(&hw);
    sp_hw_calibration k = src.calibration;
    for (int i = 0; i < k.n_params; i++) {
        double *x = sp_hw_param(&hw, k.params[i].param);
        k.params[i].prior = *x;   /* this chip's own uncalibrated value */
        *x = k.params[i].value;
    }
    snprintf(k.transferred_from, sizeof k.transferred_from, "%s", src.name);
    hw.calibration = k;
    sp_fit f;
    memset(&f, 0, sizeof f);
    f.hw = hw;
    return write_profile(&f, hw_arg, NULL, 0, out_path);
}

int cli_cmd_calibrate(int argc, char **argv)
{
    /* Two jobs: fitting to measurement sets (--fit, here) and measuring this
     * machine's chips (--backend: cli_calibrate_local). */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--backend") || !strncmp(argv[i], "--backend=", 10)) return cli_calibrate_local(argc, argv);
    static const struct option opts[] = {{"fit", required_argument, 0, 'f'}, {"predict", required_argument, 0, 'p'},
                                         {"share", required_argument, 0, 's'},
                                         {"hw", required_argument, 0, 'w'},
                                         {"prior-weight", required_argument, 0, 'r'},
                                         {"out", required_argument, 0, 'o'}, {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *files[64];
    int n_files = 0;
    const char *hw_arg = NULL, *out_path = NULL, *share_arg = NULL;
    int json = 0, predict = 0, c;
    double prior_weight = SP_FIT_PRIOR_WEIGHT;
    int weight_given = 0;
    char *end;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': predict |= 1; goto file;
        case 'f':
            predict |= 2;
        file:
            if (n_files == (int)(sizeof files / sizeof files[0])) return cli_usage("calibrate", "too many --fit files");
            files[n_files++] = optarg;
            break;
        case 'w': hw_arg = optarg; break;
        case 's': share_arg = optarg; break;
        case 'r':
            prior_weight = strtod(optarg, &end);
            if (end == optarg || *end || !(prior_weight >= 0 && prior_weight <= 1e6))
                return cli_usage("calibrate", "--prior-weight: '%s' is not a number in [0, 1e6]", optarg);
            weight_given = 1;
            break;
        case 'o': out_path = optarg; break;
        case 'j': json = 1; break;
        case 'h': help(); return CLI_EXIT_OK;
        default: return cli_usage("calibrate", "unknown option");
        }
    }
    if (optind < argc) return cli_usage("calibrate", "unexpected argument '%s'", argv[optind]);
    if (weight_given && (share_arg || predict != 2))
        return cli_usage("calibrate", "--prior-weight is a weight of the fit: it takes --fit (no --predict, no --share)");
    if (share_arg) {
        if (n_files || !hw_arg || !out_path) return cli_usage("calibrate", "--share SRC takes --hw and --out, no CSV");
        return share_profile(share_arg, hw_arg, out_path);
    }
    if (!n_files || !hw_arg) return cli_usage("calibrate", "--fit CSV (or --predict CSV) and --hw are required");
    if (predict == 3) return cli_usage("calibrate", "--fit and --predict do not mix: fit to one set, predict another in a second call");
    predict = predict == 1;
    if (predict && out_path) return cli_usage("calibrate", "--predict fits nothing: there is no profile to --out");

    sp_error err;
    sp_error_init(&err);
    sp_hw prior;
    sp_status st = sp_hw_find(hw_arg, &prior, &err);
    if (st != SP_OK) return cli_report(st, &err);
    sp_measure_set set;
    sp_measure_set_init(&set);
    for (int i = 0; i < n_files; i++) {
        sp_error_init(&err);
        if ((st = sp_measure_load_file(files[i], &set, &err)) != SP_OK) {
            sp_measure_set_free(&set);
            return cli_report(st, &err);
        }
    }
    sp_fit *f = NULL;
    sp_fit_opts fo;
    sp_fit_opts_init(&fo);
    fo.predict_only = predict;
    fo.prior_weight = prior_weight;
    if ((st = sp_fit_run(&set, &prior, &fo, &f)) != SP_OK) {
        sp_measure_set_free(&set);
        return cli_report(st, NULL);
    }
    int rc = CLI_EXIT_OK;
    if (json) {
        json_t *o = report_json(f);
        if (predict) {   /* no fit: only the profile's own predictions */
            json_object_del(o, "parameters");
            json_object_del(o, "median_abs_err");
            json_object_del(o, "worst_abs_err");
            json_object_del(o, "objective_mean_abs_log");
        }
        cli_print_json(o, stdout);
        json_decref(o);
    } else {
        if (predict) predict_text(f);
        else report_text(f);
    }
    if (out_path) rc = write_profile(f, hw_arg, files, n_files, out_path);
    sp_fit_free(f);
    sp_measure_set_free(&set);
    return rc;
}
