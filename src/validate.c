/* validate.c: validation case files and their statistics (sp_validate.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "sp_validate.h"

void sp_vcases_init(sp_vcases *s) { memset(s, 0, sizeof *s); }

void sp_vcases_free(sp_vcases *s)
{
    free(s->c);
    memset(s, 0, sizeof *s);
}

/* One whitespace-separated field of a line: start and length, or 0. */
static int next_field(const char *line, size_t *pos, size_t *start, size_t *len)
{
    size_t p = *pos;
    while (line[p] == ' ' || line[p] == '\t') p++;
    if (!line[p]) return 0;
    *start = p;
    while (line[p] && line[p] != ' ' && line[p] != '\t') p++;
    *len = p - *start;
    *pos = p;
    return 1;
}

static const char *const field_names[6] = {"model", "chips", "layout", "batch", "prompt", "gen"};

static sp_status parse_line(char *line, const char *source, int lineno, sp_vcase *c, sp_error *err)
{
    size_t pos = 0, st[7], ln[7];
    int nf = 0;
    while (nf < 7 && next_field(line, &pos, &st[nf], &ln[nf])) nf++;
    if (nf == 0) return SP_OK;
    if (nf != 6)
        return spi_error_set(err, SP_EPARSE, source, lineno, nf > 6 ? (int)st[6] + 1 : (int)strlen(line) + 1,
                             nf > 6 ? "" : field_names[nf], "%s: a case is 6 fields: model chips layout batch prompt gen",
                             nf > 6 ? "extra field" : "missing field");
    memset(c, 0, sizeof *c);
    c->line = lineno;
    for (int i = 0; i < 6; i++) line[st[i] + ln[i]] = 0;
    if (ln[0] >= sizeof c->model)
        return spi_error_set(err, SP_EINVAL, source, lineno, (int)st[0] + 1, "model", "name longer than %zu bytes",
                             sizeof c->model - 1);
    memcpy(c->model, line + st[0], ln[0] + 1);
    long long v[6];
    for (int i = 1; i < 6; i++) {
        if (i == 2) continue;
        char *end;
        errno = 0;
        v[i] = strtoll(line + st[i], &end, 10);
        long long lo = i == 5 ? 2 : 1, hi = i == 1 ? 4096 : 1 << 20;
        if (*end || errno || v[i] < lo || v[i] > hi)
            return spi_error_set(err, SP_EINVAL, source, lineno, (int)st[i] + 1, field_names[i],
                                 "\"%s\" must be an integer in [%lld, %lld]", line + st[i], lo, hi);
    }
    if (ln[2] >= sizeof c->layout_text)
        return spi_error_set(err, SP_EINVAL, source, lineno, (int)st[2] + 1, "layout", "longer than %zu bytes",
                             sizeof c->layout_text - 1);
    memcpy(c->layout_text, line + st[2], ln[2] + 1);
    sp_error lerr;
    sp_error_init(&lerr);
    if (sp_layout_parse(c->layout_text, &c->layout, &lerr))
        return spi_error_set(err, SP_EINVAL, source, lineno, (int)st[2] + 1, "layout", "%s", lerr.text);
    c->chips = (int)v[1];
    if (sp_layout_chips(&c->layout) != c->chips)
        return spi_error_set(err, SP_EINVAL, source, lineno, (int)st[1] + 1, "chips",
                             "%d, but the layout uses %lld chips", c->chips, (long long)sp_layout_chips(&c->layout));
    c->batch = v[3];
    c->prompt = v[4];
    c->gen = v[5];
    c->line = lineno;
    return SP_OK;
}

sp_status sp_vcases_loads(const char *text, const char *source, sp_vcases *s, sp_error *err)
{
    if (!source) source = "<string>";
    int lineno = 0;
    const char *p = text;
    while (*p) {
        lineno++;
        size_t n = strcspn(p, "\n");
        char line[1024];
        if (n >= sizeof line)
            return spi_error_set(err, SP_EPARSE, source, lineno, 1, "", "line longer than %zu bytes", sizeof line - 1);
        memcpy(line, p, n);
        line[n] = 0;
        p += n + (p[n] == '\n');
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        line[strcspn(line, "\r")] = 0;
        sp_vcase c;
        c.line = 0;
        SP_CHECK(parse_line(line, source, lineno, &c, err));
        if (!c.line) continue;   /* blank or comment */
        if (s->n == s->cap) {
            int cap = s->cap ? 2 * s->cap : 32;
            sp_vcase *nc = realloc(s->c, (size_t)cap * sizeof *nc);
            if (!nc) return spi_error_set(err, SP_ENOMEM, source, lineno, 0, "", "out of memory");
            s->c = nc;
            s->cap = cap;
        }
        s->c[s->n++] = c;
    }
    return SP_OK;
}

sp_status sp_vcases_load_file(const char *path, sp_vcases *s, sp_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return spi_error_set(err, SP_EIO, path, 0, 0, "", "cannot open file: %s", strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    sp_status st = SP_OK;
    while (buf) {
        size_t r = fread(buf + n, 1, cap - 1 - n, f);
        n += r;
        if (n < cap - 1) break;
        if (cap > (1u << 26)) {
            st = spi_error_set(err, SP_EINVAL, path, 0, 0, "", "larger than 64 MiB");
            break;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) break;
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return spi_error_set(err, SP_ENOMEM, path, 0, 0, "", "out of memory");
    if (!st && bad) st = spi_error_set(err, SP_EIO, path, 0, 0, "", "read error");
    if (!st) {
        buf[n] = 0;
        st = sp_vcases_loads(buf, path, s, err);
    }
    free(buf);
    return st;
}

double sp_kendall_tau(int n, const double *x, const double *y)
{
    double conc = 0, disc = 0, tx = 0, ty = 0, n0 = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            double dx = x[i] - x[j], dy = y[i] - y[j];
            n0++;
            if (dx == 0) tx++;
            if (dy == 0) ty++;
            if (dx == 0 || dy == 0) continue;
            if ((dx > 0) == (dy > 0)) conc++;
            else disc++;
        }
    double den = sqrt((n0 - tx) * (n0 - ty));
    return den > 0 ? (conc - disc) / den : NAN;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sp_abs_median(int n, const double *v)
{
    if (n <= 0) return NAN;
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) return NAN;
    for (int i = 0; i < n; i++) s[i] = fabs(v[i]);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

double sp_abs_max(int n, const double *v)
{
    if (n <= 0) return NAN;
    double m = 0;
    for (int i = 0; i < n; i++)
        if (fabs(v[i]) > m) m = fabs(v[i]);
    return m;
}
