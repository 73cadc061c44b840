# tests/desc.mk: model and hardware descriptions, their bad-input golden
# cases (data/invalid/<case>/) and the describing CLI verbs.
if HAVE_CHECK
check_PROGRAMS += tests/check_model tests/check_hw
TESTS += tests/check_model tests/check_hw
endif
tests_check_model_SOURCES = tests/check_model.c
tests_check_model_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_model_LDADD = $(SP_TEST_LIBS)
tests_check_hw_SOURCES = tests/check_hw.c
tests_check_hw_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_hw_LDADD = $(SP_TEST_LIBS)

TESTS += tests/invalid.sh tests/cli_describe.sh tests/cli_refuse.sh
EXTRA_DIST += tests/invalid.sh tests/cli_describe.sh tests/cli_refuse.sh data/invalid data/hf
