/* ops.c: norms, positions, embeddings, LM head, elementwise kernels. */
#include "config.h"
#include <math.h>
#include <string.h>
#include "kernels/cpu/spi_blas_dl.h"
#include "spi_common.h"
#include "kernels/cpu/sp_kern.h"
#include "sp_lower.h"   /* SP_ROUTE_BYTES */
#include "kernels/spi_conv.h"

void sp_kern_norm_stats(const float *x, int64_t T, int64_t Cl, float *stats)
{
    for (int64_t t = 0; t < T; t++) {
        const float *r = x + t * Cl;   // (Cl)
        double s = 0.0, ss = 0.0;
        for (int64_t c = 0; c < Cl; c++) {
            s += r[c];
            ss += (double)r[c] * r[c];
        }
        stats[2 * t] = (float)s;
        stats[2 * t + 1] = (float)ss;
    }
}

void sp_kern_norm_apply(const float *x, const float *stats, int64_t C, int64_t T, int64_t Cl,
                        const float *gain, const float *bias, float eps, sp_norm_kind kind, float *out)
{
    for (int64_t t = 0; t < T; t++) {
        const float *r = x + t * Cl;   // (Cl)
        float *o = out + t * Cl;       // (Cl)
        double sumsq = stats[2 * t + 1] / (double)C;
        double mean = 0.0, var;
        if (kind == SP_NORM_LAYERNORM) {
            mean = stats[2 * t] / (double)C;
            var = sumsq - mean * mean;
            if (var < 0.0) var = 0.0;   // cancellation guard
        } else {
            var = sumsq;
        }
        float rstd = (float)(1.0 / sqrt(var + eps)), m = (float)mean;
        for (int64_t c = 0; c < Cl; c++) {
            float y = (r[c] - m) * rstd * gain[c];
            o[c] = bias ? y + bias[c] : y;
        }
    }
}

void sp_kern_norm(const float *x, int64_t T, int64_t C, const float *gain, const float *bias, float eps,
                  sp_norm_kind kind, float *stats, float *out)
{
    sp_kern_norm_stats(x, T, C, stats);
    sp_kern_norm_apply(x, stats, C, T, C, gain, bias, eps, kind, out);
}

sp_status sp_kern_rope_freqs(float *x, int64_t T, int64_t nh, int64_t D, int64_t R, const int64_t *pos,
                             const double *inv_freq, double scale)
{
    if (D <= 0 || R <= 0 || R % 2 || R > D)
        return spi_fail(SP_EINVAL, "sp_kern_rope: rotary dims %lld must be even and at most d_head %lld", (long long)R,
                        (long long)D);
    int64_t half = R / 2;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < half; i++) {
            // rotate pairs (i, i + R/2) of every head
            double ang = (double)pos[t] * inv_freq[i];
            float c = (float)(cos(ang) * scale), s = (float)(sin(ang) * scale);
            for (int64_t h = 0; h < nh; h++) {
                float *v = x + (t * nh + h) * D;   // (D)
                float a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
    return SP_OK;
}

sp_status sp_kern_rope(float *x, int64_t T, int64_t nh, int64_t D, const int64_t *pos, double theta)
{
    double inv[1024];
    if (D <= 0 || D % 2 || D / 2 > (int64_t)(sizeof inv / sizeof inv[0]) || theta <= 0.0)
        return spi_fail(SP_EINVAL, "sp_kern_rope: d_head %lld must be even (<= 2048) and theta %g positive",
                        (long long)D, theta);
    for (int64_t i = 0; i < D / 2; i++) inv[i] = pow(theta, -2.0 * (double)i / (double)D);
    return sp_kern_rope_freqs(x, T, nh, D, D, pos, inv, 1.0);
}

/* dst (n) = fp32 of row `row`, columns [c0, c0 + n) of a table view */
__attribute__((optimize("tree-vectorize"))) static sp_status table_row(float *dst, const sp_kern_wview *t, int64_t row, int64_t c0, int64_t n)
{
    int64_t off = row * t->ld + c0;
    switch (t->dt) {
    case SP_DT_F32: memcpy(dst, (const float *)t->data + off, (size_t)n * sizeof *dst); return SP_OK;
    case SP_DT_BF16: {
        /* bf16 is the top half of an fp32: a shift the compiler vectorises */
        const uint16_t *h = (const uint16_t *)t->data + off;
        uint32_t *du = (uint32_t *)(void *)dst;
        for (int64_t j = 0; j < n; j++) du[j] = spi_bf16_to_f32_bits(h[j]);
        return SP_OK;
    }
    case SP_DT_F16: {
        const uint16_t *h = (const uint16_t *)t->data + off;
        for (int64_t j = 0; j < n; j++) dst[j] = spi_f16_to_f32(h[j]);
        return SP_OK;
    }
    default: return spi_fail(SP_ENOTSUP, "tables are stored f32, bf16 or f16, not %s", sp_dtype_name(t->dt));
    }
}

sp_status sp_kern_pos_add_wv(float *x, int64_t T, int64_t El, const sp_kern_wview *table, int64_t e0,
                             const int64_t *pos)
{
    for (int64_t t = 0; t < T; t++) {
        float *r = x + t * El;   // (El)
        if (table->dt == SP_DT_F32) {
            const float *p = (const float *)table->data + pos[t] * table->ld + e0;
            for (int64_t j = 0; j < El; j++) r[j] += p[j];
        } else {
            for (int64_t j = 0; j < El; j++) {
                float v;
                SP_CHECK(table_row(&v, table, pos[t], e0 + j, 1));
                r[j] += v;
            }
        }
    }
    return SP_OK;
}

void sp_kern_pos_add(float *x, int64_t T, int64_t El, const float *table, int64_t ld, const int64_t *pos)
{
    sp_kern_wview t = {SP_DT_F32, table, ld, NULL};
    (void)sp_kern_pos_add_wv(x, T, El, &t, 0, pos);
}

sp_status sp_kern_embed_wv(float *out, const int32_t *tokens, int64_t T, const sp_kern_wview *table, int64_t v0,
                           int64_t Vl, int64_t e0, int64_t El)
{
    for (int64_t t = 0; t < T; t++) {
        float *o = out + t * El;   // (El)
        int64_t tok = tokens[t];
        if (tok < 0) return spi_fail(SP_EINVAL, "sp_kern_embed: token %lld at %lld is negative", (long long)tok, (long long)t);
        if (tok < v0 || tok >= v0 + Vl) memset(o, 0, (size_t)El * sizeof *o);
        else SP_CHECK(table_row(o, table, tok - v0, e0, El));
    }
    return SP_OK;
}

sp_status sp_kern_embed(float *out, const int32_t *tokens, int64_t T, const float *table, int64_t ld,
                        int64_t v0, int64_t Vl, int64_t e0, int64_t El)
{
    sp_kern_wview t = {SP_DT_F32, table, ld, NULL};
    return sp_kern_embed_wv(out, tokens, T, &t, v0, Vl, e0, El);
}

size_t sp_kern_logits_scratch_bytes(const sp_kern_wview *table, int64_t E)
{
    return table->dt == SP_DT_F32 ? 0 : (size_t)SP_KERN_LOGITS_TILE * (size_t)E * sizeof(float);
}

static void logits_f32(float *logits, const float *x, const float *table, int64_t ld, int64_t T, int64_t E,
                       int64_t Vl, int64_t ldo)
{
    // logits (T, Vl) (row stride ldo) = x (T, E) . table (Vl, E)^T; one row: gemv streams the table
    if (T == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)Vl, (int)E, 1.0f, table, (int)ld, x, 1, 0.0f, logits, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)Vl, (int)E, 1.0f, x, (int)E, table,
                    (int)ld, 0.0f, logits, (int)ldo);
}

sp_status sp_kern_logits_wv(float *logits, const float *x, const sp_kern_wview *table, int64_t T, int64_t E,
                            int64_t Vl, void *scratch, size_t scratch_bytes)
{
    if (T <= 0 || Vl <= 0) return SP_OK;
    SP_CHECK(spi_blas_load());
    if (table->dt == SP_DT_F32) {
        logits_f32(logits, x, (const float *)table->data, table->ld, T, E, Vl, Vl);
        return SP_OK;
    }
    /* as many table rows per tile as the scratch holds, up to SP_KERN_LOGITS_TILE */
    int64_t vt = scratch ? (int64_t)(scratch_bytes / ((size_t)E * sizeof(float))) : 0;
    if (vt > SP_KERN_LOGITS_TILE) vt = SP_KERN_LOGITS_TILE;
    if (vt < 1)
        return spi_fail(SP_EINVAL, "sp_kern_logits_wv: scratch of %zu bytes, at least %zu needed (one row)",
                        scratch_bytes, (size_t)E * sizeof(float));
    float *tile = scratch;   // (vt, E)
    for (int64_t v0 = 0; v0 < Vl; v0 += vt) {
        int64_t vb = Vl - v0 < vt ? Vl - v0 : vt;
        for (int64_t r = 0; r < vb; r++) SP_CHECK(table_row(tile + r * E, table, v0 + r, 0, E));
        if (T == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)vb, (int)E, 1.0f, tile, (int)E, x, 1, 0.0f, logits + v0, 1);
        else
            logits_f32(logits + v0, x, tile, E, T, E, vb, Vl);
    }
    return SP_OK;
}

void sp_kern_logits(float *logits, const float *x, const float *table, int64_t ld, int64_t T, int64_t E, int64_t Vl)
{
    if (T <= 0 || Vl <= 0) return;
    if (spi_blas_load() != SP_OK) {
        /* no BLAS to be had: the plain loops (this function cannot report) */
        for (int64_t t = 0; t < T; t++)
            for (int64_t v = 0; v < Vl; v++) {
                float acc = 0.0f;
                for (int64_t e = 0; e < E; e++) acc += x[t * E + e] * table[v * ld + e];
                logits[t * Vl + v] = acc;
            }
        return;
    }
    logits_f32(logits, x, table, ld, T, E, Vl, Vl);
}

static inline float act1(float v, sp_act_kind kind)
{
    switch (kind) {
    case SP_ACT_GELU: return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
    case SP_ACT_SILU: return v / (1.0f + expf(-v));
    case SP_ACT_RELU: return v > 0.0f ? v : 0.0f;
    default: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));   // sqrt(2/pi)
    }
}

void sp_kern_act(float *out, const float *x, const float *up, int64_t n, sp_act_kind kind)
{
    if (up)
        for (int64_t i = 0; i < n; i++) out[i] = act1(x[i], kind) * up[i];
    else
        for (int64_t i = 0; i < n; i++) out[i] = act1(x[i], kind);
}

void sp_kern_gelu(float *out, const float *x, int64_t n) { sp_kern_act(out, x, NULL, n, SP_ACT_GELU_TANH); }

void sp_kern_swiglu(float *out, const float *gate, const float *up, int64_t n) { sp_kern_act(out, gate, up, n, SP_ACT_SILU); }

void sp_kern_add(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] += x[i];
}

/* ---- mixture of experts ---- */
_Static_assert(sizeof(sp_kern_route) == SP_ROUTE_BYTES, "the lowering sizes the routing buffer by SP_ROUTE_BYTES");
void sp_kern_moe_route(sp_kern_route *route, const float *logits, int64_t T, int64_t n, int64_t k, int renorm,
                       int64_t *counts)
{
    for (int64_t e = 0; e < n; e++) counts[e] = 0;
    for (int64_t t = 0; t < T; t++) {
        const float *lg = logits + t * n;
        sp_kern_route *r = route + t * k;
        double mx = -INFINITY, z = 0, kept = 0;
        for (int64_t e = 0; e < n; e++) mx = lg[e] > mx ? lg[e] : mx;
        for (int64_t e = 0; e < n; e++) z += exp((double)lg[e] - mx);
        for (int64_t j = 0; j < k; j++) {
            /* the largest logit not chosen yet, ties to the lower expert */
            int64_t best = -1;
            for (int64_t e = 0; e < n; e++) {
                int taken = 0;
                for (int64_t i = 0; i < j; i++) taken |= r[i].expert == e;
                if (!taken && (best < 0 || lg[e] > lg[best])) best = e;
            }
            double p = exp((double)lg[best] - mx) / z;
            r[j].expert = (int32_t)best;
            r[j].slot = (int32_t)counts[best]++;
            r[j].weight = (float)p;
            kept += p;
        }
        if (renorm)
            for (int64_t j = 0; j < k; j++) r[j].weight = (float)((double)r[j].weight / kept);
    }
}

sp_status sp_kern_moe_dispatch(float *slots, const float *x, int64_t ldx, const sp_kern_route *route, int64_t T,
                               int64_t C, int64_t k, int64_t n, int64_t S)
{
    memset(slots, 0, (size_t)(n * S * C) * sizeof *slots);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++) {
            const sp_kern_route *r = &route[t * k + j];
            if (r->slot >= S)   /* the layout cannot serve this batch's routing: the request is not met */
                return spi_fail(SP_EINFEASIBLE, "expert %d receives more than %lld of this chip's %lld tokens: over its "
                                "capacity (raise the layout's capacity factor; dropping tokens is not implemented)",
                                r->expert, (long long)S, (long long)T);
            memcpy(slots + ((int64_t)r->expert * S + r->slot) * C, x + t * ldx, (size_t)C * sizeof *x);
        }
    return SP_OK;
}

void sp_kern_sigmoid_scale_rows(float *x, const float *g, int64_t T, int64_t C)
{
    for (int64_t t = 0; t < T; t++) {
        float s = (float)(1.0 / (1.0 + exp(-(double)g[t])));
        for (int64_t c = 0; c < C; c++) x[t * C + c] *= s;
    }
}

void sp_kern_moe_combine(float *y, const float *slots, const sp_kern_route *route, int64_t T, int64_t C, int64_t k,
                         int64_t S, int accumulate)
{
    for (int64_t t = 0; t < T; t++) {
        float *yt = y + t * C;
        if (!accumulate) memset(yt, 0, (size_t)C * sizeof *yt);
        for (int64_t j = 0; j < k; j++) {
            const sp_kern_route *r = &route[t * k + j];
            const float *s = slots + ((int64_t)r->expert * S + r->slot) * C;
            for (int64_t c = 0; c < C; c++) yt[c] += r->weight * s[c];
        }
    }
}
