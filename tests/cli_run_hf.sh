#!/bin/sh
# run --weights DIR: a tiny Llama checkpoint (tests/ref/llama: config.json and
# model.safetensors, 4 heads over 2 KV heads, written by tests/ref/gen_golden.py
# and committed) runs on 1, 2 and 4 chips with identical greedy and sampled
# tokens, bytes as predicted; a truncated checkpoint is refused with exit 2.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
. "${top_srcdir:-.}/tests/json.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# a copy: the last check truncates it
cp "${top_srcdir:-.}/tests/ref/llama/config.json" "${top_srcdir:-.}/tests/ref/llama/model.safetensors" "$dir/" ||
    { echo "FAIL: could not copy the checkpoint"; exit 1; }
fail=0
toks() { # run --json on stdin: its tokens, when every step's bytes were as predicted
    cat >"$dir/run.json" && json_check '$1 == 0' -n "$dir/run.json" /comm/mismatches >&2 && "$JSONQ" "$dir/run.json" /tokens
}
ref=$("$SHARDPLAN" run --weights "$dir" --batch 4 --prompt 6 --gen 8 --layout mesh=1x1x1,weights=f32,kv=f32 --json | toks) \
    || { echo "FAIL: 1-chip run"; exit 1; }
for lay in "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads" \
           "mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch"; do
    got=$("$SHARDPLAN" run --weights "$dir" --batch 4 --prompt 6 --gen 8 --layout "$lay" --json | toks)
    [ "$got" = "$ref" ] || { echo "FAIL: $lay: $got != $ref"; fail=$((fail + 1)); }
done
sref=$("$SHARDPLAN" run --weights "$dir" --batch 4 --prompt 6 --gen 8 --temperature 0.8 --top-k 20 --top-p 0.9 \
    --layout mesh=1x1x1,weights=f32,kv=f32 --json | toks)
sgot=$("$SHARDPLAN" run --weights "$dir" --batch 4 --prompt 6 --gen 8 --temperature 0.8 --top-k 20 --top-p 0.9 \
    --layout mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch --json | toks)
[ -n "$sref" ] && [ "$sref" = "$sgot" ] || { echo "FAIL: sampled tokens $sgot != $sref"; fail=$((fail + 1)); }
[ "$sref" != "$ref" ] || { echo "FAIL: sampling gave the greedy tokens"; fail=$((fail + 1)); }
# a truncated checkpoint: exit 2 with the file named
head -c 3000 "$dir/model.safetensors" > "$dir/t" && mv "$dir/t" "$dir/model.safetensors"
"$SHARDPLAN" run --weights "$dir" --batch 1 --prompt 2 --gen 2 --layout mesh=1x1x1 >/dev/null 2>"$dir/err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "safetensors" "$dir/err" || { echo "FAIL: truncated checkpoint: exit $rc: $(cat "$dir/err")"; fail=$((fail + 1)); }
[ "$fail" -eq 0 ] && echo "5 passed, 0 failed" || echo "$fail failed"
[ "$fail" -eq 0 ]
