"""Resume is exact, as a property: a run stopped at any step and resumed is the run never stopped.

Over world kind (built-in channel, ecology and boltzmann; a world of one's own with and without
``snapshot``, and one that applies batches) x policy (random; one's own per agent, with a
generator and no ``get_state``; one's own that decides batches; the cognitive policy on the mock
LLM; the cognitive policy replayed from a cassette recorded here) x scheduling x stop (Ctrl-C
between steps, inside ``world.apply`` or a policy's ``decide``, an LLM outage, a killed process
that records nothing) x stop step x checkpoint setting x how it is resumed (``resume_run``, or
the same run started again) x a second stop during the resume: every table of the resumed trace
equals the uninterrupted run's (decisions, state hashes, messages, reporters, LLM calls and
their texts, transitions, checkpoints, meta), and ``interruptions`` records each stop.

The uninterrupted reference of each configuration is run once and kept (``_REFERENCES``).
"""

from __future__ import annotations

import itertools
import os
import random
import sqlite3
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from vivarium import Experiment
from vivarium.errors import ResumedWarning, RunHealthWarning, RunInterrupted
from vivarium.experiment.runner import build_engine, resume_run, run_experiment
from vivarium.gateways.base import LLMUnavailable
from vivarium.seeding import canonical_json, derive_seed
from vivarium.trace.db import TraceDb
from vivarium.trace.records import encode_column
from vivarium.types import ActionRequest, ActionResult
from vivarium.worlds.base import BatchDecisions, BatchOutcomes

STEPS = 5
# At least 200 in every test run (``make test``); more with ``RESUME_EXAMPLES=1000``.
EXAMPLES = max(200, int(os.environ.get("RESUME_EXAMPLES", "200")))


# -- worlds and policies of one's own -------------------------------------------------------
def _pot(world: Tally) -> int:
    return world.pot


def _held(world: Tally) -> list[int]:
    return [world.held[a] for a in world.agent_ids]


class Tally:
    """A shared pot agents give to and take from; posts are messages. No snapshot."""

    model_reporters = {"pot": _pot}  # noqa: RUF012 - as a user writes it
    agent_reporters = {"held": _held}  # noqa: RUF012

    def __init__(self, agent_ids: Sequence[str], seed: int) -> None:
        self.agent_ids = list(agent_ids)
        self.pot = seed % 5 + 2
        self.held = dict.fromkeys(self.agent_ids, 0)
        self.outbox: list[tuple[int, str, str, str]] = []
        self.posted = 0

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"pot": self.pot, "held": self.held[agent_id], "posts": self.posted}

    def apply(self, request: ActionRequest) -> ActionResult:
        who = request.agent_id
        if request.action_name == "give":
            k = int(request.arguments.get("k", 1))
            self.pot += k
            return ActionResult.ok({"pot": self.pot})
        if request.action_name == "take":
            if self.pot < 1:
                return ActionResult.failed("the pot is empty")
            self.pot -= 1
            self.held[who] += 1
            return ActionResult.ok({"pot": self.pot})
        if request.action_name == "post_message":
            text = str(request.arguments.get("content", ""))
            self.outbox.append((len(self.outbox), who, "general", text))
            self.posted += 1
            self.pot += len(text) % 3  # what a model wrote moves the world
            return ActionResult.ok({"posts": self.posted})
        if request.action_name == "noop":
            return ActionResult.ok()
        return ActionResult.failed(f"unknown action {request.action_name}")

    def take_messages(self) -> list[tuple[int, str, str, str]]:
        out, self.outbox = self.outbox, []
        return out

    def state_digest(self) -> str:
        return canonical_json([self.pot, self.posted, sorted(self.held.items())])


class SavedTally(Tally):
    """``Tally`` that can save and restore its state (checkpoints hold it)."""

    def snapshot(self) -> dict[str, Any]:
        return {"pot": self.pot, "held": self.held, "posted": self.posted}

    def restore(self, state: dict[str, Any]) -> None:
        self.pot, self.held, self.posted = state["pot"], dict(state["held"]), state["posted"]


TALLY_ACTIONS = ("noop", "give", "take")


class BatchTally(SavedTally):
    """``SavedTally`` that applies a whole step of give/take/noop at once (a ``BatchWorld``)."""

    def batch_actions(self) -> frozenset[str]:
        return frozenset(TALLY_ACTIONS)

    def apply_batch(self, decisions: BatchDecisions, agent_ids: Sequence[str]) -> BatchOutcomes:
        success, result, error = [], [], []
        for code, k, who in zip(decisions.codes, decisions.extra["k"], agent_ids, strict=True):
            name = decisions.action_names[code]
            ok, res, err = 1, None, None
            if name == "give":
                self.pot += k
                res = canonical_json({"pot": self.pot})
            elif name == "take":
                if self.pot < 1:
                    ok, err = 0, "the pot is empty"
                else:
                    self.pot -= 1
                    self.held[who] += 1
                    res = canonical_json({"pot": self.pot})
            success.append(ok), result.append(res), error.append(err)
        return BatchOutcomes(encode_column(success), encode_column(result), encode_column(error))


class Picker:
    """One's own per-agent policy: a generator of its own, and no ``get_state``.

    A checkpoint cannot hold its generator: a resume must find that out (the first step after
    the checkpoint re-executes to another state) and re-execute from the start instead.
    """

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        name = self.rng.choice(("noop", "give", "take", "post_message", "emit_event"))
        arguments: dict[str, Any] = {}
        if name == "give":
            arguments = {"k": self.rng.randint(1, 3)}
        elif name == "post_message":
            arguments = {"content": f"{agent_id} says {self.rng.randint(0, 99)}"}
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=name,
            arguments=arguments,
        )


def _sharer_choice(seed: int, n: int) -> tuple[int, int]:
    """(action code in ``TALLY_ACTIONS``, k) of a sharer's ``n``-th decision."""
    draw = derive_seed(seed, "share", n)
    return draw % 3, draw % 4 + 1


class Sharer:
    """One's own policy that decides batches too (``BatchPolicy``), with state it saves."""

    def __init__(self, seed: int) -> None:
        self.seed, self.n = seed, 0

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        code, k = _sharer_choice(self.seed, self.n)
        self.n += 1
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=TALLY_ACTIONS[code],
            arguments={"k": k} if code == 1 else {},
        )

    def get_state(self) -> dict[str, int]:
        return {"n": self.n}

    def set_state(self, state: dict[str, int]) -> None:
        self.n = state["n"]

    @classmethod
    def batch_decider(cls, policies: Sequence[Any], world_actions: frozenset[str]) -> Any:
        if all(type(p) is Sharer for p in policies) and set(TALLY_ACTIONS) <= world_actions:
            return SharerBatch(policies)
        return None


class SharerBatch:
    """Decides every sharer's step at once; each policy's state advanced as one by one."""

    def __init__(self, policies: Sequence[Sharer]) -> None:
        self.policies = list(policies)

    def decide_batch(self, time_step: int, order: Sequence[int] | None) -> BatchDecisions:
        rows = range(len(self.policies)) if order is None else order
        choices = []
        for i in rows:
            policy = self.policies[i]
            choices.append(_sharer_choice(policy.seed, policy.n))
            policy.n += 1
        arguments = [canonical_json({"k": k}) if code == 1 else None for code, k in choices]
        return BatchDecisions(
            time_step=time_step,
            action_names=TALLY_ACTIONS,
            codes=[code for code, _ in choices],
            arguments=encode_column(arguments),
            extra={"k": [k for _, k in choices]},
        )

    def sync_policies(self) -> None:
        """The policies were advanced as the batch went: nothing to hand back."""


WORLDS: dict[str, Any] = {
    "channel": "channel",
    "ecology": "ecology",
    "boltzmann": "boltzmann",
    "tally": SavedTally,
    "tally_no_snapshot": Tally,
    "tally_batch": BatchTally,
}
POLICIES = ("random", "picker", "sharer", "mock_llm", "cassette")
LLM = {"mock_llm", "cassette"}


# -- one configuration, and its uninterrupted reference ---------------------------------------
def _fields(world: str, policy: str, scheduling: str, every: int | None, cassette: Path) -> dict:
    fields: dict[str, Any] = {
        "name": "prop",
        "world": WORLDS[world],
        "agents": 3 if world != "boltzmann" else 2,
        "steps": STEPS,
        "seed": 11,
        "scheduling": scheduling,
        "checkpoint_every": every,
    }
    if policy == "picker":
        fields["policy"] = Picker
    elif policy == "sharer":
        fields["policy"] = Sharer
    elif policy in LLM:
        fields["policy"] = "cognitive"
        fields["llm"] = {"mock": True}
        if policy == "cassette":
            fields["llm"] = {"mock": True, "cache": str(cassette), "cache_mode": "replay"}
    elif world == "boltzmann":
        fields["policy"] = "boltzmann"  # its own random agents
    return fields


_REFERENCES: dict[tuple[Any, ...], dict[str, list[tuple[Any, ...]]]] = {}


def tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table but ``interruptions``, as sorted rows: the contents, not the file's bytes."""
    con = sqlite3.connect(path)
    try:
        names = [
            r[0]
            for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if r[0] != "interruptions"
        ]
        return {n: sorted(con.execute(f"SELECT * FROM {n}").fetchall(), key=repr) for n in names}
    finally:
        con.close()


def reference(key: tuple[Any, ...], exp: Experiment, folder: Path) -> dict[str, list[Any]]:
    """The uninterrupted run of ``exp`` (run once per configuration)."""
    if key not in _REFERENCES:
        path = folder / f"ref-{len(_REFERENCES)}.sqlite"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RunHealthWarning)
            exp.run(path, progress=False)
        _REFERENCES[key] = tables(path)
    return _REFERENCES[key]


_CASSETTES: dict[tuple[Any, ...], Path] = {}


def cassette_for(world: str, scheduling: str, folder: Path) -> Path:
    """A cassette of the mock LLM's replies for this world and scheduling, recorded once."""
    key = (world, scheduling)
    if key not in _CASSETTES:
        path = folder / f"cassette-{len(_CASSETTES)}.sqlite"
        fields = _fields(world, "mock_llm", scheduling, None, path)
        fields["llm"] = {"mock": True, "cache": str(path), "cache_mode": "record"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RunHealthWarning)
            Experiment(**fields).run(folder / f"recording-{len(_CASSETTES)}.sqlite", progress=False)
        _CASSETTES[key] = path
    return _CASSETTES[key]


# -- stopping a run ---------------------------------------------------------------------------
class Stop:
    """Stops the run once, at ``step``, the way ``how`` says (installed on the built engine)."""

    def __init__(self, how: str, step: int) -> None:
        self.how, self.step, self.fired = how, step, False

    def _now(self, engine: Any) -> bool:
        if self.fired or engine.next_step != self.step:
            return False
        self.fired = True
        return True

    def on_step(self) -> Callable[[int, Any], None]:
        def on_step(step: int, _record: Any) -> None:
            if self.how == "between" and not self.fired and step == self.step - 1:
                self.fired = True
                raise KeyboardInterrupt

        return on_step

    def install(self, engine: Any) -> None:
        if self.how == "apply":
            self._wrap(engine.world, "apply", engine, KeyboardInterrupt)
            if hasattr(engine.world, "apply_batch"):
                self._wrap(engine.world, "apply_batch", engine, KeyboardInterrupt)
        elif self.how == "decide":
            for policy in {id(p): p for p in engine.policies}.values():
                self._wrap(policy, "decide", engine, KeyboardInterrupt)
            original = engine._batch_decider

            def batch_decider() -> Any:
                batch = original()
                if batch is not None and not getattr(batch, "_stop_wrapped", False):
                    batch._stop_wrapped = True
                    self._wrap(batch, "decide_batch", engine, KeyboardInterrupt)
                return batch

            engine._batch_decider = batch_decider
        elif self.how == "outage":
            gateways = {id(p.gateway): p.gateway for p in engine.policies}
            for gateway in gateways.values():
                self._wrap(gateway, "complete", engine, _outage)
                self._wrap(gateway, "acomplete", engine, _outage, is_async=True)

    def _wrap(
        self, obj: Any, name: str, engine: Any, error: Callable[[], BaseException], is_async=False
    ) -> None:
        original = getattr(obj, name)
        if is_async:

            async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
                if self._now(engine):
                    raise error()
                return await original(*args, **kwargs)

            setattr(obj, name, wrapped_async)
            return

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self._now(engine):
                raise error()
            return original(*args, **kwargs)

        setattr(obj, name, wrapped)


def _outage() -> BaseException:
    return LLMUnavailable("injected: the server went away", kind="connection")


def start(exp: Experiment, path: Path, stop: Stop) -> None:
    """Run ``exp`` into ``path``, stopped by ``stop`` (a killed process records nothing)."""
    if stop.how == "killed":  # the process dies after committing ``step`` steps
        trace = TraceDb(path)
        shared: dict[str, Any] = {}
        try:
            with exp._started() as config:
                build_engine(config, trace, shared).run(stop.step, finish=False)
        finally:
            trace.close()
            close = getattr(shared.get("gateway"), "close", None)
            if close is not None:
                close()
        stop.fired = True
        return
    try:
        with exp._started() as config:
            run_experiment(
                config, path, progress=False, on_start=stop.install, on_step=stop.on_step()
            )
    except (KeyboardInterrupt, RunInterrupted):
        assert stop.fired


def asked_while_replaying(engine: Any, seen: list[int]) -> None:
    """Note in ``seen`` each step at which the gateway is asked while the engine re-executes.

    A re-executed step's calls are answered from the trace: asking the gateway then would give
    a sampling model's other replies (the mock and a cassette would hide it: they repeat).
    """
    for gateway in {
        id(p.gateway): p.gateway for p in engine.policies if hasattr(p, "gateway")
    }.values():
        for name in ("complete", "acomplete"):
            original = getattr(gateway, name)

            def spy(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                if engine.replaying:
                    seen.append(engine.next_step)
                return _original(*args, **kwargs)

            setattr(gateway, name, spy)


def resume(exp: Experiment, path: Path, how: str, stop: Stop | None) -> bool:
    """Resume ``path`` as ``how`` says, perhaps stopped again by ``stop``; True if it stopped."""
    asked: list[int] = []

    def on_start(engine: Any) -> None:
        asked_while_replaying(engine, asked)
        if stop is not None:
            stop.install(engine)

    on_step = stop.on_step() if stop is not None else None
    try:
        return _resume(exp, path, how, stop, on_start, on_step)
    finally:
        assert asked == [], f"the gateway was asked while re-executing steps {asked}"


def _resume(
    exp: Experiment, path: Path, how: str, stop: Stop | None, on_start: Any, on_step: Any
) -> bool:
    try:
        if how == "resume_run":
            with exp._reporters():
                resume_run(path, progress=False, on_start=on_start, on_step=on_step)
        else:  # the same call again: a notebook cell run a second time
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                with exp._started() as config:
                    run_experiment(config, path, progress=False, on_start=on_start, on_step=on_step)
            resumed = [w for w in seen if issubclass(w.category, ResumedWarning)]
            assert len(resumed) <= 1
    except (KeyboardInterrupt, RunInterrupted):
        assert stop is not None and stop.fired
        return True
    return False


def interruptions(path: Path) -> list[tuple[int, str]]:
    con = sqlite3.connect(path)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'interruptions'").fetchone():
            return []
        return con.execute("SELECT step, ended FROM interruptions ORDER BY id").fetchall()
    finally:
        con.close()


def steps_done(path: Path) -> int:
    con = sqlite3.connect(path)
    try:
        return int(con.execute("SELECT steps_done FROM runs").fetchone()[0])
    finally:
        con.close()


# -- the property ----------------------------------------------------------------------------
def _stop_kinds(policy: str) -> list[str]:
    kinds = ["between", "apply", "killed"]
    kinds.append("outage" if policy in LLM else "decide")
    return kinds


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    world = draw(st.sampled_from(sorted(WORLDS)))
    policy = draw(st.sampled_from(POLICIES))
    every = draw(st.sampled_from([None, 1, 2]))
    if world == "tally_no_snapshot":
        every = None  # refused at build time (tests/misuse/test_resume.py)
    how = draw(st.sampled_from(_stop_kinds(policy)))
    lowest = 1 if how == "between" else 0
    again = draw(st.none() | st.tuples(st.sampled_from(_stop_kinds(policy)), st.integers(0, 4)))
    if again is not None and again[0] == "killed":
        again = None  # a resume is killed the same way a run is: covered by the first stop
    return {
        "world": world,
        "policy": policy,
        "scheduling": draw(st.sampled_from(["sequential", "simultaneous"])),
        "every": every,
        "how": how,
        "step": draw(st.integers(lowest, STEPS - 1)),
        "resume": draw(st.sampled_from(["resume_run", "rerun"])),
        "again": again,
    }


_COUNTER = itertools.count()


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=cases())
def test_a_resumed_run_is_the_run_never_interrupted(
    case: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.getbasetemp() / "resume-property"
    folder.mkdir(exist_ok=True)
    world, policy, scheduling = case["world"], case["policy"], case["scheduling"]
    cassette = cassette_for(world, scheduling, folder) if policy == "cassette" else folder / "-"
    exp = Experiment(**_fields(world, policy, scheduling, case["every"], cassette))
    key = (world, policy, scheduling, case["every"])
    expected = reference(key, exp, folder)

    path = folder / f"case-{next(_COUNTER)}.sqlite"
    first = Stop(case["how"], case["step"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunHealthWarning)
        start(exp, path, first)
        stops = [steps_done(path)] if first.fired else []
        if case["again"] is not None and stops:
            second = Stop(*case["again"])
            if resume(exp, path, case["resume"], second):
                stops.append(steps_done(path))
        while _status(path) != "complete":
            resume(exp, path, "resume_run", None)

    event(f"stops recorded: {len(stops)}")
    event(f"world {world}, policy {policy}")
    got = tables(path)
    assert set(got) == set(expected)
    for name in expected:
        assert got[name] == expected[name], f"{name} differs: {case}"
    recorded = interruptions(path)
    assert [step for step, _ in recorded] == stops, case
    assert [ended for _, ended in recorded][:1] == (
        ["killed" if case["how"] == "killed" else "interrupted"] if stops else []
    )


def _status(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return str(con.execute("SELECT status FROM runs").fetchone()[0])
    finally:
        con.close()
