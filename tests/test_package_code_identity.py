"""A finished trace is never silently replaced by a different result.

The new-user pass of issue 16: ``vvm phase2 --db runs/x.sqlite`` run again after a prompt in
``vivarium/policies/prompting.py`` changed had the same run id (ids derive from the config), so
the finished trace was replaced by other messages and another final hash, unasked. A run now
records the digest of the package's worlds and policies code in its trace's ``meta`` table;
here a trace "made by other code" is one whose recorded digest is set to another value, which
is what an edit of those modules between two runs gives.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from vivarium import Experiment, Run
from vivarium.errors import ConfigError, TraceError, TracePathWarning
from vivarium.experiment.identity import CODE_META_KEY, package_code_digest
from vivarium.types import ActionRequest

OTHER = "0.0.9+0123456789abcdef"


def _exp(**kw: Any) -> Experiment:
    return Experiment(**{"name": "pc", "agents": 3, "steps": 4, "seed": 7, **kw})


def _set_code(path: Path, value: str) -> None:
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE meta SET value = ? WHERE key = ?", (value, CODE_META_KEY))
    con.close()


def _recorded_code(path: Path) -> str | None:
    con = sqlite3.connect(path)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = ?", (CODE_META_KEY,)).fetchone()
    finally:
        con.close()
    return None if row is None else row[0]


def test_a_run_records_the_code_that_made_it(tmp_path: Path) -> None:
    run = _exp().run(tmp_path / "a.sqlite", progress=False)
    assert _recorded_code(run.path) == package_code_digest()
    # the digest is of the package's worlds and policies sources, not of the process
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from vivarium.experiment.identity import package_code_digest as d; print(d())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == package_code_digest()


def test_a_rerun_by_the_same_code_rewrites_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    _exp().run(path, progress=False)
    before = path.read_bytes()
    _exp().run(path, progress=False)
    assert path.read_bytes() == before


def test_at_the_default_path_a_run_by_other_code_goes_beside_the_old_result(
    tmp_path: Path,
) -> None:
    """A notebook cell re-run after an upgrade: both results kept, the new path said."""
    path = tmp_path / "pc.sqlite"
    _exp().run(path, progress=False)
    _set_code(path, OTHER)
    before = path.read_bytes()
    code = package_code_digest().rpartition("+")[2][:8]
    for _ in range(2):  # the second time, its own file is rewritten
        with pytest.warns(TracePathWarning, match="made by other Vivarium code") as said:
            run = _exp().run(folder=tmp_path, progress=False)
        assert run.path == tmp_path / f"pc-code-{code}.sqlite"
        assert str(run.path) in str(said[0].message)
        assert _recorded_code(run.path) == package_code_digest()
    assert path.read_bytes() == before


@pytest.mark.parametrize("named", [True, False])
def test_a_finished_trace_made_by_other_code_is_not_replaced(tmp_path: Path, named: bool) -> None:
    path = tmp_path / "pc.sqlite"
    _exp().run(path, progress=False)
    _set_code(path, OTHER)
    before = path.read_bytes()
    where = {"db": path} if named else {"folder": tmp_path}
    if not named:  # the default path's way out is taken too (by a third code)
        code = package_code_digest().rpartition("+")[2][:8]
        beside = tmp_path / f"pc-code-{code}.sqlite"
        _exp().run(beside, progress=False)
        _set_code(beside, OTHER)
    with pytest.raises(TraceError, match="made by other Vivarium code") as info:
        _exp().run(**where, progress=False)
    assert "\n" not in str(info.value) and "overwrite=True" in str(info.value)
    assert path.read_bytes() == before
    run = _exp().run(**where, overwrite=True, progress=False)  # asked: replaced
    assert run.path == path and _recorded_code(path) == package_code_digest()


def test_an_unfinished_trace_made_by_other_code_is_rerun(tmp_path: Path) -> None:
    path = tmp_path / "pc.sqlite"
    _exp().run(path, progress=False)
    _set_code(path, OTHER)
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE runs SET status = 'interrupted'")
    con.close()
    assert _exp().run(path, progress=False).metadata["status"] == "complete"


def test_a_run_id_given_by_hand_does_not_replace_another_configs_result(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"
    _exp(run_id="mine").run(path, progress=False)
    with pytest.raises(TraceError, match="another config under that run id"):
        _exp(run_id="mine", steps=5).run(path, progress=False)
    assert Run.open(path).metadata["steps"] == 4


def test_vvm_refuses_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"
    args = [sys.executable, "-m", "vivarium.cli", "phase1", "--steps", "3", "--agents", "2"]
    args += ["--db", str(path), "--no-progress"]
    subprocess.run(args, capture_output=True, text=True, check=True)
    _set_code(path, OTHER)
    before = path.read_bytes()
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "made by other Vivarium code" in lines[0], out.stderr
    assert path.read_bytes() == before
    again = subprocess.run([*args, "--overwrite"], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr


class StopAt3:
    """Posts each step (the run is stopped at step 3 from outside, as Ctrl-C does)."""

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Post."""
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="post_message",
            arguments={"content": "x"},
        )


def _ctrl_c_after_step_2(step: int, record: Any) -> None:
    if step == 2:
        raise KeyboardInterrupt


def test_a_resume_by_other_package_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with pytest.raises(KeyboardInterrupt):
        _exp(policy=StopAt3, steps=6, checkpoint_every=2).run(
            path, progress=False, on_step=_ctrl_c_after_step_2
        )
    _set_code(path, OTHER)
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="worlds and policies code") as info:
        Run.open(path).resume(progress=False, policy=StopAt3)
    assert "\n" not in str(info.value)
    assert path.read_bytes() == before


def test_a_sweep_does_not_hand_back_a_result_of_other_code(tmp_path: Path) -> None:
    folder = tmp_path / "sw"
    first = _exp().sweep(seed=[1, 2], folder=folder, backend="inline", progress=False)
    stale = Path(first.index["path"][0])
    _set_code(stale, OTHER)
    before = stale.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = _exp().sweep(seed=[1, 2], folder=folder, backend="inline", progress=False)
    rows = again.index.set_index("path")
    assert rows.loc[str(stale), "status"] == "failed"
    assert "made by other Vivarium code" in rows.loc[str(stale), "error"]
    assert list(rows["status"]).count("complete") == 1
    assert stale.read_bytes() == before
