#!/bin/sh
# nccl_comm.sh: the NCCL communicator backend under mpirun, one rank per GPU:
# 2, 4 and 8 ranks as far as GPUs are visible, then a hang (one rank stuck)
# that must end by the others' timeout.  Skips (77) without the CUDA build,
# without MPI, or with fewer than 2 GPUs.
prog="${top_builddir:-.}/tests/check_comm_nccl"
if test -z "$MPIRUN" || test ! -x "$prog"; then
    echo "nccl_comm: SKIP: NCCL backend not built (MPIRUN='$MPIRUN', $prog not built)"
    exit 77
fi
ngpu=$("$prog" --probe)
st=$?
if test "$st" -ne 0; then
    echo "$ngpu"
    test "$st" -eq 77 && exit 77
    echo "nccl_comm: FAIL: $prog --probe exited $st"
    exit 1
fi
OMPI_ALLOW_RUN_AS_ROOT=1; export OMPI_ALLOW_RUN_AS_ROOT
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
OMPI_MCA_btl=self,vader; export OMPI_MCA_btl
SHARDPLAN_COMM_TIMEOUT_S=${SHARDPLAN_COMM_TIMEOUT_S:-60}; export SHARDPLAN_COMM_TIMEOUT_S
echo "nccl_comm: $ngpu GPUs visible"
for n in 2 4 8; do
    test "$n" -le "$ngpu" || break
    echo "== mpirun -np $n check_comm_nccl"
    timeout 300 "$MPIRUN" --bind-to none -np "$n" "$prog" || {
        echo "nccl_comm: FAIL with $n ranks"
        exit 1
    }
done
echo "== mpirun -np 2 check_comm_nccl --hang 1 (timeout 5 s)"
log="nccl_comm.$$.log"
SHARDPLAN_COMM_TIMEOUT_S=5 timeout 90 "$MPIRUN" --bind-to none -np 2 "$prog" --hang 1 >"$log" 2>&1
st=$?
sed 's/^/    /' "$log" | head -20
rc=0
if test "$st" -eq 124; then
    echo "nccl_comm: FAIL: --hang: job still running after 90 s"; rc=1
elif test "$st" -eq 0; then
    echo "nccl_comm: FAIL: --hang: job exited 0"; rc=1
elif ! grep -q "timed out after 5 s" "$log"; then
    echo "nccl_comm: FAIL: --hang: no timeout message"; rc=1
else
    echo "nccl_comm: --hang: ended with status $st by the timeout, as required"
fi
rm -f "$log"
exit $rc
