"""The World and policy contracts: checked once when an engine is built, and enough to run.

A user's world and policy written here implement only the protocols of
``vivarium.worlds.base`` and ``vivarium.policies.base``; a pair that also implements batch
decisions must write exactly the rows the per-agent path writes.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from vivarium import ActionRequest, Run, TraceDb, WorldEngine, WorldEngineConfig
from vivarium.engine.capabilities import check_policies, check_world, protocol_members
from vivarium.errors import ConfigError
from vivarium.policies.base import AgentPolicy, BatchDecider, BatchPolicy
from vivarium.seeding import canonical_json
from vivarium.trace.records import encode_column
from vivarium.types import ActionResult
from vivarium.worlds import InMemoryChannel
from vivarium.worlds.base import BatchDecisions, BatchOutcomes, BatchWorld, World

ROOT = Path(__file__).resolve().parents[2]


# -- a world and a policy with only the core methods ----------------------------------------------
class Counter:
    """The smallest world: counts ``tick`` actions; anything else fails."""

    def __init__(self) -> None:
        self.ticks = 0

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"time_step": time_step, "ticks": self.ticks}

    def apply(self, request: ActionRequest) -> ActionResult:
        if request.action_name != "tick":
            return ActionResult.failed(f"no action {request.action_name!r}")
        self.ticks += 1
        return ActionResult.ok({"ticks": self.ticks})

    def state_digest(self) -> str:
        return f"t{self.ticks}"


class Ticker:
    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        action = "tock" if agent_id == "a" and observation["ticks"] == 0 else "tick"
        return ActionRequest(
            run_id=run_id, time_step=time_step, agent_id=agent_id, action_name=action
        )


def _without(method: str) -> type:
    """A ``Counter`` class whose instances lack ``method``."""

    def missing(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("never called")

    namespace = {
        name: fn
        for name, fn in vars(Counter).items()
        if name in protocol_members(World) or name == "__init__"
    }
    del namespace[method]
    return type(f"No{method.title().replace('_', '')}", (), namespace)


@pytest.mark.parametrize("method", ["observe", "apply", "state_digest"])
def test_a_world_without_a_required_method_is_one_line_naming_it(
    method: str, tmp_path: Path
) -> None:
    world = _without(method)()
    db = tmp_path / "t.sqlite"
    trace = TraceDb(db)
    with pytest.raises(ConfigError) as info:
        WorldEngine(WorldEngineConfig(run_id="w"), {"a": Ticker()}, world, trace_db=trace)
    trace.close()
    assert str(info.value) == f"world {type(world).__name__} has no {method}() method"
    with sqlite3.connect(db) as con:  # refused before any step: nothing recorded
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        assert "steps" not in tables or con.execute("SELECT count(*) FROM steps").fetchone() == (0,)


def test_a_required_method_that_is_not_callable_counts_as_missing() -> None:
    world = Counter()
    world.state_digest = "t0"  # type: ignore[assignment,method-assign]
    with pytest.raises(ConfigError, match=r"^world Counter has no state_digest\(\) method$"):
        check_world(world)


def test_a_policy_without_decide_is_one_line_naming_it() -> None:
    class Thinker:
        def think(self) -> None: ...

    with pytest.raises(ConfigError) as info:
        WorldEngine(WorldEngineConfig(run_id="p"), {"a": Ticker(), "b": Thinker()}, Counter())
    assert str(info.value) == "policy for b has no decide() method"


def test_half_a_capability_is_refused_naming_the_missing_half() -> None:
    class SnapshotOnly(Counter):
        def snapshot(self) -> dict[str, Any]:
            return {"ticks": self.ticks}

    with pytest.raises(ConfigError) as info:
        check_world(SnapshotOnly())
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("world SnapshotOnly has snapshot() but no restore() method")

    class SaveOnly(Ticker):
        def get_state(self) -> dict[str, Any]:
            return {}

    with pytest.raises(ConfigError, match=r"^policy for x has get_state\(\) but no set_state\(\)"):
        check_policies(["x"], [SaveOnly()])


def test_a_core_only_world_and_policy_run_and_are_recorded(db: Path) -> None:
    assert isinstance(Counter(), World) and isinstance(Ticker(), AgentPolicy)
    caps = check_world(Counter())
    assert (caps.name, caps.registry, caps.messages, caps.checkpoints) == (
        "Counter",
        None,
        False,
        False,
    )
    assert not caps.llm_quota and not caps.batch
    trace = TraceDb(db)
    world = Counter()
    engine = WorldEngine(
        WorldEngineConfig(run_id="core"), {"a": Ticker(), "b": Ticker()}, world, trace_db=trace
    )
    engine.run(3)
    trace.close()
    run = Run.open(db)
    assert run.metadata["world"] == "Counter" and run.metadata["status"] == "complete"
    assert run.actions["action"].tolist() == ["tock", "tick", "tick", "tick", "tick", "tick"]
    assert run.actions["success"].tolist() == [False, True, True, True, True, True]
    assert world.ticks == 5
    assert engine.checkpoint_state() == {
        "world": None,
        "agents": {"a": {"engine": None, "policy": None}, "b": {"engine": None, "policy": None}},
    }


def test_the_channel_world_declares_its_capabilities() -> None:
    caps = check_world(InMemoryChannel())
    assert caps.name == "channel" and caps.registry is not None
    assert caps.messages and caps.checkpoints and caps.batch and not caps.llm_quota


# -- a user's batch pair ---------------------------------------------------------------------------
ACTIONS = ("stay", "hop")


class Pond:
    """Frogs hop (``hop(k)``: an odd ``k`` is too far and fails) or stay."""

    def __init__(self) -> None:
        self.hops = 0

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"time_step": time_step}

    def apply(self, request: ActionRequest) -> ActionResult:
        if request.action_name == "stay":
            return ActionResult.ok()
        k = request.arguments["k"]
        if k % 2:
            return ActionResult.failed(f"{request.agent_id}: a hop of {k} is too far")
        self.hops += 1
        return ActionResult.ok({"hops": self.hops})

    def state_digest(self) -> str:
        return f"h{self.hops}"

    # BatchWorld
    def batch_actions(self) -> frozenset[str]:
        return frozenset(ACTIONS)

    def apply_batch(self, decisions: BatchDecisions, agent_ids: Sequence[str]) -> BatchOutcomes:
        success, result, error = [], [], []
        for code, k, agent_id in zip(decisions.codes, decisions.extra["k"], agent_ids, strict=True):
            if ACTIONS[code] == "stay":
                success.append(1), result.append(None), error.append(None)
            elif k % 2:
                success.append(0), result.append(None)
                error.append(f"{agent_id}: a hop of {k} is too far")
            else:
                self.hops += 1
                success.append(1), result.append(canonical_json({"hops": self.hops}))
                error.append(None)
        return BatchOutcomes(encode_column(success), encode_column(result), encode_column(error))


def _frog_choice(number: int, t: int) -> tuple[int, int]:
    """(action code, k) of frog ``number`` at step ``t``."""
    return (1 if (number + t) % 3 else 0), number + t


class Frog:
    def __init__(self, number: int) -> None:
        self.number = number

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        code, k = _frog_choice(self.number, time_step)
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=ACTIONS[code],
            arguments={"k": k} if code else {},
        )

    @classmethod
    def batch_decider(
        cls, policies: Sequence[Any], world_actions: frozenset[str]
    ) -> FrogBatch | None:
        if all(type(p) is Frog for p in policies) and set(ACTIONS) <= world_actions:
            return FrogBatch(policies)
        return None


class FrogBatch:
    def __init__(self, frogs: Sequence[Frog]) -> None:
        self.frogs = list(frogs)
        self.synced = 0

    def decide_batch(self, time_step: int, order: Sequence[int] | None) -> BatchDecisions:
        rows = range(len(self.frogs)) if order is None else order
        choices = [_frog_choice(self.frogs[i].number, time_step) for i in rows]
        arguments = [canonical_json({"k": k}) if code else None for code, k in choices]
        return BatchDecisions(
            time_step=time_step,
            action_names=ACTIONS,
            codes=[code for code, _ in choices],
            arguments=encode_column(arguments),
            extra={"k": [k for _, k in choices]},
        )

    def sync_policies(self) -> None:
        self.synced += 1


def _frog_run(db: Path, batch: bool, order: str) -> tuple[Run, WorldEngine]:
    trace = TraceDb(db)
    frogs = {f"f{i:02d}": Frog(i) for i in range(7)}
    engine = WorldEngine(
        WorldEngineConfig(run_id="frogs", batch=batch, order=order, seed=4),
        frogs,
        Pond(),
        trace_db=trace,
    )
    engine.run(5)
    trace.close()
    return Run.open(db), engine


def _expected_rows(order: str, engine: WorldEngine) -> list[tuple[Any, ...]]:
    """The rows, worked out from the frogs' rule alone."""
    hops, rows = 0, []
    for t in range(5):
        for idx in engine.order(t):
            code, k = _frog_choice(idx, t)
            agent = f"f{idx:02d}"
            if code == 0:
                rows.append((t, agent, "stay", None, True, None, None))
            elif k % 2:
                err = f"{agent}: a hop of {k} is too far"
                rows.append((t, agent, "hop", canonical_json({"k": k}), False, None, err))
            else:
                hops += 1
                result = canonical_json({"hops": hops})
                rows.append((t, agent, "hop", canonical_json({"k": k}), True, result, None))
    return rows


def _rows(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as con:
        return con.execute(
            "SELECT step, agent_id, action, arguments, success, result, error FROM actions "
            "ORDER BY step, seq"
        ).fetchall()


@pytest.mark.parametrize("order", ["sorted", "shuffle"])
def test_a_user_batch_pair_writes_the_rows_of_the_per_agent_path(
    order: str, tmp_path: Path
) -> None:
    assert isinstance(Pond(), BatchWorld) and isinstance(Frog(0), BatchPolicy)
    assert isinstance(FrogBatch([]), BatchDecider)
    batched, engine = _frog_run(tmp_path / "b.sqlite", batch=True, order=order)
    single, _ = _frog_run(tmp_path / "s.sqlite", batch=False, order=order)
    assert isinstance(engine._batch, FrogBatch) and engine._batch.synced >= 1  # the batch ran
    orders = [engine.order(t) for t in range(5)]
    if order == "sorted":
        assert orders == [list(range(7))] * 5
    else:  # the shuffle really reorders, so the rows test the order is carried through
        assert any(o != list(range(7)) for o in orders) and all(
            sorted(o) == list(range(7)) for o in orders
        )
    expected = [
        (t, a, act, args, int(ok), res, err)
        for t, a, act, args, ok, res, err in _expected_rows(order, engine)
    ]
    assert _rows(tmp_path / "b.sqlite") == expected
    assert _rows(tmp_path / "s.sqlite") == expected
    # The state hash covers every stored column: the two paths stored the same bytes.
    assert batched.steps["state_hash"].tolist() == single.steps["state_hash"].tolist()
    assert batched.validate().status == "ok"


def test_a_batch_pair_that_declines_falls_back_to_one_agent_at_a_time(db: Path) -> None:
    class Lake(Pond):
        def batch_actions(self) -> frozenset[str]:
            return frozenset({"stay"})  # cannot batch hops

    trace = TraceDb(db)
    engine = WorldEngine(
        WorldEngineConfig(run_id="lake"), {"f0": Frog(0), "f1": Frog(1)}, Lake(), trace_db=trace
    )
    engine.run(2)
    trace.close()
    assert engine._batch is None and len(Run.open(db).actions) == 4


class Toad(Frog):
    """Decides like a frog, but its batch decider claims every world batches ``croak``."""

    @classmethod
    def batch_decider(cls, policies: Sequence[Any], world_actions: frozenset[str]) -> Any:
        class Croaks(FrogBatch):
            def decide_batch(self, time_step: int, order: Sequence[int] | None) -> BatchDecisions:
                rows = len(self.frogs)
                return BatchDecisions(
                    time_step, ("stay", "croak"), [1] * rows, extra={"k": [0] * rows}
                )

        return Croaks(policies)


def test_a_batch_of_actions_the_world_does_not_batch_is_refused(db: Path) -> None:
    """Never a row of successes the world never applied: one line naming the action."""
    trace = TraceDb(db)
    engine = WorldEngine(
        WorldEngineConfig(run_id="toads"), {"t0": Toad(0), "t1": Toad(1)}, Pond(), trace_db=trace
    )
    with pytest.raises(ConfigError, match="decided croak, which world Pond does not apply"):
        engine.run(1)
    trace.close()
    assert Run.open(db).metadata["steps_done"] == 0


def test_a_batch_needs_one_policy_class_for_every_agent(db: Path) -> None:
    """The first agent's class decides for all: it must be every agent's class, even when its
    batch decider would take anything."""

    class Loose(Frog):
        @classmethod
        def batch_decider(cls, policies: Sequence[Any], world_actions: frozenset[str]) -> Any:
            return FrogBatch(policies)

    trace = TraceDb(db)
    engine = WorldEngine(
        WorldEngineConfig(run_id="mixed"), {"f0": Loose(0), "f1": Frog(1)}, Pond(), trace_db=trace
    )
    engine.run(2)
    trace.close()
    assert engine._batch is None and len(Run.open(db).actions) == 4


# -- layering ----------------------------------------------------------------------------------------
CONCRETE = (
    "vivarium.worlds.channel",
    "vivarium.worlds.ecology",
    "vivarium.worlds.boltzmann",
    "vivarium.policies.random",
    "vivarium.policies.cognitive",
    "vivarium.workflow",
    "vivarium.metarl",
)


@pytest.mark.parametrize("module", ["engine", "deciding", "autonomous", "capabilities"])
def test_the_engine_imports_no_concrete_world_or_policy(module: str) -> None:
    tree = ast.parse((ROOT / "vivarium" / "engine" / f"{module}.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    concrete = {m for m in imported if m.startswith(CONCRETE)}
    assert not concrete
    assert "vivarium.worlds" not in imported and "vivarium.policies" not in imported


def test_the_seed_design_keywords_still_build_an_engine() -> None:
    from vivarium import RandomAgentPolicy

    engine = WorldEngine(
        config=WorldEngineConfig(run_id="kw"),
        agents={"a": RandomAgentPolicy.from_seed(1)},
        world=InMemoryChannel(),
        trace_db=None,
    )
    record = engine.step()
    assert engine.world_capabilities.name == "channel" and record.n_actions == 1
    assert engine._batch is not None  # random agents in the channel: the batch path


def _spoiled_rows(text: str, spoil: Any) -> str:
    """The column ``text`` with each non-null row spoiled (kept compact, as a column must be)."""
    return encode_column([None if row is None else spoil(row) for row in json.loads(text)])


@pytest.mark.parametrize(
    ("spoil", "problem"),
    [
        (lambda text: text.replace(",", ", "), "is not compact JSON"),
        (lambda text: text[: text.rindex(",")] + "]", "is not a JSON array of 7 values"),
        (lambda text: "[" + ",".join(["null"] * 7) + "]", "a column of nulls only is None"),
        (lambda text: "[" + ",".join(["7"] * 7) + "]", "values other than texts"),
        # Each row as the per-agent path writes it (``encode_object``): before, kept as given.
        (lambda text: _spoiled_rows(text, lambda row: row.replace(":", ": ")), r"row \d+ is not"),
        (lambda text: _spoiled_rows(text, lambda row: "[1]"), r"row \d+ is not a JSON object"),
        (lambda text: _spoiled_rows(text, lambda row: '{"k":1e999}'), r"row \d+ is not a JSON"),
    ],
    ids=["spaces", "a row short", "nulls as text", "numbers, not texts", "a row with spaces",
         "a row not an object", "a row that is not its value's text"],
)  # fmt: skip
def test_a_batch_column_unlike_the_per_agent_paths_is_refused(
    db: Path, spoil: Any, problem: str
) -> None:
    """Rows are stored one by one and hashed as ``encode_column`` writes them: a column in
    another form would fail validation later, so the first batch step refuses it, naming it."""

    class Sloppy(FrogBatch):
        def decide_batch(self, time_step: int, order: Sequence[int] | None) -> BatchDecisions:
            made = super().decide_batch(time_step, order)
            return dataclasses.replace(made, arguments=spoil(made.arguments))

    class SloppyFrog(Frog):
        @classmethod
        def batch_decider(cls, policies: Sequence[Any], world_actions: frozenset[str]) -> Any:
            return Sloppy(policies)

    trace = TraceDb(db)
    engine = WorldEngine(
        WorldEngineConfig(run_id="sloppy"),
        {f"f{i:02d}": SloppyFrog(i) for i in range(7)},
        Pond(),
        trace_db=trace,
    )
    with pytest.raises(ConfigError, match=f"Sloppy: the batch's 'arguments' column .*{problem}"):
        engine.run(1)
    trace.close()
    assert Run.open(db).metadata["steps_done"] == 0
