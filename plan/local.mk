# plan/: the planner layer (GLPK MILP over the layout space, priced by
# costmodel/), the fleet solver, the fitting of profiles, autoconfig and
# sweeps.  Above costmodel/ and exec/; below cli/.
libspcore_la_SOURCES += plan/sp_plan.h plan/spi_plan.h plan/plan.c plan/plan_space.c plan/plan_stages.c plan/plan_groups.c plan/plan_offload.c plan/sp_fit.h plan/fit.c \
	plan/sp_autoconfig.h plan/autoconfig.c \
	plan/sp_fleet.h plan/spi_fleet.h plan/fleet.c
shardplaninclude_HEADERS += plan/sp_plan.h plan/sp_fit.h plan/sp_autoconfig.h plan/sp_fleet.h
# Sweeps: grids of points priced or planned into SQLite (doc/sweep.md).
libspcore_la_SOURCES += plan/sp_sweep.h plan/sweep.c
shardplaninclude_HEADERS += plan/sp_sweep.h
