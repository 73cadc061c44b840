# tests/exec.mk: the executor against the single-chip reference, every layout in the table.
if HAVE_CHECK
check_PROGRAMS += tests/check_exec
TESTS += tests/check_exec
endif
tests_check_exec_SOURCES = tests/check_exec.c
tests_check_exec_CFLAGS = $(SP_TEST_CFLAGS)
tests_check_exec_LDADD = $(SP_TEST_LIBS)
# shardplan run: fixed layouts and --layout auto (threads); the MPI backend
# against the threads backend under mpirun (skips without MPI).
TESTS += tests/cli_run.sh tests/cli_run_hf.sh tests/mpi_exec.sh
EXTRA_DIST += tests/cli_run.sh tests/cli_run_hf.sh tests/mpi_exec.sh
# shardplan run --backend cuda against the threads backend (1 chip; 2+ under
# mpirun with as many GPUs); skips (77) without the CUDA build or a GPU.
TESTS += tests/cuda_run.sh
EXTRA_DIST += tests/cuda_run.sh
