#!/bin/sh
# The fleet verb: help, exit codes (bad input 2, a rate nothing meets 1),
# JSON keys, every pool's layout accepted by `estimate --layout` at the
# pool's chips and batch with the prefill and decode times the fleet states.
: "${top_srcdir:?}" "${SHARDPLAN:?}"
fail=0
tmp=${TMPDIR:-/tmp}/cli_fleet.$$
mkdir -p "$tmp" && trap 'rm -rf "$tmp"' EXIT
check() { # description, command...
    d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fail=1; fi
}
expect_rc() { # want, command...
    want=$1; shift
    "$@" >"$tmp/rc.out" 2>&1; rc=$?
    [ "$rc" -eq "$want" ] || { echo "  exit $rc, want $want: $*"; cat "$tmp/rc.out"; return 1; }
}
. "$top_srcdir/tests/json.sh"
F="--model llama3.1-8b --prompt 512 --gen 128 --ttft-ms 500 --tpot-ms 30 --max-instance-chips 2 --max-batch 64"

check "fleet --help exits 0 and names the options" sh -c '"$SHARDPLAN" fleet --help | grep -q -- --chips-available'
check "fleet without --rate exits 2" expect_rc 2 "$SHARDPLAN" fleet $F --hw h100
check "fleet bad objective exits 2" expect_rc 2 "$SHARDPLAN" fleet $F --hw h100 --rate 10 --objective speed
check "fleet --util-cap 1 exits 2" expect_rc 2 "$SHARDPLAN" fleet $F --hw h100 --rate 10 --util-cap 1
check "fleet unknown chip kind exits 2" expect_rc 2 "$SHARDPLAN" fleet $F --hw h100,no-such --rate 10
check "fleet --chips-available of a kind not in --hw exits 2" \
    expect_rc 2 "$SHARDPLAN" fleet $F --hw h100 --rate 10 --chips-available a100-80g=8
check "fleet both only-flags exit 2" expect_rc 2 "$SHARDPLAN" fleet $F --hw h100 --rate 10 --colocated-only --disaggregated-only
sed 's/"cost_per_chip_hour": *[0-9.e+-]*/"cost_per_chip_hour": 0/' "$top_srcdir/data/hw/h100.json" >"$tmp/free.json"
check "fleet on a profile without a price exits 2 naming it" sh -c \
    '"$0" fleet '"$F"' --hw "$1" --rate 10 2>&1 >/dev/null | grep -q "cost_per_chip_hour"; [ $? -eq 0 ]' "$SHARDPLAN" "$tmp/free.json"
check "... and --objective chips needs no price" expect_rc 0 "$SHARDPLAN" fleet $F --hw "$tmp/free.json" --rate 10 --objective chips
check "fleet a rate the available chips cannot serve exits 1" \
    expect_rc 1 "$SHARDPLAN" fleet $F --hw h100 --rate 1000 --chips-available h100=4

"$SHARDPLAN" fleet $F --hw h100,a100-80g --rate 100 --json >"$tmp/f.json"; rc=$?
check "fleet --json exits 0" test "$rc" -eq 0
fleet_json() {
    f=$tmp/f.json
    json_check '$1 == "optimal" && $2 > 0 && $3 > 0' "$f" "" /status /chips /cost_per_hour &&
    json_check '$1 >= 1' -l "$f" /pools &&
    "$JSONQ" "$f" '/pools/*' /role /hw /instances /chips_per_instance /layout /batch /ttft_s /tpot_s >/dev/null &&
    json_check '$1 == "colocated" || $1 == "prefill" || $1 == "decode"' "$f" '/pools/*/role' &&
    json_check '$1 <= 0.8 + 1e-9' -n "$f" '/pools/*/utilisation' &&
    json_check '$1 == "decode" || $2 <= 0.5 + 1e-9' "$f" '/pools/*' /role /ttft_s &&
    json_check '$1 >= 1' -l "$f" /alternatives &&
    json_check '$0 != ""' "$f" '/alternatives/*/reason'
}
check "fleet --json: status, chips, cost, pools with their keys, alternatives with reasons" fleet_json
chips_sum() { # chips = sum of instances x chips per instance
    "$JSONQ" -n "$tmp/f.json" '/pools/*' /instances /chips_per_instance >"$tmp/ic" &&
    awk -F '\t' '{ s += $1 * $2 } END { print s }' "$tmp/ic" >"$tmp/sum" &&
    json_check "\$1 == $(cat "$tmp/sum")" -n "$tmp/f.json" /chips
}
check "fleet --json: chips is the pools' sum" chips_sum
layouts_estimate() { # each pool's layout, priced by estimate at its chips and batch, gives the pool's times
    i=0
    n=$("$JSONQ" -l "$tmp/f.json" /pools) || return 1
    while [ "$i" -lt "$n" ]; do
        "$JSONQ" "$tmp/f.json" "/pools/$i" /role /hw /chips_per_instance /batch /layout >"$tmp/p" || return 1
        IFS='	' read -r role hw chips batch layout <"$tmp/p"
        gen=128
        [ "$role" = prefill ] && gen=0
        "$SHARDPLAN" estimate --model llama3.1-8b --hw "$hw" --chips "$chips" --batch "$batch" --prompt 512 \
            --gen "$gen" --layout "$layout" --json >"$tmp/e.json" || { echo "  estimate refused pool $i: $layout"; return 1; }
        case $role in
        decode) want=$("$JSONQ" -n "$tmp/f.json" "/pools/$i/decode_step_s") && got=/decode_step_s ;;
        *) want=$("$JSONQ" -n "$tmp/f.json" "/pools/$i/prefill_s") && got=/prefill_s ;;
        esac
        json_check "abs($want - \$1) <= 1e-9 * abs($want)" -n "$tmp/e.json" "$got" || return 1
        i=$((i + 1))
    done
}
check "every pool's layout is accepted by estimate --layout, with the pool's times" layouts_estimate
check "fleet table output with the alternatives" sh -c '"$SHARDPLAN" fleet '"$F"' --hw h100,a100-80g --rate 100 | grep -q "best alternative of each other kind"'
check "fleet --simulate prints the simulated waits" sh -c '"$SHARDPLAN" fleet '"$F"' --hw h100 --rate 50 --simulate 2000 | grep -q "^simulated: 2000"'
exit $fail
