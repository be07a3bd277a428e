"""Real runs of every kind write the same file whether their rows go in as columns or one by one.

The golden recipes (``tests.support.golden.TRACE_KINDS``: batch and per-agent paths, shuffled
order, checkpoints, an LLM replay, a user's own world, autonomous steps, an interrupted run) are run twice: once as
the writer does (SQLite reads each step's JSON columns), once with that path switched off (the
rows bound one by one). The two files must be the same bytes, and the first run must have put
every step with decisions in by columns, so that the comparison is not of one path with itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import golden as g
from vivarium.trace import column_insert

# The recipes that run on their own (those replaying a golden cassette are made by its test).
KINDS = {k.name: k for k in g.TRACE_KINDS if k.make is not None and k.cassette is None}


def _make(kind: g.TraceKind, path: Path, work: Path) -> None:
    work.mkdir()
    kind.make(path, work)  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_run_writes_the_same_file_by_columns_as_by_rows(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind = KINDS[name]
    inserted: list[Any] = []
    real = column_insert.ColumnInserter.insert

    def spying(self: Any, con: Any, step: int, record: Any, defaults: Any) -> Any:
        filled = real(self, con, step, record, defaults)
        inserted.append(filled is not None)
        return filled

    monkeypatch.setattr(column_insert.ColumnInserter, "insert", spying)
    _make(kind, tmp_path / "columns.sqlite", tmp_path / "a")
    assert inserted and all(inserted), "a step went in row by row"

    monkeypatch.setattr(column_insert.ColumnInserter, "insert", lambda *_: None)
    _make(kind, tmp_path / "rows.sqlite", tmp_path / "b")
    assert (tmp_path / "columns.sqlite").read_bytes() == (tmp_path / "rows.sqlite").read_bytes()
