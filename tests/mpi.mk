# tests/mpi.mk
