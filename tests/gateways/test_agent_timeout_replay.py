"""A call the agent timeout cancelled, stored and replayed, with no class of its own for it.

The cassette stores it as it always has (type ``AgentTimeoutCall``, kind ``agent_timeout``), so
cassettes written before and after read the same; a replay with an agent timeout ends the
decision attempt as the recording did (``ReplayedAgentTimeout``), one without stops the run
as any replay that cannot answer as recorded does (``CacheMissError``).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from vivarium.errors import RunStoppingError
from vivarium.gateways.base import LLMCallError, LLMRequest, collect_calls, decision_deadline
from vivarium.gateways.cache import CacheMissError, CachingGateway, ReplayedAgentTimeout
from vivarium.gateways.mock import MockLLMGateway

REQUEST = LLMRequest(model="mock", messages=[{"role": "user", "content": "slow"}])
TIMEOUT = 0.05
REASON = f"cancelled: agent timeout after {TIMEOUT:g} s"


async def _cut_short(gateway: CachingGateway) -> None:
    with decision_deadline(TIMEOUT):  # the engine's agent timeout, as it sets it
        await asyncio.wait_for(gateway.acomplete(REQUEST), TIMEOUT)


def _record(path: Path) -> None:
    slow = MockLLMGateway(seed=1, latency_ms=60_000)
    recorder = CachingGateway(slow, path, mode="record")
    with pytest.raises(TimeoutError), collect_calls():
        asyncio.run(_cut_short(recorder))
    recorder.close()


def test_a_cancelled_call_is_stored_as_before_and_replays_as_recorded(tmp_path: Path) -> None:
    path = tmp_path / "t.cassette"
    _record(path)
    with sqlite3.connect(path) as con:
        (stored,) = [json.loads(r[0]) for r in con.execute("SELECT response_json FROM replies")]
    assert stored == {
        "failure": {
            "type": "AgentTimeoutCall",  # the cassette format: read by older and newer versions
            "message": REASON,
            "kind": "agent_timeout",
            "retryable": False,
            "status_code": None,
            "retry_after": None,
        }
    }
    replay = CachingGateway(None, path, mode="replay")

    async def with_timeout() -> None:
        with decision_deadline(TIMEOUT):
            await replay.acomplete(REQUEST)

    with pytest.raises(ReplayedAgentTimeout, match=REASON):
        asyncio.run(with_timeout())
    with pytest.raises(CacheMissError) as info:  # no agent timeout here: it cannot end so
        asyncio.run(replay.acomplete(REQUEST))
    assert isinstance(info.value, RunStoppingError) and isinstance(info.value, LLMCallError)
    assert info.value.kind == "cache_miss" and info.value.model == "mock"
    assert str(info.value) == (
        f"the recorded call was {REASON}, and this run has no agent timeout: replay it with "
        "the recorded agent_timeout"
    )
    replay.close()
