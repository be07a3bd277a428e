"""The lean per-agent path records exactly what the general path does, failures included."""

from __future__ import annotations

import random
from typing import Any

import pytest

from vivarium.engine.engine import WorldEngine, WorldEngineConfig, _shuffle
from vivarium.gateways.base import CallRecord, next_occurrence, record_call
from vivarium.seeding import CountingRandom, canonical_json
from vivarium.trace.records import StepRecord, encode_object, hash_record
from vivarium.trace.values import UnrecordableValue
from vivarium.types import ActionRequest
from vivarium.worlds.boltzmann import BoltzmannPolicy, BoltzmannWorld
from vivarium.worlds.registry import NoArguments

IDS = [f"agent_{i}" for i in range(8)]


def _request(agent_id: str, t: int, action: str, arguments: Any, **extra: Any) -> ActionRequest:
    return ActionRequest.trusted(
        run_id="r",
        time_step=t,
        agent_id=agent_id,
        action_name=action,
        arguments=arguments,
        reasoning=extra.get("reasoning"),
        metadata=extra.get("metadata", {}),
    )


class Scripted:
    """One agent's behaviour, by kind: good, broken or odd decisions."""

    def __init__(self, agent_id: str, kind: str) -> None:
        self.agent_id = agent_id
        self.kind = kind

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> Any:
        kind, t = self.kind, time_step
        if kind == "give":
            return _request(agent_id, t, "give", {"to": "agent_1"}, reasoning="why not")
        if kind == "bad_argument":
            return _request(agent_id, t, "give", {"to": 7})
        if kind == "extra_argument":
            return _request(agent_id, t, "give", {"to": "agent_0", "amount": 2})
        if kind == "unknown_action":
            return _request(agent_id, t, "steal", {})
        if kind == "raises":
            raise RuntimeError("policy bug")
        if kind == "not_a_request":
            return {"action": "noop"}
        if kind == "wrong_agent":
            return _request("agent_0", t, "noop", {})
        if kind == "metadata":
            return _request(agent_id, t, "noop", {}, metadata={"parse_path": "tool_call"})
        if kind == "fallback":
            return _request(agent_id, t, "noop", {}, metadata={"parse_path": "fallback"})
        return _request(agent_id, t, "noop", {})


KINDS = [
    "give",
    "bad_argument",
    "extra_argument",
    "unknown_action",
    "raises",
    "not_a_request",
    "wrong_agent",
    "metadata",
    "fallback",
    "noop",
]


def _engine(lean: bool, order: str = "shuffle") -> WorldEngine:
    ids = [f"agent_{i}" for i in range(len(KINDS))]
    policies = {a: Scripted(a, kind) for a, kind in zip(ids, KINDS, strict=True)}
    engine = WorldEngine(
        WorldEngineConfig(run_id="r", seed=3, order=order),  # type: ignore[arg-type]
        policies,
        BoltzmannWorld(ids, starting_wealth=5),
    )
    assert engine._lean  # plain sync policies: the lean path is the one taken
    engine._lean = lean
    return engine


def test_lean_path_records_the_same_rows_and_hashes_as_the_general_path() -> None:
    lean, general = _engine(True), _engine(False)
    for _ in range(3):
        a, b = lean.step(), general.step()
        assert a.action_columns() == b.action_columns()
        assert a.encode() == b.encode()
        assert a.world_digest == b.world_digest
    assert lean.state_hash == general.state_hash


def test_invalid_actions_on_the_lean_path_are_recorded_failures_with_their_reason() -> None:
    record = _engine(True, order="sorted").step()
    ids = [f"agent_{i}" for i in range(len(KINDS))]
    by_kind = {KINDS[ids.index(f"agent_{i}")]: row for row, i in enumerate(record.agent_idx)}
    error, success, fallback = record.error, record.success, record.fallback
    assert success[by_kind["give"]] == 1 and record.reasoning[by_kind["give"]] == "why not"
    assert record.arguments[by_kind["give"]] == '{"to":"agent_1"}'
    assert success[by_kind["bad_argument"]] == 0
    assert error[by_kind["bad_argument"]].startswith("bad arguments for give: to:")
    assert error[by_kind["extra_argument"]].startswith("bad arguments for give: amount:")
    assert error[by_kind["unknown_action"]].startswith("unknown action 'steal'")
    assert error[by_kind["raises"]] == "policy error: RuntimeError: policy bug"
    assert fallback[by_kind["raises"]] == 1
    assert error[by_kind["not_a_request"]] == "policy returned dict, not ActionRequest"
    assert "names agent 'agent_0'" in error[by_kind["wrong_agent"]]
    assert record.metadata[by_kind["metadata"]] == '{"parse_path":"tool_call"}'
    assert fallback[by_kind["fallback"]] == 1 and error[by_kind["fallback"]] == "no usable action"
    assert success[by_kind["noop"]] == 1 and error[by_kind["noop"]] is None
    assert record.n_actions == len(KINDS)


def test_lean_path_is_not_taken_where_it_would_differ() -> None:
    policies = {a: Scripted(a, "noop") for a in IDS}
    world = BoltzmannWorld(IDS)
    for change in (
        {"scheduling": "simultaneous"},
        {"agent_retries": 1},
        {"on_llm_error": "fallback"},
    ):
        config = WorldEngineConfig(run_id="r", **change)  # type: ignore[arg-type]
        assert not WorldEngine(config, policies, world)._lean


class Calling:
    """A sync policy that calls a model: each decision's call records and request counts."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.occurrences: list[int] = []

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        # Twice the same request in one decision: counted 1, 2 in every decision.
        self.occurrences += [next_occurrence("same"), next_occurrence("same")]
        if time_step % 2:
            record_call(CallRecord(attempt=1, model="m", request_hash=f"{agent_id}:{time_step}"))
        return _request(agent_id, time_step, "noop", {})


def test_call_records_and_request_counts_stay_per_decision_on_the_lean_path() -> None:
    def run(lean: bool) -> tuple[list[Any], list[tuple[Any, ...]], list[Calling]]:
        policies = {a: Calling(a) for a in IDS}
        engine = WorldEngine(
            WorldEngineConfig(run_id="r", seed=1, order="shuffle"), policies, BoltzmannWorld(IDS)
        )
        assert engine._lean
        engine._lean = lean
        records = [engine.step() for _ in range(4)]
        calls = [row for r in records for row in r.llm_calls]
        return [r.encode() for r in records], calls, list(policies.values())

    lean_columns, lean_calls, lean_policies = run(True)
    general_columns, general_calls, _ = run(False)
    assert lean_columns == general_columns
    assert lean_calls == general_calls
    # Steps 1 and 3 record one call per agent, attributed to that agent's index.
    assert sorted((row[0], row[3]) for row in lean_calls) == sorted(
        (i, f"{a}:{t}") for t in (1, 3) for i, a in enumerate(IDS)
    )
    assert all(p.occurrences == [1, 2] * 4 for p in lean_policies)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 64, 1000, 1025])
def test_shuffle_is_random_shuffle(n: int) -> None:
    for seed in range(20):
        expected, got = list(range(n)), list(range(n))
        random.Random(seed).shuffle(expected)
        _shuffle(got, random.Random(seed))
        assert got == expected


@pytest.mark.parametrize(
    "value",
    [
        None,
        {},
        {"to": "agent_1"},
        {"to": 'quote " backslash \\ newline \n é \u2028 \x00'},
        {"é": "ü"},
        {"b": 1, "a": "x"},
        {"to": 1},
        {"to": True},
        {"to": 1.5},
        {"to": None},
        {"to": ["a", {"z": 1, "y": 2}]},
        {"to": 37, "give_to": "agent_5"},
        {"z": -1, "a": 2**64 - 1, "m": "x", "b": 0},
        {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5},
        {"a": False, "b": 1},
        {"b": "y", "a": None},
        {"price": 1.5, "ok": True, "none": None, "n": -0.0},
        {"big": 1e300, "tiny": 5e-324, "e": 1e16},
        {"x": float("nan"), "y": float("-inf")},
    ],
)
def test_encode_object_is_canonical_json(value: Any) -> None:
    assert encode_object(value) == (canonical_json(value) if value else None)


@pytest.mark.parametrize(
    "value",
    [{"when": object}, {"z": -1, "a": 10**30, "m": "x", "b": 0}, {1: "x"}, {1: "x", "b": 2}],
)
def test_encode_object_refuses_what_json_would_change(value: Any) -> None:
    # canonical_json writes str(object), 10**30, and the key 1 as "1": none reads back as given.
    with pytest.raises(UnrecordableValue):
        encode_object(value)


def test_boltzmann_policy_draws_as_from_the_list_of_others() -> None:
    ids = [f"agent_{i}" for i in range(37)]
    for me in ("agent_0", "agent_17", "agent_36", "stranger"):
        policy = BoltzmannPolicy(me, ids, seed=11)
        others = [a for a in ids if a != me]
        assert policy.others == others
        rng = CountingRandom(11)
        for _ in range(200):
            assert policy._draw_other() == others[rng.randrange(len(others))]
        assert policy.rng.words == rng.words
    policy = BoltzmannPolicy("agent_3", ids, seed=11)
    policy.rng = random.Random(5)  # type: ignore[assignment]  # any generator still works
    plain = random.Random(5)
    others = [a for a in ids if a != "agent_3"]
    assert [policy._draw_other() for _ in range(50)] == [
        others[plain.randrange(len(others))] for _ in range(50)
    ]


def test_boltzmann_policy_with_an_id_listed_twice_never_gives_to_itself() -> None:
    policy = BoltzmannPolicy("a", ["a", "b", "a", "c"], seed=1)
    assert policy.others == ["b", "c"]
    assert {policy._draw_other() for _ in range(50)} == {"b", "c"}
    with pytest.raises(ValueError, match="two agents"):
        BoltzmannPolicy("a", ["a", "a"], seed=1)


def test_noop_without_arguments_skips_validation_but_refuses_arguments() -> None:
    world = BoltzmannWorld(IDS)
    registry = world.registry
    assert registry.dispatch(world, _request("agent_1", 0, "noop", {})).success
    refused = registry.dispatch(world, _request("agent_1", 0, "noop", {"x": 1}))
    assert not refused.success and refused.error.startswith("bad arguments for noop: x:")
    assert registry.get("noop").arguments is NoArguments


def test_step_record_rows_of_the_lean_path_hash_as_recorded() -> None:
    record = _engine(True).step()
    copy = StepRecord(step=record.step, world_digest=record.world_digest)
    for row in zip(*record.action_columns(), strict=True):
        copy.add_action(*row[:8], fallback=bool(row[8]))
    assert hash_record("0" * 64, copy) == record.state_hash
