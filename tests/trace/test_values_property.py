"""What is recorded is what the world received, as a property.

Any value a user's policy, world or reporter hands the trace (numpy scalars and arrays, booleans,
NaN and infinities, large integers, tuples, nested containers, dicts with keys that are not text,
sets, bytes, objects) goes through a real run: as an action's argument, the world's result, the
policy's metadata, a model reporter's value and an agent reporter's values. Each is either read
back (``run.actions``, ``run.arguments``, ``run.model_vars``, ``run.agent_vars``) equal to what
was given and of the same family of types, or the run stops with one line naming the value and
where it came from. The expected outcome is computed here from the documented table
(``vivarium.trace.values``), not by the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vivarium import Run
from vivarium.engine.engine import WorldEngine, WorldEngineConfig
from vivarium.engine.reporters import experiment_reporters
from vivarium.errors import ConfigError
from vivarium.trace.db import TraceDb
from vivarium.types import ActionRequest, ActionResult

I64 = (-(2**63), 2**63 - 1)
JSON_INTS = (-(2**63), 2**64 - 1)  # a decision's JSON holds unsigned 64-bit integers too
AGENTS = ("agent_000", "agent_001")
CHANNELS = ("arguments", "result", "metadata", "model", "agent")


class Refused(Exception):
    """The oracle's verdict: the trace must refuse this value."""


# -- the oracle: the documented table, written out independently ------------------------------


def expected(
    value: Any, top: tuple[int, int] = JSON_INTS, nested: tuple[int, int] = JSON_INTS
) -> Any:
    """What must be read back for ``value`` (plain Python, tuples as lists), or ``Refused``."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        number = int(value)
        if not top[0] <= number <= top[1]:
            raise Refused(f"{number} out of range")
        return number
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return expected(value.tolist(), top, nested)
    if isinstance(value, list | tuple):
        return [expected(v, nested, nested) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise Refused("a key that is not text")
        return {k: expected(v, nested, nested) for k, v in value.items()}
    raise Refused(type(value).__name__)


def same(want: Any, got: Any) -> bool:
    """Equal and of the same family: bool is not int, int is not float, NaN equals NaN."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(want) is type(got) and want == got
    if isinstance(want, int):
        return type(got) is int and got == want
    if isinstance(want, float):
        return type(got) is float and (got == want or (math.isnan(want) and math.isnan(got)))
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, want, got))
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(same(want[k], got[k]) for k in want)
        )
    return type(got) is type(want) and got == want


# -- values a new user hands the trace ----------------------------------------------------------

floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1]),
    floats,
    st.text(max_size=4),
    st.booleans().map(np.bool_),
    st.integers(*I64).map(np.int64),
    st.integers(-(2**31), 2**31 - 1).map(np.int32),
    st.integers(0, 2**64 - 1).map(np.uint64),
    st.floats(width=32, allow_nan=True).map(np.float32),
    floats.map(np.float64),
)
arrays = st.one_of(
    hnp.arrays(st.sampled_from([np.int64, np.float64, np.bool_, np.float32]), st.integers(0, 3)),
    hnp.arrays(np.int32, st.tuples(st.integers(1, 2), st.integers(1, 2))),
)
unrecordable = st.one_of(
    st.frozensets(st.integers(0, 3), min_size=1, max_size=2).map(set),
    st.binary(min_size=1, max_size=2),
    st.just(np.datetime64("2024-01-01")),
    st.just(np.complex128(1 + 2j)),
    st.builds(object),
    st.dictionaries(st.integers(0, 3), st.integers(0, 3), min_size=1, max_size=2),
)
values = st.recursive(
    st.one_of(scalars, arrays, unrecordable),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
    ),
    max_leaves=6,
)
# Half the values are one scalar or array: a reporter's typed column is read from those.
top_values = st.one_of(scalars, arrays, unrecordable, values)


# -- a small user world and policy that hand the value over ---------------------------------


class Policy:
    def __init__(self, value: Any, channels: set[str]) -> None:
        self.value, self.channels = value, channels

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: dict) -> Any:
        return ActionRequest.trusted(
            run_id=run_id, time_step=time_step, agent_id=agent_id, action_name="act",
            arguments={"v": self.value} if "arguments" in self.channels else {},
            reasoning=None,
            metadata={"v": self.value} if "metadata" in self.channels else {},
        )  # fmt: skip


class World:
    def __init__(self, value: Any, channels: set[str]) -> None:
        self.value, self.channels = value, channels

    def observe(self, agent_id: str, time_step: int) -> dict:
        return {"time_step": time_step}

    def apply(self, request: ActionRequest) -> ActionResult:
        return ActionResult.ok({"v": self.value} if "result" in self.channels else None)

    def state_digest(self) -> str:
        return "0"


def run_with(path: Path, value: Any, channels: set[str]) -> Run:
    model = {"m": lambda world: value} if "model" in channels else None
    agent = {"a": lambda world: [value, value]} if "agent" in channels else None
    trace = TraceDb(path)
    try:
        with experiment_reporters(model, agent):
            engine = WorldEngine(
                WorldEngineConfig(run_id="values"),
                {a: Policy(value, channels) for a in AGENTS},
                World(value, channels),
                trace_db=trace,
            )
        engine.run(1)
    finally:
        trace.close()
    return Run.open(path)


def expected_in(channel: str, value: Any) -> Any:
    """The read-back value of ``channel`` (ranges differ: reporters hold signed 64 bits)."""
    if channel in ("model", "agent"):
        return expected(value, top=I64)
    return expected(value)


WHERE = {
    "arguments": "agent_000's action 'act' at step 0: the policy's arguments['v']",
    "result": "agent_000's action 'act' at step 0: the world's result['v']",
    "metadata": "agent_000's action 'act' at step 0: the policy's metadata['v']",
    "model": "model reporter 'm' before step 0",
    "agent": "agent reporter 'a' before step 0, agent_000",
}


def check_read_back(run: Run, channel: str, want: Any) -> None:
    if channel in ("arguments", "result", "metadata"):
        column = run.actions[channel].tolist()
        got = [json.loads(text)["v"] for text in column]
        assert all(same(want, g) for g in got), (want, got)
        if channel == "arguments" and not isinstance(want, list | dict):
            frame = run.frame("arguments", "polars")
            if want is not None:  # a key that is null throughout is no column
                assert all(same(want, g) for g in frame["v"].to_list()), (want, frame)
        return
    name, frame = ("m", "model_vars") if channel == "model" else ("a", "agent_vars")
    got = run.frame(frame, "polars")[name].to_list()
    for g in got:
        if isinstance(want, list | dict):  # a JSON value reads as its text
            assert isinstance(g, str) and same(want, json.loads(g)), (want, g)
        elif want is None:
            assert g is None or (isinstance(g, float) and math.isnan(g)), (want, g)
        else:
            assert same(want, g), (want, got)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=top_values)
def test_a_value_is_read_back_as_given_or_refused_in_one_line(tmp_path: Path, value: Any) -> None:
    verdicts: dict[str, Any] = {}
    for channel in CHANNELS:
        try:
            verdicts[channel] = expected_in(channel, value)
        except Refused:
            verdicts[channel] = Refused
    accepted = {c for c, v in verdicts.items() if v is not Refused}
    if accepted:  # one run carries the value in every channel that records it
        run = run_with(tmp_path / "ok.sqlite", value, accepted)
        assert run.metadata["status"] == "complete"
        for channel in accepted:
            check_read_back(run, channel, verdicts[channel])
    for channel in set(CHANNELS) - accepted:  # each refusal on its own, before step 0 commits
        path = tmp_path / f"{channel}.sqlite"
        with pytest.raises(ConfigError) as err:
            run_with(path, value, {channel})
        message = str(err.value)
        assert "\n" not in message and message.startswith(WHERE[channel]), message
        assert Run.open(path).metadata["steps_done"] == 0
        path.unlink()
    (tmp_path / "ok.sqlite").unlink(missing_ok=True)


@pytest.mark.parametrize(
    "value",
    [np.int64(7), np.float32(0.25), np.bool_(False), (1, 2), np.arange(3), float("nan"), 2**64 - 1],
)
def test_a_value_json_would_change_is_recorded_as_given(tmp_path: Path, value: Any) -> None:
    # Before: np.int64(7) was recorded as "7", np.bool_ as "False", an array as "[0 1 2]".
    run = run_with(tmp_path / "t.sqlite", value, {"arguments", "result", "metadata"})
    for channel in ("arguments", "result", "metadata"):
        check_read_back(run, channel, expected(value))
