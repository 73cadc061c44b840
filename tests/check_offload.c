/* check_offload.c: weight and KV offload (layout offload_weights /
 * offload_kv).  The layout keys read back as written and are refused where
 * they do not fit; the lowering's copy steps move the bytes the closed
 * forms say (one layer's weights per streamed layer; the host-held
 * sequences' stored tokens per decode layer and their new rows back); the
 * device and host memory split the no-offload memory exactly; the cost
 * model's host-link bytes equal the closed form over a whole pass; the
 * simulator agrees with the closed form to the bit; a slow host link bounds
 * the step and a host too small makes the layout infeasible. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "costmodel/sp_cost.h"
#include "costmodel/sp_sim.h"
#include "sp_layout.h"
#include "sp_lower.h"
#include "sp_model.h"

static sp_model load_model(const char *name)
{
    sp_model m;
    sp_error err;
    ck_assert_msg(sp_model_find(name, &m, &err) == SP_OK, "%s", err.text);
    return m;
}

static sp_hw load_hw(const char *name)
{
    sp_hw hw;
    sp_error err;
    ck_assert_msg(sp_hw_find(name, &hw, &err) == SP_OK, "%s", err.text);
    return hw;
}

static sp_layout parse(const char *text)
{
    sp_layout l;
    sp_error err;
    ck_assert_msg(sp_layout_parse(text, &l, &err) == SP_OK, "%s: %s", text, err.text);
    return l;
}

START_TEST(test_layout_keys)
{
    sp_layout l = parse("stages=2,mesh=1x1x1,offload_weights=3,1,offload_kv=0.25,microbatches=2");
    ck_assert_int_eq(l.offload_stages, 2);
    ck_assert_int_eq(l.offload_layers[0], 3);
    ck_assert_int_eq(l.offload_layers[1], 1);
    ck_assert(l.offload_kv == 0.25);
    ck_assert_int_eq(l.microbatches, 2);   /* the list stops at the next key */
    ck_assert(sp_layout_offloads(&l));
    ck_assert_int_eq(sp_layout_offload_layers(&l, 1), 1);
    /* text and JSON read back byte for byte */
    char text[512];
    sp_layout_format(&l, text, sizeof text);
    ck_assert_ptr_nonnull(strstr(text, "offload_weights=3,1"));
    sp_layout back = parse(text);
    ck_assert(!memcmp(&back, &l, sizeof l));
    json_t *j = sp_layout_to_json(&l);
    char *js = json_dumps(j, 0);
    json_decref(j);
    back = parse(js);
    free(js);
    ck_assert(!memcmp(&back, &l, sizeof l));
    /* a list of zeros is no offload, and is written as none */
    sp_layout z = parse("offload_weights=0");
    sp_layout none;
    sp_layout_init(&none);
    ck_assert(!memcmp(&z, &none, sizeof z));
    ck_assert(!sp_layout_offloads(&z));
    /* one part's lists (offload_attn, offload_ffn), beside offload_weights: each part the larger count */
    sp_layout k = parse("stages=2,mesh=1x1x1,microbatches=2,offload_weights=1,0,offload_attn=0,2,offload_ffn=3,1");
    ck_assert_int_eq(k.offload_kind_stages[SP_WKIND_ATTN], 2);
    ck_assert_int_eq(k.offload_kind_layers[SP_WKIND_FFN][0], 3);
    const int64_t want[2][SP_WKIND_COUNT] = {{1, 3}, {2, 1}};
    for (int s = 0; s < 2; s++) {
        for (int q = 0; q < SP_WKIND_COUNT; q++)
            ck_assert_int_eq(sp_layout_offload_kind_layers(&k, s, (sp_wkind)q), want[s][q]);
        ck_assert_int_eq(sp_layout_offload_layers(&k, s), want[s][0] > want[s][1] ? want[s][0] : want[s][1]);
    }
    sp_layout_format(&k, text, sizeof text);
    ck_assert_ptr_nonnull(strstr(text, "offload_attn=0,2,offload_ffn=3,1"));
    back = parse(text);
    ck_assert(!memcmp(&back, &k, sizeof k));
    j = sp_layout_to_json(&k);
    js = json_dumps(j, 0);
    json_decref(j);
    ck_assert_ptr_nonnull(strstr(js, "\"offload_ffn\": [3, 1]"));
    back = parse(js);
    free(js);
    ck_assert(!memcmp(&back, &k, sizeof k));
    z = parse("offload_attn=0,offload_ffn=0");
    ck_assert(!memcmp(&z, &none, sizeof z));
    /* malformed values are parse errors naming the key */
    const char *bad[] = {"offload_weights=-1", "offload_weights=x", "offload_kv=1.5", "offload_kv=-0.1",
                         "{\"offload_kv\": 2}", "{\"offload_weights\": [1, -2]}", "{\"offload_weights\": []}",
                         "offload_attn=-1", "offload_ffn=y", "{\"offload_ffn\": [1, -2]}", "{\"offload_attn\": 2}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sp_error err;
        sp_layout x;
        ck_assert_msg(sp_layout_parse(bad[i], &x, &err) == SP_EPARSE, "%s accepted", bad[i]);
        ck_assert_msg(strstr(err.path, "offload") != NULL, "%s: the error names %s", bad[i], err.path);
    }
}
END_TEST

/* the checks: one count per stage, within the stage, a whole number of sequences, a host to offload to */
START_TEST(test_layout_refused)
{
    sp_model m = load_model("tiny-llama");   /* 4 layers */
    sp_hw hw = load_hw("a100-80g");
    struct { const char *text; int64_t chips, batch; const char *field; } cases[] = {
        {"stages=2,microbatches=2,offload_weights=1", 2, 4, "offload_weights"},   /* one count for two stages */
        {"offload_weights=5", 1, 4, "offload_weights"},                           /* the stage holds 4 */
        {"stages=2,microbatches=2,offload_weights=1,3", 2, 4, "offload_weights"}, /* stage 1 holds 2 */
        {"offload_kv=0.5", 1, 3, ""},                                             /* 1.5 of 3 sequences */
        {"offload_kv=0.5,prefill_chunk=2", 1, 4, ""},                             /* chunked prefill */
        {"stages=2,microbatches=2,offload_attn=1", 2, 4, "offload_attn"},         /* one count for two stages */
        {"offload_ffn=5", 1, 4, "offload_ffn"},                                   /* the stage holds 4 */
        {"stages=2,microbatches=2,offload_weights=1,1,offload_ffn=0,3", 2, 4, "offload_ffn"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sp_layout l = parse(cases[i].text);
        sp_error err;
        sp_error_init(&err);
        ck_assert_msg(sp_layout_check(&l, &m, &hw, cases[i].chips, cases[i].batch, &err) == SP_EINVAL, "%s accepted",
                      cases[i].text);
        ck_assert_msg(!strcmp(err.path, cases[i].field), "%s: path %s", cases[i].text, err.path);
    }
    /* weights streamed in a model whose layers differ (dense layers between MoE ones): not implemented */
    sp_model me = load_model("tiny-moe-every2");
    sp_layout lm = parse("offload_weights=1");
    ck_assert_int_eq(sp_layout_check(&lm, &me, &hw, 1, 4, NULL), SP_EINVAL);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "not implemented"));
    lm = parse("offload_kv=0.5");
    ck_assert_msg(sp_layout_check(&lm, &me, &hw, 1, 4, NULL) == SP_OK, "%s", sp_last_error());
    /* a profile that states no host link */
    hw.host_link_bw = 0;
    sp_layout l = parse("offload_weights=1");
    ck_assert_int_eq(sp_layout_check(&l, &m, &hw, 1, 4, NULL), SP_EINVAL);
    /* these fit */
    hw = load_hw("a100-80g");
    const char *ok[] = {"offload_weights=4", "offload_kv=1", "offload_kv=0.25,offload_weights=2",
                        "stages=2,microbatches=2,offload_weights=2,0", "offload_attn=4", "offload_ffn=1,offload_kv=1",
                        "stages=2,microbatches=2,offload_attn=2,0,offload_ffn=0,2"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sp_layout k = parse(ok[i]);
        ck_assert_msg(sp_layout_check(&k, &m, &hw, k.stages, 4, NULL) == SP_OK, "%s: %s", ok[i], sp_last_error());
    }
}
END_TEST

static sp_program pf, dc, pf0, dc0;

static void lower_both(const sp_model *m, const sp_layout *l, const sp_shape *sp, const sp_shape *sd, int stage,
                       sp_program *p, sp_program *d)
{
    ck_assert_msg(sp_lower(m, l, SP_PHASE_PREFILL, sp, stage, p) == SP_OK, "%s", sp_last_error());
    ck_assert_msg(sp_lower(m, l, SP_PHASE_DECODE, sd, stage, d) == SP_OK, "%s", sp_last_error());
}

/* Σ over a pass of the host bytes of p's copies at context ctx, each step times the layers that run it */
static int64_t pass_host_bytes(const sp_program *p, int64_t ctx)
{
    int64_t sum = 0;
    for (int i = 0; i < p->pre.n; i++) sum += sp_lower_host_bytes(&p->pre.s[i], ctx);
    for (int i = 0; i < p->layer.n; i++) {
        int64_t runs = 0;
        for (int64_t li = 0; li < p->n_layers; li++) runs += sp_lower_step_runs(p, &p->layer.s[i], li);
        ck_assert_int_eq(runs, sp_lower_step_layers(p, SP_PART_LAYER, &p->layer.s[i]));
        sum += runs * sp_lower_host_bytes(&p->layer.s[i], ctx);
    }
    for (int i = 0; i < p->post.n; i++) sum += sp_lower_host_bytes(&p->post.s[i], ctx);
    return sum;
}

/* The copies move what the closed forms say, and device + host memory is the no-offload memory:
 * every count A of layers streaming their attention's weights and F their FFN's (offload_attn,
 * offload_ffn; offload_weights when A = F). */
START_TEST(test_lowering_closed_form)
{
    const char *models[] = {"tiny-llama", "tiny-gpt2"};
    for (int mi = 0; mi < 2; mi++) {
        sp_model m = load_model(models[mi]);
        int64_t B = 8, P = 12, G = 5, ctx = P + G;
        sp_shape sp = {B, P, P, ctx, SP_DT_F32, 0}, sd = {B, 1, ctx, ctx, SP_DT_F32, 0};
        /* each layout between its two halves */
        const char *layouts[3][2] = {{"mesh=2x1x1,", ",offload_kv=0.5"},
                                     {"mesh=1x2x1,decode=ws2d/batch,", ",offload_kv=1"},
                                     {"mesh=1x1x1,weights=int8,", ",offload_kv=0.25"}};
        for (int li = 0; li < 3; li++)
            for (int64_t A = 0; A <= m.n_layers; A++)
            for (int64_t F = 0; F <= m.n_layers; F++) {
                char text[200];
                if (A == F)
                    snprintf(text, sizeof text, "%soffload_weights=%lld%s", layouts[li][0], (long long)A, layouts[li][1]);
                else
                    snprintf(text, sizeof text, "%soffload_attn=%lld,offload_ffn=%lld%s", layouts[li][0], (long long)A,
                             (long long)F, layouts[li][1]);
                sp_layout l = parse(text), l0 = parse(text);
                l0.offload_stages = 0;
                memset(l0.offload_layers, 0, sizeof l0.offload_layers);
                memset(l0.offload_kind_stages, 0, sizeof l0.offload_kind_stages);
                memset(l0.offload_kind_layers, 0, sizeof l0.offload_kind_layers);
                l0.offload_kv = 0;
                for (int k = 0; k < SP_WKIND_COUNT; k++)
                    ck_assert_int_eq(sp_layout_offload_kind_layers(&l, 0, (sp_wkind)k), k == SP_WKIND_ATTN ? A : F);
                lower_both(&m, &l, &sp, &sd, 0, &pf, &dc);
                lower_both(&m, &l0, &sp, &sd, 0, &pf0, &dc0);
                const int64_t W = A > F ? A : F;
                ck_assert_int_eq(dc.w_streamed, W);
                int64_t h = (int64_t)(l.offload_kv * (double)dc.kv_seqs);
                ck_assert_int_eq(dc.kv_host_seqs, h);
                ck_assert_int_gt(h, 0);
                /* one layer's weights of each part: the attention's (norm1 .. its output bias), the
                 * FFN's (the rest), every per-layer weight's stored bytes */
                int64_t la = 0, lf = 0;
                for (int w = SP_W_FIRST_LAYER; w < SP_W_COUNT; w++)
                    if (dc.wspec[w].present) *(w <= SP_W_BO ? &la : &lf) += dc.wspec[w].bytes;
                ck_assert_int_gt(la, 0);
                ck_assert_int_gt(lf, 0);
                /* the staging block: the parts the stage streams */
                const int64_t lw = (A ? la : 0) + (F ? lf : 0), hw_bytes = A * la + F * lf;
                ck_assert_int_eq(dc.layer_weight_bytes, lw);
                /* one host-held sequence's K and V row of one layer */
                int64_t row = 2 * dc.kv_heads_cache * m.d_head * sp_dtype_bytes(l.kv);
                /* prefill: W weight loads, every layer stores its host sequences' prompt rows */
                ck_assert_int_eq(pass_host_bytes(&pf, 0), hw_bytes + m.n_layers * h * P * row);
                /* decode at context c: W weight loads, every layer loads c-1 stored tokens and stores one */
                for (int64_t c = P + 1; c <= ctx; c += G - 1)
                    ck_assert_int_eq(pass_host_bytes(&dc, c), hw_bytes + m.n_layers * h * (c - 1) * row + m.n_layers * h * row);
                /* memory: the offloaded part moves to the host; staging holds two layers' weights (one when
                 * a single layer streams) and two layers' host K/V in decode */
                sp_mem_sizes mo, mn;
                ck_assert_int_eq(sp_lower_mem_sizes(&pf, &dc, &mo), SP_OK);
                ck_assert_int_eq(sp_lower_mem_sizes(&pf0, &dc0, &mn), SP_OK);
                ck_assert_int_eq(mo.weights + mo.host_weights, mn.weights);
                ck_assert_int_eq(mo.host_weights, hw_bytes);
                int64_t kvblk = sp_mem_align(h * ctx * dc.kv_heads_cache * m.d_head * sp_dtype_bytes(l.kv));
                ck_assert_int_eq(mo.staging, (W ? sp_mem_align((W > 1 ? 2 : 1) * lw) : 0) +
                                                 sp_mem_align(2 * (m.n_layers > 1 ? 2 : 1) * kvblk));
                int64_t kv_all = 2 * sp_mem_align(dc.kv_seqs * ctx * dc.kv_heads_cache * m.d_head * sp_dtype_bytes(l.kv) *
                                                  m.n_layers);
                ck_assert_int_eq(mn.kv, kv_all);
                ck_assert_int_eq(mo.host_kv, 2 * sp_mem_align(h * ctx * dc.kv_heads_cache * m.d_head *
                                                              sp_dtype_bytes(l.kv) * m.n_layers));
                int64_t kv_dev = dc.kv_seqs - h;
                ck_assert_int_eq(mo.kv, kv_dev ? 2 * sp_mem_align(kv_dev * ctx * dc.kv_heads_cache * m.d_head *
                                                                   sp_dtype_bytes(l.kv) * m.n_layers)
                                               : 0);
                ck_assert_int_eq(mo.host_total, mo.host_weights + mo.host_kv);
                ck_assert_int_eq(mo.total, mn.total - mn.weights - mn.kv + mo.weights + mo.kv + mo.staging);
            }
    }
}
END_TEST

/* sp_cost_eval's host-link bytes are the closed form summed over the stages of a pipeline */
START_TEST(test_cost_host_bytes)
{
    sp_model m = load_model("tiny-llama");
    sp_hw hw = load_hw("a100-80g");
    sp_workload w = {8, 12, 5};
    sp_layout l = parse("stages=2,microbatches=2,mesh=1x1x1,offload_weights=2,1,offload_kv=0.5");
    sp_cost c;
    ck_assert_msg(sp_cost_eval(&m, &hw, &l, &w, NULL, &c) == SP_OK, "%s", sp_last_error());
    int64_t ctx = w.prompt + w.gen, exp_pf = 0, exp_dc = 0, host = 0;
    for (int s = 0; s < 2; s++) {
        sp_shape sp = {w.batch, w.prompt, w.prompt, ctx, SP_DT_BF16, 0}, sd = {w.batch, 1, ctx, ctx, SP_DT_BF16, 0};
        lower_both(&m, &l, &sp, &sd, s, &pf, &dc);
        int64_t row = 2 * dc.kv_heads_cache * m.d_head * sp_dtype_bytes(l.kv), h = dc.kv_host_seqs;
        ck_assert_int_eq(h, dc.kv_seqs / 2);
        exp_pf += l.offload_layers[s] * dc.layer_weight_bytes + dc.n_layers * h * w.prompt * row;
        exp_dc += l.offload_layers[s] * dc.layer_weight_bytes + dc.n_layers * h * ctx * row;
        sp_mem_sizes ms;
        ck_assert_int_eq(sp_lower_mem_sizes(&pf, &dc, &ms), SP_OK);
        if (ms.host_total > host) host = ms.host_total;
    }
    ck_assert_int_eq(c.prefill.host_bytes, exp_pf);
    ck_assert_int_eq(c.decode.host_bytes, exp_dc);
    ck_assert_int_eq(c.host_peak, host);
    ck_assert(c.decode.host_s > 0 && c.prefill.host_s > 0);
    ck_assert(fabs(c.decode.host_s - (double)exp_dc / hw.host_link_bw) < 1e-9 * c.decode.host_s);
}
END_TEST

/* The simulator schedules every layer the closed form does: equal to the bit. */
START_TEST(test_sim_equals_closed_form)
{
    const char *models[] = {"tiny-llama", "tiny-gpt2", "llama2-7b"};
    const char *hws[] = {"a100-80g", "tpu-v4"};
    /* 4 chips: the smallest slice a TPU v4 rents */
    /* each with half the layers streamed (on the first stage) between its two halves; the second: KV only */
    const char *layouts[][2] = {{"replicas=4,offload_weights=", ""},
                                {"mesh=4x1x1,offload_kv=0.5", NULL},
                                {"mesh=2x2x1,decode=ws2d/batch,offload_weights=", ",offload_kv=1"},
                                {"mesh=1x4x1,prefill=wg-xy/heads,offload_weights=", ",offload_kv=0.5"},
                                {"stages=2,mesh=2x1x1,microbatches=2,offload_weights=", ",0,offload_kv=0.5"}};
    int checked = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int hi = 0; hi < 2; hi++)
            for (int ov = 0; ov < 3; ov++)
                for (int li = 0; li < 5; li++) {
                    sp_model m = load_model(models[mi]);
                    sp_hw hw = load_hw(hws[hi]);
                    hw.overlap = ov == 0 ? SP_OVERLAP_FULL : ov == 1 ? SP_OVERLAP_NONE : SP_OVERLAP_FRACTION;
                    hw.overlap_fraction = 0.5;
                    char text[160];
                    if (layouts[li][1]) snprintf(text, sizeof text, "%s%d%s", layouts[li][0], (int)(m.n_layers / 2), layouts[li][1]);
                    else snprintf(text, sizeof text, "%s", layouts[li][0]);
                    sp_layout l = parse(text);
                    sp_workload w = {16, 16, 4};
                    if (sp_layout_check(&l, &m, &hw, sp_layout_chips(&l), w.batch, NULL) != SP_OK) continue;
                    sp_cost c;
                    ck_assert_msg(sp_cost_eval(&m, &hw, &l, &w, NULL, &c) == SP_OK, "%s", sp_last_error());
                    sp_sim_times st;
                    ck_assert_msg(sp_sim_eval(&m, &hw, &l, &w, NULL, &st) == SP_OK, "%s", sp_last_error());
                    ck_assert_msg(st.prefill_s == c.prefill_s && st.decode_step_s == c.decode_step_s,
                                  "%s %s %s: sim %.17g %.17g, closed form %.17g %.17g", models[mi], hws[hi], text,
                                  st.prefill_s, st.decode_step_s, c.prefill_s, c.decode_step_s);
                    ck_assert(c.decode.host_bytes > 0);
                    checked++;
                }
    ck_assert_int_ge(checked, 60);
}
END_TEST

/* A slow host link bounds the step (the step takes at least its copies); a fast one hides them
 * behind compute; without offload nothing crosses it. */
START_TEST(test_host_bound)
{
    sp_model m = load_model("llama2-7b");
    sp_hw hw = load_hw("a100-80g");
    sp_workload w = {8, 128, 16};
    sp_layout l0 = parse("mesh=1x1x1"), l = parse("mesh=1x1x1,offload_weights=8,offload_kv=0.5");
    sp_cost c0, c;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l0, &w, NULL, &c0), SP_OK);
    ck_assert_int_eq(c0.decode.host_bytes, 0);
    ck_assert_int_eq(c0.host_peak, 0);
    ck_assert(!sp_cost_host_bound(&c0.decode));
    hw.host_link_bw = 1e9;   /* 1 GB/s */
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l, &w, NULL, &c), SP_OK);
    ck_assert(sp_cost_host_bound(&c.decode) && sp_cost_host_bound(&c.prefill));
    ck_assert(c.decode_step_s >= c.decode.host_s);
    ck_assert(c.decode_step_s > c0.decode_step_s);
    ck_assert(c.mem.total < c0.mem.total);
    hw.host_link_bw = 1e18;   /* copies of picoseconds: the schedule is the no-offload one within them */
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l, &w, NULL, &c), SP_OK);
    ck_assert(!sp_cost_host_bound(&c.decode));
    ck_assert(fabs(c.decode_step_s - c0.decode_step_s) < 1e-9);
    ck_assert(fabs(c.prefill_s - c0.prefill_s) < 1e-9);
}
END_TEST

/* host memory is a capacity like HBM: over it the layout does not fit, by exactly the excess */
START_TEST(test_host_capacity)
{
    sp_model m = load_model("llama2-7b");
    sp_hw hw = load_hw("a100-80g");
    sp_workload w = {8, 128, 16};
    sp_layout l = parse("mesh=1x1x1,offload_weights=16");
    sp_cost c;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l, &w, NULL, &c), SP_OK);
    ck_assert(c.feasible);
    ck_assert_int_eq(c.host_capacity, hw.host_bytes);
    hw.host_bytes = c.host_peak - 12345;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l, &w, NULL, &c), SP_OK);
    ck_assert(!c.feasible);
    ck_assert_int_eq(c.host_shortfall_bytes, 12345);
    ck_assert_int_eq(c.shortfall_bytes, 0);
    ck_assert_int_eq(sp_cost_check(&c), SP_OK);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("offload");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_layout_keys);
    tcase_add_test(tc, test_layout_refused);
    tcase_add_test(tc, test_lowering_closed_form);
    tcase_add_test(tc, test_cost_host_bytes);
    tcase_add_test(tc, test_sim_equals_closed_form);
    tcase_add_test(tc, test_host_bound);
    tcase_add_test(tc, test_host_capacity);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
