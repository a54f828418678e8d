"""Drives toolgate's MCP front door with the MCP Python SDK 1.x client (ClientSession, protocol
2025-11-25), as the many MCP client programs still on 1.x do, and prints what it saw as one JSON
object (tests/it/mcp_clients.rs asserts on it).

usage: front_client_v1.py URL [-- COMMAND ARGS...]
  URL: the streamable HTTP endpoint, or `stdio` to launch COMMAND and speak MCP over its stdin
  and stdout
Lists the tools, calls echo and an unknown tool, then repeats one call 12 times in the session.
"""

import asyncio
import contextlib
import importlib.metadata
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def result_json(result):
    return {
        "is_error": bool(result.isError),
        "text": "".join(getattr(c, "text", "") for c in result.content),
        "structured": result.structuredContent,
        "meta": result.meta,
    }


async def drive(session):
    init = await session.initialize()
    out = {"sdk": importlib.metadata.version("mcp"), "protocol": init.protocolVersion}
    listed = await session.list_tools()
    out["tools"] = sorted(t.name for t in listed.tools)
    out["echo"] = result_json(await session.call_tool("echo", {"text": "hi"}))
    out["unknown"] = result_json(await session.call_tool("ecoh", {"text": "hi"}))
    out["loop"] = [result_json(await session.call_tool("echo", {"same": 1})) for _ in range(12)]
    return out


async def main():
    argv = sys.argv[1:]
    url = argv[0]
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    async with contextlib.AsyncExitStack() as stack:
        if url == "stdio":
            params = StdioServerParameters(command=command[0], args=command[1:])
            read, write = await stack.enter_async_context(stdio_client(params))
            session_id = None
        else:
            read, write, session_id = await stack.enter_async_context(streamable_http_client(url))
        session = await stack.enter_async_context(ClientSession(read, write))
        out = await drive(session)
        out["session"] = session_id() if session_id else None
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as error:  # noqa: BLE001 - the test prints what failed
        print(json.dumps({"error": repr(error)}))
        sys.exit(1)
