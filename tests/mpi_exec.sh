#!/bin/sh
# mpi_exec.sh: `mpirun -np N shardplan run --backend mpi` against the threads
# backend on the same layout, on 2, 4 and 8 ranks: identical tokens, equal
# measured bytes (and equal to the prediction), bit-identical last logits;
# and `validate --backend mpi`.  The KV handoff between differing prefill and
# decode placements (all-to-all either way, all-gather, slice) included, and
# separate prefill and decode chip groups (4+2, 2+4, 4+4, a 2-stage prefill
# group into a 1-stage decode group: the KV transfer between them).
# offload (weights streamed from each rank's host arena, part of the KV
# cache there): host-link bytes moved = predicted, host arena = predicted.
# Stages of their own meshes (stage_mesh: 2+1, 2+4, 2·(2+1) and 1+2+4
# ranks, the stage hand-off between them).
# A rank that fails makes the job end (MPI_Abort), not hang.  Skips (77)
# without MPI.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
. "${top_srcdir:-.}/tests/json.sh"
if test -z "${MPIRUN:-}" || ! "$SHARDPLAN" run --help | grep -q "backend mpi"; then
    echo "mpi_exec: SKIP: no MPI (MPIRUN='${MPIRUN:-}')"
    exit 77
fi
OMPI_ALLOW_RUN_AS_ROOT=1; export OMPI_ALLOW_RUN_AS_ROOT
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
OMPI_MCA_btl=self,vader; export OMPI_MCA_btl
OMPI_MCA_rmaps_base_oversubscribe=1; export OMPI_MCA_rmaps_base_oversubscribe
SHARDPLAN_COMM_TIMEOUT_S=${SHARDPLAN_COMM_TIMEOUT_S:-60}; export SHARDPLAN_COMM_TIMEOUT_S
tmp=/tmp/sp_mpi_exec.$$
mkdir -p $tmp
trap 'rm -rf $tmp' EXIT
mpi() { # np, args...
    np=$1; shift
    timeout 300 "$MPIRUN" --oversubscribe --bind-to none -np "$np" "$SHARDPLAN" run --backend mpi "$@" </dev/null
}
fail=0
n=0
while read -r np model layout; do
    case "$np" in ''|'#'*) continue ;; esac
    n=$((n + 1))
    args="--model $model --batch 8 --prompt 5 --gen 6 --seed 7 --layout $layout --json"
    if ! "$SHARDPLAN" run $args --logits $tmp/t.bin >$tmp/t.json 2>$tmp/t.err; then
        echo "FAIL: threads $model $layout"; head -5 $tmp/t.err; fail=$((fail + 1)); continue
    fi
    if ! mpi "$np" $args --logits $tmp/m.bin >$tmp/m.json 2>$tmp/m.err; then
        echo "FAIL: mpi -np $np $model $layout"; head -5 $tmp/m.err; fail=$((fail + 1)); continue
    fi
    { json_check '$1 == "threads"' $tmp/t.json /backend && json_check '$1 == "mpi"' $tmp/m.json /backend &&
      json_same $tmp/t.json $tmp/m.json /tokens /comm/measured_bytes /comm/predicted_bytes /comm/measured_recv \
          /comm/predicted_recv /comm/expected_bytes /comm/expected_recv /comm/token_bytes /memory \
          /comm/host_link_measured_bytes /comm/host_link_predicted_bytes &&
      json_check '$1 == $2' -n $tmp/m.json /comm /host_link_measured_bytes /host_link_predicted_bytes &&
      json_check '$1 == $2' -n $tmp/m.json /memory /host_allocated_bytes_per_chip /host_predicted_bytes_per_chip &&
      json_check '$1 == $2' $tmp/m.json /comm /measured_bytes /predicted_bytes &&
      json_check '$1 == 0' -n $tmp/m.json /comm/mismatches &&
      json_check '$1 == $2' -n $tmp/m.json /memory /allocated_bytes_per_chip /predicted_bytes_per_chip; } ||
        { echo "FAIL: -np $np $model $layout: results differ"; fail=$((fail + 1)); }
    cmp -s $tmp/t.bin $tmp/m.bin || { echo "FAIL: -np $np $model $layout: last logits not bit-identical"; fail=$((fail + 1)); }
done <<'EOF2'
2 tiny-llama mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
2 tiny-gpt2 replicas=2,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
2 tiny-llama stages=2,microbatches=2,mesh=1x1x1,weights=int8,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
4 tiny-llama mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch
4 tiny-palm mesh=2x2x1,weights=int8,kv=f32,prefill=wg-x/heads,decode=wg-x/heads
4 tiny-llama stages=2,microbatches=2,mesh=2x1x1,weights=bf16,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
3 tiny-llama stages=3,microbatches=4,mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,stage_layers=2,1,1
8 tiny-llama mesh=2x2x2,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads
4 tiny-llama stages=4,microbatches=1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
2 tiny-llama mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,prefill_chunk=2,prefill_tokens=1
4 tiny-palm stages=2,microbatches=2,mesh=1x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads,prefill_chunk=2,prefill_tokens=1
8 tiny-gpt2 mesh=2x2x2,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch,prefill_chunk=8
6 tiny-llama prefill.mesh=4x1x1,decode.mesh=2x1x1,weights=f32,kv=f32
6 tiny-palm prefill.mesh=2x1x1,decode.mesh=4x1x1,weights=f32,kv=f32,decode=ws2d/batch
8 tiny-gpt2 prefill.mesh=2x2x1,decode.mesh=4x1x1,weights=f32,kv=f32,prefill=wg-xyz/batch,decode=ws1d/heads
6 tiny-llama prefill.mesh=2x1x1,prefill.stages=2,decode.mesh=2x1x1,weights=f32,kv=f32
8 tiny-palm mesh=2x2x1,groups=separate,weights=f32,kv=f32,decode=ws2d/batch
1 tiny-llama mesh=1x1x1,weights=f32,kv=f32,offload_weights=2,offload_kv=0.5
2 tiny-gpt2 mesh=2x1x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=ws2d/heads,offload_weights=2,offload_kv=0.5
4 tiny-llama stages=2,microbatches=2,mesh=2x1x1,weights=f32,kv=f32,offload_weights=1,2,offload_kv=0.5
4 tiny-gpt2 mesh=2x2x1,weights=int8,kv=f32,prefill=ws2d/heads,decode=ws2d/batch,offload_weights=1,offload_kv=0.5
4 tiny-palm stages=2,microbatches=1,mesh=1x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads
8 tiny-gpt2 mesh=2x2x2,weights=int8,kv=f32,prefill=wg-xy/heads,decode=wg-xy/heads
8 tiny-gpt2 mesh=2x2x2,weights=f32,kv=f32,prefill=wg-xyz/batch,decode=wg-xyz/batch
8 tiny-llama mesh=2x2x2,weights=fp8,kv=bf16,prefill=wg-xyz/heads,decode=ws2d/batch
3 tiny-llama stages=2,microbatches=2,stage_mesh=2x1x1,1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
6 tiny-llama stages=2,microbatches=2,stage_mesh=2x1x1,4x1x1,stage_layers=3,1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads
6 tiny-gpt2 stages=2,microbatches=2,replicas=2,stage_mesh=2x1x1,1x1x1,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-x/heads
7 tiny-llama stages=3,microbatches=2,stage_mesh=1x1x1,2x1x1,4x1x1,stage_layers=1,2,1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch
8 tiny-gpt2 mesh=2x2x2,weights=f32,kv=f32,prefill=wg-xyz/batch,decode=ws2d/batch
8 tiny-gpt2 mesh=2x2x2,weights=f32,kv=f32,prefill=ws2d/batch,decode=wg-x/heads
8 tiny-gpt2 mesh=2x2x2,weights=bf16,kv=f32,prefill=wg-x/heads,decode=wg-xy/heads
8 tiny-llama mesh=2x2x2,weights=f32,kv=f32,prefill=wg-xyz/batch,decode=ws2d/heads
8 tiny-palm mesh=2x2x2,weights=f32,kv=f32,prefill=wg-x/heads,decode=wg-xy/heads
4 tiny-llama mesh=2x2x1,weights=f32,kv=f32,prefill=ws1d/batch,decode=ws1d/heads
2 tiny-moe replicas=2,experts=2,capacity=4,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
4 tiny-moe replicas=2,experts=2,mesh=2x1x1,capacity=4,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads
8 tiny-moe replicas=4,experts=4,mesh=2x1x1,capacity=4,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
8 tiny-moe replicas=8,experts=8,capacity=4,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
4 tiny-moe mesh=2x2x1,capacity=4,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads
4 tiny-moe replicas=2,mesh=2x1x1,capacity=4,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
4 tiny-moe-shared replicas=2,experts=2,mesh=2x1x1,capacity=4,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
2 tiny-moe-every2 replicas=2,experts=2,capacity=4,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
4 tiny-moe-every2 replicas=2,experts=2,mesh=2x1x1,capacity=4,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads
4 tiny-moe-every2 mesh=2x2x1,capacity=4,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/heads
4 tiny-moe-every2 replicas=2,mesh=2x1x1,capacity=4,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
4 tiny-moe-every2 stages=2,microbatches=2,stage_layers=1,3,replicas=2,experts=2,capacity=4,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
EOF2
# --trace: each rank writes its chip's timeline to FILE.<chip>, valid JSON, its chip's steps only
mpi 2 --model tiny-llama --batch 2 --prompt 4 --gen 3 --trace $tmp/tr.json \
    --layout mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads >$tmp/tr.out 2>$tmp/tr.err ||
    { echo "FAIL: --trace under mpi"; cat $tmp/tr.err; fail=$((fail + 1)); }
for r in 0 1; do
    # its complete events, at least one, all on its own chip
    json_check "\$1 == $r" -n -w /ph=X $tmp/tr.json.$r '/traceEvents/*' /pid ||
        { echo "FAIL: --trace under mpi: chip $r"; fail=$((fail + 1)); }
done
# --trace of separate groups (4 prefill + 2 decode ranks): each rank's file holds its own chip
# (job ranks: the decode group after the prefill group) and its KV transfer messages
mpi 6 --model tiny-llama --batch 8 --prompt 5 --gen 3 --trace $tmp/tg.json \
    --layout prefill.mesh=4x1x1,decode.mesh=2x1x1,weights=f32,kv=f32 >$tmp/tg.out 2>$tmp/tg.err ||
    { echo "FAIL: --trace of separate groups under mpi"; cat $tmp/tg.err; fail=$((fail + 1)); }
for r in 0 1 2 3 4 5; do
    case $r in [0-3]) dir=send ;; *) dir=recv ;; esac
    json_check "\$1 == $r" -n -w /ph=X $tmp/tg.json.$r '/traceEvents/*' /pid &&
        "$JSONQ" -w /ph=X $tmp/tg.json.$r '/traceEvents/*' /args/id | grep -q "^kv/$dir/" ||
        { echo "FAIL: --trace of separate groups under mpi: chip $r"; fail=$((fail + 1)); }
done
# every rank rejects a layout alike: exit 2, one message, no hang
mpi 2 --model tiny-llama --batch 3 --prompt 4 --gen 2 --layout mesh=3x1x1,prefill=ws1d/heads,decode=ws1d/heads \
    >$tmp/b.out 2>$tmp/b.err
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "FAIL: bad layout under mpi: exit $rc"; fail=$((fail + 1)); }
# the world size must match the layout
mpi 2 --model tiny-llama --batch 4 --prompt 4 --gen 2 --layout mesh=2x2x1,prefill=ws1d/heads,decode=ws1d/heads \
    >$tmp/b.out 2>$tmp/b.err
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "FAIL: world size mismatch under mpi: exit $rc"; fail=$((fail + 1)); }
grep -q "4" $tmp/b.err || { echo "FAIL: world size mismatch: no reason"; cat $tmp/b.err; fail=$((fail + 1)); }
# validate --backend mpi: a chip per rank runs the set's cases of 2 chips (its 1-chip case is
# skipped and named), reported as on threads; no case of 3 chips under -np 3: exit 2, the reason
cases=${top_srcdir:-.}/tests/validate_tiny.cases
vmpi() { # np, args...
    np=$1; shift
    timeout 300 "$MPIRUN" --oversubscribe --bind-to none -np "$np" "$SHARDPLAN" validate --backend mpi "$@" </dev/null
}
vmpi 2 --hw a100-80g --cases $cases --repeat 1 --min-seconds 0 --json >$tmp/v.json 2>$tmp/v.err ||
    { echo "FAIL: validate --backend mpi"; head -5 $tmp/v.err; fail=$((fail + 1)); }
# rank 0 alone prints: one JSON document
{ json_check '$1 == "mpi" && $2 == 2 && $3 == 1' $tmp/v.json "" /backend /cases_run /cases_skipped &&
  json_check '$1 == 2 && $2 == 1' -n $tmp/v.json '/cases/*' /chips /runs &&
  json_check '$1 > 0 && $2 > 0 && $3 > 0 && $4 > 0' -n $tmp/v.json '/cases/*' /prefill_s/measured \
      /prefill_s/predicted /decode_step_s/measured /decode_step_s/predicted; } ||
    { echo "FAIL: validate --backend mpi: report"; fail=$((fail + 1)); }
grep -q "validate_tiny.cases:2 (tiny-llama, 1 chips)" $tmp/v.err ||
    { echo "FAIL: validate --backend mpi: the skipped case is not named"; cat $tmp/v.err; fail=$((fail + 1)); }
vmpi 3 --hw a100-80g --cases $cases --repeat 1 --min-seconds 0 >$tmp/v.out 2>$tmp/v.err
rc=$?
[ $rc -eq 2 ] && grep -q "has 3 chips" $tmp/v.err ||
    { echo "FAIL: validate --backend mpi -np 3: exit $rc"; cat $tmp/v.err; fail=$((fail + 1)); }
[ $fail -eq 0 ] && echo "mpi_exec: $n layouts passed" || echo "mpi_exec: $fail failed"
[ $fail -eq 0 ]
