"""The one translator between the client's Python values and toolgate.v1 messages: what the
model returned → a request, and the server's replies → the typed values of ``_types``."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from google.protobuf import duration_pb2, json_format, struct_pb2

from ._errors import InputError
from ._proto import toolgate_pb2 as pb
from ._types import (
    Approval,
    ApprovalRequested,
    ApprovalResolved,
    BreakerChanged,
    CallReceived,
    CallResult,
    DispatchResult,
    Event,
    Finished,
    Format,
    GateDecision,
    LoopDetected,
    Progress,
    RetryScheduled,
    Tool,
    ToolPost,
    ToolPre,
)

FORMATS: dict[str, int] = {
    "openai": pb.DispatchOptions.OPENAI_CHAT,
    "openai_responses": pb.DispatchOptions.OPENAI_RESPONSES,
    "anthropic": pb.DispatchOptions.ANTHROPIC,
    "gemini": pb.DispatchOptions.GEMINI,
}
_FORMAT_NAMES: dict[int, Format] = {v: cast(Format, k) for k, v in FORMATS.items()}

# Responses output items that are not calls but may sit beside them in `output`.
_RESPONSES_ITEMS = {
    "function_call", "message", "reasoning", "web_search_call", "file_search_call",
    "computer_call", "code_interpreter_call", "image_generation_call", "local_shell_call",
    "mcp_call", "mcp_list_tools", "mcp_approval_request", "custom_tool_call",
}


def plain(value: Any) -> Any:
    """An SDK object (pydantic models of openai, anthropic, google-genai; the client's ``Call``)
    as the JSON-shaped dicts and lists its API sends."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    # What a pydantic model_dump() without mode="json" leaves: Gemini's thought_signature
    # bytes, timestamps. As their API's JSON writes them.
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    # google-genai's types dump to the API's JSON (camelCase) with to_json_dict.
    to_json_dict = getattr(value, "to_json_dict", None)
    if callable(to_json_dict):
        return plain(to_json_dict())
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return plain(model_dump(mode="json", exclude_none=True, by_alias=True))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    raise InputError(
        f"cannot read a {type(value).__module__}.{type(value).__qualname__}: pass the model's "
        "response (OpenAI ChatCompletion or message, Responses Response or output, Anthropic "
        "Message, google-genai GenerateContentResponse or Content), its dict, or a list of calls"
    )


def read_response(response: Any) -> tuple[str, Any, Format]:
    """Which request field the model's reply goes in (``assistant_message`` or ``calls``), its
    JSON, and the chat format it implies."""
    value = plain(response)
    if isinstance(value, dict):
        return _read_object(value)
    if isinstance(value, list):
        items = [i for i in value if isinstance(i, dict)]
        if len(items) == len(value) and items:
            # A Responses output, Anthropic content blocks or Gemini parts, given bare: the
            # server sorts the calls from the rest (text, thinking, hosted tools) as it does
            # for the whole message.
            if all("type" in i for i in items) and not any(
                i["type"] in _CALL_TYPES for i in items
            ):
                fmt: Format = ("openai_responses"
                               if any(i["type"] in _RESPONSES_ITEMS for i in items)
                               else "anthropic")
                return "assistant_message", value, fmt
            if all(_GEMINI_PART_KEYS & i.keys() for i in items):
                return "assistant_message", value, "gemini"
        return "calls", value, _calls_format(value, _provider(response))
    raise InputError(f"cannot read a {type(response).__name__} as a model response")


# The `type`s of calls in `calls` (OpenAI chat tool calls, LangChain's tool calls): a list of
# them is calls, not a message's items.
_CALL_TYPES = {"function", "tool_call"}
# The keys a Gemini part is made of (text, a call, a response, data, ...).
_GEMINI_PART_KEYS = {
    "text", "thought", "thoughtSignature", "thought_signature", "functionCall", "function_call",
    "functionResponse", "function_response", "inlineData", "inline_data", "fileData",
    "file_data", "executableCode", "executable_code", "codeExecutionResult",
    "code_execution_result",
}


def _provider(response: Any) -> str:
    """The SDK a response's objects come from (their module's top package), or ""."""
    items = response if isinstance(response, (list, tuple)) else [response]
    for item in items:
        module = type(item).__module__.split(".")[0]
        if module in ("openai", "anthropic", "google"):
            return module
    return ""


def _read_object(value: dict[str, Any]) -> tuple[str, Any, Format]:
    if "choices" in value:
        choices = value["choices"]
        if not isinstance(choices, list) or not choices:
            raise InputError("the ChatCompletion has no choices")
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            raise InputError("the ChatCompletion's first choice has no message")
        return "assistant_message", message, "openai"
    if value.get("object") == "response" or (
        "output" in value and isinstance(value["output"], list)
    ):
        return "assistant_message", value.get("output") or [], "openai_responses"
    if "candidates" in value:
        candidates = value["candidates"]
        if not isinstance(candidates, list) or not candidates:
            raise InputError("the GenerateContentResponse has no candidates")
        content = candidates[0].get("content") if isinstance(candidates[0], dict) else None
        if not isinstance(content, dict):
            raise InputError("the GenerateContentResponse's first candidate has no content")
        return "assistant_message", content, "gemini"
    if "parts" in value:
        return "assistant_message", value, "gemini"
    if "tool_calls" in value:
        return "assistant_message", value, "openai"
    content = value.get("content")
    if value.get("type") == "message" or "stop_reason" in value or (
        isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
    ):
        return "assistant_message", value, "anthropic"
    if value.get("role") == "assistant":
        return "assistant_message", value, "openai"
    raise InputError(
        "cannot tell which provider this dict comes from: expected a ChatCompletion (choices), "
        "a chat message (tool_calls), a Responses Response (output), an Anthropic Message "
        "(content blocks), a Gemini response (candidates) or Content (parts)"
    )


def _calls_format(calls: list[Any], provider: str = "") -> Format:
    """The reply format a list of calls implies: the SDK they came from (google-genai's
    FunctionCall needs no ``args``), the provider whose call shape they have, else OpenAI chat."""
    if provider == "google":
        return "gemini"
    for call in calls:
        if not isinstance(call, dict):
            continue
        if call.get("type") == "tool_use":
            return "anthropic"
        if call.get("type") == "function_call":
            return "openai_responses"
        # A Gemini part, or a FunctionCall itself (response.function_calls): name and args.
        if "functionCall" in call or "function_call" in call or (
            "args" in call and "name" in call and "arguments" not in call
        ):
            return "gemini"
    return "openai"


def to_value(value: Any) -> struct_pb2.Value:
    out = struct_pb2.Value()
    try:
        json_format.ParseDict(value, out)
    except (json_format.ParseError, TypeError, ValueError) as error:
        raise InputError(f"not JSON-shaped: {error}") from error
    return out


def to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    try:
        json_format.ParseDict(plain(value), out)
    except (json_format.ParseError, TypeError, ValueError) as error:
        raise InputError(f"not a JSON object: {error}") from error
    return out


def json_value(message: struct_pb2.Value | struct_pb2.Struct) -> Any:
    """A Value or Struct as Python, with whole numbers as int (Struct keeps every number a
    double; the JSON the model sent had 2, not 2.0)."""
    return _ints(json_format.MessageToDict(message))


def _ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def _seconds(d: duration_pb2.Duration) -> float:
    return float(d.seconds) + float(d.nanos) / 1e9


def _enum(enum: Any, number: int) -> Any:
    """The value's name; a value newer than this client (the API only adds) as its number, in
    text, rather than an exception after the calls ran."""
    try:
        return enum.Name(number)
    except ValueError:
        return str(number)


def call_result(r: pb.CallResult) -> CallResult:
    return CallResult(
        index=r.index, id=r.id, name=r.name, tool=r.tool, success=r.success,
        arguments=json_value(r.arguments) if r.HasField("arguments") else None,
        result=json_value(r.result) if r.HasField("result") else None,
        content=r.content, error=r.error, error_class=_enum(pb.ErrorClass, r.error_class),
        attempts=r.attempts, duration=_seconds(r.duration), cached=r.cached,
        truncated=r.truncated,
        parts=[{"text": p.text} if p.WhichOneof("part") == "text"
               else {"image": {"mime_type": p.image.mime_type, "data": p.image.data}}
               for p in r.parts if p.WhichOneof("part")],
    )


def batch_result(r: pb.BatchResult, fmt: Format) -> DispatchResult:
    return DispatchResult(
        messages=[json_value(m) for m in r.messages],
        results=[call_result(c) for c in r.results],
        all_succeeded=r.all_succeeded, errors=r.errors, session_id=r.session_id,
        outcome=_enum(pb.BatchResult.Outcome, r.outcome), outcome_reason=r.outcome_reason,
        duration=_seconds(r.duration), format=fmt,
    )


def approval(a: pb.Approval) -> Approval:
    expires = None
    if a.HasField("expires_at"):
        expires = a.expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
    return Approval(
        approval_id=a.approval_id, session_id=a.session_id, index=a.index, id=a.id,
        tool=a.tool, arguments=json_value(a.arguments) if a.HasField("arguments") else None,
        reason=a.reason, source=a.source, expires_at=expires, requested_by=a.requested_by,
        requester_may_answer=a.requester_may_answer, remember_allowed=a.remember_allowed,
        arguments_cut=a.arguments_cut,
    )


def approval_resolved(a: pb.ApprovalResolved) -> ApprovalResolved:
    return ApprovalResolved(
        approval_id=a.approval_id, session_id=a.session_id, index=a.index, id=a.id,
        tool=a.tool, decision=_enum(pb.ResolveApprovalRequest.Decision, a.decision),
        resolved_by=a.resolved_by, reason=a.reason,
        how=_enum(pb.ApprovalResolved.How, a.how), arguments_updated=a.arguments_updated,
        remember=_enum(pb.ResolveApprovalRequest.Remember, a.remember), source=a.source,
    )


def event(e: pb.DispatchEvent, fmt: Format) -> Event | None:
    """A stream event as its typed value; None for an event this client does not know (a newer
    server's), which is skipped."""
    which = e.WhichOneof("event")
    if which == "call_received":
        c = e.call_received
        return CallReceived(c.index, c.id, c.name,
                            json_value(c.arguments) if c.HasField("arguments") else None)
    if which == "tool_pre":
        p = e.tool_pre
        return ToolPre(p.index, p.id, p.tool, p.attempt)
    if which == "tool_post":
        t = e.tool_post
        return ToolPost(t.index, t.id, t.tool, t.attempt, t.is_error,
                        _enum(pb.ErrorClass, t.error_class), _seconds(t.duration), t.cached,
                        t.result_preview)
    if which == "gate_decision":
        g = e.gate_decision
        return GateDecision(g.index, g.id, g.tool, g.attempt,
                            _enum(pb.GateDecision.Verdict, g.verdict), g.source, g.reason,
                            g.args_digest)
    if which == "retry_scheduled":
        r = e.retry_scheduled
        return RetryScheduled(r.index, r.id, r.tool, r.attempt, _seconds(r.delay), r.reason)
    if which == "loop_detected":
        d = e.loop_detected
        return LoopDetected(d.index, d.id, d.tool, d.attempt,
                            _enum(pb.LoopDetected.Action, d.action), d.pattern, d.repeats)
    if which == "breaker_changed":
        b = e.breaker_changed
        return BreakerChanged(b.tool, _enum(pb.BreakerState, getattr(b, "from")),
                              _enum(pb.BreakerState, b.to), b.id)
    if which == "progress":
        g2 = e.progress
        return Progress(g2.index, g2.id, g2.tool, g2.attempt, g2.progress, g2.total, g2.message)
    if which == "approval_requested":
        return ApprovalRequested(approval(e.approval_requested))
    if which == "approval_resolved":
        return approval_resolved(e.approval_resolved)
    if which == "result":
        return Finished(batch_result(e.result, fmt))
    return None


def tool(t: pb.ToolDefinition) -> Tool:
    schema = json_value(t.input_schema) if t.HasField("input_schema") else {}
    return Tool(
        name=t.name, description=t.description, input_schema=schema,
        source=_enum(pb.ToolDefinition.Source, t.source),
        status=_enum(pb.ToolDefinition.Status, t.status),
        read_only=t.annotations.read_only, destructive=t.annotations.destructive,
        idempotent=t.annotations.idempotent, open_world=t.annotations.open_world,
        remote=t.remote,
    )


# A tool name every provider takes (OpenAI and Anthropic: letters, digits, '_' and '-', at most
# 64; Gemini: starting with a letter or '_').
_PORTABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def model_names(tools: Sequence[Tool]) -> dict[str, str]:
    """Each tool's name as the model is given it: its own when every provider takes it, else a
    portable alias (``py.get_weather`` → ``py_get_weather``), unique among the tools. A call
    to an alias is sent with a binding to the tool (``DispatchBatchRequest.bindings``)."""
    taken = {t.name for t in tools if _PORTABLE_NAME.fullmatch(t.name)}
    names: dict[str, str] = {}
    for t in tools:
        if t.name in taken:
            names[t.name] = t.name
            continue
        base = re.sub(r"[^A-Za-z0-9_-]", "_", t.name)
        if not re.match(r"[A-Za-z_]", base):
            base = f"t_{base}"
        base = base[:64]
        alias, n = base, 1
        while alias in taken:
            n += 1
            alias = f"{base[:64 - len(str(n)) - 1]}_{n}"
        taken.add(alias)
        names[t.name] = alias
    return names


def tool_definitions(tools: Sequence[Tool], fmt: Format) -> list[Any]:
    """Tools as the provider's tool list (``tools=`` of its request), leaving out quarantined
    ones (their calls would be refused until an operator accepts the change), under the names
    ``model_names`` gives them."""
    names = model_names(tools)
    usable = [dataclasses.replace(t, name=names[t.name]) for t in tools
              if t.status != "QUARANTINED"]

    def schema(t: Tool) -> dict[str, Any]:
        s = dict(t.input_schema) or {"type": "object", "properties": {}}
        s.setdefault("type", "object")
        return s

    if fmt == "openai":
        return [{"type": "function",
                 "function": {"name": t.name, "description": t.description,
                              "parameters": schema(t)}} for t in usable]
    if fmt == "openai_responses":
        return [{"type": "function", "name": t.name, "description": t.description,
                 "parameters": schema(t), "strict": False} for t in usable]
    if fmt == "anthropic":
        return [{"name": t.name, "description": t.description, "input_schema": schema(t)}
                for t in usable]
    if fmt == "gemini":
        if not usable:
            return []
        return [{"functionDeclarations": [
            {"name": t.name, "description": t.description, "parametersJsonSchema": schema(t)}
            for t in usable]}]
    raise InputError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")


def format_name(number: int) -> Format:
    return _FORMAT_NAMES[number]
