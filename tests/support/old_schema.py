"""Rewrite a trace of today's schema into the layout an older version wrote (for read tests).

Schema 2 stored each step's decisions as JSON arrays in the ``steps`` table (the columns a
``StepRecord`` encodes) behind a decoding ``actions`` view, and had no LLM texts, no transition
reasons. ``as_schema_2`` builds exactly that file from a schema-3 trace, with the SQL that
version ran (``ddl_of(2)``), so that tests can check old traces still read right.
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
from pathlib import Path

from vivarium.trace.records import ACTION_COLUMNS, encode_column, encode_fallback
from vivarium.trace.schema import STEPS_V2, actions_view_v2_ddl, trace_view_ddl


def as_schema_2(db: Path) -> None:
    """Rewrite the schema-3 trace ``db`` in place as schema 2 wrote it."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        names = ", ".join(ACTION_COLUMNS)
        rows = con.execute(f"SELECT id >> 24, {names} FROM decisions ORDER BY id").fetchall()
        arrays = {}
        for step, group in itertools.groupby(rows, key=operator.itemgetter(0)):
            *columns, fallback = [list(c) for c in zip(*group, strict=True)][1:]
            arrays[step] = (*(encode_column(c) for c in columns), encode_fallback(fallback))
        steps = con.execute("SELECT * FROM steps ORDER BY step").fetchall()
        empty = (None,) * len(ACTION_COLUMNS)
        con.execute("BEGIN")
        for view in ("trace", "actions"):
            con.execute(f"DROP VIEW IF EXISTS {view}")
        con.execute("DROP TABLE steps")
        con.execute("DROP TABLE decisions")
        con.execute("DROP TABLE IF EXISTS llm_texts")
        for column in ("messages", "tools", "params", "reply"):
            con.execute(f"ALTER TABLE llm_calls DROP COLUMN {column}")
        con.execute("ALTER TABLE transitions DROP COLUMN reason")
        con.execute(STEPS_V2.ddl(2))
        marks = ", ".join("?" * len(STEPS_V2.columns))
        con.executemany(
            f"INSERT INTO steps VALUES ({marks})",
            [(*row, *arrays.get(row[0], empty)) for row in steps],
        )
        con.execute(actions_view_v2_ddl())
        con.execute(trace_view_ddl())
        con.execute("COMMIT")
        con.execute("PRAGMA user_version = 2")
    finally:
        con.close()
