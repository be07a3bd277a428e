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


# -- only the flags a user gives override a config file ----------------------------------------

CONFIG_WITH_SEED = (
    "name: seeded\nworld: channel\npolicy: cognitive\nagents: 2\nsteps: 4\nseed: 7\n"
    "scheduling: simultaneous\norder: shuffle\nmessage_history_limit: 3\n"
    "llm: {model: mock, mock: true, temperature: 0.5, max_tokens: 32}\n"
)


def _recorded(db: Path) -> tuple[str, dict]:
    import json

    con = sqlite3.connect(db)
    try:
        seed, config = con.execute("SELECT seed, config_json FROM runs").fetchone()
    finally:
        con.close()
    return seed, json.loads(config)


def test_run_keeps_every_setting_of_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG_WITH_SEED)
    db = tmp_path / "cli.sqlite"
    out = run_cli("run", str(cfg), "--db", str(db))
    assert out.returncode == 0, out.stderr
    seed, config = _recorded(db)
    assert seed == "7"
    assert (config["steps"], config["agents"], config["scheduling"], config["order"]) == (
        4,
        2,
        "simultaneous",
        "shuffle",
    )
    assert config["message_history_limit"] == 3
    assert (config["llm"]["temperature"], config["llm"]["max_tokens"]) == (0.5, 32)


def test_a_flag_given_overrides_only_its_own_field(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG_WITH_SEED)
    db = tmp_path / "cli.sqlite"
    out = run_cli("run", str(cfg), "--db", str(db), "--seed", "8", "--mock-llm")
    assert out.returncode == 0, out.stderr
    seed, config = _recorded(db)
    assert seed == "8" and config["steps"] == 4
    # --mock-llm names who answers; the file's other LLM settings stay.
    assert (config["llm"]["temperature"], config["llm"]["max_tokens"]) == (0.5, 32)


def test_max_concurrency_flag_sets_the_pace_not_the_run(tmp_path: Path) -> None:
    """``--max-concurrency`` overrides the file's (here its older place, ``llm``), is what the
    run records for a resume, and leaves the recorded config and the run id alone."""
    import json

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        CONFIG_WITH_SEED.replace("max_tokens: 32}", "max_tokens: 32, max_concurrency: 8}")
    )
    runs = {}
    for name, flags in {"file": [], "flag": ["--max-concurrency", "3"]}.items():
        db = tmp_path / f"{name}.sqlite"
        out = run_cli("run", str(cfg), "--db", str(db), *flags)
        assert out.returncode == 0, out.stderr
        con = sqlite3.connect(db)
        try:
            run_id, config = con.execute("SELECT run_id, config_json FROM runs").fetchone()
            (settings,) = con.execute(
                "SELECT value FROM meta WHERE key = 'llm_settings'"
            ).fetchone()
        finally:
            con.close()
        runs[name] = (run_id, config, json.loads(settings)["max_concurrency"])
    assert runs["file"][:2] == runs["flag"][:2]
    assert "max_concurrency" not in runs["flag"][1]
    assert (runs["file"][2], runs["flag"][2]) == (8, 3)


def test_duration_flag_keeps_the_files_autonomous_pacing(tmp_path: Path) -> None:
    cfg = tmp_path / "auto.yaml"
    cfg.write_text("name: auto\nagents: 2\nseed: 7\nautonomous: {think_s: 2.5, duration: 9}\n")
    db = tmp_path / "auto.sqlite"
    out = run_cli("run", str(cfg), "--db", str(db), "--duration", "5")
    assert out.returncode == 0, out.stderr
    _seed, config = _recorded(db)
    assert config["autonomous"]["think_s"] == 2.5 and config["autonomous"]["duration"] == 5


def test_cli_api_and_panel_write_the_same_bytes(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from vivarium import Experiment

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG_WITH_SEED)
    cli_db, api_db = tmp_path / "cli.sqlite", tmp_path / "api.sqlite"
    out = run_cli("run", str(cfg), "--db", str(cli_db))
    assert out.returncode == 0, out.stderr
    Experiment.from_file(cfg).run(api_db)
    panel = Experiment.from_file(cfg).controls(folder=tmp_path / "panel")
    panel.run_button.click()
    assert panel.run_result is not None, panel.status.value
    panel_db = panel.run_result.path
    assert cli_db.read_bytes() == api_db.read_bytes()
    assert Path(panel_db).read_bytes() == api_db.read_bytes()


def test_sweep_keeps_the_config_seed(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("name: sw\nagents: 2\nsteps: 3\nseed: 7\n")
    from vivarium import Experiment

    folder = tmp_path / "sweep"
    out = run_cli("sweep", str(cfg), "--folder", str(folder), "--backend", "inline")
    assert out.returncode == 0, out.stderr
    # The sweep's seeds derive from the file's seed 7, as the API's do (not from 42).
    api = Experiment.from_file(cfg).sweep(folder=tmp_path / "api", backend="inline")
    seeded = Experiment.from_file(cfg, seed=42).sweep(folder=tmp_path / "s42", backend="inline")
    cli_seeds = sorted(_recorded(p)[0] for p in folder.glob("sw-*.sqlite"))
    assert cli_seeds == sorted(str(s) for s in api.index["seed"])
    assert cli_seeds != sorted(str(s) for s in seeded.index["seed"])


def test_no_flag_is_taken_by_an_abbreviation(capsys: pytest.CaptureFixture[str]) -> None:
    """A flag is taken only as spelled: a prefix of one (another command's ``--agent`` for
    ``--agents``) is an error, never the longer flag."""
    import argparse

    from vivarium.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    tried = 0
    for command, p in sub.choices.items():
        try:
            p.parse_args([])
        except SystemExit:
            continue  # needs positionals: an error whatever the flags (test_bad_cli covers it)
        flags = {f for a in p._actions for f in a.option_strings}
        for flag in sorted(f for f in flags if f.startswith("--") and len(f) > 4):
            if flag[:-1] in flags:
                continue
            with pytest.raises(SystemExit) as info:
                p.parse_args([flag[:-1], "1"])
            assert info.value.code == 2, (command, flag[:-1])
            assert f"unrecognized arguments: {flag[:-1]}" in capsys.readouterr().err
            tried += 1
    assert tried > 30
