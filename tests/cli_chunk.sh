#!/bin/sh
# Chunked prefill and short pipelines on the command line: the planner
# chunks palm-62b's 512 × 2048-token prefill on 8 TPU v4 chips so that it
# fits (the whole prefill's activations do not), and a prompt too long for
# one sequence's activations by token passes; the layout it writes runs
# through estimate and simulate; `run` executes chunked layouts in text and
# JSON form; bad values exit 2 naming the key.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
. "${top_srcdir:-.}/tests/json.sh"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
PALM="--model palm-62b --hw tpu-v4 --chips 8 --batch 512 --prompt 2048 --gen 64"
"$SHARDPLAN" plan $PALM --weights bf16 --json >"$tmp/plan.json" 2>"$tmp/plan.err" ||
    { echo "FAIL: plan palm-62b on 8 chips: exit $?"; cat "$tmp/plan.err"; fail=$((fail + 1)); }
json_check '$1 == "optimal" && $2 >= 1' "$tmp/plan.json" "" /status /chosen/layout/prefill_chunk &&
json_check '$1 <= $2' "$tmp/plan.json" /chosen/costs/memory_per_chip /total /capacity ||
    { echo "FAIL: plan palm-62b: no chunked layout that fits"; fail=$((fail + 1)); }
# the chosen layout priced and simulated alike
lay=$("$SHARDPLAN" plan $PALM --weights bf16 | sed -n 's/^chosen layout: //p')
case $lay in *prefill_chunk=*) ;; *) echo "FAIL: plan's chosen layout is not chunked: '$lay'"; fail=$((fail + 1)) ;; esac
for verb in estimate simulate; do
    "$SHARDPLAN" $verb $PALM --layout "$lay" --json >"$tmp/$verb.json" 2>"$tmp/$verb.err" ||
        { echo "FAIL: $verb of the chosen layout: exit $?"; cat "$tmp/$verb.err"; fail=$((fail + 1)); }
done
json_check '$1 == "true" || $1 == 1' "$tmp/estimate.json" /feasible &&
json_check '$1 > 0 && $2 > 0' "$tmp/simulate.json" "" /prefill_s /decode_step_s ||
    { echo "FAIL: the chosen layout is not priced or simulated"; fail=$((fail + 1)); }
# one sequence's activations alone do not fit (8 × 65536 tokens): token passes
lay=$("$SHARDPLAN" plan --model palm-62b --hw tpu-v4 --chips 8 --batch 8 --prompt 65536 --gen 16 --weights bf16 |
      sed -n 's/^chosen layout: //p')
case $lay in *prefill_tokens=*) ;; *) echo "FAIL: long prompts: no token passes chosen: '$lay'"; fail=$((fail + 1)) ;; esac
"$SHARDPLAN" simulate --model palm-62b --hw tpu-v4 --chips 8 --batch 8 --prompt 65536 --gen 16 --layout "$lay" \
    >/dev/null 2>"$tmp/long.err" || { echo "FAIL: simulate $lay"; cat "$tmp/long.err"; fail=$((fail + 1)); }
# run: chunks by sequences and tokens, text and JSON, equal tokens to the unchunked run
RUN="run --model tiny-llama --batch 4 --prompt 6 --gen 4 --seed 3 --json"
"$SHARDPLAN" $RUN --layout mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads >"$tmp/r0.json" ||
    { echo "FAIL: run unchunked"; fail=$((fail + 1)); }
"$SHARDPLAN" $RUN --layout mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,prefill_chunk=2,prefill_tokens=3 \
    >"$tmp/r1.json" || { echo "FAIL: run chunked (text)"; fail=$((fail + 1)); }
"$SHARDPLAN" $RUN --layout '{"mesh": [2, 1, 1], "weights": "f32", "kv": "f32", "prefill": {"ffn": "ws1d", "attn": "heads"},
    "decode": {"ffn": "ws1d", "attn": "heads"}, "prefill_chunk": 1, "prefill_tokens": 2}' >"$tmp/r2.json" ||
    { echo "FAIL: run chunked (JSON)"; fail=$((fail + 1)); }
for r in r1 r2; do
    json_same "$tmp/r0.json" "$tmp/$r.json" /tokens &&
    json_check '$1 == $2' "$tmp/$r.json" /comm /measured_bytes /predicted_bytes &&
    json_check '$1 == $2' "$tmp/$r.json" /memory /allocated_bytes_per_chip /predicted_bytes_per_chip ||
        { echo "FAIL: $r: tokens, bytes or memory differ"; fail=$((fail + 1)); }
done
# traces of a chunked prefill: each pass has its own ids (prefill<p>), so (chip, id, micro-batch)
# names one event in the simulated and in the measured timeline, and both hold the same prefill events
CL="mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads,prefill_chunk=2,prefill_tokens=3"
"$SHARDPLAN" $RUN --layout "$CL" --trace "$tmp/rt.json" >/dev/null &&
"$SHARDPLAN" simulate --model tiny-llama --hw a100-80g --chips 2 --batch 4 --prompt 6 --gen 4 --layout "$CL" \
    --trace "$tmp/st.json" >/dev/null || { echo "FAIL: run / simulate --trace of $CL"; fail=$((fail + 1)); }
for t in rt st; do
    "$JSONQ" -w /ph=X "$tmp/$t.json" '/traceEvents/*' /pid /args/id /args/mb >"$tmp/$t.ev" &&
        [ -s "$tmp/$t.ev" ] && [ -z "$(sort "$tmp/$t.ev" | uniq -d)" ] ||
        { echo "FAIL: $t trace of a chunked prefill repeats (chip, id, micro-batch)"; sort "$tmp/$t.ev" | uniq -d | head -3;
          fail=$((fail + 1)); }
    grep '	prefill' "$tmp/$t.ev" | sort >"$tmp/$t.pf"
done
# 2 sequence chunks × 2 token passes: prefill0 .. prefill3, and nothing else
[ "$(cut -f2 "$tmp/rt.pf" | sed 's|/.*||' | sort -u | tr '\n' ' ')" = "prefill0 prefill1 prefill2 prefill3 " ] &&
    cmp -s "$tmp/rt.pf" "$tmp/st.pf" ||
    { echo "FAIL: chunked prefill traces: passes or events differ between run and simulate"; fail=$((fail + 1)); }
# bad values: exit 2, the key named
while IFS='|' read -r lay key; do
    for verb in estimate simulate run; do
        case $verb in
        run) set -- run --model tiny-llama --batch 4 --prompt 8 --gen 2 ;;
        *) set -- $verb --model tiny-llama --hw a100-80g --chips 1 --batch 4 --prompt 8 --gen 2 ;;
        esac
        err=$("$SHARDPLAN" "$@" --layout "$lay" 2>&1 >/dev/null)
        rc=$?
        case "$rc:$err" in
        2:*"$key"*) ;;
        *) echo "FAIL: $verb $lay: exit $rc, want 2 naming $key: $err"; fail=$((fail + 1)) ;;
        esac
    done
done <<'EOF2'
prefill_chunk=0|prefill_chunk
prefill_tokens=0|prefill_tokens
prefill_chunk=3|prefill_chunk=3
prefill_tokens=3|prefill_tokens=3
prefill_tokens=16|prefill_tokens=16
{"prefill_chunk": 0}|/prefill_chunk
stages=2,microbatches=0|microbatches
EOF2
# fewer micro-batches than stages: priced (a batch of 1 through 2 stages)
"$SHARDPLAN" estimate --model tiny-llama --hw a100-80g --chips 2 --batch 1 --prompt 4 --gen 2 \
    --layout stages=2,microbatches=1 --json >"$tmp/b.json" && json_check '$1 > 0' "$tmp/b.json" /decode_step_s ||
    { echo "FAIL: stages=2 with 1 micro-batch not priced"; fail=$((fail + 1)); }
[ $fail -eq 0 ] && echo "cli_chunk: passed" || echo "cli_chunk: $fail failed"
[ $fail -eq 0 ]
