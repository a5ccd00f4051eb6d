"""Writing checkpoints in the Hugging Face layout with NumPy only: safetensors files (the format
is a little-endian u64 header length, a JSON header, then the raw tensors), sharded with an
index when asked, and the JSON files beside them. No torch, no transformers: the engine's
reader is checked against files written from the format's definition."""

import json
import os

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16}


def to_bf16_bits(x):
    """float32 array -> uint16 bfloat16 bits, rounded to nearest even (NaN-free inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = u + 0x7FFF + ((u >> 16) & 1)
    return (u >> 16).astype(np.uint16)


def from_bf16_bits(bits):
    """uint16 bfloat16 bits -> float32 values."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def encode(x, dtype):
    """The bytes of `x` stored as `dtype` ("F32", "F16" or "BF16")."""
    if dtype == "BF16":
        return to_bf16_bits(x).tobytes()
    return np.ascontiguousarray(x, dtype=DTYPES[dtype]).tobytes()


def write_safetensors(path, tensors, dtype):
    """Writes {name: float array} to `path`, every tensor stored as `dtype`."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = encode(tensors[name], dtype)
        header[name] = {
            "dtype": dtype,
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for data in blobs:
            f.write(data)


def write_checkpoint(out, tensors, dtype, shards=1):
    """model.safetensors, or `shards` files and model.safetensors.index.json."""
    os.makedirs(out, exist_ok=True)
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors, dtype)
        return
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(out, file), {n: tensors[n] for n in part}, dtype)
        weight_map.update({n: file for n in part})
    total = sum(len(encode(t, dtype)) for t in tensors.values())
    write_json(out, "model.safetensors.index.json",
               {"metadata": {"total_size": total}, "weight_map": weight_map})


def write_json(out, name, value):
    with open(os.path.join(out, name), "w") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


def read_safetensors(path):
    """{name: float64 array} of one safetensors file (any of F32, F16, BF16)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        buf = raw[base + start:base + end]
        if info["dtype"] == "BF16":
            values = from_bf16_bits(np.frombuffer(buf, dtype=np.uint16))
        else:
            values = np.frombuffer(buf, dtype=DTYPES[info["dtype"]])
        out[name] = values.astype(np.float64).reshape(info["shape"])
    return out


def read_checkpoint(directory):
    """{name: float64 array} of every shard of a checkpoint directory."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for file in files:
        tensors.update(read_safetensors(os.path.join(directory, file)))
    return tensors


def byte_level_tokenizer(specials):
    """tokenizer.json of a byte-level BPE over the 256 bytes (no merges), with `specials` as
    added special tokens after them."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    alphabet = {b: chr(c) for b, c in zip(bs, cs)}
    vocab = {alphabet[b]: b for b in range(256)}
    added = [{"id": 256 + i, "content": t, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, t in enumerate(specials)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
