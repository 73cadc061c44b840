#!/bin/sh
# The sweep verb: spec errors name their field (exit 2); a sweep killed with
# SIGKILL at several moments and resumed ends equal to an uninterrupted run
# (no row lost or duplicated, same figures, other --jobs); plan points agree
# with `shardplan plan`; export, a foreign spec, the MPI refusal, progress.
: "${top_srcdir:?}" "${SHARDPLAN:?}"
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cli_sweep.XXXXXX") || exit 99   # fresh: a reused pid must not find an old database
trap 'rm -rf "$tmp"' EXIT
. "$top_srcdir/tests/json.sh"
check() { # description, command...
    d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fail=1; fi
}
# spec_error NAME FIELD JSON: exit 2 and the message names FIELD
spec_error() {
    printf '%s\n' "$3" >"$tmp/$1.json"
    "$SHARDPLAN" sweep "$tmp/$1.json" --db "$tmp/$1.db" --quiet >/dev/null 2>"$tmp/$1.err"; rc=$?
    if [ "$rc" -ne 2 ]; then echo "  $1: exit $rc, want 2"; return 1; fi
    grep -q -- "$2" "$tmp/$1.err" || { echo "  $1: message does not name $2:"; cat "$tmp/$1.err"; return 1; }
}
G='"models": ["tiny-llama"], "hw": ["h100"], "chips": [1], "batch": [1], "prompt": [8], "gen": [4]'

check "sweep --help exits 0" sh -c '"$SHARDPLAN" sweep --help | grep -q -- --export'
check "missing field names it" spec_error missing '/models' '{"hw": ["h100"], "chips": [1], "batch": [1], "prompt": [8], "gen": [4], "compute": "plan"}'
check "bad array element names its index" spec_error badbatch '/batch/1' '{"models": ["tiny-llama"], "hw": ["h100"], "chips": [1], "batch": [1, "x"], "prompt": [8], "gen": [4], "compute": "plan"}'
check "unknown key names it" spec_error unknown 'chip' '{'"$G"', "compute": "plan", "chip": 3}'
check "bad compute names it" spec_error compute '/compute' '{'"$G"', "compute": "frontierz"}'
check "unknown model names its index" spec_error model '/models/0' '{"models": ["no-such-model"], "hw": ["h100"], "chips": [1], "batch": [1], "prompt": [8], "gen": [4], "compute": "plan"}'
check "bad layout names its index" spec_error layout '/layouts/1' '{'"$G"', "compute": "estimate", "layouts": ["mesh=1x1x1", "mesh=1x1x1,prefill=ws9d/heads"]}'
check "estimate without layouts names layouts" spec_error nolayouts 'layouts' '{'"$G"', "compute": "estimate"}'
check "plan with layouts names layouts" spec_error planlayouts 'layouts' '{'"$G"', "compute": "plan", "layouts": ["mesh=1x1x1"]}'
check "range with step and times names it" spec_error range '/prompt' '{"models": ["tiny-llama"], "hw": ["h100"], "chips": [1], "batch": [1], "prompt": {"from": 1, "to": 8, "step": 1, "times": 2}, "gen": [4], "compute": "plan"}'
check "negative gen names it" spec_error neg '/gen/0' '{"models": ["tiny-llama"], "hw": ["h100"], "chips": [1], "batch": [1], "prompt": [8], "gen": [-4], "compute": "plan"}'
check "malformed JSON exits 2" spec_error syntax 'syntax.json' '{"models": ["tiny-llama"],'
check "sweep without --db exits 2" sh -c '"$SHARDPLAN" sweep "$0" >/dev/null 2>&1; [ $? -eq 2 ]' "$tmp/missing.json"

# ---- resumability ---------------------------------------------------------
# 2 models x 11 batches x 32 prompts x 5 gens x 10 layouts = 35,200 estimate points
cat >"$tmp/grid.json" <<'EOF'
{"models": ["palm-62b", "palm-540b"], "hw": ["tpu-v4"], "chips": [64],
 "batch": {"from": 1, "to": 1024, "times": 2}, "prompt": {"from": 64, "to": 2048, "step": 64},
 "gen": {"from": 0, "to": 256, "step": 64}, "compute": "estimate",
 "layouts": ["mesh=4x4x4,prefill=ws1d/heads,decode=ws1d/heads", "mesh=4x4x4,prefill=ws2d/heads,decode=ws2d/batch",
   "mesh=4x4x4,weights=int8,prefill=ws2d/heads,decode=ws2d/batch", "mesh=8x8x1,prefill=ws2d/heads,decode=ws2d/batch",
   "mesh=4x4x4,prefill=wg-xyz/heads,decode=wg-xyz/heads", "mesh=4x4x4,prefill=ws2d/batch,decode=ws2d/batch",
   "mesh=2x4x8,prefill=ws2d/heads,decode=ws2d/batch", "mesh=4x4x4,weights=int8,prefill=ws1d/heads,decode=ws1d/batch",
   "mesh=4x4x4,prefill=wg-x/heads,decode=wg-x/heads", "mesh=4x4x4,prefill=wg-xy/heads,decode=wg-xy/heads"]}
EOF
total=35200
t0=$(date +%s%N)
"$SHARDPLAN" sweep "$tmp/grid.json" --db "$tmp/ref.db" --jobs 1 --quiet; rc=$?
t1=$(date +%s%N)
check "uninterrupted sweep exits 0" test "$rc" -eq 0
"$SHARDPLAN" sweep --export csv --db "$tmp/ref.db" >"$tmp/ref.csv"
check "uninterrupted sweep has one row per point" test "$(wc -l <"$tmp/ref.csv")" -eq $((total + 1))
ms=$(( (t1 - t0) / 1000000 ))
# kill -9 at 0 (before the schema exists), then after fractions of the
# uninterrupted run's time, each kill on a run resuming the previous one's
partial=0
for f in 0 0.1 0.15 0.2 0.15 0.1; do
    "$SHARDPLAN" sweep "$tmp/grid.json" --db "$tmp/res.db" --jobs 2 --batch-rows 1024 --quiet &
    pid=$!
    sleep "$(awk -v f="$f" -v ms="$ms" 'BEGIN { printf "%.3f", f * ms / 1000 }')"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    n=0
    [ -f "$tmp/res.db" ] && n=$(( $("$SHARDPLAN" sweep --export csv --db "$tmp/res.db" 2>/dev/null | wc -l) - 1 ))
    [ "$n" -lt 0 ] && n=0
    echo "  killed after ${f} x ${ms} ms: $n of $total rows"
    if [ "$n" -gt 0 ] && [ "$n" -lt "$total" ]; then partial=$((partial + 1)); fi
done
check "at least one kill landed mid-sweep ($partial)" test "$partial" -ge 1
"$SHARDPLAN" sweep "$tmp/grid.json" --db "$tmp/res.db" --jobs 2 --quiet; rc=$?
check "resumed sweep exits 0" test "$rc" -eq 0
"$SHARDPLAN" sweep --export csv --db "$tmp/res.db" >"$tmp/res.csv"
check "resumed database equals the uninterrupted one (csv)" cmp -s "$tmp/ref.csv" "$tmp/res.csv"
"$SHARDPLAN" sweep --export json --db "$tmp/ref.db" >"$tmp/ref.jsonl"
"$SHARDPLAN" sweep --export json --db "$tmp/res.db" >"$tmp/res.jsonl"
check "resumed database equals the uninterrupted one (json)" cmp -s "$tmp/ref.jsonl" "$tmp/res.jsonl"
check "a complete sweep rerun computes nothing" sh -c \
    '"$SHARDPLAN" sweep "$0" --db "$1" 2>&1 | grep -q "($2 already there, 0 computed)"' "$tmp/grid.json" "$tmp/res.db" "$total"
sweep_json() { # export, points: schema 1, that many points, numbered 0, 1, ... in order
    json_check '$1 == 1' -n "$1" /schema_version && json_check "\$1 == $2" -l "$1" /points &&
    json_check '$1 == NR - 1' -n "$1" '/points/*/idx'
}
check "export json parses" sweep_json "$tmp/ref.jsonl" "$total"

# ---- the same database, another spec; export errors; MPI; progress ----------
printf '{%s, "compute": "plan"}\n' "$G" >"$tmp/other.json"
check "another spec on a sweep database exits 2" sh -c \
    '"$SHARDPLAN" sweep "$0" --db "$1" --quiet 2>&1 >/dev/null | grep -q "another sweep spec"; [ $? -eq 0 ]' "$tmp/other.json" "$tmp/ref.db"
check "export of a non-sweep file exits 2" sh -c \
    'echo hi >"$0"; "$SHARDPLAN" sweep --export csv --db "$0" >/dev/null 2>&1; [ $? -eq 2 ]' "$tmp/not.db"
check "export bad format exits 2" sh -c '"$SHARDPLAN" sweep --export xml --db "$0" >/dev/null 2>&1; [ $? -eq 2 ]' "$tmp/ref.db"
check "under mpirun with 2 ranks it refuses, naming MPI" sh -c \
    'OMPI_COMM_WORLD_SIZE=2 "$SHARDPLAN" sweep "$0" --db "$1" 2>&1 | grep -q "MPI"' "$tmp/other.json" "$tmp/mpi.db"
check "progress lines when not a terminal" sh -c \
    '"$SHARDPLAN" sweep "$0" --db "$1" 2>&1 >/dev/null | grep -q "^sweep: 1/1 points"' "$tmp/other.json" "$tmp/p0.db"
check "--quiet prints nothing" sh -c \
    'test -z "$("$SHARDPLAN" sweep "$0" --db "$1" --quiet 2>&1)"' "$tmp/other.json" "$tmp/p1.db"

# ---- plan points: the planner's choice, independent of --jobs -------------------
cat >"$tmp/plan.json" <<'EOF'
{"models": ["tiny-llama"], "hw": ["h100", "tpu-v4"], "chips": [1, 2, 4], "batch": [1, 4], "prompt": [16], "gen": [8],
 "compute": "plan", "objective": "latency"}
EOF
"$SHARDPLAN" sweep "$tmp/plan.json" --db "$tmp/plan1.db" --jobs 1 --quiet &&
"$SHARDPLAN" sweep "$tmp/plan.json" --db "$tmp/plan2.db" --jobs 2 --quiet; rc=$?
check "plan sweeps exit 0" test "$rc" -eq 0
"$SHARDPLAN" sweep --export csv --db "$tmp/plan1.db" >"$tmp/plan1.csv"
"$SHARDPLAN" sweep --export csv --db "$tmp/plan2.db" >"$tmp/plan2.csv"
check "plan sweep: --jobs 1 and --jobs 2 give the same rows" cmp -s "$tmp/plan1.csv" "$tmp/plan2.csv"
want=$("$SHARDPLAN" plan --model tiny-llama --hw h100 --chips 4 --batch 4 --prompt 16 --gen 8 | sed -n 's/^chosen layout: //p')
check "plan sweep row = shardplan plan's chosen layout ($want)" sh -c \
    'grep "^[0-9]*,\"tiny-llama\",\"h100\",4,4,16,8,\"plan\"" "$0" | grep -qF "\"$1\""' "$tmp/plan1.csv" "$want"
check "no applicable layout is a row, not a failure" sh -c \
    'grep -q "\"tpu-v4\",1,1,16,8,\"plan\",\"\",\"no_layout\"" "$0"' "$tmp/plan1.csv"

# ---- the bundled specs load and run ---------------------------------------------
# (the figure 1 specs are plan sweeps of hundreds of points: checked, not run)
for s in "$top_srcdir"/data/sweeps/*.json; do
    check "bundled $(basename "$s") is a valid spec" sh -c '"$SHARDPLAN" sweep "$0" --dry-run | grep -q " points$"' "$s"
done
s=$top_srcdir/data/sweeps/fig3-ffn-comm.json
check "bundled fig3-ffn-comm.json runs" "$SHARDPLAN" sweep "$s" --db "$tmp/fig3.db" --quiet
# figure 3's shape: at the largest batch XYZ weight-gathered moves the least and
# 1D the most; at the smallest, 2D weight-stationary moves less than 1D
"$SHARDPLAN" sweep --export json --db "$tmp/fig3.db" >"$tmp/fig3.json"
fig3_shape() { # export: prefill bytes per (batch, prefill FFN layout) ordered as above
    json_check 1 -n "$1" '/points/*/batch' &&
    "$JSONQ" "$1" '/points/*' /batch /layout_in /comm_bytes_prefill >"$tmp/fig3.tsv" &&
    awk -F '\t' '
        function num(b, l) { return ((b, l) in v) && v[b, l] ~ /^-?[0-9][0-9.eE+-]*$/ }
        { if (split($2, a, "prefill=") < 2) { print "  no prefill= in " $2; bad = 1 }
          split(a[2], f, "/"); v[$1, f[1]] = $3
          if (NR == 1 || $1 + 0 > big + 0) big = $1
          if (NR == 1 || $1 + 0 < small + 0) small = $1 }
        END {
          if (bad || !NR) exit 1
          ok = num(big, "wg-xyz") && num(big, "ws2d") && num(big, "ws1d") && num(small, "ws2d") && num(small, "ws1d") &&
               v[big, "wg-xyz"] + 0 < v[big, "ws2d"] + 0 && v[big, "ws2d"] + 0 < v[big, "ws1d"] + 0 &&
               v[small, "ws2d"] + 0 < v[small, "ws1d"] + 0
          if (!ok) for (k in v) { split(k, p, SUBSEP); if (p[1] == big || p[1] == small) print "  batch " p[1] " " p[2] ": " v[k] }
          exit !ok
        }' "$tmp/fig3.tsv"
}
check "figure 3: crossovers" fig3_shape "$tmp/fig3.json"
exit $fail
