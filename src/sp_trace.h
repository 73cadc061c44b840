/*
 * sp_trace.h: timelines in the Chrome Trace Event format (JSON; opens in
 * Perfetto and chrome://tracing), written the same way by the simulator
 * (predicted) and the executor (measured) so the two open side by side.
 *
 *   sp_trace *t;
 *   if (sp_trace_open("run.json", 0, 8, &t) == SP_OK) {   // chips 0..7
 *       char id[SP_TRACE_ID_MAX], name[SP_TRACE_LABEL_MAX];
 *       sp_trace_step_id(SP_PHASE_DECODE, 0, SP_PART_LAYER, 3, 12, id, sizeof id);
 *       sp_trace_event e = {.chip = 2, .stream = sp_trace_step_stream(step),
 *                           .ts_s = t0, .dur_s = t1 - t0, .id = id, .mb = 0,
 *                           .name = sp_trace_step_label(step, name, sizeof name),
 *                           .bytes = sp_trace_step_bytes(step), .flops = step->flops};
 *       sp_trace_write(t, &e);
 *       sp_trace_close(t);   // writes the closing bracket; reports any write error
 *   }
 *
 * File: {"traceEvents":[...],"displayTimeUnit":"ns"}.  For every chip of
 * the range given to sp_trace_open, metadata events name process `chip N`
 * (pid = the chip's global rank, sp_layout_mesh order) and its two threads:
 * tid 0 "compute" (every step that is not communication) and tid 1 "comm"
 * (collectives, pipeline send/recv).  Each step is one complete event:
 *   {"name": label, "ph": "X", "pid": chip, "tid": stream, "ts": µs, "dur": µs,
 *    "args": {"id": step id, "mb": micro-batch, "bytes": B, "flops": F}}
 * ts and dur are microseconds as doubles (6 decimals: picoseconds), from the
 * start of the traced work.
 *
 * Step ids, one convention for every producer:
 *   "<phase>/<part>/<layer>/<index>"
 *     phase  "prefill", or "decode<t>" with t the decode step of the run
 *            (0-based; decode step t runs at context prompt + 1 + t, so a
 *            single traced step at the last context of a run generating G
 *            tokens is "decode<G-1>"); a prefill that runs each micro-batch
 *            as several passes (prefill_chunk, prefill_tokens: sp_program)
 *            is "prefill<p>", p the pass in the micro-batch's run order
 *            (0-based: sequence chunk i, token pass j is p = i·passes_tok + j)
 *     part   "pre", "layer", "post" or "dense" (sp_program's step lists)
 *     layer  the layer's index on its stage (0 .. n_layers-1); -1 for pre/post
 *     index  the step's index in that part's sp_steps
 *   e.g. "prefill/layer/0/4", "decode63/post/-1/2".
 * The KV transfer between separate prefill and decode chip groups
 * (sp_lower.h, sp_lower_kv_xfer) is one message per (prefill chip, decode
 * chip) pair, on the comm stream of both: "kv/send/-1/<peer>" on the
 * sender, "kv/recv/-1/<peer>" on the receiver, peer the other chip's
 * global rank (the prefill group first), labels "send kv" and "recv kv",
 * args.mb 0, args.bytes the message's.
 * A chip runs its program once per micro-batch (and prefill pass), so the
 * same id recurs once per micro-batch: the pair (id, args.mb) names one
 * event of a chip, and (pid, id, mb) one event of the trace.
 *
 * Step labels (the event name): "matmul <weight>" (weights by sp_weight_name:
 * "matmul wq", "matmul w_out"), "<collective>" by sp_coll_kind_name
 * ("all-gather", "reduce-scatter", ...; a weight gather is
 * "all-gather weights"), and the step kind's name (sp_step_kind_name) for the
 * rest: "send", "recv", "attn", "norm-apply", "act", "kv-store", ...
 *
 * A writer is safe to use from several threads (events are written whole,
 * under a lock); event order in the file does not matter to viewers.
 */
#ifndef SP_TRACE_H
#define SP_TRACE_H
#include <stdint.h>
#include <stdio.h>
#include "sp_common.h"
#include "sp_layout.h"
#include "sp_lower.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The three step lists of a program.  Append-only. */
/* sp_prog_part (the program's step lists) lives in sp_lower.h. */
const char *sp_prog_part_name(sp_prog_part p);   /* "pre", "layer", "post", "dense" */

/* Streams (trace threads) of a chip. */
enum { SP_TRACE_COMPUTE = 0, SP_TRACE_COMM = 1, SP_TRACE_STREAMS = 2 };

#define SP_TRACE_ID_MAX 64
#define SP_TRACE_LABEL_MAX 48

/* The step id (convention above) into buf; returns buf ("" if it does not
 * fit).  token: the decode step number (ignored for prefill); layer: the
 * layer on the stage (ignored for pre/post, written -1). */
char *sp_trace_step_id(sp_phase phase, int64_t token, sp_prog_part part, int64_t layer, int index, char *buf,
                       size_t size);
/* The same with the prefill pass: pass >= 0 names pass `pass` of a prefill
 * that runs in several ("prefill<pass>"); pass < 0 (and decode) as
 * sp_trace_step_id. */
char *sp_trace_step_id_pass(sp_phase phase, int64_t token, int64_t pass, sp_prog_part part, int64_t layer, int index,
                            char *buf, size_t size);
/* A KV transfer message's id and label (convention above) into id and
 * label (SP_TRACE_ID_MAX, SP_TRACE_LABEL_MAX bytes); send: 1 on the
 * sender, 0 on the receiver. */
void sp_trace_xfer_id(int send, int peer, char *id, char *label);
/* The step's label (convention above) into buf; returns buf. */
char *sp_trace_step_label(const sp_step *s, char *buf, size_t size);
/* SP_TRACE_COMM for collectives and send/recv, SP_TRACE_COMPUTE otherwise. */
int sp_trace_step_stream(const sp_step *s);
/* Bytes a step moves, as the trace reports them: collectives and send/recv
 * the larger of bytes sent and received by this chip; other steps the HBM
 * bytes they read and write (weights + KV read + KV written + activations). */
int64_t sp_trace_step_bytes(const sp_step *s);

typedef struct sp_trace sp_trace;

typedef struct sp_trace_event {
    int chip;              /* pid: global rank */
    int stream;            /* tid: SP_TRACE_COMPUTE or SP_TRACE_COMM */
    double ts_s, dur_s;    /* start and duration, seconds */
    const char *name;      /* label (borrowed) */
    const char *id;        /* step id (borrowed); NULL: no id arg */
    int mb;                /* micro-batch (0-based) */
    int64_t bytes, flops;
} sp_trace_event;

/* Creates `path` and writes the header and the metadata of chips
 * first_chip .. first_chip+n_chips-1.  *out: a new writer, freed by
 * sp_trace_close.  SP_EIO (message names the file) if it cannot be created. */
sp_status sp_trace_open(const char *path, int first_chip, int n_chips, sp_trace **out);
/* The same on a stream the caller owns (not closed by sp_trace_close). */
sp_status sp_trace_open_stream(FILE *f, int first_chip, int n_chips, sp_trace **out);
/* Appends one complete event.  SP_EINVAL for a bad stream or a negative or
 * non-finite time. */
sp_status sp_trace_write(sp_trace *t, const sp_trace_event *e);
/* Writes the closing part, closes the file (sp_trace_open's), frees t.
 * SP_EIO if any write failed.  NULL is a no-op. */
sp_status sp_trace_close(sp_trace *t);

#ifdef __cplusplus
}
#endif
#endif
