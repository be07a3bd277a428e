"""A run's trace holds every prompt and reply, once per distinct text, and gives them back.

A 3-agent cognitive run against the project's fake server: ``run.llm_exchanges()`` must give
back, for every attempt, the body the server received and the reply (or error body) it sent;
the texts the calls share (system prompts, the tools list) are stored once.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Experiment, Run
from vivarium.errors import TraceError
from vivarium.seeding import canonical_json

AGENTS, STEPS = 3, 3


def expected_reply(sent: dict[str, Any] | None, error: str | None) -> dict[str, Any]:
    """The reply dict of what the server sent: its first choice, or the error body."""
    if sent is None:
        return {"content": None, "tool_calls": None, "finish_reason": None, "error": error}
    choice = sent["choices"][0]
    return {
        "content": choice["message"].get("content"),
        "tool_calls": choice["message"].get("tool_calls") or None,
        "finish_reason": choice["finish_reason"],
    }


INJECTED_500 = json.dumps({"error": {"message": "injected 500", "type": "injected", "code": "500"}})


def server_side(server: FakeOpenAIServer) -> list[tuple[str, str]]:
    """(request, reply) of every exchange the server had, as canonical JSON."""
    return [
        (canonical_json(body), canonical_json(expected_reply(sent, INJECTED_500)))
        for body, sent in zip(server.requests, server.replies, strict=True)
    ]


def run_against(server: FakeOpenAIServer, path: Path, transport: str = "auto", **llm: Any) -> Run:
    settings = {"model": "openai/fake", "api_base": server.base_url, "transport": transport}
    experiment = Experiment(
        name="texts", policy="cognitive", agents=AGENTS, steps=STEPS, llm={**settings, **llm}
    )
    return experiment.run(path, progress=False)


@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_every_prompt_and_reply_is_stored_as_exchanged(transport: str, tmp_path: Path) -> None:
    path = tmp_path / "trace.sqlite"
    with FakeOpenAIServer(faults=["500"]) as server:  # the first attempt fails, and is retried
        run = run_against(server, path, transport)
    assert run.metadata["status"] == "complete"
    exchanges = run.llm_exchanges()
    assert len(exchanges) == len(run.llm_calls) == server.request_count == AGENTS * STEPS + 1
    stored = [
        (canonical_json(request), canonical_json(reply))
        for request, reply in zip(exchanges["request"], exchanges["reply"], strict=True)
    ]
    assert Counter(stored) == Counter(server_side(server))
    # The failed attempt is the row with an error, and holds the server's error body.
    failed = exchanges[exchanges["error"].notna()]
    assert len(failed) == 1 and failed["reply"].iloc[0]["error"] == INJECTED_500
    # Each row's text is its own call's: the prompt names the agent and step of the row.
    for _, row in exchanges.iterrows():
        system, user = row["request"]["messages"][:2]
        assert "agent_" not in system["content"]  # shared by all: cached once by a server
        assert f"You are {row['agent_id']}." in user["content"]
        assert f"Current step: {row['step']}." in user["content"]


def message_parts(message: dict[str, Any]) -> list[str]:
    """The texts a message is stored as: whole, or (several lines) its other fields and lines."""
    content = message.get("content")
    if not isinstance(content, str) or "\n" not in content:
        return [canonical_json(message)]
    rest = {k: v for k, v in message.items() if k != "content"}
    return [canonical_json(rest)] + [
        json.dumps(line, ensure_ascii=False) for line in content.split("\n")
    ]


def test_shared_texts_are_stored_once(tmp_path: Path) -> None:
    path = tmp_path / "trace.sqlite"
    with FakeOpenAIServer() as server:
        run_against(server, path)
    # Every distinct text of the exchanges, counted on the server's side.
    texts = set()
    for body, (_, reply) in zip(server.requests, server_side(server), strict=True):
        for message in body["messages"]:
            texts.update(message_parts(message))
        texts.add(canonical_json(body["tools"]))
        texts.add(reply)
    systems = {canonical_json(b["messages"][0]) for b in server.requests}
    assert len(systems) == 1  # one system prompt for all agents, sent at every step
    assert all("\n" not in json.loads(s)["content"] for s in systems)  # stored whole
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT count(*) FROM llm_texts").fetchone()[0] == len(texts)
        bodies = [b for (b,) in con.execute("SELECT body FROM llm_texts")]
        for system in systems:
            assert [canonical_json(json.loads(b)) for b in bodies].count(system) == 1
        (tools,) = con.execute("SELECT count(DISTINCT tools) FROM llm_calls").fetchone()
        assert tools == 1  # one tools list, referred to by every call
        # Stored as canonical JSON, as the cassette keeps it (a replay stores the same text).
        sent = canonical_json(server.requests[0]["tools"])
        (stored,) = con.execute(
            "SELECT body FROM llm_texts WHERE id = (SELECT tools FROM llm_calls LIMIT 1)"
        ).fetchone()
        assert stored == sent


def test_exchanges_of_one_agent_and_step(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        run = run_against(server, tmp_path / "trace.sqlite")
    one = run.llm_exchanges(agent_id="agent_001", step=2)
    assert list(one[["agent_id", "step"]].itertuples(index=False, name=None)) == [("agent_001", 2)]
    (request,) = one["request"]
    sent = [
        b
        for b in server.requests
        if "You are agent_001." in b["messages"][1]["content"]
        and "Current step: 2." in b["messages"][1]["content"]
    ]
    assert [request] == sent
    several = run.llm_exchanges(agent_id=["agent_000", "agent_002"], step=[0, 1])
    assert sorted(zip(several["agent_id"], several["step"], strict=True)) == [
        ("agent_000", 0),
        ("agent_000", 1),
        ("agent_002", 0),
        ("agent_002", 1),
    ]
    assert list(one.columns[-2:]) == ["request", "reply"]
    assert list(one.columns[:-2]) == list(run.llm_calls.columns)
    with sqlite3.connect(tmp_path / "trace.sqlite") as con:  # the index is llm_calls.id
        (agent_idx, step) = con.execute(
            "SELECT agent_idx, step FROM llm_calls WHERE id = ?", (int(one.index[0]),)
        ).fetchone()
    assert (agent_idx, step) == (1, 2)
    with pytest.raises(TraceError, match="no agent 'agent_9'"):
        run.llm_exchanges(agent_id="agent_9")


def test_a_replayed_run_stores_the_recorded_texts(tmp_path: Path) -> None:
    cassette = str(tmp_path / "replies.cassette")
    with FakeOpenAIServer() as server:
        recorded = run_against(server, tmp_path / "recorded.sqlite", cache=cassette)
    replayed_llm = {"model": "openai/fake", "cache": cassette, "cache_mode": "replay"}
    replayed = Experiment(
        name="texts", policy="cognitive", agents=AGENTS, steps=STEPS, llm=replayed_llm
    ).run(tmp_path / "replayed.sqlite", progress=False)
    before, after = recorded.llm_exchanges(), replayed.llm_exchanges()
    assert after["cache_hit"].all()
    assert list(after["request"]) == list(before["request"])
    assert list(after["reply"]) == list(before["reply"])
    assert Counter(
        (canonical_json(q), canonical_json(r))
        for q, r in zip(after["request"], after["reply"], strict=True)
    ) == Counter(server_side(server))


def test_a_mock_run_stores_its_texts_too(tmp_path: Path) -> None:
    run = Experiment(name="mock", policy="cognitive", agents=2, steps=2, llm={"model": "mock"}).run(
        tmp_path / "mock.sqlite", progress=False
    )
    exchanges = run.llm_exchanges()
    assert len(exchanges) == 4
    for request, reply in zip(exchanges["request"], exchanges["reply"], strict=True):
        assert request["model"] == "mock" and request["messages"][0]["role"] == "system"
        assert reply["finish_reason"] in ("stop", "tool_calls")
