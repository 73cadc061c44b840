#!/bin/sh
# mpi_kill.sh: a 4-rank MPI job where one rank dies (SIGKILL) or hangs while
# the others are in an all-reduce must END, non-zero, within the timeout,
# with a message.  Skips (77) without MPI.
prog="${top_builddir:-.}/tests/check_comm_mpi"
if test -z "$MPIRUN" || test ! -x "$prog"; then
    echo "mpi_kill: SKIP: no MPI (MPIRUN='$MPIRUN', $prog not built)"
    exit 77
fi
OMPI_ALLOW_RUN_AS_ROOT=1; export OMPI_ALLOW_RUN_AS_ROOT
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
OMPI_MCA_btl=self,vader; export OMPI_MCA_btl
SHARDPLAN_COMM_TIMEOUT_S=5; export SHARDPLAN_COMM_TIMEOUT_S
log="mpi_kill.$$.log"
rc=0
for mode in kill hang; do
    start=$(date +%s)
    timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 4 "$prog" --$mode 2 >"$log" 2>&1
    st=$?
    el=$(( $(date +%s) - start ))
    sed 's/^/    /' "$log" | head -20
    if test "$st" -eq 124; then
        echo "mpi_kill: FAIL: --$mode: job still running after 60 s (hang)"; rc=1
    elif test "$st" -eq 0; then
        echo "mpi_kill: FAIL: --$mode: job exited 0"; rc=1
    elif test "$mode" = hang && ! grep -q "timed out after 5 s" "$log"; then
        echo "mpi_kill: FAIL: --hang: no timeout message"; rc=1
    elif test "$mode" = kill && ! grep -qi "signal 9\|killed\|failed as expected" "$log"; then
        echo "mpi_kill: FAIL: --kill: no message naming the failure"; rc=1
    else
        echo "mpi_kill: --$mode: ended with status $st after ${el} s, as required"
    fi
done
rm -f "$log"
exit $rc
