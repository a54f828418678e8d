#!/usr/bin/env python3
"""Send a batch of tool calls to toolgate from Python and print the tool messages.

The gRPC stubs are generated from the repository's protos with grpcio-tools on first run
(toolgate_stubs.py), so this works with nothing but `pip install grpcio grpcio-tools`.

usage: python examples/python/dispatch_batch.py [--addr 127.0.0.1:50051]
"""

import argparse
import json
import sys

import toolgate_stubs

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:50051")
    args = parser.parse_args()

    import grpc
    from google.protobuf import json_format

    pb, pb_grpc = toolgate_stubs.load()

    # The assistant message exactly as an OpenAI chat completion returned it.
    assistant_message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "echo", "arguments": json.dumps({"city": "Berlin", "units": "metric"})}},
            {"id": "call_2", "type": "function",
             "function": {"name": "sleep", "arguments": json.dumps({"ms": 20})}},
            {"id": "call_3", "type": "function",
             "function": {"name": "lookup_stock", "arguments": "{}"}},
        ],
    }
    request = json_format.ParseDict(
        {"assistant_message": assistant_message, "options": {"message_format": "OPENAI_CHAT"}},
        pb.DispatchBatchRequest(),
    )

    with grpc.insecure_channel(args.addr) as channel:
        stub = pb_grpc.ToolGateStub(channel)
        result = None
        for event in stub.DispatchBatch(request, timeout=30):
            kind = event.WhichOneof("event")
            if kind == "result":
                result = event.result
                continue
            body = getattr(event, kind)
            print(f"event {kind}: id={body.id}" + (f" attempt={body.attempt}" if hasattr(body, "attempt") else ""))

    if result is None:
        sys.exit("the stream ended without a result")
    print(f"outcome: {pb.BatchResult.Outcome.Name(result.outcome)}; "
          f"{result.count} calls, {result.errors} errors")
    print("tool messages to append to the conversation:")
    for message in result.messages:
        print(json.dumps(json_format.MessageToDict(message), sort_keys=True))


if __name__ == "__main__":
    main()
