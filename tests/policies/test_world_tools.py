"""LLM agents act with the tools of the world they are in, not only the channel's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted import ScriptedGateway
from vivarium import Experiment
from vivarium.errors import ConfigError
from vivarium.gateways.base import LLMResponse, ToolCall
from vivarium.policies.cognitive import SimpleCognitivePolicy
from vivarium.worlds.ecology import ECOLOGY_ACTIONS, EcologyWorld

ECOLOGY_TOOLS = [
    "noop",
    "read_artifact",
    "write_artifact",
    "invoke_artifact",
    "post_message",
    "transfer_scrip",
]
BULLETIN = {"id": "bulletin", "content": "Welcome to the ecology."}


def ecology(steps: int = 2, agents: int = 1, **llm: Any) -> Experiment:
    return Experiment(
        name="eco-llm",
        world="ecology",
        policy="cognitive",
        agents=agents,
        steps=steps,
        seed=3,
        llm={"mock": True, **llm},
        world_options={"seed_artifacts": [BULLETIN]},
    )


def tool_call(name: str, **arguments: Any) -> LLMResponse:
    return LLMResponse(
        tool_calls=[ToolCall(id="c1", name=name, arguments=arguments)], finish_reason="tool_calls"
    )


def offered(request: Any) -> list[str]:
    return [t["function"]["name"] for t in request.tools or []]


@pytest.mark.parametrize("graph", [True, False])
def test_a_reply_with_write_artifact_creates_the_artifact(graph: bool) -> None:
    gateway = ScriptedGateway(tool_call("write_artifact", artifact_id="notes", content="hi"))
    engine = ecology(steps=1, graph=graph).build(None, {"gateway": gateway})
    engine.run(1)
    assert offered(gateway.requests[0]) == ECOLOGY_TOOLS
    # the arguments are described with the ecology's own schemas
    spec = next(t for t in gateway.requests[0].tools if t["function"]["name"] == "write_artifact")
    assert "artifact_id" in spec["function"]["parameters"]["properties"]
    world = engine.world
    assert world.artifacts["notes"].owner == "agent_000"
    assert world.artifacts["notes"].content == "hi"


def test_the_prompt_shows_what_the_ecology_observation_holds() -> None:
    gateway = ScriptedGateway(tool_call("noop"))
    ecology(steps=1).build(None, {"gateway": gateway}).run(1)
    user = gateway.requests[0].messages[1]["content"]
    assert "bulletin" in user  # the artifact listing, so the agent can name what to read
    # agent_ecology 599d43d3 build_prompt: the balance is shown in its own section (issue 13)
    assert "## Balances\n- You: 100 scrip" in user
    assert "read_artifact(artifact_id)" in user


def test_forcing_read_artifact_reads_it() -> None:
    gateway = ScriptedGateway(tool_call("read_artifact", artifact_id="bulletin"))
    engine = ecology(steps=1, force_tool="read_artifact").build(None, {"gateway": gateway})
    engine.run(1)
    choice = gateway.requests[0].tool_choice
    assert choice == {"type": "function", "function": {"name": "read_artifact"}}
    result = engine.world.observe("agent_000", 1)["last_action_result"]
    assert result == {
        "action": "read_artifact",
        "success": True,
        "reason": "read bulletin (23 bytes)",
    }


def test_forcing_read_artifact_with_the_mock_records_read_artifact(tmp_path: Path) -> None:
    run = ecology(steps=3, agents=2, force_tool="read_artifact").run(tmp_path / "t.sqlite")
    assert set(run.actions["action"]) == {"read_artifact"}
    assert len(run.llm_calls) == 6


def test_force_tool_true_defaults_to_the_worlds_own_choice() -> None:
    gateway = ScriptedGateway(tool_call("noop"))
    ecology(steps=1, force_tool=True).build(None, {"gateway": gateway}).run(1)
    assert gateway.requests[0].tool_choice == {
        "type": "function",
        "function": {"name": ECOLOGY_ACTIONS.default_tool},
    }
    assert ECOLOGY_ACTIONS.default_tool == "write_artifact"


def test_force_tool_true_in_the_channel_is_still_post_message() -> None:
    gateway = ScriptedGateway(tool_call("noop"))
    exp = Experiment(policy="cognitive", agents=1, steps=1, llm={"mock": True, "force_tool": True})
    exp.build(None, {"gateway": gateway}).run(1)
    assert gateway.requests[0].tool_choice["function"]["name"] == "post_message"
    assert offered(gateway.requests[0]) == ["noop", "emit_event", "post_message"]


def test_force_tool_naming_an_action_the_world_lacks_is_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        ecology(force_tool="emit_event").build(None, {"gateway": ScriptedGateway()})
    message = str(err.value)
    assert "\n" not in message
    assert "force_tool" in message and "'emit_event'" in message and "ecology" in message


def test_force_tool_outside_the_action_space_is_one_line() -> None:
    exp = Experiment(
        world="ecology",
        policy="cognitive",
        agents=1,
        steps=1,
        action_space=["noop", "post_message"],
        llm={"mock": True, "force_tool": "read_artifact"},
    )
    with pytest.raises(ConfigError, match="force_tool: 'read_artifact' is not in the action"):
        exp.build(None, {"gateway": ScriptedGateway()})


def test_an_action_space_naming_an_unknown_action_is_one_line() -> None:
    exp = Experiment(
        world="ecology",
        policy="cognitive",
        agents=1,
        steps=1,
        action_space=["noop", "read_artfact"],
        llm={"mock": True},
    )
    with pytest.raises(ConfigError, match="action_space: 'read_artfact' is not an action"):
        exp.build(None, {"gateway": ScriptedGateway()})


def test_a_policy_built_by_hand_takes_the_registry_of_the_world_it_runs_in() -> None:
    from vivarium.engine.engine import WorldEngine, WorldEngineConfig

    gateway = ScriptedGateway(tool_call("read_artifact", artifact_id="bulletin"))
    policy = SimpleCognitivePolicy(gateway, {"model": "m", "force_tool": "read_artifact"})
    world = EcologyWorld(["a"], seed_artifacts=[BULLETIN])
    engine = WorldEngine(WorldEngineConfig(run_id="r", seed=1), {"a": policy}, world)
    engine.run(1)
    assert offered(gateway.requests[0]) == ECOLOGY_TOOLS
    assert world.observe("a", 1)["last_action_result"]["success"] is True


def test_a_policy_built_by_hand_forcing_a_missing_tool_is_refused_when_the_run_is_built() -> None:
    from vivarium.engine.engine import WorldEngine, WorldEngineConfig

    policy = SimpleCognitivePolicy(ScriptedGateway(), {"model": "m", "force_tool": "emit_event"})
    with pytest.raises(ConfigError, match="force_tool: 'emit_event'"):
        WorldEngine(WorldEngineConfig(run_id="r", seed=1), {"a": policy}, EcologyWorld(["a"]))
