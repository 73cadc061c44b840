# tests/local_fid.mk: this machine's calibration and validation: case files,
# Kendall tau, the calibration fits; calibrate writes a loadable profile and
# validate runs a tiny case set.
if HAVE_CHECK
check_PROGRAMS += tests/check_validate
TESTS += tests/check_validate
endif
tests_check_validate_SOURCES = tests/check_validate.c
tests_check_validate_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_validate_LDADD = $(SP_TEST_LIBS)
TESTS += tests/cli_validate.sh
EXTRA_DIST += tests/cli_validate.sh tests/validate_tiny.cases
