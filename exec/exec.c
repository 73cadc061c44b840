/*
 * exec.c: the program interpreter (see sp_exec.h).  One thread per chip;
 * each runs the steps of its stage's programs as lower.c defines them.
 * Tensor data is touched only through the chip's device (spi_xdev.h): the
 * CPU kernels in host memory, or CUDA kernels in the GPU's memory.
 */
#include "config.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "spi_common.h"
#include "spi_ckd.h"
#include "exec/spi_exec.h"
#include "exec/spi_comm.h"


/* ---- host data through the communicator -------------------------------------------
 * The token hand-off and the result exchange move host data; where the
 * communicator moves device memory (NCCL) it goes through a device buffer.
 * Bytes are counted (4-byte elements, as the programs' hand-off) either way. */
static sp_status send_host(chip *ch, int peer, const void *buf, size_t bytes)
{
    if (ch->ops->host_memory) return sp_comm_send(ch->fc, peer, buf, bytes / 4, SP_DT_F32);
    if ((int64_t)bytes > ch->scr_bytes[SP_SCR_TOKENS])
        return spi_fail(SP_EINTERNAL, "token hand-off of %zu bytes, the tokens slot holds %lld", bytes,
                        (long long)ch->scr_bytes[SP_SCR_TOKENS]);
    SP_CHECK(ch->ops->upload(&ch->dev, ch->dtok, buf, bytes));
    SP_CHECK(ch->ops->sync(&ch->dev));
    return sp_comm_send(ch->fc, peer, ch->dtok, bytes / 4, SP_DT_F32);
}

static sp_status recv_host(chip *ch, int peer, void *buf, size_t bytes)
{
    if (ch->ops->host_memory) return sp_comm_recv(ch->fc, peer, buf, bytes / 4, SP_DT_F32);
    if ((int64_t)bytes > ch->scr_bytes[SP_SCR_TOKENS])
        return spi_fail(SP_EINTERNAL, "token hand-off of %zu bytes, the tokens slot holds %lld", bytes,
                        (long long)ch->scr_bytes[SP_SCR_TOKENS]);
    SP_CHECK(sp_comm_recv(ch->fc, peer, ch->dtok, bytes / 4, SP_DT_F32));
    return ch->ops->download(&ch->dev, buf, ch->dtok, bytes);
}

/* all-gather of blk bytes per chip over every chip */
static sp_status allgather_host(chip *ch, const void *send, void *recv, size_t blk)
{
    if (ch->ops->host_memory) return sp_comm_allgather(ch->fc, SP_AXES_ALL, send, recv, blk, SP_DT_INT8);
    size_t n = (size_t)ch->ex->nchips;
    void *ds = NULL, *dr = NULL;
    sp_status st = ch->ops->alloc(&ch->dev, blk, &ds);
    if (!st) st = ch->ops->alloc(&ch->dev, blk * n, &dr);
    if (!st) st = ch->ops->upload(&ch->dev, ds, send, blk);
    if (!st) st = ch->ops->sync(&ch->dev);
    if (!st) st = sp_comm_allgather(ch->fc, SP_AXES_ALL, ds, dr, blk, SP_DT_INT8);
    if (!st) st = ch->ops->download(&ch->dev, recv, dr, blk * n);
    ch->ops->release(&ch->dev, ds);
    ch->ops->release(&ch->dev, dr);
    return st;
}

/* ---- where a chip is ---------------------------------------------------------------
 * Chip g of ex->world: its stage, replica and rank as the lowering numbers
 * it (in its stage's view under stage_mesh: (stage·R + replica)·T_s + t for
 * tensor rank t of T_s = X_s·Y_s·Z_s, sp_lower.h "stage hand-off"; g
 * itself otherwise). */
static void chip_place(const sp_exec *ex, int g, int *stage, int *replica, int *rank)
{
    if (!ex->hetero) {
        int c[SP_AXIS_COUNT];
        sp_mesh_coords(&ex->mesh, g, c);
        *stage = c[SP_AXIS_STAGE];
        *replica = c[SP_AXIS_REPLICA];
        *rank = g;
        return;
    }
    int s = 0;
    while (s + 1 < ex->l.stages && g >= sp_layout_stage_first_chip(&ex->l, s + 1)) s++;
    const int *d = ex->view[s].mesh;
    int T = d[0] * d[1] * d[2], local = g - (int)sp_layout_stage_first_chip(&ex->l, s);
    *stage = s;
    *replica = local / T;
    *rank = (s * ex->l.replicas + local / T) * T + local % T;
}

/* 1 if chip g writes its replica's tokens and logits: the last stage's tensor rank 0 */
static int is_writer(const sp_exec *ex, int g)
{
    int s, r, v;
    chip_place(ex, g, &s, &r, &v);
    const int *d = ex->hetero ? ex->view[s].mesh : ex->l.mesh;
    return s == ex->l.stages - 1 && v % (d[0] * d[1] * d[2]) == 0;
}

/* ---- results across processes (MPI: one chip per process) -----------------------
 * Every chip contributes its statistics and its replica's rows of the tokens
 * and last logits (meaningful on the writer chips: last stage, x = y = z = 0);
 * an all-gather over the whole mesh gives every process the job's totals and
 * every sequence.  Bytes moved here are not part of any program step. */
typedef struct xstats {
    uint64_t meas[SP_COLL_COUNT], pred[SP_COLL_COUNT], measr[SP_COLL_COUNT], predr[SP_COLL_COUNT];
    uint64_t expect[SP_COLL_COUNT], expectr[SP_COLL_COUNT];
    uint64_t token_bytes;
    int64_t comm_steps, mismatches;
    int64_t alloc_bytes, pred_bytes;
    int64_t host_alloc_bytes, host_pred_bytes;
    uint64_t host_meas, host_pred;
    double prefill_s, decode_step_s, tokens_per_s;
    double class_s[2][SP_CLASS_COUNT];
    char first_mismatch[256];
} xstats;

static void chip_xstats(const chip *ch, xstats *x)
{
    memset(x, 0, sizeof *x);
    memcpy(x->meas, ch->meas, sizeof x->meas);
    memcpy(x->pred, ch->pred, sizeof x->pred);
    memcpy(x->measr, ch->measr, sizeof x->measr);
    memcpy(x->predr, ch->predr, sizeof x->predr);
    memcpy(x->expect, ch->expect, sizeof x->expect);
    memcpy(x->expectr, ch->expectr, sizeof x->expectr);
    x->token_bytes = ch->token_bytes;
    x->comm_steps = ch->comm_steps;
    x->mismatches = ch->mismatches;
    x->alloc_bytes = ch->arena_bytes;
    x->pred_bytes = ch->pred_bytes;
    x->host_alloc_bytes = ch->oarena_bytes;
    x->host_pred_bytes = ch->host_pred_bytes;
    x->host_meas = ch->host_meas;
    x->host_pred = ch->host_pred;
    x->prefill_s = ch->prefill_s;
    x->decode_step_s = ch->decode_step_s;
    x->tokens_per_s = ch->tokens_per_s;
    memcpy(x->class_s, ch->class_s, sizeof x->class_s);
    memcpy(x->first_mismatch, ch->first_mismatch, sizeof x->first_mismatch);
}

/* adds chip g's totals x into st (the first mismatch text from the lowest rank);
 * class times: the mean over a stage's chips, summed over stages, per decode step */
static void add_xstats(const sp_exec *ex, sp_exec_stats *st, const xstats *x, int rank)
{
    int stage, replica, v;
    chip_place(ex, rank, &stage, &replica, &v);
    double per_stage = 1.0 / (double)sp_layout_stage_chips(&ex->l, stage);
    for (int c = 0; c < SP_CLASS_COUNT; c++) {
        st->measured_prefill_class_s[c] += x->class_s[0][c] * per_stage;
        if (ex->G > 1) st->measured_decode_class_s[c] += x->class_s[1][c] * per_stage / (double)(ex->G - 1);
    }
    for (int k = 0; k < SP_COLL_COUNT; k++) {
        st->measured_bytes[k] += x->meas[k];
        st->predicted_bytes[k] += x->pred[k];
        st->measured_recv[k] += x->measr[k];
        st->predicted_recv[k] += x->predr[k];
        st->expected_bytes[k] += x->expect[k];
        st->expected_recv[k] += x->expectr[k];
    }
    st->token_bytes += x->token_bytes;
    st->comm_steps += x->comm_steps;
    if (x->mismatches && !st->mismatches)
        snprintf(st->first_mismatch, sizeof st->first_mismatch, "%s", x->first_mismatch);
    st->mismatches += x->mismatches;
    if (x->alloc_bytes > st->allocated_bytes_per_chip) st->allocated_bytes_per_chip = x->alloc_bytes;
    if (x->pred_bytes > st->predicted_bytes_per_chip) st->predicted_bytes_per_chip = x->pred_bytes;
    if (x->host_alloc_bytes > st->host_allocated_bytes_per_chip) st->host_allocated_bytes_per_chip = x->host_alloc_bytes;
    if (x->host_pred_bytes > st->host_predicted_bytes_per_chip) st->host_predicted_bytes_per_chip = x->host_pred_bytes;
    st->host_link_bytes_measured += x->host_meas;
    st->host_link_bytes_predicted += x->host_pred;
    if (rank == 0) {
        st->prefill_s = x->prefill_s;
        st->decode_step_s = x->decode_step_s;
        st->tokens_per_s = x->tokens_per_s;
    }
}

static sp_status exchange_results(chip *ch, int64_t Br, int64_t base)
{
    sp_exec *ex = ch->ex;
    int n = ex->nchips;
    int64_t G = ex->G, V = ch->m->vocab, nl = ex->logits ? Br * ex->lg_steps * V : 0;
    size_t blk = sizeof(xstats) + (size_t)(Br * G) * sizeof(int32_t) + (size_t)nl * sizeof(float);
    blk = (blk + 7) & ~(size_t)7;
    char *send = calloc(1, blk), *recv = malloc(blk * (size_t)n);
    int *members = malloc((size_t)n * sizeof *members);
    sp_status st = SP_OK;
    if (!send || !recv || !members) st = spi_fail(SP_ENOMEM, "result exchange");
    if (!st) {
        xstats x;
        chip_xstats(ch, &x);
        memcpy(send, &x, sizeof x);
        memcpy(send + sizeof x, ex->tokens + base * G, (size_t)(Br * G) * sizeof(int32_t));
        if (nl)
            memcpy(send + sizeof x + (size_t)(Br * G) * 4, ex->logits + base * ex->lg_steps * V, (size_t)nl * sizeof(float));
        st = allgather_host(ch, send, recv, blk);
    }
    if (!st) {
        sp_mesh_group_members(&ex->mesh, ch->grank, SP_AXES_ALL, members);
        sp_exec_stats tot;
        memset(&tot, 0, sizeof tot);
        for (int g = 0; g < n; g++) {
            const char *b = recv + (size_t)g * blk;
            xstats x;
            memcpy(&x, b, sizeof x);
            add_xstats(ex, &tot, &x, members[g]);
            int cs, cr, cv;
            chip_place(ex, members[g], &cs, &cr, &cv);
            if (!is_writer(ex, members[g]) ||
                (members[g] >= ex->local_first && members[g] < ex->local_first + ex->local_count))
                continue;
            int64_t rb = cr * Br;
            memcpy(ex->tokens + rb * G, b + sizeof x, (size_t)(Br * G) * sizeof(int32_t));
            if (nl)
                memcpy(ex->logits + rb * ex->lg_steps * V, b + sizeof x + (size_t)(Br * G) * 4, (size_t)nl * sizeof(float));
        }
        pthread_mutex_lock(&ex->mu);
        ex->st = tot;
        pthread_mutex_unlock(&ex->mu);
    }
    free(send);
    free(recv);
    free(members);
    return st;
}

/* Separate groups under MPI: each group's results are on its own ranks
 * (exchange_results); one all-gather over the job's flat communicator gives
 * every process the other group's statistics (into the sibling executor),
 * tokens and logits: step 0 from the prefill group, steps 1.. from the
 * decode group.  Bytes moved here are not part of any program step. */
static sp_status exchange_groups(chip *ch, sp_comm *xc)
{
    sp_exec *ex = ch->ex, *sib = ex->sibling;
    int n = sp_comm_group_size(xc, SP_AXES_ALL);
    int64_t B = ex->B, G = ex->G, V = ch->m->vocab, nl = ex->logits ? B * ex->lg_steps * V : 0;
    size_t hdr = sizeof(sp_exec_stats), tb = (size_t)(B * G) * sizeof(int32_t);
    size_t blk = (hdr + tb + (size_t)nl * sizeof(float) + 7) & ~(size_t)7;
    char *send = calloc(1, blk), *recv = malloc(blk * (size_t)n);
    sp_status st = SP_OK;
    if (!send || !recv) st = spi_fail(SP_ENOMEM, "result exchange between the groups");
    if (!st) {
        pthread_mutex_lock(&ex->mu);
        memcpy(send, &ex->st, hdr);
        pthread_mutex_unlock(&ex->mu);
        memcpy(send + hdr, ex->tokens, tb);
        if (nl) memcpy(send + hdr + tb, ex->logits, (size_t)nl * sizeof(float));
        st = sp_comm_allgather(xc, SP_AXES_ALL, send, recv, blk, SP_DT_INT8);
    }
    if (!st) {
        const char *o = recv + (size_t)ex->xfer_peer_first * blk;   /* the other group's chip 0 */
        memcpy(&sib->st, o, hdr);
        /* the other group's steps: the prefill group takes steps 1.., the decode group step 0 */
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < G; s++)
                if ((ex->role == 1) == (s > 0)) {
                    memcpy(&ex->tokens[b * G + s], o + hdr + (size_t)(b * G + s) * sizeof(int32_t), sizeof(int32_t));
                    if (nl && ex->lg_steps == G)
                        memcpy(ex->logits + (b * G + s) * V, o + hdr + tb + (size_t)((b * G + s) * V) * sizeof(float),
                               (size_t)V * sizeof(float));
                }
        /* the last step's logits: the decode group's, the prefill group's when gen is 1 */
        if (nl && ex->lg_steps == 1 && (ex->role == 1) == (G > 1))
            memcpy(ex->logits, o + hdr + tb, (size_t)nl * sizeof(float));
    }
    free(send);
    free(recv);
    return st;
}

/* The sampled tokens of the chip's replica (Br of them) from the last stage
 * to stage 0, counted in token_bytes (not a program step).  Stage 0's chip
 * of tensor rank t takes them from the last stage's chip of rank t mod T_L
 * (T_s: stage s's tensor chips; equal meshes: the chip of its own
 * coordinates), which sends to each such t in ascending order. */
static sp_status token_handoff(chip *ch, int32_t *cur, int64_t Br)
{
    const sp_exec *ex = ch->ex;
    const sp_layout *jl = &ex->l;
    int P = jl->stages;
    if (ch->stage != 0 && ch->stage != P - 1) return SP_OK;
    const int *m0 = ex->hetero ? ex->view[0].mesh : jl->mesh, *mL = ex->hetero ? ex->view[P - 1].mesh : jl->mesh;
    int T0 = m0[0] * m0[1] * m0[2], TL = mL[0] * mL[1] * mL[2];
    int T = ch->stage == 0 ? T0 : TL, t = ch->rank % T;
    int first0 = (int)sp_layout_stage_first_chip(jl, 0), firstL = (int)sp_layout_stage_first_chip(jl, P - 1);
    sp_comm_counters a, b;
    SP_CHECK(sp_comm_stats(ch->fc, &a));
    if (ch->stage == P - 1)
        for (int t0 = t; t0 < T0; t0 += TL)
            SP_CHECK(send_host(ch, first0 + ch->replica * T0 + t0, cur, (size_t)Br * sizeof *cur));
    if (ch->stage == 0) SP_CHECK(recv_host(ch, firstL + ch->replica * TL + t % TL, cur, (size_t)Br * sizeof *cur));
    SP_CHECK(sp_comm_stats(ch->fc, &b));
    ch->token_bytes += ch->stage == 0 ? b.bytes_recv[SP_COLL_SENDRECV] - a.bytes_recv[SP_COLL_SENDRECV]
                                      : b.bytes_sent[SP_COLL_SENDRECV] - a.bytes_sent[SP_COLL_SENDRECV];
    return SP_OK;
}

/* The last decode step a ragged micro-batch q of the chip runs: its own longest gen; with
 * experts split over replicas, its replicas' (they run each step together, a replica with
 * no sequence left running it with none: sp_lower.h, "Ragged batches") */
static int64_t ragged_last_step(const chip *ch, const sp_ragged *q)
{
    return sp_lower_ragged_lockstep(ch->m, ch->l) > 1 ? sp_ragged_peers_max_gen(q) : q->max_gen;
}

static sp_status chip_run(chip *ch)
{
    sp_exec *ex = ch->ex;
    const sp_layout *l = ch->l;
    SP_CHECK(sp_comm_open(ex->world, ch->grank, &ch->fc));
    if (!ex->hetero) ch->c = ch->fc;
    else {
        /* the stage's world: its chips in order, this one at replica·T_s + t */
        int T = l->mesh[0] * l->mesh[1] * l->mesh[2];
        SP_CHECK(sp_comm_open(ex->sworld[ch->stage], ch->rank - ch->stage * l->replicas * T, &ch->c));
    }
    SP_CHECK(spi_chip_setup(ch));
    if (ex->trace) {
        /* one event per step run: M micro-batches x (the prefill + G - 1 decode
         * steps) x the program's steps, reserved before the timed phases so
         * that tracing adds one store per step to them */
        spi_ckd ck = SPI_CKD_INIT;
        int64_t npf = spi_ck_mul3(&ck, "timeline", ch->pf->passes_seq, ch->pf->passes_tok,   /* every prefill pass */
                                  sp_program_steps(ch->pf));
        int64_t ndc = sp_program_steps(ch->dc);
        int64_t n = spi_ck_mul(&ck, "timeline", ch->l->microbatches,
                               spi_ck_add(&ck, "timeline", npf, spi_ck_mul(&ck, "timeline", ex->G - 1, ndc)));
        if (ck.overflow) return spi_fail(SP_ENOMEM, "timeline: %s overflow", ck.what);
        SP_CHECK(spi_timeline_reserve(ch, n));
    }
    int64_t Br = ex->B / l->replicas, base = ch->replica * Br, mbs = ch->pf->micro_batch;
    int64_t V = ch->m->vocab, Vp = ch->pf->vocab_padded, P = ex->P, G = ex->G;
    int last = ch->stage == l->stages - 1;
    int writer = last && ch->coords[SP_AXIS_X] == 0 && ch->coords[SP_AXIS_Y] == 0 && ch->coords[SP_AXIS_Z] == 0;
    int32_t *cur = calloc((size_t)Br, sizeof *cur);
    int32_t *in = malloc((size_t)(mbs * P) * sizeof *in);
    uint64_t *rng = calloc((size_t)Br, sizeof *rng);
    sp_program *dstep = malloc(sizeof *dstep);
    sp_status st = SP_OK;
    if (!cur || !in || !rng || !dstep) st = spi_fail(SP_ENOMEM, "run state");
    for (int64_t b = 0; b < Br && !st; b++) rng[b] = ex->samp.seed + (uint64_t)(base + b);
    /* Wall intervals that contain every chip's steps: t0 before rank 0 enters
     * the starting barrier (no chip leaves it earlier); the prefill ends when
     * rank 0 leaves the first token's barrier (t1, every chip done), and the
     * decode steps start when rank 0 enters it (t1_in: no chip starts its
     * next step earlier).  So a chip's per-step times never sum past them,
     * however the threads are scheduled. */
    double t0 = 0, t1 = 0, t1_in = 0;
    if (ch->grank == 0) t0 = spi_now_s();
    if (!st) st = sp_comm_barrier(ch->fc, SP_AXES_ALL);
    /* separate groups: the prefill group runs step 0 and sends the cache; the decode
     * group receives it (and the first tokens) and runs steps 1..G-1 */
    sp_comm *xc = NULL;
    if (!st && ex->role) st = sp_comm_open(ex->xworld, ex->xfer_first + ch->grank, &xc);
    if (!st && ex->role == 2) {
        st = spi_xfer_run(ch, xc, cur);
        if (!st) st = sp_comm_barrier(ch->fc, SP_AXES_ALL);
        if (ch->grank == 0) t1_in = t1 = spi_now_s();
    }
    for (int64_t s = ex->role == 2 ? 1 : 0; s < (ex->role == 1 ? 1 : G) && !st; s++) {
        ch->token = s;
        int idle = 0;
        if (s == 0) ch->prog = ch->pf;
        else if (ex->ragged) {
            /* a ragged batch: each micro-batch's program is lowered below; a replica whose
             * sequences are all done idles until the others are */
            idle = 1;
            for (int j = 0; j < l->microbatches; j++) idle &= s > ragged_last_step(ch, &ch->rgm[j]);
        } else {
            sp_shape sh = spi_shape_of(ex, 1, s);
            if ((st = sp_lower(ch->m, &ex->l, SP_PHASE_DECODE, &sh, ch->stage, dstep))) break;
            ch->prog = dstep;
        }
        /* a prefill runs each micro-batch as passes (sp_program: sequence chunks, each as
         * token passes in order); a decode step is one pass */
        int64_t nseq = s == 0 ? ch->pf->passes_seq : 1, ntok = s == 0 ? ch->pf->passes_tok : 1;
        for (int64_t u = 0; u < (idle ? 0 : (int64_t)l->microbatches * nseq * ntok) && !st; u++) {
            int mb = (int)(u / (nseq * ntok));
            int64_t i = u / ntok % nseq, j = u % ntok;
            if (s == 0 && j < ntok - 1) {
                /* an earlier token pass: the same program at its context, without the logits */
                sp_shape sh = spi_shape_of(ex, 0, 0);
                sh.passes_left = ntok - 1 - j;
                if ((st = sp_lower(ch->m, &ex->l, SP_PHASE_PREFILL, &sh, ch->stage, dstep))) break;
                ch->prog = dstep;
            } else if (ex->ragged) {
                /* micro-batch mb's own sequences (sp_ragged_micro): step s runs those still
                 * generating (sp_lower_ragged); one whose sequences all finished sits out, on
                 * every stage alike.  The prefill's pass i (prefill_chunk) its own sequences */
                const sp_ragged *q = &ch->rgm[mb];
                if (s > ragged_last_step(ch, q)) continue;
                sp_shape sh = spi_shape_of(ex, s > 0, s);
                if (s == 0) sh.q_len = sh.context = q->max_prompt;
                if ((st = sp_lower_ragged(ch->m, &ex->l, s ? SP_PHASE_DECODE : SP_PHASE_PREFILL, &sh, q, s ? s : i,
                                          ch->stage, dstep)))
                    break;
                ch->prog = dstep;
            } else if (s == 0) {
                ch->prog = ch->pf;
            }
            const sp_program *p = ch->prog;
            int64_t ps = p->pass_seqs;
            int64_t r0 = (int64_t)mb * mbs;
            ch->pass_seq = i;
            /* a ragged pass's rows are blocks with rows no sequence reads: token 0 there */
            if (p->ragged) memset(in, 0, (size_t)(p->rag_blocks * p->rag_rows) * sizeof *in);
            for (int64_t b = 0; b < ps; b++) {
                int64_t q = r0 + sp_lower_pass_seq(p, i, b);   /* the replica's sequence of row block b */
                int64_t seq, row0, L, tok0, orow;                /* its rows (packed when ragged) and first token */
                if (p->ragged) sp_lower_ragged_io(p, b, &seq, &row0, &orow, &L, &tok0);
                else sp_lower_ragged_seq(p, b, &seq, &row0, &L, &tok0);
                for (int64_t t = 0; t < L; t++) in[row0 + t] = s == 0 ? ex->prompt[(base + q) * P + tok0 + t] : cur[q];
            }
            ch->in_tok = in;
            if ((st = spi_run_steps(ch, SP_PART_PRE, mb))) break;
            for (ch->li = 0; ch->li < p->n_layers && !st; ch->li++) st = spi_run_steps(ch, sp_program_layer_part(p, ch->li), mb);
            if (st) break;
            ch->li = p->n_layers - 1;
            if ((st = spi_run_steps(ch, SP_PART_POST, mb))) break;
            if (!last || !p->logits) continue;
            const float *lg = ch->buf[l->mesh[0] * l->mesh[1] * l->mesh[2] > 1 ? SP_BUF_LOGITS_ALL : SP_BUF_LOGITS];
            for (int64_t b = 0; b < ps && !st; b++) {
                int64_t q = r0 + sp_lower_pass_seq(p, i, b), lrow = b;   /* its logits row */
                if (p->ragged) {
                    int64_t seq, row0, L, tok0;
                    sp_lower_ragged_io(p, b, &seq, &row0, &lrow, &L, &tok0);
                }
                const float *row = lg + lrow * Vp;   /* on the device */
                /* a ragged batch's sequence stops at its own gen (a later step's token is dropped) */
                int64_t Gq = ex->ragged ? ex->ragged->gen[base + q] : G;
                if (s >= Gq) continue;
                int keep = writer && ex->logits && (ex->lg_steps == G || s == Gq - 1);
                int32_t tok = 0;
                if ((!ex->greedy || keep) && !ch->ops->host_memory) {
                    /* sampling and the kept logits read the row on the host */
                    if ((st = ch->ops->download(&ch->dev, ch->hrow, row, (size_t)V * sizeof(float)))) break;
                    row = ch->hrow;
                }
                if (ex->greedy) st = ch->ops->argmax(&ch->dev, lg + lrow * Vp, V, &tok);
                else st = sp_kern_sample(row, V, &ex->samp, &rng[q], ch->scr[SP_SCR_SAMPLE], (size_t)ch->scr_bytes[SP_SCR_SAMPLE], &tok);
                cur[q] = tok;
                if (writer) {
                    ex->tokens[(base + q) * G + s] = tok;
                    if (keep)
                        memcpy(ex->logits + ((base + q) * ex->lg_steps + (ex->lg_steps == G ? s : 0)) * V, row,
                               (size_t)V * sizeof(float));
                }
            }
        }
        if (st) break;
        if (l->stages > 1 && s < G - 1 && ex->role != 1 && (st = token_handoff(ch, cur, Br))) break;
        if (s == 0 && ch->grank == 0) t1_in = spi_now_s();
        if ((st = sp_comm_barrier(ch->fc, SP_AXES_ALL))) break;
        if (s == 0 && ch->grank == 0) t1 = spi_now_s();
    }
    if (!st && ex->role == 1) st = spi_xfer_run(ch, xc, cur);
    if (!st && ch->grank == 0) {
        double t2 = spi_now_s();
        ch->prefill_s = t1 - t0;
        ch->decode_step_s = G > 1 && ex->role != 1 ? (t2 - t1_in) / (double)(G - 1) : 0;
        ch->tokens_per_s = t2 > t0 ? (double)(ex->B * G) / (t2 - t0) : 0;
    }
    if (!st && ex->local_count < ex->nchips) st = exchange_results(ch, Br, base);
    if (!st && ex->role && ex->local_count < ex->nchips) st = exchange_groups(ch, xc);
    sp_comm_close(xc);
    free(cur);
    free(in);
    free(rng);
    free(dstep);
    return st;
}

/* Writes the chip's timeline: one complete event per step it ran, named and
 * numbered as sp_trace.h says (decode steps by the program at the run's last
 * context: the same steps, labels and streams at every context). */
static sp_status write_timeline(chip *ch)
{
    sp_exec *ex = ch->ex;
    for (int64_t i = 0; i < ch->nev; i++) {
        const spi_event *v = &ch->ev[i];
        char id[SP_TRACE_ID_MAX], name[SP_TRACE_LABEL_MAX];
        if (v->part == SPI_EVENT_KV_SEND || v->part == SPI_EVENT_KV_RECV) {
            sp_trace_xfer_id(v->part == SPI_EVENT_KV_SEND, v->index, id, name);
            sp_trace_event te = {.chip = ex->xfer_first + ch->grank, .stream = SP_TRACE_COMM, .ts_s = v->t0 - ex->t_base,
                                 .dur_s = v->t1 - v->t0, .name = name, .id = id, .bytes = v->bytes};
            SP_CHECK(sp_trace_write(ex->trace, &te));
            continue;
        }
        const sp_program *p = v->token == 0 ? ch->pf : ch->dc;
        const sp_step *s = &sp_program_part(p, (sp_prog_part)v->part)->s[v->index];
        sp_trace_step_id_pass(p->phase, v->token - 1, v->pass, (sp_prog_part)v->part, v->layer, v->index, id, sizeof id);
        /* a group's chips are numbered in the job: the decode group after the prefill group */
        sp_trace_event te = {.chip = ex->xfer_first + ch->grank, .stream = sp_trace_step_stream(s), .ts_s = v->t0 - ex->t_base,
                             .dur_s = v->t1 - v->t0, .name = sp_trace_step_label(s, name, sizeof name), .id = id,
                             .mb = v->mb, .bytes = v->bytes, .flops = v->flops};
        SP_CHECK(sp_trace_write(ex->trace, &te));
    }
    return SP_OK;
}

static void *chip_thread(void *arg)
{
    chip *ch = arg;
    sp_exec *ex = ch->ex;
    if (ex->backend == SP_COMM_BACKEND_THREADS) spi_threads_pin(ch->thread);
    sp_status st = chip_run(ch);
    if (!st && ex->trace) st = write_timeline(ch);
    pthread_mutex_lock(&ex->mu);
    if (st && !ex->err) {
        ex->err = st;
        snprintf(ex->errmsg, sizeof ex->errmsg, "%s", sp_last_error());
    }
    if (ex->local_count == ex->nchips) {
        /* every chip is here: sum in place */
        xstats x;
        chip_xstats(ch, &x);
        add_xstats(ex, &ex->st, &x, ch->grank);
    }
    pthread_mutex_unlock(&ex->mu);
    if (st) sp_comm_abort(ex->world, sp_last_error());
    if (st && ex->xworld) sp_comm_abort(ex->xworld, sp_last_error());   /* the other group waits on it */
    for (int s = 0; st && ex->hetero && s < ex->l.stages; s++) sp_comm_abort(ex->sworld[s], sp_last_error());
    if (ch->c != ch->fc) sp_comm_close(ch->c);
    sp_comm_close(ch->fc);
    ch->c = ch->fc = NULL;
    spi_chip_teardown(ch);
    free(ch->ev);
    ch->ev = NULL;
    return NULL;
}

/* ---- public ------------------------------------------------------------------ */
/* Chips that keep their memory on the host share this machine's: a run that
 * needs more than it has is refused up front with the bytes it needs, not
 * left to fail (or to swap) in the middle of allocating. */
static sp_status host_fits(int64_t chip_bytes, int local_chips)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t have, need;
    if (pages <= 0 || page <= 0 || !spi_ckd_mul(pages, page, &have)) return SP_OK;   /* unknown: let allocation say */
    if (spi_ckd_mul(chip_bytes, local_chips, &need) && need <= have) return SP_OK;
    return spi_fail(SP_EINFEASIBLE,
                    "the run needs %lld bytes per chip × %d chips in this process = %.0f bytes, more than this "
                    "machine's %lld bytes of memory",
                    (long long)chip_bytes, local_chips, (double)chip_bytes * local_chips, (long long)have);
}

static sp_status build_one(const sp_model *m, const sp_layout *l, int64_t batch, int64_t prompt, int64_t gen,
                           const sp_weights *w, sp_comm_backend backend, int role, int first, int total,
                           const sp_ragged *r, sp_exec **out);

/* A new executor of the job's description (caller frees with sp_exec_free); NULL when out of memory. */
static sp_exec *exec_new(const sp_model *m, const sp_layout *l, int64_t batch, int64_t prompt, int64_t gen,
                         const sp_weights *w, sp_comm_backend backend)
{
    sp_exec *ex = calloc(1, sizeof *ex);
    if (!ex) return NULL;
    ex->m = *m;
    ex->l = *l;
    ex->B = batch;
    ex->P = prompt;
    ex->G = gen;
    ex->w = w;
    ex->backend = backend;
    pthread_mutex_init(&ex->mu, NULL);
    return ex;
}

/* Separate prefill and decode groups: one executor per group (each its own
 * communicator over its own mesh: under MPI over its part of the job's
 * ranks) and the job's flat communicator for the KV transfer. */
static sp_status build_groups(const sp_model *m, const sp_layout *l, int64_t batch, int64_t prompt, int64_t gen,
                              const sp_weights *w, sp_comm_backend backend, sp_exec **out)
{
    if (backend == SP_COMM_BACKEND_NCCL)
        return spi_fail(SP_ENOTSUP, "separate prefill and decode chip groups on the CUDA backend are not implemented "
                                    "(threads and MPI run them)");
    sp_exec *ex = exec_new(m, l, batch, prompt, gen, w, backend);
    if (!ex) return spi_fail(SP_ENOMEM, "executor");
    int64_t n[SP_PHASE_COUNT];
    sp_layout g[SP_PHASE_COUNT];
    sp_status st = SP_OK;
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        sp_layout_phase_group(l, (sp_phase)p, &g[p]);
        n[p] = sp_layout_chips(&g[p]);
    }
    for (int p = 0; p < SP_PHASE_COUNT && !st; p++)
        st = build_one(m, &g[p], batch, prompt, gen, w, backend, p + 1, p == 0 ? 0 : (int)n[0], (int)(n[0] + n[1]),
                       NULL, &ex->grp[p]);
    if (!st) {
        sp_mesh flat = {{1, 1, 1, 1, (int)(n[0] + n[1])}};
        ex->mesh = flat;
        ex->nchips = (int)(n[0] + n[1]);
        ex->local_count = ex->nchips;
        st = sp_comm_world_create(backend, &flat, &ex->xworld);
    }
    if (!st)
        for (int p = 0; p < SP_PHASE_COUNT; p++) {
            sp_exec *gx = ex->grp[p];
            gx->job = *l;
            gx->xworld = ex->xworld;
            gx->xfer_first = p == 0 ? 0 : (int)n[0];
            gx->xfer_peer_first = p == 0 ? (int)n[0] : 0;
            gx->sibling = ex->grp[!p];
        }
    if (st) {
        sp_exec_free(ex);
        return st;
    }
    *out = ex;
    return SP_OK;
}

sp_status sp_exec_build(const sp_model *m, const sp_layout *l, int64_t batch, int64_t prompt, int64_t gen,
                        const sp_weights *w, sp_comm_backend backend, sp_exec **out)
{
    if (!m || !l || !w || !out) return spi_fail(SP_EINVAL, "sp_exec_build: bad arguments");
    *out = NULL;
    if (batch < 1 || prompt < 1 || gen < 1)
        return spi_fail(SP_EINVAL, "batch %lld, prompt %lld, gen %lld must be >= 1", (long long)batch,
                        (long long)prompt, (long long)gen);
    if (sp_layout_disaggregated(l)) return build_groups(m, l, batch, prompt, gen, w, backend, out);
    return build_one(m, l, batch, prompt, gen, w, backend, 0, 0, 0, NULL, out);
}

sp_status sp_exec_build_ragged(const sp_model *m, const sp_layout *l, const sp_ragged *r, const sp_weights *w,
                               sp_comm_backend backend, sp_exec **out)
{
    if (!m || !l || !r || !w || !out || r->n < 1) return spi_fail(SP_EINVAL, "sp_exec_build_ragged: bad arguments");
    *out = NULL;
    if (sp_layout_disaggregated(l))
        return spi_fail(SP_EINVAL, "ragged batches on separate prefill and decode chip groups: not implemented");
    if (sp_layout_hetero(l))
        return spi_fail(SP_ENOTSUP, "stage_mesh: running a ragged batch through stages of their own mesh is not "
                                    "implemented (equal-length batches run)");
    return build_one(m, l, r->n, r->max_prompt, r->max_gen, w, backend, 0, 0, 0, r, out);
}

/* first, total: the world over the job's chips first.. of total (separate groups); 0, 0: the job */
static sp_status build_one(const sp_model *m, const sp_layout *l, int64_t batch, int64_t prompt, int64_t gen,
                           const sp_weights *w, sp_comm_backend backend, int role, int first, int total,
                           const sp_ragged *r, sp_exec **out)
{
    *out = NULL;
    int64_t ctx = r ? r->max_context : prompt + gen;   /* the KV cache per sequence */
    if (ctx > m->max_context)
        return spi_fail(SP_EINVAL, "prompt + gen = %lld exceeds the model's context %lld", (long long)ctx,
                        (long long)m->max_context);
    if (sp_layout_hetero(l) && backend == SP_COMM_BACKEND_NCCL)
        return spi_fail(SP_ENOTSUP, "stage_mesh: stages of their own mesh on the CUDA executor are not implemented "
                                    "(the threads and MPI backends run them)");
    if (r && backend == SP_COMM_BACKEND_NCCL)
        return spi_fail(SP_EINVAL, "ragged batches on the CUDA executor: not implemented (the threads and MPI "
                                   "backends run them)");
    /* mixture of experts: routing runs on host memory (refused as input the executor does not
     * take: SP_EINVAL, the CLI's exit 2) */
    if (m->n_experts > 0 && backend == SP_COMM_BACKEND_NCCL)
        return spi_fail(SP_EINVAL, "model %s: mixture-of-experts layers on the CUDA device are not implemented "
                                    "(run them on the threads or MPI backend)", m->name);
    const spi_xops *ops = &spi_xops_cpu;
    if (backend == SP_COMM_BACKEND_NCCL) {
        /* GPUs: buffers in device memory, moved by NCCL */
        if (!(ops = spi_xops_cuda()))
            return spi_fail(SP_ENOTSUP, "the CUDA executor is not in this build: reconfigure with --with-cuda=DIR "
                                        "(needs nvcc, cuBLAS, NCCL and MPI)");
    } else if (backend != SP_COMM_BACKEND_THREADS && backend != SP_COMM_BACKEND_MPI) {
        return spi_fail(SP_EINVAL, "unknown communicator backend %d", (int)backend);
    }
    if (l->weights != SP_DT_F32 && l->weights != SP_DT_BF16 && l->weights != SP_DT_F16 && l->weights != SP_DT_INT8 &&
        l->weights != SP_DT_FP8)
        return spi_fail(SP_ENOTSUP, "weights dtype %s", sp_dtype_name(l->weights));
    if (l->kv != SP_DT_F32 && l->kv != SP_DT_BF16)
        return spi_fail(SP_ENOTSUP, "KV cache dtype %s (the executor keeps f32 or bf16)", sp_dtype_name(l->kv));
    if (l->stages > 1 && l->microbatches < 1) return spi_fail(SP_EINVAL, "micro-batches");
    sp_program *p = malloc(2 * sizeof *p);   /* a stage's prefill and decode programs */
    /* a ragged batch: each micro-batch of each replica its own sequences (sp_ragged_micro) */
    int nrep = r ? l->replicas : 1, M = l->microbatches > 1 ? l->microbatches : 1;
    sp_ragged *mb = r ? calloc((size_t)M, sizeof *mb) : NULL;
    if (!p || (r && !mb)) {
        free(p);
        free(mb);
        return spi_fail(SP_ENOMEM, "program");
    }
    sp_status st = SP_OK;
    int64_t chip_bytes = 0;   /* the largest stage's bytes per chip: what chip_setup will allocate */
    for (int s = 0; s < l->stages * nrep && !st; s++) {
        for (int j = 0; r && j < M && !st; j++) st = sp_ragged_micro(r, nrep, M, s % nrep, j, &mb[j]);
        if (st) break;
        sp_shape sh = {batch, prompt, prompt, ctx, SP_DT_F32, 0};
        sp_shape sd = {batch, 1, ctx, ctx, SP_DT_F32, 0};
        sp_mem_sizes ms;
        if (r) {
            st = sp_lower_ragged_mem(m, l, &sh, &sd, mb, M, s / nrep, &p[0], &p[1], &ms);
        } else if (!(st = sp_lower(m, l, SP_PHASE_PREFILL, &sh, s / nrep, &p[0])) &&
                   !(st = sp_lower(m, l, SP_PHASE_DECODE, &sd, s / nrep, &p[1]))) {
            st = sp_lower_mem_sizes(&p[0], &p[1], &ms);
        }
        if (!st && ms.total > chip_bytes) chip_bytes = ms.total;
    }
    free(p);
    free(mb);
    if (st) return st;
    sp_exec *ex = exec_new(m, l, batch, prompt, gen, w, backend);
    if (!ex) return spi_fail(SP_ENOMEM, "executor");
    ex->ragged = r;
    ex->role = role;
    sp_layout_mesh(l, &ex->mesh);
    ex->nchips = sp_mesh_size(&ex->mesh);
    if (sp_layout_hetero(l)) {
        /* stages of their own meshes: a flat world over every chip, one per stage over its mesh */
        ex->hetero = 1;
        ex->nchips = (int)sp_layout_chips(l);
        ex->mesh = (sp_mesh){{1, 1, 1, 1, ex->nchips}};
        if (!(ex->view = calloc((size_t)l->stages, sizeof *ex->view))) st = spi_fail(SP_ENOMEM, "stage views");
        for (int s = 0; s < l->stages && !st; s++) {
            ex->view[s] = *l;
            sp_layout_stage_mesh(l, s, ex->view[s].mesh);
            sp_mesh sm = {{1, l->replicas, ex->view[s].mesh[0], ex->view[s].mesh[1], ex->view[s].mesh[2]}};
            st = sp_comm_world_create_part(backend, &sm, (int)sp_layout_stage_first_chip(l, s), ex->nchips,
                                           &ex->sworld[s]);
        }
    }
    ex->ops = ops;
    ex->rope_scale = 1.0;
    if (!st && m->positions == SP_POS_ROPE) {
        /* one table for the whole job: the frequencies depend on the model (and, for
         * dynamic scaling, on the context, refused where it would change them) */
        ex->rope_inv = malloc((size_t)(sp_model_rotary_dims(m) / 2) * sizeof *ex->rope_inv);
        st = ex->rope_inv ? sp_model_rope_freqs(m, ctx, ex->rope_inv, &ex->rope_scale)
                          : spi_fail(SP_ENOMEM, "RoPE table");
    }
    if (!st)
        st = total ? sp_comm_world_create_part(backend, &ex->mesh, first, total, &ex->world)
                   : sp_comm_world_create(backend, &ex->mesh, &ex->world);
    if (!st) st = sp_comm_world_local_ranks(ex->world, &ex->local_first, &ex->local_count);
    if (!st && ops->host_memory) st = host_fits(chip_bytes, ex->local_count);
    if (st) {
        sp_exec_free(ex);
        return st;
    }
    *out = ex;
    return SP_OK;
}

void sp_exec_free(sp_exec *ex)
{
    if (!ex) return;
    for (int p = 0; p < SP_PHASE_COUNT; p++) sp_exec_free(ex->grp[p]);
    if (ex->grp[0] || ex->grp[1]) sp_comm_world_free(ex->xworld);   /* the job's; its groups borrow it */
    sp_comm_world_free(ex->world);
    for (int s = 0; s < SP_LAYOUT_MAX_STAGES; s++) sp_comm_world_free(ex->sworld[s]);
    free(ex->view);
    pthread_mutex_destroy(&ex->mu);
    free(ex->rope_inv);
    free(ex->trace_path);
    free(ex);
}

sp_status sp_exec_set_trace(sp_exec *ex, const char *path)
{
    if (!ex) return spi_fail(SP_EINVAL, "sp_exec_set_trace: no executor");
    char *p = NULL;
    if (path && !(p = strdup(path))) return spi_fail(SP_ENOMEM, "trace path");
    free(ex->trace_path);
    ex->trace_path = p;
    return SP_OK;
}

sp_status sp_exec_run(sp_exec *ex, const int32_t *prompt, const sp_kern_sample_opts *sample, int32_t *tokens,
                      float *last_logits, sp_exec_stats *stats)
{
    return sp_exec_run_logits(ex, prompt, sample, tokens, last_logits, 0, stats);
}

/* the run's inputs and outputs, into ex (a group: each of the job's groups) */
static void run_init(sp_exec *ex, const int32_t *prompt, const sp_kern_sample_opts *sample, int32_t *tokens,
                     float *logits, int all_steps)
{
    ex->prompt = prompt;
    if (sample) ex->samp = *sample;
    else sp_kern_sample_opts_init(&ex->samp);
    ex->greedy = ex->samp.temperature <= 0;
    ex->tokens = tokens;
    ex->logits = logits;
    ex->lg_steps = all_steps ? ex->G : 1;
    memset(&ex->st, 0, sizeof ex->st);
    ex->err = SP_OK;
    ex->errmsg[0] = '\0';
}

/* one thread per chip ex hosts, from chips[0] and th[0], the process's chip
 * threads thread0.. (their cores); returns the threads started */
static int spawn(sp_exec *ex, chip *chips, pthread_t *th, int thread0)
{
    int started = 0;
    for (int i = 0; i < ex->local_count; i++) {
        chip *ch = &chips[i];
        int r = ex->local_first + i;
        ch->ex = ex;
        ch->m = &ex->m;
        ch->grank = r;
        ch->thread = thread0 + i;
        chip_place(ex, r, &ch->stage, &ch->replica, &ch->rank);
        ch->l = ex->hetero ? &ex->view[ch->stage] : &ex->l;
        sp_mesh mesh;
        sp_layout_mesh(ch->l, &mesh);
        sp_mesh_coords(&mesh, ch->rank, ch->coords);
        if (pthread_create(&th[i], NULL, chip_thread, ch)) {
            sp_comm_abort(ex->world, "thread creation failed");
            if (ex->xworld) sp_comm_abort(ex->xworld, "thread creation failed");
            for (int s = 0; ex->hetero && s < ex->l.stages; s++) sp_comm_abort(ex->sworld[s], "thread creation failed");
            if (!ex->err) {
                ex->err = SP_ENOMEM;
                snprintf(ex->errmsg, sizeof ex->errmsg, "pthread_create failed");
            }
            break;
        }
        started++;
    }
    return started;
}

/* Opens ex's trace for this process's chips first .. first+count−1 of the
 * job's total: ex->trace_path, or PATH.<first> for a process that hosts
 * only some (MPI). */
static sp_status open_trace(sp_exec *ex, int first, int count, int total)
{
    char path[4096];
    if (count == total) snprintf(path, sizeof path, "%s", ex->trace_path);
    else snprintf(path, sizeof path, "%s.%d", ex->trace_path, first);
    return sp_trace_open(path, first, count, &ex->trace);
}

/* Closes ex's trace, its write errors the run's error unless one came first. */
static void close_trace(sp_exec *ex)
{
    if (!ex->trace) return;
    sp_status ts = sp_trace_close(ex->trace);
    ex->trace = NULL;
    if (ts && !ex->err) {
        ex->err = ts;
        snprintf(ex->errmsg, sizeof ex->errmsg, "%s", sp_last_error());
    }
}

/* Separate groups: both groups' chips run at once (the prefill group's step 0,
 * the transfer, the decode group's steps); the job's figures are the
 * groups': bytes summed, memory the larger chip, prefill from the prefill
 * group, decode steps from the decode group, tokens/s over the whole run. */
static sp_status run_groups(sp_exec *ex, const int32_t *prompt, const sp_kern_sample_opts *sample, int32_t *tokens,
                            float *logits, int all_steps, sp_exec_stats *stats)
{
    if (sample && sample->temperature > 0)
        return spi_fail(SP_ENOTSUP, "sampling with separate prefill and decode chip groups is not implemented (greedy "
                                    "decoding is: the sampler's state would have to move with the cache)");
    if (sp_comm_world_aborted(ex->xworld, NULL, 0))
        return spi_fail(SP_ECOMM, "sp_exec_run: the communicator was aborted by an earlier run");
    chip *chips = calloc((size_t)ex->nchips, sizeof *chips);
    pthread_t *th = calloc((size_t)ex->nchips, sizeof *th);
    if (!chips || !th) {
        free(chips);
        free(th);
        return spi_fail(SP_ENOMEM, "threads");
    }
    sp_kern_set_blas_threads(1);
    if (ex->trace_path) {
        /* one file for both groups' chips (job ranks: the decode group after the prefill group) */
        int first = -1, count = 0;
        for (int p = 0; p < SP_PHASE_COUNT; p++)
            if (ex->grp[p]->local_count) {
                if (first < 0) first = ex->grp[p]->xfer_first + ex->grp[p]->local_first;
                count += ex->grp[p]->local_count;
            }
        sp_status ts = first < 0 ? SP_OK : open_trace(ex, first, count, ex->nchips);
        if (ts) {
            free(chips);
            free(th);
            return ts;
        }
    }
    ex->err = SP_OK;
    double t0 = spi_now_s();
    int started[SP_PHASE_COUNT] = {0, 0}, off = 0;
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        sp_exec *g = ex->grp[p];
        run_init(g, prompt, sample, tokens, logits, all_steps);
        g->trace = ex->trace;
        g->t_base = t0;
        started[p] = spawn(g, chips + off, th + off, off);
        off += g->local_count;
    }
    for (int p = 0, o = 0; p < SP_PHASE_COUNT; o += ex->grp[p]->local_count, p++)
        for (int r = 0; r < started[p]; r++) pthread_join(th[o + r], NULL);
    double wall = spi_now_s() - t0;
    free(chips);
    free(th);
    for (int p = 0; p < SP_PHASE_COUNT; p++) ex->grp[p]->trace = NULL;
    close_trace(ex);
    sp_exec_stats *a = &ex->grp[0]->st, *b = &ex->grp[1]->st, t = *a;
    for (int k = 0; k < SP_COLL_COUNT; k++) {
        t.measured_bytes[k] += b->measured_bytes[k];
        t.predicted_bytes[k] += b->predicted_bytes[k];
        t.measured_recv[k] += b->measured_recv[k];
        t.predicted_recv[k] += b->predicted_recv[k];
        t.expected_bytes[k] += b->expected_bytes[k];
        t.expected_recv[k] += b->expected_recv[k];
    }
    t.token_bytes += b->token_bytes;
    t.comm_steps += b->comm_steps;
    if (!t.mismatches) memcpy(t.first_mismatch, b->first_mismatch, sizeof t.first_mismatch);
    t.mismatches += b->mismatches;
    if (b->allocated_bytes_per_chip > t.allocated_bytes_per_chip) t.allocated_bytes_per_chip = b->allocated_bytes_per_chip;
    if (b->predicted_bytes_per_chip > t.predicted_bytes_per_chip) t.predicted_bytes_per_chip = b->predicted_bytes_per_chip;
    t.decode_step_s = b->decode_step_s;
    memcpy(t.measured_decode_class_s, b->measured_decode_class_s, sizeof t.measured_decode_class_s);
    t.tokens_per_s = wall > 0 ? (double)(ex->B * ex->G) / wall : 0;
    if (stats) *stats = t;
    for (int p = 0; p < SP_PHASE_COUNT; p++)
        if (ex->grp[p]->err) return spi_fail(ex->grp[p]->err, "%s group: %s", p ? "decode" : "prefill", ex->grp[p]->errmsg);
    if (ex->err) return spi_fail(ex->err, "%s", ex->errmsg);   /* the trace's write */
    return SP_OK;
}

sp_status sp_exec_run_logits(sp_exec *ex, const int32_t *prompt, const sp_kern_sample_opts *sample, int32_t *tokens,
                             float *logits, int all_steps, sp_exec_stats *stats)
{
    if (!ex || !prompt || !tokens) return spi_fail(SP_EINVAL, "sp_exec_run: bad arguments");
    if (ex->grp[0]) return run_groups(ex, prompt, sample, tokens, logits, all_steps, stats);
    if (sp_comm_world_aborted(ex->world, NULL, 0))
        return spi_fail(SP_ECOMM, "sp_exec_run: the communicator was aborted by an earlier run");
    run_init(ex, prompt, sample, tokens, logits, all_steps);
    int n = ex->local_count;
    chip *chips = calloc((size_t)n, sizeof *chips);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    if (!chips || !th) {
        free(chips);
        free(th);
        return spi_fail(SP_ENOMEM, "threads");
    }
    sp_kern_set_blas_threads(1);
    if (ex->trace_path) {
        /* this process's chips; a process that hosts only some (MPI) writes PATH.<its first chip> */
        sp_status ts = open_trace(ex, ex->local_first, ex->local_count, ex->nchips);
        if (ts) {
            free(chips);
            free(th);
            return ts;
        }
    }
    ex->t_base = spi_now_s();
    int started = spawn(ex, chips, th, 0);
    for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
    free(chips);
    free(th);
    close_trace(ex);
    if (stats) *stats = ex->st;
    if (ex->err) return spi_fail(ex->err, "%s", ex->errmsg);
    return SP_OK;
}
