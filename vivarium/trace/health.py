"""Run health: whether a trace is a result to trust, in one line per problem.

A run can end without an exception and still not be a result: every LLM call failed, every
decision named an action the world does not have, most decisions fell back, an agent never
did anything. ``run_health`` reads what the trace recorded (a few aggregate queries, no frames)
and names each such problem, so a notebook, the CLI, the control panel and a sweep all say the
same thing. What it calls a problem is what a researcher would call a broken run; what is
behaviour (a world that refuses many moves for its own reasons, a model that now and then gives
a reply that cannot be used) is counted but not a problem: a warning on every such run would
teach people to ignore the warning.

The rules, in the order their lines come (each threshold is a constant below; the README's
"Run health" explains them for users):

| problem | when |
|---|---|
| ended badly | the status is not ``complete``: interrupted, failed, or not finished (the step it reached, and how to resume) |
| every LLM call failed | the run made LLM calls and none succeeded |
| fallbacks | at least ``FALLBACK_SHARE`` of the decisions fell back (no usable action), or any fallback is a failure: an LLM call or the policy failed (``FAILURE_REASONS``), not the agent's own unusable reply |
| every decision failed | no decision succeeded, in a run of at least ``MIN_DECISIONS`` |
| the same error | one error (numbers and quoted names aside: ``normalise_error``) is the outcome of at least ``SAME_ERROR_SHARE`` of the decisions of a run of at least ``MIN_DECISIONS``, counting only actions that never once succeeded in the run |
| unknown actions | at least ``UNKNOWN_ACTION_SHARE`` of the decisions named an action the world does not have (its registry's ``unknown action '...'``) |
| the world raised | any decision failed because the world's code raised (``world error: ...``): a bug, as a policy error is |
| agents that never acted | an agent none of whose decisions succeeded, when chance cannot explain it (``AGENT_MIN_DECISIONS``, ``AGENT_CHANCE``), or that never decided while the others did |

Why these thresholds:

- ``MIN_DECISIONS`` (10): below it, a run where everything failed can be chance: in a world that
  refuses 70% of moves, 5 refusals in a row happen 17% of the time, 10 in a row 3%.
- ``SAME_ERROR_SHARE`` (a half): "most decisions". The rule counts failures of actions that never
  succeeded in the run, because a crowded world refuses most moves with one reason ("cell
  (3, 4) is taken") while the same move succeeds whenever a cell is free: that is the world's
  rule at work. An action the world never accepted (an unknown action, arguments it always
  rejects, a recipient that does not exist) is code that does not fit the world.
- ``UNKNOWN_ACTION_SHARE`` (5%): an action the world does not have is never the world's rule at
  work but a policy (or an ``action_space``) that does not fit it. Random agents with one
  misspelt action among ``k`` name it in ``1/k`` of their decisions (a fifth for 5 actions, 5%
  for 20); the built-in LLM policies turn an invented tool into a fallback before the world
  sees it, and a policy of one's own that lets one through now and then stays below.
- ``FALLBACK_SHARE`` (a half): unchanged. A small model may give a reply that cannot be used one
  time in three; at half, the run says more about the parser than about the agents.
- An agent with ``k`` decisions, none successful, in a run of ``n`` agents whose decisions
  succeed with share ``p``: by chance alone, ``n * (1 - p) ** k`` such agents are expected. The
  agent is flagged when that is below ``AGENT_CHANCE`` (1%) and ``k >= AGENT_MIN_DECISIONS``
  (10): one agent of 100 stuck for 10 steps where half the moves succeed is 0.1 expected, not
  flagged; stuck for 20 steps, 1e-4: flagged. An agent with no decision at all is flagged when
  the agents decided ``AGENT_MIN_DECISIONS`` times on average (an autonomous run whose clock
  never gave it a turn).
- A world's refusal is behaviour at any share below these: counted in ``failures``, never a
  problem by itself.

The shape (a stable contract, shown by ``repr(run)``, ``run._repr_html_()``, ``run.summary()``,
the CLI, the panel and ``Sweep.problems``):

- ``ok``: True when ``problems`` is empty;
- ``problems``: one line each, in the order above;
- ``notes``: what is worth knowing but no problem: a run resumed after interruptions
  (``resumed after 2 interruptions (steps 4, 9)``, from the trace's ``interruptions`` table).
  A resumed run is a whole result, so its interruptions never make it not ``ok``;
- ``status``, ``steps_done``, ``steps``, ``decisions``, ``failures``, ``fallbacks``,
  ``failed_fallbacks``, ``world_errors``, ``unknown_actions``, ``llm_calls``, ``llm_errors``,
  ``last_llm_error``, ``common_error`` (the commonest error and its count),
  ``inactive_agents``: the numbers behind them.

It stays cheap: counts come from ``steps`` and from aggregate queries over the failed decisions
only; a run whose decisions all succeeded (the ``decision_columns_filled`` meta says no row
ever wrote ``success``) reads no decision at all. See ``decision_stats``. Measured on a busy
2-core machine: 7 ms for the random run of 10,000 agents x 100 steps; 1.0 s for a million
decisions of which half failed with one error; 1.5 s for a crowded world where two thirds of a
million failed with 10,000 spellings of one refusal (SQLite's sort for the ``GROUP BY`` is most
of it).
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vivarium.errors import TraceError, squash

# Fallback reasons that say something failed rather than that the agent did something odd: an
# LLM call that failed (recorded under ``on_llm_error="fallback"``), a policy that raised or
# returned no request, a decision that timed out.
FAILURE_REASONS = ("llm error: ", "policy error: ", "no decision: ", "policy returned ")
WORLD_ERROR = "world error: "
"""How the engine records a decision whose ``world.apply`` raised."""
UNKNOWN_ACTION = "unknown action '"
"""How a world's action registry refuses an action it does not have."""

FALLBACK_SHARE = 0.5
"""Fallbacks in at least this share of the decisions make a problem."""
MIN_DECISIONS = 10
"""The decisions a run needs before "every decision failed" and "the same error" apply."""
SAME_ERROR_SHARE = 0.5
"""One error in at least this share of the decisions (of actions that never succeeded)."""
UNKNOWN_ACTION_SHARE = 0.05
"""Actions the world does not have, named in at least this share of the decisions."""
AGENT_MIN_DECISIONS = 10
"""The decisions an agent needs before "never acted successfully" applies to it."""
AGENT_CHANCE = 0.01
"""How few agents without a success chance may explain: ``n * (1 - p) ** k`` below this."""
_SHOWN_AGENTS = 3  # agents named in the line; the rest counted


@dataclass(frozen=True, slots=True)
class CommonFailure:
    """The commonest error of the failed decisions (fallbacks aside), after ``normalise_error``.

    Attributes:
        example: The error as recorded, its commonest spelling.
        count: Decisions that failed with it (any spelling).
        unaccepted: Of those, the decisions of actions that never succeeded in the run (None
            when no rule needed it: the error is far from ``SAME_ERROR_SHARE``).
        variants: How many spellings it has (``agent_003 not found``, ``agent_007 ...``).
    """

    example: str
    count: int
    unaccepted: int | None
    variants: int


@dataclass(frozen=True, slots=True)
class InactiveAgent:
    """An agent none of whose decisions succeeded (``decisions`` 0: it never decided)."""

    agent_id: str
    decisions: int


@dataclass(frozen=True, slots=True)
class DecisionStats:
    """What the health rules read of a run's decisions (see ``decision_stats``).

    Attributes:
        decisions: Every decision.
        failures: Decisions that did not succeed (fallbacks included).
        fallbacks: Decisions that fell back.
        failed_fallbacks: Fallbacks whose reason is a failure (``FAILURE_REASONS``).
        world_errors: Decisions whose ``world.apply`` raised (``WORLD_ERROR``), and the
            commonest such error (``world_example``).
        unknown_actions: Decisions that named an action the world does not have
            (``UNKNOWN_ACTION``), and the commonest such error (``unknown_example``).
        common_error: The commonest error of the other failures, if any.
        agents: How many agents the run has.
        inactive: Agents none of whose decisions succeeded, and how many each made; only those
            the agent rule could flag (see ``_inactive_rule``) are looked for.
    """

    decisions: int = 0
    failures: int = 0
    fallbacks: int = 0
    failed_fallbacks: int = 0
    world_errors: int = 0
    world_example: str | None = None
    unknown_actions: int = 0
    unknown_example: str | None = None
    common_error: CommonFailure | None = None
    agents: int = 0
    inactive: tuple[InactiveAgent, ...] = ()

    @property
    def success_share(self) -> float:
        """Share of the decisions that succeeded (0.0 for a run without decisions)."""
        return (self.decisions - self.failures) / self.decisions if self.decisions else 0.0


@dataclass(frozen=True, slots=True)
class RunHealth:
    """Whether a run is a result to trust; ``problems`` says why not, one line each."""

    ok: bool
    problems: tuple[str, ...]
    status: str
    steps_done: int
    steps: int
    decisions: int
    fallbacks: int
    failed_fallbacks: int
    llm_calls: int
    llm_errors: int
    last_llm_error: str | None
    failures: int = 0
    world_errors: int = 0
    unknown_actions: int = 0
    common_error: CommonFailure | None = None
    inactive_agents: tuple[InactiveAgent, ...] = ()
    # Facts worth knowing that are no problem: ``resumed after 2 interruptions (steps 4, 9)``.
    # A resumed run is a whole result (its tables are the uninterrupted run's: see
    # ``vivarium.experiment.runner.resume_run``), so its interruptions never make it not ``ok``.
    notes: tuple[str, ...] = ()

    @property
    def fallback_rate(self) -> float:
        """Share of decisions that fell back (0.0 for a run without decisions)."""
        return self.fallbacks / self.decisions if self.decisions else 0.0

    @property
    def success_rate(self) -> float:
        """Share of decisions that succeeded (0.0 for a run without decisions)."""
        return (self.decisions - self.failures) / self.decisions if self.decisions else 0.0

    def __str__(self) -> str:
        """``ok``, or the problems joined by ``; `` (one line)."""
        return "ok" if self.ok else "; ".join(self.problems)


# -- errors, normalised ----------------------------------------------------------------------
_NUMBERED = re.compile(r"\w*\d\w*")  # a word with a digit: agent_003, 37, a3f9, step_2
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def normalise_error(error: str | None) -> str:
    """``error`` with what varies between decisions blanked: numbers, ids, quoted names.

    ``agent_003 not found`` and ``agent_007 not found`` are one error (``# not found``), as
    are ``unknown action 'x'`` and ``unknown action 'y'``; ``cell (3, 4) is taken`` is
    ``cell (#, #) is taken``.
    """
    return _NUMBERED.sub("#", _QUOTED.sub("''", error or ""))


# -- the rules -------------------------------------------------------------------------------
def _ended(
    status: str, steps_done: int, steps: int, error: str | None, writing: bool = False
) -> list[str]:
    why = f": {squash(error, 200)}" if error else ""
    if status != "complete" and writing:  # a run, or a resume re-executing it, under way
        return [
            f"still being written: {steps_done} of {steps} steps committed so far (a run or a "
            "resume of it is under way; read it again when it ends)"
        ]
    if status == "interrupted":
        return [f"interrupted after {steps_done} of {steps} steps{why} (resume with run.resume())"]
    if status == "failed":
        return [f"failed after {steps_done} of {steps} steps{why}"]
    if status != "complete":
        return [
            f"not finished ({status}): {steps_done} of {steps} steps committed "
            "(resume with run.resume())"
        ]
    return []


def _llm(calls: int, failed: int, last_error: str | None) -> list[str]:
    if calls and failed == calls:
        last = f"; the last: {squash(last_error, 200)}" if last_error else ""
        return [f"every LLM call failed ({failed} of {calls}){last}"]
    return []


def _fallback_rule(s: DecisionStats) -> list[str]:
    if s.failed_fallbacks or (s.decisions and s.fallbacks >= FALLBACK_SHARE * s.decisions):
        failed = f", {s.failed_fallbacks} of them failures" if s.failed_fallbacks else ""
        return [
            f"{s.fallbacks} of {s.decisions} decisions were fallbacks{failed} "
            "(no usable action; the reasons are in actions.error)"
        ]
    return []


def _error_text(common: CommonFailure) -> str:
    similar = f" (and {common.variants - 1} similar)" if common.variants > 1 else ""
    return squash(common.example or "no reason recorded", 200) + similar


def _all_failed(s: DecisionStats) -> bool:
    """Every decision failed, in a run large enough to tell (fallbacks only: said above)."""
    return s.decisions >= MIN_DECISIONS and s.failures == s.decisions and s.fallbacks < s.decisions


def _failure_rules(s: DecisionStats) -> list[str]:
    out = []
    common = s.common_error
    if _all_failed(s):
        commonest = ""
        if common is not None:
            commonest = f"; the commonest error ({common.count}): {_error_text(common)}"
        out.append(f"every decision failed ({s.failures} of {s.decisions}){commonest}")
    elif (
        common is not None
        and s.decisions >= MIN_DECISIONS
        and (common.unaccepted or 0) >= SAME_ERROR_SHARE * s.decisions
    ):
        out.append(
            f"the same error in {common.unaccepted} of {s.decisions} decisions, of actions "
            f"that never succeeded: {_error_text(common)}"
        )
    unknown_line = (
        not _all_failed(s)
        and s.unknown_actions
        and s.unknown_actions >= UNKNOWN_ACTION_SHARE * s.decisions
        # said already when the same error is one of them
        and not (out and common is not None and common.example.startswith(UNKNOWN_ACTION))
    )
    if unknown_line:
        out.append(
            f"{s.unknown_actions} of {s.decisions} decisions named an action the world does not "
            f"have: {squash(s.unknown_example, 200)} (a policy or action_space that does not fit "
            "the world)"
        )
    if s.world_errors:
        out.append(
            f"{s.world_errors} of {s.decisions} decisions failed because the world raised "
            f"(a bug in its code): {squash(s.world_example, 200)}"
        )
    return out


def agent_flagged(agents: int, success_share: float, decisions: int) -> bool:
    """Whether an agent with ``decisions`` decisions, none successful, is a problem.

    Args:
        agents: The run's agents (``n``).
        success_share: The share of the run's decisions that succeeded (``p``).
        decisions: The agent's decisions (``k``); 0: it never decided.

    Returns:
        True when chance cannot explain it: ``n * (1 - p) ** k < AGENT_CHANCE`` with
        ``k >= AGENT_MIN_DECISIONS`` (a run where nothing succeeded is another rule's).
    """
    if success_share <= 0 or decisions < AGENT_MIN_DECISIONS:
        return False
    return agents * (1.0 - success_share) ** decisions < AGENT_CHANCE


def _inactive_rule(s: DecisionStats) -> list[str]:
    if _all_failed(s) or not s.agents:
        return []
    mean = s.decisions / s.agents
    flagged = [
        a
        for a in s.inactive
        if (a.decisions == 0 and mean >= AGENT_MIN_DECISIONS)
        or agent_flagged(s.agents, s.success_share, a.decisions)
    ]
    if not flagged:
        return []
    named = ", ".join(
        f"{a.agent_id} ({'no decision' if not a.decisions else f'0 of {a.decisions}'})"
        for a in flagged[:_SHOWN_AGENTS]
    )
    more = f" and {len(flagged) - _SHOWN_AGENTS} more" if len(flagged) > _SHOWN_AGENTS else ""
    return [
        f"{len(flagged)} of {s.agents} agents never acted successfully: {named}{more} "
        f"(the run's decisions succeeded {s.success_share:.0%} of the time)"
    ]


def problems_of(
    status: str,
    steps_done: int,
    steps: int,
    error: str | None,
    stats: DecisionStats,
    llm_calls: int,
    llm_errors: int,
    last_llm_error: str | None,
    *,
    writing: bool = False,
) -> tuple[str, ...]:
    """The problem lines of a run, in the module's order (pure: what ``run_health`` reports).

    ``writing``: a process writes the trace now (an unfinished run is then under way, not
    stopped: nothing to resume yet).
    """
    return tuple(
        _ended(status, steps_done, steps, error, writing)
        + _llm(llm_calls, llm_errors, last_llm_error)
        + _fallback_rule(stats)
        + _failure_rules(stats)
        + _inactive_rule(stats)
    )


# -- reading the trace -----------------------------------------------------------------------
Failed = tuple[str | None, bool, str | None, int]
"""Failed decisions of one kind: (action, fallback, error, how many)."""


def _common_error(
    failed: list[Failed], never: set[str | None] | None, counted: bool
) -> CommonFailure | None:
    """The commonest normalised error of the failures that are not fallbacks.

    ``never``: the actions that never succeeded (None: every action is one); ``counted``: whether
    the count of their decisions (``unaccepted``) was needed, else it is None.
    """
    groups: dict[str, dict[str | None, int]] = {}
    unaccepted: dict[str, int] = {}
    for action, fallback, error, count in failed:
        if fallback:
            continue
        key = normalise_error(error)
        spellings = groups.setdefault(key, {})
        spellings[error] = spellings.get(error, 0) + count
        if never is None or action in never:
            unaccepted[key] = unaccepted.get(key, 0) + count
    if not groups:
        return None
    key = max(groups, key=lambda k: (unaccepted.get(k, 0), sum(groups[k].values()), k))
    spellings = groups[key]
    example = max(spellings, key=lambda e: (spellings[e], e or ""))
    return CommonFailure(
        example or "",
        sum(spellings.values()),
        unaccepted.get(key, 0) if counted else None,
        len(spellings),
    )


def _commonest(failed: list[Failed]) -> str | None:
    """The error text met most often among ``failed`` (ties: the greatest text), or None."""
    counts: dict[str, int] = {}
    for _, _, error, count in failed:
        counts[error or ""] = counts.get(error or "", 0) + count
    return max(counts, key=lambda e: (counts[e], e)) if counts else None


def _could_be_most(decisions: int, failed: list[Failed]) -> bool:
    """Whether one error could reach ``SAME_ERROR_SHARE``: only then do its actions matter."""
    if decisions < MIN_DECISIONS:
        return False
    totals: dict[str, int] = {}
    for _, fallback, error, count in failed:
        if not fallback:
            key = normalise_error(error)
            totals[key] = totals.get(key, 0) + count
    return max(totals.values(), default=0) >= SAME_ERROR_SHARE * decisions


@dataclass(frozen=True, slots=True)
class _Source:
    """How the decisions of one trace are asked for (SQL, or rows of an older trace's frame).

    Attributes:
        agent_ids: The run's agents, in agent index order.
        decisions: Every decision (``steps.n_actions`` summed).
        full: Every step holds one decision of every agent (a stepped run).
        steps: How many steps the trace has.
        failed: The failed decisions, grouped (``Failed``).
        succeeded: Reads the (agent_id, action) pairs of some successful decision.
        per_agent: Reads each agent's decisions and whether one succeeded.
    """

    agent_ids: list[str]
    decisions: int
    full: bool
    steps: int
    failed: list[Failed]
    succeeded: Callable[[], set[tuple[str, str | None]]]
    per_agent: Callable[[], dict[str, tuple[int, bool]]]


def _stats(src: _Source) -> DecisionStats:
    """The rules' numbers; the two extra reads only when a rule needs them (see the module)."""
    decisions, agents, failed = src.decisions, len(src.agent_ids), src.failed
    failures = sum(f[3] for f in failed)
    successes = decisions - failures
    p = successes / decisions if decisions else 0.0
    want_actions = successes > 0 and _could_be_most(decisions, failed)
    if src.full:  # every agent made ``steps`` decisions: can one without a success be flagged?
        want_agents = successes > 0 and failures > 0 and agent_flagged(agents, p, src.steps)
    else:  # each agent its own count; one may never have decided, failures or not
        want_agents = successes > 0 and (failures > 0 or decisions >= AGENT_MIN_DECISIONS * agents)
    never: set[str | None] | None = None if successes == 0 else set()
    inactive: tuple[InactiveAgent, ...] = ()
    if want_actions or (want_agents and src.full):
        pairs = src.succeeded()
        if want_actions:
            accepted = {action for _, action in pairs}
            never = {f[0] for f in failed if f[0] not in accepted}
        if want_agents and src.full:
            acted = {agent for agent, _ in pairs}
            inactive = tuple(InactiveAgent(a, src.steps) for a in src.agent_ids if a not in acted)
    if want_agents and not src.full:  # an autonomous run: each agent's own count
        per = src.per_agent()
        inactive = tuple(
            InactiveAgent(a, per.get(a, (0, False))[0])
            for a in src.agent_ids
            if not per.get(a, (0, False))[1]
        )
    unknown = [f for f in failed if not f[1] and str(f[2] or "").startswith(UNKNOWN_ACTION)]
    raised = [f for f in failed if not f[1] and str(f[2] or "").startswith(WORLD_ERROR)]
    return DecisionStats(
        decisions=decisions,
        failures=failures,
        fallbacks=sum(f[3] for f in failed if f[1]),
        failed_fallbacks=sum(
            f[3] for f in failed if f[1] and str(f[2] or "").startswith(FAILURE_REASONS)
        ),
        world_errors=sum(f[3] for f in raised),
        world_example=_commonest(raised),
        unknown_actions=sum(f[3] for f in unknown),
        unknown_example=_commonest(unknown),
        common_error=_common_error(failed, never, want_actions or successes == 0),
        agents=agents,
        inactive=inactive,
    )


def _steps_shape(con: sqlite3.Connection, agents: int) -> tuple[int, bool, int]:
    """(decisions, full, steps) from the steps table."""
    decisions, steps, low, high = con.execute(
        "SELECT COALESCE(SUM(n_actions), 0), count(*), min(n_actions), max(n_actions) FROM steps"
    ).fetchone()
    return int(decisions), bool(steps) and low == high == agents, int(steps)


def decision_stats(con: sqlite3.Connection) -> DecisionStats:
    """What the health rules need of a schema-3 trace's decisions, from aggregate queries.

    ``steps`` gives the count. When the trace's ``decision_columns_filled`` meta says no row
    ever wrote ``success`` or ``fallback``, every decision succeeded: no decision is read.
    Otherwise one ``GROUP BY`` over the failed decisions gives the fallbacks, world errors and
    errors; and only when a rule needs them, one ``DISTINCT`` scan gives the actions and agents
    that succeeded (in a run of full steps every agent decided once per step, so its count is
    the steps': no count per agent), or, in an autonomous run, one ``GROUP BY`` the agents'.
    """
    from vivarium.trace.db import listed_filled

    ids = [row[0] for row in con.execute("SELECT agent_id FROM agents ORDER BY agent_idx")]
    decisions, full, steps = _steps_shape(con, len(ids))
    filled = listed_filled(con)
    failed: list[Failed] = []
    if decisions and (filled is None or filled & {"success", "fallback"}):
        failed = [
            (action, bool(fallback), error, count)
            for action, fallback, error, count in con.execute(
                "SELECT action, fallback, error, count(*) FROM decisions WHERE success = 0 "
                "GROUP BY action, fallback, error"
            )
        ]

    def succeeded() -> set[tuple[str, str | None]]:
        rows = con.execute("SELECT DISTINCT agent_idx, action FROM decisions WHERE success = 1")
        return {(ids[idx], action) for idx, action in rows}

    def per_agent() -> dict[str, tuple[int, bool]]:
        rows = con.execute(
            "SELECT agent_idx, count(*), max(success) FROM decisions GROUP BY agent_idx"
        )
        return {ids[idx]: (count, bool(best)) for idx, count, best in rows}

    return _stats(_Source(ids, decisions, full, steps, failed, succeeded, per_agent))


def _stats_of_frame(p: Path, full: bool, steps: int) -> DecisionStats:
    """``DecisionStats`` of a trace of schema 1 or 2, read through its actions frame."""
    from vivarium.trace.frames import read_arrow

    actions = read_arrow(p, "actions")
    ids = [str(a) for a in read_arrow(p, "agents").column("agent_id").to_pylist()]
    names = ("agent_id", "action", "success", "fallback", "error")
    rows = list(zip(*(actions.column(c).to_pylist() for c in names), strict=True))
    grouped: dict[tuple[str | None, bool, str | None], int] = {}
    for _, action, success, fallback, error in rows:
        if not success:
            key = (action, bool(fallback), error)
            grouped[key] = grouped.get(key, 0) + 1
    failed = [(*key, count) for key, count in grouped.items()]

    def per_agent() -> dict[str, tuple[int, bool]]:
        out: dict[str, tuple[int, bool]] = {}
        for agent, _, success, _, _ in rows:
            count, best = out.get(agent, (0, False))
            out[agent] = (count + 1, best or bool(success))
        return out

    def succeeded() -> set[tuple[str, str | None]]:
        return {(agent, action) for agent, action, success, _, _ in rows if success}

    return _stats(_Source(ids, len(rows), full, steps, failed, succeeded, per_agent))


def run_health(path: str | os.PathLike[str]) -> RunHealth:
    """The health of the run in the trace at ``path``."""
    from vivarium.trace.db import TraceDb

    p = Path(path)
    con = TraceDb.connect_readonly(p)
    stats: DecisionStats | None = None
    try:
        status, steps, steps_done, error = con.execute(
            "SELECT status, steps, steps_done, error FROM runs"
        ).fetchone()
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'decisions'").fetchone():
            stats = decision_stats(con)
        else:  # schema 1 and 2: the decisions are read through the frames, below
            agents = con.execute("SELECT count(*) FROM agents").fetchone()[0]
            _, full, n_steps = _steps_shape(con, agents)
        calls, failed = con.execute("SELECT count(*), count(error) FROM llm_calls").fetchone()
        last = con.execute(
            "SELECT error FROM llm_calls WHERE error IS NOT NULL ORDER BY id DESC LIMIT 1"
        ).fetchone()
        notes = _history(con, status)
    except (sqlite3.Error, TypeError) as exc:
        raise TraceError(f"cannot read the run's health from {p}: {exc}") from None
    finally:
        con.close()
    if stats is None:  # schema 1 and 2: derived as the frames derive them
        stats = _stats_of_frame(p, full, n_steps)
    last_error = last[0] if last else None
    writing = False
    if status != "complete":
        from vivarium.trace.onefile import writer_alive

        writing = writer_alive(p)
    problems = problems_of(
        status,
        int(steps_done),
        int(steps),
        error,
        stats,
        int(calls),
        int(failed),
        last_error,
        writing=writing,
    )
    return RunHealth(
        ok=not problems,
        problems=problems,
        status=status,
        steps_done=int(steps_done),
        steps=int(steps),
        decisions=stats.decisions,
        fallbacks=stats.fallbacks,
        failed_fallbacks=stats.failed_fallbacks,
        llm_calls=int(calls),
        llm_errors=int(failed),
        last_llm_error=last_error,
        failures=stats.failures,
        world_errors=stats.world_errors,
        unknown_actions=stats.unknown_actions,
        common_error=stats.common_error,
        inactive_agents=stats.inactive,
        notes=notes,
    )


def _history(con: sqlite3.Connection, status: str) -> tuple[str, ...]:
    """The run's history as notes: its interruptions (``vivarium.trace.interruptions``)."""
    from vivarium.trace.interruptions import describe, read_interruptions

    line = describe(read_interruptions(con), status)
    return () if line is None else (line,)
