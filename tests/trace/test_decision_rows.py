"""Decisions are rows of an ordinary table: any SQLite client, and DuckDB, reads them as such.

Schema 3 stores one row per decision in ``decisions`` (the ``actions`` view adds agent ids).
Checked here: the rows are the run's decisions (counted against the frame, which reads them
through another driver, and against what the policies were seen to decide); arguments are JSON
objects that ``json_extract`` reads; the ``sqlite3`` shell and DuckDB give the same answers;
and a trace of schema 2 (decisions as per-step JSON arrays) still reads, validates and reports
its health exactly as the same run written today, and is refused for a resume in one line.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.support.old_schema import as_schema_2
from vivarium import Experiment, Run, TraceDb
from vivarium.errors import TraceError
from vivarium.trace.validate import validate_trace

ECOLOGY = {"name": "rows", "world": "ecology", "agents": 6, "steps": 8, "seed": 5}


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rows") / "ecology.sqlite"
    Experiment(**ECOLOGY).run(path, progress=False)
    return path


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def test_every_decision_is_a_row(trace: Path) -> None:
    actions = Run.open(trace).actions
    assert _sql(trace, "SELECT count(*) FROM decisions") == [(6 * 8,)]
    assert _sql(trace, "SELECT count(*) FROM actions") == [(6 * 8,)]
    by_sql = dict(_sql(trace, "SELECT action, count(*) FROM actions GROUP BY action"))
    assert by_sql == dict(Counter(actions["action"].astype(str)))
    # Rows are keyed (step << 24) | seq, in commit order, one per agent per step.
    rows = _sql(trace, "SELECT id, step, seq, agent_idx FROM actions ORDER BY id")
    assert [(i >> 24, i & 0xFFFFFF) for i, *_ in rows] == [(s, q) for _, s, q, _ in rows]
    assert [(s, q) for _, s, q, _ in rows] == [(s, q) for s in range(8) for q in range(6)]
    per_step = Counter(step for _, step, _, _ in rows)
    assert set(per_step.values()) == {6}
    # The view's agent ids are the agents table's.
    joined = _sql(
        trace,
        "SELECT a.agent_id, g.agent_id FROM actions a JOIN agents g ON g.agent_idx = a.agent_idx",
    )
    assert all(x == y for x, y in joined) and len(joined) == 48


def test_arguments_are_json_objects_sql_reads(trace: Path) -> None:
    actions = Run.open(trace).actions
    rows = _sql(trace, "SELECT id, arguments FROM decisions WHERE arguments IS NOT NULL")
    assert rows, "the ecology run has actions with arguments"
    for _, text in rows:
        assert isinstance(json.loads(text), dict)
    # json_extract of each argument equals the frame's decoded value.
    key = next(iter(json.loads(rows[0][1])))
    extracted = _sql(
        trace,
        f"SELECT json_extract(arguments, '$.{key}') FROM decisions "
        f"WHERE json_extract(arguments, '$.{key}') IS NOT NULL ORDER BY id",
    )
    from_frame = [json.loads(a)[key] for a in actions["arguments"].dropna() if key in json.loads(a)]
    assert [v for (v,) in extracted] == from_frame


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 shell on this machine")
def test_the_sqlite3_shell_reads_the_trace(trace: Path) -> None:
    out = subprocess.run(
        ["sqlite3", "-readonly", str(trace), "SELECT action, count(*) FROM actions GROUP BY 1;"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shell = {line.split("|")[0]: int(line.split("|")[1]) for line in out.splitlines()}
    assert shell == dict(_sql(trace, "SELECT action, count(*) FROM actions GROUP BY 1"))
    one = subprocess.run(
        [
            "sqlite3",
            "-readonly",
            str(trace),
            "SELECT count(*) FROM actions WHERE agent_id = 'agent_003';",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert int(one) == 8


def test_duckdb_attaches_the_trace(trace: Path) -> None:
    pytest.importorskip("duckdb")
    from vivarium.trace.duck import duckdb_connection

    con = duckdb_connection(trace)
    try:
        duck = dict(con.sql("SELECT action, count(*) FROM run.actions GROUP BY 1").fetchall())
        per_agent = con.sql(
            "SELECT agent_id, count(*) FROM run.actions GROUP BY 1 ORDER BY 1"
        ).fetchall()
        steps = con.sql("SELECT count(*) FROM run.steps").fetchone()
    finally:
        con.close()
    assert duck == dict(_sql(trace, "SELECT action, count(*) FROM actions GROUP BY 1"))
    assert per_agent == [(f"agent_{i:03d}", 8) for i in range(6)]
    assert steps == (8,)


def test_a_schema_2_trace_reads_as_the_same_run(trace: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.sqlite"
    shutil.copy(trace, old)
    as_schema_2(old)
    assert _sql(old, "PRAGMA user_version") == [(2,)]
    assert _sql(old, "SELECT name FROM sqlite_master WHERE name = 'decisions'") == []
    new_run, old_run = Run.open(trace), Run.open(old)
    for name in ("actions", "steps", "messages", "transitions"):
        a = getattr(new_run, name).drop(columns="run_id")
        b = getattr(old_run, name).drop(columns="run_id")
        assert a.astype(str).equals(b.astype(str)), name
    assert validate_trace(old).status == validate_trace(trace).status == "ok"
    assert old_run.health == new_run.health
    # Its own actions view (arrays decoded in SQL) gives the same rows as today's table.
    cols = "step, seq, agent_id, action, arguments, success, fallback, result, error"
    assert _sql(old, f"SELECT {cols} FROM actions ORDER BY id") == _sql(
        trace, f"SELECT {cols} FROM actions ORDER BY id"
    )
    with pytest.raises(TraceError, match="uses trace schema 2, which this version reads but"):
        TraceDb.for_resume(old)


def test_a_damaged_decision_breaks_the_hash_chain(trace: Path, tmp_path: Path) -> None:
    copy = tmp_path / "damaged.sqlite"
    shutil.copy(trace, copy)
    con = sqlite3.connect(copy)
    with con:
        con.execute("UPDATE decisions SET success = 1 - success WHERE id = (3 << 24) | 2")
    con.close()
    report = validate_trace(copy)
    assert report.status == "corrupt"
    assert any("step 3" in p for p in report.problems)
    # A missing row is caught too.
    gap = tmp_path / "gap.sqlite"
    shutil.copy(trace, gap)
    con = sqlite3.connect(gap)
    with con:
        con.execute("DELETE FROM decisions WHERE id = 5 << 24")
    con.close()
    assert validate_trace(gap).status == "corrupt"


def test_a_frame_read_in_two_halves_is_the_frame_read_whole(
    trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large traces are read on two threads, split at a step: the same rows, in order."""
    import vivarium.trace.frames as frames

    whole = frames.read_arrow(trace, "actions")
    monkeypatch.setattr(frames, "_SPLIT_ROWS", 10)
    queries: list[str] = []
    fetch = frames._fetch_arrow
    monkeypatch.setattr(
        frames, "_fetch_arrow", lambda path, sql: queries.append(sql) or fetch(path, sql)
    )
    halves = frames.read_arrow(trace, "actions")
    # Split, by the decisions the steps table counts (48 > 10): two reads of the rows.
    assert sum("FROM decisions" in sql for sql in queries) == 2
    assert halves.equals(whole)
    assert halves.column("step").to_pylist() == [s for s in range(8) for _ in range(6)]


def test_columns_no_decision_filled_read_as_their_defaults(trace: Path) -> None:
    """Only filled columns are read; the others come back null (or 1 / false) all the same."""
    actions = Run.open(trace).actions
    stored = _sql(
        trace,
        "SELECT count(reasoning), count(result), count(error), sum(success), sum(fallback) "
        "FROM decisions",
    )[0]
    assert actions["reasoning"].notna().sum() == stored[0]
    assert actions["result"].notna().sum() == stored[1]
    assert actions["error"].notna().sum() == stored[2]
    assert int(actions["success"].sum()) == stored[3]
    assert int(actions["fallback"].sum()) == stored[4]


def test_arguments_come_out_as_typed_columns(trace: Path) -> None:
    run = Run.open(trace)
    actions, arguments = run.actions, run.arguments
    assert len(arguments) == len(actions)
    assert arguments[["step", "seq"]].equals(actions[["step", "seq"]])
    assert (arguments["agent_id"].astype(str) == actions["agent_id"].astype(str)).all()
    decoded = [json.loads(a) if isinstance(a, str) else {} for a in actions["arguments"]]
    keys = sorted({k for d in decoded for k in d})
    assert keys and set(keys) <= set(arguments.columns)
    for key in keys:
        expected = [d.get(key) for d in decoded]
        got = [None if v is None or v != v else v for v in arguments[key].astype(object)]
        assert got == expected, key
        if all(isinstance(v, int) for v in expected if v is not None):
            assert str(arguments[key].dtype) == "Int64", key


def test_arguments_of_one_key_with_two_types_say_so(tmp_path: Path) -> None:
    import pyarrow as pa

    from vivarium.trace.frames import arguments_table

    actions = pa.table(
        {
            "step": [0, 0],
            "seq": [0, 1],
            "agent_id": ["a", "b"],
            "action": ["x", "x"],
            "arguments": ['{"to":1}', '{"to":"agent_2"}'],
        }
    )
    with pytest.raises(TraceError, match="arguments cannot be read as typed columns"):
        arguments_table(actions)
    empty = arguments_table(actions.slice(0, 0))
    assert empty.num_rows == 0 and "step" in empty.column_names


def test_an_argument_named_like_a_sweep_column_keeps_both() -> None:
    """A sweep's run columns stay; an argument of the same name gets the ``argument_`` prefix.
    Rows stay aligned: one object per decision, an empty text being no arguments."""
    import pyarrow as pa

    from vivarium.trace.frames import arguments_table

    actions = pa.table(
        {
            "run_id": ["r1", "r2", "r2"],
            "seed": [11, 22, 22],
            "step": [0, 0, 1],
            "seq": [0, 0, 0],
            "agent_id": ["a", "a", "a"],
            "action": ["plant", "plant", "wait"],
            "arguments": ['{"seed":"wheat"}', '{"seed":"rye"}', ""],
        }
    )
    table = arguments_table(actions).to_pydict()
    assert table["seed"] == [11, 22, 22]
    assert table["argument_seed"] == ["wheat", "rye", None]
    shifted = actions.set_column(
        6, "arguments", pa.array(['{"seed":"a"} {"seed":"b"}', '{"seed":"c"}', ""])
    )
    with pytest.raises(TraceError, match="3 decisions"):
        arguments_table(shifted)


def test_arguments_of_many_small_chunks_parse_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver hands ~1,000 rows a chunk; they are parsed in a few large groups, and the
    rows, nulls and empty texts come out where they were, whatever the grouping."""
    import random

    import pyarrow as pa

    from vivarium.trace import frames

    rng = random.Random(7)
    texts: list[str | None] = []
    for i in range(5_000):
        kind = rng.random()
        if kind < 0.3:
            texts.append(None)
        elif kind < 0.4:
            texts.append("")
        else:
            texts.append(f'{{"value":{i},"to":"agent_{i % 7}"}}')
    texts[1000:1500] = [None] * 500  # a chunk with no arguments at all
    bounds = [0, 700, 1000, 1500, 2600, 2601, 4000, 5000]
    chunked = pa.chunked_array(
        [pa.array(texts[a:b], pa.string()) for a, b in zip(bounds, bounds[1:], strict=False)]
    )
    n = len(texts)
    actions = pa.table(
        {"step": list(range(n)), "seq": [0] * n, "agent_id": ["a"] * n, "action": ["x"] * n,
         "arguments": chunked}
    )  # fmt: skip
    monkeypatch.setattr(frames, "_PARSE_ROWS", 1_200)  # several groups of several chunks
    assert len(frames._regrouped(chunked.chunks)) > 2
    table = frames.arguments_table(actions).to_pydict()
    expected_value = [i if t else None for i, t in enumerate(texts)]
    expected_to = [f"agent_{i % 7}" if t else None for i, t in enumerate(texts)]
    assert table["value"] == expected_value
    assert table["to"] == expected_to
    assert table["step"] == list(range(n))


def test_validate_finds_values_in_a_column_the_meta_does_not_list(
    trace: Path, tmp_path: Path
) -> None:
    """The frames read only the columns the meta lists: one it leaves out is a damaged file."""
    copy = tmp_path / "unlisted.sqlite"
    shutil.copy(trace, copy)
    con = sqlite3.connect(copy)
    with con:
        con.execute("UPDATE decisions SET result = '{}' WHERE id = 1")
        con.execute(
            "UPDATE meta SET value = ? WHERE key = 'decision_columns_filled'",
            (
                json.dumps(
                    [
                        c
                        for c in json.loads(
                            con.execute(
                                "SELECT value FROM meta WHERE key = 'decision_columns_filled'"
                            ).fetchone()[0]
                        )
                        if c != "result"
                    ]
                ),
            ),
        )
    con.close()
    report = validate_trace(copy)
    assert report.status == "corrupt"
    assert any("column result has values" in p for p in report.problems)
