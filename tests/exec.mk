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
# Golden outputs of an independent PyTorch implementation (tests/ref/): the C
# reference and shardplan run on every layout kind match them.  golden_cmp
# reads .npy in C, so make check needs no Python.  `make golden` regenerates
# the checkpoints and outputs (needs Debian's python3-torch).
check_PROGRAMS += tests/golden_cmp
tests_golden_cmp_SOURCES = tests/golden_cmp.c
tests_golden_cmp_CFLAGS = $(AM_CFLAGS)
tests_golden_cmp_LDADD = libspcore.la $(SP_DEP_LIBS)
TESTS += tests/golden.sh
EXTRA_DIST += tests/golden.sh tests/ref
AM_TESTS_ENVIRONMENT += GOLDEN_CMP='$(abs_top_builddir)/tests/golden_cmp'; export GOLDEN_CMP;
TORCH_PY = /usr/bin/python3
golden:
	$(TORCH_PY) $(srcdir)/tests/ref/gen_golden.py $(srcdir)/tests/ref
.PHONY: golden
