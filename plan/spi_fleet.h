/* spi_fleet.h: the fleet solver's internals (not installed): its pool
 * candidates and its program, for fleet.c and tests/check_fleet.c. */
#ifndef SPI_FLEET_H
#define SPI_FLEET_H
#include "sp_fleet.h"

/* One pool candidate: a building block of the program (fleet.c). */
typedef struct spi_fleet_cand {
    sp_fleet_role role;
    int kind, chips;
    int64_t batch;
    sp_layout layout;
    double prefill_s, decode_step_s;
    double service_s;    /* S (colocated, prefill) or H (decode) */
    double handoff_s;    /* this side's KV handoff (prefill, decode) */
    int64_t kv_chip;     /* KV bytes per chip of the batch at the prompt (prefill, decode) */
    double max_rate;     /* λ_j: requests/s one instance may take */
    double price;        /* per instance and hour: chips · cost_per_chip_hour */
} spi_fleet_cand;

/* Every pool candidate of the kinds (dominated ones dropped); *out is new
 * (caller frees).  notes gets what was not built and why. */
sp_status spi_fleet_candidates(const sp_model *m, const sp_fleet_kind *kinds, int n_kinds, const sp_fleet_request *q,
                               const sp_fleet_opts *o, spi_fleet_cand **out, int *n, char *notes, size_t notes_len,
                               sp_fleet_stats *stats);

/* Builds and solves the program over candidates c[0..n) (allow: NULL, or
 * which may be used; homogeneous: at most one candidate per role) for R
 * requests/s: *res, and for a fleet N[j] instances and r[j] requests/s of
 * each.  stats gets rows, cols, solves and GLPK time. */
sp_status spi_fleet_pick(const spi_fleet_cand *c, int n, const sp_fleet_kind *kinds, int n_kinds, double R,
                         sp_fleet_objective obj, const unsigned char *allow, int homogeneous, int time_limit_ms,
                         sp_plan_result *res, int *N, double *r, sp_fleet_stats *stats);
#endif
