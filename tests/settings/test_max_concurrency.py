"""``max_concurrency``: every entry point resolves it the same way, to the one default.

Wherever the value is given (the run's own field, ``llm.max_concurrency`` of older configs, or
nowhere), and by whichever entry point (the constructor, ``from_file``, ``vvm run``, ``vvm
phase2``, aam's sectioned config, a sweep axis, a resume, the panel), the engine runs at: the
run's own, else the older place's, else 16 (``vivarium.settings.DEFAULT_MAX_CONCURRENCY``);
and the trace records that pace for a resume. The expected values are written out here from
that rule, never asked of the code under test.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vivarium import Experiment, Run
from vivarium.cli import main
from vivarium.errors import ConfigError
from vivarium.trace.resume import recorded_llm_settings

PACES = st.none() | st.integers(min_value=1, max_value=4096)
EXAMPLES = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_NUMBER = itertools.count()


class Built(ConfigError):
    """Raised once the engine is built: what it was built with is all these tests need."""


class Engines:
    """The settings (``WorldEngineConfig``) of every engine built while the fixture is on."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.stop = True  # raise Built once built: nothing is run or written

    @property
    def pace(self) -> int:
        return int(self.seen[-1].max_concurrency)


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> Engines:
    import vivarium.experiment.runner as runner

    found = Engines()
    original = runner.build_engine

    def capture(config: Any, trace_db: Any, shared: Any = None) -> Any:
        engine = original(config, trace_db, shared)
        found.seen.append(engine.config)
        if found.stop:
            raise Built("built")
        return engine

    monkeypatch.setattr(runner, "build_engine", capture)
    return found


def expected(own: int | None, older: int | None) -> int:
    """The rule, as the README states it: the run's own, else the older place's, else 16."""
    if own is not None:
        return own
    return older if older is not None else 16


def config_fields(own: int | None, older: int | None, llm: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"agents": 1, "steps": 1}
    if own is not None:
        out["max_concurrency"] = own
    if llm or older is not None:
        out["llm"] = {"mock": True} if older is None else {"mock": True, "max_concurrency": older}
    return out


def fresh(folder: Path, suffix: str = ".sqlite") -> Path:
    return folder / f"r{next(_NUMBER)}{suffix}"


def build(entry: str, own: int | None, older: int | None, llm: bool, folder: Path) -> None:
    """Start a run of the fields by ``entry`` (it stops once its engine is built)."""
    data = config_fields(own, older, llm)
    if entry == "constructor":
        with pytest.raises(Built):
            Experiment(**data).run(fresh(folder), progress=False)
        return
    path = fresh(folder, ".yaml")
    if entry == "from_file":
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(Built):
            Experiment.from_file(path).run(fresh(folder), progress=False)
    elif entry == "from_file, own as an override":
        path.write_text(yaml.safe_dump({k: v for k, v in data.items() if k != "max_concurrency"}))
        overrides = {} if own is None else {"max_concurrency": own}
        with pytest.raises(Built):
            Experiment.from_file(path, **overrides).run(fresh(folder), progress=False)
    elif entry == "vvm run --max-concurrency":
        path.write_text(yaml.safe_dump({k: v for k, v in data.items() if k != "max_concurrency"}))
        flag = [] if own is None else ["--max-concurrency", str(own)]
        args = ["run", str(path), "--db", str(fresh(folder)), "--no-progress", *flag]
        assert main(args) == 2  # Built, a ConfigError: one line, exit status 2
    else:
        raise AssertionError(entry)


@EXAMPLES
@given(
    entry=st.sampled_from(
        ["constructor", "from_file", "from_file, own as an override", "vvm run --max-concurrency"]
    ),
    own=PACES,
    older=PACES,
    llm=st.booleans(),
)
def test_every_entry_point_resolves_it_the_same_way(
    engines: Engines,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    entry: str,
    own: int | None,
    older: int | None,
    llm: bool,
) -> None:
    build(entry, own, older, llm, tmp_path)
    capsys.readouterr()
    assert engines.pace == expected(own, older)


@EXAMPLES
@given(flag=PACES, cap=PACES)
def test_vvm_phase2_gives_the_runs_own_capped_by_aams_flag(
    engines: Engines,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flag: int | None,
    cap: int | None,
) -> None:
    """``--max-concurrency`` is the run's own; ``--rate-limit-max-concurrent`` caps it."""
    args = ["phase2", "--mock-llm", "--steps", "1", "--agents", "1", "--no-progress"]
    args += ["--db", str(fresh(tmp_path))]
    args += [] if flag is None else ["--max-concurrency", str(flag)]
    args += [] if cap is None else ["--rate-limit-max-concurrent", str(cap)]
    assert main(args) == 2
    capsys.readouterr()
    given_ones = [v for v in (flag, cap) if v is not None]
    assert engines.pace == (min(given_ones) if given_ones else 16)
    assert engines.seen[-1].max_concurrency == engines.pace


@pytest.mark.parametrize(
    ("scheduler", "policy", "pace"),
    [
        ({}, {"kind": "random"}, 50),  # aam's own default, as its file means it
        ({"max_concurrency": 7}, {"kind": "random"}, 7),
        ({}, {"kind": "cognitive", "mock_llm": True}, 50),
        ({}, {"kind": "cognitive", "mock_llm": True, "rate_limit_max_concurrent": 4}, 4),
        ({"max_concurrency": 3}, {"kind": "cognitive", "mock_llm": True}, 3),
        (
            {"max_concurrency": 3},
            {"kind": "cognitive", "mock_llm": True, "rate_limit_max_concurrent": 9},
            3,
        ),
        (  # the cap only where aam's rate limiter was on
            {},
            {
                "kind": "cognitive",
                "mock_llm": True,
                "rate_limit_max_concurrent": 4,
                "rate_limit_enabled": False,
            },
            50,
        ),
    ],
)
def test_an_aam_sectioned_config_keeps_aams_pace(
    engines: Engines,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    scheduler: dict[str, Any],
    policy: dict[str, Any],
    pace: int,
) -> None:
    from vivarium.experiment.sections import AAM_MAX_CONCURRENCY

    assert AAM_MAX_CONCURRENCY == 50  # aam's scheduler default, not Vivarium's (16)
    path = tmp_path / "aam.json"
    sections = {"run": {"steps": 1, "agents": 1}, "scheduler": scheduler, "policy": policy}
    path.write_text(json.dumps(sections))
    assert main(["experiment", "--config", str(path), "--db", str(fresh(tmp_path))]) == 2
    assert f"max_concurrency={pace}" in capsys.readouterr().out
    assert engines.pace == pace


@given(given_pace=PACES, cap=PACES)
def test_aams_cap_is_the_tighter_of_the_two(given_pace: int | None, cap: int | None) -> None:
    from vivarium.experiment.sections import capped_concurrency

    given_ones = [v for v in (given_pace, cap) if v is not None]
    assert capped_concurrency(given_pace, cap) == (min(given_ones) if given_ones else None)


def test_a_sweep_axis_is_the_runs_own(engines: Engines, tmp_path: Path) -> None:
    """Over a base config that gives the older place, as over one that gives none."""
    engines.stop = False
    older = Experiment(agents=1, steps=1, llm={"mock": True, "max_concurrency": 5})
    sweep = older.sweep(max_concurrency=[3, 9], backend="inline", folder=tmp_path / "s")
    assert sweep.ok
    assert sorted(e.max_concurrency for e in engines.seen) == [3, 9]
    engines.seen.clear()
    base = Experiment(agents=1, steps=1, llm={"mock": True, "max_concurrency": 5})
    assert base.sweep(seed=[1, 2], backend="inline", folder=tmp_path / "t").ok
    assert [e.max_concurrency for e in engines.seen] == [5, 5]  # the older place still read


def _interrupt(path: Path) -> None:
    """As if the run stopped before its last step (a resume re-executes what it kept)."""
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE runs SET status = 'interrupted', steps_done = 1")
    con.close()


@pytest.mark.parametrize(
    ("fields", "recorded"),
    [
        ({}, None),  # no LLM agents and no pace given: nothing is recorded
        ({"max_concurrency": 3}, 3),
        ({"llm": {"mock": True}}, 16),
        ({"llm": {"mock": True, "max_concurrency": 4}}, 4),  # the older place
        ({"max_concurrency": 2, "llm": {"mock": True, "max_concurrency": 4}}, 2),
    ],
)
def test_a_resume_goes_on_at_the_recorded_pace_or_the_one_given(
    engines: Engines,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fields: dict[str, Any],
    recorded: int | None,
) -> None:
    engines.stop = False
    db = tmp_path / "run.sqlite"
    Experiment(agents=2, steps=2, **fields).run(db, progress=False)
    at_start = engines.pace
    assert at_start == (16 if recorded is None else recorded)
    assert recorded_llm_settings(db).get("max_concurrency") == recorded

    _interrupt(db)
    Run.open(db).resume(progress=False)
    assert engines.pace == at_start  # as recorded (the default when nothing was)

    _interrupt(db)  # a pace given to the resume, with or without LLM agents
    Run.open(db).resume(progress=False, llm={"max_concurrency": 5})
    assert engines.pace == 5 and recorded_llm_settings(db)["max_concurrency"] == 5

    _interrupt(db)  # and by the flag
    assert main(["resume", str(db), "--max-concurrency", "6", "--no-progress"]) == 0
    capsys.readouterr()
    assert engines.pace == 6 and recorded_llm_settings(db)["max_concurrency"] == 6


@pytest.mark.parametrize(("own", "older"), [(None, None), (3, None), (None, 4), (2, 4)])
def test_the_panel_runs_at_the_experiments_pace(
    engines: Engines, tmp_path: Path, own: int | None, older: int | None
) -> None:
    pytest.importorskip("ipywidgets")
    from vivarium.widgets import ControlPanel

    panel = ControlPanel(Experiment(**config_fields(own, older, llm=True)), folder=tmp_path)
    assert panel.run() is None  # it shows the error (Built) instead
    assert engines.pace == expected(own, older)
