/*
 * sp_autoconfig.h: configuration at startup.  One layout for a serving
 * process, fast and deterministic, narrowed to what a given server (vLLM,
 * SGLang, TensorRT-LLM) can express, and remembered in a plan cache so a
 * repeated start costs a file read and one pricing of the layout.
 *
 *   sp_autoconfig_opts ao;
 *   sp_autoconfig_opts_init(&ao);
 *   ao.server = SP_SERVER_VLLM;                // only layouts vLLM runs
 *   sp_autoconfig_result r;
 *   if (sp_autoconfig_ex(&m, &hw, 8, &w, NULL, &ao, &r) == SP_OK)
 *       printf("tp %d pp %d dp %d (%s)\n", r.layout.mesh[2], r.layout.stages,
 *              r.layout.replicas, r.cache == SP_CACHE_HIT ? "cached" : "planned");
 *
 * Plan cache: one JSON file per key in the cache directory
 * ($SHARDPLAN_CACHE_DIR, else $XDG_CACHE_HOME/shardplan, else
 * $HOME/.cache/shardplan; SHARDPLAN_CACHE_DIR=off disables it).  The key
 * (128 bits, hex) hashes every input: the model and hardware descriptions as
 * loaded (every field), chips, workload, the planner options, the server and
 * the library version.  An entry is written to a temporary file in the same
 * directory and renamed over the key's name, so a reader sees a whole entry
 * or none.  An entry that does not parse, names another key or version, or
 * holds a layout that does not apply to the inputs is ignored, planned
 * afresh and rewritten (SP_CACHE_CORRUPT).  Only layouts found are cached.
 */
#ifndef SP_AUTOCONFIG_H
#define SP_AUTOCONFIG_H
#include "sp_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Serving systems whose flags autoconfig writes.  Append-only. */
typedef enum sp_server {
    SP_SERVER_ANY = 0,      /* shardplan's own executor: every layout */
    SP_SERVER_VLLM = 1,
    SP_SERVER_SGLANG = 2,
    SP_SERVER_TRTLLM = 3,
    SP_SERVER_COUNT
} sp_server;
const char *sp_server_name(sp_server s);            /* "shardplan", "vllm", "sglang", "trtllm" */
const char *sp_server_title(sp_server s);           /* "shardplan", "vLLM", "SGLang", "TensorRT-LLM" */
sp_status sp_server_parse(const char *s, sp_server *out);   /* the names above, "any" = shardplan */

/* 1 if server s has a mode for weights (resp. KV cache) of dtype t. */
int sp_server_has_weights(sp_server s, sp_dtype t);
int sp_server_has_kv(sp_server s, sp_dtype t);

/* Narrows o to the layouts s can express: one tensor-parallel axis (mesh
 * 1x1xT) with the 1D weight-stationary FFN (Megatron column/row split) and
 * head-sharded attention in both phases, pipelines of exactly `stages`
 * micro-batches, and the server's weight precisions.  SP_SERVER_ANY leaves o
 * as it is.  SP_ENOTSUP when o->weights or o->kv names a precision the
 * server has no mode for (the message says which it has). */
sp_status sp_server_narrow(sp_server s, sp_plan_opts *o);

/* What of layout l the server cannot express, one line each (at most cap,
 * each NUL-terminated in SP_SERVER_NOTE_LEN bytes); returns the count, 0
 * when the server runs l as it is. */
#define SP_SERVER_NOTE_LEN 192
int sp_server_inexpressible(sp_server s, const sp_layout *l, char (*out)[SP_SERVER_NOTE_LEN], int cap);

typedef enum sp_cache_status {
    SP_CACHE_OFF = 0,       /* no cache directory */
    SP_CACHE_HIT = 1,       /* the layout came from the cache */
    SP_CACHE_MISS = 2,      /* planned; entry written (cache_written) */
    SP_CACHE_CORRUPT = 3,   /* an entry was there but unusable: planned and rewritten */
    SP_CACHE_STATUS_COUNT
} sp_cache_status;
const char *sp_cache_status_name(sp_cache_status c);   /* "off", "hit", "miss", "corrupt" */

typedef struct sp_autoconfig_opts {
    size_t size;                /* sizeof(sp_autoconfig_opts) */
    sp_server server;           /* narrow the search to what it expresses; default ANY */
    const char *cache_dir;      /* NULL (default): the environment's (above); "": no cache */
} sp_autoconfig_opts;
void sp_autoconfig_opts_init(sp_autoconfig_opts *o);

typedef struct sp_autoconfig_result {
    sp_layout layout;
    sp_cost cost;               /* the layout priced for the workload (on a hit: priced again) */
    sp_cache_status cache;
    int cache_written;          /* 1 if this call wrote the entry */
    char key[33];               /* the cache key, 32 hex digits */
    char cache_path[1024];      /* the entry's file ("" with no cache) */
} sp_autoconfig_result;

/*
 * NAME
 *   sp_autoconfig_ex - startup configuration through the plan cache
 * DESCRIPTION
 *   The best layout for plan_opts->objective (NULL: minimum total latency)
 *   for w on `chips` chips, narrowed with sp_server_narrow(ao->server), as
 *   sp_plan_solve finds it with no frontier, rivals or chip search; looked up
 *   in and written to the plan cache.  ao may be NULL (defaults).  A cache
 *   that cannot be written is not an error (SHARDPLAN_DEBUG=WARN says why).
 * RETURNS
 *   SP_OK with *out; SP_EINFEASIBLE when nothing fits or meets the bounds
 *   (the message says by how much); SP_ENOTSUP from sp_server_narrow; other
 *   errors as sp_plan_solve.
 */
sp_status sp_autoconfig_ex(const sp_model *m, const sp_hw *hw, int chips, const sp_workload *w,
                           const sp_plan_opts *plan_opts, const sp_autoconfig_opts *ao, sp_autoconfig_result *out);

/* The cache directory the environment names into buf ("" when disabled or
 * neither XDG_CACHE_HOME nor HOME is set); returns buf. */
char *sp_autoconfig_cache_dir(char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
