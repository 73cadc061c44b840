#!/bin/sh
# estimate answers for every bundled model on every bundled hardware profile,
# its JSON has the documented keys, and bad layouts exit 2 with a reason.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
fail=0
ok=0
check() { # name, expected exit, command...
    name=$1; want=$2; shift 2
    "$@" >/tmp/sp_est_out.$$ 2>/tmp/sp_est_err.$$
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL: $name: exit $rc, wanted $want"; sed 's/^/  /' /tmp/sp_est_err.$$ | head -5; fail=$((fail + 1))
    else ok=$((ok + 1)); fi
}
. "${top_srcdir:-.}/tests/json.sh"
models=$("$SHARDPLAN" models --json | "$JSONQ" - '/*/name')
hws=$("$SHARDPLAN" hw --json | "$JSONQ" - '/*/name')
[ -n "$models" ] && [ -n "$hws" ] || { echo "FAIL: could not list bundled models/hw"; exit 1; }
# bundled models with a feature nothing computes: exit 2 naming the field
refused_field() {
    case $1 in
    bloom-176b) echo /positions ;; gpt-j-6b) echo /rope_style ;;
    *) echo "" ;;
    esac
}
for m in $models; do
    f=$(refused_field "$m")
    if [ -n "$f" ]; then
        check "estimate $m refused" 2 "$SHARDPLAN" estimate --model "$m" --hw h100 --chips 8 --batch 8 --prompt 128 \
            --gen 16 --layout mesh=1x1x8,prefill=ws1d/heads,decode=ws1d/heads
        grep -q "$m: $f: " /tmp/sp_est_err.$$ || { echo "FAIL: $m: refusal does not name $f"; cat /tmp/sp_est_err.$$; fail=$((fail + 1)); }
        continue
    fi
    for h in $hws; do
        check "estimate $m on $h" 0 "$SHARDPLAN" estimate --model "$m" --hw "$h" --chips 8 --batch 8 --prompt 128 --gen 16 \
            --layout mesh=1x1x8,prefill=ws1d/heads,decode=ws1d/heads --json
        # the documented keys are there (containers print as JSON, scalars as themselves), times positive
        { "$JSONQ" /tmp/sp_est_out.$$ "" /layout /feasible /prefill_s /decode_step_s /total_s /tokens_per_s /mfu \
              /cost_chip_s_per_token /time_breakdown /comm_bytes_per_chip/prefill /comm_bytes_per_chip/decode_step \
              /memory_per_chip/weights /memory_per_chip/kv /memory_per_chip/activations /memory_per_chip/total \
              /memory_per_chip/capacity >/dev/null &&
          json_check '$1 > 0 && $2 > 0 && $3 > 0' -n /tmp/sp_est_out.$$ "" /total_s /prefill_s /decode_step_s; } ||
            { echo "FAIL: $m $h: JSON keys"; fail=$((fail + 1)); }
    done
done
# a --layout naming no file, and a mesh without its three dimensions: exit 2 saying so
check "missing layout file" 2 "$SHARDPLAN" estimate --model tiny-llama --hw h100 --chips 1 --batch 1 --prompt 4 --gen 4 \
    --layout no-such-layout.json
grep -q "no-such-layout.json: no such layout file" /tmp/sp_est_err.$$ || { echo "FAIL: missing layout file message"; cat /tmp/sp_est_err.$$; fail=$((fail + 1)); }
check "two-dimensional mesh" 2 "$SHARDPLAN" estimate --model tiny-llama --hw h100 --chips 16 --batch 1 --prompt 4 --gen 4 \
    --layout mesh=4x4
grep -q "'4x4' is not XxYxZ: give all three" /tmp/sp_est_err.$$ || { echo "FAIL: mesh=4x4 message"; cat /tmp/sp_est_err.$$; fail=$((fail + 1)); }
# the paper's PaLM 540B layout on 64 TPU v4 chips, and its JSON accepted back as a layout
check "palm-540b 2D" 0 "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 2048 --gen 64 \
    --layout mesh=4x4x4,weights=int8,prefill=ws2d/heads,decode=ws2d/batch --json
"$JSONQ" /tmp/sp_est_out.$$ /layout >/tmp/sp_est_layout.$$
check "layout JSON round trip" 0 "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 2048 --gen 64 \
    --layout /tmp/sp_est_layout.$$
check "max context" 0 "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 \
    --layout mesh=4x4x4,weights=int8,decode=ws2d/batch --max-context --kv-budget 0.3 --json
json_check '$1 > 1000' -n /tmp/sp_est_out.$$ /max_context \
    || { echo "FAIL: max_context"; fail=$((fail + 1)); }
# the paper's high-throughput pair (Table 2): prefill wg-xyz/batch, decode ws2d/batch, priced; and a
# pair whose KV cache moves between the phases (batch-sharded prefill, head-sharded decode: an all-gather)
for lay in prefill=wg-xyz/batch,decode=ws2d/batch prefill=wg-xyz/batch,decode=ws2d/heads; do
    check "KV handoff $lay" 0 "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 512 --prompt 2048 \
        --gen 64 --layout mesh=4x4x4,weights=bf16,$lay --json
    json_check '$1 > 0 && $2 > 0' -n /tmp/sp_est_out.$$ "" /prefill_s /decode_step_s \
        || { echo "FAIL: KV handoff $lay: not priced"; fail=$((fail + 1)); }
done
# bad layouts: exit 2 with a reason
bad() { # name, expected stderr fragment, layout
    check "$1" 2 "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 16 --gen 4 --layout "$3"
    grep -q -- "$2" /tmp/sp_est_err.$$ || { echo "FAIL: $1: stderr lacks '$2'"; cat /tmp/sp_est_err.$$; fail=$((fail + 1)); }
}
bad "mesh product" "32 chips" "mesh=4x4x2"
bad "unknown ffn" "unknown FFN layout" "mesh=4x4x4,prefill=ws3d/heads"
bad "unknown key" "unknown key" "mesh=4x4x4,tensor=4"
bad "unknown attn" "unknown attention layout" "mesh=4x4x4,decode=ws2d/rows"
bad "mixed storage" "store weights differently" "mesh=4x4x4,prefill=ws1d/heads,decode=ws2d/batch"
bad "split sum" "the stages hold 119 layers, the model has 118" "stages=4,mesh=1x1x16,microbatches=4,stage_layers=30,30,30,29"
bad "split count" "3 layer counts for 4 stages" "stages=4,mesh=1x1x16,microbatches=4,stage_layers=40,40,38"
bad "per-stage chips refused" "per-stage chips is not implemented" "stages=2,mesh=1x1x32,microbatches=2,stage_chips=16,16"
bad "stage meshes per stage" "1 meshes for 2 stages" "stages=2,mesh=1x1x32,microbatches=2,stage_mesh=1x1x32"
bad "stage meshes on a torus" "on a torus" "stages=2,microbatches=2,stage_mesh=1x1x16,1x1x48"
# stages of their own mesh on a cluster: priced stage by stage (text and JSON) and simulated
H=stages=2,microbatches=2,stage_mesh=8x1x1,4x1x1,stage_layers=60,20
check "stage meshes" 0 "$SHARDPLAN" estimate --model llama2-70b --hw h100 --chips 12 --batch 8 --prompt 16 --gen 4 \
    --layout "$H"
grep -q "stages (each on its own mesh)" /tmp/sp_est_out.$$ && grep -Eq "^ +1 +4 +4x1x1 +20 " /tmp/sp_est_out.$$ ||
    { echo "FAIL: stage meshes: per-stage rows"; cat /tmp/sp_est_out.$$; fail=$((fail + 1)); }
check "stage meshes as JSON" 0 "$SHARDPLAN" estimate --model llama2-70b --hw h100 --chips 12 --batch 8 --prompt 16 \
    --gen 4 --layout "$H" --json
{ json_check '$1 == 8' -n /tmp/sp_est_out.$$ /stages/0/chips && json_check '$1 == 4' -n /tmp/sp_est_out.$$ /stages/1/chips &&
  json_check '$1 == 8' -n /tmp/sp_est_out.$$ /stages/0/mesh/0 && json_check '$1 == 20' -n /tmp/sp_est_out.$$ /stages/1/layers &&
  json_check '$1 > 0' -n /tmp/sp_est_out.$$ /stages/1/memory_per_chip &&
  json_check '$1 == 4' -n /tmp/sp_est_out.$$ /layout/stage_mesh/1/0; } ||
    { echo "FAIL: stage meshes: stages[]"; fail=$((fail + 1)); }
check "stage meshes simulated" 0 "$SHARDPLAN" simulate --model llama2-70b --hw h100 --chips 12 --batch 8 --prompt 16 \
    --gen 4 --layout "$H"
# run (threads): the same tokens as one chip, bytes and memory as predicted; a ragged batch
# through such stages is refused by name (exit 2)
check "stage meshes run" 0 "$SHARDPLAN" run --model tiny-llama --batch 2 --prompt 4 --gen 3 --seed 5 --json \
    --layout "stages=2,microbatches=2,stage_mesh=2x1x1,1x1x1,weights=f32,kv=f32"
cp /tmp/sp_est_out.$$ /tmp/sp_est_h.$$
check "stage meshes, one chip" 0 "$SHARDPLAN" run --model tiny-llama --batch 2 --prompt 4 --gen 3 --seed 5 --json \
    --layout "weights=f32,kv=f32"
{ json_same /tmp/sp_est_h.$$ /tmp/sp_est_out.$$ /tokens &&
  json_check '$1 == $2' /tmp/sp_est_h.$$ /comm /measured_bytes /predicted_bytes &&
  json_check '$1 > 0' -n /tmp/sp_est_h.$$ /comm/measured_bytes/send-recv &&
  json_check '$1 == 0' -n /tmp/sp_est_h.$$ /comm/mismatches &&
  json_check '$1 == $2' -n /tmp/sp_est_h.$$ /memory /allocated_bytes_per_chip /predicted_bytes_per_chip; } ||
    { echo "FAIL: stage meshes: run"; cat /tmp/sp_est_h.$$; fail=$((fail + 1)); }
rm -f /tmp/sp_est_h.$$
printf 'prompt,gen\n3,4\n7,2\n' >/tmp/sp_est_wl.$$
check "stage meshes, ragged run refused" 2 "$SHARDPLAN" run --model tiny-llama --workload /tmp/sp_est_wl.$$ \
    --layout "stages=2,stage_mesh=2x1x1,1x1x1,weights=f32,kv=f32"
grep -q "stage_mesh: running a ragged batch" /tmp/sp_est_err.$$ ||
    { echo "FAIL: stage meshes: ragged run refusal"; cat /tmp/sp_est_err.$$; fail=$((fail + 1)); }
printf 'prompt,gen\n3,4\n7,2\n' >/tmp/sp_est_wl.$$
check "stage meshes, ragged batch refused" 2 "$SHARDPLAN" estimate --model llama2-70b --hw h100 --chips 12 \
    --layout stages=2,stage_mesh=8x1x1,4x1x1,stage_layers=60,20 --workload /tmp/sp_est_wl.$$
grep -q "stage_mesh: a ragged batch" /tmp/sp_est_err.$$ || { echo "FAIL: stage meshes: ragged refusal"; cat /tmp/sp_est_err.$$; fail=$((fail + 1)); }
rm -f /tmp/sp_est_wl.$$
# an uneven split is priced (text and JSON forms alike) and differs from the even split
U=stages=4,mesh=1x1x16,microbatches=4,stage_layers=29,30,30,29
check "uneven split" 0 "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 256 --gen 8 \
    --layout "$U" --json
cp /tmp/sp_est_out.$$ /tmp/sp_est_u.$$
{ json_check '$1 == 29' -n /tmp/sp_est_u.$$ /layout/stage_layers/0 &&
  json_check '$1 == 30' -n /tmp/sp_est_u.$$ /layout/stage_layers/1; } ||
    { echo "FAIL: uneven split: layout's stage_layers"; fail=$((fail + 1)); }
"$JSONQ" /tmp/sp_est_u.$$ /layout >/tmp/sp_est_layout.$$
check "uneven split as JSON" 0 "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 256 \
    --gen 8 --layout /tmp/sp_est_layout.$$ --json
json_same /tmp/sp_est_u.$$ /tmp/sp_est_out.$$ /total_s /memory_per_chip ||
    { echo "FAIL: uneven split: text and JSON forms price differently"; fail=$((fail + 1)); }
check "even split" 0 "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 256 --gen 8 \
    --layout stages=4,mesh=1x1x16,microbatches=4 --json
# the first stage (embedding) holds 29 layers instead of 30: its worst-stage memory is less
mu=$("$JSONQ" /tmp/sp_est_u.$$ /memory_per_chip/total) me=$("$JSONQ" /tmp/sp_est_out.$$ /memory_per_chip/total)
[ -n "$mu" ] && [ -n "$me" ] && [ "$mu" -lt "$me" ] ||
    { echo "FAIL: uneven split: worst-stage memory $mu, even split $me"; fail=$((fail + 1)); }
rm -f /tmp/sp_est_u.$$
check "batch split" 2 "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 6 --prompt 16 --gen 4 \
    --layout mesh=4x4x4,prefill=wg-xyz/heads,decode=ws2d/batch
grep -q "divisible" /tmp/sp_est_err.$$ || { echo "FAIL: batch split: no reason"; fail=$((fail + 1)); }
check "missing layout" 2 "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 16
check "help" 0 "$SHARDPLAN" estimate --help
rm -f /tmp/sp_est_out.$$ /tmp/sp_est_err.$$ /tmp/sp_est_layout.$$
echo "$ok passed, $fail failed"
[ "$fail" -eq 0 ]
