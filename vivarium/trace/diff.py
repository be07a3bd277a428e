"""Two runs compared: how their configs differ, where they first part, how many decisions differ.

``vvm diff A B`` and ``Run.diff`` read two traces (each through ``read_connection``, the second
attached read-only to the first) and say, in this order:

1. the config differences: every key of the recorded configs, flattened (``llm.temperature``),
   whose values differ, and whether the run ids do;
2. the first divergence: the first step at which anything recorded differs (its state hash,
   a decision, an LLM call or its reply, a message; or one run lacks it), and in it the first
   agent whose decision differs, with what differs first, in the order a decision is made: its
   prompt (the first message of the request it sent the model that differs, or the parameter),
   the reply, the action (and its arguments), the outcome (success, result, error); a step
   whose decisions are all the same differs in its ``messages``, else in the world's digest or
   what came before, said as ``state hash``. (What an agent observed is in its prompt; a
   policy without a model records no observation.)
3. how many decisions differ in all: rows of one run that the other lacks, or holds with any
   stored column different (one outer join on the decision's key).

Two runs are identical when none of that differs. A fork against its parent differs from its
fork step on (its config names the change and ``fork_of``); two runs of one config, none.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vivarium.errors import TraceError
from vivarium.trace.db import check_trace_file
from vivarium.trace.onefile import read_connection, read_uri
from vivarium.trace.records import ACTION_COLUMNS
from vivarium.trace.schema import SEQ_BITS, SEQ_MASK

__all__ = ["Divergence", "RunDiff", "diff_runs"]

_WHAT = ("prompt", "reply", "action", "outcome")


@dataclass(frozen=True)
class Divergence:
    """Where two runs first part.

    Attributes:
        step: The first step that differs.
        agent_id: The first agent (in commit order) whose decision differs there; None when
            every decision of the step is the same (or one run has no such step).
        what: ``prompt``, ``reply``, ``action``, ``outcome``, ``messages``, ``state hash``
            or ``missing``.
        a: The first run's side (the value, shortened), or None.
        b: The second run's side.
    """

    step: int
    agent_id: str | None
    what: str
    a: Any
    b: Any

    def line(self) -> str:
        """The divergence in one line."""
        who = f", {self.agent_id}" if self.agent_id is not None else ""
        return f"first divergence: step {self.step}{who}: {self.what}: {_short(self.a)} | {_short(self.b)}"


@dataclass(frozen=True)
class RunDiff:
    """What ``diff_runs`` found (see the module)."""

    a: Path
    b: Path
    run_ids: tuple[str, str]
    config: list[tuple[str, Any, Any]] = field(default_factory=list)
    first: Divergence | None = None
    decisions_differing: int = 0
    decisions: tuple[int, int] = (0, 0)

    @property
    def identical(self) -> bool:
        """Whether the two runs are the same run: same config, same rows."""
        return not self.config and self.first is None and self.decisions_differing == 0

    def lines(self) -> list[str]:
        """The comparison as ``vvm diff`` prints it."""
        if self.identical:
            return [f"identical: {self.a} and {self.b} (run {self.run_ids[0]})"]
        out = [f"{self.a} ({self.run_ids[0]}) vs {self.b} ({self.run_ids[1]})"]
        if self.config:
            out.append(f"config: {len(self.config)} difference(s)")
            out += [f"  {key}: {_short(x)} -> {_short(y)}" for key, x, y in self.config]
        else:
            out.append("config: the same")
        out.append(self.first.line() if self.first is not None else "first divergence: none")
        out.append(
            f"decisions differing: {self.decisions_differing:,} "
            f"(of {self.decisions[0]:,} and {self.decisions[1]:,})"
        )
        return out

    def __repr__(self) -> str:
        """The lines, as ``vvm diff`` prints them."""
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        """The comparison as a small table in a notebook."""
        import html

        rows = "".join(f"<tr><td>{html.escape(line)}</td></tr>" for line in self.lines())
        return f"<table>{rows}</table>"


def diff_runs(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> RunDiff:
    """Compare the runs in traces ``a`` and ``b`` (see the module).

    Raises:
        TraceError: Either is not a trace with a run recorded (one line).
    """
    pa, pb = check_trace_file(a), check_trace_file(b)
    con = read_connection(pa)
    try:
        con.execute("ATTACH DATABASE ? AS other", (read_uri(pb),))
        ids, configs = _runs(con, pa, pb)
        config = _config_differences(*configs)
        first = _first_divergence(con, (pa, pb))
        counts = tuple(
            con.execute(f"SELECT count(*) FROM {schema}.decisions").fetchone()[0]  # noqa: S608
            for schema in ("main", "other")
        )
        differing = _differing(con)
    except sqlite3.Error as exc:
        raise TraceError(f"cannot compare {pa} and {pb}: {exc}") from None
    finally:
        con.close()
    return RunDiff(pa, pb, ids, config, first, differing, counts)  # type: ignore[arg-type]


def _runs(con: sqlite3.Connection, pa: Path, pb: Path) -> tuple[tuple[str, str], list[Any]]:
    ids, configs = [], []
    for schema, path in (("main", pa), ("other", pb)):
        row = con.execute(f"SELECT run_id, config_json FROM {schema}.runs").fetchone()  # noqa: S608
        if row is None:
            raise TraceError(f"{path}: no run recorded")
        ids.append(str(row[0]))
        configs.append(json.loads(row[1]))
    return (ids[0], ids[1]), configs


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"llm": {"model": m}, "agents": [{...}]}`` as ``llm.model``, ``agents.0.count``, ..."""
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    out: dict[str, Any] = {}
    for key, item in items:
        out.update(_flat(item, f"{prefix}{key}."))
    return out if out else {prefix[:-1]: value}


def _config_differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Every flattened key whose values differ (a key one side lacks: None there)."""
    fa, fb = _flat(a), _flat(b)
    return [
        (k, fa.get(k), fb.get(k)) for k in sorted(fa.keys() | fb.keys()) if fa.get(k) != fb.get(k)
    ]


def _symmetric(select: str) -> str:
    """The rows of ``select`` (over ``{s}``) that one run holds and the other does not."""
    a, b = select.format(s="main"), select.format(s="other")
    return f"SELECT * FROM ({a} EXCEPT {b}) UNION ALL SELECT * FROM ({b} EXCEPT {a})"


# What each run holds per step, compared as sets: the step rows, the LLM calls with their
# replies' text (the ids of texts differ from file to file), the messages.
_STEPS = "SELECT step, state_hash FROM {s}.steps"
_CALLS = (
    "SELECT c.step, c.agent_idx, c.attempt, c.request_hash, t.body FROM {s}.llm_calls AS c "
    "LEFT JOIN {s}.llm_texts AS t ON t.id = c.reply"
)
_MESSAGES = "SELECT id, step, author_id, channel, content FROM {s}.messages"


def _first_step(con: sqlite3.Connection) -> int | None:
    """The first step at which the runs differ in anything they recorded, or None."""
    found = [
        con.execute(f"SELECT min(step) FROM ({_symmetric(_STEPS)})").fetchone()[0],  # noqa: S608
        con.execute(f"SELECT min(step) FROM ({_symmetric(_CALLS)})").fetchone()[0],  # noqa: S608
        con.execute(f"SELECT min(step) FROM ({_symmetric(_MESSAGES)})").fetchone()[0],  # noqa: S608
        con.execute(
            f"SELECT min(coalesce(x.id, y.id) >> {SEQ_BITS}) {_DIFFERING}"  # noqa: S608
        ).fetchone()[0],
    ]
    steps = [step for step in found if step is not None]
    return min(steps) if steps else None


def _first_divergence(con: sqlite3.Connection, paths: tuple[Path, Path]) -> Divergence | None:
    step = _first_step(con)
    if step is None:
        return None
    low, high = step << SEQ_BITS, (step << SEQ_BITS) | SEQ_MASK
    have = [
        con.execute(f"SELECT 1 FROM {s}.steps WHERE step = ?", (step,)).fetchone()  # noqa: S608
        is not None
        for s in ("main", "other")
    ]
    if not all(have):
        return Divergence(
            step, None, "missing", "the step" if have[0] else None, "the step" if have[1] else None
        )
    names = ", ".join(f"d.{c}" for c in ACTION_COLUMNS)
    rows = {
        schema: con.execute(
            f"SELECT d.id & {SEQ_MASK}, a.agent_id, {names} FROM {schema}.decisions AS d "  # noqa: S608
            f"LEFT JOIN {schema}.agents AS a ON a.agent_idx = d.agent_idx "
            "WHERE d.id BETWEEN ? AND ? ORDER BY d.id",
            (low, high),
        ).fetchall()
        for schema in ("main", "other")
    }
    for mine, theirs in zip(rows["main"], rows["other"], strict=False):
        if mine[1] != theirs[1]:
            return Divergence(step, mine[1], "agent", mine[1], theirs[1])
        found = _decision_difference(con, paths, step, mine, theirs)
        if found is not None:
            return found
    if len(rows["main"]) != len(rows["other"]):
        longer = rows["main"] if len(rows["main"]) > len(rows["other"]) else rows["other"]
        extra = longer[min(len(rows["main"]), len(rows["other"]))]
        return Divergence(step, extra[1], "missing", len(rows["main"]), len(rows["other"]))
    said = [
        con.execute(
            f"SELECT group_concat(author_id || ': ' || content, ' / ') FROM {s}.messages "  # noqa: S608
            "WHERE step = ? ORDER BY id",
            (step,),
        ).fetchone()[0]
        for s in ("main", "other")
    ]
    if said[0] != said[1]:
        return Divergence(step, None, "messages", said[0], said[1])
    hashes = [
        con.execute(f"SELECT state_hash FROM {s}.steps WHERE step = ?", (step,)).fetchone()[0]  # noqa: S608
        for s in ("main", "other")
    ]
    return Divergence(step, None, "state hash", hashes[0], hashes[1])


def _decision_difference(
    con: sqlite3.Connection,
    paths: tuple[Path, Path],
    step: int,
    mine: tuple[Any, ...],
    theirs: tuple[Any, ...],
) -> Divergence | None:
    """What differs first in one agent's decision: its prompt, the reply, the action, the outcome."""
    agent_idx, agent_id = mine[2], mine[1]
    calls = [
        con.execute(
            f"SELECT request_hash, reply, id FROM {schema}.llm_calls "  # noqa: S608
            "WHERE step = ? AND agent_idx = ? ORDER BY id",
            (step, agent_idx),
        ).fetchall()
        for schema in ("main", "other")
    ]
    for (ha, ra, ia), (hb, rb, ib) in zip(*calls, strict=False):
        if ha != hb:
            return Divergence(step, agent_id, "prompt", *_prompts(paths, ia, ib, (ha, hb)))
        if _reply(con, "main", ra) != _reply(con, "other", rb):
            return Divergence(
                step, agent_id, "reply", _reply(con, "main", ra), _reply(con, "other", rb)
            )
    if len(calls[0]) != len(calls[1]):
        return Divergence(
            step, agent_id, "prompt", f"{len(calls[0])} calls", f"{len(calls[1])} calls"
        )
    columns = dict(zip(ACTION_COLUMNS, range(2, 2 + len(ACTION_COLUMNS)), strict=True))
    for what, names in (
        ("action", ("action", "arguments")),
        ("outcome", ("success", "result", "error", "fallback")),
    ):
        a = [mine[columns[n]] for n in names]
        b = [theirs[columns[n]] for n in names]
        if a != b:
            return Divergence(step, agent_id, what, _joined(names, a), _joined(names, b))
    rest = [
        n
        for n in ACTION_COLUMNS
        if n not in ("action", "arguments", "success", "result", "error", "fallback")
    ]
    a, b = [mine[columns[n]] for n in rest], [theirs[columns[n]] for n in rest]
    if a != b:
        return Divergence(step, agent_id, "action", _joined(rest, a), _joined(rest, b))
    return None


def _prompts(paths: tuple[Path, Path], a: int, b: int, hashes: tuple[Any, Any]) -> tuple[Any, Any]:
    """The first message two requests hold differently (their hashes when unreadable)."""
    from vivarium.trace.llm_texts import read_exchanges

    requests = [
        read_exchanges(path, [i]).get(i, {}).get("request")
        for path, i in zip(paths, (a, b), strict=True)
    ]
    if not all(isinstance(r, dict) for r in requests):
        return hashes
    messages = [r.get("messages") or [] for r in requests]  # type: ignore[union-attr]
    for x, y in zip(*messages, strict=False):
        if x != y:
            return x.get("content") if isinstance(x, dict) else x, y.get("content") if isinstance(
                y, dict
            ) else y
    x, y = requests  # the same messages: another parameter (the model, a seed, the tools)
    for key in sorted(set(x) | set(y)):  # type: ignore[arg-type]
        if key != "messages" and x.get(key) != y.get(key):  # type: ignore[union-attr]
            return f"{key}={x.get(key)}", f"{key}={y.get(key)}"  # type: ignore[union-attr]
    return hashes


def _reply(con: sqlite3.Connection, schema: str, text_id: Any) -> Any:
    """A reply's text (the stored JSON), or the value itself when it is no id of a text."""
    if not isinstance(text_id, int):
        return text_id
    row = con.execute(f"SELECT body FROM {schema}.llm_texts WHERE id = ?", (text_id,)).fetchone()  # noqa: S608
    return None if row is None else row[0]


def _joined(names: tuple[str, ...] | list[str], values: list[Any]) -> str:
    return ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True) if v is not None)


_DIFFERING = (
    "FROM main.decisions AS x FULL OUTER JOIN other.decisions AS y ON x.id = y.id "
    "WHERE x.id IS NULL OR y.id IS NULL OR "
    + " OR ".join(f"x.{c} IS NOT y.{c}" for c in ACTION_COLUMNS)
)
"""The decisions one run lacks or holds otherwise (one full outer join on the key)."""


def _differing(con: sqlite3.Connection) -> int:
    return int(con.execute(f"SELECT count(*) {_DIFFERING}").fetchone()[0])  # noqa: S608


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
