"""WorkflowPolicy: steps, failure policies, transitions, agent state in and out, fail-soft."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted import ScriptedChat
from vivarium.errors import ConfigError
from vivarium.gateways import MockLLMGateway
from vivarium.types import ActionRequest
from vivarium.workflow import WorkflowPolicy, load_agent
from vivarium.workflow.config import AgentSpec
from vivarium.workflow.tools import ACT_TOOL, CHOOSE_TOOL
from vivarium.worlds.ecology import ECOLOGY_ACTIONS

from .wf_helpers import (
    ACTIONS,
    ROOT,
    Boom,
    FatalBoom,
    act,
    choose,
    observation,
    text,
    write_agent,
)


def make_spec(tmp_path: Path, workflow: dict[str, Any], **top: Any) -> AgentSpec:
    data = {"id": "tester", "workflow": workflow, **top}
    return load_agent(write_agent(tmp_path / "agent", data))


def decide(policy: WorkflowPolicy, t: int = 0, state: Any = None, **obs: Any) -> ActionRequest:
    return policy.decide(
        run_id="r", time_step=t, agent_id="tester", observation=observation(t, state, **obs)
    )


def one_llm_step(**step: Any) -> dict[str, Any]:
    return {
        "states": ["a", "b"],
        "steps": [
            {"name": "act", "type": "llm", "in_state": "a", "prompt": "Act.", **step},
            {"name": "after", "type": "code", "in_state": "a", "code": "after = 1"},
        ],
    }


# -- failure policies ------------------------------------------------------------------------
def test_retry_then_success(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, one_llm_step(on_failure="retry", max_retries=2, transition_to="b"))
    gw = ScriptedChat([text("I will think about it"), act("read_artifact", {"artifact_id": "a1"})])
    req = decide(WorkflowPolicy(spec, gw))
    assert (req.action_name, req.arguments) == ("read_artifact", {"artifact_id": "a1"})
    assert req.reasoning == "because"
    meta = req.metadata
    assert meta["steps"] == [
        {"step": "act", "state": "a", "attempts": 2, "status": "ok", "error": "no action found"}
    ]
    assert meta["transitions"] == [
        {"from_state": "a", "to_state": "b", "trigger": "act: done", "routine": False}
    ]
    assert meta["workflow_state"] == "b" == meta["agent_state"]["state"]
    assert meta["agent_state"]["retries"] == {"act": 1}
    assert meta["parse_path"] == "tool_call" and meta["action_step"] == "act"
    assert meta["llm_calls"] == 2
    first, second = gw.user_prompts()
    assert "could not be used" not in first
    assert "Your previous reply could not be used (no action found)" in second


def test_retry_exhausted_fails_the_decision(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, one_llm_step(on_failure="retry", max_retries=1, transition_to="b"))
    gw = ScriptedChat([act("write_artifact", {}), act("write_artifact", {})])
    req = decide(WorkflowPolicy(spec, gw, registry=ECOLOGY_ACTIONS))  # it checks the arguments
    assert req.action_name == "noop" and req.arguments == {}
    meta = req.metadata
    assert meta["parse_path"] == "fallback"
    assert meta["fallback_reason"].startswith("step 'act' failed: bad arguments: write_artifact")
    assert meta["steps"][0]["status"] == "failed" and meta["steps"][0]["attempts"] == 2
    assert len(meta["steps"]) == 1  # nothing after a failed step runs
    assert meta["workflow_state"] == "a" and meta["transitions"] == []
    assert meta["agent_state"]["failures"] == {"act": 1}
    assert meta["action_step"] is None
    assert "Field required" in gw.user_prompts()[1]


def test_skip_goes_on_with_the_next_step(tmp_path: Path) -> None:
    # skip retries up to max_retries first (agent_ecology 599d43d3 execution-model doc), then
    # goes on with the next step
    spec = make_spec(tmp_path, one_llm_step(on_failure="skip", max_retries=1))
    gw = ScriptedChat([Boom("server on fire"), Boom("server on fire")])
    req = decide(WorkflowPolicy(spec, gw))
    assert req.action_name == "noop"
    steps = req.metadata["steps"]
    assert steps[0]["status"] == "skipped" and steps[0]["attempts"] == 2
    assert steps[0]["error"] == "llm error: Boom: server on fire"
    assert steps[1] == {"step": "after", "state": "a", "attempts": 1, "status": "ok"}
    assert req.metadata["agent_state"]["variables"] == {"after": 1}
    assert req.metadata["fallback_reason"] == "no action: no llm step produced one"


def test_fail_ends_the_decision_at_once(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, one_llm_step(on_failure="fail", max_retries=3))
    gw = ScriptedChat([act("dance")])
    req = decide(WorkflowPolicy(spec, gw))
    assert req.action_name == "noop"
    assert req.metadata["fallback_reason"] == "step 'act' failed: unknown tool 'dance'"
    assert [s["step"] for s in req.metadata["steps"]] == ["act"]
    assert len(gw.requests) == 1  # fail does not retry


def test_workflow_defaults_apply(tmp_path: Path) -> None:
    wf = one_llm_step()
    wf.update(default_on_failure="retry", default_max_retries=2)
    spec = make_spec(tmp_path, wf)
    gw = ScriptedChat([text(""), text(""), text("")])
    req = decide(WorkflowPolicy(spec, gw))
    assert req.metadata["steps"][0]["attempts"] == 3
    assert req.metadata["fallback_reason"] == "step 'act' failed: empty reply"


def test_code_step_errors_follow_on_failure(tmp_path: Path) -> None:
    wf = {
        "states": ["a"],
        "steps": [
            {"name": "bad", "type": "code", "code": "x = missing + 1", "on_failure": "skip"},
            {"name": "zero", "type": "code", "code": "y = 1 / 0", "on_failure": "fail"},
        ],
    }
    with pytest.raises(ConfigError, match=r"steps\[0\]\.code: unknown name 'missing'"):
        make_spec(tmp_path, wf)  # refused when loaded, as the run would refuse it
    # a spec built in code skips load_agent's checks: the run refuses it, by its on_failure
    spec = AgentSpec.model_validate({"id": "tester", "workflow": wf})
    req = decide(WorkflowPolicy(spec, ScriptedChat()))
    bad, zero = req.metadata["steps"]
    assert bad["status"] == "skipped" and "unknown name 'missing'" in bad["error"]
    assert zero["status"] == "failed"
    assert req.metadata["fallback_reason"].startswith("step 'zero' failed: code: EvaluationError")


def test_code_values_are_made_json_and_reserved_names_refused(tmp_path: Path) -> None:
    wf = {
        "states": ["a"],
        "steps": [
            {"name": "sets", "type": "code", "code": 's = {3, 1, 2}\nt = (1, "x")'},
            {"name": "reserved", "type": "code", "code": "state = 'b'", "on_failure": "skip"},
        ],
    }
    with pytest.raises(ConfigError, match=r"steps\[1\]\.code: cannot assign 'state'"):
        make_spec(tmp_path, wf)
    # a spec built in code skips load_agent's checks: the policy still refuses at run time
    spec = AgentSpec.model_validate({"id": "tester", "workflow": wf})
    req = decide(WorkflowPolicy(spec, ScriptedChat()))
    assert req.metadata["agent_state"]["variables"] == {"s": [1, 2, 3], "t": [1, "x"]}
    assert "cannot assign 'state'" in req.metadata["steps"][1]["error"]
    assert req.metadata["agent_state"]["state"] == "a"
    json.dumps(req.metadata["agent_state"])


# -- in_state, run_if, walking the states ------------------------------------------------------
def test_run_if_and_in_state(tmp_path: Path) -> None:
    wf = {
        "states": ["a", "b"],
        "variables": {"even": 0, "in_b": 0, "always": 0},
        "steps": [
            {"name": "every", "type": "code", "code": "always += 1"},
            {
                "name": "even",
                "type": "code",
                "in_state": "a",
                "run_if": "tick % 2 == 0",
                "code": "even += 1",
            },
            {"name": "only_b", "type": "code", "in_state": ["b"], "code": "in_b += 1"},
            {
                "name": "broken",
                "type": "code",
                "in_state": "a",
                "run_if": "balance['nope'] > 1",  # loads; fails on the int balance
                "code": "x = 1",
                "on_failure": "skip",
            },
        ],
    }
    policy = WorkflowPolicy(make_spec(tmp_path, wf), ScriptedChat())
    state = None
    statuses = []
    for t in range(4):
        req = decide(policy, t, state)
        state = req.metadata["agent_state"]
        statuses.append({s["step"]: s["status"] for s in req.metadata["steps"]})
    assert state["variables"] == {"even": 2, "in_b": 0, "always": 4}
    assert statuses[0] == {"every": "ok", "even": "ok", "broken": "skipped"}
    assert statuses[1]["even"] == "not_run"
    broken = req.metadata["steps"][-1]
    assert broken["attempts"] == 0 and broken["error"].startswith("run_if: EvaluationError")
    assert state["decisions"] == 4 and state["step_runs"]["every"] == 4


def test_a_decision_walks_states_until_an_action(tmp_path: Path) -> None:
    wf = {
        "states": ["start", "think", "act"],
        "transitions": ["start -> think", "think -> act", "act -> start"],
        "steps": [
            {
                "name": "s",
                "type": "code",
                "in_state": "start",
                "code": "n = 1",
                "transition_to": "think",
            },
            {
                "name": "t",
                "type": "code",
                "in_state": "think",
                "code": "m = n + 1",
                "transition_to": "act",
            },
            {
                "name": "do",
                "type": "llm",
                "in_state": "act",
                "prompt": "m={m}",
                "transition_to": "start",
            },
            {"name": "never", "type": "code", "in_state": "act", "code": "z = 1"},
        ],
    }
    gw = ScriptedChat([act("noop")])
    req = decide(WorkflowPolicy(make_spec(tmp_path, wf), gw))
    assert [(x["from_state"], x["to_state"]) for x in req.metadata["transitions"]] == [
        ("start", "think"),
        ("think", "act"),
        ("act", "start"),
    ]
    assert req.metadata["workflow_state"] == "start"
    assert "never" not in [s["step"] for s in req.metadata["steps"]]  # the move ended act's steps
    assert gw.user_prompts()[0].startswith("m=2")
    assert req.metadata["parse_path"] == "tool_call" and req.action_name == "noop"


def test_each_step_runs_once_per_decision(tmp_path: Path) -> None:
    wf = {
        "states": ["a", "b"],
        "steps": [
            {"name": "ab", "type": "code", "in_state": "a", "code": "x = 1", "transition_to": "b"},
            {"name": "ba", "type": "code", "in_state": "b", "code": "y = 1", "transition_to": "a"},
        ],
    }
    req = decide(WorkflowPolicy(make_spec(tmp_path, wf), ScriptedChat()))
    assert len(req.metadata["transitions"]) == 2
    assert req.metadata["workflow_state"] == "a"
    assert (
        req.metadata["fallback_reason"]
        == "no action: state 'a' has no step left to run in this decision"
    )


def test_transition_to_is_guarded_by_conditions(tmp_path: Path) -> None:
    wf = {
        "states": ["a", "b"],
        "transitions": [{"from": "a", "to": "b", "condition": "tick >= 2"}],
        "steps": [
            {
                "name": "go",
                "type": "code",
                "code": "x = tick",
                "in_state": "a",
                "transition_to": "b",
            }
        ],
    }
    policy = WorkflowPolicy(make_spec(tmp_path, wf), ScriptedChat())
    early = decide(policy, 0)
    assert early.metadata["workflow_state"] == "a"
    assert "condition 'tick >= 2' is false" in early.metadata["steps"][0]["blocked"]
    late = decide(policy, 2, early.metadata["agent_state"])
    assert late.metadata["transitions"] == [
        {"from_state": "a", "to_state": "b", "trigger": "go: done", "routine": False}
    ]


# -- transition steps ----------------------------------------------------------------------------
def review_workflow(**step: Any) -> dict[str, Any]:
    return {
        "states": ["work", "review", "plan"],
        "initial_state": "review",
        "transitions": [
            {"from": "review", "to": "work"},
            {"from": "review", "to": "plan", "condition": "should_pivot"},
        ],
        "variables": {"should_pivot": False},
        "steps": [
            {
                "name": "review_strategy",
                "type": "transition",
                "in_state": "review",
                "prompt": "Pivot? {should_pivot}",
                "transition_map": {"continue": "work", "should_pivot": "plan"},
                **step,
            },
        ],
    }


def test_transition_step_asks_the_model_to_choose(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, review_workflow())
    gw = ScriptedChat([choose("continue")])
    req = decide(WorkflowPolicy(spec, gw))
    assert req.metadata["transitions"] == [
        {
            "from_state": "review",
            "to_state": "work",
            "trigger": "review_strategy: continue",
            "routine": False,
            "reason": "why not",  # the model's stated reason is kept
        }
    ]
    request = gw.requests[0]
    assert request["tool_choice"] == {"type": "function", "function": {"name": CHOOSE_TOOL}}
    params = request["tools"][0]["function"]["parameters"]
    assert params["properties"]["choice"]["enum"] == ["continue", "should_pivot"]
    assert "Pivot? false" in request["messages"][1]["content"]
    assert req.action_name == "noop"


def test_refused_or_unknown_choice_is_retried(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, review_workflow(max_retries=2))
    gw = ScriptedChat([choose("should_pivot"), choose("maybe"), text('{"choice": "continue"}')])
    req = decide(WorkflowPolicy(spec, gw))
    step = req.metadata["steps"][0]
    assert step["status"] == "ok" and step["attempts"] == 3
    assert req.metadata["workflow_state"] == "work"
    prompts = gw.user_prompts()
    assert "condition 'should_pivot' is false" in prompts[1]
    assert "unknown choice 'maybe' (options: continue, should_pivot)" in prompts[2]


def test_choice_allowed_when_condition_holds_and_bare_text(tmp_path: Path) -> None:
    wf = review_workflow()
    wf["variables"] = {"should_pivot": True}
    spec = make_spec(tmp_path, wf)
    req = decide(WorkflowPolicy(spec, ScriptedChat([text("`should_pivot`")])))
    assert req.metadata["transitions"][0]["trigger"] == "review_strategy: should_pivot"
    assert req.metadata["workflow_state"] == "plan"


# -- replies, prompts, requests ----------------------------------------------------------------
def test_act_request_shape(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, one_llm_step(), temperature=0.3, llm_model="m1", max_tokens=99)
    gw = ScriptedChat([act("noop")])
    policy = WorkflowPolicy(spec, gw, seed=7, model="ignored")
    policy.use_world_actions(ECOLOGY_ACTIONS, "ecology")  # as the engine does when a run is built
    decide(policy)
    request = gw.requests[0]
    assert request["model"] == "m1" and request["temperature"] == 0.3
    assert request["max_tokens"] == 99 and isinstance(request["seed"], int)
    assert request["tool_choice"] == {"type": "function", "function": {"name": ACT_TOOL}}
    (tool,) = request["tools"]
    params = tool["function"]["parameters"]
    assert params["required"] == ["thought_process", "action"]
    branches = params["properties"]["action"]["anyOf"]  # one shape per action, args included
    assert [b["properties"]["name"]["const"] for b in branches] == ACTIONS
    read = next(b for b in branches if b["properties"]["name"]["const"] == "read_artifact")
    assert "artifact_id" in read["properties"]["arguments"]["properties"]

    assert request["messages"][0] == {"role": "system", "content": "You are tester."}
    user = request["messages"][1]["content"]
    assert user.startswith("Act.\n\nAvailable actions:\n")
    assert "- read_artifact(artifact_id" in user  # described from the ecology registry
    # without a seed, no provider seed; the model falls back to the keyword, then the gateway's
    spec2 = make_spec(tmp_path / "2", one_llm_step())
    gw2 = ScriptedChat([act("noop")], model="gw-model")
    decide(WorkflowPolicy(spec2, gw2))
    assert gw2.requests[0]["seed"] is None and gw2.requests[0]["model"] == "gw-model"
    gw3 = ScriptedChat([act("noop")])
    decide(WorkflowPolicy(spec2, gw3, model="kw-model", max_tokens=50))
    assert gw3.requests[0]["model"] == "kw-model" and gw3.requests[0]["max_tokens"] == 50


def test_actions_come_from_the_world_registry_handed_over(tmp_path: Path) -> None:
    """The policy guesses no world: alone it names actions without arguments; once the engine
    hands it the world's registry (``use_world_actions``) it describes and checks them; a
    registry given to the constructor is kept."""
    spec = make_spec(tmp_path, one_llm_step())
    alone = ScriptedChat([act("noop")])
    decide(WorkflowPolicy(spec, alone))
    user = alone.user_prompts()[0]
    assert "- read_artifact\n" in user and "read_artifact(" not in user
    branches = alone.requests[0]["tools"][0]["function"]["parameters"]["properties"]["action"]
    assert "anyOf" not in branches  # no argument schemas without a registry

    handed = ScriptedChat([act("noop")])
    policy = WorkflowPolicy(spec, handed)
    policy.use_world_actions(ECOLOGY_ACTIONS, "ecology")
    decide(policy)
    assert "- read_artifact(artifact_id" in handed.user_prompts()[0]

    own = WorkflowPolicy(spec, ScriptedChat([act("noop")]), registry=ECOLOGY_ACTIONS)
    own.use_world_actions(ECOLOGY_ACTIONS.extend(), "other")
    assert own.registry is ECOLOGY_ACTIONS


def test_ooda_schema_and_reasoning(tmp_path: Path) -> None:
    wf = one_llm_step()
    wf["response_schema"] = "ooda"
    spec = make_spec(tmp_path, wf)
    reply = act("noop", situation_assessment="quiet", action_rationale="wait")
    reply.tool_calls[0].arguments.pop("thought_process")
    gw = ScriptedChat([reply])
    req = decide(WorkflowPolicy(spec, gw))
    assert req.reasoning == "Situation: quiet\nRationale: wait"
    params = gw.requests[0]["tools"][0]["function"]["parameters"]
    assert params["required"] == ["situation_assessment", "action_rationale", "action"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            '{"thought_process": "t", "action": {"name": "read_artifact", '
            '"arguments": {"artifact_id": "a1"}}}',
            ("read_artifact", {"artifact_id": "a1"}),
        ),
        (
            'Sure!\n```json\n{"action": "post_message", "arguments": {"content": "hi"}}\n```',
            ("post_message", {"content": "hi"}),
        ),
        ('{"action": "noop"}', ("noop", {})),
    ],
)
def test_json_in_text_is_accepted(tmp_path: Path, content: str, expected: tuple) -> None:
    spec = make_spec(tmp_path, one_llm_step())
    req = decide(WorkflowPolicy(spec, ScriptedChat([text(content)])))
    assert (req.action_name, req.arguments) == expected
    assert req.metadata["parse_path"] == "json_text"


def test_rag_and_working_memory_go_into_the_prompt(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        one_llm_step(prompt="Which artifact pays for weather?"),
        rag={"enabled": True, "k": 1},
        working_memory={"enabled": True, "max_bytes": 64},
    )
    memory = [
        {"time_step": 1, "kind": "note", "text": "the market is quiet"},
        {"time_step": 2, "kind": "event", "text": "weather artifact pays 5 scrip"},
        {"time_step": 3, "kind": "note", "text": "beta owes me"},
    ]
    gw = ScriptedChat([act("noop")])
    decide(WorkflowPolicy(spec, gw), memory=memory, working_memory={"plan": "sell weather"})
    user = gw.user_prompts()[0]
    # agent_ecology 599d43d3 agent.py build_prompt: "## Your Memories" and "## Your Working
    # Memory" sections (ours: "## Relevant memories", "## Working memory", structured format).
    assert "## Relevant memories\n- [t=2] event: weather artifact pays 5 scrip" in user
    assert "market is quiet" not in user and "beta owes" not in user
    assert "## Working memory\nplan: sell weather" in user


def test_no_actions_offered(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, one_llm_step(on_failure="fail"))
    req = decide(WorkflowPolicy(spec, ScriptedChat()), tools=[])
    assert req.metadata["fallback_reason"] == "step 'act' failed: no actions available"


# -- agent state, determinism, sync/async, fatal errors -----------------------------------------
def test_bad_agent_state_starts_over(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, one_llm_step(on_failure="skip"))
    policy = WorkflowPolicy(spec, ScriptedChat([act("noop"), act("noop")]))
    req = decide(policy, 3, {"state": "gone", "variables": {}})
    assert "state 'gone' is not defined" in req.metadata["agent_state_reset"]
    assert req.metadata["agent_state"]["decisions"] == 1
    req = decide(policy, 4, "junk")
    assert "not a mapping" in req.metadata["agent_state_reset"]


def test_fatal_errors_propagate(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, one_llm_step(on_failure="skip"))
    with pytest.raises(FatalBoom):
        decide(WorkflowPolicy(spec, ScriptedChat([FatalBoom("replay miss")])))
    policy = WorkflowPolicy(spec, ScriptedChat([FatalBoom("replay miss")]))
    with pytest.raises(FatalBoom):
        asyncio.run(
            policy.adecide(run_id="r", time_step=0, agent_id="tester", observation=observation())
        )


def run_chain(policy: WorkflowPolicy, steps: int, use_async: bool) -> list[ActionRequest]:
    out = []
    state = None
    history: list[dict[str, Any]] = []
    last = None
    for t in range(steps):
        obs = observation(t, state, action_history=history[-10:], last_action_result=last)
        if use_async:
            req = asyncio.run(
                policy.adecide(run_id="r", time_step=t, agent_id=policy.spec.id, observation=obs)
            )
        else:
            req = policy.decide(run_id="r", time_step=t, agent_id=policy.spec.id, observation=obs)
        out.append(req)
        state = req.metadata["agent_state"]
        ok = req.action_name == "noop"
        last = {"action": req.action_name, "success": ok, "reason": None if ok else "nope"}
        history.append({"time_step": t, "action": req.action_name, "success": ok})
    return out


LOOPS = ROOT / "tests/fixtures/agents"  # state-machine agents (alpha_2/beta_2 before issue 13)


@pytest.mark.parametrize("name", ["loop_alpha", "loop_beta"])
def test_examples_against_the_mock_decide_equals_adecide(name: str) -> None:
    spec = load_agent(LOOPS / name)
    sync = run_chain(WorkflowPolicy(spec, MockLLMGateway(seed=7), seed=7), 12, False)
    again = run_chain(WorkflowPolicy(spec, MockLLMGateway(seed=7), seed=7), 12, False)
    async_ = run_chain(WorkflowPolicy(spec, MockLLMGateway(seed=7), seed=7), 12, True)
    assert sync == async_ == again
    transitions = [t for req in sync for t in req.metadata["transitions"]]
    assert transitions and all(
        set(t) - {"reason"} == {"from_state", "to_state", "trigger", "routine"} for t in transitions
    )
    visited = {t["to_state"] for t in transitions}
    assert visited == set(spec.workflow.states)
    assert len({req.metadata["workflow_state"] for req in sync}) >= 1
    for req in sync:
        json.dumps(req.metadata)  # everything recorded and checkpointed is JSON
        assert req.metadata["model"] == "mock"
        assert req.action_name in ACTIONS
        assert all(
            s["status"] in {"ok", "not_run", "skipped", "failed"} for s in req.metadata["steps"]
        )
    calls = sum(req.metadata["llm_calls"] for req in sync)
    assert calls >= 12
    variables = sync[-1].metadata["agent_state"]["variables"]
    if name == "loop_alpha":
        assert {"success_rate", "stuck_in_loop", "should_pivot", "strategy"} <= set(variables)
    else:
        assert {"subgoal", "goal_progress", "subgoal_progress", "approach"} <= set(variables)
        assert variables["reviews"] == 2  # ticks 5 and 10


@pytest.mark.parametrize("use_async", [False, True])
def test_the_shipped_agents_against_the_mock(use_async: bool) -> None:
    """agent_ecology 599d43d3 workflow.py: a linear workflow runs every step in order each turn,
    each llm step one model call, and the last llm step's action is the turn's action.

    alpha_2 has three llm steps (self_audit, review_strategy, decide_action); beta_2 has two
    (tactical_plan, decide_action) plus strategic_review when ``tick % 10 == 0`` (its working
    memory is empty, so it is never stuck on a subgoal here).
    """
    for name, calls in (("alpha_2", lambda t: 3), ("beta_2", lambda t: 3 if t % 10 == 0 else 2)):
        spec = load_agent(ROOT / "data/agents" / name)
        chain = run_chain(WorkflowPolicy(spec, MockLLMGateway(seed=7), seed=7), 12, use_async)
        again = run_chain(WorkflowPolicy(spec, MockLLMGateway(seed=7), seed=7), 12, use_async)
        assert chain == again
        assert [req.metadata["llm_calls"] for req in chain] == [calls(t) for t in range(12)]
        for req in chain:
            assert req.metadata["transitions"] == []  # one state: nothing to move between
            assert req.action_name in ACTIONS
            assert req.metadata["action_step"] == "decide_action"
            json.dumps(req.metadata)


def test_alpha_2_pivots_when_stuck() -> None:
    """Three failed read_artifact in a row -> stuck_in_loop -> should_pivot -> the review asks,
    the model pivots back to self_audit, and next decision the strategy rotates."""
    spec = load_agent(LOOPS / "loop_alpha")
    gw = ScriptedChat(by_tool={CHOOSE_TOOL: [choose("pivot")], ACT_TOOL: [act("noop")]})
    policy = WorkflowPolicy(spec, gw)
    failing = [{"time_step": t, "action": "read_artifact", "success": False} for t in range(3)]
    last = {"action": "read_artifact", "success": False, "reason": "not found"}
    req = decide(policy, 3, None, action_history=failing, last_action_result=last, success_rate=0.0)
    variables = req.metadata["agent_state"]["variables"]
    assert variables["stuck_in_loop"] is True and variables["should_pivot"] is True
    assert req.metadata["transitions"][-1] == {
        "from_state": "review_strategy",
        "to_state": "self_audit",
        "trigger": "review: pivot",
        "routine": False,  # a pivot, not the loop going round
        "reason": "why not",
    }
    assert req.action_name == "noop" and req.metadata["parse_path"] == "fallback"
    nxt = decide(
        policy,
        4,
        req.metadata["agent_state"],
        action_history=failing,
        last_action_result=last,
        success_rate=0.0,
    )
    variables = nxt.metadata["agent_state"]["variables"]
    assert variables["pivots"] == 1 and variables["strategy_index"] == 1
    assert variables["strategy"].startswith("trade")
    assert nxt.metadata["action_step"] == "act"
    assert nxt.metadata["workflow_state"] == "compute_metrics"
