/* check_moe.c: mixture-of-experts in the lowering and the cost model against
 * closed forms: the routing statistics, the memory of the experts a chip
 * holds, the router, dispatch/combine all-to-all bytes (expected, and exact
 * for a given routing) at a capacity factor,
 * the expert matmuls (FLOPs of every slot, weights of the experts chosen),
 * the layout key experts=N and its validation, and Mixtral-8x7B's fit on
 * H100s. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "costmodel/sp_cost.h"
#include "sp_hw.h"
#include "sp_layout.h"
#include "sp_lower.h"
#include "sp_model.h"
#include "sp_plan.h"

/* E 512, F 1024 per expert, 8 SwiGLU experts, top-2, 4 layers, 8 heads (MHA) */
static sp_model moe_model(int64_t NE, int64_t k)
{
    sp_model m;
    sp_model_init(&m);
    snprintf(m.name, sizeof m.name, "moe");
    m.n_layers = 4;
    m.d_model = 512;
    m.d_ff = 1024;
    m.n_heads = 8;
    m.n_kv_heads = 8;
    m.d_head = 64;
    m.vocab = 1024;
    m.ffn = SP_FFN_SWIGLU;
    m.norm = SP_NORM_RMSNORM;
    m.positions = SP_POS_ROPE;
    m.max_context = 4096;
    m.n_experts = NE;
    m.top_k = k;
    m.moe_every = 1;
    return m;
}

static sp_layout moe_layout(int R, int N, int X, sp_ffn_layout f)
{
    sp_layout l;
    sp_layout_init(&l);
    l.replicas = R;
    l.experts = N;
    l.mesh[0] = X;
    l.phase[0].ffn = l.phase[1].ffn = f;
    return l;
}

static sp_program prog, prog2;

/* lowers both phases of (m, l) into prog (prefill) and prog2 (decode) and sizes their memory */
static void lower_both(const sp_model *m, const sp_layout *l, const sp_shape *pf, const sp_shape *dc, sp_mem_sizes *ms)
{
    ck_assert_int_eq(sp_lower(m, l, SP_PHASE_DECODE, dc, 0, &prog2), SP_OK);
    ck_assert_int_eq(sp_lower(m, l, SP_PHASE_PREFILL, pf, 0, &prog), SP_OK);
    ck_assert_int_eq(sp_lower_mem_sizes(&prog, &prog2, ms), SP_OK);
}

START_TEST(test_routing_closed_form)
{
    sp_model m = moe_model(8, 2);
    double d, q;
    int64_t T[] = {1, 2, 3, 7, 64, 1000};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        sp_model_moe_routing(&m, (double)T[i], &d, &q);
        ck_assert_double_eq_tol(d, 8.0 * (1.0 - pow(1.0 - 2.0 / 8.0, (double)T[i])), 1e-12);
        ck_assert_double_eq_tol(q, 0.25, 1e-15);
    }
    sp_model_moe_routing(&m, 0, &d, &q);
    ck_assert_double_eq_tol(d, 0, 1e-15);
    /* one token picks exactly top_k experts */
    sp_model_moe_routing(&m, 1, &d, &q);
    ck_assert_double_eq_tol(d, 2, 1e-12);
    /* skewed: fewer distinct experts, a hotter most popular one */
    m.router_skew = 1.0;
    double ds, qs;
    sp_model_moe_routing(&m, 16, &ds, &qs);
    sp_model_moe_routing(&m, 16, &d, &q);
    double H = 0;
    for (int i = 1; i <= 8; i++) H += 1.0 / i;
    ck_assert_double_eq_tol(qs, 2.0 / H, 1e-12);   /* min(1, 2·p_1), p_1 = 1/H_8 */
    double want = 0;
    for (int i = 1; i <= 8; i++) {
        double qi = 2.0 / (i * H);
        want += 1.0 - pow(1.0 - (qi > 1 ? 1 : qi), 16);
    }
    ck_assert_double_eq_tol(ds, want, 1e-12);
    m.router_skew = 0;
    sp_model_moe_routing(&m, 16, &d, &q);
    ck_assert(ds < d);
    /* dense: nothing */
    m.n_experts = 0;
    sp_model_moe_routing(&m, 16, &d, &q);
    ck_assert(d == 0 && q == 0);
}
END_TEST

/* weights of a chip: every local expert (each sharded like the dense FFN),
 * the router, attention and norms; against the dense model of the same
 * dimensions, the difference is (local experts − 1) expert shards and the
 * router, per layer */
START_TEST(test_memory_of_experts_held)
{
    sp_model m = moe_model(8, 2), dense = m;
    dense.n_experts = dense.top_k = dense.moe_every = 0;
    const int64_t E = 512, F = 1024, NE = 8, layers = 4;
    sp_shape pf = {8, 16, 16, 32, SP_DT_BF16, 0}, dc = {8, 1, 32, 32, SP_DT_BF16, 0};
    struct { int R, N, X; sp_ffn_layout f; } cases[] = {
        {1, 1, 1, SP_FL_WS2D}, {2, 2, 1, SP_FL_WS2D}, {4, 4, 2, SP_FL_WS1D}, {2, 2, 4, SP_FL_WS2D},
        {8, 8, 1, SP_FL_WS1D}, {2, 1, 2, SP_FL_WS1D},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sp_layout l = moe_layout(cases[i].R, cases[i].N, cases[i].X, cases[i].f);
        sp_mem_sizes ms, md;
        lower_both(&m, &l, &pf, &dc, &ms);
        sp_layout ld = l;
        ld.experts = 1;
        lower_both(&dense, &ld, &pf, &dc, &md);
        int64_t n = cases[i].X, El = NE / cases[i].N;
        int64_t expert = 3 * E * F / n * 2;                                  /* bf16, all shard sizes 64-aligned */
        int64_t router = (cases[i].f == SP_FL_WS1D ? E : E / n) * NE * 2;   /* rows split like W_in's */
        ck_assert_msg(ms.weights - md.weights == layers * ((El - 1) * expert + router),
                      "case %zu: %lld vs dense %lld", i, (long long)ms.weights, (long long)md.weights);
        ck_assert_int_eq(prog.wspec[SP_W_IN].count, 1);
        ck_assert_int_eq(sp_lower(&m, &l, SP_PHASE_DECODE, &dc, 0, &prog2), SP_OK);
        ck_assert_int_eq(prog2.wspec[SP_W_IN].count, El);
        ck_assert_int_eq(prog2.wspec[SP_W_UP].count, El);
        ck_assert_int_eq(prog2.wspec[SP_W_OUT].count, El);
        ck_assert(prog2.wspec[SP_W_ROUTER].present);
    }
}
END_TEST

/* shared experts (Fs = 2 × 768 hidden units, with a gate): every chip holds them sharded like the
 * dense FFN (3·E·Fs/n bf16 per layer, the gate's E/|Rx| rows), and each MoE layer runs them on all T
 * rows: three matmuls of 2·T·(E/|Rx|)·(Fs/|C|) FLOPs reading all their weights, the gate matmul, a
 * gate-scale step, their output in Y before the routed combine adds to it */
START_TEST(test_shared_experts_closed_form)
{
    sp_model m = moe_model(8, 2), plain = m;
    m.n_shared_experts = 2;
    m.shared_d_ff = 768;
    m.shared_expert_gate = 1;
    const int64_t E = 512, Fs = 1536, layers = 4;
    sp_shape pf = {8, 16, 16, 32, SP_DT_BF16, 0}, dc = {8, 1, 32, 32, SP_DT_BF16, 0};
    struct { int R, N, X; sp_ffn_layout f; } cases[] = {
        {1, 1, 1, SP_FL_WS2D}, {2, 2, 1, SP_FL_WS2D}, {4, 4, 2, SP_FL_WS1D}, {2, 2, 4, SP_FL_WS2D}, {2, 2, 4, SP_FL_WS1D},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sp_layout l = moe_layout(cases[i].R, cases[i].N, cases[i].X, cases[i].f);
        sp_mem_sizes ms, mp;
        lower_both(&plain, &l, &pf, &dc, &mp);
        lower_both(&m, &l, &pf, &dc, &ms);
        int64_t n = cases[i].X, nRx = cases[i].f == SP_FL_WS2D ? n : 1, Ein = E / nRx, FsC = Fs / (n / nRx);
        int64_t gate = Ein * 2 > 64 ? Ein * 2 : 64;   /* one column, 64-byte aligned */
        ck_assert_msg(ms.weights - mp.weights == layers * (3 * E * Fs / n * 2 + gate), "case %zu: %lld vs %lld", i,
                      (long long)ms.weights, (long long)mp.weights);
        ck_assert_int_eq(prog.wspec[SP_W_SH_IN].count, 1);
        int64_t T = 8 / cases[i].R * 16, mm = 0, scale = 0, combine_acc = -1;
        for (int j = 0; j < prog.layer.n; j++) {
            const sp_step *st = &prog.layer.s[j];
            if (st->kind == SP_STEP_MATMUL && (st->weight == SP_W_SH_IN || st->weight == SP_W_SH_UP || st->weight == SP_W_SH_OUT)) {
                mm++;
                int64_t k = st->weight == SP_W_SH_OUT ? FsC : Ein, nn = st->weight == SP_W_SH_OUT ? Ein : FsC;
                ck_assert_int_eq(st->m, T);
                ck_assert_int_eq(st->flops, 2 * T * k * nn);
                ck_assert_int_eq(st->weight_bytes, k * nn * 2);
                ck_assert_int_eq(st->experts, 0);
            }
            if (st->kind == SP_STEP_GATE_SCALE) scale++;
            if (st->kind == SP_STEP_MATMUL && st->weight == SP_W_SH_GATE) ck_assert_int_eq(st->flops, 2 * T * Ein);
            if (st->kind == SP_STEP_COMBINE) combine_acc = st->accumulate;
        }
        ck_assert_int_eq(mm, 3);
        ck_assert_int_eq(scale, 1);
        ck_assert_int_eq(combine_acc, 1);   /* the routed experts add to the shared experts' output */
    }
}
END_TEST

/* MoE every other layer (layers 1 and 3 of 4; 0 and 2 dense FFNs of Fd = 1536): a chip holds the
 * experts and router in the MoE layers only and the dense FFN (3·E·Fd/n bf16) in the others, so
 * against the model whose every layer is MoE it holds, per dense layer, that FFN instead of its
 * El experts and router; the dense layer's part runs its own FFN (no routing) on every token; a
 * pipeline stage of dense layers only holds what the dense model of width Fd holds there */
START_TEST(test_moe_every_closed_form)
{
    sp_model all = moe_model(8, 2), every = all, dense = all;
    every.moe_every = 2;
    every.dense_d_ff = 1536;
    dense.n_experts = dense.top_k = dense.moe_every = 0;
    dense.d_ff = 1536;
    const int64_t E = 512, F = 1024, Fd = 1536, NE = 8, n_dense = 2;
    sp_shape pf = {8, 16, 16, 32, SP_DT_BF16, 0}, dc = {8, 1, 32, 32, SP_DT_BF16, 0};
    struct { int R, N, X; sp_ffn_layout f; } cases[] = {
        {1, 1, 1, SP_FL_WS2D}, {2, 2, 1, SP_FL_WS2D}, {4, 4, 2, SP_FL_WS1D}, {2, 2, 4, SP_FL_WS2D}, {2, 1, 2, SP_FL_WS1D},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sp_layout l = moe_layout(cases[i].R, cases[i].N, cases[i].X, cases[i].f);
        sp_mem_sizes ma, me;
        lower_both(&all, &l, &pf, &dc, &ma);
        lower_both(&every, &l, &pf, &dc, &me);
        int64_t n = cases[i].X, El = NE / cases[i].N, nRx = cases[i].f == SP_FL_WS2D ? n : 1;
        int64_t expert = 3 * E * F / n * 2, router = E / nRx * NE * 2, dffn = 3 * E * Fd / n * 2;
        ck_assert_msg(me.weights == ma.weights - n_dense * (El * expert + router) + n_dense * dffn,
                      "case %zu: %lld vs all-MoE %lld", i, (long long)me.weights, (long long)ma.weights);
        ck_assert_int_eq(sp_program_part_runs(&prog, SP_PART_LAYER), 2);
        ck_assert_int_eq(sp_program_part_runs(&prog, SP_PART_DENSE), 2);
        for (int64_t li = 0; li < 4; li++)
            ck_assert_int_eq(sp_program_layer_part(&prog, li), li % 2 ? SP_PART_LAYER : SP_PART_DENSE);
        ck_assert_int_eq(sp_program_weight_layers(&prog, SP_W_ROUTER), 2);
        ck_assert_int_eq(sp_program_weight_layers(&prog, SP_W_D_IN), 2);
        ck_assert_int_eq(sp_program_weight_layers(&prog, SP_W_Q), 4);
        /* the dense layer: three matmuls of T·(E/|Rx|)·(Fd/|C|) over the D weights, nothing routed */
        int64_t T = 8 / cases[i].R * 16, FdC = Fd / (n / nRx), Ein = E / nRx, mm = 0;
        for (int j = 0; j < prog.dense.n; j++) {
            const sp_step *st = &prog.dense.s[j];
            ck_assert(st->kind != SP_STEP_ROUTE && st->kind != SP_STEP_DISPATCH && st->kind != SP_STEP_COMBINE);
            ck_assert(!(st->kind == SP_STEP_COLL && st->coll.kind == SP_COLL_ALLTOALL));
            if (st->kind != SP_STEP_MATMUL || (st->weight != SP_W_D_IN && st->weight != SP_W_D_UP && st->weight != SP_W_D_OUT))
                continue;
            mm++;
            int64_t k = st->weight == SP_W_D_OUT ? FdC : Ein, nn = st->weight == SP_W_D_OUT ? Ein : FdC;
            ck_assert_int_eq(st->m, T);
            ck_assert_int_eq(st->flops, 2 * T * k * nn);
            ck_assert_int_eq(st->weight_bytes, k * nn * 2);
        }
        ck_assert_int_eq(mm, 3);
    }
    /* stages of 1 and 3 layers: stage 0 holds layer 0 (dense) only, as the dense model does */
    sp_layout l = moe_layout(2, 2, 2, SP_FL_WS2D);
    l.stages = 2;
    l.microbatches = 2;
    l.stage_layers[0] = 1;
    l.stage_layers[1] = 3;
    sp_layout ld = l;
    ld.experts = 1;
    sp_mem_sizes me, md;
    lower_both(&every, &l, &pf, &dc, &me);
    ck_assert_int_eq(sp_program_part_runs(&prog, SP_PART_LAYER), 0);
    ck_assert_int_eq(sp_program_part_runs(&prog, SP_PART_DENSE), 1);
    ck_assert_int_eq(prog.buf_bytes[SP_BUF_DISP], 0);   /* no MoE layer here: no slot buffers */
    lower_both(&dense, &ld, &pf, &dc, &md);
    ck_assert_int_eq(me.weights, md.weights);
    ck_assert_int_eq(me.total, md.total);
    /* stage 1: layers 1 (MoE), 2 (dense), 3 (MoE) */
    ck_assert_int_eq(sp_lower(&every, &l, SP_PHASE_DECODE, &dc, 1, &prog2), SP_OK);
    ck_assert_int_eq(prog2.first_layer, 1);
    ck_assert_int_eq(sp_program_part_runs(&prog2, SP_PART_LAYER), 2);
    ck_assert_int_eq(sp_program_part_runs(&prog2, SP_PART_DENSE), 1);
    ck_assert_int_eq(sp_program_layer_part(&prog2, 0), SP_PART_LAYER);
    ck_assert_int_eq(sp_program_layer_part(&prog2, 1), SP_PART_DENSE);
}
END_TEST

/* one MoE layer's steps, for a table of (replicas, experts, X, layout, capacity, batch, tokens):
 * the all-to-alls expect to move (N−1)/N of the T·k routed rows of E/|Rx|
 * columns each way (E/|act| when coordinated with a tensor group C of more
 * than one chip: then an all-gather and a reduce-scatter over C of the
 * NE·S slot rows), the dispatch also NE/N counts of 8 bytes to each peer,
 * S = min(T, ceil(capacity · T · k / NE)); every expert matmul covers the NE·S
 * slots of the chip's experts and reads the weights of distinct(N·T)/N experts */
static const struct a2a_case {
    int R, N, X;
    sp_ffn_layout f;
    double cap;
    int64_t batch, L;
    int Y;   /* 0: 1 */
} a2a_cases[] = {
    {1, 1, 1, SP_FL_WS2D, 1.0, 4, 16, 0},  {2, 2, 1, SP_FL_WS2D, 1.0, 4, 16, 0},  {2, 2, 1, SP_FL_WS2D, 1.25, 4, 16, 0},
    {4, 4, 2, SP_FL_WS2D, 2.0, 8, 1, 0},   {8, 8, 1, SP_FL_WS1D, 1.0, 64, 1, 0},  {2, 2, 4, SP_FL_WS1D, 1.5, 2, 100, 0},
    {2, 2, 2, SP_FL_WS2D, 1.0, 4, 8, 2}, {2, 2, 2, SP_FL_WS1D, 2.0, 4, 1, 2},
    {4, 2, 1, SP_FL_WS2D, 1.0, 8, 8, 0},   /* experts must be 1 or replicas: refused */
};

START_TEST(test_moe_steps_closed_form)
{
    const struct a2a_case *c = &a2a_cases[_i];
    sp_model m = moe_model(8, 2);
    const int64_t E = 512, F = 1024, NE = 8, k = 2, ab = 2, wb = 2;
    sp_layout l = moe_layout(c->R, c->N, c->X, c->f);
    l.mesh[1] = c->Y ? c->Y : 1;
    l.capacity = c->cap;
    sp_shape sh = {c->batch, c->L, c->L, c->L, SP_DT_BF16, 0};
    sp_status st = sp_lower(&m, &l, SP_PHASE_PREFILL, &sh, 0, &prog);
    if (c->N != 1 && c->N != c->R) {
        ck_assert_int_eq(st, SP_EINVAL);
        ck_assert_ptr_nonnull(strstr(sp_last_error(), "experts=2"));
        return;
    }
    ck_assert_int_eq(st, SP_OK);
    int64_t n = c->X * (c->Y ? c->Y : 1), nRx = c->f == SP_FL_WS2D ? c->X : 1, Ein = E / nRx, FC = F / (n / nRx);   /* F over C */
    int64_t T = c->batch / c->R * c->L;
    /* coordinated with the tensor group (N > 1, |C| > 1): a chip dispatches its E/|act| columns */
    int64_t nC = n / nRx, coord = c->N > 1 && nC > 1, Ed = coord ? Ein / nC : Ein;
    int64_t coord_ag = 0, coord_rs = 0;
    int64_t S = (int64_t)ceil(c->cap * T * (double)k / NE);
    if (S > T) S = T;
    int64_t rows = NE * S;
    double distinct = NE * (1.0 - pow(1.0 - (double)k / NE, (double)(c->N * T)));
    int64_t a2a = 0, expert_mm = 0, route = 0, disp = 0, comb = 0, router_mm = 0;
    for (int i = 0; i < prog.layer.n; i++) {
        const sp_step *s = &prog.layer.s[i];
        if (s->kind == SP_STEP_COLL && s->coll.mask == SP_AXES_REPLICA) {
            a2a++;
            ck_assert_int_eq(s->coll.kind, SP_COLL_ALLTOALL);
            ck_assert_int_eq(s->coll.group, c->N);
            ck_assert_int_eq(s->coll.routed, a2a);   /* dispatch, then combine */
            int64_t out = (T * k * (c->N - 1) + c->N / 2) / c->N;  /* rounded to nearest */
            ck_assert_int_eq(s->coll.cols, Ed);
            ck_assert_int_eq(s->coll.bytes_sent, out * Ed * ab + (a2a == 1 ? (c->N - 1) * (NE / c->N) * 8 : 0));
            ck_assert_int_eq(s->coll.bytes_recv, s->coll.bytes_sent);
        }
        if (s->kind == SP_STEP_MATMUL && s->weight == SP_W_ROUTER) {
            router_mm++;
            ck_assert_int_eq(s->m, T);
            ck_assert_int_eq(s->k, Ein);
            ck_assert_int_eq(s->n, NE);
            ck_assert_int_eq(s->flops, 2 * T * Ein * NE);
        }
        if (s->kind == SP_STEP_MATMUL && s->experts > 0) {
            expert_mm++;
            ck_assert_int_eq(s->experts, NE / c->N);
            ck_assert_int_eq(s->m, rows);
            int64_t kk = s->weight == SP_W_OUT ? FC : Ein, nn = s->weight == SP_W_OUT ? Ein : FC;
            ck_assert_int_eq(s->k, kk);
            ck_assert_int_eq(s->n, nn);
            ck_assert_int_eq(s->flops, 2 * rows * kk * nn);
            ck_assert_int_eq(s->weight_bytes, (int64_t)ceil(distinct / c->N * (double)(kk * nn * wb)));
        }
        if (s->kind == SP_STEP_COLL && (s->src == SP_BUF_EXP || s->dst == SP_BUF_EXP) && s->coll.mask != SP_AXES_REPLICA) {
            /* whole rows within the replica: all-gather after the dispatch, reduce-scatter before the combine */
            ck_assert_int_eq(s->coll.kind, s->src == SP_BUF_EXP ? SP_COLL_ALLGATHER : SP_COLL_REDUCESCATTER);
            ck_assert_int_eq(s->coll.group, nC);
            ck_assert_int_eq(s->coll.rows, rows);
            ck_assert_int_eq(s->coll.cols, Ed);
            ck_assert_int_eq(s->coll.bytes_sent, (nC - 1) * rows * Ed * ab);
            if (s->coll.kind == SP_COLL_ALLGATHER) coord_ag++;
            else coord_rs++;
        }
        /* coordinated: the block's output is reduce-scattered already, no reduce-scatter of Y follows */
        if (coord && comb && s->kind == SP_STEP_COLL && s->src == SP_BUF_Y && s->coll.kind == SP_COLL_REDUCESCATTER)
            ck_assert_msg(0, "coordinated: Y reduce-scattered after the combine");
        if (s->kind == SP_STEP_ROUTE) route++;
        if (s->kind == SP_STEP_DISPATCH) {
            disp++;
            ck_assert_int_eq(s->experts * s->capacity, rows);
        }
        if (s->kind == SP_STEP_COMBINE) {
            comb++;
            ck_assert_int_eq(s->n, Ed);
            ck_assert_int_eq(s->dst, coord ? SP_BUF_Y2 : SP_BUF_Y);
        }
    }
    ck_assert_int_eq(coord_ag, coord);
    ck_assert_int_eq(coord_rs, coord);
    ck_assert_int_eq(a2a, c->N > 1 ? 2 : 0);
    ck_assert_int_eq(router_mm, 1);
    ck_assert_int_eq(expert_mm, 3);
    ck_assert_int_eq(route, 1);
    ck_assert_int_eq(disp, 1);
    ck_assert_int_eq(comb, 1);
    ck_assert_int_eq(prog.buf_bytes[SP_BUF_DISP], rows * Ein * ab);
    if (c->N > 1) ck_assert_int_eq(prog.buf_bytes[SP_BUF_EXP], rows * Ed * ab);
}
END_TEST

/* the exact bytes of a routed all-to-all from a routing: 4 expert groups of
 * 2 experts (E 512 over X = 2, ws2d: 256 bf16 columns per row); the chip of
 * group rank 1 routed own[e] of its tokens to expert e and receives from[h·2+j]
 * from source h for its local expert j */
START_TEST(test_routed_a2a_bytes)
{
    sp_model m = moe_model(8, 2);
    sp_layout l = moe_layout(4, 4, 2, SP_FL_WS2D);
    l.capacity = 2.0;
    sp_shape sh = {8, 1, 1, 1, SP_DT_BF16, 0};
    ck_assert_int_eq(sp_lower(&m, &l, SP_PHASE_DECODE, &sh, 0, &prog), SP_OK);
    const int64_t own[8] = {1, 0, 2, 1, 0, 0, 0, 0}, from[8] = {1, 1, 2, 0, 0, 1, 3, 0};
    const int64_t row = 256 * 2, counts = 3 * 2 * 8;
    int seen = 0;
    for (int i = 0; i < prog.layer.n; i++) {
        const sp_step *s = &prog.layer.s[i];
        int64_t sent = -1, recv = -1;
        if (!(s->kind == SP_STEP_COLL && s->coll.routed)) {
            if (s->kind == SP_STEP_COLL)
                ck_assert_int_eq(sp_lower_moe_a2a_bytes(&prog, s, 1, own, from, &sent, &recv), SP_EINVAL);
            continue;
        }
        seen++;
        ck_assert_int_eq(sp_lower_moe_a2a_bytes(&prog, s, 1, own, from, &sent, &recv), SP_OK);
        /* out: experts 0, 1 (group 0) and 4..7 = 1 row; in: sources 0, 2, 3 = 1 + 1 + 0 + 1 + 3 + 0 = 6 rows */
        if (s->coll.routed == 1) {
            ck_assert_int_eq(sent, 1 * row + counts);
            ck_assert_int_eq(recv, 6 * row + counts);
        } else {
            ck_assert_int_eq(sent, 6 * row);
            ck_assert_int_eq(recv, 1 * row);
        }
        ck_assert_int_eq(sp_lower_moe_a2a_bytes(&prog, s, 4, own, from, &sent, &recv), SP_EINVAL);
    }
    ck_assert_int_eq(seen, 2);
}
END_TEST

START_TEST(test_layout_key_and_validation)
{
    sp_model m = moe_model(8, 2), dense = moe_model(8, 2);
    dense.n_experts = dense.top_k = dense.moe_every = 0;
    sp_layout l, back;
    sp_error err;
    char a[300], b[300];
    ck_assert_int_eq(sp_layout_parse("replicas=4,mesh=2x1x1,experts=4,capacity=1.25", &l, &err), SP_OK);
    ck_assert_int_eq(l.experts, 4);
    ck_assert_double_eq(l.capacity, 1.25);
    sp_layout_format(&l, a, sizeof a);
    ck_assert_ptr_nonnull(strstr(a, ",experts=4,capacity=1.25"));
    ck_assert_int_eq(sp_layout_parse(a, &back, &err), SP_OK);
    ck_assert(!memcmp(&l, &back, sizeof l));
    json_t *j = sp_layout_to_json(&l);
    char *s = json_dumps(j, 0);
    ck_assert_ptr_nonnull(strstr(s, "\"experts\": 4"));
    ck_assert_int_eq(sp_layout_parse(s, &back, &err), SP_OK);
    ck_assert_str_eq(a, sp_layout_format(&back, b, sizeof b));
    free(s);
    json_decref(j);
    /* a dense layout's text has no MoE keys */
    sp_layout_init(&l);
    ck_assert_ptr_null(strstr(sp_layout_format(&l, a, sizeof a), "experts"));
    /* malformed values */
    ck_assert_int_eq(sp_layout_parse("experts=0", &l, &err), SP_EPARSE);
    ck_assert_str_eq(err.path, "experts");
    ck_assert_int_eq(sp_layout_parse("capacity=0.5", &l, &err), SP_EPARSE);
    ck_assert_str_eq(err.path, "capacity");
    ck_assert_int_eq(sp_layout_parse("{\"experts\": -1}", &l, &err), SP_EPARSE);
    ck_assert_int_eq(sp_layout_parse("{\"capacity\": \"big\"}", &l, &err), SP_EPARSE);
    /* checks against the model: N divides the experts, N is 1 or the replicas, a dense model takes neither key */
    struct { const char *text; const sp_model *model; int chips; const char *field, *says; } bad[] = {
        {"replicas=3,experts=3", &m, 3, "experts", "does not divide"},
        {"replicas=4,experts=2", &m, 4, "experts", "1 or replicas"},
        {"replicas=2,experts=2", &dense, 2, "experts", "no experts"},
        {"capacity=2", &dense, 1, "capacity", "no experts"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(sp_layout_parse(bad[i].text, &l, &err), SP_OK);
        sp_error_init(&err);
        ck_assert_int_eq(sp_layout_check(&l, bad[i].model, NULL, bad[i].chips, 12, &err), SP_EINVAL);
        ck_assert_msg(!strcmp(err.path, bad[i].field), "%s: field %s", bad[i].text, err.path);
        ck_assert_msg(strstr(err.text, bad[i].says) != NULL, "%s: %s", bad[i].text, err.text);
    }
    ck_assert_int_eq(sp_layout_parse("replicas=4,experts=4,mesh=2x1x1", &l, &err), SP_OK);
    ck_assert_int_eq(sp_layout_check(&l, &m, NULL, 8, 8, &err), SP_OK);
    /* weight-gathered expert FFNs are refused by name */
    ck_assert_int_eq(sp_layout_parse("mesh=2x1x1,prefill=wg-x/heads,decode=wg-x/heads", &l, &err), SP_OK);
    sp_error_init(&err);
    ck_assert_int_eq(sp_layout_check(&l, &m, NULL, 2, 8, &err), SP_EINVAL);
    ck_assert_msg(strstr(err.text, "wg-x in prefill: weight-gathered expert FFNs are not implemented") != NULL, "%s",
                  err.text);
    ck_assert_ptr_nonnull(strstr(err.text, "wg-x in prefill: weight-gathered expert FFNs are not implemented"));
}
END_TEST

/* Mixtral-8x7B in bf16: ~87 GiB of weights does not fit one H100; with
 * experts split over 2 replicas it does, each chip holding half the experts */
START_TEST(test_mixtral_fit)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find("mixtral-8x7b", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    sp_layout l = moe_layout(1, 1, 1, SP_FL_WS2D);
    sp_workload w = {2, 128, 32};
    sp_cost c;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l, &w, NULL, &c), SP_OK);
    sp_model_stats st;
    ck_assert_int_eq(sp_model_derive(&m, 0, &st), SP_OK);
    double gib = (double)c.mem.weights / (1 << 30);
    ck_assert_msg(gib > 86.5 && gib < 87.5, "%.2f GiB", gib);
    ck_assert_msg(llabs(c.mem.weights - st.weight_bytes_bf16) < (16 << 20), "%lld vs %lld",
                  (long long)c.mem.weights, (long long)st.weight_bytes_bf16);
    ck_assert(!c.feasible);
    l = moe_layout(2, 2, 1, SP_FL_WS2D);
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l, &w, NULL, &c), SP_OK);
    ck_assert(c.feasible);
    ck_assert(c.mem.weights < 46LL << 30);
    /* the same two replicas without expert parallelism each hold every expert */
    l.experts = 1;
    ck_assert_int_eq(sp_cost_eval(&m, &hw, &l, &w, NULL, &c), SP_OK);
    ck_assert(!c.feasible);
}
END_TEST

/* the planner decides the expert-parallel degree: Mixtral on 8 H100s at
 * batch 64 picks expert parallelism, and its experts rival is the best
 * layout without it, slower */
START_TEST(test_plan_picks_expert_parallelism)
{
    sp_model m;
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_model_find("mixtral-8x7b", &m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    sp_workload w = {64, 1024, 128};
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    sp_plan *p = NULL;
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 8, &w, &o, &p), SP_OK);
    ck_assert(p->has_chosen);
    ck_assert_int_gt(p->chosen.layout.experts, 1);
    ck_assert_int_eq(p->chosen.layout.experts, p->chosen.layout.replicas);
    int found = 0;
    for (int i = 0; i < p->n_rivals; i++) {
        const sp_plan_rival *r = &p->rivals[i];
        if (r->kind != SP_RIVAL_EXPERTS) continue;
        found = 1;
        ck_assert_int_eq(r->point.layout.experts, 1);
        ck_assert(r->objective_delta > 0 || r->loss == SP_LOSS_MEMORY);
        ck_assert_ptr_nonnull(strstr(r->reason, "no expert parallelism"));
    }
    ck_assert(found);
    sp_plan_free(p);
    /* a dense model has no experts rival */
    ck_assert_int_eq(sp_model_find("llama2-7b", &m, &err), SP_OK);
    ck_assert_int_eq(sp_plan_solve(&m, &hw, 2, &w, &o, &p), SP_OK);
    for (int i = 0; i < p->n_rivals; i++) ck_assert_int_ne(p->rivals[i].kind, SP_RIVAL_EXPERTS);
    ck_assert_int_eq(p->chosen.layout.experts, 1);
    sp_plan_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("moe");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_routing_closed_form);
    tcase_add_test(tc, test_memory_of_experts_held);
    tcase_add_loop_test(tc, test_moe_steps_closed_form, 0, (int)(sizeof a2a_cases / sizeof a2a_cases[0]));
    tcase_add_test(tc, test_routed_a2a_bytes);
    tcase_add_test(tc, test_shared_experts_closed_form);
    tcase_add_test(tc, test_moe_every_closed_form);
    tcase_add_test(tc, test_layout_key_and_validation);
    tcase_add_test(tc, test_mixtral_fit);
    tcase_add_test(tc, test_plan_picks_expert_parallelism);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
