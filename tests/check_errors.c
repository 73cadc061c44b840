/* check_errors.c: the last-error text keeps its cause through every layer that
 * adds context, and the checked size arithmetic (spi_ckd.h) never wraps. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "spi_common.h"
#include "spi_ckd.h"

/* The pattern every wrapping site uses: the inner message is an argument of the outer one. */
START_TEST(test_wrap_keeps_cause)
{
    spi_fail(SP_ECOMM, "peer 2 of 2) timed out after 30 s");
    spi_fail(SP_ECOMM, "chip %d %s step %d (%s): %s", 3, "decode", 9, "coll", sp_last_error());
    ck_assert_str_eq(sp_last_error(), "chip 3 decode step 9 (coll): peer 2 of 2) timed out after 30 s");
    spi_fail(SP_ENOMEM, "scratch: %s", sp_last_error());
    ck_assert_str_eq(sp_last_error(), "scratch: chip 3 decode step 9 (coll): peer 2 of 2) timed out after 30 s");
    /* the message is an argument twice, and a prefix only */
    spi_fail(SP_EINVAL, "inner");
    spi_fail(SP_EINVAL, "%s / %s", sp_last_error(), sp_last_error());
    ck_assert_str_eq(sp_last_error(), "inner / inner");
    spi_fail(SP_EINVAL, "%.3s!", sp_last_error());
    ck_assert_str_eq(sp_last_error(), "inn!");
}
END_TEST

/* A long cause is cut at the end, never overwritten at the start. */
START_TEST(test_wrap_long_cause)
{
    char inner[1000];
    memset(inner, 'a', sizeof inner - 1);
    inner[sizeof inner - 1] = '\0';
    memcpy(inner, "cause:", 6);
    spi_fail(SP_EIO, "%s", inner);
    for (int i = 0; i < 20; i++) spi_fail(SP_EIO, "layer %d: %s", i, sp_last_error());
    const char *e = sp_last_error();
    ck_assert_msg(!strncmp(e, "layer 19: layer 18: ", 20), "%.60s", e);
    ck_assert_ptr_nonnull(strstr(e, "layer 0: cause:aaaa"));
    ck_assert_int_lt(strlen(e), 512);
}
END_TEST

/* spi_error_set takes the last error, or the error's own text, as an argument. */
START_TEST(test_error_set_keeps_cause)
{
    sp_error err;
    sp_error_init(&err);
    spi_fail(SP_EPARSE, "tensor x: dtype \"Q4\" is not one of F32, BF16, F16, I8, F8_E4M3");
    spi_error_set(&err, SP_EPARSE, "/dir", 0, 0, "", "%s", sp_last_error());
    ck_assert_str_eq(err.text, "tensor x: dtype \"Q4\" is not one of F32, BF16, F16, I8, F8_E4M3");
    ck_assert_str_eq(sp_last_error(), "/dir: tensor x: dtype \"Q4\" is not one of F32, BF16, F16, I8, F8_E4M3");
    spi_error_set(&err, SP_EPARSE, err.source, 0, 0, err.path, "model.safetensors: %s", err.text);
    ck_assert_str_eq(err.text, "model.safetensors: tensor x: dtype \"Q4\" is not one of F32, BF16, F16, I8, F8_E4M3");
    ck_assert_str_eq(err.source, "/dir");
}
END_TEST

/* spi_dl_table: a library that is not there, a symbol it lacks (each an
 * error naming it), and one it has (filled with the address dlsym gives) */
START_TEST(test_dl_table)
{
    size_t (*fn)(const char *) = NULL;
    spi_dl_sym none[] = {{"strlen", &fn}};
    ck_assert_int_eq(spi_dl_table("libshardplan-no-such-library.so.9", none, 1), SP_EIO);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "libshardplan-no-such-library.so.9"));
    ck_assert_ptr_null(fn);
    spi_dl_sym lacks[] = {{"strlen", &fn}, {"sp_no_such_symbol_here", &fn}};
    ck_assert_int_eq(spi_dl_table("libc.so.6", lacks, 2), SP_EIO);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "libc.so.6 has no sp_no_such_symbol_here"));
    fn = NULL;
    spi_dl_sym has[] = {{"strlen", &fn}};
    ck_assert_int_eq(spi_dl_table("libc.so.6", has, 1), SP_OK);
    ck_assert_ptr_nonnull(fn);
    ck_assert_uint_eq(fn("four"), 4);
}
END_TEST

START_TEST(test_ckd_plain)
{
    int64_t r = 7;
    ck_assert(spi_ckd_mul(INT64_C(1) << 31, INT64_C(1) << 31, &r));
    ck_assert(r == INT64_C(1) << 62);
    r = 7;
    ck_assert(!spi_ckd_mul(INT64_C(1) << 32, INT64_C(1) << 31, &r));
    ck_assert(r == 7);   /* untouched */
    ck_assert(!spi_ckd_add(INT64_MAX, 1, &r));
    ck_assert(spi_ckd_add(INT64_MAX - 1, 1, &r) && r == INT64_MAX);
    uint64_t u;
    ck_assert(!spi_mul_u64(UINT64_MAX / 2, 3, &u));
}
END_TEST

/* The sticky form: the first failing quantity is the one named, later calls give 0. */
START_TEST(test_ckd_sticky)
{
    spi_ckd c = SPI_CKD_INIT;
    int64_t a = spi_ck_mul3(&c, "rows", 1 << 20, 1 << 20, 1 << 20);
    ck_assert(!c.overflow && a == INT64_C(1) << 60);
    ck_assert(spi_ck_mul(&c, "bytes", a, 8) == 0);
    ck_assert(c.overflow);
    ck_assert_str_eq(c.what, "bytes");
    ck_assert(spi_ck_mul(&c, "later", 2, 3) == 0);
    ck_assert(spi_ck_add(&c, "later", 2, 3) == 0);
    ck_assert_str_eq(c.what, "bytes");
    /* sizes are never negative: a negative operand is recorded like an overflow */
    spi_ckd n = SPI_CKD_INIT;
    ck_assert(spi_ck_mul(&n, "negative", -1, 5) == 0 && n.overflow);
    spi_ckd s = SPI_CKD_INIT;
    int64_t acc = INT64_MAX - 10;
    spi_ck_addmul(&s, "sum", &acc, 2, 5);
    ck_assert(!s.overflow && acc == INT64_MAX);
    spi_ck_addmul(&s, "sum", &acc, 1, 1);
    ck_assert(s.overflow && acc == 0);
    ck_assert(spi_ck_mul4(&s, "x", 1, 2, 3, 4) == 0);
    spi_ckd f = SPI_CKD_INIT;
    ck_assert(spi_ck_mul4(&f, "x", 1, 2, 3, 4) == 24);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("errors");
    tcase_add_test(tc, test_wrap_keeps_cause);
    tcase_add_test(tc, test_wrap_long_cause);
    tcase_add_test(tc, test_error_set_keeps_cause);
    tcase_add_test(tc, test_dl_table);
    tcase_add_test(tc, test_ckd_plain);
    tcase_add_test(tc, test_ckd_sticky);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
