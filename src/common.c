/* common.c: status strings, thread-local last error, logging, environment knobs,
 * bundled-data lookup. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <assert.h>
#include <sys/stat.h>
#include <unistd.h>
#include "spi_common.h"

static const char *const status_names[] = {
    "success",
    "invalid argument or input",
    "out of memory",
    "I/O error",
    "parse error",
    "infeasible: the request cannot be met",
    "solver error",
    "communication error",
    "CUDA error",
    "MPI error",
    "not supported",
    "internal error",
};
static_assert(SPI_ARRAY_LEN(status_names) == SP_STATUS_COUNT, "one name per sp_status");

const char *sp_status_str(sp_status s)
{
    if ((int)s < 0 || s >= SP_STATUS_COUNT) return "unknown status";
    return status_names[s];
}

const char *sp_version(void) { return SP_VERSION_STRING; }

static _Thread_local char last_error[512];

const char *sp_last_error(void) { return last_error; }

/* Formatted into a local buffer first: callers add context to an inner error
 * as spi_fail(s, "scratch: %s", sp_last_error()), and formatting the
 * thread's buffer into itself would garble the cause ("scratch: scratch: scr"). */
sp_status spi_fail(sp_status status, const char *fmt, ...)
{
    char buf[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(last_error, buf, sizeof last_error);
    sp_log(SP_LOG_INFO, "ERROR", "%s: %s", sp_status_str(status), last_error);
    return status;
}

void sp_error_init(sp_error *err)
{
    memset(err, 0, sizeof *err);
}

sp_status spi_error_set(sp_error *err, sp_status code, const char *source, int line, int column,
                        const char *path, const char *fmt, ...)
{
    sp_error local;
    if (!err) err = &local;
    err->code = code;
    err->line = line;
    err->column = column;
    if (source != err->source) snprintf(err->source, sizeof err->source, "%s", source ? source : "");
    if (path != err->path) snprintf(err->path, sizeof err->path, "%s", path ? path : "");
    char text[sizeof err->text];   /* the arguments may be err->text or the last error: not formatted in place */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(err->text, text, sizeof text);
    char buf[800];
    snprintf(last_error, sizeof last_error, "%s", sp_error_format(err, buf, sizeof buf));
    return code;
}

void spi_error_prefix(sp_error *err, const char *what, const char *kind)
{
    if (!err) return;
    char t[sizeof err->text];
    int head = snprintf(t, sizeof t, "%s %s: ", what, kind);
    if (head < 0 || (size_t)head >= sizeof t) return;
    snprintf(t + head, sizeof t - (size_t)head, "%s", err->text);
    memcpy(err->text, t, sizeof t);
}

char *sp_error_format(const sp_error *err, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
#define SP_APPEND_(...)                                                  \
    do {                                                                 \
        if (n < size) {                                                  \
            int w_ = snprintf(buf + n, size - n, __VA_ARGS__);           \
            if (w_ > 0) n += (size_t)w_;                                 \
        }                                                                \
    } while (0)
    if (err->source[0]) {
        SP_APPEND_("%s", err->source);
        if (err->line > 0) SP_APPEND_(":%d:%d", err->line, err->column);
        SP_APPEND_(": ");
    }
    if (err->path[0]) SP_APPEND_("%s: ", err->path);
    SP_APPEND_("%s", err->text);
#undef SP_APPEND_
    return buf;
}

/* ---- environment knobs ---- */
static const char *const env_names[] = {
#define SP_ENV_NAME_(id, var, def, doc) var,
    SP_ENV_KNOBS(SP_ENV_NAME_)
#undef SP_ENV_NAME_
};
static const char *const env_defaults[] = {
#define SP_ENV_DEF_(id, var, def, doc) def,
    SP_ENV_KNOBS(SP_ENV_DEF_)
#undef SP_ENV_DEF_
};
static const char *const env_docs[] = {
#define SP_ENV_DOC_(id, var, def, doc) doc,
    SP_ENV_KNOBS(SP_ENV_DOC_)
#undef SP_ENV_DOC_
};
static const char *env_values[SP_ENV_COUNT];
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* SHARDPLAN_DEBUG and SHARDPLAN_DEBUG_SUBSYS parsed once with the rest:
 * sp_log_enabled runs on every failure path (SP_CHECK), ~0.2M times in a
 * plan, and must not compare strings each time */
static sp_log_level log_max;   /* the most verbose level enabled */
static int log_all;            /* every subsystem */

static void env_read(void)
{
    for (int i = 0; i < SP_ENV_COUNT; i++) {
        const char *v = getenv(env_names[i]);
        env_values[i] = (v && v[0]) ? v : env_defaults[i];
    }
    const char *lv = env_values[SP_ENV_DEBUG];
    log_max = !strcasecmp(lv, "NONE")    ? SP_LOG_NONE
              : !strcasecmp(lv, "INFO")  ? SP_LOG_INFO
              : !strcasecmp(lv, "TRACE") ? SP_LOG_TRACE
                                         : SP_LOG_WARN;
    log_all = !strcasecmp(env_values[SP_ENV_DEBUG_SUBSYS], "ALL");
}

const char *sp_env(sp_env_knob knob)
{
    if ((int)knob < 0 || knob >= SP_ENV_COUNT) return "";
    pthread_once(&env_once, env_read);
    return env_values[knob];
}

long sp_env_long(sp_env_knob knob)
{
    const char *v = sp_env(knob);
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end) x = strtol(env_defaults[knob], NULL, 10);
    return x;
}

const char *sp_env_name(sp_env_knob knob) { return (knob < SP_ENV_COUNT) ? env_names[knob] : ""; }
const char *sp_env_doc(sp_env_knob knob) { return (knob < SP_ENV_COUNT) ? env_docs[knob] : ""; }
const char *sp_env_default(sp_env_knob knob) { return (knob < SP_ENV_COUNT) ? env_defaults[knob] : ""; }

/* ---- logging ---- */
int sp_log_enabled(sp_log_level level, const char *subsys)
{
    pthread_once(&env_once, env_read);
    if (level > log_max || level == SP_LOG_NONE) return 0;
    if (log_all || level == SP_LOG_WARN || !subsys) return 1;
    const char *subs = env_values[SP_ENV_DEBUG_SUBSYS];
    size_t n = strlen(subsys);
    for (const char *p = subs; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && !strncasecmp(p, subsys, n)) return 1;
        p += len + (comma ? 1 : 0);
    }
    return 0;
}

void sp_log(sp_log_level level, const char *subsys, const char *fmt, ...)
{
    if (!sp_log_enabled(level, subsys)) return;
    static const char *const tags[] = {"", "WARN", "INFO", "TRACE"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "shardplan %s %s: %s\n", tags[level], subsys ? subsys : "-", line);
}

/* ---- bundled data ---- */
static int is_dir(const char *p)
{
    struct stat st;
    return p && p[0] && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* set by a program running from its build tree (the CLI: spi_set_data_dir) */
static char data_override[1024];

void spi_set_data_dir(const char *dir) { snprintf(data_override, sizeof data_override, "%s", dir ? dir : ""); }

void spi_use_build_tree_data(const char *exe_dir, const char *data_dir)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    size_t dl = strlen(exe_dir);
    if (n <= 0) return;
    exe[n] = '\0';
    /* the program file itself sits in exe_dir (not deeper: an install prefix may live below it) */
    if (!strncmp(exe, exe_dir, dl) && exe[dl] == '/' && !strchr(exe + dl + 1, '/')) spi_set_data_dir(data_dir);
}

const char *sp_data_dir(void)
{
    const char *env = sp_env(SP_ENV_DATA);
    if (is_dir(env)) return env;
    if (is_dir(data_override)) return data_override;
#ifdef SP_DATADIR
    return SP_DATADIR;
#else
    return "data";
#endif
}

sp_status sp_data_path(const char *relpath, char *out, size_t size)
{
    const char *dirs[3];
    int nd = 0;
    const char *env = sp_env(SP_ENV_DATA);
    if (env[0]) dirs[nd++] = env;
    if (data_override[0]) dirs[nd++] = data_override;
#ifdef SP_DATADIR
    dirs[nd++] = SP_DATADIR;
#endif
    for (int i = 0; i < nd; i++) {
        struct stat st;
        int w = snprintf(out, size, "%s/%s", dirs[i], relpath);
        if (w > 0 && (size_t)w < size && stat(out, &st) == 0 && S_ISREG(st.st_mode)) return SP_OK;
    }
    return spi_fail(SP_EIO, "no bundled file %s (searched $SHARDPLAN_DATA, the program's build tree and %s)", relpath,
#ifdef SP_DATADIR
                    SP_DATADIR
#else
                    "the install directory"
#endif
    );
}

/* ---- data types and data movements ---------------------------------------------- */
static const char *const dtype_names[] = {"f32", "bf16", "f16", "int8", "fp8"};
static_assert(SPI_ARRAY_LEN(dtype_names) == SP_DT_COUNT, "one name per sp_dtype");
static_assert(SP_DT_COUNT == 5, "sp_dtype_bytes (sp_common.h) knows five dtypes");
static const char *const coll_names[] = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send-recv"};
static_assert(SPI_ARRAY_LEN(coll_names) == SP_COLL_COUNT, "one name per sp_coll_kind");

const char *sp_dtype_name(sp_dtype t) { return (unsigned)t < SP_DT_COUNT ? dtype_names[t] : "?"; }

sp_status sp_dtype_parse(const char *s, sp_dtype *out)
{
    static const struct { const char *alias; sp_dtype t; } aliases[] = {
        {"fp32", SP_DT_F32}, {"float32", SP_DT_F32}, {"fp16", SP_DT_F16}, {"float16", SP_DT_F16},
        {"bfloat16", SP_DT_BF16}, {"fp8_e4m3", SP_DT_FP8},
    };
    if (!s || !out) return spi_fail(SP_EINVAL, "sp_dtype_parse: NULL argument");
    for (int i = 0; i < SP_DT_COUNT; i++)
        if (!strcasecmp(s, dtype_names[i])) { *out = (sp_dtype)i; return SP_OK; }
    for (size_t i = 0; i < SPI_ARRAY_LEN(aliases); i++)
        if (!strcasecmp(s, aliases[i].alias)) { *out = aliases[i].t; return SP_OK; }
    return spi_fail(SP_EINVAL, "unknown data type \"%.40s\" (one of f32, bf16, f16, int8, fp8)", s);
}

const char *sp_coll_kind_name(sp_coll_kind k) { return (unsigned)k < SP_COLL_COUNT ? coll_names[k] : "?"; }

sp_status spi_dl_table(const char *soname, const spi_dl_sym *syms, int n)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
    if (!h) return spi_fail(SP_EIO, "%s", dlerror());
    for (int i = 0; i < n; i++) {
        void *sym = dlsym(h, syms[i].name);
        if (!sym) return spi_fail(SP_EIO, "%s has no %s", soname, syms[i].name);
        memcpy(syms[i].fn, &sym, sizeof sym);   /* a function pointer's bytes (POSIX: the same size) */
    }
    return SP_OK;
}
