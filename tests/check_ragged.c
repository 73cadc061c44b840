/* check_ragged.c: ragged batches (sp_ragged.h, sp_lower.h "Ragged batches"):
 * workload files and their errors; the lowering's packed token counts and
 * attention FLOPs / KV bytes against the closed form; a ragged batch of equal
 * lengths priced exactly as the padded batch; refusals by name; the executor
 * under tensor-parallel layouts gives each sequence what it gets alone. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "costmodel/sp_cost.h"
#include "costmodel/sp_sim.h"
#include "exec/sp_exec.h"
#include "exec/sp_ref.h"
#include "plan/sp_plan.h"
#include "sp_layout.h"
#include "sp_lower.h"
#include "sp_model.h"
#include "sp_ragged.h"

/* ---- workload files ---- */
START_TEST(test_workload_csv_json)
{
    sp_ragged r;
    sp_error err;
    sp_error_init(&err);
    ck_assert_int_eq(sp_ragged_loads("# a batch\nprompt,gen\n3,4\n 7 , 2\n\n1,6\n5,3\n", "w.csv", &r, &err), SP_OK);
    ck_assert_int_eq(r.n, 4);
    const int64_t P[4] = {3, 7, 1, 5}, G[4] = {4, 2, 6, 3};
    for (int b = 0; b < 4; b++) {
        ck_assert_int_eq(r.prompt[b], P[b]);
        ck_assert_int_eq(r.gen[b], G[b]);
    }
    ck_assert_int_eq(r.sum_prompt, 16);
    ck_assert_int_eq(r.sum_gen, 15);
    ck_assert_int_eq(r.max_prompt, 7);
    ck_assert_int_eq(r.max_gen, 6);
    ck_assert_int_eq(r.max_context, 9);   /* 7+2, 1+6, 3+4, 5+3 */
    /* decode steps 1..6: runs of the same sequences end where a generation ends */
    ck_assert_int_eq(sp_ragged_active_count(&r, 1), 4);
    ck_assert_int_eq(sp_ragged_active_count(&r, 3), 3);
    ck_assert_int_eq(sp_ragged_active_count(&r, 5), 1);
    ck_assert_int_eq(sp_ragged_segment_end(&r, 1), 2);
    ck_assert_int_eq(sp_ragged_segment_end(&r, 3), 3);
    ck_assert_int_eq(sp_ragged_segment_end(&r, 4), 4);
    ck_assert_int_eq(sp_ragged_segment_end(&r, 5), 6);
    ck_assert_int_eq(sp_ragged_segment_end(&r, 7), 0);
    sp_ragged_free(&r);

    ck_assert_int_eq(sp_ragged_loads("{\"sequences\": [{\"prompt\": 3, \"gen\": 4}, {\"gen\": 2, \"prompt\": 7}]}",
                                     "w.json", &r, &err),
                     SP_OK);
    ck_assert_int_eq(r.n, 2);
    ck_assert_int_eq(r.prompt[1], 7);
    ck_assert_int_eq(r.gen[1], 2);
    sp_ragged_free(&r);
}
END_TEST

/* A length distribution: counts by largest remainders, dealt round-robin over the classes. */
START_TEST(test_workload_distribution)
{
    static const struct {
        const char *text;
        int n;
        const char *order;   /* each sequence's class */
    } cases[] = {
        /* 10 · 3/5, 10 · 1/5, 10 · 1/5: 6, 2, 2 */
        {"{\"distribution\": {\"sequences\": 10, \"mix\": [{\"prompt\": 100, \"gen\": 10, \"share\": 3}, "
         "{\"prompt\": 20, \"gen\": 50, \"share\": 1}, {\"prompt\": 7, \"gen\": 7, \"share\": 1}]}}",
         10, "ABCABCAAAA"},
        /* 7 / 3 each: 2, 2, 2 and the one left to the first (a tie) */
        {"{\"distribution\": {\"mix\": [{\"prompt\": 100, \"gen\": 10, \"share\": 0.5}, {\"prompt\": 20, \"gen\": 50, "
         "\"share\": 0.5}, {\"gen\": 7, \"prompt\": 7, \"share\": 0.5}], \"sequences\": 7}}",
         7, "ABCABCA"},
        /* 5 · 0.7 = 3.5, 5 · 0.2 = 1, 5 · 0.1 = 0.5: 3, 1, 0 and the one left to the first (0.5 vs 0.5) */
        {"{\"distribution\": {\"sequences\": 5, \"mix\": [{\"prompt\": 100, \"gen\": 10, \"share\": 7}, "
         "{\"prompt\": 20, \"gen\": 50, \"share\": 2}, {\"prompt\": 7, \"gen\": 7, \"share\": 1}]}}",
         5, "ABAAA"},
    };
    static const int64_t len[3][2] = {{100, 10}, {20, 50}, {7, 7}};
    for (int k = 0; k < 3; k++) {
        sp_ragged r;
        sp_error err;
        sp_error_init(&err);
        ck_assert_msg(sp_ragged_loads(cases[k].text, "d.json", &r, &err) == SP_OK, "case %d: %s", k, err.text);
        ck_assert_int_eq(r.n, cases[k].n);
        for (int b = 0; b < r.n; b++) {
            int c = cases[k].order[b] - 'A';
            ck_assert_msg(r.prompt[b] == len[c][0] && r.gen[b] == len[c][1], "case %d: sequence %d: %lld, %lld", k, b,
                          (long long)r.prompt[b], (long long)r.gen[b]);
        }
        sp_ragged_free(&r);
    }
}
END_TEST

/* each bad input: the status, and the line (CSV) and field named */
static const struct bad_case {
    const char *text;
    sp_status st;
    int line;
    const char *path;
} bad_cases[] = {
    {"3,4\n7,x\n", SP_EPARSE, 2, "gen"},
    {"3,4\n0,2\n", SP_EINVAL, 2, "prompt"},
    {"3,4\n2,0\n", SP_EINVAL, 2, "gen"},
    {"3\n", SP_EPARSE, 1, "gen"},
    {"3,4,5\n", SP_EPARSE, 1, ""},
    {"prompt,tokens\n3,4\n", SP_EPARSE, 1, ""},
    {"# nothing\n\n", SP_EINVAL, 2, ""},
    {"-3,4\n", SP_EPARSE, 1, "prompt"},
    {"99999999999,4\n", SP_EINVAL, 1, "prompt"},
    {"{\"sequences\": [{\"prompt\": 3, \"gen\": 4}, {\"prompt\": 3}]}", SP_EPARSE, 0, "/sequences/1"},
    {"{\"sequences\": [{\"prompt\": 3, \"gen\": -1}]}", SP_EINVAL, 0, "/sequences/0/gen"},
    {"{\"sequences\": []}", SP_EINVAL, 0, "/sequences"},
    {"{\"seqs\": []}", SP_EPARSE, 0, "/sequences"},
    {"{\"sequences\": [{\"prompt\": 1, \"gen\": 1}], \"x\": 1}", SP_EPARSE, 0, "/x"},
    {"{\"sequences\": [", SP_EPARSE, 1, ""},
    {"{\"distribution\": {\"sequences\": 4, \"mix\": [{\"prompt\": 3, \"gen\": 4, \"share\": 0}]}}", SP_EINVAL, 0,
     "/distribution/mix/0/share"},
    {"{\"distribution\": {\"sequences\": 0, \"mix\": [{\"prompt\": 3, \"gen\": 4, \"share\": 1}]}}", SP_EINVAL, 0,
     "/distribution/sequences"},
    {"{\"distribution\": {\"sequences\": 4, \"mix\": []}}", SP_EPARSE, 0, "/distribution/mix"},
    {"{\"distribution\": {\"sequences\": 4, \"mix\": [{\"prompt\": 3, \"gen\": 4}]}}", SP_EPARSE, 0,
     "/distribution/mix/0"},
    {"{\"distribution\": {\"sequences\": 4, \"mix\": [{\"prompt\": 3, \"gen\": 4, \"share\": 1}], \"seed\": 1}}",
     SP_EPARSE, 0, "/distribution/seed"},
};

START_TEST(test_workload_errors)
{
    const struct bad_case *c = &bad_cases[_i];
    sp_ragged r;
    sp_error err;
    sp_error_init(&err);
    sp_status st = sp_ragged_loads(c->text, "bad.in", &r, &err);
    ck_assert_msg(st == c->st, "case %d: status %d, expected %d (%s)", _i, st, c->st, err.text);
    ck_assert_str_eq(err.source, "bad.in");
    ck_assert_msg(err.line == c->line, "case %d: line %d, expected %d", _i, err.line, c->line);
    ck_assert_str_eq(err.path, c->path);
    ck_assert_ptr_null(r.prompt);
    ck_assert_int_eq(sp_ragged_load_file("/nonexistent/w.csv", &r, &err), SP_EIO);
    ck_assert_str_eq(err.source, "/nonexistent/w.csv");
}
END_TEST

/* ---- lowering: closed forms ---- */
static sp_model small_model(void)
{
    sp_model m;
    sp_model_init(&m);
    snprintf(m.name, sizeof m.name, "test");
    m.n_layers = 2;
    m.d_model = 256;
    m.d_ff = 1024;
    m.n_heads = 8;
    m.n_kv_heads = 4;
    m.d_head = 32;
    m.vocab = 512;
    m.ffn = SP_FFN_SWIGLU;
    m.block = SP_BLOCK_SERIAL;
    m.norm = SP_NORM_RMSNORM;
    m.positions = SP_POS_ROPE;
    m.max_context = 64;
    return m;
}

static sp_layout layout_of(const char *text)
{
    sp_layout l;
    sp_error err;
    ck_assert_msg(sp_layout_parse(text, &l, &err) == SP_OK, "%s: %s", text, err.text);
    return l;
}

static const sp_step *find_step(const sp_steps *ss, sp_step_kind k)
{
    for (int i = 0; i < ss->n; i++)
        if (ss->s[i].kind == k) return &ss->s[i];
    return NULL;
}

static const char *const tp_layouts[] = {
    "mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads",
    "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads",
    "mesh=4x1x1,weights=bf16,kv=bf16,prefill=ws1d/heads,decode=ws1d/heads",
    "mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads",
    "mesh=2x1x2,weights=bf16,kv=f32,prefill=ws2d/heads,decode=ws2d/heads",
    "mesh=2x2x2,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads",
};

START_TEST(test_lowering_closed_form)
{
    static sp_program p;
    sp_model m = small_model();
    sp_layout l = layout_of(tp_layouts[_i]);
    const int64_t P[4] = {3, 7, 1, 5}, G[4] = {4, 2, 6, 3};
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, 4, &r), SP_OK);
    int64_t n = (int64_t)l.mesh[0] * l.mesh[1] * l.mesh[2], D = m.d_head;
    int64_t Hl = m.n_heads / n, kvb = sp_dtype_bytes(l.kv);
    sp_shape pf = {4, 7, 7, r.max_context, SP_DT_BF16, 0};
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &pf, &r, 0, 0, &p) == SP_OK, "%s", sp_last_error());
    /* every token-parallel step runs on the 16 packed tokens */
    for (int i = 0; i < p.layer.n; i++) {
        const sp_step *s = &p.layer.s[i];
        if (s->kind == SP_STEP_MATMUL || s->kind == SP_STEP_NORM_STATS || s->kind == SP_STEP_ACT)
            ck_assert_msg(s->m == 16, "%s: %lld rows", sp_step_kind_name(s->kind), (long long)s->m);
        if (s->kind == SP_STEP_COLL) ck_assert_int_eq(s->coll.rows % 16, 0);
    }
    const sp_step *e = find_step(&p.pre, SP_STEP_EMBED);
    ck_assert_int_eq(e->m, 16);
    const sp_step *a = find_step(&p.layer, SP_STEP_ATTN);
    ck_assert_int_eq(a->ragged, 1);
    ck_assert_int_eq(a->m, 16);
    ck_assert_int_eq(a->batch, 4);
    /* causal within each prompt: Σ L(L+1)/2 = 6 + 28 + 1 + 15 query-key pairs, 4 FLOPs each per head dim */
    ck_assert_int_eq(a->flops, 4 * a->heads * D * 50);
    ck_assert_int_eq(a->heads, Hl);
    const sp_step *kv = find_step(&p.layer, SP_STEP_KV_STORE);
    ck_assert_int_eq(kv->kv_bytes_written, 2 * 16 * kv->kv_heads * D * kvb);
    /* last tokens: rows 2, 9, 10, 15 */
    const sp_step *sl = find_step(&p.post, SP_STEP_SLICE);
    ck_assert_int_eq(sl->ragged, 1);
    ck_assert_int_eq(sl->k, 16);
    ck_assert_int_eq(sl->m, 4);
    const int64_t row0[4] = {0, 3, 10, 11};
    for (int i = 0; i < 4; i++) {
        int64_t b, r0, q, pos0;
        sp_lower_ragged_seq(&p, i, &b, &r0, &q, &pos0);
        ck_assert_int_eq(b, i);
        ck_assert_int_eq(r0, row0[i]);
        ck_assert_int_eq(q, P[i]);
        ck_assert_int_eq(pos0, 0);
    }
    const sp_step *lg = find_step(&p.post, SP_STEP_LOGITS);
    ck_assert_int_eq(lg->m, 4);

    /* decode step 3: sequences 0, 2, 3 (gen >= 3) at contexts 6, 4, 8 */
    sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_BF16, 0};
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &r, 3, 0, &p) == SP_OK, "%s", sp_last_error());
    ck_assert_int_eq(p.shape.context, 8);
    ck_assert_int_eq(p.pass_seqs, 3);
    for (int i = 0; i < p.layer.n; i++)
        if (p.layer.s[i].kind == SP_STEP_MATMUL) ck_assert_int_eq(p.layer.s[i].m, 3);
    a = find_step(&p.layer, SP_STEP_ATTN);
    ck_assert_int_eq(a->from_cache, 1);
    ck_assert_int_eq(a->flops, 4 * Hl * D * (6 + 4 + 8));
    ck_assert_int_eq(a->kv_bytes_read, 2 * (6 + 4 + 8) * a->kv_heads * D * kvb);
    kv = find_step(&p.layer, SP_STEP_KV_STORE);
    ck_assert_int_eq(kv->kv_bytes_written, 2 * 3 * kv->kv_heads * D * kvb);
    const int64_t seq[3] = {0, 2, 3}, pos[3] = {5, 3, 7};
    for (int i = 0; i < 3; i++) {
        int64_t b, r0, q, pos0;
        sp_lower_ragged_seq(&p, i, &b, &r0, &q, &pos0);
        ck_assert_int_eq(b, seq[i]);
        ck_assert_int_eq(sp_lower_pass_seq(&p, 0, i), seq[i]);
        ck_assert_int_eq(r0, i);
        ck_assert_int_eq(q, 1);
        ck_assert_int_eq(pos0, pos[i]);
    }
    /* the cache keeps every sequence's slot at the longest context */
    ck_assert_int_eq(p.kv_seqs, 4);
    sp_ragged_free(&r);
}
END_TEST

/* Batch-sharded attention: sequences 0, 1 on one chip's block, 2, 3 on the other's (2
 * chips); the blocks meet in the all-to-alls as R = the fullest block's rows. */
START_TEST(test_lowering_batch_blocks)
{
    static sp_program p;
    sp_model m = small_model();
    sp_layout l = layout_of(_i ? "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"
                               : "mesh=2x2x1,weights=f32,kv=bf16,prefill=ws2d/batch,decode=ws2d/batch");
    int nb = l.mesh[0] * l.mesh[1];
    const int64_t P[4] = {3, 7, 1, 5}, G[4] = {4, 2, 6, 3};
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, 4, &r), SP_OK);
    int64_t D = m.d_head, kvb = sp_dtype_bytes(l.kv);
    /* prefill: blocks of 4 / nb sequences; their tokens and Σ L(L+1)/2 */
    const int64_t rows2[2] = {10, 6}, seen2[2] = {6 + 28, 1 + 15}, rows4[4] = {3, 7, 1, 5}, seen4[4] = {6, 28, 1, 15};
    const int64_t *rows = nb == 2 ? rows2 : rows4, *seen = nb == 2 ? seen2 : seen4;
    int64_t R = 0, S = 0;
    for (int g = 0; g < nb; g++) {
        if (rows[g] > R) R = rows[g];
        if (seen[g] > S) S = seen[g];
    }
    sp_shape pf = {4, 7, 7, r.max_context, SP_DT_F32, 0};
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &pf, &r, 0, 0, &p) == SP_OK, "%s", sp_last_error());
    int a2a = 0;
    for (int i = 0; i < p.layer.n; i++) {
        const sp_step *s = &p.layer.s[i];
        if (s->kind == SP_STEP_MATMUL && s->src == SP_BUF_XG) ck_assert_int_eq(s->m, 16);   /* packed */
        if (s->kind == SP_STEP_COLL && s->coll.kind == SP_COLL_ALLTOALL) {
            a2a++;
            ck_assert_int_eq(s->ragged, 1);
            ck_assert_int_eq(s->blk_rows, R);
            ck_assert_int_eq(s->coll.rows, nb * R);
            ck_assert_int_eq(s->coll.bytes_sent, (nb - 1) * R * s->coll.cols * 4);
        }
    }
    ck_assert_int_ge(a2a, 2);
    const sp_step *a = find_step(&p.layer, SP_STEP_ATTN);
    ck_assert_int_eq(a->m, R);
    ck_assert_int_eq(a->batch, 4 / nb);
    ck_assert_int_eq(a->heads, m.n_heads);
    ck_assert_int_eq(a->flops, 4 * m.n_heads * D * S);
    const sp_step *kv = find_step(&p.layer, SP_STEP_KV_STORE);
    ck_assert_int_eq(kv->m, R);
    ck_assert_int_eq(kv->kv_bytes_written, 2 * R * kv->kv_heads * D * kvb);
    /* each block's rows in the packed rows, and its sequences' rows within the block */
    for (int g = 0, at = 0; g < nb; g++) {
        int64_t r0, n;
        sp_lower_ragged_blk_rows(&p, nb, g, &r0, &n);
        ck_assert_int_eq(r0, at);
        ck_assert_int_eq(n, rows[g]);
        at += (int)n;
        int64_t b, slot, row0, q, pos0;
        sp_lower_ragged_blk_seq(&p, nb, g, 0, &b, &slot, &row0, &q, &pos0);
        ck_assert_int_eq(b, g * (4 / nb));
        ck_assert_int_eq(slot, 0);
        ck_assert_int_eq(row0, 0);
        ck_assert_int_eq(q, P[b]);
        sp_lower_ragged_blk_seq(&p, nb, g, 4 / nb, &b, &slot, &row0, &q, &pos0);
        ck_assert_int_eq(b, -1);
    }
    /* decode step 3: sequences 0, 2, 3 at contexts 6, 4, 8 */
    sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_F32, 0};
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &r, 3, 0, &p) == SP_OK, "%s", sp_last_error());
    a = find_step(&p.layer, SP_STEP_ATTN);
    int64_t Rd = nb == 2 ? 2 : 1, ctx = nb == 2 ? 4 + 8 : 8;
    ck_assert_int_eq(a->m, Rd);
    ck_assert_int_eq(a->flops, 4 * m.n_heads * D * ctx);
    ck_assert_int_eq(a->kv_bytes_read, 2 * ctx * a->kv_heads * D * kvb);
    if (nb == 2) {
        int64_t b, slot, row0, q, pos0;
        sp_lower_ragged_blk_seq(&p, nb, 1, 1, &b, &slot, &row0, &q, &pos0);
        ck_assert_int_eq(b, 3);
        ck_assert_int_eq(slot, 1);
        ck_assert_int_eq(row0, 1);
        ck_assert_int_eq(pos0, 7);
    }
    ck_assert_int_eq(p.kv_seqs, 4 / nb);
    sp_ragged_free(&r);
}
END_TEST

/* Weight-gathered FFNs: the sequences split over the gathered axes (2 blocks on wg-x over x = 2,
 * 4 on wg-xy over 2x2); each chip's rows its block's tokens, padded to the fullest block's. */
START_TEST(test_lowering_wg_blocks)
{
    static sp_program p;
    sp_model m = small_model();
    sp_layout l = layout_of(_i ? "mesh=2x2x1,weights=f32,kv=f32,prefill=wg-xy/heads,decode=wg-xy/heads"
                               : "mesh=2x2x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-x/heads");
    int nb = _i ? 4 : 2;
    const int64_t P[4] = {3, 7, 1, 5}, G[4] = {4, 2, 6, 3};
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, 4, &r), SP_OK);
    int64_t D = m.d_head, R = nb == 2 ? 10 : 7, S = nb == 2 ? 6 + 28 : 28;
    sp_shape pf = {4, 7, 7, r.max_context, SP_DT_F32, 0};
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &pf, &r, 0, 0, &p) == SP_OK, "%s", sp_last_error());
    ck_assert_int_eq(p.rag_blocks, nb);
    ck_assert_int_eq(p.rag_rows, R);
    ck_assert_int_eq(p.rag_seqs, 4 / nb);
    ck_assert_int_eq(find_step(&p.pre, SP_STEP_EMBED)->m, nb * R);
    for (int i = 0; i < p.layer.n; i++) {
        const sp_step *s = &p.layer.s[i];
        if (s->kind == SP_STEP_MATMUL || s->kind == SP_STEP_NORM_STATS) ck_assert_int_eq(s->m, R);
        if (s->kind == SP_STEP_COLL && !s->coll.is_weight) ck_assert_int_eq(s->coll.rows % R, 0);
    }
    const sp_step *a = find_step(&p.layer, SP_STEP_ATTN);
    ck_assert_int_eq(a->m, R);
    ck_assert_int_eq(a->blk_rows, R);
    ck_assert_int_eq(a->batch, 4 / nb);
    ck_assert_int_eq(a->flops, 4 * a->heads * D * S);
    ck_assert_int_eq(find_step(&p.post, SP_STEP_LOGITS)->m, 4);
    /* sequence 3: block 1 (2 blocks: its second, rows 1 .. 5 of the block) or 3 */
    int64_t seq, in0, out, q, pos0;
    sp_lower_ragged_io(&p, 3, &seq, &in0, &out, &q, &pos0);
    ck_assert_int_eq(seq, 3);
    ck_assert_int_eq(in0, nb == 2 ? R + 1 : 3 * R);
    ck_assert_int_eq(out, nb == 2 ? 3 : 3);
    ck_assert_int_eq(q, 5);
    sp_lower_ragged_io(&p, 4, &seq, &in0, &out, &q, &pos0);
    ck_assert_int_eq(seq, -1);
    /* decode step 3: sequences 0, 2, 3; 2 blocks: {0} and {2, 3}, 2 rows each; 4 blocks: 1 row */
    sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_F32, 0};
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &r, 3, 0, &p) == SP_OK, "%s", sp_last_error());
    int64_t Rd = nb == 2 ? 2 : 1;
    ck_assert_int_eq(p.rag_rows, Rd);
    ck_assert_int_eq(p.rag_seqs, Rd);
    for (int i = 0; i < p.layer.n; i++)
        if (p.layer.s[i].kind == SP_STEP_MATMUL) ck_assert_int_eq(p.layer.s[i].m, Rd);
    ck_assert_int_eq(find_step(&p.post, SP_STEP_LOGITS)->m, nb * Rd);
    a = find_step(&p.layer, SP_STEP_ATTN);
    ck_assert_int_eq(a->flops, 4 * a->heads * D * (nb == 2 ? 4 + 8 : 8));
    sp_lower_ragged_io(&p, 1, &seq, &in0, &out, &q, &pos0);   /* sequence 2 */
    ck_assert_int_eq(seq, 2);
    ck_assert_int_eq(in0, nb == 2 ? Rd : 2);
    ck_assert_int_eq(out, in0);
    ck_assert_int_eq(pos0, 3);
    ck_assert_int_eq(p.kv_seqs, 4 / nb);
    sp_ragged_free(&r);
}
END_TEST

/* offload_kv with a ragged batch: the last half of the slots (sequences 2 and 3: prompts 1, 5,
 * gens 6, 3) are host-held; prefill stores their 1 + 5 rows, decode step 3 loads their stored
 * tokens (1 + 2) + (5 + 2) and stores one row each, step 4 only sequence 2's (1 + 3 tokens). */
START_TEST(test_lowering_offload_kv)
{
    static sp_program p;
    sp_model m = small_model();
    sp_layout l = layout_of(_i ? "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_kv=0.5"
                               : "mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_kv=0.5");
    const int64_t P[4] = {3, 7, 1, 5}, G[4] = {4, 2, 6, 3};
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, 4, &r), SP_OK);
    sp_shape pf = {4, 7, 7, r.max_context, SP_DT_F32, 0};
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &pf, &r, 0, 0, &p) == SP_OK, "%s", sp_last_error());
    ck_assert_int_eq(p.kv_host_seqs, 2);
    const sp_step *hs = find_step(&p.layer, SP_STEP_HOST_STORE);
    int64_t tok = 2 * hs->kv_heads * m.d_head * 4;   /* one token's K and V */
    ck_assert_int_eq(hs->host_bytes, 6 * tok);
    ck_assert_ptr_null(find_step(&p.pre, SP_STEP_HOST_LOAD));   /* prefill loads nothing */
    sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_F32, 0};
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &r, 3, 0, &p) == SP_OK, "%s", sp_last_error());
    ck_assert_int_eq(find_step(&p.layer, SP_STEP_HOST_STORE)->host_bytes, 2 * tok);
    const sp_step *hl = find_step(&p.pre, SP_STEP_HOST_LOAD);
    ck_assert_int_eq(hl->host_bytes, 10 * tok);
    ck_assert_int_eq(sp_lower_host_bytes(hl, p.shape.context + 1), 12 * tok);   /* one more token each */
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &r, 4, 0, &p) == SP_OK, "%s", sp_last_error());
    ck_assert_int_eq(find_step(&p.pre, SP_STEP_HOST_LOAD)->host_bytes, 4 * tok);
    ck_assert_int_eq(find_step(&p.layer, SP_STEP_HOST_STORE)->host_bytes, tok);
    /* the host memory: every host-held slot at the longest context, as a uniform batch's */
    sp_mem_sizes ms;
    ck_assert_int_eq(sp_lower_mem_sizes(&p, &p, &ms), SP_OK);
    ck_assert_int_eq(ms.host_kv, 2 * r.max_context * tok * m.n_layers);
    sp_ragged_free(&r);
}
END_TEST

/* offload_kv over sequence blocks (batch-sharded attention on 2 chips: sequences 0, 1 | 2, 3):
 * each block's last slot host-held, sequences 1 (prompt 7, gen 2) and 3 (prompt 5, gen 3).  A
 * step carries the fullest block's bytes, each chip moves its own block's. */
START_TEST(test_lowering_offload_kv_blocks)
{
    static sp_program p;
    sp_model m = small_model();
    sp_layout l = layout_of("mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch,offload_kv=0.5");
    const int64_t P[4] = {3, 7, 1, 5}, G[4] = {4, 2, 6, 3};
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, 4, &r), SP_OK);
    sp_shape pf = {4, 7, 7, r.max_context, SP_DT_F32, 0};
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &pf, &r, 0, 0, &p) == SP_OK, "%s", sp_last_error());
    ck_assert_int_eq(p.kv_seqs, 2);
    ck_assert_int_eq(p.kv_host_seqs, 1);
    const sp_step *hs = find_step(&p.layer, SP_STEP_HOST_STORE);
    int64_t tok = 2 * hs->kv_heads * m.d_head * 4;
    ck_assert_int_eq(hs->host_bytes, 7 * tok);
    ck_assert_int_eq(sp_lower_ragged_host_bytes(&p, hs, 0), 7 * tok);
    ck_assert_int_eq(sp_lower_ragged_host_bytes(&p, hs, 1), 5 * tok);
    sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_F32, 0};
    ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &r, 3, 0, &p) == SP_OK, "%s", sp_last_error());
    const sp_step *hl = find_step(&p.pre, SP_STEP_HOST_LOAD);   /* sequence 1 has finished */
    ck_assert_int_eq(hl->host_bytes, 7 * tok);
    ck_assert_int_eq(sp_lower_ragged_host_bytes(&p, hl, 0), 0);
    ck_assert_int_eq(sp_lower_ragged_host_bytes(&p, hl, 1), 7 * tok);
    sp_ragged_free(&r);
}
END_TEST

/* ---- pricing ---- */
static const struct price_case {
    const char *model, *hw, *layout;
    int64_t batch, prompt, gen;
} price_cases[] = {
    {"tiny-llama", "h100", "mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 3},
    {"llama2-7b", "h100", "mesh=4x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads", 8, 512, 64},
    {"palm-62b", "tpu-v4", "mesh=2x2x2,weights=bf16,prefill=ws2d/heads,decode=ws2d/heads", 32, 1024, 32},
    {"tiny-gpt2", "a100-80g", "mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads", 3, 7, 1},
    {"llama2-7b", "h100", "replicas=2,mesh=2x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads", 8, 256, 32},
    {"llama2-7b", "h100", "stages=2,microbatches=1,mesh=2x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads", 8, 256, 32},
    {"palm-62b", "tpu-v4", "stages=4,microbatches=1,mesh=2x2x1,weights=bf16,prefill=ws2d/heads,decode=ws2d/heads", 16, 512, 16},
    /* batch-sharded attention: the sequence blocks as the uniform batch's */
    {"palm-62b", "tpu-v4", "mesh=2x2x2,weights=bf16,prefill=ws2d/batch,decode=ws2d/batch", 32, 1024, 32},
    {"llama2-7b", "h100", "replicas=2,mesh=4x1x1,weights=bf16,prefill=ws1d/batch,decode=ws1d/batch", 16, 256, 32},
    /* weight-gathered FFNs: the sequence blocks over the gathered axes as the uniform batch's */
    {"palm-62b", "tpu-v4", "mesh=2x2x2,weights=bf16,prefill=wg-xyz/batch,decode=ws2d/batch", 32, 1024, 32},
    {"palm-62b", "tpu-v4", "mesh=2x2x2,weights=bf16,prefill=ws2d/heads,decode=ws2d/batch", 32, 1024, 32},
    {"llama2-7b", "h100", "mesh=4x1x1,weights=bf16,prefill=wg-x/heads,decode=wg-x/heads", 8, 512, 64},
    {"llama2-7b", "h100", "stages=2,microbatches=1,mesh=2x2x1,weights=bf16,prefill=wg-xy/heads,decode=wg-xy/heads", 8, 256, 16},
    /* offload_weights: the streamed layers' loads as the uniform batch's */
    {"llama2-7b", "h100", "mesh=2x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads,offload_weights=8", 8, 256, 32},
    {"llama2-7b", "h100", "stages=2,microbatches=1,mesh=2x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads,"
                          "offload_weights=4,8", 8, 256, 32},
    {"palm-62b", "tpu-v4", "mesh=2x2x2,weights=bf16,prefill=ws2d/batch,decode=ws2d/batch,offload_ffn=16", 32, 1024, 32},
    /* offload_kv: each host-held sequence's own context, the uniform batch's when all are equal */
    {"llama2-7b", "h100", "mesh=2x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads,offload_kv=0.5", 8, 256, 32},
    {"llama2-7b", "h100", "stages=2,microbatches=1,mesh=2x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads,"
                          "offload_weights=4,8,offload_kv=0.25", 8, 256, 32},
    {"palm-62b", "tpu-v4", "replicas=2,mesh=2x2x1,weights=bf16,prefill=ws2d/heads,decode=ws2d/heads,offload_kv=1", 16, 512, 16},
    {"llama2-7b", "h100", "mesh=4x1x1,weights=bf16,prefill=ws1d/batch,decode=ws1d/batch,offload_kv=0.5", 8, 256, 32},
    {"palm-62b", "tpu-v4", "mesh=2x2x2,weights=bf16,prefill=wg-xyz/batch,decode=ws2d/batch,offload_kv=0.25", 32, 1024, 32},
    /* mixture of experts (every replica every expert): the slots and active experts of the packed tokens */
    {"mixtral-8x7b", "h100", "mesh=4x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads", 8, 512, 32},
    {"mixtral-8x7b", "h100", "replicas=2,mesh=2x2x1,weights=bf16,capacity=2,prefill=ws2d/batch,decode=ws2d/batch", 8, 256, 16},
    {"qwen1.5-moe-a2.7b", "h100", "stages=2,microbatches=1,mesh=2x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads", 8, 256, 32},
    /* prefill_chunk: the passes summed, and through stages the flow shop of every pass */
    {"llama2-7b", "h100", "prefill_chunk=2,mesh=4x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads", 8, 512, 64},
    {"llama2-7b", "h100", "prefill_chunk=1,stages=2,microbatches=1,mesh=2x1x1,weights=bf16,prefill=ws1d/heads,"
                          "decode=ws1d/heads", 8, 256, 32},
    {"palm-62b", "tpu-v4", "prefill_chunk=4,replicas=2,mesh=2x2x1,weights=bf16,prefill=ws2d/heads,decode=ws2d/heads", 16, 512, 16},
    {"mixtral-8x7b", "h100", "prefill_chunk=2,mesh=4x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads", 8, 512, 32},
    {"llama2-7b", "h100", "prefill_chunk=4,mesh=4x1x1,weights=bf16,prefill=ws1d/batch,decode=ws1d/batch", 8, 512, 64},
    {"llama2-7b", "h100", "prefill_chunk=2,mesh=2x1x1,weights=bf16,prefill=wg-x/heads,decode=wg-x/heads", 8, 512, 64},
    /* experts split over replicas: the replicas in lockstep, alike when the lengths are */
    {"mixtral-8x7b", "h100", "replicas=2,experts=2,mesh=2x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads", 8, 512, 32},
    {"mixtral-8x7b", "h100", "replicas=4,experts=4,capacity=2,mesh=2x1x1,weights=bf16,prefill=ws1d/heads,"
                             "decode=ws1d/heads", 16, 256, 16},
    {"qwen1.5-moe-a2.7b", "h100", "replicas=2,experts=2,mesh=2x2x1,weights=bf16,prefill=ws2d/batch,decode=ws2d/batch", 8, 256, 32},
};

START_TEST(test_equal_lengths_price_as_padded)
{
    const struct price_case *c = &price_cases[_i];
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find(c->model, &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find(c->hw, &hw, &err), SP_OK);
    sp_layout l = layout_of(c->layout);
    int64_t *P = malloc((size_t)c->batch * sizeof *P), *G = malloc((size_t)c->batch * sizeof *G);
    for (int64_t b = 0; b < c->batch; b++) {
        P[b] = c->prompt;
        G[b] = c->gen;
    }
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, c->batch, &r), SP_OK);
    sp_workload w = {c->batch, c->prompt, c->gen};
    sp_cost a, b;
    ck_assert_msg(sp_cost_eval_ragged(&m, &hw, &l, &r, NULL, &a) == SP_OK, "%s", sp_last_error());
    ck_assert_msg(sp_cost_eval(&m, &hw, &l, &w, NULL, &b) == SP_OK, "%s", sp_last_error());
    /* exactly: the same programs, the same roll-up */
    ck_assert_msg(a.prefill_s == b.prefill_s, "prefill %.17g vs %.17g", a.prefill_s, b.prefill_s);
    ck_assert_msg(a.decode_s == b.decode_s, "decode %.17g vs %.17g", a.decode_s, b.decode_s);
    ck_assert_msg(a.decode_step_s == b.decode_step_s, "decode step %.17g vs %.17g", a.decode_step_s, b.decode_step_s);
    ck_assert_msg(a.total_s == b.total_s, "total %.17g vs %.17g", a.total_s, b.total_s);
    ck_assert_msg(a.tokens_per_s == b.tokens_per_s && a.mfu == b.mfu && a.cost_chip_s_per_token == b.cost_chip_s_per_token,
                  "rates differ");
    ck_assert_int_eq(a.prefill.flops, b.prefill.flops);
    ck_assert_int_eq(a.decode.flops, b.decode.flops);
    ck_assert_int_eq(a.comm_bytes_prefill, b.comm_bytes_prefill);
    ck_assert_int_eq(a.comm_bytes_decode_step, b.comm_bytes_decode_step);
    ck_assert_int_eq(a.mem.total, b.mem.total);
    ck_assert_int_eq(a.mem.kv, b.mem.kv);

    /* every other sequence (some in each replica and in each sequence block of 2 or more: the
     * fullest block sets a step's figures) shorter in prompt and gen: cheaper, never dearer,
     * than padded */
    for (int64_t q = 0; q < c->batch; q += 2) {
        P[q] = c->prompt > 1 ? c->prompt / 2 : 1;
        G[q] = c->gen > 1 ? c->gen / 2 : 1;
    }
    sp_ragged_free(&r);
    ck_assert_int_eq(sp_ragged_from(P, G, c->batch, &r), SP_OK);
    ck_assert_msg(sp_cost_eval_ragged(&m, &hw, &l, &r, NULL, &a) == SP_OK, "%s", sp_last_error());
    if (c->prompt > 1) ck_assert_int_lt(a.prefill.flops, b.prefill.flops);
    ck_assert(a.prefill_s <= b.prefill_s);
    ck_assert(a.decode_s <= b.decode_s);
    ck_assert_int_le(a.mem.kv, b.mem.kv);
    sp_ragged_free(&r);
    free(P);
    free(G);
}
END_TEST

/* the hardware of the pricing tests, and their batch: prompts 3, 7, 1, 5 and gens 4, 2, 6, 3 */
static sp_hw h100(void)
{
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    return hw;
}

static sp_ragged four_seqs(void)
{
    static const int64_t P[4] = {3, 7, 1, 5}, G[4] = {4, 2, 6, 3};
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, 4, &r), SP_OK);
    return r;
}

/* The decode roll-up on a small example: runs of steps [1,2], [3], [4], [5,6]
 * each priced at their ends (t(s) from a program lowered at step s). */
START_TEST(test_decode_runs)
{
    sp_model m = small_model();
    sp_hw hw = h100();
    sp_layout l = layout_of(tp_layouts[1]);
    sp_ragged r = four_seqs();
    sp_cost c;
    ck_assert_msg(sp_cost_eval_ragged(&m, &hw, &l, &r, NULL, &c) == SP_OK, "%s", sp_last_error());
    static sp_program p;
    sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_BF16, 0};
    double t[7];
    for (int s = 1; s <= 6; s++) {
        ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &r, s, 0, &p), SP_OK);
        sp_phase_cost pc;
        sp_cost_program(&p, &hw, 0, &pc);
        t[s] = pc.time_s;
    }
    double want = 2 * 0.5 * (t[1] + t[2]) + t[3] + t[4] + 2 * 0.5 * (t[5] + t[6]);
    ck_assert_msg(fabs(c.decode_s - want) <= 1e-9 * want, "decode %.9g, runs %.9g", c.decode_s, want);
    ck_assert_msg(fabs(c.decode_step_s - t[6]) <= 1e-9 * t[6], "last step %.9g vs %.9g", c.decode_step_s, t[6]);
    /* tokens counted as generated: 15 */
    ck_assert_msg(fabs(c.tokens_per_s - 15 / c.total_s) <= 1e-9 * c.tokens_per_s, "tokens/s");
    sp_ragged_free(&r);
}
END_TEST

/* Replicas run their own sequences: the slower replica's times, each as its
 * sequences alone on one replica of the same tensor mesh. */
START_TEST(test_replicas_slowest)
{
    sp_model m = small_model();
    sp_hw hw = h100();
    sp_layout l2 = layout_of("replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads");
    sp_layout l1 = layout_of(tp_layouts[1]);
    const int64_t P[4] = {3, 7, 1, 5}, G[4] = {4, 2, 6, 3};
    sp_ragged r, v[2];
    ck_assert_int_eq(sp_ragged_from(P, G, 4, &r), SP_OK);
    sp_cost c, cv[2];
    ck_assert_msg(sp_cost_eval_ragged(&m, &hw, &l2, &r, NULL, &c) == SP_OK, "%s", sp_last_error());
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(sp_ragged_slice(&r, 2 * i, 2, &v[i]), SP_OK);
        ck_assert_int_eq(v[i].view, 1);
        ck_assert_msg(sp_cost_eval_ragged(&m, &hw, &l1, &v[i], NULL, &cv[i]) == SP_OK, "%s", sp_last_error());
    }
    /* replica 0 prefills 10 tokens (3 + 7), replica 1 six (1 + 5); replica 1 decodes 6 steps, replica 0 four */
    ck_assert(cv[0].prefill_s > cv[1].prefill_s);
    ck_assert(cv[1].decode_s > cv[0].decode_s);
    ck_assert_msg(c.prefill_s == cv[0].prefill_s, "prefill %.9g vs replica 0's %.9g", c.prefill_s, cv[0].prefill_s);
    ck_assert_msg(c.decode_s == cv[1].decode_s, "decode %.9g vs replica 1's %.9g", c.decode_s, cv[1].decode_s);
    ck_assert_int_eq(c.chips, 4);
    ck_assert_msg(fabs(c.tokens_per_s - 15 / c.total_s) <= 1e-9 * c.tokens_per_s, "tokens/s");
    sp_ragged_free(&v[0]);
    ck_assert_int_eq(r.prompt[0], 3);   /* a view's free leaves the batch's arrays */
    sp_ragged_free(&r);
}
END_TEST

/* The simulator's figures of r beside the closed form's: the prefill and the last step equal. */
static void simulate_beside(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_ragged *r, sp_cost *c,
                            sp_sim_times *t)
{
    ck_assert_msg(sp_cost_eval_ragged(m, hw, l, r, NULL, c) == SP_OK, "%s", sp_last_error());
    ck_assert_msg(sp_sim_eval_ragged(m, hw, l, r, NULL, t) == SP_OK, "%s", sp_last_error());
    ck_assert_msg(t->prefill_s == c->prefill_s, "prefill %.12g vs %.12g", t->prefill_s, c->prefill_s);
    ck_assert_msg(t->decode_step_s == c->decode_step_s, "last step %.12g vs %.12g", t->decode_step_s, c->decode_step_s);
}

/* The simulator runs every decode step: its prefill and last step are the
 * closed form's programs (equal), its decode the sum of every step's price,
 * which the closed form's runs-by-their-ends approximate. */
START_TEST(test_simulate_every_step)
{
    sp_model m = small_model();
    sp_hw hw = h100();
    const char *lay[5] = {tp_layouts[3], "stages=2,microbatches=1,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                                          "decode=ws1d/heads",
                          "stages=2,microbatches=1,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,"
                          "offload_weights=1,1",
                          "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_kv=0.5",
                          "prefill_chunk=2,stages=2,microbatches=1,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                          "decode=ws1d/heads"};
    sp_layout l = layout_of(lay[_i]);
    sp_ragged r = four_seqs();
    sp_cost c;
    sp_sim_times t;
    simulate_beside(&m, &hw, &l, &r, &c, &t);
    static sp_program p;
    sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_BF16, 0};
    double sum = 0;
    for (int s = 1; s <= 6; s++)
        for (int stg = 0; stg < l.stages; stg++) {   /* one micro-batch: a step passes every stage in turn */
            ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &r, s, stg, &p), SP_OK);
            sp_phase_cost pc;
            sp_cost_program(&p, &hw, 0, &pc);
            sum += pc.time_s;
        }
    ck_assert_msg(fabs(t.decode_s - sum) <= 1e-9 * sum, "simulated decode %.12g, steps %.12g", t.decode_s, sum);
    ck_assert_msg(fabs(t.decode_s - c.decode_s) <= 1e-2 * sum, "simulated decode %.9g, closed form %.9g", t.decode_s,
                  c.decode_s);
    ck_assert_msg(fabs(t.makespan_s - (t.prefill_s + t.decode_s)) <= 1e-12, "makespan");
    sp_ragged_free(&r);
}
END_TEST

/* Replicas: each replica's own sequences and programs on its own chips; the slowest
 * replica's prefill (replica 0: 3 + 7 tokens) and decode (replica 1: gens 6 and 3), every
 * replica's chips' events. */
START_TEST(test_simulate_replicas)
{
    sp_model m = small_model();
    sp_hw hw = h100();
    sp_layout l = layout_of(_i ? "replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"
                               : "replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads");
    sp_ragged r = four_seqs();
    sp_cost c;
    sp_sim_times t;
    simulate_beside(&m, &hw, &l, &r, &c, &t);
    double sum[2] = {0, 0}, pf[2] = {0, 0};
    int64_t events = 0;
    for (int rep = 0; rep < 2; rep++) {
        /* replica rep's programs, each priced as lowered */
        static sp_program p;
        sp_ragged v;
        ck_assert_int_eq(sp_ragged_slice(&r, 2 * rep, 2, &v), SP_OK);
        sp_shape ps = {4, v.max_prompt, v.max_prompt, r.max_context, SP_DT_BF16, 0};
        sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_BF16, 0};
        sp_phase_cost pc;
        ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &ps, &v, 0, 0, &p), SP_OK);
        sp_cost_program(&p, &hw, 0, &pc);
        pf[rep] = pc.time_s;
        events += 2 * sp_program_steps(&p);   /* the replica's 2 chips */
        for (int64_t s = 1; s <= v.max_gen; s++) {
            ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &v, s, 0, &p), SP_OK);
            sp_cost_program(&p, &hw, 0, &pc);
            sum[rep] += pc.time_s;
            events += 2 * sp_program_steps(&p);
        }
        sp_ragged_free(&v);
    }
    ck_assert(pf[0] > pf[1] && sum[1] > sum[0]);
    ck_assert_msg(fabs(t.prefill_s - pf[0]) <= 1e-9 * pf[0], "prefill %.12g, replica 0's %.12g", t.prefill_s, pf[0]);
    ck_assert_msg(fabs(t.decode_s - sum[1]) <= 1e-9 * sum[1], "decode %.12g, replica 1's steps %.12g", t.decode_s, sum[1]);
    ck_assert_msg(fabs(t.decode_s - c.decode_s) <= 1e-2 * sum[1], "simulated decode %.9g, closed form %.9g", t.decode_s,
                  c.decode_s);
    ck_assert_int_eq(t.prefill.events + t.decode.events, events);
    double e0 = pf[0] + sum[0], e1 = pf[1] + sum[1];
    ck_assert_msg(fabs(t.makespan_s - (e0 > e1 ? e0 : e1)) <= 1e-9 * t.makespan_s, "makespan %.12g", t.makespan_s);
    sp_ragged_free(&r);
}
END_TEST

/* Experts split over 2 replicas (replica 0: prompts 3, 7, gens 4, 2; replica 1: 1, 5 and 6, 3):
 * the replicas run each pass and step together, so the prefill is the slower replica's, each
 * decode step the slower replica's program (replica 0's steps 5 and 6 with no rows), the steps
 * one after another; the simulator agrees, and the closed form to 1 %. */
START_TEST(test_experts_lockstep)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-moe", &m, &err), SP_OK);
    sp_hw hw = h100();
    sp_layout l = layout_of("replicas=2,experts=2,capacity=4,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                            "decode=ws1d/heads");
    sp_ragged r = four_seqs();
    sp_cost c;
    sp_sim_times t;
    simulate_beside(&m, &hw, &l, &r, &c, &t);
    static sp_program p;
    sp_ragged v[2];
    double pf = 0, dsum = 0;
    for (int g = 0; g < 2; g++) {
        ck_assert_int_eq(sp_ragged_micro(&r, 2, 1, g, 0, &v[g]), SP_OK);
        sp_shape ps = {4, v[g].max_prompt, v[g].max_prompt, r.max_context, SP_DT_BF16, 0};
        ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &ps, &v[g], 0, 0, &p), SP_OK);
        sp_phase_cost pc;
        sp_cost_program(&p, &hw, 0, &pc);
        pf = fmax(pf, pc.time_s);
    }
    ck_assert_int_eq(sp_ragged_peers_max_gen(&v[0]), 6);
    sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_BF16, 0};
    for (int64_t s = 1; s <= 6; s++) {
        double step = 0;
        for (int g = 0; g < 2; g++) {
            ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &v[g], s, 0, &p) == SP_OK, "%s",
                          sp_last_error());
            ck_assert_int_eq(p.pass_seqs, sp_ragged_active_count(&v[g], s));   /* replica 0 after step 4: none */
            sp_phase_cost pc;
            sp_cost_program(&p, &hw, 0, &pc);
            step = fmax(step, pc.time_s);
        }
        dsum += step;
    }
    ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &v[0], 7, 0, &p), SP_EINVAL);
    ck_assert_msg(fabs(c.prefill_s - pf) <= 1e-9 * pf, "prefill %.12g, the slower replica's %.12g", c.prefill_s, pf);
    ck_assert_msg(fabs(t.decode_s - dsum) <= 1e-9 * dsum, "simulated decode %.12g, the steps' %.12g", t.decode_s, dsum);
    ck_assert_msg(fabs(c.decode_s - dsum) <= 1e-2 * dsum, "decode %.12g, the steps' %.12g", c.decode_s, dsum);
    /* a replica's view alone (not sp_ragged_micro's) cannot say which replicas run with it */
    sp_ragged alone;
    ck_assert_int_eq(sp_ragged_slice(&r, 0, 2, &alone), SP_OK);
    sp_shape ps = {4, 7, 7, r.max_context, SP_DT_BF16, 0};
    ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &ps, &alone, 0, 0, &p), SP_EINVAL);
    ck_assert_msg(strstr(sp_last_error(), "place in the batch"), "%s", sp_last_error());
    sp_ragged_free(&r);
}
END_TEST

/* plan of a workload: every layout priced by the batch's actual tokens.  The chosen layout's
 * figures are its ragged price, and no layout of a few the ragged lowering takes on 4 chips
 * beats it (a planner pricing the padded batch would choose by other figures). */
START_TEST(test_plan_workload)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("llama2-7b", &m, &err), SP_OK);
    sp_hw hw = h100();
    /* long and short prompts, long and short generations: padding costs differ by layout */
    enum { N = 8 };
    const int64_t P[N] = {2048, 16, 16, 16, 1024, 16, 16, 16}, G[N] = {8, 256, 8, 8, 8, 8, 8, 8};
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, N, &r), SP_OK);
    sp_workload w = sp_workload_padded(&r);
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.objective = _i ? SP_PLAN_MIN_COST : SP_PLAN_MIN_LATENCY;
    o.weights = SP_PLAN_W_BF16;
    o.workload = &r;
    sp_plan *p;
    ck_assert_msg(sp_plan_solve(&m, &hw, 4, &w, &o, &p) == SP_OK, "%s", sp_last_error());
    ck_assert(p->has_chosen);
    sp_cost c;
    ck_assert_msg(sp_cost_eval_ragged(&m, &hw, &p->chosen.layout, &r, NULL, &c) == SP_OK, "%s", sp_last_error());
    ck_assert_msg(c.total_s == p->chosen.cost.total_s && c.cost_chip_s_per_token == p->chosen.cost.cost_chip_s_per_token,
                  "chosen: total %.9g vs ragged %.9g", p->chosen.cost.total_s, c.total_s);
    double best = _i ? c.cost_chip_s_per_token : c.total_s;
    static const char *const some[] = {
        "mesh=4x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads",
        "mesh=2x2x1,weights=bf16,prefill=ws2d/heads,decode=ws2d/heads",
        "replicas=2,mesh=2x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads",
        "replicas=4,mesh=1x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads",
        "mesh=4x1x1,weights=bf16,prefill=wg-x/heads,decode=wg-x/heads",
        "mesh=4x1x1,weights=bf16,prefill=ws1d/batch,decode=ws1d/batch",
    };
    int priced = 0;
    for (size_t k = 0; k < sizeof some / sizeof some[0]; k++) {
        sp_layout l = layout_of(some[k]);
        sp_cost q;
        if (sp_cost_eval_ragged(&m, &hw, &l, &r, NULL, &q) != SP_OK || !q.feasible) continue;
        priced++;
        double v = _i ? q.cost_chip_s_per_token : q.total_s;
        ck_assert_msg(best <= v * (1 + 1e-12), "%s: %.9g beats the plan's %.9g", some[k], v, best);
    }
    ck_assert_int_ge(priced, 3);
    ck_assert_int_eq(p->n_stages, p->chosen.layout.stages);
    sp_plan_free(p);
    /* what the planner does not do for a workload: refused by name */
    o.offload = 1;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 4, &w, &o, &p), SP_ENOTSUP);
    ck_assert_msg(strstr(sp_last_error(), "workload") && strstr(sp_last_error(), "offload"), "%s", sp_last_error());
    o.offload = 0;
    sp_workload bad = w;
    bad.gen++;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 4, &bad, &o, &p), SP_EINVAL);
    int chips[1] = {4};
    int64_t batches[1] = {N};
    ck_assert_int_eq(sp_plan_frontier(&m, &hw, chips, 1, batches, 1, &w, &o, &p), SP_ENOTSUP);
    sp_ragged_free(&r);
}
END_TEST

/* flow shop of M jobs over S stages in order (t[j·S + s] seconds): the test's own recurrence */
static double flow_shop(const double *t, int M, int S)
{
    double c[8] = {0};
    for (int j = 0; j < M; j++)
        for (int s = 0; s < S; s++) c[s] = (s && c[s - 1] > c[s] ? c[s - 1] : c[s]) + t[j * S + s];
    return c[S - 1];
}

/* Micro-batches: micro-batch j takes sequences [2j, 2j + 2) and its own programs; the prefill
 * is the flow shop of the two micro-batches' programs through the stages, each decode step
 * the flow shop of the micro-batches still generating, one step after another; the
 * simulator agrees (prefill and last step exactly, decode to rounding). */
START_TEST(test_microbatches)
{
    sp_model m = small_model();
    sp_hw hw = h100();
    sp_layout l = layout_of(_i ? "stages=2,microbatches=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                                 "decode=ws1d/heads"
                               : "microbatches=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads");
    const int S = l.stages, M = 2;
    sp_ragged r = four_seqs();   /* prompts 3 7 | 1 5, gens 4 2 | 6 3 */
    sp_cost c;
    sp_sim_times t;
    simulate_beside(&m, &hw, &l, &r, &c, &t);
    static sp_program p;
    sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_BF16, 0};
    double pt[4], pf_bytes = 0;
    sp_ragged v[2];
    for (int j = 0; j < M; j++) {
        ck_assert_int_eq(sp_ragged_micro(&r, 1, M, 0, j, &v[j]), SP_OK);
        ck_assert_int_eq(v[j].prompt[0], r.prompt[2 * j]);
        sp_shape ps = {4, v[j].max_prompt, v[j].max_prompt, r.max_context, SP_DT_BF16, 0};
        for (int o = 0; o < S; o++) {
            ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &ps, &v[j], 0, o, &p), SP_OK);
            sp_phase_cost pc;
            sp_cost_program(&p, &hw, 0, &pc);
            pt[j * S + o] = pc.time_s;
            if (o == 0) pf_bytes += (double)pc.comm_bytes;
        }
        /* a program for the batch's other sequences is not this micro-batch's */
        ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &ps, &r, 0, 0, &p), SP_EINVAL);
        ck_assert_msg(strstr(sp_last_error(), "micro-batch"), "%s", sp_last_error());
    }
    ck_assert(pt[0] != pt[S]);   /* the micro-batches differ */
    double pf = flow_shop(pt, M, S);
    ck_assert_msg(fabs(c.prefill_s - pf) <= 1e-9 * pf, "prefill %.12g, flow shop %.12g", c.prefill_s, pf);
    ck_assert_msg(fabs((double)c.comm_bytes_prefill - pf_bytes) <= 0.5, "prefill bytes");
    double dsum = 0;
    for (int64_t s = 1; s <= r.max_gen; s++) {
        double dt[4];
        int ma = 0;
        for (int j = 0; j < M; j++) {
            if (s > v[j].max_gen) continue;   /* micro-batch 0 ends after step 4 */
            for (int o = 0; o < S; o++) {
                ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &v[j], s, o, &p), SP_OK);
                sp_phase_cost pc;
                sp_cost_program(&p, &hw, 0, &pc);
                dt[ma * S + o] = pc.time_s;
            }
            ma++;
        }
        ck_assert_int_eq(ma, s <= 4 ? 2 : 1);
        dsum += flow_shop(dt, ma, S);
    }
    ck_assert_msg(fabs(t.decode_s - dsum) <= 1e-9 * dsum, "simulated decode %.12g, steps %.12g", t.decode_s, dsum);
    ck_assert_msg(fabs(c.decode_s - dsum) <= 1e-2 * dsum, "decode %.12g, steps %.12g", c.decode_s, dsum);
    /* the KV cache holds every micro-batch's slots, as the padded batch's, each of the longest
     * sequence's context (9 tokens) where the padded one's is 7 + 6 */
    sp_workload w = sp_workload_padded(&r);
    sp_cost pad;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l, &w, NULL, &pad), SP_OK);
    ck_assert_int_eq(c.mem.kv * (w.prompt + w.gen), pad.mem.kv * r.max_context);
    ck_assert(c.prefill_s < pad.prefill_s);
    /* micro-batch 1 given micro-batch 0's lengths: its own programs, so the figures move */
    const int64_t P2[4] = {3, 7, 3, 7}, G2[4] = {4, 2, 4, 2};
    sp_ragged r2;
    ck_assert_int_eq(sp_ragged_from(P2, G2, 4, &r2), SP_OK);
    sp_cost c2;
    ck_assert_int_eq(sp_cost_eval_ragged(&m, &hw, &l, &r2, NULL, &c2), SP_OK);
    ck_assert_msg(c2.prefill_s > c.prefill_s && c2.decode_s < c.decode_s, "prefill %.9g vs %.9g, decode %.9g vs %.9g",
                  c2.prefill_s, c.prefill_s, c2.decode_s, c.decode_s);
    /* a split that does not divide: refused */
    sp_layout l3 = l;
    l3.microbatches = 3;
    ck_assert_int_eq(sp_cost_eval_ragged(&m, &hw, &l3, &r, NULL, &c2), SP_EINVAL);
    sp_ragged_free(&r2);
    sp_ragged_free(&r);
}
END_TEST

/* prefill_chunk=1 on 2 stages × 2 micro-batches: pass u of micro-batch j is sequence 2j + u
 * alone (its prompt's rows, its slot); the prefill is the flow shop of the 4 passes in the
 * executor's order, the simulator's too, and below the padded batch's. */
START_TEST(test_prefill_chunk)
{
    sp_model m = small_model();
    sp_hw hw = h100();
    sp_layout l = layout_of("prefill_chunk=1,stages=2,microbatches=2,mesh=1x1x1,weights=f32,kv=f32,"
                            "prefill=ws1d/heads,decode=ws1d/heads");
    sp_ragged r = four_seqs();   /* prompts 3 7 | 1 5 */
    sp_cost c;
    sp_sim_times t;
    simulate_beside(&m, &hw, &l, &r, &c, &t);
    static sp_program p;
    double pt[8];
    for (int j = 0; j < 2; j++) {
        sp_ragged v;
        ck_assert_int_eq(sp_ragged_micro(&r, 1, 2, 0, j, &v), SP_OK);
        sp_shape ps = {4, v.max_prompt, v.max_prompt, r.max_context, SP_DT_BF16, 0};
        for (int u = 0; u < 2; u++)
            for (int o = 0; o < 2; o++) {
                ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &ps, &v, u, o, &p) == SP_OK, "%s",
                              sp_last_error());
                ck_assert_int_eq(p.passes_seq, 2);
                ck_assert_int_eq(p.pass_seqs, 1);
                int64_t seq, row0, out, q, pos0;
                sp_lower_ragged_io(&p, 0, &seq, &row0, &out, &q, &pos0);
                ck_assert_int_eq(seq, u);   /* the micro-batch's sequence u, its slot u */
                ck_assert_int_eq(q, r.prompt[2 * j + u]);
                sp_lower_ragged_io(&p, 1, &seq, &row0, &out, &q, &pos0);
                ck_assert_int_eq(seq, -1);
                const sp_step *kv = find_step(&p.layer, SP_STEP_KV_STORE);
                if (kv) ck_assert_int_eq(kv->m, r.prompt[2 * j + u]);
                sp_phase_cost pc;
                sp_cost_program(&p, &hw, 0, &pc);
                pt[(j * 2 + u) * 2 + o] = pc.time_s;
            }
        ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &ps, &v, 2, 0, &p), SP_EINVAL);
        ck_assert_msg(strstr(sp_last_error(), "ragged prefill pass 2"), "%s", sp_last_error());
        sp_ragged_free(&v);
    }
    double pf = flow_shop(pt, 4, 2);
    ck_assert_msg(fabs(c.prefill_s - pf) <= 1e-9 * pf, "prefill %.12g, flow shop of the passes %.12g", c.prefill_s, pf);
    sp_workload w = sp_workload_padded(&r);
    sp_cost pad;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l, &w, NULL, &pad), SP_OK);
    ck_assert(c.prefill_s < pad.prefill_s);
    sp_ragged_free(&r);
}
END_TEST

/* prefill_chunk=2 over 2 cache blocks (batch-sharded attention on 2 chips: sequences 0, 1 | 2, 3):
 * pass i takes sequence i of each block, as a uniform batch's passes fill the blocks */
START_TEST(test_prefill_chunk_blocks)
{
    sp_model m = small_model();
    sp_layout l = layout_of("prefill_chunk=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch");
    sp_ragged r = four_seqs();   /* prompts 3 7 1 5 */
    static sp_program p;
    sp_shape ps = {4, 7, 7, r.max_context, SP_DT_BF16, 0};
    for (int u = 0; u < 2; u++) {
        ck_assert_msg(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &ps, &r, u, 0, &p) == SP_OK, "%s", sp_last_error());
        int64_t seq, row0, out, q, pos0;
        for (int i = 0; i < 2; i++) {
            sp_lower_ragged_io(&p, i, &seq, &row0, &out, &q, &pos0);
            ck_assert_int_eq(seq, 2 * i + u);   /* block i's sequence u */
            ck_assert_int_eq(q, r.prompt[2 * i + u]);
        }
        sp_lower_ragged_io(&p, 2, &seq, &row0, &out, &q, &pos0);
        ck_assert_int_eq(seq, -1);
        const sp_step *kv = find_step(&p.layer, SP_STEP_KV_STORE);   /* the fullest block's rows */
        ck_assert_int_eq(kv->m, u ? 7 : 3);
        ck_assert_int_eq(find_step(&p.pre, SP_STEP_EMBED)->m, u ? 7 + 5 : 3 + 1);
    }
    sp_ragged_free(&r);
}
END_TEST

/* Bundled models with micro-batches of mixed prompt and gen lengths, on one stage and on
 * two: the simulator's prefill and last step equal the closed form's; equal lengths price
 * as the padded batch (the prefill's flow shop of equal micro-batches is the uniform
 * batch's; one stage's decode too; with stages a ragged batch's decode steps are not
 * overlapped across tokens, never cheaper). */
static const char *const mb_models[] = {"tiny-llama", "tiny-palm"};
START_TEST(test_microbatches_models)
{
    sp_model m;
    sp_error err;
    /* the last two: prefill passes of one sequence (prefill_chunk), each its own job of the flow shop */
    static const char *const lay[4] = {
        "microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads",
        "stages=2,microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads",
        "prefill_chunk=1,microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads",
        "prefill_chunk=1,stages=2,microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads",
    };
    ck_assert_int_eq(sp_model_find(mb_models[_i / 4], &m, &err), SP_OK);
    sp_hw hw = h100();
    sp_layout l = layout_of(lay[_i % 4]);
    const int64_t P[4] = {5, 2, 9, 4}, G[4] = {3, 6, 2, 5}, Pe[4] = {6, 6, 6, 6}, Ge[4] = {4, 4, 4, 4};
    sp_ragged r, e;
    ck_assert_int_eq(sp_ragged_from(P, G, 4, &r), SP_OK);
    ck_assert_int_eq(sp_ragged_from(Pe, Ge, 4, &e), SP_OK);
    sp_cost c, a, b;
    sp_sim_times t;
    simulate_beside(&m, &hw, &l, &r, &c, &t);
    ck_assert_msg(fabs(t.decode_s - c.decode_s) <= 1e-2 * t.decode_s, "simulated decode %.9g, closed form %.9g",
                  t.decode_s, c.decode_s);
    sp_workload w = sp_workload_padded(&e);
    ck_assert_msg(sp_cost_eval_ragged(&m, &hw, &l, &e, NULL, &a) == SP_OK, "%s", sp_last_error());
    ck_assert_msg(sp_cost_eval(&m, &hw, &l, &w, NULL, &b) == SP_OK, "%s", sp_last_error());
    ck_assert_msg(a.prefill_s == b.prefill_s, "prefill %.17g vs padded %.17g", a.prefill_s, b.prefill_s);
    if (l.stages == 1) ck_assert_msg(a.decode_s == b.decode_s, "decode %.17g vs padded %.17g", a.decode_s, b.decode_s);
    else ck_assert(a.decode_s >= b.decode_s);
    ck_assert_int_eq(a.comm_bytes_prefill, b.comm_bytes_prefill);
    ck_assert_int_eq(a.comm_bytes_decode_step, b.comm_bytes_decode_step);
    ck_assert_int_eq(a.mem.total, b.mem.total);
    sp_ragged_free(&e);
    sp_ragged_free(&r);
}
END_TEST

START_TEST(test_refused_by_name)
{
    static sp_program p;
    sp_model m = small_model();
    const int64_t P[4] = {3, 7, 1, 5}, G[4] = {4, 2, 6, 3};
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, 4, &r), SP_OK);
    static const struct { const char *layout, *why; } no[] = {
        {"mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/batch", "KV handoff"},
        {"mesh=2x1x1,prefill=wg-x/heads,decode=ws2d/heads", "KV handoff"},
        {"mesh=2x2x1,prefill=wg-x/batch,decode=wg-x/batch", "wg-x and batch-sharded attention"},
        {"mesh=1x1x1,prefill_tokens=7,prefill=ws1d/heads,decode=ws1d/heads", "prefill_tokens"},
    };
    sp_shape pf = {4, 7, 7, r.max_context, SP_DT_BF16, 0};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        sp_layout l = layout_of(no[i].layout);
        ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &pf, &r, 0, 0, &p), SP_EINVAL);
        ck_assert_msg(strstr(sp_last_error(), "ragged") && strstr(sp_last_error(), no[i].why) &&
                          strstr(sp_last_error(), "not implemented"),
                      "%s: %s", no[i].layout, sp_last_error());
    }
    /* shapes that are not this batch's */
    sp_layout l = layout_of(tp_layouts[0]);
    sp_shape bad = {4, 6, 6, r.max_context, SP_DT_BF16, 0};
    ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &bad, &r, 0, 0, &p), SP_EINVAL);
    sp_shape dc = {4, 1, r.max_context, r.max_context, SP_DT_BF16, 0};
    ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dc, &r, 7, 0, &p), SP_EINVAL);
    sp_shape small = {4, 1, 8, 8, SP_DT_BF16, 0};
    ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &small, &r, 1, 0, &p), SP_EINVAL);
    sp_ragged_free(&r);
}
END_TEST

/* ---- executor: each sequence as if alone ---- */
static const struct run_case {
    const char *model, *layout;
} run_cases[] = {
    {"tiny-llama", "mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "mesh=4x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads"},
    {"tiny-llama", "mesh=2x2x2,weights=bf16,kv=f32,prefill=ws2d/heads,decode=ws2d/heads"},
    {"tiny-gpt2", "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-gpt2", "mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads"},
    /* replicas: each its own sequences (replica 0: prompts 3, 7, gens 4, 2; replica 1: 1, 5 and 6, 3) */
    {"tiny-llama", "replicas=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-gpt2", "replicas=2,mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads"},
    {"tiny-llama", "replicas=4,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    /* pipeline stages (one micro-batch): the packed rows passed on */
    {"tiny-llama", "stages=2,microbatches=1,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-gpt2", "stages=2,microbatches=1,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "stages=2,microbatches=1,replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    /* batch-sharded attention: each chip attends its block of sequences (KV heads sharded: K/V all-to-all;
     * one KV head: K/V from the block's rows) */
    {"tiny-llama", "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"},
    {"tiny-llama", "mesh=4x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"},
    {"tiny-gpt2", "mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/batch,decode=ws2d/batch"},
    {"tiny-palm", "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"},
    {"tiny-palm", "mesh=2x2x1,weights=bf16,kv=f32,prefill=ws2d/batch,decode=ws2d/batch"},
    {"tiny-llama", "replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"},
    {"tiny-gpt2", "stages=2,microbatches=1,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"},
    /* weight-gathered FFNs: each chip's rows its block's over the gathered axes */
    {"tiny-llama", "mesh=2x1x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-x/heads"},
    {"tiny-llama", "mesh=2x2x1,weights=f32,kv=f32,prefill=wg-xy/heads,decode=wg-xy/heads"},
    {"tiny-palm", "mesh=2x2x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-x/heads"},
    {"tiny-gpt2", "mesh=2x2x1,weights=bf16,kv=f32,prefill=wg-xyz/heads,decode=wg-xyz/heads"},
    {"tiny-llama", "mesh=2x2x1,weights=f32,kv=f32,prefill=wg-xyz/batch,decode=ws2d/batch"},
    {"tiny-palm", "mesh=2x2x1,weights=f32,kv=f32,prefill=wg-xyz/batch,decode=ws2d/batch"},
    {"tiny-llama", "replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-x/heads"},
    {"tiny-gpt2", "stages=2,microbatches=1,mesh=2x1x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-x/heads"},
    /* the KV handoff of a head-sharded prefill holding its one KV head into batch-sharded decode's blocks */
    {"tiny-palm", "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/batch"},
    {"tiny-palm", "mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch"},
    /* micro-batches, each its own sequences (micro-batch 0: prompts 3, 7, gens 4, 2; micro-batch 1:
     * 1, 5 and 6, 3: micro-batch 0 sits out steps 5 and 6); replicas × micro-batches: one sequence each */
    {"tiny-llama", "microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "microbatches=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "stages=2,microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "stages=2,microbatches=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"},
    {"tiny-palm", "microbatches=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"},
    {"tiny-palm", "stages=2,microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-palm", "stages=2,microbatches=2,mesh=2x1x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-x/heads"},
    {"tiny-llama", "stages=2,microbatches=2,replicas=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    /* offload_weights: the streamed layers' weights from the host arena, whatever the tokens */
    {"tiny-llama", "mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_weights=2"},
    {"tiny-llama", "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_weights=4"},
    {"tiny-gpt2", "mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/batch,decode=ws2d/batch,offload_weights=1"},
    {"tiny-llama", "mesh=4x1x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-x/heads,offload_ffn=2"},
    {"tiny-gpt2", "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_attn=1,offload_ffn=2"},
    {"tiny-llama", "stages=2,microbatches=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,"
                   "offload_weights=1,2"},
    {"tiny-llama", "replicas=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_weights=3"},
    /* offload_kv: the last slots' sequences (prompts 1, 5, gens 6, 3 of 4; the second of each
     * micro-batch or replica of 2) in host memory, each loaded and stored with its own tokens */
    {"tiny-llama", "mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_kv=0.5"},
    {"tiny-llama", "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_weights=2,offload_kv=0.25"},
    {"tiny-gpt2", "mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads,offload_kv=0.75"},
    {"tiny-palm", "mesh=4x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_kv=1"},
    {"tiny-llama", "microbatches=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_kv=0.5"},
    {"tiny-llama", "stages=2,microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,"
                   "offload_weights=1,1,offload_kv=0.5"},
    {"tiny-gpt2", "replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_kv=0.5"},
    /* offload_kv with sequence blocks over chips: each chip its block's host-held sequences (the
     * last of each block), its own bytes over the host link */
    {"tiny-llama", "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch,offload_kv=0.5"},
    {"tiny-palm", "mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch,offload_kv=1"},
    {"tiny-llama", "mesh=2x1x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-x/heads,offload_kv=0.5"},
    {"tiny-llama", "mesh=2x2x1,weights=f32,kv=f32,prefill=wg-xyz/batch,decode=ws2d/batch,offload_kv=1"},
    {"tiny-llama", "microbatches=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch,offload_kv=1"},
    /* mixture of experts (capacity 4 = 8 experts / top-2: no token dropped, packed or alone): the
     * router and the experts see the packed tokens only; every replica holds every expert */
    {"tiny-moe", "capacity=4,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-moe", "capacity=4,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-moe", "capacity=4,mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads"},
    {"tiny-moe", "capacity=4,replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"},
    {"tiny-moe", "capacity=4,stages=2,microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-moe-shared", "capacity=4,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-moe-shared", "capacity=4,mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads"},
    {"tiny-moe-shared", "capacity=4,replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-moe-every2", "capacity=4,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-moe-every2", "capacity=4,mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads"},
    {"tiny-moe-every2", "capacity=4,microbatches=2,mesh=4x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-moe", "capacity=4,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,offload_kv=0.5"},
    /* experts split over replicas (replica 0: prompts 3, 7, gens 4, 2; replica 1: 1, 5 and 6, 3): the
     * replicas run each step together, replica 0 with no rows in steps 5 and 6; the all-to-all's
     * bytes as the actual routing says */
    {"tiny-moe", "capacity=4,replicas=2,experts=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-moe", "capacity=4,replicas=2,experts=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-moe", "capacity=4,replicas=4,experts=4,mesh=1x1x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads"},
    {"tiny-moe", "capacity=4,replicas=2,experts=2,mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads"},
    {"tiny-moe-shared", "capacity=4,replicas=2,experts=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                        "decode=ws1d/heads"},
    {"tiny-moe-every2", "capacity=4,replicas=4,experts=4,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                        "decode=ws1d/heads"},
    {"tiny-moe-every2", "capacity=4,replicas=2,experts=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,"
                        "decode=ws1d/batch"},
    /* prefill_chunk: each pass a ragged sub-batch of consecutive sequences (passes of 1 and 2 of 4) */
    {"tiny-llama", "prefill_chunk=1,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "prefill_chunk=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-gpt2", "prefill_chunk=2,mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads"},
    {"tiny-palm", "prefill_chunk=1,mesh=4x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "prefill_chunk=1,replicas=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-llama", "prefill_chunk=1,stages=2,microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                   "decode=ws1d/heads"},
    {"tiny-llama", "prefill_chunk=2,stages=2,microbatches=1,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                   "decode=ws1d/heads,offload_weights=1,1"},
    {"tiny-moe", "prefill_chunk=2,capacity=4,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"},
    {"tiny-moe-every2", "prefill_chunk=1,capacity=4,microbatches=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                        "decode=ws1d/heads"},
    /* prefill_chunk over sequence blocks: pass i takes a share of each block (blocks 0, 1 | 2, 3: pass 0
     * sequences 0 and 2, pass 1 sequences 1 and 3) */
    {"tiny-llama", "prefill_chunk=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch"},
    {"tiny-palm", "prefill_chunk=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/batch"},
    {"tiny-llama", "prefill_chunk=2,mesh=2x1x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-x/heads"},
    {"tiny-llama", "prefill_chunk=2,mesh=2x1x1,weights=f32,kv=f32,prefill=wg-xyz/batch,decode=ws2d/batch"},
    {"tiny-gpt2", "prefill_chunk=2,stages=2,microbatches=1,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,"
                  "decode=ws1d/batch"},
    {"tiny-llama", "prefill_chunk=2,mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/batch,offload_weights=2"},
};

/* bytes a program's collectives and pipeline sends send, summed over its chips and one pass's steps */
static uint64_t program_bytes(const sp_program *p, int64_t chips)
{
    uint64_t sum = 0;
    for (int part = 0; part < SP_PART_COUNT; part++) {
        const sp_steps *ss = sp_program_part(p, (sp_prog_part)part);
        for (int i = 0; i < ss->n; i++)
            if (ss->s[i].kind == SP_STEP_COLL || ss->s[i].kind == SP_STEP_SEND)
                sum += (uint64_t)ss->s[i].coll.bytes_sent * (uint64_t)sp_program_part_runs(p, (sp_prog_part)part);
    }
    return sum * (uint64_t)chips;
}

START_TEST(test_exec_each_sequence_alone)
{
    const struct run_case *c = &run_cases[_i];
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find(c->model, &m, &err), SP_OK);
    sp_layout l = layout_of(c->layout);
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 77 + (uint64_t)_i, &w), SP_OK);
    ck_assert_int_eq(sp_weights_quantize(&w, l.weights), SP_OK);
    ck_assert_int_eq(sp_weights_round_tables(&w, sp_lower_table_dtype(l.weights)), SP_OK);
    enum { N = 4 };
    const int64_t P[N] = {3, 7, 1, 5}, G[N] = {4, 2, 6, 3};
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, N, &r), SP_OK);
    int64_t V = m.vocab, MP = r.max_prompt, MG = r.max_gen;
    int32_t prompt[N * 7], rtok[N * 6], etok[N * 6];
    float *rl = malloc((size_t)(N * V) * sizeof *rl), *el = malloc((size_t)(N * V) * sizeof *el);
    uint64_t seed = 5 + (uint64_t)_i;
    for (int i = 0; i < N * 7; i++) prompt[i] = (int32_t)(sp_kern_rng_next(&seed) % (uint64_t)V);
    for (int i = 0; i < N * 6; i++) etok[i] = rtok[i] = -1;

    /* reference: each sequence alone on one chip, greedy, the logits its last token came from */
    for (int b = 0; b < N; b++) {
        sp_ref *ref;
        ck_assert_int_eq(sp_ref_build(&m, &w, 1, P[b] + G[b], &ref), SP_OK);
        int32_t cur;
        ck_assert_int_eq(sp_ref_forward(ref, prompt + b * MP, P[b], rl + b * V, SP_REF_LAST), SP_OK);
        for (int64_t g = 0; g < G[b]; g++) {
            if (g > 0) ck_assert_int_eq(sp_ref_forward(ref, &cur, 1, rl + b * V, SP_REF_LAST), SP_OK);
            cur = rtok[b * MG + g] = sp_kern_argmax(rl + b * V, V);
        }
        sp_ref_free(ref);
    }

    sp_exec *ex;
    ck_assert_msg(sp_exec_build_ragged(&m, &l, &r, &w, SP_COMM_BACKEND_THREADS, &ex) == SP_OK, "%s %s: %s", c->model,
                  c->layout, sp_last_error());
    sp_exec_stats st;
    ck_assert_msg(sp_exec_run(ex, prompt, NULL, etok, el, &st) == SP_OK, "%s %s: %s", c->model, c->layout,
                  sp_last_error());
    for (int b = 0; b < N; b++) {
        double md = 0, mx = 1e-30;
        for (int64_t v = 0; v < V; v++) {
            md = fmax(md, fabs((double)el[b * V + v] - rl[b * V + v]));
            mx = fmax(mx, fabs((double)rl[b * V + v]));
        }
        ck_assert_msg(md / mx <= 1e-4, "%s %s: sequence %d: last logits rel diff %g", c->model, c->layout, b, md / mx);
        for (int64_t g = 0; g < MG; g++)
            ck_assert_msg(etok[b * MG + g] == rtok[b * MG + g], "%s %s: sequence %d token %lld: %d, alone %d", c->model,
                          c->layout, b, (long long)g, etok[b * MG + g], rtok[b * MG + g]);
    }
    /* bytes: every step as predicted (mismatches), and the predictions those of the ragged
     * programs: prefill and decode steps 1 .. max gen − 1, each with its own sequences */
    ck_assert_msg(st.mismatches == 0, "%s %s: %lld mismatches, first: %s", c->model, c->layout,
                  (long long)st.mismatches, st.first_mismatch);
    uint64_t meas = 0, pred = 0;
    for (int k = 0; k < SP_COLL_COUNT; k++) {
        ck_assert_int_eq(st.measured_bytes[k], st.predicted_bytes[k]);
        ck_assert_int_eq(st.measured_recv[k], st.predicted_recv[k]);
        meas += st.measured_bytes[k];
        /* the programs' figures: the expected ones (the expert all-to-all's prediction follows
         * the actual routing, its expected value the router's law, as for a padded batch) */
        pred += st.expected_bytes[k];
        if (k != SP_COLL_ALLTOALL || l.experts == 1) ck_assert_int_eq(st.expected_bytes[k], st.predicted_bytes[k]);
    }
    if (l.experts > 1) ck_assert(st.predicted_bytes[SP_COLL_ALLTOALL] > 0);
    static sp_program pf, dc, tmp;
    int64_t tp = (int64_t)l.mesh[0] * l.mesh[1] * l.mesh[2], most = 0;
    const int M = l.microbatches > 1 ? l.microbatches : 1;
    sp_shape dsh = {N, 1, r.max_context, r.max_context, SP_DT_F32, 0};
    uint64_t want = 0;
    for (int rep = 0; rep < l.replicas; rep++) {
        /* each micro-batch's programs: its own sequences, prefill and decode steps 1 .. its longest
         * gen − 1 (none past it: it sits out) */
        sp_ragged v[N];
        for (int j = 0; j < M; j++) {
            ck_assert_int_eq(sp_ragged_micro(&r, l.replicas, M, rep, j, &v[j]), SP_OK);
            ck_assert_int_eq(v[j].n, N / (l.replicas * M));
        }
        for (int stg = 0; stg < l.stages; stg++) {
            for (int j = 0; j < M; j++) {
                sp_shape psh = {N, v[j].max_prompt, v[j].max_prompt, r.max_context, SP_DT_F32, 0};
                /* every prefill pass (prefill_chunk: each its own sequences) */
                for (int64_t u = 0; u < (l.prefill_chunk ? v[j].n / l.prefill_chunk : 1); u++) {
                    ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_PREFILL, &psh, &v[j], u, stg, &pf), SP_OK);
                    want += program_bytes(&pf, tp);
                }
                /* experts over replicas: every replica runs the steps of the longest gen (with no
                 * sequence left, no rows) */
                int64_t last = l.experts > 1 ? sp_ragged_peers_max_gen(&v[j]) : v[j].max_gen;
                for (int64_t s = 1; s < MG && s <= last; s++) {
                    ck_assert_int_eq(sp_lower_ragged(&m, &l, SP_PHASE_DECODE, &dsh, &v[j], s, stg, &tmp), SP_OK);
                    ck_assert_int_eq(tmp.pass_seqs, sp_ragged_active_count(&v[j], s));
                    want += program_bytes(&tmp, tp);
                }
            }
            /* memory: the arena is the lowering's prediction for every micro-batch's largest step
             * (one micro-batch: sp_lower_mem_sizes of its prefill and largest decode step) */
            sp_shape psh = {N, 0, 0, r.max_context, SP_DT_F32, 0};
            sp_mem_sizes ms;
            ck_assert_int_eq(sp_lower_ragged_mem(&m, &l, &psh, &dsh, v, M, stg, &pf, &dc, &ms), SP_OK);
            if (M == 1) {
                sp_mem_sizes one;
                ck_assert_int_eq(sp_lower_ragged_decode(&m, &l, &dsh, &v[0], stg, &dc, &tmp), SP_OK);
                ck_assert_int_eq(sp_lower_mem_sizes(&pf, &dc, &one), SP_OK);
                ck_assert_int_eq(one.total, ms.total);
            }
            if (ms.total > most) most = ms.total;
        }
        for (int j = 0; j < M; j++) sp_ragged_free(&v[j]);
    }
    ck_assert_msg(pred == want, "%s %s: predicted %llu bytes, the programs %llu", c->model, c->layout,
                  (unsigned long long)pred, (unsigned long long)want);
    if (tp > 1 || l.stages > 1) ck_assert(meas > 0);
    /* offload: the bytes over the host link as the host-load and host-store steps say */
    ck_assert_msg(st.host_link_bytes_measured == st.host_link_bytes_predicted, "%s %s: host link %llu bytes, predicted %llu",
                  c->model, c->layout, (unsigned long long)st.host_link_bytes_measured,
                  (unsigned long long)st.host_link_bytes_predicted);
    ck_assert_int_eq(st.host_link_bytes_measured > 0, sp_layout_offloads(&l));
    ck_assert_int_eq(st.host_allocated_bytes_per_chip, st.host_predicted_bytes_per_chip);
    ck_assert_msg(st.allocated_bytes_per_chip == most && st.predicted_bytes_per_chip == most,
                  "%s %s: allocated %lld, predicted %lld, sp_lower_mem_sizes %lld", c->model, c->layout,
                  (long long)st.allocated_bytes_per_chip, (long long)st.predicted_bytes_per_chip, (long long)most);
    /* the cost model's memory per chip is the same rule's (its activations at the executor's f32) */
    sp_hw hw = h100();
    sp_cost_opts co;
    sp_cost_opts_init(&co);
    co.act_dtype = SP_DT_F32;
    sp_cost cost;
    ck_assert_msg(sp_cost_eval_ragged(&m, &hw, &l, &r, &co, &cost) == SP_OK, "%s", sp_last_error());
    ck_assert_msg(cost.mem.total == most, "%s %s: cost model %lld bytes per chip, executor %lld", c->model, c->layout,
                  (long long)cost.mem.total, (long long)most);
    ck_assert_msg(cost.mem.host_total == st.host_allocated_bytes_per_chip, "%s %s: cost model %lld host bytes per chip, "
                  "executor %lld", c->model, c->layout, (long long)cost.mem.host_total,
                  (long long)st.host_allocated_bytes_per_chip);
    sp_exec_free(ex);
    sp_ragged_free(&r);
    sp_weights_free(&w);
    free(rl);
    free(el);
}
END_TEST

/* what the executor does not run is refused by name */
START_TEST(test_exec_refused)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", &m, &err), SP_OK);
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 3, &w), SP_OK);
    const int64_t P[2] = {3, 5}, G[2] = {2, 4};
    sp_ragged r;
    ck_assert_int_eq(sp_ragged_from(P, G, 2, &r), SP_OK);
    sp_exec *ex;
    sp_layout l = layout_of("mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/batch");
    ck_assert_int_eq(sp_exec_build_ragged(&m, &l, &r, &w, SP_COMM_BACKEND_THREADS, &ex), SP_EINVAL);
    ck_assert_msg(strstr(sp_last_error(), "ragged batches with a KV handoff"), "%s", sp_last_error());
    l = layout_of("mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads");
    ck_assert_int_eq(sp_exec_build_ragged(&m, &l, &r, &w, SP_COMM_BACKEND_NCCL, &ex), SP_EINVAL);
    ck_assert_msg(strstr(sp_last_error(), "ragged batches on the CUDA executor"), "%s", sp_last_error());
    sp_weights_free(&w);
    /* experts split over replicas with micro-batches (or stages, or prefill passes) */
    ck_assert_int_eq(sp_model_find("tiny-moe", &m, &err), SP_OK);
    ck_assert_int_eq(sp_weights_build_random(&m, 3, &w), SP_OK);
    l = layout_of("replicas=2,experts=2,microbatches=2,capacity=4,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                  "decode=ws1d/heads");
    const int64_t P4[4] = {3, 5, 2, 2}, G4[4] = {2, 4, 1, 1};
    sp_ragged r4;
    ck_assert_int_eq(sp_ragged_from(P4, G4, 4, &r4), SP_OK);
    ck_assert_int_eq(sp_exec_build_ragged(&m, &l, &r4, &w, SP_COMM_BACKEND_THREADS, &ex), SP_EINVAL);
    ck_assert_msg(strstr(sp_last_error(), "ragged batches of model tiny-moe with experts=2 and 1 stages × 2 "
                                          "micro-batches, prefill_chunk 0: not implemented"), "%s", sp_last_error());
    l = layout_of("replicas=2,experts=2,prefill_chunk=1,capacity=4,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,"
                  "decode=ws1d/heads");
    ck_assert_int_eq(sp_exec_build_ragged(&m, &l, &r4, &w, SP_COMM_BACKEND_THREADS, &ex), SP_EINVAL);
    ck_assert_msg(strstr(sp_last_error(), "prefill_chunk 1: not implemented"), "%s", sp_last_error());
    sp_ragged_free(&r4);
    sp_ragged_free(&r);
    sp_weights_free(&w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ragged");
    TCase *tc = tcase_create("cost");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_workload_csv_json);
    tcase_add_test(tc, test_workload_distribution);
    tcase_add_loop_test(tc, test_workload_errors, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_loop_test(tc, test_lowering_closed_form, 0, (int)(sizeof tp_layouts / sizeof tp_layouts[0]));
    tcase_add_loop_test(tc, test_lowering_batch_blocks, 0, 2);
    tcase_add_loop_test(tc, test_lowering_wg_blocks, 0, 2);
    tcase_add_loop_test(tc, test_lowering_offload_kv, 0, 2);
    tcase_add_test(tc, test_lowering_offload_kv_blocks);
    tcase_add_loop_test(tc, test_equal_lengths_price_as_padded, 0, (int)(sizeof price_cases / sizeof price_cases[0]));
    tcase_add_test(tc, test_decode_runs);
    tcase_add_test(tc, test_replicas_slowest);
    tcase_add_loop_test(tc, test_simulate_every_step, 0, 5);
    tcase_add_loop_test(tc, test_simulate_replicas, 0, 2);
    tcase_add_loop_test(tc, test_microbatches, 0, 2);
    tcase_add_loop_test(tc, test_microbatches_models, 0, 8);
    tcase_add_test(tc, test_prefill_chunk);
    tcase_add_test(tc, test_prefill_chunk_blocks);
    tcase_add_test(tc, test_experts_lockstep);
    tcase_add_test(tc, test_refused_by_name);
    tcase_add_loop_test(tc, test_plan_workload, 0, 2);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("exec");
    tcase_set_timeout(te, 120);
    tcase_add_loop_test(te, test_exec_each_sequence_alone, 0, (int)(sizeof run_cases / sizeof run_cases[0]));
    tcase_add_test(te, test_exec_refused);
    suite_add_tcase(s, te);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
