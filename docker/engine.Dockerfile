# syntax=docker/dockerfile:1.7
# tokenscale-engine: one model replica (OpenAI API, continuous batching, paged KV cache).
#
# Build from the repository root:
#   docker build -f docker/engine.Dockerfile -t tokenscale/engine:0.1.0 .
# GPU image (CUDA user-space libraries: libcudart, libcublas, libnvrtc; the driver's libcuda
# comes from the node through the NVIDIA container toolkit):
#   docker build -f docker/engine.Dockerfile \
#     --build-arg RUNTIME_BASE=nvidia/cuda:12.9.1-runtime-ubuntu24.04 \
#     -t tokenscale/engine:0.1.0-cuda12.9 .
# The binary is the same in both: the CUDA backend loads its libraries at run time (cudarc
# dynamic loading) and checks they are present before using them.

# Rust toolchain of the build stage (the workspace needs edition 2024).
ARG RUST_IMAGE=rust:1.95-bookworm
# Runtime base: slim Debian with Python for the cpu/sim backends (the engine fetches the test
# alias `smollm2-135m` with `python3 -m pip download`), or an nvidia/cuda *-runtime image,
# which has no Python and needs none: hf:// sources are fetched by the engine itself (Rust,
# rustls with the CA roots copied below). All carry glibc >= the build stage's (bookworm, 2.36).
ARG RUNTIME_BASE=python:3.12-slim-bookworm
# Python image used to unpack the CUDA headers NVRTC needs (only the headers are shipped).
ARG PYTHON_IMAGE=python:3.12-slim-bookworm
# CUDA minor the headers match; keep it equal to the RUNTIME_BASE's CUDA version.
ARG CUDA_HEADERS_VERSION=12.9.*

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target dir between builds; the binary is copied out
# because the target cache is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked -p tokenscale-engine --bin tokenscale-engine \
 && install -D -m 0755 target/dist/tokenscale-engine /out/tokenscale-engine \
 && mkdir -p /out/cache

# NVRTC compiles the engine's kernels at start and includes cuda_fp16.h / cuda_bf16.h; the
# CUDA runtime images carry no headers, so they come from the PyPI wheel
# nvidia-cuda-runtime-cu12 (a few MB) rather than a multi-GB devel image.
FROM ${PYTHON_IMAGE} AS cuda-headers
ARG CUDA_HEADERS_VERSION
RUN python -m pip download --no-deps --only-binary=:all: --dest /wheels \
      "nvidia-cuda-runtime-cu12==${CUDA_HEADERS_VERSION}" \
 && python -m zipfile -e /wheels/nvidia_cuda_runtime_cu12-*.whl /unpacked \
 && mkdir -p /out && cp -r /unpacked/nvidia/cuda_runtime/include /out/include

FROM ${RUNTIME_BASE}
# No RUN in this stage: it works on any base (slim, CUDA runtime, distroless).
COPY --from=build /out/tokenscale-engine /usr/local/bin/tokenscale-engine
# CA roots for model downloads over HTTPS.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# NVRTC headers, found by the engine through TOKENSCALE_CUDA_INCLUDE_DIRS; the CUDA libraries
# themselves are found in the base image's /usr/local/cuda/lib64 (CUDA 12 or 13).
COPY --from=cuda-headers /out/include /opt/tokenscale/cuda/include
# Writable places (the root filesystem is read-only in Kubernetes; these become volumes).
COPY --from=build --chown=65532:65532 /out/cache/ /var/cache/tokenscale/
ENV TOKENSCALE_CUDA_INCLUDE_DIRS=/opt/tokenscale/cuda/include \
    XDG_CACHE_HOME=/var/cache/tokenscale \
    HOME=/tmp \
    PIP_NO_CACHE_DIR=1 \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# Non-root, numeric so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/tokenscale-engine"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
