# src/plan.mk: the planner (GLPK MILP over the layout space, priced by costmodel/).
libspcore_la_SOURCES += src/sp_plan.h src/spi_plan.h src/plan.c src/plan_space.c src/plan_stages.c src/sp_fit.h src/fit.c \
	src/sp_autoconfig.h src/autoconfig.c \
	src/sp_fleet.h src/spi_fleet.h src/fleet.c
shardplaninclude_HEADERS += src/sp_plan.h src/sp_fit.h src/sp_autoconfig.h src/sp_fleet.h
# Sweeps: grids of points priced or planned into SQLite (doc/sweep.md).
libspcore_la_SOURCES += src/sp_sweep.h src/sweep.c
shardplaninclude_HEADERS += src/sp_sweep.h
