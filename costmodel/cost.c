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
 * belongs to one curve; a different curve (compared by value, so a profile
 * edited in place is noticed) empties it. */
static double matmul_eff(const sp_hw *hw, int64_t flops)
{
    enum { SLOTS = 512 };
    static _Thread_local struct { int64_t flops; double eff; } memo[SLOTS];
    static _Thread_local struct { int points; double f[SP_HW_EFF_POINTS], v[SP_HW_EFF_POINTS]; } curve;
    if (curve.points != hw->eff_points || memcmp(curve.f, hw->eff_flops, sizeof curve.f) ||
        memcmp(curve.v, hw->eff_value, sizeof curve.v)) {
        curve.points = hw->eff_points;
        memcpy(curve.f, hw->eff_flops, sizeof curve.f);
        memcpy(curve.v, hw->eff_value, sizeof curve.v);
        memset(memo, 0, sizeof memo);
    }
    uint64_t h = (uint64_t)flops * 0x9E3779B97F4A7C15ull;
    unsigned i = (unsigned)(h >> 55) & (SLOTS - 1);
    if (memo[i].flops != flops) {
        memo[i].flops = flops;
        memo[i].eff = sp_hw_matmul_eff(hw, (double)flops);
    }
    return memo[i].eff;
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
                        double hbm, int64_t times, sp_phase_cost *pc0, sp_phase_cost *pc1)
{
    const sp_layout *l = &p->layout;
    sp_phase_cost *pcs[2] = {pc0, pc1};
    int npc = pc1 ? 2 : 1;
    for (int i = 0; i < ss->n; i++) {
        const sp_step *s = &ss->s[i];
        if (s->kind == SP_STEP_COLL || s->kind == SP_STEP_SEND || s->kind == SP_STEP_RECV) {
            double t = sp_cost_coll_time(hw, l, &s->coll) * times;
            int64_t bytes = (s->coll.bytes_sent > s->coll.bytes_recv ? s->coll.bytes_sent : s->coll.bytes_recv) * times;
            double m = s->kind == SP_STEP_COLL ? s->act_bytes / hbm * times : 0.0;
            for (int k = 0; k < npc; k++) {
                pcs[k]->coll_s[s->coll.kind] += t;
                pcs[k]->comm_s += t;
                pcs[k]->comm_bytes += bytes;
                pcs[k]->memory_s += m;
                pcs[k]->roofline_s += m;
            }
            continue;
        }
        int rescale = s->kind == SP_STEP_ATTN && s->from_cache && s->context > 0;
        double c = 0.0, m = 0.0;
        for (int k = 0; k < npc; k++) {
            int64_t flops = s->flops, kvb = s->kv_bytes_read;
            if (rescale && ctx[k] > 0) {
                /* decode: one query token, every term linear in the context */
                flops = (int64_t)((double)flops * ctx[k] / s->context);
                kvb = (int64_t)((double)kvb * ctx[k] / s->context);
            }
            if (k == 0 || rescale) {
                c = flops > 0 ? flops / (peak * matmul_eff(hw, flops)) : 0.0;
                m = (double)(s->weight_bytes + kvb + s->kv_bytes_written + s->act_bytes) / hbm;
            }
            pcs[k]->compute_s += c * times;
            pcs[k]->memory_s += m * times;
            pcs[k]->roofline_s += (c > m ? c : m) * times;
            pcs[k]->flops += flops * times;
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
    double peak = compute_peak(hw, p->layout.weights);
    double hbm = hw->hbm_bw * (hw->hbm_bw_eff > 0 ? hw->hbm_bw_eff : 1.0);
    price_steps(&p->pre, p, hw, ctx, peak, hbm, 1, out0, out1);
    price_steps(&p->layer, p, hw, ctx, peak, hbm, p->n_layers, out0, out1);
    price_steps(&p->post, p, hw, ctx, peak, hbm, 1, out0, out1);
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

/* Decode programs do not depend on the prefill layout, and a search prices
 * each decode layout with many prefill layouts: decode's prices and buffer
 * sizes are memoised per (layout without its prefill part, workload,
 * stage kind).  The memo belongs to one model and one hardware profile,
 * compared by value, and is emptied when either changes. */
typedef struct dc_key {
    sp_layout layout;      /* prefill part cleared */
    sp_workload w;
    sp_dtype act;
    int first, last;
    int64_t layers;
} dc_key;
typedef struct dc_val {
    sp_phase_cost d1, dn;
    int64_t buf_bytes[SP_BUF_COUNT];
} dc_val;
enum { DC_SLOTS = 64 };
static _Thread_local struct {
    sp_model m;
    sp_hw hw;
    int used[DC_SLOTS];
    dc_key key[DC_SLOTS];
    dc_val val[DC_SLOTS];
} dc_memo;

static void dc_memo_bind(const sp_model *m, const sp_hw *hw)
{
    if (memcmp(&dc_memo.m, m, sizeof *m) || memcmp(&dc_memo.hw, hw, sizeof *hw)) {
        memset(dc_memo.used, 0, sizeof dc_memo.used);
        dc_memo.m = *m;
        dc_memo.hw = *hw;
    }
}

static unsigned dc_slot(const dc_key *k)
{
    const unsigned char *b = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;   /* FNV-1a over the key's bytes */
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211ull;
    return (unsigned)(h % DC_SLOTS);
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
    static _Thread_local sp_program pf, dc;
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
    dc_memo_bind(m, hw);
    for (int s = 0; s < S; s++) {
        int64_t l0, nl;
        sp_lower_stage_layers(m->n_layers, S, s, &l0, &nl);
        stage_kind *k = NULL;
        for (int i = 0; i < nkinds && !k; i++)
            if (kinds[i].first == (s == 0) && kinds[i].last == (s == S - 1) && kinds[i].layers == nl) k = &kinds[i];
        if (!k) {
            k = &kinds[nkinds++];
            memset(k, 0, sizeof *k);
            k->first = s == 0;
            k->last = s == S - 1;
            k->layers = nl;
            if (w->prompt > 0) {
                sp_shape sh = {w->batch, w->prompt, w->prompt, max_ctx, opts->act_dtype};
                SP_CHECK(sp_lower(m, l, SP_PHASE_PREFILL, &sh, s, &pf));
                sp_cost_program(&pf, hw, 0, &k->pf);
            }
            if (w->gen > 0 && w->prompt > 0) {
                dc_key key;
                memset(&key, 0, sizeof key);   /* padding bytes too: the key is hashed and compared whole */
                key.layout = *l;
                memset(&key.layout.phase[SP_PHASE_PREFILL], 0, sizeof key.layout.phase[SP_PHASE_PREFILL]);
                key.w = *w;
                key.act = opts->act_dtype;
                key.first = k->first;
                key.last = k->last;
                key.layers = nl;
                unsigned slot = dc_slot(&key);
                if (!dc_memo.used[slot] || memcmp(&dc_memo.key[slot], &key, sizeof key)) {
                    sp_shape sh = {w->batch, 1, max_ctx, max_ctx, opts->act_dtype};
                    SP_CHECK(sp_lower(m, l, SP_PHASE_DECODE, &sh, s, &dc));
                    int64_t ctx[2] = {w->prompt + 1, max_ctx};
                    dc_val *v = &dc_memo.val[slot];
                    price_program(&dc, hw, ctx, &v->d1, &v->dn);
                    memcpy(v->buf_bytes, dc.buf_bytes, sizeof v->buf_bytes);
                    dc_memo.key[slot] = key;
                    dc_memo.used[slot] = 1;
                }
                k->d1 = dc_memo.val[slot].d1;
                k->dn = dc_memo.val[slot].dn;
                SP_CHECK(sp_lower_mem_sizes_bufs(&pf, dc_memo.val[slot].buf_bytes, &k->mem));
            } else {
                if (w->gen > 0) {
                    sp_shape sh = {w->batch, 1, max_ctx, max_ctx, opts->act_dtype};
                    SP_CHECK(sp_lower(m, l, SP_PHASE_DECODE, &sh, s, &dc));
                    int64_t ctx[2] = {w->prompt + 1, max_ctx};
                    price_program(&dc, hw, ctx, &k->d1, &k->dn);
                }
                SP_CHECK(sp_lower_mem_sizes(w->prompt > 0 ? &pf : NULL, w->gen > 0 ? &dc : NULL, &k->mem));
            }
        }
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

    sp_model_stats st;
    SP_CHECK(sp_model_derive(m, max_ctx, &st));
    double peak = compute_peak(hw, l->weights) * out->chips;
    double n2 = 2.0 * (double)st.params_active;
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

sp_status sp_cost_applies(const sp_model *m, const sp_layout *l, const sp_workload *w, const sp_cost_opts *opts)
{
    if (!m || !l || !w || w->batch < 1 || w->prompt < 0 || w->gen < 0 || (w->prompt == 0 && w->gen == 0))
        return SP_EINVAL;
    sp_dtype ad = opts ? opts->act_dtype : SP_DT_BF16;
    int64_t max_ctx = w->prompt + w->gen;
    /* the checks depend on the stage only through its layer count, which is
     * smallest on the last stage */
    int s = l->stages > 0 ? l->stages - 1 : 0;
    if (w->prompt > 0) {
        sp_shape sh = {w->batch, w->prompt, w->prompt, max_ctx, ad};
        if (sp_lower_check(m, l, SP_PHASE_PREFILL, &sh, s) != SP_OK) return SP_EINVAL;
    }
    if (w->gen > 0) {
        sp_shape sh = {w->batch, 1, max_ctx, max_ctx, ad};
        if (sp_lower_check(m, l, SP_PHASE_DECODE, &sh, s) != SP_OK) return SP_EINVAL;
    }
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
