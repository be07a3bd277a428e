"""Misuse: record/replay cassettes that do not fit the run, or are not cassettes at all.

Each ends in exactly one line that says what is wrong (a ``VivariumError`` from the API, exit 2
and one stderr line from the CLI), and nothing the user made is changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # ``tests.support`` is importable however pytest was started
    sys.path.insert(0, str(ROOT))

from tests.support.fake_openai import FakeOpenAIServer  # noqa: E402
from vivarium import Experiment, Run  # noqa: E402
from vivarium.cli import main  # noqa: E402
from vivarium.errors import TracePathWarning, VivariumError  # noqa: E402


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
    assert (
        f"no cassette at {cassette}; check the path (cache mode 'record' makes a new one)" in line
    )
    assert not cassette.exists()
    with pytest.raises(VivariumError, match="no cassette at"):  # the API says the same
        _experiment(cassette, "replay").run(tmp_path / "api.sqlite", progress=False)
    assert not cassette.exists()


def test_a_relative_cassette_path_missing_says_which_working_folder_it_was_read_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A notebook's kernel started in another folder than the notebook's: "../data/..." is not
    # there, though the cassette was recorded. Before, the error said to record one first.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(VivariumError) as info:
        _experiment(Path("../data/x.cassette"), "replay").run(tmp_path / "r.sqlite", progress=False)
    message = str(info.value)
    assert "\n" not in message and "record one first" not in message
    assert (
        f"no cassette at ../data/x.cassette (read from the working folder {elsewhere})" in message
    )
    assert not (tmp_path / "data").exists()


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
    for mode in ("auto", "record", "replay"):
        code = main([*args, "--cache", str(trace), "--cache-mode", mode])
        assert code == 2
        line = _one_line(capsys.readouterr().err)
        assert f"{trace} is not a Vivarium cassette" in line
        assert _digest(trace) == before
    assert main(["validate", str(trace)]) == 0


# -- where a reply came from (provenance) ---------------------------------------------------------
REAL = "openai/fake-model"
MIX = "a cassette keeps one provider's replies, so give this run another cassette file"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def _real(cassette: Path, mode: str, server: FakeOpenAIServer | None, **more: object) -> Experiment:
    llm = {"model": REAL, "cache": str(cassette), "cache_mode": mode, **more}
    if server is not None:
        llm["api_base"] = server.base_url
    return Experiment(name="tape", policy="cognitive", agents=2, steps=3, seed=1, llm=llm)


def _mock_named(cassette: Path, mode: str, model: str = REAL) -> Experiment:
    llm = {"model": model, "mock": True, "cache": str(cassette), "cache_mode": mode}
    return Experiment(name="tape", policy="cognitive", agents=2, steps=3, seed=1, llm=llm)


def _replies(run: Run) -> list[object]:
    frame = run.llm_exchanges()
    return [(r["content"], r["tool_calls"]) for r in frame["reply"]]


def test_a_mock_run_in_auto_mode_never_writes_into_a_real_models_cassette(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """The case the issue names: ``mock: true`` with the model's name, ``cache_mode="auto"``,
    pointed at that model's cassette. It used to store mock replies there, which a later
    replay served as the model's, health ok."""
    cassette = tmp_path / "real.cassette"
    recorded = _real(cassette, "record", server).run(tmp_path / "real.sqlite", progress=False)
    before = _digest(cassette)
    with pytest.raises(VivariumError) as err:
        _mock_named(cassette, "auto").run(tmp_path / "mock.sqlite", progress=False)
    line = _one_line(str(err.value))
    assert f"cassette {cassette} holds replies of {REAL} (litellm)" in line
    assert "this run's replies come from the deterministic mock (vivarium-mock)" in line
    assert line.endswith(MIX + " (llm cache=...)")
    assert _digest(cassette) == before  # nothing stored, nothing changed
    assert not (tmp_path / "mock.sqlite").exists()  # refused before the run began
    replay = _real(cassette, "replay", None).run(tmp_path / "replay.sqlite", progress=False)
    assert replay.health.ok and bool(replay.llm_calls["cache_hit"].all())
    assert _replies(replay) == _replies(recorded)  # the model's replies, none of the mock's
    assert _digest(cassette) == before


def test_a_mock_run_from_the_cli_is_refused_by_a_real_models_cassette(
    tmp_path: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = tmp_path / "real.cassette"
    _real(cassette, "record", server).run(tmp_path / "real.sqlite", progress=False)
    before = _digest(cassette)
    args = ["phase2", "--steps", "2", "--agents", "2", "--mock-llm", "--no-progress"]
    for mode in ("auto", "record"):
        code = main([*args, "--cache", str(cassette), "--cache-mode", mode])
        assert code == 2
        assert _one_line(capsys.readouterr().err).endswith(MIX + " (llm cache=...)")
    assert _digest(cassette) == before


def test_a_real_run_is_refused_by_a_cassette_of_mock_replies(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """The reverse: the model's replies would go beside the mock's."""
    cassette = tmp_path / "mock.cassette"
    _mock_named(cassette, "record", model="mock").run(tmp_path / "m.sqlite", progress=False)
    before = _digest(cassette)
    for mode in ("record", "auto"):
        with pytest.raises(VivariumError) as err:
            _real(cassette, mode, server).run(tmp_path / f"{mode}.sqlite", progress=False)
        line = _one_line(str(err.value))
        assert "holds replies of mock (vivarium-mock)" in line
        assert "this run's replies come from a real model (litellm)" in line
    assert _digest(cassette) == before
    assert server.request_count == 0  # refused before any call


def test_a_replay_with_mock_on_but_a_real_models_name_is_not_served_its_replies(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """``mock: true`` and ``model: openai/...``, replaying the model's cassette: the requests
    are the model's to the byte, but the run asks the mock; it used to get the model's replies."""
    cassette = tmp_path / "real.cassette"
    _real(cassette, "record", server).run(tmp_path / "real.sqlite", progress=False)
    before = _digest(cassette)
    with pytest.raises(VivariumError) as err:
        _mock_named(cassette, "replay").run(tmp_path / "mock.sqlite", progress=False)
    line = _one_line(str(err.value))
    assert line.startswith("agent_000 at step 0: no recorded reply for request ")
    assert (
        f"(it holds replies of {REAL} from a real model (litellm), and this run's replies come "
        "from the deterministic mock (vivarium-mock)); replay with the LLM settings it was "
        "recorded with (mock or not), or record this run into another cassette file"
    ) in line
    assert _digest(cassette) == before


def test_a_mock_run_named_after_a_real_model_says_mock_where_calls_are_listed(
    tmp_path: Path,
) -> None:
    run = _mock_named(tmp_path / "m.cassette", "auto").run(tmp_path / "m.sqlite", progress=False)
    calls = run.llm_exchanges()
    assert set(calls["model"]) == {"mock"}  # who answered; never "openai/fake-model"
    assert {r["model"] for r in calls["request"]} == {REAL}  # what was asked for
    with sqlite3.connect(tmp_path / "m.cassette") as con:
        assert con.execute("SELECT DISTINCT model, provider FROM replies").fetchall() == [
            (REAL, "vivarium-mock")
        ]


def test_replaying_a_recording_never_replaces_its_trace(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """Cache settings are not part of the run id, so the replay is the same run: over the
    recording's own file it is refused (a named path) or goes beside it (the default path)."""
    cassette = tmp_path / "real.cassette"
    recording = tmp_path / "x.sqlite"
    _real(cassette, "record", server).run(recording, progress=False)
    kept = _digest(recording)
    for mode in ("replay", "auto"):  # auto replays every call it finds
        with pytest.raises(VivariumError) as err:
            _real(cassette, mode, server).run(recording, progress=False)
        line = _one_line(str(err.value))
        assert line.startswith(f"{recording} holds the finished run ")
        assert "recorded from the LLM (6 calls made, not replayed from a cassette)" in line
        assert "pass overwrite=True" in line
        assert _digest(recording) == kept
    assert server.request_count == 6


def test_replaying_a_recording_at_the_default_path_goes_beside_it(
    tmp_path: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cassette = tmp_path / "real.cassette"
    first = _real(cassette, "record", server).run(progress=False)
    assert Path(first.path) == Path("runs/tape.sqlite")
    kept = _digest(Path(first.path))
    for _ in range(2):  # the replay's own file is replaced by the next replay, unasked
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            replay = _real(cassette, "replay", None).run(progress=False)
        assert Path(replay.path) == Path("runs/tape-replay.sqlite")
        notes = [str(w.message) for w in caught if issubclass(w.category, TracePathWarning)]
        assert len(notes) == 1 and "recorded from the LLM" in notes[0]
        assert notes[0].endswith("this run is written to runs/tape-replay.sqlite")
        assert replay.run_id == first.run_id
        assert bool(replay.llm_calls["cache_hit"].all())
    assert _digest(Path(first.path)) == kept
    assert not Run.open(first.path).llm_calls["cache_hit"].any()  # the recording, as it was


def test_a_copy_of_a_committed_real_cassette_refuses_a_mock_writer_and_still_replays(
    tmp_path: Path,
) -> None:
    """A cassette an older Vivarium wrote (no provenance): its rows are the model's, by their
    model; a mock run writing into it is refused and leaves every byte."""
    cassette = tmp_path / "channel.cassette"
    shutil.copy(ROOT / "data" / "cassettes" / "channel_smollm2.cassette", cassette)
    before = _digest(cassette)
    with pytest.raises(VivariumError) as err:
        _mock_named(cassette, "auto", model="openai/smollm2").run(
            tmp_path / "m.sqlite", progress=False
        )
    line = _one_line(str(err.value))
    assert "holds replies of openai/smollm2 (provider not recorded)" in line
    assert _digest(cassette) == before


def test_a_cassette_of_a_newer_vivarium_is_refused_and_kept(tmp_path: Path) -> None:
    cassette = tmp_path / "new.cassette"
    _experiment(cassette, "record").run(tmp_path / "r.sqlite", progress=False)
    con = sqlite3.connect(cassette)
    con.execute("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    before = _digest(cassette)
    for mode in ("record", "auto", "replay"):
        with pytest.raises(VivariumError) as err:
            _experiment(cassette, mode).run(tmp_path / f"{mode}.sqlite", progress=False)
        line = _one_line(str(err.value))
        assert line.endswith("uses cassette schema 9, newer than this Vivarium reads (4); "
                             "upgrade vivarium-lab")  # fmt: skip
    assert _digest(cassette) == before


def test_the_same_file_for_trace_and_cassette_is_refused_before_either_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = tmp_path / "x.sqlite"
    with pytest.raises(VivariumError) as err:
        _experiment(same, "auto").run(same, progress=False)
    assert _one_line(str(err.value)) == (
        f"{same} is given as both the trace and the cassette (llm cache): give the cassette "
        "another file"
    )
    assert not same.exists()
    args = ["phase2", "--steps", "2", "--agents", "2", "--mock-llm", "--no-progress"]
    code = main([*args, "--cache", str(same), "--cache-mode", "record", "--db", str(same)])
    assert code == 2 and "given as both the trace and the cassette" in capsys.readouterr().err
    assert not same.exists()


_RECORDER = """
import sys
from vivarium.errors import VivariumError
from vivarium.gateways import GatewaySettings, build_gateway
cassette, base = sys.argv[1], sys.argv[2]
model = "mock" if base == "mock" else "openai/fake-model"
where = {"mock": True} if base == "mock" else {"api_base": base}
try:
    settings = GatewaySettings(model=model, **where, cache=cassette, cache_mode="auto")
    gateway = build_gateway(settings, seed=1)
    for i in range(40):
        gateway.chat(model=model, messages=[{"role": "user", "content": f"r{i}"}])
    gateway.close()
except VivariumError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
"""


def test_two_processes_recording_the_mock_and_a_model_into_one_cassette(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """Two processes, one on the mock and one on a model, record into the same new cassette
    at once: one of them keeps it, the other is refused in one line (when it opens the file,
    or at its first write if both opened it empty), and no row is mixed."""
    cassette = tmp_path / "shared.cassette"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VIVARIUM_PROGRESS": "0"}
    procs = {
        who: subprocess.Popen(
            [sys.executable, "-c", _RECORDER, str(cassette), base],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for who, base in (("mock", "mock"), ("real", server.base_url))
    }
    done = {
        who: (p.wait(timeout=120), p.stderr.read() if p.stderr else "") for who, p in procs.items()
    }
    for p in procs.values():
        if p.stderr:
            p.stderr.close()
    winners = [who for who, (code, _) in done.items() if code == 0]
    assert len(winners) == 1, done
    (loser,) = set(done) - set(winners)
    assert MIX in _one_line(done[loser][1])
    provider = {"mock": "vivarium-mock", "real": "litellm"}[winners[0]]
    with sqlite3.connect(cassette) as con:
        assert {r[0] for r in con.execute("SELECT provider FROM replies")} == {provider}


def test_a_sweep_over_the_mock_flag_with_one_cassette_keeps_it_to_one_provider(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """``exp.sweep(**{"llm.mock": [False, True]})`` with the config's one cassette: the
    model's arm records; the mock's arm fails with the line, and the cassette stays the
    model's."""
    cassette = tmp_path / "one.cassette"
    exp = _real(cassette, "auto", server)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        sweep = exp.sweep(**{"llm.mock": [False, True]}, folder=tmp_path / "runs", backend="inline")
    assert not sweep.ok
    failed = sweep.failed
    assert len(failed) == 1 and MIX in str(failed["error"].iloc[0])
    with sqlite3.connect(cassette) as con:
        assert con.execute("SELECT DISTINCT provider FROM replies").fetchall() == [("litellm",)]
