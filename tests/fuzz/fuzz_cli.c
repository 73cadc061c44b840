/* fuzz_cli.c: the command line.  The input is a verb selector byte and then
 * arguments, one per line.  model, hw, models and estimate run as given
 * (they are fast); plan, frontier, run and calibrate get a final --help, so
 * every option before it is parsed and checked but nothing is solved or run.
 * Arguments naming files are skipped: this harness is about arguments, not
 * about reading whatever a path happens to reach.  Promise: the exit code is
 * 0, 1 or 2; 3 (an internal error) is a finding. */
#include <fcntl.h>
#include <unistd.h>
#include "fuzz.h"
#include "cli.h"

#define MAX_ARGS 32

static const struct {
    const char *name;
    int (*run)(int, char **);
    int help;   /* append --help: parse only */
} verbs[] = {
    {"model", cli_cmd_model, 0},       {"hw", cli_cmd_hw, 0},         {"models", cli_cmd_models, 0},
    {"estimate", cli_cmd_estimate, 0}, {"plan", cli_cmd_plan, 1},     {"frontier", cli_cmd_frontier, 1},
    {"run", cli_cmd_run, 1},           {"calibrate", cli_cmd_calibrate, 1},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int null_fd = -1;
    if (null_fd < 0) null_fd = open("/dev/null", O_WRONLY);
    if (size < 1 || size > 4096) return 0;
    int v = data[0] % (int)(sizeof verbs / sizeof verbs[0]);
    char *text = fuzz_strdup(data + 1, size - 1);
    char *argv[MAX_ARGS + 3];
    int argc = 0;
    argv[argc++] = (char *)verbs[v].name;
    for (char *p = text; *p && argc < MAX_ARGS;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        if (strchr(p, '/')) goto skip;   /* a path: not this harness's subject */
        argv[argc++] = p;
        if (!nl) break;
        p = nl + 1;
    }
    if (verbs[v].help) argv[argc++] = (char *)"--help";
    argv[argc] = NULL;
    /* the verbs print: to /dev/null, then back */
    fflush(stdout);
    fflush(stderr);
    int out = dup(1), err = dup(2);
    dup2(null_fd, 1);
    dup2(null_fd, 2);
    int rc = verbs[v].run(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(out, 1);
    dup2(err, 2);
    close(out);
    close(err);
    if (rc < 0 || rc > 2) {
        fprintf(stderr, "fuzz_cli: exit %d from:", rc);
        for (int i = 0; i < argc; i++) fprintf(stderr, " '%s'", argv[i]);
        fputc('\n', stderr);
    }
    FUZZ_ASSERT(rc >= 0 && rc <= 2);
skip:
    free(text);
    return 0;
}
