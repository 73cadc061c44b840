/*
 * spi_comm.h: communicator internals shared by the front (comm.c) and the
 * backends (comm_threads.c; comm_mpi.c and comm_nccl.c to come).  Not
 * installed.
 *
 * Split of work.  comm.c checks arguments, resolves the group of an axis
 * mask (spi_comm_group: size, group rank, members in group-rank order),
 * handles groups of one chip itself (local_copy), keeps the abort flag and the byte
 * counters, and calls the backend through spi_comm_backend.  A backend only
 * moves data, for groups of 2 chips or more, and reports the bytes it
 * actually moved in an spi_comm_xfer.
 *
 * Writing a backend (e.g. MPI):
 *  - world_init: set w->first_local / w->nlocal (MPI: MPI_Comm_rank, 1) and
 *    check the MPI world size against w->nranks; w->impl is yours.
 *  - group_init is called from sp_comm_open, by every chip, for every
 *    canonical mask with K >= 2 in increasing mask order (so MPI_Comm_split
 *    of MPI_COMM_WORLD with color = g->members[0], key = g->rank works:
 *    every process calls it for the same masks in the same order).  Store
 *    the communicator in g->impl; group_fini frees it.
 *  - reductions: sum in group-rank order, ((x_0 + x_1) + ...) + x_{K-1},
 *    per element (MPI_Reduce_scatter's order is implementation-defined, so
 *    use e.g. MPI_Alltoall of the chunks and sum locally in rank order).
 *  - blocking waits must honour w->timeout_s and spi_comm_world_is_aborted;
 *    on timeout call spi_comm_world_abort and return its status.
 *  - fill x->sent / x->recv with the bytes really exchanged with other chips.
 */
#ifndef SPI_COMM_H
#define SPI_COMM_H
#include <pthread.h>
#include <stdatomic.h>
#include "exec/sp_comm.h"
#include "spi_common.h"

/* Which optional backends are linked into this build.  Set to 1 in the same
 * commit that adds exec/comm_mpi.c (resp. exec/comm_nccl.c) to
 * libspcore_la_SOURCES under `if HAVE_MPI` (resp. HAVE_CUDA); until then
 * comm.c returns SP_ENOTSUP for that backend even when configure found MPI. */
#ifndef SPI_COMM_MPI_LINKED
#define SPI_COMM_MPI_LINKED 1
#endif
#ifndef SPI_COMM_NCCL_LINKED
#define SPI_COMM_NCCL_LINKED 1
#endif

#define SPI_COMM_NMASKS (1u << SP_AXIS_COUNT)

typedef struct spi_comm_backend spi_comm_backend;

/* Bytes one call really moved to / from other chips. */
typedef struct spi_comm_xfer {
    uint64_t sent;
    uint64_t recv;
} spi_comm_xfer;

/* The group of one chip for one canonical mask (axes of extent 1 removed). */
typedef struct spi_comm_group {
    unsigned mask;
    int size;        /* K */
    int rank;        /* g: this chip's group rank */
    int *members;    /* K global ranks, by group rank */
    void *impl;      /* backend: MPI_Comm, ncclComm_t, threads rendezvous */
} spi_comm_group;

struct sp_comm_world {
    sp_comm_backend kind;
    const spi_comm_backend *be;
    sp_mesh mesh;
    int nranks;              /* sp_mesh_size(mesh) */
    unsigned live_axes;      /* mask of axes with extent > 1 */
    int first_local, nlocal; /* chips hosted here (set by world_init) */
    int part_first, part_total; /* sp_comm_world_create_part: the job's ranks of chip 0 and in all; 0, 0: the job */
    double timeout_s;        /* SHARDPLAN_COMM_TIMEOUT_S, read at creation */
    pthread_mutex_t mu;      /* guards reason, open[] */
    atomic_int aborted;
    char reason[256];
    unsigned char *open;     /* nranks flags: handle open */
    void *impl;              /* backend */
};

struct sp_comm {
    sp_comm_world *world;
    int rank;
    spi_comm_group groups[SPI_COMM_NMASKS];   /* indexed by canonical mask */
    sp_comm_counters stats;
    void *impl;                               /* backend */
};

/* Backend vtable.  Every data op gets a group with K >= 2 and a valid,
 * checked request; count is as passed to the public call. */
struct spi_comm_backend {
    const char *name;
    sp_status (*world_init)(sp_comm_world *w);
    void (*world_fini)(sp_comm_world *w);
    sp_status (*comm_init)(sp_comm *c);                      /* may be NULL */
    void (*comm_fini)(sp_comm *c);                           /* may be NULL */
    sp_status (*group_init)(sp_comm *c, spi_comm_group *g);
    void (*group_fini)(sp_comm *c, spi_comm_group *g);       /* may be NULL */
    /* Wake every blocked call after w->aborted was set (may be NULL). */
    void (*wake)(sp_comm_world *w);
    sp_status (*allgather)(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                           sp_dtype dt, spi_comm_xfer *x);
    sp_status (*reducescatter)(sp_comm *c, spi_comm_group *g, const void *send, void *recv,
                               size_t count, sp_dtype dt, spi_comm_xfer *x);
    sp_status (*allreduce)(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                           sp_dtype dt, spi_comm_xfer *x);
    sp_status (*alltoall)(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                          sp_dtype dt, spi_comm_xfer *x);
    /* counts and displacements checked (K each, extents within SIZE_MAX / 2);
     * NULL: the backend has none (SP_ENOTSUP) */
    sp_status (*alltoallv)(sp_comm *c, spi_comm_group *g, const void *send, const size_t *scounts,
                           const size_t *sdispls, void *recv, const size_t *rcounts, const size_t *rdispls,
                           sp_dtype dt, spi_comm_xfer *x);
    sp_status (*send)(sp_comm *c, int peer, const void *buf, size_t count, sp_dtype dt,
                      spi_comm_xfer *x);
    sp_status (*recv)(sp_comm *c, int peer, void *buf, size_t count, sp_dtype dt, spi_comm_xfer *x);
    sp_status (*barrier)(sp_comm *c, spi_comm_group *g);
    /* Copies bytes within this chip's memory (groups of one chip; may be NULL:
     * memmove, for backends on host memory).  Not counted as moved. */
    sp_status (*local_copy)(sp_comm *c, void *dst, const void *src, size_t bytes);
};

extern const spi_comm_backend spi_comm_threads_backend;
extern const spi_comm_backend spi_comm_mpi_backend;    /* only under HAVE_MPI && SPI_COMM_MPI_LINKED */
extern const spi_comm_backend spi_comm_nccl_backend;   /* only under HAVE_CUDA && SPI_COMM_NCCL_LINKED */

/* Marks w aborted (first reason wins), wakes its blocked calls, and returns
 * SP_ECOMM with the reason as this thread's last error. */
sp_status spi_comm_world_abort(sp_comm_world *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline int spi_comm_world_is_aborted(sp_comm_world *w)
{
    return atomic_load_explicit(&w->aborted, memory_order_acquire);
}
/* SP_ECOMM with the abort reason as this thread's last error. */
sp_status spi_comm_aborted_status(sp_comm_world *w);
/* Overrides the timeout (tests). */
void spi_comm_world_set_timeout(sp_comm_world *w, double seconds);
/* Threads backend: binds the calling thread, the process's chip thread
 * `thread` (0..), to the thread-th CPU of the process's affinity mask (mod
 * their count), unless SHARDPLAN_PIN_CHIPS=0.  Chips that meet at every
 * collective, left to the scheduler, are woken onto the waker's core and
 * take turns on it while the other core idles (a 2-chip tensor-parallel
 * prefill ran nearly serially: 10.3 ms against 6.3 ms pinned); pinned,
 * they run side by side, as the cost model prices them.  Best effort: a
 * refused binding leaves the thread where it was. */
void spi_threads_pin(int thread);

#endif /* SPI_COMM_H */
