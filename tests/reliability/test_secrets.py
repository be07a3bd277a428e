"""Secrets: an API key given by flag, by VIVARIUM_API_KEY or by the provider's own variable
(OPENAI_API_KEY) reaches the server but never any output: not the trace file, the recorded
config, the cassette, exported frames, logs at DEBUG level, stdout, stderr or exception
messages, even when the server echoes the key back in an error (401) or a replay misses."""

from __future__ import annotations

import json
import logging
import os
import secrets
import sqlite3
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Experiment, Run
from vivarium.cli import main
from vivarium.errors import VivariumError
from vivarium.gateways.cache import Cassette
from vivarium.trace.db import TraceDb

FAULTS = ["401", None, "500", None]  # the 401 body echoes the Authorization header


def new_key(kind: str) -> str:
    return f"sk-{kind}-{secrets.token_hex(12)}"


def output_bytes(*paths: Path) -> bytes:
    """Every byte of these files, and of every file under these folders (sidecars too)."""
    chunks = []
    for path in paths:
        files = (
            sorted(path.rglob("*")) if path.is_dir() else sorted(path.parent.glob(path.name + "*"))
        )
        chunks += [f.read_bytes() for f in files if f.is_file()]
    return b"\n".join(chunks)


def assert_nowhere(key: str, *texts: str | bytes) -> None:
    for text in texts:
        data = text if isinstance(text, bytes) else text.encode()
        assert key.encode() not in data
        assert key[3:].encode() not in data  # not even without its prefix


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(faults=FAULTS, cycle=True) as srv:
        yield srv


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)  # every logger, litellm's, httpx's and httpcore's too
    return caplog


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return caplog.text + "\n".join(repr(r.__dict__) for r in caplog.records)


def run_phase2(tmp_path: Path, server: FakeOpenAIServer, *extra: str) -> list[str]:
    return [
        "phase2", "--steps", "3", "--agents", "2", "--model", "openai/fake", "--force-tool",
        "--num-retries", "0", "--no-progress", "--db", str(tmp_path / "trace.sqlite"),
        "--on-llm-error", "fallback",  # the 401s become recorded fallbacks, their errors kept
        "--cache", str(tmp_path / "replies.cassette"), "--cache-mode", "record",
        *(["--api-base", server.base_url] if server else []), *extra,
    ]  # fmt: skip


def trace_cells(path: Path) -> str:
    """Every cell of every table of a trace, as text (the prompts and replies too).

    Read through SQL: a long text spans several pages of the file, so a byte search of the
    file alone could miss a key split across two of them.
    """
    cells = []
    with sqlite3.connect(path) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in con.execute(f'SELECT * FROM "{table}"'):
                cells += [str(cell) for cell in row]
    return "\n".join(cells)


def check_texts(run: Run, key: str) -> None:
    """The prompts and replies are on record, the 401s' error bodies among them, keyless."""
    exchanges = run.llm_exchanges()
    assert exchanges["request"].notna().all() and exchanges["reply"].notna().all()
    errors = [r["error"] for r in exchanges["reply"] if "error" in r]
    assert any("rejected Bearer ***" in e for e in errors)  # the echoed key, scrubbed
    texts = json.dumps([list(exchanges["request"]), list(exchanges["reply"])])
    assert_nowhere(key, texts, trace_cells(run.path))


def check_outputs(tmp_path: Path, key: str, *texts: str) -> Run:
    run = Run.open(tmp_path / "trace.sqlite")
    assert run.metadata["status"] == "complete"
    # The 401s happened, and their errors are on record (scrubbed).
    reasons = run.actions["error"].dropna().str.cat()
    assert "AuthenticationError" in reasons and "rejected Bearer ***" in reasons
    run.to_parquet(tmp_path / "frames")
    assert_nowhere(key, output_bytes(tmp_path), run.metadata["config"].__repr__(), *texts)
    assert "api_key" not in run.metadata["config"].get("llm", {})
    check_texts(run, key)
    return run


@pytest.mark.parametrize("how", ["flag", "VIVARIUM_API_KEY"])
def test_a_key_by_flag_or_variable_is_never_written(
    how: str,
    tmp_path: Path,
    server: FakeOpenAIServer,
    debug_logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = new_key(how)
    if how == "flag":
        argv = run_phase2(tmp_path, server, "--api-key", key)
    else:
        monkeypatch.setenv("VIVARIUM_API_KEY", key)
        argv = run_phase2(tmp_path, server)
    assert main(argv) == 0
    out, err = capsys.readouterr()
    sent = [h.get("authorization") for h in server.headers]
    assert sent and all(h == f"Bearer {key}" for h in sent)  # the key was used
    check_outputs(tmp_path, key, out, err, logged(debug_logs))


def test_the_providers_own_variable_is_never_written(
    tmp_path: Path,
    server: FakeOpenAIServer,
    debug_logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = new_key("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)  # no --api-base, no --api-key
    monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
    monkeypatch.delenv("VIVARIUM_API_KEY", raising=False)
    assert main(run_phase2(tmp_path, None)) == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert {h.get("authorization") for h in server.headers} == {f"Bearer {key}"}
    check_outputs(tmp_path, key, out, err, logged(debug_logs))


def test_a_key_in_a_separate_process_with_debug_logging(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """As a user runs it: a fresh process, root logging at DEBUG, key in the environment."""
    key = new_key("process")
    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)\n"
        "from vivarium.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, *run_phase2(tmp_path, server)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "VIVARIUM_API_KEY": key, "VIVARIUM_PROGRESS": "0"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "DEBUG" in out.stderr  # debug logging was on
    assert {h.get("authorization") for h in server.headers} == {f"Bearer {key}"}
    check_outputs(tmp_path, key, out.stdout, out.stderr)


def test_a_key_stays_out_of_a_replay_miss_a_resume_and_python_errors(
    tmp_path: Path,
    server: FakeOpenAIServer,
    debug_logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = new_key("python")
    texts: list[str] = []
    # A replay that misses: the run stops with one line naming the agent and step.
    empty = tmp_path / "empty.cassette"
    Cassette(empty).close()
    llm = {"model": "openai/fake", "api_key": key, "cache": str(empty), "cache_mode": "replay"}
    exp = Experiment(name="miss", policy="cognitive", agents=1, steps=2, llm=llm)
    texts += [repr(exp), repr(exp.config), str(exp.config), exp.config.model_dump_json()]
    with pytest.raises(VivariumError) as err:
        exp.run(tmp_path / "miss.sqlite", progress=False)
    assert "no recorded reply" in str(err.value)
    texts += [str(err.value), repr(err.value), "".join(traceback.format_exception(err.value))]
    # An interrupted run resumed with the key: the resumed trace does not record it either.
    live = {"model": "openai/fake", "api_base": server.base_url, "api_key": key, "force_tool": True}
    # By default the 401 stops the run: neither its one line nor the trace holds the key.
    with pytest.raises(VivariumError, match="interrupted") as stopped:
        Experiment(name="stop", policy="cognitive", agents=2, steps=2, llm=live).run(
            tmp_path / "stop.sqlite", progress=False
        )
    texts += [str(stopped.value), "".join(traceback.format_exception(stopped.value))]
    live["on_llm_error"] = "fallback"
    part = Experiment(name="part", policy="cognitive", agents=2, steps=4, llm=live)
    trace = TraceDb(tmp_path / "part.sqlite")
    part.build(trace).run(2, finish=False)
    trace.close()
    argv = ["resume", str(tmp_path / "part.sqlite"), "--no-progress"]
    fallback = ["--on-llm-error", "fallback"]
    assert main([*argv, "--api-base", server.base_url, "--api-key", key, *fallback]) == 0
    out, err_text = capsys.readouterr()
    texts += [out, err_text, logged(debug_logs)]
    resumed = Run.open(tmp_path / "part.sqlite")
    resumed.to_parquet(tmp_path / "part-frames")
    assert resumed.metadata["status"] == "complete"
    check_texts(resumed, key)
    assert any(f"Bearer {key}" == h.get("authorization") for h in server.headers)
    # The gateway itself, and the error a 401 raises from it.
    from vivarium.gateways.litellm_gateway import LiteLLMGateway

    gateway = LiteLLMGateway(api_base=server.base_url, api_key=key)
    texts.append(repr(gateway))
    with FakeOpenAIServer(faults=["401"]) as rejecting:
        gateway.api_base = rejecting.base_url
        with pytest.raises(VivariumError) as auth:
            gateway.chat(model="openai/fake", messages=[{"role": "user", "content": "hi"}])
    assert "rejected Bearer ***" in str(auth.value)
    texts += [str(auth.value), repr(auth.value), "".join(traceback.format_exception(auth.value))]
    assert_nowhere(key, output_bytes(tmp_path), *texts)
