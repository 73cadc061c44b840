# bench/comm.mk: communicator benchmarks (make bench).
EXTRA_PROGRAMS += bench/bench_comm_threads
SP_BENCH_BINS += bench/bench_comm_threads$(EXEEXT)
bench_bench_comm_threads_SOURCES = bench/bench_comm_threads.c bench/bench_comm_data.h
bench_bench_comm_threads_LDADD = libspcore.la $(SP_DEP_LIBS)
CLEANFILES += bench/bench_comm_threads$(EXEEXT)
