#!/bin/sh
# make fuzz: the libFuzzer harnesses, built with clang, ASan and UBSan, into
# fuzz/ (the library compiled again with coverage instrumentation), and their
# starting corpora in fuzz/corpus/<harness>/ (seeds, bundled data, and the
# regression inputs).  Needs clang with libFuzzer (Debian: clang and
# libclang-rt-14-dev, or the clang version's libclang-rt package).
set -eu
: "${top_srcdir:?}" "${top_builddir:?}" "${SP_FUZZ:?}" "${CC_FUZZ:?}"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
cflags="-g -O1 -std=c11 -D_GNU_SOURCE -pthread -fno-omit-frame-pointer $san"
src=$(cd "$top_srcdir" && pwd)
# the project's include path (Makefile.am's AM_CPPFLAGS) and the packages' flags
# SP_FUZZ_CPPFLAGS: the -I options of the project's AM_CPPFLAGS and the packages' (from make)
SP_FUZZ_CPPFLAGS="-DHAVE_CONFIG_H -I$top_builddir -I$src/cli -DSP_SRCDATADIR=\"$src/data\" ${SP_FUZZ_CPPFLAGS:-}"
out=$top_builddir/fuzz
mkdir -p "$out/obj" "$out/corpus"
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' |
    "$CC_FUZZ" -fsanitize=fuzzer -x c - -o "$out/probe" 2>"$out/probe.err"; then
    echo "make fuzz: $CC_FUZZ cannot link libFuzzer (-fsanitize=fuzzer):" >&2
    cat "$out/probe.err" >&2
    echo "install clang's runtime (Debian 12: apt-get install clang libclang-rt-14-dev)" >&2
    exit 1
fi
objs=
compile() { # source, extra flags
    f=$1
    o=$out/obj/$(echo "$f" | tr '/' '_' | sed 's/\.c$/.o/')
    if [ ! -f "$o" ] || [ "$top_srcdir/$f" -nt "$o" ]; then
        echo "  CC-FUZZ  $f"
        # shellcheck disable=SC2086
        "$CC_FUZZ" $cflags -fsanitize=fuzzer-no-link $SP_FUZZ_CPPFLAGS $2 -c "$top_srcdir/$f" -o "$o"
    fi
    objs="$objs $o"
}
for s in $SP_CORE_SOURCES $SP_CLI_SOURCES; do
    case $s in *.c) compile "$s" "" ;; esac
done
lib_objs=$objs
# objects the library takes from other compilers (CUDA kernels): as built
extra=
for x in $SP_CORE_LIBADD; do
    case $x in *.lo) extra="$extra $top_builddir/${x%.lo}.o" ;; -l*) extra="$extra $x" ;; esac
done
for h in $SP_FUZZ; do
    objs=
    compile "tests/fuzz/fuzz_$h.c" ""
    echo "  LD-FUZZ  fuzz/fuzz_$h"
    # shellcheck disable=SC2086
    "$CC_FUZZ" $cflags -fsanitize=fuzzer $objs $lib_objs $extra $SP_FUZZ_LIBS -lm -o "$out/fuzz_$h"
    c=$out/corpus/$h
    mkdir -p "$c"
    for d in "$top_srcdir/tests/fuzz/seeds/$h" "$top_srcdir/tests/fuzz/regress/$h"; do
        [ -d "$d" ] && cp "$d"/* "$c"/ 2>/dev/null || :
    done
    case $h in
    model) cp "$top_srcdir"/data/models/*.json "$c"/ && for x in "$top_srcdir"/data/hf/*/config.json; do cp "$x" "$c/hf-$(basename "$(dirname "$x")").json"; done ;;
    hw) cp "$top_srcdir"/data/hw/*.json "$c"/ ;;
    sweep) cp "$top_srcdir"/data/sweeps/*.json "$c"/ ;;
    esac
done
echo "make fuzz: $(echo $SP_FUZZ | wc -w) harnesses in $out; corpora in $out/corpus"
