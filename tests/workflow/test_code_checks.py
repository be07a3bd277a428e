"""What a run refuses, loading refuses: code steps and conditions are checked at load time by the
same rules the run applies, and ``context`` reads the workflow's variables in both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted import ScriptedChat
from tests.workflow.wf_helpers import act, observation, write_agent
from vivarium import Experiment, sandbox
from vivarium.errors import ConfigError
from vivarium.workflow.config import AgentSpec, load_agent
from vivarium.workflow.policy import WorkflowPolicy


def spec_with_code(tmp_path: Path, code: str, **variables: Any) -> AgentSpec:
    workflow = {
        "states": ["a"],
        "variables": variables,
        "steps": [
            {"name": "count", "type": "code", "code": code, "on_failure": "fail"},
            {"name": "act", "type": "llm", "prompt": "Act."},
        ],
    }
    return load_agent(write_agent(tmp_path / "agent", {"id": "tester", "workflow": workflow}))


def decide(policy: WorkflowPolicy, t: int, state: Any = None) -> Any:
    return policy.decide(
        run_id="r", time_step=t, agent_id="tester", observation=observation(t, state)
    )


def test_context_get_reads_variables_and_the_observation(tmp_path: Path) -> None:
    code = "seen = context.get('seen', 0) + 1\nrich = context['balance'] > 10"
    policy = WorkflowPolicy(
        spec_with_code(tmp_path, code), ScriptedChat(by_tool={"act": [act("noop")]})
    )
    state = None
    for t in range(3):
        req = decide(policy, t, state)
        assert req.metadata["steps"][0]["status"] == "ok", req.metadata["steps"][0]
        assert req.metadata["parse_path"] != "fallback"
        state = req.metadata["agent_state"]
    # seen counts decisions: 1, 2, 3 (the first read found no variable and took the default)
    assert state["variables"]["seen"] == 3
    assert state["variables"]["rich"] == (observation(2, None)["balance"] > 10)


def test_context_sees_what_earlier_lines_assigned() -> None:
    assigned = sandbox.execute("a = 2\nb = context['a'] * 10", {})
    assert assigned == {"a": 2, "b": 20}
    assert sandbox.evaluate("context.get('missing', 'none')", {"x": 1}) == "none"


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("y = undefined_thing + 1", "unknown name 'undefined_thing'"),
        # issue 13: ``context['x'] = v`` is ``x = v`` (agent ecology 002 "Code Steps"), so a
        # write through the view is refused only where assigning the name itself would be.
        ("context['state'] = 1", "cannot assign 'state'"),
        ("context[agent_id] = 1", "needs a quoted name as the key"),
        ("context = {}", "'context' cannot be assigned"),
        ("a, state = 1, 2", "cannot assign 'state'"),
        ("last_transition['x'] = 1", "cannot assign 'last_transition'"),
        ("n += 1", "unknown name 'n'"),
    ],
)
def test_what_the_run_would_refuse_loading_refuses(tmp_path: Path, code: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        spec_with_code(tmp_path, code)
    assert message in str(err.value)
    assert "workflow.steps[0].code" in str(err.value)
    assert "\n" not in str(err.value)
    # and the run refuses the same code (a spec built in code skips the loader's checks)
    workflow = {
        "states": ["a"],
        "steps": [
            {"name": "count", "type": "code", "code": code, "on_failure": "fail"},
            {"name": "act", "type": "llm", "prompt": "Act."},
        ],
    }
    spec = AgentSpec.model_validate({"id": "tester", "workflow": workflow})
    req = decide(WorkflowPolicy(spec, ScriptedChat(by_tool={"act": [act("noop")]})), 0)
    assert req.metadata["steps"][0]["status"] == "failed"


def test_a_condition_reading_an_unknown_name_is_refused(tmp_path: Path) -> None:
    workflow = {
        "states": ["a", "b"],
        "transitions": [{"from": "a", "to": "b", "condition": "ready and balanse > 3"}],
        "variables": {"ready": False},
        "steps": [{"name": "act", "type": "llm", "prompt": "Act."}],
    }
    with pytest.raises(ConfigError, match=r"transitions\[0\]\.condition: unknown name 'balanse'"):
        load_agent(write_agent(tmp_path / "agent", {"id": "tester", "workflow": workflow}))


def test_names_a_code_step_assigns_observation_fields_and_declared_variables_are_known(
    tmp_path: Path,
) -> None:
    code = "total = context.get('total', 0) + balance + tick\nlast = last_action_result"
    spec_with_code(tmp_path, code)
    spec_with_code(tmp_path, "wealth = wealth + 1", wealth=0)  # a declared variable


def test_the_shipped_agents_load() -> None:
    from tests.conftest import ROOT

    for name in ("alpha_2", "beta_2"):
        load_agent(ROOT / "data/agents" / name)


def test_a_context_get_agent_acts_in_a_run(tmp_path: Path) -> None:
    """The issue's case: every decision was a noop because `context` was unknown at run time."""
    spec_with_code(tmp_path, "visits = context.get('visits', 0) + 1")
    exp = Experiment(
        name="ctx",
        world="ecology",
        steps=4,
        agents=[{"policy": "workflow", "agent": str(tmp_path / "agent")}],
        llm={"mock": True},
    )
    run = exp.run(tmp_path / "t.sqlite")
    assert not run.actions["error"].fillna("").str.contains("code:").any()
    assert not run.actions["metadata"].str.contains('"parse_path":"fallback"').any()
