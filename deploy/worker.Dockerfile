# The example gRPC worker (examples/python/worker.py) as an image, for deploy/compose.yaml.
# Build from the repository root: docker build -f deploy/worker.Dockerfile .

# The stubs are generated here, so the runtime image needs neither grpcio-tools nor the protos.
FROM python:3.11-slim-bookworm AS stubs
# pip trusts the system's CA bundle rather than its own copy, so a build behind a TLS-inspecting
# proxy (whose CA the system bundle holds) reaches PyPI; elsewhere it changes nothing.
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
WORKDIR /src
RUN pip install --no-cache-dir --disable-pip-version-check grpcio-tools==1.85.1 protobuf==7.36.2
COPY proto proto
COPY examples/python/toolgate_stubs.py examples/python/
RUN python -c 'import sys; sys.path.insert(0, "examples/python"); import toolgate_stubs; toolgate_stubs.generate()'

FROM python:3.11-slim-bookworm
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN pip install --no-cache-dir --disable-pip-version-check grpcio==1.85.1 protobuf==7.36.2 \
    && groupadd --system --gid 10002 worker \
    && useradd --system --no-log-init --uid 10002 --gid 10002 --home-dir /nonexistent \
        --shell /usr/sbin/nologin worker
WORKDIR /app
COPY examples/python/worker.py examples/python/toolgate_stubs.py ./
COPY --from=stubs /src/examples/python/generated generated
USER 10002:10002
EXPOSE 7001
# Unbuffered, so the worker's lines reach `docker logs` as they are written.
ENV PYTHONUNBUFFERED=1
CMD ["python", "worker.py", "--host", "0.0.0.0", "--port", "7001"]
