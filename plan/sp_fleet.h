/*
 * sp_fleet.h: fleets sized for a request rate.  How many instances of which
 * pools (chip kind, chips per instance, layout, batch) serve R requests per
 * second of P prompt and G generated tokens within a TTFT and a TPOT
 * target, at the least cost per hour (or the fewest chips).  Formulation in
 * doc/planner.md ("Fleets") and at the top of fleet.c.
 *
 *   sp_fleet_kind k[2] = {{&h100, 0}, {&a100, 64}};     // a100: 64 chips available
 *   sp_fleet_request q = {.rate = 20, .prompt = 1024, .gen = 256};
 *   sp_fleet_opts o;
 *   sp_fleet_opts_init(&o);
 *   o.ttft_s = 0.5;
 *   o.tpot_s = 0.05;
 *   sp_fleet *f;
 *   if (sp_fleet_solve(&model, k, 2, &q, &o, &f) != SP_OK)        // did it run?
 *       fprintf(stderr, "%s\n", sp_last_error());
 *   else if (f->result == SP_PLAN_OPTIMAL)                         // what did it find?
 *       for (int i = 0; i < f->best.n_pools; i++)
 *           printf("%d x %d %s\n", f->best.pools[i].instances,
 *                  f->best.pools[i].chips_per_instance, k[f->best.pools[i].kind].hw->name);
 *   sp_fleet_free(f);
 *
 * Pools.  An instance is one copy of the model on `chips_per_instance`
 * chips of one kind under one layout, serving batches of up to `batch`
 * requests.  Roles:
 *   colocated  prefill and decode on the same instance: a batch is its
 *              prompts' prefill then G decode steps (the cost model's
 *              total_s at that batch), service time S = total_s;
 *   prefill    prefill only (disaggregated): S = prefill_s + the KV send
 *              of the batch (the instance hands the cache over before it
 *              takes the next batch);
 *   decode     decode only (disaggregated): `batch` slots; a request holds
 *              a slot for H = its KV receive + (G + 1) decode steps (one
 *              step joining at a step boundary), each step priced at the
 *              full batch (sp_cost decode_step_s at the last context).
 *
 * Load model (every instance of a pool gets 1/n of the pool's requests,
 * which arrive as a Poisson process; checked against sp_fleet_simulate in
 * tests/check_fleet.c):
 *   utilisation   ρ = λ·S/b (batch servers) or λ·H/b (slots) ≤ util_cap
 *   batch wait    W = S/2 + ρ·S / (2·b·(1 − ρ))   (the batch in service,
 *                 half a service on average, plus the queue of whole
 *                 batches, Kingman's heavy-traffic term for b requests per
 *                 service); the mean over b ∈ 1..256, ρ ∈ 0.05..0.95 of a
 *                 greedy batch server (takes min(queue, b) whenever free)
 *                 never exceeds it in simulation
 *   slot wait     W = C(b, λH)·H / (b − λH)    (Erlang C: M/M/b, whose mean
 *                 wait bounds M/D/b's)
 *   TTFT          colocated, prefill: W + prefill_s (the prefill emits the
 *                 first token); the target is on the mean
 *   TPOT          colocated, decode: decode_step_s at the last context
 *   handoff       the KV cache of each request moves from a prefill instance
 *                 to a decode instance over the network between nodes: each
 *                 prefill chip sends its cache shard (the lowering's KV
 *                 bytes per chip at the prompt, sp_cost mem.kv) and each
 *                 decode chip receives its own in one message, priced as the
 *                 cost model prices a transfer between instances apart
 *                 (sp_cost_kv_xfer_apart: collective latency + inter-node
 *                 α + bytes/bw): send of kv_chip bytes for the prefill's
 *                 batch, receive of kv_chip/b bytes for one request, kv_chip
 *                 the decode layout's cache of its b sequences at the prompt
 *                 (exact for head-sharded attention, the chips' mean for
 *                 batch-sharded).  The handoff takes the larger of
 *                 the two; with a TPOT target each side must fit in it (the
 *                 second token then comes at most two targets after the
 *                 first: handoff, then a step), which makes every pairing
 *                 of a prefill and a decode pool admissible.  Torus
 *                 profiles give no network between slices: their
 *                 disaggregated pools are not built (stated in
 *                 sp_fleet.notes).
 */
#ifndef SP_FLEET_H
#define SP_FLEET_H
#include "sp_common.h"
#include "sp_hw.h"
#include "sp_layout.h"
#include "sp_model.h"
#include "sp_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Append-only. */
typedef enum sp_fleet_role {
    SP_FLEET_COLOCATED = 0,
    SP_FLEET_PREFILL = 1,
    SP_FLEET_DECODE = 2,
    SP_FLEET_ROLE_COUNT
} sp_fleet_role;
const char *sp_fleet_role_name(sp_fleet_role r);   /* "colocated", "prefill", "decode" */

typedef enum sp_fleet_objective {
    SP_FLEET_MIN_COST = 0,    /* dollars per hour: Σ instances · chips · cost_per_chip_hour */
    SP_FLEET_MIN_CHIPS = 1,   /* chips (ties: cost) */
    SP_FLEET_OBJECTIVE_COUNT
} sp_fleet_objective;
const char *sp_fleet_objective_name(sp_fleet_objective o);   /* "cost", "chips" */
sp_status sp_fleet_objective_parse(const char *s, sp_fleet_objective *out);

/* One chip kind the fleet may use. */
typedef struct sp_fleet_kind {
    const sp_hw *hw;          /* borrowed: valid until sp_fleet_free */
    int64_t available;        /* chips of this kind available; 0: no limit */
} sp_fleet_kind;

typedef struct sp_fleet_request {
    double rate;              /* requests per second, > 0 */
    int64_t prompt, gen;      /* tokens per request: prompt >= 1, gen >= 1 */
} sp_fleet_request;

typedef struct sp_fleet_opts {
    size_t size;                  /* sizeof(sp_fleet_opts) */
    sp_fleet_objective objective; /* default cost */
    double ttft_s;                /* mean time to first token target; 0: none */
    double tpot_s;                /* time per output token target; 0: none */
    double util_cap;              /* utilisation cap per instance, (0, 1); default 0.8 */
    int max_instance_chips;       /* chips per instance: the counts the topology allows
                                     (sp_plan_chip_counts) up to this; default 8 (a node of the GPU profiles) */
    int64_t max_batch;            /* batches 1, 2, 4, ... up to this; default 256 */
    int colocated;                /* allow colocated pools; default 1 */
    int disaggregated;            /* allow prefill + decode pools; default 1 */
    int full_space;               /* 1: every layout of the planner's space per pool; 0 (default):
                                     tensor meshes 1x1xT and one micro-batch per stage (the
                                     layouts serving systems run, and a tenth of the pricing) */
    sp_plan_weights weights;      /* default auto */
    sp_dtype kv;                  /* default bf16 */
    int time_limit_ms;            /* GLPK tm_lim per solve; default 10000 */
    int alternatives;             /* solve the best fleet of each other kind; default 1 */
} sp_fleet_opts;
void sp_fleet_opts_init(sp_fleet_opts *o);

/* One pool of a fleet: `instances` identical instances. */
typedef struct sp_fleet_pool {
    sp_fleet_role role;
    int kind;                     /* index into the kinds given to sp_fleet_solve */
    int instances;
    int chips_per_instance;
    int64_t chips;                /* instances · chips_per_instance */
    int64_t batch;
    sp_layout layout;             /* accepted by `estimate --layout` */
    double rate;                  /* requests/s the pool serves */
    double max_rate;              /* requests/s one instance may take: the cap and the targets */
    double utilisation;           /* ρ at rate / instances */
    double service_s;             /* S (colocated, prefill) or H (decode) */
    double wait_s;                /* the load model's mean wait at this load */
    double prefill_s;             /* the batch's prefill (0 for decode) */
    double decode_step_s;         /* one step at the last context (0 for prefill) */
    double ttft_s;                /* colocated, prefill: wait + prefill_s; decode: 0 */
    double tpot_s;                /* colocated, decode: decode_step_s; prefill: 0 */
    double handoff_s;             /* prefill: the KV send of a batch; decode: one request's receive; else 0 */
    int64_t kv_bytes_per_chip;    /* prefill, decode: the cache moved per chip per batch (lowering) */
    double cost_per_hour;         /* chips · cost_per_chip_hour */
} sp_fleet_pool;

/* A fleet: its pools and totals. */
typedef struct sp_fleet_choice {
    int found;
    sp_plan_result result;        /* what the solve found */
    int n_pools;
    sp_fleet_pool *pools;         /* owned by the sp_fleet */
    int64_t chips;
    double cost_per_hour;
    double cost_per_mtok;         /* dollars per million generated tokens at the rate */
} sp_fleet_choice;

/* The best fleet of another kind than the chosen one, and why it lost. */
typedef struct sp_fleet_alt {
    char kind[80];                /* "colocated", "disaggregated", "homogeneous", "hw:NAME" */
    sp_fleet_choice fleet;
    char reason[256];
} sp_fleet_alt;

typedef struct sp_fleet_stats {
    int layouts;                  /* layouts priced (every pool candidate's space) */
    int candidates[SP_FLEET_ROLE_COUNT];  /* pool candidates in the program, per role */
    int rows, cols;               /* the program's size */
    int solves;                   /* glp_intopt calls */
    double eval_s, glpk_s, total_s;
} sp_fleet_stats;

#define SP_FLEET_MAX_ALTS 12
typedef struct sp_fleet {
    sp_plan_result result;        /* OPTIMAL, FEASIBLE (time limit), INFEASIBLE, TIME_LIMIT */
    sp_fleet_request request;
    sp_fleet_opts opts;
    int n_kinds;
    sp_fleet_kind kinds[8];
    sp_fleet_choice best;
    int n_alts;
    sp_fleet_alt alts[SP_FLEET_MAX_ALTS];
    char notes[512];              /* what was not built and why (torus: no disaggregation, ...) */
    sp_fleet_stats stats;
} sp_fleet;

/*
 * NAME
 *   sp_fleet_solve - the cheapest fleet serving a request rate
 * DESCRIPTION
 *   For each chip kind, chip count (sp_plan_chip_counts up to
 *   max_instance_chips) and batch (powers of 2 up to max_batch), prices the
 *   planner's layout space (plan_space.c, the cost model) once for a whole
 *   request and once for the prompt alone, and keeps per role the layout
 *   that lets one instance take the most requests per second within the
 *   targets (a pool candidate).  A GLPK program then chooses how many
 *   instances of every candidate, and the rate each serves: the rate is
 *   met, the prefill pools' rate equals the decode pools', each instance
 *   stays within its candidate's admissible rate, each kind within its
 *   available chips; objective cost per hour or chips.  With
 *   opts->alternatives, one more solve per other kind of fleet.
 *   kinds: 1..8, each with cost_per_chip_hour > 0 for the cost objective.
 * RETURNS
 *   SP_OK when it ran (read (*out)->result); SP_EINVAL for bad arguments
 *   (a kind without a price under the cost objective names it);
 *   SP_ESOLVER; SP_ENOMEM.  On SP_OK *out is new: free with sp_fleet_free.
 */
sp_status sp_fleet_solve(const sp_model *m, const sp_fleet_kind *kinds, int n_kinds, const sp_fleet_request *q,
                         const sp_fleet_opts *opts, sp_fleet **out);
void sp_fleet_free(sp_fleet *f);

/* The load model's mean waits (above): a greedy batch server of b requests
 * per service S at λ requests/s, and b slots held H seconds each.  +inf at
 * or beyond saturation. */
double sp_fleet_batch_wait(double lambda, double S, int64_t b);
double sp_fleet_slot_wait(double lambda, double H, int64_t b);

/* What a discrete-event simulation of the fleet measured. */
typedef struct sp_fleet_sim_pool {
    int64_t served;               /* requests that went through the pool */
    double mean_wait_s;           /* mean queueing (batch: until its batch starts; decode: for a slot) */
    double mean_ttft_s;           /* colocated, prefill */
    double utilisation;           /* served · S (or H) / (b · instances · span) */
} sp_fleet_sim_pool;

/*
 * NAME
 *   sp_fleet_simulate - Poisson arrivals through a fleet, event by event
 * DESCRIPTION
 *   `requests` arrivals at f->request.rate (exponential gaps, xorshift64
 *   seeded by seed: the same seed gives the same figures) go to a pool with
 *   probability its share of the rate and to one of its instances uniformly;
 *   colocated and prefill instances run greedy batches of up to `batch`
 *   requests taking service_s; a prefill batch's requests reach a decode
 *   pool (by share) after the larger of the two pools' handoff_s and wait
 *   for one of its instance's `batch` slots (FCFS), held service_s.  The
 *   first tenth of the arrivals warms up and is not measured.  out has
 *   f->best.n_pools entries.
 * RETURNS
 *   SP_OK; SP_EINVAL when the fleet has no pools or requests < 100; SP_ENOMEM.
 */
sp_status sp_fleet_simulate(const sp_fleet *f, int64_t requests, uint64_t seed, sp_fleet_sim_pool *out);

/* JSON form (a new json_t * reference):
 * {"status", "objective", "request": {"rate", "prompt", "gen"}, "targets": {"ttft_s", "tpot_s", "util_cap"},
 *  "chips", "cost_per_hour", "cost_per_mtok", "pools": [{"role", "hw", "instances", "chips_per_instance",
 *  "chips", "layout", "batch", "rate", "utilisation", "ttft_s", "tpot_s", "wait_s", "service_s",
 *  "handoff_s", "cost_per_hour", ...}], "alternatives": [{"kind", "status", "chips", "cost_per_hour",
 *  "reason", "pools"}], "notes", "stats"}.  "layout" is the text form `estimate --layout` reads. */
void *sp_fleet_to_json(const sp_fleet *f);

#ifdef __cplusplus
}
#endif
#endif
