/* hw_calib.c: the calibratable fields of a hardware profile and its
 * "calibration" section (sp_hw.h; doc/formats.md). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "spi_common.h"
#include "spi_json.h"
#include "sp_hw.h"

#define C_(x) SP_CHECK(x)

/* Every field a fit may set, by its path in the hardware JSON. */
#define MM_(i) {"/efficiency/matmul/" #i "/1", offsetof(sp_hw, eff_value) + (i) * sizeof(double)}
#define ME_(i) {"/efficiency/memory/" #i "/1", offsetof(sp_hw, mem_value) + (i) * sizeof(double)}
static const struct {
    const char *path;
    size_t offset;
} params[] = {
    {"/chip/dispatch_s", offsetof(sp_hw, dispatch_s)},
    {"/topology/hop_latency", offsetof(sp_hw, hop_latency)},
    {"/topology/intra_node_latency", offsetof(sp_hw, intra_latency)},
    {"/topology/inter_node_latency", offsetof(sp_hw, inter_latency)},
    {"/efficiency/hbm_bw", offsetof(sp_hw, hbm_bw_eff)},
    {"/efficiency/network", offsetof(sp_hw, net_bw_eff)},
    MM_(0), MM_(1), MM_(2), MM_(3), MM_(4), MM_(5), MM_(6), MM_(7),
    ME_(0), ME_(1), ME_(2), ME_(3), ME_(4), ME_(5), ME_(6), ME_(7),
};
#undef MM_
#undef ME_
_Static_assert(SP_HW_EFF_POINTS == 8, "one matmul parameter per curve point");
_Static_assert(sizeof params / sizeof params[0] <= SP_HW_CAL_PARAMS, "a calibration can record every parameter");

int sp_hw_param_count(void) { return (int)SPI_ARRAY_LEN(params); }

const char *sp_hw_param_path(int i) { return i >= 0 && i < sp_hw_param_count() ? params[i].path : "?"; }

int sp_hw_param_find(const char *path)
{
    for (int i = 0; i < sp_hw_param_count(); i++)
        if (!strcmp(path, params[i].path)) return i;
    return -1;
}

double *sp_hw_param(sp_hw *hw, int i)
{
    return i >= 0 && i < sp_hw_param_count() ? (double *)((char *)hw + params[i].offset) : NULL;
}

void sp_hw_uncalibrate(sp_hw *hw)
{
    if (!hw->calibration.present) return;
    for (int i = 0; i < hw->calibration.n_params; i++)
        *sp_hw_param(hw, hw->calibration.params[i].param) = hw->calibration.params[i].prior;
    memset(&hw->calibration, 0, sizeof hw->calibration);
}

static const char *const cal_keys[] = {"fitted_to", "date", "transferred_from", "rows", "models", "prior_weight",
                                       "median_abs_err", "worst_abs_err", "median_abs_err_prior",
                                       "worst_abs_err_prior", "median_abs_err_leave_one_model_out",
                                       "worst_abs_err_leave_one_model_out", "parameters", NULL};
static const char *const param_keys[] = {"prior", "value", "fitted", NULL};

sp_status spi_hw_read_calibration(const spi_jctx *c, const json_t *j, sp_hw *hw)
{
    static const char *P = "/calibration";
    sp_hw_calibration *k = &hw->calibration;
    memset(k, 0, sizeof *k);
    C_(spi_json_expect_object(c, P, j));
    C_(spi_json_check_keys(c, P, j, cal_keys));
    json_t *files, *ps;
    C_(spi_json_get_child(c, P, j, "fitted_to", 1, JSON_ARRAY, &files));
    size_t used = 0;
    for (size_t i = 0; i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        char key[24];
        snprintf(key, sizeof key, "%zu", i);
        size_t len = json_is_string(f) ? strlen(json_string_value(f)) : 0;
        if (!len || used + len + 2 > sizeof k->fitted_to)
            return spi_json_fail(c, SP_EINVAL, "/calibration/fitted_to", key,
                                 "must be a non-empty file name (all names under %zu bytes)", sizeof k->fitted_to);
        used += (size_t)snprintf(k->fitted_to + used, sizeof k->fitted_to - used, "%s%s", i ? ", " : "",
                                 json_string_value(f));
    }
    if (!json_array_size(files))
        return spi_json_fail(c, SP_EINVAL, P, "fitted_to", "must name at least one training file");
    C_(spi_json_get_str(c, P, j, "date", 1, k->date, sizeof k->date));
    int y, mo, d;
    char tail;
    if (sscanf(k->date, "%4d-%2d-%2d%c", &y, &mo, &d, &tail) != 3 || mo < 1 || mo > 12 || d < 1 || d > 31)
        return spi_json_fail(c, SP_EINVAL, P, "date", "must be a date YYYY-MM-DD");
    C_(spi_json_get_str(c, P, j, "transferred_from", 0, k->transferred_from, sizeof k->transferred_from));
    int64_t rows = 0, models = 0;
    C_(spi_json_get_int(c, P, j, "rows", 1, 1, 1 << 24, "an integer >= 1", &rows));
    C_(spi_json_get_int(c, P, j, "models", 1, 1, 1 << 24, "an integer >= 1", &models));
    k->rows = (int)rows;
    k->models = (int)models;
    C_(spi_json_get_num(c, P, j, "prior_weight", 0, 0, 0, 1e6, "a number in [0, 1e6]", &k->prior_weight));
    static const char *const what = "a fraction |predicted / measured - 1| in [0, 100]";
    C_(spi_json_get_num(c, P, j, "median_abs_err", 1, 0, 0, 100, what, &k->median_abs_err));
    C_(spi_json_get_num(c, P, j, "worst_abs_err", 1, 0, 0, 100, what, &k->worst_abs_err));
    C_(spi_json_get_num(c, P, j, "median_abs_err_prior", 1, 0, 0, 100, what, &k->median_abs_err_prior));
    C_(spi_json_get_num(c, P, j, "worst_abs_err_prior", 1, 0, 0, 100, what, &k->worst_abs_err_prior));
    k->median_abs_err_lomo = k->worst_abs_err_lomo = -1;
    C_(spi_json_get_num(c, P, j, "median_abs_err_leave_one_model_out", 0, 0, 0, 100, what, &k->median_abs_err_lomo));
    C_(spi_json_get_num(c, P, j, "worst_abs_err_leave_one_model_out", 0, 0, 0, 100, what, &k->worst_abs_err_lomo));
    if (k->worst_abs_err < k->median_abs_err)
        return spi_json_fail(c, SP_EINVAL, P, "worst_abs_err", "must be >= median_abs_err");
    C_(spi_json_get_child(c, P, j, "parameters", 1, JSON_OBJECT, &ps));
    const char *path;
    json_t *v;
    json_object_foreach((json_t *)ps, path, v) {
        /* the field's own path is one key here: a JSON pointer escapes its '/' as ~1 */
        char pre[200], esc[160];
        size_t e = 0;
        for (const char *q = path; *q && e + 3 < sizeof esc; q++) {
            if (*q == '/' || *q == '~') {
                esc[e++] = '~';
                esc[e++] = *q == '/' ? '1' : '0';
            } else {
                esc[e++] = *q;
            }
        }
        esc[e] = '\0';
        snprintf(pre, sizeof pre, "/calibration/parameters/%s", esc);
        int idx = sp_hw_param_find(path);
        if (idx < 0)
            return spi_json_fail(c, SP_EINVAL, "/calibration/parameters", esc,
                                 "is not a calibratable field (see doc/formats.md)");
        if (k->n_params == SP_HW_CAL_PARAMS)
            return spi_json_fail(c, SP_EINVAL, P, "parameters", "at most %d parameters", SP_HW_CAL_PARAMS);
        for (int i = 0; i < k->n_params; i++)
            if (k->params[i].param == idx) return spi_json_fail(c, SP_EINVAL, "/calibration/parameters", esc, "twice");
        C_(spi_json_expect_object(c, pre, v));
        C_(spi_json_check_keys(c, pre, v, param_keys));
        double prior, value;
        int fitted = 0;
        C_(spi_json_get_num(c, pre, v, "prior", 1, 0, 0, HUGE_VAL, "a number >= 0", &prior));
        C_(spi_json_get_num(c, pre, v, "value", 1, 0, 0, HUGE_VAL, "a number >= 0", &value));
        C_(spi_json_get_bool(c, pre, v, "fitted", 1, &fitted));
        /* the section describes the file's own numbers, never other ones */
        double have = *sp_hw_param(hw, idx);
        if (!(fabs(have - value) <= 1e-9 * fabs(value)))
            return spi_json_fail(c, SP_EINVAL, pre, "value", "is %.10g but the profile's field holds %.10g", value,
                                 have);
        k->params[k->n_params].param = idx;
        k->params[k->n_params].fitted = fitted;
        k->params[k->n_params].prior = prior;
        k->params[k->n_params].value = value;
        k->n_params++;
    }
    k->present = 1;
    return SP_OK;
}

json_t *spi_hw_calibration_to_json(const sp_hw *hw)
{
    const sp_hw_calibration *k = &hw->calibration;
    if (!k->present) return NULL;
    json_t *files = json_array();
    char buf[sizeof k->fitted_to];
    snprintf(buf, sizeof buf, "%s", k->fitted_to);
    for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
        json_array_append_new(files, json_string(t));
    json_t *o = json_pack("{s:o,s:s}", "fitted_to", files, "date", k->date);
    if (k->transferred_from[0]) json_object_set_new(o, "transferred_from", json_string(k->transferred_from));
    json_object_set_new(o, "rows", json_integer(k->rows));
    json_object_set_new(o, "models", json_integer(k->models));
    if (!k->transferred_from[0]) json_object_set_new(o, "prior_weight", json_real(k->prior_weight));
    json_object_set_new(o, "median_abs_err", json_real(k->median_abs_err));
    json_object_set_new(o, "worst_abs_err", json_real(k->worst_abs_err));
    json_object_set_new(o, "median_abs_err_prior", json_real(k->median_abs_err_prior));
    json_object_set_new(o, "worst_abs_err_prior", json_real(k->worst_abs_err_prior));
    if (k->median_abs_err_lomo >= 0) {
        json_object_set_new(o, "median_abs_err_leave_one_model_out", json_real(k->median_abs_err_lomo));
        json_object_set_new(o, "worst_abs_err_leave_one_model_out", json_real(k->worst_abs_err_lomo));
    }
    json_t *ps = json_object();
    for (int i = 0; i < k->n_params; i++)
        json_object_set_new(ps, sp_hw_param_path(k->params[i].param),
                            json_pack("{s:f,s:f,s:b}", "prior", k->params[i].prior, "value", k->params[i].value,
                                      "fitted", k->params[i].fitted));
    json_object_set_new(o, "parameters", ps);
    return o;
}
