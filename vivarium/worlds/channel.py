"""The channel world: a shared message board plus an event counter.

Actions: ``noop``, ``emit_event(value)``, ``post_message(content)``. Observations carry the time
step, the agent id, the last ``message_history_limit`` messages and the tool names; the keys are
declared in ``InMemoryChannel.OBSERVATION_KEYS`` and the actions in ``CHANNEL_ACTIONS``, from
which the docs site's worlds page is drawn (``vivarium.worlds.docs.describe("channel")``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from vivarium.settings import DEFAULT_MESSAGE_HISTORY_LIMIT
from vivarium.types import ActionRequest, ActionResult
from vivarium.worlds.base import BatchDecisions, BatchOutcomes
from vivarium.worlds.observation import ObservationKey
from vivarium.worlds.registry import ActionError, ActionRegistry, NoArguments

MAX_MESSAGE_CHARS = 8000


def _value_shown_as_required(schema: dict[str, Any]) -> None:
    """Keep the tool an LLM sees as it always was: ``value`` required, no default."""
    schema["properties"]["value"].pop("default", None)
    schema["required"] = ["value", *[n for n in schema.get("required", []) if n != "value"]]


# No docstring: pydantic would put it in the tool schema an LLM is shown.
# ``value`` may be left out (None), as the original aam engine's example policy does with
# ``emit_event`` and ``arguments={}``; the tool shown to LLMs still asks for it (unchanged, so
# that recorded LLM requests keep their hashes).
class EmitEventArgs(BaseModel):  # noqa: D101
    model_config = ConfigDict(extra="forbid", json_schema_extra=_value_shown_as_required)
    value: StrictInt = Field(default=None, description="An integer payload for the event.")  # type: ignore[assignment]
    seen_time_step: StrictInt | None = Field(default=None, description="The step the agent saw.")


# No docstring: pydantic would put it in the tool schema an LLM is shown.
class PostMessageArgs(BaseModel):  # noqa: D101
    model_config = ConfigDict(extra="forbid")
    content: str = Field(description="The text to post to the shared channel.")


def _noop(world: InMemoryChannel, request: ActionRequest, args: NoArguments) -> ActionResult:
    return ActionResult.ok()


def _emit_event(
    world: InMemoryChannel, request: ActionRequest, args: EmitEventArgs
) -> ActionResult:
    world.events_emitted += 1
    return ActionResult.ok()


def _post_message(
    world: InMemoryChannel, request: ActionRequest, args: PostMessageArgs
) -> ActionResult:
    content = args.content.strip()
    if not content:
        raise ActionError("post_message needs non-empty content")
    if len(content) > MAX_MESSAGE_CHARS:
        raise ActionError(f"message too long: {len(content)} chars (limit {MAX_MESSAGE_CHARS})")
    world.post(request.time_step, request.agent_id, content)
    return ActionResult.ok({"message_index": len(world.messages) - 1})


CHANNEL_ACTIONS = ActionRegistry(default_tool="post_message")
CHANNEL_ACTIONS.action("noop", "Do nothing this step.")(_noop)
CHANNEL_ACTIONS.action("emit_event", "Emit an event with an integer value.", EmitEventArgs)(
    _emit_event
)
CHANNEL_ACTIONS.action(
    "post_message", "Post a message that every agent will see.", PostMessageArgs
)(_post_message)

# Actions ``apply_batch`` may apply without building requests: they always succeed, with no
# result, and only how many agents took them changes the world.
_BATCHABLE = {"noop": _noop, "emit_event": _emit_event}


class InMemoryChannel:
    """A message board shared by all agents. Worlds are protocols: this one is also a base.

    It implements ``World`` and the capabilities ``NamedWorld``, ``ActionWorld``,
    ``MessagingWorld``, ``CheckpointableWorld`` and ``BatchWorld`` (``noop`` and
    ``emit_event``) of ``vivarium.worlds.base``.
    """

    name = "channel"

    def __init__(
        self,
        message_history_limit: int = DEFAULT_MESSAGE_HISTORY_LIMIT,
        registry: ActionRegistry | None = None,
    ) -> None:
        """An empty board.

        Args:
            message_history_limit: How many of the latest messages an observation shows.
            registry: The actions (default: a copy of ``CHANNEL_ACTIONS``, to extend).
        """
        self.message_history_limit = message_history_limit
        self.registry = registry or CHANNEL_ACTIONS.extend()
        self.messages: list[dict[str, Any]] = []
        self.events_emitted = 0
        self._message_chain = hashlib.sha256()
        self._unrecorded: list[tuple[int, str, str, str]] = []
        self._tools = self.registry.names()

    # What ``observe`` returns, key by key (the docs page and ``describe`` read this).
    OBSERVATION_KEYS: ClassVar[tuple[ObservationKey, ...]] = (
        ObservationKey("time_step", "int", "The step being decided, counting from 0."),
        ObservationKey("agent_id", "str", "The id of the observing agent."),
        ObservationKey(
            "messages",
            "list[dict]",
            "The latest `message_history_limit` messages, oldest first, each "
            "`{time_step, author_id, content}`.",
        ),
        ObservationKey("tools", "tuple[str, ...]", "The names of the world's actions."),
    )

    # -- the world protocol -------------------------------------------------------------------
    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        """The step, the agent's id, the latest messages and the tool names."""
        limit = self.message_history_limit
        return {
            "time_step": time_step,
            "agent_id": agent_id,
            "messages": self.messages[-limit:] if limit > 0 else [],
            "tools": self._tools,
        }

    def apply(self, request: ActionRequest) -> ActionResult:
        """Carry out one action through the registry (a bad one is a failed result)."""
        return self.registry.dispatch(self, request)

    def state_digest(self) -> str:
        """Message and event counts, and a hash chained over every message posted."""
        return (
            f"m{len(self.messages)}:e{self.events_emitted}:{self._message_chain.hexdigest()[:16]}"
        )

    def take_messages(self) -> list[tuple[int, str, str, str]]:
        """Messages posted since the last call, as (seq, author, channel, content) for the trace."""
        out, self._unrecorded = self._unrecorded, []
        return out

    # -- channel operations -------------------------------------------------------------------
    def post(self, time_step: int, author_id: str, content: str, channel: str = "main") -> None:
        """Add a message to the board (and to those the trace records at the step's end)."""
        seq = len(self._unrecorded)  # position within the step, for the trace row id
        self.messages.append({"time_step": time_step, "author_id": author_id, "content": content})
        self._message_chain.update(f"{time_step}\x1f{author_id}\x1f{content}\x1e".encode())
        self._unrecorded.append((seq, author_id, channel, content))

    # -- batch decisions (BatchWorld) ---------------------------------------------------------
    def batch_actions(self) -> frozenset[str]:
        """Actions ``apply_batch`` can take: those whose handlers are still the built-in ones."""
        return frozenset(
            name
            for name, fn in _BATCHABLE.items()
            if (spec := self.registry.get(name)) is not None and spec.handler is fn
        )

    def apply_batch(self, decisions: BatchDecisions, agent_ids: Sequence[str]) -> BatchOutcomes:
        """Apply a step of ``noop`` and ``emit_event`` decisions at once (``BatchWorld``).

        Every one succeeds, and only the number of events changes the world: the random
        agents' fast path.
        """
        self.events_emitted += decisions.counts().get("emit_event", 0)
        return BatchOutcomes.all_succeeded(len(decisions.codes))

    # -- checkpoints --------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The messages and the event count (``CheckpointableWorld``)."""
        return {"messages": list(self.messages), "events_emitted": self.events_emitted}

    def restore(self, state: dict[str, Any]) -> None:
        """Become the board a ``snapshot`` saved, its message hash chain rebuilt."""
        self.messages = []
        self._message_chain = hashlib.sha256()
        for m in state["messages"]:
            self.post(m["time_step"], m["author_id"], m["content"])
        self._unrecorded = []
        self.events_emitted = state["events_emitted"]
