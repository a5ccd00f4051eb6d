#!/usr/bin/env python3
"""An independent float64 forward pass of a Hugging Face Llama-family checkpoint (Llama 3.x,
Mistral, Qwen2, Qwen3), written from the architectures' definitions in transformers
(modeling_llama / modeling_qwen2 / modeling_qwen3, rope_utils) rather than from the engine's
code: RMSNorm, rotate-half RoPE with the `linear`, `llama3` and `yarn` frequency rules, grouped
query attention, Qwen2's q/k/v biases, Qwen3's per-head q/k RMSNorm, SwiGLU, tied or untied
output head.

    reference_forward.py CHECKPOINT_DIR --tokens N --seed S [--top 5] > reference.json
    reference_forward.py CHECKPOINT_DIR --ids 1,2,3 > reference.json
    reference_forward.py CHECKPOINT_DIR --lora ADAPTER_DIR --greedy 8 --prompts "1,2;3,4"

Feeds N seeded random token ids (or the given ones) and prints, for every position, the top-k
logits. `--lora` merges a PEFT adapter into the weights first (W + B A · alpha / r, in float64:
the reference for the engine's unmerged per-row deltas); `--greedy N --prompts` decodes N
tokens greedily after each prompt and prints, per prompt, the tokens and each step's top-k."""

import argparse
import json
import math
import os

import numpy as np

from hf_layout import read_checkpoint, read_safetensors


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def inv_freq_and_scale(c, head_dim):
    """transformers' rope_utils: the default, linear, llama3 and yarn parameter rules."""
    base = float(c.get("rope_theta", 10000.0))
    inv = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    rs = c.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return inv, 1.0
    factor = float(rs["factor"])
    if kind == "linear":
        return inv / factor, 1.0
    if kind == "llama3":
        low, high = float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        old = float(rs["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return np.where(medium, smoothed, scaled), 1.0
    if kind == "yarn":
        old = float(rs.get("original_max_position_embeddings") or c["max_position_embeddings"])
        fast, slow = float(rs.get("beta_fast") or 32), float(rs.get("beta_slow") or 1)
        attn = rs.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
        dim_of = lambda rot: head_dim * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = max(math.floor(dim_of(fast)), 0), min(math.ceil(dim_of(slow)), head_dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        extrapolation = 1 - ramp
        interp, extra = inv / factor, inv
        return interp * (1 - extrapolation) + extra * extrapolation, float(attn)
    raise SystemExit(f"rope type {kind} has no reference here")


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def merge_lora(w, adapter):
    """Adds a PEFT adapter's deltas to the weights `w`, in place."""
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        a = json.load(f)
    scale = a["lora_alpha"] / a["r"]
    t = read_safetensors(os.path.join(adapter, "adapter_model.safetensors"))
    for name in t:
        if ".lora_A." in name:
            target = name.replace("base_model.model.", "", 1).replace(".lora_A", "")
            w[target] = w[target] + scale * t[name.replace("lora_A", "lora_B")] @ t[name]


def forward(directory, tokens, w=None):
    with open(os.path.join(directory, "config.json")) as f:
        c = json.load(f)
    arch = c["architectures"][0]
    w = read_checkpoint(directory) if w is None else w
    h, heads = c["hidden_size"], c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads", heads)
    hd = c.get("head_dim") or h // heads
    eps = float(c["rms_norm_eps"])
    group = heads // kv_heads
    n = len(tokens)
    inv, scale = inv_freq_and_scale(c, hd)
    angles = np.outer(np.arange(n, dtype=np.float64), inv)  # [n, hd/2]
    emb = np.concatenate([angles, angles], axis=-1)
    cos, sin = np.cos(emb) * scale, np.sin(emb) * scale  # [n, hd]
    rope = lambda x: x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]
    mask = np.triu(np.full((n, n), -np.inf), k=1)
    x = w["model.embed_tokens.weight"][tokens]  # [n, h]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        a = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        proj = {}
        for name, width in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
            y = a @ w[p + f"self_attn.{name}_proj.weight"].T
            bias = w.get(p + f"self_attn.{name}_proj.bias")
            if bias is not None:
                y = y + bias
            proj[name] = y.reshape(n, width, hd)
        q, k, v = proj["q"], proj["k"], proj["v"]
        if arch == "Qwen3ForCausalLM":
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q), rope(k)
        out = np.empty((n, heads, hd))
        for head in range(heads):
            kh = head // group
            scores = q[:, head, :] @ k[:, kh, :].T / math.sqrt(hd) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            out[:, head, :] = (scores / scores.sum(axis=-1, keepdims=True)) @ v[:, kh, :]
        x = x + out.reshape(n, heads * hd) @ w[p + "self_attn.o_proj.weight"].T
        m = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = m @ w[p + "mlp.gate_proj.weight"].T
        up = m @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T  # [n, vocab]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--ids", help="comma-separated token ids to feed instead of random ones")
    p.add_argument("--lora", help="a PEFT adapter folder to merge into the weights")
    p.add_argument("--greedy", type=int, help="tokens to decode after each of --prompts")
    p.add_argument("--prompts", help="prompts as comma-separated ids, separated by ';'")
    args = p.parse_args()
    if args.greedy:
        return greedy(args)
    with open(os.path.join(args.checkpoint, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    if args.ids:
        tokens = [int(t) for t in args.ids.split(",")]
    else:
        tokens = np.random.default_rng(args.seed).integers(0, vocab, args.tokens).tolist()
    logits = forward(args.checkpoint, tokens)
    top = np.argsort(-logits, axis=-1, kind="stable")[:, :args.top]
    print(json.dumps({
        "tokens": tokens,
        "top": top.tolist(),
        "top_logits": np.take_along_axis(logits, top, axis=-1).tolist(),
    }))


def greedy(args):
    """Per prompt: greedy tokens and each step's top-k, under the merged adapter if any."""
    w = read_checkpoint(args.checkpoint)
    if args.lora:
        merge_lora(w, args.lora)
    out = []
    for prompt in args.prompts.split(";"):
        tokens, tops, top_logits = [int(t) for t in prompt.split(",")], [], []
        for _ in range(args.greedy):
            last = forward(args.checkpoint, tokens, w)[-1]
            top = np.argsort(-last, kind="stable")[:args.top]
            tops.append(top.tolist())
            top_logits.append(last[top].tolist())
            tokens.append(int(top[0]))
        out.append({"tokens": tokens, "top": tops, "top_logits": top_logits})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
