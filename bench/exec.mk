# bench/exec.mk: the executor on one chip vs the measured SGEMM peak and copy bandwidth.
EXTRA_PROGRAMS += bench/bench_exec
SP_BENCH_BINS += bench/bench_exec$(EXEEXT)
bench_bench_exec_SOURCES = bench/bench_exec.c
bench_bench_exec_CPPFLAGS = $(SP_BENCH_CPPFLAGS)
bench_bench_exec_LDADD = libspcore.la $(SP_DEP_LIBS) $(BLAS_LIBS)
