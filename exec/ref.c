/* ref.c: single-chip fp32 reference forward pass (llm.c CPU-reference style).
 * Plain loops only: this is the oracle, not the fast path. */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "exec/sp_ref.h"
#include "kernels/cpu/sp_kern.h"   /* the MoE routing rule, shared with the executor */

struct sp_ref {
    sp_model m;
    const sp_weights *w;
    int64_t B, max_ctx, pos;
    float *kc, *vc;   // (NL, B, max_ctx, KVH, D)
    float *x;         // (T, E) residual stream, T = B * max_ctx
    float *h;         // (T, E) normed input
    float *q;         // (T, H*D)
    float *k, *v;     // (T, KVH*D)
    float *att;       // (T, H*D) attention output before wo
    float *ao;        // (T, E) attention block output
    float *fo;        // (T, E) FFN block output
    float *fa, *fb;   // (T, max(F, Fs, Fd))
    float *so;        // MoE with shared experts: (T, E) their output
    float *sc;        // (max_ctx) scores
    float *rl;        // MoE: (T, n_experts) router logits
    sp_kern_route *route;   // MoE: (T, top_k) choices
    int64_t *counts;  // MoE: (n_experts) tokens per expert
    float *eo;        // MoE: (E) one expert's output row
    double *inv_freq; // (rotary dims / 2) RoPE inverse frequencies
    double rope_scale;
};

/* out (T, N) = in (T, K) . W (K, N) + b (N) */
static void mm(float *out, const float *in, const float *W, const float *b, int64_t T, int64_t K, int64_t N)
{
    for (int64_t t = 0; t < T; t++) {
        float *o = out + t * N;
        for (int64_t n = 0; n < N; n++) o[n] = b ? b[n] : 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float a = in[t * K + k];
            const float *wr = W + k * N;
            for (int64_t n = 0; n < N; n++) o[n] += a * wr[n];
        }
    }
}

/* out (T, C) = norm(x) * g + b; two-pass mean/variance in double */
static void norm(float *out, const float *x, int64_t T, int64_t C, const float *g, const float *b, double eps,
                 sp_norm_kind kind)
{
    for (int64_t t = 0; t < T; t++) {
        const float *r = x + t * C;
        double mean = 0.0, var = 0.0;
        if (kind == SP_NORM_LAYERNORM) {
            for (int64_t c = 0; c < C; c++) mean += r[c];
            mean /= (double)C;
        }
        for (int64_t c = 0; c < C; c++) var += (r[c] - mean) * (r[c] - mean);
        var /= (double)C;
        double rs = 1.0 / sqrt(var + eps);
        for (int64_t c = 0; c < C; c++) out[t * C + c] = (float)((r[c] - mean) * rs) * g[c] + (b ? b[c] : 0.0f);
    }
}

/* rotate_half RoPE on the leading R dims of one head vector v (D) at position p */
static void rope(float *v, int64_t R, int64_t p, const double *inv_freq, double scale)
{
    int64_t half = R / 2;
    for (int64_t i = 0; i < half; i++) {
        double ang = (double)p * inv_freq[i];
        double c = cos(ang) * scale, s = sin(ang) * scale;
        double a = v[i], b = v[i + half];
        v[i] = (float)(a * c - b * s);
        v[i + half] = (float)(b * c + a * s);
    }
}

sp_status sp_ref_build(const sp_model *m, const sp_weights *w, int64_t B, int64_t max_ctx, sp_ref **out)
{
    *out = NULL;
    if (!m || !w || !w->slab || B <= 0 || max_ctx <= 0)
        return spi_fail(SP_EINVAL, "sp_ref_build: need a model, weights, B > 0 and max_ctx > 0");
    if (w->model.d_model != m->d_model || w->model.n_layers != m->n_layers || w->model.vocab != m->vocab)
        return spi_fail(SP_EINVAL, "sp_ref_build: weights were built for another model");
    if (m->positions == SP_POS_LEARNED && max_ctx > m->max_context)
        return spi_fail(SP_EINVAL, "sp_ref_build: max_ctx %lld exceeds the learned positions table (%lld)",
                        (long long)max_ctx, (long long)m->max_context);
    if (m->positions == SP_POS_ROPE && m->d_head % 2)
        return spi_fail(SP_EINVAL, "sp_ref_build: RoPE needs an even d_head (%lld)", (long long)m->d_head);
    sp_ref *r = calloc(1, sizeof *r);
    if (!r) return spi_fail(SP_ENOMEM, "sp_ref_build: out of memory");
    r->rope_scale = 1.0;
    if (m->positions == SP_POS_ROPE) {
        sp_status st = (r->inv_freq = malloc((size_t)(sp_model_rotary_dims(m) / 2) * sizeof *r->inv_freq))
                           ? sp_model_rope_freqs(m, max_ctx, r->inv_freq, &r->rope_scale)
                           : spi_fail(SP_ENOMEM, "sp_ref_build: out of memory");
        if (st) {
            free(r->inv_freq);
            free(r);
            return st;
        }
    }
    r->m = *m;
    r->w = w;
    r->B = B;
    r->max_ctx = max_ctx;
    int64_t T = B * max_ctx, E = m->d_model, F = m->d_ff, QD = m->n_heads * m->d_head, KD = m->n_kv_heads * m->d_head;
    size_t cache = (size_t)(m->n_layers * B * max_ctx * KD);
    r->kc = calloc(cache, sizeof(float));
    r->vc = calloc(cache, sizeof(float));
    r->x = malloc((size_t)(T * E) * sizeof(float));
    r->h = malloc((size_t)(T * E) * sizeof(float));
    r->q = malloc((size_t)(T * QD) * sizeof(float));
    r->k = malloc((size_t)(T * KD) * sizeof(float));
    r->v = malloc((size_t)(T * KD) * sizeof(float));
    r->att = malloc((size_t)(T * QD) * sizeof(float));
    r->ao = malloc((size_t)(T * E) * sizeof(float));
    r->fo = malloc((size_t)(T * E) * sizeof(float));
    int64_t Fs = sp_model_shared_ff(m), Fd = sp_model_dense_ff(m), Fmax = Fs > F ? Fs : F;
    if (Fd > Fmax) Fmax = Fd;
    r->fa = malloc((size_t)(T * Fmax) * sizeof(float));
    r->fb = malloc((size_t)(T * Fmax) * sizeof(float));
    r->sc = malloc((size_t)max_ctx * sizeof(float));
    int moe_bad = 0;
    if (m->n_experts > 0) {
        r->rl = malloc((size_t)(T * m->n_experts) * sizeof *r->rl);
        r->route = malloc((size_t)(T * m->top_k) * sizeof *r->route);
        r->counts = malloc((size_t)m->n_experts * sizeof *r->counts);
        r->eo = malloc((size_t)E * sizeof *r->eo);
        moe_bad = !r->rl || !r->route || !r->counts || !r->eo;
        if (Fs > 0) {
            r->so = malloc((size_t)(T * E) * sizeof *r->so);
            moe_bad |= !r->so;
        }
    }
    if (!r->kc || !r->vc || !r->x || !r->h || !r->q || !r->k || !r->v || !r->att || !r->ao || !r->fo || !r->fa ||
        !r->fb || !r->sc || moe_bad) {
        sp_ref_free(r);
        return spi_fail(SP_ENOMEM, "sp_ref_build: out of memory for B=%lld max_ctx=%lld", (long long)B,
                        (long long)max_ctx);
    }
    *out = r;
    return SP_OK;
}

void sp_ref_free(sp_ref *r)
{
    if (!r) return;
    float *bufs[] = {r->kc, r->vc, r->x, r->h, r->q, r->k, r->v, r->att, r->ao, r->fo, r->fa, r->fb, r->sc, r->rl, r->eo, r->so};
    for (size_t i = 0; i < SPI_ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(r->route);
    free(r->counts);
    free(r->inv_freq);
    free(r);
}

void sp_ref_reset(sp_ref *r) { r->pos = 0; }
int64_t sp_ref_pos(const sp_ref *r) { return r->pos; }

/* attention block for layer l on r->h (T, E) -> r->ao (T, E) */
static void attention(sp_ref *r, int64_t l, int64_t L)
{
    const sp_model *m = &r->m;
    const sp_weights_layer *W = &r->w->layers[l];
    int64_t B = r->B, T = B * L, E = m->d_model, H = m->n_heads, KVH = m->n_kv_heads, D = m->d_head;
    int64_t QD = H * D, KD = KVH * D, kv_mul = H / KVH;
    mm(r->q, r->h, W->wq, W->bq, T, E, QD);
    mm(r->k, r->h, W->wk, W->bk, T, E, KD);
    mm(r->v, r->h, W->wv, W->bv, T, E, KD);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < L; i++) {
            int64_t t = b * L + i, p = r->pos + i;
            if (m->positions == SP_POS_ROPE) {
                int64_t R = sp_model_rotary_dims(m);
                for (int64_t h = 0; h < H; h++) rope(r->q + t * QD + h * D, R, p, r->inv_freq, r->rope_scale);
                for (int64_t h = 0; h < KVH; h++) rope(r->k + t * KD + h * D, R, p, r->inv_freq, r->rope_scale);
            }
            float *kd = r->kc + ((l * B + b) * r->max_ctx + p) * KD;   // (KVH, D)
            float *vd = r->vc + ((l * B + b) * r->max_ctx + p) * KD;
            memcpy(kd, r->k + t * KD, (size_t)KD * sizeof(float));
            memcpy(vd, r->v + t * KD, (size_t)KD * sizeof(float));
        }
    }
    double scale = 1.0 / sqrt((double)D);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < L; i++) {
            int64_t t = b * L + i, n = r->pos + i + 1;
            for (int64_t h = 0; h < H; h++) {
                const float *qv = r->q + t * QD + h * D;
                int64_t kh = h / kv_mul;
                float mx = -INFINITY;
                for (int64_t j = 0; j < n; j++) {
                    const float *kv = r->kc + ((l * B + b) * r->max_ctx + j) * KD + kh * D;
                    double s = 0.0;
                    for (int64_t d = 0; d < D; d++) s += (double)qv[d] * kv[d];
                    r->sc[j] = (float)(s * scale);
                    if (r->sc[j] > mx) mx = r->sc[j];
                }
                double sum = 0.0;
                for (int64_t j = 0; j < n; j++) sum += exp((double)r->sc[j] - mx);
                float *o = r->att + t * QD + h * D;
                for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    float p = (float)(exp((double)r->sc[j] - mx) / sum);
                    const float *vv = r->vc + ((l * B + b) * r->max_ctx + j) * KD + kh * D;
                    for (int64_t d = 0; d < D; d++) o[d] += p * vv[d];
                }
            }
        }
    }
    mm(r->ao, r->att, W->wo, W->bo, T, QD, E);
}

/* one FFN (dense, one expert's matrices, or the shared experts' of F hidden units) on in (T, E) -> out (T, E) */
static void ffn_rows(sp_ref *r, const float *in, float *out, int64_t T, int64_t F, const float *w_in, const float *b_in,
                     const float *w_up, const float *b_up, const float *w_out, const float *b_out)
{
    const sp_model *m = &r->m;
    int64_t E = m->d_model;
    mm(r->fa, in, w_in, b_in, T, E, F);
    int gated = m->ffn == SP_FFN_SWIGLU;
    if (gated) mm(r->fb, in, w_up, b_up, T, E, F);
    sp_act_kind act = sp_model_act(m);
    for (int64_t i = 0; i < T * F; i++) {
        double u = r->fa[i], y;
        switch (act) {
        case SP_ACT_GELU: y = 0.5 * u * (1.0 + erf(u / sqrt(2.0))); break;
        case SP_ACT_SILU: y = u / (1.0 + exp(-u)); break;
        case SP_ACT_RELU: y = u > 0 ? u : 0.0; break;
        default: y = 0.5 * u * (1.0 + tanh(sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u))); break;
        }
        r->fa[i] = (float)(gated ? y * r->fb[i] : y);
    }
    mm(out, r->fa, w_out, b_out, T, F, E);
}

/* FFN block for layer l on r->h (T, E) -> r->fo (T, E).  MoE: each token
 * through its top_k experts (expert e's matrices are rows e·E.. of w_in and
 * w_up, e·F.. of w_out), weighted by the router */
static void ffn(sp_ref *r, int64_t l, int64_t T)
{
    const sp_model *m = &r->m;
    const sp_weights_layer *W = &r->w->layers[l];
    int64_t E = m->d_model, F = m->d_ff, NE = m->n_experts, K = m->top_k;
    if (NE > 0 && !sp_model_layer_is_moe(m, l)) {
        /* a dense layer between MoE layers: its own FFN of sp_model_dense_ff hidden units */
        ffn_rows(r, r->h, r->fo, T, sp_model_dense_ff(m), W->d_in, NULL, W->d_up, NULL, W->d_out, NULL);
        return;
    }
    if (NE <= 0) {
        ffn_rows(r, r->h, r->fo, T, F, W->w_in, W->b_in, W->w_up, W->b_up, W->w_out, W->b_out);
        return;
    }
    mm(r->rl, r->h, W->router, NULL, T, E, NE);
    sp_kern_moe_route(r->route, r->rl, T, NE, K, m->router == SP_ROUTER_TOPK_RENORM, r->counts);
    memset(r->fo, 0, (size_t)(T * E) * sizeof *r->fo);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            int64_t e = r->route[t * K + j].expert;
            ffn_rows(r, r->h + t * E, r->eo, 1, F, W->w_in + e * E * F, NULL, W->w_up ? W->w_up + e * E * F : NULL, NULL,
                     W->w_out + e * F * E, NULL);
            for (int64_t c = 0; c < E; c++) r->fo[t * E + c] += r->route[t * K + j].weight * r->eo[c];
        }
    /* the shared experts, on every token, times sigmoid(h · w_gate) with a gate (Qwen2-MoE) */
    int64_t Fs = sp_model_shared_ff(m);
    if (Fs > 0) {
        ffn_rows(r, r->h, r->so, T, Fs, W->sh_in, NULL, W->sh_up, NULL, W->sh_out, NULL);
        for (int64_t t = 0; t < T; t++) {
            double g = 1.0;
            if (m->shared_expert_gate) {
                double z = 0;
                for (int64_t c = 0; c < E; c++) z += (double)r->h[t * E + c] * (double)W->sh_gate[c];
                g = 1.0 / (1.0 + exp(-z));
            }
            for (int64_t c = 0; c < E; c++) r->fo[t * E + c] += (float)(g * r->so[t * E + c]);
        }
    }
}

sp_status sp_ref_forward(sp_ref *r, const int32_t *tokens, int64_t L, float *logits, int which)
{
    const sp_model *m = &r->m;
    const sp_weights *w = r->w;
    int64_t B = r->B, T = B * L, E = m->d_model, V = m->vocab;
    if (L <= 0 || r->pos + L > r->max_ctx)
        return spi_fail(SP_EINVAL, "sp_ref_forward: %lld tokens at position %lld exceed max_ctx %lld", (long long)L,
                        (long long)r->pos, (long long)r->max_ctx);
    // embeddings (+ learned positions)
    for (int64_t t = 0; t < T; t++) {
        int32_t tok = tokens[t];
        if (tok < 0 || tok >= V)
            return spi_fail(SP_EINVAL, "sp_ref_forward: token %d at %lld outside the vocab of %lld", tok, (long long)t,
                            (long long)V);
        for (int64_t e = 0; e < E; e++) r->x[t * E + e] = w->embed[tok * E + e];
        if (m->positions == SP_POS_LEARNED) {
            int64_t p = r->pos + t % L;
            for (int64_t e = 0; e < E; e++) r->x[t * E + e] += w->pos[p * E + e];
        }
    }
    for (int64_t l = 0; l < m->n_layers; l++) {
        const sp_weights_layer *W = &w->layers[l];
        norm(r->h, r->x, T, E, W->attn_norm, W->attn_norm_b, m->norm_eps, m->norm);
        attention(r, l, L);
        if (m->block != SP_BLOCK_SERIAL) {
            // PaLM / GPT-J: x + attn(norm(x)) + ffn(norm(x)), one shared norm;
            // GPT-NeoX (parallel2): x + attn(norm1(x)) + ffn(norm2(x))
            if (m->block == SP_BLOCK_PARALLEL2)
                norm(r->h, r->x, T, E, W->ffn_norm, W->ffn_norm_b, m->norm_eps, m->norm);
            ffn(r, l, T);
            for (int64_t i = 0; i < T * E; i++) r->x[i] += r->ao[i] + r->fo[i];
        } else {
            for (int64_t i = 0; i < T * E; i++) r->x[i] += r->ao[i];
            norm(r->h, r->x, T, E, W->ffn_norm, W->ffn_norm_b, m->norm_eps, m->norm);
            ffn(r, l, T);
            for (int64_t i = 0; i < T * E; i++) r->x[i] += r->fo[i];
        }
    }
    r->pos += L;
    if (!logits) return SP_OK;
    norm(r->h, r->x, T, E, w->final_norm, w->final_norm_b, m->norm_eps, m->norm);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = (which == SP_REF_LAST ? L - 1 : 0); i < L; i++) {
            const float *hv = r->h + (b * L + i) * E;
            float *o = which == SP_REF_LAST ? logits + b * V : logits + (b * L + i) * V;
            for (int64_t v = 0; v < V; v++) {
                const float *row = w->lm_head + v * E;   // (E)
                float s = 0.0f;
                for (int64_t e = 0; e < E; e++) s += hv[e] * row[e];
                o[v] = s;
            }
        }
    }
    return SP_OK;
}

static int32_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

sp_status sp_ref_generate(sp_ref *r, const int32_t *prompt, int64_t P, int64_t G, const sp_kern_sample_opts *sample,
                          int32_t *out)
{
    int64_t B = r->B, V = r->m.vocab;
    if (P <= 0 || G < 0 || P + G - 1 > r->max_ctx)
        return spi_fail(SP_EINVAL, "sp_ref_generate: prompt %lld + generate %lld exceed max_ctx %lld", (long long)P,
                        (long long)G, (long long)r->max_ctx);
    if (G == 0) return SP_OK;
    int greedy = !sample || sample->temperature <= 0.0f;
    float *logits = malloc((size_t)(B * V) * sizeof(float));
    uint64_t *rng = malloc((size_t)B * sizeof *rng);
    int32_t *cur = malloc((size_t)B * sizeof *cur);
    void *scr = greedy ? NULL : malloc(sp_kern_sample_scratch_bytes(V));
    sp_status s = SP_OK;
    if (!logits || !rng || !cur || (!greedy && !scr)) {
        s = spi_fail(SP_ENOMEM, "sp_ref_generate: out of memory");
        goto out;
    }
    for (int64_t b = 0; b < B; b++) rng[b] = (sample ? sample->seed : 0) + (uint64_t)b;
    sp_ref_reset(r);
    SP_CHECKGOTO(sp_ref_forward(r, prompt, P, logits, SP_REF_LAST), s, out);
    for (int64_t g = 0; g < G; g++) {
        if (g > 0) SP_CHECKGOTO(sp_ref_forward(r, cur, 1, logits, SP_REF_LAST), s, out);
        for (int64_t b = 0; b < B; b++) {
            if (greedy) cur[b] = argmax(logits + b * V, V);
            else SP_CHECKGOTO(sp_kern_sample(logits + b * V, V, sample, &rng[b], scr, sp_kern_sample_scratch_bytes(V), &cur[b]), s, out);
            out[b * G + g] = cur[b];
        }
    }
out:
    free(logits);
    free(rng);
    free(cur);
    free(scr);
    return s;
}
