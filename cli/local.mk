# cli/: the shardplan program (the top layer).  One file per verb group.
# The verbs are a convenience library so that the command-line fuzz harness
# (tests/fuzz/fuzz_cli.c) links them without main.c.
noinst_LTLIBRARIES += libspcli.la
libspcli_la_SOURCES = cli/cli.h cli/cli_util.c cli/cmd_describe.c \
	cli/cmd_estimate.c cli/cmd_simulate.c cli/cmd_run.c cli/cmd_plan.c cli/cmd_fleet.c \
	cli/cmd_calibrate.c cli/cmd_calibrate_local.c cli/cmd_autoconfig.c \
	cli/cmd_sweep.c cli/cmd_validate.c cli/cmd_report.c cli/cli_fig.h cli/cli_fig.c
# the report's figures: PLplot (its svg and pngcairo drivers), opened when
# the first figure is drawn (cli_fig.c): its header here, no link
bin_PROGRAMS += shardplan
shardplan_SOURCES = cli/main.c
shardplan_LDADD = libspcli.la libspcore.la $(SP_DEP_LIBS)
# the program (not the library) knows its build tree, used only when it runs from there
shardplan_CPPFLAGS = $(AM_CPPFLAGS) -DSP_BUILDDIR='"$(abs_top_builddir)"' -DSP_SRCDATADIR='"$(abs_top_srcdir)/data"'
