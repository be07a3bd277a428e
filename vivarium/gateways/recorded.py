"""The LLM calls of a step already committed, answered again from what the trace recorded.

A resume re-executes the steps its run committed after the checkpoint it starts from (see
``vivarium.experiment.runner.resume_run``): the world and the agents go through them again, without
writing, so that every state the run had (a policy's generator, an agent's memory, the world)
is rebuilt exactly. The LLM calls of those steps must get the replies the agents had then,
whoever gave them: a model sampling at temperature 0.7 would not give them again, and the
server may be the one that just failed. So each re-executed decision is answered from its
own ``llm_calls`` rows (``base.answer_from``), matched by request hash, attempt by attempt:

- the records of every attempt are given again (``record_call``), as the gateway stack gave
  them (a world that counts LLM tokens, an autonomous run's token windows see the same usage);
- a call whose last attempt succeeded returns the reply as the stack returned it: content,
  tool calls parsed the way a provider parses them (``parse_arguments``), finish reason, usage,
  cost, latency, model, request hash and cache flag; a reply forced through a JSON schema
  (``forced_tool_format="json_schema"``) is read back into its tool call;
- a call whose last attempt failed raises what the retry layer raised
  (``<model>: <error> (after N attempts)``), or, for an attempt the agent timeout cancelled,
  the replayed timeout the cassette raises too.

Nothing here is trusted blindly: the engine compares each re-executed step's state hash with
the one recorded, so a reply this module could not give back as the agent saw it shows up
as a refused resume, never as a silently different run. A request the decision did not
record (a gateway of one's own that records no calls) goes to the gateway as usual; a request
that differs from every one the decision recorded stops the re-execution (``ResumeDiverged``).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from vivarium.errors import ResumeDiverged, squash
from vivarium.gateways.base import (
    CallRecord,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    ToolCall,
    Usage,
    record_call,
)
from vivarium.gateways.request_key import request_keys

__all__ = ["CallRow", "DecisionCalls", "RecordedCalls", "replay_call", "split_calls"]

# How the retry layer words a call that failed on its last attempt (``retry.RetryGateway``).
_MAX_GIVE_UP_CHARS = 600
_AGENT_TIMEOUT = "cancelled: agent timeout"


class CallRow(NamedTuple):
    """One recorded attempt (an ``llm_calls`` row), with its parameters and reply decoded."""

    attempt: int
    model: str | None
    request_hash: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cost: float | None
    latency_ms: float | None
    cache_hit: int | None
    finish_reason: str | None
    error: str | None
    params: Mapping[str, Any] | None
    reply: Mapping[str, Any] | None


# The name this error had when it was a class of its own (a re-executed decision asked for a
# call it did not make when the step was recorded): the resume's divergence, like any other.
CallDiverged = ResumeDiverged


def _calls(rows: Sequence[CallRow]) -> list[list[CallRow]]:
    """The rows of one decision split into calls: each call's attempts, in order.

    A call's next attempt follows a failed one with the same request and the next number (the
    retry layer's); anything else starts a new call (a retried decision asks again from 1).
    """
    calls: list[list[CallRow]] = []
    for row in rows:
        last = calls[-1][-1] if calls else None
        if (
            last is not None
            and last.error is not None
            and not last.error.startswith("cancelled")
            and row.request_hash == last.request_hash
            and row.attempt == last.attempt + 1
        ):
            calls[-1].append(row)
        else:
            calls.append([row])
    return calls


class DecisionCalls:
    """The recorded calls of one decision, handed out by request (``base.RecordedAnswers``)."""

    def __init__(self, rows: Sequence[CallRow]) -> None:
        """Group ``rows`` (the decision's ``llm_calls``, in order) into calls by request hash."""
        self._left: dict[str | None, deque[list[CallRow]]] = {}
        for call in _calls(rows):
            self._left.setdefault(call[0].request_hash, deque()).append(call)

    def take(self, request: LLMRequest) -> Callable[[], LLMResponse] | None:
        """The recorded outcome of the next call of ``request`` (see ``base.RecordedAnswers``).

        Raises:
            ResumeDiverged: ``request`` is none of the requests left on record.
        """
        # Matched by the key of the version the trace was written with: any this one knows.
        keys = list(request_keys(request))
        for key in keys:
            queue = self._left.get(key)
            if queue:
                return functools.partial(replay_call, request, queue.popleft())
        if any(self._left.values()):
            raise ResumeDiverged(
                f"its LLM request {keys[0][:12]} is not the one recorded at this step (model "
                f"{request.model}): the prompt changed"
            )
        return None


class RecordedCalls(Mapping[tuple[int, int], DecisionCalls]):
    """(step, agent index) -> ``DecisionCalls``, built as a re-execution reaches each step.

    It reads ``steps`` (the trace's calls, one step at a time, in step order:
    ``vivarium.trace.resume.recorded_calls``) only as far as the step asked for, and keeps
    only that step's: a long run's calls are never all in memory. Steps are asked for in
    order, as a run goes; ``close`` ends the reading early.
    """

    def __init__(self, steps: Iterator[tuple[int, Mapping[int, Sequence[Sequence[Any]]]]]) -> None:
        """Read the recorded calls from ``steps`` (step, agent index -> rows), as needed."""
        self._steps = steps
        self._step: int | None = None
        self._calls: dict[tuple[int, int], DecisionCalls] = {}
        self._ahead: tuple[int, Mapping[int, Sequence[Sequence[Any]]]] | None = None

    def _reach(self, step: int) -> None:
        if step == self._step:
            return
        self._step, self._calls = step, {}
        while True:
            if self._ahead is None:
                self._ahead = next(self._steps, None)
                if self._ahead is None:
                    return
            at, group = self._ahead
            if at > step:
                return
            self._ahead = None
            if at == step:
                self._calls = {
                    (step, agent): DecisionCalls([CallRow(*row) for row in rows])
                    for agent, rows in group.items()
                }
                return

    def __getitem__(self, key: tuple[int, int]) -> DecisionCalls:
        """The recorded calls of agent ``key[1]``'s decision at step ``key[0]``."""
        self._reach(key[0])
        return self._calls[key]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """The decisions with calls at the step reached last."""
        return iter(self._calls)

    def __len__(self) -> int:
        """How many decisions of the step reached last made calls."""
        return len(self._calls)

    def close(self) -> None:
        """Stop reading (the trace's connection closes)."""
        close = getattr(self._steps, "close", None)
        if close is not None:
            close()


def split_calls(rows: Sequence[Sequence[Any]]) -> list[list[CallRow]]:
    """One decision's recorded rows (``recorded_calls``' fields) as its calls' attempts."""
    return _calls([CallRow(*row) for row in rows])


def replay_call(
    request: LLMRequest, attempts: list[CallRow], *, source: str | None = None
) -> LLMResponse:
    """Give a recorded call's records again; return its reply, or raise its failure.

    Args:
        request: The request asked now (the one recorded, by its key).
        attempts: The call's recorded attempts, in order.
        source: Where the records say the reply came from, when it is another run's record
            (``parent``): each attempt is then a cache hit of this run (no call was made).
    """
    for row in attempts:
        record_call(
            CallRecord(
                attempt=row.attempt,
                model=row.model or request.model,
                request_hash=row.request_hash or request.request_hash(),
                prompt_tokens=row.prompt_tokens,
                completion_tokens=row.completion_tokens,
                cost=row.cost,
                latency_ms=row.latency_ms,
                cache_hit=True if source is not None else bool(row.cache_hit),
                finish_reason=row.finish_reason,
                error=row.error,
                reply=None if row.reply is None else dict(row.reply),
                source=source,
            )
        )
    last = attempts[-1]
    if last.error is None:
        response = _response(request, last)
        if source is not None:
            response = response.model_copy(update={"cache_hit": True})
        return response
    if last.error.startswith(_AGENT_TIMEOUT):
        from vivarium.gateways.cache import ReplayedAgentTimeout

        raise ReplayedAgentTimeout(last.error)
    tries = "1 attempt" if last.attempt == 1 else f"{last.attempt} attempts"
    raise LLMCallError(squash(f"{request.model}: {last.error} (after {tries})", _MAX_GIVE_UP_CHARS))


def _response(request: LLMRequest, row: CallRow) -> LLMResponse:
    """The reply of a successful attempt, as the gateway stack handed it to the policy."""
    from vivarium.gateways.replies import parse_arguments

    reply = row.reply or {}
    calls = []
    for call in reply.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        function = function if isinstance(function, Mapping) else {}
        raw = function.get("arguments")
        arguments, error = parse_arguments(raw)
        calls.append(
            ToolCall(
                id=call.get("id"),
                name=str(function.get("name") or ""),
                arguments=arguments,
                raw_arguments=None if error is None else str(raw),
                parse_error=error,
            )
        )
    content = reply.get("content")
    prompt, completion = row.prompt_tokens or 0, row.completion_tokens or 0
    response = LLMResponse(
        content=content if isinstance(content, str) else None,
        tool_calls=calls,
        finish_reason=row.finish_reason,
        usage=Usage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        ),
        cost=row.cost,
        latency_ms=row.latency_ms or 0.0,
        model=request.model,  # as providers set it (a record may name who answered: mock)
        request_hash=row.request_hash or request.request_hash(),
        cache_hit=bool(row.cache_hit),
    )
    if row.params and "response_format" in row.params:  # sent as a JSON schema
        from vivarium.gateways.forced_schema import as_tool_call, forced_function

        function = forced_function(request, "json_schema")
        if function is not None:
            response = as_tool_call(response, function["name"], parse_arguments)
    return response
