"""SQL written for the original aam engine's trace runs unchanged on ours.

Source: Mahdi-s/vivarium ``src/aam/persistence.py`` (the ``trace`` and ``messages`` tables, and
the queries of ``fetch_trace_events``, ``fetch_recent_messages``), ``src/aam/export.py`` and
``src/aam/world_engine.py`` (what a trace row holds). The queries below are the original's,
run with the standard library's ``sqlite3`` only; the expected values come from the run's frames.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from vivarium import Experiment, Run
from vivarium.trace.schema import AAM_TRACE_COLUMNS

# The original's queries, as persistence.py and export.py write them.
FETCH_TRACE_EVENTS = """
SELECT trace_id, run_id, time_step, agent_id, action_type,
       info_json, outcome_json, created_at, environment_state_hash
FROM trace
WHERE run_id = ? AND time_step >= ? AND time_step <= ?
ORDER BY time_step ASC, created_at ASC;
"""
FETCH_RECENT_MESSAGES = """
SELECT message_id, run_id, time_step, author_id, content, created_at
FROM messages
WHERE run_id = ? AND time_step <= ?
ORDER BY time_step DESC, created_at DESC
LIMIT ?;
"""
EXPORT_MESSAGES = """
SELECT message_id, run_id, time_step, author_id, content, created_at
FROM messages
WHERE run_id = ?
ORDER BY time_step ASC, created_at ASC;
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    db = tmp_path_factory.mktemp("aam") / "t.sqlite"
    return Experiment(
        name="aam", agents=4, steps=6, seed=42, action_space=["noop", "emit_event", "post_message"]
    ).run(db)


def connect(run: Run) -> sqlite3.Connection:
    con = sqlite3.connect(run.path)
    con.row_factory = sqlite3.Row  # as the original's TraceDb.connect
    return con


def test_trace_has_the_originals_columns(run: Run) -> None:
    """aam persistence.py: ``CREATE TABLE trace (trace_id, run_id, time_step, agent_id,
    action_type, info_json, outcome_json, created_at, environment_state_hash)``."""
    with connect(run) as con:
        cursor = con.execute("SELECT * FROM trace")
        assert tuple(d[0] for d in cursor.description) == AAM_TRACE_COLUMNS
        assert AAM_TRACE_COLUMNS == (
            "trace_id",
            "run_id",
            "time_step",
            "agent_id",
            "action_type",
            "info_json",
            "outcome_json",
            "created_at",
            "environment_state_hash",
        )
        (count,) = con.execute(
            "SELECT COUNT(*) FROM trace WHERE run_id = ?;", (run.run_id,)
        ).fetchone()
    assert count == len(run.actions) == 24


def test_fetch_trace_events_returns_the_runs_decisions(run: Run) -> None:
    """aam world_engine.py: ``info_json`` is the ActionRequest, ``outcome_json`` the ActionResult
    (``success, data, error, trace_id``), both JSON with sorted keys and no spaces; the
    deterministic ``created_at`` is ``time_step + index_in_commit_order / 1000``; every event
    of a step carries the step's state hash."""
    actions = run.actions
    hashes = dict(zip(run.steps["step"], run.steps["state_hash"], strict=True))
    with connect(run) as con:
        rows = con.execute(FETCH_TRACE_EVENTS, (run.run_id, 0, 5)).fetchall()
    assert len(rows) == len(actions)
    for row, (_, a) in zip(rows, actions.iterrows(), strict=True):
        assert (row["run_id"], row["time_step"], row["agent_id"], row["action_type"]) == (
            run.run_id,
            a["step"],
            a["agent_id"],
            a["action"],
        )
        assert row["created_at"] == float(a["step"]) + a["seq"] / 1000.0
        assert isinstance(row["created_at"], float)
        assert row["environment_state_hash"] == hashes[a["step"]]
        arguments = json.loads(a["arguments"]) if isinstance(a["arguments"], str) else {}
        info = {
            "action_name": a["action"],
            "agent_id": a["agent_id"],
            "arguments": arguments,
            "metadata": json.loads(a["metadata"]),
            "reasoning": None,
            "run_id": run.run_id,
            "time_step": int(a["step"]),
        }
        assert row["info_json"] == json.dumps(info, sort_keys=True, separators=(",", ":"))
        outcome = json.loads(row["outcome_json"])
        assert list(outcome) == ["data", "error", "success", "trace_id"]
        assert outcome["success"] is bool(a["success"]) and outcome["error"] is None
        assert outcome["trace_id"] == row["trace_id"]
        result = json.loads(a["result"]) if isinstance(a["result"], str) else None
        assert outcome["data"] == result
    assert len({r["trace_id"] for r in rows}) == len(rows)  # the primary key
    with connect(run) as con:  # a window of steps, as replay asks for
        window = con.execute(FETCH_TRACE_EVENTS, (run.run_id, 2, 3)).fetchall()
    assert {r["time_step"] for r in window} == {2, 3} and len(window) == 8


def test_messages_have_the_originals_columns(run: Run) -> None:
    """aam persistence.py: ``messages (message_id, run_id, time_step, author_id, content,
    created_at)``; ``fetch_recent_messages`` returns the latest ``limit`` messages up to a step,
    and export.py all of a run's messages in order."""
    frame = run.messages
    assert len(frame) > 2
    with connect(run) as con:
        exported = con.execute(EXPORT_MESSAGES, (run.run_id,)).fetchall()
        recent = con.execute(FETCH_RECENT_MESSAGES, (run.run_id, 3, 2)).fetchall()
    assert [(r["time_step"], r["author_id"], r["content"]) for r in exported] == list(
        zip(frame["step"], frame["author_id"], frame["content"], strict=True)
    )
    assert {r["run_id"] for r in exported} == {run.run_id}
    assert len({r["message_id"] for r in exported}) == len(exported)
    assert all(isinstance(r["created_at"], float) for r in exported)
    upto3 = frame[frame["step"] <= 3]
    assert [r["content"] for r in reversed(recent)] == list(upto3["content"][-2:])


def test_our_own_messages_columns_are_unchanged(run: Run) -> None:
    """The original's columns are added beside ours (generated, no space in the file): the
    frames and our own SQL read what they read before."""
    with connect(run) as con:
        ours = [r[1] for r in con.execute("PRAGMA table_info(messages)")]
        every = [r[1] for r in con.execute("PRAGMA table_xinfo(messages)")]
    assert ours[:6] == ["id", "step", "seq", "author_id", "channel", "content"]
    assert every[6:] == ["message_id", "run_id", "time_step", "created_at"]
    assert list(run.messages.columns) == [
        "run_id",
        "step",
        "seq",
        "author_id",
        "channel",
        "content",
    ]


def test_a_resumed_trace_gets_the_original_columns_once(tmp_path: Path) -> None:
    """A run resumed from a trace written before these columns existed gains them, once; one
    resumed from a trace that has them keeps a single set."""
    from vivarium import TraceDb
    from vivarium.experiment.runner import resume_run

    exp = Experiment(
        name="r", agents=3, steps=6, seed=1, checkpoint_every=2, action_space=["post_message"]
    )
    for older in (True, False):
        db = tmp_path / f"r{older}.sqlite"
        trace = TraceDb(db)
        exp.build(trace).run(3, finish=False)
        trace.close()
        if older:  # as the previous version wrote it
            with sqlite3.connect(db) as con:
                con.execute("DROP VIEW trace")
                for column in ("message_id", "run_id", "time_step", "created_at"):
                    con.execute(f"ALTER TABLE messages DROP COLUMN {column}")
        resumed = resume_run(db)
        with sqlite3.connect(db) as con:
            columns = [r[1] for r in con.execute("PRAGMA table_xinfo(messages)")]
            (n,) = con.execute(
                "SELECT COUNT(*) FROM trace WHERE run_id = ?", (resumed.run_id,)
            ).fetchone()
            (m,) = con.execute(
                "SELECT COUNT(*) FROM messages WHERE run_id = ?", (resumed.run_id,)
            ).fetchone()
        assert columns.count("run_id") == 1 and n == 18 and m == 18
