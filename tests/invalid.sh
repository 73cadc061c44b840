#!/bin/sh
# Golden bad-input cases: each data/invalid/<case>/ holds the input
# (input.json or config.json), `args` (the verb, e.g. "model show") and
# `expected`, a substring the one-line stderr message must contain.  Every case
# must exit 2 with that message, and must not crash.
: "${top_srcdir:?}" "${SHARDPLAN:?}"
fail=0 n=0
for dir in "$top_srcdir"/data/invalid/*/; do
    dir=${dir%/}
    name=${dir##*/}
    input=$dir/input.json
    [ -f "$input" ] || input=$dir/config.json
    args=$(cat "$dir/args")
    expected=$(cat "$dir/expected")
    n=$((n + 1))
    # shellcheck disable=SC2086
    err=$("$SHARDPLAN" $args "$input" 2>&1 >/dev/null)
    rc=$?
    if [ "$rc" -ne 2 ]; then
        echo "FAIL $name: exit $rc, want 2: $err"; fail=$((fail + 1)); continue
    fi
    case $err in
    *"$expected"*) echo "ok   $name: $err" ;;
    *) echo "FAIL $name: message lacks '$expected': $err"; fail=$((fail + 1)) ;;
    esac
done
echo "$n cases, $fail failed"
[ "$n" -gt 0 ] && [ "$fail" -eq 0 ]
