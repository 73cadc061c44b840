/*
 * comm_threads.c: the threads backend.  Every chip is a thread of this
 * process and all buffers are in one address space.
 *
 * Collectives (pull model).  Each group (canonical mask × group) owns one
 * rendezvous: a mutex, a condvar and one slot per member.  A call
 *   1. publishes {kind, count, dtype, send, recv} in its slot and arrives;
 *   2. once all K members arrived, checks that they all called the same
 *      thing, then copies / reduces what it needs straight out of the
 *      peers' buffers (each chip reads, never writes, other chips' memory);
 *   3. arrives again before returning, so no buffer is released while a
 *      peer may still read it (all-reduce has one more step in between).
 * The barrier is generation-less: slot g counts its member's arrivals a_g
 * and the rendezvous the total; phase p is complete when total == K*p
 * (no member can be at p+1 before every member reached p).
 *
 * Byte accounting is measured, not computed: the reader adds what it
 * copies from a peer to its own recv count and to the peer slot's atomic
 * `pulled`, which the peer reads as its sent count after the last phase.
 *
 * Send/recv: one mailbox per ordered pair (created on first use); the
 * sender posts its buffer and waits until the receiver has copied it.
 *
 * Waiting.  A rendezvous is an atomic arrival count and a futex word
 * (seq) that the arrival completing a phase bumps and wakes; no mutex is
 * taken on the way in or out, so K woken members do not queue on a lock
 * one after another (with a mutex and condvar, a broadcast to 7 sleepers
 * of 8 chips on 2 cores became a convoy on the mutex: 40-60 % of the
 * cores idle during a decode step, and ~1.4x its time).  A waiter whose
 * chips each have a CPU of their own polls for SHARDPLAN_SPIN_US (1000 us)
 * before it sleeps: a sleeping CPU of a VM halts, and waking it costs
 * 40-70 us a collective (tiny-llama 2-chip decode step, 2026-11-24, 2-core
 * VM: 956 us sleeping at once, 247 us polling 50 us first; with two CPU
 * hogs beside it, 3.4-6.0 ms against 0.25-0.26 ms).  With more chips than
 * CPUs a waiter sleeps at once, never polls: a polling waiter takes the
 * CPU that the member it waits for needs (measured before the chips were
 * pinned: polling 5-500 us made a 2-chip decode step 2-40x slower on a
 * loaded 2-core machine).  Mailboxes (send/recv) wait on a mutex and condvar,
 * after the same polling (a 2-stage tiny-llama pipeline's decode step: 0.56
 * and 3.4 ms sleeping at once, 0.41 and 0.39 ms polling, load ~4).  1000 us
 * (50 us before): a pipeline stage waits for the other stage's whole pass
 * (tiny-llama, 2 stages, batch 8: ~200 us), which outlasted 50 us, so each
 * hand-off paid a wake-up (a 46 us send in the trace); its decode step with
 * 2 micro-batches took 0.63-1.41 ms polling 50 us and 0.34 ms polling 1000
 * us (load ~3), 0.40 against 0.79 ms with one micro-batch; a 2-chip
 * tensor-parallel step, whose waits are short, is the same (0.79 ms both,
 * beside two CPU-bound jobs; 0.25 ms quiet).
 * Every wait has the world's timeout (CLOCK_MONOTONIC); a timeout aborts
 * the world (naming the missing ranks), and the abort wakes every
 * rendezvous and mailbox.
 */
#include "config.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "exec/spi_comm.h"

#define THREADS_MAX_CHIPS 4096
#define KIND_BARRIER SP_COLL_COUNT   /* internal kind for the rendezvous check */
#define KIND_ALLTOALLV (SP_COLL_COUNT + 1)
#define REDUCE_TILE 1024             /* floats per accumulator tile (4 KiB) */

typedef struct slot {
    int kind;
    int dt;
    size_t count;
    const void *send;
    void *recv;
    const size_t *scounts, *sdispls, *rcounts, *rdispls;   /* all-to-all-v */
    atomic_uint_fast64_t arrivals; /* written by its member only; others read it for a timeout message */
    atomic_uint_fast64_t pulled; /* bytes peers copied out of this chip's buffers */
} slot;

typedef struct rdv {
    int K;
    unsigned mask;
    atomic_uint_fast64_t total;   /* arrivals of all members */
    _Atomic uint32_t seq;         /* futex word: bumped when a phase completes and on abort */
    atomic_int sleepers;          /* members in futex_wait on seq */
    slot *slots;
} rdv;

typedef struct mbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int posted, taken;   /* written under mu; read without it while polling (spin_until) */
    int err;
    const void *buf;
    size_t count;
    int dt;
} mbox;

typedef struct tworld {
    rdv **by_mask[SPI_COMM_NMASKS]; /* [mask][leader global rank] */
    rdv **all;
    int nall;
    pthread_mutex_t mbmu;           /* guards mb rows and mailbox creation */
    mbox ***mb;                     /* [src][dst], rows and boxes created lazily */
    long spin_ns;                   /* SHARDPLAN_SPIN_US when every chip has a CPU of its own, else 0 */
} tworld;

/* ---- time and waiting ---------------------------------------------------------------- */

static int cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    if (pthread_condattr_init(&a) != 0) return -1;
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

static struct timespec deadline_after(double s)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    time_t whole = (time_t)s;
    long ns = (long)((s - (double)whole) * 1e9);
    t.tv_sec += whole;
    t.tv_nsec += ns;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static const char *kind_name(int k)
{
    return k == KIND_BARRIER ? "barrier" : k == KIND_ALLTOALLV ? "all-to-all-v" : sp_coll_kind_name((sp_coll_kind)k);
}

/* ---- placement ------------------------------------------------------------------------ */

void spi_threads_pin(int thread)
{
    if (sp_env_long(SP_ENV_PIN_CHIPS) == 0 || thread < 0) return;
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    int n = CPU_COUNT(&allowed);
    if (n <= 1) return;
    for (int c = 0, k = 0, want = thread % n; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &allowed) || k++ != want) continue;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0)
            sp_log(SP_LOG_INFO, "COMM", "chip thread %d: cannot bind to CPU %d", thread, c);
        return;
    }
}

/* ---- rendezvous ------------------------------------------------------------------------ */

static rdv *rdv_new(int K, unsigned mask)
{
    rdv *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->slots = calloc((size_t)K, sizeof *r->slots);
    if (!r->slots) {
        free(r);
        return NULL;
    }
    r->K = K;
    r->mask = mask;
    atomic_init(&r->total, 0);
    atomic_init(&r->seq, 0);
    atomic_init(&r->sleepers, 0);
    for (int i = 0; i < K; i++) {
        atomic_init(&r->slots[i].pulled, 0);
        atomic_init(&r->slots[i].arrivals, 0);
    }
    return r;
}

static void rdv_free(rdv *r)
{
    if (!r) return;
    free(r->slots);
    free(r);
}

static long futex_wait_until(_Atomic uint32_t *addr, uint32_t val, const struct timespec *abs_mono)
{
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline */
    return syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, val, abs_mono, NULL,
                   FUTEX_BITSET_MATCH_ANY);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, INT_MAX, NULL, NULL, 0);
}

/* Bumps r's futex word and wakes its sleepers (a phase completed, or an abort). */
static void rdv_wake(rdv *r)
{
    atomic_fetch_add(&r->seq, 1);
    if (atomic_load(&r->sleepers) > 0) futex_wake_all(&r->seq);
}

/* Polls done(arg) for at most spin_ns (SHARDPLAN_SPIN_US, tworld.spin_ns): 1 when it held. */
static int spin_until(long spin_ns, int (*done)(void *), void *arg)
{
    if (spin_ns <= 0) return 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned i = 0;; i++) {
        if (done(arg)) return 1;
        if ((i & 63) != 63) continue;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) >= spin_ns) return 0;
    }
}

typedef struct rdv_wait { rdv *r; uint64_t need; } rdv_wait;
static int rdv_done(void *a)
{
    const rdv_wait *x = a;
    return atomic_load(&x->r->total) >= x->need;
}

/* Arrives at the next phase of g's rendezvous (publishing pub first, if
 * given) and waits until every member has arrived there.  Phase p is
 * complete when total reaches K*p; the fields a member publishes are
 * ordered before its arrival (seq_cst), so a member that saw the phase
 * complete reads every peer's slot of that phase. */
static sp_status rdv_arrive(sp_comm *c, spi_comm_group *g, const slot *pub)
{
    sp_comm_world *w = c->world;
    rdv *r = g->impl;
    slot *me = &r->slots[g->rank];
    if (spi_comm_world_is_aborted(w)) return spi_comm_aborted_status(w);
    if (pub) {
        me->kind = pub->kind;
        me->dt = pub->dt;
        me->count = pub->count;
        me->send = pub->send;
        me->recv = pub->recv;
        me->scounts = pub->scounts;
        me->sdispls = pub->sdispls;
        me->rcounts = pub->rcounts;
        me->rdispls = pub->rdispls;
        atomic_store_explicit(&me->pulled, 0, memory_order_relaxed);
    }
    uint64_t phase = atomic_load_explicit(&me->arrivals, memory_order_relaxed) + 1;
    atomic_store_explicit(&me->arrivals, phase, memory_order_relaxed);
    uint64_t need = (uint64_t)r->K * phase;
    if (atomic_fetch_add(&r->total, 1) + 1 == need) {
        rdv_wake(r);
        return SP_OK;
    }
    /* SHARDPLAN_SPIN_US: a peer that arrives within it spares this CPU a sleep and a wake-up */
    rdv_wait rw = {r, need};
    if (spin_until(((tworld *)w->impl)->spin_ns, rdv_done, &rw)) return SP_OK;
    struct timespec dl = deadline_after(w->timeout_s);
    int timed_out = 0;
    atomic_fetch_add(&r->sleepers, 1);
    /* the completing arrival adds to total, then bumps seq, then reads
     * sleepers: a waiter that read seq before that bump sees the new total
     * or is woken (all seq_cst) */
    while (!timed_out && !spi_comm_world_is_aborted(w)) {
        uint32_t s = atomic_load(&r->seq);
        if (atomic_load(&r->total) >= need) break;
        if (futex_wait_until(&r->seq, s, &dl) != 0 && errno == ETIMEDOUT) timed_out = 1;
    }
    atomic_fetch_sub(&r->sleepers, 1);
    if (atomic_load(&r->total) >= need) return SP_OK;
    if (!timed_out) return spi_comm_aborted_status(w);
    char missing[160];
    size_t n = 0;
    missing[0] = '\0';
    for (int h = 0; h < r->K && n < sizeof missing - 16; h++)
        if (atomic_load_explicit(&r->slots[h].arrivals, memory_order_relaxed) < phase)
            n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? ", " : "", g->members[h]);
    char ax[8];
    return spi_comm_world_abort(w,
                                "%s over axes %s: rank %d waited %.3g s (SHARDPLAN_COMM_TIMEOUT_S) "
                                "for rank(s) %s of its %d-chip group",
                                kind_name(me->kind), sp_axes_str(g->mask, ax, (int)sizeof ax), c->rank,
                                w->timeout_s, missing, r->K);
}

/* Phase 1 of every collective: publish, meet, check that all members made
 * the same call.  On a mismatch every member sees it, meets once more and
 * fails with SP_EINVAL. */
static sp_status coll_enter_pub(sp_comm *c, spi_comm_group *g, const slot *pubp)
{
    slot pub = *pubp;
    int kind = pub.kind;
    size_t count = pub.count;
    sp_dtype dt = (sp_dtype)pub.dt;
    SP_CHECK(rdv_arrive(c, g, &pub));
    rdv *r = g->impl;
    for (int h = 0; h < r->K; h++) {
        const slot *s = &r->slots[h];
        if (s->kind != kind || s->count != count || s->dt != (int)dt) {
            char ax[8];
            sp_status st = spi_fail(SP_EINVAL,
                                    "collective mismatch over axes %s: rank %d called %s(count %zu, %s) "
                                    "but group member rank %d called %s(count %zu, %s)",
                                    sp_axes_str(g->mask, ax, (int)sizeof ax), c->rank, kind_name(kind),
                                    count, sp_dtype_name(dt), g->members[h], kind_name(s->kind), s->count,
                                    sp_dtype_name((sp_dtype)s->dt));
            SP_CHECK(rdv_arrive(c, g, NULL));
            return st;
        }
    }
    return SP_OK;
}

static sp_status coll_enter(sp_comm *c, spi_comm_group *g, int kind, const void *send, void *recv,
                            size_t count, sp_dtype dt)
{
    slot pub = {.kind = kind, .dt = (int)dt, .count = count, .send = send, .recv = recv};
    return coll_enter_pub(c, g, &pub);
}

/* Last phase: meet so peers are done reading, then read what was pulled. */
static sp_status coll_leave(sp_comm *c, spi_comm_group *g, spi_comm_xfer *x)
{
    SP_CHECK(rdv_arrive(c, g, NULL));
    rdv *r = g->impl;
    x->sent = atomic_load_explicit(&r->slots[g->rank].pulled, memory_order_relaxed);
    return SP_OK;
}

/* Copies bytes from peer h's buffer src into dst, accounting both ends. */
static void pull(rdv *r, int h, void *dst, const void *src, size_t bytes, spi_comm_xfer *x)
{
    if (!bytes) return;
    memcpy(dst, src, bytes);
    atomic_fetch_add_explicit(&r->slots[h].pulled, bytes, memory_order_relaxed);
    x->recv += bytes;
}

/* dst[i] = ((src[0][i] + src[1][i]) + ...) + src[K-1][i], tile by tile, so
 * dst may alias one of the sources elementwise (in place). */
static void reduce_f32(float *dst, const float *const *src, int K, size_t n)
{
    float acc[REDUCE_TILE];
    for (size_t off = 0; off < n; off += REDUCE_TILE) {
        size_t m = (n - off < REDUCE_TILE) ? n - off : REDUCE_TILE;
        memcpy(acc, src[0] + off, m * sizeof(float));
        for (int j = 1; j < K; j++) {
            const float *p = src[j] + off;
            for (size_t i = 0; i < m; i++) acc[i] += p[i];
        }
        memcpy(dst + off, acc, m * sizeof(float));
    }
}

/* Accounts the reads of a reduction over [off, off+n) of every peer's buffer. */
static void account_reduce(rdv *r, int g, size_t bytes, spi_comm_xfer *x)
{
    if (!bytes) return;
    for (int h = 0; h < r->K; h++)
        if (h != g) {
            atomic_fetch_add_explicit(&r->slots[h].pulled, bytes, memory_order_relaxed);
            x->recv += bytes;
        }
}

/* ---- collectives ------------------------------------------------------------------------ */

static sp_status th_allgather(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                              sp_dtype dt, spi_comm_xfer *x)
{
    SP_CHECK(coll_enter(c, g, SP_COLL_ALLGATHER, send, recv, count, dt));
    rdv *r = g->impl;
    int K = r->K, me = g->rank;
    size_t chunk = count * (size_t)sp_dtype_bytes(dt);
    char *out = recv;
    for (int k = 1; k < K; k++) {   /* start at the next peer, to spread the readers */
        int h = (me + k) % K;
        pull(r, h, out + (size_t)h * chunk, r->slots[h].send, chunk, x);
    }
    if (out + (size_t)me * chunk != (const char *)send && chunk) memcpy(out + (size_t)me * chunk, send, chunk);
    return coll_leave(c, g, x);
}

static sp_status th_reducescatter(sp_comm *c, spi_comm_group *g, const void *send, void *recv,
                                  size_t count, sp_dtype dt, spi_comm_xfer *x)
{
    SP_CHECK(coll_enter(c, g, SP_COLL_REDUCESCATTER, send, recv, count, dt));
    rdv *r = g->impl;
    int K = r->K, me = g->rank;
    const float *src[K];
    for (int h = 0; h < K; h++) src[h] = (const float *)r->slots[h].send + (size_t)me * count;
    reduce_f32(recv, src, K, count);
    account_reduce(r, me, count * sizeof(float), x);
    return coll_leave(c, g, x);
}

/* Chunk h of n elements cut into K: [off, off+len). */
static void chunk_of(size_t n, int K, int h, size_t *off, size_t *len)
{
    size_t q = n / (size_t)K, rem = n % (size_t)K, hh = (size_t)h;
    *off = hh * q + (hh < rem ? hh : rem);
    *len = q + (hh < rem ? 1 : 0);
}

static sp_status th_allreduce(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                              sp_dtype dt, spi_comm_xfer *x)
{
    SP_CHECK(coll_enter(c, g, SP_COLL_ALLREDUCE, send, recv, count, dt));
    rdv *r = g->impl;
    int K = r->K, me = g->rank;
    size_t off, len;
    /* 1. reduce-scatter: this chip sums its chunk of everyone's send into its recv. */
    chunk_of(count, K, me, &off, &len);
    const float *src[K];
    for (int h = 0; h < K; h++) src[h] = (const float *)r->slots[h].send + off;
    reduce_f32((float *)recv + off, src, K, len);
    account_reduce(r, me, len * sizeof(float), x);
    SP_CHECK(rdv_arrive(c, g, NULL));
    /* 2. all-gather: copy every other chunk from its owner's recv. */
    for (int k = 1; k < K; k++) {
        int h = (me + k) % K;
        chunk_of(count, K, h, &off, &len);
        pull(r, h, (float *)recv + off, (const float *)r->slots[h].recv + off, len * sizeof(float), x);
    }
    return coll_leave(c, g, x);
}

static sp_status th_alltoall(sp_comm *c, spi_comm_group *g, const void *send, void *recv, size_t count,
                             sp_dtype dt, spi_comm_xfer *x)
{
    SP_CHECK(coll_enter(c, g, SP_COLL_ALLTOALL, send, recv, count, dt));
    rdv *r = g->impl;
    int K = r->K, me = g->rank;
    size_t chunk = count * (size_t)sp_dtype_bytes(dt);
    char *out = recv;
    for (int k = 1; k < K; k++) {
        int h = (me + k) % K;
        pull(r, h, out + (size_t)h * chunk, (const char *)r->slots[h].send + (size_t)me * chunk, chunk, x);
    }
    if (chunk) memcpy(out + (size_t)me * chunk, (const char *)send + (size_t)me * chunk, chunk);
    return coll_leave(c, g, x);
}

/* Every member checks every pair, so all see the same verdict. */
static sp_status th_alltoallv(sp_comm *c, spi_comm_group *g, const void *send, const size_t *scounts,
                              const size_t *sdispls, void *recv, const size_t *rcounts, const size_t *rdispls,
                              sp_dtype dt, spi_comm_xfer *x)
{
    slot pub = {.kind = KIND_ALLTOALLV, .dt = (int)dt, .send = send, .recv = recv, .scounts = scounts,
                .sdispls = sdispls, .rcounts = rcounts, .rdispls = rdispls};
    SP_CHECK(coll_enter_pub(c, g, &pub));
    rdv *r = g->impl;
    int K = r->K, me = g->rank;
    for (int h = 0; h < K; h++)
        for (int j = 0; j < K; j++)
            if (r->slots[h].scounts[j] != r->slots[j].rcounts[h]) {
                sp_status st = spi_fail(SP_EINVAL,
                                        "alltoallv: group rank %d sends %zu elements to group rank %d, which "
                                        "expects %zu",
                                        h, r->slots[h].scounts[j], j, r->slots[j].rcounts[h]);
                SP_CHECK(rdv_arrive(c, g, NULL));
                return st;
            }
    size_t s = (size_t)sp_dtype_bytes(dt);
    char *out = recv;
    for (int k = 1; k < K; k++) {
        int h = (me + k) % K;
        const slot *p = &r->slots[h];
        pull(r, h, out + rdispls[h] * s, (const char *)p->send + p->sdispls[me] * s, rcounts[h] * s, x);
    }
    if (scounts[me]) memcpy(out + rdispls[me] * s, (const char *)send + sdispls[me] * s, scounts[me] * s);
    return coll_leave(c, g, x);
}

static sp_status th_barrier(sp_comm *c, spi_comm_group *g)
{
    SP_CHECK(coll_enter(c, g, KIND_BARRIER, NULL, NULL, 0, SP_DT_F32));
    return rdv_arrive(c, g, NULL);
}

/* ---- send / recv ------------------------------------------------------------------------ */

static sp_status mbox_get(sp_comm_world *w, int src, int dst, mbox **out)
{
    tworld *tw = w->impl;
    sp_status st = SP_OK;
    pthread_mutex_lock(&tw->mbmu);
    if (!tw->mb[src]) tw->mb[src] = calloc((size_t)w->nranks, sizeof(mbox *));
    if (!tw->mb[src]) {
        st = spi_fail(SP_ENOMEM, "out of memory for a mailbox");
    } else if (!tw->mb[src][dst]) {
        mbox *m = calloc(1, sizeof *m);
        if (!m || pthread_mutex_init(&m->mu, NULL) != 0) {
            free(m);
            st = spi_fail(SP_ENOMEM, "out of memory for a mailbox");
        } else if (cond_init_mono(&m->cv) != 0) {
            pthread_mutex_destroy(&m->mu);
            free(m);
            st = spi_fail(SP_ENOMEM, "cannot create a condition variable");
        } else {
            atomic_init(&m->posted, 0);
            atomic_init(&m->taken, 0);
            tw->mb[src][dst] = m;
        }
    }
    if (st == SP_OK) *out = tw->mb[src][dst];
    pthread_mutex_unlock(&tw->mbmu);
    return st;
}

static int mbox_taken(void *a) { return atomic_load(&((mbox *)a)->taken); }
static int mbox_ready(void *a) { return atomic_load(&((mbox *)a)->posted) && !atomic_load(&((mbox *)a)->taken); }

static sp_status th_send(sp_comm *c, int peer, const void *buf, size_t count, sp_dtype dt,
                         spi_comm_xfer *x)
{
    sp_comm_world *w = c->world;
    mbox *m;
    SP_CHECK(mbox_get(w, c->rank, peer, &m));
    pthread_mutex_lock(&m->mu);
    m->buf = buf;
    m->count = count;
    m->dt = (int)dt;
    m->err = 0;
    m->taken = 0;
    m->posted = 1;
    pthread_cond_broadcast(&m->cv);
    if (((tworld *)w->impl)->spin_ns > 0) {   /* poll for the receiver's copy before sleeping on it */
        pthread_mutex_unlock(&m->mu);
        spin_until(((tworld *)w->impl)->spin_ns, mbox_taken, m);
        pthread_mutex_lock(&m->mu);
    }
    struct timespec dl = deadline_after(w->timeout_s);
    while (!m->taken && !spi_comm_world_is_aborted(w)) {
        if (pthread_cond_timedwait(&m->cv, &m->mu, &dl) == ETIMEDOUT && !m->taken) {
            m->posted = 0;
            pthread_mutex_unlock(&m->mu);
            return spi_comm_world_abort(w, "send from rank %d to rank %d: no matching recv after %.3g s "
                                           "(SHARDPLAN_COMM_TIMEOUT_S)", c->rank, peer, w->timeout_s);
        }
    }
    int taken = m->taken, err = m->err;
    size_t peer_count = m->count;
    int peer_dt = m->dt;
    m->posted = 0;
    pthread_mutex_unlock(&m->mu);
    if (!taken) return spi_comm_aborted_status(w);
    if (err)
        return spi_fail(SP_EINVAL, "send from rank %d to rank %d of %zu %s met a recv of %zu %s", c->rank,
                        peer, count, sp_dtype_name(dt), peer_count, sp_dtype_name((sp_dtype)peer_dt));
    x->sent = count * (size_t)sp_dtype_bytes(dt);
    return SP_OK;
}

static sp_status th_recv(sp_comm *c, int peer, void *buf, size_t count, sp_dtype dt, spi_comm_xfer *x)
{
    sp_comm_world *w = c->world;
    mbox *m;
    SP_CHECK(mbox_get(w, peer, c->rank, &m));
    spin_until(((tworld *)w->impl)->spin_ns, mbox_ready, m);   /* poll for the post before sleeping on it */
    pthread_mutex_lock(&m->mu);
    struct timespec dl = deadline_after(w->timeout_s);
    while (!(m->posted && !m->taken) && !spi_comm_world_is_aborted(w)) {
        if (pthread_cond_timedwait(&m->cv, &m->mu, &dl) == ETIMEDOUT && !(m->posted && !m->taken)) {
            pthread_mutex_unlock(&m->mu);
            return spi_comm_world_abort(w, "recv at rank %d from rank %d: no matching send after %.3g s "
                                           "(SHARDPLAN_COMM_TIMEOUT_S)", c->rank, peer, w->timeout_s);
        }
    }
    if (!(m->posted && !m->taken)) {
        pthread_mutex_unlock(&m->mu);
        return spi_comm_aborted_status(w);
    }
    sp_status st = SP_OK;
    if (m->count != count || m->dt != (int)dt) {
        st = spi_fail(SP_EINVAL, "recv at rank %d from rank %d of %zu %s met a send of %zu %s", c->rank, peer,
                      count, sp_dtype_name(dt), m->count, sp_dtype_name((sp_dtype)m->dt));
        m->err = 1;
        m->count = count;   /* tell the sender what was posted here */
        m->dt = (int)dt;
    } else {
        size_t bytes = count * (size_t)sp_dtype_bytes(dt);
        if (bytes) memcpy(buf, m->buf, bytes);
        x->recv = bytes;
    }
    m->taken = 1;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    return st;
}

/* ---- world and groups -------------------------------------------------------------------- */

static void th_world_fini(sp_comm_world *w)
{
    tworld *tw = w->impl;
    if (!tw) return;
    for (int i = 0; i < tw->nall; i++) rdv_free(tw->all[i]);
    free(tw->all);
    for (unsigned m = 0; m < SPI_COMM_NMASKS; m++) free(tw->by_mask[m]);
    if (tw->mb) {
        for (int s = 0; s < w->nranks; s++) {
            if (!tw->mb[s]) continue;
            for (int d = 0; d < w->nranks; d++) {
                mbox *b = tw->mb[s][d];
                if (!b) continue;
                pthread_cond_destroy(&b->cv);
                pthread_mutex_destroy(&b->mu);
                free(b);
            }
            free(tw->mb[s]);
        }
        free(tw->mb);
    }
    pthread_mutex_destroy(&tw->mbmu);
    free(tw);
    w->impl = NULL;
}

static sp_status th_world_init(sp_comm_world *w)
{
    if (w->nranks > THREADS_MAX_CHIPS)
        return spi_fail(SP_EINVAL, "the threads backend runs at most %d chips (mesh has %d); use MPI",
                        THREADS_MAX_CHIPS, w->nranks);
    tworld *tw = calloc(1, sizeof *tw);
    if (!tw || pthread_mutex_init(&tw->mbmu, NULL) != 0) {
        free(tw);
        return spi_fail(SP_ENOMEM, "out of memory for the threads communicator");
    }
    w->impl = tw;
    w->first_local = 0;
    w->nlocal = w->nranks;
    {   /* polling takes the CPU a chip sharing it would need: only chips with a CPU each poll */
        cpu_set_t allowed;
        long us = sp_env_long(SP_ENV_SPIN_US);
        int cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
        if (us > 1000000) us = 1000000;   /* at most 1 s (the knob's documented ceiling) */
        tw->spin_ns = us > 0 && w->nranks <= cpus ? us * 1000 : 0;
    }
    size_t cap = 0;
    for (unsigned m = 1; m < SPI_COMM_NMASKS; m++)
        if (!(m & ~w->live_axes)) cap += (size_t)(w->nranks / sp_mesh_group_size(&w->mesh, m));
    tw->all = calloc(cap ? cap : 1, sizeof *tw->all);
    tw->mb = calloc((size_t)w->nranks, sizeof *tw->mb);
    if (!tw->all || !tw->mb) goto oom;
    for (unsigned m = 1; m < SPI_COMM_NMASKS; m++) {
        if (m & ~w->live_axes) continue;
        int K = sp_mesh_group_size(&w->mesh, m);
        tw->by_mask[m] = calloc((size_t)w->nranks, sizeof(rdv *));
        if (!tw->by_mask[m]) goto oom;
        for (int r = 0; r < w->nranks; r++) {
            if (sp_mesh_group_rank(&w->mesh, r, m) != 0) continue;   /* r leads its group */
            rdv *x = rdv_new(K, m);
            if (!x) goto oom;
            tw->all[tw->nall++] = x;
            tw->by_mask[m][r] = x;
        }
    }
    return SP_OK;
oom:
    th_world_fini(w);
    return spi_fail(SP_ENOMEM, "out of memory for the threads communicator (%d chips)", w->nranks);
}

static void th_wake(sp_comm_world *w)
{
    tworld *tw = w->impl;
    for (int i = 0; i < tw->nall; i++) rdv_wake(tw->all[i]);
    pthread_mutex_lock(&tw->mbmu);
    for (int s = 0; s < w->nranks; s++) {
        if (!tw->mb[s]) continue;
        for (int d = 0; d < w->nranks; d++) {
            mbox *b = tw->mb[s][d];
            if (!b) continue;
            pthread_mutex_lock(&b->mu);
            pthread_cond_broadcast(&b->cv);
            pthread_mutex_unlock(&b->mu);
        }
    }
    pthread_mutex_unlock(&tw->mbmu);
}

static sp_status th_group_init(sp_comm *c, spi_comm_group *g)
{
    tworld *tw = c->world->impl;
    rdv *r = tw->by_mask[g->mask] ? tw->by_mask[g->mask][g->members[0]] : NULL;
    if (!r || r->K != g->size)
        return spi_fail(SP_EINTERNAL, "threads communicator: no rendezvous for mask 0x%x leader %d", g->mask,
                        g->members[0]);
    g->impl = r;
    return SP_OK;
}

const spi_comm_backend spi_comm_threads_backend = {
    .name = "threads",
    .world_init = th_world_init,
    .world_fini = th_world_fini,
    .comm_init = NULL,
    .comm_fini = NULL,
    .group_init = th_group_init,
    .group_fini = NULL,
    .wake = th_wake,
    .allgather = th_allgather,
    .reducescatter = th_reducescatter,
    .allreduce = th_allreduce,
    .alltoall = th_alltoall,
    .alltoallv = th_alltoallv,
    .send = th_send,
    .recv = th_recv,
    .barrier = th_barrier,
};
