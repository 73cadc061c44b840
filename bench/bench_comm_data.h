/*
 * bench_comm_data.h: the data and the exact answers of the communicator
 * benchmarks (bench_comm_threads, bench_comm_mpi): one definition of what
 * each rank sends and of what it must receive, so both count #wrong alike.
 *
 * Element i of rank r's send buffer is bench_val(r, i): small integers, so
 * every sum over <= 64 ranks is exact in float in any order.
 */
#ifndef BENCH_COMM_DATA_H
#define BENCH_COMM_DATA_H
#include <stddef.h>

enum { AG, RS, AR, A2A, NCOLL };   /* all-gather, reduce-scatter, all-reduce, all-to-all */

static inline float bench_val(int rank, size_t i)
{
    return (float)((int)((rank * 131u + (unsigned)(i % 1021u) * 17u) % 251u) - 125);
}

/* Send buffer of collective k for group rank `rank` of n: count elements
 * (all-gather, all-reduce) or n·count (reduce-scatter, all-to-all). */
static inline void bench_fill(int k, int rank, int n, float *send, size_t count)
{
    size_t ns = (k == AG || k == AR) ? count : (size_t)n * count;
    for (size_t i = 0; i < ns; i++) send[i] = bench_val(rank, i);
}

/* Elements of recv that differ from the exact result on group rank g of n. */
static inline double bench_wrong(int k, int g, int n, const float *recv, size_t count)
{
    double wrong = 0;
    if (k == AG) {
        for (int h = 0; h < n; h++)
            for (size_t i = 0; i < count; i++) wrong += recv[(size_t)h * count + i] != bench_val(h, i);
    } else if (k == RS || k == AR) {
        size_t off = (k == RS) ? (size_t)g * count : 0;
        for (size_t i = 0; i < count; i++) {
            float e = bench_val(0, off + i);
            for (int h = 1; h < n; h++) e += bench_val(h, off + i);
            wrong += recv[i] != e;
        }
    } else {
        for (int h = 0; h < n; h++)
            for (size_t i = 0; i < count; i++)
                wrong += recv[(size_t)h * count + i] != bench_val(h, (size_t)g * count + i);
    }
    return wrong;
}

#endif /* BENCH_COMM_DATA_H */
