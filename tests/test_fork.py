"""Forks: a child repeats its parent exactly before the fork step and follows its changes after.

The properties, each checked against the parent's file with plain ``sqlite3`` (never the
readers under test):

- the prefix: every row of every step before ``t`` (decisions, state hashes, messages, LLM
  calls, reporters) is the parent's, for every ``t``;
- exactness of the state handed over: a fork whose change cannot alter behaviour (a declared
  input, which only names the run) makes its parent's decisions and state hashes after ``t``
  too, in every built-in world, with random and LLM agents, and in a world of one's own;
- a change that matters changes the steps from ``t`` on, and none before;
- a fork without changes is its parent: the same run id and the same bytes;
- lineage: a fork of a fork names both ancestors and their fork steps;
- replies: after ``t`` a request the parent made is served from the parent's recording and
  reaches no model (counted at the provider); one the change made new does;
- a fork stopped and run again (resumed) is the fork never stopped;
- refusals, one line each: a step out of range, a world that cannot save its state, other
  agents.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from vivarium import Experiment
from vivarium.errors import ConfigError, ResumedWarning
from vivarium.facade import Run
from vivarium.gateways.mock import MockLLMGateway
from vivarium.types import ActionRequest, ActionResult

STEPS = 6


def rows(path: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def tables(path: Path) -> set[str]:
    return {r[0] for r in rows(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


# The tables with a step, compared row for row (the decisions by their key: step << 24 | seq).
STEP_TABLES = ("steps", "messages", "llm_calls", "transitions", "model_vars", "agent_vars")


def stored(path: Path, name: str) -> str:
    """The stored columns of a table (aam's generated ones hold the run id: left out)."""
    return ", ".join(r[1] for r in rows(path, f"PRAGMA table_info({name})"))


def before(path: Path, t: int) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the steps before ``t``, by table."""
    found = {
        name: rows(
            path,
            f"SELECT {stored(path, name)} FROM {name} WHERE step < ? ORDER BY 1, 2",  # noqa: S608
            t,
        )
        for name in STEP_TABLES
        if name in tables(path)
    }
    found["decisions"] = rows(path, "SELECT * FROM decisions WHERE id < ? ORDER BY id", t << 24)
    return found


def behaviour(path: Path, t: int = 0) -> list[Any]:
    """The decisions and state hashes from step ``t`` on."""
    return [
        rows(path, "SELECT step, state_hash FROM steps WHERE step >= ? ORDER BY step", t),
        rows(
            path,
            "SELECT id, agent_idx, action, arguments, success, error FROM decisions "
            "WHERE id >= ? ORDER BY id",
            t << 24,
        ),
    ]


# -- a world of one's own ----------------------------------------------------------------------
class Pot:
    """Agents give to and take from a shared pot; it saves its state (snapshot/restore)."""

    def __init__(self, agent_ids: Sequence[str], seed: int) -> None:
        self.agent_ids = list(agent_ids)
        self.pot = seed % 5 + 2
        self.held = dict.fromkeys(self.agent_ids, 0)

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"pot": self.pot, "held": self.held[agent_id]}

    def apply(self, request: ActionRequest) -> ActionResult:
        if request.action_name == "give":
            self.pot += 1
            return ActionResult.ok({"pot": self.pot})
        if request.action_name == "take" and self.pot > 0:
            self.pot -= 1
            self.held[request.agent_id] += 1
            return ActionResult.ok({"pot": self.pot})
        return ActionResult.failed("the pot is empty")

    def state_digest(self) -> str:
        return f"{self.pot}:{sorted(self.held.items())}"

    def snapshot(self) -> dict[str, Any]:
        return {"pot": self.pot, "held": dict(self.held)}

    def restore(self, state: dict[str, Any]) -> None:
        self.pot, self.held = state["pot"], dict(state["held"])


class PotWithoutState(Pot):
    snapshot = None  # type: ignore[assignment]
    restore = None  # type: ignore[assignment]


def pot_world(agent_ids: Sequence[str], seed: int) -> Pot:
    return Pot(agent_ids, seed)


def stateless_pot(agent_ids: Sequence[str], seed: int) -> PotWithoutState:
    world = PotWithoutState.__new__(PotWithoutState)
    Pot.__init__(world, agent_ids, seed)
    return world


KINDS: dict[str, dict[str, Any]] = {
    "channel_random_shuffle": {"world": "channel", "order": "shuffle"},
    "channel_random_simultaneous": {"world": "channel", "scheduling": "simultaneous"},
    "boltzmann": {"world": "boltzmann", "policy": "boltzmann"},
    "channel_cognitive_mock": {"world": "channel", "policy": "cognitive"},
    "ecology_cognitive_mock": {"world": "ecology", "policy": "cognitive"},
    "own_world": {"world": pot_world, "action_space": ["give", "take"]},
}


def parent_run(tmp_path: Path, kind: str, **extra: Any) -> Run:
    config = {"name": kind, "agents": 3, "steps": STEPS, "seed": 5, **KINDS[kind], **extra}
    return Experiment(**config).run(tmp_path / f"{kind}.sqlite", progress=False)


@pytest.fixture(scope="module")
def parents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    folder = tmp_path_factory.mktemp("parents")
    return {kind: parent_run(folder, kind) for kind in KINDS}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_fork_that_changes_no_behaviour_is_its_parent_at_every_step(
    parents: dict[str, Run], kind: str, tmp_path: Path
) -> None:
    """Exactness: the state handed over at any step lets the child go on as the parent did."""
    parent = parents[kind]
    for t in range(STEPS + 1):
        child = parent.fork(t, db=tmp_path / f"fork{t}.sqlite", inputs={"note": "a fork"}).run(
            progress=False
        )
        assert child.run_id != parent.run_id
        assert child.metadata["status"] == "complete"
        assert before(child.path, t) == before(parent.path, t), t
        assert behaviour(child.path) == behaviour(parent.path), t


def test_a_change_changes_the_steps_from_the_fork_on_only(
    parents: dict[str, Run], tmp_path: Path
) -> None:
    parent = parents["channel_random_shuffle"]
    t = 3
    child = parent.fork(t, seed=99, db=tmp_path / "seed99.sqlite").run(progress=False)
    assert before(child.path, t) == before(parent.path, t)
    # The order of agents derives from the seed step by step: the next step differs.
    mine, theirs = behaviour(child.path, t), behaviour(parent.path, t)
    assert mine[0][0][1] != theirs[0][0][1]
    assert [r[0] for r in mine[0]] == list(range(t, STEPS))
    # The child's config is the parent's with the change, and it names its parent.
    config = child.config
    assert config is not None and config.seed == 99
    assert config.fork_of is not None
    assert (config.fork_of.run_id, config.fork_of.step) == (parent.run_id, t)


def test_a_fork_without_changes_is_its_parent_byte_for_byte(
    parents: dict[str, Run], tmp_path: Path
) -> None:
    parent = parents["ecology_cognitive_mock"]
    for t in (0, 2, STEPS):
        same = parent.fork(t, db=tmp_path / f"same{t}.sqlite").run(progress=False)
        assert same.run_id == parent.run_id
        assert same.path.read_bytes() == parent.path.read_bytes()
    # A change back to the parent's own value is no change either.
    again = parent.fork(2, seed=5, db=tmp_path / "seed5.sqlite").run(progress=False)
    assert again.path.read_bytes() == parent.path.read_bytes()


def test_lineage_walks_a_fork_of_a_fork(parents: dict[str, Run], tmp_path: Path) -> None:
    parent = parents["channel_random_shuffle"]
    child = parent.fork(2, seed=7, db=tmp_path / "a" / "child.sqlite").run(progress=False)
    grandchild = child.fork(4, seed=8, db=tmp_path / "b" / "grandchild.sqlite").run(progress=False)
    found = grandchild.lineage
    assert [entry.run_id for entry in found] == [
        grandchild.run_id,
        child.run_id,
        parent.run_id,
    ]
    assert [entry.fork_step for entry in found] == [4, 2, None]
    assert found[2].path is not None and found[2].path.resolve() == parent.path.resolve()
    # The grandchild repeats the child before 4, hence the parent before 2.
    assert before(grandchild.path, 4) == before(child.path, 4)
    assert before(grandchild.path, 2) == before(parent.path, 2)
    # A parent moved away ends the lineage with its run id, and no path.
    moved = tmp_path / "moved.sqlite"
    child.path.rename(moved)
    found = grandchild.lineage
    assert [(e.run_id, e.path) for e in found[1:]] == [(child.run_id, None)]


class CountingMock(MockLLMGateway):
    """The mock, counting the requests that reach it (the provider: a real model's cost)."""

    asked = 0

    def complete(self, request: Any) -> Any:
        type(self).asked += 1
        return super().complete(request)

    async def acomplete(self, request: Any) -> Any:
        type(self).asked += 1
        return await super().acomplete(request)


def test_replies_the_parent_recorded_cost_no_call(
    parents: dict[str, Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vivarium.gateways.stack as stack

    monkeypatch.setattr(stack, "MockLLMGateway", CountingMock)
    parent = parents["channel_cognitive_mock"]
    parent_calls = rows(parent.path, "SELECT step FROM llm_calls")
    t = 2
    after = sum(1 for (step,) in parent_calls if step >= t)
    assert after > 0
    CountingMock.asked = 0
    same = parent.fork(t, inputs={"x": 1}, db=tmp_path / "same.sqlite").run(progress=False)
    assert CountingMock.asked == 0  # every request after t was the parent's
    sources = same.llm_calls.groupby("source", observed=True).size().to_dict()
    assert sources == {"model": len(parent_calls) - after, "parent": after}
    assert rows(same.path, "SELECT count(*) FROM llm_call_sources") == [(after,)]
    # A changed system prompt changes every request after t: each reaches the model.
    CountingMock.asked = 0
    terse = parent.fork(t, llm={"system_prompt": "Be terse."}, db=tmp_path / "terse.sqlite")
    run = terse.run(progress=False)
    assert CountingMock.asked == after
    later = run.llm_calls[run.llm_calls["step"] >= t]
    assert set(later["source"].astype(str)) == {"model"}
    assert "llm_call_sources" not in tables(run.path)


def test_a_stopped_fork_run_again_is_the_fork_never_stopped(
    parents: dict[str, Run], tmp_path: Path
) -> None:
    parent = parents["ecology_cognitive_mock"]
    whole = parent.fork(2, llm={"temperature": 0.3}, db=tmp_path / "whole.sqlite").run(
        progress=False
    )
    fork = parent.fork(2, llm={"temperature": 0.3}, db=tmp_path / "stopped.sqlite")

    def stop(step: int, record: Any) -> None:
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fork.run(progress=False, on_step=stop)
    assert rows(fork.config.db, "SELECT status, steps_done FROM runs") == [("interrupted", 4)]
    with pytest.warns(ResumedWarning):
        resumed = fork.run(progress=False)
    assert resumed.run_id == whole.run_id
    for name in (*STEP_TABLES, "decisions", "checkpoints", "agents", "runs"):
        if name in tables(whole.path):
            sql = f"SELECT {stored(whole.path, name)} FROM {name} ORDER BY 1"  # noqa: S608
            assert rows(resumed.path, sql) == rows(whole.path, sql), name


def test_refusals_are_one_line(parents: dict[str, Run], tmp_path: Path) -> None:
    parent = parents["channel_random_shuffle"]
    with pytest.raises(ConfigError, match=r"at_step must be a step from 0 to 6"):
        parent.fork(7)
    with pytest.raises(ConfigError, match=r"fork_of is set by the fork itself"):
        parent.fork(1, fork_of=None)
    with pytest.raises(ConfigError, match=r"keeps its parent's agents \(3"):
        parent.fork(1, agents=4, db=tmp_path / "four.sqlite").run(progress=False)
    assert not (tmp_path / "four.sqlite").exists()
    own = Experiment(
        name="stateless", world=stateless_pot, agents=2, steps=3, action_space=["give", "take"]
    ).run(tmp_path / "stateless.sqlite", progress=False)
    with pytest.raises(ConfigError, match=r"cannot save its state .* fork at step 0") as err:
        own.fork(2, seed=3, db=tmp_path / "stateless-fork.sqlite").run(progress=False)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "stateless-fork.sqlite").exists()
    # At step 0 there is no state to hand over: the fork runs from the start.
    zero = own.fork(0, seed=3, db=tmp_path / "zero.sqlite").run(progress=False)
    assert zero.metadata["status"] == "complete"


def test_the_default_path_is_beside_the_parent(parents: dict[str, Run]) -> None:
    parent = parents["boltzmann"]
    child = parent.fork(3, seed=11)
    path = Path(child.config.db or "")
    assert path.parent == parent.path.parent
    assert path.name.startswith("boltzmann.fork3.")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = child.run(progress=False)
    assert run.path == path and run.lineage[1].run_id == parent.run_id


def vvm(*words: str) -> subprocess.CompletedProcess[str]:
    """``vvm WORDS`` in a process of its own, as a user types it."""
    command = [sys.executable, "-m", "vivarium.cli", *words]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_vvm_fork(parents: dict[str, Run], tmp_path: Path) -> None:
    parent = parents["channel_cognitive_mock"]
    out = tmp_path / "cli.sqlite"
    done = vvm(
        "fork", str(parent.path), "--at-step", "3", "--set", "llm.system_prompt=Be brief.",
        "--out", str(out), "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"a fork of {parent.run_id} at step 3" in done.stdout
    child = Run.open(out)
    assert child.config is not None and child.config.llm is not None
    assert child.config.llm.system_prompt == "Be brief."
    assert before(out, 3) == before(parent.path, 3)
    bad = vvm("fork", str(parent.path), "--at-step", "1", "--set", "x")
    assert bad.returncode != 0
    assert bad.stderr.strip().count("\n") == 0 and "expected KEY=VALUE" in bad.stderr


def test_one_agents_change_keeps_every_id_and_serves_the_others_from_the_parent(
    parents: dict[str, Run], tmp_path: Path
) -> None:
    parent = parents["channel_cognitive_mock"]
    t = 3
    fork = parent.fork(
        t,
        agent_changes={"agent_001": {"system_prompt": "Answer in five words."}},
        db=tmp_path / "one.sqlite",
    )
    child = fork.run(progress=False)
    assert rows(child.path, "SELECT agent_idx, agent_id, seed FROM agents") == rows(
        parent.path, "SELECT agent_idx, agent_id, seed FROM agents"
    )
    assert before(child.path, t) == before(parent.path, t)
    calls = child.llm_calls
    first = calls[calls["step"] == t].set_index("agent_id")["source"].astype(str).to_dict()
    # At step t the agents before agent_001 ask what they asked in the parent; agent_001's
    # prompt is new; agent_002 has seen agent_001's new message.
    assert first == {"agent_000": "parent", "agent_001": "model", "agent_002": "model"}
    policy = parent.fork(
        t, agent_changes={"agent_002": {"policy": "random"}}, db=tmp_path / "random.sqlite"
    ).run(progress=False)
    later = policy.actions[policy.actions["step"] >= t]
    mine = set(later[later["agent_id"] == "agent_002"]["action"].astype(str))
    assert mine <= {"noop", "emit_event"} and mine
    with pytest.raises(ConfigError, match=r"no agent agent_009 in this run"):
        parent.fork(t, agent_changes={"agent_009": {"system_prompt": "x"}})


def test_a_cognitive_groups_options_are_applied_or_refused(tmp_path: Path) -> None:
    """``policy_options`` of a cognitive group were ignored; now they apply, or are refused."""
    prompts = {}
    for prompt in ("Be brief.", "Be long."):
        run = Experiment(
            name="opts",
            world="channel",
            agents=[
                {"policy": "cognitive", "count": 2, "policy_options": {"system_prompt": prompt}}
            ],
            steps=1,
        ).run(tmp_path / f"{prompt}.sqlite", progress=False)
        prompts[prompt] = run.llm_exchanges()["request"].iloc[0]["messages"][0]["content"]
    assert prompts["Be brief."].startswith("Be brief.") or "Be brief." in prompts["Be brief."]
    assert "Be long." in prompts["Be long."] and "Be brief." not in prompts["Be long."]
    with pytest.raises(ConfigError, match=r"policy_options colour do not apply to the cognitive"):
        Experiment(
            name="bad",
            world="channel",
            agents=[{"policy": "cognitive", "count": 1, "policy_options": {"colour": "red"}}],
            steps=1,
        ).run(tmp_path / "bad.sqlite", progress=False)


def test_llm_calls_say_where_each_reply_came_from(tmp_path: Path) -> None:
    """``source``: model (the stack's provider), cache (the cassette), parent (a fork's)."""
    cassette = str(tmp_path / "calls.cassette")
    config = {"name": "src", "policy": "cognitive", "agents": 2, "steps": 3, "seed": 4}
    recorded = Experiment(**config, llm={"mock": True, "cache": cassette}).run(
        tmp_path / "recorded.sqlite", progress=False
    )
    assert set(recorded.llm_calls["source"].astype(str)) == {"model"}
    replayed = Experiment(
        **config, llm={"mock": True, "cache": cassette, "cache_mode": "replay"}
    ).run(tmp_path / "replayed.sqlite", progress=False)
    hits = rows(replayed.path, "SELECT cache_hit FROM llm_calls")
    assert hits and all(hit == (1,) for hit in hits)
    assert set(replayed.llm_calls["source"].astype(str)) == {"cache"}
    # An interview answered from a cassette given to it: the run's trace is not written.
    before_bytes = replayed.path.read_bytes()
    answer = replayed.interview(
        "agent_000", 1, "Why?", llm={"cache": cassette, "cache_mode": "auto"}
    ).answer
    again = replayed.interview(
        "agent_000", 1, "Why?", llm={"cache": cassette, "cache_mode": "replay"}
    )
    assert again.answer == answer and replayed.path.read_bytes() == before_bytes


def test_a_fork_of_a_fork_before_its_fork_step_starts_from_the_grandparents_state(
    parents: dict[str, Run], tmp_path: Path
) -> None:
    parent = parents["ecology_cognitive_mock"]
    child = parent.fork(4, inputs={"a": 1}, db=tmp_path / "child.sqlite").run(progress=False)
    # Before step 4 the child is the parent: a fork of it at 2 repeats the parent's steps.
    grandchild = child.fork(2, inputs={"b": 2}, db=tmp_path / "grand.sqlite").run(progress=False)
    assert behaviour(grandchild.path) == behaviour(parent.path)
    assert [e.fork_step for e in grandchild.lineage] == [2, 4, None]
    parent_copy = tmp_path / "gone.sqlite"
    parent.path.rename(parent_copy)
    try:
        with pytest.raises(ConfigError, match=r"fork at step 4 or later, or put it back"):
            child.fork(2, inputs={"c": 3}, db=tmp_path / "orphan.sqlite").run(progress=False)
    finally:
        parent_copy.rename(parent.path)


@pytest.mark.parametrize("kind", ["channel_random_simultaneous", "boltzmann"])
def test_a_fork_to_another_seed_draws_anew_after_the_fork_and_repeats_itself(
    parents: dict[str, Run], kind: str, tmp_path: Path
) -> None:
    parent = parents[kind]
    t = 2
    one = parent.fork(t, seed=77, db=tmp_path / "one.sqlite").run(progress=False)
    two = parent.fork(t, seed=77, db=tmp_path / "two.sqlite").run(progress=False)
    assert one.path.read_bytes() == two.path.read_bytes()  # deterministic
    assert before(one.path, t) == before(parent.path, t)
    # The random agents' draws after the fork are new: the decisions differ from the parent's.
    assert behaviour(one.path, t)[1] != behaviour(parent.path, t)[1]


class HiddenDice:
    """A policy of one's own with a generator it does not save (no get_state)."""

    def __init__(self, agent_id: str, seed: int) -> None:
        import random

        self.rng = random.Random(seed)

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        action = "give" if self.rng.random() < 0.5 else "take"
        return ActionRequest(
            run_id=run_id, time_step=time_step, agent_id=agent_id, action_name=action
        )


def hidden_dice(agent_id: str, seed: int) -> HiddenDice:
    return HiddenDice(agent_id, seed)


def test_a_policy_that_hides_state_is_refused_before_the_fork_goes_wrong(tmp_path: Path) -> None:
    """The state handed over is checked: restored alone, it makes the parent's next step."""
    parent = Experiment(name="hidden", world=pot_world, policy=hidden_dice, agents=3, steps=6).run(
        tmp_path / "hidden.sqlite", progress=False
    )
    with pytest.raises(
        ConfigError, match=r"keeps state that snapshot\(\)/get_state\(\) leaves"
    ) as e:
        parent.fork(3, seed=1, db=tmp_path / "f.sqlite").run(progress=False)
    assert "\n" not in str(e.value) and not (tmp_path / "f.sqlite").exists()
    # From step 0 nothing is handed over: the fork runs from its own start.
    assert (
        parent.fork(0, seed=1, db=tmp_path / "zero.sqlite").run(progress=False).metadata["status"]
        == "complete"
    )
