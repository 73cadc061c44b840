/* cmd_fleet.c: `shardplan fleet`: the cheapest fleet of pools serving a
 * request rate within TTFT and TPOT targets (sp_fleet.h). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "sp_fleet.h"

static const char fleet_usage[] =
    "usage: shardplan fleet --model M --hw H[,H2...] --rate R --prompt P --gen G\n"
    "                       [--chips-available H=N,...] [--ttft-ms X] [--tpot-ms Y]\n"
    "                       [--objective cost|chips] [--util-cap U] [--max-instance-chips N]\n"
    "                       [--max-batch B] [--colocated-only | --disaggregated-only]\n"
    "                       [--full-space] [--weights auto|bf16|int8|fp8] [--simulate N]\n"
    "                       [--time-limit-ms MS] [--json]\n"
    "\n"
    "Sizes a fleet for R requests per second of P prompt and G generated tokens:\n"
    "how many instances of which pools (colocated, or disaggregated prefill and\n"
    "decode pools with the KV cache handed over the network), each with its chip\n"
    "kind, chips per instance, layout and batch, at the least cost per hour (the\n"
    "profiles' cost_per_chip_hour) or the fewest chips.  Each pool candidate is\n"
    "priced by the planner's layout space; a GLPK program chooses the integer\n"
    "instance counts and the rate each pool serves (doc/planner.md, \"Fleets\").\n"
    "\n"
    "Load model: each instance gets a Poisson share of its pool's requests and\n"
    "stays under the utilisation cap; TTFT is the mean queueing wait of a batch\n"
    "server (S/2 + rho*S/(2b(1-rho))) plus the prefill; TPOT one decode step at the\n"
    "last context; decode instances are b slots (Erlang C wait, at most the TPOT\n"
    "target); each side of the KV handoff within the TPOT target.\n"
    "\n"
    "  --model M              bundled model name or a model JSON / HF config.json file\n"
    "  --hw LIST              chip kinds (bundled names or files), comma-separated\n"
    "  --chips-available L    H=N,...: at most N chips of kind H (default: no limit)\n"
    "  --rate R               requests per second\n"
    "  --prompt P             prompt tokens per request\n"
    "  --gen G                generated tokens per request\n"
    "  --ttft-ms X            mean time-to-first-token target (default: none)\n"
    "  --tpot-ms Y            time-per-output-token target (default: none)\n"
    "  --objective O          cost (default: dollars per hour) or chips\n"
    "  --util-cap U           utilisation cap per instance, 0 < U < 1 (default 0.8)\n"
    "  --max-instance-chips N chips per instance up to N (default 8)\n"
    "  --max-batch B          batches 1, 2, 4, ... up to B (default 256)\n"
    "  --colocated-only       no disaggregated pools\n"
    "  --disaggregated-only   no colocated pools\n"
    "  --full-space           every layout of the planner's space per pool (default:\n"
    "                         tensor meshes 1x1xT, one micro-batch per stage)\n"
    "  --weights W            auto (default), bf16, int8 or fp8\n"
    "  --simulate N           also run N Poisson arrivals through the fleet (seed 1)\n"
    "                         and print the simulated waits and utilisation\n"
    "  --time-limit-ms MS     GLPK time limit per solve (default 10000)\n"
    "  --json                 status, chips, cost_per_hour, cost_per_mtok, pools[] (role,\n"
    "                         hw, instances, chips_per_instance, layout, batch, ttft_s,\n"
    "                         tpot_s, ...), alternatives[], notes, stats\n"
    "\n"
    "Exit: 0 a fleet was found, 1 no fleet meets the rate and targets, 2 bad input,\n"
    "3 solver or internal error.\n";

#define MAX_KINDS 8

static void print_pools(const sp_fleet *f, const sp_fleet_choice *c)
{
    static const char *const hdr[12] = {"role", "hw", "inst", "chips/inst", "batch", "layout", "req/s",
                                        "util", "TTFT", "TPOT", "handoff", "$/h"};
    cli_table *t = cli_table_new(12, hdr);
    for (int i = 0; i < c->n_pools; i++) {
        const sp_fleet_pool *p = &c->pools[i];
        char c2[16], c3[16], c4[24], c5[256], c6[24], c7[16], c8[24], c9[24], c10[24], c11[24];
        snprintf(c2, sizeof c2, "%d", p->instances);
        snprintf(c3, sizeof c3, "%d", p->chips_per_instance);
        snprintf(c4, sizeof c4, "%lld", (long long)p->batch);
        sp_layout_format(&p->layout, c5, sizeof c5);
        snprintf(c6, sizeof c6, "%.4g", p->rate);
        snprintf(c7, sizeof c7, "%.2f", p->utilisation);
        if (p->role == SP_FLEET_DECODE) snprintf(c8, sizeof c8, "-");
        else cli_fmt_seconds(p->ttft_s, c8, sizeof c8);
        if (p->role == SP_FLEET_PREFILL) snprintf(c9, sizeof c9, "-");
        else cli_fmt_seconds(p->tpot_s, c9, sizeof c9);
        if (p->role == SP_FLEET_COLOCATED) snprintf(c10, sizeof c10, "-");
        else cli_fmt_seconds(p->handoff_s, c10, sizeof c10);
        snprintf(c11, sizeof c11, "%.2f", p->cost_per_hour);
        const char *cells[12] = {sp_fleet_role_name(p->role), f->kinds[p->kind].hw->name, c2, c3, c4, c5, c6, c7,
                                 c8, c9, c10, c11};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
}

static void print_fleet(const sp_fleet *f, const sp_model *m)
{
    char a[32], b[32];
    printf("fleet: %s at %.4g requests/s, prompt %lld, gen %lld; objective %s", m->name, f->request.rate,
           (long long)f->request.prompt, (long long)f->request.gen, sp_fleet_objective_name(f->opts.objective));
    if (f->opts.ttft_s > 0) printf(", TTFT <= %s", cli_fmt_seconds(f->opts.ttft_s, a, sizeof a));
    if (f->opts.tpot_s > 0) printf(", TPOT <= %s", cli_fmt_seconds(f->opts.tpot_s, b, sizeof b));
    printf(", utilisation <= %.2f\n", f->opts.util_cap);
    printf("status: %s (%d layouts priced; candidates: %d colocated, %d prefill, %d decode; program %d rows x %d "
           "columns; %d GLPK solves; cost model %.1f ms, GLPK %.1f ms)\n",
           sp_plan_result_name(f->result), f->stats.layouts, f->stats.candidates[SP_FLEET_COLOCATED],
           f->stats.candidates[SP_FLEET_PREFILL], f->stats.candidates[SP_FLEET_DECODE], f->stats.rows, f->stats.cols,
           f->stats.solves, f->stats.eval_s * 1e3, f->stats.glpk_s * 1e3);
    if (f->notes[0]) printf("note: %s\n", f->notes);
    if (!f->best.found) {
        printf("\nno fleet serves %.4g requests/s within the targets%s\n", f->request.rate,
               f->n_kinds ? " and the available chips" : "");
        return;
    }
    printf("\n%lld chips, $%.2f per hour, $%.4f per million generated tokens\n\n", (long long)f->best.chips,
           f->best.cost_per_hour, f->best.cost_per_mtok);
    print_pools(f, &f->best);
    if (f->n_alts) {
        printf("\nbest alternative of each other kind:\n");
        for (int i = 0; i < f->n_alts; i++) {
            const sp_fleet_alt *x = &f->alts[i];
            if (x->fleet.found)
                printf("  %-16s %lld chips, $%.2f/h: %s\n", x->kind, (long long)x->fleet.chips,
                       x->fleet.cost_per_hour, x->reason);
            else printf("  %-16s none: %s\n", x->kind, x->reason);
        }
    }
}

static void print_sim(const sp_fleet *f, const sp_fleet_sim_pool *s, long long n)
{
    printf("\nsimulated: %lld Poisson arrivals (seed 1, first tenth not measured)\n", n);
    static const char *const hdr[6] = {"role", "hw", "served", "wait (model)", "wait (sim)", "util (sim)"};
    cli_table *t = cli_table_new(6, hdr);
    for (int i = 0; i < f->best.n_pools; i++) {
        const sp_fleet_pool *p = &f->best.pools[i];
        char c2[24], c3[24], c4[24], c5[16];
        snprintf(c2, sizeof c2, "%lld", (long long)s[i].served);
        cli_fmt_seconds(p->wait_s, c3, sizeof c3);
        cli_fmt_seconds(s[i].mean_wait_s, c4, sizeof c4);
        snprintf(c5, sizeof c5, "%.2f", s[i].utilisation);
        const char *cells[6] = {sp_fleet_role_name(p->role), f->kinds[p->kind].hw->name, c2, c3, c4, c5};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
}

/* H=N,... against the loaded kinds. */
static int parse_available(const char *arg, sp_fleet_kind *k, const char (*names)[256], int n)
{
    char buf[1024];
    if (strlen(arg) >= sizeof buf) return cli_usage("fleet", "--chips-available: too long");
    strcpy(buf, arg);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) return cli_usage("fleet", "--chips-available: expected H=N, got \"%s\"", tok);
        *eq = 0;
        int found = -1;
        for (int i = 0; i < n; i++)
            if (!strcmp(tok, names[i]) || !strcmp(tok, k[i].hw->name)) found = i;
        if (found < 0) return cli_usage("fleet", "--chips-available: \"%s\" is not one of --hw", tok);
        long long v;
        if (cli_parse_long("fleet", "--chips-available", eq + 1, 1, (long long)1 << 40, &v)) return CLI_EXIT_USAGE;
        k[found].available = v;
    }
    return CLI_EXIT_OK;
}

int cli_cmd_fleet(int argc, char **argv)
{
    enum {
        O_MODEL = 1, O_HW, O_AVAIL, O_RATE, O_PROMPT, O_GEN, O_TTFT, O_TPOT, O_OBJ, O_UTIL, O_MAXCH, O_MAXB, O_COL,
        O_DIS, O_FULL, O_WEIGHTS, O_SIM, O_TLIM, O_JSON, O_HELP
    };
    static const struct option lo[] = {
        {"model", required_argument, 0, O_MODEL}, {"hw", required_argument, 0, O_HW},
        {"chips-available", required_argument, 0, O_AVAIL}, {"rate", required_argument, 0, O_RATE},
        {"prompt", required_argument, 0, O_PROMPT}, {"gen", required_argument, 0, O_GEN},
        {"ttft-ms", required_argument, 0, O_TTFT}, {"tpot-ms", required_argument, 0, O_TPOT},
        {"objective", required_argument, 0, O_OBJ}, {"util-cap", required_argument, 0, O_UTIL},
        {"max-instance-chips", required_argument, 0, O_MAXCH}, {"max-batch", required_argument, 0, O_MAXB},
        {"colocated-only", no_argument, 0, O_COL}, {"disaggregated-only", no_argument, 0, O_DIS},
        {"full-space", no_argument, 0, O_FULL}, {"weights", required_argument, 0, O_WEIGHTS},
        {"simulate", required_argument, 0, O_SIM}, {"time-limit-ms", required_argument, 0, O_TLIM},
        {"json", no_argument, 0, O_JSON}, {"help", no_argument, 0, O_HELP}, {0, 0, 0, 0}};
    const char *model = NULL, *hwlist = NULL, *avail = NULL;
    double rate = 0;
    long long prompt = -1, gen = -1, sim = 0, v;
    int json = 0;
    sp_fleet_opts o;
    sp_fleet_opts_init(&o);
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        double d;
        switch (c) {
        case O_MODEL: model = optarg; break;
        case O_HW: hwlist = optarg; break;
        case O_AVAIL: avail = optarg; break;
        case O_RATE:
            if (cli_parse_double("fleet", "--rate", optarg, &rate)) return CLI_EXIT_USAGE;
            break;
        case O_PROMPT:
            if (cli_parse_long("fleet", "--prompt", optarg, 1, (long long)1 << 40, &prompt)) return CLI_EXIT_USAGE;
            break;
        case O_GEN:
            if (cli_parse_long("fleet", "--gen", optarg, 1, (long long)1 << 40, &gen)) return CLI_EXIT_USAGE;
            break;
        case O_TTFT:
            if (cli_parse_double("fleet", "--ttft-ms", optarg, &d)) return CLI_EXIT_USAGE;
            o.ttft_s = d * 1e-3;
            break;
        case O_TPOT:
            if (cli_parse_double("fleet", "--tpot-ms", optarg, &d)) return CLI_EXIT_USAGE;
            o.tpot_s = d * 1e-3;
            break;
        case O_OBJ:
            if (sp_fleet_objective_parse(optarg, &o.objective) != SP_OK)
                return cli_usage("fleet", "--objective: %s", sp_last_error());
            break;
        case O_UTIL:
            if (cli_parse_double("fleet", "--util-cap", optarg, &d)) return CLI_EXIT_USAGE;
            if (d >= 1) return cli_usage("fleet", "--util-cap: expected 0 < U < 1, got %s", optarg);
            o.util_cap = d;
            break;
        case O_MAXCH:
            if (cli_parse_long("fleet", "--max-instance-chips", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE;
            o.max_instance_chips = (int)v;
            break;
        case O_MAXB:
            if (cli_parse_long("fleet", "--max-batch", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE;
            o.max_batch = v;
            break;
        case O_COL: o.disaggregated = 0; break;
        case O_DIS: o.colocated = 0; break;
        case O_FULL: o.full_space = 1; break;
        case O_WEIGHTS:
            if (sp_plan_weights_parse(optarg, &o.weights) != SP_OK)
                return cli_usage("fleet", "--weights: %s", sp_last_error());
            break;
        case O_SIM:
            if (cli_parse_long("fleet", "--simulate", optarg, 100, 1 << 24, &sim)) return CLI_EXIT_USAGE;
            break;
        case O_TLIM:
            if (cli_parse_long("fleet", "--time-limit-ms", optarg, 1, 1 << 30, &v)) return CLI_EXIT_USAGE;
            o.time_limit_ms = (int)v;
            break;
        case O_JSON: json = 1; break;
        case O_HELP: fputs(fleet_usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage("fleet", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage("fleet", "unexpected argument '%s'", argv[optind]);
    if (!o.colocated && !o.disaggregated)
        return cli_usage("fleet", "--colocated-only and --disaggregated-only exclude each other");
    if (!model || !hwlist || !(rate > 0) || prompt < 0 || gen < 0)
        return cli_usage("fleet", "--model, --hw, --rate, --prompt and --gen are required");

    /* the kinds: each loaded once; the model checked for prompt + gen */
    static sp_hw hws[MAX_KINDS];
    char names[MAX_KINDS][256];
    sp_fleet_kind kinds[MAX_KINDS];
    int nk = 0;
    char buf[2048];
    if (strlen(hwlist) >= sizeof buf) return cli_usage("fleet", "--hw: too long");
    strcpy(buf, hwlist);
    sp_model m;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (nk == MAX_KINDS) return cli_usage("fleet", "--hw: at most %d chip kinds", MAX_KINDS);
        if (strlen(tok) >= sizeof names[0]) return cli_usage("fleet", "--hw: name too long");
        int rc = cli_load_problem(model, tok, prompt + gen, &m, &hws[nk]);
        if (rc != CLI_EXIT_OK) return rc;
        strcpy(names[nk], tok);
        kinds[nk].hw = &hws[nk];
        kinds[nk].available = 0;
        nk++;
    }
    if (!nk) return cli_usage("fleet", "--hw: no chip kind given");
    if (avail) {
        int rc = parse_available(avail, kinds, (const char (*)[256])names, nk);
        if (rc != CLI_EXIT_OK) return rc;
    }
    sp_fleet_request q = {.rate = rate, .prompt = prompt, .gen = gen};
    sp_fleet *f;
    sp_status st = sp_fleet_solve(&m, kinds, nk, &q, &o, &f);
    if (st != SP_OK) return cli_report(st, NULL);
    sp_fleet_sim_pool *sp = NULL;
    if (sim && f->best.found) {
        if (!(sp = calloc((size_t)f->best.n_pools, sizeof *sp))) {
            sp_fleet_free(f);
            cli_errorf("out of memory");
            return CLI_EXIT_INTERNAL;
        }
        if ((st = sp_fleet_simulate(f, sim, 1, sp)) != SP_OK) {
            free(sp);
            sp_fleet_free(f);
            return cli_report(st, NULL);
        }
    }
    if (json) {
        json_t *j = sp_fleet_to_json(f);
        if (sp) {
            json_t *a = json_array();
            for (int i = 0; i < f->best.n_pools; i++) {
                json_t *x = json_object();
                json_object_set_new(x, "served", json_integer(sp[i].served));
                json_object_set_new(x, "mean_wait_s", json_real(sp[i].mean_wait_s));
                json_object_set_new(x, "mean_ttft_s", json_real(sp[i].mean_ttft_s));
                json_object_set_new(x, "utilisation", json_real(sp[i].utilisation));
                json_array_append_new(a, x);
            }
            json_object_set_new(j, "simulated", a);
        }
        cli_print_json(j, stdout);
        json_decref(j);
    } else {
        print_fleet(f, &m);
        if (sp) print_sim(f, sp, sim);
    }
    int rc = f->best.found ? CLI_EXIT_OK : CLI_EXIT_INFEASIBLE;
    free(sp);
    sp_fleet_free(f);
    return rc;
}
