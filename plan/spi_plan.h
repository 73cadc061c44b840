/* spi_plan.h: the planner's internals (not installed): the layout space and
 * the MILP over it.  Used by plan.c and by tests/check_plan.c. */
#ifndef SPI_PLAN_H
#define SPI_PLAN_H
#include "sp_plan.h"

/* Decisions of the MILP: each candidate takes one value of each. */
typedef enum spi_dec {
    SPI_DEC_INST = 0,    /* the (chips, batch) instance */
    SPI_DEC_MESH = 1,    /* X, Y, Z and the placement */
    SPI_DEC_PIPE = 2,    /* stages, replicas, micro-batches */
    SPI_DEC_PREC = 3,    /* weight precision */
    SPI_DEC_PF = 4,      /* prefill (FFN, attention) */
    SPI_DEC_DC = 5,      /* decode (FFN, attention) */
    SPI_DEC_EXPERTS = 6, /* expert-parallel degree (MoE models; 1 otherwise) */
    SPI_DEC_COUNT
} spi_dec;

typedef struct spi_cand {
    sp_layout layout;
    int inst;
    int64_t key[SPI_DEC_COUNT];   /* raw value of each decision */
    int val[SPI_DEC_COUNT];       /* dense value index (spi_space_finish) */
    /* what the MILP reads */
    int64_t mem_over;             /* worst-stage bytes − capacity (> 0: does not fit) */
    double prefill_s, decode_step_s, total_s, tokens_per_s, cost_total;
    /* the pipeline program's bottleneck bound of this layout as a template
     * (spi_split_bound_of), from the stage times of its pricing when the
     * space asks (spi_space.split_bounds): has_bound 1, bound_ps per phase
     * (prefill, first and last decode step, ps), bound_units prefill passes
     * per micro-batch */
    int has_bound;
    int64_t bound_ps[3], bound_units;
    /* the pipeline program's decode-first case over this template's stage
     * meshes of fewer chips (plan_stages.c decode_first), kept from the
     * space's decode bound (spi_split_decode_lb) so that the program's mesh
     * bound does not price it again: has_dlo 1 when kept, dlo_st its status
     * (SP_OK, or SP_EINVAL: some stage of those meshes does not lower),
     * dlo_ps the least first and last decode step (ps) of their stages at
     * the window's lower end.  It depends on the template's decode view
     * alone (its meshes, replicas, stages and decode layout), which the
     * full pricing's chunked variant does not change. */
    int has_dlo;
    sp_status dlo_st;
    int64_t dlo_ps[2];
} spi_cand;

typedef struct spi_inst {
    int chips;
    int64_t batch;
    sp_workload w;
} spi_inst;

enum { SPI_WORKERS = 64 };   /* pricing threads of one space at most */
/* Pricing threads for n items of work at `per` items a thread at least:
 * SHARDPLAN_THREADS (else the processors), at most SPI_WORKERS, at least 1. */
int spi_workers(int n, int per);

typedef struct spi_space {
    const sp_model *m;
    const sp_hw *hw;
    /* sp_plan_opts' narrowing of the space (0: none), set by spi_space_narrow */
    unsigned ffn_mask, attn_mask, wt_mask;
    int tensor_1d, m_per_stage;
    int tie_phases;               /* 1: decode takes prefill's (FFN, attention) layout: for spaces
                                     where one phase alone is used (a fleet's prefill pools,
                                     the groups of separate prefill and decode groups) */
    int decode_group;             /* 1: every layout priced as the decode group of separate groups
                                     (sp_cost_eval_group; with tie_phases) */
    /* 1: each pipeline's bottleneck bound taken from its pricing
     * (spi_cand.has_bound): for a plan that runs the pipeline program
     * (spi_split_solve) */
    int split_bounds;
    const sp_ragged *ragged;      /* every layout priced for this ragged batch (sp_plan_opts.workload) */
    /* non-NULL: spi_space_add prices a layout's decode first and prices it
     * no further when that proves it can change no answer of a plan with
     * these options (flush_pending in plan_space.c, doc/planner.md "Pruning
     * by the decode bound"); pruned counts them.  Only for a space that
     * sp_plan_solve solves whole (main, frontier, rivals, the pipeline
     * program), with no offload program and no ragged batch */
    const sp_plan_opts *prune;
    int pruned;
    struct spi_incumbents *inc;   /* the best figures priced so far (plan_space.c) */
    int n, cap;
    spi_cand *c;
    int n_inst;
    spi_inst inst[128];
    int nval[SPI_DEC_COUNT];      /* values per decision (after spi_space_finish) */
    int rejected;                 /* layouts sp_cost_eval rejected (SP_EINVAL) */
    int priced;                   /* layouts priced (in the space), before any reduction */
    int feasible;                 /* of those, the ones that fit in memory */
    int64_t min_short;            /* smallest shortfall over the priced layouts (-1: none) */
    double eval_s;
    /* the pricing caches (sp_cost.h): cache[0] the calling thread's
     * (spi_space_cache; the planner's other pricing of this space uses it
     * too), cache[t] spi_space_add's worker t's; each made when first
     * used, NULL where making one failed (each evaluation then makes its
     * own); freed by spi_space_free */
    sp_cost_cache *cache[SPI_WORKERS];
    /* the threads that price beside the caller (plan_space.c): started on
     * the first batch worth sharing (pool_tried), stopped by spi_space_free */
    struct spi_pool *pool;
    int pool_tried;
    /* layouts waiting to be priced by spi_space_add's worker threads */
    int npend, pcap;
    spi_cand *pend;
    sp_status *pst;
    /* scratch reused by spi_space_reduce (grown on demand, freed by spi_space_free) */
    int scap;
    int *sidx;
    double *sk1, *sk2, *sk3;
    unsigned char *skeep;
} spi_space;

void spi_space_init(spi_space *s, const sp_model *m, const sp_hw *hw);
void spi_space_free(spi_space *s);
/* The calling thread's pricing cache of s (spi_space.cache[0]), made on
 * first use; NULL when it cannot be made. */
sp_cost_cache *spi_space_cache(const spi_space *s);
/* Narrows the layouts later spi_space_add calls generate to o's ffn_layouts,
 * attn_layouts, weight_dtypes, tensor_1d and microbatches_per_stage. */
void spi_space_narrow(spi_space *s, const sp_plan_opts *o);
/* Adds every layout of (chips, w) to the space (w->batch is the batch). */
sp_status spi_space_add(spi_space *s, int chips, const sp_workload *w, sp_plan_weights weights, sp_dtype kv);
/* Appends one priced candidate (counted as priced, like spi_space_add's). */
sp_status spi_space_push(spi_space *s, const spi_cand *c);
/* Numbers the decision values; call once after the last spi_space_add (and
 * spi_space_reduce). */
sp_status spi_space_finish(spi_space *s);

/* Latency, cost and the objective's value (smaller is better) of a candidate. */
double spi_cand_latency(const spi_space *s, const spi_cand *c, sp_plan_latency lat);
double spi_cand_cost(const spi_space *s, const spi_cand *c, sp_plan_latency lat, sp_plan_cost_metric cm);
double spi_cand_objective(const spi_space *s, const spi_cand *c, const sp_plan_opts *o);
/* 1: c fits in memory and meets o's latency bound and throughput target. */
int spi_cand_admissible(const spi_space *s, const spi_cand *c, const sp_plan_opts *o);
/* The tie-break term: latency for the cost objective, else cost. */
double spi_cand_objective2(const spi_space *s, const spi_cand *c, const sp_plan_opts *o);
/* The value a candidate takes in a rival kind, as a comparable integer. */
int64_t spi_cand_kind_value(const spi_cand *c, sp_plan_rival_kind k);

/* Exact pre-solve reductions (doc/planner.md, "Reductions"), applied to the
 * candidates [from, n) in place (order kept, so the fixed candidate order
 * breaks ties as before).  A candidate is kept when it may be the optimum of
 * one of the programs the plan solves:
 *   main      the rank-minimum of (objective, tie-break, order) among the
 *             candidates that fit and meet opts' bounds; with fit_only the
 *             objective is constant (the first candidate that fits);
 *   frontier  a candidate that fits and meets the bounds and that no such
 *             candidate with latency <= its latency precedes in the order of
 *             (cost, latency, order): the non-dominated (cost, latency) set;
 *   rivals    for each rival kind and each value of it, the rank-minimum of
 *             (objective, tie-break, order) among the candidates taking that
 *             value (memory and bounds ignored, as the rival programs do).
 * Candidates are counted into s->feasible / s->min_short the first time they
 * are reduced (from >= the previous reduction's end). */
typedef struct spi_reduce {
    const sp_plan_opts *o;
    int main, frontier, rivals, fit_only;
} spi_reduce;
sp_status spi_space_reduce(spi_space *s, int from, const spi_reduce *r);
/* Appends src's candidates to dst (dst takes src's instance table: src holds
 * the instances added so far, dst's candidates refer to them) and reduces
 * the appended ones with r.  Pricing statistics stay with src. */
sp_status spi_space_append(spi_space *dst, const spi_space *src, const spi_reduce *r);

/* The MILP over a (reduced) space: built once, re-solved with changed
 * objective, row bounds (latency/ε, throughput, memory, forbidden rival
 * value) and GUB-implied column fixings, warm-started from the last basis. */
typedef struct spi_milp spi_milp;
/* lat and ntps (−tokens/s) give the bound rows' coefficients (ranks). */
sp_status spi_milp_new(const spi_space *s, const double *lat, const double *ntps, spi_milp **out, double *glpk_s);
void spi_milp_free(spi_milp *q);
/* One solve: minimises key1 then key2 (then candidate order) over the
 * candidates that fit (unless ignore_memory), have lat[c] <= max_lat and
 * ntps[c] <= max_ntps (INFINITY: no bound), and do
 * not share the value of rival kind forbid_kind with candidate forbid_of
 * (forbid_kind < 0: none).  The result goes to *res; *chosen is the candidate
 * index (-1 if none); *solved is 1 when glp_intopt ran. */
typedef struct spi_milp_req {
    const double *key1, *key2;
    double max_lat, max_ntps;
    int ignore_memory;
    int forbid_kind, forbid_of;
    int time_limit_ms;
} spi_milp_req;
sp_status spi_milp_solve(spi_milp *q, const spi_milp_req *r, sp_plan_result *res, int *chosen, int *solved,
                         double *glpk_s);

/* GLPK's thread environment, shared by every program the planner builds in
 * a thread (plan.c): get before creating a problem (*holds set), put after
 * deleting it; the last put frees an environment the planner created. */
sp_status spi_glpk_env_get(int *holds);
void spi_glpk_env_put(int *holds);
/* What glp_intopt's return code and glp_mip_status say (GLPK's "did it
 * run" and "what it found" kept apart): SP_OK with *res OPTIMAL, FEASIBLE
 * (stopped with a solution), INFEASIBLE or TIME_LIMIT (stopped without
 * one); SP_ESOLVER when GLPK failed. */
sp_status spi_glpk_result(int ret, int mst, sp_plan_result *res);

/* ---- the programs over priced stages (plan_stages.c, plan_offload.c) ---- */
/* The phases they state: the prefill pass, the first and the last decode step. */
enum { SPI_PH_PF = 0, SPI_PH_D1 = 1, SPI_PH_DN = 2, SPI_PH_COUNT = 3 };
/* Which phases the workload runs and the measures over their times V_φ:
 * Φ = Σ w_obj·V (the objective's: the plan's objective is monotone in it for
 * one instance), Λ = Σ w_lat·V (the latency metric), Θ = Σ w_tot·V (the
 * total), and the bounds the plan's options put on Λ and Θ (s; INFINITY:
 * none). */
typedef struct spi_measure {
    int ph[SPI_PH_COUNT];
    double w_obj[SPI_PH_COUNT], w_lat[SPI_PH_COUNT], w_tot[SPI_PH_COUNT];
    double max_lat, max_tot;
} spi_measure;
void spi_measure_init(const sp_plan_opts *o, const sp_workload *w, spi_measure *ms);
/* GLPK intopt callback: the branch-and-bound tree's node count so far into *(int *)info. */
struct glp_tree;
void spi_glpk_count_nodes(struct glp_tree *T, void *info);
/* The programs' shared parts (plan.c), times in units of ps_per_unit ps:
 * spi_measure_cols sets a template's phase columns X_φ = col_X + φ and
 * V_φ = col_V + φ (>= 0 for a phase the workload runs, else fixed at 0;
 * V_φ's objective coefficient w_obj[φ]); spi_measure_lb_terms fills
 * ind/val[1..k] with Σ_φ w_obj·V_φ − Φ_lb·x (Φ_lb in s, relaxed by 1e-9)
 * and returns k, the row Φ_t >= Φ_lb·x_t being worth adding when k > 1;
 * spi_measure_bound_rows adds Λ <= max_lat, Θ <= max_tot and Φ <= inc
 * (each where finite) over the V columns col_V[0..nt) (ind, val: 3·nt + 1
 * entries) and returns the rows added; spi_glpk_intopt runs glp_intopt
 * (presolve, no messages, time limit in ms, 0: 10 s, branch-and-bound
 * nodes into *nodes) and reads its code and status (spi_glpk_result; a
 * relaxation without a primal or a dual solution: INFEASIBLE). */
struct glp_prob;
void spi_measure_cols(struct glp_prob *P, const spi_measure *ms, int col_X, int col_V);
int spi_measure_lb_terms(const spi_measure *ms, int col_V, int col_x, double lb_s, double ps_per_unit, int *ind,
                         double *val);
int spi_measure_bound_rows(struct glp_prob *P, const spi_measure *ms, double inc, const int *col_V, int nt,
                           double ps_per_unit, int *ind, double *val);
sp_status spi_glpk_intopt(struct glp_prob *P, int time_limit_ms, int *nodes, sp_plan_result *res);
/* A minimising problem in this thread's GLPK environment (spi_glpk_env_get),
 * GLPK's terminal output off; spi_glpk_close deletes it and restores both. */
sp_status spi_glpk_open(struct glp_prob **P, int *env, int *term);
void spi_glpk_close(struct glp_prob *P, int *env, int term);
/* spi_glpk_intopt, then which of nt templates (x columns col_x[0..nt)) the
 * program chose: *chosen its index, or -1 when it found no point
 * (infeasible, or stopped without one); *unproven set to 1 when it stopped
 * before proving its point (or the absence of one); nodes added to *nodes.
 * SP_EINTERNAL naming `what` when not exactly one x_t is 1. */
sp_status spi_glpk_choose(struct glp_prob *P, int time_limit_ms, const int *col_x, int nt, const char *what, long *nodes,
                          int *unproven, int *chosen);

/* ---- the pipeline program (plan_stages.c, doc/planner.md) ---- */
/* Pipelines of at most this many stages are offered stage meshes of their
 * own (stage_mesh; doc/planner.md). */
#define SPI_SPLIT_MESH_STAGES 8
/* The layer counts a stage of an S-stage pipeline of L layers may hold. */
void spi_split_window(int64_t L, int S, int *lo, int *hi);
/* Stage position s of S: 0 first, 1 middle, 2 last. */
int spi_split_kind(int s, int S);
/* Whether layout l of an L-layer model is a template of the pipeline program
 * (2..SP_LAYOUT_MAX_STAGES stages, split evenly, offloading nothing). */
int spi_split_is_template(const sp_layout *l, int64_t L);
/* The bottleneck bound m of template l (REDUCTIONS in plan_stages.c): per
 * phase (prefill, first and last decode step) a lower bound in ps on the
 * slowest stage of any split of l's layers; *units: its prefill passes per
 * micro-batch.  From the stage times of l's even split (st: S entries, as
 * sp_cost_opts.stage_times gives them), or priced (spi_split_bound). */
void spi_split_bound_of(const sp_stage_time *st, int S, int64_t m_ps[3], int64_t *units);
sp_status spi_split_bound(sp_cost_cache *cache, const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w,
                          int64_t m_ps[3], int64_t *units);
typedef struct spi_split_req {
    const sp_plan_opts *o;   /* objective, metrics, bounds */
    double incumbent;        /* the best measure (s) among the admissible candidates; INFINITY: none
                                (every template is kept) */
    int batch;               /* templates per program, in the order of their bounds (0: 32) */
    int max_stages;          /* only templates of at most this many stages (0: every one) */
    int max_templates;       /* only the first this many templates in the order of the first bound
                                (0: all); a sample for benchmarks, not an exact search */
    int same_mesh;           /* every stage on the template's mesh (no stage_mesh) */
} spi_split_req;
typedef struct spi_split_out {
    int solved;              /* glp_intopt calls (one per program of `batch` templates) */
    int unproven;            /* a program stopped at the time limit: the split is not proven best */
    int found;               /* a split: layout, template_cand, phi */
    sp_layout layout;
    int template_cand;       /* the space's candidate it splits anew */
    double phi;              /* the program's optimum, seconds of the measure */
    int templates;           /* pipelines of the instance with 2..32 stages */
    int pruned;              /* of those, dropped by the bound */
    int kept;                /* in the program */
    int blocks;              /* (template, kind, layers) priced */
    int rows, cols;          /* the programs' size (summed over them) */
    int pair_cols;           /* of the columns, the hand-offs' pair columns w (stage meshes) */
    long nodes;              /* GLPK's branch-and-bound nodes (glp_ios_tree_size, summed over the programs) */
    double eval_s;           /* seconds pricing blocks */
} spi_split_out;
/* Solves the pipeline program over instance inst's templates in s. */
sp_status spi_split_solve(const spi_space *s, int inst, const spi_split_req *r, spi_split_out *out, double *glpk_s);
/* The measure (seconds) the plan's objective is monotone in for one instance. */
double spi_split_measure(const spi_space *s, const spi_cand *c, const sp_plan_opts *o);
/* A template's first bound Φ_LB (seconds) from its bottleneck bounds m_ps
 * (spi_split_bound_of) under the pipeline forms pipe: monotone
 * (non-decreasing) in each m_ps[φ]. */
double spi_split_first_lb(const spi_measure *ms, const sp_cost_pipe *pipe, const int64_t m_ps[SPI_PH_COUNT]);
/* 1 when the pipeline program offers template l's stages its own mesh
 * alone (no other stage meshes: its bound is not lowered over them). */
int spi_split_one_mesh(const sp_hw *hw, const sp_layout *l, int same_mesh);
/* The pipeline program's first bound over template tl's other stage meshes
 * (plan_stages.c mesh_bound): a pipeline whose stages do not all have tl's
 * mesh has a stage on a smaller mesh, whose time per phase (ps) is at least
 * m_ps; *hetero 0 (m_ps INT64_MAX) when the meshes offered admit no such
 * pipeline.  dc_ps: the decode-first bound mesh_bound tries before it
 * lowers any prefill (prefill 0, each decode step the least of the smaller
 * meshes' stages at the window's lower end, priced for decode alone), of
 * the same stage; all 0 where it does not apply. */
sp_status spi_split_mesh_bound(const spi_space *sp, const sp_workload *w, const sp_layout *tl, int64_t m_ps[SPI_PH_COUNT],
                               int64_t dc_ps[SPI_PH_COUNT], int *hetero);
/* The pipeline program's first bound Φ_LB (seconds, under ms) of template
 * tl from its decode alone, in two steps.  spi_split_decode_lb: from st,
 * its stages' times as its decode priced alone gives them
 * (sp_cost_eval_group, SP_PHASE_DECODE, with stage_times), the prefill's
 * bottleneck at 0, the bound where every stage keeps tl's mesh (*lb); into
 * *d what the second step needs.  Where the program offers tl's stages
 * other meshes (same_mesh 0, a cluster: d->smaller 1), the bound is the
 * least of that case and the smaller meshes' decode-first case
 * (plan_stages.c decode_first), which spi_split_decode_lb_smaller prices:
 * its *lb is then no more than the first step's (so a first step's *lb
 * that cannot prune tl says that the bound cannot either), -INFINITY
 * where that case does not lower.  No more than the bound the program
 * drops tl by, so a template whose bound reaches the program's incumbent
 * may go unpriced.  tc: the template (its layout tl, or one that differs
 * from it in its prefill's alone: the same decode view and meshes) keeps
 * the smaller meshes' case it priced (spi_cand.has_dlo: its status too)
 * for the program's mesh bound, which then reads it instead of pricing it
 * again. */
typedef struct spi_split_dlb {
    int64_t m_ps[SPI_PH_COUNT], units;   /* the decode stage times' bottleneck bound, the prefill's at 0 */
    int same_mesh;
    int smaller;                         /* 1: the smaller meshes' case is still to be taken */
} spi_split_dlb;
void spi_split_decode_lb(const spi_space *sp, const spi_measure *ms, const sp_layout *tl, const sp_stage_time *st,
                         int same_mesh, spi_split_dlb *d, double *lb);
sp_status spi_split_decode_lb_smaller(const spi_space *sp, sp_cost_cache *cache, const sp_workload *w,
                                      const spi_measure *ms, spi_cand *tc, const spi_split_dlb *d, double *lb);

/* ---- separate prefill and decode groups (plan_groups.c, doc/planner.md) ---- */
typedef struct spi_gcand {
    sp_layout layout;        /* one group, both phases in its phase's layout */
    int chips;
    double t;                /* prefill group: prefill_s; decode group: decode_s */
    double t2;               /* decode group: decode_step_s */
    double xb;               /* decode group: sp_cost_kv_xfer_bound */
    int key;                 /* the value of the keys both groups share */
} spi_gcand;
typedef struct spi_groups {
    int np, nd;
    spi_gcand *pf, *dc;      /* fitting candidates of each group, every chip split */
    int nkeys;
    int key_of[1024];        /* a candidate of each key value: p >= 0 prefill, -d - 1 decode */
    int priced;              /* layouts priced into the groups' spaces */
    double eval_s;
} spi_groups;
/* The candidates of every split of `chips` into two groups (o's space narrowing, weights, kv). */
sp_status spi_groups_cands(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w, const sp_plan_opts *o,
                           spi_groups *g);
void spi_groups_free(spi_groups *g);
/* A pair as one layout, priced by sp_cost_eval with cache (borrowed; NULL: a
 * call's own) (SP_EINVAL: the pair does not apply). */
sp_status spi_groups_price(sp_cost_cache *cache, const sp_model *m, const sp_hw *hw, const sp_workload *w,
                           const spi_gcand *pf, const spi_gcand *dc, sp_layout *l, sp_cost *c);
/* The plan's objective of a priced layout (smaller is better), and whether it fits and meets o's bounds. */
double spi_groups_objective(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                            const sp_plan_opts *o, const sp_cost *c);
int spi_groups_admissible(const sp_cost *c, const sp_plan_opts *o);
typedef struct spi_groups_out {
    int found, proven;
    int pf, dc;              /* the pair (candidate indices) */
    sp_layout layout;
    sp_cost cost;
    double objective;
    int rows, cols;          /* the program's size before any cut */
    int retired, priced, solved;   /* groups whose columns were fixed at 0, pairs priced, glp_intopt calls */
    double eval_s, glpk_s;
} spi_groups_out;
/* The best pair by o's objective (the program at the top of plan_groups.c). */
sp_status spi_groups_solve(const spi_groups *g, const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                           const sp_plan_opts *o, spi_groups_out *out);
/* ---- the offload program (plan_offload.c, doc/planner.md) ---- */
/* Why offload cannot be offered for (m, hw) at all, or NULL when it can
 * (weights, KV or both; *weights set to whether weight streaming is). */
const char *spi_offload_refusal(const sp_model *m, const sp_hw *hw, int *weights);
typedef struct spi_offload_req {
    const sp_plan_opts *o;   /* objective, metrics, bounds */
    double incumbent;        /* the best measure (s) among the admissible candidates; INFINITY: none */
    int batch;               /* templates per program, in the order of their bounds (0: 16) */
    int max_templates;       /* only the first this many templates in the order of the bound (0: all) */
} spi_offload_req;
typedef struct spi_offload_out {
    int solved;              /* glp_intopt calls (one per program of `batch` templates) */
    int unproven;            /* a program stopped at the time limit */
    int found;               /* an offload layout better than the incumbent: layout, template_cand, phi */
    sp_layout layout;
    int template_cand;       /* the space's candidate it offloads from */
    double phi;              /* the program's optimum, seconds of the measure */
    int templates;           /* the instance's layouts offload may apply to */
    int pruned;              /* of those, dropped by the bound (their own measure) */
    int kept;                /* in the programs */
    int blocks;              /* (template, stage class, KV fraction, streamed layers) priced */
    int rows, cols;          /* the programs' size (summed over them) */
    double choices_sum;      /* Σ over the kept templates of Σ_f Σ_s (layers_s + 1): the sum of the choices */
    double choices_product;  /* Σ over the kept templates of |F|·Π_s (layers_s + 1): the full product */
    long nodes;              /* GLPK's branch-and-bound nodes */
    double eval_s;           /* seconds pricing blocks */
} spi_offload_out;
/* Solves the offload program over instance inst's layouts in s. */
sp_status spi_offload_solve(const spi_space *s, int inst, const spi_offload_req *r, spi_offload_out *out,
                            double *glpk_s);

#endif
