"""The context budget: a request above the window is trimmed oldest first, and it is recorded.

Original: the aam engine (Mahdi-s/vivarium ``src/aam/llm_gateway.py``) estimates a request's
tokens as its characters over 4 (message texts plus tool names, descriptions and parameter
schemas) and degrades the context above ``context_degradation_threshold = 8000`` tokens by
dropping old history; agent_ecology 599d43d3 ``agent.py`` ``_truncate_to_budget`` cuts history
sections from the start ("older entries truncated").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.scripted import ScriptedChat
from tests.workflow.wf_helpers import act, observation, write_agent
from vivarium.gateways.base import LLMResponse, ToolCall
from vivarium.policies.budget import (
    DEFAULT_CONTEXT_TOKENS,
    estimate_tokens,
    fit_messages,
)
from vivarium.policies.cognitive import CognitivePolicyConfig, SimpleCognitivePolicy
from vivarium.policies.sections import PROPOSE_ACTION_PROMPT
from vivarium.workflow import WorkflowPolicy, load_agent

INSTRUCTIONS = "Decide what to do. Never skip this line."
ACTIONS = "Available actions:\n- noop(): do nothing\n- post_message(content): post"


def prompt(n_events: int, n_failures: int = 0) -> str:
    events = "\n".join(f"- [t={t}] bob posted: {'x' * 40}" for t in range(n_events))
    failures = "\n".join(f"- write_artifact: failure number {i}" for i in range(n_failures))
    parts = [INSTRUCTIONS, "## Recent events\n" + events]
    if n_failures:
        parts.append("## Recent failures\n" + failures)
    return "\n\n".join([*parts, ACTIONS])


def test_tokens_are_characters_over_four_with_the_tools() -> None:
    """llm_gateway.py _estimate_tokens: total characters of contents and tool specs // 4."""
    tool = {
        "type": "function",
        "function": {"name": "act", "description": "do it", "parameters": {"type": "object"}},
    }
    messages = [{"role": "system", "content": "a" * 10}, {"role": "user", "content": "b" * 30}]
    chars = 40 + len("act") + len("do it") + len(json.dumps({"type": "object"}))
    assert estimate_tokens(messages, [tool]) == chars // 4
    assert DEFAULT_CONTEXT_TOKENS == 8000  # llm_gateway.py context_degradation_threshold


def test_under_the_limit_nothing_changes() -> None:
    """Below the threshold the request goes as it is (llm_gateway.py _should_degrade_context)."""
    messages = [{"role": "user", "content": prompt(3)}]
    assert fit_messages(messages, None, 8000) == (messages, None)
    assert fit_messages(messages, None, None) == (messages, None)


def test_the_oldest_events_go_first_and_the_rest_stays() -> None:
    """Oldest history first (agent.py 599d43d3 truncation_strategy "start" for histories);
    instructions and the action list are never cut; the trim is recorded and said in place."""
    text = prompt(40)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]
    limit = estimate_tokens(messages) - 100  # about 8 event lines too many
    out, trim = fit_messages(messages, None, limit)
    assert trim is not None and estimate_tokens(out) <= limit
    user = out[1]["content"]
    assert user.startswith(INSTRUCTIONS) and user.endswith(ACTIONS) and out[0] == messages[0]
    kept = [int(line.split("]")[0][5:]) for line in user.splitlines() if line.startswith("- [t=")]
    cut = trim.removed["recent events"]
    assert kept == list(range(cut, 40))  # the oldest went, in order
    assert f"- ({cut} older entries left out to fit)" in user
    meta = trim.as_metadata()
    assert meta["limit"] == limit and meta["lines_removed"] == cut
    assert meta["tokens_before"] == estimate_tokens(messages)
    assert meta["tokens_after"] == estimate_tokens(out) and meta["oldest_kept"] == cut
    assert meta["over_budget"] is False


def test_untimed_failures_go_after_timed_history() -> None:
    """Timed history (events, memories) goes first; recent failures next, oldest first."""
    text = prompt(4, n_failures=30)
    messages = [{"role": "user", "content": text}]
    out, trim = fit_messages(messages, None, estimate_tokens(messages) - 150)
    assert trim is not None
    assert trim.removed["recent events"] == 4 and trim.removed["recent failures"] > 0
    user = out[0]["content"]
    assert "failure number 0" not in user and "failure number 29" in user


def test_nothing_trimmable_left_is_recorded_as_over_budget() -> None:
    """The instructions are never cut, so a request may stay over: recorded as such."""
    messages = [{"role": "user", "content": INSTRUCTIONS * 50}]
    out, trim = fit_messages(messages, None, 10)
    assert out == messages and trim is not None
    assert trim.over_budget is True and trim.lines_removed == 0


def big_observation() -> dict[str, Any]:
    history = [{"time_step": t, "action": "noop", "success": True} for t in range(60)]
    messages = [
        {"time_step": t, "author_id": "bob", "content": f"message {t} " + "y" * 200}
        for t in range(60)
    ]
    return observation(60, action_history=history, messages=messages)


def test_the_workflow_records_the_trim_in_the_decision_metadata(tmp_path: Path) -> None:
    """The trace shows the trimming: the step's entry of metadata ``steps`` has it."""
    data = {
        "id": "tester",
        "workflow": {
            "states": ["a"],
            "steps": [{"name": "propose", "type": "llm", "prompt": PROPOSE_ACTION_PROMPT}],
        },
    }
    spec = load_agent(write_agent(tmp_path / "agent", data))
    gateway = ScriptedChat([act("noop")])
    policy = WorkflowPolicy(spec, gateway, context_tokens=1500)
    req = policy.decide(run_id="r", time_step=60, agent_id="tester", observation=big_observation())
    trimmed = req.metadata["steps"][0]["context_trimmed"]
    assert trimmed["limit"] == 1500 and trimmed["tokens_after"] <= 1500
    assert trimmed["tokens_before"] > 1500 and trimmed["removed"]["recent events"] > 0
    user = gateway.user_prompts()[0]
    assert "message 59" in user and "message 0 " not in user
    assert "Available actions:" in user and "Call the tool `act` exactly once" in user
    untouched = WorkflowPolicy(spec, ScriptedChat([act("noop")]))  # the default 8000
    req = untouched.decide(
        run_id="r", time_step=60, agent_id="tester", observation=big_observation()
    )
    assert "context_trimmed" not in req.metadata["steps"][0]


def test_the_cognitive_policy_records_the_trim_in_its_metadata() -> None:
    """Both policies use the one budget (issue 13); the default is the aam engine's 8000."""
    assert CognitivePolicyConfig(model="m").context_tokens == 8000
    gateway = ScriptedChat([LLMResponse(tool_calls=[ToolCall(id="c", name="noop")])])
    policy = SimpleCognitivePolicy(gateway, {"model": "m", "context_tokens": 1200})
    req = policy.decide(run_id="r", time_step=60, agent_id="tester", observation=big_observation())
    trimmed = req.metadata["context_trimmed"]
    assert trimmed["tokens_after"] <= 1200 < trimmed["tokens_before"]
    user = gateway.user_prompts()[0]
    assert "message 59" in user and "message 0 " not in user and "Available tools:" in user


def test_a_message_of_several_lines_goes_whole_and_does_not_stop_the_trim() -> None:
    """A posted message may hold lines that look like headers ("Summary:"); the trim still
    reaches every message after it, removes a message with all its lines, and fits the limit."""
    from vivarium.policies.budget import estimate_tokens, fit_messages
    from vivarium.policies.prompting import build_messages

    posts = [{"time_step": 0, "author_id": "b", "content": "My plan:\nSummary:\n- build things"}]
    posts += [
        {"time_step": t, "author_id": "b", "content": "hello world " * 20} for t in range(1, 60)
    ]
    obs = {"time_step": 60, "agent_id": "a", "tools": ["noop", "post_message"], "messages": posts}
    messages = build_messages(obs, agent_id="a")
    assert estimate_tokens(messages) > 1000
    out, trim = fit_messages(messages, None, 1000)
    assert trim is not None and not trim.over_budget and estimate_tokens(out) <= 1000
    user = out[-1]["content"]
    assert "My plan:" not in user and "Summary:" not in user and "- build things" not in user
    assert "[t=59]" in user and trim.oldest_kept is not None and trim.oldest_kept > 1
