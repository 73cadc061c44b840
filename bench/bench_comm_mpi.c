/*
 * bench_comm_mpi.c: nccl-tests-style tables for the MPI communicator backend
 * (one process per chip) next to the raw MPI collectives on the same sizes,
 * in the same run, with our overhead per row.
 *
 *   mpirun -np N bench/bench_comm_mpi [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-i ITERS_CAP] [-r TRIALS] [-w WARMUP]
 *   e.g. OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *        mpirun --oversubscribe --bind-to none --mca btl self,vader -np 4 bench/bench_comm_mpi
 *
 * The mesh is {1, 1, N, 1, 1}: the group is the x axis = all N ranks, group
 * rank = MPI rank, so "ours" (sp_comm_* on SP_AXES_X) and "raw" (on a dup of
 * MPI_COMM_WORLD) run the same collective over the same processes:
 *   all-gather      sp_comm_allgather      vs MPI_Allgather
 *   reduce-scatter  sp_comm_reducescatter  vs MPI_Reduce_scatter_block (MPI_SUM)
 *   all-reduce      sp_comm_allreduce      vs MPI_Allreduce (MPI_SUM)
 *   all-to-all      sp_comm_alltoall       vs MPI_Alltoall
 *
 * Definitions (nccl-tests, doc/PERFORMANCE.md):
 *   size   all-gather: total recv bytes (N*count*4); reduce-scatter: total
 *          send bytes (N*count*4); all-reduce: count*4; all-to-all: total
 *          send bytes (N*count*4).  `count` printed = size / 4 (float).
 *   time   per call: each rank times `iters` back-to-back calls (after a
 *          warm-up and a barrier) up to and including ONE barrier at the
 *          end; the row shows the slowest rank (MPI_MAX).
 *   algbw  = size / time;  busbw = algbw * f, f = 2(N-1)/N for all-reduce,
 *          (N-1)/N for the others: the bytes each rank really moves per
 *          second, comparable with a per-rank copy rate (cpyN).
 *   #wrong elements that differ from the exact answer, summed over ranks,
 *          checked before timing and again after the timed loop.  The data
 *          are small integers in float, so every sum is exact in any order
 *          (raw MPI may reduce in any order; ours is rank-ordered anyway).
 *   ovh    our time / raw time - 1 (negative: ours was faster).
 *   cpyN   every rank memcpy's `size` bytes at once: mean per-rank GB/s.
 *
 * Napkin math (CI: 2 cores, Open MPI 4.1, btl self,vader).  vader is the
 * shared-memory transport: messages up to the eager limit (4 KiB) are
 * copied twice (into a shared FIFO, out of it); larger ones go by a single
 * copy (CMA: process_vm_readv from the peer's buffer), so a byte received
 * costs about one memcpy and busbw can at best approach cpyN (several GB/s
 * in cache, ~DRAM bandwidth / active ranks beyond).  Every call also pays a
 * handshake per peer (~1-3 us on an idle core), so below ~64 KiB the tables
 * measure latency, not bandwidth.  Ours adds, on top of the same MPI
 * traffic: argument checks (~0.1 us); MPI_Test polling instead of a
 * blocking wait (same progress engine; after 2000 tests it sleeps 1 us..1 ms
 * between tests, which can cost up to ~1 ms per call once a call is slow,
 * e.g. oversubscribed); reduce-scatter = MPI_Ialltoall + a rank-order sum
 * (moves (N-1)/N of the send buffer, like a ring, plus one local pass over
 * N*count floats, ~the memcpy cost of `size`); all-reduce = that over
 * uneven chunks + MPI_Iallgatherv (the ring's 2(N-1)/N volume, but two MPI
 * calls and one extra local pass: expect ours >= raw by the cost of one
 * copy of `size` at large sizes, and by one extra round trip at small
 * ones).  All-gather and all-to-all are the same MPI call nonblocking, so
 * their overhead should be ~0 beyond noise.  With 4 ranks on 2 cores every
 * poller shares a core with a peer: times grow by the scheduler's slices
 * and both columns suffer alike, so compare ovh, not absolute figures.
 *
 * Measured (2-core AMD EPYC VM, Open MPI 4.1.4, shared with other builds;
 * median ovh for sizes < 64 KiB | >= 64 KiB):
 *   2 ranks: all-gather +82% | +3%, reduce-scatter +97% | -68%,
 *            all-reduce +149% | +33%, all-to-all +120% | +4%
 *   4 ranks: all-gather +9% | -6%, reduce-scatter -7% | -71%,
 *            all-reduce +54% | +21%, all-to-all +27% | +1%
 * Small sizes: ours costs ~0.3 us more per call at 2 ranks (0.6 vs 0.3 us:
 * the nonblocking libnbc schedule + MPI_Test loop vs the tuned blocking
 * call), all-reduce one extra round trip (two MPI calls).  Large sizes:
 * all-gather / all-to-all at parity, ~9-10 GB/s busbw at 1-4 MiB with 2
 * ranks (about a fifth of cpyN: CMA's per-page process_vm_readv cost);
 * reduce-scatter 3-5x FASTER than Open MPI's MPI_Reduce_scatter_block
 * (Open MPI 4.1's default algorithm for it is far slower here);
 * all-reduce 20-40% slower than MPI_Allreduce's ring (the extra local pass
 * and two synchronisations), within the napkin estimate above.
 */
#include "config.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "exec/sp_comm.h"
#include "bench/bench_comm_data.h"

static const char *const coll_label[NCOLL] = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all"};
static const char *const raw_label[NCOLL] = {"MPI_Allgather", "MPI_Reduce_scatter_block", "MPI_Allreduce",
                                             "MPI_Alltoall"};

static size_t min_bytes = 8, max_bytes = (size_t)32 << 20;
static size_t factor = 2;
static int iters_cap = 100, warmup = 3, trials = 5;
static int g_rank, g_size;
static MPI_Comm g_raw;

#define XCHECK(call)                                                                              \
    do {                                                                                          \
        sp_status st_ = (call);                                                                   \
        if (st_ != SP_OK) {                                                                       \
            fprintf(stderr, "rank %d: %s:%d: %s: %s: %s\n", g_rank, __FILE__, __LINE__, #call,    \
                    sp_status_str(st_), sp_last_error());                                         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
        }                                                                                         \
    } while (0)

#define MCHECK(call)                                                                              \
    do {                                                                                          \
        int rc_ = (call);                                                                         \
        if (rc_ != MPI_SUCCESS) {                                                                 \
            fprintf(stderr, "rank %d: %s:%d: %s failed (%d)\n", g_rank, __FILE__, __LINE__, #call, \
                    rc_);                                                                         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
        }                                                                                         \
    } while (0)

static int iters_for(size_t size)
{
    size_t it = ((size_t)64 << 20) / (size ? size : 1);
    if (it > (size_t)iters_cap) it = (size_t)iters_cap;
    if (it < 3) it = 3;
    return (int)it;
}

static void run_ours(int k, sp_comm *c, const float *send, float *recv, size_t count)
{
    switch (k) {
    case AG: XCHECK(sp_comm_allgather(c, SP_AXES_X, send, recv, count, SP_DT_F32)); break;
    case RS: XCHECK(sp_comm_reducescatter(c, SP_AXES_X, send, recv, count, SP_DT_F32)); break;
    case AR: XCHECK(sp_comm_allreduce(c, SP_AXES_X, send, recv, count, SP_DT_F32)); break;
    default: XCHECK(sp_comm_alltoall(c, SP_AXES_X, send, recv, count, SP_DT_F32)); break;
    }
}

static void run_raw(int k, const float *send, float *recv, size_t count)
{
    int n = (int)count;
    switch (k) {
    case AG: MCHECK(MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, g_raw)); break;
    case RS: MCHECK(MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, g_raw)); break;
    case AR: MCHECK(MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, g_raw)); break;
    default: MCHECK(MPI_Alltoall(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, g_raw)); break;
    }
}

static void run_one(int k, sp_comm *c, const float *send, float *recv, size_t count)
{
    if (c) run_ours(k, c, send, recv, count);
    else run_raw(k, send, recv, count);
}

/* Fills, runs once and counts this rank's wrong elements (c NULL: raw). */
static double validate(int k, sp_comm *c, float *send, float *recv, size_t count)
{
    bench_fill(k, g_rank, g_size, send, count);
    size_t nrecv = (k == AG || k == A2A) ? (size_t)g_size * count : count;
    memset(recv, 0xEE, nrecv * sizeof(float));   /* stale results must not pass */
    run_one(k, c, send, recv, count);
    return bench_wrong(k, g_rank, g_size, recv, count);
}

/* One trial: barrier, iters calls, ONE barrier at the end; the slowest
 * rank's seconds per call. */
static double trial(int k, sp_comm *c, const float *send, float *recv, size_t count, int iters)
{
    MCHECK(MPI_Barrier(g_raw));
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++) run_one(k, c, send, recv, count);
    MCHECK(MPI_Barrier(g_raw));
    double t = (MPI_Wtime() - t0) / iters, tmax = 0;
    MCHECK(MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, g_raw));
    return tmax;
}

/* Validates both, warms both up, then `trials` alternating timed trials of
 * ours and raw (the machine is shared: the best trial of each is the
 * figure); validates both again after.  #wrong summed over ranks. */
static void measure(int k, sp_comm *c, float *send, float *recv, size_t count, int iters, double t[2],
                    double wrong[2])
{
    double bad[2];
    for (int v = 0; v < 2; v++) bad[v] = validate(k, v ? NULL : c, send, recv, count);
    for (int v = 0; v < 2; v++)
        for (int it = 0; it < warmup; it++) run_one(k, v ? NULL : c, send, recv, count);
    t[0] = t[1] = 1e30;
    for (int r = 0; r < trials; r++)
        for (int v = 0; v < 2; v++) {
            double x = trial(k, v ? NULL : c, send, recv, count, iters);
            if (x < t[v]) t[v] = x;
        }
    for (int v = 0; v < 2; v++) {
        bad[v] += validate(k, v ? NULL : c, send, recv, count);
    }
    MCHECK(MPI_Allreduce(bad, wrong, 2, MPI_DOUBLE, MPI_SUM, g_raw));
}

/* Every rank memcpy's bytes at once: mean per-rank seconds per copy. */
static double copy_time(char *dst, const char *src, size_t bytes, int iters)
{
    memcpy(dst, src, bytes);
    MCHECK(MPI_Barrier(g_raw));
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++) {
        memcpy(dst, src, bytes);
        __asm__ __volatile__("" ::: "memory");
    }
    double t = (MPI_Wtime() - t0) / iters, sum = 0;
    MCHECK(MPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, g_raw));
    return sum / g_size;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    if (n < 1) return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(const char *argv0)
{
    if (g_rank == 0)
        fprintf(stderr, "usage: mpirun -np N %s [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-i ITERS_CAP] [-r TRIALS] [-w WARMUP]\n",
                argv0);
    MPI_Finalize();
    exit(2);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int opt;
    while ((opt = getopt(argc, argv, "b:e:f:i:r:w:")) != -1) {
        if (opt == 'b') min_bytes = (size_t)strtoull(optarg, NULL, 0);
        else if (opt == 'e') max_bytes = (size_t)strtoull(optarg, NULL, 0);
        else if (opt == 'f') factor = (size_t)strtoull(optarg, NULL, 0);
        else if (opt == 'i') iters_cap = atoi(optarg);
        else if (opt == 'r') trials = atoi(optarg);
        else if (opt == 'w') warmup = atoi(optarg);
        else usage(argv[0]);
    }
    if (min_bytes < 1 || factor < 2 || iters_cap < 1 || trials < 1 || warmup < 0 || max_bytes > ((size_t)1 << 31) - 4)
        usage(argv[0]);
    if (g_size < 2) {
        if (g_rank == 0) printf("# bench_comm_mpi: needs >= 2 ranks (mpirun -np N), got %d\n", g_size);
        MPI_Finalize();
        return 0;
    }
    MCHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_raw));
    sp_mesh m = {{1, 1, g_size, 1, 1}};
    sp_comm_world *w;
    XCHECK(sp_comm_world_create(SP_COMM_BACKEND_MPI, &m, &w));
    sp_comm *c;
    XCHECK(sp_comm_open(w, g_rank, &c));
    if (sp_comm_group_rank(c, SP_AXES_X) != g_rank) {
        fprintf(stderr, "rank %d: group rank %d != MPI rank\n", g_rank, sp_comm_group_rank(c, SP_AXES_X));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char *sb = malloc(max_bytes), *rb = malloc(max_bytes);
    if (!sb || !rb) {
        fprintf(stderr, "rank %d: out of memory (2 x %zu bytes)\n", g_rank, max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(sb, 1, max_bytes);   /* fault the pages in before timing */
    memset(rb, 2, max_bytes);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (g_rank == 0) {
        printf("# bench_comm_mpi: %d ranks (mesh x=%d, group SP_AXES_X), %ld online cores%s\n", g_size, g_size,
               cores, g_size > cores ? " (oversubscribed)" : "");
        printf("# sizes %zu B .. %zu B x%zu, warmup %d, iters min(%d, 64MiB/size) >= 3 per trial with one barrier "
               "at the end,\n# time = slowest rank, best of %d trials alternating ours/raw\n",
               min_bytes, max_bytes, factor, warmup, iters_cap, trials);
    }
    int n = g_size;
    double ovh[NCOLL][2][64];   /* [k][size < 64 KiB, >= 64 KiB][row] */
    int novh[NCOLL][2] = {{0}};
    for (int k = 0; k < NCOLL; k++) {
        if (g_rank == 0) {
            printf("#\n# %s: ours = sp_comm (MPI backend), raw = %s\n", coll_label[k], raw_label[k]);
            printf("# %10s %10s %5s | %10s %8s %8s %6s | %10s %8s %8s %6s | %8s %8s\n", "size(B)", "count", "type",
                   "ours(us)", "algbw", "busbw", "#wrong", "raw(us)", "algbw", "busbw", "#wrong", "ovh(%)",
                   "cpyN");
            printf("# %10s %10s %5s | %10s %8s %8s %6s | %10s %8s %8s %6s | %8s %8s\n", "", "", "", "", "(GB/s)",
                   "(GB/s)", "", "", "(GB/s)", "(GB/s)", "", "", "(GB/s)");
        }
        for (size_t size = min_bytes; size <= max_bytes; size *= factor) {
            size_t per = (k == AR) ? size / 4 : size / (4 * (size_t)n);   /* count argument */
            if (per == 0) continue;
            size_t bytes = (k == AR) ? per * 4 : per * 4 * (size_t)n;
            if (bytes != size) continue;
            int iters = iters_for(bytes);
            float *send = (float *)sb, *recv = (float *)rb;
            double t[2], wr[2];
            measure(k, c, send, recv, per, iters, t, wr);
            double t_ours = t[0], t_raw = t[1], w_ours = wr[0], w_raw = wr[1];
            double t_cpy = copy_time(rb, sb, bytes, iters);
            if (g_rank == 0) {
                double f = (k == AR) ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
                double ao = (double)bytes / t_ours / 1e9, ar = (double)bytes / t_raw / 1e9;
                double o = t_ours / t_raw - 1.0;
                int big = bytes >= ((size_t)64 << 10);
                if (novh[k][big] < 64) ovh[k][big][novh[k][big]++] = o;
                printf("  %10zu %10zu %5s | %10.2f %8.3f %8.3f %6.0f | %10.2f %8.3f %8.3f %6.0f | %+8.1f %8.2f\n",
                       bytes, bytes / 4, "float", t_ours * 1e6, ao, ao * f, w_ours, t_raw * 1e6, ar, ar * f, w_raw,
                       100.0 * o, (double)bytes / t_cpy / 1e9);
                fflush(stdout);
            }
        }
    }
    if (g_rank == 0) {
        printf("#\n# median overhead (ours / raw - 1), sizes < 64 KiB | >= 64 KiB:\n");
        for (int k = 0; k < NCOLL; k++)
            printf("#   %-15s %+8.1f%% | %+8.1f%%\n", coll_label[k], 100.0 * median(ovh[k][0], novh[k][0]),
                   100.0 * median(ovh[k][1], novh[k][1]));
    }
    free(sb);
    free(rb);
    sp_comm_close(c);
    sp_comm_world_free(w);
    MPI_Comm_free(&g_raw);
    MPI_Finalize();
    return 0;
}
