/* check_comm_nccl.c: the NCCL communicator backend, run under mpirun by
 * tests/nccl_comm.sh (one process per GPU).  Plain MPI program like
 * check_comm_mpi: failures are printed with their rank, the program exits
 * non-zero (MPI_Abort so no rank is left waiting).
 *
 * Modes:
 *   check_comm_nccl --probe     no MPI job needed: exits 77 (skip) with the
 *                               reason when fewer than 2 GPUs are visible,
 *                               else prints the GPU count and exits 0
 *   check_comm_nccl             every collective, every axis mask, the mesh
 *                               shapes of check_comm_mpi, byte counters as in
 *                               the threads backend, send/recv, argument errors
 *   check_comm_nccl --hang R    rank R never enters the all-reduce: the others
 *                               must time out (SP_ECOMM, ncclCommAbort)
 *
 * Exact by construction.  NCCL reduces in its own order, so the data are
 * small integers in float (every partial sum < 2^24): the sums are exact in
 * any order and compared bit for bit with the host reference.  All buffers
 * handed to sp_comm are device memory (cudaMalloc); data go in and out by
 * cudaMemcpy.  Groups of one chip are exercised in place only (the front's
 * copy for trivial groups is a host memmove, see exec/comm_nccl.c).
 */
#include "config.h"
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "exec/sp_comm.h"

#define HARNESS_NAME "check_comm_nccl"
#include "tests/mpi_harness.h"

#define CU(call)                                                                                 \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "check_comm_nccl rank %d: %s: %s\n", g_rank, #call,                  \
                    cudaGetErrorString(e_));                                                     \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
        }                                                                                        \
    } while (0)

/* Small integers in float: any summation order is exact. */
static float val(int grank, size_t i, int salt)
{
    return (float)((grank * 37 + (int)(i % 101) * 13 + salt) % 89 - 44);
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    CU(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

static void to_dev(void *d, const void *h, size_t bytes)
{
    if (bytes) CU(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
}

static void to_host(void *h, const void *d, size_t bytes)
{
    if (bytes) CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

typedef struct ctx {
    sp_comm *c;
    unsigned mask;
    int K, g;
    int members[64];
} ctx;

static void check_bytes(ctx *x, sp_coll_kind k, uint64_t want, const char *what, size_t count)
{
    sp_comm_counters s;
    OK(sp_comm_stats(x->c, &s));
    sp_comm_stats_reset(x->c);
    EXPECT(s.bytes_sent[k] == want && s.bytes_recv[k] == want,
           "%s mask 0x%x count %zu: bytes sent %llu recv %llu, want %llu", what, x->mask, count,
           (unsigned long long)s.bytes_sent[k], (unsigned long long)s.bytes_recv[k], (unsigned long long)want);
}

static void t_allgather(ctx *x, size_t count, sp_dtype dt, int inplace)
{
    if (x->K == 1 && !inplace) return;
    size_t s = (size_t)sp_dtype_bytes(dt), K = (size_t)x->K, cb = count * s;
    unsigned char *h = malloc(K * cb + 1);
    memset(h, 0xEE, K * cb);
    unsigned char *own = h + (size_t)x->g * cb;
    for (size_t i = 0; i < cb; i++) own[i] = (unsigned char)(g_rank * 7 + i * 3 + 1);
    unsigned char *drecv = dalloc(K * cb), *dsend = inplace ? drecv + (size_t)x->g * cb : dalloc(cb);
    to_dev(drecv, h, K * cb);
    if (!inplace) to_dev(dsend, own, cb);
    OK(sp_comm_allgather(x->c, x->mask, dsend, drecv, count, dt));
    to_host(h, drecv, K * cb);
    for (size_t r = 0; r < K; r++)
        for (size_t i = 0; i < cb; i++)
            if (h[r * cb + i] != (unsigned char)(x->members[r] * 7 + i * 3 + 1)) {
                fail("allgather mask 0x%x count %zu dt %d: chunk %zu byte %zu wrong", x->mask, count, (int)dt, r, i);
                r = K;
                break;
            }
    check_bytes(x, SP_COLL_ALLGATHER, (uint64_t)(K - 1) * cb, "allgather", count);
    if (!inplace) cudaFree(dsend);
    cudaFree(drecv);
    free(h);
}

static void t_alltoall(ctx *x, size_t count, sp_dtype dt)
{
    if (x->K == 1) return;   /* not in place: the front would memmove device memory */
    size_t s = (size_t)sp_dtype_bytes(dt), K = (size_t)x->K, cb = count * s;
    unsigned char *h = malloc(K * cb + 1);
    for (size_t r = 0; r < K; r++)
        for (size_t i = 0; i < cb; i++) h[r * cb + i] = (unsigned char)(g_rank * 11 + r * 5 + i);
    unsigned char *dsend = dalloc(K * cb), *drecv = dalloc(K * cb);
    to_dev(dsend, h, K * cb);
    OK(sp_comm_alltoall(x->c, x->mask, dsend, drecv, count, dt));
    to_host(h, drecv, K * cb);
    for (size_t r = 0; r < K; r++)
        for (size_t i = 0; i < cb; i++)
            if (h[r * cb + i] != (unsigned char)(x->members[r] * 11 + (size_t)x->g * 5 + i)) {
                fail("alltoall mask 0x%x count %zu: chunk %zu byte %zu wrong", x->mask, count, r, i);
                r = K;
                break;
            }
    check_bytes(x, SP_COLL_ALLTOALL, (uint64_t)(K - 1) * cb, "alltoall", count);
    cudaFree(dsend);
    cudaFree(drecv);
    free(h);
}

static float ref_sum(ctx *x, size_t e, int salt)
{
    float acc = val(x->members[0], e, salt);
    for (int h = 1; h < x->K; h++) acc += val(x->members[h], e, salt);
    return acc;
}

static void t_reducescatter(ctx *x, size_t count, int inplace)
{
    if (x->K == 1 && !inplace) return;
    size_t K = (size_t)x->K;
    float *h = malloc((K * count + 1) * sizeof(float));
    for (size_t e = 0; e < K * count; e++) h[e] = val(g_rank, e, 5);
    float *dsend = dalloc(K * count * sizeof(float));
    float *drecv = inplace ? dsend + (size_t)x->g * count : dalloc(count * sizeof(float));
    to_dev(dsend, h, K * count * sizeof(float));
    OK(sp_comm_reducescatter(x->c, x->mask, dsend, drecv, count, SP_DT_F32));
    to_host(h, drecv, count * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        float want = ref_sum(x, (size_t)x->g * count + i, 5);
        if (memcmp(&want, &h[i], sizeof want) != 0) {
            fail("reducescatter mask 0x%x count %zu: element %zu = %.9g, want %.9g", x->mask, count, i,
                 (double)h[i], (double)want);
            break;
        }
    }
    check_bytes(x, SP_COLL_REDUCESCATTER, (uint64_t)(K - 1) * count * 4, "reducescatter", count);
    if (!inplace) cudaFree(drecv);
    cudaFree(dsend);
    free(h);
}

static void t_allreduce(ctx *x, size_t count, int inplace)
{
    if (x->K == 1 && !inplace) return;
    size_t K = (size_t)x->K;
    float *h = malloc((count + 1) * sizeof(float));
    for (size_t e = 0; e < count; e++) h[e] = val(g_rank, e, 9);
    float *dsend = dalloc(count * sizeof(float)), *drecv = inplace ? dsend : dalloc(count * sizeof(float));
    to_dev(dsend, h, count * sizeof(float));
    OK(sp_comm_allreduce(x->c, x->mask, dsend, drecv, count, SP_DT_F32));
    to_host(h, drecv, count * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        float want = ref_sum(x, i, 9);
        if (memcmp(&want, &h[i], sizeof want) != 0) {
            fail("allreduce mask 0x%x count %zu: element %zu = %.9g, want %.9g", x->mask, count, i, (double)h[i],
                 (double)want);
            break;
        }
    }
    size_t cg = count / K + ((size_t)x->g < count % K);
    check_bytes(x, SP_COLL_ALLREDUCE, ((K - 1) * cg + count - cg) * 4, "allreduce", count);
    if (!inplace) cudaFree(drecv);
    cudaFree(dsend);
    free(h);
}

static void run_shape(const sp_mesh *m)
{
    sp_comm_world *w;
    OK(sp_comm_world_create(SP_COMM_BACKEND_NCCL, m, &w));
    int first, n;
    OK(sp_comm_world_local_ranks(w, &first, &n));
    EXPECT(first == g_rank && n == 1, "local ranks %d+%d, want %d+1", first, n, g_rank);
    EXPECT(sp_comm_world_backend(w) == SP_COMM_BACKEND_NCCL, "backend");
    sp_comm *c;
    OK(sp_comm_open(w, g_rank, &c));
    static const size_t counts[] = {0, 1, 3, 7, 64, 1001, 1 << 18};
    for (unsigned mask = 0; mask <= SP_AXES_ALL; mask++) {
        ctx x = {.c = c, .mask = mask};
        x.K = sp_comm_group_size(c, mask);
        x.g = sp_comm_group_rank(c, mask);
        EXPECT(x.K == sp_mesh_group_size(m, mask) && x.g == sp_mesh_group_rank(m, g_rank, mask),
               "group size/rank for mask 0x%x", mask);
        sp_mesh_group_members(m, g_rank, mask, x.members);
        sp_comm_stats_reset(c);
        for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
            size_t cnt = counts[ci];
            t_allgather(&x, cnt, SP_DT_F32, 0);
            t_allgather(&x, cnt, SP_DT_BF16, 1);
            t_allgather(&x, cnt, SP_DT_INT8, 0);
            t_alltoall(&x, cnt, SP_DT_F32);
            t_alltoall(&x, cnt, SP_DT_INT8);
            t_reducescatter(&x, cnt, 0);
            t_reducescatter(&x, cnt, 1);
            t_allreduce(&x, cnt, 0);
            t_allreduce(&x, cnt, 1);
            OK(sp_comm_barrier(c, mask));
        }
    }
    /* Ring send/recv over global ranks: even ranks send first. */
    for (size_t cnt = 0; cnt <= 1000; cnt += 333) {
        int to = (g_rank + 1) % g_size, from = (g_rank + g_size - 1) % g_size;
        float *a = malloc((cnt + 1) * sizeof(float)), *b = malloc((cnt + 1) * sizeof(float));
        for (size_t i = 0; i < cnt; i++) a[i] = val(g_rank, i, 3);
        float *da = dalloc(cnt * sizeof(float)), *db = dalloc(cnt * sizeof(float));
        to_dev(da, a, cnt * sizeof(float));
        sp_comm_stats_reset(c);
        if (g_rank % 2 == 0) {
            OK(sp_comm_send(c, to, da, cnt, SP_DT_F32));
            OK(sp_comm_recv(c, from, db, cnt, SP_DT_F32));
        } else {
            OK(sp_comm_recv(c, from, db, cnt, SP_DT_F32));
            OK(sp_comm_send(c, to, da, cnt, SP_DT_F32));
        }
        to_host(b, db, cnt * sizeof(float));
        for (size_t i = 0; i < cnt; i++) {
            float want = val(from, i, 3);
            if (memcmp(&want, &b[i], sizeof want)) {
                fail("send/recv count %zu: element %zu wrong", cnt, i);
                break;
            }
        }
        sp_comm_counters s;
        OK(sp_comm_stats(c, &s));
        EXPECT(s.bytes_sent[SP_COLL_SENDRECV] == cnt * 4 && s.bytes_recv[SP_COLL_SENDRECV] == cnt * 4 &&
                   s.calls[SP_COLL_SENDRECV] == 2,
               "send/recv counters %llu/%llu", (unsigned long long)s.bytes_sent[SP_COLL_SENDRECV],
               (unsigned long long)s.bytes_recv[SP_COLL_SENDRECV]);
        cudaFree(da);
        cudaFree(db);
        free(a);
        free(b);
    }
    /* Argument errors stay local (no NCCL call is made). */
    float *f = dalloc(4 * sizeof(float));
    EXPECT(sp_comm_allreduce(c, SP_AXES_ALL, f, f, 1, SP_DT_BF16) == SP_ENOTSUP, "bf16 reduce");
    EXPECT(sp_comm_send(c, g_rank, f, 1, SP_DT_F32) == SP_EINVAL, "send to self");
    EXPECT(sp_comm_alltoall(c, SP_AXES_ALL, f, f, 1, SP_DT_F32) == SP_EINVAL, "alltoall in place");
    cudaFree(f);
    OK(sp_comm_barrier(c, SP_AXES_ALL));
    sp_comm_close(c);
    sp_comm_world_free(w);
}

static _Noreturn void run_hang(int victim)
{
    sp_mesh m = {{1, 1, g_size, 1, 1}};
    sp_comm_world *w;
    OK(sp_comm_world_create(SP_COMM_BACKEND_NCCL, &m, &w));
    sp_comm *c;
    OK(sp_comm_open(w, g_rank, &c));
    float *buf = dalloc(256 * sizeof(float));
    CU(cudaMemset(buf, 0, 256 * sizeof(float)));
    OK(sp_comm_barrier(c, SP_AXES_ALL));
    if (g_rank == victim) sleep(120);   /* alive but stuck: the others' timeout must fire */
    for (int it = 0;; it++) {
        sp_status st = sp_comm_allreduce(c, SP_AXES_ALL, buf, buf, 256, SP_DT_F32);
        if (st != SP_OK) {
            fprintf(stderr, "check_comm_nccl rank %d: all-reduce %d failed as expected (%d): %s\n", g_rank, it,
                    (int)st, sp_last_error());
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
}

/* Exits 77 with the reason unless at least 2 GPUs are visible. */
static int probe(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        printf("check_comm_nccl: SKIP: no usable CUDA device: %s\n", cudaGetErrorString(e));
        return 77;
    }
    if (n < 2) {
        printf("check_comm_nccl: SKIP: %d CUDA device%s visible; the NCCL backend needs one GPU per rank "
               "and a group needs >= 2\n", n, n == 1 ? "" : "s");
        return 77;
    }
    printf("%d\n", n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--probe")) return probe();
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (argc == 3 && !strcmp(argv[1], "--hang")) run_hang(atoi(argv[2]));
    harness_size_mismatch(SP_COMM_BACKEND_NCCL);
    harness_each_shape(run_shape);
    int mine = g_fails, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("check_comm_nccl: %d ranks, %ld checks on rank 0, %d failures in all\n", g_size, g_checks, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
