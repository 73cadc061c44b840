/* check_comm.c: the communicator, threads backend.
 *
 * Exact by construction (nccl-tests "verifiable"): element i of chip r's
 * buffer is a known small integer (floats) or byte, so every sum is exact
 * and every received chunk can be checked against the chip it came from.
 * Each chip is a thread; a thread never calls ck_assert (it records the
 * first failure, the test's main thread asserts). */
#include "config.h"
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "exec/spi_comm.h"

#define MAXR 64

/* ---- harness ------------------------------------------------------------------------- */

typedef struct job job;
typedef void (*chip_fn)(job *j, sp_comm *c);
struct job {
    sp_mesh mesh;
    sp_comm_world *w;
    chip_fn fn;
    long iarg;
    pthread_mutex_t mu;
    int nfail;
    char first[600];
};
typedef struct chip_arg { job *j; int rank; } chip_arg;

static void failf(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(job *j, const char *fmt, ...)
{
    pthread_mutex_lock(&j->mu);
    if (j->nfail++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->first, sizeof j->first, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&j->mu);
}

#define CHIP_EXPECT(j, cond, ...)                                                            \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            failf((j), __VA_ARGS__);                                                         \
            return;                                                                          \
        }                                                                                    \
    } while (0)
#define CHIP_OK(j, c, call)                                                                  \
    do {                                                                                     \
        sp_status st_ = (call);                                                              \
        CHIP_EXPECT((j), st_ == SP_OK, "rank %d: %s -> %s: %s (line %d)", sp_comm_rank(c), #call, \
                    sp_status_str(st_), sp_last_error(), __LINE__);                          \
    } while (0)

static void *chip_main(void *p)
{
    chip_arg *a = p;
    sp_comm *c = NULL;
    sp_status st = sp_comm_open(a->j->w, a->rank, &c);
    if (st != SP_OK) {
        failf(a->j, "open rank %d: %s", a->rank, sp_last_error());
        sp_comm_abort(a->j->w, "open failed");
        return NULL;
    }
    int before = a->j->nfail;
    a->j->fn(a->j, c);
    if (a->j->nfail != before) sp_comm_abort(a->j->w, "a chip failed its checks");
    sp_comm_close(c);
    return NULL;
}

/* Runs fn on every chip of mesh (world created here unless j->w is set). */
static void run_chips(job *j, chip_fn fn)
{
    int own = (j->w == NULL);
    if (own) ck_assert_int_eq(sp_comm_world_create(SP_COMM_BACKEND_THREADS, &j->mesh, &j->w), SP_OK);
    pthread_mutex_init(&j->mu, NULL);
    j->fn = fn;
    int first, n;
    ck_assert_int_eq(sp_comm_world_local_ranks(j->w, &first, &n), SP_OK);
    ck_assert_int_eq(first, 0);
    ck_assert_int_eq(n, sp_mesh_size(&j->mesh));
    ck_assert_int_le(n, MAXR);
    pthread_t t[MAXR];
    chip_arg a[MAXR];
    for (int r = 0; r < n; r++) {
        a[r] = (chip_arg){j, r};
        ck_assert_int_eq(pthread_create(&t[r], NULL, chip_main, &a[r]), 0);
    }
    for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
    if (own) {
        sp_comm_world_free(j->w);
        j->w = NULL;
    }
    pthread_mutex_destroy(&j->mu);
    ck_assert_msg(j->nfail == 0, "%d failures; first: %s", j->nfail, j->first);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- verifiable data ---------------------------------------------------------------- */

static float fval(int rank, size_t i, unsigned salt)
{
    return (float)((int)(((unsigned)rank * 131u + (unsigned)(i % 100003u) * 17u + salt * 7u) % 251u) - 125);
}
static unsigned char bval(int rank, size_t b, unsigned salt)
{
    return (unsigned char)((unsigned)rank * 31u + (unsigned)b * 7u + salt * 13u + (unsigned)(b >> 8));
}
/* all-to-all-v: the elements rank `from` sends to rank `to` (0 .. n) */
static size_t vcnt(int from, int to, size_t n)
{
    return ((size_t)from * 3 + (size_t)to * 5 + 1) % (n + 1);
}
/* The byte alltoall chunk that `from` sends to group rank `to`. */
static unsigned char a2a_val(int from, int to, size_t b, unsigned salt)
{
    return bval(from * 17 + to, b, salt);
}

static const sp_mesh meshes[] = {
    {{1, 1, 1, 1, 1}},   /* 1 chip */
    {{1, 1, 2, 1, 1}},   /* 2 */
    {{1, 1, 4, 1, 1}},   /* 4 */
    {{1, 1, 2, 2, 2}},   /* 8 */
    {{1, 1, 1, 2, 4}},   /* 8 */
    {{2, 1, 2, 1, 2}},   /* stage 2 × x 2 × z 2 */
    {{1, 2, 1, 3, 1}},   /* replica 2 × y 3: non-power-of-two */
};
#define NMESH ((int)(sizeof meshes / sizeof meshes[0]))
static const size_t counts[] = {0, 1, 7, 1000, 65537};
#define NCOUNT ((int)(sizeof counts / sizeof counts[0]))

/* Checks that the last call moved exactly sent/recv bytes of kind k. */
static int expect_bytes(job *j, sp_comm *c, sp_coll_kind k, uint64_t bytes, const char *what)
{
    sp_comm_counters ct;
    sp_comm_stats(c, &ct);
    for (int q = 0; q < SP_COLL_COUNT; q++) {
        uint64_t es = (q == (int)k) ? bytes : 0, calls = (q == (int)k) ? 1 : 0;
        if (ct.bytes_sent[q] != es || ct.bytes_recv[q] != es || ct.calls[q] != calls) {
            failf(j, "rank %d %s: %s sent %llu recv %llu calls %llu, expected %llu/%llu/%llu", sp_comm_rank(c),
                  what, sp_coll_kind_name((sp_coll_kind)q), (unsigned long long)ct.bytes_sent[q],
                  (unsigned long long)ct.bytes_recv[q], (unsigned long long)ct.calls[q],
                  (unsigned long long)es, (unsigned long long)es, (unsigned long long)calls);
            return 0;
        }
    }
    return 1;
}

/* Every collective over every mask, counts, dtypes, in place and not. */
static void grid_chip(job *j, sp_comm *c)
{
    const sp_mesh *m = &j->mesh;
    int me = sp_comm_rank(c);
    size_t maxc = counts[NCOUNT - 1];
    size_t cap = maxc * 4 * (size_t)sp_mesh_size(m);
    unsigned char *sb = malloc(cap), *rb = malloc(cap);
    float *ref = malloc(maxc * sizeof(float));
    int members[MAXR];
    unsigned salt = 0;
    CHIP_EXPECT(j, sb && rb && ref, "oom");
    for (unsigned axes = 0; axes < SPI_COMM_NMASKS; axes++) {
        int K = sp_comm_group_size(c, axes), g = sp_comm_group_rank(c, axes);
        CHIP_EXPECT(j, K == sp_mesh_group_size(m, axes) && g == sp_mesh_group_rank(m, me, axes),
                    "group size/rank");
        sp_mesh_group_members(m, me, axes, members);
        for (int ci = 0; ci < NCOUNT; ci++) {
            size_t n = counts[ci];
            char what[96];
            /* all-gather, bytes of three widths */
            for (int dti = 0; dti < 3; dti++) {
                sp_dtype dt = (sp_dtype[]){SP_DT_F32, SP_DT_BF16, SP_DT_INT8}[dti];
                size_t s = (size_t)sp_dtype_bytes(dt), chunk = n * s;
                for (int inplace = 0; inplace < 2; inplace++) {
                    salt++;
                    snprintf(what, sizeof what, "allgather axes %u n %zu %s inplace %d", axes, n, sp_dtype_name(dt), inplace);
                    memset(rb, 0xEE, (size_t)K * chunk);
                    unsigned char *src = inplace ? rb + (size_t)g * chunk : sb;
                    for (size_t b = 0; b < chunk; b++) src[b] = bval(me, b, salt);
                    sp_comm_stats_reset(c);
                    CHIP_OK(j, c, sp_comm_allgather(c, axes, src, rb, n, dt));
                    for (int h = 0; h < K; h++)
                        for (size_t b = 0; b < chunk; b++)
                            CHIP_EXPECT(j, rb[(size_t)h * chunk + b] == bval(members[h], b, salt),
                                        "rank %d %s: chunk %d byte %zu wrong", me, what, h, b);
                    if (!expect_bytes(j, c, SP_COLL_ALLGATHER, (uint64_t)(K - 1) * chunk, what)) return;
                }
            }
            /* reduce-scatter: chunk q of rank r's send = fval(r, q*n + i) */
            for (int inplace = 0; inplace < 2; inplace++) {
                salt++;
                snprintf(what, sizeof what, "reducescatter axes %u n %zu inplace %d", axes, n, inplace);
                float *sf = (float *)sb;
                for (size_t i = 0; i < (size_t)K * n; i++) sf[i] = fval(me, i, salt);
                float *out = inplace ? sf + (size_t)g * n : (float *)rb;
                sp_comm_stats_reset(c);
                CHIP_OK(j, c, sp_comm_reducescatter(c, axes, sf, out, n, SP_DT_F32));
                for (size_t i = 0; i < n; i++) {
                    float e = 0;
                    for (int h = 0; h < K; h++) e += fval(members[h], (size_t)g * n + i, salt);
                    CHIP_EXPECT(j, out[i] == e, "rank %d %s: [%zu] = %g, expected %g", me, what, i, out[i], e);
                }
                if (!expect_bytes(j, c, SP_COLL_REDUCESCATTER, (uint64_t)(K - 1) * n * 4, what)) return;
            }
            /* all-reduce */
            for (int inplace = 0; inplace < 2; inplace++) {
                salt++;
                snprintf(what, sizeof what, "allreduce axes %u n %zu inplace %d", axes, n, inplace);
                float *sf = (float *)sb, *out = inplace ? sf : (float *)rb;
                for (size_t i = 0; i < n; i++) sf[i] = fval(me, i, salt);
                sp_comm_stats_reset(c);
                CHIP_OK(j, c, sp_comm_allreduce(c, axes, sf, out, n, SP_DT_F32));
                for (size_t i = 0; i < n; i++) {
                    float e = 0;
                    for (int h = 0; h < K; h++) e += fval(members[h], i, salt);
                    CHIP_EXPECT(j, out[i] == e, "rank %d %s: [%zu] = %g, expected %g", me, what, i, out[i], e);
                }
                size_t cg = n / (size_t)K + ((size_t)g < n % (size_t)K ? 1 : 0);
                uint64_t eb = ((uint64_t)(K - 1) * cg + (n - cg)) * 4;   /* 0 when K == 1 */
                if (!expect_bytes(j, c, SP_COLL_ALLREDUCE, eb, what)) return;
            }
            /* all-to-all */
            for (int dti = 0; dti < 3; dti++) {
                sp_dtype dt = (sp_dtype[]){SP_DT_F32, SP_DT_BF16, SP_DT_INT8}[dti];
                size_t s = (size_t)sp_dtype_bytes(dt), chunk = n * s;
                salt++;
                snprintf(what, sizeof what, "alltoall axes %u n %zu %s", axes, n, sp_dtype_name(dt));
                for (int h = 0; h < K; h++)
                    for (size_t b = 0; b < chunk; b++) sb[(size_t)h * chunk + b] = a2a_val(me, h, b, salt);
                memset(rb, 0xEE, (size_t)K * chunk);
                sp_comm_stats_reset(c);
                CHIP_OK(j, c, sp_comm_alltoall(c, axes, sb, rb, n, dt));
                for (int h = 0; h < K; h++)
                    for (size_t b = 0; b < chunk; b++)
                        CHIP_EXPECT(j, rb[(size_t)h * chunk + b] == a2a_val(members[h], g, b, salt),
                                    "rank %d %s: chunk %d byte %zu wrong", me, what, h, b);
                if (!expect_bytes(j, c, SP_COLL_ALLTOALL, (uint64_t)(K - 1) * chunk, what)) return;
            }
            /* all-to-all-v (bf16): vcnt(me, h) elements to each member h, blocks one element
             * apart, received in reverse member order; sent and received bytes differ */
            {
                size_t s = 2, scnt[MAXR], sdsp[MAXR], rcnt[MAXR], rdsp[MAXR], so = 0, ro = 0;
                uint64_t bs = 0, br = 0;
                salt++;
                snprintf(what, sizeof what, "alltoallv axes %u n %zu", axes, n);
                for (int h = 0; h < K; h++) {
                    scnt[h] = vcnt(me, members[h], n);
                    sdsp[h] = so;
                    so += scnt[h] + 1;
                    for (size_t b = 0; b < scnt[h] * s; b++) sb[sdsp[h] * s + b] = a2a_val(me, members[h], b, salt);
                    if (h != g) bs += scnt[h] * s;
                }
                for (int h = K - 1; h >= 0; h--) {
                    rcnt[h] = vcnt(members[h], me, n);
                    rdsp[h] = ro;
                    ro += rcnt[h] + 1;
                    if (h != g) br += rcnt[h] * s;
                }
                memset(rb, 0xEE, ro * s);
                sp_comm_stats_reset(c);
                CHIP_OK(j, c, sp_comm_alltoallv(c, axes, sb, scnt, sdsp, rb, rcnt, rdsp, SP_DT_BF16));
                for (int h = 0; h < K; h++)
                    for (size_t b = 0; b < rcnt[h] * s; b++)
                        CHIP_EXPECT(j, rb[rdsp[h] * s + b] == a2a_val(members[h], me, b, salt),
                                    "rank %d %s: block %d byte %zu wrong", me, what, h, b);
                sp_comm_counters ct;
                sp_comm_stats(c, &ct);
                CHIP_EXPECT(j, ct.bytes_sent[SP_COLL_ALLTOALL] == bs && ct.bytes_recv[SP_COLL_ALLTOALL] == br &&
                                   ct.calls[SP_COLL_ALLTOALL] == 1,
                            "rank %d %s: sent %llu recv %llu, expected %llu / %llu", me, what,
                            (unsigned long long)ct.bytes_sent[SP_COLL_ALLTOALL],
                            (unsigned long long)ct.bytes_recv[SP_COLL_ALLTOALL], (unsigned long long)bs,
                            (unsigned long long)br);
            }
        }
        CHIP_OK(j, c, sp_comm_barrier(c, axes));
    }
    free(sb);
    free(rb);
    free(ref);
}

START_TEST(test_grid)
{
    job j = {.mesh = meshes[_i]};
    run_chips(&j, grid_chip);
}
END_TEST

/* ---- determinism: non-integer data, bit-equal to the rank-order sum -------------------- */

static float rval(int rank, size_t i, unsigned salt)
{
    uint64_t x = ((uint64_t)rank * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i * 0xBF58476D1CE4E5B9ull) ^ salt;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    double u = (double)(x >> 11) / 9007199254740992.0;   /* [0,1) */
    int e = (int)(x & 15) - 8;
    return (float)((u - 0.5) * ldexp(1.0, e));
}

static void determinism_chip(job *j, sp_comm *c)
{
    const size_t n = 10007;   /* not a multiple of any group size */
    unsigned masks[] = {SP_AXES_XYZ, SP_AXES_Y | SP_AXES_Z, SP_AXES_X};
    int me = sp_comm_rank(c), members[MAXR];
    float *x = malloc(n * 8 * sizeof(float)), *y = malloc(n * sizeof(float)), *y2 = malloc(n * sizeof(float));
    CHIP_EXPECT(j, x && y && y2, "oom");
    for (int mi = 0; mi < 3; mi++) {
        unsigned axes = masks[mi];
        int K = sp_comm_group_size(c, axes), g = sp_comm_group_rank(c, axes);
        sp_mesh_group_members(&j->mesh, me, axes, members);
        for (size_t i = 0; i < n; i++) x[i] = rval(me, i, (unsigned)mi);
        CHIP_OK(j, c, sp_comm_allreduce(c, axes, x, y, n, SP_DT_F32));
        CHIP_OK(j, c, sp_comm_allreduce(c, axes, x, y2, n, SP_DT_F32));
        CHIP_EXPECT(j, memcmp(y, y2, n * sizeof(float)) == 0, "allreduce not reproducible");
        for (size_t i = 0; i < n; i++) {
            float ref = rval(members[0], i, (unsigned)mi);
            for (int h = 1; h < K; h++) ref += rval(members[h], i, (unsigned)mi);
            CHIP_EXPECT(j, memcmp(&ref, &y[i], sizeof ref) == 0,
                        "rank %d allreduce over %u [%zu]: %.9g != rank-order sum %.9g", me, axes, i, y[i], ref);
        }
        /* in place gives the same bits */
        CHIP_OK(j, c, sp_comm_allreduce(c, axes, x, x, n, SP_DT_F32));
        CHIP_EXPECT(j, memcmp(x, y, n * sizeof(float)) == 0, "in-place allreduce differs from out-of-place");
        /* reduce-scatter */
        for (size_t i = 0; i < (size_t)K * n; i++) x[i] = rval(me, i, 100u + (unsigned)mi);
        CHIP_OK(j, c, sp_comm_reducescatter(c, axes, x, y, n, SP_DT_F32));
        for (size_t i = 0; i < n; i++) {
            size_t k = (size_t)g * n + i;
            float ref = rval(members[0], k, 100u + (unsigned)mi);
            for (int h = 1; h < K; h++) ref += rval(members[h], k, 100u + (unsigned)mi);
            CHIP_EXPECT(j, memcmp(&ref, &y[i], sizeof ref) == 0, "rank %d reducescatter [%zu] not bit-equal", me, i);
        }
    }
    free(x);
    free(y);
    free(y2);
}

START_TEST(test_determinism)
{
    job j = {.mesh = {{1, 1, 2, 2, 2}}};
    run_chips(&j, determinism_chip);
}
END_TEST

/* ---- disjoint groups of different masks in flight together ---------------------------- */

static void concurrent_chip(job *j, sp_comm *c)
{
    int me = sp_comm_rank(c), coords[SP_AXIS_COUNT], members[MAXR];
    sp_mesh_coords(&j->mesh, me, coords);
    float a[33], b[4 * 33];
    for (unsigned it = 0; it < 300; it++) {
        if (coords[SP_AXIS_STAGE] == 0) {   /* stage 0: x-groups all-reduce */
            for (int i = 0; i < 33; i++) a[i] = fval(me, (size_t)i, it);
            CHIP_OK(j, c, sp_comm_allreduce(c, SP_AXES_X, a, a, 33, SP_DT_F32));
            sp_mesh_group_members(&j->mesh, me, SP_AXES_X, members);
            for (int i = 0; i < 33; i++)
                CHIP_EXPECT(j, a[i] == fval(members[0], (size_t)i, it) + fval(members[1], (size_t)i, it),
                            "x allreduce wrong");
        } else {                              /* stage 1: xz-groups all-gather */
            for (int i = 0; i < 33; i++) a[i] = fval(me, (size_t)i, it);
            CHIP_OK(j, c, sp_comm_allgather(c, SP_AXES_X | SP_AXES_Z, a, b, 33, SP_DT_F32));
            sp_mesh_group_members(&j->mesh, me, SP_AXES_X | SP_AXES_Z, members);
            for (int h = 0; h < 4; h++)
                for (int i = 0; i < 33; i++)
                    CHIP_EXPECT(j, b[h * 33 + i] == fval(members[h], (size_t)i, it), "xz allgather wrong");
        }
        if (it % 50 == 49) CHIP_OK(j, c, sp_comm_barrier(c, SP_AXES_ALL));
    }
}

START_TEST(test_concurrent_groups)
{
    job j = {.mesh = {{2, 1, 2, 1, 2}}};
    run_chips(&j, concurrent_chip);
}
END_TEST

/* ---- send / recv between pipeline stages -------------------------------------------- */

static void pipeline_chip(job *j, sp_comm *c)
{
    const int P = j->mesh.dims[SP_AXIS_STAGE], rounds = 20;
    const size_t n = 4099;
    int me = sp_comm_rank(c), co[SP_AXIS_COUNT];
    sp_mesh_coords(&j->mesh, me, co);
    int s = co[SP_AXIS_STAGE];
    co[SP_AXIS_STAGE] = s - 1;
    int prev = s > 0 ? sp_mesh_rank(&j->mesh, co) : -1;
    co[SP_AXIS_STAGE] = s + 1;
    int next = s < P - 1 ? sp_mesh_rank(&j->mesh, co) : -1;
    float *buf = malloc(n * sizeof(float));
    CHIP_EXPECT(j, buf, "oom");
    sp_comm_stats_reset(c);
    for (int r = 0; r < rounds; r++) {
        if (prev >= 0) {
            CHIP_OK(j, c, sp_comm_recv(c, prev, buf, n, SP_DT_F32));
            for (size_t i = 0; i < n; i++)
                CHIP_EXPECT(j, buf[i] == fval(co[SP_AXIS_X], i, (unsigned)r) + (float)s, "stage %d got wrong data", s);
        } else {
            for (size_t i = 0; i < n; i++) buf[i] = fval(co[SP_AXIS_X], i, (unsigned)r);
        }
        for (size_t i = 0; i < n; i++) buf[i] += 1.0f;
        if (next >= 0) CHIP_OK(j, c, sp_comm_send(c, next, buf, n, SP_DT_F32));
    }
    sp_comm_counters ct;
    sp_comm_stats(c, &ct);
    uint64_t per = (uint64_t)rounds * n * 4;
    CHIP_EXPECT(j, ct.bytes_sent[SP_COLL_SENDRECV] == (next >= 0 ? per : 0), "sent bytes %llu",
                (unsigned long long)ct.bytes_sent[SP_COLL_SENDRECV]);
    CHIP_EXPECT(j, ct.bytes_recv[SP_COLL_SENDRECV] == (prev >= 0 ? per : 0), "recv bytes");
    CHIP_EXPECT(j, ct.calls[SP_COLL_SENDRECV] == (uint64_t)rounds * ((prev >= 0) + (next >= 0)), "calls");
    /* size mismatch fails on both ends */
    if (s == 0) {
        sp_status st = sp_comm_send(c, next, buf, 5, SP_DT_F32);
        CHIP_EXPECT(j, st == SP_EINVAL, "mismatched send: %s", sp_status_str(st));
    } else if (s == 1) {
        sp_status st = sp_comm_recv(c, prev, buf, 6, SP_DT_F32);
        CHIP_EXPECT(j, st == SP_EINVAL, "mismatched recv: %s", sp_status_str(st));
    }
    free(buf);
}

START_TEST(test_sendrecv_pipeline)
{
    job j = {.mesh = {{4, 1, 2, 1, 1}}};
    run_chips(&j, pipeline_chip);
}
END_TEST

/* ---- mismatched collectives fail on every member ------------------------------------ */

static void mismatch_chip(job *j, sp_comm *c)
{
    float a[8] = {0}, b[16];
    int me = sp_comm_rank(c);
    sp_status st = sp_comm_allreduce(c, SP_AXES_X, a, b, me == 0 ? 5 : 6, SP_DT_F32);
    CHIP_EXPECT(j, st == SP_EINVAL && strstr(sp_last_error(), "mismatch"), "count mismatch: %s %s",
                sp_status_str(st), sp_last_error());
    st = me == 0 ? sp_comm_allreduce(c, SP_AXES_X, a, b, 4, SP_DT_F32)
                 : sp_comm_allgather(c, SP_AXES_X, a, b, 4, SP_DT_F32);
    CHIP_EXPECT(j, st == SP_EINVAL, "kind mismatch: %s", sp_status_str(st));
    /* and the group still works afterwards */
    CHIP_OK(j, c, sp_comm_allreduce(c, SP_AXES_X, a, b, 8, SP_DT_F32));
}

START_TEST(test_mismatch)
{
    job j = {.mesh = {{1, 1, 2, 1, 1}}};
    run_chips(&j, mismatch_chip);
}
END_TEST

/* ---- argument checks and absent backends ------------------------------------------------ */

static void args_chip(job *j, sp_comm *c)
{
    float a[8] = {0}, b[16] = {0};
    CHIP_EXPECT(j, sp_comm_allreduce(c, 1u << 7, a, b, 1, SP_DT_F32) == SP_EINVAL, "bad mask");
    CHIP_EXPECT(j, sp_comm_allreduce(c, SP_AXES_X, a, b, 1, SP_DT_BF16) == SP_ENOTSUP, "bf16 reduce");
    CHIP_EXPECT(j, sp_comm_reducescatter(c, SP_AXES_X, a, b, 1, SP_DT_INT8) == SP_ENOTSUP, "int8 reduce");
    CHIP_EXPECT(j, sp_comm_allgather(c, SP_AXES_X, a, b, 1, (sp_dtype)99) == SP_EINVAL, "bad dtype");
    CHIP_EXPECT(j, sp_comm_allgather(c, SP_AXES_X, NULL, b, 1, SP_DT_F32) == SP_EINVAL, "NULL send");
    CHIP_EXPECT(j, sp_comm_alltoall(c, SP_AXES_X, b, b, 2, SP_DT_F32) == SP_EINVAL, "alltoall in place");
    CHIP_EXPECT(j, sp_comm_allreduce(c, SP_AXES_X, b, b + 1, 4, SP_DT_F32) == SP_EINVAL, "overlap");
    size_t one[2] = {1, 1}, two[2] = {1, 2}, sd[2] = {0, 1}, rd[2] = {0, 4};
    /* every chip sends one element to the other, which expects two: both see the mismatch */
    CHIP_EXPECT(j, sp_comm_alltoallv(c, SP_AXES_X, a, one, sd, b, two, rd, SP_DT_F32) == SP_EINVAL, "alltoallv counts");
    CHIP_EXPECT(j, sp_comm_alltoallv(c, SP_AXES_X, b, one, sd, b, one, rd, SP_DT_F32) == SP_EINVAL, "alltoallv in place");
    CHIP_EXPECT(j, sp_comm_send(c, sp_comm_rank(c), a, 1, SP_DT_F32) == SP_EINVAL, "send to self");
    CHIP_EXPECT(j, sp_comm_recv(c, 99, a, 1, SP_DT_F32) == SP_EINVAL, "recv from nowhere");
    CHIP_EXPECT(j, sp_comm_allgather(c, SP_AXES_X, NULL, NULL, 0, SP_DT_F32) == SP_OK, "count 0 NULL");
    CHIP_EXPECT(j, sp_comm_group_size(c, SP_AXES_X | SP_AXES_STAGE) == 2, "trivial axes ignored");
}

START_TEST(test_args)
{
    sp_mesh m = {{1, 1, 2, 1, 1}};
    sp_comm_world *w = NULL;
    sp_status st = sp_comm_world_create(SP_COMM_BACKEND_MPI, &m, &w);
#if defined(HAVE_MPI) && SPI_COMM_MPI_LINKED
    /* a singleton process is one MPI rank: a 2-chip mesh needs mpirun -np 2 */
    ck_assert_int_eq(st, SP_EINVAL);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "mpirun -np"));
#else
    ck_assert_int_eq(st, SP_ENOTSUP);
    ck_assert_ptr_null(w);
#ifdef HAVE_MPI
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "comm_mpi.c"));
#else
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "--with-mpi"));
#endif
#endif
#if defined(HAVE_CUDA) && SPI_COMM_NCCL_LINKED
    /* no GPU: SP_ECUDA saying so; a GPU: a 2-chip mesh in a singleton needs mpirun */
    st = sp_comm_world_create(SP_COMM_BACKEND_NCCL, &m, &w);
    ck_assert_ptr_null(w);
    ck_assert_msg(st == SP_ECUDA ? strstr(sp_last_error(), "GPU") != NULL
                                 : st == SP_EINVAL && strstr(sp_last_error(), "mpirun -np") != NULL,
                  "NCCL world: %d %s", (int)st, sp_last_error());
#else
    ck_assert_int_eq(sp_comm_world_create(SP_COMM_BACKEND_NCCL, &m, &w), SP_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "NCCL"));
#endif
    ck_assert_int_eq(sp_comm_world_create((sp_comm_backend)7, &m, &w), SP_EINVAL);
    sp_mesh bad = {{1, 1, 0, 1, 1}};
    ck_assert_int_eq(sp_comm_world_create(SP_COMM_BACKEND_THREADS, &bad, &w), SP_EINVAL);
    ck_assert_int_eq(sp_comm_world_create(SP_COMM_BACKEND_THREADS, &m, &w), SP_OK);
    sp_comm *c0, *c0b;
    ck_assert_int_eq(sp_comm_open(w, 0, &c0), SP_OK);
    ck_assert_int_eq(sp_comm_open(w, 0, &c0b), SP_EINVAL);   /* already open */
    ck_assert_int_eq(sp_comm_open(w, 2, &c0b), SP_EINVAL);   /* not a rank */
    sp_comm_close(c0);
    ck_assert_str_eq(sp_comm_backend_name(SP_COMM_BACKEND_NCCL), "nccl");
    job j = {.mesh = m, .w = w};
    run_chips(&j, args_chip);
    sp_comm_world_free(w);
}
END_TEST

/* ---- timeout and abort ---------------------------------------------------------------- */

typedef struct timing { double t; sp_status st; char msg[400]; } timing;
static timing tres[MAXR];

static void timeout_chip(job *j, sp_comm *c)
{
    int me = sp_comm_rank(c);
    float a[4] = {1, 2, 3, 4};
    if (me == 1) return;   /* never arrives */
    double t0 = now_s();
    tres[me].st = sp_comm_allreduce(c, SP_AXES_X, a, a, 4, SP_DT_F32);
    tres[me].t = now_s() - t0;
    snprintf(tres[me].msg, sizeof tres[me].msg, "%s", sp_last_error());
    /* the world is now aborted: later calls fail at once */
    t0 = now_s();
    sp_status st = sp_comm_barrier(c, SP_AXES_X);
    CHIP_EXPECT(j, st == SP_ECOMM && now_s() - t0 < 0.5, "call after timeout: %s", sp_status_str(st));
}

START_TEST(test_timeout_env)
{
    /* Check forks per test: this process reads the environment first. */
    setenv("SHARDPLAN_COMM_TIMEOUT_S", "1", 1);
    job j = {.mesh = {{1, 1, 2, 1, 1}}};
    ck_assert_int_eq(sp_comm_world_create(SP_COMM_BACKEND_THREADS, &j.mesh, &j.w), SP_OK);
    if (j.w->timeout_s != 1.0) {   /* env already cached (CK_FORK=no): force it */
        fprintf(stderr, "test_timeout_env: environment read earlier; setting 1 s directly\n");
        spi_comm_world_set_timeout(j.w, 1.0);
    }
    memset(tres, 0, sizeof tres);
    run_chips(&j, timeout_chip);
    ck_assert_int_eq(tres[0].st, SP_ECOMM);
    ck_assert_msg(tres[0].t >= 0.9 && tres[0].t < 5.0, "timed out after %.3f s", tres[0].t);
    ck_assert_msg(strstr(tres[0].msg, "rank(s) 1") != NULL, "message: %s", tres[0].msg);
    char why[300];
    ck_assert_int_eq(sp_comm_world_aborted(j.w, why, sizeof why), 1);
    sp_comm_world_free(j.w);
}
END_TEST

static void recv_timeout_chip(job *j, sp_comm *c)
{
    float a[4];
    if (sp_comm_rank(c) != 1) return;
    double t0 = now_s();
    sp_status st = sp_comm_recv(c, 0, a, 4, SP_DT_F32);
    double t = now_s() - t0;
    CHIP_EXPECT(j, st == SP_ECOMM && t >= 0.25 && t < 3.0, "recv timeout: %s after %.3f s", sp_status_str(st), t);
}

START_TEST(test_timeout_recv)
{
    job j = {.mesh = {{2, 1, 1, 1, 1}}};
    ck_assert_int_eq(sp_comm_world_create(SP_COMM_BACKEND_THREADS, &j.mesh, &j.w), SP_OK);
    spi_comm_world_set_timeout(j.w, 0.3);
    run_chips(&j, recv_timeout_chip);
    sp_comm_world_free(j.w);
}
END_TEST

static void abort_chip(job *j, sp_comm *c)
{
    int me = sp_comm_rank(c);
    float a[64] = {0};
    if (me == 3) {   /* fails before its collective and tells the others */
        usleep(200000);
        sp_comm_abort(j->w, "chip 3 failed: injected");
        return;
    }
    double t0 = now_s();
    if (me == 4) {   /* a blocked recv is woken too */
        tres[me].st = sp_comm_recv(c, 5, a, 64, SP_DT_F32);
    } else if (me == 5) {
        return;
    } else {
        tres[me].st = sp_comm_allreduce(c, SP_AXES_X, a, a, 64, SP_DT_F32);
    }
    tres[me].t = now_s() - t0;
    snprintf(tres[me].msg, sizeof tres[me].msg, "%s", sp_last_error());
}

START_TEST(test_abort)
{
    job j = {.mesh = {{1, 1, 4, 1, 2}}};   /* x groups of 4 (ranks 0,2,4,6 and 1,3,5,7) */
    ck_assert_int_eq(sp_comm_world_create(SP_COMM_BACKEND_THREADS, &j.mesh, &j.w), SP_OK);
    spi_comm_world_set_timeout(j.w, 60);
    memset(tres, 0, sizeof tres);
    run_chips(&j, abort_chip);
    for (int r = 0; r < 8; r++) {
        if (r == 3 || r == 5) continue;
        ck_assert_msg(tres[r].st == SP_ECOMM, "rank %d: %s", r, sp_status_str(tres[r].st));
        ck_assert_msg(tres[r].t < 5.0, "rank %d took %.3f s", r, tres[r].t);
        ck_assert_msg(strstr(tres[r].msg, "chip 3 failed: injected") != NULL, "rank %d: %s", r, tres[r].msg);
    }
    sp_comm *c;
    ck_assert_int_eq(sp_comm_open(j.w, 0, &c), SP_ECOMM);
    sp_comm_world_free(j.w);
}
END_TEST

static Suite *comm_suite(void)
{
    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("collectives");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_grid, 0, NMESH);
    tcase_add_test(tc, test_determinism);
    tcase_add_test(tc, test_concurrent_groups);
    tcase_add_test(tc, test_sendrecv_pipeline);
    tcase_add_test(tc, test_mismatch);
    tcase_add_test(tc, test_args);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("failure");
    tcase_set_timeout(tf, 60);
    tcase_add_test(tf, test_timeout_env);
    tcase_add_test(tf, test_timeout_recv);
    tcase_add_test(tf, test_abort);
    suite_add_tcase(s, tf);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(comm_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
