/* measure.c: measurement sets from CSV (sp_measure.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sp_measure.h"
#include "spi_common.h"

static const char *const metric_names[SP_METRIC_COUNT] = {"latency_ms", "prefill_ms", "decode_step_ms",
                                                          "prefill_mfu"};

const char *sp_metric_name(sp_metric m)
{
    return (unsigned)m < SP_METRIC_COUNT ? metric_names[m] : "?";
}

sp_status sp_metric_parse(const char *s, sp_metric *out)
{
    for (int i = 0; i < SP_METRIC_COUNT; i++)
        if (!strcmp(s, metric_names[i])) {
            *out = (sp_metric)i;
            return SP_OK;
        }
    return spi_fail(SP_EINVAL, "unknown metric '%s' (latency_ms, prefill_ms, decode_step_ms, prefill_mfu)", s);
}

void sp_measure_set_init(sp_measure_set *s)
{
    memset(s, 0, sizeof *s);
}

void sp_measure_set_free(sp_measure_set *s)
{
    free(s->rows);
    memset(s, 0, sizeof *s);
}

enum { COL_MODEL, COL_HW, COL_CHIPS, COL_LAYOUT, COL_BATCH, COL_PROMPT, COL_GEN, COL_METRIC, COL_VALUE,
       COL_SOURCE, COL_COUNT };
static const char *const col_names[COL_COUNT] = {"model", "hw", "chips", "layout", "batch",
                                                 "prompt", "gen", "metric", "value", "source"};

#define FIELD_MAX 256

/* Splits one line (no newline) into COL_COUNT fields with RFC 4180 quoting.
 * cols[i] gets each field's 1-based start column.  Returns the number of
 * fields, or -1 with *bad_col set on a quoting error or an overlong field. */
static int split_line(const char *line, char fields[][FIELD_MAX], int cols[], int max, int *bad_col)
{
    int nf = 0;
    const char *p = line;
    for (;;) {
        if (nf == max) {
            *bad_col = (int)(p - line) + 1;
            return max + 1;   /* too many */
        }
        cols[nf] = (int)(p - line) + 1;
        size_t len = 0;
        char *f = fields[nf];
        if (*p == '"') {
            p++;
            for (;;) {
                if (*p == '\0') {
                    *bad_col = cols[nf];
                    return -1;   /* unterminated quote */
                }
                if (*p == '"') {
                    if (p[1] == '"') {
                        p++;
                    } else {
                        p++;
                        break;
                    }
                }
                if (len + 1 >= FIELD_MAX) {
                    *bad_col = cols[nf];
                    return -1;
                }
                f[len++] = *p++;
            }
            if (*p != ',' && *p != '\0') {
                *bad_col = (int)(p - line) + 1;
                return -1;   /* text after the closing quote */
            }
        } else {
            while (*p != ',' && *p != '\0') {
                if (*p == '"' || len + 1 >= FIELD_MAX) {
                    *bad_col = (int)(p - line) + 1;
                    return -1;
                }
                f[len++] = *p++;
            }
        }
        f[len] = '\0';
        nf++;
        if (*p == '\0') return nf;
        p++;   /* the comma */
    }
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* A relative path (one with a '/') is resolved against the CSV's folder;
 * a bare name is a bundled description. */
static int resolve(const char *dir, const char *name, char *out, size_t size)
{
    int n;
    if (strchr(name, '/') && name[0] != '/' && dir[0])
        n = snprintf(out, size, "%s/%s", dir, name);
    else
        n = snprintf(out, size, "%s", name);
    return n >= 0 && (size_t)n < size;
}

sp_status sp_measure_load_file(const char *path, sp_measure_set *s, sp_error *err)
{
    FILE *fp = fopen(path, "r");
    if (!fp) return spi_error_set(err, SP_EIO, path, 0, 0, "", "cannot open: %s", strerror(errno));
    char dir[256] = "";
    const char *slash = strrchr(path, '/');
    if (slash && (size_t)(slash - path) < sizeof dir) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    }
    int n0 = s->n;   /* rows before this file: restored on failure */
    sp_status st = SP_OK;
    char line[4096];
    char fields[COL_COUNT + 1][FIELD_MAX];
    int cols[COL_COUNT + 1];
    int lineno = 0, header = 0;
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            st = spi_error_set(err, SP_EPARSE, path, lineno, 1, "", "line longer than %zu bytes", sizeof line - 2);
            goto out;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0 || line[0] == '#') continue;
        int bad = 0;
        int nf = split_line(line, fields, cols, COL_COUNT, &bad);
        if (nf < 0) {
            st = spi_error_set(err, SP_EPARSE, path, lineno, bad, "", "malformed field (quotes, or over %d bytes)",
                               FIELD_MAX - 1);
            goto out;
        }
        if (nf != COL_COUNT) {
            st = spi_error_set(err, SP_EPARSE, path, lineno, nf > COL_COUNT ? bad : 1, "",
                               "%d fields, expected %d (model,hw,chips,layout,batch,prompt,gen,metric,value,source)",
                               nf > COL_COUNT ? COL_COUNT + 1 : nf, COL_COUNT);
            goto out;
        }
        if (!header) {
            for (int c = 0; c < COL_COUNT; c++)
                if (strcmp(fields[c], col_names[c])) {
                    st = spi_error_set(err, SP_EPARSE, path, lineno, cols[c], col_names[c],
                                       "header column %d is '%s', expected '%s'", c + 1, fields[c], col_names[c]);
                    goto out;
                }
            header = 1;
            continue;
        }
        sp_measure r;
        memset(&r, 0, sizeof r);
        const char *what = NULL;
        int c = 0;
        if (!fields[COL_MODEL][0] || !resolve(dir, fields[COL_MODEL], r.model, sizeof r.model))
            what = "a model name or path", c = COL_MODEL;
        else if (!fields[COL_HW][0] || !resolve(dir, fields[COL_HW], r.hw, sizeof r.hw))
            what = "a hardware name or path", c = COL_HW;
        else if (!parse_i64(fields[COL_CHIPS], 1, 1 << 20, &r.chips))
            what = "an integer 1..1048576", c = COL_CHIPS;
        else if (!fields[COL_LAYOUT][0])
            what = "a layout", c = COL_LAYOUT;
        else if (!parse_i64(fields[COL_BATCH], 1, 1 << 24, &r.batch))
            what = "an integer 1..16777216", c = COL_BATCH;
        else if (!parse_i64(fields[COL_PROMPT], 0, 1 << 24, &r.prompt))
            what = "an integer 0..16777216", c = COL_PROMPT;
        else if (!parse_i64(fields[COL_GEN], 0, 1 << 24, &r.gen))
            what = "an integer 0..16777216", c = COL_GEN;
        else if (sp_metric_parse(fields[COL_METRIC], &r.metric) != SP_OK)
            what = "latency_ms, prefill_ms, decode_step_ms or prefill_mfu", c = COL_METRIC;
        if (!what) {
            char *end;
            errno = 0;
            r.value = strtod(fields[COL_VALUE], &end);
            if (errno || end == fields[COL_VALUE] || *end || !isfinite(r.value) || r.value <= 0 ||
                (r.metric == SP_METRIC_PREFILL_MFU && r.value > 1))
                what = r.metric == SP_METRIC_PREFILL_MFU ? "a fraction in (0, 1]" : "a finite number > 0",
                c = COL_VALUE;
        }
        if (!what) {
            int needs_prompt = r.metric == SP_METRIC_PREFILL_MS || r.metric == SP_METRIC_PREFILL_MFU;
            if (needs_prompt && r.prompt == 0) what = "prompt > 0 for a prefill metric", c = COL_PROMPT;
            else if (r.metric == SP_METRIC_DECODE_STEP_MS && r.gen == 0) what = "gen > 0 for a decode metric", c = COL_GEN;
            else if (r.prompt + r.gen == 0) what = "some tokens (prompt + gen > 0)", c = COL_GEN;
        }
        if (!what && (strlen(fields[COL_LAYOUT]) >= sizeof r.layout || strlen(fields[COL_SOURCE]) >= sizeof r.source))
            what = "a shorter text", c = strlen(fields[COL_SOURCE]) >= sizeof r.source ? COL_SOURCE : COL_LAYOUT;
        if (!what && !fields[COL_SOURCE][0]) what = "a source key", c = COL_SOURCE;
        if (what) {
            st = spi_error_set(err, SP_EPARSE, path, lineno, cols[c], col_names[c], "'%s': expected %s",
                               fields[c], what);
            goto out;
        }
        strcpy(r.layout, fields[COL_LAYOUT]);
        strcpy(r.source, fields[COL_SOURCE]);
        snprintf(r.file, sizeof r.file, "%s", path);
        r.line = lineno;
        if (s->n == s->cap) {
            int cap = s->cap ? 2 * s->cap : 64;
            sp_measure *rows = realloc(s->rows, (size_t)cap * sizeof *rows);
            if (!rows) {
                st = spi_error_set(err, SP_ENOMEM, path, lineno, 0, "", "out of memory");
                goto out;
            }
            s->rows = rows;
            s->cap = cap;
        }
        s->rows[s->n++] = r;
    }
    if (ferror(fp)) st = spi_error_set(err, SP_EIO, path, lineno, 0, "", "read error");
    else if (!header) st = spi_error_set(err, SP_EPARSE, path, lineno, 0, "", "no header line");
out:
    fclose(fp);
    if (st != SP_OK) s->n = n0;
    return st;
}
