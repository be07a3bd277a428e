"""Run health: whether a trace is a result to trust, in one line per problem.

A run can end without an exception and still not be a result: every LLM call failed, most
decisions fell back to ``noop``, decisions fell back because a call or a policy failed, or it
stopped before its last step. A few fallbacks that are the agents' own (a reply that could not
be parsed, a workflow state with nothing to do) are behaviour, counted but not a problem: a
warning on every such run would teach people to ignore the warning. ``run_health`` reads
what the trace recorded (a few aggregate queries, no frames) and names each such problem, so a
notebook, the CLI and the control panel all say the same thing.

The shape (a stable contract, shown by ``repr(run)``, ``run._repr_html_()``, ``run.summary()``,
the CLI and the panel):

- ``ok``: True when ``problems`` is empty;
- ``problems``: one line each, in this order: how the run ended when it did not complete
  (interrupted / failed / not finished), every LLM call failed, fallbacks that are failures
  (an LLM call or the policy failed: ``FAILURE_REASONS``), most decisions were fallbacks;
- ``status``, ``steps_done``, ``steps``, ``decisions``, ``fallbacks``, ``llm_calls``,
  ``llm_errors``, ``last_llm_error``: the numbers behind them.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from vivarium.errors import TraceError, squash

# Fallback reasons that say something failed rather than that the agent did something odd: an
# LLM call that failed (recorded under ``on_llm_error="fallback"``), a policy that raised or
# returned no request, a decision that timed out.
FAILURE_REASONS = ("llm error: ", "policy error: ", "no decision: ", "policy returned ")


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

    @property
    def fallback_rate(self) -> float:
        """Share of decisions that fell back (0.0 for a run without decisions)."""
        return self.fallbacks / self.decisions if self.decisions else 0.0

    def __str__(self) -> str:
        """``ok``, or the problems joined by ``; `` (one line)."""
        return "ok" if self.ok else "; ".join(self.problems)


def _problems(
    status: str,
    steps_done: int,
    steps: int,
    error: str | None,
    decisions: int,
    fallbacks: int,
    failed_fallbacks: int,
    llm_calls: int,
    llm_errors: int,
    last_error: str | None,
) -> tuple[str, ...]:
    out = []
    why = f": {squash(error, 200)}" if error else ""
    if status == "interrupted":
        out.append(
            f"interrupted after {steps_done} of {steps} steps{why} (resume with run.resume())"
        )
    elif status == "failed":
        out.append(f"failed after {steps_done} of {steps} steps{why}")
    elif status != "complete":
        out.append(
            f"not finished ({status}): {steps_done} of {steps} steps committed "
            "(resume with run.resume())"
        )
    if llm_calls and llm_errors == llm_calls:
        last = f"; the last: {squash(last_error, 200)}" if last_error else ""
        out.append(f"every LLM call failed ({llm_errors} of {llm_calls}){last}")
    if failed_fallbacks or (decisions and 2 * fallbacks >= decisions):
        failed = f", {failed_fallbacks} of them failures" if failed_fallbacks else ""
        out.append(
            f"{fallbacks} of {decisions} decisions were fallbacks{failed} "
            "(no usable action; the reasons are in actions.error)"
        )
    return tuple(out)


def run_health(path: str | os.PathLike[str]) -> RunHealth:
    """The health of the run in the trace at ``path``."""
    from vivarium.trace.db import TraceDb

    p = Path(path)
    con = TraceDb.connect_readonly(p)
    try:
        status, steps, steps_done, error = con.execute(
            "SELECT status, steps, steps_done, error FROM runs"
        ).fetchone()
        decisions = con.execute("SELECT COALESCE(SUM(n_actions), 0) FROM steps").fetchone()[0]
        columns = {row[1] for row in con.execute("PRAGMA table_info(steps)")}
        fallbacks = failed_fallbacks = None
        if "agent_idx" not in columns:  # schema 3: the decisions table
            fallbacks, failed_fallbacks = con.execute(
                "SELECT COALESCE(SUM(fallback), 0), COALESCE(SUM(fallback AND ("
                + " OR ".join(["error LIKE ?"] * len(FAILURE_REASONS))
                + ")), 0) FROM decisions WHERE fallback",
                [reason + "%" for reason in FAILURE_REASONS],
            ).fetchone()
        elif "fallback" in columns:  # schema 2: only steps with a fallback hold the array
            fallbacks, failed_fallbacks = con.execute(
                "SELECT COALESCE(SUM(j.value), 0), COALESCE(SUM(j.value AND ("
                + " OR ".join(["json_extract(s.error, '$[' || j.key || ']') LIKE ?"] * 4)
                + ")), 0) FROM steps AS s, json_each(s.fallback) AS j "
                "WHERE s.fallback IS NOT NULL",
                [reason + "%" for reason in FAILURE_REASONS],
            ).fetchone()
        calls, failed = con.execute("SELECT count(*), count(error) FROM llm_calls").fetchone()
        last = con.execute(
            "SELECT error FROM llm_calls WHERE error IS NOT NULL ORDER BY id DESC LIMIT 1"
        ).fetchone()
    except (sqlite3.Error, TypeError) as exc:
        raise TraceError(f"cannot read the run's health from {p}: {exc}") from None
    finally:
        con.close()
    if fallbacks is None:  # schema 1: derived as the frames derive it
        from vivarium.trace.frames import read_arrow

        actions = read_arrow(p, "actions").to_pylist()
        fell = [row for row in actions if row["fallback"]]
        fallbacks = len(fell)
        failed_fallbacks = sum(str(row["error"] or "").startswith(FAILURE_REASONS) for row in fell)
    last_error = last[0] if last else None
    problems = _problems(
        status,
        int(steps_done),
        int(steps),
        error,
        int(decisions),
        int(fallbacks),
        int(failed_fallbacks),
        int(calls),
        int(failed),
        last_error,
    )
    return RunHealth(
        ok=not problems,
        problems=problems,
        status=status,
        steps_done=int(steps_done),
        steps=int(steps),
        decisions=int(decisions),
        fallbacks=int(fallbacks),
        failed_fallbacks=int(failed_fallbacks),
        llm_calls=int(calls),
        llm_errors=int(failed),
        last_llm_error=last_error,
    )
