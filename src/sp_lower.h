/*
 * sp_lower.h: the lowering.  A layout × phase × shapes becomes the per-chip
 * program: an ordered list of steps that the cost model prices, the
 * simulator schedules and the executor runs (design.md §2).  Nothing else in
 * the project interprets a layout.
 *
 * A program has three parts: `pre` (embedding on stage 0, or receiving the
 * activations from the previous stage), `layer` (one transformer layer,
 * identical for every layer of the stage, run `n_layers` times) and `post`
 * (sending to the next stage, or the final norm and the logits on the last).
 * A model with dense layers between its MoE layers (moe_every > 1) has a
 * fourth, `dense`: the layer with the dense FFN (weights SP_W_D_*); local
 * layer i of the stage (global first_layer + i) runs `layer` when it is a
 * MoE layer (sp_model_layer_is_moe) and `dense` otherwise
 * (sp_program_layer_part), so `layer` runs n_layers − n_dense_layers times
 * and `dense` n_dense_layers times (sp_program_part_runs).  Both parts are
 * emitted whatever the stage holds (they do not depend on the stage); only
 * the parts that run size the buffers, scratch and memory.
 *
 * Tensors live in named buffers (sp_buf) as row-major (rows, cols) fp32
 * matrices.  Rows are tokens (sequence-major: row = b*L + l) of the sequences
 * this chip holds; cols are the chip's part of the hidden dimension.  A
 * dimension split over several mesh axes is split in the order given by an
 * axis sequence (major first, e.g. "yzx": block = (y*Z + z)*X + x).
 *
 * Sharding of each FFN layout (n = X*Y*Z; N = weight-gathered axes,
 * Rx = axes the matmul's contraction is split over, C = axes the output
 * columns are split over):
 *   layout  storage        N     Rx   C     activations between layers
 *   ws1d    E F_xyz        -     -    xyz   B L E_xyz
 *   ws2d    E_x F_zy       -     x    zy    B L E_xzy
 *   wg-x    E_x F_zy       x     -    zy    B_x L E_zy
 *   wg-xy   E_x F_zy       xy    -    z     B_xy L E_z
 *   wg-xyz  E_x F_zy       xyz   -    -     B_xyz L E
 * (the paper's F_yz; we split z-major so that a gather over y leaves each
 * chip a contiguous block of F and of the heads)
 * One FFN: all-gather(C) of the input, matmul, [reduce-scatter(Rx), act,
 * all-gather(Rx)] or act, matmul, reduce-scatter(C).  Weight-gathered layouts
 * first all-gather their weights over N.  Attention projections follow the
 * same pattern with heads in place of F; see lower.c for the K/V rules.
 *
 * Ragged batches (sp_lower_ragged, sp_ragged.h).  The token-parallel steps
 * (matmuls, norms, activations, collectives) run on the packed tokens of the
 * pass's sequences, no padding: T = Σ prompt_b rows in prefill, one row per
 * sequence still generating in decode step s.  ATTN, KV_STORE and POS are
 * `ragged`: each sequence attends over its own context only (prefill:
 * causal within its prompt; decode: its prompt_b + s tokens), and is stored
 * in its own cache slot (the batch index; sp_lower_ragged_seq resolves
 * rows, tokens and positions).  So per step
 *   ATTN flops = 4 · heads · D · Σ_b Σ_{t=1..q_b} (pos0_b + t)
 *   ATTN kv_bytes_read (decode) = 2 · Σ_b ctx_b · kv_heads · D · kv bytes
 *   KV_STORE kv_bytes_written = 2 · T · kv_heads · D · kv bytes
 * The last-token SLICE of prefill keeps row row0_b + prompt_b − 1 of each.
 * Every chip of the tensor mesh holds every sequence's tokens of its
 * replica; replica i's program is lowered with its own sequences [i·B/R,
 * (i+1)·B/R) (sp_ragged_slice), so the replicas' token counts, step shapes
 * and collectives' sizes differ and each replica's chips run its program.
 * Pipeline stages pass the packed rows on (SEND/RECV of T rows).
 * Micro-batches: micro-batch j of replica i takes the (i·M + j)-th block of
 * B/(R·M) consecutive sequences (sp_ragged_micro) and is lowered with them
 * alone (its own T, contexts and cache slots 0 .. B/(R·M) − 1 of its own
 * micro-batch's cache); the cost model and the simulator run each
 * micro-batch's programs in the flow shop of stages, the executor each in
 * the pipeline's micro-batch order (sp_lower_ragged_mem: the memory of a
 * chip that runs them all).
 * Batch-sharded attention splits the sequences of the pass into |G| blocks
 * of consecutive sequences (block g: sequences [g·B/|G|, (g+1)·B/|G|), the
 * chip's block of the step's batch_axes, as for a uniform batch).  Block g
 * holds T_g tokens; a chip's block rows are its tokens packed, then zero
 * rows up to R = max_g T_g (blk_rows): the all-to-all heads -> batch moves
 * each block as R rows (bytes (|G|−1)·R·cols each way), the chip attends
 * its block's sequences only (each over its own context) and stores them in
 * its cache slots (the sequence's index within the block), and the
 * all-to-all back unpacks each block's T_g rows into the packed rows.  The
 * steps over blocks carry the fullest block's figures (the chip that sets
 * the step's time): ATTN flops and KV bytes read the largest over blocks,
 * KV_STORE bytes 2·R·kv_heads·D·kv bytes.  The token-parallel steps stay
 * packed (T rows).
 * Weight-gathered FFNs split the sequences over their gathered axes N: |N|
 * blocks of consecutive sequences (rag_blocks), the chip's block of N
 * holding T_g tokens.  Its token-parallel rows are its block's tokens
 * packed, then zero rows up to R_N = max_g T_g (rag_rows): the collectives
 * over the other axes (within a block) and the weight gathers are as for a
 * uniform batch of R_N rows per chip, and every step is priced at the
 * fullest block's rows (the chips of the other blocks wait for it at the
 * next collective).  Its attention (head-sharded, or batch-sharded when
 * heads are not split: wg-xyz) runs its block's sequences, its KV cache
 * holds their slots; the logits' rows are blocks of rag_seqs rows.
 * Of the KV handoffs, a ragged batch takes the SLICE of a head-sharded
 * prefill holding every KV head into a batch-sharded decode's blocks over
 * the whole mesh: the chip's block of the packed rows (ragged, blk_rows the
 * fullest block's).
 * Offload: offload_weights streams the same layers' weights as for a
 * uniform batch (independent of the tokens).  offload_kv keeps the last
 * kv_host_seqs slots of each cache block (kv_batch_axes: kv_seqs
 * consecutive sequences of the micro-batch each) in host memory, as a
 * uniform batch does, so the host-held sequences are chosen by their place
 * in the batch, not their lengths.  Each taking part in the pass moves its
 * own tokens: decode step s's HOST_LOAD Σ_b (prompt_b + s − 1) tokens' K/V
 * of the host-held b with gen_b >= s (host_tok_bytes: one more token each
 * per token of context), HOST_STORE their new rows (prefill Σ_b prompt_b,
 * decode one each); the steps carry the fullest block's bytes (batch_axes =
 * kv_batch_axes), a chip moves its own block's
 * (sp_lower_ragged_host_bytes); the host arena holds every host-held slot
 * at the longest context.
 * Mixture of experts: the router, ROUTE, DISPATCH, the experts and
 * COMBINE run on the pass's T packed rows (the slots per expert S from T,
 * the experts expected active from T tokens), as every token-parallel
 * step.  Experts split over replicas (experts = N = replicas): the
 * replicas' sequences differ, but every MoE layer's all-to-all joins them,
 * so micro-batch j of every replica runs each prefill pass and decode step
 * together (sp_ragged_peers_max_gen: the steps of the longest gen among
 * them; a replica with no sequence left runs a step with no rows, its
 * all-to-alls sending only the counts).  The program is lowered from the
 * micro-batch's view (sp_ragged_micro, which names its place in the batch):
 * the slots per expert S follow the most tokens of any replica in the pass
 * (every source's block of the all-to-all has S slots), the experts
 * expected active the tokens of all of them.  Lowered with one stage, one
 * micro-batch and no prefill_chunk (the others refused by name).
 * Chunked prefill (prefill_chunk = C): pass i (sp_program.step) is a
 * ragged sub-batch: of each of the cache's micro_batch / kv_seqs blocks its
 * sequences [i·k, (i+1)·k) (k = C / blocks; one block: [i·C, (i+1)·C)), as
 * a uniform batch's passes fill the blocks (sp_lower_pass_seq), packed (T =
 * their Σ prompt_b; with sequence blocks the fullest block's), each in its
 * own slot; the cost model and the simulator run the passes as jobs of the
 * flow shop (micro-batch 0's passes, then micro-batch 1's, ...), the
 * executor in that order; sp_lower_ragged_mem envelopes every pass.
 * Ragged batches lower for any micro-batches, prefill_chunk (not
 * prefill_tokens), offload, dense and MoE models (experts split
 * over replicas with one stage, one micro-batch, unchunked), the KV cache written
 * where decode reads it (or that SLICE), and with weight-gathered FFNs,
 * head-sharded attention or heads that are not split; the others are
 * refused by name.
 *
 * KV handoff.  The KV cache is always laid out as decode reads it (kv_*
 * fields of sp_program).  A phase holds, per chip, the K/V of the sequences
 * of its block over `seq` axes and of the KV heads of its block over `head`
 * axes: head-sharded attention seq = N, head = G when KV heads are sharded
 * like Q (KVH % n == 0), else every KV head; batch-sharded attention
 * seq = x, y, z (N then the sorted head group), every head.  When prefill's
 * placement differs from decode's, prefill's layer emits, between its K/V
 * and the KV_STORE, for K and for V, over the axes D the two disagree on:
 *   SLICE      every head here, decode splits sequences over D as well
 *   COLL all-to-all (a2a_to_batch = 1)  heads split over D in prefill,
 *              sequences over D in decode
 *   COLL all-to-all (a2a_to_batch = 0)  the reverse
 *   COLL all-gather of rows over D  every head here, decode's sequences are
 *              split over fewer axes
 * priced, simulated and executed as every other step.
 *
 * Offload (layout offload_weights, offload_attn, offload_ffn / offload_kv).
 * A stage's first w_kind_streamed[k] layers keep their weights of part k
 * (sp_wkind: attention, FFN) in host memory (w_streamed: the layers with
 * some part there), and kv_host_seqs of the kv_seqs sequences of each
 * micro-batch block (the last ones) keep their K/V there.  Copies are
 * steps, prefetched one layer ahead into double-buffered staging
 * (SP_BUF_WSTREAM, SP_BUF_KVSTREAM):
 *   pre    HOST_LOAD  layer 0's weights of part k, for each part the stage
 *                     streams (w_kind_streamed[k] > 0); decode: layer 0's
 *                     host K/V (kv_host_seqs > 0)
 *   layer  HOST_WAIT  src WSTREAM            on SP_ON_STREAMED
 *          HOST_LOAD  next layer's part k    on SP_ON_STREAM_NEXT, for each
 *                                            part some stage streams
 *          HOST_WAIT  src KVSTREAM           decode, every layer
 *          HOST_LOAD  next layer's host K/V  decode, on SP_ON_NEXT
 *          ... the layer ...; after the KV_STORE:
 *          HOST_STORE the appended rows of the host-held sequences
 *                     (src2/src3: the K/V rows it stores), every layer
 * A weights load of part k moves kind_weight_bytes[k] into its place of the
 * staging block (attention at 0, the FFN after the attention's bytes when
 * the stage streams both); a K/V load moves the stored
 * tokens of the host-held sequences (kv_host_seqs · (context − q_len) ·
 * kv_heads_cache · D · kv bytes, K and V); a store their q_len new rows.
 * On a streamed layer every weight operand of a streamed part (stored
 * shard, scales, bias, gain) is read from its staging block; the KV_STORE and ATTN of the
 * host-held sequences use theirs.  A program whose layout streams weights
 * on some stage carries the weight steps on every stage (they run on no
 * layer where w_streamed = 0), so stages share their layer part.
 *
 * Mixture of experts (model n_experts = NE, top_k = k; layout experts = N,
 * 1 or the replicas; ws1d and ws2d storage): the FFN becomes
 *   router MATMUL  RLOG (T, NE) = XG (T, E/|Rx|) · W_ROUTER   [all-reduce Rx]
 *   ROUTE          GATE (T, k): each token's k experts and weights
 *   DISPATCH       DISP (NE·S, E/|Rx|): token rows copied into S slots per
 *                  expert (S = capacity slots per expert per source chip),
 *                  expert-major, so expert e's slots are rows e·S..(e+1)·S-1
 *   all-to-all "r" EXP = DISP regrouped: the N row blocks of NE/N experts go
 *                  to the N replicas (block g to replica g), which keep
 *                  (NE/N experts × N sources × S slots) rows  [N > 1 only].
 *                  Routed (coll.routed): the chips first exchange their
 *                  per-expert token counts (NE/N int64 to each peer), then
 *                  only the occupied slots move, so the bytes depend on the
 *                  routing (sp_lower_moe_a2a_bytes); the unoccupied slots
 *                  of EXP are zero
 *   expert FFN     the dense FFN's steps over those rows, each MATMUL
 *                  grouped: blocks of S rows, block b times local expert
 *                  (b mod NE/N)'s matrix (after the all-to-all the blocks
 *                  are source-major: (source, expert, slot)), each expert
 *                  sharded over the tensor mesh like the dense FFN
 *                  (expert-tensor parallelism)
 *   all-to-all "r" back into DISP, the occupied slots only  [N > 1 only]
 *   COMBINE        Y (T, E/|Rx|) = Σ over a token's k slots of gate · row,
 *                  partial over C like the dense FFN's output
 * Coordinated with the tensor group (DeepSpeed-Inference's layout; N > 1,
 * |C| > 1, serial block): the chips of a replica's tensor mesh share each
 * token's row, so each dispatches only its column block (over C) of it and
 * a token crosses between replicas once per tensor group, not |C| times:
 *   DISPATCH       DISP (NE·S, E/|act|) = the chip's block `axes` = C of XG's
 *                  E/|Rx| columns (src_cols)
 *   all-to-all "r" EXP (NE·S, E/|act|), routed as above
 *   all-gather C   DISP (NE·S, E/|Rx|): whole rows within the replica
 *   expert FFN     in DISP, partial over C
 *   reduce-scatter C  EXP (NE·S, E/|act|)
 *   all-to-all "r" back into DISP (NE·S, E/|act|)
 *   COMBINE        Y2 (T, E/|act|): the block's output already reduce-
 *                  scattered, so the block output adds it without one
 * S = min(T, ceil(capacity · T · q_max)), q_max the most popular expert's
 * share per token (sp_model_moe_routing).  A grouped MATMUL's weight_bytes
 * count the local experts expected to be chosen at all in the step (the
 * mean over expert groups: distinct(N·T)/N, sp_model_moe_routing), its
 * FLOPs every slot (a padded implementation computes them).  A routed
 * all-to-all's bytes_sent / bytes_recv are the expected value: each of a
 * chip's T·k choices leaves it with probability (N−1)/N (uniform router; with
 * skew this is the mean over the expert-parallel group), so
 * round(T·k·(N−1)/N) rows of E/|Rx| elements each way, plus (N−1)·NE/N·8
 * bytes of counts each way for the dispatch.  The executor checks every
 * routed all-to-all against sp_lower_moe_a2a_bytes of the actual routing
 * and reports the expected value beside it.
 */
#ifndef SP_LOWER_H
#define SP_LOWER_H
#include "sp_common.h"
#include "sp_layout.h"
#include "sp_ragged.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sp_step_kind {
    SP_STEP_EMBED = 0,       /* dst(rows, E_total) partial sums of this chip's vocab shard */
    SP_STEP_POS = 1,         /* dst += learned position rows (replicated table) */
    SP_STEP_NORM_STATS = 2,  /* stats(rows, 2) = per-row (sum, sumsq) of src's cols */
    SP_STEP_NORM_APPLY = 3,  /* dst = norm(src) using stats over `k` global cols; weight = gain shard */
    SP_STEP_MATMUL = 4,      /* dst(m, n) (+)= src(m, k) · W(k, n) */
    SP_STEP_BIAS = 5,        /* dst(m, n) += bias shard (n) */
    SP_STEP_ACT = 6,         /* dst = gelu(src) | silu(src) * src2 */
    SP_STEP_ATTN = 7,        /* RoPE, KV-cache append, causal attention: dst = attn(Q=src, K=src2, V=src3) */
    SP_STEP_ADD = 8,         /* dst += src (residual) */
    SP_STEP_COLL = 9,        /* a collective over mesh axes, see sp_coll */
    SP_STEP_SLICE = 10,      /* dst = a block of src's rows (local, no communication) */
    SP_STEP_LOGITS = 11,     /* dst(m, V/n) = src(m, E) · LM-head shard(V/n, E)^T */
    SP_STEP_SEND = 12,       /* send src to the same chip of the next stage */
    SP_STEP_RECV = 13,       /* receive dst from the same chip of the previous stage */
    SP_STEP_KV_STORE = 14,   /* write K=src2, V=src3 rows into the KV cache (decode's layout) */
    SP_STEP_ROUTE = 15,      /* MoE: dst(m, k) = each row's top-k experts of src(m, n = experts) and their weights */
    SP_STEP_DISPATCH = 16,   /* MoE: dst(experts·capacity, n) = src(m, n) rows placed in their experts' slots */
    SP_STEP_COMBINE = 17,    /* MoE: dst(m, n) (+)= Σ_k gate src2 · slot row of src(experts·capacity, n) */
    SP_STEP_GATE_SCALE = 18, /* MoE shared expert gate: dst(m, n) row i *= sigmoid(src(i, 0)), src (m, 1) */
    SP_STEP_HOST_LOAD = 19,  /* offload: host_bytes from host memory into the staging buffer dst (see "Offload") */
    SP_STEP_HOST_STORE = 20, /* offload: the KV rows this pass appended for host-held sequences, back to host memory */
    SP_STEP_HOST_WAIT = 21,  /* offload: the layer's compute waits for the staging buffer src (no work) */
    SP_STEP_COUNT
} sp_step_kind;
const char *sp_step_kind_name(sp_step_kind k);

/* sp_coll_kind (kinds of data movement) lives in sp_common.h. */

/* Step classes, for per-class time totals set side by side (predicted and
 * measured): matmul (MATMUL, LOGITS), attention (ATTN), one per collective
 * kind (COLL by coll.kind; SEND/RECV are send-recv), other (every other
 * step).  Append-only. */
typedef enum sp_step_class {
    SP_CLASS_MATMUL = 0, SP_CLASS_ATTN = 1,
    SP_CLASS_ALLGATHER = 2, SP_CLASS_REDUCESCATTER = 3, SP_CLASS_ALLREDUCE = 4, SP_CLASS_ALLTOALL = 5,
    SP_CLASS_SENDRECV = 6,
    SP_CLASS_OTHER = 7,
    SP_CLASS_HOST = 8,       /* HOST_LOAD, HOST_STORE: copies over the host link */
    SP_CLASS_COUNT
} sp_step_class;
const char *sp_step_class_name(sp_step_class c);   /* "matmul", "attention", "all-gather", ..., "other" */

/* Named activation buffers.  Sizes: sp_lower_buffer_sizes(). */
typedef enum sp_buf {
    SP_BUF_NONE = 0,
    SP_BUF_X = 1,       /* residual stream at layer boundary (rows, E cols of this chip) */
    SP_BUF_XG = 2,      /* gathered / normed layer input */
    SP_BUF_STATS = 3,   /* (rows, 2) norm statistics */
    SP_BUF_Q = 4, SP_BUF_K = 5, SP_BUF_V = 6,
    SP_BUF_QB = 7, SP_BUF_KB = 8, SP_BUF_VB = 9,   /* batch-sharded Q, K, V after all-to-all */
    SP_BUF_ATT = 10,    /* attention output, heads-sharded */
    SP_BUF_ATTB = 11,   /* attention output, batch-sharded */
    SP_BUF_H = 12,      /* FFN hidden (gate / GELU input) */
    SP_BUF_H2 = 13,     /* FFN hidden (SwiGLU up) */
    SP_BUF_HS = 14,     /* FFN hidden after reduce-scatter (2D) */
    SP_BUF_HS2 = 15,
    SP_BUF_Y = 16,      /* partial-sum output of the block (rows, E cols of Rx part) */
    SP_BUF_Y2 = 17,     /* second partial output (serial block: the FFN's) */
    SP_BUF_LAST = 18,   /* last-token rows */
    SP_BUF_LOGITS = 19, /* (rows, V/n) */
    SP_BUF_LOGITS_ALL = 20, /* (rows, V) */
    SP_BUF_KVIN = 21,   /* rows of the layer input used for K/V (batch slice) */
    SP_BUF_KP = 22, SP_BUF_VP = 23,   /* K/V partial sums before their reduction */
    SP_BUF_QP = 24,     /* Q partial sums before the reduce-scatter over Rx */
    SP_BUF_ATTG = 25,   /* attention output gathered over Rx before WO */
    SP_BUF_EMB = 26,    /* (all rows of the micro-batch, E) embedding partial sums */
    SP_BUF_XF = 27,     /* (sequences, E) final rows gathered whole for the LM head */
    SP_BUF_RLOG = 28,   /* MoE router logits (rows, n_experts) */
    SP_BUF_GATE = 29,   /* MoE routing: n_experts int64 counts of this chip's tokens per expert, n_experts int64
                           counts received by the dispatch all-to-all (source-major: N sources × NE/N local
                           experts), then (rows, top_k) choices of SP_ROUTE_BYTES (SP_ROUTE_CHOICES) */
    SP_BUF_DISP = 30,   /* MoE token rows in expert slots (n_experts · slots, E cols of this chip) */
    SP_BUF_EXP = 31,    /* MoE slots of this chip's experts after the dispatch all-to-all */
    SP_BUF_WSTREAM = 32,  /* offload: staging of streamed layers' weights, min(2, w_streamed) blocks of
                             layer_weight_bytes (each streamed part's weights, attention then FFN, each
                             weight's shard, scales, bias as the arena lays them) */
    SP_BUF_KVSTREAM = 33, /* offload: staging of the host-held sequences' K/V of one layer, per block
                             K (kv_host_seqs, max_context, kv_heads_cache, D) then V; decode 2 blocks
                             (min(2, n_layers)), prefill 1 */
    /* Gathered weights (weight-gathered layouts), reused across layers: the
     * buffer of per-layer weight w is SP_BUF_GATHERED_OF(w), named by w, so
     * weights have one vocabulary (sp_weight) and a new per-layer kind has
     * its buffer without a new name here.  Insert activation buffers above. */
    SP_BUF_GATHERED = 34,
    SP_BUF_COUNT = SP_BUF_GATHERED + SP_W_COUNT - SP_W_FIRST_LAYER
} sp_buf;
#define SP_BUF_GATHERED_OF(w) ((sp_buf)(SP_BUF_GATHERED + (int)(w) - SP_W_FIRST_LAYER))
/* "x", "xg", ...; a gathered weight's buffer by its weight's name ("wq"). */
const char *sp_buf_name(sp_buf b);

/* The executor's scratch, per chip, sized by the lowering from the program's
 * steps (sp_program.scratch_bytes) so that the memory it reports is all a
 * chip holds.  Slots marked host live in host memory on a device with its
 * own memory (the CUDA device); on the CPU every slot is chip memory.
 * Append-only. */
typedef enum sp_scr {
    SP_SCR_PACK = 0,      /* collective packing: the K blocks of an all-gather / reduce-scatter, an all-to-all's input */
    SP_SCR_PACK2 = 1,     /* an all-to-all's output */
    SP_SCR_Q = 2,         /* attention: the RoPE'd copy of q (rows, Hl, D) */
    SP_SCR_K = 3,         /* k rows stored or attended (rows, KVH held, D); padded heads' output */
    SP_SCR_V = 4,         /* v rows stored (rows, KVH held, D); padded heads' queries */
    SP_SCR_SCORES = 5,    /* host: attention scores of one query row (context) fp32 */
    SP_SCR_POS = 6,       /* host: token positions of the rows RoPE / learned positions touch, int64 */
    SP_SCR_SCALES = 7,    /* INT8/FP8 scales of a gathered weight's columns, fp32 */
    SP_SCR_SAMPLE = 8,    /* host, last stage: sampling candidates of one row (vocab, SP_SAMPLE_CAND_BYTES each) */
    SP_SCR_TOKENS = 9,    /* the replica's sampled tokens through device memory (pipeline hand-off), int32 */
    SP_SCR_LOGITS_ROW = 10, /* host, last stage: one logits row read back from a device with its own memory */
    SP_SCR_COUNT
} sp_scr;
const char *sp_scr_name(sp_scr s);
int sp_scr_host(sp_scr s);   /* 1: host memory on a device with its own memory */
/* Bytes of one sampling candidate (probability fp32, token id int32): the
 * CPU sampling kernel's scratch element. */
#define SP_SAMPLE_CAND_BYTES 8
/* Bytes of one MoE routing choice (expert int32, slot int32, weight fp32):
 * the CPU kernel's sp_kern_route. */
#define SP_ROUTE_BYTES 12
/* The routing choices in SP_BUF_GATE start after 2·n_experts int64 counts. */
#define SP_ROUTE_CHOICES(gate, n_experts) ((void *)((int64_t *)(gate) + 2 * (n_experts)))

/* Weights are named by sp_weight (sp_model.h). */

#define SP_AXSEQ_MAX 8
/* A collective: the data of one chip is a (rows, cols) matrix; the group is
 * row_axes ∪ col_axes.  All-gather: each chip contributes its (rows, cols)
 * block; the result is (rows·|row_axes|, cols·|col_axes|) with the block of
 * group member g at row block / col block given by g's coordinates on
 * row_axes / col_axes (each in its axis-sequence order).  Reduce-scatter is
 * the mirror: the input is the big matrix, the output one block, summed.
 * All-reduce: same shape in and out, over row_axes∪col_axes.  All-to-all
 * heads→batch (a2a_to_rows = 1): input (rows, cols·K) split by column chunk
 * to peers, output (rows/K, cols·K) ... see lower.c. */
typedef struct sp_coll {
    sp_coll_kind kind;
    char row_axes[SP_AXSEQ_MAX];     /* axis letters, major first; "" = none */
    char col_axes[SP_AXSEQ_MAX];
    int group;                       /* chips in the group (K) */
    int64_t rows, cols;              /* this chip's block (all-gather input, RS output, a2a input) */
    int64_t elems;                   /* elements of the operand: AG input, RS output, AR whole buffer
                                        padded to a multiple of group, A2A input, send/recv */
                                     /* A2A over the replica axis (row_axes "r"): MoE dispatch and
                                        combine; the rows are `group` equal blocks, block g goes to
                                        member g and comes back in member order */
    int a2a_to_batch;                /* all-to-all: 1 heads→batch, 0 batch→heads */
    sp_dtype dtype;                  /* element type moved (weights: storage dtype) */
    int64_t bytes_sent;              /* per chip, exact, (K-1)/K factors included */
    int64_t bytes_recv;
    int is_weight;                   /* gathers a weight (weight-gathered layouts): the step's
                                        `weight` names it, its stored shard is the source */
    int overlappable;                /* may overlap with compute (weight gathers, a2a) */
    int routed;                      /* MoE all-to-all of the occupied slots only: 1 dispatch (with its
                                        count exchange), 2 combine; bytes_sent / bytes_recv are then the
                                        expected value (see the MoE note above) */
    unsigned mask;                   /* the group as a set of mesh axes (SP_AXES_* of sp_mesh.h) */
} sp_coll;

typedef struct sp_step {
    sp_step_kind kind;
    sp_buf dst, src, src2, src3;
    sp_weight weight;        /* MATMUL, NORM_APPLY, BIAS, EMBED, LOGITS; COLL: the weight a weight gather moves */
    sp_buf wbuf;             /* MATMUL from a gathered weight buffer instead of the stored shard */
    int accumulate;          /* MATMUL: dst += instead of = */
    int64_t m, k, n;         /* MATMUL: local shapes.  NORM_*: m rows, n local cols, k global cols.
                                ACT/ADD/BIAS/POS: m rows, n cols.  SLICE: m rows kept, n cols,
                                k rows in src.  EMBED: m rows, n = E.  LOGITS: m rows, k = E, n = V/n */
    /* Which block of a sharded dimension this chip holds, as an axis sequence
     * (block index = sp_lower_axes_index(layout, rank, axes)):
     *   NORM_APPLY, BIAS, POS: the column block of dst (gain/bias/positions columns)
     *   SLICE: the row block kept (after taking every `every`-th row when every > 1)
     *   ATTN, KV_STORE: the q-head block; batch_axes the sequence block */
    char axes[SP_AXSEQ_MAX];
    char batch_axes[SP_AXSEQ_MAX];
    int64_t every;           /* SLICE: keep the last row of each group of `every` rows first (0 = all) */
    /* ATTN / KV_STORE: sequences, query tokens, q heads, KV heads held in the
     * K/V source (src2/src3), KV heads stored per sequence in the cache,
     * head dim, tokens in context after this step, first cache position */
    int64_t batch, q_len, heads, kv_heads_src, kv_heads, d_head, context, pos0;
    int kv_repl;             /* K/V source holds every KV head; cache keeps those this chip's q heads use */
    int from_cache;          /* ATTN: keys/values from the KV cache (decode) or from src2/src3 (prefill) */
    /* MoE.  MATMUL: the rows are blocks of `capacity` rows, block b times
     * local expert (b mod `experts`)'s matrix (experts 0: one matrix).
     * ROUTE: k = top_k of n experts.
     * DISPATCH / COMBINE: `experts` × `capacity` slot rows, k slots per token. */
    int64_t experts, capacity;
    int64_t src_cols;        /* DISPATCH: columns of src when only the chip's block `axes` of n
                                of them is dispatched (the coordinated all-to-all); 0: n, all */
    int64_t flops;           /* MATMUL/ATTN/LOGITS: FLOPs on this chip */
    int64_t weight_bytes;    /* weight bytes read from HBM */
    int64_t kv_bytes_read;   /* ATTN: KV-cache bytes read */
    int64_t kv_bytes_written;/* KV_STORE */
    int64_t act_bytes;       /* activation bytes read + written */
    /* HOST_LOAD / HOST_STORE: bytes over the host link at the lowered
     * context (shape.context), and per context token beyond it (a decode
     * KV load reads every stored token: bytes(ctx) = host_bytes +
     * host_tok_bytes · (ctx − context)) */
    int64_t host_bytes, host_tok_bytes;
    sp_wkind wkind;          /* HOST_LOAD into SP_BUF_WSTREAM: the part of a layer's weights it copies */
    int on;                  /* layer part: the layers that run it (sp_step_on) */
    int ragged;              /* ATTN, KV_STORE, POS, SLICE of a ragged batch: each sequence of the pass
                                has its own rows, tokens and context (sp_lower_ragged_seq); m = rows
                                (Σ tokens), batch = sequences, q_len and context the largest, pos0 0.
                                With sequence blocks (batch_axes of more than one chip; see "Ragged
                                batches"): rows of the chip's block (sp_lower_ragged_blk_seq), blk_rows
                                each, batch = sequences per block.  COLL (all-to-all), SLICE with
                                batch_axes: packed rows <-> blocks of blk_rows rows (sp_lower_ragged_blk_rows).
                                HOST_LOAD of K/V, HOST_STORE (offload_kv): batch = the host-held
                                sequences taking part, each its own rows (host_bytes: their stored
                                tokens, resp. m = their new rows) */
    int64_t blk_rows;        /* ragged steps over sequence blocks: rows per block (the fullest block's
                                tokens; a block's rows are its tokens, then zero rows up to blk_rows) */
    sp_coll coll;            /* COLL, SEND, RECV */
} sp_step;

/* Which layers of a stage run a layer-part step (pre and post steps run
 * once per pass, whatever `on` says).  Layer li is 0-based on the stage.
 * Every consumer asks sp_lower_step_runs; none decides it again. */
typedef enum sp_step_on {
    SP_ON_EVERY = 0,     /* every layer */
    SP_ON_STREAMED = 1,  /* li < w_streamed: the layer's weights come from host memory */
    SP_ON_STREAM_NEXT = 2, /* li + 1 < w_kind_streamed[wkind]: prefetches the next layer's weights of
                              the step's part */
    SP_ON_NEXT = 3,      /* li + 1 < n_layers: prefetches the next layer's (KV) */
    SP_ON_COUNT
} sp_step_on;
/* The class of a step (sp_step_class). */
sp_step_class sp_step_class_of(const sp_step *s);

#define SP_PROG_MAX_STEPS 64

/* The parts of a program (append-only): pre, the MoE (or only) layer,
 * post, and the dense layer between MoE layers (moe_every > 1). */
typedef enum sp_prog_part { SP_PART_PRE = 0, SP_PART_LAYER = 1, SP_PART_POST = 2, SP_PART_DENSE = 3, SP_PART_COUNT } sp_prog_part;

typedef struct sp_steps {
    int n;
    sp_step s[SP_PROG_MAX_STEPS];
} sp_steps;

/* Shapes of one step of work. */
typedef struct sp_shape {
    int64_t batch;     /* sequences in the whole job (all replicas) */
    int64_t q_len;     /* tokens per sequence this step: prompt for prefill, 1 for decode */
    int64_t context;   /* tokens in the KV cache after this step */
    int64_t max_context; /* KV cache capacity per sequence (prompt + generate) */
    sp_dtype act_dtype;  /* activations moved and stored: BF16 on accelerators, F32 in our executor */
    int64_t passes_left; /* prefill whose layout sets prefill_tokens: the token passes after the one
                            to lower (0: the last pass, which ends with the prompt's last token) */
} sp_shape;

/* Global (padded) dimensions and the storage sharding of one weight. */
typedef struct sp_weight_spec {
    sp_weight weight;
    int present;
    int bias;                           /* the matrix has a bias: fp32, cols_real, whole on every chip */
    int64_t rows, cols;                 /* global, padded */
    int64_t rows_real, cols_real;       /* unpadded (extra rows/cols are zeros) */
    char row_axes[SP_AXSEQ_MAX];        /* storage sharding (major first) */
    char col_axes[SP_AXSEQ_MAX];
    int64_t local_rows, local_cols;     /* this chip's block */
    sp_dtype dtype;                     /* storage dtype */
    int64_t count;                      /* matrices of this shape held: the local experts of a MoE
                                           layer's FFN weights, else 1 (bytes count all of them) */
    int64_t bytes;                      /* local bytes incl. per-column scales for INT8/FP8 (fp32,
                                           every global column) and the bias (fp32, whole); each of
                                           the three blocks rounded up to SP_MEM_ALIGN */
} sp_weight_spec;

typedef struct sp_program {
    sp_phase phase;
    sp_layout layout;
    sp_shape shape;
    int stage;
    int64_t micro_batch;     /* sequences per micro-batch on one replica */
    /* Prefill passes (layout prefill_chunk / prefill_tokens; decode: 1, 1).
     * The program is one pass: pass_seqs sequences of the micro-batch ×
     * shape.q_len tokens.  A micro-batch's prefill runs passes_seq sequence
     * chunks (chunk i: sequences [i·pass_seqs, (i+1)·pass_seqs) of the
     * micro-batch, KV cache sequences [i·kv_pass_seqs, (i+1)·kv_pass_seqs)
     * of this chip's), each as passes_tok token passes in order; token pass
     * j (shape.passes_left = passes_tok − 1 − j) runs prompt tokens
     * [j·q_len, (j+1)·q_len): shape.context = (j+1)·q_len, attention reads
     * the KV cache (from_cache), and only the last pass (passes_left 0)
     * ends with the logits (`logits`). */
    int64_t pass_seqs, passes_seq, passes_tok, kv_pass_seqs;
    int logits;              /* the last stage's post computes the logits (every decode step, the
                                last token pass of a prefill) */
    int64_t n_layers;        /* layers on this stage */
    int64_t rope_dims;       /* rotary dimensions of a head that attention and the KV store rotate
                                (0: the model has no RoPE) */
    int64_t heads_padded, kv_heads_stored, ffn_padded, vocab_padded;
    int64_t matmul_k_max;    /* tallest weight operand (K rows, gathered or stored) of any MATMUL */
    sp_steps pre, layer, post;
    sp_steps dense;          /* moe_every > 1: the layer with the dense FFN; else 0 steps */
    int64_t first_layer;     /* the model layer of the stage's first layer */
    int64_t n_dense_layers;  /* layers of the stage that run `dense` (0: every layer runs `layer`) */
    int64_t moe_every;       /* the model's moe_every when it has dense layers between MoE ones, else 1 */
    int64_t buf_bytes[SP_BUF_COUNT];   /* bytes each buffer must hold (act_dtype; weights: storage) */
    int64_t scratch_bytes[SP_SCR_COUNT]; /* bytes of each executor scratch slot (sp_scr) */
    sp_weight_spec wspec[SP_W_COUNT];  /* storage of every weight on this stage */
    /* KV cache of this chip, in the decode layout (both phases write it so) */
    int64_t kv_seqs;                   /* sequences per micro-batch whose KV this chip holds */
    int64_t kv_heads_cache;            /* KV heads stored per sequence */
    char kv_batch_axes[SP_AXSEQ_MAX];  /* sequence block axes */
    char kv_head_axes[SP_AXSEQ_MAX];   /* q-head block axes (cache heads follow them) */
    int kv_repl;                       /* KV heads replicated across head shards */
    /* Offload (layout offload_weights / offload_kv; see "Offload" below) */
    int64_t w_streamed;                /* this stage's first layers with some weights in host memory */
    int64_t w_kind_streamed[SP_WKIND_COUNT]; /* per part (sp_wkind): the first layers whose weights of
                                                that part live in host memory */
    int64_t kind_weight_bytes[SP_WKIND_COUNT]; /* one layer's weights of each part on this chip */
    int64_t layer_weight_bytes;        /* one staging block: Σ kind_weight_bytes of the parts this stage
                                          streams (w_kind_streamed > 0) */
    int64_t kv_host_seqs;              /* of kv_seqs per micro-batch, the last ones, held in host memory */
    /* A ragged batch (sp_lower_ragged; NULL otherwise): the per-sequence lengths (borrowed) and,
     * in decode, the step (1 .. max gen); in prefill, the pass (0 .. passes_seq − 1: its
     * sequences [step · pass_seqs, (step + 1) · pass_seqs)) */
    const sp_ragged *ragged;
    int64_t step;
    /* A ragged batch's rows between layers (sp_lower_ragged; see "Ragged batches"): the
     * sequences split into rag_blocks blocks of consecutive sequences over the FFN's
     * weight-gathered axes (1: none, every chip holds every token), the chip's block its
     * block of those axes (batch_axes of the POS step).  The embedding's rows are
     * rag_blocks blocks of rag_rows rows (a block's tokens packed, then rows of token 0 that
     * no sequence reads); the logits' rows are rag_blocks blocks of rag_seqs rows (the
     * block's sequences taking part in the pass, in order, then rows no sequence reads). */
    int rag_blocks;
    int64_t rag_rows, rag_seqs;
} sp_program;

/* The steps of part k of p. */
const sp_steps *sp_program_part(const sp_program *p, sp_prog_part k);
/* How many times part k runs in one pass: pre and post once, layer
 * n_layers − n_dense_layers, dense n_dense_layers. */
int64_t sp_program_part_runs(const sp_program *p, sp_prog_part k);
/* Steps one pass of p runs: every part's steps times its runs (at most
 * SP_PROG_MAX_STEPS · (n_layers + 2)). */
int64_t sp_program_steps(const sp_program *p);
/* The part local layer li (0 .. n_layers-1) of the stage runs: SP_PART_LAYER or SP_PART_DENSE. */
sp_prog_part sp_program_layer_part(const sp_program *p, int64_t li);
/* How many layers of the stage hold weight w (its wspec counts one layer):
 * for a per-layer kind the stage's layers that have it (sp_weight_in_layer:
 * experts in MoE layers, the dense FFN in the others), for a model-level
 * kind 1. */
int64_t sp_program_weight_layers(const sp_program *p, sp_weight w);
/* 1 if the layer-part step s runs on layer li of p's stage (sp_step_on). */
int sp_lower_step_runs(const sp_program *p, const sp_step *s, int64_t li);
/* How many layers of one pass run step s of layer part `part` (SP_PART_LAYER or SP_PART_DENSE). */
int64_t sp_lower_step_layers(const sp_program *p, sp_prog_part part, const sp_step *s);
/* The elements step s of p puts through each elementwise kernel
 * (sp_hw_elem) besides its FLOPs: norms, adds, copies and embedding rows
 * m·n; the KV store stages and appends K and V (4 copies of rows × cached
 * KV heads × d_head) and rotates K; attention stages and rotates its
 * queries (rows × heads × d_head) and, in a prefill pass that does not
 * read the cache, its keys.  Rotation counts rows × heads × rope_dims.
 * out[k] = 0 for the kernels the step does not run (doubles: counts, never
 * sizes, so no product overflows). */
void sp_lower_step_elems(const sp_program *p, const sp_step *s, double out[SP_ELEM_COUNT]);
/* Bytes a HOST_LOAD / HOST_STORE moves at context ctx (0: as lowered). */
int64_t sp_lower_host_bytes(const sp_step *s, int64_t ctx);
/* A ragged program's host copy of K/V (HOST_LOAD into SP_BUF_KVSTREAM, HOST_STORE; s->ragged):
 * the bytes of the chip's block blk of the step's batch_axes (its host-held sequences' own
 * tokens; the step's host_bytes are the fullest block's).  Other steps: s->host_bytes. */
int64_t sp_lower_ragged_host_bytes(const sp_program *p, const sp_step *s, int blk);

/* Lowers one phase of a layout for pipeline stage `stage` (0..stages-1).
 * The program describes one micro-batch on one chip; every chip of a stage
 * runs the same program (only its coordinates differ).  Allocation-free.
 * Fails with SP_EINVAL (message in sp_last_error()) if the layout does not
 * apply to the model and shape. */
sp_status sp_lower(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape, int stage,
                   sp_program *out);

/* sp_lower for a ragged batch r (sp_ragged.h, borrowed: the program
 * points at it until it is no longer used; NULL: sp_lower): the sequences
 * of one micro-batch of one replica, r->n = shape.batch / (replicas ·
 * microbatches) (otherwise a slice of the batch: sp_ragged_micro); max_context >= r->max_context.  Prefill: q_len = context =
 * r->max_prompt; the rows are the Σ prompt_b tokens packed sequence after
 * sequence, of the sequences of pass `step` (0 .. passes_seq − 1; with
 * prefill_chunk C: sequences [step·C, (step + 1)·C), else 0: all).  Decode: q_len 1 and `step` s (1 .. r->max_gen); the rows are
 * the sequences with gen_b >= s, in order, each at context prompt_b + s
 * (the program's shape.context: the largest of them).  See "Ragged
 * batches" above. */
sp_status sp_lower_ragged(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape,
                          const sp_ragged *r, int64_t step, int stage, sp_program *out);
/* A ragged batch's decode: *out is step 1's program (every sequence), its
 * buffer and scratch sizes the largest of every step's (the ends of each
 * run of steps with the same sequences, sp_ragged_segment_end), so that
 * one arena holds every step.  tmp: room for one program (clobbered). */
sp_status sp_lower_ragged_decode(const sp_model *m, const sp_layout *l, const sp_shape *shape, const sp_ragged *r,
                                 int stage, sp_program *out, sp_program *tmp);

/* The checks of sp_lower alone: SP_OK if the layout applies to the model
 * and shape, SP_EINVAL otherwise, without a message (cheap; for searches
 * that probe many layouts).  Call sp_lower for the reason. */
sp_status sp_lower_check(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape, int stage);

/* Checks the layout against a model, chip count and batch: the checks of
 * sp_layout_check_base (chips, storage, torus and node fit, ...), then the
 * lowering's of both phases of stage 0 (dimensions that must divide: E, F,
 * vocab over the mesh; batch over replicas × micro-batches and over the
 * batch axes of each phase; layers >= stages; KV heads vs head shards), for
 * a prompt of one prefill pass (prefill_tokens when the layout chunks it,
 * else 1 token) so that only the checks that do not depend on the prompt
 * run; a disaggregated layout: each group's, the reason prefixed with the
 * group ("prefill group: ...").  hw may be NULL.  The reason goes to
 * sp_last_error() and, when err is non-NULL, to err. */
sp_status sp_layout_check(const sp_layout *l, const sp_model *m, const sp_hw *hw, int64_t chips, int64_t batch,
                          sp_error *err);

/* Everything one phase's price depends on.  Two (layout, phase, shape,
 * stage) whose keys are equal (memcmp: padding is zeroed) lower to the same
 * steps, buffer sizes and weight storage but for fields only the executor
 * reads (the cache's replication and, without a handoff, its axes of one
 * chip: sp_lower_begin), so a price of one serves the other.  A phase
 * depends on the other phase's layout only through the KV cache: prefill
 * writes it in decode's layout (the transition and the cache geometry are
 * in the key); decode depends on prefill not at all once the pair is valid
 * (both phases' checks run in either phase's sp_lower_check). */
typedef struct sp_lower_key {
    sp_layout layout;        /* the other phase's FFN and attention cleared */
    sp_shape shape;
    int first_stage, last_stage;
    int64_t n_layers;
    int64_t moe_phase;       /* first_layer mod moe_every: which of the stage's layers are MoE (0 without dense ones) */
    int kv_mode;             /* prefill: how K/V reach the cache, when a handoff is emitted (else and in decode 0) */
    int64_t kv_seqs, kv_heads_cache;
    /* the cache's axes; without a handoff, those of more than one chip */
    char kv_batch_axes[SP_AXSEQ_MAX], kv_head_axes[SP_AXSEQ_MAX];
    int64_t w_streamed;      /* this stage's offloaded layers (the layout's lists of them are cleared) */
    int64_t w_kind[SP_WKIND_COUNT];   /* and of each part */
    int w_any;               /* per part, a bit: some stage streams it (the layer part carries its copy steps) */
} sp_lower_key;
/* sp_lower_check, and on SP_OK the program's key. */
sp_status sp_lower_check_key(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape, int stage,
                             sp_lower_key *key);
/* sp_lower in two halves, for callers that look a program up by its key
 * before deciding to lower it.  sp_lower_begin runs the checks quietly (as
 * sp_lower_check), fills *key (may be NULL) and p's scalar fields, and
 * keeps what the emission needs in job (caller-owned: sp_lower_job_create,
 * sp_lower_job_free; one job per program being lowered, used by one thread
 * at a time); sp_lower_finish(job, p) then emits p's steps exactly as
 * sp_lower would.  m and l are borrowed by the job until finish; a finish
 * without a successful begin of p in that job (or a second one) fails with
 * SP_EINVAL. */
typedef struct sp_lower_job sp_lower_job;
sp_status sp_lower_job_create(sp_lower_job **out);
void sp_lower_job_free(sp_lower_job *job);
sp_status sp_lower_begin(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape, int stage,
                         sp_lower_key *key, sp_program *p, sp_lower_job *job);
sp_status sp_lower_finish(sp_lower_job *job, sp_program *p);

/* How a prefill's passes add up (prefill_chunk, prefill_tokens): the passes
 * a consumer prices, by shape.passes_left, and the weight of each, so that
 *   Σ_i num[i] · (figure of pass left[i]) / 2
 * is the figure of one micro-batch's whole prefill: passes_seq ×
 * ((passes_tok − 1) × (first + second-to-last) / 2 + last).  Exact for every
 * figure affine in the token pass (FLOPs, bytes: only attention's context
 * grows, linearly); a time is exact while the same roofline term binds
 * attention in every pass, like decode's trapezoid.  p: any pass of the
 * prefill (decode: one term, weight 2).  Returns the number of terms, 1 or 3. */
int sp_lower_pass_terms(const sp_program *p, int64_t left[3], int64_t num[3]);

/* Storage of the vocabulary tables (embedding, LM head) and learned
 * positions for a layout's weight dtype: weight-only int8/fp8 covers the
 * layers' matmuls, the tables stay at bf16; otherwise the weights' dtype. */
sp_dtype sp_lower_table_dtype(sp_dtype weights);


/* Every block a chip holds (a buffer, a weight shard, its scales, its bias,
 * a KV cache, the workspace, a scratch slot) starts on SP_MEM_ALIGN bytes,
 * and the sizes below count each block rounded up to it: one arena of
 * `total` bytes, carved block by block, holds exactly what a chip needs. */
#define SP_MEM_ALIGN 64
static inline int64_t sp_mem_align(int64_t bytes) { return (bytes + SP_MEM_ALIGN - 1) / SP_MEM_ALIGN * SP_MEM_ALIGN; }

/* Pure size function shared by the cost model and the executor (llm.c style):
 * bytes a chip of `stage` holds for weights, for the KV cache at
 * `kv_context` tokens per sequence, the activation buffers of the program
 * (max over its buffers, counted once each), the dequantisation workspace
 * and the executor's scratch (sp_scr).  The executor allocates one arena of
 * `total` bytes per chip and carves every block from it. */
typedef struct sp_mem_sizes {
    int64_t weights;           /* stored weight shards (+ scales, + biases) */
    int64_t gathered_weights;  /* weight-gathered buffers (one layer's worth) */
    int64_t kv;                /* KV cache, this chip, its dtype (K and V) */
    int64_t activations;       /* activation buffers of the program */
    int64_t workspace;         /* dequantisation tile of matmuls and logits over 16/8-bit weights */
    int64_t scratch;           /* executor scratch: the sum of the scratch slots (sp_scr) */
    int64_t staging;           /* offload: the device staging buffers (SP_BUF_WSTREAM, SP_BUF_KVSTREAM) */
    int64_t total;             /* device memory: every field above */
    /* host memory (offload), not part of total: the host arena */
    int64_t host_weights;      /* streamed layers' weights */
    int64_t host_kv;           /* host-held sequences' KV cache */
    int64_t host_total;
} sp_mem_sizes;
sp_status sp_lower_mem_sizes(const sp_program *prefill, const sp_program *decode, sp_mem_sizes *out);
/* The memory of a ragged replica's chip of stage `stage` that runs the
 * replica's M micro-batches mb[0 .. M) (sp_ragged_micro) one after another
 * in one arena (the cost model's and the executor's one rule): *pf is
 * micro-batch 0's prefill (q_len = context = its longest prompt; its pass 0)
 * and *dc its decode (sp_lower_ragged_decode), each with every buffer and
 * scratch slot the largest of every micro-batch's programs of its phase
 * (every prefill pass, prefill_chunk), and *mem =
 * sp_lower_mem_sizes(pf, dc) (pf NULL: the decode alone).  Shapes: pf_sh
 * and dc_sh as sp_lower_ragged takes them (pf_sh's q_len and context set
 * per micro-batch).  One micro-batch: its own programs. */
sp_status sp_lower_ragged_mem(const sp_model *m, const sp_layout *l, const sp_shape *pf_sh, const sp_shape *dc_sh,
                              const sp_ragged *mb, int M, int stage, sp_program *pf, sp_program *dc,
                              sp_mem_sizes *mem);
/* One program's part that does not come from its buffers: weights and KV
 * (the stage's: either phase's program gives the same) and the
 * dequantisation workspace (this program's: one tile of 64 fp32 columns of
 * its tallest weight operand; a stage needs the larger of its two
 * programs'); buffers 0.  Every sum is checked: SP_EINVAL naming the part
 * when one does not fit in int64 (out is then not to be used). */
sp_status sp_lower_mem_stage(const sp_program *p, sp_mem_sizes *out);
/* The same for callers that keep only sizes: weights, KV and workspace
 * from `stage_sizes` (sp_lower_mem_stage with the two phases' larger
 * workspace), buffers from both phases' buf_bytes (either may be NULL). */
sp_status sp_lower_mem_sizes_merge(const sp_mem_sizes *stage_sizes, const int64_t *bufs_a, const int64_t *bufs_b,
                              sp_mem_sizes *out);
/* The same for the scratch slots (scratch_bytes of either phase, either may
 * be NULL): out->scratch is the sum over slots of the larger, total updated. */
sp_status sp_lower_mem_scratch_merge(const int64_t *scr_a, const int64_t *scr_b, sp_mem_sizes *out);

/* Utility: group size of an axis sequence under a layout ("yz" -> Y*Z). */
int sp_lower_axes_size(const sp_layout *l, const char *axes);
/* Block index of a chip (global rank under sp_layout_mesh) for an axis sequence. */
int sp_lower_axes_index(const sp_layout *l, int rank, const char *axes);

/* ---- resolved operands ------------------------------------------------------------
 * A program serves every chip of its stage; these resolve what one chip
 * (global rank) of it does, so that no consumer re-derives from axis strings
 * what the lowering decided. */
#define SP_COLL_GROUP_MAX 64
typedef struct sp_coll_group {
    int K;                                /* chips in the group (coll.group) */
    int members[SP_COLL_GROUP_MAX];       /* ranks in group order (sp_mesh_group_members over coll.mask) */
    int row_blk[SP_COLL_GROUP_MAX];       /* each member's block on coll.row_axes */
    int col_blk[SP_COLL_GROUP_MAX];       /* each member's block on coll.col_axes */
    int store_col_blk[SP_COLL_GROUP_MAX]; /* weight gathers: each member's column block of the stored
                                             shard (wspec[weight].col_axes); else 0 */
} sp_coll_group;
/* The group of a COLL step for the chip of global rank `rank`.  SP_ENOTSUP
 * for a group of more than SP_COLL_GROUP_MAX chips, SP_EINVAL for a step
 * that is not a COLL. */
sp_status sp_lower_coll_group(const sp_program *p, const sp_step *s, int rank, sp_coll_group *out);
/* A routed MoE all-to-all (coll.routed) on the chip of expert-parallel group
 * rank g (its replica): the exact bytes it sends and receives, given its
 * per-expert token counts own (NE) and the counts from (N sources × NE/N,
 * source-major) it receives in the dispatch's exchange, as in SP_BUF_GATE.
 * With out = Σ own[e] over the experts of other chips and in = Σ from[h·NE/N+j]
 * over sources h != g, rows of cols elements of dtype:
 *   dispatch: sent = out rows + counts, recv = in rows + counts
 *   combine:  sent = in rows,           recv = out rows
 * counts = (N−1)·NE/N·8 bytes.  SP_EINVAL for a step that is not routed. */
sp_status sp_lower_moe_a2a_bytes(const sp_program *p, const sp_step *s, int g, const int64_t *own,
                                 const int64_t *from, int64_t *sent, int64_t *recv);
/* ATTN and KV_STORE: the first query head of the chip's q-head block (*q0)
 * and the first KV head it uses: ATTN, of the keys/values it reads (the
 * cache's or src2/src3's heads); KV_STORE, the offset, in the heads of
 * src2/src3, of the heads the cache keeps (0 when it keeps them all). */
void sp_lower_attn_heads(const sp_model *m, const sp_program *p, const sp_step *s, int rank, int64_t *q0,
                         int64_t *kv0);
/* Prefill passes: the micro-batch sequence that row `row` (0..pass_seqs−1)
 * of sequence chunk `chunk` runs.  A pass fills the same part of every
 * chip's KV cache block: decode splits the micro-batch into blocks of
 * kv_seqs sequences (one per chip group holding them), so chunk i takes
 * the i-th kv_pass_seqs sequences of each block, block after block
 * (identity without chunks). */
int64_t sp_lower_pass_seq(const sp_program *p, int64_t chunk, int64_t row);
/* A ragged program (sp_lower_ragged): the sequence of the pass's row block i
 * (0 .. pass_seqs − 1): its index in the batch (*seq, also its KV cache
 * slot), first row (*row0: rows are packed, sequence after sequence), tokens
 * this pass (*q_len: prefill prompt_b, decode 1) and first position (*pos0:
 * prefill 0, decode prompt_b + step − 1); context after the pass = pos0 +
 * q_len.  Also the uniform program's (row0 = i·q_len).  O(i). */
/* How many replicas of a ragged batch run each prefill pass and decode step together: all
 * of them when the model's experts are split over them (the expert all-to-all joins them;
 * see "Ragged batches"), else 1 (each on its own). */
int sp_lower_ragged_lockstep(const sp_model *m, const sp_layout *l);
void sp_lower_ragged_seq(const sp_program *p, int64_t i, int64_t *seq, int64_t *row0, int64_t *q_len, int64_t *pos0);
/* A ragged program's sequence blocks: the batch's sequences split into nblk
 * blocks of consecutive sequences (r->n / nblk each; a step's blocks are
 * those of its batch_axes, the chip's block sp_lower_axes_index of them).
 * The i-th sequence of block blk taking part in the pass (0 .. ): as
 * sp_lower_ragged_seq, with *row0 counted from the block's first row and
 * *slot its index within the block (its KV cache slot on a chip that holds
 * the block); *seq = -1 past the block's.  nblk 1: sp_lower_ragged_seq. */
void sp_lower_ragged_blk_seq(const sp_program *p, int nblk, int blk, int64_t i, int64_t *seq, int64_t *slot,
                             int64_t *row0, int64_t *q_len, int64_t *pos0);
/* A ragged program's i-th sequence taking part in the pass (0 .. pass_seqs − 1, in batch
 * order) in the rows of its embedding and of its logits (rag_blocks blocks of rag_rows and
 * of rag_seqs rows, sp_program): its index in the batch (*seq), the first of its q_len token
 * rows in the embedding's rows (*in_row0), its logits row (*out_row) and first position
 * (*pos0).  *seq = -1 past them.  O(i). */
void sp_lower_ragged_io(const sp_program *p, int64_t i, int64_t *seq, int64_t *in_row0, int64_t *out_row,
                        int64_t *q_len, int64_t *pos0);
/* The packed rows of block blk of nblk: [*row0, *row0 + *rows). */
void sp_lower_ragged_blk_rows(const sp_program *p, int nblk, int blk, int64_t *row0, int64_t *rows);

/* SLICE: 1 if row block `blk` of the step's block sequence (batch_axes, else
 * axes) is one the chip of global rank `rank` keeps. */
int sp_lower_slice_keeps(const sp_program *p, const sp_step *s, int rank, int blk);

/* The first KV head of the cache block the chip of global rank `rank` holds
 * (p->kv_heads_cache heads from it): the block of decode's head axes
 * (kv_head_axes), as the KV_STORE and decode ATTN steps resolve it. */
int64_t sp_lower_kv_head0(const sp_model *m, const sp_program *p, int rank);

/* ---- KV transfer between separate chip groups ------------------------------------
 * A disaggregated layout (sp_layout.h: prefill.mesh=..., decode.mesh=...)
 * prefills on its prefill group and decodes on its decode group.  Between
 * the two, every decode-group chip receives what its cache block holds at
 * the end of the prompt (sp_program kv_*: its stage's layers × its
 * sequences of each micro-batch × its KV heads × the prompt's positions, K
 * and V, in the kv dtype) from the prefill-group chips whose caches hold it,
 * and every chip of the decode group's first stage receives the first
 * generated token (int32) of each sequence of its replica from a chip of
 * the prefill group's last stage.  Where several prefill chips hold a piece
 * (KV heads replicated over head shards), decode chip d takes it from the
 * (d mod k)-th of its k holders (rank order), which spreads the sends.
 * The moves are blocks, enumerated in a fixed order (decode rank, then its
 * micro-batches, sequences, prefill stages, heads; tokens last):
 *   KV block:    layers [layer0, +layers) × sequences [seq0, +seqs) (of the
 *                batch) × KV heads [head0, +heads) × positions [0, prompt):
 *                bytes = 2 · layers · seqs · heads · prompt · d_head · kv bytes
 *   token block: sequences [seq0, +seqs): bytes = 4 · seqs
 * So the volume is Σ over decode chips of their cache at the prompt (the
 * batch's KV bytes times decode's head replication: exactly the batch's KV
 * bytes when decode holds each KV head once) plus 4 · batch · (decode's
 * X·Y·Z) for the tokens.  A chip's blocks to one peer travel as one message
 * (a SEND on the prefill chip, a RECV on the decode chip; sp_cost_kv_xfer
 * prices them, the executor runs them). */
typedef struct sp_xfer_block {
    int src, dst;              /* prefill-group rank, decode-group rank (each in its group's sp_layout_mesh order) */
    int tokens;                /* 1: a token block; 0: a KV block */
    int64_t layer0, layers;    /* model layers (KV) */
    int64_t seq0, seqs;        /* sequences of the batch */
    int64_t head0, heads;      /* KV heads (KV) */
    int64_t bytes;
} sp_xfer_block;
/* Called once per block; a status other than SP_OK stops the walk and is returned. */
typedef sp_status (*sp_xfer_fn)(void *ctx, const sp_xfer_block *b);
/* Walks the blocks of disaggregated layout l for a batch and prompt (the
 * groups lowered as sp_layout_phase_group gives them).  SP_EINVAL when l
 * is not disaggregated or a group does not apply (sp_lower's reason). */
sp_status sp_lower_kv_xfer(const sp_model *m, const sp_layout *l, int64_t batch, int64_t prompt, sp_xfer_fn fn,
                           void *ctx);

/* ---- stage hand-off between stages of their own meshes ---------------------------
 * A heterogeneous pipeline (sp_layout.h: stage_mesh) lowers each stage on
 * its own mesh: the stage's program's layout is the stage's view (the
 * layout with mesh = the stage's mesh), so the program's ranks
 * (sp_lower_axes_index on p->layout) are view ranks, (stage·R + r)·T_s + t
 * for replica r and tensor rank t of T_s = X_s·Y_s·Z_s; the chip's global
 * rank is sp_layout_stage_first_chip(l, stage) + r·T_s + t.
 * After a stage's last layer each chip holds the block of the micro-batch's
 * activations its phase layout gives it: rows [i·m, (i+1)·m) with i its
 * block of the SEND step's batch_axes, columns [j·n, (j+1)·n) with j its
 * block of the step's axes (every element on exactly one chip of a
 * replica: the weight-stationary and weight-gathered layouts partition the
 * activations over the mesh).  The next stage's chips need theirs, by
 * their RECV step's axes.  Each receiving chip takes every overlap of its
 * block with a sender's block of the same replica from that sender (the
 * one chip holding it), so a sender sends exactly its m·n elements and a
 * receiver receives exactly its own; the SEND/RECV steps' coll.group is 1 +
 * the most peers a chip of the stage meets there.  The blocks, in a fixed
 * order (replica, receiving chip, sending chip): */
typedef struct sp_stage_block {
    int src, dst;              /* global ranks: a chip of stage b, a chip of stage b + 1 */
    int64_t row0, rows;        /* rows of the micro-batch's (pass's) activations, [row0, +rows) */
    int64_t col0, cols;        /* columns of E, [col0, +cols) */
    int64_t bytes;             /* rows · cols · activation bytes */
} sp_stage_block;
typedef sp_status (*sp_stage_xfer_fn)(void *ctx, const sp_stage_block *b);
/* Walks the blocks of the hand-off after stage `boundary` (to boundary + 1)
 * of l for one step of the given shape (as sp_lower lowers it).  Any
 * layout of one group (each stage's own mesh or not).  SP_EINVAL when a
 * stage does not apply (sp_lower's reason) or boundary is not 0..stages−2. */
sp_status sp_lower_stage_xfer(const sp_model *m, const sp_layout *l, sp_phase phase, const sp_shape *shape,
                              int boundary, sp_stage_xfer_fn fn, void *ctx);
/* The same walk over the programs of the two stages (from: stage b, to:
 * stage b + 1, as sp_lower lowers them for l, one step of one shape), for
 * a consumer that holds them (the simulator, the executor). */
sp_status sp_lower_stage_xfer_progs(const sp_layout *l, const sp_program *from, const sp_program *to,
                                    sp_stage_xfer_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
