# tests/plan.mk: the planner: MILP = exhaustive enumeration, frontier, CLI verbs.
if HAVE_CHECK
check_PROGRAMS += tests/check_plan
TESTS += tests/check_plan
tests_check_plan_SOURCES = tests/check_plan.c
tests_check_plan_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_plan_LDADD = $(SP_TEST_LIBS)
endif
TESTS += tests/cli_plan.sh
EXTRA_DIST += tests/cli_plan.sh
if HAVE_CHECK
check_PROGRAMS += tests/check_plan_offload
TESTS += tests/check_plan_offload
tests_check_plan_offload_SOURCES = tests/check_plan_offload.c
tests_check_plan_offload_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_plan_offload_LDADD = $(SP_TEST_LIBS)
endif
TESTS += tests/cli_plan_offload.sh
EXTRA_DIST += tests/cli_plan_offload.sh
if HAVE_CHECK
check_PROGRAMS += tests/check_fit
TESTS += tests/check_fit
tests_check_fit_SOURCES = tests/check_fit.c
tests_check_fit_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_fit_LDADD = $(SP_TEST_LIBS)
endif
if HAVE_CHECK
check_PROGRAMS += tests/check_autoconfig
TESTS += tests/check_autoconfig
tests_check_autoconfig_SOURCES = tests/check_autoconfig.c
tests_check_autoconfig_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_autoconfig_LDADD = $(SP_TEST_LIBS)
endif
TESTS += tests/cli_autoconfig.sh
EXTRA_DIST += tests/cli_autoconfig.sh
TESTS += tests/cli_sweep.sh
EXTRA_DIST += tests/cli_sweep.sh
if HAVE_CHECK
check_PROGRAMS += tests/check_fleet
TESTS += tests/check_fleet
tests_check_fleet_SOURCES = tests/check_fleet.c
tests_check_fleet_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_fleet_LDADD = $(SP_TEST_LIBS)
endif
TESTS += tests/cli_fleet.sh
EXTRA_DIST += tests/cli_fleet.sh
if HAVE_CHECK
check_PROGRAMS += tests/check_prefill_lb
TESTS += tests/check_prefill_lb
tests_check_prefill_lb_SOURCES = tests/check_prefill_lb.c
tests_check_prefill_lb_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_prefill_lb_LDADD = $(SP_TEST_LIBS)
endif
