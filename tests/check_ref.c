/* check_ref.c: the single-chip reference forward pass. */
#include "config.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/sp_ref.h"

enum { M_LLAMA, M_GPT2, M_PALM, M_COUNT };

static sp_model make_model(int kind, int64_t layers)
{
    sp_model m;
    sp_model_init(&m);
    m.n_layers = layers;
    m.d_model = 16;
    m.d_ff = 40;
    m.d_head = 4;
    m.vocab = 37;
    m.max_context = 32;
    m.norm_eps = 1e-5;
    if (kind == M_LLAMA) {
        m.n_heads = 4; m.n_kv_heads = 2;
        m.ffn = SP_FFN_SWIGLU; m.block = SP_BLOCK_SERIAL; m.norm = SP_NORM_RMSNORM; m.positions = SP_POS_ROPE;
    } else if (kind == M_GPT2) {
        m.n_heads = 4; m.n_kv_heads = 4;
        m.ffn = SP_FFN_GELU; m.block = SP_BLOCK_SERIAL; m.norm = SP_NORM_LAYERNORM; m.positions = SP_POS_LEARNED;
        m.tied_embeddings = 1; m.bias = SP_BIAS_ALL;
    } else {
        m.n_heads = 4; m.n_kv_heads = 1;
        m.ffn = SP_FFN_SWIGLU; m.block = SP_BLOCK_PARALLEL; m.norm = SP_NORM_LAYERNORM; m.positions = SP_POS_ROPE;
        m.tied_embeddings = 1;
    }
    return m;
}

static void check_close(const float *a, const float *b, int64_t n, double tol, const char *what)
{
    double md = 0, mb = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mb = fmax(mb, fabs(b[i]));
        ck_assert_msg(isfinite(a[i]), "%s: non-finite at %lld", what, (long long)i);
    }
    ck_assert_msg(md / mb <= tol, "%s: max rel diff %g > %g (first: %g vs %g)", what, md / mb, tol, a[0], b[0]);
}

static void rand_tokens(int32_t *t, int64_t n, int64_t V, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(sp_kern_rng_next(&seed) % (uint64_t)V);
}

/* Prefill P tokens then decode one = one forward over P+1 tokens; and in chunks. */
START_TEST(test_prefill_decode_consistent)
{
    sp_model m = make_model(_i, 2);
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 77, &w), SP_OK);
    int64_t B = 2, P = 6, V = m.vocab;
    sp_ref *r;
    ck_assert_int_eq(sp_ref_build(&m, &w, B, 16, &r), SP_OK);
    int32_t tok[2 * 7];   // (B, P+1)
    rand_tokens(tok, B * (P + 1), V, 5);
    float *all = malloc((size_t)(B * (P + 1) * V) * 4);   // (B, P+1, V)
    ck_assert_int_eq(sp_ref_forward(r, tok, P + 1, all, SP_REF_ALL), SP_OK);
    ck_assert_int_eq(sp_ref_pos(r), P + 1);
    /* prefill P */
    sp_ref_reset(r);
    int32_t pre[2 * 6], nxt[2];
    for (int64_t b = 0; b < B; b++) {
        memcpy(pre + b * P, tok + b * (P + 1), (size_t)P * 4);
        nxt[b] = tok[b * (P + 1) + P];
    }
    float *lp = malloc((size_t)(B * P * V) * 4), last[2 * 37];
    ck_assert_int_eq(sp_ref_forward(r, pre, P, lp, SP_REF_ALL), SP_OK);
    for (int64_t b = 0; b < B; b++) check_close(lp + b * P * V, all + b * (P + 1) * V, P * V, 1e-5, "prefill");
    ck_assert_int_eq(sp_ref_forward(r, nxt, 1, last, SP_REF_LAST), SP_OK);
    for (int64_t b = 0; b < B; b++) check_close(last + b * V, all + (b * (P + 1) + P) * V, V, 1e-4, "decode");
    /* chunks of 3 + 2 + 2, last-token logits */
    sp_ref_reset(r);
    int64_t chunks[] = {3, 2, 2}, at = 0;
    for (int c = 0; c < 3; c++) {
        int32_t ct[2 * 3];
        for (int64_t b = 0; b < B; b++) memcpy(ct + b * chunks[c], tok + b * (P + 1) + at, (size_t)chunks[c] * 4);
        ck_assert_int_eq(sp_ref_forward(r, ct, chunks[c], last, SP_REF_LAST), SP_OK);
        at += chunks[c];
        for (int64_t b = 0; b < B; b++)
            check_close(last + b * V, all + (b * (P + 1) + at - 1) * V, V, 1e-4, "chunked");
    }
    /* a sequence alone (B = 1) gives the same logits as in the batch */
    sp_ref *r1;
    ck_assert_int_eq(sp_ref_build(&m, &w, 1, 16, &r1), SP_OK);
    float *one = malloc((size_t)((P + 1) * V) * 4);
    ck_assert_int_eq(sp_ref_forward(r1, tok + (P + 1), P + 1, one, SP_REF_ALL), SP_OK);
    check_close(one, all + (P + 1) * V, (P + 1) * V, 1e-5, "batch independence");
    /* overflowing the context is refused */
    ck_assert_int_eq(sp_ref_forward(r1, tok, 16, NULL, SP_REF_ALL), SP_EINVAL);
    sp_ref_free(r1);
    free(one); free(all); free(lp);
    sp_ref_free(r);
    sp_weights_free(&w);
}
END_TEST

/* ---- hand-made 1-layer case: one token at position 0, so attention = V projection ---- */

static void hm_mm(double *out, const double *in, const float *W, const float *b, int64_t K, int64_t N)
{
    for (int64_t n = 0; n < N; n++) {
        double s = b ? b[n] : 0;
        for (int64_t k = 0; k < K; k++) s += in[k] * W[k * N + n];
        out[n] = s;
    }
}

static void hm_ln(double *out, const double *x, int64_t C, const float *g, const float *b, double eps)
{
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; c++) mean += x[c];
    mean /= C;
    for (int64_t c = 0; c < C; c++) var += (x[c] - mean) * (x[c] - mean);
    var /= C;
    for (int64_t c = 0; c < C; c++) out[c] = (x[c] - mean) / sqrt(var + eps) * g[c] + b[c];
}

static void hm_ffn(double *out, const double *h, const sp_weights_layer *L, int64_t E, int64_t F)
{
    double u[64];
    hm_mm(u, h, L->w_in, L->b_in, E, F);
    for (int64_t f = 0; f < F; f++) u[f] = 0.5 * u[f] * (1 + tanh(sqrt(2 / M_PI) * (u[f] + 0.044715 * pow(u[f], 3))));
    hm_mm(out, u, L->w_out, L->b_out, F, E);
}

START_TEST(test_parallel_vs_serial_handmade)
{
    /* GELU, LayerNorm, learned positions, biases, MQA (H=2, KVH=1), tied head */
    sp_model m;
    sp_model_init(&m);
    m.n_layers = 1; m.d_model = 4; m.d_ff = 6; m.n_heads = 2; m.n_kv_heads = 1; m.d_head = 2; m.vocab = 5;
    m.max_context = 4; m.ffn = SP_FFN_GELU; m.norm = SP_NORM_LAYERNORM; m.positions = SP_POS_LEARNED;
    m.tied_embeddings = 1; m.bias = SP_BIAS_ALL; m.norm_eps = 1e-5;
    int64_t E = 4, F = 6, V = 5, D = 2;
    float got[2][5];
    double want[2][5];
    for (int par = 0; par < 2; par++) {
        m.block = par ? SP_BLOCK_PARALLEL : SP_BLOCK_SERIAL;
        sp_weights w;
        ck_assert_int_eq(sp_weights_build_random(&m, 3, &w), SP_OK);
        /* make the blocks matter: larger weights than the 0.02 default */
        for (size_t i = 0; i < w.bytes / 4; i++) w.slab[i] *= 20.0f;
        const sp_weights_layer *L = &w.layers[0];
        int32_t tok = 3;
        double x[4], h[4], v[2], att[4], a[4], f[4], x2[4], hf[4];
        for (int64_t e = 0; e < E; e++) x[e] = (double)w.embed[tok * E + e] + w.pos[e];
        hm_ln(h, x, E, L->attn_norm, L->attn_norm_b, m.norm_eps);
        hm_mm(v, h, L->wv, L->bv, E, D);              // one key: softmax = 1, output = v
        for (int64_t hh = 0; hh < 2; hh++) memcpy(att + hh * D, v, sizeof v);   // both heads share kv head 0
        hm_mm(a, att, L->wo, L->bo, 2 * D, E);
        if (par) {
            hm_ffn(f, h, L, E, F);                       // same normed input
            for (int64_t e = 0; e < E; e++) x2[e] = x[e] + a[e] + f[e];
        } else {
            double x1[4], h2[4];
            for (int64_t e = 0; e < E; e++) x1[e] = x[e] + a[e];
            hm_ln(h2, x1, E, L->ffn_norm, L->ffn_norm_b, m.norm_eps);
            hm_ffn(f, h2, L, E, F);
            for (int64_t e = 0; e < E; e++) x2[e] = x1[e] + f[e];
        }
        hm_ln(hf, x2, E, w.final_norm, w.final_norm_b, m.norm_eps);
        for (int64_t vv = 0; vv < V; vv++) {
            want[par][vv] = 0;
            for (int64_t e = 0; e < E; e++) want[par][vv] += hf[e] * w.embed[vv * E + e];
        }
        sp_ref *r;
        ck_assert_int_eq(sp_ref_build(&m, &w, 1, 4, &r), SP_OK);
        ck_assert_int_eq(sp_ref_forward(r, &tok, 1, got[par], SP_REF_LAST), SP_OK);
        for (int64_t vv = 0; vv < V; vv++)
            ck_assert_msg(fabs(got[par][vv] - want[par][vv]) < 1e-4 * (1 + fabs(want[par][vv])),
                          "%s logit %lld: %g vs %g", par ? "parallel" : "serial", (long long)vv, got[par][vv],
                          want[par][vv]);
        sp_ref_free(r);
        sp_weights_free(&w);
    }
    /* the two formulas really differ */
    double d = 0;
    for (int64_t vv = 0; vv < V; vv++) d += fabs(want[0][vv] - want[1][vv]);
    ck_assert(d > 1e-3);
}
END_TEST

START_TEST(test_tiny_deterministic_finite)
{
    sp_model m = make_model(_i, 4);
    m.vocab = 64;
    int64_t B = 2, L = 8, V = m.vocab;
    float *l1 = malloc((size_t)(B * L * V) * 4), *l2 = malloc((size_t)(B * L * V) * 4);
    int32_t tok[16];
    rand_tokens(tok, B * L, V, 9);
    for (int run = 0; run < 3; run++) {
        sp_weights w;
        ck_assert_int_eq(sp_weights_build_random(&m, run < 2 ? 1234 : 99, &w), SP_OK);
        sp_ref *r;
        ck_assert_int_eq(sp_ref_build(&m, &w, B, L, &r), SP_OK);
        ck_assert_int_eq(sp_ref_forward(r, tok, L, run == 0 ? l1 : l2, SP_REF_ALL), SP_OK);
        if (run == 1) ck_assert(memcmp(l1, l2, (size_t)(B * L * V) * 4) == 0);
        if (run == 2) ck_assert(memcmp(l1, l2, (size_t)(B * L * V) * 4) != 0);
        sp_ref_free(r);
        sp_weights_free(&w);
    }
    double ss = 0;
    for (int64_t i = 0; i < B * L * V; i++) {
        ck_assert(isfinite(l1[i]));
        ss += (double)l1[i] * l1[i];
    }
    double rms = sqrt(ss / (double)(B * L * V));
    ck_assert_msg(rms > 1e-3 && rms < 10, "logit rms %g", rms);
    free(l1); free(l2);
}
END_TEST

START_TEST(test_generate)
{
    sp_model m = make_model(_i, 2);
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 4, &w), SP_OK);
    int64_t B = 2, P = 3, G = 5, V = m.vocab;
    sp_ref *r;
    ck_assert_int_eq(sp_ref_build(&m, &w, B, P + G, &r), SP_OK);
    int32_t prompt[6], out[10], chk[10];
    rand_tokens(prompt, B * P, V, 17);
    ck_assert_int_eq(sp_ref_generate(r, prompt, P, G, NULL, out), SP_OK);
    /* by hand: prefill, argmax, decode */
    float lg[2 * 37];
    sp_ref_reset(r);
    ck_assert_int_eq(sp_ref_forward(r, prompt, P, lg, SP_REF_LAST), SP_OK);
    for (int64_t g = 0; g < G; g++) {
        int32_t cur[2];
        for (int64_t b = 0; b < B; b++) chk[b * G + g] = cur[b] = sp_kern_argmax(lg + b * V, V);
        if (g + 1 < G) ck_assert_int_eq(sp_ref_forward(r, cur, 1, lg, SP_REF_LAST), SP_OK);
    }
    ck_assert(memcmp(out, chk, sizeof out) == 0);
    /* sampled: deterministic for a seed */
    sp_kern_sample_opts o;
    sp_kern_sample_opts_init(&o);
    o.temperature = 1.5f;
    o.top_p = 0.95f;
    o.seed = 8;
    int32_t s1[10], s2[10];
    ck_assert_int_eq(sp_ref_generate(r, prompt, P, G, &o, s1), SP_OK);
    ck_assert_int_eq(sp_ref_generate(r, prompt, P, G, &o, s2), SP_OK);
    ck_assert(memcmp(s1, s2, sizeof s1) == 0);
    ck_assert_int_eq(sp_ref_generate(r, prompt, P, G + 2, NULL, out), SP_EINVAL);
    sp_ref_free(r);
    sp_weights_free(&w);
}
END_TEST

START_TEST(test_quantized_close)
{
    sp_model m = make_model(M_LLAMA, 2);
    sp_weights w, wq;
    ck_assert_int_eq(sp_weights_build_random(&m, 21, &w), SP_OK);
    ck_assert_int_eq(sp_weights_build_random(&m, 21, &wq), SP_OK);
    ck_assert_int_eq(sp_weights_quantize(&wq, SP_DT_INT8), SP_OK);
    int32_t tok[4] = {1, 2, 3, 4};
    float a[37], b[37];
    sp_ref *r;
    ck_assert_int_eq(sp_ref_build(&m, &w, 1, 8, &r), SP_OK);
    ck_assert_int_eq(sp_ref_forward(r, tok, 4, a, SP_REF_LAST), SP_OK);
    sp_ref_free(r);
    ck_assert_int_eq(sp_ref_build(&m, &wq, 1, 8, &r), SP_OK);
    ck_assert_int_eq(sp_ref_forward(r, tok, 4, b, SP_REF_LAST), SP_OK);
    sp_ref_free(r);
    check_close(b, a, 37, 0.05, "int8 vs f32");
    ck_assert(memcmp(a, b, sizeof a) != 0);
    sp_weights_free(&w);
    sp_weights_free(&wq);
}
END_TEST

static Suite *ref_suite(void)
{
    Suite *s = suite_create("ref");
    TCase *tc = tcase_create("ref");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_prefill_decode_consistent, 0, M_COUNT);
    tcase_add_test(tc, test_parallel_vs_serial_handmade);
    tcase_add_loop_test(tc, test_tiny_deterministic_finite, 0, M_COUNT);
    tcase_add_loop_test(tc, test_generate, 0, M_COUNT);
    tcase_add_test(tc, test_quantized_close);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ref_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
