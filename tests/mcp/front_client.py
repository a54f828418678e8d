"""Drives toolgate's MCP front door with the official MCP Python SDK's client, as an MCP client
program would, and prints what it saw as one JSON object (tests/it/mcp_front.rs asserts on it).

usage: front_client.py URL MODE SCENARIO [--token T] [--session S] [-- COMMAND ARGS...]
  URL: the endpoint, or `stdio` to launch COMMAND and speak MCP over its stdin and stdout
  MODE: `legacy` (the initialize handshake, 2025-11-25) or `2026-07-28` (stateless)
  SCENARIO: basic | structured | calls | approve-parallel | loop | progress | cancel | session | approve | deny | approver | state-abuse | list-changed | traced | stall-form
  --token2 T: a second identity (state-abuse)
"""

import argparse
import asyncio
import json
import sys

import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def result_json(result):
    return {
        "is_error": bool(result.is_error),
        "text": "".join(getattr(c, "text", "") for c in result.content),
        "structured": result.structured_content,
        "meta": result.meta,
    }


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("mode")
    parser.add_argument("scenario")
    parser.add_argument("--token")
    parser.add_argument("--session")
    parser.add_argument("--token2")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for COMMAND")
    argv = sys.argv[1:]
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.command = command
    headers = {}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    if args.session:
        headers["x-toolgate-session"] = args.session
    if args.url == "stdio":
        env = dict(item.split("=", 1) for item in args.env)
        transport = StdioServerParameters(command=args.command[0], args=args.command[1:], env=env or None)
    else:
        http = create_mcp_http_client(headers=headers)
        transport = streamable_http_client(args.url, http_client=http)
    out = {"asked": []}

    async def answer(context, params):
        """The person at the client: approves with edited arguments, or denies."""
        out["asked"].append(params.message)
        if args.scenario == "stall-form":
            await asyncio.sleep(60)
        if args.scenario == "deny":
            return types.ElicitResult(action="accept", content={"approve": False, "reason": "not today"})
        if args.scenario == "approve-parallel":
            # Each call's own arguments, edited: an answer applied to the wrong call shows.
            original = json.loads(params.message.split(" with ", 1)[1].split(". ", 1)[0])["text"]
            edited = {"text": f"edited-{original}"}
            return types.ElicitResult(action="accept", content={"approve": True, "arguments": json.dumps(edited)})
        return types.ElicitResult(
            action="accept",
            content={"approve": True, "reason": "fine", "arguments": json.dumps({"text": "edited"})},
        )

    list_changed = asyncio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            list_changed.set()

    async with Client(
        transport, mode=args.mode, cache=None, elicitation_callback=answer, message_handler=on_message
    ) as client:
        out["protocol"] = client.session.protocol_version if hasattr(client.session, "protocol_version") else None
        if args.scenario == "calls":
            listed = await client.list_tools()
            out["tools"] = {
                t.name: {
                    "description": t.description,
                    "schema": t.input_schema,
                    "annotations": t.annotations.model_dump(exclude_none=True) if t.annotations else None,
                }
                for t in listed.tools
            }
            out["next_cursor"] = listed.next_cursor
            out["echo"] = result_json(await client.call_tool("echo", {"text": "hi"}))
            out["fail"] = result_json(await client.call_tool("fail", {}))
            out["unknown"] = result_json(await client.call_tool("ecoh", {"text": "hi"}))
            out["invalid"] = result_json(
                await client.call_tool("scratch_write", {"path": 7, "extra": True})
            )
        elif args.scenario == "structured":
            # A remote tool declaring an output schema: listed with it, and its result checked
            # against it by the SDK (which refuses structured content that does not conform).
            listed = await client.list_tools()
            tool = next(t for t in listed.tools if t.name == "ev.get-structured-content")
            out["output_schema"] = tool.output_schema
            out["result"] = result_json(
                await client.call_tool("ev.get-structured-content", {"location": "Chicago"})
            )
        elif args.scenario == "basic":
            listed = await client.list_tools()
            out["tools"] = sorted(t.name for t in listed.tools)
            out["echo"] = result_json(await client.call_tool("echo", {"text": "hi"}))
            out["unknown"] = result_json(await client.call_tool("ecoh", {"text": "hi"}))
        elif args.scenario == "loop":
            out["results"] = [
                result_json(await client.call_tool("echo", {"same": 1})) for _ in range(12)
            ]
        elif args.scenario == "progress":
            seen = []

            async def on_progress(progress, total, message):
                seen.append({"progress": progress, "total": total, "message": message})

            result = await client.call_tool(
                "ev.trigger-long-running-operation",
                {"duration": 1, "steps": 3},
                progress_callback=on_progress,
            )
            out["result"] = result_json(result)
            out["progress"] = seen
        elif args.scenario == "cancel":
            try:
                await asyncio.wait_for(client.call_tool("wait_cancel", {}), timeout=1.0)
                out["cancelled"] = False
            except (asyncio.TimeoutError, TimeoutError):
                out["cancelled"] = True
            # The session goes on after a cancel.
            out["after"] = result_json(await client.call_tool("echo", {"after": True}))
        elif args.scenario == "approve-parallel":
            results = await asyncio.gather(
                *(client.call_tool("echo", {"text": t}) for t in ("a", "b", "c"))
            )
            out["results"] = [result_json(r) for r in results]
        elif args.scenario in ("approve", "deny", "stall-form"):
            out["result"] = result_json(await client.call_tool("echo", {"text": "original"}))
        elif args.scenario == "approver":
            seen = []

            async def on_progress(progress, total, message):
                seen.append(message)

            out["result"] = result_json(
                await client.call_tool("echo", {"text": "original"}, progress_callback=on_progress)
            )
            out["progress"] = seen
        elif args.scenario == "state-abuse":
            first = await client.session.call_tool("echo", {"text": "original"}, allow_input_required=True)
            state = first.request_state
            out["input_required"] = isinstance(first, types.InputRequiredResult)
            approve = {"approval": {"action": "accept", "content": {"approve": True}}}

            async def attempt(session, request_state):
                try:
                    r = await session.call_tool(
                        "echo", {"text": "original"}, input_responses=approve,
                        request_state=request_state, allow_input_required=True,
                    )
                    return {"ok": True, "is_error": getattr(r, "is_error", None)}
                except Exception as error:  # noqa: BLE001 - the refusal is the point
                    return {"ok": False, "error": str(error)}

            out["forged"] = await attempt(client.session, state[:-4] + "AAAA")
            other_http = create_mcp_http_client(headers={"Authorization": f"Bearer {args.token2}"})
            other = Client(streamable_http_client(args.url, http_client=other_http), mode=args.mode, cache=None)
            async with other:
                out["other_caller"] = await attempt(other.session, state)
            out["owner"] = await attempt(client.session, state)
            out["replayed"] = await attempt(client.session, state)
        elif args.scenario == "list-changed":
            # Prints `ready` once listening, then waits for the test to change the tool list.
            before = {t.name for t in (await client.list_tools()).tools}
            if args.mode == "legacy":
                print("ready", flush=True)
                await asyncio.wait_for(list_changed.wait(), timeout=20)
            else:
                async with client.listen(tools_list_changed=True) as subscription:
                    print("ready", flush=True)
                    event = await asyncio.wait_for(subscription.__anext__(), timeout=20)
                    out["event"] = type(event).__name__
            after = {t.name for t in (await client.list_tools()).tools}
            out["added"] = sorted(after - before)
        elif args.scenario == "traced":
            traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            out["result"] = result_json(
                await client.call_tool("echo", {"text": "traced"}, meta={"traceparent": traceparent})
            )
            out["fail"] = result_json(await client.call_tool("ecoh", {}))
        elif args.scenario == "session":
            out["result"] = result_json(await client.call_tool("echo", {"n": 1}))
        else:
            raise SystemExit(f"unknown scenario {args.scenario}")
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as error:  # noqa: BLE001 - the test prints what failed
        print(json.dumps({"error": repr(error)}))
        sys.exit(1)
