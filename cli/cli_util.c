/* cli_util.c: exit codes, error printing, tables, JSON and number formatting;
 * MPI start-up for the verbs that run a chip per rank. */
#include "config.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/sp_cuda.h"
#endif
#ifdef HAVE_MPI
#include <mpi.h>
#endif

int cli_mpi_init(const char *verb, int *rank, int *size)
{
#ifdef HAVE_MPI
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        cli_errorf("%s --backend mpi: MPI_Init_thread failed", verb);
        return CLI_EXIT_INTERNAL;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return CLI_EXIT_OK;
#else
    *rank = 0;
    *size = 1;
    return cli_usage(verb, "--backend mpi: this build has no MPI (configure --with-mpi)");
#endif
}

int cli_exit_for(sp_status s)
{
    switch (s) {
    case SP_OK: return CLI_EXIT_OK;
    case SP_EINVAL: case SP_EPARSE: case SP_EIO:
    case SP_ENOTSUP: return CLI_EXIT_USAGE;   /* a request for what is not implemented or not built is refused, by name */
    case SP_EINFEASIBLE:
    case SP_ENOMEM: return CLI_EXIT_INFEASIBLE;   /* the request needs more memory than could be had */
    default: return CLI_EXIT_INTERNAL;
    }
}

int cli_load_workload(const char *path, sp_ragged *out)
{
    sp_error err;
    sp_error_init(&err);
    sp_status st = sp_ragged_load_file(path, out, &err);
    if (st == SP_OK) return CLI_EXIT_OK;
    cli_report(st, &err);
    return CLI_EXIT_USAGE;   /* bad input, whatever the reading failed on */
}

json_t *cli_workload_json(const sp_ragged *r)
{
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "sequences", (json_int_t)r->n, "prompt_tokens",
                     (json_int_t)r->sum_prompt, "gen_tokens", (json_int_t)r->sum_gen, "max_prompt",
                     (json_int_t)r->max_prompt, "max_gen", (json_int_t)r->max_gen, "max_context",
                     (json_int_t)r->max_context);
}

int cli_report(sp_status s, const sp_error *err)
{
    char buf[1024];
    const char *msg;
    if (err && (err->text[0] || err->source[0])) msg = sp_error_format(err, buf, sizeof buf);
    else if (sp_last_error()[0]) msg = sp_last_error();
    else msg = sp_status_str(s);
    fprintf(stderr, "shardplan: %s\n", msg);
    return cli_exit_for(s);
}

void cli_errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("shardplan: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_cuda_check(const char *verb)
{
#ifdef HAVE_CUDA
    char why[256] = "";
    if (sp_cuda_available(why, sizeof why)) return CLI_EXIT_OK;
    cli_errorf("%s --backend cuda: no GPU is visible (%s); use --backend threads or mpi to run on CPUs", verb, why);
#else
    cli_errorf("%s --backend cuda: this build has no CUDA (reconfigure --with-cuda=DIR; needs nvcc, cuBLAS, NCCL and "
               "MPI); use --backend threads or mpi to run on CPUs", verb);
#endif
    return CLI_EXIT_USAGE;
}

int cli_usage(const char *verb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("shardplan: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fprintf(stderr, "Try 'shardplan %s%s--help'.\n", verb ? verb : "", verb ? " " : "");
    return CLI_EXIT_USAGE;
}

int cli_parse_long(const char *verb, const char *opt, const char *s, long long min, long long max, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!s[0] || *end || errno || v < min || v > max) {
        cli_usage(verb, "%s: expected an integer in [%lld, %lld], got \"%s\"", opt, min, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---- tables ---- */
struct cli_table {
    int ncols, nrows, cap;
    unsigned left;  /* bit c: column c always left-aligned */
    char **cells;   /* (nrows + 1) x ncols, row 0 is the header */
};

static char *xstrdup(const char *s)
{
    char *p = strdup(s ? s : "");
    if (!p) { fputs("shardplan: out of memory\n", stderr); exit(CLI_EXIT_INTERNAL); }
    return p;
}

static void table_push(cli_table *t, const char *const *cells)
{
    if (t->nrows + 1 > t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        char **c = realloc(t->cells, (size_t)cap * (size_t)t->ncols * sizeof *c);
        if (!c) { fputs("shardplan: out of memory\n", stderr); exit(CLI_EXIT_INTERNAL); }
        t->cells = c, t->cap = cap;
    }
    for (int i = 0; i < t->ncols; i++) t->cells[t->nrows * t->ncols + i] = xstrdup(cells[i]);
    t->nrows++;
}

cli_table *cli_table_new(int ncols, const char *const *header)
{
    cli_table *t = calloc(1, sizeof *t);
    if (!t) { fputs("shardplan: out of memory\n", stderr); exit(CLI_EXIT_INTERNAL); }
    t->ncols = ncols;
    table_push(t, header);
    return t;
}

void cli_table_add(cli_table *t, const char *const *cells) { table_push(t, cells); }

void cli_table_left(cli_table *t, int col)
{
    if (col >= 0 && col < 32) t->left |= 1u << col;
}

static int numeric(const char *s)
{
    if (*s == '-' || *s == '+') s++;
    return isdigit((unsigned char)*s);
}

void cli_table_print(const cli_table *t, FILE *f)
{
    int w[32] = {0};
    int nc = t->ncols < 32 ? t->ncols : 32;
    for (int r = 0; r < t->nrows; r++)
        for (int c = 0; c < nc; c++) {
            int l = (int)strlen(t->cells[r * t->ncols + c]);
            if (l > w[c]) w[c] = l;
        }
    for (int r = 0; r < t->nrows; r++) {
        for (int c = 0; c < nc; c++) {
            const char *s = t->cells[r * t->ncols + c];
            const char *sep = c + 1 < nc ? "  " : "";
            if (r > 0 && !(t->left >> c & 1u) && numeric(s)) fprintf(f, "%*s%s", w[c], s, sep);
            else if (c + 1 < nc) fprintf(f, "%-*s%s", w[c], s, sep);
            else fputs(s, f);
        }
        fputc('\n', f);
    }
}

void cli_table_free(cli_table *t)
{
    if (!t) return;
    for (int i = 0; i < t->nrows * t->ncols; i++) free(t->cells[i]);
    free(t->cells);
    free(t);
}

int cli_print_json(const json_t *j, FILE *f)
{
    int rc = json_dumpf(j, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    fputc('\n', f);
    return rc;
}

/* ---- numbers ---- */
/* Three significant figures at most, trailing zeros dropped: 540.35B keeps two decimals. */
static char *scaled(double x, const double *scale, const char *const *unit, int n, const char *sep,
                    char *buf, size_t size)
{
    int i = 0;
    double a = fabs(x);
    while (i + 1 < n && a >= scale[i + 1]) i++;
    double v = x / scale[i];
    snprintf(buf, size, "%.2f", v);
    /* drop trailing zeros and a bare point */
    char *dot = strchr(buf, '.');
    if (dot) {
        char *e = buf + strlen(buf) - 1;
        while (e > dot && *e == '0') *e-- = '\0';
        if (e == dot) *e = '\0';
    }
    size_t l = strlen(buf);
    snprintf(buf + l, size - l, "%s%s", unit[i][0] ? sep : "", unit[i]);
    return buf;
}

char *cli_fmt_count(double x, char *buf, size_t n)
{
    static const double s[] = {1, 1e3, 1e6, 1e9, 1e12};
    static const char *const u[] = {"", "K", "M", "B", "T"};
    return scaled(x, s, u, 5, "", buf, n);
}

char *cli_fmt_bytes(double x, char *buf, size_t n)
{
    static const double s[] = {1, 1024.0, 1048576.0, 1073741824.0, 1099511627776.0};
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    return scaled(x, s, u, 5, " ", buf, n);
}

char *cli_fmt_seconds(double x, char *buf, size_t n)
{
    static const double s[] = {1e-9, 1e-6, 1e-3, 1};
    static const char *const u[] = {"ns", "us", "ms", "s"};
    if (x == 0) { snprintf(buf, n, "0 s"); return buf; }
    return scaled(x, s, u, 4, " ", buf, n);
}

char *cli_fmt_flops(double x, char *buf, size_t n)
{
    static const double s[] = {1, 1e3, 1e6, 1e9, 1e12, 1e15};
    static const char *const u[] = {"FLOP/s", "KFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s"};
    return scaled(x, s, u, 6, " ", buf, n);
}

char *cli_fmt_rate(double x, char *buf, size_t n)
{
    static const double s[] = {1, 1e3, 1e6, 1e9, 1e12};
    static const char *const u[] = {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"};
    return scaled(x, s, u, 5, " ", buf, n);
}
