/* plan_space.c: the planner's layout space (sp_plan.h), its pricing and the
 * exact pre-solve reductions (doc/planner.md). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include "spi_common.h"
#include "spi_plan.h"
#include "spi_lower.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void pool_stop(spi_space *s);

void spi_space_init(spi_space *s, const sp_model *m, const sp_hw *hw)
{
    memset(s, 0, sizeof *s);
    s->m = m;
    s->hw = hw;
    s->min_short = -1;
}

void spi_space_narrow(spi_space *s, const sp_plan_opts *o)
{
    s->ffn_mask = o->ffn_layouts;
    s->attn_mask = o->attn_layouts;
    s->wt_mask = o->weight_dtypes;
    s->tensor_1d = o->tensor_1d;
    s->m_per_stage = o->microbatches_per_stage;
}

sp_cost_cache *spi_space_cache(const spi_space *s)
{
    /* the space's pricing state, not its contents: made through a const
     * space (never an object defined const: spaces live on their planner's
     * stack) */
    spi_space *w = (spi_space *)s;
    if (!w->cache[0] && sp_cost_cache_create(&w->cache[0]) != SP_OK) w->cache[0] = NULL;
    return w->cache[0];
}

void spi_space_free(spi_space *s)
{
    pool_stop(s);   /* its threads hold the caches freed below */
    s->pool_tried = 0;
    for (int t = 0; t < SPI_WORKERS; t++) {
        sp_cost_cache_free(s->cache[t]);
        s->cache[t] = NULL;
    }
    free(s->inc);
    s->inc = NULL;
    free(s->c);
    free(s->pend);
    free(s->pst);
    s->pend = NULL;
    s->pst = NULL;
    s->npend = s->pcap = 0;
    free(s->sidx);
    free(s->sk1);
    free(s->sk2);
    free(s->sk3);
    free(s->skeep);
    s->c = NULL;
    s->sidx = NULL;
    s->sk1 = s->sk2 = s->sk3 = NULL;
    s->skeep = NULL;
    s->n = s->cap = s->scap = 0;
}

/* Placements, innermost axis first; the default (z, y, x) first so that it
 * is the one kept among equivalent ones. */
static const sp_axis perms[6][3] = {
    {SP_AXIS_Z, SP_AXIS_Y, SP_AXIS_X}, {SP_AXIS_Z, SP_AXIS_X, SP_AXIS_Y}, {SP_AXIS_Y, SP_AXIS_Z, SP_AXIS_X},
    {SP_AXIS_Y, SP_AXIS_X, SP_AXIS_Z}, {SP_AXIS_X, SP_AXIS_Z, SP_AXIS_Y}, {SP_AXIS_X, SP_AXIS_Y, SP_AXIS_Z},
};

/* Tiers (chips in a node, nodes) of every group over tensor axes: placements
 * with equal signatures price every collective alike. */
static void tier_signature(const sp_hw *hw, const sp_layout *l, int sig[14])
{
    for (unsigned mask = 1; mask < 8; mask++) {
        char axes[4];
        int k = 0;
        if (mask & 1u) axes[k++] = 'x';
        if (mask & 2u) axes[k++] = 'y';
        if (mask & 4u) axes[k++] = 'z';
        axes[k] = '\0';
        sp_cost_group_tiers(hw, l, axes, &sig[2 * (mask - 1)], &sig[2 * (mask - 1) + 1]);
    }
}

/* pending layouts priced at once, at most about (spi_space_add).  512
 * (~0.5 MB of pending layouts, in cache), not 4096: palm-540b on 64 tpu-v4
 * prices the same 1,448 layouts in 451.5M instructions (455.7M) and the
 * whole process takes ~32 ms against ~37 (2026-11-24, quiet, medians of
 * 9 interleaved with round 1's binary at ~30), 2,640 page faults against
 * 3,600; 256 h100 with stage meshes ~464 ms against ~479 (35,724 layouts
 * priced against 35,286).  Parts of 256 price more (1,492). */
enum { SPI_PEND_PART = 512 };

static sp_status push(spi_space *s, const spi_cand *c)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 1024;
        spi_cand *p = realloc(s->c, (size_t)cap * sizeof *p);
        if (!p) return spi_fail(SP_ENOMEM, "planner: out of memory for %d candidates", cap);
        s->c = p;
        s->cap = cap;
    }
    s->c[s->n++] = *c;
    s->priced++;
    int64_t sf = c->mem_over > 0 ? c->mem_over : 0;
    if (s->min_short < 0 || sf < s->min_short) s->min_short = sf;
    s->feasible += c->mem_over <= 0;
    return SP_OK;
}

sp_status spi_space_push(spi_space *s, const spi_cand *c) { return push(s, c); }

/* A pending layout is ~1 KB, ~800 bytes of it the layout's per-stage,
 * group and offload fields (sp_layout from stage_layers on), which every
 * layout spi_space_add makes leaves 0 (sp_layout_init), and which neither
 * the full pricing's chunked variant (price_one: prefill_chunk and
 * prefill_tokens) nor any bound writes.  A slot's tail is zeroed once, when
 * the slot is made, and pend copies the rest: palm-540b on 64 TPU v4 pends
 * 59,160 layouts, whose whole copies were ~2 ms of the plan's serial work. */
enum { PEND_HEAD = offsetof(sp_layout, stage_layers), PEND_FIGS = offsetof(spi_cand, inst) };
_Static_assert(offsetof(spi_cand, layout) == 0 && PEND_FIGS >= (int)sizeof(sp_layout), "spi_cand starts with its layout");

/* 1 when l's fields from stage_layers on are all 0 (pend's precondition) */
static int tail_zero(const sp_layout *l)
{
    static const sp_layout zero;
    return !memcmp((const char *)l + PEND_HEAD, (const char *)&zero + PEND_HEAD, sizeof *l - PEND_HEAD);
}

static sp_status pend(spi_space *s, const spi_cand *c)
{
    if (s->npend == s->pcap) {
        int cap = s->pcap ? 2 * s->pcap : 1024;
        spi_cand *p = realloc(s->pend, (size_t)cap * sizeof *p);
        sp_status *q = realloc(s->pst, (size_t)cap * sizeof *q);
        if (p) s->pend = p;
        if (q) s->pst = q;
        if (!p || !q) return spi_fail(SP_ENOMEM, "planner: out of memory for %d layouts", cap);
        for (int i = s->pcap; i < cap; i++) memset((char *)&p[i].layout + PEND_HEAD, 0, sizeof p[i].layout - PEND_HEAD);
        s->pcap = cap;
    }
    spi_cand *d = &s->pend[s->npend++];
    memcpy(d, c, PEND_HEAD);
    memcpy((char *)d + PEND_FIGS, (const char *)c + PEND_FIGS, sizeof *c - PEND_FIGS);
    return SP_OK;
}

/* A pending layout's bound as a template of the pipeline program
 * (bound_one, flush_pruned) */
typedef struct pbound {
    /* the program's first bound from the decode alone (spi_split_decode_lb):
     * -INFINITY when the layout is no template; while dlb.smaller, its even
     * mesh's case, which is no less than the bound: what it cannot prune,
     * the bound cannot either */
    double split_lb;
    spi_split_dlb dlb;
    int lead;                 /* the layout of its group whose decode was priced (bound_group) */
} pbound;

enum { PR_PRICE, PR_BOUND };
/* One batch of pricing (price_pending): its entries taken a chunk at a time
 * by the calling thread and the space's pool threads alike. */
typedef struct pricer {
    spi_space *s;
    const sp_workload *w;
    const int *idx;           /* the pending layouts to work on (NULL: all of them, n = npend) */
    int n;
    int mode;                 /* PR_PRICE: price_one (an entry ~i of idx: bound_smaller of i);
                                 PR_BOUND: idx holds groups' first layouts, bound_group */
    pbound *pb;               /* per pending layout (bound_group, bound_smaller) */
    const int *gnext;         /* bound_group: the next layout of the group (-1: none) */
    int chunk;                /* entries taken at a time */
    atomic_int next;          /* the next entry of idx to take */
} pricer;

typedef struct worker {
    struct spi_pool *pool;
    sp_cost_cache *cache;     /* the thread's own (spi_space.cache[t], t >= 1) */
} worker;

/* The space's pricing threads besides the caller's (spi_space.pool): made
 * on the first batch worth sharing, they wait for batches until
 * spi_space_free.  A pruned part of layouts (SPI_PEND_PART) is priced in a bound
 * pass and rounds (flush_pruned): palm-540b on 64 tpu-v4, 29 batches of
 * ~1.5 ms of work (one thread); threads made and joined for each, as
 * before, started late on a CPU that had halted.  A
 * thread that finished polls for the next batch (spin_ns) before it
 * sleeps; so does the caller for the threads at a batch's end. */
struct spi_pool {
    pthread_mutex_t mu;
    pthread_cond_t go;        /* a batch was posted, or stop */
    pthread_cond_t done;      /* the last thread left its batch */
    pricer *job;              /* the batch open to join (NULL: none); under mu */
    atomic_uint gen;          /* batches posted so far (a thread joins each once); written under mu */
    atomic_int busy;          /* threads working on job; written under mu */
    atomic_int stop;          /* written under mu */
    long spin_ns;             /* polling before a sleep (SHARDPLAN_PLAN_SPIN_US), while the
                                 threads of every live pool have a CPU each (pool_threads <= cpus):
                                 a poller would take the CPU of a thread it waits for (a sweep's
                                 plans, each with its pool) */
    long cpus;
    int nt;                   /* threads started */
    pthread_t th[SPI_WORKERS];
    worker wk[SPI_WORKERS];
};
typedef struct spi_pool pool;

/* Pricing options of the space's workers: quiet (most of the space does
 * not apply, and a message costs more than the check), with their cache. */
static sp_cost_opts quiet_opts(sp_cost_cache *cache)
{
    sp_cost_opts o;
    sp_cost_opts_init(&o);
    o.quiet = 1;
    o.cache = cache;
    return o;
}

/* The figures the planner reads of a pricing. */
static void take_figures(spi_cand *c, const sp_cost *cost)
{
    c->prefill_s = cost->prefill_s;
    c->decode_step_s = cost->decode_step_s;
    c->total_s = cost->total_s;
    c->tokens_per_s = cost->tokens_per_s;
    c->cost_total = cost->cost_chip_s_per_token;
}

static void price_one(spi_space *s, sp_cost_cache *cache, const sp_workload *w, int i)
{
    spi_cand *c = &s->pend[i];
    sp_cost_opts quiet = quiet_opts(cache);
    /* a template of the pipeline program: its stages' times give its bound (spi_split_bound_of) */
    sp_stage_time st[SP_LAYOUT_MAX_STAGES];
    int bound = s->split_bounds && spi_split_is_template(&c->layout, s->m->n_layers);
    if (bound) quiet.stage_times = st;
    sp_cost cost;
    /* the prefill chunked when that makes the layout fit or its pipeline faster (the variant
     * kept dominates the others on every objective: sp_cost_eval_chunked) */
    sp_layout chosen;
    if (s->decode_group) {
        /* a decode group: the generated tokens alone (no prefill to chunk) */
        chosen = c->layout;
        s->pst[i] = sp_cost_eval_group(s->m, s->hw, &c->layout, SP_PHASE_DECODE, w, &quiet, &cost);
    } else if (s->ragged) {
        /* a ragged batch: its actual tokens (nothing chunked) */
        chosen = c->layout;
        s->pst[i] = sp_cost_eval_ragged(s->m, s->hw, &c->layout, s->ragged, &quiet, &cost);
    } else {
        s->pst[i] = sp_cost_eval_chunked(s->m, s->hw, &c->layout, w, &quiet, &chosen, &cost);
    }
    if (s->pst[i] != SP_OK) return;
    /* the slot keeps its zero tail (pend): the chunked variant sets prefill_chunk and
     * prefill_tokens alone; one that set more would be refused here, not kept half */
    if (!tail_zero(&chosen)) {
        s->pst[i] = spi_fail(SP_EINTERNAL, "planner: a priced variant sets per-stage fields (pend copies a layout's head only)");
        return;
    }
    c->layout = chosen;
    c->mem_over = cost.mem.total - cost.capacity;
    take_figures(c, &cost);
    if (bound) {
        spi_split_bound_of(st, c->layout.stages, c->bound_ps, &c->bound_units);
        c->has_bound = 1;
    }
}

/* The decode bound of pending layout i (doc/planner.md, "Pruning by the
 * decode bound"): its decode priced alone (sp_cost_eval_group, the decode
 * phase of the layout itself: the same programs, memo keys and roll-up as
 * its full pricing), into the candidate's figures as a bound on every
 * measure the plan compares: prefill_s the prefill's lower bound
 * (sp_cost_prefill_lb: valid for every chunked variant the full pricing
 * tries; 0 where the cost model has none), decode_step_s exact, total_s
 * that bound plus the decode's time, tokens_per_s and cost_total from that
 * total (the full pricing's figures are the same functions of prefill +
 * decode, which is not less).  For a template of the pipeline program, b->split_lb is the
 * program's first bound with the prefill's bottleneck at 0
 * (spi_split_decode_lb; spi_split_first_lb is monotone in the prefill, and
 * the program's refinement only raises its bound there) where its stages
 * keep its mesh; where the program offers them other meshes
 * (b->dlb.smaller), the even mesh's case, which bound_smaller lowers to the
 * least of it and the smaller meshes' decode-first case when that may
 * prune the layout (flush_pruned); else -INFINITY.  pst[i]: the status
 * (SP_EINVAL: the layout does not apply, and neither would its full
 * pricing, which runs the same decode checks; another error from the bound
 * leaves the layout to its full pricing, which reports its own); with
 * SP_EINVAL, spi_lower_failed_decode_alone says whether a failed check of
 * the lowering's read none of the prefill's layouts (cleared here first). */
static void bound_one(spi_space *s, sp_cost_cache *cache, const sp_workload *w, int i, pbound *b)
{
    spi_cand *c = &s->pend[i];
    sp_cost_opts quiet = quiet_opts(cache);
    sp_stage_time st[SP_LAYOUT_MAX_STAGES];
    int tmpl = s->split_bounds && spi_split_is_template(&c->layout, s->m->n_layers);
    if (tmpl) quiet.stage_times = st;
    sp_cost cost;
    b->split_lb = -INFINITY;
    b->dlb.smaller = 0;
    b->lead = i;
    spi_lower_fail_clear();
    s->pst[i] = sp_cost_eval_group(s->m, s->hw, &c->layout, SP_PHASE_DECODE, w, &quiet, &cost);
    if (s->pst[i] != SP_OK) return;
    take_figures(c, &cost);   /* prefill_s 0: a decode group prices no prefill (below: its bound) */
    double pf = sp_cost_prefill_lb(s->m, s->hw, &c->layout, w);
    if (pf > 0) {
        /* the prefill's bound in its place: the full pricing's figures (eval_one) are these
         * expressions of a prefill no less, rounding monotone */
        double gen_tokens = (double)w->batch * w->gen;
        c->prefill_s = pf;
        c->total_s = pf + cost.decode_s;
        c->tokens_per_s = gen_tokens / c->total_s;
        c->cost_total = cost.chips * c->total_s / gen_tokens;
    }
    if (tmpl) {
        spi_measure ms;
        spi_measure_init(s->prune, w, &ms);
        spi_split_decode_lb(s, &ms, &c->layout, st, 0, &b->dlb, &b->split_lb);
        /* below a day a micro-batch: its picoseconds stay in range (an int64 holds 106 days;
         * longer stage times the cost model clamps) and the bound is left out beyond */
        if (pf > 0 && pf / c->layout.microbatches < 86400.0) {
            /* the prefill's bottleneck: any split of the template into its S stages, on its
             * meshes or stage meshes of no more chips, has a stage whose micro-batch takes at
             * least the bound / M (sp_cost_prefill_lb: M times the busiest stage's micro-batch
             * is at least it, for every split and mesh of the instance's chips); the first bound
             * with it, as spi_split_decode_lb takes it with the template's pipeline terms */
            b->dlb.m_ps[SPI_PH_PF] = (int64_t)(pf * 1e12 / c->layout.microbatches);
            sp_cost_pipe pipe;
            sp_cost_pipe_terms(s->hw, &c->layout, b->dlb.units, &pipe);
            b->split_lb = spi_split_first_lb(&ms, &pipe, b->dlb.m_ps);
        }
    }
}

/* The smaller meshes' case of pending layout i's bound (pbound.dlb.smaller;
 * spi_split_decode_lb_smaller), the pricing kept in the candidate for the
 * program (spi_cand.has_dlo).  An error leaves no bound (-INFINITY): the
 * layout is then priced in full, which reports its own. */
static void bound_smaller(spi_space *s, sp_cost_cache *cache, const sp_workload *w, int i, pbound *b)
{
    spi_measure ms;
    spi_measure_init(s->prune, w, &ms);
    if (spi_split_decode_lb_smaller(s, cache, w, &ms, &s->pend[i], &b->dlb, &b->split_lb) != SP_OK)
        b->split_lb = -INFINITY;
    b->dlb.smaller = 0;
}

/* The decode bound of a group of pending layouts that differ in their
 * prefill's (FFN, attention) alone (flush_pruned): their decode programs are
 * the same (sp_lower_key clears the other phase's layouts) and so are their
 * decode bounds.  Its layouts from i on are bounded one by one until one
 * applies; the others take its bound (and are priced later, when not
 * pruned: one whose own checks fail is then rejected, or pruned, and out of
 * the space either way).  A layout rejected by a check of the lowering
 * that reads none of the prefill's layouts (spi_lower_failed_decode_alone)
 * rejects the rest of the group with it: each of them reaches the same
 * call (the same decode program, stage by stage) and fails it (palm-540b
 * on 64 TPU v4: 3,030 groups, 21,540 decode bounds of 27,210, whose
 * decode micro-batch does not divide over the decode FFN's or batch-sharded
 * attention's sequence shards). */
static void bound_group(spi_space *s, sp_cost_cache *cache, const sp_workload *w, int i, const int *gnext, pbound *pb)
{
    for (; i >= 0; i = gnext[i]) {
        bound_one(s, cache, w, i, &pb[i]);
        if (s->pst[i] == SP_OK) break;
        if (s->pst[i] == SP_EINVAL && spi_lower_failed_decode_alone()) {
            for (int j = gnext[i]; j >= 0; j = gnext[j]) s->pst[j] = SP_EINVAL;
            return;
        }
    }
    if (i < 0) return;
    const spi_cand *c = &s->pend[i];
    for (int j = gnext[i]; j >= 0; j = gnext[j]) {
        spi_cand *d = &s->pend[j];
        d->prefill_s = c->prefill_s, d->decode_step_s = c->decode_step_s, d->total_s = c->total_s;
        d->tokens_per_s = c->tokens_per_s, d->cost_total = c->cost_total;
        pb[j] = pb[i];   /* lead: i */
        s->pst[j] = SP_OK;
    }
}

/* Takes p's entries a chunk at a time until none is left. */
static void pricer_run(pricer *p, sp_cost_cache *cache)
{
    for (;;) {
        /* next ends below n + threads x chunk <= 2n + SPI_WORKERS: no overflow for the
         * layouts memory holds (~1 KB each) */
        int i0 = atomic_fetch_add(&p->next, p->chunk);
        if (i0 >= p->n) return;
        int i1 = i0 + p->chunk < p->n ? i0 + p->chunk : p->n;
        for (int i = i0; i < i1; i++) {
            int j = p->idx ? p->idx[i] : i;
            if (p->mode == PR_BOUND) bound_group(p->s, cache, p->w, j, p->gnext, p->pb);
            else if (j < 0) bound_smaller(p->s, cache, p->w, ~j, &p->pb[~j]);
            else price_one(p->s, cache, p->w, j);
        }
    }
}

/* threads of the live pools, their callers included */
static atomic_int pool_threads;

/* Polls until done(P, arg) for at most P->spin_ns: 1 when it held. */
static int pool_poll(const pool *P, int (*done)(const pool *, unsigned), unsigned arg)
{
    if (P->spin_ns <= 0 || atomic_load(&pool_threads) > P->cpus) return 0;
    double t0 = now_s();
    for (unsigned i = 0;; i++) {
        if (done(P, arg)) return 1;
        if ((i & 63) == 63 && (now_s() - t0) * 1e9 >= (double)P->spin_ns) return 0;
    }
}
static int pool_posted(const pool *P, unsigned seen) { return atomic_load(&P->gen) != seen || atomic_load(&P->stop); }
static int pool_idle(const pool *P, unsigned unused)
{
    (void)unused;
    return atomic_load(&P->busy) == 0;
}

/* A pool thread: joins each batch posted, once, unless the caller closed
 * it before the thread came (then waits for the next). */
static void *pool_main(void *arg)
{
    const worker *wk = arg;
    pool *P = wk->pool;
    unsigned seen = 0;
    for (;;) {
        pool_poll(P, pool_posted, seen);
        pthread_mutex_lock(&P->mu);
        while (!P->stop && P->gen == seen) pthread_cond_wait(&P->go, &P->mu);
        if (P->stop) {
            pthread_mutex_unlock(&P->mu);
            return NULL;
        }
        seen = P->gen;
        pricer *p = P->job;
        if (p) P->busy++;
        pthread_mutex_unlock(&P->mu);
        if (!p) continue;
        pricer_run(p, wk->cache);
        pthread_mutex_lock(&P->mu);
        if (--P->busy == 0) pthread_cond_signal(&P->done);
        pthread_mutex_unlock(&P->mu);
    }
}

/* Starts s's pool: spi_workers threads in all, the caller's among them.
 * None where one thread is asked for, or where none can be made (the
 * caller then prices everything, as with one). */
static void pool_start(spi_space *s)
{
    s->pool_tried = 1;
    int want = spi_workers(SPI_WORKERS, 1) - 1;
    if (want < 1) return;
    pool *P = malloc(sizeof *P);
    if (!P) return;
    memset(P, 0, sizeof *P);
    if (pthread_mutex_init(&P->mu, NULL) != 0) {
        free(P);
        return;
    }
    if (pthread_cond_init(&P->go, NULL) != 0) {
        pthread_mutex_destroy(&P->mu);
        free(P);
        return;
    }
    if (pthread_cond_init(&P->done, NULL) != 0) {
        pthread_cond_destroy(&P->go);
        pthread_mutex_destroy(&P->mu);
        free(P);
        return;
    }
    long us = sp_env_long(SP_ENV_PLAN_SPIN_US);
    if (us > 1000000) us = 1000000;   /* at most 1 s (the knob's documented ceiling) */
    P->spin_ns = us > 0 ? us * 1000 : 0;
    P->cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (int t = 0; t < want; t++) {
        /* thread t prices with cache t + 1 (cache 0: the caller's, spi_space_cache) */
        if (!s->cache[t + 1] && sp_cost_cache_create(&s->cache[t + 1]) != SP_OK) s->cache[t + 1] = NULL;
        P->wk[P->nt] = (worker){P, s->cache[t + 1]};
        if (pthread_create(&P->th[P->nt], NULL, pool_main, &P->wk[P->nt]) == 0) P->nt++;
    }
    if (!P->nt) {
        pthread_cond_destroy(&P->go);
        pthread_cond_destroy(&P->done);
        pthread_mutex_destroy(&P->mu);
        free(P);
        return;
    }
    atomic_fetch_add(&pool_threads, 1 + P->nt);
    s->pool = P;
}

static void pool_stop(spi_space *s)
{
    pool *P = s->pool;
    if (!P) return;
    pthread_mutex_lock(&P->mu);
    P->stop = 1;
    pthread_cond_broadcast(&P->go);
    pthread_mutex_unlock(&P->mu);
    for (int t = 0; t < P->nt; t++) pthread_join(P->th[t], NULL);
    atomic_fetch_sub(&pool_threads, 1 + P->nt);
    pthread_cond_destroy(&P->go);
    pthread_cond_destroy(&P->done);
    pthread_mutex_destroy(&P->mu);
    free(P);
    s->pool = NULL;
}

int spi_workers(int n, int per)
{
    long nt = sp_env_long(SP_ENV_THREADS);
    if (nt <= 0) nt = sysconf(_SC_NPROCESSORS_ONLN);
    if (nt > SPI_WORKERS) nt = SPI_WORKERS;
    if (nt > n / per) nt = n / per;   /* threads only pay off on enough work */
    return nt < 1 ? 1 : (int)nt;
}

/* Prices pending layouts idx[0..n) (idx NULL: all) on the space's pool
 * and the calling thread: fully (PR_PRICE; an entry ~i: the smaller meshes'
 * case of i's bound, bound_smaller, about as much work), or the decode
 * bounds of the groups whose first layouts idx lists (PR_BOUND,
 * bound_group); pb: per pending layout, for bound_group and bound_smaller.
 * Each entry's results are its own (pst, pend, pb of its layouts): the
 * same whichever thread takes it. */
static sp_status price_pending(spi_space *s, const sp_workload *w, const int *idx, int n, int mode, pbound *pb,
                               const int *gnext)
{
    if (n <= 0) return SP_OK;
    if (!s->pool && !s->pool_tried && n > 1) pool_start(s);
    pool *P = n > 1 ? s->pool : NULL;
    /* about 4 chunks a thread: entries cost from a few thousand instructions (a layout
     * rejected early) to ~10^5 (a template of the pipeline program, a group's bound); the
     * last chunks taken even out the threads' ends */
    int nt = P ? 1 + P->nt : 1, chunk = n / (4 * nt);
    pricer p = {s, w, idx, n, mode, pb, gnext, chunk > 0 ? chunk : 1, 0};
    if (P) {
        pthread_mutex_lock(&P->mu);
        P->job = &p;
        P->gen++;
        pthread_cond_broadcast(&P->go);
        pthread_mutex_unlock(&P->mu);
    }
    pricer_run(&p, spi_space_cache(s));   /* this thread works too; with no pool it does everything */
    if (P) {
        /* closed: a thread that wakes only now finds nothing to join; those in it finish
         * their chunks, their writes seen here through busy (its last decrement, seq_cst,
         * after them; or mu).  helgrind, which follows pthread calls and not atomics, sees
         * the polling path as races: SHARDPLAN_PLAN_SPIN_US=0 for it */
        pthread_mutex_lock(&P->mu);
        P->job = NULL;
        pthread_mutex_unlock(&P->mu);
        if (!pool_poll(P, pool_idle, 0)) {
            pthread_mutex_lock(&P->mu);
            while (P->busy) pthread_cond_wait(&P->done, &P->mu);
            pthread_mutex_unlock(&P->mu);
        }
    }
    return SP_OK;
}

int spi_cand_admissible(const spi_space *s, const spi_cand *c, const sp_plan_opts *o)
{
    return c->mem_over <= 0 &&
           (o->max_latency_s <= 0 || spi_cand_latency(s, c, o->latency_metric) <= o->max_latency_s) &&
           (o->min_tokens_per_s <= 0 || -c->tokens_per_s <= -o->min_tokens_per_s);
}

/* The best figures among the layouts priced so far (flush_pruned): the
 * admissible ones' least objective and measure, their (cost, latency) and
 * (latency, cost) lexicographic minima, and per rival kind k, over all of
 * them (memory and bounds ignored, as the rival programs are): b1[k] the
 * least objective, v1[k] the value of k of a layout that has it, b2[k] the
 * least objective over the layouts whose value of k is not v1[k] (doc/planner.md,
 * "Pruning by the decode bound": two values' best are all a rival needs). */
struct spi_incumbents {
    double obj, meas;
    double fc_cost, fc_lat, fl_cost, fl_lat;
    double b1[SP_RIVAL_KIND_COUNT], b2[SP_RIVAL_KIND_COUNT];
    int64_t v1[SP_RIVAL_KIND_COUNT];
};
typedef struct spi_incumbents incumbents;

static void inc_init(incumbents *b)
{
    b->obj = b->meas = b->fc_cost = b->fc_lat = b->fl_cost = b->fl_lat = INFINITY;
    for (int k = 0; k < SP_RIVAL_KIND_COUNT; k++) b->b1[k] = b->b2[k] = INFINITY, b->v1[k] = 0;
}

static void inc_add(incumbents *b, const spi_space *s, const spi_cand *c, const sp_plan_opts *o)
{
    double k1 = spi_cand_objective(s, c, o);
    if (spi_cand_admissible(s, c, o)) {
        double m = spi_split_measure(s, c, o), lat = spi_cand_latency(s, c, o->latency_metric),
               cost = spi_cand_cost(s, c, o->latency_metric, o->cost_metric);
        if (k1 < b->obj) b->obj = k1;
        if (m < b->meas) b->meas = m;
        if (cost < b->fc_cost || (cost == b->fc_cost && lat < b->fc_lat)) b->fc_cost = cost, b->fc_lat = lat;
        if (lat < b->fl_lat || (lat == b->fl_lat && cost < b->fl_cost)) b->fl_cost = cost, b->fl_lat = lat;
    }
    if (!o->rivals) return;
    /* (b1, b2) end the same in any order of the layouts (v1 may not, where two values tie at
     * b1: then b2 = b1, and prunable reads v1 only when b2 does not decide) */
    for (int k = 0; k < SP_RIVAL_KIND_COUNT; k++) {
        int64_t v = spi_cand_kind_value(c, (sp_plan_rival_kind)k);
        if (v == b->v1[k]) {
            if (k1 < b->b1[k]) b->b1[k] = k1;
        } else if (k1 < b->b1[k]) b->b2[k] = b->b1[k], b->b1[k] = k1, b->v1[k] = v;
        else if (k1 < b->b2[k]) b->b2[k] = k1;
    }
}

/* Whether a layout whose figures are bounded below by c's (bound_one) and
 * whose pipeline program bound is split_lb can change no answer of the
 * plan (doc/planner.md, "Pruning by the decode bound"): some admissible
 * layout priced has a strictly smaller objective (main) and measure (the
 * incumbent of the pipeline and offload programs); with the frontier, one
 * has a strictly smaller cost and no larger latency; a template of the
 * pipeline program has its bound at or above the measure (the program drops
 * it unpriced); with the rivals, for every rival kind k, layouts of two
 * distinct values of k have a strictly smaller objective, or one of c's own
 * value does.  The rival of kind k (plan.c find_rivals) is the rank-least
 * layout of the space whose value of k is not the chosen one's: of two
 * distinct values one is not the chosen's, so its layout is a candidate
 * for the rival and beats c; a layout of c's own value is one whenever c
 * would be.  Whichever layout is chosen, then, c is no rival; and it is the
 * rank-least of no value whose best the reduction (spi_space_reduce) keeps
 * for a rival.  With b2[k] the least objective off the best value v1[k],
 * "two values beat c" is b2[k] < k1 and "one of c's value does" adds c's
 * value = v1[k] with b1[k] < k1 (a value other than v1 has its best at or
 * above b2). */
static int prunable(const incumbents *b, const spi_space *s, const spi_cand *c, double split_lb, const sp_plan_opts *o)
{
    double k1 = spi_cand_objective(s, c, o);
    if (!(b->obj < k1) || !(b->meas < spi_split_measure(s, c, o))) return 0;
    if (split_lb > -INFINITY && !(split_lb >= b->meas)) return 0;
    if (s->split_bounds && split_lb == -INFINITY && spi_split_is_template(&c->layout, s->m->n_layers)) return 0;
    if (o->frontier) {
        double lat = spi_cand_latency(s, c, o->latency_metric), cost = spi_cand_cost(s, c, o->latency_metric, o->cost_metric);
        if (!((b->fc_cost < cost && b->fc_lat <= lat) || (b->fl_cost < cost && b->fl_lat <= lat))) return 0;
    }
    if (o->rivals)
        for (int k = 0; k < SP_RIVAL_KIND_COUNT; k++)
            if (!(b->b2[k] < k1) &&
                !(b->b1[k] < k1 && spi_cand_kind_value(c, (sp_plan_rival_kind)k) == b->v1[k]))
                return 0;
    return 1;
}

/* Pending layout i takes the bound of layout r of its group (r's smaller
 * meshes' case priced by bound_smaller: the same decode view) and the
 * figures r kept for the program (spi_cand.has_dlo). */
static void take_smaller(spi_space *s, pbound *pb, int i, int r)
{
    if (i == r) return;
    pb[i].split_lb = pb[r].split_lb;
    pb[i].dlb.smaller = 0;
    spi_cand *c = &s->pend[i];
    const spi_cand *d = &s->pend[r];
    c->has_dlo = d->has_dlo, c->dlo_st = d->dlo_st;
    memcpy(c->dlo_ps, d->dlo_ps, sizeof c->dlo_ps);
}

/* x's place in the order of doubles as an unsigned integer (-0 as +0): the
 * sign bit flips the others of a negative, sets itself on the rest */
static uint64_t order_bits(double x)
{
    if (x == 0) x = 0;
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u >> 63 ? ~u : u | 1ull << 63;
}

/* Sorts ord[0..n) (ascending indices) by key[ord[k]] (order_bits), ties in
 * index order: a stable radix sort from the least byte up, a pass skipped
 * where every key has the same byte (most of the high ones); tmp holds n.
 * A part's ~500 layouts: ~2k instructions a pass, against qsort's ~4.6k
 * calls of a comparator through a pointer. */
static void sort_keys(int *ord, int *tmp, int n, const uint64_t *key)
{
    for (int shift = 0; shift < 64; shift += 8) {
        int count[257] = {0};
        for (int k = 0; k < n; k++) count[(key[ord[k]] >> shift & 255) + 1]++;
        if (n == 0 || count[(key[ord[0]] >> shift & 255) + 1] == n) continue;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (int k = 0; k < n; k++) tmp[count[key[ord[k]] >> shift & 255]++] = ord[k];
        memcpy(ord, tmp, (size_t)n * sizeof *ord);
    }
}

/* Prices the pending layouts with pruning (spi_space.prune): every decode
 * bound first, then the layouts in the order of their bound on the measure
 * (good incumbents early), in rounds: before a round, each layout of it
 * that the incumbents prune is not priced (pst SP_EAGAIN-like: marked in
 * state); a round's prices update the incumbents.  A template's bound over
 * the program's smaller stage meshes (pbound.dlb.smaller) is priced only
 * where the even mesh's case, no less than it, would prune the layout
 * (palm-540b on 256 h100: about 8 % of the templates), once per group of
 * layouts that share a decode (on their first in the round), on the
 * pricing threads beside the round's layouts that are priced whatever it
 * says; the layouts waiting for it are decided after, on the same
 * incumbents.  Deterministic: a round's decisions depend on the earlier
 * rounds alone, not on threads. */
static sp_status flush_pruned(spi_space *s, const sp_workload *w, unsigned char *state)
{
    const sp_plan_opts *o = s->prune;
    const int n = s->npend;
    pbound *pb = malloc((size_t)n * sizeof *pb);
    uint64_t *key = malloc((size_t)n * sizeof *key);
    int *ord = malloc((size_t)n * sizeof *ord), *todo = malloc((size_t)n * sizeof *todo);
    /* ref[lead]: the layout whose smaller meshes' case its group took (-1: none yet); sm: a
     * round's layouts to take it on */
    int *ref = malloc(2 * (size_t)n * sizeof *ref), *sm = ref ? ref + n : NULL;
    sp_status st = SP_OK;
    if (!s->inc && (s->inc = malloc(sizeof *s->inc))) inc_init(s->inc);
    incumbents *b = s->inc;
    if (!pb || !key || !ord || !todo || !ref || !b) {
        st = spi_fail(SP_ENOMEM, "planner: out of memory for %d layouts", n);
        goto out;
    }
    /* groups of layouts with one decode (bound_group): every decision but the prefill's layouts
     * alike; a hash table holds each group's last layout, gnext chains a group's layouts in
     * their order, todo lists the groups' first layouts */
    int hcap = 1;
    while (hcap < 2 * n) hcap *= 2;
    int *gnext = malloc((size_t)n * sizeof *gnext), *last = malloc((size_t)hcap * sizeof *last);
    if (!gnext || !last) {
        free(gnext);
        free(last);
        st = spi_fail(SP_ENOMEM, "planner: out of memory for %d layouts", n);
        goto out;
    }
    for (int h = 0; h < hcap; h++) last[h] = -1;
    int ng = 0;
    for (int i = 0; i < n; i++) {
        const int64_t *k = s->pend[i].key;
        uint64_t h = 0;
        for (int d = 0; d < SPI_DEC_COUNT; d++)
            if (d != SPI_DEC_PF) h = (h ^ (uint64_t)k[d]) * 0x9E3779B97F4A7C15ull;
        gnext[i] = -1;
        for (unsigned x = (unsigned)(h >> 32);; x++) {
            int *e = &last[x & (unsigned)(hcap - 1)];
            if (*e < 0) {
                todo[ng++] = i;
                *e = i;
                break;
            }
            const int64_t *q = s->pend[*e].key;
            int same = 1;
            for (int d = 0; d < SPI_DEC_COUNT && same; d++) same = d == SPI_DEC_PF || q[d] == k[d];
            if (same) {
                gnext[*e] = i;
                *e = i;
                break;
            }
        }
    }
    free(last);
    st = price_pending(s, w, todo, ng, PR_BOUND, pb, gnext);
    free(gnext);
    SP_CHECKGOTO(st, st, out);
    int no = 0, nt = 0;
    for (int i = 0; i < n; i++) {
        state[i] = 0;
        if (s->pst[i] == SP_EINVAL) continue;   /* rejected: its full pricing would be too */
        if (s->pst[i] != SP_OK) todo[nt++] = i;   /* priced fully, first: it reports its own error */
        else {
            key[i] = order_bits(spi_split_measure(s, &s->pend[i], o));
            ord[no++] = i;
        }
    }
    sort_keys(ord, ref, no, key);   /* ref: free until the rounds */
    for (int i = 0; i < n; i++) ref[i] = -1;
    /* rounds: small first (an incumbent soon), then larger (threads pay off) */
    for (int at = 0, round = 64; at < no || nt > 0; round = round < 2048 ? 2 * round : round) {
        int nw = 0;   /* the round's layouts that wait for their group's smaller meshes' case (sm) */
        for (int e = at + round; at < no && at < e; at++) {
            int i = ord[at];
            if (pb[i].dlb.smaller) {
                /* the even mesh's case is no less than the bound: what it cannot prune, the
                 * bound cannot either; else the group's case, priced once (its first layout
                 * here: ~i in todo, priced with the round's layouts) */
                if (!prunable(b, s, &s->pend[i], pb[i].split_lb, o)) {
                    todo[nt++] = i;
                    continue;
                }
                int *r = &ref[pb[i].lead];
                if (*r < 0) *r = i, todo[nt++] = ~i;
                if (pb[*r].dlb.smaller || *r == i) {   /* priced with this round */
                    sm[nw++] = i;
                    continue;
                }
                take_smaller(s, pb, i, *r);   /* priced in an earlier round */
            }
            if (prunable(b, s, &s->pend[i], pb[i].split_lb, o)) {
                state[i] = 1;
                s->pruned++;
            } else todo[nt++] = i;
        }
        SP_CHECKGOTO(price_pending(s, w, todo, nt, PR_PRICE, pb, NULL), st, out);
        /* the waiting layouts, decided on the incumbents before the round as the others; those
         * not pruned priced now (a few: their even mesh's case would have pruned them) */
        int nw2 = 0;
        for (int k = 0; k < nw; k++) {
            int i = sm[k];
            take_smaller(s, pb, i, ref[pb[i].lead]);
            if (prunable(b, s, &s->pend[i], pb[i].split_lb, o)) {
                state[i] = 1;
                s->pruned++;
            } else sm[nw2++] = i;
        }
        SP_CHECKGOTO(price_pending(s, w, sm, nw2, PR_PRICE, pb, NULL), st, out);
        /* the incumbents after the round: minima, the same in any order */
        for (int j = 0; j < nt; j++)
            if (todo[j] >= 0 && s->pst[todo[j]] == SP_OK) inc_add(b, s, &s->pend[todo[j]], o);
        for (int j = 0; j < nw2; j++)
            if (s->pst[sm[j]] == SP_OK) inc_add(b, s, &s->pend[sm[j]], o);
        nt = 0;
    }
out:
    free(pb);
    free(ref);
    free(key);
    free(ord);
    free(todo);
    return st;
}

/* price the pending layouts on worker threads, then keep them in
 * enumeration order so the space (and every tie) is deterministic */
static sp_status flush_pending(spi_space *s, const sp_workload *w)
{
    unsigned char *state = NULL;   /* 1: pruned (flush_pruned) */
    sp_status st;
    if (s->prune && s->npend > 0 && !s->ragged && !s->decode_group && w->prompt > 0 && w->gen > 0) {
        if (!(state = malloc((size_t)s->npend))) return spi_fail(SP_ENOMEM, "planner: out of memory");
        st = flush_pruned(s, w, state);
    } else st = price_pending(s, w, NULL, s->npend, PR_PRICE, NULL, NULL);
    for (int i = 0; st == SP_OK && i < s->npend; i++) {
        if (state && state[i]) continue;
        if (s->pst[i] == SP_EINVAL) s->rejected++;
        else if (s->pst[i] != SP_OK) st = s->pst[i];
        else st = push(s, &s->pend[i]);
    }
    free(state);
    s->npend = 0;
    return st;
}

sp_status spi_space_add(spi_space *s, int chips, const sp_workload *w, sp_plan_weights weights, sp_dtype kv)
{
    const sp_model *m = s->m;
    const sp_hw *hw = s->hw;
    if (chips < 1) return spi_fail(SP_EINVAL, "chips must be >= 1 (got %d)", chips);
    if (s->n_inst >= (int)SPI_ARRAY_LEN(s->inst))
        return spi_fail(SP_EINVAL, "planner: at most %d (chips, batch) instances", (int)SPI_ARRAY_LEN(s->inst));
    int inst = s->n_inst++;
    free(s->inc);   /* incumbents of this instance alone (flush_pruned) */
    s->inc = NULL;
    s->inst[inst].chips = chips;
    s->inst[inst].batch = w->batch;
    s->inst[inst].w = *w;

    sp_dtype wts[3];
    int nw = 0;
    if (weights == SP_PLAN_W_AUTO || weights == SP_PLAN_W_BF16) wts[nw++] = SP_DT_BF16;
    if (weights == SP_PLAN_W_AUTO || weights == SP_PLAN_W_INT8) wts[nw++] = SP_DT_INT8;
    if ((weights == SP_PLAN_W_AUTO && hw->peak_flops[SP_DT_FP8] > 0) || weights == SP_PLAN_W_FP8) {
        if (hw->peak_flops[SP_DT_FP8] <= 0)
            return spi_fail(SP_EINVAL, "%s has no fp8 peak: fp8 weights are not supported there", hw->name);
        wts[nw++] = SP_DT_FP8;
    }
    if (s->wt_mask) {
        int k = 0;
        for (int i = 0; i < nw; i++)
            if (s->wt_mask >> wts[i] & 1u) wts[k++] = wts[i];
        nw = k;
    }
    const int64_t B = w->batch;
    double t0 = now_s();
    for (int S = 1; S <= chips; S++) {
        if (chips % S || S > m->n_layers) continue;
        for (int R = 1; R <= chips / S; R++) {
            if ((chips / S) % R || B % R) continue;
            int T = chips / S / R;
            int Ms[3], nm = 0;
            if (S == 1) Ms[nm++] = 1;
            else
                for (int k = 1; k <= 4; k *= 2)
                    if ((B / R) % (k * S) == 0 && (!s->m_per_stage || k == s->m_per_stage)) Ms[nm++] = k * S;
            /* a replica's batch too small to fill the pipeline (B/R sequences, none of S, 2S, 4S
             * dividing it): its largest divisor below S, the bubble priced */
            if (!nm && S > 1 && !s->m_per_stage)
                for (int d = (int)((B / R) < S ? B / R : S - 1); d >= 1 && !nm; d--)
                    if ((B / R) % d == 0) Ms[nm++] = d;
            if (!nm) continue;
            /* MoE: experts over the replicas (sp_layout.h), or every replica holds them all */
            int Ns[2] = {1, R}, nN = m->n_experts > 0 && R > 1 && m->n_experts % R == 0 ? 2 : 1;
            for (int X = 1; X <= T; X++) {
                if (T % X) continue;
                for (int Y = 1; Y <= T / X; Y++) {
                    if ((T / X) % Y) continue;
                    int mesh[3] = {X, Y, T / X / Y};
                    if (s->tensor_1d && (X != 1 || Y != 1)) continue;
                    if (!sp_layout_fits_torus(mesh, R, S, hw)) continue;
                    int sigs[6][14], nsig = 0;
                    int nperm = hw->topo == SP_TOPO_CLUSTER ? 6 : 1;
                    for (int p = 0; p < nperm; p++) {
                        spi_cand c;
                        memset(&c, 0, sizeof c);
                        sp_layout *l = &c.layout;
                        sp_layout_init(l);
                        l->stages = S;
                        l->replicas = R;
                        memcpy(l->mesh, mesh, sizeof mesh);
                        memcpy(l->placement, perms[p], sizeof perms[p]);
                        l->kv = kv;
                        if (!sp_layout_fits_nodes(l, hw, NULL)) continue;
                        if (hw->topo == SP_TOPO_CLUSTER) {
                            int sig[14], dup = 0;
                            tier_signature(hw, l, sig);
                            for (int q = 0; q < nsig && !dup; q++) dup = !memcmp(sig, sigs[q], sizeof sig);
                            if (dup) continue;
                            memcpy(sigs[nsig++], sig, sizeof sig);
                        }
                        /* pend copies the layout's head (its tail stays 0 in every slot) */
                        if (!tail_zero(l))
                            return spi_fail(SP_EINTERNAL, "planner: a layout to price sets per-stage fields (pend copies its head only)");
                        c.inst = inst;
                        c.key[SPI_DEC_INST] = inst;
                        c.key[SPI_DEC_MESH] = (int64_t)X | (int64_t)Y << 16 | (int64_t)mesh[2] << 32 | (int64_t)p << 48;
                        for (int mi = 0; mi < nm; mi++) {
                            l->microbatches = Ms[mi];
                            c.key[SPI_DEC_PIPE] = (int64_t)S | (int64_t)R << 20 | (int64_t)Ms[mi] << 40;
                            for (int wi = 0; wi < nw; wi++) {
                                l->weights = wts[wi];
                                c.key[SPI_DEC_PREC] = wts[wi];
                                for (int ni = 0; ni < nN; ni++) {
                                l->experts = Ns[ni];
                                c.key[SPI_DEC_EXPERTS] = Ns[ni];
                                for (int pf = 0; pf < 2 * SP_FL_COUNT; pf++)
                                    for (int dc = 0; dc < 2 * SP_FL_COUNT; dc++) {
                                        sp_ffn_layout pff = (sp_ffn_layout)(pf / 2), dcf = (sp_ffn_layout)(dc / 2);
                                        if (sp_ffn_layout_is_1d(pff) != sp_ffn_layout_is_1d(dcf)) continue;
                                        if (s->tie_phases && dc != pf) continue;
                                        if (s->ffn_mask && !(s->ffn_mask >> pff & s->ffn_mask >> dcf & 1u)) continue;
                                        if (s->attn_mask && !(s->attn_mask >> (pf % 2) & s->attn_mask >> (dc % 2) & 1u))
                                            continue;
                                        l->phase[SP_PHASE_PREFILL].ffn = pff;
                                        l->phase[SP_PHASE_PREFILL].attn = (sp_attn_layout)(pf % 2);
                                        l->phase[SP_PHASE_DECODE].ffn = dcf;
                                        l->phase[SP_PHASE_DECODE].attn = (sp_attn_layout)(dc % 2);
                                        c.key[SPI_DEC_PF] = pf;
                                        c.key[SPI_DEC_DC] = dc;
                                        SP_CHECK(pend(s, &c));
                                    }
                                /* priced in parts (a pending layout is ~1 KB): the incumbents of
                                 * the parts before prune the next (flush_pruned) */
                                if (s->npend >= SPI_PEND_PART) SP_CHECK(flush_pending(s, w));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    sp_status st = flush_pending(s, w);
    s->eval_s += now_s() - t0;
    return st;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

sp_status spi_space_finish(spi_space *s)
{
    int64_t *keys = malloc((size_t)(s->n ? s->n : 1) * sizeof *keys);
    if (!keys) return spi_fail(SP_ENOMEM, "planner: out of memory");
    for (int d = 0; d < SPI_DEC_COUNT; d++) {
        for (int i = 0; i < s->n; i++) keys[i] = s->c[i].key[d];
        qsort(keys, (size_t)s->n, sizeof *keys, cmp_i64);
        int u = 0;
        for (int i = 0; i < s->n; i++)
            if (!u || keys[i] != keys[u - 1]) keys[u++] = keys[i];
        s->nval[d] = u;
        for (int i = 0; i < s->n; i++) {
            int64_t *f = bsearch(&s->c[i].key[d], keys, (size_t)u, sizeof *keys, cmp_i64);
            s->c[i].val[d] = (int)(f - keys);
        }
    }
    free(keys);
    return SP_OK;
}

double spi_cand_latency(const spi_space *s, const spi_cand *c, sp_plan_latency lat)
{
    (void)s;
    switch (lat) {
    case SP_PLAN_LAT_DECODE: return c->decode_step_s;
    case SP_PLAN_LAT_PREFILL: return c->prefill_s;
    default: return c->total_s;
    }
}

double spi_cand_cost(const spi_space *s, const spi_cand *c, sp_plan_latency lat, sp_plan_cost_metric cm)
{
    const spi_inst *in = &s->inst[c->inst];
    if (cm == SP_PLAN_COST_PHASE) {
        if (lat == SP_PLAN_LAT_DECODE) return in->chips * c->decode_step_s / (double)in->batch;
        if (lat == SP_PLAN_LAT_PREFILL && in->w.prompt > 0)
            return in->chips * c->prefill_s / ((double)in->batch * (double)in->w.prompt);
    }
    return c->cost_total;
}

double spi_cand_objective(const spi_space *s, const spi_cand *c, const sp_plan_opts *o)
{
    switch (o->objective) {
    case SP_PLAN_MIN_COST: return spi_cand_cost(s, c, o->latency_metric, o->cost_metric);
    case SP_PLAN_MAX_THROUGHPUT: return -c->tokens_per_s;
    default: return spi_cand_latency(s, c, o->latency_metric);
    }
}

double spi_cand_objective2(const spi_space *s, const spi_cand *c, const sp_plan_opts *o)
{
    return o->objective == SP_PLAN_MIN_COST ? spi_cand_latency(s, c, o->latency_metric)
                                            : spi_cand_cost(s, c, o->latency_metric, o->cost_metric);
}

int64_t spi_cand_kind_value(const spi_cand *c, sp_plan_rival_kind k)
{
    const sp_layout *l = &c->layout;
    switch (k) {
    case SP_RIVAL_FFN: return l->phase[0].ffn * 16 + l->phase[1].ffn;
    case SP_RIVAL_ATTN: return l->phase[0].attn * 16 + l->phase[1].attn;
    case SP_RIVAL_MESH: return c->key[SPI_DEC_MESH];
    case SP_RIVAL_PRECISION: return c->key[SPI_DEC_PREC];
    case SP_RIVAL_EXPERTS: return c->key[SPI_DEC_EXPERTS] > 1;   /* with or without expert parallelism */
    case SP_RIVAL_OFFLOAD: return sp_layout_offloads(l);           /* with or without offload */
    default: return c->key[SPI_DEC_PIPE];
    }
}

/* ---- exact pre-solve reductions ---- */

/* (k1, k2, i) lexicographically, i the candidate order. */
static int rank_less(const double *k1, const double *k2, int i, int j)
{
    if (k1[i] != k1[j]) return k1[i] < k1[j];
    if (k2[i] != k2[j]) return k2[i] < k2[j];
    return i < j;
}

static _Thread_local const double *g_cost, *g_lat;
static int cmp_cost_lat(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (g_cost[i] != g_cost[j]) return g_cost[i] < g_cost[j] ? -1 : 1;
    if (g_lat[i] != g_lat[j]) return g_lat[i] < g_lat[j] ? -1 : 1;
    return (i > j) - (i < j);
}

static sp_status scratch(spi_space *s, int m)
{
    if (m <= s->scap) return SP_OK;
    int cap = s->scap ? s->scap : 1024;
    while (cap < m) cap *= 2;
    int *ix = realloc(s->sidx, (size_t)cap * sizeof *ix);
    if (ix) s->sidx = ix;
    double *a = realloc(s->sk1, (size_t)cap * sizeof *a);
    if (a) s->sk1 = a;
    double *b = realloc(s->sk2, (size_t)cap * sizeof *b);
    if (b) s->sk2 = b;
    double *c = realloc(s->sk3, (size_t)cap * sizeof *c);
    if (c) s->sk3 = c;
    unsigned char *k = realloc(s->skeep, (size_t)cap);
    if (k) s->skeep = k;
    if (!ix || !a || !b || !c || !k) return spi_fail(SP_ENOMEM, "planner: out of memory");
    s->scap = cap;
    return SP_OK;
}

sp_status spi_space_reduce(spi_space *s, int from, const spi_reduce *r)
{
    const sp_plan_opts *o = r->o;
    const int m = s->n - from;
    if (m <= 0) return SP_OK;
    SP_CHECK(scratch(s, m));
    const spi_cand *C = s->c + from;
    double *k1 = s->sk1, *k2 = s->sk2, *lat = s->sk3;
    int *idx = s->sidx;
    unsigned char *keep = s->skeep;
    int n_adm = 0;
    for (int i = 0; i < m; i++) {
        const spi_cand *c = &C[i];
        keep[i] = 0;
        k1[i] = r->fit_only ? 0.0 : spi_cand_objective(s, c, o);
        k2[i] = r->fit_only ? 0.0 : spi_cand_objective2(s, c, o);
        lat[i] = spi_cand_latency(s, c, o->latency_metric);
        if (spi_cand_admissible(s, c, o)) idx[n_adm++] = i;   /* ascending */
    }
    if (r->main) {
        int best = -1;
        for (int a = 0; a < n_adm; a++)
            if (best < 0 || rank_less(k1, k2, idx[a], best)) best = idx[a];
        if (best >= 0) keep[best] = 1;
    }
    if (r->frontier && n_adm) {
        /* k2 is free again once main is done: reuse it for the cost metric */
        for (int a = 0; a < n_adm; a++)
            k2[idx[a]] = spi_cand_cost(s, &C[idx[a]], o->latency_metric, o->cost_metric);
        g_cost = k2;
        g_lat = lat;
        qsort(idx, (size_t)n_adm, sizeof *idx, cmp_cost_lat);
        double run = INFINITY;
        for (int a = 0; a < n_adm; a++)
            if (lat[idx[a]] < run) {
                keep[idx[a]] = 1;
                run = lat[idx[a]];
            }
        if (r->rivals)   /* k2 back to the tie-break term */
            for (int a = 0; a < n_adm; a++) k2[idx[a]] = spi_cand_objective2(s, &C[idx[a]], o);
    }
    if (r->rivals) {
        /* per kind, the rank-minimum of each value: an open-addressing table
         * of (value, best candidate) in idx (free again) */
        int hcap = 1;
        while (hcap < 2 * m) hcap *= 2;
        int64_t *hv = malloc((size_t)hcap * sizeof *hv);
        int *hb = malloc((size_t)hcap * sizeof *hb);
        if (!hv || !hb) {
            free(hv);
            free(hb);
            return spi_fail(SP_ENOMEM, "planner: out of memory");
        }
        for (int k = 0; k < SP_RIVAL_KIND_COUNT; k++) {
            for (int h = 0; h < hcap; h++) hb[h] = -1;
            for (int i = 0; i < m; i++) {
                int64_t v = spi_cand_kind_value(&C[i], (sp_plan_rival_kind)k);
                uint64_t h = ((uint64_t)v * 0x9E3779B97F4A7C15ull) >> 20;
                for (;; h++) {
                    int b = (int)(h & (uint64_t)(hcap - 1));
                    if (hb[b] < 0) {
                        hv[b] = v, hb[b] = i;
                        break;
                    }
                    if (hv[b] == v) {
                        if (rank_less(k1, k2, i, hb[b])) hb[b] = i;
                        break;
                    }
                }
            }
            for (int h = 0; h < hcap; h++)
                if (hb[h] >= 0) keep[hb[h]] = 1;
        }
        free(hv);
        free(hb);
    }
    int w = from;
    for (int i = 0; i < m; i++)
        if (keep[i]) {
            if (from + i != w) s->c[w] = s->c[from + i];
            w++;
        }
    s->n = w;
    return SP_OK;
}

sp_status spi_space_append(spi_space *dst, const spi_space *src, const spi_reduce *r)
{
    if (dst->n + src->n > dst->cap) {
        int cap = dst->cap ? dst->cap : 1024;
        while (cap < dst->n + src->n) cap *= 2;
        spi_cand *p = realloc(dst->c, (size_t)cap * sizeof *p);
        if (!p) return spi_fail(SP_ENOMEM, "planner: out of memory for %d candidates", cap);
        dst->c = p;
        dst->cap = cap;
    }
    if (src->n) memcpy(dst->c + dst->n, src->c, (size_t)src->n * sizeof *src->c);
    int from = dst->n;
    dst->n += src->n;
    dst->n_inst = src->n_inst;
    memcpy(dst->inst, src->inst, (size_t)src->n_inst * sizeof *src->inst);
    return spi_space_reduce(dst, from, r);
}
