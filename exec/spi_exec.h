/*
 * spi_exec.h: the program interpreter's internals (see sp_exec.h), shared by
 * its files along their seams:
 *   exec.c          the run loop: threads, prefill/decode, results, public API
 *   exec_mem.c      chip memory: buffers, scratch, KV cache, copies to the device
 *   exec_weights.c  weight shards: building them, biases, norms, matmul scales
 *   exec_coll.c     collective packing: blocks into and out of the communicator
 *   exec_step.c     the interpreter: one step of a program, attention, slices
 * Tensor data is touched only through the chip's device (spi_xdev.h).
 */
#ifndef SPI_EXEC_H
#define SPI_EXEC_H
#include <pthread.h>
#include <string.h>
#include <time.h>
#include "spi_common.h"
#include "exec/sp_exec.h"
#include "exec/spi_xdev.h"
#include "sp_trace.h"

struct sp_exec {
    sp_model m;
    sp_layout l;
    sp_mesh mesh;
    int64_t B, P, G;
    const sp_ragged *ragged;         /* a ragged batch (sp_exec_build_ragged; borrowed), else NULL: B = its
                                        sequences, P and G its longest prompt and generation */
    const sp_weights *w;
    sp_comm_world *world;
    sp_comm_backend backend;
    const spi_xops *ops;             /* the chips' device: CPU, or CUDA under NCCL */
    double *rope_inv;                /* (rotary dims / 2) RoPE inverse frequencies (sp_model_rope_freqs), owned */
    double rope_scale;               /* cos/sin factor */
    int nchips;
    int local_first, local_count;    /* chips this process hosts (MPI: one) */
    /* run */
    const int32_t *prompt;
    sp_kern_sample_opts samp;
    int greedy;
    int32_t *tokens;
    float *logits;          /* (B, lg_steps, V), may be NULL */
    int64_t lg_steps;       /* 1: the last step's logits; G: every step's */
    pthread_mutex_t mu;
    sp_exec_stats st;
    sp_status err;
    char errmsg[256];
    /* measured timeline (sp_exec_set_trace) */
    char *trace_path;                /* owned; NULL: none */
    sp_trace *trace;                 /* open during a run that writes one */
    double t_base;                   /* the run's time origin (spi_now_s) */
    /* Separate prefill and decode chip groups (sp_layout_disaggregated): the
     * job's executor owns one executor per group (grp), each a whole executor
     * of its group's layout that runs its phase only; they share the run's
     * inputs and outputs, and the KV transfer goes over the job's flat
     * communicator (mesh 1×1×1×1×chips, the prefill group first). */
    int role;                        /* 0: both phases on every chip; 1: the prefill group; 2: the decode group */
    sp_exec *grp[SP_PHASE_COUNT];    /* the job's groups (owned); NULL otherwise */
    sp_layout job;                   /* a group's: the job's disaggregated layout */
    sp_comm_world *xworld;           /* the flat communicator (the job's, owned; borrowed by its groups) */
    int xfer_first, xfer_peer_first; /* a group's: flat ranks of its chip 0 and of the other group's chip 0 */
    sp_exec *sibling;                /* a group's: the other group (borrowed; its stats filled under MPI) */
    /* Stages of their own meshes (sp_layout_hetero): world is the flat
     * communicator over every chip (mesh 1×1×1×1×chips, ranks as
     * sp_layout.h numbers them: stage-major, each stage's replicas after
     * one another), which carries the stage hand-off, the tokens, the
     * barriers and the results; each stage's collectives run on a world of
     * its own over its mesh (1×R×X_s×Y_s×Z_s, part of the job's ranks). */
    int hetero;
    sp_layout *view;                 /* (stages) each stage's view (mesh = its mesh, as sp_lower lowers it), owned */
    sp_comm_world *sworld[SP_LAYOUT_MAX_STAGES];   /* each stage's world (owned) */
};

/* One step as it ran on a chip: which step of which program, and its times.
 * A KV transfer message (separate groups) has part SPI_EVENT_KV_SEND or
 * SPI_EVENT_KV_RECV and index the peer's rank on the job's flat communicator. */
enum { SPI_EVENT_KV_SEND = -1, SPI_EVENT_KV_RECV = -2 };
typedef struct spi_event {
    double t0, t1;                   /* spi_now_s around the step */
    int64_t token;                   /* run step: 0 prefill, s >= 1 decode step s - 1 */
    int64_t pass;                    /* prefill pass of the micro-batch (trace ids); -1: one pass, or decode */
    int64_t layer;                   /* stage-local layer (layer part) */
    int64_t flops, bytes;            /* of the step as lowered for this run step (sp_trace_step_bytes) */
    int part, index, mb;
} spi_event;

/* A chip's blocks of one stage hand-off (sp_lower.h, "stage hand-off"),
 * in the lowering's order, and the two steps' block shapes (m rows, n
 * columns; own: this chip's SEND or RECV step, peer: the other stage's). */
typedef struct spi_handoff {
    sp_stage_block *b;
    int64_t n, cap;
    int64_t own_m, own_n, peer_n;
} spi_handoff;

typedef struct chip {
    sp_exec *ex;
    const sp_model *m;
    const sp_layout *l;              /* the layout the chip's programs index (a stage's view under stage_mesh) */
    int rank, stage, replica;        /* rank: the chip's rank as the lowering numbers it (in l's mesh) */
    int grank;                       /* its rank on ex->world (the flat one under stage_mesh; = rank otherwise) */
    int thread;                      /* this process's chip threads, 0.. (threads backend: its core) */
    int coords[SP_AXIS_COUNT];
    int64_t expert0;                 /* MoE: the global index of the chip's first expert */
    sp_comm *c;                      /* the collectives' communicator (a stage's under stage_mesh) */
    sp_comm *fc;                     /* ex->world's: point-to-point, barriers, results (= c without stage_mesh) */
    spi_xdev dev;                    /* where buffers, weights and the KV cache live */
    const spi_xops *ops;             /* dev.ops, NULL until the device is open */
    sp_program *pf, *dc, *prog;
    sp_ragged rg;                    /* a ragged batch: this chip's replica's sequences (a view of ex->ragged) */
    sp_ragged *rgm;                  /* and its micro-batches' (l->microbatches views, sp_ragged_micro), owned */
    void *buf[SP_BUF_COUNT];
    int64_t first_layer;
    void *wt[SP_W_COUNT];            /* model-level shards (EMBED, LMHEAD) */
    void **lw;                       /* (n_layers, SP_W_COUNT) per-layer shards */
    float **lscale;                  /* (n_layers, SP_W_COUNT) INT8/FP8 scales of the WHOLE global
                                        column range (spec cols, padded cols 0), replicated, never moved */
    float **lb;                      /* (n_layers, SP_W_COUNT) biases, whole, fp32 (NULL: none) */
    /* memory: one arena of sp_lower_mem_sizes' total, every block above and below carved from it */
    void *arena;                     /* on the chip's device */
    void *harena;                    /* host: the sp_scr_host slots on a device with its own memory */
    int64_t arena_bytes, pred_bytes; /* allocated (both arenas), predicted (sp_lower_mem_sizes total) */
    void *scr[SP_SCR_COUNT];         /* scratch slots (sp_scr) and their bytes */
    int64_t scr_bytes[SP_SCR_COUNT];
    /* named views of scratch slots */
    float *qs, *ks, *vs;             /* SP_SCR_Q, _K, _V: rope / pack scratch */
    int64_t *pos;                    /* SP_SCR_POS (host) */
    float *hrow;                     /* SP_SCR_LOGITS_ROW (host): one logits row read back from a device */
    int32_t *dtok;                   /* SP_SCR_TOKENS: the token hand-off through device memory */
    /* gathered weight buffers: the storage column block of each gathered column block */
    int wb_ncb[SP_BUF_COUNT];
    int wb_cblk[SP_BUF_COUNT][64];
    void *kc, *vc;                   /* KV cache (n_layers, M, kv_seqs − kv_host_seqs, ctx_max, kvh, D) */
    int64_t ctx_max, kv_layer_elems, kv_mb_elems;
    /* offload (sp_lower.h, "Offload"): a second arena in host memory of sp_lower_mem_sizes'
     * host_total, holding the streamed layers' weights (each streamed part's blocks of a layer
     * contiguous, laid out as its place in the staging block) and the host-held sequences' K/V */
    void *oarena;
    int64_t oarena_bytes, host_pred_bytes;   /* allocated, predicted (host_total) */
    void **hlw;                      /* (w_streamed, SP_W_COUNT) host shard / scales / bias pointers ... */
    float **hlscale, **hlb;
    char **hbase;                    /* (w_streamed, SP_WKIND_COUNT) each layer's part's first host byte
                                        (NULL: the part is on the device) */
    void *hkc, *hvc;                 /* host K/V (n_layers, M, kv_host_seqs, ctx_max, kvh, D) */
    int64_t hkv_layer_elems, hkv_mb_elems;
    int part;                        /* the program part being run (sp_prog_part) */
    uint64_t host_meas, host_pred;   /* bytes copied over the host link: counted, as the steps say */
    const int32_t *in_tok;           /* input tokens of the current micro-batch (prefill: pass) */
    int64_t pass_seq;                /* prefill: the micro-batch's sequence chunk being run (sp_program) */
    int64_t li;                      /* current layer (stage-local) */
    /* local stats */
    uint64_t meas[SP_COLL_COUNT], pred[SP_COLL_COUNT], measr[SP_COLL_COUNT], predr[SP_COLL_COUNT];
    uint64_t expect[SP_COLL_COUNT], expectr[SP_COLL_COUNT];   /* the lowering's a-priori bytes */
    uint64_t token_bytes;
    int64_t comm_steps, mismatches;
    char first_mismatch[256];
    double prefill_s, decode_step_s, tokens_per_s;   /* chip 0 only */
    /* measured: wall time per step class, [0] prefill, [1] decode (all decode steps) */
    double class_s[2][SP_CLASS_COUNT];
    int64_t token;                   /* the run step being run (0: prefill) */
    spi_event *ev;                   /* the timeline, when the run writes one (host, outside the arena) */
    int64_t nev, cap_ev;
    /* stages of their own meshes: this chip's blocks of the stage hand-off (sp_lower_stage_xfer_progs),
     * per phase [0] sent after its last layer, [1] received before its first */
    spi_handoff ho[SP_PHASE_COUNT][2];
} chip;

/* seconds on the monotonic clock */
static inline double spi_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- a chip's block of an axis sequence, as the lowering numbers them -------------- */
static inline int spi_aidx(const chip *ch, const char *axes) { return sp_lower_axes_index(ch->l, ch->rank, axes); }
static inline int spi_asize(const chip *ch, const char *axes) { return sp_lower_axes_size(ch->l, axes); }

/* ---- the KV transfer between separate groups (exec_xfer.c) ---------------------
 * A prefill-group chip (role 1) sends, a decode-group chip (role 2) receives,
 * over xc (its handle on the job's flat communicator), its blocks of
 * sp_lower_kv_xfer: KV cache blocks from and into its cache, the first tokens
 * from and into cur (the replica's current tokens).  Bytes counted against
 * the lowering's like every step (send-recv). */
sp_status spi_xfer_run(chip *ch, sp_comm *xc, int32_t *cur);

/* ---- the stage hand-off between stages of their own meshes (exec_xfer.c) --------
 * Setup keeps the chip's blocks of sp_lower_stage_xfer_progs for each phase
 * (its programs beside its neighbour stages'); a SEND or RECV step then
 * moves exactly those blocks over the flat communicator (ch->fc). */
sp_status spi_handoff_setup(chip *ch);
sp_status spi_handoff_run(chip *ch, const sp_step *s);
void spi_handoff_free(chip *ch);
/* Tests only: 1 makes every receiver zero what it received, 2 makes the
 * hand-off move nothing (both ends skip it), so a test can show that a
 * lost hand-off is caught.  0 otherwise. */
extern int spi_exec_handoff_fault;

/* ---- chip memory (exec_mem.c) ----------------------------------------------------- */
sp_shape spi_shape_of(const sp_exec *ex, int decode, int64_t step);
sp_status spi_chip_setup(chip *ch);
/* Room for cap events in the chip's timeline (ch->ev), kept if already there. */
sp_status spi_timeline_reserve(chip *ch, int64_t cap);
void spi_chip_teardown(chip *ch);
/* dst (rows, cols) of leading dimension dld <- src of sld; elements of eb bytes, on the chip's device */
sp_status spi_copy_block(chip *ch, void *dst, int64_t dld, const void *src, int64_t sld, int64_t rows, int64_t cols,
                         int eb);
/* n contiguous elements */
sp_status spi_copy_flat(chip *ch, void *dst, const void *src, int64_t n, int eb);
/* the same in host memory (weight shards are built on the host) */
void spi_copy_block_host(char *dst, int64_t dld, const char *src, int64_t sld, int64_t rows, int64_t cols, int eb);
/* Tests only: bytes added to every chip's arena (negative: undersized), so a
 * test can show that a wrong size is caught.  0 otherwise. */
extern int64_t spi_exec_arena_delta;

/* ---- weight shards (exec_weights.c) ----------------------------------------------- */
const float *spi_global_bias(const chip *ch, int64_t layer, sp_weight w, int64_t *len);
const float *spi_bias_of(const chip *ch, sp_weight w, int64_t *len);
void spi_norm_of(const chip *ch, sp_weight w, const float **g, const float **b);
sp_status spi_build_shard(chip *ch, const sp_weight_spec *s, int64_t layer, int64_t expert, void *dst,
                          float *scale_dst);
sp_status spi_build_bias(chip *ch, const sp_weight_spec *s, int64_t layer, float *dst);
sp_status spi_matmul_scales(chip *ch, const sp_step *s, const sp_weight_spec *ws, const float **out);

/* ---- collective packing (exec_coll.c) --------------------------------------------- */
sp_status spi_run_coll(chip *ch, const sp_step *s);
sp_status spi_check_bytes(chip *ch, const sp_step *s, const sp_comm_counters *a, const sp_comm_counters *b,
                          sp_coll_kind k);
int spi_peer_stage(const chip *ch, int stage);

/* ---- the interpreter (exec_step.c) ------------------------------------------------ */
/* Runs one part of the chip's current program (ch->prog) for micro-batch mb,
 * timing every step into ch->class_s and, when a timeline is kept, ch->ev. */
sp_status spi_run_steps(chip *ch, sp_prog_part part, int mb);

#endif
