#!/bin/sh
# Mixture of experts from the command line: Mixtral-8x7B's bf16 weights do
# not fit one H100 and fit two with the experts split over them; bad
# experts= values exit 2 naming the key; plan decides the expert-parallel
# degree and explains the rival on the other side of it; run executes
# tiny-moe with expert parallelism (bytes measured = predicted from the
# routing, the expected value beside them), refuses an
# expert over its capacity (exit 1), and runs int8 experts.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
. "${top_srcdir:-.}/tests/json.sh"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() { # name, wanted exit, command...
    name=$1; want=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq "$want" ] || { echo "FAIL $name: exit $rc, wanted $want"; head -3 "$tmp/err"; fail=$((fail + 1)); return 1; }
    echo "ok   $name"
}
EST="estimate --model mixtral-8x7b --hw h100 --batch 2 --prompt 128 --gen 32 --json"
if expect "mixtral on 1 h100" 0 $SHARDPLAN $EST --chips 1 --layout mesh=1x1x1,weights=bf16; then
    json_check '$1 == "false" && $2 / 2^30 > 86.5 && $2 / 2^30 < 87.5' "$tmp/out" "" /feasible /memory_per_chip/weights ||
        { echo "FAIL: 1 chip: fits or weights off"; fail=$((fail + 1)); }
fi
if expect "mixtral on 2 h100, experts=2" 0 $SHARDPLAN $EST --chips 2 --layout replicas=2,experts=2,weights=bf16; then
    json_check '$1 == "true" && $2 / 2^30 < 46 && $3 ~ /experts=2/' "$tmp/out" "" /feasible /memory_per_chip/weights /layout_text ||
        { echo "FAIL: 2 chips: does not fit"; fail=$((fail + 1)); }
fi
for bad in "replicas=3,experts=3" "replicas=4,experts=2"; do
    n=$(echo "$bad" | sed 's/.*replicas=\([0-9]*\).*/\1/')
    expect "experts refused: $bad" 2 $SHARDPLAN $EST --chips "$n" --layout "$bad" && \
        { grep -q "experts" "$tmp/err" || { echo "FAIL: $bad: message does not name experts"; fail=$((fail + 1)); }; }
done
expect "experts on a dense model" 2 $SHARDPLAN estimate --model llama2-7b --hw h100 --chips 2 --batch 2 --prompt 8 --gen 4 \
    --layout replicas=2,experts=2
if expect "plan mixtral 8 h100" 0 $SHARDPLAN plan --model mixtral-8x7b --hw h100 --chips 8 --batch 64 --prompt 1024 --gen 128 --json; then
    { json_check '$1 > 1' -n "$tmp/out" /chosen/layout/experts &&
      json_check '$1 ~ /no expert parallelism/' -w /kind=experts "$tmp/out" "/rivals/*" /reason; } ||
        { echo "FAIL: plan: no expert parallelism or no experts rival"; fail=$((fail + 1)); }
fi
RUN="run --model tiny-moe --batch 4 --prompt 8 --gen 4 --json"
if expect "run tiny-moe replicas=2,experts=2" 0 $SHARDPLAN $RUN --layout replicas=2,experts=2,mesh=2x1x1,capacity=4,weights=f32,kv=f32; then
    { json_check '$1 == 0 && $2 > 0' -n "$tmp/out" "" /comm/mismatches /comm/measured_bytes/all-to-all &&
      [ "$("$JSONQ" "$tmp/out" /comm/measured_bytes)" = "$("$JSONQ" "$tmp/out" /comm/predicted_bytes)" ]; } ||
        { echo "FAIL: run: bytes"; fail=$((fail + 1)); }
fi
# the dispatch and combine move only the slots the routing filled: the bytes
# are predicted from the actual routing (= measured at every step), and the
# router's expected value is reported beside them, the same for any routing
L2=replicas=2,experts=2,mesh=2x1x1,capacity=4,weights=f32,kv=f32
for seed in 1 2; do
    if expect "run tiny-moe $L2 seed $seed" 0 $SHARDPLAN $RUN --layout $L2 --seed $seed; then
        cp "$tmp/out" "$tmp/seed$seed.json"
        { json_check '$1 == 0 && $2 > 0 && $3 > 0' -n "$tmp/out" "" /comm/mismatches /comm/predicted_bytes/all-to-all \
              /comm/expected_bytes/all-to-all &&
          json_check '$1 == $2' "$tmp/out" /comm /measured_bytes /predicted_bytes &&
          json_check '$1 == $2' "$tmp/out" /comm /measured_recv /predicted_recv &&
          same=0
          for k in all-gather reduce-scatter all-reduce send-recv; do
              json_check '$1 == $2' "$tmp/out" /comm /predicted_bytes/$k /expected_bytes/$k || same=1
          done
          [ $same -eq 0 ]; } ||
            { echo "FAIL: run seed $seed: routed bytes"; fail=$((fail + 1)); }
    fi
done
if [ -f "$tmp/seed1.json" ] && [ -f "$tmp/seed2.json" ]; then
    a1=$("$JSONQ" "$tmp/seed1.json" /comm/predicted_bytes/all-to-all) a2=$("$JSONQ" "$tmp/seed2.json" /comm/predicted_bytes/all-to-all)
    e1=$("$JSONQ" "$tmp/seed1.json" /comm/expected_bytes/all-to-all) e2=$("$JSONQ" "$tmp/seed2.json" /comm/expected_bytes/all-to-all)
    { [ "$a1" != "$a2" ] && [ "$e1" = "$e2" ]; } ||
        { echo "FAIL: all-to-all bytes do not follow the routing (predicted $a1 / $a2, expected $e1 / $e2)"; fail=$((fail + 1)); }
fi
# shared experts: Qwen1.5-MoE-A2.7B's 14.3 B parameters (its 60 routed experts and the gated
# shared one) in bf16 on one H100; tiny-moe-shared runs with expert parallelism coordinated
# over a 2-chip tensor mesh, its bytes as predicted
if expect "qwen1.5-moe on 1 h100" 0 $SHARDPLAN estimate --model qwen1.5-moe-a2.7b --hw h100 --batch 2 --prompt 128 \
    --gen 32 --json --chips 1 --layout mesh=1x1x1,weights=bf16; then
    json_check '$1 == "true" && $2 / 2^30 > 26.5 && $2 / 2^30 < 26.8' "$tmp/out" "" /feasible /memory_per_chip/weights ||
        { echo "FAIL: qwen1.5-moe: weights off"; fail=$((fail + 1)); }
fi
LS=replicas=2,experts=2,mesh=2x1x1,capacity=4,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
if expect "run tiny-moe-shared $LS" 0 $SHARDPLAN run --model tiny-moe-shared --batch 4 --prompt 8 --gen 4 --json --layout $LS; then
    { json_check '$1 == 0 && $2 > 0' -n "$tmp/out" "" /comm/mismatches /comm/measured_bytes/all-to-all &&
      json_check '$1 == $2' "$tmp/out" /comm /measured_bytes /predicted_bytes; } ||
        { echo "FAIL: run tiny-moe-shared: bytes"; fail=$((fail + 1)); }
fi
# a checkpoint of a model with shared experts in other than Qwen2-MoE's names (here Mixtral's):
# refused (exit 2), not read as something else
mkdir -p "$tmp/qmoe"
cp "${top_srcdir:-.}/tests/ref/mixtral/model.safetensors" "$tmp/qmoe/" &&
    sed 's/"num_local_experts"/"shared_expert_intermediate_size": 48, "num_experts"/; s/"model_type": "mixtral"/"model_type": "qwen2_moe", "moe_intermediate_size": 64/' \
        "${top_srcdir:-.}/tests/ref/mixtral/config.json" > "$tmp/qmoe/config.json"
expect "run qwen2_moe config, Mixtral checkpoint" 2 $SHARDPLAN run --weights "$tmp/qmoe" --batch 1 --prompt 4 --gen 2 --layout mesh=1x1x1 && \
    { grep -q "shared experts" "$tmp/err" || { echo "FAIL: checkpoint message"; fail=$((fail + 1)); }; }
# a Qwen2-MoE checkpoint whose config.json declares no shared expert: its shared expert's
# tensors are refused by name, not ignored
mkdir -p "$tmp/qnosh"
cp "${top_srcdir:-.}/tests/ref/qwen2-moe/model.safetensors" "$tmp/qnosh/" &&
    sed '/shared_expert_intermediate_size/d' "${top_srcdir:-.}/tests/ref/qwen2-moe/config.json" > "$tmp/qnosh/config.json"
expect "run qwen2_moe checkpoint, config without the shared expert" 2 \
    $SHARDPLAN run --weights "$tmp/qnosh" --batch 1 --prompt 4 --gen 2 --layout mesh=1x1x1 && \
    { grep -q "mlp.shared_expert.*not explained" "$tmp/err" || { echo "FAIL: unexplained shared expert message"; fail=$((fail + 1)); }; }
expect "run tiny-moe over capacity" 1 $SHARDPLAN $RUN --layout mesh=1x1x1,weights=f32,kv=f32 && \
    { grep -q "capacity" "$tmp/err" || { echo "FAIL: capacity message"; fail=$((fail + 1)); }; }
# dense layers between MoE layers: planned with even pipeline splits, and the plan says so
if expect "plan tiny-moe-every2" 0 $SHARDPLAN plan --model tiny-moe-every2 --hw h100 --chips 4 --batch 8 --prompt 64 --gen 16; then
    grep -q "pipeline program: not run: tiny-moe-every2 has dense layers between its MoE layers" "$tmp/out" ||
        { echo "FAIL: plan tiny-moe-every2: no word on the pipeline program"; fail=$((fail + 1)); }
fi
# int8 experts (each expert's own column scales) run, and move the bytes predicted
LQ=replicas=2,experts=2,mesh=2x1x1,capacity=4,weights=int8,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
if expect "run tiny-moe int8 experts" 0 $SHARDPLAN run --model tiny-moe --batch 4 --prompt 8 --gen 4 --json --layout $LQ; then
    { json_check '$1 == 0 && $2 > 0' -n "$tmp/out" "" /comm/mismatches /comm/measured_bytes/all-to-all &&
      json_check '$1 == $2' "$tmp/out" /comm /measured_bytes /predicted_bytes; } ||
        { echo "FAIL: run tiny-moe int8: bytes"; fail=$((fail + 1)); }
fi
[ "$fail" -eq 0 ]
