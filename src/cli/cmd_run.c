/* cmd_run.c: `shardplan run`: run a model under a layout on the threads backend. */
#include "config.h"
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "exec/sp_exec.h"

static void usage(void)
{
    printf("usage: shardplan run --model M --chips N --batch B --prompt P --gen G --layout FILE|STRING\n"
           "                     [--backend threads] [--seed S] [--weights-dtype f32|bf16|int8] [--json]\n"
           "Runs prefill + greedy decode with random weights (seed S) on N chips (threads).\n"
           "--layout is required (auto is not available yet).  Exit 2: layout does not fit.\n");
}

int cli_cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", 1, 0, 'm'}, {"chips", 1, 0, 'n'}, {"batch", 1, 0, 'b'}, {"prompt", 1, 0, 'p'},
        {"gen", 1, 0, 'g'}, {"layout", 1, 0, 'l'}, {"backend", 1, 0, 'k'}, {"seed", 1, 0, 's'},
        {"weights-dtype", 1, 0, 'w'}, {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL, *layout = NULL, *wdt = NULL;
    long long chips = 0, B = 1, P = 8, G = 8, seed = 1;
    int json = 0, c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'l': layout = optarg; break;
        case 'w': wdt = optarg; break;
        case 'k': if (strcmp(optarg, "threads")) return cli_usage("run", "backend %s: only threads", optarg); break;
        case 'n': if (cli_parse_long("run", "--chips", optarg, 1, 4096, &chips)) return CLI_EXIT_USAGE; break;
        case 'b': if (cli_parse_long("run", "--batch", optarg, 1, 1 << 20, &B)) return CLI_EXIT_USAGE; break;
        case 'p': if (cli_parse_long("run", "--prompt", optarg, 1, 1 << 20, &P)) return CLI_EXIT_USAGE; break;
        case 'g': if (cli_parse_long("run", "--gen", optarg, 1, 1 << 20, &G)) return CLI_EXIT_USAGE; break;
        case 's': if (cli_parse_long("run", "--seed", optarg, 0, 1LL << 62, &seed)) return CLI_EXIT_USAGE; break;
        case 'j': json = 1; break;
        case 'h': usage(); return CLI_EXIT_OK;
        default: return cli_usage("run", "unknown option");
        }
    }
    if (!model || !layout) return cli_usage("run", "--model and --layout are required");
    sp_error err;
    memset(&err, 0, sizeof err);
    sp_model m;
    sp_status st = sp_model_find(model, &m, &err);
    if (st) return cli_report(st, &err);
    sp_layout l;
    st = cli_load_layout(layout, &l, &err);
    if (st) return cli_report(st, &err);
    if (wdt) {
        sp_dtype d;
        if ((st = sp_dtype_parse(wdt, &d))) return cli_report(st, NULL);
        l.weights = d;
    }
    if (chips && chips != sp_layout_chips(&l)) {
        cli_errorf("layout uses %d chips, --chips is %lld", sp_layout_chips(&l), chips);
        return CLI_EXIT_USAGE;
    }
    sp_weights w;
    if ((st = sp_weights_build_random(&m, (uint64_t)seed, &w))) return cli_report(st, NULL);
    if (l.weights != SP_DT_F32 && (st = sp_weights_quantize(&w, l.weights))) return cli_report(st, NULL);
    sp_exec *ex = NULL;
    if ((st = sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex))) {
        sp_weights_free(&w);
        return cli_report(st, NULL);
    }
    int32_t *prompt = malloc((size_t)(B * P) * sizeof *prompt), *tok = calloc((size_t)(B * G), sizeof *tok);
    uint64_t rs = (uint64_t)seed;
    for (long long i = 0; i < B * P; i++) prompt[i] = (int32_t)(sp_kern_rng_next(&rs) % (uint64_t)m.vocab);
    sp_exec_stats s;
    st = sp_exec_run(ex, prompt, NULL, tok, NULL, &s);
    int rc = CLI_EXIT_OK;
    char lt[512];
    sp_layout_format(&l, lt, sizeof lt);
    if (st) rc = cli_report(st, NULL);
    else if (json) {
        printf("{\"layout\": \"%s\", \"tokens\": [", lt);
        for (long long b = 0; b < B; b++) {
            printf("%s[", b ? ", " : "");
            for (long long g = 0; g < G; g++) printf("%s%d", g ? ", " : "", tok[b * G + g]);
            printf("]");
        }
        printf("], \"prefill_s\": %.6f, \"decode_step_s\": %.6f, \"tokens_per_s\": %.3f, \"comm\": {\"measured_bytes\": {",
               s.prefill_s, s.decode_step_s, s.tokens_per_s);
        for (int k = 0; k < SP_COLL_COUNT; k++)
            printf("%s\"%s\": %llu", k ? ", " : "", sp_coll_kind_name(k), (unsigned long long)s.measured_bytes[k]);
        printf("}, \"predicted_bytes\": {");
        for (int k = 0; k < SP_COLL_COUNT; k++)
            printf("%s\"%s\": %llu", k ? ", " : "", sp_coll_kind_name(k), (unsigned long long)s.predicted_bytes[k]);
        printf("}, \"token_bytes\": %llu, \"mismatches\": %lld}}\n", (unsigned long long)s.token_bytes,
               (long long)s.mismatches);
    } else {
        printf("layout: %s\n", lt);
        for (long long b = 0; b < B; b++) {
            printf("seq %lld:", b);
            for (long long g = 0; g < G; g++) printf(" %d", tok[b * G + g]);
            printf("\n");
        }
        printf("prefill %.6f s, %.6f s/token, %.1f tokens/s\n", s.prefill_s, s.decode_step_s, s.tokens_per_s);
        printf("%-15s %14s %14s\n", "collective", "measured B", "predicted B");
        for (int k = 0; k < SP_COLL_COUNT; k++)
            printf("%-15s %14llu %14llu\n", sp_coll_kind_name(k), (unsigned long long)s.measured_bytes[k],
                   (unsigned long long)s.predicted_bytes[k]);
        printf("pipeline token hand-off: %llu B; byte mismatches: %lld%s%s\n", (unsigned long long)s.token_bytes,
               (long long)s.mismatches, s.mismatches ? " (first: " : "", s.mismatches ? s.first_mismatch : "");
        if (s.mismatches) printf(")\n");
    }
    free(prompt);
    free(tok);
    sp_exec_free(ex);
    sp_weights_free(&w);
    return rc;
}
