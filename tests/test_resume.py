"""Checkpoints and resume: an interrupted run, resumed, equals one that never stopped."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from vivarium import Experiment, Run, TraceDb
from vivarium.errors import ConfigError
from vivarium.experiment.runner import resume_run
from vivarium.trace.validate import validate_trace

TABLES = ("runs", "agents", "steps", "messages", "llm_calls", "transitions", "checkpoints")


def rows(db: Path, table: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
    finally:
        con.close()


def interrupted(exp: Experiment, db: Path, steps: int) -> None:
    """Run only ``steps`` steps and leave the run open, as a killed process would."""
    trace = TraceDb(db)
    exp.build(trace).run(steps, finish=False)
    trace.close()


@pytest.mark.parametrize("checkpoint_every", [None, 1, 4])
@pytest.mark.parametrize(
    "fields",
    [
        {"agents": 6},  # the vectorised random path
        {"agents": 3, "action_space": ["noop", "emit_event", "post_message"], "order": "shuffle"},
        {"agents": 3, "policy": "cognitive", "scheduling": "simultaneous", "llm": {"mock": True}},
    ],
    ids=["random-batch", "random-posts", "mock-llm"],
)
def test_resume_equals_uninterrupted(
    tmp_path: Path, checkpoint_every: int | None, fields: dict
) -> None:
    exp = Experiment(name="r", steps=11, seed=5, checkpoint_every=checkpoint_every, **fields)
    full, part = tmp_path / "full.sqlite", tmp_path / "part.sqlite"
    exp.run(full)
    interrupted(exp, part, 7)
    assert validate_trace(part).status == "incomplete"
    resumed = resume_run(part)
    assert resumed.metadata["status"] == "complete"
    for table in TABLES:
        assert rows(full, table) == rows(part, table), table
    assert validate_trace(part).status == "ok"


def test_resume_of_a_complete_run_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "done.sqlite"
    Experiment(agents=2, steps=3).run(db)
    before = db.read_bytes()
    assert Run.open(db).resume().metadata["status"] == "complete"
    assert db.read_bytes() == before


def test_vvm_resume(tmp_path: Path) -> None:
    exp = Experiment(name="cli", agents=4, steps=9, seed=2, checkpoint_every=2)
    full, part = tmp_path / "full.sqlite", tmp_path / "part.sqlite"
    exp.run(full)
    interrupted(exp, part, 5)
    out = run_cli("resume", str(part))
    assert out.returncode == 0, out.stderr
    assert "9 steps x 4 agents -> 36 decisions" in out.stdout
    assert rows(full, "steps") == rows(part, "steps")


def test_checkpoints_are_small_for_random_agents(tmp_path: Path) -> None:
    db = tmp_path / "ck.sqlite"
    Experiment(agents=50, steps=4, checkpoint_every=2).run(db)
    (size,) = rows(db, "checkpoints")[0][3:4]
    assert len(size) < 50 * 80  # seed + word count per agent, not 625-word generator states


def ecology_with_copied_agent(tmp_path: Path) -> tuple[Experiment, Path]:
    """The ecology config with its workflow agent read from a copy the test may edit."""
    import shutil

    from tests.conftest import ROOT

    folder = tmp_path / "alpha_2"
    shutil.copytree(ROOT / "data/agents/alpha_2", folder)
    exp = Experiment(
        name="eco",
        world="ecology",
        steps=6,
        seed=2,
        checkpoint_every=2,
        agents=[{"policy": "workflow", "agent": str(folder)}, {"policy": "random", "count": 2}],
        llm={"mock": True},
    )
    return exp, folder


def test_an_agent_folder_is_part_of_the_runs_identity(tmp_path: Path) -> None:
    exp, folder = ecology_with_copied_agent(tmp_path)
    same, _ = ecology_with_copied_agent(tmp_path / "again")  # same files, another place
    digest = exp.config.identity()["agents"][0]["spec_digest"]
    assert digest == same.config.identity()["agents"][0]["spec_digest"]
    assert len(digest) == 64 and exp.config.identity()["agents"][1]["spec_digest"] is None
    before = exp.config.resolved_run_id()
    prompt = folder / "system_prompt.md"
    prompt.write_text(prompt.read_text() + "\nBe brief.\n")
    edited = exp.config.identity()["agents"][0]["spec_digest"]
    assert edited != digest and exp.config.resolved_run_id() != before


def test_resume_refuses_an_agent_folder_edited_since_the_run_began(tmp_path: Path) -> None:
    exp, folder = ecology_with_copied_agent(tmp_path)
    part = tmp_path / "part.sqlite"
    interrupted(exp, part, 3)
    recorded = Run.open(part).metadata["config"]["agents"][0]["spec_digest"]
    assert recorded == exp.config.identity()["agents"][0]["spec_digest"]
    agent_file = folder / "agent.yaml"
    original = agent_file.read_text()
    agent_file.write_text(original + "\n# edited\n")
    with pytest.raises(ConfigError, match="has changed since the run was recorded"):
        resume_run(part)
    agent_file.write_text(original)  # put back: the run resumes and completes
    assert resume_run(part).metadata["status"] == "complete"


# -- a resume goes on the way the run was made -------------------------------------------------
from tests.support.fake_openai import FakeOpenAIServer  # noqa: E402
from vivarium.errors import RunInterrupted  # noqa: E402
from vivarium.trace.resume import recorded_llm_settings  # noqa: E402

LLM_SETTINGS = {
    "model": "openai/fake",
    "force_tool": True,
    "rate_limit_rpm": 600.0,
    "rate_limit_tpm": 90000.0,
    "timeout": 7.0,
    "max_concurrency": 3,
    "transport": "direct",
    "num_retries": 0,
    "agent_timeout": 9.0,
    "agent_retries": 1,
    "cache_mode": "auto",
}


def interrupted_llm_run(db: Path, server: FakeOpenAIServer, broken: list[bool]) -> Experiment:
    """A 6-step LLM run (checkpoints every 2 steps) stopped at step 3 by a failing server."""
    exp = Experiment(
        name="llmres",
        policy="cognitive",
        agents=2,
        steps=6,
        seed=3,
        scheduling="simultaneous",
        checkpoint_every=2,
        llm={**LLM_SETTINGS, "api_base": server.base_url},
    )

    def on_step(step: int, _record: object) -> None:
        if step == 2:
            broken[0] = True

    with pytest.raises(RunInterrupted):
        exp.run(db, on_step=on_step)
    return exp


def failing_while(broken: list[bool]):  # noqa: ANN201
    return lambda _index, _body: "500" if broken[0] else None


def gateway_configs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The LLM configs every gateway built from now on is made from, in order."""
    import vivarium.experiment.build as build

    seen: list[Any] = []
    original = build.gateway_settings
    monkeypatch.setattr(build, "gateway_settings", lambda llm: seen.append(llm) or original(llm))
    return seen


def all_rows(db: Path) -> dict[str, list[tuple]]:
    return {t: rows(db, t) for t in (*TABLES, "meta")}


def test_resume_goes_on_with_the_recorded_llm_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = [False]
    db = tmp_path / "llm.sqlite"
    with FakeOpenAIServer(faults=failing_while(broken)) as server:
        interrupted_llm_run(db, server, broken)
        assert Run.open(db).metadata["status"] == "interrupted"
        settings = recorded_llm_settings(db)
        assert settings["api_base"] == server.base_url
        assert {k: settings[k] for k in ("rate_limit_rpm", "timeout", "max_concurrency")} == {
            "rate_limit_rpm": 600.0,
            "timeout": 7.0,
            "max_concurrency": 3,
        }
        assert settings["on_llm_error"] == "stop" and "api_key" not in settings
        seen = gateway_configs(monkeypatch)
        broken[0] = False
        run = resume_run(db)  # no api_base given: the recorded one is used
        assert run.metadata["status"] == "complete" and run.metadata["steps_done"] == 6
        (llm,) = seen
        for key, value in {**LLM_SETTINGS, "api_base": server.base_url}.items():
            if key != "max_concurrency":  # the run's own on a resume, not llm's: see below
                assert getattr(llm, key) == value, key
        assert recorded_llm_settings(db)["max_concurrency"] == 3  # the pace it went on at
        calls = run.llm_calls
        assert calls[calls["step"] >= 2]["error"].isna().all()
        assert not run.actions["fallback"].any()


def test_resume_flags_override_the_recorded_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = [False]
    db = tmp_path / "llm.sqlite"
    with FakeOpenAIServer(faults=failing_while(broken)) as server:
        interrupted_llm_run(db, server, broken)
    broken[0] = False
    with FakeOpenAIServer() as moved:  # the server came back on another port
        url = moved.base_url
        seen = gateway_configs(monkeypatch)
        run = Run.open(db).resume(llm={"api_base": url, "rate_limit_rpm": 1200})
        assert run.metadata["status"] == "complete"
        assert seen[0].api_base == url and seen[0].rate_limit_rpm == 1200
        assert seen[0].timeout == 7.0  # the rest as recorded
        assert moved.request_count > 0
    assert recorded_llm_settings(db)["api_base"] == url  # what the last resume used


def test_failed_resume_leaves_the_trace_as_it_was(tmp_path: Path) -> None:
    broken = [False]
    db = tmp_path / "llm.sqlite"
    with FakeOpenAIServer(faults=failing_while(broken)) as server:
        interrupted_llm_run(db, server, broken)
        before = all_rows(db)
        meta = Run.open(db).metadata
        assert (meta["status"], meta["steps_done"]) == ("interrupted", 3)
        assert rows(db, "checkpoints")[-1][0] == 1  # a resume redoes step 2: it is at stake
        # Still failing at the first redone step: nothing cut, nothing relabelled.
        with pytest.raises(RunInterrupted):
            resume_run(db)
        assert all_rows(db) == before
        # A bad flag, then an unreachable server: refused before anything is touched.
        with pytest.raises(ConfigError, match="rate_limit_rpm"):
            resume_run(db, llm={"rate_limit_rpm": -5})
        assert all_rows(db) == before
    with pytest.raises(ConfigError, match="cannot reach the LLM server"):
        resume_run(db)
    assert all_rows(db) == before


def test_cli_resume_of_a_complete_run_says_so(tmp_path: Path) -> None:
    db = tmp_path / "done.sqlite"
    Experiment(name="done", agents=2, steps=3).run(db)
    before = db.read_bytes()
    out = run_cli("resume", str(db))
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1 and "already complete" in lines[0] and "nothing to resume" in lines[0]
    assert db.read_bytes() == before


def test_cli_resume_takes_every_llm_flag() -> None:
    from vivarium.cli import build_parser

    args = build_parser().parse_args(
        [
            "resume", "x.sqlite", "--api-base", "http://h/v1", "--rate-limit-rpm", "60",
            "--rate-limit-tpm", "1000", "--timeout", "3", "--max-concurrency", "4",
            "--num-retries", "1", "--agent-timeout", "5", "--agent-retries", "2",
            "--on-llm-error", "fallback", "--transport", "litellm", "--cache-mode", "replay",
        ]
    )  # fmt: skip
    assert (args.rate_limit_rpm, args.rate_limit_tpm, args.timeout) == (60, 1000, 3)
    assert (args.max_concurrency, args.num_retries, args.agent_timeout) == (4, 1, 5)
    assert (args.agent_retries, args.on_llm_error) == (2, "fallback")
