#!/bin/sh
# Offload on the command line: estimate and simulate price a layout that
# streams weights from host memory and keeps part of the KV cache there
# (offload_weights, offload_kv), report what lives in host memory, what
# crosses the host link and whether the link bounds the step; the same
# layout without offload reports nothing of it; bad keys exit 2 naming the
# key; the host too small is "does not fit".
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
. "${top_srcdir:-.}/tests/json.sh"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
JOB="--model llama2-7b --hw a100-80g --chips 1 --batch 8 --prompt 512 --gen 128"
"$SHARDPLAN" estimate $JOB --layout mesh=1x1x1,offload_weights=16,offload_kv=0.5 --json >"$tmp/e.json" 2>"$tmp/e.err" ||
    { echo "FAIL: estimate with offload: exit $?"; cat "$tmp/e.err"; fail=$((fail + 1)); }
json_check '$1 > 0 && $2 > 0 && $3 > 0 && $4 > 0' "$tmp/e.json" /offload /host_weights_bytes /host_kv_bytes \
    /decode_step_host_link_bytes /decode_step_host_link_s ||
    { echo "FAIL: estimate --json: no offload figures"; fail=$((fail + 1)); }
json_check '$1 == "true" || $1 == 1' "$tmp/e.json" /offload/decode_step_host_bound ||
    { echo "FAIL: 7.3 GB over 25 GB/s per decode step is not reported as bounding the step"; fail=$((fail + 1)); }
json_check '$1 == 16 && $2 == 0.5' "$tmp/e.json" "" /layout/offload_weights/0 /layout/offload_kv ||
    { echo "FAIL: the layout's offload keys are not in its JSON"; fail=$((fail + 1)); }
"$SHARDPLAN" estimate $JOB --layout mesh=1x1x1,offload_weights=16,offload_kv=0.5 >"$tmp/e.txt" 2>&1
grep -q "the host link bounds the step" "$tmp/e.txt" && grep -q "weights in host memory" "$tmp/e.txt" ||
    { echo "FAIL: estimate's table has no offload section"; cat "$tmp/e.txt"; fail=$((fail + 1)); }
"$SHARDPLAN" estimate $JOB --layout mesh=1x1x1 --json >"$tmp/n.json" 2>/dev/null
"$JSONQ" -k "$tmp/n.json" "" | grep -qx offload &&
    { echo "FAIL: a layout without offload reports offload figures"; fail=$((fail + 1)); }
# the simulator schedules the copies as the closed form does
"$SHARDPLAN" simulate $JOB --layout mesh=1x1x1,offload_weights=16,offload_kv=0.5 --json >"$tmp/s.json" ||
    { echo "FAIL: simulate with offload"; fail=$((fail + 1)); }
json_check '$1 > 0 && $1 == $2 && $3 > 0 && $3 == $4' "$tmp/s.json" "" /prefill_s /closed_form_prefill_s \
    /decode_step_s /closed_form_decode_step_s ||
    { echo "FAIL: simulate with offload differs from the closed form"; fail=$((fail + 1)); }
# bad keys exit 2 naming the key
for bad in offload_weights=40 offload_kv=1.5 offload_weights=x; do
    "$SHARDPLAN" estimate $JOB --layout "mesh=1x1x1,$bad" >/dev/null 2>"$tmp/bad.err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "offload" "$tmp/bad.err" ||
        { echo "FAIL: --layout $bad: exit $rc"; cat "$tmp/bad.err"; fail=$((fail + 1)); }
done
# llama2-70b in bf16 on one 80 GB chip: half its layers streamed fit HBM, and the host holds them
"$SHARDPLAN" estimate --model llama2-70b --hw a100-80g --chips 1 --batch 1 --prompt 128 --gen 16 \
    --layout mesh=1x1x1 --json >"$tmp/big0.json"
"$SHARDPLAN" estimate --model llama2-70b --hw a100-80g --chips 1 --batch 1 --prompt 128 --gen 16 \
    --layout mesh=1x1x1,offload_weights=60 --json >"$tmp/big.json"
json_check '$1 == "false" || $1 == 0' "$tmp/big0.json" /feasible &&
json_check '$1 == "true" || $1 == 1' "$tmp/big.json" /feasible ||
    { echo "FAIL: llama2-70b on one A100: offloading 60 of 80 layers' weights does not make it fit"; fail=$((fail + 1)); }
exit $fail
