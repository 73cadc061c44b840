/* check_fit.c: measurement sets (CSV) and the profile fit: malformed files
 * are refused with line, column and column name; a fit to rows generated
 * from known parameters recovers them; the shipped training sets load. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>
#include "sp_fit.h"
#include "sp_hw.h"
#include "sp_measure.h"

static const char *hdr = "model,hw,chips,layout,batch,prompt,gen,metric,value,source\n";

/* Writes text to a temporary file; returns its path (static buffer). */
static const char *tmpcsv(const char *text)
{
    static char path[64];
    strcpy(path, "/tmp/check_fit_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

START_TEST(test_parse_ok)
{
    char text[1024];
    snprintf(text, sizeof text,
             "# a comment\n%s"
             "gpt-20b-ft,a100-80g,8,\"mesh=1x1x8,weights=f16\",1,20,8,latency_ms,89,src\n"
             "\n"
             "models/x.json,tpu-v4,64,\"a \"\"quoted\"\" layout\",64,2048,0,prefill_mfu,0.76,pope\r\n",
             hdr);
    const char *p = tmpcsv(text);
    sp_measure_set s;
    sp_measure_set_init(&s);
    sp_error err;
    sp_error_init(&err);
    ck_assert_int_eq(sp_measure_load_file(p, &s, &err), SP_OK);
    ck_assert_int_eq(s.n, 2);
    ck_assert_str_eq(s.rows[0].model, "gpt-20b-ft");   /* bundled name: as written */
    ck_assert_str_eq(s.rows[0].layout, "mesh=1x1x8,weights=f16");
    ck_assert_int_eq(s.rows[0].chips, 8);
    ck_assert_int_eq(s.rows[0].metric, SP_METRIC_LATENCY_MS);
    ck_assert_double_eq(s.rows[0].value, 89);
    ck_assert_int_eq(s.rows[0].line, 3);
    ck_assert_str_eq(s.rows[1].model, "/tmp/models/x.json");   /* relative path: from the file's folder */
    ck_assert_str_eq(s.rows[1].layout, "a \"quoted\" layout");
    ck_assert_int_eq(s.rows[1].metric, SP_METRIC_PREFILL_MFU);
    ck_assert_int_eq(s.rows[1].line, 5);
    sp_measure_set_free(&s);
    unlink(p);
}
END_TEST

/* Each malformed file: the error's line, column and field. */
static const struct {
    const char *body;   /* after the header unless it starts with '!' (then the whole file) */
    int line, column;
    const char *field;
} bad[] = {
    {"!model,hw,chips,layout,batch,prompt,gen,metric,value,src\n", 1, 53, "source"},
    {"gpt,a100-80g,0,l,1,1,1,latency_ms,1,s\n", 2, 14, "chips"},
    {"gpt,a100-80g,1,l,1,1,1,latency_s,1,s\n", 2, 24, "metric"},
    {"gpt,a100-80g,1,l,1,1,1,prefill_mfu,1.5,s\n", 2, 36, "value"},
    {"gpt,a100-80g,1,l,1,1,1,latency_ms,-3,s\n", 2, 35, "value"},
    {"gpt,a100-80g,1,l,1,1,1,latency_ms,nan,s\n", 2, 35, "value"},
    {"gpt,a100-80g,1,l,1,0,1,prefill_ms,1,s\n", 2, 20, "prompt"},
    {"gpt,a100-80g,1,l,1,1,0,decode_step_ms,1,s\n", 2, 22, "gen"},
    {"gpt,a100-80g,1,l,1,1,1,latency_ms,1,\n", 2, 37, "source"},
    {"gpt,a100-80g,1,\"l,1,1,1,latency_ms,1,s\n", 2, 16, ""},
    {"gpt,a100-80g,1,l,1,1,1,latency_ms,1\n", 2, 1, ""},
    {"gpt,a100-80g,1,l,1,1,1,latency_ms,1,s,extra\n", 2, 39, ""},
    {"!# only a comment\n", 1, 0, ""},
};

START_TEST(test_parse_bad)
{
    char text[1024];
    if (bad[_i].body[0] == '!') snprintf(text, sizeof text, "%s", bad[_i].body + 1);
    else snprintf(text, sizeof text, "%s%s", hdr, bad[_i].body);
    const char *p = tmpcsv(text);
    sp_measure_set s;
    sp_measure_set_init(&s);
    sp_error err;
    sp_error_init(&err);
    char buf[1024];
    ck_assert_int_ne(sp_measure_load_file(p, &s, &err), SP_OK);
    ck_assert_int_eq(s.n, 0);   /* nothing appended from a bad file */
    ck_assert_msg(err.line == bad[_i].line && err.column == bad[_i].column && !strcmp(err.path, bad[_i].field),
                  "case %d: %s (want %d:%d %s)", _i, sp_error_format(&err, buf, sizeof buf), bad[_i].line,
                  bad[_i].column, bad[_i].field);
    sp_measure_set_free(&s);
    unlink(p);
}
END_TEST

/* Every row prices on the bundled profile it names, to a positive figure. */
static void price_every_row(const sp_measure_set *s)
{
    for (int i = 0; i < s->n; i++) {
        sp_hw hw;
        sp_error err;
        sp_error_init(&err);
        ck_assert_int_eq(sp_hw_find(s->rows[i].hw, &hw, &err), SP_OK);
        double pred = 0;
        ck_assert_msg(sp_fit_predict(&s->rows[i], &hw, &pred) == SP_OK, "%s", sp_last_error());
        ck_assert(pred > 0 && isfinite(pred));
    }
}

START_TEST(test_training_sets_load)
{
    static const char *const files[] = {"/calibration/a100-80g-fastertransformer.csv", "/calibration/tpu-v4-pope.csv"};
    sp_measure_set s;
    sp_measure_set_init(&s);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s%s", sp_data_dir(), files[i]);
        sp_error err;
        sp_error_init(&err);
        char buf[1024];
        ck_assert_msg(sp_measure_load_file(path, &s, &err) == SP_OK, "%s", sp_error_format(&err, buf, sizeof buf));
    }
    ck_assert_int_eq(s.n, 62 + 2);
    price_every_row(&s);
    sp_measure_set_free(&s);
}
END_TEST

/* The validation sets (never fitted to) load, and each row prices on the
 * profile it names: a model the cost model comes to refuse fails here. */
START_TEST(test_validation_sets_load)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/validation", sp_data_dir());
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s", dir);
    sp_measure_set s;
    sp_measure_set_init(&s);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".csv")) continue;
        char path[2048], buf[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        sp_error err;
        sp_error_init(&err);
        ck_assert_msg(sp_measure_load_file(path, &s, &err) == SP_OK, "%s", sp_error_format(&err, buf, sizeof buf));
        files++;
    }
    closedir(d);
    ck_assert_int_ge(files, 1);
    price_every_row(&s);
    sp_measure_set_free(&s);
}
END_TEST

/* Rows priced on a profile with known parameters; a fit from the bundled
 * prior must find those parameters again (within 1 %). */
START_TEST(test_fit_recovers)
{
    sp_hw prior, truth;
    sp_error err;
    sp_error_init(&err);
    ck_assert_int_eq(sp_hw_find("a100-80g:uncalibrated", &prior, &err), SP_OK);
    truth = prior;
    int np;
    const sp_fit_param *params = sp_fit_params(prior.topo, &np);
    /* move every parameter to a different point inside its bounds */
    for (int j = 0; j < np; j++) {
        double *x = sp_hw_param(&truth, sp_hw_param_find(params[j].name));
        double v = params[j].log_scale ? *x * 3 : *x * 0.8;
        if (v > params[j].hi) v = params[j].hi * 0.9;
        if (v < params[j].lo) v = params[j].lo * 1.1;
        *x = v;
    }
    static const int tps[] = {1, 2, 4, 8}, batches[] = {1, 4, 16}, prompts[] = {20, 512}, gens[] = {8, 64};
    sp_measure_set s;
    sp_measure_set_init(&s);
    s.cap = 4 * 3 * 2 * 2;
    s.rows = calloc((size_t)s.cap, sizeof *s.rows);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++)
                for (int d = 0; d < 2; d++) {
                    sp_measure *r = &s.rows[s.n++];
                    strcpy(r->model, "gpt-20b-ft");
                    strcpy(r->hw, "a100-80g");
                    r->chips = tps[a];
                    snprintf(r->layout, sizeof r->layout,
                             "mesh=1x1x%d,weights=f16,kv=f16,prefill=ws1d/heads,decode=ws1d/heads", tps[a]);
                    r->batch = batches[b];
                    r->prompt = prompts[c];
                    r->gen = gens[d];
                    r->metric = SP_METRIC_LATENCY_MS;
                    strcpy(r->source, "synthetic");
                    strcpy(r->file, "<synthetic>");
                    ck_assert_int_eq(sp_fit_predict(r, &truth, &r->value), SP_OK);
                }
    sp_fit_opts o;
    sp_fit_opts_init(&o);
    o.leave_one_out = 0;
    o.max_evals = 20000;
    o.restarts = 8;
    o.prior_weight = 0;   /* the search alone: no pull toward the prior's values */
    sp_fit *f = NULL;
    ck_assert_msg(sp_fit_run(&s, &prior, &o, &f) == SP_OK, "%s", sp_last_error());
    ck_assert_int_eq(f->n_rows, s.n);
    int fitted = 0;
    for (int j = 0; j < f->n_values; j++) {
        if (!f->values[j].moved) continue;
        fitted++;
        double want = *sp_hw_param(&truth, sp_hw_param_find(f->values[j].param->name));
        ck_assert_msg(fabs(f->values[j].value / want - 1) < 0.01, "%s: fitted %g, truth %g",
                      f->values[j].param->name, f->values[j].value, want);
    }
    ck_assert_int_ge(fitted, 2);
    ck_assert(f->worst_abs_err < 1e-3);
    /* deterministic: the same rows give the same profile */
    sp_fit *g = NULL;
    ck_assert_int_eq(sp_fit_run(&s, &prior, &o, &g), SP_OK);
    for (int j = 0; j < f->n_values; j++) ck_assert(f->values[j].value == g->values[j].value);
    sp_fit_free(g);
    /* The pull toward the prior: with the default weight the fit trades a
     * little error for parameters nearer the prior than the truth (in the
     * mean squared log of their ratios to it) and still errs less than the
     * prior; with an overwhelming weight it stays at the prior; a negative
     * weight is refused.  The section records the weight. */
    sp_fit_opts_init(&o);
    o.leave_one_out = 0;
    ck_assert_double_eq(o.prior_weight, SP_FIT_PRIOR_WEIGHT);
    ck_assert_int_eq(sp_fit_run(&s, &prior, &o, &g), SP_OK);
    ck_assert_double_eq(g->hw.calibration.prior_weight, SP_FIT_PRIOR_WEIGHT);
    double pull_fit = 0, pull_truth = 0;
    for (int j = 0; j < g->n_values; j++) {
        if (!g->values[j].moved) continue;
        double p0 = g->values[j].prior;
        pull_fit += log(g->values[j].value / p0) * log(g->values[j].value / p0);
        double t = *sp_hw_param(&truth, sp_hw_param_find(g->values[j].param->name));
        pull_truth += log(t / p0) * log(t / p0);
    }
    ck_assert_msg(pull_fit < 0.999 * pull_truth, "%g, truth %g", pull_fit, pull_truth);   /* the weight is felt */
    ck_assert(g->median_abs_err < g->median_abs_err_prior);
    sp_fit_free(g);
    o.prior_weight = 1e4;
    ck_assert_int_eq(sp_fit_run(&s, &prior, &o, &g), SP_OK);
    for (int j = 0; j < g->n_values; j++)
        ck_assert_msg(fabs(g->values[j].value / g->values[j].prior - 1) < 0.01, "%s: %g, prior %g",
                      g->values[j].param->name, g->values[j].value, g->values[j].prior);
    sp_fit_free(g);
    o.prior_weight = -1;
    ck_assert_int_eq(sp_fit_run(&s, &prior, &o, &g), SP_EINVAL);
    ck_assert_ptr_null(g);
    /* a prior of 0 (no dispatch cost stated) is pulled toward its lower bound, not log(0) */
    prior.dispatch_s = 0;
    o.prior_weight = SP_FIT_PRIOR_WEIGHT;
    o.max_evals = 400;
    o.restarts = 0;
    ck_assert_int_eq(sp_fit_run(&s, &prior, &o, &g), SP_OK);
    ck_assert(isfinite(g->objective));
    ck_assert(g->median_abs_err < g->median_abs_err_prior);
    sp_fit_free(g);
    sp_fit_free(f);
    sp_measure_set_free(&s);
}
END_TEST

START_TEST(test_fit_refuses)
{
    sp_hw hw;
    sp_error err;
    sp_error_init(&err);
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    char text[512];
    snprintf(text, sizeof text, "%sgpt-20b-ft,a100-80g,1,\"mesh=1x1x1,weights=f16,kv=f16\",1,20,8,latency_ms,225,s\n",
             hdr);
    const char *p = tmpcsv(text);
    sp_measure_set s;
    sp_measure_set_init(&s);
    ck_assert_int_eq(sp_measure_load_file(p, &s, &err), SP_OK);
    sp_fit *f = NULL;
    ck_assert_int_eq(sp_fit_run(&s, &hw, NULL, &f), SP_EINVAL);   /* no row for h100 */
    ck_assert_ptr_null(f);
    ck_assert(strstr(sp_last_error(), "h100"));
    /* a layout for the wrong chip count is refused with the row's file and line */
    snprintf(s.rows[0].layout, sizeof s.rows[0].layout, "mesh=1x1x2,weights=f16,kv=f16");
    ck_assert_int_eq(sp_hw_find("a100-80g", &hw, &err), SP_OK);
    ck_assert_int_ne(sp_fit_run(&s, &hw, NULL, &f), SP_OK);
    ck_assert_msg(strstr(sp_last_error(), ":2:"), "%s", sp_last_error());
    sp_measure_set_free(&s);
    unlink(p);
}
END_TEST

/* A bundled profile's calibration section states what a refit from the
 * shipped training sets gives now: a change to the cost model or the data
 * that moves the fit fails here until the profiles are refitted
 * (make calibrate-profiles). */
static const char *const bundled_hw[] = {"a100-80g", "a100-40g", "h100", "h200", "tpu-v4"};

static int close_to(double a, double b) { return fabs(a - b) <= 1e-6 * fabs(b) + 1e-9; }

START_TEST(test_bundled_calibration_reproduces)
{
    sp_hw hw;
    sp_error err;
    sp_error_init(&err);
    char buf[1024];
    ck_assert_msg(sp_hw_find(bundled_hw[_i], &hw, &err) == SP_OK, "%s", sp_error_format(&err, buf, sizeof buf));
    const sp_hw_calibration *k = &hw.calibration;
    ck_assert_msg(k->present, "%s carries no calibration section", bundled_hw[_i]);
    if (k->transferred_from[0]) {
        /* a shared fit: the same values as its source's */
        sp_hw src;
        ck_assert_int_eq(sp_hw_find(k->transferred_from, &src, &err), SP_OK);
        ck_assert(src.calibration.present && !src.calibration.transferred_from[0]);
        ck_assert_int_eq(k->n_params, src.calibration.n_params);
        for (int i = 0; i < k->n_params; i++) {
            ck_assert_int_eq(k->params[i].param, src.calibration.params[i].param);
            ck_assert_msg(close_to(k->params[i].value, src.calibration.params[i].value), "%s %s: %g vs %s's %g",
                          bundled_hw[_i], sp_hw_param_path(k->params[i].param), k->params[i].value, src.name,
                          src.calibration.params[i].value);
        }
        ck_assert(close_to(k->median_abs_err, src.calibration.median_abs_err));
        return;
    }
    sp_measure_set s;
    sp_measure_set_init(&s);
    char files[sizeof k->fitted_to];
    snprintf(files, sizeof files, "%s", k->fitted_to);
    for (char *save = NULL, *t = strtok_r(files, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        char path[1024];
        snprintf(path, sizeof path, "%s/calibration/%s", sp_data_dir(), t);
        ck_assert_msg(sp_measure_load_file(path, &s, &err) == SP_OK, "%s", sp_error_format(&err, buf, sizeof buf));
    }
    sp_fit *f = NULL;
    sp_fit_opts o;
    sp_fit_opts_init(&o);
    o.prior_weight = k->prior_weight;   /* the weight the profile was fitted with */
    ck_assert_msg(sp_fit_run(&s, &hw, &o, &f) == SP_OK, "%s", sp_last_error());
    ck_assert_int_eq(f->n_rows, k->rows);
    ck_assert_msg(close_to(f->median_abs_err, k->median_abs_err) && close_to(f->worst_abs_err, k->worst_abs_err),
                  "%s: refit gives median %.6f worst %.6f, the profile states %.6f %.6f: refit the profiles "
                  "(make calibrate-profiles)",
                  bundled_hw[_i], f->median_abs_err, f->worst_abs_err, k->median_abs_err, k->worst_abs_err);
    ck_assert(close_to(f->median_abs_err_prior, k->median_abs_err_prior));
    if (k->median_abs_err_lomo >= 0) ck_assert(close_to(f->median_abs_err_lomo, k->median_abs_err_lomo));
    for (int i = 0; i < k->n_params; i++)
        ck_assert_msg(close_to(*sp_hw_param(&hw, k->params[i].param), *sp_hw_param(&f->hw, k->params[i].param)),
                      "%s %s", bundled_hw[_i], sp_hw_param_path(k->params[i].param));
    sp_fit_free(f);
    sp_measure_set_free(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fit");
    TCase *tc = tcase_create("measure");
    tcase_add_test(tc, test_parse_ok);
    tcase_add_loop_test(tc, test_parse_bad, 0, (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, test_training_sets_load);
    tcase_add_test(tc, test_validation_sets_load);
    suite_add_tcase(s, tc);
    tc = tcase_create("fit");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fit_recovers);
    tcase_add_test(tc, test_fit_refuses);
    tcase_add_loop_test(tc, test_bundled_calibration_reproduces, 0, (int)(sizeof bundled_hw / sizeof bundled_hw[0]));
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
