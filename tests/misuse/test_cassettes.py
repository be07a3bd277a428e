"""Misuse: record/replay cassettes that do not fit the run, or are not cassettes at all.

Each ends in exactly one line that says what is wrong (a ``VivariumError`` from the API, exit 2
and one stderr line from the CLI), and nothing the user made is changed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from vivarium import Experiment, Run
from vivarium.cli import main
from vivarium.errors import VivariumError


def _llm(cassette: Path, mode: str, model: str = "mock") -> dict[str, object]:
    return {"model": model, "mock": model == "mock", "cache": str(cassette), "cache_mode": mode}


def _experiment(cassette: Path, mode: str, *, seed: int = 1, model: str = "mock") -> Experiment:
    return Experiment(
        name="tape",
        policy="cognitive",
        agents=2,
        steps=3,
        seed=seed,
        llm=_llm(cassette, mode, model),
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_replaying_another_runs_cassette_names_the_agent_and_step(tmp_path: Path) -> None:
    """Recorded with seed 1, replayed with seed 2: the prompts differ, so no reply fits."""
    cassette = tmp_path / "seed1.cassette"
    first = _experiment(cassette, "record", seed=1).run(tmp_path / "seed1.sqlite", progress=False)
    before = _digest(cassette)
    with pytest.raises(VivariumError) as err:
        _experiment(cassette, "replay", seed=2).run(tmp_path / "seed2.sqlite", progress=False)
    line = _one_line(str(err.value))
    assert line.startswith("agent_000 at step 0: no recorded reply for request ")
    assert "use cache mode 'auto'" in line
    assert _digest(cassette) == before  # replay never writes
    assert Run.open(first.path).metadata["status"] == "complete"  # the recorded run is kept


def test_replaying_with_another_model_says_which_models_the_cassette_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = tmp_path / "mock.cassette"
    _experiment(cassette, "record").run(tmp_path / "mock.sqlite", progress=False)
    before = _digest(cassette)
    code = main(
        [
            "phase2",
            "--steps", "2", "--agents", "2", "--no-progress",
            "--model", "openai/other",  # no server is needed: replay builds no client
            "--cache", str(cassette), "--cache-mode", "replay",
            "--db", str(tmp_path / "other.sqlite"),
        ]
    )  # fmt: skip
    assert code == 2
    line = _one_line(capsys.readouterr().err)
    assert "agent_000 at step 0: no recorded reply" in line
    assert "it holds no reply of openai/other; models recorded: mock" in line
    assert _digest(cassette) == before


def test_replay_with_a_missing_cassette_is_one_line_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = tmp_path / "never-recorded.cassette"
    db = tmp_path / "r.sqlite"
    args = ["phase2", "--steps", "2", "--agents", "2", "--mock-llm", "--no-progress"]
    code = main([*args, "--cache", str(cassette), "--cache-mode", "replay", "--db", str(db)])
    assert code == 2
    line = _one_line(capsys.readouterr().err)
    assert f"no cassette at {cassette}; record one first (cache mode 'record')" in line
    assert not cassette.exists()
    with pytest.raises(VivariumError, match="no cassette at"):  # the API says the same
        _experiment(cassette, "replay").run(tmp_path / "api.sqlite", progress=False)
    assert not cassette.exists()


@pytest.mark.parametrize("mode", ["record", "auto", "replay"])
def test_a_text_file_given_as_cassette_is_never_overwritten(
    tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a cassette\n" * 20)
    before = _digest(notes)
    args = ["phase2", "--steps", "2", "--agents", "2", "--mock-llm", "--no-progress"]
    code = main([*args, "--cache", str(notes), "--cache-mode", mode])
    assert code == 2
    line = _one_line(capsys.readouterr().err)
    assert line.endswith(f"{notes} is not a Vivarium cassette (not an SQLite file)")
    with pytest.raises(VivariumError, match="is not a Vivarium cassette"):
        _experiment(notes, mode).run(tmp_path / "api.sqlite", progress=False)
    assert _digest(notes) == before


def test_the_trace_given_as_its_own_cassette_is_refused_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--cache`` pointed at a trace file (the ``--db`` of an earlier run): refused, and the
    trace keeps every byte (it still validates)."""
    trace = tmp_path / "run.sqlite"
    assert (
        main(["phase1", "--steps", "3", "--agents", "2", "--db", str(trace), "--no-progress"]) == 0
    )
    capsys.readouterr()
    before = _digest(trace)
    args = ["phase2", "--steps", "2", "--agents", "2", "--mock-llm", "--no-progress"]
    code = main([*args, "--cache", str(trace), "--cache-mode", "auto"])
    assert code == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{trace} is not a Vivarium cassette" in line
    assert _digest(trace) == before
    assert main(["validate", str(trace)]) == 0
