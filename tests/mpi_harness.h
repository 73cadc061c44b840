/* mpi_harness.h: failure bookkeeping shared by the MPI test programs
 * (check_comm_mpi, check_comm_nccl).  Define HARNESS_NAME before including. */
#ifndef MPI_HARNESS_H
#define MPI_HARNESS_H
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "sp_common.h"
#include "exec/sp_comm.h"

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

/* A few mesh shapes of g_size chips, together covering every axis with
 * extent > 1 (8: 2x2x2, stage x replica x x, replica x y, stage 8); any
 * other size: one line of g_size along x.  Runs `run` on each. */
static void harness_each_shape(void (*run)(const sp_mesh *m))
{
    static const sp_mesh shapes8[] = {{{1, 1, 2, 2, 2}}, {{2, 2, 2, 1, 1}}, {{1, 2, 1, 4, 1}}, {{8, 1, 1, 1, 1}}};
    static const sp_mesh shapes4[] = {{{1, 1, 2, 2, 1}}, {{2, 1, 1, 1, 2}}, {{1, 1, 1, 4, 1}}};
    static const sp_mesh shapes2[] = {{{1, 1, 2, 1, 1}}, {{2, 1, 1, 1, 1}}, {{1, 1, 1, 1, 2}}};
    const sp_mesh *sh = NULL;
    size_t n = 0;
    if (g_size == 8) sh = shapes8, n = sizeof shapes8 / sizeof *shapes8;
    if (g_size == 4) sh = shapes4, n = sizeof shapes4 / sizeof *shapes4;
    if (g_size == 2) sh = shapes2, n = sizeof shapes2 / sizeof *shapes2;
    sp_mesh line = {{1, 1, g_size, 1, 1}};
    if (!sh) sh = &line, n = 1;
    for (size_t i = 0; i < n; i++) run(&sh[i]);
}

/* A mesh of g_size + 1 chips on g_size processes is refused, naming mpirun -np. */
static void harness_size_mismatch(sp_comm_backend backend)
{
    sp_mesh m = {{1, 1, g_size + 1, 1, 1}};
    sp_comm_world *w = NULL;
    sp_status st = sp_comm_world_create(backend, &m, &w);
    EXPECT(st == SP_EINVAL && w == NULL, "mesh of %d chips on %d processes gave %d", g_size + 1, g_size, (int)st);
    EXPECT(strstr(sp_last_error(), "mpirun -np") != NULL, "size mismatch message: %s", sp_last_error());
}
#endif
