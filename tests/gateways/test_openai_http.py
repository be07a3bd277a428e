"""The direct OpenAI-compatible transport: what it sends, what it returns, when it is chosen.

Its promise is to be litellm's ``openai/`` provider without litellm's CPU: the same request
body reaches the server and the same normalized reply comes back. These tests hold it to that
against the project's fake server, byte for byte where it matters.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAIServer
from vivarium.gateways import LiteLLMGateway, LLMCallError, LLMResponse, collect_calls, openai_http
from vivarium.gateways.openai_http import WireError, decode_reply, status_error, wire_model

from .helpers import TOOLS, VOTE, force, messages

MODEL = "openai/fake-model"
VOLATILE = {"latency_ms", "raw"}  # timing, and the provider payload as each client holds it


def both(server: FakeOpenAIServer, **request: Any) -> tuple[LLMResponse, LLMResponse]:
    """The same request through litellm, then directly; the server sees both."""
    replies = []
    for transport in ("litellm", "direct"):
        gw = LiteLLMGateway(api_base=server.base_url, api_key="sk-same", transport=transport)
        replies.append(gw.chat(model=MODEL, **request))
    return replies[0], replies[1]


@pytest.mark.parametrize(
    "request_",
    [
        {"messages": messages("plain text, no tools")},
        {"messages": messages(), "tools": TOOLS, "temperature": 0.0, "max_tokens": 48, "seed": 7},
        {"messages": messages('ünïcode ✓ and "quotes"\n'), "tools": TOOLS + [VOTE]},
        {"messages": messages(), "tools": TOOLS + [VOTE], "tool_choice": force("vote")},
        {"messages": messages(), "tools": TOOLS, "tool_choice": "auto", "temperature": 0.7},
    ],
)
def test_both_transports_send_the_same_body_and_return_the_same_reply(
    request_: dict[str, Any],
) -> None:
    with FakeOpenAIServer(reply=lambda i, body: _reply_ignoring_index(body)) as server:
        via_litellm, direct = both(server, **request_)
        bodies = server.requests
        headers = server.headers
    assert bodies[0] == bodies[1]
    assert list(bodies[0]) == list(bodies[1])  # same fields, in the same order
    assert headers[0]["authorization"] == headers[1]["authorization"] == "Bearer sk-same"
    assert via_litellm.model_dump(exclude=VOLATILE) == direct.model_dump(exclude=VOLATILE)
    assert (
        direct.raw is not None
        and direct.raw["choices"] == _reply_ignoring_index(bodies[1])["choices"]
    )


def _reply_ignoring_index(body: dict[str, Any]) -> dict[str, Any]:
    from tests.support.fake_openai import default_reply

    return default_reply(0, body)


@pytest.mark.parametrize("fault", ["bad_tool_args", "raw_newline_args", "unknown_tool", "empty"])
def test_odd_replies_normalize_the_same_way(fault: str) -> None:
    from tests.support.fake_openai import default_reply

    with FakeOpenAIServer(reply=lambda i, body: default_reply(0, body, fault=fault)) as server:
        via_litellm, direct = both(server, messages=messages(), tools=TOOLS)
    assert via_litellm.model_dump(exclude=VOLATILE) == direct.model_dump(exclude=VOLATILE)


def test_auto_goes_direct_only_for_openai_compatible_servers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    local = "http://127.0.0.1:9/v1"
    assert LiteLLMGateway(api_base=local).direct_model("openai/qwen") == "qwen"
    assert LiteLLMGateway(api_base=local).direct_model("hosted_vllm/org/m") == "org/m"
    assert LiteLLMGateway(api_base=local).direct_model("anthropic/claude") is None
    assert LiteLLMGateway(api_base=local).direct_model("ollama/llama3") is None
    assert LiteLLMGateway().direct_model("openai/gpt-4o-mini") is None  # no api_base: litellm
    extra = LiteLLMGateway(api_base=local, extra={"drop_params": True})
    assert extra.direct_model("openai/qwen") is None  # litellm-only options: litellm
    assert LiteLLMGateway(api_base=local, transport="litellm").direct_model("openai/q") is None
    assert LiteLLMGateway(transport="direct").direct_model("openai/gpt-4o") == "gpt-4o"
    provider = LiteLLMGateway(api_base=local, custom_llm_provider="openai")
    assert provider.direct_model("my-model") == "my-model"
    with pytest.raises(LLMCallError, match="openai/<name>") as info:
        LiteLLMGateway(transport="direct").direct_model("anthropic/claude")
    assert info.value.kind == "config"
    with pytest.raises(ValueError, match="transport must be one of"):
        LiteLLMGateway(transport="fast")


def test_direct_without_api_base_uses_openai_and_the_environment_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-1234")
        reply = LiteLLMGateway(transport="direct").chat(model="openai/m", messages=messages())
        assert server.headers[0]["authorization"] == "Bearer sk-from-env-1234"
        assert server.requests[0]["model"] == "m"
    assert reply.content == "fake text reply 0"


def test_direct_extra_fields_join_the_body() -> None:
    with FakeOpenAIServer() as server:
        gw = LiteLLMGateway(api_base=server.base_url, transport="direct", extra={"top_p": 0.5})
        gw.chat(model=MODEL, messages=messages())
    assert server.requests[0]["top_p"] == 0.5


def test_an_echoed_key_is_scrubbed_from_content_and_raw() -> None:
    def echo(index: int, body: dict[str, Any]) -> dict[str, Any]:
        reply = _reply_ignoring_index({"messages": body["messages"]})
        reply["choices"][0]["message"]["content"] = "your key is sk-ECHO-9999-key"
        return reply

    with FakeOpenAIServer(reply=echo) as server:
        gw = LiteLLMGateway(api_base=server.base_url, api_key="sk-ECHO-9999-key")
        reply = gw.chat(model=MODEL, messages=messages())
    assert reply.content == "your key is ***"
    assert "sk-ECHO" not in json.dumps(reply.model_dump(mode="json"))


@pytest.mark.parametrize(
    ("status", "name", "kind", "retryable"),
    [
        (400, "BadRequestError", "bad_request", False),
        (401, "AuthenticationError", "auth", False),
        (403, "PermissionDeniedError", "auth", False),
        (404, "NotFoundError", "not_found", False),
        (408, "APIStatusError", "timeout", True),
        (418, "APIStatusError", "bad_request", False),
        (422, "UnprocessableEntityError", "bad_request", False),
        (429, "RateLimitError", "rate_limit", True),
        (500, "InternalServerError", "server_error", True),
        (502, "BadGatewayError", "server_error", True),
        (503, "ServiceUnavailableError", "server_error", True),
        (529, "InternalServerError", "server_error", True),
    ],
)
def test_error_statuses_are_named_and_classified_like_the_openai_client(
    status: int, name: str, kind: str, retryable: bool
) -> None:
    body = json.dumps({"error": {"message": "went\nwrong", "type": "x"}}).encode()
    error = status_error(status, body, {"Retry-After": "2"})
    assert error.description == f"{name}: went wrong"
    assert (error.kind, error.retryable, error.status_code) == (kind, retryable, status)
    assert error.headers["retry-after"] == "2"


def test_error_bodies_that_are_not_openai_shaped_still_give_one_line() -> None:
    html = status_error(502, b"<html>\n<b>Bad gateway</b>\n</html>", {})
    assert html.description == "BadGatewayError: <html> <b>Bad gateway</b> </html>"
    empty = status_error(500, b"", {})
    assert empty.description == "InternalServerError: HTTP 500"
    text_error = status_error(400, b'{"error": "plain string"}', {})
    assert text_error.description == "BadRequestError: plain string"
    long = status_error(500, b"x" * 5000, {})
    assert len(long.description) < 400 and long.description.endswith("...")


@pytest.mark.parametrize("data", [b"<html>", b"", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_a_200_reply_that_is_not_a_json_object_is_a_retryable_bad_response(data: bytes) -> None:
    with pytest.raises(WireError) as info:
        decode_reply(200, data, {})
    assert info.value.kind == "bad_response" and info.value.retryable
    assert "(reply is not JSON)" in info.value.description


def test_wire_model_names() -> None:
    assert wire_model("openai/a/b") == "a/b"
    assert wire_model("openai/") is None
    assert wire_model("gpt-4o") is None
    assert wire_model("gpt-4o", "hosted_vllm") == "gpt-4o"
    assert wire_model("x", "anthropic") is None


def test_asyncio_run_closes_its_session() -> None:
    with FakeOpenAIServer() as server:
        gw = LiteLLMGateway(api_base=server.base_url, transport="direct")

        async def twice() -> list[LLMResponse]:
            return list(
                await asyncio.gather(
                    gw.achat(model=MODEL, messages=messages("a")),
                    gw.achat(model=MODEL, messages=messages("b")),
                )
            )

        # Sessions of other loops (Vivarium's background loop, used by earlier tests) stay.
        before = set(openai_http._sessions)
        for _ in range(2):  # a second loop gets a session of its own
            assert all(r.content for r in asyncio.run(twice()))
            assert set(openai_http._sessions) == before  # closed with the loop, none left


def test_the_background_loops_session_is_closed_at_exit() -> None:
    """Vivarium's own event loop lives until exit; the exit hook closes its session then."""
    from vivarium.engine.deciding import run_async

    with FakeOpenAIServer() as server:
        gw = LiteLLMGateway(api_base=server.base_url, transport="direct")
        assert run_async(gw.achat(model=MODEL, messages=messages())).content
        open_sessions = [s for s, _ in openai_http._sessions.values() if not s.closed]
        assert open_sessions  # kept for the next step's calls
        openai_http._close_sessions_at_exit()
        assert all(s.closed for s in open_sessions)
        # and a later call simply opens a new one
        assert run_async(gw.achat(model=MODEL, messages=messages("again"))).content


def test_blocking_calls_keep_one_connection_alive() -> None:
    with FakeOpenAIServer() as server:
        gw = LiteLLMGateway(api_base=server.base_url, transport="direct")
        with collect_calls() as records:
            gw.chat(model=MODEL, messages=messages("first"))
            (first,) = [c for k, c in openai_http._local.pool.items() if k[2] == server.port]
            for i in range(4):
                gw.chat(model=MODEL, messages=messages(str(i)))
            (last,) = [c for k, c in openai_http._local.pool.items() if k[2] == server.port]
    assert len(records) == 5 and all(r.error is None for r in records)
    assert last is first and server.request_count == 5


def test_auto_leaves_proxied_servers_to_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    remote = LiteLLMGateway(api_base="https://llm.example.org/v1")
    local = LiteLLMGateway(api_base="http://127.0.0.1:8000/v1")
    assert remote.direct_model("openai/m") == "m"
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.org:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert remote.direct_model("openai/m") is None  # through the proxy: litellm's client
    assert local.direct_model("openai/m") == "m"  # NO_PROXY: direct
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example.org:3128")
    monkeypatch.delenv("NO_PROXY")
    assert local.direct_model("openai/m") is None


@pytest.mark.parametrize("blocking", [True, False])
def test_a_server_restart_between_calls_costs_no_failed_attempt(blocking: bool) -> None:
    """A kept-alive connection the server dropped is replaced, not reported as a fault."""
    from vivarium.engine.deciding import run_async

    def call(gw: LiteLLMGateway, text: str) -> LLMResponse:
        if blocking:
            return gw.chat(model=MODEL, messages=messages(text))
        return run_async(gw.achat(model=MODEL, messages=messages(text)))

    first = FakeOpenAIServer().start()
    port = first.port
    gw = LiteLLMGateway(api_base=first.base_url, transport="direct")  # one attempt, no retry
    assert call(gw, "before").content
    first.stop()  # the pooled connection is now dead
    with FakeOpenAIServer(port=port) as second, collect_calls() as records:
        reply = call(gw, "after")
        assert second.request_count == 1
    assert reply.content and [r.error for r in records] == [None]
