"""Validation reads a step's decisions with SQLite's JSON, and is exactly as strong as before.

``vvm validate`` recomputes the state-hash chain over every decision. It now has SQLite build each
step's column arrays (``json_group_array``, one range scan per step) instead of reading a
million rows into Python, and a step whose hash does not match is read again the writer's way
before it is called corrupt. The properties:

- every trace the writer writes validates ``ok``, whatever text its decisions hold (SQLite's
  JSON and the writer's may differ: then the writer's way decides);
- a change to any one stored cell is found, at its step;
- when SQLite's JSON differs from the writer's on every step, the verdict is the same.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vivarium import ActionRequest, Experiment
from vivarium.trace import validate
from vivarium.trace.schema import SEQ_BITS
from vivarium.trace.validate import validate_trace


class Saying:
    """A policy whose decisions post the texts it was given, with them as their reasoning."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        text = self.texts[time_step % len(self.texts)]
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="post_message",
            arguments={"content": text},
            reasoning=text,
        )


def _trace(folder: Path, texts: list[str], name: str = "t") -> Path:
    path = folder / f"{name}.sqlite"
    Experiment(name="say", world="channel", policy=Saying(texts), agents=3, steps=4, seed=1).run(
        path, progress=False, overwrite=True
    )
    return path


TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=12
)  # any character a Python string can store in SQLite (lone surrogates cannot be)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(TEXT, min_size=1, max_size=4))
def test_every_written_trace_validates_whatever_its_text(tmp_path: Path, texts: list[str]) -> None:
    report = validate_trace(_trace(tmp_path, texts))
    assert report.status == "ok", report.problems
    assert report.actions == 12


def _cells(path: Path) -> list[tuple[int, str]]:
    con = sqlite3.connect(path)
    try:
        ids = [row[0] for row in con.execute("SELECT id FROM decisions ORDER BY id")]
    finally:
        con.close()
    columns = ("action", "arguments", "reasoning", "agent_idx", "success", "fallback", "error")
    return [(i, c) for i in ids for c in columns]


@pytest.mark.parametrize("new", ["x", "\n", "ü", 7, 0.30000000000000004, b"\x00"])
def test_a_change_to_any_one_cell_is_found_at_its_step(tmp_path: Path, new: Any) -> None:
    original = _trace(tmp_path, ["a\u2028b", "tab\there", 'q"uote'], "original")
    cells = _cells(original)
    for i, (row_id, column) in enumerate(cells[:: max(1, len(cells) // 9)]):
        path = tmp_path / f"edited{i}.sqlite"
        path.write_bytes(original.read_bytes())
        con = sqlite3.connect(path)
        with con:
            before = con.execute(
                f"SELECT {column} FROM decisions WHERE id = ?", (row_id,)
            ).fetchone()
            if before[0] == new:
                continue
            con.execute(f"UPDATE decisions SET {column} = ? WHERE id = ?", (new, row_id))  # noqa: S608
        con.close()
        report = validate_trace(path)
        step = row_id >> SEQ_BITS
        assert report.status == "corrupt", (column, new)
        assert any(f"step {step}" in p for p in report.problems), report.problems


def test_sqlites_json_differing_on_every_step_changes_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _trace(tmp_path, ["one", "two"])
    # SQLite made to write its arrays otherwise (a space after each comma): no step matches.
    spaced = re.sub(
        r"json_group_array\((\w+)\)",
        r"replace(json_group_array(\1), ',', ', ')",
        validate._aggregates(),
    )
    monkeypatch.setattr(validate, "_aggregates", lambda: spaced)
    asked: list[int] = []
    exact = validate._exact_step
    monkeypatch.setattr(
        validate, "_exact_step", lambda con, step: asked.append(step) or exact(con, step)
    )
    assert validate_trace(path).status == "ok"
    assert asked == [0, 1, 2, 3]  # every step read again the writer's way
    con = sqlite3.connect(path)
    with con:
        con.execute(
            "UPDATE decisions SET reasoning = 'changed' WHERE id = ?", ((2 << SEQ_BITS) | 1,)
        )
    con.close()
    report = validate_trace(path)
    assert report.status == "corrupt"
    assert report.problems == ["step 2: state hash does not match its rows (chain broken here)"]


def test_a_trace_sqlite_cannot_read_as_json_says_each_problem_once(tmp_path: Path) -> None:
    """A blob sends validation the writer's way, row by row; what the first pass found before
    it gave up is not said twice."""
    path = _trace(tmp_path, ["one", "two"])
    con = sqlite3.connect(path)
    with con:
        con.execute(
            "UPDATE decisions SET id = ? WHERE id = ?", ((1 << SEQ_BITS) | 5, 1 << SEQ_BITS)
        )
        con.execute("UPDATE decisions SET reasoning = ? WHERE id = ?", (b"\x00", 3 << SEQ_BITS))
    con.close()
    report = validate_trace(path)
    assert report.status == "corrupt"
    assert len(report.problems) == len(set(report.problems)), report.problems
    assert "step 1: decisions are not numbered 0..n-1 in commit order" in report.problems
    assert any(p.startswith("step 1: state hash") for p in report.problems), report.problems


_CELL = st.one_of(
    st.none(),
    st.integers(-2, 2),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from(["", "null", "0", "1", "[null]", '"x"', "noop"]),
    TEXT,
    st.floats(allow_nan=False, allow_infinity=False),
    st.binary(max_size=3),
)
_COLUMNS = (
    "agent_idx",
    "action",
    "arguments",
    "reasoning",
    "metadata",
    "success",
    "fallback",
    "result",
    "error",
)


@pytest.fixture(scope="module")
def said(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _trace(tmp_path_factory.mktemp("said"), ["a\u2028b", "tab\there", 'q"uote'])


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(column=st.sampled_from(_COLUMNS), row=st.integers(0, 11), value=_CELL)
def test_the_fast_verdict_is_the_exact_one_whatever_one_cell_holds(
    said: Path, tmp_path: Path, column: str, row: int, value: Any
) -> None:
    """SQLite's arrays, the shapes told from them and the meta check asked of the rows give
    the report the writer's own encoding of every row gives, for any value in any cell."""
    path = tmp_path / "edited.sqlite"
    path.write_bytes(said.read_bytes())
    con = sqlite3.connect(path)
    try:
        with con:
            con.execute(
                f"UPDATE decisions SET {column} = ? WHERE id = ?",  # noqa: S608
                (value, ((row // 3) << SEQ_BITS) | (row % 3)),
            )
    except sqlite3.IntegrityError:  # a NOT NULL column: no trace can hold it
        return
    finally:
        con.close()
    fast = validate_trace(path).lines()
    exact_decisions = validate._decisions
    try:
        validate._decisions = lambda con, report, live: validate._decisions_in_python(con, report)
        exact = validate_trace(path).lines()
    finally:
        validate._decisions = exact_decisions
    assert fast == exact
