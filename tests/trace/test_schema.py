"""One column schema: the DDL, the frames' types and the analysis schemas all come from it."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from vivarium.trace.db import TraceDb
from vivarium.trace.frames import frame_schema, read_arrow
from vivarium.trace.records import ACTION_COLUMNS, StepRecord
from vivarium.trace.run import TraceRun
from vivarium.trace.schema import (
    DDL,
    FRAME_NAMES,
    SCHEMA,
    STEPS_V2,
    TABLES,
    ddl_of,
    frame_columns,
)
from vivarium.types import RunMetadata

# The DDL of schema 2 as it was written out by hand before it was derived from the
# declarations: ``ddl_of(2)`` must still give it (tests write schema-2 files with it), and
# schema 3 must keep the file layout below.
LITERAL_DDL = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    world TEXT NOT NULL,
    policy TEXT NOT NULL,
    seed TEXT NOT NULL,
    agents INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    scheduling TEXT NOT NULL,
    vivarium_version TEXT NOT NULL,
    config_json TEXT NOT NULL,
    status TEXT NOT NULL,
    steps_done INTEGER NOT NULL,
    error TEXT,
    created_at TEXT,
    finished_at TEXT
);
CREATE TABLE agents (
    agent_idx INTEGER PRIMARY KEY,
    agent_id TEXT NOT NULL UNIQUE,
    policy TEXT NOT NULL,
    seed TEXT
);
CREATE TABLE steps (
    step INTEGER PRIMARY KEY,
    n_actions INTEGER NOT NULL,
    n_messages INTEGER NOT NULL,
    world_digest TEXT NOT NULL,
    state_hash TEXT NOT NULL,
    wall_time TEXT,
    clock REAL,
    agent_idx TEXT,

    action TEXT,
    arguments TEXT,
    reasoning TEXT,
    metadata TEXT,
    success TEXT,
    result TEXT,
    error TEXT,
    fallback TEXT
);
CREATE VIEW actions AS
SELECT
    (s.step << 24) | j.key AS id,
    s.step AS step,
    j.key AS seq,
    j.value AS agent_idx,
    a.agent_id AS agent_id,
    json_extract(s.action, '$[' || j.key || ']') AS action,
    json_extract(s.arguments, '$[' || j.key || ']') AS arguments,
    json_extract(s.reasoning, '$[' || j.key || ']') AS reasoning,
    json_extract(s.metadata, '$[' || j.key || ']') AS metadata,
    json_extract(s.success, '$[' || j.key || ']') AS success,
    COALESCE(json_extract(s.fallback, '$[' || j.key || ']'), 0) AS fallback,
    json_extract(s.result, '$[' || j.key || ']') AS result,
    json_extract(s.error, '$[' || j.key || ']') AS error
FROM steps AS s
JOIN json_each(s.agent_idx) AS j
LEFT JOIN agents AS a ON a.agent_idx = j.value;
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    author_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    content TEXT NOT NULL
);
CREATE TABLE llm_calls (
    id INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    agent_idx INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    model TEXT,
    request_hash TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    cost REAL,
    latency_ms REAL,
    cache_hit INTEGER,
    finish_reason TEXT,
    error TEXT
);
CREATE TABLE transitions (
    id INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    agent_idx INTEGER NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    trigger TEXT,
    routine INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE checkpoints (
    step INTEGER PRIMARY KEY,
    state_hash TEXT NOT NULL,
    world_state TEXT NOT NULL,
    agent_states TEXT NOT NULL
);
"""


def _write_trace(path: Path, *, with_rows: bool) -> None:
    """A two-agent, one-step trace; ``with_rows`` adds a message, an LLM call and a move."""
    meta = RunMetadata(
        run_id="schema-test",
        name="schema",
        world="channel",
        policy="random",
        seed=1,
        agents=2,
        steps=1,
        scheduling="sequential",
        vivarium_version="test",
    )
    with TraceDb(path) as trace:
        trace.begin_run(meta, [(0, "a0", "random", "1"), (1, "a1", "random", "2")])
        record = StepRecord(step=0, world_digest="d", state_hash="h")
        record.add_action(0, "post", '{"text": "hi"}', None, None, True, "ok", None)
        record.add_action(1, "noop", None, None, None, False, None, "err", fallback=True)
        if with_rows:
            record.messages.append((0, "a0", "general", "hi"))
            record.llm_calls.append((1, 1, "m", "r", 10, 5, 0.1, 12.5, 0, "stop", None))
            record.transitions.append((1, None, "start", "go", 0))
        trace.write_step(record)
        trace.finish_run("complete")


LITERAL_DDL_V3 = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    world TEXT NOT NULL,
    policy TEXT NOT NULL,
    seed TEXT NOT NULL,
    agents INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    scheduling TEXT NOT NULL,
    vivarium_version TEXT NOT NULL,
    config_json TEXT NOT NULL,
    status TEXT NOT NULL,
    steps_done INTEGER NOT NULL,
    error TEXT,
    created_at TEXT,
    finished_at TEXT
);
CREATE TABLE agents (
    agent_idx INTEGER PRIMARY KEY,
    agent_id TEXT NOT NULL UNIQUE,
    policy TEXT NOT NULL,
    seed TEXT
);
CREATE TABLE steps (
    step INTEGER PRIMARY KEY,
    n_actions INTEGER NOT NULL,
    n_messages INTEGER NOT NULL,
    world_digest TEXT NOT NULL,
    state_hash TEXT NOT NULL,
    wall_time TEXT,
    clock REAL
);
CREATE TABLE decisions (
    id INTEGER PRIMARY KEY,

    agent_idx INTEGER NOT NULL,
    action TEXT NOT NULL,
    arguments TEXT,
    reasoning TEXT,
    metadata TEXT,
    success INTEGER NOT NULL DEFAULT 1,
    fallback INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT
);
CREATE VIEW actions AS
SELECT
    d.id,
    d.id >> 24 AS step,
    d.id & 16777215 AS seq,
    d.agent_idx,
    a.agent_id,
    d.action,
    d.arguments,
    d.reasoning,
    d.metadata,
    d.success,
    d.fallback,
    d.result,
    d.error
FROM decisions AS d
LEFT JOIN agents AS a ON a.agent_idx = d.agent_idx;
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    author_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    content TEXT NOT NULL
);
CREATE TABLE llm_calls (
    id INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    agent_idx INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    model TEXT,
    request_hash TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    cost REAL,
    latency_ms REAL,
    cache_hit INTEGER,
    finish_reason TEXT,
    error TEXT,
    messages TEXT,
    tools INTEGER,
    params TEXT,
    reply INTEGER
);
CREATE TABLE llm_texts (
    id INTEGER PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL
);
CREATE TABLE transitions (
    id INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    agent_idx INTEGER NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    trigger TEXT,
    routine INTEGER NOT NULL DEFAULT 0,
    reason TEXT
);
CREATE TABLE checkpoints (
    step INTEGER PRIMARY KEY,
    state_hash TEXT NOT NULL,
    world_state TEXT NOT NULL,
    agent_states TEXT NOT NULL
);
"""


# Schema 4 is schema 3 but for the texts' digest column (a resume hashes the texts again).
LITERAL_DDL_V4 = LITERAL_DDL_V3.replace("    digest TEXT NOT NULL UNIQUE,\n", "")


def test_derived_ddl_is_the_literal_ddl_of_each_version() -> None:
    assert ddl_of(2) == LITERAL_DDL
    assert ddl_of(3) == LITERAL_DDL_V3
    assert LITERAL_DDL_V4 != LITERAL_DDL_V3
    assert DDL == ddl_of(4) == LITERAL_DDL_V4


def test_every_table_is_declared_once() -> None:
    names = [table.name for table in SCHEMA]
    assert len(names) == len(set(names))
    assert set(TABLES) <= {*names, "actions"}
    # The records encode the decision columns in the order schema 2 stored them.
    stored = [c.name for c in STEPS_V2.columns][-len(ACTION_COLUMNS) :]
    assert stored == list(ACTION_COLUMNS)


@pytest.mark.parametrize("with_rows", [True, False], ids=["rows", "empty-tables"])
def test_frames_have_the_types_the_schema_declares(tmp_path: Path, with_rows: bool) -> None:
    path = tmp_path / "t.sqlite"
    _write_trace(path, with_rows=with_rows)
    for name in FRAME_NAMES:
        assert read_arrow(path, name, run_id="schema-test").schema == frame_schema(name), name
        assert read_arrow(path, name).schema == frame_schema(name, run_id=False), name
        table = read_arrow(path, name)
        assert table.column_names == [c.frame_name for c in frame_columns(name)]
    actions = read_arrow(path, "actions").to_pylist()
    assert [a["agent_id"] for a in actions] == ["a0", "a1"]
    assert [a["fallback"] for a in actions] == [False, True]


def test_analysis_schemas_are_the_frames_columns() -> None:
    from vivarium.analysis.loading import TABLE_SCHEMAS

    assert list(TABLE_SCHEMAS) == list(FRAME_NAMES)
    for name in FRAME_NAMES:
        columns = [c.frame_name for c in frame_columns(name)]
        if name == "agents":  # the agent's own seed, apart from a sweep's run seed
            columns = ["agent_seed" if c == "seed" else c for c in columns]
        assert list(TABLE_SCHEMAS[name]) == ["run_id", *columns], name


def test_trace_run_reads_without_the_experiment_layer(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    _write_trace(path, with_rows=True)
    run = TraceRun.open(path)
    assert run.run_id == "schema-test" and run.metadata["status"] == "complete"
    assert len(run.actions) == 2 and len(run.messages) == 1
    assert repr(run).startswith("Run(run_id=schema-test")
    assert pickle.loads(pickle.dumps(run)).run_id == "schema-test"


def test_public_run_is_the_trace_reader_with_the_experiment_layer(tmp_path: Path) -> None:
    from vivarium import Run

    path = tmp_path / "t.sqlite"
    _write_trace(path, with_rows=False)
    run = Run.open(path)
    assert type(run) is Run and isinstance(run, TraceRun)
    assert callable(run.resume) and callable(run.summary)
    assert type(pickle.loads(pickle.dumps(run))) is Run
