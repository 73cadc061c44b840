/*
 * sp_common.h: status codes, error reporting, logging and environment knobs
 * shared by every module of libshardplan.
 *
 * Conventions used throughout the library (see README.md, "Library conventions"):
 *  - every fallible function returns sp_status; SP_OK is 0.
 *  - on failure the function also records a human-readable message in a
 *    thread-local buffer, read with sp_last_error().  Thread-local because in
 *    the threads backend every chip is a thread.
 *  - parsers additionally fill a caller-allocated sp_error (file, line,
 *    column, field path, text); nothing is allocated on the error path.
 *  - the library never exits and never prints except through SP_LOG.
 *
 * Dimension glossary used in shape comments across the project:
 *   B batch, L tokens per sequence this step, T = B*L, E d_model, F d_ff,
 *   H query heads, KVH key/value heads, D d_head, V vocab, n = X*Y*Z chips
 *   of the tensor mesh, P pipeline stages, R data replicas.
 */
#ifndef SP_COMMON_H
#define SP_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include "sp_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Append-only: explicit values, names in sp_status_str(). */
typedef enum sp_status {
    SP_OK = 0,
    SP_EINVAL = 1,        /* bad argument or bad input value */
    SP_ENOMEM = 2,        /* allocation failed */
    SP_EIO = 3,           /* file could not be opened or read */
    SP_EPARSE = 4,        /* malformed input text (JSON, layout string) */
    SP_EINFEASIBLE = 5,   /* the request cannot be met (nothing fits) */
    SP_ESOLVER = 6,       /* GLPK failed to run */
    SP_ECOMM = 7,         /* a collective failed or timed out */
    SP_ECUDA = 8,         /* CUDA, cuBLAS or NCCL error */
    SP_EMPI = 9,          /* MPI error */
    SP_ENOTSUP = 10,      /* feature not built in, or not supported */
    SP_EINTERNAL = 11,    /* a bug: an invariant did not hold */
    SP_STATUS_COUNT
} sp_status;

const char *sp_status_str(sp_status s);     /* static string, never NULL */
const char *sp_last_error(void);            /* this thread's last message; "" if none */
const char *sp_version(void);               /* run-time version string */

/* Caller-allocated error record for parsers (Jansson's json_error_t style).
 * source: file name or "<string>"; line/column are 1-based, 0 when not
 * applicable; path is a JSON pointer to the offending field ("/topology/dims"). */
typedef struct sp_error {
    sp_status code;
    int line;
    int column;
    char source[256];
    char path[128];
    char text[320];
} sp_error;

void sp_error_init(sp_error *err);
/* Formats err as "source:line:column: path: text" (parts omitted when empty)
 * into buf; returns buf. */
char *sp_error_format(const sp_error *err, char *buf, size_t size);

/* ---- vocabulary shared by every layer ------------------------------------------
 * Here rather than in the hardware or lowering headers, so that kernels and
 * the communicator name element types and data movements without them. */
/* Data types the cost model and executor know. Append-only. */
typedef enum sp_dtype {
    SP_DT_F32 = 0, SP_DT_BF16 = 1, SP_DT_F16 = 2, SP_DT_INT8 = 3, SP_DT_FP8 = 4, SP_DT_COUNT
} sp_dtype;
const char *sp_dtype_name(sp_dtype t);
/* 4, 2, 2, 1, 1; 0 for a value outside the enum.  Inline: the lowering
 * asks for every step it emits. */
static inline int sp_dtype_bytes(sp_dtype t)
{
    return (unsigned)t < 5u ? (int)((0x11224u >> (4u * (unsigned)t)) & 15u) : 0;   /* nibbles: 4 2 2 1 1 */
}
sp_status sp_dtype_parse(const char *s, sp_dtype *out);

/* Kinds of data movement, for collectives and their byte accounting (the
 * lowering, the cost model and the communicator). Append-only. */
typedef enum sp_coll_kind {
    SP_COLL_ALLGATHER = 0, SP_COLL_REDUCESCATTER = 1, SP_COLL_ALLREDUCE = 2, SP_COLL_ALLTOALL = 3,
    SP_COLL_SENDRECV = 4, SP_COLL_COUNT
} sp_coll_kind;
const char *sp_coll_kind_name(sp_coll_kind k);   /* "all-gather", ... */

/* ---- logging ------------------------------------------------------------------
 * Controlled by SHARDPLAN_DEBUG=NONE|WARN|INFO|TRACE (default WARN) and
 * SHARDPLAN_DEBUG_SUBSYS=ALL or a comma list of COST,PLAN,COMM,EXEC,MODEL,LOWER. */
typedef enum sp_log_level { SP_LOG_NONE = 0, SP_LOG_WARN = 1, SP_LOG_INFO = 2, SP_LOG_TRACE = 3 } sp_log_level;
void sp_log(sp_log_level level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int sp_log_enabled(sp_log_level level, const char *subsys);

/* ---- environment knobs ----------------------------------------------------------
 * Every environment variable the project reads is declared here, once.
 * X(id, variable, default, meaning) */
#define SP_ENV_KNOBS(X)                                                                 \
    X(DEBUG, "SHARDPLAN_DEBUG", "WARN", "log level: NONE, WARN, INFO or TRACE")          \
    X(DEBUG_SUBSYS, "SHARDPLAN_DEBUG_SUBSYS", "ALL",                                      \
      "comma list of subsystems to log: COST,PLAN,COMM,EXEC,MODEL,LOWER or ALL")       \
    X(DATA, "SHARDPLAN_DATA", "",                                                         \
      "directory holding models/ and hw/; overrides the installed and build-tree data")  \
    X(COMM_TIMEOUT_S, "SHARDPLAN_COMM_TIMEOUT_S", "60",                                   \
      "seconds a collective may wait for its peers before the run fails")               \
    X(BLAS_THREADS, "SHARDPLAN_BLAS_THREADS", "1", "BLAS threads per chip thread")                 \
    X(THREADS, "SHARDPLAN_THREADS", "0", "threads the planner prices layouts on (0: one per online CPU)") \
    X(PLAN_SPIN_US, "SHARDPLAN_PLAN_SPIN_US", "200",                                      \
      "planner: microseconds a pricing thread polls for the next batch before it sleeps, while the pricing threads of the plans under way have a CPU each (0: sleeps at once; at most 1000000)") \
    X(CACHE_DIR, "SHARDPLAN_CACHE_DIR", "",                                               \
      "autoconfig plan cache directory; off: no cache (default $XDG_CACHE_HOME/shardplan)") \
    X(XDG_CACHE_HOME, "XDG_CACHE_HOME", "", "base of the plan cache (default $HOME/.cache)") \
    X(HOME, "HOME", "", "home directory: the plan cache falls back to $HOME/.cache/shardplan") \
    X(PIN_CHIPS, "SHARDPLAN_PIN_CHIPS", "1",                                              \
      "threads backend: 1 binds chip thread i to the i-th allowed CPU (mod their count); 0 leaves placement to the scheduler") \
    X(SPIN_US, "SHARDPLAN_SPIN_US", "1000",                                                 \
      "threads backend: microseconds a chip waiting at a collective or a send/receive polls before it sleeps, when every chip has a CPU of its own (0: sleeps at once; at most 1000000)") \
    X(LOCAL_HW, "SHARDPLAN_LOCAL_HW", "",                                                 \
      "this machine's profile (written by calibrate --backend): run and validate price with it when --hw is not given")

typedef enum sp_env_knob {
#define SP_ENV_ENUM_(id, var, def, doc) SP_ENV_##id,
    SP_ENV_KNOBS(SP_ENV_ENUM_)
#undef SP_ENV_ENUM_
    SP_ENV_COUNT
} sp_env_knob;

/* Value of a knob: the environment's, else its default.  Read once, cached. */
const char *sp_env(sp_env_knob knob);
long sp_env_long(sp_env_knob knob);
const char *sp_env_name(sp_env_knob knob);
const char *sp_env_doc(sp_env_knob knob);
const char *sp_env_default(sp_env_knob knob);

/* ---- bundled data ----------------------------------------------------------------
 * Resolves "models/NAME.json" or "hw/NAME.json" against, in order:
 * $SHARDPLAN_DATA, the source tree's data/ when the shardplan program runs
 * from its build tree (never for an installed library or program), the
 * installed $(pkgdatadir).  Writes the first existing path into out. */
sp_status sp_data_path(const char *relpath, char *out, size_t size);
/* The directory searched for bundled data (first of the above that exists). */
const char *sp_data_dir(void);

#ifdef __cplusplus
}
#endif
#endif /* SP_COMMON_H */
