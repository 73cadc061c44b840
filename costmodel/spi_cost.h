/* spi_cost.h: the per-step rules the cost model's closed form and the
 * simulator share (internal to costmodel/).  Times are integer picoseconds
 * so that the closed form's shortcut over repeated layers (exact in max-plus
 * arithmetic) gives bit-for-bit the simulator's figure. */
#ifndef SPI_COST_H
#define SPI_COST_H
#include "costmodel/sp_cost.h"
#include "sp_trace.h"

/* How a step occupies a chip's two streams (sp_cost.h, "Schedule"). */
enum {
    SPI_RUN_COMPUTE = 0,   /* compute stream */
    SPI_RUN_BLOCKING = 1,  /* communication stream, compute stream held until it ends */
    SPI_RUN_OVERLAP = 2,   /* communication stream only (marked overlappable) */
    SPI_RUN_RECV = 3       /* pipeline receive: 0 s on the chip (the sender's transfer carries it) */
};

typedef struct spi_step_run {
    int64_t dur_ps;        /* duration */
    int64_t pen_ps;        /* OVERLAP under a fraction rule: compute-stream time it costs */
    double pen_frac;       /* ... as a fraction of dur (1 - f) */
    int mode;
} spi_step_run;

/* One program's steps priced at one context, with the breakdown sums
 * (layers counted n_layers times).  coef (optional, per step): the
 * coefficient of each free parameter in the step's duration. */
typedef struct spi_prog_run {
    spi_step_run run[SP_PART_COUNT][SP_PROG_MAX_STEPS];
    sp_phase_cost sums;    /* every field but time_s */
} spi_prog_run;
typedef double spi_step_coefs[SP_PART_COUNT][SP_PROG_MAX_STEPS][SP_CP_COUNT];

void spi_cost_price_program(const sp_program *p, const sp_hw *hw, int64_t context, spi_prog_run *out,
                            spi_step_coefs *coef);

/* A chip's timeline state: slot 0 the compute stream's free time, 1 the
 * communication stream's, 2 + b the time buffer b is written. */
enum { SPI_SLOT_COMP = 0, SPI_SLOT_COMM = 1, SPI_SLOT_BUF = 2, SPI_SLOTS = 2 + SP_BUF_COUNT };
typedef struct spi_sched {
    int64_t t[SPI_SLOTS];
    double (*vec)[SP_CP_COUNT];   /* optional [SPI_SLOTS]: the coefficients of each slot's time */
} spi_sched;

/* Earliest start of step s on this chip (its streams and input buffers),
 * and the slot that sets it (*from). */
int64_t spi_sched_ready(const spi_sched *st, const sp_step *s, int mode, int *from);
/* Runs s from `start` (>= spi_sched_ready's; a collective waits for its
 * slowest member); coef: the step's coefficients when st->vec is set, and
 * from_vec the coefficients of the start time.  Returns the end. */
int64_t spi_sched_commit(spi_sched *st, const sp_step *s, const spi_step_run *r, int64_t start,
                         const double *from_vec, const double *coef);

static inline int64_t spi_ps(double s) { return (int64_t)(s * 1e12 + 0.5); }
#endif
