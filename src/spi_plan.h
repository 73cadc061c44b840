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
} spi_cand;

typedef struct spi_inst {
    int chips;
    int64_t batch;
    sp_workload w;
} spi_inst;

typedef struct spi_space {
    const sp_model *m;
    const sp_hw *hw;
    int n, cap;
    spi_cand *c;
    int n_inst;
    spi_inst inst[128];
    int nval[SPI_DEC_COUNT];      /* values per decision (after spi_space_finish) */
    int rejected;
    double eval_s;
} spi_space;

void spi_space_init(spi_space *s, const sp_model *m, const sp_hw *hw);
void spi_space_free(spi_space *s);
/* Adds every layout of (chips, w) to the space (w->batch is the batch). */
sp_status spi_space_add(spi_space *s, int chips, const sp_workload *w, sp_plan_weights weights, sp_dtype kv);
/* Numbers the decision values; call once after the last spi_space_add. */
sp_status spi_space_finish(spi_space *s);

/* Latency, cost and the objective's value (smaller is better) of a candidate. */
double spi_cand_latency(const spi_space *s, const spi_cand *c, sp_plan_latency lat);
double spi_cand_cost(const spi_space *s, const spi_cand *c, sp_plan_latency lat, sp_plan_cost_metric cm);
double spi_cand_objective(const spi_space *s, const spi_cand *c, const sp_plan_opts *o);

/* One MILP solve.  Minimises key1 then key2 (then candidate order) over the
 * candidates, subject to: the memory row (unless ignore_memory), every bound
 * val[c] <= hi, and no chosen candidate in `forbid` (a mask, may be NULL).
 * The result goes to *res; *chosen is the candidate index (-1 if none). */
typedef struct spi_bound {
    const double *val;
    double hi;
} spi_bound;
typedef struct spi_milp_req {
    const double *key1, *key2;
    int n_bounds;
    spi_bound bounds[4];
    const unsigned char *forbid;
    int ignore_memory;
    int time_limit_ms;
} spi_milp_req;
sp_status spi_milp_solve(const spi_space *s, const spi_milp_req *r, sp_plan_result *res, int *chosen,
                         double *glpk_s);

#endif
