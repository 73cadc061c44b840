/*
 * examples/autoconfig.c: what a serving process does at startup: describe
 * its model, chips and expected workload, ask libshardplan for the layout
 * (narrowed to what its server can run, answered from the plan cache after
 * the first start), and start with the resulting parallel sizes.
 *
 *   cc autoconfig.c $(pkg-config --cflags --libs shardplan) -o autoconfig
 *   ./autoconfig [MODEL HW CHIPS BATCH PROMPT GEN [vllm|sglang|trtllm|any]]
 *
 * Prints the sizes a server would take (and whether the cache answered);
 * exit 1 when nothing fits, 2 on bad input.
 */
#include <stdio.h>
#include <stdlib.h>
#include "sp_autoconfig.h"

int main(int argc, char **argv)
{
    const char *model = "llama2-7b", *hwname = "h100", *server_name = "vllm";
    int chips = 2;
    sp_workload w = {.batch = 8, .prompt = 512, .gen = 64};
    if (argc >= 7) {
        model = argv[1];
        hwname = argv[2];
        chips = atoi(argv[3]);
        w.batch = atoll(argv[4]);
        w.prompt = atoll(argv[5]);
        w.gen = atoll(argv[6]);
        if (argc >= 8) server_name = argv[7];
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [MODEL HW CHIPS BATCH PROMPT GEN [SERVER]]\n", argv[0]);
        return 2;
    }

    sp_model m;
    sp_hw hw;
    sp_error err;
    sp_error_init(&err);
    char msg[1024];
    if (sp_model_find(model, &m, &err) != SP_OK || sp_hw_find(hwname, &hw, &err) != SP_OK) {
        fprintf(stderr, "autoconfig: %s\n", sp_error_format(&err, msg, sizeof msg));
        return 2;
    }

    sp_autoconfig_opts ao;
    sp_autoconfig_opts_init(&ao);            /* cache in $XDG_CACHE_HOME/shardplan */
    if (sp_server_parse(server_name, &ao.server) != SP_OK) {
        fprintf(stderr, "autoconfig: %s\n", sp_last_error());
        return 2;
    }
    sp_plan_opts po;
    sp_plan_opts_init(&po);
    po.objective = SP_PLAN_MIN_LATENCY;      /* or SP_PLAN_MIN_COST with po.max_latency_s */

    sp_autoconfig_result r;
    sp_status st = sp_autoconfig_ex(&m, &hw, chips, &w, &po, &ao, &r);
    if (st != SP_OK) {
        fprintf(stderr, "autoconfig: %s: %s\n", sp_status_str(st), sp_last_error());
        return st == SP_EINFEASIBLE ? 1 : 2;
    }
    /* The server's sizes: one tensor-parallel axis, stages, replicas. */
    const sp_layout *l = &r.layout;
    int tp = l->mesh[0] * l->mesh[1] * l->mesh[2];
    char text[512];
    printf("server %s: tensor parallel %d, pipeline stages %d, data replicas %d, max batch %lld per replica, "
           "weights %s, kv cache %s\n",
           sp_server_name(ao.server), tp, l->stages, l->replicas, (long long)(w.batch / l->replicas),
           sp_dtype_name(l->weights), sp_dtype_name(l->kv));
    printf("layout %s\n", sp_layout_format(l, text, sizeof text));
    printf("predicted: %.3f ms per decode step, %.1f tokens/s; plan cache: %s\n", r.cost.decode_step_s * 1e3,
           r.cost.tokens_per_s, sp_cache_status_name(r.cache));
    return 0;
}
