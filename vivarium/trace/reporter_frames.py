"""The reporters' frames: ``model_vars`` and ``agent_vars``, a column per reporter.

The file keeps one row per step and reporter (``vivarium.trace.schema``: ``MODEL_VARS``,
``AGENT_VARS``); the frames pivot them to what Mesa's ``DataCollector`` gives:

- ``model_vars``: one row per step (-1 is the state before step 0), a column per model reporter;
- ``agent_vars``: one row per step and agent (``step``, ``agent_id``), a column per agent reporter.

Packed numbers are concatenated as numpy arrays (no Python loop over agents). A trace without
reporter tables (a run without reporters, or one written before they existed) reads as an
empty frame with the key columns only.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vivarium.errors import TraceError
from vivarium.trace.onefile import read_connection
from vivarium.trace.records import decode_agent_values

if TYPE_CHECKING:
    import pyarrow as pa

REPORTERS_META_KEY = "reporters"  # as vivarium.engine.reporters writes it


def read_reporters(path: Path, name: str, steps: int | None = None) -> pa.Table:
    """Frame ``name`` (``model_vars`` or ``agent_vars``) of the trace at ``path`` as Arrow.

    ``steps``: only the rows of steps before this one (and -1, the state before step 0).

    Raises:
        TraceError: the tables cannot be read (a damaged file).
    """
    below = "" if steps is None else f"WHERE step < {int(steps)}"
    con = read_connection(path)
    try:
        con.execute("BEGIN")  # the tables, the agents and the rows of one snapshot
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        order = _declared_order(con, name, tables)
        agent_ids = [r[0] for r in con.execute("SELECT agent_id FROM agents ORDER BY agent_idx")]
        rows = (
            con.execute(f"SELECT * FROM {name} {below} ORDER BY step").fetchall()  # noqa: S608
            if name in tables
            else []
        )
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read table '{name}' from {path}: {exc}") from None
    finally:
        con.close()
    if name == "model_vars":
        return _model_frame(rows, order)
    return _agent_frame(rows, order, agent_ids, path)


def _declared_order(con: sqlite3.Connection, name: str, tables: set[str]) -> list[str]:
    """The reporters' names in the order the run declared them (its ``meta``), if recorded."""
    if "meta" not in tables:
        return []
    row = con.execute("SELECT value FROM meta WHERE key = ?", (REPORTERS_META_KEY,)).fetchone()
    if row is None:
        return []
    return list(json.loads(row[0]).get("model" if name == "model_vars" else "agent", []))


def _names(rows: list[tuple[Any, ...]], order: list[str]) -> list[str]:
    seen = dict.fromkeys(r[1] for r in rows)
    return [n for n in order if n in seen] + [n for n in seen if n not in order]


def _model_frame(rows: list[tuple[Any, ...]], order: list[str]) -> pa.Table:
    import pyarrow as pa

    steps = sorted({r[0] for r in rows})
    position = {s: i for i, s in enumerate(steps)}
    columns: dict[str, Any] = {"step": pa.array(steps, pa.int64())}
    by_name: dict[str, list[Any]] = {n: [None] * len(steps) for n in _names(rows, order)}
    kinds: dict[str, set[str]] = {n: set() for n in by_name}
    for step, reporter, kind, value in rows:
        if kind == "float" and value is None:
            value = _NAN  # SQLite stores a float NaN as NULL; its kind says it was a float
        elif kind == "bool" and value is not None:
            value = bool(value)
        by_name[reporter][position[step]] = value
        if kind != "null":
            kinds[reporter].add(kind)
    for reporter, values in by_name.items():
        columns[reporter] = _typed(values, kinds[reporter])
    return pa.table(columns)


_NAN = float("nan")
# As the model frame shows JSON values: the text the trace keeps (compact, keys in order).
_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _typed(values: list[Any], kinds: set[str]) -> pa.Array:
    """A model reporter's column, typed by the kinds it recorded.

    Mixed kinds (a number at one step, text or a boolean at another) make a text column, each
    value as ``str`` writes it (``True``, not the ``1`` SQLite keeps).
    """
    import pyarrow as pa

    if kinds <= {"int"}:
        return pa.array(values, pa.int64())
    if kinds <= {"int", "float"}:
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    if kinds == {"bool"}:
        return pa.array(values, pa.bool_())
    return pa.array([None if v is None else str(v) for v in values], pa.string())


def _agent_frame(
    rows: list[tuple[Any, ...]], order: list[str], agent_ids: list[str], path: Path
) -> pa.Table:
    import numpy as np
    import pyarrow as pa

    n = len(agent_ids)
    steps = sorted({r[0] for r in rows})
    position = {s: i for i, s in enumerate(steps)}
    ids = pa.DictionaryArray.from_arrays(
        pa.array(np.tile(np.arange(n, dtype=np.int32), len(steps))),
        pa.array(agent_ids, pa.string()),
    )
    columns: dict[str, Any] = {
        "step": pa.array(np.repeat(np.asarray(steps, dtype=np.int64), n)),
        "agent_id": ids,
    }
    chunks: dict[str, list[Any]] = {name: [None] * len(steps) for name in _names(rows, order)}
    for step, reporter, dtype, data in rows:
        values = decode_agent_values(dtype, data)
        if len(values) != n:
            raise TraceError(
                f"agent_vars in {path}: reporter '{reporter}' holds {len(values)} values at "
                f"step {step} for {n} agents"
            )
        chunks[reporter][position[step]] = values
    for reporter, parts in chunks.items():
        columns[reporter] = _agent_column(parts, n)
    return pa.table(columns)


def _agent_column(parts: list[Any], n: int) -> pa.Array:
    """One agent reporter's column over every step: packed arrays joined, or plain values."""
    import numpy as np
    import pyarrow as pa

    present = [p for p in parts if p is not None]
    if present and all(isinstance(p, np.ndarray) for p in present):
        dtype = np.result_type(*present)
        out = np.zeros(len(parts) * n, dtype=dtype)
        mask = np.zeros(len(parts) * n, dtype=bool)
        for i, part in enumerate(parts):
            if part is None:
                mask[i * n : (i + 1) * n] = True
            else:
                out[i * n : (i + 1) * n] = part
        return pa.array(out, mask=mask if mask.any() else None)
    values: list[Any] = []
    for part in parts:
        if part is None:
            values.extend([None] * n)
        else:
            values.extend(part.tolist() if isinstance(part, np.ndarray) else part)
    try:
        arr = pa.array(values)
        if pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
            return arr.cast(pa.float64()) if pa.types.is_floating(arr.type) else arr
        if pa.types.is_boolean(arr.type) or pa.types.is_string(arr.type):
            return arr
        if pa.types.is_null(arr.type):
            return arr.cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    return pa.array(
        [None if v is None else v if isinstance(v, str) else _json(v) for v in values],
        pa.string(),
    )
