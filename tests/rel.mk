# tests/rel.mk: reliability: errors keep their cause, checked size arithmetic,
# hostile command lines, and the fuzz regression corpus (tests/fuzz/).
if HAVE_CHECK
check_PROGRAMS += tests/check_errors
TESTS += tests/check_errors
endif
tests_check_errors_SOURCES = tests/check_errors.c
tests_check_errors_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_errors_LDADD = $(SP_TEST_LIBS)

TESTS += tests/cli_hostile.sh
EXTRA_DIST += tests/cli_hostile.sh tests/lsan.supp

# ---- fuzzing (tests/fuzz/) ----
# One libFuzzer harness per parser.  `make check` replays, through a plain
# driver built with the project's compiler, the regression corpus (every input
# that ever broke a promise, tests/fuzz/regress/<harness>/), the seeds and the
# bundled descriptions.  `make fuzz` builds the harnesses with clang and
# libFuzzer (ASan + UBSan) into fuzz/: run one as
#   fuzz/fuzz_model -runs=10000000 -max_total_time=1800 fuzz/corpus/model
SP_FUZZ = model hw layout safetensors cli sweep
SP_FUZZ_REPLAY = tests/fuzz/replay_model tests/fuzz/replay_hw tests/fuzz/replay_layout \
	tests/fuzz/replay_safetensors tests/fuzz/replay_cli tests/fuzz/replay_sweep
check_PROGRAMS += $(SP_FUZZ_REPLAY)
tests_fuzz_replay_model_SOURCES = tests/fuzz/fuzz.h tests/fuzz/driver.c tests/fuzz/fuzz_model.c
tests_fuzz_replay_model_LDADD = libspcore.la $(SP_DEP_LIBS)
tests_fuzz_replay_hw_SOURCES = tests/fuzz/fuzz.h tests/fuzz/driver.c tests/fuzz/fuzz_hw.c
tests_fuzz_replay_hw_LDADD = libspcore.la $(SP_DEP_LIBS)
tests_fuzz_replay_layout_SOURCES = tests/fuzz/fuzz.h tests/fuzz/driver.c tests/fuzz/fuzz_layout.c
tests_fuzz_replay_layout_LDADD = libspcore.la $(SP_DEP_LIBS)
tests_fuzz_replay_safetensors_SOURCES = tests/fuzz/fuzz.h tests/fuzz/driver.c tests/fuzz/fuzz_safetensors.c
tests_fuzz_replay_safetensors_LDADD = libspcore.la $(SP_DEP_LIBS)
tests_fuzz_replay_sweep_SOURCES = tests/fuzz/fuzz.h tests/fuzz/driver.c tests/fuzz/fuzz_sweep.c
tests_fuzz_replay_sweep_LDADD = libspcore.la $(SP_DEP_LIBS)
tests_fuzz_replay_cli_SOURCES = tests/fuzz/fuzz.h tests/fuzz/driver.c tests/fuzz/fuzz_cli.c
tests_fuzz_replay_cli_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/cli
tests_fuzz_replay_cli_LDADD = libspcli.la libspcore.la $(SP_DEP_LIBS)
TESTS += tests/fuzz/replay.sh
CLEANFILES += $(SP_FUZZ_REPLAY:=.err)
EXTRA_DIST += tests/fuzz/replay.sh tests/fuzz/build.sh tests/fuzz/regress tests/fuzz/seeds

fuzz: libspcore.la libspcli.la
	SP_FUZZ='$(SP_FUZZ)' CC_FUZZ='$(CC_FUZZ)' top_srcdir='$(top_srcdir)' top_builddir='$(top_builddir)' \
	SP_CORE_SOURCES='$(libspcore_la_SOURCES)' SP_CORE_LIBADD='$(libspcore_la_LIBADD)' \
	SP_CLI_SOURCES='$(libspcli_la_SOURCES)' SP_FUZZ_CPPFLAGS='$(filter -I%,$(AM_CPPFLAGS) $(CPPFLAGS))' \
	SP_FUZZ_LIBS='$(SP_DEP_LIBS) $(libspcli_la_LIBADD) $(LIBS)' $(SHELL) $(top_srcdir)/tests/fuzz/build.sh
CC_FUZZ = clang
.PHONY: fuzz
clean-local: clean-fuzz
clean-fuzz:
	-rm -rf fuzz
