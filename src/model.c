/* model.c: model descriptions in shardplan's JSON format, validation, and the
 * one place derived quantities (parameters, bytes, FLOPs) are computed. */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "spi_common.h"
#include "spi_json.h"
#include "sp_model.h"
#include "spi_model.h"

static const char *const ffn_names[] = {"gelu", "swiglu"};
static const char *const block_names[] = {"serial", "parallel", "parallel2"};
static const char *const norm_names[] = {"layernorm", "rmsnorm"};
static const char *const pos_names[] = {"learned", "rope", "alibi"};
static const char *const act_names[] = {"auto", "gelu_tanh", "gelu", "silu", "relu"};
static const char *const rope_scaling_names[] = {"none", "linear", "dynamic", "llama3", "yarn"};
static const char *const rope_style_names[] = {"half", "interleaved"};
static const char *const router_names[] = {"topk_renorm", "topk"};
static_assert(SPI_ARRAY_LEN(ffn_names) == SP_FFN_COUNT, "one name per sp_ffn_kind");
static_assert(SPI_ARRAY_LEN(block_names) == SP_BLOCK_COUNT, "one name per sp_block_kind");
static_assert(SPI_ARRAY_LEN(norm_names) == SP_NORM_COUNT, "one name per sp_norm_kind");
static_assert(SPI_ARRAY_LEN(pos_names) == SP_POS_COUNT, "one name per sp_pos_kind");
static_assert(SPI_ARRAY_LEN(act_names) == SP_ACT_COUNT, "one name per sp_act_kind");
static_assert(SPI_ARRAY_LEN(rope_scaling_names) == SP_ROPE_COUNT, "one name per sp_rope_scaling");
static_assert(SPI_ARRAY_LEN(rope_style_names) == SP_ROPE_STYLE_COUNT, "one name per sp_rope_style");
static_assert(SPI_ARRAY_LEN(router_names) == SP_ROUTER_COUNT, "one name per sp_router_kind");

const char *sp_ffn_name(sp_ffn_kind k) { return (unsigned)k < SP_FFN_COUNT ? ffn_names[k] : "?"; }
const char *sp_block_name(sp_block_kind k) { return (unsigned)k < SP_BLOCK_COUNT ? block_names[k] : "?"; }
const char *sp_norm_name(sp_norm_kind k) { return (unsigned)k < SP_NORM_COUNT ? norm_names[k] : "?"; }
const char *sp_pos_name(sp_pos_kind k) { return (unsigned)k < SP_POS_COUNT ? pos_names[k] : "?"; }
const char *sp_act_name(sp_act_kind k) { return (unsigned)k < SP_ACT_COUNT ? act_names[k] : "?"; }
const char *sp_rope_scaling_name(sp_rope_scaling k) { return (unsigned)k < SP_ROPE_COUNT ? rope_scaling_names[k] : "?"; }
const char *sp_rope_style_name(sp_rope_style k) { return (unsigned)k < SP_ROPE_STYLE_COUNT ? rope_style_names[k] : "?"; }
const char *sp_router_name(sp_router_kind k) { return (unsigned)k < SP_ROUTER_COUNT ? router_names[k] : "?"; }

void sp_model_init(sp_model *m)
{
    memset(m, 0, sizeof *m);
    m->rope_theta = 10000.0;
    m->norm_eps = 1e-5;
    /* transformers' defaults for the rope_scaling parameters a config may omit */
    m->rope_factor = 1.0;
    m->rope_low_freq_factor = 1.0;
    m->rope_high_freq_factor = 4.0;
    m->rope_beta_fast = 32.0;
    m->rope_beta_slow = 1.0;
}

int sp_model_ffn_matrices(const sp_model *m) { return m->ffn == SP_FFN_SWIGLU ? 3 : 2; }

sp_act_kind sp_model_act(const sp_model *m)
{
    if (m->act != SP_ACT_AUTO) return m->act;
    return m->ffn == SP_FFN_SWIGLU ? SP_ACT_SILU : SP_ACT_GELU_TANH;
}

int sp_model_has_bias(const sp_model *m, int group) { return (m->bias & group) != 0; }

int64_t sp_model_rotary_dims(const sp_model *m) { return m->rotary_dims > 0 ? m->rotary_dims : m->d_head; }

/* ---- weight tensors (sp_weight) ---- */
static const char *const weight_names[] = {
    "none", "embed", "pos", "lm_head", "norm_f", "norm_f_b", "norm1", "norm1_b", "wq", "bq", "wk", "bk",
    "wv", "bv", "wo", "bo", "norm2", "norm2_b", "w_in", "b_in", "w_up", "b_up", "w_out", "b_out", "router",
    "sh_in", "sh_up", "sh_out", "sh_gate", "d_in", "d_up", "d_out"};
static_assert(SPI_ARRAY_LEN(weight_names) == SP_W_COUNT, "one name per sp_weight");
/* the bias of each kind that has one (matrices: their bias; gains: the LayerNorm bias) */
static const sp_weight weight_bias[SP_W_COUNT] = {
    [SP_W_NORMF] = SP_W_NORMF_B, [SP_W_NORM1] = SP_W_NORM1_B, [SP_W_NORM2] = SP_W_NORM2_B,
    [SP_W_Q] = SP_W_BQ, [SP_W_K] = SP_W_BK, [SP_W_V] = SP_W_BV, [SP_W_O] = SP_W_BO,
    [SP_W_IN] = SP_W_B_IN, [SP_W_UP] = SP_W_B_UP, [SP_W_OUT] = SP_W_B_OUT};

const char *sp_weight_name(sp_weight w) { return (unsigned)w < SP_W_COUNT ? weight_names[w] : "?"; }

int sp_weight_is_matrix(sp_weight w)
{
    return w == SP_W_Q || w == SP_W_K || w == SP_W_V || w == SP_W_O || w == SP_W_IN || w == SP_W_UP || w == SP_W_OUT ||
           w == SP_W_ROUTER || w == SP_W_SH_IN || w == SP_W_SH_UP || w == SP_W_SH_OUT || w == SP_W_SH_GATE ||
           w == SP_W_D_IN || w == SP_W_D_UP || w == SP_W_D_OUT;
}

int64_t sp_model_dense_ff(const sp_model *m)
{
    if (m->n_experts <= 0 || m->moe_every <= 1) return 0;
    return m->dense_d_ff > 0 ? m->dense_d_ff : m->d_ff;
}

int sp_model_layer_is_moe(const sp_model *m, int64_t layer)
{
    return m->n_experts > 0 && (layer + 1) % (m->moe_every > 0 ? m->moe_every : 1) == 0;
}

int sp_weight_layer_kind(sp_weight w)
{
    if (w == SP_W_IN || w == SP_W_UP || w == SP_W_OUT || w == SP_W_B_IN || w == SP_W_B_UP || w == SP_W_B_OUT ||
        w == SP_W_ROUTER || w == SP_W_SH_IN || w == SP_W_SH_UP || w == SP_W_SH_OUT || w == SP_W_SH_GATE)
        return 1;
    return w == SP_W_D_IN || w == SP_W_D_UP || w == SP_W_D_OUT ? 2 : 0;
}

/* MoE layers among layers 0 .. n-1: (g + 1) % k == 0 */
static int64_t moe_layers_below(const sp_model *m, int64_t n) { return n / (m->moe_every > 0 ? m->moe_every : 1); }

int64_t sp_weight_layers(const sp_model *m, sp_weight w) { return sp_weight_layer_slot(m, w, m->n_layers); }

int64_t sp_weight_layer_slot(const sp_model *m, sp_weight w, int64_t layer)
{
    int where = m->n_experts > 0 && m->moe_every > 1 ? sp_weight_layer_kind(w) : 0;
    return where == 0 ? layer : where == 1 ? moe_layers_below(m, layer) : layer - moe_layers_below(m, layer);
}

static const char *const wkind_names[] = {"attn", "ffn"};
static_assert(SPI_ARRAY_LEN(wkind_names) == SP_WKIND_COUNT, "one name per sp_wkind");
static_assert(SP_W_NORM2 == SP_W_BO + 1, "the attention's per-layer weights come before the FFN's");
const char *sp_wkind_name(sp_wkind k) { return (unsigned)k < SP_WKIND_COUNT ? wkind_names[k] : "?"; }
sp_wkind sp_weight_wkind(sp_weight w) { return w < SP_W_NORM2 ? SP_WKIND_ATTN : SP_WKIND_FFN; }

int sp_weight_in_layer(const sp_model *m, sp_weight w, int64_t layer)
{
    if (!sp_weight_per_layer(w) || !sp_weight_present(m, w)) return 0;
    int where = m->n_experts > 0 ? sp_weight_layer_kind(w) : 0;
    return where == 0 ? 1 : where == 1 ? sp_model_layer_is_moe(m, layer) : !sp_model_layer_is_moe(m, layer);
}

int64_t sp_model_shared_ff(const sp_model *m)
{
    if (m->n_experts <= 0 || m->n_shared_experts <= 0) return 0;
    return m->n_shared_experts * (m->shared_d_ff > 0 ? m->shared_d_ff : m->d_ff);
}

int sp_weight_per_layer(sp_weight w) { return w >= SP_W_FIRST_LAYER && w < SP_W_COUNT; }

sp_weight sp_weight_bias(sp_weight w) { return (unsigned)w < SP_W_COUNT ? weight_bias[w] : SP_W_NONE; }

int sp_weight_present(const sp_model *m, sp_weight w)
{
    int ln = m->norm == SP_NORM_LAYERNORM, norm2 = m->block != SP_BLOCK_PARALLEL, swiglu = m->ffn == SP_FFN_SWIGLU;
    switch (w) {
    case SP_W_NONE: return 0;
    case SP_W_POS: return m->positions == SP_POS_LEARNED;
    case SP_W_LMHEAD: return !m->tied_embeddings;
    case SP_W_NORMF_B: case SP_W_NORM1_B: return ln;
    case SP_W_BQ: case SP_W_BK: case SP_W_BV: return sp_model_has_bias(m, SP_BIAS_QKV);
    case SP_W_BO: return sp_model_has_bias(m, SP_BIAS_O);
    case SP_W_B_IN: case SP_W_B_OUT: return sp_model_has_bias(m, SP_BIAS_FFN);
    case SP_W_NORM2: return norm2;
    case SP_W_NORM2_B: return norm2 && ln;
    case SP_W_UP: return swiglu;
    case SP_W_B_UP: return swiglu && sp_model_has_bias(m, SP_BIAS_FFN);
    case SP_W_ROUTER: return m->n_experts > 0;
    case SP_W_SH_IN: case SP_W_SH_OUT: return sp_model_shared_ff(m) > 0;
    case SP_W_SH_UP: return swiglu && sp_model_shared_ff(m) > 0;
    case SP_W_SH_GATE: return sp_model_shared_ff(m) > 0 && m->shared_expert_gate;
    case SP_W_D_IN: case SP_W_D_OUT: return sp_model_dense_ff(m) > 0;
    case SP_W_D_UP: return swiglu && sp_model_dense_ff(m) > 0;
    default: return (unsigned)w < SP_W_COUNT;
    }
}

void sp_weight_shape(const sp_model *m, sp_weight w, int64_t *rows, int64_t *cols)
{
    int64_t E = m->d_model, F = m->d_ff, QD = m->n_heads * m->d_head, KD = m->n_kv_heads * m->d_head;
    int64_t r = 1, c = 0;
    switch (w) {
    case SP_W_NONE: r = 0; break;
    case SP_W_EMBED: case SP_W_LMHEAD: r = m->vocab; c = E; break;
    case SP_W_POS: r = m->max_context; c = E; break;
    case SP_W_Q: r = E; c = QD; break;
    case SP_W_K: case SP_W_V: r = E; c = KD; break;
    case SP_W_O: r = QD; c = E; break;
    /* a MoE layer's experts stacked along the rows: expert e's matrix is rows [e·E, (e+1)·E) */
    case SP_W_IN: case SP_W_UP: r = E * (m->n_experts > 0 ? m->n_experts : 1); c = F; break;
    case SP_W_OUT: r = F * (m->n_experts > 0 ? m->n_experts : 1); c = E; break;
    case SP_W_ROUTER: r = E; c = m->n_experts; break;
    case SP_W_SH_IN: case SP_W_SH_UP: r = E; c = sp_model_shared_ff(m); break;
    case SP_W_SH_OUT: r = sp_model_shared_ff(m); c = E; break;
    case SP_W_SH_GATE: r = E; c = 1; break;
    case SP_W_D_IN: case SP_W_D_UP: r = E; c = sp_model_dense_ff(m); break;
    case SP_W_D_OUT: r = sp_model_dense_ff(m); c = E; break;
    case SP_W_BQ: c = QD; break;
    case SP_W_BK: case SP_W_BV: c = KD; break;
    case SP_W_B_IN: case SP_W_B_UP: c = F; break;
    default: c = E; break;   /* norms and E-wide biases */
    }
    *rows = r;
    *cols = c;
}

/* ---- checked arithmetic (spi_ckd.h), remembering the field to blame ---- */
typedef spi_ckd ck;

static int64_t ck_mul(ck *c, const char *path, const char *what, int64_t a, int64_t b)
{
    int was = c->overflow;
    int64_t r = spi_ck_mul(c, what, a, b);
    if (!was && c->overflow) c->path = path;
    return r;
}

static int64_t ck_add(ck *c, const char *path, const char *what, int64_t a, int64_t b)
{
    int was = c->overflow;
    int64_t r = spi_ck_add(c, what, a, b);
    if (!was && c->overflow) c->path = path;
    return r;
}

/* Everything derived, in checked arithmetic.  Counting conventions (doc/formats.md):
 *  attention: Q (E x H*D), K and V (E x KVH*D each), O (H*D x E); biases H*D + 2*KVH*D (qkv)
 *             and E (o).
 *  ffn: 2 (GELU) or 3 (SwiGLU) E x F matrices; biases (ffn) F + E (GELU) or 2F + E (SwiGLU);
 *       MoE layers (every moe_every-th) hold n_experts of them plus an E x n_experts router,
 *       top_k of them active per token, and shared experts: 2 or 3 E x Fs matrices
 *       (Fs = sp_model_shared_ff) and an E-wide gate (shared_expert_gate), always active.
 *  norms: one per layer for a parallel block, two for serial, plus the final one;
 *         RMSNorm has a gain (E), LayerNorm gain and bias (2E).
 *  embedding: V x E, + max_context x E for learned positions, + V x E for an untied head. */
static void derive_ck(const sp_model *m, int64_t context, sp_model_stats *s, ck *c)
{
    memset(s, 0, sizeof *s);
    const int64_t L = m->n_layers, E = m->d_model, F = m->d_ff, H = m->n_heads, KVH = m->n_kv_heads;
    const int64_t D = m->d_head, V = m->vocab;

    int64_t hd = ck_mul(c, "/d_head", "n_heads * d_head", H, D);
    int64_t kvd = ck_mul(c, "/d_head", "n_kv_heads * d_head", KVH, D);
    int64_t attn = ck_mul(c, "/d_model", "d_model * n_heads * d_head", E, hd);
    attn = ck_mul(c, "/d_model", "2 * d_model * n_heads * d_head", attn, 2);
    attn = ck_add(c, "/d_model", "attention parameters", attn,
                  ck_mul(c, "/d_model", "2 * d_model * n_kv_heads * d_head", ck_mul(c, "/d_model", "", E, kvd), 2));
    if (m->bias & SP_BIAS_QKV)
        attn = ck_add(c, "/d_model", "attention biases", attn, ck_add(c, "/d_model", "", hd, ck_mul(c, "/d_model", "", kvd, 2)));
    if (m->bias & SP_BIAS_O) attn = ck_add(c, "/d_model", "attention biases", attn, E);

    int mats = sp_model_ffn_matrices(m);
    int64_t expert = ck_mul(c, "/d_ff", "d_model * d_ff * matrices", ck_mul(c, "/d_ff", "d_model * d_ff", E, F), mats);
    if (m->bias & SP_BIAS_FFN) expert = ck_add(c, "/d_ff", "ffn biases", expert, ck_add(c, "/d_ff", "", ck_mul(c, "/d_ff", "", F, mats - 1), E));

    int64_t n_moe = 0, ffn_moe = 0, ffn_moe_active = 0;
    if (m->n_experts > 0) {
        int64_t every = m->moe_every > 0 ? m->moe_every : 1;
        n_moe = L / every;
        int64_t router = ck_mul(c, "/n_experts", "d_model * n_experts", E, m->n_experts);
        int64_t fs = ck_mul(c, "/shared_d_ff", "n_shared_experts * shared_d_ff", m->n_shared_experts,
                            m->shared_d_ff > 0 ? m->shared_d_ff : F);
        int64_t shared = ck_mul(c, "/shared_d_ff", "shared expert parameters", ck_mul(c, "/shared_d_ff", "", E, fs), mats);
        if (m->shared_expert_gate) shared = ck_add(c, "/shared_expert_gate", "shared expert gate", shared, E);
        router = ck_add(c, "/n_shared_experts", "router and shared experts", router, shared);
        ffn_moe = ck_add(c, "/n_experts", "expert parameters",
                         ck_mul(c, "/n_experts", "n_experts * expert size", expert, m->n_experts), router);
        ffn_moe_active = ck_add(c, "/top_k", "active expert parameters",
                                ck_mul(c, "/top_k", "top_k * expert size", expert, m->top_k), router);
    }
    int64_t n_dense = L - n_moe;
    if (m->n_experts > 0 && n_dense > 0) {
        /* the dense layers between MoE layers: one FFN of sp_model_dense_ff (no biases: refused with experts) */
        int64_t Fd = m->dense_d_ff > 0 ? m->dense_d_ff : F;
        expert = ck_mul(c, "/dense_d_ff", "d_model * dense_d_ff * matrices", ck_mul(c, "/dense_d_ff", "d_model * dense_d_ff", E, Fd), mats);
    }

    int64_t norm1 = m->norm == SP_NORM_LAYERNORM ? ck_mul(c, "/d_model", "", E, 2) : E;
    int64_t norms_layer = ck_mul(c, "/d_model", "", norm1, m->block == SP_BLOCK_PARALLEL ? 1 : 2);

    int64_t tok = ck_mul(c, "/vocab", "vocab * d_model", V, E);
    int64_t pos = m->positions == SP_POS_LEARNED ? ck_mul(c, "/max_context", "max_context * d_model", m->max_context, E) : 0;
    int64_t emb = ck_add(c, "/vocab", "embedding parameters", tok, pos);
    if (!m->tied_embeddings) emb = ck_add(c, "/vocab", "embedding and head parameters", emb, tok);

    s->params_embedding = emb;
    s->params_attention = ck_mul(c, "/n_layers", "n_layers * attention parameters", L, attn);
    int64_t ffn_dense_all = ck_mul(c, "/n_layers", "n_layers * d_model * d_ff * matrices", n_dense, expert);
    int64_t ffn_moe_all = ck_mul(c, "/n_layers", "n_layers * MoE layer parameters", n_moe, ffn_moe);
    s->params_ffn = ck_add(c, "/n_layers", "ffn parameters", ffn_dense_all, ffn_moe_all);
    s->params_norm = ck_add(c, "/n_layers", "norm parameters", ck_mul(c, "/n_layers", "", L, norms_layer), norm1);
    int64_t total = ck_add(c, "/n_layers", "total parameters", emb, s->params_attention);
    total = ck_add(c, "/n_layers", "total parameters", total, s->params_ffn);
    s->params_total = ck_add(c, "/n_layers", "total parameters", total, s->params_norm);
    int64_t ffn_active = ck_add(c, "/n_layers", "active ffn parameters", ffn_dense_all,
                                ck_mul(c, "/n_layers", "", n_moe, ffn_moe_active));
    s->params_active = s->params_total - s->params_ffn + ffn_active;
    /* the largest layer: a MoE layer when there is one */
    s->params_per_layer = ck_add(c, "/n_layers", "", ck_add(c, "/n_layers", "", attn, n_moe ? ffn_moe : expert), norms_layer);

    s->weight_bytes_bf16 = ck_mul(c, "/n_layers", "total parameters * 2 bytes", s->params_total, 2);
    s->weight_bytes_int8 = s->params_total;
    s->weight_bytes_fp8 = s->params_total;
    s->kv_bytes_per_token = ck_mul(c, "/n_layers", "2 * n_layers * n_kv_heads * d_head * 2",
                                   ck_mul(c, "/n_layers", "", L, kvd), 4);
    /* matmul weights touched per token: active minus norms and the lookup table(s),
     * plus the LM head (which is the lookup table again when tied) */
    int64_t mm = s->params_active - s->params_norm - emb + tok;
    s->matmul_flops_per_token = ck_mul(c, "/n_layers", "2 * active parameters", mm, 2);
    s->context = context;
    s->attention_flops_per_token =
        ck_mul(c, "/max_context", "4 * n_layers * n_heads * d_head * context",
               ck_mul(c, "/n_layers", "", ck_mul(c, "/n_layers", "", L, hd), context), 4);
}

static sp_status vfail(const char *source, sp_error *err, const char *path, const char *text)
{
    return spi_error_set(err, SP_EINVAL, source, 0, 0, path, "%s", text);
}

sp_status spi_model_validate_src(const sp_model *m, const char *source, sp_error *err)
{
    char t[256];
    if (!m) return spi_error_set(err, SP_EINVAL, source, 0, 0, "", "no model");
    struct { const char *path; int64_t v; } pos[] = {
        {"/n_layers", m->n_layers}, {"/d_model", m->d_model}, {"/d_ff", m->d_ff},
        {"/n_heads", m->n_heads}, {"/n_kv_heads", m->n_kv_heads}, {"/d_head", m->d_head},
        {"/vocab", m->vocab}, {"/max_context", m->max_context},
    };
    for (size_t i = 0; i < SPI_ARRAY_LEN(pos); i++)
        if (pos[i].v <= 0) {
            snprintf(t, sizeof t, "must be > 0, got %lld", (long long)pos[i].v);
            return vfail(source, err, pos[i].path, t);
        }
    /* Upper bounds far above any published model, low enough that every size
     * the lowering derives from them and a request's shape (batch x tokens x
     * width x bytes) is a checked int64 product rather than an input that
     * cannot be represented at all. */
    struct { const char *path; int64_t v, max; } hi[] = {
        {"/n_layers", m->n_layers, 1 << 16}, {"/d_model", m->d_model, 1 << 20}, {"/d_ff", m->d_ff, 1 << 24},
        {"/n_heads", m->n_heads, 1 << 16}, {"/d_head", m->d_head, 1 << 16}, {"/vocab", m->vocab, 1 << 27},
        {"/max_context", m->max_context, INT64_C(1) << 32}, {"/n_experts", m->n_experts, 1 << 16},
    };
    for (size_t i = 0; i < SPI_ARRAY_LEN(hi); i++)
        if (hi[i].v > hi[i].max) {
            snprintf(t, sizeof t, "too large: at most %lld, got %lld", (long long)hi[i].max, (long long)hi[i].v);
            return vfail(source, err, hi[i].path, t);
        }
    if (m->n_kv_heads > m->n_heads || m->n_heads % m->n_kv_heads) {
        snprintf(t, sizeof t, "n_heads (%lld) must be a multiple of n_kv_heads (%lld)", (long long)m->n_heads,
                 (long long)m->n_kv_heads);
        return vfail(source, err, "/n_kv_heads", t);
    }
    if ((unsigned)m->ffn >= SP_FFN_COUNT) return vfail(source, err, "/ffn", "must be one of gelu, swiglu");
    if ((unsigned)m->block >= SP_BLOCK_COUNT) return vfail(source, err, "/block", "must be one of serial, parallel, parallel2");
    if ((unsigned)m->norm >= SP_NORM_COUNT) return vfail(source, err, "/norm", "must be one of layernorm, rmsnorm");
    if ((unsigned)m->positions >= SP_POS_COUNT) return vfail(source, err, "/positions", "must be one of learned, rope, alibi");
    if ((unsigned)m->act >= SP_ACT_COUNT) return vfail(source, err, "/act", "must be one of gelu_tanh, gelu, silu, relu");
    if (m->bias & ~SP_BIAS_ALL) return vfail(source, err, "/bias", "unknown bias group");
    if ((unsigned)m->rope_style >= SP_ROPE_STYLE_COUNT) return vfail(source, err, "/rope_style", "must be half or interleaved");
    if (m->rotary_dims < 0 || m->rotary_dims % 2 || m->rotary_dims > m->d_head) {
        snprintf(t, sizeof t, "must be an even number in [2, d_head = %lld] (0: d_head), got %lld", (long long)m->d_head,
                 (long long)m->rotary_dims);
        return vfail(source, err, "/rotary_dims", t);
    }
    if (m->sliding_window < 0) return vfail(source, err, "/sliding_window", "must be >= 0 (0: no window)");
    if ((unsigned)m->rope_scaling >= SP_ROPE_COUNT)
        return vfail(source, err, "/rope_scaling/rope_type", "must be one of none, linear, dynamic, llama3, yarn");
    if (m->rope_scaling != SP_ROPE_NONE) {
        if (!(m->rope_factor > 0) || !isfinite(m->rope_factor)) return vfail(source, err, "/rope_scaling/factor", "must be > 0");
        if (m->rope_scaling != SP_ROPE_LINEAR && m->rope_orig_context <= 0)
            return vfail(source, err, "/rope_scaling/original_max_position_embeddings", "must be > 0");
        if (m->rope_scaling == SP_ROPE_LLAMA3 && !(m->rope_high_freq_factor > m->rope_low_freq_factor && m->rope_low_freq_factor > 0))
            return vfail(source, err, "/rope_scaling/high_freq_factor", "must exceed low_freq_factor (> 0)");
        if (m->rope_scaling == SP_ROPE_YARN && !(m->rope_beta_fast > m->rope_beta_slow && m->rope_beta_slow > 0))
            return vfail(source, err, "/rope_scaling/beta_fast", "must exceed beta_slow (> 0)");
        if (m->rope_scaling == SP_ROPE_YARN && (m->rope_attn_factor < 0 || !isfinite(m->rope_attn_factor)))
            return vfail(source, err, "/rope_scaling/attention_factor", "must be > 0 (0: 0.1 ln(factor) + 1)");
    }
    if (!(m->rope_theta > 0) || !isfinite(m->rope_theta)) return vfail(source, err, "/rope_theta", "must be > 0");
    if (!(m->norm_eps > 0) || !isfinite(m->norm_eps)) return vfail(source, err, "/norm_eps", "must be > 0");
    if (m->n_experts < 0) return vfail(source, err, "/n_experts", "must be >= 0 (0 means dense)");
    if (m->n_experts > 0) {
        if (m->top_k < 1 || m->top_k > m->n_experts) {
            snprintf(t, sizeof t, "must be between 1 and n_experts (%lld), got %lld", (long long)m->n_experts,
                     (long long)m->top_k);
            return vfail(source, err, "/top_k", t);
        }
        if (m->n_shared_experts < 0 || m->n_shared_experts > m->n_experts)
            return vfail(source, err, "/n_shared_experts", "must be between 0 and n_experts");
        if (m->shared_d_ff < 0) return vfail(source, err, "/shared_d_ff", "must be >= 0 (0 means d_ff)");
        if ((m->shared_d_ff > 0 || m->shared_expert_gate) && m->n_shared_experts == 0)
            return vfail(source, err, m->shared_d_ff > 0 ? "/shared_d_ff" : "/shared_expert_gate",
                         "describes shared experts, but n_shared_experts is 0");
        if ((unsigned)m->router >= SP_ROUTER_COUNT) return vfail(source, err, "/router", "must be topk_renorm or topk");
        if (!(m->router_skew >= 0) || !isfinite(m->router_skew) || m->router_skew > 16)
            return vfail(source, err, "/router_skew", "must be in [0, 16] (0: uniform router)");
        if (m->moe_every < 1 || m->moe_every > m->n_layers) {
            snprintf(t, sizeof t, "must be between 1 and n_layers (%lld), got %lld", (long long)m->n_layers,
                     (long long)m->moe_every);
            return vfail(source, err, "/moe_every", t);
        }
        if (m->dense_d_ff < 0) return vfail(source, err, "/dense_d_ff", "must be >= 0 (0 means d_ff)");
        if (m->dense_d_ff > 0 && m->moe_every == 1)
            return vfail(source, err, "/dense_d_ff", "describes dense layers, but moe_every is 1 (every layer is MoE)");
    }
    if (!memchr(m->name, '\0', sizeof m->name)) return vfail(source, err, "/name", "not terminated");
    sp_model_stats st;
    ck c = SPI_CKD_INIT;
    derive_ck(m, m->max_context, &st, &c);
    if (c.overflow) {
        snprintf(t, sizeof t, "too large: %s overflows 64 bits", c.what && c.what[0] ? c.what : "a derived size");
        return vfail(source, err, c.path, t);
    }
    return SP_OK;
}

sp_status sp_model_validate(const sp_model *m, sp_error *err) { return spi_model_validate_src(m, NULL, err); }

sp_status sp_model_derive(const sp_model *m, int64_t context, sp_model_stats *out)
{
    if (!m || !out) return spi_fail(SP_EINVAL, "sp_model_derive: NULL argument");
    if (context < 0) return spi_fail(SP_EINVAL, "sp_model_derive: context %lld < 0", (long long)context);
    SP_CHECK(sp_model_validate(m, NULL));
    if (context == 0) context = m->max_context;
    ck c = SPI_CKD_INIT;
    derive_ck(m, context, out, &c);
    if (c.overflow) return spi_fail(SP_EINVAL, "model %s: %s overflows 64 bits at context %lld", m->name, c.what,
                                    (long long)context);
    return SP_OK;
}

/* ---- shardplan's own format ---- */
static const char *const model_keys[] = {
    "name", "n_layers", "d_model", "d_ff", "n_heads", "n_kv_heads", "d_head", "vocab", "ffn", "block",
    "norm", "positions", "tied_embeddings", "bias", "max_context", "rope_theta", "norm_eps",
    "n_experts", "top_k", "moe_every", "dense_d_ff", "n_shared_experts", "shared_d_ff", "shared_expert_gate", "router", "router_skew", "act", "rotary_dims", "rope_style", "rope_scaling", "sliding_window", NULL};
static const char *const rope_scaling_keys[] = {
    "rope_type", "factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor", "beta_fast",
    "beta_slow", "attention_factor", NULL};
static const char *const bias_groups[] = {"qkv", "o", "ffn"};

const char *const *spi_model_keys(void) { return model_keys; }
const char *const *spi_model_rope_scaling_keys(void) { return rope_scaling_keys; }

/* "bias": true (every linear layer), false, or a list of groups ["qkv", "o", "ffn"] */
static sp_status get_bias(const spi_jctx *c, const json_t *r, int *out)
{
    const json_t *b = json_object_get(r, "bias");
    if (!json_is_array(b)) {
        int all = 0;
        SP_CHECK(spi_json_get_bool(c, "", r, "bias", 1, &all));
        *out = all ? SP_BIAS_ALL : 0;
        return SP_OK;
    }
    *out = 0;
    size_t i;
    const json_t *g;
    json_array_foreach(b, i, g) {
        size_t k = 0;
        while (k < SPI_ARRAY_LEN(bias_groups) && !(json_is_string(g) && !strcmp(json_string_value(g), bias_groups[k]))) k++;
        if (k == SPI_ARRAY_LEN(bias_groups))
            return spi_json_fail(c, SP_EINVAL, "/bias", NULL, "element %zu: must be one of qkv, o, ffn", i);
        *out |= 1 << k;
    }
    return SP_OK;
}

static sp_status get_rope_scaling(const spi_jctx *c, const json_t *r, sp_model *m)
{
    json_t *o = NULL;
    int v = 0;
    SP_CHECK(spi_json_get_child(c, "", r, "rope_scaling", 0, JSON_OBJECT, &o));
    if (!o) return SP_OK;
    SP_CHECK(spi_json_check_keys(c, "/rope_scaling", o, rope_scaling_keys));
    SP_CHECK(spi_json_get_enum(c, "/rope_scaling", o, "rope_type", 1, rope_scaling_names, SP_ROPE_COUNT, &v));
    m->rope_scaling = (sp_rope_scaling)v;
    if (m->rope_scaling == SP_ROPE_NONE) return SP_OK;
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "factor", 1, 1, 0, HUGE_VAL, "number > 0", &m->rope_factor));
    SP_CHECK(spi_json_get_int(c, "/rope_scaling", o, "original_max_position_embeddings", m->rope_scaling != SP_ROPE_LINEAR,
                              1, INT64_MAX, "integer > 0", &m->rope_orig_context));
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "low_freq_factor", 0, 1, 0, HUGE_VAL, "number > 0", &m->rope_low_freq_factor));
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "high_freq_factor", 0, 1, 0, HUGE_VAL, "number > 0", &m->rope_high_freq_factor));
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "beta_fast", 0, 1, 0, HUGE_VAL, "number > 0", &m->rope_beta_fast));
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "beta_slow", 0, 1, 0, HUGE_VAL, "number > 0", &m->rope_beta_slow));
    SP_CHECK(spi_json_get_num(c, "/rope_scaling", o, "attention_factor", 0, 1, 0, HUGE_VAL, "number > 0", &m->rope_attn_factor));
    return SP_OK;
}

static sp_status model_from_own(const spi_jctx *c, const json_t *r, sp_model *m)
{
    const int64_t BIG = INT64_MAX;
    int v;
    SP_CHECK(spi_json_check_keys(c, "", r, model_keys));
    SP_CHECK(spi_json_get_str(c, "", r, "name", 1, m->name, sizeof m->name));
    SP_CHECK(spi_json_get_int(c, "", r, "n_layers", 1, 1, BIG, "integer > 0", &m->n_layers));
    SP_CHECK(spi_json_get_int(c, "", r, "d_model", 1, 1, BIG, "integer > 0", &m->d_model));
    SP_CHECK(spi_json_get_int(c, "", r, "d_ff", 1, 1, BIG, "integer > 0", &m->d_ff));
    SP_CHECK(spi_json_get_int(c, "", r, "n_heads", 1, 1, BIG, "integer > 0", &m->n_heads));
    m->n_kv_heads = m->n_heads;
    SP_CHECK(spi_json_get_int(c, "", r, "n_kv_heads", 0, 1, BIG, "integer > 0 dividing n_heads", &m->n_kv_heads));
    if (json_object_get(r, "d_head")) {
        SP_CHECK(spi_json_get_int(c, "", r, "d_head", 1, 1, BIG, "integer > 0", &m->d_head));
    } else if (m->d_model % m->n_heads) {
        return spi_json_fail(c, SP_EINVAL, "", "d_head",
                             "missing field: d_model (%lld) is not a multiple of n_heads (%lld), so give d_head",
                             (long long)m->d_model, (long long)m->n_heads);
    } else {
        m->d_head = m->d_model / m->n_heads;
    }
    SP_CHECK(spi_json_get_int(c, "", r, "vocab", 1, 1, BIG, "integer > 0", &m->vocab));
    v = 0; SP_CHECK(spi_json_get_enum(c, "", r, "ffn", 1, ffn_names, SP_FFN_COUNT, &v)); m->ffn = (sp_ffn_kind)v;
    v = 0; SP_CHECK(spi_json_get_enum(c, "", r, "block", 1, block_names, SP_BLOCK_COUNT, &v)); m->block = (sp_block_kind)v;
    v = 0; SP_CHECK(spi_json_get_enum(c, "", r, "norm", 1, norm_names, SP_NORM_COUNT, &v)); m->norm = (sp_norm_kind)v;
    v = 0; SP_CHECK(spi_json_get_enum(c, "", r, "positions", 1, pos_names, SP_POS_COUNT, &v)); m->positions = (sp_pos_kind)v;
    SP_CHECK(spi_json_get_bool(c, "", r, "tied_embeddings", 1, &m->tied_embeddings));
    SP_CHECK(get_bias(c, r, &m->bias));
    v = 0; SP_CHECK(spi_json_get_enum(c, "", r, "act", 0, act_names, SP_ACT_COUNT, &v)); m->act = (sp_act_kind)v;
    v = 0; SP_CHECK(spi_json_get_enum(c, "", r, "rope_style", 0, rope_style_names, SP_ROPE_STYLE_COUNT, &v));
    m->rope_style = (sp_rope_style)v;
    SP_CHECK(spi_json_get_int(c, "", r, "rotary_dims", 0, 0, BIG, "even integer >= 0; 0 means d_head", &m->rotary_dims));
    SP_CHECK(spi_json_get_int(c, "", r, "sliding_window", 0, 0, BIG, "integer >= 0; 0 means no window", &m->sliding_window));
    SP_CHECK(get_rope_scaling(c, r, m));
    SP_CHECK(spi_json_get_int(c, "", r, "max_context", 1, 1, BIG, "integer > 0", &m->max_context));
    SP_CHECK(spi_json_get_num(c, "", r, "rope_theta", 0, 1, 0, HUGE_VAL, "number > 0", &m->rope_theta));
    SP_CHECK(spi_json_get_num(c, "", r, "norm_eps", 0, 1, 0, 1, "number in (0, 1]", &m->norm_eps));
    SP_CHECK(spi_json_get_int(c, "", r, "n_experts", 0, 0, BIG, "integer >= 0; 0 means dense", &m->n_experts));
    if (m->n_experts > 0) {
        m->moe_every = 1;
        SP_CHECK(spi_json_get_int(c, "", r, "top_k", 1, 1, m->n_experts, "integer between 1 and n_experts", &m->top_k));
        SP_CHECK(spi_json_get_int(c, "", r, "moe_every", 0, 1, m->n_layers, "integer between 1 and n_layers",
                                  &m->moe_every));
        SP_CHECK(spi_json_get_int(c, "", r, "dense_d_ff", 0, 1, BIG, "integer > 0", &m->dense_d_ff));
        SP_CHECK(spi_json_get_int(c, "", r, "n_shared_experts", 0, 0, m->n_experts,
                                  "integer between 0 and n_experts", &m->n_shared_experts));
        SP_CHECK(spi_json_get_int(c, "", r, "shared_d_ff", 0, 1, BIG, "integer > 0", &m->shared_d_ff));
        SP_CHECK(spi_json_get_bool(c, "", r, "shared_expert_gate", 0, &m->shared_expert_gate));
        v = 0;
        SP_CHECK(spi_json_get_enum(c, "", r, "router", 0, router_names, SP_ROUTER_COUNT, &v));
        m->router = (sp_router_kind)v;
        SP_CHECK(spi_json_get_num(c, "", r, "router_skew", 0, 1, 0, 16, "number in [0, 16]; 0 means uniform",
                                  &m->router_skew));
    }
    return SP_OK;
}

static sp_status model_from_json(const char *source, json_t *root, sp_model *out, sp_error *err)
{
    spi_jctx c = {source, err};
    sp_model m;
    sp_model_init(&m);
    SP_CHECK(spi_json_expect_object(&c, "", root));
    if (spi_json_is_hf_config(root)) SP_CHECK(spi_model_from_hf(&c, root, &m));
    else SP_CHECK(model_from_own(&c, root, &m));
    SP_CHECK(spi_model_validate_src(&m, source, err));
    *out = m;
    return SP_OK;
}

sp_status sp_model_load_file(const char *path, unsigned flags, sp_model *out, sp_error *err)
{
    json_t *root;
    (void)flags;
    if (!out) return spi_fail(SP_EINVAL, "sp_model_load_file: NULL output");
    SP_CHECK(spi_json_load_file(path, &root, err));
    sp_status s = model_from_json(path, root, out, err);
    json_decref(root);
    return s;
}

sp_status sp_model_loads(const char *text, unsigned flags, sp_model *out, sp_error *err)
{
    json_t *root;
    (void)flags;
    if (!out) return spi_fail(SP_EINVAL, "sp_model_loads: NULL output");
    SP_CHECK(spi_json_loads(text, "<string>", &root, err));
    sp_status s = model_from_json("<string>", root, out, err);
    json_decref(root);
    return s;
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

sp_status sp_model_find(const char *name_or_path, sp_model *out, sp_error *err)
{
    if (!name_or_path || !name_or_path[0])
        return spi_error_set(err, SP_EINVAL, "", 0, 0, "", "no model name given");
    if (is_file(name_or_path)) return sp_model_load_file(name_or_path, 0, out, err);
    char rel[300], path[1024];
    if (strchr(name_or_path, '/') || snprintf(rel, sizeof rel, "models/%s.json", name_or_path) >= (int)sizeof rel)
        return spi_error_set(err, SP_EIO, name_or_path, 0, 0, "", "no such file");
    if (sp_data_path(rel, path, sizeof path) != SP_OK)
        return spi_error_set(err, SP_EIO, name_or_path, 0, 0, "",
                             "no such file, and no bundled model of that name (see 'shardplan models')");
    return sp_model_load_file(path, 0, out, err);
}

json_t *spi_model_to_json(const sp_model *m)
{
    json_t *j = json_object();
    json_object_set_new(j, "name", json_string(m->name));
    json_object_set_new(j, "n_layers", json_integer(m->n_layers));
    json_object_set_new(j, "d_model", json_integer(m->d_model));
    json_object_set_new(j, "d_ff", json_integer(m->d_ff));
    json_object_set_new(j, "n_heads", json_integer(m->n_heads));
    json_object_set_new(j, "n_kv_heads", json_integer(m->n_kv_heads));
    json_object_set_new(j, "d_head", json_integer(m->d_head));
    json_object_set_new(j, "vocab", json_integer(m->vocab));
    json_object_set_new(j, "ffn", json_string(sp_ffn_name(m->ffn)));
    json_object_set_new(j, "block", json_string(sp_block_name(m->block)));
    json_object_set_new(j, "norm", json_string(sp_norm_name(m->norm)));
    json_object_set_new(j, "positions", json_string(sp_pos_name(m->positions)));
    json_object_set_new(j, "tied_embeddings", json_boolean(m->tied_embeddings));
    if (m->bias == 0 || m->bias == SP_BIAS_ALL) {
        json_object_set_new(j, "bias", json_boolean(m->bias));
    } else {
        json_t *b = json_array();
        for (size_t k = 0; k < SPI_ARRAY_LEN(bias_groups); k++)
            if (m->bias & (1 << k)) json_array_append_new(b, json_string(bias_groups[k]));
        json_object_set_new(j, "bias", b);
    }
    if (m->act != SP_ACT_AUTO) json_object_set_new(j, "act", json_string(sp_act_name(m->act)));
    if (m->rotary_dims) json_object_set_new(j, "rotary_dims", json_integer(m->rotary_dims));
    if (m->rope_style != SP_ROPE_HALF) json_object_set_new(j, "rope_style", json_string(sp_rope_style_name(m->rope_style)));
    if (m->sliding_window) json_object_set_new(j, "sliding_window", json_integer(m->sliding_window));
    if (m->rope_scaling != SP_ROPE_NONE) {
        json_t *o = json_object();
        json_object_set_new(o, "rope_type", json_string(sp_rope_scaling_name(m->rope_scaling)));
        json_object_set_new(o, "factor", json_real(m->rope_factor));
        if (m->rope_orig_context)
            json_object_set_new(o, "original_max_position_embeddings", json_integer(m->rope_orig_context));
        if (m->rope_scaling == SP_ROPE_LLAMA3) {
            json_object_set_new(o, "low_freq_factor", json_real(m->rope_low_freq_factor));
            json_object_set_new(o, "high_freq_factor", json_real(m->rope_high_freq_factor));
        }
        if (m->rope_scaling == SP_ROPE_YARN) {
            json_object_set_new(o, "beta_fast", json_real(m->rope_beta_fast));
            json_object_set_new(o, "beta_slow", json_real(m->rope_beta_slow));
            if (m->rope_attn_factor > 0) json_object_set_new(o, "attention_factor", json_real(m->rope_attn_factor));
        }
        json_object_set_new(j, "rope_scaling", o);
    }
    json_object_set_new(j, "max_context", json_integer(m->max_context));
    json_object_set_new(j, "rope_theta", json_real(m->rope_theta));
    json_object_set_new(j, "norm_eps", json_real(m->norm_eps));
    if (m->n_experts > 0) {
        json_object_set_new(j, "n_experts", json_integer(m->n_experts));
        json_object_set_new(j, "top_k", json_integer(m->top_k));
        json_object_set_new(j, "moe_every", json_integer(m->moe_every));
        if (m->dense_d_ff) json_object_set_new(j, "dense_d_ff", json_integer(m->dense_d_ff));
        if (m->n_shared_experts) json_object_set_new(j, "n_shared_experts", json_integer(m->n_shared_experts));
        if (m->shared_d_ff) json_object_set_new(j, "shared_d_ff", json_integer(m->shared_d_ff));
        if (m->shared_expert_gate) json_object_set_new(j, "shared_expert_gate", json_true());
        if (m->router != SP_ROUTER_TOPK_RENORM) json_object_set_new(j, "router", json_string(sp_router_name(m->router)));
        if (m->router_skew > 0) json_object_set_new(j, "router_skew", json_real(m->router_skew));
    }
    return j;
}

/* ---- what the lowering, cost model and executor compute ---- */

/* The first field of m the lowering, cost model and executor do not compute
 * at `context` tokens: its JSON pointer, and (text != NULL) why.  NULL: all
 * computed.  Cheap (the lowering asks for every layout a search tries). */
const char *spi_model_refusal(const sp_model *m, int64_t context, char *text, size_t size)
{
#define WHY(...) (text ? snprintf(text, size, __VA_ARGS__) : 0)
    if (context <= 0) context = m->max_context;
    if (m->n_experts > 0 && (m->bias & SP_BIAS_FFN)) {
        WHY("ffn: biases on expert FFNs are not implemented");
        return "/bias";
    }
    if (m->positions == SP_POS_ALIBI) {
        WHY("alibi: ALiBi attention biases are not implemented");
        return "/positions";
    }
    if (m->positions == SP_POS_ROPE && m->rope_style != SP_ROPE_HALF) {
        WHY("%s: RoPE on interleaved pairs (GPT-J's rotate_every_two) is not implemented",
            sp_rope_style_name(m->rope_style));
        return "/rope_style";
    }
    if (m->sliding_window > 0 && context > m->sliding_window) {
        WHY("%lld: the job's context (%lld tokens) exceeds the attention window; sliding-window attention is not "
            "implemented (full attention equals it only up to the window)", (long long)m->sliding_window,
            (long long)context);
        return "/sliding_window";
    }
    if (m->positions == SP_POS_ROPE && m->rope_scaling == SP_ROPE_DYNAMIC && context > m->rope_orig_context) {
        WHY("dynamic: the job's context (%lld tokens) exceeds original_max_position_embeddings (%lld), beyond which "
            "dynamic NTK scaling changes the frequencies as the sequence grows; not implemented", (long long)context,
            (long long)m->rope_orig_context);
        return "/rope_scaling/rope_type";
    }
    return NULL;
#undef WHY
}

sp_status sp_model_check_run(const sp_model *m, int64_t context, sp_error *err)
{
    SP_CHECK(sp_model_validate(m, err));
    char text[400];
    const char *path = spi_model_refusal(m, context, text, sizeof text);
    if (path) return spi_error_set(err, SP_EINVAL, m->name, 0, 0, path, "%s", text);
    return SP_OK;
}

/* Routing statistics under the independent-token assumption (sp_model.h):
 * each token picks its experts independently of the others, expert i with
 * probability q_i = min(1, k·p_i), p_i = (i+1)^-s / Σ_j (j+1)^-s.  Exact for
 * s = 0 (top_k distinct experts uniformly: k/E each); for s > 0, k·p_i is the
 * first-order probability of a weighted draw without replacement. */
void sp_model_moe_routing(const sp_model *m, double tokens, double *distinct, double *q_max)
{
    *distinct = *q_max = 0;
    if (m->n_experts <= 0) return;
    const int64_t n = m->n_experts;
    double z = 0;
    for (int64_t i = 0; i < n; i++) z += pow((double)(i + 1), -m->router_skew);
    for (int64_t i = 0; i < n; i++) {
        double q = (double)m->top_k * pow((double)(i + 1), -m->router_skew) / z;
        if (q > 1) q = 1;
        if (q > *q_max) *q_max = q;
        *distinct += 1.0 - pow(1.0 - q, tokens);
    }
}

/* transformers' _compute_yarn_parameters helpers */
static double yarn_corr_dim(double rot, double dim, double base, double ctx)
{
    return dim * log(ctx / (rot * 2.0 * M_PI)) / (2.0 * log(base));
}

sp_status sp_model_rope_freqs(const sp_model *m, int64_t context, double *inv_freq, double *attn_scale)
{
    if (m->positions != SP_POS_ROPE) return spi_fail(SP_EINVAL, "model %s has no RoPE", m->name);
    sp_error err;
    sp_error_init(&err);
    if (sp_model_check_run(m, context, &err)) return spi_fail(SP_EINVAL, "%s: %s", err.path, err.text);
    const int64_t R = sp_model_rotary_dims(m), half = R / 2;
    const double base = m->rope_theta, f = m->rope_factor;
    *attn_scale = 1.0;
    for (int64_t i = 0; i < half; i++) inv_freq[i] = 1.0 / pow(base, (double)(2 * i) / (double)R);
    switch (m->rope_scaling) {
    case SP_ROPE_NONE: case SP_ROPE_DYNAMIC: /* dynamic: unscaled up to original_max_position_embeddings */
        break;
    case SP_ROPE_LINEAR:
        for (int64_t i = 0; i < half; i++) inv_freq[i] /= f;
        break;
    case SP_ROPE_LLAMA3: {
        double old = (double)m->rope_orig_context, lo = m->rope_low_freq_factor, hi = m->rope_high_freq_factor;
        double lo_wl = old / lo, hi_wl = old / hi;
        for (int64_t i = 0; i < half; i++) {
            double wl = 2.0 * M_PI / inv_freq[i];
            if (wl > lo_wl) inv_freq[i] /= f;   /* low frequencies: interpolated */
            else if (wl >= hi_wl) {             /* medium: smooth blend */
                double sm = (old / wl - lo) / (hi - lo);
                inv_freq[i] = (1.0 - sm) * inv_freq[i] / f + sm * inv_freq[i];
            }
        }
        break;
    }
    case SP_ROPE_YARN: {
        double dim = (double)R, octx = (double)m->rope_orig_context;
        double low = floor(yarn_corr_dim(m->rope_beta_fast, dim, base, octx));
        double high = ceil(yarn_corr_dim(m->rope_beta_slow, dim, base, octx));
        if (low < 0) low = 0;
        if (high > dim - 1) high = dim - 1;
        if (low == high) high += 0.001;
        for (int64_t i = 0; i < half; i++) {
            double ramp = ((double)i - low) / (high - low);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            double extra = 1.0 - ramp;   /* share of the unscaled (extrapolated) frequency */
            inv_freq[i] = inv_freq[i] / f * (1.0 - extra) + inv_freq[i] * extra;
        }
        *attn_scale = m->rope_attn_factor > 0 ? m->rope_attn_factor : f <= 1 ? 1.0 : 0.1 * log(f) + 1.0;
        break;
    }
    case SP_ROPE_COUNT: return spi_fail(SP_EINTERNAL, "rope scaling");
    }
    return SP_OK;
}
