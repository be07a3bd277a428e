"""What a trace holds for resuming its run: the checkpoint to start from, the LLM settings.

A run that stopped (killed, or interrupted by an LLM outage) is finished in place from its
last usable checkpoint, with the LLM settings it recorded. This module is the trace's side
of that: it reads (and records) those facts in the trace file and knows nothing of configs
or engines, which belong to ``vivarium.runner``.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from vivarium.errors import TraceError
from vivarium.seeding import canonical_json
from vivarium.trace.db import TraceDb, read_meta

LLM_SETTINGS_KEY = "llm_settings"
"""The ``meta`` key under which a trace keeps how its LLM calls were made."""

# The last checkpoint before the first step not done whose state hash is the one recorded for
# its step: a checkpoint written by a step that was later rolled back does not match it.
_RESUME_POINT_SQL = (
    "SELECT c.step, c.state_hash, c.world_state, c.agent_states FROM checkpoints c "
    "JOIN steps s ON s.step = c.step AND s.state_hash = c.state_hash "
    "WHERE c.step < ? ORDER BY c.step DESC LIMIT 1"
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


def resume_point(path: str | os.PathLike[str], steps_done: int) -> tuple[int, Checkpoint | None]:
    """The first step to redo, and the checkpoint to start from.

    Only a checkpoint whose state hash matches the one its step recorded is used, so a resume
    starts from a state the trace vouches for.

    Args:
        path: The trace file.
        steps_done: The steps the run record counts as done; later checkpoints are ignored.

    Returns:
        ``(0, None)`` when there is no usable checkpoint (the run is redone from the start),
        else the step after the checkpoint and the checkpoint itself.

    Raises:
        TraceError: The checkpoints cannot be read (one line naming the file).
    """
    p = Path(path)
    con = TraceDb.connect_readonly(p)
    try:
        rows = con.execute(_RESUME_POINT_SQL, (steps_done,)).fetchall()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read checkpoints in {p}: {exc}") from None
    finally:
        con.close()
    if not rows:
        return 0, None
    checkpoint = Checkpoint(*rows[0])
    return checkpoint.step + 1, checkpoint


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
