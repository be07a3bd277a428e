"""The one writer of decision rows: however a step is decided, its rows are written here.

A step's decisions reach the trace as the columns of its ``StepRecord``
(``vivarium.trace.records``). Three paths decide a step:

- the per-agent commit (``WorldEngine._commit``): any policy, sync or async, any scheduling;
- the lean path (``vivarium.engine.lean``): plain sync policies, straight from ``decide`` to
  ``apply``;
- the batch path: a ``BatchDecider`` and a ``BatchWorld`` hand over whole columns.

All three write through ``DecisionRows``, so a row is the same text, byte for byte, whichever
path made it, and every value is checked once, where it enters the trace: arguments, metadata
and results are encoded by ``encode_object`` (a value the trace cannot hold stops the step with
one line naming the agent, step, action and part: ``vivarium.trace.values``); a batch's columns
are checked, at its first step, against what the per-agent rows would have been.

The rows a decision leaves, one layout each:

| decision | action | arguments, reasoning, metadata | success, result, error | fallback |
|---|---|---|---|---|
| applied (``act``) | its name | as asked | the world's outcome | 0 |
| for another agent or step (``act``) | its name | as asked | 0, null, why | 0 |
| no usable action (``act``; ``parse_path`` ``"fallback"``) | its name | as asked, metadata without ``fallback_reason`` | 0, null, the reason | 1 |
| the policy failed (``failed``) | ``noop`` | null | 0, null, the reason | 1 |
| barred by the world's quota (``barred``) | ``noop`` | null | 0, null, the reason | 0 |
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from vivarium.errors import ConfigError
from vivarium.gateways.base import CallRecord
from vivarium.policies.base import BatchDecider
from vivarium.trace.records import StepRecord, encode_column, encode_object
from vivarium.trace.values import UnrecordableValue
from vivarium.types import ActionRequest, ActionResult
from vivarium.worlds.base import BatchDecisions, BatchOutcomes, World, world_name


class DecisionRows:
    """Appends each decision of a step to the step's ``StepRecord``, as the trace stores it.

    One per engine: ``begin`` starts a step's record, one call per decision appends its rows
    (``act``, ``failed``, ``barred``, or ``batch`` for a whole step), ``end`` completes the
    record. The ``metadata`` and ``fallback`` of a plain row (no metadata, no fallback: most
    rows of most runs) are written in one go, before the next row that has them and at ``end``,
    not once per decision.
    """

    __slots__ = (
        "_agent_ids",
        "_apply",
        "_batch_checked",
        "_cache",
        "_columns",
        "_record",
        "_step",
        "_world",
    )

    def __init__(self, agent_ids: Sequence[str], world: World) -> None:
        """Write the rows of ``agent_ids`` (in agent index order) acting in ``world``."""
        self._agent_ids = agent_ids
        self._world = world
        self._record = StepRecord(step=-1)
        self._columns = self._record.action_columns()
        self._step = -1
        self._apply: Callable[[ActionRequest], ActionResult] = world.apply
        self._cache: dict[Any, Any] = {}
        self._batch_checked = False

    @property
    def record(self) -> StepRecord:
        """The record of the step under way (the last one, between steps)."""
        return self._record

    def begin(self, record: StepRecord) -> None:
        """Write the decisions of ``record``'s step into it, from now on."""
        self._record = record
        self._columns = record.action_columns()
        self._step = record.step
        self._apply = self._world.apply  # as it is now (a test may wrap it between runs)

    def end(self) -> StepRecord:
        """Complete the step's record: every column as long as the others, and ``n_actions``."""
        record = self._record
        if record.agent_idx or not record.encoded:
            self._pad()
            record.n_actions = len(record.agent_idx)
        return record

    # -- one decision ---------------------------------------------------------------------------
    def calls(self, idx: int, calls: Sequence[CallRecord]) -> None:
        """The LLM calls agent ``idx`` made deciding (``llm_calls`` rows)."""
        self._record.llm_calls.extend(call.row(idx) for call in calls)

    def transition(self, idx: int, transition: Mapping[str, Any]) -> None:
        """A state transition agent ``idx``'s policy reported (``transitions`` rows)."""
        self._record.transitions.append(
            (
                idx,
                transition.get("from_state"),
                str(transition.get("to_state")),
                transition.get("trigger"),
                1 if transition.get("routine") else 0,
                transition.get("reason") or None,
            )
        )

    def act(self, idx: int, request: ActionRequest) -> None:
        """Apply agent ``idx``'s request to the world and append its row.

        The arguments are encoded before the world acts (a world that changes the arguments it
        was given cannot change what was recorded). A request that names another agent or
        step is refused without being applied; one whose metadata says it had no usable action
        (``parse_path`` ``"fallback"``) is applied (the world sees its noop) and recorded as a
        fallback. An exception of the world is recorded as the action's failure.

        Raises:
            UnrecordableValue: A value the trace cannot hold (names the agent, step, action).
        """
        agent_id = self._agent_ids[idx]
        t = self._step
        try:
            arguments = encode_object(request.arguments)
        except UnrecordableValue as exc:
            part = "the policy's arguments"
            raise exc.in_decision(agent_id, t, request.action_name, part) from None
        if request.agent_id != agent_id or request.time_step != t:
            result = ActionResult.failed(
                f"request names agent {request.agent_id!r} at step {request.time_step}, "
                f"expected {agent_id!r} at step {t}"
            )
        else:
            try:
                result = self._apply(request)
            except Exception as exc:  # a world bug must not lose the run
                result = ActionResult.failed(f"world error: {type(exc).__name__}: {exc}")
        metadata = request.metadata
        if metadata:
            self._full_row(idx, request, arguments, metadata, result)
            return
        rows, action, args, reasoning, _, success, results, error, _ = self._columns
        rows.append(idx)
        action.append(request.action_name)
        args.append(arguments)
        reasoning.append(request.reasoning)
        success.append(1 if result.success else 0)
        if result.result is None:
            results.append(None)
        else:
            results.append(self._encoded(idx, request, "the world's result", result.result))
        reason = result.error
        error.append(reason if reason is None or type(reason) is str else str(reason))

    def failed(self, idx: int, reason: str | None) -> None:
        """Agent ``idx``'s policy gave no request (``reason``): a fallback ``noop``, not applied."""
        self._row(idx, "noop", None, None, None, 0, None, reason, 1)

    def barred(self, idx: int, reason: str) -> None:
        """Agent ``idx`` may not decide this step (the world's quota): a ``noop``, not applied."""
        self._row(idx, "noop", None, None, None, 0, None, reason, 0)

    def _full_row(
        self,
        idx: int,
        request: ActionRequest,
        arguments: str | None,
        metadata: dict[str, Any],
        result: ActionResult,
    ) -> None:
        """The row of a request with metadata, applied (``act``): a fallback's layout, or not."""
        if metadata.get("parse_path") == "fallback":
            # The policy had no usable action (an unusable reply, a failed workflow step): the
            # world saw its noop, and the row has the one layout of every fallback, the same as
            # a policy error's: not a success, the reason in ``error``, ``fallback`` set.
            kept = dict(metadata)
            reason = kept.pop("fallback_reason", None) or "no usable action"
            encoded = self._encoded(idx, request, "the policy's metadata", kept)
            self._row(
                idx,
                request.action_name,
                arguments,
                request.reasoning,
                encoded,
                0,
                None,
                str(reason),
                1,
            )
            return
        encoded = self._encoded(idx, request, "the policy's metadata", metadata)
        value = self._encoded(idx, request, "the world's result", result.result)
        reason = result.error
        if reason is not None and type(reason) is not str:
            reason = str(reason)  # a world's ``failed(exc)``: its text
        success = 1 if result.success else 0
        self._row(
            idx,
            request.action_name,
            arguments,
            request.reasoning,
            encoded,
            success,
            value,
            reason,
            0,
        )

    def _row(self, *values: Any) -> None:
        """Append one whole row (every column, in ``ACTION_COLUMNS`` order)."""
        self._pad()
        for column, value in zip(self._columns, values, strict=True):
            column.append(value)

    def _pad(self) -> None:
        """Write the ``metadata`` (null) and ``fallback`` (0) of the plain rows written so far."""
        rows, metadata, fallback = (
            self._record.agent_idx,
            self._record.metadata,
            self._record.fallback,
        )
        missing = len(rows) - len(metadata)
        if missing:
            metadata.extend([None] * missing)
            fallback.extend([0] * missing)

    def _encoded(
        self, idx: int, request: ActionRequest, part: str, value: dict[str, Any] | None
    ) -> str | None:
        """``value`` as the trace stores it, or one line naming it if it cannot be recorded.

        Raises:
            UnrecordableValue: names the agent, step, action and the part of the decision.
        """
        try:
            return encode_object(value)
        except UnrecordableValue as exc:
            agent_id = self._agent_ids[idx]
            raise exc.in_decision(agent_id, self._step, request.action_name, part) from None

    # -- a whole step ---------------------------------------------------------------------------
    def batch(
        self,
        decider: BatchDecider,
        decisions: BatchDecisions,
        outcomes: BatchOutcomes,
        order: Sequence[int] | None,
        world_actions: frozenset[str],
    ) -> None:
        """Every agent's row at once: the batch's columns, stored as they are.

        Args:
            decider: What decided the step (named in an error).
            decisions: Its decisions, one row per agent in commit order.
            outcomes: The world's outcomes of them, in the same rows.
            order: The agent index of each row, or None for index order (0, 1, ...).
            world_actions: The actions the world applies in batches.

        Raises:
            ConfigError: An action the world does not batch, or (at the first batch step) a
                column that is not what the per-agent rows would be (names the column).
        """
        codes = np.asarray(decisions.codes)
        n = len(codes)
        if order is None:
            agents = self._cached(("agents", n), lambda: encode_column(list(range(n))))
        else:
            agents = encode_column(list(order))
        names = decisions.action_names
        quoted = self._cached(
            ("names", names), lambda: _batchable(decider, names, world_actions, self._world)
        )
        if not self._batch_checked:
            self._batch_checked = True
            _check_batch_texts(decider, decisions, outcomes, n)
        record = self._record
        record.n_actions = n
        record.encoded = (
            agents,
            "[" + ",".join(quoted[codes].tolist()) + "]",
            decisions.arguments,
            decisions.reasoning,
            decisions.metadata,
            outcomes.success,
            outcomes.result,
            outcomes.error,
            None,  # fallback: a batch decision is always an action
        )

    def _cached(self, key: Any, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]


def _batchable(
    decider: BatchDecider, names: tuple[str, ...], world_actions: frozenset[str], world: World
) -> np.ndarray:
    """The quoted names of a batch's actions, each checked to be one the world batches.

    A name the world does not apply in batches would be recorded as a success it never had.
    """
    missing = sorted(set(names) - world_actions)
    if missing:
        raise ConfigError(
            f"{type(decider).__name__} decided {', '.join(missing)}, which world "
            f"{world_name(world)} does not apply in batches"
        )
    return np.array([json.dumps(name, ensure_ascii=False) for name in names], dtype=object)


def _check_batch_texts(decider: Any, decisions: Any, outcomes: Any, rows: int) -> None:
    """Refuse, at the first batch step, stored columns that are not as the per-agent path writes.

    The trace keeps each row's value, and the state hash covers the columns as
    ``encode_column`` writes them; a column in another form (spaces, another escape, the wrong
    length) would read back as a different text and fail validation later, far from its cause.

    Raises:
        ConfigError: names the column and what is wrong with it.
    """
    columns = {
        "arguments": decisions.arguments,
        "reasoning": decisions.reasoning,
        "metadata": decisions.metadata,
        "success": outcomes.success,
        "result": outcomes.result,
        "error": outcomes.error,
    }
    for name, text in columns.items():
        if text is None:
            continue
        try:
            values = json.loads(text)
        except (TypeError, ValueError):
            values = None
        if not isinstance(values, list) or len(values) != rows:
            problem = f"is not a JSON array of {rows} values"
        elif name == "success" and not all(type(v) is int and v in (0, 1) for v in values):
            problem = "holds values other than 1 and 0"
        elif name != "success" and not all(v is None or type(v) is str for v in values):
            problem = "holds values other than texts (each row's JSON or reason) and null"
        elif name in _OBJECT_COLUMNS and (row := _non_canonical_row(values)) is not None:
            problem = (
                f"row {row} is not a JSON object as the per-agent path records it "
                "(vivarium.trace.records.encode_object: canonical JSON, keys sorted)"
            )
        elif encode_column(values) != text:
            problem = (
                "is not compact JSON as vivarium.trace.records.encode_column writes it "
                "(a column of nulls only is None)"
            )
        else:
            continue
        raise ConfigError(f"{type(decider).__name__}: the batch's '{name}' column {problem}")


# The batch columns whose rows are JSON objects (``arguments``, ``metadata``, ``result``).
_OBJECT_COLUMNS = frozenset({"arguments", "metadata", "result"})


def _non_canonical_row(rows: list[str | None]) -> int | None:
    """The first row that is not the text ``encode_object`` writes for its value, or None.

    Each distinct text is checked once (a batch's metadata is often one text for every row).
    """
    seen: set[str] = set()
    for i, text in enumerate(rows):
        if text is None or text in seen:
            continue
        seen.add(text)
        try:
            value = json.loads(text)
            same = isinstance(value, dict) and encode_object(value) == text
        except (ValueError, UnrecordableValue):
            same = False
        if not same:
            return i
    return None
