# tests/comm.mk: communicator tests (threads backend).
if HAVE_CHECK
check_PROGRAMS += tests/check_comm
TESTS += tests/check_comm
tests_check_comm_SOURCES = tests/check_comm.c
tests_check_comm_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_comm_LDADD = $(SP_TEST_LIBS)
endif
