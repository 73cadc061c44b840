# tests/cost.mk: lowering volumes vs closed forms, cost model identities.
if HAVE_CHECK
check_PROGRAMS += tests/check_cost
TESTS += tests/check_cost
endif
tests_check_cost_SOURCES = tests/check_cost.c
tests_check_cost_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_cost_LDADD = $(SP_TEST_LIBS)
TESTS += tests/cli_estimate.sh tests/cli_chunk.sh
EXTRA_DIST += tests/cli_estimate.sh tests/cli_chunk.sh
if HAVE_CHECK
check_PROGRAMS += tests/check_trace
TESTS += tests/check_trace
endif
tests_check_trace_SOURCES = tests/check_trace.c
tests_check_trace_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_trace_LDADD = $(SP_TEST_LIBS)
if HAVE_CHECK
check_PROGRAMS += tests/check_sim
TESTS += tests/check_sim
endif
tests_check_sim_SOURCES = tests/check_sim.c
tests_check_sim_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_sim_LDADD = $(SP_TEST_LIBS)
TESTS += tests/cli_simulate.sh
EXTRA_DIST += tests/cli_simulate.sh
if HAVE_CHECK
check_PROGRAMS += tests/check_moe
TESTS += tests/check_moe
endif
tests_check_moe_SOURCES = tests/check_moe.c
tests_check_moe_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_moe_LDADD = $(SP_TEST_LIBS)
TESTS += tests/cli_moe.sh
EXTRA_DIST += tests/cli_moe.sh
if HAVE_CHECK
check_PROGRAMS += tests/check_groups
TESTS += tests/check_groups
endif
tests_check_groups_SOURCES = tests/check_groups.c
tests_check_groups_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_groups_LDADD = $(SP_TEST_LIBS)
TESTS += tests/cli_groups.sh
EXTRA_DIST += tests/cli_groups.sh
