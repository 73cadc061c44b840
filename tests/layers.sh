#!/bin/sh
# layers.sh: every #include "..." of the library and program sources points
# down the layer order (lowest first)
#   src  ->  costmodel  ->  kernels  ->  exec  ->  plan  ->  cli
# or within its own layer.  Each quoted include is resolved the way the
# compiler does (the including file's folder, then Makefile.am's AM_CPPFLAGS
# folders in order: src, the top of the tree, costmodel, exec, kernels/cpu,
# plan); an include that names a file of a higher layer, or that resolves to
# no file of the tree (other than the generated config.h and sp_version.h),
# fails the test.  Inside the core, the layouts (layout.c, sp_layout.h) sit
# below the lowering: they include none of its headers (sp_lower.h,
# spi_lower.h).  tests/, bench/ and examples/ sit above every layer and are
# not checked.
#
# Usage: layers.sh [ROOT]   (ROOT: the source tree; default $top_srcdir)
# Before checking the tree it checks itself on a small tree with one upward
# include, so that a checker that finds nothing cannot pass.
set -u
LAYERS="src costmodel kernels exec plan cli"
SEARCH="src . costmodel exec kernels/cpu plan"

rank() { # folder (first path component) -> its place in LAYERS, or empty
    i=0
    for l in $LAYERS; do
        [ "$l" = "$1" ] && { echo $i; return; }
        i=$((i + 1))
    done
}

# check ROOT: prints one line per bad include, returns 1 if there was one
check() {
    root=$1 bad=0
    for dir in $LAYERS; do
        [ -d "$root/$dir" ] || continue
        mine=$(rank "$dir")
        # sources of the layer (not build products: .c .h .cu only)
        for f in $(cd "$root" && find "$dir" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sort); do
            here=$(dirname "$f")
            # the quoted name of each #include "..." line
            for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$root/$f"); do
                case $inc in config.h|sp_version.h) continue ;; esac
                found=
                for d in "$here" $SEARCH; do
                    if [ -f "$root/$d/$inc" ]; then found=${d#.}/$inc; found=${found#/}; break; fi
                done
                if [ -z "$found" ]; then
                    echo "$f: #include \"$inc\": no such file in the tree"
                    bad=1
                    continue
                fi
                # the layer of the file found: the first folder of its path
                top=${found%%/*}
                theirs=$(rank "$top")
                if [ -z "$theirs" ]; then
                    echo "$f: #include \"$inc\" ($found) is in no layer"
                    bad=1
                elif [ "$theirs" -gt "$mine" ]; then
                    echo "$f: #include \"$inc\" points up, from $dir to $top ($found)"
                    bad=1
                fi
                case $f:$found in
                src/layout*:src/*lower* | src/sp_layout*:src/*lower*)
                    echo "$f: #include \"$inc\": the layouts sit below the lowering"
                    bad=1 ;;
                esac
            done
        done
    done
    return $bad
}

# the checker on a tree of its own: src/a.c including plan's header must fail,
# plan/b.c including src's header must pass
tmp=$(mktemp -d "${TMPDIR:-/tmp}/layers.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/plan"
echo '/* low */' > "$tmp/src/sp_low.h"
echo '/* high */' > "$tmp/plan/sp_high.h"
printf '#include "sp_low.h"\n' > "$tmp/plan/b.c"
if ! check "$tmp" > "$tmp/out"; then
    echo "layers.sh: a downward include was refused:"; cat "$tmp/out"; exit 99
fi
printf '#include "sp_low.h"\n  #  include "sp_high.h"   /* up */\n' > "$tmp/src/a.c"
if check "$tmp" > "$tmp/out" || ! grep -q 'src/a.c: #include "sp_high.h" points up, from src to plan' "$tmp/out"; then
    echo "layers.sh: the upward include of its own test tree went unnoticed:"; cat "$tmp/out"; exit 99
fi

root=${1:-${top_srcdir:?layers.sh: give the source tree or set top_srcdir}}
check "$root" || { echo "layers.sh: includes must point down: $LAYERS"; exit 1; }
echo "layers.sh: every include of $LAYERS points down"
