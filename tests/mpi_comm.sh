#!/bin/sh
# mpi_comm.sh: the MPI communicator backend under mpirun, 2, 4 and 8 ranks
# (oversubscribed: CI has 2 cores).  Skips (77) without MPI.
prog="${top_builddir:-.}/tests/check_comm_mpi"
if test -z "$MPIRUN" || test ! -x "$prog"; then
    echo "mpi_comm: SKIP: no MPI (MPIRUN='$MPIRUN', $prog not built)"
    exit 77
fi
OMPI_ALLOW_RUN_AS_ROOT=1; export OMPI_ALLOW_RUN_AS_ROOT
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
OMPI_MCA_btl=self,vader; export OMPI_MCA_btl
OMPI_MCA_rmaps_base_oversubscribe=1; export OMPI_MCA_rmaps_base_oversubscribe
SHARDPLAN_COMM_TIMEOUT_S=${SHARDPLAN_COMM_TIMEOUT_S:-60}; export SHARDPLAN_COMM_TIMEOUT_S
for n in 2 4 8; do
    echo "== mpirun -np $n check_comm_mpi"
    timeout 300 "$MPIRUN" --oversubscribe --bind-to none -np "$n" "$prog" || {
        echo "mpi_comm: FAIL with $n ranks"
        exit 1
    }
done
exit 0
