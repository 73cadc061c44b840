# tests/offload.mk: weight and KV offload (layout keys, lowering, pricing, simulator).
if HAVE_CHECK
check_PROGRAMS += tests/check_offload
TESTS += tests/check_offload
endif
tests_check_offload_SOURCES = tests/check_offload.c
tests_check_offload_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_offload_LDADD = $(SP_TEST_LIBS)
TESTS += tests/cli_offload.sh
EXTRA_DIST += tests/cli_offload.sh
