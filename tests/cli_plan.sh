#!/bin/sh
# The plan and frontier verbs: help, exit codes, JSON that parses, the chosen
# layout round-tripping through `estimate --layout`, nothing-fits exit 1.
: "${top_srcdir:?}" "${SHARDPLAN:?}"
fail=0
tmp=${TMPDIR:-/tmp}/cli_plan.$$
mkdir -p "$tmp" && trap 'rm -rf "$tmp"' EXIT
check() { # description, command...
    d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fail=1; fi
}
expect_rc() { # want, command...
    want=$1; shift
    "$@" >/dev/null 2>&1; rc=$?
    [ "$rc" -eq "$want" ] || { echo "  exit $rc, want $want: $*"; return 1; }
}
. "$top_srcdir/tests/json.sh"
P="--model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 2048 --gen 64"

check "plan --help exits 0" expect_rc 0 "$SHARDPLAN" plan --help
check "frontier --help exits 0" expect_rc 0 "$SHARDPLAN" frontier --help
check "plan --help names every option" sh -c '"$SHARDPLAN" plan --help | grep -q -- --max-latency-ms && "$SHARDPLAN" plan --help | grep -q -- --min-chips'
check "plan without --model exits 2" expect_rc 2 "$SHARDPLAN" plan --hw tpu-v4 --chips 8 --batch 1 --prompt 1 --gen 1
check "plan bad objective exits 2" expect_rc 2 "$SHARDPLAN" plan $P --objective speed
check "plan bad option exits 2" expect_rc 2 "$SHARDPLAN" plan $P --frob
check "plan unknown model exits 2" expect_rc 2 "$SHARDPLAN" plan --model no-such --hw tpu-v4 --chips 8 --batch 1 --prompt 1 --gen 1
check "plan fp8 on tpu-v4 exits 2" expect_rc 2 "$SHARDPLAN" plan $P --weights fp8
check "frontier bad list exits 2" expect_rc 2 "$SHARDPLAN" frontier --model palm-8b --hw tpu-v4 --chips 8,x --batch 1 --prompt 8 --gen 8

"$SHARDPLAN" plan $P --json >"$tmp/plan.json"; rc=$?
check "plan palm-540b on 64 tpu-v4 exits 0" test "$rc" -eq 0
check "plan table output" sh -c '"$SHARDPLAN" plan '"$P"' | grep -q "^chosen layout: "'
plan_json() { # plan.json: status optimal, the documented keys, a frontier and reasoned rivals
    f=$tmp/plan.json
    json_check '$1 == "optimal"' "$f" /status &&
    "$JSONQ" "$f" /chosen/costs /layout /feasible /prefill_s /decode_step_s /total_s /tokens_per_s /mfu \
        /cost_chip_s_per_token /comm_bytes_per_chip /time_breakdown /memory_per_chip /memory_per_chip/weights \
        /memory_per_chip/kv /memory_per_chip/activations /memory_per_chip/total /memory_per_chip/capacity >/dev/null &&
    json_check '$1 == "array" && $2 == "array"' -t "$f" "" /frontier /rivals &&
    json_check '$1 >= 1 && $2 >= 1' -l "$f" "" /frontier /rivals &&
    json_check '$1 == "string"' -t "$f" '/rivals/*/reason' &&
    json_check '$0 != ""' "$f" '/rivals/*/reason' &&
    "$JSONQ" "$f" /chosen/layout >"$tmp/layout.json"
}
layout_round_trip() { # the chosen layout, given back to estimate: the same total_s within 1e-9
    "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 2048 --gen 64 \
        --layout "$tmp/layout.json" --json >"$tmp/est.json" &&
    a=$("$JSONQ" -n "$tmp/plan.json" /chosen/costs/total_s) &&
    json_check "abs($a - \$1) <= 1e-9 * abs($a)" -n "$tmp/est.json" /total_s
}
frontier_json() { # per phase a frontier: each point costs more and answers sooner than the one before
    "$SHARDPLAN" frontier --model palm-62b --hw tpu-v4 --chips 8,16 --batch 4,16 --prompt 128 --gen 16 --json \
        >"$tmp/front.json" || return 1
    for ph in decode prefill; do
        "$JSONQ" -n "$tmp/front.json" "/$ph/frontier/*" /cost_chip_s_per_token /latency_s >"$tmp/pts" || return 1
        awk -F '\t' 'NR > 1 && !($1 > c && $2 < l) { bad = 1 } { c = $1; l = $2 } END { exit bad || !NR }' "$tmp/pts" ||
            { echo "  $ph frontier: cost must rise and latency fall (cost, latency):"; cat "$tmp/pts"; return 1; }
    done
}
check "plan --json parses, status optimal, keys present" plan_json
if "$SHARDPLAN" estimate --help >/dev/null 2>&1; then
    check "chosen.layout round-trips through estimate --layout (same total_s)" layout_round_trip
else
    echo "skip chosen.layout round trip: this shardplan has no estimate verb"
fi
check "frontier --json: decode and prefill frontiers, points labelled" frontier_json
check "frontier --csv writes rows" sh -c '
    "$SHARDPLAN" frontier --model palm-8b --hw tpu-v4 --chips 4,8 --batch 4,16 --prompt 64 --gen 8 --csv "'"$tmp"'/f.csv" >/dev/null &&
    head -1 "'"$tmp"'/f.csv" | grep -q "^phase,chips,batch" && grep -q "^decode,[0-9]*,[0-9]*," "'"$tmp"'/f.csv"'
check "nothing fits (palm-540b on 4 tpu-v4) exits 1" expect_rc 1 "$SHARDPLAN" plan --model palm-540b --hw tpu-v4 --chips 4 --batch 8 --prompt 128 --gen 8
check "nothing fits prints shortfall and min chips" sh -c '
    "$SHARDPLAN" plan --model palm-540b --hw tpu-v4 --chips 4 --batch 8 --prompt 128 --gen 8 |
    grep -q "smallest memory shortfall" &&
    "$SHARDPLAN" plan --model palm-540b --hw tpu-v4 --chips 4 --batch 8 --prompt 128 --gen 8 | grep -q "fewest chips that fit: "'
check "plan --json where no layout applies (7 tpu-v4 chips): a flag, no negative figure" sh -c '
    out=$("$SHARDPLAN" plan --model llama2-7b --hw tpu-v4 --chips 7 --batch 1 --prompt 16 --gen 16 --json)
    echo "$out" | grep -q "\"no_layout_applies\": true" && ! echo "$out" | grep -Eq ": -[0-9]"'
check "impossible latency bound exits 1" expect_rc 1 "$SHARDPLAN" plan --model palm-8b --hw tpu-v4 --chips 8 --batch 8 --prompt 64 --gen 8 --max-latency-ms 0.001
check "--gen 0 plans prefill only" expect_rc 0 "$SHARDPLAN" plan --model palm-8b --hw tpu-v4 --chips 8 --batch 8 --prompt 64 --gen 0
check "--min-chips finds a count" sh -c '"$SHARDPLAN" plan --model palm-62b --hw tpu-v4 --batch 8 --prompt 128 --gen 8 --min-chips --chips 64 | grep -q "^min chips: [0-9]"'
# uneven pipelines: palm-540b's 118 layers on 2 stages split 60/58 beat every even split
# (the throughput objective), the stages are reported, the layout prices the same through estimate
U="--model palm-540b --hw tpu-v4 --chips 64 --batch 512 --prompt 128 --gen 512 --weights bf16 --objective throughput"
"$SHARDPLAN" plan $U --json >"$tmp/u.json" && "$SHARDPLAN" plan $U --even-stages --json >"$tmp/e.json"
check "plan finds an uneven split that beats --even-stages" sh -c '
    tu=$("$JSONQ" "'"$tmp"'/u.json" /chosen/costs/tokens_per_s) && te=$("$JSONQ" "'"$tmp"'/e.json" /chosen/costs/tokens_per_s) &&
    awk -v u="$tu" -v e="$te" "BEGIN { exit !(u > e) }" &&
    "$JSONQ" "'"$tmp"'/u.json" /chosen/layout/stage_layers >/dev/null &&
    ! "$JSONQ" "'"$tmp"'/e.json" /chosen/layout/stage_layers >/dev/null 2>&1'
check "plan --json reports every stage: layers summing to the model, chips, mesh, layout, times, memory" sh -c '
    n=$("$JSONQ" "'"$tmp"'/u.json" /chosen/layout/stages) &&
    [ "$("$JSONQ" -l "'"$tmp"'/u.json" /chosen/stages)" -eq "$n" ] &&
    [ "$("$JSONQ" "'"$tmp"'/u.json" "/chosen/stages/*" /layers | awk "{ s += \$1 } END { print s }")" -eq 118 ] &&
    "$JSONQ" "'"$tmp"'/u.json" "/chosen/stages/*" /chips /mesh /layout /prefill_s /decode_step_s /memory_bytes >/dev/null &&
    [ "$("$JSONQ" "'"$tmp"'/u.json" /chosen/stages/0/layers)" -eq "$("$JSONQ" "'"$tmp"'/u.json" /chosen/layout/stage_layers/0)" ]'
"$JSONQ" "$tmp/u.json" /chosen/layout >"$tmp/ul.json"
check "the uneven layout prices the same through estimate" sh -c '
    "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 512 --prompt 128 --gen 512 \
        --layout "'"$tmp"'/ul.json" --json >"'"$tmp"'/ue.json" &&
    [ "$("$JSONQ" "'"$tmp"'/ue.json" /total_s)" = "$("$JSONQ" "'"$tmp"'/u.json" /chosen/costs/total_s)" ]'
exit $fail
