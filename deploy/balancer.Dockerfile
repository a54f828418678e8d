# nginx as the gRPC balancer of the compose `scale` profile (deploy/compose.yaml), configured by
# deploy/balancer.conf, which compose mounts at /etc/nginx/nginx.conf. Debian's nginx-light (1.22:
# grpc_pass and HTTP/2) on debian:bookworm-slim, because machines without a registry cannot pull
# the upstream nginx image.
# Build from the repository root: docker build -f deploy/balancer.Dockerfile .
FROM debian:bookworm-slim
# The version is held to nginx 1.22, and Debian's security updates within it still install.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light=1.22.* \
    && rm -rf /var/lib/apt/lists/*
# www-data, Debian's user for nginx (uid and gid 33, fixed by base-passwd). Running as it from the
# start (no root master) needs a listen port above 1023 and writable paths only under /tmp:
# deploy/balancer.conf keeps to both.
USER 33:33
EXPOSE 50051
# SIGQUIT is nginx's graceful stop: running requests finish, as toolgate's own drain.
STOPSIGNAL SIGQUIT
# `-e stderr`: the error log goes to the container's log before the config is read, instead of
# a file under the read-only /var/log.
CMD ["nginx", "-e", "stderr", "-g", "daemon off;"]
