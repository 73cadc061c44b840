#!/bin/sh
# mkman.sh SHARDPLAN: writes the shardplan(1) man page on stdout, generated
# from the program's own --help texts (the top level and every verb), so
# the page and the program cannot disagree.
set -e
prog=${1:?usage: mkman.sh path/to/shardplan}
ver=$("$prog" --version 2>/dev/null | head -1)
esc() { sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\\&'/"; }
printf '.TH SHARDPLAN 1 "" "%s" "User Commands"\n' "$ver"
printf '.SH NAME\nshardplan \\- plan, price and run the sharding of transformer inference across chips\n'
printf '.SH SYNOPSIS\n.B shardplan\n\\fIverb\\fR [\\fIoptions\\fR]\n'
printf '.SH DESCRIPTION\n.nf\n'
"$prog" --help | esc
printf '.fi\n'
for verb in $("$prog" --help | awk '/^Verbs:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }'); do
    printf '.SH "%s"\n.nf\n' "$(echo "$verb" | tr a-z A-Z)"
    "$prog" "$verb" --help 2>&1 | esc || true
    printf '.fi\n'
done
printf '.SH FILES\n.TP\nshare/shardplan/\nbundled models/ and hw/ descriptions (or $SHARDPLAN_DATA)\n'
printf '.TP\nshare/doc/shardplan/\ndesign.md, formats.md, planner.md, autoconfig.md, report.md\n'
printf '.SH SEE ALSO\n.BR pkg-config (1)\n(the library: pkg-config shardplan; headers <shardplan.h>)\n'
