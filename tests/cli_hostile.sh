#!/bin/sh
# Hostile command lines: requests whose sizes do not fit in 64 bits, layouts
# whose chip count would wrap, hardware numbers outside any physical range,
# a solver time limit, a run larger than this machine.  Each must exit 1 or 2
# with a message naming the quantity, quickly, and nothing printed may be a
# negative, NaN or infinite figure.
set -u
: "${top_srcdir:?}"
SHARDPLAN=${SHARDPLAN:-./shardplan}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
# hw / model files: one bundled number replaced (sed on the bundled JSON)
edit() { # src, key regex, value, out
    sed "0,/\"$2\": [-0-9.e+]*/s//\"$2\": $3/" "$1" >"$tmp/$4"
}
hw="$top_srcdir/data/hw/h100.json"
model="$top_srcdir/data/models/llama2-70b.json"
edit "$hw" hbm_bw 1e-300 hw-bw.json
edit "$hw" bf16 1e-300 hw-peak.json
edit "$hw" hbm_bytes 1 hw-hbm1.json
edit "$hw" hbm_bytes 1048576 hw-1mib.json
edit "$hw" inter_node_latency 1e300 hw-lat.json
sed 's/"d_model": 8192,/"d_model": 8192, "d_head": 1099511627776,/' "$model" >"$tmp/m-dhead.json"
sed -e 's/"d_model": 8192,/"d_model": 2, "d_head": 1,/' -e 's/"n_heads": 64,/"n_heads": 330000000000000000,/' \
    -e 's/"n_kv_heads": 8,/"n_kv_heads": 330000000000000000,/' "$model" >"$tmp/m-heads.json"
sed -e 's/"d_model": [0-9]*/"d_model": 4000000/' -e 's/"d_ff": [0-9]*/"d_ff": 4000000000/' "$model" >"$tmp/m-dff.json"

now_ms() { date +%s%N | cut -c1-13; }
# name, wanted exit, substring of the message, command...
check() {
    name=$1 want=$2 msg=$3
    shift 3
    n=$((n + 1))
    t0=$(now_ms)
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    ms=$(($(now_ms) - t0))
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL $name: exit $rc, want $want"; sed 's/^/  /' "$tmp/err" | head -3; fail=$((fail + 1)); return
    fi
    if ! grep -qF -- "$msg" "$tmp/out" "$tmp/err"; then
        echo "FAIL $name: no '$msg' in:"; cat "$tmp/out" "$tmp/err" | sed 's/^/  /' | head -5; fail=$((fail + 1)); return
    fi
    # figures: no nan/inf, no negative number (a '-' after a blank, '(' or ':' then a digit)
    if grep -qiE '(^|[^a-z_])-?(nan|inf)([^a-z_]|$)|(^|[ (:=,\[])-[0-9]' "$tmp/out"; then
        echo "FAIL $name: a negative, NaN or infinite figure:"; grep -iE 'nan|inf|-[0-9]' "$tmp/out" | head -3
        fail=$((fail + 1)); return
    fi
    # the whole suite runs under sanitizers and on loaded machines: 1 s is the
    # target, 10 s the limit that fails the test
    if [ "$ms" -gt 10000 ]; then echo "FAIL $name: took $ms ms"; fail=$((fail + 1)); return; fi
    echo "ok   $name (exit $rc, $ms ms): $(head -c 160 "$tmp/err" | tr '\n' ' ')"
}
W="--batch 16777216 --prompt 16777216 --gen 16777216"
check "plan, sizes past 2^63" 2 "KV cache bytes" \
    "$SHARDPLAN" plan --model llama2-70b --hw h100 --chips 8 $W
check "estimate, sizes past 2^63" 2 "does not fit in 64 bits" \
    "$SHARDPLAN" estimate --model llama2-70b --hw h100 --chips 8 $W --layout mesh=8x1x1
check "frontier, sizes past 2^63" 2 "does not fit in 64 bits" \
    "$SHARDPLAN" frontier --model llama2-70b --hw h100 --chips 8 --batch 16777216 --prompt 16777216 --gen 16777216
check "stages x replicas wrap to 0 chips" 2 "1099511627776 chips" \
    "$SHARDPLAN" estimate --model llama2-70b --hw h100 --chips 8 --batch 8 --prompt 8 --gen 8 \
    --layout stages=1048576,replicas=1048576
check "mesh wraps to 4 chips" 2 "4294967300 chips" \
    "$SHARDPLAN" estimate --model llama2-70b --hw h100 --chips 4 --batch 8 --prompt 8 --gen 8 --layout mesh=4100x1047553x1
check "hbm_bw 1e-300" 2 "/chip/hbm_bw: must be in" \
    "$SHARDPLAN" estimate --model llama2-70b --hw "$tmp/hw-bw.json" --chips 8 --batch 8 --prompt 8 --gen 8 --layout mesh=8x1x1
check "peak 1e-300" 2 "/chip/peak_flops/bf16: must be in" \
    "$SHARDPLAN" plan --model llama2-70b --hw "$tmp/hw-peak.json" --chips 8 --batch 8 --prompt 8 --gen 8
check "latency 1e300" 2 "/topology/inter_node_latency" \
    "$SHARDPLAN" plan --model llama2-70b --hw "$tmp/hw-lat.json" --chips 8 --batch 8 --prompt 8 --gen 8
check "1 byte of HBM" 2 "/chip/hbm_bytes: must be in" \
    "$SHARDPLAN" plan --model llama2-70b --hw "$tmp/hw-hbm1.json" --chips 8 --batch 8 --prompt 8 --gen 8
check "1 MiB of HBM: bounded fewest-chips search" 1 "need at least" \
    "$SHARDPLAN" plan --model llama2-70b --hw "$tmp/hw-1mib.json" --chips 8 --batch 8 --prompt 8 --gen 8
check "--min-chips, 1 MiB of HBM" 1 "need at least" \
    "$SHARDPLAN" plan --min-chips --model llama2-70b --hw "$tmp/hw-1mib.json" --batch 8 --prompt 8 --gen 8
check "d_head 2^40" 2 "/d_head: too large" \
    "$SHARDPLAN" plan --model "$tmp/m-dhead.json" --hw h100 --chips 8 --batch 8 --prompt 8 --gen 8
check "n_heads 3.3e17" 2 "/n_heads: too large" \
    "$SHARDPLAN" model show "$tmp/m-heads.json"
check "d_model 4e6, d_ff 4e9" 2 "/d_model: too large" \
    "$SHARDPLAN" model show "$tmp/m-dff.json"
check "solver time limit" 1 "time limit" \
    "$SHARDPLAN" plan --model llama2-70b --hw h100 --chips 8 --batch 16 --prompt 1024 --gen 128 --time-limit-ms 1
check "run larger than this machine" 1 "bytes of memory" \
    "$SHARDPLAN" run --model tiny-llama --batch 1048576 --prompt 200 --gen 50 --layout mesh=2x1x1,weights=f32,kv=f32
# honest figures on ordinary requests too
check "estimate figures" 0 "total" \
    "$SHARDPLAN" estimate --model llama2-70b --hw h100 --chips 8 --batch 16 --prompt 1024 --gen 128 --layout mesh=8x1x1
check "estimate JSON figures" 0 "\"total_s\"" \
    "$SHARDPLAN" estimate --model palm-540b --hw tpu-v4 --chips 64 --batch 64 --prompt 2048 --gen 64 \
    --layout mesh=4x4x4,weights=int8,prefill=ws2d/heads,decode=ws2d/batch --json
check "plan figures" 0 "status: optimal" \
    "$SHARDPLAN" plan --model llama2-70b --hw h100 --chips 8 --batch 16 --prompt 1024 --gen 128
check "plan JSON figures" 0 "\"chosen\"" \
    "$SHARDPLAN" plan --model llama2-70b --hw h100 --chips 8 --batch 16 --prompt 1024 --gen 128 --json
echo "$n cases, $fail failed"
[ "$fail" -eq 0 ]
