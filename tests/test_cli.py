"""``vvm``: phase1, run, validate; bad flags and configs exit 2 with one line."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import run_cli
from vivarium.cli import main


def test_phase1_prints_summary_and_writes_trace(tmp_path: Path) -> None:
    db = tmp_path / "p1.sqlite"
    out = run_cli(
        "phase1",
        "--steps",
        "12",
        "--agents",
        "3",
        "--seed",
        "42",
        "--db",
        str(db),
        "--run-id",
        "demo-1",
    )
    assert out.returncode == 0, out.stderr
    assert "run demo-1: 12 steps x 3 agents -> 36 decisions" in out.stdout
    assert str(db) in out.stdout
    con = sqlite3.connect(db)
    assert con.execute("SELECT run_id, steps_done, status FROM runs").fetchone() == (
        "demo-1",
        12,
        "complete",
    )
    assert con.execute("SELECT count(*) FROM actions").fetchone() == (36,)


def test_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "v.sqlite"
    assert main(["phase1", "--steps", "5", "--agents", "2", "--db", str(db), "--no-progress"]) == 0
    assert main(["validate", str(db)]) == 0
    assert "OK:" in capsys.readouterr().out
    con = sqlite3.connect(db)
    con.execute("UPDATE steps SET world_digest = 'x' WHERE step = 3")
    con.commit()
    con.close()
    assert main(["validate", str(db)]) == 1
    assert "CORRUPT" in capsys.readouterr().out


def test_validate_reports_incomplete_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "i.sqlite"
    assert main(["phase1", "--steps", "5", "--agents", "2", "--db", str(db), "--no-progress"]) == 0
    con = sqlite3.connect(db)
    con.execute("UPDATE runs SET status = 'running', steps = 10")
    con.commit()
    con.close()
    assert main(["validate", str(db)]) == 3
    assert "INCOMPLETE" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["phase1", "--agents", "0"], "--agents must be >= 1"),
        (["phase1", "--steps", "many"], "--steps must be an integer"),
        (["phase1", "--seed", "-4"], "--seed must be >= 0"),
        (["phase1", "--scheduling", "chaotic"], "invalid choice"),
        (["phase1", "--frobnicate"], "unrecognized arguments"),
        (["nosuchcommand"], "invalid choice"),
        (["run", "/no/such/config.yaml"], "config file not found"),
        (["validate", "/no/such/trace.sqlite"], "no trace file"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], needle: str) -> None:
    out = run_cli(*args)
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert needle in lines[0]
    assert "Traceback" not in out.stderr


def test_run_config_yaml_and_bad_configs(tmp_path: Path) -> None:
    good = tmp_path / "exp.yaml"
    good.write_text("name: cfgdemo\nagents: 4\nsteps: 6\nseed: 3\nscheduling: simultaneous\n")
    db = tmp_path / "c.sqlite"
    out = run_cli("run", str(good), "--db", str(db))
    assert out.returncode == 0, out.stderr
    assert "6 steps x 4 agents -> 24 decisions" in out.stdout

    for text, needle in [
        ("agents: -1\n", "agents: the number of agents must be between 1"),
        ("agentz: 4\n", "agentz: unknown field"),
        ("world: mars\n", "unknown world 'mars'"),
        ("[1, 2]\n", "expected a mapping"),
        ("agents: [\n", "not valid YAML"),
    ]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        out = run_cli("run", str(bad), "--db", str(tmp_path / "x.sqlite"))
        assert out.returncode == 2, (text, out.stderr)
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], (text, out.stderr)


def test_run_json_config(tmp_path: Path) -> None:
    cfg = tmp_path / "exp.json"
    cfg.write_text('{"name": "j", "agents": 2, "steps": 3}')
    out = run_cli("run", str(cfg), "--db", str(tmp_path / "j.sqlite"))
    assert out.returncode == 0 and "-> 6 decisions" in out.stdout


def test_version_flag() -> None:
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("vivarium-lab ")
