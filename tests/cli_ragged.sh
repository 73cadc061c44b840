#!/bin/sh
# Ragged batches on the command line: estimate --workload prices a batch by
# its actual tokens beside the same batch padded (text and JSON), equal
# lengths price as the padded batch, bad workload files exit 2 naming the
# file, line and field, and layouts the lowering does not take are refused
# by name (exit 2).
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
# bad input: exit 2, file:line and field
expect2() {   # expect2 NAME PATTERN ARGS...
    _n=$1 _p=$2; shift 2
    "$SHARDPLAN" "$@" >/dev/null 2>"$tmp/err"; rc=$?
    [ $rc -eq 2 ] && grep -q -- "$_p" "$tmp/err" ||
        { echo "FAIL: $_n: exit $rc (want 2), stderr:"; cat "$tmp/err"; echo "  (want '$_p')"; fail=$((fail + 1)); }
}
printf '3,4\n7,x\n' >"$tmp/bad1.csv"
expect2 "bad gen" "bad1.csv:2:.*gen" $E --workload "$tmp/bad1.csv"
printf '3,4\n0,2\n' >"$tmp/bad2.csv"
expect2 "zero prompt" "bad2.csv:2:.*prompt" $E --workload "$tmp/bad2.csv"
printf '{"sequences": [{"prompt": 3}]}' >"$tmp/bad3.json"
expect2 "json field" "bad3.json: /sequences/0" $E --workload "$tmp/bad3.json"
expect2 "missing file" "nope.csv" $E --workload "$tmp/nope.csv"
expect2 "with --batch" "replaces --batch" $E --workload "$tmp/w.csv" --batch 4
expect2 "batch-sharded" "ragged batches with batch-sharded attention" estimate --model llama2-7b --hw h100 --chips 2 \
    --layout mesh=2x1x1,prefill=ws1d/batch,decode=ws1d/batch --workload "$tmp/w.csv"
expect2 "replicas" "not implemented" estimate --model llama2-7b --hw h100 --chips 2 \
    --layout replicas=2,mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads --workload "$tmp/w.csv"
[ $fail -eq 0 ] || exit 1
