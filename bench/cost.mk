# bench/cost.mk: cost-model evaluation rate (make bench).
EXTRA_PROGRAMS += bench/bench_cost
SP_BENCH_BINS += bench/bench_cost$(EXEEXT)
bench_bench_cost_SOURCES = bench/bench_cost.c
bench_bench_cost_CPPFLAGS = $(SP_BENCH_CPPFLAGS)
bench_bench_cost_LDADD = libspcore.la $(SP_DEP_LIBS)
# Before/after comparison of the cost model and plan in one run:
# sh bench/cost_compare.sh BASELINE_BUILD_DIR [ROUNDS] from the build directory.
EXTRA_DIST += bench/cost_compare.sh
