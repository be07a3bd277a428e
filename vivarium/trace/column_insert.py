"""A step's decisions inserted by SQLite from their stored JSON columns.

Before a step is written, its decision columns are encoded as the trace stores them, one
compact JSON array per column: a batch path (``vivarium.engine.rows``) records them so, and the
state hash encodes a per-agent step's (``StepRecord.encode``). Binding the rows one value at a
time through Python's sqlite3 holds the GIL for every value: about a microsecond a row, on the
writer's thread while the engine's thread waits for the GIL. Here SQLite reads the arrays
itself (``json_each``) inside the statements, during which sqlite3 releases the GIL: a step
binds a handful of texts, whatever its size.

The ``action`` array (the engine's own, one name per row, as is ``agent_idx``) drives one
``INSERT ... SELECT``. Every other column that varies from row to row is first read into a
temporary table keyed by the row's position (refused unless it is an array of exactly the
step's rows, none of them an array or object) and joined on it. The rows come out in position
order, so the rows, their values and SQLite types, and the order they are inserted in (hence
the file's bytes) are those of binding the decoded values. A column whose text is the very
text of the step before (a batch path hands the same object every step for what does not
change: every agent succeeded, the same metadata) is decoded once and, when every row holds
the same value, bound as that one value; ``agent_idx`` of a step in index order is the row's
position. Which columns some row filled (the trace's ``decision_columns_filled``) is decided
per column and step as the row-by-row path decides it.

SQLite reads strict JSON only, ends a string at an escaped NUL (``u0000`` after a backslash),
and parses numbers with its own float conversion. A column Python's ``json`` reads otherwise
(``NaN``, a NUL), one holding a number SQLite reads as a float, or columns of unequal lengths,
make ``insert`` return None with nothing inserted: the caller then binds the rows itself (and
says what is wrong with them, as it always did).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from vivarium.trace.records import ACTION_COLUMNS, StepRecord, encode_column

__all__ = ["ColumnInserter"]

_TABLE = "temp.vivarium_column_{}"


class _Seen:
    """A column's text as last seen, and, once seen twice running, its one value if it has one."""

    __slots__ = ("constant", "length", "settled", "text", "value")

    def __init__(self, text: str) -> None:
        self.text = text
        self.settled = False  # decoded: ``constant``, ``value`` and ``length`` say what it holds
        self.constant = False
        self.value: Any = None
        self.length = -1


class ColumnInserter:
    """Inserts the steps of one writer connection (its temporary tables, what it has seen)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self._positional: tuple[int, str] | None = None

    def insert(
        self, con: sqlite3.Connection, step: int, record: StepRecord, defaults: dict[str, Any]
    ) -> tuple[str, ...] | None:
        """Insert the step's rows; the columns some row filled, or None when nothing was done.

        Args:
            con: The writer's connection, inside the step's transaction.
            step: The step (row ``i``'s key is ``step << SEQ_BITS | i``).
            record: A ``StepRecord`` whose columns are encoded (``encoded``: a batch path's,
                or ``StepRecord.encode``'s).
            defaults: Each column's declared default (absent: null).
        """
        from vivarium.trace.schema import SEQ_BITS

        n = record.n_actions
        texts = dict(zip(ACTION_COLUMNS, record.encoded, strict=False))
        if any(texts.get(name) is None for name in ("agent_idx", "action", "success")):
            return None  # columns every step stores are missing: bound row by row
        names = ["agent_idx", "action"]
        filled = ["agent_idx", "action"]
        select = ["? + r.key", "r.key", "r.value"]
        params: list[Any] = [step << SEQ_BITS]
        joins: list[str] = []
        try:
            if texts["agent_idx"] != self._positional_text(n):
                positions = self._join(con, 0, texts["agent_idx"], n, joins)
                if positions is None:
                    return None
                select[1] = positions
            for index, name in enumerate(ACTION_COLUMNS):
                text = texts.get(name)
                if name in ("agent_idx", "action") or text is None:
                    continue
                default = defaults.get(name)
                names.append(name)
                seen = self._settled(name, text)
                if seen is not None and seen.constant and seen.length == n:
                    select.append("?")
                    params.append(seen.value)
                    if seen.value != default:
                        filled.append(name)
                    continue
                column = self._join(con, index, text, n, joins)
                if column is None:
                    return None
                select.append(column)
                if con.execute(
                    f"SELECT EXISTS (SELECT 1 FROM {_TABLE.format(index)} "  # noqa: S608
                    "WHERE v IS NOT ?)",
                    (default,),
                ).fetchone()[0]:
                    filled.append(name)
        except sqlite3.OperationalError as exc:
            if "malformed JSON" not in str(exc):
                raise
            return None  # Python's json may read it (NaN): bound row by row
        # The engine's own action column drives the rows in its order (json_each reads an
        # array in order; CROSS JOIN keeps it the outer loop), each row's other columns found
        # by position.
        params.append(texts["action"])
        con.execute(
            f"INSERT OR REPLACE INTO decisions (id, {', '.join(names)}) "  # noqa: S608
            f"SELECT {', '.join(select)} FROM json_each(?) AS r {' '.join(joins)}",
            params,
        )
        return tuple(filled)  # in ACTION_COLUMNS order, as the columns were visited

    def _positional_text(self, n: int) -> str:
        """The ``agent_idx`` column of a step in index order: ``[0,1,...,n-1]``."""
        if self._positional is None or self._positional[0] != n:
            self._positional = (n, encode_column(list(range(n))) or "[]")
        return self._positional[1]

    def _settled(self, name: str, text: str) -> _Seen | None:
        """What ``text`` holds when it is the text of the step before too (decoded once)."""
        seen = self._seen.get(name)
        if seen is None or seen.text is not text:
            self._seen[name] = _Seen(text)
            return None
        if not seen.settled:
            seen.settled = True
            try:
                values = json.loads(text)
            except ValueError:
                return seen  # not constant: SQLite refuses it too, and the caller says why
            if isinstance(values, list) and values:
                first = values[0]
                seen.constant = isinstance(first, str | int | float | type(None)) and all(
                    type(v) is type(first) and v == first for v in values
                )
                seen.value, seen.length = first, len(values)
        return seen

    def _fill(self, con: sqlite3.Connection, index: int, text: str, n: int) -> str | None:
        """Read a column's array into its table keyed by position; the table's name.

        None when it is not an array of exactly ``n`` values none of which is an array or an
        object (the row-by-row path refuses those, saying why), when it holds a number SQLite
        reads as a float (a fraction, an exponent, an integer past 64 bits: Python parses and
        binds those, so the float stored is Python's, to the last bit), or an escaped NUL.
        """
        if "\\u0000" in text:
            return None  # SQLite's JSON ends a string at an escaped NUL; Python's does not
        table = _TABLE.format(index)
        # Asked every time: a rolled-back transaction takes a table it made with it.
        con.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table[5:]} (k INTEGER PRIMARY KEY, v)")
        con.execute(f"DELETE FROM {table}")  # noqa: S608
        rows = con.execute(
            f"INSERT INTO {table} (k, v) SELECT key, value FROM json_each(?) "  # noqa: S608
            "WHERE json_type(?) = 'array' AND type NOT IN ('array', 'object') "
            "AND typeof(value) != 'real'",
            (text, text),
        ).rowcount
        return table if rows == n else None

    def _join(
        self, con: sqlite3.Connection, index: int, text: str, n: int, joins: list[str]
    ) -> str | None:
        """A varying column read into its table and joined on the row; its expression."""
        table = self._fill(con, index, text, n)
        if table is None:
            return None
        alias = f"c{index}"
        joins.append(f"CROSS JOIN {table} AS {alias} ON {alias}.k = r.key")
        return f"{alias}.v"
