#!/usr/bin/env bash
# Prepares what engine/gpu/check.sh needs on the GPU machine, on a machine WITH the Rust
# toolchain (the GPU machine has none). Writes into .gpu/ at the repository root (ignored by
# git through .git/info/exclude):
#   .gpu/tokenscale-engine   stripped release binary (x86-64)
#   .gpu/tokenscale          stripped release CLI, for `tokenscale bench` in check.sh serve
#   .gpu/model.part-aa …     the SmolLM2 model file in parts, each sized so that it travels
#                            in one device call beside the working tree (which grows)
#   .gpu/model.sha256        checksum of the whole model file
#   .gpu/tiny/               the tiny random-weight checkpoints of scripts/checkpoints
#                            (Llama 3.1 llama3-RoPE, Qwen2 biases, Qwen3 q/k norms + yarn,
#                            Mistral linear RoPE; under 1 MiB) for the checkpoint parity cases
# The model (94 MiB) is larger than one device call may carry (64 MiB with the tree), so it
# travels in parts: every part but the last is staged by a call of its own, the last rides
# with the binary. This script prints the exact calls (check.sh's header explains them).
#
# Usage: engine/gpu/pack.sh [MODEL.gguf]   (default: the engine's cached SmolLM2-135M Q4_1)
set -euo pipefail
cd "$(dirname "$0")/../.."

model="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenscale/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ -f "$model" ] || { echo "pack: no model at $model (run: cargo run -p tokenscale-engine -- pull smollm2-135m)" >&2; exit 1; }
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpu/' >> .git/info/exclude; }

cargo build --release -p tokenscale-engine --bin tokenscale-engine
cargo build --release -p tokenscale --bin tokenscale
rm -rf .gpu && mkdir -p .gpu
strip -o .gpu/tokenscale-engine target/release/tokenscale-engine
strip -o .gpu/tokenscale target/release/tokenscale
# Bytes of the working tree, which travels with every call (git's tracked and untracked,
# not ignored, files). It grows with the project: the parts are sized from it each time.
bytes() { du -cb "$@" | tail -1 | cut -f1; }
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
limit=$((64 << 20)) margin=$((2 << 20))
part=$(( (limit - tree - margin) >> 20 ))
[ "$part" -ge 8 ] || { echo "pack: the working tree ($((tree >> 20)) MiB) leaves no room for model parts" >&2; exit 1; }
split -b "${part}M" -a 2 "$model" .gpu/model.part-
PYTHONPATH=.cache/tools/python python3 scripts/checkpoints/tiny_models.py .gpu/tiny >/dev/null
(cd "$(dirname "$model")" && sha256sum "$(basename "$model")") | awk '{print $1}' > .gpu/model.sha256
ls -la .gpu

parts=(.gpu/model.part-*)
last="${parts[-1]}"
final=(.gpu/tokenscale-engine .gpu/model.sha256 .gpu/tiny)
staged=("${parts[@]:0:${#parts[@]}-1}")
# The last part rides with the binary when that call still fits; else it is staged too.
if [ $(( $(bytes "${final[@]}" "$last") + tree )) -lt $((limit - margin)) ]; then
  final+=("$last")
else
  staged+=("$last")
fi
[ $(( $(bytes "${final[@]}") + tree )) -lt "$limit" ] || {
  echo "pack: the binary and the checkpoints with the tree exceed 64 MiB in one call" >&2; exit 1; }
quote() { local out="" p; for p in "$@"; do out+="${out:+, }\"$p\""; done; printf '[%s]' "$out"; }
echo "working tree $((tree >> 20)) MiB; model in ${#parts[@]} parts of at most $part MiB; device calls, back to back:"
n=1
for p in "${staged[@]}"; do
  echo "  $n. run(command=\"bash engine/gpu/check.sh stage\", carry=$(quote "$p"), timeout_s=60)"
  n=$((n + 1))
done
echo "  $n. run(command=\"bash engine/gpu/check.sh\", timeout_s=400, carry=$(quote "${final[@]}"))"
serve=(.gpu/tokenscale-engine .gpu/tokenscale .gpu/model.sha256)
[ $(( $(bytes "${serve[@]}") + tree )) -lt "$limit" ] || {
  echo "pack: the two binaries with the tree exceed 64 MiB in one call" >&2; exit 1; }
echo "  $((n + 1)). run(command=\"bash engine/gpu/check.sh serve\", timeout_s=240, carry=$(quote "${serve[@]}"))"
