/* cmd_run.c: `shardplan run`: run a model under a layout (given, or planned
 * with sp_autoconfig) on the threads backend, or one chip per rank under
 * `mpirun -np N shardplan run --backend mpi` (CPUs) or `--backend cuda` (one
 * GPU per rank, NCCL). */
#include "config.h"
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "sp_plan.h"
#include "exec/sp_exec.h"
#ifdef HAVE_MPI
#include <mpi.h>
#endif

static void usage(void)
{
    printf("usage: shardplan run --model M --batch B --prompt P --gen G --layout FILE|STRING|auto\n"
           "                     [--chips N] [--hw H] [--backend threads|mpi|cuda] [--seed S]\n"
           "                     [--weights DIR] [--weights-dtype f32|bf16|f16|int8|fp8]\n"
           "                     [--temperature T [--top-k K] [--top-p P]] [--prompt-ids FILE|-]\n"
           "                     [--logits FILE [--logits-all]] [--trace FILE] [--warmup N] [--json]\n"
           "       shardplan run --model M --workload FILE --layout FILE|STRING [options]\n"
           "Runs prefill + decode of M under a layout and checks that every collective moves\n"
           "the bytes the lowering predicts.  Weights are random (seed S) unless --weights\n"
           "names a Hugging Face checkpoint; prompt tokens are pseudo-random from the seed\n"
           "unless --prompt-ids gives them.\n"
           "  --weights DIR      config.json + *.safetensors (Llama or GPT-2 tensor names),\n"
           "                     mmapped: each chip reads only its slice of every matrix\n"
           "                     (int8/fp8: whole columns, for the scales); --model may then be\n"
           "                     omitted (DIR/config.json is read)\n"
           "  --temperature T    sample (top-k / top-p, seeded per sequence by S) instead of\n"
           "                     greedy decoding; T <= 0 is greedy (default)\n"
           "  --layout auto      plan the layout with sp_autoconfig (minimum total latency) for\n"
           "                     --chips N chips of the hardware --hw H (required: H only decides\n"
           "                     the split; the run is on this machine's CPUs, or GPUs with\n"
           "                     --backend cuda).  The chosen layout is printed.\n"
           "  --backend threads  every chip is a thread of this process (default)\n"
           "  --backend mpi      one chip per rank: mpirun -np N shardplan run --backend mpi ...\n"
           "                     (rank 0 prints; every rank checks the inputs alike)\n"
           "  --backend cuda     one chip per rank on its own GPU (cuBLAS + CUDA kernels, NCCL\n"
           "                     collectives): mpirun -np N shardplan run --backend cuda ...,\n"
           "                     or without mpirun for 1 chip; the same weights and KV dtypes\n"
           "                     as threads and mpi (weights f32/bf16/f16/int8/fp8, KV f32/bf16).\n"
           "                     No visible GPU (or a build without CUDA): exit 2 with the reason\n"
           "  --weights-dtype    storage of the layer matrices (default: the layout's)\n"
           "  --prompt-ids FILE  prompt token ids: one sequence per line, ids separated by\n"
           "                     spaces, or a JSON array of arrays; - reads stdin (not under\n"
           "                     mpirun).  Sets --batch and --prompt (if given, they must\n"
           "                     agree).  Prompts of different lengths are refused here: give\n"
           "                     their lengths as a --workload\n"
           "  --workload FILE    a ragged batch instead of --batch/--prompt/--gen: each sequence's\n"
           "                     own prompt and gen (CSV \"prompt,gen\" lines or JSON,\n"
           "                     doc/formats.md), run without padding (threads and mpi; the\n"
           "                     layouts estimate --workload takes); tokens: each sequence's gen\n"
           "  --logits FILE      write the last step's logits as NumPy .npy, float32\n"
           "                     (batch, vocab): the logits the last token was chosen from\n"
           "  --logits-all       --logits holds every step's: (gen, batch, vocab)\n"
           "  --warmup N         run N times untimed first (default 0): the measured run then\n"
           "                     excludes first touch of the chips' memory and cold caches, as\n"
           "                     validate's measurements do (a first run's prefill on a CPU can\n"
           "                     take several times its steady-state time)\n"
           "  --trace FILE       write the measured timeline: every step of every chip with its\n"
           "                     wall time, in Chrome Trace Event JSON (Perfetto, chrome://tracing),\n"
           "                     the step names and ids of `shardplan simulate --trace`; a rank\n"
           "                     that hosts one chip of several writes FILE.<chip>\n"
           "  --hw H             with a given layout: the profile the run is priced with (default:\n"
           "                     $SHARDPLAN_LOCAL_HW, the profile calibrate --backend wrote); the\n"
           "                     predicted prefill and decode step (decode_s / gen) and the time per\n"
           "                     step kind are printed beside the measured ones with the relative\n"
           "                     error; no profile: measured only\n"
           "Exit 0: ran and bytes matched; 1: no layout fits (auto) or bytes differ;\n"
           "2: bad usage, or the layout does not apply to the model and job (reason on stderr).\n");
}

typedef struct run_args {
    const char *model, *layout, *wdt, *hw, *logits, *weights, *prompt_ids, *trace, *workload;
    int logits_all;
    int32_t *ids;   /* --prompt-ids: (B, P), owned */
    long long chips, B, P, G, seed, top_k;
    long long warmup;   /* --warmup: untimed runs before the one measured */
    double temperature, top_p;
    int json, mpi;   /* mpi: one chip per MPI rank (--backend mpi or cuda) */
    int cuda;        /* --backend cuda: the chips are GPUs, the collectives NCCL's */
} run_args;

static int is_root = 1;   /* prints (MPI: rank 0) */

static const char *backend_label(const run_args *a) { return a->cuda ? "cuda" : a->mpi ? "mpi" : "threads"; }

static int fail(sp_status st, const sp_error *err)
{
    if (is_root) return cli_report(st, err);
    return cli_exit_for(st);
}

static json_t *bytes_obj(const uint64_t *v)
{
    json_t *o = json_object();
    for (int k = 0; k < SP_COLL_COUNT; k++) json_object_set_new(o, sp_coll_kind_name(k), json_integer((json_int_t)v[k]));
    return o;
}

static json_t *kinds_obj(const double *v)
{
    json_t *o = json_object();
    for (int k = 0; k < SP_CLASS_COUNT; k++) json_object_set_new(o, sp_step_class_name((sp_step_class)k), json_real(v[k]));
    return o;
}

static double rel_err(double pred, double meas) { return meas > 0 ? (pred - meas) / meas : 0; }

/* The prediction beside the measurement (pred NULL: none was made). */
static void print_prediction(const run_args *a, const char *hw_name, const cli_prediction *p, const sp_exec_stats *s,
                             json_t *o)
{
    if (o) {
        json_t *steps = json_pack("{s:o,s:o}", "prefill", kinds_obj(p->kinds.prefill), "decode_step",
                                  kinds_obj(p->kinds.decode_step));
        json_object_set_new(o, "predicted", json_pack("{s:s,s:s,s:f,s:f,s:o}", "hw", hw_name, "activations", "f32",
                                                      "prefill_s", p->prefill_s, "decode_step_s", p->decode_step_s,
                                                      "steps", steps));
        json_object_set_new(o, "error", json_pack("{s:f,s:f}", "prefill", rel_err(p->prefill_s, s->prefill_s),
                                                  "decode_step", rel_err(p->decode_step_s, s->decode_step_s)));
        return;
    }
    char b[4][32];
    printf("predicted on %s (decode: mean step over the generated tokens):\n", hw_name);
    printf("  %-12s %12s %12s %8s\n", "", "predicted", "measured", "error");
    printf("  %-12s %12s %12s %+7.0f%%\n", "prefill", cli_fmt_seconds(p->prefill_s, b[0], 32),
           cli_fmt_seconds(s->prefill_s, b[1], 32), 100 * rel_err(p->prefill_s, s->prefill_s));
    if (a->G > 1)
        printf("  %-12s %12s %12s %+7.0f%%\n", "decode step", cli_fmt_seconds(p->decode_step_s, b[2], 32),
               cli_fmt_seconds(s->decode_step_s, b[3], 32), 100 * rel_err(p->decode_step_s, s->decode_step_s));
    printf("  time per step class (each chip of a stage, summed over the stages; measured: the\n"
           "  executor's step timers, time outside steps in no class):\n");
    printf("  %-15s %11s %11s %7s %11s %11s %7s\n", "class", "prefill", "measured", "error", "decode", "measured",
           "error");
    for (int k = 0; k < SP_CLASS_COUNT; k++) {
        const double *pp = p->kinds.prefill, *pd = p->kinds.decode_step;
        const double *mp = s->measured_prefill_class_s, *md = s->measured_decode_class_s;
        if (!(pp[k] > 0 || pd[k] > 0 || mp[k] > 0 || md[k] > 0)) continue;
        printf("  %-15s %11s %11s %+6.0f%% %11s %11s %+6.0f%%\n", sp_step_class_name((sp_step_class)k),
               cli_fmt_seconds(pp[k], b[0], 32), cli_fmt_seconds(mp[k], b[1], 32), 100 * rel_err(pp[k], mp[k]),
               cli_fmt_seconds(pd[k], b[2], 32), cli_fmt_seconds(md[k], b[3], 32), 100 * rel_err(pd[k], md[k]));
    }
}

static void print_report(const run_args *a, const sp_layout *l, int planned, const sp_model *m, const int32_t *tok,
                         const sp_exec_stats *s, const char *hw_name, const cli_prediction *pred, const sp_ragged *rg)
{
    char lt[512];
    sp_layout_format(l, lt, sizeof lt);
    long long B = a->B, G = a->G;
    if (a->json) {
        json_t *toks = json_array();
        for (long long b = 0; b < B; b++) {
            json_t *row = json_array();
            for (long long g = 0; g < (rg ? rg->gen[b] : G); g++) json_array_append_new(row, json_integer(tok[b * G + g]));
            json_array_append_new(toks, row);
        }
        json_t *comm = json_object();
        json_object_set_new(comm, "measured_bytes", bytes_obj(s->measured_bytes));
        json_object_set_new(comm, "predicted_bytes", bytes_obj(s->predicted_bytes));
        json_object_set_new(comm, "measured_recv", bytes_obj(s->measured_recv));
        json_object_set_new(comm, "predicted_recv", bytes_obj(s->predicted_recv));
        json_object_set_new(comm, "expected_bytes", bytes_obj(s->expected_bytes));
        json_object_set_new(comm, "expected_recv", bytes_obj(s->expected_recv));
        json_object_set_new(comm, "token_bytes", json_integer((json_int_t)s->token_bytes));
        json_object_set_new(comm, "steps", json_integer(s->comm_steps));
        json_object_set_new(comm, "mismatches", json_integer(s->mismatches));
        if (s->mismatches) json_object_set_new(comm, "first_mismatch", json_string(s->first_mismatch));
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(m->name));
        json_object_set_new(o, "layout", json_string(lt));
        json_object_set_new(o, "layout_source", json_string(planned ? "auto" : "given"));
        if (planned) json_object_set_new(o, "planned_for_hw", json_string(a->hw));
        json_object_set_new(o, "backend", json_string(backend_label(a)));
        json_object_set_new(o, "chips", json_integer((json_int_t)sp_layout_chips(l)));
        json_object_set_new(o, "batch", json_integer(B));
        json_object_set_new(o, "prompt", json_integer(a->P));
        json_object_set_new(o, "gen", json_integer(G));
        if (rg) {
            /* a ragged batch: prompt and gen above are the longest; each sequence's own here */
            json_t *ps = json_array(), *gs = json_array();
            for (long long b = 0; b < B; b++) {
                json_array_append_new(ps, json_integer(rg->prompt[b]));
                json_array_append_new(gs, json_integer(rg->gen[b]));
            }
            json_object_set_new(o, "workload", json_pack("{s:o,s:o}", "prompt", ps, "gen", gs));
        }
        if (a->ids) {
            json_t *pr = json_array();
            for (long long b = 0; b < B; b++) {
                json_t *row = json_array();
                for (long long t = 0; t < a->P; t++) json_array_append_new(row, json_integer(a->ids[b * a->P + t]));
                json_array_append_new(pr, row);
            }
            json_object_set_new(o, "prompt_ids", pr);
        }
        json_object_set_new(o, "tokens", toks);
        json_object_set_new(o, "prefill_s", json_real(s->prefill_s));
        json_object_set_new(o, "decode_step_s", json_real(s->decode_step_s));
        json_object_set_new(o, "tokens_per_s", json_real(s->tokens_per_s));
        json_object_set_new(o, "comm", comm);
        json_t *mem = json_object();
        json_object_set_new(mem, "allocated_bytes_per_chip", json_integer(s->allocated_bytes_per_chip));
        json_object_set_new(mem, "predicted_bytes_per_chip", json_integer(s->predicted_bytes_per_chip));
        /* offload: the host arena, and the bytes over the host link (0 without offload) */
        json_object_set_new(mem, "host_allocated_bytes_per_chip", json_integer(s->host_allocated_bytes_per_chip));
        json_object_set_new(mem, "host_predicted_bytes_per_chip", json_integer(s->host_predicted_bytes_per_chip));
        json_object_set_new(o, "memory", mem);
        json_object_set_new(comm, "host_link_measured_bytes", json_integer((json_int_t)s->host_link_bytes_measured));
        json_object_set_new(comm, "host_link_predicted_bytes", json_integer((json_int_t)s->host_link_bytes_predicted));
        /* measured: wall times, and per step class (sp_exec_stats) */
        json_t *meas = json_object(), *steps = json_object(), *spf = json_object(), *sdc = json_object();
        for (int k = 0; k < SP_CLASS_COUNT; k++) {
            json_object_set_new(spf, sp_step_class_name((sp_step_class)k), json_real(s->measured_prefill_class_s[k]));
            json_object_set_new(sdc, sp_step_class_name((sp_step_class)k), json_real(s->measured_decode_class_s[k]));
        }
        json_object_set_new(steps, "prefill", spf);
        json_object_set_new(steps, "decode_step", sdc);
        json_object_set_new(meas, "prefill_s", json_real(s->prefill_s));
        json_object_set_new(meas, "decode_step_s", json_real(s->decode_step_s));
        json_object_set_new(meas, "steps", steps);
        json_object_set_new(o, "measured", meas);
        if (pred) print_prediction(a, hw_name, pred, s, o);
        cli_print_json(o, stdout);
        json_decref(o);
        return;
    }
    if (planned) printf("layout (auto: sp_autoconfig for %lld x %s): %s\n", (long long)sp_layout_chips(l), a->hw, lt);
    else printf("layout: %s\n", lt);
    printf("backend: %s, %lld chips\n", backend_label(a), (long long)sp_layout_chips(l));
    for (long long b = 0; b < B; b++) {
        printf("seq %lld:", b);
        if (rg) printf(" (prompt %lld)", (long long)rg->prompt[b]);
        for (long long g = 0; g < (rg ? rg->gen[b] : G); g++) printf(" %d", tok[b * G + g]);
        printf("\n");
    }
    printf("prefill %.6f s, decode %.6f s per step (one token per sequence), %.1f generated tokens/s\n", s->prefill_s,
           s->decode_step_s, s->tokens_per_s);
    printf("memory per chip (largest): %lld B allocated, %lld B predicted\n", (long long)s->allocated_bytes_per_chip,
           (long long)s->predicted_bytes_per_chip);
    if (s->host_predicted_bytes_per_chip > 0 || s->host_link_bytes_predicted > 0)
        printf("offload: host memory per chip (largest) %lld B allocated, %lld B predicted; host link %llu B moved, "
               "%llu B predicted\n", (long long)s->host_allocated_bytes_per_chip, (long long)s->host_predicted_bytes_per_chip,
               (unsigned long long)s->host_link_bytes_measured, (unsigned long long)s->host_link_bytes_predicted);
    printf("measured per step class, seconds (prefill / decode step):");
    for (int k = 0; k < SP_CLASS_COUNT; k++)
        printf("%s %s %.6f / %.6f", k ? "," : "", sp_step_class_name((sp_step_class)k), s->measured_prefill_class_s[k],
               s->measured_decode_class_s[k]);
    printf("\n");
    /* predicted: from the program and, for the routed MoE all-to-all, the actual routing;
     * expected: the program alone (the router's expected value) */
    printf("%-15s %14s %14s %14s\n", "collective", "measured B", "predicted B", "expected B");
    for (int k = 0; k < SP_COLL_COUNT; k++)
        printf("%-15s %14llu %14llu %14llu\n", sp_coll_kind_name(k), (unsigned long long)s->measured_bytes[k],
               (unsigned long long)s->predicted_bytes[k], (unsigned long long)s->expected_bytes[k]);
    printf("pipeline token hand-off: %llu B; byte mismatches: %lld%s%s%s\n", (unsigned long long)s->token_bytes,
           (long long)s->mismatches, s->mismatches ? " (first: " : "", s->mismatches ? s->first_mismatch : "",
           s->mismatches ? ")" : "");
    if (pred) print_prediction(a, hw_name, pred, s, NULL);
    else printf("no prediction: give --hw or set SHARDPLAN_LOCAL_HW (calibrate --backend threads writes a profile)\n");
}

/* --prompt-ids: appends one sequence's ids; all must have the first's length */
static int add_seq(run_args *a, const char *src, const int32_t *seq, long long n, long long *cap, long long *nseq)
{
    if (n == 0) return CLI_EXIT_OK;
    if (*nseq == 0) a->P = n;
    else if (n != a->P) {
        cli_errorf("%s: sequence %lld has %lld ids, sequence 0 has %lld: prompts of different lengths (a ragged "
                   "batch) are not implemented; pad or split them into runs of equal length", src, *nseq, n, a->P);
        return CLI_EXIT_USAGE;
    }
    if ((*nseq + 1) * n > *cap) {
        long long nc = (*nseq + 1) * n * 2;
        int32_t *p = realloc(a->ids, (size_t)nc * sizeof *p);
        if (!p) return CLI_EXIT_INTERNAL;
        a->ids = p, *cap = nc;
    }
    memcpy(a->ids + *nseq * n, seq, (size_t)n * sizeof *seq);
    (*nseq)++;
    return CLI_EXIT_OK;
}

/* Reads --prompt-ids (a file, or - for stdin) into a->ids (B, P) and sets
 * a->B and a->P; exit 2 with the place of the first bad id. */
static int read_prompt_ids(run_args *a, long long batch_given, long long prompt_given)
{
    const char *src = a->prompt_ids;
    FILE *f = strcmp(src, "-") ? fopen(src, "r") : stdin;
    if (!f) {
        cli_errorf("--prompt-ids %s: cannot open", src);
        return CLI_EXIT_USAGE;
    }
    size_t len = 0, cap = 0;
    char *text = NULL;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *t = realloc(text, cap = 2 * cap + 8192);
            if (!t) { free(text); if (f != stdin) fclose(f); return CLI_EXIT_INTERNAL; }
            text = t;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    if (f != stdin) fclose(f);
    text[len] = '\0';
    long long idcap = 0, nseq = 0;
    int rc = CLI_EXIT_OK;
    const char *p = text;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    int32_t *seq = malloc((len / 2 + 1) * sizeof *seq);
    if (!seq) rc = CLI_EXIT_INTERNAL;
    if (!rc && *p == '[') {
        json_error_t je;
        json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
        if (!j || !json_is_array(j)) {
            cli_errorf("%s:%d:%d: %s", src, j ? 1 : je.line, j ? 1 : je.column, j ? "expected an array of arrays of ids" : je.text);
            rc = CLI_EXIT_USAGE;
        }
        size_t i, k;
        json_t *row, *v;
        if (!rc) json_array_foreach(j, i, row) {
            long long n = 0;
            if (!json_is_array(row)) { cli_errorf("%s: [%zu]: expected an array of ids", src, i); rc = CLI_EXIT_USAGE; break; }
            json_array_foreach(row, k, v) {
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
                    cli_errorf("%s: [%zu][%zu]: expected a token id (integer >= 0)", src, i, k);
                    rc = CLI_EXIT_USAGE;
                    break;
                }
                seq[n++] = (int32_t)json_integer_value(v);
            }
            if (rc || (rc = add_seq(a, src, seq, n, &idcap, &nseq))) break;
        }
        json_decref(j);
    } else if (!rc) {
        long long line = 1;
        while (*p && !rc) {
            long long n = 0;
            const char *q = p;
            while (*q && *q != '\n') {
                if (*q == ' ' || *q == '\t' || *q == '\r') { q++; continue; }
                char *end;
                long v = strtol(q, &end, 10);
                if (end == q || v < 0 || v > INT32_MAX || (*end && *end != ' ' && *end != '\t' && *end != '\r' && *end != '\n')) {
                    cli_errorf("%s:%lld: expected token ids (integers >= 0) separated by spaces", src, line);
                    rc = CLI_EXIT_USAGE;
                    break;
                }
                seq[n++] = (int32_t)v;
                q = end;
            }
            if (!rc) rc = add_seq(a, src, seq, n, &idcap, &nseq);
            p = *q ? q + 1 : q;
            line++;
        }
    }
    free(seq);
    free(text);
    if (!rc && nseq == 0) {
        cli_errorf("--prompt-ids %s: no prompt ids", src);
        rc = CLI_EXIT_USAGE;
    }
    if (!rc && ((batch_given && batch_given != nseq) || (prompt_given && prompt_given != a->P))) {
        cli_errorf("--prompt-ids %s holds %lld sequences of %lld ids; --batch %lld / --prompt %lld disagree", src, nseq,
                   a->P, batch_given ? batch_given : nseq, prompt_given ? prompt_given : a->P);
        rc = CLI_EXIT_USAGE;
    }
    if (!rc) a->B = nseq;
    return rc;
}

/* The layout: parsed, or planned for a->hw on a->chips chips. */
static int get_layout(const run_args *a, const sp_model *m, sp_layout *l, int *planned)
{
    sp_error err;
    memset(&err, 0, sizeof err);
    sp_status st;
    *planned = !strcmp(a->layout, "auto");
    if (!*planned) {
        if ((st = cli_load_layout(a->layout, l, &err))) return fail(st, &err);
    } else {
        sp_hw hw;
        if ((st = sp_hw_find(a->hw, &hw, &err))) return fail(st, &err);
        sp_plan_opts o;
        sp_plan_opts_init(&o);
        o.frontier = 0;
        o.rivals = 0;
        o.search_min_chips = 0;
        if (a->wdt && strcmp(a->wdt, "f32") && strcmp(a->wdt, "f16")) {
            sp_plan_weights pw;
            if ((st = sp_plan_weights_parse(a->wdt, &pw))) return fail(st, NULL);
            o.weights = pw;
        }
        sp_workload wl = {a->B, a->P, a->G};
        if ((st = sp_autoconfig(m, &hw, (int)a->chips, a->B, &wl, &o, l))) return fail(st, NULL);
    }
    if (a->wdt) {
        sp_dtype d;
        if ((st = sp_dtype_parse(a->wdt, &d))) return fail(st, NULL);
        l->weights = d;
    }
    if (a->chips && a->chips != sp_layout_chips(l)) {
        if (is_root) cli_errorf("layout uses %lld chips, --chips is %lld", (long long)sp_layout_chips(l), a->chips);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

/* NumPy .npy version 1.0: magic, header length, a Python dict literal padded
 * with spaces to a multiple of 64 bytes, then little-endian float32 data in C
 * order.  lg is (B, S, V); the file holds (S, B, V), or (B, V) when !all. */
static int write_logits(const char *path, const float *lg, long long B, long long S, long long V, int all)
{
    char hdr[160];
    int n = all ? snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld, %lld), }",
                           S, B, V)
                : snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }", B, V);
    while ((10 + n + 1) % 64) hdr[n++] = ' ';
    hdr[n++] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(pre, 1, sizeof pre, f) != sizeof pre || fwrite(hdr, 1, (size_t)n, f) != (size_t)n;
    for (long long s = 0; !bad && s < S; s++)
        for (long long b = 0; !bad && b < B; b++)
            bad = fwrite(lg + (b * S + s) * V, sizeof *lg, (size_t)V, f) != (size_t)V;
    if (bad) {
        if (f) fclose(f);
        cli_errorf("cannot write logits to %s", path);
        return CLI_EXIT_USAGE;
    }
    if (fclose(f)) {
        cli_errorf("cannot write logits to %s", path);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

static int run_ragged(const run_args *a, const sp_ragged *rg);

static int run_job(run_args *a)
{
    sp_error err;
    memset(&err, 0, sizeof err);
    /* --workload: a ragged batch; B, P and G become its sequences, longest prompt and gen */
    sp_ragged rgb, *rg = NULL;
    if (a->workload) {
        int wrc = cli_load_workload(a->workload, &rgb);
        if (wrc) return wrc;
        rg = &rgb;
        a->B = rg->n;
        a->P = rg->max_prompt;
        a->G = rg->max_gen;
    }
    int rc = run_ragged(a, rg);
    if (rg) sp_ragged_free(rg);
    return rc;
}

static int run_ragged(const run_args *a, const sp_ragged *rg)
{
    sp_error err;
    memset(&err, 0, sizeof err);
    sp_model m;
    char cfg[4096];
    const char *model = a->model;
    if (!model) {
        snprintf(cfg, sizeof cfg, "%s/config.json", a->weights);
        model = cfg;
    }
    sp_status st = sp_model_find(model, &m, &err);
    if (st) return fail(st, &err);
    if ((st = sp_model_check_run(&m, rg ? rg->max_context : a->P + a->G, &err))) return fail(st, &err);
    sp_layout l;
    int planned = 0, rc = get_layout(a, &m, &l, &planned);
    if (rc) return rc;
    /* the profile this run is priced with: --hw, else this machine's (calibrate) */
    const char *hw_name = a->hw ? a->hw : *sp_env(SP_ENV_LOCAL_HW) ? sp_env(SP_ENV_LOCAL_HW) : NULL;
    cli_prediction pred;
    int have_pred = 0;
    if (hw_name && rg) {
        if (is_root) cli_errorf("no prediction for a ragged batch here (estimate --workload prices it)");
    } else if (hw_name) {
        sp_hw phw;
        if ((st = sp_hw_find(hw_name, &phw, &err))) return fail(st, &err);
        if (cli_predict_run(&m, &phw, &l, a->B, a->P, a->G, &pred) == CLI_EXIT_OK) have_pred = 1;
        else if (is_root) cli_errorf("no prediction on %s: %s", hw_name, sp_last_error());
    }
    sp_weights w;
    if (a->weights) {
        /* opened for slices: each chip reads its own rows of the checkpoint */
        if ((st = sp_weights_open_hf(a->weights, &m, &w, &err))) return fail(st, &err);
    } else if ((st = sp_weights_build_random(&m, (uint64_t)a->seed, &w))) {
        return fail(st, NULL);
    }
    if ((st = sp_weights_quantize(&w, l.weights))) {
        sp_weights_free(&w);
        return fail(st, NULL);
    }
    sp_exec *ex = NULL;
    sp_comm_backend be = a->cuda ? SP_COMM_BACKEND_NCCL : a->mpi ? SP_COMM_BACKEND_MPI : SP_COMM_BACKEND_THREADS;
    st = rg ? sp_exec_build_ragged(&m, &l, rg, &w, be, &ex) : sp_exec_build(&m, &l, a->B, a->P, a->G, &w, be, &ex);
    if (st) {
        sp_weights_free(&w);
        if (st == SP_EINVAL && is_root) {
            char lt[512];
            cli_errorf("layout %s does not apply: %s", sp_layout_format(&l, lt, sizeof lt), sp_last_error());
            return CLI_EXIT_USAGE;
        }
        return fail(st, NULL);
    }
    long long B = a->B, P = a->P, G = a->G, V = m.vocab;
    int32_t *prompt = malloc((size_t)(B * P) * sizeof *prompt), *tok = calloc((size_t)(B * G), sizeof *tok);
    long long S = a->logits_all ? G : 1;
    float *lg = a->logits ? calloc((size_t)(B * S * V), sizeof *lg) : NULL;
    if (!prompt || !tok || (a->logits && !lg)) st = SP_ENOMEM;
    uint64_t rs = (uint64_t)a->seed;
    for (long long i = 0; !st && i < B * P; i++) {
        prompt[i] = a->ids ? a->ids[i] : (int32_t)(sp_kern_rng_next(&rs) % (uint64_t)V);
        if (prompt[i] >= V) {
            if (is_root)
                cli_errorf("--prompt-ids: id %d (sequence %lld) is outside the vocabulary of %lld", prompt[i], i / P, V);
            free(prompt);
            free(tok);
            free(lg);
            sp_exec_free(ex);
            sp_weights_free(&w);
            return CLI_EXIT_USAGE;
        }
    }
    sp_exec_stats s;
    memset(&s, 0, sizeof s);
    sp_kern_sample_opts so;
    sp_kern_sample_opts_init(&so);
    so.temperature = (float)a->temperature;
    so.top_k = (int)a->top_k;
    so.top_p = a->top_p > 0 ? (float)a->top_p : 1.0f;
    so.seed = (uint64_t)a->seed;
    /* --warmup: the same run first, untimed and untraced (the arenas' first
     * touch, cold caches and the threads' first wake-ups stay out of the
     * measurement); every run produces the same tokens */
    for (long long i = 0; !st && i < a->warmup; i++)
        st = sp_exec_run_logits(ex, prompt, a->temperature > 0 ? &so : NULL, tok, lg, a->logits_all, &s);
    if (!st && a->trace) st = sp_exec_set_trace(ex, a->trace);
    if (!st) st = sp_exec_run_logits(ex, prompt, a->temperature > 0 ? &so : NULL, tok, lg, a->logits_all, &s);
    if (st) {
#ifdef HAVE_MPI
        if (a->mpi) {
            /* a peer may be waiting in a collective: end the whole job */
            fprintf(stderr, "shardplan: run failed (%s): %s; aborting the MPI job\n", sp_status_str(st),
                    sp_last_error());
            MPI_Abort(MPI_COMM_WORLD, cli_exit_for(st) ? cli_exit_for(st) : 3);
        }
#endif
        rc = fail(st, NULL);
    } else if (is_root) {
        print_report(a, &l, planned, &m, tok, &s, hw_name, have_pred ? &pred : NULL, rg);
        if (a->logits) rc = write_logits(a->logits, lg, B, S, V, a->logits_all);
        if (!rc && s.mismatches) rc = CLI_EXIT_INFEASIBLE;
        for (int k = 0; k < SP_COLL_COUNT && !rc; k++)
            if (s.measured_bytes[k] != s.predicted_bytes[k] || s.measured_recv[k] != s.predicted_recv[k])
                rc = CLI_EXIT_INFEASIBLE;
        if (rc == CLI_EXIT_INFEASIBLE) cli_errorf("measured bytes differ from the lowering's prediction");
    }
    free(prompt);
    free(tok);
    free(lg);
    sp_exec_free(ex);
    sp_weights_free(&w);
    return rc;
}

int cli_cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", 1, 0, 'm'}, {"chips", 1, 0, 'n'}, {"batch", 1, 0, 'b'}, {"prompt", 1, 0, 'p'},
        {"gen", 1, 0, 'g'}, {"layout", 1, 0, 'l'}, {"backend", 1, 0, 'k'}, {"seed", 1, 0, 's'},
        {"weights-dtype", 1, 0, 'w'}, {"hw", 1, 0, 'H'}, {"logits", 1, 0, 'L'}, {"json", 0, 0, 'j'}, {"trace", 1, 0, 'R'},
        {"weights", 1, 0, 'W'}, {"temperature", 1, 0, 'T'}, {"top-k", 1, 0, 'K'}, {"top-p", 1, 0, 'P'},
        {"prompt-ids", 1, 0, 'I'}, {"logits-all", 0, 0, 'A'}, {"workload", 1, 0, 'U'}, {"warmup", 1, 0, 'O'},
        {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    run_args a;
    memset(&a, 0, sizeof a);
    a.B = 1;
    a.P = 8;
    a.G = 8;
    a.seed = 1;
    long long batch_given = 0, prompt_given = 0, gen_given = 0;
    int c, rc;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': a.model = optarg; break;
        case 'l': a.layout = optarg; break;
        case 'w': a.wdt = optarg; break;
        case 'H': a.hw = optarg; break;
        case 'L': a.logits = optarg; break;
        case 'R': a.trace = optarg; break;
        case 'k':
            if (!strcmp(optarg, "mpi")) a.mpi = 1, a.cuda = 0;
            else if (!strcmp(optarg, "cuda") || !strcmp(optarg, "nccl")) a.mpi = a.cuda = 1;
            else if (!strcmp(optarg, "threads")) a.mpi = a.cuda = 0;
            else return cli_usage("run", "--backend %s: threads, mpi or cuda", optarg);
            break;
        case 'n': if (cli_parse_long("run", "--chips", optarg, 1, 4096, &a.chips)) return CLI_EXIT_USAGE; break;
        case 'b': if (cli_parse_long("run", "--batch", optarg, 1, 1 << 20, &a.B)) return CLI_EXIT_USAGE; batch_given = a.B; break;
        case 'p': if (cli_parse_long("run", "--prompt", optarg, 1, 1 << 20, &a.P)) return CLI_EXIT_USAGE; prompt_given = a.P; break;
        case 'I': a.prompt_ids = optarg; break;
        case 'U': a.workload = optarg; break;
        case 'A': a.logits_all = 1; break;
        case 'g': if (cli_parse_long("run", "--gen", optarg, 1, 1 << 20, &a.G)) return CLI_EXIT_USAGE; gen_given = a.G; break;
        case 's': if (cli_parse_long("run", "--seed", optarg, 0, 1LL << 62, &a.seed)) return CLI_EXIT_USAGE; break;
        case 'j': a.json = 1; break;
        case 'O': if (cli_parse_long("run", "--warmup", optarg, 0, 1000, &a.warmup)) return CLI_EXIT_USAGE; break;
        case 'W': a.weights = optarg; break;
        case 'K': if (cli_parse_long("run", "--top-k", optarg, 0, 1 << 24, &a.top_k)) return CLI_EXIT_USAGE; break;
        case 'T':
        case 'P': {
            char *end;
            double v = strtod(optarg, &end);
            if (*end || end == optarg || v != v || (c == 'P' && (v <= 0 || v > 1)))
                return cli_usage("run", "%s must be a number%s", c == 'T' ? "--temperature" : "--top-p",
                                 c == 'P' ? " in (0, 1]" : "");
            if (c == 'T') a.temperature = v;
            else a.top_p = v;
            break;
        }
        case 'h': usage(); return CLI_EXIT_OK;
        default: return cli_usage("run", "unknown option");
        }
    }
    if (optind < argc) return cli_usage("run", "unexpected argument '%s'", argv[optind]);
    if (a.cuda && (rc = cli_cuda_check("run"))) return rc;
    if ((!a.model && !a.weights) || !a.layout)
        return cli_usage("run", "--layout and --model (or --weights DIR) are required");
    if ((a.top_k || a.top_p) && a.temperature <= 0) return cli_usage("run", "--top-k and --top-p need --temperature > 0");
    if (!strcmp(a.layout, "auto") && (!a.hw || !a.chips))
        return cli_usage("run", "--layout auto needs --chips and --hw (the hardware the split is planned for; "
                                "the run itself is on this machine)");
    if (a.logits_all && !a.logits) return cli_usage("run", "--logits-all goes with --logits FILE");
    if (a.workload && (batch_given || prompt_given || gen_given || a.prompt_ids || a.logits_all || !strcmp(a.layout, "auto")))
        return cli_usage("run", "--workload replaces --batch, --prompt and --gen, and goes without --prompt-ids, "
                                "--logits-all and --layout auto");
    if (a.prompt_ids && a.mpi && !strcmp(a.prompt_ids, "-"))
        return cli_usage("run", "--prompt-ids -: under mpirun give a file (every rank reads it)");
    if (a.prompt_ids && (rc = read_prompt_ids(&a, batch_given, prompt_given))) {
        free(a.ids);
        return rc;
    }
    if (!a.mpi) {
        rc = run_job(&a);
        free(a.ids);
        return rc;
    }
#ifdef HAVE_MPI
    int rank, size;
    if ((rc = cli_mpi_init("run", &rank, &size))) {
        free(a.ids);
        return rc;
    }
    is_root = rank == 0;
    rc = run_job(&a);
    MPI_Finalize();
    free(a.ids);
    return rc;
#else
    return cli_usage("run", "--backend %s: this build has no MPI (configure --with-mpi)", backend_label(&a));
#endif
}
