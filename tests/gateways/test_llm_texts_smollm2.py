"""Against a real model (llama.cpp serving SmolLM2): the trace keeps what went over the wire.

A recording proxy stands between the run and the server and keeps the bytes of every request
and reply; the trace's texts must equal them (as canonical JSON), through either transport.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.llama_server import MODEL_NAME, llama_server, llama_server_available
from vivarium import Experiment
from vivarium.seeding import canonical_json

pytestmark = pytest.mark.llm_server


class RecordingProxy:
    """Forwards every POST to ``upstream`` and keeps (request bytes, status, reply bytes)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.exchanges: list[tuple[bytes, int, bytes]] = []
        self._lock = threading.Lock()

    def __enter__(self) -> str:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                sent = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                up = http.client.HTTPConnection(
                    proxy.upstream.hostname, proxy.upstream.port, timeout=300
                )
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                up.request("POST", self.path, body=sent, headers=headers)
                answer = up.getresponse()
                data = answer.read()
                up.close()
                with proxy._lock:
                    proxy.exchanges.append((sent, answer.status, data))
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{self.upstream.path}"

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@pytest.fixture(scope="module")
def smollm2() -> Iterator[str]:
    reason = llama_server_available()
    if reason:
        if os.environ.get("VIVARIUM_REQUIRE_LLM_SERVER"):
            pytest.fail(reason)
        pytest.skip(reason)
    with llama_server() as base:
        yield base


def reply_of(status: int, data: bytes) -> dict[str, Any]:
    """The reply dict of what the server sent: its first choice, or its error body."""
    if status >= 400:
        text = data.decode()
        return {"content": None, "tool_calls": None, "finish_reason": None, "error": text}
    choice = json.loads(data)["choices"][0]
    return {
        "content": choice["message"].get("content"),
        "tool_calls": choice["message"].get("tool_calls") or None,
        "finish_reason": choice["finish_reason"],
    }


@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_a_real_models_prompts_and_replies_are_stored_as_exchanged(
    transport: str, smollm2: str, tmp_path: Path
) -> None:
    proxy = RecordingProxy(smollm2)
    with proxy as base:
        llm = {
            "model": MODEL_NAME,
            "api_base": base,
            "transport": transport,
            "force_tool": True,
            "max_tokens": 40,
            "on_llm_error": "fallback",
        }
        run = Experiment(name="real", policy="cognitive", agents=3, steps=3, seed=42, llm=llm).run(
            tmp_path / "trace.sqlite", progress=False
        )
    exchanges = run.llm_exchanges()
    assert len(exchanges) == len(proxy.exchanges) >= 9
    stored = Counter(
        (canonical_json(q), canonical_json(r))
        for q, r in zip(exchanges["request"], exchanges["reply"], strict=True)
    )
    wire = Counter(
        (canonical_json(json.loads(sent)), canonical_json(reply_of(status, data)))
        for sent, status, data in proxy.exchanges
    )
    assert stored == wire
