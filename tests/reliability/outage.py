"""An LLM server that goes away mid-run and comes back: the project's fake OpenAI server with
replies that depend only on the request (so a resumed run can equal an uninterrupted one), and
a watcher that stops it once it has answered a given number of requests."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.fake_openai import FakeOpenAIServer


def deterministic_reply(index: int, body: dict[str, Any]) -> dict[str, Any]:
    """A forced ``post_message`` call whose content is a digest of the prompt: the same
    request gets the same reply in any order, from any server process."""
    text = json.dumps(body.get("messages"), sort_keys=True)
    tag = hashlib.sha256(text.encode()).hexdigest()[:10]
    arguments = json.dumps({"content": f"msg {tag}"})
    return {
        "id": f"chatcmpl-{tag}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": body.get("model") or "fake",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{tag}",
                            "type": "function",
                            "function": {"name": "post_message", "arguments": arguments},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    }


def server(port: int = 0, **kwargs: Any) -> FakeOpenAIServer:
    """A started fake server answering ``deterministic_reply`` (on ``port``; 0: any free)."""
    return FakeOpenAIServer(reply=deterministic_reply, port=port, **kwargs).start()


def stop_after(srv: FakeOpenAIServer, requests: int) -> threading.Thread:
    """Stop ``srv`` (as a killed server: connections dropped) once it has seen ``requests``
    more requests.

    The cut is exact: from that request on, every connection is dropped mid-reply at once (a
    fault rule, decided in the request's own thread), and a watcher then stops the server, so
    later connections are refused. A watcher alone would stop it a little late on a busy
    machine, and a short run could even finish first.
    """
    target = srv.request_count + requests
    srv.faults = lambda index, body: "close_mid_body" if index >= target else None

    def watch() -> None:
        deadline = time.monotonic() + 120
        while srv.request_count < target and time.monotonic() < deadline:
            time.sleep(0.002)
        srv.stop()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def table(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# What an uninterrupted run and an interrupted-then-resumed one must share, row for row. The
# llm_calls rows are compared without the latency, the one thing a real network decides.
SAME = {
    "runs": "SELECT run_id, name, world, policy, seed, agents, steps, scheduling, config_json, "
    "status, steps_done, error FROM runs",
    "agents": "SELECT * FROM agents ORDER BY agent_idx",
    "steps": "SELECT * FROM steps ORDER BY step",
    "actions": "SELECT * FROM actions ORDER BY id",
    "messages": "SELECT * FROM messages ORDER BY id",
    "llm_calls": "SELECT step, agent_idx, attempt, model, request_hash, prompt_tokens, "
    "completion_tokens, cost, cache_hit, finish_reason, error FROM llm_calls ORDER BY id",
    "transitions": "SELECT * FROM transitions ORDER BY id",
}


def assert_same_run(expected: Path, actual: Path) -> None:
    for name, sql in SAME.items():
        want, got = table(expected, sql), table(actual, sql)
        assert len(got) == len(want), f"{name}: {len(got)} rows, expected {len(want)}"
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            assert a == b, f"{name} row {i} differs:\n  {a}\n  {b}"
