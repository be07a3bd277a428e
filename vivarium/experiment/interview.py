"""Interviews: ask an agent of a finished run a question, in the context it had at a step.

A run's trace holds every prompt an LLM agent was sent, as it was sent: the system prompt, its
memory and working memory as rendered, the observation it had (``Run.llm_exchanges``). An
interview sends that very prompt again, followed by the agent's own answer at that step and
then the question, and keeps the exchange beside the trace:

- **the trace is never written**: it is read through read-only connections, and its bytes stay
  what they were (the run's record is the study; an interview is a question about it);
- **the exchange is durable and replayable**: each is committed, before the answer is handed
  back, to ``<trace>.interviews`` (an SQLite file of its own, keyed by the run's id and the
  request's key). Asking the same question of the same agent at the same step again answers
  from it without a call, offline, so a notebook that interviews re-runs the same;
- **one line for what cannot be asked**: an agent that made no LLM call at that step (a random
  or workflow policy, a step it did not decide in) is refused in one line, naming it.

The model is the run's own (its recorded LLM settings, without its cassette), or one named.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vivarium.errors import ConfigError, TraceError

if TYPE_CHECKING:
    import pandas as pd

    from vivarium.trace.run import TraceRun

SUFFIX = ".interviews"
"""What an interview log's name adds to its trace's (``run.sqlite`` -> ``run.sqlite.interviews``;
not ``*.sqlite``, so that no folder of traces mistakes it for one)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS interviews (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    question TEXT NOT NULL,
    model TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    request TEXT NOT NULL,
    answer TEXT,
    created_at TEXT
);
CREATE INDEX IF NOT EXISTS interviews_by_request ON interviews (run_id, request_hash);
"""
_COLUMNS = ("agent_id", "step", "question", "answer", "model", "request_hash")


@dataclass(frozen=True, slots=True)
class Interview:
    """One question to an agent of a run, and its answer.

    Attributes:
        agent_id: The agent asked.
        step: The step whose context the agent was asked in.
        question: The question.
        answer: What the model answered (None: it gave no text).
        model: The model that answered.
        request: The request sent (the agent's prompt at the step, its answer, the question).
        replayed: Whether the answer came from the interview log (no call made).
    """

    agent_id: str
    step: int
    question: str
    answer: str | None
    model: str
    request: dict[str, Any]
    replayed: bool


def log_path(trace: str | Path) -> Path:
    """The interview log beside the trace at ``trace``."""
    p = Path(trace)
    return p.with_name(p.name + SUFFIX)


def interview(
    run: TraceRun,
    agent_id: str,
    step: int,
    question: str,
    *,
    model: str | None = None,
    llm: dict[str, Any] | None = None,
) -> Interview:
    """Ask ``agent_id`` of ``run`` ``question`` in the context it had at ``step``.

    Args:
        run: A run read from its trace.
        agent_id: The agent to ask (an LLM agent that called the model at ``step``).
        step: The step whose prompt is the context.
        question: What to ask.
        model: The model that answers (None: the run's).
        llm: LLM settings over the run's recorded ones (``api_base``, ``api_key``, ...).

    Returns:
        The interview; recorded in the log beside the trace before it is returned.

    Raises:
        ConfigError: The question is empty, or the agent made no LLM call at ``step``.
        TraceError: ``agent_id`` names no agent of the run.
    """
    if not isinstance(question, str) or not question.strip():
        raise ConfigError("an interview needs a question (a non-empty string)")
    messages = _context(run, agent_id, step)
    messages.append({"role": "user", "content": question})
    settings = _settings(run, model, llm)
    from vivarium.gateways.base import LLMRequest

    request = LLMRequest(
        model=settings.model,
        messages=messages,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
    )
    key = request.request_hash()
    path = log_path(run.path)
    recorded = _recorded(path, run.run_id, key)  # the log made first: no answer goes unkept
    sent = request.model_dump(exclude_none=True)
    if recorded is not _MISSING:
        return Interview(agent_id, step, question, recorded, settings.model, sent, replayed=True)
    answer = _ask(run, settings, request)
    _record(path, run, agent_id, step, question, settings.model, key, sent, answer)
    return Interview(agent_id, step, question, answer, settings.model, sent, replayed=False)


def interviews(trace: str | Path, run_id: str) -> pd.DataFrame:
    """The interviews of run ``run_id`` in the log beside ``trace``, oldest first."""
    import pandas as pd

    path = log_path(trace)
    if not path.is_file():
        return pd.DataFrame(
            {c: pd.Series(dtype="int64" if c == "step" else "object") for c in _COLUMNS}
        )
    from vivarium.trace.onefile import read_uri

    con = sqlite3.connect(read_uri(path), uri=True, timeout=30)  # a read writes nothing
    try:
        rows = con.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM interviews WHERE run_id = ? ORDER BY id",  # noqa: S608
            (run_id,),
        ).fetchall()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read the interview log {path}: {exc}") from None
    finally:
        con.close()
    return pd.DataFrame(rows, columns=list(_COLUMNS)).astype({"step": "int64"})


# -- the context ---------------------------------------------------------------------------------
def _context(run: TraceRun, agent_id: str, step: int) -> list[dict[str, Any]]:
    """The messages of the agent's last answered call at ``step``, then its own answer."""
    calls = run.llm_exchanges(agent_id=agent_id, step=step)
    answered = calls[calls["error"].isna() & calls["request"].notna() & calls["reply"].notna()]
    if answered.empty:
        why = "made no LLM call" if calls.empty else "had no answered LLM call"
        raise ConfigError(
            f"{agent_id} {why} at step {step} of run {run.run_id}: an interview asks an LLM "
            "agent in the context of a step it called the model in"
        )
    last = answered.iloc[-1]
    messages = [dict(m) for m in last["request"]["messages"]]
    said = _said(last["reply"])
    if said:
        messages.append({"role": "assistant", "content": said})
    return messages


def _said(reply: dict[str, Any]) -> str:
    """The agent's answer as text: its content, and each tool call as ``name(arguments)``."""
    parts = [reply["content"]] if isinstance(reply.get("content"), str) else []
    for call in reply.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(f"{function.get('name')}({function.get('arguments') or ''})")
    return "\n".join(p for p in parts if p)


# -- the model -----------------------------------------------------------------------------------
def _settings(run: TraceRun, model: str | None, llm: dict[str, Any] | None) -> Any:
    """The run's LLM settings (recorded ones, then ``llm``, then ``model``); a cassette if ``llm`` gives one."""
    from vivarium.experiment.config import ExperimentConfig, LLMConfig, make_config
    from vivarium.trace.resume import recorded_llm_settings

    try:
        config = ExperimentConfig.model_validate(run.metadata["config"])
        base = config.llm_in_force.model_dump()
    except Exception:  # a config this version cannot read: its llm section as recorded
        base = dict(run.metadata["config"].get("llm") or {"mock": True})
    recorded = recorded_llm_settings(run.path)
    recorded.pop("max_concurrency", None)
    # No cassette of the run's: an interview is kept in its own log. One given here (``llm``)
    # answers it, for a notebook replayed offline.
    data = {**base, **recorded, "cache": None, **(llm or {})}
    if model is not None:
        data.update(model=model, mock=model == "mock")
    return make_config(LLMConfig, data, where=f"interview {run.path}")


def _ask(run: TraceRun, settings: Any, request: Any) -> str | None:
    """Send ``request`` through a gateway stack of ``settings``; the answer's text."""
    from vivarium.experiment.build import gateway_settings
    from vivarium.gateways.stack import build_gateway

    seed = run.metadata["config"].get("seed")
    gateway = build_gateway(gateway_settings(settings), seed if isinstance(seed, int) else 0)
    try:
        return gateway.complete(request).content
    finally:
        close = getattr(gateway, "close", None)
        if close is not None:
            close()


# -- the log -------------------------------------------------------------------------------------
def _connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, timeout=30)
    con.executescript(_SCHEMA)
    return con


_MISSING = object()  # no answer on record (a recorded answer may itself be None)


def _recorded(path: Path, run_id: str, key: str) -> Any:
    """The answer the log holds for this request of this run; ``_MISSING`` when none.

    Opening the log makes it (empty) when there is none: a folder where it cannot be written
    is said before a call is made, not after its answer.
    """
    try:
        con = _connect(path)
        try:
            row = con.execute(
                "SELECT answer FROM interviews WHERE run_id = ? AND request_hash = ? "
                "ORDER BY id LIMIT 1",
                (run_id, key),
            ).fetchone()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot keep interviews in {path}: {exc}") from None
    return _MISSING if row is None else row[0]


def _record(
    path: Path,
    run: TraceRun,
    agent_id: str,
    step: int,
    question: str,
    model: str,
    key: str,
    request: dict[str, Any],
    answer: str | None,
) -> None:
    from vivarium.seeding import canonical_json

    try:
        con = _connect(path)
        try:
            with con:
                con.execute(
                    "INSERT INTO interviews (run_id, agent_id, step, question, model, "
                    "request_hash, request, answer) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run.run_id,
                        agent_id,
                        step,
                        question,
                        model,
                        key,
                        canonical_json(request),
                        answer,
                    ),
                )
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot record the interview in {path}: {exc}") from None
