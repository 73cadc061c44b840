# bench/plan.mk: planner benchmarks (make bench; ./bench/bench_plan [runs] [frontier 0|1];
# whole process: sh bench/plan_process.sh [runs] from the build directory).
EXTRA_PROGRAMS += bench/bench_plan
SP_BENCH_BINS += bench/bench_plan$(EXEEXT)
bench_bench_plan_SOURCES = bench/bench_plan.c
bench_bench_plan_CPPFLAGS = $(SP_BENCH_CPPFLAGS)
bench_bench_plan_LDADD = libspcore.la $(SP_DEP_LIBS)
CLEANFILES += bench/bench_plan$(EXEEXT)
EXTRA_DIST += bench/plan_process.sh
# sh bench/plan_identical.sh OLD_SHARDPLAN [NEW]: plan --json of two builds, figure by figure
EXTRA_DIST += bench/plan_identical.sh
EXTRA_DIST += bench/autoconfig_process.sh
EXTRA_DIST += bench/fleet_process.sh bench/wall_ms.sh bench/plan_hetero.sh
