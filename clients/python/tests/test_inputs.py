"""Every input shape dispatch() reads, made by the providers' SDKs, against the real server: each
call runs under the model's id, and the reply comes in the provider's format."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sdk

from toolgate import Call, Client, InputError

ECHOED = '{"text":"hello from the model"}'


def shapes() -> list[tuple[str, Callable[[], Any], str, str]]:
    """(label, what is passed, its implied format, the recorded reply it comes from)."""
    return [
        ("ChatCompletion", sdk.chat_completion, "openai", "openai_chat"),
        ("ChatCompletion.model_dump()", lambda: sdk.chat_completion().model_dump(),
         "openai", "openai_chat"),
        ("ChatCompletionMessage", lambda: sdk.chat_completion().choices[0].message,
         "openai", "openai_chat"),
        ("ChatCompletionMessage.to_dict()",
         lambda: sdk.chat_completion().choices[0].message.to_dict(), "openai", "openai_chat"),
        ("message.tool_calls", lambda: sdk.chat_completion().choices[0].message.tool_calls,
         "openai", "openai_chat"),
        ("Response", sdk.response, "openai_responses", "openai_responses"),
        ("Response.to_dict()", lambda: sdk.response().to_dict(), "openai_responses",
         "openai_responses"),
        ("Response.output", lambda: sdk.response().output, "openai_responses",
         "openai_responses"),
        ("Response.output dicts", lambda: [i.to_dict() for i in sdk.response().output],
         "openai_responses", "openai_responses"),
        ("anthropic Message", sdk.message, "anthropic", "anthropic"),
        ("anthropic Message.to_dict()", lambda: sdk.message().to_dict(), "anthropic",
         "anthropic"),
        ("anthropic Message.model_dump()", lambda: sdk.message().model_dump(), "anthropic",
         "anthropic"),
        ("anthropic tool_use blocks",
         lambda: [b for b in sdk.message().content if b.type == "tool_use"], "anthropic",
         "anthropic"),
        ("GenerateContentResponse", sdk.generate_content, "gemini", "gemini"),
        ("GenerateContentResponse.to_json_dict()",
         lambda: sdk.generate_content().to_json_dict(), "gemini", "gemini"),
        ("Content", lambda: sdk.generate_content().candidates[0].content, "gemini", "gemini"),
        ("Content.model_dump(by_alias)",
         lambda: sdk.generate_content().candidates[0].content.model_dump(
             mode="json", exclude_none=True, by_alias=True), "gemini", "gemini"),
        ("response.function_calls", lambda: sdk.generate_content().function_calls, "gemini",
         "gemini"),
        ("Content.parts", lambda: sdk.generate_content().candidates[0].content.parts, "gemini",
         "gemini"),
        ("Content.model_dump()", lambda: sdk.generate_content().candidates[0].content.model_dump(),
         "gemini", "gemini"),
        ("anthropic Message.content (text and tool_use blocks)", lambda: sdk.message().content,
         "anthropic", "anthropic"),
        ("normalized Call objects",
         lambda: [Call("n1", "echo", {"text": "hello from the model"}), Call("n2", "now")],
         "openai", "normalized"),
        ("normalized dicts",
         lambda: [{"id": "n1", "name": "echo", "arguments": {"text": "hello from the model"}},
                  {"id": "n2", "name": "now", "arguments": {}}], "openai", "normalized"),
    ]


@pytest.mark.parametrize("label,make,fmt,recorded", shapes(), ids=[s[0] for s in shapes()])
def test_every_input_shape_runs_its_calls_under_the_models_ids(
    addr: str, label: str, make: Callable[[], Any], fmt: str, recorded: str,
) -> None:
    ids = sdk.IDS.get(recorded, ["n1", "n2"])
    with Client(addr) as tg:
        out = tg.dispatch(make())
    assert out.format == fmt, label
    assert [r.id for r in out.results] == ids, label
    assert [r.tool for r in out.results] == ["echo", "now"], label
    assert out.all_succeeded and out.errors == 0, out.failed
    assert out.results[0].content == ECHOED
    assert out.results[0].result == {"text": "hello from the model"}
    assert out.results[0].arguments == {"text": "hello from the model"}
    assert out.session_id  # an ephemeral session the server made
    assert out.outcome == "COMPLETED"
    # One tool message per call (OpenAI, Responses) or one message with a part per call.
    assert len(out.messages) == (2 if fmt in ("openai", "openai_responses") else 1), out.messages


# What the server's messages look like in each format: the keys that tell them apart.
SHAPE = {
    "openai": lambda m: m[0]["role"] == "tool" and m[0]["tool_call_id"] == "toolu_01A",
    "openai_responses": lambda m: m[0]["type"] == "function_call_output"
    and m[0]["call_id"] == "toolu_01A",
    "anthropic": lambda m: m[0]["content"][0]["type"] == "tool_result",
    "gemini": lambda m: m[0]["parts"][0]["functionResponse"]["id"] == "toolu_01A",
}


@pytest.mark.parametrize("fmt", ["openai", "openai_responses", "anthropic", "gemini"])
def test_the_reply_format_can_be_overridden(addr: str, fmt: str) -> None:
    with Client(addr) as tg:
        out = tg.dispatch(sdk.message(), format=fmt)  # type: ignore[arg-type]
    assert out.format == fmt
    assert SHAPE[fmt](out.messages), out.messages


def test_calls_the_provider_runs_itself_are_left_to_it(addr: str) -> None:
    """A hosted MCP call beside the agent's own call, and Anthropic's server tools: only the
    agent's calls run, and only they are answered."""
    from google.genai import types as g

    hosted = {"object": "response", "output": [
        {"type": "mcp_call", "id": "mcp_1", "name": "echo", "server_label": "docs",
         "arguments": '{"text": "ran at OpenAI"}', "output": "ran at OpenAI"},
        {"type": "function_call", "call_id": "call_own", "name": "now", "arguments": "{}"}]}
    server_tools = {"type": "message", "role": "assistant", "stop_reason": "tool_use",
                    "content": [
                        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                         "input": {"query": "x"}},
                        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                         "content": []},
                        {"type": "tool_use", "id": "toolu_own", "name": "now", "input": {}}]}
    # google-genai's FunctionCall of a tool without arguments has no `args`: still Gemini.
    bare = [g.FunctionCall(id="gc-now", name="now")]
    with Client(addr) as tg:
        for response, call_id in ((hosted, "call_own"), (server_tools, "toolu_own")):
            out = tg.dispatch(response)
            assert [r.id for r in out.results] == [call_id], out.results
            assert out.all_succeeded and call_id in str(out.messages)
            assert "mcp_1" not in str(out.messages) and "srvtoolu_1" not in str(out.messages)
        out = tg.dispatch(bare)
    assert out.format == "gemini" and out.all_succeeded
    g.Content.model_validate(out.messages[0])


def test_a_value_newer_than_the_client_is_kept_as_its_number() -> None:
    from toolgate._convert import call_result
    from toolgate._proto import toolgate_pb2 as pb

    result = call_result(pb.CallResult(id="c", error_class=42))  # type: ignore[arg-type]
    assert result.error_class == "42"  # type: ignore[comparison-overlap]


def test_the_session_id_is_kept_across_batches(addr: str) -> None:
    with Client(addr) as tg:
        first = tg.dispatch(sdk.chat_completion(), session_id="py-session-1")
        second = tg.dispatch(sdk.message(), session_id="py-session-1")
        assert first.session_id == second.session_id == "py-session-1"
        assert tg.end_session("py-session-1") is True
        assert tg.end_session("py-session-1") is False


@pytest.mark.parametrize("bad", [
    42, "a string", {"unrelated": True}, {"choices": []}, {"candidates": []}, object(),
])
def test_what_is_not_a_model_response_is_refused_before_sending(addr: str, bad: Any) -> None:
    with Client(addr) as tg, pytest.raises(InputError) as raised:
        tg.dispatch(bad)
    assert raised.value.code is None
    assert isinstance(raised.value, ValueError)
