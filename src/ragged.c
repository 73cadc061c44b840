/* ragged.c: workload files of per-sequence prompt and generation lengths (sp_ragged.h). */
#include "config.h"
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "sp_ragged.h"

void sp_ragged_free(sp_ragged *r)
{
    if (!r) return;
    if (!r->view) {
        free(r->prompt);
        free(r->gen);
    }
    memset(r, 0, sizeof *r);
}

/* grows r by one sequence (capacity doubling; *cap the allocated entries) */
static sp_status push(sp_ragged *r, int64_t *cap, int64_t p, int64_t g)
{
    if (r->n == *cap) {
        int64_t nc = *cap ? 2 * *cap : 16;
        int64_t *a = realloc(r->prompt, (size_t)nc * sizeof *a);
        if (!a) return spi_fail(SP_ENOMEM, "workload: %lld sequences", (long long)nc);
        r->prompt = a;
        int64_t *b = realloc(r->gen, (size_t)nc * sizeof *b);
        if (!b) return spi_fail(SP_ENOMEM, "workload: %lld sequences", (long long)nc);
        r->gen = b;
        *cap = nc;
    }
    r->prompt[r->n] = p;
    r->gen[r->n] = g;
    r->n++;
    return SP_OK;
}

/* the totals; the lengths were checked as they were read (each < 2^24, n < 2^20: no sum overflows) */
static void finish(sp_ragged *r)
{
    r->max_prompt = r->max_gen = r->max_context = r->sum_prompt = r->sum_gen = 0;
    for (int64_t b = 0; b < r->n; b++) {
        if (r->prompt[b] > r->max_prompt) r->max_prompt = r->prompt[b];
        if (r->gen[b] > r->max_gen) r->max_gen = r->gen[b];
        if (r->prompt[b] + r->gen[b] > r->max_context) r->max_context = r->prompt[b] + r->gen[b];
        r->sum_prompt += r->prompt[b];
        r->sum_gen += r->gen[b];
    }
}

static int length_ok(int64_t v) { return v >= 1 && v <= SP_RAGGED_MAX_TOKENS; }

sp_status sp_ragged_from(const int64_t *prompt, const int64_t *gen, int64_t n, sp_ragged *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1 || n > SP_RAGGED_MAX_SEQS)
        return spi_fail(SP_EINVAL, "workload: %lld sequences (1 .. %d)", (long long)n, SP_RAGGED_MAX_SEQS);
    int64_t cap = 0;
    for (int64_t b = 0; b < n; b++) {
        if (!length_ok(prompt[b]) || !length_ok(gen[b])) {
            sp_ragged_free(out);
            return spi_fail(SP_EINVAL, "workload: sequence %lld: prompt %lld, gen %lld (each 1 .. %d)", (long long)b,
                            (long long)prompt[b], (long long)gen[b], SP_RAGGED_MAX_TOKENS);
        }
        sp_status st = push(out, &cap, prompt[b], gen[b]);
        if (st) {
            sp_ragged_free(out);
            return st;
        }
    }
    finish(out);
    return SP_OK;
}

/* one CSV field: a decimal integer in 1 .. 2^24 */
static int csv_int(const char **s, int64_t *v)
{
    const char *p = *s;
    while (*p == ' ' || *p == '\t') p++;
    if (!isdigit((unsigned char)*p)) return 0;
    errno = 0;
    char *end;
    long long x = strtoll(p, &end, 10);
    if (errno) return 0;
    while (*end == ' ' || *end == '\t' || *end == '\r') end++;
    *v = x;
    *s = end;
    return 1;
}

static sp_status load_csv(const char *text, const char *src, sp_ragged *r, sp_error *err)
{
    int64_t cap = 0;
    int line = 0;
    for (const char *s = text; *s;) {
        line++;
        const char *eol = strchr(s, '\n');
        size_t len = eol ? (size_t)(eol - s) : strlen(s);
        char buf[256];
        if (len >= sizeof buf)
            return spi_error_set(err, SP_EPARSE, src, line, 1, "", "line longer than %zu characters", sizeof buf - 1);
        memcpy(buf, s, len);
        buf[len] = '\0';
        s = eol ? eol + 1 : s + len;
        const char *p = buf;
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p || *p == '#') continue;
        if (r->n == 0 && !cap && !strncmp(p, "prompt", 6)) {
            /* the optional header */
            char h[64];
            size_t k = 0;
            for (const char *q = p; *q && k + 1 < sizeof h; q++)
                if (*q != ' ' && *q != '\t' && *q != '\r') h[k++] = *q;
            h[k] = '\0';
            if (strcmp(h, "prompt,gen"))
                return spi_error_set(err, SP_EPARSE, src, line, 1, "", "header \"%s\": expected \"prompt,gen\"", buf);
            cap = -1;   /* a header seen: no second one */
            continue;
        }
        if (cap < 0) cap = 0;
        int64_t v[2];
        const char *q = p;
        for (int f = 0; f < 2; f++) {
            const char *name = f ? "gen" : "prompt";
            if (!csv_int(&q, &v[f]))
                return spi_error_set(err, SP_EPARSE, src, line, (int)(q - buf) + 1, name,
                                     "expected a whole number of tokens in \"%s\"", buf);
            if (!length_ok(v[f]))
                return spi_error_set(err, SP_EINVAL, src, line, (int)(p - buf) + 1, name, "%lld tokens: must be 1 .. %d",
                                     (long long)v[f], SP_RAGGED_MAX_TOKENS);
            if (f == 0) {
                if (*q != ',')
                    return spi_error_set(err, SP_EPARSE, src, line, (int)(q - buf) + 1, "gen",
                                         "expected \"prompt,gen\" in \"%s\"", buf);
                q++;
            }
        }
        if (*q)
            return spi_error_set(err, SP_EPARSE, src, line, (int)(q - buf) + 1, "",
                                 "unexpected \"%s\" after prompt,gen", q);
        if (r->n == SP_RAGGED_MAX_SEQS)
            return spi_error_set(err, SP_EINVAL, src, line, 1, "", "more than %d sequences", SP_RAGGED_MAX_SEQS);
        SP_CHECK(push(r, &cap, v[0], v[1]));
    }
    if (r->n == 0) return spi_error_set(err, SP_EINVAL, src, line, 0, "", "no sequences (one \"prompt,gen\" line each)");
    return SP_OK;
}

/* A length distribution: {"distribution": {"sequences": B, "mix": [{"prompt": P, "gen": G,
 * "share": W}, ...]}} expanded into B sequences (doc/formats.md, "Workload files"): class c
 * gets floor(B·W_c/ΣW) sequences, the remaining ones one each to the classes of the largest
 * remainders (the earlier class on a tie); the sequences are dealt round-robin over the
 * classes in file order, skipping a class once it has all of its, so that every run of
 * consecutive sequences (a replica's, a sequence block's) mixes the classes alike. */
#define SP_RAGGED_MAX_CLASSES 256
static sp_status load_distribution(json_t *d, const char *src, sp_ragged *r, sp_error *err)
{
    char path[128];
    const char *key;
    json_t *val;
    if (!json_is_object(d))
        return spi_error_set(err, SP_EPARSE, src, 0, 0, "/distribution", "expected {\"sequences\": B, \"mix\": [...]}");
    json_object_foreach(d, key, val) {
        if (strcmp(key, "sequences") && strcmp(key, "mix")) {
            snprintf(path, sizeof path, "/distribution/%s", key);
            return spi_error_set(err, SP_EPARSE, src, 0, 0, path, "unknown field \"%s\"", key);
        }
    }
    json_t *nb = json_object_get(d, "sequences"), *mix = json_object_get(d, "mix");
    if (!nb || !json_is_integer(nb))
        return spi_error_set(err, SP_EPARSE, src, 0, 0, "/distribution/sequences", "expected a whole number of sequences");
    json_int_t B = json_integer_value(nb);
    if (B < 1 || B > SP_RAGGED_MAX_SEQS)
        return spi_error_set(err, SP_EINVAL, src, 0, 0, "/distribution/sequences", "%lld sequences (1 .. %d)",
                             (long long)B, SP_RAGGED_MAX_SEQS);
    size_t nc = mix && json_is_array(mix) ? json_array_size(mix) : 0;
    if (nc < 1 || nc > SP_RAGGED_MAX_CLASSES)
        return spi_error_set(err, SP_EPARSE, src, 0, 0, "/distribution/mix",
                             "expected 1 .. %d classes [{\"prompt\": P, \"gen\": G, \"share\": W}, ...]",
                             SP_RAGGED_MAX_CLASSES);
    int64_t len[SP_RAGGED_MAX_CLASSES][2], cnt[SP_RAGGED_MAX_CLASSES];
    double w[SP_RAGGED_MAX_CLASSES], rem[SP_RAGGED_MAX_CLASSES], sum = 0;
    static const char *names[2] = {"prompt", "gen"};
    for (size_t c = 0; c < nc; c++) {
        json_t *e = json_array_get(mix, c);
        if (!json_is_object(e) || json_object_size(e) != 3) {
            snprintf(path, sizeof path, "/distribution/mix/%zu", c);
            return spi_error_set(err, SP_EPARSE, src, 0, 0, path, "expected {\"prompt\": P, \"gen\": G, \"share\": W}");
        }
        for (int f = 0; f < 2; f++) {
            json_t *x = json_object_get(e, names[f]);
            snprintf(path, sizeof path, "/distribution/mix/%zu/%s", c, names[f]);
            if (!x || !json_is_integer(x))
                return spi_error_set(err, SP_EPARSE, src, 0, 0, path, "expected a whole number of tokens");
            len[c][f] = json_integer_value(x);
            if (!length_ok(len[c][f]))
                return spi_error_set(err, SP_EINVAL, src, 0, 0, path, "%lld tokens: must be 1 .. %d",
                                     (long long)len[c][f], SP_RAGGED_MAX_TOKENS);
        }
        json_t *x = json_object_get(e, "share");
        snprintf(path, sizeof path, "/distribution/mix/%zu/share", c);
        if (!x || !json_is_number(x))
            return spi_error_set(err, SP_EPARSE, src, 0, 0, path, "expected a number (a relative weight)");
        w[c] = json_number_value(x);
        if (!(w[c] > 0) || w[c] > 1e12)
            return spi_error_set(err, SP_EINVAL, src, 0, 0, path, "%g: must be > 0 (and at most 1e12)", w[c]);
        sum += w[c];
    }
    /* largest remainders (Hamilton): every class its floor, the rest by remainder, the earlier on a tie */
    int64_t left = B;
    for (size_t c = 0; c < nc; c++) {
        double q = (double)B * w[c] / sum;
        cnt[c] = (int64_t)floor(q);
        rem[c] = q - (double)cnt[c];
        left -= cnt[c];
    }
    while (left > 0) {
        size_t best = 0;
        for (size_t c = 1; c < nc; c++)
            if (rem[c] > rem[best]) best = c;
        cnt[best]++;
        rem[best] = -1;
        left--;
    }
    /* round-robin over the classes with sequences left */
    int64_t cap = 0;
    for (int64_t k = 0; k < B;)
        for (size_t c = 0; c < nc && k < B; c++)
            if (cnt[c] > 0) {
                SP_CHECK(push(r, &cap, len[c][0], len[c][1]));
                cnt[c]--;
                k++;
            }
    return SP_OK;
}

static sp_status load_json(const char *text, const char *src, sp_ragged *r, sp_error *err)
{
    json_error_t je;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!root) return spi_error_set(err, SP_EPARSE, src, je.line, je.column, "", "%s", je.text);
    sp_status st = SP_OK;
    json_t *dist = json_is_object(root) && json_object_size(root) == 1 ? json_object_get(root, "distribution") : NULL;
    if (dist) {
        st = load_distribution(dist, src, r, err);
        json_decref(root);
        return st;
    }
    json_t *seqs = json_is_object(root) ? json_object_get(root, "sequences") : NULL;
    const char *key;
    json_t *val;
    if (!seqs || !json_is_array(seqs)) {
        st = spi_error_set(err, SP_EPARSE, src, 0, 0, "/sequences", "expected {\"sequences\": [{\"prompt\": P, \"gen\": G}, ...]} or {\"distribution\": {...}}");
        goto out;
    }
    json_object_foreach(root, key, val) {
        if (strcmp(key, "sequences")) {
            char path[128];
            snprintf(path, sizeof path, "/%s", key);
            st = spi_error_set(err, SP_EPARSE, src, 0, 0, path, "unknown field \"%s\"", key);
            goto out;
        }
    }
    if (json_array_size(seqs) == 0 || json_array_size(seqs) > SP_RAGGED_MAX_SEQS) {
        st = spi_error_set(err, SP_EINVAL, src, 0, 0, "/sequences", "%zu sequences (1 .. %d)", json_array_size(seqs),
                           SP_RAGGED_MAX_SEQS);
        goto out;
    }
    int64_t cap = 0;
    size_t i;
    json_t *e;
    json_array_foreach(seqs, i, e) {
        char path[128];
        int64_t v[2];
        static const char *names[2] = {"prompt", "gen"};
        if (!json_is_object(e) || json_object_size(e) != 2) {
            snprintf(path, sizeof path, "/sequences/%zu", i);
            st = spi_error_set(err, SP_EPARSE, src, 0, 0, path, "expected {\"prompt\": P, \"gen\": G}");
            goto out;
        }
        for (int f = 0; f < 2; f++) {
            json_t *x = json_object_get(e, names[f]);
            snprintf(path, sizeof path, "/sequences/%zu/%s", i, names[f]);
            if (!x || !json_is_integer(x)) {
                st = spi_error_set(err, SP_EPARSE, src, 0, 0, path, "expected a whole number of tokens");
                goto out;
            }
            v[f] = json_integer_value(x);
            if (!length_ok(v[f])) {
                st = spi_error_set(err, SP_EINVAL, src, 0, 0, path, "%lld tokens: must be 1 .. %d", (long long)v[f],
                                   SP_RAGGED_MAX_TOKENS);
                goto out;
            }
        }
        if ((st = push(r, &cap, v[0], v[1]))) goto out;
    }
out:
    json_decref(root);
    return st;
}

sp_status sp_ragged_loads(const char *text, const char *source, sp_ragged *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    const char *p = text;
    while (*p && isspace((unsigned char)*p)) p++;
    sp_status st = *p == '{' ? load_json(text, source, out, err) : load_csv(text, source, out, err);
    if (st) {
        sp_ragged_free(out);
        return st;
    }
    finish(out);
    return SP_OK;
}

sp_status sp_ragged_load_file(const char *path, sp_ragged *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return spi_error_set(err, SP_EIO, path, 0, 0, "", "cannot open: %s", strerror(errno));
    /* a workload file is small: at most 2^20 lines of two numbers */
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    sp_status st = SP_OK;
    while (buf) {
        if (n + 1 >= cap) {
            if (cap >= (size_t)64 << 20) {
                st = spi_error_set(err, SP_EINVAL, path, 0, 0, "", "larger than 64 MiB");
                break;
            }
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (!buf) return spi_fail(SP_ENOMEM, "workload file %s", path);
    if (!st && rerr) st = spi_error_set(err, SP_EIO, path, 0, 0, "", "read error");
    if (!st && memchr(buf, '\0', n)) st = spi_error_set(err, SP_EPARSE, path, 0, 0, "", "binary data (a NUL byte)");
    if (!st) {
        buf[n] = '\0';
        st = sp_ragged_loads(buf, path, out, err);
    }
    free(buf);
    return st;
}

sp_status sp_ragged_slice(const sp_ragged *r, int64_t first, int64_t n, sp_ragged *out)
{
    memset(out, 0, sizeof *out);
    if (first < 0 || n < 1 || first + n > r->n)
        return spi_fail(SP_EINVAL, "sequences %lld .. %lld of a batch of %lld", (long long)first,
                        (long long)(first + n - 1), (long long)r->n);
    out->n = n;
    out->prompt = r->prompt + first;
    out->gen = r->gen + first;
    out->view = 1;
    finish(out);
    return SP_OK;
}

sp_status sp_ragged_micro(const sp_ragged *r, int replicas, int microbatches, int rep, int mb, sp_ragged *out)
{
    memset(out, 0, sizeof *out);
    if (replicas < 1 || microbatches < 1 || rep < 0 || rep >= replicas || mb < 0 || mb >= microbatches ||
        r->n % ((int64_t)replicas * microbatches))
        return spi_fail(SP_EINVAL, "ragged batch of %lld sequences does not split into %d replicas × %d micro-batches "
                                   "(micro-batch %d of replica %d)",
                        (long long)r->n, replicas, microbatches, mb, rep);
    int64_t per = r->n / ((int64_t)replicas * microbatches);
    SP_CHECK(sp_ragged_slice(r, ((int64_t)rep * microbatches + mb) * per, per, out));
    out->whole = r;
    out->replicas = replicas;
    out->microbatches = microbatches;
    out->rep = rep;
    out->mb = mb;
    return SP_OK;
}

int64_t sp_ragged_peers_max_gen(const sp_ragged *v)
{
    int64_t last = v->max_gen;
    for (int g = 0; v->whole && g < v->replicas; g++) {
        sp_ragged u;
        if (sp_ragged_micro(v->whole, v->replicas, v->microbatches, g, v->mb, &u) == SP_OK && u.max_gen > last)
            last = u.max_gen;
    }
    return last;
}

int64_t sp_ragged_active_count(const sp_ragged *r, int64_t s)
{
    int64_t k = 0;
    for (int64_t b = 0; b < r->n; b++) k += sp_ragged_active(r, b, s);
    return k;
}

int64_t sp_ragged_segment_end(const sp_ragged *r, int64_t s)
{
    int64_t end = 0;
    for (int64_t b = 0; b < r->n; b++)
        if (r->gen[b] >= s && (end == 0 || r->gen[b] < end)) end = r->gen[b];
    return end;
}
