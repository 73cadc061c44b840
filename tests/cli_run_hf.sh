#!/bin/sh
# run --weights DIR: a tiny Llama checkpoint (config.json + model.safetensors,
# written here) runs on 1, 2 and 4 chips with identical greedy and sampled
# tokens, bytes as predicted; a truncated checkpoint is refused with exit 2.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY' || { echo "FAIL: could not write the checkpoint"; exit 1; }
import json, struct, sys, random
d = sys.argv[1]
E, F, L, H, KV, V = 64, 128, 2, 4, 2, 96
D = E // H
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": E,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": KV, "vocab_size": V, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False},
          open(d + "/config.json", "w"))
rng = random.Random(5)
tensors = [("model.embed_tokens.weight", (V, E)), ("model.norm.weight", (E,)), ("lm_head.weight", (V, E))]
for l in range(L):
    p = "model.layers.%d." % l
    tensors += [(p + "input_layernorm.weight", (E,)), (p + "post_attention_layernorm.weight", (E,)),
                (p + "self_attn.q_proj.weight", (H * D, E)), (p + "self_attn.k_proj.weight", (KV * D, E)),
                (p + "self_attn.v_proj.weight", (KV * D, E)), (p + "self_attn.o_proj.weight", (E, H * D)),
                (p + "mlp.gate_proj.weight", (F, E)), (p + "mlp.up_proj.weight", (F, E)),
                (p + "mlp.down_proj.weight", (E, F))]
header, blobs, off = {}, [], 0
for name, shape in tensors:
    n = 1
    for s in shape: n *= s
    vals = [1.0 + rng.uniform(-0.1, 0.1) if name.endswith("norm.weight") else rng.gauss(0, 0.08) for _ in range(n)]
    b = struct.pack("<%df" % n, *vals)
    header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(d + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
fail=0
toks() { python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["comm"]["mismatches"] == 0; print(d["tokens"])'; }
ref=$("$SHARDPLAN" run --weights "$dir" --batch 4 --prompt 6 --gen 8 --layout mesh=1x1x1,weights=f32,kv=f32 --json | toks) \
    || { echo "FAIL: 1-chip run"; exit 1; }
for lay in "mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads" \
           "mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch"; do
    got=$("$SHARDPLAN" run --weights "$dir" --batch 4 --prompt 6 --gen 8 --layout "$lay" --json | toks)
    [ "$got" = "$ref" ] || { echo "FAIL: $lay: $got != $ref"; fail=$((fail + 1)); }
done
sref=$("$SHARDPLAN" run --weights "$dir" --batch 4 --prompt 6 --gen 8 --temperature 0.8 --top-k 20 --top-p 0.9 \
    --layout mesh=1x1x1,weights=f32,kv=f32 --json | toks)
sgot=$("$SHARDPLAN" run --weights "$dir" --batch 4 --prompt 6 --gen 8 --temperature 0.8 --top-k 20 --top-p 0.9 \
    --layout mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch --json | toks)
[ -n "$sref" ] && [ "$sref" = "$sgot" ] || { echo "FAIL: sampled tokens $sgot != $sref"; fail=$((fail + 1)); }
[ "$sref" != "$ref" ] || { echo "FAIL: sampling gave the greedy tokens"; fail=$((fail + 1)); }
# a truncated checkpoint: exit 2 with the file named
head -c 3000 "$dir/model.safetensors" > "$dir/t" && mv "$dir/t" "$dir/model.safetensors"
"$SHARDPLAN" run --weights "$dir" --batch 1 --prompt 2 --gen 2 --layout mesh=1x1x1 >/dev/null 2>"$dir/err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "safetensors" "$dir/err" || { echo "FAIL: truncated checkpoint: exit $rc: $(cat "$dir/err")"; fail=$((fail + 1)); }
[ "$fail" -eq 0 ] && echo "5 passed, 0 failed" || echo "$fail failed"
[ "$fail" -eq 0 ]
