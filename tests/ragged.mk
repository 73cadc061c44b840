# tests/ragged.mk: ragged batches: workload files, lowering closed forms, pricing, executor.
if HAVE_CHECK
check_PROGRAMS += tests/check_ragged
TESTS += tests/check_ragged
endif
tests_check_ragged_SOURCES = tests/check_ragged.c
tests_check_ragged_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_ragged_LDADD = $(SP_TEST_LIBS)
TESTS += tests/cli_ragged.sh
EXTRA_DIST += tests/cli_ragged.sh
