# bench/mpi.mk: MPI communicator benchmark (make bench; run under mpirun):
# sp_comm MPI collectives vs the raw MPI collectives on the same sizes.
EXTRA_DIST += bench/bench_comm_mpi.c bench/bench_comm_data.h
if HAVE_MPI
EXTRA_PROGRAMS += bench/bench_comm_mpi
SP_BENCH_BINS += bench/bench_comm_mpi$(EXEEXT)
bench_bench_comm_mpi_SOURCES = bench/bench_comm_mpi.c bench/bench_comm_data.h
bench_bench_comm_mpi_LDADD = libspcore.la $(SP_DEP_LIBS)
CLEANFILES += bench/bench_comm_mpi$(EXEEXT)
endif
