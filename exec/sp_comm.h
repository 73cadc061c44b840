/*
 * sp_comm.h: the communicator: collectives over groups of mesh axes, and
 * point-to-point hand-off between chips.  One interface, several backends
 * (threads in one process; MPI, one process per chip; NCCL on GPUs).
 *
 * Tutorial (threads backend, 8 chips as x=2 y=2 z=2):
 *
 *     sp_mesh m = {{1, 1, 2, 2, 2}};                // stage, replica, x, y, z
 *     sp_comm_world *w;
 *     SP_CHECK(sp_comm_world_create(SP_COMM_BACKEND_THREADS, &m, &w));
 *     // ... start one thread per chip in [first, first+count) of
 *     //     sp_comm_world_local_ranks(w, &first, &count); each thread does:
 *     sp_comm *c;
 *     st = sp_comm_open(w, my_rank, &c);
 *     st = sp_comm_allreduce(c, SP_AXES_Y | SP_AXES_Z, x, x, n, SP_DT_F32); // in place
 *     if (st != SP_OK) sp_comm_abort(w, sp_last_error());  // wake the others
 *     sp_comm_close(c);
 *     // ... join the threads, then
 *     sp_comm_world_free(w);
 *
 * Groups.  Every collective names its group by an axis mask (SP_AXES_* from
 * sp_mesh.h): the chips that share all coordinates not in the mask.  Group
 * rank g and the members' order are those of sp_mesh_group_rank /
 * sp_mesh_group_members (mixed radix over the masked axes, z fastest).  Axes
 * of extent 1 may be in the mask or not, it is the same group.  A group of
 * one chip moves no data (the call only copies send to recv if they differ).
 *
 * Calling rules (as for MPI and NCCL).  Every member of a group must make
 * the same collective calls on that group in the same order, with the same
 * count and dtype.  Calls on different groups may interleave freely as long
 * as the chips that share groups agree on the order; collectives on disjoint
 * groups run concurrently.  One sp_comm is used by one thread only.  Buffers
 * are host memory for THREADS and MPI, device memory for NCCL; they must
 * not overlap except in the in-place forms stated per call.  A mismatch that
 * the backend can see (count, dtype or kind differ) fails with SP_EINVAL on
 * every member.
 *
 * Determinism.  Every reduction (reduce-scatter, all-reduce) computes each
 * output element as ((x_0 + x_1) + x_2) + ... + x_{K-1}, where x_g is the
 * contribution of group rank g, in float32, starting from x_0 (not from 0).
 * Every backend honours this, so THREADS and MPI give bit-identical results
 * and a run is reproducible from one call to the next.
 *
 * Failure.  A call that waits for a peer more than SHARDPLAN_COMM_TIMEOUT_S
 * seconds (default 60) fails with SP_ECOMM and aborts the world.  Once a
 * world is aborted (timeout, or sp_comm_abort) every blocked and every later
 * call on it fails promptly with SP_ECOMM and the reason in sp_last_error();
 * the world can then only be freed.
 *
 * Byte accounting.  Each sp_comm counts, per collective kind, the bytes this
 * chip actually sent to and received from OTHER chips, as moved by the
 * backend (its own chunk does not cross).  With K the group size, count
 * as passed and s = sp_dtype_bytes(dt), the THREADS backend moves, per chip
 * and in each direction:
 *   all-gather      (K-1)·count·s
 *   reduce-scatter  (K-1)·count·s
 *   all-reduce      ((K-1)·c_g + count - c_g)·s: reduce-scatter then
 *                   all-gather of K contiguous chunks of c_h = floor(count/K)
 *                   + (h < count mod K) elements (chip g owns chunk g: it
 *                   gets c_g from each peer, then every other chunk once).
 *                   When K divides count this is exactly 2·(K-1)/K·count·s;
 *                   otherwise chips differ by at most (K-2)·s and the group
 *                   total is still 2·(K-1)·count·s.
 *   all-to-all      (K-1)·count·s
 *   all-to-all-v    sum over the other members of the counts, each way
 *   send / recv     count·s (sent by the sender, received by the receiver)
 * Groups of one chip move 0 bytes; barriers move none and are not counted.
 */
#ifndef SP_COMM_H
#define SP_COMM_H
#include <stddef.h>
#include <stdint.h>
#include "sp_common.h"
#include "sp_mesh.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Append-only. */
typedef enum sp_comm_backend {
    SP_COMM_BACKEND_THREADS = 0,  /* chips are threads of this process; always built */
    SP_COMM_BACKEND_MPI = 1,      /* one MPI process per chip; configure --with-mpi */
    SP_COMM_BACKEND_NCCL = 2,     /* one GPU per MPI process; configure --with-cuda */
    SP_COMM_BACKEND_COUNT
} sp_comm_backend;
const char *sp_comm_backend_name(sp_comm_backend b);   /* "threads", "mpi", "nccl" */

/* Kinds of data movement for byte accounting: sp_coll_kind (SP_COLL_ALLGATHER,
 * _REDUCESCATTER, _ALLREDUCE, _ALLTOALL, _SENDRECV, _COUNT) and
 * sp_coll_kind_name() from sp_common.h, shared with the lowering and the cost
 * model. */

/* Cumulative since sp_comm_open or the last sp_comm_stats_reset. */
typedef struct sp_comm_counters {
    uint64_t bytes_sent[SP_COLL_COUNT];   /* to other chips */
    uint64_t bytes_recv[SP_COLL_COUNT];   /* from other chips */
    uint64_t calls[SP_COLL_COUNT];        /* successful calls (send and recv each count one) */
    uint64_t barriers;                    /* successful barriers */
} sp_comm_counters;

typedef struct sp_comm_world sp_comm_world;   /* opaque: the job's chips */
typedef struct sp_comm sp_comm;               /* opaque: one chip's handle */

/* ---- world -------------------------------------------------------------------- */

/* Creates the world for mesh (copied).  THREADS: one world shared by all the
 * chip threads of the process, which hosts every chip.  MPI / NCCL: this
 * process is one chip (its MPI rank in MPI_COMM_WORLD); the MPI world size
 * must equal sp_mesh_size(mesh).  Returns SP_ENOTSUP naming the configure
 * flag when the backend is not built.  Caller frees with sp_comm_world_free,
 * after every sp_comm of it is closed. */
sp_status sp_comm_world_create(sp_comm_backend b, const sp_mesh *mesh, sp_comm_world **out);
/* A world over part of a job: the mesh's chips are the job's ranks first ..
 * first+n-1 of `total` (n = sp_mesh_size(mesh); separate prefill and decode
 * chip groups, one world each).  THREADS: as sp_comm_world_create (the
 * process hosts the world's chips; first and total only checked).  MPI:
 * collective over every process of MPI_COMM_WORLD, which must have `total`;
 * the world's chip r is MPI rank first + r, and a process outside the range
 * gets a world that hosts no chip (sp_comm_world_local_ranks count 0).  NCCL:
 * SP_ENOTSUP. */
sp_status sp_comm_world_create_part(sp_comm_backend b, const sp_mesh *mesh, int first, int total,
                                    sp_comm_world **out);
void sp_comm_world_free(sp_comm_world *w);                 /* NULL is a no-op */
/* The chips this process hosts: global ranks first .. first+count-1
 * (THREADS: 0 .. n-1; MPI/NCCL: its one rank). */
sp_status sp_comm_world_local_ranks(const sp_comm_world *w, int *first, int *count);
/* The mesh of the world (borrowed: valid until sp_comm_world_free). */
const sp_mesh *sp_comm_world_mesh(const sp_comm_world *w);
sp_comm_backend sp_comm_world_backend(const sp_comm_world *w);

/* Makes every blocked and every later call on w fail with SP_ECOMM; why
 * (copied, may be NULL) becomes their error text.  Thread-safe; callable
 * from any thread, also one that is not a chip.  The first reason wins. */
void sp_comm_abort(sp_comm_world *w, const char *why);
/* 1 if w was aborted (by sp_comm_abort or a timeout), with the reason in
 * why (if non-NULL, size bytes). */
int sp_comm_world_aborted(sp_comm_world *w, char *why, size_t size);

/* ---- per-chip handle ------------------------------------------------------------ */

/* Opens the handle of chip `rank` (a global rank hosted by this process, each
 * opened at most once at a time).  MPI/NCCL: collective over all chips (it
 * builds the group communicators).  Caller closes with sp_comm_close. */
sp_status sp_comm_open(sp_comm_world *w, int rank, sp_comm **out);
void sp_comm_close(sp_comm *c);                             /* NULL is a no-op */
int sp_comm_rank(const sp_comm *c);                         /* global rank */
int sp_comm_group_size(const sp_comm *c, unsigned axes);    /* K */
int sp_comm_group_rank(const sp_comm *c, unsigned axes);    /* g */

/* ---- collectives ---------------------------------------------------------------
 * K = sp_comm_group_size(c, axes), g = sp_comm_group_rank(c, axes).
 * Buffers may be NULL when count is 0. */

/* All-gather.  count is per rank.  send: count elements; recv: K*count, chunk
 * h (elements h*count ..) is group rank h's send.  In place iff
 * send == recv + g*count*s (this chip's chunk already in place). */
sp_status sp_comm_allgather(sp_comm *c, unsigned axes, const void *send, void *recv, size_t count,
                            sp_dtype dt);

/* Reduce-scatter (sum).  count is per rank OUTPUT.  send: K*count elements;
 * recv: count, = sum over h of chunk g of group rank h's send.  In place iff
 * recv == send + g*count.  dt must be SP_DT_F32 (else SP_ENOTSUP). */
sp_status sp_comm_reducescatter(sp_comm *c, unsigned axes, const void *send, void *recv, size_t count,
                                sp_dtype dt);

/* All-reduce (sum).  send and recv: count elements each; any count.  In
 * place iff send == recv.  dt must be SP_DT_F32 (else SP_ENOTSUP). */
sp_status sp_comm_allreduce(sp_comm *c, unsigned axes, const void *send, void *recv, size_t count,
                            sp_dtype dt);

/* All-to-all.  count is per peer.  send: K*count elements, chunk h goes to
 * group rank h; recv: K*count, chunk h came from group rank h (chunk g is
 * this chip's own send chunk g).  Not in place: send and recv must not
 * overlap (SP_EINVAL). */
sp_status sp_comm_alltoall(sp_comm *c, unsigned axes, const void *send, void *recv, size_t count,
                           sp_dtype dt);

/* All-to-all with counts per peer (MPI_Alltoallv).  scounts[h] elements at
 * send + sdispls[h] go to group rank h; rcounts[h] elements from group rank
 * h land at recv + rdispls[h] (counts and displacements in elements, K of
 * each).  rcounts[h] must equal group rank h's scounts[g]: a mismatch the
 * backend can see fails with SP_EINVAL (THREADS sees every one).  Not in
 * place: no block sent may overlap a block received (SP_EINVAL).  Bytes
 * counted: sum over h != g of scounts[h]·s sent and rcounts[h]·s received. */
sp_status sp_comm_alltoallv(sp_comm *c, unsigned axes, const void *send, const size_t *scounts,
                            const size_t *sdispls, void *recv, const size_t *rcounts, const size_t *rdispls,
                            sp_dtype dt);

/* Point-to-point between GLOBAL ranks (pipeline hand-off).  count elements
 * of dt; the receiver must post the same count and dtype.  Synchronous, like
 * MPI_Ssend: send returns once the receiver has the data, so order pairs so
 * that no cycle of chips all send first.  peer != own rank. */
sp_status sp_comm_send(sp_comm *c, int peer, const void *buf, size_t count, sp_dtype dt);
sp_status sp_comm_recv(sp_comm *c, int peer, void *buf, size_t count, sp_dtype dt);

/* Returns once every member of the group has entered the barrier. */
sp_status sp_comm_barrier(sp_comm *c, unsigned axes);

/* ---- accounting ------------------------------------------------------------------ */
sp_status sp_comm_stats(const sp_comm *c, sp_comm_counters *out);
void sp_comm_stats_reset(sp_comm *c);

#ifdef __cplusplus
}
#endif
#endif /* SP_COMM_H */
