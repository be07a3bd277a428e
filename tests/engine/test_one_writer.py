"""One writer of decision rows: every path that decides a step stores the same bytes.

A step is decided by the lean path (plain sync policies), the general per-agent path (sequential
or simultaneous) or the batch path (whole columns). Whatever the decisions (any arguments,
reasoning, metadata, outcomes, policy failures, fallbacks, requests for the wrong agent), every
path must store the same decision columns, hash to the same state and write the same trace.
"""

from __future__ import annotations

import ast
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vivarium import TraceDb, WorldEngine, WorldEngineConfig
from vivarium.trace.records import encode_column, encode_object
from vivarium.trace.values import UnrecordableValue
from vivarium.types import ActionRequest, ActionResult, RunMetadata
from vivarium.worlds.base import BatchDecisions, BatchOutcomes

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ("stay", "hop", "sing")


@dataclass(frozen=True)
class Choice:
    """What one agent does at one step."""

    kind: str = "act"  # act | raises | not_a_request | fallback | wrong_agent | transition
    action: str = "stay"
    arguments: dict[str, Any] = field(default_factory=dict)
    reasoning: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


Plan = dict[tuple[int, int], Choice]  # (step, agent index) -> choice


def _request(choice: Choice, agent_id: str, t: int) -> ActionRequest:
    metadata = dict(choice.metadata)
    if choice.kind == "fallback":
        metadata.update(parse_path="fallback", fallback_reason="unusable reply é")
    elif choice.kind == "transition":  # the engine's to record in ``transitions``, not the row
        metadata["transitions"] = [{"from_state": "a", "to_state": t, "trigger": "go"}]
    return ActionRequest.trusted(
        run_id="r",
        time_step=t,
        agent_id="someone_else" if choice.kind == "wrong_agent" else agent_id,
        action_name=choice.action,
        arguments=dict(choice.arguments),
        reasoning=choice.reasoning,
        metadata=metadata,
    )


class Echo:
    """A world whose outcomes depend on the order of the actions and on their arguments."""

    def __init__(self) -> None:
        self.n = 0

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"n": self.n}

    def _outcome(self, agent_id: str, action: str, arguments: dict[str, Any]) -> ActionResult:
        self.n += 1
        if action == "hop":
            return ActionResult.ok({"n": self.n, "got": arguments})
        if action == "sing":
            return ActionResult.failed(f"{agent_id} cannot sing ü ({self.n})")
        return ActionResult.ok()

    def apply(self, request: ActionRequest) -> ActionResult:
        return self._outcome(request.agent_id, request.action_name, request.arguments)

    def state_digest(self) -> str:
        return str(self.n)

    # BatchWorld
    def batch_actions(self) -> frozenset[str]:
        return frozenset(ACTIONS)

    def apply_batch(self, decisions: BatchDecisions, agent_ids: Sequence[str]) -> BatchOutcomes:
        outcomes = [
            self._outcome(agent_id, choice.action, choice.arguments)
            for agent_id, choice in zip(agent_ids, decisions.extra["choices"], strict=True)
        ]
        return BatchOutcomes(
            success=encode_column([1 if o.success else 0 for o in outcomes]) or "[]",
            result=encode_column([encode_object(o.result) for o in outcomes]),
            error=encode_column([o.error for o in outcomes]),
        )


class Scripted:
    """Decides as the plan says; its class decides whole steps too (a ``BatchPolicy``)."""

    def __init__(self, plan: Plan, idx: int) -> None:
        self.plan = plan
        self.idx = idx

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> Any:
        choice = self.plan[(time_step, self.idx)]
        if choice.kind == "raises":
            raise RuntimeError("policy bug")
        if choice.kind == "not_a_request":
            return {"action": choice.action}
        return _request(choice, agent_id, time_step)

    @classmethod
    def batch_decider(cls, policies: Sequence[Any], world_actions: frozenset[str]) -> Any:
        return ScriptedBatch(policies[0].plan, len(policies))


class ScriptedBatch:
    """The plan's decisions of a step as columns, each value encoded as a policy would."""

    def __init__(self, plan: Plan, n: int) -> None:
        self.plan = plan
        self.n = n

    def decide_batch(self, time_step: int, order: Sequence[int] | None) -> BatchDecisions:
        rows = range(self.n) if order is None else order
        choices = [self.plan[(time_step, idx)] for idx in rows]
        return BatchDecisions(
            time_step=time_step,
            action_names=ACTIONS,
            codes=[ACTIONS.index(c.action) for c in choices],
            arguments=encode_column([encode_object(c.arguments) for c in choices]),
            reasoning=encode_column([c.reasoning for c in choices]),
            metadata=encode_column([encode_object(c.metadata) for c in choices]),
            extra={"choices": choices},
        )

    def sync_policies(self) -> None:
        pass


PATHS = ("lean", "general", "simultaneous", "batch")


def _engine(plan: Plan, agents: int, path: str, order: str, trace: TraceDb | None = None) -> Any:
    ids = [f"agent_{i}" for i in range(agents)]
    config = WorldEngineConfig(
        run_id="r",
        seed=5,
        order=order,  # type: ignore[arg-type]
        batch=path == "batch",
        scheduling="simultaneous" if path == "simultaneous" else "sequential",
    )
    # The same metadata for every path: the traces may differ only in their decisions.
    metadata = RunMetadata(
        run_id="r",
        name="r",
        world="Echo",
        policy="Scripted",
        seed=5,
        agents=agents,
        steps=0,
        scheduling="sequential",
        vivarium_version="0",
    )
    engine = WorldEngine(
        config,
        {a: Scripted(plan, i) for i, a in enumerate(ids)},
        Echo(),
        trace,
        metadata=metadata,
    )
    engine._lean = path == "lean"
    return engine


def _steps(plan: Plan, agents: int, steps: int, path: str, order: str) -> list[Any]:
    engine = _engine(plan, agents, path, order)
    records = [engine.step() for _ in range(steps)]
    assert (engine._batch is not None) == (path == "batch")  # the path asked for was taken
    return [(r.n_actions, r.encode(), r.llm_calls, r.transitions, r.state_hash) for r in records]


_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
_value = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_object = st.dictionaries(st.text(max_size=5), _value, max_size=4)
_acts = st.builds(
    Choice,
    action=st.sampled_from(ACTIONS),
    arguments=_object,
    reasoning=st.none() | st.text(max_size=8),
    metadata=st.dictionaries(st.sampled_from(["note", "score", "ünï"]), _value, max_size=2),
)
_any = _acts | st.builds(
    Choice,
    kind=st.sampled_from(["raises", "not_a_request", "fallback", "wrong_agent", "transition"]),
    action=st.sampled_from(ACTIONS),
    arguments=_object,
    metadata=st.dictionaries(st.sampled_from(["note"]), _value, max_size=1),
)


def _plans(choice: st.SearchStrategy[Choice]) -> st.SearchStrategy[tuple[Plan, int, int]]:
    @st.composite
    def plan(draw: Any) -> tuple[Plan, int, int]:
        agents, steps = draw(st.integers(1, 5)), draw(st.integers(1, 3))
        return (
            {(t, i): draw(choice) for t in range(steps) for i in range(agents)},
            agents,
            steps,
        )

    return plan()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_plans(_acts), st.sampled_from(["sorted", "shuffle"]))
def test_every_path_stores_the_same_rows_for_any_actions(
    drawn: tuple[Plan, int, int], order: str
) -> None:
    plan, agents, steps = drawn
    expected = _steps(plan, agents, steps, "lean", order)
    for path in PATHS[1:]:
        assert _steps(plan, agents, steps, path, order) == expected, path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_plans(_any), st.sampled_from(["sorted", "shuffle"]))
def test_every_per_agent_path_stores_the_same_rows_for_failures_too(
    drawn: tuple[Plan, int, int], order: str
) -> None:
    plan, agents, steps = drawn
    expected = _steps(plan, agents, steps, "lean", order)
    for path in ("general", "simultaneous"):
        assert _steps(plan, agents, steps, path, order) == expected, path


def test_the_rows_are_what_each_decision_means() -> None:
    """Worked out by hand: the layout of each kind of row, the same on every per-agent path."""
    plan = {
        (0, 0): Choice(action="hop", arguments={"b": 1, "a": "é"}, reasoning="why"),
        (0, 1): Choice(kind="raises"),
        (0, 2): Choice(kind="fallback", action="stay", metadata={"note": 1}),
        (0, 3): Choice(kind="wrong_agent", action="hop"),
        (0, 4): Choice(action="sing", metadata={"score": 0.5}),
    }
    rows = [
        (0, "hop", '{"a":"é","b":1}', "why", None, 1, '{"got":{"a":"é","b":1},"n":1}', None, 0),
        (1, "noop", None, None, None, 0, None, "policy error: RuntimeError: policy bug", 1),
        (2, "stay", None, None, '{"note":1,"parse_path":"fallback"}', 0, None,
         "unusable reply é", 1),
        (3, "hop", None, None, None, 0, None,
         "request names agent 'someone_else' at step 0, expected 'agent_3' at step 0", 0),
        (4, "sing", None, None, '{"score":0.5}', 0, None, "agent_4 cannot sing ü (3)", 0),
    ]  # fmt: skip
    for path in ("lean", "general", "simultaneous"):
        record = _engine(plan, 5, path, "sorted").step()
        assert list(zip(*record.action_columns(), strict=True)) == rows, path
        assert record.n_actions == 5


@pytest.mark.parametrize("path", ["lean", "general", "simultaneous"])
@pytest.mark.parametrize(
    ("choice", "part"),
    [
        (Choice(action="stay", arguments={"when": {1, 2}}), "the policy's arguments"),
        (Choice(action="stay", metadata={"note": b"x"}), "the policy's metadata"),
        (
            Choice(action="hop", arguments={"x": [1]}, metadata={"note": 1j}),
            "the policy's metadata",
        ),
    ],
)
def test_a_value_the_trace_cannot_hold_is_refused_alike_on_every_path(
    path: str, choice: Choice, part: str
) -> None:
    engine = _engine({(0, 0): choice}, 1, path, "sorted")
    with pytest.raises(UnrecordableValue) as caught:
        engine.step()
    message = str(caught.value)
    assert message.startswith(f"agent_0's action '{choice.action}' at step 0: {part}")
    assert "\n" not in message


def test_the_traces_of_every_path_are_the_same_file(tmp_path: Path) -> None:
    plan = {
        (t, i): Choice(
            action=ACTIONS[(t + i) % 3],
            arguments={"k": t * i, "s": "ü" * i},
            reasoning=f"r{i}" if i % 2 else None,
            metadata={"note": [t, i]} if t % 2 else {},
        )
        for t in range(4)
        for i in range(6)
    }
    tables: dict[str, Any] = {}
    for path in PATHS:
        db = tmp_path / f"{path}.sqlite"
        trace = TraceDb(db)
        _engine(plan, 6, path, "shuffle", trace).run(4)
        trace.close()
        with sqlite3.connect(db) as con:
            tables[path] = {
                table: con.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608
                for table in ("steps", "decisions", "agents")
                if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone()
            }
    assert tables["lean"]["steps"]  # the steps were written
    for path in PATHS[1:]:
        assert tables[path] == tables["lean"], path


def test_only_the_writer_appends_decision_rows() -> None:
    """No engine module but ``rows`` appends to a step's decision columns or sets them whole."""
    columns = {"agent_idx", "action", "arguments", "reasoning", "metadata", "success", "result",
               "error", "fallback", "encoded", "n_actions"}  # fmt: skip
    offenders = []
    for path in sorted((ROOT / "vivarium" / "engine").glob("*.py")):
        if path.name == "rows.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                # ``self.metadata = ...`` is the engine's own (the run's metadata).
                written = [
                    t
                    for t in targets
                    if isinstance(t, ast.Attribute)
                    and not (isinstance(t.value, ast.Name) and t.value.id == "self")
                ]
            elif isinstance(node, ast.Attribute) and node.attr in {"append", "extend"}:
                written = [node.value] if isinstance(node.value, ast.Attribute) else []
            else:
                written = [node] if isinstance(node, ast.Attribute) else []
                written = [a for a in written if a.attr == "add_action"]
            if any(a.attr in columns | {"add_action"} for a in written):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
