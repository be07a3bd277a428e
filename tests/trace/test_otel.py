"""A run as an OpenTelemetry trace: OTLP JSON that OpenTelemetry's own definitions parse.

The file is parsed strictly (unknown fields refused) into ``ExportTraceServiceRequest`` from
``opentelemetry-proto`` (OTLP's JSON writes ids as hex, which the receivers read; the proto
parser wants base64, so they are converted first, and must be 16 and 8 bytes). The spans are
checked against the trace's own rows, read with plain ``sqlite3``.
"""

from __future__ import annotations

import base64
import http.server
import json
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from vivarium import Experiment
from vivarium.facade import Run

pytest.importorskip("opentelemetry.proto", reason="opentelemetry-proto (make test installs it)")

from google.protobuf import json_format  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("otel")
    return Experiment(name="otel", policy="cognitive", agents=2, steps=3, seed=4).run(
        folder / "otel.sqlite", progress=False
    )


def parsed(request: dict[str, Any]) -> ExportTraceServiceRequest:
    """The request as OpenTelemetry's message, ids checked as hex of the right length."""
    data = json.loads(json.dumps(request))
    for span in data["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key, size in (("traceId", 16), ("spanId", 8), ("parentSpanId", 8)):
            if key in span:
                raw = bytes.fromhex(span[key])
                assert len(raw) == size, (key, span[key])
                span[key] = base64.b64encode(raw).decode()
    return json_format.Parse(json.dumps(data), ExportTraceServiceRequest())


def attributes(span: Any) -> dict[str, Any]:
    out = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind)
        out[kv.key] = [v.string_value for v in value.values] if kind == "array_value" else value
    return out


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_run_is_one_trace_of_steps_and_calls_with_the_genai_attributes(
    run: Run, tmp_path: Path
) -> None:
    out = tmp_path / "run.otlp.json"
    request = run.to_otel(out)
    assert json.loads(out.read_text()) == request
    message = parsed(request)
    (resource,) = message.resource_spans
    spans = list(resource.scope_spans[0].spans)
    calls = rows(
        run.path, "SELECT step, prompt_tokens, completion_tokens, model FROM llm_calls ORDER BY id"
    )
    steps = rows(run.path, "SELECT step FROM steps")
    assert len(spans) == 1 + len(steps) + len(calls)
    assert len({s.trace_id for s in spans}) == 1
    root = spans[0]
    assert root.parent_span_id == b"" and root.name == "run otel"
    by_id = {s.span_id: s for s in spans}
    step_spans = [s for s in spans if s.name.startswith("step ")]
    assert all(s.parent_span_id == root.span_id for s in step_spans)
    call_spans = [s for s in spans if s.name.startswith("chat ")]
    seen = []
    for span in call_spans:
        a = attributes(span)
        parent = by_id[span.parent_span_id]
        assert parent.name == f"step {a['vivarium.step']}"
        assert a["gen_ai.operation.name"] == "chat"
        assert span.start_time_unix_nano >= parent.start_time_unix_nano
        assert span.end_time_unix_nano <= parent.end_time_unix_nano
        assert span.kind == 3  # CLIENT
        seen.append(
            (a["vivarium.step"], a.get("gen_ai.usage.input_tokens"),
             a.get("gen_ai.usage.output_tokens"), a["gen_ai.request.model"])
        )  # fmt: skip
        messages = json.loads(a["gen_ai.input.messages"])
        assert messages[0]["role"] == "system"
        assert json.loads(a["gen_ai.output.messages"])[0]["role"] == "assistant"
    assert sorted(seen) == sorted(calls)
    # The same run gives the same file; without content, no prompt or reply.
    assert run.to_otel() == request
    bare = parsed(run.to_otel(content=False))
    names = {kv.key for s in bare.resource_spans[0].scope_spans[0].spans for kv in s.attributes}
    assert "gen_ai.input.messages" not in names and "gen_ai.output.messages" not in names


def test_a_failed_call_is_an_error_span(run: Run, tmp_path: Path) -> None:
    copy = tmp_path / "failed.sqlite"
    shutil.copyfile(run.path, copy)
    con = sqlite3.connect(copy)
    con.execute("UPDATE llm_calls SET error = 'APITimeoutError: no answer' WHERE id = 1")
    con.commit()
    con.close()
    spans = parsed(Run.open(copy).to_otel()).resource_spans[0].scope_spans[0].spans
    failed = [s for s in spans if attributes(s).get("error.type")]
    assert len(failed) == 1 and attributes(failed[0])["error.type"] == "APITimeoutError"
    assert failed[0].status.code == 2


class _Collector(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []  # noqa: RUF012

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_vvm_export_writes_and_sends_it(run: Run, tmp_path: Path) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Collector.received.clear()
    try:
        out = tmp_path / "cli.json"
        done = subprocess.run(
            [sys.executable, "-m", "vivarium.cli", "export", str(run.path), "--otel", str(out),
             "--endpoint", f"http://127.0.0.1:{server.server_port}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    ((where, kind, body),) = _Collector.received
    # Sent as protobuf (opentelemetry-proto is installed here): the same trace as the file.
    assert (where, kind) == ("/v1/traces", "application/x-protobuf")
    assert ExportTraceServiceRequest.FromString(body) == parsed(json.loads(out.read_text()))
    none = subprocess.run(
        [sys.executable, "-m", "vivarium.cli", "export", str(run.path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert none.returncode == 2 and "--otel FILE" in none.stderr


def test_without_opentelemetry_proto_it_is_sent_as_json(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vivarium.trace.otel as otel

    monkeypatch.setattr(otel, "_protobuf", lambda request: None)
    server = http.server.HTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Collector.received.clear()
    try:
        request = run.to_otel(endpoint=f"http://127.0.0.1:{server.server_port}/v1/traces")
    finally:
        server.shutdown()
    ((where, kind, body),) = _Collector.received
    assert (where, kind) == ("/v1/traces", "application/json")
    assert json.loads(body) == request
