/* hw.c: hardware descriptions (chip, topology, host, efficiency knobs). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include "spi_common.h"
#include "spi_json.h"
#include "sp_hw.h"

static const char *const topo_names[] = {"torus", "cluster"};
static_assert(SPI_ARRAY_LEN(topo_names) == SP_TOPO_COUNT, "one name per sp_topo_kind");

void sp_hw_init(sp_hw *hw)
{
    memset(hw, 0, sizeof *hw);
    hw->links_per_chip = 6;
    hw->hbm_usable = 0.9;
    hw->hbm_bw_eff = 1.0;
    hw->overlap = SP_OVERLAP_FULL;
}

double sp_hw_matmul_eff(const sp_hw *hw, double flops)
{
    int n = hw ? hw->eff_points : 0;
    if (n <= 0) return 1.0;
    if (n > SP_HW_EFF_POINTS) n = SP_HW_EFF_POINTS;
    if (!(flops > hw->eff_flops[0])) return hw->eff_value[0];
    if (flops >= hw->eff_flops[n - 1]) return hw->eff_value[n - 1];
    for (int i = 1; i < n; i++) {
        if (flops <= hw->eff_flops[i]) {
            /* linear in log(flops) between the two points */
            double t = log(flops / hw->eff_flops[i - 1]) / log(hw->eff_flops[i] / hw->eff_flops[i - 1]);
            return hw->eff_value[i - 1] + t * (hw->eff_value[i] - hw->eff_value[i - 1]);
        }
    }
    return hw->eff_value[n - 1];
}

static sp_status hfail(const char *source, sp_error *err, const char *path, const char *text)
{
    return spi_error_set(err, SP_EINVAL, source, 0, 0, path, "%s", text);
}

static sp_status hw_validate_src(const sp_hw *hw, const char *src, sp_error *err)
{
    char t[200];
    if (!hw) return spi_error_set(err, SP_EINVAL, src, 0, 0, "", "no hardware description");
    if (!(hw->peak_flops[SP_DT_BF16] > 0)) return hfail(src, err, "/chip/peak_flops/bf16", "must be > 0");
    for (int i = 0; i < SP_DT_COUNT; i++)
        if (!(hw->peak_flops[i] >= 0) || !isfinite(hw->peak_flops[i])) {
            snprintf(t, sizeof t, "/chip/peak_flops/%s", sp_dtype_name((sp_dtype)i));
            return hfail(src, err, t, "must be >= 0 (0: unsupported)");
        }
    if (hw->hbm_bytes <= 0) return hfail(src, err, "/chip/hbm_bytes", "must be > 0");
    if (!(hw->hbm_bw > 0) || !isfinite(hw->hbm_bw)) return hfail(src, err, "/chip/hbm_bw", "must be > 0");
    if (hw->topo == SP_TOPO_TORUS) {
        long long chips = 1;
        for (int i = 0; i < 3; i++) {
            if (hw->torus_dims[i] <= 0) return hfail(src, err, "/topology/dims", "each dimension must be > 0");
            chips *= hw->torus_dims[i];
        }
        if (chips > (1 << 24)) return hfail(src, err, "/topology/dims", "more than 2^24 chips");
        if (!(hw->link_bw > 0) || !isfinite(hw->link_bw)) return hfail(src, err, "/topology/link_bw", "must be > 0");
        if (hw->links_per_chip <= 0) return hfail(src, err, "/topology/links_per_chip", "must be > 0");
        if (!(hw->hop_latency >= 0) || !isfinite(hw->hop_latency))
            return hfail(src, err, "/topology/hop_latency", "must be >= 0");
    } else if (hw->topo == SP_TOPO_CLUSTER) {
        if (hw->chips_per_node <= 0) return hfail(src, err, "/topology/chips_per_node", "must be > 0");
        if (!(hw->intra_bw > 0) || !isfinite(hw->intra_bw)) return hfail(src, err, "/topology/intra_node_bw", "must be > 0");
        if (!(hw->inter_bw > 0) || !isfinite(hw->inter_bw)) return hfail(src, err, "/topology/inter_node_bw", "must be > 0");
        if (!(hw->intra_latency >= 0)) return hfail(src, err, "/topology/intra_node_latency", "must be >= 0");
        if (!(hw->inter_latency >= 0)) return hfail(src, err, "/topology/inter_node_latency", "must be >= 0");
        if (hw->max_chips < 0) return hfail(src, err, "/topology/max_chips", "must be >= 0 (0: unbounded)");
    } else {
        return hfail(src, err, "/topology/kind", "must be one of torus, cluster");
    }
    if (hw->host_bytes < 0) return hfail(src, err, "/host/memory_bytes", "must be >= 0");
    if (!(hw->host_link_bw >= 0)) return hfail(src, err, "/host/link_bw", "must be >= 0");
    if (hw->eff_points < 0 || hw->eff_points > SP_HW_EFF_POINTS)
        return hfail(src, err, "/efficiency/matmul", "at most 8 points");
    for (int i = 0; i < hw->eff_points; i++) {
        snprintf(t, sizeof t, "/efficiency/matmul/%d", i);
        if (!(hw->eff_flops[i] > 0) || !isfinite(hw->eff_flops[i]))
            return hfail(src, err, t, "FLOPs must be > 0");
        if (i > 0 && !(hw->eff_flops[i] > hw->eff_flops[i - 1]))
            return hfail(src, err, t, "FLOPs must increase from point to point");
        if (!(hw->eff_value[i] > 0 && hw->eff_value[i] <= 1))
            return hfail(src, err, t, "efficiency must be in (0, 1]");
    }
    if (!(hw->hbm_usable > 0 && hw->hbm_usable <= 1)) return hfail(src, err, "/efficiency/hbm_usable", "must be in (0, 1]");
    if (!(hw->hbm_bw_eff > 0 && hw->hbm_bw_eff <= 1)) return hfail(src, err, "/efficiency/hbm_bw", "must be in (0, 1]");
    if ((unsigned)hw->overlap >= SP_OVERLAP_COUNT)
        return hfail(src, err, "/efficiency/overlap", "must be \"full\", \"none\" or {\"fraction\": f}");
    if (hw->overlap == SP_OVERLAP_FRACTION && !(hw->overlap_fraction >= 0 && hw->overlap_fraction <= 1))
        return hfail(src, err, "/efficiency/overlap/fraction", "must be in [0, 1]");
    if (!(hw->chip_cost_per_hour >= 0) || !isfinite(hw->chip_cost_per_hour))
        return hfail(src, err, "/cost_per_chip_hour", "must be >= 0");
    if (!memchr(hw->name, '\0', sizeof hw->name)) return hfail(src, err, "/name", "not terminated");
    return SP_OK;
}

sp_status sp_hw_validate(const sp_hw *hw, sp_error *err) { return hw_validate_src(hw, NULL, err); }

/* ---- JSON format ---- */
static const char *const top_keys[] = {"name", "chip", "topology", "host", "efficiency", "cost_per_chip_hour",
                                       "calibration", NULL};
static const char *const chip_keys[] = {"peak_flops", "hbm_bytes", "hbm_bw", NULL};
static const char *const torus_keys[] = {"kind", "dims", "link_bw", "links_per_chip", "hop_latency", NULL};
static const char *const cluster_keys[] = {"kind", "chips_per_node", "intra_node_bw", "intra_node_latency",
                                           "inter_node_bw", "inter_node_latency", "max_chips", NULL};
static const char *const host_keys[] = {"memory_bytes", "link_bw", NULL};
static const char *const eff_keys[] = {"matmul", "hbm_usable", "hbm_bw", "overlap", NULL};
static const char *const dtype_keys[] = {"f32", "bf16", "f16", "int8", "fp8", NULL};

#define C_(call) SP_CHECK(call)

static sp_status read_chip(const spi_jctx *c, const json_t *chip, sp_hw *hw)
{
    json_t *pf;
    C_(spi_json_check_keys(c, "/chip", chip, chip_keys));
    C_(spi_json_get_child(c, "/chip", chip, "peak_flops", 1, JSON_OBJECT, &pf));
    C_(spi_json_check_keys(c, "/chip/peak_flops", pf, dtype_keys));
    for (int i = 0; i < SP_DT_COUNT; i++)
        C_(spi_json_get_num(c, "/chip/peak_flops", pf, sp_dtype_name((sp_dtype)i), i == SP_DT_BF16, i == SP_DT_BF16, 0, HUGE_VAL,
                            "FLOP/s; bf16 > 0, others >= 0", &hw->peak_flops[i]));
    C_(spi_json_get_int(c, "/chip", chip, "hbm_bytes", 1, 1, INT64_MAX, "bytes > 0", &hw->hbm_bytes));
    C_(spi_json_get_num(c, "/chip", chip, "hbm_bw", 1, 1, 0, HUGE_VAL, "bytes/s > 0", &hw->hbm_bw));
    return SP_OK;
}

static sp_status read_topology(const spi_jctx *c, const json_t *t, sp_hw *hw)
{
    int kind = 0;
    C_(spi_json_get_enum(c, "/topology", t, "kind", 1, topo_names, SP_TOPO_COUNT, &kind));
    hw->topo = (sp_topo_kind)kind;
    if (hw->topo == SP_TOPO_TORUS) {
        json_t *dims;
        C_(spi_json_check_keys(c, "/topology", t, torus_keys));
        C_(spi_json_get_child(c, "/topology", t, "dims", 1, JSON_ARRAY, &dims));
        if (json_array_size(dims) != 3)
            return spi_json_fail(c, SP_EINVAL, "/topology", "dims", "must be an array of 3 integers [X, Y, Z], got %zu",
                                 json_array_size(dims));
        for (int i = 0; i < 3; i++) {
            json_t *d = json_array_get(dims, (size_t)i);
            if (!json_is_integer(d) || json_integer_value(d) <= 0 || json_integer_value(d) > 4096)
                return spi_json_fail(c, SP_EINVAL, "/topology/dims", i == 0 ? "0" : i == 1 ? "1" : "2",
                                     "must be an integer in [1, 4096]");
            hw->torus_dims[i] = (int)json_integer_value(d);
        }
        C_(spi_json_get_num(c, "/topology", t, "link_bw", 1, 1, 0, HUGE_VAL, "bytes/s > 0, one direction per link",
                            &hw->link_bw));
        int64_t links = hw->links_per_chip;
        C_(spi_json_get_int(c, "/topology", t, "links_per_chip", 0, 1, 64, "integer in [1, 64]", &links));
        hw->links_per_chip = (int)links;
        C_(spi_json_get_num(c, "/topology", t, "hop_latency", 1, 0, 0, 1, "seconds >= 0", &hw->hop_latency));
    } else {
        C_(spi_json_check_keys(c, "/topology", t, cluster_keys));
        int64_t g = 0, mx = 0;
        C_(spi_json_get_int(c, "/topology", t, "chips_per_node", 1, 1, 1 << 16, "integer > 0", &g));
        hw->chips_per_node = (int)g;
        C_(spi_json_get_num(c, "/topology", t, "intra_node_bw", 1, 1, 0, HUGE_VAL,
                            "bytes/s > 0 per chip, one direction", &hw->intra_bw));
        C_(spi_json_get_num(c, "/topology", t, "intra_node_latency", 1, 0, 0, 1, "seconds >= 0",
                            &hw->intra_latency));
        C_(spi_json_get_num(c, "/topology", t, "inter_node_bw", 1, 1, 0, HUGE_VAL,
                            "bytes/s > 0 per chip, one direction", &hw->inter_bw));
        C_(spi_json_get_num(c, "/topology", t, "inter_node_latency", 1, 0, 0, 1, "seconds >= 0",
                            &hw->inter_latency));
        C_(spi_json_get_int(c, "/topology", t, "max_chips", 0, 0, 1 << 24, "integer >= 0; 0: unbounded", &mx));
        hw->max_chips = (int)mx;
    }
    return SP_OK;
}

static sp_status read_efficiency(const spi_jctx *c, const json_t *e, sp_hw *hw)
{
    json_t *mm;
    C_(spi_json_check_keys(c, "/efficiency", e, eff_keys));
    C_(spi_json_get_child(c, "/efficiency", e, "matmul", 0, JSON_ARRAY, &mm));
    if (mm) {
        size_t n = json_array_size(mm);
        if (n < 1 || n > SP_HW_EFF_POINTS)
            return spi_json_fail(c, SP_EINVAL, "/efficiency", "matmul",
                                 "must hold 1 to %d points [FLOPs, efficiency], got %zu", SP_HW_EFF_POINTS, n);
        for (size_t i = 0; i < n; i++) {
            json_t *p = json_array_get(mm, i);
            char key[8];
            snprintf(key, sizeof key, "%zu", i);
            if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_number(json_array_get(p, 0)) ||
                !json_is_number(json_array_get(p, 1)))
                return spi_json_fail(c, SP_EINVAL, "/efficiency/matmul", key,
                                     "must be a pair [FLOPs > 0, efficiency in (0, 1]]");
            hw->eff_flops[i] = json_number_value(json_array_get(p, 0));
            hw->eff_value[i] = json_number_value(json_array_get(p, 1));
        }
        hw->eff_points = (int)n;
    }
    C_(spi_json_get_num(c, "/efficiency", e, "hbm_usable", 0, 1, 0, 1, "fraction in (0, 1]", &hw->hbm_usable));
    C_(spi_json_get_num(c, "/efficiency", e, "hbm_bw", 0, 1, 0, 1, "fraction in (0, 1]", &hw->hbm_bw_eff));
    json_t *ov = json_object_get(e, "overlap");
    if (ov && json_is_string(ov)) {
        if (!strcmp(json_string_value(ov), "full")) hw->overlap = SP_OVERLAP_FULL;
        else if (!strcmp(json_string_value(ov), "none")) hw->overlap = SP_OVERLAP_NONE;
        else ov = json_null(); /* falls through to the error below */
    } else if (ov && json_is_object(ov)) {
        static const char *const fk[] = {"fraction", NULL};
        C_(spi_json_check_keys(c, "/efficiency/overlap", ov, fk));
        C_(spi_json_get_num(c, "/efficiency/overlap", ov, "fraction", 1, 0, 0, 1, "fraction in [0, 1]",
                            &hw->overlap_fraction));
        hw->overlap = SP_OVERLAP_FRACTION;
    }
    if (ov && !json_is_string(ov) && !json_is_object(ov))
        return spi_json_fail(c, SP_EINVAL, "/efficiency", "overlap", "must be \"full\", \"none\" or {\"fraction\": f}");
    return SP_OK;
}

static sp_status hw_from_json(const char *source, const json_t *r, sp_hw *out, sp_error *err)
{
    spi_jctx c = {source, err};
    sp_hw hw;
    json_t *chip, *topo, *host, *eff;
    sp_hw_init(&hw);
    C_(spi_json_expect_object(&c, "", r));
    C_(spi_json_check_keys(&c, "", r, top_keys));
    C_(spi_json_get_str(&c, "", r, "name", 1, hw.name, sizeof hw.name));
    C_(spi_json_get_child(&c, "", r, "chip", 1, JSON_OBJECT, &chip));
    C_(read_chip(&c, chip, &hw));
    C_(spi_json_get_child(&c, "", r, "topology", 1, JSON_OBJECT, &topo));
    C_(read_topology(&c, topo, &hw));
    C_(spi_json_get_child(&c, "", r, "host", 0, JSON_OBJECT, &host));
    if (host) {
        C_(spi_json_check_keys(&c, "/host", host, host_keys));
        C_(spi_json_get_int(&c, "/host", host, "memory_bytes", 0, 0, INT64_MAX, "bytes >= 0", &hw.host_bytes));
        C_(spi_json_get_num(&c, "/host", host, "link_bw", 0, 0, 0, HUGE_VAL, "bytes/s >= 0", &hw.host_link_bw));
    }
    C_(spi_json_get_child(&c, "", r, "efficiency", 0, JSON_OBJECT, &eff));
    if (eff) C_(read_efficiency(&c, eff, &hw));
    C_(spi_json_get_num(&c, "", r, "cost_per_chip_hour", 0, 0, 0, HUGE_VAL, "dollars >= 0", &hw.chip_cost_per_hour));
    json_t *cal = json_object_get(r, "calibration");
    if (cal) C_(spi_hw_read_calibration(&c, cal, &hw));
    C_(hw_validate_src(&hw, source, err));
    *out = hw;
    return SP_OK;
}

sp_status sp_hw_load_file(const char *path, unsigned flags, sp_hw *out, sp_error *err)
{
    json_t *root;
    (void)flags;
    if (!out) return spi_fail(SP_EINVAL, "sp_hw_load_file: NULL output");
    C_(spi_json_load_file(path, &root, err));
    sp_status s = hw_from_json(path, root, out, err);
    json_decref(root);
    return s;
}

sp_status sp_hw_loads(const char *text, unsigned flags, sp_hw *out, sp_error *err)
{
    json_t *root;
    (void)flags;
    if (!out) return spi_fail(SP_EINVAL, "sp_hw_loads: NULL output");
    C_(spi_json_loads(text, "<string>", &root, err));
    sp_status s = hw_from_json("<string>", root, out, err);
    json_decref(root);
    return s;
}

static sp_status hw_find(const char *name_or_path, sp_hw *out, sp_error *err);

sp_status sp_hw_find(const char *name_or_path, sp_hw *out, sp_error *err)
{
    static const char suffix[] = ":uncalibrated";
    size_t n = name_or_path ? strlen(name_or_path) : 0, ns = sizeof suffix - 1;
    if (n > ns && !strcmp(name_or_path + n - ns, suffix)) {
        char base[1024];
        if (n - ns >= sizeof base) return spi_error_set(err, SP_EINVAL, "", 0, 0, "", "hardware name too long");
        memcpy(base, name_or_path, n - ns);
        base[n - ns] = '\0';
        SP_CHECK(hw_find(base, out, err));
        sp_hw_uncalibrate(out);
        return SP_OK;
    }
    return hw_find(name_or_path, out, err);
}

static sp_status hw_find(const char *name_or_path, sp_hw *out, sp_error *err)
{
    struct stat st;
    if (!name_or_path || !name_or_path[0])
        return spi_error_set(err, SP_EINVAL, "", 0, 0, "", "no hardware name given");
    if (stat(name_or_path, &st) == 0 && S_ISREG(st.st_mode)) return sp_hw_load_file(name_or_path, 0, out, err);
    char rel[300], path[1024];
    if (strchr(name_or_path, '/') || snprintf(rel, sizeof rel, "hw/%s.json", name_or_path) >= (int)sizeof rel)
        return spi_error_set(err, SP_EIO, name_or_path, 0, 0, "", "no such file");
    if (sp_data_path(rel, path, sizeof path) != SP_OK)
        return spi_error_set(err, SP_EIO, name_or_path, 0, 0, "",
                             "no such file, and no bundled hardware of that name (see 'shardplan hw')");
    return sp_hw_load_file(path, 0, out, err);
}

json_t *spi_hw_to_json(const sp_hw *hw)
{
    json_t *j = json_object(), *chip = json_object(), *pf = json_object(), *t = json_object();
    json_object_set_new(j, "name", json_string(hw->name));
    for (int i = 0; i < SP_DT_COUNT; i++)
        if (hw->peak_flops[i] > 0) json_object_set_new(pf, sp_dtype_name((sp_dtype)i), json_real(hw->peak_flops[i]));
    json_object_set_new(chip, "peak_flops", pf);
    json_object_set_new(chip, "hbm_bytes", json_integer(hw->hbm_bytes));
    json_object_set_new(chip, "hbm_bw", json_real(hw->hbm_bw));
    json_object_set_new(j, "chip", chip);
    json_object_set_new(t, "kind", json_string(topo_names[hw->topo == SP_TOPO_CLUSTER]));
    if (hw->topo == SP_TOPO_TORUS) {
        json_object_set_new(t, "dims", json_pack("[iii]", hw->torus_dims[0], hw->torus_dims[1], hw->torus_dims[2]));
        json_object_set_new(t, "link_bw", json_real(hw->link_bw));
        json_object_set_new(t, "links_per_chip", json_integer(hw->links_per_chip));
        json_object_set_new(t, "hop_latency", json_real(hw->hop_latency));
    } else {
        json_object_set_new(t, "chips_per_node", json_integer(hw->chips_per_node));
        json_object_set_new(t, "intra_node_bw", json_real(hw->intra_bw));
        json_object_set_new(t, "intra_node_latency", json_real(hw->intra_latency));
        json_object_set_new(t, "inter_node_bw", json_real(hw->inter_bw));
        json_object_set_new(t, "inter_node_latency", json_real(hw->inter_latency));
        json_object_set_new(t, "max_chips", json_integer(hw->max_chips));
    }
    json_object_set_new(j, "topology", t);
    json_object_set_new(j, "host", json_pack("{s:I,s:f}", "memory_bytes", (json_int_t)hw->host_bytes, "link_bw",
                                             hw->host_link_bw));
    json_t *e = json_object(), *mm = json_array();
    for (int i = 0; i < hw->eff_points; i++)
        json_array_append_new(mm, json_pack("[ff]", hw->eff_flops[i], hw->eff_value[i]));
    if (hw->eff_points) json_object_set_new(e, "matmul", mm);
    else json_decref(mm);
    json_object_set_new(e, "hbm_usable", json_real(hw->hbm_usable));
    json_object_set_new(e, "hbm_bw", json_real(hw->hbm_bw_eff));
    if (hw->overlap == SP_OVERLAP_FRACTION)
        json_object_set_new(e, "overlap", json_pack("{s:f}", "fraction", hw->overlap_fraction));
    else
        json_object_set_new(e, "overlap", json_string(hw->overlap == SP_OVERLAP_NONE ? "none" : "full"));
    json_object_set_new(j, "efficiency", e);
    json_object_set_new(j, "cost_per_chip_hour", json_real(hw->chip_cost_per_hour));
    json_t *cal = spi_hw_calibration_to_json(hw);
    if (cal) json_object_set_new(j, "calibration", cal);
    return j;
}
