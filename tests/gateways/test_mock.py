"""MockLLMGateway: replies are a pure function of (seed, request), in any process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vivarium.gateways import LLMRequest, MockLLMGateway, collect_calls
from vivarium.gateways.mock import WORDS
from vivarium.seeding import canonical_json

from .helpers import POST_MESSAGE, TOOLS, VOTE, force, messages

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from vivarium.gateways import MockLLMGateway
from vivarium.seeding import canonical_json
gw = MockLLMGateway(seed=7)
tools = json.loads(sys.argv[1])
replies = [
    gw.chat(model="m", messages=[{"role": "user", "content": "hi"}], tools=tools),
    gw.chat(model="m", messages=[{"role": "user", "content": "hi"}]),
]
print(canonical_json([r.model_dump(mode="json") for r in replies]))
"""


def test_mock_reply_is_identical_across_processes_and_hash_seeds() -> None:
    outputs = []
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(TOOLS)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.strip())
    assert outputs[0] == outputs[1]
    gw = MockLLMGateway(seed=7)
    here = [
        gw.chat(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS),
        gw.chat(model="m", messages=[{"role": "user", "content": "hi"}]),
    ]
    assert canonical_json([r.model_dump(mode="json") for r in here]) == outputs[0]
    assert json.loads(outputs[0])[0]["tool_calls"][0]["name"] == "post_message"


def test_seed_and_request_change_the_reply() -> None:
    a = MockLLMGateway(seed=1).chat(model="m", messages=messages("x"), tools=TOOLS)
    b = MockLLMGateway(seed=2).chat(model="m", messages=messages("x"), tools=TOOLS)
    c = MockLLMGateway(seed=1).chat(model="m", messages=messages("y"), tools=TOOLS)
    contents = {r.tool_calls[0].arguments["content"] for r in (a, b, c)}
    assert len(contents) == 3


def test_tool_call_shape() -> None:
    gw = MockLLMGateway(seed=3)
    with collect_calls() as records:
        reply = gw.chat(model="mock", messages=messages(), tools=TOOLS)
    assert reply.finish_reason == "tool_calls"
    assert reply.content is None
    assert len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    assert call.name == "post_message"
    assert set(call.arguments) == {"content"}
    assert call.parse_error is None and call.raw_arguments is None
    assert call.id and call.id.startswith("call_")
    text = call.arguments["content"]
    head, _, tail = text.partition(": ")
    assert head.startswith("mock note ") and len(head) == len("mock note ") + 4
    words = tail.split()
    assert 3 <= len(words) <= 6 and all(w in WORDS for w in words)
    assert reply.cost == 0.0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    chars = sum(len(m["content"]) for m in messages())
    assert reply.usage.prompt_tokens == chars // 4 + 1
    request = LLMRequest(model="mock", messages=messages(), tools=TOOLS)
    assert reply.request_hash == request.request_hash()
    assert reply.model == "mock"
    assert len(records) == 1
    assert records[0].attempt == 1 and records[0].error is None
    assert records[0].request_hash == reply.request_hash
    assert records[0].finish_reason == "tool_calls"


def test_plain_text_without_tools_or_with_tool_choice_none() -> None:
    gw = MockLLMGateway()
    plain = gw.chat(model="mock", messages=messages())
    assert plain.finish_reason == "stop" and not plain.tool_calls
    assert plain.content and plain.content.startswith("mock note ")
    none = gw.chat(model="mock", messages=messages(), tools=TOOLS, tool_choice="none")
    assert none.finish_reason == "stop" and not none.tool_calls
    # tools offered, but not post_message and not required: the mock answers in text
    auto = gw.chat(model="mock", messages=messages(), tools=[VOTE])
    assert auto.finish_reason == "stop" and not auto.tool_calls
    required = gw.chat(model="mock", messages=messages(), tools=[VOTE], tool_choice="required")
    assert [c.name for c in required.tool_calls] == ["vote"]


def test_forced_function_arguments_follow_its_schema() -> None:
    gw = MockLLMGateway(seed=5)
    reply = gw.chat(
        model="mock", messages=messages(), tools=[POST_MESSAGE, VOTE], tool_choice=force("vote")
    )
    (call,) = reply.tool_calls
    assert call.name == "vote"
    assert set(call.arguments) == {"candidate", "weight"}  # only required properties
    assert isinstance(call.arguments["candidate"], str) and call.arguments["candidate"]
    assert isinstance(call.arguments["weight"], int)
    again = gw.chat(
        model="mock", messages=messages(), tools=[POST_MESSAGE, VOTE], tool_choice=force("vote")
    )
    assert again == reply
    posted = gw.chat(
        model="mock",
        messages=messages(),
        tools=[VOTE, POST_MESSAGE],
        tool_choice=force("post_message"),
    )
    assert posted.tool_calls[0].name == "post_message"
    assert "content" in posted.tool_calls[0].arguments


def test_model_defaults_to_the_gateway_model() -> None:
    gw = MockLLMGateway(model="mock-large")
    assert gw.chat(messages=messages()).model == "mock-large"
    assert gw.chat(model="other", messages=messages()).model == "other"


def test_latency_is_recorded_as_configured_and_async_calls_overlap() -> None:
    # latency_fn: later agents answer sooner, so the calls finish in reverse order
    def latency(request: LLMRequest) -> float:
        index = int(request.messages[-1]["content"])
        return 80.0 - 20.0 * index

    gw = MockLLMGateway(latency_fn=latency)
    finished: list[int] = []

    async def one(i: int) -> float:
        with collect_calls() as records:
            reply = await gw.achat(model="mock", messages=[{"role": "user", "content": str(i)}])
        finished.append(i)
        assert records[0].latency_ms == reply.latency_ms
        return reply.latency_ms

    async def main() -> list[float]:
        return await asyncio.gather(*(one(i) for i in range(4)))

    latencies = asyncio.run(main())
    assert latencies == [80.0, 60.0, 40.0, 20.0]
    assert finished == [3, 2, 1, 0]


def test_sync_latency_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("vivarium.gateways.mock.time.sleep", slept.append)
    reply = MockLLMGateway(latency_ms=250).chat(model="mock", messages=messages())
    assert slept == [0.25]
    assert reply.latency_ms == 250.0
