#!/bin/sh
# Replays through each harness's plain driver (no libFuzzer, no clang) the
# regression corpus of inputs that once broke a promise, the seeds, and the
# bundled descriptions and bad-input cases of data/.  A broken promise aborts.
: "${top_srcdir:?}" "${top_builddir:?}"
f=$top_srcdir/tests/fuzz
d=$top_srcdir/data
b=$top_builddir/tests/fuzz
fail=0 n=0
SHARDPLAN_DATA=$d   # the harnesses have no main() to find the source tree's data/
export SHARDPLAN_DATA
replay() { # harness, inputs...
    h=$1
    shift
    n=$((n + 1))
    if "$b/replay_$h" "$@" >/dev/null 2>"$b/replay_$h.err"; then echo "ok   $h"
    else echo "FAIL $h:"; tail -5 "$b/replay_$h.err"; fail=$((fail + 1)); fi
}
replay model "$f/regress/model" "$d/models" "$d"/hf/*/config.json "$d"/invalid/model-*/input.json \
    "$d"/invalid/hf-*/config.json
replay hw "$f/regress/hw" "$d/hw" "$d"/invalid/hw-*/input.json
replay layout "$f/regress/layout" "$f/seeds/layout"
replay safetensors "$f/regress/safetensors" "$f/seeds/safetensors"
replay cli "$f/regress/cli" "$f/seeds/cli"
replay sweep "$f/seeds/sweep" "$d/sweeps"
echo "$n harnesses, $fail failed"
[ "$fail" -eq 0 ]
