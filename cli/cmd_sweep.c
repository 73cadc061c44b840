/* cmd_sweep.c: `shardplan sweep`: a grid of points into SQLite, resumable; export. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "sp_sweep.h"

static const char usage[] =
    "usage: shardplan sweep SPEC --db FILE [--jobs N] [--quiet]\n"
    "       shardplan sweep SPEC --dry-run\n"
    "       shardplan sweep --export csv|json --db FILE [--out FILE]\n"
    "\n"
    "Computes every point of the grid in SPEC (JSON: models, hw, chips, batch, prompt,\n"
    "gen, and \"compute\": \"estimate\" with \"layouts\", \"plan\", \"frontier\", or \"fleet\"\n"
    "with \"rate\" (chips and batch: each instance's most; doc/sweep.md); or\n"
    "a list {\"points\": [{\"model\", \"hw\", \"chips\", ...}]}; doc/sweep.md) and\n"
    "writes one row per point to the table `points` of the SQLite database FILE,\n"
    "keyed by the point's inputs.  Killed at any moment, the same command resumes:\n"
    "only the points without a row are computed, and the database ends equal to an\n"
    "uninterrupted run's.\n"
    "\n"
    "  --db FILE        the SQLite database (created if missing)\n"
    "  --jobs N         computing threads (default 1; the main thread writes)\n"
    "  --batch-rows N   rows per transaction (default 4096)\n"
    "  --quiet          no progress and no summary\n"
    "  --dry-run        check SPEC and print how many points it has; compute nothing\n"
    "  --export F       write the database's rows (idx order) to stdout as csv or json\n"
    "  --out FILE       with --export: write to FILE instead of stdout\n"
    "\n"
    "Progress: a bar with rate and ETA on a terminal (stderr), else a line every few\n"
    "seconds.\n"
    "\n"
    "Across machines: mpirun -np K shardplan sweep SPEC --db FILE.  Rank 0 writes FILE\n"
    "(on its machine), the K-1 other ranks compute, one thread each (--jobs 1); the\n"
    "database equals a one-process run's and resumes the same way.  Every rank must\n"
    "read the same SPEC (checked).  --export and --dry-run run as one process.\n"
    "\n"
    "Exit: 0 every point has its row, 2 bad spec (the field is named) or a database\n"
    "that holds another sweep, 3 internal error.\n";

typedef struct progress {
    int tty;
    double last;                     /* elapsed at the last line drawn */
    int drawn;
} progress;

/* Terminal: one bar redrawn in place at most 10 times a second; otherwise a
 * plain line every 5 s.  Rate counts this run's rows; ETA is the rest at it. */
static void show_progress(void *user, const sp_sweep_stats *so)
{
    progress *p = user;
    int64_t done = so->done_before + so->computed;
    int last = done >= so->total;
    if (so->elapsed_s - p->last < (p->tty ? 0.1 : 5) && !last) return;
    p->last = so->elapsed_s;
    p->drawn = 1;
    double frac = so->total ? (double)done / (double)so->total : 1;
    double rate = so->elapsed_s > 0 ? (double)so->computed / so->elapsed_s : 0;
    double eta = rate > 0 ? (double)(so->total - done) / rate : 0;
    if (p->tty) {
        char bar[33];
        int k = (int)(frac * 32);
        for (int i = 0; i < 32; i++) bar[i] = i < k ? '#' : '.';
        bar[32] = 0;
        fprintf(stderr, "\r[%s] %5.1f%% %lld/%lld  %.0f points/s  ETA %.0f s   ", bar, 100 * frac,
                (long long)done, (long long)so->total, rate, eta);
    } else {
        fprintf(stderr, "sweep: %lld/%lld points (%.1f%%), %.0f points/s, ETA %.0f s\n", (long long)done,
                (long long)so->total, 100 * frac, rate, eta);
    }
    fflush(stderr);
}

/* Launchers set these in every rank they start: the job's size and this
 * process's rank (1 and 0 when not under a launcher). */
static int mpi_env(const char *const *vars, size_t n, int dflt)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return dflt;
}

static int mpi_world_size(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    return mpi_env(vars, sizeof vars / sizeof vars[0], 1);
}

static int mpi_world_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    return mpi_env(vars, sizeof vars / sizeof vars[0], 0);
}

int cli_cmd_sweep(int argc, char **argv)
{
    static const struct option opts[] = {
        {"db", required_argument, 0, 'd'},     {"jobs", required_argument, 0, 'j'},
        {"quiet", no_argument, 0, 'q'},        {"export", required_argument, 0, 'e'},
        {"out", required_argument, 0, 'o'},    {"batch-rows", required_argument, 0, 'b'},
        {"dry-run", no_argument, 0, 'n'},      {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *db = NULL, *export_arg = NULL, *out_arg = NULL;
    long long jobs = 1, batch_rows = 4096;
    int quiet = 0, dry = 0, ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'd': db = optarg; break;
        case 'j': if (cli_parse_long("sweep", "--jobs", optarg, 1, 1024, &jobs)) return CLI_EXIT_USAGE; break;
        case 'b':
            if (cli_parse_long("sweep", "--batch-rows", optarg, 1, 1 << 24, &batch_rows)) return CLI_EXIT_USAGE;
            break;
        case 'q': quiet = 1; break;
        case 'n': dry = 1; break;
        case 'e': export_arg = optarg; break;
        case 'o': out_arg = optarg; break;
        case 'h': fputs(usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage("sweep", "unknown option");
        }
    }
    int np = mpi_world_size(), rank = mpi_world_rank();
    if (np > 1 && (export_arg || dry)) {
        cli_errorf("sweep %s under mpirun (-np %d): run it as one process", export_arg ? "--export" : "--dry-run", np);
        return CLI_EXIT_USAGE;
    }
    if (np > 1 && jobs != 1) {
        cli_errorf("sweep under mpirun: each computing rank is one thread (--jobs %lld): start more ranks "
                   "(mpirun -np K) instead", jobs);
        return CLI_EXIT_USAGE;
    }
    if (rank != 0) quiet = 1;   /* rank 0 alone writes, so it alone reports */
    if (!db && !dry) return cli_usage("sweep", "--db FILE is required");
    if (export_arg && dry) return cli_usage("sweep", "--dry-run goes with a SPEC, not --export");
    if (export_arg) {
        if (optind < argc) return cli_usage("sweep", "--export takes no SPEC (unexpected '%s')", argv[optind]);
        sp_sweep_format fmt;
        if (sp_sweep_format_parse(export_arg, &fmt) != SP_OK) return cli_usage("sweep", "%s", sp_last_error());
        if (access(db, R_OK) != 0) {
            cli_errorf("%s: no such database", db);
            return CLI_EXIT_USAGE;
        }
        FILE *f = stdout;
        if (out_arg && !(f = fopen(out_arg, "w"))) {
            cli_errorf("%s: cannot write", out_arg);
            return CLI_EXIT_USAGE;
        }
        sp_status st = sp_sweep_export(db, fmt, f);
        if (f != stdout && fclose(f) != 0 && st == SP_OK) {
            cli_errorf("%s: write failed", out_arg);
            return CLI_EXIT_INTERNAL;
        }
        return st == SP_OK ? CLI_EXIT_OK : cli_report(st, NULL);
    }
    if (out_arg) return cli_usage("sweep", "--out goes with --export");
    if (optind + 1 != argc) return cli_usage("sweep", "give one SPEC file");
    const char *spec_path = argv[optind];
    sp_error err;
    sp_error_init(&err);
    sp_sweep_spec *s;
    sp_status st = sp_sweep_spec_load_file(spec_path, &s, &err);
    if (st != SP_OK) {
        cli_report(st, &err);
        return CLI_EXIT_USAGE;
    }
    if (dry) {
        printf("%s: %lld %s points\n", spec_path, (long long)sp_sweep_spec_points(s),
               sp_sweep_compute_name(sp_sweep_spec_compute(s)));
        sp_sweep_spec_free(s);
        return CLI_EXIT_OK;
    }
    sp_sweep_opts o;
    sp_sweep_opts_init(&o);
    o.jobs = (int)jobs;
    o.batch_rows = (int)batch_rows;
    o.mpi = np > 1;
    progress pr = {.tty = isatty(2), .last = -1e9};
    if (!quiet) {
        o.progress = show_progress;
        o.progress_user = &pr;
    }
    sp_sweep_stats stats;
    st = sp_sweep_run(s, db, &o, &stats);
    sp_sweep_spec_free(s);
    if (!quiet && pr.tty && pr.drawn) fputc('\n', stderr);
    if (st != SP_OK) return cli_report(st, NULL);
    if (!quiet)
        fprintf(stderr, "sweep: %lld points in %s (%lld already there, %lld computed) in %.2f s, %.0f points/s\n",
                (long long)stats.total, db, (long long)stats.done_before, (long long)stats.computed,
                stats.elapsed_s, stats.elapsed_s > 0 ? (double)stats.computed / stats.elapsed_s : 0.0);
    return CLI_EXIT_OK;
}
