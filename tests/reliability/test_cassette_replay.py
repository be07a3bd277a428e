"""A run recorded against a flaky server replays offline to the identical trace.

Whatever happened during the recording (replies, calls that ran out of retries, replies the
policy could not use), the cassette holds it, so a replay with no server writes the same rows.
Only ``llm_calls.cache_hit`` differs: it says the replies came from the cassette. Latencies are
the recorded ones (a replay re-emits the call records it stored), so they match too. Every
table is compared; in ``meta`` the ``llm_settings`` row records how the run was made (server,
cassette path, cache mode), which differs between a recording and a replay, as it must.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.helpers import TRACE_TABLES, rows
from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Experiment, Run
from vivarium.errors import VivariumError
from vivarium.experiment.build import gateway_settings
from vivarium.experiment.config import LLMConfig
from vivarium.gateways.cache import CachingGateway
from vivarium.gateways.stack import build_gateway
from vivarium.trace.db import TraceDb

STEPS, AGENTS, RETRIES = 12, 2, 1
# Request-index faults (one agent after the other: sequential scheduling): two failures in a
# row exhaust the retries (an infrastructure failure after retries); the rest are single
# transient faults the retry absorbs, and replies the policy cannot use (content failures).
SCHEDULE = [
    "500", "500",                      # gave up: InternalServerError x2
    None,
    "bad_tool_args",                   # content: arguments are not valid JSON
    "timeout", None,                   # retried, then a reply
    "empty",                           # content: empty reply
    "not_json", "not_json",            # gave up: reply is not JSON x2
    "unknown_tool",                    # content
    "close_mid_body", "close_mid_body",  # gave up: connection broken x2
    "429", None,                       # retried
]  # fmt: skip


def _llm(server_url: str | None, cassette: Path, mode: str) -> dict[str, Any]:
    llm: dict[str, Any] = {
        "model": "openai/fake",
        "api_base": server_url,
        "force_tool": True,
        "timeout": 0.3,  # the "timeout" fault hangs for 1 s: the client gives up first
        "num_retries": RETRIES,
        "cache": str(cassette),
        "cache_mode": mode,
    }
    if "on_llm_error" in LLMConfig.model_fields:  # failures after retries become fallbacks
        llm["on_llm_error"] = "fallback"
    return llm


def _experiment(llm: dict[str, Any], graph: bool = False) -> Experiment:
    return Experiment(
        name="flaky",
        policy="cognitive",
        agents=AGENTS,
        steps=STEPS,
        seed=11,
        scheduling="sequential",
        llm={**llm, "graph": graph},
    )


def _record(db: Path, cassette: Path) -> None:
    with FakeOpenAIServer(faults=SCHEDULE, cycle=True, timeout_s=1.0) as server:
        exp = _experiment(_llm(server.base_url, cassette, "record"))
        quick = dataclasses.replace(
            gateway_settings(exp.config.llm), backoff=0.002, max_backoff=0.01
        )
        gateway = build_gateway(quick, exp.config.seed)
        assert isinstance(gateway, CachingGateway)
        trace = TraceDb(db)
        try:
            exp.build(trace, {"gateway": gateway}).run(STEPS)
        finally:
            gateway.close()
            trace.close()
        assert server.request_count > STEPS * AGENTS  # retries happened


def _columns(db: Path, table: str) -> list[str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


def _tables(db: Path) -> list[str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    finally:
        con.close()


def _assert_same_but_cache_hit(recorded: Path, replayed: Path) -> None:
    """Every table equal, row for row, but ``llm_calls.cache_hit``.

    ``interruptions`` is a run's history, not its result (a run recorded with a stop on the
    way replays without one): compared only when both have it, when each was made.
    """
    tables = [t for t in _tables(recorded) if t != "interruptions"]
    others = _tables(replayed)
    assert (
        set(TRACE_TABLES) <= set(tables) and [t for t in others if t != "interruptions"] == tables
    )
    if "interruptions" in others and "interruptions" in _tables(recorded):
        tables.append("interruptions")
    for table in tables:
        want, got = rows(recorded, table), rows(replayed, table)
        if table == "meta":  # how the run was made (server, cache mode) differs, as it must
            settings = [{r[0]: r[1] for r in x}.get("llm_settings") for x in (want, got)]
            if settings[0] is not None:
                a, b = (json.loads(x) for x in settings)
                assert {k for k in a if a[k] != b.get(k)} <= {"api_base", "cache", "cache_mode"}
            want = [r for r in want if r[0] != "llm_settings"]
            got = [r for r in got if r[0] != "llm_settings"]
        if table == "llm_calls":
            hit = _columns(recorded, table).index("cache_hit")
            want = [r[:hit] + r[hit + 1 :] for r in want]
            got = [r[:hit] + r[hit + 1 :] for r in got]
        if table == "interruptions":  # each run's own stop, at its own (wall-clock) time
            when = _columns(recorded, table).index("recorded_at")
            want = [r[:when] + r[when + 1 :] for r in want]
            got = [r[:when] + r[when + 1 :] for r in got]
        assert got == want, table


def test_a_run_recorded_against_a_flaky_server_replays_to_the_identical_trace(
    tmp_path: Path,
) -> None:
    cassette, recorded, replayed = (
        tmp_path / "flaky.cassette",
        tmp_path / "recorded.sqlite",
        tmp_path / "replayed.sqlite",
    )
    _record(recorded, cassette)
    original = Run.open(recorded)
    assert original.metadata["status"] == "complete"
    actions = original.actions
    reasons = actions["error"].where(actions["fallback"])  # a fallback's reason, else NaN
    gave_up = reasons.str.contains("llm error: LLMCallError", na=False, regex=False)
    content = reasons.notna() & ~gave_up
    assert gave_up.sum() >= 3 and content.sum() >= 3  # the recording saw both kinds of failure
    assert original.llm_calls["error"].notna().sum() > gave_up.sum()

    # Offline: no server anywhere, the cassette opened read-only.
    run = _experiment(_llm(None, cassette, "replay")).run(replayed, progress=False)
    assert run.metadata["status"] == "complete"
    hits = [
        r[_columns(recorded, "llm_calls").index("cache_hit")] for r in rows(replayed, "llm_calls")
    ]
    assert set(hits) == {1} and len(hits) == len(original.llm_calls)
    _assert_same_but_cache_hit(recorded, replayed)


def test_replaying_a_failed_call_raises_the_recorded_error_and_its_attempts(
    tmp_path: Path,
) -> None:
    """The unit under the run test: one call that ran out of retries, recorded and replayed."""
    from vivarium.gateways.base import LLMCallError, collect_calls
    from vivarium.gateways.litellm_gateway import LiteLLMGateway
    from vivarium.gateways.retry import RetryGateway

    path = tmp_path / "c.cassette"
    request = {"model": "openai/fake", "messages": [{"role": "user", "content": "hi"}]}
    with FakeOpenAIServer(faults=["503", "503"]) as server:
        provider = RetryGateway(LiteLLMGateway(api_base=server.base_url), retries=1, backoff=0.001)
        gateway = CachingGateway(provider, path, "record")
        with collect_calls() as recorded, pytest.raises(LLMCallError) as first:
            gateway.chat(**request)
        gateway.close()
        assert server.request_count == 2
    replay = CachingGateway(None, path, "replay")
    with collect_calls() as replayed, pytest.raises(LLMCallError) as again:
        replay.chat(**request)
    replay.close()
    assert type(again.value) is type(first.value)
    assert str(again.value) == str(first.value)
    assert str(first.value).endswith("ServiceUnavailableError: injected 503 (after 2 attempts)")
    assert (again.value.kind, again.value.retryable, again.value.status_code) == (
        "server_error",
        True,
        503,
    )
    assert len(recorded) == 2 and all(r.error for r in recorded)
    assert [(r.attempt, r.error, r.latency_ms) for r in replayed] == [
        (r.attempt, r.error, r.latency_ms) for r in recorded
    ]
    assert all(r.cache_hit for r in replayed) and not any(r.cache_hit for r in recorded)


TIMEOUT_SCHEDULE = [
    "timeout", None,       # agent_000 step 0: cancelled at the agent timeout, then a reply
    None,                  # agent_001 step 0
    "timeout", "timeout",  # agent_000 step 1: cancelled twice: a recorded fallback
    None, None, None,
]  # fmt: skip
AGENT_TIMEOUT = 0.3


@pytest.mark.parametrize("graph", [False, True])
def test_attempts_cancelled_by_the_agent_timeout_are_recorded_and_replayed(
    tmp_path: Path, graph: bool
) -> None:
    cassette, recorded, replayed = (
        tmp_path / "t.cassette",
        tmp_path / "recorded.sqlite",
        tmp_path / "replayed.sqlite",
    )

    def llm(url: str | None, mode: str) -> dict[str, Any]:
        return {
            **_llm(url, cassette, mode),
            "timeout": 5.0,  # the client would wait; the agent timeout cancels first
            "agent_timeout": AGENT_TIMEOUT,
            "agent_retries": 1,
        }

    with FakeOpenAIServer(faults=TIMEOUT_SCHEDULE, timeout_s=3.0) as server:
        exp = _experiment(llm(server.base_url, "record"), graph)
        exp.config.steps = 3
        exp.run(recorded, progress=False)
        assert server.request_count == len(TIMEOUT_SCHEDULE)
    calls = Run.open(recorded).llm_calls
    assert len(calls) == len(TIMEOUT_SCHEDULE)  # every attempt is a row, cancelled ones too
    cancelled = calls[calls["error"].notna()]
    assert (
        cancelled["error"].tolist() == [f"cancelled: agent timeout after {AGENT_TIMEOUT:g} s"] * 3
    )
    # Its latency: until the cancellation (the server would have taken 3 s); the timeout
    # counts from the start of the decision, a little before the call.
    assert (cancelled["latency_ms"] > 0).all() and (cancelled["latency_ms"] < 1500).all()
    assert cancelled["agent_id"].tolist() == ["agent_000"] * 3
    errors = Run.open(recorded).actions["error"].dropna()
    assert len(errors) == 1 and "timeout" in errors.iloc[0]  # agent_000 at step 1

    replay = _experiment(llm(None, "replay"), graph)
    replay.config.steps = 3
    replay.run(replayed, progress=False)
    _assert_same_but_cache_hit(recorded, replayed)


def test_a_run_stopped_by_an_outage_then_resumed_replays_to_the_resumed_trace(
    tmp_path: Path,
) -> None:
    """``on_llm_error="stop"``: the outage stops the run (its failure is in the cassette, so
    a replay would stop there too); resumed in ``auto`` mode, the stored outage is tried
    again and the reply replaces it; the finished run then replays offline row for row."""
    if "on_llm_error" not in LLMConfig.model_fields:
        pytest.skip("on_llm_error is not a setting yet")
    cassette, recorded, replayed = (
        tmp_path / "o.cassette",
        tmp_path / "recorded.sqlite",
        tmp_path / "replayed.sqlite",
    )
    # Requests 4 and 5 (agent_000 at step 2, both attempts) fail: the run stops there.
    with FakeOpenAIServer(faults=lambda i, body: "503" if i in (4, 5) else None) as server:
        stop = {"on_llm_error": "stop"}
        exp = _experiment({**_llm(server.base_url, cassette, "auto"), **stop})
        exp.config.steps = 5
        with contextlib.suppress(VivariumError):  # the trace says what happened
            exp.run(recorded, progress=False)
        stopped = Run.open(recorded)
        assert stopped.metadata["status"] == "interrupted"
        assert stopped.metadata["steps_done"] == 2
        # Replayed as it is now, the run stops at the same place, with the same rows.
        shutil.copy(cassette, tmp_path / "stopped.cassette")
        again = _experiment({**_llm(None, tmp_path / "stopped.cassette", "replay"), **stop})
        again.config.steps = 5
        with contextlib.suppress(VivariumError):
            again.run(tmp_path / "stopped-replay.sqlite", progress=False)
        assert Run.open(tmp_path / "stopped-replay.sqlite").metadata["status"] == "interrupted"
        _assert_same_but_cache_hit(recorded, tmp_path / "stopped-replay.sqlite")
        resumed = stopped.resume(progress=False)
        assert resumed.metadata["status"] == "complete"
        assert server.request_count == 6 + 3 * AGENTS  # step 2 redone, the outage retried
    replay = _experiment({**_llm(None, cassette, "replay"), **stop})
    replay.config.steps = 5
    replay.run(replayed, progress=False)
    _assert_same_but_cache_hit(recorded, replayed)
