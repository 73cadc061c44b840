/* ops.c: norms, positions, embeddings, LM head, elementwise kernels. */
#include "config.h"
#include <math.h>
#include <string.h>
#include <cblas.h>
#include "spi_common.h"
#include "kernels/cpu/sp_kern.h"

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

sp_status sp_kern_rope(float *x, int64_t T, int64_t nh, int64_t D, const int64_t *pos, double theta)
{
    if (D <= 0 || D % 2 || theta <= 0.0)
        return spi_fail(SP_EINVAL, "sp_kern_rope: d_head %lld must be even and theta %g positive", (long long)D, theta);
    int64_t half = D / 2;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < half; i++) {
            // angle = pos * theta^(-2i/D), rotate pairs (i, i + D/2) of every head
            double ang = (double)pos[t] * pow(theta, -2.0 * (double)i / (double)D);
            float c = (float)cos(ang), s = (float)sin(ang);
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

void sp_kern_pos_add(float *x, int64_t T, int64_t El, const float *table, int64_t ld, const int64_t *pos)
{
    for (int64_t t = 0; t < T; t++) {
        const float *p = table + pos[t] * ld;   // (El)
        float *r = x + t * El;
        for (int64_t j = 0; j < El; j++) r[j] += p[j];
    }
}

sp_status sp_kern_embed(float *out, const int32_t *tokens, int64_t T, const float *table, int64_t ld,
                        int64_t v0, int64_t Vl, int64_t e0, int64_t El)
{
    for (int64_t t = 0; t < T; t++) {
        float *o = out + t * El;   // (El)
        int64_t tok = tokens[t];
        if (tok < 0) return spi_fail(SP_EINVAL, "sp_kern_embed: token %lld at %lld is negative", (long long)tok, (long long)t);
        if (tok < v0 || tok >= v0 + Vl) {
            memset(o, 0, (size_t)El * sizeof *o);
        } else {
            memcpy(o, table + (tok - v0) * ld + e0, (size_t)El * sizeof *o);
        }
    }
    return SP_OK;
}

void sp_kern_logits(float *logits, const float *x, const float *table, int64_t ld, int64_t T, int64_t E, int64_t Vl)
{
    if (T <= 0 || Vl <= 0) return;
    // logits (T, Vl) = x (T, E) . table (Vl, E)^T; one row: gemv streams the table
    if (T == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)Vl, (int)E, 1.0f, table, (int)ld, x, 1, 0.0f, logits, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)Vl, (int)E, 1.0f, x, (int)E, table, (int)ld,
                0.0f, logits, (int)Vl);
}

void sp_kern_gelu(float *out, const float *x, int64_t n)
{
    const float k = 0.7978845608028654f;   // sqrt(2/pi)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        out[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
}

void sp_kern_swiglu(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void sp_kern_add(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] += x[i];
}
