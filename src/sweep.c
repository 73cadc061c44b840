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
 * Resumption: the rows of a committed transaction are in the file (WAL,
 * synchronous=NORMAL survives a killed process), those of the open one are
 * not; a rerun reads the idx of every row into a bitmap and computes only
 * the missing points.  Every point's figures depend on its inputs alone
 * (the cost model's memo is per thread and gives the figures it would
 * without it), so the order and the thread that computes a point change
 * nothing in its row.
 */
#include <errno.h>
#include <inttypes.h>
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
#include "costmodel/sp_cost.h"
#include "spi_common.h"
#include "spi_json.h"

#define SWEEP_BLOCK 256
#define SWEEP_MAX_POINTS ((int64_t)1 << 32)   /* the done-bitmap is 512 MiB there */
#define SWEEP_MAX_AXIS 1000000
#define LAYOUT_TEXT 256

static const char *const compute_names[SP_SWEEP_COMPUTE_COUNT] = {"estimate", "plan"};
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
    int64_t n[AX_COUNT];             /* values per axis (layouts: 1 for plan) */
    char (*model_name)[128];         /* as written in the spec: the key column */
    sp_model *models;
    char (*hw_name)[128];
    sp_hw *hw;
    int64_t *vals[4];                /* chips, batch, prompt, gen */
    sp_layout *layouts;
    char (*layout_text)[LAYOUT_TEXT];  /* canonical text form: the key column */
    sp_plan_opts popts;
    int64_t points;
    char *canon;                     /* the spec as compact sorted JSON (meta.spec) */
};

void sp_sweep_spec_free(sp_sweep_spec *s)
{
    if (!s) return;
    free(s->model_name);
    free(s->models);
    free(s->hw_name);
    free(s->hw);
    for (int i = 0; i < 4; i++) free(s->vals[i]);
    free(s->layouts);
    free(s->layout_text);
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
static sp_status get_axis(const spi_jctx *c, const json_t *root, const char *key, int64_t min, int64_t max,
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

typedef sp_status (*find_fn)(const char *name, void *out, sp_error *err);
static sp_status find_model(const char *name, void *out, sp_error *err) { return sp_model_find(name, out, err); }
static sp_status find_hw(const char *name, void *out, sp_error *err) { return sp_hw_find(name, out, err); }

/* The names of root[key] (a string list) into *names, each resolved by find
 * into *objs (n elements of elem bytes); errors name /key/i. */
static sp_status get_named(const spi_jctx *c, const json_t *root, const char *key, const char *what, size_t elem,
                           find_fn find, int64_t *n_out, char (**names)[128], void **objs)
{
    json_t *arr = NULL;
    size_t n = 0;
    SP_CHECK(get_str_list(c, root, key, &arr, &n));
    char p[64];
    snprintf(p, sizeof p, "/%s", key);
    *n_out = (int64_t)n;
    *names = calloc(n, sizeof **names);
    *objs = calloc(n, elem);
    if (!*names || !*objs) return spi_fail(SP_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char k[24];
        snprintf(k, sizeof k, "%zu", i);
        const char *name = str_at(arr, i);
        if (strlen(name) >= sizeof **names)
            return spi_json_fail(c, SP_EPARSE, p, k, "name longer than %zu bytes", sizeof **names - 1);
        snprintf((*names)[i], sizeof **names, "%s", name);
        sp_error e;
        sp_error_init(&e);
        if (find(name, (char *)*objs + i * elem, &e) != SP_OK) {
            char msg[400];
            sp_error_format(&e, msg, sizeof msg);
            return spi_json_fail(c, SP_EINVAL, p, k, "%s '%s': %s", what, name, msg);
        }
    }
    return SP_OK;
}

static sp_status spec_from_json(const spi_jctx *c, json_t *root, sp_sweep_spec *s)
{
    SP_CHECK(spi_json_expect_object(c, "", root));
    static const char *const keys[] = {"version", "models", "hw", "chips", "batch", "prompt", "gen", "compute",
                                       "layouts", "objective", "latency_metric", "weights", "description",
                                       NULL};
    SP_CHECK(spi_json_check_keys(c, "", root, keys));
    int64_t version = 1;
    SP_CHECK(spi_json_get_int(c, "", root, "version", 0, 1, 1, "1 (the spec format this build reads)", &version));
    int ci;
    SP_CHECK(spi_json_get_enum(c, "", root, "compute", 1, compute_names, SP_SWEEP_COMPUTE_COUNT, &ci));
    s->compute = (sp_sweep_compute)ci;

    /* the arrays go to the spec whether or not every name resolved:
     * sp_sweep_spec_free frees them on the error path too */
    void *objs = NULL;
    sp_status named = get_named(c, root, "models", "model", sizeof *s->models, find_model, &s->n[AX_MODEL],
                                &s->model_name, &objs);
    s->models = objs;
    SP_CHECK(named);
    objs = NULL;
    named = get_named(c, root, "hw", "hardware", sizeof *s->hw, find_hw, &s->n[AX_HW], &s->hw_name, &objs);
    s->hw = objs;
    SP_CHECK(named);
    SP_CHECK(get_axis(c, root, "chips", 1, 1 << 20, &s->vals[0], &s->n[AX_CHIPS]));
    SP_CHECK(get_axis(c, root, "batch", 1, 1 << 24, &s->vals[1], &s->n[AX_BATCH]));
    SP_CHECK(get_axis(c, root, "prompt", 0, 1 << 24, &s->vals[2], &s->n[AX_PROMPT]));
    SP_CHECK(get_axis(c, root, "gen", 0, 1 << 24, &s->vals[3], &s->n[AX_GEN]));

    size_t n;
    json_t *lay = json_object_get(root, "layouts");
    sp_plan_opts_init(&s->popts);
    if (s->compute == SP_SWEEP_ESTIMATE) {
        if (json_object_get(root, "objective") || json_object_get(root, "latency_metric") ||
            json_object_get(root, "weights"))
            return spi_json_fail(c, SP_EPARSE, "",
                                 json_object_get(root, "objective") ? "objective"
                                 : json_object_get(root, "weights") ? "weights" : "latency_metric",
                                 "goes with \"compute\": \"plan\" (estimate prices the given layouts)");
        if (!lay) return spi_json_fail(c, SP_EPARSE, "", "layouts", "missing field (\"compute\": \"estimate\" "
                                                                    "prices these layouts)");
        if (!json_is_array(lay) || json_array_size(lay) == 0)
            return spi_json_fail(c, SP_EPARSE, "", "layouts", "must be a non-empty array of layouts (text form "
                                                             "or JSON objects)");
        n = json_array_size(lay);
        s->n[AX_LAYOUT] = (int64_t)n;
        s->layouts = calloc(n, sizeof *s->layouts);
        s->layout_text = calloc(n, sizeof *s->layout_text);
        if (!s->layouts || !s->layout_text) return spi_fail(SP_ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
            char k[24];
            snprintf(k, sizeof k, "%zu", i);
            json_t *l = json_array_get(lay, i);
            sp_error e;
            sp_error_init(&e);
            sp_status st = json_is_string(l) ? sp_layout_parse(json_string_value(l), &s->layouts[i], &e)
                           : json_is_object(l) ? sp_layout_from_json(l, &s->layouts[i], &e)
                                               : spi_error_set(&e, SP_EPARSE, NULL, 0, 0, NULL,
                                                               "must be a layout string or object");
            if (st != SP_OK) {
                char msg[400];
                sp_error_format(&e, msg, sizeof msg);
                return spi_json_fail(c, SP_EPARSE, "/layouts", k, "%s", msg);
            }
            sp_layout_format(&s->layouts[i], s->layout_text[i], sizeof s->layout_text[i]);
            for (size_t j = 0; j < i; j++)
                if (!strcmp(s->layout_text[j], s->layout_text[i]))
                    return spi_json_fail(c, SP_EPARSE, "/layouts", k, "same layout as /layouts/%zu", j);
        }
    } else {
        if (lay) return spi_json_fail(c, SP_EPARSE, "", "layouts", "goes with \"compute\": \"estimate\" (plan "
                                                                   "searches the layouts)");
        s->n[AX_LAYOUT] = 1;
        static const char *const obj[] = {"latency", "cost", "throughput"};
        static const char *const lat[] = {"total", "decode", "prefill"};
        static const char *const wts[] = {"auto", "bf16", "int8", "fp8"};
        int v = 0;
        SP_CHECK(spi_json_get_enum(c, "", root, "objective", 0, obj, 3, &v));
        s->popts.objective = (sp_plan_objective)v;
        v = 0;
        SP_CHECK(spi_json_get_enum(c, "", root, "latency_metric", 0, lat, 3, &v));
        s->popts.latency_metric = (sp_plan_latency)v;
        v = 0;
        SP_CHECK(spi_json_get_enum(c, "", root, "weights", 0, wts, 4, &v));
        s->popts.weights = (sp_plan_weights)v;
        /* one layout per point: the frontier, the rivals and the chip-count
         * search are plan's answers to other questions */
        s->popts.frontier = 0;
        s->popts.rivals = 0;
        s->popts.search_min_chips = 0;
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
} row;

static void point_axes(const sp_sweep_spec *s, int64_t idx, int64_t ax[AX_COUNT])
{
    for (int a = AX_COUNT - 1; a >= 0; a--) {
        ax[a] = idx % s->n[a];
        idx /= s->n[a];
    }
}

static void compute_point(const sp_sweep_spec *s, int64_t idx, row *r)
{
    r->idx = idx;
    point_axes(s, idx, r->ax);
    r->has_cost = 0;
    r->plan_result = -1;
    r->candidates = 0;
    r->layout[0] = r->message[0] = 0;
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
        if (sp_cost_eval(m, hw, l, &w, NULL, &r->cost) != SP_OK) {
            r->status = ROW_NOT_APPLICABLE;
            snprintf(r->message, sizeof r->message, "%s", sp_last_error());
            return;
        }
        r->status = ROW_OK;
        r->has_cost = 1;   /* layout stays "": the priced layout is layout_in */
        return;
    }
    sp_plan *p = NULL;
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

/* Columns of `points`, schema version 1 (doc/sweep.md lists them with units).
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
    "mem_workspace INTEGER, mem_total INTEGER, capacity INTEGER, "
    "UNIQUE (model, hw, chips, batch, prompt, gen, compute, layout_in))";
#define N_COLS 40

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
        if (atoi(ver) != SP_SWEEP_SCHEMA_VERSION) {
            st = spi_fail(SP_EINVAL, "%s: sweep schema version %s, this build writes version %d: use a new --db",
                          path, ver, SP_SWEEP_SCHEMA_VERSION);
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

static void bind_cost(sqlite3_stmt *q, int k, const row *r)
{
    const sp_cost *c = &r->cost;
    if (!r->has_cost) {
        for (int i = k; i <= N_COLS; i++) sqlite3_bind_null(q, i);
        return;
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
    sqlite3_bind_text(q, k++, s->compute == SP_SWEEP_ESTIMATE ? s->layout_text[r->ax[AX_LAYOUT]] : "", -1,
                      SQLITE_STATIC);
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
    bind_cost(q, k, r);
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

static int is_done(const uint8_t *bits, int64_t i) { return bits[i >> 3] >> (i & 7) & 1; }

static void *worker_main(void *arg)
{
    runner *R = arg;
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
            if (!is_done(R->done, i)) compute_point(R->s, i, &bl->rows[bl->n++]);
        pthread_mutex_lock(&R->mu);
        bl->next = R->queue;
        R->queue = bl;
        R->queued++;
        pthread_cond_signal(&R->ready);
        pthread_mutex_unlock(&R->mu);
    }
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
    double t0 = now_s();
    sp_sweep_stats st0 = {.total = s->points};
    sqlite3 *db = NULL;
    SP_CHECK(db_open(db_path, 1, &db));
    sp_status st = SP_OK;
    uint8_t *bits = NULL;
    sqlite3_stmt *ins = NULL;
    runner R;
    memset(&R, 0, sizeof R);
    pthread_t *th = NULL;
    int started = 0;
    /* WAL: a commit is one append to the log, and a killed writer leaves the
     * last committed state; NORMAL syncs at checkpoints only, which keeps
     * every commit of a killed process (not of a lost machine's last moment) */
    SP_CHECKGOTO(db_exec(db, "PRAGMA journal_mode=WAL"), st, out);
    SP_CHECKGOTO(db_exec(db, "PRAGMA synchronous=NORMAL"), st, out);
    SP_CHECKGOTO(db_exec(db, "PRAGMA cache_size=-65536"), st, out);   /* 64 MiB: the key's index stays cached */
    SP_CHECKGOTO(db_prepare(db, db_path, s), st, out);
    if (!(bits = calloc((size_t)(s->points + 7) / 8, 1))) {
        st = spi_fail(SP_ENOMEM, "out of memory");
        goto out;
    }
    SP_CHECKGOTO(load_done(db, s, bits, &st0.done_before), st, out);
    {
        char sql[1024];
        int n = snprintf(sql, sizeof sql, "INSERT INTO points VALUES (");
        for (int i = 0; i < N_COLS; i++) n += snprintf(sql + n, sizeof sql - (size_t)n, i ? ",?" : "?");
        snprintf(sql + n, sizeof sql - (size_t)n, ") ON CONFLICT DO NOTHING");
        if (sqlite3_prepare_v2(db, sql, -1, &ins, NULL) != SQLITE_OK) {
            st = db_fail(db, "preparing the insert");
            goto out;
        }
    }
    R.s = s;
    R.done = bits;
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

    int64_t in_txn = 0;
    double txn_start = 0;
    for (;;) {
        pthread_mutex_lock(&R.mu);
        while (!R.queue && R.workers_left > 0) {
            if (in_txn) {
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
                if (!R.queue && now_s() - txn_start > 0.5) break;
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
            if (!in_txn) {
                SP_CHECKGOTO(db_exec(db, "BEGIN"), st, out_stop);
                txn_start = now_s();
            }
            for (int i = 0; i < bl->n && st == SP_OK; i++) st = insert_row(db, ins, s, &bl->rows[i]);
            in_txn += bl->n;
            pthread_mutex_lock(&R.mu);
            bl->next = R.free_list;
            R.free_list = bl;
            pthread_mutex_unlock(&R.mu);
            if (st != SP_OK) goto out_stop;
        }
        if (in_txn && (finished || in_txn >= opts->batch_rows || now_s() - txn_start > 0.5)) {
            SP_CHECKGOTO(db_exec(db, "COMMIT"), st, out_stop);
            st0.computed += in_txn;
            in_txn = 0;
            if (opts->progress) {
                st0.elapsed_s = now_s() - t0;
                opts->progress(opts->progress_user, &st0);
            }
        }
        if (finished) break;
    }
    if (atomic_load(&R.stop)) st = spi_fail(SP_ENOMEM, "out of memory in a sweep thread");
    goto out_join;
out_stop:
    if (in_txn) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    atomic_store(&R.stop, 1);
    pthread_mutex_lock(&R.mu);
    pthread_cond_broadcast(&R.room);
    pthread_mutex_unlock(&R.mu);
out_join:
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    while (R.queue) {
        block *b = R.queue;
        R.queue = b->next;
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
out:
    free(th);
    sqlite3_finalize(ins);
    free(bits);
    sqlite3_close(db);
    st0.elapsed_s = now_s() - t0;
    if (stats) *stats = st0;
    return st;
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
    if (atoi(ver) != SP_SWEEP_SCHEMA_VERSION) {
        st = spi_fail(SP_EIO, "%s: sweep schema version %s, this build reads version %d", db_path, ver,
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
        fprintf(f, "{\"schema_version\": %d, \"spec\": %s, \"points\": [", SP_SWEEP_SCHEMA_VERSION,
                spec ? spec : "null");
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
