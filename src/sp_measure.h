/*
 * sp_measure.h: measurement sets: published or locally measured end-to-end
 * results, one row per measured quantity, read from CSV (doc/formats.md,
 * "Measurement sets").  The rows that calibration fits profiles to and that
 * validation reports errors on.
 *
 *   # comment lines start with '#': the source, its citation, the conditions
 *   model,hw,chips,layout,batch,prompt,gen,metric,value,source
 *   gpt-20b-ft,a100-80g,8,"mesh=1x1x8,weights=f16,kv=f16",1,20,8,latency_ms,89,ft-gpt-guide
 *
 * Fields: model and hw are bundled names or paths (a relative path is taken
 * from the CSV file's folder); layout is shardplan's layout text (quoted: it
 * has commas); batch, prompt and gen the workload; metric one of
 * sp_metric; value > 0 in the metric's unit; source a short key naming
 * where the figure comes from (the header comments give the citation).
 * Quoting follows RFC 4180: a field in double quotes may hold commas, and ""
 * is one quote.  The header line must list exactly these columns in this
 * order, so a file cannot silently mean something else.
 */
#ifndef SP_MEASURE_H
#define SP_MEASURE_H
#include <stdint.h>
#include "sp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sp_metric {
    SP_METRIC_LATENCY_MS = 0,     /* prefill + every generated token's step, milliseconds */
    SP_METRIC_PREFILL_MS = 1,     /* the whole batch's prompt, milliseconds */
    SP_METRIC_DECODE_STEP_MS = 2, /* one token for every sequence, at the last context, milliseconds */
    SP_METRIC_PREFILL_MFU = 3,    /* model FLOPs utilisation of the prefill, a fraction in (0, 1] */
    SP_METRIC_COUNT
} sp_metric;
const char *sp_metric_name(sp_metric m);   /* "latency_ms", ... */
sp_status sp_metric_parse(const char *s, sp_metric *out);

typedef struct sp_measure {
    char model[256];     /* as written, or resolved against the file's folder when a relative path */
    char hw[256];
    int64_t chips;
    char layout[256];    /* layout text */
    int64_t batch, prompt, gen;
    sp_metric metric;
    double value;
    char source[64];
    char file[256];      /* where the row came from */
    int line;
} sp_measure;

/* A set of rows, appended to by sp_measure_load_file; owns rows. */
typedef struct sp_measure_set {
    sp_measure *rows;
    int n, cap;
} sp_measure_set;

void sp_measure_set_init(sp_measure_set *s);
void sp_measure_set_free(sp_measure_set *s);
/* Appends the rows of one CSV file.  A malformed file fails with err set to
 * its line, column and column name, and appends nothing. */
sp_status sp_measure_load_file(const char *path, sp_measure_set *s, sp_error *err);

#ifdef __cplusplus
}
#endif
#endif
