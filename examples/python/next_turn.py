#!/usr/bin/env python3
"""The next model turn, in every message format toolgate speaks.

For each provider, a recorded model reply that asks for a tool goes to toolgate as
`assistant_message`, with `message_format` set to that provider. The reply is appended to the
conversation verbatim, then `BatchResult.messages`: the result is exactly what the provider's API
expects for the next call. The script checks that every tool call is answered by id, in order.

usage: python examples/python/next_turn.py [--addr 127.0.0.1:50051]
"""

import argparse
import json

import grpc
from google.protobuf import json_format

import toolgate_stubs

QUESTION = "Echo 'hi' back to me."

# Recorded replies, exactly as each provider's API returned them.
CASES = {
    "OPENAI_CHAT": {
        "conversation": [{"role": "user", "content": QUESTION}],
        "reply": {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_7", "type": "function",
                            "function": {"name": "echo", "arguments": "{\"text\": \"hi\"}"}}],
        },
    },
    "ANTHROPIC": {
        "conversation": [{"role": "user", "content": QUESTION}],
        "reply": {
            "role": "assistant",
            "content": [{"type": "text", "text": "Sure."},
                        {"type": "tool_use", "id": "toolu_7", "name": "echo", "input": {"text": "hi"}}],
        },
    },
    "OPENAI_RESPONSES": {
        # The Responses API takes a list of input items; the model's output items are appended.
        "conversation": [{"role": "user", "content": QUESTION}],
        "reply": [{"type": "function_call", "id": "fc_7", "call_id": "call_r7",
                   "name": "echo", "arguments": "{\"text\": \"hi\"}"}],
    },
    "GEMINI": {
        "conversation": [{"role": "user", "parts": [{"text": QUESTION}]}],
        "reply": {"role": "model",
                  "parts": [{"functionCall": {"name": "echo", "args": {"text": "hi"}, "id": "g7"}}]},
    },
}


def next_conversation(fmt, conversation, reply, messages):
    """The conversation for the next model call: history, the reply verbatim, the tool messages."""
    if fmt == "OPENAI_RESPONSES":
        return conversation + reply + messages  # output items are input items
    return conversation + [reply] + messages


def answered_ids(fmt, messages):
    if fmt == "OPENAI_CHAT":
        return [m["tool_call_id"] for m in messages]
    if fmt == "OPENAI_RESPONSES":
        return [m["call_id"] for m in messages]
    if fmt == "ANTHROPIC":
        return [b["tool_use_id"] for m in messages for b in m["content"]]
    return [p["functionResponse"]["id"] for m in messages for p in m["parts"]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:50051")
    args = parser.parse_args()
    pb, pb_grpc = toolgate_stubs.load()
    expected = {"OPENAI_CHAT": ["call_7"], "ANTHROPIC": ["toolu_7"],
                "OPENAI_RESPONSES": ["call_r7"], "GEMINI": ["g7"]}
    with grpc.insecure_channel(args.addr) as channel:
        stub = pb_grpc.ToolGateStub(channel)
        for fmt, case in CASES.items():
            request = json_format.ParseDict(
                {"assistant_message": case["reply"], "options": {"message_format": fmt}},
                pb.DispatchBatchRequest(),
            )
            result = stub.Dispatch(request, timeout=30)
            messages = [json_format.MessageToDict(m) for m in result.messages]
            ids = answered_ids(fmt, messages)
            if ids != expected[fmt]:
                raise SystemExit(f"{fmt}: tool messages answer {ids}, expected {expected[fmt]}")
            conversation = next_conversation(fmt, case["conversation"], case["reply"], messages)
            print(f"== {fmt}: the next request's conversation ==")
            print(json.dumps(conversation, sort_keys=True))
    print("every tool call answered by id in every format")


if __name__ == "__main__":
    main()
