/* check_validate.c: validation case files (sp_validate.h), Kendall's tau,
 * |error| summaries, and the calibration fits (exec/sp_calib.h). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "sp_validate.h"
#include "exec/sp_calib.h"

START_TEST(test_tau_known)
{
    double x[5] = {1, 2, 3, 4, 5}, up[5] = {10, 20, 30, 40, 50}, down[5] = {5, 4, 3, 2, 1};
    ck_assert_double_eq_tol(sp_kendall_tau(5, x, up), 1.0, 1e-12);
    ck_assert_double_eq_tol(sp_kendall_tau(5, x, down), -1.0, 1e-12);
    /* one swapped neighbour pair: 9 concordant, 1 discordant of 10 -> 0.8 */
    double one[5] = {1, 3, 2, 4, 5};
    ck_assert_double_eq_tol(sp_kendall_tau(5, x, one), 0.8, 1e-12);
    /* tau-b with a tie in y: pairs 6, ties_y 1, C 5, D 0 -> 5 / sqrt(6 * 5) */
    double a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 2, 3};
    ck_assert_double_eq_tol(sp_kendall_tau(4, a, b), 5.0 / sqrt(30.0), 1e-12);
    /* scale invariance: only orderings count */
    double sx[4] = {1e-6, 3e-6, 2e-6, 9e-6}, sy[4] = {7, 30, 20, 100};
    ck_assert_double_eq_tol(sp_kendall_tau(4, sx, sy), 1.0, 1e-12);
    ck_assert(isnan(sp_kendall_tau(1, x, up)));
    double flat[3] = {2, 2, 2};
    ck_assert(isnan(sp_kendall_tau(3, x, flat)));
}
END_TEST

START_TEST(test_abs_stats)
{
    double v[5] = {-0.3, 0.1, 0.05, -0.2, 0.4};
    ck_assert_double_eq_tol(sp_abs_median(5, v), 0.2, 1e-12);
    ck_assert_double_eq_tol(sp_abs_max(5, v), 0.4, 1e-12);
    ck_assert_double_eq_tol(sp_abs_median(4, v), 0.15, 1e-12);   /* |.| sorted .05 .1 .2 .3 -> (.1 + .2) / 2 */
    ck_assert(v[0] == -0.3 && v[4] == 0.4);   /* not reordered */
    ck_assert(isnan(sp_abs_median(0, v)));
}
END_TEST

static const char *good =
    "# comment line\n"
    "\n"
    "tiny-llama 2 mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads 4 16 8  # why\n"
    "  tiny-palm\t4\tstages=2,mesh=2x1x1,microbatches=2,prefill=ws1d/heads,decode=ws1d/heads 8 32 2\r\n";

START_TEST(test_parse_good)
{
    sp_vcases s;
    sp_vcases_init(&s);
    sp_error err;
    sp_error_init(&err);
    ck_assert_int_eq(sp_vcases_loads(good, "good", &s, &err), SP_OK);
    ck_assert_int_eq(s.n, 2);
    ck_assert_str_eq(s.c[0].model, "tiny-llama");
    ck_assert_int_eq(s.c[0].chips, 2);
    ck_assert_int_eq(s.c[0].layout.mesh[0], 2);
    ck_assert_int_eq(s.c[0].batch, 4);
    ck_assert_int_eq(s.c[0].prompt, 16);
    ck_assert_int_eq(s.c[0].gen, 8);
    ck_assert_int_eq(s.c[0].line, 3);
    ck_assert_str_eq(s.c[1].model, "tiny-palm");
    ck_assert_int_eq(s.c[1].layout.stages, 2);
    ck_assert_int_eq(s.c[1].chips, 4);
    ck_assert_int_eq(s.c[1].line, 4);
    ck_assert_int_eq(s.c[1].gen, 2);
    sp_vcases_free(&s);
    ck_assert_int_eq(s.n, 0);
}
END_TEST

/* Bad lines: the error names the line, the column of the field and the field. */
static const struct {
    const char *text, *field;
    int line, column;
} bad[] = {
    {"tiny-llama 2 mesh=2x1x1 4 16\n", "gen", 1, 29},
    {"\ntiny-llama x mesh=2x1x1 4 16 8\n", "chips", 2, 12},
    {"tiny-llama 4 mesh=2x1x1 4 16 8\n", "chips", 1, 12},
    {"tiny-llama 2 mesh=2x1x1,ffn=zz 4 16 8\n", "layout", 1, 14},
    {"tiny-llama 2 mesh=2x1x1 0 16 8\n", "batch", 1, 25},
    {"tiny-llama 2 mesh=2x1x1 4 16 1\n", "gen", 1, 30},
    {"tiny-llama 2 mesh=2x1x1 4 16 8 9\n", "", 1, 32},
};

START_TEST(test_parse_bad)
{
    sp_vcases s;
    sp_vcases_init(&s);
    sp_error err;
    sp_error_init(&err);
    sp_status st = sp_vcases_loads(bad[_i].text, "bad.cases", &s, &err);
    ck_assert_int_ne(st, SP_OK);
    ck_assert_msg(err.line == bad[_i].line && err.column == bad[_i].column && !strcmp(err.path, bad[_i].field),
                  "case %d: line %d column %d field '%s' (%s), wanted %d %d '%s'", _i, err.line, err.column, err.path,
                  err.text, bad[_i].line, bad[_i].column, bad[_i].field);
    ck_assert_str_eq(err.source, "bad.cases");
    sp_vcases_free(&s);
}
END_TEST

START_TEST(test_parse_file_missing)
{
    sp_vcases s;
    sp_vcases_init(&s);
    sp_error err;
    sp_error_init(&err);
    ck_assert_int_eq(sp_vcases_load_file("/nonexistent/x.cases", &s, &err), SP_EIO);
    sp_vcases_free(&s);
}
END_TEST

/* λ, α and β are recovered exactly from points on the plane, and never negative. */
START_TEST(test_alpha_beta)
{
    double s[6] = {1, 1, 3, 3, 6, 2}, b[6] = {256, 1e6, 768, 3e6, 2e5, 4096}, t[6];
    for (int i = 0; i < 6; i++) t[i] = 2e-5 * s[i] + 2.5e-10 * b[i];
    double l, a, be;
    sp_calib_fit_coll(6, s, b, t, &l, &a, &be);
    ck_assert_double_eq_tol(l, 0, 1e-12);
    ck_assert_double_eq_tol(a, 2e-5, 1e-12);
    ck_assert_double_eq_tol(be, 2.5e-10, 1e-16);
    for (int i = 0; i < 6; i++) t[i] = 7e-6 + 2e-5 * s[i] + 2.5e-10 * b[i];
    sp_calib_fit_coll(6, s, b, t, &l, &a, &be);
    ck_assert_double_eq_tol(l, 7e-6, 1e-12);
    ck_assert_double_eq_tol(a, 2e-5, 1e-12);
    ck_assert_double_eq_tol(be, 2.5e-10, 1e-16);
    /* times that fall with bytes: β would be negative; clamped to 0 */
    double t2[3] = {2e-5, 1e-5, 3e-5}, s2[3] = {1, 1, 2}, b2[3] = {1e3, 1e6, 1e3};
    sp_calib_fit_coll(3, s2, b2, t2, &l, &a, &be);
    ck_assert(be == 0 && l >= 0 && a >= 0 && l + a > 0);
}
END_TEST

/* Collectives and the per-token barrier measured with more chips than
 * cores are fitted per chip with a core: each point's time over
 * max(1, chips / cores).  Points made as share × (λ + α·s + β·b) give λ, α
 * and β back; the barrier over 8 chips on 2 cores gives its time / 7 / 4. */
START_TEST(test_fit_shared_cores)
{
    /* weight streams: 1 MiB at the best rate; 16 MiB on 2 chips at once at
     * 1/8 of it, alone at 1/4 */
    /* matmuls: 512x512 at T = 1, 8, 64 (T = 8 at 3/4 of the peak), and
     * 2048x2048 at T = 8, 16, 64, its T = 8 at half the rate of 512x512's */
    /* weight fetches: the 512x512 T = 8 matmul cycled over rings of 4, 16, 64 and 256 copies
     * (1 MiB each): 20, 30, 120 and 100 ps a byte more than its cached 1e-4 s (the last below
     * the one before: noise, pooled with it) */
    const double MiB = 1048576.0;
    sp_calib_mm mm[12] = {{SP_DT_F32, 8, 512, 512, 1, 1e-4, 0, 0}, {SP_DT_F32, 64, 512, 512, 1, 6e-4, 0, 0},
                          {SP_DT_F32, 1, 512, 512, 1, 2e-5, 0, 0}, {SP_DT_F32, 1, 512, 512, 16, 8 * 2e-5, 0, 0},
                          {SP_DT_F32, 1, 512, 512, 16, 4 * 2e-5, 1, 0}, {SP_DT_F32, 8, 2048, 2048, 1, 32e-4, 0, 0},
                          {SP_DT_F32, 16, 2048, 2048, 1, 32e-4, 0, 0}, {SP_DT_F32, 64, 2048, 2048, 1, 96e-4, 0, 0},
                          {SP_DT_F32, 8, 512, 512, 4, 1e-4 + 20e-12 * MiB, 0, 0}, {SP_DT_F32, 8, 512, 512, 16, 1e-4 + 30e-12 * MiB, 0, 0},
                          {SP_DT_F32, 8, 512, 512, 64, 1e-4 + 120e-12 * MiB, 0, 0}, {SP_DT_F32, 8, 512, 512, 256, 1e-4 + 100e-12 * MiB, 0, 0}};
    sp_calib_coll_pt pt[8];
    int n = 0;
    for (int chips = 2; chips <= 8; chips *= 4)
        for (int K = 2; K <= 4; K += 2)
            for (int i = 0; i < 2; i++) {
                double c = i ? 65536 : 256, steps = K - 1, by = (K - 1) * c;
                double share = chips > 2 ? chips / 2.0 : 1.0;
                pt[n++] = (sp_calib_coll_pt){SP_CALIB_AG, K, (int64_t)c,
                                             share * (5e-6 + 3e-6 * steps + 2e-10 * by), steps, by, chips};
            }
    sp_calib_result r;
    memset(&r, 0, sizeof r);
    r.backend = SP_COMM_BACKEND_THREADS;
    r.chips = 8;
    r.cores = 2;
    r.compute_chips = 2;
    r.mm = mm;
    r.n_mm = 12;
    r.coll = pt;
    r.n_coll = n;
    r.barrier_s = 56e-6;
    /* the synthetic model's tokens: one chip (dispatch), and K = 2, 4, 8
     * chips whose every collective costs s·(λ + α·(K − 1)) + W(s) at s
     * chips per core, their compute s times the one-chip token's */
    r.disp_steps[0] = 41, r.disp_steps[1] = 185;
    r.disp_seconds[0] = 5e-6, r.disp_seconds[1] = 25e-6;
    const double W[3] = {25e-6, 20e-6, 6e-6};
    r.n_wake = 3;
    for (int w = 0; w < 3; w++) {
        int K = 2 << w;
        double sh = K > 2 ? K / 2.0 : 1.0, per = sh * (5e-6 + 3e-6 * (K - 1)) + W[w];
        r.wake_chips[w] = K;
        r.wake_colls[w][0] = 11, r.wake_colls[w][1] = 43;
        for (int L = 0; L < 2; L++) r.wake_seconds[w][L] = sh * r.disp_seconds[L] + (double)r.wake_colls[w][L] * per;
    }
    /* compute at s chips a core: a unit of 40 us alone; at K = 4, 8 chips (s = 2, 4) each unit
     * with its barrier takes s · 40 us · S(s) + the barrier's own time */
    const double S[2] = {1.1, 1.25}, bar[2] = {4e-6, 9e-6};
    r.n_stretch = 2;
    r.stretch_unit = 40e-6;
    for (int k = 0; k < 2; k++) {
        double sh = 2.0 * (k + 1);
        r.stretch_chips[k] = 4 << k;
        r.stretch_bar[k] = bar[k];
        r.stretch_sync[k] = sh * 40e-6 * S[k] + bar[k];
    }
    sp_calib_fit f;
    ck_assert_msg(sp_calib_fit_result(&r, &f) == SP_OK, "%s", sp_last_error());
    /* 0 at the matrix alone, then each ring's excess per byte, made non-decreasing */
    ck_assert_int_eq(f.fetch_points, 5);
    static const double fb[5] = {1, 4, 16, 64, 256}, fv[5] = {0, 20e-12, 30e-12, 110e-12, 110e-12};
    for (int i = 0; i < 5; i++) {
        ck_assert_double_eq(f.fetch_bytes[i], fb[i] * MiB);
        ck_assert_double_eq_tol(f.fetch_value[i], fv[i], 1e-18);
    }
    /* logits: an f32 table of 512 x 512 at T = 2, 8, 64 and of 64 x 64 at T = 2, 8 (one shape
     * timed at fewer than 3 T: no class), each a fraction of the f32 peak */
    {
        sp_calib_mm lg[17];
        memcpy(lg, mm, sizeof mm);
        const double fr[3] = {0.1, 0.3, 0.8}, Ts[3] = {2, 8, 64};
        for (int i = 0; i < 3; i++)
            lg[12 + i] = (sp_calib_mm){SP_DT_F32, (int64_t)Ts[i], 512, 512, 1,
                                       2.0 * Ts[i] * 512 * 512 / (fr[i] * f.peak_flops[SP_DT_F32]), 0, 1};
        lg[15] = (sp_calib_mm){SP_DT_F32, 2, 64, 64, 1, 1e-6, 0, 1};
        lg[16] = (sp_calib_mm){SP_DT_F32, 8, 64, 64, 1, 1e-6, 0, 1};
        sp_calib_fit fl;
        r.mm = lg;
        r.n_mm = 17;
        ck_assert_msg(sp_calib_fit_result(&r, &fl) == SP_OK, "%s", sp_last_error());
        ck_assert_int_eq(fl.logits_sizes, 1);
        ck_assert_double_eq(fl.logits_w[0], 512.0 * 512);
        ck_assert_int_eq(fl.logits_w_points[0], 3);
        for (int i = 0; i < 3; i++) {
            ck_assert_double_eq(fl.logits_w_m[0][i], Ts[i]);
            ck_assert_double_eq_tol(fl.logits_w_value[0][i], fr[i], 1e-12);
        }
        /* and change nothing else */
        ck_assert_double_eq(fl.peak_flops[SP_DT_F32], f.peak_flops[SP_DT_F32]);
        ck_assert_int_eq(fl.rows_sizes[SP_DT_F32], f.rows_sizes[SP_DT_F32]);
        ck_assert_int_eq(fl.eff_points, f.eff_points);
        ck_assert_int_eq(fl.fetch_points, f.fetch_points);
        r.mm = mm;
        r.n_mm = 12;
    }
    ck_assert_int_eq(f.logits_sizes, 0);
    /* the cycled points leave the matmul curves as they were (the same fit without them) */
    sp_calib_fit f8;
    r.n_mm = 8;
    ck_assert_msg(sp_calib_fit_result(&r, &f8) == SP_OK, "%s", sp_last_error());
    r.n_mm = 12;
    ck_assert_int_eq(f8.fetch_points, 0);
    ck_assert_double_eq(f8.peak_flops[SP_DT_F32], f.peak_flops[SP_DT_F32]);
    ck_assert_int_eq(f8.rows_points[SP_DT_F32], f.rows_points[SP_DT_F32]);
    for (int i = 0; i < f.rows_points[SP_DT_F32]; i++) ck_assert_double_eq(f8.rows_value[SP_DT_F32][i], f.rows_value[SP_DT_F32][i]);
    ck_assert_int_eq(f8.eff_points, f.eff_points);
    ck_assert_int_eq(f8.tile_m, f.tile_m);
    ck_assert_double_eq(f8.mem_bw, f.mem_bw);
    ck_assert_int_eq(f.stretch_points, 2);
    for (int k = 0; k < 2; k++) {
        ck_assert_double_eq(f.stretch_share[k], 2.0 * (k + 1));
        ck_assert_double_eq_tol(f.stretch_value[k], S[k], 1e-12);
    }
    ck_assert_int_eq(f.wake_points, 3);
    for (int w = 0; w < 3; w++) {
        ck_assert_double_eq(f.wake_share[w], w ? 2.0 * w : 1.0);
        ck_assert_double_eq_tol(f.wake_value[w], W[w], 1e-12);
    }
    ck_assert_double_eq_tol(f.idle_wake_s, W[0], 1e-12);
    /* rows by weight shape: each shape its own curve (the peak is 512x512's
     * T = 64 rate, which 2048x2048's T = 64 equals; the FLOPs curve is 1) */
    ck_assert_int_eq(f.rows_sizes[SP_DT_F32], 2);
    ck_assert_double_eq(f.rows_w[SP_DT_F32][0], 512.0 * 512);
    ck_assert_double_eq(f.rows_w[SP_DT_F32][1], 2048.0 * 2048);
    ck_assert_int_eq(f.rows_w_points[SP_DT_F32][0], 3);
    ck_assert_int_eq(f.rows_w_points[SP_DT_F32][1], 3);
    ck_assert_double_eq(f.rows_w_m[SP_DT_F32][0][1], 8);
    ck_assert_double_eq_tol(f.rows_w_value[SP_DT_F32][0][1], 0.75, 1e-12);
    ck_assert_double_eq_tol(f.rows_w_value[SP_DT_F32][1][0], 0.375, 1e-12);
    ck_assert_double_eq_tol(f.rows_w_value[SP_DT_F32][1][1], 0.75, 1e-12);
    ck_assert_double_eq_tol(f.rows_w_value[SP_DT_F32][1][2], 1.0, 1e-12);
    ck_assert_double_eq_tol(f.launch, 5e-6, 1e-12);
    ck_assert_double_eq_tol(f.alpha, 3e-6, 1e-12);
    ck_assert_double_eq_tol(f.beta, 2e-10, 1e-16);
    ck_assert_double_eq_tol(f.coll_worst_err, 0, 1e-9);
    ck_assert_double_eq_tol(f.token_sync_s, 56e-6 / 7 / 4, 1e-15);
    /* the stream alone is a curve of its own; the shared curve keeps its two points */
    ck_assert_int_eq(f.mem_points, 2);
    ck_assert_double_eq_tol(f.mem_value[1], 1.0 / 8, 1e-12);
    ck_assert_int_eq(f.wsa_points, 1);
    ck_assert_double_eq_tol(f.wsa_value[0], 1.0 / 4, 1e-12);
    ck_assert_double_eq_tol(f.wsa_bytes[0], f.mem_bytes[1], 1e-6);
    ck_assert_double_eq(sp_calib_share(&r, 2), 1.0);
    ck_assert_double_eq(sp_calib_share(&r, 8), 4.0);
    r.backend = SP_COMM_BACKEND_NCCL;   /* a GPU computes on its own */
    ck_assert_double_eq(sp_calib_share(&r, 8), 1.0);
}
END_TEST

START_TEST(test_curve_bins)
{
    double x[6] = {1e3, 1.1e3, 1e6, 1.2e6, 1e9, 0.9e9}, y[6] = {0.1, 0.3, 0.5, 0.7, 0.9, 0.9};
    double cx[8], cy[8];
    int n = sp_calib_curve(6, x, y, 3, cx, cy);
    ck_assert_int_eq(n, 3);
    ck_assert_double_eq_tol(cy[0], 0.2, 1e-12);
    ck_assert_double_eq_tol(cy[1], 0.6, 1e-12);
    ck_assert_double_eq_tol(cy[2], 0.9, 1e-12);
    ck_assert(cx[0] < cx[1] && cx[1] < cx[2]);
    ck_assert_double_eq_tol(cx[0], sqrt(1e3 * 1.1e3), 1e-6);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("validate");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_tau_known);
    tcase_add_test(tc, test_abs_stats);
    tcase_add_test(tc, test_parse_good);
    tcase_add_loop_test(tc, test_parse_bad, 0, (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, test_parse_file_missing);
    tcase_add_test(tc, test_alpha_beta);
    tcase_add_test(tc, test_curve_bins);
    tcase_add_test(tc, test_fit_shared_cores);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
