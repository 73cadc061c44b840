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
	JSONQ='$(abs_top_builddir)/tests/jsonq'; export JSONQ; \
	$(SP_SANITIZER_ENV)
# For a build with -fsanitize=address,undefined (README, "Sanitizers and
# fuzzing"); ignored by other builds; the caller's own options come last and
# win.  A report aborts (SIGABRT, exit 134, which no test expects: a test that
# wants exit 1 or 2 cannot pass on a sanitizer's exit 1).  LeakSanitizer
# skips Open MPI's own leaks (tests/lsan.supp names its libraries): Open MPI
# is built without frame pointers and unloads its components before exit, so
# only the slow unwinder's stacks reach the libmpi frames the file names (it
# costs the suite about 5 %).  Check's time limits are scaled by configure's
# SP_CK_TIMEOUT_MULTIPLIER (10 under a sanitizer, else 1).
SP_SANITIZER_ENV = \
	ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:fast_unwind_on_malloc=0$${ASAN_OPTIONS:+:$$ASAN_OPTIONS}"; \
	export ASAN_OPTIONS; \
	UBSAN_OPTIONS="abort_on_error=1:halt_on_error=1:print_stacktrace=1$${UBSAN_OPTIONS:+:$$UBSAN_OPTIONS}"; \
	export UBSAN_OPTIONS; \
	LSAN_OPTIONS="suppressions=$(abs_top_srcdir)/tests/lsan.supp:print_suppressions=0$${LSAN_OPTIONS:+:$$LSAN_OPTIONS}"; \
	export LSAN_OPTIONS; \
	CK_TIMEOUT_MULTIPLIER=$${CK_TIMEOUT_MULTIPLIER:-$(SP_CK_TIMEOUT_MULTIPLIER)}; export CK_TIMEOUT_MULTIPLIER;
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
# every #include of the library and program points down the layers (Makefile.am)
TESTS += tests/layers.sh
EXTRA_DIST += tests/layers.sh
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
include tests/offload.mk
include tests/ragged.mk
