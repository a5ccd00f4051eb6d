#!/usr/bin/env python3
"""Tiny random-weight checkpoints, one per architecture feature the engine implements, in the
Hugging Face layout (config.json, safetensors, a byte-level tokenizer with ChatML):

  llama31  LlamaForCausalLM, `llama3` RoPE scaling (original context 32, so positions past 32
           take the scaled frequencies), untied embeddings, bf16
  qwen2    Qwen2ForCausalLM: q/k/v biases, tied embeddings, f32, two shards with an index
  qwen3    Qwen3ForCausalLM: q/k RMSNorm, head size 32 on a width of 64 (q is 128 wide),
           `yarn` RoPE scaling, untied, bf16
  mistral  MistralForCausalLM: `linear` RoPE scaling, f16

    tiny_models.py OUT_DIR     (writes OUT_DIR/NAME for each; same output on every run)"""

import os
import sys

import numpy as np

from hf_layout import byte_level_tokenizer, write_checkpoint, write_json

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 256 + len(SPECIALS)
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

MODELS = {
    "llama31": dict(arch="LlamaForCausalLM", hidden=64, heads=4, kv_heads=2, head_dim=16,
                    ffn=96, layers=2, theta=10000.0, tied=False, dtype="BF16", shards=1,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 32},
                    max_pos=256),
    "qwen2": dict(arch="Qwen2ForCausalLM", hidden=64, heads=4, kv_heads=2, head_dim=16,
                  ffn=128, layers=2, theta=1000000.0, tied=True, dtype="F32", shards=2,
                  rope_scaling=None, max_pos=128),
    "qwen3": dict(arch="Qwen3ForCausalLM", hidden=64, heads=4, kv_heads=2, head_dim=32,
                  ffn=96, layers=2, theta=10000.0, tied=False, dtype="BF16", shards=1,
                  rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                "original_max_position_embeddings": 32},
                  max_pos=128),
    "mistral": dict(arch="MistralForCausalLM", hidden=64, heads=4, kv_heads=1, head_dim=16,
                    ffn=64, layers=2, theta=10000.0, tied=False, dtype="F16", shards=1,
                    rope_scaling={"type": "linear", "factor": 2.0}, max_pos=64),
}


def make(out, name, m, rng):
    h, hd, f = m["hidden"], m["head_dim"], m["ffn"]
    q, kv = m["heads"] * hd, m["kv_heads"] * hd
    mat = lambda rows, cols: rng.normal(0.0, 1.0 / np.sqrt(cols), (rows, cols))
    norm = lambda n: 1.0 + 0.1 * rng.normal(size=n)
    t = {"model.embed_tokens.weight": rng.normal(0.0, 1.0, (VOCAB, h)),
         "model.norm.weight": norm(h)}
    if not m["tied"]:
        t["lm_head.weight"] = mat(VOCAB, h)
    for l in range(m["layers"]):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = norm(h)
        t[p + "post_attention_layernorm.weight"] = norm(h)
        t[p + "self_attn.q_proj.weight"] = mat(q, h)
        t[p + "self_attn.k_proj.weight"] = mat(kv, h)
        t[p + "self_attn.v_proj.weight"] = mat(kv, h)
        t[p + "self_attn.o_proj.weight"] = mat(h, q)
        t[p + "mlp.gate_proj.weight"] = mat(f, h)
        t[p + "mlp.up_proj.weight"] = mat(f, h)
        t[p + "mlp.down_proj.weight"] = mat(h, f)
        if m["arch"] == "Qwen2ForCausalLM":
            for proj, n in (("q", q), ("k", kv), ("v", kv)):
                t[p + f"self_attn.{proj}_proj.bias"] = 0.5 * rng.normal(size=n)
        if m["arch"] == "Qwen3ForCausalLM":
            t[p + "self_attn.q_norm.weight"] = norm(hd)
            t[p + "self_attn.k_norm.weight"] = norm(hd)
    config = {
        "architectures": [m["arch"]],
        "hidden_size": h, "intermediate_size": f, "num_hidden_layers": m["layers"],
        "num_attention_heads": m["heads"], "num_key_value_heads": m["kv_heads"],
        "head_dim": hd, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "rope_theta": m["theta"], "rope_scaling": m["rope_scaling"],
        "max_position_embeddings": m["max_pos"], "vocab_size": VOCAB,
        "tie_word_embeddings": m["tied"], "bos_token_id": 256, "eos_token_id": 258,
        "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[m["dtype"]],
    }
    if m["arch"] == "Qwen3ForCausalLM":
        config["attention_bias"] = False
        config["use_sliding_window"] = False
    d = os.path.join(out, name)
    write_checkpoint(d, t, m["dtype"], m["shards"])
    write_json(d, "config.json", config)
    write_json(d, "tokenizer.json", byte_level_tokenizer(SPECIALS))
    write_json(d, "tokenizer_config.json", {
        "bos_token": None, "eos_token": "<|im_end|>", "chat_template": CHATML,
        "add_bos_token": False})
    write_json(d, "generation_config.json", {"eos_token_id": [258, 256]})


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rng = np.random.default_rng(20240917)
    for name, m in MODELS.items():
        make(sys.argv[1], name, m, rng)
    print(" ".join(MODELS))


if __name__ == "__main__":
    main()
