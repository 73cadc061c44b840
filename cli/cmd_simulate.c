/* cmd_simulate.c: `shardplan simulate`: one layout's programs on every chip's timeline. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "costmodel/sp_cost.h"
#include "costmodel/sp_sim.h"
#include "sp_trace.h"

static const char usage[] =
    "usage: shardplan simulate --model M --hw H --chips N --batch B --prompt P --gen G --layout L\n"
    "                          [--trace FILE] [--tokens T] [--json]\n"
    "       shardplan simulate --model M --hw H --chips N --workload FILE --layout L [--trace FILE] [--json]\n"
    "\n"
    "Schedules the layout's per-chip programs on a timeline of two streams per chip\n"
    "(compute, communication): steps start when their inputs are ready, collectives\n"
    "when every member is, marked collectives run under compute, pipeline stages pass\n"
    "micro-batches on (costmodel/sp_sim.h).  Prints the simulated prefill time and\n"
    "decode step (at the last context) beside the cost model's closed form.\n"
    "Separate prefill and decode groups (prefill.mesh=..., decode.mesh=...): the\n"
    "prefill group's chips, then the KV transfer's messages on both groups' comm\n"
    "streams, then the decode group's chips; also prints the transfer and the\n"
    "timeline's span (prefill + transfer + T decode steps) beside the closed form.\n"
    "\n"
    "  --model, --hw, --chips, --batch, --prompt, --gen, --layout   as for estimate\n"
    "  --trace FILE    write the timeline as Chrome Trace Event JSON (open it in\n"
    "                  Perfetto or chrome://tracing): one process per chip, threads\n"
    "                  compute and comm, one slice per step (name, step id, bytes, FLOPs);\n"
    "                  prefill, then the simulated decode steps\n"
    "  --tokens T      decode steps simulated (default: stages + 2), numbered as the\n"
    "                  last T of the run's G (step ids decode<t>)\n"
    "  --workload FILE a ragged batch (as for estimate): the packed prefill, then every\n"
    "                  decode step with the sequences still generating, summed, beside\n"
    "                  the closed form (sp_cost_eval_ragged); replicas each with\n"
    "                  their own sequences, the slowest replica's figures\n"
    "  --json          machine-readable output\n"
    "\n"
    "Exit: 0 simulated, 2 bad input, a layout that does not apply or a trace file that\n"
    "cannot be created, 3 a trace write failed.\n";

/* simulate --workload: every step of a ragged batch beside the closed form */
static int simulate_ragged(const char *model_arg, const char *hw_arg, const char *layout_arg, int chips,
                           const char *workload_arg, const char *trace_arg, int json)
{
    sp_ragged r;
    int rc = cli_load_workload(workload_arg, &r);
    if (rc != CLI_EXIT_OK) return rc;
    sp_model m;
    sp_hw hw;
    sp_layout l;
    sp_cost c;
    sp_sim_times t;
    sp_status st = SP_OK;
    sp_trace *tr = NULL;
    rc = cli_load_job(model_arg, hw_arg, layout_arg, chips, r.n, r.max_prompt + r.max_gen, &m, &hw, &l);
    if (!rc && (st = sp_cost_eval_ragged(&m, &hw, &l, &r, NULL, &c))) rc = cli_report(st, NULL);
    if (!rc && trace_arg && (st = sp_trace_open(trace_arg, 0, c.chips, &tr))) rc = cli_report(st, NULL);
    if (!rc) {
        sp_sim_opts o;
        sp_sim_opts_init(&o);
        o.trace = tr;
        st = sp_sim_eval_ragged(&m, &hw, &l, &r, &o, &t);
        sp_status tst = sp_trace_close(tr);
        if (st) rc = cli_report(st, NULL);
        else if (tst) {
            cli_errorf("%s: %s", trace_arg, sp_last_error());
            rc = CLI_EXIT_INTERNAL;
        }
    }
    if (!rc && json) {
        json_t *j = json_pack("{s:o,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:s?}", "layout", (json_t *)sp_layout_to_json(&l),
                              "chips", c.chips, "prefill_s", t.prefill_s, "decode_s", t.decode_s, "decode_step_s",
                              t.decode_step_s, "makespan_s", t.makespan_s, "closed_form_prefill_s", c.prefill_s,
                              "closed_form_decode_s", c.decode_s, "closed_form_decode_step_s", c.decode_step_s,
                              "events", (json_int_t)(t.prefill.events + t.decode.events), "trace", trace_arg);
        json_object_set_new(j, "workload", json_pack("{s:I,s:I,s:I}", "sequences", (json_int_t)r.n, "prompt_tokens",
                                                     (json_int_t)r.sum_prompt, "gen_tokens", (json_int_t)r.sum_gen));
        cli_print_json(j, stdout);
        json_decref(j);
    } else if (!rc) {
        char text[256], a[32], b[32];
        printf("layout   %s\n", sp_layout_format(&l, text, sizeof text));
        printf("workload %s: %lld sequences, %lld prompt tokens, %lld generated, no padding\n", workload_arg,
               (long long)r.n, (long long)r.sum_prompt, (long long)r.sum_gen);
        static const char *const hdr[3] = {"metric", "simulated", "closed form"};
        cli_table *tb = cli_table_new(3, hdr);
        cli_table_left(tb, 1);
        const char *nm[4] = {"prefill", "decode (every step)", "last decode step", "prefill + decode"};
        double v[2][4] = {{t.prefill_s, t.decode_s, t.decode_step_s, t.makespan_s},
                          {c.prefill_s, c.decode_s, c.decode_step_s, c.total_s}};
        for (int i = 0; i < 4; i++) {
            const char *cells[3] = {nm[i], cli_fmt_seconds(v[0][i], a, sizeof a), cli_fmt_seconds(v[1][i], b, sizeof b)};
            cli_table_add(tb, cells);
        }
        cli_table_print(tb, stdout);
        cli_table_free(tb);
        if (trace_arg) printf("trace: %s\n", trace_arg);
    }
    sp_ragged_free(&r);
    return rc;
}

int cli_cmd_simulate(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"hw", required_argument, 0, 'w'},
        {"chips", required_argument, 0, 'n'}, {"batch", required_argument, 0, 'b'},
        {"prompt", required_argument, 0, 'p'}, {"gen", required_argument, 0, 'g'},
        {"layout", required_argument, 0, 'l'}, {"json", no_argument, 0, 'j'},
        {"trace", required_argument, 0, 't'}, {"tokens", required_argument, 0, 'k'},
        {"workload", required_argument, 0, 'W'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_arg = NULL, *hw_arg = NULL, *layout_arg = NULL, *trace_arg = NULL, *workload_arg = NULL;
    long long chips = 0, batch = 0, prompt = 0, gen = 0, tokens = 0;
    int json = 0, ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'm': model_arg = optarg; break;
        case 'w': hw_arg = optarg; break;
        case 'n': if (cli_parse_long("simulate", "--chips", optarg, 1, 1 << 20, &chips)) return CLI_EXIT_USAGE; break;
        case 'b': if (cli_parse_long("simulate", "--batch", optarg, 1, 1 << 24, &batch)) return CLI_EXIT_USAGE; break;
        case 'p': if (cli_parse_long("simulate", "--prompt", optarg, 0, 1 << 24, &prompt)) return CLI_EXIT_USAGE; break;
        case 'g': if (cli_parse_long("simulate", "--gen", optarg, 0, 1 << 24, &gen)) return CLI_EXIT_USAGE; break;
        case 'k': if (cli_parse_long("simulate", "--tokens", optarg, 1, 1 << 16, &tokens)) return CLI_EXIT_USAGE; break;
        case 'l': layout_arg = optarg; break;
        case 't': trace_arg = optarg; break;
        case 'W': workload_arg = optarg; break;
        case 'j': json = 1; break;
        case 'h': fputs(usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage("simulate", "unknown option");
        }
    }
    if (optind < argc) return cli_usage("simulate", "unexpected argument '%s'", argv[optind]);
    if (workload_arg) {
        if (batch || prompt || gen || tokens)
            return cli_usage("simulate", "--workload replaces --batch, --prompt, --gen and --tokens");
        if (!model_arg || !hw_arg || !chips || !layout_arg)
            return cli_usage("simulate", "--model, --hw, --chips, --workload and --layout are required");
        return simulate_ragged(model_arg, hw_arg, layout_arg, (int)chips, workload_arg, trace_arg, json);
    }
    if (!model_arg || !hw_arg || !chips || !batch || !layout_arg)
        return cli_usage("simulate", "--model, --hw, --chips, --batch and --layout are required");
    if (prompt == 0 && gen == 0) return cli_usage("simulate", "give --prompt and/or --gen (tokens)");

    sp_model m;
    sp_hw hw;
    sp_layout l;
    int rc = cli_load_job(model_arg, hw_arg, layout_arg, (int)chips, batch, prompt + gen, &m, &hw, &l);
    if (rc != CLI_EXIT_OK) return rc;
    sp_workload w = {batch, prompt, gen};
    sp_cost c;
    sp_status st = sp_cost_eval(&m, &hw, &l, &w, NULL, &c);
    if (st != SP_OK) return cli_report(st, NULL);

    sp_sim_opts o;
    sp_sim_opts_init(&o);
    o.tokens = (int)tokens;
    sp_trace *t = NULL;
    if (trace_arg && (st = sp_trace_open(trace_arg, 0, c.chips, &t)) != SP_OK) return cli_report(st, NULL);
    o.trace = t;
    sp_sim_times r;
    st = sp_sim_eval(&m, &hw, &l, &w, &o, &r);
    sp_status tst = sp_trace_close(t);
    if (st != SP_OK) return cli_report(st, NULL);
    if (tst != SP_OK) {
        cli_errorf("%s: %s", trace_arg, sp_last_error());
        return CLI_EXIT_INTERNAL;
    }
    sp_layout dg;   /* the decode group's layout (the layout itself without groups) */
    sp_layout_phase_group(&l, SP_PHASE_DECODE, &dg);
    int64_t T = gen > 0 ? (o.tokens ? o.tokens : dg.stages + 2) : 0;
    /* the closed form of the simulated timeline: T decode steps after the prefill (and transfer) */
    double closed_span = c.prefill_s + c.kv_transfer_s + (double)T * c.decode_step_s;
    if (json) {
        json_t *j = json_pack("{s:o,s:i,s:f,s:f,s:f,s:f,s:I,s:I,s:s?}", "layout", (json_t *)sp_layout_to_json(&l),
                              "chips", c.chips, "prefill_s", r.prefill_s, "decode_step_s", r.decode_step_s,
                              "closed_form_prefill_s", c.prefill_s, "closed_form_decode_step_s", c.decode_step_s,
                              "events", (json_int_t)(r.prefill.events + r.decode.events), "tokens",
                              (json_int_t)T, "trace", trace_arg);
        json_object_set_new(j, "makespan_s", json_real(r.makespan_s));
        json_object_set_new(j, "closed_form_makespan_s", json_real(closed_span));
        if (c.disaggregated) {
            json_object_set_new(j, "kv_transfer_s", json_real(r.kv_transfer_s));
            json_object_set_new(j, "closed_form_kv_transfer_s", json_real(c.kv_transfer_s));
        }
        cli_print_json(j, stdout);
        json_decref(j);
        return CLI_EXIT_OK;
    }
    char text[256], a[32], b[32];
    printf("layout   %s\n", sp_layout_format(&l, text, sizeof text));
    static const char *const hdr[3] = {"metric", "simulated", "closed form"};
    cli_table *tb = cli_table_new(3, hdr);
    cli_table_left(tb, 1);
    if (prompt > 0) {
        const char *cells[3] = {"prefill", cli_fmt_seconds(r.prefill_s, a, sizeof a),
                                cli_fmt_seconds(c.prefill_s, b, sizeof b)};
        cli_table_add(tb, cells);
    }
    if (gen > 0) {
        const char *cells[3] = {"decode step (last context)", cli_fmt_seconds(r.decode_step_s, a, sizeof a),
                                cli_fmt_seconds(c.decode_step_s, b, sizeof b)};
        cli_table_add(tb, cells);
    }
    if (c.disaggregated) {
        const char *x[3] = {"KV transfer", cli_fmt_seconds(r.kv_transfer_s, a, sizeof a),
                            cli_fmt_seconds(c.kv_transfer_s, b, sizeof b)};
        cli_table_add(tb, x);
        char what[64];
        snprintf(what, sizeof what, "prefill + transfer + %lld decode steps", (long long)T);
        const char *y[3] = {what, cli_fmt_seconds(r.makespan_s, a, sizeof a), cli_fmt_seconds(closed_span, b, sizeof b)};
        cli_table_add(tb, y);
    }
    cli_table_print(tb, stdout);
    cli_table_free(tb);
    printf("%lld steps simulated on %lld chips", (long long)(r.prefill.events + r.decode.events), (long long)c.chips);
    if (trace_arg) printf("; trace: %s", trace_arg);
    printf("\n");
    return CLI_EXIT_OK;
}
