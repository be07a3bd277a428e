"""The aam engine's command line, as a researcher coming from aam types it.

The original is Mahdi-s/vivarium's ``src/aam/run.py`` (the ``vvm`` console script) and
``src/aam/experiment_config.py`` (the sectioned JSON config); its README documents both. Each
test names the behaviour of the original it checks. Runs are tiny: few agents, few steps, the
mock LLM.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from vivarium.cli import main
from vivarium.errors import ConfigError
from vivarium.experiment.sections import convert_sections, load_sectioned_config
from vivarium.trace.resume import recorded_llm_settings


def _run_row(db: Path) -> dict:
    con = sqlite3.connect(db)
    try:
        con.row_factory = sqlite3.Row
        row = dict(con.execute("SELECT * FROM runs").fetchone())
        row["n_actions"] = con.execute("SELECT sum(n_actions) FROM steps").fetchone()[0]
        row["n_steps"] = con.execute("SELECT count(*) FROM steps").fetchone()[0]
    finally:
        con.close()
    row["config"] = json.loads(row.pop("config_json"))
    row["seed"] = int(row["seed"])  # stored as text: seeds reach 2**63 - 1
    return row


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# -- `vvm` alone runs phase 1 ------------------------------------------------------------------


def test_no_command_runs_phase1_with_its_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam run.py: ``mode = args.mode or "phase1"`` (no subcommand behaves like phase1), with
    phase1's defaults --steps 100 --agents 5 --seed 42 (README "CLI Reference")."""
    monkeypatch.chdir(tmp_path)
    assert main([]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "vvm phase1 --steps 100 --agents 5 --seed 42" in first, first
    row = _run_row(tmp_path / "runs" / "phase1.sqlite")
    assert (row["n_steps"], row["agents"], row["seed"], row["policy"]) == (100, 5, 42, "random")
    assert row["n_actions"] == 100 * 5

    # The same run as the explicit command: same run id, same final state.
    explicit = tmp_path / "explicit.sqlite"
    assert main(["phase1", "--db", str(explicit), "--no-progress"]) == 0
    assert _run_row(explicit)["run_id"] == row["run_id"]


def test_no_command_takes_phase1_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam run.py: with no subcommand the run is phase1's; phase1's flags (--steps, --agents,
    --seed, --db) apply to it, and what runs is printed first."""
    monkeypatch.chdir(tmp_path)
    assert main(["--steps", "3", "--agents", "2", "--seed", "7", "--db", "a.sqlite"]) == 0
    assert "vvm phase1 --steps 3 --agents 2 --seed 7" in capsys.readouterr().out
    row = _run_row(tmp_path / "a.sqlite")
    assert (row["n_steps"], row["agents"], row["seed"]) == (3, 2, 7)


def test_help_and_version_still_answer_without_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam run.py: ``--help`` lists the subcommands; only a bare ``vvm`` runs phase1."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert "experiment" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert not (tmp_path / "runs").exists()


def test_installed_entry_point_runs_phase1_from_any_folder(tmp_path: Path) -> None:
    """aam pyproject.toml: ``vvm = "aam.run:main"``; ``vvm`` alone in any folder runs phase1."""
    vvm = Path(sys.executable).parent / "vvm"
    if not vvm.exists():
        pytest.skip("the vvm console script is not installed in this environment")
    done = subprocess.run(
        [str(vvm), "--steps", "4", "--agents", "3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "VIVARIUM_PROGRESS": "0"},
    )
    assert done.returncode == 0, done.stderr
    assert "running `vvm phase1" in done.stdout
    assert _run_row(tmp_path / "runs" / "phase1.sqlite")["n_actions"] == 12


# -- phase2 says what answers ------------------------------------------------------------------


def test_phase2_without_model_or_mock_says_the_mock_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam run.py: phase2's --model defaults to gpt-3.5-turbo (called through LiteLLM) unless
    --mock-llm. Vivarium answers with the mock instead and says so in one line, then runs."""
    db = tmp_path / "p2.sqlite"
    assert main(["phase2", "--steps", "2", "--agents", "2", "--db", str(db), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    notes = [ln for ln in out.splitlines() if "--model" in ln]
    assert len(notes) == 1 and "mock" in notes[0] and "gpt-3.5-turbo" in notes[0]
    assert "Traceback" not in err
    assert _run_row(db)["config"]["llm"]["mock"] is True

    for flags in (["--mock-llm"], ["--model", "mock"]):
        assert main(["phase2", "--steps", "1", "--agents", "1", "--no-progress",
                     "--db", str(tmp_path / "q.sqlite"), "--overwrite", *flags]) == 0  # fmt: skip
        assert "--model or --mock-llm" not in capsys.readouterr().out


# -- validation after every run ----------------------------------------------------------------


def test_every_run_is_validated_unless_no_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam run.py: after each run ``_validate_db`` checks the trace unless --no-validate
    (phase1, phase2, experiment all take the flag)."""
    small = ["--steps", "2", "--agents", "2", "--no-progress"]
    assert main(["phase1", *small, "--db", str(tmp_path / "a.sqlite")]) == 0
    assert "validated: 2 steps, 4 decisions" in capsys.readouterr().out
    assert main(["phase2", *small, "--mock-llm", "--db", str(tmp_path / "b.sqlite")]) == 0
    assert "validated: 2 steps, 4 decisions" in capsys.readouterr().out
    assert main(["phase1", *small, "--db", str(tmp_path / "c.sqlite"), "--no-validate"]) == 0
    assert "  validated:" not in capsys.readouterr().out


def test_a_trace_that_fails_its_check_fails_the_command_and_is_not_exported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam run.py: a failed ``_validate_db`` stops the command before the Parquet export."""
    from vivarium.trace import validate

    def corrupt(path: Path) -> validate.ValidationReport:
        return validate.ValidationReport(Path(path), status="corrupt", problems=["step 1: bad"])

    monkeypatch.setattr(validate, "validate_trace", corrupt)
    out_dir = tmp_path / "pq"
    code = main(["phase1", "--steps", "2", "--agents", "2", "--no-progress",
                 "--db", str(tmp_path / "a.sqlite"), "--export-parquet", str(out_dir)])  # fmt: skip
    assert code == 1
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith("vvm phase1: error:") and "CORRUPT" in line and "step 1: bad" in line
    assert not out_dir.exists()


# -- Parquet export ----------------------------------------------------------------------------


def test_export_parquet_writes_the_runs_tables_into_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam run.py: --export-parquet writes the run's trace and messages as Parquet after the
    run. Vivarium takes a folder (DIR) and writes every table there."""
    import pyarrow.parquet as pq

    db, out_dir = tmp_path / "p2.sqlite", tmp_path / "frames"
    assert main(["phase2", "--mock-llm", "--steps", "3", "--agents", "2", "--no-progress",
                 "--db", str(db), "--export-parquet", str(out_dir)]) == 0  # fmt: skip
    assert "parquet:" in capsys.readouterr().out
    assert pq.read_table(out_dir / "actions.parquet").num_rows == 3 * 2
    con = sqlite3.connect(db)
    n_messages = con.execute("SELECT count(*) FROM messages").fetchone()[0]
    con.close()
    assert n_messages == 6  # every mock agent posts each step
    assert pq.read_table(out_dir / "messages.parquet").num_rows == n_messages


def test_export_parquet_alone_writes_beside_the_trace(tmp_path: Path) -> None:
    """aam run.py: --export-parquet without a place writes next to the database
    (``<db>_trace.parquet``); Vivarium's folder is ``<db>_parquet/``."""
    db = tmp_path / "p1.sqlite"
    assert main(["phase1", "--steps", "2", "--agents", "3", "--no-progress",
                 "--db", str(db), "--export-parquet"]) == 0  # fmt: skip
    assert (tmp_path / "p1_parquet" / "actions.parquet").is_file()


def test_export_parquet_to_a_file_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder that cannot be one is a one-line error before anything runs (aam printed a
    warning after the run; Vivarium refuses first, so no run is wasted)."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    db = tmp_path / "p1.sqlite"
    for bad in (a_file, a_file / "under"):
        code = main(["phase1", "--steps", "2", "--no-progress", "--db", str(db),
                     "--export-parquet", str(bad)])  # fmt: skip
        assert code == 2
        assert "--export-parquet" in _one_error_line(capsys.readouterr().err)
    assert not db.exists()


# -- rate limit flags --------------------------------------------------------------------------


def test_rate_limit_flags_map_onto_the_runs_gateway_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam run.py phase2: --rate-limit-max-concurrent N (max concurrent requests),
    --rate-limit-rpm/--rate-limit-tpm, and --no-rate-limit, which leaves every limit off."""
    small = ["phase2", "--mock-llm", "--steps", "1", "--agents", "2", "--no-progress"]
    a = tmp_path / "a.sqlite"
    assert main([*small, "--db", str(a), "--rate-limit-max-concurrent", "3",
                 "--rate-limit-rpm", "60"]) == 0  # fmt: skip
    settings = recorded_llm_settings(a)
    assert (settings["max_concurrency"], settings["rate_limit_rpm"]) == (3, 60)

    b = tmp_path / "b.sqlite"  # the tighter of the two caps holds
    assert main([*small, "--db", str(b), "--rate-limit-max-concurrent", "5",
                 "--max-concurrency", "2"]) == 0  # fmt: skip
    assert recorded_llm_settings(b)["max_concurrency"] == 2

    c = tmp_path / "c.sqlite"
    capsys.readouterr()
    assert main([*small, "--db", str(c), "--no-rate-limit", "--rate-limit-rpm", "60",
                 "--rate-limit-max-concurrent", "3"]) == 0  # fmt: skip
    settings = recorded_llm_settings(c)
    assert settings["rate_limit_rpm"] is None and settings["rate_limit_tpm"] is None
    assert settings["max_concurrency"] != 3
    note = _one_error_line(capsys.readouterr().err)
    assert "--no-rate-limit" in note and "--rate-limit-rpm" in note


# -- vvm experiment --config X.json ------------------------------------------------------------

README_MOCK_CONFIG = {  # aam README "With Mock LLM (offline testing)", made small
    "run": {"steps": 3, "agents": 4, "seed": 42},
    "scheduler": {"per_agent_timeout_s": 2.0, "max_concurrency": 50},
    "policy": {"kind": "cognitive", "model": "mock", "mock_llm": True},
}


def test_experiment_runs_aams_sectioned_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam README "Phase 4": ``vvm experiment --config experiment.json`` with run /
    scheduler / policy sections runs the barrier scheduler (think concurrently, commit in
    agent_id order), the run under run.runs_dir."""
    cfg = tmp_path / "mock_run.json"
    cfg.write_text(json.dumps({**README_MOCK_CONFIG, "run": {**README_MOCK_CONFIG["run"],
                                                              "runs_dir": str(tmp_path / "r")}}))  # fmt: skip
    assert main(["experiment", "--config", str(cfg), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "scheduling=simultaneous (barrier)" in out and "validated: 3 steps" in out
    row = _run_row(tmp_path / "r" / "mock_run.sqlite")
    assert (row["n_steps"], row["agents"], row["seed"]) == (3, 4, 42)
    assert (row["policy"], row["scheduling"], row["n_actions"]) == ("cognitive", "simultaneous", 12)
    llm = row["config"]["llm"]
    assert llm["mock"] is True and llm["agent_timeout"] == 2.0
    assert llm["agent_retries"] == 2  # aam scheduler.py: max_retries=2 (3 attempts)
    assert row["config"]["order"] == "sorted"


def test_experiment_flags_run_id_runs_dir_override_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam run.py experiment: --run-id and --runs-dir win over the config, --no-validate and
    --export-parquet as in phase 2; aam README: --override KEY=VALUE (``run.steps=100``)."""
    cfg = tmp_path / "exp.json"
    cfg.write_text(json.dumps(README_MOCK_CONFIG))
    runs = tmp_path / "elsewhere"
    assert main(["experiment", "--config", str(cfg), "--run-id", "my-run", "--runs-dir",
                 str(runs), "--override", "run.steps=2", "--override", "policy.kind=random",
                 "--no-validate", "--export-parquet", str(tmp_path / "pq"),
                 "--no-progress"]) == 0  # fmt: skip
    assert "  validated:" not in capsys.readouterr().out
    row = _run_row(runs / "exp.sqlite")
    assert (row["run_id"], row["n_steps"], row["policy"]) == ("my-run", 2, "random")
    assert (tmp_path / "pq" / "steps.parquet").is_file()


def test_sectioned_config_defaults_are_aams() -> None:
    """aam experiment_config.py: every section optional, with its defaults (steps 10, agents
    2, seed 42, runs_dir ./runs; per_agent_timeout_s 60, max_concurrency 50, sort_mode
    agent_id; kind cognitive, model gpt-3.5-turbo, mock_llm false, message_history 20)."""
    aam = convert_sections({})
    c = aam.config
    assert (c.steps, c.agent_count, c.seed, c.policy) == (10, 2, 42, "cognitive")
    assert (c.scheduling, c.order, c.max_concurrency) == ("simultaneous", "sorted", 50)
    assert c.message_history_limit == 20 and aam.runs_dir == Path("./runs")
    assert c.llm is not None and (c.llm.model, c.llm.mock) == ("gpt-3.5-turbo", False)
    assert (c.llm.agent_timeout, c.llm.rate_limit_rpm) == (60.0, None)
    assert c.deterministic_timestamps is True and c.run_id is None


def test_sectioned_config_random_shuffle_and_rate_limits() -> None:
    """aam run.py experiment: random agents see no message history (message_history_limit 0);
    sort_mode seeded_shuffle is a seeded shuffle of the commit order; rate limits apply unless
    rate_limit_enabled is false."""
    random = convert_sections(
        {"policy": {"kind": "random"}, "scheduler": {"sort_mode": "seeded_shuffle"}}
    ).config
    assert (random.policy, random.message_history_limit, random.llm) == ("random", 0, None)
    assert random.order == "shuffle"

    limited = convert_sections(
        {"policy": {"rate_limit_rpm": 30, "rate_limit_tpm": 9000, "rate_limit_max_concurrent": 4}}
    ).config
    assert limited.llm is not None
    assert (limited.llm.rate_limit_rpm, limited.llm.rate_limit_tpm) == (30, 9000)
    assert limited.max_concurrency == 4  # the tighter of scheduler (50) and the rate limit

    off = convert_sections(
        {
            "policy": {
                "rate_limit_rpm": 30,
                "rate_limit_max_concurrent": 4,
                "rate_limit_enabled": False,
            }
        }  # fmt: skip
    ).config
    assert off.llm is not None and off.llm.rate_limit_rpm is None and off.max_concurrency == 50


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"run": {"stpes": 3}}', "run.stpes: unknown field"),
        ('{"scheduler": {"sort_mode": "random"}}', "scheduler.sort_mode:"),
        ('{"scheduler": {"per_agent_timeout_s": 0}}', "scheduler.per_agent_timeout_s:"),
        ('{"scheduler": {"max_concurrency": 100000}}', "scheduler.max_concurrency:"),
        ('{"policy": {"kind": "oracle"}}', "policy.kind:"),
        ('{"policy": {"kind": "transformerlens"}}', "policy.kind: transformerlens"),
        ('{"policy": {"mock_llm": "perhaps"}}', "policy.mock_llm:"),
        ('{"run": {"agents": 0}}', "run.agents:"),
        ('{"run": {"run_id": "has space"}}', "run.run_id:"),
        ('{"capture": {"dtype": "int8"}}', "capture.dtype:"),
        ('{"run": [1, 2]}', "run:"),
        ('{"steps": 3}', "steps: unknown section"),
        ('{"run": {"steps": 3}', "not valid JSON"),
        ("[1, 2]", "expected a mapping"),
    ],
)
def test_bad_sectioned_config_is_one_line_naming_section_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str
) -> None:
    """aam experiment_config.py validates each section's keys (types, ranges, kind and
    sort_mode choices); Vivarium also refuses unknown keys, each error one line naming the
    section and key."""
    cfg = tmp_path / "bad.json"
    cfg.write_text(text)
    assert main(["experiment", "--config", str(cfg), "--db", str(tmp_path / "x.sqlite")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith("vvm experiment: error:") and needle in line, line
    assert not (tmp_path / "x.sqlite").exists()


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("run.steps", "SECTION.KEY=VALUE"),
        ("steps=3", "SECTION.KEY=VALUE"),
        ("sim.steps=3", "sim: unknown section"),
        ("run.stepz=3", "run.stepz: unknown field"),
        ("run.steps=-1", "run.steps:"),
    ],
)
def test_bad_override_is_one_line(tmp_path: Path, item: str, needle: str) -> None:
    """aam README: ``--override KEY=VALUE`` sets ``section.key``; a bad one is one line."""
    cfg = tmp_path / "exp.json"
    cfg.write_text(json.dumps(README_MOCK_CONFIG))
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")) as caught:
        load_sectioned_config(cfg, [item])
    assert "\n" not in str(caught.value)


def test_vvm_run_points_an_aam_config_to_vvm_experiment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """aam README: the sectioned config runs with ``vvm experiment --config``; given to
    ``vvm run`` (Vivarium's flat config) it is named as such, in one line."""
    cfg = tmp_path / "exp.json"
    cfg.write_text(json.dumps(README_MOCK_CONFIG))
    assert main(["run", str(cfg), "--db", str(tmp_path / "x.sqlite")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "vvm experiment --config" in line


def test_override_values_are_json_except_for_text_keys(tmp_path: Path) -> None:
    """aam README: ``--override run.steps=100`` sets a number; a text key keeps what was typed
    (aam experiment_config.py: capture.layers is the text "0", policy.model a name)."""
    cfg = tmp_path / "exp.json"
    cfg.write_text(json.dumps(README_MOCK_CONFIG))
    aam = load_sectioned_config(
        cfg, ["run.steps=7", "policy.mock_llm=false", "policy.model=1", "capture.layers=0"]
    )
    assert aam.config.steps == 7
    assert aam.config.llm is not None and aam.config.llm.model == "1"
    assert aam.config.llm.mock is False


def test_readme_example_config_loads_as_written() -> None:
    """aam README "Phase 4": the example experiment.json (50 steps, 10 agents, seed 42,
    per_agent_timeout_s 30, max_concurrency 10, sort_mode agent_id, cognitive gpt-3.5-turbo,
    message_history 20) loads unchanged."""
    example = {
        "run": {"steps": 50, "agents": 10, "seed": 42, "deterministic_timestamps": True,
                "runs_dir": "./runs"},
        "scheduler": {"per_agent_timeout_s": 30.0, "max_concurrency": 10, "sort_mode": "agent_id"},
        "policy": {"kind": "cognitive", "model": "gpt-3.5-turbo", "mock_llm": False,
                   "message_history": 20},
    }  # fmt: skip
    c = convert_sections(example).config
    assert (c.steps, c.agent_count, c.seed, c.max_concurrency) == (50, 10, 42, 10)
    assert c.llm is not None and (c.llm.model, c.llm.agent_timeout) == ("gpt-3.5-turbo", 30.0)
    assert (c.order, c.message_history_limit) == ("sorted", 20)
