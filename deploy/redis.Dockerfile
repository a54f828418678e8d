# Redis for the compose `scale` profile (deploy/compose.yaml): the shared session store of its
# three toolgate replicas. Debian's redis-server (7.0) on debian:bookworm-slim, because machines
# without a registry cannot pull the upstream redis image; elsewhere that image does as well.
# Build from the repository root: docker build -f deploy/redis.Dockerfile .
FROM debian:bookworm-slim
# The package's system user, made first with a fixed uid/gid (the package then keeps it), as the
# upstream image's: 999. The version is held to Redis 7.0; Debian's security updates within it
# still install.
RUN groupadd --system --gid 999 redis \
    && useradd --system --no-log-init --uid 999 --gid 999 --home-dir /var/lib/redis \
        --shell /usr/sbin/nologin redis \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server=5:7.0.* \
    && rm -rf /var/lib/apt/lists/*
USER 999:999
EXPOSE 6379
# No config file: the compiled defaults, and these. Sessions' keys expire after
# sessions.idle_ttl and are worth nothing after a restart, so nothing is saved (the root
# filesystem is read-only), and Redis listens on every interface with protected mode off: without
# a password, protected mode answers only loopback clients, and toolgate is on another container.
# The compose network is its only way in (no port is published).
CMD ["redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no"]
