/* comm.c: backend-independent communicator front: argument checks, groups,
 * abort flag, byte accounting, dispatch to the backend vtable. */
#include "config.h"
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/spi_comm.h"

static const char *const backend_names[] = {"threads", "mpi", "nccl"};
static_assert(SPI_ARRAY_LEN(backend_names) == SP_COMM_BACKEND_COUNT, "one name per backend");

const char *sp_comm_backend_name(sp_comm_backend b)
{
    return ((unsigned)b < SP_COMM_BACKEND_COUNT) ? backend_names[b] : "?";
}

/* NULL where the backend is not linked into this build. */
static const spi_comm_backend *backend_vtable(sp_comm_backend b)
{
    switch (b) {
    case SP_COMM_BACKEND_THREADS: return &spi_comm_threads_backend;
    case SP_COMM_BACKEND_MPI:
#if defined(HAVE_MPI) && SPI_COMM_MPI_LINKED
        return &spi_comm_mpi_backend;
#else
        return NULL;
#endif
    case SP_COMM_BACKEND_NCCL:
#if defined(HAVE_CUDA) && SPI_COMM_NCCL_LINKED
        return &spi_comm_nccl_backend;
#else
        return NULL;
#endif
    default: return NULL;
    }
}

static sp_status backend_missing(sp_comm_backend b)
{
    if (b == SP_COMM_BACKEND_MPI) {
#ifdef HAVE_MPI
        return spi_fail(SP_ENOTSUP, "the MPI communicator backend is not in this build yet "
                                    "(exec/comm_mpi.c); use the threads backend");
#else
        return spi_fail(SP_ENOTSUP, "MPI communicator backend not built: install Open MPI "
                                    "(libopenmpi-dev) and reconfigure with --with-mpi");
#endif
    }
    if (b == SP_COMM_BACKEND_NCCL) {
#ifdef HAVE_CUDA
        return spi_fail(SP_ENOTSUP, "the NCCL communicator backend is not in this build yet "
                                    "(exec/comm_nccl.c); use the threads or MPI backend");
#else
        return spi_fail(SP_ENOTSUP, "NCCL communicator backend not built: reconfigure with "
                                    "--with-cuda=DIR (needs nvcc, cuBLAS, NCCL and --with-mpi)");
#endif
    }
    return spi_fail(SP_EINVAL, "unknown communicator backend %d", (int)b);
}

/* ---- world ---------------------------------------------------------------------- */

static sp_status world_create(sp_comm_backend b, const sp_mesh *mesh, int first, int total, sp_comm_world **out);

sp_status sp_comm_world_create(sp_comm_backend b, const sp_mesh *mesh, sp_comm_world **out)
{
    return world_create(b, mesh, 0, 0, out);
}

sp_status sp_comm_world_create_part(sp_comm_backend b, const sp_mesh *mesh, int first, int total,
                                    sp_comm_world **out)
{
    if (out) *out = NULL;
    if (b == SP_COMM_BACKEND_NCCL)
        return spi_fail(SP_ENOTSUP, "NCCL backend: a communicator over part of the job's GPUs is not implemented");
    if (mesh && (first < 0 || total < 1 || first > total - sp_mesh_size(mesh)))
        return spi_fail(SP_EINVAL, "sp_comm_world_create_part: chips %d.. of a mesh of %d in a job of %d", first,
                        sp_mesh_size(mesh), total);
    return world_create(b, mesh, first, total, out);
}

static sp_status world_create(sp_comm_backend b, const sp_mesh *mesh, int first, int total, sp_comm_world **out)
{
    if (!out) return spi_fail(SP_EINVAL, "sp_comm_world_create: out is NULL");
    *out = NULL;
    if (!mesh) return spi_fail(SP_EINVAL, "sp_comm_world_create: mesh is NULL");
    int64_t n = 1;
    for (int a = 0; a < SP_AXIS_COUNT; a++) {
        if (mesh->dims[a] < 1)
            return spi_fail(SP_EINVAL, "mesh axis %s has extent %d; every axis needs >= 1",
                            sp_axis_name((sp_axis)a), mesh->dims[a]);
        n *= mesh->dims[a];
        if (n > (1 << 24)) return spi_fail(SP_EINVAL, "mesh has more than 2^24 chips");
    }
    const spi_comm_backend *be = backend_vtable(b);
    if (!be) return backend_missing(b);

    sp_comm_world *w = calloc(1, sizeof *w);
    if (!w) return spi_fail(SP_ENOMEM, "out of memory for the communicator world");
    w->kind = b;
    w->be = be;
    w->mesh = *mesh;
    w->nranks = (int)n;
    w->part_first = first;
    w->part_total = total;
    for (int a = 0; a < SP_AXIS_COUNT; a++)
        if (mesh->dims[a] > 1) w->live_axes |= 1u << a;
    long t = sp_env_long(SP_ENV_COMM_TIMEOUT_S);
    w->timeout_s = (t > 0) ? (double)t : 60.0;
    atomic_init(&w->aborted, 0);
    w->open = calloc((size_t)n, 1);
    if (!w->open || pthread_mutex_init(&w->mu, NULL) != 0) {
        free(w->open);
        free(w);
        return spi_fail(SP_ENOMEM, "out of memory for the communicator world");
    }
    sp_status st = be->world_init(w);
    if (st != SP_OK) {
        pthread_mutex_destroy(&w->mu);
        free(w->open);
        free(w);
        return st;
    }
    *out = w;
    return SP_OK;
}

void sp_comm_world_free(sp_comm_world *w)
{
    if (!w) return;
    w->be->world_fini(w);
    pthread_mutex_destroy(&w->mu);
    free(w->open);
    free(w);
}

sp_status sp_comm_world_local_ranks(const sp_comm_world *w, int *first, int *count)
{
    if (!w || !first || !count) return spi_fail(SP_EINVAL, "sp_comm_world_local_ranks: NULL argument");
    *first = w->first_local;
    *count = w->nlocal;
    return SP_OK;
}

const sp_mesh *sp_comm_world_mesh(const sp_comm_world *w) { return w ? &w->mesh : NULL; }
sp_comm_backend sp_comm_world_backend(const sp_comm_world *w)
{
    return w ? w->kind : SP_COMM_BACKEND_COUNT;
}

static void world_abort_v(sp_comm_world *w, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&w->mu);
    if (!atomic_load_explicit(&w->aborted, memory_order_relaxed)) {
        vsnprintf(w->reason, sizeof w->reason, fmt, ap);
        atomic_store_explicit(&w->aborted, 1, memory_order_release);
    }
    pthread_mutex_unlock(&w->mu);
    if (w->be->wake) w->be->wake(w);
}

sp_status spi_comm_world_abort(sp_comm_world *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    world_abort_v(w, fmt, ap);
    va_end(ap);
    return spi_comm_aborted_status(w);
}

static void world_abort_f(sp_comm_world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void world_abort_f(sp_comm_world *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    world_abort_v(w, fmt, ap);
    va_end(ap);
}

void sp_comm_abort(sp_comm_world *w, const char *why)
{
    if (!w) return;
    world_abort_f(w, "communicator aborted: %s", (why && *why) ? why : "(no reason given)");
}

sp_status spi_comm_aborted_status(sp_comm_world *w)
{
    /* reason is immutable once aborted is set (release/acquire pair). */
    return spi_fail(SP_ECOMM, "%s", w->reason);
}

int sp_comm_world_aborted(sp_comm_world *w, char *why, size_t size)
{
    if (!w || !spi_comm_world_is_aborted(w)) return 0;
    if (why && size) snprintf(why, size, "%s", w->reason);
    return 1;
}

void spi_comm_world_set_timeout(sp_comm_world *w, double seconds)
{
    if (w && seconds > 0) w->timeout_s = seconds;
}

/* ---- per-chip handle -------------------------------------------------------------- */

static void close_groups(sp_comm *c)
{
    for (unsigned m = 0; m < SPI_COMM_NMASKS; m++) {
        spi_comm_group *g = &c->groups[m];
        if (g->impl && c->world->be->group_fini) c->world->be->group_fini(c, g);
        g->impl = NULL;
        free(g->members);
        g->members = NULL;
    }
}

sp_status sp_comm_open(sp_comm_world *w, int rank, sp_comm **out)
{
    if (!out) return spi_fail(SP_EINVAL, "sp_comm_open: out is NULL");
    *out = NULL;
    if (!w) return spi_fail(SP_EINVAL, "sp_comm_open: world is NULL");
    if (rank < w->first_local || rank >= w->first_local + w->nlocal)
        return spi_fail(SP_EINVAL, "sp_comm_open: rank %d is not hosted by this process (ranks %d..%d)",
                        rank, w->first_local, w->first_local + w->nlocal - 1);
    if (spi_comm_world_is_aborted(w)) return spi_comm_aborted_status(w);
    pthread_mutex_lock(&w->mu);
    int busy = w->open[rank];
    w->open[rank] = 1;
    pthread_mutex_unlock(&w->mu);
    if (busy) return spi_fail(SP_EINVAL, "sp_comm_open: rank %d is already open", rank);

    sp_status st = SP_OK;
    sp_comm *c = calloc(1, sizeof *c);
    if (!c) {
        st = spi_fail(SP_ENOMEM, "out of memory for the communicator of rank %d", rank);
        goto fail;
    }
    c->world = w;
    c->rank = rank;
    /* Every canonical mask (a subset of the live axes), in increasing order:
     * the same order on every chip, as MPI_Comm_split requires. */
    for (unsigned m = 0; m < SPI_COMM_NMASKS; m++) {
        if (m & ~w->live_axes) continue;
        spi_comm_group *g = &c->groups[m];
        g->mask = m;
        g->size = sp_mesh_group_size(&w->mesh, m);
        g->rank = sp_mesh_group_rank(&w->mesh, rank, m);
        g->members = malloc((size_t)g->size * sizeof *g->members);
        if (!g->members) {
            st = spi_fail(SP_ENOMEM, "out of memory for the groups of rank %d", rank);
            goto fail;
        }
        sp_mesh_group_members(&w->mesh, rank, m, g->members);
    }
    if (w->be->comm_init) SP_CHECKGOTO(w->be->comm_init(c), st, fail);
    for (unsigned m = 1; m < SPI_COMM_NMASKS; m++)
        if (c->groups[m].size >= 2) SP_CHECKGOTO(w->be->group_init(c, &c->groups[m]), st, fail);
    *out = c;
    return SP_OK;
fail:
    if (c) {
        close_groups(c);
        if (c->impl && w->be->comm_fini) w->be->comm_fini(c);
        free(c);
    }
    pthread_mutex_lock(&w->mu);
    w->open[rank] = 0;
    pthread_mutex_unlock(&w->mu);
    return st;
}

void sp_comm_close(sp_comm *c)
{
    if (!c) return;
    sp_comm_world *w = c->world;
    close_groups(c);
    if (w->be->comm_fini) w->be->comm_fini(c);
    pthread_mutex_lock(&w->mu);
    w->open[c->rank] = 0;
    pthread_mutex_unlock(&w->mu);
    free(c);
}

int sp_comm_rank(const sp_comm *c) { return c ? c->rank : -1; }

static const spi_comm_group *lookup_group(const sp_comm *c, unsigned axes)
{
    if (!c || (axes & ~SP_AXES_ALL)) return NULL;
    return &c->groups[axes & c->world->live_axes];
}

int sp_comm_group_size(const sp_comm *c, unsigned axes)
{
    const spi_comm_group *g = lookup_group(c, axes);
    return g ? g->size : -1;
}

int sp_comm_group_rank(const sp_comm *c, unsigned axes)
{
    const spi_comm_group *g = lookup_group(c, axes);
    return g ? g->rank : -1;
}

sp_status sp_comm_stats(const sp_comm *c, sp_comm_counters *out)
{
    if (!c || !out) return spi_fail(SP_EINVAL, "sp_comm_stats: NULL argument");
    *out = c->stats;
    return SP_OK;
}

void sp_comm_stats_reset(sp_comm *c)
{
    if (c) memset(&c->stats, 0, sizeof c->stats);
}

/* ---- checks shared by the collectives ------------------------------------------------ */

static int ranges_overlap(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return na && nb && pa < pb + nb && pb < pa + na;
}

/* Common checks; on success *gp is the group and *s the element size. */
static sp_status check_coll(sp_comm *c, const char *what, unsigned axes, const void *send, void *recv,
                            size_t count, sp_dtype dt, int reduction, spi_comm_group **gp, size_t *s)
{
    if (!c) return spi_fail(SP_EINVAL, "%s: communicator is NULL", what);
    if (axes & ~SP_AXES_ALL)
        return spi_fail(SP_EINVAL, "%s: axis mask 0x%x has bits outside SP_AXES_ALL (0x%x)", what, axes,
                        SP_AXES_ALL);
    if ((unsigned)dt >= SP_DT_COUNT) return spi_fail(SP_EINVAL, "%s: unknown dtype %d", what, (int)dt);
    if (reduction && dt != SP_DT_F32)
        return spi_fail(SP_ENOTSUP, "%s: reductions are float32 only (got %s)", what, sp_dtype_name(dt));
    if (spi_comm_world_is_aborted(c->world)) return spi_comm_aborted_status(c->world);
    spi_comm_group *g = &c->groups[axes & c->world->live_axes];
    size_t es = (size_t)sp_dtype_bytes(dt);
    uint64_t total;
    if (!spi_mul_u64(count, (uint64_t)es * (uint64_t)g->size, &total) || total > SIZE_MAX / 2)
        return spi_fail(SP_EINVAL, "%s: count %zu of %s over %d chips overflows", what, count,
                        sp_dtype_name(dt), g->size);
    if (count && (!send || !recv))
        return spi_fail(SP_EINVAL, "%s: NULL buffer with count %zu", what, count);
    *gp = g;
    *s = es;
    return SP_OK;
}

static void account(sp_comm *c, sp_coll_kind k, const spi_comm_xfer *x, sp_status st)
{
    c->stats.bytes_sent[k] += x->sent;
    c->stats.bytes_recv[k] += x->recv;
    if (st == SP_OK) c->stats.calls[k]++;
}

/* A group of one chip: send to recv in this chip's memory (the backend's
 * copy where its buffers are not host memory, e.g. NCCL's device buffers). */
static sp_status local_copy(sp_comm *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src) return SP_OK;
    if (c->world->be->local_copy) return c->world->be->local_copy(c, dst, src, bytes);
    memmove(dst, src, bytes);
    return SP_OK;
}

/* ---- collectives ------------------------------------------------------------------- */

sp_status sp_comm_allgather(sp_comm *c, unsigned axes, const void *send, void *recv, size_t count,
                            sp_dtype dt)
{
    spi_comm_group *g = NULL;
    size_t s = 0;
    SP_CHECK(check_coll(c, "allgather", axes, send, recv, count, dt, 0, &g, &s));
    size_t chunk = count * s, K = (size_t)g->size;
    const char *own = (const char *)recv + (size_t)g->rank * chunk;
    if (send != own && ranges_overlap(send, chunk, recv, K * chunk))
        return spi_fail(SP_EINVAL, "allgather: send overlaps recv but is not recv + g*count (g=%d)", g->rank);
    spi_comm_xfer x = {0, 0};
    sp_status st = SP_OK;
    if (K == 1)
        st = local_copy(c, recv, send, chunk);
    else
        st = c->world->be->allgather(c, g, send, recv, count, dt, &x);
    account(c, SP_COLL_ALLGATHER, &x, st);
    return st;
}

sp_status sp_comm_reducescatter(sp_comm *c, unsigned axes, const void *send, void *recv, size_t count,
                                sp_dtype dt)
{
    spi_comm_group *g = NULL;
    size_t s = 0;
    SP_CHECK(check_coll(c, "reducescatter", axes, send, recv, count, dt, 1, &g, &s));
    size_t chunk = count * s, K = (size_t)g->size;
    const char *own = (const char *)send + (size_t)g->rank * chunk;
    if ((const void *)own != recv && ranges_overlap(send, K * chunk, recv, chunk))
        return spi_fail(SP_EINVAL, "reducescatter: recv overlaps send but is not send + g*count (g=%d)",
                        g->rank);
    spi_comm_xfer x = {0, 0};
    sp_status st = SP_OK;
    if (K == 1)
        st = local_copy(c, recv, send, chunk);
    else
        st = c->world->be->reducescatter(c, g, send, recv, count, dt, &x);
    account(c, SP_COLL_REDUCESCATTER, &x, st);
    return st;
}

sp_status sp_comm_allreduce(sp_comm *c, unsigned axes, const void *send, void *recv, size_t count,
                            sp_dtype dt)
{
    spi_comm_group *g = NULL;
    size_t s = 0;
    SP_CHECK(check_coll(c, "allreduce", axes, send, recv, count, dt, 1, &g, &s));
    size_t bytes = count * s;
    if (send != recv && ranges_overlap(send, bytes, recv, bytes))
        return spi_fail(SP_EINVAL, "allreduce: send and recv overlap but are not equal");
    spi_comm_xfer x = {0, 0};
    sp_status st = SP_OK;
    if (g->size == 1)
        st = local_copy(c, recv, send, bytes);
    else
        st = c->world->be->allreduce(c, g, send, recv, count, dt, &x);
    account(c, SP_COLL_ALLREDUCE, &x, st);
    return st;
}

sp_status sp_comm_alltoall(sp_comm *c, unsigned axes, const void *send, void *recv, size_t count,
                           sp_dtype dt)
{
    spi_comm_group *g = NULL;
    size_t s = 0;
    SP_CHECK(check_coll(c, "alltoall", axes, send, recv, count, dt, 0, &g, &s));
    size_t bytes = count * s * (size_t)g->size;
    if (ranges_overlap(send, bytes, recv, bytes))
        return spi_fail(SP_EINVAL, "alltoall: send and recv overlap; all-to-all is not in place");
    spi_comm_xfer x = {0, 0};
    sp_status st = SP_OK;
    if (g->size == 1)
        st = local_copy(c, recv, send, bytes);
    else
        st = c->world->be->alltoall(c, g, send, recv, count, dt, &x);
    account(c, SP_COLL_ALLTOALL, &x, st);
    return st;
}

/* counts / displacements of one side of an all-to-all-v: every block within
 * SIZE_MAX / 2 bytes, and a buffer where any block is not empty */
static sp_status check_v(const char *side, const void *buf, const size_t *cnt, const size_t *dsp, int K, size_t s)
{
    if (!cnt || !dsp) return spi_fail(SP_EINVAL, "alltoallv: %s counts or displacements are NULL", side);
    for (int h = 0; h < K; h++) {
        uint64_t end;
        if (!spi_mul_u64(cnt[h] + (uint64_t)dsp[h], s, &end) || cnt[h] > SIZE_MAX / 2 || dsp[h] > SIZE_MAX / 2 ||
            end > SIZE_MAX / 2)
            return spi_fail(SP_EINVAL, "alltoallv: %s block %d (count %zu at %zu) overflows", side, h, cnt[h], dsp[h]);
        if (cnt[h] && !buf) return spi_fail(SP_EINVAL, "alltoallv: NULL %s buffer with count %zu", side, cnt[h]);
    }
    return SP_OK;
}

sp_status sp_comm_alltoallv(sp_comm *c, unsigned axes, const void *send, const size_t *scounts,
                            const size_t *sdispls, void *recv, const size_t *rcounts, const size_t *rdispls,
                            sp_dtype dt)
{
    spi_comm_group *g = NULL;
    size_t s = 0;
    SP_CHECK(check_coll(c, "alltoallv", axes, send, recv, 0, dt, 0, &g, &s));
    int K = g->size;
    SP_CHECK(check_v("send", send, scounts, sdispls, K, s));
    SP_CHECK(check_v("recv", recv, rcounts, rdispls, K, s));
    for (int h = 0; h < K; h++)
        for (int j = 0; j < K; j++)
            if (ranges_overlap((const char *)send + sdispls[h] * s, scounts[h] * s, (const char *)recv + rdispls[j] * s,
                               rcounts[j] * s))
                return spi_fail(SP_EINVAL, "alltoallv: send block %d overlaps recv block %d; not in place", h, j);
    spi_comm_xfer x = {0, 0};
    sp_status st = SP_OK;
    if (K == 1) {
        if (rcounts[0] != scounts[0])
            return spi_fail(SP_EINVAL, "alltoallv: a group of one sends %zu elements to itself but receives %zu",
                            scounts[0], rcounts[0]);
        st = local_copy(c, (char *)recv + rdispls[0] * s, (const char *)send + sdispls[0] * s, scounts[0] * s);
    } else if (!c->world->be->alltoallv) {
        st = spi_fail(SP_ENOTSUP, "alltoallv: not implemented by the %s backend", c->world->be->name);
    } else {
        st = c->world->be->alltoallv(c, g, send, scounts, sdispls, recv, rcounts, rdispls, dt, &x);
    }
    account(c, SP_COLL_ALLTOALL, &x, st);
    return st;
}

static sp_status check_p2p(sp_comm *c, const char *what, int peer, const void *buf, size_t count,
                           sp_dtype dt)
{
    if (!c) return spi_fail(SP_EINVAL, "%s: communicator is NULL", what);
    if (peer < 0 || peer >= c->world->nranks || peer == c->rank)
        return spi_fail(SP_EINVAL, "%s: peer %d must be another rank in 0..%d (this is rank %d)", what,
                        peer, c->world->nranks - 1, c->rank);
    if ((unsigned)dt >= SP_DT_COUNT) return spi_fail(SP_EINVAL, "%s: unknown dtype %d", what, (int)dt);
    uint64_t b;
    if (!spi_mul_u64(count, (uint64_t)sp_dtype_bytes(dt), &b) || b > SIZE_MAX / 2)
        return spi_fail(SP_EINVAL, "%s: count %zu overflows", what, count);
    if (count && !buf) return spi_fail(SP_EINVAL, "%s: NULL buffer with count %zu", what, count);
    if (spi_comm_world_is_aborted(c->world)) return spi_comm_aborted_status(c->world);
    return SP_OK;
}

sp_status sp_comm_send(sp_comm *c, int peer, const void *buf, size_t count, sp_dtype dt)
{
    SP_CHECK(check_p2p(c, "send", peer, buf, count, dt));
    spi_comm_xfer x = {0, 0};
    sp_status st = c->world->be->send(c, peer, buf, count, dt, &x);
    account(c, SP_COLL_SENDRECV, &x, st);
    return st;
}

sp_status sp_comm_recv(sp_comm *c, int peer, void *buf, size_t count, sp_dtype dt)
{
    SP_CHECK(check_p2p(c, "recv", peer, buf, count, dt));
    spi_comm_xfer x = {0, 0};
    sp_status st = c->world->be->recv(c, peer, buf, count, dt, &x);
    account(c, SP_COLL_SENDRECV, &x, st);
    return st;
}

sp_status sp_comm_barrier(sp_comm *c, unsigned axes)
{
    if (!c) return spi_fail(SP_EINVAL, "barrier: communicator is NULL");
    if (axes & ~SP_AXES_ALL)
        return spi_fail(SP_EINVAL, "barrier: axis mask 0x%x has bits outside SP_AXES_ALL", axes);
    if (spi_comm_world_is_aborted(c->world)) return spi_comm_aborted_status(c->world);
    spi_comm_group *g = &c->groups[axes & c->world->live_axes];
    sp_status st = SP_OK;
    if (g->size > 1) st = c->world->be->barrier(c, g);
    if (st == SP_OK) c->stats.barriers++;
    return st;
}
