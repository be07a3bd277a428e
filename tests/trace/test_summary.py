"""A run's summary counts from SQL equal what its actions frame says, on every kind of trace.

Expected values are counted here with pandas over the frame (``Run.actions``), never by the
summary's code; the golden files give every kind, the older schemas and ecology fallbacks
included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.support import golden as g
from vivarium import Run
from vivarium.trace.summary import run_summary

TRACES = sorted(g.load_manifest()["traces"])


def list_as_written(con: Any) -> None:
    """Record in the trace's meta that rows wrote ``success`` and ``fallback``."""
    con.execute(
        "UPDATE meta SET value = json_insert(value, '$[#]', 'success', '$[#]', 'fallback') "
        "WHERE key = 'decision_columns_filled'"
    )


def counted(actions: pd.DataFrame) -> list[tuple[str | None, int]]:
    """(action, decisions) from the frame, in SQLite's order of the name (a missing one first)."""
    counts = actions["action"].astype(object).value_counts(dropna=False)
    return sorted(
        ((None if a is None or a != a else str(a), int(n)) for a, n in counts.items()),
        key=lambda item: (item[0] is not None, item[0] or ""),
    )


@pytest.mark.parametrize("name", TRACES)
def test_the_summary_is_the_frames_count(name: str, tmp_path: Path) -> None:
    path = g.unpack(g.load_manifest()["traces"][name]["file"], tmp_path)
    run = Run.open(path)
    actions = run.actions
    expected = counted(actions)
    summary = run_summary(path)
    assert list(summary.by_action) == expected
    assert summary.decisions == len(actions)
    assert summary.succeeded == int(actions["success"].fillna(False).astype(bool).sum())
    assert summary.fallbacks == int(actions["fallback"].astype(bool).sum())
    steps = run.steps
    last = steps.sort_values("step")["state_hash"].iloc[-1] if len(steps) else None
    assert summary.final_state_hash == last


def test_vvm_prints_the_counts_of_its_trace(tmp_path: Path) -> None:
    db = tmp_path / "p.sqlite"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vivarium.cli",
            "phase1",
            "--agents",
            "30",
            "--steps",
            "20",
            "--seed",
            "4",
            "--db",
            str(db),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    actions = Run.open(db).actions
    mix = ", ".join(
        f"{a}={n}" for a, n in sorted(actions["action"].astype(str).value_counts().items())
    )
    assert f"actions: {mix}; succeeded {int(actions['success'].sum())}/600" in out
    assert f"final state hash {Run.open(db).steps['state_hash'].iloc[-1]}" in out


def test_failures_fallbacks_and_empty_values_count_as_the_frame_reads_them(
    tmp_path: Path,
) -> None:
    # No golden run fell back: plant failures, fallbacks and a new action's name (sorted
    # between the others) and compare with the frame again.
    import sqlite3

    path = g.unpack(g.load_manifest()["traces"]["schema3/channel_random"]["file"], tmp_path)
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE decisions SET success = 0, fallback = 1 WHERE id % 7 = 0")
        con.execute("UPDATE decisions SET success = 0, fallback = 0 WHERE id % 7 = 2")
        con.execute("UPDATE decisions SET action = 'give', fallback = 1 WHERE id % 11 = 3")
        list_as_written(con)  # the writer's record of the columns rows wrote: the frames trust it
    con.close()
    actions = Run.open(path).actions
    summary = run_summary(path)
    assert summary.succeeded == int(actions["success"].fillna(False).astype(bool).sum()) < 150
    assert summary.fallbacks == int(actions["fallback"].astype(bool).sum()) > 0
    assert summary.by_action[1] == ("give", int((actions["action"] == "give").sum()))
    assert summary.decisions == len(actions) == 150


ACTION_NAMES = ["", "a", "B", "give", "noop", "z z", "é", *(f"act{i:02d}" for i in range(20))]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_decisions_are_counted_as_the_frame_reads_them(data: st.DataObject) -> None:
    """Few actions (one pass, a filter each) or many (one sort), any success and fallback
    values, the writer's meta listing them or not: the summary is the frame's count."""
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = g.unpack(g.load_manifest()["traces"]["schema4/channel_random"]["file"], Path(tmp))
        con = sqlite3.connect(path)
        ids = [i for (i,) in con.execute("SELECT id FROM decisions ORDER BY id")]
        pool = data.draw(st.lists(st.sampled_from(ACTION_NAMES), min_size=1, max_size=25))
        flags = st.sampled_from([0, 1, 2])  # NOT NULL; 2: true, as SQLite reads it
        rows = [
            (data.draw(st.sampled_from(pool)), data.draw(flags), data.draw(flags), i) for i in ids
        ]
        listed = data.draw(st.booleans())
        with con:
            con.executemany(
                "UPDATE decisions SET action = ?, success = ?, fallback = ? WHERE id = ?", rows
            )
            if listed:
                list_as_written(con)
        con.close()
        actions = Run.open(path).actions
        summary = run_summary(path)
    expected = counted(actions)
    assert list(summary.by_action) == expected
    assert summary.succeeded == int(actions["success"].fillna(False).astype(bool).sum())
    assert summary.fallbacks == int(actions["fallback"].fillna(False).astype(bool).sum())


@pytest.mark.parametrize("many", [False, True])
@pytest.mark.parametrize("relisted", [None, ("success",), ("fallback",)])
def test_each_column_is_read_as_the_frame_reads_it_on_either_path(
    tmp_path: Path, many: bool, relisted: tuple[str, ...] | None
) -> None:
    """Rows written by hand that the writer's meta does not list are read as the frame reads
    them (their default), whether the actions are counted in one pass or sorted (found by the
    property above: the sorting path read them from the rows)."""
    import sqlite3

    path = g.unpack(g.load_manifest()["traces"]["schema4/channel_random"]["file"], tmp_path)
    con = sqlite3.connect(path)
    with con:
        names = ACTION_NAMES if many else ["noop", "give"]
        ids = [i for (i,) in con.execute("SELECT id FROM decisions ORDER BY id")]
        con.executemany(
            "UPDATE decisions SET action = ?, success = 0, fallback = 1 WHERE id = ?",
            [(names[k % len(names)], i) for k, i in enumerate(ids)],
        )
        if relisted is not None:  # the meta lists every other column, and these
            listed = json.loads(
                con.execute(
                    "SELECT value FROM meta WHERE key = 'decision_columns_filled'"
                ).fetchone()[0]
            )
            con.execute(
                "UPDATE meta SET value = ? WHERE key = 'decision_columns_filled'",
                (json.dumps(sorted({*listed, *relisted})),),
            )
    con.close()
    actions = Run.open(path).actions
    summary = run_summary(path)
    assert summary.succeeded == int(actions["success"].fillna(False).astype(bool).sum())
    assert summary.fallbacks == int(actions["fallback"].fillna(False).astype(bool).sum())
    assert list(summary.by_action) == counted(actions)
