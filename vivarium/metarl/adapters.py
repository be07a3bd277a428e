"""Adapters both ways: a MetaRLGym agent as a Vivarium policy, a Vivarium policy as an agent.

- ``AgentPolicyAdapter`` runs an agent as a policy. It stays pure: the agent state comes in
  through the observation (``"agent_state"``) and goes out in
  ``ActionRequest.metadata["agent_state"]``, so the engine owns, records and checkpoints it.
- ``PolicyAgent`` runs a Vivarium policy (an LLM policy, say) as a MetaRLGym agent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from vivarium.gateways.base import LLMResponse
from vivarium.metarl.agent import Agent
from vivarium.policies.parsing import FALLBACK_ACTION, ParsedAction, parse_action
from vivarium.policies.prompting import arg_models_for, available_tools, default_registry
from vivarium.types import ActionRequest
from vivarium.worlds.registry import ActionRegistry

# -- a MetaRLGym agent as a Vivarium policy ----------------------------------------------------
ADAPTER_SYSTEM_PROMPT = (
    "You are {agent_id}, one of several agents in a shared message channel. "
    "Reply with the text to post."
)


def observation_to_chat(
    observation: Mapping[str, Any], agent_id: str, system_prompt: str | None = None
) -> list[dict[str, str]]:
    """Chat messages for an observation, as a MetaRLGym agent reads them.

    The agent's own posts become ``assistant`` turns, everyone else's ``user`` turns prefixed
    with the author (``agent_001: hello``). The system prompt names the other actions when the
    observation offers more than ``post_message``.

    Args:
        observation: A channel observation (``messages``, ``tools``).
        agent_id: The agent the chat is for.
        system_prompt: Replaces ``ADAPTER_SYSTEM_PROMPT``; ``{agent_id}`` is filled in.

    Returns:
        The chat, system message first.
    """
    tools = available_tools(observation)
    system = (system_prompt or ADAPTER_SYSTEM_PROMPT).replace("{agent_id}", agent_id)
    others = [t for t in tools if t != "post_message"]
    if others:
        system += (
            ' To take another action, reply with JSON: {"action": "<name>", "arguments": {...}}.'
            f" Actions: {', '.join(tools)}."
        )
    chat = [{"role": "system", "content": system}]
    for m in observation.get("messages") or []:
        author, content = str(m.get("author_id")), str(m.get("content"))
        if author == agent_id:
            chat.append({"role": "assistant", "content": content})
        else:
            chat.append({"role": "user", "content": f"{author}: {content}"})
    return chat


def text_to_action(
    text: str, allowed: Sequence[str], arg_models: Mapping[str, type[BaseModel]] | None = None
) -> ParsedAction:
    """The action a free-text reply stands for.

    A valid JSON action in the text wins; else the text is posted as is (when ``post_message``
    is allowed); else the reply becomes ``noop`` with the reason in its metadata.

    Args:
        text: The agent's reply.
        allowed: The action names the agent may take.
        arg_models: Argument schemas to check a JSON action against, by action name.

    Returns:
        The parsed action; ``metadata["parse_path"]`` says which rule applied.
    """
    parsed = parse_action(LLMResponse(content=text), allowed, arg_models)
    if parsed.metadata["parse_path"] != "fallback":
        return parsed
    content = text.strip()
    if content and "post_message" in allowed:
        return ParsedAction(
            action_name="post_message",
            arguments={"content": content},
            reasoning=parsed.reasoning,
            metadata={"parse_path": "plain_text"},
        )
    reason = parsed.metadata["fallback_reason"] if content else "empty reply"
    if content and reason == "no action found":
        reason = "plain text but post_message is not available"
    return ParsedAction(
        action_name=FALLBACK_ACTION,
        reasoning=parsed.reasoning,
        metadata={"parse_path": "fallback", "fallback_reason": reason},
    )


def _detached_json(value: Any) -> Any:
    """A JSON round trip: proves the state can be recorded and shares nothing with the agent."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"agent_state must be JSON-serialisable: {exc}") from exc


class AgentPolicyAdapter:
    """A MetaRLGym ``Agent`` as a Vivarium policy (``decide``), with the state kept outside."""

    name = "metarl"
    uses_agent_state = True  # the engine passes observation["agent_state"] and keeps the new one

    def __init__(
        self,
        agent: Agent,
        *,
        registry: ActionRegistry | None = None,
        system_prompt: str | None = None,
    ) -> None:
        self.agent = agent
        self._own_registry = registry is not None
        self.registry = registry or default_registry()
        self.system_prompt = system_prompt

    def use_world_actions(self, registry: ActionRegistry, world: str) -> None:
        """Check replies' arguments with the registry of the world the agent acts in.

        Called when a run is built; a registry given to the constructor is kept.
        """
        if not self._own_registry:
            self.registry = registry

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Ask the wrapped agent for its reply and turn it into an action.

        The agent state comes from ``observation["agent_state"]`` and the new one goes out in
        the request's ``metadata["agent_state"]``, both as detached JSON copies.

        Raises:
            TypeError: The agent state is not JSON-serialisable.
        """
        state = _detached_json(observation.get("agent_state"))
        chat = observation_to_chat(observation, agent_id, self.system_prompt)
        text, new_state = self.agent.get_action(chat, state)
        tools = available_tools(observation)
        parsed = text_to_action(str(text), tools, arg_models_for(tools, self.registry))
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=parsed.action_name,
            arguments=parsed.arguments,
            reasoning=parsed.reasoning,
            metadata={**parsed.metadata, "agent_state": _detached_json(new_state)},
        )


# -- a Vivarium policy as a MetaRLGym agent ----------------------------------------------------
def action_text(request: ActionRequest) -> str:
    """What an action says: a posted message's content, else the action name."""
    content = request.arguments.get("content")
    return content if isinstance(content, str) else request.action_name


class PolicyAgent(Agent):
    """A Vivarium policy as a MetaRLGym ``Agent``.

    Chat messages become channel messages (``assistant`` turns are this agent's, other roles are
    authors named by their role); the step is the number of turns taken. The agent state goes
    to the policy as ``observation["agent_state"]`` and comes back from
    ``metadata["agent_state"]`` when the policy returns one (an ``AgentPolicyAdapter`` does).
    """

    def __init__(
        self,
        policy: Any,
        *,
        agent_id: str = "agent_000",
        run_id: str = "metarl",
        tools: Sequence[str] = ("post_message",),
    ) -> None:
        self.policy = policy
        self.agent_id = agent_id
        self.run_id = run_id
        self.tools = tuple(tools)

    def observation(self, messages: list[dict[str, Any]], agent_state: Any) -> dict[str, Any]:
        """The channel observation the policy sees for a chat (the step is the turns taken)."""
        channel: list[dict[str, Any]] = []
        turns = 0
        for m in messages:
            role = str(m.get("role", "user"))
            content = str(m.get("content") or "")
            if role == "assistant":
                channel.append({"time_step": turns, "author_id": self.agent_id, "content": content})
                turns += 1
            else:
                step = max(turns - 1, 0)  # a reply belongs to the step it answers
                channel.append({"time_step": step, "author_id": role, "content": content})
        return {
            "time_step": turns,
            "agent_id": self.agent_id,
            "messages": channel,
            "tools": self.tools,
            "agent_state": agent_state,
        }

    def get_action(
        self, messages: list[dict[str, Any]], agent_state: Any = None, **kwargs: Any
    ) -> tuple[str, Any]:
        """The policy's decision as text, and the agent state it returned (else the same)."""
        observation = self.observation(messages, agent_state)
        request = self.policy.decide(
            run_id=self.run_id,
            time_step=observation["time_step"],
            agent_id=self.agent_id,
            observation=observation,
        )
        return action_text(request), request.metadata.get("agent_state", agent_state)
