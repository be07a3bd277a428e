"""Agent memory: entries ``{time_step, kind, text}`` and how a policy finds the relevant ones.

``LexicalMemory`` is the offline default: BM25 over lowercase word tokens, no network, no model,
and the same answer for the same entries and query on every machine (ties go to the most recent
entry, then to the text in order). It is enough for a few hundred entries per agent.

Swapping in a vector database: anything with ``add(entry)`` and ``search(query, k)`` is a
``MemoryStore``. A wrapper around e.g. a Chroma or Qdrant collection embeds ``entry["text"]`` in
``add`` and returns the stored entries of the ``k`` nearest neighbours in ``search``; give it to the
policy instead of ``LexicalMemory``. Keep in mind that remote embeddings are neither free nor
guaranteed reproducible: record or cache them if runs must replay exactly.

Where memories come from. The ecology world records an agent's entries itself (its actions,
messages, scrip received) and keeps a ``LexicalMemory`` index of each agent's entries; an
observation's ``memory`` is a ``MemoryView``: the recent entries as a plain list (what prompts
and JSON see), whose ``search`` ranks *all* of the agent's entries, as the index stood when the
observation was made. ``AgentMemory`` is the agent-level API of the agent ecology
(``record_action``, ``record_observation``, ``relevant``) over any ``MemoryStore``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, runtime_checkable

_WORD = re.compile(r"[^\W_]+")  # letters and digits: weather_model -> weather, model


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens: runs of letters and digits in any script (``_`` splits words)."""
    return _WORD.findall(text.lower())


def memory_entry(time_step: int, kind: str, text: str) -> dict[str, Any]:
    """An entry with its keys in the one order used everywhere (observations, snapshots)."""
    return {"time_step": int(time_step), "kind": str(kind), "text": str(text)}


@runtime_checkable
class MemoryStore(Protocol):
    """Where a policy keeps memories: add entries, get back the ``k`` most relevant to a query."""

    def add(self, entry: Mapping[str, Any]) -> None:
        """Keep ``entry`` (a mapping with ``time_step``, ``kind`` and ``text``)."""

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        """The (at most) ``k`` stored entries most relevant to ``query``, best first."""


@runtime_checkable
class SearchableMemory(Protocol):
    """An observation's memory that searches itself (``MemoryView``, or a world's own)."""

    def search(self, query: str, k: int) -> list[Mapping[str, Any]]:
        """The (at most) ``k`` entries most relevant to ``query``, best first."""


class LexicalMemory:
    """BM25 ranking over lowercase word tokens; deterministic, offline, incremental.

    A query with no word tokens returns the ``k`` most recent entries; otherwise only entries
    sharing a token with the query are returned, best first, ties broken by the later time step,
    then the text, then the later insertion.

    Args:
        entries: Entries to start with, oldest first.
        limit: The most entries kept (the oldest are dropped); None keeps every entry.
        k1: BM25's term-frequency saturation.
        b: BM25's length normalisation (0: none, 1: full).

    Raises:
        ValueError: ``limit`` is negative.
    """

    def __init__(
        self,
        entries: Iterable[Mapping[str, Any]] = (),
        *,
        limit: int | None = None,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self.limit, self.k1, self.b = limit, k1, b
        self._entries: list[dict[str, Any]] = []
        self._terms: list[Counter[str]] = []
        self._lengths: list[int] = []
        self._doc_freq: Counter[str] = Counter()
        self._total_length = 0
        self._added = 0  # insertion counter: recency among entries of the same step
        self._order: list[int] = []
        for entry in entries:
            self.add(entry)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> list[dict[str, Any]]:
        """Copies of the entries, oldest first."""
        return [dict(e) for e in self._entries]

    def add(self, entry: Mapping[str, Any]) -> None:
        """Index ``entry`` (``kind`` defaults to ``"note"``), dropping the oldest past ``limit``."""
        stored = memory_entry(entry["time_step"], entry.get("kind", "note"), entry["text"])
        terms = Counter(tokenize(stored["text"]))
        self._entries.append(stored)
        self._terms.append(terms)
        self._lengths.append(sum(terms.values()))
        self._doc_freq.update(terms.keys())
        self._total_length += self._lengths[-1]
        self._order.append(self._added)
        self._added += 1
        if self.limit is not None:
            while len(self._entries) > self.limit:
                self._drop_oldest()

    def _drop_oldest(self) -> None:
        self._entries.pop(0)
        terms = self._terms.pop(0)
        self._total_length -= self._lengths.pop(0)
        self._order.pop(0)
        self._doc_freq.subtract(terms.keys())
        for term in terms:
            if self._doc_freq[term] <= 0:
                del self._doc_freq[term]

    @property
    def added(self) -> int:
        """How many entries were ever added (dropped ones included): a position in the history."""
        return self._added

    def search(self, query: str, k: int, *, before: int | None = None) -> list[dict[str, Any]]:
        """The ``k`` entries that best match ``query`` (copies), best first.

        Args:
            query: Free text; only its word tokens count.
            k: How many entries at most.
            before: Only entries added before this position (``added`` at some earlier
                moment): the memory as it stood then, ranked as it would have been then.

        Returns:
            Entries sharing a word with the query, or the ``k`` most recent ones when the query
            has no word at all; empty when nothing matches.
        """
        if before is not None and before < self._added:
            kept = [e for e, o in zip(self._entries, self._order, strict=True) if o < before]
            return LexicalMemory(kept, k1=self.k1, b=self.b).search(query, k)
        if k <= 0 or not self._entries:
            return []
        words = list(dict.fromkeys(tokenize(query)))  # unique, in query order: a fixed sum order
        if not words:
            recent = sorted(range(len(self._entries)), key=self._recency, reverse=True)
            return [dict(self._entries[i]) for i in recent[:k]]
        n = len(self._entries)
        avg_length = self._total_length / n if self._total_length else 1.0
        idf = {
            w: math.log(1.0 + (n - self._doc_freq[w] + 0.5) / (self._doc_freq[w] + 0.5))
            for w in words
            if self._doc_freq.get(w, 0) > 0
        }
        if not idf:
            return []
        scored: list[tuple[float, int]] = []
        for i, terms in enumerate(self._terms):
            score = 0.0
            norm = self.k1 * (1.0 - self.b + self.b * self._lengths[i] / avg_length)
            for w in words:
                tf = terms.get(w, 0)
                if tf:
                    score += idf[w] * tf * (self.k1 + 1.0) / (tf + norm)
            if score > 0.0:
                scored.append((score, i))
        scored.sort(key=lambda si: self._rank_key(si[0], si[1]))
        return [dict(self._entries[i]) for _, i in scored[:k]]

    def _recency(self, i: int) -> tuple[int, int]:
        return (self._entries[i]["time_step"], self._order[i])

    def _rank_key(self, score: float, i: int) -> tuple[float, int, str, int]:
        # Best score first; then the latest step; then text; then the later insertion.
        entry = self._entries[i]
        return (-score, -entry["time_step"], entry["text"], -self._order[i])


def relevant_memories(
    entries: Iterable[Mapping[str, Any]], query: str, k: int
) -> list[dict[str, Any]]:
    """The ``k`` entries most relevant to ``query`` (BM25), for policies building a prompt."""
    return LexicalMemory(entries).search(query, k)


class MemoryView(list):  # type: ignore[type-arg]
    """An observation's ``memory``: the recent entries (a plain list) plus search over them all.

    To JSON, ``==``, ``copy`` and pickling it is the list of recent entries, so observations
    stay data. ``search`` asks the world's index of every entry the agent has (not only the
    recent ones), frozen at the moment of the observation: an entry recorded later (another
    agent paying this one while it thinks) is not found, so the same observation always gives
    the same answer. Without an index (a view built from a list) it searches the list itself.
    ``total`` is how many entries the agent has in all.
    """

    def __init__(
        self,
        recent: Iterable[Mapping[str, Any]] = (),
        *,
        search: Callable[[str, int], list[dict[str, Any]]] | None = None,
        total: int | None = None,
    ) -> None:
        super().__init__(dict(e) for e in recent)
        self._search = search
        self.total = len(self) if total is None else total

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        """The ``k`` entries of the whole memory most relevant to ``query``, best first."""
        if self._search is not None:
            return self._search(query, k)
        return relevant_memories(self, query, k)

    def add(self, entry: Mapping[str, Any]) -> None:
        """Refused: an observation is read-only (the world records memories)."""
        raise TypeError("an observation's memory is read-only; the world records entries")

    def __reduce__(self) -> Any:
        """Pickled (and copied) as the plain list of recent entries: observations are data."""
        return (list, (list(self),))

    def __copy__(self) -> list[dict[str, Any]]:
        """A shallow copy is the plain list (the index belongs to the world)."""
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[dict[str, Any]]:
        """A deep copy is a plain list of copied entries."""
        return [dict(e) for e in self]


def frozen_search(
    index: LexicalMemory, lock: AbstractContextManager[Any] | None = None
) -> Callable[[str, int], list[dict[str, Any]]]:
    """``index.search`` limited to the entries the index holds now (later additions unseen).

    ``lock``: held while searching, when the index's owner may add to it from another thread
    (the ecology world's lock).
    """
    mark = index.added

    def search(query: str, k: int) -> list[dict[str, Any]]:
        with lock or nullcontext():
            return index.search(query, k, before=mark)

    return search


class AgentMemory:
    """One agent's memory: the agent ecology's agent-level API, with the agent id bound.

    ``record_action(action_type, details, success)`` and ``record_observation(text)`` add
    entries; ``relevant(query, k)`` returns the most relevant ones, over every entry the store
    holds. Any ``MemoryStore`` works underneath (``LexicalMemory`` by default); an entry is
    ``{time_step, kind, text}``: kind ``action`` or ``observation`` here.

    Args:
        agent_id: Whose memory it is (kept out of every call, as the original's wrappers do).
        store: Where entries go; a fresh ``LexicalMemory`` when None.
        time_step: The step new entries are stamped with until ``at`` moves it.
    """

    def __init__(self, agent_id: str, store: MemoryStore | None = None, time_step: int = 0):
        self.agent_id = agent_id
        self.store: MemoryStore = store if store is not None else LexicalMemory()
        self.time_step = int(time_step)

    def at(self, time_step: int) -> AgentMemory:
        """Stamp the next entries with ``time_step``; returns self, for chaining."""
        self.time_step = int(time_step)
        return self

    def add(self, text: str, kind: str = "note", time_step: int | None = None) -> dict[str, Any]:
        """Add one entry and return it."""
        step = self.time_step if time_step is None else time_step
        entry = memory_entry(step, kind, text)
        self.store.add(entry)
        return entry

    def record_action(
        self, action_type: str, details: str, success: bool, time_step: int | None = None
    ) -> dict[str, Any]:
        """Remember an action and its outcome (``write_artifact: ...`` or ``... failed: ...``)."""
        text = f"{action_type}: {details}" if success else f"{action_type} failed: {details}"
        return self.add(text, "action", time_step)

    def record_observation(self, observation: str, time_step: int | None = None) -> dict[str, Any]:
        """Remember something the agent saw, as free text."""
        return self.add(str(observation), "observation", time_step)

    def relevant(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """The ``k`` entries most relevant to ``query`` (5, the agent ecology's default limit)."""
        return self.store.search(query, k)

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        """``relevant``, under the ``MemoryStore`` name."""
        return self.store.search(query, k)


StoreSource = MemoryStore | Callable[[str], MemoryStore]


def store_for(source: StoreSource | None, agent_id: str) -> MemoryStore | None:
    """The store of ``agent_id``: ``source`` itself, or what a factory makes for that agent.

    A policy given one ``MemoryStore`` searches it for every agent it plays; give a factory
    (``agent_id -> MemoryStore``) when each agent needs its own. A factory is called on every
    decision: caching (one store per agent) is the factory's choice.
    """
    if source is None:
        return None
    if isinstance(source, MemoryStore):
        return source
    return source(agent_id)


def search_memories(
    query: str,
    k: int,
    *,
    store: MemoryStore | None = None,
    observed: Any = None,
) -> list[dict[str, Any]]:
    """The ``k`` memories most relevant to ``query``, best first, from the best source there is.

    A plugged ``store`` first; else the observation's memory when it can search (a
    ``MemoryView``: all of the agent's entries); else BM25 over the observed entries (those with
    ``time_step`` and ``text``).
    """
    if k <= 0:
        return []
    if store is not None:
        return [dict(e) for e in store.search(query, k)]
    if isinstance(observed, SearchableMemory):  # declared, checked structurally
        return [dict(e) for e in observed.search(query, k)]
    entries = [
        e for e in observed or () if isinstance(e, Mapping) and "text" in e and "time_step" in e
    ]
    return relevant_memories(entries, query, k)
