"""Agent memory as the agent ecology has it: record_action / record_observation, search over all.

Original: agent_ecology 599d43d3 ``src/agents/memory.py`` (``record_action``,
``record_observation``, ``get_relevant_memories`` over the agent's whole history) and
``src/agents/agent.py`` (agent-level wrappers that hide the agent id); the design document
(seed 003, "Memory System") lists the agent wrappers ``agent.record_action(action_type, details,
success)`` and ``agent.record_observation(observation)``.
"""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any

from tests.support.scripted import ScriptedChat
from tests.workflow.wf_helpers import act, write_agent
from vivarium.memory import AgentMemory, LexicalMemory, MemoryStore, MemoryView, search_memories
from vivarium.types import ActionRequest
from vivarium.workflow import WorkflowPolicy, load_agent
from vivarium.worlds.ecology import EcologyWorld


def post(world: EcologyWorld, agent: str, t: int, text: str) -> None:
    world.apply(
        ActionRequest(
            run_id="r",
            time_step=t,
            agent_id=agent,
            action_name="post_message",
            arguments={"content": text},
        )
    )


def test_agent_wrappers_hide_the_agent_id_and_record_kinds() -> None:
    """memory.py 599d43d3: record_action(agent, type, details, success) stores an action memory
    (a failure said as such), record_observation(agent, text) an observation memory; the agent's
    wrappers take no agent id."""
    memory = AgentMemory("alice").at(4)
    memory.record_action("write_artifact", "notes (12 bytes)", True)
    memory.record_action("invoke_artifact", "calc.add: insufficient scrip", False)
    memory.record_observation("Read bulletin: the market opens at noon", time_step=5)
    assert memory.store.entries == [  # type: ignore[attr-defined]
        {"time_step": 4, "kind": "action", "text": "write_artifact: notes (12 bytes)"},
        {
            "time_step": 4,
            "kind": "action",
            "text": "invoke_artifact failed: calc.add: insufficient scrip",
        },
        {"time_step": 5, "kind": "observation", "text": "Read bulletin: the market opens at noon"},
    ]
    assert memory.relevant("when does the market open", 1)[0]["kind"] == "observation"
    assert isinstance(memory, MemoryStore)


def test_world_agent_memory_records_into_the_memory_artifact() -> None:
    """agent.py 599d43d3: agent.record_observation(text) goes to the agent's memory (artifact
    backed: ``<agent>_memory``); it is found by retrieval afterwards."""
    world = EcologyWorld(["alice", "bob"])
    world.agent_memory("alice", time_step=2).record_observation("bob sells weather forecasts")
    assert world.memory_entries("alice") == [
        {"time_step": 2, "kind": "observation", "text": "bob sells weather forecasts"}
    ]
    assert world.memory_entries("bob") == []
    assert world.search_memory("alice", "weather", 3)[0]["text"] == "bob sells weather forecasts"
    found = world.observe("alice", 3)["memory"].search("forecast weather", 2)
    assert found[0]["kind"] == "observation"


def test_retrieval_sees_every_memory_not_only_the_observed_ones() -> None:
    """memory.py 599d43d3 get_relevant_memories searches the agent's whole history; here the
    observation still shows only the last ``observed_memories`` entries (small, however long
    the history), and its memory's ``search`` ranks all of them."""
    world = EcologyWorld(["alice"], observed_memories=3, memory_limit=200)
    post(world, "alice", 0, "the zebra artifact pays well")
    for t in range(1, 30):
        post(world, "alice", t, f"routine note {t}")
    obs = world.observe("alice", 30)
    assert len(obs["memory"]) == 3 and obs["memory"].total == 30
    assert all("zebra" not in e["text"] for e in obs["memory"])
    assert obs["memory"].search("zebra", 2) == [
        {"time_step": 0, "kind": "message", "text": "the zebra artifact pays well"}
    ]


def test_an_observation_searches_the_memory_as_it_was_when_observed() -> None:
    """Determinism (ours): an entry recorded after the observation (another agent paying this
    one while it decides) is not found through that observation; a later one sees it."""
    world = EcologyWorld(["alice"], observed_memories=2)
    post(world, "alice", 0, "apples")
    before = world.observe("alice", 1)
    post(world, "alice", 1, "more apples")
    assert [e["text"] for e in before["memory"].search("apples", 5)] == ["apples"]
    after = world.observe("alice", 2)
    assert {e["text"] for e in after["memory"].search("apples", 5)} == {"apples", "more apples"}


def test_the_world_index_drops_what_the_memory_drops() -> None:
    """The memory artifact keeps ``memory_limit`` entries, oldest dropped (599d43d3 memory.py
    trims history to its max); search never returns a dropped entry."""
    world = EcologyWorld(["alice"], memory_limit=3)
    world.observe("alice", 0)  # builds the index, which then follows every entry
    for t, word in enumerate(["kiwi", "plum", "fig", "pear"]):
        post(world, "alice", t, word)
    assert [e["text"] for e in world.memory_entries("alice")] == ["plum", "fig", "pear"]
    assert world.search_memory("alice", "kiwi", 3) == []
    restored = EcologyWorld(["alice"], memory_limit=3)
    restored.restore(world.snapshot())
    assert restored.search_memory("alice", "plum fig", 5) == world.search_memory(
        "alice", "plum fig", 5
    )


def test_a_memory_view_is_plain_data() -> None:
    """Observations are JSON-like data (ours): the view is the list of recent entries to JSON,
    ==, copies and pickles; only it can search."""
    view = MemoryView([{"time_step": 1, "kind": "note", "text": "x"}], search=lambda q, k: [])
    plain = [{"time_step": 1, "kind": "note", "text": "x"}]
    assert view == plain and json.loads(json.dumps(view)) == plain
    for copied in (copy.copy(view), copy.deepcopy(view), pickle.loads(pickle.dumps(view))):
        assert copied == plain and type(copied) is list


def test_search_memories_prefers_a_plugged_store() -> None:
    """The MemoryStore protocol is what a policy searches (ours, after memory.py's pluggable
    backends: Mem0/Qdrant or the artifact memory)."""

    class Fixed:
        def add(self, entry: Any) -> None:
            raise AssertionError("policies only search")

        def search(self, query: str, k: int) -> list[dict[str, Any]]:
            return [{"time_step": 9, "kind": "vector", "text": f"hit for {query}"}][:k]

    observed = [{"time_step": 1, "kind": "note", "text": "hello"}]
    assert search_memories("q", 1, store=Fixed(), observed=observed)[0]["kind"] == "vector"
    assert search_memories("hello", 1, observed=observed) == observed
    view = MemoryView(observed, search=LexicalMemory([{"time_step": 0, "text": "hello"}]).search)
    assert search_memories("hello", 1, observed=view)[0]["time_step"] == 0


def test_the_workflow_prompt_retrieves_from_all_memories(tmp_path: Path) -> None:
    """agent.py 599d43d3 build_prompt: memory.get_relevant_memories(agent, rag_context, limit)
    over every memory of the agent, not only the last ``observed_memories`` of the observation."""
    world = EcologyWorld(["tester"], observed_memories=2)
    post(world, "tester", 0, "the zebra artifact pays well")
    for t in range(1, 12):
        post(world, "tester", t, f"routine note {t}")
    data = {
        "id": "tester",
        "rag": {"enabled": True, "limit": 1, "query_template": "which artifact pays, zebra?"},
        "workflow": {"states": ["a"], "steps": [{"name": "act", "prompt": "Act."}]},
    }
    spec = load_agent(write_agent(tmp_path / "agent", data))
    gateway = ScriptedChat([act("noop")])
    observed = world.observe("tester", 12)
    WorkflowPolicy(spec, gateway).decide(
        run_id="r", time_step=12, agent_id="tester", observation=observed
    )
    assert "- [t=0] message: the zebra artifact pays well" in gateway.user_prompts()[0]
