#!/bin/sh
# plan_process.sh: `shardplan plan` for palm-540b on 64 tpu-v4 chips, batch
# 64, prompt 2048, gen 64, as a whole process (start-up, data loading,
# pricing on SHARDPLAN_THREADS workers, GLPK, printing): median, min and max
# wall time over RUNS runs (default 21), against the 50 ms target.  Beside it,
# the same for `shardplan --version`: the floor any run of this binary pays
# (exec, dynamic linking, start-up), this machine's own peak for the task.
#
# Usage (from the build directory): sh bench/plan_process.sh [RUNS]
#
# Napkin math: bench_plan's in-process figure (~24 ms: ~12k layouts priced of
# ~56k tried, ~33k phase programs lowered at ~1.5 us, split over 2 cores,
# plus GLPK ~1.3 ms) + the process floor (~3 ms) + printing the frontier
# and rivals (~1 ms): ~30 ms.
# Measured on the 2-core development VM (load ~1): median 34-38 ms, floor ~3 ms.
# That was round 1.  With the new cost terms (2026-11-24): 1543M instructions
# for this plan on one thread (callgrind, SHARDPLAN_THREADS=1) against round
# 1's 456M (3.4x; 1693M, 3.7x, on main at 003f851 the same session); at load
# ~6: median 241 ms against round 1's 46.6 ms run right after, floor 8 ms.
# 2026-11-24, 02:30 UTC: 1526.0M instructions (one thread) against round 1's
# 455.1M, measured in one session: 3.35x (main at 1bb8db7: 1542.9M, 3.39x).
# 2026-11-24, 04:50 UTC: 1402.4M instructions (one thread) against round 1's
# 455.8M, measured in one session: 3.08x (main at 0434be1: 1527.6M, 3.35x).
# Quiet, 2026-11-24 05:56 UTC, main at 7fbfc4a: median 112.1 ms against round
# 1's 28.0 ms in the same sitting (4.0x), floors 4.6 and 3.2 ms.
# 2026-11-24, 08:20-08:40 UTC: 493.6M instructions (one thread) against round
# 1's 455.8M, measured in one sitting: 1.08x (main at 0dc9717: 1411.5M, 3.10x):
# rivals settled by two values' incumbents and a lower bound on the prefill
# leave 1,448 layouts priced of 14,897 (doc/planner.md).  Wall time not
# measured again.
# 2026-11-24, 08:58-09:05 UTC: 455.7M instructions (one thread) against round
# 1's 455.1M, measured in one sitting: 1.00x (main at fececb7: 493.6M,
# 1.08x): a decode group rejected at its first failure of a check that reads
# the decode alone (27,210 -> 8,700 decode bounds).  Wall time not measured.
# 2026-11-24 08:55 UTC, load ~1.1 (rough), the pricing threads held by the
# space and polling between batches (doc/planner.md, "Threads"): eval_s
# median of 11 with SHARDPLAN_THREADS=1 47.6 ms, =2 43.8 ms (main fececb7:
# 46.4 and 49.3 ms; round 1: 33.5 and 25.9 ms); the second thread 1.09x, not
# the 2x asked for.
# 09:16 UTC, load ~1.6, main at 286cec9: 46.4 and 41.6 ms against main's
# 46.3 and 45.6 ms (round 1: 34.4 and 27.1 ms): 1.12x from the second thread.
# Quiet, 2026-11-24 09:34 UTC (load 0.5), main at 4811397 (all of the above,
# a phase memo of 1024 slots, parts of 512 layouts): median 31.6 ms against
# round 1's 29.4 ms in the same sitting (1.07x: within 20 %, not "no slower"),
# floors 4.0 and 3.3 ms (doc/planner.md, "Against round 1").
# 2026-11-24 11:35 UTC (load ~0.9), main at 4e3641b (no zero-page copies
# under two threads, PLplot opened when used, pending layouts copied without
# their zero tail, a radix sort of a part's bounds), 3 rounds of 31 runs
# alternated with round 1: medians 29.1, 29.0, 29.6 ms against 30.4, 30.7,
# 31.2 ms: 0.95x (no slower: met).
# 2026-11-24 12:55 UTC (load ~1), main at 01e216c (with SQLite opened when
# used and bench_cost's lowering and pricing changes), 5 rounds of 51 runs
# alternated with round 1: medians 28.9, 29.2, 28.4, 29.0, 28.3 ms against
# 30.7, 30.4, 30.1, 30.1, 29.6 ms: 0.96x (met); floors 3.3 and 3.3-3.4 ms.
set -eu
runs=${1:-21}
bin=${SHARDPLAN:-./shardplan}
test -x "$bin" || { echo "plan_process: $bin not found (run from the build directory)" >&2; exit 1; }
. "$(dirname "$0")/wall_ms.sh"
plan=$(wall_ms "$bin" plan --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 2048 --gen 64)
floor=$(wall_ms "$bin" --version)
printf '%-34s %10s %10s %10s\n' "# $runs runs, wall ms" median min max
printf '%-34s %s\n' "plan palm-540b, 64 tpu-v4" "$plan"
printf '%-34s %s\n' "floor: shardplan --version" "$floor"
median=$(echo "$plan" | awk '{print $1}')
awk -v m="$median" 'BEGIN {printf "# target: median < 50 ms: %s\n", (m < 50 ? "met" : "NOT met")}'
