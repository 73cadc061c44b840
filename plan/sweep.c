/*
 * sweep.c: research sweeps into SQLite (sp_sweep.h; schema in doc/sweep.md).
 *
 * Threads: opts.jobs workers take blocks of SWEEP_BLOCK consecutive point
 * numbers (an atomic counter), compute the points of the block that have no
 * row yet, and queue the block's rows; the calling thread alone holds the
 * SQLite connection and inserts queued rows, opts.batch_rows per
 * transaction.  At most 4·jobs blocks wait in the queue, so memory stays
 * bounded when SQLite is the slower side.
 *
 * MPI (opts.mpi): rank 0 writes as above and hands the points out to the
 * other ranks, which compute (the section "MPI" below).
 *
 * Resumption: the rows of a committed transaction are in the file (WAL,
 * synchronous=NORMAL survives a killed process), those of the open one are
 * not; a rerun reads the idx of every row into a bitmap and computes only
 * the missing points.  Every point's figures depend on its inputs alone
 * (each worker's pricing cache gives the figures the cost model would
 * without it), so the order and the thread that computes a point change
 * nothing in its row.
 */
#include "config.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>
#include "sp_sweep.h"
#include "sp_hw.h"
#include "sp_layout.h"
#include "sp_model.h"
#include "sp_plan.h"
#include "sp_fleet.h"
#include "costmodel/sp_cost.h"
#include "spi_common.h"
#include "spi_json.h"
#ifdef HAVE_MPI
#include "exec/spi_mpi.h"

/* SQLite is opened when a sweep first opens its database (db_open), not
 * linked: every other process of the program skips loading it (~0.2 ms on
 * the 2-core VM: an empty program 1.8 ms, linked with libsqlite3 2.0 ms).
 * The entry points used here go through this table once it is filled. */
#define SP_SQ_FUNCS \
    X(sqlite3_bind_double) \
    X(sqlite3_bind_int) \
    X(sqlite3_bind_int64) \
    X(sqlite3_bind_null) \
    X(sqlite3_bind_text) \
    X(sqlite3_busy_timeout) \
    X(sqlite3_close) \
    X(sqlite3_column_count) \
    X(sqlite3_column_double) \
    X(sqlite3_column_int64) \
    X(sqlite3_column_name) \
    X(sqlite3_column_text) \
    X(sqlite3_column_type) \
    X(sqlite3_errmsg) \
    X(sqlite3_exec) \
    X(sqlite3_finalize) \
    X(sqlite3_open_v2) \
    X(sqlite3_prepare_v2) \
    X(sqlite3_reset) \
    X(sqlite3_step)

static struct {
#define X(f) __typeof__(&f) fn_##f;
    SP_SQ_FUNCS
#undef X
} sq;
static pthread_once_t sq_once = PTHREAD_ONCE_INIT;
static char sq_err[512];   /* empty: the table is filled */

static void sq_load(void)
{
    const spi_dl_sym syms[] = {
#define X(f) {#f, &sq.fn_##f},
        SP_SQ_FUNCS
#undef X
    };
    if (spi_dl_table(SP_SQLITE_SONAME, syms, (int)(sizeof syms / sizeof syms[0])) != SP_OK)
        snprintf(sq_err, sizeof sq_err, "%s", sp_last_error());
}

static sp_status sq_open(void)
{
    pthread_once(&sq_once, sq_load);
    if (sq_err[0]) return spi_fail(SP_EIO, "sweep database: cannot open SQLite: %s", sq_err);
    return SP_OK;
}

/* below, every SQLite call goes through the table (filled: sq_open, in db_open) */
#define sqlite3_bind_double sq.fn_sqlite3_bind_double
#define sqlite3_bind_int sq.fn_sqlite3_bind_int
#define sqlite3_bind_int64 sq.fn_sqlite3_bind_int64
#define sqlite3_bind_null sq.fn_sqlite3_bind_null
#define sqlite3_bind_text sq.fn_sqlite3_bind_text
#define sqlite3_busy_timeout sq.fn_sqlite3_busy_timeout
#define sqlite3_close sq.fn_sqlite3_close
#define sqlite3_column_count sq.fn_sqlite3_column_count
#define sqlite3_column_double sq.fn_sqlite3_column_double
#define sqlite3_column_int64 sq.fn_sqlite3_column_int64
#define sqlite3_column_name sq.fn_sqlite3_column_name
#define sqlite3_column_text sq.fn_sqlite3_column_text
#define sqlite3_column_type sq.fn_sqlite3_column_type
#define sqlite3_errmsg sq.fn_sqlite3_errmsg
#define sqlite3_exec sq.fn_sqlite3_exec
#define sqlite3_finalize sq.fn_sqlite3_finalize
#define sqlite3_open_v2 sq.fn_sqlite3_open_v2
#define sqlite3_prepare_v2 sq.fn_sqlite3_prepare_v2
#define sqlite3_reset sq.fn_sqlite3_reset
#define sqlite3_step sq.fn_sqlite3_step
#endif

#define SWEEP_BLOCK 256
#define SWEEP_MAX_POINTS ((int64_t)1 << 32)   /* the done-bitmap is 512 MiB there */
#define SWEEP_MAX_AXIS 1000000
#define SWEEP_MAX_LIST (1 << 22)                /* points of the list form */
#define SWEEP_MAX_FRONTIER_PAIRS 128            /* chips x batch of one frontier, as the frontier verb */
#define LAYOUT_TEXT 256

static const char *const compute_names[SP_SWEEP_COMPUTE_COUNT] = {"estimate", "plan", "frontier", "fleet"};
_Static_assert(sizeof compute_names / sizeof compute_names[0] == SP_SWEEP_COMPUTE_COUNT, "names");

const char *sp_sweep_compute_name(sp_sweep_compute c)
{
    return (unsigned)c < SP_SWEEP_COMPUTE_COUNT ? compute_names[c] : "?";
}

sp_status sp_sweep_format_parse(const char *s, sp_sweep_format *out)
{
    if (!strcmp(s, "csv")) *out = SP_SWEEP_CSV;
    else if (!strcmp(s, "json")) *out = SP_SWEEP_JSON;
    else return spi_fail(SP_EINVAL, "export format '%s': must be csv or json", s);
    return SP_OK;
}

/* Axes in point-number order, the last fastest. */
enum { AX_MODEL, AX_HW, AX_CHIPS, AX_BATCH, AX_PROMPT, AX_GEN, AX_LAYOUT, AX_COUNT };

struct sp_sweep_spec {
    sp_sweep_compute compute;
    /* grid: values per axis (layouts: 1 for plan and frontier); list: the
     * entries of the model, hw and layout tables, the points on the others */
    int64_t n[AX_COUNT];
    int64_t (*pt)[AX_COUNT];         /* list form: per point, its index on each axis; NULL for a grid */
    /* frontier: the chip counts and batches each frontier ranges over (the
     * spec's chips and batch); the chips and batch axes then hold one 0 */
    int *fr_chips;
    int64_t *fr_batch;
    int n_fr_chips, n_fr_batch;
    char (*model_name)[128];         /* as written in the spec: the key column */
    sp_model *models;
    char (*hw_name)[128];
    sp_hw *hw;
    int64_t *vals[4];                /* chips, batch, prompt, gen (list form: one per point) */
    sp_layout *layouts;
    char (*layout_text)[LAYOUT_TEXT];  /* canonical text form: the key column */
    sp_plan_opts popts;
    /* fleet: the requests/s of each point (its last axis, in the layouts' place: n[AX_LAYOUT]
     * values) and the solver's options (max_instance_chips and max_batch are the point's) */
    double *rates;
    sp_fleet_opts fopts;
    int64_t points;
    char *canon;                     /* the spec as compact sorted JSON (meta.spec) */
};

void sp_sweep_spec_free(sp_sweep_spec *s)
{
    if (!s) return;
    free(s->pt);
    free(s->fr_chips);
    free(s->fr_batch);
    free(s->model_name);
    free(s->models);
    free(s->hw_name);
    free(s->hw);
    for (int i = 0; i < 4; i++) free(s->vals[i]);
    free(s->layouts);
    free(s->layout_text);
    free(s->rates);
    free(s->canon);
    free(s);
}

int64_t sp_sweep_spec_points(const sp_sweep_spec *s) { return s->points; }
sp_sweep_compute sp_sweep_spec_compute(const sp_sweep_spec *s) { return s->compute; }

/* A string list: an array of strings or one string.  *arr is borrowed. */
static sp_status get_str_list(const spi_jctx *c, const json_t *root, const char *key, json_t **arr, size_t *n)
{
    json_t *v = json_object_get(root, key);
    if (!v) return spi_json_fail(c, SP_EPARSE, "", key, "missing field (array of names)");
    if (json_is_string(v)) {
        *arr = v;
        *n = 1;
        return SP_OK;
    }
    if (!json_is_array(v) || json_array_size(v) == 0)
        return spi_json_fail(c, SP_EPARSE, "", key, "must be a non-empty array of names");
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!json_is_string(json_array_get(v, i))) {
            char p[64];
            snprintf(p, sizeof p, "/%s", key);
            char k[24];
            snprintf(k, sizeof k, "%zu", i);
            return spi_json_fail(c, SP_EPARSE, p, k, "must be a string");
        }
    *arr = v;
    *n = json_array_size(v);
    return SP_OK;
}

static const char *str_at(const json_t *v, size_t i)
{
    return json_string_value(json_is_string(v) ? v : json_array_get(v, i));
}

/* A numeric axis: an integer, an array of integers, or a range object
 * {"from": a, "to": b, "step": k} (a, a+k, ... <= b) or {"from", "to",
 * "times": k} (a, a·k, ... <= b).  Values in [min, max]. */
static sp_status get_axis_values(const spi_jctx *c, const json_t *root, const char *key, int64_t min, int64_t max,
                                 int64_t **out, int64_t *n)
{
    json_t *v = json_object_get(root, key);
    char p[64];
    snprintf(p, sizeof p, "/%s", key);
    if (!v) return spi_json_fail(c, SP_EPARSE, "", key, "missing field (integer, array of integers, or "
                                                       "{\"from\", \"to\", \"step\"|\"times\"})");
    if (json_is_integer(v) || json_is_real(v)) {
        int64_t x;
        sp_status st = spi_json_get_int(c, "", root, key, 1, min, max, "integer", &x);
        if (st != SP_OK) return st;
        if (!(*out = malloc(sizeof **out))) return spi_fail(SP_ENOMEM, "out of memory");
        (*out)[0] = x;
        *n = 1;
        return SP_OK;
    }
    if (json_is_array(v)) {
        size_t k = json_array_size(v);
        if (k == 0 || k > SWEEP_MAX_AXIS)
            return spi_json_fail(c, SP_EPARSE, "", key, "must hold 1 to %d values", SWEEP_MAX_AXIS);
        if (!(*out = calloc(k, sizeof **out))) return spi_fail(SP_ENOMEM, "out of memory");
        for (size_t i = 0; i < k; i++) {
            char ik[24];
            snprintf(ik, sizeof ik, "%zu", i);
            /* the value checked under its own path, /key/i */
            json_t *wrap = json_object();
            if (!wrap) return spi_fail(SP_ENOMEM, "out of memory");
            json_object_set(wrap, ik, json_array_get(v, i));
            sp_status st = spi_json_get_int(c, p, wrap, ik, 1, min, max, "integer", &(*out)[i]);
            json_decref(wrap);
            if (st != SP_OK) return st;
        }
        *n = (int64_t)k;
        return SP_OK;
    }
    if (json_is_object(v)) {
        static const char *const keys[] = {"from", "to", "step", "times", NULL};
        SP_CHECK(spi_json_check_keys(c, p, v, keys));
        int64_t from, to, step = 0, times = 0;
        SP_CHECK(spi_json_get_int(c, p, v, "from", 1, min, max, "integer", &from));
        SP_CHECK(spi_json_get_int(c, p, v, "to", 1, from, max, "integer >= from", &to));
        SP_CHECK(spi_json_get_int(c, p, v, "step", 0, 1, max, "integer >= 1", &step));
        SP_CHECK(spi_json_get_int(c, p, v, "times", 0, 2, 1 << 20, "integer >= 2", &times));
        if ((step > 0) == (times > 0))
            return spi_json_fail(c, SP_EPARSE, p, "step", "give exactly one of step and times");
        int64_t k = 0;
        for (int64_t x = from; x <= to && k <= SWEEP_MAX_AXIS; k++) {
            int64_t nx;
            if (step ? __builtin_add_overflow(x, step, &nx) : __builtin_mul_overflow(x, times, &nx)) break;
            x = nx;
        }
        if (k > SWEEP_MAX_AXIS) return spi_json_fail(c, SP_EPARSE, "", key, "more than %d values", SWEEP_MAX_AXIS);
        if (!(*out = calloc((size_t)k, sizeof **out))) return spi_fail(SP_ENOMEM, "out of memory");
        int64_t x = from;
        for (int64_t i = 0; i < k; i++) {
            (*out)[i] = x;
            if (i + 1 < k) x = step ? x + step : x * times;
        }
        *n = k;
        return SP_OK;
    }
    return spi_json_fail(c, SP_EPARSE, "", key, "must be an integer, an array of integers, or a range object");
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* get_axis_values, with a value given twice refused (two points would
 * share one key, so one of them would never get its row). */
static sp_status get_axis(const spi_jctx *c, const json_t *root, const char *key, int64_t min, int64_t max,
                          int64_t **out, int64_t *n)
{
    SP_CHECK(get_axis_values(c, root, key, min, max, out, n));
    int64_t *v = malloc((size_t)*n * sizeof *v);
    if (!v) return spi_fail(SP_ENOMEM, "out of memory");
    memcpy(v, *out, (size_t)*n * sizeof *v);
    qsort(v, (size_t)*n, sizeof *v, cmp_i64);
    sp_status st = SP_OK;
    for (int64_t i = 1; i < *n && st == SP_OK; i++)
        if (v[i] == v[i - 1])
            st = spi_json_fail(c, SP_EPARSE, "", key, "value %" PRId64 " given twice", v[i]);
    free(v);
    return st;
}

typedef sp_status (*find_fn)(const char *name, void *out, sp_error *err);
static sp_status find_model(const char *name, void *out, sp_error *err) { return sp_model_find(name, out, err); }
static sp_status find_hw(const char *name, void *out, sp_error *err) { return sp_hw_find(name, out, err); }

/* Grows an array of n elements of elem bytes when n is 0 or a power of two
 * (capacity 1, 2, 4, ...), so n + 1 elements fit. */
static sp_status grow(void **arr, int64_t n, size_t elem)
{
    if (n & (n - 1)) return SP_OK;
    size_t cap = n ? 2 * (size_t)n : 1, bytes;
    if (__builtin_mul_overflow(cap, elem, &bytes)) return spi_fail(SP_ENOMEM, "out of memory");
    void *p = realloc(*arr, bytes);
    if (!p) return spi_fail(SP_ENOMEM, "out of memory");
    *arr = p;
    return SP_OK;
}

/* A name table (models or hardware): names as written (the key column) and
 * what each resolves to, n entries of elem bytes. */
typedef struct named_tab {
    int64_t *n;
    char (**names)[128];
    void **objs;
    size_t elem;
    find_fn find;
    const char *what;                /* "model", "hardware" */
} named_tab;

/* The entry of name in t, added and resolved when new (*is_new says which);
 * errors name prefix/key. */
static sp_status intern_name(const spi_jctx *c, const char *prefix, const char *key, const named_tab *t,
                             const char *name, int64_t *index, int *is_new)
{
    for (int64_t i = 0; i < *t->n; i++)
        if (!strcmp((*t->names)[i], name)) {
            *index = i;
            *is_new = 0;
            return SP_OK;
        }
    if (strlen(name) >= sizeof **t->names)
        return spi_json_fail(c, SP_EPARSE, prefix, key, "name longer than %zu bytes", sizeof **t->names - 1);
    SP_CHECK(grow((void **)t->names, *t->n, sizeof **t->names));
    SP_CHECK(grow(t->objs, *t->n, t->elem));
    int64_t i = *t->n;
    snprintf((*t->names)[i], sizeof **t->names, "%s", name);
    sp_error e;
    sp_error_init(&e);
    if (t->find(name, (char *)*t->objs + (size_t)i * t->elem, &e) != SP_OK) {
        char msg[400];
        sp_error_format(&e, msg, sizeof msg);
        return spi_json_fail(c, SP_EINVAL, prefix, key, "%s '%s': %s", t->what, name, msg);
    }
    (*t->n)++;
    *index = i;
    *is_new = 1;
    return SP_OK;
}

/* The names of root[key] (a string list) into table t; errors name /key/i,
 * a name given twice too (it would make two points with one key). */
static sp_status get_named(const spi_jctx *c, const json_t *root, const char *key, const named_tab *t)
{
    json_t *arr = NULL;
    size_t n = 0;
    SP_CHECK(get_str_list(c, root, key, &arr, &n));
    char p[64];
    snprintf(p, sizeof p, "/%s", key);
    for (size_t i = 0; i < n; i++) {
        char k[24];
        snprintf(k, sizeof k, "%zu", i);
        int64_t at;
        int is_new;
        SP_CHECK(intern_name(c, p, k, t, str_at(arr, i), &at, &is_new));
        if (!is_new) return spi_json_fail(c, SP_EPARSE, p, k, "same name as /%s/%" PRId64, key, at);
    }
    return SP_OK;
}

/* The layout l (text form or JSON object) into the spec's layout table; a
 * layout already there (same canonical text) gives its entry, *is_new 0. */
static sp_status intern_layout(const spi_jctx *c, const char *prefix, const char *key, const json_t *l,
                               sp_sweep_spec *s, int64_t *index, int *is_new)
{
    sp_layout lay;
    sp_error e;
    sp_error_init(&e);
    sp_status st = json_is_string(l) ? sp_layout_parse(json_string_value(l), &lay, &e)
                   : json_is_object(l) ? sp_layout_from_json(l, &lay, &e)
                                       : spi_error_set(&e, SP_EPARSE, NULL, 0, 0, NULL,
                                                       "must be a layout string or object");
    if (st != SP_OK) {
        char msg[400];
        sp_error_format(&e, msg, sizeof msg);
        return spi_json_fail(c, SP_EPARSE, prefix, key, "%s", msg);
    }
    char text[LAYOUT_TEXT];
    sp_layout_format(&lay, text, sizeof text);
    int64_t n = s->n[AX_LAYOUT];
    for (int64_t i = 0; i < n; i++)
        if (!strcmp(s->layout_text[i], text)) {
            *index = i;
            *is_new = 0;
            return SP_OK;
        }
    SP_CHECK(grow((void **)&s->layouts, n, sizeof *s->layouts));
    SP_CHECK(grow((void **)&s->layout_text, n, sizeof *s->layout_text));
    s->layouts[n] = lay;
    memcpy(s->layout_text[n], text, sizeof text);
    s->n[AX_LAYOUT] = n + 1;
    *index = n;
    *is_new = 1;
    return SP_OK;
}

/* The spec's weight precisions, in sp_plan_weights order. */
static const char *const weights_names[SP_PLAN_W_COUNT] = {"auto", "bf16", "int8", "fp8"};

/* Plan options shared by "plan" and "frontier"; refused with "estimate".
 * "fleet" reads its own: objective cost or chips, weights, the targets. */
static sp_status get_plan_opts(const spi_jctx *c, json_t *root, sp_sweep_spec *s)
{
    static const char *const plan_keys[] = {"objective", "latency_metric", "cost_metric", "weights"};
    static const char *const fleet_keys[] = {"rate", "ttft_ms", "tpot_ms", "util_cap"};
    sp_plan_opts_init(&s->popts);
    sp_fleet_opts_init(&s->fopts);
    if (s->compute != SP_SWEEP_FLEET) {
        for (size_t i = 0; i < sizeof fleet_keys / sizeof fleet_keys[0]; i++)
            if (json_object_get(root, fleet_keys[i]))
                return spi_json_fail(c, SP_EPARSE, "", fleet_keys[i], "goes with \"compute\": \"fleet\"");
    } else {
        /* fleet: objective cost or chips, the targets, the cap and the weights */
        for (int i = 1; i < 3; i++)
            if (json_object_get(root, plan_keys[i]))
                return spi_json_fail(c, SP_EPARSE, "", plan_keys[i], "goes with \"compute\": \"plan\" or "
                                                                    "\"frontier\" (a fleet meets ttft_ms and tpot_ms)");
        static const char *const fobj[] = {"cost", "chips"};
        int v = 0;
        SP_CHECK(spi_json_get_enum(c, "", root, "objective", 0, fobj, 2, &v));
        s->fopts.objective = (sp_fleet_objective)v;
        v = 0;
        SP_CHECK(spi_json_get_enum(c, "", root, "weights", 0, weights_names, 4, &v));
        s->fopts.weights = (sp_plan_weights)v;
        double ms = 0;
        SP_CHECK(spi_json_get_num(c, "", root, "ttft_ms", 0, 1, 0, 1e9, "milliseconds > 0", &ms));
        s->fopts.ttft_s = ms * 1e-3;
        ms = 0;
        SP_CHECK(spi_json_get_num(c, "", root, "tpot_ms", 0, 1, 0, 1e9, "milliseconds > 0", &ms));
        s->fopts.tpot_s = ms * 1e-3;
        SP_CHECK(spi_json_get_num(c, "", root, "util_cap", 0, 1, 0, 0.999999, "a fraction in (0, 1)",
                                  &s->fopts.util_cap));
        s->fopts.alternatives = 0;   /* one fleet per point: the alternatives answer another question */
        return SP_OK;
    }
    if (s->compute == SP_SWEEP_ESTIMATE) {
        for (size_t i = 0; i < sizeof plan_keys / sizeof plan_keys[0]; i++)
            if (json_object_get(root, plan_keys[i]))
                return spi_json_fail(c, SP_EPARSE, "", plan_keys[i], "goes with \"compute\": \"plan\" or "
                                                                    "\"frontier\" (estimate prices the given layouts)");
        return SP_OK;
    }
    static const char *const obj[] = {"latency", "cost", "throughput"};
    static const char *const lat[] = {"total", "decode", "prefill"};
    static const char *const cm[] = {"total", "phase"};
    int v = 0;
    SP_CHECK(spi_json_get_enum(c, "", root, "objective", 0, obj, 3, &v));
    s->popts.objective = (sp_plan_objective)v;
    v = 0;
    SP_CHECK(spi_json_get_enum(c, "", root, "latency_metric", 0, lat, 3, &v));
    s->popts.latency_metric = (sp_plan_latency)v;
    v = 0;
    SP_CHECK(spi_json_get_enum(c, "", root, "cost_metric", 0, cm, 2, &v));
    s->popts.cost_metric = (sp_plan_cost_metric)v;
    v = 0;
    SP_CHECK(spi_json_get_enum(c, "", root, "weights", 0, weights_names, 4, &v));
    s->popts.weights = (sp_plan_weights)v;
    /* plan: one layout per point; frontier: one frontier per point; the
     * rivals and the chip-count search are plan's answers to other questions */
    s->popts.frontier = 1;   /* sp_plan_frontier traces it; plan's own is left off below */
    if (s->compute == SP_SWEEP_PLAN) s->popts.frontier = 0;
    s->popts.rivals = 0;
    s->popts.search_min_chips = 0;
    return SP_OK;
}

/* fleet: "rate", a number or an array of numbers > 0 (requests/s), none
 * given twice; and a prompt and a generation of at least one token. */
static sp_status get_rates(const spi_jctx *c, json_t *root, sp_sweep_spec *s)
{
    json_t *v = json_object_get(root, "rate");
    if (!v) return spi_json_fail(c, SP_EPARSE, "", "rate", "missing field (requests/s: a number or an array)");
    size_t k = json_is_array(v) ? json_array_size(v) : 1;
    if (k == 0 || k > SWEEP_MAX_AXIS) return spi_json_fail(c, SP_EPARSE, "", "rate", "must hold 1 to %d values", SWEEP_MAX_AXIS);
    if (!(s->rates = calloc(k, sizeof *s->rates))) return spi_fail(SP_ENOMEM, "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
        char ik[24];
        snprintf(ik, sizeof ik, "%zu", i);
        if (!json_is_number(x) || !(json_number_value(x) > 0) || !(json_number_value(x) < 1e12))
            return json_is_array(v) ? spi_json_fail(c, SP_EPARSE, "/rate", ik, "must be a number of requests/s > 0")
                                    : spi_json_fail(c, SP_EPARSE, "", "rate", "must be a number of requests/s > 0");
        s->rates[i] = json_number_value(x);
        for (size_t j = 0; j < i; j++)
            if (s->rates[j] == s->rates[i])
                return spi_json_fail(c, SP_EPARSE, "/rate", ik, "value %.17g given twice", s->rates[i]);
    }
    s->n[AX_LAYOUT] = (int64_t)k;
    for (int a = 2; a < 4; a++)
        for (int64_t i = 0; i < s->n[AX_PROMPT + a - 2]; i++)
            if (s->vals[a][i] < 1)
                return spi_json_fail(c, SP_EPARSE, "", a == 2 ? "prompt" : "gen", "a fleet serves requests of at "
                                     "least one prompt and one generated token");
    return SP_OK;
}

/* The grid form: axes models × hw × chips × batch × prompt × gen (× layouts). */
static sp_status grid_from_json(const spi_jctx *c, json_t *root, sp_sweep_spec *s, const named_tab *mt,
                                const named_tab *ht)
{
    SP_CHECK(get_named(c, root, "models", mt));
    SP_CHECK(get_named(c, root, "hw", ht));
    SP_CHECK(get_axis(c, root, "chips", 1, 1 << 20, &s->vals[0], &s->n[AX_CHIPS]));
    SP_CHECK(get_axis(c, root, "batch", 1, 1 << 24, &s->vals[1], &s->n[AX_BATCH]));
    SP_CHECK(get_axis(c, root, "prompt", 0, 1 << 24, &s->vals[2], &s->n[AX_PROMPT]));
    SP_CHECK(get_axis(c, root, "gen", 0, 1 << 24, &s->vals[3], &s->n[AX_GEN]));
    if (s->compute == SP_SWEEP_FRONTIER) {
        /* one frontier per (model, hw, prompt, gen) across every chips and
         * batch value (as the frontier verb): those axes become one 0 each */
        if (s->n[AX_CHIPS] * s->n[AX_BATCH] > SWEEP_MAX_FRONTIER_PAIRS)
            return spi_json_fail(c, SP_EINVAL, "", "chips", "a frontier over %" PRId64 " chips x %" PRId64
                                 " batch values: at most %d pairs", s->n[AX_CHIPS], s->n[AX_BATCH],
                                 SWEEP_MAX_FRONTIER_PAIRS);
        s->n_fr_chips = (int)s->n[AX_CHIPS];
        s->n_fr_batch = (int)s->n[AX_BATCH];
        s->fr_batch = s->vals[1];
        if (!(s->fr_chips = calloc((size_t)s->n_fr_chips, sizeof *s->fr_chips)))
            return spi_fail(SP_ENOMEM, "out of memory");
        for (int i = 0; i < s->n_fr_chips; i++) s->fr_chips[i] = (int)s->vals[0][i];
        free(s->vals[0]);
        s->vals[0] = calloc(1, sizeof *s->vals[0]);
        s->vals[1] = calloc(1, sizeof *s->vals[1]);
        if (!s->vals[0] || !s->vals[1]) return spi_fail(SP_ENOMEM, "out of memory");
        s->n[AX_CHIPS] = s->n[AX_BATCH] = 1;
    }
    json_t *lay = json_object_get(root, "layouts");
    if (s->compute == SP_SWEEP_FLEET) SP_CHECK(get_rates(c, root, s));
    if (s->compute == SP_SWEEP_ESTIMATE) {
        if (!lay) return spi_json_fail(c, SP_EPARSE, "", "layouts", "missing field (\"compute\": \"estimate\" "
                                                                    "prices these layouts)");
        if (!json_is_array(lay) || json_array_size(lay) == 0)
            return spi_json_fail(c, SP_EPARSE, "", "layouts", "must be a non-empty array of layouts (text form "
                                                             "or JSON objects)");
        for (size_t i = 0; i < json_array_size(lay); i++) {
            char k[24];
            snprintf(k, sizeof k, "%zu", i);
            int64_t at;
            int is_new;
            SP_CHECK(intern_layout(c, "/layouts", k, json_array_get(lay, i), s, &at, &is_new));
            if (!is_new) return spi_json_fail(c, SP_EPARSE, "/layouts", k, "same layout as /layouts/%" PRId64, at);
        }
    } else {
        if (lay) return spi_json_fail(c, SP_EPARSE, "", "layouts", "goes with \"compute\": \"estimate\" (%s "
                                      "searches the layouts)", compute_names[s->compute]);
        if (s->compute != SP_SWEEP_FLEET) s->n[AX_LAYOUT] = 1;
    }
    /* every combination must be able to price something */
    for (int64_t i = 0; i < s->n[AX_PROMPT]; i++)
        if (s->vals[2][i] == 0)
            for (int64_t j = 0; j < s->n[AX_GEN]; j++)
                if (s->vals[3][j] == 0)
                    return spi_json_fail(c, SP_EPARSE, "", "gen", "prompt 0 with gen 0 prices nothing: give a "
                                                                 "prompt or generated tokens");
    int64_t pts = 1;
    for (int a = 0; a < AX_COUNT; a++)
        if (__builtin_mul_overflow(pts, s->n[a], &pts) || pts > SWEEP_MAX_POINTS)
            return spi_json_fail(c, SP_EINVAL, "", "", "more than %" PRId64 " points", SWEEP_MAX_POINTS);
    s->points = pts;
    return SP_OK;
}

/* A listed point's key for finding two points with the same inputs. */
typedef struct pt_key {
    int64_t k[AX_COUNT];             /* model and hw entries, chips, batch, prompt, gen, layout entry */
    int64_t i;                       /* position in the list */
} pt_key;

static int cmp_pt_key(const void *a, const void *b)
{
    const pt_key *x = a, *y = b;
    for (int i = 0; i < AX_COUNT; i++)
        if (x->k[i] != y->k[i]) return x->k[i] < y->k[i] ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The list form: {"points": [{"model", "hw", "chips", "batch", "prompt",
 * "gen"[, "layout"]}, ...]}.  Point i is list element i: s->pt[i] indexes
 * the model, hardware and layout tables, and vals[a][i] holds its numbers. */
static sp_status list_from_json(const spi_jctx *c, json_t *root, sp_sweep_spec *s, const named_tab *mt,
                                const named_tab *ht)
{
    static const char *const grid_keys[] = {"models", "hw", "chips", "batch", "prompt", "gen", "layouts"};
    for (size_t i = 0; i < sizeof grid_keys / sizeof grid_keys[0]; i++)
        if (json_object_get(root, grid_keys[i]))
            return spi_json_fail(c, SP_EPARSE, "", grid_keys[i], "a spec is a grid or a list of \"points\", not "
                                                                "both: give each point its own values");
    if (s->compute == SP_SWEEP_FRONTIER || s->compute == SP_SWEEP_FLEET)
        return spi_json_fail(c, SP_ENOTSUP, "", "points", "a list of points with \"compute\": \"%s\" is not "
                             "implemented: give its points as a grid", compute_names[s->compute]);
    json_t *pts = json_object_get(root, "points");
    if (!json_is_array(pts) || json_array_size(pts) == 0)
        return spi_json_fail(c, SP_EPARSE, "", "points", "must be a non-empty array of point objects");
    size_t n = json_array_size(pts);
    if (n > SWEEP_MAX_LIST) return spi_json_fail(c, SP_EINVAL, "", "points", "more than %d points", SWEEP_MAX_LIST);
    s->pt = calloc(n, sizeof *s->pt);
    for (int a = 0; a < 4; a++) s->vals[a] = calloc(n, sizeof *s->vals[a]);
    if (!s->pt || !s->vals[0] || !s->vals[1] || !s->vals[2] || !s->vals[3]) return spi_fail(SP_ENOMEM, "out of memory");
    static const char *const keys[] = {"model", "hw", "chips", "batch", "prompt", "gen", "layout", NULL};
    static const int64_t lo[4] = {1, 1, 0, 0}, hi[4] = {1 << 20, 1 << 24, 1 << 24, 1 << 24};
    for (size_t i = 0; i < n; i++) {
        char p[48];
        snprintf(p, sizeof p, "/points/%zu", i);
        json_t *o = json_array_get(pts, i);
        SP_CHECK(spi_json_expect_object(c, p, o));
        SP_CHECK(spi_json_check_keys(c, p, o, keys));
        char name[128];
        int is_new;
        SP_CHECK(spi_json_get_str(c, p, o, "model", 1, name, sizeof name));
        SP_CHECK(intern_name(c, p, "model", mt, name, &s->pt[i][AX_MODEL], &is_new));
        SP_CHECK(spi_json_get_str(c, p, o, "hw", 1, name, sizeof name));
        SP_CHECK(intern_name(c, p, "hw", ht, name, &s->pt[i][AX_HW], &is_new));
        for (int a = 0; a < 4; a++) {
            SP_CHECK(spi_json_get_int(c, p, o, grid_keys[2 + a], 1, lo[a], hi[a], "integer", &s->vals[a][i]));
            s->pt[i][AX_CHIPS + a] = (int64_t)i;
        }
        if (s->vals[2][i] == 0 && s->vals[3][i] == 0)
            return spi_json_fail(c, SP_EPARSE, p, "gen", "prompt 0 with gen 0 prices nothing: give a prompt or "
                                                        "generated tokens");
        json_t *l = json_object_get(o, "layout");
        if (s->compute == SP_SWEEP_ESTIMATE) {
            if (!l) return spi_json_fail(c, SP_EPARSE, p, "layout", "missing field (\"compute\": \"estimate\" "
                                                                   "prices each point's layout)");
            SP_CHECK(intern_layout(c, p, "layout", l, s, &s->pt[i][AX_LAYOUT], &is_new));
        } else if (l) {
            return spi_json_fail(c, SP_EPARSE, p, "layout", "goes with \"compute\": \"estimate\" (%s searches "
                                                            "the layouts)", compute_names[s->compute]);
        }
    }
    /* two points with the same inputs would share one row: refused */
    pt_key *keyv = calloc(n, sizeof *keyv);
    if (!keyv) return spi_fail(SP_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        for (int a = 0; a < AX_COUNT; a++) keyv[i].k[a] = s->pt[i][a];
        for (int a = 0; a < 4; a++) keyv[i].k[AX_CHIPS + a] = s->vals[a][i];
        keyv[i].i = (int64_t)i;
    }
    qsort(keyv, n, sizeof *keyv, cmp_pt_key);
    sp_status st = SP_OK;
    for (size_t i = 1; i < n && st == SP_OK; i++)
        if (!memcmp(keyv[i].k, keyv[i - 1].k, sizeof keyv[i].k)) {
            char k[24];
            snprintf(k, sizeof k, "%" PRId64, keyv[i].i);
            st = spi_json_fail(c, SP_EPARSE, "/points", k, "the same point as /points/%" PRId64, keyv[i - 1].i);
        }
    free(keyv);
    SP_CHECK(st);
    s->points = (int64_t)n;
    return SP_OK;
}

static sp_status spec_from_json(const spi_jctx *c, json_t *root, sp_sweep_spec *s)
{
    SP_CHECK(spi_json_expect_object(c, "", root));
    static const char *const keys[] = {"version", "models", "hw", "chips", "batch", "prompt", "gen", "compute",
                                       "layouts", "points", "objective", "latency_metric", "cost_metric",
                                       "weights", "description", "rate", "ttft_ms", "tpot_ms", "util_cap", NULL};
    SP_CHECK(spi_json_check_keys(c, "", root, keys));
    int64_t version = 1;
    SP_CHECK(spi_json_get_int(c, "", root, "version", 0, 1, 1, "1 (the spec format this build reads)", &version));
    int ci;
    SP_CHECK(spi_json_get_enum(c, "", root, "compute", 1, compute_names, SP_SWEEP_COMPUTE_COUNT, &ci));
    s->compute = (sp_sweep_compute)ci;
    SP_CHECK(get_plan_opts(c, root, s));
    /* the tables belong to the spec whether or not every name resolved:
     * sp_sweep_spec_free frees them on the error path too */
    named_tab mt = {&s->n[AX_MODEL], &s->model_name, (void **)&s->models, sizeof *s->models, find_model, "model"};
    named_tab ht = {&s->n[AX_HW], &s->hw_name, (void **)&s->hw, sizeof *s->hw, find_hw, "hardware"};
    if (json_object_get(root, "points")) SP_CHECK(list_from_json(c, root, s, &mt, &ht));
    else SP_CHECK(grid_from_json(c, root, s, &mt, &ht));
    if (s->compute != SP_SWEEP_ESTIMATE && !s->n[AX_LAYOUT]) s->n[AX_LAYOUT] = 1;
    s->canon = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (!s->canon) return spi_fail(SP_ENOMEM, "out of memory");
    return SP_OK;
}

static sp_status spec_load(json_t *root, const char *source, sp_sweep_spec **out, sp_error *err)
{
    sp_sweep_spec *s = calloc(1, sizeof *s);
    if (!s) {
        json_decref(root);
        return spi_fail(SP_ENOMEM, "out of memory");
    }
    spi_jctx c = {source, err};
    sp_status st = spec_from_json(&c, root, s);
    json_decref(root);
    if (st != SP_OK) {
        sp_sweep_spec_free(s);
        return st;
    }
    *out = s;
    return SP_OK;
}

sp_status sp_sweep_spec_load_file(const char *path, sp_sweep_spec **out, sp_error *err)
{
    json_t *root;
    SP_CHECK(spi_json_load_file(path, &root, err));
    return spec_load(root, path, out, err);
}

sp_status sp_sweep_spec_loads(const char *text, sp_sweep_spec **out, sp_error *err)
{
    json_t *root;
    SP_CHECK(spi_json_loads(text, "<string>", &root, err));
    return spec_load(root, "<string>", out, err);
}

void sp_sweep_opts_init(sp_sweep_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->jobs = 1;
    o->batch_rows = 4096;
}

/* ---- one point ------------------------------------------------------------ */

typedef enum { ROW_OK = 0, ROW_NOT_APPLICABLE = 1, ROW_NO_LAYOUT = 2 } row_status;
static const char *const row_status_names[] = {"ok", "not_applicable", "no_layout"};

typedef struct row {
    int64_t idx;
    int64_t ax[AX_COUNT];            /* index on each axis */
    row_status status;
    int has_cost;
    int plan_result;                 /* sp_plan_result, -1 for estimate */
    int64_t candidates;
    sp_cost cost;
    char layout[LAYOUT_TEXT];        /* priced or chosen layout ("" when none) */
    char message[256];
    char *frontier;                  /* frontier: its JSON text; fleet: the pools' (owned; NULL otherwise) */
    int has_fleet;                   /* fleet: a fleet was found */
    int64_t fleet_chips;
    double fleet_cost_per_hour, fleet_cost_per_mtok;
} row;

static void point_axes(const sp_sweep_spec *s, int64_t idx, int64_t ax[AX_COUNT])
{
    if (s->pt) {
        memcpy(ax, s->pt[idx], sizeof s->pt[idx]);
        return;
    }
    for (int a = AX_COUNT - 1; a >= 0; a--) {
        ax[a] = idx % s->n[a];
        idx /= s->n[a];
    }
}

/* The plan's frontier as compact JSON, latency descending (doc/sweep.md):
 * [{"chips", "batch", "layout", "latency_s", "cost_s", "prefill_s", "decode_step_s",
 *   "total_s", "tokens_per_s", "mem_total"}, ...].  New string (free), or
 * NULL when out of memory. */
static char *frontier_json(const sp_plan *p)
{
    json_t *a = json_array();
    for (int i = 0; a && i < p->n_frontier; i++) {
        const sp_plan_point *q = &p->frontier[i];
        char text[LAYOUT_TEXT];
        sp_layout_format(&q->layout, text, sizeof text);
        json_t *o = json_pack("{s:i, s:I, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:I}", "chips", q->chips, "batch",
                              (json_int_t)q->batch, "layout", text, "latency_s", q->latency_s,
                              "cost_s", q->cost_s, "prefill_s", q->cost.prefill_s, "decode_step_s",
                              q->cost.decode_step_s, "total_s", q->cost.total_s, "tokens_per_s",
                              q->cost.tokens_per_s, "mem_total", (json_int_t)q->cost.mem.total);
        if (!o || json_array_append_new(a, o) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    char *text = a ? json_dumps(a, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(a);
    return text;
}

/* fleet: the point's chip kind alone, instances of up to `chips` chips and
 * batches up to `batch`, the spec's targets; the pools as the JSON array of
 * `shardplan fleet --json`'s "pools". */
static void compute_fleet(const sp_sweep_spec *s, const sp_model *m, const sp_hw *hw, int chips,
                          const sp_workload *w, row *r)
{
    sp_fleet_opts o = s->fopts;
    o.max_instance_chips = chips;
    o.max_batch = w->batch;
    sp_fleet_kind k = {.hw = hw, .available = 0};
    sp_fleet_request q = {.rate = s->rates[r->ax[AX_LAYOUT]], .prompt = w->prompt, .gen = w->gen};
    sp_fleet *f;
    if (sp_fleet_solve(m, &k, 1, &q, &o, &f) != SP_OK) {
        r->status = ROW_NOT_APPLICABLE;
        snprintf(r->message, sizeof r->message, "%s", sp_last_error());
        return;
    }
    r->plan_result = (int)f->result;
    for (int i = 0; i < SP_FLEET_ROLE_COUNT; i++) r->candidates += f->stats.candidates[i];
    if (!f->best.found) {
        r->status = ROW_NO_LAYOUT;
        snprintf(r->message, sizeof r->message, "%s: no fleet of %s serves %.6g requests/s within the targets%s%.120s",
                 sp_plan_result_name(f->result), hw->name, q.rate, f->notes[0] ? "; " : "", f->notes);
        sp_fleet_free(f);
        return;
    }
    json_t *j = sp_fleet_to_json(f);
    r->frontier = j ? json_dumps(json_object_get(j, "pools"), JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!r->frontier) {
        r->status = ROW_NOT_APPLICABLE;
        snprintf(r->message, sizeof r->message, "the fleet could not be written as JSON (out of memory)");
    } else {
        r->status = ROW_OK;
        r->has_fleet = 1;
        r->fleet_chips = f->best.chips;
        r->fleet_cost_per_hour = f->best.cost_per_hour;
        r->fleet_cost_per_mtok = f->best.cost_per_mtok;
    }
    sp_fleet_free(f);
}

static void compute_point(const sp_sweep_spec *s, sp_cost_cache *cache, int64_t idx, row *r)
{
    r->idx = idx;
    point_axes(s, idx, r->ax);
    r->has_cost = 0;
    r->plan_result = -1;
    r->candidates = 0;
    r->layout[0] = r->message[0] = 0;
    r->frontier = NULL;
    r->has_fleet = 0;
    const sp_model *m = &s->models[r->ax[AX_MODEL]];
    const sp_hw *hw = &s->hw[r->ax[AX_HW]];
    int chips = (int)s->vals[0][r->ax[AX_CHIPS]];
    sp_workload w = {.batch = s->vals[1][r->ax[AX_BATCH]], .prompt = s->vals[2][r->ax[AX_PROMPT]],
                     .gen = s->vals[3][r->ax[AX_GEN]]};
    if (s->compute == SP_SWEEP_ESTIMATE) {
        const sp_layout *l = &s->layouts[r->ax[AX_LAYOUT]];
        if (sp_layout_chips(l) != chips) {
            r->status = ROW_NOT_APPLICABLE;
            snprintf(r->message, sizeof r->message, "layout has %lld chips, the point %d", (long long)sp_layout_chips(l), chips);
            return;
        }
        sp_cost_opts co;
        sp_cost_opts_init(&co);
        co.cache = cache;
        if (sp_cost_eval(m, hw, l, &w, &co, &r->cost) != SP_OK) {
            r->status = ROW_NOT_APPLICABLE;
            snprintf(r->message, sizeof r->message, "%s", sp_last_error());
            return;
        }
        r->status = ROW_OK;
        r->has_cost = 1;   /* layout stays "": the priced layout is layout_in */
        return;
    }
    if (s->compute == SP_SWEEP_FLEET) {
        compute_fleet(s, m, hw, chips, &w, r);
        return;
    }
    sp_plan *p = NULL;
    if (s->compute == SP_SWEEP_FRONTIER) {
        if (sp_plan_frontier(m, hw, s->fr_chips, s->n_fr_chips, s->fr_batch, s->n_fr_batch, &w, &s->popts, &p) !=
            SP_OK) {
            r->status = ROW_NOT_APPLICABLE;
            snprintf(r->message, sizeof r->message, "%s", sp_last_error());
            return;
        }
        r->plan_result = (int)p->result;
        r->candidates = p->stats.candidates;
        if (p->n_frontier > 0 && (r->frontier = frontier_json(p))) {
            r->status = ROW_OK;
        } else if (p->n_frontier > 0) {
            r->status = ROW_NOT_APPLICABLE;
            snprintf(r->message, sizeof r->message, "the frontier could not be written as JSON (out of memory or "
                     "a figure not finite)");
        } else {
            r->status = ROW_NO_LAYOUT;
            snprintf(r->message, sizeof r->message, "%s: no layout fits at any of the chip counts and batches",
                     sp_plan_result_name(p->result));
        }
        sp_plan_free(p);
        return;
    }
    if (sp_plan_solve(m, hw, chips, &w, &s->popts, &p) != SP_OK) {
        r->status = ROW_NOT_APPLICABLE;
        snprintf(r->message, sizeof r->message, "%s", sp_last_error());
        return;
    }
    r->plan_result = (int)p->result;
    r->candidates = p->stats.candidates;
    if (p->has_chosen) {
        r->status = ROW_OK;
        r->has_cost = 1;
        r->cost = p->chosen.cost;
        sp_layout_format(&p->chosen.layout, r->layout, sizeof r->layout);
    } else {
        r->status = ROW_NO_LAYOUT;
        if (p->result == SP_PLAN_INFEASIBLE && p->min_shortfall_bytes < 0)
            snprintf(r->message, sizeof r->message, "no layout applies to %d chips of %s", chips, hw->name);
        else if (p->result == SP_PLAN_INFEASIBLE)
            snprintf(r->message, sizeof r->message, "no layout fits: short by %" PRId64 " bytes at best",
                     p->min_shortfall_bytes);
        else
            snprintf(r->message, sizeof r->message, "%s", sp_plan_result_name(p->result));
    }
    sp_plan_free(p);
}

/* ---- the database ------------------------------------------------------------ */

/* Columns of `points`, schema version 3 (doc/sweep.md lists them with units;
 * version 1 had every column up to capacity, version 2 added frontier,
 * version 3 the five after it).
 * The key is the point's inputs (UNIQUE); idx, the point's number in the
 * spec, is the rowid, so rows are stored in spec order and the table costs
 * one B-tree besides the key's index. */
static const char points_ddl[] =
    "CREATE TABLE IF NOT EXISTS points ("
    "idx INTEGER PRIMARY KEY, model TEXT NOT NULL, hw TEXT NOT NULL, chips INTEGER NOT NULL, "
    "batch INTEGER NOT NULL, prompt INTEGER NOT NULL, gen INTEGER NOT NULL, compute TEXT NOT NULL, "
    "layout_in TEXT NOT NULL, status TEXT NOT NULL, message TEXT, plan_result TEXT, candidates INTEGER, "
    "layout TEXT, feasible INTEGER, shortfall_bytes INTEGER, prefill_s REAL, decode_step_s REAL, "
    "decode_s REAL, total_s REAL, tokens_per_s REAL, mfu REAL, mfu_prefill REAL, mfu_decode REAL, "
    "cost_chip_s_per_token REAL, comm_bytes_prefill INTEGER, comm_bytes_decode_step INTEGER, "
    "prefill_compute_s REAL, prefill_memory_s REAL, prefill_comm_s REAL, "
    "decode_compute_s REAL, decode_memory_s REAL, decode_comm_s REAL, "
    "mem_weights INTEGER, mem_gathered_weights INTEGER, mem_kv INTEGER, mem_activations INTEGER, "
    "mem_workspace INTEGER, mem_total INTEGER, capacity INTEGER, frontier TEXT, "
    "rate REAL NOT NULL DEFAULT 0, fleet_chips INTEGER, fleet_cost_per_hour REAL, fleet_cost_per_mtok REAL, "
    "fleet TEXT, "
    "UNIQUE (model, hw, chips, batch, prompt, gen, compute, layout_in))";
#define N_COLS 41         /* the cost columns end before this one: frontier */
#define N_COLS_ALL 46     /* frontier, rate, fleet_chips, fleet_cost_per_hour, fleet_cost_per_mtok, fleet */
/* version 2 -> 3: the columns appended after frontier (as in points_ddl) */
static const char *const v3_columns[] = {"rate REAL NOT NULL DEFAULT 0", "fleet_chips INTEGER",
                                         "fleet_cost_per_hour REAL", "fleet_cost_per_mtok REAL", "fleet TEXT"};

static sp_status db_fail(sqlite3 *db, const char *what)
{
    return spi_fail(SP_EIO, "sweep database: %s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
}

static sp_status db_exec(sqlite3 *db, const char *sql)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) return db_fail(db, sql);
    return SP_OK;
}

/* The meta value for key into a new string (NULL when absent). */
static sp_status meta_get(sqlite3 *db, const char *key, char **out)
{
    sqlite3_stmt *q;
    *out = NULL;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &q, NULL) != SQLITE_OK)
        return db_fail(db, "reading meta");
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sp_status st = SP_OK;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(q, 0);
        if (v && !(*out = strdup(v))) st = spi_fail(SP_ENOMEM, "out of memory");
    } else if (rc != SQLITE_DONE) {
        st = db_fail(db, "reading meta");
    }
    sqlite3_finalize(q);
    return st;
}

static sp_status meta_put(sqlite3 *db, const char *key, const char *value)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, "INSERT INTO meta (key, value) VALUES (?, ?)", -1, &q, NULL) != SQLITE_OK)
        return db_fail(db, "writing meta");
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, value, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? SP_OK : db_fail(db, "writing meta");
}

/* Creates the schema or checks the one there: same version, same spec. */
static sp_status db_prepare(sqlite3 *db, const char *path, const sp_sweep_spec *s)
{
    SP_CHECK(db_exec(db, "BEGIN IMMEDIATE"));
    sp_status st;
    char *ver = NULL, *spec = NULL;
    SP_CHECKGOTO(db_exec(db, "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"), st,
                 fail);
    SP_CHECKGOTO(meta_get(db, "schema_version", &ver), st, fail);
    if (!ver) {
        char v[16];
        snprintf(v, sizeof v, "%d", SP_SWEEP_SCHEMA_VERSION);
        SP_CHECKGOTO(db_exec(db, points_ddl), st, fail);
        SP_CHECKGOTO(meta_put(db, "schema_version", v), st, fail);
        SP_CHECKGOTO(meta_put(db, "spec", s->canon), st, fail);
        SP_CHECKGOTO(meta_put(db, "library_version", sp_version()), st, fail);
    } else {
        int v = atoi(ver);
        if (v == 1) {
            /* version 1 -> 2: the frontier column, appended (NULL in every
             * row: version 1 computed no frontiers) */
            SP_CHECKGOTO(db_exec(db, "ALTER TABLE points ADD COLUMN frontier TEXT"), st, fail);
            SP_CHECKGOTO(db_exec(db, "UPDATE meta SET value = '2' WHERE key = 'schema_version'"), st, fail);
            v = 2;
        }
        if (v == 2) {
            /* version 2 -> 3: the fleet columns, appended (rate 0 and the
             * others NULL in every row: version 2 computed no fleets; rate
             * is not part of the key, a fleet row's layout_in holds it) */
            for (size_t i = 0; i < sizeof v3_columns / sizeof v3_columns[0]; i++) {
                char sql[128];
                snprintf(sql, sizeof sql, "ALTER TABLE points ADD COLUMN %s", v3_columns[i]);
                SP_CHECKGOTO(db_exec(db, sql), st, fail);
            }
            SP_CHECKGOTO(db_exec(db, "UPDATE meta SET value = '3' WHERE key = 'schema_version'"), st, fail);
        } else if (v != SP_SWEEP_SCHEMA_VERSION) {
            st = spi_fail(SP_EINVAL, "%s: sweep schema version %s, this build reads versions 1 to %d: use a new "
                          "--db or a newer shardplan", path, ver, SP_SWEEP_SCHEMA_VERSION);
            goto fail;
        }
        SP_CHECKGOTO(meta_get(db, "spec", &spec), st, fail);
        if (!spec || strcmp(spec, s->canon)) {
            st = spi_fail(SP_EINVAL, "%s holds the points of another sweep spec (meta.spec differs): resume with "
                          "the same spec or use a new --db", path);
            goto fail;
        }
    }
    free(ver);
    free(spec);
    return db_exec(db, "COMMIT");
fail:
    free(ver);
    free(spec);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

static sp_status db_open(const char *path, int create, sqlite3 **out)
{
    SP_CHECK(sq_open());
    sqlite3 *db = NULL;
    int flags = create ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
    if (sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sp_status st = spi_fail(SP_EIO, "%s: cannot open: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return st;
    }
    sqlite3_busy_timeout(db, 10000);
    *out = db;
    return SP_OK;
}

/* Binds the cost columns from k on (NULL when the row has no cost) up to the
 * last one before frontier; returns the next column. */
static int bind_cost(sqlite3_stmt *q, int k, const row *r)
{
    const sp_cost *c = &r->cost;
    if (!r->has_cost) {
        for (int i = k; i < N_COLS; i++) sqlite3_bind_null(q, i);
        return N_COLS;
    }
    if (r->layout[0]) sqlite3_bind_text(q, k++, r->layout, -1, SQLITE_STATIC);
    else sqlite3_bind_null(q, k++);
    sqlite3_bind_int(q, k++, c->feasible);
    sqlite3_bind_int64(q, k++, c->shortfall_bytes);
    const double d[] = {c->prefill_s, c->decode_step_s, c->decode_s, c->total_s, c->tokens_per_s, c->mfu,
                        c->mfu_prefill, c->mfu_decode, c->cost_chip_s_per_token};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) sqlite3_bind_double(q, k++, d[i]);
    sqlite3_bind_int64(q, k++, c->comm_bytes_prefill);
    sqlite3_bind_int64(q, k++, c->comm_bytes_decode_step);
    const double t[] = {c->prefill.compute_s, c->prefill.memory_s, c->prefill.comm_s,
                        c->decode.compute_s,  c->decode.memory_s,  c->decode.comm_s};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) sqlite3_bind_double(q, k++, t[i]);
    const int64_t b[] = {c->mem.weights, c->mem.gathered_weights, c->mem.kv, c->mem.activations,
                         c->mem.workspace, c->mem.total, c->capacity};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) sqlite3_bind_int64(q, k++, b[i]);
    return k;
}

static sp_status insert_row(sqlite3 *db, sqlite3_stmt *q, const sp_sweep_spec *s, const row *r)
{
    int k = 1;
    sqlite3_reset(q);
    sqlite3_bind_int64(q, k++, r->idx);
    sqlite3_bind_text(q, k++, s->model_name[r->ax[AX_MODEL]], -1, SQLITE_STATIC);
    sqlite3_bind_text(q, k++, s->hw_name[r->ax[AX_HW]], -1, SQLITE_STATIC);
    for (int a = 0; a < 4; a++) sqlite3_bind_int64(q, k++, s->vals[a][r->ax[AX_CHIPS + a]]);
    sqlite3_bind_text(q, k++, compute_names[s->compute], -1, SQLITE_STATIC);
    /* layout_in: estimate's layout; fleet's rate, which the key must tell apart (doc/sweep.md) */
    char rate_in[48] = "";
    if (s->compute == SP_SWEEP_FLEET) snprintf(rate_in, sizeof rate_in, "rate=%.17g", s->rates[r->ax[AX_LAYOUT]]);
    sqlite3_bind_text(q, k++, s->compute == SP_SWEEP_ESTIMATE ? s->layout_text[r->ax[AX_LAYOUT]] : rate_in, -1,
                      SQLITE_TRANSIENT);
    sqlite3_bind_text(q, k++, row_status_names[r->status], -1, SQLITE_STATIC);
    if (r->message[0]) sqlite3_bind_text(q, k++, r->message, -1, SQLITE_STATIC);
    else sqlite3_bind_null(q, k++);
    if (r->plan_result >= 0) {
        sqlite3_bind_text(q, k++, sp_plan_result_name((sp_plan_result)r->plan_result), -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, k++, r->candidates);
    } else {
        sqlite3_bind_null(q, k++);
        sqlite3_bind_null(q, k++);
    }
    k = bind_cost(q, k, r);   /* == N_COLS: the frontier column */
    int is_fleet = s->compute == SP_SWEEP_FLEET;
    if (r->frontier && !is_fleet) sqlite3_bind_text(q, k++, r->frontier, -1, SQLITE_STATIC);
    else sqlite3_bind_null(q, k++);
    sqlite3_bind_double(q, k++, is_fleet ? s->rates[r->ax[AX_LAYOUT]] : 0.0);
    if (r->has_fleet) {
        sqlite3_bind_int64(q, k++, r->fleet_chips);
        sqlite3_bind_double(q, k++, r->fleet_cost_per_hour);
        sqlite3_bind_double(q, k++, r->fleet_cost_per_mtok);
        sqlite3_bind_text(q, k++, r->frontier, -1, SQLITE_STATIC);
    } else {
        for (int i = 0; i < 4; i++) sqlite3_bind_null(q, k++);
    }
    if (sqlite3_step(q) != SQLITE_DONE) return db_fail(db, "inserting a point");
    return SP_OK;
}

/* ---- threads --------------------------------------------------------------- */

typedef struct block {
    struct block *next;
    int n;
    row rows[SWEEP_BLOCK];
} block;

typedef struct runner {
    const sp_sweep_spec *s;
    const uint8_t *done;             /* bitmap of idx with a row at the start */
    int64_t nblocks;
    atomic_llong next_block;
    atomic_int stop;                 /* the writer failed */
    pthread_mutex_t mu;
    pthread_cond_t ready;            /* a block was queued or a worker finished */
    pthread_cond_t room;             /* the queue has room */
    block *queue, *free_list;
    int queued, limit, workers_left;
} runner;

/* Frees what the block's rows own. */
static void block_clear(block *b)
{
    for (int i = 0; i < b->n; i++) {
        free(b->rows[i].frontier);
        b->rows[i].frontier = NULL;
    }
    b->n = 0;
}

static int is_done(const uint8_t *bits, int64_t i) { return bits[i >> 3] >> (i & 7) & 1; }

static void *worker_main(void *arg)
{
    runner *R = arg;
    sp_cost_cache *cache = NULL;   /* this worker's (estimate points); NULL: each evaluation makes its own */
    if (R->s->compute == SP_SWEEP_ESTIMATE && sp_cost_cache_create(&cache) != SP_OK) cache = NULL;
    for (;;) {
        int64_t b = atomic_fetch_add(&R->next_block, 1);
        if (b >= R->nblocks || atomic_load(&R->stop)) break;
        int64_t lo = b * SWEEP_BLOCK, hi = lo + SWEEP_BLOCK;
        if (hi > R->s->points) hi = R->s->points;
        int any = 0;
        for (int64_t i = lo; i < hi; i++) any |= !is_done(R->done, i);
        if (!any) continue;
        pthread_mutex_lock(&R->mu);
        while (R->queued >= R->limit && !atomic_load(&R->stop)) pthread_cond_wait(&R->room, &R->mu);
        block *bl = R->free_list;
        if (bl) R->free_list = bl->next;
        pthread_mutex_unlock(&R->mu);
        if (!bl && !(bl = malloc(sizeof *bl))) {
            atomic_store(&R->stop, 1);
            break;
        }
        bl->n = 0;
        for (int64_t i = lo; i < hi; i++)
            if (!is_done(R->done, i)) compute_point(R->s, cache, i, &bl->rows[bl->n++]);
        pthread_mutex_lock(&R->mu);
        bl->next = R->queue;
        R->queue = bl;
        R->queued++;
        pthread_cond_signal(&R->ready);
        pthread_mutex_unlock(&R->mu);
    }
    sp_cost_cache_free(cache);
    pthread_mutex_lock(&R->mu);
    R->workers_left--;
    pthread_cond_signal(&R->ready);
    pthread_mutex_unlock(&R->mu);
    return NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Reads every idx into the bitmap; counts them. */
static sp_status load_done(sqlite3 *db, const sp_sweep_spec *s, uint8_t *bits, int64_t *count)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, "SELECT idx FROM points", -1, &q, NULL) != SQLITE_OK)
        return db_fail(db, "reading points");
    int rc;
    *count = 0;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t i = sqlite3_column_int64(q, 0);
        if (i < 0 || i >= s->points) {
            sqlite3_finalize(q);
            return spi_fail(SP_EIO, "sweep database: a row has idx %" PRId64 " outside the spec's %" PRId64
                            " points", i, s->points);
        }
        bits[i >> 3] |= (uint8_t)(1u << (i & 7));
        (*count)++;
    }
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? SP_OK : db_fail(db, "reading points");
}

/* The writing side, one thread: the connection, the insert statement, the
 * open transaction and the figures so far. */
typedef struct writer {
    const sp_sweep_spec *s;
    const sp_sweep_opts *opts;
    sqlite3 *db;
    sqlite3_stmt *ins;
    uint8_t *done;                   /* bitmap of idx with a row at the start */
    int64_t in_txn;                  /* rows in the open transaction */
    double t0, txn_start;
    sp_sweep_stats st;
} writer;

static void writer_close(writer *w)
{
    if (w->db) {   /* else SQLite may not be open (sq_open) */
        if (w->in_txn) sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_finalize(w->ins);
        sqlite3_close(w->db);
    }
    w->in_txn = 0;
    free(w->done);
    w->ins = NULL;
    w->done = NULL;
    w->db = NULL;
    w->st.elapsed_s = now_s() - w->t0;
}

/* Opens the database (WAL, schema, spec check), reads which points it has
 * and prepares the insert.  writer_close in every case. */
static sp_status writer_open(writer *w, const sp_sweep_spec *s, const char *db_path, const sp_sweep_opts *opts)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    w->opts = opts;
    w->t0 = now_s();
    w->st.total = s->points;
    SP_CHECK(db_open(db_path, 1, &w->db));
    /* WAL: a commit is one append to the log, and a killed writer leaves the
     * last committed state; NORMAL syncs at checkpoints only, which keeps
     * every commit of a killed process (not of a lost machine's last moment) */
    SP_CHECK(db_exec(w->db, "PRAGMA journal_mode=WAL"));
    SP_CHECK(db_exec(w->db, "PRAGMA synchronous=NORMAL"));
    SP_CHECK(db_exec(w->db, "PRAGMA cache_size=-65536"));   /* 64 MiB: the key's index stays cached */
    SP_CHECK(db_prepare(w->db, db_path, s));
    if (!(w->done = calloc((size_t)(s->points + 7) / 8, 1))) return spi_fail(SP_ENOMEM, "out of memory");
    SP_CHECK(load_done(w->db, s, w->done, &w->st.done_before));
    char sql[1024];
    int n = snprintf(sql, sizeof sql, "INSERT INTO points VALUES (");
    for (int i = 0; i < N_COLS_ALL; i++) n += snprintf(sql + n, sizeof sql - (size_t)n, i ? ",?" : "?");
    snprintf(sql + n, sizeof sql - (size_t)n, ") ON CONFLICT DO NOTHING");
    if (sqlite3_prepare_v2(w->db, sql, -1, &w->ins, NULL) != SQLITE_OK) return db_fail(w->db, "preparing the insert");
    return SP_OK;
}

/* Inserts n rows into the open transaction (begun when none is). */
static sp_status writer_add(writer *w, const row *rows, int n)
{
    if (!w->in_txn) {
        SP_CHECK(db_exec(w->db, "BEGIN"));
        w->txn_start = now_s();
    }
    w->in_txn += n;   /* counted before the inserts: a failed one is rolled back with the rest */
    for (int i = 0; i < n; i++) SP_CHECK(insert_row(w->db, w->ins, w->s, &rows[i]));
    return SP_OK;
}

/* Commits the open transaction when force is set, it holds batch_rows rows,
 * or it has been open 0.5 s; then reports progress. */
static sp_status writer_maybe_commit(writer *w, int force)
{
    if (!w->in_txn || !(force || w->in_txn >= w->opts->batch_rows || now_s() - w->txn_start > 0.5)) return SP_OK;
    SP_CHECK(db_exec(w->db, "COMMIT"));
    w->st.computed += w->in_txn;
    w->in_txn = 0;
    if (w->opts->progress) {
        w->st.elapsed_s = now_s() - w->t0;
        w->opts->progress(w->opts->progress_user, &w->st);
    }
    return SP_OK;
}

/* One process: opts->jobs threads compute, the calling thread writes. */
static sp_status run_threads(const sp_sweep_spec *s, const char *db_path, const sp_sweep_opts *opts,
                             sp_sweep_stats *stats)
{
    writer W;
    sp_status st = writer_open(&W, s, db_path, opts);
    if (st != SP_OK) {
        writer_close(&W);
        if (stats) *stats = W.st;
        return st;
    }
    runner R;
    memset(&R, 0, sizeof R);
    pthread_t *th = NULL;
    int started = 0;
    R.s = s;
    R.done = W.done;
    R.nblocks = (s->points + SWEEP_BLOCK - 1) / SWEEP_BLOCK;
    R.limit = 4 * opts->jobs;
    pthread_mutex_init(&R.mu, NULL);
    pthread_cond_init(&R.ready, NULL);
    pthread_cond_init(&R.room, NULL);
    R.workers_left = opts->jobs;
    if (!(th = calloc((size_t)opts->jobs, sizeof *th))) {
        st = spi_fail(SP_ENOMEM, "out of memory");
        goto out_sync;
    }
    for (; started < opts->jobs; started++)
        if (pthread_create(&th[started], NULL, worker_main, &R) != 0) break;
    if (started == 0) {
        st = spi_fail(SP_ENOMEM, "cannot start a sweep thread");
        goto out_sync;
    }
    /* workers may already have finished: discount only those never started */
    pthread_mutex_lock(&R.mu);
    R.workers_left -= opts->jobs - started;
    pthread_mutex_unlock(&R.mu);

    for (;;) {
        pthread_mutex_lock(&R.mu);
        while (!R.queue && R.workers_left > 0) {
            if (W.in_txn) {
                /* an open transaction is committed after at most 0.5 s
                 * even when the points come slowly (plan) */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 100000000;
                if (ts.tv_nsec >= 1000000000) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&R.ready, &R.mu, &ts);
                if (!R.queue && now_s() - W.txn_start > 0.5) break;
            } else {
                pthread_cond_wait(&R.ready, &R.mu);
            }
        }
        block *bl = R.queue;
        if (bl) {
            R.queue = bl->next;
            R.queued--;
            pthread_cond_signal(&R.room);
        }
        int finished = !bl && R.workers_left == 0;
        pthread_mutex_unlock(&R.mu);
        if (bl) {
            st = writer_add(&W, bl->rows, bl->n);
            block_clear(bl);
            pthread_mutex_lock(&R.mu);
            bl->next = R.free_list;
            R.free_list = bl;
            pthread_mutex_unlock(&R.mu);
            if (st != SP_OK) goto out_stop;
        }
        SP_CHECKGOTO(writer_maybe_commit(&W, finished), st, out_stop);
        if (finished) break;
    }
    if (atomic_load(&R.stop)) st = spi_fail(SP_ENOMEM, "out of memory in a sweep thread");
    goto out_join;
out_stop:
    atomic_store(&R.stop, 1);
    pthread_mutex_lock(&R.mu);
    pthread_cond_broadcast(&R.room);
    pthread_mutex_unlock(&R.mu);
out_join:
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    while (R.queue) {
        block *b = R.queue;
        R.queue = b->next;
        block_clear(b);
        free(b);
    }
    while (R.free_list) {
        block *b = R.free_list;
        R.free_list = b->next;
        free(b);
    }
out_sync:
    pthread_mutex_destroy(&R.mu);
    pthread_cond_destroy(&R.ready);
    pthread_cond_destroy(&R.room);
    free(th);
    writer_close(&W);
    if (stats) *stats = W.st;
    return st;
}

#ifdef HAVE_MPI
/* ---- MPI: rank 0 writes, the other ranks compute ------------------------------
 *
 * Rank 0 opens the database as one process would, then hands out the
 * numbers of the points without a row, SWEEP_BLOCK at a time (int64 array,
 * tag TAG_WORK), MPI_DEPTH assignments ahead to each computing rank; a rank
 * answers each assignment with its rows (tag TAG_ROWS, packed below) and
 * rank 0 inserts them and sends the next assignment.  An empty assignment
 * means "done"; one holding -1 means "stop, the sweep failed" (rank 0's
 * message says why); an empty answer means "this rank failed".  After a
 * failure rank 0 drains the answers still owed, so every rank returns and
 * none waits on a dead peer's message.  The rows are those compute_point
 * gives in one process, whichever rank computes them, so the database
 * equals a one-process run's.  Row bytes go as they lie in memory: every
 * rank runs the same build on the same kind of machine. */

enum { TAG_WORK = 7101, TAG_ROWS = 7102 };
#define MPI_DEPTH 2

/* A row packed: its bytes (frontier pointer zeroed), then the frontier's
 * length as uint64 and its bytes (no NUL). */
static size_t packed_size(const row *r)
{
    return sizeof *r + sizeof(uint64_t) + (r->frontier ? strlen(r->frontier) : 0);
}

static char *pack_row(char *p, const row *r)
{
    row c = *r;
    c.frontier = NULL;
    memcpy(p, &c, sizeof c);
    p += sizeof c;
    uint64_t n = r->frontier ? strlen(r->frontier) : 0;
    memcpy(p, &n, sizeof n);
    p += sizeof n;
    if (n) memcpy(p, r->frontier, n);
    return p + n;
}

/* Unpacks one row from [p, end) into *r; its frontier (NUL-terminated in
 * place, hence the byte the receive buffer keeps past end) borrows the
 * buffer.  NULL when the bytes are short. */
static char *unpack_row(char *p, char *end, row *r)
{
    uint64_t n;
    if ((size_t)(end - p) < sizeof *r + sizeof n) return NULL;
    memcpy(r, p, sizeof *r);
    p += sizeof *r;
    memcpy(&n, p, sizeof n);
    p += sizeof n;
    if ((uint64_t)(end - p) < n) return NULL;
    r->frontier = NULL;
    if (n) {
        memmove(p - 1, p, n);   /* over the length's last byte, already read */
        p[n - 1] = 0;
        r->frontier = p - 1;
    }
    return p + n;
}

static sp_status mpi_err(int rc, const char *what)
{
    return spi_mpi_fail(NULL, rc, what);
}

/* Polls for a message of tag from any rank without spinning a core (rank 0
 * shares the machine with ranks that compute); meanwhile commits an open
 * transaction that has waited 0.5 s. */
static sp_status wait_rows(MPI_Comm comm, writer *w, MPI_Status *status)
{
    long sleep_ns = 20000;
    for (;;) {
        int flag = 0;
        int rc = MPI_Iprobe(MPI_ANY_SOURCE, TAG_ROWS, comm, &flag, status);
        if (rc != MPI_SUCCESS) return mpi_err(rc, "MPI_Iprobe");
        if (flag) return SP_OK;
        if (w) SP_CHECK(writer_maybe_commit(w, 0));
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
}

typedef struct assigner {
    MPI_Comm comm;
    int64_t *todo;                   /* point numbers without a row, ascending */
    int64_t n_todo, next;
    int *owed;                       /* per rank: assignments not answered yet */
    int *stopped;                    /* per rank: the last message was sent */
    int failed;
} assigner;

/* Sends rank r its next assignment, or the end (done, or stop after a failure). */
static sp_status assign(assigner *a, int r)
{
    if (a->stopped[r]) return SP_OK;
    int64_t stop = -1;
    const int64_t *buf = &stop;
    int n = 1;
    if (!a->failed) {
        n = (int)(a->n_todo - a->next < SWEEP_BLOCK ? a->n_todo - a->next : SWEEP_BLOCK);
        buf = a->todo + a->next;
        a->next += n;
    }
    int rc = MPI_Send(buf, n, MPI_INT64_T, r, TAG_WORK, a->comm);
    if (rc != MPI_SUCCESS) return mpi_err(rc, "MPI_Send");
    if (a->failed || n == 0) a->stopped[r] = 1;
    else a->owed[r]++;
    return SP_OK;
}

static sp_status mpi_writer(MPI_Comm comm, int size, const sp_sweep_spec *s, const char *db_path,
                            const sp_sweep_opts *opts, sp_sweep_stats *stats)
{
    writer W;
    sp_status st = writer_open(&W, s, db_path, opts);
    /* every rank learns whether the start went well before any assignment */
    int bad = st != SP_OK, any_bad = 0;
    int rc = MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
    if (rc != MPI_SUCCESS && st == SP_OK) st = mpi_err(rc, "MPI_Allreduce");
    if (st == SP_OK && any_bad) st = spi_fail(SP_EINVAL, "a computing rank holds another spec than rank 0 (its "
                                                        "message says which): every rank must read the same spec");
    assigner A = {.comm = comm};
    char *buf = NULL;
    size_t cap = 0;
    row *rows = NULL;
    if (st != SP_OK) goto out;
    A.todo = malloc((size_t)(s->points - W.st.done_before) * sizeof *A.todo + sizeof *A.todo);
    A.owed = calloc((size_t)size, sizeof *A.owed);
    A.stopped = calloc((size_t)size, sizeof *A.stopped);
    rows = malloc(SWEEP_BLOCK * sizeof *rows);
    if (!A.todo || !A.owed || !A.stopped || !rows) {
        /* the computing ranks wait for an assignment: send them the stop */
        st = spi_fail(SP_ENOMEM, "out of memory");
        int64_t stop = -1;
        for (int r = 1; r < size; r++) MPI_Send(&stop, 1, MPI_INT64_T, r, TAG_WORK, comm);
        goto out;
    }
    for (int64_t i = 0; i < s->points; i++)
        if (!is_done(W.done, i)) A.todo[A.n_todo++] = i;
    for (int d = 0; d < MPI_DEPTH; d++)
        for (int r = 1; r < size; r++) SP_CHECKGOTO(assign(&A, r), st, out);
    for (;;) {
        int owed = 0;
        for (int r = 1; r < size; r++) owed += A.owed[r];
        if (!owed) break;
        MPI_Status ms;
        sp_status wst = wait_rows(comm, A.failed ? NULL : &W, &ms);
        if (wst != SP_OK) {
            st = wst;
            goto out;   /* MPI itself failed: nothing more can be exchanged */
        }
        int bytes = 0;
        MPI_Get_count(&ms, MPI_BYTE, &bytes);
        if ((size_t)bytes + 1 > cap) {
            char *nb = realloc(buf, (size_t)bytes + 1);
            if (!nb) {
                st = spi_fail(SP_ENOMEM, "out of memory");
                goto out;
            }
            buf = nb;
            cap = (size_t)bytes + 1;
        }
        int src = ms.MPI_SOURCE;
        rc = MPI_Recv(buf, bytes, MPI_BYTE, src, TAG_ROWS, comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            st = mpi_err(rc, "MPI_Recv");
            goto out;
        }
        A.owed[src]--;
        if (!A.failed && bytes == 0) {
            st = spi_fail(SP_ENOMEM, "sweep: rank %d failed (out of memory): its points are not written", src);
            A.failed = 1;
        }
        if (!A.failed) {
            int n = 0;
            for (char *p = buf, *end = buf + bytes; p < end && n < SWEEP_BLOCK; n++)
                if (!(p = unpack_row(p, end, &rows[n]))) break;
            sp_status ist = writer_add(&W, rows, n);
            if (ist == SP_OK) ist = writer_maybe_commit(&W, 0);
            if (ist != SP_OK) {
                st = ist;
                A.failed = 1;
            }
        }
        SP_CHECKGOTO(assign(&A, src), st, out);
    }
    if (!A.failed) st = writer_maybe_commit(&W, 1);
out:
    free(A.todo);
    free(A.owed);
    free(A.stopped);
    free(rows);
    free(buf);
    writer_close(&W);
    if (stats) *stats = W.st;
    return st;
}

static sp_status mpi_compute(MPI_Comm comm, const sp_sweep_spec *s, sp_sweep_stats *stats)
{
    double t0 = now_s();
    int bad = 0, any_bad = 0;
    int rc = MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
    if (rc != MPI_SUCCESS) return mpi_err(rc, "MPI_Allreduce");
    stats->total = s->points;
    if (any_bad)
        return spi_fail(SP_EINVAL, "sweep: the sweep could not start on every rank (rank 0's message, or that "
                        "rank's, says why)");
    int64_t idx[SWEEP_BLOCK];
    row *rows = malloc(SWEEP_BLOCK * sizeof *rows);
    sp_cost_cache *cache = NULL;   /* this rank's (estimate points); NULL: each evaluation makes its own */
    if (s->compute == SP_SWEEP_ESTIMATE && sp_cost_cache_create(&cache) != SP_OK) cache = NULL;
    char *out[2] = {NULL, NULL};
    size_t cap[2] = {0, 0};
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    sp_status st = SP_OK;
    int failed = !rows;
    for (int k = 0;; k ^= 1) {
        MPI_Status ms;
        int n = 0;
        rc = MPI_Recv(idx, SWEEP_BLOCK, MPI_INT64_T, 0, TAG_WORK, comm, &ms);
        if (rc != MPI_SUCCESS) {
            st = mpi_err(rc, "MPI_Recv");
            break;
        }
        MPI_Get_count(&ms, MPI_INT64_T, &n);
        if (n == 0) break;
        if (n == 1 && idx[0] < 0) {
            st = spi_fail(SP_EIO, "sweep: rank 0 stopped the sweep (its message says why)");
            break;
        }
        size_t bytes = 0;
        if (!failed) {
            for (int i = 0; i < n; i++) compute_point(s, cache, idx[i], &rows[i]);
            for (int i = 0; i < n; i++) bytes += packed_size(&rows[i]);
        }
        /* the send from this buffer two assignments ago must be over */
        rc = MPI_Wait(&req[k], MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            st = mpi_err(rc, "MPI_Wait");
            break;
        }
        if (!failed && bytes > cap[k]) {
            char *nb = realloc(out[k], bytes);
            if (nb) out[k] = nb, cap[k] = bytes;
            else failed = 1;
        }
        if (failed) {
            bytes = 0;   /* the empty answer: this rank failed; rank 0 stops the sweep */
            st = spi_fail(SP_ENOMEM, "out of memory");
        } else {
            char *p = out[k];
            for (int i = 0; i < n; i++) p = pack_row(p, &rows[i]);
            stats->computed += n;
        }
        if (rows)
            for (int i = 0; i < n; i++) {
                free(rows[i].frontier);
                rows[i].frontier = NULL;
            }
        rc = MPI_Isend(out[k], (int)bytes, MPI_BYTE, 0, TAG_ROWS, comm, &req[k]);
        if (rc != MPI_SUCCESS) {
            st = mpi_err(rc, "MPI_Isend");
            break;
        }
    }
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    free(out[0]);
    free(out[1]);
    free(rows);
    sp_cost_cache_free(cache);
    stats->elapsed_s = now_s() - t0;
    return st;
}

/* Under mpirun: rank 0 checks that every rank read the same spec, then
 * writes while the others compute; one rank alone runs as one process. */
static sp_status run_mpi(const sp_sweep_spec *s, const char *db_path, const sp_sweep_opts *opts,
                         sp_sweep_stats *stats)
{
    MPI_Comm comm;
    int rank = 0, size = 1;
    SP_CHECK(spi_mpi_world_dup("sweep", &comm, &rank, &size));
    if (size == 1) {
        MPI_Comm_free(&comm);
        return run_threads(s, db_path, opts, stats);
    }
    sp_status st;
    if (opts->jobs != 1) {
        st = spi_fail(SP_EINVAL, "sweep under MPI: each computing rank is one thread (jobs %d): start more ranks "
                      "(mpirun -np K) instead", opts->jobs);
        MPI_Comm_free(&comm);
        return st;
    }
    /* the same spec everywhere: rank 0's canonical text against each rank's */
    unsigned long long len = strlen(s->canon);
    int rc = MPI_Bcast(&len, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
    char *canon = rc == MPI_SUCCESS && rank != 0 ? malloc(len + 1) : NULL;
    if (rc == MPI_SUCCESS) {
        /* a rank out of memory still takes part in the broadcast (counts
         * may differ: it receives nothing and reports the mismatch) */
        char dummy[1];
        char *b = rank == 0 ? s->canon : canon ? canon : dummy;
        rc = MPI_Bcast(b, rank == 0 || canon ? (int)len : 0, MPI_CHAR, 0, comm);
    }
    if (rc != MPI_SUCCESS) {
        free(canon);
        MPI_Comm_free(&comm);
        return mpi_err(rc, "MPI_Bcast");
    }
    sp_sweep_stats local = {.total = s->points};
    if (rank == 0) {
        free(canon);
        st = mpi_writer(comm, size, s, db_path, opts, &local);
    } else {
        int same = canon && strlen(s->canon) == len && !memcmp(canon, s->canon, len);
        free(canon);
        if (!same) {
            int bad = 1, any_bad;
            MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
            st = spi_fail(SP_EINVAL, "sweep: rank %d read another spec than rank 0: every rank must read the same "
                          "spec", rank);
        } else {
            st = mpi_compute(comm, s, &local);
        }
    }
    MPI_Comm_free(&comm);
    if (stats) *stats = local;
    return st;
}
#endif

sp_status sp_sweep_run(const sp_sweep_spec *s, const char *db_path, const sp_sweep_opts *opts,
                       sp_sweep_stats *stats)
{
    sp_sweep_opts def;
    if (!opts) {
        sp_sweep_opts_init(&def);
        opts = &def;
    }
    if (opts->jobs < 1 || opts->jobs > 1024) return spi_fail(SP_EINVAL, "jobs %d: must be 1 to 1024", opts->jobs);
    if (opts->batch_rows < 1) return spi_fail(SP_EINVAL, "batch_rows %d: must be >= 1", opts->batch_rows);
    if (opts->mpi) {
#ifdef HAVE_MPI
        return run_mpi(s, db_path, opts, stats);
#else
        return spi_fail(SP_ENOTSUP, "sweep across MPI ranks: this build has no MPI (configure --with-mpi)");
#endif
    }
    return run_threads(s, db_path, opts, stats);
}

/* ---- export ------------------------------------------------------------------ */

static void put_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void put_csv_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

sp_status sp_sweep_export(const char *db_path, sp_sweep_format fmt, FILE *f)
{
    sqlite3 *db = NULL;
    SP_CHECK(db_open(db_path, 0, &db));
    char *ver = NULL, *spec = NULL;
    sqlite3_stmt *q = NULL;
    sp_status st = SP_OK;
    if (meta_get(db, "schema_version", &ver) != SP_OK || !ver) {
        st = spi_fail(SP_EIO, "%s: not a sweep database (no meta.schema_version)", db_path);
        goto out;
    }
    int version = atoi(ver);
    if (version < 1 || version > SP_SWEEP_SCHEMA_VERSION) {
        st = spi_fail(SP_EIO, "%s: sweep schema version %s, this build reads versions 1 to %d", db_path, ver,
                      SP_SWEEP_SCHEMA_VERSION);
        goto out;
    }
    SP_CHECKGOTO(meta_get(db, "spec", &spec), st, out);
    if (sqlite3_prepare_v2(db, "SELECT * FROM points ORDER BY idx", -1, &q, NULL) != SQLITE_OK) {
        st = db_fail(db, "reading points");
        goto out;
    }
    int nc = sqlite3_column_count(q);
    if (fmt == SP_SWEEP_CSV) {
        for (int i = 0; i < nc; i++) fprintf(f, "%s%s", i ? "," : "", sqlite3_column_name(q, i));
        fputc('\n', f);
    } else {
        fprintf(f, "{\"schema_version\": %d, \"spec\": %s, \"points\": [", version, spec ? spec : "null");
    }
    int rc, first = 1;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (fmt == SP_SWEEP_JSON) fprintf(f, "%s\n  {", first ? "" : ",");
        first = 0;
        for (int i = 0; i < nc; i++) {
            if (fmt == SP_SWEEP_CSV) {
                if (i) fputc(',', f);
            } else {
                fprintf(f, "%s\"%s\": ", i ? ", " : "", sqlite3_column_name(q, i));
            }
            switch (sqlite3_column_type(q, i)) {
            case SQLITE_INTEGER: fprintf(f, "%lld", (long long)sqlite3_column_int64(q, i)); break;
            case SQLITE_FLOAT: fprintf(f, "%.17g", sqlite3_column_double(q, i)); break;
            case SQLITE_TEXT: {
                const char *t = (const char *)sqlite3_column_text(q, i);
                if (fmt == SP_SWEEP_CSV) put_csv_string(f, t);
                else if (!strcmp(sqlite3_column_name(q, i), "frontier") || !strcmp(sqlite3_column_name(q, i), "fleet"))
                    fputs(t, f);   /* JSON written by us */
                else put_json_string(f, t);
                break;
            }
            default:
                if (fmt == SP_SWEEP_JSON) fputs("null", f);
                break;
            }
        }
        if (fmt == SP_SWEEP_CSV) fputc('\n', f);
        else fputc('}', f);
    }
    if (rc != SQLITE_DONE) {
        st = db_fail(db, "reading points");
        goto out;
    }
    if (fmt == SP_SWEEP_JSON) fputs("\n]}\n", f);
    if (fflush(f) != 0) st = spi_fail(SP_EIO, "writing the export: %s", strerror(errno));
out:
    sqlite3_finalize(q);
    free(ver);
    free(spec);
    sqlite3_close(db);
    return st;
}
