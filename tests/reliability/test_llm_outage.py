"""An LLM server that goes away mid-run: the outage is infrastructure, not agent behaviour.

With the default ``on_llm_error="stop"`` a 30-step run whose server is killed in the middle
ends ``interrupted`` at the outage, with every step before it kept and none of the outage's
decisions recorded; the CLI exits non-zero with one line saying how to resume; once the server
is back, ``vvm resume`` / ``Run.resume()`` finishes it into the trace of a run that never saw an
outage (same actions, steps, state hashes, messages, LLM calls). With ``"fallback"`` the run
goes on as before, its outage decisions visibly marked as fallbacks.
"""

from __future__ import annotations

import json
import time
import warnings
from functools import partial
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.reliability import outage
from tests.support.experiments import llm_experiment
from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Run
from vivarium.errors import RunHealthWarning, RunInterrupted
from vivarium.trace.validate import validate_trace

STEPS, AGENTS = 30, 3
OUTAGE_AT = AGENTS * STEPS // 2  # requests answered before the server dies: mid-run


def cli_flags(url: str, db: Path) -> list[str]:
    return [
        "--steps", str(STEPS), "--agents", str(AGENTS), "--seed", "5",
        "--model", "openai/fake", "--api-base", url, "--force-tool",
        "--timeout", "2", "--num-retries", "1", "--no-progress", "--db", str(db),
    ]  # fmt: skip


def test_cli_run_stops_at_the_outage_and_resume_equals_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    ref, cut = tmp_path / "reference.sqlite", tmp_path / "outage.sqlite"
    srv = outage.server()
    port, url = srv.port, srv.base_url
    try:
        done = run_cli("phase2", *cli_flags(url, ref))
        assert done.returncode == 0, done.stderr

        outage.stop_after(srv, OUTAGE_AT)  # the same server, killed mid-run
        stopped = run_cli("phase2", *cli_flags(url, cut))
    finally:
        srv.stop()

    # A non-zero exit and one line on stderr that says what happened and how to go on.
    assert stopped.returncode == 3, stopped.stderr
    lines = stopped.stderr.strip().splitlines()
    assert len(lines) == 1, stopped.stderr
    assert "interrupted" in lines[0] and f"vvm resume {cut}" in lines[0]
    assert "APIConnectionError" in lines[0] or "connection" in lines[0].lower()
    assert "succeeded" not in stopped.stdout  # no summary of a run that is not a result

    run = Run.open(cut)
    meta = run.metadata
    assert meta["status"] == "interrupted"
    interrupted_at = meta["steps_done"]
    assert 0 < interrupted_at < STEPS
    assert "\n" not in meta["error"] and f"at step {interrupted_at}:" in meta["error"]
    assert not run.actions["fallback"].any()  # the outage is not in the trace as behaviour
    assert run.actions["success"].all() and len(run.actions) == interrupted_at * AGENTS
    assert validate_trace(cut).status == "incomplete"
    assert not run.health.ok and run.health.problems[0].startswith("interrupted after")

    time.sleep(0.5)  # the server stays down a moment, then comes back on its port
    srv = outage.server(port=port)
    try:
        resumed = run_cli("resume", str(cut), "--api-base", url, "--no-progress")
    finally:
        srv.stop()
    assert resumed.returncode == 0, resumed.stderr
    assert Run.open(cut).metadata["status"] == "complete"
    assert validate_trace(cut).status == "ok"
    outage.assert_same_run(ref, cut)


_experiment = partial(
    llm_experiment, name="outage", agents=AGENTS, steps=STEPS, seed=11, timeout=2, num_retries=1
)


@pytest.mark.parametrize("graph", [True, False], ids=["langgraph", "plain"])
def test_experiment_run_raises_one_line_and_resume_finishes_it(tmp_path: Path, graph: bool) -> None:
    ref, cut = tmp_path / "reference.sqlite", tmp_path / "outage.sqlite"
    srv = outage.server()
    port, url = srv.port, srv.base_url
    try:
        _experiment(url, graph=graph).run(ref)
        outage.stop_after(srv, OUTAGE_AT)
        with pytest.raises(RunInterrupted) as info:
            _experiment(url, graph=graph).run(cut)
    finally:
        srv.stop()
    exc = info.value
    text = str(exc)
    assert "\n" not in text
    step = Run.open(cut).metadata["steps_done"]
    assert exc.step == step and 0 < step < STEPS
    assert exc.run_id == _experiment(url, graph=graph).run_id and exc.path == str(cut)
    assert text.startswith(f"run {exc.run_id} interrupted: agent_")
    assert f"at step {step}:" in text and f"steps 0-{step - 1} are kept in {cut}" in text
    assert f"Run.open({str(cut)!r}).resume()" in text and f"vvm resume {cut}" in text

    srv = outage.server(port=port)
    try:
        resumed = Run.open(cut).resume(llm={"api_base": url})
    finally:
        srv.stop()
    assert resumed.metadata["status"] == "complete" and resumed.health.ok
    outage.assert_same_run(ref, cut)


def test_on_llm_error_fallback_keeps_going_with_the_fallbacks_marked(tmp_path: Path) -> None:
    db = tmp_path / "fallback.sqlite"
    srv = outage.server()
    url = srv.base_url
    outage.stop_after(srv, OUTAGE_AT)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # No retries: each call of the outage fails at once (the test stays short).
            run = _experiment(url, on_llm_error="fallback", num_retries=0).run(db)
    finally:
        srv.stop()
    assert run.metadata["status"] == "complete" and run.metadata["steps_done"] == STEPS
    actions = run.actions
    fell = actions[actions["fallback"]]
    # Everything after the server died is a fallback, each one laid out like every other.
    assert sorted(set(fell["step"])) == list(range(STEPS // 2, STEPS))
    assert len(fell) == AGENTS * (STEPS - STEPS // 2)
    assert (fell["action"] == "noop").all() and not fell["success"].any()
    assert fell["error"].str.startswith("llm error: LLMCallError: openai/fake: ").all()
    assert fell["error"].str.contains("connection").all()
    assert fell["metadata"].map(lambda m: "fallback_reason" not in json.loads(m)).all()
    ok = actions[~actions["fallback"]]
    assert (ok["action"] == "post_message").all() and ok["success"].all()
    assert ok["error"].isna().all()
    # The setting is recorded with the run, not in its identity.
    assert run.run_id == _experiment(url, num_retries=0).run_id
    from vivarium.trace.resume import recorded_llm_settings

    assert recorded_llm_settings(db)["on_llm_error"] == "fallback"
    # Health says so, and Experiment.run() warned once, in the same words.
    health = run.health
    assert not health.ok and health.fallbacks == len(fell)
    assert health.problems == (
        f"{len(fell)} of {STEPS * AGENTS} decisions were fallbacks, {len(fell)} of them failures "
        "(no usable action; the reasons are in actions.error)",
    )
    mine = [w for w in caught if issubclass(w.category, RunHealthWarning)]
    assert len(mine) == 1 and str(health) in str(mine[0].message)


def test_cli_on_llm_error_fallback_flag_and_the_summary_counts_fallbacks(tmp_path: Path) -> None:
    db = tmp_path / "fallback-cli.sqlite"
    srv = outage.server()
    outage.stop_after(srv, OUTAGE_AT)
    try:
        flags = [*cli_flags(srv.base_url, db), "--num-retries", "0"]
        done = run_cli("phase2", *flags, "--on-llm-error", "fallback")
    finally:
        srv.stop()
    assert done.returncode == 0, done.stderr
    run = Run.open(db)
    fallbacks = int(run.actions["fallback"].sum())
    succeeded = int(run.actions["success"].sum())
    assert fallbacks > 0 and succeeded + fallbacks == STEPS * AGENTS
    assert f"succeeded {succeeded}/{STEPS * AGENTS}" in done.stdout
    assert f"{fallbacks} fallbacks" in done.stdout
    assert f"succeeded {STEPS * AGENTS}/{STEPS * AGENTS}" not in done.stdout
    warning = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and f"{fallbacks} of {STEPS * AGENTS} decisions" in warning[0]


def test_vvm_run_takes_on_llm_error_over_the_config_file(tmp_path: Path) -> None:
    """``vvm run cfg.yaml --on-llm-error fallback``: the flag sets the file's LLM setting."""
    with FakeOpenAIServer(faults=lambda i, body: "503") as srv:
        cfg = tmp_path / "llm.yaml"
        cfg.write_text(
            "name: down\npolicy: cognitive\nagents: 2\nsteps: 2\nscheduling: simultaneous\n"
            f"llm: {{model: openai/fake, api_base: '{srv.base_url}', num_retries: 0}}\n"
        )
        stopped = run_cli("run", str(cfg), "--no-progress", "--db", str(tmp_path / "a.sqlite"))
        flags = ["--no-progress", "--db", str(tmp_path / "b.sqlite"), "--on-llm-error", "fallback"]
        fell = run_cli("run", str(cfg), *flags)
    assert stopped.returncode == 3
    line = stopped.stderr.strip()
    assert "\n" not in line and "interrupted" in line and "ServiceUnavailableError" in line
    assert line.endswith(f"once the server is back: vvm resume {tmp_path / 'a.sqlite'}")
    assert fell.returncode == 0, fell.stderr
    assert "succeeded 0/4; 4 fallbacks (no usable action)" in fell.stdout
    assert Run.open(tmp_path / "b.sqlite").actions["fallback"].all()
