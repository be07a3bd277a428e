"""RandomAgentPolicy: the seed algorithm exactly, and the vectorised batch bit for bit."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vivarium import RandomAgentPolicy, stable_agent_seed
from vivarium.policies.random import RandomBatch


def reference_decisions(seed: int, steps: int, space: tuple[str, ...]) -> list[tuple[str, dict]]:
    """The published algorithm, written out independently of the implementation."""
    rng = random.Random(seed)
    out = []
    for t in range(steps):
        action = rng.choice(space)
        args: dict = {}
        if action == "emit_event":
            args = {"value": rng.randint(0, 1_000_000), "seen_time_step": t}
        out.append((action, args))
    return out


def test_first_decisions_follow_the_seed_algorithm() -> None:
    seed = stable_agent_seed(42, "agent_000")
    policy = RandomAgentPolicy(random.Random(seed))
    expected = reference_decisions(seed, 20, ("noop", "emit_event"))
    for t, (action, args) in enumerate(expected):
        req = policy.decide(
            run_id="r", time_step=t, agent_id="agent_000", observation={"time_step": t}
        )
        assert (req.action_name, req.arguments) == (action, args)
        assert req.agent_id == "agent_000" and req.time_step == t and req.run_id == "r"


def test_emit_event_values_are_in_range_and_both_actions_occur() -> None:
    policy = RandomAgentPolicy.from_seed(7)
    seen = set()
    for t in range(200):
        req = policy.decide(run_id="r", time_step=t, agent_id="a", observation={"time_step": t})
        seen.add(req.action_name)
        if req.action_name == "emit_event":
            assert 0 <= req.arguments["value"] <= 1_000_000
            assert req.arguments["seen_time_step"] == t
    assert seen == {"noop", "emit_event"}


@pytest.mark.parametrize(
    "space",
    [("noop", "emit_event"), ("emit_event",), ("noop",), ("emit_event", "noop", "noop")],
)
def test_batch_equals_per_agent_decisions_and_leaves_rngs_in_place(space: tuple[str, ...]) -> None:
    seeds = [stable_agent_seed(3, f"agent_{i:03d}") for i in range(37)]
    single = [RandomAgentPolicy.from_seed(s, space) for s in seeds]
    batched = [RandomAgentPolicy.from_seed(s, space) for s in seeds]
    batch = RandomBatch(batched)
    for t in range(900):  # long enough to cross several Mersenne Twister blocks
        codes, values = batch.decide()
        for i, policy in enumerate(single):
            req = policy.decide(run_id="r", time_step=t, agent_id="a", observation={"time_step": t})
            assert req.action_name == space[codes[i]]
            assert values[i] == (req.arguments["value"] if req.action_name == "emit_event" else -1)
    batch.sync_policies()
    for a, b in zip(single, batched, strict=True):
        assert a.rng.getstate() == b.rng.getstate()


def test_batch_starts_from_a_used_generator() -> None:
    rng_a, rng_b = random.Random(99), random.Random(99)
    for _ in range(1000):  # an arbitrary position inside a block
        rng_a.random()
        rng_b.random()
    a, b = RandomAgentPolicy(rng_a), RandomAgentPolicy(rng_b)
    batch = RandomBatch([b])
    for t in range(50):
        codes, values = batch.decide()
        req = a.decide(run_id="r", time_step=t, agent_id="x", observation={"time_step": t})
        assert req.action_name == a.action_space[codes[0]]
    batch.sync_policies()
    assert a.rng.getstate() == b.rng.getstate()


def test_policy_state_round_trips() -> None:
    p = RandomAgentPolicy.from_seed(5)
    state = p.get_state()
    first = [
        p.decide(run_id="r", time_step=t, agent_id="a", observation={"time_step": t})
        for t in range(5)
    ]
    p.set_state(state)
    again = [
        p.decide(run_id="r", time_step=t, agent_id="a", observation={"time_step": t})
        for t in range(5)
    ]
    assert first == again


def test_empty_action_space_is_rejected() -> None:
    with pytest.raises(ValueError, match="at least one action"):
        RandomAgentPolicy(random.Random(1), [])


def test_compact_checkpoint_state_restores_the_stream() -> None:
    live = RandomAgentPolicy.from_seed(
        stable_agent_seed(1, "agent_000"), ("noop", "emit_event", "post_message")
    )
    obs = {"time_step": 0}
    for t in range(37):
        live.decide(run_id="r", time_step=t, agent_id="a", observation={**obs, "time_step": t})
    state = live.get_state()
    assert set(state) == {"seed", "words"} and state["words"] > 37
    restored = RandomAgentPolicy.from_seed(0, live.action_space)
    restored.set_state(state)
    assert restored.rng.getstate() == live.rng.getstate()


def _side_by_side(
    seed: int, agents: int, steps: int
) -> tuple[list[RandomAgentPolicy], list[RandomAgentPolicy], RandomBatch]:
    """Agents deciding ``steps`` steps one by one, and the same agents in a batch (synced)."""
    seeds = [stable_agent_seed(seed, f"agent_{i:03d}") for i in range(agents)]
    single = [RandomAgentPolicy.from_seed(s) for s in seeds]
    batched = [RandomAgentPolicy.from_seed(s) for s in seeds]
    batch = RandomBatch(batched)
    for t in range(steps):
        batch.decide()
        for p in single:
            p.decide(run_id="r", time_step=t, agent_id="a", observation={"time_step": t})
    batch.sync_policies()
    return single, batched, batch


def test_batch_keeps_the_word_count() -> None:
    single, batched, _ = _side_by_side(8, 5, 700)
    assert [p.get_state() for p in single] == [p.get_state() for p in batched]


def _after_one_draw(seed: int) -> list[int]:
    """The block ``random.Random(seed)`` reads from: its state after drawing one word."""
    own = random.Random(seed)
    own.getrandbits(32)
    return list(own.getstate()[1][:624])


@pytest.mark.parametrize("agents", [20, 199, 200, 450])
def test_first_blocks_are_cpythons_at_either_side_of_the_threshold(agents: int) -> None:
    # Made one by one below SEED_ONE_BY_ONE_BELOW, by the vectorised recurrences above.
    from vivarium.policies.random import SEED_ONE_BY_ONE_BELOW, first_blocks

    assert 20 < SEED_ONE_BY_ONE_BELOW <= 200 < 450
    seeds = [0, 1, 42, 2**32 - 1, 2**32, 2**40 + 12345, 2**64 - 1] + [
        stable_agent_seed(9, f"agent_{i:03d}") for i in range(agents - 7)
    ]
    assert first_blocks(seeds).tolist() == [_after_one_draw(seed) for seed in seeds]
    with pytest.raises(ValueError, match="seeds in"):
        first_blocks([*seeds[:3], -1])


def test_seeding_in_chunks_is_seeding_all_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunk edges change nothing: 450 seeds in chunks of 7 (a last, shorter one included)."""
    from vivarium.policies import random as module

    seeds = [0, 1, 2**32 - 1, 2**32, 2**64 - 1] + [
        stable_agent_seed(3, f"agent_{i:03d}") for i in range(445)
    ]
    monkeypatch.setattr(module, "SEED_CHUNK", 7)
    assert module.first_blocks(seeds).tolist() == [_after_one_draw(seed) for seed in seeds]


@settings(max_examples=40, deadline=None)
@given(seeds=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=5))
def test_first_blocks_draw_what_cpython_draws(seeds: list[int]) -> None:
    """(first block, position 0) is ``random.Random(seed)``: the same words, block after block."""
    from vivarium.policies.random import first_blocks

    blocks = first_blocks([*seeds, 0, 2**32 - 1, 2**32])
    for seed, block in zip([*seeds, 0, 2**32 - 1, 2**32], blocks.tolist(), strict=True):
        made, own = random.Random(), random.Random(seed)
        made.setstate((3, (*block, 0), None))
        assert [made.getrandbits(32) for _ in range(1300)] == [
            own.getrandbits(32) for _ in range(1300)
        ]
        assert made.getstate() == own.getstate()  # once drawn from, the very same state
    with pytest.raises(ValueError, match="seeds in"):
        first_blocks([1, 2**64])


def test_a_batch_that_drew_nothing_leaves_its_generators_as_seeded() -> None:
    seeds = [stable_agent_seed(5, f"agent_{i:03d}") for i in range(6)]
    batched = [RandomAgentPolicy.from_seed(s) for s in seeds]
    RandomBatch(batched).sync_policies()
    assert all(p.fresh for p in batched)
    assert [p.rng.getstate() for p in batched] == [random.Random(s).getstate() for s in seeds]


@pytest.mark.parametrize("agents", [5, 230])  # blocks made by CPython, and vectorised
def test_synced_generators_do_not_change_when_the_batch_draws_on(agents: int) -> None:
    """The blocks a sync lends its policies are never twisted under them: the batch drawing
    on (past a block's end) leaves each policy where the sync put it."""
    single, batched, batch = _side_by_side(6, agents, 300)
    for _ in range(900):  # every agent twists its block at least once more
        batch.decide()
    assert [p.rng.getstate() for p in batched] == [p.rng.getstate() for p in single]


def test_batch_leaves_lazy_generators_that_match() -> None:
    seeds = [stable_agent_seed(4, f"agent_{i:03d}") for i in range(12)]
    single = [RandomAgentPolicy.from_seed(s) for s in seeds]
    batched = [RandomAgentPolicy.from_seed(s) for s in seeds]
    assert all(p.fresh for p in batched)
    batch = RandomBatch(batched)
    for t in range(650):
        batch.decide()
        for p in single:
            p.decide(run_id="r", time_step=t, agent_id="a", observation={"time_step": t})
    batch.sync_policies()
    assert [p.get_state() for p in batched] == [p.get_state() for p in single]  # no generator built
    assert all(p._rng is None for p in batched)
    assert [p.rng.getstate() for p in batched] == [p.rng.getstate() for p in single]


def test_batch_decider_columns_are_the_per_agent_rows() -> None:
    from vivarium.seeding import canonical_json
    from vivarium.trace.records import encode_column

    seeds = [stable_agent_seed(6, f"agent_{i:03d}") for i in range(9)]
    single = [RandomAgentPolicy.from_seed(s) for s in seeds]
    batch = RandomAgentPolicy.batch_decider(
        [RandomAgentPolicy.from_seed(s) for s in seeds], frozenset({"noop", "emit_event"})
    )
    assert batch is not None
    order = [4, 0, 8, 2, 6, 1, 3, 7, 5]
    for t in range(40):
        decisions = batch.decide_batch(t, order if t % 2 else None)
        rows = order if t % 2 else range(9)
        requests = {
            i: single[i].decide(run_id="r", time_step=t, agent_id="a", observation={"time_step": t})
            for i in range(9)
        }
        assert [decisions.action_names[c] for c in decisions.codes] == [
            requests[i].action_name for i in rows
        ]
        assert decisions.arguments == encode_column(
            [canonical_json(requests[i].arguments) if requests[i].arguments else None for i in rows]
        )


def test_batch_decider_declines_what_it_cannot_decide() -> None:
    class Mine(RandomAgentPolicy):
        pass

    both = frozenset({"noop", "emit_event"})
    plain = RandomAgentPolicy.from_seed(1)
    assert RandomAgentPolicy.batch_decider([plain, Mine.from_seed(2)], both) is None
    assert RandomAgentPolicy.batch_decider([plain], frozenset({"noop"})) is None
    other = RandomAgentPolicy.from_seed(3, ("noop",))
    assert RandomAgentPolicy.batch_decider([plain, other], both) is None


@settings(max_examples=60, deadline=None)
@given(
    positions=st.lists(
        st.one_of(st.integers(0, 1300), st.sampled_from([0, 623, 624, 625, 1247, 1248])),
        min_size=1,
        max_size=12,
    ),
    space=st.sampled_from([("noop", "emit_event"), ("emit_event", "a", "b"), ("a", "b", "c")]),
    steps=st.integers(1, 120),
)
def test_batch_from_any_position_is_cpython_at_every_step(
    positions: list[int], space: tuple[str, ...], steps: int
) -> None:
    # Each agent's generator has drawn ``position`` words before the batch takes it over (a
    # resumed run, a policy used alone first): at every step the batch decides what CPython's
    # generators decide, and leaves each exactly where they are, mid-block or at its end.
    def advanced(i: int, words: int) -> RandomAgentPolicy:
        policy = RandomAgentPolicy.from_seed(stable_agent_seed(6, f"a{i}"), space)
        for _ in range(words):
            policy.rng.getrandbits(32)
        return policy

    single = [advanced(i, w) for i, w in enumerate(positions)]
    batched = [advanced(i, w) for i, w in enumerate(positions)]
    batch = RandomBatch(batched)
    for t in range(steps):
        codes, values = batch.decide()
        for i, policy in enumerate(single):
            req = policy.decide(run_id="r", time_step=t, agent_id="a", observation={"time_step": t})
            assert space[codes[i]] == req.action_name
            assert values[i] == req.arguments.get("value", -1)
    batch.sync_policies()
    assert [p.rng.getstate() for p in batched] == [p.rng.getstate() for p in single]
    assert [p.get_state() for p in batched] == [p.get_state() for p in single]  # words drawn
