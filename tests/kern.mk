# tests/kern.mk: kernels, weights and the single-chip reference.
if HAVE_CHECK
check_PROGRAMS += tests/check_kern tests/check_weights tests/check_ref
TESTS += tests/check_kern tests/check_weights tests/check_ref
endif
tests_check_kern_SOURCES = tests/check_kern.c
tests_check_kern_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_kern_LDADD = $(SP_TEST_LIBS)
tests_check_weights_SOURCES = tests/check_weights.c
tests_check_weights_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_weights_LDADD = $(SP_TEST_LIBS)
tests_check_ref_SOURCES = tests/check_ref.c
tests_check_ref_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_ref_LDADD = $(SP_TEST_LIBS)
