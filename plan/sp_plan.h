/*
 * sp_plan.h: the planner.  Finds the best layouts of a model on N chips by a
 * mixed-integer program (GLPK) over the layout catalogue, priced by the cost
 * model (design.md §6; formulation in doc/planner.md and at the top of plan.c).
 *
 *   sp_model m; sp_hw hw; sp_error err;
 *   sp_model_find("palm-540b", &m, &err);
 *   sp_hw_find("tpu-v4", &hw, &err);
 *   sp_workload w = {.batch = 64, .prompt = 2048, .gen = 64};
 *   sp_plan_opts o;
 *   sp_plan_opts_init(&o);
 *   o.objective = SP_PLAN_MIN_COST;
 *   o.latency_metric = SP_PLAN_LAT_DECODE;
 *   o.max_latency_s = 0.050;               // 50 ms per generated token
 *   sp_plan *p;
 *   if (sp_plan_solve(&m, &hw, 64, &w, &o, &p) != SP_OK)   // did the solve run?
 *       fprintf(stderr, "%s\n", sp_last_error());
 *   else if (p->result == SP_PLAN_OPTIMAL)                 // what did it find?
 *       printf("%s\n", sp_layout_format(&p->chosen.layout, buf, sizeof buf));
 *   else if (p->result == SP_PLAN_INFEASIBLE)
 *       printf("short by %lld bytes; %d chips would fit\n",
 *              (long long)p->min_shortfall_bytes, p->min_chips_fit);
 *   sp_plan_free(p);
 *
 * The search space for (model, hw, N chips, batch B, prompt, gen):
 *   stages S | N (S <= layers), replicas R | N/S, tensor mesh X·Y·Z = N/(S·R)
 *   (ordered; on a torus the shapes that fit its dims; on a cluster every
 *   placement of the axes in the node, equivalent placements merged),
 *   weights bf16/int8 (+fp8 where the chip has an fp8 peak), KV bf16,
 *   micro-batches 1 when S = 1, else S, 2S, 4S where they divide B/R (when
 *   none does, the largest divisor of B/R below S: the bubble is priced), and
 *   (prefill, decode) × (FFN, attention) layouts sharing one weight storage.
 *   Layouts sp_cost_eval rejects (SP_EINVAL) are not part of the space.
 *   Pipelines split their layers evenly; sp_plan_solve also decides uneven
 *   splits (stage_layers, sp_layout.h) of every pipeline of 2..32 stages by a
 *   second program over priced stages (doc/planner.md, plan_stages.c), and
 *   its split joins the space when it beats every layout there.
 */
#ifndef SP_PLAN_H
#define SP_PLAN_H
#include "sp_common.h"
#include "sp_hw.h"
#include "sp_layout.h"
#include "sp_model.h"
#include "sp_cost.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What to optimise.  Append-only. */
typedef enum sp_plan_objective {
    SP_PLAN_MIN_LATENCY = 0,     /* the latency metric below */
    SP_PLAN_MIN_COST = 1,        /* chip-seconds per token (the cost metric below) */
    SP_PLAN_MAX_THROUGHPUT = 2,  /* tokens/s (sp_cost.tokens_per_s), usually under max_latency_s */
    SP_PLAN_OBJECTIVE_COUNT
} sp_plan_objective;

/* Which latency the latency objective, the bound and the frontier use. */
typedef enum sp_plan_latency {
    SP_PLAN_LAT_TOTAL = 0,       /* prefill + all decode steps (sp_cost.total_s) */
    SP_PLAN_LAT_DECODE = 1,      /* one decode step at the last context (decode_step_s) */
    SP_PLAN_LAT_PREFILL = 2,     /* the prompt (prefill_s) */
    SP_PLAN_LAT_COUNT
} sp_plan_latency;

/* Which cost the cost objective and the frontier use. */
typedef enum sp_plan_cost_metric {
    SP_PLAN_COST_TOTAL = 0,      /* cost_chip_s_per_token: chips·total_s / generated tokens */
    SP_PLAN_COST_PHASE = 1,      /* the latency metric's phase alone (paper, figure 1):
                                    decode: chips·decode_step_s / B per generated token;
                                    prefill: chips·prefill_s / (B·prompt) per prompt token;
                                    total: as SP_PLAN_COST_TOTAL */
    SP_PLAN_COST_COUNT
} sp_plan_cost_metric;

typedef enum sp_plan_weights {
    SP_PLAN_W_AUTO = 0, SP_PLAN_W_BF16 = 1, SP_PLAN_W_INT8 = 2, SP_PLAN_W_FP8 = 3, SP_PLAN_W_COUNT
} sp_plan_weights;

/* What the search found (kept apart from whether it ran: the sp_status). */
typedef enum sp_plan_result {
    SP_PLAN_OPTIMAL = 0,         /* proven optimal */
    SP_PLAN_FEASIBLE = 1,        /* a layout, not proven optimal (time limit hit after one was found) */
    SP_PLAN_INFEASIBLE = 2,      /* no layout fits in memory and meets the bounds */
    SP_PLAN_TIME_LIMIT = 3,      /* time limit hit before any layout was found */
    SP_PLAN_RESULT_COUNT
} sp_plan_result;

const char *sp_plan_objective_name(sp_plan_objective o);  /* "latency", "cost", "throughput" */
const char *sp_plan_latency_name(sp_plan_latency l);      /* "total", "decode", "prefill" */
const char *sp_plan_weights_name(sp_plan_weights w);      /* "auto", "bf16", "int8", "fp8" */
const char *sp_plan_result_name(sp_plan_result r);        /* "optimal", "feasible", "infeasible", "time_limit" */
/* Parse the names above; SP_EINVAL (with a message listing the names) otherwise. */
sp_status sp_plan_objective_parse(const char *s, sp_plan_objective *out);
sp_status sp_plan_latency_parse(const char *s, sp_plan_latency *out);
sp_status sp_plan_weights_parse(const char *s, sp_plan_weights *out);

typedef struct sp_plan_opts {
    size_t size;                     /* sizeof(sp_plan_opts) */
    sp_plan_objective objective;     /* default SP_PLAN_MIN_LATENCY */
    sp_plan_latency latency_metric;  /* default SP_PLAN_LAT_TOTAL */
    sp_plan_cost_metric cost_metric; /* default SP_PLAN_COST_TOTAL */
    double max_latency_s;            /* bound on latency_metric; 0 = none */
    double min_tokens_per_s;         /* bound on tokens_per_s; 0 = none */
    sp_plan_weights weights;         /* default auto: every precision the chip runs */
    sp_dtype kv;                     /* KV-cache dtype, default BF16 */
    int time_limit_ms;               /* GLPK tm_lim for each glp_intopt; default 10000 */
    int frontier;                    /* trace the cost-vs-latency frontier; default 1 */
    int max_frontier_points;         /* default 256 */
    int rivals;                      /* explain the best rival of each kind; default 1 */
    int search_min_chips;            /* INFEASIBLE: search upward for the smallest chip count that
                                        fits; default 1 */
    int max_chips;                   /* upper end of chip-count searches; 0: hw->max_chips, or
                                        4096 when the hardware gives none */
    /* The space narrowed to what a serving system can run (sp_autoconfig.h's
     * server profiles); every default (0) narrows nothing. */
    unsigned ffn_layouts;            /* bit 1u << sp_ffn_layout per FFN layout allowed */
    unsigned attn_layouts;           /* bit 1u << sp_attn_layout per attention layout allowed */
    unsigned weight_dtypes;          /* bit 1u << sp_dtype per weight precision `weights` may pick */
    int tensor_1d;                   /* 1: tensor meshes 1x1xT only (one tensor-parallel axis) */
    int microbatches_per_stage;      /* k > 0: pipelines run exactly k·stages micro-batches */
    int even_stages;                 /* 1: pipelines split their layers evenly only (no stage_layers) */
    int disaggregate;                /* 1: also split the chips into a prefill group and a decode group
                                        (separate groups, sp_layout.h), each from the space of its chip
                                        count, priced as the cost model prices groups; the pair is
                                        chosen when it beats every shared layout (doc/planner.md);
                                        default 0.  sp_plan_frontier(s) and sp_autoconfig refuse it
                                        (SP_ENOTSUP) */
    int offload;                     /* 1: the plan may keep weights and KV cache in host memory
                                        (offload_weights, offload_kv: sp_plan_solve only); 0
                                        (default): nothing is offloaded */
    const sp_ragged *workload;       /* a ragged batch (sp_ragged.h; borrowed): every layout priced
                                        by its actual tokens (sp_cost_eval_ragged), the workload w
                                        its padded batch (sp_workload_padded); the layouts the
                                        ragged lowering refuses are not part of the space.  Even
                                        splits only, nothing chunked; with offload or disaggregate
                                        SP_ENOTSUP, and sp_plan_frontier(s) refuse it (sp_plan_solve
                                        and sp_plan_min_chips take it).  NULL (default): w */
    int exhaustive;                  /* 1: sp_plan_solve prices every layout of the space; 0
                                        (default): layouts whose decode alone proves they can change
                                        no answer are not priced further (doc/planner.md, "Pruning
                                        by the decode bound"); the answers are the same */
} sp_plan_opts;

/* Defaults as above. */
void sp_plan_opts_init(sp_plan_opts *o);

/* One layout with its price. */
typedef struct sp_plan_point {
    sp_layout layout;
    sp_cost cost;
    int chips;
    int64_t batch;
    double latency_s;                /* opts.latency_metric of cost */
    double cost_s;                   /* opts.cost_metric of cost (chip-seconds per token) */
} sp_plan_point;

/* The other kinds of choice a rival can differ in.  Append-only. */
typedef enum sp_plan_rival_kind {
    SP_RIVAL_FFN = 0,        /* another (prefill, decode) FFN layout pair */
    SP_RIVAL_ATTN = 1,       /* another (prefill, decode) attention sharding */
    SP_RIVAL_MESH = 2,       /* another tensor mesh X×Y×Z or placement */
    SP_RIVAL_PRECISION = 3,  /* another weight precision */
    SP_RIVAL_PIPELINE = 4,   /* other stages / replicas / micro-batches */
    SP_RIVAL_EXPERTS = 5,    /* MoE models: without expert parallelism if the chosen layout has it, else with */
    SP_RIVAL_OFFLOAD = 6,    /* opts.offload: without offload if the chosen layout offloads (the best layout
                                that keeps everything in HBM), else with */
    SP_RIVAL_KIND_COUNT
} sp_plan_rival_kind;
const char *sp_plan_rival_kind_name(sp_plan_rival_kind k);  /* "ffn", "attention", "mesh", "precision", "pipeline", "experts",
                                                               "offload" */

typedef enum sp_plan_loss {
    SP_LOSS_MEMORY = 0,      /* does not fit: shortfall_bytes */
    SP_LOSS_BOUND = 1,       /* breaks max_latency_s or min_tokens_per_s */
    SP_LOSS_OBJECTIVE = 2,   /* fits, but worse in the objective */
    SP_LOSS_COUNT
} sp_plan_loss;

/* The best layout of one kind other than the chosen one (best by the
 * objective, memory ignored), and why it lost. */
typedef struct sp_plan_rival {
    sp_plan_rival_kind kind;
    sp_plan_loss loss;
    sp_plan_point point;
    int64_t shortfall_bytes;         /* SP_LOSS_MEMORY */
    double objective_delta;          /* rival − chosen, in the objective's unit (s, chip-s/token,
                                        or tokens/s lost) */
    char term[32];                   /* the cost term that grew most: "compute", "memory",
                                        "all-gather", ...  ("" when none grew) */
    char term_phase[16];             /* "prefill" or "decode" */
    double term_delta_s;             /* rival − chosen seconds in that term */
    char reason[256];                /* one line, for people */
} sp_plan_rival;

typedef struct sp_plan_stats {
    int candidates;                  /* layouts priced (in the space) */
    int rejected;                    /* layouts the cost model rejected (SP_EINVAL) */
    int feasible;                    /* candidates that fit in memory */
    int pruned;                      /* layouts not priced past their decode (opts.exhaustive) */
    int solves;                      /* glp_intopt calls */
    double eval_s;                   /* seconds in sp_cost_eval */
    double glpk_s;                   /* seconds in glp_* calls */
    double total_s;                  /* seconds in sp_plan_solve */
    int columns;                     /* candidates left in the MILP after the exact reductions
                                        (doc/planner.md) */
    /* the pipeline program (uneven splits, doc/planner.md; sp_plan_solve only) */
    int split_templates;             /* pipelines of 2..32 stages in the space */
    int split_kept;                  /* in the program (the others cannot beat the best layout) */
    int split_blocks;                /* (pipeline, stage kind, layers) blocks priced */
    int split_rows, split_cols;      /* the program's size */
    long split_nodes;                /* its branch-and-bound nodes (GLPK) */
    int split_better;                /* 1: its split beat every layout of the space, and is one */
    /* the offload program (opts.offload; doc/planner.md) */
    int offload_templates;           /* layouts offload may apply to */
    int offload_kept;                /* in the program (the others cannot beat the best layout) */
    int offload_blocks;              /* (layout, stage, KV fraction, streamed layers) blocks priced */
    int offload_rows, offload_cols;  /* the program's size */
    long offload_nodes;              /* its branch-and-bound nodes (GLPK) */
    int offload_better;              /* 1: its layout beat every layout of the space, and is one */
} sp_plan_stats;

/* One stage of the chosen layout: its layers, chips and their figures. */
typedef struct sp_plan_stage {
    int64_t first_layer, layers;     /* contiguous: stage 0 also holds the embedding, the last the LM head */
    int chips;                       /* replicas × X·Y·Z */
    int mesh[3];                     /* its tensor mesh (every stage's layouts and precision are the layout's) */
    double prefill_s;                /* one micro-batch's prompt through the stage */
    double decode_step_s;            /* one micro-batch's decode step at the last context */
    int64_t memory_bytes;            /* one chip of the stage */
    int64_t offload_layers;          /* its first layers with weights streamed from host memory */
    int64_t offload_kind_layers[SP_WKIND_COUNT]; /* its first layers whose attention's (FFN's)
                                        weights stream from host memory */
    double offload_kv;               /* fraction of its chips' KV sequences in host memory */
    int64_t host_bytes;              /* one chip's host memory (offload) */
} sp_plan_stage;

/* The search over separate prefill and decode groups (opts.disaggregate). */
typedef struct sp_plan_groups {
    int searched;                    /* the groups were searched (a prompt, generated tokens, >= 2 chips) */
    int found;                       /* a pair fits and meets the bounds: best */
    int chosen;                      /* 1: best beat every shared layout and is the plan's chosen layout */
    int proven;                      /* best is the best pair (the search ran to its end) */
    sp_plan_point best;              /* its layout is disaggregated; cost its pricing (sp_cost_eval) */
    double objective;                /* the plan's objective of best (smaller is better: −tokens/s for
                                        throughput); INFINITY when none */
    double shared_objective;         /* the same of the best shared layout; INFINITY when none */
    int prefill_candidates, decode_candidates;   /* fitting groups over every split of the chips */
    int rows, cols;                  /* the program's size before any cut (plan_groups.c) */
    int priced;                      /* pairs priced exactly (sp_cost_eval) */
    int retired;                     /* groups whose every open pair was priced (column fixed at 0) */
    int solves;                      /* glp_intopt calls */
    double eval_s;                   /* seconds pricing groups and pairs */
} sp_plan_groups;

typedef struct sp_plan {
    sp_plan_result result;
    sp_plan_opts opts;
    sp_workload workload;
    int chips;
    int has_chosen;                  /* result is OPTIMAL or FEASIBLE */
    sp_plan_point chosen;
    int n_frontier;                  /* cost-vs-latency frontier, latency descending */
    sp_plan_point *frontier;
    int n_rivals;
    sp_plan_rival *rivals;
    /* INFEASIBLE: */
    int64_t min_shortfall_bytes;     /* smallest memory shortfall over the space (-1: no layout applies) */
    int min_chips_fit;               /* smallest chip count > chips where some layout fits (0: none
                                        up to min_chips_searched, or not searched) */
    int min_chips_searched;          /* the search covered every count up to this one: opts.max_chips,
                                        or less when it stopped at opts.time_limit_ms */
    int64_t min_chips_bound;         /* no count below this fits: the model's weights and the KV
                                        cache at one byte per number over the usable HBM per chip */
    sp_plan_stats stats;
    int n_stages;                    /* has_chosen: the chosen layout's stages (0 for separate groups) */
    sp_plan_stage *stages;
    sp_plan_groups groups;           /* opts.disaggregate (frontier and rivals stay the shared layouts') */
    char offload_note[160];          /* opts.offload: why offload was not offered, or only in part
                                        ("" when it was offered in full) */
} sp_plan;

/*
 * NAME
 *   sp_plan_solve - best layout, frontier and rivals for one problem
 * SYNOPSIS
 *   sp_status sp_plan_solve(const sp_model *m, const sp_hw *hw, int chips,
 *                           const sp_workload *w, const sp_plan_opts *opts, sp_plan **out);
 * DESCRIPTION
 *   Builds the layout space (above), prices every layout with sp_cost_eval,
 *   and solves the MILP of plan.c with glp_intopt for opts->objective under
 *   the memory row and the bounds.  With opts->frontier, traces the frontier
 *   of opts->cost_metric vs opts->latency_metric by the epsilon-constraint
 *   method (one glp_intopt per point); with opts->rivals, solves once more per
 *   rival kind with the chosen value forbidden and the memory row dropped.
 *   When nothing fits, (*out)->result is SP_PLAN_INFEASIBLE with the smallest
 *   shortfall and, with opts->search_min_chips, the smallest chip count that fits.
 *   w->gen = 0 plans prefill only; w->prompt = 0 decode only.  opts may be NULL.
 * RETURNS
 *   SP_OK when the search ran (read (*out)->result); SP_EINVAL for bad
 *   arguments; SP_ESOLVER when GLPK failed; SP_ENOMEM.  On SP_OK, *out is a
 *   new plan: the caller frees it with sp_plan_free.
 */
sp_status sp_plan_solve(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                        const sp_plan_opts *opts, sp_plan **out);

/*
 * NAME
 *   sp_plan_frontier - one frontier across several chip counts and batch sizes
 * DESCRIPTION
 *   One MILP over the union of the spaces of every (chips[i], batches[j])
 *   (the instance is one more decision), traced by the epsilon-constraint
 *   method on opts->cost_metric vs opts->latency_metric (the CLI's
 *   `frontier` verb uses SP_PLAN_COST_PHASE with the decode and the prefill
 *   metric in turn, as in the paper's figure 1).  Points carry chips and batch.
 *   w->batch is ignored.  (*out)->chosen is the cheapest point.
 * RETURNS
 *   As sp_plan_solve.
 */
sp_status sp_plan_frontier(const sp_model *m, const sp_hw *hw, const int *chips, int n_chips,
                           const int64_t *batches, int n_batches, const sp_workload *w,
                           const sp_plan_opts *opts, sp_plan **out);

/*
 * NAME
 *   sp_plan_frontiers - sp_plan_frontier for several latency metrics at once
 * DESCRIPTION
 *   out[k] is what sp_plan_frontier gives with opts->latency_metric =
 *   metrics[k] (1 <= n_metrics <= SP_PLAN_LAT_COUNT), but every layout is
 *   priced once for all of them (the CLI's `frontier` verb: decode and
 *   prefill).  Each plan's stats.eval_s, candidates and rejected describe
 *   that one shared pricing.
 * RETURNS
 *   As sp_plan_solve; on an error every out[k] is NULL.
 */
sp_status sp_plan_frontiers(const sp_model *m, const sp_hw *hw, const int *chips, int n_chips,
                            const int64_t *batches, int n_batches, const sp_workload *w, const sp_plan_opts *opts,
                            const sp_plan_latency *metrics, int n_metrics, sp_plan **out);

/*
 * NAME
 *   sp_plan_min_chips - capacity query: the fewest chips that meet the targets
 * DESCRIPTION
 *   Tries the chip counts the topology allows in increasing order (torus:
 *   products a·b·c that fit its dims; cluster: 1, 2, 4, ..., chips per node,
 *   then whole nodes), up to opts->max_chips, solving each with opts (set
 *   max_latency_s and/or min_tokens_per_s as the targets).  The first count
 *   with a layout is returned in *chips_out with its plan.
 * RETURNS
 *   SP_OK with *chips_out and *out set; SP_EINFEASIBLE when no count up to
 *   the limit meets the targets (*out is NULL); other errors as sp_plan_solve.
 */
sp_status sp_plan_min_chips(const sp_model *m, const sp_hw *hw, const sp_workload *w, const sp_plan_opts *opts,
                            int *chips_out, sp_plan **out);

/*
 * NAME
 *   sp_plan_min_chips_targets - the fewest chips for each of several latency targets
 * DESCRIPTION
 *   What sp_plan_min_chips gives with opts->max_latency_s = targets_s[t] and
 *   objective cost, for every t at once: the counts are tried once, in the
 *   same order, each solved for its least latency (opts' other bounds kept);
 *   each target that latency meets gets the count and, in out[t], the
 *   cheapest layout meeting it.  chips_out[t] = 0 and out[t] = NULL for a
 *   target no count up to the limit meets.
 * RETURNS
 *   SP_OK (read chips_out); SP_EINVAL for a target <= 0; other errors as
 *   sp_plan_solve, with every out[t] NULL.  Each out[t] is a new plan: the
 *   caller frees it with sp_plan_free.
 */
sp_status sp_plan_min_chips_targets(const sp_model *m, const sp_hw *hw, const sp_workload *w, const sp_plan_opts *opts,
                                    const double *targets_s, int n, int *chips_out, sp_plan **out);

/* Chip counts the topology allows, ascending, from lo to hi inclusive; returns
 * how many were written (at most cap). */
int sp_plan_chip_counts(const sp_hw *hw, int lo, int hi, int *out, int cap);

/*
 * NAME
 *   sp_autoconfig - startup configuration: one layout, fast and deterministic
 * DESCRIPTION
 *   The best layout for opts->objective (opts may be NULL: minimum total
 *   latency) for `batch` sequences of w's prompt and gen on `chips` chips.
 *   No frontier, no rivals.  Ties are broken by a fixed candidate order, so
 *   the same inputs give the same layout.  Goes through the plan cache of
 *   sp_autoconfig.h (sp_autoconfig_ex with its default options).
 * RETURNS
 *   SP_OK with *out; SP_EINFEASIBLE when nothing fits (message says by how
 *   much); other errors as sp_plan_solve.
 */
sp_status sp_autoconfig(const sp_model *m, const sp_hw *hw, int chips, int64_t batch, const sp_workload *w,
                        const sp_plan_opts *opts, sp_layout *out);

void sp_plan_free(sp_plan *p);

/* JSON form (a new json_t * reference; caller json_decref()s):
 * {"status", "objective", "latency_metric", "chips", "workload",
 *  "chosen": {"layout", "costs"}, "frontier": [{"chips", "batch", "latency_s",
 *  "cost_chip_s_per_token", "layout", "costs"}], "rivals": [{"kind", "loss",
 *  "reason", ..., "layout", "costs"}], "infeasible": {...}, "stats": {...}}
 * where "costs" is sp_cost_to_json's object (the keys of `estimate --json`). */
void *sp_plan_to_json(const sp_plan *p);

#ifdef __cplusplus
}
#endif
#endif
