#!/usr/bin/env python3
"""A toolgate worker in Python: serves toolgate.v1.ToolWorker with a few real tools.

Register it in toolgate's config:

    [[remotes]]
    name = "py"
    kind = "worker"
    endpoint = "http://127.0.0.1:7001"
    prefix = "py."

or at run time with the RegisterRemote RPC (when [remote_registration] enabled = true).

Tools:
  word_count {text}            counts words and characters (read-only, safe to run in parallel)
  slow_count {to, delay_ms}    counts slowly, streaming a progress event per step; stops at once
                               when toolgate cancels the call (deadline or client gone)
  fail_on_purpose {message, details}
                               reports an error (is_error): the message, then each detail as
                               a content part of its own
  whoami {}                    the call metadata and traceparent the worker received (and, when
                               tracing, the trace id of the worker's own span)
  bump_description {}          changes word_count's description (definition pinning demo)
  cancellations {}             how many calls this worker has seen cancelled

usage: python examples/python/worker.py [--port 7001] [--host 127.0.0.1]   (port 0 picks a free
port; the address is printed as "listening on HOST:PORT"; in a container, --host 0.0.0.0)

Tracing: with the OpenTelemetry SDK installed (opentelemetry-sdk,
opentelemetry-exporter-otlp-proto-grpc) and OTEL_EXPORTER_OTLP_ENDPOINT set, every Invoke is a
server span whose parent is the traceparent toolgate sent: the span of that tool execution, so
the worker's spans join the agent's trace. OTEL_SERVICE_NAME names the worker.
"""

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import json_format, struct_pb2

import toolgate_stubs

worker_pb2, worker_pb2_grpc, toolgate_pb2 = toolgate_stubs.load_worker()


def start_tracing():
    """An OpenTelemetry tracer exporting over OTLP/gRPC, or None when no collector is named or
    the SDK is not installed."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        print("OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: "
              "not tracing", file=sys.stderr, flush=True)
        return None
    provider = TracerProvider()  # service.name from OTEL_SERVICE_NAME
    # Endpoint, headers and timeouts from the standard OTEL_EXPORTER_OTLP_* variables.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return trace.get_tracer("toolgate-example-worker")


TRACER = start_tracing()


def invoke_span(request, context):
    """The server span of one Invoke, under the traceparent toolgate sent (or nothing)."""
    if TRACER is None:
        return contextlib.nullcontext()
    from opentelemetry import propagate, trace
    carrier = dict(context.invocation_metadata())
    return TRACER.start_as_current_span(
        f"invoke {request.tool}", context=propagate.extract(carrier), kind=trace.SpanKind.SERVER,
        attributes={"gen_ai.tool.name": request.tool, "gen_ai.tool.call.id": request.call_id})


def own_trace_id():
    """The trace id of the current span, as hex, or None when not tracing."""
    if TRACER is None:
        return None
    from opentelemetry import trace
    span_context = trace.get_current_span().get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else None


def schema(properties, required=()):
    s = struct_pb2.Struct()
    s.update({"type": "object", "properties": properties, "required": list(required),
              "additionalProperties": False})
    return s


TOOLS = [
    worker_pb2.WorkerTool(
        name="word_count", description="Counts the words and characters of a text.",
        input_schema=schema({"text": {"type": "string"}}, ["text"]),
        annotations=toolgate_pb2.ToolAnnotations(read_only=True, idempotent=True),
        concurrency_safe=True),
    worker_pb2.WorkerTool(
        name="slow_count", description="Counts to `to`, one step every `delay_ms`, with progress.",
        input_schema=schema({"to": {"type": "integer", "minimum": 1},
                             "delay_ms": {"type": "integer", "minimum": 0}}, ["to"]),
        annotations=toolgate_pb2.ToolAnnotations(read_only=True),
        concurrency_safe=True),
    worker_pb2.WorkerTool(
        name="fail_on_purpose", description="Always fails with the given message.",
        input_schema=schema({"message": {"type": "string"},
                             "details": {"type": "array", "items": {"type": "string"}}}),
        concurrency_safe=True),
    worker_pb2.WorkerTool(
        name="whoami", description="The call metadata this worker received (for tracing demos).",
        input_schema=schema({}),
        annotations=toolgate_pb2.ToolAnnotations(read_only=True),
        concurrency_safe=True),
    worker_pb2.WorkerTool(
        name="bump_description",
        description="Changes word_count's description (to demonstrate definition pinning).",
        input_schema=schema({})),
    worker_pb2.WorkerTool(
        name="cancellations", description="How many calls this worker saw cancelled.",
        input_schema=schema({}),
        annotations=toolgate_pb2.ToolAnnotations(read_only=True),
        concurrency_safe=True),
]


def text(value):
    return worker_pb2.InvokeEvent(result=worker_pb2.InvokeResult(
        content=[toolgate_pb2.ContentPart(text=value)]))


def structured(value):
    v = struct_pb2.Value()
    json_format.ParseDict(value, v)
    return worker_pb2.InvokeEvent(result=worker_pb2.InvokeResult(structured=v))


class Worker(worker_pb2_grpc.ToolWorkerServicer):
    def __init__(self, without=()):
        self.without = set(without)
        self.cancelled = 0
        self.version = 0
        self.lock = threading.Lock()

    def ListTools(self, request, context):
        tools = []
        for tool in TOOLS:
            if tool.name in self.without:
                continue
            copy = worker_pb2.WorkerTool()
            copy.CopyFrom(tool)
            if copy.name == "word_count" and self.version > 0:
                copy.description += f" (revision {self.version})"
            tools.append(copy)
        return worker_pb2.WorkerListToolsResponse(tools=tools)

    def Invoke(self, request, context):
        with invoke_span(request, context):
            yield from self.invoke(request, context)

    def invoke(self, request, context):
        args = json_format.MessageToDict(request.input)
        if request.tool == "word_count":
            words = args.get("text", "").split()
            yield structured({"words": len(words), "chars": len(args.get("text", ""))})
        elif request.tool == "slow_count":
            to, delay = int(args["to"]), int(args.get("delay_ms", 100)) / 1000
            for step in range(1, to + 1):
                time.sleep(delay)
                if not context.is_active():
                    with self.lock:
                        self.cancelled += 1
                    print(f"call {request.call_id} cancelled at step {step}", file=sys.stderr, flush=True)
                    return
                yield worker_pb2.InvokeEvent(progress=worker_pb2.InvokeProgress(
                    progress=step, total=to, message=f"counted {step}"))
            yield text(f"counted to {to}")
        elif request.tool == "fail_on_purpose":
            texts = [args.get("message", "failed on purpose")] + args.get("details", [])
            yield worker_pb2.InvokeEvent(result=worker_pb2.InvokeResult(
                content=[toolgate_pb2.ContentPart(text=t) for t in texts], is_error=True))
        elif request.tool == "whoami":
            metadata = dict(context.invocation_metadata())
            yield structured({"traceparent": metadata.get("traceparent"),
                              "tracestate": metadata.get("tracestate"),
                              "trace_id": own_trace_id(), "tool_name": request.tool_name,
                              "tool_call_id": request.tool_call_id, "session_id": request.session_id})
        elif request.tool == "bump_description":
            with self.lock:
                self.version += 1
                yield structured({"revision": self.version})
        elif request.tool == "cancellations":
            with self.lock:
                yield structured({"cancelled": self.cancelled})
        else:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no tool {request.tool}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=7001)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (0.0.0.0 in a container)")
    parser.add_argument("--without", action="append", default=[], metavar="TOOL",
                        help="leave this tool out of ListTools (repeatable)")
    parser.add_argument("--tls-cert", help="serve TLS with this PEM certificate chain")
    parser.add_argument("--tls-key", help="the PEM private key of --tls-cert")
    args = parser.parse_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    worker_pb2_grpc.add_ToolWorkerServicer_to_server(Worker(args.without), server)
    if args.tls_cert:
        with open(args.tls_cert, "rb") as cert, open(args.tls_key, "rb") as key:
            credentials = grpc.ssl_server_credentials([(key.read(), cert.read())])
        port = server.add_secure_port(f"{args.host}:{args.port}", credentials)
    else:
        port = server.add_insecure_port(f"{args.host}:{args.port}")
    server.start()
    print(f"listening on {args.host}:{port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
