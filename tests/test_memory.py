"""Agent memory: BM25 ranking, deterministic ties, bounded stores, the MemoryStore protocol."""

from __future__ import annotations

from typing import Any

import pytest

from vivarium.memory import LexicalMemory, MemoryStore, relevant_memories, tokenize

ENTRIES = [
    {"time_step": 0, "kind": "action", "text": "posted a greeting to the channel"},
    {"time_step": 1, "kind": "action", "text": "wrote artifact weather_model (120 bytes)"},
    {"time_step": 2, "kind": "event", "text": "received 5 scrip from agent_002"},
    {
        "time_step": 3,
        "kind": "action",
        "text": "invoke_artifact calc.add failed: insufficient scrip",
    },
    {"time_step": 4, "kind": "message", "text": "does anyone sell a weather forecast?"},
    {"time_step": 5, "kind": "action", "text": "read notes (12 bytes)"},
]


def test_tokenize_lowercases_words() -> None:
    assert tokenize("Invoke calc.ADD: +5 scrip!") == ["invoke", "calc", "add", "5", "scrip"]
    assert tokenize("") == []


def test_query_retrieves_the_relevant_entry_first() -> None:
    memory = LexicalMemory(ENTRIES)
    top = memory.search("why did my calc invoke fail", k=3)
    assert top[0]["text"].startswith("invoke_artifact calc.add failed")
    weather = memory.search("weather", k=2)
    assert {e["time_step"] for e in weather} == {1, 4}
    assert memory.search("scrip", k=1)[0]["time_step"] in (2, 3)


def test_rarer_terms_weigh_more() -> None:
    memory = LexicalMemory(
        [
            {"time_step": 0, "kind": "a", "text": "scrip scrip market"},
            {"time_step": 1, "kind": "a", "text": "scrip auction"},
            {"time_step": 2, "kind": "a", "text": "scrip"},
        ]
    )
    assert memory.search("auction scrip", k=1)[0]["text"] == "scrip auction"


def test_only_matching_entries_are_returned() -> None:
    memory = LexicalMemory(ENTRIES)
    assert memory.search("zebra", k=5) == []
    assert len(memory.search("weather", k=10)) == 2


def test_ties_go_to_recency_then_text() -> None:
    memory = LexicalMemory(
        [
            {"time_step": 1, "kind": "a", "text": "beta token"},
            {"time_step": 3, "kind": "a", "text": "token beta"},
            {"time_step": 3, "kind": "a", "text": "alpha token"},
            {"time_step": 2, "kind": "a", "text": "gamma token"},
        ]
    )
    ranked = [e["text"] for e in memory.search("token", k=10)]
    # Equal-length entries score alike: latest step first, then text in order.
    assert ranked == ["alpha token", "token beta", "gamma token", "beta token"]


def test_search_is_deterministic_and_independent_of_instances() -> None:
    queries = ["scrip", "weather forecast", "calc add failed", "greeting channel notes"]
    first = LexicalMemory(ENTRIES)
    second = LexicalMemory()
    for entry in ENTRIES:
        second.add(entry)
    for q in queries:
        assert first.search(q, 4) == second.search(q, 4) == first.search(q, 4)


def test_empty_query_returns_most_recent() -> None:
    memory = LexicalMemory(ENTRIES)
    assert [e["time_step"] for e in memory.search("  ?! ", k=2)] == [5, 4]
    assert memory.search("scrip", k=0) == []
    assert LexicalMemory().search("scrip", k=3) == []


def test_limit_drops_oldest_and_matches_a_fresh_index() -> None:
    bounded = LexicalMemory(limit=3)
    for entry in ENTRIES:
        bounded.add(entry)
    assert [e["time_step"] for e in bounded.entries] == [3, 4, 5]
    fresh = LexicalMemory(ENTRIES[3:])
    for q in ["scrip", "weather", "notes bytes", "greeting"]:
        assert bounded.search(q, 5) == fresh.search(q, 5)
    assert bounded.search("greeting", 5) == []


def test_search_returns_copies() -> None:
    memory = LexicalMemory(ENTRIES)
    memory.search("weather", 1)[0]["text"] = "changed"
    assert memory.search("weather", 1)[0]["text"] != "changed"


def test_relevant_memories_helper() -> None:
    top = relevant_memories(ENTRIES, "weather forecast", 1)
    assert top == [{"time_step": 4, "kind": "message", "text": ENTRIES[4]["text"]}]


def test_any_object_with_add_and_search_is_a_memory_store() -> None:
    class ListStore:
        def __init__(self) -> None:
            self.items: list[dict[str, Any]] = []

        def add(self, entry: dict[str, Any]) -> None:
            self.items.append(dict(entry))

        def search(self, query: str, k: int) -> list[dict[str, Any]]:
            return [e for e in self.items if query in e["text"]][:k]

    assert isinstance(LexicalMemory(), MemoryStore)
    assert isinstance(ListStore(), MemoryStore)
    assert not isinstance(object(), MemoryStore)


def test_negative_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="limit"):
        LexicalMemory(limit=-1)
