#!/bin/sh
# plan --offload: a model that does not fit in HBM is refused without the
# flag (exit 1, saying nothing is offloaded without it) and planned with it
# (exit 0, the chosen layout streaming weights from host memory, each stage's
# offload in --json and in the text); the chosen layout string is accepted
# by estimate --layout (fitting) and by run on threads, whose tokens equal
# those of the same layout without offload (the reference run).
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
. "${top_srcdir:-.}/tests/json.sh"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
# a100-80g with 1.4 MB of HBM: tiny-llama's bf16 weights (1.8 MB) do not fit
sed 's/"hbm_bytes": 85899345920/"hbm_bytes": 1400000/' "${top_srcdir:-.}/data/hw/a100-80g.json" >"$tmp/hw.json"
grep -q '"hbm_bytes": 1400000' "$tmp/hw.json" || { echo "FAIL: the small-HBM profile"; exit 1; }
JOB="--model tiny-llama --hw $tmp/hw.json --chips 1 --batch 4 --prompt 5 --gen 4 --weights bf16"
"$SHARDPLAN" plan $JOB >"$tmp/no.txt" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "nothing fits" "$tmp/no.txt" && grep -q -- "--offload" "$tmp/no.txt" ||
    { echo "FAIL: plan without --offload: exit $rc (want 1 with the reason)"; cat "$tmp/no.txt"; fail=$((fail + 1)); }
"$SHARDPLAN" plan $JOB --offload --json >"$tmp/p.json" 2>"$tmp/p.err" ||
    { echo "FAIL: plan --offload: exit $?"; cat "$tmp/p.err"; fail=$((fail + 1)); }
lay=$("$JSONQ" "$tmp/p.json" /chosen/layout_text)
case "$lay" in
*offload_weights=* | *offload_attn=* | *offload_ffn=*) ;;
*) echo "FAIL: plan --offload chose no offload: $lay"; fail=$((fail + 1)) ;;
esac
json_check '$1 > 0 && $2 > 0' -n "$tmp/p.json" "" /chosen/stages/0/offload_layers /chosen/stages/0/host_bytes &&
json_check '$1 >= 0' -n "$tmp/p.json" /chosen/stages/0/offload_kv &&
json_check '$1 == ($2 > $3 ? $2 : $3)' -n "$tmp/p.json" "" /chosen/stages/0/offload_layers \
    /chosen/stages/0/offload_attn_layers /chosen/stages/0/offload_ffn_layers &&
json_check '$1 > 0 && $2 > 0' -n "$tmp/p.json" /stats/offload_program /rows /columns ||
    { echo "FAIL: plan --offload --json: no offload per stage or program size"; fail=$((fail + 1)); }
# host memory too small as well: nothing fits even with offload, and the shortfall and the
# fewest chips, which the search finds without offload, say so
sed 's/"memory_bytes": 137438953472/"memory_bytes": 1000/' "$tmp/hw.json" >"$tmp/hw2.json"
"$SHARDPLAN" plan --model tiny-llama --hw "$tmp/hw2.json" --chips 1 --batch 4 --prompt 5 --gen 4 --weights bf16 \
    --offload >"$tmp/no2.txt" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "shortfall is .* per chip without offload" "$tmp/no2.txt" &&
    grep -q "^fewest chips that fit without offload (the search does not offload): [0-9]" "$tmp/no2.txt" ||
    { echo "FAIL: plan --offload, host memory short: exit $rc (want 1, labelled without offload)"; cat "$tmp/no2.txt"; fail=$((fail + 1)); }
# beside it, the best layout without offload and why it lost: here it does not fit
"$JSONQ" "$tmp/p.json" '/rivals/*/kind' | grep -qx offload &&
n=$("$JSONQ" "$tmp/p.json" '/rivals/*/kind' | grep -n -x offload | cut -d: -f1) &&
json_check '$1 == "memory" && $2 > 0' "$tmp/p.json" "/rivals/$((n - 1))" /loss /shortfall_bytes &&
! "$JSONQ" -k "$tmp/p.json" "/rivals/$((n - 1))/layout" | grep -q offload ||
    { echo "FAIL: plan --offload --json: no rival without offload, or it does not say it does not fit"; fail=$((fail + 1)); }
"$SHARDPLAN" plan $JOB --offload >"$tmp/p.txt" 2>&1 &&
grep -q "^offload  *memory  *no offload (weights and KV cache in HBM): does not fit" "$tmp/p.txt" &&
grep -q "streamed layers" "$tmp/p.txt" && grep -q "offload program:" "$tmp/p.txt" ||
    { echo "FAIL: plan --offload text: no offload columns"; cat "$tmp/p.txt"; fail=$((fail + 1)); }
"$SHARDPLAN" estimate --model tiny-llama --hw "$tmp/hw.json" --chips 1 --batch 4 --prompt 5 --gen 4 \
    --layout "$lay" --json >"$tmp/e.json" 2>"$tmp/e.err" &&
json_check '$1 == "true" || $1 == 1' "$tmp/e.json" /feasible ||
    { echo "FAIL: estimate --layout $lay does not accept it or it does not fit"; cat "$tmp/e.err"; fail=$((fail + 1)); }
# run on threads: the tokens of the same layout without offload
ref=$(echo "$lay" | sed 's/,offload_\(weights\|attn\|ffn\)=[0-9,]*//g; s/,offload_kv=[0-9.e-]*//')
"$SHARDPLAN" run --model tiny-llama --batch 4 --prompt 5 --gen 4 --layout "$lay" --json >"$tmp/r.json" 2>"$tmp/r.err" ||
    { echo "FAIL: run --layout $lay: exit $?"; cat "$tmp/r.err"; fail=$((fail + 1)); }
"$SHARDPLAN" run --model tiny-llama --batch 4 --prompt 5 --gen 4 --layout "$ref" --json >"$tmp/r0.json" 2>"$tmp/r0.err" ||
    { echo "FAIL: run --layout $ref: exit $?"; cat "$tmp/r0.err"; fail=$((fail + 1)); }
t1=$("$JSONQ" "$tmp/r.json" '/tokens/*' | tr '\n' ' ') t0=$("$JSONQ" "$tmp/r0.json" '/tokens/*' | tr '\n' ' ')
[ -n "$t1" ] && [ "$t1" = "$t0" ] ||
    { echo "FAIL: run with offload gives tokens [$t1], without [$t0]"; fail=$((fail + 1)); }
json_check '$1 > 0' -n "$tmp/r.json" /comm/host_link_load_bytes 2>/dev/null ||
    "$JSONQ" -k "$tmp/r.json" /comm | grep -q host ||
    { echo "FAIL: run with offload reports no host-link copies"; fail=$((fail + 1)); }
# where the hardware states no host memory, --offload is not offered, and the plan says so
sed 's/"memory_bytes": 137438953472/"memory_bytes": 0/' "$tmp/hw.json" >"$tmp/nohost.json"
"$SHARDPLAN" plan $JOB --hw "$tmp/nohost.json" --offload >"$tmp/nh.txt" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "offload not offered" "$tmp/nh.txt" ||
    { echo "FAIL: plan --offload without host memory: exit $rc"; cat "$tmp/nh.txt"; fail=$((fail + 1)); }
exit $fail
