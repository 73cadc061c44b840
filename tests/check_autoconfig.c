/* check_autoconfig.c: startup configuration (sp_autoconfig.h): the server
 * narrowing against an independent enumeration of what the server runs,
 * what a server cannot express, precision refusals, and the plan cache:
 * miss then hit with the same figures, a corrupt or inapplicable entry
 * ignored and rewritten by rename (a hard link to the old entry keeps the
 * old bytes), no temporary file left, an unwritable directory harmless,
 * sp_autoconfig going through the same cache. */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "sp_autoconfig.h"

static char tmpdir[256];

static void setup_dir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/check_autoconfig.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_dir(const char *d)
{
    DIR *dp = opendir(d);
    if (!dp) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(dp)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", d, e->d_name);
            unlink(p);
        }
    closedir(dp);
    rmdir(d);
}

static void load(const char *model, const char *hw, sp_model *m, sp_hw *h)
{
    sp_error err;
    sp_error_init(&err);
    ck_assert_int_eq(sp_model_find(model, m, &err), SP_OK);
    ck_assert_int_eq(sp_hw_find(hw, h, &err), SP_OK);
}

/* ---- narrowing = enumeration of the server's layouts ---- */
static const struct {
    const char *model, *hw;
    int chips;
    int64_t batch, prompt, gen;
    sp_server server;
} cases[] = {
    {"llama2-7b", "h100", 8, 16, 512, 64, SP_SERVER_VLLM},
    {"llama2-70b", "h100", 8, 64, 1024, 128, SP_SERVER_SGLANG},
    {"llama2-13b", "a100-80g", 4, 8, 256, 256, SP_SERVER_TRTLLM},
    {"palm-8b", "tpu-v4", 8, 32, 128, 32, SP_SERVER_VLLM},
    {"llama2-70b", "h100", 16, 32, 2048, 64, SP_SERVER_TRTLLM},
};

/* Independent of plan_space.c: every (stages, replicas, tensor size) with
 * mesh 1x1xT, ws1d/heads in both phases, micro-batches = stages, each
 * weight precision the server and chip have; the least total latency. */
static double enumerate_best(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w, sp_server s,
                             sp_layout *best)
{
    double bt = INFINITY;
    static const sp_dtype wts[] = {SP_DT_BF16, SP_DT_INT8, SP_DT_FP8};
    for (int S = 1; S <= chips; S++)
        for (int R = 1; R <= chips; R++) {
            if (chips % (S * R)) continue;
            for (int wi = 0; wi < 3; wi++) {
                if (!sp_server_has_weights(s, wts[wi]) || hw->peak_flops[wts[wi]] <= 0) continue;
                sp_layout l;
                sp_layout_init(&l);
                l.stages = S;
                l.replicas = R;
                l.mesh[0] = l.mesh[1] = 1;
                l.mesh[2] = chips / S / R;
                l.microbatches = S;
                l.weights = wts[wi];
                for (int p = 0; p < SP_PHASE_COUNT; p++) {
                    l.phase[p].ffn = SP_FL_WS1D;
                    l.phase[p].attn = SP_AL_HEADS;
                }
                if (sp_layout_check(&l, m, hw, chips, w->batch, NULL) != SP_OK) continue;
                sp_cost c;
                sp_cost_opts co;
                sp_cost_opts_init(&co);
                co.quiet = 1;
                sp_layout chosen;   /* the prefill chunked as the planner weighs it */
                if (sp_cost_eval_chunked(m, hw, &l, w, &co, &chosen, &c) != SP_OK || !c.feasible) continue;
                l = chosen;
                if (c.total_s < bt) {
                    bt = c.total_s;
                    *best = l;
                }
            }
        }
    return bt;
}

START_TEST(test_narrow_is_enumeration)
{
    sp_model m;
    sp_hw hw;
    load(cases[_i].model, cases[_i].hw, &m, &hw);
    sp_workload w = {cases[_i].batch, cases[_i].prompt, cases[_i].gen};
    sp_autoconfig_opts ao;
    sp_autoconfig_opts_init(&ao);
    ao.server = cases[_i].server;
    ao.cache_dir = "";
    sp_autoconfig_result r, full;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, cases[_i].chips, &w, NULL, &ao, &r), SP_OK);
    ck_assert_int_eq(r.cache, SP_CACHE_OFF);
    char notes[8][SP_SERVER_NOTE_LEN];
    ck_assert_int_eq(sp_server_inexpressible(ao.server, &r.layout, notes, 8), 0);
    sp_layout eb;
    double bt = enumerate_best(&m, &hw, cases[_i].chips, &w, ao.server, &eb);
    ck_assert(isfinite(bt));
    ck_assert_msg(fabs(r.cost.total_s - bt) <= 1e-9 * bt, "narrowed %.9g s, enumerated %.9g s", r.cost.total_s, bt);
    /* narrowing never beats the whole space */
    ao.server = SP_SERVER_ANY;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, cases[_i].chips, &w, NULL, &ao, &full), SP_OK);
    ck_assert(full.cost.total_s <= r.cost.total_s * (1 + 1e-12));
}
END_TEST

START_TEST(test_inexpressible)
{
    sp_layout l;
    sp_layout_init(&l);
    l.mesh[0] = 2, l.mesh[1] = 2, l.mesh[2] = 2;
    l.weights = SP_DT_INT8;
    l.phase[SP_PHASE_PREFILL].ffn = SP_FL_WG_XY;
    l.phase[SP_PHASE_DECODE].ffn = SP_FL_WS2D;
    l.phase[SP_PHASE_DECODE].attn = SP_AL_BATCH;
    char n[8][SP_SERVER_NOTE_LEN];
    ck_assert_int_eq(sp_server_inexpressible(SP_SERVER_ANY, &l, n, 8), 0);
    /* mesh, two FFN layouts, batch attention, int8 weights */
    ck_assert_int_eq(sp_server_inexpressible(SP_SERVER_VLLM, &l, n, 8), 5);
    ck_assert_ptr_nonnull(strstr(n[0], "2x2x2"));
    ck_assert_ptr_nonnull(strstr(n[1], "weight-gathered"));
    ck_assert_ptr_nonnull(strstr(n[2], "2D weight-stationary"));
    ck_assert_ptr_nonnull(strstr(n[3], "batch-sharded"));
    ck_assert_ptr_nonnull(strstr(n[4], "int8"));
    /* TensorRT-LLM has int8 weight-only */
    ck_assert_int_eq(sp_server_inexpressible(SP_SERVER_TRTLLM, &l, n, 8), 4);
    /* cap respected, count still whole */
    ck_assert_int_eq(sp_server_inexpressible(SP_SERVER_SGLANG, &l, n, 1), 5);
    /* a pipeline with its own micro-batch count */
    sp_layout_init(&l);
    l.mesh[2] = 2;
    l.stages = 2;
    l.microbatches = 4;
    l.phase[0].ffn = l.phase[1].ffn = SP_FL_WS1D;
    ck_assert_int_eq(sp_server_inexpressible(SP_SERVER_VLLM, &l, n, 8), 1);
    ck_assert_ptr_nonnull(strstr(n[0], "micro-batches"));
    l.microbatches = 2;
    ck_assert_int_eq(sp_server_inexpressible(SP_SERVER_VLLM, &l, n, 8), 0);
}
END_TEST

START_TEST(test_narrow_refuses)
{
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.weights = SP_PLAN_W_INT8;
    ck_assert_int_eq(sp_server_narrow(SP_SERVER_VLLM, &o), SP_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "int8"));
    ck_assert_int_eq(sp_server_narrow(SP_SERVER_SGLANG, &o), SP_ENOTSUP);
    ck_assert_int_eq(sp_server_narrow(SP_SERVER_TRTLLM, &o), SP_OK);
    ck_assert_int_eq(o.tensor_1d, 1);
    ck_assert_uint_eq(o.ffn_layouts, 1u << SP_FL_WS1D);
    sp_plan_opts_init(&o);
    o.kv = SP_DT_INT8;
    ck_assert_int_eq(sp_server_narrow(SP_SERVER_VLLM, &o), SP_ENOTSUP);
    ck_assert_int_eq(sp_server_narrow(SP_SERVER_TRTLLM, &o), SP_OK);
    sp_plan_opts_init(&o);
    ck_assert_int_eq(sp_server_narrow(SP_SERVER_ANY, &o), SP_OK);
    ck_assert_int_eq(o.tensor_1d, 0);
    ck_assert_uint_eq(o.ffn_layouts, 0);
    sp_server s;
    ck_assert_int_eq(sp_server_parse("sglang", &s), SP_OK);
    ck_assert_int_eq(s, SP_SERVER_SGLANG);
    ck_assert_int_eq(sp_server_parse("any", &s), SP_OK);
    ck_assert_int_eq(s, SP_SERVER_ANY);
    ck_assert_int_eq(sp_server_parse("tgi", &s), SP_EINVAL);
}
END_TEST

/* ---- the cache ---- */
static int count_tmp(const char *d)
{
    DIR *dp = opendir(d);
    ck_assert_ptr_nonnull(dp);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(dp)))
        if (strstr(e->d_name, ".tmp")) n++;
    closedir(dp);
    return n;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void problem(sp_model *m, sp_hw *hw, sp_workload *w, sp_autoconfig_opts *ao)
{
    load("llama2-13b", "h100", m, hw);
    *w = (sp_workload){16, 512, 64};
    sp_autoconfig_opts_init(ao);
    ao->server = SP_SERVER_VLLM;
    ao->cache_dir = tmpdir;
}

START_TEST(test_cache_miss_hit)
{
    setup_dir();
    sp_model m;
    sp_hw hw;
    sp_workload w;
    sp_autoconfig_opts ao;
    problem(&m, &hw, &w, &ao);
    sp_autoconfig_result a, b;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &a), SP_OK);
    ck_assert_int_eq(a.cache, SP_CACHE_MISS);
    ck_assert_int_eq(a.cache_written, 1);
    ck_assert_int_eq(strlen(a.key), 32);
    ck_assert_int_eq(access(a.cache_path, R_OK), 0);
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &b), SP_OK);
    ck_assert_int_eq(b.cache, SP_CACHE_HIT);
    ck_assert_int_eq(b.cache_written, 0);
    ck_assert_str_eq(a.key, b.key);
    ck_assert_mem_eq(&a.layout, &b.layout, sizeof a.layout);
    ck_assert_double_eq(a.cost.total_s, b.cost.total_s);
    ck_assert_double_eq(a.cost.decode_step_s, b.cost.decode_step_s);
    ck_assert_int_eq(a.cost.mem.total, b.cost.mem.total);
    /* every input is in the key */
    sp_autoconfig_result c;
    w.gen = 65;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &c), SP_OK);
    ck_assert_int_eq(c.cache, SP_CACHE_MISS);
    ck_assert_str_ne(c.key, a.key);
    w.gen = 64;
    hw.hbm_bw *= 1.01;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &c), SP_OK);
    ck_assert_int_eq(c.cache, SP_CACHE_MISS);
    hw.hbm_bw /= 1.01;
    m.rope_theta += 1;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &c), SP_OK);
    ck_assert_int_eq(c.cache, SP_CACHE_MISS);
    m.rope_theta -= 1;
    ao.server = SP_SERVER_SGLANG;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &c), SP_OK);
    ck_assert_int_eq(c.cache, SP_CACHE_MISS);
    ao.server = SP_SERVER_VLLM;
    sp_plan_opts o;
    sp_plan_opts_init(&o);
    o.max_latency_s = 10;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, &o, &ao, &c), SP_OK);
    ck_assert_int_eq(c.cache, SP_CACHE_MISS);
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &c), SP_OK);
    ck_assert_int_eq(c.cache, SP_CACHE_HIT);
    ck_assert_int_eq(count_tmp(tmpdir), 0);
    rm_dir(tmpdir);
}
END_TEST

/* Corrupt entries: garbage, a truncated entry, another key, an entry whose
 * layout does not apply.  Each is ignored, planned afresh and rewritten by
 * a rename: a hard link made to the bad entry still holds its bytes. */
START_TEST(test_cache_corrupt)
{
    setup_dir();
    sp_model m;
    sp_hw hw;
    sp_workload w;
    sp_autoconfig_opts ao;
    problem(&m, &hw, &w, &ao);
    sp_autoconfig_result a, b;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &a), SP_OK);
    FILE *f = fopen(a.cache_path, "r");
    ck_assert_ptr_nonnull(f);
    char good[4096];
    size_t n = fread(good, 1, sizeof good - 1, f);
    good[n] = 0;
    fclose(f);
    char other[4096], badlayout[4096];
    snprintf(other, sizeof other, "%s", good);
    memcpy(strstr(other, a.key), "00000000", 8);             /* names another key */
    snprintf(badlayout, sizeof badlayout, "%s", good);
    char *mesh = strstr(badlayout, "\"mesh\":[");
    ck_assert_ptr_nonnull(mesh);
    mesh[8] = '3';                                           /* 3 x ... chips: does not apply */
    /* a layout that applies to twice the chips (priced fine, wrong here) */
    char twice[4096], rs[32], rs2[32];
    snprintf(rs, sizeof rs, "\"replicas\":%d,", a.layout.replicas);
    snprintf(rs2, sizeof rs2, "\"replicas\":%d,", 2 * a.layout.replicas);
    char *rp = strstr(good, rs);
    ck_assert_ptr_nonnull(rp);
    snprintf(twice, sizeof twice, "%.*s%s%s", (int)(rp - good), good, rs2, rp + strlen(rs));
    char trunc[4096];
    snprintf(trunc, sizeof trunc, "%.*s", (int)(n / 2), good);
    const char *bad[] = {"garbage \x01\x02", "", trunc, other, badlayout, twice};
    char lnk[600];
    snprintf(lnk, sizeof lnk, "%s/old-entry", tmpdir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(a.cache_path, bad[i]);
        unlink(lnk);
        ck_assert_int_eq(link(a.cache_path, lnk), 0);
        ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &b), SP_OK);
        ck_assert_msg(b.cache == SP_CACHE_CORRUPT, "case %zu: cache %s", i, sp_cache_status_name(b.cache));
        ck_assert_int_eq(b.cache_written, 1);
        ck_assert_mem_eq(&a.layout, &b.layout, sizeof a.layout);
        /* rewritten by rename: the old inode (the link) kept the bad bytes */
        f = fopen(lnk, "r");
        ck_assert_ptr_nonnull(f);
        char old[4096];
        size_t k = fread(old, 1, sizeof old - 1, f);
        old[k] = 0;
        fclose(f);
        ck_assert_str_eq(old, bad[i]);
        struct stat s1, s2;
        ck_assert_int_eq(stat(lnk, &s1), 0);
        ck_assert_int_eq(stat(a.cache_path, &s2), 0);
        ck_assert(s1.st_ino != s2.st_ino);
        /* and the new entry is whole: the next call hits */
        ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &b), SP_OK);
        ck_assert_int_eq(b.cache, SP_CACHE_HIT);
    }
    unlink(lnk);
    ck_assert_int_eq(count_tmp(tmpdir), 0);
    rm_dir(tmpdir);
}
END_TEST

START_TEST(test_cache_unwritable)
{
    sp_model m;
    sp_hw hw;
    sp_workload w;
    sp_autoconfig_opts ao;
    setup_dir();
    problem(&m, &hw, &w, &ao);
    char file[512];
    snprintf(file, sizeof file, "%s/not-a-dir", tmpdir);
    write_file(file, "x");
    ao.cache_dir = file;   /* a file where the directory should be */
    sp_autoconfig_result r;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 4, &w, NULL, &ao, &r), SP_OK);
    ck_assert_int_eq(r.cache, SP_CACHE_MISS);
    ck_assert_int_eq(r.cache_written, 0);
    unlink(file);
    rm_dir(tmpdir);
}
END_TEST

/* Threads of one server starting together on an empty cache: every call
 * answers the same, the entry left is whole, no temporary file remains. */
typedef struct racer {
    sp_model m;
    sp_hw hw;
    sp_workload w;
    sp_autoconfig_opts ao;
    sp_autoconfig_result r;
    sp_status st;
} racer;

static void *race(void *arg)
{
    racer *x = arg;
    x->st = sp_autoconfig_ex(&x->m, &x->hw, 4, &x->w, NULL, &x->ao, &x->r);
    return NULL;
}

START_TEST(test_cache_concurrent_writers)
{
    setup_dir();
    enum { N = 4 };
    racer x[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) problem(&x[i].m, &x[i].hw, &x[i].w, &x[i].ao);
    for (int i = 0; i < N; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, race, &x[i]), 0);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) ck_assert_int_eq(x[i].st, SP_OK);
    for (int i = 1; i < N; i++) ck_assert_mem_eq(&x[i].r.layout, &x[0].r.layout, sizeof x[0].r.layout);
    ck_assert_int_eq(count_tmp(tmpdir), 0);
    sp_autoconfig_result r;
    ck_assert_int_eq(sp_autoconfig_ex(&x[0].m, &x[0].hw, 4, &x[0].w, NULL, &x[0].ao, &r), SP_OK);
    ck_assert_int_eq(r.cache, SP_CACHE_HIT);
    rm_dir(tmpdir);
}
END_TEST

/* sp_autoconfig goes through the same cache (SHARDPLAN_CACHE_DIR, set by
 * main before the environment is first read). */
START_TEST(test_legacy_entry_point_uses_cache)
{
    sp_model m;
    sp_hw hw;
    load("llama2-7b", "a100-80g", &m, &hw);
    sp_workload w = {0, 128, 16};
    sp_layout l;
    ck_assert_int_eq(sp_autoconfig(&m, &hw, 2, 4, &w, NULL, &l), SP_OK);
    w.batch = 4;
    sp_autoconfig_result r;
    ck_assert_int_eq(sp_autoconfig_ex(&m, &hw, 2, &w, NULL, NULL, &r), SP_OK);
    ck_assert_int_eq(r.cache, SP_CACHE_HIT);
    ck_assert_mem_eq(&l, &r.layout, sizeof l);
    char dir[1024];
    ck_assert_str_eq(sp_autoconfig_cache_dir(dir, sizeof dir), getenv("SHARDPLAN_CACHE_DIR"));
}
END_TEST

int main(void)
{
    /* the cache directory of the default-options tests: a fresh one */
    char envdir[256];
    snprintf(envdir, sizeof envdir, "%s/check_autoconfig_env.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(envdir)) return EXIT_FAILURE;
    setenv("SHARDPLAN_CACHE_DIR", envdir, 1);
    Suite *s = suite_create("autoconfig");
    TCase *tc = tcase_create("server");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_narrow_is_enumeration, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, test_inexpressible);
    tcase_add_test(tc, test_narrow_refuses);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("cache");
    tcase_set_timeout(tk, 120);
    tcase_add_test(tk, test_cache_miss_hit);
    tcase_add_test(tk, test_cache_corrupt);
    tcase_add_test(tk, test_cache_unwritable);
    tcase_add_test(tk, test_cache_concurrent_writers);
    tcase_add_test(tk, test_legacy_entry_point_uses_cache);
    suite_add_tcase(s, tk);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    rm_dir(envdir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
