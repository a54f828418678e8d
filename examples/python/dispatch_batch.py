#!/usr/bin/env python3
"""Send a batch of tool calls to toolgate from Python and print the tool messages.

The gRPC stubs are generated from the repository's protos with grpcio-tools on first run (into
examples/python/generated/), so this works with nothing but `pip install grpcio grpcio-tools`.

usage: python examples/python/dispatch_batch.py [--addr 127.0.0.1:50051]
"""

import argparse
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
GENERATED = HERE / "generated"


def load_stubs():
    """Generates (if needed) and imports toolgate_pb2 / toolgate_pb2_grpc."""
    proto = PROTO_ROOT / "toolgate" / "v1" / "toolgate.proto"
    target = GENERATED / "toolgate" / "v1" / "toolgate_pb2.py"
    if not target.exists() or target.stat().st_mtime < proto.stat().st_mtime:
        import grpc_tools
        from grpc_tools import protoc

        GENERATED.mkdir(parents=True, exist_ok=True)
        well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
        code = protoc.main([
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={GENERATED}",
            f"--grpc_python_out={GENERATED}",
            str(proto),
        ])
        if code != 0:
            sys.exit(f"protoc failed with exit code {code}")
    sys.path.insert(0, str(GENERATED))
    from toolgate.v1 import toolgate_pb2, toolgate_pb2_grpc

    return toolgate_pb2, toolgate_pb2_grpc


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:50051")
    args = parser.parse_args()

    import grpc
    from google.protobuf import json_format

    pb, pb_grpc = load_stubs()

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
