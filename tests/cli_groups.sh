#!/bin/sh
# Separate prefill and decode chip groups on the command line: estimate
# prices palm-62b prefilling on 4x4x2 and decoding on 2x2x2 TPU v4 chips
# (text and JSON, the figures composing as sp_cost.h says); a layout whose
# groups do not add up to --chips exits 2; `run` executes separate groups on
# threads; `simulate` lays both groups and the KV transfer on the timeline
# (its figures the closed form's), and the traces of `run` and `simulate`
# hold the same events: every step of each group's program once per chip,
# micro-batch and decode step, and one KV message per chip pair on each side.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
. "${top_srcdir:-.}/tests/json.sh"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
PALM="--model palm-62b --hw tpu-v4 --chips 40 --batch 512 --prompt 2048 --gen 64"
LAY="prefill.mesh=4x4x2,decode.mesh=2x2x2,weights=bf16,prefill=wg-xyz/batch,decode=ws2d/batch,prefill_chunk=64"
"$SHARDPLAN" estimate $PALM --layout "$LAY" >"$tmp/est.txt" 2>"$tmp/est.err" ||
    { echo "FAIL: estimate of separate groups: exit $?"; cat "$tmp/est.err"; fail=$((fail + 1)); }
for want in "KV transfer" "latency of one batch" "steady state" "prefill group" "decode group"; do
    grep -q "$want" "$tmp/est.txt" || { echo "FAIL: estimate text lacks '$want'"; fail=$((fail + 1)); }
done
"$SHARDPLAN" estimate $PALM --layout "$LAY" --json >"$tmp/est.json" 2>"$tmp/est.err" ||
    { echo "FAIL: estimate --json of separate groups: exit $?"; cat "$tmp/est.err"; fail=$((fail + 1)); }
json_check '$1 > 0 && $2 > 0 && $3 > 0' "$tmp/est.json" "" /prefill_s /kv_transfer_s /decode_step_s &&
json_check '$1 == 32 && $2 == 8' "$tmp/est.json" "" /groups/prefill/chips /groups/decode/chips &&
json_check '$1 > 0 && $2 > 0' "$tmp/est.json" "" /groups/prefill/memory_per_chip/total /groups/decode/memory_per_chip/total &&
json_check 'abs($1 - $2 - $3 - $4) <= 1e-9 * $1' "$tmp/est.json" "" /latency_s /prefill_s /kv_transfer_s /decode_s &&
json_check 'abs($1 - ($2 > $3 ? $2 : $3) - $4) <= 1e-9 * $1' "$tmp/est.json" "" /period_s /prefill_s /decode_s /kv_transfer_s &&
json_check 'abs($1 - 512 * 64 / $2) <= 1e-6 * $1' "$tmp/est.json" "" /tokens_per_s /period_s ||
    { echo "FAIL: estimate --json of separate groups"; cat "$tmp/est.json"; fail=$((fail + 1)); }
# groups that do not add up to --chips
"$SHARDPLAN" estimate --model palm-62b --hw tpu-v4 --chips 32 --batch 512 --prompt 2048 --gen 64 --layout "$LAY" \
    >/dev/null 2>"$tmp/bad.err"
rc=$?
[ $rc -eq 2 ] && grep -q "40 chips" "$tmp/bad.err" ||
    { echo "FAIL: groups of 40 chips on --chips 32: exit $rc"; cat "$tmp/bad.err"; fail=$((fail + 1)); }
# run executes separate groups on threads (4 prefill + 2 decode chips): the tokens of the
# one-chip run, bytes as predicted (under mpirun: mpi_exec.sh)
RUN="run --model tiny-llama --batch 8 --prompt 5 --gen 3 --json"
"$SHARDPLAN" $RUN --layout weights=f32,kv=f32 >"$tmp/r1.json" &&
"$SHARDPLAN" $RUN --layout weights=f32,kv=f32,prefill.mesh=4x1x1,decode.mesh=2x1x1 >"$tmp/r6.json" ||
    { echo "FAIL: run of separate groups: exit $?"; fail=$((fail + 1)); }
json_same "$tmp/r1.json" "$tmp/r6.json" /tokens &&
json_check '$1 == $2 && $1 > 0' "$tmp/r6.json" /comm /measured_bytes/send-recv /predicted_bytes/send-recv ||
    { echo "FAIL: run of separate groups: tokens or bytes"; fail=$((fail + 1)); }
# simulate: prefill, the transfer and 64 decode steps on the timeline = the closed form's figures
# (to the picosecond: check_sim; the JSON carries 10 digits)
"$SHARDPLAN" simulate $PALM --layout "$LAY" --tokens 64 --json >"$tmp/sim.json" 2>"$tmp/sim.err" ||
    { echo "FAIL: simulate of separate groups: exit $?"; cat "$tmp/sim.err"; fail=$((fail + 1)); }
json_check '$1 == $2 && $3 == $4 && $5 == $6 && $5 > 0' "$tmp/sim.json" "" /prefill_s /closed_form_prefill_s \
    /decode_step_s /closed_form_decode_step_s /kv_transfer_s /closed_form_kv_transfer_s &&
json_check 'abs($1 - $2) <= 1e-9 * $2 && abs($2 - $3 - $4 - 64 * $5) <= 1e-9 * $2' "$tmp/sim.json" "" /makespan_s \
    /closed_form_makespan_s /prefill_s /kv_transfer_s /decode_step_s ||
    { echo "FAIL: simulate of separate groups: figures"; cat "$tmp/sim.json"; fail=$((fail + 1)); }
# run --trace and simulate --trace of separate groups: the same (chip, step id, micro-batch) events,
# decode steps numbered from the run's first (run) and its last (simulate): compared without the number
for L in weights=f32,kv=f32,prefill.mesh=4x1x1,decode.mesh=2x1x1 \
    weights=f32,kv=f32,prefill.stages=2,prefill.mesh=2x1x1,decode.mesh=2x1x1,microbatches=2 \
    weights=f32,kv=f32,prefill.mesh=2x1x1,decode.stages=2,decode.mesh=2x1x1,microbatches=2,decode=ws2d/batch; do
    "$SHARDPLAN" $RUN --layout "$L" --trace "$tmp/rt.json" >/dev/null &&
    "$SHARDPLAN" simulate --model tiny-llama --hw a100-80g --chips 6 --batch 8 --prompt 5 --gen 3 --tokens 2 \
        --layout "$L" --trace "$tmp/st.json" >/dev/null || { echo "FAIL: run / simulate --trace of $L"; fail=$((fail + 1)); }
    for t in rt st; do
        "$JSONQ" -w /ph=X "$tmp/$t.json" '/traceEvents/*' /pid /args/id /args/mb >"$tmp/$t.ev" &&
            [ -s "$tmp/$t.ev" ] && [ -z "$(sort "$tmp/$t.ev" | uniq -d)" ] ||
            { echo "FAIL: $t trace of $L repeats (chip, id, micro-batch)"; fail=$((fail + 1)); }
        sed 's/	decode[0-9]*/	decode/' "$tmp/$t.ev" | sort >"$tmp/$t.norm"
    done
    [ "$(cut -f1 "$tmp/rt.ev" | sort -un | tr '\n' ' ')" = "0 1 2 3 4 5 " ] && grep -q '	kv/send/' "$tmp/rt.ev" &&
        grep -q '	kv/recv/' "$tmp/rt.ev" && cmp -s "$tmp/rt.norm" "$tmp/st.norm" ||
        { echo "FAIL: run and simulate traces of $L differ"; diff "$tmp/rt.norm" "$tmp/st.norm" | head -5;
          fail=$((fail + 1)); }
done
# plan --disaggregate: the groups searched and reported (both groups and the split); the chosen
# layout is the pair exactly when it beat the shared layout; without the flag no "groups"
PLAN="plan --model tiny-llama --hw a100-80g --chips 4 --batch 8 --prompt 64 --gen 16 --objective throughput --json"
"$SHARDPLAN" $PLAN >"$tmp/p0.json" && "$SHARDPLAN" $PLAN --disaggregate >"$tmp/p1.json" ||
    { echo "FAIL: plan --disaggregate: exit $?"; fail=$((fail + 1)); }
"$JSONQ" "$tmp/p0.json" "" /groups >/dev/null 2>&1 && { echo "FAIL: plan without --disaggregate reports groups"; fail=$((fail + 1)); }
json_check '$1 + $2 == 4 && $1 > 0 && $2 > 0' "$tmp/p1.json" /groups/best /prefill_chips /decode_chips &&
json_check '$1 > 0 && $2 > 0' "$tmp/p1.json" /groups/program /columns /rows ||
    { echo "FAIL: plan --disaggregate: groups"; "$JSONQ" "$tmp/p1.json" "" /groups; fail=$((fail + 1)); }
if json_check '$1 == "true"' "$tmp/p1.json" /groups /chosen >/dev/null; then
    [ "$("$JSONQ" "$tmp/p1.json" /chosen /layout_text)" = "$("$JSONQ" "$tmp/p1.json" /groups/best /layout_text)" ] ||
        { echo "FAIL: plan --disaggregate chose the pair but prints another layout"; fail=$((fail + 1)); }
else
    json_same "$tmp/p0.json" "$tmp/p1.json" /chosen/layout_text ||
        { echo "FAIL: plan --disaggregate kept the shared layout but changed it"; fail=$((fail + 1)); }
fi
exit $fail
