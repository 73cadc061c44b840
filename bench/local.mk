# bench/: benchmarks (napkin math in comments, measured peak beside each figure).
# Built by `make bench`, not by `make check`.
# benchmarks run from the build tree read the source tree's bundled data
SP_BENCH_CPPFLAGS = $(AM_CPPFLAGS) -DSP_BUILDDIR='"$(abs_top_builddir)/bench"' -DSP_SRCDATADIR='"$(abs_top_srcdir)/data"'
include bench/comm.mk
include bench/kern.mk
include bench/cost.mk
include bench/plan.mk
include bench/sweep.mk
include bench/exec.mk
include bench/mpi.mk
bench: $(SP_BENCH_BINS)
.PHONY: bench
