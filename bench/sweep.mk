# bench/sweep.mk: sweep points per second into SQLite (make bench; ./bench/bench_sweep [JOBS] [DIR]).
EXTRA_PROGRAMS += bench/bench_sweep
SP_BENCH_BINS += bench/bench_sweep$(EXEEXT)
bench_bench_sweep_SOURCES = bench/bench_sweep.c
bench_bench_sweep_CPPFLAGS = $(SP_BENCH_CPPFLAGS)
bench_bench_sweep_LDADD = libspcore.la $(SP_DEP_LIBS) $(SQLITE_LIBS)
CLEANFILES += bench/bench_sweep$(EXEEXT)
