/*
 * sp_ragged.h: a ragged batch, each sequence with its own prompt and
 * generation length (doc/formats.md, "Workload files").
 *
 * The lowering packs the prompt tokens of every sequence without padding
 * (rows of a prefill program: Σ prompt_b, sequence after sequence) and
 * attends each sequence over its own context only.  Decode runs in steps
 * s = 1 .. max gen; sequence b takes part in steps 1 .. gen_b (context
 * prompt_b + s after step s: the cost model's count of decode steps per
 * sequence, as for a uniform batch) and then leaves the batch: a serving
 * engine with iteration-level scheduling (Orca, vLLM) drops finished
 * sequences from the next step's rows.  Its KV cache slot stays allocated
 * at the batch's longest context (max_b prompt_b + gen_b), as a server that
 * pre-allocates slots holds it.
 *
 *   sp_ragged r;
 *   sp_error err;
 *   SP_CHECK(sp_ragged_load_file("workload.csv", &r, &err));
 *   ... sp_lower_ragged(&model, &layout, phase, &shape, &r, step, stage, &prog) ...
 *   sp_ragged_free(&r);
 */
#ifndef SP_RAGGED_H
#define SP_RAGGED_H
#include <stdint.h>
#include "sp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of a workload file: sequences, and tokens of one prompt or generation. */
#define SP_RAGGED_MAX_SEQS (1 << 20)
#define SP_RAGGED_MAX_TOKENS (1 << 24)

typedef struct sp_ragged {
    int64_t n;                 /* sequences */
    int64_t *prompt;           /* (n) prompt tokens of each sequence, >= 1; owned */
    int64_t *gen;              /* (n) generated tokens of each sequence, >= 1; owned */
    int64_t max_prompt, max_gen, max_context;   /* max_context = max_b prompt_b + gen_b */
    int64_t sum_prompt, sum_gen;
    int view;                  /* 1: prompt and gen are borrowed from another (sp_ragged_slice) */
    /* sp_ragged_micro's view: the batch it is micro-batch mb of replica rep of, split into
     * replicas × microbatches (borrowed; NULL for any other) */
    const struct sp_ragged *whole;
    int replicas, microbatches, rep, mb;
} sp_ragged;

/* Reads a workload file: JSON ({"sequences": [{"prompt": P, "gen": G}, ...]},
 * or a length distribution {"distribution": {"sequences": B, "mix": [{"prompt":
 * P, "gen": G, "share": W}, ...]}} expanded into B sequences as doc/formats.md
 * states, when the first non-blank character is '{') or CSV (one "prompt,gen" line
 * per sequence, an optional "prompt,gen" header, blank lines and lines
 * starting with '#' ignored).  SP_EIO (unreadable), SP_EPARSE (syntax) or
 * SP_EINVAL (a value out of range) with err naming the file, line and
 * field.  *out is owned by the caller: sp_ragged_free. */
sp_status sp_ragged_load_file(const char *path, sp_ragged *out, sp_error *err);
/* The same from text; `source` names it in errors. */
sp_status sp_ragged_loads(const char *text, const char *source, sp_ragged *out, sp_error *err);
/* Builds one from arrays (copied); SP_EINVAL for a length out of range. */
sp_status sp_ragged_from(const int64_t *prompt, const int64_t *gen, int64_t n, sp_ragged *out);
void sp_ragged_free(sp_ragged *r);   /* NULL and a freed one are no-ops; a view's arrays stay */
/* *out = sequences [first, first + n) of r, a view of r's arrays (valid
 * while r is; its totals its own).  SP_EINVAL outside r. */
sp_status sp_ragged_slice(const sp_ragged *r, int64_t first, int64_t n, sp_ragged *out);
/* The sequences of micro-batch mb of replica rep when r splits into
 * `replicas` replicas of `microbatches` micro-batches each, as a uniform
 * batch does: consecutive blocks of n / (replicas · microbatches)
 * sequences, micro-batch mb of replica rep the (rep · microbatches + mb)-th
 * (a view, sp_ragged_slice, with `whole` = r and its place).  SP_EINVAL when n
 * does not split so. */
sp_status sp_ragged_micro(const sp_ragged *r, int replicas, int microbatches, int rep, int mb, sp_ragged *out);

/* The longest gen of micro-batch v->mb over every replica (v from sp_ragged_micro; any
 * other view: its own max_gen): the last decode step that micro-batch runs when its
 * replicas run each step together (experts split over replicas, sp_lower.h "Ragged
 * batches"). */
int64_t sp_ragged_peers_max_gen(const sp_ragged *v);
/* Decode step s (1 .. max_gen): 1 if sequence b takes part (gen_b >= s). */
static inline int sp_ragged_active(const sp_ragged *r, int64_t b, int64_t s) { return r->gen[b] >= s; }
/* Sequences taking part in decode step s. */
int64_t sp_ragged_active_count(const sp_ragged *r, int64_t s);
/* The last decode step with the same sequences as step s (the end of the
 * segment that starts at s: min gen_b over gen_b >= s); 0 when s > max_gen. */
int64_t sp_ragged_segment_end(const sp_ragged *r, int64_t s);

#ifdef __cplusplus
}
#endif
#endif
