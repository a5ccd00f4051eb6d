#!/usr/bin/env python3
"""PEFT LoRA adapters for a Hugging Face checkpoint, random and seeded, in PEFT's own layout
(adapter_config.json + adapter_model.safetensors with `base_model.model.model.layers.L.
{self_attn,mlp}.M.lora_{A,B}.weight`), and broken ones the engine must refuse:

    make_lora.py BASE_DIR OUT_DIR --seed S [--rank 8] [--alpha 16]
                 [--targets q_proj,v_proj,...] [--dtype F32|BF16]
                 [--break wrong-rank|missing-tensor|other-base]

`wrong-rank` says r=R+4 in the config for tensors of rank R; `missing-tensor` leaves out one
lora_B; `other-base` writes tensors for a model twice as wide, naming another base. The
deltas are large enough that the adapter's greedy tokens differ from the base's."""

import argparse
import json
import os

import numpy as np

from hf_layout import write_json, write_safetensors

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def module_dims(c):
    """(in, out) of each target module of the base config."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads", heads)
    hd = c.get("head_dim") or h // heads
    q, kv, f = heads * hd, kv_heads * hd, c["intermediate_size"]
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}


def make(base, out, seed, rank, alpha, targets, dtype, broken=None):
    with open(os.path.join(base, "config.json")) as f:
        c = json.load(f)
    dims = module_dims(c)
    widen = 2 if broken == "other-base" else 1
    rng = np.random.default_rng(seed)
    tensors = {}
    for l in range(c["num_hidden_layers"]):
        for m in targets:
            group = "self_attn" if m in MODULES[:4] else "mlp"
            p = f"base_model.model.model.layers.{l}.{group}.{m}"
            i, o = (d * widen for d in dims[m])
            tensors[p + ".lora_A.weight"] = rng.normal(0, 1 / np.sqrt(i), (rank, i))
            tensors[p + ".lora_B.weight"] = rng.normal(0, 0.1, (o, rank))
    if broken == "missing-tensor":
        del tensors[sorted(k for k in tensors if "lora_B" in k)[0]]
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "adapter_model.safetensors"),
                      {k: v.astype(np.float32) for k, v in tensors.items()}, dtype)
    write_json(out, "adapter_config.json", {
        "peft_type": "LORA", "task_type": "CAUSAL_LM",
        "base_model_name_or_path": "other/Base-270M" if broken == "other-base"
        else "HuggingFaceTB/SmolLM2-135M-Instruct",
        "r": rank + 4 if broken == "wrong-rank" else rank, "lora_alpha": alpha,
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
        "use_dora": False, "modules_to_save": None, "target_modules": targets,
    })


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base")
    p.add_argument("out")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--alpha", type=float, default=16.0)
    p.add_argument("--targets", default=",".join(MODULES))
    p.add_argument("--dtype", default="F32")
    p.add_argument("--break", dest="broken",
                   choices=["wrong-rank", "missing-tensor", "other-base"])
    a = p.parse_args()
    make(a.base, a.out, a.seed, a.rank, a.alpha, a.targets.split(","), a.dtype, a.broken)


if __name__ == "__main__":
    main()
