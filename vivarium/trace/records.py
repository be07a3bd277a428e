"""What one step leaves behind, as plain column lists: cheap to build, encode, hash and insert.

Each action column is stored as one JSON array (or NULL when all of it is null). The state
hash covers exactly those stored texts, so ``vvm validate`` can recompute it from the file.

``fallback`` marks the decisions that produced no usable action (an unusable model reply, a
policy error, an outage recorded under ``on_llm_error="fallback"``): 1 for those, 0 for the
others, and NULL for a step without any, which is also what keeps the state hash of such a step
what it was before the column existed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from vivarium.trace.schema import STORED_DECISIONS

# The decision columns in the steps table's order (the order ``StepRecord.encode`` returns).
ACTION_COLUMNS = tuple(column.name for column in STORED_DECISIONS)

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_column(values: list[Any]) -> str | None:
    """A column as a compact JSON array, or None when every value is None."""
    if values.count(None) == len(values):
        return None
    return _dumps(values)


@dataclass(slots=True)
class StepRecord:
    """All rows of one step. Action columns are parallel lists in commit (seq) order."""

    step: int
    agent_idx: list[int] = field(default_factory=list)
    action: list[str] = field(default_factory=list)
    arguments: list[str | None] = field(default_factory=list)
    reasoning: list[str | None] = field(default_factory=list)
    metadata: list[str | None] = field(default_factory=list)
    success: list[int] = field(default_factory=list)
    result: list[str | None] = field(default_factory=list)
    error: list[str | None] = field(default_factory=list)
    fallback: list[int] = field(default_factory=list)
    # (seq, author_id, channel, content)
    messages: list[tuple[int, str, str, str]] = field(default_factory=list)
    # (agent_idx, attempt, model, request_hash, prompt_tokens, completion_tokens, cost,
    #  latency_ms, cache_hit, finish_reason, error)
    llm_calls: list[tuple[Any, ...]] = field(default_factory=list)
    # (agent_idx, from_state, to_state, trigger)
    transitions: list[tuple[Any, ...]] = field(default_factory=list)
    world_digest: str = ""
    state_hash: str = ""
    wall_time: str | None = None
    clock: float | None = None
    encoded: tuple[str | None, ...] = ()
    n_actions: int = 0

    def add_action(
        self,
        agent_idx: int,
        action: str,
        arguments: str | None,
        reasoning: str | None,
        metadata: str | None,
        success: bool,
        result: str | None,
        error: str | None,
        fallback: bool = False,
    ) -> None:
        """Append one decision (in commit order); the texts are JSON or None."""
        self.agent_idx.append(agent_idx)
        self.action.append(action)
        self.arguments.append(arguments)
        self.reasoning.append(reasoning)
        self.metadata.append(metadata)
        self.success.append(1 if success else 0)
        self.result.append(result)
        self.error.append(error)
        self.fallback.append(1 if fallback else 0)
        self.n_actions += 1

    def action_columns(self) -> tuple[list[Any], ...]:
        """The decision columns as lists, in the steps table's order (``ACTION_COLUMNS``)."""
        return (
            self.agent_idx,
            self.action,
            self.arguments,
            self.reasoning,
            self.metadata,
            self.success,
            self.result,
            self.error,
            self.fallback,
        )

    def encode(self) -> tuple[str | None, ...]:
        """The stored JSON text of every action column (computed once, or set by a batch path)."""
        if not self.encoded:
            *columns, fallback = self.action_columns()
            self.encoded = (
                *(encode_column(col) for col in columns),
                encode_fallback(fallback),
            )
        return self.encoded


def encode_fallback(flags: list[int]) -> str | None:
    """The ``fallback`` column: NULL when no decision of the step fell back."""
    return _dumps(flags) if any(flags) else None


def _field(value: Any) -> bytes:
    return b"\x00" if value is None else str(value).encode()


def chain_hash(
    previous: str,
    step: int,
    world_digest: str,
    n_actions: int,
    encoded: tuple[str | None, ...],
    messages: list[tuple[Any, ...]],
    transitions: list[tuple[Any, ...]],
    clock: float | None = None,
) -> str:
    """State hash of a step: SHA-256 over the previous hash, the world digest and every row.

    A changed, dropped or reordered row anywhere breaks the chain from that step on.
    """
    h = hashlib.sha256()
    h.update(f"{previous}\x1d{step}\x1d{world_digest}\x1d{n_actions}".encode())
    if clock is not None:
        h.update(f"\x1a{clock!r}".encode())

    *columns, fallback = encoded if len(encoded) == len(ACTION_COLUMNS) else (*encoded, None)
    for text in columns:
        h.update(b"\x1d")
        h.update(_field(text))
    if fallback is not None:  # hashed only when present: older steps keep their hashes
        h.update(b"\x1f")
        h.update(_field(fallback))
    # A transition's routine flag (its 5th field) is hashed only when set, so transitions
    # recorded before the flag existed keep their hashes.
    transitions = [row[:4] if len(row) > 4 and not row[4] else row for row in transitions]
    for group, mark in ((messages, b"\x1c"), (transitions, b"\x1b")):
        for row in group:
            h.update(mark)
            h.update(b"\x1e".join(_field(v) for v in row))
    return h.hexdigest()


def hash_record(previous: str, record: StepRecord) -> str:
    """The state hash of ``record``, chained on ``previous`` (see ``chain_hash``)."""
    return chain_hash(
        previous,
        record.step,
        record.world_digest,
        record.n_actions,
        record.encode(),
        record.messages,
        record.transitions,
        record.clock,
    )


GENESIS_HASH = "0" * 64
