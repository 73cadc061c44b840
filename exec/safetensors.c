/* safetensors.c: read (mmap) and write safetensors files; Hugging Face
 * Llama and GPT-2 checkpoints into sp_weights.
 *
 * File format: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [r, c], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {...}}, then the data; offsets are relative to the data start. */
#include "config.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>
#include "spi_common.h"
#include "kernels/cpu/sp_kern.h"
#include "exec/sp_weights.h"
#include "exec/spi_hf.h"

#define SPI_ST_MAX_HEADER (100u << 20)

typedef struct st_file {
    char *path;
    unsigned char *map;
    size_t size;
} st_file;

struct sp_safetensors {
    st_file *files;
    int nfiles;
    sp_st_tensor *t;
    int n, cap;
};

static int st_elem_bytes(const char *dtype, int *dt)
{
    static const struct { const char *name; int bytes; int dt; } tab[] = {
        {"F32", 4, SP_DT_F32}, {"F16", 2, SP_DT_F16}, {"BF16", 2, SP_DT_BF16}, {"F8_E4M3", 1, SP_DT_FP8},
        {"F64", 8, -1}, {"I64", 8, -1}, {"U64", 8, -1}, {"I32", 4, -1}, {"U32", 4, -1}, {"I16", 2, -1},
        {"U16", 2, -1}, {"I8", 1, -1}, {"U8", 1, -1}, {"BOOL", 1, -1}, {"F8_E5M2", 1, -1},
    };
    for (size_t i = 0; i < SPI_ARRAY_LEN(tab); i++)
        if (!strcmp(dtype, tab[i].name)) {
            *dt = tab[i].dt;
            return tab[i].bytes;
        }
    *dt = -1;
    return 0;
}

static int cmp_offset(const void *a, const void *b)
{
    const sp_st_tensor *x = *(const sp_st_tensor *const *)a, *y = *(const sp_st_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* The data section, as the format requires: every byte belongs to exactly one
 * tensor (sorted by begin, each begins where the one before ends, the last
 * ends at the end of the file).  An overlap would let two tensors alias; a
 * hole or a tail means a header that does not describe its file. */
static sp_status check_extents(const sp_safetensors *st, int first, const char *path, uint64_t data0,
                               uint64_t data_size, sp_error *err)
{
    int n = st->n - first;
    if (n == 0) return SP_OK;
    const sp_st_tensor **v = malloc((size_t)n * sizeof *v);
    if (!v) return spi_error_set(err, SP_ENOMEM, path, 0, 0, "", "out of memory");
    for (int i = 0; i < n; i++) v[i] = &st->t[first + i];
    qsort(v, (size_t)n, sizeof *v, cmp_offset);
    sp_status s = SP_OK;
    uint64_t at = data0;
    for (int i = 0; i < n && s == SP_OK; i++) {
        uint64_t b = v[i]->offset - data0, e = b + v[i]->nbytes;
        if (v[i]->offset < at)
            s = spi_error_set(err, SP_EPARSE, path, 0, 0, v[i]->name,
                              "data_offsets [%llu, %llu) overlap tensor %s's [%llu, %llu)", (unsigned long long)b,
                              (unsigned long long)e, v[i - 1]->name, (unsigned long long)(v[i - 1]->offset - data0),
                              (unsigned long long)(at - data0));
        else if (v[i]->offset > at)
            s = spi_error_set(err, SP_EPARSE, path, 0, 0, v[i]->name,
                              "data_offsets begin at %llu but the data before ends at %llu: bytes no tensor holds",
                              (unsigned long long)b, (unsigned long long)(at - data0));
        at = v[i]->offset + v[i]->nbytes;
    }
    if (s == SP_OK && at != data0 + data_size)
        s = spi_error_set(err, SP_EPARSE, path, 0, 0, v[n - 1]->name,
                          "the last tensor ends at %llu of a %llu-byte data section: trailing bytes no tensor holds",
                          (unsigned long long)(at - data0), (unsigned long long)data_size);
    free(v);
    return s;
}

static sp_status add_file(sp_safetensors *st, const char *path, sp_error *err)
{
    int fi = st->nfiles;
    st_file *nf = realloc(st->files, (size_t)(fi + 1) * sizeof *nf);
    if (!nf) return spi_error_set(err, SP_ENOMEM, path, 0, 0, "", "out of memory");
    st->files = nf;
    st_file *f = &st->files[fi];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return spi_error_set(err, SP_ENOMEM, path, 0, 0, "", "out of memory");
    st->nfiles++;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return spi_error_set(err, SP_EIO, path, 0, 0, "", "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return spi_error_set(err, SP_EIO, path, 0, 0, "", "cannot stat: %s", strerror(errno));
    }
    if (sb.st_size < 8) {
        close(fd);
        return spi_error_set(err, SP_EPARSE, path, 0, 0, "", "file of %lld bytes is too short for a safetensors header",
                             (long long)sb.st_size);
    }
    f->size = (size_t)sb.st_size;
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        f->size = 0;
        return spi_error_set(err, SP_EIO, path, 0, 0, "", "cannot mmap: %s", strerror(errno));
    }
    f->map = m;

    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->map[i];
    if (hlen > f->size - 8 || hlen > SPI_ST_MAX_HEADER)
        return spi_error_set(err, SP_EPARSE, path, 0, 0, "",
                             "header length %llu exceeds the file (%zu bytes) or the %u-byte limit; truncated or not safetensors",
                             (unsigned long long)hlen, f->size, SPI_ST_MAX_HEADER);
    uint64_t data0 = 8 + hlen, data_size = f->size - data0;
    int first = st->n;   /* this file's tensors: st->t[first .. st->n) */
    json_error_t je;
    json_t *root = json_loadb((const char *)f->map + 8, (size_t)hlen, 0, &je);
    if (!root)
        return spi_error_set(err, SP_EPARSE, path, je.line, je.column, "", "header JSON invalid: %s", je.text);
    sp_status s = SP_OK;
    if (!json_is_object(root)) {
        s = spi_error_set(err, SP_EPARSE, path, 0, 0, "", "header is not a JSON object");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        json_t *jdt = json_object_get(val, "dtype"), *jsh = json_object_get(val, "shape"),
               *jof = json_object_get(val, "data_offsets");
        if (!json_is_object(val) || !json_is_string(jdt) || !json_is_array(jsh) || !json_is_array(jof) ||
            json_array_size(jof) != 2 || json_array_size(jsh) > 8) {
            s = spi_error_set(err, SP_EPARSE, path, 0, 0, key, "tensor entry needs dtype, shape (<= 8 dims) and data_offsets [begin, end]");
            goto out;
        }
        if (st->n == st->cap) {
            int cap = st->cap ? 2 * st->cap : 64;
            sp_st_tensor *nt = realloc(st->t, (size_t)cap * sizeof *nt);
            if (!nt) {
                s = spi_error_set(err, SP_ENOMEM, path, 0, 0, key, "out of memory");
                goto out;
            }
            st->t = nt;
            st->cap = cap;
        }
        sp_st_tensor *t = &st->t[st->n];
        memset(t, 0, sizeof *t);
        t->file = fi;
        snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(jdt));
        int eb = st_elem_bytes(json_string_value(jdt), &t->dt);
        if (!eb) {
            s = spi_error_set(err, SP_EPARSE, path, 0, 0, key,
                              "unknown dtype \"%.16s\" (F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U64, "
                              "U32, U16, U8, BOOL)", json_string_value(jdt));
            goto out;
        }
        t->ndim = (int)json_array_size(jsh);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            json_t *x = json_array_get(jsh, (size_t)d);
            if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                !spi_mul_u64(numel, (uint64_t)json_integer_value(x), &numel)) {
                s = spi_error_set(err, SP_EPARSE, path, 0, 0, key, "shape[%d] is not a non-negative integer", d);
                goto out;
            }
            t->shape[d] = json_integer_value(x);
        }
        json_t *jb = json_array_get(jof, 0), *je2 = json_array_get(jof, 1);
        if (!json_is_integer(jb) || !json_is_integer(je2) || json_integer_value(jb) < 0 ||
            json_integer_value(je2) < json_integer_value(jb) || (uint64_t)json_integer_value(je2) > data_size) {
            s = spi_error_set(err, SP_EPARSE, path, 0, 0, key,
                              "data_offsets out of range (data section holds %llu bytes); truncated file?",
                              (unsigned long long)data_size);
            goto out;
        }
        t->offset = data0 + (uint64_t)json_integer_value(jb);
        t->nbytes = (uint64_t)(json_integer_value(je2) - json_integer_value(jb));
        uint64_t want;
        if (eb && (!spi_mul_u64(numel, (uint64_t)eb, &want) || want != t->nbytes)) {
            s = spi_error_set(err, SP_EPARSE, path, 0, 0, key, "data_offsets span %llu bytes, shape and dtype %s need %llu",
                              (unsigned long long)t->nbytes, t->dtype, (unsigned long long)(numel * (uint64_t)eb));
            goto out;
        }
        t->name = strdup(key);
        if (!t->name) {
            s = spi_error_set(err, SP_ENOMEM, path, 0, 0, key, "out of memory");
            goto out;
        }
        st->n++;
    }
    if (s == SP_OK) s = check_extents(st, first, path, data0, data_size, err);
out:
    json_decref(root);
    return s;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

sp_status sp_safetensors_open(const char *path, sp_safetensors **out, sp_error *err)
{
    *out = NULL;
    sp_safetensors *st = calloc(1, sizeof *st);
    if (!st) return spi_error_set(err, SP_ENOMEM, path, 0, 0, "", "out of memory");
    struct stat sb;
    sp_status s = SP_OK;
    if (stat(path, &sb) != 0) {
        s = spi_error_set(err, SP_EIO, path, 0, 0, "", "cannot open: %s", strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (!d) {
            s = spi_error_set(err, SP_EIO, path, 0, 0, "", "cannot open directory: %s", strerror(errno));
        } else {
            char **names = NULL;
            size_t n = 0, cap = 0;
            struct dirent *e;
            while ((e = readdir(d)) != NULL && s == SP_OK) {
                if (!has_suffix(e->d_name, ".safetensors")) continue;
                if (n == cap) {
                    cap = cap ? 2 * cap : 8;
                    char **nn = realloc(names, cap * sizeof *nn);
                    if (!nn) { s = spi_error_set(err, SP_ENOMEM, path, 0, 0, "", "out of memory"); break; }
                    names = nn;
                }
                size_t len = strlen(path) + strlen(e->d_name) + 2;
                names[n] = malloc(len);
                if (!names[n]) { s = spi_error_set(err, SP_ENOMEM, path, 0, 0, "", "out of memory"); break; }
                snprintf(names[n], len, "%s/%s", path, e->d_name);
                n++;
            }
            closedir(d);
            if (s == SP_OK && n == 0)
                s = spi_error_set(err, SP_EIO, path, 0, 0, "", "no *.safetensors files in the directory");
            if (n) qsort(names, n, sizeof *names, cmp_str);
            for (size_t i = 0; i < n; i++) {
                if (s == SP_OK) s = add_file(st, names[i], err);
                free(names[i]);
            }
            free(names);
        }
    } else {
        s = add_file(st, path, err);
    }
    if (s != SP_OK) {
        sp_safetensors_close(st);
        return s;
    }
    *out = st;
    return SP_OK;
}

void sp_safetensors_close(sp_safetensors *st)
{
    if (!st) return;
    for (int i = 0; i < st->n; i++) free((char *)st->t[i].name);
    for (int i = 0; i < st->nfiles; i++) {
        if (st->files[i].map) munmap(st->files[i].map, st->files[i].size);
        free(st->files[i].path);
    }
    free(st->t);
    free(st->files);
    free(st);
}

int sp_safetensors_count(const sp_safetensors *st) { return st ? st->n : 0; }

const sp_st_tensor *sp_safetensors_at(const sp_safetensors *st, int i)
{
    return st && i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const sp_st_tensor *sp_safetensors_find(const sp_safetensors *st, const char *name)
{
    for (int i = 0; st && i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

static void st_dims(const sp_st_tensor *t, int64_t *R, int64_t *C)
{
    if (t->ndim == 0) { *R = 1; *C = 1; }
    else if (t->ndim == 1) { *R = 1; *C = t->shape[0]; }
    else { *R = t->shape[0]; *C = t->shape[1]; }
}

static float st_elem(const unsigned char *p, int dt)
{
    switch (dt) {
    case SP_DT_F32: { float f; memcpy(&f, p, 4); return f; }
    case SP_DT_F16: return sp_kern_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
    case SP_DT_BF16: return sp_kern_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
    case SP_DT_FP8: return sp_kern_fp8_to_f32(p[0]);
    default: return 0.0f;
    }
}

sp_status sp_safetensors_read_rows_cols(const sp_safetensors *st, const sp_st_tensor *t, int64_t r0, int64_t r1,
                                        int64_t c0, int64_t c1, int transpose, float *out, sp_error *err)
{
    if (!st || !t || !out) return spi_error_set(err, SP_EINVAL, "", 0, 0, "", "read_rows_cols: bad arguments");
    const char *src = st->files[t->file].path;
    if (t->dt < 0)   /* bad input for a weight, not something left unimplemented */
        return spi_error_set(err, SP_EINVAL, src, 0, 0, t->name, "dtype %s is not a weight type (F32, F16, BF16, F8_E4M3)",
                             t->dtype);
    if (t->ndim > 2)
        return spi_error_set(err, SP_EPARSE, src, 0, 0, t->name, "tensor is %d-D, expected a matrix or vector", t->ndim);
    int64_t R, C;
    st_dims(t, &R, &C);
    if (r0 < 0 || r1 > R || r0 > r1 || c0 < 0 || c1 > C || c0 > c1)
        return spi_error_set(err, SP_EINVAL, src, 0, 0, t->name, "slice [%lld,%lld) x [%lld,%lld) outside (%lld, %lld)",
                             (long long)r0, (long long)r1, (long long)c0, (long long)c1, (long long)R, (long long)C);
    int eb = sp_dtype_bytes((sp_dtype)t->dt);
    const unsigned char *base = st->files[t->file].map + t->offset;
    int64_t nr = r1 - r0, nc = c1 - c0;
    for (int64_t r = 0; r < nr; r++) {
        const unsigned char *row = base + ((uint64_t)(r0 + r) * (uint64_t)C + (uint64_t)c0) * (uint64_t)eb;
        if (!transpose && t->dt == SP_DT_F32) {
            memcpy(out + r * nc, row, (size_t)nc * sizeof(float));
            continue;
        }
        for (int64_t c = 0; c < nc; c++) {
            float v = st_elem(row + c * eb, t->dt);
            if (transpose) out[c * nr + r] = v;
            else out[r * nc + c] = v;
        }
    }
    return SP_OK;
}

sp_status sp_safetensors_write(const char *path, const sp_st_entry *e, int n, sp_error *err)
{
    json_t *root = json_object();
    uint64_t off = 0;
    sp_status s = SP_OK;
    char *hdr = NULL;
    FILE *f = NULL;
    if (!root) return spi_error_set(err, SP_ENOMEM, path, 0, 0, "", "out of memory");
    for (int i = 0; i < n; i++) {
        if (e[i].dt != SP_DT_F32 && e[i].dt != SP_DT_BF16 && e[i].dt != SP_DT_F16) {
            s = spi_error_set(err, SP_EINVAL, path, 0, 0, e[i].name, "can only write F32, BF16 or F16");
            goto out;
        }
        uint64_t numel = 1;
        json_t *sh = json_array();
        for (int d = 0; d < e[i].ndim; d++) {
            numel *= (uint64_t)e[i].shape[d];
            json_array_append_new(sh, json_integer(e[i].shape[d]));
        }
        uint64_t nb = numel * (uint64_t)sp_dtype_bytes(e[i].dt);
        json_t *o = json_pack("{s:s, s:o, s:[I, I]}", "dtype",
                              e[i].dt == SP_DT_F32 ? "F32" : e[i].dt == SP_DT_BF16 ? "BF16" : "F16", "shape", sh,
                              "data_offsets", (json_int_t)off, (json_int_t)(off + nb));
        if (!o || json_object_set_new(root, e[i].name, o)) {
            s = spi_error_set(err, SP_ENOMEM, path, 0, 0, e[i].name, "cannot build header");
            goto out;
        }
        off += nb;
    }
    hdr = json_dumps(root, JSON_COMPACT);
    if (!hdr) {
        s = spi_error_set(err, SP_ENOMEM, path, 0, 0, "", "cannot dump header");
        goto out;
    }
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    f = fopen(path, "wb");
    if (!f) {
        s = spi_error_set(err, SP_EIO, path, 0, 0, "", "cannot create: %s", strerror(errno));
        goto out;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hl, f) == hl;
    for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= (uint64_t)e[i].shape[d];
        for (uint64_t j = 0; ok && j < numel; j++) {
            float v = e[i].data[j];
            if (e[i].dt == SP_DT_F32) {
                ok = fwrite(&v, 4, 1, f) == 1;   /* little-endian hosts only */
            } else {
                uint16_t h = e[i].dt == SP_DT_BF16 ? sp_kern_f32_to_bf16(v) : sp_kern_f32_to_f16(v);
                unsigned char b[2] = {(unsigned char)(h & 0xff), (unsigned char)(h >> 8)};
                ok = fwrite(b, 1, 2, f) == 2;
            }
        }
    }
    if (fclose(f) != 0) ok = 0;
    f = NULL;
    if (!ok) s = spi_error_set(err, SP_EIO, path, 0, 0, "", "write failed: %s", strerror(errno));
out:
    free(hdr);
    json_decref(root);
    return s;
}

/* ---- Hugging Face checkpoints -------------------------------------------------------- */

/* One source of HF tensors: the open files and their naming. */
struct spi_hf_src {
    sp_safetensors *st;
    char dir[512];
    int gpt2;             /* 0: Llama naming, 1: GPT-2 naming */
    int neox;             /* GPT-NeoX naming (gpt_neox.*) */
    const char *prefix;   /* GPT-2: "" or "transformer." */
    int qwen_moe;         /* MoE layers in Qwen2-MoE naming (mlp.gate, mlp.experts.N, mlp.shared_expert*),
                             else Mixtral's (block_sparse_moe.gate, block_sparse_moe.experts.N.w1/w2/w3) */
};

/* Where our tensor kind t of layer l lives: tensor name, its stored shape
 * (sr, sc; sr = 0 for a vector), the stored column range [c0, c1) it
 * occupies (fused c_attn), whether it is stored transposed ((out, in), as
 * HF Linear weights are), and whether a checkpoint must have it.  Returns 0
 * when the naming has no such tensor for this model. */
typedef struct hf_loc {
    char name[160];
    int64_t sr, sc, c0, c1;
    int transpose, required;
    int part;   /* GPT-NeoX's fused query_key_value: 1 q, 2 k, 3 v of each head's [q | k | v] rows; 0 otherwise */
} hf_loc;

/* GPT-NeoX naming: fused per-head q | k | v, Linear weights (out, in) */
static int hf_where_neox(const sp_model *m, sp_weight t, int64_t l, hf_loc *o)
{
    int64_t E = m->d_model, F = m->d_ff, QD = m->n_heads * m->d_head, V = m->vocab;
    long long ll = (long long)l;
#define LOCN(sr_, sc_, tr_, part_, fmt, ...) \
    (snprintf(o->name, sizeof o->name, fmt, __VA_ARGS__), o->sr = (sr_), o->sc = (sc_), o->c0 = 0, \
     o->c1 = (sr_) != 0 ? ((tr_) ? (sc_) : (sr_)) : (sc_), o->transpose = (tr_), o->part = (part_), 1)
    switch (t) {
    case SP_W_EMBED: return LOCN(V, E, 0, 0, "%s", "gpt_neox.embed_in.weight");
    case SP_W_LMHEAD: return m->tied_embeddings ? 0 : LOCN(V, E, 0, 0, "%s", "embed_out.weight");
    case SP_W_NORMF: return LOCN(0, E, 0, 0, "%s", "gpt_neox.final_layer_norm.weight");
    case SP_W_NORMF_B: return LOCN(0, E, 0, 0, "%s", "gpt_neox.final_layer_norm.bias");
    case SP_W_NORM1: return LOCN(0, E, 0, 0, "gpt_neox.layers.%lld.input_layernorm.weight", ll);
    case SP_W_NORM1_B: return LOCN(0, E, 0, 0, "gpt_neox.layers.%lld.input_layernorm.bias", ll);
    case SP_W_NORM2: return LOCN(0, E, 0, 0, "gpt_neox.layers.%lld.post_attention_layernorm.weight", ll);
    case SP_W_NORM2_B: return LOCN(0, E, 0, 0, "gpt_neox.layers.%lld.post_attention_layernorm.bias", ll);
    case SP_W_Q: return LOCN(3 * QD, E, 1, 1, "gpt_neox.layers.%lld.attention.query_key_value.weight", ll);
    case SP_W_K: return LOCN(3 * QD, E, 1, 2, "gpt_neox.layers.%lld.attention.query_key_value.weight", ll);
    case SP_W_V: return LOCN(3 * QD, E, 1, 3, "gpt_neox.layers.%lld.attention.query_key_value.weight", ll);
    case SP_W_O: return LOCN(E, QD, 1, 0, "gpt_neox.layers.%lld.attention.dense.weight", ll);
    case SP_W_IN: return LOCN(F, E, 1, 0, "gpt_neox.layers.%lld.mlp.dense_h_to_4h.weight", ll);
    case SP_W_OUT: return LOCN(E, F, 1, 0, "gpt_neox.layers.%lld.mlp.dense_4h_to_h.weight", ll);
    case SP_W_BQ: return LOCN(0, 3 * QD, 0, 1, "gpt_neox.layers.%lld.attention.query_key_value.bias", ll);
    case SP_W_BK: return LOCN(0, 3 * QD, 0, 2, "gpt_neox.layers.%lld.attention.query_key_value.bias", ll);
    case SP_W_BV: return LOCN(0, 3 * QD, 0, 3, "gpt_neox.layers.%lld.attention.query_key_value.bias", ll);
    case SP_W_BO: return LOCN(0, E, 0, 0, "gpt_neox.layers.%lld.attention.dense.bias", ll);
    case SP_W_B_IN: return LOCN(0, F, 0, 0, "gpt_neox.layers.%lld.mlp.dense_h_to_4h.bias", ll);
    case SP_W_B_OUT: return LOCN(0, E, 0, 0, "gpt_neox.layers.%lld.mlp.dense_4h_to_h.bias", ll);
    default: return 0;
    }
#undef LOCN
}

/* A MoE layer's expert matrices (sp_weight: the experts stacked along our rows). */
static int hf_expert_kind(const sp_model *m, sp_weight t)
{
    return m->n_experts > 0 && (t == SP_W_IN || t == SP_W_UP || t == SP_W_OUT);
}

/* e: the expert of an expert kind (hf_expert_kind), else ignored */
static int hf_where(const spi_hf_src *h, const sp_model *m, sp_weight t, int64_t l, int64_t e, hf_loc *o)
{
    int64_t E = m->d_model, F = m->d_ff, QD = m->n_heads * m->d_head, KD = m->n_kv_heads * m->d_head, V = m->vocab;
    int64_t Fd = sp_model_dense_ff(m);
    int ln = m->norm == SP_NORM_LAYERNORM;
    long long ll = (long long)l;
    memset(o, 0, sizeof *o);
    o->required = 1;
    /* a layer holds only its own kinds: no experts in a dense layer between MoE layers, no dense FFN in a
     * MoE layer (a checkpoint tensor for them is then not explained, and refused) */
    if (sp_weight_per_layer(t) && sp_weight_present(m, t) && !sp_weight_in_layer(m, t, l)) return 0;
    if (h->neox) return hf_where_neox(m, t, l, o);
#define LOC(sr_, sc_, c0_, c1_, tr_, fmt, ...) \
    (snprintf(o->name, sizeof o->name, fmt, __VA_ARGS__), o->sr = (sr_), o->sc = (sc_), o->c0 = (c0_), \
     o->c1 = (c1_), o->transpose = (tr_), 1)
    if (!h->gpt2 && m->n_experts > 0 && h->qwen_moe) {
        /* Qwen2-MoE (Qwen2MoeSparseMoeBlock): router mlp.gate (n_experts, E); expert e's gate_proj (F, E),
         * up_proj (F, E), down_proj (E, F); the shared expert's the same names under mlp.shared_expert
         * with Fs for F, and its gate mlp.shared_expert_gate (1, E); every one a Linear weight (out, in) */
        long long ee = (long long)e;
        int64_t Fs = sp_model_shared_ff(m);
        switch (t) {
        case SP_W_ROUTER: return LOC(m->n_experts, E, 0, E, 1, "model.layers.%lld.mlp.gate.weight", ll);
        case SP_W_IN: return LOC(F, E, 0, E, 1, "model.layers.%lld.mlp.experts.%lld.gate_proj.weight", ll, ee);
        case SP_W_UP: return LOC(F, E, 0, E, 1, "model.layers.%lld.mlp.experts.%lld.up_proj.weight", ll, ee);
        case SP_W_OUT: return LOC(E, F, 0, F, 1, "model.layers.%lld.mlp.experts.%lld.down_proj.weight", ll, ee);
        case SP_W_SH_IN: return Fs > 0 && LOC(Fs, E, 0, E, 1, "model.layers.%lld.mlp.shared_expert.gate_proj.weight", ll);
        case SP_W_SH_UP: return Fs > 0 && LOC(Fs, E, 0, E, 1, "model.layers.%lld.mlp.shared_expert.up_proj.weight", ll);
        case SP_W_SH_OUT: return Fs > 0 && LOC(E, Fs, 0, Fs, 1, "model.layers.%lld.mlp.shared_expert.down_proj.weight", ll);
        case SP_W_SH_GATE:
            return m->shared_expert_gate && LOC(1, E, 0, E, 1, "model.layers.%lld.mlp.shared_expert_gate.weight", ll);
        default: break;
        }
    } else if (!h->gpt2 && m->n_experts > 0) {
        /* Mixtral (MixtralSparseMoeBlock): router `gate` (n_experts, E); expert e's w1 gate (F, E),
         * w3 up (F, E), w2 down (E, F); every one a Linear weight (out, in) */
        long long ee = (long long)e;
        switch (t) {
        case SP_W_ROUTER: return LOC(m->n_experts, E, 0, E, 1, "model.layers.%lld.block_sparse_moe.gate.weight", ll);
        case SP_W_IN: return LOC(F, E, 0, E, 1, "model.layers.%lld.block_sparse_moe.experts.%lld.w1.weight", ll, ee);
        case SP_W_UP: return LOC(F, E, 0, E, 1, "model.layers.%lld.block_sparse_moe.experts.%lld.w3.weight", ll, ee);
        case SP_W_OUT: return LOC(E, F, 0, F, 1, "model.layers.%lld.block_sparse_moe.experts.%lld.w2.weight", ll, ee);
        default: break;
        }
    }
    if (!h->gpt2) {
        switch (t) {
        case SP_W_EMBED: return LOC(V, E, 0, E, 0, "%s", "model.embed_tokens.weight");
        case SP_W_LMHEAD: return m->tied_embeddings ? 0 : LOC(V, E, 0, E, 0, "%s", "lm_head.weight");
        case SP_W_NORMF: return LOC(0, E, 0, E, 0, "%s", "model.norm.weight");
        case SP_W_NORMF_B: return ln && LOC(0, E, 0, E, 0, "%s", "model.norm.bias");
        case SP_W_NORM1: return LOC(0, E, 0, E, 0, "model.layers.%lld.input_layernorm.weight", ll);
        case SP_W_NORM1_B: return ln && LOC(0, E, 0, E, 0, "model.layers.%lld.input_layernorm.bias", ll);
        case SP_W_NORM2: return LOC(0, E, 0, E, 0, "model.layers.%lld.post_attention_layernorm.weight", ll);
        case SP_W_NORM2_B: return ln && LOC(0, E, 0, E, 0, "model.layers.%lld.post_attention_layernorm.bias", ll);
        /* HF Linear weights are (out, in): transposed into our (in, out) */
        case SP_W_Q: return LOC(QD, E, 0, E, 1, "model.layers.%lld.self_attn.q_proj.weight", ll);
        case SP_W_K: return LOC(KD, E, 0, E, 1, "model.layers.%lld.self_attn.k_proj.weight", ll);
        case SP_W_V: return LOC(KD, E, 0, E, 1, "model.layers.%lld.self_attn.v_proj.weight", ll);
        case SP_W_O: return LOC(E, QD, 0, QD, 1, "model.layers.%lld.self_attn.o_proj.weight", ll);
        case SP_W_IN: return LOC(F, E, 0, E, 1, "model.layers.%lld.mlp.gate_proj.weight", ll);
        case SP_W_UP: return LOC(F, E, 0, E, 1, "model.layers.%lld.mlp.up_proj.weight", ll);
        case SP_W_OUT: return LOC(E, F, 0, F, 1, "model.layers.%lld.mlp.down_proj.weight", ll);
        /* a dense layer between MoE layers (Qwen2-MoE's decoder_sparse_step, mlp_only_layers): Llama's MLP */
        case SP_W_D_IN: return LOC(Fd, E, 0, E, 1, "model.layers.%lld.mlp.gate_proj.weight", ll);
        case SP_W_D_UP: return LOC(Fd, E, 0, E, 1, "model.layers.%lld.mlp.up_proj.weight", ll);
        case SP_W_D_OUT: return LOC(E, Fd, 0, Fd, 1, "model.layers.%lld.mlp.down_proj.weight", ll);
        default: break;
        }
        /* biases: required where config.json declares them (attention_bias: q, k, v, o; Qwen2: q, k, v;
         * mlp_bias), and refused where it does not (spi_hf_fill) */
        o->required = t == SP_W_BQ || t == SP_W_BK || t == SP_W_BV ? sp_model_has_bias(m, SP_BIAS_QKV)
                      : t == SP_W_BO                                 ? sp_model_has_bias(m, SP_BIAS_O)
                                                                      : sp_model_has_bias(m, SP_BIAS_FFN);
        switch (t) {
        case SP_W_BQ: return LOC(0, QD, 0, QD, 0, "model.layers.%lld.self_attn.q_proj.bias", ll);
        case SP_W_BK: return LOC(0, KD, 0, KD, 0, "model.layers.%lld.self_attn.k_proj.bias", ll);
        case SP_W_BV: return LOC(0, KD, 0, KD, 0, "model.layers.%lld.self_attn.v_proj.bias", ll);
        case SP_W_BO: return LOC(0, E, 0, E, 0, "model.layers.%lld.self_attn.o_proj.bias", ll);
        case SP_W_B_IN: return LOC(0, F, 0, F, 0, "model.layers.%lld.mlp.gate_proj.bias", ll);
        case SP_W_B_UP: return LOC(0, F, 0, F, 0, "model.layers.%lld.mlp.up_proj.bias", ll);
        case SP_W_B_OUT: return LOC(0, E, 0, E, 0, "model.layers.%lld.mlp.down_proj.bias", ll);
        default: return 0;
        }
    }
    const char *p = h->prefix;
    int64_t QKV = QD + 2 * KD;
    /* GPT-2 Conv1D weights are already (in, out); c_attn fuses q | k | v along out */
    switch (t) {
    case SP_W_EMBED: return LOC(V, E, 0, E, 0, "%swte.weight", p);
    case SP_W_POS: return LOC(m->max_context, E, 0, E, 0, "%swpe.weight", p);
    case SP_W_LMHEAD: return m->tied_embeddings ? 0 : LOC(V, E, 0, E, 0, "%s", "lm_head.weight");
    case SP_W_NORMF: return LOC(0, E, 0, E, 0, "%sln_f.weight", p);
    case SP_W_NORMF_B: return LOC(0, E, 0, E, 0, "%sln_f.bias", p);
    case SP_W_NORM1: return LOC(0, E, 0, E, 0, "%sh.%lld.ln_1.weight", p, ll);
    case SP_W_NORM1_B: return LOC(0, E, 0, E, 0, "%sh.%lld.ln_1.bias", p, ll);
    case SP_W_NORM2: return LOC(0, E, 0, E, 0, "%sh.%lld.ln_2.weight", p, ll);
    case SP_W_NORM2_B: return LOC(0, E, 0, E, 0, "%sh.%lld.ln_2.bias", p, ll);
    case SP_W_Q: return LOC(E, QKV, 0, QD, 0, "%sh.%lld.attn.c_attn.weight", p, ll);
    case SP_W_K: return LOC(E, QKV, QD, QD + KD, 0, "%sh.%lld.attn.c_attn.weight", p, ll);
    case SP_W_V: return LOC(E, QKV, QD + KD, QKV, 0, "%sh.%lld.attn.c_attn.weight", p, ll);
    case SP_W_O: return LOC(QD, E, 0, E, 0, "%sh.%lld.attn.c_proj.weight", p, ll);
    case SP_W_IN: return LOC(E, F, 0, F, 0, "%sh.%lld.mlp.c_fc.weight", p, ll);
    case SP_W_OUT: return LOC(F, E, 0, E, 0, "%sh.%lld.mlp.c_proj.weight", p, ll);
    case SP_W_BQ: return LOC(0, QKV, 0, QD, 0, "%sh.%lld.attn.c_attn.bias", p, ll);
    case SP_W_BK: return LOC(0, QKV, QD, QD + KD, 0, "%sh.%lld.attn.c_attn.bias", p, ll);
    case SP_W_BV: return LOC(0, QKV, QD + KD, QKV, 0, "%sh.%lld.attn.c_attn.bias", p, ll);
    case SP_W_BO: return LOC(0, E, 0, E, 0, "%sh.%lld.attn.c_proj.bias", p, ll);
    case SP_W_B_IN: return LOC(0, F, 0, F, 0, "%sh.%lld.mlp.c_fc.bias", p, ll);
    case SP_W_B_OUT: return LOC(0, E, 0, E, 0, "%sh.%lld.mlp.c_proj.bias", p, ll);
    default: return 0;
    }
#undef LOC
}

/* Checks the stored tensor's shape against the model's. */
static sp_status hf_tensor(const spi_hf_src *h, const hf_loc *o, const sp_st_tensor **out, sp_error *err)
{
    const sp_st_tensor *t = sp_safetensors_find(h->st, o->name);
    *out = t;
    if (!t) return o->required ? spi_error_set(err, SP_EPARSE, h->dir, 0, 0, o->name, "missing tensor") : SP_OK;
    int ok = o->sr == 0 ? (t->ndim == 1 && t->shape[0] == o->sc)
                        : (t->ndim == 2 && t->shape[0] == o->sr && t->shape[1] == o->sc);
    if (ok) return SP_OK;
    char got[96] = "";
    size_t n = 0;
    for (int d = 0; d < t->ndim && n < sizeof got - 24; d++)
        n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (o->sr == 0)
        return spi_error_set(err, SP_EPARSE, h->st->files[t->file].path, 0, 0, o->name,
                             "wrong shape (%s), model needs (%lld)", got, (long long)o->sc);
    return spi_error_set(err, SP_EPARSE, h->st->files[t->file].path, 0, 0, o->name,
                         "wrong shape (%s), model needs (%lld, %lld)", got, (long long)o->sr, (long long)o->sc);
}

/* Block [r0, r1) x [c0, c1) of our (rows, cols) view of tensor kind t,
 * layer l, read from the checkpoint into out (r1-r0, c1-c0).  *absent is
 * set (and out left alone) for an optional tensor the checkpoint lacks. */
sp_status spi_hf_read_block(const spi_hf_src *h, const sp_model *m, sp_weight t, int64_t l, int64_t r0, int64_t r1,
                            int64_t c0, int64_t c1, float *out, int *absent, sp_error *err)
{
    hf_loc o;
    *absent = 0;
    if (hf_expert_kind(m, t)) {
        /* rows [r0, r1) may span experts: each expert's part from its own tensor */
        int64_t per = t == SP_W_OUT ? m->d_ff : m->d_model;
        for (int64_t a = r0; a < r1;) {
            int64_t e = a / per, b = (e + 1) * per < r1 ? (e + 1) * per : r1;
            if (!hf_where(h, m, t, l, e, &o)) return spi_fail(SP_EINVAL, "no %s of expert %lld", sp_weight_name(t), (long long)e);
            const sp_st_tensor *ts;
            SP_CHECK(hf_tensor(h, &o, &ts, err));
            if (!ts) return spi_fail(SP_EINVAL, "%s absent", o.name);
            SP_CHECK(sp_safetensors_read_rows_cols(h->st, ts, c0, c1, a - e * per, b - e * per, 1,
                                                   out + (a - r0) * (c1 - c0), err));
            a = b;
        }
        return SP_OK;
    }
    if (!hf_where(h, m, t, l, 0, &o))
        return spi_fail(SP_EINVAL, "%s naming has no %s", h->neox ? "GPT-NeoX" : h->gpt2 ? "GPT-2" : "Llama", sp_weight_name(t));
    const sp_st_tensor *ts;
    SP_CHECK(hf_tensor(h, &o, &ts, err));
    if (!ts) {
        *absent = 1;
        return SP_OK;
    }
    if (o.part) {
        /* our column j (head j / D, dim j % D) is stored row (j / D)·3D + (part-1)·D + j % D:
         * read one head's run of columns at a time */
        int64_t D = m->d_head, w = c1 - c0, nr = r1 - r0;
        float *tmp = o.transpose ? malloc((size_t)(nr * D) * sizeof *tmp) : NULL;
        if (o.transpose && !tmp) return spi_fail(SP_ENOMEM, "out of memory");
        sp_status s = SP_OK;
        for (int64_t j = c0; j < c1 && !s;) {
            int64_t hd = j / D, d0 = j % D, n = D - d0 < c1 - j ? D - d0 : c1 - j;
            int64_t s0 = hd * 3 * D + (o.part - 1) * D + d0;
            if (!o.transpose) {
                s = sp_safetensors_read_rows_cols(h->st, ts, 0, 1, s0, s0 + n, 0, out + (j - c0), err);
            } else {
                s = sp_safetensors_read_rows_cols(h->st, ts, s0, s0 + n, r0, r1, 1, tmp, err);
                for (int64_t r = 0; !s && r < nr; r++) memcpy(out + r * w + (j - c0), tmp + r * n, (size_t)n * sizeof *tmp);
            }
            j += n;
        }
        free(tmp);
        return s;
    }
    if (o.transpose)   /* stored (out, in): our rows are its columns */
        return sp_safetensors_read_rows_cols(h->st, ts, c0, c1, r0, r1, 1, out, err);
    if (o.sr == 0) return sp_safetensors_read_rows_cols(h->st, ts, 0, 1, o.c0 + c0, o.c0 + c1, 0, out, err);
    return sp_safetensors_read_rows_cols(h->st, ts, r0, r1, o.c0 + c0, o.c0 + c1, 0, out, err);
}

/* names tagged with one leading character, ordered by the name after it */
static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a + 1, *(char *const *)b + 1); }
static int cmp_key(const void *key, const void *b) { return strcmp((const char *)key, *(char *const *)b + 1); }

/* Buffers a checkpoint may carry that the computation derives itself: rotary
 * frequencies and causal masks (GPT-2's attn.bias and attn.masked_bias,
 * GPT-NeoX's attention.bias and attention.masked_bias). */
static int hf_derived_buffer(const spi_hf_src *h, const char *name)
{
    static const char *const any[] = {".rotary_emb.inv_freq", ".attn.masked_bias", ".attention.masked_bias",
                                      ".attention.bias"};
    size_t n = strlen(name);
    for (size_t i = 0; i < SPI_ARRAY_LEN(any); i++)
        if (has_suffix(name, any[i]) && (i != 3 || h->neox)) return 1;
    /* GPT-2's causal mask shares its name pattern with nothing it computes: h.N.attn.bias, 4-D */
    const sp_st_tensor *t = sp_safetensors_find(h->st, name);
    return h->gpt2 && n > 10 && has_suffix(name, ".attn.bias") && t && t->ndim == 4;
}

/* Every tensor of the checkpoint is one the model reads (hf_where), or a
 * buffer it derives: a tensor config.json does not explain means the config
 * and the checkpoint disagree (another architecture, a missing field), and
 * running without it would compute something else without a word.  A bias
 * the naming knows but config.json does not declare is named as such. */
static sp_status hf_check_explained(const spi_hf_src *h, const sp_model *m, sp_error *err)
{
    int64_t sz[SP_W_COUNT], total;
    SP_CHECK(sp_weights_sizes(m, sz, &total));
    int cap = 0, n = 0;
    char **names = NULL;   /* "1name": the model reads it; "0name": the naming has it, this model does not */
    sp_status s = SP_OK;
    for (int t = 0; t < SP_W_COUNT && s == SP_OK; t++) {
        int global = !sp_weight_per_layer((sp_weight)t);
        for (int64_t l = 0; l < (global ? 1 : m->n_layers) && s == SP_OK; l++)
        for (int64_t e = 0; e < (hf_expert_kind(m, (sp_weight)t) ? m->n_experts : 1) && s == SP_OK; e++) {
            hf_loc o;
            if (!hf_where(h, m, (sp_weight)t, l, e, &o)) continue;
            if (n == cap) {
                char **nn = realloc(names, (size_t)(cap = cap ? 2 * cap : 256) * sizeof *nn);
                if (!nn) { s = spi_fail(SP_ENOMEM, "out of memory"); break; }
                names = nn;
            }
            size_t len = strlen(o.name) + 2;
            if (!(names[n] = malloc(len))) { s = spi_fail(SP_ENOMEM, "out of memory"); break; }
            snprintf(names[n++], len, "%c%s", sz[t] > 0 || o.required ? '1' : '0', o.name);
        }
    }
    if (s == SP_OK) qsort(names, (size_t)n, sizeof *names, cmp_name);
    /* one name, several kinds (fused q|k|v): read if any kind is read */
    for (int pass = 0; s == SP_OK && pass < 2; pass++)
        for (int i = 1; i < n; i++) {
            char *a = names[pass ? n - i : i - 1], *b = names[pass ? n - i - 1 : i];
            if (a[0] == '1' && !strcmp(a + 1, b + 1)) b[0] = '1';
        }
    for (int i = 0; s == SP_OK && i < sp_safetensors_count(h->st); i++) {
        const sp_st_tensor *t = sp_safetensors_at(h->st, i);
        char **hit = bsearch(t->name, names, (size_t)n, sizeof *names, cmp_key);
        if (hit && (*hit)[0] == '1') continue;
        if (hit)
            s = spi_error_set(err, SP_EPARSE, h->st->files[t->file].path, 0, 0, t->name,
                              "the checkpoint has this bias but config.json declares none (attention_bias, mlp_bias): "
                              "refused rather than ignored");
        else if (!hit && !hf_derived_buffer(h, t->name))
            s = spi_error_set(err, SP_EPARSE, h->st->files[t->file].path, 0, 0, t->name,
                              "tensor not explained by config.json: %s reads no such tensor (another architecture, or "
                              "a field config.json lacks?)", m->name);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return s;
}

sp_status spi_hf_open(const char *dir, const sp_model *m, spi_hf_src **out, sp_error *err)
{
    *out = NULL;
    spi_hf_src *h = calloc(1, sizeof *h);
    if (!h) return spi_fail(SP_ENOMEM, "out of memory");
    snprintf(h->dir, sizeof h->dir, "%s", dir);
    sp_status s = sp_safetensors_open(dir, &h->st, err);
    if (s != SP_OK) {
        free(h);
        return s;
    }
    /* the MoE naming: Qwen2-MoE's when its router is there, else Mixtral's */
    char router0[64];   /* the first MoE layer's router (layer moe_every - 1) */
    snprintf(router0, sizeof router0, "model.layers.%lld.mlp.gate.weight", (long long)(m->moe_every > 1 ? m->moe_every - 1 : 0));
    h->qwen_moe = m->n_experts > 0 && sp_safetensors_find(h->st, router0) != NULL;
    if (sp_model_shared_ff(m) > 0 && !h->qwen_moe) {
        /* shared experts are named by Qwen2-MoE only (DeepSeek-MoE's shared_experts are not read) */
        s = spi_error_set(err, SP_ENOTSUP, dir, 0, 0, "/n_shared_experts",
                          "checkpoints of models with shared experts are read in Qwen2-MoE naming only "
                          "(model.layers.N.mlp.gate.weight, mlp.shared_expert.*), which this one does not use");
    } else if (sp_safetensors_find(h->st, "model.embed_tokens.weight")) {
        if (m->ffn != SP_FFN_SWIGLU)
            s = spi_error_set(err, SP_EPARSE, dir, 0, 0, "", "Llama naming needs a SwiGLU model (gate/up/down)");
    } else if (sp_safetensors_find(h->st, "wte.weight") || sp_safetensors_find(h->st, "transformer.wte.weight")) {
        h->gpt2 = 1;
        h->prefix = sp_safetensors_find(h->st, "wte.weight") ? "" : "transformer.";
        if (m->ffn != SP_FFN_GELU)
            s = spi_error_set(err, SP_EPARSE, dir, 0, 0, "", "GPT-2 naming needs a GELU model (c_fc/c_proj)");
    } else if (sp_safetensors_find(h->st, "gpt_neox.embed_in.weight")) {
        h->neox = 1;
        if (m->ffn != SP_FFN_GELU)
            s = spi_error_set(err, SP_EPARSE, dir, 0, 0, "", "GPT-NeoX naming needs a GELU model (dense_h_to_4h)");
    } else {
        s = spi_error_set(err, SP_EPARSE, dir, 0, 0, "",
                          "none of Llama (model.embed_tokens.weight), GPT-2 (wte.weight) or GPT-NeoX "
                          "(gpt_neox.embed_in.weight) naming found");
    }
    if (s == SP_OK) s = hf_check_explained(h, m, err);
    if (s != SP_OK) {
        spi_hf_close(h);
        return s;
    }
    *out = h;
    return SP_OK;
}

void spi_hf_close(spi_hf_src *h)
{
    if (!h) return;
    sp_safetensors_close(h->st);
    free(h);
}

/* Reads every tensor the weights hold (w->t[kind] non-NULL), whole, and
 * checks every tensor the model needs is in the checkpoint. */
sp_status spi_hf_fill(const spi_hf_src *h, const sp_model *m, sp_weights *w, sp_error *err)
{
    /* a tensor the config does not explain (an undeclared bias, ...) was refused by spi_hf_open */
    for (int t = 0; t < SP_W_COUNT; t++) {
        if (!w->sizes[t]) continue;
        int global = !sp_weight_per_layer((sp_weight)t);
        int64_t R, C;
        sp_weight_shape(m, (sp_weight)t, &R, &C);
        for (int64_t l = 0; l < (global ? 1 : m->n_layers); l++) {
            hf_loc o;
            int present = 1;
            for (int64_t e = 0; e < (hf_expert_kind(m, (sp_weight)t) ? m->n_experts : 1); e++) {
                if (!hf_where(h, m, (sp_weight)t, l, e, &o)) {
                    present = 0;
                    continue;
                }
                const sp_st_tensor *ts;
                SP_CHECK(hf_tensor(h, &o, &ts, err));   /* shape and presence, even when read later */
                present &= ts != NULL;
            }
            if (!w->t[t] || !present) continue;
            int absent;
            SP_CHECK(spi_hf_read_block(h, m, (sp_weight)t, l, 0, R, 0, C, (float *)(global ? w->t[t] : sp_weights_tensor(w, (sp_weight)t, l)),
                                       &absent, err));
        }
    }
    return SP_OK;
}

sp_status sp_weights_load_hf(const char *dir, const sp_model *m, sp_weights *w, sp_error *err)
{
    memset(w, 0, sizeof *w);
    spi_hf_src *h = NULL;
    SP_CHECK(spi_hf_open(dir, m, &h, err));
    sp_status s = sp_weights_alloc(m, w);
    if (s != SP_OK) spi_error_set(err, s, dir, 0, 0, "", "%s", sp_last_error());
    else s = spi_hf_fill(h, m, w, err);
    spi_hf_close(h);
    if (s != SP_OK) sp_weights_free(w);
    return s;
}
