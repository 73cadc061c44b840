/* mpi_harness.h: failure bookkeeping shared by the MPI test programs
 * (check_comm_mpi, check_comm_nccl).  Define HARNESS_NAME before including. */
#ifndef MPI_HARNESS_H
#define MPI_HARNESS_H
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include "sp_common.h"

static int g_rank, g_size, g_fails;
static long g_checks;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    if (g_fails++ >= 10) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, HARNESS_NAME " rank %d: FAIL: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* a check that counts, and reports (up to ten) failures */
#define EXPECT(cond, ...)               \
    do {                                \
        g_checks++;                     \
        if (!(cond)) fail(__VA_ARGS__); \
    } while (0)

/* a call that must succeed: anything else ends the whole job */
#define OK(call)                                                                                 \
    do {                                                                                         \
        sp_status st_ = (call);                                                                  \
        g_checks++;                                                                              \
        if (st_ != SP_OK) {                                                                      \
            fprintf(stderr, HARNESS_NAME " rank %d: %s -> %d: %s\n", g_rank, #call, (int)st_,    \
                    sp_last_error());                                                            \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
        }                                                                                        \
    } while (0)
#endif
