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
from vivarium.trace.values import (
    INT_MAX,
    INT_MIN,
    JSON_INT_MAX,
    UnrecordableValue,
    canonical,
    compact,
    plain,
    too_big,
)

# The decision columns in the steps table's order (the order ``StepRecord.encode`` returns).
ACTION_COLUMNS = tuple(column.name for column in STORED_DECISIONS)

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


# The string encoder ``json.dumps(..., ensure_ascii=False)`` uses (C when available).
_quote = json.encoder.encode_basestring


_FLAT_MAX = 4  # keys of a mapping written directly (sorted by hand) by ``encode_object``
_int_text = int.__repr__
_float_text = float.__repr__
_INF = float("inf")
_CONSTANTS = {True: "true", False: "false"}


def encode_object(value: dict[str, Any] | None) -> str | None:
    """A decision's arguments, metadata or result as stored: canonical JSON, or None if empty.

    Canonical JSON (sorted keys, no spaces) of the value as the world saw it
    (``vivarium.trace.values``: numpy scalars as their Python values, arrays as lists; a value
    JSON cannot hold faithfully is refused). A small flat mapping of strings to strings,
    64-bit integers, finite floats, booleans and None, the commonest arguments
    (``{"to": "agent_7"}``, ``{"cell": 37}``, ``{"price": 1.5}``), is written directly, in a
    fraction of the encoder's cost: this runs for every decision of a run. Each is written as
    JSON writes it: ``int.__repr__``, ``float.__repr__``, ``true``, ``null`` (``type(...) is
    int`` leaves out ``bool``; NaN and infinities take the encoder's path).

    Raises:
        UnrecordableValue: a part of the value cannot be recorded (its ``path`` names it).
    """
    if not value:
        return None
    if type(value) is dict and len(value) <= _FLAT_MAX:
        parts = []
        for key in value if len(value) == 1 else _sorted_keys(value):
            item = value[key]
            kind = type(item)
            if type(key) is not str:
                return canonical(value)  # refused, with the reason
            if kind is str:
                text = _quote(item)
            elif kind is int and INT_MIN <= item <= JSON_INT_MAX:
                text = _int_text(item)
            elif kind is float and -_INF < item < _INF:  # NaN compares false
                text = _float_text(item)
            elif kind is bool:
                text = _CONSTANTS[item]
            elif item is None:
                text = "null"
            else:
                return canonical(value)
            parts.append(_quote(key) + ":" + text)
        return "{" + ",".join(parts) + "}"
    return canonical(value)


def _sorted_keys(value: dict[Any, Any]) -> list[Any]:
    """The keys in JSON's order; keys of mixed types (refused by ``canonical``) as they are."""
    try:
        return sorted(value)
    except TypeError:
        return list(value)


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

    Numbers, booleans and strings are stored as themselves (numpy scalars as their Python
    values); anything else as compact JSON text (kind ``json``), None as NULL (kind ``null``).
    A float NaN is stored as SQLite stores it, NULL, with kind ``float``: read back as NaN
    (``vivarium.trace.reporter_frames``), not as a missing value.

    Raises:
        UnrecordableValue: the value cannot be recorded as it is (``vivarium.trace.values``).
    """
    value = plain(value)
    if value is None:
        return "null", None
    if isinstance(value, bool):
        return "bool", int(value)
    if isinstance(value, int):
        if value > INT_MAX:  # SQLite's INTEGER is signed
            raise too_big(value, "2**63")
        return "int", value
    if isinstance(value, float):
        return "float", value
    if isinstance(value, str):
        return "text", value
    return "json", compact(value)


_PACKED = {"b": "|b1", "i": "<i8", "u": "<i8", "f": "<f8"}


def encode_agent_values(values: Any) -> tuple[str, bytes]:
    """One agent reporter's values at one step, packed: numpy bytes with their dtype, or JSON.

    Numbers become one little-endian array (``<f8``, ``<i8`` or ``|b1``): one ``tobytes`` per
    step and reporter, whatever the number of agents. Anything else is a JSON array of the
    values as ``vivarium.trace.values`` records them. A list that mixes booleans with numbers is
    JSON too (an array would make ``True`` a ``1``).

    Raises:
        UnrecordableValue: a value cannot be recorded; ``path`` starts with its agent's index.
    """
    import numpy as np

    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):  # ragged: not one array
        arr = None
    if arr is not None and arr.ndim == 1 and arr.dtype.kind in _PACKED:
        kind = arr.dtype.kind
        if kind != "b" and not isinstance(values, np.ndarray):
            if kind == "f":
                _check_ints(values)  # [-1, 2**63] is a float array: 2**63 would be rounded
            if _has_bools(values):
                arr = None  # [True, 2]: kept as given, in JSON
        if kind == "u" and arr is not None and arr.size and arr.max() > INT_MAX:
            at = int(np.argmax(arr > INT_MAX))
            raise UnrecordableValue(too_big(int(arr[at]), "2**63").reason, path=(f"[{at}]",))
        if arr is not None:
            dtype = _PACKED[kind]
            return dtype, arr.astype(dtype, copy=False).tobytes()
    items = values.tolist() if hasattr(values, "tolist") else list(values)
    _check_ints(items)  # as a packed array would: a frame column holds 64-bit integers
    return "json", compact(items).encode()


def _has_bools(values: Any) -> bool:
    """Whether a sequence holds a Python or numpy boolean (types read in C, not per item in Python)."""
    import numpy as np

    kinds = set(map(type, values))
    return bool in kinds or np.bool_ in kinds


def _check_ints(values: Any) -> None:
    """Refuse a Python int of a list that an agent reporter's packed array cannot hold exactly.

    Raises:
        UnrecordableValue: names the agent's index (``path``).
    """
    if int not in set(map(type, values)):
        return
    for i, v in enumerate(values):
        if type(v) is int and not INT_MIN <= v <= INT_MAX:
            raise UnrecordableValue(too_big(v, "2**63").reason, path=(f"[{i}]",))


def check_messages(messages: list[tuple[Any, ...]], step: int) -> None:
    """Refuse a step's messages that the trace would not keep as given.

    A message row is ``(seq, author_id, channel, content)``, all text but the order: an integer
    content would come back as text, a numpy one as its raw bytes, a dict or None would fail the
    write far from its cause. One check of each row's types, per step.

    Raises:
        UnrecordableValue: names the message, its step and author, and what is wrong.
    """
    for row in messages:
        if len(row) == 4 and type(row[0]) is int and all(type(v) is str for v in row[1:]):
            continue  # the usual row, checked without a call
        _check_message(row, step)


def _check_message(row: tuple[Any, ...], step: int) -> None:
    if len(row) != 4:
        raise UnrecordableValue(
            f"a message row at step {step} has {len(row)} fields, not 4 "
            f"(seq, author_id, channel, content): {row!r:.100}"
        )
    seq, author, channel, content = row
    where = f"message {seq!r} at step {step} from {author!r}"
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise UnrecordableValue(f"its seq is {seq!r}, not an int", where=where)
    for name, value in (("author_id", author), ("channel", channel), ("content", content)):
        if not isinstance(value, str):
            kind = type(value).__name__
            raise UnrecordableValue(
                f"its {name} is {value!r:.60} ({kind}), not text; give str (JSON text for data)",
                where=where,
            )


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
    r"""State hash of a step: SHA-256 over the previous hash, the world digest and every row.

    A changed, dropped or reordered row anywhere breaks the chain from that step on. Every trace
    ever written records these hashes and ``vvm validate`` recomputes them, so the bytes hashed
    never change for rows that exist (``tests/trace/test_state_hash.py`` pins them). They are,
    joined, with ``GS`` = ``\x1d``, ``RS`` = ``\x1e`` and a null field as one ``\x00`` byte:

    - ``previous GS step GS world_digest GS n_actions`` (``previous`` is the step before's
      hash, ``GENESIS_HASH`` for step 0; numbers in decimal);
    - ``\x1a`` and ``repr(clock)``, for a step with a clock (an autonomous run's);
    - ``GS`` and each decision column but ``fallback`` as stored per step (``ACTION_COLUMNS``
      order: a compact JSON array over the step's decisions, null when every value is null);
    - ``\x1f`` and the ``fallback`` array, only for a step where some decision fell back;
    - for each message in order, ``\x1c`` and ``seq RS author_id RS channel RS content``;
    - for each transition in order, ``\x1b`` and ``agent_idx RS from_state RS to_state RS
      trigger``, then ``RS 1`` when the move is routine (its reason is not hashed).
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
