#!/usr/bin/env python3
"""Intake against what the official SDKs emit: openai, anthropic and google-genai objects, dumped
the way their users dump them, sent to a running toolgate as `assistant_message` and as `calls`.
Every case must come back with its call run on the right arguments, under the model's id; a case
that loses a call, runs it with `{}` or misreports it fails the script (non-zero exit).

usage: python tests/sdk/sdk_shapes.py --addr 127.0.0.1:50051
"""

import argparse
import json
import pathlib
import sys

import grpc
from google.protobuf import json_format

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"))
import toolgate_stubs  # noqa: E402

ARGS = {"city": "Paris", "days": 2}
EXPECTED_CONTENT = json.dumps(ARGS, separators=(",", ":"), sort_keys=True)


def openai_cases():
    from openai.types.chat import ChatCompletionMessage
    from openai.types.chat.chat_completion_message_function_tool_call import (
        ChatCompletionMessageFunctionToolCall,
        Function,
    )
    from openai.types.responses import ResponseFunctionToolCall

    call = ChatCompletionMessageFunctionToolCall(
        id="call_1", type="function", function=Function(name="echo", arguments=json.dumps(ARGS))
    )
    message = ChatCompletionMessage(role="assistant", content=None, tool_calls=[call])
    item = ResponseFunctionToolCall(
        type="function_call", call_id="call_r", name="echo", arguments=json.dumps(ARGS),
        id="fc_1", status="completed",
    )
    return [
        ("openai chat message.to_dict()", {"assistant_message": message.to_dict()}, "call_1"),
        ("openai chat message.model_dump()",
         {"assistant_message": message.model_dump(mode="json")}, "call_1"),
        ("openai chat tool_call.to_dict() in calls", {"calls": [call.to_dict()]}, "call_1"),
        ("openai responses output list", {"assistant_message": [item.to_dict()]}, "call_r"),
        ("openai responses item in calls", {"calls": [item.to_dict()]}, "call_r"),
    ]


def anthropic_cases():
    import anthropic.types as a

    block = a.ToolUseBlock(type="tool_use", id="toolu_1", name="echo", input=ARGS)
    message = a.Message(
        id="msg_1", type="message", role="assistant", model="claude",
        content=[a.TextBlock(type="text", text="Let me check."), block],
        stop_reason="tool_use", stop_sequence=None,
        usage=a.Usage(input_tokens=1, output_tokens=1),
    )
    return [
        ("anthropic message.to_dict()", {"assistant_message": message.to_dict()}, "toolu_1"),
        ("anthropic tool_use block in calls", {"calls": [block.to_dict()]}, "toolu_1"),
    ]


def gemini_cases():
    from google.genai import types as g

    call = g.FunctionCall(name="echo", args=ARGS, id="g1")
    content = g.Content(role="model", parts=[g.Part(text="Checking."), g.Part(function_call=call)])
    response = g.GenerateContentResponse(candidates=[g.Candidate(content=content)])
    dumped_calls = [fc.model_dump(exclude_none=True, mode="json") for fc in response.function_calls]
    return [
        ("google-genai content.to_json_dict()", {"assistant_message": content.to_json_dict()}, "g1"),
        ("google-genai content.model_dump(by_alias)",
         {"assistant_message": content.model_dump(exclude_none=True, mode="json", by_alias=True)},
         "g1"),
        ("google-genai part.to_json_dict() in calls",
         {"calls": [g.Part(function_call=call).to_json_dict()]}, "g1"),
        ("google-genai response.function_calls dumped in calls", {"calls": dumped_calls}, "g1"),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:50051")
    args = parser.parse_args()
    pb, pb_grpc = toolgate_stubs.load()
    failures = 0
    with grpc.insecure_channel(args.addr) as channel:
        stub = pb_grpc.ToolGateStub(channel)
        for name, body, call_id in openai_cases() + anthropic_cases() + gemini_cases():
            request = json_format.ParseDict(body, pb.DispatchBatchRequest())
            result = stub.Dispatch(request, timeout=30)
            got = [(r.id, r.success, r.content) for r in result.results]
            if got != [(call_id, True, EXPECTED_CONTENT)] or len(result.messages) != 1:
                failures += 1
                print(f"FAIL {name}: sent {json.dumps(body)} got {got}")
            else:
                print(f"ok {name}")
    if failures:
        raise SystemExit(f"{failures} SDK shape(s) misread")
    print("every SDK shape read exactly")


if __name__ == "__main__":
    main()
