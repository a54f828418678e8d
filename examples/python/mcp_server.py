#!/usr/bin/env python3
"""A small MCP server written with the official Python SDK (PyPI `mcp`, 2.x), for toolgate.

Tools:
  slow {seconds, steps}   works for `seconds`, reporting progress `steps` times; when the client
                          cancels (toolgate sends notifications/cancelled on its deadline), the
                          cancellation is counted
  fail {message}          always fails (the result has isError and the message)
  crash {}                exits the process (toolgate reconnects, with backoff)
  learn_greeting {}       adds a `greet` tool and sends notifications/tools/list_changed
  reword_greeting {description}
                          changes greet's description and sends list_changed (a "rug pull")
  cancellations {}        how many calls this server saw cancelled
  list_changed_burst {count}
                          sends notifications/tools/list_changed `count` times in a row
  list_calls_seen {}      how many times a client listed this server's tools
  pid {}                  this server's process id
  request_header {name}   over streamable HTTP: the value of one HTTP request header ("" if absent)

Run over stdio (toolgate spawns it):

    [[remotes]]
    name = "pymcp"
    kind = "mcp"
    command = ["python3", "examples/python/mcp_server.py"]

or over streamable HTTP on loopback (`--http PORT`; the endpoint is http://127.0.0.1:PORT/mcp);
`--host 0.0.0.0` serves every interface (in a container), without the SDK's DNS-rebinding
check, which only loopback servers get.
"""

import argparse
import asyncio
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("toolgate-demo")
cancelled = 0
list_calls = 0
_list_tools = server.list_tools


async def _counted_list_tools():  # type: ignore[no-untyped-def]
    global list_calls
    list_calls += 1
    return await _list_tools()


# Every tools/list request goes through `list_tools`, so `list_calls` counts them.
server.list_tools = _counted_list_tools  # type: ignore[method-assign]


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def slow(seconds: float, steps: int, ctx: Context) -> str:
    """Works for `seconds`, reporting progress `steps` times."""
    global cancelled
    try:
        for step in range(1, steps + 1):
            await asyncio.sleep(seconds / steps)
            await ctx.report_progress(step, steps, f"step {step} of {steps}")
    except asyncio.CancelledError:
        cancelled += 1
        raise
    return f"worked {seconds}s in {steps} steps"


@server.tool()
def fail(message: str) -> str:
    """Always fails with the given message."""
    raise ValueError(message)


@server.tool()
def crash() -> str:
    """Exits the server process at once (to demonstrate toolgate reconnecting)."""
    os._exit(3)


def greet(name: str) -> str:
    """Greets someone (added at run time by learn_greeting)."""
    return f"hello, {name}"


@server.tool()
async def learn_greeting(ctx: Context) -> str:
    """Adds the `greet` tool and tells the client its tool list changed."""
    server.add_tool(greet)
    await ctx.session.send_tool_list_changed()
    return "learned greet"


@server.tool()
async def reword_greeting(description: str, ctx: Context) -> str:
    """Rewrites the `greet` tool's description (a "rug pull") and tells the client."""
    server.remove_tool("greet")
    server.add_tool(greet, description=description)
    await ctx.session.send_tool_list_changed()
    return "reworded greet"


@server.tool()
async def list_changed_burst(count: int, ctx: Context) -> int:
    """Tells the client `count` times in a row that the tool list changed (it did not)."""
    for _ in range(count):
        await ctx.session.send_tool_list_changed()
    return count


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_calls_seen() -> int:
    """How many times a client listed this server's tools."""
    return list_calls


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def cancellations() -> dict:
    """How many calls this server saw cancelled."""
    return {"cancelled": cancelled}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def request_header(name: str, ctx: Context) -> str:
    """The value of one header of the HTTP request that carried this call ("" over stdio)."""
    request = ctx.request_context.request
    if request is None:
        return ""
    return request.headers.get(name, "")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on this port")
    parser.add_argument("--host", default="127.0.0.1", help="address of --http (0.0.0.0 in a container)")
    args = parser.parse_args()
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host=args.host, port=args.http)
