/* layout.c: the layout's text and JSON forms and its validity checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "spi_common.h"
#include "sp_layout.h"

static const char *const ffn_names[SP_FL_COUNT] = {"ws1d", "ws2d", "wg-x", "wg-xy", "wg-xyz"};
static const char *const attn_names[SP_AL_COUNT] = {"heads", "batch"};
static const char *const phase_names[SP_PHASE_COUNT] = {"prefill", "decode"};

const char *sp_ffn_layout_name(sp_ffn_layout f) { return f < SP_FL_COUNT ? ffn_names[f] : "?"; }
const char *sp_attn_layout_name(sp_attn_layout a) { return a < SP_AL_COUNT ? attn_names[a] : "?"; }
const char *sp_phase_name(sp_phase p) { return p < SP_PHASE_COUNT ? phase_names[p] : "?"; }
int sp_ffn_layout_is_1d(sp_ffn_layout f) { return f == SP_FL_WS1D; }

int sp_layout_uneven(const sp_layout *l) { return l->stage_layers[0] != 0; }

int sp_layout_hetero(const sp_layout *l) { return l->stage_mesh[0][0] != 0; }

/* meshes given in stage_mesh (the entries before the first all-zero one) */
static int stage_mesh_count(const sp_layout *l)
{
    int n = 0;
    while (n < SP_LAYOUT_MAX_STAGES && l->stage_mesh[n][0] != 0) n++;
    return n;
}

void sp_layout_stage_mesh(const sp_layout *l, int stage, int out[3])
{
    const int *m = sp_layout_hetero(l) && stage >= 0 && stage < SP_LAYOUT_MAX_STAGES && l->stage_mesh[stage][0]
                       ? l->stage_mesh[stage] : l->mesh;
    memcpy(out, m, 3 * sizeof *out);
}

int64_t sp_layout_stage_chips(const sp_layout *l, int stage)
{
    int d[3];
    sp_layout_stage_mesh(l, stage, d);
    spi_ckd c = SPI_CKD_INIT;
    int64_t n = spi_ck_mul(&c, "chips", spi_ck_mul3(&c, "chips", l->replicas, d[0], d[1]), d[2]);
    return c.overflow ? -1 : n;
}

int64_t sp_layout_stage_first_chip(const sp_layout *l, int stage)
{
    int64_t f = 0;
    for (int s = 0; s < stage; s++) {
        int64_t n = sp_layout_stage_chips(l, s);
        if (n < 0 || f > INT64_MAX - n) return -1;
        f += n;
    }
    return f;
}

sp_status sp_layout_stage_mesh_check(const sp_layout *l, char *why, size_t size)
{
    if (!sp_layout_hetero(l)) return SP_OK;
    const char *what = sp_layout_disaggregated(l) ? "separate prefill and decode chip groups"
                       : sp_layout_offloads(l)     ? "offload (offload_weights, offload_kv)"
                       : l->experts != 1           ? "experts"
                                                   : NULL;
    if (what) {
        snprintf(why, size, "stages of their own mesh with %s: not implemented", what);
        return SP_ENOTSUP;
    }
    int n = stage_mesh_count(l);
    for (int s = n; s < SP_LAYOUT_MAX_STAGES; s++)
        if (l->stage_mesh[s][0] != 0) {
            snprintf(why, size, "stage %d has no mesh (every stage's X, Y, Z must be >= 1)", n);
            return SP_EINVAL;
        }
    if (n != l->stages) {
        snprintf(why, size, "%d meshes for %d stages (one per stage)", n, l->stages);
        return SP_EINVAL;
    }
    return SP_OK;
}

/* One form per meaning: the layout's mesh is the first stage's, and meshes
 * all equal (one per stage) fold into it.  A mesh= given that differs from
 * the first stage's is refused (mesh_given: the key was given). */
static sp_status stage_mesh_resolve(sp_layout *l, int mesh_given, const char *path, sp_error *err)
{
    if (!sp_layout_hetero(l)) return SP_OK;
    if (mesh_given && memcmp(l->mesh, l->stage_mesh[0], sizeof l->mesh))
        return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path,
                             "mesh %dx%dx%d differs from the first stage's %dx%dx%d (stage_mesh): the layout's mesh "
                             "is its first stage's", l->mesh[0], l->mesh[1], l->mesh[2], l->stage_mesh[0][0],
                             l->stage_mesh[0][1], l->stage_mesh[0][2]);
    memcpy(l->mesh, l->stage_mesh[0], sizeof l->mesh);
    int n = stage_mesh_count(l), equal = 1;
    for (int s = 1; s < n; s++) equal &= !memcmp(l->stage_mesh[s], l->stage_mesh[0], sizeof l->mesh);
    if (equal && n == l->stages) memset(l->stage_mesh, 0, sizeof l->stage_mesh);
    return SP_OK;
}

sp_status sp_layout_split_check(const sp_layout *l, int64_t n_layers, char *why, size_t size)
{
    if (!sp_layout_uneven(l)) return SP_OK;
    if (l->stages > SP_LAYOUT_MAX_STAGES) {
        snprintf(why, size, "%d stages: an uneven split names at most %d", l->stages, SP_LAYOUT_MAX_STAGES);
        return SP_EINVAL;
    }
    int n = 0;
    int64_t sum = 0;
    while (n < SP_LAYOUT_MAX_STAGES && l->stage_layers[n] > 0) sum += l->stage_layers[n++];
    for (int s = n; s < SP_LAYOUT_MAX_STAGES; s++)
        if (l->stage_layers[s] != 0) {
            snprintf(why, size, "stage %d holds %d layers (every count must be >= 1)", n, l->stage_layers[n]);
            return SP_EINVAL;
        }
    if (n != l->stages) {
        snprintf(why, size, "%d layer counts for %d stages (one per stage)", n, l->stages);
        return SP_EINVAL;
    }
    if (sum != n_layers) {
        snprintf(why, size, "the stages hold %lld layers, the model has %lld", (long long)sum, (long long)n_layers);
        return SP_EINVAL;
    }
    return SP_OK;
}

/* The per-stage weight lists: i = 0 offload_weights (every part), 1 + k
 * offload_attn, offload_ffn (part k); their counts in *n. */
#define OFFLOAD_LISTS (1 + SP_WKIND_COUNT)
static const char *const offload_keys[OFFLOAD_LISTS] = {"offload_weights", "offload_attn", "offload_ffn"};
static int16_t *offload_list(const sp_layout *l, int i, int **n)
{
    sp_layout *w = (sp_layout *)l;   /* the callers that write own l */
    *n = i == 0 ? &w->offload_stages : &w->offload_kind_stages[i - 1];
    return i == 0 ? w->offload_layers : w->offload_kind_layers[i - 1];
}

/* list i's count of stage s (0 beyond the list) */
static int64_t list_layers(const sp_layout *l, int i, int s)
{
    int *n;
    const int16_t *v = offload_list(l, i, &n);
    return s >= 0 && s < *n && s < SP_LAYOUT_MAX_STAGES ? v[s] : 0;
}

/* list i streams some layer's weights */
static int list_offloads(const sp_layout *l, int i)
{
    int *n;
    const int16_t *v = offload_list(l, i, &n);
    for (int s = 0; s < *n && s < SP_LAYOUT_MAX_STAGES; s++)
        if (v[s] > 0) return 1;
    return 0;
}

/* some stage streams some layer's weights */
static int weights_offloaded(const sp_layout *l)
{
    for (int i = 0; i < OFFLOAD_LISTS; i++)
        if (list_offloads(l, i)) return 1;
    return 0;
}

int sp_layout_offloads(const sp_layout *l) { return l->offload_kv > 0 || weights_offloaded(l); }

/* one form per meaning (layouts are compared byte for byte): a list of zeros is no list */
static void offload_canon(sp_layout *l)
{
    for (int i = 0; i < OFFLOAD_LISTS; i++) {
        if (list_offloads(l, i)) continue;
        int *n;
        int16_t *v = offload_list(l, i, &n);
        *n = 0;
        memset(v, 0, SP_LAYOUT_MAX_STAGES * sizeof *v);
    }
}

int64_t sp_layout_offload_kind_layers(const sp_layout *l, int stage, sp_wkind k)
{
    int64_t a = list_layers(l, 0, stage), b = list_layers(l, 1 + (int)k, stage);
    return a > b ? a : b;
}

int64_t sp_layout_offload_layers(const sp_layout *l, int stage)
{
    int64_t n = 0;
    for (int k = 0; k < SP_WKIND_COUNT; k++) {
        int64_t c = sp_layout_offload_kind_layers(l, stage, (sp_wkind)k);
        if (c > n) n = c;
    }
    return n;
}

/* sp_layout_offload_check, and the key at fault in *key */
static sp_status offload_check(const sp_layout *l, int64_t n_layers, char *why, size_t size, const char **key)
{
    *key = "offload_kv";
    if (!(l->offload_kv >= 0 && l->offload_kv <= 1)) {
        snprintf(why, size, "offload_kv %g: a fraction of the KV sequences in [0, 1]", l->offload_kv);
        return SP_EINVAL;
    }
    if (sp_layout_disaggregated(l) && sp_layout_offloads(l)) {
        if (weights_offloaded(l)) *key = "offload_weights";
        snprintf(why, size, "offload with separate prefill and decode chip groups: not implemented");
        return SP_EINVAL;
    }
    for (int i = 0; i < OFFLOAD_LISTS; i++) {
        int *n;
        const int16_t *v = offload_list(l, i, &n);
        *key = offload_keys[i];
        if (*n == 0) continue;
        if (*n != l->stages || *n > SP_LAYOUT_MAX_STAGES) {
            snprintf(why, size, "%s gives %d counts for %d stages (one per stage)", *key, *n, l->stages);
            return SP_EINVAL;
        }
        for (int s = 0; s < *n; s++) {
            int64_t first, cnt;
            sp_layout_stage_layers(l, n_layers, s, &first, &cnt);
            if (v[s] < 0 || v[s] > cnt) {
                snprintf(why, size, "%s: stage %d streams %d layers, it holds %lld", *key, s, v[s], (long long)cnt);
                return SP_EINVAL;
            }
        }
    }
    return SP_OK;
}

sp_status sp_layout_offload_check(const sp_layout *l, int64_t n_layers, char *why, size_t size)
{
    const char *key;
    return offload_check(l, n_layers, why, size, &key);
}

void sp_layout_stage_layers(const sp_layout *l, int64_t n_layers, int stage, int64_t *first, int64_t *count)
{
    if (sp_layout_uneven(l)) {
        int64_t f = 0;
        for (int s = 0; s < stage && s < SP_LAYOUT_MAX_STAGES; s++) f += l->stage_layers[s];
        *first = f;
        *count = stage < SP_LAYOUT_MAX_STAGES ? l->stage_layers[stage] : 0;
        return;
    }
    int64_t base = n_layers / l->stages, extra = n_layers % l->stages;
    *count = base + (stage < extra ? 1 : 0);
    *first = stage * base + (stage < extra ? stage : extra);
}

void sp_layout_init(sp_layout *l)
{
    memset(l, 0, sizeof *l);
    l->stages = l->replicas = 1;
    l->mesh[0] = l->mesh[1] = l->mesh[2] = 1;
    l->weights = SP_DT_BF16;
    l->kv = SP_DT_BF16;
    l->microbatches = 1;
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        l->phase[p].ffn = SP_FL_WS2D;
        l->phase[p].attn = SP_AL_HEADS;
    }
    l->placement[0] = SP_AXIS_Z;
    l->placement[1] = SP_AXIS_Y;
    l->placement[2] = SP_AXIS_X;
    l->experts = 1;
    l->capacity = 1.0;
}

int sp_layout_disaggregated(const sp_layout *l) { return l->group[SP_PHASE_PREFILL].stages != 0; }

static int64_t group_chips(const sp_group *g)
{
    spi_ckd c = SPI_CKD_INIT;
    int64_t n = spi_ck_mul(&c, "chips", spi_ck_mul3(&c, "chips", g->stages, g->replicas, g->mesh[0]),
                           spi_ck_mul(&c, "chips", g->mesh[1], g->mesh[2]));
    return c.overflow ? -1 : n;
}

void sp_layout_phase_group(const sp_layout *l, sp_phase ph, sp_layout *out)
{
    *out = *l;
    if (!sp_layout_disaggregated(l)) return;
    const sp_group *g = &l->group[ph];
    out->stages = g->stages;
    out->replicas = g->replicas;
    memcpy(out->mesh, g->mesh, sizeof out->mesh);
    memset(out->group, 0, sizeof out->group);
    out->phase[!ph] = l->phase[ph];   /* the group's cache stays in its own phase's layout */
    out->separate = 0;
    if (ph == SP_PHASE_DECODE) out->prefill_chunk = out->prefill_tokens = 0;
}

/* Folds the groups: keys not given (0) take the layout's own value; equal
 * groups become the layout's own unless groups=separate; otherwise the
 * layout's own stages, replicas and mesh become the prefill group's
 * (sp_layout.h).  separate stays set only where it matters (equal groups),
 * so that one set of groups has one representation. */
static void groups_resolve(sp_layout *l)
{
    int any = l->separate;
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        sp_group *g = &l->group[p];
        any |= g->stages || g->replicas || g->mesh[0];
        if (!g->stages) g->stages = l->stages;
        if (!g->replicas) g->replicas = l->replicas;
        if (!g->mesh[0]) memcpy(g->mesh, l->mesh, sizeof g->mesh);
    }
    const sp_group *pf = &l->group[SP_PHASE_PREFILL];
    l->stages = pf->stages;
    l->replicas = pf->replicas;
    memcpy(l->mesh, pf->mesh, sizeof l->mesh);
    int equal = !memcmp(&l->group[0], &l->group[1], sizeof l->group[0]);
    if (!any || (equal && !l->separate)) memset(l->group, 0, sizeof l->group);
    if (!equal) l->separate = 0;
}

sp_status sp_layout_disaggregate(const sp_layout *prefill, const sp_layout *decode, sp_layout *out)
{
    if (sp_layout_disaggregated(prefill) || sp_layout_disaggregated(decode))
        return spi_fail(SP_EINVAL, "sp_layout_disaggregate: a group's layout has separate groups itself");
    if (prefill->weights != decode->weights || prefill->kv != decode->kv ||
        prefill->microbatches != decode->microbatches || memcmp(prefill->placement, decode->placement,
                                                                sizeof prefill->placement) ||
        prefill->experts != decode->experts || prefill->capacity != decode->capacity)
        return spi_fail(SP_EINVAL, "sp_layout_disaggregate: the groups differ in weights, kv, microbatches, placement, "
                                   "experts or capacity (one value serves both)");
    if (sp_layout_uneven(prefill) || sp_layout_uneven(decode))
        return spi_fail(SP_EINVAL, "sp_layout_disaggregate: stage_layers with separate groups is not implemented");
    if (sp_layout_hetero(prefill) || sp_layout_hetero(decode))
        return spi_fail(SP_EINVAL, "sp_layout_disaggregate: stage_mesh with separate groups is not implemented");
    *out = *prefill;
    out->separate = 1;   /* equal groups too: on chips of their own */
    out->phase[SP_PHASE_DECODE] = decode->phase[SP_PHASE_DECODE];
    const sp_layout *src[SP_PHASE_COUNT] = {prefill, decode};
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        out->group[p].stages = src[p]->stages;
        out->group[p].replicas = src[p]->replicas;
        memcpy(out->group[p].mesh, src[p]->mesh, sizeof out->group[p].mesh);
    }
    groups_resolve(out);
    return SP_OK;
}

int64_t sp_layout_chips(const sp_layout *l)
{
    if (sp_layout_disaggregated(l)) {
        int64_t a = group_chips(&l->group[0]), b = group_chips(&l->group[1]);
        return a < 0 || b < 0 ? -1 : a + b;
    }
    if (sp_layout_hetero(l)) return sp_layout_stage_first_chip(l, l->stages);
    spi_ckd c = SPI_CKD_INIT;
    int64_t n = spi_ck_mul(&c, "chips", spi_ck_mul3(&c, "chips", l->stages, l->replicas, l->mesh[0]),
                           spi_ck_mul(&c, "chips", l->mesh[1], l->mesh[2]));
    return c.overflow ? -1 : n;
}

void sp_layout_mesh(const sp_layout *l, sp_mesh *out)
{
    out->dims[SP_AXIS_STAGE] = l->stages;
    out->dims[SP_AXIS_REPLICA] = l->replicas;
    out->dims[SP_AXIS_X] = l->mesh[0];
    out->dims[SP_AXIS_Y] = l->mesh[1];
    out->dims[SP_AXIS_Z] = l->mesh[2];
}

static int lookup(const char *s, size_t len, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && !strncmp(s, names[i], len)) return i;
    return -1;
}

static sp_status parse_phase(const char *v, size_t len, sp_phase_layout *out, const char *key, sp_error *err)
{
    const char *slash = memchr(v, '/', len);
    size_t flen = slash ? (size_t)(slash - v) : len;
    int f = lookup(v, flen, ffn_names, SP_FL_COUNT);
    if (f < 0)
        return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, key,
                             "unknown FFN layout '%.*s' (ws1d, ws2d, wg-x, wg-xy, wg-xyz)", (int)flen, v);
    out->ffn = (sp_ffn_layout)f;
    if (slash) {
        int a = lookup(slash + 1, len - flen - 1, attn_names, SP_AL_COUNT);
        if (a < 0)
            return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, key, "unknown attention layout '%.*s' (heads, batch)",
                                 (int)(len - flen - 1), slash + 1);
        out->attn = (sp_attn_layout)a;
    }
    return SP_OK;
}

static sp_status parse_int(const char *v, size_t len, int *out, const char *key, sp_error *err)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf) goto bad;
    memcpy(buf, v, len);
    buf[len] = '\0';
    char *end;
    long x = strtol(buf, &end, 10);
    if (*end || x < 1 || x > 1 << 20) goto bad;
    *out = (int)x;
    return SP_OK;
bad:
    return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, key, "'%.*s' is not a positive integer", (int)len, v);
}

/* a finite number in [lo, hi] (a capacity factor, an offload fraction: `what`) */
static sp_status parse_real(const char *v, size_t len, double lo, double hi, const char *what, double *out,
                            const char *key, sp_error *err)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf) goto bad;
    memcpy(buf, v, len);
    buf[len] = '\0';
    char *end;
    double x = strtod(buf, &end);
    if (*end || !(x >= lo && x <= hi)) goto bad;
    *out = x;
    return SP_OK;
bad:
    return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, key, "'%.*s' is not %s in [%g, %g]", (int)len, v, what, lo, hi);
}

static sp_status parse_placement(const char *v, size_t len, sp_layout *l, sp_error *err)
{
    int seen = 0;
    if (len != 3) goto bad;
    for (int i = 0; i < 3; i++) {
        int a = v[i] == 'x' ? SP_AXIS_X : v[i] == 'y' ? SP_AXIS_Y : v[i] == 'z' ? SP_AXIS_Z : -1;
        if (a < 0 || (seen & (1 << a))) goto bad;
        seen |= 1 << a;
        l->placement[i] = (sp_axis)a;
    }
    return SP_OK;
bad:
    return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, "placement",
                         "'%.*s' is not an order of the axes x, y, z (innermost first, e.g. zyx)", (int)len, v);
}

/* Per-stage chip counts (other than by a mesh: stage_mesh), replicas,
 * layouts or precisions: a pipeline whose stages differ in more than their
 * layers and meshes is not implemented. */
static const char *const per_stage_keys[] = {"stage_chips", "stage_replicas", "stage_prefill",
                                             "stage_decode", "stage_weights", "stage_placement"};
static int per_stage_key(const char *k)
{
    for (size_t i = 0; i < sizeof per_stage_keys / sizeof per_stage_keys[0]; i++)
        if (!strcmp(k, per_stage_keys[i])) return 1;
    return 0;
}
#define PER_STAGE_REFUSAL "per-stage %s is not implemented: every stage has the layout's replicas, layouts and " \
                          "precision (only its layers and mesh differ: stage_layers, stage_mesh)"

/* XxYxZ, all three dimensions */
static sp_status parse_mesh(const char *v, size_t vlen, int out[3], const char *key, sp_error *err)
{
    int dims[3] = {1, 1, 1}, nd = 0;
    const char *q = v, *end = v + vlen;
    while (q < end && nd < 3) {
        const char *x = memchr(q, 'x', (size_t)(end - q));
        size_t dl = x ? (size_t)(x - q) : (size_t)(end - q);
        SP_CHECK(parse_int(q, dl, &dims[nd++], key, err));
        q += dl + (x ? 1 : 0);
        if (x && q == end) nd = 4;
    }
    if (q < end || nd != 3)
        return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, key,
                             "'%.*s' is not XxYxZ: give all three tensor-mesh dimensions (e.g. 4x4x1)", (int)vlen, v);
    memcpy(out, dims, sizeof dims);
    return SP_OK;
}

/* One item of a per-stage list: item i's text v (vlen bytes) into out. */
typedef sp_status (*list_item_fn)(const char *v, size_t vlen, int i, void *out, int lo, const char *key, sp_error *err);

/* a layer count in [lo, SP_LAYOUT_MAX_STAGE_LAYERS] into ((int16_t *)out)[i] */
static sp_status count_item(const char *v, size_t vlen, int i, void *out, int lo, const char *key, sp_error *err)
{
    char buf[32];
    char *end;
    long x = -1;
    if (vlen > 0 && vlen < sizeof buf) {
        memcpy(buf, v, vlen);
        buf[vlen] = '\0';
        x = strtol(buf, &end, 10);
        if (*end) x = -1;
    }
    if (x < lo || x > SP_LAYOUT_MAX_STAGE_LAYERS)
        return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, key, "'%.*s' is not a layer count in %d..%d", (int)vlen,
                             v, lo, SP_LAYOUT_MAX_STAGE_LAYERS);
    ((int16_t *)out)[i] = (int16_t)x;
    return SP_OK;
}

/* an XxYxZ mesh into ((int (*)[3])out)[i] */
static sp_status mesh_item(const char *v, size_t vlen, int i, void *out, int lo, const char *key, sp_error *err)
{
    return parse_mesh(v, vlen, ((int (*)[3])out)[i], key, err);
}

/* A per-stage list (stage_layers, offload_weights: counts; stage_mesh:
 * meshes): the comma-separated items from the value at *v up to the next
 * key=value, each parsed by item into out.  Advances the parser's cursor
 * (*p, *len, *comma) to the last item; *n gets how many. */
static sp_status parse_list(const char *key, list_item_fn item, int lo, const char **p, const char **v, size_t *vlen,
                            size_t *len, const char **comma, void *out, int *n, sp_error *err)
{
    *n = 0;
    for (;;) {
        if (*n == SP_LAYOUT_MAX_STAGES)
            return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, key, "more than %d stages: a per-stage list names at most %d",
                                 SP_LAYOUT_MAX_STAGES, SP_LAYOUT_MAX_STAGES);
        SP_CHECK(item(*v, *vlen, *n, out, lo, key, err));
        (*n)++;
        if (!*comma) break;
        const char *q = *comma + 1, *c2 = strchr(q, ',');
        size_t ql = c2 ? (size_t)(c2 - q) : strlen(q);
        if (memchr(q, '=', ql)) break;   /* the next key */
        *p = *v = q;
        *vlen = *len = ql;
        *comma = c2;
    }
    return SP_OK;
}

/* groups=separate|shared (sp_layout.h) */
static sp_status parse_groups(const char *v, size_t vlen, sp_layout *l, const char *path, sp_error *err)
{
    if (vlen == 8 && !memcmp(v, "separate", 8)) l->separate = 1;
    else if (vlen == 6 && !memcmp(v, "shared", 6)) l->separate = 0;
    else
        return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "'%.*s' is not separate or shared", (int)vlen, v);
    return SP_OK;
}

static sp_status parse_text(const char *text, sp_layout *l, sp_error *err)
{
    const char *p = text;
    int mesh_given = 0;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return spi_error_set(err, SP_EPARSE, "<layout>", 0, (int)(p - text) + 1, "",
                                 "expected key=value, got '%.*s'", (int)len, p);
        size_t klen = (size_t)(eq - p);
        const char *v = eq + 1;
        size_t vlen = len - klen - 1;
        char key[24];
        snprintf(key, sizeof key, "%.*s", (int)(klen < 23 ? klen : 23), p);
        sp_status st = SP_OK;
        const char *dot = strchr(key, '.');
        if (dot && (!strncmp(key, "prefill.", 8) || !strncmp(key, "decode.", 7))) {
            sp_group *g = &l->group[key[0] == 'p' ? SP_PHASE_PREFILL : SP_PHASE_DECODE];
            if (!strcmp(dot + 1, "stages")) st = parse_int(v, vlen, &g->stages, key, err);
            else if (!strcmp(dot + 1, "replicas")) st = parse_int(v, vlen, &g->replicas, key, err);
            else if (!strcmp(dot + 1, "mesh")) st = parse_mesh(v, vlen, g->mesh, key, err);
            else
                return spi_error_set(err, SP_EPARSE, "<layout>", 0, (int)(p - text) + 1, key,
                                     "unknown key (a phase's group takes mesh, stages, replicas)");
        } else if (!strcmp(key, "stages")) st = parse_int(v, vlen, &l->stages, key, err);
        else if (!strcmp(key, "replicas")) st = parse_int(v, vlen, &l->replicas, key, err);
        else if (!strcmp(key, "microbatches")) st = parse_int(v, vlen, &l->microbatches, key, err);
        else if (!strcmp(key, "experts")) st = parse_int(v, vlen, &l->experts, key, err);
        else if (!strcmp(key, "capacity")) st = parse_real(v, vlen, 1, 64, "a capacity factor", &l->capacity, key, err);
        else if (!strcmp(key, "prefill_chunk")) st = parse_int(v, vlen, &l->prefill_chunk, key, err);
        else if (!strcmp(key, "prefill_tokens")) st = parse_int(v, vlen, &l->prefill_tokens, key, err);
        else if (!strcmp(key, "mesh")) {
            mesh_given = 1;
            st = parse_mesh(v, vlen, l->mesh, key, err);
        } else if (!strcmp(key, "weights") || !strcmp(key, "kv")) {
            char dt[16];
            snprintf(dt, sizeof dt, "%.*s", (int)(vlen < 15 ? vlen : 15), v);
            sp_dtype d;
            if (sp_dtype_parse(dt, &d) != SP_OK)
                return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, key,
                                     "unknown dtype '%.*s' (f32, bf16, f16, int8, fp8)", (int)vlen, v);
            if (key[0] == 'w') l->weights = d;
            else l->kv = d;
        } else if (!strcmp(key, "prefill")) st = parse_phase(v, vlen, &l->phase[SP_PHASE_PREFILL], key, err);
        else if (!strcmp(key, "decode")) st = parse_phase(v, vlen, &l->phase[SP_PHASE_DECODE], key, err);
        else if (!strcmp(key, "placement")) st = parse_placement(v, vlen, l, err);
        else if (!strcmp(key, "groups")) st = parse_groups(v, vlen, l, key, err);
        else if (per_stage_key(key))
            return spi_error_set(err, SP_ENOTSUP, "<layout>", 0, 0, key, PER_STAGE_REFUSAL, key + 6);
        else if (!strcmp(key, "stage_layers")) {
            /* the counts run up to the next key=value: 30,30,29,29 */
            int n;
            SP_CHECK(parse_list(key, count_item, 1, &p, &v, &vlen, &len, &comma, l->stage_layers, &n, err));
        } else if (!strcmp(key, "stage_mesh")) {
            /* the meshes run up to the next key=value: 2x1x1,4x1x1 */
            int n;
            memset(l->stage_mesh, 0, sizeof l->stage_mesh);
            SP_CHECK(parse_list(key, mesh_item, 1, &p, &v, &vlen, &len, &comma, l->stage_mesh, &n, err));
        } else if (!strcmp(key, "offload_weights") || !strcmp(key, "offload_attn") || !strcmp(key, "offload_ffn")) {
            int i = key[8] == 'w' ? 0 : key[8] == 'a' ? 1 + SP_WKIND_ATTN : 1 + SP_WKIND_FFN, *n;
            int16_t *out = offload_list(l, i, &n);
            SP_CHECK(parse_list(key, count_item, 0, &p, &v, &vlen, &len, &comma, out, n, err));
        } else if (!strcmp(key, "offload_kv")) {
            st = parse_real(v, vlen, 0, 1, "a fraction", &l->offload_kv, key, err);
        } else
            return spi_error_set(err, SP_EPARSE, "<layout>", 0, (int)(p - text) + 1, key,
                                 "unknown key (stages, replicas, mesh, weights, kv, microbatches, prefill, "
                                 "decode, placement, experts, capacity, prefill_chunk, prefill_tokens, stage_layers, "
                                 "prefill.mesh, prefill.stages, prefill.replicas, decode.mesh, decode.stages, "
                                 "decode.replicas, groups, offload_weights, offload_attn, offload_ffn, offload_kv, "
                                 "stage_mesh)");
        if (st != SP_OK) return st;
        p += len + (comma ? 1 : 0);
    }
    groups_resolve(l);
    return stage_mesh_resolve(l, mesh_given, "mesh", err);
}

/* [X, Y, Z], positive integers */
static sp_status json_mesh(json_t *v, const char *path, int out[3], sp_error *err)
{
    if (!json_is_array(v) || json_array_size(v) != 3)
        return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be an array of 3 positive integers [X, Y, Z]");
    int dims[3] = {1, 1, 1};
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *d = json_array_get(v, i);
        if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > 1 << 20)
            return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be an array of 3 positive integers [X, Y, Z]");
        dims[i] = (int)json_integer_value(d);
    }
    memcpy(out, dims, sizeof dims);
    return SP_OK;
}

static sp_status json_phase(json_t *o, const char *key, sp_phase_layout *out, sp_group *g, sp_error *err)
{
    char path[32];
    snprintf(path, sizeof path, "/%s", key);
    if (!json_is_object(o)) return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be an object {\"ffn\":..., \"attn\":...}");
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        snprintf(path, sizeof path, "/%s/%s", key, k);
        if (!strcmp(k, "mesh")) {
            SP_CHECK(json_mesh(v, path, g->mesh, err));
            continue;
        }
        if (!strcmp(k, "stages") || !strcmp(k, "replicas")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 20)
                return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be a positive integer");
            *(k[0] == 's' ? &g->stages : &g->replicas) = (int)json_integer_value(v);
            continue;
        }
        if (!json_is_string(v)) return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be a string");
        const char *s = json_string_value(v);
        if (!strcmp(k, "ffn")) {
            int f = lookup(s, strlen(s), ffn_names, SP_FL_COUNT);
            snprintf(path, sizeof path, "/%s/ffn", key);
            if (f < 0) return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "unknown FFN layout '%s' (ws1d, ws2d, wg-x, wg-xy, wg-xyz)", s);
            out->ffn = (sp_ffn_layout)f;
        } else if (!strcmp(k, "attn")) {
            int a = lookup(s, strlen(s), attn_names, SP_AL_COUNT);
            snprintf(path, sizeof path, "/%s/attn", key);
            if (a < 0) return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "unknown attention layout '%s' (heads, batch)", s);
            out->attn = (sp_attn_layout)a;
        } else {
            snprintf(path, sizeof path, "/%s/%s", key, k);
            return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "unknown key (ffn, attn, mesh, stages, replicas)");
        }
    }
    return SP_OK;
}

/* A per-stage JSON array of counts (stage_layers, offload_weights), each in
 * [lo, SP_LAYOUT_MAX_STAGE_LAYERS], 1 to SP_LAYOUT_MAX_STAGES of them. */
static sp_status json_counts(const json_t *v, const char *path, int lo, int16_t *out, int *n, sp_error *err)
{
    size_t len = json_is_array(v) ? json_array_size(v) : 0;
    if (len < 1 || len > SP_LAYOUT_MAX_STAGES)
        return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path,
                             "must be an array of 1 to %d layer counts, one per stage", SP_LAYOUT_MAX_STAGES);
    for (size_t i = 0; i < len; i++) {
        json_t *d = json_array_get(v, i);
        if (!json_is_integer(d) || json_integer_value(d) < lo || json_integer_value(d) > SP_LAYOUT_MAX_STAGE_LAYERS)
            return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "element %zu must be a layer count in %d..%d", i,
                                 lo, SP_LAYOUT_MAX_STAGE_LAYERS);
        out[i] = (int16_t)json_integer_value(d);
    }
    *n = (int)len;
    return SP_OK;
}

sp_status sp_layout_from_json(const void *json, sp_layout *l, sp_error *err)
{
    json_t *root = (json_t *)json;
    sp_layout_init(l);
    if (!json_is_object(root)) return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, "", "a layout must be a JSON object");
    /* a plan's "chosen" object or {"layout": {...}} is accepted as well */
    json_t *inner = json_object_get(root, "layout");
    if (json_is_object(inner)) root = inner;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        char path[40];
        snprintf(path, sizeof path, "/%s", k);
        if (!strcmp(k, "stages") || !strcmp(k, "replicas") || !strcmp(k, "microbatches") || !strcmp(k, "experts") ||
            !strcmp(k, "prefill_chunk") || !strcmp(k, "prefill_tokens")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 20)
                return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be a positive integer");
            int x = (int)json_integer_value(v);
            if (k[0] == 's') l->stages = x;
            else if (k[0] == 'r') l->replicas = x;
            else if (k[0] == 'e') l->experts = x;
            else if (!strcmp(k, "prefill_chunk")) l->prefill_chunk = x;
            else if (!strcmp(k, "prefill_tokens")) l->prefill_tokens = x;
            else l->microbatches = x;
        } else if (!strcmp(k, "capacity")) {
            double x = json_is_number(v) ? json_number_value(v) : 0;
            if (!(x >= 1 && x <= 64))
                return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be a capacity factor in [1, 64]");
            l->capacity = x;
        } else if (!strcmp(k, "mesh")) {
            SP_CHECK(json_mesh(v, path, l->mesh, err));
        } else if (!strcmp(k, "weights") || !strcmp(k, "kv")) {
            sp_dtype d;
            if (!json_is_string(v) || sp_dtype_parse(json_string_value(v), &d) != SP_OK)
                return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be one of f32, bf16, f16, int8, fp8");
            if (k[0] == 'w') l->weights = d;
            else l->kv = d;
        } else if (!strcmp(k, "prefill")) {
            SP_CHECK(json_phase(v, k, &l->phase[SP_PHASE_PREFILL], &l->group[SP_PHASE_PREFILL], err));
        } else if (!strcmp(k, "decode")) {
            SP_CHECK(json_phase(v, k, &l->phase[SP_PHASE_DECODE], &l->group[SP_PHASE_DECODE], err));
        } else if (!strcmp(k, "groups")) {
            if (!json_is_string(v)) return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be \"separate\" or \"shared\"");
            SP_CHECK(parse_groups(json_string_value(v), strlen(json_string_value(v)), l, path, err));
        } else if (!strcmp(k, "placement")) {
            if (!json_is_string(v)) return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be a string such as \"zyx\"");
            SP_CHECK(parse_placement(json_string_value(v), strlen(json_string_value(v)), l, err));
        } else if (per_stage_key(k)) {
            return spi_error_set(err, SP_ENOTSUP, "<layout>", 0, 0, path, PER_STAGE_REFUSAL, k + 6);
        } else if (!strcmp(k, "stage_layers")) {
            int n;
            SP_CHECK(json_counts(v, path, 1, l->stage_layers, &n, err));
        } else if (!strcmp(k, "stage_mesh")) {
            size_t n = json_is_array(v) ? json_array_size(v) : 0;
            if (n < 1 || n > SP_LAYOUT_MAX_STAGES)
                return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path,
                                     "must be an array of 1 to %d meshes [X, Y, Z], one per stage", SP_LAYOUT_MAX_STAGES);
            memset(l->stage_mesh, 0, sizeof l->stage_mesh);
            for (size_t i = 0; i < n; i++) {
                char ip[48];
                snprintf(ip, sizeof ip, "/stage_mesh/%zu", i);
                SP_CHECK(json_mesh(json_array_get(v, i), ip, l->stage_mesh[i], err));
            }
        } else if (!strcmp(k, "offload_weights") || !strcmp(k, "offload_attn") || !strcmp(k, "offload_ffn")) {
            int i = k[8] == 'w' ? 0 : k[8] == 'a' ? 1 + SP_WKIND_ATTN : 1 + SP_WKIND_FFN, *n;
            int16_t *out = offload_list(l, i, &n);
            SP_CHECK(json_counts(v, path, 0, out, n, err));
        } else if (!strcmp(k, "offload_kv")) {
            double x = json_is_number(v) ? json_number_value(v) : -1;
            if (!(x >= 0 && x <= 1))
                return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path, "must be a fraction in [0, 1]");
            l->offload_kv = x;
        } else if (!strcmp(k, "text") || !strcmp(k, "chips")) {
            /* informational keys written by sp_layout_to_json */
        } else {
            return spi_error_set(err, SP_EPARSE, "<layout>", 0, 0, path,
                                 "unknown key (stages, replicas, mesh, weights, kv, microbatches, prefill, decode, placement, "
                                 "experts, capacity, prefill_chunk, prefill_tokens, stage_layers, groups, offload_weights, "
                                 "offload_attn, offload_ffn, offload_kv, stage_mesh)");
        }
    }
    groups_resolve(l);
    offload_canon(l);
    return stage_mesh_resolve(l, json_object_get(root, "mesh") != NULL, "/mesh", err);
}

sp_status sp_layout_parse(const char *text, sp_layout *out, sp_error *err)
{
    if (!text) return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "", "no layout given");
    while (*text == ' ' || *text == '\t' || *text == '\n') text++;
    if (*text == '{') {
        json_error_t je;
        json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
        if (!root) return spi_error_set(err, SP_EPARSE, "<layout>", je.line, je.column, "", "%s", je.text);
        sp_status st = sp_layout_from_json(root, out, err);
        json_decref(root);
        return st;
    }
    sp_layout_init(out);
    SP_CHECK(parse_text(text, out, err));
    offload_canon(out);
    return SP_OK;
}

sp_status sp_layout_load_file(const char *path, sp_layout *out, sp_error *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        sp_status st = spi_error_set(err, SP_EPARSE, path, je.line, je.column, "", "%s", je.text);
        if (err) snprintf(err->source, sizeof err->source, "%s", path);
        return st;
    }
    sp_status st = sp_layout_from_json(root, out, err);
    if (st != SP_OK && err) snprintf(err->source, sizeof err->source, "%s", path);
    json_decref(root);
    return st;
}

char *sp_layout_format(const sp_layout *l, char *buf, size_t size)
{
    static const char ax[SP_AXIS_COUNT] = {'s', 'r', 'x', 'y', 'z'};
    if (sp_layout_disaggregated(l)) {
        /* each group's keys in place of stages, replicas, mesh (those are the prefill group's) */
        const sp_group *a = &l->group[SP_PHASE_PREFILL], *b = &l->group[SP_PHASE_DECODE];
        char g[160];
        snprintf(g, sizeof g,
                 "prefill.stages=%d,prefill.replicas=%d,prefill.mesh=%dx%dx%d,decode.stages=%d,decode.replicas=%d,"
                 "decode.mesh=%dx%dx%d",
                 a->stages, a->replicas, a->mesh[0], a->mesh[1], a->mesh[2], b->stages, b->replicas, b->mesh[0],
                 b->mesh[1], b->mesh[2]);
        snprintf(buf, size, "%s,weights=%s,kv=%s,microbatches=%d,prefill=%s/%s,decode=%s/%s,placement=%c%c%c", g,
                 sp_dtype_name(l->weights), sp_dtype_name(l->kv), l->microbatches, sp_ffn_layout_name(l->phase[0].ffn),
                 sp_attn_layout_name(l->phase[0].attn), sp_ffn_layout_name(l->phase[1].ffn),
                 sp_attn_layout_name(l->phase[1].attn), ax[l->placement[0]], ax[l->placement[1]], ax[l->placement[2]]);
        if (l->separate) {   /* equal groups: only the key keeps them apart */
            size_t n = strlen(buf);
            if (n < size) snprintf(buf + n, size - n, ",groups=separate");
        }
    } else
    snprintf(buf, size,
             "stages=%d,replicas=%d,mesh=%dx%dx%d,weights=%s,kv=%s,microbatches=%d,prefill=%s/%s,decode=%s/%s,"
             "placement=%c%c%c",
             l->stages, l->replicas, l->mesh[0], l->mesh[1], l->mesh[2], sp_dtype_name(l->weights),
             sp_dtype_name(l->kv), l->microbatches, sp_ffn_layout_name(l->phase[0].ffn),
             sp_attn_layout_name(l->phase[0].attn), sp_ffn_layout_name(l->phase[1].ffn),
             sp_attn_layout_name(l->phase[1].attn), ax[l->placement[0]], ax[l->placement[1]], ax[l->placement[2]]);
    /* MoE keys only when set, so a dense layout's text is unchanged */
    size_t n = strlen(buf);
    if (l->experts != 1 && n < size) n += (size_t)snprintf(buf + n, size - n, ",experts=%d", l->experts);
    if (l->capacity != 1.0 && n < size) n += (size_t)snprintf(buf + n, size - n, ",capacity=%g", l->capacity);
    /* chunked prefill likewise, only when set */
    if (l->prefill_chunk && n < size) n += (size_t)snprintf(buf + n, size - n, ",prefill_chunk=%d", l->prefill_chunk);
    if (l->prefill_tokens && n < size) n += (size_t)snprintf(buf + n, size - n, ",prefill_tokens=%d", l->prefill_tokens);
    for (int s = 0; sp_layout_uneven(l) && s < SP_LAYOUT_MAX_STAGES && l->stage_layers[s] && n < size; s++)
        n += (size_t)snprintf(buf + n, size - n, "%s%d", s ? "," : ",stage_layers=", l->stage_layers[s]);
    /* offload likewise, only when set; %.17g so that the fraction reads back exactly */
    for (int i = 0; i < OFFLOAD_LISTS; i++) {
        int *cnt;
        const int16_t *v = offload_list(l, i, &cnt);
        for (int s = 0; list_offloads(l, i) && s < *cnt && s < SP_LAYOUT_MAX_STAGES && n < size; s++)
            n += (size_t)snprintf(buf + n, size - n, ",%s%s%d", s ? "" : offload_keys[i], s ? "" : "=", v[s]);
    }
    if (l->offload_kv > 0 && n < size) n += (size_t)snprintf(buf + n, size - n, ",offload_kv=%.17g", l->offload_kv);
    for (int s = 0; sp_layout_hetero(l) && s < SP_LAYOUT_MAX_STAGES && l->stage_mesh[s][0] && n < size; s++)
        n += (size_t)snprintf(buf + n, size - n, "%s%dx%dx%d", s ? "," : ",stage_mesh=", l->stage_mesh[s][0],
                              l->stage_mesh[s][1], l->stage_mesh[s][2]);
    return buf;
}

void *sp_layout_to_json(const sp_layout *l)
{
    static const char ax[SP_AXIS_COUNT] = {'s', 'r', 'x', 'y', 'z'};
    char pl[4] = {ax[l->placement[0]], ax[l->placement[1]], ax[l->placement[2]], 0};
    json_t *o = json_object();
    json_object_set_new(o, "stages", json_integer(l->stages));
    json_object_set_new(o, "replicas", json_integer(l->replicas));
    json_object_set_new(o, "mesh", json_pack("[iii]", l->mesh[0], l->mesh[1], l->mesh[2]));
    json_object_set_new(o, "weights", json_string(sp_dtype_name(l->weights)));
    json_object_set_new(o, "kv", json_string(sp_dtype_name(l->kv)));
    json_object_set_new(o, "microbatches", json_integer(l->microbatches));
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        json_t *ph = json_pack("{ssss}", "ffn", sp_ffn_layout_name(l->phase[p].ffn), "attn",
                               sp_attn_layout_name(l->phase[p].attn));
        if (sp_layout_disaggregated(l)) {
            const sp_group *g = &l->group[p];
            json_object_set_new(ph, "mesh", json_pack("[iii]", g->mesh[0], g->mesh[1], g->mesh[2]));
            json_object_set_new(ph, "stages", json_integer(g->stages));
            json_object_set_new(ph, "replicas", json_integer(g->replicas));
        }
        json_object_set_new(o, sp_phase_name((sp_phase)p), ph);
    }
    json_object_set_new(o, "placement", json_string(pl));
    if (l->separate) json_object_set_new(o, "groups", json_string("separate"));
    if (l->experts != 1) json_object_set_new(o, "experts", json_integer(l->experts));
    if (l->capacity != 1.0) json_object_set_new(o, "capacity", json_real(l->capacity));
    if (l->prefill_chunk) json_object_set_new(o, "prefill_chunk", json_integer(l->prefill_chunk));
    if (l->prefill_tokens) json_object_set_new(o, "prefill_tokens", json_integer(l->prefill_tokens));
    if (sp_layout_uneven(l)) {
        json_t *a = json_array();
        for (int s = 0; s < SP_LAYOUT_MAX_STAGES && l->stage_layers[s]; s++)
            json_array_append_new(a, json_integer(l->stage_layers[s]));
        json_object_set_new(o, "stage_layers", a);
    }
    for (int i = 0; i < OFFLOAD_LISTS; i++) {
        int *cnt;
        const int16_t *v = offload_list(l, i, &cnt);
        if (!list_offloads(l, i)) continue;
        json_t *a = json_array();
        for (int s = 0; s < *cnt && s < SP_LAYOUT_MAX_STAGES; s++) json_array_append_new(a, json_integer(v[s]));
        json_object_set_new(o, offload_keys[i], a);
    }
    if (l->offload_kv > 0) json_object_set_new(o, "offload_kv", json_real(l->offload_kv));
    if (sp_layout_hetero(l)) {
        json_t *a = json_array();
        for (int s = 0; s < SP_LAYOUT_MAX_STAGES && l->stage_mesh[s][0]; s++)
            json_array_append_new(a, json_pack("[iii]", l->stage_mesh[s][0], l->stage_mesh[s][1], l->stage_mesh[s][2]));
        json_object_set_new(o, "stage_mesh", a);
    }
    return o;
}

/* ---- torus slices ---- */
typedef struct map_search {
    int size[SP_AXIS_COUNT];
    int slice[3];
    int cur[SP_AXIS_COUNT][3];
    int rem[3];
    double best;
    int best_parts;
    int found;
    sp_torus_map out;
} map_search;

/* Bandwidth score of a complete mapping: Σ over tensor axes of (size − 1) /
 * directions, a dimension the axis covers whole counting two (a ring),
 * part of one counting one; among equal scores, fewer such parts (whole
 * rings, as a user lays a mesh out by hand). */
static double map_score(const map_search *ms, int *parts_out)
{
    double sc = 0;
    int parts = 0;
    for (int a = SP_AXIS_X; a <= SP_AXIS_Z; a++) {
        if (ms->size[a] <= 1) continue;
        int dirs = 0;
        for (int d = 0; d < 3; d++)
            if (ms->cur[a][d] > 1) {
                dirs += ms->cur[a][d] == ms->slice[d] ? 2 : 1;
                parts += ms->cur[a][d] != ms->slice[d];
            }
        sc += (ms->size[a] - 1) / (double)dirs;
    }
    *parts_out = parts;
    return sc;
}

/* Axis a onwards: every split of size[a] into factors dividing what is left of each dimension. */
static void map_axes(map_search *ms, int a)
{
    if (a == SP_AXIS_COUNT) {
        int parts;
        double sc = map_score(ms, &parts);
        if (!ms->found || sc < ms->best - 1e-9 || (sc < ms->best + 1e-9 && parts < ms->best_parts)) {
            ms->found = 1;
            ms->best = sc;
            ms->best_parts = parts;
            memcpy(ms->out.slice, ms->slice, sizeof ms->slice);
            memcpy(ms->out.factor, ms->cur, sizeof ms->cur);
        }
        return;
    }
    int n = ms->size[a];
    for (int f0 = 1; f0 <= ms->rem[0] && f0 <= n; f0++) {
        if (ms->rem[0] % f0 || n % f0) continue;
        for (int f1 = 1; f1 <= ms->rem[1] && f1 <= n / f0; f1++) {
            if (ms->rem[1] % f1 || (n / f0) % f1) continue;
            int f2 = n / f0 / f1;
            if (ms->rem[2] % f2) continue;
            int f[3] = {f0, f1, f2};
            for (int d = 0; d < 3; d++) {
                ms->cur[a][d] = f[d];
                ms->rem[d] /= f[d];
            }
            map_axes(ms, a + 1);
            for (int d = 0; d < 3; d++) ms->rem[d] *= f[d];
        }
    }
}

static int torus_map_search(const int size[SP_AXIS_COUNT], const sp_hw *hw, sp_torus_map *out)
{
    map_search ms;
    memset(&ms, 0, sizeof ms);
    memcpy(ms.size, size, sizeof ms.size);
    long long n = 1;
    for (int a = 0; a < SP_AXIS_COUNT; a++) n *= size[a];
    /* slices up to orientation: sides a <= b <= c (the torus is symmetric under rotation) */
    for (long long x = 1; x * x * x <= n; x++) {
        if (n % x) continue;
        for (long long y = x; x * y * y <= n; y++) {
            if ((n / x) % y) continue;
            int shape[3] = {(int)x, (int)y, (int)(n / x / y)};
            if (!sp_hw_slice_rentable(hw, shape)) continue;
            memcpy(ms.slice, shape, sizeof shape);
            memcpy(ms.rem, shape, sizeof shape);
            map_axes(&ms, 0);
        }
    }
    if (ms.found && out) *out = ms.out;
    return ms.found;
}

/* The search runs once per (axis sizes, slice rules) and thread: a planner
 * asks for the same few meshes many thousands of times.  The memo belongs to
 * the torus and slice rules it was filled under (compared by value). */
enum { TMAP_SLOTS = 64 };
static _Thread_local struct {
    int dims[3], n_shapes, shapes[SP_HW_SLICE_SHAPES][3], multiple, min_chips;
    struct { int used, found, size[SP_AXIS_COUNT]; sp_torus_map map; } slot[TMAP_SLOTS];
} tmap;

static int torus_map_sizes(const int size[SP_AXIS_COUNT], const sp_hw *hw, sp_torus_map *out)
{
    if (!hw || hw->topo != SP_TOPO_TORUS) return 0;
    if (memcmp(tmap.dims, hw->torus_dims, sizeof tmap.dims) || tmap.n_shapes != hw->n_slice_shapes ||
        memcmp(tmap.shapes, hw->slice_shapes, sizeof tmap.shapes) || tmap.multiple != hw->slice_multiple ||
        tmap.min_chips != hw->slice_min_chips) {
        memset(&tmap, 0, sizeof tmap);
        memcpy(tmap.dims, hw->torus_dims, sizeof tmap.dims);
        tmap.n_shapes = hw->n_slice_shapes;
        memcpy(tmap.shapes, hw->slice_shapes, sizeof tmap.shapes);
        tmap.multiple = hw->slice_multiple;
        tmap.min_chips = hw->slice_min_chips;
    }
    unsigned h = 0;
    for (int a = 0; a < SP_AXIS_COUNT; a++) h = h * 131u + (unsigned)size[a];
    h = (h * 2654435761u) >> 26;   /* 6 bits */
    if (!tmap.slot[h].used || memcmp(tmap.slot[h].size, size, sizeof tmap.slot[h].size)) {
        tmap.slot[h].used = 1;
        memcpy(tmap.slot[h].size, size, sizeof tmap.slot[h].size);
        tmap.slot[h].found = torus_map_search(size, hw, &tmap.slot[h].map);
    }
    if (tmap.slot[h].found && out) *out = tmap.slot[h].map;
    return tmap.slot[h].found;
}

int sp_layout_torus_map(const sp_layout *l, const sp_hw *hw, sp_torus_map *out)
{
    int size[SP_AXIS_COUNT];
    size[SP_AXIS_STAGE] = l->stages;
    size[SP_AXIS_REPLICA] = l->replicas;
    for (int i = 0; i < 3; i++) size[SP_AXIS_X + i] = l->mesh[i];
    return torus_map_sizes(size, hw, out);
}

int sp_layout_fits_torus(const int mesh[3], int replicas, int stages, const sp_hw *hw)
{
    if (hw->topo != SP_TOPO_TORUS) return 1;
    int size[SP_AXIS_COUNT];
    size[SP_AXIS_STAGE] = stages;
    size[SP_AXIS_REPLICA] = replicas;
    for (int i = 0; i < 3; i++) size[SP_AXIS_X + i] = mesh[i];
    return torus_map_sizes(size, hw, NULL);
}

int sp_layout_fits_nodes(const sp_layout *l, const sp_hw *hw, int *straddler)
{
    if (hw->topo != SP_TOPO_CLUSTER || hw->chips_per_node <= 0) return 1;
    /* placed innermost first, each axis fits inside the node's remaining room or fills whole nodes */
    int room = hw->chips_per_node;
    for (int i = 0; i < 3; i++) {
        int d = l->mesh[l->placement[i] - SP_AXIS_X];
        if (room > 1) {
            if (room % d == 0) room /= d;
            else if (d % room == 0) room = 1;
            else {
                if (straddler) *straddler = d;
                return 0;
            }
        }
    }
    return 1;
}

/* A disaggregated layout: the groups' chips add up to `chips`, each group
 * is a valid layout of its own chips, and on a cluster the groups sit where
 * the pricing assumes (prefill from chip 0, decode right after it): the
 * prefill group fills whole nodes or both groups share one node, so that
 * each group's collectives see the tiers its own layout implies. */
static sp_status groups_check(const sp_layout *l, const sp_model *m, const sp_hw *hw, int64_t chips, int64_t batch,
                              sp_error *err)
{
    int64_t total = sp_layout_chips(l);
    if (total != chips)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "prefill.mesh",
                             "the prefill group (%lld chips) and the decode group (%lld chips) hold %lld chips, but "
                             "%lld chips were asked for", (long long)group_chips(&l->group[0]),
                             (long long)group_chips(&l->group[1]), (long long)total, (long long)chips);
    if (sp_layout_uneven(l))
        return spi_error_set(err, SP_ENOTSUP, "<layout>", 0, 0, "stage_layers",
                             "stage_layers with separate prefill and decode groups is not implemented (each group "
                             "splits its layers evenly)");
    /* both groups in one machine: a torus holds both slices, a cluster both groups */
    int64_t room = !hw ? 0 : hw->topo == SP_TOPO_TORUS
                                 ? (int64_t)hw->torus_dims[0] * hw->torus_dims[1] * hw->torus_dims[2]
                                 : hw->max_chips;
    if (room > 0 && total > room)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "prefill.mesh",
                             "the prefill and decode groups hold %lld chips, more than the %lld of %s", (long long)total,
                             (long long)room, hw->name);
    int64_t np = group_chips(&l->group[SP_PHASE_PREFILL]);
    if (hw && hw->topo == SP_TOPO_CLUSTER && hw->chips_per_node > 0 && np % hw->chips_per_node &&
        total > hw->chips_per_node)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "prefill.mesh",
                             "the prefill group's %lld chips end inside a %d-chip node: the decode group starts on a "
                             "node of its own (a prefill group of whole nodes) or both groups share one node",
                             (long long)np, hw->chips_per_node);
    for (int p = 0; p < SP_PHASE_COUNT; p++) {
        sp_layout g;
        sp_layout_phase_group(l, (sp_phase)p, &g);
        sp_status st = sp_layout_check_base(&g, m, hw, group_chips(&l->group[p]), batch, err);
        if (st != SP_OK) {
            spi_error_prefix(err, sp_phase_name((sp_phase)p), "group");
            return st;
        }
    }
    return SP_OK;
}

/* micro-batches and the uneven split (stage_layers) */
static sp_status pipeline_check(const sp_layout *l, const sp_model *m, sp_error *err)
{
    if (l->microbatches < 1)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "microbatches", "%d: at least 1 micro-batch",
                             l->microbatches);
    char why[160];
    if (sp_layout_uneven(l) && sp_layout_split_check(l, m->n_layers, why, sizeof why) != SP_OK)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "stage_layers", "%s", why);
    return SP_OK;
}

/* Stages of their own meshes (stage_mesh): the chips add up, and on a
 * cluster each stage's tensor axes fit its nodes as an even mesh's would,
 * its chips starting on a node boundary (or every stage inside one node),
 * so that its collectives see the tiers its own mesh implies.  A torus is
 * refused (its slices are boxes).  sp_layout_check_base's other checks
 * follow; that every stage lowers on its own mesh (each phase) is
 * sp_layout_check's (lower.c); a consumer that does not take such stages
 * (the CUDA device) refuses them itself, by name. */
static sp_status stage_mesh_check_hw(const sp_layout *l, const sp_hw *hw, int64_t chips, sp_error *err)
{
    int64_t total = sp_layout_chips(l);
    if (total < 0)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "stage_mesh",
                             "replicas (%d) × the stage meshes overflows a 64-bit chip count", l->replicas);
    if (total != chips)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "stage_mesh",
                             "replicas (%d) × the stage meshes' chips = %lld chips, but %lld chips were asked for",
                             l->replicas, (long long)total, (long long)chips);
    if (hw && hw->topo == SP_TOPO_TORUS)
        return spi_error_set(err, SP_ENOTSUP, "<layout>", 0, 0, "stage_mesh",
                             "stages of their own mesh on a torus (%s): not implemented (a rentable slice is one "
                             "X×Y×Z box)", hw->name);
    for (int s = 0; hw && s < l->stages; s++) {
        sp_layout v = *l;
        sp_layout_stage_mesh(l, s, v.mesh);
        int straddler;
        if (!sp_layout_fits_nodes(&v, hw, &straddler))
            return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "stage_mesh",
                                 "stage %d: mesh axis of %d chips straddles %d-chip nodes unevenly", s, straddler,
                                 hw->chips_per_node);
        if (hw->chips_per_node > 0 && total > hw->chips_per_node &&
            sp_layout_stage_first_chip(l, s) % hw->chips_per_node)
            return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "stage_mesh",
                                 "stage %d starts at chip %lld, inside a %d-chip node: each stage starts on a node "
                                 "of its own (earlier stages of whole nodes) or every stage shares one node", s,
                                 (long long)sp_layout_stage_first_chip(l, s), hw->chips_per_node);
    }
    return SP_OK;
}

sp_status sp_layout_check_base(const sp_layout *l, const sp_model *m, const sp_hw *hw, int64_t chips,
                               int64_t batch, sp_error *err)
{
    if (sp_layout_hetero(l)) {
        char why[200];
        sp_status st = sp_layout_stage_mesh_check(l, why, sizeof why);
        if (st != SP_OK) return spi_error_set(err, st, "<layout>", 0, 0, "stage_mesh", "%s", why);
    }
    if (sp_layout_disaggregated(l)) return groups_check(l, m, hw, chips, batch, err);
    int hetero = sp_layout_hetero(l);
    if (hetero) SP_CHECK(stage_mesh_check_hw(l, hw, chips, err));
    int64_t total = sp_layout_chips(l);
    if (!hetero && total < 0)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "mesh",
                             "stages (%d) × replicas (%d) × mesh %dx%dx%d overflows a 64-bit chip count",
                             l->stages, l->replicas, l->mesh[0], l->mesh[1], l->mesh[2]);
    if (!hetero && total != chips)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "mesh",
                             "stages (%d) × replicas (%d) × mesh %dx%dx%d = %lld chips, but %lld chips were asked for",
                             l->stages, l->replicas, l->mesh[0], l->mesh[1], l->mesh[2], (long long)total,
                             (long long)chips);
    if (l->weights == SP_DT_F32 && hw && hw->peak_flops[SP_DT_F32] <= 0)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "weights", "%s has no f32 matmul peak", hw->name);
    if (hw && hw->peak_flops[l->weights] <= 0 && l->weights != SP_DT_INT8)
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "weights", "%s does not support %s weights",
                             hw->name, sp_dtype_name(l->weights));
    if (!hetero && hw && !sp_layout_fits_torus(l->mesh, l->replicas, l->stages, hw))
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "mesh",
                             "stages %d × replicas %d × mesh %dx%dx%d fits no torus slice %s offers (of %lld chips, "
                             "within %dx%dx%d)", l->stages, l->replicas, l->mesh[0], l->mesh[1], l->mesh[2],
                             hw->name, (long long)total, hw->torus_dims[0], hw->torus_dims[1], hw->torus_dims[2]);
    int straddler;
    if (!hetero && hw && !sp_layout_fits_nodes(l, hw, &straddler))
        return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "mesh",
                             "mesh axis of %d chips straddles %d-chip nodes unevenly", straddler, hw->chips_per_node);
    SP_CHECK(pipeline_check(l, m, err));
    if (sp_layout_offloads(l)) {
        char why[160];
        const char *key;
        if (offload_check(l, m->n_layers, why, sizeof why, &key) != SP_OK)
            return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, key, "%s", why);
        if (hw && (hw->host_link_bw <= 0 || hw->host_bytes <= 0))
            return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, l->offload_kv > 0 ? "offload_kv" : "offload_weights",
                                 "%s states no host memory or host link (host.memory_bytes, host.link_bw): nothing can be offloaded",
                                 hw->name);
    }
    if (l->experts != 1 || l->capacity != 1.0) {
        const char *key = l->experts != 1 ? "experts" : "capacity";
        if (m->n_experts <= 0)
            return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, key, "model %s has no experts (dense)", m->name);
        if (m->n_experts % l->experts)
            return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "experts",
                                 "%d does not divide the model's %lld experts", l->experts, (long long)m->n_experts);
        if (l->experts != 1 && l->experts != l->replicas)
            return spi_error_set(err, SP_EINVAL, "<layout>", 0, 0, "experts",
                                 "%d: experts are split over the replicas, so experts must be 1 or replicas (%d); "
                                 "expert groups of part of the replicas are not implemented", l->experts, l->replicas);
    }
    return SP_OK;
}
