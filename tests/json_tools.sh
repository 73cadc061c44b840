#!/bin/sh
# The JSON tools of the shell tests (tests/jsonq, tests/json.sh) fail when
# they should: a missing path, a text where a number is wanted, a condition
# that does not hold, no value at all, two files that differ.
: "${top_srcdir:=.}"
. "$top_srcdir/tests/json.sh"
export JSONQ
fail=0
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
check() { # description, command...
    d=$1; shift
    if "$@" >"$tmp/out" 2>&1; then echo "ok   $d"; else echo "FAIL $d"; sed 's/^/  /' "$tmp/out"; fail=1; fi
}
refused() { # stderr fragment, command...: exits non-zero, its output holds the fragment
    want=$1; shift
    if "$@" >"$tmp/o" 2>&1; then echo "  succeeded: $*"; return 1; fi
    grep -qF -- "$want" "$tmp/o" || { echo "  lacks '$want':"; cat "$tmp/o"; return 1; }
}
f=$tmp/d.json
printf '%s\n' '{"a": {"b": [1, 2.5, "x y", true, null, {"c": 0.1}], "d~/e": 3, "z": 1, "y": 2},' \
    ' "ev": [{"ph": "X", "pid": 0, "id": "p"}, {"ph": "M"}, {"ph": "X", "pid": 1, "id": "q"}], "empty": []}' >"$f"
printf '%s\n' '{"a": {"y": 2, "z": 1}}' >"$tmp/o1.json"
printf '%s\n' '{"a": {"z": 1, "y": 2}}' >"$tmp/o2.json"
printf '%s\n' '{"a": {"z": 1, "y": 3}}' >"$tmp/o3.json"

check "scalars, wildcard, escapes" sh -c '[ "$("$JSONQ" "$0" "/a/b/*" | tr "\n" "|")" = "1|2.5|x y|true|null|{\"c\":0.10000000000000001}|" ] &&
    [ "$("$JSONQ" "$0" /a/d~0~1e)" = 3 ]' "$f"
check "fields on one line, lengths, types, member names" sh -c '
    [ "$("$JSONQ" -l "$0" "" /a /a/b /ev)" = "$(printf "4\t6\t3")" ] &&
    [ "$("$JSONQ" -t "$0" /a/b/1)" = real ] && [ "$("$JSONQ" -k "$0" /a | tr "\n" " ")" = "b d~/e z y " ]' "$f"
check "-w keeps the matches with that field" sh -c '[ "$("$JSONQ" -w /ph=X "$0" "/ev/*" /pid /id | tr "\n" "|")" = "$(printf "0\tp|1\tq|")" ]' "$f"
check "containers print with sorted members" sh -c '[ "$("$JSONQ" "$0" /a)" = "{\"y\":2,\"z\":1}" ]' "$tmp/o1.json"
check "missing member names its path" refused "/a/x: no such member" "$JSONQ" "$f" /a/x/y
check "index out of range names its path" refused "/a/b/9: index out of range" "$JSONQ" "$f" /a/b/9
check "a missing field of one match fails" refused "/ev/1/id: no such member" "$JSONQ" "$f" '/ev/*' /id
check "-n refuses text" refused "/a/b/2: not a number" "$JSONQ" -n "$f" /a/b/2
check "-l refuses a scalar" refused "/a/z: not an array or object" "$JSONQ" -l "$f" /a/z
check "bad JSON exits 2" sh -c 'echo "[1," | "$JSONQ" - ""; [ $? -eq 2 ]'
check "json_check holds" json_check '$1 == 2 && abs(-$2) == 1' -n "$tmp/o1.json" /a /y /z
check "json_check fails a false condition" refused "fails" json_check '$1 == 3' -n "$tmp/o1.json" /a/y
check "json_check fails with no value" refused "no value" json_check 1 "$f" '/empty/*'
check "json_check fails on a missing path" refused "no such member" json_check 1 "$f" /nope
check "json_same: equal objects in any member order" json_same "$tmp/o1.json" "$tmp/o2.json" /a
check "json_same fails on a difference" refused "differ" json_same "$tmp/o1.json" "$tmp/o3.json" /a
exit $fail
