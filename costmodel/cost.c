/* cost.c: prices lowered programs on a hardware description (rules in sp_cost.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "spi_common.h"
#include "costmodel/sp_cost.h"

void sp_cost_opts_init(sp_cost_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->act_dtype = SP_DT_BF16;
}

/* ---- placement: how many of a group's chips share a node ---- */
static int axis_size(const sp_layout *l, sp_axis a)
{
    switch (a) {
    case SP_AXIS_X: return l->mesh[0];
    case SP_AXIS_Y: return l->mesh[1];
    case SP_AXIS_Z: return l->mesh[2];
    case SP_AXIS_REPLICA: return l->replicas;
    default: return l->stages;
    }
}

static unsigned axes_mask(const char *axes)
{
    unsigned m = 0;
    for (; *axes; axes++)
        m |= *axes == 'x' ? SP_AXES_X : *axes == 'y' ? SP_AXES_Y : *axes == 'z' ? SP_AXES_Z
           : *axes == 'r' ? SP_AXES_REPLICA : *axes == 's' ? SP_AXES_STAGE : 0u;
    return m;
}

static void group_tiers_mask(const sp_hw *hw, const sp_layout *l, unsigned mask, int *k_in, int *k_out)
{
    *k_in = 1;
    *k_out = 1;
    sp_axis order[SP_AXIS_COUNT] = {l->placement[0], l->placement[1], l->placement[2], SP_AXIS_REPLICA, SP_AXIS_STAGE};
    int room = hw->topo == SP_TOPO_CLUSTER && hw->chips_per_node > 0 ? hw->chips_per_node : 1 << 30;
    for (int i = 0; i < SP_AXIS_COUNT; i++) {
        int s = axis_size(l, order[i]);
        int in = s <= room ? s : room;   /* sp_layout_check keeps these divisible */
        room = in > 0 ? room / in : 1;
        if (room < 1) room = 1;
        if (mask & (1u << order[i])) {
            *k_in *= in;
            *k_out *= s / in;
        }
    }
}

void sp_cost_group_tiers(const sp_hw *hw, const sp_layout *l, const char *axes, int *k_in, int *k_out)
{
    group_tiers_mask(hw, l, axes_mask(axes), k_in, k_out);
}

double sp_cost_coll_time(const sp_hw *hw, const sp_layout *l, const sp_coll *c)
{
    if (c->kind == SP_COLL_SENDRECV) {
        int64_t bytes = c->bytes_sent > c->bytes_recv ? c->bytes_sent : c->bytes_recv;
        if (hw->topo == SP_TOPO_TORUS) return bytes / hw->link_bw + hw->hop_latency;
        /* stages are the outermost axis: a hand-off crosses nodes when a stage fills one */
        int per_stage = l->replicas * l->mesh[0] * l->mesh[1] * l->mesh[2];
        int cross = per_stage >= hw->chips_per_node;
        return bytes / (cross ? hw->inter_bw : hw->intra_bw) + (cross ? hw->inter_latency : hw->intra_latency);
    }
    int K = c->group;
    double bytes = (double)c->bytes_recv;
    unsigned xyz = 0;   /* bit 0 x, bit 1 y, bit 2 z */
    for (const char *a = c->row_axes; *a; a++) xyz |= 1u << (*a - 'x');
    for (const char *a = c->col_axes; *a; a++) xyz |= 1u << (*a - 'x');
    if (hw->topo == SP_TOPO_TORUS) {
        int dims = 0, hops = 0, kmax = 1;
        for (int a = 0; a < 3; a++) {
            int d = (xyz >> a) & 1 ? l->mesh[a] : 1;
            if (d > 1) {
                dims++;
                hops += d - 1;
                if (d > kmax) kmax = d;
            }
        }
        if (dims == 0) return 0.0;
        double bw = 2.0 * dims * hw->link_bw;
        double t = bytes / bw;
        if (c->kind == SP_COLL_ALLTOALL && kmax > 4) t *= kmax / 4.0;   /* mean ring distance */
        if (c->kind == SP_COLL_ALLREDUCE) hops *= 2;
        return t + hops * hw->hop_latency;
    }
    int kin, kout;
    group_tiers_mask(hw, l, xyz << SP_AXIS_X, &kin, &kout);
    double t = 0.0;
    switch (c->kind) {
    case SP_COLL_ALLGATHER:
    case SP_COLL_REDUCESCATTER:
    case SP_COLL_ALLREDUCE: {
        int rounds = c->kind == SP_COLL_ALLREDUCE ? 2 : 1;
        double chunk = bytes / rounds / (K - 1);   /* c: one chip's block */
        t = rounds * ((kout - 1) * chunk / hw->inter_bw + kout * (kin - 1) * chunk / hw->intra_bw +
                      (kout - 1) * hw->inter_latency + (kin - 1) * hw->intra_latency);
        break;
    }
    case SP_COLL_ALLTOALL: {
        double chunk = bytes / (K - 1);
        t = (K - kin) * chunk / hw->inter_bw + (kin - 1) * chunk / hw->intra_bw +
            (kout > 1 ? hw->inter_latency : 0) + (kin > 1 ? hw->intra_latency : 0);
        break;
    }
    default: break;
    }
    return t;
}

/* Matmul efficiency memoised per FLOPs: programs of neighbouring layouts
 * repeat the same local shapes, and the curve costs two logs.  The memo
 * belongs to one curve; eff_bind (once per program priced) empties it when
 * the curve differs (compared by value, so a profile edited in place is
 * noticed). */
enum { EFF_SLOTS = 512 };
static _Thread_local struct { int64_t flops; double eff; } eff_memo[EFF_SLOTS];
static _Thread_local struct { int points; double f[SP_HW_EFF_POINTS], v[SP_HW_EFF_POINTS]; } eff_curve;

static void eff_bind(const sp_hw *hw)
{
    if (eff_curve.points != hw->eff_points || memcmp(eff_curve.f, hw->eff_flops, sizeof eff_curve.f) ||
        memcmp(eff_curve.v, hw->eff_value, sizeof eff_curve.v)) {
        eff_curve.points = hw->eff_points;
        memcpy(eff_curve.f, hw->eff_flops, sizeof eff_curve.f);
        memcpy(eff_curve.v, hw->eff_value, sizeof eff_curve.v);
        memset(eff_memo, 0, sizeof eff_memo);
    }
}

static double matmul_eff(const sp_hw *hw, int64_t flops)
{
    uint64_t h = (uint64_t)flops * 0x9E3779B97F4A7C15ull;
    unsigned i = (unsigned)(h >> 55) & (EFF_SLOTS - 1);
    if (eff_memo[i].flops != flops) {
        eff_memo[i].flops = flops;
        eff_memo[i].eff = sp_hw_matmul_eff(hw, (double)flops);
    }
    return eff_memo[i].eff;
}

static double compute_peak(const sp_hw *hw, sp_dtype weights)
{
    /* weight-only quantisation dequantises to bf16 before the matmul */
    if (weights == SP_DT_F32) return hw->peak_flops[SP_DT_F32] > 0 ? hw->peak_flops[SP_DT_F32] : hw->peak_flops[SP_DT_BF16];
    return hw->peak_flops[SP_DT_BF16];
}

/* Prices a step list at up to two contexts at once (decode's first and last
 * step differ only in the attention terms); pc1 may be NULL. */
static void price_steps(const sp_steps *ss, const sp_program *p, const sp_hw *hw, const int64_t ctx[2], double peak,
                        double s_per_byte, int64_t times, sp_phase_cost *pc0, sp_phase_cost *pc1)
{
    const sp_layout *l = &p->layout;
    for (int i = 0; i < ss->n; i++) {
        const sp_step *s = &ss->s[i];
        if (s->kind == SP_STEP_COLL || s->kind == SP_STEP_SEND || s->kind == SP_STEP_RECV) {
            double t = sp_cost_coll_time(hw, l, &s->coll) * times;
            int64_t bytes = (s->coll.bytes_sent > s->coll.bytes_recv ? s->coll.bytes_sent : s->coll.bytes_recv) * times;
            double m = s->kind == SP_STEP_COLL ? s->act_bytes * s_per_byte * times : 0.0;
            for (sp_phase_cost *pc = pc0; pc; pc = pc == pc0 ? pc1 : NULL) {
                pc->coll_s[s->coll.kind] += t;
                pc->comm_s += t;
                pc->comm_bytes += bytes;
                pc->memory_s += m;
                pc->roofline_s += m;
            }
            continue;
        }
        /* decode attention: one query token, every term linear in the context */
        int rescale = s->kind == SP_STEP_ATTN && s->from_cache && s->context > 0;
        double c = 0.0, m = 0.0;
        for (int k = 0; k < 2; k++) {
            sp_phase_cost *pc = k ? pc1 : pc0;
            if (!pc) break;
            int64_t flops = s->flops;
            if (k == 0 || rescale) {
                int64_t kvb = s->kv_bytes_read;
                if (rescale && ctx[k] > 0) {
                    flops = (int64_t)((double)flops * ctx[k] / s->context);
                    kvb = (int64_t)((double)kvb * ctx[k] / s->context);
                }
                c = flops > 0 ? flops / (peak * matmul_eff(hw, flops)) : 0.0;
                m = (double)(s->weight_bytes + kvb + s->kv_bytes_written + s->act_bytes) * s_per_byte;
            }
            pc->compute_s += c * times;
            pc->memory_s += m * times;
            pc->roofline_s += (c > m ? c : m) * times;
            pc->flops += flops * times;
        }
    }
}

static double overlap(const sp_hw *hw, double work, double comm)
{
    double hi = work > comm ? work : comm, lo = work > comm ? comm : work;
    switch (hw->overlap) {
    case SP_OVERLAP_NONE: return work + comm;
    case SP_OVERLAP_FULL: return hi;
    default: return hi + (1.0 - hw->overlap_fraction) * lo;
    }
}

static void price_program(const sp_program *p, const sp_hw *hw, const int64_t ctx[2], sp_phase_cost *out0,
                          sp_phase_cost *out1)
{
    memset(out0, 0, sizeof *out0);
    if (out1) memset(out1, 0, sizeof *out1);
    eff_bind(hw);
    double peak = compute_peak(hw, p->layout.weights);
    /* HBM seconds per byte: one division per program, not one per step */
    double s_per_byte = 1.0 / (hw->hbm_bw * (hw->hbm_bw_eff > 0 ? hw->hbm_bw_eff : 1.0));
    price_steps(&p->pre, p, hw, ctx, peak, s_per_byte, 1, out0, out1);
    price_steps(&p->layer, p, hw, ctx, peak, s_per_byte, p->n_layers, out0, out1);
    price_steps(&p->post, p, hw, ctx, peak, s_per_byte, 1, out0, out1);
    out0->time_s = overlap(hw, out0->roofline_s, out0->comm_s);
    if (out1) out1->time_s = overlap(hw, out1->roofline_s, out1->comm_s);
}

void sp_cost_program(const sp_program *p, const sp_hw *hw, int64_t context, sp_phase_cost *out)
{
    int64_t ctx[2] = {context, 0};
    price_program(p, hw, ctx, out, NULL);
}

static void add_phase(sp_phase_cost *acc, const sp_phase_cost *x)
{
    acc->time_s += x->time_s;
    acc->compute_s += x->compute_s;
    acc->memory_s += x->memory_s;
    acc->roofline_s += x->roofline_s;
    for (int k = 0; k < SP_COLL_COUNT; k++) acc->coll_s[k] += x->coll_s[k];
    acc->comm_s += x->comm_s;
    acc->comm_bytes += x->comm_bytes;
    acc->flops += x->flops;
}

/* Phase prices are memoised per thread.  A search prices each phase's
 * layout with many layouts of the other phase, and a phase's program
 * depends on the other phase only through the KV cache (sp_lower_key):
 * every evaluation still runs both phases' checks (sp_lower_check_key),
 * then lowers and prices only the phases whose key it has not seen.  The
 * memo belongs to one model and one hardware profile, compared by value,
 * and is emptied when either changes; a slot holds the last key hashed to
 * it.  opts->fresh bypasses it. */
typedef struct phase_key {
    sp_lower_key lk;
    int64_t first_ctx;          /* decode: context of the first generated token (prompt + 1) */
} phase_key;
typedef struct phase_val {
    sp_phase_cost c0, c1;       /* prefill: c0; decode: first and last step */
    int64_t buf_bytes[SP_BUF_COUNT];
    sp_mem_sizes mem;           /* sp_lower_mem_stage: the stage's weights and KV, this phase's workspace */
} phase_val;
enum { MEMO_SLOTS = 256 };
static _Thread_local struct {
    sp_model m;
    sp_hw hw;
    int64_t params_ctx, params_active;   /* sp_model_derive at params_ctx (0: none yet) */
    unsigned char used[MEMO_SLOTS];
    phase_key key[MEMO_SLOTS];
    phase_val val[MEMO_SLOTS];
} memo;

static void memo_bind(const sp_model *m, const sp_hw *hw)
{
    if (memcmp(&memo.m, m, sizeof *m) || memcmp(&memo.hw, hw, sizeof *hw)) {
        memset(memo.used, 0, sizeof memo.used);
        memcpy(&memo.m, m, sizeof *m);   /* bytes, padding included: compared with memcmp */
        memcpy(&memo.hw, hw, sizeof *hw);
        memo.params_ctx = 0;
    }
}

static unsigned memo_slot(const phase_key *k)
{
    /* multiplicative hash over the key's 8-byte words (the key is zero-padded) */
    _Static_assert(sizeof(phase_key) % 8 == 0, "phase_key is hashed by words");
    uint64_t h = 0x9E3779B97F4A7C15ull, w;
    const unsigned char *b = (const unsigned char *)k;
    for (size_t i = 0; i < sizeof *k; i += 8) {
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    return (unsigned)(h >> 40) % MEMO_SLOTS;
}

static _Thread_local sp_program prog;   /* the program being priced (large: kept out of the stack) */

/* Lowers (sp_lower_begin done on prog) and prices one phase. */
static sp_status price_phase(const sp_hw *hw, sp_phase phase, const sp_shape *sh, int64_t first_ctx, phase_val *v)
{
    SP_CHECK(sp_lower_finish(&prog));
    int64_t ctx[2] = {first_ctx, sh->max_context};
    if (phase == SP_PHASE_PREFILL) sp_cost_program(&prog, hw, 0, &v->c0);
    else price_program(&prog, hw, ctx, &v->c0, &v->c1);
    memcpy(v->buf_bytes, prog.buf_bytes, sizeof v->buf_bytes);
    sp_lower_mem_stage(&prog, &v->mem);
    return SP_OK;
}

/* The prices of one phase of stage s: from the memo, or lowered now. */
static sp_status phase_prices(const sp_model *m, const sp_hw *hw, const sp_layout *l, sp_phase phase,
                              const sp_shape *sh, int s, int64_t first_ctx, const sp_cost_opts *opts,
                              int *bound, const phase_val **out)
{
    static _Thread_local phase_val scratch;
    phase_key key;
    memset(&key, 0, sizeof key);
    if (sp_lower_begin(m, l, phase, sh, s, &key.lk, &prog) != SP_OK)
        return opts->quiet ? SP_EINVAL : sp_lower(m, l, phase, sh, s, &prog);   /* fails again, with the reason */
    key.first_ctx = phase == SP_PHASE_DECODE ? first_ctx : 0;
    if (opts->fresh) {
        SP_CHECK(price_phase(hw, phase, sh, first_ctx, &scratch));
        *out = &scratch;
        return SP_OK;
    }
    if (!*bound) {   /* after the check: most layouts a search tries do not apply */
        memo_bind(m, hw);
        *bound = 1;
    }
    unsigned i = memo_slot(&key);
    if (!memo.used[i] || memcmp(&memo.key[i], &key, sizeof key)) {
        memo.used[i] = 0;
        SP_CHECK(price_phase(hw, phase, sh, first_ctx, &memo.val[i]));
        memo.key[i] = key;
        memo.used[i] = 1;
    }
    *out = &memo.val[i];
    return SP_OK;
}

/* Pipeline timing over stages (sp_cost.h): returns the time; sums the breakdown. */
sp_status sp_cost_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                       const sp_cost_opts *opts, sp_cost *out)
{
    if (!m || !hw || !l || !w || !out) return spi_fail(SP_EINVAL, "sp_cost_eval: NULL argument");
    if (w->batch < 1 || w->prompt < 0 || w->gen < 0 || (w->prompt == 0 && w->gen == 0))
        return spi_fail(SP_EINVAL, "workload: batch %lld, prompt %lld, gen %lld: need batch >= 1 and some tokens",
                        (long long)w->batch, (long long)w->prompt, (long long)w->gen);
    sp_cost_opts defaults;
    if (!opts) {
        sp_cost_opts_init(&defaults);
        opts = &defaults;
    }
    memset(out, 0, sizeof *out);
    out->chips = sp_layout_chips(l);
    int64_t max_ctx = w->prompt + w->gen;
    int M = l->microbatches, S = l->stages;
    double pf_sum = 0, pf_max = 0, d1_sum = 0, d1_max = 0, dn_sum = 0, dn_max = 0;
    out->capacity = (int64_t)(hw->hbm_bytes * hw->hbm_usable);
    int64_t worst = INT64_MIN;
    /* A stage's program depends on the stage only through (first, last,
     * layers): price each distinct kind once (at most four) and reuse it. */
    typedef struct stage_kind {
        int first, last;
        int64_t layers;
        sp_phase_cost pf, d1, dn;
        sp_mem_sizes mem;
    } stage_kind;
    stage_kind kinds[4];
    int nkinds = 0;
    int bound = 0;   /* memo_bind done */
    sp_shape pf_sh = {w->batch, w->prompt, w->prompt, max_ctx, opts->act_dtype};
    sp_shape dc_sh = {w->batch, 1, max_ctx, max_ctx, opts->act_dtype};
    for (int s = 0; s < S; s++) {
        int64_t l0, nl;
        sp_lower_stage_layers(m->n_layers, S, s, &l0, &nl);
        stage_kind *k = NULL;
        for (int i = 0; i < nkinds && !k; i++)
            if (kinds[i].first == (s == 0) && kinds[i].last == (s == S - 1) && kinds[i].layers == nl) k = &kinds[i];
        if (k) goto accumulate;
        k = &kinds[nkinds++];
        memset(k, 0, sizeof *k);
        k->first = s == 0;
        k->last = s == S - 1;
        k->layers = nl;
        {
            const phase_val *v;
            /* buffers of both phases (the decode lookup may reuse the prefill memo slot) */
            int64_t pf_bufs[SP_BUF_COUNT], dc_bufs[SP_BUF_COUNT];
            if (w->prompt > 0) {
                SP_CHECK(phase_prices(m, hw, l, SP_PHASE_PREFILL, &pf_sh, s, 0, opts, &bound, &v));
                k->pf = v->c0;
                k->mem = v->mem;
                memcpy(pf_bufs, v->buf_bytes, sizeof pf_bufs);
            }
            if (w->gen > 0) {
                SP_CHECK(phase_prices(m, hw, l, SP_PHASE_DECODE, &dc_sh, s, w->prompt + 1, opts, &bound, &v));
                k->d1 = v->c0;
                k->dn = v->c1;
                int64_t pf_ws = w->prompt > 0 ? k->mem.workspace : 0;
                k->mem = v->mem;   /* weights and KV: the stage's, either phase's agrees */
                if (pf_ws > k->mem.workspace) k->mem.workspace = pf_ws;   /* the larger tile */
                memcpy(dc_bufs, v->buf_bytes, sizeof dc_bufs);
            }
            sp_lower_mem_sizes_merge(&k->mem, w->prompt > 0 ? pf_bufs : NULL, w->gen > 0 ? dc_bufs : NULL, &k->mem);
        }
    accumulate:
        if (w->prompt > 0) {
            pf_sum += k->pf.time_s;
            if (k->pf.time_s > pf_max) pf_max = k->pf.time_s;
            add_phase(&out->prefill, &k->pf);
            if (k->pf.comm_bytes * M > out->comm_bytes_prefill) out->comm_bytes_prefill = k->pf.comm_bytes * M;
        }
        if (w->gen > 0) {
            d1_sum += k->d1.time_s;
            dn_sum += k->dn.time_s;
            if (k->d1.time_s > d1_max) d1_max = k->d1.time_s;
            if (k->dn.time_s > dn_max) dn_max = k->dn.time_s;
            add_phase(&out->decode, &k->dn);
            if (k->dn.comm_bytes > out->comm_bytes_decode_step) out->comm_bytes_decode_step = k->dn.comm_bytes;
        }
        if (k->mem.total > worst) {
            worst = k->mem.total;
            out->mem = k->mem;
        }
    }
    out->comm_bytes_decode_step *= M;
    out->shortfall_bytes = worst > out->capacity ? worst - out->capacity : 0;
    out->feasible = out->shortfall_bytes == 0;

    if (w->prompt > 0) out->prefill_s = pf_sum + (M - 1) * pf_max;
    if (w->gen > 0) {
        double step1 = M * d1_max > d1_sum ? M * d1_max : d1_sum;
        double stepn = M * dn_max > dn_sum ? M * dn_max : dn_sum;
        out->decode_step_s = stepn;
        out->decode_s = w->gen * 0.5 * (step1 + stepn);
    }
    out->total_s = out->prefill_s + out->decode_s;

    int64_t params_active;
    if (bound && memo.params_ctx == max_ctx) {
        params_active = memo.params_active;
    } else {
        sp_model_stats st;
        SP_CHECK(sp_model_derive(m, max_ctx, &st));
        params_active = st.params_active;
        if (bound) {
            memo.params_ctx = max_ctx;
            memo.params_active = params_active;
        }
    }
    double peak = compute_peak(hw, l->weights) * out->chips;
    double n2 = 2.0 * (double)params_active;
    if (w->gen > 0) {
        double gen_tokens = (double)w->batch * w->gen;
        out->tokens_per_s = gen_tokens / out->total_s;
        out->cost_chip_s_per_token = out->chips * out->total_s / gen_tokens;
        out->mfu_decode = n2 * gen_tokens / (peak * out->decode_s);
    } else {
        double tokens = (double)w->batch * w->prompt;
        out->tokens_per_s = tokens / out->prefill_s;
        out->cost_chip_s_per_token = out->chips * out->prefill_s / tokens;
    }
    if (w->prompt > 0) out->mfu_prefill = n2 * (double)w->batch * w->prompt / (peak * out->prefill_s);
    out->mfu = n2 * (double)w->batch * (w->prompt + w->gen) / (peak * out->total_s);
    return SP_OK;
}

sp_status sp_cost_max_context(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch,
                              double kv_budget, int64_t *out)
{
    if (kv_budget <= 0 || kv_budget > 1) return spi_fail(SP_EINVAL, "--kv-budget %g must be in (0, 1]", kv_budget);
    /* KV bytes are linear in the capacity: price one token of context on every stage */
    int64_t worst = 0;
    static _Thread_local sp_program dc;
    for (int s = 0; s < l->stages; s++) {
        sp_shape sh = {batch, 1, 1, 1, SP_DT_BF16};
        SP_CHECK(sp_lower(m, l, SP_PHASE_DECODE, &sh, s, &dc));
        sp_mem_sizes ms;
        SP_CHECK(sp_lower_mem_sizes(NULL, &dc, &ms));
        if (ms.kv > worst) worst = ms.kv;
    }
    double budget = (double)hw->hbm_bytes * kv_budget;
    *out = worst > 0 ? (int64_t)(budget / (double)worst) : 0;
    return SP_OK;
}
