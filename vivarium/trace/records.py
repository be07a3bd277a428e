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


# The string encoder ``json.dumps(..., ensure_ascii=False)`` uses (C when available).
_quote = json.encoder.encode_basestring
# ``vivarium.seeding.canonical_json``'s settings, built once instead of per call.
_canonical = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
).encode


_FLAT_MAX = 4  # keys of a mapping written directly (sorted by hand) by ``encode_object``
_int_text = int.__repr__


def encode_object(value: dict[str, Any] | None) -> str | None:
    """A decision's arguments, metadata or result as stored: canonical JSON, or None if empty.

    The same text as ``canonical_json`` (sorted keys, no spaces, ``default=str``). A small flat
    mapping of strings to strings and integers, the commonest arguments (``{"to": "agent_7"}``,
    ``{"cell": 37}``), is written directly, half the encoder's cost: this runs for every
    decision of a run. (``type(...) is int`` leaves out ``bool``, which JSON writes as
    ``true``; an ``int`` is written as JSON writes it, ``int.__repr__``.)
    """
    if not value:
        return None
    if type(value) is dict and len(value) <= _FLAT_MAX:
        parts = []
        for key in sorted(value) if len(value) > 1 else value:
            item = value[key]
            kind = type(item)
            if type(key) is not str or (kind is not str and kind is not int):
                return _canonical(value)
            parts.append(_quote(key) + ":" + (_quote(item) if kind is str else _int_text(item)))
        return "{" + ",".join(parts) + "}"
    return _canonical(value)


def encode_column(values: list[Any]) -> str | None:
    """A column as a compact JSON array, or None when every value is None."""
    if values.count(None) == len(values):
        return None
    return _dumps(values)


# Column name -> (the text last read, its values): rows are only ever read from these lists.
_DECODED: dict[str, tuple[str, list[Any]]] = {}


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
    # (agent_idx, from_state, to_state, trigger, routine, reason)
    transitions: list[tuple[Any, ...]] = field(default_factory=list)
    world_digest: str = ""
    state_hash: str = ""
    wall_time: str | None = None
    clock: float | None = None
    encoded: tuple[str | None, ...] = ()
    n_actions: int = 0
    # Reporter rows (see ``vivarium.engine.reporters``): (step, reporter, kind, value) and
    # (step, reporter, dtype, data); step -1 is the state before step 0. Not in the state hash.
    model_vars: list[tuple[int, str, str, Any]] = field(default_factory=list)
    agent_vars: list[tuple[int, str, str, bytes]] = field(default_factory=list)

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

    def decision_columns(self) -> list[list[Any]]:
        """One list per decision column (``ACTION_COLUMNS`` order), one value per decision.

        The lists as the per-agent paths filled them, or, for a step the batch path recorded as
        stored JSON arrays (``encoded``), those arrays read back (a null column as nulls, the
        ``fallback`` column as zeros).
        """
        if self.agent_idx or not self.encoded:
            return list(self.action_columns())
        n = self.n_actions
        columns = []
        for name, text in zip(ACTION_COLUMNS, self.encoded, strict=False):
            if text is None:
                columns.append([0] * n if name == "fallback" else [None] * n)
                continue
            # A batch path often hands the same text every step (every agent succeeded, the
            # same metadata): read once, and kept with the very text it was read from.
            last = _DECODED.get(name)
            if last is None or last[0] is not text:
                last = _DECODED[name] = (text, json.loads(text))
            columns.append(last[1])
        if len(columns) < len(ACTION_COLUMNS):  # a batch path that gave no fallback column
            columns.append([0] * n)
        return columns

    def encode(self) -> tuple[str | None, ...]:
        """The stored JSON text of every action column (computed once, or set by a batch path)."""
        if not self.encoded:
            *columns, fallback = self.action_columns()
            self.encoded = (
                *(encode_column(col) for col in columns),
                encode_fallback(fallback),
            )
        return self.encoded


def encode_model_value(value: Any) -> tuple[str, Any]:
    """A model reporter's value as stored: its kind and what SQLite holds.

    Numbers, booleans and strings are stored as themselves (numpy scalars too); anything else
    as compact JSON text (kind ``json``), None as NULL (kind ``null``).
    """
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()  # a numpy scalar
    if value is None:
        return "null", None
    if isinstance(value, bool):
        return "bool", int(value)
    if isinstance(value, int):
        return "int", value
    if isinstance(value, float):
        return "float", value
    if isinstance(value, str):
        return "text", value
    if hasattr(value, "tolist"):
        value = value.tolist()
    return "json", _dumps(value)


_PACKED = {"b": "|b1", "i": "<i8", "u": "<i8", "f": "<f8"}


def encode_agent_values(values: Any) -> tuple[str, bytes]:
    """One agent reporter's values at one step, packed: numpy bytes with their dtype, or JSON.

    Numbers become one little-endian array (``<f8``, ``<i8`` or ``|b1``): one ``tobytes`` per
    step and reporter, whatever the number of agents. Anything else is a JSON array.
    """
    import numpy as np

    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):  # ragged: not one array
        arr = None
    if arr is not None and arr.ndim == 1 and arr.dtype.kind in _PACKED:
        dtype = _PACKED[arr.dtype.kind]
        return dtype, arr.astype(dtype, copy=False).tobytes()
    items = values.tolist() if hasattr(values, "tolist") else list(values)
    items = [v.item() if hasattr(v, "item") and getattr(v, "ndim", 1) == 0 else v for v in items]
    return "json", _dumps(items).encode()


def decode_agent_values(dtype: str, data: bytes) -> Any:
    """The values ``encode_agent_values`` packed: a numpy array, or a list read from JSON."""
    import numpy as np

    if dtype == "json":
        return json.loads(data)
    return np.frombuffer(data, dtype=np.dtype(dtype))


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
    parts = [f"{previous}\x1d{step}\x1d{world_digest}\x1d{n_actions}".encode()]
    if clock is not None:
        parts.append(f"\x1a{clock!r}".encode())

    *columns, fallback = encoded if len(encoded) == len(ACTION_COLUMNS) else (*encoded, None)
    for text in columns:
        parts.append(b"\x1d")
        parts.append(_field(text))
    if fallback is not None:  # hashed only when present: older steps keep their hashes
        parts.append(b"\x1f")
        parts.append(_field(fallback))
    # A transition's routine flag (its 5th field) is hashed only when set, so transitions
    # recorded before the flag existed keep their hashes.
    # A transition's reason (its 6th field) is not hashed: the state is what moved, not why.
    transitions = [row[:4] if len(row) > 4 and not row[4] else row[:5] for row in transitions]
    for group, mark in ((messages, b"\x1c"), (transitions, b"\x1b")):
        for row in group:
            parts.append(mark)
            parts.append(b"\x1e".join(_field(v) for v in row))
    # One update of the joined bytes, not one per part: hashing a large part lets go of the
    # GIL, and while the trace writer thread holds it each of a step's dozen parts waited for
    # it (measured: the random run of 1,000 x 1,000 about 0.1 s faster).
    return hashlib.sha256(b"".join(parts)).hexdigest()


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
