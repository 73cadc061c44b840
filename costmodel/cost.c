/* cost.c: prices lowered programs on a hardware description (rules in sp_cost.h). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "costmodel/sp_cost.h"
#include "costmodel/spi_cost.h"
#include "spi_lower.h"

void sp_cost_opts_init(sp_cost_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->act_dtype = SP_DT_BF16;
}

static const char *const param_names[SP_CP_COUNT] = {
    "dispatch_s", "s_per_flop", "s_per_hbm_byte", "alpha_near_s", "beta_near_s_per_byte", "alpha_far_s",
    "beta_far_s_per_byte", "collective_launch_s"};
_Static_assert(SPI_ARRAY_LEN(param_names) == SP_CP_COUNT, "one name per sp_cost_param");
const char *sp_cost_param_name(sp_cost_param p) { return (unsigned)p < SP_CP_COUNT ? param_names[p] : "?"; }

void sp_cost_params(const sp_hw *hw, sp_dtype weights, double out[SP_CP_COUNT])
{
    out[SP_CP_DISPATCH] = hw->dispatch_s;
    out[SP_CP_FLOP] = 1.0 / sp_hw_compute_peak(hw, weights);
    out[SP_CP_HBM_BYTE] = 1.0 / hw->hbm_bw;
    int torus = hw->topo == SP_TOPO_TORUS;
    out[SP_CP_ALPHA_NEAR] = torus ? hw->hop_latency : hw->intra_latency;
    /* achieved network bandwidth: the datasheet's times one efficiency for every tier */
    out[SP_CP_BETA_NEAR] = 1.0 / ((torus ? hw->link_bw : hw->intra_bw) * hw->net_bw_eff);
    out[SP_CP_ALPHA_FAR] = torus ? 0.0 : hw->inter_latency;
    out[SP_CP_BETA_FAR] = torus ? 0.0 : 1.0 / (hw->inter_bw * hw->net_bw_eff);
    out[SP_CP_COLL_LAUNCH] = hw->coll_latency;
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

/* ---- collectives: alpha-beta per algorithm and tier (sp_cost.h) ---- */
enum { NEAR = 0, FAR = 1 };

/* What a collective's price takes from its group and the placement alone
 * (a function of the group's axes on one layout): torus, the algorithm's
 * steps, the link directions and the longest ring segment; cluster, the
 * chips in a node and the nodes.  Programs price many collectives over few
 * groups, so spi_cost_price_program resolves each group once. */
typedef struct coll_group {
    int steps, dirs, fmax;   /* torus */
    int kin, kout;           /* cluster */
    int one_core;            /* spi_group_one_core: no wake-up */
} coll_group;
static void coll_group_of(const sp_hw *hw, const sp_layout *l, const sp_torus_map *map, unsigned mask, coll_group *g);
static void coll_terms_group(const sp_hw *hw, const sp_layout *l, const sp_torus_map *map, const sp_coll *c,
                             const coll_group *g, sp_coll_terms *out);

static void coll_terms(const sp_hw *hw, const sp_layout *l, const sp_torus_map *map, const sp_coll *c,
                       unsigned mask, sp_coll_terms *out)
{
    coll_group g;
    coll_group_of(hw, l, map, mask, &g);
    coll_terms_group(hw, l, map, c, &g, out);
}

void sp_cost_coll_terms(const sp_hw *hw, const sp_layout *l, const sp_coll *c, sp_coll_terms *out)
{
    sp_torus_map map;
    int have = hw->topo == SP_TOPO_TORUS && sp_layout_torus_map(l, hw, &map);
    coll_terms(hw, l, have ? &map : NULL, c, axes_mask(c->row_axes) | axes_mask(c->col_axes), out);
}

/* map: the layout's torus map (NULL: none, or not a torus); mask: the
 * group's axes (a lowered step carries them as sp_coll.mask) */
static void coll_group_of(const sp_hw *hw, const sp_layout *l, const sp_torus_map *map, unsigned mask, coll_group *g)
{
    memset(g, 0, sizeof *g);
    g->one_core = spi_group_one_core(hw, l, mask);
    if (hw->topo == SP_TOPO_TORUS) {
        if (!map) return;
        int steps = 0, dirs = 0, fmax = 1;
        for (int d = 0; d < 3; d++) {
            int f = 1;
            for (int a = 0; a < SP_AXIS_COUNT; a++)
                if (mask & (1u << a)) f *= map->factor[a][d];
            if (f > 1) {
                steps += f - 1;
                dirs += f == map->slice[d] ? 2 : 1;
                if (f > fmax) fmax = f;
            }
        }
        g->steps = steps;
        g->dirs = dirs;
        g->fmax = fmax;
        return;
    }
    group_tiers_mask(hw, l, mask, &g->kin, &g->kout);
}

static void coll_terms_group(const sp_hw *hw, const sp_layout *l, const sp_torus_map *map, const sp_coll *c,
                             const coll_group *g, sp_coll_terms *out)
{
    memset(out, 0, sizeof *out);
    if (c->kind == SP_COLL_SENDRECV) {
        double bytes = (double)(c->bytes_sent > c->bytes_recv ? c->bytes_sent : c->bytes_recv);
        /* stages are the outermost axis: a hand-off crosses nodes when a stage fills one */
        int per_stage = l->replicas * l->mesh[0] * l->mesh[1] * l->mesh[2];
        int tier = hw->topo == SP_TOPO_CLUSTER && per_stage >= hw->chips_per_node ? FAR : NEAR, msgs = 1;
        if (sp_layout_hetero(l)) {
            /* stages of their own mesh (l: the stage's view): once the pipeline exceeds a node every
             * stage starts on a node boundary (sp_layout_check), so a hand-off crosses nodes exactly
             * then; one message to or from each peer (coll.group − 1 of them, sp_lower_stage_xfer) */
            tier = hw->topo == SP_TOPO_CLUSTER && hw->chips_per_node > 0 && sp_layout_chips(l) > hw->chips_per_node
                       ? FAR : NEAR;
            msgs = c->group > 2 ? c->group - 1 : 1;
        }
        out->steps[tier] = msgs;
        out->bytes[tier] = bytes;
        out->launch = 1;
        return;
    }
    int K = c->group;
    if (K <= 1) return;
    double bytes = (double)c->bytes_recv;
    if (hw->topo == SP_TOPO_TORUS) {
        if (!map) {
            out->bytes[NEAR] = HUGE_VAL;   /* sp_cost_eval refuses such a layout first */
            return;
        }
        int steps = g->steps, dirs = g->dirs, fmax = g->fmax;
        if (!dirs) return;
        double b = bytes / dirs;
        if (c->kind == SP_COLL_ALLTOALL && fmax > 4) b *= fmax / 4.0;   /* mean ring distance */
        if (c->kind == SP_COLL_ALLREDUCE) steps *= 2;
        out->steps[NEAR] = steps;
        out->bytes[NEAR] = b;
        out->launch = 1;
        return;
    }
    int kin = g->kin, kout = g->kout;
    out->launch = 1;
    switch (c->kind) {
    case SP_COLL_ALLGATHER:
    case SP_COLL_REDUCESCATTER:
    case SP_COLL_ALLREDUCE: {
        int rounds = c->kind == SP_COLL_ALLREDUCE ? 2 : 1;
        double chunk = bytes / rounds / (K - 1);   /* c: one chip's block */
        out->steps[FAR] = rounds * (kout - 1);
        out->steps[NEAR] = rounds * (kin - 1);
        out->bytes[FAR] = rounds * (kout - 1) * chunk;
        out->bytes[NEAR] = rounds * (double)kout * (kin - 1) * chunk;
        break;
    }
    case SP_COLL_ALLTOALL: {
        double chunk = bytes / (K - 1);
        out->steps[NEAR] = kin - 1;
        out->steps[FAR] = K - kin;
        out->bytes[NEAR] = (kin - 1) * chunk;
        out->bytes[FAR] = (K - kin) * chunk;
        break;
    }
    default: break;
    }
}

static double coll_terms_time(const sp_coll_terms *t, const double par[SP_CP_COUNT])
{
    return t->launch * par[SP_CP_COLL_LAUNCH] + t->steps[NEAR] * par[SP_CP_ALPHA_NEAR] +
           t->bytes[NEAR] * par[SP_CP_BETA_NEAR] + t->steps[FAR] * par[SP_CP_ALPHA_FAR] + t->bytes[FAR] * par[SP_CP_BETA_FAR];
}

double sp_cost_coll_time(const sp_hw *hw, const sp_layout *l, const sp_coll *c)
{
    sp_coll_terms t;
    double par[SP_CP_COUNT];
    sp_cost_coll_terms(hw, l, c, &t);
    sp_cost_params(hw, l->weights, par);
    unsigned mask = axes_mask(c->row_axes) | axes_mask(c->col_axes);
    return spi_comm_share(hw, l) * coll_terms_time(&t, par) +
           (c->kind != SP_COLL_SENDRECV && spi_group_one_core(hw, l, mask) ? 0.0 : t.launch * spi_idle_wake(hw, l));
}

int spi_group_one_core(const sp_hw *hw, const sp_layout *l, unsigned mask)
{
    int C = hw->shared_cores;
    if (!mask) return 0;         /* no axes: a send/recv between stages, whose peers the mask does not say */
    if (C <= 1) return C == 1;   /* one core: every group is on it */
    sp_mesh me;
    sp_layout_mesh(l, &me);
    int n = sp_mesh_size(&me), co[SP_AXIS_COUNT];
    /* chip 0's group: the chips whose coordinates off the group's axes are 0 */
    for (int r = 0; r < n; r++) {
        sp_mesh_coords(&me, r, co);
        int in = 1;
        for (int a = 0; a < SP_AXIS_COUNT && in; a++)
            if (!(mask & (1u << a)) && co[a]) in = 0;
        if (in && r % C) return 0;
    }
    return 1;
}

/* ---- efficiencies, memoised ----
 * Programs of neighbouring layouts repeat the same local shapes and byte
 * counts, and each curve costs logs.  The memo belongs to one profile's
 * curves; eff_bind (once per program priced, or once per evaluation
 * through the phase memo: memo_bind) empties it when they differ (compared
 * by value, so a profile edited in place is noticed). */
enum { EFF_SLOTS = 512 };
typedef struct eff_key { int64_t a, b, c; int d; } eff_key;   /* matmul (m, n, k, weight dtype; SP_DT_COUNT: logits); attention (flops, -1, d_head);
                                                                 memory (bytes, -2, -2); weight stream (bytes, -3, -3),
                                                                 of a chip alone (bytes, -4, -3) */
typedef struct eff_slot { eff_key k; double eff; } eff_slot;
/* What the curves read of a profile (sp_hw_matmul_shape_eff,
 * sp_hw_memory_eff, sp_hw_attention_eff, the weight-stream curve): the
 * fields from eff_points to attn_value, which sp_hw keeps together, and
 * hbm_bw_eff.  Compared as one block of bytes (padding included: a
 * difference there only empties the memo once more). */
#define EFF_FIRST offsetof(sp_hw, eff_points)
#define EFF_END (offsetof(sp_hw, attn_value) + sizeof ((sp_hw *)0)->attn_value)
_Static_assert(offsetof(sp_hw, eff_points) < offsetof(sp_hw, eff_flops) && offsetof(sp_hw, eff_flops) < offsetof(sp_hw, eff_value) &&
               offsetof(sp_hw, eff_value) < offsetof(sp_hw, matmul_tile) && offsetof(sp_hw, matmul_tile) < offsetof(sp_hw, rows_points) &&
               offsetof(sp_hw, rows_points) < offsetof(sp_hw, rows_m) && offsetof(sp_hw, rows_m) < offsetof(sp_hw, rows_value) &&
               offsetof(sp_hw, rows_value) < offsetof(sp_hw, rows_sizes) && offsetof(sp_hw, rows_sizes) < offsetof(sp_hw, rows_w) &&
               offsetof(sp_hw, rows_w) < offsetof(sp_hw, rows_w_points) && offsetof(sp_hw, rows_w_points) < offsetof(sp_hw, rows_w_m) &&
               offsetof(sp_hw, rows_w_m) < offsetof(sp_hw, rows_w_value) && offsetof(sp_hw, rows_w_value) < offsetof(sp_hw, logits_sizes) &&
               offsetof(sp_hw, logits_sizes) < offsetof(sp_hw, logits_w) && offsetof(sp_hw, logits_w) < offsetof(sp_hw, logits_w_points) &&
               offsetof(sp_hw, logits_w_points) < offsetof(sp_hw, logits_w_m) && offsetof(sp_hw, logits_w_m) < offsetof(sp_hw, logits_w_value) &&
               offsetof(sp_hw, logits_w_value) < offsetof(sp_hw, mem_points) &&
               offsetof(sp_hw, mem_points) < offsetof(sp_hw, mem_bytes) && offsetof(sp_hw, mem_bytes) < offsetof(sp_hw, mem_value) &&
               offsetof(sp_hw, mem_value) < offsetof(sp_hw, ws_points) && offsetof(sp_hw, ws_points) < offsetof(sp_hw, ws_bytes) &&
               offsetof(sp_hw, ws_bytes) < offsetof(sp_hw, ws_value) && offsetof(sp_hw, ws_value) < offsetof(sp_hw, wsa_points) &&
               offsetof(sp_hw, wsa_points) < offsetof(sp_hw, wsa_bytes) && offsetof(sp_hw, wsa_bytes) < offsetof(sp_hw, wsa_value) &&
               offsetof(sp_hw, wsa_value) < offsetof(sp_hw, attn_points) &&
               offsetof(sp_hw, attn_points) < offsetof(sp_hw, attn_dhead) && offsetof(sp_hw, attn_dhead) < offsetof(sp_hw, attn_value),
               "the efficiency curves lie between eff_points and attn_value");
typedef struct eff_memo {
    int bound;
    int of_memo;        /* the curves bound are those of the phase memo's profile (memo_bind) */
    unsigned char curves[EFF_END - EFF_FIRST];
    double bw_eff;
    eff_slot slot[EFF_SLOTS];
} eff_memo;

static void eff_bind(eff_memo *e, const sp_hw *hw)
{
    const unsigned char *c = (const unsigned char *)hw + EFF_FIRST;
    if (!e->bound || memcmp(e->curves, c, sizeof e->curves) || e->bw_eff != hw->hbm_bw_eff) {
        memcpy(e->curves, c, sizeof e->curves);
        e->bw_eff = hw->hbm_bw_eff;
        e->bound = 1;
        e->of_memo = 0;
        memset(e->slot, 0xff, sizeof e->slot);   /* keys of -1: never a real key */
    }
}

static __attribute__((noinline)) double eff_compute(const sp_hw *hw, int64_t a, int64_t b, int64_t c, int d)
{
    return b == -4 ? sp_hw_curve(hw->wsa_points, hw->wsa_bytes, hw->wsa_value, (double)a, 1.0)
         : b == -3 ? sp_hw_curve(hw->ws_points, hw->ws_bytes, hw->ws_value, (double)a, 1.0)
         : b == -2 ? sp_hw_memory_eff(hw, (double)a)
         : b == -1 ? sp_hw_attention_eff(hw, (double)a, c)
         : d == SP_DT_COUNT ? sp_hw_logits_shape_eff(hw, a, b, c) : sp_hw_matmul_shape_eff(hw, (sp_dtype)d, a, b, c);
}

/* inline: two a compute step (its hits are a hash and a compare); e NULL:
 * no memo (pricing without a cache: sp_cost_kinds_eval, the simulator) */
static inline double eff_lookup(eff_memo *e, const sp_hw *hw, int64_t a, int64_t b, int64_t c, int d)
{
    if (!e) return eff_compute(hw, a, b, c, d);
    uint64_t h = ((uint64_t)a * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)b * 0xC2B2AE3D27D4EB4Full) ^
                 ((uint64_t)c * 0x165667B19E3779F9ull) ^ ((uint64_t)d * 0x27D4EB2F165667C5ull);
    eff_slot *x = &e->slot[(unsigned)(h >> 55) & (EFF_SLOTS - 1)];
    if (x->k.a != a || x->k.b != b || x->k.c != c || x->k.d != d) {
        x->k = (eff_key){a, b, c, d};
        x->eff = eff_compute(hw, a, b, c, d);
    }
    return x->eff;
}

/* Phase prices are memoised in the cache.  A search prices each phase's
 * layout with many layouts of the other phase, and a phase's program
 * depends on the other phase only through the KV cache (sp_lower_key):
 * every evaluation still runs both phases' checks (sp_lower_check_key),
 * then lowers and prices only the phases whose key it has not seen.  The
 * memo belongs to one model and one hardware profile, compared by value,
 * and is emptied when either changes; a key hashes to a pair of slots,
 * which hold the last two keys hashed to it (the older replaced).
 * opts->fresh bypasses it.  Size: 1024 slots of ~1.8 KB (key 928 B, value
 * ~850 B), ~1.8 MB a cache.  Since the planner prunes by the prefill's and
 * the decode's bounds it lowers ~16k programs for palm-540b on 64 TPU v4,
 * not ~50k: with 1024 slots 458.6M instructions against 455.7M with 4096
 * (+0.6 %), but 16 % less CPU time and wall (2026-11-24, load < 1: CPU
 * 52-57 ms against 61-64, wall 40-46 ms against 47-53), a quarter of the
 * memory to touch; 256 h100 with stage meshes 5 % less, bench_cost the
 * same.  History: a plan of palm-540b on 64 TPU v4 lowered ~84k
 * distinct phase programs (stage kinds, KV handoffs, chunked passes): with
 * 256 slots it lowered 94.3k (evictions), with 1024 86.2k, with 4096 84.2k
 * (history: one slot a key, and keys that told more programs apart).  With
 * one thread, before the bounds, it lowered 50.3k of 47.9k distinct keys, where one slot a
 * key lowered 51.4k: the rest are decode programs the decode bound lowered,
 * evicted before the layout's full pricing (8192 slots keep most, 1.7 % fewer
 * instructions, but the plan took longer on one thread: ~7 MB more to touch a
 * worker; doc/planner.md, "Against round 1").  The slots are not zeroed when
 * a cache is made (a slot is read only once memo.used says it was written): a
 * caller without a cache makes one per evaluation and pays for the slots it
 * touches, not for all of them (zeroed, 4096 slots cost bench_cost 4 % over
 * 1024). */
typedef struct phase_key {
    sp_lower_key lk;
    int64_t first_ctx;          /* decode: context of the first generated token (prompt + 1) */
} phase_key;
typedef struct phase_val {
    sp_phase_cost c0, c1;       /* prefill: c0; decode: first and last step */
    int64_t buf_bytes[SP_BUF_COUNT];
    int64_t scratch_bytes[SP_SCR_COUNT];
    sp_mem_sizes mem;           /* sp_lower_mem_stage: the stage's weights and KV, this phase's workspace */
    int nterms;                 /* prefill passes to price and their weights (sp_lower_pass_terms) */
    int64_t left[3], num[3];
} phase_val;
enum { MEMO_SLOTS = 1024 };
/* kinds of stage one evaluation prices at most (eval_one: at most four for
 * the even split, one per stage for an uneven one) */
enum { SPI_STAGE_KINDS = SP_LAYOUT_MAX_STAGES + 4 };


/* The terms of one compute step (sp_cost.h) at one context. */
typedef struct step_terms { double c, m; int64_t flops; } step_terms;

/* One step's price at both contexts before its runs weigh it
 * (step_price_of), what step_add adds to the sums × runs: a compute step's
 * terms; a collective's time and bytes (max of sent and received), the same
 * at both contexts; a host copy's time and bytes at each. */
typedef struct step_price {
    step_terms x[2];
    double t[2];
    int64_t b[2];
} step_price;

/* A program's layer part as priced last, for the programs whose layer part
 * is the same (price_phase: the stages of one evaluation whose layers the
 * lowering kept, spi_lower_finish_keep_layer): each step's run and price
 * before its runs weigh it.  A layer step's price reads the step, the
 * program's layout (its view: peak, shares, torus map, groups), the
 * contexts, the profile and the weight stream (wstream, the program's
 * whole), all compared before the steps are taken; the sums are added
 * step by step as when priced (step_add), so they agree to the bit. */
typedef struct layer_px {
    unsigned gen;              /* sp_cost_cache.layer_gen when written (0: never) */
    int n, two;
    const sp_hw *hw;
    int64_t ctx[2], wstream;
    sp_layout layout;
    spi_step_run run[SP_PROG_MAX_STEPS];
    step_price sp[SP_PROG_MAX_STEPS];
    /* the layer part's shortcut ops (price_steps, of a program with an
     * overlapping step): a function of its runs and of the buffer sets the
     * whole program's overlapping steps make (touched, ov_buf, ov_read), so
     * a program whose layer part is taken from here and whose sets are the
     * same takes them too, with the slots they add to the wait sets and the
     * live set */
    int ops_ok;                /* the fields below hold a pricing of run[] */
    int n_ops;
    uint64_t touched, ov_buf, ov_read;
    uint64_t need_buf, need_read, live;
    struct spi_op op[SP_PROG_MAX_STEPS + 1];
} layer_px;

/* ---- the pricing cache (sp_cost.h) ---- */
struct sp_cost_cache {
    eff_memo eff;                  /* efficiencies, of one profile's curves */
    struct { int ok; sp_model m; sp_workload w; } checked;   /* the last (model, workload) whose check passed */
    struct {                       /* phase prices, of one model and profile (memo_bind) */
        int bound;
        sp_model m;
        sp_hw hw;
        int64_t params_ctx, params_active;   /* sp_model_derive at params_ctx (0: none yet) */
        unsigned char used[MEMO_SLOTS];
    } memo;
    /* The programs being priced, one per phase (large: kept out of the
     * stack), and their lowerings between sp_lower_begin and finish.  A
     * pipeline's stages share their layer part (sp_lower.h): sp_cost_eval
     * lowers each phase's layer once per evaluation and shape and keeps it
     * in prog[phase] for the other stages (spi_lower_finish_keep_layer). */
    sp_program prog[SP_PHASE_COUNT];
    sp_lower_job *job[SP_PHASE_COUNT];
    int eff_held;                  /* set while phase_prices prices a program: eff is bound to its
                                      profile already (memo_bind), spi_cost_price_program skips eff_bind */
    phase_val fresh;               /* opts->fresh: the phase just priced */
    unsigned layer_gen;            /* layer_px generations written (0: none) */
    layer_px px[SP_PHASE_COUNT];   /* each phase's layer part as priced last (price_phase) */
    phase_val dc_kinds[SPI_STAGE_KINDS];   /* eval_chunked: the layout's decode prices per kind of stage */
    spi_prog_run pr;               /* one program's steps as priced */
    spi_step_coefs coef;           /* sp_cost_coefs_eval's, per step */
    double vec[SPI_SLOTS][SP_CP_COUNT];   /* a full schedule's coefficient vectors */
    /* the phase memo's slots, last: left unzeroed by sp_cost_cache_create
     * (slot i is read only while memo.used[i]) */
    phase_key memo_key[MEMO_SLOTS];
    phase_val memo_val[MEMO_SLOTS];
};

sp_status sp_cost_cache_create(sp_cost_cache **out)
{
    if (!out) return spi_fail(SP_EINVAL, "sp_cost_cache_create: NULL argument");
    /* zeroed up to the memo's slots: nothing bound, no slot used; the slots
     * (~7 MB) are written before they are read and touched as they fill */
    sp_cost_cache *c = malloc(sizeof *c);
    if (!c) return spi_fail(SP_ENOMEM, "sp_cost_cache_create: out of memory (%zu bytes)", sizeof *c);
    memset(c, 0, offsetof(sp_cost_cache, memo_key));
    for (int p = 0; p < SP_PHASE_COUNT; p++)
        if (sp_lower_job_create(&c->job[p]) != SP_OK) {
            sp_cost_cache_free(c);
            return spi_fail(SP_ENOMEM, "sp_cost_cache_create: out of memory");
        }
    *out = c;
    return SP_OK;
}

void sp_cost_cache_free(sp_cost_cache *c)
{
    if (!c) return;
    for (int p = 0; p < SP_PHASE_COUNT; p++) sp_lower_job_free(c->job[p]);
    free(c);
}

/* opts as an entry point prices with: the caller's (defaults for NULL) with
 * a cache: the caller's, or one made here in *own (NULL when none was made;
 * the entry point frees it) */
static sp_status opts_resolve(const sp_cost_opts *opts, sp_cost_opts *o, sp_cost_cache **own)
{
    *own = NULL;
    if (opts) *o = *opts;
    else sp_cost_opts_init(o);
    if (!o->cache) {
        SP_CHECK(sp_cost_cache_create(own));
        o->cache = *own;
    }
    return SP_OK;
}

/* ---- steps ---- */
static int step_mode(const sp_step *s, const sp_hw *hw)
{
    if (s->kind == SP_STEP_RECV) return SPI_RUN_RECV;
    if (s->kind == SP_STEP_SEND) return SPI_RUN_BLOCKING;
    /* host copies run beside compute like an overlappable collective, on the
     * chip's one communication stream (a stated simplification: they queue
     * behind collectives instead of using a copy engine of their own) */
    if (s->kind == SP_STEP_HOST_LOAD || s->kind == SP_STEP_HOST_STORE)
        return hw->overlap != SP_OVERLAP_NONE ? SPI_RUN_OVERLAP : SPI_RUN_BLOCKING;
    if (s->kind != SP_STEP_COLL) return SPI_RUN_COMPUTE;
    return s->coll.overlappable && hw->overlap != SP_OVERLAP_NONE ? SPI_RUN_OVERLAP : SPI_RUN_BLOCKING;
}

typedef struct price_ctx {
    const sp_program *p;
    const sp_hw *hw;
    eff_memo *eff;      /* the cache's efficiencies (NULL: none) */
    double par[SP_CP_COUNT];
    double peak, bw;
    int64_t ctx[2];
    int have_map;
    sp_torus_map map;   /* torus: looked up once per program */
    spi_ckd *ck;        /* the int64 sums (FLOPs, bytes sent) are checked */
    double share;       /* chips computing at once / shared cores, at least 1 (chip.shared_cores) */
    double cshare;      /* what a compute step stretches by: share × sp_hw_compute_stretch(share) */
    double comm_share;  /* share, or 1 when the profile's communication figures already hold it */
    double wake_s;      /* chip.idle_wake_s / share: each collective's wait for an idle core (spi_idle_wake) */
    int ws_curve;       /* eff_lookup's key of the weight-stream curve: -3, or -4 for a chip alone */
    int elem_any;       /* the profile prices some elementwise kernel per element (chip.step_elem_s) */
    int64_t wstream;    /* weight bytes one pass of the program reads (layers × n_layers) */
    int fetch;          /* the profile prices weights fetched from beyond the cache (sp_hw_weight_fetch) */
    unsigned groups_done;                  /* bit m: group[m] resolved */
    coll_group group[1u << SP_AXIS_COUNT];  /* by sp_coll.mask */
} price_ctx;

static inline __attribute__((always_inline)) void add_terms(sp_phase_cost *sums, const step_terms *x, double dispatch, int64_t times, spi_ckd *ck)
{
    sums->compute_s += x->c * times;
    sums->memory_s += x->m * times;
    sums->roofline_s += (x->c > x->m ? x->c : x->m) * times;
    sums->dispatch_s += dispatch * times;
    spi_ck_addmul(ck, "FLOPs per chip", &sums->flops, x->flops, times);
}

/* Compute time of a step at context ctx (0: as lowered): duration, its terms, coefficients. */
static int64_t price_compute(const price_ctx *pc, const sp_step *s, int64_t ctx, step_terms *x, double *coef)
{
    const sp_hw *hw = pc->hw;
    int64_t flops = s->flops, kvb = s->kv_bytes_read;
    if (s->kind == SP_STEP_ATTN && s->from_cache && s->context > 0 && ctx > 0) {
        /* decode attention: one query token, every term linear in the context */
        flops = (int64_t)((double)flops * ctx / s->context);
        kvb = (int64_t)((double)kvb * ctx / s->context);
    }
    double eff = 1.0;
    if (flops > 0)
        /* a grouped expert matmul runs as `experts` matmuls of m/experts rows */
        /* logits over an f32 table: the transposed kernel's own curves (sp_hw_logits_shape_eff;
         * key SP_DT_COUNT) */
        eff = s->kind == SP_STEP_LOGITS && hw->logits_sizes > 0 && pc->p->wspec[s->weight].dtype == SP_DT_F32
                  ? eff_lookup(pc->eff, hw, s->m, s->n, s->k, SP_DT_COUNT)
              : s->kind == SP_STEP_MATMUL || s->kind == SP_STEP_LOGITS
                  ? eff_lookup(pc->eff, hw, s->experts > 1 ? s->m / s->experts : s->m, s->n, s->k, pc->p->layout.weights)
              : s->kind == SP_STEP_ATTN ? eff_lookup(pc->eff, hw, flops, -1, s->d_head, 0)
                                        : eff_lookup(pc->eff, hw, flops, -1, -1, 0);
    double c = flops > 0 ? flops / (pc->peak * eff) : 0.0;
    if (pc->fetch && s->weight_bytes > 0 && (s->kind == SP_STEP_MATMUL || s->kind == SP_STEP_LOGITS) &&
        (s->experts > 1 ? s->m / s->experts : s->m) >= 2)
        /* the curves timed this matmul with its weights alone in cache; in a pass they come from
         * the working set of every weight the core's chips stream (chip.weight_fetch_s_by_working_set:
         * timed with f32 weights, taken per stored byte for every dtype).  One row reads them once
         * with no packing, at the weight-stream rate the memory term below prices. */
        c += sp_hw_weight_fetch(hw, (double)s->weight_bytes, (double)pc->wstream * pc->share);
    if (s->kind == SP_STEP_ACT) {
        /* CPU activations are bound by their transcendental arithmetic per element */
        double es = hw->act_elem_s[s->src2 != SP_BUF_NONE];
        if (es > 0) c = (double)s->m * (double)s->n * es;
    } else if (pc->elem_any) {
        /* a CPU's elementwise kernels run at rates of their own (sp_hw_elem): attention stages and
         * rotates its operands before its FLOPs; the other steps are that work alone */
        double el[SP_ELEM_COUNT];
        sp_lower_step_elems(pc->p, s, el);
        double e = 0.0;
        for (int k = 0; k < SP_ELEM_COUNT; k++) e += el[k] * hw->step_elem_s[k];
        if (s->kind == SP_STEP_ATTN) c += e;
        else if (e > 0) c = e;
    }
    int64_t bytes = s->weight_bytes + kvb + s->kv_bytes_written + s->act_bytes;
    /* with an efficiency.weight_stream curve, a step that reads weights runs
     * at the rate of the whole stream a pass makes through the chip's
     * weights (each weight once per token), not of its own bytes: a CPU's
     * caches hold what the pass touches, not one matrix */
    double meff = bytes <= 0 ? 1.0
                : s->weight_bytes > 0 && hw->ws_points > 0 ? eff_lookup(pc->eff, hw, pc->wstream > bytes ? pc->wstream : bytes, pc->ws_curve, -3, 0)
                                                           : eff_lookup(pc->eff, hw, bytes, -2, -2, 0);
    double m = bytes / (pc->bw * meff);
    /* chips time-sharing cores: every part of a compute step stretches alike, by the share and
     * by what the chips' switching at every collective costs beyond it (chip.compute_stretch_by_share) */
    double sh = pc->cshare;
    c *= sh;
    m *= sh;
    x->c = c;
    x->m = m;
    x->flops = flops;
    if (coef) {
        coef[SP_CP_DISPATCH] = sh;
        if (c > m) coef[SP_CP_FLOP] = sh * flops / eff;
        else coef[SP_CP_HBM_BYTE] = sh * bytes / meff;
    }
    return spi_ps(sh * hw->dispatch_s + (c > m ? c : m));
}

/* Prices one step at both contexts into *r and *sp. */
static void step_price_of(price_ctx *pc, const sp_step *s, spi_step_run *r, step_price *sp, int two, double *coef)
{
    const sp_hw *hw = pc->hw;
    r->mode = step_mode(s, hw);
    r->rd[0] = (unsigned char)s->src;
    r->rd[1] = (unsigned char)s->src2;
    r->rd[2] = (unsigned char)s->src3;
    r->rd[3] = (unsigned char)s->wbuf;
    r->dst = (unsigned char)s->dst;
    r->pen_ps[0] = r->pen_ps[1] = 0;
    r->pen_frac = 0;
    if (coef) memset(coef, 0, SP_CP_COUNT * sizeof *coef);
    if (s->kind == SP_STEP_HOST_WAIT) {   /* an ordering point: no work, no dispatch */
        r->dur_ps[0] = r->dur_ps[1] = 0;
        return;
    }
    if (s->kind == SP_STEP_HOST_LOAD || s->kind == SP_STEP_HOST_STORE) {
        /* bytes over the host link at its bandwidth (a KV load grows with the context) */
        for (int k = 0; k <= two; k++) {
            sp->b[k] = sp_lower_host_bytes(s, pc->ctx[k]);
            sp->t[k] = (double)sp->b[k] / hw->host_link_bw;
            r->dur_ps[k] = spi_ps(sp->t[k]);
            if (r->mode == SPI_RUN_OVERLAP && hw->overlap == SP_OVERLAP_FRACTION) {
                r->pen_frac = 1.0 - hw->overlap_fraction;
                r->pen_ps[k] = spi_ps(r->pen_frac * sp->t[k]);
            }
        }
        if (!two) r->dur_ps[1] = r->dur_ps[0], r->pen_ps[1] = r->pen_ps[0];
        return;
    }
    if (r->mode == SPI_RUN_COMPUTE) {
        r->dur_ps[0] = r->dur_ps[1] = price_compute(pc, s, pc->ctx[0], &sp->x[0], coef);
        if (two) {
            sp->x[1] = sp->x[0];
            if (s->kind == SP_STEP_ATTN) r->dur_ps[1] = price_compute(pc, s, pc->ctx[1], &sp->x[1], NULL);
        }
        return;
    }
    sp_coll_terms ct;
    unsigned mask = s->coll.mask & ((1u << SP_AXIS_COUNT) - 1);   /* the group's axes (SP_AXES_*) */
    if (!(pc->groups_done & (1u << mask))) {
        coll_group_of(hw, &pc->p->layout, pc->have_map ? &pc->map : NULL, mask, &pc->group[mask]);
        pc->groups_done |= 1u << mask;
    }
    coll_terms_group(hw, &pc->p->layout, pc->have_map ? &pc->map : NULL, &s->coll, &pc->group[mask], &ct);
    double t = r->mode == SPI_RUN_RECV ? 0.0
             : pc->comm_share * coll_terms_time(&ct, pc->par) + (pc->group[mask].one_core && s->coll.kind != SP_COLL_SENDRECV ? 0.0 : ct.launch * pc->wake_s);
    sp->t[0] = sp->t[1] = t;
    sp->b[0] = sp->b[1] = s->coll.bytes_sent > s->coll.bytes_recv ? s->coll.bytes_sent : s->coll.bytes_recv;
    if (coef && r->mode != SPI_RUN_RECV) {
        double sh = pc->comm_share;
        coef[SP_CP_ALPHA_NEAR] = sh * ct.steps[NEAR];
        coef[SP_CP_BETA_NEAR] = sh * ct.bytes[NEAR];
        coef[SP_CP_ALPHA_FAR] = sh * ct.steps[FAR];
        coef[SP_CP_BETA_FAR] = sh * ct.bytes[FAR];
        coef[SP_CP_COLL_LAUNCH] = sh * ct.launch;
    }
    r->dur_ps[0] = r->dur_ps[1] = spi_ps(t);
    if (r->mode == SPI_RUN_OVERLAP && hw->overlap == SP_OVERLAP_FRACTION) {
        r->pen_frac = 1.0 - hw->overlap_fraction;
        r->pen_ps[0] = r->pen_ps[1] = spi_ps(r->pen_frac * t);
    }
}

/* Adds a step priced by step_price_of (its mode in r), × times, to sums[0..1]. */
static inline __attribute__((always_inline)) void step_add(const price_ctx *pc, const sp_step *s, const spi_step_run *r,
                                                           const step_price *sp, int64_t times, sp_phase_cost *sums, int two)
{
    if (s->kind == SP_STEP_HOST_WAIT) return;
    if (s->kind == SP_STEP_HOST_LOAD || s->kind == SP_STEP_HOST_STORE) {
        for (int k = 0; k <= two; k++) {
            sums[k].host_s += sp->t[k] * times;
            spi_ck_addmul(pc->ck, "host bytes per chip", &sums[k].host_bytes, sp->b[k], times);
        }
        return;
    }
    if (r->mode == SPI_RUN_COMPUTE) {
        add_terms(&sums[0], &sp->x[0], pc->cshare * pc->hw->dispatch_s, times, pc->ck);
        if (two) add_terms(&sums[1], &sp->x[1], pc->cshare * pc->hw->dispatch_s, times, pc->ck);
        return;
    }
    int64_t bytes = spi_ck_mul(pc->ck, "bytes sent per chip", sp->b[0], times);
    for (int k = 0; k <= two; k++) {
        sums[k].coll_s[s->coll.kind] += sp->t[0] * times;
        sums[k].comm_s += sp->t[0] * times;
        sums[k].comm_bytes = spi_ck_add(pc->ck, "bytes sent per chip", sums[k].comm_bytes, bytes);
    }
}

/* spi_cost_price_program, with lp (NULL: none) the layer part's prices:
 * taken from it when it holds generation `held` (0: none), which the
 * caller knows to be of this program's layer part, and its inputs agree;
 * else written, as a new generation (lp->gen) */
static void price_steps(sp_cost_cache *cache, const sp_program *p, const sp_hw *hw, const int64_t ctx[2],
                        spi_prog_run *out, spi_step_coefs *coef, layer_px *lp, unsigned held);

void spi_cost_price_program(sp_cost_cache *cache, const sp_program *p, const sp_hw *hw, const int64_t ctx[2],
                            spi_prog_run *out, spi_step_coefs *coef)
{
    price_steps(cache, p, hw, ctx, out, coef, NULL, 0);
}

static void price_steps(sp_cost_cache *cache, const sp_program *p, const sp_hw *hw, const int64_t ctx[2],
                        spi_prog_run *out, spi_step_coefs *coef, layer_px *lp, unsigned held)
{
    price_ctx pc;   /* field by field: its group table is filled as groups come (groups_done) */
    pc.p = p;
    pc.hw = hw;
    pc.eff = cache ? &cache->eff : NULL;
    pc.peak = sp_hw_compute_peak(hw, p->layout.weights);
    pc.bw = hw->hbm_bw;
    pc.ctx[0] = ctx[0];
    pc.ctx[1] = ctx[1];
    pc.have_map = 0;
    pc.ck = NULL;
    pc.share = 1.0;
    pc.cshare = 1.0;
    pc.comm_share = 1.0;
    pc.wake_s = spi_idle_wake(hw, &p->layout);
    /* one chip computing while the others wait streams the memory bandwidth
     * the node's chips otherwise share */
    pc.elem_any = 0;
    for (int k = 0; k < SP_ELEM_COUNT; k++) pc.elem_any |= hw->step_elem_s[k] > 0;
    pc.ws_curve = hw->wsa_points > 0 && hw->shared_cores > 1 && spi_chips_computing(&p->layout) <= 1 ? -4 : -3;
    pc.wstream = 0;
    pc.groups_done = 0;
    pc.fetch = hw->fetch_points > 0;
    if (hw->ws_points > 0 || pc.fetch) {   /* only the weight-stream and weight-fetch curves read it */
        for (int k = 0; k < SP_PART_COUNT; k++) {
            const sp_steps *wp = sp_program_part(p, (sp_prog_part)k);
            for (int i = 0; i < wp->n; i++) pc.wstream += wp->s[i].weight_bytes * sp_program_part_runs(p, (sp_prog_part)k);
        }
    }
    if (hw->shared_cores > 0) {
        pc.share = spi_core_share(hw, &p->layout);
        pc.cshare = pc.share * sp_hw_compute_stretch(hw, pc.share);
        pc.comm_share = spi_comm_share(hw, &p->layout);
    }
    sp_cost_params(hw, p->layout.weights, pc.par);
    pc.have_map = hw->topo == SP_TOPO_TORUS && sp_layout_torus_map(&p->layout, hw, &pc.map);
    spi_ckd ck = SPI_CKD_INIT;
    pc.ck = &ck;
    /* the curves compared once per evaluation, not per program, where the memo holds them (eff_held) */
    if (pc.eff && !cache->eff_held) eff_bind(pc.eff, hw);
    int two = ctx[1] > 0;
    memset(out->sums, 0, sizeof out->sums);
    out->overlaps = 0;
    out->varied = 0;
    /* buffers an overlapping step touches (a 64-bit set: SP_BUF_COUNT <= 64),
     * and those whose written (ov_buf) and read-by (ov_read) slots it sets */
    uint64_t touched = 0, ov_buf = 0, ov_read = 0;
    const sp_steps *parts[SP_PART_COUNT];
    int64_t runs[SP_PART_COUNT];   /* times a step of the part runs: every layer step but offload's (sp_lower_step_layers) */
    for (int k = 0; k < SP_PART_COUNT; k++) {
        parts[k] = sp_program_part(p, (sp_prog_part)k);
        runs[k] = sp_program_part_runs(p, (sp_prog_part)k);
    }
    /* the layer part's prices: lp's when it holds them for these inputs, else written to it */
    if (coef) lp = NULL;   /* the coefficients are per step, of this pricing */
    int reuse = 0;
    if (lp) {
        reuse = held && lp->gen == held && lp->n == p->layer.n && lp->two == two && lp->hw == hw && lp->ctx[0] == ctx[0] &&
                lp->ctx[1] == ctx[1] && lp->wstream == pc.wstream && !memcmp(&lp->layout, &p->layout, sizeof lp->layout);
        if (!reuse) {
            lp->gen = 0;   /* until written below */
            lp->ops_ok = 0;
            lp->n = p->layer.n;
            lp->two = two;
            lp->hw = hw;
            lp->ctx[0] = ctx[0];
            lp->ctx[1] = ctx[1];
            lp->wstream = pc.wstream;
            memcpy(&lp->layout, &p->layout, sizeof lp->layout);
        }
    }
    if (reuse) memcpy(out->run[SP_PART_LAYER], lp->run, (size_t)p->layer.n * sizeof lp->run[0]);
    for (int k = 0; k < SP_PART_COUNT; k++)
        for (int i = 0; i < parts[k]->n; i++)
        {
            const spi_step_run *r = &out->run[k][i];
            const sp_step *st = &parts[k]->s[i];
            int in_layer = k == SP_PART_LAYER || k == SP_PART_DENSE;
            step_price one, *sp = &one;
            if (lp && k == SP_PART_LAYER) {
                sp = &lp->sp[i];
                if (!reuse) step_price_of(&pc, st, &lp->run[i], sp, two, NULL), out->run[k][i] = lp->run[i];
            } else {
                step_price_of(&pc, st, &out->run[k][i], sp, two, coef ? (*coef)[k][i] : NULL);
            }
            step_add(&pc, st, r, sp, in_layer && st->on != SP_ON_EVERY ? sp_lower_step_layers(p, (sp_prog_part)k, st) : runs[k],
                     out->sums, two);
            if (in_layer && st->on != SP_ON_EVERY) out->varied = 1;
            if (r->mode != SPI_RUN_OVERLAP) continue;
            out->overlaps = 1;
            for (int j = 0; j < 4; j++) {
                touched |= 1ull << r->rd[j];
                if (r->rd[j] != r->dst) ov_read |= 1ull << r->rd[j];
            }
            touched |= 1ull << r->dst;
            ov_buf |= 1ull << r->dst;
        }
    out->ck = ck;
    if (lp && !reuse) {
        if (++cache->layer_gen == 0) cache->layer_gen = 1;   /* 0: none */
        lp->gen = cache->layer_gen;
    }
    if (!out->overlaps) return;
    touched &= ~1ull;   /* SP_BUF_NONE */
    ov_buf &= ~1ull;
    ov_read &= ~1ull;
    /* Only the slots an overlapping op sets can run ahead of the compute
     * stream: every other slot is set by an op that also sets the compute
     * stream to the same end, and the compute stream never goes back.  So a
     * compute-stream op (every mode but OVERLAP) need not wait on the
     * others (its wait on the compute stream covers them), and a slot no op
     * waits on is left out of the shortcut's repeat test (the times that
     * are read, and so the makespan, are the same to the picosecond). */
    uint64_t need_buf = 0, need_read = 0;   /* BUF / READ slots some op waits on, by buffer */
    uint64_t live = 0;   /* buffers the layer's ops read or write */
    for (int k = 0; k < SP_PART_COUNT; k++) {
        if (k == SP_PART_LAYER && reuse && lp->ops_ok && lp->touched == touched && lp->ov_buf == ov_buf &&
            lp->ov_read == ov_read) {
            memcpy(out->op[k], lp->op, (size_t)lp->n_ops * sizeof lp->op[0]);
            out->n_ops[k] = lp->n_ops;
            need_buf |= lp->need_buf;
            need_read |= lp->need_read;
            live |= lp->live;
            continue;
        }
        /* this part's additions to the sets, joined to them at its end */
        uint64_t part_buf = 0, part_read = 0, part_live = 0;
        int n = 0;
        int64_t add[2] = {0, 0};
        for (int i = 0; i < parts[k]->n; i++) {
            const spi_step_run *r = &out->run[k][i];
            uint64_t uses = (1ull << r->rd[0]) | (1ull << r->rd[1]) | (1ull << r->rd[2]) | (1ull << r->rd[3]) |
                            (1ull << r->dst);
            if (r->mode == SPI_RUN_COMPUTE && !r->pen_ps[0] && !(uses & touched)) {
                add[0] += r->dur_ps[0];
                add[1] += r->dur_ps[1];
                continue;
            }
            if (k == SP_PART_LAYER || k == SP_PART_DENSE) part_live |= uses;
            struct spi_op *o = &out->op[k][n];
            o->idx = i;
            o->add[0] = add[0];
            o->add[1] = add[1];
            /* the slots spi_sched_ready reads and spi_sched_commit writes */
            o->n_dep = o->n_set = o->n_rdm = 0;
            /* the buffers whose slots it waits on: all of them on the
             * communication stream, else those an overlapping op sets */
            uint64_t wb = r->mode == SPI_RUN_OVERLAP ? ~0ull : ov_buf, wr = r->mode == SPI_RUN_OVERLAP ? ~0ull : ov_read;
            if (r->mode != SPI_RUN_OVERLAP) o->dep[o->n_dep++] = SPI_SLOT_COMP;
            if (r->mode != SPI_RUN_COMPUTE) o->dep[o->n_dep++] = SPI_SLOT_COMM;
            for (int j = 0; j < 4; j++)
                if (r->rd[j] != SP_BUF_NONE && (wb >> r->rd[j] & 1)) {
                    o->dep[o->n_dep++] = (unsigned char)(SPI_SLOT_BUF + r->rd[j]);
                    part_buf |= 1ull << r->rd[j];
                }
            if (r->dst != SP_BUF_NONE) {
                if (wb >> r->dst & 1) {
                    o->dep[o->n_dep++] = (unsigned char)(SPI_SLOT_BUF + r->dst);
                    part_buf |= 1ull << r->dst;
                }
                if (wr >> r->dst & 1) {
                    o->dep[o->n_dep++] = (unsigned char)(SPI_SLOT_READ + r->dst);
                    part_read |= 1ull << r->dst;
                }
            }
            if (r->mode != SPI_RUN_OVERLAP) o->set[o->n_set++] = SPI_SLOT_COMP;
            if (r->mode != SPI_RUN_COMPUTE) o->set[o->n_set++] = SPI_SLOT_COMM;
            if (r->dst != SP_BUF_NONE) o->set[o->n_set++] = (unsigned char)(SPI_SLOT_BUF + r->dst);
            for (int j = 0; j < 4; j++)
                if (r->rd[j] != SP_BUF_NONE && r->rd[j] != r->dst) o->rdm[o->n_rdm++] = (unsigned char)(SPI_SLOT_READ + r->rd[j]);
            n++;
            add[0] = add[1] = 0;
        }
        out->op[k][n].idx = -1;   /* the tail */
        out->op[k][n].add[0] = add[0];
        out->op[k][n].add[1] = add[1];
        out->n_ops[k] = n + 1;
        need_buf |= part_buf;
        need_read |= part_read;
        live |= part_live;
        if (k == SP_PART_LAYER && lp) {   /* kept for a program taking this layer part (lp->run) */
            memcpy(lp->op, out->op[k], (size_t)(n + 1) * sizeof lp->op[0]);
            lp->n_ops = n + 1;
            lp->touched = touched;
            lp->ov_buf = ov_buf;
            lp->ov_read = ov_read;
            lp->need_buf = part_buf;
            lp->need_read = part_read;
            lp->live = part_live;
            lp->ops_ok = 1;
        }
    }
    live &= ~1ull;   /* SP_BUF_NONE's slots are never written */
    out->live[0] = SPI_SLOT_COMP;
    out->live[1] = SPI_SLOT_COMM;
    out->n_live = 2;
    for (uint64_t b_set = live & need_buf; b_set; b_set &= b_set - 1)
        out->live[out->n_live++] = (unsigned char)(SPI_SLOT_BUF + __builtin_ctzll(b_set));
    for (uint64_t r_set = live & need_read; r_set; r_set &= r_set - 1)
        out->live[out->n_live++] = (unsigned char)(SPI_SLOT_READ + __builtin_ctzll(r_set));
}

/* The whole schedule of one part, every step (the coefficient vectors'
 * path: st->vec set). */
static void sched_part(spi_sched *st, const sp_program *p, const sp_steps *ss, const spi_prog_run *pr, int part,
                       int64_t layer, int k, const double (*coef)[SP_CP_COUNT])
{
    const spi_step_run *run = pr->run[part];
    for (int i = 0; i < ss->n; i++) {
        if (layer >= 0 && !sp_lower_step_runs(p, &ss->s[i], layer)) continue;
        int from;
        int64_t start = spi_sched_ready(st, &run[i], &from);
        spi_sched_commit(st, &run[i], k, start, st->vec ? st->vec[from] : NULL, coef ? coef[i] : NULL);
    }
}

/* The coefficient vectors of one program's schedule at context k: every
 * layer run (ps; st->vec set). */
static int64_t sched_program(const sp_program *p, const spi_prog_run *pr, int k, spi_sched *st,
                             const spi_step_coefs *coef)
{
    memset(st->t, 0, sizeof st->t);
    memset(st->vec, 0, SPI_SLOTS * sizeof *st->vec);
    sched_part(st, p, &p->pre, pr, SP_PART_PRE, -1, k, coef ? (*coef)[SP_PART_PRE] : NULL);
    for (int64_t layer = 0; layer < p->n_layers; layer++) {
        sp_prog_part lp = sp_program_layer_part(p, layer);
        sched_part(st, p, sp_program_part(p, lp), pr, lp, layer, k, coef ? (*coef)[lp] : NULL);
    }
    sched_part(st, p, &p->post, pr, SP_PART_POST, -1, k, coef ? (*coef)[SP_PART_POST] : NULL);
    return st->t[SPI_SLOT_COMP] > st->t[SPI_SLOT_COMM] ? st->t[SPI_SLOT_COMP] : st->t[SPI_SLOT_COMM];
}

/* The shortcut's part (spi_prog_run's ops: spi_sched_ready and _commit on
 * resolved slots) at contexts 0..nk-1 at once: decode's two contexts differ
 * in durations only, so the ops and their slots are read once for both.
 * Inline, nk a constant at each call. */
static inline __attribute__((always_inline)) void shortcut_part(int64_t (*t)[SPI_SLOTS], int nk,
                                                                const spi_prog_run *pr, int part)
{
    const spi_step_run *run = pr->run[part];
    for (int j = 0; j < pr->n_ops[part]; j++) {
        const struct spi_op *o = &pr->op[part][j];
        for (int k = 0; k < nk; k++) t[k][SPI_SLOT_COMP] += o->add[k];
        if (o->idx < 0) break;
        const spi_step_run *r = &run[o->idx];
        int64_t start[2], end[2];
        for (int k = 0; k < nk; k++) start[k] = t[k][o->dep[0]];
        for (int d = 1; d < o->n_dep; d++)
            for (int k = 0; k < nk; k++)
                if (t[k][o->dep[d]] > start[k]) start[k] = t[k][o->dep[d]];
        for (int k = 0; k < nk; k++) end[k] = start[k] + r->dur_ps[k];
        for (int d = 0; d < o->n_set; d++)
            for (int k = 0; k < nk; k++) t[k][o->set[d]] = end[k];
        for (int d = 0; d < o->n_rdm; d++)
            for (int k = 0; k < nk; k++)
                if (t[k][o->rdm[d]] < end[k]) t[k][o->rdm[d]] = end[k];
        for (int k = 0; k < nk; k++) t[k][SPI_SLOT_COMP] += r->pen_ps[k];
    }
}

/* Makespan of one program from idle streams (ps) at contexts 0..nk-1.
 * Without overlapping steps it is the sum of the steps.  Layers: the
 * schedule is a max-plus map, so once the state after a layer, taken
 * relative to the earlier stream, repeats the state after the layer
 * before, every further layer adds the same delta: the remaining layers
 * are added at once (exactly: integer times).  The state compared is that
 * of the layer's live slots (spi_prog_run): a layer neither reads nor
 * writes the others, so they keep their values however many layers run.
 * Once a context's state repeats it repeats after every further layer, so
 * the contexts run together until all of them repeat. */
static int64_t part_sum(const sp_steps *ss, const spi_step_run *run, int k)
{
    int64_t t = 0;
    for (int i = 0; i < ss->n; i++) t += run[i].dur_ps[k];
    return t;
}

static inline __attribute__((always_inline)) void sched_shortcut(sp_cost_cache *cc, const sp_program *p,
                                                                 const spi_prog_run *pr, int nk, int64_t out[2])
{
    if (pr->varied) {
        /* offload: the layers differ (sp_lower_step_runs), so no repeated
         * state to skip ahead on: every layer is scheduled, step by step,
         * as the simulator does */
        spi_sched st = {{0}, cc->vec};
        for (int k = 0; k < nk; k++) out[k] = sched_program(p, pr, k, &st, NULL);
        return;
    }
    if (!pr->overlaps) {
        /* nothing runs beside the compute stream: every step starts when
         * the one before ends (its inputs are earlier still), so the
         * schedule is the chain and its time the sum */
        for (int k = 0; k < nk; k++)
            out[k] = part_sum(&p->pre, pr->run[SP_PART_PRE], k) + (p->n_layers - p->n_dense_layers) * part_sum(&p->layer, pr->run[SP_PART_LAYER], k) +
                     p->n_dense_layers * part_sum(&p->dense, pr->run[SP_PART_DENSE], k) +
                     part_sum(&p->post, pr->run[SP_PART_POST], k);
        return;
    }
    if (p->n_dense_layers > 0) {
        /* dense layers between MoE layers: every layer in its order (the repeat test below compares
         * one layer kind with the next) */
        int64_t t[2][SPI_SLOTS];
        memset(t, 0, (size_t)nk * sizeof t[0]);
        shortcut_part(t, nk, pr, SP_PART_PRE);
        for (int64_t layer = 0; layer < p->n_layers; layer++) shortcut_part(t, nk, pr, sp_program_layer_part(p, layer));
        shortcut_part(t, nk, pr, SP_PART_POST);
        for (int k = 0; k < nk; k++) out[k] = t[k][SPI_SLOT_COMP] > t[k][SPI_SLOT_COMM] ? t[k][SPI_SLOT_COMP] : t[k][SPI_SLOT_COMM];
        return;
    }
    int64_t t[2][SPI_SLOTS];
    memset(t, 0, (size_t)nk * sizeof t[0]);
    shortcut_part(t, nk, pr, SP_PART_PRE);
    int64_t prev[2][SPI_SLOTS], prev_base[2] = {0, 0};
    int have_prev = 0, nl = pr->n_live;
    for (int64_t layer = 0; layer < p->n_layers; layer++) {
        shortcut_part(t, nk, pr, SP_PART_LAYER);
        int64_t base[2], rel[2][SPI_SLOTS];
        int same = have_prev;
        for (int k = 0; k < nk; k++) {
            base[k] = t[k][SPI_SLOT_COMP] < t[k][SPI_SLOT_COMM] ? t[k][SPI_SLOT_COMP] : t[k][SPI_SLOT_COMM];
            for (int j = 0; j < nl; j++) {
                int64_t x = t[k][pr->live[j]];
                rel[k][j] = (x > base[k] ? x : base[k]) - base[k];
                same &= rel[k][j] == prev[k][j];
            }
        }
        if (same) {
            int64_t left = p->n_layers - 1 - layer;
            for (int k = 0; k < nk; k++)
                for (int j = 0; j < nl; j++) t[k][pr->live[j]] = base[k] + rel[k][j] + left * (base[k] - prev_base[k]);
            break;
        }
        for (int k = 0; k < nk; k++) {
            memcpy(prev[k], rel[k], (size_t)nl * sizeof rel[k][0]);
            prev_base[k] = base[k];
        }
        have_prev = 1;
    }
    shortcut_part(t, nk, pr, SP_PART_POST);
    for (int k = 0; k < nk; k++) out[k] = t[k][SPI_SLOT_COMP] > t[k][SPI_SLOT_COMM] ? t[k][SPI_SLOT_COMP] : t[k][SPI_SLOT_COMM];
}

/* Prices a program at up to two contexts (decode's first and last step
 * differ only in the attention terms); out1 may be NULL.  SP_EINVAL, naming
 * the quantity, when an int64 sum overflows or the program would run longer
 * than the picosecond clock holds (SPI_PS_MAX_S). */
static sp_status price_program(sp_cost_cache *cc, const sp_program *p, const sp_hw *hw, const int64_t ctx[2],
                               sp_phase_cost *out0, sp_phase_cost *out1, layer_px *lp, unsigned held)
{
    spi_prog_run *pr = &cc->pr;
    int64_t c2[2] = {ctx[0], out1 ? ctx[1] : 0};
    price_steps(cc, p, hw, c2, pr, NULL, lp, held);
    if (pr->ck.overflow)
        return spi_fail(SP_EINVAL, "%s phase: %s over %lld layers do not fit in 64 bits (the request is too large to represent)",
                        sp_phase_name(p->phase), pr->ck.what, (long long)p->n_layers);
    for (int k = 0; k < 2; k++) {
        const sp_phase_cost *x = &pr->sums[k];
        /* every step's duration is at most its roofline, dispatch and communication terms, summed here */
        double bound = x->roofline_s + x->dispatch_s + 2 * x->comm_s;
        if (!(bound < SPI_PS_MAX_S))
            return spi_fail(SP_EINVAL, "%s phase: one pass takes about %.3g s, beyond the cost model's range (%g s): "
                            "the request is too large to price", sp_phase_name(p->phase), bound, SPI_PS_MAX_S);
    }
    int64_t ps[2];
    if (out1) sched_shortcut(cc, p, pr, 2, ps);
    else sched_shortcut(cc, p, pr, 1, ps);
    *out0 = pr->sums[0];
    out0->time_s = (double)ps[0] * 1e-12;
    if (out1) {
        *out1 = pr->sums[1];
        out1->time_s = (double)ps[1] * 1e-12;
    }
    return SP_OK;
}

int sp_cost_host_bound(const sp_phase_cost *p)
{
    return p->host_bytes > 0 && p->host_s >= p->roofline_s + p->dispatch_s + p->comm_s;
}

void sp_cost_program(const sp_program *p, const sp_hw *hw, int64_t context, sp_phase_cost *out)
{
    int64_t ctx[2] = {context, 0};
    sp_cost_cache *cc = NULL;
    if (sp_cost_cache_create(&cc) != SP_OK || price_program(cc, p, hw, ctx, out, NULL, NULL, 0) != SP_OK)
        memset(out, 0, sizeof *out);   /* see sp_cost.h */
    sp_cost_cache_free(cc);
}

static void add_phase(sp_phase_cost *acc, const sp_phase_cost *x)
{
    acc->time_s += x->time_s;
    acc->compute_s += x->compute_s;
    acc->memory_s += x->memory_s;
    acc->roofline_s += x->roofline_s;
    acc->dispatch_s += x->dispatch_s;
    for (int k = 0; k < SP_COLL_COUNT; k++) acc->coll_s[k] += x->coll_s[k];
    acc->comm_s += x->comm_s;
    acc->comm_bytes += x->comm_bytes;
    acc->flops += x->flops;
    acc->host_s += x->host_s;
    acc->host_bytes += x->host_bytes;
}

/* acc += x × num / 2, each figure (a prefill pass's weight, sp_lower_pass_terms) */
static void add_phase_half(sp_phase_cost *acc, const sp_phase_cost *x, int64_t num, spi_ckd *ck)
{
    double f = (double)num / 2;
    acc->time_s += f * x->time_s;
    acc->compute_s += f * x->compute_s;
    acc->memory_s += f * x->memory_s;
    acc->roofline_s += f * x->roofline_s;
    acc->dispatch_s += f * x->dispatch_s;
    for (int k = 0; k < SP_COLL_COUNT; k++) acc->coll_s[k] += f * x->coll_s[k];
    acc->comm_s += f * x->comm_s;
    /* integers: halved once the terms are summed (prefill_phase) */
    acc->comm_bytes = spi_ck_add(ck, "prefill bytes sent per chip", acc->comm_bytes,
                                 spi_ck_mul(ck, "prefill bytes sent per chip", x->comm_bytes, num));
    acc->flops = spi_ck_add(ck, "prefill FLOPs per chip", acc->flops, spi_ck_mul(ck, "prefill FLOPs per chip", x->flops, num));
    acc->host_s += f * x->host_s;
    acc->host_bytes = spi_ck_add(ck, "prefill host bytes per chip", acc->host_bytes,
                                 spi_ck_mul(ck, "prefill host bytes per chip", x->host_bytes, num));
}

/* The profile's bytes the prices depend on: all but its calibration
 * section (provenance, ~half of sp_hw; pricing never reads it), which sp_hw
 * keeps last. */
#define HW_PRICED offsetof(sp_hw, calibration)
_Static_assert(offsetof(sp_hw, calibration) + sizeof ((sp_hw *)0)->calibration == sizeof(sp_hw),
               "sp_hw's calibration section is its last member");

/* The efficiency curves lie in the priced bytes: a profile equal to the
 * memo's there has the curves the memo's efficiencies were bound to. */
_Static_assert(EFF_END <= HW_PRICED && offsetof(sp_hw, hbm_bw_eff) + sizeof(double) <= HW_PRICED,
               "the efficiency curves are priced bytes of sp_hw");

/* Binds the memo to (m, hw), and the efficiencies to hw's curves: once per
 * evaluation (the programs it prices then skip eff_bind, eff_held).  An
 * eff_bind of another profile's curves since (a simulation, sp_cost_program
 * with this cache) clears eff.of_memo and so is undone here. */
static void memo_bind(sp_cost_cache *cc, const sp_model *m, const sp_hw *hw)
{
    if (!cc->memo.bound || memcmp(&cc->memo.m, m, sizeof *m) || memcmp(&cc->memo.hw, hw, HW_PRICED)) {
        memset(cc->memo.used, 0, sizeof cc->memo.used);
        memcpy(&cc->memo.m, m, sizeof *m);   /* bytes, padding included: compared with memcmp */
        memcpy(&cc->memo.hw, hw, HW_PRICED);
        cc->memo.params_ctx = 0;
        cc->memo.bound = 1;
        cc->eff.of_memo = 0;
    }
    if (!cc->eff.of_memo) {
        eff_bind(&cc->eff, hw);
        cc->eff.of_memo = 1;
    }
}

/* memo_slot's lanes: the 8-byte words of key bytes [from, to) (rounded out to
 * whole words), four at a time into the four lanes (a tail of 1-3 into the
 * first lanes), one multiply a word; fixed lane indices, so that the lanes
 * stay in registers (a running lane index kept them in memory: ~4.3
 * instructions a word, ~3.3 with these) */
static inline __attribute__((always_inline)) void memo_mix(uint64_t h[4], const unsigned char *b, size_t from, size_t to)
{
    const uint64_t K = 0xff51afd7ed558ccdull;
    size_t i = from / 8, end = (to + 7) / 8;
    uint64_t w[4];
    for (; i + 4 <= end; i += 4) {
        memcpy(w, b + 8 * i, sizeof w);
        h[0] = (h[0] ^ w[0]) * K;
        h[1] = (h[1] ^ w[1]) * K;
        h[2] = (h[2] ^ w[2]) * K;
        h[3] = (h[3] ^ w[3]) * K;
    }
    if (i < end) memcpy(&w[0], b + 8 * i, 8), h[0] = (h[0] ^ w[0]) * K;
    if (i + 1 < end) memcpy(&w[1], b + 8 * i + 8, 8), h[1] = (h[1] ^ w[1]) * K;
    if (i + 2 < end) memcpy(&w[2], b + 8 * i + 16, 8), h[2] = (h[2] ^ w[2]) * K;
}

static unsigned memo_slot(const phase_key *k)
{
    /* multiplicative hash over the key's 8-byte words (the key is zero-padded),
     * in four lanes of one multiply a word, the lanes mixed at the end.  Only
     * the slot depends on it: equality is memcmp.  A key is 117 words, hashed
     * on every lookup (136k in a plan of palm-540b on 64 TPU v4); the words
     * left out are zero in every key: the layout's per-stage lists that
     * sp_lower_begin clears (stage_layers, offload_layers, offload_kind_*: 32
     * words), and its stage meshes when it has none (sp_layout_hetero: 48
     * words), so a key without them hashes 37 words. */
    _Static_assert(sizeof(phase_key) % 8 == 0, "phase_key is hashed by words");
    const unsigned char *b = (const unsigned char *)k;
    uint64_t h[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0x27D4EB2F165667C5ull};
    memo_mix(h, b, 0, offsetof(phase_key, lk.layout.stage_layers));
    memo_mix(h, b, offsetof(phase_key, lk.layout.group), offsetof(phase_key, lk.layout.offload_layers));
    memo_mix(h, b, offsetof(phase_key, lk.layout.offload_kv), offsetof(phase_key, lk.layout.stage_mesh));
    if (sp_layout_hetero(&k->lk.layout))
        memo_mix(h, b, offsetof(phase_key, lk.layout.stage_mesh), offsetof(phase_key, lk.shape));
    memo_mix(h, b, offsetof(phase_key, lk.shape), sizeof *k);
    const uint64_t K = 0xff51afd7ed558ccdull;
    uint64_t x = h[0];
    x ^= x >> 29;
    x = (x ^ h[1]) * K;
    x ^= x >> 29;
    x = (x ^ h[2]) * K;
    x ^= x >> 29;
    x = (x ^ h[3]) * K;
    x ^= x >> 32;
    return (unsigned)(x >> 20) % MEMO_SLOTS;
}

/* What prog[phase] holds for the evaluation under way: the layer steps (-1:
 * none of this evaluation's) lowered for shape sh (a chunked prefill's
 * passes lower different layers) on a stage of tensor mesh `mesh` (stages
 * of their own mesh lower different layers). */
typedef struct layer_keep {
    int n;
    sp_shape sh;
    int mesh[3];
    unsigned px;   /* the generation of cc->px[phase] that holds its layer part's prices (0: none) */
} layer_keep;

static int shape_eq(const sp_shape *a, const sp_shape *b)
{
    return a->batch == b->batch && a->q_len == b->q_len && a->context == b->context &&
           a->max_context == b->max_context && a->act_dtype == b->act_dtype && a->passes_left == b->passes_left;
}

/* Lowers (sp_lower_begin done on cc->prog[phase] in cc->job[phase] for
 * shape sh) and prices one phase, with the layer kept in *kept when it was
 * lowered for the same shape; *kept then describes this program. */
static sp_status price_phase(sp_cost_cache *cc, const sp_hw *hw, sp_phase phase, const sp_shape *sh, int64_t first_ctx,
                             phase_val *v, layer_keep *kept)
{
    sp_program *p = &cc->prog[phase];
    int n = kept->n >= 0 && shape_eq(&kept->sh, sh) && !memcmp(kept->mesh, p->layout.mesh, sizeof kept->mesh)
                ? kept->n : -1;
    unsigned held = n >= 0 ? kept->px : 0;   /* the layer part priced with the layers kept */
    kept->n = -1;   /* until the lowering succeeds */
    kept->px = 0;   /* until the pricing does */
    SP_CHECK(n >= 0 ? spi_lower_finish_keep_layer(cc->job[phase], p, n) : sp_lower_finish(cc->job[phase], p));
    kept->n = p->layer.n;
    kept->sh = *sh;
    memcpy(kept->mesh, p->layout.mesh, sizeof kept->mesh);
    int64_t ctx[2] = {phase == SP_PHASE_PREFILL ? 0 : first_ctx, sh->max_context};
    SP_CHECK(price_program(cc, p, hw, ctx, &v->c0, phase == SP_PHASE_PREFILL ? NULL : &v->c1, &cc->px[phase], held));
    kept->px = cc->px[phase].gen;
    memcpy(v->buf_bytes, p->buf_bytes, sizeof v->buf_bytes);
    memcpy(v->scratch_bytes, p->scratch_bytes, sizeof v->scratch_bytes);
    v->nterms = sp_lower_pass_terms(p, v->left, v->num);
    return sp_lower_mem_stage(p, &v->mem);
}

/* The prices of one phase of stage s: from the memo, or lowered now. */
static sp_status phase_prices(const sp_model *m, const sp_hw *hw, const sp_layout *l, sp_phase phase,
                              const sp_shape *sh, int s, int64_t first_ctx, const sp_cost_opts *opts,
                              int *bound, layer_keep *kept, const phase_val **out)
{
    sp_cost_cache *cc = opts->cache;
    /* not zeroed here: sp_lower_begin zeroes the key, padding included, before it fills it (a
     * second memset was 0.6 % of a plan's instructions), and first_ctx ends it with no padding */
    _Static_assert(sizeof(phase_key) == sizeof(sp_lower_key) + sizeof(int64_t), "phase_key has no padding");
    phase_key key;
    if (sp_lower_begin(m, l, phase, sh, s, &key.lk, &cc->prog[phase], cc->job[phase]) != SP_OK) {
        kept->n = -1;   /* sp_lower below rewrites it */
        return opts->quiet ? SP_EINVAL : sp_lower(m, l, phase, sh, s, &cc->prog[phase]);   /* fails again, with the reason */
    }
    key.first_ctx = phase == SP_PHASE_DECODE ? first_ctx : 0;
    if (opts->fresh) {
        SP_CHECK(price_phase(cc, hw, phase, sh, first_ctx, &cc->fresh, kept));
        *out = &cc->fresh;
        return SP_OK;
    }
    if (!*bound) {   /* after the check: most layouts a search tries do not apply */
        memo_bind(cc, m, hw);
        *bound = 1;
    }
    /* two ways: the key's pair of slots, the one used less recently replaced */
    unsigned i = memo_slot(&key) & ~1u;
    unsigned char *used = cc->memo.used;
    if (!(used[i] && !memcmp(&cc->memo_key[i], &key, sizeof key))) {
        if (used[i + 1] && !memcmp(&cc->memo_key[i + 1], &key, sizeof key)) {
            i++;
        } else {
            i += used[i] && (!used[i + 1] || used[i] > used[i + 1]);   /* an empty slot, else the older */
            used[i] = 0;
            cc->eff_held = 1;   /* memo_bind bound the efficiencies to hw */
            sp_status st = price_phase(cc, hw, phase, sh, first_ctx, &cc->memo_val[i], kept);
            cc->eff_held = 0;
            SP_CHECK(st);
            cc->memo_key[i] = key;
        }
    }
    used[i] = 2;   /* the newer of the pair */
    if (used[i ^ 1u]) used[i ^ 1u] = 1;
    *out = &cc->memo_val[i];
    return SP_OK;
}

sp_status sp_cost_check_workload(const sp_model *m, const sp_workload *w)
{
    if (!m || !w) return spi_fail(SP_EINVAL, "sp_cost_check_workload: NULL argument");
    if (w->batch < 1 || w->prompt < 0 || w->gen < 0 || (w->prompt == 0 && w->gen == 0))
        return spi_fail(SP_EINVAL, "workload: batch %lld, prompt %lld, gen %lld: need batch >= 1 and some tokens",
                        (long long)w->batch, (long long)w->prompt, (long long)w->gen);
    spi_ckd ck = SPI_CKD_INIT;
    int64_t ctx = spi_ck_add(&ck, "context (prompt + gen)", w->prompt, w->gen);
    if (ck.overflow)
        return spi_fail(SP_EINVAL, "context: prompt %lld + gen %lld does not fit in 64 bits", (long long)w->prompt,
                        (long long)w->gen);
    sp_model_stats st;
    SP_CHECK(sp_model_derive(m, ctx, &st));
    struct { const char *what; int64_t a, b, c; const char *unit; } q[] = {
        {"tokens", w->batch, ctx, 1, "tokens"},
        {"KV cache bytes (fp32)", w->batch, ctx, st.kv_bytes_per_token * 2, "bytes per token"},
        {"prompt activation bytes (fp32)", w->batch, w->prompt, m->d_model * 4, "bytes per token"},
        {"logits bytes (fp32)", w->batch, m->vocab, 4, "bytes"},
        {"matmul FLOPs", w->batch, ctx, st.matmul_flops_per_token, "FLOPs per token"},
        {"attention FLOPs", w->batch, ctx, st.attention_flops_per_token, "FLOPs per token"},
    };
    for (size_t i = 0; i < SPI_ARRAY_LEN(q); i++) {
        spi_ckd c = SPI_CKD_INIT;
        spi_ck_mul3(&c, q[i].what, q[i].a, q[i].b, q[i].c);
        if (c.overflow)
            return spi_fail(SP_EINVAL,
                            "the request cannot be represented: %s = batch %lld × %lld × %lld %s does not fit in 64 bits",
                            q[i].what, (long long)q[i].a, (long long)q[i].b, (long long)q[i].c, q[i].unit);
    }
    return SP_OK;
}


/* sp_cost_check's figures, by offset (a constant table: the check runs on
 * every priced layout) */
#define CK_D(f) {#f, offsetof(sp_cost, f)}
static const struct { const char *name; size_t off; } check_d[] = {
    CK_D(prefill_s), CK_D(decode_step_s), CK_D(decode_s), CK_D(total_s), CK_D(tokens_per_s), CK_D(mfu),
    CK_D(mfu_prefill), CK_D(mfu_decode), CK_D(cost_chip_s_per_token),
    CK_D(prefill.time_s), CK_D(prefill.compute_s), CK_D(prefill.memory_s), CK_D(prefill.roofline_s),
    CK_D(prefill.dispatch_s), CK_D(prefill.comm_s), CK_D(prefill.host_s),
    CK_D(decode.time_s), CK_D(decode.compute_s), CK_D(decode.memory_s), CK_D(decode.roofline_s),
    CK_D(decode.dispatch_s), CK_D(decode.comm_s), CK_D(decode.host_s),
};
static const struct { const char *name; size_t off; } check_n[] = {
    CK_D(shortfall_bytes), CK_D(comm_bytes_prefill), CK_D(comm_bytes_decode_step), CK_D(capacity), CK_D(chips),
    CK_D(prefill.flops), CK_D(decode.flops), CK_D(prefill.comm_bytes), CK_D(decode.comm_bytes),
    CK_D(mem.weights), CK_D(mem.gathered_weights), CK_D(mem.kv), CK_D(mem.activations), CK_D(mem.workspace),
    CK_D(mem.scratch), CK_D(mem.staging), CK_D(mem.total), CK_D(mem.host_weights), CK_D(mem.host_kv),
    CK_D(mem.host_total), CK_D(host_peak), CK_D(host_capacity), CK_D(host_shortfall_bytes),
    CK_D(prefill.host_bytes), CK_D(decode.host_bytes),
};
#undef CK_D

sp_status sp_cost_check(const sp_cost *c)
{
    if (!c) return spi_fail(SP_EINVAL, "sp_cost_check: NULL argument");
    const char *base = (const char *)c;
    /* unrolled whole: the offsets are then constants, each figure a load and
     * a compare (the loop was ~12 instructions a figure) */
#pragma GCC unroll 32
    for (size_t i = 0; i < SPI_ARRAY_LEN(check_d); i++) {
        double v;
        memcpy(&v, base + check_d[i].off, sizeof v);
        if (!(v >= 0) || !isfinite(v))
            return spi_fail(SP_EINTERNAL, "cost model: %s is %g, not a finite figure >= 0", check_d[i].name, v);
    }
    for (int k = 0; k < SP_COLL_COUNT; k++)
        if (!(c->prefill.coll_s[k] >= 0 && isfinite(c->prefill.coll_s[k]) && c->decode.coll_s[k] >= 0 &&
              isfinite(c->decode.coll_s[k])))
            return spi_fail(SP_EINTERNAL, "cost model: %s time is not a finite figure >= 0", sp_coll_kind_name((sp_coll_kind)k));
#pragma GCC unroll 32
    for (size_t i = 0; i < SPI_ARRAY_LEN(check_n); i++) {
        int64_t v;
        memcpy(&v, base + check_n[i].off, sizeof v);
        if (v < 0) return spi_fail(SP_EINTERNAL, "cost model: %s is %lld, negative", check_n[i].name, (long long)v);
    }
    spi_ckd ck = SPI_CKD_INIT;
    int64_t sum = spi_ck_add(&ck, "", spi_ck_add(&ck, "", c->mem.weights, c->mem.gathered_weights),
                             spi_ck_add(&ck, "", spi_ck_add(&ck, "", c->mem.kv, c->mem.activations),
                                        spi_ck_add(&ck, "", spi_ck_add(&ck, "", c->mem.workspace, c->mem.scratch),
                                                   c->mem.staging)));
    if (ck.overflow || sum != c->mem.total)
        return spi_fail(SP_EINTERNAL, "cost model: memory parts sum to %lld%s, the total says %lld", (long long)sum,
                        ck.overflow ? " (overflowed)" : "", (long long)c->mem.total);
    int fits = c->mem.total <= c->capacity;
    int64_t short_by = fits ? 0 : c->mem.total - c->capacity;
    int host_fits = c->host_peak <= c->host_capacity;
    if (c->host_shortfall_bytes != (host_fits ? 0 : c->host_peak - c->host_capacity))
        return spi_fail(SP_EINTERNAL, "cost model: host memory short by %lld bytes, but %lld bytes against %lld",
                        (long long)c->host_shortfall_bytes, (long long)c->host_peak, (long long)c->host_capacity);
    fits &= host_fits;
    if (!c->feasible != !fits || c->shortfall_bytes != short_by)
        return spi_fail(SP_EINTERNAL, "cost model: says %s (short by %lld bytes) but %lld bytes %s a capacity of %lld",
                        c->feasible ? "it fits" : "it does not fit", (long long)c->shortfall_bytes,
                        (long long)c->mem.total, fits ? "fit in" : "exceed", (long long)c->capacity);
    return SP_OK;
}

/* One stage's prices: the kind of stage (first, last, layers) of stage s of
 * l, both phases (those the workload runs) and one chip's memory. */
typedef struct stage_kind {
    int first, last;
    int64_t layers;
    int64_t moe_phase;          /* first layer mod moe_every: which layers are MoE (0 without dense ones) */
    int64_t streamed[SP_WKIND_COUNT]; /* layers whose weights of each part are offloaded */
    int mesh[3];                /* the stage's tensor mesh (its own with stage_mesh) */
    sp_phase_cost pf, d1, dn;   /* pf: one micro-batch's prefill, every pass */
    int64_t pf_ps;              /* its time, the passes' times summed in picoseconds */
    int64_t units;              /* prefill passes per micro-batch */
    sp_mem_sizes mem;
    /* a ragged batch (stage_price_ragged): the first stage's kind carries the job's composed
     * times (ps; decode_s in seconds), every kind the bytes a chip of it sends over every
     * micro-batch (the prefill; the last decode step) */
    double ragged_decode_s;
    int64_t rag_pf_ps, rag_step_ps, rag_pf_bytes, rag_dn_bytes;
} stage_kind;

sp_workload sp_workload_padded(const sp_ragged *r)
{
    return (sp_workload){r->n, r->max_prompt, r->max_gen};
}

/* The flow shop of a ragged batch's micro-batches (sp_lower.h, "Ragged
 * batches"): t (M × S, ps) is micro-batch j's program's time on stage s,
 * the micro-batches entering in order; stage s starts micro-batch j when it
 * finished j − 1 and stage s − 1 finished j:
 *   C(j, s) = max(C(j − 1, s), C(j, s − 1)) + t(j, s),  makespan C(M − 1, S − 1)
 * (equal micro-batches: Σ_s t_s + (M − 1)·max_s t_s, sp_cost_pipe_terms).
 * c: S scratch.  −1 when it does not fit in 64 bits. */
static int64_t ragged_flow_shop(const int64_t *t, int M, int S, int64_t *c)
{
    for (int s = 0; s < S; s++) c[s] = 0;
    for (int j = 0; j < M; j++)
        for (int s = 0; s < S; s++) {
            int64_t start = s && c[s - 1] > c[s] ? c[s - 1] : c[s];
            if (__builtin_add_overflow(start, t[(size_t)j * S + s], &c[s])) return -1;
        }
    return c[S - 1];
}

/* One round of a ragged replica's micro-batches mb[0 .. M) (views): its
 * prefill (step 0) or decode step `step`, for the micro-batches taking part
 * (a decode step past a micro-batch's longest generation leaves it out).
 * Stage s's programs are priced: *slow the slowest micro-batch's, *bytes the
 * bytes a chip sends over them all.  all_stages: every stage's too, and
 * *ps the round's flow shop (ragged_flow_shop; decode with a per-token
 * barrier plus the barrier's time, as sp_cost_pipe_terms composes it).
 * nrep > 1 (experts split over replicas): mb[g·M + j] is replica g's
 * micro-batch j, the replicas running each pass and step together (the
 * expert all-to-all joins them, sp_lower.h "Ragged batches"): a unit's
 * time the slowest replica's, a micro-batch taking part while any
 * replica's does, *bytes the most any replica's chip sends. */
static sp_status ragged_round(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_shape *sh, sp_phase ph,
                              const sp_ragged *mb, int nrep, int64_t step, int s, int all_stages,
                              const sp_cost_opts *opts, sp_program *p, sp_phase_cost *slow, int64_t *bytes, int64_t *ps)
{
    static const int64_t as_lowered[2] = {0, 0};
    const int M = l->microbatches, S = l->stages;
    /* prefill passes per micro-batch (prefill_chunk: each its own sequences, a job of the flow
     * shop after the micro-batch's earlier passes, as the executor runs them) */
    const int64_t U = ph == SP_PHASE_PREFILL && l->prefill_chunk ? mb[0].n / l->prefill_chunk : 1;
    int64_t *t = U < 1 ? NULL : calloc(((size_t)M * (size_t)U + 1) * (size_t)S + (size_t)nrep, sizeof *t);
    if (!t) return spi_fail(SP_ENOMEM, "cost model: a ragged batch's %d × %lld × %d stage times", M, (long long)U, S);
    int64_t *rep_bytes = t + ((size_t)M * (size_t)U + 1) * (size_t)S;   /* [nrep] */
    sp_status st = SP_OK;
    int64_t ma = 0;
    int64_t slow_ps = -1;
    *bytes = 0;
    *ps = 0;
    for (int j = 0; j < M && !st; j++) {
        if (ph == SP_PHASE_DECODE && step > (nrep > 1 ? sp_ragged_peers_max_gen(&mb[j]) : mb[j].max_gen)) continue;
        for (int g = 0; g < nrep && !st; g++) {
            const sp_ragged *q = &mb[(size_t)g * M + j];
            sp_phase_cost mine;   /* stage s's price of the micro-batch: its passes summed */
            int64_t mine_ps = 0;
            memset(&mine, 0, sizeof mine);
            for (int64_t u = 0; u < U && !st; u++)
                for (int o = all_stages ? 0 : s; o < (all_stages ? S : s + 1) && !st; o++) {
                    sp_phase_cost c;
                    sp_shape x = *sh;
                    if (ph == SP_PHASE_PREFILL) x.q_len = x.context = q->max_prompt;
                    if ((st = sp_lower_ragged(m, l, ph, &x, q, ph == SP_PHASE_PREFILL ? u : step, o, p)) ||
                        (st = price_program(opts->cache, p, hw, as_lowered, &c, NULL, NULL, 0)))
                        break;
                    int64_t tp = spi_ps(c.time_s), *tu = &t[(size_t)(ma + u) * S + o];
                    if (tp > *tu) *tu = tp;
                    if (o == s) {
                        add_phase(&mine, &c);
                        if (__builtin_add_overflow(mine_ps, tp, &mine_ps) ||
                            __builtin_add_overflow(rep_bytes[g], c.comm_bytes, &rep_bytes[g]))
                            st = spi_fail(SP_EINVAL, "a micro-batch's time (ps) or bytes sent per chip do not fit in 64 bits");
                    }
                }
            if (!st && mine_ps > slow_ps) {
                slow_ps = mine_ps;
                *slow = mine;
            }
        }
        ma += U;
    }
    for (int g = 0; g < nrep; g++)
        if (rep_bytes[g] > *bytes) *bytes = rep_bytes[g];
    int64_t sync_ps = 0;
    if (!st && all_stages) {
        if ((*ps = ragged_flow_shop(t, (int)ma, S, t + (size_t)M * (size_t)U * S)) < 0 ||
            (ph == SP_PHASE_DECODE && spi_token_sync(hw, l, &sync_ps) && __builtin_add_overflow(*ps, sync_ps, ps)))
            st = spi_fail(SP_EINVAL, "%s time (ps) does not fit in 64 bits (the request is too large to represent)",
                          sp_phase_name(ph));
    }
    free(t);
    return st;
}

/* Replica rep's sequences of a ragged batch r on stage s (nrep > 1: replicas
 * rep .. rep + nrep − 1, experts split over them, running together,
 * ragged_round): its micro-batches' prefill and decode (each micro-batch its own programs, sp_ragged_micro),
 * its chips' memory (sp_lower_ragged_mem: every buffer the largest micro-batch's; the KV cache of
 * every micro-batch alike).  Stage 0 (all_stages) also composes the
 * replica's times over every stage: the prefill's flow shop, and decode's
 * steps one after another, each a flow shop of the micro-batches taking
 * part (a step's micro-batches are not overlapped with the next step's;
 * decode steps at the ends of each run of steps with the same sequences,
 * sp_ragged_segment_end, the steps between priced as the mean of the two). */
static sp_status replica_price_ragged(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_ragged *r,
                                      int rep, int nrep, const sp_cost_opts *opts, int s, stage_kind *k, int run_pf,
                                      sp_program p[3])
{
    const int R = l->replicas, M = l->microbatches, all = s == 0;
    int64_t per = r->n / R;
    sp_ragged v;   /* the sequences of replicas rep .. rep + nrep − 1 (ragged_round: they run together) */
    SP_CHECK(sp_ragged_slice(r, rep * per, nrep * per, &v));
    sp_ragged *mb = calloc((size_t)M * (size_t)nrep, sizeof *mb);
    if (!mb) return spi_fail(SP_ENOMEM, "cost model: a ragged replica's %d micro-batches", M);
    sp_status st = SP_OK;
    for (int g = 0; g < nrep && !st; g++)
        for (int j = 0; j < M && !st; j++) st = sp_ragged_micro(r, R, M, rep + g, j, &mb[(size_t)g * M + j]);
    /* the job's batch (the layout splits it) and the batch's longest context (every slot's) */
    sp_shape pf_sh = {r->n, v.max_prompt, v.max_prompt, r->max_context, opts->act_dtype, 0};
    sp_shape dc_sh = {r->n, 1, r->max_context, r->max_context, opts->act_dtype, 0};
    if (run_pf && !st)
        st = ragged_round(m, hw, l, &pf_sh, SP_PHASE_PREFILL, mb, nrep, 0, s, all, opts, &p[2], &k->pf,
                          &k->rag_pf_bytes, &k->rag_pf_ps);
    if (!st) k->pf_ps = spi_ps(k->pf.time_s);
    /* memory: one arena runs every micro-batch's programs (the executor's rule); the fullest
     * replica's chip */
    for (int g = 0; g < nrep && !st; g++) {
        sp_mem_sizes mem;
        st = sp_lower_ragged_mem(m, l, &pf_sh, &dc_sh, mb + (size_t)g * M, M, s, run_pf ? &p[0] : NULL, &p[1], &mem);
        if (!st && (g == 0 || mem.total > k->mem.total)) k->mem = mem;
    }
    for (int64_t s0 = 1; s0 <= v.max_gen && !st;) {
        int64_t s1 = sp_ragged_segment_end(&v, s0), t[2] = {0, 0}, by[2] = {0, 0};
        sp_phase_cost c[2];
        for (int e = 0; e < 2 && !st; e++) {
            if (e && s1 == s0) {
                c[1] = c[0];
                t[1] = t[0];
                by[1] = by[0];
            } else {
                st = ragged_round(m, hw, l, &dc_sh, SP_PHASE_DECODE, mb, nrep, e ? s1 : s0, s, all, opts, &p[2],
                                  &c[e], &by[e], &t[e]);
            }
        }
        if (st) break;
        /* as a uniform batch's decode_s = gen · (first + last) / 2 */
        k->ragged_decode_s += (double)(s1 - s0 + 1) * 0.5 * ((double)t[0] * 1e-12 + (double)t[1] * 1e-12);
        if (s0 == 1) k->d1 = c[0];
        k->dn = c[1];
        k->rag_dn_bytes = by[1];
        k->rag_step_ps = t[1];
        s0 = s1 + 1;
    }
    free(mb);
    return st;
}

/* A ragged batch's stage s (sp_cost_eval_ragged): each replica runs its own
 * sequences and each of its micro-batches its own (sp_lower.h, "Ragged
 * batches"), so the first stage's kind carries the job's times composed
 * over every stage (rag_pf_ps, ragged_decode_s, rag_step_ps: the slowest
 * replica's), every kind its own breakdown (the slowest micro-batch's of
 * the slowest replica), the chip that holds the most the memory.  Programs
 * are priced as lowered (each decode step at its own contexts). */
static sp_status stage_price_ragged(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                                    const sp_ragged *r, const sp_cost_opts *opts, int s, stage_kind *k, int run_pf)
{
    if (r->n != w->batch || r->max_prompt != w->prompt || r->max_gen != w->gen)
        return spi_fail(SP_EINVAL, "workload: a ragged batch's batch, prompt and gen are its sequences (%lld), longest "
                                   "prompt (%lld) and longest generation (%lld)",
                        (long long)r->n, (long long)r->max_prompt, (long long)r->max_gen);
    if (l->replicas < 1 || l->microbatches < 1 || r->n % ((int64_t)l->replicas * l->microbatches))
        return spi_fail(SP_EINVAL, "ragged batch of %lld sequences does not split into %d replicas × %d micro-batches",
                        (long long)r->n, l->replicas, l->microbatches);
    sp_program *p = malloc(3 * sizeof *p);   /* prefill, decode (step 1, sized for every step), one step */
    if (!p) return spi_fail(SP_ENOMEM, "cost model: programs of a ragged batch");
    sp_status st = SP_OK;
    int64_t l0;
    /* experts split over replicas: every replica runs each pass and step together (ragged_round) */
    const int nrep = sp_lower_ragged_lockstep(m, l);
    memset(k, 0, sizeof *k);
    for (int rep = 0; rep < l->replicas && !st; rep += nrep) {
        stage_kind kr;
        memset(&kr, 0, sizeof kr);
        if ((st = replica_price_ragged(m, hw, l, r, rep, nrep, opts, s, &kr, run_pf, p))) break;
        /* stage 0 compares replicas by their composed times, the others by their own stage's */
        int64_t pk = s == 0 ? kr.rag_pf_ps : kr.pf_ps, pm = s == 0 ? k->rag_pf_ps : k->pf_ps;
        if (rep == 0 || pk > pm) {
            k->pf = kr.pf;
            k->pf_ps = kr.pf_ps;
            k->rag_pf_ps = kr.rag_pf_ps;
        }
        if (kr.rag_pf_bytes > k->rag_pf_bytes) k->rag_pf_bytes = kr.rag_pf_bytes;
        if (rep == 0 || kr.ragged_decode_s > k->ragged_decode_s) {
            k->ragged_decode_s = kr.ragged_decode_s;
            k->d1 = kr.d1;
            k->dn = kr.dn;
            k->rag_step_ps = kr.rag_step_ps;
        }
        if (kr.rag_dn_bytes > k->rag_dn_bytes) k->rag_dn_bytes = kr.rag_dn_bytes;
        if (rep == 0 || kr.mem.total > k->mem.total) k->mem = kr.mem;
    }
    free(p);
    sp_layout_stage_layers(l, m->n_layers, s, &l0, &k->layers);
    /* the stage's kind as eval_one matches kinds (stage_price sets the same) */
    k->moe_phase = sp_model_dense_ff(m) > 0 ? l0 % m->moe_every : 0;
    for (int q = 0; q < SP_WKIND_COUNT; q++) k->streamed[q] = sp_layout_offload_kind_layers(l, s, (sp_wkind)q);
    k->first = s == 0;
    k->last = s == l->stages - 1;
    /* prefill passes per micro-batch (ragged_round prices each) */
    k->units = l->prefill_chunk ? r->n / ((int64_t)l->replicas * l->microbatches) / l->prefill_chunk : 1;
    sp_layout_stage_mesh(l, s, k->mesh);
    return st;
}

/* dc: NULL, or the decode prices of this stage's kind (dc_reuse: taken from
 * *dc instead of looked up; else kept in *dc), see eval_chunked */
static sp_status stage_price(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                             const sp_ragged *rg, const sp_cost_opts *opts, int s, int *bound, layer_keep kept[SP_PHASE_COUNT], stage_kind *k,
                             int run_pf, phase_val *dc, int dc_reuse)
{
    if (rg) return stage_price_ragged(m, hw, l, w, rg, opts, s, k, run_pf);
    int64_t l0, nl;
    sp_layout_stage_layers(l, m->n_layers, s, &l0, &nl);
    memset(k, 0, sizeof *k);
    k->first = s == 0;
    k->last = s == l->stages - 1;
    k->layers = nl;
    k->moe_phase = sp_model_dense_ff(m) > 0 ? l0 % m->moe_every : 0;
    for (int q = 0; q < SP_WKIND_COUNT; q++) k->streamed[q] = sp_layout_offload_kind_layers(l, s, (sp_wkind)q);
    k->units = 1;
    sp_layout_stage_mesh(l, s, k->mesh);
    spi_ckd ck = SPI_CKD_INIT;
    int64_t max_ctx = w->prompt + w->gen;
    sp_shape pf_sh = {w->batch, w->prompt, w->prompt, max_ctx, opts->act_dtype, 0};
    sp_shape dc_sh = {w->batch, 1, max_ctx, max_ctx, opts->act_dtype, 0};
    const phase_val *v;
    /* buffers of both phases (the decode lookup may reuse the prefill memo slot) */
    int64_t pf_bufs[SP_BUF_COUNT], dc_bufs[SP_BUF_COUNT], pf_scr[SP_SCR_COUNT], dc_scr[SP_SCR_COUNT];
    if (run_pf) {
        /* the last pass (the whole prefill when unchunked) sizes the memory: a chip
         * holds one pass's activations; the passes' prices add up */
        SP_CHECK(phase_prices(m, hw, l, SP_PHASE_PREFILL, &pf_sh, s, 0, opts, bound, &kept[SP_PHASE_PREFILL], &v));
        k->mem = v->mem;
        memcpy(pf_bufs, v->buf_bytes, sizeof pf_bufs);
        memcpy(pf_scr, v->scratch_bytes, sizeof pf_scr);
        int nt = v->nterms;
        int64_t left[3], num[3];
        memcpy(left, v->left, sizeof left);
        memcpy(num, v->num, sizeof num);
        k->units = num[0] / 2 * (nt > 1 ? left[1] + 1 : 1);
        int64_t ps2 = 0;
        for (int i = 0; i < nt; i++) {
            sp_shape ps = pf_sh;
            ps.passes_left = left[i];
            if (i) SP_CHECK(phase_prices(m, hw, l, SP_PHASE_PREFILL, &ps, s, 0, opts, bound, &kept[SP_PHASE_PREFILL], &v));
            add_phase_half(&k->pf, &v->c0, num[i], &ck);
            ps2 = spi_ck_add(&ck, "prefill time (ps)", ps2, spi_ck_mul(&ck, "prefill time (ps)", spi_ps(v->c0.time_s), num[i]));
        }
        k->pf.comm_bytes /= 2;
        k->pf.flops /= 2;
        k->pf.host_bytes /= 2;
        k->pf_ps = ps2 / 2;
    }
    if (w->gen > 0) {
        if (dc && dc_reuse) {
            v = dc;
        } else {
            SP_CHECK(phase_prices(m, hw, l, SP_PHASE_DECODE, &dc_sh, s, w->prompt + 1, opts, bound, &kept[SP_PHASE_DECODE], &v));
            if (dc) *dc = *v;
        }
        k->d1 = v->c0;
        k->dn = v->c1;
        int64_t pf_ws = run_pf ? k->mem.workspace : 0;
        k->mem = v->mem;   /* weights and KV: the stage's, either phase's agrees */
        if (pf_ws > k->mem.workspace) k->mem.workspace = pf_ws;   /* the larger tile */
        memcpy(dc_bufs, v->buf_bytes, sizeof dc_bufs);
        memcpy(dc_scr, v->scratch_bytes, sizeof dc_scr);
    }
    if (ck.overflow) return spi_fail(SP_EINVAL, "%s do not fit in 64 bits (the request is too large to represent)", ck.what);
    SP_CHECK(sp_lower_mem_sizes_merge(&k->mem, run_pf ? pf_bufs : NULL, w->gen > 0 ? dc_bufs : NULL, &k->mem));
    return sp_lower_mem_scratch_merge(run_pf ? pf_scr : NULL, w->gen > 0 ? dc_scr : NULL, &k->mem);
}

void sp_cost_pipe_terms(const sp_hw *hw, const sp_layout *l, int64_t prefill_units, sp_cost_pipe *out)
{
    const int64_t M = l->microbatches, u = prefill_units > 0 ? prefill_units : 1;
    memset(out, 0, sizeof *out);
    /* prefill: the flow shop of stages and M·u passes (a stage's time t_s is
     * one micro-batch's u passes; each pass takes t_s / u) */
    out->phase[SP_PHASE_PREFILL] = (sp_cost_pipe_phase){1, {1, 0}, {M * u - 1, 0}, u, 0};
    int64_t sync_ps;
    if (spi_token_sync(hw, l, &sync_ps))
        /* a runtime that synchronises after every token runs each decode step
         * as prefill runs (a flow shop of stages and micro-batches), then syncs */
        out->phase[SP_PHASE_DECODE] = (sp_cost_pipe_phase){1, {1, 0}, {M - 1, 0}, 1, sync_ps};
    else
        /* micro-batches queued across token steps: the bubble is paid once,
         * a step takes the slowest stage M times, or every stage once */
        out->phase[SP_PHASE_DECODE] = (sp_cost_pipe_phase){2, {0, 1}, {M, 0}, 1, 0};
}

int64_t sp_cost_pipe_compose(const sp_cost_pipe_phase *f, int64_t sum_ps, int64_t max_ps)
{
    int64_t best = INT64_MIN;
    for (int i = 0; i < f->n_forms; i++) {
        int64_t a, b, t;
        if (__builtin_mul_overflow(f->sum_coef[i], sum_ps, &a) || __builtin_mul_overflow(f->max_coef[i], max_ps, &b) ||
            __builtin_add_overflow(a, b, &t))
            return -1;
        if (t > best) best = t;
    }
    int64_t r;
    if (__builtin_add_overflow(best / (f->div > 0 ? f->div : 1), f->const_ps, &r)) return -1;
    return r;
}

static sp_status stage_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                            const sp_ragged *rg, const sp_cost_opts *opts, int stage, int run_pf, sp_stage_cost *out);

sp_status sp_cost_stage_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                             const sp_cost_opts *opts, int stage, sp_stage_cost *out)
{
    return stage_eval(m, hw, l, w, NULL, opts, stage, w && w->prompt > 0, out);
}

sp_status sp_cost_stage_eval_decode(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                                    const sp_cost_opts *opts, int stage, sp_stage_cost *out)
{
    return stage_eval(m, hw, l, w, NULL, opts, stage, 0, out);
}

sp_status sp_cost_stage_eval_ragged(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_ragged *r,
                                    const sp_cost_opts *opts, int stage, sp_stage_cost *out)
{
    if (!r) return spi_fail(SP_EINVAL, "sp_cost_stage_eval_ragged: NULL argument");
    sp_workload w = sp_workload_padded(r);
    return stage_eval(m, hw, l, &w, r, opts, stage, w.prompt > 0, out);
}

/* run_pf 0: the decode alone, as eval_one prices a decode group's stage */
static sp_status stage_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                            const sp_ragged *rg, const sp_cost_opts *opts, int stage, int run_pf, sp_stage_cost *out)
{
    if (!m || !hw || !l || !w || !out) return spi_fail(SP_EINVAL, "sp_cost_stage_eval: NULL argument");
    if (stage < 0 || stage >= l->stages)
        return spi_fail(SP_EINVAL, "sp_cost_stage_eval: stage %d outside 0..%d", stage, l->stages - 1);
    if (w->batch < 1 || w->prompt < 0 || w->gen < 0 || (w->prompt == 0 && w->gen == 0))
        return spi_fail(SP_EINVAL, "workload: batch %lld, prompt %lld, gen %lld: need batch >= 1 and some tokens",
                        (long long)w->batch, (long long)w->prompt, (long long)w->gen);
    sp_cost_opts o;
    sp_cost_cache *own;
    SP_CHECK(opts_resolve(opts, &o, &own));
    stage_kind k;
    int bound = 0;
    layer_keep kept[SP_PHASE_COUNT] = {{-1, {0}, {0}, 0}, {-1, {0}, {0}, 0}};
    sp_status st = stage_price(m, hw, l, w, rg, &o, stage, &bound, kept, &k, run_pf, NULL, 0);
    sp_cost_cache_free(own);
    SP_CHECK(st);
    memset(out, 0, sizeof *out);
    sp_layout_stage_layers(l, m->n_layers, stage, &out->first_layer, &out->layers);
    out->prefill = k.pf;
    out->decode = k.dn;
    out->prefill_ps = run_pf ? k.pf_ps : 0;
    out->prefill_units = k.units;
    out->decode1_ps = w->gen > 0 ? spi_ps(k.d1.time_s) : 0;
    out->decode_ps = w->gen > 0 ? spi_ps(k.dn.time_s) : 0;
    out->mem = k.mem;
    return SP_OK;
}

/* the largest system sp_hw describes (a 4096^3 torus is refused above 2^24 chips) */
#define SP_COST_MAX_CHIPS (1 << 24)

static sp_status eval_one(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                          const sp_ragged *rg, const sp_cost_opts *opts, int run_pf, sp_cost *out, phase_val *dc,
                          int dc_reuse);
static sp_status eval_groups(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                             const sp_cost_opts *opts, sp_cost *out);

/* Pipeline timing over stages (sp_cost.h): returns the time; sums the breakdown. */
sp_status sp_cost_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                       const sp_cost_opts *opts, sp_cost *out)
{
    sp_cost_opts o;
    sp_cost_cache *own;
    SP_CHECK(opts_resolve(opts, &o, &own));
    sp_status st = l && sp_layout_disaggregated(l) ? eval_groups(m, hw, l, w, &o, out)
                                                   : eval_one(m, hw, l, w, NULL, &o, w ? w->prompt > 0 : 0, out, NULL, 0);
    sp_cost_cache_free(own);
    return st;
}

sp_status sp_cost_eval_ragged(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_ragged *r,
                              const sp_cost_opts *opts, sp_cost *out)
{
    if (!r || r->n < 1) return spi_fail(SP_EINVAL, "sp_cost_eval_ragged: no sequences");
    if (l && sp_layout_disaggregated(l))
        return spi_fail(SP_EINVAL, "ragged batches on separate prefill and decode chip groups: not implemented");
    sp_workload w = sp_workload_padded(r);   /* the envelope: the workload checks, the layout's splits */
    sp_cost_opts o;
    sp_cost_cache *own;
    SP_CHECK(opts_resolve(opts, &o, &own));
    sp_status st = eval_one(m, hw, l, &w, r, &o, 1, out, NULL, 0);
    sp_cost_cache_free(own);
    return st;
}

/* Separate prefill and decode groups (sp_cost.h): each group priced as its
 * own layout, the prefill group for the prompt alone (its cache holds the
 * prompt), the decode group for the generated tokens alone (its memory
 * holds no prefill activations), joined by the KV transfer. */
static sp_status eval_groups(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                             const sp_cost_opts *opts, sp_cost *out)
{
    if (!m || !hw || !w || !out) return spi_fail(SP_EINVAL, "sp_cost_eval: NULL argument");
    if (w->batch < 1 || w->prompt < 1 || w->gen < 1)
        return opts->quiet ? SP_EINVAL
                                   : spi_fail(SP_EINVAL, "separate prefill and decode groups need a prompt and generated "
                                                         "tokens (batch %lld, prompt %lld, gen %lld)",
                                              (long long)w->batch, (long long)w->prompt, (long long)w->gen);
    sp_layout g[SP_PHASE_COUNT];
    sp_cost c[SP_PHASE_COUNT];
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        sp_layout_phase_group(l, (sp_phase)p, &g[p]);
        SP_CHECK(sp_cost_eval_group(m, hw, &g[p], (sp_phase)p, w, opts, &c[p]));
    }
    sp_kv_xfer_cost x;
    SP_CHECK(sp_cost_kv_xfer(m, hw, l, w->batch, w->prompt, SP_XFER_ONE_JOB, &x));
    const sp_cost *pf = &c[SP_PHASE_PREFILL], *dc = &c[SP_PHASE_DECODE];
    memset(out, 0, sizeof *out);
    out->disaggregated = 1;
    out->chips = pf->chips + dc->chips;
    out->capacity = pf->capacity;
    out->torus = pf->torus;
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        out->group_chips[p] = c[p].chips;
        out->group_feasible[p] = c[p].feasible;
        out->group_shortfall[p] = c[p].shortfall_bytes;
        out->group_mem[p] = c[p].mem;
    }
    const sp_cost *big = pf->mem.total >= dc->mem.total ? pf : dc;
    out->mem = big->mem;
    out->shortfall_bytes = big->shortfall_bytes;
    out->feasible = pf->feasible && dc->feasible;
    out->prefill_s = pf->prefill_s;
    out->prefill = pf->prefill;
    out->comm_bytes_prefill = pf->comm_bytes_prefill;
    out->mfu_prefill = pf->mfu_prefill;
    out->decode_step_s = dc->decode_step_s;
    out->decode_s = dc->decode_s;
    out->decode = dc->decode;
    out->comm_bytes_decode_step = dc->comm_bytes_decode_step;
    out->mfu_decode = dc->mfu_decode;
    out->kv_transfer_s = x.seconds;
    out->kv_transfer_bytes = x.bytes;
    out->total_s = out->prefill_s + out->kv_transfer_s + out->decode_s;
    out->period_s = (out->prefill_s > out->decode_s ? out->prefill_s : out->decode_s) + out->kv_transfer_s;
    double gen_tokens = (double)w->batch * w->gen;
    out->tokens_per_s = gen_tokens / out->period_s;
    out->cost_chip_s_per_token = out->chips * out->period_s / gen_tokens;
    /* model FLOPs of a batch over the whole job's chips for one period: 2·params per token,
     * recovered from the groups' own MFU (their peaks and params are the same) */
    double pf_flops = pf->mfu_prefill * sp_hw_compute_peak(hw, l->weights) * pf->chips * pf->prefill_s;
    double dc_flops = dc->mfu_decode * sp_hw_compute_peak(hw, l->weights) * dc->chips * dc->decode_s;
    out->mfu = (pf_flops + dc_flops) / (sp_hw_compute_peak(hw, l->weights) * out->chips * out->period_s);
    return sp_cost_check(out);
}

sp_status sp_cost_eval_group(const sp_model *m, const sp_hw *hw, const sp_layout *g, sp_phase ph,
                             const sp_workload *w, const sp_cost_opts *opts, sp_cost *out)
{
    if (!m || !hw || !g || !w || !out) return spi_fail(SP_EINVAL, "sp_cost_eval_group: NULL argument");
    if (sp_layout_disaggregated(g))
        return opts && opts->quiet ? SP_EINVAL
                                   : spi_fail(SP_EINVAL, "sp_cost_eval_group: a group's layout is one group");
    if (ph == SP_PHASE_PREFILL) {
        sp_workload wp = {w->batch, w->prompt, 0};   /* its cache holds the prompt */
        return sp_cost_eval(m, hw, g, &wp, opts, out);
    }
    if (!opts || !opts->quiet) SP_CHECK(sp_cost_check_workload(m, w));
    sp_cost_opts o;
    sp_cost_cache *own;
    SP_CHECK(opts_resolve(opts, &o, &own));
    sp_status st = eval_one(m, hw, g, w, NULL, &o, 0, out, NULL, 0);
    sp_cost_cache_free(own);
    return st;
}

/* dc: NULL, or one phase_val per kind of stage (SPI_STAGE_KINDS): the
 * decode prices of each kind, kept (dc_reuse 0) or taken (dc_reuse 1) by
 * stage_price, see eval_chunked */
static sp_status eval_one(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                          const sp_ragged *rg, const sp_cost_opts *opts, int run_pf, sp_cost *out, phase_val *dc,
                          int dc_reuse)
{
    if (!m || !hw || !l || !w || !out) return spi_fail(SP_EINVAL, "sp_cost_eval: NULL argument");
    if (w->batch < 1 || w->prompt < 0 || w->gen < 0 || (w->prompt == 0 && w->gen == 0))
        return spi_fail(SP_EINVAL, "workload: batch %lld, prompt %lld, gen %lld: need batch >= 1 and some tokens",
                        (long long)w->batch, (long long)w->prompt, (long long)w->gen);
    sp_cost_cache *cc = opts->cache;
    if (!opts->quiet) {
        /* searches check once, up front (quiet); others too, once per
         * cache: the check depends on the model and workload alone, and the
         * last pair that passed is kept (a caller pricing many layouts of
         * one request pays it once) */
        if (!cc->checked.ok || memcmp(&cc->checked.w, w, sizeof *w) || memcmp(&cc->checked.m, m, sizeof *m)) {
            cc->checked.ok = 0;
            SP_CHECK(sp_cost_check_workload(m, w));
            memcpy(&cc->checked.m, m, sizeof *m);   /* bytes, padding included: compared with memcmp */
            cc->checked.w = *w;
            cc->checked.ok = 1;
        }
    }
    memset(out, 0, sizeof *out);
    out->chips = sp_layout_chips(l);
    if (out->chips < 1 || out->chips > SP_COST_MAX_CHIPS)
        return spi_fail(SP_EINVAL, "layout of %lld chips: at most %d", (long long)out->chips, SP_COST_MAX_CHIPS);
    spi_ckd ck = SPI_CKD_INIT;
    if (hw->topo == SP_TOPO_TORUS && !sp_layout_torus_map(l, hw, &out->torus))
        return opts->quiet ? SP_EINVAL
                           : spi_fail(SP_EINVAL, "stages %d × replicas %d × mesh %dx%dx%d fits no torus slice %s offers",
                                      l->stages, l->replicas, l->mesh[0], l->mesh[1], l->mesh[2], hw->name);
    int64_t max_ctx = w->prompt + w->gen;
    int M = l->microbatches, S = l->stages;
    /* stage times in whole picoseconds (as scheduled), rolled up exactly */
    int64_t pf_sum = 0, pf_max = 0, d1_sum = 0, d1_max = 0, dn_sum = 0, dn_max = 0;
    out->capacity = (int64_t)(hw->hbm_bytes * hw->hbm_usable);
    int64_t worst = INT64_MIN;
    /* A stage's program depends on the stage only through (first, last,
     * layers): price each distinct kind once (at most four for the even
     * split, one per stage for an uneven one) and reuse it. */
    int64_t units = 1;              /* prefill passes per micro-batch (every stage alike) */
    stage_kind kinds[SPI_STAGE_KINDS];
    int nkinds = 0;
    int bound = 0;   /* memo_bind done */
    layer_keep kept[SP_PHASE_COUNT] = {{-1, {0}, {0}, 0}, {-1, {0}, {0}, 0}};   /* layers prog[phase] holds from an earlier stage (price_phase) */
    for (int s = 0; s < S; s++) {
        int64_t l0, nl;
        int mesh[3];
        sp_layout_stage_layers(l, m->n_layers, s, &l0, &nl);
        sp_layout_stage_mesh(l, s, mesh);
        stage_kind *k = NULL;
        for (int i = 0; i < nkinds && !k; i++)
            if (kinds[i].first == (s == 0) && kinds[i].last == (s == S - 1) && kinds[i].layers == nl &&
                kinds[i].moe_phase == (sp_model_dense_ff(m) > 0 ? l0 % m->moe_every : 0) &&
                kinds[i].streamed[SP_WKIND_ATTN] == sp_layout_offload_kind_layers(l, s, SP_WKIND_ATTN) &&
                kinds[i].streamed[SP_WKIND_FFN] == sp_layout_offload_kind_layers(l, s, SP_WKIND_FFN) && !memcmp(kinds[i].mesh, mesh, sizeof mesh))
                k = &kinds[i];
        if (!k) {
            if (nkinds == (int)SPI_ARRAY_LEN(kinds))
                return spi_fail(SP_EINTERNAL, "cost model: more than %d kinds of stage", nkinds);
            k = &kinds[nkinds++];
            SP_CHECK(stage_price(m, hw, l, w, rg, opts, s, &bound, kept, k, run_pf, dc ? &dc[k - kinds] : NULL, dc_reuse));
            units = k->units;
        }
        if (opts->stage_times)   /* as sp_cost_stage_eval reports them */
            opts->stage_times[s] = (sp_stage_time){run_pf ? k->pf_ps : 0,
                                                   w->gen > 0 ? spi_ps(k->d1.time_s) : 0,
                                                   w->gen > 0 ? spi_ps(k->dn.time_s) : 0, k->units};
        if (run_pf) {
            int64_t t = k->pf_ps;
            pf_sum += t;
            if (t > pf_max) pf_max = t;
            add_phase(&out->prefill, &k->pf);
            int64_t cb = rg ? k->rag_pf_bytes : spi_ck_mul(&ck, "prefill bytes sent per chip", k->pf.comm_bytes, M);
            if (cb > out->comm_bytes_prefill) out->comm_bytes_prefill = cb;
        }
        if (w->gen > 0) {
            int64_t t1 = spi_ps(k->d1.time_s), tn = spi_ps(k->dn.time_s);
            d1_sum += t1;
            dn_sum += tn;
            if (t1 > d1_max) d1_max = t1;
            if (tn > dn_max) dn_max = tn;
            add_phase(&out->decode, &k->dn);
            int64_t cb = rg ? k->rag_dn_bytes : spi_ck_mul(&ck, "decode bytes sent per chip", k->dn.comm_bytes, M);
            if (cb > out->comm_bytes_decode_step) out->comm_bytes_decode_step = cb;
        }
        if (k->mem.total > worst) {
            worst = k->mem.total;
            out->mem = k->mem;
        }
        if (k->mem.host_total > out->host_peak) out->host_peak = k->mem.host_total;
    }
    if (ck.overflow) return spi_fail(SP_EINVAL, "%s do not fit in 64 bits (the request is too large to represent)", ck.what);
    out->shortfall_bytes = worst > out->capacity ? worst - out->capacity : 0;
    out->host_capacity = hw->host_bytes;
    out->host_shortfall_bytes = out->host_peak > out->host_capacity ? out->host_peak - out->host_capacity : 0;
    out->feasible = out->shortfall_bytes == 0 && out->host_shortfall_bytes == 0;

    sp_cost_pipe pipe;
    sp_cost_pipe_terms(hw, l, units, &pipe);
    if (run_pf) {
        int64_t pf = sp_cost_pipe_compose(&pipe.phase[SP_PHASE_PREFILL], pf_sum, pf_max);
        if (pf < 0) return spi_fail(SP_EINVAL, "prefill time (ps) does not fit in 64 bits (the request is too large to represent)");
        out->prefill_s = (double)(rg ? kinds[0].rag_pf_ps : pf) * 1e-12;   /* ragged: the first stage's kind */
    }
    if (w->gen > 0) {
        int64_t t1 = sp_cost_pipe_compose(&pipe.phase[SP_PHASE_DECODE], d1_sum, d1_max);
        int64_t tn = sp_cost_pipe_compose(&pipe.phase[SP_PHASE_DECODE], dn_sum, dn_max);
        if (t1 < 0 || tn < 0)
            return spi_fail(SP_EINVAL, "decode step time (ps) does not fit in 64 bits (the request is too large to represent)");
        double step1 = (double)t1 * 1e-12, stepn = (double)tn * 1e-12;
        out->decode_step_s = stepn;
        out->decode_s = w->gen * 0.5 * (step1 + stepn);
        if (rg) {   /* the first stage's kind: every stage's steps */
            out->decode_s = kinds[0].ragged_decode_s;
            out->decode_step_s = (double)kinds[0].rag_step_ps * 1e-12;
        }
    }
    out->total_s = out->prefill_s + out->decode_s;

    int64_t params_active;
    if (bound && cc->memo.params_ctx == max_ctx) {
        params_active = cc->memo.params_active;
    } else {
        sp_model_stats st;
        SP_CHECK(sp_model_derive(m, max_ctx, &st));
        params_active = st.params_active;
        if (bound) {
            cc->memo.params_ctx = max_ctx;
            cc->memo.params_active = params_active;
        }
    }
    double peak = sp_hw_compute_peak(hw, l->weights) * out->chips;
    double n2 = 2.0 * (double)params_active;
    /* tokens: a ragged batch's actual ones */
    double prompt_tokens = rg ? (double)rg->sum_prompt : (double)w->batch * w->prompt;
    double gen_tokens = rg ? (double)rg->sum_gen : (double)w->batch * w->gen;
    if (w->gen > 0) {
        out->tokens_per_s = gen_tokens / out->total_s;
        out->cost_chip_s_per_token = out->chips * out->total_s / gen_tokens;
        out->mfu_decode = n2 * gen_tokens / (peak * out->decode_s);
    } else {
        out->tokens_per_s = prompt_tokens / out->prefill_s;
        out->cost_chip_s_per_token = out->chips * out->prefill_s / prompt_tokens;
    }
    if (run_pf) out->mfu_prefill = n2 * prompt_tokens / (peak * out->prefill_s);
    /* a decode group's (run_pf 0) tokens are the generated ones alone */
    out->mfu = n2 * ((run_pf ? prompt_tokens : 0) + gen_tokens) / (peak * out->total_s);
    return sp_cost_check(out);   /* nothing negative, NaN or infinite; the verdict exact */
}

/* One chunked variant of l (prefill_chunk, prefill_tokens; 0: not set): *ok
 * when it applies (its cost then in *vc), kept in *best when it fits and its
 * prefill is faster than *best's. */
static sp_status try_variant(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                             const sp_cost_opts *opts, int chunk, int tokens, sp_layout *best_l, sp_cost *best,
                             sp_cost *vc, int *ok, sp_stage_time *vt, phase_val *dc)
{
    sp_layout v = *l;
    v.prefill_chunk = chunk;
    v.prefill_tokens = tokens;
    sp_cost_opts o = *opts;
    o.quiet = 1;   /* a pass the layouts' splits do not allow is no variant */
    o.stage_times = vt;   /* the variant's, kept in opts' when it is kept (vt: l->stages entries) */
    *ok = 0;
    sp_status st = dc ? eval_one(m, hw, &v, w, NULL, &o, 1, vc, dc, 1) : sp_cost_eval(m, hw, &v, w, &o, vc);
    if (st == SP_EINVAL) return SP_OK;
    SP_CHECK(st);
    *ok = 1;
    if (vc->feasible && (!best->feasible || vc->prefill_s < best->prefill_s)) {
        *best = *vc;
        *best_l = v;
        if (vt) memcpy(opts->stage_times, vt, (size_t)l->stages * sizeof *vt);
    }
    return SP_OK;
}

/* The largest n / 2^k (k >= 1) at most f·n, for the first pass size to try. */
static int64_t halving_start(int64_t n, double f)
{
    int64_t c = n / 2;
    while (c > 1 && (double)c > f * (double)n) c /= 2;
    return c;
}

/* sp_cost_eval_chunked with vt: room for a variant's stage times (l->stages
 * entries) when opts asks for them, else NULL */
static sp_status eval_chunked(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                              const sp_cost_opts *opts, sp_layout *chosen, sp_cost *out, sp_stage_time *vt);

sp_status sp_cost_eval_chunked(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                               const sp_cost_opts *opts, sp_layout *chosen, sp_cost *out)
{
    if (!chosen || !l) return spi_fail(SP_EINVAL, "sp_cost_eval_chunked: NULL argument");
    sp_cost_opts o;
    sp_cost_cache *own;
    SP_CHECK(opts_resolve(opts, &o, &own));
    /* a variant's stage times: on the stack for the pipelines a search meets (S <= 64) */
    sp_stage_time small[64], *vt = o.stage_times ? small : NULL;
    sp_status st = SP_OK;
    if (vt && l->stages > (int)SPI_ARRAY_LEN(small) && !(vt = malloc((size_t)l->stages * sizeof *vt)))
        st = spi_fail(SP_ENOMEM, "cost model: out of memory for %d stages' times", l->stages);
    if (st == SP_OK) st = eval_chunked(m, hw, l, w, &o, chosen, out, vt);
    if (vt != small) free(vt);
    sp_cost_cache_free(own);
    return st;
}

static sp_status eval_chunked(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                              const sp_cost_opts *opts, sp_layout *chosen, sp_cost *out, sp_stage_time *vt)
{
    /* A variant's decode prices are l's, stage kind by stage kind: kept from
     * l's evaluation (dc), not looked up again (a variant's decode check and
     * key cost as much as its prefill's).  Exact: a variant differs from l in
     * prefill_chunk and prefill_tokens alone, which decode's key clears
     * (sp_lower_begin) and decode's program never reads (its passes are the
     * micro-batch); its stages and their kinds are l's (eval_one: the kinds
     * depend on the split, the MoE phase and the offload only).  Decode's
     * checks of a variant are l's decode checks, which passed, and the checks
     * that read those two keys, which read neither the phase nor decode's
     * shape (sp_lower_begin runs both phases' in each: the pass divides the
     * micro-batch, fills whole KV blocks, suits batch-sharded attention, ...)
     * and so passed in the variant's prefill, priced first in each stage.
     * opts->fresh lowers every phase, as it says (and so checks this). */
    phase_val *dc = w && !opts->fresh && !sp_layout_disaggregated(l) && w->prompt > 0 && w->gen > 0 &&
                            !l->prefill_chunk && !l->prefill_tokens
                        ? opts->cache->dc_kinds
                        : NULL;
    SP_CHECK(dc ? eval_one(m, hw, l, w, NULL, opts, 1, out, dc, 0) : sp_cost_eval(m, hw, l, w, opts, out));
    *chosen = *l;
    if (l->prefill_chunk || l->prefill_tokens || w->prompt == 0) return SP_OK;
    sp_cost vc, base;
    int64_t mb = w->batch / l->replicas / l->microbatches;   /* sp_cost_eval checked that they divide */
    int ok;
    if (!out->feasible) {
        /* activations shrink about linearly with the pass: start near the pass that would fit,
         * halving; sequences first, then tokens of the smallest sequence pass tried */
        base = *out;
        int base_chunk = 0;
        int64_t act = base.mem.activations + base.mem.scratch;
        if (act <= base.shortfall_bytes) return SP_OK;   /* no pass makes it fit */
        int64_t c = halving_start(mb, (double)(act - base.shortfall_bytes) / (double)act);
        for (int tries = 0; c >= 1 && tries < 4 && !out->feasible; c /= 2) {
            if (mb % c) continue;
            tries++;
            SP_CHECK(try_variant(m, hw, l, w, opts, (int)c, 0, chosen, out, &vc, &ok, vt, dc));
            if (ok && !vc.feasible) {
                base = vc;
                base_chunk = (int)c;
            }
        }
        act = base.mem.activations + base.mem.scratch;
        if (out->feasible || act <= base.shortfall_bytes) return SP_OK;
        int64_t P = w->prompt, t = halving_start(P, (double)(act - base.shortfall_bytes) / (double)act);
        for (int tries = 0; t >= 1 && tries < 4 && !out->feasible; t /= 2) {
            if (P % t) continue;
            tries++;
            SP_CHECK(try_variant(m, hw, l, w, opts, base_chunk, (int)t, chosen, out, &vc, &ok, vt, dc));
        }
        return SP_OK;
    }
    if (l->stages > 1) {
        double last = out->prefill_s;
        for (int64_t c = mb / 2, tries = 0; c >= 1 && tries < 3; c /= 2) {
            if (mb % c) continue;
            tries++;
            SP_CHECK(try_variant(m, hw, l, w, opts, (int)c, 0, chosen, out, &vc, &ok, vt, dc));
            if (!ok || out->prefill_s >= last) break;   /* no faster: smaller passes will not be either */
            last = out->prefill_s;
        }
    }
    return SP_OK;
}

/* The largest value a curve (sp_hw_curve) takes at a v in (0, vmax]: `none`
 * without points; else, its x ascending and positive, the curve is y[0] up
 * to x[0], linear in log v between two points (between their values) and
 * y[n-1] beyond, so the largest of the values of the points below vmax and
 * its value at vmax; -1 where that does not hold (x not ascending and
 * positive, a value not finite and positive). */
static double curve_max(int n, const double *x, const double *y, double none, double vmax)
{
    if (n <= 0) return none;
    if (n > SP_HW_EFF_POINTS) n = SP_HW_EFF_POINTS;
    double mx = sp_hw_curve(n, x, y, vmax, none);
    for (int i = 0; i < n; i++) {
        if (!(x[i] > 0) || (i && !(x[i] > x[i - 1])) || !(y[i] > 0) || !isfinite(y[i])) return -1.0;
        if ((i == 0 || x[i] < vmax) && y[i] > mx) mx = y[i];
    }
    return isfinite(mx) ? mx : -1.0;
}

/* The largest efficiency sp_hw_matmul_shape_eff gives a matmul of weight
 * dtype dt of at most fmax FLOPs and mmax rows: the FLOPs curve's largest
 * up to fmax times the rows factor's (sp_hw_rows_eff: one curve up to mmax,
 * or classes by weight size whose two around the weights are interpolated
 * with a weight in (0, 1] when rows_w ascends, so at most the largest
 * class's largest) times the tiles' (at most 1); -1 where a curve breaks
 * curve_max's assumptions. */
static double matmul_eff_max(const sp_hw *hw, sp_dtype dt, double fmax, double mmax)
{
    double e = curve_max(hw->eff_points, hw->eff_flops, hw->eff_value, 1.0, fmax);
    if (e < 0 || (unsigned)dt >= SP_DT_COUNT) return e;
    int nc = hw->rows_sizes[dt];
    if (nc <= 0) {
        double r = curve_max(hw->rows_points[dt], hw->rows_m[dt], hw->rows_value[dt], 1.0, mmax);
        return r < 0 ? -1.0 : e * r;
    }
    if (nc > SP_HW_ROWS_SIZES) nc = SP_HW_ROWS_SIZES;
    double r = 0.0;
    for (int c = 0; c < nc; c++) {
        if (!(hw->rows_w[dt][c] > 0) || (c && !(hw->rows_w[dt][c] > hw->rows_w[dt][c - 1]))) return -1.0;
        double rc = curve_max(hw->rows_w_points[dt][c], hw->rows_w_m[dt][c], hw->rows_w_value[dt][c], 1.0, mmax);
        if (rc < 0) return -1.0;
        if (rc > r) r = rc;
    }
    return e * r;
}

double sp_cost_prefill_lb(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w)
{
    if (!m || !hw || !l || !w || w->batch < 1 || w->prompt < 1 || m->n_experts > 0 || sp_layout_disaggregated(l))
        return 0.0;
    /* what replaces or stretches a matmul's FLOPs time: CPU kernels' rates per element, cores
     * shared; a dispatch below a picosecond no longer covers a step's rounding (below) */
    if (hw->shared_cores > 0 || !(hw->dispatch_s >= 1e-12)) return 0.0;
    for (int k = 0; k < SP_ELEM_COUNT; k++)
        if (hw->step_elem_s[k] > 0) return 0.0;
    int64_t chips = sp_layout_chips(l);
    if (chips < 1) return 0.0;
    /* the weight matrices a token goes through in every layer (sp_lower: Q, K, V, O, the FFN's):
     * their local shapes on the chips of a stage multiply out to at least the whole (heads and
     * FFN width padded up, K and V replicated where the mesh has more chips than KV heads) */
    double E = (double)m->d_model, D = (double)m->d_head, HD = (double)m->n_heads * D,
           KVD = (double)m->n_kv_heads * D, F = (double)m->d_ff, tokens = (double)w->batch * (double)w->prompt;
    double per_layer = 2.0 * E * HD + 2.0 * E * KVD + (double)sp_model_ffn_matrices(m) * E * F;
    double flops = 2.0 * per_layer * (double)m->n_layers * tokens;
    /* one such matmul on a chip: at most every token's rows (a pass, or K and V again over the
     * passes before: rows of the pass's sequences) by the whole matrix, the heads and the FFN
     * width padded to a multiple of at most the chips (sp_lower's Hp, Fp) */
    double cols = (double)(m->n_heads + chips) * D;
    if (KVD > cols) cols = KVD;
    if ((double)(m->d_ff + chips) > cols) cols = (double)(m->d_ff + chips);
    double peak = sp_hw_compute_peak(hw, l->weights), eff = matmul_eff_max(hw, l->weights, 2.0 * tokens * E * cols, tokens);
    if (!(peak > 0) || !(eff > 0)) return 0.0;
    double lb = flops / ((double)chips * peak * eff);
    /* rounding: the FLOPs and the bound in doubles (relative ~1e-15 each), a step's efficiency
     * interpolated (at most an ulp above the largest point), the stages' picoseconds halved and
     * divided (a few ps) */
    lb = lb * (1.0 - 1e-9) - 4e-12;
    return lb > 0 && isfinite(lb) ? lb : 0.0;
}

sp_status sp_cost_max_context(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch,
                              double kv_budget, int64_t *out)
{
    if (kv_budget <= 0 || kv_budget > 1) return spi_fail(SP_EINVAL, "--kv-budget %g must be in (0, 1]", kv_budget);
    /* KV bytes are linear in the capacity: price one token of context on every stage */
    int64_t worst = 0;
    sp_program *dc = malloc(sizeof *dc);   /* large: kept out of the stack */
    if (!dc) return spi_fail(SP_ENOMEM, "sp_cost_max_context: out of memory");
    sp_status st = SP_OK;
    for (int s = 0; s < l->stages && st == SP_OK; s++) {
        sp_shape sh = {batch, 1, 1, 1, SP_DT_BF16, 0};
        sp_mem_sizes ms;
        if ((st = sp_lower(m, l, SP_PHASE_DECODE, &sh, s, dc)) == SP_OK && (st = sp_lower_mem_sizes(NULL, dc, &ms)) == SP_OK &&
            ms.kv > worst)
            worst = ms.kv;
    }
    free(dc);
    SP_CHECK(st);
    double budget = (double)hw->hbm_bytes * kv_budget;
    *out = worst > 0 ? (int64_t)(budget / (double)worst) : 0;
    return SP_OK;
}

/* Coefficients of one program's makespan (its critical path). */
static double program_coefs(sp_cost_cache *cc, const sp_program *p, const sp_hw *hw, int64_t context,
                            double coef[SP_CP_COUNT])
{
    spi_sched st = {{0}, cc->vec};
    int64_t ctx[2] = {context, 0};
    spi_cost_price_program(cc, p, hw, ctx, &cc->pr, &cc->coef);
    int64_t t = sched_program(p, &cc->pr, 0, &st, (const spi_step_coefs *)&cc->coef);
    int end = st.t[SPI_SLOT_COMP] >= st.t[SPI_SLOT_COMM] ? SPI_SLOT_COMP : SPI_SLOT_COMM;
    memcpy(coef, cc->vec[end], SP_CP_COUNT * sizeof *coef);
    return (double)t * 1e-12;
}

static sp_status coefs_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                            const sp_cost_opts *opts, sp_cost_coefs *out);

sp_status sp_cost_coefs_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                             const sp_cost_opts *opts, sp_cost_coefs *out)
{
    if (!m || !hw || !l || !w || !out) return spi_fail(SP_EINVAL, "sp_cost_coefs_eval: NULL argument");
    sp_cost_opts o;
    sp_cost_cache *own;
    SP_CHECK(opts_resolve(opts, &o, &own));
    sp_status st = coefs_eval(m, hw, l, w, &o, out);
    sp_cost_cache_free(own);
    return st;
}

static sp_status coefs_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                            const sp_cost_opts *opts, sp_cost_coefs *out)
{
    sp_cost c;
    SP_CHECK(sp_cost_eval(m, hw, l, w, opts, &c));   /* checks the workload and the layout */
    sp_cost_cache *cc = opts->cache;
    sp_program *prog = cc->prog;
    memset(out, 0, sizeof *out);
    int64_t max_ctx = w->prompt + w->gen;
    sp_shape pf_sh = {w->batch, w->prompt, w->prompt, max_ctx, opts->act_dtype, 0};
    sp_shape dc_sh = {w->batch, 1, max_ctx, max_ctx, opts->act_dtype, 0};
    int M = l->microbatches, S = l->stages;
    double pf_max = -1, dc_max = -1, dc_sum = 0;
    double v_pf_max[SP_CP_COUNT] = {0}, v_dc_max[SP_CP_COUNT] = {0}, v_dc_sum[SP_CP_COUNT] = {0};
    int64_t units = 1;   /* prefill passes per micro-batch */
    for (int s = 0; s < S; s++) {
        double v[SP_CP_COUNT];
        if (w->prompt > 0) {
            /* one micro-batch's passes, weighted as sp_cost_eval weighs them */
            SP_CHECK(sp_lower(m, l, SP_PHASE_PREFILL, &pf_sh, s, &prog[SP_PHASE_PREFILL]));
            int64_t left[3], num[3];
            int nt = sp_lower_pass_terms(&prog[SP_PHASE_PREFILL], left, num);
            units = num[0] / 2 * (nt > 1 ? left[1] + 1 : 1);
            double t = 0, vs[SP_CP_COUNT] = {0};
            for (int i = 0; i < nt; i++) {
                sp_shape ps = pf_sh;
                ps.passes_left = left[i];
                if (i) SP_CHECK(sp_lower(m, l, SP_PHASE_PREFILL, &ps, s, &prog[SP_PHASE_PREFILL]));
                t += (double)num[i] / 2 * program_coefs(cc, &prog[SP_PHASE_PREFILL], hw, 0, v);
                for (int j = 0; j < SP_CP_COUNT; j++) vs[j] += (double)num[i] / 2 * v[j];
            }
            out->prefill_s += t;
            for (int j = 0; j < SP_CP_COUNT; j++) out->prefill[j] += vs[j];
            if (t > pf_max) {
                pf_max = t;
                memcpy(v_pf_max, vs, sizeof vs);
            }
        }
        if (w->gen > 0) {
            SP_CHECK(sp_lower(m, l, SP_PHASE_DECODE, &dc_sh, s, &prog[SP_PHASE_DECODE]));
            double t = program_coefs(cc, &prog[SP_PHASE_DECODE], hw, max_ctx, v);
            dc_sum += t;
            for (int j = 0; j < SP_CP_COUNT; j++) v_dc_sum[j] += v[j];
            if (t > dc_max) {
                dc_max = t;
                memcpy(v_dc_max, v, sizeof v);
            }
        }
    }
    if (w->prompt > 0) {
        /* a flow shop of M·units passes, as sp_cost_eval */
        double u = (double)units;
        out->prefill_s = (out->prefill_s + (M * u - 1) * pf_max) / u;
        for (int j = 0; j < SP_CP_COUNT; j++) out->prefill[j] = (out->prefill[j] + (M * u - 1) * v_pf_max[j]) / u;
    }
    int64_t sync_ps;
    if (w->gen > 0 && spi_token_sync(hw, l, &sync_ps)) {
        /* as sp_cost_eval: a flow shop plus the per-token sync, which is no
         * free parameter (the coefficients reproduce the rest) */
        out->decode_step_s = dc_sum + (M - 1) * dc_max + (double)sync_ps * 1e-12;
        for (int j = 0; j < SP_CP_COUNT; j++) out->decode_step[j] = v_dc_sum[j] + (M - 1) * v_dc_max[j];
    } else if (w->gen > 0) {
        int bubble = M * dc_max > dc_sum;
        out->decode_step_s = bubble ? M * dc_max : dc_sum;
        for (int j = 0; j < SP_CP_COUNT; j++) out->decode_step[j] = bubble ? M * v_dc_max[j] : v_dc_sum[j];
    }
    return SP_OK;
}
