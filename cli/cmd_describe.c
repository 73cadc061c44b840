/* cmd_describe.c: the describing verbs: models, model show, hw, hw show. */
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "spi_json.h"
#include "sp_hw.h"
#include "sp_model.h"

/* Bundled names under data/<sub>/, sorted; caller frees with free_names. */
static int list_names(const char *sub, char ***out)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", sp_data_dir(), sub);
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, alphasort);
    char **names = calloc(n > 0 ? (size_t)n : 1, sizeof *names);
    int k = 0;
    for (int i = 0; i < n; i++) {
        const char *s = ents[i]->d_name;
        size_t l = strlen(s);
        if (names && l > 5 && s[0] != '.' && !strcmp(s + l - 5, ".json")) {
            names[k] = strdup(s);
            if (names[k]) names[k++][l - 5] = '\0';
        }
        free(ents[i]);
    }
    free(ents);
    *out = names;
    return k;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static const struct option json_help_opts[] = {
    {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};

/* Parses [--json] [--help]; returns -1 to go on, else an exit code. */
static int parse_simple(const char *verb, const char *help, int argc, char **argv, int *json)
{
    int c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "jh", json_help_opts, NULL)) != -1) {
        if (c == 'j') *json = 1;
        else if (c == 'h') { fputs(help, stdout); return CLI_EXIT_OK; }
        else return cli_usage(verb, "unknown option '%s'", argv[optind - 1]);
    }
    return -1;
}

/* ---- models ---- */
static const char models_help[] =
    "Usage: shardplan models [--json]\n\n"
    "Lists the bundled model descriptions (data/models/*.json under the data\n"
    "directory; see SHARDPLAN_DATA) with layers, d_model, heads/kv heads and\n"
    "total parameters.\n\n"
    "  --json   print a JSON array instead of a table\n"
    "  --help   this text\n";

int cli_cmd_models(int argc, char **argv)
{
    int json = 0, rc = parse_simple("models", models_help, argc, argv, &json);
    if (rc >= 0) return rc;
    if (optind < argc) return cli_usage("models", "unexpected argument '%s'", argv[optind]);
    char **names;
    int n = list_names("models", &names);
    static const char *const hdr[] = {"name", "layers", "d_model", "heads/kv", "params"};
    cli_table *t = cli_table_new(5, hdr);
    json_t *arr = json_array();
    int status = CLI_EXIT_OK;
    for (int i = 0; i < n; i++) {
        sp_model m;
        sp_model_stats st;
        sp_error err;
        sp_error_init(&err);
        sp_status s = sp_model_find(names[i], &m, &err);
        if (s == SP_OK) s = sp_model_derive(&m, m.max_context, &st);
        if (s != SP_OK) {
            status = cli_report(s, &err);
            continue;
        }
        char l[32], e[32], h[48], p[32];
        snprintf(l, sizeof l, "%lld", (long long)m.n_layers);
        snprintf(e, sizeof e, "%lld", (long long)m.d_model);
        snprintf(h, sizeof h, "%lld/%lld", (long long)m.n_heads, (long long)m.n_kv_heads);
        cli_fmt_count((double)st.params_total, p, sizeof p);
        const char *row[] = {names[i], l, e, h, p};
        cli_table_add(t, row);
        json_array_append_new(arr, json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "name", names[i], "model_name", m.name,
                                             "n_layers", (json_int_t)m.n_layers, "d_model", (json_int_t)m.d_model,
                                             "n_heads", (json_int_t)m.n_heads, "n_kv_heads",
                                             (json_int_t)m.n_kv_heads, "params_total", (json_int_t)st.params_total));
    }
    if (json) cli_print_json(arr, stdout);
    else cli_table_print(t, stdout);
    if (n == 0) cli_errorf("no bundled models found in %s/models", sp_data_dir());
    json_decref(arr);
    cli_table_free(t);
    free_names(names, n);
    return status;
}

/* ---- model show ---- */
static const char model_help[] =
    "Usage: shardplan model show NAME|FILE [--context N] [--json]\n\n"
    "Shows a model and the quantities derived from it: parameters by group\n"
    "(embedding, attention, ffn, norm), weight bytes at bf16/int8/fp8, KV cache\n"
    "bytes per token (bf16), matmul FLOPs per token and attention FLOPs per token\n"
    "at the context.  NAME is a bundled model (see 'shardplan models'); FILE is a\n"
    "shardplan model JSON or a Hugging Face config.json.\n\n"
    "  --context N  tokens of context for attention FLOPs (default: max_context)\n"
    "  --json       print JSON: {model, context, params, weight_bytes, ...}\n"
    "  --help       this text\n";

static json_t *model_stats_json(const sp_model *m, const sp_model_stats *st)
{
    return json_pack("{s:o,s:I,s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I},s:{s:I,s:I,s:I},s:I,s:I,s:I}",
                     "model", spi_model_to_json(m), "context", (json_int_t)st->context,
                     "params", "embedding", (json_int_t)st->params_embedding, "attention",
                     (json_int_t)st->params_attention, "ffn", (json_int_t)st->params_ffn, "norm",
                     (json_int_t)st->params_norm, "total", (json_int_t)st->params_total, "active",
                     (json_int_t)st->params_active, "per_layer", (json_int_t)st->params_per_layer,
                     "weight_bytes", "bf16", (json_int_t)st->weight_bytes_bf16, "int8",
                     (json_int_t)st->weight_bytes_int8, "fp8", (json_int_t)st->weight_bytes_fp8,
                     "kv_bytes_per_token", (json_int_t)st->kv_bytes_per_token, "matmul_flops_per_token",
                     (json_int_t)st->matmul_flops_per_token, "attention_flops_per_token",
                     (json_int_t)st->attention_flops_per_token);
}

static void row2(cli_table *t, const char *k, const char *v)
{
    const char *r[] = {k, v};
    cli_table_add(t, r);
}

static void row_count(cli_table *t, const char *k, int64_t v)
{
    char b[64], h[32];
    snprintf(b, sizeof b, "%s (%lld)", cli_fmt_count((double)v, h, sizeof h), (long long)v);
    row2(t, k, b);
}

static void row_bytes(cli_table *t, const char *k, int64_t v)
{
    char b[64], h[32];
    snprintf(b, sizeof b, "%s (%lld)", cli_fmt_bytes((double)v, h, sizeof h), (long long)v);
    row2(t, k, b);
}

static void model_table(const sp_model *m, const sp_model_stats *st)
{
    static const char *const hdr[] = {"field", "value"};
    cli_table *t = cli_table_new(2, hdr);
    cli_table_left(t, 1);
    char b[160];
    row2(t, "name", m->name);
#define ROWI(k, v) (snprintf(b, sizeof b, "%lld", (long long)(v)), row2(t, k, b))
    ROWI("n_layers", m->n_layers);
    ROWI("d_model", m->d_model);
    ROWI("d_ff", m->d_ff);
    snprintf(b, sizeof b, "%lld/%lld x %lld", (long long)m->n_heads, (long long)m->n_kv_heads, (long long)m->d_head);
    row2(t, "heads/kv x d_head", b);
    ROWI("vocab", m->vocab);
    snprintf(b, sizeof b, "%s (%s), %s block, %s, %s positions%s", sp_ffn_name(m->ffn), sp_act_name(sp_model_act(m)),
             sp_block_name(m->block), sp_norm_name(m->norm), sp_pos_name(m->positions),
             m->tied_embeddings ? ", tied" : "");
    row2(t, "structure", b);
    snprintf(b, sizeof b, "%s%s%s%s", m->bias ? "" : "none", sp_model_has_bias(m, SP_BIAS_QKV) ? "qkv " : "",
             sp_model_has_bias(m, SP_BIAS_O) ? "o " : "", sp_model_has_bias(m, SP_BIAS_FFN) ? "ffn" : "");
    row2(t, "biases", b);
    if (m->positions == SP_POS_ROPE) {
        snprintf(b, sizeof b, "theta %g, %lld of %lld dims, %s pairs, scaling %s", m->rope_theta,
                 (long long)sp_model_rotary_dims(m), (long long)m->d_head, sp_rope_style_name(m->rope_style),
                 sp_rope_scaling_name(m->rope_scaling));
        if (m->rope_scaling != SP_ROPE_NONE) {
            size_t n = strlen(b);
            snprintf(b + n, sizeof b - n, " x%g", m->rope_factor);
        }
        row2(t, "rope", b);
    }
    if (m->sliding_window) ROWI("sliding_window", m->sliding_window);
    ROWI("max_context", m->max_context);
    if (m->n_experts > 0) {
        int n = snprintf(b, sizeof b, "%lld experts, top %lld (%s), every %lld layer(s)", (long long)m->n_experts,
                         (long long)m->top_k, sp_router_name(m->router), (long long)m->moe_every);
        if (m->n_shared_experts > 0 && n > 0 && (size_t)n < sizeof b)
            snprintf(b + n, sizeof b - (size_t)n, "; %lld shared (%lld hidden units%s)", (long long)m->n_shared_experts,
                     (long long)sp_model_shared_ff(m), m->shared_expert_gate ? ", sigmoid gate" : "");
        row2(t, "moe", b);
        if (sp_model_dense_ff(m) > 0) ROWI("dense layers' d_ff", sp_model_dense_ff(m));
    }
    row_count(t, "params embedding", st->params_embedding);
    row_count(t, "params attention", st->params_attention);
    row_count(t, "params ffn", st->params_ffn);
    row_count(t, "params norm", st->params_norm);
    row_count(t, "params total", st->params_total);
    if (st->params_active != st->params_total) row_count(t, "params active", st->params_active);
    row_bytes(t, "weights bf16", st->weight_bytes_bf16);
    row_bytes(t, "weights int8/fp8", st->weight_bytes_int8);
    row_bytes(t, "kv bytes/token (bf16)", st->kv_bytes_per_token);
    row_count(t, "matmul FLOPs/token", st->matmul_flops_per_token);
    char k[64];
    snprintf(k, sizeof k, "attention FLOPs/token @%lld", (long long)st->context);
    row_count(t, k, st->attention_flops_per_token);
#undef ROWI
    cli_table_print(t, stdout);
    cli_table_free(t);
}

static const struct option model_opts[] = {{"json", no_argument, NULL, 'j'},
                                           {"context", required_argument, NULL, 'c'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};

static int model_show(int argc, char **argv)
{
    int json = 0, c;
    long long context = 0;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":jc:h", model_opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'c':
            if (cli_parse_long("model", "--context", optarg, 1, (long long)1 << 40, &context)) return CLI_EXIT_USAGE;
            break;
        case 'h': fputs(model_help, stdout); return CLI_EXIT_OK;
        case ':': return cli_usage("model", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage("model", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc) return cli_usage("model", "model show needs a model NAME or FILE");
    if (optind + 1 < argc) return cli_usage("model", "unexpected argument '%s'", argv[optind + 1]);
    sp_model m;
    sp_model_stats st;
    sp_error err;
    sp_error_init(&err);
    sp_status s = sp_model_find(argv[optind], &m, &err);
    if (s != SP_OK) return cli_report(s, &err);
    s = sp_model_derive(&m, context ? (int64_t)context : m.max_context, &st);
    if (s != SP_OK) return cli_report(s, NULL);
    if (json) {
        json_t *j = model_stats_json(&m, &st);
        cli_print_json(j, stdout);
        json_decref(j);
    } else {
        model_table(&m, &st);
    }
    return CLI_EXIT_OK;
}

int cli_cmd_model(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "show")) return model_show(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(model_help, stdout);
        return CLI_EXIT_OK;
    }
    if (argc < 2) return cli_usage("model", "missing subcommand: model show NAME|FILE");
    return cli_usage("model", "unknown subcommand '%s' (known: show)", argv[1]);
}

/* ---- hw ---- */
static const char hw_help[] =
    "Usage: shardplan hw [--json]\n"
    "       shardplan hw show NAME|FILE [--json]\n\n"
    "Without a subcommand, lists the bundled hardware descriptions (data/hw/*.json)\n"
    "with topology, bf16 peak, HBM capacity and bandwidth.  'hw show' prints one\n"
    "description with defaults applied (efficiency knobs; see doc/formats.md).\n\n"
    "  --json   print JSON instead of a table\n"
    "  --help   this text\n";

static void topo_str(const sp_hw *hw, char *b, size_t n)
{
    if (hw->topo == SP_TOPO_TORUS)
        snprintf(b, n, "torus %dx%dx%d", hw->torus_dims[0], hw->torus_dims[1], hw->torus_dims[2]);
    else
        snprintf(b, n, "cluster %d/node", hw->chips_per_node);
}

static int hw_list(int argc, char **argv)
{
    int json = 0, rc = parse_simple("hw", hw_help, argc, argv, &json);
    if (rc >= 0) return rc;
    if (optind < argc) return cli_usage("hw", "unexpected argument '%s'", argv[optind]);
    char **names;
    int n = list_names("hw", &names);
    static const char *const hdr[] = {"name", "topology", "peak bf16", "HBM", "HBM bw"};
    cli_table *t = cli_table_new(5, hdr);
    json_t *arr = json_array();
    int status = CLI_EXIT_OK;
    for (int i = 0; i < n; i++) {
        sp_hw hw;
        sp_error err;
        sp_error_init(&err);
        sp_status s = sp_hw_find(names[i], &hw, &err);
        if (s != SP_OK) {
            status = cli_report(s, &err);
            continue;
        }
        char tp[64], pf[32], hb[32], bw[32];
        topo_str(&hw, tp, sizeof tp);
        cli_fmt_flops(hw.peak_flops[SP_DT_BF16], pf, sizeof pf);
        cli_fmt_bytes((double)hw.hbm_bytes, hb, sizeof hb);
        cli_fmt_rate(hw.hbm_bw, bw, sizeof bw);
        const char *row[] = {names[i], tp, pf, hb, bw};
        cli_table_add(t, row);
        json_array_append_new(arr, json_pack("{s:s,s:s,s:f,s:I,s:f}", "name", names[i], "topology", tp, "peak_bf16",
                                             hw.peak_flops[SP_DT_BF16], "hbm_bytes", (json_int_t)hw.hbm_bytes,
                                             "hbm_bw", hw.hbm_bw));
    }
    if (json) cli_print_json(arr, stdout);
    else cli_table_print(t, stdout);
    if (n == 0) cli_errorf("no bundled hardware found in %s/hw", sp_data_dir());
    json_decref(arr);
    cli_table_free(t);
    free_names(names, n);
    return status;
}

static void hw_table(const sp_hw *hw)
{
    static const char *const hdr[] = {"field", "value"};
    cli_table *t = cli_table_new(2, hdr);
    cli_table_left(t, 1);
    char b[128], x[32], y[32];
    row2(t, "name", hw->name);
    for (int i = 0; i < SP_DT_COUNT; i++) {
        if (!(hw->peak_flops[i] > 0)) continue;
        char k[32];
        snprintf(k, sizeof k, "peak %s", sp_dtype_name((sp_dtype)i));
        row2(t, k, cli_fmt_flops(hw->peak_flops[i], x, sizeof x));
    }
    snprintf(b, sizeof b, "%s at %s", cli_fmt_bytes((double)hw->hbm_bytes, x, sizeof x),
             cli_fmt_rate(hw->hbm_bw, y, sizeof y));
    row2(t, "HBM", b);
    topo_str(hw, b, sizeof b);
    row2(t, "topology", b);
    if (hw->coll_latency > 0) row2(t, "collective launch", cli_fmt_seconds(hw->coll_latency, x, sizeof x));
    if (hw->topo == SP_TOPO_TORUS) {
        snprintf(b, sizeof b, "%d x %s one way, %s per hop", hw->links_per_chip,
                 cli_fmt_rate(hw->link_bw, x, sizeof x), cli_fmt_seconds(hw->hop_latency, y, sizeof y));
        row2(t, "links", b);
        if (hw->n_slice_shapes || hw->slice_min_chips) {
            size_t l = 0;
            b[0] = '\0';
            for (int i = 0; i < hw->n_slice_shapes && l < sizeof b; i++) {
                int w = snprintf(b + l, sizeof b - l, "%s%dx%dx%d", i ? ", " : "", hw->slice_shapes[i][0],
                                 hw->slice_shapes[i][1], hw->slice_shapes[i][2]);
                if (w > 0) l += (size_t)w;
            }
            if (hw->slice_min_chips && l < sizeof b)
                snprintf(b + l, sizeof b - l, "%scuboids with sides multiple of %d from %d chips", l ? "; " : "",
                         hw->slice_multiple, hw->slice_min_chips);
            row2(t, "slices", b);
        } else {
            row2(t, "slices", "any sub-cuboid of the torus");
        }
    } else {
        snprintf(b, sizeof b, "%s per chip one way, %s", cli_fmt_rate(hw->intra_bw, x, sizeof x),
                 cli_fmt_seconds(hw->intra_latency, y, sizeof y));
        row2(t, "intra-node", b);
        snprintf(b, sizeof b, "%s per chip one way, %s", cli_fmt_rate(hw->inter_bw, x, sizeof x),
                 cli_fmt_seconds(hw->inter_latency, y, sizeof y));
        row2(t, "inter-node", b);
        snprintf(b, sizeof b, "%d", hw->max_chips);
        row2(t, "max chips", hw->max_chips ? b : "unbounded");
    }
    snprintf(b, sizeof b, "%s, link %s", cli_fmt_bytes((double)hw->host_bytes, x, sizeof x),
             cli_fmt_rate(hw->host_link_bw, y, sizeof y));
    row2(t, "host", b);
    if (hw->eff_points) {
        size_t l = 0;
        b[0] = '\0';
        for (int i = 0; i < hw->eff_points && l < sizeof b; i++) {
            int w = snprintf(b + l, sizeof b - l, "%s%.3g:%.2f", i ? " " : "", hw->eff_flops[i], hw->eff_value[i]);
            if (w > 0) l += (size_t)w;
        }
        row2(t, "matmul efficiency", b);
    } else {
        row2(t, "matmul efficiency", "1.0 (no curve)");
    }
    snprintf(b, sizeof b, "%.2f", hw->hbm_usable);
    row2(t, "HBM usable", b);
    if (hw->mem_points > 0) {
        size_t l = 0;
        for (int i = 0; i < hw->mem_points && l < sizeof b; i++) {
            int w = snprintf(b + l, sizeof b - l, "%s%.3g:%.2f", i ? " " : "", hw->mem_bytes[i], hw->mem_value[i]);
            if (w > 0) l += (size_t)w;
        }
        row2(t, "HBM bw efficiency (by bytes)", b);
    } else {
        snprintf(b, sizeof b, "%.2f", hw->hbm_bw_eff);
        row2(t, "HBM bw efficiency", b);
    }
    if (hw->matmul_tile[0] || hw->matmul_tile[1] || hw->matmul_tile[2]) {
        snprintf(b, sizeof b, "%dx%dx%d (M, N, K)", hw->matmul_tile[0], hw->matmul_tile[1], hw->matmul_tile[2]);
        row2(t, "matmul tile", b);
    }
    snprintf(b, sizeof b, "%.3g us", hw->dispatch_s * 1e6);
    row2(t, "dispatch per step", b);
    if (hw->overlap == SP_OVERLAP_FRACTION) snprintf(b, sizeof b, "fraction %.2f", hw->overlap_fraction);
    else snprintf(b, sizeof b, "%s", hw->overlap == SP_OVERLAP_NONE ? "none" : "full");
    row2(t, "overlap", b);
    if (hw->chip_cost_per_hour > 0) {
        snprintf(b, sizeof b, "$%.2f", hw->chip_cost_per_hour);
        row2(t, "cost per chip-hour", b);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    /* provenance of fitted numbers: a user must see what a profile was fitted
     * to and how wrong it still is before trusting it */
    const sp_hw_calibration *k = &hw->calibration;
    if (!k->present) {
        printf("\ncalibration: none (datasheet figures and stated assumptions; see the file's notes)\n");
        return;
    }
    if (k->transferred_from[0])
        printf("\ncalibration: overheads shared from %s's fit to %s (%s); this chip's own peaks and bandwidths.\n"
               "The errors below are that fit's, on %s.\n",
               k->transferred_from, k->fitted_to, k->date, k->transferred_from);
    else
        printf("\ncalibration: fitted to %s on %s (%d rows, %d models; pull toward the prior %g)\n", k->fitted_to,
               k->date, k->rows, k->models, k->prior_weight);
    printf("  |predicted/measured - 1|  median %.1f %%, worst %.1f %% (uncalibrated: %.1f %%, %.1f %%)\n",
           100 * k->median_abs_err, 100 * k->worst_abs_err, 100 * k->median_abs_err_prior,
           100 * k->worst_abs_err_prior);
    if (k->median_abs_err_lomo >= 0)
        printf("  leave one model out:      median %.1f %%, worst %.1f %%\n", 100 * k->median_abs_err_lomo,
               100 * k->worst_abs_err_lomo);
    for (int i = 0; i < k->n_params; i++)
        printf("  %-34s %-12.6g (uncalibrated %.6g)%s\n", sp_hw_param_path(k->params[i].param), k->params[i].value,
               k->params[i].prior, k->params[i].fitted ? "" : " not fitted: no training row depends on it");
    printf("  (--hw %s:uncalibrated gives the uncalibrated profile)\n", hw->name);
}

static int hw_show(int argc, char **argv)
{
    int json = 0, rc = parse_simple("hw", hw_help, argc, argv, &json);
    if (rc >= 0) return rc;
    if (optind >= argc) return cli_usage("hw", "hw show needs a hardware NAME or FILE");
    if (optind + 1 < argc) return cli_usage("hw", "unexpected argument '%s'", argv[optind + 1]);
    sp_hw hw;
    sp_error err;
    sp_error_init(&err);
    sp_status s = sp_hw_find(argv[optind], &hw, &err);
    if (s != SP_OK) return cli_report(s, &err);
    if (json) {
        json_t *j = spi_hw_to_json(&hw);
        cli_print_json(j, stdout);
        json_decref(j);
    } else {
        hw_table(&hw);
    }
    return CLI_EXIT_OK;
}

int cli_cmd_hw(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "show")) return hw_show(argc - 1, argv + 1);
    return hw_list(argc, argv);
}
