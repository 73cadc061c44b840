/* plan_and_run.c: a client of the installed shardplan library.
 *
 * Plans a layout for a small bundled model on 4 chips of a given hardware
 * (sp_autoconfig), then runs it on this machine's CPUs (4 threads, one per
 * chip) with its own prompt token ids, greedily, and checks that every
 * collective moved the bytes the lowering predicted.  Build it with only
 * pkg-config's flags:
 *
 *   cc plan_and_run.c $(pkg-config --cflags --libs shardplan) -o plan_and_run
 *   ./plan_and_run [MODEL [HW]]        (default tiny-llama on h100)
 *
 * Exit 0 when it ran and the bytes matched. */
#include <stdio.h>
#include <string.h>
#include <shardplan.h>

int main(int argc, char **argv)
{
    const char *model_name = argc > 1 ? argv[1] : "tiny-llama", *hw_name = argc > 2 ? argv[2] : "h100";
    enum { CHIPS = 4, B = 2, P = 6, G = 5 };
    /* the client's own prompts: B sequences of P token ids */
    const int32_t prompt[B * P] = {1, 17, 42, 7, 99, 3, 5, 8, 13, 21, 34, 55};
    sp_model m;
    sp_hw hw;
    sp_error err;
    char buf[1024];
    sp_error_init(&err);
    if (sp_model_find(model_name, &m, &err) != SP_OK || sp_hw_find(hw_name, &hw, &err) != SP_OK ||
        sp_model_check_run(&m, P + G, &err) != SP_OK) {
        fprintf(stderr, "plan_and_run: %s\n", sp_error_format(&err, buf, sizeof buf));
        return 2;
    }
    /* the layout: minimum total latency on CHIPS chips of hw, f32 weights so the run is exact */
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    sp_workload wl = {B, P, G};
    sp_layout l;
    sp_status st = sp_autoconfig(&m, &hw, CHIPS, B, &wl, &o, &l);
    if (st != SP_OK) {
        fprintf(stderr, "plan_and_run: no layout: %s\n", sp_last_error());
        return 1;
    }
    l.weights = SP_DT_F32;
    char lt[512];
    printf("%s on %d x %s: %s\n", m.name, CHIPS, hw.name, sp_layout_format(&l, lt, sizeof lt));

    sp_weights w;
    sp_exec *ex = NULL;
    int32_t tokens[B * G];
    sp_exec_stats stats;
    if ((st = sp_weights_build_random(&m, 1234, &w)) != SP_OK ||
        (st = sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex)) != SP_OK ||
        (st = sp_exec_run(ex, prompt, NULL, tokens, NULL, &stats)) != SP_OK) {
        fprintf(stderr, "plan_and_run: %s: %s\n", sp_status_str(st), sp_last_error());
        sp_exec_free(ex);
        sp_weights_free(&w);
        return 3;
    }
    int bad = stats.mismatches != 0;
    for (int k = 0; k < SP_COLL_COUNT; k++) bad |= stats.measured_bytes[k] != stats.predicted_bytes[k];
    for (int b = 0; b < B; b++) {
        printf("sequence %d:", b);
        for (int g = 0; g < G; g++) printf(" %d", tokens[b * G + g]);
        printf("\n");
    }
    printf("bytes moved %s the prediction\n", bad ? "DIFFER from" : "equal");
    sp_exec_free(ex);
    sp_weights_free(&w);
    return bad;
}
