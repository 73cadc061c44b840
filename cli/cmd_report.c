/* cmd_report.c: `shardplan report`: a capacity-planning report for one
 * workload over several models and hardware kinds: a self-contained HTML
 * page (figures as inline SVG data, drawn by PLplot) or Markdown, with every
 * figure's data as CSV and the whole as JSON, in --out DIR.
 *
 * Every figure printed comes from a planner or cost-model call made here
 * (sp_plan_solve, sp_plan_frontier, sp_plan_min_chips) or from the hardware
 * profile (price, calibration); nothing is typed in. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli.h"
#include "cli_fig.h"
#include "sp_plan.h"
#include "sp_sweep.h"

static const char report_usage[] =
    "usage: shardplan report --model M[,M...] --hw H[,H...] --chips N --batch B --prompt P --gen G\n"
    "                        --out DIR [--format html|md] [--targets-ms LIST] [--frontier-chips LIST]\n"
    "                        [--max-chips N] [--objective latency|cost|throughput]\n"
    "                        [--latency-metric total|decode|prefill] [--max-latency-ms X]\n"
    "                        [--weights auto|bf16|int8|fp8] [--time-limit-ms MS]\n"
    "       shardplan report --db SWEEP.db --out DIR [--format html|md] [--latency-metric L]\n"
    "\n"
    "A capacity-planning report for one workload on every model x hardware pair:\n"
    "the layout `plan` chooses on N chips with its time and memory breakdown (stacked\n"
    "bars, beside the best rival of each kind and why it lost), the cost-vs-latency\n"
    "frontier across chip counts with the chosen layout marked, the smallest chip\n"
    "count meeting each latency target, cost per million generated tokens at the\n"
    "profile's price (cost_per_chip_hour), each profile's calibration and stated\n"
    "error, and the command that reproduces the page.\n"
    "\n"
    "Writes into DIR: report.html (self-contained: figures embedded as SVG, no\n"
    "network fetches) or report.md (--format md: figures as files beside it);\n"
    "every figure as SVG and PNG; its data as CSV (frontier.csv, min_chips.csv,\n"
    "time.csv, memory.csv, rivals.csv); everything as report.json.\n"
    "\n"
    "With --db, a report of a sweep database (`shardplan sweep`): per hardware,\n"
    "prompt and gen, the frontier of cost (chip-seconds per token of the latency\n"
    "metric's phase) against latency over the rows that fit, one series per model\n"
    "(and per layout for an estimate sweep, with each layout's communication per\n"
    "chip against tokens per batch); the latency metric defaults to the spec's.\n"
    "Data: frontier.csv (every fitting row, on_frontier marks the frontier), comm.csv.\n"
    "\n"
    "  --model M[,M...]     bundled model names or model JSON / HF config.json files\n"
    "  --hw H[,H...]        bundled hardware names or hardware JSON files\n"
    "  --chips N            chips of the planned layout\n"
    "  --batch B, --prompt P, --gen G   the workload (G > 0: costs are per generated token)\n"
    "  --out DIR            output folder (created; files in it are overwritten)\n"
    "  --format F           html (default) or md\n"
    "  --targets-ms LIST    latency targets (ms, of the latency metric) for the chip-count\n"
    "                       table; default: each pair's chosen latency rounded up to two\n"
    "                       significant digits\n"
    "  --frontier-chips LIST  chip counts of the frontier; default: the powers of two the\n"
    "                       topology allows from N/8 to 8N, and N\n"
    "  --max-chips N        largest count the chip-count search tries (default 8 x --chips,\n"
    "                       at most the hardware's max_chips)\n"
    "  --objective, --latency-metric, --max-latency-ms, --weights, --time-limit-ms\n"
    "                       as for `shardplan plan`\n"
    "  --db FILE            report a sweep database instead of planning\n"
    "\n"
    "Exit: 0 the report was written, 1 it was written but no pair has a layout that\n"
    "fits, 2 bad input, 3 solver or internal error.\n";

#define REP_MAX_ITEMS 16      /* models, hardware, targets */
#define REP_MAX_FCHIPS 24     /* frontier chip counts */

typedef struct rep_min {
    double target_s;
    int found;
    int chips;
    sp_plan_point pt;
    char msg[256];
} rep_min;

typedef struct rep_pair {
    const char *model_arg, *hw_arg;
    sp_model m;
    sp_hw hw;
    char tag[160];                /* file-name stem: model_hw, [A-Za-z0-9.-_] */
    sp_plan *plan;                /* at --chips: chosen, rivals */
    sp_plan *front;               /* across fchips */
    int n_fchips, fchips[REP_MAX_FCHIPS];
    rep_min mins[REP_MAX_ITEMS];
} rep_pair;

typedef struct rep {
    int n_pairs;
    rep_pair *pairs;
    sp_workload w;
    int chips, max_chips;
    sp_plan_opts o;
    int n_targets;
    double targets[REP_MAX_ITEMS];
    int targets_given;
    int md;
    const char *dir;
    char command[4096];
    int priced;                   /* every pair's profile has a price: figures in $ */
    int db;                       /* a report of a sweep database (no report.json) */
} rep;

/* ---- small helpers ---- */

static double usd_per_mtok(const sp_hw *hw, double chip_s_per_token)
{
    return hw->chip_cost_per_hour > 0 ? chip_s_per_token * hw->chip_cost_per_hour / 3600.0 * 1e6 : NAN;
}

static const char *fmt_g(double v, char *b, size_t n)
{
    if (isnan(v)) snprintf(b, n, "n/a");
    else snprintf(b, n, "%.4g", v);
    return b;
}

static const char *loss_name(sp_plan_loss l)
{
    return l == SP_LOSS_MEMORY ? "memory" : l == SP_LOSS_BOUND ? "bound" : "objective";
}

static void path_in(const rep *r, const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", r->dir, name);
}

/* Comma lists. */
static int split_list(const char *opt, const char *s, const char **out, char *store, size_t store_n, int *n)
{
    if (strlen(s) >= store_n) return cli_usage("report", "%s: list too long", opt);
    strcpy(store, s);
    char *save = NULL;
    for (char *t = strtok_r(store, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n >= REP_MAX_ITEMS) return cli_usage("report", "%s: at most %d items", opt, REP_MAX_ITEMS);
        out[(*n)++] = t;
    }
    return 0;
}

static int parse_numbers(const char *opt, const char *s, double *out, int cap, int *n, int integer)
{
    const char *q = s;
    *n = 0;
    while (*q) {
        char *end;
        errno = 0;
        double v = strtod(q, &end);
        if (end == q || errno || !isfinite(v) || v <= 0 || (integer && (v != floor(v) || v > (1 << 20))) ||
            (*end && *end != ',') || *n >= cap)
            return cli_usage("report", "%s: expected a comma-separated list of at most %d %s, got \"%s\"", opt, cap,
                             integer ? "positive integers" : "numbers > 0", s);
        out[(*n)++] = v;
        q = *end ? end + 1 : end;
    }
    if (!*n) return cli_usage("report", "%s: empty list", opt);
    return 0;
}

/* Shell-quoted argument (single quotes unless every character is safe). */
static size_t shell_quote(const char *s, char *buf, size_t n)
{
    int safe = s[0] != 0;
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,/:=+@%", *p)) safe = 0;
    if (safe) return (size_t)snprintf(buf, n, "%s", s);
    size_t k = 0;
    if (k < n) buf[k++] = '\'';
    for (const char *p = s; *p && k + 5 < n; p++) {
        if (*p == '\'') {
            memcpy(buf + k, "'\\''", 4);
            k += 4;
        } else buf[k++] = *p;
    }
    if (k + 1 < n) buf[k++] = '\'';
    if (n) buf[k < n ? k : n - 1] = 0;
    return k;
}

/* ---- computing ---- */

/* Rounds up to two significant digits: a target the chosen layout meets. */
static double round_up_2sig(double x)
{
    if (!(x > 0)) return x;
    double p = pow(10, floor(log10(x)) - 1);
    return ceil(x / p - 1e-9) * p;
}

static int default_fchips(const sp_hw *hw, int chips, int max_chips, int *out)
{
    int lo = chips / 8 > 0 ? chips / 8 : 1;
    int hi = chips > max_chips / 8 ? max_chips : chips * 8;
    if (hi < chips) hi = chips;
    static int cnt[1 << 14];
    int k = sp_plan_chip_counts(hw, lo, hi, cnt, (int)(sizeof cnt / sizeof cnt[0]));
    int n = 0;
    for (int i = 0; i < k && n < REP_MAX_FCHIPS; i++)
        if ((cnt[i] & (cnt[i] - 1)) == 0 || cnt[i] == chips) out[n++] = cnt[i];
    return n;
}

static int compute_pair(rep *r, rep_pair *p)
{
    sp_status st = sp_plan_solve(&p->m, &p->hw, r->chips, &r->w, &r->o, &p->plan);
    if (st != SP_OK) return cli_report(st, NULL);
    if (!p->n_fchips) p->n_fchips = default_fchips(&p->hw, r->chips, r->max_chips, p->fchips);
    if (p->n_fchips) {
        sp_plan_opts fo = r->o;
        fo.rivals = 0;
        fo.search_min_chips = 0;
        fo.cost_metric = SP_PLAN_COST_TOTAL;
        int64_t b = r->w.batch;
        st = sp_plan_frontier(&p->m, &p->hw, p->fchips, p->n_fchips, &b, 1, &r->w, &fo, &p->front);
        if (st != SP_OK) return cli_report(st, NULL);
    }
    return CLI_EXIT_OK;
}

static int compute_mins(rep *r, rep_pair *p)
{
    sp_plan_opts mo = r->o;
    mo.frontier = 0;
    mo.rivals = 0;
    mo.search_min_chips = 0;
    mo.max_chips = r->max_chips;
    int chips[REP_MAX_ITEMS];
    sp_plan *plans[REP_MAX_ITEMS];
    sp_status st = sp_plan_min_chips_targets(&p->m, &p->hw, &r->w, &mo, r->targets, r->n_targets, chips, plans);
    if (st != SP_OK) return cli_report(st, NULL);
    for (int t = 0; t < r->n_targets; t++) {
        rep_min *q = &p->mins[t];
        q->target_s = r->targets[t];
        q->found = plans[t] != NULL;
        q->chips = chips[t];
        if (q->found) q->pt = plans[t]->chosen;
        else snprintf(q->msg, sizeof q->msg, "no chip count up to %d meets the target", r->max_chips);
        sp_plan_free(plans[t]);
    }
    return CLI_EXIT_OK;
}

/* ---- CSV and JSON ---- */

static FILE *open_out(const rep *r, const char *name)
{
    char path[4096];
    path_in(r, name, path, sizeof path);
    FILE *f = fopen(path, "w");
    if (!f) cli_errorf("cannot write %s: %s", path, strerror(errno));
    return f;
}

static int close_out(FILE *f, const rep *r, const char *name)
{
    if (fclose(f) != 0) {
        cli_errorf("cannot write %s/%s", r->dir, name);
        return -1;
    }
    return 0;
}

/* Quoted CSV field (layouts contain commas). */
static void csv_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static const char *const time_parts[] = {"compute steps (roofline)", "dispatch", "all-gather", "reduce-scatter",
                                         "all-reduce", "all-to-all", "send-recv"};
enum { N_TIME_PARTS = 2 + SP_COLL_COUNT };
_Static_assert(sizeof time_parts / sizeof time_parts[0] == N_TIME_PARTS, "one name per time part");
static const char *const mem_parts[] = {"weights", "gathered weights", "KV cache", "activations", "workspace",
                                        "executor scratch"};
enum { N_MEM_PARTS = 6 };

/* Seconds of one phase by part (the stacked bar), and the schedule's time. */
static void time_split(const sp_phase_cost *c, double out[N_TIME_PARTS])
{
    out[0] = c->roofline_s;
    out[1] = c->dispatch_s;
    for (int k = 0; k < SP_COLL_COUNT; k++) out[2 + k] = c->coll_s[k];
}

static void mem_split(const sp_mem_sizes *m, double out[N_MEM_PARTS])
{
    out[0] = (double)m->weights, out[1] = (double)m->gathered_weights, out[2] = (double)m->kv;
    out[3] = (double)m->activations, out[4] = (double)m->workspace, out[5] = (double)m->scratch;
}

/* The layouts a pair's bars show: the chosen one, then each rival. */
static int bar_layouts(const rep_pair *p, const sp_plan_point **pts, const char **roles, char names[][48])
{
    int n = 0;
    if (!p->plan->has_chosen) return 0;
    pts[n] = &p->plan->chosen, roles[n] = "chosen";
    snprintf(names[n], 48, "chosen");
    n++;
    for (int i = 0; i < p->plan->n_rivals; i++) {
        pts[n] = &p->plan->rivals[i].point;
        roles[n] = sp_plan_rival_kind_name(p->plan->rivals[i].kind);
        snprintf(names[n], 48, "rival: %s", roles[n]);
        n++;
    }
    return n;
}

static int write_csvs(const rep *r)
{
    FILE *f;
    char lay[512], b[64];
    if (!(f = open_out(r, "frontier.csv"))) return -1;
    fprintf(f, "model,hw,chips,batch,latency_metric,latency_s,cost_chip_s_per_token,usd_per_million_tokens,chosen,layout\n");
    for (int i = 0; i < r->n_pairs; i++) {
        const rep_pair *p = &r->pairs[i];
        const char *lm = sp_plan_latency_name(r->o.latency_metric);
        for (int k = 0; p->front && k < p->front->n_frontier; k++) {
            const sp_plan_point *q = &p->front->frontier[k];
            fprintf(f, "%s,%s,%d,%lld,%s,%.9g,%.9g,%s,0,", p->m.name, p->hw.name, q->chips, (long long)q->batch, lm,
                    q->latency_s, q->cost.cost_chip_s_per_token,
                    fmt_g(usd_per_mtok(&p->hw, q->cost.cost_chip_s_per_token), b, sizeof b));
            csv_str(f, sp_layout_format(&q->layout, lay, sizeof lay));
            fputc('\n', f);
        }
        if (p->plan->has_chosen) {
            const sp_plan_point *q = &p->plan->chosen;
            fprintf(f, "%s,%s,%d,%lld,%s,%.9g,%.9g,%s,1,", p->m.name, p->hw.name, p->plan->chips,
                    (long long)r->w.batch, lm, q->latency_s, q->cost.cost_chip_s_per_token,
                    fmt_g(usd_per_mtok(&p->hw, q->cost.cost_chip_s_per_token), b, sizeof b));
            csv_str(f, sp_layout_format(&q->layout, lay, sizeof lay));
            fputc('\n', f);
        }
    }
    if (close_out(f, r, "frontier.csv")) return -1;

    if (!(f = open_out(r, "min_chips.csv"))) return -1;
    fprintf(f, "model,hw,latency_metric,target_s,found,chips,latency_s,cost_chip_s_per_token,usd_per_million_tokens,layout\n");
    for (int i = 0; i < r->n_pairs; i++) {
        const rep_pair *p = &r->pairs[i];
        for (int t = 0; t < r->n_targets; t++) {
            const rep_min *q = &p->mins[t];
            fprintf(f, "%s,%s,%s,%.9g,%d,", p->m.name, p->hw.name, sp_plan_latency_name(r->o.latency_metric),
                    q->target_s, q->found);
            if (q->found) {
                fprintf(f, "%d,%.9g,%.9g,%s,", q->chips, q->pt.latency_s, q->pt.cost.cost_chip_s_per_token,
                        fmt_g(usd_per_mtok(&p->hw, q->pt.cost.cost_chip_s_per_token), b, sizeof b));
                csv_str(f, sp_layout_format(&q->pt.layout, lay, sizeof lay));
            } else fprintf(f, ",,,,");
            fputc('\n', f);
        }
    }
    if (close_out(f, r, "min_chips.csv")) return -1;

    if (!(f = open_out(r, "time.csv"))) return -1;
    fprintf(f, "model,hw,role,phase,term,seconds\n");
    FILE *g = open_out(r, "memory.csv");
    if (!g) {
        fclose(f);
        return -1;
    }
    fprintf(g, "model,hw,role,part,bytes,capacity_bytes\n");
    FILE *h = open_out(r, "rivals.csv");
    if (!h) {
        fclose(f), fclose(g);
        return -1;
    }
    fprintf(h, "model,hw,kind,lost_on,shortfall_bytes,objective_delta,term,term_phase,term_delta_s,latency_s,"
               "cost_chip_s_per_token,usd_per_million_tokens,reason,layout\n");
    for (int i = 0; i < r->n_pairs; i++) {
        const rep_pair *p = &r->pairs[i];
        const sp_plan_point *pts[1 + SP_RIVAL_KIND_COUNT];
        const char *roles[1 + SP_RIVAL_KIND_COUNT];
        char names[1 + SP_RIVAL_KIND_COUNT][48];
        int n = bar_layouts(p, pts, roles, names);
        for (int k = 0; k < n; k++) {
            for (int ph = 0; ph < 2; ph++) {
                if ((ph == 0 && r->w.prompt == 0) || (ph == 1 && r->w.gen == 0)) continue;
                double v[N_TIME_PARTS];
                const sp_phase_cost *c = ph ? &pts[k]->cost.decode : &pts[k]->cost.prefill;
                time_split(c, v);
                for (int j = 0; j < N_TIME_PARTS; j++)
                    fprintf(f, "%s,%s,%s,%s,%s,%.9g\n", p->m.name, p->hw.name, roles[k], ph ? "decode_step" : "prefill",
                            time_parts[j], v[j]);
                fprintf(f, "%s,%s,%s,%s,schedule,%.9g\n", p->m.name, p->hw.name, roles[k],
                        ph ? "decode_step" : "prefill", c->time_s);
            }
            double mv[N_MEM_PARTS];
            mem_split(&pts[k]->cost.mem, mv);
            for (int j = 0; j < N_MEM_PARTS; j++)
                fprintf(g, "%s,%s,%s,%s,%.0f,%lld\n", p->m.name, p->hw.name, roles[k], mem_parts[j], mv[j],
                        (long long)pts[k]->cost.capacity);
        }
        for (int k = 0; k < p->plan->n_rivals; k++) {
            const sp_plan_rival *q = &p->plan->rivals[k];
            fprintf(h, "%s,%s,%s,%s,%lld,%.9g,%s,%s,%.9g,%.9g,%.9g,%s,", p->m.name, p->hw.name,
                    sp_plan_rival_kind_name(q->kind), loss_name(q->loss), (long long)q->shortfall_bytes,
                    q->objective_delta, q->term, q->term_phase, q->term_delta_s, q->point.latency_s,
                    q->point.cost.cost_chip_s_per_token,
                    fmt_g(usd_per_mtok(&p->hw, q->point.cost.cost_chip_s_per_token), b, sizeof b));
            csv_str(h, q->reason);
            fputc(',', h);
            csv_str(h, sp_layout_format(&q->point.layout, lay, sizeof lay));
            fputc('\n', h);
        }
    }
    int rc = close_out(f, r, "time.csv") | close_out(g, r, "memory.csv") | close_out(h, r, "rivals.csv");
    return rc ? -1 : 0;
}

static json_t *calibration_json(const sp_hw *hw)
{
    const sp_hw_calibration *c = &hw->calibration;
    if (!c->present) return json_null();
    json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:i,s:f,s:f,s:f,s:f}", "date", c->date, "fitted_to", c->fitted_to,
                          "transferred_from", c->transferred_from, "rows", c->rows, "models", c->models,
                          "median_abs_err", c->median_abs_err, "worst_abs_err", c->worst_abs_err,
                          "median_abs_err_prior", c->median_abs_err_prior, "worst_abs_err_prior", c->worst_abs_err_prior);
    if (j && c->median_abs_err_lomo >= 0) {
        json_object_set_new(j, "median_abs_err_leave_one_model_out", json_real(c->median_abs_err_lomo));
        json_object_set_new(j, "worst_abs_err_leave_one_model_out", json_real(c->worst_abs_err_lomo));
    }
    return j;
}

static int write_json(const rep *r)
{
    json_t *root = json_object(), *pairs = json_array(), *tg = json_array();
    json_object_set_new(root, "command", json_string(r->command));
    json_object_set_new(root, "version", json_string(sp_version()));
    json_object_set_new(root, "workload", json_pack("{s:I,s:I,s:I}", "batch", (json_int_t)r->w.batch, "prompt",
                                                    (json_int_t)r->w.prompt, "gen", (json_int_t)r->w.gen));
    json_object_set_new(root, "chips", json_integer(r->chips));
    json_object_set_new(root, "latency_metric", json_string(sp_plan_latency_name(r->o.latency_metric)));
    for (int t = 0; t < r->n_targets; t++) json_array_append_new(tg, json_real(r->targets[t]));
    json_object_set_new(root, "targets_s", tg);
    for (int i = 0; i < r->n_pairs; i++) {
        const rep_pair *p = &r->pairs[i];
        json_t *pj = json_object(), *mins = json_array();
        json_object_set_new(pj, "model", json_string(p->m.name));
        json_object_set_new(pj, "hw", json_string(p->hw.name));
        json_object_set_new(pj, "cost_per_chip_hour",
                            p->hw.chip_cost_per_hour > 0 ? json_real(p->hw.chip_cost_per_hour) : json_null());
        json_object_set_new(pj, "calibration", calibration_json(&p->hw));
        json_object_set_new(pj, "plan", (json_t *)sp_plan_to_json(p->plan));
        if (p->plan->has_chosen)
            json_object_set_new(pj, "chosen_usd_per_million_tokens",
                                json_real(usd_per_mtok(&p->hw, p->plan->chosen.cost.cost_chip_s_per_token)));
        json_object_set_new(pj, "frontier_chips_tried", json_array());
        for (int k = 0; k < p->n_fchips; k++)
            json_array_append_new(json_object_get(pj, "frontier_chips_tried"), json_integer(p->fchips[k]));
        json_object_set_new(pj, "frontier", p->front ? (json_t *)sp_plan_to_json(p->front) : json_null());
        for (int t = 0; t < r->n_targets; t++) {
            const rep_min *q = &p->mins[t];
            json_t *mj = json_pack("{s:f,s:b}", "target_s", q->target_s, "found", q->found);
            if (q->found) {
                char lay[512];
                json_object_set_new(mj, "chips", json_integer(q->chips));
                json_object_set_new(mj, "latency_s", json_real(q->pt.latency_s));
                json_object_set_new(mj, "cost_chip_s_per_token", json_real(q->pt.cost.cost_chip_s_per_token));
                json_object_set_new(mj, "layout", json_string(sp_layout_format(&q->pt.layout, lay, sizeof lay)));
            } else json_object_set_new(mj, "message", json_string(q->msg));
            json_array_append_new(mins, mj);
        }
        json_object_set_new(pj, "min_chips", mins);
        json_array_append_new(pairs, pj);
    }
    json_object_set_new(root, "pairs", pairs);
    char path[4096];
    path_in(r, "report.json", path, sizeof path);
    int rc = json_dump_file(root, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    json_decref(root);
    if (rc) cli_errorf("cannot write %s", path);
    return rc ? -1 : 0;
}

/* ---- figures ---- */

static int fig_names(const rep *r, const char *stem, char *svg, char *png, size_t n)
{
    char a[512], b[512];
    snprintf(a, sizeof a, "%s.svg", stem);
    snprintf(b, sizeof b, "%s.png", stem);
    path_in(r, a, svg, n);
    path_in(r, b, png, n);
    return 0;
}

static int draw_frontiers(const rep *r, const rep_pair *only, const char *stem)
{
    int n = only ? 1 : r->n_pairs, usd = only ? only->hw.chip_cost_per_hour > 0 : r->priced;
    cli_fig_series se[REP_MAX_ITEMS * REP_MAX_ITEMS];
    double *buf = NULL;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const rep_pair *p = only ? only : &r->pairs[i];
        total += p->front ? (size_t)p->front->n_frontier : 0;
    }
    double mx[REP_MAX_ITEMS * REP_MAX_ITEMS], my[REP_MAX_ITEMS * REP_MAX_ITEMS];
    const char *ml[REP_MAX_ITEMS * REP_MAX_ITEMS];
    char mlab[REP_MAX_ITEMS * REP_MAX_ITEMS][32];
    int nm = 0, ns = 0;
    if (!(buf = malloc(sizeof(double) * 2 * (total + 1)))) return -1;
    size_t off = 0;
    char names[REP_MAX_ITEMS * REP_MAX_ITEMS][160];
    for (int i = 0; i < n; i++) {
        const rep_pair *p = only ? only : &r->pairs[i];
        int k = p->front ? p->front->n_frontier : 0;
        double *x = buf + off, *y = buf + off + k;
        for (int j = 0; j < k; j++) {
            const sp_plan_point *q = &p->front->frontier[j];
            x[j] = q->latency_s * 1e3;
            y[j] = usd ? usd_per_mtok(&p->hw, q->cost.cost_chip_s_per_token) : q->cost.cost_chip_s_per_token;
        }
        off += 2 * (size_t)k;
        snprintf(names[ns], sizeof names[ns], "%s on %s", p->m.name, p->hw.name);
        se[ns++] = (cli_fig_series){names[ns - 1], k, x, y, 1};
        if (p->plan->has_chosen) {
            const sp_plan_point *q = &p->plan->chosen;
            mx[nm] = q->latency_s * 1e3;
            my[nm] = usd ? usd_per_mtok(&p->hw, q->cost.cost_chip_s_per_token) : q->cost.cost_chip_s_per_token;
            snprintf(mlab[nm], sizeof mlab[nm], "%d chips", p->plan->chips);
            ml[nm] = mlab[nm];
            nm++;
        }
    }
    char title[256], xl[128], svg[4096], png[4096];
    snprintf(title, sizeof title, "%s: cost vs latency, batch %lld", only ? names[0] : "all pairs",
             (long long)r->w.batch);
    snprintf(xl, sizeof xl, "%s latency (ms)", sp_plan_latency_name(r->o.latency_metric));
    cli_fig_xy f = {title, xl, usd ? "$ per million generated tokens" : "chip-seconds per generated token", 1, 1, ns,
                    se, nm, mx, my, ml};
    fig_names(r, stem, svg, png, sizeof svg);
    int rc = cli_fig_xy_write(&f, svg, png);
    free(buf);
    return rc;
}

static int draw_min_chips(const rep *r)
{
    cli_fig_series se[REP_MAX_ITEMS * REP_MAX_ITEMS];
    double x[REP_MAX_ITEMS * REP_MAX_ITEMS][REP_MAX_ITEMS], y[REP_MAX_ITEMS * REP_MAX_ITEMS][REP_MAX_ITEMS];
    char names[REP_MAX_ITEMS * REP_MAX_ITEMS][160];
    int any = 0;
    for (int i = 0; i < r->n_pairs; i++) {
        const rep_pair *p = &r->pairs[i];
        int k = 0;
        for (int t = 0; t < r->n_targets; t++)
            if (p->mins[t].found) x[i][k] = p->mins[t].target_s * 1e3, y[i][k] = p->mins[t].chips, k++;
        any += k;
        snprintf(names[i], sizeof names[i], "%s on %s", p->m.name, p->hw.name);
        se[i] = (cli_fig_series){names[i], k, x[i], y[i], 1};
    }
    if (!any) return 1;   /* nothing to draw: the table says why */
    char xl[128], svg[4096], png[4096];
    snprintf(xl, sizeof xl, "%s latency target (ms)", sp_plan_latency_name(r->o.latency_metric));
    cli_fig_xy f = {"fewest chips meeting each latency target", xl, "chips", 1, 1, r->n_pairs, se, 0, NULL, NULL, NULL};
    fig_names(r, "min_chips", svg, png, sizeof svg);
    return cli_fig_xy_write(&f, svg, png);
}

static int draw_pair_bars(const rep *r, const rep_pair *p)
{
    const sp_plan_point *pts[1 + SP_RIVAL_KIND_COUNT];
    const char *roles[1 + SP_RIVAL_KIND_COUNT];
    char names[1 + SP_RIVAL_KIND_COUNT][48];
    const char *labels[1 + SP_RIVAL_KIND_COUNT];
    int n = bar_layouts(p, pts, roles, names);
    if (!n) return 0;
    for (int k = 0; k < n; k++) labels[k] = names[k];
    char title[256], stem[256], svg[4096], png[4096];
    for (int ph = 0; ph < 2; ph++) {
        if ((ph == 0 && r->w.prompt == 0) || (ph == 1 && r->w.gen == 0)) continue;
        double v[(1 + SP_RIVAL_KIND_COUNT) * N_TIME_PARTS], tick[1 + SP_RIVAL_KIND_COUNT];
        for (int k = 0; k < n; k++) {
            const sp_phase_cost *c = ph ? &pts[k]->cost.decode : &pts[k]->cost.prefill;
            time_split(c, v + k * N_TIME_PARTS);
            for (int j = 0; j < N_TIME_PARTS; j++) v[k * N_TIME_PARTS + j] *= 1e3;
            tick[k] = c->time_s * 1e3;
        }
        snprintf(title, sizeof title, "%s on %d x %s: %s time by term", p->m.name, p->plan->chips, p->hw.name,
                 ph ? "decode step" : "prefill");
        cli_fig_bars f = {title, "milliseconds (one micro-batch through every stage)", n, labels, N_TIME_PARTS,
                          time_parts, v, tick, "schedule (overlap hides the rest)", 0, NULL};
        snprintf(stem, sizeof stem, "%s-time-%s", p->tag, ph ? "decode" : "prefill");
        fig_names(r, stem, svg, png, sizeof svg);
        if (cli_fig_bars_write(&f, svg, png)) return -1;
    }
    double v[(1 + SP_RIVAL_KIND_COUNT) * N_MEM_PARTS];
    for (int k = 0; k < n; k++) {
        mem_split(&pts[k]->cost.mem, v + k * N_MEM_PARTS);
        for (int j = 0; j < N_MEM_PARTS; j++) v[k * N_MEM_PARTS + j] /= 1073741824.0;
    }
    snprintf(title, sizeof title, "%s on %d x %s: memory per chip (worst stage)", p->m.name, p->plan->chips, p->hw.name);
    cli_fig_bars f = {title, "GiB per chip", n, labels, N_MEM_PARTS, mem_parts, v, NULL, NULL,
                      (double)pts[0]->cost.capacity / 1073741824.0, "usable HBM"};
    snprintf(stem, sizeof stem, "%s-memory", p->tag);
    fig_names(r, stem, svg, png, sizeof svg);
    return cli_fig_bars_write(&f, svg, png);
}

/* ---- the page: one writer, HTML or Markdown ---- */

typedef struct page {
    FILE *f;
    int md;
    const rep *r;
    int ncols;
} page;

static void esc(page *pg, const char *s)
{
    for (; *s; s++) {
        if (!pg->md && *s == '&') fputs("&amp;", pg->f);
        else if (!pg->md && *s == '<') fputs("&lt;", pg->f);
        else if (!pg->md && *s == '>') fputs("&gt;", pg->f);
        else if (!pg->md && *s == '"') fputs("&quot;", pg->f);
        else if (pg->md && (*s == '|' || *s == '*' || *s == '_' || *s == '<' || *s == '`' || *s == '\\'))
            fprintf(pg->f, "\\%c", *s);
        else fputc(*s, pg->f);
    }
}

static void escf(page *pg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void escf(page *pg, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    esc(pg, buf);
}

static void heading(page *pg, int level, const char *text)
{
    if (pg->md) {
        fprintf(pg->f, "\n%.*s ", level, "######");
        esc(pg, text);
        fputs("\n\n", pg->f);
    } else {
        fprintf(pg->f, "<h%d>", level);
        esc(pg, text);
        fprintf(pg->f, "</h%d>\n", level);
    }
}

static void para_begin(page *pg)
{
    if (!pg->md) fputs("<p>", pg->f);
}

static void para_end(page *pg)
{
    fputs(pg->md ? "\n\n" : "</p>\n", pg->f);
}

static void para(page *pg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void para(page *pg, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    para_begin(pg);
    esc(pg, buf);
    para_end(pg);
}

static void code(page *pg, const char *lang, const char *text)
{
    if (pg->md) fprintf(pg->f, "```%s\n%s\n```\n\n", lang, text);
    else {
        fputs("<pre><code>", pg->f);
        esc(pg, text);
        fputs("</code></pre>\n", pg->f);
    }
}

static void table_begin(page *pg, int ncols, const char *const *hdr)
{
    pg->ncols = ncols;
    if (pg->md) {
        for (int i = 0; i < ncols; i++) {
            fputs("| ", pg->f);
            esc(pg, hdr[i]);
            fputc(' ', pg->f);
        }
        fputs("|\n", pg->f);
        for (int i = 0; i < ncols; i++) fputs("|---", pg->f);
        fputs("|\n", pg->f);
    } else {
        fputs("<table>\n<thead><tr>", pg->f);
        for (int i = 0; i < ncols; i++) {
            fputs("<th>", pg->f);
            esc(pg, hdr[i]);
            fputs("</th>", pg->f);
        }
        fputs("</tr></thead>\n<tbody>\n", pg->f);
    }
}

static void table_row(page *pg, const char *const *cells)
{
    if (!pg->md) fputs("<tr>", pg->f);
    for (int i = 0; i < pg->ncols; i++) {
        fputs(pg->md ? "| " : "<td>", pg->f);
        esc(pg, cells[i] ? cells[i] : "");
        fputs(pg->md ? " " : "</td>", pg->f);
    }
    fputs(pg->md ? "|\n" : "</tr>\n", pg->f);
}

static void table_end(page *pg)
{
    fputs(pg->md ? "\n" : "</tbody>\n</table>\n", pg->f);
}

/* The page's head (HTML: the document, title and one stylesheet) and its <h1>. */
static void page_begin(page *pg, const char *title)
{
    if (pg->md) {
        fputs("# ", pg->f);
        esc(pg, title);
        fputs("\n\n", pg->f);
        return;
    }
    fputs("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
          "<meta charset=\"utf-8\"/>\n<title>", pg->f);
    esc(pg, title);
    fputs("</title>\n<style>\n"
          "body { font-family: sans-serif; max-width: 70em; margin: 2em auto; padding: 0 1em; color: #222; }\n"
          "table { border-collapse: collapse; margin: 0.5em 0 1em; }\n"
          "th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; "
          "overflow-wrap: anywhere; }\n"
          "pre { background: #f4f4f4; padding: 0.5em; overflow-x: auto; white-space: pre-wrap; }\n"
          "figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; }\n"
          "figcaption { font-size: 0.9em; color: #555; }\n"
          "</style>\n</head>\n<body>\n<h1>", pg->f);
    esc(pg, title);
    fputs("</h1>\n", pg->f);
}

static void page_end(page *pg)
{
    if (!pg->md) fputs("</body>\n</html>\n", pg->f);
}

/* A figure: HTML embeds the SVG as a data: URI (no fetch); Markdown links
 * the file.  Both name the PNG and the CSV that hold the same data. */
static int figure(page *pg, const char *stem, const char *caption, const char *csv)
{
    if (pg->md) {
        fprintf(pg->f, "![");
        esc(pg, caption);
        fprintf(pg->f, "](%s.svg)\n\n", stem);
    } else {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.svg", pg->r->dir, stem);
        FILE *in = fopen(path, "rb");
        if (!in) {
            cli_errorf("cannot read %s", path);
            return -1;
        }
        static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        fprintf(pg->f, "<figure>\n<img alt=\"");
        esc(pg, caption);
        fprintf(pg->f, "\" src=\"data:image/svg+xml;base64,");
        unsigned char in3[3];
        size_t k;
        while ((k = fread(in3, 1, 3, in)) > 0) {
            unsigned v = (unsigned)in3[0] << 16 | (k > 1 ? (unsigned)in3[1] << 8 : 0) | (k > 2 ? in3[2] : 0);
            char o[4] = {b64[v >> 18 & 63], b64[v >> 12 & 63], k > 1 ? b64[v >> 6 & 63] : '=', k > 2 ? b64[v & 63] : '='};
            fwrite(o, 1, 4, pg->f);
        }
        int bad = ferror(in);
        fclose(in);
        if (bad) {
            cli_errorf("cannot read %s", path);
            return -1;
        }
        fprintf(pg->f, "\"/>\n<figcaption>");
        esc(pg, caption);
        fputs("</figcaption>\n</figure>\n", pg->f);
    }
    para_begin(pg);
    escf(pg, "Files: %s.svg, %s.png; data: %s%s.", stem, stem, csv, pg->r->db ? "" : " (and report.json)");
    para_end(pg);
    return 0;
}

static void metrics_table(page *pg, const rep_pair *p, const sp_plan_point *q)
{
    static const char *const hdr[2] = {"metric", "value"};
    char a[128], b[64];
    const sp_cost *c = &q->cost;
    table_begin(pg, 2, hdr);
#define ROW(k, v) do { const char *cells_[2] = {k, v}; table_row(pg, cells_); } while (0)
    if (pg->r->w.prompt > 0) ROW("prefill", cli_fmt_seconds(c->prefill_s, a, sizeof a));
    if (pg->r->w.gen > 0) {
        ROW("decode step (last context)", cli_fmt_seconds(c->decode_step_s, a, sizeof a));
        ROW("decode (all tokens)", cli_fmt_seconds(c->decode_s, a, sizeof a));
    }
    ROW("total", cli_fmt_seconds(c->total_s, a, sizeof a));
    snprintf(a, sizeof a, "%.1f", c->tokens_per_s);
    ROW("tokens/s", a);
    snprintf(a, sizeof a, "%.1f %% (prefill %.1f %%, decode %.1f %%)", 100 * c->mfu, 100 * c->mfu_prefill,
             100 * c->mfu_decode);
    ROW("MFU", a);
    snprintf(a, sizeof a, "%.4g", c->cost_chip_s_per_token);
    ROW("chip-seconds per generated token", a);
    if (p->hw.chip_cost_per_hour > 0) {
        snprintf(a, sizeof a, "%s (at $%.4g per chip-hour)", fmt_g(usd_per_mtok(&p->hw, c->cost_chip_s_per_token), b, sizeof b),
                 p->hw.chip_cost_per_hour);
        ROW("$ per million generated tokens", a);
    } else ROW("$ per million generated tokens", "n/a: the profile gives no cost_per_chip_hour");
    char m1[32], m2[32];
    snprintf(a, sizeof a, "%s of %s usable", cli_fmt_bytes((double)c->mem.total, m1, sizeof m1),
             cli_fmt_bytes((double)c->capacity, m2, sizeof m2));
    ROW("memory per chip (worst stage)", a);
    ROW("comm per chip, prefill", cli_fmt_bytes((double)c->comm_bytes_prefill, a, sizeof a));
    ROW("comm per chip, decode step", cli_fmt_bytes((double)c->comm_bytes_decode_step, a, sizeof a));
#undef ROW
    table_end(pg);
}

static void err_row(page *pg, const char *what, double median, double worst)
{
    char a[32], b[32];
    snprintf(a, sizeof a, "%.1f %%", 100 * median);
    snprintf(b, sizeof b, "%.1f %%", 100 * worst);
    const char *cells[3] = {what, a, b};
    table_row(pg, cells);
}

static void provenance(page *pg, const sp_hw *hw)
{
    const sp_hw_calibration *c = &hw->calibration;
    if (hw->chip_cost_per_hour > 0) para(pg, "Price: $%.4g per chip-hour (the profile's cost_per_chip_hour).", hw->chip_cost_per_hour);
    else para(pg, "Price: none in the profile (cost_per_chip_hour), so no dollar figures for %s.", hw->name);
    if (!c->present) {
        para(pg, "Calibration: none. %s is the uncalibrated datasheet prior; it states no error, so its absolute "
                 "times are unverified.", hw->name);
        return;
    }
    para(pg, "Calibration: fitted %s to %s (%d rows, %d models)%s%s.", c->date, c->fitted_to, c->rows, c->models,
         c->transferred_from[0] ? "; overheads transferred from " : "", c->transferred_from);
    static const char *const hdr[3] = {"|predicted/measured - 1|", "median", "worst"};
    table_begin(pg, 3, hdr);
    err_row(pg, "fit, on its training rows", c->median_abs_err, c->worst_abs_err);
    err_row(pg, "uncalibrated prior, same rows", c->median_abs_err_prior, c->worst_abs_err_prior);
    if (c->median_abs_err_lomo >= 0)
        err_row(pg, "leave one model out (rows never fitted)", c->median_abs_err_lomo, c->worst_abs_err_lomo);
    table_end(pg);
}

static int pair_section(page *pg, const rep_pair *p)
{
    const rep *r = pg->r;
    char t[512], lay[512], a[64], b[64], c2[64];
    snprintf(t, sizeof t, "%s on %s", p->m.name, p->hw.name);
    heading(pg, 2, t);
    const sp_plan *pl = p->plan;
    if (!pl->has_chosen) {
        if (pl->min_shortfall_bytes > 0)
            para(pg, "Nothing fits on %d chips (%s): the smallest memory shortfall is %s per chip.", pl->chips,
                 sp_plan_result_name(pl->result), cli_fmt_bytes((double)pl->min_shortfall_bytes, a, sizeof a));
        else
            para(pg, "No layout on %d chips meets the request (%s).", pl->chips, sp_plan_result_name(pl->result));
        if (pl->min_chips_fit > 0) para(pg, "Fewest chips that fit: %d.", pl->min_chips_fit);
    } else {
        para(pg, "Chosen layout on %d chips (%s, objective %s, %s latency):", pl->chips, sp_plan_result_name(pl->result),
             sp_plan_objective_name(pl->opts.objective), sp_plan_latency_name(pl->opts.latency_metric));
        code(pg, "", sp_layout_format(&pl->chosen.layout, lay, sizeof lay));
        metrics_table(pg, p, &pl->chosen);
    }
    char stem[256], cap[512];
    if (p->front && p->front->n_frontier) {
        snprintf(stem, sizeof stem, "%s-frontier", p->tag);
        snprintf(cap, sizeof cap, "Cost vs %s latency of %s on %s over %d chip counts (the cheapest layout at each "
                 "latency); x: the chosen layout on %d chips.", sp_plan_latency_name(r->o.latency_metric), p->m.name,
                 p->hw.name, p->n_fchips, r->chips);
        if (figure(pg, stem, cap, "frontier.csv")) return -1;
        char lat_h[48];
        snprintf(lat_h, sizeof lat_h, "%s latency", sp_plan_latency_name(r->o.latency_metric));
        const char *const hdr[5] = {"chips", lat_h, "chip-s/token", "$/M tokens", "layout"};
        table_begin(pg, 5, hdr);
        for (int k = 0; k < p->front->n_frontier; k++) {
            const sp_plan_point *q = &p->front->frontier[k];
            char n[16];
            snprintf(n, sizeof n, "%d", q->chips);
            snprintf(c2, sizeof c2, "%.4g", q->cost.cost_chip_s_per_token);
            const char *cells[5] = {n, cli_fmt_seconds(q->latency_s, a, sizeof a), c2,
                                    fmt_g(usd_per_mtok(&p->hw, q->cost.cost_chip_s_per_token), b, sizeof b),
                                    sp_layout_format(&q->layout, lay, sizeof lay)};
            table_row(pg, cells);
        }
        table_end(pg);
    } else para(pg, "No frontier: nothing fits at any of the %d chip counts tried.", p->n_fchips);
    if (pl->has_chosen) {
        for (int ph = 0; ph < 2; ph++) {
            if ((ph == 0 && r->w.prompt == 0) || (ph == 1 && r->w.gen == 0)) continue;
            snprintf(stem, sizeof stem, "%s-time-%s", p->tag, ph ? "decode" : "prefill");
            snprintf(cap, sizeof cap, "%s time of the chosen layout and of each rival, by term (stacked: the sum "
                     "if nothing overlapped); the black tick is the schedule's time.", ph ? "Decode-step" : "Prefill");
            if (figure(pg, stem, cap, "time.csv")) return -1;
        }
        snprintf(stem, sizeof stem, "%s-memory", p->tag);
        snprintf(cap, sizeof cap, "Memory per chip of the chosen layout and of each rival (worst stage); dashed: "
                 "usable HBM.");
        if (figure(pg, stem, cap, "memory.csv")) return -1;
        if (pl->n_rivals) {
            heading(pg, 3, "Rivals: the best layout of each other kind, and why it lost");
            static const char *const hdr[5] = {"kind", "lost on", "latency", "$/M tokens", "reason"};
            table_begin(pg, 5, hdr);
            for (int k = 0; k < pl->n_rivals; k++) {
                const sp_plan_rival *q = &pl->rivals[k];
                const char *cells[5] = {sp_plan_rival_kind_name(q->kind), loss_name(q->loss),
                                        cli_fmt_seconds(q->point.latency_s, a, sizeof a),
                                        fmt_g(usd_per_mtok(&p->hw, q->point.cost.cost_chip_s_per_token), b, sizeof b),
                                        q->reason};
                table_row(pg, cells);
            }
            table_end(pg);
        }
    }
    heading(pg, 3, "Hardware profile");
    provenance(pg, &p->hw);
    return 0;
}

static int write_page(const rep *r)
{
    const char *name = r->md ? "report.md" : "report.html";
    FILE *f = open_out(r, name);
    if (!f) return -1;
    page pg = {f, r->md, r, 0};
    char title[1024] = "", a[64], b[64], lay[512];
    size_t k = 0;
    for (int i = 0; i < r->n_pairs && k < sizeof title; i++)
        k += (size_t)snprintf(title + k, sizeof title - k, "%s%s on %s", i ? "; " : "", r->pairs[i].m.name,
                              r->pairs[i].hw.name);
    char full[1100];
    snprintf(full, sizeof full, "Capacity plan: %s", title);
    page_begin(&pg, full);
    para(&pg, "Workload: batch %lld, prompt %lld tokens, %lld generated tokens per sequence, on %d chips; objective %s "
              "(%s latency)%s%s. Figures from shardplan %s's cost model and planner.",
         (long long)r->w.batch, (long long)r->w.prompt, (long long)r->w.gen, r->chips,
         sp_plan_objective_name(r->o.objective), sp_plan_latency_name(r->o.latency_metric),
         r->o.max_latency_s > 0 ? ", latency at most " : "",
         r->o.max_latency_s > 0 ? cli_fmt_seconds(r->o.max_latency_s, a, sizeof a) : "", sp_version());
    para(&pg, "Reproduce this page with:");
    code(&pg, "sh", r->command);

    heading(&pg, 2, "Summary");
    char lat_h[48];
    snprintf(lat_h, sizeof lat_h, "%s latency", sp_plan_latency_name(r->o.latency_metric));
    const char *const sh[8] = {"model", "hardware", "chips", lat_h, "tokens/s", "chip-s/token", "$/M tokens", "layout"};
    table_begin(&pg, 8, sh);
    for (int i = 0; i < r->n_pairs; i++) {
        const rep_pair *p = &r->pairs[i];
        char n[16], tp[32], cs[32];
        snprintf(n, sizeof n, "%d", p->plan->chips);
        if (p->plan->has_chosen) {
            const sp_plan_point *q = &p->plan->chosen;
            snprintf(tp, sizeof tp, "%.1f", q->cost.tokens_per_s);
            snprintf(cs, sizeof cs, "%.4g", q->cost.cost_chip_s_per_token);
            const char *cells[8] = {p->m.name, p->hw.name, n, cli_fmt_seconds(q->latency_s, a, sizeof a), tp, cs,
                                    fmt_g(usd_per_mtok(&p->hw, q->cost.cost_chip_s_per_token), b, sizeof b),
                                    sp_layout_format(&q->layout, lay, sizeof lay)};
            table_row(&pg, cells);
        } else {
            const char *cells[8] = {p->m.name, p->hw.name, n, "-", "-", "-", "-", "nothing fits"};
            table_row(&pg, cells);
        }
    }
    table_end(&pg);
    int rc = 0;
    int any_front = 0;
    for (int i = 0; i < r->n_pairs; i++) any_front |= r->pairs[i].front && r->pairs[i].front->n_frontier > 0;
    if (any_front && r->n_pairs > 1 &&
        figure(&pg, "frontiers", "Cost vs latency of every pair across chip counts; x: each pair's chosen layout.",
               "frontier.csv"))
        rc = -1;

    heading(&pg, 2, "Fewest chips meeting each latency target");
    if (!r->n_targets) para(&pg, "No targets: no pair has a chosen layout to take one from, and --targets-ms was not given.");
    else {
        para(&pg, "For each %s-latency target, the smallest chip count (of those the topology allows, up to %d) "
                  "with a layout that meets it, and the cheapest such layout.%s",
             sp_plan_latency_name(r->o.latency_metric), r->max_chips,
             r->targets_given ? "" : " Targets: each pair's chosen latency rounded up to two significant digits.");
        /* rows: targets; columns: pairs; a cell: chips and $ per M tokens of the cheapest layout
         * meeting the target there (layouts in min_chips.csv and report.json) */
        const char *mh[1 + REP_MAX_ITEMS * REP_MAX_ITEMS];
        char names[REP_MAX_ITEMS * REP_MAX_ITEMS][160], cells_s[REP_MAX_ITEMS * REP_MAX_ITEMS][96], tg[32];
        snprintf(names[0], sizeof names[0], "%s target", sp_plan_latency_name(r->o.latency_metric));
        mh[0] = names[0];
        for (int i = 0; i < r->n_pairs; i++) {
            snprintf(names[i + 1], sizeof names[i + 1], "%s on %s", r->pairs[i].m.name, r->pairs[i].hw.name);
            mh[i + 1] = names[i + 1];
        }
        table_begin(&pg, 1 + r->n_pairs, mh);
        for (int t = 0; t < r->n_targets; t++) {
            const char *row[1 + REP_MAX_ITEMS * REP_MAX_ITEMS];
            row[0] = cli_fmt_seconds(r->targets[t], tg, sizeof tg);
            for (int i = 0; i < r->n_pairs; i++) {
                const rep_pair *p = &r->pairs[i];
                const rep_min *q = &p->mins[t];
                char la[32];
                if (!q->found) snprintf(cells_s[i], sizeof cells_s[i], "none up to %d chips", r->max_chips);
                else if (p->hw.chip_cost_per_hour > 0)
                    snprintf(cells_s[i], sizeof cells_s[i], "%d chip%s, %s, $%s/M tokens", q->chips, q->chips == 1 ? "" : "s",
                             cli_fmt_seconds(q->pt.latency_s, la, sizeof la),
                             fmt_g(usd_per_mtok(&p->hw, q->pt.cost.cost_chip_s_per_token), b, sizeof b));
                else
                    snprintf(cells_s[i], sizeof cells_s[i], "%d chip%s, %s, %.4g chip-s/token", q->chips, q->chips == 1 ? "" : "s",
                             cli_fmt_seconds(q->pt.latency_s, la, sizeof la), q->pt.cost.cost_chip_s_per_token);
                row[i + 1] = cells_s[i];
            }
            table_row(&pg, row);
        }
        table_end(&pg);
        int fr = draw_min_chips(r);
        if (fr < 0) rc = -1;
        else if (fr == 0 && figure(&pg, "min_chips", "Fewest chips meeting each latency target.", "min_chips.csv"))
            rc = -1;
    }
    for (int i = 0; i < r->n_pairs && !rc; i++) rc = pair_section(&pg, &r->pairs[i]);
    heading(&pg, 2, "Files");
    para(&pg, "report.json holds every figure above (the plans as `shardplan plan --json` writes them); frontier.csv, "
              "min_chips.csv, time.csv, memory.csv and rivals.csv hold each figure's data; every figure is also an "
              "SVG and a PNG file in this folder.");
    page_end(&pg);
    if (close_out(f, r, name)) rc = -1;
    return rc;
}

/* ---- a report of a sweep database (--db) ----
 *
 * The rows come from sp_sweep_export's JSON (the library's one reader of the
 * database, which checks its schema version).  Per (hardware, prompt, gen)
 * group: the Pareto frontier of cost against latency of the rows that fit,
 * one series per model (and per given layout for an estimate sweep); for an
 * estimate sweep also each layout's communication per chip against tokens
 * per batch (the paper's figure 3). */

typedef struct db_pt {
    const char *model, *hw, *layout_in, *layout;
    int64_t chips, batch, prompt, gen, comm;
    double lat, cost;
    int series, group, on_front, fits;
} db_pt;

/* Short names for the distinct layouts of an estimate sweep: the key=value
 * items of each layout (full text form) that not every layout shares
 * ("prefill=ws1d/heads,decode=ws1d/heads"). */
static void layout_short(const char *layout, const char *const *all, int n_all, char *out, size_t n)
{
    char buf[512];
    size_t k = 0;
    out[0] = 0;
    snprintf(buf, sizeof buf, "%s", layout);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int common = 1;
        size_t tl = strlen(t);
        for (int i = 0; i < n_all && common; i++) {
            const char *p = all[i];
            int found = 0;
            while (p && *p && !found) {
                const char *e = strchr(p, ',');
                size_t l = e ? (size_t)(e - p) : strlen(p);
                found = l == tl && !strncmp(p, t, l);
                p = e ? e + 1 : NULL;
            }
            common = found;
        }
        if (!common && k < n) k += (size_t)snprintf(out + k, n - k, "%s%s", k ? "," : "", t);
    }
    if (!out[0]) snprintf(out, n, "%s", n_all > 1 ? "layout" : "given layout");
}

static const char *jstr(json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

static int64_t jint(json_t *o, const char *k)
{
    return (int64_t)json_integer_value(json_object_get(o, k));
}

static int cmp_lat(const void *a, const void *b)
{
    const db_pt *x = *(const db_pt *const *)a, *y = *(const db_pt *const *)b;
    return x->lat < y->lat ? -1 : x->lat > y->lat ? 1 : x->cost < y->cost ? -1 : x->cost > y->cost;
}

/* The latency and cost of one row under the metric: decode and prefill use
 * the phase's own cost (chip-seconds per generated, or per prompt, token);
 * total uses cost_chip_s_per_token. */
static int db_metric(json_t *row, sp_plan_latency lm, double *lat, double *cost)
{
    double chips = (double)jint(row, "chips"), b = (double)jint(row, "batch"), pr = (double)jint(row, "prompt");
    double d = json_number_value(json_object_get(row, "decode_step_s"));
    double p = json_number_value(json_object_get(row, "prefill_s"));
    if (lm == SP_PLAN_LAT_DECODE) {
        if (jint(row, "gen") <= 0) return 0;
        *lat = d, *cost = chips * d / b;
    } else if (lm == SP_PLAN_LAT_PREFILL) {
        if (pr <= 0) return 0;
        *lat = p, *cost = chips * p / (b * pr);
    } else {
        *lat = json_number_value(json_object_get(row, "total_s"));
        *cost = json_number_value(json_object_get(row, "cost_chip_s_per_token"));
    }
    return *lat > 0 && *cost > 0;
}

/* A sweep database's page: opened in r's folder (report.html or .md), its
 * title "<what>: <db>", the spec's description.  NULL when it cannot be written. */
static FILE *db_page_begin(const rep *r, const char *what, const char *db_path, json_t *spec, page *pg,
                           const char **name)
{
    *name = r->md ? "report.md" : "report.html";
    FILE *f = open_out(r, *name);
    if (!f) return NULL;
    *pg = (page){f, r->md, r, 0};
    char title[512];
    snprintf(title, sizeof title, "%s: %s", what, db_path);
    page_begin(pg, title);
    const char *desc = jstr(spec, "description");
    if (desc[0]) para(pg, "%s", desc);
    return f;
}

/* The command that reproduces the page and the spec it read. */
static void db_page_spec(page *pg, json_t *spec)
{
    para(pg, "Reproduce this page with:");
    code(pg, "sh", pg->r->command);
    char *specs = json_dumps(spec, JSON_SORT_KEYS | JSON_INDENT(1));
    para(pg, "The sweep's spec (from the database):");
    code(pg, "json", specs ? specs : "null");
    free(specs);
}

/* A fleet sweep's page: per row its point (rate, the most chips of an
 * instance and the largest batch), its fleet's chips, dollars per hour and
 * per million generated tokens, and its pools in one line; the spec and
 * the command that reproduce it.  No figures. */
static int report_fleet_db(rep *r, const char *db_path, json_t *spec, json_t *rows)
{
    page pg;
    const char *name;
    FILE *f = db_page_begin(r, "Fleet sweep report", db_path, spec, &pg, &name);
    if (!f) return CLI_EXIT_USAGE;
    size_t n = json_array_size(rows), n_ok = 0;
    for (size_t i = 0; i < n; i++) n_ok += !strcmp(jstr(json_array_get(rows, i), "status"), "ok");
    json_t *tt = json_object_get(spec, "ttft_ms"), *tp = json_object_get(spec, "tpot_ms");
    char ttft[48] = "no TTFT target", tpot[48] = "no TPOT target";
    if (tt) snprintf(ttft, sizeof ttft, "mean TTFT <= %g ms", json_number_value(tt));
    if (tp) snprintf(tpot, sizeof tpot, "TPOT <= %g ms", json_number_value(tp));
    para(&pg, "%zu rows (compute fleet), %zu with a fleet; %s, %s.  Each fleet uses its row's chip kind alone, "
              "instances of up to the row's chips and batches up to its batch, and minimises %s (shardplan fleet, "
              "doc/planner.md).  Prices are the profiles' cost_per_chip_hour as this shardplan (%s) finds them.",
         n, n_ok, ttft, tpot, jstr(spec, "objective")[0] ? jstr(spec, "objective") : "cost", sp_version());
    static const char *const hdr[11] = {"model", "hw", "chips/inst <=", "batch <=", "prompt", "gen", "req/s",
                                        "chips", "$/h", "$/M tokens", "pools"};
    table_begin(&pg, 11, hdr);
    for (size_t i = 0; i < n; i++) {
        json_t *row = json_array_get(rows, i);
        char c[7][32], pools[1024] = "";
        snprintf(c[0], sizeof c[0], "%lld", (long long)jint(row, "chips"));
        snprintf(c[1], sizeof c[1], "%lld", (long long)jint(row, "batch"));
        snprintf(c[2], sizeof c[2], "%lld", (long long)jint(row, "prompt"));
        snprintf(c[3], sizeof c[3], "%lld", (long long)jint(row, "gen"));
        snprintf(c[4], sizeof c[4], "%.6g", json_number_value(json_object_get(row, "rate")));
        int ok = !strcmp(jstr(row, "status"), "ok");
        snprintf(c[5], sizeof c[5], "%lld", (long long)jint(row, "fleet_chips"));
        snprintf(c[6], sizeof c[6], "%.2f", json_number_value(json_object_get(row, "fleet_cost_per_hour")));
        char mt[32];
        snprintf(mt, sizeof mt, "%.4f", json_number_value(json_object_get(row, "fleet_cost_per_mtok")));
        json_t *fl = json_object_get(row, "fleet");
        for (size_t k = 0; ok && k < json_array_size(fl); k++) {
            json_t *p = json_array_get(fl, k);
            size_t at = strlen(pools);
            snprintf(pools + at, sizeof pools - at, "%s%lld x %lld %s, batch %lld (%s, utilisation %.2f)",
                     k ? "; " : "", (long long)jint(p, "instances"), (long long)jint(p, "chips_per_instance"),
                     jstr(p, "hw"), (long long)jint(p, "batch"), jstr(p, "role"),
                     json_number_value(json_object_get(p, "utilisation")));
        }
        if (!ok) snprintf(pools, sizeof pools, "none: %s", jstr(row, "message"));
        const char *cells[11] = {jstr(row, "model"), jstr(row, "hw"), c[0], c[1], c[2], c[3], c[4],
                                 ok ? c[5] : "-", ok ? c[6] : "-", ok ? mt : "-", pools};
        table_row(&pg, cells);
    }
    table_end(&pg);
    db_page_spec(&pg, spec);
    page_end(&pg);
    if (close_out(f, r, name)) return CLI_EXIT_USAGE;
    printf("%s/%s\n", r->dir, name);
    return CLI_EXIT_OK;
}

static int report_db(rep *r, const char *db_path, int lm_given)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) return CLI_EXIT_INTERNAL;
    sp_status st = sp_sweep_export(db_path, SP_SWEEP_JSON, mem);
    fclose(mem);
    if (st != SP_OK) {
        free(buf);
        return cli_report(st == SP_EIO ? SP_EINVAL : st, NULL);
    }
    json_error_t je;
    json_t *root = json_loadb(buf, len, 0, &je);
    free(buf);
    json_t *spec = json_object_get(root, "spec"), *rows = json_object_get(root, "points");
    if (!root || !json_is_array(rows)) {
        json_decref(root);
        cli_errorf("%s: the export did not parse (%s)", db_path, je.text);
        return CLI_EXIT_INTERNAL;
    }
    const char *compute = jstr(spec, "compute");
    if (!strcmp(compute, "fleet")) {
        int rc = report_fleet_db(r, db_path, spec, rows);
        json_decref(root);
        return rc;
    }
    if (!strcmp(compute, "frontier")) {
        /* its rows hold whole frontiers (column frontier), not one layout */
        json_decref(root);
        cli_errorf("%s: a report of a \"frontier\" sweep is not implemented (report reads estimate, plan and "
                   "fleet sweeps)", db_path);
        return CLI_EXIT_USAGE;
    }
    int estimate = !strcmp(compute, "estimate");
    if (!lm_given && json_is_string(json_object_get(spec, "latency_metric")))
        sp_plan_latency_parse(jstr(spec, "latency_metric"), &r->o.latency_metric);
    sp_plan_latency lm = r->o.latency_metric;
    size_t n = json_array_size(rows);
    db_pt *pts = calloc(n + 1, sizeof *pts);
    db_pt **ord = calloc(n + 1, sizeof *ord);
    const char **lays = calloc(n + 1, sizeof *lays);
    char (*snames)[256] = calloc(n + 1, sizeof *snames), (*gnames)[256] = calloc(n + 1, sizeof *gnames);
    int rc = CLI_EXIT_OK, ns = 0, ng = 0, npts = 0;
    int64_t n_ok = 0, n_fit = 0;
    if (!pts || !ord || !snames || !gnames || !lays) {
        rc = CLI_EXIT_INTERNAL;
        goto out;
    }
    int nl = 0, n_models = 0;
    const char *models_seen[REP_MAX_ITEMS];
    for (size_t i = 0; i < n; i++) {
        json_t *row = json_array_get(rows, i);
        const char *l = jstr(row, "layout_in"), *m = jstr(row, "model");
        int k;
        for (k = 0; k < nl && strcmp(lays[k], l); k++) {}
        if (k == nl) lays[nl++] = l;
        for (k = 0; k < n_models && strcmp(models_seen[k], m); k++) {}
        if (k == n_models && n_models < REP_MAX_ITEMS) models_seen[n_models++] = m;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *row = json_array_get(rows, i);
        if (strcmp(jstr(row, "status"), "ok")) continue;
        n_ok++;
        db_pt *q = &pts[npts];
        q->fits = jint(row, "feasible") == 1;
        n_fit += q->fits;
        q->model = jstr(row, "model"), q->hw = jstr(row, "hw"), q->layout_in = jstr(row, "layout_in");
        q->layout = estimate ? q->layout_in : jstr(row, "layout");
        q->chips = jint(row, "chips"), q->batch = jint(row, "batch"), q->prompt = jint(row, "prompt");
        q->gen = jint(row, "gen");
        q->comm = q->gen > 0 && q->prompt == 0 ? jint(row, "comm_bytes_decode_step") : jint(row, "comm_bytes_prefill");
        if (!db_metric(row, lm, &q->lat, &q->cost)) q->lat = q->cost = NAN;
        char g[256], sn[256];
        snprintf(g, sizeof g, "%s, prompt %lld, gen %lld", q->hw, (long long)q->prompt, (long long)q->gen);
        if (estimate) {
            char sl[200];
            layout_short(q->layout_in, lays, nl, sl, sizeof sl);
            if (n_models > 1) snprintf(sn, sizeof sn, "%s %s", q->model, sl);
            else snprintf(sn, sizeof sn, "%s", sl);
        } else snprintf(sn, sizeof sn, "%s", q->model);
        int k;
        for (k = 0; k < ng && strcmp(gnames[k], g); k++) {}
        if (k == ng) snprintf(gnames[ng++], 256, "%s", g);
        q->group = k;
        for (k = 0; k < ns && strcmp(snames[k], sn); k++) {}
        if (k == ns) snprintf(snames[ns++], 256, "%s", sn);
        q->series = k;
        npts++;
    }
    /* frontier per (group, series): by latency, each point cheaper than every faster one */
    for (int i = 0; i < npts; i++) ord[i] = &pts[i];
    qsort(ord, (size_t)npts, sizeof *ord, cmp_lat);
    for (int g = 0; g < ng; g++)
        for (int se = 0; se < ns; se++) {
            /* ties (same latency and cost) are all on it: none beats another */
            double best = INFINITY, best_lat = -1;
            for (int i = 0; i < npts; i++) {
                db_pt *q = ord[i];
                if (q->group != g || q->series != se || !q->fits) continue;
                if (!(q->cost < best) && !(q->cost == best && q->lat == best_lat)) continue;
                q->on_front = 1;
                best = q->cost, best_lat = q->lat;
            }
        }
    /* hardware profiles, for price and provenance: as the data reads now */
    sp_hw hws[REP_MAX_ITEMS];
    int nh = 0;
    for (int i = 0; i < npts && nh < REP_MAX_ITEMS; i++) {
        int k;
        for (k = 0; k < nh && strcmp(hws[k].name, pts[i].hw); k++) {}
        if (k < nh) continue;
        sp_error err;
        sp_error_init(&err);
        if (sp_hw_find(pts[i].hw, &hws[nh], &err) != SP_OK) {
            rc = cli_report(SP_EINVAL, &err);
            goto out;
        }
        snprintf(hws[nh].name, sizeof hws[nh].name, "%s", pts[i].hw);   /* "a100-80g:uncalibrated" stays itself */
        nh++;
    }
    const char *unit = lm == SP_PLAN_LAT_PREFILL ? "prompt" : "generated";
    /* CSV: every fitting row with its metric and frontier flag */
    FILE *cf = open_out(r, "frontier.csv");
    if (!cf) {
        rc = CLI_EXIT_USAGE;
        goto out;
    }
    fprintf(cf, "model,hw,chips,batch,prompt,gen,layout_in,latency_metric,latency_s,cost_chip_s_per_token,"
                "usd_per_million_tokens,on_frontier,layout\n");
    for (int i = 0; i < npts; i++) {
        const db_pt *q = &pts[i];
        const sp_hw *h = NULL;
        if (!q->fits) continue;
        char b[64];
        for (int k = 0; k < nh; k++)
            if (!strcmp(hws[k].name, q->hw)) h = &hws[k];
        fprintf(cf, "%s,%s,%lld,%lld,%lld,%lld,", q->model, q->hw, (long long)q->chips, (long long)q->batch,
                (long long)q->prompt, (long long)q->gen);
        csv_str(cf, q->layout_in);
        fprintf(cf, ",%s,%.9g,%.9g,%s,%d,", sp_plan_latency_name(lm), q->lat, q->cost,
                fmt_g(h ? usd_per_mtok(h, q->cost) : NAN, b, sizeof b), q->on_front);
        csv_str(cf, q->layout);
        fputc('\n', cf);
    }
    if (close_out(cf, r, "frontier.csv")) {
        rc = CLI_EXIT_USAGE;
        goto out;
    }
    if (estimate) {
        if (!(cf = open_out(r, "comm.csv"))) {
            rc = CLI_EXIT_USAGE;
            goto out;
        }
        fprintf(cf, "model,hw,chips,batch,prompt,gen,tokens_per_batch,comm_bytes_per_chip,phase,fits,layout\n");
        for (int i = 0; i < npts; i++) {
            const db_pt *q = &pts[i];
            int dec = q->gen > 0 && q->prompt == 0;
            fprintf(cf, "%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%s,%d,", q->model, q->hw, (long long)q->chips,
                    (long long)q->batch, (long long)q->prompt, (long long)q->gen,
                    (long long)(dec ? q->batch : q->batch * q->prompt), (long long)q->comm,
                    dec ? "decode_step" : "prefill", q->fits);
            csv_str(cf, q->layout_in);
            fputc('\n', cf);
        }
        if (close_out(cf, r, "comm.csv")) {
            rc = CLI_EXIT_USAGE;
            goto out;
        }
    }
    /* figures: per group, one frontier figure (and a communication figure for estimate sweeps) */
    for (int g = 0; g < ng && rc == CLI_EXIT_OK; g++) {
        cli_fig_series *se = calloc((size_t)ns, sizeof *se);
        double *xy = calloc((size_t)npts * 4 + 1, sizeof *xy);
        if (!se || !xy) {
            free(se), free(xy);
            rc = CLI_EXIT_INTERNAL;
            break;
        }
        int used = 0, k = 0, usd = 1;
        for (int s2 = 0; s2 < ns; s2++) {
            double *x = xy + used, *y = xy + used + npts;
            int m = 0;
            for (int i = 0; i < npts; i++) {
                const db_pt *q = ord[i];
                if (q->group != g || q->series != s2 || !q->on_front) continue;
                for (int h = 0; h < nh; h++)
                    if (!strcmp(hws[h].name, q->hw) && !(hws[h].chip_cost_per_hour > 0)) usd = 0;
                x[m] = q->lat * 1e3, y[m] = q->cost, m++;
            }
            if (!m) continue;
            se[k++] = (cli_fig_series){snames[s2], m, x, y, 1};
            used += m;
            (void)used;
        }
        /* dollars when the group's hardware has a price (one hardware per group) */
        const sp_hw *gh = NULL;
        for (int i = 0; i < npts; i++)
            if (pts[i].group == g)
                for (int h = 0; h < nh; h++)
                    if (!strcmp(hws[h].name, pts[i].hw)) gh = &hws[h];
        if (usd && gh)
            for (int s2 = 0; s2 < k; s2++)
                for (int i = 0; i < se[s2].n; i++) ((double *)se[s2].y)[i] = usd_per_mtok(gh, se[s2].y[i]);
        char title[400], xl[64], yl[64], svg[4096], png[4096], stem[64];
        snprintf(title, sizeof title, "%s: cost vs %s latency (frontier of the sweep)", gnames[g], sp_plan_latency_name(lm));
        snprintf(xl, sizeof xl, "%s latency (ms)", sp_plan_latency_name(lm));
        const char *gu = unit;
        for (int i = 0; i < npts; i++)
            if (pts[i].group == g && pts[i].gen == 0) gu = "prompt";   /* gen 0: cost per prompt token */
        snprintf(yl, sizeof yl, usd && gh ? "$ per million %s tokens" : "chip-seconds per %s token", gu);
        cli_fig_xy f = {title, xl, yl, 1, 1, k, se, 0, NULL, NULL, NULL};
        snprintf(stem, sizeof stem, "g%d-frontier", g + 1);
        fig_names(r, stem, svg, png, sizeof svg);
        if (k && cli_fig_xy_write(&f, svg, png)) rc = CLI_EXIT_INTERNAL;
        if (estimate && rc == CLI_EXIT_OK) {
            /* communication per chip against tokens per batch, one series per layout */
            k = 0, used = 0;
            for (int s2 = 0; s2 < ns; s2++) {
                double *x = xy + 2 * (size_t)npts + used, *y = xy + 3 * (size_t)npts + used;
                int m = 0;
                for (int i = 0; i < npts; i++) {
                    const db_pt *q = &pts[i];
                    if (q->group != g || q->series != s2 || q->comm <= 0) continue;
                    int dec = q->gen > 0 && q->prompt == 0;
                    x[m] = (double)(dec ? q->batch : q->batch * q->prompt), y[m] = (double)q->comm / 1048576.0, m++;
                }
                if (!m) continue;
                se[k++] = (cli_fig_series){snames[s2], m, x, y, 1};
                used += m;
            }
            snprintf(title, sizeof title, "%s: communication per chip", gnames[g]);
            cli_fig_xy f2 = {title, "tokens per batch", "MiB per chip", 1, 1, k, se, 0, NULL, NULL, NULL};
            snprintf(stem, sizeof stem, "g%d-comm", g + 1);
            fig_names(r, stem, svg, png, sizeof svg);
            if (k && cli_fig_xy_write(&f2, svg, png)) rc = CLI_EXIT_INTERNAL;
        }
        free(se), free(xy);
    }
    if (rc != CLI_EXIT_OK) goto out;
    /* the page */
    page pg;
    const char *name;
    FILE *f = db_page_begin(r, "Sweep report", db_path, spec, &pg, &name);
    if (!f) {
        rc = CLI_EXIT_USAGE;
        goto out;
    }
    para(&pg, "%zu rows (compute %s): %lld priced, %lld of them fit in memory; the frontiers use the %lld that fit. "
              "Latency: %s; cost: chip-seconds per %s token%s. Hardware prices and calibrations are read from the "
              "profiles as this shardplan (%s) finds them.",
         n, compute, (long long)n_ok, (long long)n_fit, (long long)n_fit, sp_plan_latency_name(lm), unit,
         lm == SP_PLAN_LAT_TOTAL ? " (chips x total time / generated tokens; prompt tokens where gen is 0)"
         : lm == SP_PLAN_LAT_DECODE ? " (chips x decode step / batch)" : " (chips x prefill / (batch x prompt))",
         sp_version());
    db_page_spec(&pg, spec);
    for (int g = 0; g < ng && !rc; g++) {
        heading(&pg, 2, gnames[g]);
        char stem[64], cap[512];
        snprintf(stem, sizeof stem, "g%d-frontier", g + 1);
        snprintf(cap, sizeof cap, "Cost vs %s latency: per series, the rows no other row beats on both.",
                 sp_plan_latency_name(lm));
        if (figure(&pg, stem, cap, "frontier.csv")) rc = CLI_EXIT_INTERNAL;
        char lat_h[48], cost_h[48];
        snprintf(lat_h, sizeof lat_h, "%s latency", sp_plan_latency_name(lm));
        const char *gu = unit;
        for (int i = 0; i < npts; i++)
            if (pts[i].group == g && pts[i].gen == 0) gu = "prompt";
        snprintf(cost_h, sizeof cost_h, "chip-s/%s token", gu);
        const char *const hdr[6] = {"series", "chips", "batch", lat_h, cost_h, "layout"};
        table_begin(&pg, 6, hdr);
        for (int i = 0; i < npts; i++) {
            const db_pt *q = ord[i];
            if (q->group != g || !q->on_front) continue;
            char c1[24], c2[24], c3[32], c4[32];
            snprintf(c1, sizeof c1, "%lld", (long long)q->chips);
            snprintf(c2, sizeof c2, "%lld", (long long)q->batch);
            snprintf(c4, sizeof c4, "%.4g", q->cost);
            const char *cells[6] = {snames[q->series], c1, c2, cli_fmt_seconds(q->lat, c3, sizeof c3), c4, q->layout};
            table_row(&pg, cells);
        }
        table_end(&pg);
        if (estimate && !rc) {
            snprintf(stem, sizeof stem, "g%d-comm", g + 1);
            if (figure(&pg, stem, "Communication per chip (bytes each chip sends: the whole prefill, or one decode "
                       "step) against tokens per batch, per layout; every priced row, whether or not it fits in "
                       "memory (comm.csv says which fit).", "comm.csv"))
                rc = CLI_EXIT_INTERNAL;
        }
    }
    for (int h = 0; h < nh && !rc; h++) {
        char t[128];
        snprintf(t, sizeof t, "Hardware profile: %.100s", hws[h].name);
        heading(&pg, 2, t);
        provenance(&pg, &hws[h]);
    }
    page_end(&pg);
    if (close_out(f, r, name)) rc = CLI_EXIT_USAGE;
    if (!rc) printf("%s/%s\n", r->dir, name);
out:
    free(pts), free(ord), free(snames), free(gnames), free(lays);
    json_decref(root);
    return rc;
}

/* File-name stem of a pair: model_hw with anything but [A-Za-z0-9.-] as '-'. */
static void make_tag(rep_pair *p)
{
    snprintf(p->tag, sizeof p->tag, "%s_%s", p->m.name, p->hw.name);
    for (char *c = p->tag; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '-' || *c == '_'))
            *c = '-';
}

/* The command that reproduces the page: shardplan and argv, shell-quoted. */
static int make_command(rep *r, int argc, char **argv)
{
    size_t k = (size_t)snprintf(r->command, sizeof r->command, "shardplan");
    for (int i = 0; i < argc && k + 2 < sizeof r->command; i++) {
        r->command[k++] = ' ';
        k += shell_quote(argv[i], r->command + k, sizeof r->command - k);
    }
    if (k >= sizeof r->command) return cli_usage("report", "command line too long to reproduce in the report");
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int cli_cmd_report(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"hw", required_argument, 0, 'w'},
        {"chips", required_argument, 0, 'n'}, {"batch", required_argument, 0, 'b'},
        {"prompt", required_argument, 0, 'p'}, {"gen", required_argument, 0, 'g'},
        {"objective", required_argument, 0, 'o'}, {"latency-metric", required_argument, 0, 'L'},
        {"max-latency-ms", required_argument, 0, 'x'}, {"weights", required_argument, 0, 'W'},
        {"time-limit-ms", required_argument, 0, 'T'}, {"targets-ms", required_argument, 0, 't'},
        {"frontier-chips", required_argument, 0, 'F'}, {"max-chips", required_argument, 0, 'M'},
        {"out", required_argument, 0, 'O'}, {"format", required_argument, 0, 'f'},
        {"db", required_argument, 0, 'D'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *models[REP_MAX_ITEMS], *hws[REP_MAX_ITEMS], *fchips_arg = NULL, *format = "html", *db = NULL;
    int problem_opts = 0, lm_given = 0;
    static char mstore[4096], hstore[4096];
    int nm = 0, nh = 0, ch;
    long long chips = 0, batch = 0, prompt = -1, gen = -1, tl = 0, maxc = 0;
    rep r;
    memset(&r, 0, sizeof r);
    sp_plan_opts_init(&r.o);
    optind = 0;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        sp_status st = SP_OK;
        double v;
        switch (ch) {
        case 'm': if (nm) return cli_usage("report", "--model given twice: list models as --model A,B");
            if (split_list("--model", optarg, models, mstore, sizeof mstore, &nm)) return CLI_EXIT_USAGE;
            break;
        case 'w': if (nh) return cli_usage("report", "--hw given twice: list hardware as --hw A,B");
            if (split_list("--hw", optarg, hws, hstore, sizeof hstore, &nh)) return CLI_EXIT_USAGE;
            break;
        case 'n': if (cli_parse_long("report", "--chips", optarg, 1, 1 << 20, &chips)) return CLI_EXIT_USAGE; break;
        case 'b': if (cli_parse_long("report", "--batch", optarg, 1, 1 << 24, &batch)) return CLI_EXIT_USAGE; break;
        case 'p': if (cli_parse_long("report", "--prompt", optarg, 0, 1 << 24, &prompt)) return CLI_EXIT_USAGE; break;
        case 'g': if (cli_parse_long("report", "--gen", optarg, 0, 1 << 24, &gen)) return CLI_EXIT_USAGE; break;
        case 'M': if (cli_parse_long("report", "--max-chips", optarg, 1, 1 << 20, &maxc)) return CLI_EXIT_USAGE; break;
        case 'T': if (cli_parse_long("report", "--time-limit-ms", optarg, 1, 1 << 30, &tl)) return CLI_EXIT_USAGE;
            r.o.time_limit_ms = (int)tl;
            break;
        case 'o': st = sp_plan_objective_parse(optarg, &r.o.objective); break;
        case 'L': st = sp_plan_latency_parse(optarg, &r.o.latency_metric); break;
        case 'W': st = sp_plan_weights_parse(optarg, &r.o.weights); break;
        case 'x': if (cli_parse_double("report", "--max-latency-ms", optarg, &v)) return CLI_EXIT_USAGE;
            r.o.max_latency_s = v * 1e-3;
            break;
        case 't': if (parse_numbers("--targets-ms", optarg, r.targets, REP_MAX_ITEMS, &r.n_targets, 0))
                return CLI_EXIT_USAGE;
            r.targets_given = 1;
            break;
        case 'F': fchips_arg = optarg; break;
        case 'O': r.dir = optarg; break;
        case 'D': db = optarg; break;
        case 'f': format = optarg; break;
        case 'h': fputs(report_usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage("report", "unknown option '%s'", argv[optind - 1]);
        }
        if (st != SP_OK) return cli_usage("report", "%s", sp_last_error());
        if (ch == 'L') lm_given = 1;
        else if (ch != 'O' && ch != 'f' && ch != 'D') problem_opts = 1;
    }
    if (optind < argc) return cli_usage("report", "unexpected argument '%s'", argv[optind]);
    if (strcmp(format, "html") && strcmp(format, "md"))
        return cli_usage("report", "--format: expected html or md, got \"%s\"", format);
    r.md = !strcmp(format, "md");
    if (db) {
        if (problem_opts)
            return cli_usage("report", "--db takes only --out, --format and --latency-metric: the problem is the sweep's");
        if (!r.dir) return cli_usage("report", "--out is required");
        if (make_command(&r, argc, argv)) return CLI_EXIT_USAGE;
        if (mkdir(r.dir, 0777) != 0 && errno != EEXIST) {
            cli_errorf("cannot create %s: %s", r.dir, strerror(errno));
            return CLI_EXIT_USAGE;
        }
        r.db = 1;
        return report_db(&r, db, lm_given);
    }
    if (!nm || !nh || !chips || !batch || prompt < 0 || gen < 0 || !r.dir)
        return cli_usage("report", "--model, --hw, --chips, --batch, --prompt, --gen and --out are required");
    if (gen == 0) return cli_usage("report", "--gen must be > 0: the report prices generated tokens");
    if (r.o.latency_metric == SP_PLAN_LAT_PREFILL && prompt == 0)
        return cli_usage("report", "--latency-metric prefill needs --prompt > 0");
    double fc[REP_MAX_FCHIPS];
    int nfc = 0;
    if (fchips_arg && parse_numbers("--frontier-chips", fchips_arg, fc, REP_MAX_FCHIPS, &nfc, 1)) return CLI_EXIT_USAGE;
    for (int i = 0; i < r.n_targets; i++) r.targets[i] *= 1e-3;
    r.w = (sp_workload){batch, prompt, gen};
    r.chips = (int)chips;
    r.o.frontier = 1;
    r.o.rivals = 1;
    if (make_command(&r, argc, argv)) return CLI_EXIT_USAGE;

    if (mkdir(r.dir, 0777) != 0 && errno != EEXIST) {
        cli_errorf("cannot create %s: %s", r.dir, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    r.n_pairs = nm * nh;
    if (!(r.pairs = calloc((size_t)r.n_pairs, sizeof *r.pairs))) return CLI_EXIT_INTERNAL;
    int rc = CLI_EXIT_OK;
    r.priced = 1;
    for (int i = 0; i < nm && rc == CLI_EXIT_OK; i++)
        for (int j = 0; j < nh && rc == CLI_EXIT_OK; j++) {
            rep_pair *p = &r.pairs[i * nh + j];
            p->model_arg = models[i], p->hw_arg = hws[j];
            rc = cli_load_problem(models[i], hws[j], prompt + gen, &p->m, &p->hw);
            if (rc) break;
            if (r.o.weights == SP_PLAN_W_FP8 && p->hw.peak_flops[SP_DT_FP8] <= 0)
                rc = cli_usage("report", "--weights fp8: %s has no fp8 peak", p->hw.name);
            make_tag(p);
            for (int q = 0; q < i * nh + j && !rc; q++)
                if (!strcmp(r.pairs[q].tag, p->tag))
                    rc = cli_usage("report", "%s on %s appears twice", p->m.name, p->hw.name);
            r.priced &= p->hw.chip_cost_per_hour > 0;
            p->n_fchips = nfc;
            for (int q = 0; q < nfc; q++) p->fchips[q] = (int)fc[q];
        }
    int hw_max = 0;
    for (int i = 0; i < r.n_pairs && !rc; i++) hw_max = hw_max > r.pairs[i].hw.max_chips ? hw_max : r.pairs[i].hw.max_chips;
    r.max_chips = maxc ? (int)maxc : (int)(chips * 8 < (1 << 20) ? chips * 8 : 1 << 20);
    if (!maxc && hw_max > 0 && r.max_chips > hw_max) r.max_chips = hw_max > chips ? hw_max : (int)chips;
    for (int i = 0; i < r.n_pairs && rc == CLI_EXIT_OK; i++) rc = compute_pair(&r, &r.pairs[i]);
    if (rc == CLI_EXIT_OK && !r.targets_given) {
        for (int i = 0; i < r.n_pairs && r.n_targets < REP_MAX_ITEMS; i++)
            if (r.pairs[i].plan->has_chosen) r.targets[r.n_targets++] = round_up_2sig(r.pairs[i].plan->chosen.latency_s);
    }
    if (rc == CLI_EXIT_OK) {
        qsort(r.targets, (size_t)r.n_targets, sizeof r.targets[0], cmp_double);
        int u = 0;
        for (int i = 0; i < r.n_targets; i++)
            if (!u || r.targets[i] != r.targets[u - 1]) r.targets[u++] = r.targets[i];
        r.n_targets = u;
    }
    for (int i = 0; i < r.n_pairs && rc == CLI_EXIT_OK; i++) rc = compute_mins(&r, &r.pairs[i]);
    if (rc == CLI_EXIT_OK) {
        char stem[256];
        for (int i = 0; i < r.n_pairs && !rc; i++) {
            rep_pair *p = &r.pairs[i];
            if (p->front && p->front->n_frontier) {
                snprintf(stem, sizeof stem, "%s-frontier", p->tag);
                if (draw_frontiers(&r, p, stem)) rc = CLI_EXIT_INTERNAL;
            }
            if (!rc && draw_pair_bars(&r, p)) rc = CLI_EXIT_INTERNAL;
        }
        int any_front = 0;
        for (int i = 0; i < r.n_pairs; i++) any_front |= r.pairs[i].front && r.pairs[i].front->n_frontier > 0;
        if (!rc && any_front && r.n_pairs > 1 && draw_frontiers(&r, NULL, "frontiers")) rc = CLI_EXIT_INTERNAL;
        if (!rc && (write_csvs(&r) || write_json(&r) || write_page(&r))) rc = CLI_EXIT_INTERNAL;
    }
    int any = 0;
    for (int i = 0; i < r.n_pairs; i++) {
        any |= r.pairs[i].plan && r.pairs[i].plan->has_chosen;
        sp_plan_free(r.pairs[i].plan);
        sp_plan_free(r.pairs[i].front);
    }
    free(r.pairs);
    if (rc == CLI_EXIT_OK) {
        printf("%s/%s\n", r.dir, r.md ? "report.md" : "report.html");
        if (!any) return CLI_EXIT_INFEASIBLE;
    }
    return rc;
}
