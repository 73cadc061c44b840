#!/bin/sh
# cost_compare.sh: the cost model and `plan` before and after a change, in
# one run (these machines vary 2x in speed from day to day: only ratios
# measured side by side mean anything).
#
# Usage (from the build directory): sh bench/cost_compare.sh BASELINE_BUILD_DIR [ROUNDS]
#   BASELINE_BUILD_DIR: a build of the old tree holding bench/bench_cost and shardplan
#
# Each round runs old and new bench_cost (us per evaluation, memoised and
# fresh) and plan_process.sh (median wall ms of `shardplan plan`, palm-540b
# on 64 tpu-v4) back to back, alternating which goes first; the table gives
# each round's figures and the median ratio new / old.
#
# Napkin math for the new cost terms: a program of ~29 steps (pre, one layer,
# post) is priced once as before (plus a memory-efficiency lookup per step),
# then scheduled: a program with no overlapping collective is a chain (the
# sum, free); otherwise the layer is scheduled until the state repeats (two
# layers in practice, ~15 of its steps taking part), twice for decode
# (first and last context).  Expected ~+40-60 % over round 1.
# Measured (bench/bench_cost.c has the count per part): instructions per
# evaluation 12.9k in round 1, 31.5k with the new terms, 31.4k with what
# came since (6649411), 27.9k now (2.2x round 1); `shardplan plan` on one
# thread (SHARDPLAN_THREADS=1 under callgrind) 455M instructions in round
# 1, 1420M before, 1117M now (2.5x; a pipeline's stages now share their
# layer's lowering).  This script, 3 rounds against round 1 at load 6-14
# on the 2 cores: evaluation 2.38, fresh 2.60, plan 2.14; against the tree
# before, 5 rounds at load 5-13: 1.00, 0.92, 0.86.  At such a load the
# rounds spread 2x, so compare instruction counts when the machine is busy.
# Later, with everything since (offload, stage meshes, chunked passes):
# 31.0k per evaluation before the phase memo's faster hash and the debug
# knob parsed once, 30.2k after (2.3x round 1); the plan 2667M before,
# 2524M after (5.5x round 1).  This script against round 1 at load 17-21:
# 1.83, 2.20, 5.29, its rounds spreading 5x (not to be trusted).
# 2026-11-24 (doc/planner.md, "Against round 1"), in one session: the plan
# 455.8M in round 1, 1693.0M on main (003f851), 1543.3M now (3.4x round 1,
# 3.7x before; fewer prefill programs by their key, a kept layer's prices
# kept, storage and phase memos that evict less); per evaluation 12.9k,
# 30.4k, 27.8k (2.2x).  This script against main, 5 rounds at load 5.7-6.4:
# 1.00, 1.07, 0.83 (rounds spreading 1.8x; the counts are the figure).
set -eu
base=${1:?usage: cost_compare.sh BASELINE_BUILD_DIR [ROUNDS]}
rounds=${2:-3}
for b in "$base/bench/bench_cost" "$base/shardplan" ./bench/bench_cost ./shardplan; do
    test -x "$b" || { echo "cost_compare: $b not found (make bench/bench_cost shardplan in both trees)" >&2; exit 1; }
done
# OLD_ENV: the old binaries read the old tree's data (BASELINE_BUILD_DIR/data
# when there is one: a profile format that grew since would not load in them)
OLD_ENV=
test -d "$base/data" && OLD_ENV="SHARDPLAN_DATA=$(cd "$base/data" && pwd)"
us() { env ${2:-} "$1" 2 | awk '/^us per evaluation  /{e=$4} /^us per evaluation, fresh/{f=$5} END {print e, f}'; }
plan_ms() { env SHARDPLAN="$1" ${2:-} sh bench/plan_process.sh 11 | awk '/^plan palm/{print $5}'; }
printf '%-6s %12s %12s %12s %12s %12s %12s\n' round "old us" "new us" "old fresh" "new fresh" "old plan ms" "new plan ms"
i=1
while [ "$i" -le "$rounds" ]; do
    if [ $((i % 2)) -eq 1 ]; then
        o=$(us "$base/bench/bench_cost" "$OLD_ENV"); n=$(us ./bench/bench_cost)
        op=$(plan_ms "$base/shardplan" "$OLD_ENV"); np=$(plan_ms ./shardplan)
    else
        n=$(us ./bench/bench_cost); o=$(us "$base/bench/bench_cost" "$OLD_ENV")
        np=$(plan_ms ./shardplan); op=$(plan_ms "$base/shardplan" "$OLD_ENV")
    fi
    echo "$i $o $n $op $np" | awk '{printf "%-6s %12s %12s %12s %12s %12s %12s\n", $1, $2, $4, $3, $5, $6, $7}'
    i=$((i + 1))
done | tee /tmp/cost_compare.$$
awk '{r1[NR] = $3 / $2; r2[NR] = $5 / $4; r3[NR] = $7 / $6}
     function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                    return a[int((n + 1) / 2)] }
     END { printf "# median new/old: evaluation %.2f, fresh %.2f, plan %.2f (target <= 1.20)\n", med(r1, NR), med(r2, NR), med(r3, NR) }' /tmp/cost_compare.$$
rm -f /tmp/cost_compare.$$
