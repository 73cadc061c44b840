/* check_weights.c: weight sizes, random init, quantisation, safetensors. */
#include "config.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "kernels/cpu/sp_kern.h"
#include "exec/sp_weights.h"

enum { M_LLAMA, M_GPT2, M_PALM, M_COUNT };

static sp_model make_model(int kind)
{
    sp_model m;
    sp_model_init(&m);
    m.n_layers = 2;
    m.d_model = 16;
    m.d_ff = 40;
    m.d_head = 4;
    m.vocab = 37;
    m.max_context = 32;
    if (kind == M_LLAMA) {
        snprintf(m.name, sizeof m.name, "t-llama");
        m.n_heads = 4; m.n_kv_heads = 2;
        m.ffn = SP_FFN_SWIGLU; m.block = SP_BLOCK_SERIAL; m.norm = SP_NORM_RMSNORM; m.positions = SP_POS_ROPE;
        m.tied_embeddings = 0; m.bias = 0;
    } else if (kind == M_GPT2) {
        snprintf(m.name, sizeof m.name, "t-gpt2");
        m.n_heads = 4; m.n_kv_heads = 4;
        m.ffn = SP_FFN_GELU; m.block = SP_BLOCK_SERIAL; m.norm = SP_NORM_LAYERNORM; m.positions = SP_POS_LEARNED;
        m.tied_embeddings = 1; m.bias = SP_BIAS_ALL;
    } else {
        snprintf(m.name, sizeof m.name, "t-palm");
        m.n_heads = 4; m.n_kv_heads = 1;
        m.ffn = SP_FFN_SWIGLU; m.block = SP_BLOCK_PARALLEL; m.norm = SP_NORM_LAYERNORM; m.positions = SP_POS_ROPE;
        m.tied_embeddings = 1; m.bias = 0;
    }
    return m;
}

START_TEST(test_sizes_equal_alloc)
{
    sp_model m = make_model(_i);
    int64_t sizes[SP_W_COUNT], total;
    ck_assert_int_eq(sp_weights_sizes(&m, sizes, &total), SP_OK);
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 1, &w), SP_OK);
    ck_assert_uint_eq(w.bytes, (size_t)total * sizeof(float));
    int64_t E = m.d_model, F = m.d_ff, NL = m.n_layers, QD = m.n_heads * m.d_head, KD = m.n_kv_heads * m.d_head;
    /* closed form of the parameter count */
    int64_t want = m.vocab * E + (m.positions == SP_POS_LEARNED ? m.max_context * E : 0) +
                   (m.tied_embeddings ? 0 : m.vocab * E) + E * (m.norm == SP_NORM_LAYERNORM ? 2 : 1);
    int64_t per = E * QD + 2 * E * KD + QD * E + (sp_model_ffn_matrices(&m)) * E * F;
    int nn = (m.block == SP_BLOCK_SERIAL ? 2 : 1) * (m.norm == SP_NORM_LAYERNORM ? 2 : 1);
    per += nn * E;
    if (m.bias) per += QD + 2 * KD + E + (m.ffn == SP_FFN_SWIGLU ? 2 * F : F) + E;
    want += NL * per;
    ck_assert_int_eq(total, want);
    /* pointers tile the slab, absent kinds are NULL */
    for (int t = 0; t < SP_W_COUNT; t++) {
        ck_assert_int_eq(w.t[t] != NULL, sizes[t] != 0);
        if (w.t[t]) ck_assert(w.t[t] >= w.slab && w.t[t] + sizes[t] <= w.slab + total);
    }
    ck_assert_ptr_eq(w.layers[1].wq, w.t[SP_W_Q] + E * QD);
    ck_assert_int_eq(w.layers[0].ffn_norm == NULL, m.block == SP_BLOCK_PARALLEL);
    ck_assert_int_eq(w.layers[0].w_up == NULL, m.ffn == SP_FFN_GELU);
    ck_assert_ptr_eq(w.lm_head, m.tied_embeddings ? w.embed : w.t[SP_W_LMHEAD]);
    /* deterministic for a seed; sane scale */
    sp_weights w2;
    ck_assert_int_eq(sp_weights_build_random(&m, 1, &w2), SP_OK);
    ck_assert(memcmp(w.slab, w2.slab, w.bytes) == 0);
    sp_weights_free(&w2);
    ck_assert_int_eq(sp_weights_build_random(&m, 2, &w2), SP_OK);
    ck_assert(memcmp(w.slab, w2.slab, w.bytes) != 0);
    double ss = 0;
    for (int64_t i = 0; i < E * QD; i++) ss += (double)w.layers[0].wq[i] * w.layers[0].wq[i];
    ck_assert_double_eq_tol(sqrt(ss / (double)(E * QD)), 0.02, 0.005);
    ck_assert_double_eq_tol(w.final_norm[0], 1.0, 0.1);
    sp_weights_free(&w2);
    sp_weights_free(&w);
    sp_weights_free(&w);   /* idempotent */
    m.n_kv_heads = 3;
    ck_assert_int_eq(sp_weights_sizes(&m, sizes, &total), SP_EINVAL);
}
END_TEST

static const sp_dtype qd[] = {SP_DT_BF16, SP_DT_INT8, SP_DT_FP8, SP_DT_F16};

START_TEST(test_quantize_blocks)
{
    sp_dtype dt = qd[_i];
    sp_model m = make_model(M_LLAMA);
    sp_weights w, orig;
    ck_assert_int_eq(sp_weights_build_random(&m, 5, &w), SP_OK);
    ck_assert_int_eq(sp_weights_build_random(&m, 5, &orig), SP_OK);
    ck_assert_int_eq(sp_weights_quantize(&w, dt), SP_OK);
    ck_assert_int_eq(sp_weights_quantize(&w, dt), SP_EINVAL);   /* once */
    /* non-matrices untouched; matrices changed but close */
    ck_assert(memcmp(w.embed, orig.embed, (size_t)(m.vocab * m.d_model) * 4) == 0);
    ck_assert(memcmp(w.final_norm, orig.final_norm, (size_t)m.d_model * 4) == 0);
    int64_t R, C;
    sp_weight_shape(&m, SP_W_IN, &R, &C);
    int changed = 0;
    for (int64_t i = 0; i < R * C; i++) {
        changed += w.layers[1].w_in[i] != orig.layers[1].w_in[i];
        ck_assert_double_eq_tol(w.layers[1].w_in[i], orig.layers[1].w_in[i], 0.1 * 0.02 * 5);
    }
    ck_assert_int_gt(changed, 0);
    /* a block of layer 1's w_in, dequantised, equals the round-tripped weights bit for bit */
    int64_t r0 = 3, r1 = 11, c0 = 5, c1 = 29, nr = r1 - r0, nc = c1 - c0;
    int eb = sp_dtype_bytes(dt);
    void *q = malloc((size_t)(nr * nc * eb));
    float scale[64];
    ck_assert_int_eq(sp_weights_block(&w, SP_W_IN, 1, r0, r1, c0, c1, dt, q, scale), SP_OK);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++) {
            int64_t i = r * nc + c;
            float deq;
            switch (dt) {
            case SP_DT_BF16: deq = sp_kern_bf16_to_f32(((uint16_t *)q)[i]); break;
            case SP_DT_F16: deq = sp_kern_f16_to_f32(((uint16_t *)q)[i]); break;
            case SP_DT_INT8: deq = (float)((int8_t *)q)[i] * scale[c]; break;
            default: deq = sp_kern_fp8_to_f32(((uint8_t *)q)[i]) * scale[c]; break;
            }
            ck_assert_msg(deq == w.layers[1].w_in[(r0 + r) * C + c0 + c], "block (%lld,%lld)", (long long)r, (long long)c);
        }
    ck_assert_int_eq(sp_weights_block(&w, SP_W_IN, 2, r0, r1, c0, c1, dt, q, scale), SP_EINVAL);
    ck_assert_int_eq(sp_weights_block(&w, SP_W_IN, 0, r0, R + 1, c0, c1, dt, q, scale), SP_EINVAL);
    free(q);
    sp_weights_free(&w);
    sp_weights_free(&orig);
}
END_TEST

/* Dense layers between MoE layers (tiny-moe-every2: MoE in 1 and 3): each
 * per-layer kind is stacked over the layers that hold it, a layer's pointer
 * to a kind it lacks is NULL, and the slab is the sum. */
START_TEST(test_sizes_moe_every)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-moe-every2", &m, &err), SP_OK);
    int64_t sz[SP_W_COUNT], total;
    ck_assert_int_eq(sp_weights_sizes(&m, sz, &total), SP_OK);
    const int64_t E = 64, NE = 8, F = 96, Fd = 160, QD = 64;
    ck_assert_int_eq(sz[SP_W_ROUTER], 2 * E * NE);
    ck_assert_int_eq(sz[SP_W_IN], 2 * NE * E * F);
    ck_assert_int_eq(sz[SP_W_OUT], 2 * NE * F * E);
    ck_assert_int_eq(sz[SP_W_D_IN], 2 * E * Fd);
    ck_assert_int_eq(sz[SP_W_D_OUT], 2 * Fd * E);
    ck_assert_int_eq(sz[SP_W_Q], 4 * E * QD);
    int64_t sum = 0;
    for (int t = 0; t < SP_W_COUNT; t++) sum += sz[t];
    ck_assert_int_eq(total, sum);
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 3, &w), SP_OK);
    ck_assert_int_eq((int64_t)w.bytes, 4 * total);
    for (int64_t l = 0; l < 4; l++) {
        int moe = l % 2 == 1;
        ck_assert(moe == (w.layers[l].router != NULL) && moe == (w.layers[l].w_in != NULL));
        ck_assert(moe != (w.layers[l].d_in != NULL) && moe != (w.layers[l].d_up != NULL));
        ck_assert_ptr_nonnull(w.layers[l].wq);
    }
    /* the second MoE layer's router follows the first's; the dense layers' FFN likewise */
    ck_assert(w.layers[3].router == w.layers[1].router + E * NE);
    ck_assert(w.layers[2].d_in == w.layers[0].d_in + E * Fd);
    sp_weights_free(&w);
}
END_TEST

/* A MoE layer's experts are quantised each with its own column scales: a
 * block of expert e's rows dequantises to the round-tripped weights with
 * scales that are expert e's (max |col| over its rows only); a block across
 * two experts is refused. */
START_TEST(test_quantize_expert_blocks)
{
    sp_dtype dt = qd[_i];
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-moe", &m, &err), SP_OK);
    sp_weights w, orig;
    ck_assert_int_eq(sp_weights_build_random(&m, 5, &w), SP_OK);
    ck_assert_int_eq(sp_weights_build_random(&m, 5, &orig), SP_OK);
    ck_assert_int_eq(sp_weights_quantize(&w, dt), SP_OK);
    int64_t R, C, E = m.d_model, F = m.d_ff;
    sp_weight_shape(&m, SP_W_IN, &R, &C);   /* (n_experts · E, F) */
    ck_assert_int_eq(R, m.n_experts * E);
    int scaled = dt == SP_DT_INT8 || dt == SP_DT_FP8;
    int eb = sp_dtype_bytes(dt);
    void *q = malloc((size_t)(E * F * eb));
    float *scale = malloc((size_t)F * sizeof *scale);
    for (int64_t e = 0; e < m.n_experts; e++) {
        int64_t r0 = e * E + 2, r1 = e * E + 9, nr = r1 - r0;
        ck_assert_int_eq(sp_weights_block(&w, SP_W_IN, 1, r0, r1, 0, F, dt, q, scale), SP_OK);
        for (int64_t c = 0; c < F && scaled; c++) {
            float mx = 0;   /* expert e's column, before quantisation */
            for (int64_t r = 0; r < E; r++) mx = fmaxf(mx, fabsf(orig.layers[1].w_in[(e * E + r) * F + c]));
            ck_assert_float_eq(scale[c], mx / (dt == SP_DT_FP8 ? 448.0f : 127.0f));
        }
        for (int64_t r = 0; r < nr; r++)
            for (int64_t c = 0; c < F; c++) {
                int64_t i = r * F + c;
                float deq = dt == SP_DT_INT8 ? (float)((int8_t *)q)[i] * scale[c]
                            : dt == SP_DT_FP8 ? sp_kern_fp8_to_f32(((uint8_t *)q)[i]) * scale[c]
                            : dt == SP_DT_BF16 ? sp_kern_bf16_to_f32(((uint16_t *)q)[i])
                                               : sp_kern_f16_to_f32(((uint16_t *)q)[i]);
                ck_assert_msg(deq == w.layers[1].w_in[(r0 + r) * F + c], "expert %lld (%lld,%lld)", (long long)e,
                              (long long)r, (long long)c);
            }
    }
    ck_assert_int_eq(sp_weights_block(&w, SP_W_IN, 1, E - 2, E + 2, 0, F, dt, q, scale), SP_EINVAL);
    free(q);
    free(scale);
    sp_weights_free(&w);
    sp_weights_free(&orig);
}
END_TEST

/* The same per-expert blocks and scales from a MoE checkpoint opened for
 * slices (each expert's own tensor, whole columns of it for the scales) as
 * from the checkpoint read whole: tests/ref/mixtral and qwen2-moe-step2
 * (dense layers between MoE ones), every layer, expert and FFN kind. */
START_TEST(test_expert_blocks_lazy_equal_eager)
{
    static const char *const refs[] = {"mixtral", "qwen2-moe-step2"};
    sp_dtype dt = qd[_i];
    const char *top = getenv("top_srcdir");
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/tests/ref/%s", top ? top : ".", refs[k]);
        char cfg[1100];
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        sp_model m;
        sp_error err;
        ck_assert_msg(sp_model_load_file(cfg, 0, &m, &err) == SP_OK, "%s: %s", cfg, err.text);
        sp_weights eager, lazy;
        ck_assert_msg(sp_weights_load_hf(dir, &m, &eager, &err) == SP_OK, "%s: %s", dir, err.text);
        ck_assert_msg(sp_weights_open_hf(dir, &m, &lazy, &err) == SP_OK, "%s: %s", dir, err.text);
        int eb = sp_dtype_bytes(dt);
        static const sp_weight kinds[] = {SP_W_IN, SP_W_UP, SP_W_OUT, SP_W_D_IN, SP_W_D_OUT};
        for (int64_t l = 0; l < m.n_layers; l++)
            for (size_t t = 0; t < sizeof kinds / sizeof kinds[0]; t++) {
                if (!sp_weight_in_layer(&m, kinds[t], l)) continue;
                int64_t R, C;
                sp_weight_shape(&m, kinds[t], &R, &C);
                int64_t G = kinds[t] == SP_W_D_IN || kinds[t] == SP_W_D_OUT ? 1 : m.n_experts, Rg = R / G;
                for (int64_t e = 0; e < G; e++) {
                    int64_t r0 = e * Rg + 1, r1 = e * Rg + Rg - 1, n = (r1 - r0) * C;
                    char *a = malloc((size_t)(n * eb)), *b = malloc((size_t)(n * eb));
                    float *sa = calloc((size_t)C, sizeof *sa), *sb = calloc((size_t)C, sizeof *sb);
                    ck_assert_int_eq(sp_weights_block(&eager, kinds[t], l, r0, r1, 0, C, dt, a, sa), SP_OK);
                    ck_assert_int_eq(sp_weights_block(&lazy, kinds[t], l, r0, r1, 0, C, dt, b, sb), SP_OK);
                    ck_assert_msg(!memcmp(a, b, (size_t)(n * eb)) && !memcmp(sa, sb, (size_t)C * sizeof *sa),
                                  "%s %s layer %lld expert %lld", refs[k], sp_weight_name(kinds[t]), (long long)l,
                                  (long long)e);
                    free(a), free(b), free(sa), free(sb);
                }
            }
        sp_weights_free(&eager);
        sp_weights_free(&lazy);
    }
}
END_TEST

/* ---- safetensors ------------------------------------------------------------------------- */

static char tmpdir[256];

static void setup_tmp(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sp_check_weights.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmp(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* (R, C) -> (C, R) */
static float *transposed(const float *a, int64_t R, int64_t C)
{
    float *t = malloc((size_t)(R * C) * 4);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) t[c * R + r] = a[r * C + c];
    return t;
}

typedef struct st_list {
    sp_st_entry e[256];
    float *owned[256];
    char names[256][96];
    int n, no;
} st_list;

static void add(st_list *l, const char *name, const float *data, int64_t r, int64_t c, sp_dtype dt)
{
    sp_st_entry *e = &l->e[l->n];
    snprintf(l->names[l->n], sizeof l->names[0], "%s", name);
    e->name = l->names[l->n];
    e->dt = dt;
    e->ndim = r ? 2 : 1;
    e->shape[0] = r ? r : c;
    e->shape[1] = c;
    e->data = data;
    l->n++;
}

static const float *own(st_list *l, float *p) { return l->owned[l->no++] = p; }

static void free_list(st_list *l)
{
    for (int i = 0; i < l->no; i++) free(l->owned[i]);
}

static void llama_entries(st_list *l, const sp_model *m, const sp_weights *w, sp_dtype dt)
{
    int64_t E = m->d_model, F = m->d_ff, QD = m->n_heads * m->d_head, KD = m->n_kv_heads * m->d_head;
    char nm[96];
    add(l, "model.embed_tokens.weight", w->embed, m->vocab, E, dt);
    add(l, "model.norm.weight", w->final_norm, 0, E, dt);
    add(l, "lm_head.weight", w->lm_head, m->vocab, E, dt);
    for (int64_t i = 0; i < m->n_layers; i++) {
        const sp_weights_layer *L = &w->layers[i];
#define N_(s) (snprintf(nm, sizeof nm, "model.layers.%lld." s, (long long)i), nm)
        add(l, N_("input_layernorm.weight"), L->attn_norm, 0, E, dt);
        add(l, N_("post_attention_layernorm.weight"), L->ffn_norm, 0, E, dt);
        add(l, N_("self_attn.q_proj.weight"), own(l, transposed(L->wq, E, QD)), QD, E, dt);
        add(l, N_("self_attn.k_proj.weight"), own(l, transposed(L->wk, E, KD)), KD, E, dt);
        add(l, N_("self_attn.v_proj.weight"), own(l, transposed(L->wv, E, KD)), KD, E, dt);
        add(l, N_("self_attn.o_proj.weight"), own(l, transposed(L->wo, QD, E)), E, QD, dt);
        add(l, N_("mlp.gate_proj.weight"), own(l, transposed(L->w_in, E, F)), F, E, dt);
        add(l, N_("mlp.up_proj.weight"), own(l, transposed(L->w_up, E, F)), F, E, dt);
        add(l, N_("mlp.down_proj.weight"), own(l, transposed(L->w_out, F, E)), E, F, dt);
        add(l, N_("rotary_emb.inv_freq"), L->attn_norm, 0, 2, SP_DT_F32);   /* extra tensors are ignored */
#undef N_
    }
}

static void gpt2_entries(st_list *l, const sp_model *m, const sp_weights *w, const char *pre)
{
    int64_t E = m->d_model, F = m->d_ff, QD = m->n_heads * m->d_head, KD = m->n_kv_heads * m->d_head, QKV = QD + 2 * KD;
    char nm[96];
#define G_(s, ...) (snprintf(nm, sizeof nm, "%s" s, pre, __VA_ARGS__), nm)
    add(l, G_("wte.weight%s", ""), w->embed, m->vocab, E, SP_DT_F32);
    add(l, G_("wpe.weight%s", ""), w->pos, m->max_context, E, SP_DT_F32);
    add(l, G_("ln_f.weight%s", ""), w->final_norm, 0, E, SP_DT_F32);
    add(l, G_("ln_f.bias%s", ""), w->final_norm_b, 0, E, SP_DT_F32);
    for (int64_t i = 0; i < m->n_layers; i++) {
        const sp_weights_layer *L = &w->layers[i];
        long long li = (long long)i;
        float *ca = malloc((size_t)(E * QKV) * 4), *cb = malloc((size_t)QKV * 4);   // (E, 3E) fused, (3E)
        for (int64_t r = 0; r < E; r++) {
            memcpy(ca + r * QKV, L->wq + r * QD, (size_t)QD * 4);
            memcpy(ca + r * QKV + QD, L->wk + r * KD, (size_t)KD * 4);
            memcpy(ca + r * QKV + QD + KD, L->wv + r * KD, (size_t)KD * 4);
        }
        memcpy(cb, L->bq, (size_t)QD * 4);
        memcpy(cb + QD, L->bk, (size_t)KD * 4);
        memcpy(cb + QD + KD, L->bv, (size_t)KD * 4);
        add(l, G_("h.%lld.ln_1.weight", li), L->attn_norm, 0, E, SP_DT_F32);
        add(l, G_("h.%lld.ln_1.bias", li), L->attn_norm_b, 0, E, SP_DT_F32);
        add(l, G_("h.%lld.ln_2.weight", li), L->ffn_norm, 0, E, SP_DT_F32);
        add(l, G_("h.%lld.ln_2.bias", li), L->ffn_norm_b, 0, E, SP_DT_F32);
        add(l, G_("h.%lld.attn.c_attn.weight", li), own(l, ca), E, QKV, SP_DT_F32);
        add(l, G_("h.%lld.attn.c_attn.bias", li), own(l, cb), 0, QKV, SP_DT_F32);
        add(l, G_("h.%lld.attn.c_proj.weight", li), L->wo, QD, E, SP_DT_F32);
        add(l, G_("h.%lld.attn.c_proj.bias", li), L->bo, 0, E, SP_DT_F32);
        add(l, G_("h.%lld.mlp.c_fc.weight", li), L->w_in, E, F, SP_DT_F32);
        add(l, G_("h.%lld.mlp.c_fc.bias", li), L->b_in, 0, F, SP_DT_F32);
        add(l, G_("h.%lld.mlp.c_proj.weight", li), L->w_out, F, E, SP_DT_F32);
        add(l, G_("h.%lld.mlp.c_proj.bias", li), L->b_out, 0, E, SP_DT_F32);
    }
#undef G_
}

/* A checkpoint opened for slices gives the same blocks (and per-column
 * scales) as the whole checkpoint loaded, for every matrix and table. */
static void check_lazy_equals(const char *path, const sp_model *m, const sp_weights *eager)
{
    sp_weights lz;
    sp_error err;
    sp_error_init(&err);
    ck_assert_msg(sp_weights_open_hf(path, m, &lz, &err) == SP_OK, "open_hf: %s", err.text);
    ck_assert_ptr_null(lz.t[SP_W_Q]);   /* matrices stay in the file */
    static const sp_dtype dts[] = {SP_DT_F32, SP_DT_BF16, SP_DT_INT8};
    int blocks = 0;
    for (int t = 0; t < SP_W_COUNT; t++) {
        if (!eager->t[t] || !(sp_weight_is_matrix((sp_weight)t) || t == SP_W_EMBED || t == SP_W_LMHEAD || t == SP_W_POS))
            continue;
        int64_t R, C;
        sp_weight_shape(m, (sp_weight)t, &R, &C);
        int64_t cuts[3][4] = {{0, R, 0, C}, {1, R / 2 + 1, C / 3, C - 1}, {R - 1, R, 0, 2}};
        for (int64_t l = 0; l < (sp_weight_per_layer((sp_weight)t) ? m->n_layers : 1); l++)
            for (int k = 0; k < 3; k++)
                for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
                    int64_t r0 = cuts[k][0], r1 = cuts[k][1], c0 = cuts[k][2], c1 = cuts[k][3];
                    size_t n = (size_t)((r1 - r0) * (c1 - c0)) * 4;
                    unsigned char *a = calloc(n + 1, 1), *b = calloc(n + 1, 1);
                    float *sa = calloc((size_t)C + 1, 4), *sb = calloc((size_t)C + 1, 4);
                    ck_assert_int_eq(sp_weights_block(eager, (sp_weight)t, l, r0, r1, c0, c1, dts[d], a, sa), SP_OK);
                    ck_assert_int_eq(sp_weights_block(&lz, (sp_weight)t, l, r0, r1, c0, c1, dts[d], b, sb), SP_OK);
                    ck_assert_msg(!memcmp(a, b, n) && !memcmp(sa, sb, (size_t)(c1 - c0) * 4),
                                  "%s layer %lld block %d %s differs", sp_weight_name((sp_weight)t), (long long)l, k,
                                  sp_dtype_name(dts[d]));
                    free(a); free(b); free(sa); free(sb);
                    blocks++;
                }
    }
    ck_assert_int_gt(blocks, 30);
    sp_weights_free(&lz);
}

START_TEST(test_roundtrip_llama)
{
    setup_tmp();
    sp_model m = make_model(M_LLAMA);
    sp_weights w, r;
    ck_assert_int_eq(sp_weights_build_random(&m, 9, &w), SP_OK);
    st_list *l = calloc(1, sizeof *l);
    llama_entries(l, &m, &w, SP_DT_F32);
    /* two shard files, as HF writes big checkpoints */
    char p1[300], p2[300];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", tmpdir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", tmpdir);
    sp_error err;
    sp_error_init(&err);
    int half = l->n / 2;
    ck_assert_int_eq(sp_safetensors_write(p1, l->e, half, &err), SP_OK);
    ck_assert_int_eq(sp_safetensors_write(p2, l->e + half, l->n - half, &err), SP_OK);
    ck_assert_int_eq(sp_weights_load_hf(tmpdir, &m, &r, &err), SP_OK);
    ck_assert_uint_eq(r.bytes, w.bytes);
    ck_assert(memcmp(r.slab, w.slab, w.bytes) == 0);
    check_lazy_equals(tmpdir, &m, &r);
    sp_weights_free(&r);
    /* slice API: rows 2..5, cols 1..7 of q_proj, and transposed */
    sp_safetensors *st;
    ck_assert_int_eq(sp_safetensors_open(tmpdir, &st, &err), SP_OK);
    ck_assert_int_eq(sp_safetensors_count(st), l->n);
    const sp_st_tensor *t = sp_safetensors_find(st, "model.layers.1.self_attn.q_proj.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_null(sp_safetensors_find(st, "nope"));
    float sl[3 * 6], slt[6 * 3];
    ck_assert_int_eq(sp_safetensors_read_rows_cols(st, t, 2, 5, 1, 7, 0, sl, &err), SP_OK);
    ck_assert_int_eq(sp_safetensors_read_rows_cols(st, t, 2, 5, 1, 7, 1, slt, &err), SP_OK);
    int64_t QD = m.n_heads * m.d_head;
    for (int r0 = 0; r0 < 3; r0++)
        for (int c = 0; c < 6; c++) {
            /* stored (out, in): element (o, i) = wq[i][o] */
            ck_assert(sl[r0 * 6 + c] == w.layers[1].wq[(1 + c) * QD + 2 + r0]);
            ck_assert(slt[c * 3 + r0] == sl[r0 * 6 + c]);
        }
    ck_assert_int_eq(sp_safetensors_read_rows_cols(st, t, 0, t->shape[0] + 1, 0, 1, 0, sl, &err), SP_EINVAL);
    sp_safetensors_close(st);
    /* BF16 storage loads as the bf16-rounded weights */
    free_list(l);
    memset(l, 0, sizeof *l);
    unlink(p1);
    unlink(p2);
    llama_entries(l, &m, &w, SP_DT_BF16);
    snprintf(p1, sizeof p1, "%s/model.safetensors", tmpdir);
    ck_assert_int_eq(sp_safetensors_write(p1, l->e, l->n, &err), SP_OK);
    ck_assert_int_eq(sp_weights_load_hf(tmpdir, &m, &r, &err), SP_OK);
    sp_weights wq;
    ck_assert_int_eq(sp_weights_build_random(&m, 9, &wq), SP_OK);
    for (int64_t i = 0; i < (int64_t)(w.bytes / 4); i++)
        wq.slab[i] = sp_kern_bf16_to_f32(sp_kern_f32_to_bf16(wq.slab[i]));
    /* the unused inv_freq tensor was written BF16 too? no: F32, ignored */
    ck_assert(memcmp(r.slab, wq.slab, w.bytes) == 0);
    sp_weights_free(&wq);
    sp_weights_free(&r);
    /* model mismatch: wrong d_ff -> wrong shape with the tensor name */
    sp_model m2 = m;
    m2.d_ff = 41;
    ck_assert_int_eq(sp_weights_load_hf(tmpdir, &m2, &r, &err), SP_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.path, "mlp.gate_proj.weight"));
    ck_assert_ptr_nonnull(strstr(err.text, "wrong shape"));
    /* a tensor config.json does not explain (one more layer than n_layers), then
     * a bias it does not declare: refused with the file and the tensor */
    float extra[4] = {0};
    l->e[l->n] = (sp_st_entry){"model.layers.9.mlp.up_proj.weight", SP_DT_F32, 2, {2, 2}, extra};
    ck_assert_int_eq(sp_safetensors_write(p1, l->e, l->n + 1, &err), SP_OK);
    ck_assert_int_eq(sp_weights_load_hf(tmpdir, &m, &r, &err), SP_EPARSE);
    ck_assert_str_eq(err.path, "model.layers.9.mlp.up_proj.weight");
    ck_assert_ptr_nonnull(strstr(err.source, "model.safetensors"));
    ck_assert_ptr_nonnull(strstr(err.text, "not explained by config.json"));
    l->e[l->n] = (sp_st_entry){"model.layers.0.self_attn.o_proj.bias", SP_DT_F32, 1, {m.d_model}, w.slab};
    ck_assert_int_eq(sp_safetensors_write(p1, l->e, l->n + 1, &err), SP_OK);
    ck_assert_int_eq(sp_weights_load_hf(tmpdir, &m, &r, &err), SP_EPARSE);
    ck_assert_str_eq(err.path, "model.layers.0.self_attn.o_proj.bias");
    ck_assert_ptr_nonnull(strstr(err.text, "declares none"));
    free_list(l);
    free(l);
    sp_weights_free(&w);
    rm_tmp();
}
END_TEST

START_TEST(test_roundtrip_gpt2)
{
    const char *pre = _i ? "transformer." : "";
    setup_tmp();
    sp_model m = make_model(M_GPT2);
    sp_weights w, r;
    ck_assert_int_eq(sp_weights_build_random(&m, 11, &w), SP_OK);
    st_list *l = calloc(1, sizeof *l);
    gpt2_entries(l, &m, &w, pre);
    char p[300];
    snprintf(p, sizeof p, "%s/model.safetensors", tmpdir);
    sp_error err;
    ck_assert_int_eq(sp_safetensors_write(p, l->e, l->n, &err), SP_OK);
    ck_assert_int_eq(sp_weights_load_hf(p, &m, &r, &err), SP_OK);   /* a file path works too */
    check_lazy_equals(p, &m, &r);
    ck_assert(memcmp(r.slab, w.slab, w.bytes) == 0);
    sp_weights_free(&r);
    /* missing tensor: drop h.1.mlp.c_fc.bias */
    int n = 0;
    for (int i = 0; i < l->n; i++)
        if (!strstr(l->e[i].name, "h.1.mlp.c_fc.bias")) l->e[n++] = l->e[i];
    ck_assert_int_eq(sp_safetensors_write(p, l->e, n, &err), SP_OK);
    ck_assert_int_eq(sp_weights_load_hf(tmpdir, &m, &r, &err), SP_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.path, "h.1.mlp.c_fc.bias"));
    ck_assert_ptr_nonnull(strstr(err.text, "missing"));
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "c_fc.bias"));
    free_list(l);
    free(l);
    sp_weights_free(&w);
    rm_tmp();
}
END_TEST

static void write_raw(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
}

static void write_hdr(const char *path, const char *json, size_t data_bytes, uint64_t len_override)
{
    size_t hl = strlen(json);
    unsigned char *buf = calloc(1, 8 + hl + data_bytes);
    uint64_t len = len_override ? len_override : hl;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
    memcpy(buf + 8, json, hl);
    write_raw(path, buf, 8 + hl + data_bytes);
    free(buf);
}

START_TEST(test_corrupt_files)
{
    setup_tmp();
    char p[300];
    snprintf(p, sizeof p, "%s/bad.safetensors", tmpdir);
    sp_safetensors *st = NULL;
    sp_error err;
    struct { const char *json; size_t data; uint64_t len; sp_status want; const char *msg; } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1u << 30, SP_EPARSE, "header length"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", 8, 0, SP_EPARSE, "JSON invalid"},
        {"[1, 2]", 0, 0, SP_EPARSE, "not a JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, 0, SP_EPARSE, "out of range"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0, SP_EPARSE, "need"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, 0, SP_EPARSE, "shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, 0, SP_EPARSE, "shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, 0, SP_EPARSE, "out of range"},
        /* a dtype outside the format is bad input, not something unimplemented */
        {"{\"a\":{\"dtype\":\"Q4_K\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, SP_EPARSE, "unknown dtype"},
        /* data sections: overlapping, out of order with a hole, trailing bytes */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, 0, SP_EPARSE, "overlap tensor a"},
        {"{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12, 0, SP_EPARSE, "no tensor holds"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, 0, SP_EPARSE, "trailing bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_hdr(p, cases[i].json, cases[i].data, cases[i].len);
        sp_error_init(&err);
        ck_assert_int_eq(sp_safetensors_open(p, &st, &err), cases[i].want);
        ck_assert_ptr_null(st);
        ck_assert_msg(strstr(err.text, cases[i].msg), "case %zu: '%s' lacks '%s'", i, err.text, cases[i].msg);
        ck_assert_ptr_nonnull(strstr(err.source, "bad.safetensors"));
        if (strstr(cases[i].json, "\"a\"") && strstr(cases[i].msg, "range")) ck_assert_str_eq(err.path, "a");
    }
    /* too short, missing, unconvertible dtype, truncated real file */
    write_raw(p, "abc", 3);
    ck_assert_int_eq(sp_safetensors_open(p, &st, &err), SP_EPARSE);
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none.safetensors", tmpdir);
    ck_assert_int_eq(sp_safetensors_open(missing, &st, &err), SP_EIO);
    write_hdr(p, "{\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},\"__metadata__\":{\"format\":\"pt\"}}", 8, 0);
    ck_assert_int_eq(sp_safetensors_open(p, &st, &err), SP_OK);
    float f[1];
    ck_assert_int_eq(sp_safetensors_read_rows_cols(st, sp_safetensors_find(st, "i"), 0, 1, 0, 1, 0, f, &err), SP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.text, "not a weight type"));
    sp_safetensors_close(st);
    sp_model m = make_model(M_LLAMA);
    sp_weights w, r;
    ck_assert_int_eq(sp_weights_build_random(&m, 3, &w), SP_OK);
    st_list *l = calloc(1, sizeof *l);
    llama_entries(l, &m, &w, SP_DT_F32);
    ck_assert_int_eq(sp_safetensors_write(p, l->e, l->n, &err), SP_OK);
    ck_assert_int_eq(truncate(p, 8 + 200), 0);
    ck_assert_int_ne(sp_weights_load_hf(p, &m, &r, &err), SP_OK);
    ck_assert_ptr_nonnull(strstr(err.source, "bad.safetensors"));
    ck_assert_ptr_null(r.slab);
    ck_assert_int_eq(sp_safetensors_write(p, l->e, l->n, &err), SP_OK);
    struct stat sb;
    ck_assert_int_eq(stat(p, &sb), 0);
    ck_assert_int_eq(truncate(p, sb.st_size - 3), 0);
    ck_assert_int_eq(sp_weights_load_hf(p, &m, &r, &err), SP_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.text, "truncated"));
    /* a directory without checkpoints; an unknown naming */
    unlink(p);
    ck_assert_int_eq(sp_weights_load_hf(tmpdir, &m, &r, &err), SP_EIO);
    write_hdr(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, 0);
    ck_assert_int_eq(sp_weights_load_hf(tmpdir, &m, &r, &err), SP_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.text, "naming"));
    free_list(l);
    free(l);
    sp_weights_free(&w);
    rm_tmp();
}
END_TEST

/* tables round-tripped through bf16 / f16 hold exactly representable values;
 * layer matrices are untouched; int8 is refused for tables */
START_TEST(test_round_tables)
{
    sp_dtype dt = _i ? SP_DT_F16 : SP_DT_BF16;
    sp_model m = make_model(M_GPT2);   /* learned positions, tied head */
    m.tied_embeddings = 0;
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 7, &w), SP_OK);
    float wq0 = w.layers[0].wq[3];
    ck_assert_int_eq(sp_weights_round_tables(&w, dt), SP_OK);
    float *tabs[3] = {w.embed, w.lm_head, w.pos};
    int64_t n[3] = {m.vocab * m.d_model, m.vocab * m.d_model, m.max_context * m.d_model};
    for (int t = 0; t < 3; t++)
        for (int64_t i = 0; i < n[t]; i++) {
            float x = tabs[t][i];
            float back = dt == SP_DT_BF16 ? sp_kern_bf16_to_f32(sp_kern_f32_to_bf16(x)) : sp_kern_f16_to_f32(sp_kern_f32_to_f16(x));
            ck_assert_msg(back == x, "table %d element %lld not representable", t, (long long)i);
        }
    ck_assert(w.layers[0].wq[3] == wq0);
    ck_assert_int_eq(sp_weights_round_tables(&w, SP_DT_INT8), SP_EINVAL);
    sp_weights_free(&w);
}
END_TEST

static Suite *weights_suite(void)
{
    Suite *s = suite_create("weights");
    TCase *tc = tcase_create("weights");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_sizes_equal_alloc, 0, M_COUNT);
    tcase_add_loop_test(tc, test_quantize_blocks, 0, (int)(sizeof qd / sizeof *qd));
    tcase_add_loop_test(tc, test_quantize_expert_blocks, 0, (int)(sizeof qd / sizeof *qd));
    tcase_add_test(tc, test_sizes_moe_every);
    tcase_add_loop_test(tc, test_expert_blocks_lazy_equal_eager, 0, (int)(sizeof qd / sizeof *qd));
    tcase_add_test(tc, test_roundtrip_llama);
    tcase_add_loop_test(tc, test_roundtrip_gpt2, 0, 2);
    tcase_add_test(tc, test_corrupt_files);
    tcase_add_loop_test(tc, test_round_tables, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(weights_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
