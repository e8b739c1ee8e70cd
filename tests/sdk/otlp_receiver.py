"""An OTLP/HTTP trace receiver for the tests: the collector file-agent exports to.

Usage: target/test-python/bin/python3 tests/sdk/otlp_receiver.py OUT_DIR

Listens on 127.0.0.1 on a free port and prints `port: N` once ready. Each POST to /v1/traces
(OTLP over HTTP, protobuf, as `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf` sends it) is decoded
with the official `opentelemetry-proto` package (scripts/test-python.sh installs it), and each
span is appended to OUT_DIR/spans.jsonl as one JSON object: `trace_id`, `span_id`,
`parent_span_id` (hex, empty for a root), `name`, `kind` (`SPAN_KIND_SERVER`, ...), `status`,
`start_ns`, `end_ns`, `attributes`, `links` (`trace_id`, `span_id`) and the resource's `resource` attributes (values as
strings, numbers or booleans). The request bodies are also appended, as received, to
OUT_DIR/raw.bin, so a test can search every byte exported. Answers 200 with an empty
ExportTraceServiceResponse, or 400 for a body that does not decode. Stops on SIGTERM.
"""

import http.server
import json
import pathlib
import signal
import sys

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2


def value_of(any_value):
    """An AnyValue as plain JSON."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(item) for item in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def spans_of(body: bytes):
    """Each span of an export request, as a dict."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.ParseFromString(body)
    for resource_spans in request.resource_spans:
        resource = {kv.key: value_of(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "trace_state": span.trace_state,
                    "name": span.name,
                    "kind": trace_pb2.Span.SpanKind.Name(span.kind),
                    "status": trace_pb2.Status.StatusCode.Name(span.status.code),
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "attributes": {kv.key: value_of(kv.value) for kv in span.attributes},
                    "links": [
                        {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()}
                        for link in span.links
                    ],
                    "resource": resource,
                }


def main(out_dir: pathlib.Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    spans_file = out_dir / "spans.jsonl"
    raw_file = out_dir / "raw.bin"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with raw_file.open("ab") as raw:
                raw.write(body)
            try:
                spans = list(spans_of(body))
            except Exception as error:  # a body that does not decode is the test's failure
                self.send_response(400)
                self.end_headers()
                self.wfile.write(str(error).encode())
                return
            with spans_file.open("a") as out:
                for span in spans:
                    out.write(json.dumps(span) + "\n")
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"port: {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
