#!/bin/sh
# simulate: agrees with the closed form (both figures printed), writes a
# trace file with one process per chip and every step, and exits 2 on bad
# input (missing options, a layout that does not apply, an uncreatable trace).
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # name, expected exit, command...
    name=$1; want=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL: $name: exit $rc, wanted $want"; sed 's/^/  /' "$tmp/err" | head -5; fail=$((fail + 1))
    fi
}
J="--model tiny-llama --hw h100 --chips 4 --batch 8 --prompt 16 --gen 8"
L="stages=2,mesh=2x1x1,microbatches=2,prefill=wg-x/heads,decode=wg-x/heads"
check "simulate --json" 0 "$SHARDPLAN" simulate $J --layout "$L" --json --trace "$tmp/t.json"
# the simulated figures are the closed form's, digit for digit
same_as_closed_form() { # what
    for k in prefill_s decode_step_s; do
        a=$(grep "\"$k\"" "$tmp/out" | head -1 | sed 's/.*: *//; s/,$//')
        b=$(grep "\"closed_form_$k\"" "$tmp/out" | sed 's/.*: *//; s/,$//')
        [ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: $1 $k: simulated $a, closed form $b"; fail=$((fail + 1)); }
    done
}
same_as_closed_form mesh
# the trace: one process per chip, both streams named, complete events with ids
head -c 40 "$tmp/t.json" | grep -q '^{"displayTimeUnit":"ns","traceEvents":\[' || { echo "FAIL: trace header"; fail=$((fail + 1)); }
tail -c 4 "$tmp/t.json" | grep -q ']}' || { echo "FAIL: trace not closed"; fail=$((fail + 1)); }
n=$(grep -c '"process_name"' "$tmp/t.json")
[ "$n" -eq 4 ] || { echo "FAIL: $n chip processes, wanted 4"; fail=$((fail + 1)); }
ev=$(grep -c '"ph":"X"' "$tmp/t.json")
want=$(grep '"events"' "$tmp/out" | sed 's/.*: *//; s/,$//')
[ "$ev" = "$want" ] || { echo "FAIL: $ev events in the trace, $want simulated"; fail=$((fail + 1)); }
grep -q '"id":"decode7/post/-1/' "$tmp/t.json" || { echo "FAIL: last decode step's ids"; fail=$((fail + 1)); }
check "simulate table" 0 "$SHARDPLAN" simulate $J --layout "$L"
grep -q "^decode step (last context)" "$tmp/out" || { echo "FAIL: table"; fail=$((fail + 1)); }
check "simulate without --layout" 2 "$SHARDPLAN" simulate $J
check "simulate, layout for 8 chips" 2 "$SHARDPLAN" simulate $J --layout mesh=8x1x1
check "simulate, uncreatable trace" 2 "$SHARDPLAN" simulate $J --layout "$L" --trace /nonexistent-dir/t.json
check "simulate --tokens 0" 2 "$SHARDPLAN" simulate $J --layout "$L" --tokens 0
check "simulate --help" 0 "$SHARDPLAN" simulate --help
# stages of their own mesh: 8 + 4 chips, the closed form's figures, one trace process per chip
H="--model tiny-llama --hw h100 --chips 12 --batch 8 --prompt 16 --gen 8"
check "simulate stage_mesh" 0 "$SHARDPLAN" simulate $H --layout "stages=2,stage_mesh=8x1x1,4x1x1,microbatches=2" --json --trace "$tmp/h.json"
same_as_closed_form stage_mesh
n=$(grep -c '"process_name"' "$tmp/h.json")
[ "$n" -eq 12 ] || { echo "FAIL: stage_mesh: $n chip processes, wanted 12"; fail=$((fail + 1)); }
[ "$fail" -eq 0 ] && echo "cli_simulate: all passed"
exit $((fail > 0))
