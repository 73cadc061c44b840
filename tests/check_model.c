/* check_model.c: model loading, HF configs, validation paths and derived quantities. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "sp_model.h"
#include "spi_json.h"

static const char *const bundled[] = {
    "palm-8b", "palm-62b", "palm-540b", "gpt3-175b", "mt-nlg-530b", "bloom-176b", "gpt-j-6b",
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3.1-8b", "llama3.1-70b", "llama3.1-405b",
    "falcon-180b", "mixtral-8x7b", "mixtral-8x22b", "tiny-moe", "tiny-moe-shared", "tiny-moe-every2", "qwen1.5-moe-a2.7b", "tiny-llama", "tiny-palm", "tiny-gpt2", "bench-1b",
    "gpt-20b-ft", "gpt-89b-ft", "gpt-175b-ft",
    "gpt-350m-ft", "gpt-1.3b-ft", "gpt-6.7b-ft", "megatron-530b-ft",
};
#define N_BUNDLED (int)(sizeof bundled / sizeof bundled[0])

static void load(const char *name, sp_model *m, sp_model_stats *st)
{
    sp_error err;
    char buf[1024];
    sp_error_init(&err);
    sp_status s = sp_model_find(name, m, &err);
    ck_assert_msg(s == SP_OK, "%s: %s", name, sp_error_format(&err, buf, sizeof buf));
    ck_assert_int_eq(sp_model_validate(m, NULL), SP_OK);
    ck_assert_int_eq(sp_model_derive(m, m->max_context, st), SP_OK);
}

START_TEST(test_bundled_loads)
{
    sp_model m;
    sp_model_stats st;
    load(bundled[_i], &m, &st);
    ck_assert_str_eq(m.name, bundled[_i]);
    ck_assert_int_eq(st.params_total, st.params_embedding + st.params_attention + st.params_ffn + st.params_norm);
    ck_assert_int_eq(st.weight_bytes_bf16, 2 * st.params_total);
    /* bundled files cite a source */
    char rel[128], path[1024];
    snprintf(rel, sizeof rel, "models/%s.json", bundled[_i]);
    ck_assert_int_eq(sp_data_path(rel, path, sizeof path), SP_OK);
    json_t *j = json_load_file(path, 0, NULL);
    ck_assert_ptr_nonnull(j);
    json_t *src = json_object_get(j, "source");
    ck_assert_msg(json_is_string(src) && strlen(json_string_value(src)) > 10, "%s has no source", path);
    json_decref(j);
}
END_TEST

START_TEST(test_every_file_in_models_is_listed)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models", sp_data_dir());
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        int found = 0;
        for (int i = 0; i < N_BUNDLED; i++)
            if (strlen(bundled[i]) == l - 5 && !strncmp(bundled[i], e->d_name, l - 5)) found = 1;
        ck_assert_msg(found, "data/models/%s is not covered by test_bundled_loads", e->d_name);
    }
    closedir(d);
}
END_TEST

static void near(const char *name, double want, double rel)
{
    sp_model m;
    sp_model_stats st;
    load(name, &m, &st);
    double got = (double)st.params_total;
    ck_assert_msg(got > want * (1 - rel) && got < want * (1 + rel), "%s: %.6g params, want %.6g", name, got, want);
}

START_TEST(test_palm_totals)
{
    near("palm-540b", 540.35e9, 0.005);
    near("palm-62b", 62.5e9, 0.005);
    near("palm-8b", 8.63e9, 0.005);
}
END_TEST

START_TEST(test_published_totals)
{
    near("llama2-7b", 6.74e9, 0.005);
    near("llama2-13b", 13.02e9, 0.005);
    near("llama3.1-8b", 8.03e9, 0.005);
    near("llama3.1-70b", 70.55e9, 0.005);
    near("llama3.1-405b", 405.85e9, 0.005);
    near("gpt3-175b", 175e9, 0.01);
    near("mt-nlg-530b", 530e9, 0.01);
    near("bloom-176b", 176.2e9, 0.005);
    near("gpt-j-6b", 6.05e9, 0.005);
    near("mixtral-8x7b", 46.7e9, 0.005);
    near("qwen1.5-moe-a2.7b", 14.3e9, 0.005);
    sp_model m;
    sp_model_stats st;
    load("mixtral-8x7b", &m, &st);
    ck_assert_msg(st.params_active > 12.8e9 && st.params_active < 13.0e9, "active %lld", (long long)st.params_active);
    /* Mixtral 8x22B: 141B total, 39B active (Mistral AI's announcement) */
    near("mixtral-8x22b", 140.6e9, 0.005);
    load("mixtral-8x22b", &m, &st);
    ck_assert_msg(st.params_active > 38.5e9 && st.params_active < 39.5e9, "active %lld", (long long)st.params_active);
}
END_TEST

START_TEST(test_hf_llama2_70b)
{
    char path[1024];
    sp_model m, b;
    sp_model_stats st, sb;
    sp_error err;
    snprintf(path, sizeof path, "%s/hf/llama2-70b/config.json", sp_data_dir());
    ck_assert_int_eq(sp_model_load_file(path, 0, &m, &err), SP_OK);
    ck_assert_int_eq(sp_model_derive(&m, 4096, &st), SP_OK);
    ck_assert_msg(st.params_total > 68.98e9 * 0.995 && st.params_total < 68.98e9 * 1.005, "%lld",
                  (long long)st.params_total);
    ck_assert_int_eq(st.kv_bytes_per_token, 327680);
    ck_assert_int_eq(m.n_kv_heads, 8);
    ck_assert_int_eq(m.d_head, 128);
    ck_assert_int_eq(m.ffn, SP_FFN_SWIGLU);
    ck_assert_int_eq(m.norm, SP_NORM_RMSNORM);
    ck_assert_int_eq(m.tied_embeddings, 0);
    ck_assert_double_eq_tol(m.norm_eps, 1e-5, 1e-12);
    /* the HF config and the bundled description agree */
    load("llama2-70b", &b, &sb);
    ck_assert_int_eq(st.params_total, sb.params_total);
}
END_TEST

static sp_status loads(const char *text, sp_model *m, sp_error *err)
{
    sp_error_init(err);
    return sp_model_loads(text, 0, m, err);
}

START_TEST(test_hf_families)
{
    sp_model m;
    sp_model_stats st;
    sp_error err;
    /* GPT-2 small: 124.44M */
    ck_assert_int_eq(loads("{\"model_type\":\"gpt2\",\"n_embd\":768,\"n_layer\":12,\"n_head\":12,"
                           "\"n_positions\":1024,\"vocab_size\":50257,\"n_inner\":null}", &m, &err), SP_OK);
    ck_assert_int_eq(sp_model_derive(&m, 0, &st), SP_OK);
    ck_assert_int_eq(st.params_total, 124439808);
    ck_assert_int_eq(m.d_ff, 3072);
    ck_assert_int_eq(m.positions, SP_POS_LEARNED);
    /* Mixtral */
    ck_assert_int_eq(loads("{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_size\":4096,\"intermediate_size\":14336,"
                           "\"num_attention_heads\":32,\"num_key_value_heads\":8,\"num_hidden_layers\":32,"
                           "\"vocab_size\":32000,\"num_local_experts\":8,\"num_experts_per_tok\":2}", &m, &err), SP_OK);
    ck_assert_int_eq(m.n_experts, 8);
    ck_assert_int_eq(m.top_k, 2);
    /* Falcon-180B style */
    ck_assert_int_eq(loads("{\"model_type\":\"falcon\",\"hidden_size\":14848,\"num_hidden_layers\":80,"
                           "\"num_attention_heads\":232,\"num_kv_heads\":8,\"new_decoder_architecture\":true,"
                           "\"vocab_size\":65024,\"parallel_attn\":true,\"bias\":false,\"alibi\":false}", &m, &err), SP_OK);
    ck_assert_int_eq(m.n_kv_heads, 8);
    ck_assert_int_eq(m.d_ff, 4 * 14848);
    ck_assert_int_eq(m.block, SP_BLOCK_PARALLEL2);   /* ln_attn and ln_mlp */
    /* GPT-NeoX 20B: 20.55B with separate head */
    ck_assert_int_eq(loads("{\"model_type\":\"gpt_neox\",\"hidden_size\":6144,\"num_hidden_layers\":44,"
                           "\"num_attention_heads\":64,\"intermediate_size\":24576,\"vocab_size\":50432,"
                           "\"max_position_embeddings\":2048,\"use_parallel_residual\":true}", &m, &err), SP_OK);
    ck_assert_int_eq(sp_model_derive(&m, 0, &st), SP_OK);
    ck_assert_msg(st.params_total > 20.5e9 && st.params_total < 20.6e9, "%lld", (long long)st.params_total);
    /* BLOOM: ALiBi */
    ck_assert_int_eq(loads("{\"model_type\":\"bloom\",\"hidden_size\":14336,\"n_layer\":70,\"n_head\":112,"
                           "\"vocab_size\":250880}", &m, &err), SP_OK);
    ck_assert_int_eq(m.positions, SP_POS_ALIBI);
    /* Qwen2 */
    ck_assert_int_eq(loads("{\"model_type\":\"qwen2\",\"hidden_size\":3584,\"intermediate_size\":18944,"
                           "\"num_attention_heads\":28,\"num_key_value_heads\":4,\"num_hidden_layers\":28,"
                           "\"vocab_size\":152064,\"tie_word_embeddings\":false}", &m, &err), SP_OK);
    ck_assert_int_eq(sp_model_derive(&m, 0, &st), SP_OK);
    ck_assert_msg(st.params_total > 7.60e9 && st.params_total < 7.63e9, "%lld", (long long)st.params_total);
    /* Qwen2-MoE (Qwen1.5-MoE-A2.7B): experts of moe_intermediate_size, one gated shared expert,
     * top-4 not renormalised; the importer reads what changes the computation */
    static const char qmoe[] =
        "{\"model_type\":\"qwen2_moe\",\"architectures\":[\"Qwen2MoeForCausalLM\"],\"hidden_size\":2048,"
        "\"intermediate_size\":5632,\"moe_intermediate_size\":1408,\"shared_expert_intermediate_size\":5632,"
        "\"num_experts\":60,\"num_experts_per_tok\":4,\"num_attention_heads\":16,\"num_key_value_heads\":16,"
        "\"num_hidden_layers\":24,\"vocab_size\":151936,\"max_position_embeddings\":8192,\"rope_theta\":1000000.0,"
        "\"rms_norm_eps\":1e-06,\"tie_word_embeddings\":false%s}";
    char cfg[1024];
    snprintf(cfg, sizeof cfg, qmoe, ",\"norm_topk_prob\":false,\"decoder_sparse_step\":1,\"mlp_only_layers\":[]");
    ck_assert_int_eq(loads(cfg, &m, &err), SP_OK);
    ck_assert_int_eq(m.n_experts, 60);
    ck_assert_int_eq(m.top_k, 4);
    ck_assert_int_eq(m.d_ff, 1408);
    ck_assert_int_eq(m.n_shared_experts, 1);
    ck_assert_int_eq(sp_model_shared_ff(&m), 5632);
    ck_assert_int_eq(m.shared_expert_gate, 1);
    ck_assert_int_eq(m.router, SP_ROUTER_TOPK);
    ck_assert_int_eq(m.bias, SP_BIAS_QKV);
    ck_assert_int_eq(sp_model_derive(&m, 0, &st), SP_OK);
    ck_assert_msg(st.params_total > 14.25e9 && st.params_total < 14.35e9, "%lld", (long long)st.params_total);
    /* the bundled description is this config */
    sp_model q;
    sp_model_stats qs;
    ck_assert_int_eq(sp_model_find("qwen1.5-moe-a2.7b", &q, &err), SP_OK);
    ck_assert_int_eq(sp_model_derive(&q, 0, &qs), SP_OK);
    ck_assert_int_eq(qs.params_total, st.params_total);
    ck_assert_int_eq(qs.params_active, st.params_active);
    /* HF's default norm_topk_prob is false; true renormalises the top-k (as Mixtral) */
    snprintf(cfg, sizeof cfg, qmoe, "");
    ck_assert_int_eq(loads(cfg, &m, &err), SP_OK);
    ck_assert_int_eq(m.router, SP_ROUTER_TOPK);
    snprintf(cfg, sizeof cfg, qmoe, ",\"norm_topk_prob\":true");
    ck_assert_int_eq(loads(cfg, &m, &err), SP_OK);
    ck_assert_int_eq(m.router, SP_ROUTER_TOPK_RENORM);
    /* sparse layers every k-th layer: decoder_sparse_step, or mlp_only_layers naming the others; the
     * dense layers' FFN is intermediate_size wide */
    static const struct { const char *extra; int64_t every; } sparse[] = {
        {",\"decoder_sparse_step\":2", 2},
        {",\"decoder_sparse_step\":3,\"mlp_only_layers\":[]", 3},
        {",\"mlp_only_layers\":[0,2,4,6,8,10,12,14,16,18,20,22]", 2},
        {",\"decoder_sparse_step\":2,\"mlp_only_layers\":[1,5,9,13,17,21]", 4},
    };
    for (size_t i = 0; i < sizeof sparse / sizeof sparse[0]; i++) {
        snprintf(cfg, sizeof cfg, qmoe, sparse[i].extra);
        ck_assert_msg(loads(cfg, &m, &err) == SP_OK, "%s: %s", sparse[i].extra, err.text);
        ck_assert_int_eq(m.moe_every, sparse[i].every);
        ck_assert_int_eq(m.dense_d_ff, 5632);
        ck_assert_int_eq(sp_model_dense_ff(&m), 5632);
        ck_assert_int_eq(m.d_ff, 1408);
    }
    /* what the lowering does not compute is refused naming the HF field: sparse layers that are not
     * every k-th layer, or none */
    static const struct { const char *extra, *field; } refused[] = {
        {",\"mlp_only_layers\":[0]", "mlp_only_layers"},
        {",\"decoder_sparse_step\":2,\"mlp_only_layers\":[1]", "mlp_only_layers"},
        {",\"decoder_sparse_step\":25", "decoder_sparse_step"},
        {",\"mlp_only_layers\":[24]", "mlp_only_layers"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(cfg, sizeof cfg, qmoe, refused[i].extra);
        ck_assert_int_eq(loads(cfg, &m, &err), SP_EINVAL);
        ck_assert_msg(strstr(err.path, refused[i].field) != NULL, "%s: path %s", refused[i].field, err.path);
    }
}
END_TEST

/* L=2 E=8 F=16 H=2 KVH=1 D=4 V=10, GELU, serial, LayerNorm, learned, untied, bias, ctx 5. */
static const char tiny[] =
    "{\"name\":\"hand\",\"n_layers\":2,\"d_model\":8,\"d_ff\":16,\"n_heads\":2,\"n_kv_heads\":1,\"d_head\":4,"
    "\"vocab\":10,\"ffn\":\"gelu\",\"block\":\"serial\",\"norm\":\"layernorm\",\"positions\":\"learned\","
    "\"tied_embeddings\":false,\"bias\":true,\"max_context\":5}";

START_TEST(test_derive_by_hand)
{
    sp_model m;
    sp_model_stats st;
    sp_error err;
    ck_assert_int_eq(loads(tiny, &m, &err), SP_OK);
    ck_assert_int_eq(sp_model_derive(&m, 3, &st), SP_OK);
    /* attention/layer: Q 8*8 + K 8*4 + V 8*4 + O 8*8 = 192, biases 8 + 4 + 4 + 8 = 24 */
    ck_assert_int_eq(st.params_attention, 2 * 216);
    /* ffn/layer: 2*8*16 = 256, biases 16 + 8 */
    ck_assert_int_eq(st.params_ffn, 2 * 280);
    /* norms: 2 LayerNorms (16 each) per layer + final */
    ck_assert_int_eq(st.params_norm, 2 * 32 + 16);
    /* embedding: tokens 80 + positions 40 + untied head 80 */
    ck_assert_int_eq(st.params_embedding, 200);
    ck_assert_int_eq(st.params_total, 1272);
    ck_assert_int_eq(st.params_active, 1272);
    ck_assert_int_eq(st.params_per_layer, 528);
    ck_assert_int_eq(st.weight_bytes_bf16, 2544);
    ck_assert_int_eq(st.weight_bytes_int8, 1272);
    ck_assert_int_eq(st.kv_bytes_per_token, 2 * 2 * 1 * 4 * 2);
    /* matmul weights: total - norms - embedding lookup (120) - head (80) + head (80) */
    ck_assert_int_eq(st.matmul_flops_per_token, 2 * (1272 - 80 - 200 + 80));
    ck_assert_int_eq(st.attention_flops_per_token, 4 * 2 * 2 * 4 * 3);
    ck_assert_int_eq(st.context, 3);

    /* same with 4 experts, 2 active, router 8*4 */
    m.n_experts = 4, m.top_k = 2, m.moe_every = 1;
    ck_assert_int_eq(sp_model_derive(&m, 3, &st), SP_OK);
    ck_assert_int_eq(st.params_ffn, 2 * (4 * 280 + 32));
    ck_assert_int_eq(st.params_active, st.params_total - 2 * (2 * 280));
    ck_assert_int_eq(st.params_per_layer, 216 + 4 * 280 + 32 + 32);

    /* SwiGLU, parallel, RMSNorm, rope, tied, no bias */
    m.n_experts = 0, m.ffn = SP_FFN_SWIGLU, m.block = SP_BLOCK_PARALLEL, m.norm = SP_NORM_RMSNORM;
    m.positions = SP_POS_ROPE, m.tied_embeddings = 1, m.bias = 0;
    ck_assert_int_eq(sp_model_derive(&m, 0, &st), SP_OK);
    ck_assert_int_eq(st.params_ffn, 2 * 3 * 8 * 16);
    ck_assert_int_eq(st.params_norm, 2 * 8 + 8);
    ck_assert_int_eq(st.params_embedding, 80);
    ck_assert_int_eq(st.params_total, 80 + 2 * 192 + 2 * 384 + 24);
    ck_assert_int_eq(st.context, 5);
    ck_assert_int_eq(sp_model_ffn_matrices(&m), 3);
}
END_TEST

START_TEST(test_defaults)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(loads("{\"name\":\"d\",\"n_layers\":1,\"d_model\":64,\"d_ff\":128,\"n_heads\":8,\"vocab\":16,"
                           "\"ffn\":\"gelu\",\"block\":\"serial\",\"norm\":\"rmsnorm\",\"positions\":\"rope\","
                           "\"tied_embeddings\":true,\"bias\":false,\"max_context\":32,\"notes\":\"ok\"}", &m, &err),
                     SP_OK);
    ck_assert_int_eq(m.n_kv_heads, 8);
    ck_assert_int_eq(m.d_head, 8);
    ck_assert_double_eq(m.rope_theta, 10000.0);
    ck_assert_int_eq(m.n_experts, 0);
}
END_TEST

/* Validation failures name the field. */
static const struct { const char *edit_key, *edit_val, *path, *text; } bad[] = {
    {"n_layers", "0", "/n_layers", "out of range"},
    {"d_model", "-8", "/d_model", "out of range"},
    {"n_kv_heads", "3", "/n_kv_heads", "multiple"},
    {"ffn", "\"relu\"", "/ffn", "must be one of gelu, swiglu"},
    {"d_ff", "\"16\"", "/d_ff", "must be an integer"},
    {"vocab", "4611686018427387904", "/vocab", "too large"},
    {"n_heads", "330000000000000000", "/n_heads", "too large"},
    {"typo_key", "1", "/typo_key", "unknown key"},
    {"bias", "null", "/bias", "missing field"},
};

START_TEST(test_validation_paths)
{
    char text[1024];
    json_t *j = json_loads(tiny, 0, NULL);
    json_object_set_new(j, bad[_i].edit_key, json_loads(bad[_i].edit_val, JSON_DECODE_ANY, NULL));
    char *s = json_dumps(j, 0);
    snprintf(text, sizeof text, "%s", s);
    free(s);
    json_decref(j);
    sp_model m;
    sp_error err;
    ck_assert_int_eq(loads(text, &m, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, bad[_i].path);
    ck_assert_msg(strstr(err.text, bad[_i].text), "%s: '%s' lacks '%s'", bad[_i].path, err.text, bad[_i].text);
    ck_assert_str_eq(err.source, "<string>");
}
END_TEST

START_TEST(test_validate_struct)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(loads(tiny, &m, &err), SP_OK);
    m.n_heads = 6, m.n_kv_heads = 4;
    ck_assert_int_eq(sp_model_validate(&m, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, "/n_kv_heads");
    ck_assert_int_eq(loads(tiny, &m, &err), SP_OK);
    m.n_layers = INT64_MAX / 2;
    ck_assert_int_eq(sp_model_validate(&m, &err), SP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.text, "too large"));
    /* each dimension within its bound, the products still overflowing */
    ck_assert_int_eq(loads(tiny, &m, &err), SP_OK);
    m.n_layers = 1 << 16, m.d_model = 1 << 20, m.d_ff = 1 << 24, m.n_experts = 1 << 16, m.top_k = 1, m.moe_every = 1;
    ck_assert_int_eq(sp_model_validate(&m, &err), SP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.text, "overflows 64 bits"));
    sp_model_stats st;
    ck_assert_int_eq(sp_model_derive(&m, 1, &st), SP_EINVAL);
}
END_TEST

START_TEST(test_parse_errors)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(loads("{\"name\": \"x\",\n \"n_layers\": 2,\n}", &m, &err), SP_EPARSE);
    ck_assert_int_eq(err.line, 3);
    ck_assert_int_gt(err.column, 0);
    ck_assert_int_eq(loads("", &m, &err), SP_EPARSE);
    ck_assert_int_eq(loads("[]", &m, &err), SP_EINVAL);
    ck_assert_int_eq(sp_model_load_file("/nonexistent/x.json", 0, &m, &err), SP_EIO);
    ck_assert_int_eq(sp_model_find("no-such-model", &m, &err), SP_EIO);
    ck_assert_str_eq(sp_ffn_name(SP_FFN_SWIGLU), "swiglu");
    ck_assert_str_eq(sp_pos_name(SP_POS_LEARNED), "learned");
}
END_TEST

/* Every field of the model format changes what is computed or sizes it; each
 * is either computed (lowering, cost model, executor: the golden-logit tests
 * cover the values marked so) or refused by sp_model_check_run naming it.
 * The walk covers every key the format accepts: a new key fails here until
 * it is given a row. */
static const struct field_case {
    const char *key;      /* top-level key (rope_scaling: the nested key follows a '/') */
    const char *json;     /* fragment merged into the base model */
    int64_t context;      /* the job's tokens per sequence (0: max_context) */
    const char *refused;  /* JSON pointer sp_model_check_run names, or NULL: computed */
} field_cases[] = {
    {"name", "{\"name\": \"other\"}", 0, NULL},
    {"n_layers", "{\"n_layers\": 3}", 0, NULL},
    {"d_model", "{\"d_model\": 96, \"d_head\": 12}", 0, NULL},
    {"d_ff", "{\"d_ff\": 100}", 0, NULL},
    {"n_heads", "{\"n_heads\": 4}", 0, NULL},
    {"n_kv_heads", "{\"n_kv_heads\": 8}", 0, NULL},
    {"d_head", "{\"d_head\": 16}", 0, NULL},
    {"vocab", "{\"vocab\": 77}", 0, NULL},
    {"ffn", "{\"ffn\": \"gelu\"}", 0, NULL},
    {"block", "{\"block\": \"parallel\"}", 0, NULL},
    {"block", "{\"block\": \"parallel2\"}", 0, NULL},
    {"norm", "{\"norm\": \"layernorm\"}", 0, NULL},
    {"positions", "{\"positions\": \"learned\"}", 0, NULL},
    {"positions", "{\"positions\": \"alibi\"}", 0, "/positions"},
    {"tied_embeddings", "{\"tied_embeddings\": true}", 0, NULL},
    {"bias", "{\"bias\": true}", 0, NULL},
    {"bias", "{\"bias\": [\"qkv\"]}", 0, NULL},
    {"bias", "{\"bias\": [\"o\", \"ffn\"]}", 0, NULL},
    {"max_context", "{\"max_context\": 64}", 0, NULL},
    {"rope_theta", "{\"rope_theta\": 500000}", 0, NULL},
    {"norm_eps", "{\"norm_eps\": 1e-6}", 0, NULL},
    /* MoE: lowered, priced and executed (tests/check_exec.c runs tiny-moe) */
    {"n_experts", "{\"n_experts\": 4, \"top_k\": 2}", 0, NULL},
    {"top_k", "{\"n_experts\": 4, \"top_k\": 1}", 0, NULL},
    {"moe_every", "{\"n_experts\": 4, \"top_k\": 2, \"moe_every\": 1}", 0, NULL},
    /* dense layers between MoE layers (tests/check_exec.c runs tiny-moe-every2) */
    {"moe_every", "{\"n_experts\": 4, \"top_k\": 2, \"moe_every\": 2}", 0, NULL},
    {"dense_d_ff", "{\"n_experts\": 4, \"top_k\": 2, \"moe_every\": 2, \"dense_d_ff\": 256}", 0, NULL},
    /* shared experts (tests/check_exec.c runs tiny-moe-shared) */
    {"n_shared_experts", "{\"n_experts\": 4, \"top_k\": 2, \"n_shared_experts\": 2}", 0, NULL},
    {"shared_d_ff", "{\"n_experts\": 4, \"top_k\": 2, \"n_shared_experts\": 1, \"shared_d_ff\": 512}", 0, NULL},
    {"shared_expert_gate", "{\"n_experts\": 4, \"top_k\": 2, \"n_shared_experts\": 1, \"shared_expert_gate\": true}",
     0, NULL},
    {"router", "{\"n_experts\": 4, \"top_k\": 2, \"router\": \"topk\"}", 0, NULL},
    {"router_skew", "{\"n_experts\": 4, \"top_k\": 2, \"router_skew\": 0.5}", 0, NULL},
    {"bias", "{\"n_experts\": 4, \"top_k\": 2, \"bias\": [\"ffn\"]}", 0, "/bias"},
    {"act", "{\"act\": \"silu\"}", 0, NULL},
    {"act", "{\"act\": \"relu\"}", 0, NULL},
    {"act", "{\"act\": \"gelu\"}", 0, NULL},
    {"act", "{\"act\": \"gelu_tanh\"}", 0, NULL},
    {"rotary_dims", "{\"rotary_dims\": 8}", 0, NULL},
    {"rotary_dims", "{\"rotary_dims\": 16}", 0, NULL},
    {"rope_style", "{\"rope_style\": \"interleaved\"}", 0, "/rope_style"},
    {"sliding_window", "{\"sliding_window\": 32}", 32, NULL},
    {"sliding_window", "{\"sliding_window\": 32}", 33, "/sliding_window"},
    {"rope_scaling", "{\"rope_scaling\": {\"rope_type\": \"none\"}}", 0, NULL},
    {"rope_scaling/rope_type", "{\"rope_scaling\": {\"rope_type\": \"none\"}}", 0, NULL},
    {"rope_scaling/factor", "{\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2}}", 0, NULL},
    {"rope_scaling/original_max_position_embeddings",
     "{\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2, \"original_max_position_embeddings\": 40}}", 40, NULL},
    {"rope_scaling/original_max_position_embeddings",
     "{\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2, \"original_max_position_embeddings\": 40}}", 41,
     "/rope_scaling/rope_type"},
    {"rope_scaling/low_freq_factor",
     "{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"original_max_position_embeddings\": 32, "
     "\"low_freq_factor\": 1, \"high_freq_factor\": 4}}", 0, NULL},
    {"rope_scaling/high_freq_factor",
     "{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"original_max_position_embeddings\": 32, "
     "\"high_freq_factor\": 2}}", 0, NULL},
    {"rope_scaling/beta_fast",
     "{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 32, "
     "\"beta_fast\": 16}}", 0, NULL},
    {"rope_scaling/beta_slow",
     "{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 32, "
     "\"beta_slow\": 2}}", 0, NULL},
    {"rope_scaling/attention_factor",
     "{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 32, "
     "\"attention_factor\": 1.2}}", 0, NULL},
};

static const char field_base[] =
    "{\"name\": \"walk\", \"n_layers\": 2, \"d_model\": 128, \"d_ff\": 256, \"n_heads\": 8, \"n_kv_heads\": 2, "
    "\"d_head\": 16, \"vocab\": 100, \"ffn\": \"swiglu\", \"block\": \"serial\", \"norm\": \"rmsnorm\", "
    "\"positions\": \"rope\", \"tied_embeddings\": false, \"bias\": false, \"max_context\": 128}";

START_TEST(test_every_field_computed_or_refused)
{
    const char *const *keys[2] = {spi_model_keys(), spi_model_rope_scaling_keys()};
    for (int part = 0; part < 2; part++)
        for (const char *const *k = keys[part]; *k; k++) {
            char want[96];
            snprintf(want, sizeof want, "%s%s", part ? "rope_scaling/" : "", *k);
            int rows = 0;
            for (size_t i = 0; i < sizeof field_cases / sizeof field_cases[0]; i++) rows += !strcmp(field_cases[i].key, want);
            ck_assert_msg(rows > 0, "model field %s is neither shown computed nor refused", want);
        }
    for (size_t i = 0; i < sizeof field_cases / sizeof field_cases[0]; i++) {
        const struct field_case *fc = &field_cases[i];
        json_t *base = json_loads(field_base, 0, NULL), *frag = json_loads(fc->json, 0, NULL);
        ck_assert_ptr_nonnull(frag);
        json_object_update(base, frag);
        char *text = json_dumps(base, 0);
        sp_model m;
        sp_error err;
        char buf[1024];
        sp_error_init(&err);
        ck_assert_msg(sp_model_loads(text, 0, &m, &err) == SP_OK, "%s: %s", fc->json, sp_error_format(&err, buf, sizeof buf));
        sp_error_init(&err);
        sp_status st = sp_model_check_run(&m, fc->context, &err);
        if (fc->refused) {
            ck_assert_msg(st == SP_EINVAL, "%s at context %lld: not refused", fc->json, (long long)fc->context);
            ck_assert_msg(!strcmp(err.path, fc->refused), "%s: refused as %s, wanted %s", fc->json, err.path, fc->refused);
            ck_assert_msg(strstr(err.text, "not implemented") != NULL, "%s: %s", fc->json, err.text);
            ck_assert_str_eq(err.source, m.name);
        } else {
            ck_assert_msg(st == SP_OK, "%s: refused: %s", fc->json, sp_error_format(&err, buf, sizeof buf));
        }
        /* the description survives its own JSON form (show, --json) */
        json_t *back = spi_model_to_json(&m);
        char *t2 = json_dumps(back, 0);
        sp_model m2;
        ck_assert_msg(sp_model_loads(t2, 0, &m2, &err) == SP_OK, "%s", t2);
        ck_assert_msg(!memcmp(&m, &m2, sizeof m), "%s: JSON round trip differs: %s", fc->json, t2);
        free(t2);
        json_decref(back);
        free(text);
        json_decref(base);
        json_decref(frag);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_add_loop_test(tc, test_bundled_loads, 0, N_BUNDLED);
    tcase_add_test(tc, test_every_file_in_models_is_listed);
    tcase_add_test(tc, test_palm_totals);
    tcase_add_test(tc, test_published_totals);
    tcase_add_test(tc, test_hf_llama2_70b);
    tcase_add_test(tc, test_hf_families);
    tcase_add_test(tc, test_every_field_computed_or_refused);
    tcase_add_test(tc, test_derive_by_hand);
    tcase_add_test(tc, test_defaults);
    tcase_add_loop_test(tc, test_validation_paths, 0, (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, test_validate_struct);
    tcase_add_test(tc, test_parse_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
