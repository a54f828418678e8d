"""A real OTLP/gRPC receiver for the tests: the collector's TraceService and MetricsService on
the official opentelemetry-proto stubs, on a free loopback port.

Prints "listening on 127.0.0.1:PORT", then one JSON line per Export request received:
{"signal": "metrics" | "traces", "request": <the request as proto3 JSON>}, with trace and span ids as lowercase hex (as W3C
headers and the OTLP/JSON encoding write them) rather than protobuf JSON's base64. Runs until
killed.

With --quiet (the benchmarks' collector) it prints nothing per export, only counts, and on
SIGTERM prints one line: {"exports": N, "spans": N}.
"""

import argparse
import base64
import json
import signal
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


def hex_ids(request):
    """Rewrites the span ids of a trace export from base64 to hex, in place."""
    for resource in request.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
    return request


QUIET = False
COUNTS = {"exports": 0, "spans": 0}


def record(kind, request):
    if QUIET:
        spans = sum(len(scope.spans) for resource in getattr(request, "resource_spans", [])
                    for scope in resource.scope_spans)
        with PRINTING:
            COUNTS["exports"] += 1
            COUNTS["spans"] += spans
        return
    line = {"signal": kind, "request": hex_ids(json_format.MessageToDict(request))}
    text = json.dumps(line)
    with PRINTING:
        print(text, flush=True)


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        record("metrics", request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        record("traces", request)
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    global QUIET
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet", action="store_true", help="count exports, print totals on SIGTERM")
    QUIET = parser.parse_args().quiet

    def totals(*_):
        with PRINTING:
            print(json.dumps(COUNTS), flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, totals)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    sys.exit(main())
