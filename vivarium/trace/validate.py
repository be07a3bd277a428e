"""``vvm validate``: is a trace complete, and has anything in it changed since it was written?

A trace may be validated while its run writes it: every check reads one snapshot of the file
(``TraceDb.connect_readonly``), so the steps committed so far are checked as they are, and the
report says ``running`` instead of ``incomplete`` while a process still writes the file (its
writer's lock, ``vivarium.trace.onefile.writer_alive``), a resume re-executing its committed
steps included. A run that says ``running`` but that no process writes any more (killed) is
``incomplete``: resumable.

The check reads every decision once: SQLite builds each step's column arrays (one range scan
of the key per step, ``json_group_array`` once per column) and Python hashes them in a chain.
A finished trace of ``SPLIT_FROM`` decisions or more is read in two halves at once, on two
connections that must read one snapshot (``_read_halves``): on two cores, about half the time.
"""

from __future__ import annotations

import itertools
import json
import operator
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from vivarium.errors import TraceError
from vivarium.trace.db import TraceDb, listed_filled
from vivarium.trace.onefile import writer_alive
from vivarium.trace.records import (
    ACTION_COLUMNS,
    GENESIS_HASH,
    chain_hash,
    encode_column,
    encode_fallback,
)
from vivarium.trace.schema import SEQ_BITS, SEQ_MASK


@dataclass
class ValidationReport:
    """What ``validate_trace`` found: ``status`` and one line per problem.

    Attributes:
        path: The trace checked.
        status: ``ok``, ``incomplete`` (the run stopped early), ``running`` (a process is
            writing it now: the steps committed so far are intact) or ``corrupt`` (changed
            since it was written).
        run_id: The run's id (None when there is no run record).
        steps_expected: Steps the run asked for.
        steps_found: Steps in the file.
        agents: Agents in the file.
        actions: Decisions in the file.
        problems: What is wrong, one line each.
        notes: What is worth knowing and no problem, one line each: the run's interruptions
            (``resumed after 2 interruptions (steps 4, 9)``; ``vivarium.trace.interruptions``).
    """

    path: Path
    status: str = "ok"  # ok | incomplete | running | corrupt
    run_id: str | None = None
    steps_expected: int = 0
    steps_found: int = 0
    agents: int = 0
    actions: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the trace is complete and unchanged."""
        return self.status == "ok"

    def lines(self) -> list[str]:
        """The report as ``vvm validate`` prints it: a head line, then the problems."""
        head = (
            f"{self.status.upper()}: {self.path} run={self.run_id} "
            f"steps={self.steps_found}/{self.steps_expected} agents={self.agents} "
            f"actions={self.actions}"
        )
        return [head, *(f"  - {p}" for p in self.problems), *(f"  * {n}" for n in self.notes)]


def validate_trace(path: str | Path) -> ValidationReport:
    """Check the run row, step numbering, row counts and the state-hash chain (one snapshot)."""
    report = ValidationReport(Path(path))
    # Asked before the snapshot is read: a run that ends meanwhile is then complete in it.
    live = writer_alive(path)
    con = TraceDb.connect_readonly(path)
    try:
        _check(con, report, live)
        _check_history(con, report)
    except sqlite3.DatabaseError as exc:
        report.status = "corrupt"
        report.problems.append(f"SQLite error: {exc}")
    finally:
        con.close()
    return report


def _check_history(con: sqlite3.Connection, report: ValidationReport) -> None:
    """Say the run's interruptions: a note, never a problem (history, outside the hash chain)."""
    from vivarium.trace.interruptions import describe, read_interruptions

    row = con.execute("SELECT status FROM runs").fetchone()
    note = describe(read_interruptions(con), row[0] if row else "")
    if note is not None:
        report.notes.append(note)


_EMPTY = (None,) * len(ACTION_COLUMNS)  # a step without decisions
_UNWRITTEN = ("\x00 a value the writer never stores",) * len(ACTION_COLUMNS)


@dataclass
class _Decisions:
    """Each step's decision columns as the state hash covers them, and how they were read.

    Attributes:
        encoded: Step -> its columns encoded (``StepRecord.encode``'s form).
        counts: Step -> how many decision rows it has.
        by_sql: Whether SQLite encoded them (``json_group_array``), not Python. SQLite's JSON
            is the writer's for integers, text and nulls, and may differ for a value the writer
            never stores (a float, a blob); a step whose hash does not match is read again the
            writer's way (``_exact_step``) before it is called corrupt, so the check is exactly
            as strong, and as fast as SQLite where nothing differs.
        filled: The decision columns some row may fill (``success``/``fallback``: not the
            default), as told from their arrays: a superset (see ``_check_filled``).
    """

    encoded: dict[int, tuple[str | None, ...]]
    counts: dict[int, int]
    by_sql: bool
    filled: set[str]


def _aggregates() -> str:
    """The aggregates of one step's decision rows: count, places, each column's array.

    Every column is one ``json_group_array``, whatever it holds: a column left empty (all
    NULL), a fallback column of zeros and a success column of ones are told from their arrays
    (``_Shapes``), not by a second aggregate over the same rows, which costs as much again.
    """
    parts = ["count(*)", f"min(id & {SEQ_MASK})", f"max(id & {SEQ_MASK})"]
    parts += [f"json_group_array({name})" for name in ACTION_COLUMNS]
    return f"SELECT {', '.join(parts)} FROM decisions WHERE id BETWEEN ? AND ?"  # noqa: S608


class _Shapes:
    """The arrays SQLite gives a column of ``n`` rows all NULL, all 0 or all 1 (one per n).

    Exact: ``json_group_array`` writes NULL as ``null`` and integers in decimal, and a text
    value as a quoted JSON string (``"null"``, ``"0"``), so an array equals one of these only
    when every row holds that value.
    """

    def __init__(self) -> None:
        self._made: dict[tuple[str, int], str] = {}

    def of(self, item: str, n: int) -> str:
        made = self._made.get((item, n))
        if made is None:
            made = self._made[(item, n)] = "[" + ",".join([item] * n) + "]"
        return made


def _decisions(con: sqlite3.Connection, report: ValidationReport, live: bool) -> _Decisions:
    """The decisions of every step, encoded by SQLite (else row by row in Python).

    One range scan of the table's key per step, in key order, so the arrays come in commit
    order; rows under a step the steps table does not have are found by their count. A large
    trace no run writes is read in two halves at once, each on a connection of its own
    (``_read_halves``): SQLite releases the GIL while it reads, so two cores read it in about
    half the time.
    """
    steps = [step for (step,) in con.execute("SELECT step FROM steps ORDER BY step")]
    try:
        halves = None if live else _read_halves(con, report.path, steps)
        rows = halves if halves is not None else _step_arrays(con, steps)
    except sqlite3.Error:  # a value JSON cannot hold (a blob): the writer's way, row by row
        return _decisions_in_python(con, report)
    encoded: dict[int, tuple[str | None, ...]] = {}
    counts: dict[int, int] = {}
    filled: set[str] = set()
    shapes = _Shapes()
    for step, n, first, last, *arrays in rows:
        if (first, last) != (0, n - 1):  # ids are unique: n places from 0 to n-1 are 0..n-1
            _corrupt(report, f"step {step}: decisions are not numbered 0..n-1 in commit order")
        nulls = shapes.of("null", n)
        *texts, fallback = arrays
        columns = [None if text == nulls else text for text in texts]
        columns.append(None if fallback == shapes.of("0", n) else fallback)
        encoded[step] = tuple(columns)
        counts[step] = n
        for name, text in zip(ACTION_COLUMNS, columns, strict=True):
            if name == "success":  # never null: filled when some row is not 1
                if text != shapes.of("1", n):
                    filled.add(name)
            elif text is not None:
                filled.add(name)
    if sum(counts.values()) != con.execute("SELECT count(*) FROM decisions").fetchone()[0]:
        strays = con.execute(
            f"SELECT DISTINCT id >> {SEQ_BITS} FROM decisions "  # noqa: S608
            f"WHERE id >> {SEQ_BITS} NOT IN (SELECT step FROM steps)"
        ).fetchall()
        encoded.update((step, _EMPTY) for (step,) in strays)  # said as not in steps
    return _Decisions(encoded, counts, True, filled)


_Arrays = list[tuple[object, ...]]  # (step, n, first, last, *one array per column) per step

SPLIT_FROM = 200_000
"""Decisions from which a trace no run writes is read in two halves at once (below, the
second connection costs more than it saves)."""


def _step_arrays(con: sqlite3.Connection, steps: list[int]) -> _Arrays:
    """``_aggregates`` for each of ``steps`` that has decisions, in order."""
    query = _aggregates()
    out: _Arrays = []
    for step in steps:
        low = step << SEQ_BITS
        n, *rest = con.execute(query, (low, low | SEQ_MASK)).fetchone()
        if n:
            out.append((step, n, *rest))
    return out


def _snapshot_mark(con: sqlite3.Connection) -> tuple[object, ...]:
    """What tells two snapshots of one trace apart: the run row, the steps and the rows."""
    return (
        con.execute("SELECT status, steps_done FROM runs").fetchall(),
        con.execute(
            "SELECT count(*), max(step), (SELECT state_hash FROM steps ORDER BY step DESC LIMIT 1)"
            " FROM steps"
        ).fetchone(),
        con.execute("SELECT max(id) FROM decisions").fetchone(),
    )


def _read_halves(con: sqlite3.Connection, path: Path, steps: list[int]) -> _Arrays | None:
    """``_step_arrays`` of every step, the later half read at once on a second connection.

    None when the trace is small, or when the second connection did not read the snapshot
    this one reads (a run began writing the file meanwhile): the caller then reads every
    step on this one, one snapshot.
    """
    if len(steps) < 2:
        return None
    low = steps[0] << SEQ_BITS
    first_step = con.execute(
        "SELECT count(*) FROM decisions WHERE id BETWEEN ? AND ?", (low, low | SEQ_MASK)
    ).fetchone()[0]
    if first_step * len(steps) < SPLIT_FROM:  # a run's steps are about the same size
        return None
    from concurrent.futures import ThreadPoolExecutor

    middle = len(steps) // 2
    mine = _snapshot_mark(con)

    def later() -> tuple[tuple[object, ...] | None, _Arrays]:
        try:
            other = TraceDb.connect_readonly(path)
        except TraceError:  # the file was moved or replaced meanwhile: not this snapshot
            return None, []
        try:
            return _snapshot_mark(other), _step_arrays(other, steps[middle:])
        finally:
            other.close()

    with ThreadPoolExecutor(1, thread_name_prefix="vivarium-validate") as pool:
        second = pool.submit(later)
        first = _step_arrays(con, steps[:middle])
        theirs, rest = second.result()
    return first + rest if theirs == mine else None


def _decisions_in_python(con: sqlite3.Connection, report: ValidationReport) -> _Decisions:
    """Each step's decision columns encoded as the writer did (``StepRecord.encode``)."""
    names = ", ".join(ACTION_COLUMNS)
    encoded: dict[int, tuple[str | None, ...]] = {}
    counts: dict[int, int] = {}
    filled: set[str] = set()
    rows = con.execute(
        f"SELECT id >> {SEQ_BITS}, id & {SEQ_MASK}, {names} FROM decisions ORDER BY id"  # noqa: S608
    )
    for step, group in itertools.groupby(rows, key=operator.itemgetter(0)):
        decided = list(group)
        if [row[1] for row in decided] != list(range(len(decided))):
            _corrupt(report, f"step {step}: decisions are not numbered 0..n-1 in commit order")
        encoded[step] = _encode_rows(decided)
        counts[step] = len(decided)
        filled.update(_filled_by(decided))
    return _Decisions(encoded, counts, False, filled)


def _encode_rows(decided: list[tuple[object, ...]]) -> tuple[str | None, ...]:
    """The columns of one step's rows (``(step, seq, *ACTION_COLUMNS)`` each), encoded.

    A value the writer never stores (a blob put there by hand) encodes as ``_UNWRITTEN``, which
    matches no hash: the step is reported as changed, not as a traceback.
    """
    *columns, fallback = [list(column) for column in zip(*decided, strict=True)][2:]
    try:
        return (*(encode_column(c) for c in columns), encode_fallback(fallback))
    except (TypeError, ValueError):
        return _UNWRITTEN


def _filled_by(decided: list[tuple[object, ...]]) -> set[str]:
    usual = {"success": 1, "fallback": 0}
    return {
        name
        for i, name in enumerate(ACTION_COLUMNS, start=2)
        if any(row[i] != usual[name] if name in usual else row[i] is not None for row in decided)
    }


def _exact_step(con: sqlite3.Connection, step: int) -> tuple[str | None, ...]:
    """One step's decision columns read again and encoded the writer's way."""
    names = ", ".join(ACTION_COLUMNS)
    decided = con.execute(
        f"SELECT {step}, id & {SEQ_MASK}, {names} FROM decisions "  # noqa: S608
        "WHERE id BETWEEN ? AND ? ORDER BY id",
        (step << SEQ_BITS, (step << SEQ_BITS) | SEQ_MASK),
    ).fetchall()
    return _encode_rows(decided) if decided else _EMPTY


_USUAL = {"success": "success IS NOT 1", "fallback": "fallback IS NOT 0"}
"""What makes a row fill a column (the rest: not NULL)."""


def _check_filled(con: sqlite3.Connection, report: ValidationReport, filled: set[str]) -> None:
    """Every decision column a row fills is listed as filled (the frames read only those).

    ``filled`` may name more than the rows fill (told from arrays whose form SQLite may write
    otherwise, ``_Shapes``): a column the meta does not list is asked of the rows themselves.
    """
    listed = listed_filled(con)
    if listed is None:
        return  # not listed: the frames read every column
    for name in ACTION_COLUMNS:
        if name in listed or name not in filled:
            continue
        filling = _USUAL.get(name, f"{name} IS NOT NULL")
        if con.execute(f"SELECT 1 FROM decisions WHERE {filling} LIMIT 1").fetchone():  # noqa: S608
            _corrupt(report, f"decisions: column {name} has values the trace's meta does not list")


def _corrupt(report: ValidationReport, problem: str) -> None:
    report.status = "corrupt"
    report.problems.append(problem)


def _check(con: sqlite3.Connection, report: ValidationReport, live: bool = False) -> None:
    runs = con.execute(
        "SELECT run_id, steps, agents, status, steps_done, json_extract(config_json, '$.mode') "
        "FROM runs"
    ).fetchall()
    if not runs and live:
        report.status = "running"
        report.problems.append("no run record yet: the run writing it is starting")
        return
    if not runs:  # killed before its run record was committed: nothing to resume
        report.status = "incomplete"
        report.problems.append("no run record: the run never started (run it again)")
        return
    if len(runs) != 1:
        _corrupt(report, f"expected one runs row, found {len(runs)}")
    run_id, planned, n_agents, status, _done, mode = runs[0]

    report.run_id, report.steps_expected = run_id, planned
    report.agents = con.execute("SELECT count(*) FROM agents").fetchone()[0]
    if report.agents != n_agents:
        _corrupt(report, f"runs row says {n_agents} agents, agents table has {report.agents}")
    columns = {row[1] for row in con.execute("PRAGMA table_info(steps)")}
    decisions: _Decisions | None = None
    if "agent_idx" in columns:  # schema 2 and before: each step's decisions as JSON arrays
        fallback = "fallback" if "fallback" in columns else "NULL"  # schema 1 had no such column
        step_rows = con.execute(
            "SELECT step, n_actions, n_messages, world_digest, state_hash, clock, "
            f"agent_idx, action, arguments, reasoning, metadata, success, result, error, {fallback} "
            "FROM steps ORDER BY step"
        ).fetchall()
    else:  # the decisions table: each step's rows encoded as the hash covers them
        decisions = _decisions(con, report, live)
        _check_filled(con, report, decisions.filled)
        encoded = decisions.encoded
        step_rows = [
            (*row, *encoded.pop(row[0], _EMPTY))
            for row in con.execute(
                "SELECT step, n_actions, n_messages, world_digest, state_hash, clock "
                "FROM steps ORDER BY step"
            )
        ]
        if encoded:
            _corrupt(report, f"decisions of steps not in steps: {min(encoded)}..{max(encoded)}")
    report.steps_found = len(step_rows)
    steps = [r[0] for r in step_rows]
    if steps != list(range(len(steps))):
        _corrupt(report, "steps are not numbered 0..S-1 without gaps")

    messages: dict[int, list[tuple[int, str, str, str]]] = {}
    for rid, step, author, channel, content in con.execute(
        "SELECT id, step, author_id, channel, content FROM messages ORDER BY id"
    ):
        messages.setdefault(step, []).append(
            (rid & ((1 << SEQ_BITS) - 1), author, channel, content)
        )
    transitions: dict[int, list[tuple[object, ...]]] = {}
    moves = {row[1] for row in con.execute("PRAGMA table_info(transitions)")}
    routine = ", routine" if "routine" in moves else ""  # schema 1 had no such column
    for step, *row in con.execute(
        f"SELECT step, agent_idx, from_state, to_state, trigger{routine} "  # noqa: S608
        "FROM transitions ORDER BY id"
    ):
        transitions.setdefault(step, []).append(tuple(row))

    previous = GENESIS_HASH
    autonomous = mode == "autonomous"
    for step, n_actions, n_messages, world_digest, state_hash, clock, *encoded in step_rows:
        if n_actions != n_agents and not (autonomous and 0 < n_actions <= n_agents):
            _corrupt(report, f"step {step}: {n_actions} actions for {n_agents} agents")
        for name, text in zip(ACTION_COLUMNS, encoded, strict=True):
            if text is None:
                continue
            if decisions is not None:  # rows: each column holds one value per row
                length = decisions.counts.get(step, 0)
            else:  # schema 2 and before: a JSON array per column
                try:
                    length = len(json.loads(text))
                except ValueError:
                    length = -1
            if length != n_actions:
                _corrupt(report, f"step {step}: column {name} does not hold {n_actions} values")
        step_messages = messages.get(step, [])
        if len(step_messages) != n_messages:
            _corrupt(report, f"step {step}: {len(step_messages)} messages, expected {n_messages}")
        expected = chain_hash(
            previous,
            step,
            world_digest,
            n_actions,
            tuple(encoded),
            step_messages,
            transitions.get(step, []),
            clock,
        )
        if expected != state_hash and decisions is not None and decisions.by_sql:
            exact = _exact_step(con, step)  # SQLite's JSON may not be the writer's: ask Python
            expected = chain_hash(
                previous,
                step,
                world_digest,
                n_actions,
                exact,
                step_messages,
                transitions.get(step, []),
                clock,
            )
        if expected != state_hash:
            _corrupt(report, f"step {step}: state hash does not match its rows (chain broken here)")
            break
        previous = state_hash
        report.actions += n_actions
    _check_reporters(con, report, n_agents)
    if report.status == "ok" and status != "complete" and live:
        # A run writing, or a resume re-executing its committed steps (its status still says
        # how it stopped until its first new step is committed): either way not to resume.
        doing = "a running process" if status == "running" else "a resume under way"
        report.status = "running"
        report.problems.append(
            f"being written by {doing}: {report.steps_found} of {planned} steps "
            "committed so far, all intact (validate it again when the run ends)"
        )
    elif report.status == "ok" and (status != "complete" or report.steps_found < planned):
        report.status = "incomplete"
        gone = ", and no process is writing it (the run was killed)" if status == "running" else ""
        report.problems.append(
            f"run status is '{status}' with {report.steps_found} of {planned} steps "
            f"committed{gone} (resume it with `vvm resume`)"
        )


def _check_reporters(con: sqlite3.Connection, report: ValidationReport, n_agents: int) -> None:
    """Reporter rows (tables a run without reporters does not have) belong to recorded steps.

    Each is -1 (the state before step 0) or a step in the file, and an agent reporter holds one
    value per agent. They are not in the state hash: they are read from the world whose
    digest is.
    """
    from vivarium.trace.records import decode_agent_values
    from vivarium.trace.schema import REPORTER_TABLES

    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    last = report.steps_found - 1
    for declared in REPORTER_TABLES:
        if declared.name not in tables:
            continue
        stray = con.execute(
            f"SELECT min(step), max(step) FROM {declared.name} "  # noqa: S608
            "WHERE step < -1 OR step > ?",
            (last,),
        ).fetchone()
        if stray[0] is not None:
            _corrupt(report, f"{declared.name}: rows for steps {stray[0]}..{stray[1]} not in steps")
    if "agent_vars" in tables:
        for step, reporter, dtype, data in con.execute(
            "SELECT step, reporter, dtype, data FROM agent_vars"
        ):
            try:
                count = len(decode_agent_values(dtype, data))
            except (ValueError, TypeError):
                count = -1
            if count != n_agents:
                _corrupt(
                    report,
                    f"agent_vars: '{reporter}' at step {step} does not hold {n_agents} values",
                )
                break
