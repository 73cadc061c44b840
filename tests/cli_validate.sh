#!/bin/sh
# cli_validate.sh: `calibrate --backend threads --quick` writes a profile that
# loads (estimate prices with it) and holds its measured points and machine;
# `validate` runs a tiny case set with it (text and JSON); the cuda backend
# and bad input are refused with exit 2.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
top_srcdir=${top_srcdir:-.}
d=$(mktemp -d /tmp/sp_validate.XXXXXX)
trap 'rm -rf $d' EXIT
fail=0
. "${top_srcdir:-.}/tests/json.sh"
check() { # name, expected exit, command...
    name=$1; want=$2; shift 2
    "$@" >$d/out 2>$d/err
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL: $name: exit $rc, wanted $want"; sed 's/^/  /' $d/err | head -5; fail=$((fail + 1)); return 1
    fi
    return 0
}
has() { # name, file, fixed string
    grep -qF -- "$3" "$2" || { echo "FAIL: $1: no '$3' in $2"; sed 's/^/  /' "$2" | head -5; fail=$((fail + 1)); }
}

hw=$d/local.json
check "calibrate" 0 $SHARDPLAN calibrate --backend threads --chips 2 --quick --quiet --out $hw
has "calibrate prints" $d/out "wrote $hw: 2 chips"
for k in '"source"' '"dispatch_s"' '"shared_cores": 2' '"comm_shares_cores": true' '"token_sync_s"' '"act_elem_s"' '"step_elem_s"' '"measured"' \
         '"points"' '"matmul"' '"memory"' '"attention"' '"collectives"' '"intra_node_latency"' '"weight_fetch_s_by_working_set"' '"logits_rows_by_weights"' "$(hostname)"; do
    has "profile key $k" $hw "$k"
done
# more chips than cores (on fewer than 4 cores): compute measured at 2 or more chips a core (the factor is the machine's; the
# key, its measured points and a profile that loads are what is checked)
if [ "$(nproc)" -lt 4 ]; then
    check "calibrate 4 chips on 2 cores" 0 $SHARDPLAN calibrate --backend threads --chips 4 --quick --quiet --out $d/l4.json
    for k in '"compute_stretch_by_share"' '"compute_stretch"' '"unit_with_barrier_s"'; do has "4-chip profile key $k" $d/l4.json "$k"; done
    check "estimate with the 4-chip profile" 0 $SHARDPLAN estimate --model tiny-llama --hw $d/l4.json --chips 4 --batch 2 \
        --prompt 8 --gen 3 --layout mesh=4x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
fi
# the profile loads as any other and prices a layout
check "estimate with the profile" 0 $SHARDPLAN estimate --model tiny-llama --hw $hw --chips 2 --batch 2 --prompt 8 \
    --gen 3 --layout mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
cases=$top_srcdir/tests/validate_tiny.cases
check "validate" 0 $SHARDPLAN validate --hw $hw --cases $cases --repeat 1 --min-seconds 0
for k in "|error|" "prefill" "decode step" "Kendall tau" "tiny-llama         2     2"; do has "validate text $k" $d/out "$k"; done
check "validate json" 0 $SHARDPLAN validate --hw $hw --cases $cases --repeat 1 --min-seconds 0 --json
for k in '"cases_run": 3' '"median_abs_err"' '"worst_abs_err"' '"min_group_tau"' '"tau_prefill"' '"runs": 1'; do
    has "validate json $k" $d/out "$k"
done
# --measured re-prices an earlier run's measurements without running: on the
# same profile every case's figures come back as they were
cp $d/out $d/v.json
check "validate --measured" 0 $SHARDPLAN validate --hw $hw --measured $d/v.json --json
# (the relative errors are recomputed from the measurements as printed: not compared)
f="/layout /prefill_s/predicted /prefill_s/measured /decode_step_s/predicted /decode_step_s/measured"
"$JSONQ" $d/v.json "/cases/*" $f > $d/a && "$JSONQ" $d/out "/cases/*" $f > $d/b && [ -s $d/a ] && cmp -s $d/a $d/b || { echo "FAIL: --measured figures"; fail=$((fail + 1)); }
# ... and says how they were measured (the file's backend and timing, not this call's defaults)
"$JSONQ" $d/v.json "" /backend /repeat /min_seconds > $d/a && "$JSONQ" $d/out "" /backend /repeat /min_seconds > $d/b &&
    [ -s $d/a ] && cmp -s $d/a $d/b || { echo "FAIL: --measured: backend and timing not the file's"; fail=$((fail + 1)); }
check "validate --measured with --repeat" 2 $SHARDPLAN validate --hw $hw --measured $d/v.json --repeat 2
check "validate --measured with --cases" 2 $SHARDPLAN validate --hw $hw --measured $d/v.json --cases $cases
sed 's/"measured": [0-9.e-]*/"measured": -1/' $d/v.json > $d/bad.json
check "validate --measured, a negative measurement" 2 $SHARDPLAN validate --hw $hw --measured $d/bad.json
has "names the case" $d/err "/cases/0"
# the measured figure is the minimum of the timed runs, the median beside it
check "validate json, 3 runs" 0 $SHARDPLAN validate --hw $hw --cases $cases --repeat 3 --min-seconds 0 --json
cp $d/out $d/v3.json
has "validate json statistic" $d/v3.json '"statistic": "min"'
for ph in prefill_s decode_step_s; do
    json_check '$1 == $3 && $3 > 0 && $3 <= $2' $d/v3.json "/cases/*" /$ph/measured /$ph/measured_median \
        /$ph/measured_min || { echo "FAIL: $ph: measured is not the minimum, or the minimum exceeds the median"; fail=$((fail + 1)); }
done
# --statistic median on those measurements compares with the median
check "validate --measured --statistic median" 0 $SHARDPLAN validate --hw $hw --measured $d/v3.json --statistic median --json
"$JSONQ" $d/v3.json "/cases/*" /prefill_s/measured_median /decode_step_s/measured_median > $d/a &&
    "$JSONQ" $d/out "/cases/*" /prefill_s/measured /decode_step_s/measured > $d/b && [ -s $d/a ] && cmp -s $d/a $d/b ||
    { echo "FAIL: --statistic median: measured is not the file's median"; fail=$((fail + 1)); }
has "validate --statistic median says so" $d/out '"statistic": "median"'
# an output from before both were kept (its "measured" was the minimum): read as the minimum,
# and a median it does not have is refused with its path
sed -e '/"measured_median"/d' -e '/"measured_min"/d' -e '/"statistic"/d' $d/v3.json > $d/old.json
check "validate --measured, an older file" 0 $SHARDPLAN validate --hw $hw --measured $d/old.json --json
has "an older file is the minimum" $d/out '"statistic": "min"'
check "validate --measured, an older file, --statistic median" 2 $SHARDPLAN validate --hw $hw --measured $d/old.json \
    --statistic median
has "names the missing figure" $d/err "/cases/0/prefill_s/measured_median"
check "validate --statistic mean" 2 $SHARDPLAN validate --hw $hw --cases $cases --statistic mean
# SHARDPLAN_LOCAL_HW stands in for --hw
SHARDPLAN_LOCAL_HW=$hw check "validate via SHARDPLAN_LOCAL_HW" 0 $SHARDPLAN validate --cases $cases --repeat 1 \
    --min-seconds 0
# run prices its own layout with the profile, beside the measurement
lay=mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
check "run --hw" 0 $SHARDPLAN run --model tiny-llama --batch 2 --prompt 8 --gen 3 --layout $lay --hw $hw
for k in "predicted on $hw" "prefill" "decode step" "matmul" "attention" "all-gather"; do has "run text $k" $d/out "$k"; done
SHARDPLAN_LOCAL_HW=$hw check "run --json (SHARDPLAN_LOCAL_HW)" 0 $SHARDPLAN run --model tiny-llama --batch 2 --prompt 8 \
    --gen 3 --layout $lay --json
for k in '"predicted"' '"prefill_s"' '"decode_step_s"' '"steps"' '"reduce-scatter"' '"error"'; do
    has "run json $k" $d/out "$k"
done
check "run without a profile" 0 env SHARDPLAN_LOCAL_HW= $SHARDPLAN run --model tiny-llama --batch 2 --prompt 8 --gen 3 \
    --layout $lay
has "run says there is no prediction" $d/out "no prediction"
# refusals
# --backend cuda: one GPU where one is visible (a quick grid; one chip only), else
# exit 2 with the reason (no GPU, or a build without CUDA)
probe="${top_builddir:-.}/kernels/cuda/cuda_probe"
gcases=$d/gpu.cases
printf 'tiny-llama 1 mesh=1x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads 2 8 3\n' >$gcases
if test -x "$probe" && "$probe" >/dev/null 2>&1; then
    check "calibrate cuda" 0 $SHARDPLAN calibrate --backend cuda --quick --quiet --out $d/gpu.json
    has "calibrate cuda names the GPU" $d/gpu.json '"device"'
    check "calibrate cuda --chips 2" 2 $SHARDPLAN calibrate --backend cuda --chips 2 --out $d/x.json
    has "calibrate cuda --chips 2 says why" $d/err "one GPU is measured"
    check "validate --backend cuda" 0 $SHARDPLAN validate --hw $d/gpu.json --backend cuda --cases $gcases --repeat 1 \
        --min-seconds 0
    check "validate --backend cuda, no case of one chip" 2 $SHARDPLAN validate --hw $hw --backend cuda --cases $cases
    has "validate cuda names the chips" $d/err "one GPU runs the cases of one chip"
else
    check "calibrate cuda" 2 $SHARDPLAN calibrate --backend cuda --out $d/x.json
    has "calibrate cuda says why" $d/err "calibrate --backend cuda"
    check "validate --backend cuda" 2 $SHARDPLAN validate --hw $hw --backend cuda --cases $gcases
    grep -qiE "validate --backend cuda: (no GPU is visible|this build has no CUDA)" $d/err ||
        { echo "FAIL: validate --backend cuda: no reason"; sed 's/^/  /' $d/err | head -3; fail=$((fail + 1)); }
fi
check "calibrate without --out" 2 $SHARDPLAN calibrate --backend threads
check "validate without --hw" 2 env SHARDPLAN_LOCAL_HW= $SHARDPLAN validate --cases $cases
printf 'tiny-llama 4 mesh=2x1x1 2 8 3\n' >$d/bad.cases
check "validate bad case file" 2 $SHARDPLAN validate --hw $hw --cases $d/bad.cases
has "bad case names line and field" $d/err "bad.cases:1:12"
check "validate --help" 0 $SHARDPLAN validate --help
check "calibrate --backend --help" 0 $SHARDPLAN calibrate --backend threads --help
# fitting to one set and predicting another are separate calls, never silently one of them
check "calibrate --fit with --predict" 2 $SHARDPLAN calibrate --fit $top_srcdir/data/calibration/tpu-v4-pope.csv --predict $top_srcdir/data/calibration/tpu-v4-pope.csv --hw tpu-v4
grep -q "do not mix" $d/err || { echo "FAIL: --fit with --predict: no reason"; fail=$((fail + 1)); }
# the prior weight belongs to a fit: refused without one, and refused when not a number >= 0
check "calibrate --predict --prior-weight" 2 $SHARDPLAN calibrate --predict $top_srcdir/data/calibration/tpu-v4-pope.csv --hw tpu-v4 --prior-weight 0.1
grep -q "prior-weight" $d/err || { echo "FAIL: --predict --prior-weight: no reason"; fail=$((fail + 1)); }
check "calibrate --prior-weight -1" 2 $SHARDPLAN calibrate --fit $top_srcdir/data/calibration/tpu-v4-pope.csv --hw tpu-v4 --prior-weight -1
check "calibrate --prior-weight x" 2 $SHARDPLAN calibrate --fit $top_srcdir/data/calibration/tpu-v4-pope.csv --hw tpu-v4 --prior-weight 0.1x
[ $fail -eq 0 ] && echo "cli_validate: all passed"
exit $fail
