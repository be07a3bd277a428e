"""An LLM policy class of one's own gets the run's gateway, as the built-in cognitive one does.

The new-user pass of issue 16: ``Experiment(policy=Pirate, llm=...)`` with ``Pirate`` a
``CognitiveAgentPolicy`` subclass failed with "missing a required argument: 'gateway'".
"""

from __future__ import annotations

from typing import Any

from vivarium import Experiment
from vivarium.policies.cognitive import CognitiveAgentPolicy
from vivarium.types import ActionRequest

LLM = {"model": "mock", "mock": True, "force_tool": True}
SUFFIX = "\nSPEAK LIKE A PIRATE."


class Pirate(CognitiveAgentPolicy):
    """The built-in policy with one more line in its system prompt."""

    def _build_node(self, state: dict[str, Any]) -> dict[str, Any]:
        out = super()._build_node(state)
        out["plan"].request["messages"][0]["content"] += SUFFIX
        return out


class GatewayOnly:
    """A policy of one's own that takes a gateway (and its agent id), and no config."""

    def __init__(self, gateway: Any, agent_id: str) -> None:
        self.gateway = gateway
        self.agent_id = agent_id

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Post which gateway it was given."""
        kind = "chat" if callable(getattr(self.gateway, "chat", None)) else "none"
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="post_message",
            arguments={"content": f"{self.agent_id}:{kind}"},
        )


def _first_prompts(run: Any) -> list[str]:
    ex = run.llm_exchanges().sort_values(["step", "agent_id"])
    return [req["messages"][0]["content"] for req in ex["request"]]


def test_a_cognitive_subclass_gets_the_runs_gateway_and_config(tmp_path: Any) -> None:
    fields = {"agents": 3, "steps": 2, "seed": 1, "scheduling": "simultaneous", "llm": LLM}
    builtin = Experiment(name="b", policy="cognitive", **fields).run(
        tmp_path / "b.sqlite", progress=False
    )
    pirate = Experiment(name="p", policy=Pirate, **fields).run(
        tmp_path / "p.sqlite", progress=False
    )
    assert pirate.metadata["status"] == "complete" and pirate.health.ok
    expected = [text + SUFFIX for text in _first_prompts(builtin)]
    assert _first_prompts(pirate) == expected and len(expected) == 6
    # the same model and seeds the built-in policy sends (its config: the llm section)
    ex_b, ex_p = builtin.llm_exchanges(), pirate.llm_exchanges()
    assert [r["model"] for r in ex_p["request"]] == [r["model"] for r in ex_b["request"]]
    assert [r.get("seed") for r in ex_p["request"]] == [r.get("seed") for r in ex_b["request"]]
    seeds = lambda run: list(run.agents.sort_values("agent_id")["seed"])  # noqa: E731
    assert seeds(pirate) == seeds(builtin)


def test_a_class_of_ones_own_that_takes_a_gateway_gets_it(tmp_path: Any) -> None:
    run = Experiment(name="g", policy=GatewayOnly, agents=2, steps=1, llm=LLM).run(
        folder=tmp_path, progress=False
    )
    assert sorted(run.messages["content"]) == ["agent_000:chat", "agent_001:chat"]


class OwnClient:
    """Stands for a researcher's own LLM client."""


class MakesItsOwnClient:
    """A policy that builds its own client unless it is given a gateway."""

    def __init__(self, agent_id: str, gateway: Any = None) -> None:
        self.gateway = gateway if gateway is not None else OwnClient()
        self.agent_id = agent_id

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Post the type of the client it uses."""
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="post_message",
            arguments={"content": type(self.gateway).__name__},
        )


def test_a_gateway_with_a_default_is_not_replaced_by_the_mock_without_llm(tmp_path: Any) -> None:
    run = Experiment(name="o", policy=MakesItsOwnClient, agents=2, steps=1).run(
        folder=tmp_path, progress=False
    )
    assert run.metadata["status"] == "complete"
    assert sorted(run.messages["content"]) == ["OwnClient", "OwnClient"]


def test_a_gateway_with_a_default_gets_the_runs_stack_with_llm(tmp_path: Any) -> None:
    run = Experiment(name="o", policy=MakesItsOwnClient, agents=2, steps=1, llm=LLM).run(
        folder=tmp_path, progress=False
    )
    # the stack's outermost layer (built from llm=), not the class's own client
    assert set(run.messages["content"]) == {"RetryGateway"}


def test_a_required_gateway_without_llm_gets_the_stack_the_builtin_policy_would(
    tmp_path: Any,
) -> None:
    # as policy="cognitive" without llm= runs on the mock stack, so does a class that needs one
    run = Experiment(name="g", policy=GatewayOnly, agents=2, steps=1).run(
        folder=tmp_path, progress=False
    )
    assert sorted(run.messages["content"]) == ["agent_000:chat", "agent_001:chat"]
