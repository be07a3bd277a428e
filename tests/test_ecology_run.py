"""The shipped ecology experiment: workflow agents and random agents, end to end."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.conftest import ROOT, run_cli
from vivarium import Run


def test_vvm_run_ecology_with_mock_llm(tmp_path: Path) -> None:
    digests = []
    for name in ("a", "b"):
        db = tmp_path / f"{name}.sqlite"
        out = run_cli(
            "run", str(ROOT / "data/experiments/ecology.yaml"), "--mock-llm", "--db", str(db)
        )
        assert out.returncode == 0, out.stderr
        assert "30 steps x 5 agents -> 150 decisions" in out.stdout
        digests.append(hashlib.sha256(db.read_bytes()).hexdigest())
    assert digests[0] == digests[1]
    run = Run.open(tmp_path / "a.sqlite")
    actions, transitions = run.actions, run.transitions
    assert {"alpha_2", "beta_2"} <= set(actions["agent_id"])
    assert actions["success"].any() and (~actions["success"]).any()
    failed = actions[~actions["success"]]
    assert failed["error"].notna().all()
    assert len(transitions) > 0
    assert set(transitions["agent_id"]) <= {"alpha_2", "beta_2"}
    alpha_states = set(transitions[transitions["agent_id"] == "alpha_2"]["to_state"])
    assert {"compute_metrics", "self_audit", "review_strategy", "decide_action"} <= alpha_states
    invoked = actions[(actions["action"] == "invoke_artifact") & actions["success"]]
    assert len(invoked) > 0  # the seeded calculator is usable
    assert run.validate().status == "ok"


def test_ecology_resume_equals_uninterrupted(tmp_path: Path) -> None:
    import sqlite3

    from vivarium import Experiment, TraceDb
    from vivarium.experiment import resume_run

    exp = Experiment.from_file(ROOT / "data/experiments/ecology.yaml", steps=12, checkpoint_every=3)
    full, part = tmp_path / "full.sqlite", tmp_path / "part.sqlite"
    exp.run(full)
    trace = TraceDb(part)
    exp.build(trace).run(8, finish=False)
    trace.close()
    resume_run(part)
    for table in ("steps", "messages", "llm_calls", "transitions", "checkpoints", "runs"):
        a = sqlite3.connect(full).execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
        b = sqlite3.connect(part).execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
        assert a == b, table


def test_a_run_of_several_agent_groups_names_every_policy(tmp_path) -> None:
    from tests.conftest import ROOT
    from vivarium import Experiment

    run = Experiment.from_file(ROOT / "data/experiments/ecology.yaml", steps=1).run(
        tmp_path / "eco.sqlite", progress=False
    )
    assert run.metadata["policy"] == "random,workflow"
