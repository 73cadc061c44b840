/*
 * sp_exec.h: the program interpreter (design.md §7).  Runs the per-chip
 * programs of sp_lower (prefill, then one decode program per generated
 * token) on a communicator backend: one thread per chip this process hosts
 * (THREADS: every chip; MPI and NCCL: the one chip of this rank,
 * sp_comm_world_local_ranks).
 *
 *   sp_exec *ex;
 *   SP_CHECK(sp_exec_build(&model, &layout, B, P, G, &weights, SP_COMM_BACKEND_THREADS, &ex));
 *   sp_exec_stats st;
 *   SP_CHECK(sp_exec_run(ex, prompt, NULL, tokens, last_logits, &st));   // prompt (B,P), tokens (B,G)
 *   sp_exec_free(ex);
 *
 * Every chip allocates one arena of the lowering's predicted bytes
 * (sp_lower_mem_sizes over its prefill and decode programs: buffers, KV
 * cache at P+G tokens, weight shards, dequantisation workspace, scratch),
 * carves every block from it, builds its weight shards from the global fp32
 * weights per the program's wspec, and runs the steps exactly as lower.c
 * defines them.  Around every COLL / SEND / RECV step the chip's
 * measured bytes (sp_comm_stats) are compared with the step's prediction.
 *
 * Sequence order: replica r holds sequences [r·B/R, (r+1)·B/R), micro-batch
 * j of it the next micro_batch of those.  Pipelines: the last stage sends the
 * sampled tokens back to stage 0 (same tensor coordinates) after every step;
 * those bytes are not in the program and are counted in token_bytes only.
 *
 * Separate prefill and decode chip groups (sp_layout_disaggregated; THREADS
 * and MPI, greedy: SP_ENOTSUP otherwise): chips 0..Np−1 run the
 * prefill group's layout (prefill only, the cache at P tokens), chips
 * Np..Np+Nd−1 the decode group's (decode steps 1..G−1), each group on its
 * own communicator; between them the KV transfer (sp_lower_kv_xfer) moves
 * each decode chip's cache block and first tokens, one message per chip
 * pair, counted under send-recv against the lowering's bytes.  Stats: bytes
 * summed over both groups, memory the larger chip's (each group's arena is
 * its phase's alone), prefill_s the prefill group's, decode_step_s the
 * decode group's, tokens_per_s over the whole run.  A trace holds both
 * groups' chips (job ranks) and each KV message (sp_trace.h).
 *
 * Stages of their own meshes (sp_layout_hetero, stage_mesh; THREADS and
 * MPI, SP_ENOTSUP on NCCL and for a ragged batch): chips numbered as
 * sp_layout.h says (stage-major, each stage's replicas in turn); each
 * stage's chips run its program (lowered on the stage's view, whose ranks
 * the chip's blocks follow) with its collectives on a communicator of the
 * stage's mesh, and its SEND / RECV steps move exactly the blocks
 * sp_lower_stage_xfer_progs names for the chip, over a communicator of
 * every chip (a block contiguous on both chips as one message, else one
 * message per row), counted against the steps' bytes.  The tokens go back
 * from the last stage's chip of tensor rank t to the first stage's chips
 * of ranks t, t + T_L, ... (T_L: the last stage's tensor chips).  Memory
 * per chip: its stage's prediction.
 *
 * Devices.  THREADS and MPI run the chips on the CPU (kernels/cpu, host
 * memory); NCCL runs each chip on its process's GPU (kernels/cuda and cuBLAS,
 * device memory, one MPI rank per GPU, see exec/comm_nccl.c).  Both go
 * through the same interpreter (exec/exec*.c) and a per-chip device table
 * (exec/spi_xdev.h); weight shards are built on the host and uploaded once.
 * GPU results match the CPU within float tolerance, not bit for bit.  On
 * GPUs greedy picks run on the device; sampling and last_logits copy the
 * logits rows to the host (sp_kern_sample).
 *
 * Supported on the CPU: weights F32, BF16, F16, INT8 and FP8 under every layout,
 * weight-gathered ones included (gathers move the storage dtype's bytes; the
 * INT8/FP8 per-column scales are fp32, kept for each matrix's whole global
 * column range on every chip and never communicated, as the lowering's
 * memory accounting says); KV cache F32 or BF16.  Pass weights already
 * round-tripped with sp_weights_quantize(w, layout.weights) to get exactly
 * the numbers the single-chip reference computes on them.  On GPUs (NCCL):
 * the same layouts and dtypes; non-F32 weights and tables are dequantised on
 * the GPU in tiles that fit the lowering's workspace (sp_mem_sizes.workspace,
 * a block of the chip's arena in GPU memory), the INT8/FP8 scales
 * live in GPU memory with the weights, and every stored value decodes to the
 * fp32 value the CPU kernels read.  The GPU arena holds every block but the
 * sp_scr_host scratch slots (a host arena of their size); outside both, the
 * CUDA device keeps its own small staging of token ids, positions and the
 * argmax pick (exec/xdev_cuda.c), and the result exchange of a multi-process
 * run allocates its transfer blocks after the run.
 */
#ifndef SP_EXEC_H
#define SP_EXEC_H
#include <stdint.h>
#include "sp_common.h"
#include "sp_layout.h"
#include "sp_lower.h"
#include "sp_model.h"
#include "sp_comm.h"
#include "sp_weights.h"
#include "sp_kern.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_exec sp_exec;   /* opaque */

typedef struct sp_exec_stats {
    double prefill_s;          /* wall time of the prefill step (all chips) */
    double decode_step_s;      /* mean wall time of one decode step (0 when gen == 1) */
    double tokens_per_s;       /* B·G / (prefill + decode) */
    /* bytes SENT, summed over all chips, per collective kind (SP_COLL_*) */
    uint64_t measured_bytes[SP_COLL_COUNT];
    uint64_t predicted_bytes[SP_COLL_COUNT];
    uint64_t measured_recv[SP_COLL_COUNT];
    uint64_t predicted_recv[SP_COLL_COUNT];
    uint64_t token_bytes;      /* pipeline token hand-off (last stage -> stage 0), not in the program */
    int64_t comm_steps;        /* COLL/SEND/RECV steps checked (all chips) */
    int64_t mismatches;        /* steps whose measured bytes differ from the prediction, and chips
                                  whose arena holds bytes no block uses */
    char first_mismatch[256];
    /* memory: each chip allocates one arena of exactly sp_lower_mem_sizes(prefill, decode).total
     * bytes (on a GPU: a device arena and a host arena for the sp_scr_host slots, together that
     * total) and carves every buffer, weight, KV cache, workspace and scratch block from it;
     * a block that does not fit fails the run (SP_EINTERNAL), bytes left over count a mismatch */
    int64_t allocated_bytes_per_chip;   /* the largest chip's arena bytes */
    int64_t predicted_bytes_per_chip;   /* the largest chip's predicted total */
    /* measured wall time per step class (sp_step_class: matmul, attention, each collective
     * kind, other), seconds: each chip's time in the class's steps, averaged over the chips
     * of a stage and summed over the stages.  prefill: the prefill step; decode: one decode
     * step, the mean over the gen - 1 decode steps (0 when gen == 1).  A step's time is from
     * before it starts to after it returns; on a GPU the chip waits for its stream after each
     * step so the time is the step's own (which also stops work of one step overlapping the
     * next).  Time outside the steps (sampling, the pipeline token hand-off, barriers) is in
     * prefill_s / decode_step_s but in no class. */
    double measured_prefill_class_s[SP_CLASS_COUNT];
    double measured_decode_class_s[SP_CLASS_COUNT];
    /* the lowering's a-priori bytes (sent, received), summed like predicted_*: equal to them
     * except for the routed MoE all-to-all, whose prediction follows from the actual routing
     * and whose expected value assumes the model's router (sp_lower.h) */
    uint64_t expected_bytes[SP_COLL_COUNT];
    uint64_t expected_recv[SP_COLL_COUNT];
    /* offload (layout offload_weights / offload_kv): each chip's second arena, in host memory, of
     * exactly sp_lower_mem_sizes(...).host_total bytes (the streamed layers' weights, the host-held
     * sequences' K/V; 0 without offload), the largest chip's; and the bytes copied over the host
     * link, summed over all chips: measured as the executor moved them, predicted as the program's
     * host-load / host-store steps say (a difference counts a mismatch) */
    int64_t host_allocated_bytes_per_chip;
    int64_t host_predicted_bytes_per_chip;
    uint64_t host_link_bytes_measured;
    uint64_t host_link_bytes_predicted;
} sp_exec_stats;

/* Validates the layout against the model and the job (lowers every stage
 * for both phases) and creates the communicator world.  MPI: every process
 * of the job calls it with the same arguments (the validation is the same
 * pure function everywhere, so every rank accepts or rejects alike); the
 * world size must equal the layout's chips.  NCCL: the same under mpirun,
 * one GPU per process; SP_ENOTSUP in a build without CUDA, SP_ECUDA when no
 * GPU is visible.  Every backend: SP_ENOTSUP for a KV cache other than F32
 * or BF16.  weights are borrowed until sp_exec_free.  SP_EINVAL with the
 * reason when the layout does not apply; SP_ENOTSUP for what the executor
 * does not implement. */
sp_status sp_exec_build(const sp_model *m, const sp_layout *l, int64_t batch, int64_t prompt, int64_t gen,
                        const sp_weights *w, sp_comm_backend backend, sp_exec **out);
/* sp_exec_build for a ragged batch r (sp_ragged.h; borrowed until
 * sp_exec_free): B = r->n sequences, each with its own prompt and gen,
 * lowered by sp_lower_ragged (packed tokens, attention over each sequence's
 * own context, finished sequences leave the decode steps; sp_lower.h,
 * "Ragged batches").  sp_exec_run then reads prompt as (B, max prompt),
 * sequence b's first prompt_b tokens (the rest unread), and writes tokens
 * as (B, max gen), sequence b's first gen_b (the rest untouched);
 * last_logits are those of each sequence's own last token.  The arena is
 * sized for the largest decode step (sp_lower_ragged_decode).  Replicas:
 * each runs its own sequences' programs (a replica done before the others
 * idles through their steps).  THREADS and MPI; SP_EINVAL for NCCL and for
 * the layouts the lowering refuses; SP_ENOTSUP for stages of their own
 * meshes (stage_mesh). */
sp_status sp_exec_build_ragged(const sp_model *m, const sp_layout *l, const sp_ragged *r, const sp_weights *w,
                               sp_comm_backend backend, sp_exec **out);
void sp_exec_free(sp_exec *ex);   /* NULL is a no-op */

/* The next runs write their measured timeline to path (NULL: none, the
 * default): one Chrome trace event per step each chip ran, with the step
 * names and ids of sp_trace.h (as the simulator writes them), ts from the
 * start of the run (setup included), on each chip's compute or comm track.
 * Events are kept in memory during the run (a few words per step, outside
 * the chips' arenas) and written after it.  A process that hosts only some
 * of the chips (MPI, NCCL) writes path.<its first chip>.  The path is
 * copied. */
sp_status sp_exec_set_trace(sp_exec *ex, const char *path);

/* Runs prefill on prompt (batch, prompt) and generates gen tokens per
 * sequence into tokens (batch, gen).  sample NULL or temperature <= 0:
 * greedy; else sp_kern_sample with one RNG per sequence seeded sample->seed + b
 * (as sp_ref_generate).  last_logits (batch, vocab), may be NULL: the logits
 * the last token was chosen from.  stats may be NULL. */
sp_status sp_exec_run(sp_exec *ex, const int32_t *prompt, const sp_kern_sample_opts *sample, int32_t *tokens,
                      float *last_logits, sp_exec_stats *stats);
/* sp_exec_run with every step's logits when all_steps is set: logits is then
 * (batch, gen, vocab), the logits each generated token was chosen from
 * (step 0: after the prompt); else (batch, vocab) as last_logits. */
sp_status sp_exec_run_logits(sp_exec *ex, const int32_t *prompt, const sp_kern_sample_opts *sample, int32_t *tokens,
                             float *logits, int all_steps, sp_exec_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
