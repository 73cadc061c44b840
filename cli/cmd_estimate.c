/* cmd_estimate.c: `shardplan estimate`: price one given layout. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "cli.h"
#include "spi_common.h"
#include "costmodel/sp_cost.h"
#include "sp_hw.h"
#include "sp_layout.h"
#include "sp_model.h"

static const char usage[] =
    "usage: shardplan estimate --model M --hw H --chips N --batch B --prompt P --gen G --layout L [--json]\n"
    "       shardplan estimate --model M --hw H --chips N --workload FILE --layout L [--json]\n"
    "       shardplan estimate --model M --hw H --chips N --batch B --layout L --max-context --kv-budget F [--json]\n"
    "\n"
    "Prices one layout with the cost model: prefill time, decode time per step (at\n"
    "the last context), total latency, tokens/s, MFU, chip-seconds per generated\n"
    "token, the time breakdown (compute, memory, each collective kind) and memory per\n"
    "chip.\n"
    "\n"
    "  --model M       bundled model name or a model JSON / HF config.json file\n"
    "  --hw H          bundled hardware name or a hardware JSON file\n"
    "  --chips N       chips in the job (must equal stages*replicas*X*Y*Z)\n"
    "  --batch B       sequences\n"
    "  --prompt P      prompt tokens per sequence (default 0: decode only)\n"
    "  --gen G         generated tokens per sequence (default 0: prefill only), priced\n"
    "                  as G decode steps after the prefill (the convention the bundled\n"
    "                  profiles were fitted under; `run --gen G` takes the\n"
    "                  first token from the prefill pass and runs G - 1 decode steps)\n"
    "  --workload FILE a ragged batch instead of --batch/--prompt/--gen: each sequence's\n"
    "                  own prompt and gen (CSV \"prompt,gen\" lines or JSON, doc/formats.md),\n"
    "                  priced by its actual tokens (no padding) and beside the same batch\n"
    "                  padded to its longest prompt and gen (JSON: \"padded\")\n"
    "  --layout L      text form (stages=1,replicas=1,mesh=4x4x4,weights=int8,\n"
    "                  prefill=ws2d/heads,decode=ws2d/batch), JSON text, or a JSON file\n"
    "                  (a plan's chosen layout is accepted as is)\n"
    "  --max-context   instead answer the longest context per sequence whose KV cache\n"
    "                  fits in fraction F (--kv-budget, default 0.3) of each chip's HBM\n"
    "  --kv-budget F   fraction of HBM for the KV cache (with --max-context)\n"
    "  --json          machine-readable output\n"
    "\n"
    "Exit: 0 priced (even if it does not fit: see \"feasible\"), 2 bad input or a layout\n"
    "that does not apply to the model, chips or batch.\n";

/* A layout argument: an existing file holds JSON; anything else is text or JSON text. */
int cli_load_layout(const char *arg, sp_layout *out, sp_error *err)
{
    struct stat st;
    if (stat(arg, &st) == 0 && S_ISREG(st.st_mode)) return sp_layout_load_file(arg, out, err);
    /* layout text has key=value pairs, JSON text starts with '{': anything else meant a file */
    const char *p = arg;
    while (*p == ' ') p++;
    if (*p != '{' && !strchr(arg, '='))
        return spi_error_set(err, SP_EIO, arg, 0, 0, "",
                             "no such layout file (a layout is a file, key=value text such as mesh=2x2x1, or JSON)");
    return sp_layout_parse(arg, out, err);
}

int cli_load_job(const char *model_arg, const char *hw_arg, const char *layout_arg, int chips, int64_t batch,
                 int64_t context, sp_model *m, sp_hw *hw, sp_layout *l)
{
    int rc = cli_load_problem(model_arg, hw_arg, context, m, hw);
    if (rc != CLI_EXIT_OK) return rc;
    sp_error err;
    sp_error_init(&err);
    sp_status st;
    if ((st = cli_load_layout(layout_arg, l, &err)) != SP_OK) return cli_report(st, &err);
    sp_error_init(&err);
    if ((st = sp_layout_check(l, m, hw, chips, batch, &err)) != SP_OK) return cli_report(st, &err);
    return CLI_EXIT_OK;
}

static void row(cli_table *t, const char *k, const char *v)
{
    const char *cells[2] = {k, v};
    cli_table_add(t, cells);
}

void cli_print_cost(const sp_cost *c, const sp_hw *hw)
{
    char a[64], b[64];
    if (c->shortfall_bytes > 0)
        printf("DOES NOT FIT: %s over the %s usable per chip\n", cli_fmt_bytes((double)c->shortfall_bytes, a, sizeof a),
               cli_fmt_bytes((double)c->capacity, b, sizeof b));
    if (c->host_shortfall_bytes > 0)
        printf("DOES NOT FIT: %s over the %s of host memory per chip\n",
               cli_fmt_bytes((double)c->host_shortfall_bytes, a, sizeof a), cli_fmt_bytes((double)c->host_capacity, b, sizeof b));
    static const char *const hdr[2] = {"metric", "value"};
    cli_table *t = cli_table_new(2, hdr);
    cli_table_left(t, 1);
    row(t, "prefill", cli_fmt_seconds(c->prefill_s, a, sizeof a));
    row(t, "decode step (last context)", cli_fmt_seconds(c->decode_step_s, a, sizeof a));
    row(t, "decode (all tokens)", cli_fmt_seconds(c->decode_s, a, sizeof a));
    if (c->disaggregated) {
        /* separate groups: one batch's latency, and the rate when prefill of the next batch
         * runs beside the decode of this one (sp_cost.h) */
        snprintf(b, sizeof b, "%s", cli_fmt_bytes((double)c->kv_transfer_bytes, a, sizeof a));
        char t2[96];
        snprintf(t2, sizeof t2, "%s (%s)", cli_fmt_seconds(c->kv_transfer_s, a, sizeof a), b);
        row(t, "KV transfer (prefill -> decode group)", t2);
        row(t, "latency of one batch", cli_fmt_seconds(c->total_s, a, sizeof a));
        row(t, "steady state: a batch every", cli_fmt_seconds(c->period_s, a, sizeof a));
        snprintf(a, sizeof a, "%.1f", c->tokens_per_s);
        row(t, "tokens/s (steady state)", a);
    } else {
        row(t, "total", cli_fmt_seconds(c->total_s, a, sizeof a));
        snprintf(a, sizeof a, "%.1f", c->tokens_per_s);
        row(t, "tokens/s", a);
    }
    snprintf(a, sizeof a, "%.1f %% (prefill %.1f %%, decode %.1f %%)", 100 * c->mfu, 100 * c->mfu_prefill, 100 * c->mfu_decode);
    row(t, "MFU", a);
    snprintf(a, sizeof a, "%.4g", c->cost_chip_s_per_token);
    row(t, "chip-seconds per token", a);
    row(t, "comm per chip, prefill", cli_fmt_bytes((double)c->comm_bytes_prefill, a, sizeof a));
    row(t, "comm per chip, decode step", cli_fmt_bytes((double)c->comm_bytes_decode_step, a, sizeof a));
    if (c->torus.slice[0] > 0) {
        /* the rented slice, and each axis's chips along its physical dimensions (folded: AxB) */
        static const char letters[SP_AXIS_COUNT] = {'s', 'r', 'x', 'y', 'z'};
        char sl[160], ax[128] = "";
        size_t n = 0;
        for (int i = 0; i < SP_AXIS_COUNT && n < sizeof ax; i++) {
            const int *f = c->torus.factor[i];
            if (f[0] * f[1] * f[2] <= 1) continue;
            char dims[32] = "";
            size_t k = 0;
            for (int d = 0; d < 3 && k < sizeof dims; d++)
                if (f[d] > 1) k += (size_t)snprintf(dims + k, sizeof dims - k, "%s%d", k ? "x" : "", f[d]);
            n += (size_t)snprintf(ax + n, sizeof ax - n, "%s%c %s", n ? ", " : "", letters[i], dims);
        }
        snprintf(sl, sizeof sl, "%dx%dx%d%s%s%s", c->torus.slice[0], c->torus.slice[1], c->torus.slice[2],
                 n ? " (" : "", ax, n ? ")" : "");
        row(t, "torus slice", sl);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);

    printf("\ntime breakdown (one micro-batch through every stage; %s)\n",
           hw->overlap == SP_OVERLAP_NONE ? "no overlap"
           : hw->overlap == SP_OVERLAP_FULL ? "marked collectives overlap compute" : "marked collectives partly overlap");
    static const char *const h2[3] = {"term", "prefill", "decode step"};
    t = cli_table_new(3, h2);
    const sp_phase_cost *p[2] = {&c->prefill, &c->decode};
    const char *names[6] = {"time (schedule)", "compute", "memory", "roofline (max per step)", "dispatch",
                            "communication"};
    for (int r = 0; r < 6 + SP_COLL_COUNT; r++) {
        char v[2][32];
        for (int i = 0; i < 2; i++) {
            double x = r == 0 ? p[i]->time_s : r == 1 ? p[i]->compute_s : r == 2 ? p[i]->memory_s
                     : r == 3 ? p[i]->roofline_s : r == 4 ? p[i]->dispatch_s : r == 5 ? p[i]->comm_s
                     : p[i]->coll_s[r - 6];
            cli_fmt_seconds(x, v[i], sizeof v[i]);
        }
        char nm[40];
        snprintf(nm, sizeof nm, "%s%s", r >= 6 ? "  " : "", r >= 6 ? sp_coll_kind_name((sp_coll_kind)(r - 6)) : names[r]);
        const char *cells[3] = {nm, v[0], v[1]};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);

    if (c->disaggregated) {
        printf("\nmemory per chip (worst stage of each group)\n");
        static const char *const hg[3] = {"part", "prefill group", "decode group"};
        t = cli_table_new(3, hg);
        const sp_mem_sizes *g = c->group_mem;
        const char *parts[6] = {"weights", "gathered weights", "KV cache", "activations", "workspace", "total"};
        for (int r = 0; r < 6; r++) {
            int64_t v[2];
            for (int gi = 0; gi < 2; gi++)
                v[gi] = r == 0 ? g[gi].weights : r == 1 ? g[gi].gathered_weights : r == 2 ? g[gi].kv
                     : r == 3 ? g[gi].activations : r == 4 ? g[gi].workspace : g[gi].total;
            const char *cells[3] = {parts[r], cli_fmt_bytes((double)v[0], a, sizeof a), cli_fmt_bytes((double)v[1], b, sizeof b)};
            cli_table_add(t, cells);
        }
        snprintf(a, sizeof a, "%lld", (long long)c->group_chips[0]);
        snprintf(b, sizeof b, "%lld", (long long)c->group_chips[1]);
        const char *cc[3] = {"chips", a, b};
        cli_table_add(t, cc);
        cli_fmt_bytes((double)c->capacity, a, sizeof a);
        const char *cap[3] = {"capacity (usable)", a, a};
        cli_table_add(t, cap);
        cli_table_print(t, stdout);
        cli_table_free(t);
        return;
    }
    printf("\nmemory per chip (worst stage)\n");
    static const char *const h3[2] = {"part", "bytes"};
    t = cli_table_new(2, h3);
    row(t, "weights", cli_fmt_bytes((double)c->mem.weights, a, sizeof a));
    row(t, "gathered weights", cli_fmt_bytes((double)c->mem.gathered_weights, a, sizeof a));
    row(t, "KV cache", cli_fmt_bytes((double)c->mem.kv, a, sizeof a));
    row(t, "activations", cli_fmt_bytes((double)c->mem.activations, a, sizeof a));
    row(t, "workspace", cli_fmt_bytes((double)c->mem.workspace, a, sizeof a));
    row(t, "total", cli_fmt_bytes((double)c->mem.total, a, sizeof a));
    row(t, "capacity (usable)", cli_fmt_bytes((double)c->capacity, a, sizeof a));
    cli_table_print(t, stdout);
    cli_table_free(t);
    if (c->host_peak > 0 || c->prefill.host_bytes > 0 || c->decode.host_bytes > 0) {
        printf("\noffload (host memory per chip, worst stage; host link %s)\n", cli_fmt_rate(hw->host_link_bw, a, sizeof a));
        t = cli_table_new(2, h3);
        row(t, "weights in host memory", cli_fmt_bytes((double)c->mem.host_weights, a, sizeof a));
        row(t, "KV cache in host memory", cli_fmt_bytes((double)c->mem.host_kv, a, sizeof a));
        row(t, "host memory (most of any stage)", cli_fmt_bytes((double)c->host_peak, a, sizeof a));
        row(t, "host capacity", cli_fmt_bytes((double)c->host_capacity, a, sizeof a));
        row(t, "device staging", cli_fmt_bytes((double)c->mem.staging, a, sizeof a));
        const sp_phase_cost *ph[2] = {&c->prefill, &c->decode};
        const char *nm[2] = {"prefill", "decode step"};
        for (int i = 0; i < 2; i++) {
            char k[64], v[96];
            snprintf(k, sizeof k, "host link, %s", nm[i]);
            snprintf(v, sizeof v, "%s in %s%s", cli_fmt_bytes((double)ph[i]->host_bytes, a, sizeof a),
                     cli_fmt_seconds(ph[i]->host_s, b, sizeof b),
                     sp_cost_host_bound(ph[i]) ? ": the host link bounds the step" : "");
            row(t, k, v);
        }
        cli_table_print(t, stdout);
        cli_table_free(t);
    }
}

/* estimate --workload: the ragged batch by its actual tokens, and padded */
static int estimate_ragged(const char *model_arg, const char *hw_arg, const char *layout_arg, int chips,
                           const char *workload_arg, int json)
{
    sp_ragged r;
    int rc = cli_load_workload(workload_arg, &r);
    if (rc != CLI_EXIT_OK) return rc;
    sp_model m;
    sp_hw hw;
    sp_layout l;
    sp_workload pw = sp_workload_padded(&r);
    /* the padded batch's context bounds the model check: the ragged one's is within it */
    rc = cli_load_job(model_arg, hw_arg, layout_arg, chips, r.n, pw.prompt + pw.gen, &m, &hw, &l);
    sp_cost c, pc;
    sp_status st = SP_OK, pst = SP_OK;
    char why[400] = "";
    if (rc == CLI_EXIT_OK && (st = sp_cost_eval_ragged(&m, &hw, &l, &r, NULL, &c)) != SP_OK) rc = cli_report(st, NULL);
    if (rc == CLI_EXIT_OK && (pst = sp_cost_eval(&m, &hw, &l, &pw, NULL, &pc)) != SP_OK)
        snprintf(why, sizeof why, "%s", sp_last_error());
    if (rc == CLI_EXIT_OK && json) {
        json_t *o = sp_cost_to_json(&c, &l);
        json_object_set_new(o, "workload", cli_workload_json(&r));
        json_t *pj = pst ? json_pack("{s:s}", "error", why) : (json_t *)sp_cost_to_json(&pc, &l);
        json_object_set_new(pj, "workload", json_pack("{s:I,s:I,s:I}", "batch", (json_int_t)pw.batch, "prompt",
                                                      (json_int_t)pw.prompt, "gen", (json_int_t)pw.gen));
        json_object_set_new(o, "padded", pj);
        cli_print_json(o, stdout);
        json_decref(o);
    } else if (rc == CLI_EXIT_OK) {
        char text[512], a[64], b[64];
        printf("layout   %s\n", sp_layout_format(&l, text, sizeof text));
        printf("workload %s: %lld sequences, %lld prompt tokens (longest %lld), %lld generated (longest %lld), "
               "no padding\n", workload_arg, (long long)r.n, (long long)r.sum_prompt, (long long)r.max_prompt,
               (long long)r.sum_gen, (long long)r.max_gen);
        cli_print_cost(&c, &hw);
        printf("\nragged vs padded (the same %lld sequences padded to prompt %lld, gen %lld)\n", (long long)pw.batch,
               (long long)pw.prompt, (long long)pw.gen);
        if (pst) {
            printf("padded: not priced: %s\n", why);
        } else {
            static const char *const hdr[3] = {"metric", "ragged", "padded"};
            cli_table *t = cli_table_new(3, hdr);
            const char *nm[4] = {"prefill", "decode (all tokens)", "total", "KV cache per chip"};
            double v[2][4] = {{c.prefill_s, c.decode_s, c.total_s, (double)c.mem.kv},
                              {pc.prefill_s, pc.decode_s, pc.total_s, (double)pc.mem.kv}};
            for (int i = 0; i < 4; i++) {
                if (i < 3) {
                    cli_fmt_seconds(v[0][i], a, sizeof a);
                    cli_fmt_seconds(v[1][i], b, sizeof b);
                } else {
                    cli_fmt_bytes(v[0][i], a, sizeof a);
                    cli_fmt_bytes(v[1][i], b, sizeof b);
                }
                const char *cells[3] = {nm[i], a, b};
                cli_table_add(t, cells);
            }
            /* the padded batch's useful tokens are the ragged batch's: per useful generated token */
            snprintf(a, sizeof a, "%.4g", c.cost_chip_s_per_token);
            snprintf(b, sizeof b, "%.4g", pc.chips * pc.total_s / (double)r.sum_gen);
            const char *cc[3] = {"chip-seconds per generated token (actual tokens)", a, b};
            cli_table_add(t, cc);
            cli_table_print(t, stdout);
            cli_table_free(t);
        }
    }
    sp_ragged_free(&r);
    return rc;
}

/* Stages of their own mesh (stage_mesh): each stage's chips, mesh, layers,
 * one micro-batch's prefill, a decode step at the last context and memory
 * per chip, as sp_cost_stage_eval prices them; printed, or appended to arr
 * (estimate --json's stages[]) when arr is not NULL. */
static sp_status stage_rows(const sp_model *m, const sp_hw *hw, const sp_layout *l, const sp_workload *w, json_t *arr)
{
    if (!arr) printf("\nstages (each on its own mesh)\n  stage  chips  mesh     layers  prefill/mb  decode step  memory/chip\n");
    for (int s = 0; s < l->stages; s++) {
        sp_stage_cost sc;
        SP_CHECK(sp_cost_stage_eval(m, hw, l, w, NULL, s, &sc));
        int d[3];
        sp_layout_stage_mesh(l, s, d);
        long long chips = (long long)sp_layout_stage_chips(l, s);
        if (arr) {
            json_array_append_new(arr, json_pack("{s:i, s:I, s:[i,i,i], s:I, s:I, s:f, s:f, s:I}", "stage", s, "chips",
                                                 (json_int_t)chips, "mesh", d[0], d[1], d[2], "first_layer",
                                                 (json_int_t)sc.first_layer, "layers", (json_int_t)sc.layers,
                                                 "prefill_s", (double)sc.prefill_ps * 1e-12, "decode_step_s",
                                                 (double)sc.decode_ps * 1e-12, "memory_per_chip",
                                                 (json_int_t)sc.mem.total));
            continue;
        }
        char mesh[40], a[32], b[32], c[32];
        snprintf(mesh, sizeof mesh, "%dx%dx%d", d[0], d[1], d[2]);
        printf("  %5d  %5lld  %-8s %6lld  %10s  %11s  %11s\n", s, chips, mesh, (long long)sc.layers,
               cli_fmt_seconds((double)sc.prefill_ps * 1e-12, a, sizeof a),
               cli_fmt_seconds((double)sc.decode_ps * 1e-12, b, sizeof b), cli_fmt_bytes((double)sc.mem.total, c, sizeof c));
    }
    return SP_OK;
}

int cli_cmd_estimate(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"hw", required_argument, 0, 'w'},
        {"chips", required_argument, 0, 'n'}, {"batch", required_argument, 0, 'b'},
        {"prompt", required_argument, 0, 'p'}, {"gen", required_argument, 0, 'g'},
        {"layout", required_argument, 0, 'l'}, {"json", no_argument, 0, 'j'},
        {"max-context", no_argument, 0, 'c'}, {"kv-budget", required_argument, 0, 'k'},
        {"workload", required_argument, 0, 'W'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_arg = NULL, *hw_arg = NULL, *layout_arg = NULL, *budget_arg = NULL, *workload_arg = NULL;
    long long chips = 0, batch = 0, prompt = 0, gen = 0;
    int json = 0, maxctx = 0, ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'm': model_arg = optarg; break;
        case 'w': hw_arg = optarg; break;
        case 'n': if (cli_parse_long("estimate", "--chips", optarg, 1, 1 << 20, &chips)) return CLI_EXIT_USAGE; break;
        case 'b': if (cli_parse_long("estimate", "--batch", optarg, 1, 1 << 24, &batch)) return CLI_EXIT_USAGE; break;
        case 'p': if (cli_parse_long("estimate", "--prompt", optarg, 0, 1 << 24, &prompt)) return CLI_EXIT_USAGE; break;
        case 'g': if (cli_parse_long("estimate", "--gen", optarg, 0, 1 << 24, &gen)) return CLI_EXIT_USAGE; break;
        case 'l': layout_arg = optarg; break;
        case 'j': json = 1; break;
        case 'c': maxctx = 1; break;
        case 'k': budget_arg = optarg; break;
        case 'W': workload_arg = optarg; break;
        case 'h': fputs(usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage("estimate", "unknown option");
        }
    }
    if (optind < argc) return cli_usage("estimate", "unexpected argument '%s'", argv[optind]);
    if (workload_arg) {
        if (batch || prompt || gen || maxctx)
            return cli_usage("estimate", "--workload replaces --batch, --prompt, --gen and --max-context");
        if (!model_arg || !hw_arg || !chips || !layout_arg)
            return cli_usage("estimate", "--model, --hw, --chips, --workload and --layout are required");
        return estimate_ragged(model_arg, hw_arg, layout_arg, (int)chips, workload_arg, json);
    }
    if (!model_arg || !hw_arg || !chips || !batch || !layout_arg)
        return cli_usage("estimate", "--model, --hw, --chips, --batch and --layout are required");
    if (!maxctx && prompt == 0 && gen == 0) return cli_usage("estimate", "give --prompt and/or --gen (tokens)");
    if (budget_arg && !maxctx) return cli_usage("estimate", "--kv-budget goes with --max-context");
    double budget = 0.3;
    if (budget_arg) {
        char *end;
        budget = strtod(budget_arg, &end);
        if (*end || !(budget > 0 && budget <= 1)) return cli_usage("estimate", "--kv-budget must be a fraction in (0, 1]");
    }

    sp_model m;
    sp_hw hw;
    sp_layout l;
    sp_status st;
    /* --max-context searches up to the model's own limit */
    int rc = cli_load_job(model_arg, hw_arg, layout_arg, (int)chips, batch, maxctx ? 0 : prompt + gen, &m, &hw, &l);
    if (rc != CLI_EXIT_OK) return rc;

    if (maxctx) {
        int64_t ctx = 0;
        if ((st = sp_cost_max_context(&m, &hw, &l, batch, budget, &ctx)) != SP_OK) return cli_report(st, NULL);
        if (json) {
            json_t *o = json_pack("{s:o,s:I,s:f,s:I}", "layout", (json_t *)sp_layout_to_json(&l), "batch",
                                  (json_int_t)batch, "kv_budget", budget, "max_context", (json_int_t)ctx);
            cli_print_json(o, stdout);
            json_decref(o);
        } else {
            printf("max context: %lld tokens per sequence (batch %lld, KV cache in %.0f %% of HBM)\n", (long long)ctx,
                   batch, budget * 100);
        }
        return CLI_EXIT_OK;
    }
    sp_workload w = {batch, prompt, gen};
    sp_cost c;
    if ((st = sp_cost_eval(&m, &hw, &l, &w, NULL, &c)) != SP_OK) return cli_report(st, NULL);
    if (json) {
        json_t *o = sp_cost_to_json(&c, &l);
        if (sp_layout_hetero(&l)) {
            json_t *a = json_array();
            json_object_set_new(o, "stages", a);
            if ((st = stage_rows(&m, &hw, &l, &w, a)) != SP_OK) {
                json_decref(o);
                return cli_report(st, NULL);
            }
        }
        cli_print_json(o, stdout);
        json_decref(o);
    } else {
        char text[1024];
        printf("layout   %s\n", sp_layout_format(&l, text, sizeof text));
        cli_print_cost(&c, &hw);
        if (sp_layout_hetero(&l) && (st = stage_rows(&m, &hw, &l, &w, NULL)) != SP_OK) return cli_report(st, NULL);
    }
    return CLI_EXIT_OK;
}
