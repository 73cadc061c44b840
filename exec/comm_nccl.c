/*
 * comm_nccl.c: the NCCL backend.  One MPI process per chip and one GPU per
 * process: chip rank == rank in MPI_COMM_WORLD, and the world size must
 * equal the mesh size (else SP_EINVAL naming both).  MPI only bootstraps
 * (unique ids, barriers); the data moves over NCCL.
 *
 * Buffers.  Every send / recv pointer passed to the collectives and to
 * send / recv is a DEVICE pointer (cudaMalloc on this process's GPU), not
 * host memory as for the threads and MPI backends.  The caller must have
 * finished writing send (its kernels synchronised) before the call.  Every
 * call is synchronous for the host: it returns once recv holds the result
 * (the op runs on the backend's own stream, polled to completion).
 *
 * Start-up.  world_init first checks that a GPU is visible (else SP_ECUDA
 * with the CUDA runtime's reason, before MPI is touched), then initialises
 * MPI as the MPI backend does (MPI_Init_thread(MPI_THREAD_SERIALIZED) when
 * needed, MPI_Finalize at exit if no world was aborted), checks the world
 * size, and picks device (node-local rank) among the node's GPUs: fewer
 * GPUs than processes on a node is SP_ECUDA (NCCL needs a GPU per rank).
 * Each group (canonical mask, K >= 2), in the same increasing mask order as
 * the MPI backend, gets an MPI communicator by MPI_Comm_split(world dup,
 * color = global rank of group rank 0, key = group rank); its rank 0 calls
 * ncclGetUniqueId, MPI_Ibcast sends the id over the group, and every member
 * calls ncclCommInitRankConfig (non-blocking config, polled): one NCCL
 * communicator per group.  Point-to-point uses the group of all live axes
 * (every chip), the peer's rank in it looked up among the members.
 *
 * Collectives (same semantics and byte counts as the threads backend):
 *   all-gather      ncclAllGather (bytes as ncclUint8; in place when send
 *                   == recv + g*count*s, which NCCL also accepts)
 *   reduce-scatter  ncclReduceScatter, float32 sum
 *   all-reduce      ncclAllReduce, float32 sum
 *   all-to-all      grouped ncclSend / ncclRecv to / from every peer, own
 *                   chunk by cudaMemcpyAsync
 *   send / recv     ncclSend / ncclRecv on the all-axes group
 *   barrier         MPI_Ibarrier on the group's MPI communicator (every
 *                   earlier call on this chip has already completed)
 * Byte counters use the formulas of sp_comm.h (all-reduce: ((K-1)·c_g +
 * count - c_g)·4, the ring's reduce-scatter + all-gather volume), whatever
 * algorithm NCCL picks internally.
 *
 * Determinism: NOT bit-exact.  NCCL reduces in its own order (ring, tree,
 * NVLS... chosen per size and topology), not ((x_0 + x_1) + ...) + x_{K-1}:
 * GPU reductions match the other backends within float tolerance (about
 * K·2^-24 relative per element), not bit for bit, and may differ between
 * sizes.  Integer-valued data whose partial sums stay below 2^24 are exact
 * in any order (the GPU tests use such data).  Count / dtype mismatches
 * between members are not detected (NCCL cannot see them): they hang until
 * the timeout or corrupt data.
 *
 * No hangs.  Every wait (communicator set-up, the op on the stream, the
 * bootstrap MPI calls) is polled: cudaStreamQuery plus
 * ncclCommGetAsyncError, spinning briefly and then sleeping up to 1 ms,
 * until SHARDPLAN_COMM_TIMEOUT_S (default 60 s) or until sp_comm_abort is
 * called from any thread.  Then the group's NCCL communicator is aborted
 * (ncclCommAbort, which also stops its kernels), the world is aborted and
 * the call returns SP_ECOMM with the reason.  A CUDA or NCCL error returns
 * SP_ECUDA with ncclGetErrorString / cudaGetErrorString (and NCCL's last
 * error text) and aborts the world too; an MPI error in the bootstrap
 * returns SP_EMPI.  As for the MPI backend the library never calls
 * MPI_Abort or exits: after SP_ECOMM / SP_ECUDA / SP_EMPI the buffers of
 * the failed call are undefined and the program should end the job.
 *
 * Groups of one chip move no data: the front asks local_copy for the
 * send -> recv copy, a cudaMemcpyAsync device to device on the chip's stream.
 */
#include "config.h"
#include <cuda_runtime.h>
#include <mpi.h>
#include "kernels/cuda/spi_cuda_dl.h"   /* nccl.h, with the entry points loaded at first use */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "exec/spi_comm.h"
#include "exec/spi_mpi.h"
#include "kernels/cuda/sp_cuda.h"

#define SPIN_POLLS 2000

typedef struct nccl_world {
    MPI_Comm comm;   /* dup of MPI_COMM_WORLD */
    int device;
} nccl_world;

typedef struct nccl_chip {
    cudaStream_t stream;
} nccl_chip;

typedef struct nccl_group {
    MPI_Comm mpi;
    ncclComm_t nccl;   /* NULL until initialised */
    int dead;          /* aborted: must not be used or destroyed again */
} nccl_group;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void backoff(unsigned long it, long *sleep_ns)
{
    if (it < SPIN_POLLS) return;
    struct timespec ts = {0, *sleep_ns};
    nanosleep(&ts, NULL);
    if (*sleep_ns < 1000000) *sleep_ns *= 2;
}

/* ---- failures --------------------------------------------------------------------- */

static void kill_group(nccl_group *ng)
{
    if (ng && ng->nccl && !ng->dead) {
        ncclCommAbort(ng->nccl);
        ng->dead = 1;
    }
}

/* SP_ECUDA with NCCL's text, after aborting the group's comm and the world. */
static sp_status nccl_fail(sp_comm_world *w, nccl_group *ng, ncclResult_t r, const char *what)
{
    const char *last = (ng && ng->nccl) ? ncclGetLastError(ng->nccl) : ncclGetLastError(NULL);
    char msg[256];
    snprintf(msg, sizeof msg, "%s%s%s", ncclGetErrorString(r), (last && *last) ? ": " : "", last ? last : "");
    kill_group(ng);
    if (w) {
        spi_mpi_mark_aborted();
        (void)spi_comm_world_abort(w, "NCCL error in %s: %s", what, msg);
    }
    return spi_fail(SP_ECUDA, "NCCL error in %s: %s", what, msg);
}

static sp_status cuda_fail(sp_comm_world *w, nccl_group *ng, cudaError_t e, const char *what)
{
    kill_group(ng);
    if (w) {
        spi_mpi_mark_aborted();
        (void)spi_comm_world_abort(w, "CUDA error in %s: %s", what, cudaGetErrorString(e));
    }
    return spi_fail(SP_ECUDA, "CUDA error in %s: %s", what, cudaGetErrorString(e));
}


static sp_status timed_out(sp_comm *c, nccl_group *ng, const char *what, int gsize)
{
    kill_group(ng);
    spi_mpi_mark_aborted();
    return spi_comm_world_abort(c->world,
                                "%s on rank %d (group of %d) timed out after %.0f s "
                                "(SHARDPLAN_COMM_TIMEOUT_S): a peer is dead or stuck",
                                what, c->rank, gsize, c->world->timeout_s);
}

static sp_status aborted(sp_comm *c, nccl_group *ng)
{
    kill_group(ng);   /* stops kernels still waiting for peers */
    spi_mpi_mark_aborted();
    return spi_comm_aborted_status(c->world);
}

/* ---- waits -------------------------------------------------------------------------- */

/* Until ng's communicator leaves ncclInProgress (non-blocking init, group end). */
static sp_status wait_comm(sp_comm *c, nccl_group *ng, const char *what, int gsize)
{
    double deadline = now_s() + c->world->timeout_s;
    long sleep_ns = 1000;
    for (unsigned long it = 0;; it++) {
        ncclResult_t ar = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(ng->nccl, &ar);
        if (r != ncclSuccess) return nccl_fail(c->world, ng, r, what);
        if (ar == ncclSuccess) return SP_OK;
        if (ar != ncclInProgress) return nccl_fail(c->world, ng, ar, what);
        if (spi_comm_world_is_aborted(c->world)) return aborted(c, ng);
        if (it >= SPIN_POLLS && now_s() > deadline) return timed_out(c, ng, what, gsize);
        backoff(it, &sleep_ns);
    }
}

/* Until the chip's stream is idle (the op finished), watching NCCL's async
 * error, the abort flag and the deadline. */
static sp_status wait_stream(sp_comm *c, nccl_group *ng, const char *what, int gsize)
{
    nccl_chip *ch = c->impl;
    double deadline = now_s() + c->world->timeout_s;
    long sleep_ns = 1000;
    for (unsigned long it = 0;; it++) {
        cudaError_t e = cudaStreamQuery(ch->stream);
        ncclResult_t ar = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(ng->nccl, &ar);
        if (r != ncclSuccess) return nccl_fail(c->world, ng, r, what);
        if (ar != ncclSuccess && ar != ncclInProgress) return nccl_fail(c->world, ng, ar, what);
        if (e == cudaSuccess) return SP_OK;
        if (e != cudaErrorNotReady) return cuda_fail(c->world, ng, e, what);
        if (spi_comm_world_is_aborted(c->world)) return aborted(c, ng);
        if (it >= SPIN_POLLS && now_s() > deadline) return timed_out(c, ng, what, gsize);
        backoff(it, &sleep_ns);
    }
}

static sp_status wait_mpi(sp_comm *c, MPI_Request *req, const char *what, int gsize)
{
    double deadline = now_s() + c->world->timeout_s;
    long sleep_ns = 1000;
    for (unsigned long it = 0;; it++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return spi_mpi_fail(c->world, rc, what);
        if (done) return SP_OK;
        if (spi_comm_world_is_aborted(c->world)) return aborted(c, NULL);
        if (it >= SPIN_POLLS && now_s() > deadline) return timed_out(c, NULL, what, gsize);
        backoff(it, &sleep_ns);
    }
}

/* Issued an op on ng (result r): in non-blocking mode r may be
 * ncclInProgress; then wait for the stream. */
static sp_status issued(sp_comm *c, nccl_group *ng, ncclResult_t r, const char *what, int gsize)
{
    if (r == ncclInProgress) SP_CHECK(wait_comm(c, ng, what, gsize));
    else if (r != ncclSuccess) return nccl_fail(c->world, ng, r, what);
    return wait_stream(c, ng, what, gsize);
}

static sp_status set_device(sp_comm *c)
{
    nccl_world *nw = c->world->impl;
    cudaError_t e = cudaSetDevice(nw->device);
    if (e != cudaSuccess) return cuda_fail(NULL, NULL, e, "cudaSetDevice");
    return SP_OK;
}

/* ---- world / handle / groups ------------------------------------------------------ */

static sp_status nccl_world_init(sp_comm_world *w)
{
    char why[256];
    if (!sp_cuda_available(why, sizeof why))
        return spi_fail(SP_ECUDA,
                        "NCCL backend needs one CUDA GPU per process: %s "
                        "(use the threads or MPI backend on CPUs)",
                        why);
    nccl_world *nw = calloc(1, sizeof *nw);
    if (!nw) return spi_fail(SP_ENOMEM, "out of memory for the NCCL world");
    int rank = 0, rc;
    MPI_Comm node = MPI_COMM_NULL;
    sp_status st = spi_mpi_bootstrap(w, "NCCL", &nw->comm, &rank);
    if (st != SP_OK) {
        free(nw);
        return st;
    }
    /* Device = rank among the processes of this node. */
    rc = MPI_Comm_split_type(nw->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) {
        st = spi_mpi_fail(NULL, rc, "MPI_Comm_split_type");
        goto fail;
    }
    int lrank = 0, lsize = 1, ndev = 0;
    MPI_Comm_rank(node, &lrank);
    MPI_Comm_size(node, &lsize);
    MPI_Comm_free(&node);
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess) {
        st = cuda_fail(NULL, NULL, e, "cudaGetDeviceCount");
        goto fail;
    }
    if (lsize > ndev) {
        st = spi_fail(SP_ECUDA,
                      "NCCL backend: %d processes on this node but %d CUDA device%s visible "
                      "(NCCL needs one GPU per process)",
                      lsize, ndev, ndev == 1 ? "" : "s");
        goto fail;
    }
    if ((st = spi_cuda_dl_load(0, 1)) != SP_OK) goto fail;
    nw->device = lrank;
    e = cudaSetDevice(nw->device);
    if (e != cudaSuccess) {
        st = cuda_fail(NULL, NULL, e, "cudaSetDevice");
        goto fail;
    }
    w->first_local = rank;
    w->nlocal = 1;
    w->impl = nw;
    return SP_OK;
fail:
    MPI_Comm_free(&nw->comm);
    free(nw);
    return st;
}

static void nccl_world_fini(sp_comm_world *w)
{
    nccl_world *nw = w->impl;
    if (!nw) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && !spi_comm_world_is_aborted(w)) MPI_Comm_free(&nw->comm);
    free(nw);
    w->impl = NULL;
}

static sp_status nccl_comm_init(sp_comm *c)
{
    SP_CHECK(set_device(c));
    nccl_chip *ch = calloc(1, sizeof *ch);
    if (!ch) return spi_fail(SP_ENOMEM, "out of memory for the NCCL chip handle");
    cudaError_t e = cudaStreamCreateWithFlags(&ch->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(ch);
        return cuda_fail(NULL, NULL, e, "cudaStreamCreateWithFlags");
    }
    c->impl = ch;
    return SP_OK;
}

static void nccl_comm_fini(sp_comm *c)
{
    nccl_chip *ch = c->impl;
    if (!ch) return;
    cudaStreamDestroy(ch->stream);
    free(ch);
    c->impl = NULL;
}

static void free_group(sp_comm *c, nccl_group *ng)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (ng->mpi != MPI_COMM_NULL && !fin && !spi_comm_world_is_aborted(c->world)) MPI_Comm_free(&ng->mpi);
    free(ng);
}

static sp_status nccl_group_init(sp_comm *c, spi_comm_group *g)
{
    nccl_world *nw = c->world->impl;
    SP_CHECK(set_device(c));
    nccl_group *ng = calloc(1, sizeof *ng);
    if (!ng) return spi_fail(SP_ENOMEM, "out of memory for an NCCL group");
    ng->mpi = MPI_COMM_NULL;
    sp_status st = spi_mpi_group_comm(c->world, nw->comm, g, &ng->mpi);
    if (st != SP_OK) goto fail;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (g->rank == 0) {
        ncclResult_t nr = ncclGetUniqueId(&id);
        if (nr != ncclSuccess) {
            /* the others wait in the broadcast: abort the world so they time out */
            st = nccl_fail(c->world, NULL, nr, "ncclGetUniqueId");
            goto fail;
        }
    }
    MPI_Request req;
    int rc = MPI_Ibcast(&id, (int)sizeof id, MPI_BYTE, 0, ng->mpi, &req);
    if (rc != MPI_SUCCESS) {
        st = spi_mpi_fail(c->world, rc, "MPI_Ibcast of the NCCL unique id");
        goto fail;
    }
    SP_CHECKGOTO(wait_mpi(c, &req, "NCCL unique id broadcast", g->size), st, fail);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;   /* ncclInProgress + polling: set-up honours the timeout */
    ncclResult_t nr = ncclCommInitRankConfig(&ng->nccl, g->size, id, g->rank, &cfg);
    if (nr != ncclSuccess && nr != ncclInProgress) {
        st = nccl_fail(c->world, ng, nr, "ncclCommInitRankConfig");
        goto fail;
    }
    SP_CHECKGOTO(wait_comm(c, ng, "ncclCommInitRankConfig", g->size), st, fail);
    g->impl = ng;
    return SP_OK;
fail:
    kill_group(ng);
    free_group(c, ng);
    return st;
}

static void nccl_group_fini(sp_comm *c, spi_comm_group *g)
{
    nccl_group *ng = g->impl;
    if (!ng) return;
    if (ng->nccl && !ng->dead) {
        if (spi_comm_world_is_aborted(c->world)) {
            kill_group(ng);
        } else {
            /* flush, then destroy; abort instead if the flush does not end */
            ncclResult_t r = ncclCommFinalize(ng->nccl);
            if ((r != ncclSuccess && r != ncclInProgress) || wait_comm(c, ng, "ncclCommFinalize", g->size) != SP_OK)
                kill_group(ng);
            if (!ng->dead) ncclCommDestroy(ng->nccl);
        }
    }
    free_group(c, ng);
    g->impl = NULL;
}

/* ---- collectives ------------------------------------------------------------------ */

static nccl_group *ngroup(const spi_comm_group *g) { return g->impl; }
static cudaStream_t stream_of(const sp_comm *c) { return ((nccl_chip *)c->impl)->stream; }

static sp_status nccl_allgather(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                                sp_dtype dt, spi_comm_xfer *x)
{
    size_t chunk = count * (size_t)sp_dtype_bytes(dt);
    if (!chunk) return SP_OK;
    SP_CHECK(set_device(c));
    nccl_group *ng = ngroup(g);
    ncclResult_t r = ncclAllGather(send, recv, chunk, ncclUint8, ng->nccl, stream_of(c));
    SP_CHECK(issued(c, ng, r, "ncclAllGather", g->size));
    x->sent = x->recv = (uint64_t)(g->size - 1) * chunk;
    return SP_OK;
}

static sp_status nccl_reducescatter(sp_comm *c, spi_comm_group *g, const void *send, void *recv,
                                    size_t count, sp_dtype dt, spi_comm_xfer *x)
{
    (void)dt;   /* float32, checked by comm.c */
    if (!count) return SP_OK;
    SP_CHECK(set_device(c));
    nccl_group *ng = ngroup(g);
    ncclResult_t r = ncclReduceScatter(send, recv, count, ncclFloat32, ncclSum, ng->nccl, stream_of(c));
    SP_CHECK(issued(c, ng, r, "ncclReduceScatter", g->size));
    x->sent = x->recv = (uint64_t)(g->size - 1) * count * sizeof(float);
    return SP_OK;
}

static sp_status nccl_allreduce(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                                sp_dtype dt, spi_comm_xfer *x)
{
    (void)dt;
    if (!count) return SP_OK;
    SP_CHECK(set_device(c));
    nccl_group *ng = ngroup(g);
    ncclResult_t r = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, ng->nccl, stream_of(c));
    SP_CHECK(issued(c, ng, r, "ncclAllReduce", g->size));
    size_t K = (size_t)g->size, mine = count / K + ((size_t)g->rank < count % K);
    x->sent = x->recv = ((uint64_t)(K - 1) * mine + (count - mine)) * sizeof(float);
    return SP_OK;
}

static sp_status nccl_alltoall(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                               sp_dtype dt, spi_comm_xfer *x)
{
    size_t chunk = count * (size_t)sp_dtype_bytes(dt);
    if (!chunk) return SP_OK;
    SP_CHECK(set_device(c));
    nccl_group *ng = ngroup(g);
    cudaStream_t s = stream_of(c);
    const char *sb = send;
    char *rb = recv;
    size_t me = (size_t)g->rank;
    cudaError_t e = cudaMemcpyAsync(rb + me * chunk, sb + me * chunk, chunk, cudaMemcpyDeviceToDevice, s);
    if (e != cudaSuccess) return cuda_fail(c->world, ng, e, "all-to-all own chunk copy");
    ncclResult_t r = ncclGroupStart();
    for (int h = 0; h < g->size && r == ncclSuccess; h++) {
        if (h == g->rank) continue;
        size_t off = (size_t)h * chunk;
        r = ncclSend(sb + off, chunk, ncclUint8, h, ng->nccl, s);
        if (r == ncclSuccess) r = ncclRecv(rb + off, chunk, ncclUint8, h, ng->nccl, s);
    }
    ncclResult_t r2 = ncclGroupEnd();   /* always close the group */
    if (r == ncclSuccess) r = r2;
    SP_CHECK(issued(c, ng, r, "all-to-all (ncclSend/ncclRecv)", g->size));
    x->sent = x->recv = (uint64_t)(g->size - 1) * chunk;
    return SP_OK;
}

static sp_status nccl_alltoallv(sp_comm *c, spi_comm_group *g, const void *send, const size_t *scounts,
                                const size_t *sdispls, void *recv, const size_t *rcounts, const size_t *rdispls,
                                sp_dtype dt, spi_comm_xfer *x)
{
    size_t s = (size_t)sp_dtype_bytes(dt), me = (size_t)g->rank;
    SP_CHECK(set_device(c));
    nccl_group *ng = ngroup(g);
    cudaStream_t st = stream_of(c);
    const char *sb = send;
    char *rb = recv;
    if (scounts[me]) {
        cudaError_t e = cudaMemcpyAsync(rb + rdispls[me] * s, sb + sdispls[me] * s, scounts[me] * s,
                                        cudaMemcpyDeviceToDevice, st);
        if (e != cudaSuccess) return cuda_fail(c->world, ng, e, "all-to-all-v own block copy");
    }
    uint64_t sent = 0, got = 0;
    ncclResult_t r = ncclGroupStart();
    for (int h = 0; h < g->size && r == ncclSuccess; h++) {
        if (h == g->rank) continue;
        if (scounts[h]) r = ncclSend(sb + sdispls[h] * s, scounts[h] * s, ncclUint8, h, ng->nccl, st);
        if (r == ncclSuccess && rcounts[h]) r = ncclRecv(rb + rdispls[h] * s, rcounts[h] * s, ncclUint8, h, ng->nccl, st);
        sent += scounts[h] * s;
        got += rcounts[h] * s;
    }
    ncclResult_t r2 = ncclGroupEnd();   /* always close the group */
    if (r == ncclSuccess) r = r2;
    SP_CHECK(issued(c, ng, r, "all-to-all-v (ncclSend/ncclRecv)", g->size));
    x->sent = sent;
    x->recv = got;
    return SP_OK;
}

/* The all-axes group (every chip) and the peer's rank in it. */
static sp_status p2p_group(sp_comm *c, int peer, spi_comm_group **gp, int *pr)
{
    spi_comm_group *g = &c->groups[c->world->live_axes];
    if (!g->impl) return spi_fail(SP_EINTERNAL, "NCCL backend: no communicator over all chips");
    for (int h = 0; h < g->size; h++)
        if (g->members[h] == peer) {
            *gp = g;
            *pr = h;
            return SP_OK;
        }
    return spi_fail(SP_EINTERNAL, "NCCL backend: rank %d is not in the all-chips group", peer);
}

static sp_status nccl_send(sp_comm *c, int peer, const void *buf, size_t count, sp_dtype dt, spi_comm_xfer *x)
{
    size_t bytes = count * (size_t)sp_dtype_bytes(dt);
    if (!bytes) return SP_OK;
    spi_comm_group *g = NULL;
    int pr = 0;
    SP_CHECK(p2p_group(c, peer, &g, &pr));
    SP_CHECK(set_device(c));
    nccl_group *ng = ngroup(g);
    ncclResult_t r = ncclSend(buf, bytes, ncclUint8, pr, ng->nccl, stream_of(c));
    SP_CHECK(issued(c, ng, r, "ncclSend", 2));
    x->sent = bytes;
    return SP_OK;
}

static sp_status nccl_recv(sp_comm *c, int peer, void *buf, size_t count, sp_dtype dt, spi_comm_xfer *x)
{
    size_t bytes = count * (size_t)sp_dtype_bytes(dt);
    if (!bytes) return SP_OK;
    spi_comm_group *g = NULL;
    int pr = 0;
    SP_CHECK(p2p_group(c, peer, &g, &pr));
    SP_CHECK(set_device(c));
    nccl_group *ng = ngroup(g);
    ncclResult_t r = ncclRecv(buf, bytes, ncclUint8, pr, ng->nccl, stream_of(c));
    SP_CHECK(issued(c, ng, r, "ncclRecv", 2));
    x->recv = bytes;
    return SP_OK;
}

/* Groups of one chip: a device-to-device copy on the chip's stream (the
 * front would otherwise memmove, which is wrong for device pointers). */
static sp_status nccl_local_copy(sp_comm *c, void *dst, const void *src, size_t bytes)
{
    SP_CHECK(set_device(c));
    cudaStream_t s = stream_of(c);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return cuda_fail(NULL, NULL, e, "copy within a group of one chip");
    return SP_OK;
}

static sp_status nccl_barrier(sp_comm *c, spi_comm_group *g)
{
    MPI_Request req;
    int rc = MPI_Ibarrier(ngroup(g)->mpi, &req);
    if (rc != MPI_SUCCESS) return spi_mpi_fail(c->world, rc, "MPI_Ibarrier");
    return wait_mpi(c, &req, "barrier", g->size);
}

const spi_comm_backend spi_comm_nccl_backend = {
    .name = "nccl",
    .world_init = nccl_world_init,
    .world_fini = nccl_world_fini,
    .comm_init = nccl_comm_init,
    .comm_fini = nccl_comm_fini,
    .group_init = nccl_group_init,
    .group_fini = nccl_group_fini,
    .wake = NULL,
    .allgather = nccl_allgather,
    .reducescatter = nccl_reducescatter,
    .allreduce = nccl_allreduce,
    .alltoall = nccl_alltoall,
    .alltoallv = nccl_alltoallv,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .local_copy = nccl_local_copy,
};
