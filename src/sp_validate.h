/*
 * sp_validate.h: validation case sets (predicted vs measured runs) and the
 * statistics `shardplan validate` reports: |relative error| median and worst,
 * Kendall's tau between predicted and measured orderings.
 *
 * Case file (text, one case per line, '#' starts a comment, blank lines skipped):
 *
 *     # model      chips  layout (text form, no spaces)                               batch prompt gen
 *     tiny-llama   2      mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads  1  16  8
 *
 * model: a bundled name or a file; chips must equal the layout's chips;
 * batch, prompt >= 1; gen >= 2 (a decode step is measured).  Errors name the
 * file, line and column of the field (sp_error).
 */
#ifndef SP_VALIDATE_H
#define SP_VALIDATE_H
#include <stdint.h>
#include "sp_common.h"
#include "sp_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_vcase {
    char model[128];
    int chips;
    char layout_text[256];
    sp_layout layout;
    int64_t batch, prompt, gen;
    int line;              /* in the case file */
} sp_vcase;

typedef struct sp_vcases {
    int n, cap;
    sp_vcase *c;           /* owned */
} sp_vcases;

void sp_vcases_init(sp_vcases *s);
void sp_vcases_free(sp_vcases *s);   /* safe on an initialised or freed set */
/* Appends the cases of a file (source names it in errors) or of a text. */
sp_status sp_vcases_load_file(const char *path, sp_vcases *s, sp_error *err);
sp_status sp_vcases_loads(const char *text, const char *source, sp_vcases *s, sp_error *err);

/* Kendall's tau-b of the pairs (x_i, y_i): (concordant - discordant) /
 * sqrt((n0 - ties_x)(n0 - ties_y)), n0 = n(n-1)/2; NaN when n < 2 or either
 * side is all ties.  O(n²): case groups are small. */
double sp_kendall_tau(int n, const double *x, const double *y);

/* Median and maximum of |v_i| (n >= 1; NaN for n = 0).  Does not reorder v. */
double sp_abs_median(int n, const double *v);
double sp_abs_max(int n, const double *v);

#ifdef __cplusplus
}
#endif
#endif
