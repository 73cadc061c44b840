/*
 * bench_comm_threads.c: nccl-tests-style bandwidth tables for the threads
 * communicator backend (chips = threads of this process), with the
 * machine's own memcpy bandwidth measured in the same run beside them.
 *
 *   bench/bench_comm_threads [-e MAXBYTES] [-i ITERS_CAP] [-t 2,4,8]
 *
 * Definitions (nccl-tests, doc/PERFORMANCE.md):
 *   size   all-gather: total recv bytes (n*count*s); reduce-scatter: total
 *          send bytes (n*count*s); all-reduce: count*s; all-to-all: total
 *          send bytes (n*count*s).  `count` printed = size / s.
 *   algbw  = size / time;   busbw = algbw * f, f = 2(n-1)/n for all-reduce,
 *          (n-1)/n for the others.  busbw is what each chip really moves per
 *          second, comparable to a per-chip link (here: memcpy) rate.
 *   cpy1   one thread memcpy of `size` bytes, alone: bytes / time.
 *   cpyN   n threads each memcpy `size` bytes at once: per-thread rate
 *          (each thread times its own loop; mean over threads).
 *
 * Napkin math.  The backend is a pull model: for all-gather each chip
 * memcpy's (n-1)/n * size out of its peers' buffers, so busbw = that copy
 * rate; it cannot beat cpyN (all threads copying together, sharing the
 * cores and DRAM) and, for buffers that fit in cache, may approach cpy1.
 * Reduce-scatter reads n chunks and writes one per element (float adds are
 * ~free next to memory), all-reduce = reduce-scatter + all-gather over
 * chunks of count/n, all-to-all is all-gather's copy pattern.  Every call
 * also meets its group 2 (3 for all-reduce) times on a mutex + condvar: on
 * an idle core that is a few microseconds, but when n exceeds the cores the
 * wake-ups wait for the scheduler (tens of microseconds to milliseconds), so
 * small sizes measure latency, not bandwidth, and 8 threads on 2 cores is
 * oversubscribed by 4x: its busbw is at most the 2-core memory bandwidth
 * divided among 8 chips.
 */
#include "config.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "exec/sp_comm.h"
#include "bench/bench_comm_data.h"

static const char *const coll_label[NCOLL] = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all"};

static size_t max_bytes = (size_t)64 << 20;
static int iters_cap = 50;

typedef struct bench {
    sp_comm_world *w;
    int n;
} bench;
typedef struct chip { bench *b; int rank; } chip;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define XCHECK(call)                                                                            \
    do {                                                                                        \
        sp_status st_ = (call);                                                                 \
        if (st_ != SP_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, sp_status_str(st_), \
                    sp_last_error());                                                           \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)


static int iters_for(size_t size)
{
    size_t it = ((size_t)256 << 20) / (size ? size : 1);
    if (it > (size_t)iters_cap) it = (size_t)iters_cap;
    if (it < 3) it = 3;
    return (int)it;
}

static sp_status run_coll(int k, sp_comm *c, const float *send, float *recv, size_t count)
{
    switch (k) {
    case AG: return sp_comm_allgather(c, SP_AXES_X, send, recv, count, SP_DT_F32);
    case RS: return sp_comm_reducescatter(c, SP_AXES_X, send, recv, count, SP_DT_F32);
    case AR: return sp_comm_allreduce(c, SP_AXES_X, send, recv, count, SP_DT_F32);
    default: return sp_comm_alltoall(c, SP_AXES_X, send, recv, count, SP_DT_F32);
    }
}

static void *chip_main(void *p)
{
    chip *ch = p;
    bench *b = ch->b;
    int n = b->n, me = ch->rank;
    sp_comm *c;
    XCHECK(sp_comm_open(b->w, me, &c));
    char *sb = malloc(max_bytes), *rb = malloc(max_bytes);
    if (!sb || !rb) {
        fprintf(stderr, "out of memory (2 x %zu bytes per chip)\n", max_bytes);
        exit(1);
    }
    memset(sb, 1, max_bytes);   /* fault the pages in before timing */
    memset(rb, 2, max_bytes);
    for (int k = 0; k < NCOLL; k++) {
        if (me == 0) {
            printf("#\n# %s, %d chip threads (group = x axis)\n", coll_label[k], n);
            printf("# %10s %12s %5s %11s %12s %12s %7s %11s %14s\n", "size(B)", "count", "type", "time(us)",
                   "algbw(GB/s)", "busbw(GB/s)", "#wrong", "cpy1(GB/s)", "cpyN(GB/s/thr)");
        }
        for (size_t size = 8; size <= max_bytes; size *= 2) {
            size_t per = (k == AR) ? size / 4 : size / (4 * (size_t)n);   /* count argument */
            if (per == 0) continue;
            size_t bytes = (k == AR) ? per * 4 : per * 4 * (size_t)n;     /* actual size */
            if (bytes != size) continue;
            int iters = iters_for(bytes);
            float *send = (float *)sb, *recv = (float *)rb;
            /* validate */
            bench_fill(k, sp_comm_group_rank(c, SP_AXES_X), n, send, per);
            XCHECK(run_coll(k, c, send, recv, per));
            float wrong = (float)bench_wrong(k, sp_comm_group_rank(c, SP_AXES_X), n, recv, per);
            /* warm up, then time iters calls with one barrier at each end */
            for (int it = 0; it < 2; it++) XCHECK(run_coll(k, c, send, recv, per));
            XCHECK(sp_comm_barrier(c, SP_AXES_X));
            double t0 = now_s();
            for (int it = 0; it < iters; it++) XCHECK(run_coll(k, c, send, recv, per));
            XCHECK(sp_comm_barrier(c, SP_AXES_X));
            double t = (now_s() - t0) / iters;
            wrong += (float)bench_wrong(k, sp_comm_group_rank(c, SP_AXES_X), n, recv, per);   /* still right after the loop */
            XCHECK(sp_comm_allreduce(c, SP_AXES_X, &wrong, &wrong, 1, SP_DT_F32));
            /* memcpy of the same size: rank 0 alone, then all n at once */
            double t1 = 0, tn = 0;
            if (me == 0) {
                memcpy(rb, sb, bytes);
                double a = now_s();
                for (int it = 0; it < iters; it++) {
                    memcpy(rb, sb, bytes);
                    __asm__ __volatile__("" ::: "memory");
                }
                t1 = (now_s() - a) / iters;
            }
            XCHECK(sp_comm_barrier(c, SP_AXES_X));
            memcpy(rb, sb, bytes);
            XCHECK(sp_comm_barrier(c, SP_AXES_X));
            double a = now_s();
            for (int it = 0; it < iters; it++) {
                memcpy(rb, sb, bytes);
                __asm__ __volatile__("" ::: "memory");
            }
            float tl = (float)((now_s() - a) / iters);   /* own loop only: no barrier skew */
            XCHECK(sp_comm_allreduce(c, SP_AXES_X, &tl, &tl, 1, SP_DT_F32));
            tn = (double)tl / n;                           /* mean over the n threads */
            if (me == 0) {
                double alg = (double)bytes / t / 1e9;
                double f = (k == AR) ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
                printf("  %10zu %12zu %5s %11.2f %12.3f %12.3f %7.0f %11.3f %14.3f\n", bytes, bytes / 4, "float",
                       t * 1e6, alg, alg * f, (double)wrong, (double)bytes / t1 / 1e9, (double)bytes / tn / 1e9);
                fflush(stdout);
            }
        }
    }
    free(sb);
    free(rb);
    sp_comm_close(c);
    return NULL;
}

int main(int argc, char **argv)
{
    int ns[8] = {2, 4, 8}, nn = 3;
    int opt;
    while ((opt = getopt(argc, argv, "e:i:t:")) != -1) {
        if (opt == 'e') max_bytes = (size_t)strtoull(optarg, NULL, 0);
        else if (opt == 'i') iters_cap = atoi(optarg);
        else if (opt == 't') {
            nn = 0;
            for (char *s = strtok(optarg, ","); s && nn < 8; s = strtok(NULL, ",")) ns[nn++] = atoi(s);
        } else {
            fprintf(stderr, "usage: %s [-e MAXBYTES] [-i ITERS_CAP] [-t 2,4,8]\n", argv[0]);
            return 2;
        }
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("# bench_comm_threads: threads backend, %ld online cores, sizes 8 B .. %zu B, "
           "warmup 2, iters min(%d, 256MiB/size) >= 3\n", cores, max_bytes, iters_cap);
    for (int t = 0; t < nn; t++) {
        int n = ns[t];
        if (n < 2 || n > 64) continue;
        if (n > cores) printf("#\n# NOTE: %d chip threads on %ld cores: oversubscribed %.1fx\n", n, cores, (double)n / cores);
        sp_mesh m = {{1, 1, n, 1, 1}};
        bench b = {.n = n};
        XCHECK(sp_comm_world_create(SP_COMM_BACKEND_THREADS, &m, &b.w));
        pthread_t th[64];
        chip ch[64];
        for (int r = 0; r < n; r++) {
            ch[r] = (chip){&b, r};
            pthread_create(&th[r], NULL, chip_main, &ch[r]);
        }
        for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
        sp_comm_world_free(b.w);
    }
    return 0;
}
