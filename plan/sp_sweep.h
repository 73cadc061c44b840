/*
 * sp_sweep.h: research sweeps.  A spec (JSON) is a grid over models,
 * hardware, chip counts, batches, prompt and generated lengths (and, for
 * "estimate", layouts), or a list of points; every point is priced, planned
 * or given its frontier and written as one row of the SQLite table `points`,
 * keyed by the point's inputs.  A sweep
 * killed at any moment (SIGKILL included) is resumed by running it again on
 * the same database: only the missing points are computed, nothing is
 * duplicated, and the result equals an uninterrupted run's.  Schema and
 * spec format: doc/sweep.md.
 *
 *   sp_sweep_spec *s; sp_error err;
 *   if (sp_sweep_spec_load_file("fig3.json", &s, &err) != SP_OK) ...  // err.path names the field
 *   sp_sweep_opts o;
 *   sp_sweep_opts_init(&o);
 *   o.jobs = 2;
 *   sp_sweep_stats st;
 *   sp_sweep_run(s, "fig3.db", &o, &st);      // st.done_before, st.computed
 *   sp_sweep_spec_free(s);
 *
 * Points are numbered in row-major order over the spec's axes
 * (models, hw, chips, batch, prompt, gen, layouts), the last fastest, or in
 * the order of a list; the number is stored as column `idx`, so exports are
 * in spec order.
 */
#ifndef SP_SWEEP_H
#define SP_SWEEP_H
#include <stdint.h>
#include <stdio.h>
#include "sp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the `points` table and the `meta` table (doc/sweep.md).
 * Bumped on any change of columns or their meaning.  2 appended the column
 * frontier, 3 the fleet columns (rate, fleet_chips, fleet_cost_per_hour,
 * fleet_cost_per_mtok, fleet): a version 1 or 2 database is migrated when a
 * sweep runs on it; a later version than this build's is refused. */
#define SP_SWEEP_SCHEMA_VERSION 3

/* What is computed per point.  Append-only. */
typedef enum sp_sweep_compute {
    SP_SWEEP_ESTIMATE = 0,   /* price each given layout (sp_cost_eval) */
    SP_SWEEP_PLAN = 1,       /* best layout per point (sp_plan_solve, no frontier or rivals) */
    SP_SWEEP_FRONTIER = 2,   /* PLAN's row plus the point's cost-vs-latency frontier (column frontier) */
    SP_SWEEP_FLEET = 3,      /* the cheapest fleet per (model, hw, max chips, max batch, prompt, gen, rate)
                                (sp_fleet_solve; columns rate, fleet_*) */
    SP_SWEEP_COMPUTE_COUNT
} sp_sweep_compute;
/* "estimate", "plan", "frontier", "fleet". */
const char *sp_sweep_compute_name(sp_sweep_compute c);

typedef struct sp_sweep_spec sp_sweep_spec;

/* Loads and checks a spec; errors name the field (err->path, e.g.
 * "/batch/3" or "/layouts/1") and are SP_EPARSE or SP_EINVAL.  Models,
 * hardware and layouts are resolved here, so a bad name fails before any
 * point is computed.  New spec: free with sp_sweep_spec_free. */
sp_status sp_sweep_spec_load_file(const char *path, sp_sweep_spec **out, sp_error *err);
sp_status sp_sweep_spec_loads(const char *text, sp_sweep_spec **out, sp_error *err);
void sp_sweep_spec_free(sp_sweep_spec *s);
/* Points in the grid. */
int64_t sp_sweep_spec_points(const sp_sweep_spec *s);
sp_sweep_compute sp_sweep_spec_compute(const sp_sweep_spec *s);

struct sp_sweep_stats;
/* Progress, called by the thread that writes, after each commit, with the
 * figures so far (rows in the database: done_before + computed). */
typedef void (*sp_sweep_progress_fn)(void *user, const struct sp_sweep_stats *so_far);

typedef struct sp_sweep_opts {
    size_t size;                  /* sizeof(sp_sweep_opts) */
    int jobs;                     /* computing threads (the calling thread writes); default 1 */
    int batch_rows;               /* rows per transaction; default 4096 */
    sp_sweep_progress_fn progress;  /* NULL: none (under MPI: called on rank 0) */
    void *progress_user;
    /* 1: this process is one rank of an MPI job (mpirun -np K): rank 0
     * writes db_path, the K-1 others compute (one thread each: jobs must be
     * 1), every rank calls sp_sweep_run with the same spec.  MPI is
     * initialised if the program has not done it.  One rank alone runs as
     * mpi = 0.  SP_ENOTSUP in a build without MPI.  Default 0. */
    int mpi;
} sp_sweep_opts;
void sp_sweep_opts_init(sp_sweep_opts *o);

typedef struct sp_sweep_stats {
    int64_t total;                /* points in the spec */
    int64_t done_before;          /* rows already in the database at the start */
    int64_t computed;             /* rows written by this run */
    double elapsed_s;             /* this run, from opening the database to the last commit */
} sp_sweep_stats;

/*
 * NAME
 *   sp_sweep_run - compute the points of a spec that the database lacks
 * DESCRIPTION
 *   Opens (or creates) db_path in WAL mode, creates the schema (or migrates
 *   a version 1 one), records the spec (canonical JSON) in `meta`, and computes every point whose idx has
 *   no row yet: opts->jobs threads compute blocks of points, the calling
 *   thread inserts their rows, opts->batch_rows per transaction
 *   (INSERT ... ON CONFLICT DO NOTHING on the inputs' key).
 * RETURNS
 *   SP_OK when every point has its row (under MPI: rank 0; another rank
 *   returns SP_OK when it computed every point given to it); SP_EINVAL when
 *   the database holds another spec or a later schema version, or (MPI)
 *   ranks read different specs or jobs is not 1 (the message says which);
 *   SP_ENOTSUP for opts->mpi in a build without MPI; SP_EMPI on an MPI error; SP_EIO on a
 *   SQLite error; SP_ENOMEM.
 */
sp_status sp_sweep_run(const sp_sweep_spec *s, const char *db_path, const sp_sweep_opts *opts,
                       sp_sweep_stats *stats);

typedef enum sp_sweep_format { SP_SWEEP_CSV = 0, SP_SWEEP_JSON = 1, SP_SWEEP_FORMAT_COUNT } sp_sweep_format;
/* "csv" or "json"; SP_EINVAL otherwise. */
sp_status sp_sweep_format_parse(const char *s, sp_sweep_format *out);

/* Writes every row of `points` in idx order: CSV with a header line, or a
 * JSON object {"schema_version", "spec", "points": [{column: value}...]}
 * (the frontier and fleet columns as JSON).  Reads schema versions 1 to 3.
 * SP_EIO when the file is not a sweep database (message says why). */
sp_status sp_sweep_export(const char *db_path, sp_sweep_format fmt, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
