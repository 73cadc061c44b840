#!/usr/bin/python3
"""Golden outputs for shardplan's executor from an independent implementation.

Writes, for each architecture and variant below, a tiny random checkpoint in
Hugging Face's layout (config.json + model.safetensors, float16 weights) and
the greedy continuation of fixed prompt ids computed here with PyTorch in
float64, following the published transformers semantics of each family:
rotate_half RoPE with each rope_type's frequencies, repeat_kv for grouped
KV heads, RMSNorm/LayerNorm eps inside the root, tied heads, GPT-2's Conv1D
(in, out) weights, GPT-NeoX's per-head fused q|k|v and partial rotary, and
Mixtral's sparse MoE block (softmax router, top-k, renormalised; experts'
w1 gate, w3 up, w2 down) and Qwen2-MoE's (top-k not renormalised, a shared
expert behind a sigmoid gate, dense layers between sparse ones by
decoder_sparse_step).

    /usr/bin/python3 tests/ref/gen_golden.py OUTDIR

Per variant OUTDIR/<name>/: config.json, model.safetensors, prompt_ids.txt
(one sequence per line), golden_tokens.txt (the generated ids, one sequence
per line) and golden_logits.npy (float32, steps x batch x vocab: the logits
each generated token was chosen from).  Only PyTorch is needed (Debian's
python3-torch); make check compares against the committed files in C.
"""
import json
import math
import os
import struct
import sys

import torch

T = torch.float64
B, P, G = 2, 5, 4               # sequences, prompt tokens, generated tokens
E, H, KVH, D, F, L, V = 32, 4, 2, 8, 64, 2, 64
NPOS = 64


# ---- files ----------------------------------------------------------------------
def write_safetensors(path, tensors):
    """tensors: name -> float tensor; stored as F16 in safetensors' layout."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float16).contiguous()
        vals = t.flatten().tolist()
        data = struct.pack("<%de" % len(vals), *vals)
        header[name] = {"dtype": "F16", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_npy(path, t):
    t = t.to(torch.float32).contiguous()
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join("%d, " % s for s in t.shape)
    hdr += " " * (-(10 + len(hdr) + 1) % 64) + "\n"
    vals = t.flatten().tolist()
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.write(struct.pack("<%df" % len(vals), *vals))


# ---- building blocks, as transformers computes them ---------------------------------
def act_fn(name):
    if name in ("silu", "swish"):
        return torch.nn.functional.silu
    if name == "gelu":
        return lambda x: torch.nn.functional.gelu(x)
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "relu":
        return torch.relu
    raise ValueError(name)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def layer_norm(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_inv_freq(cfg, dim, seq_len):
    """transformers' ROPE_INIT_FUNCTIONS for each rope_type: (inv_freq, attention scaling)."""
    base = cfg.get("rope_theta", cfg.get("rotary_emb_base", 10000.0))
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=T) / dim))
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return inv, 1.0
    factor = rs["factor"]
    if kind == "linear":
        return inv / factor, 1.0
    if kind == "dynamic":
        orig = cfg["max_position_embeddings"]
        if seq_len > orig:
            base = base * ((factor * seq_len / orig) - (factor - 1)) ** (dim / (dim - 2))
            inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=T) / dim))
        return inv, 1.0
    if kind == "llama3":
        lo, hi, old = rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0), rs["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        out = torch.where(wl > lo_wl, inv / factor, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wl < hi_wl) * ~(wl > lo_wl)
        return torch.where(medium, smoothed, out), 1.0
    if kind == "yarn":
        orig = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
        attn = rs.get("attention_factor") or (1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0)
        bf, bs = rs.get("beta_fast", 32), rs.get("beta_slow", 1)

        def corr_dim(rot):
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))
        low, high = max(math.floor(corr_dim(bf)), 0), min(math.ceil(corr_dim(bs)), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=T) - low) / (high - low), 0, 1)
        extra = 1 - ramp
        pos_freqs = base ** (torch.arange(0, dim, 2, dtype=T) / dim)
        inv = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
        return inv, attn
    raise ValueError(kind)


def apply_rope(q, k, cfg, rot):
    """q (B, H, L, D), k (B, KVH, L, D); rotate the first rot dims (rotate_half)."""
    Ls = q.shape[2]
    inv, scale = rope_inv_freq(cfg, rot, Ls)
    freqs = torch.arange(Ls, dtype=T)[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * scale, emb.sin() * scale
    def one(x):
        xr, xp = x[..., :rot], x[..., rot:]
        return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)
    return one(q), one(k)


def attention(q, k, v):
    """q (B, H, L, D), k/v (B, KVH, L, D): repeat_kv, causal softmax(q k^T / sqrt(D)) v."""
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    Ls = q.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.triu(torch.ones(Ls, Ls, dtype=torch.bool), 1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return o.transpose(1, 2).reshape(q.shape[0], Ls, -1)


# ---- families --------------------------------------------------------------------
def heads(x, n):
    return x.view(x.shape[0], x.shape[1], n, -1).transpose(1, 2)


def linear(w, x, n):
    """x @ W^T (+ bias where the checkpoint has one): a torch.nn.Linear named n"""
    return x @ w[n + ".weight"].T + (w[n + ".bias"] if n + ".bias" in w else 0)


def llama_mlp(cfg, w, p, x):
    """LlamaMLP: down(act(gate x) * up x)"""
    act = act_fn(cfg.get("hidden_act", "silu"))
    return linear(w, act(linear(w, x, p + "mlp.gate_proj")) * linear(w, x, p + "mlp.up_proj"), p + "mlp.down_proj")


def llama_forward(cfg, w, ids, ffn=llama_mlp):
    """Llama, Mistral, Qwen2; Mixtral with ffn = mixtral_moe (the same blocks around another FFN)"""
    eps, nh, nkv = cfg["rms_norm_eps"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    lin = lambda x, n: linear(w, x, n)
    h = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q, k, v = heads(lin(x, p + "self_attn.q_proj"), nh), heads(lin(x, p + "self_attn.k_proj"), nkv), \
            heads(lin(x, p + "self_attn.v_proj"), nkv)
        q, k = apply_rope(q, k, cfg, q.shape[-1])
        h = h + lin(attention(q, k, v), p + "self_attn.o_proj")
        h = h + ffn(cfg, w, p, rms_norm(h, w[p + "post_attention_layernorm.weight"], eps))
    h = rms_norm(h, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return h @ head.T


def mixtral_moe(cfg, w, p, x):
    """transformers' MixtralSparseMoeBlock: softmax over the router logits, the
    top num_experts_per_tok, renormalised; each expert w2(act(w1 x) * w3 x)."""
    act = act_fn(cfg.get("hidden_act", "silu"))
    ne, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    probs = torch.softmax(x @ w[p + "block_sparse_moe.gate.weight"].T, dim=-1)
    top, idx = probs.topk(k, dim=-1)
    top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(ne):
        q = p + "block_sparse_moe.experts.%d." % e
        y = (act(x @ w[q + "w1.weight"].T) * (x @ w[q + "w3.weight"].T)) @ w[q + "w2.weight"].T
        out = out + y * (top * (idx == e)).sum(-1, keepdim=True)
    return out


def mixtral_forward(cfg, w, ids):
    return llama_forward(cfg, w, ids, mixtral_moe)


def qwen2_moe_sparse(cfg, layer):
    """transformers' Qwen2MoeDecoderLayer: a sparse block unless the layer is in
    mlp_only_layers, or (layer + 1) is no multiple of decoder_sparse_step"""
    step = cfg.get("decoder_sparse_step", 1)
    return layer not in cfg.get("mlp_only_layers", []) and cfg["num_experts"] > 0 and (layer + 1) % step == 0


def qwen2_moe_block(cfg, w, p, x):
    """transformers' Qwen2MoeSparseMoeBlock: softmax over the router logits
    (mlp.gate), the top num_experts_per_tok, renormalised only with
    norm_topk_prob; each expert down(act(gate x) * up x); plus the shared
    expert (the same MLP, shared_expert_intermediate_size wide) times
    sigmoid(shared_expert_gate x).  A dense layer: Qwen2MoeMLP of
    intermediate_size (mlp.gate_proj, up_proj, down_proj)."""
    if not qwen2_moe_sparse(cfg, int(p.split(".")[2])):
        return llama_mlp(cfg, w, p, x)
    act = act_fn(cfg.get("hidden_act", "silu"))
    ne, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    probs = torch.softmax(x @ w[p + "mlp.gate.weight"].T, dim=-1)
    top, idx = probs.topk(k, dim=-1)
    if cfg.get("norm_topk_prob", False):
        top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(ne):
        q = p + "mlp.experts.%d." % e
        y = linear(w, act(linear(w, x, q + "gate_proj")) * linear(w, x, q + "up_proj"), q + "down_proj")
        out = out + y * (top * (idx == e)).sum(-1, keepdim=True)
    q = p + "mlp.shared_expert."
    sh = linear(w, act(linear(w, x, q + "gate_proj")) * linear(w, x, q + "up_proj"), q + "down_proj")
    return out + torch.sigmoid(linear(w, x, p + "mlp.shared_expert_gate")) * sh


def qwen2_moe_forward(cfg, w, ids):
    return llama_forward(cfg, w, ids, qwen2_moe_block)


def gpt2_forward(cfg, w, ids):
    eps, nh = cfg["layer_norm_epsilon"], cfg["n_head"]
    act = act_fn(cfg.get("activation_function", "gelu_new"))
    conv = lambda x, n: x @ w[n + ".weight"] + w[n + ".bias"]   # Conv1D: weight (in, out)
    h = w["wte.weight"][ids] + w["wpe.weight"][torch.arange(ids.shape[1])]
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        x = layer_norm(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        q, k, v = conv(x, p + "attn.c_attn").split(cfg["n_embd"], dim=-1)
        h = h + conv(attention(heads(q, nh), heads(k, nh), heads(v, nh)), p + "attn.c_proj")
        x = layer_norm(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = h + conv(act(conv(x, p + "mlp.c_fc")), p + "mlp.c_proj")
    h = layer_norm(h, w["ln_f.weight"], w["ln_f.bias"], eps)
    head = w["wte.weight"] if cfg.get("tie_word_embeddings", True) else w["lm_head.weight"]
    return h @ head.T


def neox_forward(cfg, w, ids):
    eps, nh = cfg["layer_norm_eps"], cfg["num_attention_heads"]
    d = cfg["hidden_size"] // nh
    rot = int(d * cfg.get("rotary_pct", 0.25))
    act = act_fn(cfg.get("hidden_act", "gelu"))
    lin = lambda x, n: x @ w[n + ".weight"].T + (w[n + ".bias"] if n + ".bias" in w else 0)
    h = w["gpt_neox.embed_in.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = "gpt_neox.layers.%d." % i
        x = layer_norm(h, w[p + "input_layernorm.weight"], w[p + "input_layernorm.bias"], eps)
        qkv = lin(x, p + "attention.query_key_value")
        qkv = qkv.view(qkv.shape[0], qkv.shape[1], nh, 3 * d).transpose(1, 2)   # per head q | k | v
        q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
        q, k = apply_rope(q, k, cfg, rot)
        a = lin(attention(q, k, v), p + "attention.dense")
        if cfg.get("use_parallel_residual", True):
            x2 = layer_norm(h, w[p + "post_attention_layernorm.weight"], w[p + "post_attention_layernorm.bias"], eps)
            h = h + a + lin(act(lin(x2, p + "mlp.dense_h_to_4h")), p + "mlp.dense_4h_to_h")
        else:
            h = h + a
            x2 = layer_norm(h, w[p + "post_attention_layernorm.weight"], w[p + "post_attention_layernorm.bias"], eps)
            h = h + lin(act(lin(x2, p + "mlp.dense_h_to_4h")), p + "mlp.dense_4h_to_h")
    h = layer_norm(h, w["gpt_neox.final_layer_norm.weight"], w["gpt_neox.final_layer_norm.bias"], eps)
    head = w["gpt_neox.embed_in.weight"] if cfg.get("tie_word_embeddings") else w["embed_out.weight"]
    return h @ head.T


# ---- random checkpoints ------------------------------------------------------------
def rnd(gen, *shape, scale=None):
    fan_in = shape[-1] if len(shape) > 1 else 1
    s = scale if scale is not None else 1.0 / math.sqrt(fan_in)
    return torch.randn(*shape, generator=gen, dtype=T) * s


def layer_norms_attn(w, gen, p, nh, nkv, e, d, bias):
    """one Llama-family layer's two norms and attention projections, in this order (each variant's random
    stream depends on it); bias(n): whether projection n ("q", "k", "v", "o") carries a bias"""
    w[p + "input_layernorm.weight"] = 1 + 0.1 * rnd(gen, e, scale=1.0)
    w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rnd(gen, e, scale=1.0)
    for n, o, i_ in (("q", nh * d, e), ("k", nkv * d, e), ("v", nkv * d, e), ("o", e, nh * d)):
        w[p + "self_attn.%s_proj.weight" % n] = rnd(gen, o, i_)
        if bias(n):
            w[p + "self_attn.%s_proj.bias" % n] = rnd(gen, o, scale=0.5)


def llama_weights(cfg, gen):
    nh, nkv, e, f = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"], cfg["intermediate_size"]
    d = e // nh
    w = {"model.embed_tokens.weight": rnd(gen, V, e, scale=1.0), "model.norm.weight": 1 + 0.1 * rnd(gen, e, scale=1.0)}
    if not cfg.get("tie_word_embeddings"):
        w["lm_head.weight"] = rnd(gen, V, e, scale=1.0)
    ab = cfg.get("attention_bias", False)
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        layer_norms_attn(w, gen, p, nh, nkv, e, d, lambda n: ab or (cfg["model_type"] == "qwen2" and n != "o"))
        for n, o, i_ in (("gate", f, e), ("up", f, e), ("down", e, f)):
            w[p + "mlp.%s_proj.weight" % n] = rnd(gen, o, i_)
            if cfg.get("mlp_bias"):
                w[p + "mlp.%s_proj.bias" % n] = rnd(gen, o, scale=0.5)
    return w


def mixtral_weights(cfg, gen):
    nh, nkv, e, f = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"], cfg["intermediate_size"]
    d = e // nh
    w = {"model.embed_tokens.weight": rnd(gen, V, e, scale=1.0), "model.norm.weight": 1 + 0.1 * rnd(gen, e, scale=1.0),
         "lm_head.weight": rnd(gen, V, e, scale=1.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        layer_norms_attn(w, gen, p, nh, nkv, e, d, lambda n: False)
        w[p + "block_sparse_moe.gate.weight"] = rnd(gen, cfg["num_local_experts"], e)
        for x in range(cfg["num_local_experts"]):
            for n, o, i_ in (("w1", f, e), ("w3", f, e), ("w2", e, f)):
                w[p + "block_sparse_moe.experts.%d.%s.weight" % (x, n)] = rnd(gen, o, i_)
    return w


def qwen2_moe_weights(cfg, gen):
    nh, nkv, e = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    f, fm, fs, ne = cfg["intermediate_size"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"], \
        cfg["num_experts"]
    d = e // nh
    w = {"model.embed_tokens.weight": rnd(gen, V, e, scale=1.0), "model.norm.weight": 1 + 0.1 * rnd(gen, e, scale=1.0),
         "lm_head.weight": rnd(gen, V, e, scale=1.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        layer_norms_attn(w, gen, p, nh, nkv, e, d, lambda n: n != "o")   # Qwen2: q, k and v carry biases
        if not qwen2_moe_sparse(cfg, i):
            for n, o, i_ in (("gate", f, e), ("up", f, e), ("down", e, f)):
                w[p + "mlp.%s_proj.weight" % n] = rnd(gen, o, i_)
            continue
        w[p + "mlp.gate.weight"] = rnd(gen, ne, e)
        for x in range(ne):
            for n, o, i_ in (("gate", fm, e), ("up", fm, e), ("down", e, fm)):
                w[p + "mlp.experts.%d.%s_proj.weight" % (x, n)] = rnd(gen, o, i_)
        for n, o, i_ in (("gate", fs, e), ("up", fs, e), ("down", e, fs)):
            w[p + "mlp.shared_expert.%s_proj.weight" % n] = rnd(gen, o, i_)
        w[p + "mlp.shared_expert_gate.weight"] = rnd(gen, 1, e)
    return w


def gpt2_weights(cfg, gen):
    e, f = cfg["n_embd"], cfg["n_inner"]
    w = {"wte.weight": rnd(gen, V, e, scale=1.0), "wpe.weight": rnd(gen, cfg["n_positions"], e, scale=0.5),
         "ln_f.weight": 1 + 0.1 * rnd(gen, e, scale=1.0), "ln_f.bias": rnd(gen, e, scale=0.1)}
    if not cfg.get("tie_word_embeddings", True):
        w["lm_head.weight"] = rnd(gen, V, e, scale=1.0)
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        for n in ("ln_1", "ln_2"):
            w[p + n + ".weight"] = 1 + 0.1 * rnd(gen, e, scale=1.0)
            w[p + n + ".bias"] = rnd(gen, e, scale=0.1)
        for n, i_, o in (("attn.c_attn", e, 3 * e), ("attn.c_proj", e, e), ("mlp.c_fc", e, f), ("mlp.c_proj", f, e)):
            w[p + n + ".weight"] = rnd(gen, i_, o, scale=1.0 / math.sqrt(i_))   # Conv1D: (in, out)
            w[p + n + ".bias"] = rnd(gen, o, scale=0.5)
    return w


def neox_weights(cfg, gen):
    e, f = cfg["hidden_size"], cfg["intermediate_size"]
    w = {"gpt_neox.embed_in.weight": rnd(gen, V, e, scale=1.0), "embed_out.weight": rnd(gen, V, e, scale=1.0),
         "gpt_neox.final_layer_norm.weight": 1 + 0.1 * rnd(gen, e, scale=1.0),
         "gpt_neox.final_layer_norm.bias": rnd(gen, e, scale=0.1)}
    for i in range(cfg["num_hidden_layers"]):
        p = "gpt_neox.layers.%d." % i
        for n in ("input_layernorm", "post_attention_layernorm"):
            w[p + n + ".weight"] = 1 + 0.1 * rnd(gen, e, scale=1.0)
            w[p + n + ".bias"] = rnd(gen, e, scale=0.1)
        for n, o, i_ in (("attention.query_key_value", 3 * e, e), ("attention.dense", e, e),
                         ("mlp.dense_h_to_4h", f, e), ("mlp.dense_4h_to_h", e, f)):
            w[p + n + ".weight"] = rnd(gen, o, i_)
            w[p + n + ".bias"] = rnd(gen, o, scale=0.5)
    return w


LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": E, "intermediate_size": F,
         "num_attention_heads": H, "num_key_value_heads": KVH, "num_hidden_layers": L, "vocab_size": V,
         "max_position_embeddings": NPOS, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
         "tie_word_embeddings": False, "torch_dtype": "float16"}
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": E, "n_layer": L, "n_head": H,
        "n_inner": F, "n_positions": NPOS, "vocab_size": V, "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new", "torch_dtype": "float16"}
NEOX = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": E, "intermediate_size": F,
        "num_attention_heads": H, "num_hidden_layers": L, "vocab_size": V, "max_position_embeddings": NPOS,
        "layer_norm_eps": 1e-5, "rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True,
        "hidden_act": "gelu", "tie_word_embeddings": False, "torch_dtype": "float16"}

VARIANTS = {
    "llama": (LLAMA, {}),
    "llama-bias-tied": (LLAMA, {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True,
                                "hidden_act": "gelu", "rms_norm_eps": 1e-5, "rope_theta": 500000.0}),
    "llama-rope-linear": (LLAMA, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "hidden_act": "relu"}),
    "llama-rope-dynamic": (LLAMA, {"rope_scaling": {"type": "dynamic", "factor": 2.0}}),
    "llama-rope-llama3": (LLAMA, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                                  "hidden_act": "gelu_pytorch_tanh"}),
    "llama-rope-yarn": (LLAMA, {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                 "original_max_position_embeddings": 16}}),
    "mistral": (LLAMA, {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": 4096}),
    "qwen2": (LLAMA, {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "tie_word_embeddings": True,
                      "use_sliding_window": False, "sliding_window": 4}),
    "gpt2": (GPT2, {}),
    "gpt2-untied-gelu": (GPT2, {"activation_function": "gelu", "tie_word_embeddings": False}),
    "neox": (NEOX, {}),
    "neox-serial": (NEOX, {"use_parallel_residual": False, "rotary_pct": 0.5, "rope_scaling": {"type": "linear", "factor": 2.0}}),
    "mixtral": (LLAMA, {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4,
                        "num_experts_per_tok": 2, "sliding_window": None}),
    "qwen2-moe": (LLAMA, {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "num_experts": 4,
                          "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                          "shared_expert_intermediate_size": 48, "norm_topk_prob": False,
                          "use_sliding_window": False, "sliding_window": None}),
    # sparse every other layer (decoder_sparse_step 2: layers 1 and 3), dense MLPs of intermediate_size between
    "qwen2-moe-step2": (LLAMA, {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "num_experts": 4,
                                "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                "shared_expert_intermediate_size": 48, "norm_topk_prob": True,
                                "decoder_sparse_step": 2, "num_hidden_layers": 4, "intermediate_size": 80,
                                "use_sliding_window": False, "sliding_window": None}),
}
# each variant's random stream: fixed, so that adding a variant changes no other's files (a variant
# added after the first set takes its own base here)
ADDED = {"mixtral": 100, "qwen2-moe": 101, "qwen2-moe-step2": 102}
SEED_BASE = {name: i for i, name in enumerate(sorted(n for n in VARIANTS if n not in ADDED))}
SEED_BASE.update(ADDED)
FAMILY = {"llama": (llama_weights, llama_forward), "mistral": (llama_weights, llama_forward),
          "qwen2": (llama_weights, llama_forward), "gpt2": (gpt2_weights, gpt2_forward),
          "gpt_neox": (neox_weights, neox_forward), "mixtral": (mixtral_weights, mixtral_forward),
          "qwen2_moe": (qwen2_moe_weights, qwen2_moe_forward)}


def greedy(cfg, w, prompt):
    fwd = FAMILY[cfg["model_type"]][1]
    ids, steps = prompt.clone(), []
    for _ in range(G):
        lg = fwd(cfg, w, ids)[:, -1, :]     # (B, V): the whole sequence again (no cache)
        top = lg.topk(2, dim=-1).values
        gap = float((top[:, 0] - top[:, 1]).min())
        steps.append(lg)
        ids = torch.cat((ids, lg.argmax(-1, keepdim=True)), dim=1)
    return ids[:, prompt.shape[1]:], torch.stack(steps), gap


def main(out):
    for name, (base, over) in sorted(VARIANTS.items()):
        cfg = dict(base, **over)
        for seed in range(100):
            gen = torch.Generator().manual_seed(1000 * SEED_BASE[name] + seed)
            w16 = FAMILY[cfg["model_type"]][0](cfg, gen)
            # the checkpoint holds float16: compute with exactly those values
            w = {k: v.to(torch.float16).to(T) for k, v in w16.items()}
            prompt = torch.randint(0, V, (B, P), generator=gen)
            toks, logits, gap = greedy(cfg, w, prompt)
            if gap > 1e-2:   # greedy picks far from ties: tokens are a fair test at 1e-4
                break
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1, sort_keys=True)
            f.write("\n")
        write_safetensors(os.path.join(d, "model.safetensors"), w)
        with open(os.path.join(d, "prompt_ids.txt"), "w") as f:
            f.writelines(" ".join(str(int(t)) for t in row) + "\n" for row in prompt)
        with open(os.path.join(d, "golden_tokens.txt"), "w") as f:
            f.writelines(" ".join(str(int(t)) for t in row) + "\n" for row in toks)
        write_npy(os.path.join(d, "golden_logits.npy"), logits)
        print("%-20s seed %d, smallest top-2 gap %.3g" % (name, seed, gap))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
