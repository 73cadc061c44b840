/* model_hf.c: reads a Hugging Face transformers config.json into sp_model.
 *
 * The fields that size the model and every field of these families that
 * changes the computation are read (doc/formats.md); a config carries many
 * others (training, tokenizer), so unknown keys are not rejected here.  A
 * value sp_model cannot describe is refused here, naming the field; one it
 * describes but nothing computes is refused by sp_model_check_run.
 * Absent max_position_embeddings: 2048. */
#include <stdio.h>
#include <string.h>
#include "spi_common.h"
#include "spi_json.h"
#include "sp_model.h"

typedef enum hf_family {
    HF_LLAMA, HF_MISTRAL, HF_QWEN2, HF_MIXTRAL, HF_GPT2, HF_NEOX, HF_GPTJ, HF_FALCON, HF_BLOOM, HF_QWEN2_MOE, HF_COUNT
} hf_family;

static const struct {
    const char *model_type;
    const char *arch_prefix;   /* architectures[0] starts with this */
    hf_family fam;
} families[] = {
    /* Qwen2Moe before Qwen2: architectures match by prefix */
    {"qwen2_moe", "Qwen2Moe", HF_QWEN2_MOE},
    {"llama", "Llama", HF_LLAMA},       {"mistral", "Mistral", HF_MISTRAL}, {"qwen2", "Qwen2", HF_QWEN2},
    {"mixtral", "Mixtral", HF_MIXTRAL}, {"gpt2", "GPT2", HF_GPT2},          {"gpt_neox", "GPTNeoX", HF_NEOX},
    {"gptj", "GPTJ", HF_GPTJ},          {"falcon", "Falcon", HF_FALCON},    {"RefinedWeb", "RW", HF_FALCON},
    {"RefinedWebModel", "RefinedWeb", HF_FALCON}, {"bloom", "Bloom", HF_BLOOM},
};

int spi_json_is_hf_config(const json_t *root)
{
    return json_is_object(root) &&
           (json_object_get(root, "model_type") || json_object_get(root, "architectures"));
}

static sp_status detect(const spi_jctx *c, const json_t *r, hf_family *fam)
{
    const json_t *mt = json_object_get(r, "model_type");
    if (mt && json_is_string(mt)) {
        for (size_t i = 0; i < SPI_ARRAY_LEN(families); i++)
            if (!strcmp(json_string_value(mt), families[i].model_type)) { *fam = families[i].fam; return SP_OK; }
    }
    const json_t *ar = json_object_get(r, "architectures");
    const json_t *a0 = json_is_array(ar) ? json_array_get(ar, 0) : NULL;
    if (a0 && json_is_string(a0)) {
        for (size_t i = 0; i < SPI_ARRAY_LEN(families); i++)
            if (!strncmp(json_string_value(a0), families[i].arch_prefix, strlen(families[i].arch_prefix))) {
                *fam = families[i].fam;
                return SP_OK;
            }
    }
    const char *what = mt && json_is_string(mt) ? json_string_value(mt) : a0 && json_is_string(a0) ? json_string_value(a0) : "?";
    return spi_json_fail(c, SP_EINVAL, "", mt ? "model_type" : "architectures",
                         "unsupported Hugging Face model \"%.60s\" (supported: llama, mistral, qwen2, qwen2_moe, mixtral, "
                         "gpt2, gpt_neox, gptj, falcon, bloom)", what);
}

#define BIG INT64_MAX

/* hidden_act / activation_function, with the family's default */
static sp_status get_act(const spi_jctx *c, const json_t *r, const char *key, sp_act_kind dflt, sp_model *m)
{
    static const struct { const char *hf; sp_act_kind k; } acts[] = {
        {"silu", SP_ACT_SILU}, {"swish", SP_ACT_SILU}, {"gelu", SP_ACT_GELU}, {"gelu_new", SP_ACT_GELU_TANH},
        {"gelu_pytorch_tanh", SP_ACT_GELU_TANH}, {"relu", SP_ACT_RELU},
    };
    m->act = dflt;
    const json_t *v = json_object_get(r, key);
    if (!v || json_is_null(v)) return SP_OK;
    for (size_t i = 0; json_is_string(v) && i < SPI_ARRAY_LEN(acts); i++)
        if (!strcmp(json_string_value(v), acts[i].hf)) {
            m->act = acts[i].k;
            return SP_OK;
        }
    return spi_json_fail(c, SP_EINVAL, "", key,
                         "\"%.60s\": activation not implemented (implemented: silu, gelu, gelu_new, gelu_pytorch_tanh, "
                         "relu)", json_is_string(v) ? json_string_value(v) : "(not a string)");
}

/* rope_scaling: null, or {rope_type (or type), factor, ...} as transformers reads it */
static sp_status get_rope_scaling(const spi_jctx *c, const json_t *r, sp_model *m)
{
    static const char *const keys[] = {
        "rope_type", "type", "factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor",
        "beta_fast", "beta_slow", "attention_factor", NULL};
    static const char *const types[] = {"default", "linear", "dynamic", "llama3", "yarn"};
    const json_t *o = json_object_get(r, "rope_scaling");
    if (!o || json_is_null(o)) return SP_OK;
    if (!json_is_object(o)) return spi_json_fail(c, SP_EINVAL, "", "rope_scaling", "expected an object or null");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)o, key, val) {
        size_t k = 0;
        while (keys[k] && strcmp(keys[k], key)) k++;
        if (!keys[k] && !json_is_null(val))
            return spi_json_fail(c, SP_EINVAL, "/rope_scaling", key,
                                 "not implemented (read: rope_type, factor, original_max_position_embeddings, "
                                 "low_freq_factor, high_freq_factor, beta_fast, beta_slow, attention_factor)");
    }
    const char *tk = json_object_get(o, "rope_type") ? "rope_type" : "type";
    const json_t *t = json_object_get(o, tk);
    const char *tv = json_is_string(t) ? json_string_value(t) : NULL;
    int kind = -1;
    for (int i = 0; tv && i < (int)SPI_ARRAY_LEN(types); i++)
        if (!strcmp(tv, types[i])) kind = i;
    if (kind < 0)
        return spi_json_fail(c, SP_EINVAL, "/rope_scaling", tk,
                             "\"%.60s\": RoPE scaling not implemented (implemented: default, linear, dynamic, llama3, yarn)",
                             tv ? tv : "(missing)");
    m->rope_scaling = (sp_rope_scaling)kind;   /* types[] follows sp_rope_scaling, "default" = none */
    if (m->rope_scaling == SP_ROPE_NONE) return SP_OK;
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "factor", 1, 1, 0, 1e300, "number > 0", &m->rope_factor));
    m->rope_orig_context = m->max_context;
    SP_CHECK(spi_json_get_int(c, "/rope_scaling", o, "original_max_position_embeddings",
                              m->rope_scaling == SP_ROPE_LLAMA3, 1, BIG, "integer > 0", &m->rope_orig_context));
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "low_freq_factor", 0, 1, 0, 1e300, "number > 0", &m->rope_low_freq_factor));
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "high_freq_factor", 0, 1, 0, 1e300, "number > 0", &m->rope_high_freq_factor));
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "beta_fast", 0, 1, 0, 1e300, "number > 0", &m->rope_beta_fast));
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "beta_slow", 0, 1, 0, 1e300, "number > 0", &m->rope_beta_slow));
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "attention_factor", 0, 1, 0, 1e300, "number > 0", &m->rope_attn_factor));
    return SP_OK;
}

/* partial_rotary_factor / rotary_pct: int(d_head * pct) leading dims rotated */
static sp_status get_rotary_pct(const spi_jctx *c, const json_t *r, const char *key, double dflt, sp_model *m)
{
    double pct = dflt;
    SP_CHECK(spi_json_get_num(c, "", r, key, 0, 1, 0, 1, "number in (0, 1]", &pct));
    int64_t dims = (int64_t)((double)m->d_head * pct);
    if (dims < 2 || dims % 2)
        return spi_json_fail(c, SP_EINVAL, "", key, "%g of d_head %lld is %lld dims; RoPE needs an even number >= 2", pct,
                             (long long)m->d_head, (long long)dims);
    m->rotary_dims = dims == m->d_head ? 0 : dims;
    return SP_OK;
}

/* a boolean field only its default value of which is computed */
static sp_status only_default(const spi_jctx *c, const json_t *r, const char *key, int dflt, const char *what)
{
    int v = dflt;
    SP_CHECK(spi_json_get_bool(c, "", r, key, 0, &v));
    if (v != dflt) return spi_json_fail(c, SP_EINVAL, "", key, "%s: %s is not implemented", v ? "true" : "false", what);
    return SP_OK;
}
#define GET_INT(key, req, out) SP_CHECK(spi_json_get_int(c, "", r, (key), (req), 1, BIG, "integer > 0", (out)))

/* First present of two alternative names (HF renamed fields over time). */
static const char *alt(const json_t *r, const char *a, const char *b)
{
    const json_t *v = json_object_get(r, a);
    return (v && !json_is_null(v)) || !json_object_get(r, b) ? a : b;
}

static sp_status set_name(const spi_jctx *c, const json_t *r, sp_model *m)
{
    const json_t *n = json_object_get(r, "_name_or_path");
    const char *src = n && json_is_string(n) ? json_string_value(n) : NULL;
    if (!src || !src[0]) {
        /* the directory holding config.json names the model */
        const char *s = c->source ? c->source : "";
        const char *end = strrchr(s, '/');
        const char *beg = end;
        while (beg && beg > s && beg[-1] != '/') beg--;
        if (end && beg && end > beg) {
            snprintf(m->name, sizeof m->name, "%.*s", (int)(end - beg), beg);
            return SP_OK;
        }
        src = "hf-model";
    }
    const char *slash = strrchr(src, '/');
    snprintf(m->name, sizeof m->name, "%s", slash && slash[1] ? slash + 1 : src);
    return SP_OK;
}

/* Qwen2-MoE (Qwen2MoeSparseMoeBlock): num_experts of moe_intermediate_size,
 * softmax top-k renormalised only with norm_topk_prob, and one shared expert
 * of shared_expert_intermediate_size behind a sigmoid gate (shared_expert_gate).
 * A layer is sparse when it is not in mlp_only_layers and (layer + 1) is a
 * multiple of decoder_sparse_step; the others are a dense MLP of
 * intermediate_size (dense_d_ff).  Our format says "every moe_every-th
 * layer": a set of sparse layers of another shape is refused by name. */
static sp_status qwen2_moe(const spi_jctx *c, const json_t *r, sp_model *m)
{
    int64_t dense_ff = m->d_ff;   /* intermediate_size */
    GET_INT("num_experts", 1, &m->n_experts);
    SP_CHECK(spi_json_get_int(c, "", r, "num_experts_per_tok", 1, 1, m->n_experts, "integer between 1 and num_experts",
                              &m->top_k));
    GET_INT("moe_intermediate_size", 1, &m->d_ff);
    int64_t step = 1, shared = 0;
    SP_CHECK(spi_json_get_int(c, "", r, "decoder_sparse_step", 0, 1, BIG, "integer > 0", &step));
    /* the sparse layers (at most 64 mlp_only_layers read; more are refused below) */
    const json_t *dense = json_object_get(r, "mlp_only_layers");
    if (dense && !json_is_null(dense) && !json_is_array(dense))
        return spi_json_fail(c, SP_EINVAL, "", "mlp_only_layers", "must be a list of layer indices");
    size_t nd = dense && json_is_array(dense) ? json_array_size(dense) : 0;
    for (size_t i = 0; i < nd; i++) {
        const json_t *v = json_array_get(dense, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= m->n_layers)
            return spi_json_fail(c, SP_EINVAL, "", "mlp_only_layers", "element %zu: must be a layer index in [0, %lld)",
                                 i, (long long)m->n_layers);
    }
    /* every moe_every-th layer: the first sparse layer gives the period, every layer is checked against it */
    int64_t every = 0;
    for (int64_t l = 0; l < m->n_layers; l++) {
        int sparse = (l + 1) % step == 0;
        for (size_t i = 0; sparse && i < nd; i++) sparse = json_integer_value(json_array_get(dense, i)) != l;
        if (!every && sparse) every = l + 1;
        if (!every) continue;
        if (sparse != ((l + 1) % every == 0))
            return spi_json_fail(c, SP_EINVAL, "", nd ? "mlp_only_layers" : "decoder_sparse_step",
                                 "the sparse layers (decoder_sparse_step %lld, %zu mlp_only_layers) are not every "
                                 "k-th layer (layers k-1, 2k-1, ...): not implemented", (long long)step, nd);
    }
    if (!every)
        return spi_json_fail(c, SP_EINVAL, "", nd ? "mlp_only_layers" : "decoder_sparse_step",
                             "no layer is sparse: not implemented as a MoE model (set num_experts 0 for a dense one)");
    m->moe_every = every;
    if (every > 1) m->dense_d_ff = dense_ff;
    int renorm = 0;
    SP_CHECK(spi_json_get_bool(c, "", r, "norm_topk_prob", 0, &renorm));
    m->router = renorm ? SP_ROUTER_TOPK_RENORM : SP_ROUTER_TOPK;
    SP_CHECK(spi_json_get_int(c, "", r, "shared_expert_intermediate_size", 0, 0, BIG, "integer >= 0", &shared));
    if (shared > 0) m->n_shared_experts = 1, m->shared_d_ff = shared, m->shared_expert_gate = 1;
    return SP_OK;
}

static sp_status llama_like(const spi_jctx *c, const json_t *r, sp_model *m, hf_family fam)
{
    GET_INT("hidden_size", 1, &m->d_model);
    GET_INT("intermediate_size", 1, &m->d_ff);
    GET_INT("num_attention_heads", 1, &m->n_heads);
    GET_INT("num_hidden_layers", 1, &m->n_layers);
    GET_INT("vocab_size", 1, &m->vocab);
    m->n_kv_heads = m->n_heads;
    GET_INT("num_key_value_heads", 0, &m->n_kv_heads);
    m->max_context = 2048;
    GET_INT("max_position_embeddings", 0, &m->max_context);
    m->d_head = m->d_model / m->n_heads;
    GET_INT("head_dim", 0, &m->d_head);
    m->norm_eps = 1e-6;
    SP_CHECK(spi_json_get_num(c, "", r, "rms_norm_eps", 0, 1, 0, 1, "number in (0, 1]", &m->norm_eps));
    SP_CHECK(spi_json_get_num(c, "", r, "rope_theta", 0, 1, 0, 1e300, "number > 0", &m->rope_theta));
    m->tied_embeddings = 0;
    SP_CHECK(spi_json_get_bool(c, "", r, "tie_word_embeddings", 0, &m->tied_embeddings));
    m->ffn = SP_FFN_SWIGLU, m->block = SP_BLOCK_SERIAL, m->norm = SP_NORM_RMSNORM, m->positions = SP_POS_ROPE;
    SP_CHECK(get_act(c, r, "hidden_act", SP_ACT_SILU, m));
    SP_CHECK(get_rope_scaling(c, r, m));
    /* the Llama family's attention rotates whole heads */
    double prf = 1.0;
    SP_CHECK(spi_json_get_num(c, "", r, "partial_rotary_factor", 0, 1, 0, 1, "number in (0, 1]", &prf));
    if (prf != 1.0)
        return spi_json_fail(c, SP_EINVAL, "", "partial_rotary_factor",
                             "%g: this family's attention applies RoPE to whole heads; not implemented", prf);
    int ab = 0, mb = 0;
    if (fam == HF_QWEN2 || fam == HF_QWEN2_MOE) {
        ab = 1;   /* Qwen2: q, k and v projections carry biases, o does not */
        m->bias = SP_BIAS_QKV;
    } else {
        SP_CHECK(spi_json_get_bool(c, "", r, "attention_bias", 0, &ab));
        m->bias = ab ? SP_BIAS_QKV | SP_BIAS_O : 0;
    }
    /* the MoE families' expert MLPs have no bias whatever mlp_bias says (transformers' Mixtral and
     * Qwen2-MoE blocks do not read it) */
    if (fam != HF_MIXTRAL && fam != HF_QWEN2_MOE) SP_CHECK(spi_json_get_bool(c, "", r, "mlp_bias", 0, &mb));
    if (mb) m->bias |= SP_BIAS_FFN;
    /* sliding-window attention: Mistral and Mixtral when sliding_window is
     * set, Qwen2 only with use_sliding_window */
    int use_sw = fam != HF_QWEN2 && fam != HF_QWEN2_MOE;
    SP_CHECK(spi_json_get_bool(c, "", r, "use_sliding_window", 0, &use_sw));
    if (use_sw) SP_CHECK(spi_json_get_int(c, "", r, "sliding_window", 0, 1, BIG, "integer > 0 or null", &m->sliding_window));
    if (fam == HF_MIXTRAL) {
        GET_INT("num_local_experts", 1, &m->n_experts);
        SP_CHECK(spi_json_get_int(c, "", r, "num_experts_per_tok", 1, 1, m->n_experts,
                                  "integer between 1 and num_local_experts", &m->top_k));
        m->moe_every = 1;
    }
    if (fam == HF_QWEN2_MOE) SP_CHECK(qwen2_moe(c, r, m));
    return SP_OK;
}

static sp_status gpt2(const spi_jctx *c, const json_t *r, sp_model *m, hf_family fam)
{
    GET_INT("n_embd", 1, &m->d_model);
    GET_INT("n_layer", 1, &m->n_layers);
    GET_INT("n_head", 1, &m->n_heads);
    GET_INT("vocab_size", 1, &m->vocab);
    m->d_ff = 4 * m->d_model;
    GET_INT("n_inner", 0, &m->d_ff);
    m->max_context = 1024;
    GET_INT("n_positions", 0, &m->max_context);
    SP_CHECK(spi_json_get_num(c, "", r, "layer_norm_epsilon", 0, 1, 0, 1, "number in (0, 1]", &m->norm_eps));
    m->n_kv_heads = m->n_heads;
    m->d_head = m->d_model / m->n_heads;
    m->ffn = SP_FFN_GELU, m->norm = SP_NORM_LAYERNORM;
    SP_CHECK(get_act(c, r, "activation_function", SP_ACT_GELU_TANH, m));
    if (fam == HF_GPT2) {
        m->block = SP_BLOCK_SERIAL, m->positions = SP_POS_LEARNED, m->tied_embeddings = 1, m->bias = SP_BIAS_ALL;
        SP_CHECK(only_default(c, r, "scale_attn_weights", 1, "attention scores without the 1/sqrt(d_head) scale"));
        SP_CHECK(only_default(c, r, "scale_attn_by_inverse_layer_idx", 0, "attention scores scaled by 1/layer"));
    } else { /* GPT-J: biases in the FFN only; RoPE on interleaved pairs of the first rotary_dim dims */
        m->block = SP_BLOCK_PARALLEL, m->positions = SP_POS_ROPE, m->tied_embeddings = 0, m->bias = SP_BIAS_FFN;
        m->rope_style = SP_ROPE_INTERLEAVED;
        SP_CHECK(spi_json_get_int(c, "", r, "rotary_dim", 0, 1, BIG, "integer > 0", &m->rotary_dims));
        if (m->rotary_dims == m->d_head) m->rotary_dims = 0;
    }
    SP_CHECK(spi_json_get_bool(c, "", r, "tie_word_embeddings", 0, &m->tied_embeddings));
    return SP_OK;
}

static sp_status neox(const spi_jctx *c, const json_t *r, sp_model *m)
{
    GET_INT("hidden_size", 1, &m->d_model);
    GET_INT("num_hidden_layers", 1, &m->n_layers);
    GET_INT("num_attention_heads", 1, &m->n_heads);
    GET_INT("intermediate_size", 1, &m->d_ff);
    GET_INT("vocab_size", 1, &m->vocab);
    m->max_context = 2048;
    GET_INT("max_position_embeddings", 0, &m->max_context);
    SP_CHECK(spi_json_get_num(c, "", r, alt(r, "rope_theta", "rotary_emb_base"), 0, 1, 0, 1e300, "number > 0",
                              &m->rope_theta));
    SP_CHECK(spi_json_get_num(c, "", r, "layer_norm_eps", 0, 1, 0, 1, "number in (0, 1]", &m->norm_eps));
    int par = 1;
    SP_CHECK(spi_json_get_bool(c, "", r, "use_parallel_residual", 0, &par));
    m->tied_embeddings = 0;
    SP_CHECK(spi_json_get_bool(c, "", r, "tie_word_embeddings", 0, &m->tied_embeddings));
    m->n_kv_heads = m->n_heads;
    m->d_head = m->d_model / m->n_heads;
    m->ffn = SP_FFN_GELU, m->norm = SP_NORM_LAYERNORM, m->positions = SP_POS_ROPE;
    /* the MLP always has biases; attention's follow attention_bias */
    int ab = 1;
    SP_CHECK(spi_json_get_bool(c, "", r, "attention_bias", 0, &ab));
    m->bias = SP_BIAS_FFN | (ab ? SP_BIAS_QKV | SP_BIAS_O : 0);
    /* two LayerNorms per layer in both forms: x + attn(ln1(x)) + mlp(ln2(x)) when parallel */
    m->block = par ? SP_BLOCK_PARALLEL2 : SP_BLOCK_SERIAL;
    SP_CHECK(get_act(c, r, "hidden_act", SP_ACT_GELU, m));
    SP_CHECK(get_rotary_pct(c, r, alt(r, "rotary_pct", "partial_rotary_factor"), 0.25, m));
    SP_CHECK(get_rope_scaling(c, r, m));
    return SP_OK;
}

static sp_status falcon(const spi_jctx *c, const json_t *r, sp_model *m)
{
    GET_INT(alt(r, "hidden_size", "n_embed"), 1, &m->d_model);
    GET_INT(alt(r, "num_hidden_layers", "n_layer"), 1, &m->n_layers);
    GET_INT(alt(r, "num_attention_heads", "n_head"), 1, &m->n_heads);
    GET_INT("vocab_size", 1, &m->vocab);
    int newarch = 0, mq = 0, par = 1, alibi = 0, bias = 0;
    SP_CHECK(spi_json_get_bool(c, "", r, "new_decoder_architecture", 0, &newarch));
    SP_CHECK(spi_json_get_bool(c, "", r, "multi_query", 0, &mq));
    SP_CHECK(spi_json_get_bool(c, "", r, "parallel_attn", 0, &par));
    SP_CHECK(spi_json_get_bool(c, "", r, "alibi", 0, &alibi));
    SP_CHECK(spi_json_get_bool(c, "", r, "bias", 0, &bias));
    m->n_kv_heads = mq ? 1 : m->n_heads;
    if (newarch) {
        m->n_kv_heads = 1;
        GET_INT(alt(r, "num_kv_heads", "n_head_kv"), 0, &m->n_kv_heads);
    }
    m->d_ff = 4 * m->d_model;
    GET_INT("ffn_hidden_size", 0, &m->d_ff);
    m->max_context = 2048;
    GET_INT("max_position_embeddings", 0, &m->max_context);
    SP_CHECK(spi_json_get_num(c, "", r, "rope_theta", 0, 1, 0, 1e300, "number > 0", &m->rope_theta));
    SP_CHECK(spi_json_get_num(c, "", r, "layer_norm_epsilon", 0, 1, 0, 1, "number in (0, 1]", &m->norm_eps));
    m->tied_embeddings = 1;
    SP_CHECK(spi_json_get_bool(c, "", r, "tie_word_embeddings", 0, &m->tied_embeddings));
    m->d_head = m->d_model / m->n_heads;
    m->ffn = SP_FFN_GELU, m->norm = SP_NORM_LAYERNORM, m->bias = bias ? SP_BIAS_ALL : 0;
    m->positions = alibi ? SP_POS_ALIBI : SP_POS_ROPE;
    SP_CHECK(get_act(c, r, "activation", SP_ACT_GELU, m));
    /* the new decoder architecture has two input norms (ln_attn, ln_mlp) unless num_ln_in_parallel_attn is 1 */
    int64_t nln = newarch ? 2 : 1;
    SP_CHECK(spi_json_get_int(c, "", r, "num_ln_in_parallel_attn", 0, 1, 2, "1 or 2", &nln));
    m->block = (par || newarch) ? (nln == 2 ? SP_BLOCK_PARALLEL2 : SP_BLOCK_PARALLEL) : SP_BLOCK_SERIAL;
    if (!alibi) SP_CHECK(get_rope_scaling(c, r, m));
    return SP_OK;
}

static sp_status bloom(const spi_jctx *c, const json_t *r, sp_model *m)
{
    GET_INT(alt(r, "hidden_size", "n_embed"), 1, &m->d_model);
    GET_INT("n_layer", 1, &m->n_layers);
    GET_INT(alt(r, "n_head", "num_attention_heads"), 1, &m->n_heads);
    GET_INT("vocab_size", 1, &m->vocab);
    m->max_context = 2048;
    GET_INT(alt(r, "seq_length", "max_position_embeddings"), 0, &m->max_context);
    SP_CHECK(spi_json_get_num(c, "", r, "layer_norm_epsilon", 0, 1, 0, 1, "number in (0, 1]", &m->norm_eps));
    m->n_kv_heads = m->n_heads;
    m->d_head = m->d_model / m->n_heads;
    m->d_ff = 4 * m->d_model;
    m->ffn = SP_FFN_GELU, m->act = SP_ACT_GELU_TANH, m->norm = SP_NORM_LAYERNORM, m->positions = SP_POS_ALIBI;
    m->bias = SP_BIAS_ALL, m->block = SP_BLOCK_SERIAL, m->tied_embeddings = 1;
    return SP_OK;
}

sp_status spi_model_from_hf(const spi_jctx *c, const json_t *r, sp_model *m)
{
    hf_family fam = HF_COUNT;
    SP_CHECK(detect(c, r, &fam));
    SP_CHECK(set_name(c, r, m));
    switch (fam) {
    case HF_LLAMA: case HF_MISTRAL: case HF_QWEN2: case HF_MIXTRAL: case HF_QWEN2_MOE:
        SP_CHECK(llama_like(c, r, m, fam));
        break;
    case HF_GPT2: case HF_GPTJ: SP_CHECK(gpt2(c, r, m, fam)); break;
    case HF_NEOX: SP_CHECK(neox(c, r, m)); break;
    case HF_FALCON: SP_CHECK(falcon(c, r, m)); break;
    case HF_BLOOM: SP_CHECK(bloom(c, r, m)); break;
    case HF_COUNT: return spi_fail(SP_EINTERNAL, "unreachable HF family");
    }
    if (m->d_model % m->n_heads && !json_object_get(r, "head_dim"))
        return spi_json_fail(c, SP_EINVAL, "", "num_attention_heads",
                             "hidden size (%lld) is not a multiple of the head count (%lld)", (long long)m->d_model,
                             (long long)m->n_heads);
    return SP_OK;
}
