/* golden_cmp.c: compares shardplan's outputs with the golden outputs of the
 * independent PyTorch implementation (tests/ref/gen_golden.py), without Python.
 *
 *   golden_cmp ref DIR TOL      the C single-chip reference (sp_ref) on DIR's
 *                               checkpoint and prompt_ids.txt, greedy: tokens
 *                               equal golden_tokens.txt, every step's logits
 *                               within TOL of golden_logits.npy (steps, B, V)
 *   golden_cmp npy A B TOL      two float32 .npy files: same shape, max |a-b| <= TOL
 *   golden_cmp rel A B TOL      two float32 .npy files: same shape,
 *                               max |a-b| / max |a| <= TOL (another backend's
 *                               logits, summed in another order)
 *
 * Prints the largest difference; exit 0 when within TOL, 1 otherwise, 2 on
 * unreadable input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sp_model.h"
#include "exec/sp_ref.h"
#include "exec/sp_weights.h"

typedef struct npy {
    int nd;
    long long shape[4];
    long long n;
    float *data;
} npy;

/* float32 little-endian C-order .npy, version 1 or 2 */
static int npy_read(const char *path, npy *a)
{
    memset(a, 0, sizeof *a);
    FILE *f = fopen(path, "rb");
    unsigned char pre[12];
    if (!f || fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) goto bad;
    size_t hl = pre[8] | (size_t)pre[9] << 8;
    if (pre[6] == 2) {
        if (fread(pre + 10, 1, 2, f) != 2) goto bad;
        hl |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    }
    char hdr[4096];
    if (hl >= sizeof hdr || fread(hdr, 1, hl, f) != hl) goto bad;
    hdr[hl] = '\0';
    if (!strstr(hdr, "'<f4'") || !strstr(hdr, "'fortran_order': False")) goto bad;
    const char *s = strstr(hdr, "'shape': (");
    if (!s) goto bad;
    s += 10;
    a->n = 1;
    while (*s && *s != ')' && a->nd < 4) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s) break;
        a->shape[a->nd++] = v;
        a->n *= v;
        s = end;
        while (*s == ',' || *s == ' ') s++;
    }
    a->data = malloc((size_t)a->n * sizeof *a->data);
    if (!a->data || fread(a->data, sizeof *a->data, (size_t)a->n, f) != (size_t)a->n) goto bad;
    fclose(f);
    return 0;
bad:
    fprintf(stderr, "golden_cmp: %s: not a float32 C-order .npy\n", path);
    if (f) fclose(f);
    free(a->data);
    return 2;
}

/* whitespace-separated ids, one sequence per line: rows and columns counted */
static int read_ids(const char *path, int32_t *out, long long cap, long long *rows, long long *cols)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "golden_cmp: cannot open %s\n", path);
        return 2;
    }
    char line[4096];
    long long n = 0;
    *rows = *cols = 0;
    while (fgets(line, sizeof line, f)) {
        long long c = 0;
        for (char *p = strtok(line, " \t\r\n"); p; p = strtok(NULL, " \t\r\n")) {
            if (n >= cap) break;
            out[n++] = (int32_t)atol(p);
            c++;
        }
        if (c) (*rows)++, *cols = c;
    }
    fclose(f);
    return 0;
}

static double maxdiff(const float *a, const float *b, long long n)
{
    double m = 0;
    for (long long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;   /* NaN counts as the largest */
    }
    return m;
}

/* max |a-b|, or with relative max |a-b| / max |a| (another backend's logits) */
static int cmp_npy(const char *pa, const char *pb, double tol, int relative)
{
    npy a, b;
    if (npy_read(pa, &a) || npy_read(pb, &b)) return 2;
    int same = a.nd == b.nd;
    for (int d = 0; same && d < a.nd; d++) same = a.shape[d] == b.shape[d];
    double m = same ? maxdiff(a.data, b.data, a.n) : INFINITY;
    if (relative) {
        double scale = 1e-30;
        for (long long i = 0; i < a.n; i++)
            if (!(fabs((double)a.data[i]) <= scale)) scale = fabs((double)a.data[i]); /* NaN: the largest */
        m /= scale;
        printf("%s: %.2e relative difference (tolerance %g)%s\n", pb, m, tol, same ? "" : " (shapes differ)");
    } else {
        printf("%s: max |diff| %.3g%s\n", pa, m, same ? "" : " (shapes differ)");
    }
    free(a.data);
    free(b.data);
    return m <= tol ? 0 : 1;
}

static int cmp_ref(const char *dir, double tol)
{
    char path[1024];
    sp_model m;
    sp_error err;
    char buf[1024];
    sp_error_init(&err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (sp_model_load_file(path, 0, &m, &err) || sp_model_check_run(&m, 0, &err)) {
        fprintf(stderr, "golden_cmp: %s\n", sp_error_format(&err, buf, sizeof buf));
        return 2;
    }
    npy g;
    snprintf(path, sizeof path, "%s/golden_logits.npy", dir);
    if (npy_read(path, &g)) return 2;
    long long G = g.shape[0], B = g.shape[1], V = g.shape[2], P, rows, cols;
    int32_t prompt[4096], want[4096];
    snprintf(path, sizeof path, "%s/prompt_ids.txt", dir);
    if (read_ids(path, prompt, 4096, &rows, &P) || rows != B) return 2;
    snprintf(path, sizeof path, "%s/golden_tokens.txt", dir);
    if (read_ids(path, want, 4096, &rows, &cols) || rows != B || cols != G || V != m.vocab) return 2;
    sp_weights w;
    if (sp_weights_load_hf(dir, &m, &w, &err)) {
        fprintf(stderr, "golden_cmp: %s\n", sp_error_format(&err, buf, sizeof buf));
        return 2;
    }
    sp_ref *r = NULL;
    float *lg = malloc((size_t)(B * V) * sizeof *lg);
    int32_t cur[4096];
    int rc = 0;
    double worst = 0;
    if (!lg || sp_ref_build(&m, &w, B, P + G, &r)) rc = 2;
    for (long long s = 0; !rc && s < G; s++) {
        if (s == 0 ? sp_ref_forward(r, prompt, P, lg, SP_REF_LAST) : sp_ref_forward(r, cur, 1, lg, SP_REF_LAST)) {
            rc = 2;
            break;
        }
        double d = maxdiff(lg, g.data + s * B * V, B * V);
        if (d > worst) worst = d;
        for (long long b = 0; b < B; b++) {
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++)
                if (lg[b * V + v] > lg[b * V + best]) best = v;
            cur[b] = (int32_t)best;
            if (cur[b] != want[b * G + s]) {
                printf("%s: sequence %lld step %lld: token %d, golden %d\n", dir, b, s, cur[b], want[b * G + s]);
                rc = 1;
            }
        }
    }
    printf("%s: C reference, max |logit diff| %.3g over %lld steps\n", dir, worst, G);
    if (!rc && !(worst <= tol)) rc = 1;
    sp_ref_free(r);
    sp_weights_free(&w);
    free(lg);
    free(g.data);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "ref")) return cmp_ref(argv[2], atof(argv[3]));
    if (argc == 5 && !strcmp(argv[1], "npy")) return cmp_npy(argv[2], argv[3], atof(argv[4]), 0);
    if (argc == 5 && !strcmp(argv[1], "rel")) return cmp_npy(argv[2], argv[3], atof(argv[4]), 1);
    fprintf(stderr, "usage: golden_cmp ref DIR TOL | golden_cmp npy|rel A.npy B.npy TOL\n");
    return 2;
}
