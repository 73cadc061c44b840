/* spi_common.h: internal helpers shared by library modules (not installed). */
#ifndef SPI_COMMON_H
#define SPI_COMMON_H
#include <stdarg.h>
#include "sp_common.h"
#include "spi_ckd.h"

/* Records a message as this thread's last error and returns status. */
/* The data directory of a program that runs from its build tree (searched
 * after $SHARDPLAN_DATA, before the installed one); "" clears it. */
void spi_set_data_dir(const char *dir);
/* For programs run from their build tree: when this process's executable sits
 * in exe_dir, spi_set_data_dir(data_dir).  The directories are the calling
 * program's own (compiled into it, never into the library). */
void spi_use_build_tree_data(const char *exe_dir, const char *data_dir);
sp_status spi_fail(sp_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Fills err (if non-NULL) and the last error; returns code. */
sp_status spi_error_set(sp_error *err, sp_status code, const char *source, int line, int column,
                        const char *path, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A library opened at first use (dlopen), not linked, so that processes
 * which never call it do not load it: the program's PLplot (cli/cli_fig.c)
 * and SQLite (plan/sweep.c).  Each entry names a symbol and the function
 * pointer (of its type) to fill. */
typedef struct spi_dl_sym {
    const char *name;
    void *fn;   /* points to a function pointer */
} spi_dl_sym;
/* Opens soname and fills every syms[i].fn (i < n): SP_OK, else SP_EIO with
 * dlerror()'s message or the symbol the library lacks (some entries may be
 * filled then; the caller uses none). */
sp_status spi_dl_table(const char *soname, const spi_dl_sym *syms, int n);

/* err's text (err may be NULL: nothing) becomes "<what> <kind>: <text>", the
 * text cut to fit (e.g. "prefill group: ..."); the last error is left as it was. */
void spi_error_prefix(sp_error *err, const char *what, const char *kind);

/* CHECK: propagate a non-OK status up the stack, logging the frame at INFO. */
#define SP_CHECK(call)                                                                \
    do {                                                                              \
        sp_status sp_check_s_ = (call);                                               \
        if (sp_check_s_ != SP_OK) {                                                   \
            sp_log(SP_LOG_INFO, "TRACE", "-> %d at %s:%d", (int)sp_check_s_, __FILE__, __LINE__); \
            return sp_check_s_;                                                       \
        }                                                                             \
    } while (0)
#define SP_CHECKGOTO(call, st, label)                                                 \
    do {                                                                              \
        (st) = (call);                                                                \
        if ((st) != SP_OK) {                                                          \
            sp_log(SP_LOG_INFO, "TRACE", "-> %d at %s:%d", (int)(st), __FILE__, __LINE__); \
            goto label;                                                               \
        }                                                                             \
    } while (0)

/* Overflow-checked arithmetic: spi_ckd.h. */

#define SPI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#endif
