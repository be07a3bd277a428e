"""Agent memory: entries ``{time_step, kind, text}`` and how a policy finds the relevant ones.

``LexicalMemory`` is the offline default: BM25 over lowercase word tokens, no network, no model,
and the same answer for the same entries and query on every machine (ties go to the most recent
entry, then to the text in order). It is enough for a few hundred entries per agent.

Swapping in a vector database: anything with ``add(entry)`` and ``search(query, k)`` is a
``MemoryStore``. A wrapper around e.g. a Chroma or Qdrant collection embeds ``entry["text"]`` in
``add`` and returns the stored entries of the ``k`` nearest neighbours in ``search``; give it to the
policy instead of ``LexicalMemory``. Keep in mind that remote embeddings are neither free nor
guaranteed reproducible: record or cache them if runs must replay exactly.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
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

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        """The ``k`` entries that best match ``query`` (copies), best first.

        Args:
            query: Free text; only its word tokens count.
            k: How many entries at most.

        Returns:
            Entries sharing a word with the query, or the ``k`` most recent ones when the query
            has no word at all; empty when nothing matches.
        """
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
