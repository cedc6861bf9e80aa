"""The receiving side of AgentScope Studio for the tests: an OTLP/HTTP endpoint (`POST /v1/traces`, protobuf, as
AgentScope's exporter sends) that keeps each span as a row of Studio's `span_table` (its `SpanTable` entity, in
SQLite as TypeORM lays it out), decoding the attributes as Studio's `SpanProcessor` does: each value taken out of
its AnyValue, each text value that is JSON parsed. Two databases are written from the same spans: `nested.sqlite`
with the attributes unflattened into objects (Studio 1.0) and `flat.sqlite` with dotted keys (later Studio versions,
after its FlattenSpanAttributes migration). Studio itself is a Node application (npm `@agentscope/studio`) that the
package registries this project's CI reaches do not carry; the spans are AgentScope's own."""

from __future__ import annotations

import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

COLUMNS = """id varchar PRIMARY KEY NOT NULL, traceId varchar NOT NULL, spanId varchar NOT NULL, traceState varchar,
parentSpanId varchar, flags integer, name varchar NOT NULL, kind integer NOT NULL, startTimeUnixNano varchar NOT NULL,
endTimeUnixNano varchar NOT NULL, attributes json NOT NULL, droppedAttributesCount integer, events json,
droppedEventsCount integer, links json, droppedLinksCount integer, status json NOT NULL, resource json NOT NULL,
scope json NOT NULL, statusCode integer, serviceName varchar, operationName varchar, instrumentationName varchar,
instrumentationVersion varchar, model varchar, inputTokens integer, outputTokens integer, totalTokens integer,
conversationId varchar, latencyNs float NOT NULL"""


def any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def load_json_strings(attrs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in attrs.items():
        try:
            out[key] = json.loads(value) if isinstance(value, str) else value
        except json.JSONDecodeError:
            out[key] = value
    return out


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts, node = key.split("."), out
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return out


class StudioSink:
    def __init__(self, folder: Path) -> None:
        self.paths = {"nested": folder / "nested.sqlite", "flat": folder / "flat.sqlite"}
        for path in self.paths.values():
            with sqlite3.connect(path) as conn:
                conn.execute(f"CREATE TABLE span_table ({COLUMNS})")
                conn.execute("CREATE TABLE run_table (id varchar PRIMARY KEY NOT NULL)")  # another of Studio's
        self.lock = threading.Lock()
        self.spans = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                sink.keep(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def keep(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest.FromString(body)
        rows = {"nested": [], "flat": []}
        for resource_spans in request.resource_spans:
            resource = {kv.key: any_value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                scope = {"name": scope_spans.scope.name, "version": scope_spans.scope.version}
                for span in scope_spans.spans:
                    attrs = load_json_strings({kv.key: any_value(kv.value) for kv in span.attributes})
                    for form in rows:
                        stored = unflatten(attrs) if form == "nested" else attrs
                        rows[form].append((
                            span.span_id.hex(), span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                            span.name, span.kind, str(span.start_time_unix_nano), str(span.end_time_unix_nano),
                            json.dumps(stored), json.dumps({"code": span.status.code}), json.dumps(resource),
                            json.dumps(scope), span.status.code, attrs.get("gen_ai.operation.name"),
                            str(attrs.get("gen_ai.conversation.id", "unknown")),
                            float(span.end_time_unix_nano - span.start_time_unix_nano)))
        with self.lock:
            for form, path in self.paths.items():
                with sqlite3.connect(path) as conn:
                    conn.executemany(
                        "INSERT INTO span_table (id, traceId, spanId, parentSpanId, name, kind, startTimeUnixNano, "
                        "endTimeUnixNano, attributes, status, resource, scope, statusCode, operationName, "
                        "conversationId, latencyNs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        rows[form])
            self.spans += len(rows["flat"])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
