"""Run health as a property: for any mix of decision outcomes, the run is flagged exactly when a
documented rule says so (``vivarium.trace.health``, the README's "Run health").

Each generated plan says, for every agent and step, what happens: the action succeeds, the world
refuses it with one of a few kinds of error (each spelled with varying ids, numbers and quoted
names), the world raises, the policy raises, or the policy has no usable reply. A scripted policy
and world play the plan through the real engine into a real trace (agents may sit steps out, as
in an autonomous run), and the expected problems are computed here from the plan and the rules
as documented, never from the code under test.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from vivarium import Run
from vivarium.engine.engine import WorldEngine, WorldEngineConfig
from vivarium.trace.db import TraceDb
from vivarium.types import ActionRequest, ActionResult

# The documented thresholds, restated (the test would catch a silent change of the constants).
MIN_DECISIONS, SAME_ERROR_SHARE, FALLBACK_SHARE, UNKNOWN_ACTION_SHARE = 10, 0.5, 0.5, 0.05
AGENT_MIN_DECISIONS, AGENT_CHANCE = 10, 0.01

# Kinds of refusal: the same error whatever the numbers, ids and quoted names in it.
REFUSALS = (
    "cell ({a}, {b}) is taken",
    "agent_{a:03d} not found",
    "unknown action 'act_{a}' (known: move, wait)",
    "not enough scrip: need {a}, have {b}",
)
ACTIONS = ("move", "wait", "give")
UNKNOWN = 2  # REFUSALS[2]: what a world's registry says of an action it does not have
# Each kind's text with its numbers and quoted names set aside, as the README describes it.
NORMAL = {
    0: "cell (#, #) is taken",
    1: "# not found",
    2: "unknown action '' (known: move, wait)",
    3: "not enough scrip: need #, have #",
    "raise": "world error: ZeroDivisionError: bug at #",
}


@dataclass(frozen=True)
class Outcome:
    """What one decision does: ``kind`` is ok, refuse, raise, policy_error or unusable."""

    kind: str
    action: str = "move"
    refusal: int = 0  # which of REFUSALS
    a: int = 0
    b: int = 0

    def error(self) -> str:
        return REFUSALS[self.refusal].format(a=self.a, b=self.b)


# Policies of three tempers: mostly succeeding, mostly refused, or with bugs and fallbacks.
TEMPERS = (
    ("ok",) * 5 + ("refuse",) * 2 + ("unusable",),
    ("refuse",) * 3 + ("ok",),
    ("ok",) * 3 + ("refuse", "raise", "policy_error", "unusable"),
)


@st.composite
def profiles(draw: st.DrawFn) -> tuple[Outcome, ...]:
    """The few outcomes one policy produces: a refusal is of one kind, for one action (which may
    be the action that succeeds: a crowded world)."""
    temper = draw(st.sampled_from(TEMPERS))
    kinds = draw(st.lists(st.sampled_from(temper), min_size=1, max_size=4))
    ok_action, refused = draw(st.sampled_from(ACTIONS)), draw(st.sampled_from(ACTIONS))
    refusal = draw(st.integers(0, len(REFUSALS) - 1))
    return tuple(Outcome(kind, ok_action if kind == "ok" else refused, refusal) for kind in kinds)


@st.composite
def plans(draw: st.DrawFn) -> list[list[Outcome | None]]:
    """plan[step][agent]: an agent's outcome at a step, or None when it sits the step out.

    Each agent draws from a few kinds of its own (or all agents from the same few), so that runs
    where most decisions fail with one error, agents that never succeed and runs without
    failures are all common.
    """
    agents = draw(st.integers(1, 6))
    steps = draw(st.integers(1, 14))
    absent = draw(st.booleans()) and draw(st.booleans())  # a quarter of the runs
    if draw(st.booleans()):  # every agent alike: one policy's bug shows in every decision
        kinds = [draw(profiles())] * agents
    else:
        kinds = [draw(profiles()) for _ in range(agents)]
    numbers = st.integers(0, 999)
    plan = []
    for _ in range(steps):
        # Each decision's error has its own numbers and ids: the same error, spelled anew.
        row: list[Outcome | None] = [
            replace(draw(st.sampled_from(p)), a=draw(numbers), b=draw(numbers)) for p in kinds
        ]
        if absent:
            row = [o if draw(st.booleans()) else None for o in row]
            if all(o is None for o in row):
                row[0] = kinds[0][0]
        plan.append(row)
    return plan


class Scripted:
    """The policy: plays its agent's column of the plan."""

    def __init__(self, plan: list[list[Outcome | None]], idx: int) -> None:
        self.plan, self.idx = plan, idx

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: dict) -> Any:
        o = self.plan[time_step][self.idx]
        assert o is not None
        if o.kind == "policy_error":
            raise RuntimeError(f"policy bug {o.a}")
        metadata = {}
        if o.kind == "unusable":
            metadata = {"parse_path": "fallback", "fallback_reason": f"no tool call ({o.a})"}
        return ActionRequest(
            run_id=run_id, time_step=time_step, agent_id=agent_id, action_name=o.action,
            arguments={"o": [self.idx]}, metadata=metadata,
        )  # fmt: skip


class World:
    """The world: does what the plan says to each request."""

    def __init__(self, plan: list[list[Outcome | None]]) -> None:
        self.plan = plan

    def observe(self, agent_id: str, time_step: int) -> dict:
        return {"time_step": time_step}

    def apply(self, request: ActionRequest) -> ActionResult:
        o = self.plan[request.time_step][request.arguments["o"][0]]
        assert o is not None
        if o.kind == "raise":
            raise ZeroDivisionError(f"bug at {o.a}")
        if o.kind == "refuse":
            return ActionResult.failed(o.error())
        return ActionResult.ok()

    def state_digest(self) -> str:
        return "0"


def play(path: Path, plan: list[list[Outcome | None]]) -> Run:
    agents = len(plan[0])
    trace = TraceDb(path)
    try:
        engine = WorldEngine(
            WorldEngineConfig(run_id="plan"),
            {f"agent_{i:03d}": Scripted(plan, i) for i in range(agents)},
            World(plan),
            trace_db=trace,
        )
        for row in plan:
            chosen = [i for i, o in enumerate(row) if o is not None]
            engine.step(agents=None if len(chosen) == agents else chosen)
        engine.trace_db.finish_run("complete", None)  # type: ignore[union-attr]
    finally:
        trace.close()
    return Run.open(path)


def expected_problems(plan: list[list[Outcome | None]]) -> list[str]:
    """The beginnings of the problem lines the rules give for ``plan`` (counts included)."""
    agents = len(plan[0])
    decided = [o for row in plan for o in row if o is not None]
    n = len(decided)
    fallbacks = [o for o in decided if o.kind in ("policy_error", "unusable")]
    failed_fallbacks = [o for o in fallbacks if o.kind == "policy_error"]
    failures = [o for o in decided if o.kind != "ok"]
    successes = n - len(failures)
    out = []
    if failed_fallbacks or (n and len(fallbacks) >= FALLBACK_SHARE * n):
        out.append(f"{len(fallbacks)} of {n} decisions were fallbacks")
    all_failed = n >= MIN_DECISIONS and successes == 0 and len(fallbacks) < n
    accepted = {o.action for o in decided if o.kind == "ok"}
    # Errors of the world: refusals by kind, and the world's exceptions, one kind. Of those
    # tied for the most, the rule names the one met most in all, then the greatest text.
    kinds: dict[Any, int] = {}
    met: dict[Any, int] = {}
    for o in decided:
        if o.kind in ("refuse", "raise"):
            key = o.refusal if o.kind == "refuse" else "raise"
            met[key] = met.get(key, 0) + 1
            if o.action not in accepted:
                kinds[key] = kinds.get(key, 0) + 1
    same = None
    if all_failed:
        out.append(f"every decision failed ({n} of {n})")
    elif n >= MIN_DECISIONS and kinds and max(kinds.values()) >= SAME_ERROR_SHARE * n:
        same = max(kinds, key=lambda k: (kinds[k], met[k], NORMAL[k]))
        out.append(f"the same error in {kinds[same]} of {n} decisions")
    unknown = sum(o.kind == "refuse" and o.refusal == UNKNOWN for o in decided)
    if not all_failed and unknown >= UNKNOWN_ACTION_SHARE * n and unknown and same != UNKNOWN:
        out.append(f"{unknown} of {n} decisions named an action the world does not have")
    raised = sum(o.kind == "raise" for o in decided)
    if raised:
        out.append(f"{raised} of {n} decisions failed because the world raised")
    if not all_failed:
        p = successes / n
        flagged = []
        for i in range(agents):
            mine = [row[i] for row in plan if row[i] is not None]
            k = len(mine)
            if any(o.kind == "ok" for o in mine):
                continue
            if (k == 0 and n / agents >= AGENT_MIN_DECISIONS) or (
                k >= AGENT_MIN_DECISIONS and p > 0 and agents * (1 - p) ** k < AGENT_CHANCE
            ):
                flagged.append(f"agent_{i:03d}")
        if flagged:
            out.append(f"{len(flagged)} of {agents} agents never acted successfully: {flagged[0]}")
    return out


def _refuse(action: str, a: int) -> Outcome:
    return Outcome("refuse", action, 1, a, a % 7)


# Each rule's edge, played every time (the generated plans cover them at random too).
SAME_ERROR = [[_refuse("give", t), Outcome("ok", "wait")] for t in range(6)]  # 6 of 12
CROWDED = [[_refuse("move", t), Outcome("ok", "move")] for t in range(6)]  # move succeeds too
STUCK = [[Outcome("ok"), Outcome("ok"), _refuse("move", t)] for t in range(12)]
NEVER_DECIDED = [[Outcome("ok"), None] for _ in range(22)]
ALL_UNKNOWN = [[replace(_refuse("move", t), refusal=UNKNOWN)] * 2 for t in range(5)]
# Agents sitting steps out (each its own count), the same error, and an agent stuck.
AUTONOMOUS = [
    [Outcome("ok", "wait"), _refuse("give", t), _refuse("give", t) if t % 2 == 0 else None]
    for t in range(12)
]
# An action_space with a misspelt action: a third of the decisions, every one refused.
TYPO = [
    [replace(_refuse("jmup", t), refusal=UNKNOWN), Outcome("ok"), Outcome("ok", "wait")]
    for t in range(4)
]


@example(plan=SAME_ERROR)
@example(plan=CROWDED)
@example(plan=STUCK)
@example(plan=NEVER_DECIDED)
@example(plan=ALL_UNKNOWN)
@example(plan=AUTONOMOUS)
@example(plan=TYPO)
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans())
def test_health_flags_a_run_exactly_when_a_documented_rule_says_so(
    tmp_path: Path, plan: list[list[Outcome | None]]
) -> None:
    path = tmp_path / "plan.sqlite"
    run = play(path, plan)
    health = run.health
    want = expected_problems(plan)
    assert len(health.problems) == len(want), (health.problems, want)
    for line, start in zip(health.problems, want, strict=True):
        assert line.startswith(start), (line, start)
    assert health.ok == (not want)
    decided = [o for row in plan for o in row if o is not None]
    assert health.decisions == len(decided)
    assert health.failures == sum(o.kind != "ok" for o in decided)
    path.unlink()
