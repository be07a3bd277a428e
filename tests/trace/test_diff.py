"""``vvm diff`` / ``Run.diff``: the config first, then the first divergence, then the count.

Each kind of divergence is planted by hand in a copy of a trace (plain ``sqlite3``), at a step
and agent chosen here, and must be found there, named as what it is; two runs of one config
are identical; a fork differs from its fork step on; two sweeps are compared run by run.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from vivarium import Experiment
from vivarium.errors import TraceError
from vivarium.facade import Run
from vivarium.trace.diff import diff_runs

STEP, SEQ = 2, 1  # where a divergence is planted: the second agent of step 2
KEY = (STEP << 24) | SEQ


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("diff")
    return Experiment(name="d", policy="cognitive", agents=3, steps=5, seed=2).run(
        folder / "llm.sqlite", progress=False
    )


def planted(run: Run, tmp_path: Path, *statements: str) -> Path:
    copy = tmp_path / "planted.sqlite"
    shutil.copyfile(run.path, copy)
    con = sqlite3.connect(copy)
    try:
        for statement in statements:
            assert con.execute(statement).rowcount >= 1, statement
        con.commit()
    finally:
        con.close()
    return copy


def test_two_runs_of_one_config_are_identical(llm_run: Run, tmp_path: Path) -> None:
    again = Experiment(name="d", policy="cognitive", agents=3, steps=5, seed=2).run(
        tmp_path / "again.sqlite", progress=False
    )
    found = llm_run.diff(again)
    assert found.identical and found.first is None and found.config == []
    assert found.decisions == (15, 15) and found.decisions_differing == 0


@pytest.mark.parametrize(
    ("what", "statements", "differing"),
    [
        ("action", [f"UPDATE decisions SET action = 'noop' WHERE id = {KEY}"], 1),
        ("outcome", [f"UPDATE decisions SET success = 0, error = 'x' WHERE id = {KEY}"], 1),
        (
            "prompt",
            [
                f"UPDATE llm_calls SET request_hash = 'planted' WHERE step = {STEP} AND agent_idx = 1"
            ],
            0,
        ),
        (
            "reply",
            [
                'INSERT INTO llm_texts (body) VALUES (\'{"content":"planted"}\')',
                "UPDATE llm_calls SET reply = (SELECT max(id) FROM llm_texts) "
                f"WHERE step = {STEP} AND agent_idx = 1",
            ],
            0,
        ),
        ("messages", [f"UPDATE messages SET content = 'planted' WHERE step = {STEP}"], 0),
        ("state hash", [f"UPDATE steps SET state_hash = 'planted' WHERE step = {STEP}"], 0),
    ],
)
def test_each_kind_of_divergence_is_found_where_it_was_planted(
    llm_run: Run, tmp_path: Path, what: str, statements: list[str], differing: int
) -> None:
    found = diff_runs(llm_run.path, planted(llm_run, tmp_path, *statements))
    assert not found.identical
    assert found.first is not None
    assert (found.first.step, found.first.what) == (STEP, what)
    if what not in ("messages", "state hash"):
        assert found.first.agent_id == "agent_001"
    assert found.decisions_differing == differing
    assert found.config == []


def test_a_missing_step_and_a_config_difference(llm_run: Run, tmp_path: Path) -> None:
    cut = planted(
        llm_run,
        tmp_path,
        "DELETE FROM steps WHERE step = 4",
        f"DELETE FROM decisions WHERE id >= {4 << 24}",
        "DELETE FROM llm_calls WHERE step = 4",
        "DELETE FROM messages WHERE step = 4",
        "UPDATE runs SET config_json = json_set(config_json, '$.seed', 9)",
    )
    found = diff_runs(llm_run.path, cut)
    assert found.first is not None and (found.first.step, found.first.what) == (4, "missing")
    assert found.decisions_differing == 3
    assert found.config == [("seed", 2, 9)]


def test_a_fork_differs_from_its_fork_step_on(llm_run: Run, tmp_path: Path) -> None:
    fork = llm_run.fork(
        3, agent_changes={"agent_002": {"system_prompt": "Be brief."}}, db=tmp_path / "f.sqlite"
    ).run(progress=False)
    found = llm_run.diff(fork.path)
    assert found.first is not None
    assert (found.first.step, found.first.agent_id, found.first.what) == (3, "agent_002", "prompt")
    assert found.first.b == "Be brief."  # the message that differs, not a hash
    keys = {key for key, _, _ in found.config}
    # agent_000 and agent_001 stay one group; agent_002 is the second
    assert {"fork_of.run_id", "fork_of.step", "agents.1.policy_options.system_prompt"} <= keys


def vvm(*words: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "vivarium.cli", *words]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_vvm_diff_exits_0_when_identical_1_when_not_2_when_it_cannot(
    llm_run: Run, tmp_path: Path
) -> None:
    same = vvm("diff", str(llm_run.path), str(llm_run.path))
    assert same.returncode == 0 and same.stdout.startswith("identical")
    other = planted(llm_run, tmp_path, f"UPDATE decisions SET action = 'noop' WHERE id = {KEY}")
    differs = vvm("diff", str(llm_run.path), str(other))
    assert differs.returncode == 1
    assert f"first divergence: step {STEP}, agent_001: action" in differs.stdout
    assert "decisions differing: 1 (of 15 and 15)" in differs.stdout
    missing = vvm("diff", str(llm_run.path), str(tmp_path / "none.sqlite"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    with pytest.raises(TraceError):
        diff_runs(llm_run.path, tmp_path / "none.sqlite")


def test_two_sweeps_are_compared_run_by_run(tmp_path: Path) -> None:
    exp = Experiment(name="sw", agents=2, steps=3)
    kwargs = {"backend": "inline", "progress": False}
    a = exp.sweep(seed=[1, 2], folder=tmp_path / "a", **kwargs)
    b = exp.sweep(seed=[1, 2], folder=tmp_path / "b", **kwargs)
    c = Experiment(name="sw", agents=2, steps=3, order="shuffle").sweep(
        seed=[1, 2], folder=tmp_path / "c", **kwargs
    )
    same = vvm("diff", str(a.folder), str(b.folder))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "2 of 2 runs identical" in same.stdout
    differs = vvm("diff", str(a.folder), str(c.folder))
    assert differs.returncode == 1 and "0 of 2 runs identical" in differs.stdout
    assert differs.stdout.count("config (order)") == 2
