"""Misuse: LLM runs when the server, the key, the model name or the user's own policy is wrong.

Each scenario ends in a right result or one clear line, and nothing is lost: the trace keeps
every committed step, an outage is never recorded as the agents' behaviour, and a run stopped
by one can be resumed into the run that would have been.
"""

from __future__ import annotations

import _thread
import socket
import threading
import time
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.reliability import outage
from tests.support import experiments
from tests.support.fake_openai import FakeOpenAIServer
from vivarium import ActionRequest, Experiment, Run
from vivarium.errors import ConfigError, RunHealthWarning, RunInterrupted
from vivarium.experiment.build import register_policy

llm_experiment = partial(
    experiments.llm_experiment, name="misuse", agents=2, steps=8, seed=3, num_retries=0
)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_server_killed_mid_run_then_restarted(tmp_path: Path) -> None:
    """The user's server crashes during a run, and they restart it: resume, same run."""
    ref, cut = tmp_path / "ref.sqlite", tmp_path / "cut.sqlite"
    srv = outage.server()
    port, url = srv.port, srv.base_url
    try:
        llm_experiment(url).run(ref)
        outage.stop_after(srv, 7)  # during step 3 (2 requests a step)
        with pytest.raises(RunInterrupted) as info:
            llm_experiment(url).run(cut)
    finally:
        srv.stop()
    assert "\n" not in str(info.value) and "resume" in str(info.value)
    assert Run.open(cut).metadata["steps_done"] == info.value.step
    # Resumed too early, while the server is still down: one line again, and nothing lost.
    before = outage.table(cut, "SELECT * FROM steps ORDER BY step")
    with pytest.raises(ConfigError, match="^cannot reach the LLM server at "):
        Run.open(cut).resume(llm={"api_base": url})
    assert outage.table(cut, "SELECT * FROM steps ORDER BY step") == before
    assert Run.open(cut).metadata["status"] == "interrupted"
    srv = outage.server(port=port)
    try:
        Run.open(cut).resume(llm={"api_base": url})
    finally:
        srv.stop()
    outage.assert_same_run(ref, cut)


def test_wrong_api_base_port_is_one_line_before_any_step(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    db = tmp_path / "wrong-port.sqlite"
    out = run_cli("phase2", "--model", "openai/fake", "--api-base", base, "--db", str(db))
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert line == (
        f"vvm phase2: error: cannot reach the LLM server at {base} (Connection refused): "
        "is it running?"
    )


def test_wrong_api_key_stops_at_step_0_and_resumes_with_the_right_one(tmp_path: Path) -> None:
    db = tmp_path / "key.sqlite"
    server: FakeOpenAIServer

    def refuse_wrong_key(index: int, body: dict[str, Any]) -> str | None:
        return None if server.headers[index].get("authorization") == "Bearer sk-right" else "401"

    server = FakeOpenAIServer(faults=refuse_wrong_key, reply=outage.deterministic_reply)
    with server:
        flags = ["--model", "openai/fake", "--api-base", server.base_url, "--force-tool"]
        flags += ["--steps", "3", "--agents", "2", "--no-progress", "--db", str(db)]
        wrong = run_cli("phase2", *flags, "--api-key", "sk-wrong")
        line = one_line(wrong.stderr)
        assert wrong.returncode == 3
        assert "interrupted" in line and "AuthenticationError" in line and "at step 0" in line
        assert "sk-wrong" not in line  # the key is never printed
        meta = Run.open(db).metadata
        assert (meta["status"], meta["steps_done"]) == ("interrupted", 0)
        fixed = run_cli(
            "resume", str(db), "--api-base", server.base_url, "--api-key", "sk-right",
            "--no-progress",
        )  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr
    run = Run.open(db)
    assert run.metadata["status"] == "complete" and run.health.ok
    assert (run.actions["action"] == "post_message").all()


def test_a_model_name_the_server_does_not_know_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "model.sqlite"
    known = "openai/fake"

    def only_known(index: int, body: dict[str, Any]) -> str | None:
        return None if body.get("model") == known.removeprefix("openai/") else "404"

    with FakeOpenAIServer(faults=only_known) as server:
        out = run_cli(
            "phase2", "--model", "openai/fkae", "--api-base", server.base_url,
            "--steps", "3", "--no-progress", "--db", str(db),
        )  # fmt: skip
    assert out.returncode == 3
    line = one_line(out.stderr)
    assert "openai/fkae: NotFoundError" in line and "vvm resume" in line
    assert Run.open(db).metadata["status"] == "interrupted"
    assert len(Run.open(db).actions) == 0  # no noops recorded for a model that is not there


class ExplodesOnStep3:
    """A user's policy with a bug that shows at step 3."""

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        if time_step == 3:
            raise KeyError("score")
        return ActionRequest(
            run_id=run_id, time_step=time_step, agent_id=agent_id, action_name="noop"
        )


def test_a_policy_that_raises_on_step_3_is_a_visible_fallback(tmp_path: Path) -> None:
    register_policy("explodes_on_3", lambda config, agent, shared: ExplodesOnStep3())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = Experiment(name="bug", policy="explodes_on_3", agents=2, steps=6).run(
            tmp_path / "bug.sqlite"
        )
    assert run.metadata["status"] == "complete"  # the agent's failure, recorded; the run goes on
    fell = run.actions[run.actions["fallback"]]
    assert fell["step"].tolist() == [3, 3] and not fell["success"].any()
    assert (fell["error"] == "policy error: KeyError: 'score'").all()
    assert run.health.problems == (
        "2 of 12 decisions were fallbacks, 2 of them failures "
        "(no usable action; the reasons are in actions.error)",
    )
    mine = [w for w in caught if issubclass(w.category, RunHealthWarning)]
    assert len(mine) == 1 and "2 of 12 decisions were fallbacks" in str(mine[0].message)


@pytest.mark.usefixtures("ctrl_c")
def test_ctrl_c_during_an_llm_run_then_resume(tmp_path: Path) -> None:
    """Ctrl-C while the step's calls are in flight: they are cancelled, the run is marked
    interrupted with the committed steps kept, and a resume gives the uninterrupted run."""
    ref, cut = tmp_path / "ref.sqlite", tmp_path / "cut.sqlite"
    srv = outage.server(latency_ms=150)
    url = srv.base_url
    try:
        llm_experiment(url, steps=6).run(ref)
        before = srv.request_count

        def ctrl_c_during_next_step(step: int, record: Any) -> None:
            if step == 1:  # step 2's calls take 150 ms: Ctrl-C lands while they are in flight
                threading.Timer(0.05, _thread.interrupt_main).start()

        with pytest.raises(KeyboardInterrupt):
            llm_experiment(url, steps=6).run(cut, on_step=ctrl_c_during_next_step)
        time.sleep(0.5)
        sent = srv.request_count - before
        time.sleep(0.5)
        assert srv.request_count - before == sent  # nothing more went out after Ctrl-C
        assert srv.in_flight == 0
        meta = Run.open(cut).metadata
        assert meta["status"] == "interrupted" and meta["steps_done"] == 2
        resumed = Run.open(cut).resume(llm={"api_base": url})
    finally:
        srv.stop()
    assert resumed.metadata["status"] == "complete"
    outage.assert_same_run(ref, cut)
