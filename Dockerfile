# toolgate's container image: a release build on rust:1.95-slim-bookworm, run on
# debian:bookworm-slim with only the binary, the CA bundle and a non-root user (uid 10001).
# Build: docker build -t toolgate .   Run: docker run -p 127.0.0.1:50051:50051 toolgate

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Symbols are of no use in the image and are most of the binary's size.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
# The dependencies first, in a layer of their own, against stub sources: this layer is rebuilt
# only when the manifest, the lock file, build.rs or the protos change, not for every source edit.
# The bench targets are declared in Cargo.toml, so cargo needs files for them (stubs suffice).
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto proto
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && for bench in pipeline grpc_echo grpc_driver grpc_relay; do echo 'fn main() {}' > "benches/$bench.rs"; done \
    && cargo build --release --locked --bin toolgate \
    && rm -rf src
COPY config config
COPY src src
# COPY keeps the sources' modification times, which can be older than the stub build's: touch
# the crate roots so cargo rebuilds the crate itself.
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin toolgate \
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
ENV TOOLGATE_LISTEN=0.0.0.0:50051 \
    TOOLGATE_ADMIN__LISTEN=0.0.0.0:9464
# 50051: gRPC (toolgate.v1, health, reflection). 9464: admin HTTP (/metrics, /livez, /readyz).
EXPOSE 50051 9464
USER 10001:10001
# `toolgate health` asks grpc.health.v1 on the configured port (0.0.0.0 becomes 127.0.0.1).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["toolgate", "health"]
# docker stop sends SIGTERM: new batches are refused, running ones get server.shutdown_grace
# (10 s) to finish. Give the container at least 30 s (docker stop -t 30, stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["toolgate"]
CMD ["serve"]
