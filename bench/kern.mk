# bench/kern.mk: kernel benchmark (sgemm peak, memcpy bandwidth, sp_kern_matmul).
EXTRA_PROGRAMS += bench/bench_kern
SP_BENCH_BINS += bench/bench_kern$(EXEEXT)
bench_bench_kern_SOURCES = bench/bench_kern.c
bench_bench_kern_LDADD = libspcore.la $(SP_DEP_LIBS) $(BLAS_LIBS)
