/* json_util.c: Jansson loading and typed field getters with path-precise errors. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "spi_common.h"
#include "spi_json.h"

static sp_status from_jansson(const json_error_t *je, const char *source, sp_error *err)
{
    if (json_error_code(je) == json_error_cannot_open_file)
        return spi_error_set(err, SP_EIO, source, 0, 0, "", "cannot open file: %s",
                             errno ? strerror(errno) : je->text);
    int line = je->line > 0 ? je->line : 1;
    int col = je->column > 0 ? je->column : 1;
    return spi_error_set(err, SP_EPARSE, source, line, col, "", "%s", je->text);
}

sp_status spi_json_load_file(const char *path, json_t **out, sp_error *err)
{
    json_error_t je;
    *out = NULL;
    if (!path || !path[0]) return spi_error_set(err, SP_EINVAL, "", 0, 0, "", "empty file name");
    errno = 0;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j) return from_jansson(&je, path, err);
    *out = j;
    return SP_OK;
}

sp_status spi_json_loads(const char *text, const char *source, json_t **out, sp_error *err)
{
    json_error_t je;
    *out = NULL;
    if (!source) source = "<string>";
    if (!text) return spi_error_set(err, SP_EINVAL, source, 0, 0, "", "no text");
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!j) return from_jansson(&je, source, err);
    *out = j;
    return SP_OK;
}

static void join_path(char *buf, size_t size, const char *prefix, const char *key)
{
    if (key) snprintf(buf, size, "%s/%s", prefix ? prefix : "", key);
    else snprintf(buf, size, "%s", (prefix && prefix[0]) ? prefix : "/");
}

sp_status spi_json_fail(const spi_jctx *c, sp_status code, const char *prefix, const char *key,
                        const char *fmt, ...)
{
    char path[128], text[320];
    join_path(path, sizeof path, prefix, key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return spi_error_set(c->err, code, c->source, 0, 0, path, "%s", text);
}

static const char *type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "unknown";
}

sp_status spi_json_expect_object(const spi_jctx *c, const char *path, const json_t *j)
{
    if (json_is_object(j)) return SP_OK;
    return spi_json_fail(c, SP_EINVAL, path, NULL, "expected an object, got %s", type_name(j));
}

static int is_doc_key(const char *k)
{
    return !strcmp(k, "source") || !strcmp(k, "notes") || !strcmp(k, "comment");
}

sp_status spi_json_check_keys(const spi_jctx *c, const char *prefix, const json_t *obj,
                              const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        (void)v;
        if (is_doc_key(key)) continue;
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(*a, key)) { ok = 1; break; }
        if (ok) continue;
        char list[256];
        size_t n = 0;
        list[0] = '\0';
        for (const char *const *a = allowed; *a && n < sizeof list; a++) {
            int w = snprintf(list + n, sizeof list - n, "%s%s", a == allowed ? "" : ", ", *a);
            if (w > 0) n += (size_t)w;
        }
        return spi_json_fail(c, SP_EINVAL, prefix, key, "unknown key (allowed: %s; and source, notes, comment)",
                             list);
    }
    return SP_OK;
}

/* Looks key up; returns 1 with *v set when present and not null. */
static int lookup(const json_t *obj, const char *key, json_t **v)
{
    *v = json_object_get(obj, key);
    return *v && !json_is_null(*v);
}

#define MISSING_OR_OK(c, prefix, key, required, what)                                         \
    ((required) ? spi_json_fail((c), SP_EINVAL, (prefix), (key), "missing field (%s)", (what)) \
                : SP_OK)

sp_status spi_json_get_int(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                           int required, int64_t min, int64_t max, const char *what, int64_t *out)
{
    json_t *v;
    if (!lookup(obj, key, &v)) return MISSING_OR_OK(c, prefix, key, required, what);
    int64_t x;
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        /* 9.2e18 is the first double past INT64_MAX */
        if (!(d == floor(d)) || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
            return spi_json_fail(c, SP_EINVAL, prefix, key, "must be an integer (%s), got %g", what, d);
        x = (int64_t)d;
    } else {
        return spi_json_fail(c, SP_EINVAL, prefix, key, "must be an integer (%s), got %s", what, type_name(v));
    }
    if (x < min || x > max)
        return spi_json_fail(c, SP_EINVAL, prefix, key, "%lld is out of range (%s)", (long long)x, what);
    *out = x;
    return SP_OK;
}

sp_status spi_json_get_num(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                           int required, int positive, double min, double max, const char *what,
                           double *out)
{
    json_t *v;
    if (!lookup(obj, key, &v)) return MISSING_OR_OK(c, prefix, key, required, what);
    if (!json_is_number(v))
        return spi_json_fail(c, SP_EINVAL, prefix, key, "must be a number (%s), got %s", what, type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x) || (positive && !(x > 0)) || (!positive && x < min) || x > max)
        return spi_json_fail(c, SP_EINVAL, prefix, key, "%g is out of range (%s)", x, what);
    *out = x;
    return SP_OK;
}

sp_status spi_json_get_bool(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                            int required, int *out)
{
    json_t *v;
    if (!lookup(obj, key, &v)) return MISSING_OR_OK(c, prefix, key, required, "true or false");
    if (!json_is_boolean(v))
        return spi_json_fail(c, SP_EINVAL, prefix, key, "must be true or false, got %s", type_name(v));
    *out = json_is_true(v);
    return SP_OK;
}

sp_status spi_json_get_str(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                           int required, char *buf, size_t size)
{
    json_t *v;
    if (!lookup(obj, key, &v)) return MISSING_OR_OK(c, prefix, key, required, "a string");
    if (!json_is_string(v))
        return spi_json_fail(c, SP_EINVAL, prefix, key, "must be a string, got %s", type_name(v));
    const char *s = json_string_value(v);
    if (strlen(s) >= size)
        return spi_json_fail(c, SP_EINVAL, prefix, key, "longer than %zu characters", size - 1);
    memcpy(buf, s, strlen(s) + 1);
    return SP_OK;
}

sp_status spi_json_get_enum(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                            int required, const char *const *names, int n, int *out)
{
    char list[200];
    size_t len = 0;
    list[0] = '\0';
    for (int i = 0; i < n && len < sizeof list; i++) {
        int w = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
        if (w > 0) len += (size_t)w;
    }
    json_t *v;
    if (!lookup(obj, key, &v)) {
        if (!required) return SP_OK;
        return spi_json_fail(c, SP_EINVAL, prefix, key, "missing field (one of %s)", list);
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        for (int i = 0; i < n; i++)
            if (!strcmp(s, names[i])) { *out = i; return SP_OK; }
        return spi_json_fail(c, SP_EINVAL, prefix, key, "\"%.60s\": must be one of %s", s, list);
    }
    return spi_json_fail(c, SP_EINVAL, prefix, key, "must be one of %s, got %s", list, type_name(v));
}

sp_status spi_json_get_child(const spi_jctx *c, const char *prefix, const json_t *obj, const char *key,
                             int required, json_type type, json_t **out)
{
    json_t *v;
    const char *want = type == JSON_OBJECT ? "an object" : type == JSON_ARRAY ? "an array" : "a value";
    *out = NULL;
    if (!lookup(obj, key, &v)) return MISSING_OR_OK(c, prefix, key, required, want);
    if (json_typeof(v) != type)
        return spi_json_fail(c, SP_EINVAL, prefix, key, "must be %s, got %s", want, type_name(v));
    *out = v;
    return SP_OK;
}
