"""Concurrent LangGraph decisions run as one graph invocation: LangGraph's cost paid per batch.

One ``ainvoke`` of the per-decision three-node graph costs ~0.7 ms of CPU (LangGraph's Pregel
loop: tasks, channels, checkpoints, callback managers), more than the rest of a decision put
together (the prompt, the HTTP call, the trace). With 64 agents on one event loop that cost,
not the server, set the length of a step, and with 256 agents it kept most calls from being in
flight at once (85-110 of 256). So the async decisions ``CognitiveAgentPolicy.adecide`` is
asked for while the event loop is busy starting them (the engine starts every decision of a
step in turn) are queued, and once a loop iteration passes with no new one (or 32 wait), the
queue goes through the batch graph in one invocation: build_messages (every decision's
prompt), then call_model
(every call at once, each a task in its own decision's context, so call records, attempt
numbers and deadlines stay the decision's own; each reply parsed into its action as soon as it
is in). The work is the decisions' own node methods (``_build_node``, ``_acall_node``,
``_parse_node``), so a decision gives the same request, records and action as alone.

What it costs: a decision's request goes out once every prompt of its batch is built (~0.05 ms
each), not as soon as its own is; the graph a batch runs has two nodes, its decisions' parse
being part of call_model. A failure in one decision (an exception, a cancellation by the agent
timeout, a slow call) stays that decision's, as alone.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from dataclasses import dataclass, field
from typing import Any, TypedDict

from vivarium.optional import require


@dataclass(slots=True, eq=False)
class BatchItem:
    """One queued decision: its state (as the per-decision graph's), its future and context."""

    state: dict[str, Any]
    future: asyncio.Future[Any]
    context: contextvars.Context
    task: asyncio.Task[Any] | None = field(default=None)


class BatchState(TypedDict):
    """The batch graph's state: the decisions it runs."""

    items: list[BatchItem]


def _live(items: list[BatchItem]) -> list[BatchItem]:
    """The decisions still waiting for their action (not failed, not cancelled)."""
    return [item for item in items if not item.future.done()]


def _fail(item: BatchItem, exc: BaseException) -> None:
    if not item.future.done():
        item.future.set_exception(exc)


async def build_node(state: BatchState) -> dict[str, Any]:
    """Every decision's prompt and request (the policy's ``_build_node``), in its context."""
    for item in _live(state["items"]):
        policy = item.state["policy"]
        try:
            item.state.update(item.context.run(policy._build_node, item.state))
        except Exception as exc:
            _fail(item, exc)
    return {}


async def _call_and_parse(item: BatchItem) -> None:
    policy = item.state["policy"]
    try:
        item.state.update(await policy._acall_node(item.state))
        action = policy._parse_node(item.state)["action"]
    except Exception as exc:  # an outage that stops the run: the decision raises it
        _fail(item, exc)
        return
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the decision itself was cancelled
            raise
        # The call raised a cancellation nobody asked for: the decision fails now (not when
        # the batch's slowest call is done), as LangGraph fails a node that does so alone.
        errors = require("langgraph.errors")
        failure = errors.NodeCancelledError("call_model")
        failure.__cause__ = exc
        _fail(item, failure)
        return
    if not item.future.done():
        item.future.set_result(action)


async def call_node(state: BatchState) -> dict[str, Any]:
    """Every decision's model call at once, and its action as soon as its reply is in.

    Each decision is a task in its own context (its call records, attempt numbers and agent
    deadline stay its own) and is handed its action when its own reply is parsed: a slow call
    never holds back, or times out, the other decisions of its batch.
    """
    loop = asyncio.get_running_loop()
    live = _live(state["items"])
    for item in live:
        item.task = loop.create_task(_call_and_parse(item), context=item.context)
    if live:
        await asyncio.gather(*(item.task for item in live), return_exceptions=True)
    return {}


def compile_batch_graph() -> Any:
    """The batch graph: build_messages -> call_model (each call, then its action)."""
    graph = require("langgraph.graph")
    builder = graph.StateGraph(BatchState)
    builder.add_node("build_messages", build_node)
    builder.add_node("call_model", call_node)
    builder.add_edge(graph.START, "build_messages")
    builder.add_edge("build_messages", "call_model")
    builder.add_edge("call_model", graph.END)
    return builder.compile()


class GraphBatcher:
    """Queues decisions on one event loop and runs each batch through one graph invocation.

    Args:
        graph: The compiled batch graph (``compile_batch_graph``).
        max_batch: The most decisions a batch waits for: the first calls of a large step go
            out while the engine is still starting the rest (LangGraph's cost then is ~1/32
            of an invocation per decision).
    """

    def __init__(self, graph: Any, max_batch: int = 32) -> None:
        """Start with an empty queue."""
        self.graph = graph
        self.max_batch = max_batch
        self.pending: list[BatchItem] = []
        self._armed = False
        self._seen = 0
        self._running: set[asyncio.Task[Any]] = set()

    async def decide(self, state: dict[str, Any]) -> Any:
        """The action for one decision's initial state, decided in the next batch.

        Cancelled (an agent timeout, a stopping run), the decision's call is cancelled too,
        and awaited, so that its record is on the decision's list before this returns.
        """
        loop = asyncio.get_running_loop()
        item = BatchItem(state, loop.create_future(), contextvars.copy_context())
        self.pending.append(item)
        if not self._armed:
            self._armed = True
            self._seen = 0
            loop.call_soon(self._check)
        try:
            return await item.future
        except asyncio.CancelledError:
            if item.task is not None and not item.task.done():
                item.task.cancel()
                await asyncio.wait([item.task])
            raise

    def _check(self) -> None:
        """Run the queue once a loop iteration has added nothing to it, or once it is full."""
        if len(self.pending) != self._seen and len(self.pending) < self.max_batch:
            self._seen = len(self.pending)
            asyncio.get_running_loop().call_soon(self._check)
            return
        items, self.pending = self.pending, []
        self._armed = False
        task = asyncio.get_running_loop().create_task(self._run(items))
        self._running.add(task)  # a task nobody holds may be collected while it runs
        task.add_done_callback(self._running.discard)

    async def _run(self, items: list[BatchItem]) -> None:
        try:
            await self.graph.ainvoke({"items": items})
        except Exception as exc:  # the graph itself failed: every decision says so
            for item in items:
                _fail(item, exc)
        except BaseException:  # cancelled (the loop is closing): so are its decisions
            for item in items:
                if item.task is not None:
                    item.task.cancel()
                item.future.cancel()
            raise
        for item in items:  # a decision the nodes left without an action (cannot happen)
            _fail(item, RuntimeError("the batch graph gave this decision no action"))


_graph: Any = None
_batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GraphBatcher] = (
    weakref.WeakKeyDictionary()
)


def batch_graph() -> Any:
    """The batch graph, compiled on first use and then kept (policies ask when they are built)."""
    global _graph
    if _graph is None:
        _graph = compile_batch_graph()
    return _graph


def batcher() -> GraphBatcher:
    """The batcher of the running event loop."""
    loop = asyncio.get_running_loop()
    found = _batchers.get(loop)
    if found is None:
        found = _batchers[loop] = GraphBatcher(batch_graph())
    return found
