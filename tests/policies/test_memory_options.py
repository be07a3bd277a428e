"""Memory in the policies: a pluggable MemoryStore, query_template, limit, working-memory options.

Original: agent_ecology 599d43d3 ``src/agents/agent.py`` (``rag_config`` ``enabled``/``limit``/
``query_template``: the template, filled from the context, is the retrieval query; working
memory injected when ``auto_inject``) and ``config/config.yaml`` / ``src/config_schema.py``
``WorkingMemoryConfig`` (``auto_inject``, ``max_size_bytes``, ``include_in_rag``,
``structured_format``, ``warn_on_missing``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.scripted import ScriptedChat
from tests.workflow.wf_helpers import act, observation, write_agent
from vivarium.gateways.base import LLMResponse, ToolCall
from vivarium.memory import MemoryStore
from vivarium.policies.cognitive import SimpleCognitivePolicy
from vivarium.policies.sections import format_working_memory
from vivarium.workflow import WorkflowPolicy, load_agent

MEMORY = [
    {"time_step": 1, "kind": "note", "text": "the market is quiet"},
    {"time_step": 2, "kind": "event", "text": "weather artifact pays 5 scrip"},
    {"time_step": 3, "kind": "note", "text": "beta owes me 7 scrip"},
]


class RecordingStore:
    """A custom store: remembers the queries, answers with one marked entry per query."""

    def __init__(self) -> None:
        self.queries: list[tuple[str, int]] = []

    def add(self, entry: Any) -> None:
        raise AssertionError("a policy only searches a plugged store")

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        self.queries.append((query, k))
        return [{"time_step": 99, "kind": "vector", "text": "from the custom store"}]


def agent(tmp_path: Path, prompt: str = "Which artifact pays for weather?", **top: Any) -> Any:
    data = {
        "id": "tester",
        "workflow": {
            "states": ["a"],
            "steps": [{"name": "act", "type": "llm", "prompt": prompt}],
        },
        **top,
    }
    return load_agent(write_agent(tmp_path / "agent", data))


def run(policy: WorkflowPolicy, **obs: Any) -> tuple[str, dict[str, Any]]:
    req = policy.decide(
        run_id="r", time_step=4, agent_id="tester", observation=observation(4, **obs)
    )
    return policy.gateway.user_prompts()[-1], req.metadata  # type: ignore[attr-defined]


def test_a_custom_store_plugged_into_the_workflow_policy_feeds_its_prompt(tmp_path: Path) -> None:
    """agent.py 599d43d3: the memories shown are what the agent's memory backend returns for
    the query (Mem0/Qdrant or the artifact memory): any MemoryStore plugs in here."""
    store = RecordingStore()
    assert isinstance(store, MemoryStore)
    spec = agent(tmp_path, rag={"enabled": True, "limit": 4})
    user, _ = run(WorkflowPolicy(spec, ScriptedChat([act("noop")]), memory=store), memory=MEMORY)
    assert "## Relevant memories\n- [t=99] vector: from the custom store" in user
    assert "weather artifact pays" not in user
    assert store.queries == [("Which artifact pays for weather?", 4)]  # rag.limit is k


def test_a_store_factory_gets_the_agent_id(tmp_path: Path) -> None:
    """memory.py 599d43d3: memories are per agent (every call names the agent)."""
    asked: list[str] = []
    store = RecordingStore()

    def per_agent(agent_id: str) -> RecordingStore:
        asked.append(agent_id)
        return store

    spec = agent(tmp_path, rag={"enabled": True})
    run(WorkflowPolicy(spec, ScriptedChat([act("noop")]), memory=per_agent))
    assert asked == ["tester"] and len(store.queries) == 1


def test_a_custom_store_plugged_into_the_cognitive_policy(tmp_path: Path) -> None:
    """The same protocol for the cognitive policy (ours: the original had one agent class)."""
    store = RecordingStore()
    gateway = ScriptedChat([LLMResponse(tool_calls=[ToolCall(id="c", name="noop")])])
    policy = SimpleCognitivePolicy(
        gateway,
        {"model": "m", "memory_query": "{agent_id} at {tick} with {balance}"},
        memory=store,
    )
    policy.decide(run_id="r", time_step=4, agent_id="tester", observation=observation(4))
    assert "- [t=99] vector: from the custom store" in gateway.user_prompts()[0]
    assert store.queries == [("tester at 4 with 100", 5)]  # the original's default limit, 5


def test_query_template_filled_from_the_context_is_the_query(tmp_path: Path) -> None:
    """agent.py 599d43d3: rag_context = query_template.format(tick=..., agent_id=...,
    balance=...); the memories shown are those for that query, not for the step prompt."""
    spec = agent(
        tmp_path,
        rag={"enabled": True, "limit": 1, "query_template": "who owes {agent_id} scrip?"},
    )
    store = RecordingStore()
    run(WorkflowPolicy(spec, ScriptedChat([act("noop")]), memory=store))
    assert store.queries == [("who owes tester scrip?", 1)]
    user, _ = run(WorkflowPolicy(spec, ScriptedChat([act("noop")])), memory=MEMORY)
    assert "- [t=3] note: beta owes me 7 scrip" in user and "weather artifact" not in user


def test_auto_inject_false_keeps_working_memory_out(tmp_path: Path) -> None:
    """agent.py 599d43d3: inject_working_memory = enabled and auto_inject."""
    wm = {"current_goal": "sell weather"}
    shown = agent(tmp_path / "1", working_memory={"enabled": True, "auto_inject": True})
    hidden = agent(tmp_path / "2", working_memory={"enabled": True, "auto_inject": False})
    user, _ = run(WorkflowPolicy(shown, ScriptedChat([act("noop")])), working_memory=wm)
    assert "## Working memory\nCurrent goal: sell weather" in user
    user, _ = run(WorkflowPolicy(hidden, ScriptedChat([act("noop")])), working_memory=wm)
    assert "Working memory" not in user and "sell weather" not in user


def test_include_in_rag_adds_working_memory_to_the_query(tmp_path: Path) -> None:
    """config_schema.py 599d43d3: include_in_rag "also include working memory in semantic
    search" (off by default)."""
    wm = {"lessons": ["beta pays late"]}
    for flag, expected in ((False, False), (True, True)):
        store = RecordingStore()
        spec = agent(
            tmp_path / str(flag),
            rag={"enabled": True},
            working_memory={"enabled": True, "include_in_rag": flag},
        )
        run(WorkflowPolicy(spec, ScriptedChat([act("noop")]), memory=store), working_memory=wm)
        assert ("beta pays late" in store.queries[0][0]) is expected


def test_warn_on_missing_is_a_recorded_note(tmp_path: Path) -> None:
    """config_schema.py 599d43d3: warn_on_missing logs a warning when the agent has no working
    memory; ours records it in the step's entry of the decision metadata (no crash)."""
    spec = agent(tmp_path, working_memory={"enabled": True, "warn_on_missing": True})
    _, meta = run(WorkflowPolicy(spec, ScriptedChat([act("noop")])), working_memory={})
    assert meta["steps"][0]["notes"] == ["working memory is empty"]
    assert meta["action_step"] == "act"
    quiet = agent(tmp_path / "q", working_memory={"enabled": True})
    _, meta = run(WorkflowPolicy(quiet, ScriptedChat([act("noop")])), working_memory={})
    assert "notes" not in meta["steps"][0]


def test_structured_format_shows_the_schema_fields() -> None:
    """agent.py 599d43d3 _format_working_memory: current goal, stage, completed, next steps,
    lessons and objectives as labelled lines, cut to max_size_bytes; free form: the JSON."""
    wm = {
        "current_goal": "Build price oracle",
        "progress": {"stage": "Implementation", "completed": ["design"], "next_steps": ["tests"]},
        "lessons": ["escrow first", "price low"],
        "strategic_objectives": ["pricing"],
    }
    assert format_working_memory(wm, 2000) == (
        "Current goal: Build price oracle\nStage: Implementation\nCompleted: design\n"
        "Next: tests\nLessons: escrow first; price low\nObjectives: pricing"
    )
    assert format_working_memory({"a": 1}, 2000, structured=False) == '{"a":1}'
    cut = format_working_memory(wm, 40)
    assert len(cut.encode()) <= 40 and cut.endswith("[…truncated]")
