/* check_kern.c: every CPU kernel against naive loops. */
#include "config.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/sp_kern.h"
#include "exec/sp_weights.h"

static uint64_t g_rng = 42;

static float frand(void) { return sp_kern_rng_float(&g_rng) * 2.0f - 1.0f; }

static float *rand_buf(int64_t n)
{
    float *p = malloc((size_t)n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (int64_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

/* max |a - b| / max(max |b|, tiny); prints the first few values on failure (llm.c check_tensor) */
static double rel_err(const float *a, const float *b, int64_t n, const char *what)
{
    double md = 0.0, mb = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    double r = md / mb;
    if (r > 1e-5) {
        fprintf(stderr, "%s: max rel diff %g\n", what, r);
        for (int64_t i = 0; i < n && i < 5; i++) fprintf(stderr, "  [%lld] got %.8g want %.8g\n", (long long)i, a[i], b[i]);
    }
    return r;
}

/* ---- matmul ------------------------------------------------------------------------- */

/* out (T, N) (+)= in (T, K) . W (K, ld)[:, :N] + bias, in double */
static void naive_mm(float *out, const float *in, const float *W, int64_t ld, const float *bias, int64_t T, int64_t K,
                     int64_t N, int acc)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double s = acc ? out[t * N + n] : 0.0;
            for (int64_t k = 0; k < K; k++) s += (double)in[t * K + k] * W[k * ld + n];
            out[t * N + n] = (float)(s + (bias ? bias[n] : 0.0f));
        }
}

START_TEST(test_matmul_f32)
{
    int64_t T = 7, K = 33, N = 19, ld = 40;
    float *in = rand_buf(T * K), *W = rand_buf(K * ld), *bias = rand_buf(N), *out = rand_buf(T * N);
    float *ref = malloc((size_t)(T * N) * sizeof *ref);
    memcpy(ref, out, (size_t)(T * N) * sizeof *ref);
    sp_kern_wview w = {SP_DT_F32, W, ld, NULL};
    ck_assert_uint_eq(sp_kern_matmul_scratch_bytes(&w, K, N), 0);
    ck_assert_int_eq(sp_kern_matmul(out, in, &w, bias, T, K, N, SP_KERN_ACCUMULATE, NULL, 0), SP_OK);
    naive_mm(ref, in, W, ld, bias, T, K, N, 1);
    ck_assert(rel_err(out, ref, T * N, "f32 accumulate") < 1e-5);
    ck_assert_int_eq(sp_kern_matmul(out, in, &w, NULL, T, K, N, SP_KERN_OVERWRITE, NULL, 0), SP_OK);
    naive_mm(ref, in, W, ld, NULL, T, K, N, 0);
    ck_assert(rel_err(out, ref, T * N, "f32 overwrite") < 1e-5);
    /* bad ld */
    sp_kern_wview bad = {SP_DT_F32, W, N - 1, NULL};
    ck_assert_int_eq(sp_kern_matmul(out, in, &bad, NULL, T, K, N, 0, NULL, 0), SP_EINVAL);
    free(in); free(W); free(bias); free(out); free(ref);
}
END_TEST

/* Quantised matmul of a sub-block (rows [r0, r0+K), cols [c0, c0+N)) of a global
 * matrix against fp32 of the round-tripped weights.  Shapes cross tile edges. */
static const sp_dtype qdts[] = {SP_DT_BF16, SP_DT_INT8, SP_DT_F16, SP_DT_FP8};

START_TEST(test_matmul_quant)
{
    sp_dtype dt = qdts[_i];
    int64_t GK = 600, GN = 2300, r0 = 40, c0 = 70, K = 530, N = 2150;   /* N past one 2048-column block */
    float *Wg = rand_buf(GK * GN);   // (GK, GN) global
    int64_t Ts[] = {1, 5, 64};
    int eb = sp_dtype_bytes(dt);
    void *q = malloc((size_t)(K * N * eb));
    float *scale = malloc((size_t)N * sizeof *scale);
    ck_assert_int_eq(sp_weights_quant_block(Wg, GK, GN, r0, r0 + K, c0, c0 + N, dt, NULL, q, scale), SP_OK);
    /* round trip of the same block, as sp_weights_quantize computes it */
    float *Wr = malloc((size_t)(K * N) * sizeof *Wr);   // (K, N)
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) {
            int64_t i = k * N + n;
            switch (dt) {
            case SP_DT_BF16: Wr[i] = sp_kern_bf16_to_f32(((uint16_t *)q)[i]); break;
            case SP_DT_F16: Wr[i] = sp_kern_f16_to_f32(((uint16_t *)q)[i]); break;
            case SP_DT_INT8: Wr[i] = (float)((int8_t *)q)[i] * scale[n]; break;
            default: Wr[i] = sp_kern_fp8_to_f32(((uint8_t *)q)[i]) * scale[n]; break;
            }
            /* quantisation error bounded by the format */
            double x = Wg[(r0 + k) * GN + c0 + n], tol;
            if (dt == SP_DT_BF16) tol = fabs(x) / 256.0;
            else if (dt == SP_DT_F16) tol = fabs(x) / 2048.0 + 1e-7;
            else if (dt == SP_DT_INT8) tol = scale[n] * 0.5 * 1.0001;
            else tol = fabs(x) / 16.0 + scale[n] * 0.002;
            ck_assert_msg(fabs(Wr[i] - x) <= tol, "%s quant error %g > %g", sp_dtype_name(dt), fabs(Wr[i] - x), tol);
        }
    /* view into a larger stored matrix: ld > N, columns past N must be ignored */
    int64_t ld = N + 9;
    void *qs = calloc((size_t)(K * ld), (size_t)eb);
    for (int64_t k = 0; k < K; k++) memcpy((char *)qs + k * ld * eb, (char *)q + k * N * eb, (size_t)(N * eb));
    sp_kern_wview w = {dt, qs, ld, scale};
    size_t sb = sp_kern_matmul_scratch_bytes(&w, K, N);
    ck_assert_uint_gt(sb, 0);
    void *scr = malloc(sb);
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        int64_t T = Ts[ti];
        float *in = rand_buf(T * K), *bias = rand_buf(N);
        float *out = malloc((size_t)(T * N) * sizeof *out), *ref = malloc((size_t)(T * N) * sizeof *ref);
        ck_assert_int_eq(sp_kern_matmul(out, in, &w, bias, T, K, N, SP_KERN_OVERWRITE, scr, sb), SP_OK);
        naive_mm(ref, in, Wr, N, bias, T, K, N, 0);
        char what[64];
        snprintf(what, sizeof what, "%s T=%lld", sp_dtype_name(dt), (long long)T);
        ck_assert(rel_err(out, ref, T * N, what) < 1e-5);
        /* accumulate: out (already in * W + bias) gains in * W + bias again */
        for (int64_t i = 0; i < T * N; i++) ref[i] *= 2.0f;
        ck_assert_int_eq(sp_kern_matmul(out, in, &w, bias, T, K, N, SP_KERN_ACCUMULATE, scr, sb), SP_OK);
        snprintf(what, sizeof what, "%s T=%lld accumulate", sp_dtype_name(dt), (long long)T);
        ck_assert(rel_err(out, ref, T * N, what) < 1e-5);
        /* less scratch narrows the tile to the columns that fit, down to one, with the same
         * results; less than one column of min(K, 256) rows is refused */
        size_t one_col = (size_t)(K < 256 ? K : 256) * sizeof(float);
        ck_assert_int_eq(sp_kern_matmul(out, in, &w, bias, T, K, N, SP_KERN_OVERWRITE, scr, one_col), SP_OK);
        for (int64_t i = 0; i < T * N; i++) ref[i] *= 0.5f;
        snprintf(what, sizeof what, "%s T=%lld one-column tile", sp_dtype_name(dt), (long long)T);
        ck_assert(rel_err(out, ref, T * N, what) < 1e-5);
        ck_assert_int_eq(sp_kern_matmul(out, in, &w, bias, T, K, N, SP_KERN_OVERWRITE, scr, one_col - 4), SP_EINVAL);
        free(in); free(bias); free(out); free(ref);
    }
    sp_kern_wview noscale = {dt, qs, ld, NULL};
    if (dt == SP_DT_INT8 || dt == SP_DT_FP8) {
        float o[1], x[1] = {0};
        ck_assert_int_eq(sp_kern_matmul(o, x, &noscale, NULL, 1, K, N, 0, scr, sb), SP_EINVAL);
    }
    free(Wg); free(q); free(qs); free(scale); free(Wr); free(scr);
}
END_TEST

START_TEST(test_conversions)
{
    /* bf16 round to nearest even, NaN kept */
    ck_assert_uint_eq(sp_kern_f32_to_bf16(1.0f), 0x3f80);
    ck_assert(sp_kern_bf16_to_f32(sp_kern_f32_to_bf16(1.0f + 1.0f / 256.0f)) == 1.0f);   /* tie -> even */
    ck_assert(sp_kern_bf16_to_f32(sp_kern_f32_to_bf16(1.0f + 3.0f / 256.0f)) == 1.0f + 4.0f / 256.0f);
    ck_assert(isnan(sp_kern_bf16_to_f32(sp_kern_f32_to_bf16(NAN))));
    /* f16 */
    float vals[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.0e-8f, 1e-3f, 0.333f};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        float r = sp_kern_f16_to_f32(sp_kern_f32_to_f16(vals[i]));
        ck_assert_msg(fabsf(r - vals[i]) <= fabsf(vals[i]) / 1024.0f + 6e-8f, "f16 %g -> %g", vals[i], r);
    }
    ck_assert_uint_eq(sp_kern_f32_to_f16(1.0f), 0x3c00);
    /* fp8 e4m3: every finite code round-trips */
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        float f = sp_kern_fp8_to_f32((uint8_t)c);
        uint8_t back = sp_kern_f32_to_fp8(f);
        ck_assert_msg(back == c || (f == 0.0f && (back & 0x7f) == 0), "fp8 code %d -> %g -> %d", c, f, back);
    }
    ck_assert(sp_kern_fp8_to_f32(0x7e) == 448.0f);
}
END_TEST

/* ---- norms ---------------------------------------------------------------------------- */

static void naive_norm(float *out, const float *x, int64_t T, int64_t C, const float *g, const float *b, float eps,
                       sp_norm_kind kind)
{
    for (int64_t t = 0; t < T; t++) {
        double mean = 0, var = 0;
        if (kind == SP_NORM_LAYERNORM) {
            for (int64_t c = 0; c < C; c++) mean += x[t * C + c];
            mean /= C;
        }
        for (int64_t c = 0; c < C; c++) var += (x[t * C + c] - mean) * (x[t * C + c] - mean);
        var /= C;
        for (int64_t c = 0; c < C; c++)
            out[t * C + c] = (float)((x[t * C + c] - mean) / sqrt(var + eps) * g[c] + (b ? b[c] : 0.0));
    }
}

START_TEST(test_norm_plain_and_sharded)
{
    int64_t T = 5, C = 96;
    float eps = 1e-5f;
    float *x = rand_buf(T * C), *g = rand_buf(C), *b = rand_buf(C);
    for (int64_t i = 0; i < T * C; i++) x[i] += 0.3f;   /* non-zero mean */
    float *out = malloc((size_t)(T * C) * 4), *ref = malloc((size_t)(T * C) * 4), *sh = malloc((size_t)(T * C) * 4);
    float stats[2 * 5];
    for (int kind = 0; kind < SP_NORM_COUNT; kind++) {
        const float *bias = kind == SP_NORM_LAYERNORM ? b : NULL;
        sp_kern_norm(x, T, C, g, bias, eps, (sp_norm_kind)kind, stats, out);
        naive_norm(ref, x, T, C, g, bias, eps, (sp_norm_kind)kind);
        ck_assert(rel_err(out, ref, T * C, "plain norm") < 1e-5);
        /* sharded: 3 chips of 40, 32, 24 columns; stats summed = all-reduce */
        int64_t parts[] = {40, 32, 24}, off[] = {0, 40, 72};
        float *xs[3], ps[3][10], sum[10] = {0};
        for (int p = 0; p < 3; p++) {
            xs[p] = malloc((size_t)(T * parts[p]) * 4);
            for (int64_t t = 0; t < T; t++) memcpy(xs[p] + t * parts[p], x + t * C + off[p], (size_t)parts[p] * 4);
            sp_kern_norm_stats(xs[p], T, parts[p], ps[p]);
            for (int i = 0; i < 2 * T; i++) sum[i] += ps[p][i];
        }
        for (int p = 0; p < 3; p++) {
            float *o = malloc((size_t)(T * parts[p]) * 4);
            sp_kern_norm_apply(xs[p], sum, C, T, parts[p], g + off[p], bias ? bias + off[p] : NULL, eps,
                               (sp_norm_kind)kind, o);
            for (int64_t t = 0; t < T; t++) memcpy(sh + t * C + off[p], o + t * parts[p], (size_t)parts[p] * 4);
            free(o);
            free(xs[p]);
        }
        ck_assert(rel_err(sh, out, T * C, "sharded norm") < 1e-5);
    }
    /* in place */
    memcpy(sh, x, (size_t)(T * C) * 4);
    sp_kern_norm(sh, T, C, g, NULL, eps, SP_NORM_RMSNORM, stats, sh);
    naive_norm(ref, x, T, C, g, NULL, eps, SP_NORM_RMSNORM);
    ck_assert(rel_err(sh, ref, T * C, "in-place rmsnorm") < 1e-5);
    free(x); free(g); free(b); free(out); free(ref); free(sh);
}
END_TEST

/* ---- positions ----------------------------------------------------------------------------- */

START_TEST(test_rope)
{
    int64_t T = 3, nh = 2, D = 8;
    int64_t pos[] = {0, 5, 1000};
    double theta = 10000.0;
    float *x = rand_buf(T * nh * D), *y = malloc((size_t)(T * nh * D) * 4);
    memcpy(y, x, (size_t)(T * nh * D) * 4);
    ck_assert_int_eq(sp_kern_rope(y, T, nh, D, pos, theta), SP_OK);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < D / 2; i++) {
                /* (a + ib) * e^{i pos w}, w = theta^(-2i/D) */
                const float *v = x + (t * nh + h) * D;
                double w = 1.0 / pow(theta, 2.0 * i / D), a = v[i], b = v[i + D / 2];
                double re = a * cos(pos[t] * w) - b * sin(pos[t] * w), im = a * sin(pos[t] * w) + b * cos(pos[t] * w);
                const float *o = y + (t * nh + h) * D;
                ck_assert_double_eq_tol(o[i], re, 1e-5);
                ck_assert_double_eq_tol(o[i + D / 2], im, 1e-5);
            }
    ck_assert_int_eq(sp_kern_rope(y, T, nh, 7, pos, theta), SP_EINVAL);
    /* learned positions */
    float table[4 * 3] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
    float z[2 * 2] = {0};
    int64_t p2[] = {2, 0};
    sp_kern_pos_add(z, 2, 2, table + 1, 3, p2);   /* columns [1, 3) */
    ck_assert(z[0] == 21 && z[1] == 22 && z[2] == 1 && z[3] == 2);
    free(x); free(y);
}
END_TEST

/* ---- attention ---------------------------------------------------------------------------- */

typedef struct attn_case { int64_t H, KVH, h0, Hl; } attn_case;
static const attn_case attn_cases[] = {
    {4, 4, 0, 4}, {4, 4, 1, 2},      /* MHA: full, heads 1..2 */
    {8, 2, 0, 8}, {8, 2, 2, 4}, {8, 2, 4, 2}, {8, 2, 3, 3}, /* GQA: slices crossing kv groups */
    {4, 1, 0, 4}, {4, 1, 2, 1},      /* MQA */
};

/* naive: full q (B, Lq, H, D), cache (B, ctx, KVH, D) */
static void naive_attn(float *out, const float *q, const float *k, const float *v, int64_t B, int64_t Lq, int64_t ctx,
                       int64_t pos0, int64_t H, int64_t KVH, int64_t D)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Lq; i++)
            for (int64_t h = 0; h < H; h++) {
                int64_t kh = h / (H / KVH), n = pos0 + i + 1;
                double sc[64], mx = -1e300, sum = 0;
                for (int64_t j = 0; j < n; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += (double)q[((b * Lq + i) * H + h) * D + d] * k[((b * ctx + j) * KVH + kh) * D + d];
                    sc[j] = s / sqrt((double)D);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int64_t j = 0; j < n; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    for (int64_t j = 0; j < n; j++) o += sc[j] / sum * v[((b * ctx + j) * KVH + kh) * D + d];
                    out[((b * Lq + i) * H + h) * D + d] = (float)o;
                }
            }
}

START_TEST(test_attention_slices)
{
    attn_case c = attn_cases[_i];
    int64_t B = 2, Lq = 3, pos0 = 4, ctx = 10, D = 8, H = c.H, KVH = c.KVH, kv_mul = H / KVH;
    float *q = rand_buf(B * Lq * H * D);
    float *k_all = rand_buf(B * (pos0 + Lq) * KVH * D), *v_all = rand_buf(B * (pos0 + Lq) * KVH * D);
    /* full cache filled by two appends: prefix pos0 tokens, then Lq new ones */
    float *kc = calloc((size_t)(B * ctx * KVH * D), 4), *vc = calloc((size_t)(B * ctx * KVH * D), 4);
    sp_kern_kv kv = {SP_DT_F32, kc, vc, B, ctx, KVH, D};
    float *kp = malloc((size_t)(B * pos0 * KVH * D) * 4), *vp = malloc((size_t)(B * pos0 * KVH * D) * 4);
    float *kn = malloc((size_t)(B * Lq * KVH * D) * 4), *vn = malloc((size_t)(B * Lq * KVH * D) * 4);
    int64_t row = KVH * D;
    for (int64_t b = 0; b < B; b++) {
        memcpy(kp + b * pos0 * row, k_all + b * (pos0 + Lq) * row, (size_t)(pos0 * row) * 4);
        memcpy(vp + b * pos0 * row, v_all + b * (pos0 + Lq) * row, (size_t)(pos0 * row) * 4);
        memcpy(kn + b * Lq * row, k_all + (b * (pos0 + Lq) + pos0) * row, (size_t)(Lq * row) * 4);
        memcpy(vn + b * Lq * row, v_all + (b * (pos0 + Lq) + pos0) * row, (size_t)(Lq * row) * 4);
    }
    ck_assert_int_eq(sp_kern_kv_append(&kv, kp, vp, pos0, 0), SP_OK);
    ck_assert_int_eq(sp_kern_kv_append(&kv, kn, vn, Lq, pos0), SP_OK);
    ck_assert_int_eq(sp_kern_kv_append(&kv, kn, vn, Lq, ctx - 1), SP_EINVAL);
    float *ref = malloc((size_t)(B * Lq * H * D) * 4);
    naive_attn(ref, q, kc, vc, B, Lq, ctx, pos0, H, KVH, D);
    size_t sb = sp_kern_attention_scratch_bytes(ctx);
    void *scr = malloc(sb);
    /* local slice: query heads [h0, h0+Hl), kv heads they need */
    int64_t kv0 = c.h0 / kv_mul, kv1 = (c.h0 + c.Hl - 1) / kv_mul + 1, KVHl = kv1 - kv0;
    float *ql = malloc((size_t)(B * Lq * c.Hl * D) * 4), *ol = malloc((size_t)(B * Lq * c.Hl * D) * 4);
    for (int64_t t = 0; t < B * Lq; t++)
        memcpy(ql + t * c.Hl * D, q + (t * H + c.h0) * D, (size_t)(c.Hl * D) * 4);
    float *kl = malloc((size_t)(B * ctx * KVHl * D) * 4), *vl = malloc((size_t)(B * ctx * KVHl * D) * 4);
    for (int64_t r = 0; r < B * ctx; r++) {
        memcpy(kl + r * KVHl * D, kc + (r * KVH + kv0) * D, (size_t)(KVHl * D) * 4);
        memcpy(vl + r * KVHl * D, vc + (r * KVH + kv0) * D, (size_t)(KVHl * D) * 4);
    }
    sp_kern_kv kvl = {SP_DT_F32, kl, vl, B, ctx, KVHl, D};
    ck_assert_int_eq(sp_kern_attention(ol, ql, &kvl, Lq, pos0, H, KVH, c.h0, c.Hl, kv0, scr, sb), SP_OK);
    float *rl = malloc((size_t)(B * Lq * c.Hl * D) * 4);
    for (int64_t t = 0; t < B * Lq; t++) memcpy(rl + t * c.Hl * D, ref + (t * H + c.h0) * D, (size_t)(c.Hl * D) * 4);
    ck_assert(rel_err(ol, rl, B * Lq * c.Hl * D, "attention slice") < 1e-5);
    /* a cache missing a needed kv head is refused */
    if (kv0 + 1 < KVH) {
        sp_kern_kv wrong = {SP_DT_F32, kl, vl, B, ctx, KVHl, D};
        ck_assert_int_eq(sp_kern_attention(ol, ql, &wrong, Lq, pos0, H, KVH, c.h0, c.Hl, kv0 + 1, scr, sb), SP_EINVAL);
    }
    /* BF16 cache: close to fp32 */
    uint16_t *kb = malloc((size_t)(B * ctx * KVHl * D) * 2), *vb = malloc((size_t)(B * ctx * KVHl * D) * 2);
    sp_kern_kv kvb = {SP_DT_BF16, kb, vb, B, ctx, KVHl, D};
    float *kpl = malloc((size_t)(B * (pos0 + Lq) * KVHl * D) * 4), *vpl = malloc((size_t)(B * (pos0 + Lq) * KVHl * D) * 4);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < pos0 + Lq; j++) {
            memcpy(kpl + (b * (pos0 + Lq) + j) * KVHl * D, kl + (b * ctx + j) * KVHl * D, (size_t)(KVHl * D) * 4);
            memcpy(vpl + (b * (pos0 + Lq) + j) * KVHl * D, vl + (b * ctx + j) * KVHl * D, (size_t)(KVHl * D) * 4);
        }
    ck_assert_int_eq(sp_kern_kv_append(&kvb, kpl, vpl, pos0 + Lq, 0), SP_OK);
    float *ob = malloc((size_t)(B * Lq * c.Hl * D) * 4);
    ck_assert_int_eq(sp_kern_attention(ob, ql, &kvb, Lq, pos0, H, KVH, c.h0, c.Hl, kv0, scr, sb), SP_OK);
    for (int64_t i = 0; i < B * Lq * c.Hl * D; i++) ck_assert_double_eq_tol(ob[i], rl[i], 2e-2);
    free(q); free(k_all); free(v_all); free(kc); free(vc); free(kp); free(vp); free(kn); free(vn); free(ref);
    free(scr); free(ql); free(ol); free(kl); free(vl); free(rl); free(kb); free(vb); free(kpl); free(vpl); free(ob);
}
END_TEST

/* ---- elementwise, embeddings, logits ------------------------------------------------------- */

START_TEST(test_elementwise)
{
    int64_t n = 50;
    float *x = rand_buf(n), *y = rand_buf(n), *o = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] *= 4.0f;
    sp_kern_gelu(o, x, n);
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], want = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        ck_assert_double_eq_tol(o[i], want, 1e-6);
    }
    sp_kern_swiglu(o, x, y, n);
    for (int64_t i = 0; i < n; i++) ck_assert_double_eq_tol(o[i], x[i] / (1 + exp(-(double)x[i])) * y[i], 1e-6);
    memcpy(o, x, (size_t)n * 4);
    sp_kern_add(o, y, n);
    for (int64_t i = 0; i < n; i++) ck_assert(o[i] == x[i] + y[i]);
    free(x); free(y); free(o);
}
END_TEST

START_TEST(test_embed_logits)
{
    int64_t V = 11, E = 6, T = 5;
    float *tab = rand_buf(V * E);
    int32_t tok[] = {0, 10, 3, 7, 3};
    float full[5 * 6], sum[5 * 6] = {0}, part[5 * 6];
    ck_assert_int_eq(sp_kern_embed(full, tok, T, tab, E, 0, V, 0, E), SP_OK);
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = 0; e < E; e++) ck_assert(full[t * E + e] == tab[tok[t] * E + e]);
    /* vocab shards [0,4) [4,8) [8,11): sum = full */
    int64_t v0s[] = {0, 4, 8}, vls[] = {4, 4, 3};
    for (int s = 0; s < 3; s++) {
        ck_assert_int_eq(sp_kern_embed(part, tok, T, tab + v0s[s] * E, E, v0s[s], vls[s], 0, E), SP_OK);
        for (int i = 0; i < T * E; i++) sum[i] += part[i];
    }
    for (int i = 0; i < T * E; i++) ck_assert(sum[i] == full[i]);
    /* column shard [2, 5) */
    ck_assert_int_eq(sp_kern_embed(part, tok, T, tab, E, 0, V, 2, 3), SP_OK);
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = 0; e < 3; e++) ck_assert(part[t * 3 + e] == tab[tok[t] * E + 2 + e]);
    int32_t neg = -1;
    ck_assert_int_eq(sp_kern_embed(part, &neg, 1, tab, E, 0, V, 0, E), SP_EINVAL);
    /* logits of a vocab shard [4, 8) */
    float *x = rand_buf(T * E), lg[5 * 4];
    sp_kern_logits(lg, x, tab + 4 * E, E, T, E, 4);
    for (int64_t t = 0; t < T; t++)
        for (int64_t v = 0; v < 4; v++) {
            double s = 0;
            for (int64_t e = 0; e < E; e++) s += (double)x[t * E + e] * tab[(4 + v) * E + e];
            ck_assert_double_eq_tol(lg[t * 4 + v], s, 1e-5);
        }
    free(tab); free(x);
}
END_TEST

/* ---- sampling ------------------------------------------------------------------------------ */

START_TEST(test_sampling)
{
    float tie[] = {1.0f, 3.0f, 0.5f, 3.0f};
    ck_assert_int_eq(sp_kern_argmax(tie, 4), 1);
    float nan1[] = {NAN, -1.0f, 2.0f};
    ck_assert_int_eq(sp_kern_argmax(nan1, 3), 2);
    int64_t V = 100;
    float *lg = rand_buf(V);
    for (int64_t i = 0; i < V; i++) lg[i] *= 3.0f;
    int32_t best = sp_kern_argmax(lg, V);
    void *scr = malloc(sp_kern_sample_scratch_bytes(V));
    size_t sb = sp_kern_sample_scratch_bytes(V);
    sp_kern_sample_opts o;
    sp_kern_sample_opts_init(&o);
    int32_t tok;
    uint64_t rng = 7;
    ck_assert_int_eq(sp_kern_sample(lg, V, &o, &rng, scr, sb, &tok), SP_OK);   /* greedy */
    ck_assert_int_eq(tok, best);
    o.temperature = 1.0f;
    o.top_k = 1;
    ck_assert_int_eq(sp_kern_sample(lg, V, &o, &rng, scr, sb, &tok), SP_OK);
    ck_assert_int_eq(tok, best);
    o.top_k = 0;
    o.top_p = 1e-6f;
    ck_assert_int_eq(sp_kern_sample(lg, V, &o, &rng, scr, sb, &tok), SP_OK);
    ck_assert_int_eq(tok, best);
    /* same seed -> same sequence; top-k 3 only ever returns the 3 best */
    o.top_p = 0.9f;
    o.top_k = 3;
    int32_t seq1[200], seq2[200];
    uint64_t r1 = 1234, r2 = 1234;
    int32_t top3[3];
    float tmp[100];
    memcpy(tmp, lg, sizeof tmp);
    for (int j = 0; j < 3; j++) {
        top3[j] = sp_kern_argmax(tmp, V);
        tmp[top3[j]] = -INFINITY;
    }
    int distinct = 0, seen[100] = {0};
    for (int i = 0; i < 200; i++) {
        ck_assert_int_eq(sp_kern_sample(lg, V, &o, &r1, scr, sb, &seq1[i]), SP_OK);
        ck_assert_int_eq(sp_kern_sample(lg, V, &o, &r2, scr, sb, &seq2[i]), SP_OK);
        ck_assert_int_eq(seq1[i], seq2[i]);
        ck_assert(seq1[i] == top3[0] || seq1[i] == top3[1] || seq1[i] == top3[2]);
        if (!seen[seq1[i]]++) distinct++;
    }
    ck_assert_int_ge(distinct, 1);
    /* a different seed gives a different sequence (with near-flat logits) */
    float flat[100];
    for (int i = 0; i < 100; i++) flat[i] = 0.01f * (float)(i % 7);
    sp_kern_sample_opts_init(&o);
    o.temperature = 1.0f;
    r1 = 1; r2 = 2;
    int differ = 0;
    for (int i = 0; i < 50; i++) {
        int32_t a, b;
        sp_kern_sample(flat, 100, &o, &r1, scr, sb, &a);
        sp_kern_sample(flat, 100, &o, &r2, scr, sb, &b);
        differ += a != b;
    }
    ck_assert_int_gt(differ, 0);
    ck_assert_int_eq(sp_kern_sample(lg, V, &o, &r1, scr, 8, &tok), SP_EINVAL);
    free(lg); free(scr);
}
END_TEST

START_TEST(test_blas_threads)
{
    sp_status s = sp_kern_set_blas_threads(1);
    ck_assert(s == SP_OK || s == SP_ENOTSUP);
    ck_assert_int_eq(sp_kern_set_blas_threads(0), SP_EINVAL);
}
END_TEST

static Suite *kern_suite(void)
{
    Suite *s = suite_create("kern");
    TCase *tc = tcase_create("kern");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_matmul_f32);
    tcase_add_loop_test(tc, test_matmul_quant, 0, (int)(sizeof qdts / sizeof *qdts));
    tcase_add_test(tc, test_conversions);
    tcase_add_test(tc, test_norm_plain_and_sharded);
    tcase_add_test(tc, test_rope);
    tcase_add_loop_test(tc, test_attention_slices, 0, (int)(sizeof attn_cases / sizeof *attn_cases));
    tcase_add_test(tc, test_elementwise);
    tcase_add_test(tc, test_embed_logits);
    tcase_add_test(tc, test_sampling);
    tcase_add_test(tc, test_blas_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    sp_kern_set_blas_threads(1);
    SRunner *sr = srunner_create(kern_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
