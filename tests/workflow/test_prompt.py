"""Prompt building: step prompt, then components in listed order, then variable substitution."""

from __future__ import annotations

from vivarium.workflow.config import ComponentConfig, StepConfig
from vivarium.workflow.prompt import (
    build_context,
    build_prompt,
    format_working_memory,
    render_template,
    render_value,
)

from .wf_helpers import observation


def test_step_prompt_then_components_in_listed_order() -> None:
    step = StepConfig(name="act", prompt="STEP {agent_id}")
    components = [
        ComponentConfig(name="b", content="SECOND {tick}", inject_into=["act"]),
        ComponentConfig(name="a", content="FIRST", inject_into=["act"]),
    ]
    text = build_prompt(step, {"agent_id": "x", "tick": 3}, components=components)
    assert text == "STEP x\n\nSECOND 3\n\nFIRST"


def test_substitution_renders_values_deterministically() -> None:
    context = {
        "name": "alpha",
        "n": 3,
        "rate": 2 / 3,
        "flag": True,
        "nothing": None,
        "items": [{"b": 1, "a": 2}],
        "econ": {"richest": "beta", "total_scrip": 500},
    }
    template = (
        "{name} {n} {rate} {flag} {nothing} {items} {econ.richest} {items.0.a} {missing} "
        '{"action": "noop"} {{name}}'
    )
    assert render_template(template, context) == (
        'alpha 3 0.6667 true null [{"a":2,"b":1}] beta 2 {missing} {"action": "noop"} {alpha}'
    )
    # substituted text is not expanded again
    assert render_template("{a}", {"a": "{b}", "b": "no"}) == "{b}"
    assert render_value("x" * 5000).endswith("…")


def test_context_from_observation_and_variables() -> None:
    obs = observation(7, agent_state={"secret": 1}, success_rate=0.5, tools=("noop",))
    context = build_context(obs, {"success_rate": 0.1, "goal": "grow"}, workflow={"state": "work"})
    assert context["tick"] == 7 == context["time_step"]
    assert context["success_rate"] == 0.5  # the fresh observation wins over a stale variable
    assert context["goal"] == "grow"
    assert context["state"] == "work"
    assert context["tools"] == ["noop"]
    assert "agent_state" not in context
    for key in (
        "balance",
        "artifacts",
        "my_artifacts",
        "action_history",
        "last_action_result",
        "economic_context",
        "time_remaining",
        "progress_percent",
    ):
        assert key in context
    text = render_template(
        "{agent_id} has {balance} at {tick}; {time_remaining} left ({progress_percent}%) {artifacts}",
        context,
    )
    assert text.startswith("tester has 100 at 7; 23 left (23.3333%) [{")


def test_working_memory_is_cut_to_max_bytes() -> None:
    assert format_working_memory({"a": 1}, 100) == '{"a":1}'
    cut = format_working_memory({"note": "é" * 100}, 20)
    assert len(cut.encode()) <= 20 + len("…".encode())
