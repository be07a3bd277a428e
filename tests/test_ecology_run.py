"""The shipped ecology experiment: workflow agents and random agents, end to end."""

from __future__ import annotations

import hashlib
import json
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
    # alpha_2 and beta_2 are linear workflows, as the agent ecology wrote them: no states to
    # move between, every step each turn, one model call per llm step (alpha_2: three).
    assert len(transitions) == 0
    calls = run.llm_calls
    alpha_calls = calls[calls["agent_id"] == "alpha_2"].groupby("step").size()
    assert (alpha_calls >= 3).all() and len(alpha_calls) == 30
    invoked = actions[(actions["action"] == "invoke_artifact") & actions["success"]]
    assert len(invoked) > 0  # the seeded calculator is usable
    assert run.validate().status == "ok"


def test_ecology_resume_equals_uninterrupted(tmp_path: Path) -> None:
    import sqlite3

    from vivarium import Experiment, TraceDb
    from vivarium.experiment.runner import resume_run

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


def test_the_routine_loop_is_recorded_and_is_not_a_pivot(tmp_path: Path) -> None:
    from vivarium import Experiment
    from vivarium.analysis import pivots, summary

    # The ecology experiment with the state-machine agents of the test fixtures.
    exp = Experiment.from_file(ROOT / "data/experiments/ecology.yaml", seed=1)
    fixtures = ROOT / "tests/fixtures/agents"
    exp.config.agents[0].agent = str(fixtures / "loop_alpha")
    exp.config.agents[1].agent = str(fixtures / "loop_beta")
    run = exp.run(tmp_path / "eco.sqlite", progress=False)
    t = run.transitions
    moves = {(f, to): set(g["routine"]) for (f, to), g in t.groupby(["from_state", "to_state"])}
    # what the agent folders declare: the loops are routine, strategy changes and replans not
    assert moves[("decide_action", "compute_metrics")] == {True}
    assert moves[("compute_metrics", "self_audit")] == {True}
    assert moves[("review", "work")] == {True}
    for pivot in (("review_strategy", "self_audit"), ("review", "plan")):
        assert moves.get(pivot, {False}) == {False}
    # Counted by hand from the rows: a pivot is a non-routine move back to an earlier state
    # (alpha_2 changing strategy, beta_2 replanning), or a decision flagged should_pivot at a
    # step without such a move; before, the loop added one per tick.
    real = t[~t["routine"]]
    back = real[
        ((real["from_state"] == "review_strategy") & (real["to_state"] == "self_audit"))
        | ((real["from_state"] == "review") & (real["to_state"] == "plan"))
    ]
    moved = set(zip(back["agent_id"], back["step"], strict=True))
    flagged = set()
    for agent, step, meta in zip(
        run.actions["agent_id"], run.actions["step"], run.actions["metadata"], strict=True
    ):
        data = json.loads(meta) if isinstance(meta, str) else {}
        if data.get("should_pivot") or (data.get("variables") or {}).get("should_pivot"):
            flagged.add((agent, step))
    expected = len(back) + len(flagged - moved)
    looping = int(
        ((t["from_state"] == "decide_action") & (t["to_state"] == "compute_metrics")).sum()
        + ((t["from_state"] == "review") & (t["to_state"] == "work")).sum()
    )
    assert looping >= 29  # alpha_2 goes round once a tick
    assert int(summary(run)["pivots"][0]) == expected
    assert int(pivots(run)["pivots"].sum()) == expected
    # declaring the loop routine counts the same as excluding its moves by name
    loop = ["decide_action -> compute_metrics", "review -> work"]
    assert int(summary(run, include_routine=True, exclude=loop)["pivots"][0]) == expected
    with_loop = int(summary(run, include_routine=True)["pivots"][0])
    assert with_loop == len(back) + looping + len(flagged - moved - _steps_of(t, loop))
    assert run.validate().status == "ok"


def test_random_agents_draw_the_ecologys_actions_by_default(tmp_path: Path) -> None:
    from vivarium import Experiment

    run = Experiment(name="eco_random", world="ecology", policy="random", agents=3, steps=8).run(
        tmp_path / "r.sqlite", progress=False
    )
    actions = run.actions
    drawn = set(actions["action"])
    assert drawn <= {"noop", "read_artifact", "write_artifact", "invoke_artifact", "post_message"}
    assert "emit_event" not in drawn and len(drawn) >= 3
    assert not actions["error"].fillna("").str.contains("unknown action").any()
    assert actions["success"].sum() > (actions["action"] == "noop").sum()  # real actions work


def _steps_of(t: object, moves: list[str]) -> set[tuple[str, int]]:
    """(agent, step) of the transitions named ``"from -> to"``."""
    pairs = {tuple(m.split(" -> ")) for m in moves}
    return {
        (a, int(st))
        for a, st, f, to in zip(
            t["agent_id"], t["step"], t["from_state"], t["to_state"], strict=True
        )
        if (f, to) in pairs
    }
