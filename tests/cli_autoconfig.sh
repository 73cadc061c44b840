#!/bin/sh
# The autoconfig verb: each --emit format (golden substrings of the flags each
# server takes), refusal of what a server cannot express (exit 1 with the
# reasons, exit 2 for a precision it has no mode for), the plan cache through
# the CLI (miss, hit, a corrupt entry rewritten), --request-rate, --weights DIR.
: "${top_srcdir:?}" "${SHARDPLAN:?}"
fail=0
tmp=${TMPDIR:-/tmp}/cli_autoconfig.$$
mkdir -p "$tmp" && trap 'rm -rf "$tmp"' EXIT
SHARDPLAN_CACHE_DIR=$tmp/cache; export SHARDPLAN_CACHE_DIR
check() { # description, command...
    d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fail=1; fi
}
expect_rc() { # want, command...
    want=$1; shift
    "$@" >/dev/null 2>&1; rc=$?
    [ "$rc" -eq "$want" ] || { echo "  exit $rc, want $want: $*"; return 1; }
}
has() { # file, fixed string
    grep -q -F -e "$2" "$1" || { echo "  '$2' not in $1:"; sed 's/^/    /' "$1"; return 1; }
}
hasnt() { ! grep -q -F -e "$2" "$1" || { echo "  '$2' in $1"; return 1; }; }
A="--model llama2-70b --hw h100 --chips 8 --batch 64 --prompt 1024 --gen 128"
ac() { "$SHARDPLAN" autoconfig "$@"; }

check "autoconfig --help exits 0" expect_rc 0 "$SHARDPLAN" autoconfig --help
check "shardplan --help lists autoconfig" sh -c '"$SHARDPLAN" --help | grep -q "^  autoconfig"'
check "no --model exits 2" expect_rc 2 ac --hw h100 --chips 8 --batch 1 --prompt 1 --gen 1
check "--batch and --request-rate together exit 2" expect_rc 2 ac $A --request-rate 3
check "bad --emit exits 2" expect_rc 2 ac $A --emit yaml
check "--server contradicting --emit exits 2" expect_rc 2 ac $A --emit vllm --server sglang
check "bad --search exits 2" expect_rc 2 ac $A --search some

# vLLM
ac $A --emit vllm >"$tmp/vllm.out" 2>"$tmp/vllm.err"; rc=$?
check "vllm exits 0" test "$rc" -eq 0
check "vllm: one line of flags" test "$(wc -l <"$tmp/vllm.out")" -eq 1
for f in --tensor-parallel-size --pipeline-parallel-size --max-num-seqs --max-model-len --kv-cache-dtype; do
    check "vllm: $f" has "$tmp/vllm.out" "$f "
done
check "vllm: context is prompt + gen" has "$tmp/vllm.out" "--max-model-len 1152"
check "vllm: says the search was narrowed" has "$tmp/vllm.err" "narrowed to layouts vLLM can express"
check "vllm: no int8 weight-only" hasnt "$tmp/vllm.out" "int8"
# SGLang
ac $A --emit sglang >"$tmp/sgl.out" 2>"$tmp/sgl.err"; rc=$?
check "sglang exits 0" test "$rc" -eq 0
for f in --tp-size --max-running-requests --context-length --kv-cache-dtype; do
    check "sglang: $f" has "$tmp/sgl.out" "$f "
done
check "sglang: no vLLM flags" hasnt "$tmp/sgl.out" "--tensor-parallel-size"
# TensorRT-LLM: conversion then build
ac $A --emit trtllm >"$tmp/trt.out" 2>"$tmp/trt.err"; rc=$?
check "trtllm exits 0" test "$rc" -eq 0
check "trtllm: two command lines" test "$(wc -l <"$tmp/trt.out")" -eq 2
check "trtllm: tp/pp at conversion" sh -c 'grep -E -q -e "^(convert_checkpoint|quantize)\.py .*--tp_size [0-9]+ --pp_size [0-9]+" "$0"' "$tmp/trt.out"
check "trtllm: engine limits" has "$tmp/trt.out" "trtllm-build --max_batch_size "
check "trtllm: max_seq_len" has "$tmp/trt.out" "--max_seq_len 1152"
ac $A --emit trtllm --quant int8 >"$tmp/trt8.out" 2>/dev/null
check "trtllm: int8 weight-only flags" has "$tmp/trt8.out" "--use_weight_only --weight_only_precision int8"
ac $A --emit trtllm --quant int8 --kv-dtype fp8 >"$tmp/trt8f.out" 2>/dev/null
check "trtllm: int8 weight-only with an fp8 KV cache" has "$tmp/trt8f.out" "--qformat int8_wo --kv_cache_dtype fp8"
ac $A --emit trtllm --quant bf16 --kv-dtype fp8 >"$tmp/trtbf.out" 2>/dev/null
check "trtllm: bf16 weights with an fp8 KV cache" has "$tmp/trtbf.out" "--qformat full_prec --kv_cache_dtype fp8"
ac $A --emit vllm --kv-dtype fp8 >"$tmp/vkv.out" 2>/dev/null
check "vllm: fp8 KV cache" has "$tmp/vkv.out" "--kv-cache-dtype fp8"
# env
ac $A --emit env >"$tmp/env.out" 2>/dev/null; rc=$?
check "env exits 0" test "$rc" -eq 0
for v in SP_LAYOUT= SP_TENSOR_PARALLEL= SP_PIPELINE_STAGES= SP_DATA_REPLICAS= SP_MAX_BATCH= SP_KV_DTYPE= SP_WEIGHTS=; do
    check "env: $v" has "$tmp/env.out" "$v"
done
check "env: assignments a shell accepts" sh -c '. "$0" && test -n "$SP_LAYOUT"' "$tmp/env.out"
check "env: the layout round-trips through estimate" sh -c '. "$0" && "$SHARDPLAN" estimate --model llama2-70b --hw h100 --chips 8 --batch 64 --prompt 1024 --gen 128 --layout "$SP_LAYOUT" >/dev/null' "$tmp/env.out"
# json
ac $A --emit json --server vllm >"$tmp/j.out" 2>/dev/null; rc=$?
check "json exits 0" test "$rc" -eq 0
for k in '"status": "ok"' '"server": "vllm"' '"tensor_parallel"' '"pipeline_parallel"' '"data_replicas"' \
         '"max_batch_per_replica"' '"kv_dtype"' '"predicted"' '"command_lines"' '"inexpressible": []' '"cache"'; do
    check "json: $k" has "$tmp/j.out" "$k"
done

# refusals
check "vllm --quant int8 exits 2 (no int8 weight-only mode)" expect_rc 2 ac $A --emit vllm --quant int8
ac $A --emit vllm --quant int8 >/dev/null 2>"$tmp/r1.err"
check "vllm --quant int8 says why" has "$tmp/r1.err" "vLLM cannot express int8 weight-only"
check "sglang --kv-dtype int8 exits 2" expect_rc 2 ac $A --emit sglang --kv-dtype int8
check "trtllm --kv-dtype int8 exits 0" expect_rc 0 ac $A --emit trtllm --kv-dtype int8
P="--model palm-62b --hw tpu-v4 --chips 64 --batch 64 --prompt 1024 --gen 128"
ac $P --emit vllm --search full >"$tmp/full.out" 2>"$tmp/full.err"; rc=$?
check "search full: best layout outside vLLM exits 1" test "$rc" -eq 1
check "search full: nothing on stdout" test ! -s "$tmp/full.out"
check "search full: says what vLLM cannot express" has "$tmp/full.err" "vLLM cannot express: "
ac $P --emit json --server vllm --search full >"$tmp/fullj.out" 2>/dev/null
check "search full json: status inexpressible" has "$tmp/fullj.out" '"status": "inexpressible"'
check "search full json: no command lines" has "$tmp/fullj.out" '"command_lines": []'
check "search narrowed: same problem exits 0" expect_rc 0 ac $P --emit vllm

# the cache through the CLI
rm -rf "$SHARDPLAN_CACHE_DIR"
ac $A --emit json >"$tmp/c1" 2>/dev/null
ac $A --emit json >"$tmp/c2" 2>/dev/null
check "cache: first miss" has "$tmp/c1" '"cache": "miss"'
check "cache: then hit" has "$tmp/c2" '"cache": "hit"'
check "cache: hit gives the same layout" sh -c 'grep layout_text "$0" >"$0.a"; grep layout_text "$1" >"$1.a"; cmp -s "$0.a" "$1.a"' "$tmp/c1" "$tmp/c2"
for e in "$SHARDPLAN_CACHE_DIR"/*.json; do printf '{"format": 1, "layout": ' >"$e"; done
ac $A --emit json >"$tmp/c3" 2>"$tmp/c3.err"
check "cache: corrupt entry ignored" has "$tmp/c3" '"cache": "corrupt"'
check "cache: corrupt entry reported" has "$tmp/c3.err" "unusable"
ac $A --emit json >"$tmp/c4" 2>/dev/null
check "cache: corrupt entry rewritten" has "$tmp/c4" '"cache": "hit"'
check "cache: no temporary files left" sh -c '! ls -a "$0" | grep -q tmp' "$SHARDPLAN_CACHE_DIR"
ac $A --emit json --no-cache >"$tmp/c5" 2>/dev/null
check "cache: --no-cache" has "$tmp/c5" '"cache": "off"'
SHARDPLAN_CACHE_DIR=off ac $A --emit json >"$tmp/c6" 2>/dev/null
check "cache: SHARDPLAN_CACHE_DIR=off" has "$tmp/c6" '"cache": "off"'
rm -rf "$tmp/xdg"
env -u SHARDPLAN_CACHE_DIR XDG_CACHE_HOME="$tmp/xdg" "$SHARDPLAN" autoconfig $A >/dev/null 2>&1
check "cache: \$XDG_CACHE_HOME/shardplan" sh -c 'ls "$0"/shardplan/*.json >/dev/null 2>&1' "$tmp/xdg"

# request rate: the batch is printed and sustains the rate
ac --model llama2-7b --hw h100 --chips 4 --request-rate 20 --prompt 512 --gen 64 --emit vllm >"$tmp/rr.out" 2>"$tmp/rr.err"; rc=$?
check "request rate exits 0" test "$rc" -eq 0
check "request rate: batch stated" has "$tmp/rr.err" "requests/s -> batch "

# --weights DIR: a checkpoint directory's config.json
mkdir -p "$tmp/ckpt"
cat >"$tmp/ckpt/config.json" <<'JSON'
{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
 "num_attention_heads": 32, "num_key_value_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": false}
JSON
check "--weights DIR exits 0" expect_rc 0 ac --weights "$tmp/ckpt" --hw h100 --chips 2 --batch 8 --prompt 256 --gen 32 --emit vllm
check "--weights DIR without config.json exits 2" expect_rc 2 ac --weights "$tmp/nothing" --hw h100 --chips 2 --batch 8 --prompt 256 --gen 32
exit $fail
