/* weights.c: the fp32 weight slab: sizes, random init, quantisation round trip. */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <assert.h>
#include "spi_common.h"
#include "kernels/cpu/sp_kern.h"
#include "exec/sp_weights.h"
#include "exec/spi_hf.h"

sp_status sp_weights_sizes(const sp_model *m, int64_t sizes[SP_W_COUNT], int64_t *total)
{
    if (!m || m->n_layers <= 0 || m->d_model <= 0 || m->d_ff <= 0 || m->n_heads <= 0 || m->n_kv_heads <= 0 ||
        m->d_head <= 0 || m->vocab <= 0 || m->n_heads % m->n_kv_heads)
        return spi_fail(SP_EINVAL, "weights: model sizes must be positive and n_heads a multiple of n_kv_heads");
    if (m->positions == SP_POS_LEARNED && m->max_context <= 0)
        return spi_fail(SP_EINVAL, "weights: learned positions need max_context > 0");
    uint64_t sum = 0;
    for (int t = 0; t < SP_W_COUNT; t++) {
        uint64_t n = 0;
        if (sp_weight_present(m, (sp_weight)t)) {
            int64_t r, c;
            sp_weight_shape(m, (sp_weight)t, &r, &c);
            if (!spi_mul_u64((uint64_t)r, (uint64_t)c, &n) ||
                (sp_weight_per_layer((sp_weight)t) && !spi_mul_u64(n, (uint64_t)sp_weight_layers(m, (sp_weight)t), &n)))
                return spi_fail(SP_EINVAL, "weights: size of %s overflows", sp_weight_name((sp_weight)t));
        }
        if (n > (uint64_t)INT64_MAX / 8 || !spi_add_u64(sum, n, &sum))
            return spi_fail(SP_EINVAL, "weights: total size overflows");
        sizes[t] = (int64_t)n;
    }
    if (total) *total = (int64_t)sum;
    return SP_OK;
}

/* slab holds the kinds `keep` says (NULL: all); the others get t[] = NULL */
static sp_status alloc_kinds(const sp_model *m, sp_weights *w, int (*keep)(sp_weight))
{
    memset(w, 0, sizeof *w);
    int64_t total;
    SP_CHECK(sp_weights_sizes(m, w->sizes, &total));
    if (keep) {
        total = 0;
        for (int t = 0; t < SP_W_COUNT; t++)
            if (keep((sp_weight)t)) total += w->sizes[t];
    }
    w->model = *m;
    w->quant = SP_DT_F32;
    w->bytes = (size_t)total * sizeof(float);
    w->slab = calloc((size_t)total, sizeof(float));
    w->layers = calloc((size_t)m->n_layers, sizeof *w->layers);
    if (!w->slab || !w->layers) {
        sp_weights_free(w);
        return spi_fail(SP_ENOMEM, "weights: cannot allocate %zu bytes", (size_t)total * sizeof(float));
    }
    float *p = w->slab;
    for (int t = 0; t < SP_W_COUNT; t++) {
        int kept = !keep || keep((sp_weight)t);
        w->t[t] = w->sizes[t] && kept ? p : NULL;
        if (kept) p += w->sizes[t];
    }
    for (int64_t l = 0; l < m->n_layers; l++) {
        sp_weights_layer *L = &w->layers[l];
        float **dst[SP_W_COUNT] = {0};
        dst[SP_W_NORM1] = &L->attn_norm; dst[SP_W_NORM1_B] = &L->attn_norm_b;
        dst[SP_W_Q] = &L->wq; dst[SP_W_BQ] = &L->bq; dst[SP_W_K] = &L->wk; dst[SP_W_BK] = &L->bk;
        dst[SP_W_V] = &L->wv; dst[SP_W_BV] = &L->bv; dst[SP_W_O] = &L->wo; dst[SP_W_BO] = &L->bo;
        dst[SP_W_NORM2] = &L->ffn_norm; dst[SP_W_NORM2_B] = &L->ffn_norm_b;
        dst[SP_W_IN] = &L->w_in; dst[SP_W_B_IN] = &L->b_in; dst[SP_W_UP] = &L->w_up;
        dst[SP_W_B_UP] = &L->b_up; dst[SP_W_OUT] = &L->w_out; dst[SP_W_B_OUT] = &L->b_out;
        dst[SP_W_ROUTER] = &L->router;
        dst[SP_W_SH_IN] = &L->sh_in; dst[SP_W_SH_UP] = &L->sh_up; dst[SP_W_SH_OUT] = &L->sh_out;
        dst[SP_W_SH_GATE] = &L->sh_gate;
        dst[SP_W_D_IN] = &L->d_in; dst[SP_W_D_UP] = &L->d_up; dst[SP_W_D_OUT] = &L->d_out;
        for (int t = SP_W_FIRST_LAYER; t < SP_W_COUNT; t++)
            *dst[t] = w->t[t] && sp_weight_in_layer(m, (sp_weight)t, l) ? (float *)sp_weights_tensor(w, (sp_weight)t, l) : NULL;
    }
    w->embed = w->t[SP_W_EMBED];
    w->pos = w->t[SP_W_POS];
    w->lm_head = m->tied_embeddings ? w->embed : w->t[SP_W_LMHEAD];
    w->final_norm = w->t[SP_W_NORMF];
    w->final_norm_b = w->t[SP_W_NORMF_B];
    return SP_OK;
}

sp_status sp_weights_alloc(const sp_model *m, sp_weights *w) { return alloc_kinds(m, w, NULL); }

const float *sp_weights_tensor(const sp_weights *w, sp_weight k, int64_t layer)
{
    if ((unsigned)k >= SP_W_COUNT || !w->t[k]) return NULL;
    if (!sp_weight_per_layer(k)) return w->t[k];
    if (layer < 0 || layer >= w->model.n_layers || !sp_weight_in_layer(&w->model, k, layer)) return NULL;
    int64_t R, C;
    sp_weight_shape(&w->model, k, &R, &C);
    return w->t[k] + sp_weight_layer_slot(&w->model, k, layer) * R * C;
}


/* kinds read whole when a checkpoint is opened for slices */
static int small_kind(sp_weight t)
{
    return !sp_weight_is_matrix(t) && t != SP_W_EMBED && t != SP_W_LMHEAD;
}

sp_status sp_weights_open_hf(const char *dir, const sp_model *m, sp_weights *w, sp_error *err)
{
    memset(w, 0, sizeof *w);
    struct spi_hf_src *h = NULL;
    SP_CHECK(spi_hf_open(dir, m, &h, err));
    sp_status s = alloc_kinds(m, w, small_kind);
    if (s != SP_OK) spi_error_set(err, s, dir, 0, 0, "", "%s", sp_last_error());
    else s = spi_hf_fill(h, m, w, err);
    if (s != SP_OK) {
        spi_hf_close(h);
        sp_weights_free(w);
        return s;
    }
    w->src = h;
    return SP_OK;
}

static double randn(uint64_t *s)
{
    double u1 = ((double)(sp_kern_rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(sp_kern_rng_next(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

sp_status sp_weights_build_random(const sp_model *m, uint64_t seed, sp_weights *w)
{
    SP_CHECK(sp_weights_alloc(m, w));
    double proj_std = 0.02 / sqrt(2.0 * (double)m->n_layers);
    for (int t = 0; t < SP_W_COUNT; t++) {
        float *p = w->t[t];
        if (!p) continue;
        /* one stream per tensor kind (its sp_weight value, which never
         * moves), so adding a kind does not shift the others */
        uint64_t s = seed ^ (0x5851f42d4c957f2dULL * (uint64_t)t);
        int gain = t == SP_W_NORMF || t == SP_W_NORM1 || t == SP_W_NORM2;
        double std = (t == SP_W_O || t == SP_W_OUT || t == SP_W_D_OUT) ? proj_std : 0.02;
        for (int64_t i = 0; i < w->sizes[t]; i++) p[i] = (float)((gain ? 1.0 : 0.0) + std * randn(&s));
    }
    return SP_OK;
}

void sp_weights_free(sp_weights *w)
{
    if (!w) return;
    free(w->slab);
    free(w->layers);
    for (int t = 0; t < SP_W_COUNT; t++) free(w->scales[t]);
    spi_hf_close(w->src);
    memset(w, 0, sizeof *w);
    w->quant = SP_DT_F32;
}

/* ---- quantisation ------------------------------------------------------------------ */

static float col_scale(const float *W, int64_t K, int64_t ld, int64_t c, sp_dtype dt)
{
    float mx = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        float a = fabsf(W[k * ld + c]);
        if (a > mx) mx = a;
    }
    return mx / (dt == SP_DT_FP8 ? 448.0f : 127.0f);
}

static int8_t q_int8(float x, float s)
{
    if (s == 0.0f) return 0;
    float q = nearbyintf(x / s);
    if (q > 127.0f) q = 127.0f;
    if (q < -127.0f) q = -127.0f;
    return (int8_t)q;
}

static uint8_t q_fp8(float x, float s)
{
    return s == 0.0f ? 0 : sp_kern_f32_to_fp8(x / s);
}

/* Matrices of one layer's kind t quantised apart: the n_experts experts of a MoE layer's FFN
 * kinds (rows stacked expert-major, sp_weight), each with its own column scales, else 1. */
static int64_t quant_groups(const sp_model *m, sp_weight t)
{
    return m->n_experts > 0 && (t == SP_W_IN || t == SP_W_UP || t == SP_W_OUT) ? m->n_experts : 1;
}

static int quant_dtype_ok(sp_dtype dt)
{
    return dt == SP_DT_F32 || dt == SP_DT_BF16 || dt == SP_DT_F16 || dt == SP_DT_INT8 || dt == SP_DT_FP8;
}

sp_status sp_weights_quant_block(const float *W, int64_t K, int64_t ld, int64_t r0, int64_t r1, int64_t c0,
                                 int64_t c1, sp_dtype dt, const float *cs, void *out, float *scale_out)
{
    if (!W || !out || r0 < 0 || r1 > K || r0 > r1 || c0 < 0 || c1 > ld || c0 > c1)
        return spi_fail(SP_EINVAL, "quant_block: block [%lld,%lld) x [%lld,%lld) outside (%lld, %lld)", (long long)r0,
                        (long long)r1, (long long)c0, (long long)c1, (long long)K, (long long)ld);
    if (!quant_dtype_ok(dt)) return spi_fail(SP_EINVAL, "quant_block: unknown dtype %d", (int)dt);
    int scaled = dt == SP_DT_INT8 || dt == SP_DT_FP8;
    if (scaled && !scale_out) return spi_fail(SP_EINVAL, "quant_block: %s needs scale_out", sp_dtype_name(dt));
    int64_t nc = c1 - c0;
    if (scaled)
        for (int64_t c = 0; c < nc; c++) scale_out[c] = cs ? cs[c0 + c] : col_scale(W, K, ld, c0 + c, dt);
    for (int64_t r = 0; r < r1 - r0; r++) {
        const float *src = W + (r0 + r) * ld + c0;   // (nc)
        for (int64_t c = 0; c < nc; c++) {
            int64_t o = r * nc + c;
            switch (dt) {
            case SP_DT_F32: ((float *)out)[o] = src[c]; break;
            case SP_DT_BF16: ((uint16_t *)out)[o] = sp_kern_f32_to_bf16(src[c]); break;
            case SP_DT_F16: ((uint16_t *)out)[o] = sp_kern_f32_to_f16(src[c]); break;
            case SP_DT_INT8: ((int8_t *)out)[o] = q_int8(src[c], scale_out[c]); break;
            case SP_DT_FP8: ((uint8_t *)out)[o] = q_fp8(src[c], scale_out[c]); break;
            default: break;
            }
        }
    }
    return SP_OK;
}

sp_status sp_weights_block(const sp_weights *w, sp_weight t, int64_t layer, int64_t r0, int64_t r1, int64_t c0,
                           int64_t c1, sp_dtype dt, void *out, float *scale_out)
{
    if (!w || (int)t < 0 || t >= SP_W_COUNT || !w->sizes[t] || (!w->t[t] && !w->src))
        return spi_fail(SP_EINVAL, "weights_block: tensor %s absent", sp_weight_name(t));
    int64_t R, C;
    sp_weight_shape(&w->model, t, &R, &C);
    /* an expert's matrix is quantised on its own: the block lies in expert e's rows [e·Rg, (e+1)·Rg) */
    int64_t G = quant_groups(&w->model, t), Rg = R / G, e = r0 >= 0 && Rg > 0 ? r0 / Rg : 0;
    if (G > 1 && (e >= G || r1 > (e + 1) * Rg))
        return spi_fail(SP_EINVAL, "weights_block: rows [%lld,%lld) of %s span more than one expert's %lld",
                        (long long)r0, (long long)r1, sp_weight_name(t), (long long)Rg);
    if (!w->t[t]) {
        /* from the checkpoint: just these rows, or whole columns (of the expert) when the
         * per-column scales need them */
        if (r0 < 0 || r1 > R || r0 > r1 || c0 < 0 || c1 > C || c0 > c1)
            return spi_fail(SP_EINVAL, "weights_block: [%lld,%lld) x [%lld,%lld) outside (%lld, %lld)", (long long)r0,
                            (long long)r1, (long long)c0, (long long)c1, (long long)R, (long long)C);
        int whole = dt == SP_DT_INT8 || dt == SP_DT_FP8;
        int64_t a0 = whole ? e * Rg : r0, a1 = whole ? (e + 1) * Rg : r1;
        if (c1 == c0 || (a1 == a0 && !whole)) return SP_OK;
        float *tmp = malloc((size_t)((a1 - a0) * (c1 - c0)) * sizeof *tmp);   // (a1-a0, c1-c0)
        if (!tmp) return spi_fail(SP_ENOMEM, "weights_block: %lld x %lld", (long long)(a1 - a0), (long long)(c1 - c0));
        int absent;
        sp_error err;
        sp_error_init(&err);
        sp_status st = spi_hf_read_block(w->src, &w->model, t, layer, a0, a1, c0, c1, tmp, &absent, &err);
        if (st == SP_OK && absent) st = spi_fail(SP_EINVAL, "weights_block: %s absent from the checkpoint", sp_weight_name(t));
        if (st == SP_OK)
            st = sp_weights_quant_block(tmp, a1 - a0, c1 - c0, r0 - a0, r1 - a0, 0, c1 - c0, dt, NULL, out, scale_out);
        free(tmp);
        return st;
    }
    const float *base = w->t[t];
    if (sp_weight_per_layer(t)) {
        if (layer < 0 || layer >= w->model.n_layers || !sp_weight_in_layer(&w->model, t, layer))
            return spi_fail(SP_EINVAL, "weights_block: layer %lld of %lld has no %s", (long long)layer,
                            (long long)w->model.n_layers, sp_weight_name(t));
        base = sp_weights_tensor(w, t, layer);
    }
    const float *cs = NULL;
    int64_t slot = sp_weight_per_layer(t) ? sp_weight_layer_slot(&w->model, t, layer) : 0;
    if (w->scales[t] && w->quant == dt) cs = w->scales[t] + (slot * G + e) * C;
    return sp_weights_quant_block(base + e * Rg * C, Rg, C, r0 - e * Rg, r1 - e * Rg, c0, c1, dt, cs, out, scale_out);
}

sp_status sp_weights_round_tables(sp_weights *w, sp_dtype dt)
{
    if (!w || !w->slab) return spi_fail(SP_EINVAL, "weights_round_tables: no weights");
    if (dt == SP_DT_F32) return SP_OK;
    if (dt != SP_DT_BF16 && dt != SP_DT_F16)
        return spi_fail(SP_EINVAL, "weights_round_tables: tables are f32, bf16 or f16, not %s", sp_dtype_name(dt));
    const sp_model *m = &w->model;
    struct { float *t; int64_t n; } tabs[3] = {
        {w->embed, m->vocab * m->d_model},
        {w->lm_head != w->embed ? w->lm_head : NULL, m->vocab * m->d_model},
        {w->pos, m->max_context * m->d_model}};
    for (int i = 0; i < 3; i++)
        for (int64_t j = 0; tabs[i].t && j < tabs[i].n; j++) {
            float x = tabs[i].t[j];
            tabs[i].t[j] = dt == SP_DT_BF16 ? sp_kern_bf16_to_f32(sp_kern_f32_to_bf16(x))
                                            : sp_kern_f16_to_f32(sp_kern_f32_to_f16(x));
        }
    return SP_OK;
}

sp_status sp_weights_quantize(sp_weights *w, sp_dtype dt)
{
    if (!w || !w->slab) return spi_fail(SP_EINVAL, "weights_quantize: no weights");
    if (!quant_dtype_ok(dt)) return spi_fail(SP_EINVAL, "weights_quantize: unknown dtype %d", (int)dt);
    if (w->quant != SP_DT_F32) return spi_fail(SP_EINVAL, "weights_quantize: already quantised to %s", sp_dtype_name(w->quant));
    if (dt == SP_DT_F32) return SP_OK;
    int scaled = dt == SP_DT_INT8 || dt == SP_DT_FP8;
    for (int t = 0; t < SP_W_COUNT; t++) {
        if (!sp_weight_is_matrix((sp_weight)t) || !w->t[t]) continue;
        int64_t R, C;
        sp_weight_shape(&w->model, (sp_weight)t, &R, &C);
        /* an expert's matrix (G of them stacked: rows Rg each) has its own scales */
        int64_t G = quant_groups(&w->model, (sp_weight)t), Rg = R / G, NL = sp_weight_layers(&w->model, (sp_weight)t);
        if (scaled) {
            w->scales[t] = malloc((size_t)(NL * G * C) * sizeof(float));
            if (!w->scales[t]) return spi_fail(SP_ENOMEM, "weights_quantize: no memory for scales");
        }
        for (int64_t lg = 0; lg < NL * G; lg++) {
            float *W = w->t[t] + lg * Rg * C;   // (Rg, C): the (lg / G)-th layer holding t, expert lg % G
            float *s = scaled ? w->scales[t] + lg * C : NULL;   // (C)
            if (s)
                for (int64_t c = 0; c < C; c++) s[c] = col_scale(W, Rg, C, c, dt);
            for (int64_t i = 0; i < Rg * C; i++) {
                float x = W[i];
                switch (dt) {
                case SP_DT_BF16: W[i] = sp_kern_bf16_to_f32(sp_kern_f32_to_bf16(x)); break;
                case SP_DT_F16: W[i] = sp_kern_f16_to_f32(sp_kern_f32_to_f16(x)); break;
                case SP_DT_INT8: W[i] = (float)q_int8(x, s[i % C]) * s[i % C]; break;
                case SP_DT_FP8: W[i] = sp_kern_fp8_to_f32(q_fp8(x, s[i % C])) * s[i % C]; break;
                default: break;
                }
            }
        }
    }
    w->quant = dt;
    return SP_OK;
}
