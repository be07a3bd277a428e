"""A model's first call through litellm, made before the run on a throwaway local server.

On its first call litellm imports the OpenAI client and its provider code (~2 s, hundreds of
modules), and more for requests that carry tools. Made when a run's gateway is prepared, against
a server on 127.0.0.1 that answers every request at once (``CannedServer``), that time is in no
recorded latency and stalls no call in flight. Only for OpenAI-compatible models, which honour
``api_base``: nothing leaves this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any

from vivarium.gateways.base import LLMRequest


def warm_up(caller: Any, kwargs: dict[str, Any]) -> None:
    """One blocking and one async call of ``caller`` (litellm, or a Router) with ``kwargs``.

    ``kwargs`` aim at a ``CannedServer``; a failure here changes nothing and is ignored.
    """
    with contextlib.suppress(Exception):
        caller.completion(**kwargs)
    # A loop of its own, in a thread: the caller's thread may be running one (Jupyter).
    thread = threading.Thread(
        target=lambda: asyncio.run(_quietly(caller.acompletion(**kwargs))), daemon=True
    )
    thread.start()
    thread.join(timeout=60)


def warm_up_request(model: str) -> LLMRequest:
    """A request of the shape agents send (a tool, a forced choice).

    litellm imports some of its code only for requests that carry tools (~2 s more).
    """
    tool = {
        "type": "function",
        "function": {
            "name": "noop",
            "description": "Do nothing.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    return LLMRequest(
        model=model,
        messages=[{"role": "user", "content": "."}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "noop"}},
        temperature=0.0,
        max_tokens=1,
        seed=0,
    )


async def _quietly(call: Any) -> None:
    with contextlib.suppress(Exception):
        await call


_CANNED_REPLY = json.dumps(
    {
        "id": "warm-up",
        "object": "chat.completion",
        "created": 0,
        "model": "warm-up",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()


class CannedServer:
    """A chat-completions endpoint on 127.0.0.1 that answers every POST with ``_CANNED_REPLY``.

    For ``warm_up``; the context gives its base URL.
    """

    def __enter__(self) -> str:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(_CANNED_REPLY)))
                self.end_headers()
                self.wfile.write(_CANNED_REPLY)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
