# src/cli: the shardplan program.  One file per verb group.
# The verbs are a convenience library so that the command-line fuzz harness
# (tests/fuzz/fuzz_cli.c) links them without main.c.
noinst_LTLIBRARIES += libspcli.la
libspcli_la_SOURCES = src/cli/cli.h src/cli/cli_util.c src/cli/cmd_describe.c \
	src/cli/cmd_estimate.c src/cli/cmd_simulate.c src/cli/cmd_run.c src/cli/cmd_plan.c src/cli/cmd_fleet.c \
	src/cli/cmd_calibrate.c src/cli/cmd_calibrate_local.c src/cli/cmd_autoconfig.c \
	src/cli/cmd_sweep.c src/cli/cmd_validate.c src/cli/cmd_report.c src/cli/cli_fig.h src/cli/cli_fig.c
# the report's figures: PLplot (its svg and pngcairo drivers)
libspcli_la_LIBADD = $(PLPLOT_LIBS)
bin_PROGRAMS += shardplan
shardplan_SOURCES = src/cli/main.c
shardplan_LDADD = libspcli.la libspcore.la $(SP_DEP_LIBS)
# the program (not the library) knows its build tree, used only when it runs from there
shardplan_CPPFLAGS = $(AM_CPPFLAGS) -DSP_BUILDDIR='"$(abs_top_builddir)"' -DSP_SRCDATADIR='"$(abs_top_srcdir)/data"'
