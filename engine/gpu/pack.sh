#!/usr/bin/env bash
# Prepares what engine/gpu/check.sh needs on the GPU machine, on a machine WITH the Rust
# toolchain (the GPU machine has none). Writes into .gpu/ at the repository root (ignored by
# git through .git/info/exclude):
#   .gpu/tokenscale-engine   stripped release binary (x86-64)
#   .gpu/model.part-aa       first 61 MiB of the SmolLM2 model file
#   .gpu/model.part-ab       the rest
#   .gpu/model.sha256        checksum of the whole model file
#   .gpu/tiny/               the tiny random-weight checkpoints of scripts/checkpoints
#                            (Llama 3.1 llama3-RoPE, Qwen2 biases, Qwen3 q/k norms + yarn,
#                            Mistral linear RoPE; under 1 MiB) for the checkpoint parity cases
# The model (94 MiB) is larger than one device call may carry (64 MiB with the tree), so it
# travels in two calls; see the header of check.sh for the exact calls.
#
# Usage: engine/gpu/pack.sh [MODEL.gguf]   (default: the engine's cached SmolLM2-135M Q4_1)
set -euo pipefail
cd "$(dirname "$0")/../.."

model="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenscale/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ -f "$model" ] || { echo "pack: no model at $model (run: cargo run -p tokenscale-engine -- pull smollm2-135m)" >&2; exit 1; }
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpu/' >> .git/info/exclude; }

cargo build --release -p tokenscale-engine --bin tokenscale-engine
rm -rf .gpu && mkdir -p .gpu
strip -o .gpu/tokenscale-engine target/release/tokenscale-engine
split -b 61M -a 2 "$model" .gpu/model.part-
PYTHONPATH=.cache/tools/python python3 scripts/checkpoints/tiny_models.py .gpu/tiny >/dev/null
(cd "$(dirname "$model")" && sha256sum "$(basename "$model")") | awk '{print $1}' > .gpu/model.sha256
ls -la .gpu
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
second=$(( $(du -cb .gpu/tokenscale-engine .gpu/model.part-ab .gpu/model.sha256 .gpu/tiny | tail -1 | cut -f1) + tree ))
first=$(( $(du -b .gpu/model.part-aa | cut -f1) + tree ))
echo "device call 1 sends $((first >> 20)) MiB, call 2 sends $((second >> 20)) MiB (limit 64 MiB each)" >&2
if [ "$first" -ge $((64 << 20)) ] || [ "$second" -ge $((64 << 20)) ]; then
  echo "pack: a call would exceed 64 MiB; split the model into more parts and stage each" >&2
  exit 1
fi
