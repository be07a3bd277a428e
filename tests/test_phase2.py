"""Phase 2: LLM agents in the engine, deterministic with the mock, replayable from a cassette."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.llama_server import MODEL_NAME, llama_server, llama_server_available
from vivarium import Experiment, Run
from vivarium.errors import ConfigError, RunHealthWarning, RunInterrupted


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def table(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_phase2_mock_is_byte_identical_across_processes(tmp_path: Path) -> None:
    dbs = []
    for hashseed in ("0", "4242"):
        db = tmp_path / f"p2-{hashseed}.sqlite"
        out = run_cli(
            "phase2",
            "--steps",
            "4",
            "--agents",
            "3",
            "--seed",
            "42",
            "--mock-llm",
            "--db",
            str(db),
            env={"PYTHONHASHSEED": hashseed},
        )
        assert out.returncode == 0, out.stderr
        assert "llm calls: 12 (0 failed, 0 from cache)" in out.stdout
        dbs.append(db)
    assert sha(dbs[0]) == sha(dbs[1])
    run = Run.open(dbs[0])
    assert len(run.actions) == 12 and len(run.llm_calls) == 12
    assert (run.actions["action"] == "post_message").all()
    assert len(run.messages) == 12
    assert run.llm_calls["prompt_tokens"].gt(0).all()


def test_mock_latencies_in_reverse_still_commit_in_agent_order(tmp_path: Path) -> None:
    from vivarium.engine.engine import WorldEngine, WorldEngineConfig
    from vivarium.experiment.build import build_agents
    from vivarium.experiment.config import ExperimentConfig
    from vivarium.gateways.mock import MockLLMGateway
    from vivarium.trace.db import TraceDb
    from vivarium.worlds import InMemoryChannel

    config = ExperimentConfig(policy="cognitive", agents=5, steps=2, llm={"mock": True})
    shared = {"gateway": MockLLMGateway(seed=1)}
    agents = build_agents(config, shared)
    # agent_000 is slowest: the calls finish in reverse order.
    slow = {aid: 0.01 * (5 - i) for i, aid in enumerate(sorted(agents))}
    order: list[str] = []

    def latency(request):  # the user message names the agent
        text = request.messages[-1]["content"]
        aid = next(a for a in slow if f"You are {a}." in text)
        order.append(aid)
        return slow[aid] * 1000

    shared["gateway"].latency_fn = latency
    trace = TraceDb(tmp_path / "rev.sqlite")
    WorldEngine(
        WorldEngineConfig(run_id="rev", scheduling="simultaneous"),
        agents,
        InMemoryChannel(),
        trace_db=trace,
    ).run(2)
    trace.close()
    run = Run.open(tmp_path / "rev.sqlite")
    assert run.actions["agent_id"].tolist() == sorted(agents) * 2
    assert run.llm_calls["agent_id"].tolist() == sorted(agents) * 2
    assert run.llm_calls["latency_ms"].tolist()[:5] == [50.0, 40.0, 30.0, 20.0, 10.0]


def test_experiment_cognitive_from_python(tmp_path: Path) -> None:
    run = Experiment(
        name="py2",
        policy="cognitive",
        agents=2,
        steps=3,
        scheduling="simultaneous",
        llm={"mock": True},
    ).run(tmp_path / "py2.sqlite")
    assert len(run.llm_calls) == 6
    assert run.metadata["policy"] == "cognitive"
    assert "api_key" not in run.metadata["config"]["llm"]


def test_replay_miss_is_a_clear_error_naming_agent_and_step(tmp_path: Path) -> None:
    from vivarium.gateways.cache import Cassette

    cassette = tmp_path / "empty.cassette"
    Cassette(cassette).close()
    out = run_cli(
        "phase2",
        "--steps",
        "2",
        "--agents",
        "2",
        "--model",
        "openai/x",
        "--cache",
        str(cassette),
        "--cache-mode",
        "replay",
        "--db",
        str(tmp_path / "m.sqlite"),
    )
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip() and "%|" not in ln]
    assert len(lines) == 1, out.stderr
    assert "agent_000 at step 0" in lines[0] and "no recorded reply" in lines[0]
    assert Run.open(tmp_path / "m.sqlite").metadata["status"] == "failed"


def test_phase2_with_faulty_server_completes_and_records_faults(tmp_path: Path) -> None:
    faults = ["500", None, "429", None, "bad_tool_args", "empty", None, "unknown_tool", None]
    with FakeOpenAIServer(faults=faults, cycle=True, retry_after=0) as server:
        db = tmp_path / "f.sqlite"
        out = run_cli(
            "phase2",
            "--steps",
            "4",
            "--agents",
            "3",
            "--model",
            "openai/fake",
            "--api-base",
            server.base_url,
            "--api-key",
            "sk-FAULTY-KEY-123",
            "--force-tool",
            "--num-retries",
            "3",
            "--db",
            str(db),
        )
        assert out.returncode == 0, out.stderr
    run = Run.open(db)
    assert len(run.actions) == 12 and run.metadata["status"] == "complete"
    calls = run.llm_calls
    assert calls["error"].notna().sum() >= 2  # the 500 and the 429 attempts
    assert (calls["attempt"] > 1).any()
    fallbacks = run.actions[run.actions["metadata"].str.contains('"parse_path":"fallback"')]
    assert len(fallbacks) >= 1
    assert b"sk-FAULTY-KEY-123" not in db.read_bytes()
    assert "sk-FAULTY-KEY-123" not in out.stdout + out.stderr


@pytest.fixture(scope="module")
def llm_server_reason() -> str | None:
    reason = llama_server_available()
    if reason and os.environ.get("VIVARIUM_REQUIRE_LLM_SERVER"):
        pytest.fail(reason)
    return reason


@pytest.mark.llm_server
def test_real_llm_then_offline_replay(tmp_path: Path, llm_server_reason: str | None) -> None:
    if llm_server_reason:
        pytest.skip(llm_server_reason)
    cassette = tmp_path / "smollm2.cassette"
    recorded, replayed, again = (tmp_path / f"{n}.sqlite" for n in ("rec", "rep", "rep2"))
    common = [
        "phase2",
        "--steps",
        "3",
        "--agents",
        "3",
        "--seed",
        "42",
        "--model",
        MODEL_NAME,
        "--force-tool",
        "--max-tokens",
        "40",
        "--cache",
        str(cassette),
    ]
    with llama_server() as base:
        out = run_cli(
            *common,
            "--api-base",
            base,
            "--api-key",
            "sk-REAL-SECRET",
            "--cache-mode",
            "record",
            "--db",
            str(recorded),
        )
        assert out.returncode == 0, out.stderr
        # The same first step through litellm instead of the direct transport (the default
        # for an openai/ model on an api_base): the server must see the same prompts.
        via_litellm = tmp_path / "litellm.sqlite"
        out = run_cli(
            *common,
            "--steps",
            "1",
            "--transport",
            "litellm",
            "--cache",
            str(tmp_path / "litellm.cassette"),
            "--api-base",
            base,
            "--cache-mode",
            "record",
            "--db",
            str(via_litellm),
        )
        assert out.returncode == 0, out.stderr
    first_step = (
        "SELECT request_hash, prompt_tokens FROM llm_calls WHERE step = 0 AND error IS NULL"
    )
    direct_prompts = table(recorded, first_step)
    assert len(direct_prompts) == 3 and all(tokens > 10 for _, tokens in direct_prompts)
    assert sorted(table(via_litellm, first_step)) == sorted(direct_prompts)
    run = Run.open(recorded)
    calls = run.llm_calls

    assert len(run.actions) == 9 and len(calls) >= 9
    ok = calls[calls["error"].isna()]
    assert len(ok) == 9 and ok["prompt_tokens"].gt(10).all() and ok["completion_tokens"].gt(0).all()
    assert not calls["cache_hit"].any()
    parse_paths = run.actions["metadata"].str.extract(r'"parse_path":"(\w+)"')[0]
    assert set(parse_paths) <= {"tool_call", "json_text", "fallback"}
    posted = run.actions[(run.actions["action"] == "post_message") & run.actions["success"]]
    assert len(run.messages) == len(posted)
    # The server's own token counts, as stored in the cassette, are what the trace recorded.
    stored = {
        h: p
        for h, p in table(
            cassette,
            "SELECT request_hash, json_extract(response_json, '$.usage.prompt_tokens') FROM replies",
        )
    }
    assert all(stored[h] == p for h, p in zip(ok["request_hash"], ok["prompt_tokens"], strict=True))

    # Server stopped: replay offline, twice.
    for db in (replayed, again):
        out = run_cli(*common, "--cache-mode", "replay", "--db", str(db))
        assert out.returncode == 0, out.stderr
        assert "9 from cache" in out.stdout
    assert sha(replayed) == sha(again)
    # The replay reproduces the recorded run exactly: every row, every hash; only the cache_hit
    # flag of llm_calls tells the two apart.
    for sql in (
        "SELECT * FROM steps",
        "SELECT * FROM messages",
        "SELECT * FROM agents",
        "SELECT run_id, config_json, seed, status, steps_done FROM runs",
        "SELECT step, agent_idx, attempt, model, request_hash, prompt_tokens, completion_tokens, cost, latency_ms, finish_reason, error FROM llm_calls",
    ):
        assert table(recorded, sql) == table(replayed, sql), sql
    assert table(replayed, "SELECT min(cache_hit) FROM llm_calls") == [(1,)]
    for path in (recorded, replayed, cassette):
        assert b"sk-REAL-SECRET" not in path.read_bytes()


def test_replay_without_a_cassette_file_is_one_line(tmp_path: Path) -> None:
    out = run_cli(
        "phase2",
        "--model",
        "openai/x",
        "--cache",
        str(tmp_path / "none.cassette"),
        "--cache-mode",
        "replay",
        "--db",
        str(tmp_path / "n.sqlite"),
    )
    assert out.returncode == 2
    assert "no cassette at" in out.stderr and "Traceback" not in out.stderr


def test_replay_leaves_the_cassette_file_unchanged(tmp_path: Path) -> None:
    from tests.conftest import ROOT

    cassette = ROOT / "data/cassettes/smollm2_phase2.cassette"
    before = cassette.read_bytes()
    out = run_cli(
        "phase2",
        "--steps",
        "4",
        "--agents",
        "3",
        "--seed",
        "42",
        "--model",
        MODEL_NAME,
        "--force-tool",
        "--max-tokens",
        "48",
        "--cache",
        str(cassette),
        "--cache-mode",
        "replay",
        "--db",
        str(tmp_path / "r.sqlite"),
    )
    assert out.returncode == 0, out.stderr
    assert "12 from cache" in out.stdout
    assert cassette.read_bytes() == before
    assert not cassette.with_name(cassette.name + "-wal").exists()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_llm_server_that_is_not_there_is_one_line_before_any_step(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{_closed_port()}/v1"
    out = run_cli("phase2", "--model", "openai/x", "--api-base", base, "--db", str(tmp_path / "a"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        f"vvm phase2: error: cannot reach the LLM server at {base} (Connection refused): "
        "is it running?"
    )
    llm = {"model": "openai/x", "api_base": base}
    with pytest.raises(ConfigError, match="cannot reach the LLM server"):
        Experiment(policy="cognitive", llm=llm).run(tmp_path / "b.sqlite", progress=False)
    # A cassette in auto mode may hold every reply: no server needed, no check. A reply that is
    # not there and no server to ask is an outage: the run stops, resumable, in one line...
    auto = {**llm, "cache": str(tmp_path / "c.cassette"), "cache_mode": "auto", "num_retries": 0}
    with pytest.raises(RunInterrupted, match="connection broken"):
        Experiment(policy="cognitive", agents=1, steps=1, llm=auto).run(
            tmp_path / "c.sqlite", progress=False
        )
    assert Run.open(tmp_path / "c.sqlite").metadata["status"] == "interrupted"
    # ... or, when fallbacks were asked for, each decision is a recorded fallback.
    auto["on_llm_error"] = "fallback"
    with pytest.warns(RunHealthWarning, match="every LLM call failed"):
        run = Experiment(policy="cognitive", agents=1, steps=1, llm=auto).run(
            tmp_path / "d.sqlite", progress=False
        )
    assert run.llm_calls["error"].str.contains("connection broken").all()
    assert run.actions["fallback"].all()


def test_a_run_whose_every_llm_call_failed_says_so(tmp_path: Path) -> None:
    with FakeOpenAIServer(faults=lambda i, body: "500") as server:
        flags = ["--model", "openai/x", "--api-base", server.base_url, "--num-retries", "0"]
        stopped = run_cli("phase2", *flags, "--steps", "2", "--db", str(tmp_path / "s.sqlite"))
        out = run_cli(
            "phase2",
            *flags,
            "--on-llm-error",
            "fallback",
            "--steps",
            "2",
            "--db",
            str(tmp_path / "t.sqlite"),
        )
    # By default a server that only fails stops the run at its first step, in one line.
    assert stopped.returncode == 3 and len(stopped.stderr.strip().splitlines()) == 1
    assert re.search(r"interrupted: agent_00[01] at step 0: openai/x: Internal", stopped.stderr)
    # With fallbacks asked for, it runs on, and says loudly that nothing worked.
    assert out.returncode == 0, out.stderr
    assert "llm calls: 4 (4 failed" in out.stdout
    assert "succeeded 0/4; 4 fallbacks" in out.stdout
    assert (
        "every LLM call failed (4 of 4); the last: InternalServerError: injected 500" in out.stderr
    )


def test_a_reader_that_goes_away_is_no_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import ROOT

    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vivarium.cli",
            "phase1",
            "--steps",
            "3",
            "--db",
            str(tmp_path / "p"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    process.stdout.close()  # type: ignore[union-attr] - like `vvm ... | head -0`
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141 and b"Traceback" not in err and b"Exception" not in err
    assert Run.open(tmp_path / "p").metadata["status"] == "complete"
