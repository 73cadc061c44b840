/* spi_cost.h: the per-step rules the cost model's closed form and the
 * simulator share (internal to costmodel/).  Times are integer picoseconds
 * so that the closed form's shortcut over repeated layers (exact in max-plus
 * arithmetic) gives bit-for-bit the simulator's figure. */
#ifndef SPI_COST_H
#define SPI_COST_H
#include "spi_ckd.h"
#include "costmodel/sp_cost.h"
#include <string.h>
#include "sp_trace.h"

/* How a step occupies a chip's two streams (sp_cost.h, "Schedule"). */
enum {
    SPI_RUN_COMPUTE = 0,   /* compute stream */
    SPI_RUN_BLOCKING = 1,  /* communication stream, compute stream held until it ends */
    SPI_RUN_OVERLAP = 2,   /* communication stream only (marked overlappable) */
    SPI_RUN_RECV = 3       /* pipeline receive: 0 s on the chip (the sender's transfer carries it) */
};

/* A step's duration at up to two contexts (decode's first and last step
 * differ in attention only): [0] and [1]. */
typedef struct spi_step_run {
    int64_t dur_ps[2];     /* duration */
    int64_t pen_ps[2];     /* OVERLAP under a fraction rule: compute-stream time it costs */
    double pen_frac;       /* ... as a fraction of dur (1 - f) */
    int mode;
    unsigned char rd[4];   /* buffers it reads: src, src2, src3, wbuf (SP_BUF_NONE: none) */
    unsigned char dst;     /* buffer it writes */
} spi_step_run;

/* One program's steps priced at one or two contexts, with the breakdown
 * sums of each (layers counted n_layers times).  coef (optional, per step,
 * context [0]): the coefficient of each free parameter in the step's
 * duration. */
typedef struct spi_prog_run {
    spi_step_run run[SP_PART_COUNT][SP_PROG_MAX_STEPS];
    int overlaps;            /* some step runs in SPI_RUN_OVERLAP mode */
    int varied;              /* some layer step runs on part of the layers (offload, sp_step_on):
                                the schedule runs every layer, the shortcut does not apply */
    /* The closed form's shortcut: per part, the steps that interact with an
     * overlapping one (read or write a buffer it reads or writes, or use the
     * communication stream), each after the summed time of the compute
     * steps before it that do not (those only advance the compute stream:
     * their inputs are compute-stream outputs, ready by then) */
    int n_ops[SP_PART_COUNT];
    struct spi_op {
        int idx;                  /* the step (-1: the tail, add only) */
        int64_t add[2];
        /* its slots (spi_sched), resolved once: the start is the latest of
         * dep (its stream(s), then its inputs' and its output's slots; those
         * of SP_BUF_NONE, never written, left out), the end is written to
         * set and raises rdm (the read-by slots of its inputs) */
        unsigned char n_dep, n_set, n_rdm;
        unsigned char dep[2 + 4 + 2], set[3], rdm[4];
    } op[SP_PART_COUNT][SP_PROG_MAX_STEPS + 1];
    /* The slots the layer's ops read or write, streams first: the only part
     * of the state a layer changes or depends on, so the shortcut's test
     * for a repeated state compares these alone */
    int n_live;
    unsigned char live[2 + 2 * SP_BUF_COUNT];   /* [SPI_SLOTS] */
    sp_phase_cost sums[2];   /* every field but time_s */
    spi_ckd ck;              /* an int64 sum (FLOPs, bytes sent) that overflowed: the sums are not to be used */
} spi_prog_run;
typedef double spi_step_coefs[SP_PART_COUNT][SP_PROG_MAX_STEPS][SP_CP_COUNT];

/* Prices p's steps at context ctx[0] and, when ctx[1] > 0, at ctx[1] too
 * (0: as lowered), with cache's efficiencies (NULL: none, each looked up). */
void spi_cost_price_program(sp_cost_cache *cache, const sp_program *p, const sp_hw *hw, const int64_t ctx[2],
                            spi_prog_run *out, spi_step_coefs *coef);

/* A chip's timeline state: slot 0 the compute stream's free time, 1 the
 * communication stream's, 2 + b the time buffer b is written, 2 + B + b
 * the time its last reader so far ends (a buffer is rewritten only after
 * it has been read: one copy of each buffer, as sp_lower sizes them). */
_Static_assert(SP_BUF_COUNT <= 64, "spi_step_run keeps buffers in a byte, sets of them in 64 bits");
enum { SPI_SLOT_COMP = 0, SPI_SLOT_COMM = 1, SPI_SLOT_BUF = 2, SPI_SLOT_READ = 2 + SP_BUF_COUNT,
       SPI_SLOTS = 2 + 2 * SP_BUF_COUNT };
_Static_assert(sizeof ((spi_prog_run *)0)->live == SPI_SLOTS, "spi_prog_run.live holds every slot");
typedef struct spi_sched {
    int64_t t[SPI_SLOTS];
    double (*vec)[SP_CP_COUNT];   /* optional [SPI_SLOTS]: the coefficients of each slot's time */
} spi_sched;

/* Earliest start of step s on this chip (its streams and input buffers),
 * and the slot that sets it (*from).  spi_sched_commit runs s from `start`
 * (>= that; a collective waits for its slowest member) with its duration
 * at context k (spi_step_run); coef (NULL: none): the step's
 * coefficients, with st->vec set, from_vec those of the start time.
 * Returns the end.  Inline: the planner runs them for every step it
 * prices. */
static inline int64_t spi_sched_dep(const spi_sched *st, int slot, int64_t t, int *from)
{
    if (st->t[slot] > t) {
        *from = slot;
        return st->t[slot];
    }
    return t;
}

static inline int64_t spi_sched_ready(const spi_sched *st, const spi_step_run *r, int *from)
{
    int mode = r->mode;
    int f = mode == SPI_RUN_OVERLAP ? SPI_SLOT_COMM : SPI_SLOT_COMP;
    int64_t t = st->t[f];
    if (mode == SPI_RUN_BLOCKING || mode == SPI_RUN_RECV) {
        if (st->t[SPI_SLOT_COMM] > t) {
            t = st->t[SPI_SLOT_COMM];
            f = SPI_SLOT_COMM;
        }
    }
    /* inputs written (buffer 0, SP_BUF_NONE, is never written: its slots stay 0) */
    for (int i = 0; i < 4; i++) t = spi_sched_dep(st, SPI_SLOT_BUF + r->rd[i], t, &f);
    if (r->dst != SP_BUF_NONE) {
        t = spi_sched_dep(st, SPI_SLOT_BUF + r->dst, t, &f);    /* accumulates into it, or rewrites it in order */
        t = spi_sched_dep(st, SPI_SLOT_READ + r->dst, t, &f);   /* its readers are done with it */
    }
    *from = f;
    return t;
}

static inline int64_t spi_sched_commit(spi_sched *st, const spi_step_run *r, int k, int64_t start,
                                       const double *from_vec, const double *coef)
{
    int64_t end = start + r->dur_ps[k];
    double v[SP_CP_COUNT];
    if (coef)   /* with st->vec */
        for (int j = 0; j < SP_CP_COUNT; j++) v[j] = from_vec[j] + coef[j];
    /* the slots this step sets: its stream(s) and its output */
    int slots[3], n = 0;
    if (r->mode != SPI_RUN_OVERLAP) slots[n++] = SPI_SLOT_COMP;
    if (r->mode != SPI_RUN_COMPUTE) slots[n++] = SPI_SLOT_COMM;
    if (r->dst != SP_BUF_NONE) slots[n++] = SPI_SLOT_BUF + r->dst;
    for (int i = 0; i < n; i++) {
        st->t[slots[i]] = end;
        if (coef) memcpy(st->vec[slots[i]], v, sizeof v);
    }
    for (int i = 0; i < 4; i++) {
        int slot = SPI_SLOT_READ + r->rd[i];
        if (r->rd[i] != SP_BUF_NONE && r->rd[i] != r->dst && st->t[slot] < end) {
            st->t[slot] = end;
            if (coef) memcpy(st->vec[slot], v, sizeof v);
        }
    }
    if (r->pen_ps[k]) {   /* overlap fraction: the compute stream pays its share */
        st->t[SPI_SLOT_COMP] += r->pen_ps[k];
        if (coef)
            for (int j = 0; j < SP_CP_COUNT; j++) st->vec[SPI_SLOT_COMP][j] += coef[j] * r->pen_frac;
    }
    return end;
}

/* Seconds to whole picoseconds (nearest; durations are >= 0); exact back
 * from (double)ps * 1e-12 for any time under hours.  Picoseconds in an int64
 * reach 106 days: a program is scheduled only when its summed step times stay
 * under SPI_PS_MAX_S (cost.c checks), and a step past it is clamped rather
 * than converted out of range (undefined). */
#define SPI_PS_MAX_S 1e6
static inline int64_t spi_ps(double s) { return s < SPI_PS_MAX_S ? (int64_t)(s * 1e12 + 0.5) : (int64_t)(SPI_PS_MAX_S * 1e12); }

/* Chips time-sharing cores (chip.shared_cores = C): n chips of l compute at
 * once (every tensor chip of every replica, times the stages busy together),
 * so a step of one of them takes max(1, n / C) times as long as on a core of
 * its own; 1 when the profile's chips do not share cores.  The stages busy
 * together: S stages and M micro-batches fill S·M stage-slots of a flow shop
 * S + M − 1 slots long, so S·M / (S + M − 1) on average (S while it is full,
 * fewer while it fills and drains, when the idle stages' cores run the busy
 * ones: a 2-stage, 2-micro-batch prefill of 4 chips on 2 cores was priced
 * 20-31 % over its measured time with S = 2 throughout). */
static inline double spi_chips_computing(const sp_layout *l)
{
    int S = l->stages, M = l->microbatches > 0 ? l->microbatches : 1;
    return (double)sp_layout_chips(l) / S * ((double)S * M / (S + M - 1));
}
static inline double spi_core_share(const sp_hw *hw, const sp_layout *l)
{
    if (hw->shared_cores <= 0) return 1.0;
    double n = spi_chips_computing(l);
    return n > hw->shared_cores ? n / hw->shared_cores : 1.0;
}

/* The same stretch for the communication figures (collectives, send/recv,
 * the per-token barrier) when the profile states them per chip with a core
 * (chip.comm_shares_cores), else 1. */
static inline double spi_comm_share(const sp_hw *hw, const sp_layout *l)
{
    return hw->comm_shares_cores ? spi_core_share(hw, l) : 1.0;
}

/* What each collective (send/recv included) adds for the wake-up of a core
 * that went idle while its chip waited, at this layout's chips per core
 * (sp_hw_idle_wake: chip.idle_wake_by_share as calibrate measured it inside
 * a program, else chip.idle_wake_s with 1/n of it at n chips a core, a
 * first-order rule exact at n = 1).  Not fitted by calibrate --fit: 0 in
 * every datasheet profile. */
static inline double spi_idle_wake(const sp_hw *hw, const sp_layout *l)
{
    return sp_hw_idle_wake(hw, spi_core_share(hw, l));
}

/* 1 when the group over mesh axes `mask` (SP_AXES_* bits) of chip 0 lies
 * on one core of chips sharing cores (chip.shared_cores = C > 0; the
 * executor pins chip i to core i mod C): its members take turns on that
 * core, and no core goes idle while one waits for another, so the group's
 * collectives pay no wake-up (measured: a 2x2 mesh on 2 cores, decode, the
 * groups {0, 2} 8-12 µs a collective, the groups {0, 1} 22-46 µs).  0
 * otherwise, and without shared cores. */
int spi_group_one_core(const sp_hw *hw, const sp_layout *l, unsigned mask);

/* The per-token barrier (sp_cost.h, "pipeline"): with chip.token_sync_s > 0
 * the runtime synchronises every chip after each generated token, at
 * token_sync_s per chip beyond the first (stretched by spi_comm_share), so
 * a decode step is a flow shop of the stages and micro-batches and then the
 * barrier, which also waits for an idle core's wake-up like a collective.  Returns 1 with the barrier's whole picoseconds in *ps when the
 * profile has one, else 0 (*ps = 0).  The closed form adds *ps to its flow
 * shop, the simulator holds every chip until the barrier ends: one rule,
 * one figure, to the bit. */
static inline int spi_token_sync(const sp_hw *hw, const sp_layout *l, int64_t *ps)
{
    /* the barrier is a collective of every chip: those that wait for the last sleep, and their
     * cores wake like a collective's (spi_idle_wake; none when every chip is on one core) */
    int n = sp_layout_chips(l);
    double wake = n > 1 && !spi_group_one_core(hw, l, SP_AXES_ALL) ? spi_idle_wake(hw, l) : 0.0;
    *ps = hw->token_sync_s > 0 ? spi_ps(hw->token_sync_s * (double)(n - 1) * spi_comm_share(hw, l) + wake) : 0;
    return hw->token_sync_s > 0;
}
/* The KV transfer between separate chip groups, message by message, as
 * sp_cost_kv_xfer prices it (sp_cost.h): fn(ctx, c, d, bytes, seconds) for
 * every (prefill chip c, decode chip d) pair that moves bytes (group ranks),
 * c ascending, d ascending within c; seconds = α + bytes·β on the pair's
 * tier.  *kv_bytes, *token_bytes (optional): the totals by kind.  The
 * transfer takes spi_cost_kv_xfer_seconds(hw, messages, the largest of
 * every chip's summed message times). */
typedef sp_status (*spi_xfer_msg_fn)(void *ctx, int c, int d, int64_t bytes, double seconds);
sp_status spi_cost_kv_xfer_msgs(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch, int64_t prompt,
                                sp_xfer_place where, spi_xfer_msg_fn fn, void *ctx, int64_t *kv_bytes,
                                int64_t *token_bytes);
double spi_cost_kv_xfer_seconds(const sp_hw *hw, int64_t messages, double busiest_s);

#endif
