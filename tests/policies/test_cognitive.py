"""LLM policies: requests they send, actions they return, and failing soft, with and without
LangGraph."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from tests.support.scripted import Reply, ScriptedGateway
from vivarium.gateways.base import (
    LLMCallError,
    LLMResponse,
    ToolCall,
    collect_calls,
)
from vivarium.policies.cognitive import (
    CognitiveAgentPolicy,
    CognitivePolicyConfig,
    SimpleCognitivePolicy,
    default_cognitive_policy,
)
from vivarium.policies.prompting import JSON_HINT, build_messages, tool_specs_for
from vivarium.seeding import derive_seed
from vivarium.worlds.channel import CHANNEL_ACTIONS, InMemoryChannel
from vivarium.worlds.ecology import ECOLOGY_ACTIONS

POLICIES = [SimpleCognitivePolicy, CognitiveAgentPolicy]
OBS = {
    "time_step": 3,
    "agent_id": "agent_001",
    "messages": [
        {"time_step": 1, "author_id": "agent_000", "content": "hello"},
        {"time_step": 2, "author_id": "agent_002", "content": "hi there"},
    ],
    "tools": ("noop", "emit_event", "post_message"),
}


def tool_reply(name: str, **arguments: Any) -> LLMResponse:
    return LLMResponse(
        content="thinking",
        tool_calls=[ToolCall(id="c1", name=name, arguments=arguments)],
        finish_reason="tool_calls",
        latency_ms=12.5,
    )


def decide(policy: Any, observation: dict[str, Any] = OBS, agent_id: str = "agent_001") -> Any:
    return policy.decide(run_id="r", time_step=3, agent_id=agent_id, observation=observation)


def adecide(policy: Any, observation: dict[str, Any] = OBS) -> Any:
    return asyncio.run(
        policy.adecide(run_id="r", time_step=3, agent_id="agent_001", observation=observation)
    )


# -- the action --------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", POLICIES)
def test_tool_call_becomes_the_action(cls: type) -> None:
    policy = cls(ScriptedGateway(tool_reply("post_message", content="hey")), model="m")
    action = decide(policy)
    assert policy.name == "cognitive"
    assert (action.run_id, action.time_step, action.agent_id) == ("r", 3, "agent_001")
    assert (action.action_name, action.arguments) == ("post_message", {"content": "hey"})
    assert action.reasoning == "thinking"
    assert action.metadata == {
        "parse_path": "tool_call",
        "model": "m",
        "finish_reason": "tool_calls",
    }


REPLIES: dict[str, Reply] = {
    "tool_call": tool_reply("emit_event", value=5),
    "json_text": LLMResponse(
        content='```json\n{"action": "post_message", "arguments": {"content": "yo"}}\n```',
        finish_reason="stop",
    ),
    "unknown_tool": tool_reply("dance"),
    "bad_args": tool_reply("post_message", text="x"),
    "tool_call_error": LLMResponse(
        tool_calls=[
            ToolCall(name="post_message", raw_arguments='{"content": "h', parse_error="bad")
        ],
        finish_reason="length",
    ),
    "empty": LLMResponse(content="", finish_reason="stop"),
    # A request the server rejects is the agent's failure (an outage is not: see below).
    "llm_error": LLMCallError("context too long", kind="bad_request"),
    "other_error": RuntimeError("boom"),
}


@pytest.mark.parametrize("case", sorted(REPLIES))
def test_simple_and_langgraph_policies_agree(case: str) -> None:
    actions = []
    for cls in POLICIES:
        policy = cls(ScriptedGateway(REPLIES[case]), model="m", force_tool=True, master_seed=7)
        actions += [decide(policy), adecide(policy)]
    assert all(a == actions[0] for a in actions[1:])
    assert actions[0].metadata["model"] == "m"


def test_fallbacks_carry_their_reasons() -> None:
    def meta(case: str) -> dict[str, Any]:
        action = decide(SimpleCognitivePolicy(ScriptedGateway(REPLIES[case]), model="m"))
        assert action.action_name in {"noop", "post_message", "emit_event"}
        return action.metadata

    assert meta("json_text")["parse_path"] == "json_text"
    assert meta("unknown_tool")["fallback_reason"] == "unknown tool 'dance'"
    assert meta("bad_args")["fallback_reason"].startswith("bad arguments: post_message: ")
    assert meta("tool_call_error") == {
        "parse_path": "fallback",
        "fallback_reason": "truncated tool call (finish_reason length)",
        "tool_call_error": "bad",
        "model": "m",
        "finish_reason": "length",
    }
    assert meta("empty")["fallback_reason"] == "empty reply"


@pytest.mark.parametrize("cls", POLICIES)
@pytest.mark.parametrize("case", ["llm_error", "other_error"])
def test_gateway_error_becomes_noop(cls: type, case: str) -> None:
    policy = cls(ScriptedGateway(REPLIES[case]), model="m")
    for action in (decide(policy), adecide(policy)):
        assert action.action_name == "noop"
        assert action.arguments == {}
        assert action.reasoning is None
        assert action.metadata["parse_path"] == "fallback"
        assert action.metadata["fallback_reason"].startswith("llm error: ")
        assert action.metadata["finish_reason"] is None
    expected = {
        "llm_error": "llm error: LLMCallError: context too long",
        "other_error": "llm error: RuntimeError: boom",
    }[case]
    assert action.metadata["fallback_reason"] == expected


@pytest.mark.parametrize("cls", POLICIES)
def test_an_outage_is_raised_not_a_fallback_unless_asked(cls: type) -> None:
    from vivarium.gateways.base import LLMUnavailable, reset_on_llm_error, set_on_llm_error

    outage = LLMCallError("rate limited (after 3 attempts)", kind="rate_limit", retryable=True)
    policy = cls(ScriptedGateway(outage), model="m")
    for call in (decide, adecide):
        with pytest.raises(LLMUnavailable, match=r"^rate limited \(after 3 attempts\)"):
            call(policy)
    token = set_on_llm_error("fallback")  # what the engine sets for on_llm_error="fallback"
    try:
        action = decide(policy)
    finally:
        reset_on_llm_error(token)
    assert action.action_name == "noop" and action.metadata["parse_path"] == "fallback"
    assert (
        action.metadata["fallback_reason"]
        == "llm error: LLMCallError: rate limited (after 3 attempts)"
    )


def test_metadata_has_no_latency_or_cache_state() -> None:
    reply = tool_reply("noop").model_copy(update={"cache_hit": True, "cost": 0.1})
    action = decide(SimpleCognitivePolicy(ScriptedGateway(reply), model="m"))
    assert set(action.metadata) == {"parse_path", "model", "finish_reason"}


# -- the request -------------------------------------------------------------------------------
def tool_choice_for(force: bool | str, tools: list[str] | None = None) -> Any:
    gateway = ScriptedGateway(tool_reply("noop"))
    decide(SimpleCognitivePolicy(gateway, model="m", force_tool=force, tools=tools))
    return gateway.requests[-1].tool_choice


def test_force_tool_sets_tool_choice() -> None:
    forced = {"type": "function", "function": {"name": "post_message"}}
    assert tool_choice_for(False) == "auto"
    assert tool_choice_for(True) == forced
    assert tool_choice_for("post_message") == forced
    assert tool_choice_for("emit_event") == {"type": "function", "function": {"name": "emit_event"}}
    assert tool_choice_for(True, ["emit_event", "noop"]) == {
        "type": "function",
        "function": {"name": "emit_event"},  # no post_message: the first offered but noop
    }
    assert tool_choice_for("post_message", ["noop"]) == "auto"  # not offered: never forced


@pytest.mark.parametrize("cls", POLICIES)
def test_request_fields(cls: type) -> None:
    gateway = ScriptedGateway(tool_reply("noop"))
    policy = cls(
        gateway,
        CognitivePolicyConfig(model="m", temperature=0.5, max_tokens=64, seed=11),
        tools=["post_message", "noop"],
    )
    decide(policy)
    request = gateway.requests[-1]
    assert (request.model, request.temperature, request.max_tokens, request.seed) == (
        "m",
        0.5,
        64,
        11,
    )
    assert [t["function"]["name"] for t in request.tools or []] == ["noop", "post_message"]
    assert request.tools == CHANNEL_ACTIONS.tool_specs(["noop", "post_message"])
    assert [m["role"] for m in request.messages] == ["system", "user"]


def test_tools_option_limits_what_the_model_may_do() -> None:
    policy = SimpleCognitivePolicy(
        ScriptedGateway(tool_reply("emit_event", value=1)), model="m", tools=["noop"]
    )
    action = decide(policy)
    assert action.action_name == "noop"
    assert action.metadata["fallback_reason"] == "unknown tool 'emit_event'"


def test_seed_is_configured_or_derived_per_agent() -> None:
    def seed(**kw: Any) -> int | None:
        gateway = ScriptedGateway(tool_reply("noop"))
        decide(SimpleCognitivePolicy(gateway, model="m", **kw), agent_id="agent_004")
        return gateway.requests[-1].seed

    assert seed() is None
    assert seed(seed=3, master_seed=9) == 3
    derived = seed(master_seed=9)
    assert derived == derive_seed(9, "agent_004") & 0x7FFFFFFF
    assert derived == seed(master_seed=9)
    assert derived != seed(master_seed=10)


def test_no_tools_means_no_tool_choice() -> None:
    gateway = ScriptedGateway(LLMResponse(content="nothing to do"))
    action = decide(SimpleCognitivePolicy(gateway, model="m"), {**OBS, "tools": ()})
    assert (gateway.requests[-1].tools, gateway.requests[-1].tool_choice) == (None, None)
    assert action.action_name == "noop"


def test_requests_are_deterministic() -> None:
    hashes = set()
    for cls in (*POLICIES, *POLICIES):
        gateway = ScriptedGateway(tool_reply("noop"))
        decide(cls(gateway, model="m", force_tool=True, master_seed=1))
        hashes.add(gateway.requests[-1].request_hash())
    assert len(hashes) == 1


# -- the prompt --------------------------------------------------------------------------------
def test_prompt_lists_messages_tools_and_step() -> None:
    system, user = build_messages(OBS, agent_id="agent_001")
    assert system["role"] == "system" and "agent_" not in system["content"]
    assert "exactly one" in system["content"]
    text = user["content"]
    # The shared part first (tools, step, messages), then the agent's own part, then the ask.
    assert text.index("Available tools:") < text.index("Current step: 3.")
    assert text.index("agent_002: hi there") < text.index("You are agent_001.")
    assert text.rstrip().endswith(JSON_HINT)
    assert text.index("You are agent_001.") < text.index("Call exactly one tool.")
    assert "[t=1] agent_000: hello\n[t=2] agent_002: hi there" in text
    assert "Current step: 3." in text
    assert "- post_message(content): Post a message that every agent will see." in text
    assert "- emit_event(value, seen_time_step?):" in text
    assert "- noop(): Do nothing this step." in text
    assert text.index("agent_000") < text.index("agent_002")
    assert build_messages(OBS, agent_id="agent_001") == [system, user]


def test_agents_of_one_step_share_their_requests_up_to_their_names() -> None:
    """A server's prompt cache serves the shared start once: the system prompt, the tools, the
    step and the messages are the same for every agent; the name comes after them."""
    one = build_messages(OBS, agent_id="agent_001")
    other = build_messages(OBS, agent_id="agent_002")
    assert one[0] == other[0]
    text, other_text = one[1]["content"], other[1]["content"]
    shared = text[: text.index("You are agent_001.")]
    assert other_text.startswith(shared + "You are agent_002.")
    assert len(shared) > len(text) / 2  # most of the prompt is the shared part


def test_a_world_prompt_shows_the_artifacts_before_the_name_and_the_balances_after() -> None:
    obs = {
        "time_step": 4,
        "agent_id": "alpha",
        "balance": 12,
        "artifacts": [{"id": "calculator", "owner": "world", "kind": "executable"}],
        "tools": ["noop"],
    }
    text = build_messages(obs, registry=ECOLOGY_ACTIONS)[1]["content"]
    name = text.index("You are alpha.")
    assert text.index("calculator") < name < text.index("12")


def test_prompt_without_messages_and_custom_system_prompt() -> None:
    obs = {**OBS, "messages": []}
    system, user = build_messages(obs, agent_id="agent_009", system_prompt="{agent_id} {x}")
    assert system["content"] == "agent_009 {x}"
    assert "(no messages yet)" in user["content"]


def test_tool_specs_for_follows_the_observation() -> None:
    specs = tool_specs_for({"tools": ("post_message", "unknown", "noop")})
    assert [s["function"]["name"] for s in specs] == ["post_message", "noop"]
    specs = tool_specs_for(OBS, allowed=["noop"])
    assert [s["function"]["name"] for s in specs] == ["noop"]


# -- async, records, construction --------------------------------------------------------------
@pytest.mark.parametrize("cls", POLICIES)
def test_adecide_uses_achat_concurrently(cls: type) -> None:
    gateway = ScriptedGateway(tool_reply("post_message", content="hey"))
    policy = cls(gateway, model="m")

    async def many() -> list[Any]:
        return await asyncio.gather(
            *(
                policy.adecide(run_id="r", time_step=3, agent_id=f"agent_00{i}", observation=OBS)
                for i in range(5)
            )
        )

    actions = asyncio.run(many())
    assert gateway.async_calls == 5
    assert [a.agent_id for a in actions] == [f"agent_00{i}" for i in range(5)]
    assert all(a.action_name == "post_message" for a in actions)


@pytest.mark.parametrize("cls", POLICIES)
def test_call_records_reach_the_decision(cls: type) -> None:
    policy = cls(ScriptedGateway(tool_reply("noop")), model="m")
    with collect_calls() as records:
        decide(policy)
    assert len(records) == 1

    async def run() -> int:
        with collect_calls() as records:
            await policy.adecide(run_id="r", time_step=3, agent_id="a", observation=OBS)
        return len(records)

    assert asyncio.run(run()) == 1


def test_policy_in_the_channel_world() -> None:
    world = InMemoryChannel()
    world.post(0, "agent_000", "hello")
    policy = CognitiveAgentPolicy(
        ScriptedGateway(tool_reply("post_message", content="hey")), model="m"
    )
    request = policy.decide(
        run_id="r", time_step=1, agent_id="agent_001", observation=world.observe("agent_001", 1)
    )
    assert world.apply(request).success
    assert world.messages[-1] == {"time_step": 1, "author_id": "agent_001", "content": "hey"}


def test_config_validation_and_overrides() -> None:
    config = CognitivePolicyConfig(model="a", max_tokens=10)
    policy = SimpleCognitivePolicy(ScriptedGateway(), config, temperature=0.7)
    assert (policy.config.model, policy.config.max_tokens, policy.config.temperature) == (
        "a",
        10,
        0.7,
    )
    assert SimpleCognitivePolicy(ScriptedGateway(), {"model": "b"}).config.model == "b"
    with pytest.raises(ValidationError):
        CognitivePolicyConfig(model="m", max_tokenz=3)
    with pytest.raises(ValidationError):
        SimpleCognitivePolicy(ScriptedGateway())  # a model is required
    assert CognitivePolicyConfig(model="m", force_tool="post_message").force_tool == "post_message"
    assert CognitivePolicyConfig(model="m", force_tool=True).force_tool is True


def test_default_policy_prefers_langgraph(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = default_cognitive_policy(ScriptedGateway(), "m", force_tool=True)
    assert isinstance(policy, CognitiveAgentPolicy)
    assert policy.config.force_tool is True
    monkeypatch.setitem(sys.modules, "langgraph.graph", None)  # as if not installed
    assert type(default_cognitive_policy(ScriptedGateway(), "m")) is SimpleCognitivePolicy


def test_importing_vivarium_does_not_import_langgraph() -> None:
    code = (
        "import sys, vivarium, vivarium.policies.cognitive, vivarium.metarl;"
        "assert 'langgraph' not in sys.modules, 'langgraph imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _expected_llm_seed(master: int, agent_id: str) -> int:
    import hashlib

    label = f"{master}:llm:{agent_id}".encode()
    return int.from_bytes(hashlib.sha256(label).digest()[:8], "big") & 0x7FFFFFFF


def test_cognitive_agents_record_the_seed_they_send(tmp_path: Any) -> None:
    from vivarium import Experiment

    run = Experiment(
        name="cog", policy="cognitive", agents=2, steps=1, seed=9, llm={"mock": True}
    ).run(tmp_path / "cog.sqlite", progress=False)
    recorded = dict(zip(run.agents["agent_id"], run.agents["seed"], strict=True))
    expected = {a: str(_expected_llm_seed(9, a)) for a in ("agent_000", "agent_001")}
    assert recorded == expected
    # a policy given its own seed sends and records that one
    policy = CognitiveAgentPolicy(None, {"model": "m", "seed": 5})
    assert policy.seed == 5 and policy.request_seed("anyone") == 5


def test_a_shared_policy_records_each_agents_derived_seed(tmp_path: Any) -> None:
    from vivarium import Run, TraceDb, WorldEngine, WorldEngineConfig
    from vivarium.gateways import MockLLMGateway

    policy = SimpleCognitivePolicy(MockLLMGateway(seed=1), {"model": "mock"}, master_seed=3)
    trace = TraceDb(tmp_path / "shared.sqlite")
    engine = WorldEngine(
        WorldEngineConfig(run_id="s"), {"x": policy, "y": policy}, InMemoryChannel(), trace_db=trace
    )
    engine.run(1)
    trace.close()
    agents = Run.open(tmp_path / "shared.sqlite").agents
    expected = {a: str(derive_seed(3, a) & 0x7FFFFFFF) for a in ("x", "y")}
    assert dict(zip(agents["agent_id"], agents["seed"], strict=True)) == expected


class _QuietWorld:
    """A world of one's own whose observations do not list its tools."""

    from vivarium.worlds.registry import ActionRegistry, NoArguments

    registry = ActionRegistry()

    def __init__(self, agent_ids: list[str]) -> None:
        self.rested = dict.fromkeys(agent_ids, 0)

    def observe(self, agent_id: str, time_step: int) -> dict:
        return {"time_step": time_step, "agent_id": agent_id, "rested": self.rested[agent_id]}

    def apply(self, request):  # noqa: ANN001, ANN201
        return self.registry.dispatch(self, request)

    def state_digest(self) -> str:
        return str(sorted(self.rested.items()))


def _rest(world: _QuietWorld, request, args) -> object:  # noqa: ANN001
    from vivarium.types import ActionResult

    world.rested[request.agent_id] += 1
    return ActionResult.ok()


_QuietWorld.registry.action("rest", "Rest for a step.")(_rest)


def test_an_llm_agent_gets_the_worlds_actions_when_the_observation_lists_none(tmp_path) -> None:  # noqa: ANN001
    """The tools an LLM sees come from the world's actions: a world whose observation has no
    ``tools`` key still offers its registry's actions, and the mock calls one of them."""
    from vivarium import Experiment

    run = Experiment(
        world=_QuietWorld,
        policy="cognitive",
        agents=2,
        steps=2,
        llm={"model": "mock", "mock": True, "force_tool": True},
    ).run(tmp_path / "quiet.sqlite", progress=False)
    actions = run.actions
    assert set(actions["action"]) == {"rest"} and actions["success"].all()
    assert not actions["fallback"].any()
