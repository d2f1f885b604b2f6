"""A local OTLP receiver of traces and metrics (HTTP/protobuf and gRPC) that decodes the official protobufs."""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

# path → (request, response) of each signal the receiver takes
SIGNALS = {
    "/v1/traces": (trace_service_pb2.ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse),
    "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest, metrics_service_pb2.ExportMetricsServiceResponse),
}


class Received:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.metric_requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []

    def add(self, request) -> None:
        with self.lock:
            if isinstance(request, metrics_service_pb2.ExportMetricsServiceRequest):
                self.metric_requests.append(request)
            else:
                self.requests.append(request)

    def metrics(self) -> list[tuple[dict[str, str], Metric]]:
        """Every metric received, in order, with its resource's attributes (a cumulative stream's latest point is
        the last one)."""
        with self.lock:
            return [({a.key: a.value.string_value for a in resource.resource.attributes}, metric)
                    for request in self.metric_requests for resource in request.resource_metrics
                    for scope in resource.scope_metrics for metric in scope.metrics]

    def wait_for_metric(self, name: str, timeout_s: float = 30) -> list[Metric]:
        deadline = time.monotonic() + timeout_s
        while not (found := [m for _, m in self.metrics() if m.name == name]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {name} received; got {sorted({m.name for _, m in self.metrics()})}")
            time.sleep(0.05)
        return found

    def spans(self) -> list[Span]:
        with self.lock:
            return [span for request in self.requests for resource in request.resource_spans
                    for scope in resource.scope_spans for span in scope.spans]

    def resource_attributes(self) -> dict[str, str]:
        with self.lock:
            return {a.key: a.value.string_value for request in self.requests
                    for resource in request.resource_spans for a in resource.resource.attributes}

    def wait_for_spans(self, count: int, timeout_s: float = 30) -> list[Span]:
        deadline = time.monotonic() + timeout_s
        while len(spans := self.spans()) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(spans)} spans received, expected {count}")
            time.sleep(0.05)
        return spans


class HTTPReceiver(Received):
    """POST /v1/traces on a loopback port; delay_s makes it a slow collector."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                encoding = self.headers.get("Content-Encoding")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if delay_s:
                    time.sleep(delay_s)
                if self.path in SIGNALS:
                    request, response = SIGNALS[self.path]
                    receiver.add(request.FromString(body))
                    reply = response().SerializeToString()
                    self.send_response(200)
                else:
                    reply = b""
                    self.send_response(404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HTTPReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class GRPCReceiver(Received):
    def __init__(self) -> None:
        super().__init__()
        import grpc

        receiver = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                receiver.add(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):
                receiver.add(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(MetricsService(), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{port}"

    def __enter__(self) -> GRPCReceiver:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(0)


def main() -> None:
    """Serve OTLP/HTTP in its own process (as a real collector would run) until stdin closes; print the counts of
    spans and of metric export requests received."""
    import sys

    with HTTPReceiver() as receiver:
        print(receiver.endpoint, flush=True)
        sys.stdin.read()
        print(len(receiver.spans()), len(receiver.metric_requests), flush=True)


if __name__ == "__main__":
    main()
