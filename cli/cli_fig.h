/*
 * cli_fig.h: the report's figures, drawn with PLplot (its svg driver, and
 * pngcairo for PNG).  Only `shardplan report` draws.
 *
 *   double x[3] = {0.012, 0.015, 0.030}, y[3] = {4.1, 3.2, 2.9};
 *   cli_fig_series s = {"llama2-70b on h100", 3, x, y, 1};
 *   cli_fig_xy f = {.title = "frontier", .xlabel = "latency (ms)", .ylabel = "$ per M tokens",
 *                   .logx = 1, .logy = 1, .n_series = 1, .series = &s};
 *   if (cli_fig_xy_write(&f, "out/frontier.svg", "out/frontier.png")) ...   // -1: message printed
 *
 * Values are plotted as given (the caller converts units).  An axis asked to
 * be logarithmic is so when its values span more than a decade (else linear);
 * on a log axis, values <= 0 cannot be drawn and are left out.
 */
#ifndef SP_CLI_FIG_H
#define SP_CLI_FIG_H

/* One line or point set: n points (x[i], y[i]). */
typedef struct cli_fig_series {
    const char *name;
    int n;
    const double *x, *y;
    int line;                /* 1: join the points (a frontier); 0: points only */
} cli_fig_series;

typedef struct cli_fig_xy {
    const char *title, *xlabel, *ylabel;
    int logx, logy;          /* 1: logarithmic when the values span more than a decade */
    int n_series;
    const cli_fig_series *series;
    /* highlighted points (the chosen layout), drawn larger with their label */
    int n_marks;
    const double *mark_x, *mark_y;
    const char *const *mark_label;
} cli_fig_xy;

/* Horizontal stacked bars: bar b (label bar_label[b], top to bottom) is the
 * sum of value[b * n_parts + k] over the parts k, drawn left to right in
 * the part colours.  tick (optional, one per bar) marks a figure on each
 * bar (the schedule's time when overlap hides part of the sum); ref > 0
 * draws a vertical line (a capacity). */
typedef struct cli_fig_bars {
    const char *title, *xlabel;
    int n_bars;
    const char *const *bar_label;
    int n_parts;
    const char *const *part_name;
    const double *value;
    const double *tick;
    const char *tick_name;
    double ref;
    const char *ref_name;
} cli_fig_bars;

/* Each writes svg_path and, when png_path is not NULL, png_path.  0 on
 * success; -1 after printing why (a file that cannot be written, nothing
 * to plot). */
int cli_fig_xy_write(const cli_fig_xy *f, const char *svg_path, const char *png_path);
int cli_fig_bars_write(const cli_fig_bars *f, const char *svg_path, const char *png_path);

#endif
