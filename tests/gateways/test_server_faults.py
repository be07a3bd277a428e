"""Servers of a list that hang, 404 or cannot be reached; models litellm cannot place.

Each is a fault a new user met: a hung server sent one call of every step, a model without its
provider recorded as the agents' fallbacks, a URL without ``/v1`` stopping the run with the
advice to wait for the server, and unusable servers of a list going unnoticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_cli
from tests.reliability import outage
from tests.support.experiments import llm_experiment
from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Experiment, Run
from vivarium.errors import ConfigError, RunInterrupted
from vivarium.gateways import LiteLLMGateway, LLMCallError, collect_calls
from vivarium.gateways.base import decision_deadline
from vivarium.gateways.servers import ServerPool, ServerWarning

MODEL = "openai/fake"


# Simultaneous scheduling: the calls of a step in flight at once, one per server.
_experiment = partial(
    llm_experiment, name="faults", agents=3, steps=4, seed=7, model=MODEL, timeout=30
)


def _ask(gateway: LiteLLMGateway, text: str = "hello") -> Any:
    return gateway.chat(model=MODEL, messages=[{"role": "user", "content": text}])


def _free_url() -> str:
    """A URL nothing listens at (a server started and stopped)."""
    srv = FakeOpenAIServer().start()
    url = srv.base_url
    srv.stop()
    return url


# -- 1. a call cancelled in flight (an agent timeout) cools its server down ----------------------
def test_a_call_cancelled_in_flight_cools_its_server_down() -> None:
    with (
        FakeOpenAIServer(faults=lambda i, b: "timeout", timeout_s=30) as hung,
        FakeOpenAIServer(reply=lambda i, b: outage.deterministic_reply(0, b)) as good,
    ):
        gateway = LiteLLMGateway(api_base=[hung.base_url, good.base_url], transport="direct")
        gateway.prepare([MODEL])  # imports done before the clock runs, as a run does

        async def cut_short() -> None:
            call = gateway.achat(model=MODEL, messages=[{"role": "user", "content": "x"}])
            with decision_deadline(0.5):  # the agent timeout, as the engine sets it
                await asyncio.wait_for(call, 0.5)

        with collect_calls() as calls, pytest.raises(TimeoutError):
            asyncio.run(cut_short())
        assert (hung.request_count, good.request_count) == (1, 0)  # ties go to the first
        assert len(calls) == 1 and calls[0].error is not None  # the cancelled attempt, kept
        assert gateway.servers is not None
        assert gateway.servers.cooling() == [True, False] and gateway.servers.failed == [1, 0]
        asyncio.run(gateway.achat(model=MODEL, messages=[{"role": "user", "content": "y"}]))
        assert (hung.request_count, good.request_count) == (1, 1)  # the warm one answers


def test_a_server_cut_twice_in_a_row_is_said_once() -> None:
    """One cancellation may be a stopping run's; a second in a row says the server hangs."""
    from vivarium.gateways.openai_http import encode_body, headers_for

    with FakeOpenAIServer(faults=lambda i, b: "timeout", timeout_s=30) as hung:
        url = hung.base_url
        pool = ServerPool([url], cooldown=0)  # alone: the cut server is tried again at once
        body = encode_body({"model": "fake", "messages": [{"role": "user", "content": "x"}]})

        async def cut(times: int) -> None:
            for _ in range(times):
                with contextlib.suppress(TimeoutError), decision_deadline(0.3):
                    await asyncio.wait_for(pool.apost(body, headers_for("k"), 30), 0.3)

        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            asyncio.run(cut(1))
            assert not said and pool.failed == [1]
            asyncio.run(cut(2))
    assert hung.request_count == 3 and pool.failed == [3]
    texts = [str(w.message) for w in said if issubclass(w.category, ServerWarning)]
    assert len(texts) == 1 and texts[0].startswith(
        f"LLM server {url} had calls cancelled in flight twice in a row (hung? slower "
        "than the agent timeout?): "
    )


def test_a_stopping_runs_cancellations_say_nothing_of_the_servers() -> None:
    """Cancelled with no agent timeout due (Ctrl-C, a sibling's error): no cooldown, no word."""
    from vivarium.gateways.openai_http import encode_body, headers_for

    with (
        FakeOpenAIServer(latency_ms=2000) as one,
        FakeOpenAIServer(latency_ms=2000) as two,
    ):
        pool = ServerPool([one.base_url, two.base_url])
        body = encode_body({"model": "fake", "messages": [{"role": "user", "content": "x"}]})

        async def stop_all() -> None:
            calls = [
                asyncio.ensure_future(pool.apost(body, headers_for("k"), 30)) for _ in range(4)
            ]
            await asyncio.sleep(0.3)
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)

        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for _ in range(2):
                asyncio.run(stop_all())
    assert not [w for w in said if issubclass(w.category, ServerWarning)]
    assert pool.cooling() == [False, False] and pool.failed == [0, 0]


def test_a_hung_server_of_three_takes_one_call_not_one_a_step(tmp_path: Path) -> None:
    """A hung server (60 s timeout) behind a 3 s agent timeout: cut once, then cooled down.

    Before, it was sent one call of every step, each cut by the agent timeout.
    """
    steps = 4
    servers = [outage.server() for _ in range(3)]
    servers[1].faults = lambda index, body: "timeout"
    servers[1].timeout_s = 60
    try:
        run = _experiment(
            [s.base_url for s in servers], steps=steps, agent_timeout=3, agent_retries=2
        ).run(tmp_path / "hung.sqlite")
    finally:
        for srv in servers:
            srv.stop()
    assert run.metadata["status"] == "complete" and run.metadata["steps_done"] == steps
    assert servers[1].request_count == 1  # cut at step 0, then cooling for the run's rest
    assert servers[0].request_count + servers[2].request_count == steps * 3
    calls = run.llm_calls
    assert len(calls) == steps * 3 + 1 and calls["error"].notna().sum() == 1
    assert not run.actions["fallback"].any()


# -- 2. a model litellm cannot place is a configuration error, before step 0 ---------------------
@pytest.mark.parametrize("count", [1, 2], ids=["one-server", "two-servers"])
def test_a_model_without_a_provider_is_one_line_before_step_0(tmp_path: Path, count: int) -> None:
    servers = [outage.server() for _ in range(count)]
    urls = [s.base_url for s in servers]
    try:
        with pytest.raises(ConfigError) as info:
            _experiment(urls[0] if count == 1 else urls, model="fake").run(tmp_path / "x.sqlite")
    finally:
        for srv in servers:
            srv.stop()
    text = str(info.value)
    assert "\n" not in text
    assert "'fake' names no provider litellm knows" in text and "'openai/fake'" in text
    assert sum(s.request_count for s in servers) == 0


def test_a_router_that_cannot_be_built_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from vivarium.gateways.litellm_lib import import_litellm

    gateway = LiteLLMGateway(api_base=["http://a:1/v1", "http://b:2/v1"], transport="litellm")
    litellm = import_litellm()

    def broken(**kwargs: Any) -> Any:
        raise ValueError("no deployment\nfor you")

    monkeypatch.setattr(litellm, "Router", broken)
    with pytest.raises(ConfigError) as info:
        gateway.prepare([MODEL])
    assert str(info.value) == (
        "cannot spread 'openai/fake' over 2 servers with litellm's Router: "
        "ValueError: no deployment for you"
    )


def test_the_cli_says_a_model_without_a_provider_in_one_line(tmp_path: Path) -> None:
    servers = [outage.server() for _ in range(2)]
    try:
        done = run_cli(
            "phase2", "--steps", "1", "--agents", "2", "--model", "fake", "--no-progress",
            "--api-base", ",".join(s.base_url for s in servers), "--db", str(tmp_path / "c.sqlite"),
        )  # fmt: skip
    finally:
        for srv in servers:
            srv.stop()
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "names no provider litellm knows" in lines[0]
    assert "Traceback" not in done.stderr


# -- 3. a 404: one server's wrong path ----------------------------------------------------------
def test_a_server_that_404s_is_passed_over_cooled_and_named() -> None:
    with FakeOpenAIServer() as wrong, FakeOpenAIServer() as good:
        short = f"http://127.0.0.1:{wrong.port}"  # its /v1 missing: every POST is a 404
        gateway = LiteLLMGateway(api_base=[short, good.base_url], transport="direct")
        with collect_calls() as calls, pytest.warns(ServerWarning) as said:
            reply = _ask(gateway)
            _ask(gateway, "again")  # the cooled server waits behind the warm one
        assert reply.content == "fake text reply 0"  # the other server answered
        assert good.request_count == 2
        assert len(calls) == 2 and all(c.error is None for c in calls)  # no agent's attempt
        assert gateway.servers is not None and gateway.servers.cooling() == [True, False]
    assert len(said) == 1
    text = str(said[0].message)
    assert text.startswith(f"LLM server {short} failed: NotFoundError: not found")
    assert f"does {short} need /v1?" in text


@pytest.mark.parametrize("count", [1, 2], ids=["one-server", "two-servers"])
def test_a_run_stopped_by_404s_names_the_servers_and_the_path(tmp_path: Path, count: int) -> None:
    from vivarium.cli import _interrupted_line

    servers = [FakeOpenAIServer().start() for _ in range(count)]
    shorts = [f"http://127.0.0.1:{s.port}" for s in servers]
    db = tmp_path / "404.sqlite"
    try:
        with warnings.catch_warnings(), pytest.raises(RunInterrupted) as info:
            warnings.simplefilter("ignore", ServerWarning)
            _experiment(shorts[0] if count == 1 else shorts, agents=2).run(db)
    finally:
        for srv in servers:
            srv.stop()
    exc = info.value
    text = str(exc)
    assert "\n" not in text and "NotFoundError" in text
    for short in shorts:
        assert short in text
    assert "need /v1?" in text
    assert Run.open(db).metadata["status"] == "interrupted"
    line = _interrupted_line(exc)
    assert "once the server is back" not in line
    assert line.endswith(
        f"once the URL (or model) is right (`--api-base` on resume): vvm resume {db}"
    )


def test_a_404_is_never_named_in_a_record() -> None:
    with FakeOpenAIServer() as srv:
        short = f"http://127.0.0.1:{srv.port}"
        gateway = LiteLLMGateway(api_base=short, transport="direct")
        with collect_calls() as calls, pytest.raises(LLMCallError) as info:
            _ask(gateway)
    assert info.value.kind == "not_found" and f"does {short} need /v1?" in str(info.value)
    assert len(calls) == 1 and calls[0].error == "NotFoundError: not found"


# -- 4. servers that cannot be used are said, once each ----------------------------------------
def test_unusable_servers_of_a_list_are_said_once_each(tmp_path: Path) -> None:
    dead = _free_url()
    servers = [outage.server() for _ in range(2)]
    tls = servers[1].base_url.replace("http://", "https://")  # https to an http server
    urls = [dead, tls, servers[0].base_url]
    try:
        with pytest.warns(ServerWarning) as said:
            run = _experiment(urls).run(tmp_path / "warned.sqlite")
    finally:
        for srv in servers:
            srv.stop()
    assert run.metadata["status"] == "complete" and not run.actions["fallback"].any()
    texts = sorted(str(w.message) for w in said if issubclass(w.category, ServerWarning))
    assert len(texts) == 2, texts
    by_server = {url: [t for t in texts if t.startswith(f"LLM server {url} ")] for url in urls}
    assert len(by_server[dead]) == 1 and "cannot be reached (" in by_server[dead][0]
    assert len(by_server[tls]) == 1 and "failed: APIConnectionError" in by_server[tls][0]
    assert not by_server[urls[2]]
    assert all("calls go to the other 2 servers" in t for t in texts)


def test_the_cli_says_unusable_servers_in_one_line_each(tmp_path: Path) -> None:
    dead = _free_url()
    with FakeOpenAIServer() as srv:
        done = run_cli(
            "phase2", "--steps", "2", "--agents", "2", "--model", MODEL, "--force-tool",
            "--no-progress", "--api-base", f"{dead},{srv.base_url}",
            "--db", str(tmp_path / "cli.sqlite"),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if line.strip()]
    assert notes == [
        next(n for n in notes if n.startswith(f"vvm phase2: note: LLM server {dead} cannot be"))
    ]
    assert notes[0].endswith("its calls go to the other server while it cools down")


# -- 5. vvm run --api-base ------------------------------------------------------------------------
def test_vvm_run_takes_the_servers_over_the_files(tmp_path: Path) -> None:
    dead = _free_url()
    config = tmp_path / "exp.yaml"
    config.write_text(
        "name: over\npolicy: cognitive\nagents: 2\nsteps: 2\nseed: 1\n"
        f"llm:\n  model: {MODEL}\n  force_tool: true\n  api_base:\n    - {dead}\n"
    )
    servers = [outage.server() for _ in range(2)]
    try:
        done = run_cli(
            "run", str(config), "--no-progress", "--db", str(tmp_path / "r.sqlite"),
            "--api-base", ",".join(s.base_url for s in servers),
        )  # fmt: skip
    finally:
        for srv in servers:
            srv.stop()
    assert done.returncode == 0, done.stderr
    assert sum(s.request_count for s in servers) == 4  # 2 agents x 2 steps, none to the file's
    run = Run.open(tmp_path / "r.sqlite")
    file_run = Experiment.from_file(config)
    assert run.run_id == file_run.run_id  # where calls go is no part of the run's identity


def test_vvm_run_api_base_errors_are_one_line(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: plain\npolicy: random\nagents: 2\nsteps: 1\n")
    done = run_cli("run", str(plain), "--api-base", "http://127.0.0.1:1/v1")
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"vvm run: error: --api-base: {plain} has no llm section (no LLM agents to send)"
    )
    llm = tmp_path / "llm.yaml"
    llm.write_text(f"name: l\npolicy: cognitive\nllm:\n  model: {MODEL}\n")
    done = run_cli("run", str(llm), "--api-base", "ftp://x/v1")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "vvm run: error: --api-base: api_base: 'ftp://x/v1' is not an http:// or https:// URL "
        "with a host"
    )


def test_a_dead_server_is_said_again_by_the_next_run() -> None:
    """Once per server and pool, not once per process: a re-run cell says it again (Python's
    default filter alone would drop the same words from the same line)."""
    script = (
        "from vivarium.gateways.servers import ServerPool\n"
        "for _ in range(2):\n"
        "    pool = ServerPool(['http://127.0.0.1:9/v1', 'http://127.0.0.1:10/v1'])\n"
        "    pool.cool(0, 'Connection refused')\n"
        "    pool.cool(0, 'Connection refused')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stderr.count("ServerWarning: LLM server http://127.0.0.1:9/v1") == 2
