"""The workflow runner as the agent ecology's runs (agent_ecology 599d43d3, workflow.py, agent.py).

Step results for later steps, one model call per turn, transition answers as models give them,
retries before a skip, ``{name:spec}`` templates, the original's context names, code actions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted import ScriptedChat
from vivarium.types import ActionRequest, ActionResult
from vivarium.workflow import WorkflowPolicy, load_agent
from vivarium.workflow.config import AgentSpec
from vivarium.workflow.policy import DEFAULT_TRANSITION_PROMPT
from vivarium.workflow.prompt import build_context, render_template
from vivarium.workflow.replies import match_option, parse_choice
from vivarium.worlds.ecology import EcologyWorld

from .wf_helpers import (
    ROOT,
    Boom,
    act,
    choose,
    observation,
    text,
    write_agent,
)


def make_spec(tmp_path: Path, workflow: dict[str, Any]) -> AgentSpec:
    return load_agent(write_agent(tmp_path / "agent", {"id": "tester", "workflow": workflow}))


def limited(spec: AgentSpec, calls: int | None) -> AgentSpec:
    """The spec with ``workflow.llm_calls_per_turn`` set (the runner reads it by name)."""
    workflow = spec.workflow.model_copy(update={"llm_calls_per_turn": calls})
    return spec.model_copy(update={"workflow": workflow})


def decide(policy: WorkflowPolicy, t: int = 0, state: Any = None, **obs: Any) -> ActionRequest:
    return policy.decide(
        run_id="r", time_step=t, agent_id="tester", observation=observation(t, state, **obs)
    )


def audit_chain() -> dict[str, Any]:
    """The original's alpha_2 shape: metrics (code), an audit with output_key, then a decision.

    ``seen`` is declared, so it carries over to the next turn (``runs`` lasts the turn only).
    """
    return {
        "variables": {"seen": None},
        "steps": [
            {"name": "metrics", "type": "code", "code": "runs = 1"},
            {
                "name": "self_audit",
                "type": "llm",
                "output_key": "audit_result",
                "prompt": "Audit yourself. Runs: {runs}",
            },
            {
                "name": "decide_action",
                "type": "llm",
                "prompt": "Audit said: {audit_result}\nIt chose {self_audit.action.name}.",
            },
            {"name": "after", "type": "code", "code": "seen = audit_result"},
        ],
    }


# -- step results for the later steps of a turn -------------------------------------------------
def test_llm_step_result_is_kept_for_later_steps(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py _execute_llm_step: the result is stored under the step
    name as {reasoning, action}; alpha_2's output_key names the text a later prompt reads
    ({audit_result}); run_workflow: the last llm step's action is the turn's action, and the
    steps after an llm step still run in the same turn."""
    spec = make_spec(tmp_path, audit_chain())
    gw = ScriptedChat(
        [
            act("read_artifact", {"artifact_id": "a1"}, thought_process="reads pay off"),
            act("post_message", {"content": "hi"}, thought_process="say hello"),
        ]
    )
    req = decide(WorkflowPolicy(spec, gw))
    first, second = gw.user_prompts()
    assert "Runs: 1" in first
    assert "Audit said: reads pay off\nIt chose read_artifact." in second
    assert (req.action_name, req.arguments) == ("post_message", {"content": "hi"})
    assert req.metadata["action_step"] == "decide_action"
    steps = {s["step"]: s["status"] for s in req.metadata["steps"]}
    assert steps == {"metrics": "ok", "self_audit": "ok", "decide_action": "ok", "after": "ok"}
    assert req.metadata["agent_state"]["variables"]["seen"] == "reads pay off"


def test_unset_step_results_read_none(tmp_path: Path) -> None:
    """beta_2 (599d43d3) reads {strategic_assessment} from a step that runs only on review
    ticks: there str.format raised KeyError and the raw prompt was sent; here it reads (none)."""
    workflow = {
        "steps": [
            {
                "name": "review",
                "type": "llm",
                "condition": "tick % 10 == 0",
                "output_key": "assessment",
                "prompt": "Review.",
            },
            {"name": "plan", "type": "llm", "prompt": "Assessment: {assessment} / {review}"},
        ]
    }
    spec = make_spec(tmp_path, workflow)
    gw = ScriptedChat([act("noop")])
    req = decide(WorkflowPolicy(spec, gw), t=3)
    assert gw.user_prompts()[0].startswith("Assessment: (none) / (none)")
    assert [s["status"] for s in req.metadata["steps"]] == ["not_run", "ok"]


# -- one model call per turn --------------------------------------------------------------------
def test_one_llm_call_per_turn_defers_the_rest_to_the_next_turn(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 docs (execution model): "One LLM call per turn" (cost and
    predictability). With llm_calls_per_turn 1 the second llm step is deferred; the next turn
    goes on at it, with the audit's text carried over, and the earlier steps do not rerun."""
    spec = limited(make_spec(tmp_path, audit_chain()), 1)
    gw = ScriptedChat(
        [
            act("read_artifact", {"artifact_id": "a1"}, thought_process="reads pay off"),
            act("noop", thought_process="wait"),
            act("noop", thought_process="again"),
        ]
    )
    policy = WorkflowPolicy(spec, gw)
    one = decide(policy, 0)
    assert len(gw.requests) == 1 and one.metadata["llm_calls"] == 1
    assert one.action_name == "read_artifact"  # the audit's action is this turn's action
    assert [(s["step"], s["status"]) for s in one.metadata["steps"]] == [
        ("metrics", "ok"),
        ("self_audit", "ok"),
        ("decide_action", "deferred"),
    ]
    assert one.metadata["deferred"] == {"step": "decide_action", "state": "main", "attempt": 1}
    assert one.metadata["agent_state"]["variables"] == {"seen": None}  # the walk stopped there

    two = decide(policy, 1, one.metadata["agent_state"])
    assert len(gw.requests) == 2 and two.metadata["llm_calls"] == 1
    assert "Audit said: reads pay off" in gw.user_prompts()[1]
    assert [(s["step"], s["status"]) for s in two.metadata["steps"]] == [
        ("decide_action", "ok"),
        ("after", "ok"),
    ]
    assert two.metadata["agent_state"]["variables"]["seen"] == "reads pay off"
    assert "resume" not in two.metadata["agent_state"] and "deferred" not in two.metadata

    three = decide(policy, 2, two.metadata["agent_state"])  # a full cycle: from the top again
    assert [(s["step"], s["status"]) for s in three.metadata["steps"]] == [
        ("metrics", "ok"),
        ("self_audit", "ok"),
        ("decide_action", "deferred"),
    ]


def test_without_a_limit_every_step_calls_the_model(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py run_workflow: the runner itself sets no call limit
    (alpha_2 makes three calls a turn); unset llm_calls_per_turn keeps that."""
    spec = make_spec(tmp_path, audit_chain())
    gw = ScriptedChat([act("noop"), act("noop")])
    req = decide(WorkflowPolicy(limited(spec, None), gw))
    assert req.metadata["llm_calls"] == 2 and "deferred" not in req.metadata


def test_a_retry_past_the_call_limit_waits_for_the_next_turn(tmp_path: Path) -> None:
    """With one call per turn a retry is a call too: it is deferred, keeping its attempt count
    and the error the model is told about (max_retries still bounds the attempts)."""
    workflow = {"steps": [{"name": "decide_action", "type": "llm", "prompt": "Act."}]}
    spec = limited(make_spec(tmp_path, workflow), 1)
    gw = ScriptedChat([text("hmm"), act("noop")])
    policy = WorkflowPolicy(spec, gw)
    one = decide(policy, 0)
    assert one.action_name == "noop" and one.metadata["parse_path"] == "fallback"
    assert one.metadata["steps"][0]["status"] == "deferred"
    assert one.metadata["deferred"]["attempt"] == 2
    assert "deferred to the next turn" in one.metadata["fallback_reason"]
    two = decide(policy, 1, one.metadata["agent_state"])
    assert "Your previous reply could not be used (no action found)" in gw.user_prompts()[1]
    assert two.metadata["steps"][0] == {
        "step": "decide_action",
        "state": "main",
        "attempts": 2,
        "status": "ok",
        "error": "no action found",
    }
    assert two.metadata["parse_path"] == "tool_call"


# -- transition answers -------------------------------------------------------------------------
def reflect_workflow(**step: Any) -> dict[str, Any]:
    return {
        "state_machine": {
            "states": ["implementing", "observing", "shipping", "reflecting"],
            "initial_state": "reflecting",
        },
        "steps": [
            {
                "name": "strategic_reflect",
                "type": "transition",
                "in_state": "reflecting",
                "prompt": "Choose ONE: continue, pivot or ship.",
                "transition_map": {
                    "continue": "implementing",
                    "pivot": "observing",
                    "ship": "shipping",
                },
                **step,
            }
        ],
    }


@pytest.mark.parametrize(
    ("reply", "state"),
    [
        ("Ship.", "shipping"),
        ("ship", "shipping"),
        ("B", "observing"),
        ("B)", "observing"),
        ("I choose B) PIVOT", "observing"),
        ("**pivot**", "observing"),
        ("Option C", "shipping"),
        ("A) CONTINUE - recent actions show progress", "implementing"),
        ("CONTINUE", "implementing"),
    ],
)
def test_transition_answers_read_as_models_give_them(
    tmp_path: Path, reply: str, state: str
) -> None:
    """agent_ecology 599d43d3 workflow.py DEFAULT_TRANSITION_PROMPT lists A) CONTINUE, B) PIVOT,
    C) SHIP and asks for one of continue, pivot, ship: answers come back as words or letters,
    in any case, with punctuation and markup."""
    spec = make_spec(tmp_path, reflect_workflow())
    req = decide(WorkflowPolicy(spec, ScriptedChat([text(reply)])))
    assert req.metadata["workflow_state"] == state
    assert req.metadata["steps"][0]["attempts"] == 1


def test_the_stated_reason_is_kept(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py _execute_transition_step keeps the decision with its
    reasoning under the step name; here also in the step entry and the transition record."""
    spec = make_spec(tmp_path, reflect_workflow())
    reply = "I choose B) PIVOT because the same write keeps failing."
    req = decide(WorkflowPolicy(spec, ScriptedChat([text(reply)])))
    (move,) = req.metadata["transitions"]
    assert move["to_state"] == "observing" and move["reason"] == reply
    assert move["trigger"] == "strategic_reflect: pivot"
    assert req.metadata["steps"][0]["reason"] == reply
    # through the choose tool: its reason field
    req = decide(WorkflowPolicy(spec, ScriptedChat([choose("ship", "it works")])))
    assert req.metadata["transitions"][0]["reason"] == "it works"


def test_choose_prompt_shows_letters_and_the_tool_accepts_them(tmp_path: Path) -> None:
    """The original's transition prompt labels options A), B), C); a letter names the option
    listed at that place (transition_map order)."""
    spec = make_spec(tmp_path, reflect_workflow())
    gw = ScriptedChat([choose("C", "good enough")])
    req = decide(WorkflowPolicy(spec, gw))
    prompt = gw.user_prompts()[0]
    for line in ("A) continue: go to implementing", "B) pivot: go to observing", "C) ship:"):
        assert line in prompt
    assert req.metadata["workflow_state"] == "shipping"


def test_ambiguous_or_unknown_answers_are_not_guessed() -> None:
    """An answer naming two options, or none, is not a choice (the step's on_failure applies)."""
    options = ["continue", "pivot", "ship"]
    assert match_option("continue or pivot?", options) is None
    assert match_option("maybe later", options) is None
    assert match_option("I choose a different path: pivot", options) == ("pivot", False)
    assert isinstance(parse_choice(text("no idea"), options), str)


def test_a_transition_step_without_a_prompt_uses_the_default(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py: a transition step may leave out its prompt; the
    runner then asks DEFAULT_TRANSITION_PROMPT (continue / pivot / ship on the evidence)."""
    data = reflect_workflow()
    del data["steps"][0]["prompt"]
    spec = AgentSpec.model_validate({"id": "tester", "workflow": data})  # no load-time checks
    gw = ScriptedChat([text("continue")])
    req = decide(WorkflowPolicy(spec, gw), 3, success_rate=0.5)
    prompt = gw.user_prompts()[0]
    assert prompt.startswith(DEFAULT_TRANSITION_PROMPT.split("\n")[0])
    assert "Steps left: 27 | Success rate: 50% | Scrip earned so far: +0" in prompt
    assert "A) continue: go to implementing" in prompt
    assert req.metadata["workflow_state"] == "implementing"


# -- failures -----------------------------------------------------------------------------------
def test_skip_retries_up_to_max_retries_then_skips(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 execution-model doc: a step with on_failure: skip and
    max_retries: 1 is retried once, then skipped and the workflow goes on."""
    workflow = {
        "steps": [
            {
                "name": "risky",
                "type": "llm",
                "prompt": "Try.",
                "on_failure": "skip",
                "max_retries": 1,
            },
            {"name": "safe", "type": "llm", "prompt": "Act."},
        ]
    }
    spec = make_spec(tmp_path, workflow)
    gw = ScriptedChat([Boom("down"), text("no json here"), act("noop")])
    req = decide(WorkflowPolicy(spec, gw))
    risky, safe = req.metadata["steps"]
    assert (risky["status"], risky["attempts"], risky["error"]) == (
        "skipped",
        2,
        "no action found",
    )
    assert safe["status"] == "ok" and len(gw.requests) == 3
    assert req.metadata["agent_state"]["retries"] == {"risky": 1}


# -- templates ----------------------------------------------------------------------------------
def test_format_specs_as_str_format_reads_them() -> None:
    """alpha_2 (599d43d3) writes {success_rate:.0%}: the original's str.format renders 0.75 as
    75%; a value the spec does not fit, or None, renders readably instead of failing."""
    context = {"rate": 0.75, "n": 3, "text": "high", "nothing": None, "obj": {"a": {"b": 2}}}
    assert render_template("{rate:.0%} {n:03d} {rate:.2f}", context) == "75% 003 0.75"
    assert render_template("{text:.0%} {nothing:.0%} {nothing}", context) == "high (none) null"
    assert render_template("{obj.a.b} {obj.a.b:+d} {missing:.0%}", context) == "2 +2 {missing:.0%}"
    assert render_template('{"x": 1} {n}', context) == '{"x": 1} 3'


# -- the original's context names ---------------------------------------------------------------
def test_context_names_from_the_ecology_observation() -> None:
    """agent_ecology 599d43d3 agent.py _build_workflow_context (agent_id, tick, balance,
    artifacts with created_by, my_artifacts, memories, other_agents, revenue_earned, counts)
    and the names alpha_2 / beta_2 read (recent_failures / recent_successes with action_type,
    working_memory), derived from our ecology world's observation."""
    world = EcologyWorld(["alice", "bob"], starting_scrip={"alice": 100, "bob": 100})
    steps = [
        ("write_artifact", {"artifact_id": "notes", "content": "hi"}, True),
        ("read_artifact", {"artifact_id": "nope"}, False),
        ("read_artifact", {"artifact_id": "notes"}, True),
        ("read_artifact", {"artifact_id": "gone"}, False),
    ]
    for t, (name, arguments, succeeds) in enumerate(steps):
        result: ActionResult = world.apply(
            ActionRequest(
                run_id="r", time_step=t, agent_id="alice", action_name=name, arguments=arguments
            )
        )
        assert result.success is succeeds
    obs = world.observe("alice", 4)
    context = build_context(
        obs, tally={"actions_taken": 9, "successful_actions": 5, "starting_balance": 90}
    )
    assert context["agent_id"] == "alice" and context["tick"] == 4 and context["balance"] == 100
    notes = next(a for a in context["artifacts"] if a["id"] == "notes")
    assert notes["created_by"] == "alice"
    assert "notes" in context["my_artifacts"]
    assert context["other_agents"] == ["bob"]
    assert [a["id"] for a in context["other_artifacts"]] == ["bob"]  # bob's agent artifact
    assert [f["action_type"] for f in context["recent_failures"]] == ["read_artifact"] * 2
    assert [f["time_step"] for f in context["recent_failures"]] == [1, 3]
    assert "'gone'" in context["recent_failures"][1]["reason"]
    assert [s["action_type"] for s in context["recent_successes"]] == [
        "write_artifact",
        "read_artifact",
    ]
    assert context["actions_taken"] == 9 and context["failed_actions"] == 4
    assert context["successful_actions"] == 5 and context["revenue_earned"] == 10.0
    assert context["memories"].startswith("- [t=0] action: ")
    assert context["working_memory"] == {} or isinstance(context["working_memory"], dict)
    assert context["success_rate"] == 0.5  # ours: a fraction (the original: "2/4 (50%)")
    # without a tally, the counts come from the observed history
    alone = build_context(obs)
    assert (alone["actions_taken"], alone["successful_actions"], alone["revenue_earned"]) == (
        4,
        2,
        0.0,
    )


def test_counts_and_revenue_are_kept_across_turns(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 agent.py: actions_taken / successful_actions / failed_actions count
    every action, revenue_earned is the balance minus the balance at the first turn."""
    workflow = {
        "steps": [
            {
                "name": "decide_action",
                "type": "llm",
                "prompt": (
                    "{actions_taken} {successful_actions} {failed_actions} {revenue_earned:+.0f}"
                ),
            }
        ]
    }
    spec = make_spec(tmp_path, workflow)
    gw = ScriptedChat([act("noop")] * 3)
    policy = WorkflowPolicy(spec, gw)
    one = decide(policy, 0, balance=100)
    history = [{"time_step": 0, "action": "noop", "success": True}]
    two = decide(policy, 1, one.metadata["agent_state"], balance=104, action_history=history)
    history.append({"time_step": 1, "action": "read_artifact", "success": False})
    decide(policy, 2, two.metadata["agent_state"], balance=97, action_history=history[1:])
    firsts = [prompt.splitlines()[0] for prompt in gw.user_prompts()]
    assert firsts == ["0 0 0 +0", "1 1 0 +4", "2 1 1 -3"]


# -- code actions -------------------------------------------------------------------------------
def test_execute_decision_acts_on_what_was_decided(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 agents doc (Plan #70): observe (llm), decide (llm), then a code
    step with action: execute_decision; the decided action is the turn's, the walk ends."""
    workflow = {
        "steps": [
            {"name": "decide", "type": "llm", "prompt": "Choose an action."},
            {"name": "act", "type": "code", "action": "execute_decision"},
            {"name": "late", "type": "llm", "prompt": "Never asked."},
        ]
    }
    spec = make_spec(tmp_path, workflow)
    gw = ScriptedChat([act("read_artifact", {"artifact_id": "a1"})])
    req = decide(WorkflowPolicy(spec, gw))
    assert req.action_name == "read_artifact" and len(gw.requests) == 1
    assert [s["step"] for s in req.metadata["steps"]] == ["decide", "act"]
    assert req.metadata["stopped_by"] == "act: execute_decision"


def test_execute_decision_with_nothing_decided_fails_the_step(tmp_path: Path) -> None:
    """No llm step decided yet: execute_decision has nothing to act on; its on_failure applies."""
    workflow = {
        "steps": [
            {"name": "act", "type": "code", "action": "execute_decision", "on_failure": "skip"},
            {"name": "decide", "type": "llm", "prompt": "Choose."},
        ]
    }
    spec = make_spec(tmp_path, workflow)
    req = decide(WorkflowPolicy(spec, ScriptedChat([act("noop")])))
    first = req.metadata["steps"][0]
    assert first["status"] == "skipped" and "no llm step has decided" in first["error"]
    assert req.metadata["action_step"] == "decide"


# -- review mends -------------------------------------------------------------------------------
def test_a_deferred_turn_keeps_what_its_code_steps_computed(tmp_path: Path) -> None:
    """A turn cut short by ``llm_calls_per_turn`` goes on next turn with the values its code
    steps computed, over the new observation (agent_ecology 599d43d3 agent.py: one turn's
    context is one build; the decision must not read another turn's ``success_rate``)."""
    workflow = {
        "steps": [
            {"name": "metrics", "type": "code", "code": "success_rate = 0.1"},
            {
                "name": "audit",
                "type": "llm",
                "output_key": "audit",
                "prompt": "Rate {success_rate}",
            },
            {"name": "decide_action", "type": "llm", "prompt": "Act at rate {success_rate}"},
        ]
    }
    gw = ScriptedChat([act("noop"), act("noop")])
    policy = WorkflowPolicy(limited(make_spec(tmp_path, workflow), 1), gw)
    one = decide(policy, 0, success_rate=0.9)
    decide(policy, 1, one.metadata["agent_state"], success_rate=0.9)
    prompts = gw.user_prompts()
    assert prompts[0].startswith("Rate 0.1") and prompts[1].startswith("Act at rate 0.1")


def test_a_condition_that_cannot_be_evaluated_skips_the_step(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py execute_step: a ``run_if`` that raises skips the step
    (logged) and the workflow goes on, whatever the step's ``on_failure``."""
    workflow = {
        "steps": [
            {"name": "review", "type": "llm", "condition": "success_rate < 0.5", "prompt": "R"},
            {"name": "decide_action", "type": "llm", "prompt": "Act"},
        ]
    }
    gw = ScriptedChat([act("noop")])
    req = decide(WorkflowPolicy(make_spec(tmp_path, workflow), gw))  # success_rate is None
    review, act_step = req.metadata["steps"]
    assert review["status"] == "skipped" and review["error"].startswith("run_if: ")
    assert act_step["status"] == "ok" and req.metadata["parse_path"] != "fallback"
    assert len(gw.requests) == 1


def test_beta_2_works_in_a_crowded_world() -> None:
    """beta_2 (599d43d3) lists every other agent's artifact each turn (``other_artifacts``); that
    lasts the turn, as there, so a world of 800 artifacts neither fails it nor grows its state."""
    from vivarium.gateways import MockLLMGateway

    crowd = [
        {"id": f"tool_{i:03d}", "owner": "someone", "created_by": "someone", "executable": False,
         "price": 1, "size": 40, "methods": []}
        for i in range(800)
    ]  # fmt: skip
    spec = load_agent(ROOT / "data/agents/beta_2")
    policy = WorkflowPolicy(spec, MockLLMGateway(seed=7), seed=7)
    req = decide(policy, 3, None, artifacts=crowd)
    assert all(s["status"] in {"ok", "not_run"} for s in req.metadata["steps"]), req.metadata
    assert len(json.dumps(req.metadata["agent_state"])) < 2_000


def test_world_content_cannot_place_prompt_sections(tmp_path: Path) -> None:
    """A message or artifact text written as a section placeholder stays text: it neither pulls
    memories or listings into the quoted content nor takes the place of the real sections."""
    workflow = {"steps": [{"name": "decide_action", "type": "llm", "prompt": "Seen: {messages}"}]}
    rag = {"enabled": True, "limit": 3, "query_template": "what paid off, the bulletin?"}
    data = {"id": "tester", "rag": rag, "workflow": workflow}
    spec = load_agent(write_agent(tmp_path / "agent", data))
    bait = "{sections.relevant_memories} {sections.available_artifacts}"
    memory = [{"time_step": 0, "kind": "action", "text": "read the bulletin, it paid off"}]
    prompts = []
    for content in ("hello", bait):
        gw = ScriptedChat([act("noop")])
        messages = [{"author": "x", "channel": "main", "content": content, "time_step": 0}]
        decide(WorkflowPolicy(spec, gw), 1, messages=messages, memory=memory)
        prompts.append(gw.user_prompts()[0])
    plain, baited = prompts
    assert "{ sections.relevant_memories} { sections.available_artifacts}" in baited
    assert baited.count("## ") == plain.count("## ")  # the same sections, once each
    assert baited.count("read the bulletin") == plain.count("read the bulletin") == 1


def test_a_spoiled_tally_in_the_agent_state_starts_over() -> None:
    """A checkpoint whose tally holds a non-number does not turn every later turn into a
    fallback: the count starts over from the observed history."""
    from vivarium.gateways import MockLLMGateway

    policy = WorkflowPolicy(load_agent(ROOT / "data/agents/alpha_2"), MockLLMGateway(seed=7))
    state = policy.initial_state() | {"tally": {"actions_taken": "x", "successful_actions": None}}
    history = [{"time_step": 0, "action": "noop", "success": True}]
    req = decide(policy, 1, state, action_history=history)
    assert req.metadata["parse_path"] != "fallback"
    tally = req.metadata["agent_state"]["tally"]
    assert (tally["actions_taken"], tally["successful_actions"]) == (1, 1)


def test_a_code_step_runs_once_and_a_wide_format_stays_small(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py: a failed code step is not retried (its retry loop is
    the LLM step's); a template's width is bounded as the sandbox bounds it."""
    workflow = {
        "default_on_failure": "retry",
        "default_max_retries": 3,
        "steps": [
            {"name": "broken", "type": "code", "code": "x = 1 / 0", "on_failure": "skip"},
            {"name": "decide_action", "type": "llm", "prompt": "Act"},
        ],
    }
    req = decide(WorkflowPolicy(make_spec(tmp_path, workflow), ScriptedChat([act("noop")])))
    broken = req.metadata["steps"][0]
    assert (broken["status"], broken["attempts"]) == ("skipped", 1)
    assert "broken" not in req.metadata["agent_state"]["retries"]
    assert render_template("{balance:>300000000}|{balance:>5}", {"balance": 7}) == "7|    7"


def test_the_stated_reason_reaches_the_traces_transitions(tmp_path: Path) -> None:
    """The reason a model gave for a transition choice is kept in ``transitions.reason``
    (SQL and frame), beside the move it caused."""
    import sqlite3

    from vivarium import Run, TraceDb, WorldEngine, WorldEngineConfig

    spec = make_spec(tmp_path, reflect_workflow())
    reply = "I choose B) PIVOT because the same write keeps failing."
    db = tmp_path / "why.sqlite"
    trace = TraceDb(db)
    policy = WorkflowPolicy(spec, ScriptedChat([text(reply)]))
    WorldEngine(
        WorldEngineConfig(run_id="why"), {"tester": policy}, EcologyWorld(["tester"]), trace
    ).run(1)
    trace.close()
    moves = Run.open(db).transitions
    assert moves["to_state"].tolist() == ["observing"]
    assert moves["reason"].tolist() == [reply]
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT reason FROM transitions").fetchall() == [(reply,)]
