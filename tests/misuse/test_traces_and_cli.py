"""Misuse of traces and the command line: each ends in a right result or one clear line, and
no trace is lost."""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import pytest

from tests.conftest import run_cli
from vivarium import Experiment, Run, TraceDb
from vivarium.cli import main
from vivarium.errors import TraceError, TracePathWarning


def one_error_line(out: object) -> str:
    """The single stderr line of a refused command (exit 2)."""
    assert out.returncode == 2, (out.stdout, out.stderr)  # type: ignore[attr-defined]
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]  # type: ignore[attr-defined]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    db = tmp_path / "mine.sqlite"
    Experiment(name="mine", agents=2, steps=3, seed=4).run(db)
    return db


def test_relative_config_path_from_the_wrong_folder(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "cfg.yaml").write_text("name: rel\nagents: 2\nsteps: 3\nseed: 7\n")
    line = one_error_line(run_cli("run", "cfg.yaml", cwd=tmp_path))
    assert "config file not found: cfg.yaml" in line
    ok = run_cli("run", "cfg.yaml", cwd=project)  # from the right folder: the right run
    assert ok.returncode == 0, ok.stderr
    assert Run.open(project / "runs" / "rel.sqlite").metadata["seed"] == "7"


def test_a_reused_name_with_another_seed_keeps_both_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = Experiment(name="study", agents=2, steps=3, seed=1).run()
    with pytest.warns(TracePathWarning, match="runs/study.sqlite holds run"):
        second = Experiment(name="study", agents=2, steps=3, seed=2).run()
    assert Run.open(first.path).metadata["seed"] == "1"
    assert Run.open(second.path).metadata["seed"] == "2"
    assert first.path != second.path


def test_an_explicit_db_reused_in_a_seed_loop_is_refused_not_replaced(tmp_path: Path) -> None:
    db = tmp_path / "same.sqlite"
    Experiment(name="x", agents=2, steps=3, seed=1).run(db)
    before = db.read_bytes()
    with pytest.raises(TraceError, match="holds run x-.*overwrite=True.*another path"):
        Experiment(name="x", agents=2, steps=3, seed=2).run(db)
    assert db.read_bytes() == before


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p.write_text("my notes, not a trace\n"), "not a Vivarium trace"),
        (lambda p: p.mkdir(), "is a directory"),
        (
            lambda p: sqlite3.connect(p).executescript("CREATE TABLE orders (id INT);").close(),
            "an SQLite database but not a Vivarium trace",
        ),
    ],
    ids=["text-file", "directory", "other-sqlite"],
)
def test_db_pointing_at_something_else(tmp_path: Path, make: object, needle: str) -> None:
    target = tmp_path / "target"
    make(target)  # type: ignore[operator]
    before = target.read_bytes() if target.is_file() else None
    line = one_error_line(run_cli("phase1", "--steps", "2", "--db", str(target), "--overwrite"))
    assert needle in line
    assert (target.read_bytes() if target.is_file() else None) == before
    assert one_error_line(run_cli("resume", str(target)))  # resume refuses it too, in one line


def test_resume_of_a_complete_run_changes_nothing(trace: Path) -> None:
    before = trace.read_bytes()
    run = Run.open(trace).resume()
    assert run.metadata["status"] == "complete" and trace.read_bytes() == before
    out = run_cli("resume", str(trace))
    assert out.returncode == 0 and out.stdout.count("\n") == 1 and "already complete" in out.stdout


def test_resume_with_flags_that_do_not_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "part.sqlite"
    db = TraceDb(trace)
    Experiment(name="part", agents=2, steps=5).build(db).run(3, finish=False)  # as if killed
    db.close()
    before = trace.read_bytes()
    assert main(["resume", str(trace), "--api-base", "http://127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "has no LLM agents; api_base do not apply" in err
    assert trace.read_bytes() == before
    line = one_error_line(run_cli("resume", str(trace), "--rate-limit-rpm", "0"))
    assert "--rate-limit-rpm must be >= 1" in line
    assert trace.read_bytes() == before
    assert main(["resume", str(trace), "--no-progress"]) == 0  # without them it finishes
    assert Run.open(trace).metadata["steps_done"] == 5


def test_resume_of_a_file_that_is_not_a_trace(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    assert "not a Vivarium trace" in one_error_line(run_cli("resume", str(notes)))
    assert notes.read_text() == "hello"
    assert "no trace file" in one_error_line(run_cli("resume", str(tmp_path / "none.sqlite")))


def test_the_same_config_run_twice_gives_the_same_file(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("name: twice\nagents: 3\nsteps: 4\nseed: 9\n")
    db = tmp_path / "twice.sqlite"
    first = run_cli("run", str(cfg), "--db", str(db))
    assert first.returncode == 0, first.stderr
    bytes_once = db.read_bytes()
    second = run_cli("run", str(cfg), "--db", str(db))
    assert second.returncode == 0 and second.stderr == ""  # its own run: replaced, no note
    assert db.read_bytes() == bytes_once
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracePathWarning)
        Experiment.from_file(cfg).run(db)
    assert db.read_bytes() == bytes_once


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--sed", "8"], "unrecognized arguments: --sed"),
        (["--seed", "seven"], "--seed must be an integer"),
        (["--overwrite=yes"], "--overwrite: ignored explicit argument"),
    ],
)
def test_a_typo_in_a_flag(tmp_path: Path, args: list[str], needle: str) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("name: typo\nagents: 2\nsteps: 2\n")
    line = one_error_line(run_cli("run", str(cfg), "--db", str(tmp_path / "t.sqlite"), *args))
    assert needle in line
    assert not (tmp_path / "t.sqlite").exists()
