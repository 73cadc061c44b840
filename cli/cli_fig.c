/* cli_fig.c: PLplot figures for `shardplan report` (cli_fig.h).
 *
 * Each figure is drawn twice by one routine: on PLplot's svg driver into
 * svg_path and on its pngcairo driver into png_path.  A fresh PLplot stream
 * per drawing keeps figures independent (PLplot's state is per stream). */
#include "config.h"
#include <math.h>
#include <plplot.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "cli_fig.h"
#include "spi_common.h"

/* PLplot is opened when the first figure is drawn, not linked: it and the
 * ten libraries it needs cost every process ~0.5 ms to load (2-core VM:
 * an empty program 1.8 ms, linked with libplplot 2.3 ms), and only
 * `report` draws.  plplot.h names each entry point c_NAME behind a macro
 * NAME; the ones used here go through this table once it is filled. */
#define SP_PL_FUNCS \
    X(pladv) \
    X(plbox) \
    X(plcol0) \
    X(plend1) \
    X(plfill) \
    X(plgstrm) \
    X(plinit) \
    X(pllab) \
    X(pllegend) \
    X(plline) \
    X(pllsty) \
    X(plmkstrm) \
    X(plmtex) \
    X(plpoin) \
    X(plptex) \
    X(plschr) \
    X(plscmap0n) \
    X(plscol0) \
    X(plsdev) \
    X(plsfnam) \
    X(plspage) \
    X(plsstrm) \
    X(plssym) \
    X(plvpor) \
    X(plwidth) \
    X(plwind)

static struct {
#define X(f) __typeof__(&c_##f) fn_##f;
    SP_PL_FUNCS
#undef X
    __typeof__(&plsabort) fn_plsabort;   /* declared without the c_ prefix */
} pl;
static pthread_once_t pl_once = PTHREAD_ONCE_INIT;
static char pl_err[512];   /* empty: the table is filled */

static void pl_load(void)
{
    const spi_dl_sym syms[] = {
#define X(f) {"c_" #f, &pl.fn_##f},
        SP_PL_FUNCS
#undef X
        {"plsabort", &pl.fn_plsabort},
    };
    if (spi_dl_table(SP_PLPLOT_SONAME, syms, (int)(sizeof syms / sizeof syms[0])) != SP_OK)
        snprintf(pl_err, sizeof pl_err, "%s", sp_last_error());
}

/* 0 when PLplot is open, else -1 with the message printed */
static int pl_open(void)
{
    pthread_once(&pl_once, pl_load);
    if (!pl_err[0]) return 0;
    cli_errorf("cannot open PLplot for the figures: %s", pl_err);
    return -1;
}

/* below, every PLplot call goes through the table (filled: pl_open) */
#undef pladv
#define pladv pl.fn_pladv
#undef plbox
#define plbox pl.fn_plbox
#undef plcol0
#define plcol0 pl.fn_plcol0
#undef plend1
#define plend1 pl.fn_plend1
#undef plfill
#define plfill pl.fn_plfill
#undef plgstrm
#define plgstrm pl.fn_plgstrm
#undef plinit
#define plinit pl.fn_plinit
#undef pllab
#define pllab pl.fn_pllab
#undef pllegend
#define pllegend pl.fn_pllegend
#undef plline
#define plline pl.fn_plline
#undef pllsty
#define pllsty pl.fn_pllsty
#undef plmkstrm
#define plmkstrm pl.fn_plmkstrm
#undef plmtex
#define plmtex pl.fn_plmtex
#undef plpoin
#define plpoin pl.fn_plpoin
#undef plptex
#define plptex pl.fn_plptex
#define plsabort pl.fn_plsabort
#undef plschr
#define plschr pl.fn_plschr
#undef plscmap0n
#define plscmap0n pl.fn_plscmap0n
#undef plscol0
#define plscol0 pl.fn_plscol0
#undef plsdev
#define plsdev pl.fn_plsdev
#undef plsfnam
#define plsfnam pl.fn_plsfnam
#undef plspage
#define plspage pl.fn_plspage
#undef plsstrm
#define plsstrm pl.fn_plsstrm
#undef plssym
#define plssym pl.fn_plssym
#undef plvpor
#define plvpor pl.fn_plvpor
#undef plwidth
#define plwidth pl.fn_plwidth
#undef plwind
#define plwind pl.fn_plwind

/* Page: points (svg) and pixels (png). */
enum { FIG_W = 800, FIG_H = 480 };

/* cmap0: 0 background, 1 axes and text, 2..11 series and parts, 12 grid. */
enum { C_BG = 0, C_FG = 1, C_SERIES = 2, N_SERIES_COLOURS = 10, C_GRID = 12, N_CMAP0 = 13 };
static const unsigned char palette[N_CMAP0][3] = {
    {255, 255, 255}, {0, 0, 0},
    {31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}, {148, 103, 189},
    {140, 86, 75}, {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207},
    {215, 215, 215},
};

static char abort_msg[256];
static void on_abort(PLCHAR_VECTOR msg)
{
    snprintf(abort_msg, sizeof abort_msg, "%s", msg);
}

/* PLplot text treats '#' as its escape: "##" is a literal '#'. */
static const char *fig_text(const char *s, char *buf, size_t n)
{
    size_t k = 0;
    for (; s && *s && k + 2 < n; s++) {
        if (*s == '#') buf[k++] = '#';
        buf[k++] = *s;
    }
    buf[k] = 0;
    return buf;
}

static void colour(int i)
{
    plcol0(i);
}

/* The colour of series or part k (the palette repeats after ten). */
static int series_colour(int k)
{
    return C_SERIES + k % N_SERIES_COLOURS;
}

typedef int (*draw_fn)(const void *fig);

static long file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    long sz = -1;
    if (f) {
        if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
        fclose(f);
    }
    return sz;
}

/* One drawing of fig on device dev into path. */
static int render(draw_fn draw, const void *fig, const char *dev, const char *path)
{
    PLINT strm, old;
    FILE *probe = fopen(path, "wb");   /* PLplot only warns when it cannot open its file */
    if (!probe) {
        cli_errorf("cannot write %s", path);
        return -1;
    }
    fclose(probe);
    remove(path);
    if (pl_open()) return -1;
    plgstrm(&old);
    plmkstrm(&strm);
    if (strm < 0) {
        cli_errorf("PLplot: no free stream for %s", path);
        return -1;
    }
    abort_msg[0] = 0;
    plsabort(on_abort);
    plsdev(dev);
    plsfnam(path);
    plspage(0, 0, FIG_W, FIG_H, 0, 0);
    plscmap0n(N_CMAP0);
    for (int i = 0; i < N_CMAP0; i++) plscol0(i, palette[i][0], palette[i][1], palette[i][2]);
    plinit();
    pladv(0);
    plschr(0, 0.8);
    int rc = draw(fig);
    plend1();
    plsstrm(old);
    if (abort_msg[0]) {
        cli_errorf("PLplot, drawing %s: %s", path, abort_msg);
        return -1;
    }
    if (!rc && file_size(path) <= 0) {
        cli_errorf("PLplot's %s driver wrote nothing to %s", dev, path);
        return -1;
    }
    return rc;
}

static int write_both(draw_fn draw, const void *fig, const char *svg_path, const char *png_path)
{
    if (render(draw, fig, "svg", svg_path)) return -1;
    return png_path ? render(draw, fig, "pngcairo", png_path) : 0;
}

/* A legend: up to LEG_MAX entries (a figure with more lists the first
 * LEG_MAX - 1 and says how many it left out), drawn right of the plot. */
enum { LEG_MAX = 24 };
typedef struct fig_legend {
    int n;
    PLINT opt[LEG_MAX], col[LEG_MAX], pat[LEG_MAX], sty[LEG_MAX], nsym[LEG_MAX];
    PLFLT bsc[LEG_MAX], bw[LEG_MAX], wid[LEG_MAX], ssc[LEG_MAX];
    char txt[LEG_MAX][128];
    const char *txtp[LEG_MAX], *sym[LEG_MAX];
    int left_out;
} fig_legend;

/* Adds an entry: opt PL_LEGEND_LINE / _SYMBOL / _COLOR_BOX, its colour, line
 * style and width, symbol ("" none) and symbol scale. */
static void legend_add(fig_legend *g, const char *text, PLINT opt, int col, int style, double width,
                       const char *sym, double sym_scale)
{
    if (g->n >= LEG_MAX - 1) {
        g->left_out++;
        return;
    }
    int i = g->n++;
    fig_text(text, g->txt[i], sizeof g->txt[i]);
    g->txtp[i] = g->txt[i];
    g->opt[i] = opt, g->col[i] = col, g->pat[i] = 0, g->sty[i] = style, g->wid[i] = width;
    g->bsc[i] = 0.8, g->bw[i] = 1, g->sym[i] = sym, g->ssc[i] = sym_scale, g->nsym[i] = 1;
}

static void legend_draw(fig_legend *g)
{
    if (g->left_out) {
        int i = g->n++;
        snprintf(g->txt[i], sizeof g->txt[i], "(%d more, in the data files)", g->left_out);
        g->txtp[i] = g->txt[i];
        g->opt[i] = PL_LEGEND_NONE, g->col[i] = C_FG, g->sty[i] = 1, g->wid[i] = 1, g->sym[i] = "", g->nsym[i] = 0;
    }
    if (!g->n) return;
    PLFLT lw, lh;
    pllegend(&lw, &lh, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX, PL_POSITION_RIGHT | PL_POSITION_OUTSIDE, 0.02,
             0.0, 0.06, C_BG, C_FG, 1, g->n, 1, g->n, g->opt, 0.8, 0.7, 1.6, 0.0, g->col, g->txtp, g->col, g->pat,
             g->bsc, g->bw, g->col, g->sty, g->wid, g->col, g->ssc, g->nsym, g->sym);
}

/* ---- x-y plot ---- */

static int usable(double v, int logscale)
{
    return isfinite(v) && (!logscale || v > 0);
}

static double ax(double v, int logscale)
{
    return logscale ? log10(v) : v;
}

/* A log axis where asked and the values span more than a decade: over less
 * PLplot's log axis labels no value at all. */
static int wants_log(const cli_fig_xy *f, int yaxis)
{
    if (!(yaxis ? f->logy : f->logx)) return 0;
    double lo = INFINITY, hi = 0;
    for (int s = 0; s < f->n_series; s++)
        for (int i = 0; i < f->series[s].n; i++) {
            double v = yaxis ? f->series[s].y[i] : f->series[s].x[i];
            if (isfinite(v) && v > 0) lo = fmin(lo, v), hi = fmax(hi, v);
        }
    for (int i = 0; i < f->n_marks; i++) {
        double v = yaxis ? f->mark_y[i] : f->mark_x[i];
        if (isfinite(v) && v > 0) lo = fmin(lo, v), hi = fmax(hi, v);
    }
    return hi > 10 * lo;
}

static int draw_xy(const void *p)
{
    cli_fig_xy fl = *(const cli_fig_xy *)p;
    fl.logx = wants_log(&fl, 0);
    fl.logy = wants_log(&fl, 1);
    const cli_fig_xy *f = &fl;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int s = 0; s <= f->n_series; s++) {
        int n = s < f->n_series ? f->series[s].n : f->n_marks;
        const double *x = s < f->n_series ? f->series[s].x : f->mark_x;
        const double *y = s < f->n_series ? f->series[s].y : f->mark_y;
        for (int i = 0; i < n; i++) {
            if (!usable(x[i], f->logx) || !usable(y[i], f->logy)) continue;
            double u = ax(x[i], f->logx), v = ax(y[i], f->logy);
            x0 = fmin(x0, u), x1 = fmax(x1, u), y0 = fmin(y0, v), y1 = fmax(y1, v);
        }
    }
    if (!(x0 <= x1) || !(y0 <= y1)) {
        cli_errorf("figure \"%s\": no point to plot", f->title);
        return -1;
    }
    /* a single value still gets an axis: a tenth of a decade (log) or 10 % around it */
    double px = x1 > x0 ? 0.06 * (x1 - x0) : f->logx ? 0.1 : fmax(fabs(x0) * 0.1, 1e-12);
    double py = y1 > y0 ? 0.08 * (y1 - y0) : f->logy ? 0.1 : fmax(fabs(y0) * 0.1, 1e-12);
    x0 -= px, x1 += px, y0 -= py, y1 += py;
    if (!f->logy && y0 > 0 && y0 < 0.3 * y1) y0 = 0;
    char b1[256], b2[256], b3[256];
    plvpor(0.09, 0.62, 0.12, 0.90);
    plwind(x0, x1, y0, y1);
    const char *xo = f->logx ? "gl" : "g", *yo = f->logy ? "gl" : "g";
    colour(C_GRID);
    plbox(xo, 0, 0, yo, 0, 0);
    colour(C_FG);
    plbox(f->logx ? "bcnstl" : "bcnst", 0, 0, f->logy ? "bcnstvl" : "bcnstv", 0, 0);
    pllab(fig_text(f->xlabel, b1, sizeof b1), fig_text(f->ylabel, b2, sizeof b2), fig_text(f->title, b3, sizeof b3));
    fig_legend g = {0};
    for (int s = 0; s < f->n_series; s++) {
        const cli_fig_series *se = &f->series[s];
        double *u = malloc(sizeof(double) * (size_t)(se->n + 1)), *v = malloc(sizeof(double) * (size_t)(se->n + 1));
        int k = 0;
        if (!u || !v) {
            free(u), free(v);
            cli_errorf("out of memory drawing \"%s\"", f->title);
            return -1;
        }
        for (int i = 0; i < se->n; i++)
            if (usable(se->x[i], f->logx) && usable(se->y[i], f->logy))
                u[k] = ax(se->x[i], f->logx), v[k] = ax(se->y[i], f->logy), k++;
        colour(series_colour(s));
        plwidth(2);
        if (se->line && k > 1) plline(k, u, v);
        plssym(0, 1.0);
        plpoin(k, u, v, 4);
        plwidth(1);
        free(u), free(v);
        legend_add(&g, se->name, PL_LEGEND_LINE | PL_LEGEND_SYMBOL, series_colour(s), 1, 2, "o", 1);
    }
    if (f->n_marks) {
        colour(C_FG);
        for (int i = 0; i < f->n_marks; i++) {
            if (!usable(f->mark_x[i], f->logx) || !usable(f->mark_y[i], f->logy)) continue;
            PLFLT u = ax(f->mark_x[i], f->logx), v = ax(f->mark_y[i], f->logy);
            plssym(0, 2.2);
            plwidth(2);
            plpoin(1, &u, &v, 5);
            plwidth(1);
            if (f->mark_label && f->mark_label[i])
                plptex(u + 0.02 * (x1 - x0), v + 0.03 * (y1 - y0), 1, 0, 0, fig_text(f->mark_label[i], b1, sizeof b1));
        }
        legend_add(&g, "chosen layout", PL_LEGEND_SYMBOL, C_FG, 1, 1, "x", 1.6);
    }
    plssym(0, 1.0);
    legend_draw(&g);
    return 0;
}

int cli_fig_xy_write(const cli_fig_xy *f, const char *svg_path, const char *png_path)
{
    return write_both(draw_xy, f, svg_path, png_path);
}

/* ---- stacked bars ---- */

static int draw_bars(const void *p)
{
    const cli_fig_bars *f = p;
    int nb = f->n_bars, np = f->n_parts;
    if (nb < 1 || np < 1) {
        cli_errorf("figure \"%s\": no bar to draw", f->title);
        return -1;
    }
    double top = f->ref > 0 ? f->ref : 0;
    for (int b = 0; b < nb; b++) {
        double s = 0;
        for (int k = 0; k < np; k++) s += fmax(0, f->value[b * np + k]);
        top = fmax(top, s);
        if (f->tick) top = fmax(top, f->tick[b]);
    }
    if (!(top > 0) || !isfinite(top)) {
        cli_errorf("figure \"%s\": every bar is empty", f->title);
        return -1;
    }
    char b1[256], b2[256];
    plvpor(0.17, 0.62, 0.12, 0.90);
    plwind(0, top * 1.05, 0, nb);
    colour(C_GRID);
    plbox("g", 0, 0, "", 0, 0);
    for (int b = 0; b < nb; b++) {
        double yl = nb - b - 1 + 0.18, yh = nb - b - 0.18, x = 0;
        for (int k = 0; k < np; k++) {
            double v = fmax(0, f->value[b * np + k]);
            if (v <= 0) continue;
            PLFLT px[4] = {x, x + v, x + v, x}, py[4] = {yl, yl, yh, yh};
            colour(series_colour(k));
            plfill(4, px, py);
            x += v;
        }
        if (f->tick) {
            PLFLT tx[2] = {f->tick[b], f->tick[b]}, ty[2] = {yl - 0.1, yh + 0.1};
            colour(C_FG);
            plwidth(3);
            plline(2, tx, ty);
            plwidth(1);
        }
        colour(C_FG);
        plmtex("lv", 0.8, (nb - b - 0.5) / nb, 1.0, fig_text(f->bar_label[b], b1, sizeof b1));
    }
    if (f->ref > 0) {
        PLFLT rx[2] = {f->ref, f->ref}, ry[2] = {0, nb};
        colour(C_FG);
        pllsty(2);
        plline(2, rx, ry);
        pllsty(1);
    }
    colour(C_FG);
    plbox("bcnst", 0, 0, "bc", 0, 0);
    pllab(fig_text(f->xlabel, b1, sizeof b1), "", fig_text(f->title, b2, sizeof b2));
    fig_legend g = {0};
    for (int k = 0; k < np; k++) legend_add(&g, f->part_name[k], PL_LEGEND_COLOR_BOX, series_colour(k), 1, 1, "", 1);
    if (f->tick) legend_add(&g, f->tick_name, PL_LEGEND_LINE, C_FG, 1, 3, "", 1);
    if (f->ref > 0) legend_add(&g, f->ref_name, PL_LEGEND_LINE, C_FG, 2, 1, "", 1);
    legend_draw(&g);
    return 0;
}

int cli_fig_bars_write(const cli_fig_bars *f, const char *svg_path, const char *png_path)
{
    return write_both(draw_bars, f, svg_path, png_path);
}
