#!/bin/sh
# The report verb: bad input exits 2 naming the problem; a report of two
# models on two hardware kinds is well-formed (the HTML parses as XML, every
# embedded figure is an SVG that parses, every PNG is a PNG), its figures are
# the planner's (the chosen layouts and costs equal `shardplan plan`'s, a
# chip count equals `plan --min-chips`', the dollar column is chip-seconds
# times the profile's price), the Markdown form links figures that exist,
# and the command the page prints reproduces it byte for byte.
: "${top_srcdir:?}" "${SHARDPLAN:?}"
command -v xmllint >/dev/null 2>&1 || { echo "xmllint missing (Debian: libxml2-utils)"; exit 99; }
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cli_report.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
check() { # description, command...
    d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fail=1; fi
}
# usage_error NAME WORD ARGS...: exit 2 and stderr names WORD
usage_error() {
    n=$1; w=$2; shift 2
    "$SHARDPLAN" report "$@" >/dev/null 2>"$tmp/$n.err"; rc=$?
    if [ "$rc" -ne 2 ]; then echo "  $n: exit $rc, want 2"; return 1; fi
    grep -q -- "$w" "$tmp/$n.err" || { echo "  $n: message does not name $w:"; cat "$tmp/$n.err"; return 1; }
}
J="--chips 4 --batch 8 --prompt 128 --gen 32"
check "report --help exits 0" sh -c '"$SHARDPLAN" report --help | grep -q -- --format'
check "no --out is refused" usage_error noout -- --out --model llama2-7b --hw h100 $J
check "--gen 0 is refused" usage_error gen0 -- --gen --model llama2-7b --hw h100 --chips 4 --batch 8 --prompt 128 --gen 0 --out "$tmp/x"
check "a bad format is named" usage_error fmt pdf --model llama2-7b --hw h100 $J --out "$tmp/x" --format pdf
check "an unknown model is named" usage_error model no-such-model --model llama2-7b,no-such-model --hw h100 $J --out "$tmp/x"
check "a pair given twice is refused" usage_error twice twice --model llama2-7b,llama2-7b --hw h100 $J --out "$tmp/x"
check "a bad target is named" usage_error tgt -- --targets-ms --model llama2-7b --hw h100 $J --out "$tmp/x" --targets-ms 5,-1

M="llama2-7b,llama3.1-8b"; H="h100,a100-80g"; L="--latency-metric decode"
out="$tmp/html"
"$SHARDPLAN" report --model "$M" --hw "$H" $J $L --targets-ms 2,4,8 --out "$out" >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
check "report exits 0" test "$rc" -eq 0
check "report prints the page's path" grep -qx "$out/report.html" "$tmp/run.out"
check "report writes nothing to stderr" test ! -s "$tmp/run.err"
check "the page parses (well-formed XHTML)" xmllint --noout "$out/report.html"
for f in report.json frontier.csv min_chips.csv time.csv memory.csv rivals.csv; do
    check "$f written" test -s "$out/$f"
done

# every embedded figure decodes to an SVG that parses; every figure file is there twice
n=0; bad=0
grep -o 'data:image/svg+xml;base64,[A-Za-z0-9+/=]*' "$out/report.html" | sed 's/^data:image\/svg+xml;base64,//' >"$tmp/imgs"
while read -r b; do
    n=$((n + 1))
    printf '%s' "$b" | base64 -d >"$tmp/img$n.svg" 2>/dev/null || { bad=1; echo "  image $n: bad base64"; }
    xmllint --noout "$tmp/img$n.svg" 2>/dev/null || { bad=1; echo "  image $n: does not parse"; }
    xmllint --xpath 'local-name(/*)' "$tmp/img$n.svg" 2>/dev/null | grep -qx svg || { bad=1; echo "  image $n: root is not svg"; }
done <"$tmp/imgs"
imgs=$(grep -c '<img ' "$out/report.html")
# 1 overview + 1 min-chips + per pair (frontier, prefill time, decode time, memory) = 2 + 4 * 4
check "18 figures embedded (got $n, $imgs <img>)" test "$n" -eq 18 -a "$imgs" -eq 18
check "every embedded figure is a parsing SVG" test "$bad" -eq 0
svgs=$(ls "$out"/*.svg | wc -l); pngs=0
for s in "$out"/*.svg; do
    p=${s%.svg}.png
    if [ "$(head -c 8 "$p" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then pngs=$((pngs + 1)); fi
done
check "each of the $svgs SVG files has its PNG" test "$svgs" -eq 18 -a "$pngs" -eq 18

# the figures are the planner's
pairs_ok=1
for m in llama2-7b llama3.1-8b; do
    for h in h100 a100-80g; do
        "$SHARDPLAN" plan --model $m --hw $h $J $L >"$tmp/plan" || { pairs_ok=0; continue; }
        lay=$(sed -n 's/^chosen layout: //p' "$tmp/plan")
        cst=$(awk '/^chip-seconds per token/ { print $NF }' "$tmp/plan")
        row=$(grep "^<tr><td>$m</td><td>$h</td>" "$out/report.html" | head -1)
        case $row in *"<td>$lay</td>"*) ;; *) echo "  $m $h: layout $lay not in the summary: $row"; pairs_ok=0;; esac
        case $row in *"<td>$cst</td>"*) ;; *) echo "  $m $h: chip-s/token $cst not in the summary: $row"; pairs_ok=0;; esac
        # $ per M tokens = chip-seconds per token x price / 3600 x 1e6 (the chosen row of frontier.csv)
        price=$(sed -n 's/.*"cost_per_chip_hour": *\([0-9.e+-]*\).*/\1/p' "$top_srcdir/data/hw/$h.json")
        awk -F, -v m=$m -v h=$h -v p="$price" '$1 == m && $2 == h && $9 == 1 {
                want = $7 * p / 3600 * 1e6; got = $8
                if (got == "" || (got - want) / want > 1e-3 || (want - got) / want > 1e-3) { print "  " m " " h ": $/M " got " want " want; exit 1 }
                found = 1 }
            END { if (!found) { print "  " m " " h ": no chosen row"; exit 1 } }' "$out/frontier.csv" || pairs_ok=0
    done
done
check "summary = shardplan plan, dollars = chip-s x price" test "$pairs_ok" -eq 1
# one chip count of the capacity table against plan --min-chips
line=$(awk -F, '$1 == "llama2-7b" && $2 == "h100" && $5 == 1 { print; exit }' "$out/min_chips.csv")
t_s=$(echo "$line" | cut -d, -f4); want=$(echo "$line" | cut -d, -f6)
t_ms=$(awk -v t="$t_s" 'BEGIN { printf "%.9g", t * 1e3 }')
got=$("$SHARDPLAN" plan --model llama2-7b --hw h100 --min-chips --chips 32 --batch 8 --prompt 128 --gen 32 $L \
      --objective cost --max-latency-ms "$t_ms" | sed -n 's/^min chips: //p')
check "min chips at $t_ms ms = plan --min-chips ($want vs $got)" test -n "$want" -a "$want" = "$got"
check "a target nothing meets says so" grep -q 'none up to 32 chips' "$out/report.html"

# the command on the page reproduces it
cmd=$(sed -n 's/^<pre><code>\(shardplan report .*\)<\/code><\/pre>$/\1/p' "$out/report.html" | sed 's/&amp;/\&/g; s/&lt;/</g; s/&gt;/>/g; s/&quot;/"/g')
cp "$out/report.html" "$tmp/first.html"
(eval "\"\$SHARDPLAN\" ${cmd#shardplan }") >/dev/null 2>&1
check "the printed command reproduces the page byte for byte" cmp -s "$out/report.html" "$tmp/first.html"

# Markdown
md="$tmp/md"
"$SHARDPLAN" report --model llama2-7b --hw h100 $J $L --out "$md" --format md >/dev/null 2>&1
check "--format md exits 0 and writes report.md" test -s "$md/report.md" -a ! -e "$md/report.html"
links_ok=1
for f in $(sed -n 's/^!\[.*\](\(.*\.svg\))$/\1/p' "$md/report.md"); do
    [ -s "$md/$f" ] || { echo "  $f linked but missing"; links_ok=0; }
done
check "the Markdown links 5 figures that exist" sh -c "[ $links_ok -eq 1 ] && [ \$(grep -c '^!\[' '$md/report.md') -eq 5 ]"
check "the Markdown has no HTML" sh -c "! grep -q '<img\|<table\|<p>' '$md/report.md'"
# ---- a sweep database ------------------------------------------------------
cat >"$tmp/plan.json" <<'SPEC'
{"models": ["llama2-7b", "llama3.1-8b"], "hw": ["h100"], "chips": [1, 2, 4, 8], "batch": [1, 4, 16, 64],
 "prompt": [128], "gen": [32], "compute": "plan", "latency_metric": "decode"}
SPEC
"$SHARDPLAN" sweep "$tmp/plan.json" --db "$tmp/plan.db" --quiet >/dev/null 2>&1
check "--db with a problem option is refused" usage_error dbmix -- --db --db "$tmp/plan.db" --out "$tmp/x" --model llama2-7b
check "--db of a file that is no sweep exits 2" sh -c '"$SHARDPLAN" report --db "$0" --out "$1" >/dev/null 2>&1; [ $? -eq 2 ]' "$out/report.json" "$tmp/x"
"$SHARDPLAN" report --db "$tmp/plan.db" --out "$tmp/db" >/dev/null 2>"$tmp/db.err"
check "report --db exits 0, quietly" sh -c '[ $? -eq 0 ] && [ ! -s "$0" ]' "$tmp/db.err"
check "report --db: the page parses" xmllint --noout "$tmp/db/report.html"
# plain CSV for awk: commas inside quoted fields become ';', quotes go
unquote() { sed -e ':a' -e 's/^\(\([^"]*"[^"]*"\)*[^"]*"[^",]*\),/\1;/' -e 'ta' -e 's/"//g' "$1"; }
"$SHARDPLAN" sweep --export csv --db "$tmp/plan.db" >"$tmp/plan.q.csv"
unquote "$tmp/plan.q.csv" >"$tmp/plan.csv"
unquote "$tmp/db/frontier.csv" >"$tmp/frontier.csv"
# frontier.csv: every fitting row of the sweep, its decode latency and phase cost taken from the row; the
# rows marked on_frontier are exactly those no row of the same model beats on both
frontier_ok=$(awk -F, '
    NR == FNR { if (FNR == 1) { for (i = 1; i <= NF; i++) col[$i] = i; next }
                if ($col["status"] == "ok" && $col["feasible"] == 1) {
                    k = $col["model"] "," $col["chips"] "," $col["batch"]; n_sweep++
                    lat[k] = $col["decode_step_s"]; cost[k] = $col["chips"] * $col["decode_step_s"] / $col["batch"] }
                next }
    FNR == 1 { next }
    { k = $1 "," $3 "," $4; rows++; m[rows] = $1; l[rows] = $9; c[rows] = $10; f[rows] = $12
      if (!(k in lat) || (l[rows] - lat[k])^2 > (1e-6 * lat[k])^2 || (c[rows] - cost[k])^2 > (1e-6 * cost[k])^2) { print "  row " k " not the sweep'"'"'s"; bad = 1 } }
    END {
      if (rows != n_sweep) { print "  " rows " rows, sweep has " n_sweep " fitting"; bad = 1 }
      for (i = 1; i <= rows; i++) { dom = 0
          for (j = 1; j <= rows; j++) if (m[j] == m[i] && l[j] <= l[i] && c[j] <= c[i] && (l[j] < l[i] || c[j] < c[i])) dom = 1
          if (dom == f[i]) { print "  row " i " on_frontier " f[i] " but dominated " dom; bad = 1 } }
      print bad ? "bad" : "ok" }' "$tmp/plan.csv" "$tmp/frontier.csv")
check "report --db: frontier.csv = the sweep's rows, frontier = the non-dominated ones" test "$(echo "$frontier_ok" | tail -1)" = ok
echo "$frontier_ok" | grep '^  ' | head -5
check "report --db: the spec's latency metric is used" grep -q 'decode latency' "$tmp/db/report.html"

cat >"$tmp/est.json" <<'SPEC'
{"models": ["llama2-7b"], "hw": ["h100"], "chips": [4], "batch": [1, 4, 16], "prompt": [128], "gen": [0],
 "compute": "estimate", "layouts": ["mesh=1x1x4,prefill=ws1d/heads,decode=ws1d/heads", "mesh=1x1x4,prefill=ws2d/heads,decode=ws2d/heads"]}
SPEC
"$SHARDPLAN" sweep "$tmp/est.json" --db "$tmp/est.db" --quiet >/dev/null 2>&1
"$SHARDPLAN" report --db "$tmp/est.db" --out "$tmp/est" --format md >/dev/null 2>&1
check "report --db of an estimate sweep: communication figure and data" \
    sh -c '[ -s "$0/g1-comm.svg" ] && [ $(grep -c "^llama2-7b,h100,4," "$0/comm.csv") -eq 6 ] && grep -q "prefill=ws1d/heads" "$0/report.md"' "$tmp/est"
exit $fail
