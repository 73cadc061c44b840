/* jsonq.c: reads one JSON document and prints the values at given paths, so
 * the shell tests can check shardplan's JSON without Python.
 *
 *   jsonq [-l | -t | -k | -n] [-w FIELD=VALUE] FILE|- PATH [FIELD...]
 *
 * PATH is a JSON Pointer ("" is the document, "/chosen/costs/total_s",
 * "/tokens/0"; ~1 stands for '/', ~0 for '~') in which a segment "*" matches
 * every element of an array or every member of an object.  Each match is
 * printed on its own line; with FIELDs (pointers relative to the match) the
 * line holds the FIELDs' values instead, tab-separated.
 *
 * A value prints as: a string raw (no quotes), an integer in decimal, a real
 * with %.17g (it reads back to the same double), true/false/null as words,
 * an array or object as compact JSON with its members sorted by name, so that
 * two equal values print alike whatever their members' order.
 *   -l  print the length of each value (elements of an array, members of an object)
 *   -t  print the type of each value: object array string integer real true false null
 *   -k  print the member names of each match, one per line (no FIELDs)
 *   -n  numbers only: a printed value that is not an integer or real is an
 *       error (so a comparison in awk cannot quietly compare text)
 *   -w FIELD=VALUE  keep only the matches whose FIELD prints as VALUE
 *
 * Exit 0; 1 when a path is missing or a value has the wrong type (the message
 * names the full path, e.g. "/tokens/3/x: no such member"); 2 on bad usage or
 * a file that does not parse. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

enum mode { PRINT_VALUE, PRINT_LENGTH, PRINT_TYPE, PRINT_KEYS, PRINT_NUMBER };

static const char *file_name;

/* one segment of a pointer, unescaped: (seg, len) from p up to the next '/' */
static const char *next_segment(const char *p, char *seg, size_t cap)
{
    size_t n = 0;
    for (; *p && *p != '/'; p++) {
        char c = *p;
        if (c == '~' && (p[1] == '0' || p[1] == '1')) c = *++p == '0' ? '~' : '/';
        if (n + 1 < cap) seg[n++] = c;
    }
    seg[n] = '\0';
    return p;
}

/* the child of v named by seg (an array index in decimal, or a member name);
 * NULL with why set when there is none */
static json_t *child(json_t *v, const char *seg, const char **why)
{
    if (json_is_object(v)) {
        json_t *c = json_object_get(v, seg);
        if (!c) *why = "no such member";
        return c;
    }
    if (json_is_array(v)) {
        char *end;
        errno = 0;
        unsigned long long i = strtoull(seg, &end, 10);
        if (!*seg || *end || errno || seg[0] == '-' || (seg[0] == '0' && seg[1])) {
            *why = "not an array index";
            return NULL;
        }
        if (i >= json_array_size(v)) {
            *why = "index out of range";
            return NULL;
        }
        return json_array_get(v, (size_t)i);
    }
    *why = "not an array or object";
    return NULL;
}

static int missing(const char *where, const char *why)
{
    fprintf(stderr, "jsonq: %s: %s: %s\n", file_name, *where ? where : "(document)", why);
    return 1;
}

/* the value at a pointer without wildcards, relative to v; where (the full
 * path so far, cap bytes) is extended as it descends, for the message */
static json_t *resolve(json_t *v, const char *ptr, char *where, size_t cap)
{
    char seg[256];
    const char *p = ptr;
    while (*p == '/') {
        const char *q = next_segment(p + 1, seg, sizeof seg);
        size_t w = strlen(where);
        snprintf(where + w, cap - w, "%.*s", (int)(q - p), p);
        const char *why = NULL;
        if (!strcmp(seg, "*")) why = "a wildcard is allowed only in PATH";
        else v = child(v, seg, &why);
        if (why) {
            missing(where, why);
            return NULL;
        }
        p = q;
    }
    if (*p) {
        missing(ptr, "a pointer starts with '/'");
        return NULL;
    }
    return v;
}

/* a scalar or container as jsonq prints it; a new string: caller frees */
static char *format(json_t *v)
{
    char *s = NULL;
    switch (json_typeof(v)) {
    case JSON_STRING: return strdup(json_string_value(v));
    case JSON_INTEGER:
        if (asprintf(&s, "%" JSON_INTEGER_FORMAT, json_integer_value(v)) < 0) s = NULL;
        return s;
    case JSON_REAL:
        if (asprintf(&s, "%.17g", json_real_value(v)) < 0) s = NULL;
        return s;
    case JSON_TRUE: return strdup("true");
    case JSON_FALSE: return strdup("false");
    case JSON_NULL: return strdup("null");
    default: return json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    }
}

static int print_value(json_t *v, enum mode m, const char *where)
{
    static const char *type[] = {"object", "array", "string", "integer", "real", "true", "false", "null"};
    if (m == PRINT_LENGTH) {
        if (json_is_array(v)) printf("%zu", json_array_size(v));
        else if (json_is_object(v)) printf("%zu", json_object_size(v));
        else return missing(where, "not an array or object");
    } else if (m == PRINT_NUMBER && !json_is_number(v)) {
        return missing(where, "not a number");
    } else if (m == PRINT_TYPE) {
        fputs(type[json_typeof(v)], stdout);
    } else {
        char *s = format(v);
        if (!s) return missing(where, "out of memory");
        fputs(s, stdout);
        free(s);
    }
    return 0;
}

typedef struct query {
    enum mode mode;
    const char *where_field, *where_value; /* -w, or NULL */
    char **fields;
    int nfields;
} query;

/* one match of PATH at where: filter, then print its line */
static int emit(const query *q, json_t *v, const char *where)
{
    char w[1024];
    if (q->where_field) {
        snprintf(w, sizeof w, "%s", where);
        json_t *f = resolve(v, q->where_field, w, sizeof w);
        if (!f) return 1;
        char *s = format(f);
        if (!s) return missing(w, "out of memory");
        int keep = !strcmp(s, q->where_value);
        free(s);
        if (!keep) return 0;
    }
    if (q->mode == PRINT_KEYS) {
        if (!json_is_object(v)) return missing(where, "not an object");
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) printf("%s\n", k);
        return 0;
    }
    if (!q->nfields) {
        if (print_value(v, q->mode, where)) return 1;
        putchar('\n');
        return 0;
    }
    for (int i = 0; i < q->nfields; i++) {
        snprintf(w, sizeof w, "%s", where);
        json_t *f = resolve(v, q->fields[i], w, sizeof w);
        if (!f || print_value(f, q->mode, w)) return 1;
        putchar(i + 1 < q->nfields ? '\t' : '\n');
    }
    return 0;
}

/* walk PATH from v; where holds the concrete path of v */
static int walk(const query *q, json_t *v, const char *p, char *where, size_t cap)
{
    if (!*p) return emit(q, v, where);
    if (*p != '/') return missing(p, "a pointer starts with '/'");
    char seg[256];
    const char *next = next_segment(p + 1, seg, sizeof seg);
    size_t w = strlen(where);
    if (strcmp(seg, "*")) {
        snprintf(where + w, cap - w, "%.*s", (int)(next - p), p);
        const char *why = NULL;
        json_t *c = child(v, seg, &why);
        int rc = c ? walk(q, c, next, where, cap) : missing(where, why);
        where[w] = '\0';
        return rc;
    }
    int rc = 0;
    if (json_is_array(v)) {
        size_t i;
        json_t *c;
        json_array_foreach(v, i, c) {
            snprintf(where + w, cap - w, "/%zu", i);
            rc |= walk(q, c, next, where, cap);
            where[w] = '\0';
        }
    } else if (json_is_object(v)) {
        const char *k;
        json_t *c;
        json_object_foreach(v, k, c) {
            snprintf(where + w, cap - w, "/%s", k);
            rc |= walk(q, c, next, where, cap);
            where[w] = '\0';
        }
    } else {
        snprintf(where + w, cap - w, "/*");
        rc = missing(where, "not an array or object");
        where[w] = '\0';
    }
    return rc;
}

static int usage(void)
{
    fputs("usage: jsonq [-l | -t | -k | -n] [-w FIELD=VALUE] FILE|- PATH [FIELD...]\n", stderr);
    return 2;
}

int main(int argc, char **argv)
{
    query q = {PRINT_VALUE, NULL, NULL, NULL, 0};
    int a = 1;
    for (; a < argc && argv[a][0] == '-' && argv[a][1]; a++) {
        if (!strcmp(argv[a], "-l")) q.mode = PRINT_LENGTH;
        else if (!strcmp(argv[a], "-t")) q.mode = PRINT_TYPE;
        else if (!strcmp(argv[a], "-k")) q.mode = PRINT_KEYS;
        else if (!strcmp(argv[a], "-n")) q.mode = PRINT_NUMBER;
        else if (!strcmp(argv[a], "-w") && a + 1 < argc && strchr(argv[a + 1], '=')) {
            static char buf[1024];
            snprintf(buf, sizeof buf, "%s", argv[++a]);
            char *eq = strchr(buf, '=');
            *eq = '\0';
            q.where_field = buf;
            q.where_value = eq + 1;
        } else return usage();
    }
    if (argc - a < 2) return usage();
    file_name = argv[a];
    q.fields = argv + a + 2;
    q.nfields = argc - a - 2;
    if (q.mode == PRINT_KEYS && q.nfields) return usage();
    json_error_t err;
    json_t *doc = !strcmp(file_name, "-") ? json_loadf(stdin, JSON_DECODE_ANY, &err)
                                          : json_load_file(file_name, JSON_DECODE_ANY, &err);
    if (!doc) {
        fprintf(stderr, "jsonq: %s:%d:%d: %s\n", file_name, err.line, err.column, err.text);
        return 2;
    }
    char where[1024] = "";
    int rc = walk(&q, doc, argv[a + 1], where, sizeof where);
    json_decref(doc);
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "jsonq: write error\n");
        return 2;
    }
    return rc;
}
