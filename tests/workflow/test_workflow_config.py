"""Agent folders: loading, the example agents, and one-line errors naming the file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vivarium.errors import ConfigError
from vivarium.workflow import AgentSpec, load_agent
from vivarium.workflow.config import SINGLE_STATE, TransitionConfig

from .wf_helpers import ROOT, agent_data, write_agent


def _error(folder: Path, data: dict[str, Any]) -> str:
    write_agent(folder, data)
    with pytest.raises(ConfigError) as info:
        load_agent(folder)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{folder / 'agent.yaml'}: ")
    return message


@pytest.mark.parametrize("name", ["alpha_2", "beta_2"])
def test_example_agents_load(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example agents are written in the agent ecology's format (a linear step list, one
    synthesized state; see tests/workflow/test_original_format.py for the details)."""
    monkeypatch.chdir(ROOT)
    spec = load_agent(f"data/agents/{name}")
    assert isinstance(spec, AgentSpec)
    assert spec.id == name
    assert spec.folder == f"data/agents/{name}"
    # No agent id in the system prompt: every agent's requests begin alike (prompt caching);
    # the step prompts name the agent.
    assert spec.system_prompt.startswith("You are a") and "{agent_id}" not in spec.system_prompt
    assert all("{agent_id}" in s.prompt for s in spec.workflow.steps if s.type == "llm")
    assert spec.workflow.start == spec.workflow.states[0] == SINGLE_STATE
    kinds = {s.type for s in spec.workflow.steps}
    assert kinds == {"code", "llm"}
    assert spec.workflow.steps[-1 if name == "alpha_2" else -2].name == "decide_action"


def test_alpha_2_has_the_metrics_loop() -> None:
    """agent_ecology 599d43d3 alpha_2: compute_metrics computes the metrics the audit reads."""
    spec = load_agent(ROOT / "data/agents/alpha_2")
    wf = spec.workflow
    code = "\n".join(s.code or "" for s in wf.steps)
    for name in ("success_rate", "stuck_in_loop", "should_pivot", "can_create", "should_explore"):
        assert f"{name} =" in code
    assert wf.steps[0].name == "compute_metrics" and wf.steps[0].type == "code"


def test_beta_2_reviews_periodically() -> None:
    """agent_ecology 599d43d3 beta_2: the strategic review runs only when
    should_review_strategy (tick % 10 == 0 or the subgoal is stuck)."""
    spec = load_agent(ROOT / "data/agents/beta_2")
    review = next(s for s in spec.workflow.steps if s.name == "strategic_review")
    assert review.run_if == "should_review_strategy"
    assert "tick % 10 == 0" in (spec.workflow.steps[0].code or "")


def test_agent_yaml_path_and_defaults(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "solo", {"workflow": agent_data()["workflow"]}, None)
    spec = load_agent(folder / "agent.yaml")
    assert spec.id == "solo"  # defaults to the folder name
    assert spec.system_prompt == ""
    assert spec.starting_scrip == 100 and spec.enabled
    assert spec.rag.enabled is False and spec.working_memory.enabled is False
    assert spec.workflow.default_on_failure == "retry"
    assert spec.workflow.response_schema == "simple"


def test_transition_shorthand_and_in_state_string(tmp_path: Path) -> None:
    data = agent_data(
        transitions=["a -> b", "b->a", {"from": "*", "to": "a", "condition": "x"}],
        variables={"x": False},
    )
    spec = load_agent(write_agent(tmp_path / "x", data))
    rules = spec.workflow.transitions
    assert [(r.from_, r.to, r.condition) for r in rules] == [
        ("a", "b", None),
        ("b", "a", None),
        ("*", "a", "x"),
    ]
    assert spec.workflow.steps[0].in_state == ["a"]
    with pytest.raises(ValueError, match="expected 'from -> to'"):
        TransitionConfig.model_validate("a => b")


def test_component_prompt_alias_and_order(tmp_path: Path) -> None:
    data = agent_data()
    data["components"] = [
        {"name": "one", "prompt": "First.", "inject_into": ["act"]},
        {"name": "two", "content": "Second.", "inject_into": ["act"]},
    ]
    spec = load_agent(write_agent(tmp_path / "x", data))
    assert [c.content for c in spec.components_for("act")] == ["First.", "Second."]


def test_undefined_state_in_transition_names_file_and_field(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    message = _error(folder, agent_data(transitions=["a -> b", "b -> a", "a -> reviw"]))
    assert message == (
        f"{folder / 'agent.yaml'}: workflow.transitions[2].to: "
        "state 'reviw' is not defined (states: a, b)"
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"initial_state": "c"}, "workflow.initial_state: state 'c' is not defined"),
        ({"transitions": [{"from": "z", "to": "a"}]}, "workflow.transitions[0].from: state 'z'"),
        (
            {"steps": [{"name": "s", "type": "llm", "in_state": "q", "prompt": "p"}]},
            "workflow.steps[0].in_state[0]: state 'q' is not defined",
        ),
        (
            {"steps": [{"name": "s", "type": "llm", "in_state": "a"}]},
            "workflow.steps[0].prompt: a llm step needs a prompt",
        ),
        (
            {"steps": [{"name": "s", "type": "transition", "prompt": "p"}]},
            "workflow.steps[0].transition_map: a transition step needs at least one choice",
        ),
        (
            {
                "steps": [
                    {
                        "name": "s",
                        "type": "transition",
                        "prompt": "p",
                        "transition_map": {"go": "c"},
                    }
                ]
            },
            "workflow.steps[0].transition_map.go: state 'c' is not defined",
        ),
        (
            {"steps": [{"name": "s", "type": "code"}]},
            "workflow.steps[0].code: a code step needs code",
        ),
        (
            {"steps": [{"name": "s", "type": "code", "code": "import os"}]},
            "workflow.steps[0].code: import is not allowed",
        ),
        (
            {
                "steps": [
                    {"name": "s", "type": "code", "code": "x = 1", "run_if": "__import__('os')"}
                ]
            },
            "workflow.steps[0].run_if:",
        ),
        (
            {"transitions": [{"from": "a", "to": "b", "condition": "open('f')"}]},
            "workflow.transitions[0].condition:",
        ),
        (
            {"steps": [{"name": "s", "type": "code", "code": "x = 1", "transition_to": "nowhere"}]},
            "workflow.steps[0].transition_to: state 'nowhere' is not defined",
        ),
        (
            {
                "transitions": ["a -> b"],
                "steps": [
                    {
                        "name": "s",
                        "type": "code",
                        "code": "x = 1",
                        "in_state": "b",
                        "transition_to": "a",
                    }
                ],
            },
            "workflow.steps[0].transition_to: no transition allows b -> a",
        ),
        (
            {
                "steps": [
                    {"name": "s", "type": "llm", "prompt": "p"},
                    {"name": "s", "type": "llm", "prompt": "q"},
                ]
            },
            "workflow.steps: step 's' is defined twice",
        ),
        ({"states": ["a", "a"]}, "workflow.states: 'a' is listed twice"),
        (
            {"steps": [{"name": "s", "type": "code", "code": "x = 1\ndecisions += 1"}]},
            "workflow.steps[0].code: cannot assign 'decisions' (set by the workflow)",
        ),
        ({"variables": {"state": "x"}}, "workflow.variables.state: reserved"),
        ({"states": ["*"]}, "workflow.states[0]: '*' cannot be a state name"),
        ({"on_failure": "retry"}, "workflow.on_failure: unknown field"),
        ({"default_on_failure": "explode"}, "workflow.default_on_failure: Input should be"),
        ({"response_schema": "fancy"}, "workflow.response_schema: Input should be"),
        ({"transitions": ["a b"]}, "workflow.transitions[0]: expected 'from -> to'"),
        (
            {"transitions": [{"from": "a", "to": "b", "routine": "sometimes"}]},
            "workflow.transitions[0].routine: Input should be a valid boolean",
        ),
        (
            {"transitions": ["a -> b", {"from": "a", "to": "b", "routine": True}]},
            "workflow.transitions[1].routine: a -> b is listed twice, once routine and once "
            "not (give them different conditions, or keep one)",
        ),
        (
            {"transitions": [{"from": "a", "to": "b", "condition": ""}]},
            "workflow.transitions[0].condition: the condition is empty "
            "(write an expression, or leave condition out)",
        ),
        (
            {"steps": [{"name": "s", "type": "code", "code": "x = 1", "run_if": "  "}]},
            "workflow.steps[0].run_if: the condition is empty "
            "(write an expression, or leave run_if out)",
        ),
    ],
)
def test_bad_workflow_is_one_line(tmp_path: Path, change: dict[str, Any], expected: str) -> None:
    message = _error(tmp_path / "x", agent_data(**change))
    assert expected in message, message


def test_unknown_top_level_key_and_bad_types(tmp_path: Path) -> None:
    data = agent_data()
    data["temprature"] = 0.2
    data["rag"] = {"enabled": True, "k": 0}
    message = _error(tmp_path / "x", data)
    assert "temprature: unknown field" in message
    assert "rag.k: Input should be greater than or equal to 1" in message


def test_component_into_unknown_step(tmp_path: Path) -> None:
    data = agent_data()
    data["components"] = [{"name": "c", "content": "x", "inject_into": ["act", "nope"]}]
    message = _error(tmp_path / "x", data)
    assert "components[0].inject_into[1]: step 'nope' is not defined (steps: act)" in message


def test_folder_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no agent.yaml"):
        load_agent(tmp_path)
    (tmp_path / "agent.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_agent(tmp_path)
    (tmp_path / "agent.yaml").write_text("id: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_agent(tmp_path)
    data = agent_data()
    data["system_prompt"] = "inline"
    write_agent(tmp_path / "both", data)
    with pytest.raises(ConfigError, match="system_prompt: given both"):
        load_agent(tmp_path / "both")
    inline = write_agent(tmp_path / "inline", data, system_prompt=None)
    assert load_agent(inline).system_prompt == "inline"
