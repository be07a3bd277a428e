"""Every call attempt's record carries its text: the body the server received, the reply it sent.

Each expectation is read off the fake server (what it received, what it answered), never built
with the code under test: the record must equal the server's side of the exchange.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAIServer, default_reply, wait_until
from vivarium.gateways import (
    CachingGateway,
    CallRecord,
    Cassette,
    LiteLLMGateway,
    LLMCallError,
    MockLLMGateway,
    RetryGateway,
    collect_calls,
)
from vivarium.gateways.base import GatewayBase, LLMRequest, LLMResponse
from vivarium.seeding import canonical_json

from .helpers import TOOLS, VOTE, force, messages

MODEL = "openai/fake-model"
TRANSPORTS = ("direct", "litellm")
KEY = "sk-texts-0123456789abcdef"


def expected_reply(sent: dict[str, Any]) -> dict[str, Any]:
    """The reply dict of a chat completion the server sent: its first choice, as is."""
    choice = sent["choices"][0]
    message = choice["message"]
    return {
        "content": message.get("content"),
        "tool_calls": message.get("tool_calls") or None,
        "finish_reason": choice["finish_reason"],
    }


def injected_body(code: str, message: str | None = None) -> str:
    """The error body the fake server sends for an injected status (as ``json.dumps`` writes it)."""
    error = {"message": message or f"injected {code}", "type": "injected", "code": code}
    return json.dumps({"error": error})


def gateway(server: FakeOpenAIServer, transport: str, **kwargs: Any) -> LiteLLMGateway:
    return LiteLLMGateway(api_base=server.base_url, api_key=KEY, transport=transport, **kwargs)


def call(gw: Any, asynchronous: bool, **request: Any) -> tuple[Any, list[CallRecord]]:
    """One chat call (blocking or on a loop); its reply (or error) and its records."""
    with collect_calls() as records:
        try:
            if asynchronous:
                reply: Any = asyncio.run(gw.achat(model=MODEL, **request))
            else:
                reply = gw.chat(model=MODEL, **request)
        except LLMCallError as exc:
            reply = exc
    return reply, records


REQUESTS = [
    {"messages": messages("plain text, no tools")},
    {"messages": messages(), "tools": TOOLS, "temperature": 0.0, "max_tokens": 48, "seed": 7},
    {"messages": messages('ünïcode ✓ and "quotes"\n'), "tools": TOOLS + [VOTE]},
    {"messages": messages(), "tools": TOOLS + [VOTE], "tool_choice": force("vote")},
    {
        "messages": [
            *messages(),
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "post_message", "arguments": '{"content": "hi"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "posted"},
        ],
        "tools": TOOLS,
        "tool_choice": "required",
    },
]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("request_", REQUESTS, ids=[f"request{i}" for i in range(len(REQUESTS))])
def test_a_record_holds_the_body_received_and_the_reply_sent(
    request_: dict[str, Any], transport: str, asynchronous: bool, server: FakeOpenAIServer
) -> None:
    _, records = call(gateway(server, transport), asynchronous, **request_)
    assert server.request_count == 1 and len(records) == 1
    (record,) = records
    received = server.requests[0]
    assert record.request == received
    assert canonical_json(record.request) == canonical_json(received)
    if transport == "direct":  # posted from this very dict: the fields in the same order too
        assert list(record.request) == list(received)
    assert record.reply == expected_reply(server.replies[0])
    assert record.row(0)[-2:] == (record.request, record.reply)
    assert len(record.row(0)) == 13
    headers = json.dumps(server.headers[0])
    assert KEY in headers and KEY not in canonical_json(record.request)  # the key went, unrecorded
    assert server.base_url not in canonical_json(record.request)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("fault", ["bad_tool_args", "raw_newline_args", "unknown_tool", "empty"])
def test_odd_replies_are_recorded_as_the_server_sent_them(fault: str, transport: str) -> None:
    with FakeOpenAIServer(reply=lambda i, body: default_reply(i, body, fault=fault)) as server:
        _, records = call(gateway(server, transport), False, messages=messages(), tools=TOOLS)
    assert records[0].request == server.requests[0]
    assert records[0].reply == expected_reply(server.replies[0])
    if fault in ("bad_tool_args", "raw_newline_args"):  # the raw text, not a parsed guess
        sent = server.replies[0]["choices"][0]["message"]["tool_calls"][0]["function"]
        assert records[0].reply["tool_calls"][0]["function"]["arguments"] == sent["arguments"]


@pytest.mark.parametrize(
    ("transport", "extra"),
    [("direct", {"top_p": 0.5, "user": "lab"}), ("litellm", {"top_p": 0.5, "drop_params": True})],
)
def test_extra_body_fields_are_in_the_request(
    transport: str, extra: dict[str, Any], server: FakeOpenAIServer
) -> None:
    gw = gateway(server, transport, extra=extra)
    _, records = call(gw, False, messages=messages(), tools=TOOLS, temperature=0.2)
    received = server.requests[0]
    assert received["top_p"] == 0.5 and "drop_params" not in received  # litellm's own option
    assert records[0].request == received


# -- failed attempts ---------------------------------------------------------------------------
@pytest.mark.parametrize("asynchronous", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_failed_attempt_keeps_its_request_and_the_error_body(
    transport: str, asynchronous: bool
) -> None:
    with FakeOpenAIServer(faults=["500", "503", None]) as server:
        retrying = RetryGateway(gateway(server, transport), retries=2, sleep=lambda s: None)
        reply, records = call(retrying, asynchronous, messages=messages(), tools=TOOLS)
    assert isinstance(reply, LLMResponse)
    assert [r.attempt for r in records] == [1, 2, 3]
    for record, received in zip(records, server.requests, strict=True):
        assert record.request == received
    for record, code in zip(records[:2], ("500", "503"), strict=True):
        assert record.reply == {
            "content": None,
            "tool_calls": None,
            "finish_reason": None,
            "error": injected_body(code),
        }
        assert record.error is not None and f"injected {code}" in record.error
    assert records[2].reply == expected_reply(server.replies[2])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_timeout_is_recorded_with_its_request_and_what_happened(transport: str) -> None:
    with FakeOpenAIServer(faults=["timeout"], timeout_s=30) as server:
        reply, records = call(gateway(server, transport, timeout=0.3), False, messages=messages())
    assert isinstance(reply, LLMCallError) and reply.kind == "timeout"
    (record,) = records
    assert record.request == server.requests[0]
    assert set(record.reply) == {"content", "tool_calls", "finish_reason", "error"}
    assert record.reply["content"] is None and record.reply["tool_calls"] is None
    assert "timed out" in record.reply["error"].lower() or "timeout" in record.reply["error"]


def test_a_reply_that_is_not_json_is_kept_as_its_text(server: FakeOpenAIServer) -> None:
    server.faults = ["not_json"]
    reply, records = call(gateway(server, "direct"), False, messages=messages())
    assert isinstance(reply, LLMCallError) and reply.kind == "bad_response"
    assert records[0].reply is not None
    assert records[0].reply["error"] == "<html>this is not JSON</html>"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_error_body_that_echoes_the_key_is_scrubbed(transport: str) -> None:
    with FakeOpenAIServer(faults=["401"]) as server:
        reply, records = call(gateway(server, transport), False, messages=messages())
    assert isinstance(reply, LLMCallError) and reply.kind == "auth"
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"  # the server got it, and echoed it
    (record,) = records
    text = canonical_json([record.request, record.reply])
    assert KEY not in text and KEY[3:] not in text
    assert record.reply["error"] == injected_body("401", "injected 401 (rejected Bearer ***)")


def test_an_attempt_cancelled_in_flight_keeps_its_request() -> None:
    async def cancelled(server: FakeOpenAIServer) -> list[CallRecord]:
        gw = gateway(server, "direct")
        with collect_calls() as records:
            task = asyncio.create_task(gw.achat(model=MODEL, messages=messages()))
            await asyncio.to_thread(wait_until, lambda: server.request_count == 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return records

    with FakeOpenAIServer(latency_ms=30_000) as server:
        records = asyncio.run(cancelled(server))
    (record,) = records
    assert record.request == server.requests[0]
    assert record.reply == {
        "content": None,
        "tool_calls": None,
        "finish_reason": None,
        "error": "cancelled",
    }


# -- the mock, a third-party gateway, the cassette --------------------------------------------
def test_the_mock_records_the_request_it_was_asked_and_the_reply_it_made() -> None:
    mock = MockLLMGateway(seed=3)
    asked = {"messages": messages(), "tools": TOOLS + [VOTE], "tool_choice": force("vote")}
    with collect_calls() as records:
        tool_reply = mock.chat(model="mock", seed=5, **asked)
        text_reply = mock.chat(messages=messages("no tools"), temperature=0.5)
    assert records[0].request == {"model": "mock", "seed": 5, **asked}
    (tool_call,) = tool_reply.tool_calls
    sent = records[0].reply
    assert sent is not None and sent["content"] is None and sent["finish_reason"] == "tool_calls"
    assert sent["tool_calls"] == [
        {
            "id": tool_call.id,
            "type": "function",
            "function": {
                "name": "vote",
                "arguments": sent["tool_calls"][0]["function"]["arguments"],
            },
        }
    ]
    assert json.loads(sent["tool_calls"][0]["function"]["arguments"]) == tool_call.arguments
    assert records[1].request == {
        "model": "mock",
        "messages": messages("no tools"),
        "temperature": 0.5,
    }
    assert records[1].reply == {
        "content": text_reply.content,
        "tool_calls": None,
        "finish_reason": "stop",
    }


class _Flaky(GatewayBase):
    """A third-party gateway: records nothing, fails once, then answers."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        if self.calls == 1:
            raise LLMCallError("overloaded", kind="server_error", retryable=True)
        return LLMResponse(content="fine", finish_reason="stop", model=request.model)


def test_retry_records_a_failure_the_gateway_below_left_unrecorded() -> None:
    with collect_calls() as records:
        RetryGateway(_Flaky(), retries=1, sleep=lambda s: None).chat(
            model="x/y", messages=messages(), seed=1
        )
    # The body of a gateway that records nothing is unknown: the request as asked stands for it.
    asked = {"model": "x/y", "messages": messages(), "seed": 1}
    assert records[0].request == asked
    assert records[0].reply == {
        "content": None,
        "tool_calls": None,
        "finish_reason": None,
        "error": "LLMCallError: overloaded",
    }


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_replayed_call_carries_the_recorded_request_and_reply(
    transport: str, tmp_path: Path
) -> None:
    cassette = tmp_path / "replies.cassette"
    asked = {"messages": messages(), "tools": TOOLS}
    with FakeOpenAIServer(faults=["500", None]) as server:
        retrying = RetryGateway(gateway(server, transport), retries=1, sleep=lambda s: None)
        recorder = CachingGateway(retrying, cassette, mode="record")
        _, recorded = call(recorder, False, **asked)
        recorder.close()
    assert [r.request for r in recorded] == server.requests
    assert recorded[0].reply is not None and recorded[0].reply["error"] == injected_body("500")
    assert recorded[1].reply == expected_reply(server.replies[1])

    replayer = CachingGateway(None, cassette, mode="replay")
    _, replayed = call(replayer, False, **asked)
    replayer.close()
    assert [r.cache_hit for r in replayed] == [True, True]
    assert [(r.request, r.reply) for r in replayed] == [(r.request, r.reply) for r in recorded]

    # The cassette keeps them in the shape the trace stores (one representation): the body
    # sent once per row, the replies with their attempts; a newer schema for older readers.
    with sqlite3.connect(cassette) as con:
        sent, attempts = con.execute("SELECT request_json, attempts_json FROM replies").fetchone()
        (version,) = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert json.loads(sent) == server.requests[1] == server.requests[0]
    stored = json.loads(attempts)
    assert ["request" in a for a in stored] == [False, False]
    assert [a["reply"] for a in stored] == [r.reply for r in recorded]
    assert version == "4"  # texts need 3; where the replies came from (provenance) needs 4


def test_a_cassette_row_written_before_texts_replays_without_them(tmp_path: Path) -> None:
    cassette = tmp_path / "old.cassette"
    recorder = CachingGateway(MockLLMGateway(), cassette, mode="record")
    recorder.chat(model="mock", messages=messages())
    recorder.close()
    with sqlite3.connect(cassette) as con:  # as an older Vivarium wrote it: no text
        (attempts,) = con.execute("SELECT attempts_json FROM replies").fetchone()
        old = [
            {k: v for k, v in a.items() if k not in ("request", "reply")}
            for a in json.loads(attempts)
        ]
        con.execute("UPDATE replies SET attempts_json = ?", (canonical_json(old),))
    replayer = CachingGateway(None, cassette, mode="replay")
    with collect_calls() as records:
        replayer.chat(model="mock", messages=messages())
    replayer.close()
    assert [(r.cache_hit, r.request, r.reply) for r in records] == [(True, None, None)]


def test_attempts_that_sent_other_bodies_keep_their_own(tmp_path: Path) -> None:
    first = {"model": "m", "messages": messages("first")}
    last = {"model": "m", "messages": messages("last")}
    failed = {"content": None, "tool_calls": None, "finish_reason": None, "error": "boom"}
    answered = {"content": "ok", "tool_calls": None, "finish_reason": "stop"}
    records = [
        CallRecord(1, "m", "h", error="boom", request=first, reply=failed),
        CallRecord(2, "m", "h", request=last, reply=answered),
    ]
    with Cassette(tmp_path / "c.cassette") as cassette:
        request = LLMRequest(model="m", messages=messages("last"))
        cassette.put(request, LLMResponse(content="ok", finish_reason="stop"), records)
        stored = cassette.get(request.request_hash())
    assert stored is not None and json.loads(stored.request_json or "null") == last
    back = stored.records(cache_hit=True)
    assert [(r.request, r.reply, r.cache_hit) for r in back] == [
        (first, failed, True),
        (last, answered, True),
    ]
