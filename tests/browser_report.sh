#!/bin/sh
# The report page in a real browser (Debian's chromium, headless): it renders
# with no console message and every figure loads (complete, with a size).
# Two controls show the check can fail: a page with one corrupted figure and
# a page that logs an error.  Skips (77) without chromium.
: "${top_srcdir:?}" "${SHARDPLAN:?}"
browser=
for b in chromium chromium-browser google-chrome; do
    command -v "$b" >/dev/null 2>&1 && { browser=$b; break; }
done
[ -n "$browser" ] || { echo "SKIP: no chromium (Debian: apt-get install chromium)"; exit 77; }
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/browser_report.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
check() { # description, command...
    d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fail=1; fi
}
"$SHARDPLAN" report --model llama2-7b --hw h100,a100-80g --chips 4 --batch 8 --prompt 128 --gen 32 \
    --latency-metric decode --out "$tmp/r" >/dev/null || { echo "FAIL report"; exit 1; }
imgs=$(grep -c '<img ' "$tmp/r/report.html")
# The probe: once the page has loaded, the title counts the figures and the broken ones.
probe='<script>window.addEventListener("load", function () { var im = document.images, bad = 0;
for (var i = 0; i < im.length; i++) if (!im[i].complete || im[i].naturalWidth === 0) bad++;
document.title = "FIGURES " + im.length + " BROKEN " + bad; });</script>'
# render FILE: the title after load in $tmp/title, console messages in $tmp/console
render() {
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$tmp/profile" \
        --enable-logging=stderr --v=0 --dump-dom "file://$1" >"$tmp/dom" 2>"$tmp/log"
    sed -n 's/.*<title>\([^<]*\)<\/title>.*/\1/p' "$tmp/dom" | head -1 >"$tmp/title"
    grep 'CONSOLE' "$tmp/log" >"$tmp/console"
}
# with_probe SRC DST [SED]: the page with the probe before </body>
with_probe() {
    sed -e "${3:-s/^\$//}" -e 's|</body>|PROBE</body>|' "$1" | awk -v p="$probe" '{ sub(/PROBE/, p); print }' >"$2"
}
with_probe "$tmp/r/report.html" "$tmp/page.html"
render "$tmp/page.html"
check "the page loads every figure ($imgs): title '$(cat "$tmp/title")'" grep -qx "FIGURES $imgs BROKEN 0" "$tmp/title"
check "the page logs nothing to the console" test ! -s "$tmp/console"
test -s "$tmp/console" && cat "$tmp/console"
check "the page has figures" test "$imgs" -gt 0

# controls
with_probe "$tmp/r/report.html" "$tmp/broken.html" '0,/base64,/s/base64,[A-Za-z0-9+\/]\{8\}/base64,AAAAAAAA/'
render "$tmp/broken.html"
check "control: a corrupted figure is caught" grep -qx "FIGURES $imgs BROKEN 1" "$tmp/title"
sed 's|</body>|<script>console.error("control")</script></body>|' "$tmp/page.html" >"$tmp/noisy.html"
render "$tmp/noisy.html"
check "control: a console message is caught" grep -q control "$tmp/console"
exit $fail
