# tests/json.sh: sourced by the shell tests that check shardplan's JSON.
# tests/jsonq (tests/jsonq.c) reads the JSON, awk compares: no Python.
: "${JSONQ:=${top_builddir:-.}/tests/jsonq}"

# json_check COND JSONQ-ARGS...: jsonq prints at least one line, and COND (an
# awk expression over the line's tab-separated fields $1, $2, ...; abs() is
# there) holds on every line.  Otherwise it says which line and returns 1.
#   json_check '$1 > 0 && $1 == $2' out.json "" /prefill_s /measured/prefill_s
json_check() {
    _jc_cond=$1; shift
    # the trailing '.' keeps $(...) from eating the last newlines, so an empty
    # string value is a line and no match is no line
    _jc_out=$("$JSONQ" "$@" && echo .) || { echo "  jsonq $*: failed"; return 1; }
    printf '%s' "${_jc_out%.}" | awk -F '\t' -v what="jsonq $*" -v cond="$_jc_cond" "
        function abs(x) { return x < 0 ? -x : x }
        { n++ }
        !($_jc_cond) { printf \"  %s: '%s' fails %s\\n\", what, \$0, cond; bad = 1 }
        END { if (!n) printf \"  %s: no value\\n\", what; exit bad || !n }"
}

# json_same A B PATH...: the values at PATHs print alike in the JSON files A
# and B (objects compare member by member, whatever their order)
json_same() {
    _js_a=$1 _js_b=$2; shift 2
    _js_va=$("$JSONQ" "$_js_a" "" "$@") && _js_vb=$("$JSONQ" "$_js_b" "" "$@") || { echo "  jsonq: failed"; return 1; }
    [ "$_js_va" = "$_js_vb" ] || { printf '  %s differ:\n  %s: %s\n  %s: %s\n' "$*" "$_js_a" "$_js_va" "$_js_b" "$_js_vb"; return 1; }
}
