/*
 * sp_layout.h: one point of the search space: how a model is split.
 *
 *   stages × replicas × tensor mesh X×Y×Z, weight and KV-cache precision,
 *   micro-batches, and per phase (prefill, decode) an FFN layout and an
 *   attention layout, plus the placement of mesh axes on the topology.
 *
 * Text form; omitted keys take these defaults (sp_layout_init):
 *   stages=1,replicas=1,mesh=1x1x1,weights=bf16,kv=bf16,microbatches=1,
 *   prefill=ws2d/heads,decode=ws2d/heads,placement=zyx
 * mesh takes all three tensor dimensions XxYxZ.  An example, the PaLM 540B
 * decode layout on 64 TPU v4 chips:
 *   mesh=4x4x4,weights=int8,prefill=ws2d/heads,decode=ws2d/batch
 * JSON form (same keys and defaults):
 *   {"stages":1,"replicas":1,"mesh":[4,4,4],"weights":"int8","kv":"bf16",
 *    "microbatches":1,"prefill":{"ffn":"ws2d","attn":"heads"},
 *    "decode":{"ffn":"ws2d","attn":"batch"},"placement":"zyx"}
 *
 * FFN layouts (design.md §4): ws1d, ws2d, wg-x, wg-xy, wg-xyz.  Weight
 * storage is shared by both phases: ws1d stores `E F_xyz`; every other layout
 * stores the 2D `E_x F_yz`.  Mixing ws1d with a 2D-storage layout across the
 * two phases is rejected (a reshard would be needed; we do not price one).
 * Any two layouts of one storage pair up: where their KV-cache placements
 * differ, prefill moves its K/V to decode's (the KV handoff, sp_lower.h).
 *
 * placement: the tensor axes from innermost (consecutive chips, same node)
 * to outermost; replica and stage axes are always outside them.  On a GPU
 * cluster it decides which axes stay inside a node.  On a torus placement
 * does not matter: the chips are a rentable slice of the torus
 * (sp_hw_slice_rentable) and each axis is laid over one or more of the
 * slice's physical dimensions (sp_layout_torus_map).
 *
 * Mixture-of-experts models (sp_model.n_experts > 0) take two more keys,
 * written only when they differ from their defaults:
 *   experts=N     expert-parallel degree (default 1: every chip holds every
 *                 expert).  The experts are split over the N replicas: each
 *                 replica (its tensor mesh) holds n_experts/N of them, each
 *                 expert's matrices sharded over the tensor mesh like a dense
 *                 FFN (expert-tensor parallelism); tokens reach their experts'
 *                 replica by an all-to-all over the replica axis and come back
 *                 by another (DeepSpeed-Inference's expert + tensor + data
 *                 parallelism).  N must divide n_experts and equal 1 or
 *                 replicas (expert groups of part of the replicas are not
 *                 implemented).
 *   capacity=C    capacity factor (>= 1, default 1): every expert's token
 *                 slots per source chip are C times the expected load of the
 *                 most popular expert (sp_model_moe_routing); the all-to-all
 *                 and the expert matmuls are sized, and priced, at that
 *                 padded size.
 * JSON: "experts": N, "capacity": C.
 *
 * Chunked prefill (written only when set):
 *   prefill_chunk=S    sequences per prefill pass (default: the whole
 *                      micro-batch).  S divides the micro-batch (B / (R·M))
 *                      and is itself divisible as prefill's and decode's
 *                      layouts need; each pass writes the KV cache of its
 *                      S sequences.
 *   prefill_tokens=T   prompt tokens per prefill pass (default: the whole
 *                      prompt): incremental prefill, pass j runs tokens
 *                      [jT, (j+1)T) of every sequence of its chunk and
 *                      attends to the KV cache already written (positions
 *                      < (j+1)T).  T divides the prompt; the prefill's
 *                      attention must keep the cache in decode's layout
 *                      (the cache is what it reads).
 *   A prefill then runs (B / (R·M·S)) × (prompt / T) passes per micro-batch,
 *   each holding the activations of one pass (sp_lower.h).
 * JSON: "prefill_chunk": S, "prefill_tokens": T.
 * Pipelines take one more key, written only when set:
 *   stage_layers=L0,L1,...   the layers of each stage, in order (contiguous
 *                 blocks: stage 0 holds layers 0..L0-1 and the embedding, the
 *                 last stage the last block and the LM head).  As many counts
 *                 as stages, each >= 1, summing to the model's layers; at most
 *                 SP_LAYOUT_MAX_STAGES stages.  Omitted: the even split
 *                 (sp_layout_stage_layers), the first n_layers % stages stages
 *                 one layer more.  The counts that follow stage_layers= are
 *                 the comma-separated integers up to the next key=value.
 *                 Every stage has the same layouts and precision; a stage
 *                 of its own layout (FFN, attention, weights) is not
 *                 implemented.
 * JSON: "stage_layers": [L0, L1, ...].
 *   stage_mesh=X0xY0xZ0,X1xY1xZ1,...   the tensor mesh of each stage, in
 *                 order (a heterogeneous pipeline): as many meshes as
 *                 stages, at most SP_LAYOUT_MAX_STAGES.  Every replica has
 *                 the same stage meshes; the chips are replicas × Σ_s
 *                 X_s·Y_s·Z_s, numbered stage-major like the even mesh
 *                 (sp_mesh.h): stage s's chips start after every earlier
 *                 stage's (replicas × its mesh each), replica r of stage s
 *                 holds the next X_s·Y_s·Z_s of them.  The layout's own mesh
 *                 is the first stage's (a mesh= that differs from it is
 *                 refused, naming mesh); meshes all equal fold into mesh (one
 *                 form per meaning: stage_mesh is written only when two
 *                 differ).  stage_layers applies as usual (both may be
 *                 given: a stage's layers and its mesh are independent).
 *                 Not implemented, refused naming stage_mesh: with separate
 *                 prefill and decode groups, with offload, with experts, on
 *                 a torus (its slices are X×Y×Z boxes).  The lowering, the
 *                 cost model, the simulator and the executor (threads
 *                 and MPI; its CUDA backend refuses them by name) take
 *                 such stages (sp_lower.h, "stage hand-off"); the
 *                 lowering refuses a ragged batch through them.  The meshes after stage_mesh=
 *                 run up to the next key=value.
 * JSON: "stage_mesh": [[X0, Y0, Z0], [X1, Y1, Z1], ...].
 *
 * Separate chip groups for prefill and decode (disaggregated serving; written
 * only when set):
 *   prefill.mesh=XxYxZ, prefill.stages=P, prefill.replicas=R, and the same
 *   three keys for decode.   A phase key not given takes the layout's own
 *   value (stages, replicas, mesh).  When the two phases' groups then differ,
 *   prefill runs on chips 0..Np−1 and decode on chips Np..Np+Nd−1 (Np, Nd
 *   their groups' chips; Np + Nd = the layout's chips), each group holding
 *   its own copy of the weights in its own storage, and after the prefill the
 *   KV cache of the prompts and the first generated token of every sequence
 *   move from the prefill group's chips to the decode group's chips that need
 *   them (sp_lower_kv_xfer, priced by sp_cost_kv_xfer, run by the executor on
 *   threads: sp_exec.h).  Each group keeps the
 *   cache in its own phase's attention layout, so prefill_tokens applies to
 *   the prefill group alone.  microbatches, weights, kv, placement, experts
 *   and capacity apply to both groups; stage_layers with separate groups is
 *   not implemented (each group splits its layers evenly).  When both groups
 *   come out equal the layout is an ordinary one (the keys fold into stages,
 *   replicas, mesh: both phases on the same chips), unless it says
 *   groups=separate (default groups=shared): then the two equal groups run
 *   on chips of their own as above, e.g. mesh=2x2x1,groups=separate is a
 *   prefill group of 4 chips and a decode group of 4 more, on 8 chips
 *   (groups=separate is written only for equal groups: different groups are
 *   separate anyway).  The layout's own stages, replicas and mesh then hold the
 *   prefill group's, so code that knows only one group sees the prefill group;
 *   the lowering refuses a disaggregated layout as a whole (sp_lower):
 *   callers lower each group's layout (sp_layout_phase_group).
 * JSON: the same keys inside each phase's object:
 *   "prefill": {"ffn": "wg-xyz", "attn": "batch", "mesh": [4,4,2], "stages": 1, "replicas": 1};
 *   "groups": "separate".
 *
 * Offload (written only when set): weights and KV cache parked in host
 * memory and copied into HBM ahead of use over the host link (sp_hw
 * host.link_bw; capacity host.memory_bytes per chip).
 *   offload_weights=W0,W1,...   per stage (one count per stage, in order),
 *                 the stage's first Ws layers keep their weights (every
 *                 per-layer weight: matrices, scales, biases, norm gains) in
 *                 host memory; each is copied into a device staging block
 *                 one layer ahead of use (two blocks: layer i computes from
 *                 one while layer i+1's copy fills the other).  0 <= Ws <=
 *                 the stage's layers.
 *   offload_attn=A0,A1,...  offload_ffn=F0,F1,...   the same for one part
 *                 of each layer's weights (sp_wkind): attention (norm1,
 *                 wq wk wv wo, their biases) and the FFN (norm2, the FFN
 *                 matrices, biases, router and experts); a layer's part
 *                 lives in host memory when the layer is among its stage's
 *                 first offload_weights or first offload_attn (offload_ffn)
 *                 layers.  Each part is copied into its own place of the
 *                 staging block (attention first).
 *   offload_kv=F  the fraction F in [0, 1] of each chip's KV-cache
 *                 sequences (of its block of every micro-batch, the last
 *                 F·kv_seqs of them) kept in host memory: their K/V of layer
 *                 i+1 is copied in while layer i runs, and the rows each
 *                 pass appends are copied back.  F·kv_seqs must be a whole
 *                 number of sequences; not with prefill_chunk or
 *                 prefill_tokens (not implemented).
 *   The lowering emits the copies as steps (sp_lower.h, "Offload").
 * JSON: "offload_weights": [W0, W1, ...], "offload_attn": [A0, ...],
 * "offload_ffn": [F0, ...], "offload_kv": F.
 */
#ifndef SP_LAYOUT_H
#define SP_LAYOUT_H
#include "sp_common.h"
#include "sp_hw.h"
#include "sp_mesh.h"
#include "sp_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sp_ffn_layout {
    SP_FL_WS1D = 0, SP_FL_WS2D = 1, SP_FL_WG_X = 2, SP_FL_WG_XY = 3, SP_FL_WG_XYZ = 4, SP_FL_COUNT
} sp_ffn_layout;
typedef enum sp_attn_layout { SP_AL_HEADS = 0, SP_AL_BATCH = 1, SP_AL_COUNT } sp_attn_layout;
typedef enum sp_phase { SP_PHASE_PREFILL = 0, SP_PHASE_DECODE = 1, SP_PHASE_COUNT } sp_phase;

const char *sp_ffn_layout_name(sp_ffn_layout f);    /* "ws1d", ... */
const char *sp_attn_layout_name(sp_attn_layout a);  /* "heads", "batch" */
const char *sp_phase_name(sp_phase p);              /* "prefill", "decode" */

typedef struct sp_phase_layout {
    sp_ffn_layout ffn;
    sp_attn_layout attn;
} sp_phase_layout;

/* Stages an uneven split (stage_layers) can name. */
#define SP_LAYOUT_MAX_STAGES 32
/* Layers one stage of an uneven split can hold. */
#define SP_LAYOUT_MAX_STAGE_LAYERS 32767

/* The chips of one phase's group (separate chip groups, see above). */
typedef struct sp_group {
    int stages, replicas;
    int mesh[3];
} sp_group;

typedef struct sp_layout {
    int stages;              /* P >= 1 */
    int replicas;            /* R >= 1 */
    int mesh[3];             /* X, Y, Z >= 1 */
    sp_dtype weights;        /* BF16, F16, INT8, FP8 (F32 for the executor's tests) */
    sp_dtype kv;             /* KV-cache dtype */
    int microbatches;        /* M >= 1 dividing the batch of a replica; M < stages leaves
                                stages idle (the bubble, priced and simulated) */
    sp_phase_layout phase[SP_PHASE_COUNT];
    sp_axis placement[3];    /* tensor axes, innermost first; default z, y, x */
    int experts;             /* MoE: expert-parallel degree (1 or replicas), see above */
    double capacity;         /* MoE: capacity factor >= 1 */
    int prefill_chunk;       /* sequences per prefill pass; 0: the micro-batch, see above */
    int prefill_tokens;      /* prompt tokens per prefill pass; 0: the prompt, see above */
    int16_t stage_layers[SP_LAYOUT_MAX_STAGES]; /* layers per stage; all 0: the even split */
    sp_group group[SP_PHASE_COUNT]; /* separate chip groups of prefill and decode (see above);
                                       all 0 when the phases share the layout's chips */
    int separate;            /* groups=separate with equal groups (see above); 0 otherwise */
    int offload_stages;      /* counts given in offload_weights (0: no weights offloaded) */
    int16_t offload_layers[SP_LAYOUT_MAX_STAGES]; /* per stage: its first layers whose weights
                                                     live in host memory (offload_weights) */
    int offload_kind_stages[SP_WKIND_COUNT];      /* counts given in offload_attn, offload_ffn */
    int16_t offload_kind_layers[SP_WKIND_COUNT][SP_LAYOUT_MAX_STAGES]; /* per part of the layer's
                                                     weights (sp_wkind) and stage: its first layers
                                                     whose weights of that part live in host memory */
    double offload_kv;       /* fraction of each chip's KV sequences in host memory, [0, 1] */
    int stage_mesh[SP_LAYOUT_MAX_STAGES][3]; /* per-stage tensor meshes (stage_mesh); all 0:
                                                every stage has mesh */
} sp_layout;

/* 1 if prefill and decode run on separate chip groups (l->group set). */
int sp_layout_disaggregated(const sp_layout *l);
/* The ordinary (one-group) layout that phase ph of l runs: its group's
 * stages, replicas and mesh, both phases taking ph's FFN and attention
 * layouts (the group keeps the KV cache in ph's layout), prefill_chunk and
 * prefill_tokens kept for prefill and cleared for decode.  A layout that is
 * not disaggregated comes back unchanged. */
void sp_layout_phase_group(const sp_layout *l, sp_phase ph, sp_layout *out);
/* The disaggregated layout of two one-group layouts: prefill's stages,
 * replicas, mesh and prefill layout, decode's stages, replicas, mesh and
 * decode layout; every other key from prefill.  SP_EINVAL when either is
 * itself disaggregated or they differ in a key both groups share
 * (weights, kv, microbatches, placement, experts, capacity) or set
 * stage_layers.  Equal groups stay separate (groups=separate). */
sp_status sp_layout_disaggregate(const sp_layout *prefill, const sp_layout *decode, sp_layout *out);

/* Defaults: 1 stage, 1 replica, mesh chips×1×1 is NOT implied: mesh 1x1x1,
 * bf16 weights and KV, 1 micro-batch, prefill ws2d/heads, decode ws2d/heads,
 * placement zyx. */
void sp_layout_init(sp_layout *l);
/* P * R * X * Y * Z in 64 bits (each factor is at most 2^20, so the product may not fit:
 * -1 then, which no check accepts); a disaggregated layout: the sum of its two groups';
 * stage meshes: R × Σ_s X_s·Y_s·Z_s */
int64_t sp_layout_chips(const sp_layout *l);
void sp_layout_mesh(const sp_layout *l, sp_mesh *out);
/* 1 if the stages have meshes of their own (stage_mesh), 0 when every stage has mesh. */
int sp_layout_hetero(const sp_layout *l);
/* Stage s's tensor mesh: its stage_mesh entry, else the layout's mesh. */
void sp_layout_stage_mesh(const sp_layout *l, int stage, int out[3]);
/* Chips of stage s over all replicas (replicas × X_s·Y_s·Z_s) and the global
 * rank of its first chip (the chips of the stages before it); -1 on overflow. */
int64_t sp_layout_stage_chips(const sp_layout *l, int stage);
int64_t sp_layout_stage_first_chip(const sp_layout *l, int stage);
/* SP_OK if l's stage meshes (if any) number one per stage and combine with
 * the rest of l (see stage_mesh above); else SP_EINVAL (a count) or
 * SP_ENOTSUP (a combination not implemented) with the reason in why (quiet). */
sp_status sp_layout_stage_mesh_check(const sp_layout *l, char *why, size_t size);
/* 1 if the layout names its layers per stage (stage_layers), 0 for the even split. */
int sp_layout_uneven(const sp_layout *l);
/* Layers held by stage s of l for a model of n_layers: l's stage_layers when
 * set, else contiguous even blocks, the first (n_layers % stages) stages one
 * more.  *first is the stage's first layer.  An uneven split whose counts do
 * not fit (sp_layout_check) gives what they say; the checks refuse it. */
void sp_layout_stage_layers(const sp_layout *l, int64_t n_layers, int stage, int64_t *first, int64_t *count);
/* SP_OK if l's uneven split (if any) has one count >= 1 per stage, at most
 * SP_LAYOUT_MAX_STAGES stages, summing to n_layers; SP_EINVAL with the
 * reason in why (no message set: the lowering probes quietly).  Part of
 * sp_layout_check_base and of the lowering's checks. */
sp_status sp_layout_split_check(const sp_layout *l, int64_t n_layers, char *why, size_t size);
/* 1 if the layout offloads anything (weights of some layer, or KV). */
int sp_layout_offloads(const sp_layout *l);
/* Stage s's first layers whose weights of part k live in host memory: the
 * larger of its offload_weights and its offload_attn / offload_ffn count
 * (0 when unset). */
int64_t sp_layout_offload_kind_layers(const sp_layout *l, int stage, sp_wkind k);
/* Stage s's first layers with some weights in host memory (the larger of
 * its parts' counts). */
int64_t sp_layout_offload_layers(const sp_layout *l, int stage);
/* SP_OK if l's offload keys fit the model: one offload_weights,
 * offload_attn, offload_ffn count per stage (each list given), each within
 * its stage's layers, offload_kv in [0, 1]; SP_EINVAL with the reason in
 * why (quiet, like sp_layout_split_check). */
sp_status sp_layout_offload_check(const sp_layout *l, int64_t n_layers, char *why, size_t size);
/* 1 if the phase layout stores weights as 1D (E F_xyz), 0 for 2D (E_x F_yz). */
int sp_ffn_layout_is_1d(sp_ffn_layout f);

/* Parse the text or JSON form (a string starting with '{' is JSON).
 * Unknown keys or names, malformed numbers: SP_EPARSE with err filled. */
sp_status sp_layout_parse(const char *text, sp_layout *out, sp_error *err);
sp_status sp_layout_load_file(const char *path, sp_layout *out, sp_error *err);
/* Text form, every key written.  Returns buf. */
char *sp_layout_format(const sp_layout *l, char *buf, size_t size);
/* JSON form as a new Jansson reference (json_t *); caller json_decref()s.
 * Declared as void* so this header does not need jansson.h. */
void *sp_layout_to_json(const sp_layout *l);
sp_status sp_layout_from_json(const void *json, sp_layout *out, sp_error *err);

/* How a layout's axes lie on a torus slice.  The slice is a rentable shape
 * (sp_hw_slice_rentable) of exactly the layout's chips; axis a spans
 * factor[a][d] chips along physical dimension d (the product over d is the
 * axis's size), so an axis may fold over two or three dimensions and a
 * dimension may carry several axes.  A group of axes whose factors along d
 * multiply to slice[d] uses the whole wrap-around ring of d; a smaller part
 * of d is a segment (or a strided sub-ring sharing links), priced as one
 * link direction instead of two (sp_cost.h). */
typedef struct sp_torus_map {
    int slice[3];
    int factor[SP_AXIS_COUNT][3];
} sp_torus_map;
/* Chooses the slice and the mapping: among every rentable slice of the
 * layout's chip count and every way of splitting the axes over its
 * dimensions, the one whose tensor axes see the most link bandwidth
 * (least Σ over x, y, z of (size − 1) / directions used), first found on
 * ties (deterministic).  Returns 1 and fills *out (may be NULL) when one
 * exists; 0 when no rentable slice takes the layout, or hw is not a torus.
 * Memoised per thread. */
int sp_layout_torus_map(const sp_layout *l, const sp_hw *hw, sp_torus_map *out);
/* 1 if stages × replicas × mesh X×Y×Z maps onto a rentable slice of the
 * torus of hw (sp_layout_torus_map); always on a cluster.  Part of
 * sp_layout_check_base. */
int sp_layout_fits_torus(const int mesh[3], int replicas, int stages, const sp_hw *hw);
/* 1 if every tensor axis of l, placed innermost first, fits inside a
 * cluster node's remaining room or fills whole nodes (always on a torus);
 * 0 otherwise, with the chips of the first axis that straddles nodes in
 * *straddler (may be NULL).  Part of sp_layout_check_base. */
int sp_layout_fits_nodes(const sp_layout *l, const sp_hw *hw, int *straddler);

/* The checks of a layout that need no lowering: mesh product = chips,
 * storage supported by hw, the fit on the torus slice and cluster nodes,
 * micro-batches, the uneven split and offload keys against the model's
 * layers, the expert split; for a disaggregated layout the groups'
 * placement and these checks of each group.  hw may be NULL.  The reason
 * goes to sp_last_error() and, when err is non-NULL, to err.  The complete
 * check, which also lowers the layout, is sp_layout_check (sp_lower.h). */
sp_status sp_layout_check_base(const sp_layout *l, const sp_model *m, const sp_hw *hw, int64_t chips,
                               int64_t batch, sp_error *err);

#ifdef __cplusplus
}
#endif
#endif
