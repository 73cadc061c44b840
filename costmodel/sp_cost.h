/*
 * sp_cost.h: prices the lowered program of a layout on a hardware description.
 *
 *   sp_workload w = {.batch = 64, .prompt = 2048, .gen = 64};
 *   sp_cost c;
 *   if (sp_cost_eval(&model, &hw, &layout, &w, NULL, &c) == SP_OK && c.feasible)
 *       printf("%.1f ms per token\n", c.decode_step_s * 1e3);
 *
 * Rules (design.md §5), each per step of the program:
 *   compute step (every step that is not communication):
 *     t = dispatch_s + max(compute, memory)              (roofline)
 *     compute = FLOPs / (peak × eff): matmul and logits at
 *               sp_hw_matmul_shape_eff(m, n, k) (the FLOPs curve × the tile
 *               utilisation of each dimension), attention at the FLOPs curve;
 *               int8/fp8 weights are dequantised, so the matmul runs at the
 *               bf16 peak (f32 weights at the f32 peak).  A small-M (decode)
 *               matmul is bound by its weight bytes through `memory`.
 *               Attention runs at sp_hw_attention_eff (the profile's curve
 *               by head width when it has one: a CPU's attention kernel is
 *               far from its matmul rate); an activation step, when the
 *               profile gives chip.act_elem_s, at elements × that (its
 *               transcendental arithmetic: GELU's tanh, SiLU's exp); with
 *               chip.step_elem_s, norms, adds, copies, the KV store and the
 *               embedding at Σ elements × seconds per element of each
 *               kernel (sp_lower_step_elems), attention at its FLOPs' time
 *               plus its copies' and RoPE's.
 *     memory  = bytes / (hbm_bw × sp_hw_memory_eff(bytes)), bytes = weights
 *               + KV read + KV written + activations; attention's FLOPs and
 *               KV bytes read are those of the context reached.
 *     CPU chips sharing cores (chip.shared_cores = C): a compute step of a
 *     layout whose n = replicas × X·Y·Z × min(stages, micro-batches) chips
 *     compute at once takes max(1, n / C) times as long; with
 *     chip.comm_shares_cores so does every collective and send/recv, and
 *     the per-token barrier (spi_core_share, spi_comm_share).  With
 *     chip.idle_wake_s, each collective and send/recv also waits for an
 *     idle core to wake: idle_wake_s / max(1, n / C) (spi_idle_wake), but
 *     not a collective whose group is on one core (spi_group_one_core);
 *     the per-token barrier waits for it too.
 *   collective (alpha-beta, a latency α per step of the algorithm and a
 *   bandwidth β = 1/bw per byte, per tier; c = one chip's block):
 *     cluster (tier near = inside a node, far = between nodes; a group of
 *     K = k_in (in a node) × k_out (nodes) chips, hierarchically):
 *       all-gather, reduce-scatter  (k_out−1)(α_far + c β_far) + (k_in−1)(α_near + k_out c β_near)
 *                                   (ring over nodes on each chip's own
 *                                   block, then inside the node; RS mirrored)
 *       all-reduce                  twice that with c = bytes / K (RS + AG)
 *       all-to-all                  (k_in−1)(α_near + c β_near) + (K−k_in)(α_far + c β_far)
 *                                   (pairwise exchange, c per peer)
 *       send/recv                   α + bytes β on the tier a stage hand-off
 *                                   crosses (far once a stage fills a node);
 *                                   stages of their own mesh: k α + bytes β
 *                                   for k peers (coll.group − 1), far once
 *                                   the pipeline exceeds a node
 *     torus (sp_layout_torus_map: the group spans F_d chips of physical
 *     dimension d of the rented slice; α = hop_latency, β = 1/link_bw):
 *       steps = Σ_d (F_d − 1) (× 2 for all-reduce), directions
 *       D = Σ_d [F_d > 1] (2 when F_d is the whole ring of d, else 1),
 *       t = steps α + bytes_received β / D  (bidirectional rings, the data
 *       split over every direction the group has); all-to-all × F_max/4
 *       when F_max > 4 (mean ring distance); send/recv α + bytes β.
 *   Schedule (one program on one chip; the simulator's rule, sp_sim.h):
 *     a compute stream and a communication stream, each in program order.
 *     A step starts when its stream is free and its inputs (src, src2,
 *     src3, wbuf, and dst when it accumulates or is rewritten) are written.
 *     A collective the lowering marks overlappable runs on the
 *     communication stream under compute (prefetched weight gathers,
 *     all-to-alls), so only its consumers wait for it; any other
 *     collective holds the compute stream too.  The profile's overlap rule
 *     refines this: "none" holds the compute stream for every collective,
 *     {"fraction": f} charges the compute stream (1−f) of each overlapped
 *     collective's time.  A pipeline receive costs nothing on the receiver
 *     (the sender's send carries the transfer) and gates the micro-batch.
 *     The program's time is when both streams are idle.  Times are whole
 *     picoseconds.
 *   pipeline: stage s takes t_s per micro-batch (its program's time, a
 *            micro-batch starting once the previous one is done and its
 *            input has arrived: a flow shop); prefill takes
 *            Σ t_s + (M−1)·max t_s (M < stages included: the bubble);
 *            a chunked prefill (sp_lower.h: U passes per micro-batch, t_s
 *            their sum, sp_lower_pass_terms) runs its passes as the units:
 *            (Σ t_s + (M·U − 1)·max t_s) / U; a decode step (every sequence one token)
 *            takes max(M·max t_s, Σ t_s) (the generation schedule pays the
 *            bubble once, not per token).
 *            With chip.token_sync_s > 0 (a runtime that synchronises every
 *            chip after each token, as our CPU executor does), a decode
 *            step is Σ t_s + (M−1)·max t_s + token_sync_s·(chips − 1) instead
 *            (× max(1, n / C) with chip.comm_shares_cores).
 *   decode over G tokens: the trapezoid of the first and last step (exact
 *            while the same term dominates, since every term is linear in
 *            the context).
 *
 * Free parameters (sp_cost_param): the model is linear in them at a given
 * operating point (which roofline side binds, which path is critical):
 *   time = Σ coef_j · param_j
 * so sp_cost_coefs gives, for a priced layout, the coefficient of each, for
 * least-squares or least-absolute-deviation fits of a profile.
 */
#ifndef SP_COST_H
#define SP_COST_H
#include "sp_common.h"
#include "sp_hw.h"
#include "sp_layout.h"
#include "sp_lower.h"
#include "sp_model.h"
#include "sp_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_workload {
    int64_t batch;    /* sequences */
    int64_t prompt;   /* prefill tokens per sequence (0: decode only, from an empty cache) */
    int64_t gen;      /* generated tokens per sequence (0: prefill only) */
} sp_workload;
/* The ragged batch r (sp_ragged.h) padded to its longest prompt and generation. */
sp_workload sp_workload_padded(const sp_ragged *r);

/* Time of one program (one micro-batch on one stage) split by term. */
typedef struct sp_phase_cost {
    double time_s;                    /* the schedule's makespan (both streams idle) */
    double compute_s;                 /* Σ compute time of matmul/attention steps */
    double memory_s;                  /* Σ HBM time of all compute steps */
    double roofline_s;                /* Σ max(compute, memory) per compute step */
    double dispatch_s;                /* Σ dispatch cost of the compute steps */
    double coll_s[SP_COLL_COUNT];     /* Σ time per collective kind */
    double comm_s;                    /* Σ of coll_s */
    int64_t comm_bytes;               /* bytes this chip sends (= receives) */
    int64_t flops;
    double host_s;                    /* Σ time of the host-link copies (offload) */
    int64_t host_bytes;               /* bytes over the host link, both directions */
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
    int64_t host_peak;            /* offload: host memory of the stage that holds the most (mem.host_*
                                     is the device-worst stage's) */
    int64_t host_capacity;        /* host.memory_bytes per chip */
    int64_t host_shortfall_bytes; /* host_peak over host_capacity (0 if it fits); feasible needs both */
    int64_t chips;
    sp_torus_map torus;           /* torus: the rented slice and how the axes lie on it
                                     (sp_layout_torus_map); all 0 on a cluster */
    /* Separate prefill and decode chip groups (sp_layout_disaggregated; 0 otherwise).
     * prefill_s, the prefill breakdown and comm_bytes_prefill are the prefill
     * group's; decode_step_s, decode_s, the decode breakdown and
     * comm_bytes_decode_step the decode group's; mem the group with the larger
     * total, feasible both groups.  One batch's latency total_s = prefill_s +
     * kv_transfer_s + decode_s.  Steady state, prefill of batch i+1 runs while
     * batch i decodes; each group holds one batch's cache, so the transfer
     * of batch i+1 waits for both (prefill i+1 done, decode i done) and both
     * wait for it: a batch every period_s = max(prefill_s, decode_s) +
     * kv_transfer_s (the slower group sets the rate).  tokens_per_s,
     * cost_chip_s_per_token and mfu are taken at that rate; mfu_prefill and
     * mfu_decode on each group's own chips. */
    int disaggregated;
    double kv_transfer_s;                       /* sp_cost_kv_xfer, the groups in one job */
    int64_t kv_transfer_bytes;                  /* everything that crosses between the groups */
    double period_s;
    int64_t group_chips[SP_PHASE_COUNT];
    int group_feasible[SP_PHASE_COUNT];
    int64_t group_shortfall[SP_PHASE_COUNT];
    sp_mem_sizes group_mem[SP_PHASE_COUNT];     /* each group's worst stage */
} sp_cost;

/* 1 if the host link bounds a phase's step (offload): its copies take at
 * least as long as all the rest the chip does (roofline + dispatch +
 * communication), so no overlap can hide them and the step takes at least
 * host_s. */
int sp_cost_host_bound(const sp_phase_cost *p);

/* Options: NULL means defaults. */
/* One stage's times as sp_cost_eval priced them (sp_stage_cost's figures). */
typedef struct sp_stage_time {
    int64_t prefill_ps, decode1_ps, decode_ps;   /* ps; 0 for a phase the workload does not run */
    int64_t prefill_units;                       /* prefill passes per micro-batch */
} sp_stage_time;

/* ---- pricing caches ----
 * What an evaluation can reuse from the ones before it, owned by the
 * caller: the efficiencies read off the profile's curves, the phase
 * programs lowered and priced (by sp_lower_key: a search prices each
 * phase's program under many layouts of the other phase and many pipeline
 * splits), the last (model, workload) whose check passed, and the programs
 * an evaluation lowers into (~1.5 MB in all, zeroed pages until used).  A
 * cache serves one model and one profile at a time, compared by value on
 * each use and emptied when either changes, so any sequence of evaluations
 * may share one; the figures are the same with or without it.  One thread
 * at a time: a search's worker threads hold one each.
 *   sp_cost_cache *cc;
 *   sp_cost_cache_create(&cc);
 *   sp_cost_opts o; sp_cost_opts_init(&o); o.cache = cc;
 *   for (...) sp_cost_eval(&m, &hw, &layout[i], &w, &o, &c[i]);
 *   sp_cost_cache_free(cc); */
typedef struct sp_cost_cache sp_cost_cache;
sp_status sp_cost_cache_create(sp_cost_cache **out);   /* a new, empty cache: free with sp_cost_cache_free */
void sp_cost_cache_free(sp_cost_cache *c);             /* NULL: nothing */

typedef struct sp_cost_opts {
    size_t size;           /* sizeof(sp_cost_opts) */
    sp_dtype act_dtype;    /* activations: BF16 by default */
    sp_cost_cache *cache;  /* borrowed (NULL: the call makes one of its own and frees it, for
                              one-off evaluations; a loop should hold one) */
    int fresh;             /* 1: lower and price every phase afresh instead of reusing the
                              cache's memoised phase prices (same figures; for tests and
                              benchmarks) */
    int quiet;             /* 1: a layout that does not apply is SP_EINVAL without a message
                              (searches that probe many layouts) */
    sp_stage_time *stage_times;   /* optional output (NULL: none; borrowed): entry s = stage s of
                                     the layout priced (l->stages entries), valid when the
                                     evaluation returns SP_OK; sp_cost_eval_chunked: the
                                     chosen variant's.  The planner bounds uneven splits with them. */
} sp_cost_opts;
void sp_cost_opts_init(sp_cost_opts *o);

/* Prices a layout for a workload.  SP_EINVAL when the layout does not apply
 * (message in sp_last_error()); an infeasible (too big) layout is SP_OK with
 * feasible = 0 and shortfall_bytes set. */
sp_status sp_cost_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                       const sp_cost_opts *opts, sp_cost *out);

/* Prices a layout for a ragged batch r (sp_ragged.h): each sequence's own
 * prompt and gen, by its actual tokens (sp_lower.h, "Ragged batches").
 * Prefill: the packed program.  Decode: the steps s = 1 .. max gen,
 * sequence b in steps 1 .. gen_b; over each run [s0, s1] of steps with the
 * same sequences, (s1 − s0 + 1) · (t(s0) + t(s1)) / 2 (every figure affine
 * in the step), as a uniform batch's gen · (first + last) / 2, which it
 * equals when every length is equal.  decode_step_s and the decode
 * breakdown are the last step's (s = max gen); tokens_per_s, MFU and cost
 * per token count the actual tokens; memory: the KV cache at the longest
 * sequence (max prompt_b + gen_b), buffers for the largest step.  With
 * replicas each runs its own sequences (B/R consecutive ones): the slowest
 * replica's prefill and decode set the times (decode_step_s its last step),
 * the chip that holds the most the memory.  Micro-batches: each its own
 * B/(R·M) consecutive sequences and programs (sp_ragged_micro); the prefill
 * is their flow shop through the stages, C(j, s) = max(C(j − 1, s),
 * C(j, s − 1)) + t(j, s) (equal micro-batches: the uniform batch's
 * Σ + (M − 1)·max), each decode step the flow shop of the micro-batches
 * still generating (plus a per-token barrier's time where the runtime has
 * one), the steps one after another (not overlapped across tokens as the
 * uniform batch's decode is: with stages and micro-batches never cheaper
 * than it); bytes sent per chip summed over the micro-batches; memory one
 * arena that runs every micro-batch's programs (sp_lower_ragged_mem, as the
 * executor allocates it).  The layouts
 * the lowering takes (else SP_EINVAL naming what is not implemented).
 * Compare with sp_cost_eval of sp_workload_padded(r). */
sp_status sp_cost_eval_ragged(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_ragged *r,
                              const sp_cost_opts *opts, sp_cost *out);

/* ---- the pipeline from its stages (the planner's building blocks) ---- */

/* One stage of a layout: its layers and the time one micro-batch takes
 * through it (whole picoseconds, as sp_cost_eval rolls them up), and one of
 * its chips' memory.  A stage's figures depend on the layout's split only
 * through the stage's own layer count and whether it is the first or the
 * last stage (sp_lower_key), so a stage priced under one split prices it
 * under every split that gives it the same layers. */
typedef struct sp_stage_cost {
    int64_t first_layer, layers;
    int64_t prefill_ps;      /* the prompt, every pass (0 when the workload has none) */
    int64_t prefill_units;   /* prefill passes per micro-batch (chunked prefill; 1 otherwise) */
    int64_t decode1_ps;      /* the first decode step (context prompt + 1) */
    int64_t decode_ps;       /* a decode step at the last context */
    sp_phase_cost prefill, decode;   /* their breakdowns (decode at the last context) */
    sp_mem_sizes mem;
} sp_stage_cost;
/* Prices stage `stage` of l (sp_cost_eval's checks of the workload only:
 * the layout's are those of the lowering). */
sp_status sp_cost_stage_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                             const sp_cost_opts *opts, int stage, sp_stage_cost *out);
/* The same for a ragged batch r (as sp_cost_eval_ragged prices its stage: the slowest
 * replica's prefill, the replica with the longest decode's first and last steps, each
 * the slowest micro-batch's on this stage, the fullest chip's memory). */
sp_status sp_cost_stage_eval_ragged(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_ragged *r,
                                    const sp_cost_opts *opts, int stage, sp_stage_cost *out);
/* The decode alone of stage `stage` of l, as sp_cost_eval_group(..., SP_PHASE_DECODE, ...)
 * prices that stage (no prefill lowered): decode1_ps, decode_ps and decode as
 * sp_cost_stage_eval gives them, prefill_ps 0, prefill empty, mem without prefill
 * activations.  The planner bounds a stage of a mesh other than its template's by it. */
sp_status sp_cost_stage_eval_decode(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                                    const sp_cost_opts *opts, int stage, sp_stage_cost *out);

/* How a phase's time composes from its stages' times t_s (ps):
 *   phase_ps = floor(max over the forms f of (sum_coef[f]·Σ_s t_s +
 *              max_coef[f]·max_s t_s) / div) + const_ps
 * prefill: one form, (Σ + (M·u − 1)·max) / u (a flow shop of S stages and
 * M micro-batches of u passes each: sp_stage_cost.prefill_units); decode
 * with a per-token barrier: Σ + (M − 1)·max plus the barrier; decode
 * otherwise (micro-batches queued across token steps): max(M·max, Σ).
 * sp_cost_eval composes its prefill and decode steps so; the planner
 * states the same forms as rows of its program.  compose returns -1 when
 * the figure does not fit in int64. */
typedef struct sp_cost_pipe_phase {
    int n_forms;
    int64_t sum_coef[2];
    int64_t max_coef[2];
    int64_t div;
    int64_t const_ps;
} sp_cost_pipe_phase;
typedef struct sp_cost_pipe {
    sp_cost_pipe_phase phase[SP_PHASE_COUNT];
} sp_cost_pipe;
void sp_cost_pipe_terms(const sp_hw *hw, const sp_layout *l, int64_t prefill_units, sp_cost_pipe *out);
int64_t sp_cost_pipe_compose(const sp_cost_pipe_phase *f, int64_t sum_ps, int64_t max_ps);

/* A lower bound on the prefill_s of l for workload w, whichever way it is
 * priced: sp_cost_eval, every chunked variant sp_cost_eval_chunked tries
 * (prefill_chunk, prefill_tokens), any pipeline split and stage meshes of
 * its chips; 0 when there is none (doc/planner.md, "Pruning by the decode
 * bound": a MoE model, separate groups, a profile whose elementwise rates
 * replace a step's FLOPs time or whose chips share cores, a dispatch under
 * a picosecond, curves out of order).  The matmul FLOPs of the prefill's
 * weight matrices (2 per weight per prompt token: Q, K, V, O, the FFN's;
 * no logits, attention or bias) over every chip at the profile's peak for
 * the weights and the largest efficiency its curves give a matmul: a
 * compute step takes its dispatch plus at least its FLOPs at its
 * efficiency (price_compute: weight fetches only add), a program at least
 * its compute steps one after another (the compute stream), a stage's
 * micro-batch its passes, a pipeline's prefill M times its busiest stage
 * (sp_cost_pipe_compose), and the busiest stage's chips at least the
 * average of all chips. */
double sp_cost_prefill_lb(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w);

/* Prices a layout as sp_cost_eval does, and when l chunks no prefill
 * itself (prefill_chunk, prefill_tokens unset), the chunked prefills a
 * planner weighs, keeping the best (*chosen: the layout priced, l or l with
 * prefill_chunk set).  Chunking changes the prefill alone, so among the
 * variants that fit the one with the least prefill time is the best for
 * every objective; none fitting, l's own.  Variants (sequences per pass,
 * divisors of the micro-batch mb that the layouts' splits allow):
 *   - l does not fit: from the largest chunk whose activations (scaled
 *     from l's, linearly in the pass) would fit, halving until one fits
 *     (at most 4 tries; none when l's activations and scratch are not more
 *     than its shortfall: no chunk can make it fit); when none fits, token
 *     passes (prefill_tokens = prompt/2^k, estimated and halved alike, at
 *     most 4 tries) of the smallest sequence chunk tried, where prefill's
 *     attention is sharded as decode's (sp_layout.h);
 *   - l fits and has stages: mb/2, mb/4, ... (at most 3) while the prefill
 *     gets faster (passes fill the pipeline's bubble). */
sp_status sp_cost_eval_chunked(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                               const sp_cost_opts *opts, sp_layout *chosen, sp_cost *out);

/* The honest-answer guard: every figure of c is finite and not negative, the
 * memory parts sum exactly (int64, checked) to the total, and the verdict
 * agrees with the capacity in exact integer arithmetic (feasible iff total <=
 * capacity, shortfall = total - capacity otherwise).  SP_EINTERNAL naming the
 * first figure that breaks it: a priced layout that breaks it is a bug, never
 * an answer.  sp_cost_eval runs it on everything it returns. */
sp_status sp_cost_check(const sp_cost *c);

/* Whether a workload's layout-independent sizes are representable: tokens
 * (batch × (prompt + gen)), the whole KV cache, the prompt's activations and
 * the FLOPs, each a checked int64 (fp32 bytes, the widest a layout may use).
 * SP_EINVAL naming the quantity and its factors when one does not fit: such a
 * request cannot be represented, on any number of chips.  sp_cost_eval and
 * the planner's entry points call it first. */
sp_status sp_cost_check_workload(const sp_model *m, const sp_workload *w);

/* Prices one program; context > 0 re-prices decode attention at that context. */
void sp_cost_program(const sp_program *p, const sp_hw *hw, int64_t context, sp_phase_cost *out);

/* The alpha-beta terms of one collective: the latency steps and the
 * β-weighted bytes on each tier (0 near: inside a node or the torus links;
 * 1 far: between nodes), and its launch (1 when it moves anything: the
 * rendezvous every collective pays once, topology.collective_latency).
 * time = launch·λ + Σ_tier steps·α_tier + bytes·β_tier. */
typedef struct sp_coll_terms {
    double steps[2];
    double bytes[2];
    double launch;
} sp_coll_terms;
void sp_cost_coll_terms(const sp_hw *hw, const sp_layout *l, const sp_coll *c, sp_coll_terms *out);
/* Seconds one collective step takes on the layout's placement (the terms
 * priced with the profile's α and β, stretched by the chips sharing cores
 * when chip.comm_shares_cores; +inf on a torus the layout does not map
 * onto). */
double sp_cost_coll_time(const sp_hw *hw, const sp_layout *l, const sp_coll *c);

/* ---- free parameters, for fits ---- */
typedef enum sp_cost_param {
    SP_CP_DISPATCH = 0,   /* seconds per compute step (chip.dispatch_s) */
    SP_CP_FLOP = 1,       /* seconds per FLOP at the peak the layout's weights use (1 / peak);
                             coefficient Σ FLOPs / efficiency of compute-bound steps */
    SP_CP_HBM_BYTE = 2,   /* seconds per HBM byte at the datasheet bandwidth (1 / hbm_bw);
                             coefficient Σ bytes / memory efficiency of memory-bound steps */
    SP_CP_ALPHA_NEAR = 3, /* seconds per collective step: torus hop_latency, cluster intra_node_latency */
    SP_CP_BETA_NEAR = 4,  /* seconds per byte: 1 / link_bw (torus), 1 / intra_node_bw */
    SP_CP_ALPHA_FAR = 5,  /* cluster inter_node_latency */
    SP_CP_BETA_FAR = 6,   /* 1 / inter_node_bw */
    SP_CP_COLL_LAUNCH = 7, /* seconds per collective (topology.collective_latency) */
    SP_CP_COUNT
} sp_cost_param;
const char *sp_cost_param_name(sp_cost_param p);   /* "dispatch_s", "s_per_flop", ... */
/* The profile's value of each parameter for a layout's weight dtype. */
void sp_cost_params(const sp_hw *hw, sp_dtype weights, double out[SP_CP_COUNT]);
/* Coefficients of the parameters in a layout's predicted prefill_s and
 * decode_step_s (the critical path of each stage's schedule, rolled up
 * over the pipeline as sp_cost_eval does; decode at the last context):
 * Σ_j coef_j · param_j equals the prediction up to the picosecond rounding
 * of each step (decode: plus chip.token_sync_s·(chips − 1), a constant).  Lowers every stage afresh (not for search loops). */
typedef struct sp_cost_coefs {
    double prefill[SP_CP_COUNT];
    double decode_step[SP_CP_COUNT];
    double prefill_s, decode_step_s;   /* the predictions they reproduce */
} sp_cost_coefs;
sp_status sp_cost_coefs_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                             const sp_cost_opts *opts, sp_cost_coefs *out);

/* ---- time per step class (beside the executor's measured totals) ---- */
/* Seconds per step class (sp_step_class_of): the sum of the step times
 * (sp_cost_program's per-step rule, dispatch included) of one chip of every
 * stage, over every micro-batch: prefill for the whole prompt, decode for one
 * step at the last context; the convention of sp_exec_stats'
 * measured_*_class_s.  Not a schedule: overlap and waits are not in it. */
typedef struct sp_cost_kinds {
    double prefill[SP_CLASS_COUNT];
    double decode_step[SP_CLASS_COUNT];
} sp_cost_kinds;
sp_status sp_cost_kinds_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                             const sp_cost_opts *opts, sp_cost_kinds *out);

/* Chips in a node and nodes spanned by a group over `axes` (cluster
 * topologies; a torus reports the whole group in one tier). */
void sp_cost_group_tiers(const sp_hw *hw, const sp_layout *l, const char *axes, int *k_in, int *k_out);

/* ---- the KV transfer between separate chip groups ---- */
/* Where the two groups sit:
 *   ONE_JOB  one job's chips, the prefill group first (chips 0..Np−1) and
 *            the decode group right after it (Np..Np+Nd−1), as a
 *            disaggregated layout runs; on a cluster a message stays inside
 *            a node when both chips are in it, on a torus the groups are
 *            slices side by side
 *   APART    separate instances (a fleet's pools): on a cluster every
 *            message crosses between nodes; on a torus refused (separate
 *            slices meet over the data-centre network, which no profile
 *            describes: SP_ENOTSUP) */
typedef enum sp_xfer_place { SP_XFER_ONE_JOB = 0, SP_XFER_APART = 1 } sp_xfer_place;
typedef struct sp_kv_xfer_cost {
    int64_t kv_bytes;        /* the KV blocks (sp_lower_kv_xfer) */
    int64_t token_bytes;     /* the first generated tokens */
    int64_t bytes;           /* kv_bytes + token_bytes */
    int64_t max_sent;        /* the busiest prefill chip */
    int64_t max_recv;        /* the busiest decode chip */
    int64_t messages;        /* (sender, receiver) pairs: one message each */
    double seconds;
} sp_kv_xfer_cost;
/* Prices the KV transfer of one batch (batch sequences, prompt tokens each)
 * of disaggregated layout l (sp_lower_kv_xfer's blocks, one message per
 * chip pair): every chip sends (receives) its messages one after another,
 * a message of b bytes taking α + b·β on its tier (cluster: intra-node
 * latency and bandwidth when both chips share a node, inter-node otherwise;
 * torus: hop_latency × h and link_bw, one link per chip, h = the mean
 * distance between the two slices laid side by side along their longest
 * sides, ceil((a_prefill + a_decode) / 2)), every bandwidth × net_bw_eff:
 *   seconds = collective_latency + max(max over prefill chips Σ its sends,
 *                                      max over decode chips Σ its receives)
 * A fleet that pairs two instances' layouts builds l with
 * sp_layout_disaggregate and prices with where = SP_XFER_APART. */
sp_status sp_cost_kv_xfer(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch, int64_t prompt,
                          sp_xfer_place where, sp_kv_xfer_cost *out);

/* The JSON form `estimate --json` prints, as a new Jansson reference (json_t *):
 * layout, feasible, shortfall_bytes, prefill_s, decode_step_s, decode_s, total_s,
 * tokens_per_s, mfu, mfu_prefill, mfu_decode, cost_chip_s_per_token,
 * comm_bytes_per_chip.{prefill,decode_step}, torus_slice ([X, Y, Z] rented; torus
 * only), time_breakdown.{prefill,decode}.
 * {compute_s, memory_s, roofline_s, comm_s, all-gather, ...}, memory_per_chip.
 * {weights, gathered_weights, kv, activations, workspace, total, capacity}.
 * Separate chip groups add kv_transfer_s, kv_transfer_bytes, latency_s
 * (= total_s), period_s and groups.{prefill,decode}.{chips, feasible,
 * shortfall_bytes, memory_per_chip}. */
void *sp_cost_to_json(const sp_cost *c, const sp_layout *l);

/* One group of separate prefill and decode groups, priced as sp_cost_eval
 * prices it inside a disaggregated layout: g is the group's own (one-group)
 * layout (sp_layout_phase_group); ph = SP_PHASE_PREFILL: the prompt alone
 * (batch, prompt, no generated tokens: prefill_s, memory with the cache at
 * the prompt); SP_PHASE_DECODE: the generated tokens alone after the prompt
 * (decode_step_s, decode_s = total_s, memory without prefill activations).
 * The planner prices each group's candidates with it (doc/planner.md). */
sp_status sp_cost_eval_group(const sp_model *m, const sp_hw *hw, const sp_layout *g, sp_phase ph,
                             const sp_workload *w, const sp_cost_opts *opts, sp_cost *out);

/* A lower bound on the KV transfer of one batch into decode group g (a
 * one-group layout) from any prefill group in one job: every chip of g
 * receives its cache block at the prompt (and its first tokens) whatever
 * the prefill group, in at least one message, at best at the fastest
 * tier's bandwidth and least per-message latency:
 *   collective_latency + min α + (the busiest receiver's bytes) · min β
 * (sp_cost_kv_xfer's terms).  The planner's program adds it to each decode
 * candidate (doc/planner.md). */
sp_status sp_cost_kv_xfer_bound(const sp_model *m, const sp_hw *hw, const sp_layout *g, int64_t batch, int64_t prompt,
                                double *out);

/* The time sp_cost_kv_xfer gives a transfer between instances apart
 * (SP_XFER_APART) whose busiest chip moves `bytes` in one message:
 *   collective_latency + inter-node α + bytes · β   (β at net_bw_eff)
 * For one side of a handoff whose other side is not known: the fleet
 * prices a prefill instance's send and a decode instance's receive with it
 * (sp_fleet.h).  SP_ENOTSUP on a torus (no network between slices), as
 * sp_cost_kv_xfer with SP_XFER_APART. */
sp_status sp_cost_kv_xfer_apart(const sp_hw *hw, double bytes, double *out);

/* Longest context (tokens per sequence) whose KV cache fits in fraction
 * `kv_budget` of each chip's HBM for this batch and layout. */
sp_status sp_cost_max_context(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch,
                              double kv_budget, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
