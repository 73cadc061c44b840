/* cmd_autoconfig.c: `shardplan autoconfig`: the layout a serving process
 * should start with, as the flags of its server (vLLM, SGLang,
 * TensorRT-LLM), environment assignments or JSON, through the plan cache
 * (sp_autoconfig.h).  Flag names and their sources: doc/autoconfig.md. */
#include <getopt.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "sp_autoconfig.h"

static const char usage_text[] =
    "usage: shardplan autoconfig (--model M | --weights DIR) --hw H --chips N\n"
    "                            (--batch B | --request-rate R) --prompt P --gen G\n"
    "                            [--max-latency-ms X] [--latency-metric total|decode|prefill]\n"
    "                            [--objective latency|cost|throughput] [--quant auto|bf16|int8|fp8]\n"
    "                            [--kv-dtype bf16|fp8|int8] [--emit json|env|vllm|sglang|trtllm]\n"
    "                            [--server any|vllm|sglang|trtllm] [--search server|full]\n"
    "                            [--no-cache] [--time-limit-ms MS]\n"
    "\n"
    "The layout a server should start with for the expected workload, written as\n"
    "that server's flags.  The search is narrowed to what the server can express\n"
    "(vLLM, SGLang, TensorRT-LLM: one tensor-parallel axis with the 1D weight-\n"
    "stationary FFN and head-sharded attention, pipeline stages, data replicas,\n"
    "their weight and KV-cache precisions); --search full searches every layout\n"
    "and refuses (exit 1, saying what the server cannot express) when the best\n"
    "one is outside the server's reach.  Answers come from the plan cache\n"
    "($SHARDPLAN_CACHE_DIR, else $XDG_CACHE_HOME/shardplan, else\n"
    "~/.cache/shardplan) when the same inputs were planned before.\n"
    "\n"
    "  --model M           bundled model name or a model JSON / HF config.json file\n"
    "  --weights DIR       a checkpoint directory: its config.json describes the model\n"
    "  --hw H              bundled hardware name or a hardware JSON file\n"
    "  --chips N           chips the server runs on\n"
    "  --batch B           sequences in flight\n"
    "  --request-rate R    requests per second instead of --batch: the batch is the\n"
    "                      concurrency R x (the request's latency) needs (Little's law,\n"
    "                      iterated to a fixed point; printed on stderr)\n"
    "  --prompt P          prompt tokens per request\n"
    "  --gen G             generated tokens per request\n"
    "  --max-latency-ms X  latency target on the latency metric (default: total)\n"
    "  --objective O       default: cost with a latency target, else latency\n"
    "  --quant Q           weight precision: auto (default: every one the server runs),\n"
    "                      bf16, int8 (weight-only) or fp8\n"
    "  --kv-dtype T        KV cache dtype: bf16 (default), fp8 or int8\n"
    "  --emit F            json (default), env (SP_* assignments), vllm, sglang, trtllm\n"
    "  --server S          the server whose reach narrows the search; default: the\n"
    "                      --emit server, else any (every layout shardplan runs)\n"
    "  --search server|full  narrow the search to the server (default) or not\n"
    "  --no-cache          neither read nor write the plan cache\n"
    "  --time-limit-ms MS  GLPK time limit per solve (default 10000)\n"
    "\n"
    "Exit: 0 configuration written, 1 nothing fits / meets the target / the server\n"
    "cannot express the best layout, 2 bad input or a precision the server lacks,\n"
    "3 internal error.\n";

typedef enum emit_kind { EMIT_JSON, EMIT_ENV, EMIT_VLLM, EMIT_SGLANG, EMIT_TRTLLM } emit_kind;

/* One server's expression of a layout: the command lines and the notes
 * that go with them (stated on stderr and in JSON). */
#define MAX_LINES 3
#define MAX_NOTES 8
typedef struct expr {
    char line[MAX_LINES][512];
    int n_lines;
    char note[MAX_NOTES][256];
    int n_notes;
} expr;

static void addf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void addf(char *buf, size_t n, const char *fmt, ...)
{
    size_t k = strlen(buf);
    if (k >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, n - k, fmt, ap);
    va_end(ap);
}
#define NOTE(e, ...) \
    do { if ((e)->n_notes < MAX_NOTES) snprintf((e)->note[(e)->n_notes++], sizeof (e)->note[0], __VA_ARGS__); } while (0)

/* The flags of server s for layout l (expressible: sp_server_inexpressible
 * returned 0).  B: sequences in flight; ctx: prompt + gen. */
static void express(sp_server s, const sp_layout *l, int64_t B, int64_t prompt, int64_t gen, expr *e)
{
    memset(e, 0, sizeof *e);
    int tp = l->mesh[0] * l->mesh[1] * l->mesh[2];
    long long per = (long long)(B / l->replicas), ctx = (long long)(prompt + gen);
    char *b = e->line[0];
    size_t n = sizeof e->line[0];
    switch (s) {
    case SP_SERVER_VLLM:
        addf(b, n, "--tensor-parallel-size %d --pipeline-parallel-size %d", tp, l->stages);
        if (l->replicas > 1) addf(b, n, " --data-parallel-size %d", l->replicas);
        addf(b, n, " --max-num-seqs %lld --max-model-len %lld", per, ctx);
        addf(b, n, " --kv-cache-dtype %s", l->kv == SP_DT_FP8 ? "fp8" : "auto");
        if (l->weights == SP_DT_FP8) addf(b, n, " --quantization fp8");
        else addf(b, n, " --dtype %s", l->weights == SP_DT_F16 ? "float16" : "bfloat16");
        e->n_lines = 1;
        if (l->replicas > 1)
            NOTE(e, "vLLM: --max-num-seqs is per data-parallel replica (%lld of the %lld sequences)", per, (long long)B);
        break;
    case SP_SERVER_SGLANG:
        addf(b, n, "--tp-size %d", tp);
        if (l->stages > 1) addf(b, n, " --pp-size %d", l->stages);
        if (l->replicas > 1) addf(b, n, " --dp-size %d", l->replicas);
        addf(b, n, " --max-running-requests %lld --context-length %lld", per, ctx);
        addf(b, n, " --kv-cache-dtype %s", l->kv == SP_DT_FP8 ? "fp8_e4m3" : "auto");
        if (l->weights == SP_DT_FP8) addf(b, n, " --quantization fp8");
        else addf(b, n, " --dtype %s", l->weights == SP_DT_F16 ? "float16" : "bfloat16");
        e->n_lines = 1;
        if (l->replicas > 1)
            NOTE(e, "SGLang: --max-running-requests is given per data-parallel replica (%lld of %lld sequences)", per,
                 (long long)B);
        break;
    case SP_SERVER_TRTLLM:
        /* checkpoint conversion (or quantisation), then the engine build */
        if (l->weights == SP_DT_FP8 || l->kv == SP_DT_FP8) {
            /* quantize.py sets weights and KV cache together */
            addf(b, n, "quantize.py --qformat %s",
                 l->weights == SP_DT_FP8 ? "fp8" : l->weights == SP_DT_INT8 ? "int8_wo" : "full_prec");
            if (l->kv == SP_DT_FP8) addf(b, n, " --kv_cache_dtype fp8");
            else if (l->kv == SP_DT_INT8) addf(b, n, " --kv_cache_dtype int8");
            addf(b, n, " --tp_size %d --pp_size %d", tp, l->stages);
        } else {
            addf(b, n, "convert_checkpoint.py --tp_size %d --pp_size %d --dtype %s", tp, l->stages,
                 l->weights == SP_DT_F16 ? "float16" : "bfloat16");
            if (l->weights == SP_DT_INT8) addf(b, n, " --use_weight_only --weight_only_precision int8");
            if (l->kv == SP_DT_INT8) addf(b, n, " --int8_kv_cache");
        }
        snprintf(e->line[1], sizeof e->line[1], "trtllm-build --max_batch_size %lld --max_input_len %lld --max_seq_len %lld",
                 per, (long long)prompt, ctx);
        e->n_lines = 2;
        if (l->replicas > 1)
            NOTE(e, "TensorRT-LLM: %d data replicas are %d instances of the engine, %d GPUs each (no data-parallel flag)",
                 l->replicas, l->replicas, tp * l->stages);
        break;
    default:
        e->n_lines = 0;
        break;
    }
}

/* Environment form: the layout's pieces for a launcher of shardplan's own
 * executor or of a server; shardplan reads none of these itself. */
static void print_env(const sp_layout *l, int64_t B, int64_t prompt, int64_t gen, const sp_autoconfig_result *r)
{
    char lt[512];
    int tp = l->mesh[0] * l->mesh[1] * l->mesh[2];
    printf("SP_LAYOUT='%s'\n", sp_layout_format(l, lt, sizeof lt));
    printf("SP_TENSOR_PARALLEL=%d\nSP_MESH=%dx%dx%d\nSP_PIPELINE_STAGES=%d\nSP_DATA_REPLICAS=%d\nSP_MICROBATCHES=%d\n", tp,
           l->mesh[0], l->mesh[1], l->mesh[2], l->stages, l->replicas, l->microbatches);
    printf("SP_MAX_BATCH=%lld\nSP_MAX_CONTEXT=%lld\nSP_WEIGHTS=%s\nSP_KV_DTYPE=%s\n", (long long)(B / l->replicas),
           (long long)(prompt + gen), sp_dtype_name(l->weights), sp_dtype_name(l->kv));
    printf("SP_PREFILL=%s/%s\nSP_DECODE=%s/%s\n", sp_ffn_layout_name(l->phase[0].ffn),
           sp_attn_layout_name(l->phase[0].attn), sp_ffn_layout_name(l->phase[1].ffn),
           sp_attn_layout_name(l->phase[1].attn));
    printf("SP_PLAN_CACHE=%s\n", sp_cache_status_name(r->cache));
}

int cli_cmd_autoconfig(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"weights", required_argument, 0, 'd'},
        {"hw", required_argument, 0, 'w'}, {"chips", required_argument, 0, 'n'},
        {"batch", required_argument, 0, 'b'}, {"request-rate", required_argument, 0, 'r'},
        {"prompt", required_argument, 0, 'p'}, {"gen", required_argument, 0, 'g'},
        {"max-latency-ms", required_argument, 0, 'x'}, {"latency-metric", required_argument, 0, 'L'},
        {"objective", required_argument, 0, 'o'}, {"quant", required_argument, 0, 'W'},
        {"kv-dtype", required_argument, 0, 'k'}, {"emit", required_argument, 0, 'e'},
        {"server", required_argument, 0, 's'}, {"search", required_argument, 0, 'S'},
        {"no-cache", no_argument, 0, 'C'}, {"time-limit-ms", required_argument, 0, 'T'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_arg = NULL, *dir_arg = NULL, *hw_arg = NULL, *emit_arg = "json", *server_arg = NULL;
    long long chips = 0, batch = 0, prompt = -1, gen = -1, tl = 0;
    double rate = 0;
    int full = 0, nocache = 0, objective_set = 0, ch;
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    optind = 0;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        sp_status st = SP_OK;
        double v;
        switch (ch) {
        case 'm': model_arg = optarg; break;
        case 'd': dir_arg = optarg; break;
        case 'w': hw_arg = optarg; break;
        case 'n': if (cli_parse_long("autoconfig", "--chips", optarg, 1, 1 << 20, &chips)) return CLI_EXIT_USAGE; break;
        case 'b': if (cli_parse_long("autoconfig", "--batch", optarg, 1, 1 << 24, &batch)) return CLI_EXIT_USAGE; break;
        case 'r': if (cli_parse_double("autoconfig", "--request-rate", optarg, &rate)) return CLI_EXIT_USAGE; break;
        case 'p': if (cli_parse_long("autoconfig", "--prompt", optarg, 0, 1 << 24, &prompt)) return CLI_EXIT_USAGE; break;
        case 'g': if (cli_parse_long("autoconfig", "--gen", optarg, 0, 1 << 24, &gen)) return CLI_EXIT_USAGE; break;
        case 'x': if (cli_parse_double("autoconfig", "--max-latency-ms", optarg, &v)) return CLI_EXIT_USAGE;
            o.max_latency_s = v * 1e-3;
            break;
        case 'L': st = sp_plan_latency_parse(optarg, &o.latency_metric); break;
        case 'o': st = sp_plan_objective_parse(optarg, &o.objective); objective_set = 1; break;
        case 'W': st = sp_plan_weights_parse(optarg, &o.weights); break;
        case 'k': st = sp_dtype_parse(optarg, &o.kv); break;
        case 'e': emit_arg = optarg; break;
        case 's': server_arg = optarg; break;
        case 'S':
            if (!strcmp(optarg, "full")) full = 1;
            else if (!strcmp(optarg, "server")) full = 0;
            else return cli_usage("autoconfig", "--search: expected server or full, got \"%s\"", optarg);
            break;
        case 'C': nocache = 1; break;
        case 'T': if (cli_parse_long("autoconfig", "--time-limit-ms", optarg, 1, 1 << 30, &tl)) return CLI_EXIT_USAGE;
            o.time_limit_ms = (int)tl;
            break;
        case 'h': fputs(usage_text, stdout); return CLI_EXIT_OK;
        default: return cli_usage("autoconfig", "unknown option '%s'", argv[optind - 1]);
        }
        if (st != SP_OK) return cli_usage("autoconfig", "%s", sp_last_error());
    }
    if (optind < argc) return cli_usage("autoconfig", "unexpected argument '%s'", argv[optind]);
    if (!model_arg == !dir_arg) return cli_usage("autoconfig", "give exactly one of --model and --weights");
    if (!hw_arg || !chips || prompt < 0 || gen < 0)
        return cli_usage("autoconfig", "--hw, --chips, --prompt and --gen are required");
    if (!batch == !(rate > 0)) return cli_usage("autoconfig", "give exactly one of --batch and --request-rate");
    if (prompt == 0 && gen == 0) return cli_usage("autoconfig", "--prompt and --gen cannot both be 0");
    emit_kind emit;
    static const char *const emit_names[] = {"json", "env", "vllm", "sglang", "trtllm"};
    int ek = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(emit_arg, emit_names[i])) ek = i;
    if (ek < 0) return cli_usage("autoconfig", "--emit: expected json, env, vllm, sglang or trtllm, got \"%s\"", emit_arg);
    emit = (emit_kind)ek;
    sp_server server = emit == EMIT_VLLM ? SP_SERVER_VLLM : emit == EMIT_SGLANG ? SP_SERVER_SGLANG
                     : emit == EMIT_TRTLLM ? SP_SERVER_TRTLLM : SP_SERVER_ANY;
    if (server_arg) {
        sp_server s2;
        if (sp_server_parse(server_arg, &s2) != SP_OK) return cli_usage("autoconfig", "--server: %s", sp_last_error());
        if (emit >= EMIT_VLLM && s2 != server)
            return cli_usage("autoconfig", "--server %s contradicts --emit %s", server_arg, emit_arg);
        server = s2;
    }
    if (!objective_set && o.max_latency_s > 0) o.objective = SP_PLAN_MIN_COST;
    if (o.latency_metric == SP_PLAN_LAT_DECODE && gen == 0)
        return cli_usage("autoconfig", "--latency-metric decode needs --gen > 0");
    if (o.latency_metric == SP_PLAN_LAT_PREFILL && prompt == 0)
        return cli_usage("autoconfig", "--latency-metric prefill needs --prompt > 0");

    char cfg[4096];
    if (dir_arg) {
        if (snprintf(cfg, sizeof cfg, "%s/config.json", dir_arg) >= (int)sizeof cfg)
            return cli_usage("autoconfig", "--weights: path too long");
        model_arg = cfg;
    }
    sp_model m;
    sp_hw hw;
    int rc = cli_load_problem(model_arg, hw_arg, prompt + gen, &m, &hw);
    if (rc != CLI_EXIT_OK) return rc;
    if (o.weights == SP_PLAN_W_FP8 && hw.peak_flops[SP_DT_FP8] <= 0)
        return cli_usage("autoconfig", "--quant fp8: %s has no fp8 peak", hw.name);

    sp_autoconfig_opts ao;
    sp_autoconfig_opts_init(&ao);
    ao.server = full ? SP_SERVER_ANY : server;
    if (nocache) ao.cache_dir = "";
    /* The server's own precision limits hold whatever the search: refuse a
     * requested precision it has no mode for before searching. */
    if (server != SP_SERVER_ANY) {
        sp_plan_opts chk = o;
        sp_status st = sp_server_narrow(server, &chk);
        if (st != SP_OK) return cli_usage("autoconfig", "%s", sp_last_error());
    }

    sp_workload w = {batch, prompt, gen};
    sp_autoconfig_result r;
    sp_status st;
    if (rate > 0) {
        /* Little's law: requests in flight = rate × time each spends.  Start
         * at one and iterate; stop when the batch repeats (at most 16 steps). */
        w.batch = 1;
        for (int it = 0; it < 16; it++) {
            st = sp_autoconfig_ex(&m, &hw, (int)chips, &w, &o, &ao, &r);
            if (st != SP_OK) break;
            double need = ceil(rate * r.cost.total_s - 1e-9);
            int64_t nb = need < 1 ? 1 : (int64_t)need;
            if (nb == w.batch) break;
            if (nb > (1 << 24)) {
                st = SP_EINFEASIBLE;
                cli_errorf("autoconfig: %.4g requests/s needs more than %d sequences in flight", rate, 1 << 24);
                return CLI_EXIT_INFEASIBLE;
            }
            w.batch = nb;
        }
        if (st == SP_OK) {
            double rps = r.cost.total_s > 0 ? (double)w.batch / r.cost.total_s : 0;
            fprintf(stderr, "shardplan: note: %.4g requests/s -> batch %lld (each request %.4g s; %.4g requests/s served)\n",
                    rate, (long long)w.batch, r.cost.total_s, rps);
            if (rps < rate * (1 - 1e-9)) {
                cli_errorf("autoconfig: the batch did not settle: %.4g requests/s served of %.4g", rps, rate);
                return CLI_EXIT_INFEASIBLE;
            }
        }
    } else st = sp_autoconfig_ex(&m, &hw, (int)chips, &w, &o, &ao, &r);
    if (st == SP_EINFEASIBLE) {
        if (emit == EMIT_JSON) {
            json_t *j = json_pack("{s:s,s:s}", "status", "infeasible", "message", sp_last_error());
            cli_print_json(j, stdout);
            json_decref(j);
        }
        return cli_report(st, NULL);
    }
    if (st != SP_OK) return cli_report(st, NULL);

    char inex[8][SP_SERVER_NOTE_LEN];
    int n_inex = sp_server_inexpressible(server, &r.layout, inex, 8);
    if (n_inex > 8) n_inex = 8;
    expr e;
    memset(&e, 0, sizeof e);
    if (!n_inex) express(server, &r.layout, w.batch, prompt, gen, &e);
    char lt[512];
    sp_layout_format(&r.layout, lt, sizeof lt);
    if (server != SP_SERVER_ANY && !full)
        NOTE(&e, "the search was narrowed to layouts %s can express (one tensor-parallel axis: 1D weight-stationary, "
                 "head-sharded attention; pipeline stages; data replicas)", sp_server_title(server));

    for (int i = 0; i < n_inex; i++)
        fprintf(stderr, "shardplan: %s cannot express: %s\n", sp_server_title(server), inex[i]);
    if (n_inex)
        fprintf(stderr, "shardplan: the best layout (%s) is outside %s's reach; drop --search full to search only "
                        "what %s runs\n", lt, sp_server_title(server), sp_server_title(server));
    for (int i = 0; i < e.n_notes; i++) fprintf(stderr, "shardplan: note: %s\n", e.note[i]);

    if (emit == EMIT_JSON) {
        json_t *j = json_object();
        json_object_set_new(j, "status", json_string(n_inex ? "inexpressible" : "ok"));
        json_object_set_new(j, "server", json_string(sp_server_name(server)));
        json_object_set_new(j, "search", json_string(full || server == SP_SERVER_ANY ? "full" : "server"));
        json_object_set_new(j, "cache", json_string(sp_cache_status_name(r.cache)));
        json_object_set_new(j, "cache_key", json_string(r.key));
        json_object_set_new(j, "model", json_string(m.name));
        json_object_set_new(j, "hw", json_string(hw.name));
        json_object_set_new(j, "chips", json_integer(chips));
        json_object_set_new(j, "workload", json_pack("{s:I,s:I,s:I}", "batch", (json_int_t)w.batch, "prompt",
                                                     (json_int_t)prompt, "gen", (json_int_t)gen));
        if (rate > 0) json_object_set_new(json_object_get(j, "workload"), "request_rate", json_real(rate));
        json_object_set_new(j, "layout", (json_t *)sp_layout_to_json(&r.layout));
        json_object_set_new(j, "layout_text", json_string(lt));
        int tp = r.layout.mesh[0] * r.layout.mesh[1] * r.layout.mesh[2];
        json_object_set_new(j, "tensor_parallel", json_integer(tp));
        json_object_set_new(j, "pipeline_parallel", json_integer(r.layout.stages));
        json_object_set_new(j, "data_replicas", json_integer(r.layout.replicas));
        json_object_set_new(j, "max_batch_per_replica", json_integer(w.batch / r.layout.replicas));
        json_object_set_new(j, "weights", json_string(sp_dtype_name(r.layout.weights)));
        json_object_set_new(j, "kv_dtype", json_string(sp_dtype_name(r.layout.kv)));
        json_object_set_new(j, "predicted", json_pack("{s:f,s:f,s:f,s:f,s:I,s:I}", "prefill_s", r.cost.prefill_s,
                                                      "decode_step_s", r.cost.decode_step_s, "total_s", r.cost.total_s,
                                                      "tokens_per_s", r.cost.tokens_per_s, "memory_per_chip_bytes",
                                                      (json_int_t)r.cost.mem.total, "capacity_bytes",
                                                      (json_int_t)r.cost.capacity));
        json_t *cl = json_array(), *ja = json_array(), *jn = json_array();
        for (int i = 0; i < e.n_lines; i++) json_array_append_new(cl, json_string(e.line[i]));
        for (int i = 0; i < n_inex; i++) json_array_append_new(ja, json_string(inex[i]));
        for (int i = 0; i < e.n_notes; i++) json_array_append_new(jn, json_string(e.note[i]));
        json_object_set_new(j, "command_lines", cl);
        json_object_set_new(j, "inexpressible", ja);
        json_object_set_new(j, "notes", jn);
        cli_print_json(j, stdout);
        json_decref(j);
    } else if (!n_inex) {
        if (emit == EMIT_ENV) print_env(&r.layout, w.batch, prompt, gen, &r);
        else
            for (int i = 0; i < e.n_lines; i++) printf("%s\n", e.line[i]);
    }
    return n_inex ? CLI_EXIT_INFEASIBLE : CLI_EXIT_OK;
}
