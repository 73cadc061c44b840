/* autoconfig.c: startup configuration (sp_autoconfig.h): server profiles,
 * the plan cache, and sp_autoconfig / sp_autoconfig_ex on top of
 * sp_plan_solve. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>
#include "sp_autoconfig.h"
#include "spi_common.h"

static const char *const server_names[SP_SERVER_COUNT] = {"shardplan", "vllm", "sglang", "trtllm"};
static const char *const server_titles[SP_SERVER_COUNT] = {"shardplan", "vLLM", "SGLang", "TensorRT-LLM"};
_Static_assert(sizeof server_names / sizeof server_names[0] == SP_SERVER_COUNT, "server names");

/* Weight and KV dtypes each server has a mode for (bit 1u << sp_dtype).
 * vLLM and SGLang: --dtype bfloat16/float16, --quantization fp8 (no int8
 * weight-only mode), --kv-cache-dtype auto|fp8*.  TensorRT-LLM:
 * --use_weight_only --weight_only_precision int8, --qformat fp8,
 * --int8_kv_cache, --kv_cache_dtype fp8.  doc/autoconfig.md cites them. */
#define DT(t) (1u << (t))
static const unsigned server_weights[SP_SERVER_COUNT] = {
    0, DT(SP_DT_BF16) | DT(SP_DT_F16) | DT(SP_DT_FP8), DT(SP_DT_BF16) | DT(SP_DT_F16) | DT(SP_DT_FP8),
    DT(SP_DT_BF16) | DT(SP_DT_F16) | DT(SP_DT_INT8) | DT(SP_DT_FP8)};
static const unsigned server_kv[SP_SERVER_COUNT] = {
    0, DT(SP_DT_BF16) | DT(SP_DT_F16) | DT(SP_DT_FP8), DT(SP_DT_BF16) | DT(SP_DT_F16) | DT(SP_DT_FP8),
    DT(SP_DT_BF16) | DT(SP_DT_F16) | DT(SP_DT_INT8) | DT(SP_DT_FP8)};

const char *sp_server_name(sp_server s) { return (unsigned)s < SP_SERVER_COUNT ? server_names[s] : "?"; }
const char *sp_server_title(sp_server s) { return (unsigned)s < SP_SERVER_COUNT ? server_titles[s] : "?"; }

sp_status sp_server_parse(const char *s, sp_server *out)
{
    if (s && !strcmp(s, "any")) {
        *out = SP_SERVER_ANY;
        return SP_OK;
    }
    for (int i = 0; s && i < SP_SERVER_COUNT; i++)
        if (!strcmp(s, server_names[i])) {
            *out = (sp_server)i;
            return SP_OK;
        }
    return spi_fail(SP_EINVAL, "unknown server \"%s\" (expected any, vllm, sglang or trtllm)", s ? s : "");
}

int sp_server_has_weights(sp_server s, sp_dtype t)
{
    if ((unsigned)s >= SP_SERVER_COUNT) return 0;
    return s == SP_SERVER_ANY || (server_weights[s] >> t & 1u);
}

int sp_server_has_kv(sp_server s, sp_dtype t)
{
    if ((unsigned)s >= SP_SERVER_COUNT) return 0;
    return s == SP_SERVER_ANY || (server_kv[s] >> t & 1u);
}

static void dtype_list(unsigned mask, char *buf, size_t n)
{
    buf[0] = 0;
    for (int t = 0; t < SP_DT_COUNT; t++)
        if (mask >> t & 1u) snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? ", " : "", sp_dtype_name(t));
}

sp_status sp_server_narrow(sp_server s, sp_plan_opts *o)
{
    if ((unsigned)s >= SP_SERVER_COUNT || !o) return spi_fail(SP_EINVAL, "sp_server_narrow: bad argument");
    if (s == SP_SERVER_ANY) return SP_OK;
    char have[64];
    static const sp_dtype plan_wt[SP_PLAN_W_COUNT] = {SP_DT_COUNT, SP_DT_BF16, SP_DT_INT8, SP_DT_FP8};
    if (o->weights != SP_PLAN_W_AUTO && !sp_server_has_weights(s, plan_wt[o->weights])) {
        dtype_list(server_weights[s], have, sizeof have);
        return spi_fail(SP_ENOTSUP, "%s cannot express %s weight-only quantisation (its weight precisions: %s)",
                        server_titles[s], sp_plan_weights_name(o->weights), have);
    }
    if (!sp_server_has_kv(s, o->kv)) {
        dtype_list(server_kv[s], have, sizeof have);
        return spi_fail(SP_ENOTSUP, "%s cannot express a %s KV cache (its KV cache dtypes: %s)", server_titles[s],
                        sp_dtype_name(o->kv), have);
    }
    o->ffn_layouts = 1u << SP_FL_WS1D;
    o->attn_layouts = 1u << SP_AL_HEADS;
    o->weight_dtypes = server_weights[s];
    o->tensor_1d = 1;
    o->microbatches_per_stage = 1;
    o->even_stages = 1;
    return SP_OK;
}

int sp_server_inexpressible(sp_server s, const sp_layout *l, char (*out)[SP_SERVER_NOTE_LEN], int cap)
{
    if ((unsigned)s >= SP_SERVER_COUNT || s == SP_SERVER_ANY || !l) return 0;
    const char *t = server_titles[s];
    int n = 0;
#define NOTE(...)                                                          \
    do {                                                                   \
        if (n < cap) snprintf(out[n], SP_SERVER_NOTE_LEN, __VA_ARGS__);    \
        n++;                                                               \
    } while (0)
    if (l->mesh[0] != 1 || l->mesh[1] != 1)
        NOTE("tensor mesh %dx%dx%d: %s shards over one tensor-parallel axis (mesh 1x1xT)", l->mesh[0], l->mesh[1],
             l->mesh[2], t);
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        sp_ffn_layout f = l->phase[p].ffn;
        if (f != SP_FL_WS1D)
            NOTE("%s FFN layout %s (%s): %s runs 1D tensor parallelism only (column then row split, ws1d)",
                 sp_phase_name((sp_phase)p), sp_ffn_layout_name(f),
                 f == SP_FL_WS2D ? "2D weight-stationary" : "weight-gathered", t);
        if (l->phase[p].attn != SP_AL_HEADS)
            NOTE("%s attention batch-sharded: %s shards attention over heads only", sp_phase_name((sp_phase)p), t);
    }
    if (!sp_server_has_weights(s, l->weights))
        NOTE("%s weights: %s has no %s weight-only mode", sp_dtype_name(l->weights), t, sp_dtype_name(l->weights));
    if (!sp_server_has_kv(s, l->kv)) NOTE("%s KV cache: %s has no such KV cache dtype", sp_dtype_name(l->kv), t);
    if (l->stages > 1 && l->microbatches != l->stages)
        NOTE("%d micro-batches over %d pipeline stages: %s schedules its own pipeline (one micro-batch per stage)",
             l->microbatches, l->stages, t);
    if (l->prefill_chunk)
        NOTE("prefill in passes of %d sequences: %s batches its prefill itself (its scheduler's batch limit)",
             l->prefill_chunk, t);
    if (l->prefill_tokens)
        NOTE("prefill in passes of %d prompt tokens: set %s's chunked prefill to that many tokens", l->prefill_tokens, t);
    if (sp_layout_uneven(l))
        NOTE("layers split unevenly over the stages (stage_layers): the %s flags written here split them evenly", t);
#undef NOTE
    return n;
}

static const char *const cache_names[SP_CACHE_STATUS_COUNT] = {"off", "hit", "miss", "corrupt"};
const char *sp_cache_status_name(sp_cache_status c)
{
    return (unsigned)c < SP_CACHE_STATUS_COUNT ? cache_names[c] : "?";
}

void sp_autoconfig_opts_init(sp_autoconfig_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->server = SP_SERVER_ANY;
}

char *sp_autoconfig_cache_dir(char *buf, size_t size)
{
    const char *d = sp_env(SP_ENV_CACHE_DIR), *x = sp_env(SP_ENV_XDG_CACHE_HOME), *h = sp_env(SP_ENV_HOME);
    int r;
    if (!strcmp(d, "off")) r = snprintf(buf, size, "%s", "");
    else if (d[0]) r = snprintf(buf, size, "%s", d);
    else if (x[0]) r = snprintf(buf, size, "%s/shardplan", x);
    else if (h[0]) r = snprintf(buf, size, "%s/.cache/shardplan", h);
    else r = snprintf(buf, size, "%s", "");
    if (r < 0 || (size_t)r >= size) buf[0] = 0;   /* too long to use: no cache */
    return buf;
}

/* ---- the key: two independent 64-bit hashes (FNV-1a and a multiply-xorshift
 * mix) over every input, as bytes.  Structs are hashed whole: they are
 * zero-initialised by their init functions, so equal descriptions hash
 * equally; padding that differs could only cause a miss, never a wrong hit. */
typedef struct keyhash {
    uint64_t a, b;
} keyhash;

static void kh_bytes(keyhash *k, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        k->a = (k->a ^ c[i]) * 0x100000001b3ULL;
        k->b = (k->b ^ c[i]) * 0x9e3779b97f4a7c15ULL;
        k->b ^= k->b >> 29;
    }
}
#define KH(k, v) kh_bytes((k), &(v), sizeof(v))

/* Cache entry format; bump on any change to what an entry holds. */
#define CACHE_FORMAT 1

static void cache_key(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w, const sp_plan_opts *o,
                      sp_server server, char key[33])
{
    keyhash k = {0xcbf29ce484222325ULL, 0x243f6a8885a308d3ULL};
    const char *v = sp_version();
    int fmt = CACHE_FORMAT;
    size_t szm = sizeof *m, szh = sizeof *hw;
    kh_bytes(&k, v, strlen(v) + 1);
    KH(&k, fmt);
    KH(&k, szm);
    kh_bytes(&k, m, sizeof *m);
    KH(&k, szh);
    kh_bytes(&k, hw, sizeof *hw);
    KH(&k, chips);
    KH(&k, w->batch);
    KH(&k, w->prompt);
    KH(&k, w->gen);
    /* the options field by field (no padding) */
    KH(&k, o->objective);
    KH(&k, o->latency_metric);
    KH(&k, o->cost_metric);
    KH(&k, o->max_latency_s);
    KH(&k, o->min_tokens_per_s);
    KH(&k, o->weights);
    KH(&k, o->kv);
    KH(&k, o->time_limit_ms);     /* a time limit can stop at a feasible, not optimal, layout */
    KH(&k, o->ffn_layouts);
    KH(&k, o->attn_layouts);
    KH(&k, o->weight_dtypes);
    KH(&k, o->tensor_1d);
    KH(&k, o->microbatches_per_stage);
    KH(&k, o->even_stages);
    if (o->offload) KH(&k, o->offload);   /* keys of plans that offload nothing stay as they were */
    KH(&k, server);
    snprintf(key, 33, "%016llx%016llx", (unsigned long long)k.a, (unsigned long long)k.b);
}

static int mkdir_p(const char *dir)
{
    char p[1024];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return -1;
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) && errno != EEXIST) return -1;
            *s = '/';
        }
    return mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

/* Reads an entry: 1 with *l when it is whole and names this key and version. */
static int cache_read(const char *path, const char *key, sp_layout *l, int *present)
{
    *present = access(path, F_OK) == 0;
    if (!*present) return 0;
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) return 0;
    int ok = 0;
    json_t *jk = json_object_get(j, "key"), *jv = json_object_get(j, "version"), *jf = json_object_get(j, "format");
    if (json_is_string(jk) && !strcmp(json_string_value(jk), key) && json_is_string(jv) &&
        !strcmp(json_string_value(jv), sp_version()) && json_is_integer(jf) && json_integer_value(jf) == CACHE_FORMAT) {
        sp_error err;
        sp_error_init(&err);
        ok = sp_layout_from_json(json_object_get(j, "layout"), l, &err) == SP_OK;
    }
    json_decref(j);
    return ok;
}

/* Writes the entry to a temporary file in the same directory, then renames
 * it over the key's name (rename is atomic within a file system). */
static int cache_write(const char *dir, const char *path, const char *key, const sp_model *m, const sp_hw *hw,
                       int chips, const sp_workload *w, sp_server server, const sp_layout *l)
{
    if (mkdir_p(dir)) return -1;
    /* unique per process and per call: threads of one server writing the
     * same key never share a temporary file */
    static _Atomic unsigned serial;
    char tmp[1100];
    if (snprintf(tmp, sizeof tmp, "%s/.%s.%ld.%u.tmp", dir, key, (long)getpid(), serial++) >= (int)sizeof tmp)
        return -1;
    json_t *j = json_object();
    json_object_set_new(j, "format", json_integer(CACHE_FORMAT));
    json_object_set_new(j, "version", json_string(sp_version()));
    json_object_set_new(j, "key", json_string(key));
    json_object_set_new(j, "model", json_string(m->name));
    json_object_set_new(j, "hw", json_string(hw->name));
    json_object_set_new(j, "chips", json_integer(chips));
    json_object_set_new(j, "batch", json_integer(w->batch));
    json_object_set_new(j, "prompt", json_integer(w->prompt));
    json_object_set_new(j, "gen", json_integer(w->gen));
    json_object_set_new(j, "server", json_string(sp_server_name(server)));
    json_object_set_new(j, "layout", (json_t *)sp_layout_to_json(l));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    int rc = -1;
    if (fd >= 0) {
        FILE *f = fdopen(fd, "w");
        if (!f) close(fd);
        else {
            int bad = json_dumpf(j, f, JSON_COMPACT) != 0 || fputc('\n', f) == EOF || fflush(f) != 0 || fsync(fd) != 0;
            bad |= fclose(f) != 0;
            if (!bad && rename(tmp, path) == 0) rc = 0;
        }
        if (rc) unlink(tmp);
    }
    json_decref(j);
    return rc;
}

/* The planner's answer, no cache. */
static sp_status solve(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w, const sp_plan_opts *o,
                       sp_layout *out, sp_cost *cost)
{
    sp_plan *p;
    SP_CHECK(sp_plan_solve(m, hw, chips, w, o, &p));
    sp_status st = SP_OK;
    if (p->has_chosen) {
        *out = p->chosen.layout;
        *cost = p->chosen.cost;
    } else if (p->min_shortfall_bytes < 0)
        st = spi_fail(SP_EINFEASIBLE, "no layout applies to %s on %d chips at batch %lld", m->name, chips,
                      (long long)w->batch);
    else if (p->min_shortfall_bytes > 0)
        st = spi_fail(SP_EINFEASIBLE, "nothing fits: the best layout is %lld bytes per chip over capacity",
                      (long long)p->min_shortfall_bytes);
    else st = spi_fail(SP_EINFEASIBLE, "no layout meets the bounds (%s)", sp_plan_result_name(p->result));
    sp_plan_free(p);
    return st;
}

sp_status sp_autoconfig_ex(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                           const sp_plan_opts *plan_opts, const sp_autoconfig_opts *ao, sp_autoconfig_result *out)
{
    if (!m || !hw || !w || !out) return spi_fail(SP_EINVAL, "sp_autoconfig_ex: NULL argument");
    sp_autoconfig_opts a;
    if (ao) a = *ao;
    else sp_autoconfig_opts_init(&a);
    if (a.size != sizeof a || (unsigned)a.server >= SP_SERVER_COUNT)
        return spi_fail(SP_EINVAL, "sp_autoconfig_ex: bad sp_autoconfig_opts (not initialised with sp_autoconfig_opts_init?)");
    sp_plan_opts o;
    if (plan_opts) o = *plan_opts;
    else sp_plan_opts_init(&o);
    if (o.size != sizeof o) return spi_fail(SP_EINVAL, "sp_autoconfig_ex: bad sp_plan_opts");
    if (o.disaggregate)
        return spi_fail(SP_ENOTSUP, "autoconfig with separate prefill and decode groups (sp_plan_opts.disaggregate) is "
                                    "not implemented: a serving profile names one layout (sp_plan_solve searches them)");
    o.frontier = 0;
    o.rivals = 0;
    o.search_min_chips = 0;
    SP_CHECK(sp_server_narrow(a.server, &o));

    memset(out, 0, sizeof *out);
    char dir[1024];
    if (a.cache_dir) snprintf(dir, sizeof dir, "%s", a.cache_dir);
    else sp_autoconfig_cache_dir(dir, sizeof dir);
    cache_key(m, hw, chips, w, &o, a.server, out->key);
    if (!dir[0]) {
        out->cache = SP_CACHE_OFF;
        return solve(m, hw, chips, w, &o, &out->layout, &out->cost);
    }
    if (snprintf(out->cache_path, sizeof out->cache_path, "%s/%s.json", dir, out->key) >= (int)sizeof out->cache_path) {
        out->cache_path[0] = 0;
        out->cache = SP_CACHE_OFF;
        return solve(m, hw, chips, w, &o, &out->layout, &out->cost);
    }
    int present;
    if (cache_read(out->cache_path, out->key, &out->layout, &present)) {
        /* Priced again (one layout, no search): the figures a miss gives,
         * and a check that the entry's layout applies to these inputs. */
        if (sp_layout_check(&out->layout, m, hw, chips, w->batch, NULL) == SP_OK &&
            sp_cost_eval(m, hw, &out->layout, w, NULL, &out->cost) == SP_OK && out->cost.feasible) {
            out->cache = SP_CACHE_HIT;
            return SP_OK;
        }
    }
    out->cache = present ? SP_CACHE_CORRUPT : SP_CACHE_MISS;
    if (present) sp_log(SP_LOG_WARN, "PLAN", "plan cache entry %s unusable: planning afresh and rewriting it", out->cache_path);
    SP_CHECK(solve(m, hw, chips, w, &o, &out->layout, &out->cost));
    if (cache_write(dir, out->cache_path, out->key, m, hw, chips, w, a.server, &out->layout) == 0) out->cache_written = 1;
    else sp_log(SP_LOG_WARN, "PLAN", "plan cache: cannot write %s: %s", out->cache_path, strerror(errno));
    return SP_OK;
}

sp_status sp_autoconfig(const sp_model *m, const sp_hw *hw, int chips, int64_t batch, const sp_workload *w,
                        const sp_plan_opts *opts, sp_layout *out)
{
    if (!w || !out) return spi_fail(SP_EINVAL, "sp_autoconfig: NULL argument");
    sp_workload wi = *w;
    wi.batch = batch;
    sp_autoconfig_result r;
    SP_CHECK(sp_autoconfig_ex(m, hw, chips, &wi, opts, NULL, &r));
    *out = r.layout;
    return SP_OK;
}
