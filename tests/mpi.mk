# tests/mpi.mk: multi-process tests of the MPI backend (under mpirun).
# tests/check_comm_mpi is an MPI program run by tests/mpi_comm.sh and
# tests/mpi_kill.sh; both exit 77 (skip) when configure found no MPI.
TESTS += tests/mpi_comm.sh tests/mpi_kill.sh tests/cuda_skip.sh
EXTRA_DIST += tests/mpi_comm.sh tests/mpi_kill.sh tests/cuda_skip.sh
# tests/mpi_sweep.sh: `mpirun -np 3 shardplan sweep` against one process,
# killed and resumed; skips (77) without MPI.
TESTS += tests/mpi_sweep.sh
EXTRA_DIST += tests/mpi_sweep.sh tests/sweep_kill.sh
if HAVE_MPI
check_PROGRAMS += tests/check_comm_mpi
tests_check_comm_mpi_SOURCES = tests/check_comm_mpi.c tests/mpi_harness.h
tests_check_comm_mpi_CFLAGS = $(AM_CFLAGS)
tests_check_comm_mpi_LDADD = libspcore.la $(SP_DEP_LIBS)
endif
# The NCCL backend: tests/check_comm_nccl (an MPI program on device buffers)
# run by tests/nccl_comm.sh, which skips (77) without the CUDA build or
# with fewer than 2 GPUs.
TESTS += tests/nccl_comm.sh
EXTRA_DIST += tests/nccl_comm.sh
if HAVE_CUDA
check_PROGRAMS += tests/check_comm_nccl
tests_check_comm_nccl_SOURCES = tests/check_comm_nccl.c tests/mpi_harness.h
tests_check_comm_nccl_CFLAGS = $(AM_CFLAGS)
tests_check_comm_nccl_LDADD = libspcore.la $(SP_DEP_LIBS) $(NCCL_LIBS)
endif
