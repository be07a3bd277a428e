"""What a trace holds for resuming its run: checkpoints, recorded hashes and calls, settings.

A run that stopped (killed, Ctrl-C, an LLM outage) is finished in place so that its trace is
the run's as if never stopped (``vivarium.experiment.runner.resume_run``): from the latest usable
checkpoint (or the start), its committed steps are re-executed, each checked against the state
hash it recorded (``recorded_hashes``; ``step_difference`` says what differs when one is not),
with their LLM calls answered from the trace's own rows (``recorded_calls``), and it goes on
with the LLM settings it recorded. This module is the trace's side of that: it reads (and
records) those facts in the trace file and knows nothing of configs or engines, which belong to
``vivarium.experiment.runner``.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from vivarium.errors import TraceError
from vivarium.seeding import canonical_json
from vivarium.trace.db import TraceDb, read_meta

LLM_SETTINGS_KEY = "llm_settings"
"""The ``meta`` key under which a trace keeps how its LLM calls were made."""

# The checkpoints before the first step not done whose state hash is the one recorded for
# their step (a checkpoint written by a step that was later rolled back does not match it),
# newest first.
_CHECKPOINTS_SQL = (
    "SELECT c.step, c.state_hash, c.world_state, c.agent_states FROM checkpoints c "
    "JOIN steps s ON s.step = c.step AND s.state_hash = c.state_hash "
    "WHERE c.step < ? ORDER BY c.step DESC"
)


class Checkpoint(NamedTuple):
    """A checkpoint row of a trace: the state after ``step``, as recorded (JSON text)."""

    step: int
    state_hash: str
    world_state: str
    agent_states: str


class HasMetadata(Protocol):
    """Anything holding a run record as a mapping (a ``Run``)."""

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The trace's run record (``status``, ``steps``, ``steps_done``, ...)."""
        ...


def is_complete(run: HasMetadata) -> bool:
    """Whether the run finished every step (a resume has nothing to do).

    Args:
        run: A run read from its trace (anything with its run record as ``metadata``).

    Returns:
        True when the run's status is ``complete`` and every step it planned is done.
    """
    meta = run.metadata
    return bool(meta["status"] == "complete" and meta["steps_done"] >= meta["steps"])


def usable_checkpoints(path: str | os.PathLike[str], steps_done: int) -> list[Checkpoint]:
    """The checkpoints a resume may start from, newest first.

    Only those before the first step not done whose state hash is the one their step
    recorded: a checkpoint written by a step that was later rolled back does not match it.

    Args:
        path: The trace file.
        steps_done: The steps the run record counts as done; later checkpoints are ignored.

    Raises:
        TraceError: The checkpoints cannot be read (one line naming the file).
    """
    p = Path(path)
    con = TraceDb.connect_readonly(p)
    try:
        rows = con.execute(_CHECKPOINTS_SQL, (steps_done,)).fetchall()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read checkpoints in {p}: {exc}") from None
    finally:
        con.close()
    return [Checkpoint(*row) for row in rows]


def recorded_hashes(path: str | os.PathLike[str], first: int, stop: int) -> list[str]:
    """The state hash each step from ``first`` to ``stop - 1`` recorded, in step order.

    Raises:
        TraceError: The steps cannot be read, or one of them is missing (the trace is
            damaged: ``vvm validate`` says where).
    """
    p = Path(path)
    con = TraceDb.connect_readonly(p)
    try:
        rows = con.execute(
            "SELECT step, state_hash FROM steps WHERE step >= ? AND step < ? ORDER BY step",
            (first, stop),
        ).fetchall()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read the steps of {p}: {exc}") from None
    finally:
        con.close()
    if [step for step, _ in rows] != list(range(first, stop)):
        raise TraceError(
            f"{p}: steps {first}..{stop - 1} are not all recorded; the trace is damaged "
            "(see `vvm validate`)"
        )
    return [state_hash for _, state_hash in rows]


# The fields of ``vivarium.gateways.recorded.CallRow``, in its order, then step and agent.
_CALL_ROWS_SQL = (
    "SELECT attempt, model, request_hash, prompt_tokens, completion_tokens, cost, latency_ms, "
    "cache_hit, finish_reason, error, params, reply, step, agent_idx FROM llm_calls "
    "WHERE step >= ? AND step < ? ORDER BY id"
)
_CHUNK = 2048  # rows read at a time: a long run's calls are never all in memory


def recorded_calls(
    path: str | os.PathLike[str], first: int, stop: int
) -> Iterator[tuple[int, dict[int, list[tuple[Any, ...]]]]]:
    """The LLM calls steps ``first`` to ``stop - 1`` recorded, one step at a time.

    Each row holds the fields of ``vivarium.gateways.recorded.CallRow`` (the parameters and
    the reply decoded from ``llm_texts``), so a resume can answer the calls of the steps it
    re-executes as they were answered. The file is read as the steps are asked for (a run's
    rows lie in step order), and the connection closes with the generator.

    Args:
        path: The trace file.
        first: The first step.
        stop: The step after the last.

    Yields:
        (step, agent index -> that decision's attempts, in call order), for each step with
        calls, in step order.

    Raises:
        TraceError: The calls cannot be read.
    """
    from vivarium.trace.db import check_trace_file
    from vivarium.trace.onefile import read_connection

    p = check_trace_file(path)
    # Read on whichever thread a decision asks from (async ones: the event loop's), and
    # closed by the resume once the re-execution is over (it holds back the WAL till then).
    con = read_connection(p, check_same_thread=False)
    try:
        con.execute("BEGIN")  # one snapshot
        cursor = con.execute(_CALL_ROWS_SQL, (first, stop))
        step: int | None = None
        group: dict[int, list[tuple[Any, ...]]] = {}
        while rows := cursor.fetchmany(_CHUNK):
            texts = _texts(con, {row[11] for row in rows if row[11] is not None})
            for *fields, params, reply, at, agent in rows:
                if at != step:
                    if step is not None:
                        yield step, group
                    step, group = at, {}
                decoded = (
                    *fields,
                    json.loads(params) if params else None,
                    None if reply is None else texts.get(reply),
                )
                group.setdefault(agent, []).append(decoded)
        if step is not None:
            yield step, group
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read the LLM calls of {p}: {exc}") from None
    finally:
        con.close()


def _texts(con: sqlite3.Connection, ids: set[int]) -> dict[int, Any]:
    """The decoded ``llm_texts`` of ``ids`` (read in chunks: SQLite limits a query's variables)."""
    wanted, found = sorted(ids), {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ",".join("?" * len(chunk))
        query = f"SELECT id, body FROM llm_texts WHERE id IN ({marks})"  # noqa: S608
        found.update((i, json.loads(body)) for i, body in con.execute(query, chunk))
    return found


def step_difference(path: str | os.PathLike[str], record: Any) -> str:
    """What differs between a step re-executed by a resume and the same step as recorded.

    Args:
        path: The trace file.
        record: The re-executed step (a ``StepRecord``).

    Returns:
        One clause naming the step and the first difference: a decision (whose, which
        action and arguments now and then), the messages, the transitions, the world's
        state, or the clock.
    """
    from vivarium.trace.records import ACTION_COLUMNS
    from vivarium.trace.schema import SEQ_BITS

    t = record.step
    con = TraceDb.connect_readonly(path)
    try:
        step = con.execute(
            "SELECT n_actions, n_messages, world_digest, clock FROM steps WHERE step = ?", (t,)
        ).fetchone()
        rows = con.execute(
            f"SELECT {', '.join(ACTION_COLUMNS)} FROM decisions "  # noqa: S608
            "WHERE id >= ? AND id < ? ORDER BY id",
            (t << SEQ_BITS, (t + 1) << SEQ_BITS),
        ).fetchall()
        names = dict(con.execute("SELECT agent_idx, agent_id FROM agents").fetchall())
    except sqlite3.Error as exc:
        return f"step {t} differs from the record (which cannot be read: {exc})"
    finally:
        con.close()
    if step is None:
        return f"step {t} is not in the trace"
    n_actions, n_messages, world_digest, clock = step
    now = list(zip(*record.decision_columns(), strict=True))
    if len(now) != n_actions:
        return f"step {t} took {len(now)} decisions, the trace recorded {n_actions}"
    for seq, (was, new) in enumerate(zip(rows, now, strict=True)):
        for name, a, b in zip(ACTION_COLUMNS, was, new, strict=True):
            if name == "fallback":
                a, b = a or 0, b or 0
            if name == "success":
                a, b = int(a if a is not None else 1), int(b)
            if a != b:
                who = names.get(new[0], f"agent {new[0]}")
                return (
                    f"at step {t} the decision of {who} (#{seq}) differs in its {name}: "
                    f"now {_clip(b)}, recorded {_clip(a)}"
                )
    if len(record.messages) != n_messages:
        return f"step {t} posted {len(record.messages)} messages, the trace recorded {n_messages}"
    if record.world_digest != world_digest:
        return (
            f"at step {t} the decisions are the recorded ones, but the world's state after "
            "them differs"
        )
    if record.clock != clock:
        return f"step {t} ran at clock {record.clock}, the trace recorded {clock}"
    return f"step {t}'s messages or transitions differ from the recorded ones"


def _clip(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def record_llm_settings(trace: TraceDb, settings: Mapping[str, Any] | None) -> None:
    """Keep how a run's LLM calls are made in the trace's ``meta`` table, for a resume.

    The meta table is in every trace, so this needs no new schema, and it stays out of the
    recorded config, whose digest is the run id.

    Args:
        trace: The trace being written.
        settings: The LLM settings (never the API key); None for a run without LLM agents,
            which records nothing.
    """
    if settings is not None:
        trace.set_meta(LLM_SETTINGS_KEY, canonical_json(dict(settings)))


def recorded_llm_settings(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The LLM settings a trace recorded.

    Args:
        path: The trace file.

    Returns:
        The settings, empty for a run without LLM agents or an older trace that did not
        record them.

    Raises:
        TraceError: The file is not a readable trace.
    """
    text = read_meta(path, LLM_SETTINGS_KEY)
    return {} if text is None else dict(json.loads(text))
