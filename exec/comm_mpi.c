/*
 * comm_mpi.c: the MPI backend (Open MPI).  One MPI process per chip: chip
 * rank == rank in MPI_COMM_WORLD, and the world size must equal the mesh
 * size (else SP_EINVAL naming both).
 *
 * Start-up.  world_init calls MPI_Init_thread(MPI_THREAD_SERIALIZED) when
 * MPI is not initialised yet; in that case MPI_Finalize runs at process exit
 * (atexit), and only if no world was aborted (a finalize with a dead or
 * stuck peer could hang).  A program that initialised MPI itself also
 * finalizes it itself.  The world works on a dup of MPI_COMM_WORLD; each
 * group (canonical mask, K >= 2) is MPI_Comm_split(dup, color = global rank
 * of group rank 0, key = group rank), made by every process in increasing
 * mask order (comm.c guarantees the order).  Every communicator has
 * MPI_ERRORS_RETURN; an MPI error aborts the world and the call returns
 * SP_EMPI with MPI's message.
 *
 * Collectives, with the semantics and byte counts of the threads backend:
 *   all-gather      MPI_Iallgather (MPI_IN_PLACE for the in-place form)
 *   all-to-all      MPI_Ialltoall
 *   reduce-scatter  MPI_Ialltoall of the K chunks into scratch, then a local
 *                   sum in group-rank order ((x_0 + x_1) + ...) + x_{K-1}
 *   all-reduce      the same reduce-scatter over uneven chunks c_h =
 *                   floor(count/K) + (h < count mod K) (MPI_Ialltoallv),
 *                   then MPI_Iallgatherv in place
 *   send / recv     MPI_Issend / MPI_Irecv on the world dup (tag 7001)
 *   barrier         MPI_Ibarrier
 * so THREADS and MPI give bit-identical sums.  Bytes counted are those
 * exchanged with other ranks (the own chunk does not cross).  Count or dtype
 * mismatches between members are not checked (MPI may report a truncation,
 * which becomes SP_EMPI); one chunk is limited to INT_MAX bytes
 * (SP_ENOTSUP beyond).
 *
 * No hangs.  Every blocking step is a nonblocking MPI call polled with
 * MPI_Test (spinning briefly, then sleeping up to 1 ms between tests) until
 * the world's timeout (SHARDPLAN_COMM_TIMEOUT_S, default 60 s) or until
 * sp_comm_abort is called from any thread.  Then the world is aborted and the
 * call returns SP_ECOMM with the reason; the library never exits.  Choice:
 * the library does NOT call MPI_Abort; the program must, e.g.
 *     if (st == SP_ECOMM || st == SP_EMPI) { fprintf(stderr, ...); MPI_Abort(MPI_COMM_WORLD, 1); }
 * because the request still in flight may write into the caller's buffers
 * until the process ends (MPI cannot cancel collective requests): after
 * SP_ECOMM / SP_EMPI the buffers of the failed call are poisoned and the
 * only safe next step is to end the job (a process that just exits without
 * MPI_Finalize also makes mpirun kill the job).  A peer killed outright is
 * normally noticed by mpirun itself, which then terminates every rank.
 */
#include "config.h"
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "exec/spi_comm.h"
#include "exec/spi_mpi.h"

#define P2P_TAG 7001
#define SPIN_TESTS 2000

typedef struct mpi_world {
    MPI_Comm comm;   /* dup of MPI_COMM_WORLD */
} mpi_world;

typedef struct mpi_chip {
    void *scratch;
    size_t scratch_bytes;
} mpi_chip;

static atomic_int g_we_initialised;
static atomic_int g_any_aborted;
static atomic_int g_atexit_registered;

static void finalize_at_exit(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && !atomic_load(&g_any_aborted)) MPI_Finalize();
}

void spi_mpi_mark_aborted(void) { atomic_store(&g_any_aborted, 1); }

sp_status spi_mpi_fail(sp_comm_world *w, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error code %d", rc);
    msg[len < 0 ? 0 : (len > MPI_MAX_ERROR_STRING ? MPI_MAX_ERROR_STRING : len)] = '\0';
    if (w) {
        atomic_store(&g_any_aborted, 1);
        (void)spi_comm_world_abort(w, "MPI error in %s: %s", what, msg);
    }
    return spi_fail(SP_EMPI, "MPI error in %s: %s", what, msg);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Waits for n requests, honouring the timeout and the abort flag. */
static sp_status wait_all(sp_comm *c, int n, MPI_Request *req, const char *what, int gsize)
{
    sp_comm_world *w = c->world;
    double deadline = now_s() + w->timeout_s;
    long sleep_ns = 1000;
    for (unsigned long it = 0;; it++) {
        int done = 0;
        int rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return spi_mpi_fail(w, rc, what);
        if (done) return SP_OK;
        if (spi_comm_world_is_aborted(w)) {
            atomic_store(&g_any_aborted, 1);
            return spi_comm_aborted_status(w);
        }
        if (it >= SPIN_TESTS) {
            if (now_s() > deadline) {
                atomic_store(&g_any_aborted, 1);
                return spi_comm_world_abort(w,
                                            "%s on rank %d (group of %d) timed out after %.0f s "
                                            "(SHARDPLAN_COMM_TIMEOUT_S): a peer is dead or stuck",
                                            what, c->rank, gsize, w->timeout_s);
            }
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < 1000000) sleep_ns *= 2;
        }
    }
}

static sp_status check_int(size_t bytes, const char *what)
{
    if (bytes > (size_t)INT_MAX)
        return spi_fail(SP_ENOTSUP, "%s: MPI backend moves at most %d bytes per chunk (asked %zu)", what,
                        INT_MAX, bytes);
    return SP_OK;
}

static sp_status scratch(sp_comm *c, size_t bytes, void **out)
{
    mpi_chip *ch = c->impl;
    if (bytes > ch->scratch_bytes) {
        void *p = realloc(ch->scratch, bytes);
        if (!p) return spi_fail(SP_ENOMEM, "out of memory for %zu bytes of MPI scratch", bytes);
        ch->scratch = p;
        ch->scratch_bytes = bytes;
    }
    *out = ch->scratch;
    return SP_OK;
}

/* ---- world / handle / groups ------------------------------------------------------ */

sp_status spi_mpi_world_dup(const char *who, MPI_Comm *comm, int *rank, int *size)
{
    int inited = 0, fin = 0;
    MPI_Finalized(&fin);
    if (fin) return spi_fail(SP_EMPI, "%s: MPI was already finalized in this process", who);
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) return spi_mpi_fail(NULL, rc, "MPI_Init_thread");
        atomic_store(&g_we_initialised, 1);
        if (!atomic_exchange(&g_atexit_registered, 1)) atexit(finalize_at_exit);
    }
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, comm);
    if (rc != MPI_SUCCESS) return spi_mpi_fail(NULL, rc, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
    MPI_Comm_size(*comm, size);
    MPI_Comm_rank(*comm, rank);
    return SP_OK;
}

sp_status spi_mpi_bootstrap(sp_comm_world *w, const char *backend, MPI_Comm *comm, int *rank)
{
    char who[64];
    snprintf(who, sizeof who, "%s backend", backend);
    int size = 0;
    SP_CHECK(spi_mpi_world_dup(who, comm, rank, &size));
    int want = w->part_total > 0 ? w->part_total : w->nranks;
    if (size != want) {
        MPI_Comm_free(comm);
        return spi_fail(SP_EINVAL,
                        "%s backend: the MPI job has %d process%s but the mesh has %d chips "
                        "(one process per chip: mpirun -np %d)",
                        backend, size, size == 1 ? "" : "es", want, want);
    }
    if (w->part_total > 0) {
        /* part of the job: its ranks in order; a process outside it gets no communicator
         * (*rank -1) */
        int in = *rank >= w->part_first && *rank < w->part_first + w->nranks;
        MPI_Comm sub = MPI_COMM_NULL;
        int rc = MPI_Comm_split(*comm, in ? 0 : MPI_UNDEFINED, *rank, &sub);
        MPI_Comm_free(comm);
        if (rc != MPI_SUCCESS) return spi_mpi_fail(NULL, rc, "MPI_Comm_split");
        *comm = sub;
        *rank = -1;
        if (in) {
            MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
            MPI_Comm_rank(sub, rank);
        }
    }
    return SP_OK;
}

sp_status spi_mpi_group_comm(sp_comm_world *w, MPI_Comm parent, const spi_comm_group *g, MPI_Comm *out)
{
    int rc = MPI_Comm_split(parent, g->members[0], g->rank, out);
    if (rc != MPI_SUCCESS) {
        *out = MPI_COMM_NULL;
        return spi_mpi_fail(w, rc, "MPI_Comm_split");
    }
    MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    int r = -1, n = 0;
    MPI_Comm_rank(*out, &r);
    MPI_Comm_size(*out, &n);
    if (r != g->rank || n != g->size) {
        MPI_Comm_free(out);
        *out = MPI_COMM_NULL;
        return spi_fail(SP_EINTERNAL, "MPI_Comm_split gave rank %d of %d, expected %d of %d (mask 0x%x)", r, n,
                        g->rank, g->size, g->mask);
    }
    return SP_OK;
}

static sp_status mpi_world_init(sp_comm_world *w)
{
    mpi_world *mw = calloc(1, sizeof *mw);
    if (!mw) return spi_fail(SP_ENOMEM, "out of memory for the MPI world");
    int rank = 0;
    sp_status st = spi_mpi_bootstrap(w, "MPI", &mw->comm, &rank);
    if (st != SP_OK) {
        free(mw);
        return st;
    }
    w->first_local = rank < 0 ? 0 : rank;
    w->nlocal = rank < 0 ? 0 : 1;   /* rank -1: a world over part of the job that this process is not in */
    w->impl = mw;
    return SP_OK;
}

static void mpi_world_fini(sp_comm_world *w)
{
    mpi_world *mw = w->impl;
    if (!mw) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && !spi_comm_world_is_aborted(w) && mw->comm != MPI_COMM_NULL) MPI_Comm_free(&mw->comm);
    free(mw);
    w->impl = NULL;
}

static sp_status mpi_comm_init(sp_comm *c)
{
    mpi_chip *ch = calloc(1, sizeof *ch);
    if (!ch) return spi_fail(SP_ENOMEM, "out of memory for the MPI chip handle");
    c->impl = ch;
    return SP_OK;
}

static void mpi_comm_fini(sp_comm *c)
{
    mpi_chip *ch = c->impl;
    if (!ch) return;
    free(ch->scratch);
    free(ch);
    c->impl = NULL;
}

static sp_status mpi_group_init(sp_comm *c, spi_comm_group *g)
{
    mpi_world *mw = c->world->impl;
    MPI_Comm *gc = malloc(sizeof *gc);
    if (!gc) return spi_fail(SP_ENOMEM, "out of memory for an MPI group");
    sp_status st = spi_mpi_group_comm(c->world, mw->comm, g, gc);
    if (st != SP_OK) {
        free(gc);
        return st;
    }
    g->impl = gc;
    return SP_OK;
}

static void mpi_group_fini(sp_comm *c, spi_comm_group *g)
{
    MPI_Comm *gc = g->impl;
    if (!gc) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && !spi_comm_world_is_aborted(c->world)) MPI_Comm_free(gc);
    free(gc);
    g->impl = NULL;
}

/* ---- collectives ------------------------------------------------------------------ */

static MPI_Comm gcomm(const spi_comm_group *g) { return *(MPI_Comm *)g->impl; }

static sp_status mpi_allgather(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                               sp_dtype dt, spi_comm_xfer *x)
{
    size_t chunk = count * (size_t)sp_dtype_bytes(dt);
    SP_CHECK(check_int(chunk, "allgather"));
    if (!chunk) return SP_OK;
    const void *own = (const char *)recv + (size_t)g->rank * chunk;
    MPI_Request req;
    int rc = MPI_Iallgather(send == own ? MPI_IN_PLACE : send, (int)chunk, MPI_BYTE, recv, (int)chunk,
                            MPI_BYTE, gcomm(g), &req);
    if (rc != MPI_SUCCESS) return spi_mpi_fail(c->world, rc, "MPI_Iallgather");
    SP_CHECK(wait_all(c, 1, &req, "allgather", g->size));
    x->sent = x->recv = (uint64_t)(g->size - 1) * chunk;
    return SP_OK;
}

static sp_status mpi_alltoall(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                              sp_dtype dt, spi_comm_xfer *x)
{
    size_t chunk = count * (size_t)sp_dtype_bytes(dt);
    SP_CHECK(check_int(chunk, "alltoall"));
    if (!chunk) return SP_OK;
    MPI_Request req;
    int rc = MPI_Ialltoall(send, (int)chunk, MPI_BYTE, recv, (int)chunk, MPI_BYTE, gcomm(g), &req);
    if (rc != MPI_SUCCESS) return spi_mpi_fail(c->world, rc, "MPI_Ialltoall");
    SP_CHECK(wait_all(c, 1, &req, "alltoall", g->size));
    x->sent = x->recv = (uint64_t)(g->size - 1) * chunk;
    return SP_OK;
}

static sp_status mpi_alltoallv(sp_comm *c, spi_comm_group *g, const void *send, const size_t *scounts,
                               const size_t *sdispls, void *recv, const size_t *rcounts, const size_t *rdispls,
                               sp_dtype dt, spi_comm_xfer *x)
{
    int K = g->size, me = g->rank;
    size_t s = (size_t)sp_dtype_bytes(dt);
    int *v = malloc(4 * (size_t)K * sizeof *v);
    if (!v) return spi_fail(SP_ENOMEM, "out of memory for all-to-all-v counts");
    int *sc = v, *sd = v + K, *rc = v + 2 * K, *rd = v + 3 * K;
    sp_status st = SP_OK;
    uint64_t sent = 0, got = 0;
    for (int h = 0; h < K && st == SP_OK; h++) {
        /* bytes, each within an int (the checks above bound the products) */
        size_t b[4] = {scounts[h] * s, sdispls[h] * s, rcounts[h] * s, rdispls[h] * s};
        for (int i = 0; i < 4 && st == SP_OK; i++) st = check_int(b[i], "alltoallv");
        sc[h] = (int)b[0];
        sd[h] = (int)b[1];
        rc[h] = (int)b[2];
        rd[h] = (int)b[3];
        if (h != me) {
            sent += b[0];
            got += b[2];
        }
    }
    if (st == SP_OK) {
        MPI_Request req;
        int rcode = MPI_Ialltoallv(send, sc, sd, MPI_BYTE, recv, rc, rd, MPI_BYTE, gcomm(g), &req);
        if (rcode != MPI_SUCCESS)
            st = spi_mpi_fail(c->world, rcode, "MPI_Ialltoallv");
        else
            st = wait_all(c, 1, &req, "alltoallv", K);
    }
    free(v);
    if (st == SP_OK) {
        x->sent = sent;
        x->recv = got;
    }
    return st;
}

/* dst[i] = ((src_0[i] + src_1[i]) + ...) + src_{K-1}[i], src_h = t + h*n. */
static void sum_rank_order(float *dst, const float *t, int K, size_t n)
{
    enum { TILE = 1024 };
    float acc[TILE];
    for (size_t off = 0; off < n; off += TILE) {
        size_t m = (n - off < TILE) ? n - off : TILE;
        memcpy(acc, t + off, m * sizeof(float));
        for (int h = 1; h < K; h++) {
            const float *p = t + (size_t)h * n + off;
            for (size_t i = 0; i < m; i++) acc[i] += p[i];
        }
        memcpy(dst + off, acc, m * sizeof(float));
    }
}

static sp_status mpi_reducescatter(sp_comm *c, spi_comm_group *g, const void *send, void *recv,
                                   size_t count, sp_dtype dt, spi_comm_xfer *x)
{
    (void)dt;
    size_t chunk = count * sizeof(float);
    SP_CHECK(check_int(chunk, "reducescatter"));
    if (!chunk) return SP_OK;
    void *t = NULL;
    SP_CHECK(scratch(c, chunk * (size_t)g->size, &t));
    MPI_Request req;
    int rc = MPI_Ialltoall(send, (int)chunk, MPI_BYTE, t, (int)chunk, MPI_BYTE, gcomm(g), &req);
    if (rc != MPI_SUCCESS) return spi_mpi_fail(c->world, rc, "MPI_Ialltoall");
    SP_CHECK(wait_all(c, 1, &req, "reducescatter", g->size));
    sum_rank_order(recv, t, g->size, count);
    x->sent = x->recv = (uint64_t)(g->size - 1) * chunk;
    return SP_OK;
}

static sp_status mpi_allreduce(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                               sp_dtype dt, spi_comm_xfer *x)
{
    (void)dt;
    int K = g->size, me = g->rank;
    SP_CHECK(check_int(count * sizeof(float), "allreduce"));
    if (!count) return SP_OK;
    size_t q = count / (size_t)K, rem = count % (size_t)K;
    size_t mine = q + ((size_t)me < rem);
    size_t myoff = (size_t)me * q + ((size_t)me < rem ? (size_t)me : rem);
    int *v = malloc(6 * (size_t)K * sizeof *v);
    if (!v) return spi_fail(SP_ENOMEM, "out of memory for all-reduce counts");
    int *scnt = v, *sdsp = v + K, *rcnt = v + 2 * K, *rdsp = v + 3 * K, *gcnt = v + 4 * K,
        *gdsp = v + 5 * K;
    for (int h = 0; h < K; h++) {
        size_t hh = (size_t)h, len = q + (hh < rem), off = hh * q + (hh < rem ? hh : rem);
        scnt[h] = gcnt[h] = (int)len;
        sdsp[h] = gdsp[h] = (int)off;
        rcnt[h] = (int)mine;
        rdsp[h] = (int)(hh * mine);
    }
    sp_status st = SP_OK;
    float *t = NULL;
    void *tv = NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    SP_CHECKGOTO(scratch(c, (mine ? mine : 1) * (size_t)K * sizeof(float), &tv), st, out);
    t = tv;
    int rc = MPI_Ialltoallv(send, scnt, sdsp, MPI_FLOAT, t, rcnt, rdsp, MPI_FLOAT, gcomm(g),
                            &req);
    if (rc != MPI_SUCCESS) {
        st = spi_mpi_fail(c->world, rc, "MPI_Ialltoallv");
        goto out;
    }
    SP_CHECKGOTO(wait_all(c, 1, &req, "allreduce (reduce-scatter phase)", K), st, out);
    if (mine) sum_rank_order((float *)recv + myoff, t, K, mine);
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, recv, gcnt, gdsp, MPI_FLOAT, gcomm(g), &req);
    if (rc != MPI_SUCCESS) {
        st = spi_mpi_fail(c->world, rc, "MPI_Iallgatherv");
        goto out;
    }
    SP_CHECKGOTO(wait_all(c, 1, &req, "allreduce (all-gather phase)", K), st, out);
    x->sent = x->recv = ((uint64_t)(K - 1) * mine + (count - mine)) * sizeof(float);
out:
    free(v);
    return st;
}

static sp_status mpi_send(sp_comm *c, int peer, const void *buf, size_t count, sp_dtype dt,
                          spi_comm_xfer *x)
{
    size_t bytes = count * (size_t)sp_dtype_bytes(dt);
    SP_CHECK(check_int(bytes, "send"));
    mpi_world *mw = c->world->impl;
    MPI_Request req;
    int rc = MPI_Issend(buf, (int)bytes, MPI_BYTE, peer, P2P_TAG, mw->comm, &req);
    if (rc != MPI_SUCCESS) return spi_mpi_fail(c->world, rc, "MPI_Issend");
    SP_CHECK(wait_all(c, 1, &req, "send", 2));
    x->sent = bytes;
    return SP_OK;
}

static sp_status mpi_recv(sp_comm *c, int peer, void *buf, size_t count, sp_dtype dt, spi_comm_xfer *x)
{
    size_t bytes = count * (size_t)sp_dtype_bytes(dt);
    SP_CHECK(check_int(bytes, "recv"));
    mpi_world *mw = c->world->impl;
    MPI_Request req;
    int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, P2P_TAG, mw->comm, &req);
    if (rc != MPI_SUCCESS) return spi_mpi_fail(c->world, rc, "MPI_Irecv");
    /* wait_all ignores statuses; check the size with a status here. */
    sp_comm_world *w = c->world;
    double deadline = now_s() + w->timeout_s;
    long sleep_ns = 1000;
    MPI_Status stt;
    for (unsigned long it = 0;; it++) {
        int done = 0;
        rc = MPI_Test(&req, &done, &stt);
        if (rc != MPI_SUCCESS) return spi_mpi_fail(w, rc, "recv");
        if (done) break;
        if (spi_comm_world_is_aborted(w)) return spi_comm_aborted_status(w);
        if (it >= SPIN_TESTS) {
            if (now_s() > deadline) {
                atomic_store(&g_any_aborted, 1);
                return spi_comm_world_abort(w,
                                            "recv on rank %d from rank %d timed out after %.0f s "
                                            "(SHARDPLAN_COMM_TIMEOUT_S): the peer is dead or stuck",
                                            c->rank, peer, w->timeout_s);
            }
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < 1000000) sleep_ns *= 2;
        }
    }
    int got = 0;
    MPI_Get_count(&stt, MPI_BYTE, &got);
    if ((size_t)got != bytes)
        return spi_fail(SP_EINVAL, "recv on rank %d: rank %d sent %d bytes, expected %zu", c->rank, peer, got,
                        bytes);
    x->recv = bytes;
    return SP_OK;
}

static sp_status mpi_barrier(sp_comm *c, spi_comm_group *g)
{
    MPI_Request req;
    int rc = MPI_Ibarrier(gcomm(g), &req);
    if (rc != MPI_SUCCESS) return spi_mpi_fail(c->world, rc, "MPI_Ibarrier");
    return wait_all(c, 1, &req, "barrier", g->size);
}

const spi_comm_backend spi_comm_mpi_backend = {
    .name = "mpi",
    .world_init = mpi_world_init,
    .world_fini = mpi_world_fini,
    .comm_init = mpi_comm_init,
    .comm_fini = mpi_comm_fini,
    .group_init = mpi_group_init,
    .group_fini = mpi_group_fini,
    .wake = NULL,
    .allgather = mpi_allgather,
    .reducescatter = mpi_reducescatter,
    .allreduce = mpi_allreduce,
    .alltoall = mpi_alltoall,
    .alltoallv = mpi_alltoallv,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
};
