/*
 * sp_cost.h: prices the lowered program of a layout on a hardware description.
 *
 *   sp_workload w = {.batch = 64, .prompt = 2048, .gen = 64};
 *   sp_cost c;
 *   if (sp_cost_eval(&model, &hw, &layout, &w, NULL, &c) == SP_OK && c.feasible)
 *       printf("%.1f ms per token\n", c.decode_step_s * 1e3);
 *
 * Rules (design.md §5), each per step of the program:
 *   compute  = FLOPs / (peak of the matmul dtype × efficiency(FLOPs));
 *              weight-only int8/fp8 weights are dequantised, so the matmul
 *              runs at the bf16 peak (f32 weights at the f32 peak)
 *   memory   = (weight + KV + activation bytes) / (HBM bandwidth × hbm_bw)
 *   a step takes max(compute, memory) (roofline); collectives are priced by
 *   the alpha-beta models below, and combine with the rest per the profile's
 *   overlap rule: none = sum, full = max, fraction f = max + (1-f)·min.
 *   torus:   a mesh axis is a bidirectional ring on its own torus dimension;
 *            a group over d dimensions uses 2·d links per chip:
 *            t = bytes_received / (2·d·link_bw) + hops × hop_latency
 *            (all-to-all: × the mean ring distance K/4 when K > 4).
 *   cluster: a group of K = K_in (in a node) × K_out (nodes) chips runs
 *            hierarchically: all-gather/reduce-scatter of blocks of c bytes
 *            t = (K_out−1)·c/inter_bw + K_out·(K_in−1)·c/intra_bw + latencies;
 *            all-reduce twice that with c = S/K; all-to-all sends
 *            (K−K_in)·c across nodes and (K_in−1)·c inside.  A group inside
 *            one node (K_out = 1) is the single-tier formula.
 *   pipeline: stage s takes t_s per micro-batch; prefill takes
 *            Σ t_s + (M−1)·max t_s; a decode step (every sequence one token)
 *            takes max(M·max t_s, Σ t_s) (the generation schedule pays the
 *            bubble once, not per token).
 *   decode over G tokens: the trapezoid of the first and last step (exact
 *            while the same term dominates, since every term is linear in
 *            the context).
 */
#ifndef SP_COST_H
#define SP_COST_H
#include "sp_common.h"
#include "sp_hw.h"
#include "sp_layout.h"
#include "sp_lower.h"
#include "sp_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_workload {
    int64_t batch;    /* sequences */
    int64_t prompt;   /* prefill tokens per sequence (0: decode only, from an empty cache) */
    int64_t gen;      /* generated tokens per sequence (0: prefill only) */
} sp_workload;

/* Time of one program (one micro-batch on one stage) split by term. */
typedef struct sp_phase_cost {
    double time_s;                    /* with the overlap rule applied */
    double compute_s;                 /* Σ compute time of matmul/attention steps */
    double memory_s;                  /* Σ HBM time of all steps */
    double roofline_s;                /* Σ max(compute, memory) per step */
    double coll_s[SP_COLL_COUNT];     /* Σ time per collective kind */
    double comm_s;                    /* Σ of coll_s */
    int64_t comm_bytes;               /* bytes this chip sends (= receives) */
    int64_t flops;
} sp_phase_cost;

typedef struct sp_cost {
    int feasible;                 /* fits in memory on every stage */
    int64_t shortfall_bytes;      /* bytes over capacity on the worst stage (0 if feasible) */
    double prefill_s;             /* the whole batch's prompt */
    double decode_step_s;         /* one token for every sequence, at the last context */
    double decode_s;              /* all generated tokens */
    double total_s;               /* prefill + decode */
    double tokens_per_s;          /* generated tokens / total_s (prompt tokens / prefill_s when gen = 0) */
    double mfu;                   /* 2·params·tokens / (chips · peak · total_s) */
    double mfu_prefill, mfu_decode;
    double cost_chip_s_per_token; /* chips · total_s / generated tokens */
    sp_phase_cost prefill;        /* one micro-batch through every stage (terms summed over stages) */
    sp_phase_cost decode;         /* one micro-batch's step at the last context, same convention */
    int64_t comm_bytes_prefill;   /* per chip, whole prefill (all layers, micro-batches) */
    int64_t comm_bytes_decode_step;
    sp_mem_sizes mem;             /* worst stage */
    int64_t capacity;             /* HBM × usable fraction */
    int chips;
} sp_cost;

/* Options: NULL means defaults. */
typedef struct sp_cost_opts {
    size_t size;           /* sizeof(sp_cost_opts) */
    sp_dtype act_dtype;    /* activations: BF16 by default */
    int fresh;             /* 1: lower and price every phase afresh instead of reusing this
                              thread's memoised phase prices (same figures; for tests and
                              benchmarks) */
    int quiet;             /* 1: a layout that does not apply is SP_EINVAL without a message
                              (searches that probe many layouts) */
} sp_cost_opts;
void sp_cost_opts_init(sp_cost_opts *o);

/* Prices a layout for a workload.  SP_EINVAL when the layout does not apply
 * (message in sp_last_error()); an infeasible (too big) layout is SP_OK with
 * feasible = 0 and shortfall_bytes set. */
sp_status sp_cost_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                       const sp_cost_opts *opts, sp_cost *out);


/* Prices one program; context > 0 re-prices decode attention at that context. */
void sp_cost_program(const sp_program *p, const sp_hw *hw, int64_t context, sp_phase_cost *out);

/* Seconds one collective step takes on the layout's placement. */
double sp_cost_coll_time(const sp_hw *hw, const sp_layout *l, const sp_coll *c);

/* Chips in a node and nodes spanned by a group over `axes` (cluster
 * topologies; a torus reports the whole group in one tier). */
void sp_cost_group_tiers(const sp_hw *hw, const sp_layout *l, const char *axes, int *k_in, int *k_out);

/* The JSON form `estimate --json` prints, as a new Jansson reference (json_t *):
 * layout, feasible, shortfall_bytes, prefill_s, decode_step_s, decode_s, total_s,
 * tokens_per_s, mfu, mfu_prefill, mfu_decode, cost_chip_s_per_token,
 * comm_bytes_per_chip.{prefill,decode_step}, time_breakdown.{prefill,decode}.
 * {compute_s, memory_s, roofline_s, comm_s, all-gather, ...}, memory_per_chip.
 * {weights, gathered_weights, kv, activations, workspace, total, capacity}. */
void *sp_cost_to_json(const sp_cost *c, const sp_layout *l);

/* Longest context (tokens per sequence) whose KV cache fits in fraction
 * `kv_budget` of each chip's HBM for this batch and layout. */
sp_status sp_cost_max_context(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch,
                              double kv_budget, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
