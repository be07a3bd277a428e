"""The trace file: byte-identical, validated, self-describing, and safe against misuse."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

from vivarium import Experiment, Run, TraceDb, TraceError
from vivarium.trace.schema import SCHEMA_VERSION
from vivarium.trace.validate import validate_trace

ROOT = Path(__file__).resolve().parents[1]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_in_subprocess(db: Path, hashseed: str, extra: str = "") -> None:
    code = (
        "from vivarium import Experiment\n"
        f"Experiment(name='det', agents=7, steps=40, seed=11{extra}).run({str(db)!r}, progress=False)\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT, timeout=300)


def test_same_config_gives_byte_identical_db_across_processes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    run_in_subprocess(a, "1")
    run_in_subprocess(b, "98765")
    assert sha(a) == sha(b)
    assert not Path(str(a) + "-wal").exists()


def test_byte_identical_with_posts_and_shuffle(tmp_path: Path) -> None:
    extra = ", action_space=['noop', 'emit_event', 'post_message'], order='shuffle'"
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    run_in_subprocess(a, "3", extra)
    run_in_subprocess(b, "4", extra)
    assert sha(a) == sha(b)


def test_different_seed_gives_different_trace(tmp_path: Path) -> None:
    a = Experiment(agents=3, steps=5, seed=1).run(tmp_path / "a.sqlite")
    b = Experiment(agents=3, steps=5, seed=2).run(tmp_path / "b.sqlite")
    assert a.steps["state_hash"].iloc[-1] != b.steps["state_hash"].iloc[-1]


@pytest.mark.parametrize("order", ["sorted", "shuffle"])
def test_batch_and_per_agent_paths_write_identical_files(tmp_path: Path, order: str) -> None:
    exp = Experiment(agents=25, steps=30, seed=4, order=order)
    fast = exp.run(tmp_path / "fast.sqlite")
    trace = TraceDb(tmp_path / "slow.sqlite")
    engine = exp.build(trace)
    engine.config = engine.config.model_copy(update={"batch": False})
    engine.run(exp.config.steps)
    trace.close()
    assert sha(fast.path) == sha(tmp_path / "slow.sqlite")


def test_actions_frame_has_one_row_per_decision_with_proper_dtypes(db: Path) -> None:
    run = Experiment(agents=4, steps=6, seed=42).run(db)
    df = run.actions
    assert len(df) == 24
    assert df["step"].tolist() == [s for s in range(6) for _ in range(4)]
    assert isinstance(df["agent_id"].dtype, pd.CategoricalDtype)
    assert isinstance(df["action"].dtype, pd.CategoricalDtype)
    assert df["success"].dtype == bool and df["step"].dtype == "int64"
    assert set(df["action"]) <= {"noop", "emit_event"}
    emits = df[df["action"] == "emit_event"]
    assert emits["arguments"].str.contains('"seen_time_step"').all()
    assert df.loc[df["action"] == "noop", "arguments"].isna().all()


def test_sql_view_gives_one_row_per_decision(db: Path) -> None:
    run = Experiment(agents=3, steps=4, seed=42).run(db)
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT step, seq, agent_id, action, arguments, success FROM actions"
    ).fetchall()
    con.close()
    frame = run.actions
    assert len(rows) == 12
    assert [r[2] for r in rows] == frame["agent_id"].tolist()
    assert [r[3] for r in rows] == frame["action"].tolist()
    assert [r[5] for r in rows] == [1] * 12


def test_frames_round_trip_through_parquet(tmp_path: Path) -> None:
    run = Experiment(
        agents=3, steps=10, seed=9, action_space=["noop", "emit_event", "post_message"]
    ).run(tmp_path / "r.sqlite")
    paths = run.to_parquet(tmp_path / "out")
    assert set(paths) == {"actions", "messages", "llm_calls", "transitions", "steps", "agents"}
    for name, path in paths.items():
        back = pd.read_parquet(path)
        pd.testing.assert_frame_equal(back, run.frame(name), check_categorical=False)
    pl_actions = pl.read_parquet(paths["actions"])
    assert pl_actions.equals(run.to_polars("actions"))


def test_parquet_export_never_replaces_another_runs_frames(tmp_path: Path) -> None:
    first = Experiment(name="a", agents=2, steps=3, seed=1).run(tmp_path / "a.sqlite")
    second = Experiment(name="a", agents=2, steps=3, seed=2).run(tmp_path / "b.sqlite")
    out = tmp_path / "out"
    first.to_parquet(out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(TraceError, match=f"holds frames of run {first.run_id}.*overwrite=True"):
        second.to_parquet(out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing touched
    first.to_parquet(out)  # the same run may export again
    paths = second.to_parquet(out, overwrite=True)
    assert pd.read_parquet(paths["agents"])["seed"].tolist() == second.agents["seed"].tolist()


def test_parquet_export_refuses_a_folder_of_foreign_files(tmp_path: Path) -> None:
    run = Experiment(agents=2, steps=3).run(tmp_path / "r.sqlite")
    out = tmp_path / "out"
    out.mkdir()
    (out / "actions.parquet").write_text("my notes", encoding="utf-8")
    with pytest.raises(TraceError, match="a file Vivarium did not write"):
        run.to_parquet(out)
    assert (out / "actions.parquet").read_text(encoding="utf-8") == "my notes"
    assert sorted(p.name for p in out.iterdir()) == ["actions.parquet"]


def test_to_polars_returns_every_frame(db: Path) -> None:
    run = Experiment(agents=2, steps=3).run(db)
    frames = run.to_polars()
    assert isinstance(frames, dict) and frames["actions"].height == 6
    assert frames["actions"].schema["agent_id"] == pl.Categorical or str(
        frames["actions"].schema["agent_id"]
    ).startswith("Categorical")


def test_validate_ok_then_catches_tampering(db: Path) -> None:
    Experiment(agents=3, steps=5, seed=42).run(db)
    assert validate_trace(db).status == "ok"
    con = sqlite3.connect(db)
    key = (2 << 24) | 1  # step 2, the second decision
    action = con.execute("SELECT action FROM decisions WHERE id = ?", (key,)).fetchone()[0]
    flipped = "emit_event" if action == "noop" else "noop"
    con.execute("UPDATE decisions SET action = ? WHERE id = ?", (flipped, key))
    con.commit()
    con.close()
    report = validate_trace(db)
    assert report.status == "corrupt"
    assert any("step 2" in p for p in report.problems)


def test_validate_catches_a_deleted_step(db: Path) -> None:
    Experiment(agents=2, steps=5, seed=42).run(db)
    con = sqlite3.connect(db)
    con.execute("DELETE FROM steps WHERE step = 1")
    con.commit()
    con.close()
    assert validate_trace(db).status == "corrupt"


def test_validate_catches_a_dropped_message(tmp_path: Path) -> None:
    db = tmp_path / "m.sqlite"
    Experiment(agents=3, steps=6, seed=1, action_space=["post_message", "emit_event"]).run(db)
    con = sqlite3.connect(db)
    n = con.execute("SELECT count(*) FROM messages").fetchone()[0]
    con.execute("DELETE FROM messages WHERE id = (SELECT max(id) FROM messages)")
    con.commit()
    con.close()
    assert n >= 0
    report = validate_trace(db)
    # post_message with no content fails, so there may be no messages: then nothing to drop.
    assert report.status == ("corrupt" if n else "ok")


def test_non_vivarium_sqlite_file_gives_clear_error(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(TraceError, match="not a Vivarium trace"):
        Run.open(other)
    with pytest.raises(TraceError, match="not a Vivarium trace"):
        Experiment(agents=1, steps=1).run(other)  # never overwrites a foreign file
    assert sqlite3.connect(other).execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_text_file_and_missing_file_give_clear_errors(tmp_path: Path) -> None:
    txt = tmp_path / "notes.sqlite"
    txt.write_text("hello")
    with pytest.raises(TraceError, match="not an SQLite database"):
        Run.open(txt)
    with pytest.raises(TraceError, match="no trace file"):
        Run.open(tmp_path / "missing.sqlite")


def test_newer_schema_is_refused(db: Path) -> None:
    Experiment(agents=1, steps=1).run(db)
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.commit()
    con.close()
    with pytest.raises(TraceError, match="newer than this Vivarium"):
        Run.open(db)


def test_second_writer_on_same_file_is_refused(db: Path) -> None:
    first = TraceDb(db)
    try:
        with pytest.raises(TraceError, match="being written by another run"):
            TraceDb(db)
    finally:
        first.close()


def test_rerun_replaces_own_trace(db: Path) -> None:
    Experiment(agents=2, steps=3, seed=1).run(db)
    assert len(Experiment(agents=2, steps=3, seed=1).run(db).actions) == 6  # the same run
    # Another run (4 steps: another run id) replaces it only when asked to.
    with pytest.raises(TraceError, match="holds run experiment-"):
        Experiment(agents=2, steps=4, seed=1).run(db)
    run = Experiment(agents=2, steps=4, seed=1).run(db, overwrite=True)
    assert len(run.actions) == 8


def test_nondeterministic_timestamps_record_wall_time(db: Path) -> None:
    run = Experiment(agents=2, steps=3, deterministic_timestamps=False).run(db)
    assert run.steps["wall_time"].notna().all()
    assert run.metadata["created_at"] is not None
    det = Experiment(agents=2, steps=3).run(db.with_name("det.sqlite"))
    assert det.steps["wall_time"].isna().all() and det.metadata["created_at"] is None


class _Mover:
    """Moves a -> b -> a each step; the move back is routine when ``routine``."""

    def __init__(self, routine: bool) -> None:
        self.routine = routine

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: dict):
        from vivarium import ActionRequest

        moves = [
            {"from_state": "a", "to_state": "b", "trigger": "go"},
            {"from_state": "b", "to_state": "a", "trigger": "loop", "routine": self.routine},
        ]
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="noop",
            metadata={"transitions": moves},
        )


def _mover_run(db: Path, routine: bool) -> Run:
    from vivarium import WorldEngine, WorldEngineConfig
    from vivarium.worlds import InMemoryChannel

    trace = TraceDb(db)
    WorldEngine(
        WorldEngineConfig(run_id="m"), {"x": _Mover(routine)}, InMemoryChannel(), trace_db=trace
    ).run(3)
    trace.close()
    return Run.open(db)


def test_routine_flags_are_recorded_hashed_and_validated(tmp_path: Path) -> None:
    run = _mover_run(tmp_path / "r.sqlite", routine=True)
    assert run.transitions["routine"].tolist() == [False, True] * 3
    assert run.validate().status == "ok"
    with sqlite3.connect(tmp_path / "r.sqlite") as con:  # flipping a flag breaks the chain
        con.execute("UPDATE transitions SET routine = 0 WHERE id = 2")
    assert validate_trace(tmp_path / "r.sqlite").status == "corrupt"


def test_a_trace_without_the_routine_column_reads_and_validates(tmp_path: Path) -> None:
    # A trace written before the column existed: no move was routine, and its hashes did not
    # include the flag. Reading gives routine False throughout; validation still passes.
    db = tmp_path / "old.sqlite"
    _mover_run(db, routine=False)
    with sqlite3.connect(db) as con:
        con.execute("ALTER TABLE transitions DROP COLUMN routine")
    run = Run.open(db)
    assert run.transitions["routine"].tolist() == [False] * 6
    assert run.validate().status == "ok"
