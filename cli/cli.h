/*
 * cli.h: the shardplan program's shared pieces.
 *
 * Adding a verb: write cli/cmd_<x>.c with `int cli_cmd_<x>(int argc, char **argv)`
 * (argv[0] is the verb; parse with getopt_long after `optind = 0`), declare it
 * below, add it to shardplan_SOURCES in cli/local.mk and one line to the
 * verb table in main.c.  Return one of the CLI_EXIT_* codes.
 */
#ifndef SP_CLI_H
#define SP_CLI_H
#include <stdio.h>
#include <jansson.h>
#include "sp_common.h"
#include "sp_cost.h"

/* Exit codes. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_INFEASIBLE = 1,   /* the request cannot be met */
    CLI_EXIT_USAGE = 2,        /* bad usage or bad input */
    CLI_EXIT_INTERNAL = 3,     /* anything else */
};

struct cli_verb {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
};

/* Verbs: one per file cmd_<x>.c. */
int cli_cmd_models(int argc, char **argv);
int cli_cmd_model(int argc, char **argv);
int cli_cmd_hw(int argc, char **argv);
int cli_cmd_estimate(int argc, char **argv);
int cli_cmd_plan(int argc, char **argv);
int cli_cmd_frontier(int argc, char **argv);
int cli_cmd_fleet(int argc, char **argv);
int cli_cmd_run(int argc, char **argv);
int cli_cmd_sweep(int argc, char **argv);
int cli_cmd_calibrate(int argc, char **argv);
int cli_cmd_simulate(int argc, char **argv);
int cli_cmd_autoconfig(int argc, char **argv);
int cli_cmd_validate(int argc, char **argv);
int cli_cmd_report(int argc, char **argv);
/* calibrate --backend ...: microbenchmarks of this machine's chips (cmd_calibrate_local.c). */
int cli_calibrate_local(int argc, char **argv);

/* The verbs that run one chip per MPI rank (run, calibrate, validate with
 * --backend mpi): initialises MPI (the verb then calls MPI_Finalize: this
 * program initialises it, so it finalizes it too, exec/comm_mpi.c) and gives
 * this process's rank and the world's size.  CLI_EXIT_OK; CLI_EXIT_INTERNAL
 * when MPI_Init_thread fails; CLI_EXIT_USAGE in a build without MPI (both
 * said on stderr, naming the verb). */
int cli_mpi_init(const char *verb, int *rank, int *size);

/* Reads a workload file (--workload: sp_ragged_load_file); on failure says
 * why on stderr naming the file, line and field, and returns CLI_EXIT_USAGE.
 * *out is the caller's: sp_ragged_free. */
int cli_load_workload(const char *path, sp_ragged *out);
/* A ragged batch's token counts as JSON (estimate, plan: "workload"): sequences,
 * prompt_tokens, gen_tokens, max_prompt, max_gen, max_context.  A new reference. */
json_t *cli_workload_json(const sp_ragged *r);

/* EINVAL, EPARSE, EIO -> 2; EINFEASIBLE, ENOMEM -> 1; OK -> 0; others -> 3. */
int cli_exit_for(sp_status s);

/* Prints "shardplan: <message>" to stderr: the formatted err when it has text,
 * else sp_last_error(), else the status string.  Returns cli_exit_for(s). */
int cli_report(sp_status s, const sp_error *err);
void cli_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Usage error for verb: message plus a pointer to --help; returns CLI_EXIT_USAGE. */
int cli_usage(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* `verb --backend cuda`: 0 when a GPU is visible; else says why it cannot run
 * (no GPU, with the CUDA runtime's reason, or a build without CUDA) and
 * returns CLI_EXIT_USAGE. */
int cli_cuda_check(const char *verb);

/* Parses a number > 0 for option opt (usage error otherwise); 0 on success (cmd_plan.c). */
int cli_parse_double(const char *verb, const char *opt, const char *s, double *out);
/* Parses a decimal integer in [min, max] for option opt; 0 on success. */
int cli_parse_long(const char *verb, const char *opt, const char *s, long long min, long long max, long long *out);

/* Column-aligned table: cells that start with a digit (or -digit) are
 * right-aligned.  Cells are copied. */
typedef struct cli_table cli_table;
cli_table *cli_table_new(int ncols, const char *const *header);
void cli_table_add(cli_table *t, const char *const *cells);
/* Forces column col to left alignment (key/value tables). */
void cli_table_left(cli_table *t, int col);
void cli_table_print(const cli_table *t, FILE *f);
void cli_table_free(cli_table *t);

/* json_dumpf with INDENT(2), PRESERVE_ORDER, REAL_PRECISION(10) and a newline. */
int cli_print_json(const json_t *j, FILE *f);

/* Human number formatting into buf; return buf. */
char *cli_fmt_count(double x, char *buf, size_t n);    /* 540.35B, 6.74M, 512 */
char *cli_fmt_bytes(double x, char *buf, size_t n);    /* 1.23 GiB */
char *cli_fmt_seconds(double x, char *buf, size_t n);  /* 2.5 ms */
char *cli_fmt_flops(double x, char *buf, size_t n);    /* 275 TFLOP/s */
char *cli_fmt_rate(double x, char *buf, size_t n);     /* 1.2 TB/s (decimal: link figures are quoted so) */

/* What run and validate put beside a measurement (cmd_validate.c): the cost
 * model's prefill and mean decode step (decode_s / gen) for the CPU
 * executor (fp32 activations), and the time per step kind.  CLI_EXIT_USAGE
 * with sp_last_error() when the layout cannot be priced. */
typedef struct cli_prediction {
    double prefill_s, decode_step_s;
    sp_cost_kinds kinds;
} cli_prediction;
int cli_predict_run(const sp_model *m, const sp_hw *hw, const sp_layout *l, int64_t batch, int64_t prompt,
                    int64_t gen, cli_prediction *out);

/* Shared by estimate, plan and run (cmd_estimate.c). */
struct sp_cost;
struct sp_hw;
struct sp_layout;
struct sp_error;
/* A --layout argument: an existing file holds JSON; anything else is the text or JSON form. */
int cli_load_layout(const char *arg, struct sp_layout *out, struct sp_error *err);
struct sp_model;
/* Loads --model and --hw, checking the model for a run to `context` tokens
 * (0: its own limit) (cmd_plan.c).  Returns CLI_EXIT_OK, or the exit code
 * after reporting the error. */
int cli_load_problem(const char *model_arg, const char *hw_arg, int64_t context, struct sp_model *m,
                     struct sp_hw *hw);
/* ... and --layout (cmd_estimate.c), checking the layout for the chips and batch. */
int cli_load_job(const char *model_arg, const char *hw_arg, const char *layout_arg, int chips, int64_t batch,
                 int64_t context, struct sp_model *m, struct sp_hw *hw, struct sp_layout *l);
/* The human form of a priced layout: headline figures, time breakdown, memory per chip. */
void cli_print_cost(const struct sp_cost *c, const struct sp_hw *hw);
#endif
