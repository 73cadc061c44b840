#!/bin/sh
# Ragged batches on the command line: estimate --workload prices a batch by
# its actual tokens beside the same batch padded (text and JSON), equal
# lengths price as the padded batch, bad workload files exit 2 naming the
# file, line and field, and layouts the lowering does not take are refused
# by name (exit 2).  run --workload executes the batch (threads, and under
# mpirun when MPI is there): the same tokens on every layout, each sequence
# its own gen of them, bytes and memory as predicted.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
. "${top_srcdir:-.}/tests/json.sh"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
printf 'prompt,gen\n3,4\n7,2\n1,6\n5,3\n' >"$tmp/w.csv"
printf '{"sequences": [{"prompt": 6, "gen": 3}, {"prompt": 6, "gen": 3}]}\n' >"$tmp/eq.json"
LAY="mesh=2x1x1,weights=bf16,prefill=ws1d/heads,decode=ws1d/heads"
E="estimate --model llama2-7b --hw h100 --chips 2 --layout $LAY"
"$SHARDPLAN" $E --workload "$tmp/w.csv" --json >"$tmp/w.json" 2>"$tmp/w.err" ||
    { echo "FAIL: estimate --workload: exit $?"; cat "$tmp/w.err"; fail=$((fail + 1)); }
json_check '$1 == 4 && $2 == 16 && $3 == 15 && $4 == 9' "$tmp/w.json" /workload \
    /sequences /prompt_tokens /gen_tokens /max_context &&
json_check '$1 == 4 && $2 == 7 && $3 == 6' "$tmp/w.json" /padded/workload /batch /prompt /gen &&
json_check '$1 > 0 && $1 < $2 && $3 < $4 && $5 < $6' "$tmp/w.json" "" /prefill_s /padded/prefill_s \
    /decode_s /padded/decode_s /memory_per_chip/kv /padded/memory_per_chip/kv ||
    { echo "FAIL: estimate --workload: ragged not below padded"; fail=$((fail + 1)); }
"$SHARDPLAN" $E --workload "$tmp/w.csv" >"$tmp/w.txt" 2>&1 && grep -q '^ragged vs padded' "$tmp/w.txt" &&
    grep -q '16 prompt tokens' "$tmp/w.txt" ||
    { echo "FAIL: estimate --workload text"; cat "$tmp/w.txt"; fail=$((fail + 1)); }
# equal lengths: the same figures as the padded batch, and as --batch/--prompt/--gen
"$SHARDPLAN" $E --workload "$tmp/eq.json" --json >"$tmp/eq.out" &&
    "$SHARDPLAN" $E --batch 2 --prompt 6 --gen 3 --json >"$tmp/u.out" ||
    { echo "FAIL: estimate of equal lengths"; fail=$((fail + 1)); }
json_check '$1 == $2 && $3 == $4 && $5 == $6' "$tmp/eq.out" "" /prefill_s /padded/prefill_s /decode_s \
    /padded/decode_s /total_s /padded/total_s &&
    json_same "$tmp/eq.out" "$tmp/u.out" /total_s /tokens_per_s /memory_per_chip ||
    { echo "FAIL: equal lengths do not price as the padded batch"; fail=$((fail + 1)); }
# simulate: every decode step, beside the closed form
"$SHARDPLAN" simulate --model llama2-7b --hw h100 --chips 2 --layout $LAY --workload "$tmp/w.csv" --json \
    --trace "$tmp/t.json" >"$tmp/sim.json" 2>"$tmp/sim.err" ||
    { echo "FAIL: simulate --workload: exit $?"; cat "$tmp/sim.err"; fail=$((fail + 1)); }
json_check '$1 == $2 && $3 == $4 && abs($5 - $6) <= 0.01 * $6 && $7 > 0' "$tmp/sim.json" "" /prefill_s \
    /closed_form_prefill_s /decode_step_s /closed_form_decode_step_s /decode_s /closed_form_decode_s /events ||
    { echo "FAIL: simulate --workload figures"; fail=$((fail + 1)); }
[ "$("$JSONQ" -l "$tmp/t.json" /traceEvents)" -gt 0 ] 2>/dev/null ||
    { echo "FAIL: simulate --workload --trace: no events"; fail=$((fail + 1)); }
# simulate with replicas: each replica its own sequences; the slowest replica's prefill as the closed form's
"$SHARDPLAN" simulate --model llama2-7b --hw h100 --chips 4 --layout "replicas=2,$LAY" --workload "$tmp/w.csv" --json \
    >"$tmp/simr.json" 2>"$tmp/sim.err" &&
    json_check '$1 == $2 && $3 == $4 && abs($5 - $6) <= 0.01 * $6' "$tmp/simr.json" "" /prefill_s \
    /closed_form_prefill_s /decode_step_s /closed_form_decode_step_s /decode_s /closed_form_decode_s ||
    { echo "FAIL: simulate --workload with replicas"; cat "$tmp/sim.err"; fail=$((fail + 1)); }
# bad input: exit 2, file:line and field
expect2() {   # expect2 NAME PATTERN ARGS...
    _n=$1 _p=$2; shift 2
    "$SHARDPLAN" "$@" >/dev/null 2>"$tmp/err"; rc=$?
    [ $rc -eq 2 ] && grep -q -- "$_p" "$tmp/err" ||
        { echo "FAIL: $_n: exit $rc (want 2), stderr:"; cat "$tmp/err"; echo "  (want '$_p')"; fail=$((fail + 1)); }
}
# plan --workload: every layout priced by the actual tokens; the chosen layout's figures are
# what estimate --workload says of it
"$SHARDPLAN" plan --model llama2-7b --hw h100 --chips 2 --workload "$tmp/w.csv" --json >"$tmp/plan.json" \
    2>"$tmp/plan.err" || { echo "FAIL: plan --workload: exit $?"; cat "$tmp/plan.err"; fail=$((fail + 1)); }
PL=$("$JSONQ" "$tmp/plan.json" /chosen/layout_text 2>/dev/null)
"$SHARDPLAN" estimate --model llama2-7b --hw h100 --chips 2 --layout "$PL" --workload "$tmp/w.csv" --json \
    >"$tmp/plane.json" 2>"$tmp/plan.err" &&
    json_check '$1 == 4 && $2 == 16' "$tmp/plan.json" /ragged_workload /sequences /prompt_tokens &&
    [ "$("$JSONQ" "$tmp/plan.json" /chosen/costs/total_s)" = "$("$JSONQ" "$tmp/plane.json" /total_s)" ] ||
    { echo "FAIL: plan --workload: chosen $PL not priced as estimate --workload"; cat "$tmp/plan.err"; fail=$((fail + 1)); }
"$SHARDPLAN" plan --model llama2-7b --hw h100 --chips 2 --workload "$tmp/w.csv" >"$tmp/plan.txt" 2>&1 &&
    grep -q '^workload: 4 sequences, 16 prompt tokens' "$tmp/plan.txt" ||
    { echo "FAIL: plan --workload text"; cat "$tmp/plan.txt"; fail=$((fail + 1)); }
# a length distribution: the batch it expands into (shares 3 and 1 of 8: 6 and 2 sequences)
printf '{"distribution": {"sequences": 8, "mix": [{"prompt": 64, "gen": 8, "share": 3}, {"prompt": 8, "gen": 32, "share": 1}]}}' \
    >"$tmp/dist.json"
"$SHARDPLAN" plan --model llama2-7b --hw h100 --chips 2 --workload "$tmp/dist.json" --json >"$tmp/pland.json" \
    2>"$tmp/plan.err" && json_check '$1 == 8 && $2 == 6 * 64 + 2 * 8 && $3 == 6 * 8 + 2 * 32' "$tmp/pland.json" \
    /ragged_workload /sequences /prompt_tokens /gen_tokens ||
    { echo "FAIL: plan --workload of a distribution"; cat "$tmp/plan.err"; fail=$((fail + 1)); }
expect2 "plan --workload --offload" "workload file.*offload: not implemented" plan --model llama2-7b --hw h100 \
    --chips 2 --workload "$tmp/w.csv" --offload
expect2 "plan --workload --batch" "replaces --batch" plan --model llama2-7b --hw h100 --chips 2 \
    --workload "$tmp/w.csv" --batch 4
printf '3,4\n7,x\n' >"$tmp/bad1.csv"
expect2 "bad gen" "bad1.csv:2:.*gen" $E --workload "$tmp/bad1.csv"
printf '3,4\n0,2\n' >"$tmp/bad2.csv"
expect2 "zero prompt" "bad2.csv:2:.*prompt" $E --workload "$tmp/bad2.csv"
printf '{"sequences": [{"prompt": 3}]}' >"$tmp/bad3.json"
expect2 "json field" "bad3.json: /sequences/0" $E --workload "$tmp/bad3.json"
expect2 "missing file" "nope.csv" $E --workload "$tmp/nope.csv"
expect2 "with --batch" "replaces --batch" $E --workload "$tmp/w.csv" --batch 4
expect2 "KV handoff" "ragged batches with a KV handoff" estimate --model llama2-7b --hw h100 --chips 2 \
    --layout mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/batch --workload "$tmp/w.csv"
expect2 "weight-gathered, batch-sharded" "ragged batches with wg-x and batch-sharded attention" estimate \
    --model llama2-7b --hw h100 --chips 4 --layout mesh=2x2x1,prefill=wg-x/batch,decode=wg-x/batch --workload "$tmp/w.csv"
# weight-gathered FFNs: priced by the fullest sequence block's tokens, below the padded batch
"$SHARDPLAN" estimate --model llama2-7b --hw h100 --chips 2 --layout mesh=2x1x1,prefill=wg-x/heads,decode=wg-x/heads \
    --workload "$tmp/w.csv" --json >"$tmp/wg.json" 2>"$tmp/wg.err" &&
    json_check '$1 > 0 && $1 < $2 && $3 < $4' "$tmp/wg.json" "" /prefill_s /padded/prefill_s /decode_s /padded/decode_s ||
    { echo "FAIL: estimate --workload, weight-gathered"; cat "$tmp/wg.err"; fail=$((fail + 1)); }
# batch-sharded attention: priced by each block's tokens, below the padded batch
"$SHARDPLAN" estimate --model llama2-7b --hw h100 --chips 2 --layout mesh=2x1x1,prefill=ws1d/batch,decode=ws1d/batch \
    --workload "$tmp/w.csv" --json >"$tmp/wb.json" 2>"$tmp/wb.err" &&
    json_check '$1 > 0 && $1 < $2 && $3 < $4' "$tmp/wb.json" "" /prefill_s /padded/prefill_s /decode_s /padded/decode_s ||
    { echo "FAIL: estimate --workload, batch-sharded attention"; cat "$tmp/wb.err"; fail=$((fail + 1)); }
# micro-batches: each micro-batch its own sequences and programs; the simulator's flow shop agrees
for lay in microbatches=2,mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads \
           stages=2,microbatches=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads; do
    "$SHARDPLAN" simulate --model llama2-7b --hw h100 --chips 2 --layout "$lay" --workload "$tmp/w.csv" --json \
        >"$tmp/simm.json" 2>"$tmp/sim.err" &&
        json_check '$1 == $2 && $3 == $4 && abs($5 - $6) <= 0.01 * $6' "$tmp/simm.json" "" /prefill_s \
        /closed_form_prefill_s /decode_step_s /closed_form_decode_step_s /decode_s /closed_form_decode_s ||
        { echo "FAIL: simulate --workload $lay"; cat "$tmp/sim.err"; fail=$((fail + 1)); }
done
# prefill_chunk: each pass a ragged sub-batch; the simulator's flow shop of the passes agrees
"$SHARDPLAN" simulate --model llama2-7b --hw h100 --chips 2 --workload "$tmp/w.csv" --json \
    --layout prefill_chunk=1,stages=2,microbatches=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads >"$tmp/simc.json" \
    2>"$tmp/sim.err" && json_check '$1 == $2 && $3 == $4' "$tmp/simc.json" "" /prefill_s /closed_form_prefill_s \
    /decode_step_s /closed_form_decode_step_s ||
    { echo "FAIL: simulate --workload with prefill_chunk"; cat "$tmp/sim.err"; fail=$((fail + 1)); }
"$SHARDPLAN" estimate --model llama2-7b --hw h100 --chips 2 --workload "$tmp/w.csv" --json \
    --layout stages=2,microbatches=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads >"$tmp/wm.json" 2>"$tmp/wm.err" &&
    json_check '$1 > 0 && $1 < $2' "$tmp/wm.json" "" /prefill_s /padded/prefill_s ||
    { echo "FAIL: estimate --workload with micro-batches"; cat "$tmp/wm.err"; fail=$((fail + 1)); }
# run: one chip and tensor-parallel layouts give the same tokens; bytes and arena as predicted
RUN="--model tiny-llama --workload $tmp/w.csv --seed 4 --json"
i=0
for lay in mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads \
           mesh=2x2x1,prefill=ws2d/heads,decode=ws2d/heads replicas=2,mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads \
           stages=2,microbatches=1,mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads \
           mesh=2x1x1,prefill=ws1d/batch,decode=ws1d/batch mesh=2x2x1,prefill=wg-xyz/batch,decode=ws2d/batch \
           stages=2,microbatches=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads \
           microbatches=2,mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads \
           mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads,offload_weights=2 \
           microbatches=2,mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads,offload_weights=1,offload_kv=0.5 \
           prefill_chunk=1,stages=2,microbatches=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads \
           mesh=2x1x1,prefill=ws1d/batch,decode=ws1d/batch,offload_kv=0.5 \
           prefill_chunk=2,mesh=2x1x1,prefill=wg-x/heads,decode=wg-x/heads; do
    i=$((i + 1))
    "$SHARDPLAN" run $RUN --layout "weights=f32,kv=f32,$lay" >"$tmp/r$i.json" 2>"$tmp/r.err" ||
        { echo "FAIL: run --workload $lay: exit $?"; cat "$tmp/r.err"; fail=$((fail + 1)); continue; }
    json_check '$1 == 0 && $2 == $3' "$tmp/r$i.json" "" /comm/mismatches /memory/allocated_bytes_per_chip \
        /memory/predicted_bytes_per_chip || { echo "FAIL: run --workload $lay: bytes or memory"; fail=$((fail + 1)); }
    json_check '$1 == $2 && $3 == $4' "$tmp/r$i.json" "" /comm/host_link_measured_bytes \
        /comm/host_link_predicted_bytes /memory/host_allocated_bytes_per_chip /memory/host_predicted_bytes_per_chip ||
        { echo "FAIL: run --workload $lay: host link bytes or host memory"; fail=$((fail + 1)); }
    json_same "$tmp/r1.json" "$tmp/r$i.json" /tokens /workload ||
        { echo "FAIL: run --workload $lay: tokens differ from one chip's"; fail=$((fail + 1)); }
done
[ "$("$JSONQ" -l "$tmp/r1.json" '/tokens/*' | tr '\n' ' ')" = "4 2 6 3 " ] ||
    { echo "FAIL: run --workload: each sequence's gen tokens"; fail=$((fail + 1)); }
# mixture of experts (every replica every expert): the packed tokens through the router and experts
RUNM="--model tiny-moe --workload $tmp/w.csv --seed 4 --json"
i=0
# experts split over replicas (moe3): the replicas run each step together
for lay in mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads \
           replicas=2,experts=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads; do
    i=$((i + 1))
    "$SHARDPLAN" run $RUNM --layout "capacity=4,weights=f32,kv=f32,$lay" >"$tmp/moe$i.json" 2>"$tmp/r.err" &&
        json_check '$1 == 0 && $2 == $3' "$tmp/moe$i.json" "" /comm/mismatches /memory/allocated_bytes_per_chip \
        /memory/predicted_bytes_per_chip && json_same "$tmp/moe1.json" "$tmp/moe$i.json" /tokens ||
        { echo "FAIL: run --workload tiny-moe $lay"; cat "$tmp/r.err"; fail=$((fail + 1)); }
done
expect2 "run MoE experts over replicas, micro-batches" "tiny-moe with experts=2 and 1 stages × 2 micro-batches, prefill_chunk 0" \
    run $RUNM --layout capacity=4,replicas=2,experts=2,microbatches=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads
expect2 "run bad workload" "bad1.csv:2:" run --model tiny-llama --workload "$tmp/bad1.csv" --layout mesh=1x1x1
expect2 "run --workload --gen" "replaces --batch" run $RUN --gen 3 --layout mesh=1x1x1
expect2 "run KV handoff" "ragged batches with a KV handoff" run $RUN \
    --layout mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/batch
if test -n "${MPIRUN:-}" && "$SHARDPLAN" run --help | grep -q "backend mpi"; then
    mpi_run() { # ranks, run's arguments...
        _n=$1; shift
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
            timeout 300 "$MPIRUN" --oversubscribe --bind-to none -np "$_n" "$SHARDPLAN" run --backend mpi "$@"
    }
    mpi_run 4 $RUN \
        --layout weights=f32,kv=f32,replicas=2,mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads </dev/null >"$tmp/mpi.json" 2>"$tmp/mpi.err" ||
        { echo "FAIL: mpirun run --workload: exit $?"; head -5 "$tmp/mpi.err"; fail=$((fail + 1)); }
    json_same "$tmp/r4.json" "$tmp/mpi.json" /tokens /comm/measured_bytes \
        /comm/predicted_bytes && json_check '$1 == 0' "$tmp/mpi.json" /comm/mismatches ||
        { echo "FAIL: mpirun run --workload differs from threads"; fail=$((fail + 1)); }
    mpi_run 2 $RUN \
        --layout weights=f32,kv=f32,mesh=2x1x1,prefill=ws1d/batch,decode=ws1d/batch </dev/null >"$tmp/mpib.json" 2>"$tmp/mpi.err" ||
        { echo "FAIL: mpirun run --workload, batch-sharded: exit $?"; head -5 "$tmp/mpi.err"; fail=$((fail + 1)); }
    json_same "$tmp/r6.json" "$tmp/mpib.json" /tokens /comm/measured_bytes \
        /comm/predicted_bytes && json_check '$1 == 0' "$tmp/mpib.json" /comm/mismatches ||
        { echo "FAIL: mpirun run --workload, batch-sharded, differs from threads"; fail=$((fail + 1)); }
    mpi_run 4 $RUN \
        --layout weights=f32,kv=f32,mesh=2x2x1,prefill=wg-xyz/batch,decode=ws2d/batch </dev/null >"$tmp/mpiw.json" 2>"$tmp/mpi.err" ||
        { echo "FAIL: mpirun run --workload, weight-gathered: exit $?"; head -5 "$tmp/mpi.err"; fail=$((fail + 1)); }
    json_same "$tmp/r7.json" "$tmp/mpiw.json" /tokens /comm/measured_bytes \
        /comm/predicted_bytes && json_check '$1 == 0' "$tmp/mpiw.json" /comm/mismatches ||
        { echo "FAIL: mpirun run --workload, weight-gathered, differs from threads"; fail=$((fail + 1)); }
    mpi_run 2 $RUN \
        --layout weights=f32,kv=f32,stages=2,microbatches=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads \
        </dev/null >"$tmp/mpim.json" 2>"$tmp/mpi.err" ||
        { echo "FAIL: mpirun run --workload, micro-batches: exit $?"; head -5 "$tmp/mpi.err"; fail=$((fail + 1)); }
    json_same "$tmp/r8.json" "$tmp/mpim.json" /tokens /comm/measured_bytes \
        /comm/predicted_bytes && json_check '$1 == 0' "$tmp/mpim.json" /comm/mismatches ||
        { echo "FAIL: mpirun run --workload, micro-batches, differs from threads"; fail=$((fail + 1)); }
    mpi_run 2 $RUN \
        --layout weights=f32,kv=f32,prefill_chunk=1,stages=2,microbatches=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads \
        </dev/null >"$tmp/mpic.json" 2>"$tmp/mpi.err" ||
        { echo "FAIL: mpirun run --workload, prefill_chunk: exit $?"; head -5 "$tmp/mpi.err"; fail=$((fail + 1)); }
    json_same "$tmp/r12.json" "$tmp/mpic.json" /tokens /comm/measured_bytes /comm/predicted_bytes &&
        json_check '$1 == 0' "$tmp/mpic.json" /comm/mismatches ||
        { echo "FAIL: mpirun run --workload, prefill_chunk, differs from threads"; fail=$((fail + 1)); }
    mpi_run 2 $RUNM \
        --layout capacity=4,weights=f32,kv=f32,mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads \
        </dev/null >"$tmp/mpimoe.json" 2>"$tmp/mpi.err" ||
        { echo "FAIL: mpirun run --workload, MoE: exit $?"; head -5 "$tmp/mpi.err"; fail=$((fail + 1)); }
    json_same "$tmp/moe2.json" "$tmp/mpimoe.json" /tokens \
        /comm/measured_bytes /comm/predicted_bytes && json_check '$1 == 0' "$tmp/mpimoe.json" /comm/mismatches ||
        { echo "FAIL: mpirun run --workload, MoE, differs from threads"; fail=$((fail + 1)); }
    mpi_run 2 $RUNM \
        --layout capacity=4,weights=f32,kv=f32,replicas=2,experts=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads \
        </dev/null >"$tmp/mpiep.json" 2>"$tmp/mpi.err" ||
        { echo "FAIL: mpirun run --workload, experts over replicas: exit $?"; head -5 "$tmp/mpi.err"; fail=$((fail + 1)); }
    json_same "$tmp/moe3.json" "$tmp/mpiep.json" /tokens /comm/measured_bytes /comm/predicted_bytes &&
        json_check '$1 == 0 && $2 > 0' "$tmp/mpiep.json" "" /comm/mismatches /comm/measured_bytes/all-to-all ||
        { echo "FAIL: mpirun run --workload, experts over replicas, differs from threads"; fail=$((fail + 1)); }
    mpi_run 2 $RUN \
        --layout weights=f32,kv=f32,microbatches=2,mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads,offload_weights=1,offload_kv=0.5 \
        </dev/null >"$tmp/mpio.json" 2>"$tmp/mpi.err" ||
        { echo "FAIL: mpirun run --workload, offload: exit $?"; head -5 "$tmp/mpi.err"; fail=$((fail + 1)); }
    json_same "$tmp/r11.json" "$tmp/mpio.json" /tokens /comm/measured_bytes /comm/predicted_bytes \
        /comm/host_link_measured_bytes /comm/host_link_predicted_bytes &&
        json_check '$1 == 0' "$tmp/mpio.json" /comm/mismatches ||
        { echo "FAIL: mpirun run --workload, offload, differs from threads"; fail=$((fail + 1)); }
    mpi_run 2 $RUN \
        --layout weights=f32,kv=f32,mesh=2x1x1,prefill=ws1d/batch,decode=ws1d/batch,offload_kv=0.5 \
        </dev/null >"$tmp/mpiob.json" 2>"$tmp/mpi.err" ||
        { echo "FAIL: mpirun run --workload, offload_kv over blocks: exit $?"; head -5 "$tmp/mpi.err"; fail=$((fail + 1)); }
    json_same "$tmp/r13.json" "$tmp/mpiob.json" /tokens /comm/measured_bytes /comm/predicted_bytes \
        /comm/host_link_measured_bytes /comm/host_link_predicted_bytes &&
        json_check '$1 == 0' "$tmp/mpiob.json" /comm/mismatches ||
        { echo "FAIL: mpirun run --workload, offload_kv over blocks, differs from threads"; fail=$((fail + 1)); }
fi
echo "cli_ragged: mpi part: $( test -n "${MPIRUN:-}" && echo ran || echo skipped)"
[ $fail -eq 0 ] || exit 1
