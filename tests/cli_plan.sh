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
have_py() { command -v python3 >/dev/null 2>&1; }
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
if have_py; then
    check "plan --json parses, status optimal, keys present" python3 -c "
import json, sys
p = json.load(open('$tmp/plan.json'))
assert p['status'] == 'optimal', p['status']
c = p['chosen']['costs']
for k in ['layout', 'feasible', 'prefill_s', 'decode_step_s', 'total_s', 'tokens_per_s', 'mfu',
          'cost_chip_s_per_token', 'comm_bytes_per_chip', 'time_breakdown', 'memory_per_chip']:
    assert k in c, k
for k in ['weights', 'kv', 'activations', 'total', 'capacity']:
    assert k in c['memory_per_chip'], k
assert isinstance(p['frontier'], list) and len(p['frontier']) >= 1
assert isinstance(p['rivals'], list) and len(p['rivals']) >= 1
assert all(r['reason'] for r in p['rivals'])
json.dump(p['chosen']['layout'], open('$tmp/layout.json', 'w'))
"
    if "$SHARDPLAN" estimate --help >/dev/null 2>&1; then
        check "chosen.layout round-trips through estimate --layout (same total_s)" sh -c '
            "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 2048 --gen 64 \
                --layout "'"$tmp"'/layout.json" --json >"'"$tmp"'/est.json" &&
            python3 -c "
import json
p = json.load(open(\"'"$tmp"'/plan.json\")); e = json.load(open(\"'"$tmp"'/est.json\"))
a, b = p[\"chosen\"][\"costs\"][\"total_s\"], e[\"total_s\"]
assert abs(a - b) <= 1e-9 * abs(a), (a, b)
"'
    else
        echo "skip chosen.layout round trip: this shardplan has no estimate verb"
    fi
    check "frontier --json: decode and prefill frontiers, points labelled" sh -c '
        "$SHARDPLAN" frontier --model palm-62b --hw tpu-v4 --chips 8,16 --batch 4,16 --prompt 128 --gen 16 --json |
        python3 -c "
import json, sys
f = json.load(sys.stdin)
for ph in (\"decode\", \"prefill\"):
    pts = f[ph][\"frontier\"]
    assert pts, ph
    for a, b in zip(pts, pts[1:]):
        assert b[\"cost_chip_s_per_token\"] > a[\"cost_chip_s_per_token\"] and b[\"latency_s\"] < a[\"latency_s\"]
"'
else
    echo "skip JSON checks: no python3"
fi
check "frontier --csv writes rows" sh -c '
    "$SHARDPLAN" frontier --model palm-8b --hw tpu-v4 --chips 4,8 --batch 4,16 --prompt 64 --gen 8 --csv "'"$tmp"'/f.csv" >/dev/null &&
    head -1 "'"$tmp"'/f.csv" | grep -q "^phase,chips,batch" && grep -q "^decode,[0-9]*,[0-9]*," "'"$tmp"'/f.csv"'
check "nothing fits (palm-540b on 4 tpu-v4) exits 1" expect_rc 1 "$SHARDPLAN" plan --model palm-540b --hw tpu-v4 --chips 4 --batch 8 --prompt 128 --gen 8
check "nothing fits prints shortfall and min chips" sh -c '
    "$SHARDPLAN" plan --model palm-540b --hw tpu-v4 --chips 4 --batch 8 --prompt 128 --gen 8 |
    grep -q "smallest memory shortfall" &&
    "$SHARDPLAN" plan --model palm-540b --hw tpu-v4 --chips 4 --batch 8 --prompt 128 --gen 8 | grep -q "fewest chips that fit: "'
check "impossible latency bound exits 1" expect_rc 1 "$SHARDPLAN" plan --model palm-8b --hw tpu-v4 --chips 8 --batch 8 --prompt 64 --gen 8 --max-latency-ms 0.001
check "--gen 0 plans prefill only" expect_rc 0 "$SHARDPLAN" plan --model palm-8b --hw tpu-v4 --chips 8 --batch 8 --prompt 64 --gen 0
check "--min-chips finds a count" sh -c '"$SHARDPLAN" plan --model palm-62b --hw tpu-v4 --batch 8 --prompt 128 --gen 8 --min-chips --chips 64 | grep -q "^min chips: [0-9]"'
exit $fail
