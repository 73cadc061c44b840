/* cost_xfer.c: prices the KV transfer between separate prefill and decode
 * chip groups (sp_cost.h, sp_cost_kv_xfer). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "spi_ckd.h"
#include "sp_cost.h"
#include "costmodel/spi_cost.h"

/* pair matrices larger than this (prefill chips × decode chips) are refused:
 * 4M pairs of int64 is 32 MiB */
#define XFER_MAX_PAIRS (1 << 22)

typedef struct acc {
    int np, nd;
    int64_t *pair;         /* (np, nd) bytes per (sender, receiver) */
    int64_t kv, tok;
    spi_ckd ck;
} acc;

static sp_status add_block(void *ctx, const sp_xfer_block *b)
{
    acc *a = ctx;
    if (b->src < 0 || b->src >= a->np || b->dst < 0 || b->dst >= a->nd)
        return spi_fail(SP_EINTERNAL, "KV transfer block from chip %d to chip %d of groups of %d and %d", b->src,
                        b->dst, a->np, a->nd);
    int64_t *p = &a->pair[(int64_t)b->src * a->nd + b->dst];
    *p = spi_ck_add(&a->ck, "KV transfer bytes", *p, b->bytes);
    if (b->tokens) a->tok = spi_ck_add(&a->ck, "KV transfer bytes", a->tok, b->bytes);
    else a->kv = spi_ck_add(&a->ck, "KV transfer bytes", a->kv, b->bytes);
    return a->ck.overflow ? spi_fail(SP_EINVAL, "%s do not fit in 64 bits", a->ck.what) : SP_OK;
}

static int longest_side(const sp_layout *g, const sp_hw *hw, int *side)
{
    sp_torus_map map;
    if (!sp_layout_torus_map(g, hw, &map)) return 0;
    int a = map.slice[0];
    for (int d = 1; d < 3; d++)
        if (map.slice[d] > a) a = map.slice[d];
    *side = a;
    return 1;
}

/* The per-message terms of each tier: [0] near (same node; torus links),
 * [1] far (between nodes).  pf NULL: the least a prefill group can give
 * (the torus hop term of a one-chip slice). */
static sp_status tiers(const sp_hw *hw, const sp_layout *pf, const sp_layout *dc, double alpha[2], double beta[2])
{
    double eff = hw->net_bw_eff > 0 ? hw->net_bw_eff : 1.0;
    if (hw->topo == SP_TOPO_TORUS) {
        int ap = 1, ad;
        if ((pf && !longest_side(pf, hw, &ap)) || !longest_side(dc, hw, &ad))
            return spi_fail(SP_EINVAL, "a group fits no torus slice %s offers", hw->name);
        alpha[0] = alpha[1] = hw->hop_latency * (double)((ap + ad + 1) / 2);
        beta[0] = beta[1] = 1.0 / (hw->link_bw * eff);
    } else {
        alpha[0] = hw->intra_latency;
        beta[0] = 1.0 / (hw->intra_bw * eff);
        alpha[1] = hw->inter_latency;
        beta[1] = 1.0 / (hw->inter_bw * eff);
    }
    return SP_OK;
}

/* SP_XFER_APART on a torus: refused (SP_ENOTSUP), by name */
static sp_status apart_refused(const sp_hw *hw)
{
    return spi_fail(SP_ENOTSUP, "%s: a KV transfer between separate torus slices crosses the data-centre network, "
                                "which the hardware profile does not describe (groups of one job: SP_XFER_ONE_JOB)",
                    hw->name);
}

sp_status sp_cost_kv_xfer_apart(const sp_hw *hw, double bytes, double *out)
{
    if (!hw || !out) return spi_fail(SP_EINVAL, "sp_cost_kv_xfer_apart: NULL argument");
    if (!(bytes >= 0)) return spi_fail(SP_EINVAL, "sp_cost_kv_xfer_apart: %g bytes", bytes);
    if (hw->topo == SP_TOPO_TORUS) return apart_refused(hw);
    double alpha[2], beta[2];
    SP_CHECK(tiers(hw, NULL, NULL, alpha, beta));   /* a cluster's tiers need no layouts */
    *out = spi_cost_kv_xfer_seconds(hw, 1, alpha[1] + bytes * beta[1]);
    if (!isfinite(*out)) return spi_fail(SP_EINVAL, "%s: a KV transfer over a link of no bandwidth", hw->name);
    return SP_OK;
}

/* the busiest receiver's bytes */
static sp_status add_recv(void *ctx, int c, int d, int64_t bytes, double t)
{
    (void)c;
    (void)t;
    int64_t *r = ctx;   /* [0]: the decode group's chips; [1 + d]: chip d's bytes */
    if (d >= r[0]) return spi_fail(SP_EINTERNAL, "KV transfer to chip %d of a group of %lld", d, (long long)r[0]);
    r[1 + d] += bytes;
    return SP_OK;
}

sp_status sp_cost_kv_xfer_bound(const sp_model *m, const sp_hw *hw, const sp_layout *g, int64_t batch, int64_t prompt,
                                double *out)
{
    if (!m || !hw || !g || !out) return spi_fail(SP_EINVAL, "sp_cost_kv_xfer_bound: NULL argument");
    if (sp_layout_disaggregated(g)) return spi_fail(SP_EINVAL, "sp_cost_kv_xfer_bound: a group's layout is one group");
    double alpha[2], beta[2];
    SP_CHECK(tiers(hw, NULL, g, alpha, beta));
    /* what each decode chip receives does not depend on the sender: walk it from a
     * prefill group equal to g (groups=separate) */
    sp_layout l;
    SP_CHECK(sp_layout_disaggregate(g, g, &l));
    int64_t nd = sp_layout_chips(g);
    if (nd < 1 || nd > XFER_MAX_PAIRS) return spi_fail(SP_ENOTSUP, "KV transfer into a group of %lld chips", (long long)nd);
    int64_t *r = calloc((size_t)nd + 1, sizeof *r);
    if (!r) return spi_fail(SP_ENOMEM, "KV transfer: %lld chips", (long long)nd);
    r[0] = nd;
    sp_status st = spi_cost_kv_xfer_msgs(m, hw, &l, batch, prompt, SP_XFER_ONE_JOB, add_recv, r, NULL, NULL);
    int64_t most = 0;
    for (int64_t d = 0; d < nd; d++)
        if (r[1 + d] > most) most = r[1 + d];
    free(r);
    SP_CHECK(st);
    double a = alpha[0] < alpha[1] ? alpha[0] : alpha[1], b = beta[0] < beta[1] ? beta[0] : beta[1];
    *out = most > 0 ? spi_cost_kv_xfer_seconds(hw, 1, a + (double)most * b) : 0;
    return SP_OK;
}

sp_status spi_cost_kv_xfer_msgs(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch, int64_t prompt,
                                sp_xfer_place where, spi_xfer_msg_fn fn, void *ctx, int64_t *kv_bytes,
                                int64_t *token_bytes)
{
    if (!m || !hw || !l || !fn) return spi_fail(SP_EINVAL, "sp_cost_kv_xfer: NULL argument");
    if (!sp_layout_disaggregated(l))
        return spi_fail(SP_EINVAL, "sp_cost_kv_xfer: the layout's phases share their chips: nothing moves between groups");
    if (where != SP_XFER_ONE_JOB && where != SP_XFER_APART)
        return spi_fail(SP_EINVAL, "sp_cost_kv_xfer: unknown placement %d", (int)where);
    if (hw->topo == SP_TOPO_TORUS && where == SP_XFER_APART) return apart_refused(hw);
    sp_layout g[SP_PHASE_COUNT];
    int64_t n[SP_PHASE_COUNT];
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        sp_layout_phase_group(l, (sp_phase)p, &g[p]);
        n[p] = sp_layout_chips(&g[p]);
    }
    if (n[0] < 1 || n[1] < 1 || n[0] > XFER_MAX_PAIRS / n[1])
        return spi_fail(SP_ENOTSUP, "KV transfer between groups of %lld and %lld chips: at most %d chip pairs are priced",
                        (long long)n[0], (long long)n[1], XFER_MAX_PAIRS);
    double alpha[2], beta[2];
    SP_CHECK(tiers(hw, &g[0], &g[1], alpha, beta));
    acc a = {(int)n[0], (int)n[1], calloc((size_t)(n[0] * n[1]), sizeof(int64_t)), 0, 0, SPI_CKD_INIT};
    if (!a.pair) return spi_fail(SP_ENOMEM, "KV transfer: %lld chip pairs", (long long)(n[0] * n[1]));
    sp_status st = sp_lower_kv_xfer(m, l, batch, prompt, add_block, &a);
    int G = hw->topo == SP_TOPO_CLUSTER && hw->chips_per_node > 0 ? hw->chips_per_node : 0;
    for (int64_t c = 0; c < n[0] && !st; c++)
        for (int64_t d = 0; d < n[1] && !st; d++) {
            int64_t b = a.pair[c * n[1] + d];
            if (!b) continue;
            /* the decode group starts right after the prefill group (ONE_JOB) */
            int far = where == SP_XFER_APART || (G && c / G != (n[0] + d) / G);
            st = fn(ctx, (int)c, (int)d, b, alpha[far] + (double)b * beta[far]);
        }
    if (kv_bytes) *kv_bytes = a.kv;
    if (token_bytes) *token_bytes = a.tok;
    free(a.pair);
    return st;
}

/* per-chip sums of the messages' times and bytes */
typedef struct sums {
    int np, nd;
    double *send_s, *recv_s;
    int64_t *sent, *recv, messages;
} sums;

static sp_status add_msg(void *ctx, int c, int d, int64_t b, double t)
{
    sums *u = ctx;
    if (!u->send_s) {
        u->send_s = calloc((size_t)(u->np + u->nd), sizeof(double));
        u->sent = calloc((size_t)(u->np + u->nd), sizeof(int64_t));
        if (!u->send_s || !u->sent) return spi_fail(SP_ENOMEM, "KV transfer: per-chip sums");
        u->recv_s = u->send_s + u->np;
        u->recv = u->sent + u->np;
    }
    u->send_s[c] += t;
    u->recv_s[d] += t;
    u->sent[c] += b;   /* each at most the total, which did not overflow */
    u->recv[d] += b;
    u->messages++;
    return SP_OK;
}

double spi_cost_kv_xfer_seconds(const sp_hw *hw, int64_t messages, double busiest_s)
{
    return messages ? hw->coll_latency + busiest_s : 0;
}

sp_status sp_cost_kv_xfer(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch, int64_t prompt,
                          sp_xfer_place where, sp_kv_xfer_cost *out)
{
    if (!m || !hw || !l || !out) return spi_fail(SP_EINVAL, "sp_cost_kv_xfer: NULL argument");
    memset(out, 0, sizeof *out);
    sums u = {0};
    if (sp_layout_disaggregated(l)) {
        sp_layout g;
        sp_layout_phase_group(l, SP_PHASE_PREFILL, &g);
        u.np = (int)sp_layout_chips(&g);
        sp_layout_phase_group(l, SP_PHASE_DECODE, &g);
        u.nd = (int)sp_layout_chips(&g);
    }
    sp_status st = spi_cost_kv_xfer_msgs(m, hw, l, batch, prompt, where, add_msg, &u, &out->kv_bytes, &out->token_bytes);
    if (!st) {
        double worst = 0;
        for (int64_t i = 0; u.send_s && i < u.np + u.nd; i++)
            if (u.send_s[i] > worst) worst = u.send_s[i];
        for (int64_t c = 0; u.sent && c < u.np; c++)
            if (u.sent[c] > out->max_sent) out->max_sent = u.sent[c];
        for (int64_t d = 0; u.recv && d < u.nd; d++)
            if (u.recv[d] > out->max_recv) out->max_recv = u.recv[d];
        out->messages = u.messages;
        spi_ckd ck = SPI_CKD_INIT;
        out->bytes = spi_ck_add(&ck, "KV transfer bytes", out->kv_bytes, out->token_bytes);
        if (ck.overflow) st = spi_fail(SP_EINVAL, "%s do not fit in 64 bits", ck.what);
        out->seconds = spi_cost_kv_xfer_seconds(hw, out->messages, worst);
        if (!isfinite(out->seconds)) st = spi_fail(SP_EINVAL, "%s: a KV transfer over a link of no bandwidth", hw->name);
    }
    free(u.send_s);
    free(u.sent);
    return st;
}
