/* main.c: shardplan <verb> [options]: dispatch to the verb table. */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "spi_common.h"

/* One line per verb; keep the order of `shardplan --help`. */
static const struct cli_verb verbs[] = {
    {"models", "list the bundled model descriptions", cli_cmd_models},
    {"model", "model show NAME|FILE: sizes, parameter counts, bytes and FLOPs of a model", cli_cmd_model},
    {"hw", "list bundled hardware; hw show NAME|FILE: one hardware description", cli_cmd_hw},
    {"estimate", "price one layout: latency, throughput, MFU, cost, time and memory breakdown", cli_cmd_estimate},
    {"simulate", "schedule one layout's programs on every chip's timeline; --trace FILE writes it (Perfetto)",
     cli_cmd_simulate},
    {"plan", "best layout for a model on N chips (GLPK MILP): breakdown, cost-vs-latency frontier, rivals", cli_cmd_plan},
    {"frontier", "cost-vs-latency frontier across chip counts and batch sizes, decode and prefill", cli_cmd_frontier},
    {"fleet", "the cheapest fleet for a request rate: pools (colocated or prefill/decode), instances, chips, cost (GLPK)",
     cli_cmd_fleet},
    {"report", "capacity-planning report: HTML or Markdown with PLplot figures, CSV and JSON (--out DIR)", cli_cmd_report},
    {"autoconfig", "a server's configuration at startup: layout as vLLM/SGLang/TensorRT-LLM flags, env or JSON (plan cache)", cli_cmd_autoconfig},
    {"calibrate", "fit a hardware profile to measurements (--fit CSV): errors in and out of sample", cli_cmd_calibrate},
    {"sweep", "a grid of points (estimate or plan) into SQLite, resumable; --export csv|json", cli_cmd_sweep},
    {"validate", "run a case set on the executor: predicted vs measured, |error| and Kendall tau", cli_cmd_validate},
    {"run", "run a model under a layout (threads, MPI or CUDA backend): tokens, timings, bytes vs prediction", cli_cmd_run},
};

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: shardplan <verb> [options]\n"
            "       shardplan <verb> --help\n"
            "       shardplan --help | --version\n\n"
            "Plans how to split a transformer model across chips.\n\nVerbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(f, "  %-10s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(f, "\nEnvironment:\n");
    for (int k = 0; k < SP_ENV_COUNT; k++)
        fprintf(f, "  %-26s %s (default: %s)\n", sp_env_name((sp_env_knob)k), sp_env_doc((sp_env_knob)k),
                sp_env_default((sp_env_knob)k)[0] ? sp_env_default((sp_env_knob)k) : "unset");
    fprintf(f,
            "\nExit status: 0 success, 1 the request cannot be met, 2 bad usage or input,\n"
            "3 internal or system error.\n");
}

int main(int argc, char **argv)
{
#if defined(SP_BUILDDIR) && defined(SP_SRCDATADIR)
    /* run uninstalled: the source tree's data (the installed program is elsewhere) */
    spi_use_build_tree_data(SP_BUILDDIR, SP_SRCDATADIR);
#endif
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *v = argv[1];
    if (!strcmp(v, "--help") || !strcmp(v, "-h") || !strcmp(v, "help")) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (!strcmp(v, "--version") || !strcmp(v, "-V")) {
        printf("shardplan %s\n", sp_version());
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(v, verbs[i].name)) return verbs[i].run(argc - 1, argv + 1);
    if (v[0] == '-') return cli_usage(NULL, "unknown option '%s'", v);
    return cli_usage(NULL, "unknown verb '%s'", v);
}
