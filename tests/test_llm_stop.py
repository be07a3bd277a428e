"""Infrastructure failures stop a run; content failures are the agent's recorded fallbacks.

The classification lives in one place (``LLMCallError.infrastructure``); every policy path
(plain and LangGraph cognitive, workflow, MetaRL adapter) lets an outage through to the engine,
which stops before committing the step (status ``interrupted``) and cancels the step's other
decisions; ``on_llm_error="fallback"`` records a fallback instead. Every fallback has one layout.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.old_schema import as_schema_2
from tests.workflow.wf_helpers import agent_data, write_agent
from vivarium import ActionRequest, Run, TraceDb, WorldEngine, WorldEngineConfig
from vivarium.engine.deciding import Decider
from vivarium.errors import RunInterrupted, RunStoppingError, TraceError
from vivarium.gateways.base import (
    INFRASTRUCTURE_KINDS,
    GatewayBase,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    LLMUnavailable,
    ToolCall,
    set_on_llm_error,
    stop_if_unavailable,
)
from vivarium.seeding import canonical_json
from vivarium.trace.validate import validate_trace
from vivarium.worlds import InMemoryChannel

# kind -> is it the infrastructure's failure (decided here by reading the issue, not the code)
KINDS = {
    "connection": True,
    "timeout": True,
    "server_error": True,
    "rate_limit": True,
    "bad_response": True,
    "auth": True,
    "not_found": True,
    "config": True,
    "cassette": True,
    "bad_request": False,
    "error": False,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_infrastructure_is_decided_by_the_kind(kind: str) -> None:
    error = LLMCallError("x", kind=kind)
    assert error.infrastructure is KINDS[kind]
    assert (kind in INFRASTRUCTURE_KINDS) is KINDS[kind]


def test_stop_if_unavailable_follows_the_mode() -> None:
    outage, rejected = (
        LLMCallError("down", kind="connection"),
        LLMCallError("no", kind="bad_request"),
    )
    with pytest.raises(LLMUnavailable, match="down") as info:
        stop_if_unavailable(outage)  # the default is "stop"
    # an outage that stops the run is of the run-stopping type (no attribute to read)
    assert isinstance(info.value, RunStoppingError) and info.value.kind == "connection"
    assert not isinstance(outage, RunStoppingError)  # until the retries are exhausted
    stop_if_unavailable(rejected)  # the agent's: returns, the policy records a fallback
    stop_if_unavailable(ValueError("a parser bug"))
    token = set_on_llm_error("fallback")
    try:
        stop_if_unavailable(outage)  # fallback mode: the outage is a recorded fallback too
    finally:
        from vivarium.gateways.base import reset_on_llm_error

        reset_on_llm_error(token)
    with pytest.raises(ValueError, match="on_llm_error must be one of stop, fallback"):
        set_on_llm_error("ignore")


# -- one outage, every policy path -----------------------------------------------------------
class DownOnStep(GatewayBase):
    """Answers ``post_message`` (through ``act`` for workflows), except at step ``down``."""

    def __init__(self, down: int, kind: str = "connection") -> None:
        self.down, self.kind, self.step = down, kind, 0

    def complete(self, request: LLMRequest) -> LLMResponse:
        if self.step == self.down:
            raise LLMCallError(f"fake: injected {self.kind} (after 3 attempts)", kind=self.kind)
        tools = [t["function"]["name"] for t in request.tools or []]
        if "act" in tools:
            payload = {"thought_process": "ok", "action": {"name": "noop", "arguments": {}}}
            return LLMResponse(tool_calls=[ToolCall(name="act", arguments=payload)], model="f")
        call = ToolCall(name="post_message", arguments={"content": "hi"})
        return LLMResponse(tool_calls=[call], model="f")


class StepCounter:
    """Tells the gateway which step the engine is on (the engine has no such hook)."""

    def __init__(self, gateway: DownOnStep) -> None:
        self.gateway = gateway

    def __call__(self, step: int, record: Any) -> None:
        self.gateway.step = step + 1


def policies(kind: str, gateway: DownOnStep, tmp_path: Path) -> dict[str, Any]:
    if kind in ("plain", "langgraph"):
        from vivarium.policies.cognitive import CognitiveAgentPolicy, SimpleCognitivePolicy

        cls = SimpleCognitivePolicy if kind == "plain" else CognitiveAgentPolicy
        return {f"a{i}": cls(gateway, model="fake", force_tool=True) for i in range(2)}
    if kind == "workflow":
        from vivarium.workflow.config import load_agent
        from vivarium.workflow.policy import WorkflowPolicy

        spec = load_agent(write_agent(tmp_path / "agent", agent_data()))
        return {f"a{i}": WorkflowPolicy(spec, gateway, model="fake") for i in range(2)}
    from vivarium.metarl import Agent, AgentPolicyAdapter

    class Calling(Agent):  # a MetaRLGym agent that calls the model itself and lets errors out
        def get_action(self, messages: list[dict], agent_state: Any) -> tuple[str, Any]:
            reply = gateway.chat(model="fake", messages=[{"role": "user", "content": "go"}])
            return str(reply.tool_calls[0].arguments.get("content", "")), agent_state

        def reset(self) -> None: ...

        def update_memory(self, *args: Any) -> None: ...

    return {f"a{i}": AgentPolicyAdapter(Calling()) for i in range(2)}


def engine_run(db: Path, agents: dict[str, Any], counter: StepCounter, **config: Any) -> Run:
    trace = TraceDb(db)
    try:
        engine = WorldEngine(
            WorldEngineConfig(run_id="stop", **config), agents, InMemoryChannel(), trace_db=trace
        )
        engine.run(5, on_step=counter)
    finally:
        trace.close()
    return Run.open(db)


PATHS = ["plain", "langgraph", "workflow", "metarl"]


@pytest.mark.parametrize("scheduling", ["sequential", "simultaneous"])
@pytest.mark.parametrize("path", PATHS)
def test_every_policy_path_lets_an_outage_stop_the_run(
    tmp_path: Path, path: str, scheduling: str
) -> None:
    gateway = DownOnStep(down=2)
    db = tmp_path / "t.sqlite"
    with pytest.raises(RunInterrupted, match=r"^a0 at step 2: fake: injected connection") as info:
        engine_run(
            db, policies(path, gateway, tmp_path), StepCounter(gateway), scheduling=scheduling
        )
    assert info.value.step == 2
    run = Run.open(db)
    assert run.metadata["status"] == "interrupted" and run.metadata["steps_done"] == 2
    assert run.metadata["error"] == str(info.value)
    assert len(run.actions) == 4 and not run.actions["fallback"].any()
    assert validate_trace(db).status == "incomplete"


@pytest.mark.parametrize("path", PATHS)
def test_on_llm_error_fallback_records_the_outage_as_a_fallback(tmp_path: Path, path: str) -> None:
    gateway = DownOnStep(down=2)
    run = engine_run(
        tmp_path / "t.sqlite",
        policies(path, gateway, tmp_path),
        StepCounter(gateway),
        on_llm_error="fallback",
        scheduling="simultaneous",
    )
    assert run.metadata["status"] == "complete"
    actions = run.actions
    fell = actions[actions["fallback"]]
    assert fell["step"].tolist() == [2, 2]
    assert (fell["action"] == "noop").all() and not fell["success"].any()
    assert fell["error"].str.contains("fake: injected connection").all()
    assert actions.loc[~actions["fallback"], "error"].isna().all()


def test_content_failures_never_stop_the_run(tmp_path: Path) -> None:
    """A server that rejects the request (400) is not an outage: the agent's fallback."""
    gateway = DownOnStep(down=1, kind="bad_request")
    run = engine_run(
        tmp_path / "t.sqlite", policies("plain", gateway, tmp_path), StepCounter(gateway)
    )
    assert run.metadata["status"] == "complete"
    assert run.actions.loc[run.actions["fallback"], "step"].tolist() == [1, 1]


# -- the other decisions of the step are cancelled ---------------------------------------------
class Slow:
    """An async LLM policy that takes long; notes whether it was cancelled."""

    gateway = object()

    def __init__(self, cancelled: list[str]) -> None:
        self.cancelled = cancelled

    def decide(self, **kw: Any) -> ActionRequest:
        raise AssertionError

    async def adecide(self, *, agent_id: str, **kw: Any) -> ActionRequest:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            self.cancelled.append(agent_id)
            raise
        raise AssertionError("not cancelled")


class Down:
    gateway = object()

    def decide(self, **kw: Any) -> ActionRequest:
        raise AssertionError

    async def adecide(self, **kw: Any) -> ActionRequest:
        await asyncio.sleep(0.05)
        raise LLMCallError("server gone", kind="connection")


def test_an_outage_cancels_the_other_decisions_of_the_step() -> None:
    cancelled: list[str] = []
    policies_ = [Slow(cancelled), Down(), Slow(cancelled)]
    decider = Decider("r", ["a", "b", "c"], policies_)
    started = time.monotonic()
    with pytest.raises(RunInterrupted, match="^b at step 0: server gone$"):
        decider.decide_many(0, [(0, {}), (1, {}), (2, {})])
    assert time.monotonic() - started < 5  # not waiting for the 10 s decisions
    assert sorted(cancelled) == ["a", "c"]


def test_an_agent_timeout_on_every_attempt_is_an_outage_for_llm_policies() -> None:
    cancelled: list[str] = []
    decider = Decider("r", ["a"], [Slow(cancelled)], timeout_s=0.05, retries=1)
    with pytest.raises(RunInterrupted, match=r"^a at step 3: no decision within 0.05 s \(2"):
        decider.decide_many(3, [(0, {})])
    fallback = Decider("r", ["a"], [Slow([])], timeout_s=0.05, on_llm_error="fallback")
    (decision,) = fallback.decide_many(3, [(0, {})])
    assert decision.request is None and "timeout after 0.05 s" in str(decision.error)


# -- one layout for every fallback --------------------------------------------------------------
class Mixed:
    """agent a: raises (a policy error); b: an unusable reply (a content fallback); c: acts."""

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        if agent_id == "a":
            raise RuntimeError("boom")
        meta = {"parse_path": "fallback", "fallback_reason": "empty reply", "model": "m"}
        if agent_id == "b":
            return ActionRequest(
                run_id=run_id, time_step=time_step, agent_id=agent_id, action_name="noop",
                metadata=meta,
            )  # fmt: skip
        return ActionRequest(
            run_id=run_id, time_step=time_step, agent_id=agent_id, action_name="post_message",
            arguments={"content": "hi"},
        )  # fmt: skip


def test_a_policy_error_and_an_unusable_reply_have_one_layout(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"
    trace = TraceDb(db)
    WorldEngine(
        WorldEngineConfig(run_id="mixed"),
        dict.fromkeys("abc", Mixed()),
        InMemoryChannel(),
        trace_db=trace,
    ).run(2)
    trace.close()
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT agent_id, action, success, fallback, error, metadata, result FROM actions "
        "WHERE step = 0 ORDER BY seq"
    ).fetchall()
    con.close()
    assert rows == [
        ("a", "noop", 0, 1, "policy error: RuntimeError: boom", None, None),
        ("b", "noop", 0, 1, "empty reply", '{"model":"m","parse_path":"fallback"}', None),
        ("c", "post_message", 1, 0, None, None, '{"message_index":0}'),
    ]
    assert validate_trace(db).status == "ok"
    health = Run.open(db).health
    assert health.fallbacks == 4 and health.decisions == 6


# -- traces written before the fallback column ---------------------------------------------------
V1_VIEW = """CREATE VIEW actions AS SELECT (s.step << 24) | j.key AS id, s.step AS step,
j.key AS seq, j.value AS agent_idx, a.agent_id AS agent_id,
json_extract(s.action, '$[' || j.key || ']') AS action,
json_extract(s.arguments, '$[' || j.key || ']') AS arguments,
json_extract(s.reasoning, '$[' || j.key || ']') AS reasoning,
json_extract(s.metadata, '$[' || j.key || ']') AS metadata,
json_extract(s.success, '$[' || j.key || ']') AS success,
json_extract(s.result, '$[' || j.key || ']') AS result,
json_extract(s.error, '$[' || j.key || ']') AS error
FROM steps AS s JOIN json_each(s.agent_idx) AS j LEFT JOIN agents AS a ON a.agent_idx = j.value"""


def as_schema_1(db: Path) -> None:
    """Rewrite a trace the way schema 1 recorded it: no fallback column, an unusable reply as a
    successful noop whose metadata holds the reason."""
    as_schema_2(db)
    con = sqlite3.connect(db)
    with con:
        for step, metadata, success, error in con.execute(
            "SELECT step, metadata, success, error FROM steps"
        ).fetchall():
            meta, ok, err = json.loads(metadata), json.loads(success), json.loads(error)
            meta[1] = canonical_json({"fallback_reason": err[1], **json.loads(meta[1])})
            ok[1], err[1] = 1, None
            con.execute(
                "UPDATE steps SET metadata = ?, success = ?, error = ? WHERE step = ?",
                (json.dumps(meta), json.dumps(ok), json.dumps(err), step),
            )
        con.execute("DROP VIEW trace")  # the aam engine's view came later still
        con.execute("DROP VIEW actions")
        con.execute("ALTER TABLE steps DROP COLUMN fallback")
        con.execute(V1_VIEW)
        con.execute("PRAGMA user_version = 1")
    con.close()


def test_a_schema_1_trace_reads_its_fallbacks_right_and_is_not_resumed(tmp_path: Path) -> None:
    db = tmp_path / "v1.sqlite"
    trace = TraceDb(db)
    WorldEngine(
        WorldEngineConfig(run_id="old"),
        dict.fromkeys("abc", Mixed()),
        InMemoryChannel(),
        trace_db=trace,
    ).run(2)
    trace.close()
    as_schema_1(db)
    actions = Run.open(db).actions
    assert actions["fallback"].tolist() == [True, True, False] * 2
    assert actions["success"].tolist() == [False, False, True] * 2
    assert Run.open(db).health.fallbacks == 4
    with pytest.raises(TraceError, match="uses trace schema 1, which this version reads but"):
        TraceDb.for_resume(db)
