# examples/: callers of the installed library.  Built by `make check` (and
# run as a test) so they keep compiling against the headers they show.
check_PROGRAMS += examples/autoconfig
TESTS += examples/autoconfig
examples_autoconfig_SOURCES = examples/autoconfig.c
examples_autoconfig_CFLAGS = $(AM_CFLAGS)
examples_autoconfig_LDADD = libshardplan.la $(SP_DEP_LIBS)
