/* cost_xfer.c: prices the KV transfer between separate prefill and decode
 * chip groups (sp_cost.h, sp_cost_kv_xfer). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "spi_ckd.h"
#include "sp_cost.h"

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

sp_status sp_cost_kv_xfer(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch, int64_t prompt,
                          sp_xfer_place where, sp_kv_xfer_cost *out)
{
    if (!m || !hw || !l || !out) return spi_fail(SP_EINVAL, "sp_cost_kv_xfer: NULL argument");
    memset(out, 0, sizeof *out);
    if (!sp_layout_disaggregated(l))
        return spi_fail(SP_EINVAL, "sp_cost_kv_xfer: the layout's phases share their chips: nothing moves between groups");
    if (where != SP_XFER_ONE_JOB && where != SP_XFER_APART)
        return spi_fail(SP_EINVAL, "sp_cost_kv_xfer: unknown placement %d", (int)where);
    if (hw->topo == SP_TOPO_TORUS && where == SP_XFER_APART)
        return spi_fail(SP_ENOTSUP, "%s: a KV transfer between separate torus slices crosses the data-centre network, "
                                    "which the hardware profile does not describe (groups of one job: SP_XFER_ONE_JOB)",
                        hw->name);
    sp_layout g[SP_PHASE_COUNT];
    int64_t n[SP_PHASE_COUNT];
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        sp_layout_phase_group(l, (sp_phase)p, &g[p]);
        n[p] = sp_layout_chips(&g[p]);
    }
    if (n[0] < 1 || n[1] < 1 || n[0] > XFER_MAX_PAIRS / n[1])
        return spi_fail(SP_ENOTSUP, "KV transfer between groups of %lld and %lld chips: at most %d chip pairs are priced",
                        (long long)n[0], (long long)n[1], XFER_MAX_PAIRS);
    /* the per-message terms of each tier */
    double alpha[2], beta[2];   /* [0] near (same node; torus links), [1] far (between nodes) */
    double eff = hw->net_bw_eff > 0 ? hw->net_bw_eff : 1.0;
    if (hw->topo == SP_TOPO_TORUS) {
        int ap, ad;
        if (!longest_side(&g[0], hw, &ap) || !longest_side(&g[1], hw, &ad))
            return spi_fail(SP_EINVAL, "a group fits no torus slice %s offers", hw->name);
        alpha[0] = alpha[1] = hw->hop_latency * (double)((ap + ad + 1) / 2);
        beta[0] = beta[1] = 1.0 / (hw->link_bw * eff);
    } else {
        alpha[0] = hw->intra_latency;
        beta[0] = 1.0 / (hw->intra_bw * eff);
        alpha[1] = hw->inter_latency;
        beta[1] = 1.0 / (hw->inter_bw * eff);
    }
    acc a = {(int)n[0], (int)n[1], calloc((size_t)(n[0] * n[1]), sizeof(int64_t)), 0, 0, SPI_CKD_INIT};
    if (!a.pair) return spi_fail(SP_ENOMEM, "KV transfer: %lld chip pairs", (long long)(n[0] * n[1]));
    sp_status st = sp_lower_kv_xfer(m, l, batch, prompt, add_block, &a);
    double *send_s = st ? NULL : calloc((size_t)(n[0] + n[1]), sizeof(double)), *recv_s = send_s ? send_s + n[0] : NULL;
    int64_t *sent = send_s ? calloc((size_t)(n[0] + n[1]), sizeof(int64_t)) : NULL, *recv = sent ? sent + n[0] : NULL;
    if (!st && !sent) st = spi_fail(SP_ENOMEM, "KV transfer: per-chip sums");
    int G = hw->topo == SP_TOPO_CLUSTER && hw->chips_per_node > 0 ? hw->chips_per_node : 0;
    for (int64_t c = 0; c < n[0] && !st; c++)
        for (int64_t d = 0; d < n[1]; d++) {
            int64_t b = a.pair[c * n[1] + d];
            if (!b) continue;
            /* the decode group starts right after the prefill group (ONE_JOB) */
            int far = where == SP_XFER_APART || (G && c / G != (n[0] + d) / G);
            double t = alpha[far] + (double)b * beta[far];
            send_s[c] += t;
            recv_s[d] += t;
            sent[c] += b;   /* each at most the total, which did not overflow */
            recv[d] += b;
            out->messages++;
        }
    if (!st) {
        double worst = 0;
        for (int64_t i = 0; i < n[0] + n[1]; i++)
            if (send_s[i] > worst) worst = send_s[i];
        for (int64_t c = 0; c < n[0]; c++)
            if (sent[c] > out->max_sent) out->max_sent = sent[c];
        for (int64_t d = 0; d < n[1]; d++)
            if (recv[d] > out->max_recv) out->max_recv = recv[d];
        out->kv_bytes = a.kv;
        out->token_bytes = a.tok;
        out->bytes = spi_ck_add(&a.ck, "KV transfer bytes", a.kv, a.tok);
        if (a.ck.overflow) st = spi_fail(SP_EINVAL, "%s do not fit in 64 bits", a.ck.what);
        out->seconds = out->messages ? hw->coll_latency + worst : 0;
        if (!isfinite(out->seconds)) st = spi_fail(SP_EINVAL, "%s: a KV transfer over a link of no bandwidth", hw->name);
    }
    free(a.pair);
    free(send_s);
    free(sent);
    return st;
}
