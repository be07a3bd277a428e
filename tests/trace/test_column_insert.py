"""A batch step inserted by SQLite from its JSON columns is the step bound row by row.

Property: for any steps of batch columns (rows in index order or shuffled; columns absent,
all null, constant, reused from the step before, or varying; text with quotes and non-ASCII;
integers, floats and booleans), the file inserted through ``json_each`` holds the same rows,
values and SQLite types, and has the same bytes, as the file bound row by row from the decoded
values; and each step reports the same filled columns. Columns SQLite refuses (``NaN``, unequal
lengths) leave nothing inserted and go the row-by-row way.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from vivarium.trace.column_insert import ColumnInserter
from vivarium.trace.db import _DEFAULTS, _insert_decisions
from vivarium.trace.records import ACTION_COLUMNS, StepRecord
from vivarium.trace.schema import table

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
TEXT_COLUMNS = ("arguments", "reasoning", "metadata", "result", "error")
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[int, tuple[str | None, ...]]]:
    """A run's batch steps: (rows, encoded columns in ``ACTION_COLUMNS`` order)."""
    out: list[tuple[int, tuple[str | None, ...]]] = []
    last: dict[str, str | None] = {}
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 25))
        order = list(range(n))
        if draw(st.booleans()):
            order = draw(st.permutations(order))
        columns: dict[str, str | None] = {
            "agent_idx": _dumps(order),
            "action": _dumps(
                draw(st.lists(st.sampled_from(["noop", "emit"]), min_size=n, max_size=n))
            ),
            "fallback": None,
        }
        for name in (*TEXT_COLUMNS, "success"):
            kind = draw(st.sampled_from(["absent", "nulls", "constant", "varying", "reused"]))
            if name == "success" and kind in ("absent", "nulls"):
                kind = "constant"
            if name == "success" and kind == "reused" and last.get(name) is None:
                kind = "constant"
            if kind == "reused" and last.get(name) is not None:
                previous = json.loads(last[name])  # type: ignore[arg-type]
                if len(previous) == n:
                    columns[name] = last[name]  # the very same object, as a batch path hands it
                    continue
                kind = "constant"
            values: list[Any]
            if kind == "absent" or kind == "reused":
                columns[name] = None
                continue
            if kind == "nulls":
                values = [None] * n
            elif name == "success":
                one = draw(st.sampled_from([1, 0, True, False, 1.0]))
                values = (
                    [one] * n
                    if kind == "constant"
                    else draw(
                        st.lists(st.sampled_from([0, 1, True, False]), min_size=n, max_size=n)
                    )
                )
            else:
                value = st.one_of(
                    st.none(),
                    texts,
                    st.integers(-(2**40), 2**40),
                    st.floats(allow_nan=False, allow_infinity=False),
                )
                values = (
                    [draw(value)] * n
                    if kind == "constant"
                    else draw(st.lists(value, min_size=n, max_size=n))
                )
            columns[name] = _dumps(values)
        last = columns
        out.append((n, tuple(columns[c] for c in ACTION_COLUMNS)))
    return out


def _fresh(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute(table("decisions").ddl())
    return con


def _write(path: Path, run: list[tuple[int, tuple[str | None, ...]]], columns: bool) -> list:
    con = _fresh(path)
    inserter = ColumnInserter() if columns else None
    filled = []
    for step, (n, encoded) in enumerate(run):
        record = StepRecord(step=step, encoded=encoded, n_actions=n)
        con.execute("BEGIN")
        filled.append(_insert_decisions(con, step, record, inserter))
        con.execute("COMMIT")
    con.close()
    return filled


def _rows(path: Path) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(path)
    names = ", ".join(f"{c}, typeof({c})" for c in ("id", *ACTION_COLUMNS))
    try:
        return con.execute(f"SELECT {names} FROM decisions ORDER BY id").fetchall()  # noqa: S608
    finally:
        con.close()


@settings(max_examples=150, deadline=None)
@given(run=steps())
def test_columns_through_sqlite_are_the_rows_bound_one_by_one(
    tmp_path_factory: Any, run: list[tuple[int, tuple[str | None, ...]]]
) -> None:
    folder = tmp_path_factory.mktemp("columns")
    by_rows, by_columns = folder / "rows.sqlite", folder / "columns.sqlite"
    filled_rows = _write(by_rows, run, columns=False)
    filled_columns = _write(by_columns, run, columns=True)
    assert filled_columns == filled_rows
    assert _rows(by_columns) == _rows(by_rows)
    assert by_columns.read_bytes() == by_rows.read_bytes()


def _record(n: int, **texts: str | None) -> StepRecord:
    columns = {
        "agent_idx": _dumps(list(range(n))),
        "action": _dumps(["noop"] * n),
        "success": _dumps([1] * n),
        **texts,
    }
    return StepRecord(step=0, encoded=tuple(columns.get(c) for c in ACTION_COLUMNS), n_actions=n)


def test_columns_sqlite_refuses_insert_nothing(tmp_path: Path) -> None:
    con = _fresh(tmp_path / "t.sqlite")
    inserter = ColumnInserter()
    for record in (
        _record(3, result="[1.5,NaN,2]"),  # Python's json reads NaN, SQLite's does not
        _record(3, result='["a","b"]'),  # a row short
        _record(2, result='{"a":1,"b":2}'),  # not an array
        _record(2, result='[[1],"b"]'),  # a row that is an array
        _record(1, result='"a"'),  # a scalar, one row
        _record(2, result='["a\\u0000b","c"]'),  # SQLite's JSON would cut "a\u0000b" at the NUL
        _record(2, result="[0.1,2]"),  # a float: Python's conversion, bound row by row
        _record(2, result="[12345678901234567890,2]"),  # past 64 bits: refused row by row
    ):
        con.execute("BEGIN")
        assert inserter.insert(con, 0, record, _DEFAULTS) is None
        assert con.execute("SELECT count(*) FROM decisions").fetchone()[0] == 0
        con.execute("ROLLBACK")
    con.close()


def test_a_column_sqlite_refuses_is_bound_row_by_row(tmp_path: Path) -> None:
    con = _fresh(tmp_path / "t.sqlite")
    con.execute("BEGIN")
    filled = _insert_decisions(con, 0, _record(3, result="[1.5,NaN,2]"), ColumnInserter())
    con.execute("COMMIT")
    assert "result" in filled
    rows = con.execute("SELECT result, typeof(result) FROM decisions ORDER BY id").fetchall()
    assert rows == [("1.5", "text"), (None, "null"), ("2", "text")]  # NaN binds as NULL
    con.close()
