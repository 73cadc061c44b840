/* cmd_plan.c: `shardplan plan` (best layout, frontier, rivals, capacity
 * query) and `shardplan frontier` (cost vs latency across chips × batch). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "sp_plan.h"

static const char plan_usage[] =
    "usage: shardplan plan --model M --hw H --chips N (--batch B --prompt P --gen G | --workload FILE)\n"
    "                      [--objective latency|cost|throughput] [--latency-metric total|decode|prefill]\n"
    "                      [--max-latency-ms X] [--min-tokens-per-s T] [--weights auto|bf16|int8|fp8]\n"
    "                      [--min-chips] [--even-stages] [--disaggregate] [--offload] [--time-limit-ms MS]\n"
    "                      [--json]\n"
    "\n"
    "Searches every layout of the model on N chips (stages, replicas, tensor mesh and\n"
    "its placement, weight precision, micro-batches, prefill and decode FFN/attention\n"
    "layouts) with a GLPK mixed-integer program priced by the cost model, and prints\n"
    "the best layout with its time and memory breakdown, the cost-vs-latency frontier\n"
    "(chip-seconds per generated token vs the latency metric; epsilon-constraint, one\n"
    "solve per point) and, for each other kind of choice, the best rival and why it lost.\n"
    "\n"
    "  --model M            bundled model name or a model JSON / HF config.json file\n"
    "  --hw H               bundled hardware name or a hardware JSON file\n"
    "  --chips N            chips (with --min-chips: the largest count to try)\n"
    "  --batch B            sequences\n"
    "  --prompt P           prompt tokens per sequence (0: decode only)\n"
    "  --gen G              generated tokens per sequence (0: plan prefill only)\n"
    "  --workload FILE      a ragged batch instead of --batch/--prompt/--gen (workload\n"
    "                       file, doc/formats.md): every layout priced by its actual\n"
    "                       tokens; layouts the ragged lowering refuses are left out;\n"
    "                       even pipeline splits only; not with --offload, --disaggregate\n"
    "  --objective O        latency (default): minimise the latency metric;\n"
    "                       cost: minimise chip-seconds per generated token;\n"
    "                       throughput: maximise tokens/s (use with --max-latency-ms)\n"
    "  --latency-metric L   total (default: prefill + all decode steps), decode (one\n"
    "                       decode step at the last context) or prefill\n"
    "  --max-latency-ms X   only layouts whose latency metric is at most X ms\n"
    "  --min-tokens-per-s T only layouts with at least T tokens/s\n"
    "  --weights W          weight precision: auto (default: every one the chip runs),\n"
    "                       bf16, int8 or fp8\n"
    "  --min-chips          capacity query: the fewest chips the topology allows (torus:\n"
    "                       shapes that fit its dims; cluster: 1, 2, 4, ... a node, then\n"
    "                       whole nodes) meeting --max-latency-ms / --min-tokens-per-s\n"
    "  --even-stages        pipelines split their layers evenly only (by default a\n"
    "                       second program decides each stage's layers: stage_layers)\n"
    "  --disaggregate       also split the chips into a prefill group and a decode\n"
    "                       group (each its own mesh, stages, replicas; the KV cache\n"
    "                       moves between them), chosen when it beats every shared\n"
    "                       layout by the objective: one batch's latency = prefill +\n"
    "                       transfer + decode; throughput and cost at the steady state\n"
    "                       (a batch every max(prefill, decode) + transfer).  Serving:\n"
    "                       --objective throughput --max-latency-ms X (doc/planner.md)\n"
    "  --offload            the plan may keep weights and KV cache in host memory: a\n"
    "                       third program decides per stage how many layers' weights\n"
    "                       stream in over the host link (offload_weights) and what\n"
    "                       fraction of the KV sequences lives in host memory\n"
    "                       (offload_kv: 0, 1/4, 1/2, 3/4 or 1), under the HBM and host\n"
    "                       capacities; without it nothing is offloaded\n"
    "  --time-limit-ms MS   GLPK time limit per solve (default 10000)\n"
    "  --json               machine-readable output: status, chosen.{layout, costs,\n"
    "                       stages[]}, frontier[], rivals[], groups (--disaggregate);\n"
    "                       chosen.layout is accepted by `shardplan estimate --layout`\n"
    "\n"
    "Exit: 0 a layout was found, 1 nothing fits or meets the bounds (the smallest\n"
    "memory shortfall and the fewest chips that would fit are printed), 2 bad input,\n"
    "3 solver or internal error.\n";

static const char frontier_usage[] =
    "usage: shardplan frontier --model M --hw H --chips LIST --batch LIST --prompt P --gen G\n"
    "                          [--weights auto|bf16|int8|fp8] [--csv FILE] [--time-limit-ms MS] [--json]\n"
    "\n"
    "The Pareto frontier of cost (chip-seconds per token) vs latency across chip counts\n"
    "and batch sizes, for decode and for prefill separately (as in figure 1 of Pope et\n"
    "al. 2022): decode latency is one decode step at the last context and its cost\n"
    "chips*step/batch per generated token; prefill latency is the prompt and its cost\n"
    "chips*prefill/(batch*prompt) per prompt token.  Each frontier is one GLPK program\n"
    "over every layout of every (chips, batch) pair, traced by the epsilon-constraint\n"
    "method; points are labelled chips:batch.  Layouts must fit the whole request\n"
    "(prompt + gen tokens of KV cache).\n"
    "\n"
    "  --model M         bundled model name or a model JSON / HF config.json file\n"
    "  --hw H            bundled hardware name or a hardware JSON file\n"
    "  --chips LIST      comma-separated chip counts, e.g. 8,16,32,64\n"
    "  --batch LIST      comma-separated batch sizes, e.g. 1,4,16,64,256\n"
    "  --prompt P        prompt tokens per sequence (0: decode frontier only)\n"
    "  --gen G           generated tokens per sequence (0: prefill frontier only)\n"
    "  --weights W       auto (default), bf16, int8 or fp8\n"
    "  --csv FILE        also write phase,chips,batch,latency_s,cost_chip_s_per_token,layout\n"
    "  --time-limit-ms   GLPK time limit per solve (default 10000)\n"
    "  --json            {\"decode\": plan, \"prefill\": plan} (plan as in `plan --json`)\n"
    "\n"
    "Exit: 0 at least one point, 1 nothing fits anywhere, 2 bad input, 3 solver error.\n";

int cli_load_problem(const char *model_arg, const char *hw_arg, int64_t context, sp_model *m, sp_hw *hw)
{
    sp_error err;
    sp_error_init(&err);
    sp_status st = sp_model_find(model_arg, m, &err);
    if (st != SP_OK) return cli_report(st, &err);
    if ((st = sp_model_check_run(m, context, &err)) != SP_OK) return cli_report(st, &err);
    sp_error_init(&err);
    if ((st = sp_hw_find(hw_arg, hw, &err)) != SP_OK) return cli_report(st, &err);
    return CLI_EXIT_OK;
}

/* context: tokens per sequence of the request (a model field refused there is exit 2); -1 when loaded */
static int load_problem(const char *verb, const char *model_arg, const char *hw_arg, int64_t context, sp_model *m,
                        sp_hw *hw)
{
    (void)verb;
    int rc = cli_load_problem(model_arg, hw_arg, context, m, hw);
    return rc == CLI_EXIT_OK ? -1 : rc;
}

int cli_parse_double(const char *verb, const char *opt, const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!s[0] || *end || !isfinite(v) || v <= 0) {
        cli_usage(verb, "%s: expected a number > 0, got \"%s\"", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static void print_frontier(const sp_plan *p, int labels)
{
    /* a prefill frontier prices prompt tokens: cost per prompt token, prompt tokens per second */
    int pre = p->opts.latency_metric == SP_PLAN_LAT_PREFILL;
    const char *hdr[6] = {"#", "chips:batch", "latency", pre ? "chip-s/prompt token" : "chip-s/token",
                          pre ? "prompt tokens/s" : "tokens/s", "layout"};
    cli_table *t = cli_table_new(6, hdr);
    for (int i = 0; i < p->n_frontier; i++) {
        const sp_plan_point *f = &p->frontier[i];
        char n[16], lb[40], la[32], co[32], tp[32], lay[256];
        snprintf(n, sizeof n, "%d", i + 1);
        snprintf(lb, sizeof lb, "%d:%lld", f->chips, (long long)f->batch);
        cli_fmt_seconds(f->latency_s, la, sizeof la);
        snprintf(co, sizeof co, "%.4g", f->cost_s);
        double tps = f->cost.tokens_per_s;
        if (pre) tps = f->cost.prefill_s > 0 ? (double)f->batch * (double)p->workload.prompt / f->cost.prefill_s : 0;
        snprintf(tp, sizeof tp, "%.1f", tps);
        sp_layout_format(&f->layout, lay, sizeof lay);
        const char *cells[6] = {n, lb, la, co, tp, lay};
        cli_table_add(t, cells);
    }
    (void)labels;
    cli_table_print(t, stdout);
    cli_table_free(t);
}

static void print_infeasible(const sp_plan *p)
{
    char a[64];
    if (p->min_shortfall_bytes < 0)
        printf("nothing fits: no layout applies to %d chips at batch %lld\n", p->chips, (long long)p->workload.batch);
    else if (p->min_shortfall_bytes > 0)
        printf("nothing fits: the smallest memory shortfall is %s per chip%s\n",
               cli_fmt_bytes((double)p->min_shortfall_bytes, a, sizeof a),
               p->opts.offload ? " without offload (and no layout fits with it)" : "");
    else if (p->result == SP_PLAN_TIME_LIMIT)
        printf("no layout found within the solver's time limit (--time-limit-ms %d)\n", p->opts.time_limit_ms);
    else
        printf("nothing meets the bounds (layouts fit in memory but miss the latency/throughput target)\n");
    if (p->min_shortfall_bytes > 0 && !p->opts.offload)
        printf("nothing is offloaded without --offload (weights or KV cache in host memory)\n");
    if (p->opts.offload && p->offload_note[0]) printf("%s\n", p->offload_note);   /* offload not offered: why */
    /* the chip-count search prices the space alone: it never offloads (doc/planner.md) */
    if (p->min_chips_fit > 0)
        printf("fewest chips that fit%s: %d\n", p->opts.offload ? " without offload (the search does not offload)" : "",
               p->min_chips_fit);
    else if (p->min_chips_bound > p->min_chips_searched && p->min_chips_searched > 0)
        printf("no chip count up to %d fits: the weights and KV cache alone need at least %lld chips\n",
               p->min_chips_searched, (long long)p->min_chips_bound);
    else if (p->min_shortfall_bytes != 0 && p->opts.search_min_chips && p->min_chips_searched > 0)
        printf("no chip count up to %d fits%s\n", p->min_chips_searched,
               p->min_chips_searched < (p->opts.max_chips > 0 ? p->opts.max_chips : p->min_chips_searched)
                   ? " (searched until the time limit)" : "");
}

static void print_plan(const sp_plan *p, const sp_model *m, const sp_hw *hw)
{
    char b[256];
    printf("plan: %s on %d x %s, batch %lld, prompt %lld, gen %lld; objective %s (%s latency)",
           m->name, p->chips, hw->name, (long long)p->workload.batch, (long long)p->workload.prompt,
           (long long)p->workload.gen, sp_plan_objective_name(p->opts.objective),
           sp_plan_latency_name(p->opts.latency_metric));
    if (p->opts.max_latency_s > 0) printf(", latency <= %s", cli_fmt_seconds(p->opts.max_latency_s, b, sizeof b));
    if (p->opts.min_tokens_per_s > 0) printf(", >= %.4g tokens/s", p->opts.min_tokens_per_s);
    double ev = p->stats.eval_s, gl = p->stats.glpk_s;
    printf("\nstatus: %s (%d layouts priced, %d fit, %d rejected, %d not priced past their decode bound, %d left "
           "after exact reductions; %d GLPK solves; cost model %.1f ms, GLPK %.1f ms = %.1f%% of the two)\n",
           sp_plan_result_name(p->result), p->stats.candidates, p->stats.feasible, p->stats.rejected, p->stats.pruned,
           p->stats.columns,
           p->stats.solves, ev * 1e3, gl * 1e3, ev + gl > 0 ? 100 * gl / (ev + gl) : 0.0);
    if (p->opts.offload && p->offload_note[0]) printf("%s\n", p->offload_note);
    if (!p->has_chosen) {
        print_infeasible(p);
        return;
    }
    printf("\nchosen layout: %s\n\n", sp_layout_format(&p->chosen.layout, b, sizeof b));
    cli_print_cost(&p->chosen.cost, hw);
    const int off = sp_layout_offloads(&p->chosen.layout);
    if (p->n_stages > 1 || off) {
        printf("\nstages (one micro-batch through each; every stage's mesh, layouts and precision are the layout's)\n");
        static const char *const hdr[10] = {"stage", "layers", "chips", "mesh", "prefill", "decode step", "memory/chip",
                                            "streamed layers (attn/ffn)", "KV in host", "host/chip"};
        cli_table *t = cli_table_new(off ? 10 : 7, hdr);
        for (int i = 0; i < p->n_stages; i++) {
            const sp_plan_stage *x = &p->stages[i];
            char c0[16], c1[48], c2[16], c3[24], c4[24], c5[24], c6[24];
            snprintf(c0, sizeof c0, "%d", i);
            snprintf(c1, sizeof c1, "%lld-%lld%s%s", (long long)x->first_layer, (long long)(x->first_layer + x->layers - 1),
                     i == 0 ? " +embed" : "", i == p->n_stages - 1 ? " +head" : "");
            snprintf(c2, sizeof c2, "%d", x->chips);
            snprintf(c3, sizeof c3, "%dx%dx%d", x->mesh[0], x->mesh[1], x->mesh[2]);
            cli_fmt_seconds(x->prefill_s, c4, sizeof c4);
            cli_fmt_seconds(x->decode_step_s, c5, sizeof c5);
            snprintf(c6, sizeof c6, "%.2f GiB", (double)x->memory_bytes / 1073741824.0);
            char c7[48], c8[24], c9[24];
            snprintf(c7, sizeof c7, "%lld (%lld/%lld)", (long long)x->offload_layers,
                     (long long)x->offload_kind_layers[SP_WKIND_ATTN], (long long)x->offload_kind_layers[SP_WKIND_FFN]);
            snprintf(c8, sizeof c8, "%g", x->offload_kv);
            snprintf(c9, sizeof c9, "%.2f GiB", (double)x->host_bytes / 1073741824.0);
            const char *cells[10] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9};
            cli_table_add(t, cells);
        }
        cli_table_print(t, stdout);
        cli_table_free(t);
    }
    if (p->stats.split_templates > 0)
        printf("\npipeline program: %d of %d pipelines kept (the others cannot beat the best layout), %d stage blocks "
               "priced, %d rows x %d columns, %ld branch-and-bound nodes; its split %s\n", p->stats.split_kept,
               p->stats.split_templates, p->stats.split_blocks, p->stats.split_rows, p->stats.split_cols, p->stats.split_nodes,
               p->stats.split_better ? "beat every even split and joined the space" : "was no better than the space's best");
    else if (sp_model_dense_ff(m) > 0 && !p->opts.even_stages)
        printf("\npipeline program: not run: %s has dense layers between its MoE layers (moe_every %lld), so a "
               "stage's price depends on its first layer; pipelines are split evenly\n", m->name, (long long)m->moe_every);
    if (p->groups.searched) {
        const sp_plan_groups *g = &p->groups;
        printf("\nseparate groups: %d prefill and %d decode candidates over every split of %d chips, a program of %d "
               "rows x %d columns, %d pairs priced exactly, %d groups retired, %d GLPK solves%s\n", g->prefill_candidates,
               g->decode_candidates, p->chips, g->rows, g->cols, g->priced, g->retired, g->solves,
               g->proven ? "" : " (not proven best)");
        if (g->found) {
            char o1[32], o2[32];
            int thr = p->opts.objective == SP_PLAN_MAX_THROUGHPUT;
            /* the objective in its unit: seconds, chip-seconds per token, or tokens/s */
            snprintf(o1, sizeof o1, "%.6g", thr ? -g->objective : g->objective);
            snprintf(o2, sizeof o2, "%.6g", thr ? -g->shared_objective : g->shared_objective);
            printf("best pair: %lld + %lld chips, %s; objective %s against %s for the best shared layout: %s\n",
                   (long long)g->best.cost.group_chips[SP_PHASE_PREFILL],
                   (long long)g->best.cost.group_chips[SP_PHASE_DECODE], sp_layout_format(&g->best.layout, b, sizeof b),
                   o1, isinf(g->shared_objective) ? "none" : o2, g->chosen ? "chosen" : "the shared layout stays");
            if (g->chosen && (p->n_frontier || p->n_rivals))
                printf("(the frontier and the rivals below are of the shared layouts)\n");
        } else {
            printf("no pair of groups fits and meets the bounds\n");
        }
    }
    if (p->opts.offload && p->stats.offload_templates > 0)
        printf("\noffload program: %d of %d layouts kept (the others cannot beat the best layout), %d stage blocks "
               "priced, %d rows x %d columns, %ld branch-and-bound nodes; its layout %s\n", p->stats.offload_kept,
               p->stats.offload_templates, p->stats.offload_blocks, p->stats.offload_rows, p->stats.offload_cols,
               p->stats.offload_nodes, p->stats.offload_better ? "beat every layout without offload and joined the space"
                                                               : "was no better than the space's best");
    if (off)
        printf("\n(run executes offload on CPU chips, threads or MPI; the CUDA device refuses it)\n");
    if (p->n_frontier) {
        printf("\nfrontier: chip-seconds per token vs %s latency (%d points, non-dominated)\n",
               sp_plan_latency_name(p->opts.latency_metric), p->n_frontier);
        print_frontier(p, 0);
    }
    if (p->n_rivals) {
        printf("\nrivals: the best layout of each other kind, and why it lost\n");
        static const char *const hdr[3] = {"kind", "lost on", "reason"};
        cli_table *t = cli_table_new(3, hdr);
        for (int i = 0; i < p->n_rivals; i++) {
            const sp_plan_rival *r = &p->rivals[i];
            const char *loss = r->loss == SP_LOSS_MEMORY ? "memory" : r->loss == SP_LOSS_BOUND ? "bound" : "objective";
            const char *cells[3] = {sp_plan_rival_kind_name(r->kind), loss, r->reason};
            cli_table_add(t, cells);
        }
        cli_table_print(t, stdout);
        cli_table_free(t);
    }
}

static int plan_run(const char *model_arg, const char *hw_arg, long long chips, long long batch, long long prompt,
                    long long gen, int minchips, int json, const sp_ragged *rg, sp_plan_opts *oo);

int cli_cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"hw", required_argument, 0, 'w'},
        {"chips", required_argument, 0, 'n'}, {"batch", required_argument, 0, 'b'},
        {"prompt", required_argument, 0, 'p'}, {"gen", required_argument, 0, 'g'},
        {"objective", required_argument, 0, 'o'}, {"latency-metric", required_argument, 0, 'L'},
        {"max-latency-ms", required_argument, 0, 'x'}, {"min-tokens-per-s", required_argument, 0, 't'},
        {"weights", required_argument, 0, 'W'}, {"min-chips", no_argument, 0, 'c'},
        {"time-limit-ms", required_argument, 0, 'T'}, {"json", no_argument, 0, 'j'},
        {"even-stages", no_argument, 0, 'E'}, {"disaggregate", no_argument, 0, 'D'},
        {"offload", no_argument, 0, 'O'}, {"workload", required_argument, 0, 'K'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_arg = NULL, *hw_arg = NULL, *workload_arg = NULL;
    long long chips = 0, batch = 0, prompt = -1, gen = -1, tl = 0;
    int json = 0, minchips = 0, ch;
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    optind = 0;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        sp_status st = SP_OK;
        double v;
        switch (ch) {
        case 'm': model_arg = optarg; break;
        case 'w': hw_arg = optarg; break;
        case 'n': if (cli_parse_long("plan", "--chips", optarg, 1, 1 << 20, &chips)) return CLI_EXIT_USAGE; break;
        case 'b': if (cli_parse_long("plan", "--batch", optarg, 1, 1 << 24, &batch)) return CLI_EXIT_USAGE; break;
        case 'p': if (cli_parse_long("plan", "--prompt", optarg, 0, 1 << 24, &prompt)) return CLI_EXIT_USAGE; break;
        case 'g': if (cli_parse_long("plan", "--gen", optarg, 0, 1 << 24, &gen)) return CLI_EXIT_USAGE; break;
        case 'T': if (cli_parse_long("plan", "--time-limit-ms", optarg, 1, 1 << 30, &tl)) return CLI_EXIT_USAGE;
            o.time_limit_ms = (int)tl;
            break;
        case 'o': st = sp_plan_objective_parse(optarg, &o.objective); break;
        case 'L': st = sp_plan_latency_parse(optarg, &o.latency_metric); break;
        case 'W': st = sp_plan_weights_parse(optarg, &o.weights); break;
        case 'x': if (cli_parse_double("plan", "--max-latency-ms", optarg, &v)) return CLI_EXIT_USAGE;
            o.max_latency_s = v * 1e-3;
            break;
        case 't': if (cli_parse_double("plan", "--min-tokens-per-s", optarg, &v)) return CLI_EXIT_USAGE;
            o.min_tokens_per_s = v;
            break;
        case 'c': minchips = 1; break;
        case 'E': o.even_stages = 1; break;
        case 'D': o.disaggregate = 1; break;
        case 'O': o.offload = 1; break;
        case 'K': workload_arg = optarg; break;
        case 'j': json = 1; break;
        case 'h': fputs(plan_usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage("plan", "unknown option '%s'", argv[optind - 1]);
        }
        if (st != SP_OK) return cli_usage("plan", "%s", sp_last_error());
    }
    if (optind < argc) return cli_usage("plan", "unexpected argument '%s'", argv[optind]);
    sp_ragged r;
    memset(&r, 0, sizeof r);
    if (workload_arg) {
        if (batch || prompt >= 0 || gen >= 0)
            return cli_usage("plan", "--workload replaces --batch, --prompt and --gen");
        int wrc = cli_load_workload(workload_arg, &r);
        if (wrc != CLI_EXIT_OK) return wrc;
        sp_workload pw = sp_workload_padded(&r);   /* the padded batch: the model's context, the plan's w */
        batch = pw.batch;
        prompt = pw.prompt;
        gen = pw.gen;
        o.workload = &r;
    }
    int rc = plan_run(model_arg, hw_arg, chips, batch, prompt, gen, minchips, json, workload_arg ? &r : NULL, &o);
    sp_ragged_free(&r);
    return rc;
}

/* plan, the request read: the padded batch of a workload file (r, o->workload) or --batch/--prompt/--gen */
static int plan_run(const char *model_arg, const char *hw_arg, long long chips, long long batch, long long prompt,
                    long long gen, int minchips, int json, const sp_ragged *rg, sp_plan_opts *oo)
{
    sp_plan_opts o = *oo;
    if (!model_arg || !hw_arg || (!chips && !minchips) || !batch || prompt < 0 || gen < 0)
        return cli_usage("plan", "--model, --hw, --chips, --batch, --prompt and --gen are required");
    if (prompt == 0 && gen == 0) return cli_usage("plan", "--prompt and --gen cannot both be 0");
    if (o.latency_metric == SP_PLAN_LAT_DECODE && gen == 0)
        return cli_usage("plan", "--latency-metric decode needs --gen > 0");
    if (o.latency_metric == SP_PLAN_LAT_PREFILL && prompt == 0)
        return cli_usage("plan", "--latency-metric prefill needs --prompt > 0");
    sp_model m;
    sp_hw hw;
    int rc = load_problem("plan", model_arg, hw_arg, prompt + gen, &m, &hw);
    if (rc >= 0) return rc;
    if (o.weights == SP_PLAN_W_FP8 && hw.peak_flops[SP_DT_FP8] <= 0)
        return cli_usage("plan", "--weights fp8: %s has no fp8 peak", hw.name);
    sp_workload w = {batch, prompt, gen};
    sp_plan *p = NULL;
    sp_status st;
    if (minchips) {
        int n = 0;
        if (chips) o.max_chips = (int)chips;
        o.rivals = 1;
        st = sp_plan_min_chips(&m, &hw, &w, &o, &n, &p);
        if (st == SP_EINFEASIBLE) {
            if (json) {
                json_t *j = json_pack("{s:s,s:s}", "status", "infeasible", "message", sp_last_error());
                cli_print_json(j, stdout);
                json_decref(j);
            } else printf("min chips: %s\n", sp_last_error());
            return CLI_EXIT_INFEASIBLE;
        }
        if (st != SP_OK) return cli_report(st, NULL);
        if (!json) printf("min chips: %d\n\n", n);
    } else {
        st = sp_plan_solve(&m, &hw, (int)chips, &w, &o, &p);
        if (st != SP_OK) return cli_report(st, NULL);
    }
    if (json) {
        json_t *j = sp_plan_to_json(p);
        if (minchips) json_object_set_new(j, "min_chips", json_integer(p->chips));
        if (rg) json_object_set_new(j, "ragged_workload", cli_workload_json(rg));
        cli_print_json(j, stdout);
        json_decref(j);
    } else {
        if (rg)
            printf("workload: %lld sequences, %lld prompt tokens (longest %lld), %lld generated (longest %lld): every "
                   "layout priced by its actual tokens\n\n", (long long)rg->n, (long long)rg->sum_prompt,
                   (long long)rg->max_prompt, (long long)rg->sum_gen, (long long)rg->max_gen);
        print_plan(p, &m, &hw);
    }
    rc = p->has_chosen ? CLI_EXIT_OK : CLI_EXIT_INFEASIBLE;
    if (p->result == SP_PLAN_TIME_LIMIT)
        cli_errorf("GLPK hit its time limit (%d ms) before finding a layout; raise --time-limit-ms", p->opts.time_limit_ms);
    sp_plan_free(p);
    return rc;
}

/* Comma list of positive integers. */
static int parse_list(const char *opt, const char *s, long long *out, int cap, int *n)
{
    *n = 0;
    const char *q = s;
    while (*q) {
        char *end;
        long long v = strtoll(q, &end, 10);
        if (end == q || v < 1 || v > (1 << 24) || (*end && *end != ',') || *n >= cap) {
            cli_usage("frontier", "%s: expected a comma-separated list of positive integers (at most %d), got \"%s\"",
                      opt, cap, s);
            return -1;
        }
        out[(*n)++] = v;
        q = *end ? end + 1 : end;
    }
    if (!*n) {
        cli_usage("frontier", "%s: empty list", opt);
        return -1;
    }
    return 0;
}

int cli_cmd_frontier(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"hw", required_argument, 0, 'w'},
        {"chips", required_argument, 0, 'n'}, {"batch", required_argument, 0, 'b'},
        {"prompt", required_argument, 0, 'p'}, {"gen", required_argument, 0, 'g'},
        {"weights", required_argument, 0, 'W'}, {"csv", required_argument, 0, 'C'},
        {"time-limit-ms", required_argument, 0, 'T'}, {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_arg = NULL, *hw_arg = NULL, *csv = NULL, *chips_arg = NULL, *batch_arg = NULL;
    long long prompt = -1, gen = -1, tl = 0;
    int json = 0, ch;
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.rivals = 0;
    o.search_min_chips = 0;
    o.cost_metric = SP_PLAN_COST_PHASE;
    optind = 0;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'm': model_arg = optarg; break;
        case 'w': hw_arg = optarg; break;
        case 'n': chips_arg = optarg; break;
        case 'b': batch_arg = optarg; break;
        case 'p': if (cli_parse_long("frontier", "--prompt", optarg, 0, 1 << 24, &prompt)) return CLI_EXIT_USAGE; break;
        case 'g': if (cli_parse_long("frontier", "--gen", optarg, 0, 1 << 24, &gen)) return CLI_EXIT_USAGE; break;
        case 'T': if (cli_parse_long("frontier", "--time-limit-ms", optarg, 1, 1 << 30, &tl)) return CLI_EXIT_USAGE;
            o.time_limit_ms = (int)tl;
            break;
        case 'W':
            if (sp_plan_weights_parse(optarg, &o.weights) != SP_OK) return cli_usage("frontier", "%s", sp_last_error());
            break;
        case 'C': csv = optarg; break;
        case 'j': json = 1; break;
        case 'h': fputs(frontier_usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage("frontier", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage("frontier", "unexpected argument '%s'", argv[optind]);
    if (!model_arg || !hw_arg || !chips_arg || !batch_arg || prompt < 0 || gen < 0)
        return cli_usage("frontier", "--model, --hw, --chips, --batch, --prompt and --gen are required");
    if (prompt == 0 && gen == 0) return cli_usage("frontier", "--prompt and --gen cannot both be 0");
    long long cl[64], bl[64];
    int nc, nb;
    if (parse_list("--chips", chips_arg, cl, 64, &nc) || parse_list("--batch", batch_arg, bl, 64, &nb))
        return CLI_EXIT_USAGE;
    if (nc * nb > 128) return cli_usage("frontier", "at most 128 chips:batch pairs (got %d)", nc * nb);
    int chips[64];
    int64_t batches[64];
    for (int i = 0; i < nc; i++) chips[i] = (int)cl[i];
    for (int i = 0; i < nb; i++) batches[i] = bl[i];
    sp_model m;
    sp_hw hw;
    int rc = load_problem("frontier", model_arg, hw_arg, prompt + gen, &m, &hw);
    if (rc >= 0) return rc;
    if (o.weights == SP_PLAN_W_FP8 && hw.peak_flops[SP_DT_FP8] <= 0)
        return cli_usage("frontier", "--weights fp8: %s has no fp8 peak", hw.name);
    sp_workload w = {1, prompt, gen};
    FILE *cf = NULL;
    if (csv) {
        if (!(cf = fopen(csv, "w"))) {
            cli_errorf("cannot write %s", csv);
            return CLI_EXIT_USAGE;
        }
        fprintf(cf, "phase,chips,batch,latency_s,cost_chip_s_per_token,layout\n");
    }
    json_t *root = json ? json_object() : NULL;
    int points = 0;
    /* both phases from one pricing of every layout */
    sp_plan_latency phases[2];
    sp_plan *plans[2] = {NULL, NULL};
    int nph = 0;
    if (gen > 0) phases[nph++] = SP_PLAN_LAT_DECODE;
    if (prompt > 0) phases[nph++] = SP_PLAN_LAT_PREFILL;
    sp_status st = sp_plan_frontiers(&m, &hw, chips, nc, batches, nb, &w, &o, phases, nph, plans);
    if (st != SP_OK) {
        if (cf) fclose(cf);
        json_decref(root);
        return cli_report(st, NULL);
    }
    for (int k = 0; k < nph; k++) {
        sp_plan *p = plans[k];
        const char *ph = sp_plan_latency_name(phases[k]);
        points += p->n_frontier;
        if (cf)
            for (int i = 0; i < p->n_frontier; i++) {
                char lay[256];
                const sp_plan_point *f = &p->frontier[i];
                fprintf(cf, "%s,%d,%lld,%.9g,%.9g,%s\n", ph, f->chips, (long long)f->batch, f->latency_s, f->cost_s,
                        sp_layout_format(&f->layout, lay, sizeof lay));
            }
        if (root) json_object_set_new(root, ph, (json_t *)sp_plan_to_json(p));
        else {
            double g = p->stats.glpk_s, e = k == 0 ? p->stats.eval_s : 0.0;
            printf("%s frontier: %s on %s, prompt %lld, gen %lld: %s latency vs chip-seconds per %s token\n"
                   "(%d points; %d layouts priced over %d chips:batch pairs%s, %d left after exact reductions; "
                   "cost model %.0f ms, GLPK %.1f ms in %d solves, %.1f%% of the two)\n",
                   ph, m.name, hw.name, prompt, gen, ph, phases[k] == SP_PLAN_LAT_DECODE ? "generated" : "prompt",
                   p->n_frontier, p->stats.candidates, nc * nb, k ? " (shared with the frontier above)" : "",
                   p->stats.columns, e * 1e3, g * 1e3, p->stats.solves, e + g > 0 ? 100 * g / (e + g) : 0.0);
            if (p->n_frontier) print_frontier(p, 1);
            else printf("nothing fits at any chips:batch pair\n");
            printf("\n");
        }
        sp_plan_free(p);
    }
    if (cf) fclose(cf);
    if (root) {
        cli_print_json(root, stdout);
        json_decref(root);
    }
    return points ? CLI_EXIT_OK : CLI_EXIT_INFEASIBLE;
}
