"""The fake OpenAI server itself: endpoints, fault schedules, and a quick, clean shutdown."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

from tests.support.fake_openai import FakeOpenAIServer, wait_until


def post(url: str, body: dict, timeout: float = 5.0) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


BODY = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}


def test_models_endpoint_and_default_reply() -> None:
    with FakeOpenAIServer(model="tiny") as server:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as reply:
            models = json.loads(reply.read())
        assert [m["id"] for m in models["data"]] == ["tiny"]
        status, reply = post(server.base_url, BODY)
    assert status == 200
    assert reply["choices"][0]["message"]["content"] == "fake text reply 0"
    assert reply["usage"]["total_tokens"] == (
        reply["usage"]["prompt_tokens"] + reply["usage"]["completion_tokens"]
    )
    assert server.requests == [BODY]
    assert server.request_count == 1  # GET /models is not a chat request


def test_fault_schedules_cycle_and_callables() -> None:
    with FakeOpenAIServer(faults=["500", None], cycle=True, retry_after=3) as server:
        codes = [post(server.base_url, BODY)[0] for _ in range(4)]
    assert codes == [500, 200, 500, 200]

    def rule(index: int, body: dict) -> str | None:
        return "429" if body["messages"][0]["content"] == "limit me" else None

    limited = {**BODY, "messages": [{"role": "user", "content": "limit me"}]}
    with FakeOpenAIServer(faults=rule, retry_after=3) as server:
        assert post(server.base_url, limited)[0] == 429
        assert post(server.base_url, BODY)[0] == 200
        request = urllib.request.Request(
            f"{server.base_url}/chat/completions", data=json.dumps(limited).encode(), method="POST"
        )
        try:
            urllib.request.urlopen(request, timeout=5)
        except urllib.error.HTTPError as exc:
            assert exc.headers["Retry-After"] == "3"
        else:  # pragma: no cover
            raise AssertionError("expected a 429")


def test_stop_is_quick_even_with_a_request_hanging() -> None:
    server = FakeOpenAIServer(faults=["timeout"], timeout_s=30).start()
    errors: list[BaseException] = []

    def hang() -> None:
        try:
            post(server.base_url, BODY, timeout=10)
        except Exception as exc:  # the connection closes when the server stops
            errors.append(exc)

    client = threading.Thread(target=hang, daemon=True)
    client.start()
    assert wait_until(lambda: server.request_count == 1)
    started = time.perf_counter()
    server.stop()
    assert time.perf_counter() - started < 2.0
    client.join(timeout=5)
    assert not client.is_alive()
    assert errors  # the hanging request got no reply
