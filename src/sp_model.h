/*
 * sp_model.h: decoder-only transformer descriptions.
 *
 * A model is read from shardplan's own JSON format (documented in
 * doc/formats.md) or directly from a Hugging Face config.json (Llama, Mistral,
 * Qwen2, Mixtral, GPT-2, GPT-NeoX, GPT-J, Falcon, BLOOM naming).  The struct
 * is plain data: copy it freely; nothing inside is heap-owned.
 *
 *   sp_model m; sp_error err;
 *   if (sp_model_load_file("llama2-70b/config.json", 0, &m, &err) != SP_OK)
 *       fprintf(stderr, "%s\n", sp_error_format(&err, buf, sizeof buf));
 *   sp_model_stats st; sp_model_derive(&m, 2048, &st);
 */
#ifndef SP_MODEL_H
#define SP_MODEL_H
#include <stdint.h>
#include "sp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sp_ffn_kind { SP_FFN_GELU = 0, SP_FFN_SWIGLU = 1, SP_FFN_COUNT } sp_ffn_kind;
/* serial: x += attn(norm1(x)); x += ffn(norm2(x)).  parallel: x += attn(n(x)) + ffn(n(x)) with one
 * shared norm (PaLM, GPT-J).  parallel2: x += attn(norm1(x)) + ffn(norm2(x)) (GPT-NeoX, Falcon-40B). */
typedef enum sp_block_kind { SP_BLOCK_SERIAL = 0, SP_BLOCK_PARALLEL = 1, SP_BLOCK_PARALLEL2 = 2, SP_BLOCK_COUNT } sp_block_kind;
typedef enum sp_norm_kind { SP_NORM_LAYERNORM = 0, SP_NORM_RMSNORM = 1, SP_NORM_COUNT } sp_norm_kind;
typedef enum sp_pos_kind { SP_POS_LEARNED = 0, SP_POS_ROPE = 1, SP_POS_ALIBI = 2, SP_POS_COUNT } sp_pos_kind;
/* The FFN's nonlinearity: of the single hidden for ffn gelu, of the gate for
 * ffn swiglu (act(gate) * up).  AUTO is the ffn's own: gelu_tanh (GPT-2's
 * gelu_new) for gelu, silu for swiglu. */
typedef enum sp_act_kind {
    SP_ACT_AUTO = 0, SP_ACT_GELU_TANH = 1, SP_ACT_GELU = 2 /* erf */, SP_ACT_SILU = 3, SP_ACT_RELU = 4, SP_ACT_COUNT
} sp_act_kind;
/* Which linear layers carry biases (sp_model.bias is a mask of these). */
enum { SP_BIAS_QKV = 1, SP_BIAS_O = 2, SP_BIAS_FFN = 4, SP_BIAS_ALL = 7 };
/* RoPE frequency scaling, as transformers' rope_scaling.rope_type. */
typedef enum sp_rope_scaling {
    SP_ROPE_NONE = 0, SP_ROPE_LINEAR = 1, SP_ROPE_DYNAMIC = 2, SP_ROPE_LLAMA3 = 3, SP_ROPE_YARN = 4, SP_ROPE_COUNT
} sp_rope_scaling;
/* Which dimensions of a head RoPE pairs: i with i + R/2 (rotate_half: Llama,
 * GPT-NeoX) or 2i with 2i+1 (GPT-J's rotate_every_two). */
typedef enum sp_rope_style { SP_ROPE_HALF = 0, SP_ROPE_INTERLEAVED = 1, SP_ROPE_STYLE_COUNT } sp_rope_style;
/* How a MoE layer's router turns its logits (tokens, n_experts) into the
 * weights of a token's top_k experts.  topk_renorm: softmax over every
 * expert, keep the top_k, renormalise them to sum 1 (Mixtral; equal to a
 * softmax over the top_k logits).  topk: the top_k of the softmax as they are
 * (Qwen2-MoE with norm_topk_prob false).  Both cost the same. */
typedef enum sp_router_kind { SP_ROUTER_TOPK_RENORM = 0, SP_ROUTER_TOPK = 1, SP_ROUTER_COUNT } sp_router_kind;

const char *sp_ffn_name(sp_ffn_kind k);
const char *sp_block_name(sp_block_kind k);
const char *sp_norm_name(sp_norm_kind k);
const char *sp_pos_name(sp_pos_kind k);
const char *sp_act_name(sp_act_kind k);
const char *sp_rope_scaling_name(sp_rope_scaling k);
const char *sp_rope_style_name(sp_rope_style k);
const char *sp_router_name(sp_router_kind k);

typedef struct sp_model {
    char name[64];
    int64_t n_layers;
    int64_t d_model;      /* E */
    int64_t d_ff;         /* F (per expert for MoE) */
    int64_t n_heads;      /* H */
    int64_t n_kv_heads;   /* KVH: H for MHA, 1 for MQA, between for GQA */
    int64_t d_head;       /* D */
    int64_t vocab;        /* V */
    sp_ffn_kind ffn;
    sp_act_kind act;      /* AUTO: the ffn's own (sp_model_act resolves it) */
    sp_block_kind block;
    sp_norm_kind norm;
    sp_pos_kind positions;
    int tied_embeddings;  /* LM head shares the input embedding */
    int bias;             /* mask of SP_BIAS_*: which linear layers carry biases */
    int64_t max_context;  /* learned positions table size; context limit */
    double rope_theta;    /* RoPE base (10000 unless the model says) */
    double norm_eps;
    /* RoPE details (positions rope only) */
    int64_t rotary_dims;  /* leading dims of each head rotated; 0 = d_head (partial rotary otherwise) */
    sp_rope_style rope_style;
    sp_rope_scaling rope_scaling;
    double rope_factor;             /* linear, dynamic, llama3, yarn: the scaling factor (> 1 stretches) */
    int64_t rope_orig_context;      /* dynamic, llama3, yarn: original_max_position_embeddings */
    double rope_low_freq_factor;    /* llama3 (1) */
    double rope_high_freq_factor;   /* llama3 (4) */
    double rope_beta_fast;          /* yarn (32) */
    double rope_beta_slow;          /* yarn (1) */
    double rope_attn_factor;        /* yarn: cos/sin multiplier; 0 = 0.1 ln(factor) + 1 */
    int64_t sliding_window;         /* attention sees the last N tokens; 0 = all */
    /* Mixture of experts (0 experts: dense).  Every moe_every-th layer's FFN
     * (layers moe_every-1, 2·moe_every-1, ...: sp_model_layer_is_moe, as
     * Qwen2-MoE's decoder_sparse_step) is n_experts FFNs of d_ff each behind
     * a router (E x n_experts); a token goes through its top_k experts (and
     * every shared expert).  The other layers' FFN is one dense FFN of
     * dense_d_ff (0: d_ff). */
    int64_t n_experts;
    int64_t top_k;
    int64_t moe_every;
    int64_t dense_d_ff;
    int64_t n_shared_experts;   /* experts every token goes through (DeepSeek/Qwen-MoE) */
    int64_t shared_d_ff;        /* each shared expert's hidden width; 0: d_ff.  The shared experts
                                   together are one FFN of sp_model_shared_ff() columns (their
                                   outputs sum, so concatenating their hidden units is exact) */
    int shared_expert_gate;     /* Qwen2-MoE: the shared FFN's output times sigmoid(x · w), w (E) */
    sp_router_kind router;
    /* Not a computation: the routing the cost model assumes.  Expert i of n
     * is picked by a token with probability k·p_i (capped at 1), p_i ∝
     * (i+1)^-router_skew: 0 is a uniform router.  doc/formats.md. */
    double router_skew;
} sp_model;

/* Derived quantities, all computed by sp_model_derive (the only place). */
typedef struct sp_model_stats {
    /* parameters */
    int64_t params_embedding;   /* token embedding (+ learned positions) (+ untied LM head) */
    int64_t params_attention;   /* Q, K, V, O (+ biases), all layers */
    int64_t params_ffn;         /* FFN matrices (+ biases), all layers, all experts */
    int64_t params_norm;        /* norm gains (and LayerNorm biases), incl. final norm */
    int64_t params_total;
    int64_t params_active;      /* per token (MoE: top_k experts); dense: = total */
    int64_t params_per_layer;   /* attention + ffn + norms of one layer */
    /* weight bytes of all parameters */
    int64_t weight_bytes_bf16;
    int64_t weight_bytes_int8;
    int64_t weight_bytes_fp8;
    /* KV cache bytes per token per sequence, bf16: 2 * n_layers * KVH * D * 2 */
    int64_t kv_bytes_per_token;
    /* 2 FLOPs per active weight per token in matmuls (embedding lookup excluded,
     * LM head included) */
    int64_t matmul_flops_per_token;
    /* attention score and value FLOPs per token at `context`:
     * 2 (QK and AV) * 2 * n_layers * H * D * context */
    int64_t attention_flops_per_token;
    int64_t context;            /* the context used above */
} sp_model_stats;

/* Initialise to zeros with defaults (rope_theta 10000, norm_eps 1e-5). */
void sp_model_init(sp_model *m);

/* Loaders.  flags: 0.  On failure fill err (file, line, column for malformed
 * JSON; field path for missing/wrong fields) and return SP_EPARSE, SP_EINVAL
 * or SP_EIO.  A JSON document with "model_type" or "architectures" is read as a
 * Hugging Face config.json, otherwise as shardplan's own format. */
sp_status sp_model_load_file(const char *path, unsigned flags, sp_model *out, sp_error *err);
sp_status sp_model_loads(const char *text, unsigned flags, sp_model *out, sp_error *err);
/* NAME (bundled: data/models/NAME.json) or a file path. */
sp_status sp_model_find(const char *name_or_path, sp_model *out, sp_error *err);

/* Checks sizes are positive, heads divide, products fit in 64 bits. */
sp_status sp_model_validate(const sp_model *m, sp_error *err);

/* Computes all derived quantities at the given context (tokens; 0 means
 * max_context).  Fails with SP_EINVAL on a model sp_model_validate rejects. */
sp_status sp_model_derive(const sp_model *m, int64_t context, sp_model_stats *out);

/* Number of FFN weight matrices: 2 for GELU, 3 for SwiGLU. */
int sp_model_ffn_matrices(const sp_model *m);
/* The FFN's activation with AUTO resolved. */
sp_act_kind sp_model_act(const sp_model *m);
/* Does layer matrix group g (SP_BIAS_QKV, _O, _FFN) carry biases? */
int sp_model_has_bias(const sp_model *m, int group);
/* Rotated dims per head (rotary_dims, or d_head when 0). */
int64_t sp_model_rotary_dims(const sp_model *m);

/* A model's weight tensors: the one name of each, used by the lowering (a
 * step's weight, a chip's storage spec), the weight slab and checkpoint
 * reader, and the executor.  Model-level tensors first, then the per-layer
 * ones (stacked over the layers: (NL, ...)); every kind from SP_W_NORM1 on
 * is per-layer, so append per-layer kinds only.  The values are part of the
 * seeded random weights (one random stream per kind), so they never move.
 * Shapes are global and unpadded, matrices (in, out): x (T, in) . W. */
typedef enum sp_weight {
    SP_W_NONE = 0,
    SP_W_EMBED = 1,     /* (V, E); the LM head too when tied */
    SP_W_POS = 2,       /* (max_context, E), learned positions only */
    SP_W_LMHEAD = 3,    /* (V, E), untied only */
    SP_W_NORMF = 4,     /* (E) final norm gain */
    SP_W_NORMF_B = 5,   /* (E), LayerNorm only */
    SP_W_NORM1 = 6,     /* (NL, E) attention-input norm gain */
    SP_W_NORM1_B = 7,   /* (NL, E), LayerNorm only */
    SP_W_Q = 8,         /* (NL, E, H*D) */
    SP_W_BQ = 9,        /* (NL, H*D), bias only */
    SP_W_K = 10,        /* (NL, E, KVH*D) */
    SP_W_BK = 11,       /* (NL, KVH*D) */
    SP_W_V = 12,        /* (NL, E, KVH*D) */
    SP_W_BV = 13,       /* (NL, KVH*D) */
    SP_W_O = 14,        /* (NL, H*D, E) */
    SP_W_BO = 15,       /* (NL, E) */
    SP_W_NORM2 = 16,    /* (NL, E) FFN-input norm gain, serial block only */
    SP_W_NORM2_B = 17,  /* (NL, E), serial block with LayerNorm */
    SP_W_IN = 18,       /* (NL, E, F): GELU up / SwiGLU gate; MoE: (NL, n_experts·E, F), expert-major */
    SP_W_B_IN = 19,     /* (NL, F) */
    SP_W_UP = 20,       /* (NL, E, F), SwiGLU only; MoE as SP_W_IN */
    SP_W_B_UP = 21,     /* (NL, F) */
    SP_W_OUT = 22,      /* (NL, F, E); MoE: (NL, n_experts·F, E), expert-major */
    SP_W_B_OUT = 23,    /* (NL, E) */
    SP_W_ROUTER = 24,   /* (NL, E, n_experts): MoE router, MoE models only */
    SP_W_SH_IN = 25,    /* (NL, E, Fs): shared experts' gate (SwiGLU) / up (GELU), Fs = sp_model_shared_ff */
    SP_W_SH_UP = 26,    /* (NL, E, Fs), SwiGLU only */
    SP_W_SH_OUT = 27,   /* (NL, Fs, E) */
    SP_W_SH_GATE = 28,  /* (NL, E, 1): shared_expert_gate only */
    SP_W_D_IN = 29,     /* (NL, E, Fd): the dense FFN of the layers between MoE layers (moe_every > 1), Fd =
                           sp_model_dense_ff; gate (SwiGLU) / up (GELU) */
    SP_W_D_UP = 30,     /* (NL, E, Fd), SwiGLU only */
    SP_W_D_OUT = 31,    /* (NL, Fd, E) */
    SP_W_COUNT
} sp_weight;
#define SP_W_FIRST_LAYER SP_W_NORM1   /* the first per-layer kind */
const char *sp_weight_name(sp_weight w);   /* "wq", "w_in", "norm1", "bq", ...; "?" out of range */
/* 1 for the layer matrices (wq wk wv wo w_in w_up w_out router, the shared experts'): what quantisation touches. */
int sp_weight_is_matrix(sp_weight w);
/* 1 for the per-layer kinds (w >= SP_W_FIRST_LAYER). */
int sp_weight_per_layer(sp_weight w);
/* The two parts of a layer's weights that offload streams apart
 * (offload_attn, offload_ffn of sp_layout.h): attention (norm1, its bias,
 * wq wk wv wo and their biases; a parallel block's one input norm) and the
 * FFN (norm2 and its bias, the FFN matrices and biases, the router, the
 * shared and dense experts'). */
typedef enum sp_wkind { SP_WKIND_ATTN = 0, SP_WKIND_FFN = 1, SP_WKIND_COUNT } sp_wkind;
const char *sp_wkind_name(sp_wkind k);   /* "attn", "ffn"; "?" out of range */
/* The part per-layer weight w belongs to (w >= SP_W_FIRST_LAYER). */
sp_wkind sp_weight_wkind(sp_weight w);
/* The bias that goes with a matrix (wq -> bq) or the LayerNorm bias that
 * goes with a norm gain (norm1 -> norm1_b); SP_W_NONE for the others. */
sp_weight sp_weight_bias(sp_weight w);
/* Does m have tensor w (a kind it lacks has no elements)? */
int sp_weight_present(const sp_model *m, sp_weight w);
/* Global shape of one layer's w (rows = 1 for vectors); of a model-level
 * kind, its whole shape. */
void sp_weight_shape(const sp_model *m, sp_weight w, int64_t *rows, int64_t *cols);

/* RoPE of the model at a context of `context` tokens: the rotary_dims/2
 * inverse frequencies (radians per position) in inv_freq, and the factor
 * cos and sin are multiplied by (yarn's attention factor, else 1).  Follows
 * transformers' rope initialisation for each rope_type.  Fails (SP_EINVAL)
 * for a model without RoPE or a scaling sp_model_check_run refuses. */
sp_status sp_model_rope_freqs(const sp_model *m, int64_t context, double *inv_freq, double *attn_scale);

/* Can the lowering, the cost model and the executor compute this model at
 * `context` tokens per sequence (0: max_context)?  SP_OK, or SP_EINVAL with
 * err naming the field (JSON pointer of shardplan's format) and its value:
 * every field that changes the computation is either implemented or refused
 * here (doc/formats.md, "What is computed").  estimate, plan and run call it
 * before anything else; the lowering refuses the same models. */
sp_status sp_model_check_run(const sp_model *m, int64_t context, sp_error *err);

/* MoE routing statistics (sp_model.router_skew), for a batch of `tokens`
 * tokens routed independently over the model's n_experts:
 *   *distinct: expected number of distinct experts chosen by at least one
 *              token: Σ_i 1 − (1 − q_i)^tokens with q_i = min(1, top_k·p_i)
 *              (uniform router: E·(1 − (1 − k/E)^tokens));
 *   *q_max:    the largest q_i, a token's probability of choosing the most
 *              popular expert (uniform: k/E).
 * Both 0 for a dense model. */
/* The shared experts' hidden width together: n_shared_experts · (shared_d_ff or d_ff); 0 without. */
int64_t sp_model_shared_ff(const sp_model *m);
/* The dense layers' FFN width in a model with MoE layers between dense ones
 * (moe_every > 1): dense_d_ff or d_ff; 0 otherwise. */
int64_t sp_model_dense_ff(const sp_model *m);
/* Is layer `layer` (0 .. n_layers-1) a MoE layer?  (layer + 1) a multiple
 * of moe_every in a MoE model; 0 in a dense model. */
int sp_model_layer_is_moe(const sp_model *m, int64_t layer);
/* Which layers of a MoE model hold per-layer kind w: 1 MoE layers only (the
 * router, experts, shared experts and their biases), 2 the dense layers
 * between them only (SP_W_D_*), 0 every layer. */
int sp_weight_layer_kind(sp_weight w);
/* Does layer `layer` hold tensor w?  Per-layer kinds only: the router,
 * experts and shared experts are in MoE layers, the dense FFN (SP_W_D_*) in
 * the others, everything else in every layer (when the model has it). */
int sp_weight_in_layer(const sp_model *m, sp_weight w, int64_t layer);
/* Per-layer kind w stacked over the layers that hold it: how many there
 * are (n_layers, the MoE layers or the dense ones), and layer `layer`'s
 * place among them (meaningful when sp_weight_in_layer). */
int64_t sp_weight_layers(const sp_model *m, sp_weight w);
int64_t sp_weight_layer_slot(const sp_model *m, sp_weight w, int64_t layer);
void sp_model_moe_routing(const sp_model *m, double tokens, double *distinct, double *q_max);

#ifdef __cplusplus
}
#endif
#endif
