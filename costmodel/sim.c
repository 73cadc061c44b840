/* sim.c: every chip's program on a two-stream timeline (rules in sp_sim.h and sp_cost.h). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "costmodel/sp_sim.h"
#include "costmodel/spi_cost.h"

void sp_sim_opts_init(sp_sim_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->replica = -1;
    sp_cost_opts_init(&o->cost);
}

typedef struct sim {
    const sp_layout *l;
    const sp_sim_opts *o;
    sp_phase phase;
    int S, M, T;                 /* stages, micro-batches, tokens */
    int hetero;                  /* stages of their own mesh (sp_layout_hetero) */
    int nst[SP_LAYOUT_MAX_STAGES];      /* chips of stage s (all replicas): R · X_s·Y_s·Z_s */
    int first[SP_LAYOUT_MAX_STAGES];    /* global rank of stage s's first chip */
    int nmax, nfb;               /* the most chips of a stage; feedback slots per micro-batch */
    int64_t U, NT;               /* prefill: passes per micro-batch, token passes among them (1, 1 in decode) */
    int64_t NP;                  /* program sets: NT, or M·U (sp_sim_opts.mb_progs: micro-batch mb's pass u at
                                    (mb·U + u)·S + s) */
    int64_t pass;                /* the prefill pass being run (trace ids); -1: one pass, or decode */
    sp_mesh mesh[SP_LAYOUT_MAX_STAGES];  /* [0]: every stage's; stages of their own mesh: [s], stage s's view */
    spi_prog_run *pr;            /* [NT × S]: token pass j of stage s at j·S + s */
    spi_sched *st;               /* [nmax]: the chips of the stage being run */
    int64_t *ready;              /* [nmax] */
    int64_t *gmax;               /* [nmax]: latest ready time per group (indexed by leader) */
    int *(*gid)[1u << SP_AXIS_COUNT];   /* [meshes][mask]: each chip's group leader (local index); lazily built */
    /* stages of their own mesh: the hand-off's (sender, receiver) pairs into the
     * program at j·S + s (s >= 1), local indices in stages s − 1 and s (sp_lower_stage_xfer_progs) */
    int **pairs;                 /* [NT × S]: 2 · npairs ints each */
    int *npairs;                 /* [NT × S] */
    int64_t *chip_end;           /* [N]: end of the chip's last unit */
    int64_t *send_end;           /* [N]: end of the chip's last send */
    int64_t *fb;                 /* [M × nfb]: end of the last stage's unit (t−1, j), per chip of a stage (per
                                  * replica with stages of their own mesh: the first stage's chips wait for all of it) */
    int64_t *round_end;          /* [T]: latest end of the last stage's units of token t */
    int64_t events;
    sp_status trace_status;
} sim;

/* stage s's chips' group leaders for a collective over mask */
static const int *group_ids(sim *x, int s, unsigned mask)
{
    mask &= (1u << SP_AXIS_COUNT) - 1;
    int g = x->hetero ? s : 0;
    const sp_mesh *mesh = &x->mesh[g];
    if (!x->gid[g][mask]) {
        int *id = malloc((size_t)x->nst[s] * sizeof *id);
        if (!id) return NULL;
        for (int c = 0; c < x->nst[s]; c++) {
            int co[SP_AXIS_COUNT];
            sp_mesh_coords(mesh, c, co);   /* stage 0's ranks: local index = rank */
            for (int a = 0; a < SP_AXIS_COUNT; a++)
                if (mask & (1u << a)) co[a] = 0;
            id[c] = sp_mesh_rank(mesh, co);
        }
        x->gid[g][mask] = id;
    }
    return x->gid[g][mask];
}

static void trace_step(sim *x, int chip, const sp_step *s, sp_prog_part part, int64_t layer, int idx, int64_t tok,
                       int mb, int64_t start, int64_t dur)
{
    if (!x->o->trace || x->trace_status != SP_OK) return;
    char id[SP_TRACE_ID_MAX], name[SP_TRACE_LABEL_MAX];
    sp_trace_event e = {x->o->chip0 + chip, sp_trace_step_stream(s), x->o->t0_s + (double)start * 1e-12, (double)dur * 1e-12,
                        sp_trace_step_label(s, name, sizeof name),
                        sp_trace_step_id_pass(x->phase, x->o->token0 + tok, x->pass, part, layer, idx, id, sizeof id), mb,
                        sp_trace_step_bytes(s), s->flops};
    x->trace_status = sp_trace_write(x->o->trace, &e);
}

/* One step on every chip of stage s. */
static sp_status run_step(sim *x, int s, const sp_step *step, const spi_step_run *r0, sp_prog_part part,
                          int64_t layer, int idx, int64_t tok, int mb)
{
    int base = x->first[s], n = x->nst[s];
    int collective = step->kind == SP_STEP_COLL;
    const int *gid = NULL;
    spi_step_run rs[1];
    for (int c = 0; c < n; c++) {
        int from;
        x->ready[c] = spi_sched_ready(&x->st[c], r0, &from);
    }
    if (collective && step->coll.group > 1) {
        if (!(gid = group_ids(x, s, step->coll.mask))) return spi_fail(SP_ENOMEM, "simulator: out of memory");
        for (int c = 0; c < n; c++) x->gmax[gid[c]] = -1;
        for (int c = 0; c < n; c++)
            if (x->ready[c] > x->gmax[gid[c]]) x->gmax[gid[c]] = x->ready[c];
    }
    for (int c = 0; c < n; c++) {
        const spi_step_run *r = r0;
        if (x->o->slowdown && r0->mode == SPI_RUN_COMPUTE && x->o->slowdown[x->o->chip0 + base + c] != 1.0) {
            rs[0] = *r0;
            rs[0].dur_ps[0] = (int64_t)llround((double)r0->dur_ps[0] * x->o->slowdown[x->o->chip0 + base + c]);
            r = rs;
        }
        int64_t start = gid ? x->gmax[gid[c]] : x->ready[c];
        int64_t end = spi_sched_commit(&x->st[c], r, 0, start, NULL, NULL);
        if (step->kind == SP_STEP_SEND) x->send_end[base + c] = end;
        if (x->o->replica >= 0) {
            /* replica r's programs: the other replicas' chips run them too, but those are not their steps */
            int co[SP_AXIS_COUNT];
            sp_mesh_coords(&x->mesh[0], base + c, co);
            if (co[SP_AXIS_REPLICA] != x->o->replica) continue;
        }
        trace_step(x, base + c, step, part, layer, idx, tok, mb, start, end - start);
        x->events++;
    }
    return SP_OK;
}

/* the feedback slot of chip c of the last stage (or the first): the chip
 * itself, or with stages of their own mesh its replica */
static size_t fb_slot(const sim *x, int s, int c, int mb)
{
    return (size_t)mb * (size_t)x->nfb + (size_t)(x->hetero ? c / (x->nst[s] / x->l->replicas) : c);
}

/* Unit (token tok, micro-batch mb) on stage s (program i of x->pr). */
static sp_status run_unit(sim *x, const sp_program *p, int64_t pi, int s, int tok, int mb)
{
    const spi_prog_run *pr = &x->pr[pi];
    int base = x->first[s], n = x->nst[s];
    for (int c = 0; c < n; c++) {
        int64_t t = x->chip_end[base + c];
        /* even stages: chip c receives from chip c of the stage before */
        if (s > 0 && !x->hetero && x->send_end[x->first[s - 1] + c] > t) t = x->send_end[x->first[s - 1] + c];
        if (s == 0 && tok > 0 && x->fb[fb_slot(x, s, c, mb)] > t) t = x->fb[fb_slot(x, s, c, mb)];
        x->ready[c] = t;
    }
    if (s > 0 && x->hetero)   /* each chip receives from every sender its block meets */
        for (int k = 0; k < x->npairs[pi]; k++) {
            int a = x->pairs[pi][2 * k], d = x->pairs[pi][2 * k + 1];
            if (x->send_end[x->first[s - 1] + a] > x->ready[d]) x->ready[d] = x->send_end[x->first[s - 1] + a];
        }
    for (int c = 0; c < n; c++) {
        for (int k = 0; k < SPI_SLOTS; k++) x->st[c].t[k] = x->ready[c];
        x->st[c].vec = NULL;
    }
    for (int i = 0; i < p->pre.n; i++)
        SP_CHECK(run_step(x, s, &p->pre.s[i], &pr->run[SP_PART_PRE][i], SP_PART_PRE, -1, i, tok, mb));
    for (int64_t layer = 0; layer < p->n_layers; layer++) {
        sp_prog_part lp = sp_program_layer_part(p, layer);   /* a MoE layer or a dense one between them */
        const sp_steps *ls = sp_program_part(p, lp);
        for (int i = 0; i < ls->n; i++)
            if (sp_lower_step_runs(p, &ls->s[i], layer))   /* offload: some steps run on some layers */
                SP_CHECK(run_step(x, s, &ls->s[i], &pr->run[lp][i], lp, layer, i, tok, mb));
    }
    for (int i = 0; i < p->post.n; i++)
        SP_CHECK(run_step(x, s, &p->post.s[i], &pr->run[SP_PART_POST][i], SP_PART_POST, -1, i, tok, mb));
    for (int c = 0; c < n; c++) {
        int64_t e = x->st[c].t[SPI_SLOT_COMP] > x->st[c].t[SPI_SLOT_COMM] ? x->st[c].t[SPI_SLOT_COMP]
                                                                          : x->st[c].t[SPI_SLOT_COMM];
        x->chip_end[base + c] = e;
        if (s == x->S - 1) {
            int64_t *f = &x->fb[fb_slot(x, s, c, mb)];   /* ends only grow: the latest is this token's */
            if (e > *f) *f = e;
            if (e > x->round_end[tok]) x->round_end[tok] = e;
        }
    }
    return SP_OK;
}

/* the hand-off into program i (stage s >= 1) as (sender, receiver) pairs of local indices */
typedef struct pair_acc { sim *x; int64_t i; int s; int cap; } pair_acc;

static sp_status pair_add(void *ctx, const sp_stage_block *b)
{
    pair_acc *a = ctx;
    sim *x = a->x;
    if (x->npairs[a->i] == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        int *p = realloc(x->pairs[a->i], (size_t)cap * 2 * sizeof *p);
        if (!p) return spi_fail(SP_ENOMEM, "simulator: the hand-off into stage %d", a->s);
        x->pairs[a->i] = p;
        a->cap = cap;
    }
    int *p = &x->pairs[a->i][2 * x->npairs[a->i]++];
    p[0] = b->src - x->first[a->s - 1];
    p[1] = b->dst - x->first[a->s];
    return SP_OK;
}

static sp_status hand_off_pairs(sim *x, const sp_program *from, const sp_program *to, int64_t i)
{
    pair_acc a = {x, i, (int)(i % x->S), 0};
    return sp_lower_stage_xfer_progs(x->l, from, to, pair_add, &a);
}

static void sim_free(sim *x)
{
    free(x->pr);
    free(x->st);
    free(x->ready);
    free(x->gmax);
    for (int g = 0; x->gid && g < (x->hetero ? x->S : 1); g++)
        for (unsigned m = 0; m < (1u << SP_AXIS_COUNT); m++) free(x->gid[g][m]);
    free(x->gid);
    for (int64_t i = 0; x->pairs && i < x->NP * x->S; i++) free(x->pairs[i]);
    free(x->pairs);
    free(x->npairs);
    free(x->chip_end);
    free(x->send_end);
    free(x->fb);
    free(x->round_end);
}

sp_status sp_sim_phase(const sp_layout *l, const sp_hw *hw, sp_phase phase, const sp_program *const *progs,
                       const sp_sim_opts *opts, sp_sim_result *out)
{
    if (!l || !hw || !progs || !out) return spi_fail(SP_EINVAL, "sp_sim_phase: NULL argument");
    if (l->stages < 1 || l->stages > SP_LAYOUT_MAX_STAGES)
        return spi_fail(SP_EINVAL, "sp_sim_phase: %d stages (1..%d)", l->stages, SP_LAYOUT_MAX_STAGES);
    sp_sim_opts defaults;
    if (!opts) {
        sp_sim_opts_init(&defaults);
        opts = &defaults;
    }
    memset(out, 0, sizeof *out);
    sim x;
    memset(&x, 0, sizeof x);
    x.l = l;
    x.o = opts;
    x.phase = phase;
    x.S = l->stages;
    x.M = l->microbatches;
    x.T = phase == SP_PHASE_DECODE ? (opts->tokens > 0 ? opts->tokens : x.S + 2) : 1;
    x.hetero = sp_layout_hetero(l);
    int N;
    if (!x.hetero) {
        sp_layout_mesh(l, &x.mesh[0]);
        N = sp_mesh_size(&x.mesh[0]);
        for (int s = 0; s < x.S; s++) {
            x.nst[s] = N / x.S;
            x.first[s] = s * x.nst[s];
        }
        x.nfb = x.nst[0];
    } else {
        /* each stage on its own mesh: its view (the layout with the stage's mesh), whose
         * stage-0 ranks are the stage's chips in order (sp_lower.h, "stage hand-off") */
        int64_t chips = sp_layout_chips(l);
        if (chips < 1 || chips > INT_MAX)
            return spi_fail(SP_EINVAL, "sp_sim_phase: a layout of %lld chips", (long long)chips);
        N = (int)chips;
        for (int s = 0; s < x.S; s++) {
            sp_layout v = *l;
            sp_layout_stage_mesh(l, s, v.mesh);
            sp_layout_mesh(&v, &x.mesh[s]);
            x.nst[s] = (int)sp_layout_stage_chips(l, s);
            x.first[s] = (int)sp_layout_stage_first_chip(l, s);
        }
        x.nfb = l->replicas;
    }
    x.nmax = 0;
    for (int s = 0; s < x.S; s++)
        if (x.nst[s] > x.nmax) x.nmax = x.nst[s];
    x.U = x.NT = 1;
    if (phase == SP_PHASE_PREFILL && progs[0]) {
        /* programs built by hand may leave the pass counts 0: one pass.  mb_progs: each
         * sequence pass its own programs (a ragged batch's prefill_chunk) */
        x.NT = progs[0]->passes_tok > 1 && !opts->mb_progs ? progs[0]->passes_tok : 1;
        x.U = (progs[0]->passes_seq > 1 ? progs[0]->passes_seq : 1) * x.NT;
    }
    x.NP = opts->mb_progs ? x.M * x.U : x.NT;
    for (int j = 0; j < x.NP; j++)
        for (int s = 0; s < x.S; s++) {
            const sp_program *p = progs[j * x.S + s];
            if (opts->mb_progs && !p) {   /* a micro-batch that takes no part: none of its stages */
                for (int o = 0; o < x.S; o++)
                    if (progs[j * x.S + o])
                        return spi_fail(SP_EINVAL, "sp_sim_phase: micro-batch %d has some stages' programs, not all", j);
                break;
            }
            if (opts->mb_progs && ((phase == SP_PHASE_PREFILL && (p->passes_seq > 1 ? p->passes_seq : 1) != x.U) ||
                                   p->passes_tok > 1))
                return spi_fail(SP_EINVAL, "sp_sim_phase: programs per micro-batch with token passes, or passes "
                                           "of their own number");
            sp_layout v = *l;   /* the stage's view (sp_lower: its own mesh, if any) */
            sp_layout_stage_mesh(l, s, v.mesh);
            if (!p || p->stage != s || p->phase != phase || memcmp(&p->layout, &v, sizeof v) ||
                (phase == SP_PHASE_PREFILL && p->shape.passes_left != (opts->mb_progs ? 0 : x.NT - 1 - j)))
                return spi_fail(SP_EINVAL, "sp_sim_phase: program %d is not stage %d of this layout's %s (pass %d)",
                                j * x.S + s, s, sp_phase_name(phase), j);
        }
    x.pr = calloc((size_t)(x.S * x.NP), sizeof *x.pr);
    x.st = calloc((size_t)x.nmax, sizeof *x.st);
    x.ready = calloc((size_t)x.nmax, sizeof *x.ready);
    x.gmax = calloc((size_t)x.nmax, sizeof *x.gmax);
    x.gid = calloc(x.hetero ? (size_t)x.S : 1, sizeof *x.gid);
    x.chip_end = calloc((size_t)N, sizeof *x.chip_end);
    x.send_end = calloc((size_t)N, sizeof *x.send_end);
    x.fb = calloc((size_t)x.M * (size_t)x.nfb, sizeof *x.fb);
    x.round_end = calloc((size_t)x.T, sizeof *x.round_end);
    if (x.hetero) {
        x.pairs = calloc((size_t)(x.S * x.NP), sizeof *x.pairs);
        x.npairs = calloc((size_t)(x.S * x.NP), sizeof *x.npairs);
    }
    sp_status st = SP_OK;
    if (!x.pr || !x.st || !x.ready || !x.gmax || !x.gid || !x.chip_end || !x.send_end || !x.fb || !x.round_end ||
        (x.hetero && (!x.pairs || !x.npairs))) {
        st = spi_fail(SP_ENOMEM, "simulator: out of memory for %d chips", N);
        goto done;
    }
    for (int64_t i = 0; x.hetero && i < x.S * x.NP; i++)
        if (i % x.S && progs[i]) SP_CHECKGOTO(hand_off_pairs(&x, progs[i - 1], progs[i], i), st, done);
    for (int i = 0; i < x.S * x.NP; i++) {
        if (!progs[i]) continue;
        /* priced at the context each program was lowered for, as sp_cost_eval prices it */
        int64_t ctx[2] = {phase == SP_PHASE_DECODE ? progs[i]->shape.context : 0, 0};
        spi_cost_price_program(opts->cost.cache, progs[i], hw, ctx, &x.pr[i], NULL);
    }
    /* a runtime with a per-token barrier (spi_token_sync): after each token
     * every chip waits until the last one is done, then the barrier's time */
    int64_t sync_ps;
    int barrier = phase == SP_PHASE_DECODE && spi_token_sync(hw, l, &sync_ps);
    for (int t = 0; t < x.T; t++) {
        /* prefill: each micro-batch's passes in order, token pass u mod NT */
        for (int64_t u = 0; u < x.M * x.U; u++)
            for (int s = 0; s < x.S; s++) {
                int64_t i = (opts->mb_progs ? u : u % x.NT) * x.S + s;
                if (!progs[i]) continue;   /* mb_progs: a micro-batch that takes no part */
                x.pass = phase == SP_PHASE_PREFILL && x.U > 1 ? u % x.U : -1;
                SP_CHECKGOTO(run_unit(&x, progs[i], i, s, t, (int)(u / x.U)), st, done);
            }
        if (barrier) {
            int64_t b = 0;
            for (int c = 0; c < N; c++)
                if (x.chip_end[c] > b) b = x.chip_end[c];
            for (int c = 0; c < N; c++) x.chip_end[c] = b + sync_ps;
        }
    }
    int64_t end = 0;
    for (int c = 0; c < N; c++)
        if (x.chip_end[c] > end) end = x.chip_end[c];
    out->makespan_s = (double)end * 1e-12;
    out->step_s = x.T >= 2 ? (double)(x.round_end[x.T - 1] - x.round_end[x.T - 2]) * 1e-12 : out->makespan_s;
    out->events = x.events;
    if (x.trace_status != SP_OK) st = x.trace_status;
done:
    sim_free(&x);
    return st;
}

/* sp_sim_eval's phases of one-group layout l: prefill (run_pf) and decode
 * (run_dc); the caller checked the request (sp_cost_eval). */
static sp_status sim_group(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                           const sp_sim_opts *opts, int run_pf, int run_dc, sp_sim_times *out)
{
    sp_sim_opts o = *opts;
    int S = l->stages;
    int64_t max_ctx = w->prompt + w->gen;
    /* prefill token passes (prefill_tokens): one program per pass and stage */
    int64_t NT = 1;
    if (run_pf) {
        sp_shape sh = {w->batch, w->prompt, w->prompt, max_ctx, o.cost.act_dtype, 0};
        sp_program *first = malloc(sizeof *first);   /* large: kept out of the stack */
        if (!first) return spi_fail(SP_ENOMEM, "simulator: out of memory");
        sp_status fs = sp_lower(m, l, SP_PHASE_PREFILL, &sh, 0, first);
        NT = first->passes_tok;
        free(first);
        SP_CHECK(fs);
        if (NT * S > SP_SIM_MAX_PASS_PROGRAMS)
            return spi_fail(SP_ENOTSUP, "simulate: prefill_tokens=%d makes %lld prefill passes on %d stages; the "
                            "simulator holds at most %d pass programs", l->prefill_tokens, (long long)NT, S,
                            SP_SIM_MAX_PASS_PROGRAMS);
    }
    sp_program *progs = calloc((size_t)(S * NT), sizeof *progs);
    const sp_program **pp = calloc((size_t)(S * NT), sizeof *pp);
    sp_status st = SP_OK;
    if (!progs || !pp) {
        st = spi_fail(SP_ENOMEM, "simulator: out of memory for %d stages", S);
        goto done;
    }
    for (int64_t i = 0; i < S * NT; i++) pp[i] = &progs[i];
    if (run_pf) {
        for (int64_t j = 0; j < NT; j++)
            for (int s = 0; s < S; s++) {
                sp_shape sh = {w->batch, w->prompt, w->prompt, max_ctx, o.cost.act_dtype, NT - 1 - j};
                SP_CHECKGOTO(sp_lower(m, l, SP_PHASE_PREFILL, &sh, s, &progs[j * S + s]), st, done);
            }
        SP_CHECKGOTO(sp_sim_phase(l, hw, SP_PHASE_PREFILL, pp, &o, &out->prefill), st, done);
        out->prefill_s = out->prefill.step_s;
    }
    if (run_dc) {
        sp_shape sh = {w->batch, 1, max_ctx, max_ctx, o.cost.act_dtype, 0};
        for (int s = 0; s < S; s++) SP_CHECKGOTO(sp_lower(m, l, SP_PHASE_DECODE, &sh, s, &progs[s]), st, done);
        int T = o.tokens > 0 ? o.tokens : S + 2;
        o.tokens = T;
        o.token0 = w->gen > T ? w->gen - T : 0;
        o.t0_s += out->prefill.makespan_s;
        SP_CHECKGOTO(sp_sim_phase(l, hw, SP_PHASE_DECODE, pp, &o, &out->decode), st, done);
        out->decode_step_s = out->decode.step_s;
    }
    out->makespan_s = out->prefill.makespan_s + out->decode.makespan_s;
done:
    free(progs);
    free(pp);
    return st;
}

/* the KV transfer on the timeline (sp_sim.h): every chip's messages back to
 * back from t0 + the collective latency; busiest: each chip's running sum */
typedef struct xfer_tl {
    const sp_hw *hw;
    sp_trace *trace;
    double t0;
    int np;
    double *busy;            /* [np + nd]: each chip's messages so far, seconds */
    int64_t messages;
    sp_status trace_status;
} xfer_tl;

static sp_status xfer_msg(void *ctx, int c, int d, int64_t bytes, double t)
{
    xfer_tl *x = ctx;
    int chip[2] = {c, x->np + d};
    for (int k = 0; k < 2; k++) {
        double *b = &x->busy[chip[k]];
        if (x->trace && x->trace_status == SP_OK) {
            char id[SP_TRACE_ID_MAX], label[SP_TRACE_LABEL_MAX];
            sp_trace_xfer_id(k == 0, chip[1 - k], id, label);
            sp_trace_event e = {chip[k], SP_TRACE_COMM, x->t0 + x->hw->coll_latency + *b, t, label, id, 0, bytes, 0};
            x->trace_status = sp_trace_write(x->trace, &e);
        }
        *b += t;   /* the order sp_cost_kv_xfer sums in */
    }
    x->messages++;
    return SP_OK;
}

sp_status sp_sim_eval(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                      const sp_sim_opts *opts, sp_sim_times *out)
{
    if (!m || !hw || !l || !w || !out) return spi_fail(SP_EINVAL, "sp_sim_eval: NULL argument");
    sp_sim_opts o;
    if (opts) o = *opts;
    else sp_sim_opts_init(&o);
    memset(out, 0, sizeof *out);
    /* the checks sp_cost_eval runs (workload, torus slice, the layout applies) */
    sp_cost c;
    sp_cost_opts co = o.cost;
    co.fresh = 1;
    SP_CHECK(sp_cost_eval(m, hw, l, w, &co, &c));
    if (!sp_layout_disaggregated(l)) return sim_group(m, hw, l, w, &o, w->prompt > 0, w->gen > 0, out);
    sp_layout g[SP_PHASE_COUNT];
    for (int p = 0; p < SP_PHASE_COUNT; p++) sp_layout_phase_group(l, (sp_phase)p, &g[p]);
    int np = (int)sp_layout_chips(&g[SP_PHASE_PREFILL]), nd = (int)sp_layout_chips(&g[SP_PHASE_DECODE]);
    sp_sim_times r;
    memset(&r, 0, sizeof r);
    /* the prefill group: the prompt alone, as sp_cost_eval prices it */
    sp_workload wp = {w->batch, w->prompt, 0};
    o.chip0 = 0;
    SP_CHECK(sim_group(m, hw, &g[SP_PHASE_PREFILL], &wp, &o, 1, 0, &r));
    out->prefill = r.prefill;
    out->prefill_s = r.prefill_s;
    /* the transfer, from the last prefill chip's end */
    xfer_tl x = {hw, o.trace, o.t0_s + r.prefill.makespan_s, np, calloc((size_t)np + (size_t)nd, sizeof(double)), 0,
                 SP_OK};
    if (!x.busy) return spi_fail(SP_ENOMEM, "simulator: KV transfer of %d + %d chips", np, nd);
    sp_status st = spi_cost_kv_xfer_msgs(m, hw, l, w->batch, w->prompt, SP_XFER_ONE_JOB, xfer_msg, &x, NULL, NULL);
    double worst = 0;
    for (int i = 0; i < np + nd; i++)
        if (x.busy[i] > worst) worst = x.busy[i];
    free(x.busy);
    SP_CHECK(st);
    SP_CHECK(x.trace_status);
    out->kv_transfer_s = spi_cost_kv_xfer_seconds(hw, x.messages, worst);
    /* the decode group, after the transfer */
    memset(&r, 0, sizeof r);
    o.chip0 = np;
    o.t0_s += out->prefill.makespan_s + out->kv_transfer_s;
    SP_CHECK(sim_group(m, hw, &g[SP_PHASE_DECODE], w, &o, 0, 1, &r));
    out->decode = r.decode;
    out->decode_step_s = r.decode_step_s;
    out->makespan_s = out->prefill.makespan_s + out->kv_transfer_s + out->decode.makespan_s;
    return SP_OK;
}

sp_status sp_sim_eval_ragged(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_ragged *r,
                             const sp_sim_opts *opts, sp_sim_times *out)
{
    if (!m || !hw || !l || !r || !out) return spi_fail(SP_EINVAL, "sp_sim_eval_ragged: NULL argument");
    sp_sim_opts o;
    if (opts) o = *opts;
    else sp_sim_opts_init(&o);
    memset(out, 0, sizeof *out);
    /* the checks sp_cost_eval_ragged runs (the workload, the layout applies) */
    sp_cost c;
    sp_cost_opts co = o.cost;
    co.fresh = 1;
    SP_CHECK(sp_cost_eval_ragged(m, hw, l, r, &co, &c));
    int64_t ev_pf = 0, ev_dc = 0;
    int S = l->stages, R = l->replicas, M = l->microbatches;
    /* each micro-batch its own programs (sp_sim_opts.mb_progs): micro-batch j's stage i at j·S + i;
     * prefill pass u of micro-batch j (prefill_chunk) at (j·U + u)·S + i */
    int64_t U = l->prefill_chunk ? r->n / ((int64_t)R * M) / l->prefill_chunk : 1;
    size_t np = (size_t)S * (size_t)M, npf = np * (size_t)U;
    sp_program *p = calloc(npf, sizeof *p);
    const sp_program **pp = calloc(npf, sizeof *pp);
    sp_ragged *mb = calloc((size_t)M, sizeof *mb);
    sp_status st = SP_OK;
    if (!p || !pp || !mb) st = spi_fail(SP_ENOMEM, "simulator: a ragged batch's programs (%d stages × %d micro-batches)", S, M);
    o.mb_progs = 1;
    sp_shape pf = {r->n, 0, 0, r->max_context, o.cost.act_dtype, 0};
    sp_shape dc = {r->n, 1, r->max_context, r->max_context, o.cost.act_dtype, 0};
    double t0 = o.t0_s, end = 0;
    /* experts split over replicas: the replicas run each pass and step together (the expert
     * all-to-all joins them; sp_lower.h, "Ragged batches"): a round ends when the slowest
     * replica's does.  Otherwise each replica on its own from time 0. */
    const int nrep = sp_lower_ragged_lockstep(m, l);
    for (int rep0 = 0; rep0 < R && !st; rep0 += nrep) {
        sp_ragged v;   /* the group's sequences */
        sp_sim_result pr, dsum;
        double dstep = 0;
        memset(&pr, 0, sizeof pr);
        memset(&dsum, 0, sizeof dsum);
        if ((st = sp_ragged_slice(r, rep0 * (r->n / R), nrep * (r->n / R), &v))) break;
        o.tokens = 1;
        o.token0 = 0;
        /* round `s` (0: the prefill) of every replica of the group from o.t0_s: *res the slowest's,
         * its events every replica's */
        for (int64_t s = 0; s <= v.max_gen && !st; s++) {
            sp_sim_result res;
            memset(&res, 0, sizeof res);
            int64_t events = 0;
            o.token0 = s > 0 ? s - 1 : 0;
            for (int g = 0; g < nrep && !st; g++) {
                int rep = rep0 + g;
                for (int j = 0; j < M && !st; j++) st = sp_ragged_micro(r, R, M, rep, j, &mb[j]);
                o.replica = R > 1 ? rep : -1;
                size_t n = s ? np : npf;
                for (size_t i = 0; i < n && !st; i++) {
                    if (s == 0) {
                        const sp_ragged *q = &mb[i / (size_t)S / (size_t)U];
                        pf.q_len = pf.context = q->max_prompt;
                        pp[i] = &p[i];
                        st = sp_lower_ragged(m, l, SP_PHASE_PREFILL, &pf, q, (int64_t)(i / (size_t)S % (size_t)U),
                                             (int)(i % (size_t)S), &p[i]);
                    } else {
                        /* a micro-batch whose sequences all finished (on every replica it runs with) takes
                         * no part */
                        const sp_ragged *q = &mb[i / (size_t)S];
                        pp[i] = s <= (nrep > 1 ? sp_ragged_peers_max_gen(q) : q->max_gen) ? &p[i] : NULL;
                        if (pp[i]) st = sp_lower_ragged(m, l, SP_PHASE_DECODE, &dc, q, s, (int)(i % (size_t)S), &p[i]);
                    }
                }
                sp_sim_result d;
                if (st || (st = sp_sim_phase(l, hw, s ? SP_PHASE_DECODE : SP_PHASE_PREFILL, pp, &o, &d))) break;
                events += d.events;
                if (g == 0 || d.makespan_s > res.makespan_s) res = d;
            }
            if (st) break;
            res.events = events;
            if (s == 0) {
                pr = res;
            } else {
                /* every decode step, each with its own sequences and contexts, one after another */
                dsum.makespan_s += res.makespan_s;
                dsum.events += res.events;
                dstep = res.step_s;
            }
            o.t0_s += res.makespan_s;
        }
        if (st) break;
        o.t0_s = t0;
        if (rep0 == 0 || pr.makespan_s > out->prefill.makespan_s) {
            out->prefill = pr;
            out->prefill_s = pr.step_s;
        }
        if (rep0 == 0 || dsum.makespan_s > out->decode_s) {
            out->decode_s = dsum.makespan_s;
            out->decode.makespan_s = dsum.makespan_s;
            out->decode.step_s = out->decode_step_s = dstep;
        }
        if (pr.makespan_s + dsum.makespan_s > end) end = pr.makespan_s + dsum.makespan_s;
        ev_pf += pr.events;
        ev_dc += dsum.events;
    }
    out->prefill.events = ev_pf;
    out->decode.events = ev_dc;
    out->makespan_s = end;
    free(p);
    free(pp);
    free(mb);
    return st;
}
