/*
 * sp_sim.h: the simulator.  Schedules every chip's program on a timeline
 * of two streams per chip (compute, communication), step by step, with the
 * cost model's step prices and rules (sp_cost.h, "Schedule"), and writes
 * the timeline as a trace (sp_trace.h).
 *
 *   sp_sim_opts o;
 *   sp_sim_opts_init(&o);
 *   o.trace = t;                                   // optional
 *   sp_sim_times r;
 *   if (sp_sim_eval(&model, &hw, &layout, &w, &o, &r) == SP_OK)
 *       printf("prefill %.3f s, decode step %.3f ms\n", r.prefill_s, r.decode_step_s * 1e3);
 *
 * What it adds to the cost model's closed form: chips are simulated one by
 * one, so a collective starts when its slowest member is ready (members
 * differ when chips run at different speeds: opts.slowdown), and pipeline
 * stages hand micro-batches to each other as they finish.
 *   - chip c of stage s runs, for every (token t, micro-batch j) in that
 *     order, its stage's program: the unit starts when the chip finished
 *     its previous unit and its input has arrived: from stage s−1 (the end
 *     of the peer chip's send of (t, j)), and on stage 0 for t > 0 from the
 *     last stage (the end of the peer's unit (t−1, j): the next token of
 *     those sequences).  This is DeepSpeed-Inference's generation schedule
 *     with M micro-batches in flight (M < stages: the stages wait on the
 *     token's return, the bubble).
 *     Stages of their own mesh (sp_layout.h, stage_mesh): stage s's chips
 *     are its own (sp_layout_stage_first_chip, R·X_s·Y_s·Z_s of them), its
 *     program the one lowered on its mesh; a chip of stage s waits for the
 *     sends of every chip of stage s−1 whose block it takes
 *     (sp_lower_stage_xfer_progs), and a chip of stage 0 for the end of
 *     unit (t−1, j) on every last-stage chip of its replica.
 *     With chip.token_sync_s > 0 (a runtime that synchronises every chip
 *     after each generated token), every chip waits after each decode token
 *     until the last chip is done, plus token_sync_s·(chips − 1): the same
 *     rule as the closed form's (one function, spi_token_sync), so a decode
 *     step is the flow shop of one token plus the barrier, and the decode
 *     makespan is tokens × step.
 *   - within a unit, every step as sp_cost.h says; a collective (not
 *     send/recv) starts at the latest of its group's members' ready times
 *     (its group: the chips sharing every coordinate outside sp_coll.mask).
 *   - times are whole picoseconds, like the closed form; for a layout whose
 *     chips are alike, the simulator's prefill time and decode step equal
 *     sp_cost_eval's exactly (tests/check_sim.c checks the catalogue).
 *
 * Decode is simulated over `tokens` steps, all at the context the program
 * was lowered for (the last context in sp_sim_eval); its step time is the
 * last step's increment, the generation schedule's steady state.
 */
#ifndef SP_SIM_H
#define SP_SIM_H
#include "costmodel/sp_cost.h"
#include "sp_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_sim_opts {
    size_t size;             /* sizeof(sp_sim_opts) */
    int tokens;              /* decode steps simulated; 0: stages + 2 (enough for the steady state) */
    const double *slowdown;  /* optional, one per chip (global rank): that chip's compute steps take
                                this many times their price (1: as priced) */
    sp_trace *trace;         /* optional: one event per step and chip (borrowed) */
    double t0_s;             /* added to every traced time */
    int64_t token0;          /* decode: the step number (step ids) of the first simulated token */
    int chip0;               /* sp_sim_phase: the global rank of the layout's chip 0 (a decode group's
                                chips follow the prefill group's); traced chips and slowdown are
                                indexed from it */
    sp_cost_opts cost;       /* sp_sim_eval: lowering options (act_dtype) */
    int replica;             /* sp_sim_phase: -1 (default) every chip's timeline; r >= 0: the programs
                                are replica r's (a ragged batch's replicas run their own), so only the
                                chips of replica r are traced and counted in events (every chip runs
                                them; replicas share no step, so replica r's times are its own) */
    int mb_progs;            /* sp_sim_phase: 0 (default) every micro-batch runs progs; 1: each micro-batch
                                its own programs, progs[mb·S + s] (a ragged batch's micro-batches take their
                                own sequences, sp_ragged_micro; no token passes; prefill passes of
                                sequences, U = passes_seq each: pass u of micro-batch mb at (mb·U + u)·S + s,
                                each its own sequences), all S of micro-batch mb NULL when it takes no part
                                (a decode step past its sequences' generation) */
} sp_sim_opts;
void sp_sim_opts_init(sp_sim_opts *o);

typedef struct sp_sim_result {
    double makespan_s;       /* every unit through every stage */
    double step_s;           /* prefill: the makespan; decode: the last token's increment */
    int64_t events;          /* steps simulated, over all chips */
} sp_sim_result;

/* Simulates one phase: progs[s] is stage s's program (sp_lower of this
 * layout, phase and stage s; borrowed); opts may be NULL.  A chunked
 * prefill (sp_program passes) runs each micro-batch's passes in order as
 * units of the flow shop; with token passes (passes_tok = NT > 1) progs
 * holds every pass: progs[j·S + s] is token pass j of stage s
 * (shape.passes_left = NT − 1 − j), at most SP_SIM_MAX_PASS_PROGRAMS in all.  SP_EINVAL for
 * programs that do not match the layout; SP_ENOMEM; a trace write error
 * is reported by sp_trace_close. */
#define SP_SIM_MAX_PASS_PROGRAMS 256
sp_status sp_sim_phase(const sp_layout *l, const sp_hw *hw, sp_phase phase, const sp_program *const *progs,
                       const sp_sim_opts *opts, sp_sim_result *out);

typedef struct sp_sim_times {
    double prefill_s;        /* 0 without a prompt */
    double decode_step_s;    /* 0 without generated tokens; at the last context */
    sp_sim_result prefill, decode;
    double kv_transfer_s;    /* separate groups: the KV transfer (0 otherwise) */
    double makespan_s;       /* the timeline: prefill, the transfer, the simulated decode steps */
    double decode_s;         /* sp_sim_eval_ragged: every decode step, summed (0 from sp_sim_eval) */
} sp_sim_times;
/* Lowers every stage (the shapes sp_cost_eval uses) and simulates prefill,
 * then decode; traced decode steps follow the prefill on the timeline and
 * are numbered gen − tokens .. gen − 1 (from 0 when gen < tokens).
 *
 * Separate prefill and decode chip groups (sp_layout_disaggregated): the
 * prefill group's chips (global ranks 0 .. Np−1) run the prefill of its
 * layout (sp_layout_phase_group) for the prompt; then the KV transfer, as
 * sp_cost_kv_xfer prices it: it starts when the last prefill chip is done
 * (the cache of the whole batch moves once its prompt is complete), every
 * chip of both groups puts its messages (one per peer, sp_lower_kv_xfer's
 * blocks) back to back on its comm stream after the collective latency, a
 * sender in ascending decode rank, a receiver in ascending prefill rank
 * (trace ids "kv/send/-1/<peer>", "kv/recv/-1/<peer>": sp_trace.h), and
 * the decode group starts when the last message has landed; then the
 * decode group's chips (ranks Np .. Np+Nd−1) run the decode steps.  So
 * kv_transfer_s equals sp_cost_eval's, prefill_s and decode_step_s its
 * groups' (as for any layout), and makespan_s = prefill makespan +
 * kv_transfer_s + the decode steps' makespan; with tokens = gen on a
 * one-stage decode group (or one that synchronises every token) that is
 * the closed form's prefill_s + kv_transfer_s + gen · decode_step_s, to
 * the picosecond (a decode pipeline adds its fill to the first step). */
sp_status sp_sim_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                      const sp_sim_opts *opts, sp_sim_times *out);

/* A ragged batch r (sp_ragged.h; sp_lower.h, "Ragged batches"): the packed
 * prefill program, then every decode step s = 1 .. max gen with its own
 * program (the sequences still generating, each at its context), one after
 * the other on the timeline (step ids decode<s−1>): decode_s is their sum,
 * decode_step_s the last one's, makespan_s prefill + decode_s.  Beside
 * sp_cost_eval_ragged, which prices each run of steps with the same
 * sequences by its ends, this prices every step.  With replicas, each
 * replica's own sequences and programs on its own chips (sp_sim_opts.replica),
 * every replica from time 0: prefill_s the slowest replica's prefill,
 * decode_s and decode_step_s the replica with the longest decode's,
 * makespan_s the latest replica's end, events over every replica's chips.
 * Experts split over replicas: the replicas run the prefill and each decode
 * step together (the expert all-to-all joins them), each round from the
 * same time and ending with the slowest replica's.
 * Micro-batches: each its own sequences and programs (sp_ragged_micro,
 * sp_sim_opts.mb_progs), the prefill and each decode step their flow shop
 * through the stages (a step: the micro-batches still generating), the
 * steps one after another, as sp_cost_eval_ragged composes them.
 * The layouts the lowering takes; opts->tokens, opts->replica and
 * opts->mb_progs are ignored. */
sp_status sp_sim_eval_ragged(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_ragged *r,
                             const sp_sim_opts *opts, sp_sim_times *out);

#ifdef __cplusplus
}
#endif
#endif
