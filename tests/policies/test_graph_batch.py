"""LangGraph decisions in batches: one graph invocation a step, the same trace as one by one.

``CognitiveAgentPolicy.adecide`` queues the decisions the engine starts together and runs them
through one batch graph invocation (``vivarium.policies.graph_batch``). Every expectation here
is the per-decision run's (``batch_decisions = False``) or the plain policy's, computed by
running it, never by the code under test.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from vivarium import Run, TraceDb, WorldEngine, WorldEngineConfig
from vivarium.engine import deciding
from vivarium.gateways.base import LLMRequest
from vivarium.gateways.mock import MockLLMGateway
from vivarium.policies import cognitive, graph_batch
from vivarium.policies.cognitive import CognitiveAgentPolicy, SimpleCognitivePolicy
from vivarium.worlds import InMemoryChannel

pytest.importorskip("langgraph")

AGENTS = [f"agent_{i:02d}" for i in range(8)]


class OneByOne(CognitiveAgentPolicy):
    """The LangGraph policy with one graph invocation per decision (the unbatched path)."""

    batch_decisions = False


def latency_by_agent(slow: dict[str, float]) -> Any:
    """A mock latency (ms) per request: the named agents' calls are slow, the others vary."""

    def latency(request: LLMRequest) -> float:
        user = str(request.messages[-1].get("content"))
        for agent, ms in slow.items():
            if f"You are {agent}." in user:
                return ms
        return float(len(user) % 7)  # out-of-order finishes

    return latency


def run(
    db: Path,
    cls: type,
    *,
    steps: int = 3,
    slow: dict[str, float] | None = None,
    **config: Any,
) -> tuple[Run, str]:
    """The run's trace and final state hash."""
    gateway = MockLLMGateway(seed=7, latency_fn=latency_by_agent(slow or {}))
    agents = {a: cls(gateway, model="mock", force_tool=True) for a in AGENTS}
    trace = TraceDb(db)
    try:
        final = WorldEngine(
            WorldEngineConfig(
                run_id="batch",
                scheduling="simultaneous",
                **{"max_concurrency": len(AGENTS), **config},
            ),
            agents,
            InMemoryChannel(),
            trace_db=trace,
        ).run(steps)
    finally:
        trace.close()
    return Run.open(db), final


def rows(run: Run) -> list[tuple[Any, ...]]:
    table = run.actions[["step", "agent_id", "action", "success", "error"]].astype(object)
    table = table.where(table.notna(), None)  # a missing error is None, not NaN
    return [tuple(r) for r in table.itertuples(index=False)]


def test_a_batched_run_is_the_one_by_one_run_and_the_plain_one(tmp_path: Path) -> None:
    batched, batched_hash = run(tmp_path / "batched.sqlite", CognitiveAgentPolicy)
    one_by_one, one_hash = run(tmp_path / "one.sqlite", OneByOne)
    _, plain_hash = run(tmp_path / "plain.sqlite", SimpleCognitivePolicy)
    assert batched_hash == one_hash == plain_hash
    assert rows(batched) == rows(one_by_one)
    assert len(rows(batched)) == len(AGENTS) * 3
    calls = ["agent_id", "request_hash", "finish_reason", "error"]
    assert batched.llm_calls[calls].equals(one_by_one.llm_calls[calls])
    texts, one_texts = batched.llm_exchanges(), one_by_one.llm_exchanges()
    assert texts["request"].tolist() == one_texts["request"].tolist()  # prompts as sent
    assert texts["reply"].tolist() == one_texts["reply"].tolist()


def test_each_step_is_one_graph_invocation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    original = graph_batch.GraphBatcher._run

    async def counted(self: graph_batch.GraphBatcher, items: list[Any]) -> None:
        sizes.append(len(items))
        await original(self, items)

    monkeypatch.setattr(graph_batch.GraphBatcher, "_run", counted)
    run(tmp_path / "t.sqlite", CognitiveAgentPolicy, steps=3)
    assert sizes == [len(AGENTS)] * 3


def test_a_step_larger_than_a_batch_goes_in_several(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small: dict[Any, graph_batch.GraphBatcher] = {}

    def batcher() -> graph_batch.GraphBatcher:
        loop = asyncio.get_running_loop()
        if loop not in small:
            small[loop] = graph_batch.GraphBatcher(graph_batch.batch_graph(), max_batch=3)
        return small[loop]

    sizes: list[int] = []
    original = graph_batch.GraphBatcher._run

    async def counted(self: graph_batch.GraphBatcher, items: list[Any]) -> None:
        sizes.append(len(items))
        await original(self, items)

    monkeypatch.setattr(cognitive, "batcher", batcher)
    monkeypatch.setattr(graph_batch.GraphBatcher, "_run", counted)
    _, chunked = run(tmp_path / "chunked.sqlite", CognitiveAgentPolicy, steps=2)
    _, one_by_one = run(tmp_path / "one.sqlite", OneByOne, steps=2)
    assert chunked == one_by_one
    assert sum(sizes) == len(AGENTS) * 2 and max(sizes) == 3


def test_a_concurrency_limit_below_the_agents_still_decides_them_all(tmp_path: Path) -> None:
    _, limited = run(tmp_path / "limited.sqlite", CognitiveAgentPolicy, max_concurrency=3)
    _, one_by_one = run(tmp_path / "one.sqlite", OneByOne)
    assert limited == one_by_one


class FailsFor(CognitiveAgentPolicy):
    """Fails to build one agent's prompt (a bug in a policy), as the per-decision path would."""

    def plan(self, agent_id: str, observation: Any) -> Any:
        if agent_id == "agent_03":
            raise RuntimeError("no prompt for agent_03")
        return super().plan(agent_id, observation)


class FailsForOneByOne(FailsFor):
    batch_decisions = False


def test_a_failing_decision_fails_alone(tmp_path: Path) -> None:
    batched, _ = run(tmp_path / "b.sqlite", FailsFor, steps=2)
    one_by_one, _ = run(tmp_path / "o.sqlite", FailsForOneByOne, steps=2)
    assert rows(batched) == rows(one_by_one)
    failed = [r for r in rows(batched) if r[1] == "agent_03"]
    assert [r[4] for r in failed] == ["policy error: RuntimeError: no prompt for agent_03"] * 2
    assert all(r[3] for r in rows(batched) if r[1] != "agent_03")  # the others acted


def test_a_slow_call_times_out_alone(tmp_path: Path) -> None:
    """agent_05's call outlasts the agent timeout; the others answer at once. Batched, the
    others must neither wait for it nor time out with it, and its cancelled call is on record."""
    options = {"slow": {"agent_05": 2000.0}, "agent_timeout_s": 0.3, "on_llm_error": "fallback"}
    batched, _ = run(tmp_path / "b.sqlite", CognitiveAgentPolicy, steps=1, **options)
    one_by_one, _ = run(tmp_path / "o.sqlite", OneByOne, steps=1, **options)
    assert rows(batched) == rows(one_by_one)
    errors = {r[1]: r[4] for r in rows(batched)}
    assert errors.pop("agent_05") == "no decision: timeout after 0.3 s"
    assert set(errors.values()) == {None}
    calls = batched.llm_calls
    slow = calls[calls["agent_id"] == "agent_05"]
    assert slow["error"].tolist() == ["cancelled: agent timeout after 0.3 s"]
    assert calls[calls["agent_id"] != "agent_05"]["error"].isna().all()


def test_instances_share_one_compiled_graph_per_class() -> None:
    gateway = MockLLMGateway(seed=1)
    first, second = (CognitiveAgentPolicy(gateway, model="mock") for _ in range(2))
    assert first.graph is second.graph and first.agraph is second.agraph
    assert first.graph is not first.agraph
    other = OneByOne(gateway, model="mock")
    assert other.agraph is not first.agraph  # a subclass may override the nodes


def test_direct_callers_get_their_own_actions() -> None:
    """Decisions awaited together outside the engine come back each to its own caller."""
    gateway = MockLLMGateway(seed=3)
    policies = [CognitiveAgentPolicy(gateway, model="mock", force_tool=True) for _ in AGENTS]
    observation = {"time_step": 0, "messages": [], "tools": ["post_message", "noop"]}

    async def decide_all(batched: bool) -> list[Any]:
        for policy in policies:
            policy.batch_decisions = batched
        return await asyncio.gather(
            *(
                p.adecide(run_id="r", time_step=0, agent_id=a, observation=observation)
                for p, a in zip(policies, AGENTS, strict=True)
            )
        )

    batched = asyncio.run(decide_all(True))
    alone = asyncio.run(decide_all(False))
    assert [a.agent_id for a in batched] == AGENTS
    assert [a.model_dump() for a in batched] == [a.model_dump() for a in alone]


class ThresholdWatcher:
    """An async policy that notes the collector's thresholds while it decides."""

    def __init__(self, seen: list[tuple[int, ...]]) -> None:
        self.seen = seen

    def decide(self, **kw: Any) -> Any:
        raise AssertionError("async only")

    async def adecide(self, **kw: Any) -> Any:
        from vivarium import ActionRequest

        self.seen.append(gc.get_threshold())
        await asyncio.sleep(0)
        return ActionRequest(
            run_id=kw["run_id"], time_step=kw["time_step"], agent_id=kw["agent_id"]
        )


def test_a_run_raises_the_young_threshold_and_puts_it_back(db: Path) -> None:
    before = gc.get_threshold()
    assert before[0] < deciding.RUN_GC_THRESHOLD0  # Python's default, 700
    seen: list[tuple[int, ...]] = []
    trace = TraceDb(db)
    WorldEngine(
        WorldEngineConfig(run_id="gc", scheduling="simultaneous"),
        {"a": ThresholdWatcher(seen), "b": ThresholdWatcher(seen)},
        InMemoryChannel(),
        trace_db=trace,
    ).run(2)
    trace.close()
    assert seen == [(deciding.RUN_GC_THRESHOLD0, *before[1:])] * 4
    assert gc.get_threshold() == before


def test_a_caller_who_froze_the_heap_keeps_their_thresholds(db: Path) -> None:
    before = gc.get_threshold()
    gc.freeze()
    try:
        seen: list[tuple[int, ...]] = []
        trace = TraceDb(db)
        WorldEngine(
            WorldEngineConfig(run_id="gc"),
            {"a": ThresholdWatcher(seen)},
            InMemoryChannel(),
            trace_db=trace,
        ).run(1)
        trace.close()
        assert seen == [before]
    finally:
        gc.unfreeze()


class TaggedParse(CognitiveAgentPolicy):
    """A subclass with its own async parse node: it must keep deciding through it."""

    async def _aparse_node(self, state: Any) -> dict[str, Any]:
        out = self._parse_node(state)
        out["action"].metadata["tagged"] = True
        return out


def test_a_subclass_with_its_own_async_nodes_keeps_them(tmp_path: Path) -> None:
    """The batch graph calls the sync build and parse nodes: a subclass overriding the async
    ones would lose them there, so it decides through its own graph."""
    assert not cognitive._batchable(TaggedParse)
    assert cognitive._batchable(CognitiveAgentPolicy)
    trace, _ = run(tmp_path / "tagged.sqlite", TaggedParse, steps=1)
    metadata = trace.actions["metadata"].tolist()
    assert len(metadata) == len(AGENTS)
    assert all('"tagged":true' in m.replace(" ", "") for m in metadata)


class OwnCompile(CognitiveAgentPolicy):
    """A subclass whose ``_compile`` is an instance method (it worked before graphs were
    shared): compiled per instance, with the instance at hand."""

    def _compile(self, build: Any, call: Any, parse: Any) -> Any:  # type: ignore[override]
        self.compiled_here = getattr(self, "compiled_here", 0) + 1
        return CognitiveAgentPolicy._compile(build, call, parse)


def test_a_subclass_compiling_per_instance_still_builds() -> None:
    policy = OwnCompile(MockLLMGateway(seed=1), model="mock")
    other = OwnCompile(MockLLMGateway(seed=1), model="mock")
    assert policy.compiled_here == 2 and other.compiled_here == 2  # sync and async graphs
    assert policy.graph is not other.graph
    assert not cognitive._batchable(OwnCompile)


def test_a_call_that_raises_a_cancellation_fails_its_decision_at_once() -> None:
    """A gateway raising CancelledError nobody asked for fails that decision as LangGraph
    does alone (NodeCancelledError), without waiting for the batch's slow call."""
    from langgraph.errors import NodeCancelledError

    class Gateway(MockLLMGateway):
        async def achat(self, **request: Any) -> Any:
            if "You are agent_a." in str(request["messages"][-1]["content"]):
                raise asyncio.CancelledError
            await asyncio.sleep(1.0)
            return await super().achat(**request)

    gateway = Gateway(seed=1)
    policies = {a: CognitiveAgentPolicy(gateway, model="mock") for a in ("agent_a", "agent_b")}

    async def both() -> tuple[BaseException | None, float, float]:
        loop = asyncio.get_running_loop()
        began = loop.time()
        a = asyncio.ensure_future(
            policies["agent_a"].adecide(run_id="r", time_step=0, agent_id="agent_a",
                                        observation={"time_step": 0, "messages": []})
        )  # fmt: skip
        b = asyncio.ensure_future(
            policies["agent_b"].adecide(run_id="r", time_step=0, agent_id="agent_b",
                                        observation={"time_step": 0, "messages": []})
        )  # fmt: skip
        done, _ = await asyncio.wait([a], timeout=5)
        failed_at = loop.time() - began
        error = a.exception() if done else None
        await b
        return error, failed_at, loop.time() - began

    error, failed_at, whole = asyncio.run(both())
    assert isinstance(error, NodeCancelledError)
    assert failed_at < whole - 0.5  # not held until agent_b's one-second call was done
