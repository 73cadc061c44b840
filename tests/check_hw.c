/* check_hw.c: hardware descriptions, efficiency curve, defaults, dtypes. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "sp_hw.h"
#include "spi_json.h"

static const char *const bundled[] = {"tpu-v4", "a100-40g", "a100-80g", "h100", "h200"};

START_TEST(test_bundled_loads)
{
    sp_hw hw;
    sp_error err;
    char buf[1024], rel[64], path[1024];
    sp_error_init(&err);
    ck_assert_msg(sp_hw_find(bundled[_i], &hw, &err) == SP_OK, "%s", sp_error_format(&err, buf, sizeof buf));
    ck_assert_str_eq(hw.name, bundled[_i]);
    ck_assert_int_eq(sp_hw_validate(&hw, NULL), SP_OK);
    ck_assert(hw.peak_flops[SP_DT_BF16] > 0);
    snprintf(rel, sizeof rel, "hw/%s.json", bundled[_i]);
    ck_assert_int_eq(sp_data_path(rel, path, sizeof path), SP_OK);
    json_t *j = json_load_file(path, 0, NULL);
    ck_assert(json_is_string(json_object_get(j, "source")));
    json_decref(j);
}
END_TEST

START_TEST(test_figures)
{
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_hw_find("tpu-v4", &hw, &err), SP_OK);
    ck_assert_int_eq(hw.topo, SP_TOPO_TORUS);
    ck_assert_double_eq(hw.peak_flops[SP_DT_BF16], 275e12);
    ck_assert_double_eq(hw.link_bw * hw.links_per_chip, 270e9);
    ck_assert_int_eq(hw.hbm_bytes, 32LL << 30);
    ck_assert_int_eq(sp_hw_find("a100-80g", &hw, &err), SP_OK);
    ck_assert_int_eq(hw.topo, SP_TOPO_CLUSTER);
    ck_assert_double_eq(hw.peak_flops[SP_DT_INT8], 624e12);
    ck_assert_double_eq(hw.hbm_bw, 2039e9);
    ck_assert_double_eq(hw.intra_bw, 300e9);
    ck_assert_double_eq(hw.inter_bw, 25e9);
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    ck_assert_double_eq(hw.peak_flops[SP_DT_FP8], 1979e12);
    ck_assert_double_eq(hw.intra_bw, 450e9);
    ck_assert_double_eq(hw.inter_bw, 50e9);
    ck_assert_int_eq(sp_hw_find("h200", &hw, &err), SP_OK);
    ck_assert_double_eq(hw.hbm_bw, 4.8e12);
    ck_assert_double_eq(hw.peak_flops[SP_DT_BF16], 989e12);
}
END_TEST

static const char minimal[] =
    "{\"name\":\"m\",\"chip\":{\"peak_flops\":{\"bf16\":1e12},\"hbm_bytes\":1073741824,\"hbm_bw\":1e11},"
    "\"topology\":{\"kind\":\"cluster\",\"chips_per_node\":4,\"intra_node_bw\":1e10,\"intra_node_latency\":1e-6,"
    "\"inter_node_bw\":1e9,\"inter_node_latency\":1e-5}}";

START_TEST(test_defaults)
{
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_hw_loads(minimal, 0, &hw, &err), SP_OK);
    ck_assert_double_eq(hw.hbm_usable, 0.9);
    ck_assert_double_eq(hw.hbm_bw_eff, 1.0);
    ck_assert_int_eq(hw.overlap, SP_OVERLAP_FULL);
    ck_assert_int_eq(hw.eff_points, 0);
    ck_assert_double_eq(sp_hw_matmul_eff(&hw, 1e9), 1.0);
    ck_assert_int_eq(hw.max_chips, 0);
    ck_assert_double_eq(hw.peak_flops[SP_DT_F32], 0);
}
END_TEST

START_TEST(test_curve)
{
    sp_hw hw;
    sp_error err;
    char text[2048];
    snprintf(text, sizeof text, "%.*s,\"efficiency\":{\"matmul\":[[1e9,0.2],[1e11,0.6],[1e12,0.8]],"
             "\"overlap\":{\"fraction\":0.5},\"hbm_bw\":0.8}}", (int)strlen(minimal) - 1, minimal);
    ck_assert_int_eq(sp_hw_loads(text, 0, &hw, &err), SP_OK);
    ck_assert_int_eq(hw.eff_points, 3);
    ck_assert_double_eq_tol(sp_hw_matmul_eff(&hw, 1e3), 0.2, 1e-12);   /* clamped */
    ck_assert_double_eq_tol(sp_hw_matmul_eff(&hw, 1e9), 0.2, 1e-12);
    ck_assert_double_eq_tol(sp_hw_matmul_eff(&hw, 1e10), 0.4, 1e-12);  /* log midpoint */
    ck_assert_double_eq_tol(sp_hw_matmul_eff(&hw, 1e11), 0.6, 1e-12);
    ck_assert_double_eq_tol(sp_hw_matmul_eff(&hw, sqrt(1e23)), 0.7, 1e-12);
    ck_assert_double_eq_tol(sp_hw_matmul_eff(&hw, 1e15), 0.8, 1e-12);  /* clamped */
    ck_assert_int_eq(hw.overlap, SP_OVERLAP_FRACTION);
    ck_assert_double_eq(hw.overlap_fraction, 0.5);
    ck_assert_double_eq(hw.hbm_bw_eff, 0.8);
}
END_TEST

START_TEST(test_errors)
{
    sp_hw hw;
    sp_error err;
    char text[2048];
    /* drop inter_node_bw */
    snprintf(text, sizeof text, "%s", minimal);
    char *p = strstr(text, "\"inter_node_bw\":1e9,");
    memmove(p, p + strlen("\"inter_node_bw\":1e9,"), strlen(p + strlen("\"inter_node_bw\":1e9,")) + 1);
    ck_assert_int_eq(sp_hw_loads(text, 0, &hw, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, "/topology/inter_node_bw");
    ck_assert_ptr_nonnull(strstr(err.text, "missing field"));
    ck_assert_int_eq(sp_hw_loads("{\"name\":", 0, &hw, &err), SP_EPARSE);
    ck_assert_int_eq(err.line, 1);
    ck_assert_int_eq(sp_hw_find("no-such-hw", &hw, &err), SP_EIO);
    sp_hw_init(&hw);
    ck_assert_int_eq(sp_hw_validate(&hw, &err), SP_EINVAL);
}
END_TEST

/* the fields the cost model's step terms read: dispatch, the memory curve
 * by bytes, the matmul tile, torus slices; bad values name their field */
START_TEST(test_new_fields)
{
    sp_hw hw;
    sp_error err;
    char text[4096];
    snprintf(text, sizeof text,
             "{\"name\":\"t\",\"chip\":{\"peak_flops\":{\"bf16\":1e12},\"hbm_bytes\":1073741824,\"hbm_bw\":1e11,"
             "\"dispatch_s\":5e-6},\"topology\":{\"kind\":\"torus\",\"dims\":[8,8,8],\"link_bw\":1e10,"
             "\"hop_latency\":1e-6,\"slices\":{\"shapes\":[[2,2,1]],\"cuboid_multiple\":4,\"cuboid_min_chips\":64}},"
             "\"efficiency\":{\"matmul_tile\":[8,128,128],\"matmul_rows\":{\"bf16\":[[1,0.2],[16,1]]},"
             "\"matmul_rows_by_weights\":{\"int8\":[{\"weights\":1e4,\"rows\":[[1,0.4],[16,1]]},"
             "{\"weights\":1e6,\"rows\":[[1,0.2],[16,0.8]]}]},"
             "\"memory\":[[1e4,0.1],[1e6,0.5],[1e8,0.9]],\"weight_stream_alone\":[[1e6,0.6],[1e8,0.3]]}}");
    ck_assert_msg(sp_hw_loads(text, 0, &hw, &err) == SP_OK, "%s: %s", err.path, err.text);
    ck_assert_double_eq(hw.dispatch_s, 5e-6);
    ck_assert_int_eq(hw.matmul_tile[1], 128);
    ck_assert_int_eq(hw.mem_points, 3);
    ck_assert_int_eq(hw.wsa_points, 2);
    ck_assert_double_eq(hw.wsa_value[1], 0.3);
    ck_assert_double_eq_tol(sp_hw_memory_eff(&hw, 1e5), 0.3, 1e-12);   /* log midpoint */
    ck_assert_double_eq_tol(sp_hw_memory_eff(&hw, 1e9), 0.9, 1e-12);   /* clamped */
    /* tile utilisation: m = 4 of 8, n = 192 of 256, k = 128 of 128; no FLOPs curve: 1.0 */
    ck_assert_double_eq_tol(sp_hw_matmul_shape_eff(&hw, SP_DT_F32, 4, 192, 128), 0.5 * 0.75, 1e-12);
    /* bf16 weights also take their rows curve at m = 4: log midpoint of 1 and 16, 0.2 .. 1 */
    ck_assert_double_eq_tol(sp_hw_matmul_shape_eff(&hw, SP_DT_BF16, 4, 192, 128), 0.5 * 0.75 * 0.6, 1e-12);
    ck_assert_double_eq_tol(sp_hw_matmul_shape_eff(&hw, SP_DT_BF16, 64, 256, 128), 1.0, 1e-12);   /* clamped */
    /* int8 weights take their rows curve by weight size: K·N = 1e5 is the log
     * midpoint of the classes 1e4 and 1e6; m = 4 the log midpoint of 1 and 16 */
    ck_assert_double_eq_tol(sp_hw_rows_eff(&hw, SP_DT_INT8, 4, 1e5), 0.5 * (0.7 + 0.5), 1e-12);
    ck_assert_double_eq_tol(sp_hw_rows_eff(&hw, SP_DT_INT8, 16, 1e3), 1.0, 1e-12);   /* below the first class */
    ck_assert_double_eq_tol(sp_hw_rows_eff(&hw, SP_DT_INT8, 1, 1e8), 0.2, 1e-12);    /* beyond the last */
    ck_assert_double_eq_tol(sp_hw_rows_eff(&hw, SP_DT_BF16, 4, 1e5), 0.6, 1e-12);    /* bf16: the one curve */
    ck_assert_double_eq_tol(sp_hw_matmul_shape_eff(&hw, SP_DT_INT8, 16, 1000, 1000), 0.8 * (1000 / 1024.0) * (1000 / 1024.0), 1e-12);   /* n, k tiles of 128 */
    json_t *rb = spi_hw_to_json(&hw);
    ck_assert_int_eq(json_array_size(json_object_get(json_object_get(json_object_get(rb, "efficiency"),
                                                                     "matmul_rows_by_weights"), "int8")), 2);
    json_decref(rb);
    int s221[3] = {1, 2, 2}, s444[3] = {4, 4, 4}, s448[3] = {4, 8, 4}, s228[3] = {2, 2, 8}, s888[3] = {8, 8, 8};
    int s16[3] = {16, 4, 4};
    ck_assert(sp_hw_slice_rentable(&hw, s221));
    ck_assert(sp_hw_slice_rentable(&hw, s444));
    ck_assert(sp_hw_slice_rentable(&hw, s448));
    ck_assert(sp_hw_slice_rentable(&hw, s888));
    ck_assert(!sp_hw_slice_rentable(&hw, s228));
    ck_assert(!sp_hw_slice_rentable(&hw, s16));   /* larger than the torus */
    /* without the memory curve, hbm_bw's fraction for every size */
    ck_assert_int_eq(sp_hw_loads(minimal, 0, &hw, &err), SP_OK);
    ck_assert_double_eq(sp_hw_memory_eff(&hw, 1e3), 1.0);
    ck_assert_double_eq(hw.dispatch_s, 0.0);
    int any[3] = {1, 1, 3};
    ck_assert(!sp_hw_slice_rentable(&hw, any));   /* a cluster rents no torus slice */
    /* chip.comm_shares_cores: a boolean, only beside shared_cores, written back */
    char t3[4096];
    const char *dp = strstr(text, "\"dispatch_s\":5e-6");
    snprintf(t3, sizeof t3, "%.*s\"shared_cores\":2,\"comm_shares_cores\":true,%s", (int)(dp - text), text, dp);
    ck_assert_msg(sp_hw_loads(t3, 0, &hw, &err) == SP_OK, "%s: %s", err.path, err.text);
    ck_assert_int_eq(hw.comm_shares_cores, 1);
    ck_assert_double_eq(hw.idle_wake_s, 0.0);
    hw.idle_wake_s = 2.5e-5;   /* chip.idle_wake_s written back when set */
    json_t *back = spi_hw_to_json(&hw);
    ck_assert(json_is_true(json_object_get(json_object_get(back, "chip"), "comm_shares_cores")));
    ck_assert_double_eq(json_real_value(json_object_get(json_object_get(back, "chip"), "idle_wake_s")), 2.5e-5);
    ck_assert_int_eq(json_array_size(json_object_get(json_object_get(back, "efficiency"), "weight_stream_alone")), 2);
    json_decref(back);
    snprintf(t3, sizeof t3, "%.*s\"idle_wake_s\":-1e-6,%s", (int)(dp - text), text, dp);
    ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, "/chip/idle_wake_s");
    snprintf(t3, sizeof t3, "%.*s\"idle_wake_s\":3e-5,%s", (int)(dp - text), text, dp);
    ck_assert_msg(sp_hw_loads(t3, 0, &hw, &err) == SP_OK, "%s: %s", err.path, err.text);
    ck_assert_double_eq(hw.idle_wake_s, 3e-5);
    /* chip.idle_wake_by_share: [chips per core >= 1, seconds] pairs, shares increasing, written back */
    snprintf(t3, sizeof t3, "%.*s\"idle_wake_by_share\":[[1,3e-5],[2,2e-5],[4,5e-6]],%s", (int)(dp - text), text, dp);
    ck_assert_msg(sp_hw_loads(t3, 0, &hw, &err) == SP_OK, "%s: %s", err.path, err.text);
    ck_assert_int_eq(hw.wake_points, 3);
    ck_assert_double_eq(sp_hw_idle_wake(&hw, 2), 2e-5);
    ck_assert_double_eq(sp_hw_idle_wake(&hw, 8), 5e-6);
    back = spi_hw_to_json(&hw);
    ck_assert_int_eq(json_array_size(json_object_get(json_object_get(back, "chip"), "idle_wake_by_share")), 3);
    json_decref(back);
    snprintf(t3, sizeof t3, "%.*s\"idle_wake_by_share\":[[1,3e-5],[0.5,2e-5]],%s", (int)(dp - text), text, dp);
    ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, "/chip/idle_wake_by_share/1");
    snprintf(t3, sizeof t3, "%.*s\"idle_wake_by_share\":[[1,2]],%s", (int)(dp - text), text, dp);
    ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, "/chip/idle_wake_by_share/0");
    /* chip.compute_stretch_by_share: [chips per core > 1, factor in (0, 16]] pairs, shares
     * increasing, written back; needs shared_cores */
    snprintf(t3, sizeof t3, "%.*s\"compute_stretch_by_share\":[[2,1.1],[4,1.3]],%s", (int)(dp - text), text, dp);
    ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, "/chip/compute_stretch_by_share");   /* no shared_cores */
    snprintf(t3, sizeof t3, "%.*s\"shared_cores\":2,\"compute_stretch_by_share\":[[2,1.1],[4,1.3]],%s", (int)(dp - text),
             text, dp);
    ck_assert_msg(sp_hw_loads(t3, 0, &hw, &err) == SP_OK, "%s: %s", err.path, err.text);
    ck_assert_int_eq(hw.stretch_points, 2);
    ck_assert_double_eq(sp_hw_compute_stretch(&hw, 4), 1.3);
    ck_assert_double_eq(sp_hw_compute_stretch(&hw, 1), 1.0);
    back = spi_hw_to_json(&hw);
    ck_assert_int_eq(json_array_size(json_object_get(json_object_get(back, "chip"), "compute_stretch_by_share")), 2);
    json_decref(back);
    static const char *const bad_stretch[][2] = {{"[[1,1.1]]", "/chip/compute_stretch_by_share/0"},
                                                 {"[[2,1.1],[2,1.3]]", "/chip/compute_stretch_by_share/1"},
                                                 {"[[2,0]]", "/chip/compute_stretch_by_share/0"},
                                                 {"[[2,17]]", "/chip/compute_stretch_by_share/0"},
                                                 {"[[2]]", "/chip/compute_stretch_by_share/0"},
                                                 {"[]", "/chip/compute_stretch_by_share"}};
    for (size_t i = 0; i < sizeof bad_stretch / sizeof *bad_stretch; i++) {
        snprintf(t3, sizeof t3, "%.*s\"shared_cores\":2,\"compute_stretch_by_share\":%s,%s", (int)(dp - text), text,
                 bad_stretch[i][0], dp);
        ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
        ck_assert_msg(!strcmp(err.path, bad_stretch[i][1]), "%s: %s (%s)", bad_stretch[i][0], err.path, err.text);
    }
    /* chip.weight_fetch_s_by_working_set: [bytes > 0, seconds per byte in [0, 1e-6]] pairs,
     * bytes increasing, written back; what a matmul adds is w · (F(ws) − F(w)), never < 0 */
    snprintf(t3, sizeof t3, "%.*s\"weight_fetch_s_by_working_set\":[[1e6,0],[4e6,2e-11],[6.4e7,1.1e-10]],%s",
             (int)(dp - text), text, dp);
    ck_assert_msg(sp_hw_loads(t3, 0, &hw, &err) == SP_OK, "%s: %s", err.path, err.text);
    ck_assert_int_eq(hw.fetch_points, 3);
    ck_assert_double_eq_tol(sp_hw_weight_fetch(&hw, 1e6, 6.4e7), 1e6 * 1.1e-10, 1e-18);
    ck_assert_double_eq_tol(sp_hw_weight_fetch(&hw, 1e6, 1e9), 1e6 * 1.1e-10, 1e-18);   /* the end value beyond */
    ck_assert_double_eq_tol(sp_hw_weight_fetch(&hw, 2e6, 4e6), 2e6 * (2e-11 - 2e-11 * log(2.0) / log(4.0)), 1e-18);
    ck_assert_double_eq(sp_hw_weight_fetch(&hw, 1e6, 1e6), 0.0);    /* its own bytes: as cached */
    ck_assert_double_eq(sp_hw_weight_fetch(&hw, 8e6, 4e6), 0.0);    /* a working set below it */
    back = spi_hw_to_json(&hw);
    ck_assert_int_eq(json_array_size(json_object_get(json_object_get(back, "chip"), "weight_fetch_s_by_working_set")), 3);
    json_decref(back);
    /* efficiency.logits_rows_by_weights: classes {weights, rows} as matmul_rows_by_weights,
     * each point a fraction of the f32 peak (no FLOPs curve), written back */
    {
        const char *ep = strstr(text, "\"efficiency\":{");
        ck_assert_ptr_nonnull(ep);
        ep += strlen("\"efficiency\":{");
        char t4[16384];
        snprintf(t4, sizeof t4, "%.*s\"logits_rows_by_weights\":[{\"weights\":4096,\"rows\":[[2,0.2],[8,0.4]]},"
                 "{\"weights\":262144,\"rows\":[[2,0.3],[8,0.6],[64,0.9]]}],%s", (int)(ep - text), text, ep);
        ck_assert_msg(sp_hw_loads(t4, 0, &hw, &err) == SP_OK, "%s: %s", err.path, err.text);
        ck_assert_int_eq(hw.logits_sizes, 2);
        /* between the classes, linear in log(K·N); beyond the ends, the end class */
        ck_assert_double_eq_tol(sp_hw_logits_shape_eff(&hw, 8, 512, 512), 0.6, 1e-12);   /* class 2 at T = 8 */
        /* T = 4 of the M tile of 8: half of it used */
        ck_assert_double_eq_tol(sp_hw_logits_shape_eff(&hw, 4, 512, 512), 0.5 * (0.3 + 0.3 * log(2.0) / log(4.0)), 1e-12);
        double a = 0.4, b = 0.6, tt = log(32768.0 / 4096) / log(262144.0 / 4096);
        ck_assert_double_eq_tol(sp_hw_logits_shape_eff(&hw, 8, 256, 128), a + tt * (b - a), 1e-12);
        ck_assert_double_eq_tol(sp_hw_logits_shape_eff(&hw, 8, 4096, 4096), 0.6, 1e-12);
        back = spi_hw_to_json(&hw);
        ck_assert_int_eq(json_array_size(json_object_get(json_object_get(back, "efficiency"), "logits_rows_by_weights")), 2);
        json_decref(back);
        static const char *const bad_lg[][2] = {
            {"[{\"weights\":0,\"rows\":[[2,0.2]]}]", "/efficiency/logits_rows_by_weights/0/weights"},
            {"[{\"weights\":9,\"rows\":[[2,0.2]]},{\"weights\":9,\"rows\":[[2,0.2]]}]", "/efficiency/logits_rows_by_weights/1/weights"},
            {"[{\"weights\":9,\"rows\":[[2,1.5]]}]", "/efficiency/logits_rows_by_weights/0/rows/0"},
            {"[{\"weights\":9}]", "/efficiency/logits_rows_by_weights/0/rows"},
            {"[{\"weights\":9,\"rows\":[[2,0.2]],\"x\":1}]", "/efficiency/logits_rows_by_weights/0/x"},
            {"[]", "/efficiency/logits_rows_by_weights"},
            {"[7]", "/efficiency/logits_rows_by_weights/0"}};
        for (size_t i = 0; i < sizeof bad_lg / sizeof *bad_lg; i++) {
            snprintf(t4, sizeof t4, "%.*s\"logits_rows_by_weights\":%s,%s", (int)(ep - text), text, bad_lg[i][0], ep);
            ck_assert_int_eq(sp_hw_loads(t4, 0, &hw, &err), SP_EINVAL);
            ck_assert_msg(!strcmp(err.path, bad_lg[i][1]), "%s: %s (%s)", bad_lg[i][0], err.path, err.text);
        }
    }
    static const char *const bad_fetch[][2] = {{"[[0,0]]", "/chip/weight_fetch_s_by_working_set/0"},
                                               {"[[1e6,0],[1e6,1e-11]]", "/chip/weight_fetch_s_by_working_set/1"},
                                               {"[[1e6,-1e-12]]", "/chip/weight_fetch_s_by_working_set/0"},
                                               {"[[1e6,2e-6]]", "/chip/weight_fetch_s_by_working_set/0"},
                                               {"[[1e6]]", "/chip/weight_fetch_s_by_working_set/0"},
                                               {"[]", "/chip/weight_fetch_s_by_working_set"},
                                               {"{}", "/chip/weight_fetch_s_by_working_set"}};
    for (size_t i = 0; i < sizeof bad_fetch / sizeof *bad_fetch; i++) {
        snprintf(t3, sizeof t3, "%.*s\"weight_fetch_s_by_working_set\":%s,%s", (int)(dp - text), text, bad_fetch[i][0], dp);
        ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
        ck_assert_msg(!strcmp(err.path, bad_fetch[i][1]), "%s: %s (%s)", bad_fetch[i][0], err.path, err.text);
    }
    snprintf(t3, sizeof t3, "%.*s\"idle_wake_by_share\":[[1]],%s", (int)(dp - text), text, dp);
    ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, "/chip/idle_wake_by_share/0");
    /* chip.step_elem_s: seconds per element of each elementwise kernel, every key, written back */
    snprintf(t3, sizeof t3,
             "%.*s\"step_elem_s\":{\"norm_stats\":6e-10,\"norm_apply\":1e-10,\"add\":8e-11,\"copy\":5e-11,"
             "\"rope\":1e-9,\"embed\":6e-11},%s", (int)(dp - text), text, dp);
    ck_assert_msg(sp_hw_loads(t3, 0, &hw, &err) == SP_OK, "%s: %s", err.path, err.text);
    ck_assert_double_eq(hw.step_elem_s[SP_ELEM_NORM_STATS], 6e-10);
    ck_assert_double_eq(hw.step_elem_s[SP_ELEM_ROPE], 1e-9);
    ck_assert_str_eq(sp_hw_elem_name(SP_ELEM_EMBED), "embed");
    back = spi_hw_to_json(&hw);
    ck_assert_double_eq(json_real_value(json_object_get(json_object_get(json_object_get(back, "chip"), "step_elem_s"), "copy")),
                        5e-11);
    json_decref(back);
    snprintf(t3, sizeof t3, "%.*s\"step_elem_s\":{\"norm_stats\":-1},%s", (int)(dp - text), text, dp);
    ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, "/chip/step_elem_s/norm_stats");
    snprintf(t3, sizeof t3, "%.*s\"step_elem_s\":{\"softmax\":1e-9},%s", (int)(dp - text), text, dp);
    ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.path, "/chip/step_elem_s"));
    snprintf(t3, sizeof t3, "%.*s\"comm_shares_cores\":true,%s", (int)(dp - text), text, dp);
    ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, "/chip/comm_shares_cores");
    ck_assert_ptr_nonnull(strstr(err.text, "shared_cores"));
    snprintf(t3, sizeof t3, "%.*s\"shared_cores\":2,\"comm_shares_cores\":1,%s", (int)(dp - text), text, dp);
    ck_assert_int_eq(sp_hw_loads(t3, 0, &hw, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, "/chip/comm_shares_cores");
    ck_assert_int_eq(sp_hw_loads(minimal, 0, &hw, &err), SP_OK);
    ck_assert_int_eq(hw.comm_shares_cores, 0);
    /* errors name their field */
    static const struct { const char *from, *to, *path; } bad[] = {
        {"\"dispatch_s\":5e-6", "\"dispatch_s\":-1", "/chip/dispatch_s"},
        {"[8,128,128]", "[8,128]", "/efficiency/matmul_tile"},
        {"[8,128,128]", "[8,-1,128]", "/efficiency/matmul_tile/1"},
        {"[1e6,0.5]", "[1e6,1.5]", "/efficiency/memory/1"},
        {"[16,1]", "[16,1.5]", "/efficiency/matmul_rows/bf16/1"},
        {"[1e8,0.3]", "[1e8,1.3]", "/efficiency/weight_stream_alone/1"},
        {"[1e8,0.3]", "[1e5,0.3]", "/efficiency/weight_stream_alone/1"},
        {"[16,1]", "[0.5,1]", "/efficiency/matmul_rows/bf16/1"},
        {"rows\":{\"bf16\":", "rows\":{\"bf17\":", "/efficiency/matmul_rows/bf17"},
        {"\"weights\":1e6", "\"weights\":1e3", "/efficiency/matmul_rows_by_weights/int8/1/weights"},
        {"[16,0.8]", "[16,1.8]", "/efficiency/matmul_rows_by_weights/int8/1/rows/1"},
        {"\"weights\":1e4,", "", "/efficiency/matmul_rows_by_weights/int8/0/weights"},
        {"{\"weights\":1e6,", "{\"weight\":1e6,", "/efficiency/matmul_rows_by_weights/int8/1/weight"},
        {"[1e6,0.5]", "[1e3,0.5]", "/efficiency/memory/1"},
        {"[[2,2,1]]", "[[2,0,1]]", "/topology/slices/shapes/0"},
        {"\"cuboid_multiple\":4,", "", "/topology/slices/cuboid_multiple"},
        {"\"shapes\"", "\"shape\"", "/topology/slices/shape"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char t2[4096];
        const char *at = strstr(text, bad[i].from);
        ck_assert_ptr_nonnull(at);
        snprintf(t2, sizeof t2, "%.*s%s%s", (int)(at - text), text, bad[i].to, at + strlen(bad[i].from));
        ck_assert_msg(sp_hw_loads(t2, 0, &hw, &err) == SP_EINVAL, "case %zu loaded", i);
        ck_assert_msg(!strcmp(err.path, bad[i].path), "case %zu: path %s, want %s (%s)", i, err.path, bad[i].path,
                      err.text);
    }
}
END_TEST

/* Every number outside its physical range is refused with the field and the range. */
static const struct { const char *path; double v; } out_of_range[] = {
    {"/chip/hbm_bw", 1e-300}, {"/chip/peak_flops/bf16", 1e-300}, {"/chip/peak_flops/int8", 1e300},
    {"/chip/hbm_bytes", 1}, {"/topology/intra_node_bw", 1e-300}, {"/topology/inter_node_latency", 1e9},
    {"/efficiency/hbm_bw", 1e-300}, {"/efficiency/hbm_usable", 1e-300},
};

START_TEST(test_ranges)
{
    sp_hw hw;
    sp_error err;
    ck_assert_int_eq(sp_hw_find("h100", &hw, &err), SP_OK);
    ck_assert_int_eq(sp_hw_validate(&hw, &err), SP_OK);
    const char *p = out_of_range[_i].path;
    double v = out_of_range[_i].v;
    if (!strcmp(p, "/chip/hbm_bw")) hw.hbm_bw = v;
    else if (!strcmp(p, "/chip/peak_flops/bf16")) hw.peak_flops[SP_DT_BF16] = v;
    else if (!strcmp(p, "/chip/peak_flops/int8")) hw.peak_flops[SP_DT_INT8] = v;
    else if (!strcmp(p, "/chip/hbm_bytes")) hw.hbm_bytes = (int64_t)v;
    else if (!strcmp(p, "/topology/intra_node_bw")) hw.intra_bw = v;
    else if (!strcmp(p, "/topology/inter_node_latency")) hw.inter_latency = v;
    else if (!strcmp(p, "/efficiency/hbm_bw")) hw.hbm_bw_eff = v;
    else hw.hbm_usable = v;
    ck_assert_int_eq(sp_hw_validate(&hw, &err), SP_EINVAL);
    ck_assert_str_eq(err.path, p);
    ck_assert_msg(strstr(err.text, "must be") && strstr(err.text, "in ["), "%s: %s", p, err.text);
}
END_TEST

START_TEST(test_dtypes)
{
    sp_dtype t;
    ck_assert_int_eq(sp_dtype_parse("bf16", &t), SP_OK);
    ck_assert_int_eq(t, SP_DT_BF16);
    ck_assert_int_eq(sp_dtype_parse("fp32", &t), SP_OK);
    ck_assert_int_eq(t, SP_DT_F32);
    ck_assert_int_eq(sp_dtype_parse("int4", &t), SP_EINVAL);
    ck_assert_int_eq(sp_dtype_bytes(SP_DT_F32), 4);
    ck_assert_int_eq(sp_dtype_bytes(SP_DT_FP8), 1);
    ck_assert_str_eq(sp_dtype_name(SP_DT_INT8), "int8");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hw");
    TCase *tc = tcase_create("hw");
    tcase_add_loop_test(tc, test_bundled_loads, 0, (int)(sizeof bundled / sizeof bundled[0]));
    tcase_add_test(tc, test_figures);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_curve);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_dtypes);
    tcase_add_test(tc, test_new_fields);
    tcase_add_loop_test(tc, test_ranges, 0, (int)(sizeof out_of_range / sizeof out_of_range[0]));
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
