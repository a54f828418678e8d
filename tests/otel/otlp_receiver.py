"""A real OTLP/gRPC receiver for the tests: the collector's TraceService and MetricsService on
the official opentelemetry-proto stubs, on a free loopback port.

Prints "listening on 127.0.0.1:PORT", then one JSON line per Export request received:
{"signal": "metrics" | "traces", "encoding": <the grpc-encoding the request came with, or null>,
"request": <the request as proto3 JSON>}. Runs until killed.
"""

import json
import sys
import threading
from concurrent import futures

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import (
    trace_service_pb2,
    trace_service_pb2_grpc,
)


# Exports arrive on several threads at once; one line at a time on stdout.
PRINTING = threading.Lock()


def record(signal, request, context):
    metadata = dict(context.invocation_metadata())
    line = {
        "signal": signal,
        "encoding": metadata.get("grpc-encoding"),
        "request": json_format.MessageToDict(request),
    }
    text = json.dumps(line)
    with PRINTING:
        print(text, flush=True)


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        record("metrics", request, context)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        record("traces", request, context)
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    sys.exit(main())
