"""Success metrics tell fallbacks apart: a decision that produced no usable action (an unusable
reply, a policy error) is never a success, and its share is reported as a fallback rate."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Experiment
from vivarium.analysis import success_ci, success_rate, summary


def test_a_run_of_unusable_replies_has_success_rate_zero_not_one(tmp_path: Path) -> None:
    # Every reply is empty: each decision is the agent's fallback noop (content, not an outage).
    with FakeOpenAIServer(faults=lambda i, body: "empty") as server:
        exp = Experiment(
            name="empty-replies",
            policy="cognitive",
            agents=2,
            steps=3,
            scheduling="simultaneous",
            llm={"model": "openai/fake", "api_base": server.base_url, "force_tool": True},
        )
        with pytest.warns(UserWarning, match="6 of 6 decisions were fallbacks"):
            run = exp.run(tmp_path / "t.sqlite")
    assert run.metadata["status"] == "complete"  # a content failure is behaviour: it runs on
    actions = run.actions
    assert actions["fallback"].all() and not actions["success"].any()
    assert (actions["error"] == "empty reply").all()

    per_run = success_rate(run, per="run", as_="polars").row(0, named=True)
    assert per_run["decisions"] == 6 and per_run["successes"] == 0
    assert per_run["success_rate"] == 0.0
    assert per_run["fallbacks"] == 6 and per_run["fallback_rate"] == 1.0
    row = summary(run, as_="polars").row(0, named=True)
    assert (row["success_rate"], row["fallbacks"], row["fallback_rate"]) == (0.0, 6, 1.0)
    assert success_ci(run, per="run", method="wilson", as_="polars")["success_rate"][0] == 0.0


def frame(with_column: bool) -> pl.DataFrame:
    """Run r: 4 decisions; the 2nd and 4th fell back. Without the column, as schema-1 traces
    recorded an unusable reply: a successful noop whose metadata says parse_path fallback."""
    meta_fb = '{"fallback_reason":"empty reply","parse_path":"fallback"}'
    data = {
        "run_id": ["r"] * 4,
        "step": [0, 0, 1, 1],
        "agent_id": ["a", "b", "a", "b"],
        "action": ["post", "noop", "post", "noop"],
        "metadata": ['{"parse_path":"tool_call"}', meta_fb, None, meta_fb],
    }
    if with_column:
        data["success"] = [True, False, False, False]
        data["fallback"] = [False, True, False, True]
    else:
        data["success"] = [True, True, False, True]  # the old layout called them successes
    return pl.DataFrame(data)


@pytest.mark.parametrize("with_column", [True, False], ids=["fallback-column", "schema-1"])
def test_success_rate_excludes_fallbacks_and_reports_their_rate(with_column: bool) -> None:
    out = success_rate(frame(with_column), per="step", as_="polars")
    # step 0: a succeeded, b fell back; step 1: a failed (a real failure), b fell back
    assert out.select("step", "decisions", "successes", "fallbacks").rows() == [
        (0, 2, 1, 1),
        (1, 2, 0, 1),
    ]
    assert out["success_rate"].to_list() == [0.5, 0.0]
    assert out["fallback_rate"].to_list() == [0.5, 0.5]
    row = summary(frame(with_column), as_="polars").row(0, named=True)
    assert row["success_rate"] == 0.25 and row["fallbacks"] == 2 and row["fallback_rate"] == 0.5
