"""Trace tables as Arrow, polars and pandas frames.

Reads go through the ADBC SQLite driver (straight into Arrow, about 3x faster than sqlite3 +
fetchall). The driver infers column types from the first rows it sees, so every query starts
with one typed row that is dropped again: a text column that begins with NULLs stays text.
Agent ids, action names and other repeated strings become dictionary (categorical) columns.

A trace may be read while its run writes it. ``read_arrow(..., steps=n)`` then reads the rows
of steps ``0..n-1`` only (those a run record read before counted as committed), so frames read
one after the other agree on their steps whatever was committed in between: ``TraceRun``
passes the ``steps_done`` it opened with.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vivarium.errors import TraceError
from vivarium.trace.db import check_trace_file
from vivarium.trace.onefile import READ_TIMEOUT, leave_one_file, read_connection, read_uri
from vivarium.trace.schema import (
    DECISIONS,
    FRAME_NAMES,
    REPORTER_FRAMES,
    SEQ_BITS,
    SEQ_MASK,
    Column,
    Kind,
    frame_columns,
    table,
)

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl
    import pyarrow as pa

# The typed literal each query's first row gives a column of that kind (see the docstring).
_SAMPLE: dict[str, str] = {
    "int": "0",
    "agent": "0",
    "bool": "0",
    "flag": "0",
    "float": "0.0",
    "text": "''",
    "category": "''",
}


def _query(columns: tuple[Column, ...], body: str) -> str:
    sample = ", ".join(f"{_SAMPLE[str(c.kind)]} AS {c.name}" for c in columns)
    names = ", ".join(c.name for c in columns)
    # The compound keeps the typed sample row first; the body's ORDER BY applies inside.
    return f"SELECT {sample} UNION ALL SELECT * FROM (SELECT {names} {body})"


def arrow_type(kind: Kind) -> pa.DataType:
    """The Arrow type a frame gives a column of ``kind`` (categoricals are dictionaries)."""
    import pyarrow as pa

    if kind in ("category", "agent"):
        return pa.dictionary(pa.int32(), pa.string())
    return {
        "int": pa.int64(),
        "float": pa.float64(),
        "text": pa.string(),
        "bool": pa.bool_(),
        "flag": pa.bool_(),
    }[kind]


def frame_schema(name: str, *, run_id: bool = True) -> pa.Schema:
    """The Arrow schema of frame ``name`` as ``read_arrow`` returns it.

    Args:
        name: One of ``FRAME_NAMES``.
        run_id: Whether the frame starts with the ``run_id`` column (``read_arrow`` given one).

    Returns:
        The column names and types, in order, derived from ``vivarium.trace.schema``.
    """
    import pyarrow as pa

    fields = [pa.field("run_id", arrow_type("category"))] if run_id else []
    for column in frame_columns(name):
        fields.append(pa.field(column.frame_name, arrow_type(column.kind or "text")))
    return pa.schema(fields)


def _read_arguments(p: Path, steps: int | None = None) -> pa.Table:
    """The arguments frame of a trace: only the actions' keys and arguments are read."""
    plan = _decisions_plan(p, steps)
    if plan is None:  # an older trace: from its whole actions frame
        return arguments_table(read_arrow(p, "actions", steps=steps))
    columns, arrays, ids = _read_decisions(p, plan, only={"agent_idx", "action", "arguments"})
    wanted = {"step", "seq", "agent_idx", "action", "arguments"}
    kept = [(c, a) for c, a in zip(columns, arrays, strict=True) if c.name in wanted]
    cols, arrs = tuple(c for c, _ in kept), [a for _, a in kept]
    return arguments_table(read_arrow_columns(p, cols, arrs, agent_ids=ids))


@dataclass(frozen=True, slots=True)
class _DecisionsPlan:
    """What reading a trace's decisions needs to know first, asked in one connection.

    Attributes:
        filled: The decision columns some row wrote (the writer's meta; all when unrecorded).
        end: The first key not read (None: every row).
        low, high: The smallest and largest key read (None: no row).
        count: The decisions of the steps read (from the steps table).
    """

    filled: frozenset[str]
    end: int | None
    low: int | None
    high: int | None
    count: int | None


def _decisions_plan(p: Path, steps: int | None) -> _DecisionsPlan | None:
    """The plan of a read of the decisions table (schema 3 on); None for an older trace.

    One connection and one snapshot for every question (a small run's frame would otherwise
    open the file four times before reading a row).
    """
    from vivarium.trace.db import listed_filled

    end = None if steps is None else steps << SEQ_BITS  # the first key not read
    con = read_connection(p)
    try:
        con.execute("BEGIN")  # one snapshot for every question
        has = con.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'decisions'"
        ).fetchone()
        if has is None:
            return None
        listed = listed_filled(con)
        filled = frozenset(c.name for c in DECISIONS if listed is None or c.name in listed)
        # One aggregate a query: SQLite answers a lone min() or max() of the key from an end of
        # the B-tree, but scans every row for them together (and for count(*)); the count,
        # which only decides whether to read in halves, is the steps table's.
        bound = end if end is not None else 1 << 62
        low = con.execute("SELECT min(id) FROM decisions").fetchone()[0]
        high = con.execute("SELECT max(id) FROM decisions WHERE id < ?", (bound,)).fetchone()[0]
        count = con.execute(
            "SELECT sum(n_actions) FROM steps WHERE step < ?", (bound >> SEQ_BITS,)
        ).fetchone()[0]
    finally:
        con.close()
    return _DecisionsPlan(filled, end, low, high, count)


def _read_decisions(
    p: Path, plan: _DecisionsPlan, only: set[str] | None = None
) -> tuple[tuple[Column, ...], list[pa.Array], pa.Array | None]:
    """The actions frame's columns, straight from the decisions table (schema 3 on).

    Only the columns some decision filled are read (the writer records them in ``meta``); the
    rest are their default throughout. ``step`` and ``seq`` come from the key. The rows are
    read in two halves on two threads (the driver reads without holding the GIL) past
    ``_SPLIT_ROWS``; below, in one connection with the agent ids, which are returned too (else
    None: ``read_arrow_columns`` reads them). ``plan.end`` bounds the rows read by their key
    (see the module docstring).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    filled = set(plan.filled)
    if only is not None:
        filled &= only
    read = [c for c in DECISIONS if c.name in filled]
    sample = Column("id", "", "int", "")
    end, low, high, count = plan.end, plan.low, plan.high, plan.count
    bounds: list[tuple[int | None, int | None]] = [(None, end)]
    if count and count > _SPLIT_ROWS and (low >> SEQ_BITS) < (high >> SEQ_BITS):  # type: ignore[operator]
        middle = ((low >> SEQ_BITS) + (high >> SEQ_BITS) + 1) // 2 << SEQ_BITS  # type: ignore[operator]
        bounds = [(None, middle), (middle, end)]

    def query(bound: tuple[int | None, int | None]) -> str:
        where = " AND ".join(
            f"id {op} {value}"
            for op, value in zip((">=", "<"), bound, strict=True)
            if value is not None
        )
        body = f"FROM decisions {'WHERE ' + where if where else ''} ORDER BY id"
        return _query((sample, *read), body)

    agent_ids: pa.Array | None = None
    if len(bounds) == 1:
        rows, names = _fetch_arrow_many(p, [query(bounds[0]), _AGENT_IDS_SQL])
        table = rows.slice(1)
        agent_ids = _agent_ids_of(names)
    else:
        from concurrent.futures import ThreadPoolExecutor

        def part(bound: tuple[int | None, int | None]) -> pa.Table:
            return _fetch_arrow(p, query(bound)).slice(1)

        with ThreadPoolExecutor(len(bounds)) as pool:
            table = pa.concat_tables(list(pool.map(part, bounds)), memory_pool=_pool())
    ids = table.column("id")
    n = len(ids)
    arrays: list[Any] = [
        pc.shift_right(ids, SEQ_BITS, memory_pool=_pool()),
        pc.bit_wise_and(ids, SEQ_MASK, memory_pool=_pool()),
    ]
    for column in DECISIONS:
        if column.name in filled:
            arrays.append(table.column(column.name))
        elif column.name in _ROW_DEFAULTS:
            arrays.append(pa.array(np.full(n, _ROW_DEFAULTS[column.name], dtype=np.int64)))
        else:
            arrays.append(pa.nulls(n, pa.int64() if column.kind == "agent" else pa.string()))
    return frame_columns("actions"), arrays, agent_ids


_SPLIT_ROWS = 200_000  # read in two halves past this many decisions
_ROW_DEFAULTS = {"success": 1, "fallback": 0}  # the decisions table's defaults


def _has_column(path: Path, table: str, column: str) -> bool:
    con = read_connection(path)
    try:
        return any(row[1] == column for row in con.execute(f"PRAGMA table_info({table})"))
    finally:
        con.close()


def _pool() -> pa.MemoryPool:
    """The allocator of the frames' own Arrow work: the C library's.

    Arrow's default (mimalloc) keeps the memory a million-row read frees for later, and the
    process with it: ~40 MiB more at the peak of ``run.arguments`` (measured), for no gain in
    speed. Passed call by call, so a notebook's own Arrow work keeps its allocator.
    """
    import pyarrow as pa

    return pa.system_memory_pool()


def _fetch_arrow(path: Path, sql: str) -> pa.Table:
    """The result of ``sql`` as Arrow, read through the ADBC driver."""
    return _fetch_arrow_many(path, [sql])[0]


def _fetch_arrow_many(path: Path, queries: list[str]) -> list[pa.Table]:
    """The results of ``queries`` as Arrow, read through one ADBC connection.

    The DBAPI connection is not in autocommit mode: its queries are one transaction, so they
    read one snapshot of the file.

    The driver's SQLite waits for no lock unless told to: without a busy timeout, a read at
    the moment a writer has the file to itself (a run starting or closing) fails with
    "database is locked".
    """
    import adbc_driver_sqlite.dbapi as adbc

    try:
        with adbc.connect(read_uri(path)) as con, con.cursor() as cur:
            cur.execute(f"PRAGMA busy_timeout = {int(READ_TIMEOUT * 1000)}")
            cur.fetchall()
            out = []
            for sql in queries:
                cur.execute(sql)
                out.append(cur.fetch_arrow_table())
            return out
    finally:
        leave_one_file(path)


# What a schema-1 trace (no fallback column) recorded for a decision that fell back: a policy
# error as a failed noop with one of these reasons, an unusable reply in the metadata.
_V1_POLICY_ERRORS = ("policy error: ", "no decision: ", "policy returned ")
_V1_FALLBACK_METADATA = r'"parse_path"\s*:\s*"fallback"'


# The agents' ids in index order, after a sample row that gives the column its type.
_AGENT_IDS_SQL = (
    "SELECT '' AS agent_id UNION ALL "
    "SELECT agent_id FROM (SELECT agent_id FROM agents ORDER BY agent_idx)"
)


def _agent_ids(p: Path) -> pa.Array:
    return _agent_ids_of(_fetch_arrow(p, _AGENT_IDS_SQL))


def _agent_ids_of(table: pa.Table) -> pa.Array:
    return table.column(0).combine_chunks().slice(1)


def _read_actions(p: Path, steps: int | None = None) -> tuple[tuple[Column, ...], list[pa.Array]]:
    """Decode the per-step JSON arrays into one row per decision (schema 2 and before).

    The steps' arrays are handed to Arrow's (C++) JSON reader as one document per step, so
    a million decisions decode in a fraction of a second. ``steps``: the steps read at most.
    """
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.json as pj

    con = read_connection(p)
    con.text_factory = bytes  # the JSON goes to Arrow as bytes: no decode and re-encode
    try:
        v1 = "fallback" not in {row[1].decode() for row in con.execute("PRAGMA table_info(steps)")}
        # A schema-1 file lacks the columns added since: read as null, then derived below.
        names = ", ".join("NULL" if v1 and c.since > 1 else c.name for c in DECISIONS)
        rows = con.execute(
            f"SELECT step, n_actions, {names} FROM steps {_below(steps)} ORDER BY step"
        ).fetchall()
    finally:
        con.close()
    counts = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
    steps = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    seq = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
    arrays: list[pa.Array] = [pa.array(np.repeat(steps, counts)), pa.array(seq)]
    # The arrays hold integers for agents and booleans, text for the rest.
    integer = ("agent", "bool", "flag")
    fields = [
        (c.name, pa.list_(pa.int64() if c.kind in integer else pa.string())) for c in DECISIONS
    ]
    columns = frame_columns("actions")
    if not rows:
        return columns, arrays + [pa.array([], t.value_type) for _, t in fields]
    # Columns that are null throughout, or the same array every step (agent order, success
    # of random agents), are built directly; only the rest goes through the JSON reader.
    decoded: dict[str, pa.Array] = {}
    parse: list[tuple[int, str, Any]] = []
    for i, (name, typ) in enumerate(fields):
        texts = [row[2 + i] for row in rows]
        distinct = set(texts)
        if distinct == {None}:
            decoded[name] = pa.nulls(total, typ.value_type)
        elif len(distinct) == 1 and len(set(counts.tolist())) == 1:
            one = pa.array(json.loads(texts[0]), typ.value_type)  # type: ignore[arg-type]
            if len(one) != counts[0]:
                raise TraceError(f"actions column '{name}' is damaged at step 0")
            decoded[name] = pa.concat_arrays([one] * len(rows)) if len(rows) > 1 else one
        else:
            parse.append((i, name, typ))
    if parse:
        nulls: dict[int, bytes] = {}
        keys = [(i, f'"{name}":'.encode()) for i, name, _ in parse]
        lines = []
        for row in rows:
            n = row[1]
            if n not in nulls:
                nulls[n] = b"[" + b",".join([b"null"] * n) + b"]"
            filler = nulls[n]
            body = b",".join(
                key + (row[2 + i] if row[2 + i] is not None else filler) for i, key in keys
            )
            lines.append(b"{" + body + b"}")
        try:
            parsed = pj.read_json(
                io.BytesIO(b"\n".join(lines)),
                parse_options=pj.ParseOptions(
                    explicit_schema=pa.schema([(name, typ) for _, name, typ in parse])
                ),
            )
        except pa.ArrowInvalid as exc:
            raise TraceError(f"actions in {p} are damaged: {exc}") from None
        for _, name, typ in parse:
            chunks = [chunk.flatten() for chunk in parsed.column(name).chunks]
            decoded[name] = pa.chunked_array(chunks, typ.value_type)

    if v1:
        _derive_v1_fallbacks(decoded)
    for name, _ in fields:
        flat = decoded[name]
        if len(flat) != total:
            raise TraceError(f"actions column '{name}' holds {len(flat)} values, expected {total}")
        arrays.append(flat)
    return columns, arrays


def _derive_v1_fallbacks(decoded: dict[str, Any]) -> None:
    """Read a schema-1 trace in today's layout: its fallbacks marked and never a success.

    Schema 1 recorded a policy error as a failed ``noop`` whose error names it, and an unusable
    reply as a successful ``noop`` whose metadata says ``parse_path: fallback`` (the reason stays
    in that metadata, as it was recorded).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def combined(name: str) -> pa.Array:
        arr = decoded[name]
        return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr

    metadata, error = combined("metadata"), combined("error")
    noop = pc.fill_null(pc.equal(combined("action"), "noop"), False)
    unusable = pc.fill_null(pc.match_substring_regex(metadata, _V1_FALLBACK_METADATA), False)
    policy_error = functools.reduce(
        pc.or_, [pc.fill_null(pc.starts_with(error, x), False) for x in _V1_POLICY_ERRORS]
    )
    fell_back = pc.and_(noop, pc.or_(unusable, pc.and_(pc.is_null(metadata), policy_error)))
    decoded["fallback"] = pc.cast(fell_back, pa.int64())
    decoded["success"] = pc.if_else(fell_back, 0, pc.cast(combined("success"), pa.int64()))


def _below(steps: int | None) -> str:
    """The ``WHERE`` clause of a table with a ``step`` column, bounded by ``steps`` (or none)."""
    return "" if steps is None else f"WHERE step < {int(steps)}"


# The frames read from a table with a ``step`` column, which ``steps`` bounds; the others
# (agents, and any table added later) are read whole.
_STEP_TABLES = frozenset({"steps", "messages", "llm_calls", "transitions"})


_CALLS_WITH_SOURCE = (
    "SELECT c.*, CASE WHEN {} THEN 'parent' WHEN c.cache_hit THEN 'cache' ELSE 'model' END "
    "AS source FROM llm_calls AS c"
)


def _sources(path: Path) -> str:
    """The SQL test of a call served from a fork's parent (false: a file without such calls)."""
    con = read_connection(path)
    try:
        listed = con.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'llm_call_sources'"
        ).fetchone()
    finally:
        con.close()
    if listed is None:
        return "0"
    return "c.id IN (SELECT id FROM llm_call_sources WHERE source = 'parent')"


def read_arrow(
    path: str | Path, name: str, run_id: str | None = None, *, steps: int | None = None
) -> pa.Table:
    """One trace table as an Arrow table with decoded agent ids and categorical text.

    Args:
        path: The trace file.
        name: The frame (``FRAME_NAMES``, ``REPORTER_FRAMES`` or ``arguments``).
        run_id: A ``run_id`` column to put in front (None: none).
        steps: Read only the rows of steps before this one (None: every row); see the module
            docstring.
    """
    if name == "arguments":  # the actions' key columns and arguments only, then typed
        try:
            return with_run_id(_read_arguments(check_trace_file(path), steps), run_id)
        except TraceError:
            raise
        except Exception as exc:  # a damaged or partial file
            raise TraceError(f"cannot read the arguments from {path}: {exc}") from None
    if name in REPORTER_FRAMES:
        from vivarium.trace.reporter_frames import read_reporters

        return with_run_id(read_reporters(check_trace_file(path), name, steps), run_id)
    if name not in FRAME_NAMES:
        known = ", ".join((*FRAME_NAMES, *REPORTER_FRAMES))
        raise TraceError(f"unknown trace table '{name}' (known: {known})")
    p = check_trace_file(path)
    ids = None
    try:
        plan = _decisions_plan(p, steps) if name == "actions" else None
        if name == "actions" and plan is None:
            columns, arrays = _read_actions(p, steps)  # schema 2 and before: the steps' arrays
        elif plan is not None:
            columns, arrays, ids = _read_decisions(p, plan)
        else:
            columns = frame_columns(name)
            where = _below(steps) if name in _STEP_TABLES else ""
            body = f"FROM {name} {where} ORDER BY {table(name).primary_key}"
            if name == "llm_calls":  # where each reply came from (``CALL_SOURCE``)
                body = f"FROM ({_CALLS_WITH_SOURCE.format(_sources(p))} {where}) ORDER BY id"
            if name == "transitions":  # older schemas lack the later columns
                has = {c: _has_column(p, "transitions", c) for c in ("routine", "reason")}
                if not all(has.values()):
                    extra = ("" if has["routine"] else ", 0 AS routine") + (
                        "" if has["reason"] else ", NULL AS reason"
                    )
                    body = f"FROM (SELECT *{extra} FROM transitions {where}) ORDER BY id"
            arrays = list(_fetch_arrow(p, _query(columns, body)).slice(1).columns)
    except TraceError:
        raise
    except Exception as exc:  # a damaged or partial file
        raise TraceError(f"cannot read table '{name}' from {p}: {exc}") from None
    return with_run_id(read_arrow_columns(p, columns, arrays, agent_ids=ids), run_id)


def read_arrow_columns(
    p: Path, columns: tuple[Column, ...], arrays: list[Any], *, agent_ids: pa.Array | None = None
) -> pa.Table:
    """The columns as read, typed as their kinds say (agent ids, categoricals, booleans).

    ``agent_ids``: the agents' ids in index order when already read (None: read here if a
    column needs them).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str, Any] = {}
    for column, arr in zip(columns, arrays, strict=True):
        col, kind = column.frame_name, column.kind
        if kind in ("agent", "category") and isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks(_pool())  # one dictionary per column, not per chunk
        if kind == "agent":
            if agent_ids is None:
                agent_ids = _agent_ids(p)
            out[col] = pa.DictionaryArray.from_arrays(
                pc.cast(arr, pa.int32(), memory_pool=_pool()), agent_ids
            )
        elif kind == "category":
            out[col] = pc.dictionary_encode(arr, memory_pool=_pool())
        elif kind == "bool":
            out[col] = pc.not_equal(arr, 0) if len(arr) else arr.cast(pa.bool_())
        elif kind == "flag":
            flags = pc.not_equal(arr, 0) if len(arr) else arr.cast(pa.bool_())
            out[col] = pc.fill_null(flags, False)
        elif kind == "int":
            out[col] = pc.cast(arr, pa.int64(), memory_pool=_pool())
        elif kind == "float":
            out[col] = pc.cast(arr, pa.float64(), memory_pool=_pool())
        else:
            out[col] = pc.cast(arr, pa.string(), memory_pool=_pool())
    return pa.table(out)


def with_run_id(result: pa.Table, run_id: str | None) -> pa.Table:
    """``result`` with a categorical ``run_id`` column in front (None: as it is)."""
    if run_id is None:
        return result
    import numpy as np
    import pyarrow as pa

    rid = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(result.num_rows, dtype=np.int32)), pa.array([run_id])
    )
    return result.add_column(0, "run_id", rid)


def to_pandas(table: pa.Table, *, nullable_integers: bool = False) -> pd.DataFrame:
    """Arrow -> pandas: dictionaries become categoricals, text keeps pandas' string dtype.

    ``nullable_integers`` keeps integer columns integers where they have nulls (``Int64``),
    instead of pandas' floats: an argument such as ``value`` that only some actions have.
    """
    import pandas as pd
    import pyarrow as pa

    mapper = {pa.int64(): pd.Int64Dtype()}.get if nullable_integers else None
    df = table.to_pandas(types_mapper=mapper, memory_pool=_pool())
    for field in table.schema:
        if str(field.type) == "string" and df[field.name].dtype == object:
            df[field.name] = df[field.name].astype(pd.StringDtype())
    return df


def to_polars(table: pa.Table) -> pl.DataFrame:
    """Arrow -> polars: dictionaries become categoricals (no copy of the data)."""
    import polars as pl

    return pl.from_arrow(table)  # type: ignore[return-value]


ARGUMENT_KEYS = ("run_id", "step", "seq", "agent_id", "action")
"""The columns of the arguments frame that say whose decision a row is (``run_id`` if any)."""

# The actions' columns the arguments frame leaves out (it keeps the rest: the keys above, and
# a sweep's run columns).
_DETAILS = frozenset(c.name for c in DECISIONS) - {"agent_idx", "action"}


_ROWS = "__rows"  # the column that keeps a chunk's row count when no row has any argument


def _parse_arguments(chunk: pa.Array) -> pa.Table:
    """One chunk of the arguments column parsed: a column per key.

    Parsed from Arrow's own buffer (the JSON is never copied into Python bytes). A chunk in which
    no row has any argument is one all-null column, ``_ROWS`` (of Arrow's null type: an argument
    of that name that some row has is a column of its own, typed by its values).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    pool = _pool()
    texts = pc.coalesce(pc.cast(chunk, pa.string(), memory_pool=pool), "{}", memory_pool=pool)
    empty = pc.equal(texts, "", memory_pool=pool)
    texts = pc.if_else(empty, "{}", texts, memory_pool=pool)  # no arguments, however written
    if not len(texts) or pc.all(pc.equal(texts, "{}")).as_py():
        return pa.table({_ROWS: pa.nulls(len(texts))})
    # Each row's object and a newline, joined in C++: newline-delimited JSON.
    lines = pc.binary_join_element_wise(texts, pa.scalar("\n"), "", memory_pool=pool)
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset :]
    start, end = int(offsets[0]), int(offsets[len(lines)])

    def read(schema: pa.Schema | None = None) -> pa.Table:
        options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer")
        return pj.read_json(
            pa.BufferReader(lines.buffers()[2].slice(start, end - start)),
            parse_options=options,
            memory_pool=pool,
        )

    try:
        table = read()
    except pa.ArrowInvalid as exc:
        raise TraceError(
            f"arguments cannot be read as typed columns ({str(exc).splitlines()[0]}); "
            "read them as JSON from the actions frame's 'arguments' column"
        ) from None
    if table.num_rows != len(texts):  # one object per line, or the rows would shift
        raise TraceError(
            f"arguments: {table.num_rows} objects read for {len(texts)} decisions; read "
            "them as JSON from the actions frame's 'arguments' column"
        )
    if pc.any(pc.match_substring_regex(texts, r"\d{19}", memory_pool=pool)).as_py():
        table = _exact_big_integers(table, read)
    return table


def _exact_big_integers(table: pa.Table, read: Any) -> pa.Table:
    """``table`` with keys holding integers past 2**63 read exactly (unsigned 64-bit).

    Arrow's JSON reader reads such an integer (a seed of 64 bits, say) as a float, rounded; a
    key whose numbers are all whole and >= 0 is read again as ``uint64``. One that mixes them
    with negative or fractional numbers cannot be one exact column: refused in one line.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, field in enumerate(table.schema):
        if not pa.types.is_floating(field.type):
            continue
        top = pc.max(pc.abs(table.column(i))).as_py()
        if top is None or top < 2.0**63:
            continue
        try:
            exact = read(pa.schema([(field.name, pa.uint64())])).column(field.name)
        except pa.ArrowInvalid:
            raise TraceError(
                f"arguments: '{field.name}' holds integers past 2**63 among other numbers, which "
                "one typed column would round; read them as JSON from the actions frame's "
                "'arguments' column"
            ) from None
        table = table.set_column(i, field.name, exact)
    return table


def arguments_table(actions: pa.Table) -> pa.Table:
    """The actions' arguments as typed columns, one row per decision (as in ``actions``).

    Each key any decision's arguments has becomes a column typed by Arrow's JSON reader
    (numbers as numbers, text as text, nested values as structs or lists), null where a
    decision lacks it; the JSON is read once, in C++. A key named like a column already
    there (``ARGUMENT_KEYS``, a sweep's ``seed`` or parameters) is prefixed ``argument_``.

    Args:
        actions: The actions frame as Arrow (``read_arrow(path, "actions")``, a sweep's too).

    Returns:
        The actions' own columns but their details (``run_id`` and a sweep's run columns when
        there, ``step``, ``seq``, ``agent_id``, ``action``), then one column per argument key,
        in the order the keys first appear.

    Raises:
        TraceError: One key holds values of different types (say a number and a text).
    """
    import pyarrow as pa

    keys = {name: actions.column(name) for name in actions.column_names if name not in _DETAILS}
    column = actions.column("arguments")
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    return _with_arguments(keys, [_parse_arguments(chunk) for chunk in _regrouped(chunks)])


_PARSE_ROWS = 1 << 16  # rows parsed at once: well past the JSON reader's own cost of a call
_PARSE_BYTES = 1 << 28  # and well inside a string array's 2 GiB of offsets


def _regrouped(chunks: list[pa.Array]) -> list[pa.Array]:
    """``chunks`` joined into fewer, larger ones (at most ``_PARSE_ROWS`` rows each).

    The driver reads ~1,000 rows a chunk, and the JSON reader's fixed cost of a call (~0.5 ms)
    is then more than the parsing.
    """
    import pyarrow as pa

    groups: list[list[pa.Array]] = [[]]
    rows = size = 0
    for chunk in chunks:
        nbytes = chunk.nbytes
        if groups[-1] and (rows + len(chunk) > _PARSE_ROWS or size + nbytes > _PARSE_BYTES):
            groups.append([])
            rows = size = 0
        groups[-1].append(chunk)
        rows, size = rows + len(chunk), size + nbytes
    return [
        g[0] if len(g) == 1 else pa.concat_arrays([c.cast(pa.string()) for c in g], _pool())
        for g in groups
        if g
    ]


def _with_arguments(keys: dict[str, Any], parsed: list[pa.Table]) -> pa.Table:
    """``keys`` and the parsed chunks' columns, one table (a clashing name gets a prefix)."""
    import pyarrow as pa

    if parsed:
        try:
            merged = pa.concat_tables(parsed, promote_options="default", memory_pool=_pool())
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise TraceError(
                f"arguments cannot be read as typed columns ({str(exc).splitlines()[0]}); "
                "read them as JSON from the actions frame's 'arguments' column"
            ) from None
        for name in merged.column_names:
            if name == _ROWS and pa.types.is_null(merged.column(name).type):
                continue  # the row count of chunks without arguments, not an argument
            label = name
            while label in keys:  # a key named like a column already there (a sweep's seed)
                label = f"argument_{label}"
            keys[label] = merged.column(name)
    return pa.table(keys)
