"""Run health: a run that is not a result says so wherever it is looked at (``repr``, the
notebook's HTML, ``summary()``, a warning from ``Experiment.run()``), in the same words as the
CLI; a clean run says ``ok``."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Experiment, Run
from vivarium.errors import RunHealthWarning, RunInterrupted
from vivarium.experiment.runner import health_warning
from vivarium.trace.health import RunHealth


def failing_run(tmp_path: Path, **llm: object) -> Run:
    """2 agents x 3 steps against a server that answers every request with HTTP 500."""
    with FakeOpenAIServer(faults=lambda i, body: "500") as server:
        exp = Experiment(
            name="all-failed",
            policy="cognitive",
            agents=2,
            steps=3,
            scheduling="simultaneous",
            llm={"model": "openai/fake", "api_base": server.base_url, "num_retries": 0, **llm},
        )
        return exp.run(tmp_path / "t.sqlite")


def test_an_all_failed_llm_run_warns_once_and_shows_red(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = failing_run(tmp_path, on_llm_error="fallback")
    health = run.health
    assert isinstance(health, RunHealth)
    # The numbers, counted independently from the frames.
    calls, actions = run.llm_calls, run.actions
    assert health.llm_calls == len(calls) == 6 and health.llm_errors == 6
    assert health.decisions == len(actions) == 6 and health.fallbacks == 6
    assert health.fallback_rate == 1.0 and health.status == "complete"
    assert health.last_llm_error == calls["error"].iloc[-1]
    assert not health.ok
    assert health.problems == (
        f"every LLM call failed (6 of 6); the last: {calls['error'].iloc[-1]}",
        "6 of 6 decisions were fallbacks, 6 of them failures "
        "(no usable action; the reasons are in actions.error)",
    )
    assert str(health) == "; ".join(health.problems)

    mine = [w for w in caught if issubclass(w.category, RunHealthWarning)]
    assert len(mine) == 1  # once, not per step or per problem
    assert str(mine[0].message) == health_warning(run) == f"run {run.run_id} ({run.path}): {health}"
    assert mine[0].filename == __file__  # points at the caller's line

    assert f"health={health}" in repr(run)
    html = run._repr_html_()
    assert "color:#c00000" in html and "every LLM call failed (6 of 6)" in html
    table = run.summary()
    assert table["health"][0] == "\n".join(health.problems)
    assert table["success_rate"][0] == 0.0 and table["fallbacks"][0] == 6


def test_by_default_the_same_server_stops_the_run_and_health_says_interrupted(
    tmp_path: Path,
) -> None:
    with pytest.raises(RunInterrupted):
        failing_run(tmp_path)
    run = Run.open(tmp_path / "t.sqlite")
    health = run.health
    assert health.status == "interrupted" and health.steps_done == 0
    assert health.decisions == 0 and health.fallbacks == 0  # nothing of the outage recorded
    assert len(health.problems) == 1
    assert health.problems[0].startswith("interrupted after 0 of 3 steps: agent_00")
    assert health.problems[0].endswith("(resume with run.resume())")
    assert "InternalServerError: injected 500" in health.problems[0]


def test_a_clean_run_is_ok_everywhere_and_warns_nothing(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunHealthWarning)
        run = Experiment(name="clean", agents=3, steps=4).run(tmp_path / "c.sqlite")
    health = run.health
    assert health.ok and health.problems == () and str(health) == "ok"
    assert (health.decisions, health.fallbacks, health.llm_calls) == (12, 0, 0)
    assert "health=ok" in repr(run) and "#c00000" not in run._repr_html_()
    assert run.summary()["health"][0] == "ok"
    assert health_warning(run) is None


def _content_fallback_run(tmp_path: Path, empty: object) -> Run:
    """2 agents x 6 steps (12 requests); request ``i`` gets an empty reply when ``empty(i)``
    (the model's own behaviour: a content fallback), otherwise a usable tool call."""
    with FakeOpenAIServer(faults=lambda i, body: "empty" if empty(i) else None) as server:
        exp = Experiment(
            name="content",
            policy="cognitive",
            agents=2,
            steps=6,
            llm={"model": "openai/fake", "api_base": server.base_url, "force_tool": True},
        )
        return exp.run(tmp_path / "c.sqlite")


def test_a_few_unusable_replies_are_behaviour_counted_but_not_a_problem(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunHealthWarning)
        run = _content_fallback_run(tmp_path, lambda i: i % 4 == 0)  # requests 0, 4, 8
    assert int(run.actions["fallback"].sum()) == 3
    health = run.health
    assert health.ok and health.problems == ()
    assert (health.decisions, health.fallbacks, health.failed_fallbacks) == (12, 3, 0)


def test_mostly_unusable_replies_are_not_a_result(tmp_path: Path) -> None:
    with pytest.warns(RunHealthWarning, match=r"9 of 12 decisions were fallbacks \(no usable"):
        run = _content_fallback_run(tmp_path, lambda i: i % 4 != 0)
    assert int(run.actions["fallback"].sum()) == 9 and not run.health.ok
