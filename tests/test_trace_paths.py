"""Where a run's trace goes: nothing a user made is replaced without being asked.

A run refused before its first step leaves the file system as it was; a trace holding another
run (another config or seed) is never replaced without ``overwrite=True`` / ``--overwrite``.
"""

from __future__ import annotations

import socket
import sqlite3
import warnings
from pathlib import Path

import pytest

from tests.conftest import run_cli
from vivarium import Experiment, Run
from vivarium.errors import ConfigError, TraceError, TracePathWarning


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable_llm(**fields: object) -> Experiment:
    api_base = f"http://127.0.0.1:{closed_port()}/v1"
    return Experiment(
        name="llm",
        policy="cognitive",
        agents=2,
        steps=3,
        scheduling="simultaneous",
        llm={"model": "openai/x", "api_base": api_base},
        **fields,
    )


def seed_of(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT seed FROM runs").fetchone()[0]
    finally:
        con.close()


# -- (a) a run refused before step 0 touches nothing ---------------------------------------------
def test_refused_run_keeps_the_existing_trace(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"
    Experiment(name="llm", agents=2, steps=3).run(db)
    before = db.read_bytes()
    with pytest.raises(ConfigError, match="cannot reach the LLM server"):
        unreachable_llm().run(db, overwrite=True)
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.sqlite"]


def test_refused_run_leaves_no_file_where_there_was_none(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "new.sqlite"
    with pytest.raises(ConfigError, match="cannot reach the LLM server"):
        unreachable_llm().run(db)
    assert list(tmp_path.iterdir()) == []


def test_refused_rerun_of_the_same_run_keeps_its_trace(tmp_path: Path) -> None:
    """The same run id may replace its own file, but only once it can actually run."""
    exp = unreachable_llm()
    db = tmp_path / "same.sqlite"
    mock = Experiment(exp.config, llm={"model": "openai/x", "mock": True}, run_id=exp.run_id)
    mock.run(db)
    before = db.read_bytes()
    with pytest.raises(ConfigError, match="cannot reach"):
        exp.run(db)
    assert db.read_bytes() == before


# -- (b) a trace holding another run is never replaced silently ----------------------------------
def test_loop_over_seeds_keeps_every_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for seed in (1, 2, 3):
            runs.append(Experiment(name="loop", agents=2, steps=4, seed=seed).run())
    paths = [Path(r.path) for r in runs]
    assert len(set(paths)) == 3
    assert paths[0] == Path("runs/loop.sqlite")
    for seed, run, path in zip((1, 2, 3), runs, paths, strict=True):
        assert seed_of(path) == str(seed)
        assert Run.open(path).run_id == run.run_id
        assert path.name in {"loop.sqlite", f"{run.run_id}.sqlite"}
    notes = [str(w.message) for w in caught if issubclass(w.category, TracePathWarning)]
    assert len(notes) == 2 and all("runs/loop.sqlite holds run" in n for n in notes)
    assert str(paths[1]) in notes[0]
    # The loop again: each run goes back into its own file; nothing new, nothing lost.
    again = [Experiment(name="loop", agents=2, steps=4, seed=s).run() for s in (1, 2, 3)]
    assert [Path(r.path) for r in again] == paths
    assert len(list(Path("runs").iterdir())) == 3


def test_explicit_path_holding_another_run_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "x.sqlite"
    first = Experiment(name="x", agents=2, steps=3, seed=1).run(db)
    before = db.read_bytes()
    other = Experiment(name="x", agents=2, steps=3, seed=2)
    with pytest.raises(TraceError) as err:
        other.run(db)
    line = str(err.value)
    assert first.run_id in line and "overwrite=True" in line and "another path" in line
    assert db.read_bytes() == before
    replaced = other.run(db, overwrite=True)
    assert replaced.run_id == other.run_id and seed_of(db) == "2"


def test_same_run_reruns_into_its_own_file(tmp_path: Path) -> None:
    db = tmp_path / "same.sqlite"
    exp = Experiment(name="same", agents=2, steps=3, seed=5)
    exp.run(db)
    first = db.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracePathWarning)
        exp.run(db)
    assert db.read_bytes() == first


def test_cli_db_holding_another_run(tmp_path: Path) -> None:
    db = tmp_path / "x.sqlite"
    ok = run_cli("phase1", "--steps", "3", "--agents", "2", "--seed", "1", "--db", str(db))
    assert ok.returncode == 0, ok.stderr
    before = db.read_bytes()
    out = run_cli("phase1", "--steps", "3", "--agents", "2", "--seed", "2", "--db", str(db))
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--overwrite" in lines[0] and "holds run phase1-" in lines[0]
    assert db.read_bytes() == before
    out = run_cli(
        "phase1", "--steps", "3", "--agents", "2", "--seed", "2", "--db", str(db), "--overwrite"
    )
    assert out.returncode == 0, out.stderr
    assert seed_of(db) == "2"


def test_cli_default_path_taken_goes_next_to_it(tmp_path: Path) -> None:
    first = run_cli("phase1", "--steps", "3", "--agents", "2", "--seed", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    out = run_cli("phase1", "--steps", "3", "--agents", "2", "--seed", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    files = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(files) == 2 and "phase1.sqlite" in files
    (other,) = [f for f in files if f != "phase1.sqlite"]
    notes = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(notes) == 1 and other in notes[0] and "runs/phase1.sqlite holds run" in notes[0]
    assert seed_of(tmp_path / "runs" / "phase1.sqlite") == "1"
    assert seed_of(tmp_path / "runs" / other) == "2"


def test_panel_clicks_keep_every_run(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    panel = Experiment(name="panel", agents=2, steps=3).controls(folder=tmp_path)
    paths = []
    for seed in (1, 2):
        panel.seed.value = seed
        run = panel.run()
        assert run is not None, panel.status.value
        paths.append(Path(run.path))
    assert paths[0] != paths[1]
    assert [seed_of(p) for p in paths] == ["1", "2"]
