# syntax=docker/dockerfile:1.7
# tokenscale-operator: reconciles ModelDeployments and runs the SLO-driven autoscaler.
#
# Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t tokenscale/operator:0.1.0 .

# Rust toolchain of the build stage (the workspace needs edition 2024).
ARG RUST_IMAGE=rust:1.95-bookworm
# Runtime base: slim Debian, or any distroless "cc" image (nonroot) from your registry;
# the stage below has no RUN, so either works. The operator talks only to the API server,
# whose CA the service account token mount provides.
ARG RUNTIME_BASE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked -p tokenscale-operator --bin tokenscale-operator \
 && install -D -m 0755 target/dist/tokenscale-operator /out/tokenscale-operator

FROM ${RUNTIME_BASE}
COPY --from=build /out/tokenscale-operator /usr/local/bin/tokenscale-operator
# Non-root, numeric so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/tokenscale-operator"]
