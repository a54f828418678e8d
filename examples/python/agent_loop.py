#!/usr/bin/env python3
"""An agent loop over toolgate, with a recorded (scripted) model.

Each turn: the "model" replies (here a recorded reply, so the example runs without a model API);
if the reply asks for tools, the loop sends it to toolgate's DispatchBatch with the session id,
the turn number, the request context and a binding; it appends the reply and the tool messages to
the conversation; then it asks the model again. Two turns of tool calls, then a final answer.

The binding `get_weather` runs the built-in `echo` tool with an input mapped from the call's
arguments and the request context: city from `arguments.city`, the user id from `ctx.user.id`,
the plan from the bare context key `plan`, and a literal unit. So the tool sees exactly those
values, and nothing else from the context (not `ctx.user.email`).

usage: python examples/python/agent_loop.py [--addr 127.0.0.1:50051]
"""

import argparse
import json

import grpc
from google.protobuf import json_format

import toolgate_stubs

CONTEXT = {"user": {"id": "u-7", "email": "ada@example.com"}, "plan": "pro"}

BINDINGS = {
    "get_weather": {
        "tool": "echo",
        "input": {
            "city": "arguments.city",
            "user": "ctx.user.id",
            "plan": "plan",
            "units": {"$literal": "metric"},
        },
    }
}

# What the model said at each turn (OpenAI chat format), recorded.
SCRIPT = [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_w1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Berlin\"}"}},
        {"id": "call_t1", "type": "function", "function": {"name": "now", "arguments": "{}"}},
    ]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_n2", "type": "function",
         "function": {"name": "scratch_write",
                      "arguments": "{\"path\": \"notes/weather.txt\", \"content\": \"Berlin: checked\"}"}},
    ]},
    {"role": "assistant", "content": "Noted the Berlin weather check in notes/weather.txt."},
]


def model(conversation, turn):
    """Stands in for the model API: the recorded reply for this turn."""
    return SCRIPT[turn]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:50051")
    args = parser.parse_args()
    pb, pb_grpc = toolgate_stubs.load()

    conversation = [{"role": "user", "content": "What's the weather in Berlin? Note it down."}]
    with grpc.insecure_channel(args.addr) as channel:
        stub = pb_grpc.ToolGateStub(channel)
        for turn in range(len(SCRIPT)):
            reply = model(conversation, turn)
            conversation.append(reply)
            if not reply.get("tool_calls"):
                print(f"turn {turn}: final answer: {reply['content']}")
                break
            request = json_format.ParseDict({
                "session_id": "agent-loop-demo",
                "turn": turn,
                "assistant_message": reply,
                "context": CONTEXT,
                "bindings": BINDINGS,
                "options": {"message_format": "OPENAI_CHAT"},
            }, pb.DispatchBatchRequest())
            result = None
            for event in stub.DispatchBatch(request, timeout=30):
                if event.WhichOneof("event") == "result":
                    result = event.result
            if result is None:
                raise SystemExit("the stream ended without a result")
            messages = [json_format.MessageToDict(m) for m in result.messages]
            asked = [c["id"] for c in reply["tool_calls"]]
            answered = [m["tool_call_id"] for m in messages]
            if asked != answered:
                raise SystemExit(f"turn {turn}: asked {asked}, answered {answered}")
            conversation.extend(messages)
            for r in result.results:
                print(f"turn {turn}: {r.name} -> {r.tool}: {r.content}")
    print("conversation:")
    print(json.dumps(conversation, sort_keys=True))


if __name__ == "__main__":
    main()
