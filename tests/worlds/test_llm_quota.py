"""An agent past its LLM-token quota makes no more model calls: the check comes before the call,
and the decision it does not make is recorded with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from vivarium import Experiment

QUOTA = 300


def cognitive(scheduling: str, steps: int = 6) -> Experiment:
    return Experiment(
        name="quota",
        world="ecology",
        policy="cognitive",
        agents=2,
        steps=steps,
        seed=4,
        scheduling=scheduling,
        llm={"mock": True},
        world_options={"llm_token_quota": QUOTA},
    )


@pytest.mark.parametrize("scheduling", ["sequential", "simultaneous"])
def test_no_call_is_made_past_the_quota(tmp_path: Path, scheduling: str) -> None:
    run = cognitive(scheduling).run(tmp_path / "t.sqlite")
    calls, actions = run.llm_calls, run.actions
    for agent in ("agent_000", "agent_001"):
        mine = calls[calls["agent_id"] == agent].sort_values("step")
        tokens = (mine["prompt_tokens"] + mine["completion_tokens"]).tolist()
        used_before = [sum(tokens[:i]) for i in range(len(tokens))]
        # every call was made while the agent was within its quota ...
        assert all(used <= QUOTA for used in used_before), used_before
        # ... and the agent went past it (so the test shows the stop)
        total = sum(tokens)
        assert total > QUOTA
        last_call_step = int(mine["step"].max())
        later = actions[(actions["agent_id"] == agent) & (actions["step"] > last_call_step)]
        assert len(later) == 6 - 1 - last_call_step > 0
        assert set(later["action"]) == {"noop"}
        assert not later["success"].any()
        expected = f"over quota: llm tokens {total} used > quota {QUOTA}: no model call"
        assert set(later["error"]) == {expected}


def test_the_decision_that_crossed_the_quota_is_refused_by_the_world(tmp_path: Path) -> None:
    run = cognitive("sequential").run(tmp_path / "t.sqlite")
    calls, actions = run.llm_calls, run.actions
    mine = calls[calls["agent_id"] == "agent_000"].sort_values("step")
    last = int(mine["step"].max())
    crossing = actions[(actions["agent_id"] == "agent_000") & (actions["step"] == last)].iloc[0]
    assert crossing["action"] == "post_message"
    assert not crossing["success"]
    assert crossing["error"].startswith("over quota: llm tokens ")


def test_workflow_agents_stop_calling_too(tmp_path: Path) -> None:
    exp = Experiment.from_file(
        ROOT / "data/experiments/ecology.yaml",
        steps=12,
        world_options={"llm_token_quota": 2000},
    )
    run = exp.run(tmp_path / "t.sqlite")
    calls, actions = run.llm_calls, run.actions
    for agent in ("alpha_2", "beta_2"):
        mine = calls[calls["agent_id"] == agent]
        per_step = (mine["prompt_tokens"] + mine["completion_tokens"]).groupby(mine["step"]).sum()
        steps = sorted(per_step.index)
        before = [per_step[steps[:i]].sum() for i in range(len(steps))]
        assert all(used <= 2000 for used in before)
        assert per_step.sum() > 2000
        skipped = actions[(actions["agent_id"] == agent) & (actions["step"] > max(steps))]
        assert len(skipped) > 0
        assert skipped["error"].str.contains("no model call").all()


def test_a_run_without_a_quota_calls_every_step(tmp_path: Path) -> None:
    exp = cognitive("sequential").config.model_copy(update={"world_options": {}})
    run = Experiment(exp).run(tmp_path / "t.sqlite")
    assert len(run.llm_calls) == 12
