# tests/: Check suites, golden CLI cases, multi-process tests.
# Each area keeps its own fragment so work on one does not collide with another.
TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = $(SHELL)
AM_TESTS_ENVIRONMENT = \
	top_srcdir='$(abs_top_srcdir)'; export top_srcdir; \
	top_builddir='$(abs_top_builddir)'; export top_builddir; \
	SHARDPLAN='$(abs_top_builddir)/shardplan'; export SHARDPLAN; \
	SHARDPLAN_DATA='$(abs_top_srcdir)/data'; export SHARDPLAN_DATA; \
	SHARDPLAN_CACHE_DIR=off; export SHARDPLAN_CACHE_DIR; \
	MPIRUN='$(MPIRUN)'; export MPIRUN; \
	OPENBLAS_NUM_THREADS=1; export OPENBLAS_NUM_THREADS; \
	JSONQ='$(abs_top_builddir)/tests/jsonq'; export JSONQ;
SP_TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
SP_TEST_LIBS = libspcore.la $(SP_DEP_LIBS) $(CHECK_LIBS)
# jsonq reads the CLI's JSON for the shell tests (through tests/json.sh), so
# make check needs no Python; it needs only Jansson, not Check.
check_PROGRAMS += tests/jsonq
tests_jsonq_SOURCES = tests/jsonq.c
tests_jsonq_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_jsonq_LDADD = $(JANSSON_LIBS)
TESTS += tests/json_tools.sh
EXTRA_DIST += tests/json.sh tests/json_tools.sh
include tests/desc.mk
include tests/cost.mk
include tests/comm.mk
include tests/kern.mk
include tests/plan.mk
include tests/mpi.mk
include tests/exec.mk
include tests/rel.mk
include tests/local_fid.mk
include tests/report.mk
