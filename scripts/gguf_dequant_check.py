#!/usr/bin/env python3
"""Dequantises every tensor of a GGUF file with PyPI `gguf` (gguf.quants.dequantize, numpy)
and prints one JSON line per tensor: name, type, element count, the SHA-256 of the float32
values (little-endian bytes) and the first values. The engine's tests compare these with
their own dequantisation, bit for bit.

Usage: gguf_dequant_check.py FILE.gguf
"""
import hashlib
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main() -> None:
    reader = GGUFReader(sys.argv[1])
    for t in reader.tensors:
        values = dequantize(t.data, t.tensor_type).astype("<f4").reshape(-1)
        print(json.dumps({
            "name": t.name,
            "type": t.tensor_type.name,
            "elements": int(values.size),
            "sha256": hashlib.sha256(values.tobytes()).hexdigest(),
            "head": [float(v) for v in values[:4]],
        }))


if __name__ == "__main__":
    main()
