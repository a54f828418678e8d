# toolgate's container image: a release build on rust:1.95-slim-bookworm, run on
# debian:bookworm-slim with only the binary, the CA bundle and a non-root user (uid 10001).
# Build: docker build -t toolgate .   Run: docker run -p 127.0.0.1:50051:50051 toolgate

# cargo-chef derives the dependency layer from the workspace's manifests, so it follows every
# member, target and bench on its own: a hand-kept list of stubs broke this build once (the fuzz
# member and a fifth bench). scripts/test checks in seconds that this context loads the
# workspace (deploy/validate.sh).
FROM rust:1.95-slim-bookworm AS chef
RUN cargo install cargo-chef --locked --version 0.1.78 \
    && rm -rf /usr/local/cargo/registry
WORKDIR /src

# The recipe: every manifest of the workspace and the lock file, with the sources left out.
FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS build
# Symbols are of no use in the image and are most of the binary's size.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
# The dependencies, in a layer of their own: rebuilt only when the recipe changes (a manifest or
# the lock file), not for every source edit.
COPY --from=planner /src/recipe.json recipe.json
RUN cargo chef cook --release --locked --recipe-path recipe.json --bin toolgate
COPY . .
RUN cargo build --release --locked --bin toolgate \
    && cp target/release/toolgate /usr/local/bin/toolgate

FROM debian:bookworm-slim
# A fixed uid/gid, so volume ownership and Kubernetes' runAsUser can name it.
RUN groupadd --system --gid 10001 toolgate \
    && useradd --system --no-log-init --uid 10001 --gid 10001 --home-dir /nonexistent \
        --shell /usr/sbin/nologin toolgate
# TLS to workers (https:// endpoints) and to an OTLP collector verifies against these roots; the
# bundle is the build image's, so the runtime needs no package manager run.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /usr/local/bin/toolgate /usr/local/bin/toolgate
# Inside a container the listeners must face the container's network, not its loopback. These
# variables win over a mounted config file (TOOLGATE_CONFIG=/etc/toolgate/toolgate.toml);
# any other key can be set the same way, TOOLGATE_<SECTION>__<KEY>. A non-loopback listener
# needs TLS ([tls]) or an explicit server.insecure = true, and callers that are not on the
# container's loopback need credentials ([auth]): the image decides neither for the operator.
# The web console (docs/console.md) is off: off loopback it needs the admin listener's TLS
# (admin.tls with [tls]); set TOOLGATE_CONSOLE__ENABLED=true with those.
ENV TOOLGATE_LISTEN=0.0.0.0:50051 \
    TOOLGATE_ADMIN__LISTEN=0.0.0.0:9464 \
    TOOLGATE_CONSOLE__ENABLED=false
# 50051: gRPC (toolgate.v1, health, reflection). 9464: admin HTTP (/metrics, /livez, /readyz).
# 8765: the MCP front door, when a config turns it on ([mcp] listen = "0.0.0.0:8765").
EXPOSE 50051 9464 8765
USER 10001:10001
# `toolgate health` asks grpc.health.v1 on the configured port (0.0.0.0 becomes 127.0.0.1).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["toolgate", "health"]
# docker stop sends SIGTERM: new batches are refused, running ones get server.shutdown_grace
# (10 s) to finish. Give the container at least 30 s (docker stop -t 30, stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["toolgate"]
CMD ["serve"]
