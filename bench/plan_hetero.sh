#!/bin/sh
# plan_hetero.sh: `shardplan plan` for palm-540b on 256 chips of a cluster
# (h100: stages of their own mesh are refused on a torus, so the 256 tpu-v4
# figure of plan_process.sh never offers them), batch 256, prompt 2048, gen
# 64, as a whole process: median, min and max wall time over RUNS runs
# (default 5), the pipeline program offering each stage of the pipelines of
# up to 8 stages its own mesh.  Beside it, in the same run: OLD (a build
# before stage meshes, when given) and the floor, `shardplan --version`; the
# figures to quote are the ratios, not the milliseconds (a shared machine).
# Last measured (doc/planner.md, "Stages of their own mesh"), 2026-11-24:
# callgrind (SHARDPLAN_THREADS=1) 16.11G instructions for the whole process
# against 17.57G on main 73a1e91 (-8.3 %; the pipeline program 3.22G against
# 3.71G, the space's smaller stage meshes' decode-first case 1.07G against
# 2.09G: taken only where it may prune, one stage at a time); this bench at
# load ~3.3: 1,468 ms against OLD (73a1e91) 1,599 ms (0.92x); user CPU, two
# pricing threads, alternated: median 1.51 s against 1.72 s.  On 0434be1,
# before the last of those changes: 17.62G against 18.94G; user CPU seconds,
# two pricing threads, alternated, load 1.0-1.5: median 1.57 against 1.65;
# this bench 1,087 ms against OLD's 1,089 ms (the second thread, at nice 19
# beside other work, mostly found no core).  The 1 s target (main: 1,098 ms
# quiet) is NOT likely met by that alone (~1,010-1,040 ms if wall follows the
# instructions).  Measured quiet, 2026-11-24 05:56 and 05:59 UTC, main at
# 7fbfc4a, nothing else running: median 973.9 ms (5 runs, 955-1,003) and
# 966.4 ms (7 runs, 954-987), floors 4.1 and 4.9 ms: the target is met, by 3 %.
# 2026-11-24 09:03 UTC, load ~2, the pricing threads held by the space and
# polling between batches (doc/planner.md, "Threads"): median 525.6 ms
# (506-533) against main (fececb7) 676.5 ms in the same run (0.78x).
# History: with the decode-first mesh bound, 28.52G against 32.62G before
# (the pipeline program 5.37G against 9.47G).
#
# Usage (from the build directory): sh bench/plan_hetero.sh [RUNS] [OLD_SHARDPLAN]
set -eu
runs=${1:-5}
old=${2:-}
bin=${SHARDPLAN:-./shardplan}
test -x "$bin" || { echo "plan_hetero: $bin not found (run from the build directory)" >&2; exit 1; }
. "$(dirname "$0")/wall_ms.sh"
args="plan --model palm-540b --hw h100 --chips 256 --batch 256 --prompt 2048 --gen 64"
printf '%-34s %10s %10s %10s\n' "# $runs runs, wall ms" median min max
floor=$(wall_ms "$bin" --version)
new=$(wall_ms "$bin" $args)
printf '%-34s %s\n' "plan palm-540b, 256 h100" "$new"
if [ -n "$old" ]; then
    was=$(wall_ms "$old" $args)
    printf '%-34s %s\n' "the same, OLD" "$was"
fi
printf '%-34s %s\n' "floor: shardplan --version" "$floor"
"$bin" $args | grep '^pipeline program' || true
echo "$new $floor ${was:-}" | awk '{printf "# ratio to the floor: %.1f", $1 / $4; if (NF > 6) printf "; to OLD: %.2f", $1 / $7; printf "; target < 1000 ms: %s\n", ($1 < 1000 ? "met" : "NOT met")}'
