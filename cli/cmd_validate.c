/* cmd_validate.c: shardplan validate --hw FILE [--backend B] [--cases FILE]:
 * runs a set of cases on the executor, prices each with the cost model, and
 * reports predicted vs measured prefill and decode-step times: |error|
 * median and worst, and Kendall's tau of the orderings within each
 * (model, chips).  --backend mpi: under `mpirun -np N`, one chip per rank,
 * the cases of N chips. */
#include "config.h"
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "spi_common.h"
#include "sp_cost.h"
#include "sp_hw.h"
#include "sp_validate.h"
#include "exec/sp_exec.h"
#ifdef HAVE_MPI
#include <mpi.h>
#endif

static int is_root = 1;   /* prints (MPI: rank 0) */
/* errors are printed once (MPI: by rank 0) */
static int fail(sp_status st, const sp_error *err) { return is_root ? cli_report(st, err) : cli_exit_for(st); }

static void help(void)
{
    printf("Usage: shardplan validate [--hw FILE] [--backend threads|mpi|cuda] [--cases FILE] [--repeat R]\n"
           "                          [--statistic median|min] [--measured FILE] [--json]\n\n"
           "Runs each case (model, chips, layout, batch, prompt, gen) on the executor and prices\n"
           "it with the cost model on the profile, then prints predicted, measured and the\n"
           "relative error (predicted - measured) / measured of the prefill time and of the\n"
           "mean decode step, the median and worst |error|, and Kendall's tau between the\n"
           "predicted and measured orderings of the cases of each (model, chips) group.\n\n"
           "Measurement: weights are random (seed 1, fp32 before the layout's storage dtype);\n"
           "each case runs once untimed (warm-up), then R times (default 3) and more while the\n"
           "timed runs add up to less than S seconds (--min-seconds, default 2; at most 100 R);\n"
           "the figure is the minimum over those runs of the executor's prefill wall time and\n"
           "of its mean decode-step wall time (as calibrate's compute microbenchmarks take\n"
           "theirs); the median is reported beside it (--json), and --statistic median\n"
           "compares with it instead (the typical run).\n"
           "Prediction: sp_cost_eval with fp32 activations (the CPU executor's); decode step =\n"
           "decode_s / gen (the mean over the generated tokens).\n\n"
           "  --hw FILE      the profile (default: $SHARDPLAN_LOCAL_HW, from calibrate --backend)\n"
           "  --backend B    threads (default): every case runs in this process, a chip per thread;\n"
           "                 mpi: mpirun -np N shardplan validate --backend mpi ...: a chip per rank,\n"
           "                 the cases of N chips (the others are listed as skipped: run them\n"
           "                 under their own -np); rank 0 prints.  cuda: one GPU, the cases of\n"
           "                 one chip (the others listed as skipped), with the bundled\n"
           "                 validate/gpu.cases on a profile from calibrate --backend cuda\n"
           "  --cases FILE   the case set (default: the bundled validate/local.cases, cuda:\n"
           "                 validate/gpu.cases; format in\n"
           "                 src/sp_validate.h and doc/fidelity-local.md)\n"
           "  --repeat R     timed runs per case (default 3)\n"
           "  --min-seconds S  keep timing a case while its runs total under S (default 2)\n"
           "  --statistic T  min (default) or median of the timed runs is the measured figure\n"
           "                 (with --measured: default the file's own)\n"
           "  --measured FILE  do not run: take the cases and their measured figures from an\n"
           "                 earlier `validate --json` output and price them on --hw (compare\n"
           "                 profiles on the same measurements)\n"
           "  --json         machine-readable\n"
           "Exit 0: every case ran; 2: bad input, or a case the executor refuses.\n");
}


/* The measured figure of a case: the minimum of its timed runs (the
 * statistic of calibrate's compute microbenchmarks) or their median
 * (--statistic median: the typical run); both are kept. */
typedef enum { STAT_MEDIAN, STAT_MIN, STAT_FILE } vstat;
static const char *const stat_names[] = {"median", "min"};

typedef struct vres {
    int runs;
    double pred_pf, pred_dc, meas_pf, meas_dc;   /* meas_*: the chosen statistic */
    double min_pf, min_dc, med_pf, med_dc;       /* NAN where an older --measured file lacks one */
    double err_pf, err_dc;
} vres;

static void choose_stat(vstat stat, vres *r)
{
    r->meas_pf = stat == STAT_MIN ? r->min_pf : r->med_pf;
    r->meas_dc = stat == STAT_MIN ? r->min_dc : r->med_dc;
}

static int measure_case(const sp_vcase *c, const sp_model *m, const sp_weights *w, sp_comm_backend be, int repeat,
                        double min_s, vres *out)
{
    sp_exec *ex = NULL;
    /* MPI: every rank builds alike (a pure check) and gets rank 0's times
     * (sp_exec_stats), so all take the same number of runs below */
    sp_status st = sp_exec_build(m, &c->layout, c->batch, c->prompt, c->gen, w, be, &ex);
    if (st) {
        if (is_root) cli_errorf("case at line %d (%s %s): %s", c->line, c->model, c->layout_text, sp_last_error());
        return cli_exit_for(st) == CLI_EXIT_INTERNAL ? CLI_EXIT_INTERNAL : CLI_EXIT_USAGE;
    }
    int64_t B = c->batch, P = c->prompt, G = c->gen;
    int32_t *prompt = malloc((size_t)(B * P) * sizeof *prompt), *tok = malloc((size_t)(B * G) * sizeof *tok);
    if (!prompt || !tok) st = SP_ENOMEM;
    uint64_t rs = 1;
    for (int64_t i = 0; !st && i < B * P; i++) prompt[i] = (int32_t)(sp_kern_rng_next(&rs) % (uint64_t)m->vocab);
    /* at least `repeat` timed runs, more (up to 100 x repeat) while they take
     * under min_s in all; each run's prefill and mean decode step */
    int cap = 100 * repeat;
    double *pf = malloc((size_t)cap * 2 * sizeof *pf), *dc = pf ? pf + cap : NULL;
    if (!pf) st = SP_ENOMEM;
    double spent = 0;
    out->runs = 0;
    for (int r = 0; !st && (r <= repeat || (spent < min_s && r <= cap)); r++) {
        sp_exec_stats s;
        if ((st = sp_exec_run(ex, prompt, NULL, tok, NULL, &s))) break;
        if (r == 0) continue;   /* warm-up */
        spent += s.prefill_s + s.decode_step_s * (double)(G - 1);
        pf[out->runs] = s.prefill_s;
        dc[out->runs++] = s.decode_step_s;
    }
    out->min_pf = out->min_dc = INFINITY;
    for (int i = 0; !st && i < out->runs; i++) {
        if (pf[i] < out->min_pf) out->min_pf = pf[i];
        if (dc[i] < out->min_dc) out->min_dc = dc[i];
    }
    if (!st) {   /* times are >= 0: the median of |t| is theirs */
        out->med_pf = sp_abs_median(out->runs, pf);
        out->med_dc = sp_abs_median(out->runs, dc);
    }
    free(pf);
#ifdef HAVE_MPI
    if (st && be == SP_COMM_BACKEND_MPI) {
        /* a peer may be waiting in a collective: end the whole job */
        fprintf(stderr, "shardplan: validate: case at line %d failed (%s): %s; aborting the MPI job\n", c->line,
                sp_status_str(st), sp_last_error());
        MPI_Abort(MPI_COMM_WORLD, cli_exit_for(st) ? cli_exit_for(st) : CLI_EXIT_INTERNAL);
    }
#endif
    free(prompt);
    free(tok);
    sp_exec_free(ex);
    return st ? fail(st, NULL) : CLI_EXIT_OK;
}

int cli_predict_run(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch, int64_t prompt,
                    int64_t gen, cli_prediction *out)
{
    sp_cost_opts o;
    sp_cost_opts_init(&o);
    o.act_dtype = SP_DT_F32;   /* the CPU executor's activations */
    sp_workload wl = {batch, prompt, gen};
    sp_cost cost;
    sp_status st = sp_cost_eval(m, hw, l, &wl, &o, &cost);
    if (!st) st = sp_cost_kinds_eval(m, hw, l, &wl, &o, &out->kinds);
    if (st) return CLI_EXIT_USAGE;
    out->prefill_s = cost.prefill_s;
    out->decode_step_s = gen > 0 ? cost.decode_s / (double)gen : 0;
    return CLI_EXIT_OK;
}

static int predict_case(const sp_vcase *c, const sp_model *m, const sp_hw *hw, vres *out)
{
    cli_prediction p;
    if (cli_predict_run(m, hw, &c->layout, c->batch, c->prompt, c->gen, &p)) {
        if (is_root) cli_errorf("case at line %d (%s %s): cannot price: %s", c->line, c->model, c->layout_text, sp_last_error());
        return CLI_EXIT_USAGE;
    }
    out->pred_pf = p.prefill_s;
    out->pred_dc = p.decode_step_s;
    return CLI_EXIT_OK;
}

/* Tau of each (model, chips) group; returns the number of groups with >= 2 cases. */
typedef struct vgroup {
    const char *model;
    int chips, n;
    double tau_pf, tau_dc;
} vgroup;

static int groups_of(const sp_vcases *cs, const vres *r, vgroup *g)
{
    int ng = 0;
    double *x = malloc((size_t)cs->n * 4 * sizeof *x);
    if (!x) return 0;
    double *y = x + cs->n, *x2 = y + cs->n, *y2 = x2 + cs->n;
    for (int i = 0; i < cs->n; i++) {
        int seen = 0;
        for (int k = 0; k < ng && !seen; k++) seen = !strcmp(g[k].model, cs->c[i].model) && g[k].chips == cs->c[i].chips;
        if (seen) continue;
        int n = 0;
        for (int j = i; j < cs->n; j++) {
            if (strcmp(cs->c[j].model, cs->c[i].model) || cs->c[j].chips != cs->c[i].chips) continue;
            x[n] = r[j].pred_pf, y[n] = r[j].meas_pf, x2[n] = r[j].pred_dc, y2[n] = r[j].meas_dc;
            n++;
        }
        g[ng++] = (vgroup){cs->c[i].model, cs->c[i].chips, n, sp_kendall_tau(n, x, y), sp_kendall_tau(n, x2, y2)};
    }
    free(x);
    return ng;
}

static json_t *jnum(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static void report(const sp_vcases *cs, const vres *r, const char *hw_path, const char *backend, int skipped,
                   int repeat, double min_s, vstat stat, int json)
{
    double *e = malloc((size_t)cs->n * 2 * sizeof *e);
    vgroup *g = calloc((size_t)cs->n, sizeof *g);
    if (!e || !g) {
        free(e);
        free(g);
        cli_errorf("out of memory");
        return;
    }
    double *e2 = e + cs->n;
    for (int i = 0; i < cs->n; i++) e[i] = r[i].err_pf, e2[i] = r[i].err_dc;
    double med_pf = sp_abs_median(cs->n, e), worst_pf = sp_abs_max(cs->n, e);
    double med_dc = sp_abs_median(cs->n, e2), worst_dc = sp_abs_max(cs->n, e2);
    int ng = groups_of(cs, r, g);
    double min_tau_pf = INFINITY, min_tau_dc = INFINITY;
    for (int k = 0; k < ng; k++) {
        if (g[k].n < 2) continue;
        if (g[k].tau_pf < min_tau_pf) min_tau_pf = g[k].tau_pf;
        if (g[k].tau_dc < min_tau_dc) min_tau_dc = g[k].tau_dc;
    }
    if (json) {
        json_t *cases = json_array(), *groups = json_array();
        for (int i = 0; i < cs->n; i++) {
            const sp_vcase *c = &cs->c[i];
            json_array_append_new(
                cases, json_pack("{s:i,s:s,s:i,s:s,s:I,s:I,s:I,s:i,s:{s:o,s:o,s:o,s:o,s:o},s:{s:o,s:o,s:o,s:o,s:o}}",
                                 "line", c->line, "model", c->model, "chips", c->chips, "layout", c->layout_text,
                                 "batch", (json_int_t)c->batch, "prompt", (json_int_t)c->prompt, "gen",
                                 (json_int_t)c->gen, "runs", r[i].runs, "prefill_s", "predicted", jnum(r[i].pred_pf),
                                 "measured", jnum(r[i].meas_pf), "measured_median", jnum(r[i].med_pf),
                                 "measured_min", jnum(r[i].min_pf), "error", jnum(r[i].err_pf), "decode_step_s",
                                 "predicted", jnum(r[i].pred_dc), "measured", jnum(r[i].meas_dc), "measured_median",
                                 jnum(r[i].med_dc), "measured_min", jnum(r[i].min_dc), "error", jnum(r[i].err_dc)));
        }
        for (int k = 0; k < ng; k++)
            json_array_append_new(groups, json_pack("{s:s,s:i,s:i,s:o,s:o}", "model", g[k].model, "chips", g[k].chips,
                                                    "cases", g[k].n, "tau_prefill", jnum(g[k].tau_pf),
                                                    "tau_decode_step", jnum(g[k].tau_dc)));
        char method[256];
        snprintf(method, sizeof method,
                 "%s over at least repeat timed runs (more while they total under min_seconds, at most 100 x "
                 "repeat) after one warm-up run",
                 stat == STAT_MIN ? "minimum" : "median");
        json_t *o = json_pack(
            "{s:s,s:s,s:i,s:f,s:s,s:s,s:i,s:i,s:{s:o,s:o,s:o},s:{s:o,s:o,s:o},s:o,s:o}", "hw", hw_path, "backend",
            backend, "repeat", repeat, "min_seconds", min_s, "statistic", stat_names[stat], "method", method,
            "cases_run", cs->n, "cases_skipped", skipped, "prefill",
            "median_abs_err", jnum(med_pf), "worst_abs_err", jnum(worst_pf), "min_group_tau", jnum(min_tau_pf),
            "decode_step", "median_abs_err", jnum(med_dc), "worst_abs_err", jnum(worst_dc), "min_group_tau",
            jnum(min_tau_dc), "groups", groups, "cases", cases);
        cli_print_json(o, stdout);
        json_decref(o);
    } else {
        const char *hdr[] = {"model",   "chips",     "layout",       "B",       "P",        "G",
                             "prefill", "predicted", "err",          "decode", "predicted", "err"};
        cli_table *t = cli_table_new(12, hdr);
        for (int i = 0; i < cs->n; i++) {
            const sp_vcase *c = &cs->c[i];
            char cell[12][272];
            snprintf(cell[0], sizeof cell[0], "%s", c->model);
            snprintf(cell[1], sizeof cell[1], "%d", c->chips);
            snprintf(cell[2], sizeof cell[2], "%s", c->layout_text);
            snprintf(cell[3], sizeof cell[3], "%lld", (long long)c->batch);
            snprintf(cell[4], sizeof cell[4], "%lld", (long long)c->prompt);
            snprintf(cell[5], sizeof cell[5], "%lld", (long long)c->gen);
            cli_fmt_seconds(r[i].meas_pf, cell[6], sizeof cell[6]);
            cli_fmt_seconds(r[i].pred_pf, cell[7], sizeof cell[7]);
            snprintf(cell[8], sizeof cell[8], "%+.0f%%", 100 * r[i].err_pf);
            cli_fmt_seconds(r[i].meas_dc, cell[9], sizeof cell[9]);
            cli_fmt_seconds(r[i].pred_dc, cell[10], sizeof cell[10]);
            snprintf(cell[11], sizeof cell[11], "%+.0f%%", 100 * r[i].err_dc);
            const char *cp[12];
            for (int k = 0; k < 12; k++) cp[k] = cell[k];
            cli_table_add(t, cp);
        }
        printf("hw: %s; backend %s; %d cases, each the %s of at least %d runs (more while under %.2g s) "
               "after a warm-up\n(prefill, decode: measured)\n",
               hw_path, backend, cs->n, stat == STAT_MIN ? "minimum" : "median", repeat, min_s);
        if (skipped) printf("skipped: %d cases of other chip counts (listed on stderr)\n", skipped);
        cli_table_print(t, stdout);
        cli_table_free(t);
        printf("\n%-26s %8s %8s\n", "|error|", "median", "worst");
        printf("%-26s %7.1f%% %7.1f%%\n", "prefill", 100 * med_pf, 100 * worst_pf);
        printf("%-26s %7.1f%% %7.1f%%\n", "decode step", 100 * med_dc, 100 * worst_dc);
        printf("\n%-14s %5s %5s %12s %12s\n", "Kendall tau", "chips", "cases", "prefill", "decode step");
        for (int k = 0; k < ng; k++) {
            if (g[k].n < 2) continue;
            printf("%-14s %5d %5d %12.2f %12.2f\n", g[k].model, g[k].chips, g[k].n, g[k].tau_pf, g[k].tau_dc);
        }
        /* no group of two or more cases with a defined tau: no minimum */
        char a[16] = "-", b[16] = "-";
        if (isfinite(min_tau_pf)) snprintf(a, sizeof a, "%.2f", min_tau_pf);
        if (isfinite(min_tau_dc)) snprintf(b, sizeof b, "%.2f", min_tau_dc);
        printf("%-14s %5s %5s %12s %12s\n", "minimum", "", "", a, b);
    }
    free(e);
    free(g);
}

/* --measured: the cases of an earlier `validate --json` output (each
 * element of "cases" rebuilt as a case-file line, so the case checks are
 * the file's) and their measured figures, kept in *doc for measured_of. */
static sp_status load_measured(const char *path, sp_vcases *cs, json_t **doc, sp_error *err)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) return spi_error_set(err, SP_EPARSE, path, je.line, je.column, "", "%s", je.text);
    json_t *cases = json_object_get(j, "cases");
    if (!json_is_array(cases) || !json_array_size(cases)) {
        json_decref(j);
        return spi_error_set(err, SP_EPARSE, path, 0, 0, "/cases", "must be a non-empty array (validate --json output)");
    }
    /* a line: model and layout (<= 120 bytes each, checked below) and four integers */
    size_t cap = 512 * json_array_size(cases) + 1, len = 0;
    char *text = malloc(cap);
    if (!text) {
        json_decref(j);
        return SP_ENOMEM;
    }
    sp_status st = SP_OK;
    for (size_t i = 0; i < json_array_size(cases) && !st; i++) {
        json_t *c = json_array_get(cases, i);
        const char *model = json_string_value(json_object_get(c, "model"));
        const char *layout = json_string_value(json_object_get(c, "layout"));
        json_t *pf = json_object_get(json_object_get(c, "prefill_s"), "measured");
        json_t *dc = json_object_get(json_object_get(c, "decode_step_s"), "measured");
        char where[32];
        snprintf(where, sizeof where, "/cases/%zu", i);
        if (!model || !layout || strlen(model) > 120 || strlen(layout) > 120 ||
            !json_is_integer(json_object_get(c, "chips")) || !json_is_integer(json_object_get(c, "batch")) ||
            !json_is_integer(json_object_get(c, "prompt")) || !json_is_integer(json_object_get(c, "gen")) ||
            !(json_number_value(pf) > 0) || !(json_number_value(dc) > 0)) {
            st = spi_error_set(err, SP_EPARSE, path, 0, 0, where,
                               "needs model, layout, chips, batch, prompt, gen and measured prefill_s and "
                               "decode_step_s > 0");
            break;
        }
        int w = snprintf(text + len, cap - len, "%s %lld %s %lld %lld %lld\n", model,
                         (long long)json_integer_value(json_object_get(c, "chips")), layout,
                         (long long)json_integer_value(json_object_get(c, "batch")),
                         (long long)json_integer_value(json_object_get(c, "prompt")),
                         (long long)json_integer_value(json_object_get(c, "gen")));
        if (w < 0 || (size_t)w >= cap - len) {   /* cannot happen with the bounds above; never write past */
            st = spi_error_set(err, SP_EPARSE, path, 0, 0, where, "case line too long");
            break;
        }
        len += (size_t)w;
    }
    if (!st) st = sp_vcases_loads(text, path, cs, err);
    free(text);
    if (st) json_decref(j);
    else *doc = j;
    return st;
}

/* The statistic an earlier output measured by: its "statistic", or, before
 * that key existed, the minimum (its "method" said so). */
static vstat file_stat(const json_t *doc)
{
    const char *t = json_string_value(json_object_get(doc, "statistic"));
    return t && !strcmp(t, "median") ? STAT_MEDIAN : STAT_MIN;
}

/* Case i's figures from an earlier output: both statistics where it has them, else its
 * "measured" as the file's statistic; asking for one the file lacks is an error (its path). */
static int measured_of(const json_t *doc, const char *path, int i, vstat stat, vres *r)
{
    json_t *c = json_array_get(json_object_get(doc, "cases"), (size_t)i);
    const char *ph[2] = {"prefill_s", "decode_step_s"};
    double *med[2] = {&r->med_pf, &r->med_dc}, *mn[2] = {&r->min_pf, &r->min_dc};
    vstat own = file_stat(doc);
    r->runs = (int)json_integer_value(json_object_get(c, "runs"));
    for (int k = 0; k < 2; k++) {
        json_t *o = json_object_get(c, ph[k]), *a = json_object_get(o, "measured_median"),
               *b = json_object_get(o, "measured_min");
        double m = json_number_value(json_object_get(o, "measured"));
        *med[k] = json_is_number(a) ? json_number_value(a) : own == STAT_MEDIAN ? m : NAN;
        *mn[k] = json_is_number(b) ? json_number_value(b) : own == STAT_MIN ? m : NAN;
        double want = stat == STAT_MIN ? *mn[k] : *med[k];
        if (!(want > 0)) {
            if (is_root)
                cli_errorf("%s: /cases/%d/%s/measured_%s: not in the file (it was measured by its %s only): "
                           "give --statistic %s or none",
                           path, i, ph[k], stat_names[stat], stat_names[own], stat_names[own]);
            return CLI_EXIT_USAGE;
        }
    }
    choose_stat(stat, r);
    return CLI_EXIT_OK;
}

static int validate_job(const char *hw_path, const char *cases_path, const char *measured_path, sp_comm_backend be,
                        int ranks, int repeat, double min_s, vstat stat, int json);

int cli_cmd_validate(int argc, char **argv)
{
    static const struct option opts[] = {{"hw", 1, 0, 'H'},     {"backend", 1, 0, 'k'}, {"cases", 1, 0, 'c'},
                                         {"repeat", 1, 0, 'r'}, {"json", 0, 0, 'j'}, {"min-seconds", 1, 0, 'S'},    {"help", 0, 0, 'h'},
                                         {"measured", 1, 0, 'M'}, {"statistic", 1, 0, 't'},
                                         {0, 0, 0, 0}};
    const char *hw_path = NULL, *cases_path = NULL, *measured_path = NULL;
    long long repeat = 3;
    double min_s = 2.0;
    int json = 0, mpi = 0, cuda = 0, timing_given = 0, c, rc_cuda;
    vstat stat = STAT_FILE;   /* the minimum when measuring; the file's with --measured */
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'H': hw_path = optarg; break;
        case 'c': cases_path = optarg; break;
        case 'M': measured_path = optarg; break;
        case 't':
            if (!strcmp(optarg, "median")) stat = STAT_MEDIAN;
            else if (!strcmp(optarg, "min")) stat = STAT_MIN;
            else return cli_usage("validate", "--statistic %s: median or min", optarg);
            break;
        case 'k':
            if (!strcmp(optarg, "threads") || !strcmp(optarg, "mpi") || !strcmp(optarg, "cuda")) {
                mpi = !strcmp(optarg, "mpi");
                cuda = !strcmp(optarg, "cuda");
                break;
            }
            return cli_usage("validate", "--backend %s: threads, mpi or cuda", optarg);
        case 'r':
            if (cli_parse_long("validate", "--repeat", optarg, 1, 100, &repeat)) return CLI_EXIT_USAGE;
            timing_given = 1;
            break;
        case 'j': json = 1; break;
        case 'S': {
            timing_given = 1;
            char *end;
            min_s = strtod(optarg, &end);
            if (*end || end == optarg || !(min_s >= 0 && min_s <= 3600))
                return cli_usage("validate", "--min-seconds must be a number in [0, 3600]");
            break;
        }
        case 'h': help(); return CLI_EXIT_OK;
        default: return cli_usage("validate", "unknown option");
        }
    }
    if (optind < argc) return cli_usage("validate", "unexpected argument '%s'", argv[optind]);
    if (measured_path && timing_given)
        return cli_usage("validate", "--repeat and --min-seconds time runs; --measured runs nothing");
    if (!hw_path && *sp_env(SP_ENV_LOCAL_HW)) hw_path = sp_env(SP_ENV_LOCAL_HW);
    if (!hw_path)
        return cli_usage("validate", "--hw FILE is required (or set SHARDPLAN_LOCAL_HW to the profile that "
                                     "calibrate --backend wrote)");
    if ((mpi || cuda) && measured_path)
        return cli_usage("validate", "--measured runs nothing: it takes no --backend %s", mpi ? "mpi" : "cuda");
    if (cuda && (rc_cuda = cli_cuda_check("validate"))) return rc_cuda;
    if (!measured_path && stat == STAT_FILE) stat = STAT_MIN;
    if (cuda)   /* one GPU: the cases of one chip */
        return validate_job(hw_path, cases_path, NULL, SP_COMM_BACKEND_NCCL, 1, (int)repeat, min_s, stat, json);
    if (!mpi)
        return validate_job(hw_path, cases_path, measured_path, SP_COMM_BACKEND_THREADS, 0, (int)repeat, min_s, stat,
                            json);
    int rank, size, rc = cli_mpi_init("validate", &rank, &size);
    if (rc) return rc;
    is_root = rank == 0;
    rc = validate_job(hw_path, cases_path, NULL, SP_COMM_BACKEND_MPI, size, (int)repeat, min_s, stat, json);
#ifdef HAVE_MPI
    MPI_Finalize();
#endif
    return rc;
}

/* The cases of the set (or of --measured's earlier output, not run) on
 * backend be: threads, or MPI with `ranks` ranks (every rank runs this
 * alike; the cases of other chip counts are skipped, each named on stderr). */
static int validate_job(const char *hw_path, const char *cases_path, const char *measured_path, sp_comm_backend be,
                        int ranks, int repeat, double min_s, vstat stat, int json)
{
    sp_error err;
    sp_error_init(&err);
    sp_hw hw;
    sp_status st = sp_hw_find(hw_path, &hw, &err);
    if (st) return fail(st, &err);
    char def[4096];
    if (!cases_path) {
        const char *bundled = be == SP_COMM_BACKEND_NCCL ? "validate/gpu.cases" : "validate/local.cases";
        if ((st = sp_data_path(bundled, def, sizeof def))) {
            if (is_root) cli_errorf("no --cases and the bundled %s is not found under %s", bundled, sp_data_dir());
            return CLI_EXIT_USAGE;
        }
        cases_path = def;
    }
    if (measured_path && cases_path != def && cases_path)
        return cli_usage("validate", "--measured takes its cases from FILE: give --cases or --measured, not both");
    sp_vcases cs;
    sp_vcases_init(&cs);
    json_t *mj = NULL;
    if (measured_path) {
        if ((st = load_measured(measured_path, &cs, &mj, &err))) return fail(st, &err);
        cases_path = measured_path;
        if (stat == STAT_FILE) stat = file_stat(mj);
    } else if ((st = sp_vcases_load_file(cases_path, &cs, &err)))
        return fail(st, &err);
    /* MPI: the world is the layout's chips, so this job runs the cases of `ranks` chips;
     * cuda: one GPU, the cases of one chip */
    int n_all = cs.n, skipped = 0;
    const char *bname = be == SP_COMM_BACKEND_NCCL ? "cuda" : "mpi";
    if (be != SP_COMM_BACKEND_THREADS) {
        int k = 0;
        for (int i = 0; i < cs.n; i++) {
            if (cs.c[i].chips == ranks) {
                cs.c[k++] = cs.c[i];
                continue;
            }
            skipped++;
            if (is_root)
                fprintf(stderr, "validate: skipped %s:%d (%s, %d chips): the %s job has %d chip%s\n", cases_path,
                        cs.c[i].line, cs.c[i].model, cs.c[i].chips, bname, ranks, ranks == 1 ? "" : "s");
        }
        cs.n = k;
    }
    if (!cs.n) {
        sp_vcases_free(&cs);
        json_decref(mj);
        if (is_root && n_all)
            cli_errorf("--backend %s: none of the %d cases of %s has %d chip%s (the job's); %s", bname, n_all,
                       cases_path, ranks, ranks == 1 ? "" : "s",
                       be == SP_COMM_BACKEND_NCCL ? "one GPU runs the cases of one chip"
                                                  : "run them under mpirun -np <their chips>");
        else if (is_root)
            cli_errorf("%s: no cases", cases_path);
        return CLI_EXIT_USAGE;
    }
    vres *r = calloc((size_t)cs.n, sizeof *r);
    if (!r) {
        sp_vcases_free(&cs);
        return fail(SP_ENOMEM, NULL);
    }
    int rc = CLI_EXIT_OK;
    sp_kern_set_blas_threads(1);
    /* cases of one model share its weights (built once: random values do not change the timings) */
    char wmodel[128] = "";
    sp_model m;
    sp_weights w;
    memset(&w, 0, sizeof w);
    for (int i = 0; i < cs.n && !rc; i++) {
        const sp_vcase *vc = &cs.c[i];
        if (strcmp(wmodel, vc->model)) {
            sp_weights_free(&w);
            wmodel[0] = 0;
            sp_error_init(&err);
            if ((st = sp_model_find(vc->model, &m, &err))) {
                rc = fail(st, &err);
                break;
            }
            if (!mj && (st = sp_weights_build_random(&m, 1, &w))) {
                rc = fail(st, NULL);
                break;
            }
            snprintf(wmodel, sizeof wmodel, "%s", vc->model);
        }
        sp_error_init(&err);
        if ((st = sp_model_check_run(&m, vc->prompt + vc->gen, &err))) {
            rc = fail(st, &err);
            break;
        }
        if ((rc = predict_case(vc, &m, &hw, &r[i]))) break;
        if (mj && (rc = measured_of(mj, cases_path, i, stat, &r[i]))) break;
        if (!mj && (rc = measure_case(vc, &m, &w, be, repeat, min_s, &r[i]))) break;
        if (!mj) choose_stat(stat, &r[i]);
        r[i].err_pf = (r[i].pred_pf - r[i].meas_pf) / r[i].meas_pf;
        r[i].err_dc = (r[i].pred_dc - r[i].meas_dc) / r[i].meas_dc;
        if (!json && is_root)
            fprintf(stderr, "validate: %d/%d %s %s: prefill %+.0f%%, decode %+.0f%%\n", i + 1, cs.n, vc->model,
                    vc->layout_text, 100 * r[i].err_pf, 100 * r[i].err_dc);
    }
    sp_weights_free(&w);
    const char *backend = be == SP_COMM_BACKEND_THREADS ? "threads" : bname;
    if (mj) {   /* --measured: how the figures were measured is the file's, not this call's */
        const char *b = json_string_value(json_object_get(mj, "backend"));
        json_t *rp = json_object_get(mj, "repeat"), *ms = json_object_get(mj, "min_seconds");
        if (b) backend = b;
        if (json_is_integer(rp)) repeat = (int)json_integer_value(rp);
        if (json_is_number(ms)) min_s = json_number_value(ms);
    }
    if (!rc && is_root) report(&cs, r, hw_path, backend, skipped, repeat, min_s, stat, json);
    json_decref(mj);
    free(r);
    sp_vcases_free(&cs);
    return rc;
}
