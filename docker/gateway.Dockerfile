# syntax=docker/dockerfile:1.7
# tokenscale-gateway: the OpenAI-compatible front door (keys, limits, queue, routing).
#
# Build from the repository root:
#   docker build -f docker/gateway.Dockerfile -t tokenscale/gateway:0.1.0 .

# Rust toolchain of the build stage (the workspace needs edition 2024).
ARG RUST_IMAGE=rust:1.95-bookworm
# Runtime base: slim Debian, or any distroless "cc" image (nonroot) from your registry;
# the stage below has no RUN, so either works.
ARG RUNTIME_BASE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked -p tokenscale-gateway --bin tokenscale-gateway \
 && install -D -m 0755 target/dist/tokenscale-gateway /out/tokenscale-gateway

FROM ${RUNTIME_BASE}
COPY --from=build /out/tokenscale-gateway /usr/local/bin/tokenscale-gateway
# Non-root, numeric so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
# 8080: the OpenAI API; 9090: /metrics and /health on the admin listener (--admin-listen)
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/tokenscale-gateway"]
CMD ["--listen", "0.0.0.0:8080", "--config", "/etc/tokenscale/gateway/gateway.yaml"]
