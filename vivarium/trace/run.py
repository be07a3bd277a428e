"""Reading one run's trace: its record, its frames, its validation and its health.

``TraceRun`` is everything a trace file tells without the code that wrote it: it needs no
config model, engine or world. ``vivarium.Run`` is the same reader in the experiment layer,
with what needs that layer on top (the config as a model, ``resume()``, ``summary()``).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from functools import cached_property
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from vivarium.errors import TraceError
from vivarium.trace.db import TraceDb
from vivarium.trace.views import FrameViews

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from vivarium.trace.health import RunHealth
    from vivarium.trace.validate import ValidationReport


def _call_ids(ids: list[int]) -> pd.Index:
    """The index of an ``llm_calls`` frame: the calls' ids, named ``call_id``."""
    import pandas as pd

    return pd.Index(ids, name="call_id", dtype="int64")


def read_run_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The run record of a trace: the ``runs`` row, with its config decoded.

    Args:
        path: The trace file.

    Returns:
        The row's columns by name, ``config_json`` replaced by ``config`` (a dict).

    Raises:
        TraceError: the file is not a trace, cannot be read, or holds no run record.
    """
    p = Path(path)
    con = TraceDb.connect_readonly(p)
    try:
        con.row_factory = sqlite3.Row
        row = con.execute("SELECT * FROM runs").fetchone()
    except Exception as exc:
        raise TraceError(f"cannot read the run record in {p}: {exc}") from None
    finally:
        con.close()
    if row is None:
        from vivarium.trace.onefile import writer_alive

        if writer_alive(p):
            raise TraceError(
                f"{p} holds no run record yet: its run is starting; open it in a moment"
            )
        raise TraceError(f"{p} holds no run record (the run never started)")
    meta = dict(row)
    meta["config"] = json.loads(meta.pop("config_json"))
    return meta


class TraceRun(FrameViews):
    """A finished (or interrupted) run, read from its trace file. Frames are loaded on demand.

    A run opened while it is written (``Run.open`` polled from another notebook) is the run as
    it was at that moment: ``metadata`` says how many steps were committed (``steps_done``),
    and every frame, read now or later, holds the rows of those steps and no others, so the
    frames agree with each other and with the metadata. Open it again for the steps since.

    Attributes:
        path: The trace file.
        metadata: The run record (see ``read_run_record``): ``run_id``, ``world``, ``status``,
            ``steps_done``, the recorded ``config`` as a dict, ...
        run_id: The run's id.
    """

    def __init__(self, path: Path, metadata: dict[str, Any]) -> None:
        """Wrap a run record already read (``open`` reads it from the file)."""
        self.path = path
        self.metadata = metadata
        self.run_id: str = metadata["run_id"]
        self._frames: dict[str, Any] = {}

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Self:
        """Open the trace at ``path`` (reads its run record; frames load on first use).

        Raises:
            TraceError: the file is not a trace, or holds no run record.
        """
        p = Path(path)
        return cls(p, read_run_record(p))

    # -- frames -------------------------------------------------------------------------------
    @property
    def source_id(self) -> str:
        """``run <run_id>``: recorded in exported Parquet files."""
        return f"run {self.run_id}"

    def arrow(self, name: str) -> pa.Table:
        """A trace table as Arrow (cached): the source of every other frame."""
        if name not in self._frames:
            from vivarium.trace.frames import read_arrow

            self._frames[name] = read_arrow(
                self.path, name, run_id=self.run_id, steps=self._steps_read
            )
        return self._frames[name]

    @property
    def _steps_read(self) -> int | None:
        """The steps every frame reads: those committed when the run record was read."""
        done = self.metadata.get("steps_done")
        return None if done is None else int(done)

    def _arguments_arrow(self) -> pa.Table:
        """The arguments frame read straight from the file.

        Only the actions' keys and arguments are read, not their other columns (unless the
        actions frame is loaded already).
        """
        if "actions" in self._frames:
            return super()._arguments_arrow()
        return self.arrow("arguments")

    # -- LLM text ------------------------------------------------------------------------------
    def _llm_call_ids(self) -> pd.Index:
        """The ``llm_calls`` ids, row for row as the cached frame (read once, with it).

        Read when the frame is first read, not at each call: an inspector asks for one
        decision's calls at every click, and the ids of a trace still being written must stay
        those of the frame they index.
        """
        if "llm_call_ids" not in self._frames:
            rows = self.arrow("llm_calls").num_rows
            bound = self._steps_read
            where = "" if bound is None else f" WHERE step < {bound}"
            con = TraceDb.connect_readonly(self.path)
            try:
                ids = [
                    row[0] for row in con.execute(f"SELECT id FROM llm_calls{where} ORDER BY id")
                ]
            finally:
                con.close()
            # The frame's own calls (those of its steps), in its order (ids grow).
            self._frames["llm_call_ids"] = ids[:rows]
        return _call_ids(self._frames["llm_call_ids"])

    def to_otel(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        endpoint: str | None = None,
        content: bool = True,
    ) -> dict[str, Any]:
        """This run as one OpenTelemetry trace (``vivarium.trace.otel``): OTLP JSON.

        Args:
            out: Write it to this file (as ``vvm export --otel``).
            endpoint: Also send it to this OTLP/HTTP collector (Phoenix, Langfuse, ...).
            content: Put prompts and replies on the LLM call spans (the GenAI convention's
                opt-in content attributes).

        Returns:
            The ``ExportTraceServiceRequest``, as a JSON-ready dict.
        """
        from vivarium.trace.otel import export_otel

        return export_otel(self.path, out, endpoint=endpoint, content=content)

    def llm_exchanges(
        self,
        *,
        agent_id: str | Iterable[str] | None = None,
        step: int | Iterable[int] | None = None,
    ) -> pd.DataFrame:
        """The LLM call attempts with their text: what each agent was sent and what came back.

        ``llm_calls`` leaves the text out so that it stays fast; this reads it for the calls
        asked for only (one agent, one step, or lists of them).

        Args:
            agent_id: Only this agent's calls (or these agents').
            step: Only the calls of this step (or these steps).

        Returns:
            The ``llm_calls`` rows, indexed by call id (``call_id``, what ``llm_calls.id`` holds
            in SQL), with two more columns: ``request`` (the JSON body the server received:
            ``model``, ``messages``, ``tools``, parameters) and ``reply`` (``content``,
            ``tool_calls``, ``finish_reason``, and ``error`` for a failed attempt), as dicts;
            None where the trace holds no text (a trace written before it did).

        Raises:
            TraceError: ``agent_id`` names no agent of this run.
        """
        from vivarium.trace.llm_texts import read_exchanges

        frame = self.llm_calls
        frame.index = self._llm_call_ids()
        if agent_id is not None:
            wanted = [agent_id] if isinstance(agent_id, str) else list(agent_id)
            unknown = sorted(set(wanted) - set(self.agents["agent_id"].astype(str)))
            if unknown:
                raise TraceError(f"no agent {', '.join(map(repr, unknown))} in run {self.run_id}")
            frame = frame[frame["agent_id"].astype(str).isin(wanted)]
        if step is not None:
            steps = [step] if isinstance(step, int) else list(step)
            frame = frame[frame["step"].isin(steps)]
        frame = frame.copy()
        texts = read_exchanges(self.path, frame.index.tolist())
        empty = {"request": None, "reply": None}
        frame["request"] = [texts.get(i, empty)["request"] for i in frame.index]
        frame["reply"] = [texts.get(i, empty)["reply"] for i in frame.index]
        return frame

    # -- checks -------------------------------------------------------------------------------
    def validate(self) -> ValidationReport:
        """Whether the trace is complete and unchanged since it was written (``vvm validate``)."""
        from vivarium.trace.validate import validate_trace

        return validate_trace(self.path)

    @cached_property
    def health(self) -> RunHealth:
        """Whether this run is a result to trust.

        ``health.ok``, and ``health.problems``, one line each (interrupted, every LLM call
        failed, N of M decisions fell back, ...). See ``vivarium.trace.health`` for the full
        shape.
        """
        from vivarium.trace.health import run_health

        return run_health(self.path)

    # -- display ------------------------------------------------------------------------------
    def _facts(self) -> list[tuple[str, str]]:
        """The run at a glance, as (label, value) pairs: what ``repr`` and the HTML show."""
        m = self.metadata
        facts = [
            ("run_id", m["run_id"]),
            ("world", m["world"]),
            ("policy", m["policy"]),
            ("agents", str(m["agents"])),
            ("steps", f"{m['steps_done']}/{m['steps']}"),
            ("seed", m["seed"]),
        ]
        llm = (m.get("config") or {}).get("llm")
        if isinstance(llm, dict):  # who answered: the mock is never passed off as a model
            model = str(llm.get("model", "mock"))
            mock = llm.get("mock") or model == "mock"
            facts.append(("llm", "mock (deterministic)" if mock else model))
        facts += [
            ("status", m["status"]),
            ("health", str(self.health)),
        ]
        facts += [("history", note) for note in self.health.notes]  # interruptions, resumed
        facts.append(("trace", str(self.path)))
        return facts

    @property
    def interruptions(self) -> pd.DataFrame:
        """Each time the run stopped before its end, and what that discarded (one row each).

        ``step`` (the first step not committed), ``ended`` (interrupted, failed, killed),
        ``reason``, ``recorded_at`` (UTC, wall clock: history, not a result), ``decisions``
        and ``llm_calls`` discarded, and ``discarded`` (those call attempts, as dicts). Empty for
        a run never interrupted. See ``vivarium.trace.interruptions``.
        """
        import pandas as pd

        from vivarium.trace.interruptions import Interruption, read_interruptions

        names = list(Interruption.__dataclass_fields__)
        rows = [[getattr(i, n) for n in names] for i in read_interruptions(self.path)]
        return pd.DataFrame(rows, columns=names)

    def __repr__(self) -> str:
        """``Run(run_id=..., world=..., ...)``: the facts on one line."""
        inner = ", ".join(f"{k}={v}" for k, v in self._facts())
        return f"Run({inner})"

    def _repr_html_(self) -> str:
        def cell(key: str, value: str) -> str:
            if key == "health" and not self.health.ok:  # a run that is not a result shows red
                lines = "<br>".join(escape(p) for p in self.health.problems)
                return f"<td style='color:#c00000;font-weight:bold'>{lines}</td>"
            return f"<td>{escape(value)}</td>"

        rows = "".join(
            f"<tr><th style='text-align:left'>{escape(k)}</th>{cell(k, v)}</tr>"
            for k, v in self._facts()
        )
        return f"<div><b>Vivarium run</b><table>{rows}</table></div>"
