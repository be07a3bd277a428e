"""Record/replay: cassettes replay offline with identical replies and call records."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAIServer
from vivarium.errors import ConfigError
from vivarium.gateways import (
    CacheMissError,
    CachingGateway,
    Cassette,
    CassetteError,
    LiteLLMGateway,
    LLMCallError,
    LLMRequest,
    MockLLMGateway,
    RetryGateway,
    collect_calls,
)

from .helpers import TOOLS, messages

MODEL = "openai/fake-model"
KEY = "sk-cassette-SECRET-9090"
ROOT = Path(__file__).resolve().parents[2]


def records_without_hit(records: list) -> list[dict]:
    return [{**dataclasses.asdict(r), "cache_hit": None} for r in records]


def test_record_then_replay_offline_is_identical(tmp_path: Path) -> None:
    path = tmp_path / "replies.sqlite"
    prompts = ["first", "second", "third"]
    recorded = []
    with FakeOpenAIServer(faults=["500"]) as server:  # the first call fails once
        inner = RetryGateway(LiteLLMGateway(api_base=server.base_url, api_key=KEY), backoff=0.01)
        gw = CachingGateway(inner, path, mode="record")
        for text in prompts:
            with collect_calls() as records:
                reply = gw.chat(model=MODEL, messages=messages(text), tools=TOOLS)
            recorded.append((reply, records))
        gw.close()
    assert server.request_count == 4
    assert [r.error is not None for r in recorded[0][1]] == [True, False]
    assert all(reply.raw is None and not reply.cache_hit for reply, _ in recorded)

    # the server is gone: replay must not need it
    replay = CachingGateway(None, path, mode="replay")
    for (first, first_records), text in zip(recorded, prompts, strict=True):
        with collect_calls() as records:
            again = replay.chat(model=MODEL, messages=messages(text), tools=TOOLS)
        assert again.cache_hit is True
        assert again.model_copy(update={"cache_hit": False}) == first
        assert json.dumps(again.model_dump(exclude={"cache_hit"})) == json.dumps(
            first.model_dump(exclude={"cache_hit"})
        )
        assert all(r.cache_hit for r in records)
        assert records_without_hit(records) == records_without_hit(first_records)
    assert dataclasses.asdict(replay.stats) == {"hits": 3, "misses": 0, "writes": 0}
    replay.close()

    data = path.read_bytes() + (
        Path(f"{path}-wal").read_bytes() if Path(f"{path}-wal").exists() else b""
    )
    assert KEY.encode() not in data
    assert b"sk-" not in data


def test_replay_miss_names_the_request_and_the_fix(tmp_path: Path) -> None:
    Cassette(tmp_path / "empty.sqlite").close()  # an empty cassette: every request misses
    gw = CachingGateway(None, tmp_path / "empty.sqlite", mode="replay")
    request = LLMRequest(model="mock", messages=messages("never recorded"))

    with pytest.raises(CacheMissError) as info:
        gw.complete(request)
    error = info.value
    assert isinstance(error, LLMCallError) and error.retryable is False
    message = str(error)
    assert "\n" not in message
    assert request.request_hash()[:16] in message and "mock" in message
    assert "'record'" in message and "'auto'" in message
    assert error.request_hash == request.request_hash()
    assert gw.stats.misses == 1


def test_auto_mode_records_misses_and_replays_hits(tmp_path: Path) -> None:
    mock = MockLLMGateway(seed=4)
    gw = CachingGateway(mock, tmp_path / "auto.sqlite", mode="auto")
    with collect_calls() as first_records:
        first = gw.chat(model="mock", messages=messages(), tools=TOOLS)
    with collect_calls() as second_records:
        second = gw.chat(model="mock", messages=messages(), tools=TOOLS)
    assert mock.calls == 1
    assert first.cache_hit is False and second.cache_hit is True
    assert second.model_copy(update={"cache_hit": False}) == first
    assert first == mock.reply(LLMRequest(model="mock", messages=messages(), tools=TOOLS))
    assert [r.cache_hit for r in first_records] == [False]
    assert [r.cache_hit for r in second_records] == [True]
    assert dataclasses.asdict(gw.stats) == {"hits": 1, "misses": 1, "writes": 1}
    assert len(gw.cassette) == 1


def test_record_mode_always_calls_and_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    CachingGateway(MockLLMGateway(seed=1), path, mode="record").chat(model="m", messages=messages())
    gw = CachingGateway(MockLLMGateway(seed=2), path, mode="record")
    newer = gw.chat(model="m", messages=messages())
    assert gw.inner.calls == 1
    replayed = CachingGateway(None, path, mode="replay").chat(model="m", messages=messages())
    assert replayed.content == newer.content


def test_async_record_and_replay(tmp_path: Path) -> None:
    path = tmp_path / "async.sqlite"

    async def run(gw: CachingGateway) -> list:
        calls = [gw.achat(model="mock", messages=messages(str(i)), tools=TOOLS) for i in range(5)]
        return await asyncio.gather(*calls)

    recorded = asyncio.run(run(CachingGateway(MockLLMGateway(latency_ms=5), path, "record")))
    replayed = asyncio.run(run(CachingGateway(None, path, "replay")))
    assert [r.model_copy(update={"cache_hit": False}) for r in replayed] == recorded
    assert all(r.cache_hit for r in replayed)


def test_failures_are_cached_with_their_attempts_and_replayed(tmp_path: Path) -> None:
    """A rejected request (not the infrastructure's fault) is part of what the run did: it is
    stored, and asking again replays the same error and attempt without calling the server."""
    path = tmp_path / "c.sqlite"
    with FakeOpenAIServer(faults=["400"]) as server:
        gw = CachingGateway(LiteLLMGateway(api_base=server.base_url), path, mode="auto")
        with collect_calls() as records, pytest.raises(LLMCallError) as first:
            gw.chat(model=MODEL, messages=messages())
        assert len(records) == 1 and records[0].error  # the failed attempt reaches the trace
        assert len(gw.cassette) == 1
        with collect_calls() as again, pytest.raises(LLMCallError) as second:
            gw.chat(model=MODEL, messages=messages())
        assert server.request_count == 1  # replayed, not sent
        gw.close()
    assert (str(second.value), second.value.kind) == (str(first.value), "bad_request")
    assert [(r.error, r.latency_ms, r.cache_hit) for r in again] == [
        (records[0].error, records[0].latency_ms, True)
    ]
    # A cassette holding a failure, calls' text (schema 3) or where its replies came from
    # (schema 4) needs a newer reader: older versions refuse it.
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("4",)
    con.close()


def test_an_outage_is_tried_again_in_auto_mode_when_the_run_stops_on_outages(
    tmp_path: Path,
) -> None:
    """A run that stops on outages (the default) stopped at the stored one: resumed in auto
    mode it must reach the server, and the reply replaces the failure. A run that records
    outages as fallbacks replays them instead."""
    from vivarium.gateways.base import reset_on_llm_error, set_on_llm_error

    path = tmp_path / "c.sqlite"
    with FakeOpenAIServer(faults=["503", "503"]) as server:
        provider = RetryGateway(LiteLLMGateway(api_base=server.base_url), retries=0)
        gw = CachingGateway(provider, path, "auto")
        token = set_on_llm_error("fallback")
        try:
            for _ in range(2):  # stored, then replayed: the server sees one request
                with pytest.raises(LLMCallError, match="injected 503"):
                    gw.chat(model=MODEL, messages=messages())
            assert server.request_count == 1
        finally:
            reset_on_llm_error(token)
        with pytest.raises(LLMCallError, match="injected 503"):  # "stop": tried again
            gw.chat(model=MODEL, messages=messages())
        assert server.request_count == 2
        reply = gw.chat(model=MODEL, messages=messages())  # the server is back
        assert reply.content and server.request_count == 3
        gw.close()
    replay = CachingGateway(None, path, "replay")
    assert replay.chat(model=MODEL, messages=messages()).content == reply.content
    replay.close()


def test_foreign_files_are_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a database\n" * 10)
    with pytest.raises(CassetteError, match="not an SQLite file"):
        Cassette(text)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE people (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(CassetteError, match="not a Vivarium cassette") as info:
        Cassette(other)
    assert "\n" not in str(info.value)
    with pytest.raises(CassetteError, match="directory"):
        Cassette(tmp_path)


def test_bad_modes_and_missing_inner(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cache mode"):
        CachingGateway(MockLLMGateway(), tmp_path / "c.sqlite", mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs a gateway"):
        CachingGateway(None, tmp_path / "c.sqlite", mode="auto")


WRITER = """
import sys
from vivarium.gateways import CachingGateway, MockLLMGateway
path, worker, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
gw = CachingGateway(MockLLMGateway(seed=9), path, mode=mode)
for i in range(50):
    gw.chat(model="mock", messages=[{"role": "user", "content": f"w{worker} r{i}"}])
print(gw.stats.writes)
"""


def _writers(path: Path, jobs: list[tuple[int, str]]) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(worker), mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for worker, mode in jobs
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        outputs.append(out.strip())
    return outputs


def test_two_processes_writing_one_cassette_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"  # created by the two writers at once
    assert _writers(path, [(0, "record"), (1, "record")]) == ["50", "50"]
    cassette = Cassette(path)
    assert len(cassette) == 100
    mock = MockLLMGateway(seed=9)
    for worker in (0, 1):
        for i in (0, 49):
            request = LLMRequest(
                model="mock", messages=[{"role": "user", "content": f"w{worker} r{i}"}]
            )
            assert cassette.get(request.request_hash()).response(cache_hit=False) == mock.reply(
                request
            )
    cassette.close()


def test_two_processes_recording_the_same_requests_agree(tmp_path: Path) -> None:
    path = tmp_path / "same.sqlite"
    writes = [int(w) for w in _writers(path, [(0, "auto"), (0, "auto")])]
    assert sum(writes) >= 50 and max(writes) <= 50  # a request the other stored first is a hit
    cassette = Cassette(path)
    assert len(cassette) == 50
    request = LLMRequest(model="mock", messages=[{"role": "user", "content": "w0 r7"}])
    assert cassette.get(request.request_hash()).response(cache_hit=False) == MockLLMGateway(
        seed=9
    ).reply(request)
