"""The World contract: what the engine asks of a world, and when.

A world is anything with the three methods of ``World``; nothing needs to inherit from
anything. Everything else a world may do is an optional capability, one small protocol each,
which the engine looks for once, when a run is built (a world that has half of a capability,
say ``snapshot`` without ``restore``, is refused there with a one-line error):

| protocol              | methods                            | the engine then                     |
|-----------------------|------------------------------------|-------------------------------------|
| `World`               | observe, apply, state_digest       | steps it (required)                 |
| `NamedWorld`          | name                               | records that name                   |
| `ActionWorld`         | registry                           | hands LLM policies its tool specs   |
| `MessagingWorld`      | take_messages                      | records the messages of each step   |
| `CheckpointableWorld` | snapshot, restore                  | checkpoints it and resumes it       |
| `LLMQuotaWorld`       | over_llm_quota, record_llm_usage   | bars agents over their token quota  |
| `BatchWorld`          | batch_actions, apply_batch         | applies a whole step in one call    |
| `ModelReportingWorld` | model_reporters                    | records them after every step       |
| `AgentReportingWorld` | agent_reporters                    | records them after every step       |
| `AgentListWorld`      | agent_ids                          | aligns agent reporters with it      |

The figures ask for more, never the engine (``vivarium.analysis.world_view``, the panel):

| protocol              | members                            | the world view then                 |
|-----------------------|------------------------------------|-------------------------------------|
| `GridWorld`           | grid (a `PositionedWorld`)         | draws each agent on its grid cell   |
| `PositionedWorld`     | positions                          | the same, from the world itself     |
| `SizedWorld`          | width, height (of it or its grid)  | draws a grid of that size           |

And the documentation (``vivarium.worlds.docs.describe``, the docs site's worlds page) reads
`DocumentedWorld` (``OBSERVATION_KEYS``) and `ActionWorld`.

Each protocol is checked once, where the world enters (``vivarium.engine.capabilities`` when a
run is built, ``vivarium.protocols.implements``), never probed for by name afterwards.

One step, as the engine runs it:

```text
for each agent, in commit order:           # sorted ids, or a seeded shuffle
    reason = world.over_llm_quota(id)      # LLMQuotaWorld: None lets the agent decide
    obs = world.observe(id, t)
    request = policy.decide(..., observation=obs)
    world.record_llm_usage(id, tokens)     # LLMQuotaWorld, when the decision called a model
    result = world.apply(request)          # an exception here is recorded, not raised
messages = world.take_messages()           # MessagingWorld
digest = world.state_digest()              # chained into the step's state hash
```

With batch decisions (``BatchWorld`` plus a policy class that implements
``vivarium.policies.base.BatchPolicy``) the loop is replaced by one call each: the policies
decide every agent's action as columns (``BatchDecisions``), the world applies them and
answers with the outcomes as columns (``BatchOutcomes``), and the engine stores the columns
as they are. Rows must be exactly what the per-agent loop would have stored.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from vivarium.trace.records import encode_column
from vivarium.types import ActionRequest, ActionResult
from vivarium.worlds.observation import ObservationKey

if TYPE_CHECKING:
    from vivarium.worlds.registry import ActionRegistry

MessageRow = tuple[int, str, str, str]
"""A message as the trace stores it: (seq within the step, author id, channel, content)."""


@runtime_checkable
class World(Protocol):
    """The methods every world has. The engine refuses a world without one of them."""

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        """What ``agent_id`` sees at ``time_step``, just before it decides.

        Called once per deciding agent and step (sequential scheduling: after the agents
        before it in commit order have acted; simultaneous: before anyone acts this step).

        Returns:
            A JSON-like dict handed to the policy as its ``observation``.
        """
        ...

    def apply(self, request: ActionRequest) -> ActionResult:
        """Carry out one agent's action, in commit order, and say how it went.

        An invalid action is a failed ``ActionResult`` with its reason, not an exception; an
        exception is still caught and recorded as a failure (``world error: ...``).

        Returns:
            The outcome recorded with the action (success, result, error).
        """
        ...

    def state_digest(self) -> str:
        """A short text that changes whenever the world's state does.

        Called once at the end of every step; it is chained into the step's state hash, so
        two runs with the same digests and rows have the same hashes.

        Returns:
            A deterministic string (no ids of objects, no wall clock).
        """
        ...


@runtime_checkable
class NamedWorld(Protocol):
    """A world with a name (``"channel"``): recorded with the run and shown to LLM agents."""

    name: str


@runtime_checkable
class ActionWorld(Protocol):
    """A world whose actions are listed in an ``ActionRegistry``.

    When a run is built, the engine hands the registry to every policy that describes actions
    to a model (``vivarium.policies.base.UsesWorldActions``): the tool specs it shows come
    from here, and a tool the world lacks is refused before the first step.
    """

    registry: ActionRegistry


@runtime_checkable
class MessagingWorld(Protocol):
    """A world where agents post messages, which the trace records."""

    def take_messages(self) -> list[MessageRow]:
        """The messages posted since the last call; called once at the end of every step.

        Returns:
            (seq, author id, channel, content) rows, seq counting from 0 within the step.
        """
        ...


@runtime_checkable
class CheckpointableWorld(Protocol):
    """A world whose state can be saved in a checkpoint and restored to resume a run."""

    def snapshot(self) -> Any:
        """The world's whole state after the last committed step.

        Called at each checkpoint (``checkpoint_every``), between steps.

        Returns:
            A JSON-serialisable value that ``restore`` accepts.
        """
        ...

    def restore(self, state: Any) -> None:
        """Become the world ``snapshot`` saved (called on a fresh world, before resuming)."""
        ...


@runtime_checkable
class LLMQuotaWorld(Protocol):
    """A world that budgets each agent's LLM tokens (the ecology's ``llm_tokens`` quota)."""

    def over_llm_quota(self, agent_id: str) -> str | None:
        """Why ``agent_id`` may not call a model this step, or None when it may.

        Called before the agent decides. A reason bars the agent for the step: no model call
        is made, the world sees no action, and the row records the reason.
        """
        ...

    def record_llm_usage(self, agent_id: str, tokens: int) -> None:
        """Charge ``tokens`` (prompt + completion) to ``agent_id``.

        Called after a decision that called a model, before its action is applied.
        """
        ...


@dataclass(frozen=True, slots=True)
class BatchDecisions:
    """Every agent's decision for one step, as columns in commit order.

    Row ``i`` is the decision of the ``i``-th agent in commit order. The text columns are
    stored as they are, so they must be exactly what the per-agent path stores: a compact
    JSON array (``vivarium.trace.records.encode_column``) of each row's value, where a
    request's arguments (or metadata) is the canonical JSON of the dict, or null when empty.

    Attributes:
        time_step: The step decided.
        action_names: The actions the codes refer to.
        codes: Per row, the index of its action in ``action_names`` (a numpy integer array
            for speed; any sequence of ints works).
        arguments: The stored ``arguments`` column, or None when no row has arguments.
        reasoning: The stored ``reasoning`` column, or None when no row has any.
        metadata: The stored ``metadata`` column, or None when no row has any.
        extra: Anything else the world needs to apply the rows, as the policy class and the
            world agree (say, one argument as a numpy array, so the world need not parse the
            JSON back); the engine never reads it.
    """

    time_step: int
    action_names: tuple[str, ...]
    codes: Sequence[int]
    arguments: str | None = None
    reasoning: str | None = None
    metadata: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """How many rows chose each action (every name of ``action_names``, 0 included)."""
        import numpy as np

        counts = np.bincount(
            np.asarray(self.codes, dtype=np.int64), minlength=len(self.action_names)
        )
        return dict(zip(self.action_names, counts.tolist(), strict=True))


@dataclass(frozen=True, slots=True)
class BatchOutcomes:
    """What the world made of a ``BatchDecisions``: the outcome columns, in the same rows.

    Attributes:
        success: The stored ``success`` column: a JSON array of 1 and 0.
        result: The stored ``result`` column (each row's canonical JSON or null), or None.
        error: The stored ``error`` column (each row's reason or null), or None.
    """

    success: str
    result: str | None = None
    error: str | None = None

    @staticmethod
    def all_succeeded(rows: int) -> BatchOutcomes:
        """The outcomes of ``rows`` actions that all succeeded with no result."""
        return _all_succeeded(rows)


@functools.lru_cache(maxsize=8)
def _all_succeeded(rows: int) -> BatchOutcomes:
    # The same text for every step of a run: built once per size.
    return BatchOutcomes(success=encode_column([1] * rows) or "[]")


@runtime_checkable
class BatchWorld(Protocol):
    """A world that applies a whole step of decisions at once (the fast path of a run).

    The engine uses it when the policies' class can decide for every agent at once
    (``vivarium.policies.base.BatchPolicy``), every agent acts this step, and the run allows
    it (``batch=True``). The result must be exactly what applying the same decisions one
    by one, in commit order, would have done, row for row and byte for byte.
    """

    def batch_actions(self) -> frozenset[str]:
        """The actions ``apply_batch`` can apply; asked once, before the first batch step.

        Returns:
            Action names. Batch policies whose actions are not all among them decide one
            agent at a time instead.
        """
        ...

    def apply_batch(self, decisions: BatchDecisions, agent_ids: Sequence[str]) -> BatchOutcomes:
        """Apply every row of ``decisions``, in order, and return their outcomes.

        Called once per batch step, after the policies decided.

        Args:
            decisions: One row per agent, in commit order.
            agent_ids: The agent of each row.

        Returns:
            The outcome columns, one row per decision, in the same order.
        """
        ...


Reporter = Callable[[Any], Any]
"""A reporter: called with the world after every step, it returns a value to record."""


@runtime_checkable
class ModelReportingWorld(Protocol):
    """A world that records values about itself after every step (Mesa's model reporters).

    ``{"gini": lambda world: gini(world.wealth)}``: each is called with the world once before
    step 0 and after every step, and returns one value (a number, bool, string or anything JSON
    holds). See ``vivarium.engine.reporters``.
    """

    model_reporters: Mapping[str, Reporter]


@runtime_checkable
class AgentReportingWorld(Protocol):
    """A world that records a value per agent after every step (Mesa's agent reporters).

    ``{"wealth": lambda world: world.wealth}``: each returns one value per agent, a sequence in
    the world's agent order (``AgentListWorld``, else the run's sorted agent ids) or a mapping
    agent id -> value.
    """

    agent_reporters: Mapping[str, Reporter]


@runtime_checkable
class AgentListWorld(Protocol):
    """A world that keeps its own list of its agents: the order its agent reporters follow.

    Read again at every step (a world may reorder its list, as Mesa's models shuffle theirs);
    None means no list for now (the run's order).
    """

    agent_ids: Sequence[str] | None


@runtime_checkable
class PositionedWorld(Protocol):
    """A world (or its grid) that says where each agent stands on a grid of cells."""

    def positions(self) -> Mapping[str, tuple[int, int]]:
        """Each agent's cell, ``agent_id -> (x, y)``; several agents may share a cell."""
        ...


@runtime_checkable
class GridWorld(Protocol):
    """A world whose agents stand on a grid (``vivarium.worlds.grid.Grid``).

    Its ``grid`` is drawn when it is a ``PositionedWorld`` (has ``positions()``); any other
    ``grid`` (an array of cells, say) is the world's own business.
    """

    grid: Any


@runtime_checkable
class SizedWorld(Protocol):
    """A world (or its grid) ``width`` cells wide and ``height`` high (integers)."""

    width: int
    height: int


@runtime_checkable
class DocumentedWorld(Protocol):
    """A world that declares the keys of its observations (``vivarium.worlds.observation``).

    Read by ``vivarium.worlds.docs.describe`` and the docs site's worlds page, of the class or
    of an instance.
    """

    OBSERVATION_KEYS: Sequence[ObservationKey]


def world_name(world: object) -> str:
    """The name recorded for a world: its ``name`` (``NamedWorld``), else its class name."""
    if isinstance(world, NamedWorld) and world.name:
        return str(world.name)
    return type(world).__name__
