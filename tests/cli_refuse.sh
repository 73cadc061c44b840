#!/bin/sh
# A model field that nothing computes is refused by estimate, plan and run
# alike: exit 2, a one-line message naming the field (JSON pointer) and its
# value.  Covers shardplan's own format and the Hugging Face fields read.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
LLB='"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 64'
LL="\"model_type\": \"llama\", $LLB"
OWN='"name": "t", "n_layers": 2, "d_model": 64, "d_ff": 128, "n_heads": 4, "d_head": 16, "vocab": 100, "ffn": "swiglu", "block": "serial", "norm": "rmsnorm", "tied_embeddings": false, "bias": false, "max_context": 64'
# name | JSON document | expected text (field and value) | verbs (default: estimate plan run)
cases() {
cat <<CASES
own-moe-bias|{"name": "t", "n_layers": 2, "d_model": 64, "d_ff": 128, "n_heads": 4, "d_head": 16, "vocab": 100, "ffn": "swiglu", "block": "serial", "norm": "rmsnorm", "tied_embeddings": false, "max_context": 64, "positions": "rope", "n_experts": 4, "top_k": 2, "bias": ["ffn"]}|/bias: ffn: biases on expert FFNs are not implemented
hf-qwen-moe-step|{"model_type": "qwen2_moe", $LLB, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 3}|/decoder_sparse_step: no layer is sparse: not implemented
hf-qwen-moe-dense|{"model_type": "qwen2_moe", $LLB, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "mlp_only_layers": [1]}|/mlp_only_layers: the sparse layers (decoder_sparse_step 1, 1 mlp_only_layers) are not every k-th layer
hf-qwen-moe-arch|{"architectures": ["Qwen2MoeForCausalLM"], $LLB, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 3}|/decoder_sparse_step: no layer is sparse
hf-qwen-moe-window|{"model_type": "qwen2_moe", $LLB, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "use_sliding_window": true, "sliding_window": 8}|/sliding_window: 8: the job's context (12 tokens)
own-alibi|{$OWN, "positions": "alibi"}|/positions: alibi:
own-interleaved|{$OWN, "positions": "rope", "rope_style": "interleaved"}|/rope_style: interleaved:
own-window|{$OWN, "positions": "rope", "sliding_window": 8}|/sliding_window: 8: the job's context (12 tokens)
own-dynamic|{$OWN, "positions": "rope", "rope_scaling": {"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 10}}|/rope_scaling/rope_type: dynamic: the job's context (12 tokens)
hf-act|{$LL, "hidden_act": "quick_gelu"}|/hidden_act: "quick_gelu": activation not implemented
hf-rope-type|{$LL, "rope_scaling": {"rope_type": "longrope", "factor": 2}}|/rope_scaling/rope_type: "longrope": RoPE scaling not implemented
hf-rope-key|{$LL, "rope_scaling": {"rope_type": "yarn", "factor": 2, "mscale": 0.7}}|/rope_scaling/mscale: not implemented
hf-partial|{$LL, "partial_rotary_factor": 0.5}|/partial_rotary_factor: 0.5:
hf-mistral-window|{"model_type": "mistral", $LLB, "sliding_window": 8}|/sliding_window: 8: the job's context (12 tokens)
hf-gpt2-scale|{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 64, "scale_attn_weights": false}|/scale_attn_weights: false:
hf-gpt2-layeridx|{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 64, "scale_attn_by_inverse_layer_idx": true}|/scale_attn_by_inverse_layer_idx: true:
hf-gptj|{"model_type": "gptj", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 64, "rotary_dim": 8}|/rope_style: interleaved:
hf-bloom|{"model_type": "bloom", "hidden_size": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100}|/positions: alibi:
hf-falcon-alibi|{"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "alibi": true}|/positions: alibi:
CASES
}
cases > "$tmp/cases"
while IFS='|' read -r name doc want verbs; do
    mkdir -p "$tmp/$name"
    printf '%s\n' "$doc" > "$tmp/$name/config.json"
    for verb in ${verbs:-estimate plan run}; do
        n=$((n + 1))
        case $verb in
        estimate) set -- estimate --hw h100 --chips 1 --batch 1 --prompt 8 --gen 4 --layout mesh=1x1x1 ;;
        plan) set -- plan --hw h100 --chips 1 --batch 1 --prompt 8 --gen 4 ;;
        run) set -- run --batch 1 --prompt 8 --gen 4 --layout mesh=1x1x1 ;;
        esac
        err=$("$SHARDPLAN" "$@" --model "$tmp/$name/config.json" 2>&1 >/dev/null)
        rc=$?
        if [ "$rc" -ne 2 ]; then
            echo "FAIL $name $verb: exit $rc, want 2: $err"; fail=$((fail + 1)); continue
        fi
        case $err in
        *"$want"*) ;;
        *) echo "FAIL $name $verb: message lacks '$want': $err"; fail=$((fail + 1)); continue ;;
        esac
        [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || { echo "FAIL $name $verb: not one line: $err"; fail=$((fail + 1)); }
    done
    echo "ok   $name: $err"
done < "$tmp/cases"
echo "$n refusals, $fail failed"
[ "$fail" -eq 0 ]
