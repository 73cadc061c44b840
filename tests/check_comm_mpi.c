/* check_comm_mpi.c: the MPI communicator backend, run under mpirun (see
 * tests/mpi_comm.sh).  One process per chip.  Plain MPI program (Check's
 * fork mode and MPI do not mix): every failure is printed with its rank and
 * the program exits non-zero (via MPI_Abort so no rank is left waiting).
 *
 * Modes:
 *   check_comm_mpi              every collective, every axis mask, several
 *                               mesh shapes of the world size, bit-exact
 *                               rank-order sums of non-integer data, byte
 *                               counters as in the threads backend, send/recv
 *   check_comm_mpi --hang R     rank R never enters the all-reduce the others
 *                               call: they must time out (SHARDPLAN_COMM_TIMEOUT_S)
 *                               with SP_ECOMM; rank 0 prints it, MPI_Abort
 *   check_comm_mpi --kill R     rank R raise(SIGKILL)s while the others loop
 *                               in all-reduces: the job must end (non-zero)
 */
#include "config.h"
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "exec/sp_comm.h"

#define HARNESS_NAME "check_comm_mpi"
#include "tests/mpi_harness.h"

/* Non-integer data: rounding makes the sum order visible. */
static float val(int grank, size_t i, int salt)
{
    return (float)((grank * 37 + (int)(i % 101) * 13 + salt) % 89) * 0.1f + 1.0f / (float)(grank + 3);
}

typedef struct ctx {
    sp_comm *c;
    sp_mesh mesh;
    unsigned mask;
    int K, g;
    int members[64];
} ctx;

static void stats_delta(sp_comm *c, sp_coll_kind k, uint64_t *sent, uint64_t *recv)
{
    sp_comm_counters s;
    OK(sp_comm_stats(c, &s));
    *sent = s.bytes_sent[k];
    *recv = s.bytes_recv[k];
    sp_comm_stats_reset(c);
}

static void check_bytes(ctx *x, sp_coll_kind k, uint64_t want, const char *what, size_t count)
{
    uint64_t s, r;
    stats_delta(x->c, k, &s, &r);
    EXPECT(s == want && r == want, "%s mask 0x%x count %zu: bytes sent %llu recv %llu, want %llu", what,
           x->mask, count, (unsigned long long)s, (unsigned long long)r, (unsigned long long)want);
}

static void t_allgather(ctx *x, size_t count, sp_dtype dt, int inplace)
{
    size_t s = (size_t)sp_dtype_bytes(dt), K = (size_t)x->K;
    unsigned char *recv = malloc(K * count * s + 1), *send = malloc(count * s + 1);
    memset(recv, 0xEE, K * count * s);
    unsigned char *own = inplace ? recv + (size_t)x->g * count * s : send;
    for (size_t i = 0; i < count * s; i++) own[i] = (unsigned char)(g_rank * 7 + i * 3 + 1);
    OK(sp_comm_allgather(x->c, x->mask, own, recv, count, dt));
    for (size_t h = 0; h < K; h++)
        for (size_t i = 0; i < count * s; i++)
            if (recv[h * count * s + i] != (unsigned char)(x->members[h] * 7 + i * 3 + 1)) {
                fail("allgather mask 0x%x count %zu dt %d: chunk %zu byte %zu wrong", x->mask, count, (int)dt,
                     h, i);
                h = K;
                break;
            }
    check_bytes(x, SP_COLL_ALLGATHER, (uint64_t)(K - 1) * count * s, "allgather", count);
    free(recv);
    free(send);
}

static void t_alltoall(ctx *x, size_t count, sp_dtype dt)
{
    size_t s = (size_t)sp_dtype_bytes(dt), K = (size_t)x->K, cb = count * s;
    /* calloc: with count 0 nothing is written, and gcc -O1 warns of an uninitialised read */
    unsigned char *send = calloc(K * cb + 1, 1), *recv = malloc(K * cb + 1);
    for (size_t h = 0; h < K; h++)
        for (size_t i = 0; i < cb; i++) send[h * cb + i] = (unsigned char)(g_rank * 11 + h * 5 + i);
    OK(sp_comm_alltoall(x->c, x->mask, send, recv, count, dt));
    for (size_t h = 0; h < K; h++)
        for (size_t i = 0; i < cb; i++)
            if (recv[h * cb + i] != (unsigned char)(x->members[h] * 11 + (size_t)x->g * 5 + i)) {
                fail("alltoall mask 0x%x count %zu: chunk %zu byte %zu wrong", x->mask, count, h, i);
                h = K;
                break;
            }
    check_bytes(x, SP_COLL_ALLTOALL, (uint64_t)(K - 1) * cb, "alltoall", count);
    free(send);
    free(recv);
}

/* all-to-all-v: (g_rank + 2·to + count) % (count + 1) elements from this rank to global rank `to`,
 * blocks one element apart, received in reverse member order */
static size_t vcount(int from, int to, size_t count)
{
    return ((size_t)from + 2 * (size_t)to + count) % (count + 1);
}
static void t_alltoallv(ctx *x, size_t count)
{
    size_t K = (size_t)x->K, s = 4, sc[64], sd[64], rc[64], rd[64], so = 0, ro = 0;
    uint64_t bs = 0, br = 0;
    for (size_t h = 0; h < K; h++) {
        sc[h] = vcount(g_rank, x->members[h], count);
        sd[h] = so;
        so += sc[h] + 1;
        if ((int)h != x->g) bs += sc[h] * s;
    }
    for (size_t h = K; h-- > 0;) {
        rc[h] = vcount(x->members[h], g_rank, count);
        rd[h] = ro;
        ro += rc[h] + 1;
        if ((int)h != x->g) br += rc[h] * s;
    }
    unsigned char *send = calloc(so * s + 1, 1), *recv = malloc(ro * s + 1);
    for (size_t h = 0; h < K; h++)
        for (size_t i = 0; i < sc[h] * s; i++) send[sd[h] * s + i] = (unsigned char)(g_rank * 11 + x->members[h] * 5 + i);
    OK(sp_comm_alltoallv(x->c, x->mask, send, sc, sd, recv, rc, rd, SP_DT_F32));
    for (size_t h = 0; h < K; h++)
        for (size_t i = 0; i < rc[h] * s; i++)
            if (recv[rd[h] * s + i] != (unsigned char)(x->members[h] * 11 + g_rank * 5 + i)) {
                fail("alltoallv mask 0x%x count %zu: block %zu byte %zu wrong", x->mask, count, h, i);
                h = K;
                break;
            }
    uint64_t s1, r1;
    stats_delta(x->c, SP_COLL_ALLTOALL, &s1, &r1);
    EXPECT(s1 == bs && r1 == br, "alltoallv mask 0x%x count %zu: sent %llu recv %llu, want %llu / %llu", x->mask,
           count, (unsigned long long)s1, (unsigned long long)r1, (unsigned long long)bs, (unsigned long long)br);
    free(send);
    free(recv);
}

/* Reference: ((v_0 + v_1) + ...) in float over the members, for element e. */
static float ref_sum(ctx *x, size_t e, int salt)
{
    volatile float acc = val(x->members[0], e, salt);
    for (int h = 1; h < x->K; h++) acc = acc + val(x->members[h], e, salt);
    return acc;
}

static void t_reducescatter(ctx *x, size_t count, int inplace)
{
    size_t K = (size_t)x->K;
    float *send = malloc((K * count + 1) * sizeof(float)), *out = malloc((count + 1) * sizeof(float));
    for (size_t e = 0; e < K * count; e++) send[e] = val(g_rank, e, 5);
    float *recv = inplace ? send + (size_t)x->g * count : out;
    OK(sp_comm_reducescatter(x->c, x->mask, send, recv, count, SP_DT_F32));
    for (size_t i = 0; i < count; i++) {
        float want = ref_sum(x, (size_t)x->g * count + i, 5);
        if (memcmp(&want, &recv[i], sizeof want) != 0) {
            fail("reducescatter mask 0x%x count %zu: element %zu = %.9g, want %.9g (bit-exact)", x->mask, count,
                 i, (double)recv[i], (double)want);
            break;
        }
    }
    check_bytes(x, SP_COLL_REDUCESCATTER, (uint64_t)(K - 1) * count * 4, "reducescatter", count);
    free(send);
    free(out);
}

static void t_allreduce(ctx *x, size_t count, int inplace)
{
    size_t K = (size_t)x->K;
    float *send = malloc((count + 1) * sizeof(float)), *out = malloc((count + 1) * sizeof(float));
    for (size_t e = 0; e < count; e++) send[e] = val(g_rank, e, 9);
    float *recv = inplace ? send : out;
    OK(sp_comm_allreduce(x->c, x->mask, send, recv, count, SP_DT_F32));
    for (size_t i = 0; i < count; i++) {
        float want = ref_sum(x, i, 9);
        if (memcmp(&want, &recv[i], sizeof want) != 0) {
            fail("allreduce mask 0x%x count %zu: element %zu = %.9g, want %.9g (bit-exact)", x->mask, count, i,
                 (double)recv[i], (double)want);
            break;
        }
    }
    size_t cg = count / K + ((size_t)x->g < count % K);
    check_bytes(x, SP_COLL_ALLREDUCE, ((K - 1) * cg + count - cg) * 4, "allreduce", count);
    free(send);
    free(out);
}

static void run_shape(const sp_mesh *m)
{
    sp_comm_world *w;
    OK(sp_comm_world_create(SP_COMM_BACKEND_MPI, m, &w));
    int first, n;
    OK(sp_comm_world_local_ranks(w, &first, &n));
    EXPECT(first == g_rank && n == 1, "local ranks %d+%d, want %d+1", first, n, g_rank);
    EXPECT(sp_comm_world_backend(w) == SP_COMM_BACKEND_MPI, "backend");
    sp_comm *c;
    OK(sp_comm_open(w, g_rank, &c));
    static const size_t counts[] = {0, 1, 3, 7, 64, 1001};
    for (unsigned mask = 0; mask <= SP_AXES_ALL; mask++) {
        ctx x = {.c = c, .mesh = *m, .mask = mask};
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
            t_alltoallv(&x, cnt);
            t_reducescatter(&x, cnt, 0);
            t_reducescatter(&x, cnt, 1);
            t_allreduce(&x, cnt, 0);
            t_allreduce(&x, cnt, 1);
            OK(sp_comm_barrier(c, mask));
        }
    }
    /* Ring send/recv over global ranks: even ranks send first. */
    if (g_size >= 2) {
        for (size_t cnt = 0; cnt <= 1000; cnt += 333) {
            int to = (g_rank + 1) % g_size, from = (g_rank + g_size - 1) % g_size;
            float *a = malloc((cnt + 1) * sizeof(float)), *b = malloc((cnt + 1) * sizeof(float));
            for (size_t i = 0; i < cnt; i++) a[i] = val(g_rank, i, 3);
            sp_comm_stats_reset(c);
            if (g_rank % 2 == 0) {
                OK(sp_comm_send(c, to, a, cnt, SP_DT_F32));
                OK(sp_comm_recv(c, from, b, cnt, SP_DT_F32));
            } else {
                OK(sp_comm_recv(c, from, b, cnt, SP_DT_F32));
                OK(sp_comm_send(c, to, a, cnt, SP_DT_F32));
            }
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
            free(a);
            free(b);
        }
    }
    /* Argument errors stay local (no MPI call is made). */
    float f[4] = {0};
    EXPECT(sp_comm_allreduce(c, SP_AXES_ALL, f, f, 1, SP_DT_BF16) == SP_ENOTSUP, "bf16 reduce");
    EXPECT(sp_comm_send(c, g_rank, f, 1, SP_DT_F32) == SP_EINVAL, "send to self");
    EXPECT(sp_comm_alltoall(c, SP_AXES_ALL, f, f, 1, SP_DT_F32) == SP_EINVAL, "alltoall in place");
    OK(sp_comm_barrier(c, SP_AXES_ALL));
    sp_comm_close(c);
    sp_comm_world_free(w);
}

/* --hang R / --kill R: rank R leaves the others waiting in an all-reduce. */
static _Noreturn void run_failure(int hang, int victim)
{
    sp_mesh m = {{1, 1, g_size, 1, 1}};
    sp_comm_world *w;
    OK(sp_comm_world_create(SP_COMM_BACKEND_MPI, &m, &w));
    sp_comm *c;
    OK(sp_comm_open(w, g_rank, &c));
    float buf[256];
    for (int i = 0; i < 256; i++) buf[i] = (float)i;
    OK(sp_comm_barrier(c, SP_AXES_ALL));
    if (g_rank == victim) {
        if (hang) {
            sleep(120);   /* alive but stuck: the others' timeout must fire */
        } else {
            usleep(200000);
            raise(SIGKILL);
        }
    }
    for (int it = 0;; it++) {
        sp_status st = sp_comm_allreduce(c, SP_AXES_ALL, buf, buf, 256, SP_DT_F32);
        if (st != SP_OK) {
            fprintf(stderr, "check_comm_mpi rank %d: all-reduce %d failed as expected (%d): %s\n", g_rank, it,
                    (int)st, sp_last_error());
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        for (int i = 0; i < 256; i++) buf[i] = (float)i;
    }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (argc == 3 && (!strcmp(argv[1], "--hang") || !strcmp(argv[1], "--kill")))
        run_failure(!strcmp(argv[1], "--hang"), atoi(argv[2]));
    harness_size_mismatch(SP_COMM_BACKEND_MPI);
    harness_each_shape(run_shape);
    int mine = g_fails, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("check_comm_mpi: %d ranks, %ld checks on rank 0, %d failures in all\n", g_size, g_checks, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
