# src/cli: the shardplan program.  One file per verb group.
bin_PROGRAMS += shardplan
shardplan_SOURCES = src/cli/cli.h src/cli/main.c src/cli/cli_util.c src/cli/cmd_describe.c \
	src/cli/cmd_estimate.c src/cli/cmd_simulate.c src/cli/cmd_run.c src/cli/cmd_plan.c \
	src/cli/cmd_calibrate.c src/cli/cmd_calibrate_local.c
shardplan_LDADD = libspcore.la $(SP_DEP_LIBS)
