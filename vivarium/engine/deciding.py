"""Getting every agent's decision for a step: sync or async, concurrent, bounded, fail-soft.

Policies with ``adecide`` are awaited concurrently within a step (at most ``max_concurrency``
at once), each with a timeout and retries; the results come back in the order they were asked
for, so the trace never depends on which call finished first. LLM call records made during a
decision are collected per agent (a context variable, so concurrent decisions never mix).

Async work runs on one process-wide event loop in a background thread. That works the same in
a script and inside Jupyter (whose own loop is already running), and keeps HTTP clients that
cache themselves per loop (litellm's) on a loop that lives as long as the process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vivarium.engine.capabilities import PolicyCapabilities, check_policies
from vivarium.errors import RunInterrupted, VivariumError
from vivarium.gateways.base import (
    CallRecord,
    LLMUnavailable,
    RecordedAnswers,
    answer_from,
    collect_calls,
    decision_deadline,
    reset_on_llm_error,
    run_stopper,
    set_on_llm_error,
    start_collecting,
    stop_answering,
    stop_collecting,
)
from vivarium.settings import (
    DEFAULT_AGENT_RETRIES,
    DEFAULT_MAX_CONCURRENCY,  # async decisions of one step in flight at once (its one home)
    DEFAULT_ON_LLM_ERROR,
)
from vivarium.types import ActionRequest

T = TypeVar("T")


@dataclass(slots=True)
class Decision:
    """A policy's answer, or the reason there is none, and the LLM calls it made."""

    request: ActionRequest | None
    error: str | None = None
    calls: list[CallRecord] = field(default_factory=list)


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="vivarium-async", daemon=True
        )
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], tick: Callable[[], None] | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            if tick is not None:
                while not concurrent.futures.wait([future], timeout=TICK_EVERY).done:
                    tick()
            return future.result()
        except BaseException:
            # Ctrl-C in the caller's thread: the decisions still running on the loop are
            # cancelled (their HTTP requests closed), not left to finish unseen.
            future.cancel()
            raise


_loop_thread: _LoopThread | None = None
_loop_lock = threading.Lock()


TICK_EVERY = 0.05
"""Seconds between two ``tick`` calls of a caller waiting in ``run_async``."""


def run_async(coro: Coroutine[Any, Any, T], tick: Callable[[], None] | None = None) -> T:
    """Run a coroutine to completion on Vivarium's background event loop.

    Args:
        coro: What to run.
        tick: Called on the caller's thread every ``TICK_EVERY`` seconds while it waits (the
            step's progress: ``vivarium.engine.step_progress``).
    """
    global _loop_thread
    with _loop_lock:
        if _loop_thread is None or not _loop_thread.thread.is_alive():
            _loop_thread = _LoopThread()
    return _loop_thread.run(coro, tick)


_freezes = 0
_freeze_lock = threading.Lock()
_saved_threshold: tuple[int, ...] | None = None
# The youngest generation's threshold during a run of async (LLM) decisions. Python's 700 runs a
# young collection every few decisions (a LangGraph invocation allocates ~2,000 containers)
# and each one also walks the decisions still in flight; the garbage of a decision is freed by
# reference counting anyway, so collecting less often frees the same memory a little later.
# Measured: 64 concurrent LangGraph invocations alone take ~15 % less CPU than at 700; a
# whole run of LLM decisions, 0-10 % (the freeze above is what counts most).
RUN_GC_THRESHOLD0 = 50_000


@contextlib.contextmanager
def older_objects_frozen(enabled: bool = True) -> Iterator[None]:
    """Keep the garbage collector off the hot path of a run, and restore it afterwards.

    LLM policies (LangGraph's above all) allocate enough for Python to run a full collection
    every few steps, and each walks every object of every library imported (~370,000 with
    litellm and LangGraph loaded: ~270 ms each on this project's test machine, a third of a
    step's time). ``gc.freeze`` for the run makes those passes walk only what the run made;
    ``gc.unfreeze`` afterwards hands the older objects back, so nothing is kept alive. The
    youngest generation's threshold is raised for the run (``RUN_GC_THRESHOLD0``) and put back
    after it. A heap someone else froze is left as it is (and its thresholds too).
    """
    global _freezes, _saved_threshold
    if not enabled:
        yield
        return
    with _freeze_lock:
        owner = _freezes > 0 or gc.get_freeze_count() == 0
        if owner:
            _freezes += 1
            if _freezes == 1:
                gc.freeze()
                _saved_threshold = gc.get_threshold()
                if _saved_threshold[0] and _saved_threshold[0] < RUN_GC_THRESHOLD0:
                    gc.set_threshold(RUN_GC_THRESHOLD0, *_saved_threshold[1:])
    try:
        yield
    finally:
        if owner:
            with _freeze_lock:
                _freezes -= 1
                if _freezes == 0:
                    if _saved_threshold is not None:
                        gc.set_threshold(*_saved_threshold)
                        _saved_threshold = None
                    gc.unfreeze()


class RunAborted(VivariumError):
    """A decision failed in a way that must stop the run (e.g. a replay with no recorded reply)."""


def _fatal(exc: BaseException, agent_id: str, t: int) -> VivariumError | None:
    """The error that stops the run for ``exc``, or None when ``exc`` is the agent's failure.

    An infrastructure failure after the retries (``LLMUnavailable``) interrupts the run, to be
    resumed; any other ``RunStoppingError`` aborts it.
    """
    stopper = run_stopper(exc)  # also catches an infrastructure error a policy let through
    if isinstance(stopper, LLMUnavailable):
        reason = f"{agent_id} at step {t}: {exc}"
        return RunInterrupted(reason, step=t, reason=reason)
    if stopper is not None:
        return RunAborted(f"{agent_id} at step {t}: {exc}")
    return None


def _timed_out(agent_id: str, t: int, timeout_s: float | None, attempts: int) -> RunInterrupted:
    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
    reason = f"{agent_id} at step {t}: no decision within {timeout_s:g} s ({tries})"
    return RunInterrupted(reason, step=t, reason=reason)


def _check(request: Any) -> ActionRequest | str:
    if isinstance(request, ActionRequest):
        return request
    return f"policy returned {type(request).__name__}, not ActionRequest"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Decider:
    """Asks policies for decisions, with concurrency, timeouts and retries."""

    def __init__(
        self,
        run_id: str,
        agent_ids: Sequence[str],
        policies: Sequence[Any],
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        timeout_s: float | None = None,
        retries: int = DEFAULT_AGENT_RETRIES,
        on_llm_error: str = DEFAULT_ON_LLM_ERROR,
        capabilities: Sequence[PolicyCapabilities] | None = None,
    ) -> None:
        """Get ready to ask ``policies`` (one per agent id, in the same order).

        Args:
            run_id: The run the decisions are for.
            agent_ids: The agents' ids, in agent index order.
            policies: Each agent's policy, in the same order.
            max_concurrency: Async decisions in flight at once.
            timeout_s: Per-attempt limit for an async decision (None: no limit).
            retries: Attempts after a timeout or an error.
            on_llm_error: ``"stop"`` or ``"fallback"``, for an LLM outage past the retries.
            capabilities: What each policy can do, as the engine checked it; None checks here.
        """
        self.run_id = run_id
        self.agent_ids = list(agent_ids)
        self.policies = list(policies)
        if capabilities is None:
            capabilities = check_policies(self.agent_ids, self.policies)
        self.is_async = [c.is_async for c in capabilities]
        self.any_async = any(self.is_async)
        self.max_concurrency = max(1, max_concurrency)
        self.timeout_s = timeout_s
        self.retries = max(0, retries)
        # "stop": an LLM server that fails past the retries (or a decision that times out on
        # every attempt) interrupts the run; "fallback": it becomes a recorded fallback noop.
        self.on_llm_error = on_llm_error
        # Policies that call a model (they hold a gateway): a decision of theirs that times out
        # on every attempt is the server's slowness, not the agent's choice.
        self.calls_llm = [c.calls_llm for c in capabilities]
        # The recorded LLM calls of each (step, agent index) a resume re-executes: answered
        # from the trace, not the gateway (``gateways.recorded``); None while a run records.
        self.recorded: Mapping[tuple[int, int], RecordedAnswers] | None = None
        # (agent index, its call records) of every decision of the step under way: what a stop
        # in the middle of the step discards, for the trace's ``interruptions`` table.
        self.pending: list[tuple[int, list[CallRecord]]] = []
        # Decisions of the ``decide_many`` under way that are in (read by its ``tick``).
        self.decided = 0

    # -- one agent ----------------------------------------------------------------------------
    def _sync_once(self, idx: int, t: int, observation: dict[str, Any]) -> ActionRequest | str:
        request = self.policies[idx].decide(
            run_id=self.run_id, time_step=t, agent_id=self.agent_ids[idx], observation=observation
        )
        return _check(request)

    def decide_sync(self, idx: int, t: int, observation: dict[str, Any]) -> Decision:
        """A sync policy's decision (exceptions are retried, then recorded)."""
        if self.is_async[idx]:
            return run_async(self._decide_async(idx, t, observation, asyncio.Semaphore(1)))
        errors: list[str] = []
        calls, token = start_collecting()
        self.pending.append((idx, calls))
        mode = set_on_llm_error(self.on_llm_error)
        answers = None if self.recorded is None else self.recorded.get((t, idx))
        answering = None if answers is None else answer_from(answers)
        try:
            for _attempt in range(self.retries + 1):
                try:
                    outcome = self._sync_once(idx, t, observation)
                except Exception as exc:  # fail soft, record loud
                    if (abort := _fatal(exc, self.agent_ids[idx], t)) is not None:
                        raise abort from None
                    errors.append(_describe(exc))
                    continue
                if isinstance(outcome, str):
                    return Decision(None, outcome, calls)
                return Decision(outcome, None, calls)
        finally:
            if answering is not None:
                stop_answering(answering)
            reset_on_llm_error(mode)
            stop_collecting(token)
        return Decision(None, _failure_reason(errors), calls)

    async def _decide_async(
        self, idx: int, t: int, observation: dict[str, Any], gate: asyncio.Semaphore
    ) -> Decision:
        errors: list[str] = []
        policy = self.policies[idx]
        set_on_llm_error(self.on_llm_error)  # this task's own context: no reset needed
        answers = None if self.recorded is None else self.recorded.get((t, idx))
        if answers is not None:  # a re-executed step: its calls answered as recorded
            answer_from(answers)
        timed_out = False
        async with gate:
            with collect_calls() as calls:
                self.pending.append((idx, calls))
                for _attempt in range(self.retries + 1):
                    call = policy.adecide(
                        run_id=self.run_id,
                        time_step=t,
                        agent_id=self.agent_ids[idx],
                        observation=observation,
                    )
                    try:
                        if self.timeout_s is None:
                            request = await call
                        else:  # the deadline names the reason in a cancelled call's record
                            with decision_deadline(self.timeout_s):
                                request = await asyncio.wait_for(call, self.timeout_s)
                    except TimeoutError:
                        errors.append(f"timeout after {self.timeout_s:g} s")
                        timed_out = True
                        continue
                    except Exception as exc:
                        if (abort := _fatal(exc, self.agent_ids[idx], t)) is not None:
                            raise abort from None
                        errors.append(_describe(exc))
                        timed_out = False
                        continue

                    outcome = _check(request)
                    if isinstance(outcome, str):
                        return Decision(None, outcome, list(calls))
                    return Decision(outcome, None, list(calls))
        if self.on_llm_error == "stop" and timed_out and self.calls_llm[idx]:
            # No answer in time, every attempt: the server is too slow or gone. That is not
            # the agent's behaviour, so the step is not committed; a resume redoes it.
            raise _timed_out(self.agent_ids[idx], t, self.timeout_s, len(errors))
        return Decision(None, _failure_reason(errors), list(calls))

    # -- many agents --------------------------------------------------------------------------
    def decide_many(
        self,
        t: int,
        items: Sequence[tuple[int, dict[str, Any]]],
        tick: Callable[[], None] | None = None,
    ) -> list[Decision]:
        """Decisions for (agent index, observation) pairs, returned in the order given.

        ``tick`` is called on this thread while they are made, now and then (``run_async``);
        ``decided`` says how many are in.
        """
        self.decided = 0
        if not self.any_async:
            out = []
            for idx, obs in items:
                out.append(self.decide_sync(idx, t, obs))
                self.decided += 1
                if tick is not None:
                    tick()
            return out
        return run_async(self._gather(t, items), tick)

    async def _gather(self, t: int, items: Sequence[tuple[int, dict[str, Any]]]) -> list[Decision]:
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(idx: int, obs: dict[str, Any]) -> Decision:
            if self.is_async[idx]:
                decision = await self._decide_async(idx, t, obs, gate)
            else:
                decision = self.decide_sync(idx, t, obs)
            self.decided += 1  # on the loop's thread only: read by the caller's tick
            return decision

        # Start decisions one at a time, yielding after each so that it runs to its first wait
        # (its request is on the wire) before the next agent's prompt is built. Started all at
        # once, every request would wait for every prompt: on Python 3.11 aiohttp writes a
        # request body in a task of its own, queued behind all the others.
        tasks = []
        try:
            for idx, obs in items:
                tasks.append(asyncio.ensure_future(one(idx, obs)))
                await asyncio.sleep(0)
            return list(await asyncio.gather(*tasks))
        except BaseException:
            # One decision stopped the run (or the run was cancelled): the others of the step
            # are cancelled and awaited, so no request of an abandoned step goes on running.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise


def _failure_reason(errors: list[str]) -> str:
    attempts = len(errors)
    last = errors[-1] if errors else "no decision"
    prefix = "policy error" if "timeout" not in last else "no decision"
    suffix = f" ({attempts} attempts)" if attempts > 1 else ""
    return f"{prefix}: {last}{suffix}"
