#!/bin/sh
# plan_identical.sh: `shardplan plan --json` of two builds over a set of
# instances, compared figure by figure (everything but the timing stats and
# the counts of work done, which a faster search is allowed to change).
# A speed-up of the cost model or the planner must leave every answer the same
# to the bit: chosen layout and costs, stages, frontier, rivals.
#
# Usage (from the build directory): sh bench/plan_identical.sh OLD_SHARDPLAN [NEW_SHARDPLAN]
#   OLD_DATA=DIR: the bundled data the old binary reads (SHARDPLAN_DATA; by
#   default the data/ beside OLD_SHARDPLAN when there is one)
# Exit 0 when every instance agrees; prints each instance that differs, and each whose
# plan one side failed to write (FAILED, with its error).
set -eu
old=${1:?usage: plan_identical.sh OLD_SHARDPLAN [NEW_SHARDPLAN]}
new=${2:-./shardplan}
command -v jq >/dev/null || { echo "plan_identical: needs jq" >&2; exit 1; }
old_data=${OLD_DATA:-$(dirname "$old")/data}
tmp=${TMPDIR:-/tmp}/plan_identical.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
# model hw chips batch prompt gen [extra options]
cat > "$tmp/cases" <<'CASES'
palm-540b h100 256 256 2048 64
llama3.1-70b a100-80g 4 128 128 1024 --objective cost
palm-8b h100 8 64 512 128 --objective throughput
palm-8b h100 8 1 512 512
palm-540b tpu-v4 64 64 2048 64
palm-540b tpu-v4 64 512 2048 0
palm-540b tpu-v4 64 1 128 128 --objective cost
palm-540b tpu-v4 128 64 2048 64 --latency-metric decode
palm-62b tpu-v4 8 512 2048 64
palm-8b tpu-v4 16 32 512 256 --objective throughput --max-latency-ms 20000
llama2-70b a100-80g 8 16 1024 128
llama2-70b h100 16 64 2048 256 --objective cost
llama3.1-405b h100 32 8 4096 512
gpt3-175b a100-40g 16 4 512 64
mixtral-8x7b h100 8 32 1024 128
gpt-20b-ft a100-80g 8 1 512 32 --latency-metric prefill
falcon-180b h200 8 16 2048 128 --weights int8
falcon-180b a100-80g 16 128 256 32
palm-540b tpu-v4 256 64 2048 64
palm-62b tpu-v4 64 64 1024 128 --min-chips --max-latency-ms 3000
mixtral-8x7b h100 8 64 1024 128 --offload
llama2-70b a100-80g 4 16 1024 128 --offload
llama2-70b h100 16 32 1024 128 --disaggregate
llama2-70b h100 16 64 2048 256 --objective throughput --max-latency-ms 30000
llama2-70b a100-80g 8 64 2048 0
llama2-70b a100-80g 8 64 0 128
palm-540b tpu-v4 64 64 2048 64 --objective cost --latency-metric decode --min-tokens-per-s 200
mixtral-8x7b h100 16 64 1024 128 --objective cost
palm-62b tpu-v4 32 16 512 128 --even-stages
llama2-70b h100 8 32 2048 128 --weights fp8
gpt3-175b h100 64 32 1024 64 --objective throughput --max-latency-ms 20000
palm-8b a100-80g 4 8 256 512 --latency-metric decode
CASES
n=0 bad=0
while read -r m h c b p g extra; do
    n=$((n + 1))
    for side in old new; do
        eval bin=\$$side
        env=
        if [ "$side" = old ] && [ -d "$old_data" ]; then env="SHARDPLAN_DATA=$old_data"; fi
        # shellcheck disable=SC2086
        env $env "$bin" plan --model "$m" --hw "$h" --chips "$c" --batch "$b" --prompt "$p" --gen "$g" $extra --json \
            >"$tmp/$side.json" 2>"$tmp/$side.err" || true
        jq -S 'del(.stats)' "$tmp/$side.json" >"$tmp/$side.cmp" 2>/dev/null || cp "$tmp/$side.err" "$tmp/$side.cmp"
    done
    # a side that wrote no plan (a bad binary, or the old one without its data: OLD_DATA) is a
    # failed run, not a different answer
    failed=
    for side in old new; do
        { [ -s "$tmp/$side.json" ] && jq -e '.status' "$tmp/$side.json" >/dev/null 2>&1; } || failed="$failed $side"
    done
    if [ -n "$failed" ]; then
        bad=$((bad + 1))
        echo "FAILED ($failed ): $m $h $c $b $p $g $extra"
        for side in $failed; do sed "s/^/  $side: /" "$tmp/$side.err" | head -3; done
    elif ! cmp -s "$tmp/old.cmp" "$tmp/new.cmp"; then
        bad=$((bad + 1))
        echo "DIFFERS: $m $h $c $b $p $g $extra"
        diff "$tmp/old.cmp" "$tmp/new.cmp" | head -20
    fi
done <"$tmp/cases"
echo "# $n instances, $bad differ or failed"
test "$bad" -eq 0
