#!/bin/sh
# The sweep verb: spec errors name their field (exit 2); a sweep killed with
# SIGKILL at several moments and resumed ends equal to an uninterrupted run
# (no row lost or duplicated, same figures, other --jobs); plan points agree
# with `shardplan plan`; export, a foreign spec, progress; a list of points;
# frontier; schema migration (MPI: mpi_sweep.sh).
: "${top_srcdir:?}" "${SHARDPLAN:?}"
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cli_sweep.XXXXXX") || exit 99   # fresh: a reused pid must not find an old database
trap 'rm -rf "$tmp"' EXIT
. "$top_srcdir/tests/json.sh"
. "$top_srcdir/tests/sweep_kill.sh"
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
check "fleet without a rate names rate" spec_error fleetnorate 'rate' '{'"$G"', "compute": "fleet"}'
check "a rate without fleet names rate" spec_error planrate 'rate' '{'"$G"', "compute": "plan", "rate": [10]}'
check "fleet: a rate given twice names it" spec_error fleettwice '/rate/1' '{'"$G"', "compute": "fleet", "rate": [10, 10]}'
check "fleet: a rate of 0 names it" spec_error fleetzero '/rate/0' '{'"$G"', "compute": "fleet", "rate": [0]}'
check "fleet: latency_metric names it" spec_error fleetlat 'latency_metric' '{'"$G"', "compute": "fleet", "rate": 1, "latency_metric": "decode"}'
check "fleet: a plan objective names it" spec_error fleetobj '/objective' '{'"$G"', "compute": "fleet", "rate": 1, "objective": "latency"}'
check "fleet: a prompt of 0 names prompt" spec_error fleetp0 'prompt' '{"models": ["tiny-llama"], "hw": ["h100"], "chips": [1], "batch": [1], "prompt": [0], "gen": [4], "compute": "fleet", "rate": 1}'
check "a grid value given twice names it" spec_error twice '/chips' '{"models": ["tiny-llama"], "hw": ["h100"], "chips": [1, 2, 1], "batch": [1], "prompt": [8], "gen": [4], "compute": "plan"}'
check "a model given twice names it" spec_error twicem '/models/1' '{"models": ["tiny-llama", "tiny-llama"], "hw": ["h100"], "chips": [1], "batch": [1], "prompt": [8], "gen": [4], "compute": "plan"}'
P='"model": "tiny-llama", "hw": "h100", "chips": 1, "batch": 1, "prompt": 8, "gen": 4'
check "points: grid and list together names the grid field" spec_error both '/batch' '{"compute": "plan", "batch": [1], "points": [{'"$P"'}]}'
check "points: an empty list names it" spec_error empty '/points' '{"compute": "plan", "points": []}'
check "points: a bad field names point and field" spec_error ptchips '/points/1/chips' '{"compute": "plan", "points": [{'"$P"'}, {"model": "tiny-llama", "hw": "h100", "chips": "x", "batch": 1, "prompt": 8, "gen": 4}]}'
check "points: an unknown model names point and field" spec_error ptmodel '/points/0/model' '{"compute": "plan", "points": [{"model": "no-such-model", "hw": "h100", "chips": 1, "batch": 1, "prompt": 8, "gen": 4}]}'
check "points: the same point twice names both" spec_error ptdup '/points/2: the same point as /points/0' '{"compute": "plan", "points": [{'"$P"'}, {"model": "tiny-llama", "hw": "h100", "chips": 1, "batch": 2, "prompt": 8, "gen": 4}, {'"$P"'}]}'
check "points: estimate without a layout names it" spec_error ptnolayout '/points/0/layout' '{"compute": "estimate", "points": [{'"$P"'}]}'
check "points: plan with a layout names it" spec_error ptlayout '/points/0/layout' '{"compute": "plan", "points": [{'"$P"', "layout": "mesh=1x1x1"}]}'
check "points: an unknown key names it" spec_error ptkey '/points/0' '{"compute": "plan", "points": [{'"$P"', "chip": 1}]}'
check "points: prompt 0 with gen 0 names the point" spec_error ptzero '/points/0/gen' '{"compute": "plan", "points": [{"model": "tiny-llama", "hw": "h100", "chips": 1, "batch": 1, "prompt": 0, "gen": 0}]}'
check "frontier: a list of points is refused as not implemented" spec_error ptfront 'not implemented' '{"compute": "frontier", "points": [{'"$P"'}]}'
check "frontier: plan options are checked" spec_error fcost '/cost_metric' '{'"$G"', "compute": "frontier", "cost_metric": "dollars"}'
check "estimate: plan options are refused" spec_error ecost 'cost_metric' '{'"$G"', "compute": "estimate", "layouts": ["mesh=1x1x1"], "cost_metric": "phase"}'
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
kill_rounds "$tmp/res.db" "$total" "$ms" "0 0.1 0.15 0.2 0.15 0.1" \
    "$SHARDPLAN" sweep "$tmp/grid.json" --db "$tmp/res.db" --jobs 2 --batch-rows 1024 --quiet
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
sweep_json() { # export, points: schema 3, that many points, numbered 0, 1, ... in order
    json_check '$1 == 3' -n "$1" /schema_version && json_check "\$1 == $2" -l "$1" /points &&
    json_check '$1 == NR - 1' -n "$1" '/points/*/idx'
}
check "export json parses" sweep_json "$tmp/ref.jsonl" "$total"

# ---- the same database, another spec; export errors; progress (MPI: mpi_sweep.sh) ----
printf '{%s, "compute": "plan"}\n' "$G" >"$tmp/other.json"
check "another spec on a sweep database exits 2" sh -c \
    '"$SHARDPLAN" sweep "$0" --db "$1" --quiet 2>&1 >/dev/null | grep -q "another sweep spec"; [ $? -eq 0 ]' "$tmp/other.json" "$tmp/ref.db"
check "export of a non-sweep file exits 2" sh -c \
    'echo hi >"$0"; "$SHARDPLAN" sweep --export csv --db "$0" >/dev/null 2>&1; [ $? -eq 2 ]' "$tmp/not.db"
check "export bad format exits 2" sh -c '"$SHARDPLAN" sweep --export xml --db "$0" >/dev/null 2>&1; [ $? -eq 2 ]' "$tmp/ref.db"
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

# ---- a list of points: the rows of the grid holding those points ---------------
cat >"$tmp/lgrid.json" <<'EOF'
{"models": ["tiny-llama", "palm-8b"], "hw": ["h100"], "chips": [2, 8], "batch": [4], "prompt": [16], "gen": [0, 8],
 "compute": "estimate", "layouts": ["mesh=1x1x2", "mesh=2x2x2,decode=ws2d/batch"]}
EOF
"$SHARDPLAN" sweep "$tmp/lgrid.json" --db "$tmp/lgrid.db" --quiet &&
"$SHARDPLAN" sweep --export json --db "$tmp/lgrid.db" >"$tmp/lgrid.out" || echo "  the grid sweep failed"
# the grid's points in reverse order, as a list
"$JSONQ" "$tmp/lgrid.out" '/points/*' /model /hw /chips /batch /prompt /gen /layout_in |
    awk -F '\t' 'BEGIN { print "{\"compute\": \"estimate\", \"points\": [" }
        { l[NR] = sprintf("{\"model\": \"%s\", \"hw\": \"%s\", \"chips\": %s, \"batch\": %s, \"prompt\": %s, \"gen\": %s, \"layout\": \"%s\"}", $1, $2, $3, $4, $5, $6, $7) }
        END { for (i = NR; i >= 1; i--) print l[i] (i > 1 ? "," : ""); print "]}" }' >"$tmp/list.json"
"$SHARDPLAN" sweep "$tmp/list.json" --db "$tmp/list.db" --jobs 2 --quiet; rc=$?
check "points: a list sweep exits 0" test "$rc" -eq 0
rows_by_key() { # database: its csv rows without idx, sorted
    "$SHARDPLAN" sweep --export csv --db "$1" | sed 1d | sed 's/^[0-9]*,//' | sort
}
rows_by_key "$tmp/lgrid.db" >"$tmp/lgrid.rows"
rows_by_key "$tmp/list.db" >"$tmp/list.rows"
check "points: 16 rows, some ok and some not applicable" sh -c \
    '[ "$(wc -l <"$0")" -eq 16 ] && grep -q "\"ok\"" "$0" && grep -q "\"not_applicable\"" "$0"' "$tmp/list.rows"
check "points: the list's rows equal the grid's (inputs and figures)" cmp -s "$tmp/lgrid.rows" "$tmp/list.rows"
"$SHARDPLAN" sweep --export json --db "$tmp/list.db" >"$tmp/list.out"
check "points: idx is the position in the list" json_check '$1 == "palm-8b" && $2 == 0' "$tmp/list.out" /points/0 /model /idx

# ---- frontier: one frontier per (model, hw, prompt, gen), as the frontier verb ------
cat >"$tmp/front.json" <<'EOF'
{"models": ["palm-62b"], "hw": ["tpu-v4"], "chips": [16, 32, 64], "batch": [1, 16, 64, 256], "prompt": [2048],
 "gen": [64], "compute": "frontier", "latency_metric": "decode", "cost_metric": "phase"}
EOF
"$SHARDPLAN" sweep "$tmp/front.json" --db "$tmp/front.db" --quiet &&
"$SHARDPLAN" sweep --export json --db "$tmp/front.db" >"$tmp/front.out"; rc=$?
check "frontier sweep exits 0" test "$rc" -eq 0
check "frontier: one row, chips and batch 0 (every value of the spec)" json_check \
    '$1 == 0 && $2 == 0 && $3 == "ok" && $4 == "frontier"' "$tmp/front.out" '/points/*' /chips /batch /status /compute
check "frontier: 3 or more entries, latency descending, cost ascending" sh -c \
    '"$JSONQ" -n "$0" "/points/0/frontier/*" /latency_s /cost_s |
     awk -F "\t" "NR > 1 && !(\$1 < l && \$2 > c) { bad = 1 } { l = \$1; c = \$2; n++ } END { exit bad || n < 3 }"' "$tmp/front.out"
"$SHARDPLAN" frontier --model palm-62b --hw tpu-v4 --chips 16,32,64 --batch 1,16,64,256 --prompt 2048 --gen 64 \
    --json >"$tmp/fverb.json"
"$JSONQ" "$tmp/front.out" '/points/0/frontier/*' /chips /batch /layout >"$tmp/fsweep.tsv"
"$JSONQ" "$tmp/fverb.json" '/decode/frontier/*' /chips /batch /costs/layout_text >"$tmp/fverb.tsv"
check "frontier: the entries are the frontier verb's (chips, batch, layout)" cmp -s "$tmp/fsweep.tsv" "$tmp/fverb.tsv"
check "report of a frontier sweep is refused (exit 2)" sh -c \
    '"$SHARDPLAN" report --db "$0" --out "$1" >/dev/null 2>&1; [ $? -eq 2 ]' "$tmp/front.db" "$tmp/frep"

# ---- fleet: one fleet per (model, hw, max chips, max batch, prompt, gen, rate) ----
printf '%s\n' '{"models": ["llama3.1-8b"], "hw": ["h100"], "chips": [1], "batch": [16], "prompt": [512], "gen": [128],
 "rate": [20, 60], "ttft_ms": 500, "tpot_ms": 30, "compute": "fleet"}' >"$tmp/fleet.json"
"$SHARDPLAN" sweep "$tmp/fleet.json" --db "$tmp/fleet.db" --quiet; rc=$?
check "fleet sweep exits 0" test "$rc" -eq 0
"$SHARDPLAN" sweep --export json --db "$tmp/fleet.db" >"$tmp/fleet.out"
check "fleet: a row per rate, status ok, chips, cost and pools" json_check \
    '$1 == "ok" && $2 == "fleet" && $3 >= 1 && $4 > 0 && $5 > 0 && $6 == "rate=" $7' "$tmp/fleet.out" '/points/*' /status \
    /compute /fleet_chips /fleet_cost_per_hour /fleet_cost_per_mtok /layout_in /rate
for k in 0 1; do
    r=$("$JSONQ" -n "$tmp/fleet.out" "/points/$k/rate")
    "$SHARDPLAN" fleet --model llama3.1-8b --hw h100 --rate "$r" --prompt 512 --gen 128 --ttft-ms 500 --tpot-ms 30 \
        --max-instance-chips 1 --max-batch 16 --json >"$tmp/fleet$k.json"
    c=$("$JSONQ" -n "$tmp/fleet$k.json" "" /chips /cost_per_hour | tr '\t' ' ')
    check "fleet: row $k's chips and cost are the fleet verb's" json_check \
        "\$1 == $(echo "$c" | cut -d' ' -f1) && abs(\$2 - $(echo "$c" | cut -d' ' -f2)) <= 1e-9 * \$2" \
        -n "$tmp/fleet.out" "/points/$k" /fleet_chips /fleet_cost_per_hour
    "$JSONQ" "$tmp/fleet$k.json" '/pools/*' /role /hw /instances /chips_per_instance /batch /layout >"$tmp/fvp$k.tsv"
    "$JSONQ" "$tmp/fleet.out" "/points/$k/fleet/*" /role /hw /instances /chips_per_instance /batch /layout >"$tmp/fsp$k.tsv"
    check "fleet: row $k's pools are the fleet verb's" cmp -s "$tmp/fvp$k.tsv" "$tmp/fsp$k.tsv"
done
check "fleet: a rerun computes nothing" sh -c '"$SHARDPLAN" sweep "$0" --db "$1" 2>&1 | grep -q "(2 already there, 0 computed)"' \
    "$tmp/fleet.json" "$tmp/fleet.db"
fleet_report() { # report --db of a fleet sweep: a row per point with its fleet's chips and dollars per hour
    "$SHARDPLAN" report --db "$tmp/fleet.db" --out "$tmp/flrep" --format md >/dev/null || return 1
    "$SHARDPLAN" report --db "$tmp/fleet.db" --out "$tmp/flrep" >/dev/null && test -s "$tmp/flrep/report.html" || return 1
    "$JSONQ" -n "$tmp/fleet.out" '/points/*' /rate /fleet_chips /fleet_cost_per_hour >"$tmp/flrows" || return 1
    while IFS='	' read -r r c d; do
        line=$(awk -v r="$r" -v c="$c" -v d="$d" 'BEGIN { printf "| llama3.1-8b | h100 | 1 | 16 | 512 | 128 | %.6g | %d | %.2f |", r, c, d }')
        grep -qF -- "$line" "$tmp/flrep/report.md" || { echo "  report.md lacks: $line"; return 1; }
    done <"$tmp/flrows"
}
check "report of a fleet sweep: each row's fleet (chips, dollars per hour)" fleet_report

# ---- schema: a version 1 or 2 database is migrated; an unknown version is refused ----
if command -v sqlite3 >/dev/null 2>&1; then
    cp "$tmp/plan1.db" "$tmp/v1.db"
    v3cols="ALTER TABLE points DROP COLUMN fleet; ALTER TABLE points DROP COLUMN fleet_cost_per_mtok; ALTER TABLE points DROP COLUMN fleet_cost_per_hour; ALTER TABLE points DROP COLUMN fleet_chips; ALTER TABLE points DROP COLUMN rate"
    sqlite3 "$tmp/v1.db" "$v3cols; ALTER TABLE points DROP COLUMN frontier; UPDATE meta SET value = '1' WHERE key = 'schema_version'; DELETE FROM points WHERE idx % 2 = 1"
    "$SHARDPLAN" sweep "$tmp/plan.json" --db "$tmp/v1.db" --quiet; rc=$?
    check "schema 1 database: resumed into version 3" test "$rc" -eq 0
    check "schema 1 database: now version 3" test "$(sqlite3 "$tmp/v1.db" "SELECT value FROM meta WHERE key = 'schema_version'")" = 3
    "$SHARDPLAN" sweep --export csv --db "$tmp/v1.db" >"$tmp/v1.csv"
    check "schema 1 database: rows equal a fresh version 3 run's" cmp -s "$tmp/plan1.csv" "$tmp/v1.csv"
    cp "$tmp/plan1.db" "$tmp/v2.db"
    sqlite3 "$tmp/v2.db" "$v3cols; UPDATE meta SET value = '2' WHERE key = 'schema_version'; DELETE FROM points WHERE idx % 2 = 0"
    "$SHARDPLAN" sweep "$tmp/plan.json" --db "$tmp/v2.db" --quiet; rc=$?
    check "schema 2 database: resumed into version 3" test "$rc" -eq 0
    check "schema 2 database: now version 3" test "$(sqlite3 "$tmp/v2.db" "SELECT value FROM meta WHERE key = 'schema_version'")" = 3
    "$SHARDPLAN" sweep --export csv --db "$tmp/v2.db" >"$tmp/v2.csv"
    check "schema 2 database: rows equal a fresh version 3 run's" cmp -s "$tmp/plan1.csv" "$tmp/v2.csv"
    cp "$tmp/plan1.db" "$tmp/v9.db"
    sqlite3 "$tmp/v9.db" "UPDATE meta SET value = '9' WHERE key = 'schema_version'"
    check "schema 9 database: refused, exit 2, naming the version" sh -c \
        '"$SHARDPLAN" sweep "$0" --db "$1" --quiet 2>"$1.err"; rc=$?; grep -q "schema version 9" "$1.err" && [ $rc -eq 2 ]' \
        "$tmp/plan.json" "$tmp/v9.db"
else
    echo "skip: schema migration checks (no sqlite3 program)"
fi

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
