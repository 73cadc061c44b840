/* check_groups.c: separate prefill and decode chip groups.  The per-phase
 * keys parse and round-trip, the checks refuse what does not fit; the KV
 * transfer between the groups covers every decode chip's cache exactly once
 * from a chip that holds it, its volume equals the closed form (the batch's
 * KV bytes times decode's head replication, plus 4 bytes per sequence per
 * decode tensor chip), its time the per-message rule of sp_cost.h; and the
 * estimate of palm-62b on 32 + 8 TPU v4 chips composes as stated. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "costmodel/sp_cost.h"
#include "sp_layout.h"
#include "sp_lower.h"
#include "sp_mesh.h"
#include "sp_model.h"
#include <jansson.h>

static sp_model make_model(int64_t layers, int64_t E, int64_t H, int64_t KVH)
{
    sp_model m;
    sp_model_init(&m);
    snprintf(m.name, sizeof m.name, "test");
    m.n_layers = layers;
    m.d_model = E;
    m.d_ff = 4 * E;
    m.n_heads = H;
    m.n_kv_heads = KVH;
    m.d_head = E / H;
    m.vocab = 1024;
    m.ffn = SP_FFN_SWIGLU;
    m.block = SP_BLOCK_SERIAL;
    m.norm = SP_NORM_RMSNORM;
    m.positions = SP_POS_ROPE;
    m.max_context = 4096;
    return m;
}

static sp_layout parse(const char *text)
{
    sp_layout l;
    sp_error err;
    ck_assert_msg(sp_layout_parse(text, &l, &err) == SP_OK, "%s: %s", text, err.text);
    return l;
}

START_TEST(test_parse)
{
    sp_layout l = parse("prefill.mesh=4x4x2,decode.mesh=2x2x2,prefill=wg-xyz/batch,decode=ws2d/batch");
    ck_assert(sp_layout_disaggregated(&l));
    ck_assert_int_eq(sp_layout_chips(&l), 40);
    ck_assert_int_eq(l.group[SP_PHASE_PREFILL].mesh[2], 2);
    ck_assert_int_eq(l.group[SP_PHASE_DECODE].mesh[0], 2);
    ck_assert_int_eq(l.group[SP_PHASE_DECODE].stages, 1);
    /* the layout's own keys are the prefill group's */
    ck_assert_int_eq(l.mesh[0], 4);
    ck_assert_int_eq(l.mesh[2], 2);
    /* text and JSON round trips */
    char text[512];
    sp_layout_format(&l, text, sizeof text);
    sp_layout back = parse(text);
    ck_assert_msg(!memcmp(&back, &l, sizeof l), "text round trip: %s", text);
    json_t *j = sp_layout_to_json(&l);
    char *js = json_dumps(j, 0);
    back = parse(js);
    ck_assert_msg(!memcmp(&back, &l, sizeof l), "JSON round trip: %s", js);
    free(js);
    json_decref(j);
    /* JSON keys inside each phase's object; a phase key not given takes the layout's own */
    l = parse("{\"stages\":2,\"prefill\":{\"ffn\":\"ws2d\",\"mesh\":[2,1,1]},\"decode\":{\"stages\":1,\"mesh\":[4,1,1]}}");
    ck_assert(sp_layout_disaggregated(&l));
    ck_assert_int_eq(l.group[SP_PHASE_PREFILL].stages, 2);
    ck_assert_int_eq(l.group[SP_PHASE_DECODE].stages, 1);
    ck_assert_int_eq(sp_layout_chips(&l), 8);
    /* equal groups fold into an ordinary layout */
    l = parse("prefill.mesh=2x2x1,decode.mesh=2x2x1,prefill.stages=2,decode.stages=2");
    ck_assert(!sp_layout_disaggregated(&l));
    ck_assert_int_eq(sp_layout_chips(&l), 8);
    ck_assert_int_eq(l.stages, 2);
    /* groups=separate keeps equal groups on chips of their own: 4 + 4 chips of one 2x2x1 mesh */
    l = parse("mesh=2x2x1,groups=separate,prefill=ws2d/heads,decode=ws2d/batch");
    ck_assert(sp_layout_disaggregated(&l));
    ck_assert_int_eq(sp_layout_chips(&l), 8);
    ck_assert(!memcmp(&l.group[0], &l.group[1], sizeof l.group[0]));
    {
        char t[320];
        sp_layout_format(&l, t, sizeof t);
        ck_assert_ptr_nonnull(strstr(t, "groups=separate"));
        sp_layout rt = parse(t);
        ck_assert_msg(!memcmp(&rt, &l, sizeof l), "text round trip: %s", t);
        json_t *jj = sp_layout_to_json(&l);
        char *js2 = json_dumps(jj, 0);
        ck_assert_ptr_nonnull(strstr(js2, "\"groups\": \"separate\""));
        rt = parse(js2);
        ck_assert_msg(!memcmp(&rt, &l, sizeof l), "JSON round trip: %s", js2);
        free(js2);
        json_decref(jj);
        /* each group is the ordinary layout of its own chips */
        sp_layout_phase_group(&l, SP_PHASE_DECODE, &back);
        ck_assert(!sp_layout_disaggregated(&back) && !back.separate);
        ck_assert_int_eq(sp_layout_chips(&back), 4);
    }
    /* the same from the group keys; groups that differ need no key (one representation);
     * groups=shared (the default) folds equal groups */
    sp_layout l2 = parse("prefill.mesh=2x2x1,decode.mesh=2x2x1,groups=separate,prefill=ws2d/heads,decode=ws2d/batch");
    ck_assert(!memcmp(&l2, &l, sizeof l));
    l2 = parse("prefill.mesh=4x1x1,decode.mesh=2x1x1,groups=separate");
    sp_layout l3 = parse("prefill.mesh=4x1x1,decode.mesh=2x1x1");
    ck_assert(!memcmp(&l2, &l3, sizeof l2) && !l2.separate);
    l2 = parse("mesh=2x2x1,groups=separate,groups=shared");
    ck_assert(!sp_layout_disaggregated(&l2) && sp_layout_chips(&l2) == 4);
    /* a group from two one-group layouts */
    sp_layout a = parse("mesh=4x1x1,prefill=wg-xyz/batch"), b = parse("mesh=2x1x1,stages=2,decode=ws2d/heads"), c;
    ck_assert_int_eq(sp_layout_disaggregate(&a, &b, &c), SP_OK);
    ck_assert(sp_layout_disaggregated(&c));
    ck_assert_int_eq(sp_layout_chips(&c), 8);
    ck_assert_int_eq(c.phase[SP_PHASE_PREFILL].ffn, SP_FL_WG_XYZ);
    ck_assert_int_eq(c.phase[SP_PHASE_DECODE].attn, SP_AL_HEADS);
    sp_layout g;
    sp_layout_phase_group(&c, SP_PHASE_DECODE, &g);
    ck_assert(!sp_layout_disaggregated(&g));
    ck_assert_int_eq(g.stages, 2);
    ck_assert_int_eq(g.phase[SP_PHASE_PREFILL].ffn, SP_FL_WS2D);   /* decode's layout in both phases */
    /* two equal one-group layouts: separate groups of equal meshes */
    ck_assert_int_eq(sp_layout_disaggregate(&a, &a, &c), SP_OK);
    ck_assert(sp_layout_disaggregated(&c) && c.separate);
    ck_assert_int_eq(sp_layout_chips(&c), 8);
    b.kv = SP_DT_F32;
    ck_assert_int_eq(sp_layout_disaggregate(&a, &b, &c), SP_EINVAL);
    /* refusals by name */
    sp_error err;
    ck_assert_int_eq(sp_layout_parse("prefill.chips=4", &l, &err), SP_EPARSE);
    ck_assert_str_eq(err.path, "prefill.chips");
    ck_assert_int_eq(sp_layout_parse("decode.mesh=2x2", &l, &err), SP_EPARSE);
    ck_assert_int_eq(sp_layout_parse("groups=apart", &l, &err), SP_EPARSE);
    ck_assert_str_eq(err.path, "groups");
    ck_assert_int_eq(sp_layout_parse("{\"groups\": 1}", &l, &err), SP_EPARSE);
    ck_assert_str_eq(err.path, "/groups");
}
END_TEST

START_TEST(test_check)
{
    sp_model m = make_model(4, 256, 8, 4);
    sp_error err;
    sp_layout l = parse("prefill.mesh=4x1x1,decode.mesh=2x1x1");
    ck_assert_int_eq(sp_layout_check(&l, &m, NULL, 6, 8, &err), SP_OK);
    ck_assert_int_eq(sp_layout_check(&l, &m, NULL, 8, 8, &err), SP_EINVAL);
    ck_assert_msg(strstr(err.text, "decode group (2 chips)"), "%s", err.text);
    l = parse("prefill.mesh=4x1x1,decode.mesh=2x1x1,stage_layers=4");
    ck_assert_int_eq(sp_layout_check(&l, &m, NULL, 6, 8, &err), SP_ENOTSUP);
    /* a group that does not apply is named */
    l = parse("prefill.mesh=4x1x1,decode.mesh=2x1x1,decode=ws2d/batch");
    ck_assert_int_eq(sp_layout_check(&l, &m, NULL, 6, 3, &err), SP_EINVAL);
    ck_assert_msg(!strncmp(err.text, "prefill group: ", 15) || !strncmp(err.text, "decode group: ", 14), "%s", err.text);
    /* the lowering takes one group at a time */
    sp_program *p = malloc(sizeof *p);
    sp_shape sh = {8, 16, 16, 32, SP_DT_BF16, 0};
    l = parse("prefill.mesh=4x1x1,decode.mesh=2x1x1");
    ck_assert_int_eq(sp_lower(&m, &l, SP_PHASE_PREFILL, &sh, 0, p), SP_EINVAL);
    free(p);
    /* on a cluster, the decode group starts on a node boundary or shares the prefill group's node */
    sp_hw hw;
    ck_assert_int_eq(sp_hw_find("a100-80g", &hw, &err), SP_OK);
    l = parse("prefill.mesh=4x1x1,decode.mesh=8x1x1");
    ck_assert_int_eq(sp_layout_check(&l, &m, &hw, 12, 8, &err), SP_EINVAL);
    ck_assert_msg(strstr(err.text, "inside a 8-chip node"), "%s", err.text);
    l = parse("prefill.mesh=8x1x1,decode.mesh=4x1x1");
    ck_assert_int_eq(sp_layout_check(&l, &m, &hw, 12, 8, &err), SP_OK);
    /* both groups must fit in the machine: 32 + 8 chips fit a 4x4x4 torus, 64 + 32 do not */
    ck_assert_int_eq(sp_hw_find("tpu-v4", &hw, &err), SP_OK);
    hw.torus_dims[0] = hw.torus_dims[1] = hw.torus_dims[2] = 4;
    l = parse("prefill.mesh=4x4x2,decode.mesh=2x2x2");
    ck_assert_msg(sp_layout_check(&l, &m, &hw, 40, 64, &err) == SP_OK, "%s", err.text);
    l = parse("prefill.mesh=4x4x4,decode.mesh=4x4x2");
    ck_assert_int_eq(sp_layout_check(&l, &m, &hw, 96, 64, &err), SP_EINVAL);
    ck_assert_msg(strstr(err.text, "more than the 64"), "%s", err.text);
}
END_TEST

/* ---- the transfer's blocks ---- */
typedef struct cover {
    const sp_model *m;
    int64_t batch, KVH;
    int np, nd;
    unsigned char *seen;   /* (nd, layers, batch, KVH): times received */
    int64_t kv, tok, tok_seen_bad;
    sp_layout pf;          /* the prefill group's layout */
    sp_program *pp;        /* its programs, one per stage */
} cover;

static sp_status on_block(void *ctx, const sp_xfer_block *b)
{
    cover *c = ctx;
    ck_assert(b->src >= 0 && b->src < c->np && b->dst >= 0 && b->dst < c->nd);
    ck_assert(b->bytes > 0);
    if (b->tokens) {
        c->tok += b->bytes;
        ck_assert_int_eq(b->bytes, 4 * b->seqs);
        return SP_OK;
    }
    c->kv += b->bytes;
    /* the sender holds the block: its stage's layers, its replica's sequences, its heads */
    sp_mesh mesh;
    sp_layout_mesh(&c->pf, &mesh);
    int co[SP_AXIS_COUNT];
    sp_mesh_coords(&mesh, b->src, co);
    const sp_program *p = &c->pp[co[SP_AXIS_STAGE]];
    int64_t l0, nl;
    sp_layout_stage_layers(&c->pf, c->m->n_layers, co[SP_AXIS_STAGE], &l0, &nl);
    ck_assert(b->layer0 >= l0 && b->layer0 + b->layers <= l0 + nl);
    int64_t Br = c->batch / c->pf.replicas, h0 = sp_lower_kv_head0(c->m, p, b->src);
    int blk = sp_lower_axes_index(&c->pf, b->src, p->kv_batch_axes);
    ck_assert(b->head0 >= h0 && b->head0 + b->heads <= h0 + p->kv_heads_cache);
    for (int64_t q = b->seq0; q < b->seq0 + b->seqs; q++) {
        ck_assert_int_eq(q / Br, co[SP_AXIS_REPLICA]);
        ck_assert_int_eq(q % Br % p->micro_batch / p->kv_seqs, blk);
        for (int64_t l = b->layer0; l < b->layer0 + b->layers; l++)
            for (int64_t h = b->head0; h < b->head0 + b->heads; h++)
                c->seen[((b->dst * c->m->n_layers + l) * c->batch + q) * c->KVH + h]++;
    }
    ck_assert_int_eq(b->bytes, 2 * b->layers * b->seqs * b->heads * 16 * c->m->d_head * 2);   /* prompt 16, bf16 */
    return SP_OK;
}

static const struct {
    int64_t H, KVH;
    const char *layout;
} xfer_cases[] = {
    {8, 4, "prefill.mesh=4x1x1,decode.mesh=2x1x1"},                                    /* heads 4 -> 2 blocks */
    {8, 4, "prefill.mesh=2x1x1,decode.mesh=4x1x1"},                                    /* 2+4 */
    {8, 4, "prefill.mesh=2x2x1,decode.mesh=4x1x1,prefill=wg-xyz/batch,decode=ws2d/heads"},   /* 4+4 */
    {8, 4, "prefill.mesh=2x1x1,prefill.stages=2,decode.mesh=2x1x1,decode=ws2d/batch"},   /* 2-stage prefill */
    {8, 4, "prefill.mesh=1x1x1,prefill.replicas=2,decode.mesh=2x1x1,decode.stages=2,microbatches=2"},
    {8, 1, "prefill.mesh=4x1x1,decode.mesh=2x1x1"},                                    /* MQA: replicated heads */
    {8, 2, "prefill.mesh=2x2x1,decode.mesh=4x1x1,decode=ws2d/batch,prefill=ws2d/heads"},
    {8, 4, "prefill.mesh=2x1x1,decode.mesh=1x1x1,decode.replicas=2,prefill_chunk=2"},
};

START_TEST(test_xfer_cover)
{
    const int64_t B = 8, P = 16;
    sp_model m = make_model(4, 256, xfer_cases[_i].H, xfer_cases[_i].KVH);
    sp_layout l = parse(xfer_cases[_i].layout);
    cover c = {&m, B, m.n_kv_heads, 0, 0, NULL, 0, 0, 0, {0}, NULL};
    sp_layout dg;
    sp_layout_phase_group(&l, SP_PHASE_PREFILL, &c.pf);
    sp_layout_phase_group(&l, SP_PHASE_DECODE, &dg);
    c.np = (int)sp_layout_chips(&c.pf);
    c.nd = (int)sp_layout_chips(&dg);
    c.pp = calloc((size_t)c.pf.stages, sizeof *c.pp);
    sp_program *dp = calloc((size_t)dg.stages, sizeof *dp);
    for (int s = 0; s < c.pf.stages; s++) {
        sp_shape sh = {B, P, P, P + 1, SP_DT_BF16, 0};
        ck_assert_msg(sp_lower(&m, &c.pf, SP_PHASE_PREFILL, &sh, s, &c.pp[s]) == SP_OK, "%s", sp_last_error());
    }
    for (int s = 0; s < dg.stages; s++) {
        sp_shape sh = {B, 1, P + 1, P + 1, SP_DT_BF16, 0};
        ck_assert_msg(sp_lower(&m, &dg, SP_PHASE_DECODE, &sh, s, &dp[s]) == SP_OK, "%s", sp_last_error());
    }
    c.seen = calloc((size_t)(c.nd * m.n_layers * B * c.KVH), 1);
    ck_assert_msg(sp_lower_kv_xfer(&m, &l, B, P, on_block, &c) == SP_OK, "%s", sp_last_error());
    /* every decode chip receives exactly its cache block, once */
    sp_mesh mesh;
    sp_layout_mesh(&dg, &mesh);
    int64_t want_kv = 0;
    for (int d = 0; d < c.nd; d++) {
        int co[SP_AXIS_COUNT];
        sp_mesh_coords(&mesh, d, co);
        const sp_program *p = &dp[co[SP_AXIS_STAGE]];
        int64_t l0, nl, Br = B / dg.replicas, h0 = sp_lower_kv_head0(&m, p, d);
        int blk = sp_lower_axes_index(&dg, d, p->kv_batch_axes);
        sp_layout_stage_layers(&dg, m.n_layers, co[SP_AXIS_STAGE], &l0, &nl);
        for (int64_t l2 = 0; l2 < m.n_layers; l2++)
            for (int64_t q = 0; q < B; q++)
                for (int64_t h = 0; h < c.KVH; h++) {
                    int need = l2 >= l0 && l2 < l0 + nl && q / Br == co[SP_AXIS_REPLICA] &&
                               q % Br % p->micro_batch / p->kv_seqs == blk && h >= h0 && h < h0 + p->kv_heads_cache;
                    int got = c.seen[((d * m.n_layers + l2) * B + q) * c.KVH + h];
                    ck_assert_msg(got == need, "%s: decode chip %d, layer %lld, sequence %lld, head %lld: received %d "
                                               "times, needs %d", xfer_cases[_i].layout, d, (long long)l2, (long long)q,
                                  (long long)h, got, need);
                }
        /* its cache at the prompt: the closed form of the decode program's geometry */
        want_kv += 2 * nl * p->kv_seqs * dg.microbatches * p->kv_heads_cache * P * m.d_head * 2;
    }
    ck_assert_int_eq(c.kv, want_kv);
    int64_t batch_kv = 2 * m.n_layers * B * m.n_kv_heads * P * m.d_head * 2;
    if (!dp[0].kv_repl) ck_assert_int_eq(c.kv, batch_kv);   /* decode holds each KV head once */
    else ck_assert(c.kv > batch_kv);
    ck_assert_int_eq(c.tok, 4 * B * dg.mesh[0] * dg.mesh[1] * dg.mesh[2]);
    /* the cost side counts the same blocks */
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_hw_find("a100-80g", &hw, &err), SP_OK);
    sp_kv_xfer_cost x;
    ck_assert_int_eq(sp_cost_kv_xfer(&m, &hw, &l, B, P, SP_XFER_ONE_JOB, &x), SP_OK);
    ck_assert_int_eq(x.kv_bytes, c.kv);
    ck_assert_int_eq(x.token_bytes, c.tok);
    ck_assert_int_eq(x.bytes, c.kv + c.tok);
    ck_assert(x.seconds > 0);
    free(c.seen);
    free(c.pp);
    free(dp);
}
END_TEST

/* MQA with head-sharded decode on 2 chips: each decode chip holds the one KV
 * head, so the volume is twice the batch's KV bytes */
START_TEST(test_xfer_replicated)
{
    sp_model m = make_model(4, 256, 8, 1);
    sp_layout l = parse("prefill.mesh=4x1x1,decode.mesh=2x1x1");
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_hw_find("a100-80g", &hw, &err), SP_OK);
    sp_kv_xfer_cost x;
    ck_assert_int_eq(sp_cost_kv_xfer(&m, &hw, &l, 8, 16, SP_XFER_ONE_JOB, &x), SP_OK);
    ck_assert_int_eq(x.kv_bytes, 2 * (2 * 4 * 8 * 1 * 16 * 32 * 2));
    ck_assert_int_eq(x.token_bytes, 4 * 8 * 2);
}
END_TEST

/* One prefill chip, one decode chip: one message, priced α + bytes·β on
 * the tier the two chips share, plus the launch */
START_TEST(test_xfer_time)
{
    sp_model m = make_model(4, 256, 8, 4);
    sp_layout l = parse("prefill.mesh=1x1x1,decode.mesh=1x1x1,decode.stages=2");   /* decode 2 chips */
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_hw_find("a100-80g", &hw, &err), SP_OK);
    sp_kv_xfer_cost x, y;
    ck_assert_int_eq(sp_cost_kv_xfer(&m, &hw, &l, 4, 32, SP_XFER_ONE_JOB, &x), SP_OK);
    /* decode stage 0 (layers 0-1) and stage 1 (2-3): 2 layers each, stage 0 also the tokens */
    int64_t half = 2 * 2 * 4 * 4 * 32 * 32 * 2;
    ck_assert_int_eq(x.kv_bytes, 2 * half);
    ck_assert_int_eq(x.token_bytes, 16);
    ck_assert_int_eq(x.messages, 2);
    ck_assert_int_eq(x.max_sent, 2 * half + 16);
    ck_assert_int_eq(x.max_recv, half + 16);
    double beta = 1.0 / (hw.intra_bw * hw.net_bw_eff);
    double want = hw.coll_latency + 2 * hw.intra_latency + (double)(2 * half + 16) * beta;   /* the sender's two messages */
    ck_assert_double_eq_tol(x.seconds, want, 1e-12 * want);
    /* apart: every message crosses between nodes */
    ck_assert_int_eq(sp_cost_kv_xfer(&m, &hw, &l, 4, 32, SP_XFER_APART, &y), SP_OK);
    double want_far = hw.coll_latency + 2 * hw.inter_latency + (double)(2 * half + 16) / (hw.inter_bw * hw.net_bw_eff);
    ck_assert_double_eq_tol(y.seconds, want_far, 1e-12 * want_far);
    ck_assert(y.seconds > x.seconds);
    /* a torus refuses separate slices, and prices a group pair of one job */
    ck_assert_int_eq(sp_hw_find("tpu-v4", &hw, &err), SP_OK);
    ck_assert_int_eq(sp_cost_kv_xfer(&m, &hw, &l, 4, 32, SP_XFER_APART, &y), SP_ENOTSUP);
    /* no groups: nothing to price */
    sp_layout one = parse("mesh=2x1x1");
    ck_assert_int_eq(sp_cost_kv_xfer(&m, &hw, &one, 4, 32, SP_XFER_ONE_JOB, &y), SP_EINVAL);
}
END_TEST

/* palm-62b, prefill on 4x4x2 and decode on 2x2x2 TPU v4 chips (40): priced,
 * and the figures compose as sp_cost.h says */
START_TEST(test_palm_40)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find("palm-62b", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("tpu-v4", &hw, &err), SP_OK);
    sp_layout l = parse("prefill.mesh=4x4x2,decode.mesh=2x2x2,weights=bf16,prefill=wg-xyz/batch,decode=ws2d/batch,"
                        "prefill_chunk=64");
    ck_assert_int_eq(sp_layout_check(&l, &m, &hw, 40, 512, &err), SP_OK);
    sp_workload w = {512, 2048, 64};
    sp_cost c, pf, dc;
    ck_assert_msg(sp_cost_eval(&m, &hw, &l, &w, NULL, &c) == SP_OK, "%s", sp_last_error());
    ck_assert(c.disaggregated);
    ck_assert(c.feasible);
    ck_assert_int_eq(c.chips, 40);
    ck_assert_int_eq(c.group_chips[SP_PHASE_PREFILL], 32);
    ck_assert_int_eq(c.group_chips[SP_PHASE_DECODE], 8);
    /* KV: 2 · layers · batch · KV heads · prompt · d_head · 2 bytes, decode batch-sharded (held once) */
    int64_t kv = 2 * m.n_layers * 512 * m.n_kv_heads * 2048 * m.d_head * 2;
    ck_assert_int_eq(c.kv_transfer_bytes, kv + 4 * 512 * 8);
    ck_assert(c.kv_transfer_s > 0);
    /* each group priced alone */
    sp_layout g;
    sp_layout_phase_group(&l, SP_PHASE_PREFILL, &g);
    sp_workload wp = {512, 2048, 0};
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &g, &wp, NULL, &pf), SP_OK);
    ck_assert_double_eq(c.prefill_s, pf.prefill_s);
    ck_assert_int_eq(c.group_mem[SP_PHASE_PREFILL].total, pf.mem.total);
    sp_layout_phase_group(&l, SP_PHASE_DECODE, &g);
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &g, &w, NULL, &dc), SP_OK);
    ck_assert_double_eq(c.decode_s, dc.decode_s);
    ck_assert_double_eq(c.decode_step_s, dc.decode_step_s);
    /* the decode group holds no prefill activations: at most the shared-chips figure */
    ck_assert(c.group_mem[SP_PHASE_DECODE].activations <= dc.mem.activations);
    ck_assert_int_eq(c.group_mem[SP_PHASE_DECODE].kv, dc.mem.kv);
    ck_assert_double_eq(c.total_s, c.prefill_s + c.kv_transfer_s + c.decode_s);
    double slower = c.prefill_s > c.decode_s ? c.prefill_s : c.decode_s;
    ck_assert_double_eq(c.period_s, slower + c.kv_transfer_s);
    ck_assert_double_eq_tol(c.tokens_per_s, 512.0 * 64 / c.period_s, 1e-9 * c.tokens_per_s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("groups");
    TCase *tc = tcase_create("groups");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_parse);
    tcase_add_test(tc, test_check);
    tcase_add_loop_test(tc, test_xfer_cover, 0, (int)(sizeof xfer_cases / sizeof xfer_cases[0]));
    tcase_add_test(tc, test_xfer_replicated);
    tcase_add_test(tc, test_xfer_time);
    tcase_add_test(tc, test_palm_40);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
