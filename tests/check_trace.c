/* check_trace.c: the trace writer's output parses as JSON (Jansson) and holds
 * the metadata and events written; step ids and labels follow sp_trace.h. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sp_layout.h"
#include "sp_lower.h"
#include "sp_model.h"
#include "sp_trace.h"

START_TEST(test_ids)
{
    char b[SP_TRACE_ID_MAX];
    ck_assert_str_eq(sp_trace_step_id(SP_PHASE_PREFILL, 7, SP_PART_LAYER, 3, 12, b, sizeof b), "prefill/layer/3/12");
    ck_assert_str_eq(sp_trace_step_id(SP_PHASE_DECODE, 63, SP_PART_POST, 5, 2, b, sizeof b), "decode63/post/-1/2");
    ck_assert_str_eq(sp_trace_step_id(SP_PHASE_DECODE, 0, SP_PART_PRE, 0, 0, b, sizeof b), "decode0/pre/-1/0");
    /* a prefill of several passes names the pass; one pass and decode as above */
    ck_assert_str_eq(sp_trace_step_id_pass(SP_PHASE_PREFILL, 0, 5, SP_PART_LAYER, 1, 4, b, sizeof b), "prefill5/layer/1/4");
    ck_assert_str_eq(sp_trace_step_id_pass(SP_PHASE_PREFILL, 0, -1, SP_PART_PRE, 1, 0, b, sizeof b), "prefill/pre/-1/0");
    ck_assert_str_eq(sp_trace_step_id_pass(SP_PHASE_DECODE, 2, 3, SP_PART_PRE, 1, 0, b, sizeof b), "decode2/pre/-1/0");
    char tiny[8];
    ck_assert_str_eq(sp_trace_step_id(SP_PHASE_PREFILL, 0, SP_PART_LAYER, 3, 12, tiny, sizeof tiny), "");
    sp_step s;
    memset(&s, 0, sizeof s);
    s.kind = SP_STEP_MATMUL;
    s.weight = SP_W_Q;
    ck_assert_str_eq(sp_trace_step_label(&s, b, sizeof b), "matmul wq");
    ck_assert_int_eq(sp_trace_step_stream(&s), SP_TRACE_COMPUTE);
    s.weight_bytes = 100;
    s.act_bytes = 20;
    ck_assert_int_eq(sp_trace_step_bytes(&s), 120);
    s.kind = SP_STEP_COLL;
    s.coll.kind = SP_COLL_ALLGATHER;
    s.coll.bytes_sent = 10;
    s.coll.bytes_recv = 30;
    ck_assert_str_eq(sp_trace_step_label(&s, b, sizeof b), "all-gather");
    ck_assert_int_eq(sp_trace_step_stream(&s), SP_TRACE_COMM);
    ck_assert_int_eq(sp_trace_step_bytes(&s), 30);
    s.coll.is_weight = 1;
    ck_assert_str_eq(sp_trace_step_label(&s, b, sizeof b), "all-gather weights");
    s.kind = SP_STEP_ATTN;
    ck_assert_str_eq(sp_trace_step_label(&s, b, sizeof b), "attn");
}
END_TEST

/* Writes every step of a real program, for 4 chips, 2 micro-batches, with
 * one label needing escapes; reads it back. */
START_TEST(test_roundtrip)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", &m, &err), SP_OK);
    sp_layout l;
    sp_layout_init(&l);
    l.mesh[0] = 2;
    l.mesh[1] = 2;
    static sp_program p;
    sp_shape sh = {4, 8, 8, 16, SP_DT_F32, 0};
    ck_assert_msg(sp_lower(&m, &l, SP_PHASE_PREFILL, &sh, 0, &p) == SP_OK, "%s", sp_last_error());
    char path[] = "/tmp/check_trace_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    sp_trace *t;
    ck_assert_int_eq(sp_trace_open_stream(f, 0, 4, &t), SP_OK);
    const sp_steps *parts[SP_PART_COUNT] = {&p.pre, &p.layer, &p.post};
    int64_t layers[SP_PART_COUNT] = {1, p.n_layers, 1};
    int events = 0;
    double ts = 0;
    for (int chip = 0; chip < 4; chip++)
        for (int mb = 0; mb < 2; mb++)
            for (int part = 0; part < SP_PART_COUNT; part++)
                for (int64_t layer = 0; layer < layers[part]; layer++)
                    for (int i = 0; i < parts[part]->n; i++) {
                        const sp_step *s = &parts[part]->s[i];
                        char id[SP_TRACE_ID_MAX], name[SP_TRACE_LABEL_MAX];
                        sp_trace_event e = {chip, sp_trace_step_stream(s), ts, 1.5e-6,
                                            sp_trace_step_label(s, name, sizeof name),
                                            sp_trace_step_id(SP_PHASE_PREFILL, 0, (sp_prog_part)part, layer, i, id,
                                                             sizeof id),
                                            mb, sp_trace_step_bytes(s), s->flops};
                        ck_assert_int_eq(sp_trace_write(t, &e), SP_OK);
                        ts += 2e-6;
                        events++;
                    }
    sp_trace_event odd = {3, 0, 0.25, 0.0, "a \"quoted\"\\ label\n", NULL, 0, 1, 2};
    ck_assert_int_eq(sp_trace_write(t, &odd), SP_OK);
    sp_trace_event bad = {0, 2, 0, 1, "x", NULL, 0, 0, 0};
    ck_assert_int_eq(sp_trace_write(t, &bad), SP_EINVAL);
    bad.stream = 0;
    bad.dur_s = NAN;
    ck_assert_int_eq(sp_trace_write(t, &bad), SP_EINVAL);
    ck_assert_int_eq(sp_trace_close(t), SP_OK);
    fclose(f);

    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    unlink(path);
    ck_assert_msg(root != NULL, "trace does not parse: %s at %d:%d", je.text, je.line, je.column);
    ck_assert_str_eq(json_string_value(json_object_get(root, "displayTimeUnit")), "ns");
    json_t *ev = json_object_get(root, "traceEvents");
    ck_assert(json_is_array(ev));
    int meta = 0, x = 0, seen_odd = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        ck_assert(ph != NULL);
        int pid = (int)json_integer_value(json_object_get(e, "pid"));
        ck_assert(pid >= 0 && pid < 4);
        if (!strcmp(ph, "M")) {
            meta++;
            const char *n = json_string_value(json_object_get(e, "name"));
            const char *v = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
            if (!strcmp(n, "process_name")) {
                char want[16];
                snprintf(want, sizeof want, "chip %d", pid);
                ck_assert_str_eq(v, want);
            } else if (!strcmp(n, "thread_name")) {
                int tid = (int)json_integer_value(json_object_get(e, "tid"));
                ck_assert_str_eq(v, tid == 0 ? "compute" : "comm");
            }
            continue;
        }
        ck_assert_str_eq(ph, "X");
        json_t *args = json_object_get(e, "args");
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!strcmp(name, "a \"quoted\"\\ label\n")) {
            seen_odd = 1;
            ck_assert_ptr_null(json_object_get(args, "id"));
            ck_assert_double_eq_tol(json_number_value(json_object_get(e, "ts")), 0.25e6, 1e-6);
            continue;
        }
        x++;
        ck_assert_double_eq_tol(json_number_value(json_object_get(e, "dur")), 1.5, 1e-9);
        const char *id = json_string_value(json_object_get(args, "id"));
        ck_assert_msg(id && !strncmp(id, "prefill/", 8), "id %s", id ? id : "(none)");
        /* the id names the step: the label and bytes are those of that step */
        char part[8];
        long long layer;
        int idx;
        ck_assert_int_eq(sscanf(id, "prefill/%7[a-z]/%lld/%d", part, &layer, &idx), 3);
        const sp_steps *ss = !strcmp(part, "pre") ? &p.pre : !strcmp(part, "layer") ? &p.layer : &p.post;
        ck_assert_int_lt(idx, ss->n);
        char want[SP_TRACE_LABEL_MAX];
        ck_assert_str_eq(name, sp_trace_step_label(&ss->s[idx], want, sizeof want));
        ck_assert_int_eq(json_integer_value(json_object_get(args, "bytes")), sp_trace_step_bytes(&ss->s[idx]));
        ck_assert_int_eq(json_integer_value(json_object_get(args, "flops")), ss->s[idx].flops);
        ck_assert_int_eq(json_integer_value(json_object_get(e, "tid")), sp_trace_step_stream(&ss->s[idx]));
    }
    ck_assert_int_eq(meta, 4 * 4);   /* process name, sort index, two thread names per chip */
    ck_assert_int_eq(x, events);
    ck_assert(seen_odd);
    json_decref(root);
}
END_TEST

START_TEST(test_open_fails)
{
    sp_trace *t = (sp_trace *)1;
    ck_assert_int_eq(sp_trace_open("/nonexistent-dir/trace.json", 0, 1, &t), SP_EIO);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(sp_trace_close(NULL), SP_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ids);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_open_fails);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
