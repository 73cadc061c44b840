# bench/: benchmarks (napkin math in comments, measured peak beside each figure).
# Built by `make bench`, not by `make check`.
include bench/comm.mk
include bench/kern.mk
include bench/cost.mk
include bench/plan.mk
include bench/exec.mk
include bench/mpi.mk
bench: $(SP_BENCH_BINS)
.PHONY: bench
