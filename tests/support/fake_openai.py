"""A local OpenAI-compatible chat server for tests: scripted replies, latency and faults.

It runs the stdlib ``ThreadingHTTPServer`` on 127.0.0.1 with an OS-assigned port in a daemon
thread, so tests need no network, no extra dependency and no real model::

    with FakeOpenAIServer(latency_ms=100, faults=["500", None]) as server:
        gateway = LiteLLMGateway(api_base=server.base_url)
        gateway.chat(model="openai/fake", messages=[...])
        assert server.request_count == 2

Faults (by request index, from a schedule, a cycling schedule or a callable):

``"500"``, ``"502"``, ``"503"``, ``"400"``, ``"401"``, ``"404"``
    an error status with an OpenAI-style JSON error body;
``"429"``
    rate limited, with a ``Retry-After`` header when ``retry_after`` is set;
``"timeout"``
    sleep ``timeout_s`` before answering (longer than the client's timeout);
``"close_mid_body"``
    headers promise more bytes than are sent, then the connection closes;
``"not_json"``
    a 200 reply whose body is not JSON;
``"bad_tool_args"`` / ``"raw_newline_args"``
    tool-call arguments that are not valid JSON / that hold a raw newline inside a string;
``"unknown_tool"``
    a tool call to a tool the request did not offer;
``"empty"``
    no content and no tool calls;
``"wrong_types"``
    well-formed arguments with the wrong types (``{"content": 42}``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Fault = str | None
FaultRule = Sequence[Fault] | Callable[[int, dict[str, Any]], Fault]
ReplyFn = Callable[[int, dict[str, Any]], dict[str, Any]]

ERROR_STATUS = {"400": 400, "401": 401, "404": 404, "429": 429, "500": 500, "502": 502, "503": 503}


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a handler stuck in a "timeout" fault never blocks shutdown
    request_queue_size = 512  # many agents connect at once; the default backlog is 5


class FakeOpenAIServer:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint with scripted faults."""

    def __init__(
        self,
        *,
        latency_ms: float = 0.0,
        reply: ReplyFn | None = None,
        faults: FaultRule | None = None,
        cycle: bool = False,
        retry_after: float | None = None,
        timeout_s: float = 5.0,
        model: str = "fake-model",
        port: int = 0,
    ) -> None:
        self.latency_ms = latency_ms
        self.requested_port = port  # 0: any free port
        self.reply_fn = reply
        self.faults = faults
        self.cycle = cycle
        self.retry_after = retry_after
        self.timeout_s = timeout_s
        self.model = model
        self.requests: list[dict[str, Any]] = []  # JSON bodies, in arrival order
        self.headers: list[dict[str, str]] = []  # request headers, in arrival order
        self.replies: list[dict[str, Any] | None] = []  # what each request got (None: a fault)
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections: set[Any] = set()  # open client sockets, closed by stop()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        self._stop.clear()
        self._httpd = _Server(("127.0.0.1", self.requested_port), _make_handler(self))

        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes handlers sleeping in "timeout" or latency
        with self._lock:  # two stops at once (a test's and an outage watcher's): one closes
            httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        with self._lock:  # a stopped server drops its kept-alive connections, as a real one does
            connections, self.connections = list(self.connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    # -- behaviour ---------------------------------------------------------------------------
    def _register(self, body: dict[str, Any], headers: dict[str, str]) -> int:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.headers.append(headers)
            self.replies.append(None)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return index

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def fault_for(self, index: int, body: dict[str, Any]) -> Fault:
        rule = self.faults
        if rule is None:
            return None
        if callable(rule):
            return rule(index, body)
        if not rule:
            return None
        if self.cycle:
            return rule[index % len(rule)]
        return rule[index] if index < len(rule) else None

    def build_reply(self, index: int, body: dict[str, Any], fault: Fault) -> dict[str, Any]:
        if self.reply_fn is not None and fault is None:
            return self.reply_fn(index, body)
        return default_reply(index, body, fault=fault, model=self.model)

    def sleep(self, seconds: float) -> bool:
        """Sleep unless the server stops first; False when it stopped."""
        return not self._stop.wait(seconds)


def _tool_name(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return (choice.get("function") or {}).get("name")
    tools = body.get("tools") or []
    if not tools or choice == "none":
        return None
    return tools[0].get("function", {}).get("name")


def _arguments_for(body: dict[str, Any], name: str, index: int) -> dict[str, Any]:
    if name == "post_message":
        return {"content": f"fake reply {index}"}
    for tool in body.get("tools") or []:
        fn = tool.get("function", {})
        if fn.get("name") != name:
            continue
        params = fn.get("parameters") or {}
        props = params.get("properties") or {}
        args: dict[str, Any] = {}
        for key in params.get("required") or []:
            kind = (props.get(key) or {}).get("type")
            args[key] = index if kind in ("integer", "number") else f"{key} {index}"
        return args
    return {}


def default_reply(
    index: int, body: dict[str, Any], *, fault: Fault = None, model: str = "fake-model"
) -> dict[str, Any]:
    """A chat completion: a tool call to the forced or first tool, else plain text."""
    text = sum(len(str(m.get("content") or "")) for m in body.get("messages") or [])
    usage = {"prompt_tokens": text // 4 + 3, "completion_tokens": 7 + index % 5}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    name = _tool_name(body)
    if fault == "empty":
        message["content"] = ""
    elif fault == "unknown_tool":
        name = "launch_rockets"
    if fault != "empty" and name is not None:
        arguments = json.dumps(_arguments_for(body, name, index))
        if fault == "bad_tool_args":
            arguments = '{"content": "unterminated'
        elif fault == "raw_newline_args":
            arguments = '{"content": "line one\nline two"}'
        elif fault == "wrong_types":
            arguments = json.dumps({"content": 42})
        message["tool_calls"] = [
            {
                "id": f"call_{index:04d}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ]
        finish = "tool_calls"
    elif fault != "empty":
        message["content"] = f"fake text reply {index}"
    return {
        "id": f"chatcmpl-{index:06d}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": body.get("model") or model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
        # client's delayed ACK add ~40 ms to every reply.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            pass

        def setup(self) -> None:
            super().setup()
            with server._lock:
                server.connections.add(self.connection)

        def finish(self) -> None:
            with server._lock:
                server.connections.discard(self.connection)
            super().finish()

        def _send_json(
            self, status: int, payload: Any, extra_headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (extra_headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self.path.rstrip("/") == "/v1/models":
                models = [{"id": server.model, "object": "model", "owned_by": "fake"}]
                self._send_json(200, {"object": "list", "data": models})
            else:
                self._send_json(404, {"error": {"message": "not found", "type": "not_found"}})

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send_json(404, {"error": {"message": "not found", "type": "not_found"}})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send_json(400, {"error": {"message": "bad JSON", "type": "invalid"}})
                return
            index = server._register(body, {k.lower(): v for k, v in self.headers.items()})
            try:
                self._answer(index, body)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                self.close_connection = True
            finally:
                server._done()

        def _answer(self, index: int, body: dict[str, Any]) -> None:
            fault = server.fault_for(index, body)
            if server.latency_ms and not server.sleep(server.latency_ms / 1000):
                return
            if fault == "timeout":
                server.sleep(server.timeout_s)
                self.close_connection = True
                return
            if fault in ERROR_STATUS:
                status = ERROR_STATUS[fault]
                headers = {}
                if fault == "429" and server.retry_after is not None:
                    headers["Retry-After"] = f"{server.retry_after:g}"
                message = f"injected {fault}"
                if fault == "401":  # some servers echo the key they rejected: clients must scrub it
                    message += f" (rejected {self.headers.get('Authorization')})"
                error = {"message": message, "type": "injected", "code": fault}
                self._send_json(status, {"error": error}, headers)
                return
            if fault == "close_mid_body":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "4096")
                self.end_headers()
                self.wfile.write(b'{"id": "chatcmpl-trunc", "choices": [')
                self.wfile.flush()
                self.close_connection = True
                return
            if fault == "not_json":
                data = b"<html>this is not JSON</html>"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            reply = server.build_reply(index, body, fault)
            with server._lock:
                server.replies[index] = reply
            self._send_json(200, reply)

    return Handler


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes (for tests of background work)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def main(argv: list[str] | None = None) -> None:
    """Serve from its own process (benchmarks: the server must not share the client's GIL).

    Prints the base URL on one line, then serves until SIGTERM or SIGINT.
    """
    import argparse
    import signal

    parser = argparse.ArgumentParser(description="the project's fake OpenAI-compatible server")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    with FakeOpenAIServer(latency_ms=args.latency_ms) as server:
        print(server.base_url, flush=True)
        signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    main()
