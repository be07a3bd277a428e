"""Values as the world saw them: what a trace records of what user code hands it.

A decision's arguments, metadata and result, and a reporter's values, are user values. The trace
records them as JSON (decisions, and reporter values that are not plain numbers or text), as
SQLite numbers (model reporters) or as packed numpy arrays (numeric agent reporters). Whatever is
recorded reads back (``run.actions``, ``run.arguments``, ``run.model_vars``, ``run.agent_vars``)
equal to what was given and of the same family of types, or the run stops before the step is
committed, with one line (``UnrecordableValue``) naming the value and where it came from:

| given | recorded as | read back as |
|---|---|---|
| str, bool, None | themselves | themselves |
| int | in a decision's JSON from -2**63 to 2**64 - 1 (a 64-bit seed fits); as a reporter's value a signed 64-bit integer (SQLite's, packed numpy's); refused beyond | int (``run.arguments`` reads a key past 2**63 as ``uint64``) |
| float, NaN and +-inf included | a float (JSON: ``NaN``, ``Infinity``) | float (NaN, not null) |
| numpy scalar (np.int64, np.float32, np.bool_, ...) | its Python value (``tolist``) | int, float, bool |
| list, tuple, numpy array, pandas Series (nested too) | a JSON array | list |
| dict with str keys | a JSON object | dict |
| dict with a key that is not a str | refused: JSON writes ``1`` as ``"1"`` (``1`` and ``"1"`` would be one key) | |
| anything else (set, bytes, datetime, complex, an object) | refused: its ``str()`` was recorded, an object's address among them (not even deterministic) | |

Tuples and arrays become lists: JSON has one kind of sequence, and a frame column holds lists.
NaN and infinities are written as Python's ``json`` writes them (``NaN``, ``Infinity``), which
Python, pandas, polars and Arrow read back; SQLite's ``json_extract`` before 3.42 does not (see
the README's "Values as the world saw them").

A message a world posts is text (``vivarium.trace.records.check_messages``: its author, channel
and content are ``str``, or the step is refused the same way).

``plain`` does the conversion: it returns its argument itself when nothing needs converting (the
common case: no copy), so the text written for a value that was already plain JSON is byte for
byte what it was before. It walks containers, so it costs in proportion to the value's size;
``vivarium.trace.records.encode_object`` keeps its fast path for the commonest arguments (a small
flat mapping of str to str or int) and calls it only for the rest.
"""

from __future__ import annotations

import json
from typing import Any

from vivarium.errors import ConfigError

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "JSON_INT_MAX",
    "UnrecordableValue",
    "canonical",
    "compact",
    "plain",
    "too_big",
]

INT_MIN = -(1 << 63)
INT_MAX = (1 << 63) - 1
"""The integers SQLite and Arrow hold as numbers (a model reporter's, an agent reporter's)."""
JSON_INT_MAX = (1 << 64) - 1
"""The largest integer a decision's JSON records: 64 bits, unsigned (a seed fits)."""

_KINDS = "str, int, float, bool, None, or lists and str-keyed dicts of them"


class UnrecordableValue(ConfigError):
    """A value a run must record that the trace cannot hold as it is.

    The message is one line: where the value came from (``where``, set by whoever hands the
    value over: the engine names the agent, step and action, a reporter its name), where inside
    it (``path``: ``['prices'][2]``), what it is and what to give instead.
    """

    def __init__(self, reason: str, *, path: tuple[str, ...] = (), where: str = "") -> None:
        """Say why the value at ``path`` cannot be recorded (``where`` it came from: optional)."""
        self.reason = reason
        self.path = path
        self.where = where
        super().__init__(self._text())

    def _text(self) -> str:
        inside = "".join(self.path)
        head = f"{self.where}{inside}" if self.where else (f"value{inside}" if inside else "")
        return f"{head}: {self.reason}" if head else self.reason

    def within(self, step: str) -> UnrecordableValue:
        """The same error one level further out (``step`` is the key or index it was under)."""
        return UnrecordableValue(self.reason, path=(step, *self.path), where=self.where)

    def at(self, where: str) -> UnrecordableValue:
        """The same error saying where the value came from (``model reporter 'gini' ...``)."""
        return UnrecordableValue(self.reason, path=self.path, where=where)

    def in_decision(self, agent_id: str, step: int, action: str, part: str) -> UnrecordableValue:
        """The same error naming the decision: ``agent_001's action 'bid' at step 3: <part>``."""
        return self.at(f"{agent_id}'s action {action!r} at step {step}: {part}")


def _describe(value: Any) -> str:
    kind = type(value)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({name})"


def _key_note(key: Any) -> str:
    """What JSON would make of a key that is not a str."""
    try:
        back = next(iter(json.loads(json.dumps({key: 0}))))
    except (TypeError, ValueError):
        return "JSON keys are text"
    return f"JSON keys are text, so it would be read back as {back!r}"


def too_big(value: int, top: str = "2**64") -> UnrecordableValue:
    """The refusal of an integer outside [-2**63, ``top``)."""
    return UnrecordableValue(
        f"{value} is outside the 64-bit integers a trace holds [-2**63, {top}); record it as a "
        "str (or a float, if rounding it is fine)"
    )


def plain(value: Any) -> Any:
    """``value`` as JSON holds it: the same object when it is already plain, else a converted copy.

    Numpy scalars become their Python values, numpy arrays (nested ones too) lists; everything
    else that JSON cannot hold faithfully is refused (see the module's table).

    Raises:
        UnrecordableValue: the value (or a part of it, named by ``path``) cannot be recorded.
    """
    kind = type(value)
    if kind is str or kind is float or kind is bool or value is None:
        return value
    if kind is int:
        if INT_MIN <= value <= JSON_INT_MAX:
            return value
        raise too_big(value)
    if kind is dict:
        return _plain_dict(value)
    if kind is list or kind is tuple:
        return _plain_list(value)
    return _plain_other(value)


# Values JSON writes as they are, whatever their size: skipped without a call.
_LEAVES = frozenset({str, float, bool, type(None)})


def _plain_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    out: dict[Any, Any] | None = None
    for key, item in value.items():
        if type(key) is not str and not isinstance(key, str):
            raise UnrecordableValue(f"has the key {_describe(key)}: {_key_note(key)}; use str keys")
        kind = type(item)
        if kind in _LEAVES or (kind is int and INT_MIN <= item <= JSON_INT_MAX):
            continue
        try:
            new = plain(item)
        except UnrecordableValue as exc:
            raise exc.within(f"[{key!r}]") from None
        if new is not item:
            if out is None:
                out = dict(value)
            out[key] = new
    return value if out is None else out


def _plain_list(value: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
    out: list[Any] | None = None
    for i, item in enumerate(value):
        kind = type(item)
        if kind in _LEAVES or (kind is int and INT_MIN <= item <= JSON_INT_MAX):
            continue
        try:
            new = plain(item)
        except UnrecordableValue as exc:
            raise exc.within(f"[{i}]") from None
        if new is not item:
            if out is None:
                out = list(value)
            out[i] = new
    return value if out is None else out


_SCALARS = (int, float, bool, str)


def _plain_other(value: Any) -> Any:
    """Subclasses of the JSON types, numpy values, and refusals."""
    if isinstance(value, bool | float | str):  # float: np.float64 too, written as a float
        return value
    if isinstance(value, int):  # an IntEnum, say: JSON writes its number
        if INT_MIN <= value <= JSON_INT_MAX:
            return value
        raise too_big(int(value))
    if isinstance(value, dict):
        return _plain_dict(value)
    if isinstance(value, list | tuple):  # a namedtuple: a JSON array, as json writes it
        return _plain_list(value)
    # A numpy scalar or array (a pandas Series, ...): its Python value(s), when they are JSON's.
    # ``tolist`` of a numpy scalar is its ``item``; np.datetime64, np.complex128, np.longdouble
    # and np.bytes_ give values JSON has no twin for, and are refused below.
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        converted = tolist()
        if converted is None or type(converted) in _SCALARS or isinstance(converted, list):
            return plain(converted)
    raise UnrecordableValue(f"is {_describe(value)}, which JSON cannot hold; give {_KINDS}")


_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def canonical(value: Any) -> str:
    """``value`` as canonical JSON (sorted keys, no spaces): how a decision's values are stored.

    Raises:
        UnrecordableValue: see ``plain``.
    """
    return _canonical(plain(value))


def compact(value: Any) -> str:
    """``value`` as compact JSON, keys in their order: how reporter values are stored.

    Raises:
        UnrecordableValue: see ``plain``.
    """
    return _compact(plain(value))
