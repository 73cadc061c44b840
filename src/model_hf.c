/* model_hf.c: reads a Hugging Face transformers config.json into sp_model.
 *
 * Only the fields that size the model are read; a config carries many others,
 * so unknown keys are not rejected here.  Mapping choices (doc/formats.md):
 *  - ALiBi (BLOOM, Falcon with alibi=true) adds no parameters; it maps to
 *    positions "rope", which likewise adds none.
 *  - Qwen2's q/k/v biases are ignored (bias=0): they are H*D + 2*KVH*D per
 *    layer, and bias=1 would also add O and FFN biases, a larger error.
 *  - GPT-J has biases in the FFN and none in attention: bias=1 (attention
 *    over-counted by 4*E per layer, < 0.01 %).
 *  - absent max_position_embeddings: 2048. */
#include <stdio.h>
#include <string.h>
#include "spi_common.h"
#include "spi_json.h"
#include "sp_model.h"

typedef enum hf_family {
    HF_LLAMA, HF_MISTRAL, HF_QWEN2, HF_MIXTRAL, HF_GPT2, HF_NEOX, HF_GPTJ, HF_FALCON, HF_BLOOM, HF_COUNT
} hf_family;

static const struct {
    const char *model_type;
    const char *arch_prefix;   /* architectures[0] starts with this */
    hf_family fam;
} families[] = {
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
                         "unsupported Hugging Face model \"%.60s\" (supported: llama, mistral, qwen2, mixtral, gpt2, "
                         "gpt_neox, gptj, falcon, bloom)", what);
}

#define BIG INT64_MAX
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
    m->bias = 0;
    if (fam == HF_MIXTRAL) {
        GET_INT("num_local_experts", 1, &m->n_experts);
        SP_CHECK(spi_json_get_int(c, "", r, "num_experts_per_tok", 1, 1, m->n_experts,
                                  "integer between 1 and num_local_experts", &m->top_k));
        m->moe_every = 1;
    }
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
    m->ffn = SP_FFN_GELU, m->norm = SP_NORM_LAYERNORM, m->bias = 1;
    if (fam == HF_GPT2) {
        m->block = SP_BLOCK_SERIAL, m->positions = SP_POS_LEARNED, m->tied_embeddings = 1;
    } else { /* GPT-J */
        m->block = SP_BLOCK_PARALLEL, m->positions = SP_POS_ROPE, m->tied_embeddings = 0;
        SP_CHECK(spi_json_get_bool(c, "", r, "tie_word_embeddings", 0, &m->tied_embeddings));
    }
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
    m->ffn = SP_FFN_GELU, m->norm = SP_NORM_LAYERNORM, m->positions = SP_POS_ROPE, m->bias = 1;
    m->block = par ? SP_BLOCK_PARALLEL : SP_BLOCK_SERIAL;
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
    m->ffn = SP_FFN_GELU, m->norm = SP_NORM_LAYERNORM, m->positions = SP_POS_ROPE, m->bias = bias;
    m->block = (par || newarch) ? SP_BLOCK_PARALLEL : SP_BLOCK_SERIAL;
    (void)alibi; /* ALiBi adds no parameters: counted as rope */
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
    m->ffn = SP_FFN_GELU, m->norm = SP_NORM_LAYERNORM, m->positions = SP_POS_ROPE, m->bias = 1;
    m->block = SP_BLOCK_SERIAL, m->tied_embeddings = 1;
    return SP_OK;
}

sp_status spi_model_from_hf(const spi_jctx *c, const json_t *r, sp_model *m)
{
    hf_family fam = HF_COUNT;
    SP_CHECK(detect(c, r, &fam));
    SP_CHECK(set_name(c, r, m));
    switch (fam) {
    case HF_LLAMA: case HF_MISTRAL: case HF_QWEN2: case HF_MIXTRAL: SP_CHECK(llama_like(c, r, m, fam)); break;
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
