"""The real-model cassettes replay offline, byte for byte, and a request they lack stops the run.

``data/cassettes/ecology_smollm2.cassette`` and ``channel_smollm2.cassette`` hold SmolLM2-135M-
Instruct's replies (``scripts/record_cassettes.py`` recorded them against llama-cpp-python's
server). The paper figures and notebooks 02/03 replay them, so they must give the same trace on
every run, without a server, and must never quietly ask a model for a reply they do not hold.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from vivarium import Experiment, Run
from vivarium.paper import CHANNEL_RUN, ECOLOGY_CONFIG, ECOLOGY_SEEDS

CASSETTES = ROOT / "data" / "cassettes"
ECOLOGY = ROOT / "data" / "experiments" / ECOLOGY_CONFIG
ECOLOGY_CASSETTE = CASSETTES / "ecology_smollm2.cassette"
CHANNEL_CASSETTE = CASSETTES / "channel_smollm2.cassette"
WORKFLOW_AGENTS = ("alpha_2", "beta_2")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ecology(seed: int) -> Experiment:
    replay = {"cache": str(ECOLOGY_CASSETTE), "cache_mode": "replay"}
    return Experiment.from_file(ECOLOGY, seed=seed, llm=replay)


def stored_rows(cassette: Path) -> int:
    con = sqlite3.connect(f"file:{cassette}?mode=ro", uri=True)
    try:
        return int(con.execute("SELECT count(*) FROM replies").fetchone()[0])
    finally:
        con.close()


def test_the_experiment_file_replays_by_default() -> None:
    # `vvm run data/experiments/ecology_smollm2.yaml` must never reach for a server.
    llm = Experiment.from_file(ECOLOGY).config.llm
    assert llm.cache_mode == "replay" and llm.model == "openai/smollm2"
    assert (ROOT / llm.cache).resolve() == ECOLOGY_CASSETTE


@pytest.mark.parametrize("seed", ECOLOGY_SEEDS)
def test_ecology_replays_byte_identically(tmp_path: Path, seed: int) -> None:
    before = sha(ECOLOGY_CASSETTE)
    first, second = (tmp_path / f"{n}.sqlite" for n in ("a", "b"))
    ecology(seed).run(first, progress=False)
    ecology(seed).run(second, progress=False)
    assert sha(first) == sha(second)
    assert sha(ECOLOGY_CASSETTE) == before  # replay never writes
    run = Run.open(first)
    assert run.metadata["status"] == "complete"
    steps = run.steps
    assert len(steps) == 15 and steps["state_hash"].str.len().eq(64).all()
    assert steps["state_hash"].tolist() == Run.open(second).steps["state_hash"].tolist()
    calls = run.llm_calls
    assert len(calls) > 0 and calls["cache_hit"].all()
    assert set(calls["agent_id"]) == set(WORKFLOW_AGENTS)  # the random agents ask no model
    assert (calls["model"] == "openai/smollm2").all()


def test_every_recorded_seed_uses_its_replies_and_the_model_decided_something(
    tmp_path: Path,
) -> None:
    # Replies are what SmolLM2 said: each workflow agent got at least one usable action out of it
    # in each seed (a cassette of fallbacks only would make the figures meaningless).
    for seed in ECOLOGY_SEEDS:
        run = ecology(seed).run(tmp_path / f"s{seed}.sqlite", progress=False)
        acts = run.actions[run.actions["agent_id"].isin(WORKFLOW_AGENTS)]
        paths = acts["metadata"].map(lambda m: json.loads(m).get("parse_path"))
        assert set(paths) <= {"tool_call", "json_text", "text", "fallback"}
        for agent in WORKFLOW_AGENTS:
            assert (paths[acts["agent_id"] == agent] == "tool_call").any(), (seed, agent)


def test_a_seed_that_was_not_recorded_is_a_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "miss.sqlite"
    out = run_cli("run", str(ECOLOGY), "--seed", "99", "--db", str(db))
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert "no recorded reply" in lines[0] and "step 0" in lines[0]
    assert "Traceback" not in out.stderr
    assert Run.open(db).metadata["status"] == "failed"


def test_channel_replays_byte_identically(tmp_path: Path) -> None:
    llm = {**CHANNEL_RUN["llm"], "cache": str(CHANNEL_CASSETTE), "cache_mode": "replay"}
    dbs = [tmp_path / f"{n}.sqlite" for n in ("a", "b")]
    for db in dbs:
        Experiment(**{**CHANNEL_RUN, "llm": llm}).run(db, progress=False)
    assert sha(dbs[0]) == sha(dbs[1])
    run = Run.open(dbs[0])
    agents, steps = CHANNEL_RUN["agents"], CHANNEL_RUN["steps"]
    assert len(run.actions) == agents * steps
    calls = run.llm_calls
    assert calls["cache_hit"].all() and calls["completion_tokens"].gt(0).all()
    # One call per decision, each its own row: the cassette holds this run and nothing else.
    assert len(calls) == agents * steps == stored_rows(CHANNEL_CASSETTE)


@pytest.mark.parametrize("cassette", [ECOLOGY_CASSETTE, CHANNEL_CASSETTE], ids=lambda p: p.name)
def test_cassettes_stay_small(cassette: Path) -> None:
    assert cassette.stat().st_size < 3_000_000
    assert not cassette.with_name(cassette.name + "-wal").exists()
