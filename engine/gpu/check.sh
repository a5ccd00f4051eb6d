#!/usr/bin/env bash
# GPU checks of the CUDA backend (issue 8): kernel parity, golden greedy tokens, decode speed.
# Needs an NVIDIA GPU (compute capability >= 8.0) with its driver, CUDA 12 or 13 libraries
# (libnvrtc, libcublas: a toolkit under /usr/local/cuda, or NVIDIA's Python wheels), python3.
# No Rust toolchain and no network: the binary and the model come prepared (pack.sh).
#
# HOW TO RUN (about 2-4 minutes of GPU time; every step is bounded, 420 s at most in all, so
# the check fits one 480 s call and a session's 15 minutes with a rerun):
#   1. Here, on the build machine:   engine/gpu/pack.sh
#      (release binary, stripped, and the 94 MiB model in parts, all under .gpu/). It prints
#      the exact device calls: the model is larger than one call may carry beside the working
#      tree (64 MiB), so each part but the last is staged by a call of its own:
#        run(command="bash engine/gpu/check.sh stage", carry=[".gpu/model.part-aa"], timeout_s=120)
#   2. The check itself, AT ONCE after the last stage (the machine stays warm only ~30 s after a
#      call; what a stage put under target/ is kept while it is warm):
#        run(command="bash engine/gpu/check.sh", timeout_s=480,
#            carry=[".gpu/tokenscale-engine", ".gpu/model.sha256", ".gpu/tiny", ".gpu/model.part-ab"])
#      If it says a part is missing (the machine went cold), repeat the calls back to back.
#   Elsewhere, with the whole model at hand:  MODEL=path/to/model.gguf engine/gpu/check.sh
#
# It prints: the device, a compile check against the machine's own NVRTC, a table of every
# kernel against its host reference (‖Δ‖/‖ref‖ ≤ 1e-2; qkv_position in five configurations:
# both RoPE pairings, llama3 scaling, Qwen2 biases, Qwen3 q/k norms with yarn), a table of the
# five golden cases (judged by the margin rule of the CPU checkpoint tests: a greedy token may
# differ from the golden one only where the golden top-1/top-2 margin is below the GPU's
# measured logit error; logits against the CPU reference backend), a table of the tiny safetensors checkpoints (bf16/f16/f32; Llama 3.1, Qwen2, Qwen3,
# Mistral) against the CPU reference backend over 64 positions (‖Δ‖/‖ref‖ ≤ 3e-2), and a
# table of decode step time and tokens/s at batch 1, 32, 128, 256 with 512-token contexts for
# SmolLM2-135M and a random-weight Llama of 1B shape, each against its roofline. The log also
# goes to $OUT/check.log when $OUT is set. Exit status 0 only when every parity check passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
STAGE=target/gpu-stage
mkdir -p "$STAGE"

if [ "${1:-}" = stage ]; then
  compgen -G '.gpu/model.part-*' >/dev/null || { echo "stage: no .gpu/model.part-* was carried" >&2; exit 1; }
  cp .gpu/model.part-* "$STAGE/" && ls -la "$STAGE" && exit 0
  exit 1
fi

LOG="${OUT:-$STAGE}/check.log"
exec > >(tee "$LOG") 2>&1
BIN="${BIN:-.gpu/tokenscale-engine}"
FIXTURE=engine/tests/fixtures/smollm2-135m-instruct-q4_1.json
failed=0
section() { printf '\n=== %s\n' "$*"; }

section "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader || true
[ -x "$BIN" ] || { echo "no engine binary at $BIN (run engine/gpu/pack.sh and carry .gpu/tokenscale-engine)"; exit 2; }

# CUDA libraries and headers: the toolkit first, then NVIDIA's Python wheels (CUDA 13 or 12).
# Every folder holding cuda_bf16.h is offered; the engine compiles with the one of NVRTC's own
# release (adding its include/cccl, where CUDA 13 keeps <nv/target>), loads NVRTC and cuBLAS
# of one release the driver runs, and names the parts when they are mixed.
wheel_dirs() {
  python3 - "$1" <<'PY' 2>/dev/null
import glob, importlib.util, os, sys
spec = importlib.util.find_spec("nvidia")
seen = []
for base in (spec.submodule_search_locations if spec else []):
    for f in glob.glob(os.path.join(base, "**", sys.argv[1]), recursive=True):
        d = os.path.dirname(f)
        if d not in seen:
            seen.append(d)
print(":".join(seen))
PY
}
libs="/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:$(wheel_dirs 'libnvrtc.so.1[23]'):$(wheel_dirs 'libcublas.so.1[23]')"
incs="/usr/local/cuda/include:/usr/local/cuda/targets/x86_64-linux/include:$(wheel_dirs cuda_bf16.h)"
export TOKENSCALE_CUDA_LIB_DIRS="$libs" TOKENSCALE_CUDA_INCLUDE_DIRS="$incs"
export TOKENSCALE_KERNEL_CACHE="$STAGE/kernel-cache"
echo "library dirs: $libs"
echo "include dirs: $incs"

section "model"
MODEL="${MODEL:-}"
if [ -z "$MODEL" ]; then
  MODEL="$STAGE/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [ ! -f "$MODEL" ]; then
    # The parts staged by earlier calls and those carried by this one, in name order; the
    # checksum below catches a part that is missing.
    parts=$( { (cd "$STAGE" && ls model.part-*); (cd .gpu && ls model.part-*); } 2>/dev/null | sort -u)
    [ -n "$parts" ] || { echo "model parts missing: none staged under $STAGE, none carried in .gpu"; exit 2; }
    for p in $parts; do
      if [ -f ".gpu/$p" ]; then cat ".gpu/$p"; else cat "$STAGE/$p"; fi
    done > "$MODEL"
    echo "model assembled from: $(echo $parts)"
  fi
  want=$(cat .gpu/model.sha256 2>/dev/null || echo missing)
  have=$(sha256sum "$MODEL" | cut -d' ' -f1)
  [ "$want" = "$have" ] || {
    echo "model checksum $have != expected $want (a part is missing or stale: the machine may"
    echo "have gone cold between the calls; run pack.sh's calls again, back to back)"
    rm -f "$MODEL"; exit 2; }
fi
ls -la "$MODEL"

section "compile with this machine's NVRTC (compute_90 PTX, sm_90 CUBIN)"
# Step bounds (seconds), 420 in all: a step that hangs costs its bound, never the call.
timeout 45 "$BIN" cuda-check --compile-only --arch compute_90 | sed -n '1p;$p' || failed=1
timeout 45 "$BIN" cuda-check --compile-only --arch sm_90 | tail -n 1 || failed=1

section "parity: kernels vs host reference, model vs golden tokens and the CPU reference"
timeout 120 "$BIN" cuda-check --model "$MODEL" --golden "$FIXTURE" || failed=1

section "parity: tiny safetensors checkpoints (new architectures, bf16 as stored) vs the CPU reference"
if [ -d .gpu/tiny ]; then
  timeout 90 "$BIN" cuda-check --skip-ops \
    --parity .gpu/tiny/llama31,.gpu/tiny/qwen2,.gpu/tiny/qwen3,.gpu/tiny/mistral || failed=1
else
  echo "NOT RUN: .gpu/tiny was not carried (engine/gpu/pack.sh makes it)"; failed=1
fi

section "speed: decode at 512-token contexts vs roofline (weights + KV bytes / copy bandwidth)"
timeout 120 "$BIN" cuda-check --skip-ops --bench --model "$MODEL" --random-1b \
  --batch 1,32,128,256 --context 512 || failed=1

section "result"
if [ "$failed" = 0 ]; then echo "all GPU checks passed"; else echo "SOME GPU CHECKS FAILED (see above)"; fi
exit "$failed"
