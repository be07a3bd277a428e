"""The prompt shows what the agent ecology's propose prompt shows, in both LLM policies.

Original: agent_ecology 599d43d3 ``src/agents/agent.py`` ``build_prompt`` and the design
document (seed 003, "Prompt Building"): system prompt, event number, balances, quotas,
available artifacts, recent events, relevant memories (RAG on the current context), working
memory, last action result and recent failures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.scripted import ScriptedChat
from tests.workflow.wf_helpers import act, observation, write_agent
from vivarium.gateways.base import LLMResponse, ToolCall
from vivarium.policies.cognitive import SimpleCognitivePolicy
from vivarium.policies.sections import (
    PROPOSE_ACTION_PROMPT,
    SECTION_NAMES,
    fill_sections,
    placeholder,
    prompt_sections,
    sections_in,
)
from vivarium.workflow import WorkflowPolicy, load_agent

RICH = {
    "time_step": 7,
    "balance": 42,
    "economic_context": {"total_scrip": 300, "agents": 3, "richest": "bob", "my_rank": 2},
    "quotas": {
        "disk_quota": 1000,
        "disk_used": 120,
        "disk_available": 880,
        "llm_tokens_quota": None,
        "llm_tokens_used": 55,
    },
    "artifacts": [
        {
            "id": "calc",
            "owner": "bob",
            "kind": "data",
            "executable": True,
            "price": 3,
            "size": 20,
            "methods": ["add"],
        },
    ],
    "messages": [{"time_step": 5, "author_id": "bob", "content": "calc is open"}],
    "action_history": [
        {"time_step": 4, "action": "read_artifact", "success": True},
        {"time_step": 6, "action": "invoke_artifact", "success": False},
    ],
    "failure_history": [
        {"action": "invoke_artifact", "success": False, "reason": "insufficient scrip: need 3"}
    ],
    "last_action_result": {
        "action": "invoke_artifact",
        "success": False,
        "reason": "insufficient scrip: need 3",
    },
    "working_memory": {"current_goal": "sell forecasts", "lessons": ["price low", "ask first"]},
    "memory": [{"time_step": 2, "kind": "event", "text": "bob paid me 5 scrip for weather"}],
}


def workflow_agent(tmp_path: Path, **top: Any) -> WorkflowPolicy:
    data = {
        "id": "tester",
        "workflow": {
            "states": ["work"],
            "steps": [{"name": "propose", "type": "llm", "prompt": PROPOSE_ACTION_PROMPT}],
        },
        "rag": {"enabled": True, "limit": 2},
        "working_memory": {"enabled": True},
        **top,
    }
    spec = load_agent(write_agent(tmp_path / "agent", data))
    return WorkflowPolicy(spec, ScriptedChat([act("noop")] * 3))


def user_of(policy: WorkflowPolicy, **obs: Any) -> str:
    policy.decide(run_id="r", time_step=7, agent_id="tester", observation=observation(**obs))
    return policy.gateway.user_prompts()[-1]  # type: ignore[attr-defined]


def test_the_propose_prompt_has_every_section_of_the_original() -> None:
    """seed 003 "Prompt Building": each section of the original's prompt has a placeholder."""
    assert set(sections_in(PROPOSE_ACTION_PROMPT)) == set(SECTION_NAMES)


def test_the_propose_step_shows_what_the_original_shows(tmp_path: Path) -> None:
    """agent.py build_prompt 599d43d3: tick, balance, quotas, artifacts (executable ones with
    price and methods), recent events, memories, working memory (its schema fields), the last
    action's result and recent failures with their reasons."""
    user = user_of(workflow_agent(tmp_path), **{**RICH, "time_step": 7})
    for expected in (
        "This is event 7.",
        "## Balances\n- You: 42 scrip (rank 2 of 3; richest: bob; scrip in the world: 300)",
        "## Quotas\n- Disk: 120 of 1000 bytes used (880 available)\n- LLM tokens: 55 used",
        "- calc (owner: bob, data, 20 bytes) executable, price 3, methods: add",
        "## Recent events\n- [t=4] you: read_artifact -> ok\n- [t=5] bob posted: calc is open\n"
        "- [t=6] you: invoke_artifact -> FAILED",
        "## Relevant memories\n- [t=2] event: bob paid me 5 scrip for weather",
        "## Working memory\nCurrent goal: sell forecasts\nLessons: price low; ask first",
        "## Last action result\n- invoke_artifact FAILED: insufficient scrip: need 3",
        "## Recent failures\n- [t=6] invoke_artifact: insufficient scrip: need 3",
    ):
        assert expected in user, expected
    assert "{sections." not in user
    # the memory section is the step's own: not repeated after the prompt
    assert user.count("## Relevant memories") == 1 and user.count("## Working memory") == 1


def test_the_cognitive_policy_shows_the_same_sections() -> None:
    """One piece of code for both policies (issue 13): the cognitive policy's prompt of an
    ecology observation holds the very section texts the workflow's propose step shows."""
    reply = LLMResponse(tool_calls=[ToolCall(id="c", name="noop", arguments={})])
    gateway = ScriptedChat([reply])
    policy = SimpleCognitivePolicy(gateway, {"model": "m", "memory_k": 1})
    obs = observation(**{**RICH, "agent_id": "tester"})
    policy.decide(run_id="r", time_step=7, agent_id="tester", observation=obs)
    user = gateway.user_prompts()[0]
    memories = [RICH["memory"][0]]
    sections = prompt_sections(obs, memories=memories, working_memory_bytes=2000)
    for name in (
        "balances", "quotas", "available_artifacts", "recent_events", "relevant_memories",
        "working_memory", "last_action", "recent_failures",
    ):  # fmt: skip
        assert sections[name] and sections[name] in user, name


def test_missing_sources_leave_no_section_and_no_blank_gap() -> None:
    """agent.py 599d43d3 includes a section only when it has its data (e.g. quotas)."""
    text = fill_sections(f"A\n\n{placeholder('quotas')}\n\nB", prompt_sections({"time_step": 1}))
    assert text == "A\n\nB"


def test_an_empty_working_memory_says_how_to_start_one(tmp_path: Path) -> None:
    """agent.py 599d43d3: with working memory injected and none yet, the prompt says how to
    create it (ours: write to the agent's own artifact, how our ecology stores it)."""
    user = user_of(workflow_agent(tmp_path), working_memory={})
    assert "## Working memory\n(empty)" in user and "agent artifact `tester`" in user


def test_the_ecology_observation_carries_the_quotas() -> None:
    """agent.py 599d43d3 build_prompt "Your Rights (Quotas)": LLM tokens quota, disk quota,
    disk used and available, from world_state["quotas"]; our world observes them per agent."""
    from vivarium.types import ActionRequest
    from vivarium.worlds.ecology import EcologyWorld

    world = EcologyWorld(["alice"], disk_quota_bytes=100, llm_token_quota=500)
    world.apply(
        ActionRequest(
            run_id="r",
            time_step=0,
            agent_id="alice",
            action_name="write_artifact",
            arguments={"artifact_id": "notes", "content": "0123456789"},
        )
    )
    world.record_llm_usage("alice", 42)
    assert world.observe("alice", 1)["quotas"] == {
        "disk_quota": 100,
        "disk_used": 10,
        "disk_available": 90,
        "llm_tokens_quota": 500,
        "llm_tokens_used": 42,
    }
