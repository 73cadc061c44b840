/* check_sim.c: the simulator on hand-built programs with known schedules
 * (a chain, a collective waiting for its slowest member, an overlappable
 * all-gather under a matmul, a pipeline of S stages × M micro-batches), the
 * simulator = the cost model's closed form on the layout catalogue, and
 * its trace: valid JSON, every step of every chip's program exactly once
 * per micro-batch and token. */
#include <check.h>
#include <math.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "costmodel/sp_cost.h"
#include "costmodel/sp_sim.h"
#include "sp_layout.h"
#include "sp_lower.h"
#include "sp_trace.h"

/* A cluster chip with round numbers: 1e12 FLOP/s, HBM and links so fast
 * that only FLOPs and the chosen latencies count; no dispatch, no curves.
 * A matmul of F FLOPs takes F ps... × 1: F / 1e12 s. */
static sp_hw round_hw(void)
{
    sp_hw hw;
    sp_hw_init(&hw);
    snprintf(hw.name, sizeof hw.name, "round");
    hw.peak_flops[SP_DT_BF16] = 1e12;
    hw.hbm_bytes = 1LL << 40;
    hw.hbm_bw = 1e30;
    hw.topo = SP_TOPO_CLUSTER;
    hw.chips_per_node = 64;
    hw.intra_bw = 1e30;
    hw.inter_bw = 1e30;
    hw.intra_latency = 1e-6;   /* 1 us per collective step */
    hw.inter_latency = 1e-6;
    return hw;
}

static sp_program prog[4];

static void prog_init(sp_program *p, const sp_layout *l, sp_phase ph, int stage, int64_t layers)
{
    memset(p, 0, sizeof *p);
    p->phase = ph;
    p->layout = *l;
    p->stage = stage;
    p->n_layers = layers;
    p->shape.context = 1;
}

static sp_step *add_matmul(sp_steps *ss, sp_buf dst, sp_buf src, sp_buf wbuf, int64_t us)
{
    sp_step *s = &ss->s[ss->n++];
    memset(s, 0, sizeof *s);
    s->kind = SP_STEP_MATMUL;
    s->dst = dst;
    s->src = src;
    s->wbuf = wbuf;
    s->m = s->n = s->k = 1;
    s->flops = us * 1000000;   /* us microseconds at 1e12 FLOP/s */
    return s;
}

/* An all-gather over x of K chips: K − 1 steps of 1 us. */
static sp_step *add_gather(sp_steps *ss, sp_buf dst, sp_buf src, int K, int overlappable)
{
    sp_step *s = &ss->s[ss->n++];
    memset(s, 0, sizeof *s);
    s->kind = SP_STEP_COLL;
    s->dst = dst;
    s->src = src;
    s->coll.kind = SP_COLL_ALLGATHER;
    strcpy(s->coll.col_axes, "x");
    s->coll.mask = SP_AXES_X;
    s->coll.group = K;
    s->coll.bytes_recv = s->coll.bytes_sent = K - 1;
    s->coll.overlappable = overlappable;
    s->coll.is_weight = overlappable;
    return s;
}

static sp_step *add_p2p(sp_steps *ss, sp_step_kind k)
{
    sp_step *s = &ss->s[ss->n++];
    memset(s, 0, sizeof *s);
    s->kind = k;
    s->src = s->dst = SP_BUF_X;
    s->coll.kind = SP_COLL_SENDRECV;
    s->coll.group = 2;
    return s;
}

static double sim1(const sp_layout *l, const sp_hw *hw, sp_phase ph, int stages, const double *slow, int tokens,
                   sp_sim_result *r)
{
    const sp_program *pp[4];
    for (int s = 0; s < stages; s++) pp[s] = &prog[s];
    sp_sim_opts o;
    sp_sim_opts_init(&o);
    o.slowdown = slow;
    o.tokens = tokens;
    ck_assert_msg(sp_sim_phase(l, hw, ph, pp, &o, r) == SP_OK, "%s", sp_last_error());
    return r->step_s;
}

/* pre: 1 us; layer (x3): 2 us then 3 us; post: 4 us: 1 + 3 × 5 + 4 = 20 us */
START_TEST(test_chain)
{
    sp_hw hw = round_hw();
    sp_layout l;
    sp_layout_init(&l);
    prog_init(&prog[0], &l, SP_PHASE_PREFILL, 0, 3);
    add_matmul(&prog[0].pre, SP_BUF_X, SP_BUF_NONE, SP_BUF_NONE, 1);
    add_matmul(&prog[0].layer, SP_BUF_H, SP_BUF_X, SP_BUF_NONE, 2);
    add_matmul(&prog[0].layer, SP_BUF_X, SP_BUF_H, SP_BUF_NONE, 3);
    add_matmul(&prog[0].post, SP_BUF_LOGITS, SP_BUF_X, SP_BUF_NONE, 4);
    sp_sim_result r;
    ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_PREFILL, 1, NULL, 0, &r), 20e-6, 1e-18);
    ck_assert_int_eq(r.events, 1 + 3 * 2 + 1);
    sp_phase_cost pc;
    sp_cost_program(&prog[0], &hw, 0, &pc);
    ck_assert_double_eq_tol(pc.time_s, 20e-6, 1e-18);
}
END_TEST

/* 4 chips on x; a 1 us matmul, then an all-gather (3 steps: 3 us) of its
 * output.  Chip 2 computes 5 times slower: the gather waits for it on every
 * chip, 5 + 3 = 8 us instead of 1 + 3. */
START_TEST(test_slowest_member)
{
    sp_hw hw = round_hw();
    sp_layout l;
    sp_layout_init(&l);
    l.mesh[0] = 4;
    prog_init(&prog[0], &l, SP_PHASE_PREFILL, 0, 1);
    add_matmul(&prog[0].layer, SP_BUF_H, SP_BUF_X, SP_BUF_NONE, 1);
    add_gather(&prog[0].layer, SP_BUF_XG, SP_BUF_H, 4, 0);
    sp_sim_result r;
    ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_PREFILL, 1, NULL, 0, &r), 4e-6, 1e-18);
    double slow[4] = {1, 1, 5, 1};
    ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_PREFILL, 1, slow, 0, &r), 8e-6, 1e-18);
    ck_assert_int_eq(r.events, 4 * 2);
}
END_TEST

/* A weight gather marked overlappable (2 chips: 1 step, 1 us; made 3 us by
 * 3 chips... here 4 chips: 3 us) runs under a 5 us matmul that does not
 * need it; the 2 us matmul that reads the gathered weight starts at 5:
 * 7 us.  Overlap "none": 3 + 5 + 2 = 10 us. */
START_TEST(test_overlapped_gather)
{
    sp_hw hw = round_hw();
    sp_layout l;
    sp_layout_init(&l);
    l.mesh[0] = 4;
    prog_init(&prog[0], &l, SP_PHASE_PREFILL, 0, 1);
    add_gather(&prog[0].layer, SP_BUF_GATHERED_OF(SP_W_IN), SP_BUF_NONE, 4, 1);
    add_matmul(&prog[0].layer, SP_BUF_H, SP_BUF_X, SP_BUF_NONE, 5);
    add_matmul(&prog[0].layer, SP_BUF_Y, SP_BUF_H, SP_BUF_GATHERED_OF(SP_W_IN), 2);
    sp_sim_result r;
    ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_PREFILL, 1, NULL, 0, &r), 7e-6, 1e-18);
    sp_phase_cost pc;
    sp_cost_program(&prog[0], &hw, 0, &pc);
    ck_assert_double_eq_tol(pc.time_s, 7e-6, 1e-18);
    /* two layers: the second layer's gather may not overwrite WIN before the
     * first layer's matmul has read it (one copy): gather 7-10, matmul 7-12,
     * matmul 12-14 */
    prog[0].n_layers = 2;
    ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_PREFILL, 1, NULL, 0, &r), 14e-6, 1e-18);
    sp_cost_program(&prog[0], &hw, 0, &pc);
    ck_assert_double_eq_tol(pc.time_s, 14e-6, 1e-18);
    hw.overlap = SP_OVERLAP_NONE;
    prog[0].n_layers = 1;
    ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_PREFILL, 1, NULL, 0, &r), 10e-6, 1e-18);
}
END_TEST

/* 3 stages taking 1, 3 and 2 us per micro-batch (sends free: no latency
 * across a stage hand-off here), 4 micro-batches.  Prefill (a flow shop):
 * 6 + (4 − 1) × 3 = 15 us.  Decode, each token of a micro-batch waiting for
 * its previous token from the last stage: the 3 us stage is busy 4 × 3 =
 * 12 us per token once it never starves, which it does not after the
 * first token. */
START_TEST(test_pipeline)
{
    sp_hw hw = round_hw();
    hw.intra_latency = hw.inter_latency = 0;
    sp_layout l;
    sp_layout_init(&l);
    l.stages = 3;
    l.microbatches = 4;
    const int64_t us[3] = {1, 3, 2};
    for (int ph = 0; ph < 2; ph++) {
        for (int s = 0; s < 3; s++) {
            prog_init(&prog[s], &l, (sp_phase)ph, s, 1);
            if (s > 0) add_p2p(&prog[s].pre, SP_STEP_RECV);
            add_matmul(&prog[s].layer, SP_BUF_X, SP_BUF_X, SP_BUF_NONE, us[s]);
            if (s < 2) add_p2p(&prog[s].post, SP_STEP_SEND);
        }
        sp_sim_result r;
        if (ph == 0) {
            ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_PREFILL, 3, NULL, 0, &r), 15e-6, 1e-18);
            ck_assert_int_eq(r.events, 4 * (2 + 3 + 2));
        } else {
            for (int T = 2; T <= 6; T++) {
                ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_DECODE, 3, NULL, T, &r), 12e-6, 1e-18);
                /* token 0 is the prefill-like fill (15 us), every later one 12 us */
                ck_assert_double_eq_tol(r.makespan_s, 15e-6 + (T - 1) * 12e-6, 1e-18);
            }
        }
    }
    /* stage 1 twice as slow on its only chip: 6 us, the bottleneck: 4 x 6 per token */
    double slow[3] = {1, 2, 1};
    sp_sim_result r;
    ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_DECODE, 3, slow, 4, &r), 24e-6, 1e-18);
}
END_TEST

/* The same 3 stages (1, 3, 2 us) with fewer micro-batches than stages.
 * M = 1: prefill 1 + 3 + 2 = 6 us; every token waits for its own return
 * from the last stage, so a decode step is the whole round, 6 us (the
 * bubble: stages busy 1, 3 and 2 us of every 6).  M = 2: prefill
 * 6 + (2 − 1) × 3 = 9 us; a token of micro-batch 0 re-enters stage 0 at
 * 6 us after it left, and stage 1 needs 2 × 3 = 6 us per round: a step is
 * max(2 × 3, 6) = 6 us.  The closed form prices both alike
 * (max(M·max t_s, Σ t_s)). */
START_TEST(test_pipeline_bubble)
{
    sp_hw hw = round_hw();
    hw.intra_latency = hw.inter_latency = 0;
    sp_layout l;
    sp_layout_init(&l);
    l.stages = 3;
    const int64_t us[3] = {1, 3, 2};
    const double pf_us[3] = {0, 6, 9}, dc_us[3] = {0, 6, 6};
    for (int M = 1; M <= 2; M++) {
        l.microbatches = M;
        for (int ph = 0; ph < 2; ph++) {
            for (int s = 0; s < 3; s++) {
                prog_init(&prog[s], &l, (sp_phase)ph, s, 1);
                if (s > 0) add_p2p(&prog[s].pre, SP_STEP_RECV);
                add_matmul(&prog[s].layer, SP_BUF_X, SP_BUF_X, SP_BUF_NONE, us[s]);
                if (s < 2) add_p2p(&prog[s].post, SP_STEP_SEND);
            }
            sp_sim_result r;
            if (ph == 0) {
                ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_PREFILL, 3, NULL, 0, &r), pf_us[M] * 1e-6, 1e-18);
                ck_assert_int_eq(r.events, M * (2 + 3 + 2));
            } else {
                for (int T = 2; T <= 5; T++) {
                    ck_assert_double_eq_tol(sim1(&l, &hw, SP_PHASE_DECODE, 3, NULL, T, &r), dc_us[M] * 1e-6, 1e-18);
                    ck_assert_double_eq_tol(r.makespan_s, (pf_us[M] + (T - 1) * dc_us[M]) * 1e-6, 1e-18);
                }
            }
        }
    }
}
END_TEST

/* The simulator's prefill time and decode step equal sp_cost_eval's, to
 * the bit, on every layout of the catalogue that applies: small models,
 * 8 chips, every stage/replica/mesh split, FFN and attention layout pair
 * and micro-batch count, on the profiles hws (a100-80g on two tiers of 4).
 * token_sync_s > 0: a runtime with a barrier after every token; then the
 * decode makespan is also tokens × step.  Returns the layouts checked and,
 * in *pipelines, those with stages. */
static int check_catalogue(const char *const *hws, size_t n_hw, double token_sync_s, int shared_cores,
                           int *pipelines)
{
    /* tiny-moe-every2: MoE layers between dense ones, each stage's layers in their order */
    const char *models[] = {"tiny-llama", "tiny-gpt2", "tiny-palm", "tiny-moe-every2"};
    int checked = 0;
    *pipelines = 0;
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++)
        for (size_t hi = 0; hi < n_hw; hi++) {
            sp_model m;
            sp_hw hw;
            sp_error err;
            ck_assert_int_eq(sp_model_find(models[mi], &m, &err), SP_OK);
            ck_assert_int_eq(sp_hw_find(hws[hi], &hw, &err), SP_OK);
            if (!strcmp(hws[hi], "a100-80g")) hw.chips_per_node = 4;   /* two tiers on 8 chips */
            hw.token_sync_s = token_sync_s;
            hw.shared_cores = shared_cores;
            hw.comm_shares_cores = shared_cores > 0;
            sp_workload w = {16, 16, 4};
            for (int S = 1; S <= 2; S++)
                for (int R = 1; R <= 2; R++)
                    for (int X = 1; X <= 8 / (S * R); X *= 2)
                        for (int Y = 1; X * Y <= 8 / (S * R); Y *= 2)
                            for (int f = 0; f < SP_FL_COUNT * SP_FL_COUNT; f++)
                                for (int a = 0; a < 4; a++)
                                    for (int mm = S > 1 ? 0 : 1; mm <= 2; mm++) {   /* mm 0: 1 micro-batch, fewer than stages */
                                        sp_layout l;
                                        sp_layout_init(&l);
                                        l.stages = S;
                                        l.replicas = R;
                                        l.mesh[0] = X;
                                        l.mesh[1] = Y;
                                        l.mesh[2] = 8 / (S * R * X * Y);
                                        l.microbatches = mm ? S * mm : 1;
                                        l.phase[0].ffn = (sp_ffn_layout)(f / SP_FL_COUNT);
                                        l.phase[1].ffn = (sp_ffn_layout)(f % SP_FL_COUNT);
                                        l.phase[0].attn = (sp_attn_layout)(a / 2);
                                        l.phase[1].attn = (sp_attn_layout)(a % 2);
                                        if (sp_layout_check(&l, &m, &hw, 8, w.batch, NULL) != SP_OK) continue;
                                        sp_cost c;
                                        sp_cost_opts co;
                                        sp_cost_opts_init(&co);
                                        co.quiet = 1;
                                        if (sp_cost_eval(&m, &hw, &l, &w, &co, &c) != SP_OK) continue;
                                        sp_sim_times st;
                                        ck_assert_msg(sp_sim_eval(&m, &hw, &l, &w, NULL, &st) == SP_OK, "%s",
                                                      sp_last_error());
                                        char text[256];
                                        ck_assert_msg(st.prefill_s == c.prefill_s && st.decode_step_s == c.decode_step_s,
                                                      "%s %s sync %g %s: sim %.17g %.17g, closed form %.17g %.17g",
                                                      models[mi], hws[hi], token_sync_s,
                                                      sp_layout_format(&l, text, sizeof text), st.prefill_s,
                                                      st.decode_step_s, c.prefill_s, c.decode_step_s);
                                        if (token_sync_s > 0) {
                                            int T = S + 2;   /* sp_sim_opts.tokens' default */
                                            ck_assert_double_eq_tol(st.decode.makespan_s, T * c.decode_step_s,
                                                                     1e-12 * T * c.decode_step_s);
                                        }
                                        checked++;
                                        *pipelines += S > 1;
                                    }
        }
    return checked;
}

START_TEST(test_closed_form_catalogue)
{
    const char *hws[] = {"tpu-v4", "a100-80g"};
    int pipelines, checked = check_catalogue(hws, 2, 0, 0, &pipelines);
    ck_assert_int_gt(checked, 200);
    ck_assert_int_gt(pipelines, 20);
}
END_TEST

/* The executor's per-token barrier (chip.token_sync_s, as `calibrate`
 * fits it): the simulator pays it as the closed form does, so their decode
 * steps stay equal; 3 us per chip beyond the first, 21 us on 8 chips, is
 * far above a picosecond's rounding, and without the barrier the simulator
 * gives the generation schedule's max(M·max t_s, Σ t_s) instead.  Then
 * the same on 2 shared cores with the collectives and the barrier stated
 * per core (chip.comm_shares_cores, as `calibrate` writes it): both stretch
 * by the layout's chips computing at once / 2 in the simulator as in the
 * closed form (spi_comm_share). */
START_TEST(test_closed_form_token_sync)
{
    const char *hws[] = {"a100-80g"};
    for (int cores = 0; cores <= 2; cores += 2) {
        int pipelines, checked = check_catalogue(hws, 1, 3e-6, cores, &pipelines);
        ck_assert_int_gt(checked, 100);
        ck_assert_int_gt(pipelines, 10);
    }
}
END_TEST

/* The trace: JSON that Jansson reads; for every chip, every step of its
 * stage's program appears exactly once per micro-batch (and decode token),
 * named and sized as sp_trace.h says. */
/* Chunked prefill: passes are units of the flow shop.  Passes of sequences
 * are alike, so the simulator's prefill equals the closed form's to the bit
 * (Σ t_s + (M·U − 1)·max t_s over U passes per micro-batch); token passes
 * differ in context, which the closed form sums by its trapezoid (exact
 * while linear: within 1 % here); with stages, chunks fill the bubble. */
START_TEST(test_chunked_prefill)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find("llama2-7b", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("a100-80g", &hw, &err), SP_OK);
    sp_workload w = {32, 512, 4};
    const char *lays[] = {
        "stages=2,microbatches=2,mesh=2x1x1,prefill=ws2d/heads,decode=ws2d/heads",
        "stages=2,microbatches=2,mesh=2x1x1,prefill=ws2d/heads,decode=ws2d/heads,prefill_chunk=4",
        "stages=2,microbatches=1,mesh=2x1x1,prefill=ws2d/heads,decode=ws2d/heads,prefill_chunk=2",
        "mesh=4x1x1,prefill=ws2d/heads,decode=ws2d/batch,prefill_chunk=8",
        "stages=2,microbatches=2,mesh=2x1x1,prefill=ws2d/heads,decode=ws2d/heads,prefill_tokens=64",
        "mesh=4x1x1,prefill=ws2d/batch,decode=ws2d/batch,prefill_tokens=128,prefill_chunk=8",
    };
    double whole = 0;
    for (int i = 0; i < 6; i++) {
        sp_layout l;
        ck_assert_int_eq(sp_layout_parse(lays[i], &l, &err), SP_OK);
        sp_cost c;
        sp_sim_times st;
        ck_assert_msg(sp_cost_eval(&m, &hw, &l, &w, NULL, &c) == SP_OK, "%s: %s", lays[i], sp_last_error());
        ck_assert_msg(sp_sim_eval(&m, &hw, &l, &w, NULL, &st) == SP_OK, "%s: %s", lays[i], sp_last_error());
        if (!l.prefill_tokens) ck_assert_msg(st.prefill_s == c.prefill_s, "%s: %.12g vs %.12g", lays[i], st.prefill_s, c.prefill_s);
        else ck_assert_msg(fabs(st.prefill_s / c.prefill_s - 1) < 0.01, "%s: %g vs %g", lays[i], st.prefill_s, c.prefill_s);
        ck_assert(st.decode_step_s == c.decode_step_s);
        if (i == 0) whole = c.prefill_s;
        if (i == 1) ck_assert(c.prefill_s < whole);   /* 4 passes per micro-batch: less bubble */
    }
}
END_TEST

/* Simulates l with a trace of `chips` chips and `tokens` decode steps; the
 * trace as JSON (a new reference). */
static json_t *sim_trace_slow(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w, int chips,
                              int tokens, const double *slow, sp_sim_times *st);
static json_t *sim_trace(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w, int chips,
                         int tokens, sp_sim_times *st)
{
    return sim_trace_slow(m, hw, l, w, chips, tokens, NULL, st);
}

/* the same with chips slowed down (sp_sim_opts.slowdown; NULL: none) */
static json_t *sim_trace_slow(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w, int chips,
                              int tokens, const double *slow, sp_sim_times *st)
{
    char path[] = "/tmp/check_sim_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    sp_trace *t;
    ck_assert_int_eq(sp_trace_open(path, 0, chips, &t), SP_OK);
    sp_sim_opts o;
    sp_sim_opts_init(&o);
    o.trace = t;
    o.tokens = tokens;
    o.slowdown = slow;
    ck_assert_msg(sp_sim_eval(m, hw, l, w, &o, st) == SP_OK, "%s", sp_last_error());
    ck_assert_int_eq(sp_trace_close(t), SP_OK);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    unlink(path);
    ck_assert_msg(root != NULL, "trace: %s at %d:%d", je.text, je.line, je.column);
    return root;
}

START_TEST(test_trace)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    sp_layout l;
    ck_assert_int_eq(sp_layout_parse("stages=2,mesh=2x1x1,microbatches=2,prefill=wg-x/heads,decode=wg-x/heads", &l,
                                     &err), SP_OK);
    sp_workload w = {4, 8, 5};
    sp_sim_times st;
    json_t *root = sim_trace(&m, &hw, &l, &w, 4, 3, &st);
    json_t *ev = json_object_get(root, "traceEvents");
    /* expected keys "pid id mb" from the programs themselves */
    json_t *want = json_object();
    int64_t expected = 0;
    for (int ph = 0; ph < 2; ph++) {
        int64_t ctx = w.prompt + w.gen;
        sp_shape sh = ph ? (sp_shape){w.batch, 1, ctx, ctx, SP_DT_BF16, 0} : (sp_shape){w.batch, w.prompt, w.prompt, ctx,
                                                                                        SP_DT_BF16, 0};
        int tokens = ph ? 3 : 1;
        for (int chip = 0; chip < 4; chip++) {
            static sp_program p;
            ck_assert_int_eq(sp_lower(&m, &l, (sp_phase)ph, &sh, chip / 2, &p), SP_OK);
            const sp_steps *parts[3] = {&p.pre, &p.layer, &p.post};
            for (int tok = 0; tok < tokens; tok++)
                for (int mb = 0; mb < 2; mb++)
                    for (int k = 0; k < 3; k++)
                        for (int64_t layer = 0; layer < (k == 1 ? p.n_layers : 1); layer++)
                            for (int i = 0; i < parts[k]->n; i++) {
                                char id[SP_TRACE_ID_MAX], key[96], name[SP_TRACE_LABEL_MAX];
                                sp_trace_step_id((sp_phase)ph, 2 + tok, (sp_prog_part)k, layer, i, id, sizeof id);
                                snprintf(key, sizeof key, "%d %s %d", chip, id, mb);
                                json_object_set_new(want, key,
                                                    json_string(sp_trace_step_label(&parts[k]->s[i], name, sizeof name)));
                                expected++;
                            }
        }
    }
    ck_assert_int_eq((int64_t)json_object_size(want), expected);   /* the keys are distinct */
    ck_assert_int_eq(st.prefill.events + st.decode.events, expected);
    size_t i;
    json_t *e;
    int64_t seen = 0;
    json_array_foreach(ev, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X")) continue;
        json_t *args = json_object_get(e, "args");
        char key[96];
        snprintf(key, sizeof key, "%d %s %d", (int)json_integer_value(json_object_get(e, "pid")),
                 json_string_value(json_object_get(args, "id")), (int)json_integer_value(json_object_get(args, "mb")));
        json_t *label = json_object_get(want, key);
        ck_assert_msg(label != NULL, "unexpected or repeated event %s", key);
        ck_assert_str_eq(json_string_value(json_object_get(e, "name")), json_string_value(label));
        ck_assert(json_number_value(json_object_get(e, "dur")) >= 0);
        json_object_del(want, key);   /* a second one would not be found */
        seen++;
    }
    ck_assert_int_eq(seen, expected);
    ck_assert_int_eq((int64_t)json_object_size(want), 0);
    json_decref(want);
    json_decref(root);
}
END_TEST


/* Separate prefill and decode groups on the timeline (sp_sim.h): the
 * prefill group's prefill and the decode group's step equal the closed
 * form's to the bit, so does the KV transfer (the same messages summed in
 * the same order), and the timeline's span is prefill + transfer + the
 * decode steps' span; with a one-stage decode group that is
 * prefill_s + kv_transfer_s + T · decode_step_s to the picosecond (the
 * closed form's terms are doubles: 1e-12 relative), a decode pipeline adds
 * its fill (the first token's pass through the stages) and stays within
 * one step of it. */
static const char *const group_lays[] = {
    "weights=f32,kv=f32,prefill.mesh=2x2x2,decode.mesh=2x2x1",
    "weights=f32,kv=f32,prefill.mesh=2x2x1,decode.mesh=2x2x2,prefill=ws1d/heads,decode=ws2d/batch",
    "prefill.stages=2,prefill.mesh=2x2x1,decode.mesh=2x2x1,microbatches=2",
    "prefill.mesh=2x2x1,decode.stages=2,decode.mesh=2x2x1,microbatches=2",
    "mesh=2x2x1,groups=separate,prefill=ws2d/heads,decode=ws2d/batch",   /* equal groups, 4 + 4 */
};

START_TEST(test_groups_closed_form)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", &m, &err), SP_OK);
    const char *hws[] = {"a100-80g", "tpu-v4"};
    for (int h = 0; h < 2; h++) {
        sp_hw hw;
        ck_assert_int_eq(sp_hw_find(hws[h], &hw, &err), SP_OK);
        sp_layout l;
        ck_assert_int_eq(sp_layout_parse(group_lays[_i], &l, &err), SP_OK);
        ck_assert(sp_layout_disaggregated(&l));
        sp_workload w = {8, 16, 6};
        sp_cost c;
        ck_assert_msg(sp_cost_eval(&m, &hw, &l, &w, NULL, &c) == SP_OK, "%s: %s", group_lays[_i], sp_last_error());
        sp_sim_opts o;
        sp_sim_opts_init(&o);
        o.tokens = (int)w.gen;
        sp_sim_times r;
        ck_assert_msg(sp_sim_eval(&m, &hw, &l, &w, &o, &r) == SP_OK, "%s: %s", group_lays[_i], sp_last_error());
        ck_assert_msg(r.prefill_s == c.prefill_s, "%s: prefill %.15g vs %.15g", group_lays[_i], r.prefill_s, c.prefill_s);
        ck_assert_msg(r.decode_step_s == c.decode_step_s, "%s: step %.15g vs %.15g", group_lays[_i], r.decode_step_s,
                      c.decode_step_s);
        ck_assert_msg(r.kv_transfer_s == c.kv_transfer_s && r.kv_transfer_s > 0, "%s: transfer %.15g vs %.15g",
                      group_lays[_i], r.kv_transfer_s, c.kv_transfer_s);
        ck_assert(r.makespan_s == r.prefill.makespan_s + r.kv_transfer_s + r.decode.makespan_s);
        double closed = c.prefill_s + c.kv_transfer_s + (double)w.gen * c.decode_step_s;
        sp_layout dg;
        sp_layout_phase_group(&l, SP_PHASE_DECODE, &dg);
        if (dg.stages == 1)
            ck_assert_msg(fabs(r.makespan_s - closed) <= 1e-12 * closed, "%s on %s: span %.15g vs %.15g", group_lays[_i],
                          hws[h], r.makespan_s, closed);
        else
            ck_assert_msg(r.makespan_s > closed && r.makespan_s < closed + c.decode_step_s,
                          "%s on %s: span %.15g vs %.15g (step %.15g)", group_lays[_i], hws[h], r.makespan_s, closed,
                          c.decode_step_s);
    }
}
END_TEST

/* sp_lower_kv_xfer's blocks summed per (prefill chip, decode chip) */
typedef struct pairs { int np, nd; int64_t b[64]; } pairs;
static sp_status add_pair(void *ctx, const sp_xfer_block *b)
{
    pairs *p = ctx;
    p->b[b->src * p->nd + b->dst] += b->bytes;
    return SP_OK;
}

/* The trace of separate groups: every step of each group's programs once
 * per chip, micro-batch (and decode token), on the group's chips (decode
 * after prefill in global ranks), and one "send kv" / "recv kv" slice per
 * chip pair the transfer joins, with the pair's bytes, starting after the
 * last prefill step and ending before the first decode step. */
START_TEST(test_groups_trace)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    sp_layout l, g[2];
    ck_assert_int_eq(sp_layout_parse(group_lays[_i], &l, &err), SP_OK);
    for (int p = 0; p < 2; p++) sp_layout_phase_group(&l, (sp_phase)p, &g[p]);
    int n[2] = {(int)sp_layout_chips(&g[0]), (int)sp_layout_chips(&g[1])};
    sp_workload w = {8, 16, 6};
    sp_sim_times st;
    json_t *root = sim_trace(&m, &hw, &l, &w, n[0] + n[1], 3, &st);
    json_t *want = json_object();
    int64_t expected = 0;
    for (int ph = 0; ph < 2; ph++) {
        /* each group's shapes as sp_cost_eval prices it: the prefill group's cache holds the prompt */
        int64_t ctx = ph ? w.prompt + w.gen : w.prompt;
        sp_shape sh = ph ? (sp_shape){w.batch, 1, ctx, ctx, SP_DT_BF16, 0}
                         : (sp_shape){w.batch, w.prompt, w.prompt, ctx, SP_DT_BF16, 0};
        int tokens = ph ? 3 : 1, per_stage = n[ph] / g[ph].stages;
        for (int chip = 0; chip < n[ph]; chip++) {
            static sp_program p;
            ck_assert_int_eq(sp_lower(&m, &g[ph], (sp_phase)ph, &sh, chip / per_stage, &p), SP_OK);
            const sp_steps *parts[3] = {&p.pre, &p.layer, &p.post};
            for (int tok = 0; tok < tokens; tok++)
                for (int mb = 0; mb < l.microbatches; mb++)
                    for (int k = 0; k < 3; k++)
                        for (int64_t layer = 0; layer < (k == 1 ? p.n_layers : 1); layer++)
                            for (int i = 0; i < parts[k]->n; i++) {
                                char id[SP_TRACE_ID_MAX], key[96], name[SP_TRACE_LABEL_MAX];
                                sp_trace_step_id((sp_phase)ph, w.gen - 3 + tok, (sp_prog_part)k, layer, i, id, sizeof id);
                                snprintf(key, sizeof key, "%d %s %d", ph * n[0] + chip, id, mb);
                                json_object_set_new(want, key,
                                                    json_string(sp_trace_step_label(&parts[k]->s[i], name, sizeof name)));
                                expected++;
                            }
        }
    }
    pairs pr = {n[0], n[1], {0}};
    ck_assert_int_le(n[0] * n[1], 64);
    ck_assert_int_eq(sp_lower_kv_xfer(&m, &l, w.batch, w.prompt, add_pair, &pr), SP_OK);
    int64_t messages = 0;
    for (int c = 0; c < n[0]; c++)
        for (int d = 0; d < n[1]; d++) {
            if (!pr.b[c * n[1] + d]) continue;
            for (int k = 0; k < 2; k++) {
                char id[SP_TRACE_ID_MAX], label[SP_TRACE_LABEL_MAX], key[96];
                sp_trace_xfer_id(k == 0, k ? c : n[0] + d, id, label);
                snprintf(key, sizeof key, "%d %s 0", k ? n[0] + d : c, id);
                json_object_set_new(want, key, json_integer(pr.b[c * n[1] + d]));
            }
            messages++;
        }
    ck_assert_int_gt(messages, 0);
    ck_assert_int_eq((int64_t)json_object_size(want), expected + 2 * messages);   /* the keys are distinct */
    ck_assert_int_eq(st.prefill.events + st.decode.events, expected);
    size_t i;
    json_t *e;
    int64_t seen = 0;
    double pf_end = 0, x_start = 1e30, x_end = 0, dc_start = 1e30;
    json_array_foreach(json_object_get(root, "traceEvents"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X")) continue;
        json_t *args = json_object_get(e, "args");
        const char *id = json_string_value(json_object_get(args, "id"));
        char key[96];
        snprintf(key, sizeof key, "%d %s %d", (int)json_integer_value(json_object_get(e, "pid")), id,
                 (int)json_integer_value(json_object_get(args, "mb")));
        json_t *v = json_object_get(want, key);
        ck_assert_msg(v != NULL, "unexpected or repeated event %s", key);
        double ts = json_number_value(json_object_get(e, "ts")), end = ts + json_number_value(json_object_get(e, "dur"));
        if (!strncmp(id, "kv/", 3)) {
            ck_assert_int_eq(json_integer_value(json_object_get(args, "bytes")), json_integer_value(v));
            ck_assert_int_eq(json_integer_value(json_object_get(e, "tid")), SP_TRACE_COMM);
            if (ts < x_start) x_start = ts;
            if (end > x_end) x_end = end;
        } else {
            ck_assert_str_eq(json_string_value(json_object_get(e, "name")), json_string_value(v));
            if (!strncmp(id, "prefill", 7) && end > pf_end) pf_end = end;
            if (!strncmp(id, "decode", 6) && ts < dc_start) dc_start = ts;
        }
        json_object_del(want, key);   /* a second one would not be found */
        seen++;
    }
    ck_assert_int_eq(seen, expected + 2 * messages);
    ck_assert_int_eq((int64_t)json_object_size(want), 0);
    /* µs in the file, 6 decimals */
    ck_assert_msg(pf_end <= x_start + 1e-6 && x_end <= dc_start + 1e-6, "prefill ends %.6f, transfer %.6f..%.6f, decode "
                  "starts %.6f", pf_end, x_start, x_end, dc_start);
    ck_assert(fabs((dc_start - pf_end) * 1e-6 - st.kv_transfer_s) <= 2e-12 + 1e-9 * st.kv_transfer_s);
    json_decref(want);
    json_decref(root);
}
END_TEST

/* Stages of their own mesh (stage_mesh): each stage's chips on the
 * timeline.  The simulator's prefill and decode step equal sp_cost_eval's
 * to the bit, and both equal the flow shop worked by hand from the stage
 * times (prefill Σ t_s + (M−1)·max t_s, decode step max(M·max t_s, Σ t_s),
 * whole picoseconds); the stages' times differ (their meshes do), so a
 * composition that took one stage's time for all would fail.  Layout 3's
 * middle stages hold as many layers on different meshes (priced apart). */
static const char *const hetero_lays[] = {
    "stages=2,stage_mesh=8x1x1,4x1x1",
    "stages=2,stage_mesh=8x1x1,4x1x1,microbatches=2",
    "stages=2,stage_mesh=2x1x1,4x1x1,microbatches=2,prefill=ws1d/heads,decode=ws1d/heads",
    "stages=4,stage_mesh=1x1x1,2x1x1,1x1x1,1x1x1,microbatches=4",
    "replicas=2,stages=2,stage_mesh=2x1x1,1x1x1,microbatches=2,stage_layers=3,1",
};
static const int hetero_chips[] = {12, 12, 6, 5, 6};

START_TEST(test_hetero_closed_form)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find(_i == 2 ? "tiny-gpt2" : "tiny-llama", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    sp_layout l;
    ck_assert_int_eq(sp_layout_parse(hetero_lays[_i], &l, &err), SP_OK);
    ck_assert(sp_layout_hetero(&l));
    ck_assert_msg(sp_layout_check(&l, &m, &hw, hetero_chips[_i], 8, &err) == SP_OK, "%s", err.text);
    sp_workload w = {8, 16, 8};
    sp_stage_time t[4];
    sp_cost_opts co;
    sp_cost_opts_init(&co);
    co.stage_times = t;
    sp_cost c;
    ck_assert_msg(sp_cost_eval(&m, &hw, &l, &w, &co, &c) == SP_OK, "%s", sp_last_error());
    sp_sim_times st;
    ck_assert_msg(sp_sim_eval(&m, &hw, &l, &w, NULL, &st) == SP_OK, "%s", sp_last_error());
    ck_assert_msg(st.prefill_s == c.prefill_s && st.decode_step_s == c.decode_step_s,
                  "%s: sim %.17g %.17g, closed form %.17g %.17g", hetero_lays[_i], st.prefill_s, st.decode_step_s,
                  c.prefill_s, c.decode_step_s);
    int64_t M = l.microbatches, pf_sum = 0, pf_max = 0, dn_sum = 0, dn_max = 0;
    for (int s = 0; s < l.stages; s++) {
        pf_sum += t[s].prefill_ps;
        dn_sum += t[s].decode_ps;
        if (t[s].prefill_ps > pf_max) pf_max = t[s].prefill_ps;
        if (t[s].decode_ps > dn_max) dn_max = t[s].decode_ps;
    }
    ck_assert(t[0].prefill_ps != t[1].prefill_ps);
    ck_assert_int_eq(llround(st.prefill_s * 1e12), pf_sum + (M - 1) * pf_max);
    ck_assert_int_eq(llround(st.decode_step_s * 1e12), M * dn_max > dn_sum ? M * dn_max : dn_sum);
}
END_TEST

/* sender chips of each receiving chip at the hand-off (sp_lower_stage_xfer) */
static sp_status note_sender(void *ctx, const sp_stage_block *b)
{
    unsigned char (*from)[16] = ctx;
    from[b->dst][b->src] = 1;
    return SP_OK;
}

/* The trace of 8x1x1 + 4x1x1 on 12 chips (2 micro-batches): every step of
 * a chip's stage program once per micro-batch and token, on that chip; and
 * with stage 0's chip 7 three times slower, every receiving chip's RECV
 * starts only once each of its senders' SENDs (of that micro-batch) has
 * ended: a receiver that waited for one sender alone would start early. */
START_TEST(test_hetero_trace)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    sp_layout l;
    ck_assert_int_eq(sp_layout_parse(hetero_lays[1], &l, &err), SP_OK);
    sp_workload w = {8, 16, 4};
    sp_shape pf = {w.batch, w.prompt, w.prompt, w.prompt + w.gen, SP_DT_BF16, 0};
    static unsigned char from[16][16];
    memset(from, 0, sizeof from);
    ck_assert_int_eq(sp_lower_stage_xfer(&m, &l, SP_PHASE_PREFILL, &pf, 0, note_sender, from), SP_OK);
    for (int d = 8; d < 12; d++) {   /* each 4x1x1 chip takes its columns from two 8x1x1 chips */
        int n = 0;
        for (int c = 0; c < 8; c++) n += from[d][c];
        ck_assert_int_eq(n, 2);
    }
    double slow[12];
    for (int c = 0; c < 12; c++) slow[c] = c == 7 ? 3.0 : 1.0;
    sp_sim_times st;
    json_t *root = sim_trace_slow(&m, &hw, &l, &w, 12, 3, slow, &st);
    /* expected "chip id mb" keys from each stage's programs */
    json_t *want = json_object();
    int64_t expected = 0;
    char send_id[SP_TRACE_ID_MAX], recv_id[SP_TRACE_ID_MAX];   /* prefill's hand-off steps */
    for (int ph = 0; ph < 2; ph++) {
        int64_t ctx = w.prompt + w.gen;
        sp_shape sh = ph ? (sp_shape){w.batch, 1, ctx, ctx, SP_DT_BF16, 0} : pf;
        int tokens = ph ? 3 : 1;
        for (int stage = 0; stage < 2; stage++) {
            static sp_program p;
            ck_assert_int_eq(sp_lower(&m, &l, (sp_phase)ph, &sh, stage, &p), SP_OK);
            const sp_steps *parts[3] = {&p.pre, &p.layer, &p.post};
            for (int k = 0; k < 3 && !ph; k++)
                for (int i = 0; i < parts[k]->n; i++) {
                    if (parts[k]->s[i].kind == SP_STEP_SEND) sp_trace_step_id(SP_PHASE_PREFILL, 1, (sp_prog_part)k, -1, i, send_id, SP_TRACE_ID_MAX);
                    if (parts[k]->s[i].kind == SP_STEP_RECV) sp_trace_step_id(SP_PHASE_PREFILL, 1, (sp_prog_part)k, -1, i, recv_id, SP_TRACE_ID_MAX);
                }
            for (int chip = stage ? 8 : 0; chip < (stage ? 12 : 8); chip++)
                for (int tok = 0; tok < tokens; tok++)
                    for (int mb = 0; mb < 2; mb++)
                        for (int k = 0; k < 3; k++)
                            for (int64_t layer = 0; layer < (k == 1 ? p.n_layers : 1); layer++)
                                for (int i = 0; i < parts[k]->n; i++) {
                                    char id[SP_TRACE_ID_MAX], key[96];
                                    sp_trace_step_id((sp_phase)ph, 1 + tok, (sp_prog_part)k, layer, i, id, sizeof id);
                                    snprintf(key, sizeof key, "%d %s %d", chip, id, mb);
                                    json_object_set_new(want, key, json_true());
                                    expected++;
                                }
        }
    }
    ck_assert_int_eq((int64_t)json_object_size(want), expected);
    ck_assert_int_eq(st.prefill.events + st.decode.events, expected);
    double send_end[12][2], recv_start[12][2];
    size_t i;
    json_t *e;
    int64_t seen = 0;
    json_array_foreach(json_object_get(root, "traceEvents"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X")) continue;
        json_t *args = json_object_get(e, "args");
        int chip = (int)json_integer_value(json_object_get(e, "pid")), mb = (int)json_integer_value(json_object_get(args, "mb"));
        const char *id = json_string_value(json_object_get(args, "id"));
        char key[96];
        snprintf(key, sizeof key, "%d %s %d", chip, id, mb);
        ck_assert_msg(json_object_get(want, key) != NULL, "unexpected or repeated event %s", key);
        json_object_del(want, key);
        double ts = json_number_value(json_object_get(e, "ts")), dur = json_number_value(json_object_get(e, "dur"));
        if (!strcmp(id, send_id) && chip < 8) send_end[chip][mb] = ts + dur;
        if (!strcmp(id, recv_id) && chip >= 8) recv_start[chip][mb] = ts;
        seen++;
    }
    ck_assert_int_eq(seen, expected);
    ck_assert_int_eq((int64_t)json_object_size(want), 0);
    int late = 0;
    for (int d = 8; d < 12; d++)
        for (int mb = 0; mb < 2; mb++)
            for (int c = 0; c < 8; c++)
                if (from[d][c]) {
                    ck_assert_msg(recv_start[d][mb] >= send_end[c][mb] - 1e-6, "chip %d mb %d receives at %.6f before "
                                  "chip %d's send ends at %.6f", d, mb, recv_start[d][mb], c, send_end[c][mb]);
                    late += c == 7 && recv_start[d][mb] > send_end[c ^ 1][mb] + 1e-3;
                }
    ck_assert_int_eq(late, 2);   /* chip 7's receiver, in each micro-batch, waited for it alone */
    json_decref(want);
    json_decref(root);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_chain);
    tcase_add_test(tc, test_slowest_member);
    tcase_add_test(tc, test_overlapped_gather);
    tcase_add_test(tc, test_pipeline);
    tcase_add_test(tc, test_pipeline_bubble);
    tcase_add_test(tc, test_closed_form_catalogue);
    tcase_add_test(tc, test_closed_form_token_sync);
    tcase_add_test(tc, test_chunked_prefill);
    tcase_add_test(tc, test_trace);
    tcase_add_loop_test(tc, test_groups_closed_form, 0, (int)(sizeof group_lays / sizeof group_lays[0]));
    tcase_add_loop_test(tc, test_groups_trace, 0, (int)(sizeof group_lays / sizeof group_lays[0]));
    tcase_add_loop_test(tc, test_hetero_closed_form, 0, (int)(sizeof hetero_lays / sizeof hetero_lays[0]));
    tcase_add_test(tc, test_hetero_trace);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
