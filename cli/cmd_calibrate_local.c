/* cmd_calibrate_local.c: shardplan calibrate --backend B: measures this
 * machine's chips with microbenchmarks (exec/sp_calib.h) and writes a
 * hardware profile (doc/formats.md) with the points every figure came from. */
#include "config.h"
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "sp_hw.h"
#include "spi_json.h"
#include "exec/sp_calib.h"
#ifdef HAVE_MPI
#include <mpi.h>
#endif

static void help(void)
{
    printf("Usage: shardplan calibrate --backend threads|mpi|cuda [--chips N] --out FILE\n"
           "                           [--cores C] [--quick] [--quiet]\n\n"
           "Measures this machine's chips with microbenchmarks through the executor's own\n"
           "code and writes a hardware profile (the format of data/hw, doc/formats.md):\n"
           "  matmul        sp_kern_matmul over a grid of shapes (T x K x N) and weight dtypes:\n"
           "                chip.peak_flops per dtype, efficiency.matmul by local FLOPs\n"
           "  memory        weight streams (T = 1 matmuls) of 16 KiB .. 256 MiB: chip.hbm_bw\n"
           "                (the best rate) and efficiency.memory by bytes\n"
           "  collectives   all-gather, reduce-scatter, all-reduce, all-to-all over groups of\n"
           "                every divisor of N, blocks of 256 B .. 1 MiB, and send/recv, on the\n"
           "                backend's communicator: one latency per algorithm step and one\n"
           "                bandwidth (topology intra_node_latency / intra_node_bw)\n"
           "  dispatch      the interpreter's seconds per program step: chip.dispatch_s\n"
           "Each point is the minimum over 5 timed rounds after a warm-up call (interference\n"
           "only adds time).  The profile's \"measured\" section holds every measured point,\n"
           "the machine (hostname, CPU model), the date and the fits' errors.\n\n"
           "  --backend threads  chips are threads of this process (the run backend's)\n"
           "  --backend mpi      one chip per rank: mpirun -np N shardplan calibrate --backend mpi\n"
           "  --backend cuda     one GPU (--chips 1): matmul (cuBLAS after the executor's\n"
           "                     dequantisation), memory, attention, activations and\n"
           "                     dispatch through the executor's CUDA device; shapes up to\n"
           "                     8192 x 28672, T up to 4096; no collectives (NCCL over\n"
           "                     several GPUs is not calibrated in this version)\n"
           "  --chips N          chips to measure at (threads; default 1; mpi: the world size).\n"
           "                     Compute benchmarks run on min(N, cores) chips at once, the\n"
           "                     collectives on all N: with more chips than cores the\n"
           "                     collectives' latency includes the time-sharing\n"
           "  --cores C          cores the chips share (default: online CPUs)\n"
           "  --quick            a reduced grid (seconds; for tests, not for predictions)\n"
           "  --quiet            no progress lines on stderr\n"
           "To have `run` price its layout with the profile by default, point\n"
           "SHARDPLAN_LOCAL_HW at the file.\n");
}

static json_t *measured_json(const sp_calib_result *r, const sp_calib_fit *f, const sp_hw *hw)
{
    json_t *mm = json_array(), *mem = json_array(), *coll = json_array(), *fetch = json_array();
    for (int i = 0; i < r->n_mm; i++) {
        const sp_calib_mm *p = &r->mm[i];
        double flops = 2.0 * (double)(p->T * p->K * p->N);
        if (p->T > 1 && p->ring > 1) {   /* a weight fetch: the matmul cycled over ring copies */
            double by = (double)(p->K * p->N) * (double)sp_dtype_bytes((sp_dtype)p->dt);
            json_array_append_new(fetch, json_pack("{s:s,s:I,s:I,s:I,s:i,s:f,s:f}", "dtype", sp_dtype_name((sp_dtype)p->dt),
                                                   "T", (json_int_t)p->T, "K", (json_int_t)p->K, "N", (json_int_t)p->N,
                                                   "matrices", p->ring, "working_set_bytes", by * p->ring, "seconds",
                                                   p->seconds));
            continue;
        }
        if (p->T == 1 && p->dt == SP_DT_F32) {
            double by = (double)(p->K * p->N) * 4.0 + (double)(p->K + p->N) * 4.0;
            json_array_append_new(mem, json_pack("{s:I,s:I,s:i,s:f,s:f,s:f,s:b}", "K", (json_int_t)p->K, "N",
                                                 (json_int_t)p->N, "matrices", p->ring, "working_set_bytes",
                                                 by * p->ring, "seconds", p->seconds, "bytes_per_s", by / p->seconds,
                                                 "alone", p->alone));
            continue;
        }
        json_array_append_new(mm, json_pack("{s:s,s:s,s:I,s:I,s:I,s:f,s:f}", "kernel", p->logits ? "logits" : "matmul",
                                            "dtype", sp_dtype_name((sp_dtype)p->dt), "T", (json_int_t)p->T, "K",
                                            (json_int_t)p->K, "N", (json_int_t)p->N, "seconds", p->seconds,
                                            "flops_per_s", flops / p->seconds));
    }
    for (int i = 0; i < r->n_coll; i++) {
        const sp_calib_coll_pt *p = &r->coll[i];
        /* the fit is per chip with a core; this point ran p->chips chips at once */
        double sh = sp_calib_share(r, p->chips);
        double fit = (f->launch + f->alpha * p->steps + f->beta * p->beta_bytes) * sh + sp_hw_idle_wake(hw, sh);
        json_t *pt = json_pack("{s:s,s:i,s:i,s:I,s:f,s:f,s:f,s:f}", "kind", sp_calib_coll_name(p->kind), "group", p->K,
                               "chips", p->chips, "block_bytes", (json_int_t)p->block_bytes, "seconds", p->seconds,
                               "steps", p->steps, "beta_bytes", p->beta_bytes, "fitted_seconds", fit);
        json_array_append_new(coll, pt);
    }
    json_t *attn = json_array();
    for (int i = 0; i < r->n_attn; i++) {
        const sp_calib_attn *a = &r->attn[i];
        json_array_append_new(attn, json_pack("{s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f}", "B", (json_int_t)a->B, "Lq",
                                              (json_int_t)a->Lq, "pos0", (json_int_t)a->pos0, "heads",
                                              (json_int_t)a->H, "d_head", (json_int_t)a->D, "flops", a->flops,
                                              "seconds", a->seconds, "flops_per_s", a->flops / a->seconds));
    }
    json_t *disp = json_pack("{s:[I,I],s:[f,f],s:s}", "steps_per_token", (json_int_t)r->disp_steps[0],
                             (json_int_t)r->disp_steps[1], "seconds_per_token", r->disp_seconds[0],
                             r->disp_seconds[1], "method",
                             "decode of a width-16 synthetic model at 2 and 10 layers on one chip (min of 4 runs "
                             "after a warm-up); dispatch_s = difference in seconds / difference in steps");
    json_t *pts = json_pack("{s:o,s:o,s:o,s:{s:f,s:f},s:o,s:f,s:o}", "matmul", mm, "memory", mem, "attention", attn,
                            "activation_s_per_element", "gelu", r->act_s[0], "swiglu", r->act_s[1], "collectives",
                            coll, "barrier_all_chips_s", r->barrier_s, "dispatch", disp);
    if (pts && json_array_size(fetch))
        json_object_set_new(pts, "weight_fetch",
                            json_pack("{s:o,s:s}", "runs", fetch, "method",
                                      "the matmul of the same T, K and N cycled over `matrices` copies on every "
                                      "compute chip at once; chip.weight_fetch_s_by_working_set = (seconds - the "
                                      "one-copy matmul's) / weight bytes at working_set_bytes, after 0 at one "
                                      "matrix, made non-decreasing (adjacent violators pooled)"));
    else
        json_decref(fetch);
    if (pts && r->n_wake) {
        json_t *wk = json_array();
        for (int w = 0; w < r->n_wake; w++)
            json_array_append_new(wk, json_pack("{s:i,s:[i,i],s:[I,I],s:[f,f]}", "chips", r->wake_chips[w], "layers",
                                                2, 10, "collectives_per_token", (json_int_t)r->wake_colls[w][0],
                                                (json_int_t)r->wake_colls[w][1], "seconds_per_token",
                                                r->wake_seconds[w][0], r->wake_seconds[w][1]));
        json_object_set_new(pts, "idle_wake",
                            json_pack("{s:o,s:s}", "runs", wk, "method",
                                      "the dispatch model on K chips (mesh=Kx1x1, ws1d/heads; median of 9 runs after "
                                      "a warm-up); at s = max(1, K / cores) chips per core, the wake-up per "
                                      "collective = ((difference in seconds) - s x (the one-chip difference)) / "
                                      "(difference in collectives) - s x (launch + alpha x (K - 1))"));
    }
    if (pts && r->n_stretch) {
        json_t *sk = json_array();
        for (int k = 0; k < r->n_stretch; k++)
            json_array_append_new(sk, json_pack("{s:i,s:f,s:f}", "chips", r->stretch_chips[k], "unit_with_barrier_s",
                                                r->stretch_sync[k], "barrier_s", r->stretch_bar[k]));
        json_object_set_new(
            pts, "compute_stretch",
            json_pack("{s:[i,i,i],s:i,s:f,s:o,s:s}", "unit_t_k_n", SP_CALIB_STRETCH_T, SP_CALIB_STRETCH_KN,
                      SP_CALIB_STRETCH_KN, "unit_alone_chips", r->compute_chips, "unit_alone_s", r->stretch_unit,
                      "runs", sk, "method",
                      "100 units of work (an f32 matmul) per chip per round, minimum over rounds after a warm-up "
                      "round, chip 0's seconds per unit: alone on min(chips, cores) chips; on K chips (s = K / "
                      "cores chips per core) each unit followed by a barrier of the K, and the barriers alone; "
                      "factor at s = (unit with barrier - barrier) / (s x unit alone)"));
    }
    return pts;
}

static int write_profile(const char *path, const sp_calib_result *r, const sp_calib_fit *f)
{
    sp_hw hw;
    sp_hw_init(&hw);
    snprintf(hw.name, sizeof hw.name, "local-%.32s-%s-%d", r->host, sp_comm_backend_name(r->backend), r->chips);
    for (int d = 0; d < SP_DT_COUNT && d < 5; d++) hw.peak_flops[d] = f->peak_flops[d];
    int gpu = r->backend == SP_COMM_BACKEND_NCCL;
    hw.hbm_bytes = r->chip_bytes;   /* host memory / chips, or the GPU's memory */
    hw.hbm_bw = f->mem_bw;
    hw.dispatch_s = f->dispatch_s;
    hw.topo = SP_TOPO_CLUSTER;
    hw.chips_per_node = r->chips;
    hw.max_chips = r->chips;
    /* one tier: the threads (or ranks) of one host; inter = intra so a
     * layout never crosses a tier the calibration did not measure */
    hw.intra_latency = hw.inter_latency = f->alpha;
    hw.coll_latency = f->launch;
    hw.intra_bw = hw.inter_bw = f->beta > 0 ? 1.0 / f->beta : 1e12;
    hw.eff_points = f->eff_points;
    for (int i = 0; i < f->eff_points; i++) hw.eff_flops[i] = f->eff_flops[i], hw.eff_value[i] = f->eff_value[i];
    /* profiles take efficiencies down to 0.01 (src/hw.c): a slower measured
     * point is written at that floor */
    sp_calib_fit g = *f;
    for (int i = 0; i < g.eff_points; i++) g.eff_value[i] = g.eff_value[i] < 0.01 ? 0.01 : g.eff_value[i];
    for (int i = 0; i < g.mem_points; i++) g.mem_value[i] = g.mem_value[i] < 0.01 ? 0.01 : g.mem_value[i];
    for (int i = 0; i < g.attn_points; i++) g.attn_value[i] = g.attn_value[i] < 0.01 ? 0.01 : g.attn_value[i];
    for (int d = 0; d < 5 && d < SP_DT_COUNT; d++) {
        hw.rows_points[d] = g.rows_points[d];
        for (int i = 0; i < g.rows_points[d]; i++) {
            hw.rows_m[d][i] = g.rows_m[d][i];
            hw.rows_value[d][i] = g.rows_value[d][i] < 0.01 ? 0.01 : g.rows_value[d][i];
        }
    }
    for (int d = 0; d < 5 && d < SP_DT_COUNT; d++) {
        hw.rows_sizes[d] = g.rows_sizes[d];
        for (int c = 0; c < g.rows_sizes[d]; c++) {
            hw.rows_w[d][c] = g.rows_w[d][c];
            hw.rows_w_points[d][c] = g.rows_w_points[d][c];
            for (int i = 0; i < g.rows_w_points[d][c]; i++) {
                hw.rows_w_m[d][c][i] = g.rows_w_m[d][c][i];
                hw.rows_w_value[d][c][i] = g.rows_w_value[d][c][i] < 0.01 ? 0.01 : g.rows_w_value[d][c][i];
            }
        }
    }
    f = &g;
    hw.matmul_tile[0] = f->tile_m;
    hw.attn_points = f->attn_points;
    for (int i = 0; i < f->attn_points; i++) hw.attn_dhead[i] = f->attn_dhead[i], hw.attn_value[i] = f->attn_value[i];
    hw.shared_cores = gpu ? 0 : r->cores;   /* a GPU computes on its own, CPU chips share the cores */
    hw.comm_shares_cores = hw.shared_cores > 0;   /* the fit and token_sync_s are per chip with a core */
    hw.act_elem_s[0] = f->act_elem_s[0];
    hw.act_elem_s[1] = f->act_elem_s[1];
    memcpy(hw.step_elem_s, f->step_elem_s, sizeof hw.step_elem_s);
    hw.token_sync_s = f->token_sync_s;
    hw.idle_wake_s = f->idle_wake_s;
    hw.wake_points = f->wake_points;
    for (int i = 0; i < f->wake_points; i++) hw.wake_share[i] = f->wake_share[i], hw.wake_s[i] = f->wake_value[i];
    hw.stretch_points = f->stretch_points;
    for (int i = 0; i < f->stretch_points; i++) hw.stretch_share[i] = f->stretch_share[i], hw.stretch[i] = f->stretch_value[i];
    hw.logits_sizes = f->logits_sizes;
    for (int c = 0; c < f->logits_sizes; c++) {
        hw.logits_w[c] = f->logits_w[c];
        hw.logits_w_points[c] = f->logits_w_points[c];
        for (int i = 0; i < f->logits_w_points[c]; i++)
            hw.logits_w_m[c][i] = f->logits_w_m[c][i], hw.logits_w_value[c][i] = f->logits_w_value[c][i] < 0.01 ? 0.01 : f->logits_w_value[c][i];
    }
    hw.fetch_points = f->fetch_points;
    for (int i = 0; i < f->fetch_points; i++) hw.fetch_bytes[i] = f->fetch_bytes[i], hw.fetch_s[i] = f->fetch_value[i];
    /* one measured curve by working set: steps that read weights look it up at
     * the weights a pass streams, the others at their own bytes */
    hw.mem_points = hw.ws_points = f->mem_points;
    for (int i = 0; i < f->mem_points; i++) {
        hw.mem_bytes[i] = hw.ws_bytes[i] = f->mem_bytes[i];
        hw.mem_value[i] = hw.ws_value[i] = f->mem_value[i];
    }
    hw.wsa_points = f->wsa_points;
    for (int i = 0; i < f->wsa_points; i++) {
        hw.wsa_bytes[i] = f->wsa_bytes[i];
        hw.wsa_value[i] = f->wsa_value[i] < 0.01 ? 0.01 : f->wsa_value[i];
    }
    /* the CPU executor runs every collective on the chip's own thread */
    hw.overlap = SP_OVERLAP_NONE;
    sp_error err;
    sp_error_init(&err);
    sp_status st = sp_hw_validate(&hw, &err);
    if (st) return cli_report(st, &err);
    json_t *j = spi_hw_to_json(&hw);
    char src[512];
    if (gpu)
        snprintf(src, sizeof src, "shardplan calibrate --backend cuda --chips 1 on %s (%s; host %s, %d cores), %s",
                 r->host, r->device, r->cpu, r->cores, r->date);
    else
        snprintf(src, sizeof src, "shardplan calibrate --backend %s --chips %d on %s (%s, %d cores), %s",
                 sp_comm_backend_name(r->backend), r->chips, r->host, r->cpu, r->cores, r->date);
    json_object_set_new(j, "source", json_string(src));
    json_object_set_new(j, "notes",
                        json_string("Measured, not datasheet: peak_flops = the best compute-bound (T >= 8) "
                                    "sp_kern_matmul rate per weight dtype; efficiency.matmul = f32 rates / peak, "
                                    "binned by FLOPs; hbm_bw = the best weight-stream (T = 1 matmul) rate and "
                                    "efficiency.memory its fraction by bytes (caches included); one collective "
                                    "tier fitted as latency per algorithm step + bytes / bandwidth (least squares "
                                    "in relative error) on each point's time / max(1, chips running / cores) "
                                    "(comm_shares_cores: runs stretch it back by their own share); "
                                    "overlap none (collectives run on the chip's thread); "
                                    "hbm_bytes = host memory / chips (cuda: the GPU's memory; one GPU, no collectives).  "
                                    "Every point in measured.points."));
    json_t *cal = json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:f,s:s,s:o,s:{s:f,s:f}}", "backend",
                            sp_comm_backend_name(r->backend), "host", r->host, "cpu", r->cpu, "date", r->date,
                            "chips", r->chips, "cores", r->cores, "compute_chips", r->compute_chips, "seconds",
                            r->seconds, "method",
                            "every point: one warm-up call, then the minimum over 5 timed rounds of the mean call "
                            "time on chip 0; compute points on min(chips, cores) chips at once, collectives on "
                            "all chips (groups of K side by side) and on one group alone (threads)",
                            "points", measured_json(r, f, &hw), "collective_fit", "median_rel_err", f->coll_median_err,
                            "worst_rel_err", f->coll_worst_err);
    json_object_set_new(cal, "matmul_fit", json_pack("{s:i,s:f}", "tile_m", f->tile_m, "median_rel_err",
                                                     f->mm_median_err));
    if (gpu) json_object_set_new(cal, "device", json_string(r->device));
    json_object_set_new(j, "measured", cal);
    int rc = CLI_EXIT_OK;
    if (json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10))) {
        cli_errorf("cannot write %s", path);
        rc = CLI_EXIT_USAGE;
    }
    json_decref(j);
    if (!rc) {
        /* the profile must load as any other */
        sp_hw back;
        sp_error_init(&err);
        if ((st = sp_hw_load_file(path, 0, &back, &err))) {
            cli_errorf("the profile written to %s does not load back", path);
            return cli_report(st, &err);
        }
    }
    return rc;
}

/* calibrate --backend cuda: one GPU, or exit 2 saying why not */
static int cuda_check(long long chips)
{
    int rc = cli_cuda_check("calibrate");
    if (rc) return rc;
    if (chips > 1) {
        cli_errorf("calibrate --backend cuda --chips %lld: one GPU is measured (compute, memory, dispatch); "
                   "NCCL collectives over several GPUs are not calibrated in this version", chips);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

static int calibrate(const sp_calib_opts *o, const char *out, int root)
{
    sp_calib_result *r = NULL;
    sp_status st = sp_calib_run(o, &r);
    if (st) return root ? cli_report(st, NULL) : cli_exit_for(st);
    int rc = CLI_EXIT_OK;
    if (root) {
        sp_calib_fit f;
        if ((st = sp_calib_fit_result(r, &f))) rc = cli_report(st, NULL);
        else rc = write_profile(out, r, &f);
        if (!rc) {
            char b[8][32];
            printf("wrote %s: %d chips (%s, %d cores), %.1f s\n", out, r->chips, sp_comm_backend_name(r->backend),
                   r->cores, r->seconds);
            printf("  peak f32 %s, bf16 %s; weight stream %s; matmul tile M %d (median err %.0f%%)\n"
                   "  dispatch %s a step; ",
                   cli_fmt_flops(f.peak_flops[SP_DT_F32], b[0], 32), cli_fmt_flops(f.peak_flops[SP_DT_BF16], b[1], 32),
                   cli_fmt_rate(f.mem_bw, b[2], 32), f.tile_m, 100 * f.mm_median_err,
                   cli_fmt_seconds(f.dispatch_s, b[3], 32));
            if (r->n_coll)
                printf("collective %s + %s a step + bytes at %s, each chip on a core (median err %.0f%%, worst %.0f%% on the points that carried the fit)\n",
                       cli_fmt_seconds(f.launch, b[6], 32), cli_fmt_seconds(f.alpha, b[4], 32),
                       cli_fmt_rate(f.beta > 0 ? 1.0 / f.beta : 0, b[5], 32), 100 * f.coll_median_err,
                       100 * f.coll_worst_err);
            if (f.wake_points) {
                printf("  and the wake-up of an idle core, a collective inside a program, by chips per core:");
                for (int i = 0; i < f.wake_points; i++)
                    printf(" %g: %s", f.wake_share[i], cli_fmt_seconds(f.wake_value[i], b[7], 32));
                printf("\n");
            } else if (f.idle_wake_s > 0)
                printf("  and the wake-up of an idle core %s a collective (chips each with a core; 1/n of it, n chips a core)\n",
                       cli_fmt_seconds(f.idle_wake_s, b[7], 32));
            else   /* cuda: one GPU (the profile's max_chips is 1: no layout prices a collective) */
                printf("collectives not measured (one chip)\n");
            if (f.stretch_points) {
                printf("  compute with chips sharing a core, beyond the share itself, by chips per core:");
                for (int i = 0; i < f.stretch_points; i++) printf(" %g: %.3gx", f.stretch_share[i], f.stretch_value[i]);
                printf("\n");
            }
            if (f.fetch_points) {
                printf("  weights fetched from beyond the cache, per byte, by working set:");
                for (int i = 0; i < f.fetch_points; i++)
                    printf(" %s: %.3g ps", cli_fmt_bytes(f.fetch_bytes[i], b[0], 32), 1e12 * f.fetch_value[i]);
                printf("\n");
            }
            if (f.wsa_points) {
                printf("  weight stream (fraction of the best rate by working set): %d chips at once",
                       r->compute_chips);
                for (int i = 0; i < f.mem_points; i++) printf(" %s: %.2f", cli_fmt_bytes(f.mem_bytes[i], b[0], 32), f.mem_value[i]);
                printf("; one chip alone");
                for (int i = 0; i < f.wsa_points; i++) printf(" %s: %.2f", cli_fmt_bytes(f.wsa_bytes[i], b[0], 32), f.wsa_value[i]);
                printf("\n");
            }
            if (f.step_elem_s[SP_ELEM_NORM_STATS] > 0) {
                printf("  elementwise kernels, per element:");
                for (int k = 0; k < SP_ELEM_COUNT; k++)
                    printf(" %s %s", sp_hw_elem_name((sp_hw_elem)k), cli_fmt_seconds(f.step_elem_s[k], b[0], 32));
                printf("\n");
            }
            for (int d = 0; d < 5; d++) {
                if (!f.rows_points[d]) continue;
                printf("  matmul rows %-4s (fraction of the FLOPs curve at T rows):", sp_dtype_name((sp_dtype)d));
                for (int i = 0; i < f.rows_points[d]; i++) printf(" %g: %.2f", f.rows_m[d][i], f.rows_value[d][i]);
                printf("\n");
            }
        }
    }
    sp_calib_free(r);
    return rc;
}

int cli_calibrate_local(int argc, char **argv)
{
    static const struct option opts[] = {{"backend", 1, 0, 'k'}, {"chips", 1, 0, 'n'}, {"out", 1, 0, 'o'},
                                         {"cores", 1, 0, 'c'},   {"quick", 0, 0, 'q'}, {"quiet", 0, 0, 'Q'},
                                         {"help", 0, 0, 'h'},    {0, 0, 0, 0}};
    sp_calib_opts o;
    sp_calib_opts_init(&o);
    o.log = stderr;
    const char *out = NULL, *backend = NULL;
    long long chips = 0, cores = 0;
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'k': backend = optarg; break;
        case 'n': if (cli_parse_long("calibrate", "--chips", optarg, 1, 64, &chips)) return CLI_EXIT_USAGE; break;
        case 'c': if (cli_parse_long("calibrate", "--cores", optarg, 1, 4096, &cores)) return CLI_EXIT_USAGE; break;
        case 'o': out = optarg; break;
        case 'q': o.quick = 1; break;
        case 'Q': o.log = NULL; break;
        case 'h': help(); return CLI_EXIT_OK;
        default: return cli_usage("calibrate", "unknown option");
        }
    }
    if (optind < argc) return cli_usage("calibrate", "unexpected argument '%s'", argv[optind]);
    if (!backend) return cli_usage("calibrate", "--backend threads|mpi|cuda is required");
    int cuda = !strcmp(backend, "cuda") || !strcmp(backend, "nccl");
    if (!cuda && strcmp(backend, "threads") && strcmp(backend, "mpi"))
        return cli_usage("calibrate", "--backend %s: threads, mpi or cuda", backend);
    if (!out) return cli_usage("calibrate", "--out FILE is required");
    o.cores = (int)cores;
    if (cuda) {
        int rc = cuda_check(chips);
        if (rc) return rc;
        o.backend = SP_COMM_BACKEND_NCCL;
        o.chips = 1;
        return calibrate(&o, out, 1);
    }
    if (!strcmp(backend, "threads")) {
        o.backend = SP_COMM_BACKEND_THREADS;
        o.chips = chips ? (int)chips : 1;
        return calibrate(&o, out, 1);
    }
#ifdef HAVE_MPI
    int rank, size, rc = cli_mpi_init("calibrate", &rank, &size);
    if (rc) return rc;
    if (chips && chips != size) {
        if (!rank) cli_errorf("calibrate --backend mpi: --chips %lld but the MPI world has %d ranks", chips, size);
        rc = CLI_EXIT_USAGE;
    } else {
        o.backend = SP_COMM_BACKEND_MPI;
        o.chips = size;
        if (rank) o.log = NULL;
        rc = calibrate(&o, out, rank == 0);
    }
    MPI_Finalize();
    return rc;
#else
    return cli_usage("calibrate", "--backend mpi: this build has no MPI (configure --with-mpi)");
#endif
}
