"""Agent folders in the agent ecology's own ``agent.yaml`` format load as written.

Each test builds a small folder of our own in that format (tmp_path) and checks it against the
behaviour the original (agent_ecology2 at 599d43d3, and its design documents) gives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.scripted import ScriptedChat
from vivarium import Experiment
from vivarium.errors import ConfigError
from vivarium.policies.sections import PROPOSE_ACTION_PROMPT
from vivarium.workflow import WorkflowPolicy, load_agent
from vivarium.workflow.code_actions import CODE_ACTIONS
from vivarium.workflow.config import (
    DEFAULT_MAX_RETRIES,
    PROPOSE_STEP,
    SINGLE_STATE,
    AgentSpec,
    folder_enabled,
    spec_digest,
)
from vivarium.workflow.traits import known

from .wf_helpers import ROOT, act, observation, write_agent


def _load(tmp_path: Path, data: dict[str, Any], name: str = "agent") -> AgentSpec:
    return load_agent(write_agent(tmp_path / "agents" / name, data))


def _error(tmp_path: Path, data: dict[str, Any]) -> str:
    folder = write_agent(tmp_path / "agents" / "bad", data)
    with pytest.raises(ConfigError) as info:
        load_agent(folder)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{folder / 'agent.yaml'}: ")
    return message


def _linear(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"id": "lin", "workflow": {"steps": list(steps)}}


LLM = {"name": "decide", "type": "llm", "prompt": "Pick one action."}


# -- the state machine -----------------------------------------------------------------------
def test_nested_state_machine_is_the_flat_form(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 state_machine.py StateConfig.from_dict: ``workflow.state_machine``
    holds states, initial_state and transitions; a transition without ``from`` is from "*"."""
    machine = {
        "states": ["observing", "acting"],
        "initial_state": "acting",
        "transitions": [
            {"from": "observing", "to": "acting", "condition": "balance > 5"},
            {"to": "observing"},
        ],
    }
    steps = [{**LLM, "in_state": "acting", "transition_to": "observing"}]
    nested = _load(tmp_path, {"id": "n", "workflow": {"state_machine": machine, "steps": steps}})
    flat = _load(tmp_path, {"id": "n", "workflow": {**machine, "steps": steps}}, name="flat")
    assert nested.workflow == flat.workflow
    assert nested.workflow.states == ["observing", "acting"]
    assert nested.workflow.start == "acting"
    moves = [(t.from_, t.to, t.condition) for t in nested.workflow.transitions]
    assert moves == [("observing", "acting", "balance > 5"), ("*", "observing", None)]


def test_state_machine_and_flat_states_together_are_refused(tmp_path: Path) -> None:
    """One setting, one place: the original reads states only under state_machine."""
    message = _error(
        tmp_path,
        {
            "id": "x",
            "workflow": {"states": ["a"], "state_machine": {"states": ["a"]}, "steps": [LLM]},
        },
    )
    assert "state_machine.states: also given as workflow.states" in message


def test_a_workflow_without_states_runs_every_step_in_order_each_turn(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py run_workflow: with no state machine, every step of the
    ``steps`` list runs, in order, on every turn (alpha_2 and beta_2 are written so); agent.py
    builds the context afresh each turn, so what code steps set lasts the turn, unless it is a
    declared variable (ours: ``keep_variables: declared``, the default without states)."""
    data = _linear(
        {"name": "count", "type": "code", "code": "turns = context.get('turns', 0) + 1"},
        {"name": "double", "type": "code", "code": "twice = turns * 2"},
        LLM,
        {"name": "after", "type": "code", "code": "seen = twice"},
    )
    data["workflow"]["variables"] = {"turns": 0}
    spec = _load(tmp_path, data)
    assert spec.workflow.keep_variables == "declared"
    assert spec.workflow.states == [SINGLE_STATE]
    gw = ScriptedChat([act("noop"), act("noop")])
    policy = WorkflowPolicy(spec, gw)
    state = None
    for t in (0, 1):
        req = policy.decide(
            run_id="r", time_step=t, agent_id="tester", observation=observation(t, state)
        )
        state = req.metadata["agent_state"]
        assert [s["step"] for s in req.metadata["steps"]] == ["count", "double", "decide", "after"]
        assert req.action_name == "noop"
    assert state["variables"] == {"turns": 2}  # twice and seen lasted their turn


# -- components: traits and goals ------------------------------------------------------------
def _trait(folder: Path, name: str, inject_into: list[str], text: str, kind: str = "trait") -> None:
    sub = "traits" if kind == "trait" else "goals"
    path = folder / "_components" / sub / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "name": name,
        "type": kind,
        "version": 1,
        "description": "a test fragment",
        "inject_into": inject_into,
        "prompt_fragment": text,
        "requires_context": ["balance"],
    }
    path.write_text(yaml.safe_dump(data))


def test_traits_from_the_sibling_components_folder(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 component_loader.py: ``components: {traits, goals}`` names files
    in ``_components/traits`` / ``goals`` beside the agent folders; each fragment is appended to
    the listed steps that exist, traits before goals, in listed order."""
    agents = tmp_path / "agents"
    _trait(agents, "careful", ["decide", "not_a_step"], "Check twice.\n")
    _trait(agents, "thrifty", ["decide"], "Spend little.\n")
    _trait(agents, "traders", ["decide"], "Trade often.\n", kind="goal")
    data = _linear(LLM)
    data["components"] = {"goals": ["traders"], "traits": ["thrifty", "careful"]}
    spec = _load(tmp_path, data)
    assert [c.name for c in spec.components] == ["thrifty", "careful", "traders"]
    assert [c.content for c in spec.components_for("decide")] == [
        "Spend little.",
        "Check twice.",
        "Trade often.",
    ]
    assert spec.components[1].inject_into == ["decide"]  # the missing step is ignored


def test_builtin_traits_load_and_a_project_trait_overrides_one(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 _components/traits: six traits by these names; here a built-in
    library of our own text, which a project's ``_components`` file of the same name replaces."""
    assert known("traits") == [
        "buy_before_build",
        "economic_participant",
        "loop_breaker",
        "memory_discipline",
        "semantic_memory",
        "subgoal_progression",
    ]
    assert known("goals") == ["facilitate_transactions"]
    data = _linear({**LLM, "name": "observe"})
    data["components"] = {"traits": ["loop_breaker"]}
    builtin = _load(tmp_path, data)
    assert builtin.components_for("observe")[0].name == "loop_breaker"
    assert "three times" in builtin.components_for("observe")[0].content
    _trait(tmp_path / "agents", "loop_breaker", ["observe"], "Our own loop rule.")
    mine = _load(tmp_path, data, name="other")
    assert mine.components_for("observe")[0].content == "Our own loop rule."


def test_editing_a_named_trait_file_changes_the_agents_digest(tmp_path: Path) -> None:
    """A trait file is part of what the agent runs (the original appends it to its prompts), so
    editing it changes the folder's digest, as editing agent.yaml does."""
    agents = tmp_path / "agents"
    _trait(agents, "careful", ["decide"], "Check twice.")
    data = _linear(LLM)
    data["components"] = {"traits": ["careful"]}
    folder = write_agent(agents / "one", data)
    before = spec_digest(folder)
    _trait(agents, "careful", ["decide"], "Check three times.")
    assert spec_digest(folder) != before
    plain = write_agent(agents / "two", _linear(LLM))
    digest = spec_digest(plain)
    _trait(agents, "careful", ["decide"], "Check four times.")
    assert spec_digest(plain) == digest  # not named: not part of the agent


def test_an_unknown_trait_is_one_line_listing_the_known_ones(tmp_path: Path) -> None:
    """The original logs "Trait not found" and goes on; a typo here is refused up front."""
    data = _linear(LLM)
    data["components"] = {"traits": ["loop_breaker", "loop_braker"]}
    message = _error(tmp_path, data)
    assert "components.traits[1]: unknown trait 'loop_braker' (known: buy_before_build," in message
    assert "subgoal_progression)" in message


# -- error handling ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("handling", "policy", "retries"),
    [
        ({"on_step_failure": "continue"}, "skip", DEFAULT_MAX_RETRIES),
        ({"on_step_failure": "abort"}, "fail", DEFAULT_MAX_RETRIES),
        ({"default_on_failure": "skip", "max_retries": 1}, "skip", 1),
        ({"default_on_failure": "retry", "max_retries": 2}, "retry", 2),
    ],
)
def test_error_handling(
    tmp_path: Path, handling: dict[str, Any], policy: str, retries: int
) -> None:
    """agent_ecology 599d43d3 workflow.py from_dict reads ``error_handling.default_on_failure``
    and ``max_retries`` (default 3); its workflow document writes ``on_step_failure: continue``
    (skip the step) or ``abort`` (stop the workflow)."""
    inside = _linear(LLM)
    inside["workflow"]["error_handling"] = handling
    top = {**_linear(LLM), "error_handling": handling}  # where alpha_3 ... epsilon_3 put it
    for i, data in enumerate((inside, top)):
        wf = _load(tmp_path, data, name=f"a{i}").workflow
        assert (wf.default_on_failure, wf.default_max_retries) == (policy, retries)
        step = wf.steps[0]
        assert (wf.on_failure(step), wf.max_retries(step)) == (policy, retries)


def test_default_retries_are_the_originals_three(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py: ``default_max_retries = 3``, used by every step
    without its own ``max_retries``."""
    wf = _load(tmp_path, _linear(LLM)).workflow
    assert wf.default_max_retries == 3 and wf.max_retries(wf.steps[0]) == 3
    assert wf.default_on_failure == "retry"


def test_error_handling_given_twice_is_refused(tmp_path: Path) -> None:
    data = _linear(LLM)
    data["workflow"]["error_handling"] = {"max_retries": 1}
    data["error_handling"] = {"max_retries": 2}
    assert "error_handling: given both at the top level and under workflow" in _error(
        tmp_path, data
    )
    data = _linear(LLM)
    data["workflow"]["error_handling"] = {"on_step_failure": "sometimes"}
    assert "error_handling.on_step_failure: 'sometimes' is not one of" in _error(tmp_path, data)


# -- steps ---------------------------------------------------------------------------------------
def test_named_code_actions(tmp_path: Path) -> None:
    """agent_ecology agents.md (ADR-0013 workflows): a code step may name a predefined action,
    ``{type: code, action: execute_decision}``, run after the LLM step that decided."""
    spec = _load(
        tmp_path, _linear(LLM, {"name": "act", "type": "code", "action": "execute_decision"})
    )
    assert spec.workflow.steps[1].action == "execute_decision"
    assert spec.workflow.steps[1].code is None
    assert set(CODE_ACTIONS) >= {"execute_decision", "noop"}
    message = _error(tmp_path, _linear(LLM, {"name": "act", "type": "code", "action": "launch"}))
    assert "unknown code action 'launch' (known: execute_decision, noop)" in message
    message = _error(tmp_path, _linear({**LLM, "action": "noop"}))
    assert "workflow.steps[0].action: only code steps run a code action" in message


def test_condition_and_output_key_are_run_if_and_output(tmp_path: Path) -> None:
    """The original's agents write ``condition:`` on a step (beta_2's strategic_review) and
    ``output_key:`` (alpha_2's self_audit: the variable later prompts read)."""
    spec = _load(
        tmp_path,
        _linear(
            {"name": "flags", "type": "code", "code": "review = tick % 10 == 0"},
            {**LLM, "name": "think", "condition": "review", "output_key": "thoughts"},
            {**LLM, "prompt": "Given {thoughts}, act."},
            {"name": "use", "type": "code", "code": "noted = thoughts"},
        ),
    )
    think = spec.workflow.steps[1]
    assert (think.run_if, think.output) == ("review", "thoughts")
    message = _error(tmp_path, _linear({**LLM, "condition": "tick > 1", "run_if": "tick > 2"}))
    assert "give run_if or condition (the same setting), not both" in message
    message = _error(tmp_path, _linear({**LLM, "output_key": "state"}))
    assert "'state' is reserved" in message


def test_step_type_defaults_as_the_original(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py: ``type`` defaults to ``code``. A step with only a
    prompt (which the original refuses) is an llm step here."""
    spec = _load(
        tmp_path,
        _linear({"name": "calc", "code": "x = 1"}, {"name": "decide", "prompt": "Act."}),
    )
    assert [s.type for s in spec.workflow.steps] == ["code", "llm"]


def test_transition_mode_loads_and_prompt_artifacts_are_refused(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py parses ``transition_mode`` (llm / condition / auto)
    and ``prompt_artifact_id``; prompts kept in artifacts are not supported here."""
    spec = _load(tmp_path, _linear({**LLM, "transition_mode": "llm"}))
    assert spec.workflow.steps[0].transition_mode == "llm"
    message = _error(tmp_path, _linear({"name": "d", "type": "llm", "prompt_artifact_id": "p1"}))
    assert "prompt_artifact_id: prompts stored in artifacts are not supported" in message


# -- agent-level settings ------------------------------------------------------------------------
def test_agent_settings_in_the_original_spelling(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 _template/agent.yaml and config.yaml: ``starting_credits``,
    ``llm_model``, ``visibility.detail_level``, per-agent ``rag {enabled, limit,
    query_template}``, and working memory with its defaults (auto_inject true, include_in_rag
    false, structured_format true, warn_on_missing false, 2000 bytes)."""
    data = {
        **_linear(LLM),
        "starting_credits": 70,
        "llm_model": "some/model",
        "visibility": {"detail_level": "verbose"},
        "genotype": {"risk_tolerance": "HIGH"},
        "rag": {"enabled": True, "limit": 7, "query_template": "Tick {tick}: what worked?"},
        "working_memory": {"enabled": True, "max_size_bytes": 4000, "include_in_rag": True},
    }
    spec = _load(tmp_path, data)
    assert spec.starting_scrip == 70
    assert spec.llm_model == "some/model"
    assert spec.visibility.detail_level == "verbose"
    assert (spec.rag.enabled, spec.rag.k, spec.rag.query_template) == (
        True,
        7,
        "Tick {tick}: what worked?",
    )
    wm = spec.working_memory
    assert (wm.enabled, wm.max_bytes, wm.include_in_rag) == (True, 4000, True)
    assert (wm.auto_inject, wm.structured_format, wm.warn_on_missing) == (True, True, False)
    assert AgentSpec.model_validate(_linear(LLM)).working_memory.max_bytes == 2000
    message = _error(tmp_path, {**_linear(LLM), "starting_credits": 1, "starting_scrip": 2})
    assert "give starting_scrip or starting_credits" in message
    message = _error(tmp_path, {**_linear(LLM), "rag": {"k": 2, "limit": 3}})
    assert "rag: give k or limit" in message


def test_without_a_workflow_one_propose_action_step(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 agent.py run_workflow: an agent with no workflow (or no steps)
    falls back to propose_action, one LLM call with the standard prompt, which carries every
    trait fragment."""
    data = {"id": "plain", "starting_credits": 100, "components": {"traits": ["loop_breaker"]}}
    spec = _load(tmp_path, data)
    wf = spec.workflow
    assert wf.states == [SINGLE_STATE]
    assert [(s.name, s.type) for s in wf.steps] == [(PROPOSE_STEP, "llm")]
    assert wf.steps[0].prompt == PROPOSE_ACTION_PROMPT
    assert [c.name for c in spec.components_for(PROPOSE_STEP)] == ["loop_breaker"]
    assert _load(tmp_path, {"id": "p", "workflow": {"steps": []}}, "p").workflow.steps[0].name == (
        PROPOSE_STEP
    )
    gw = ScriptedChat([act("read_artifact", {"artifact_id": "a1"})])
    req = WorkflowPolicy(spec, gw).decide(
        run_id="r", time_step=0, agent_id="tester", observation=observation(0)
    )
    assert (req.action_name, req.arguments) == ("read_artifact", {"artifact_id": "a1"})
    assert len(gw.requests) == 1


def test_a_disabled_original_folder_is_left_out_of_a_run(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 loader.py load_agents: ``enabled: false`` skips the agent."""
    folder = write_agent(tmp_path / "agents" / "off", {**_linear(LLM), "enabled": False})
    assert folder_enabled(folder) is False
    exp = Experiment(
        name="off",
        world="ecology",
        steps=2,
        seed=1,
        agents=[
            {"policy": "workflow", "agent": str(folder)},
            {"policy": "random", "count": 1, "action_space": ["noop"]},
        ],
        llm={"mock": True},
    )
    run = exp.run(tmp_path / "t.sqlite")
    assert set(run.actions["agent_id"]) == {"agent_000"}
    assert run.llm_calls.empty


# -- the example agents, in the original format ------------------------------------------------
def _raw(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "data/agents" / name / "agent.yaml").read_text())


def test_alpha_2_and_beta_2_are_written_in_the_original_format() -> None:
    """agent_ecology 599d43d3 alpha_2 / beta_2 agent.yaml: a linear ``steps`` list (no states),
    ``starting_credits``, ``rag.limit`` 5 / 7 with a query_template, ``visibility``."""
    for name, steps, limit in (
        ("alpha_2", ["compute_metrics", "self_audit", "review_strategy", "decide_action"], 5),
        (
            "beta_2",
            ["load_goals", "strategic_review", "tactical_plan", "decide_action", "update_goals"],
            7,
        ),
    ):
        raw = _raw(name)
        assert "states" not in raw["workflow"] and "state_machine" not in raw["workflow"]
        assert raw["starting_credits"] == 100 and raw["llm_model"] is None
        assert raw["rag"]["limit"] == limit and raw["rag"]["query_template"]
        spec = load_agent(ROOT / "data/agents" / name)
        assert [s.name for s in spec.workflow.steps] == steps
        assert spec.workflow.states == [SINGLE_STATE]
    alpha = load_agent(ROOT / "data/agents/alpha_2").workflow.steps
    assert [(s.type, s.output) for s in alpha] == [
        ("code", None),
        ("llm", "audit_result"),
        ("llm", "strategy"),
        ("llm", None),
    ]
    beta = load_agent(ROOT / "data/agents/beta_2").workflow.steps
    assert [(s.type, s.run_if, s.output) for s in beta] == [
        ("code", None, None),
        ("llm", "should_review_strategy", "strategic_assessment"),
        ("llm", None, "tactical_action"),
        ("llm", None, None),
        ("code", None, None),
    ]


def _run(name: str, step: str, context: dict[str, Any]) -> dict[str, Any]:
    from vivarium import sandbox

    code = next(
        s.code for s in load_agent(ROOT / "data/agents" / name).workflow.steps if s.name == step
    )
    assert code is not None
    return sandbox.execute(code, context)


def _failure(kind: str) -> dict[str, Any]:
    return {"action_type": kind, "error": "no"}


@pytest.mark.parametrize(
    ("failures", "successes", "rate", "stuck", "pivot"),
    [
        ([], [], 0.0, False, True),  # nothing yet: 0 / max(0, 1)
        ([_failure("write_artifact")], [{}, {}, {}], 0.75, False, False),
        ([_failure("noop")] * 3, [{}] * 7, 0.7, True, True),  # same type three times
        (
            [_failure("noop"), _failure("noop"), _failure("read_artifact")],
            [{}] * 7,
            0.7,
            False,
            False,
        ),
        ([_failure("noop")] * 2 + [_failure("x")] * 5, [{}] * 2, 2 / 9, True, True),
    ],
)
def test_alpha_2_metrics(
    failures: list[Any], successes: list[Any], rate: float, stuck: bool, pivot: bool
) -> None:
    """agent_ecology 599d43d3 alpha_2 compute_metrics: success_rate = successes / max(total, 1);
    stuck_in_loop when the last three failures share an action_type; should_pivot when
    success_rate < 0.3 or stuck; can_create = balance >= 10; should_explore = fewer than 3
    artifacts of its own."""
    out = _run(
        "alpha_2",
        "compute_metrics",
        {
            "recent_failures": failures,
            "recent_successes": successes,
            "balance": 9,
            "my_artifacts": ["a", "b"],
        },
    )
    assert out["success_rate"] == pytest.approx(rate)
    assert (out["stuck_in_loop"], out["should_pivot"]) == (stuck, pivot)
    assert (out["can_create"], out["should_explore"]) == (False, True)


@pytest.mark.parametrize(
    ("tick", "memory", "review", "stuck"),
    [
        (10, {}, True, False),  # every 10 ticks
        (13, {}, False, False),  # a new subgoal starts now: not stuck
        (13, {"subgoal_progress": {"started_tick": 2, "actions_in_stage": 1}}, True, True),
        (13, {"subgoal_progress": {"started_tick": 2, "actions_in_stage": 2}}, False, False),
        (12, {"subgoal_progress": {"started_tick": 2, "actions_in_stage": 0}}, False, False),
    ],
)
def test_beta_2_review_trigger(
    tick: int, memory: dict[str, Any], review: bool, stuck: bool
) -> None:
    """agent_ecology 599d43d3 beta_2 load_goals: the goal hierarchy comes from working memory;
    the subgoal is stuck after more than 10 ticks with fewer than 2 actions on it, and the
    strategic review runs when tick % 10 == 0 or the subgoal is stuck."""
    memory = {"strategic_goal": "G", "current_subgoal": "S", **memory}
    out = _run(
        "beta_2",
        "load_goals",
        {
            "working_memory": memory,
            "tick": tick,
            "agent_id": "me",
            "artifacts": [{"id": "x", "created_by": "me"}, {"id": "y", "created_by": "you"}],
            "my_artifacts": ["x"],
        },
    )
    assert out["other_artifacts"] == [{"id": "y", "created_by": "you"}]
    assert (out["strategic_goal"], out["current_subgoal"]) == ("G", "S")
    assert (out["subgoal_stuck"], out["should_review_strategy"]) == (stuck, review)
    assert out["has_tools_to_use"] is True
    after = _run("beta_2", "update_goals", {"tick": tick, **out})
    progress = after["new_working_memory"]["subgoal_progress"]
    assert progress["actions_in_stage"] == out["actions_on_subgoal"] + 1


def test_alpha_2_and_beta_2_run_on_the_runner_context() -> None:
    """agent_ecology 599d43d3 alpha_2 / beta_2, run by the workflow runner on an ecology
    observation: three failed actions of one type make alpha_2 stuck and pivot; beta_2's
    strategic review runs at tick 10 and not at tick 3."""
    from vivarium.gateways import MockLLMGateway

    alpha = WorkflowPolicy(load_agent(ROOT / "data/agents/alpha_2"), MockLLMGateway(seed=7), seed=7)
    failing = [{"time_step": t, "action": "read_artifact", "success": False} for t in range(3)]
    req = alpha.decide(
        run_id="r",
        time_step=3,
        agent_id="tester",
        observation=observation(3, None, action_history=failing, success_rate=0.0),
    )
    assert (req.metadata["stuck_in_loop"], req.metadata["should_pivot"]) == (True, True)
    assert req.metadata["agent_state"]["variables"] == {}  # the metrics last the turn
    beta = WorkflowPolicy(load_agent(ROOT / "data/agents/beta_2"), MockLLMGateway(seed=7), seed=7)
    for tick, ran in ((3, False), (10, True)):
        req = beta.decide(
            run_id="r", time_step=tick, agent_id="tester", observation=observation(tick)
        )
        status = {s["step"]: s["status"] for s in req.metadata["steps"]}
        assert (status["strategic_review"] == "ok") is ran, status
        assert status["load_goals"] == "ok" and status["update_goals"] == "ok"


def test_a_choice_no_rule_allows_loads_and_fails_only_when_chosen(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 beta_3: a review whose ``transition_map`` names a move its own
    ``transitions`` never allow loads there (the runner logs a warning when it is chosen).
    Ours loads it too; choosing that option fails the step, the reason told to the model, and
    the other option still moves."""
    from .wf_helpers import choose

    data = {
        "id": "reviewer",
        "workflow": {
            "state_machine": {
                "states": ["working", "reviewing", "resting"],
                "initial_state": "reviewing",
                "transitions": [{"from": "reviewing", "to": "working"}],
            },
            "steps": [
                {
                    "name": "review",
                    "type": "transition",
                    "in_state": "reviewing",
                    "prompt": "Go on or rest?",
                    "on_failure": "skip",
                    "max_retries": 1,
                    "transition_map": {"go_on": "working", "rest": "resting"},
                }
            ],
        },
    }
    spec = _load(tmp_path, data)
    gw = ScriptedChat([choose("rest"), choose("go_on")])
    req = WorkflowPolicy(spec, gw).decide(
        run_id="r", time_step=0, agent_id="reviewer", observation=observation()
    )
    step = req.metadata["steps"][0]
    assert (step["status"], step["attempts"]) == ("ok", 2)
    assert req.metadata["workflow_state"] == "working"
    assert "no transition allows reviewing -> resting" in gw.user_prompts()[1]
