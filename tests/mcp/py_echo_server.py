"""An MCP server written with the official MCP Python SDK's high-level API (`MCPServer`), one
tool `echo` answering its input: the baseline `scripts/bench-mcp` measures toolgate's MCP front
against. No pipeline, no auth: what a user might run instead of toolgate.

usage: py_echo_server.py [--listen HOST:PORT]   (default 127.0.0.1:0)

Serves streamable HTTP at http://ADDR/mcp (the SDK answers both 2025-11-25 sessions and
2026-07-28 stateless requests there) under uvicorn, as `MCPServer.run("streamable-http")` does,
with two changes a benchmark needs: the socket is bound before uvicorn starts (as uvicorn binds
it, TCP_NODELAY included), so port 0 works and `listening on ADDR` is printed once connections
are accepted; and keep-alive connections may idle 60 s (uvicorn's default is 5 s, shorter than
the gaps between a load driver's slices). The access log is off: one line per request would
cost the baseline time toolgate does not spend. uvicorn runs as installed (here: plain asyncio
and h11; it would pick uvloop and httptools if they were installed).
"""

import argparse
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("py-echo")


@mcp.tool()
def echo(n: int) -> dict[str, int]:
    """Answers its input."""
    return {"n": n}


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", default="127.0.0.1:0")
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it each reply's body waits ~40 ms behind its headers for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(1024)
    app = mcp.streamable_http_app(host=host)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=60)
    server = uvicorn.Server(config)
    bound = sock.getsockname()
    print(f"listening on {bound[0]}:{bound[1]}", flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        sys.exit(0)
