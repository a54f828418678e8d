"""The messages and tool lists the client returns are what each SDK's request types accept: the
tool messages in every reply format, and tools() in every provider's tool shape."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
import sdk

from conftest import Server

from toolgate import Client, Tool
from toolgate._convert import tool_definitions

IDS = sdk.IDS["anthropic"]


def dispatched(addr: str, fmt: str) -> list[dict[str, Any]]:
    with Client(addr) as tg:
        out = tg.dispatch(sdk.message(), format=fmt)  # type: ignore[arg-type]
    assert out.all_succeeded, out.failed
    return out.messages


def test_openai_chat_tool_messages_are_chat_completion_message_params(addr: str) -> None:
    from openai.types.chat import ChatCompletionMessageParam

    messages = dispatched(addr, "openai")
    adapter: Any = pydantic.TypeAdapter(ChatCompletionMessageParam)
    for m in messages:
        adapter.validate_python(m)
    assert [(m["role"], m["tool_call_id"]) for m in messages] == [("tool", i) for i in IDS]
    assert messages[0]["content"] == '{"text":"hello from the model"}'


def test_responses_outputs_are_response_input_items(addr: str) -> None:
    from openai.types.responses import ResponseInputItemParam

    messages = dispatched(addr, "openai_responses")
    adapter: Any = pydantic.TypeAdapter(ResponseInputItemParam)
    for m in messages:
        adapter.validate_python(m)
    assert [(m["type"], m["call_id"]) for m in messages] == [
        ("function_call_output", i) for i in IDS]
    assert messages[0]["output"] == '{"text":"hello from the model"}'


def test_anthropic_tool_results_are_a_message_param(addr: str) -> None:
    from anthropic.types import MessageParam

    messages = dispatched(addr, "anthropic")
    assert len(messages) == 1
    adapter: Any = pydantic.TypeAdapter(MessageParam)
    adapter.validate_python(messages[0])
    assert messages[0]["role"] == "user"
    blocks = messages[0]["content"]
    assert [(b["type"], b["tool_use_id"]) for b in blocks] == [("tool_result", i) for i in IDS]
    assert blocks[0]["content"] == '{"text":"hello from the model"}'
    assert blocks[0]["is_error"] is False


def test_gemini_function_responses_are_a_content(addr: str) -> None:
    from google.genai import types

    messages = dispatched(addr, "gemini")
    assert len(messages) == 1
    content = types.Content.model_validate(messages[0])
    assert content.role == "user"
    responses = [p.function_response for p in content.parts or []]
    assert [(r.id, r.name) for r in responses if r] == [(IDS[0], "echo"), (IDS[1], "now")]
    first = responses[0]
    assert first is not None and first.response == {"output": {"text": "hello from the model"}}


def test_a_failed_call_is_marked_as_an_error_in_each_format(addr: str) -> None:
    calls = [{"id": "bad1", "name": "no_such_tool", "arguments": {}}]
    with Client(addr) as tg:
        chat = tg.dispatch(calls)
        anthropic = tg.dispatch(calls, format="anthropic")
    assert chat.errors == 1 and not chat.all_succeeded
    failed = chat.results[0]
    assert failed.error_class == "UNKNOWN_TOOL" and not failed.success
    assert "no_such_tool" in failed.content
    assert chat.failed == [failed] and chat.by_id("bad1") == failed
    assert chat.messages[0]["tool_call_id"] == "bad1"
    assert anthropic.messages[0]["content"][0]["is_error"] is True


def test_tools_come_in_each_providers_tool_shape(addr: str) -> None:
    from anthropic.types import ToolParam as AnthropicTool
    from google.genai import types
    from openai.types.chat import ChatCompletionToolUnionParam
    from openai.types.responses import ToolParam as ResponsesTool

    with Client(addr) as tg:
        listed = tg.list_tools()
        names = sorted(t.name for t in listed)
        assert {"echo", "now", "sleep"} <= set(names)
        chat = tg.tools("openai")
        responses = tg.tools("openai_responses")
        anthropic = tg.tools("anthropic")
        gemini = tg.tools("gemini")
    chat_adapter: Any = pydantic.TypeAdapter(ChatCompletionToolUnionParam)
    responses_adapter: Any = pydantic.TypeAdapter(ResponsesTool)
    anthropic_adapter: Any = pydantic.TypeAdapter(AnthropicTool)
    for t in chat:
        chat_adapter.validate_python(t)
    for t in responses:
        responses_adapter.validate_python(t)
    for t in anthropic:
        anthropic_adapter.validate_python(t)
    declared = types.Tool.model_validate(gemini[0]).function_declarations or []
    assert sorted(t["function"]["name"] for t in chat) == names
    assert sorted(t["name"] for t in responses) == names
    assert sorted(t["name"] for t in anthropic) == names
    assert sorted(d.name or "" for d in declared) == names
    echo = next(t for t in listed if t.name == "echo")
    assert next(t for t in anthropic if t["name"] == "echo")["input_schema"] == echo.input_schema


def quarantined() -> list[Tool]:
    def tool(name: str, status: Any) -> Tool:
        return Tool(name, "d", {"type": "object"}, "MCP", status, False, False, False, False, "r")

    return [tool("kept", "PINNED"), tool("changed", "QUARANTINED"), tool("local", "LOCAL")]


@pytest.mark.parametrize("fmt", ["openai", "openai_responses", "anthropic", "gemini"])
def test_quarantined_tools_are_left_out(fmt: Any) -> None:
    text = str(tool_definitions(quarantined(), fmt))
    assert "kept" in text and "local" in text and "changed" not in text


def test_a_name_providers_refuse_is_given_as_an_alias_that_runs_its_tool(
    remote_server: Server,
) -> None:
    import re

    from anthropic.types import ToolParam as AnthropicTool

    with Client(remote_server.addr) as tg:
        assert "py.get_weather" in [t.name for t in tg.list_tools()]
        chat = tg.tools("openai")
        names = [t["function"]["name"] for t in chat]
        assert "py_get_weather" in names and "py.get_weather" not in names
        for fmt in ("openai_responses", "anthropic", "gemini"):
            assert "py_get_weather" in str(tg.tools(fmt))
        adapter: Any = pydantic.TypeAdapter(AnthropicTool)
        for t in tg.tools("anthropic"):
            adapter.validate_python(t)
            assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", t["name"]), t["name"]
        # The model calls the alias; the call runs py.get_weather, answered under the alias.
        out = tg.dispatch([{"id": "w1", "name": "py_get_weather", "arguments": {"city": "Oslo"}}],
                          format="gemini")
    assert out.all_succeeded, out.failed
    r = out.results[0]
    assert (r.name, r.tool) == ("py_get_weather", "py.get_weather")
    assert r.result == {"city": "Oslo", "sky": "clear"}
    assert out.messages[0]["parts"][0]["functionResponse"]["name"] == "py_get_weather"


def test_aliases_are_made_anew_from_each_tool_list() -> None:
    """After a real tool `x_y` appears, the model's call to `x_y` runs it, not `x.y` (whose
    alias `x_y` was once)."""
    import http.server
    import json
    import threading

    from google.protobuf import struct_pb2

    from conftest import BASE
    from toolgate._proto import toolgate_pb2 as pb

    class Named(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            reply = json.dumps({"served": self.path}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Named)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{http_server.server_address[1]}"
    server = Server(BASE + f"""
[auth]
anonymous_roles = ["agent", "admin"]
[remote_registration]
enabled = true
egress_allow = ["127.0.0.0/8"]
[[remotes]]
name = "x"
kind = "http"
prefix = "x."
url = "{base}/dotted"
required = true
[remotes.definition]
name = "y"
description = "The dotted tool."
""")
    try:
        with Client(server.addr) as tg:
            chat = tg.tools("openai")
            assert [t["function"]["name"] for t in chat if "x" in t["function"]["name"]] == [
                "x_y"]
            definition = struct_pb2.Struct()
            definition.update({"name": "x-plain", "kind": "http", "url": f"{base}/plain",
                               "definition": {"name": "x_y", "description": "The plain tool."}})
            register = tg._channel.unary_unary(
                "/toolgate.v1.ToolGate/RegisterRemote",
                request_serializer=pb.RegisterRemoteRequest.SerializeToString,
                response_deserializer=pb.RegisterRemoteResponse.FromString)
            register(pb.RegisterRemoteRequest(definition=definition), timeout=30)
            names = sorted(t["function"]["name"] for t in tg.tools("openai"))
            assert "x_y" in names and "x_y_2" in names, names
            out = tg.dispatch([{"id": "a", "name": "x_y", "arguments": {}},
                               {"id": "b", "name": "x_y_2", "arguments": {}}])
    finally:
        server.stop()
        http_server.shutdown()
    assert out.all_succeeded, out.failed
    assert [(r.name, r.tool, r.result) for r in out.results] == [
        ("x_y", "x_y", {"served": "/plain"}),
        ("x_y_2", "x.y", {"served": "/dotted"}),
    ]
