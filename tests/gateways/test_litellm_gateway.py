"""LiteLLMGateway against the project's fake OpenAI-compatible server: replies, faults, keys."""

from __future__ import annotations

import asyncio
import json
import pickle
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fake_openai import FakeOpenAIServer
from vivarium.gateways import (
    LiteLLMGateway,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    RetryGateway,
    collect_calls,
)
from vivarium.gateways.litellm_gateway import parse_arguments, scrub
from vivarium.gateways.transports.via_litellm import litellm_kwargs

from .helpers import TOOLS, VOTE, force, messages

MODEL = "openai/fake-model"
KEY = "sk-test-SECRET-4242-abcdef"


@pytest.fixture(params=["litellm", "direct"])
def transport(request: pytest.FixtureRequest) -> str:
    """Every behaviour below holds through litellm and through the direct HTTP transport."""
    return str(request.param)


def gateway(
    server: FakeOpenAIServer, transport: str, *, retries: int = 2, sleep=None, **kwargs
) -> RetryGateway:
    """The provider under the retry layer, as a run's stack has it (short backoffs)."""
    options = {"api_key": KEY, "timeout": 5.0}
    provider = LiteLLMGateway(
        api_base=server.base_url, transport=transport, **{**options, **kwargs}
    )
    return RetryGateway(provider, retries=retries, backoff=0.01, max_backoff=0.05, sleep=sleep)


def chat(
    gw: RetryGateway | LiteLLMGateway, text: str = "hello", **kwargs
) -> tuple[LLMResponse, list]:
    with collect_calls() as records:
        reply = gw.chat(model=MODEL, messages=messages(text), tools=TOOLS, **kwargs)
    return reply, records


def test_normal_reply_is_normalized(server: FakeOpenAIServer, transport: str) -> None:
    reply, records = chat(gateway(server, transport), seed=3, temperature=0.0, max_tokens=50)
    served = server.replies[0]
    assert served is not None
    assert reply.finish_reason == "tool_calls"
    (call,) = reply.tool_calls
    assert call.name == "post_message" and call.id == "call_0000"
    assert call.arguments == {"content": "fake reply 0"}
    assert call.parse_error is None
    assert reply.usage.prompt_tokens == served["usage"]["prompt_tokens"]
    assert reply.usage.completion_tokens == served["usage"]["completion_tokens"]
    assert reply.usage.total_tokens == served["usage"]["total_tokens"]
    assert reply.cost is None  # a model LiteLLM has no price for: unknown, not zero
    assert reply.model == MODEL
    assert reply.latency_ms > 0
    assert reply.raw is not None and reply.raw["choices"][0]["finish_reason"] == "tool_calls"
    # what reached the server: our parameters, the model name without the provider prefix
    body = server.requests[0]
    assert body["model"] == "fake-model"
    assert body["seed"] == 3 and body["temperature"] == 0.0 and body["max_tokens"] == 50
    assert body["tools"][0]["function"]["name"] == "post_message"
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"
    assert len(records) == 1
    (record,) = records
    assert record.attempt == 1 and record.error is None
    assert record.prompt_tokens == served["usage"]["prompt_tokens"]
    assert record.request_hash == reply.request_hash
    assert record.latency_ms == reply.latency_ms


def test_forced_tool_and_plain_text(server: FakeOpenAIServer, transport: str) -> None:
    gw = gateway(server, transport)
    forced = gw.chat(
        model=MODEL, messages=messages(), tools=TOOLS + [VOTE], tool_choice=force("vote")
    )
    assert forced.tool_calls[0].name == "vote"
    assert forced.tool_calls[0].arguments == {"candidate": "candidate 0", "weight": 0}
    assert server.requests[0]["tool_choice"] == force("vote")
    text = gw.chat(model=MODEL, messages=messages())
    assert text.content == "fake text reply 1" and text.tool_calls == []
    assert text.finish_reason == "stop"


def test_retries_500_and_429_then_succeeds(transport: str) -> None:
    slept: list[float] = []
    with FakeOpenAIServer(faults=["500", "429"], retry_after=1.5) as server:
        reply, records = chat(gateway(server, transport, sleep=slept.append))
    assert server.request_count == 3
    assert reply.tool_calls[0].arguments == {"content": "fake reply 2"}
    assert [r.attempt for r in records] == [1, 2, 3]
    assert records[0].error.startswith("InternalServerError")
    assert records[1].error.startswith("RateLimitError")
    assert records[2].error is None and records[2].finish_reason == "tool_calls"
    assert all(r.latency_ms is not None and r.latency_ms > 0 for r in records)
    assert slept[0] <= 0.05  # backoff, capped
    assert slept[1] == 1.5  # the server's Retry-After


def test_async_retry_after_is_honoured(transport: str) -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    async def main(server: FakeOpenAIServer) -> LLMResponse:
        return await gateway(server, transport, sleep=fake_sleep).achat(
            model=MODEL, messages=messages()
        )

    with FakeOpenAIServer(faults=["429"], retry_after=2.0) as server:
        reply = asyncio.run(main(server))
    assert reply.content == "fake text reply 1"
    assert slept == [2.0]


def test_gives_up_after_num_retries(transport: str) -> None:
    with FakeOpenAIServer(faults=["503"], cycle=True) as server:
        gw = gateway(server, transport, retries=2)
        with collect_calls() as records, pytest.raises(LLMCallError) as info:
            gw.chat(model=MODEL, messages=messages())
    error = info.value
    assert server.request_count == 3
    assert error.retryable is True and error.kind == "server_error" and error.status_code == 503
    message = str(error)
    assert "\n" not in message
    assert message.startswith(f"{MODEL}: ServiceUnavailableError") and "after 3 attempts" in message
    assert [r.attempt for r in records] == [1, 2, 3] and all(r.error for r in records)


@pytest.mark.parametrize(
    ("fault", "kind"), [("400", "bad_request"), ("401", "auth"), ("404", "not_found")]
)
def test_client_errors_are_not_retried(fault: str, kind: str, transport: str) -> None:
    with (
        FakeOpenAIServer(faults=[fault], cycle=True) as server,
        collect_calls() as records,
        pytest.raises(LLMCallError) as info,
    ):
        gateway(server, transport, retries=3).chat(model=MODEL, messages=messages())
    assert server.request_count == 1
    assert info.value.retryable is False and info.value.kind == kind
    assert "after 1 attempt)" in str(info.value)
    assert len(records) == 1


def test_timeout_is_retried(transport: str) -> None:
    with FakeOpenAIServer(faults=["timeout"], timeout_s=3.0) as server:
        started = time.perf_counter()
        reply, records = chat(gateway(server, transport, timeout=0.3))
        elapsed = time.perf_counter() - started
    assert reply.tool_calls[0].name == "post_message"
    assert server.request_count == 2
    assert records[0].error.startswith("Timeout")
    assert records[0].latency_ms >= 250
    assert elapsed < 2.5  # the client gave up after its timeout, not after the server's sleep


def test_timeout_every_time_gives_a_timeout_error(transport: str) -> None:
    with (
        FakeOpenAIServer(faults=["timeout"], cycle=True, timeout_s=3.0) as server,
        pytest.raises(LLMCallError) as info,
    ):
        gateway(server, transport, timeout=0.2, retries=1).chat(model=MODEL, messages=messages())
    assert info.value.kind == "timeout" and info.value.retryable
    assert server.request_count == 2


def test_not_json_and_truncated_bodies_are_retried_and_told_apart(transport: str) -> None:
    with FakeOpenAIServer(faults=["not_json", "close_mid_body"]) as server:
        reply, records = chat(gateway(server, transport))
    assert reply.tool_calls[0].arguments == {"content": "fake reply 2"}
    assert "not JSON" in records[0].error
    assert "connection broken" in records[1].error
    assert records[0].error != records[1].error


def test_bad_tool_arguments_are_kept_not_raised(transport: str) -> None:
    faults = ["bad_tool_args", "raw_newline_args", "wrong_types", "unknown_tool", "empty"]
    with FakeOpenAIServer(faults=faults) as server:
        gw = gateway(server, transport)
        bad, newline, wrong, unknown, empty = (chat(gw, str(i))[0] for i in range(5))
    (call,) = bad.tool_calls
    assert call.arguments == {}
    assert call.raw_arguments == '{"content": "unterminated'
    assert call.parse_error and "not valid JSON" in call.parse_error
    # small models put raw newlines in JSON strings: accepted
    assert newline.tool_calls[0].arguments == {"content": "line one\nline two"}
    assert newline.tool_calls[0].parse_error is None
    # types are the world's business: passed through as sent
    assert wrong.tool_calls[0].arguments == {"content": 42}
    assert unknown.tool_calls[0].name == "launch_rockets"
    assert empty.tool_calls == [] and empty.content == ""
    assert server.request_count == 5  # none of these is retried


def test_async_achat_retries_and_runs_concurrently(transport: str) -> None:
    async def main(server: FakeOpenAIServer) -> list[tuple[LLMResponse, list]]:
        gw = gateway(server, transport)

        async def one(i: int) -> tuple[LLMResponse, list]:
            with collect_calls() as records:
                reply = await gw.achat(model=MODEL, messages=messages(f"agent {i}"), tools=TOOLS)
            return reply, records

        return await asyncio.gather(*(one(i) for i in range(6)))

    with FakeOpenAIServer(latency_ms=300, faults=["500"]) as server:
        started = time.perf_counter()
        results = asyncio.run(main(server))
        elapsed = time.perf_counter() - started
    assert server.request_count == 7
    assert all(reply.tool_calls[0].name == "post_message" for reply, _ in results)
    assert sorted(len(records) for _, records in results) == [1, 1, 1, 1, 1, 2]
    failed = next(records for _, records in results if len(records) == 2)
    assert failed[0].error.startswith("InternalServerError") and failed[1].error is None
    assert server.max_in_flight >= 3  # calls overlapped
    assert elapsed < 6 * 0.3 + 1.5  # far less than one at a time


def test_api_key_never_leaks(monkeypatch: pytest.MonkeyPatch, transport: str) -> None:
    env_key = "sk-env-ONLY-7777-zzzz"
    monkeypatch.setenv("OPENAI_API_KEY", env_key)
    # the 401 reply echoes the Authorization header it rejected
    with FakeOpenAIServer(faults=["401", "500", "500", "500"]) as server:
        gw = gateway(server, transport, retries=2)
        with collect_calls() as records, pytest.raises(LLMCallError) as auth:
            gw.chat(model=MODEL, messages=messages())
        with collect_calls() as more, pytest.raises(LLMCallError) as server_error:
            gw.chat(model=MODEL, messages=messages("again"))
        ok = gw.chat(model=MODEL, messages=messages("fine"))
        env_gw = LiteLLMGateway(api_base=server.base_url, transport=transport, api_key=env_key)
        env_reply = env_gw.chat(model=MODEL, messages=messages("env"))
    assert "***" in str(auth.value)  # the echoed key was scrubbed
    texts = [
        str(auth.value),
        repr(auth.value),
        str(server_error.value),
        repr(gw),
        repr(env_gw),
        str(vars(gw)),
        json.dumps([r.error for r in records + more]),
        json.dumps(ok.model_dump(mode="json")),
        json.dumps(env_reply.model_dump(mode="json")),
        json.dumps(server.requests),
    ]
    for text in texts:
        assert KEY not in text
        assert env_key not in text
    assert "api_key=***" in repr(gw)
    # pickling keeps a working key for worker processes, and still hides it
    clone = pickle.loads(pickle.dumps(gw))
    request = LLMRequest(model=MODEL, messages=messages())
    assert KEY not in repr(clone) and litellm_kwargs(clone.inner, request)["api_key"] == KEY


def test_the_provider_alone_never_retries(transport: str) -> None:
    """Retries are the retry layer's alone: a provider call that fails once raises at once."""
    with FakeOpenAIServer(faults=["500"]) as server:
        provider = LiteLLMGateway(api_base=server.base_url, api_key=KEY, transport=transport)
        with collect_calls() as records, pytest.raises(LLMCallError) as info:
            provider.chat(model=MODEL, messages=messages())
        assert server.request_count == 1
        assert provider.chat(model=MODEL, messages=messages()).content  # the server was fine
    assert info.value.retryable is True and info.value.kind == "server_error"
    assert "attempt" not in str(info.value)  # no retry layer: nothing says how many tries
    assert [r.attempt for r in records] == [1] and records[0].error


def test_local_server_gets_a_placeholder_key(server: FakeOpenAIServer, transport: str) -> None:
    gw = LiteLLMGateway(api_base=server.base_url, transport=transport)
    assert gw.chat(model=MODEL, messages=messages()).content
    assert server.headers[0]["authorization"] == "Bearer sk-local"


@given(st.text(max_size=200) | st.binary(max_size=50).map(lambda b: b.decode("latin-1")))
@settings(max_examples=200, deadline=None)
def test_parse_arguments_never_raises(raw: str) -> None:
    arguments, error = parse_arguments(raw)
    assert isinstance(arguments, dict)
    assert error is None or (isinstance(error, str) and "\n" not in error)
    if error is not None:
        assert arguments == {}


def test_scrub_replaces_every_occurrence() -> None:
    assert scrub(f"a {KEY} b {KEY}", [KEY, ""]) == "a *** b ***"
    assert scrub("nothing here", []) == "nothing here"
