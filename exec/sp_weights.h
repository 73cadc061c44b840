/*
 * sp_weights.h: a model's global weights in fp32, and Hugging Face checkpoints.
 *
 * One slab holds every tensor (llm.c style); sp_weights_sizes() is the pure
 * size function (elements per tensor kind, per-layer kinds stacked over the
 * layers), and w.layers[l] holds named pointers into the slab for layer l.
 * Matrices are stored (in, out), so a matmul is x (T, in) . W (in, out).
 *
 *   sp_weights w;
 *   sp_weights_build_random(&model, 1234, &w);      // or sp_weights_load_hf(dir, &model, &w, &err)
 *   sp_weights_quantize(&w, SP_DT_INT8);            // optional: round-trip matrices
 *   ... w.layers[3].wq  // (E, H*D)
 *   sp_weights_free(&w);
 */
#ifndef SP_WEIGHTS_H
#define SP_WEIGHTS_H
#include <stddef.h>
#include <stdint.h>
#include "sp_common.h"
#include "sp_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor kinds are sp_weight (sp_model.h): its names, shapes and presence
 * in a model; sizes[], t[] and scales[] below are indexed by it. */

typedef struct sp_weights_layer {
    float *attn_norm;     /* (E) */
    float *attn_norm_b;   /* (E) or NULL */
    float *wq;            /* (E, H*D) */
    float *bq;            /* (H*D) or NULL */
    float *wk;            /* (E, KVH*D) */
    float *bk;            /* (KVH*D) or NULL */
    float *wv;            /* (E, KVH*D) */
    float *bv;            /* (KVH*D) or NULL */
    float *wo;            /* (H*D, E) */
    float *bo;            /* (E) or NULL */
    float *ffn_norm;      /* (E); NULL for a parallel block (shares attn_norm) */
    float *ffn_norm_b;    /* (E) or NULL */
    float *w_in;          /* (E, F) */
    float *b_in;          /* (F) or NULL */
    float *w_up;          /* (E, F), SwiGLU only */
    float *b_up;          /* (F) or NULL */
    float *w_out;         /* (F, E) */
    float *b_out;         /* (E) or NULL */
    float *router;        /* (E, n_experts), MoE models only, else NULL */
    float *sh_in, *sh_up, *sh_out;   /* shared experts (E, Fs), (E, Fs), (Fs, E); else NULL */
    float *sh_gate;       /* (E, 1): shared_expert_gate only */
    float *d_in, *d_up, *d_out;   /* (E, Fd), (E, Fd), (Fd, E): the dense FFN of a layer between MoE layers */
} sp_weights_layer;
/* The per-layer kinds are stacked over the layers that hold them
 * (sp_weight_layers, sp_weight_layer_slot: the experts and router over the
 * MoE layers, the dense FFN of a model with dense layers between MoE layers
 * over those); a layer's pointer to a kind it does not hold is NULL. */

typedef struct sp_weights {
    sp_model model;
    int64_t sizes[SP_W_COUNT];     /* elements, from sp_weights_sizes */
    float *t[SP_W_COUNT];          /* into slab; NULL where sizes[] is 0 */
    float *slab;                    /* owned */
    size_t bytes;                   /* of slab */
    sp_weights_layer *layers;       /* (NL), owned */
    /* shortcuts */
    float *embed;                   /* (V, E) */
    float *pos;                     /* (max_context, E) or NULL */
    float *lm_head;                 /* (V, E): == embed when tied */
    float *final_norm, *final_norm_b; /* (E), (E) or NULL */
    /* After sp_weights_quantize: the dtype the matrices were round-tripped
     * through (F32 if never), and for INT8/FP8 the per-column scales of each
     * matrix kind, (NL, cols) each, owned. */
    sp_dtype quant;
    float *scales[SP_W_COUNT];
    /* sp_weights_open_hf: the checkpoint the layer matrices and vocabulary
     * tables are read from, block by block (their t[] are NULL); owned */
    struct spi_hf_src *src;
} sp_weights;

/* Elements per tensor kind into sizes[SP_W_COUNT] (a per-layer kind times
 * the layers holding it); *total (may be NULL) gets the sum.  Pure; the slab sp_weights_build_* allocates is 4 * total bytes. */
sp_status sp_weights_sizes(const sp_model *m, int64_t sizes[SP_W_COUNT], int64_t *total);

/* Layer `layer`'s part of tensor k ((rows, cols) of sp_weight_shape; the
 * layer is ignored for a model-level kind), borrowed from w; NULL when m has
 * no k, the layer is out of range or does not hold k (sp_weight_in_layer), or k stays in the checkpoint
 * (sp_weights_open_hf's matrices and vocabulary tables: use sp_weights_block). */
const float *sp_weights_tensor(const sp_weights *w, sp_weight k, int64_t layer);

/* Allocates a zeroed slab for m (norm gains are NOT set). */
sp_status sp_weights_alloc(const sp_model *m, sp_weights *w);
/* Deterministic random weights for a seed: matrices and embeddings ~ N(0, 0.02)
 * (output projections wo, w_out scaled by 1/sqrt(2 NL) as GPT-2 does), norm
 * gains 1 + N(0, 0.02), biases N(0, 0.02). */
sp_status sp_weights_build_random(const sp_model *m, uint64_t seed, sp_weights *w);
void sp_weights_free(sp_weights *w);   /* safe on a zeroed or freed struct */

/* Round-trips every per-layer matrix (wq wk wv wo w_in w_up w_out) through dt
 * in place so the fp32 reference computes what a quantised executor computes.
 * BF16: round to nearest even.  INT8: symmetric, per output column scale =
 * max|col| / 127 over all rows of the layer's matrix (FP8 E4M3: max|col| / 448);
 * a MoE layer's experts (w_in, w_up, w_out) each over its own rows; scales
 * kept in w->scales ((NL, cols), experts: (NL, n_experts, cols)).  Embeddings, LM head, norms and biases stay fp32.
 * F32: no-op.  May be called once. */
sp_status sp_weights_quantize(sp_weights *w, sp_dtype dt);
/* Round-trips the embedding, LM head and learned positions through dt (F32:
 * no-op; BF16 or F16), the storage the lowering gives those tables
 * (sp_lower_table_dtype), so a single-chip reference computes what the
 * executor does. */
sp_status sp_weights_round_tables(sp_weights *w, sp_dtype dt);

/* Quantised storage of the block rows [r0, r1) x cols [c0, c1) of layer l's
 * matrix kind t, for one chip's shard: out (r1-r0, c1-c0) row-major in dt
 * (BF16/F16: uint16, INT8: int8, FP8: uint8, F32: float), and for INT8/FP8
 * scale_out (c1-c0).  Scales are those of the whole global column (from
 * w->scales after sp_weights_quantize, else computed), so dequantising the
 * block gives exactly the round-tripped weights.  Of a MoE layer's expert
 * matrices the block lies in one expert's rows (the expert of r0; an empty
 * block [r0, r0) gives that expert's scales), whose own columns scale it. */
sp_status sp_weights_block(const sp_weights *w, sp_weight t, int64_t layer, int64_t r0, int64_t r1, int64_t c0,
                           int64_t c1, sp_dtype dt, void *out, float *scale_out);
/* Same for any fp32 matrix W (K, ld).  col_scale (ld) or NULL (computed from
 * the K rows of each column). */
sp_status sp_weights_quant_block(const float *W, int64_t K, int64_t ld, int64_t r0, int64_t r1, int64_t c0,
                                 int64_t c1, sp_dtype dt, const float *col_scale, void *out, float *scale_out);

/* ---- Hugging Face safetensors ---------------------------------------------------- */
/* Reads every *.safetensors file in dir (or dir itself when it is a file) into
 * fresh weights for m.  Llama naming (model.embed_tokens, model.layers.N.
 * self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, input_layernorm,
 * post_attention_layernorm, model.norm, lm_head; Linear (out, in) transposed)
 * or GPT-2 naming (wte, wpe, h.N.{ln_1, attn.c_attn (fused q|k|v), attn.c_proj,
 * ln_2, mlp.c_fc, mlp.c_proj}, ln_f; optional "transformer." prefix; Conv1D
 * (in, out)).  MoE layers in Mixtral naming (block_sparse_moe.gate,
 * block_sparse_moe.experts.N.{w1,w3,w2}) or Qwen2-MoE naming (mlp.gate,
 * mlp.experts.N.{gate,up,down}_proj, mlp.shared_expert.*,
 * mlp.shared_expert_gate).  F32/F16/BF16 converted to fp32.  Errors fill err with the file
 * and tensor name: SP_EIO (open/read), SP_EPARSE (malformed, wrong shape,
 * missing tensor). */
sp_status sp_weights_load_hf(const char *dir, const sp_model *m, sp_weights *w, sp_error *err);
/* The same checkpoint opened for slices: norms, biases and learned positions
 * are read whole; the layer matrices and the vocabulary tables stay in the
 * mmapped files, and sp_weights_block reads just the rows and columns asked
 * for, so each chip of the executor reads its own slice.  (INT8/FP8 blocks
 * read whole columns, for their per-column scales.)  Free with
 * sp_weights_free. */
sp_status sp_weights_open_hf(const char *dir, const sp_model *m, sp_weights *w, sp_error *err);

typedef struct sp_safetensors sp_safetensors;     /* opaque */
typedef struct sp_st_tensor {
    const char *name;     /* borrowed: valid until sp_safetensors_close */
    int file;             /* index of the file holding it */
    int dt;               /* sp_dtype, or -1 for a dtype we cannot convert (I64, ...) */
    char dtype[8];        /* as written in the header */
    int ndim;
    int64_t shape[8];
    uint64_t offset;      /* absolute byte offset in the file */
    uint64_t nbytes;
} sp_st_tensor;

/* Opens a .safetensors file, or every *.safetensors in a directory (sorted),
 * mmaps them and parses and checks the headers (length, JSON, dtypes, shapes,
 * data_offsets inside the file and matching the shape). */
sp_status sp_safetensors_open(const char *path, sp_safetensors **out, sp_error *err);
void sp_safetensors_close(sp_safetensors *st);
int sp_safetensors_count(const sp_safetensors *st);
const sp_st_tensor *sp_safetensors_at(const sp_safetensors *st, int i);
/* NULL if absent (no error recorded). */
const sp_st_tensor *sp_safetensors_find(const sp_safetensors *st, const char *name);
/* out = fp32 copy of rows [r0, r1) x cols [c0, c1) of a 2-D tensor (a 1-D tensor
 * is one row), row-major (r1-r0, c1-c0); with transpose, (c1-c0, r1-r0). */
sp_status sp_safetensors_read_rows_cols(const sp_safetensors *st, const sp_st_tensor *t, int64_t r0, int64_t r1,
                                        int64_t c0, int64_t c1, int transpose, float *out, sp_error *err);

/* Writer (tests, exporters): one file with n tensors; data is given in fp32
 * and stored as dt (F32, BF16 or F16). */
typedef struct sp_st_entry {
    const char *name;
    sp_dtype dt;
    int ndim;
    int64_t shape[4];
    const float *data;
} sp_st_entry;
sp_status sp_safetensors_write(const char *path, const sp_st_entry *entries, int n, sp_error *err);

#ifdef __cplusplus
}
#endif
#endif
