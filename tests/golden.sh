#!/bin/sh
# Golden outputs: each tests/ref/<variant>/ holds a tiny Hugging Face
# checkpoint and the greedy tokens and logits an independent PyTorch
# implementation of its architecture computed (tests/ref/gen_golden.py,
# `make golden` regenerates them).  The C single-chip reference and
# `shardplan run` on 1, 2, 4 and 8 chips (1D, 2D, weight-gathered, pipeline,
# replicas) must give the same tokens and logits within 1e-4 (f32).  A
# mixture-of-experts variant (config.json num_local_experts: Mixtral, or
# num_experts: Qwen2-MoE with its gated shared expert) runs the layouts
# that split its experts: over the tensor mesh (each expert sharded), over
# the replicas (expert parallelism, all-to-all), both, and replicas without
# it; capacity 2 (= experts / top-k) gives every expert room for any routing.
: "${top_srcdir:=.}" "${SHARDPLAN:=./shardplan}" "${GOLDEN_CMP:=tests/golden_cmp}"
TOL=1e-4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
F=weights=f32,kv=f32
layouts="mesh=1x1x1,$F
mesh=2x1x1,$F,prefill=ws1d/heads,decode=ws1d/heads
stages=2,microbatches=2,mesh=1x1x1,$F
mesh=2x2x1,$F,prefill=ws2d/heads,decode=ws2d/heads
mesh=1x2x2,$F,prefill=wg-xy/heads,decode=wg-xy/heads
replicas=2,mesh=2x1x1,$F,prefill=ws2d/heads,decode=ws2d/heads
mesh=2x2x2,$F,prefill=ws1d/heads,decode=ws1d/heads
mesh=2x1x1,$F,prefill=ws2d/heads,decode=ws2d/batch
mesh=2x2x2,$F,prefill=wg-x/heads,decode=wg-x/heads
mesh=1x2x4,$F,prefill=ws2d/heads,decode=ws2d/heads"
M=$F,capacity=2
moe_layouts="mesh=1x1x1,$M
mesh=2x1x1,$M,prefill=ws1d/heads,decode=ws1d/heads
stages=2,microbatches=2,mesh=1x1x1,$M
mesh=2x2x1,$M,prefill=ws2d/heads,decode=ws2d/heads
replicas=2,experts=2,mesh=1x1x1,$M
replicas=2,experts=2,mesh=2x1x1,$M,prefill=ws1d/heads,decode=ws1d/heads
replicas=2,experts=2,mesh=2x2x1,$M,prefill=ws2d/heads,decode=ws2d/heads
replicas=2,mesh=2x1x1,$M,prefill=ws2d/heads,decode=ws2d/heads"
for dir in "$top_srcdir"/tests/ref/*/; do
    dir=${dir%/}
    name=${dir##*/}
    [ -f "$dir/golden_logits.npy" ] || continue
    n=$((n + 1))
    "$GOLDEN_CMP" ref "$dir" "$TOL" >"$tmp/out" 2>&1 || { echo "FAIL $name: C reference"; cat "$tmp/out"; fail=$((fail + 1)); }
    G=$(awk 'NR == 1 { print NF }' "$dir/golden_tokens.txt")
    awk '{ printf "seq %d:", NR - 1; for (i = 1; i <= NF; i++) printf " %s", $i; printf "\n" }' "$dir/golden_tokens.txt" >"$tmp/want"
    lays=$layouts
    grep -q '"num_local_experts"\|"num_experts"' "$dir/config.json" && lays=$moe_layouts
    echo "$lays" | while read -r lay; do
        if ! "$SHARDPLAN" run --weights "$dir" --prompt-ids "$dir/prompt_ids.txt" --gen "$G" --layout "$lay" \
            --logits "$tmp/lg.npy" --logits-all >"$tmp/run" 2>&1; then
            echo "FAIL $name $lay: run failed"; cat "$tmp/run"; echo x >>"$tmp/fails"; continue
        fi
        grep '^seq ' "$tmp/run" | cmp -s - "$tmp/want" || { echo "FAIL $name $lay: tokens differ"; grep '^seq ' "$tmp/run"; cat "$tmp/want"; echo x >>"$tmp/fails"; }
        "$GOLDEN_CMP" npy "$tmp/lg.npy" "$dir/golden_logits.npy" "$TOL" >"$tmp/cmp" || { echo "FAIL $name $lay: logits"; cat "$tmp/cmp"; echo x >>"$tmp/fails"; }
    done
    echo "ok   $name: $(cat "$tmp/out")"
done
[ -f "$tmp/fails" ] && fail=$((fail + $(wc -l <"$tmp/fails")))
echo "$n variants, $fail failures"
[ "$n" -gt 0 ] && [ "$fail" -eq 0 ]
