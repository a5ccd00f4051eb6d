#!/usr/bin/env python3
"""Converts a Llama-architecture GGUF file (the test model, SmolLM2-135M-Instruct Q4_1) to a
Hugging Face checkpoint: config.json, safetensors weights (the GGUF tensors dequantised by the
`gguf` package, stored as f32 or rounded to bf16), tokenizer.json, tokenizer_config.json and
generation_config.json from the GGUF metadata.

    gguf_to_hf.py MODEL.gguf OUT_DIR --dtype f32|bf16 [--shards N]

GGUF `llama` files store Q and K with the rows of each head permuted for llama.cpp's
adjacent-pair RoPE; Hugging Face checkpoints rotate (i, i + d/2), so the permutation is undone
here, exactly as transformers' GGUF loader does."""

import argparse
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

from hf_layout import write_checkpoint, write_json


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def unpermute(w, heads):
    """Inverse of llama.cpp's `permute` of Q/K rows: adjacent pairs back to half-split."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


HF_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def tensors_of(reader, heads, kv_heads):
    out = {}
    for t in reader.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])  # GGUF lists the innermost dim first
        name = t.name
        if name == "token_embd.weight":
            out["model.embed_tokens.weight"] = w
        elif name == "output_norm.weight":
            out["model.norm.weight"] = w
        elif name == "output.weight":
            out["lm_head.weight"] = w
        elif name.startswith("blk."):
            _, layer, kind, suffix = name.split(".")
            if kind == "attn_q":
                w = unpermute(w, heads)
            elif kind == "attn_k":
                w = unpermute(w, kv_heads)
            out[f"model.layers.{layer}.{HF_NAMES[kind]}.{suffix}"] = w
        else:
            sys.exit(f"unexpected tensor {name}")
    return out


def tokenizer_files(reader):
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type", [1] * len(tokens))
    merges = field(reader, "tokenizer.ggml.merges", [])
    pre = field(reader, "tokenizer.ggml.pre", "default")
    if field(reader, "tokenizer.ggml.model") != "gpt2" or pre not in ("smollm", "starcoder"):
        sys.exit("only byte-level (gpt2) tokenizers with the smollm pre-tokenizer are converted")
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        # SmolLM's split: every digit on its own, then GPT-2's byte-level words.
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": list(merges)},
    }
    bos = field(reader, "tokenizer.ggml.bos_token_id")
    eos = field(reader, "tokenizer.ggml.eos_token_id")
    config = {
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", False)),
        "bos_token": tokens[bos] if bos is not None else None,
        "eos_token": tokens[eos] if eos is not None else None,
        "chat_template": field(reader, "tokenizer.chat_template"),
        "model_max_length": int(field(reader, "llama.context_length")),
        "tokenizer_class": "GPT2Tokenizer",
    }
    generation = {"bos_token_id": bos, "eos_token_id": eos}
    return tokenizer, config, generation


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("gguf")
    p.add_argument("out")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--shards", type=int, default=1)
    args = p.parse_args()
    reader = GGUFReader(args.gguf)
    if field(reader, "general.architecture") != "llama":
        sys.exit("only llama-architecture GGUF files are converted")
    heads = int(field(reader, "llama.attention.head_count"))
    kv_heads = int(field(reader, "llama.attention.head_count_kv", heads))
    tensors = tensors_of(reader, heads, kv_heads)
    tokenizer, tok_config, generation = tokenizer_files(reader)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": int(field(reader, "llama.embedding_length")),
        "intermediate_size": int(field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": int(field(reader, "llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": float(field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(field(reader, "llama.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(field(reader, "llama.context_length")),
        "vocab_size": len(tokenizer["model"]["vocab"]),
        "hidden_act": "silu",
        "tie_word_embeddings": "lm_head.weight" not in tensors,
        "bos_token_id": generation["bos_token_id"],
        "eos_token_id": generation["eos_token_id"],
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[args.dtype],
    }
    write_checkpoint(args.out, tensors, args.dtype.upper(), args.shards)
    write_json(args.out, "config.json", config)
    write_json(args.out, "tokenizer.json", tokenizer)
    write_json(args.out, "tokenizer_config.json", tok_config)
    write_json(args.out, "generation_config.json", generation)
    print(json.dumps({"out": args.out, "tensors": len(tensors), "dtype": args.dtype}))


if __name__ == "__main__":
    main()
