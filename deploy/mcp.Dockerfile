# The example MCP server (examples/python/mcp_server.py, official Python SDK) over streamable
# HTTP as an image, for deploy/compose.yaml; its endpoint is http://HOST:8000/mcp.
# Build from the repository root: docker build -f deploy/mcp.Dockerfile .
FROM python:3.11-slim-bookworm
# pip trusts the system's CA bundle rather than its own copy, so a build behind a TLS-inspecting
# proxy (whose CA the system bundle holds) reaches PyPI; elsewhere it changes nothing.
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN pip install --no-cache-dir --disable-pip-version-check mcp==2.3.0 \
    && groupadd --system --gid 10003 mcp \
    && useradd --system --no-log-init --uid 10003 --gid 10003 --home-dir /nonexistent \
        --shell /usr/sbin/nologin mcp
WORKDIR /app
COPY examples/python/mcp_server.py ./
USER 10003:10003
EXPOSE 8000
ENV PYTHONUNBUFFERED=1
CMD ["python", "mcp_server.py", "--http", "8000", "--host", "0.0.0.0"]
