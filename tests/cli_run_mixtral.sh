#!/bin/sh
# run --weights DIR with a tiny Mixtral checkpoint (MixtralForCausalLM
# config.json + model.safetensors with block_sparse_moe.* names, written
# here): the prefill's last-token logits equal a plain-Python forward pass of
# the same checkpoint (HF Mixtral semantics: w1 gate, w3 up, w2 down, softmax
# router, top-2, renormalised), on 1 chip and with the experts split over 2
# replicas, each sharded over 2 chips.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY' || { echo "FAIL: could not write the checkpoint"; exit 1; }
import json, math, struct, sys, random
d = sys.argv[1]
E, F, L, H, KV, V, NE, K = 32, 48, 2, 4, 2, 64, 4, 2
D = E // H
json.dump({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": E,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": KV, "vocab_size": V, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "num_local_experts": NE, "num_experts_per_tok": K, "sliding_window": None},
          open(d + "/config.json", "w"))
rng = random.Random(11)
W = {}
def t(name, shape, norm=False):
    n = 1
    for s in shape: n *= s
    W[name] = (shape, [1.0 + rng.uniform(-0.1, 0.1) if norm else rng.gauss(0, 0.15) for _ in range(n)])
t("model.embed_tokens.weight", (V, E)); t("model.norm.weight", (E,), True); t("lm_head.weight", (V, E))
for l in range(L):
    p = "model.layers.%d." % l
    t(p + "input_layernorm.weight", (E,), True); t(p + "post_attention_layernorm.weight", (E,), True)
    t(p + "self_attn.q_proj.weight", (H * D, E)); t(p + "self_attn.k_proj.weight", (KV * D, E))
    t(p + "self_attn.v_proj.weight", (KV * D, E)); t(p + "self_attn.o_proj.weight", (E, H * D))
    t(p + "block_sparse_moe.gate.weight", (NE, E))
    for e in range(NE):
        q = p + "block_sparse_moe.experts.%d." % e
        t(q + "w1.weight", (F, E)); t(q + "w3.weight", (F, E)); t(q + "w2.weight", (E, F))
header, blobs, off = {}, [], 0
for name, (shape, vals) in W.items():
    b = struct.pack("<%df" % len(vals), *vals)
    header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(d + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

# the reference: HF MixtralForCausalLM's forward, in plain Python
def lin(x, name):   # x (E_in) . W^T, W stored (out, in)
    (o, i), w = W[name]
    return [sum(w[r * i + c] * x[c] for c in range(i)) for r in range(o)]
def rms(x, name):
    g = W[name][1]; s = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + 1e-5)
    return [v * s * g[i] for i, v in enumerate(x)]
def rope(v, pos):
    out = list(v)
    for hh in range(len(v) // D):
        for i in range(D // 2):
            a = pos * 10000.0 ** (-2.0 * i / D); c, s = math.cos(a), math.sin(a)
            x1, x2 = v[hh * D + i], v[hh * D + i + D // 2]
            out[hh * D + i], out[hh * D + i + D // 2] = x1 * c - x2 * s, x2 * c + x1 * s
    return out
prompts = [[rng.randrange(V) for _ in range(5)] for _ in range(4)]
open(d + "/prompts.txt", "w").write("\n".join(" ".join(map(str, p)) for p in prompts) + "\n")
want = []
for toks in prompts:
    emb = W["model.embed_tokens.weight"][1]
    xs = [emb[tk * E:(tk + 1) * E] for tk in toks]
    for l in range(L):
        p = "model.layers.%d." % l
        hs = [rms(x, p + "input_layernorm.weight") for x in xs]
        qs = [rope(lin(h, p + "self_attn.q_proj.weight"), i) for i, h in enumerate(hs)]
        ks = [rope(lin(h, p + "self_attn.k_proj.weight"), i) for i, h in enumerate(hs)]
        vs = [lin(h, p + "self_attn.v_proj.weight") for h in hs]
        for i in range(len(xs)):
            att = []
            for hh in range(H):
                g = hh // (H // KV)
                sc = [sum(qs[i][hh * D + c] * ks[j][g * D + c] for c in range(D)) / math.sqrt(D) for j in range(i + 1)]
                m = max(sc); ex = [math.exp(s - m) for s in sc]; z = sum(ex)
                att += [sum(ex[j] / z * vs[j][g * D + c] for j in range(i + 1)) for c in range(D)]
            o = lin(att, p + "self_attn.o_proj.weight")
            xs[i] = [a + b for a, b in zip(xs[i], o)]
        for i in range(len(xs)):
            h = rms(xs[i], p + "post_attention_layernorm.weight")
            lg = lin(h, p + "block_sparse_moe.gate.weight")
            m = max(lg); pr = [math.exp(v - m) for v in lg]; z = sum(pr); pr = [v / z for v in pr]
            top = sorted(range(NE), key=lambda e: (-lg[e], e))[:K]
            tot = sum(pr[e] for e in top)
            y = [0.0] * E
            for e in top:
                q = p + "block_sparse_moe.experts.%d." % e
                a, b = lin(h, q + "w1.weight"), lin(h, q + "w3.weight")
                hid = [u / (1.0 + math.exp(-u)) * w for u, w in zip(a, b)]
                out = lin(hid, q + "w2.weight")
                y = [yy + pr[e] / tot * oo for yy, oo in zip(y, out)]
            xs[i] = [a + b for a, b in zip(xs[i], y)]
    want.append(lin(rms(xs[-1], "model.norm.weight"), "lm_head.weight"))
json.dump(want, open(d + "/want.json", "w"))
PY
fail=0
for lay in "mesh=1x1x1" "replicas=2,experts=2,mesh=2x1x1,prefill=ws1d/heads,decode=ws1d/heads"; do
    if ! "$SHARDPLAN" run --weights "$dir" --prompt-ids "$dir/prompts.txt" --gen 1 --layout "$lay,capacity=4,weights=f32,kv=f32" \
        --logits "$dir/got.npy" --json >"$dir/out.json" 2>"$dir/err"; then
        echo "FAIL: $lay: $(head -3 "$dir/err")"; fail=$((fail + 1)); continue
    fi
    python3 - "$dir" <<'PY' || { echo "FAIL: $lay: logits differ from the reference"; fail=$((fail + 1)); }
import json, struct, sys
d = sys.argv[1]
raw = open(d + "/got.npy", "rb").read()
hl = struct.unpack("<H", raw[8:10])[0]
vals = struct.unpack("<%df" % ((len(raw) - 10 - hl) // 4), raw[10 + hl:])
want = json.load(open(d + "/want.json"))
V = len(want[0])
mx = max(abs(v) for row in want for v in row)
diff = max(abs(vals[b * V + i] - want[b][i]) for b in range(len(want)) for i in range(V))
assert diff / mx < 1e-4, (diff, mx)
c = json.load(open(d + "/out.json"))["comm"]
assert c["mismatches"] == 0
PY
    echo "ok   $lay"
done
[ "$fail" -eq 0 ]
