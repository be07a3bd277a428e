"""The ecology world: agents own artifacts, pay each other scrip, and run each other's code.

Everything an agent can touch is an artifact, named by an id:

- ``<agent_id>`` (kind ``agent``, has standing): the agent itself. Its content is a JSON object
  ``{"agent_id", "has_standing", "working_memory"}``. Anyone may read it, but only its owner sees
  ``working_memory``; others get the rest. The owner updates working memory by writing to itself
  (see ``write_artifact``); it is bounded by ``working_memory_max_bytes``.
- ``<agent_id>_memory`` (kind ``memory``): the entries ``{time_step, kind, text}`` the world
  records for the agent (its actions and their outcomes, messages it posted, scrip it received),
  at most ``memory_limit`` of them, oldest dropped. Private: only the owner may read it, and only
  the world writes it.
- any other id (kind ``data``): created by ``write_artifact``; only the owner writes it, anyone
  reads it. An executable artifact holds ``methods`` (name -> safe-eval source: an expression, or
  statements that assign ``result``) that anyone may invoke for its ``price``.

Money is integer scrip in one ``Ledger``: balances never go negative and every move is a single
checked transfer. Invoking a priced artifact charges the invoker and pays the owner atomically,
after the method succeeded; invoking your own artifact is free.

Quotas per agent: disk bytes (the UTF-8 size of content plus method sources of the ``data``
artifacts the agent owns; its own agent and memory artifacts have their own bounds and do not
count) and, when ``llm_token_quota`` is set, LLM tokens reported through ``record_llm_usage``:
an agent over it can only ``noop``, and the engine asks ``over_llm_quota`` before each decision,
so it makes no more model calls.

Every outcome is an ``ActionResult`` with success and, on failure, a one-line reason such as
``not found: artifact 'x'``, ``permission denied: ...``, ``insufficient scrip: need 5, have 2``,
``over quota: disk 70000 bytes > quota 65536 bytes`` or ``over quota: llm tokens ...``.
Successful results carry a ``summary`` line, which is also the ``reason`` agents see in
``last_action_result``.

Observations are JSON-like dicts whose keys, in order, with their types and meanings, are
declared once in ``EcologyWorld.OBSERVATION_KEYS`` (the docs site's worlds page and
``vivarium.worlds.docs.describe("ecology")`` show them; a test checks ``observe()`` against it).

Memory records every action but a successful ``noop``: kind ``action`` (the summary, or
``<what> failed: <reason>``), ``message`` (the text the agent posted) and ``event`` (scrip it
received, by transfer or as the owner of an invoked artifact).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from vivarium import sandbox
from vivarium.errors import ConfigError
from vivarium.memory import AgentMemory, LexicalMemory, MemoryView, frozen_search, memory_entry
from vivarium.seeding import canonical_json
from vivarium.settings import DEFAULT_MESSAGE_HISTORY_LIMIT
from vivarium.types import ActionRequest, ActionResult
from vivarium.worlds.ledger import InsufficientScrip, Ledger
from vivarium.worlds.observation import ObservationKey
from vivarium.worlds.registry import (
    ActionError,
    ActionRegistry,
    NoArguments,
    describe_validation_error,
)

SNAPSHOT_FORMAT = "vivarium.ecology/1"
WORLD_OWNER = "world"  # owner of seed artifacts no agent owns; it has no account
MEMORY_SUFFIX = "_memory"
MAX_MESSAGE_CHARS = 8000
MAX_METHODS = 32
MAX_METHOD_SOURCE_CHARS = 20_000
MAX_MEMORY_TEXT_CHARS = 500
MAX_SUMMARY_VALUE_CHARS = 200
DEFAULT_STARTING_SCRIP = 100  # for agents a starting_scrip mapping leaves out

_ARTIFACT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}")
_METHOD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_AGENT_CONTENT_KEYS = frozenset({"working_memory", "replace", "agent_id", "has_standing"})


def _dumps(value: Any) -> str:
    """Compact JSON that keeps key order (working memory order matters); no NaN or Infinity."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def outcome(action: str, success: bool, reason: str) -> dict[str, Any]:
    """The shape of ``last_action_result`` and of each ``failure_history`` item."""
    return {"action": action, "success": success, "reason": reason}


def history_item(time_step: int, action: str, success: bool) -> dict[str, Any]:
    """The shape of each ``action_history`` item."""
    return {"time_step": time_step, "action": action, "success": success}


# -- artifacts and agents ---------------------------------------------------------------------
ArtifactKind = Literal["agent", "memory", "data"]


@dataclass(slots=True)
class Artifact:
    """Something that can be read, written or invoked. Permissions live here, in one place."""

    id: str
    owner: str
    kind: ArtifactKind = "data"
    content: str = ""
    executable: bool = False
    price: int = 0
    methods: dict[str, str] = field(default_factory=dict)  # name -> source, sorted by name

    @property
    def size(self) -> int:
        """UTF-8 bytes of content plus method sources: what counts against the disk quota."""
        return _nbytes(self.content) + sum(_nbytes(s) for s in self.methods.values())

    def can_read(self, agent_id: str) -> bool:
        """Whether ``agent_id`` may read it: anyone, except a memory artifact (owner only)."""
        return self.kind != "memory" or agent_id == self.owner

    def can_write(self, agent_id: str) -> bool:
        """Whether ``agent_id`` may write it: the owner only, and never a memory (the world's)."""
        return self.kind != "memory" and agent_id == self.owner

    def can_execute(self, agent_id: str) -> bool:
        """Any agent may invoke an executable artifact (paying its price unless it owns it)."""
        return self.executable and self.kind == "data"


@dataclass(slots=True)
class _AgentState:
    working_memory: str = "{}"  # a compact JSON object, keys oldest first
    llm_tokens: int = 0
    memory: list[dict[str, Any]] = field(default_factory=list)
    action_history: list[dict[str, Any]] = field(default_factory=list)
    failure_history: list[dict[str, Any]] = field(default_factory=list)
    last_action_result: dict[str, Any] | None = None
    actions_total: int = 0
    actions_succeeded: int = 0
    # The search index of ``memory`` (not state: built from it on first use, then kept in step).
    index: LexicalMemory | None = None


# -- action arguments -------------------------------------------------------------------------
class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


# No docstring: pydantic would put it in the tool's JSON schema (the prompt an LLM sees).
class ReadArtifactArgs(_Args):  # noqa: D101
    artifact_id: StrictStr = Field(description="The id of the artifact to read.")


# No docstring: pydantic would put it in the tool's JSON schema (the prompt an LLM sees).
class WriteArtifactArgs(_Args):  # noqa: D101
    artifact_id: StrictStr = Field(
        description="The id to create or overwrite (yours only). Your own agent id updates your "
        'working memory: content {"working_memory": {...}} merges keys (null deletes one).'
    )
    content: StrictStr | dict[str, Any] | list[Any] = Field(
        description="The text to store (JSON objects and lists are stored as JSON text)."
    )
    executable: StrictBool = Field(default=False, description="Whether others can invoke it.")
    price: StrictInt = Field(default=0, ge=0, description="Scrip an invocation costs the caller.")
    methods: dict[str, StrictStr] | None = Field(
        default=None,
        description="For executable artifacts: method name -> safe expression, or statements "
        "assigning `result`; they see `args`, `caller`, `owner` and `data` (the content).",
    )


# No docstring: pydantic would put it in the tool's JSON schema (the prompt an LLM sees).
class InvokeArtifactArgs(_Args):  # noqa: D101
    artifact_id: StrictStr = Field(description="The executable artifact to invoke.")
    method: StrictStr = Field(description="The method name.")
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments for the method.")


# No docstring: pydantic would put it in the tool's JSON schema (the prompt an LLM sees).
class PostMessageArgs(_Args):  # noqa: D101
    content: StrictStr = Field(description="The text to post to the shared channel.")


# No docstring: pydantic would put it in the tool's JSON schema (the prompt an LLM sees).
class TransferScripArgs(_Args):  # noqa: D101
    to: StrictStr = Field(description="The agent id to pay.")
    amount: StrictInt = Field(gt=0, description="How much scrip to send.")


class SeedArtifact(_Args):
    """An artifact present from the start (``seed_artifacts``), owned by an agent or the world."""

    id: StrictStr
    content: StrictStr | dict[str, Any] | list[Any] = ""
    owner: StrictStr = WORLD_OWNER
    executable: StrictBool = False
    price: StrictInt = Field(default=0, ge=0)
    methods: dict[str, StrictStr] | None = None


# -- helpers shared by handlers ---------------------------------------------------------------
def _content_text(content: str | dict[str, Any] | list[Any]) -> str:
    if isinstance(content, str):
        return content
    try:
        return _dumps(content)
    except (TypeError, ValueError) as exc:
        raise ActionError(f"content is not JSON-serialisable: {exc}") from None


def _method_mode(source: str) -> Literal["eval", "exec"]:
    """An expression is evaluated; anything else is run as statements that assign ``result``."""
    return "eval" if sandbox.is_expression(source) else "exec"


def _checked_methods(
    executable: bool, price: int, methods: Mapping[str, str] | None
) -> dict[str, str]:
    """The methods of a write, validated and checked by the sandbox; raises ActionError."""
    if not executable:
        if methods:
            raise ActionError("methods need executable=true")
        if price:
            raise ActionError("a price needs executable=true")
        return {}
    if not methods:
        raise ActionError("an executable artifact needs at least one method")
    if len(methods) > MAX_METHODS:
        raise ActionError(f"too many methods: {len(methods)} (limit {MAX_METHODS})")
    checked: dict[str, str] = {}
    for name in sorted(methods):
        source = methods[name]
        if not _METHOD_NAME.fullmatch(name):
            raise ActionError(f"bad method name {name!r}: use a Python identifier")
        if len(source) > MAX_METHOD_SOURCE_CHARS:
            raise ActionError(
                f"method {name!r} too long: {len(source)} chars (limit {MAX_METHOD_SOURCE_CHARS})"
            )
        try:
            sandbox.check(source, _method_mode(source))
        except (ConfigError, ValueError, SyntaxError, RecursionError, MemoryError) as exc:
            raise ActionError(f"unsafe method {name!r}: {exc}") from None
        checked[name] = source
    return checked


def _fit_working_memory(memory: dict[str, Any], max_bytes: int) -> tuple[dict[str, Any], list[str]]:
    """Drop the oldest keys until the compact JSON fits in ``max_bytes``; returns kept, dropped."""
    items = list(memory.items())
    sizes = [_nbytes(_dumps(k)) + 1 + _nbytes(_dumps(v)) for k, v in items]
    total = 2 + sum(sizes) + max(len(items) - 1, 0)
    start = 0
    while total > max_bytes and start < len(items):
        remaining = len(items) - start
        total -= sizes[start] + (1 if remaining > 1 else 0)
        start += 1
    return dict(items[start:]), [k for k, _ in items[:start]]


def _describe(request: ActionRequest) -> str:
    """What the agent tried, in a few words, for its memory of a failure."""
    a = request.arguments if isinstance(request.arguments, dict) else {}
    name = request.action_name
    if name in ("read_artifact", "write_artifact"):
        return f"{name} {a.get('artifact_id')}"
    if name == "invoke_artifact":
        return f"invoke_artifact {a.get('artifact_id')}.{a.get('method')}"
    if name == "transfer_scrip":
        return f"transfer_scrip {a.get('amount')} to {a.get('to')}"
    return name


# -- handlers ---------------------------------------------------------------------------------
def _noop(world: EcologyWorld, request: ActionRequest, args: NoArguments) -> ActionResult:
    return ActionResult.ok({"summary": "did nothing"})


def _read_artifact(
    world: EcologyWorld, request: ActionRequest, args: ReadArtifactArgs
) -> ActionResult:
    art = world.artifact(args.artifact_id)
    reader = request.agent_id
    if not art.can_read(reader):
        raise ActionError(f"permission denied: {art.id} is private to {art.owner}")
    content = world.content_for(art, reader)
    size = _nbytes(content)
    return ActionResult.ok(
        {
            "artifact_id": art.id,
            "owner": art.owner,
            "kind": art.kind,
            "executable": art.executable,
            "price": art.price,
            "size": size,
            "methods": dict(art.methods),
            "content": content,
            "summary": f"read {art.id} ({size} bytes)",
        }
    )


def _write_artifact(
    world: EcologyWorld, request: ActionRequest, args: WriteArtifactArgs
) -> ActionResult:
    writer, target = request.agent_id, args.artifact_id
    existing = world.artifacts.get(target)
    if existing is not None and existing.kind == "memory":
        raise ActionError(f"permission denied: {target} is kept by the world")
    if existing is not None and not existing.can_write(writer):
        raise ActionError(f"permission denied: only {existing.owner} can write {target}")
    if existing is not None and existing.kind == "agent":
        return world.write_working_memory(request, args)
    if existing is None and not _ARTIFACT_ID.fullmatch(target):
        raise ActionError(
            f"bad artifact id {target!r}: start with a letter or digit, then letters, digits "
            "or _ . : - (at most 128)"
        )
    content = _content_text(args.content)
    methods = _checked_methods(args.executable, args.price, args.methods)
    art = Artifact(target, writer, "data", content, args.executable, args.price, methods)
    return world.store(art)


def _invoke_artifact(
    world: EcologyWorld, request: ActionRequest, args: InvokeArtifactArgs
) -> ActionResult:
    art = world.artifact(args.artifact_id)
    caller, method = request.agent_id, args.method
    if not art.can_execute(caller):
        raise ActionError(f"not executable: {art.id}")
    source = art.methods.get(method)
    if source is None:
        known = ", ".join(art.methods)
        raise ActionError(f"not found: method {method!r} of {art.id} (methods: {known})")
    price = 0 if caller == art.owner else art.price
    if price:
        have = world.ledger.balance(caller)
        if have < price:
            raise InsufficientScrip(price, have)
    try:
        call_args = _loads(_dumps(args.args))
    except (TypeError, ValueError) as exc:
        raise ActionError(f"args are not JSON: {exc}") from None
    value = world.run_method(art, method, source, call_args, caller)
    balance = world.ledger.balance(caller)
    if price:
        balance = world.ledger.transfer(caller, art.owner, price, f"invoke {art.id}.{method}")
        world.remember(
            art.owner,
            request.time_step,
            "event",
            f"{caller} invoked {art.id}.{method}: +{price} scrip",
        )
    shown = _clip(_dumps(value), MAX_SUMMARY_VALUE_CHARS)
    return ActionResult.ok(
        {
            "artifact_id": art.id,
            "method": method,
            "result": value,
            "price_paid": price,
            "paid_to": art.owner if price else None,
            "balance": balance,
            "summary": f"invoked {art.id}.{method} for {price} scrip: {shown}",
        }
    )


def _post_message(
    world: EcologyWorld, request: ActionRequest, args: PostMessageArgs
) -> ActionResult:
    content = args.content.strip()
    if not content:
        raise ActionError("post_message needs non-empty content")
    if len(content) > MAX_MESSAGE_CHARS:
        raise ActionError(f"message too long: {len(content)} chars (limit {MAX_MESSAGE_CHARS})")
    index = world.post(request.time_step, request.agent_id, content)
    return ActionResult.ok({"message_index": index, "summary": f"posted message {index}"})


def _transfer_scrip(
    world: EcologyWorld, request: ActionRequest, args: TransferScripArgs
) -> ActionResult:
    sender, to = request.agent_id, args.to
    if not world.is_agent(to):
        raise ActionError(f"not found: agent {to!r}")
    if to == sender:
        raise ActionError("cannot transfer scrip to yourself")
    balance = world.ledger.transfer(sender, to, args.amount, "transfer_scrip")
    world.remember(to, request.time_step, "event", f"received {args.amount} scrip from {sender}")
    return ActionResult.ok(
        {
            "to": to,
            "amount": args.amount,
            "balance": balance,
            "summary": f"sent {args.amount} scrip to {to}",
        }
    )


# force_tool=True makes small models write artifacts: the ecology's economy is built of them.
ECOLOGY_ACTIONS = ActionRegistry(default_tool="write_artifact")
ECOLOGY_ACTIONS.action("noop", "Do nothing this step.")(_noop)
ECOLOGY_ACTIONS.action(
    "read_artifact", "Read an artifact: its content, owner, price and methods.", ReadArtifactArgs
)(_read_artifact)
ECOLOGY_ACTIONS.action(
    "write_artifact",
    "Create or overwrite an artifact you own (counts against your disk quota); writing to your "
    "own agent id updates your working memory.",
    WriteArtifactArgs,
)(_write_artifact)
ECOLOGY_ACTIONS.action(
    "invoke_artifact",
    "Run a method of an executable artifact; you pay its price to the owner if it succeeds.",
    InvokeArtifactArgs,
)(_invoke_artifact)
ECOLOGY_ACTIONS.action(
    "post_message", "Post a message that every agent will see.", PostMessageArgs
)(_post_message)
ECOLOGY_ACTIONS.action(
    "transfer_scrip", "Give some of your scrip to another agent.", TransferScripArgs
)(_transfer_scrip)


# -- the world --------------------------------------------------------------------------------
class EcologyWorld:
    """Agents, artifacts, a ledger and a message board; see the module docstring for the rules.

    The engine applies actions one at a time, but the ledger is safe under threads anyway and
    the world's bookkeeping is guarded by one re-entrant lock (methods run outside it).

    It implements ``World`` and the capabilities ``NamedWorld``, ``ActionWorld``,
    ``MessagingWorld``, ``CheckpointableWorld`` and ``LLMQuotaWorld`` of
    ``vivarium.worlds.base``.
    """

    name = "ecology"

    def __init__(
        self,
        agent_ids: Sequence[str],
        *,
        starting_scrip: Mapping[str, int] | int = 100,
        disk_quota_bytes: int = 65536,
        llm_token_quota: int | None = None,
        total_steps: int = 100,
        message_history_limit: int = DEFAULT_MESSAGE_HISTORY_LIMIT,
        memory_limit: int = 200,
        failure_history_limit: int = 5,
        action_history_limit: int = 10,
        seed_artifacts: Sequence[Mapping[str, Any]] = (),
        working_memory_max_bytes: int = 2048,
        observed_memories: int = 10,
        registry: ActionRegistry | None = None,
    ) -> None:
        """Build the world at time step 0; every option is checked here, before a run starts.

        Args:
            agent_ids: The agents; each gets an agent artifact, a memory artifact and an account.
            starting_scrip: Each agent's starting balance, or a mapping agent -> balance (agents
                it leaves out get ``DEFAULT_STARTING_SCRIP``).
            disk_quota_bytes: Bytes of data artifacts each agent may own.
            llm_token_quota: LLM tokens each agent may spend; None for no limit.
            total_steps: The run's length, for ``time_remaining`` and ``progress_percent``.
            message_history_limit: How many recent messages an observation shows.
            memory_limit: How many memory entries an agent keeps (oldest dropped).
            failure_history_limit: How many recent failures an observation shows.
            action_history_limit: How many recent actions an observation shows.
            seed_artifacts: Artifacts present from the start (see ``SeedArtifact``).
            working_memory_max_bytes: Size bound of each agent's working memory.
            observed_memories: How many recent memory entries an observation shows.
            registry: The actions to offer; by default a copy of ``ECOLOGY_ACTIONS``.

        Raises:
            ConfigError: An option or a seed artifact is invalid.
        """
        ids = [str(a) for a in agent_ids]
        _check_config(ids, locals())
        self.agent_ids: tuple[str, ...] = tuple(ids)
        self.disk_quota_bytes = disk_quota_bytes
        self.llm_token_quota = llm_token_quota
        self.total_steps = total_steps
        self.message_history_limit = message_history_limit
        self.memory_limit = memory_limit
        self.failure_history_limit = failure_history_limit
        self.action_history_limit = action_history_limit
        self.working_memory_max_bytes = working_memory_max_bytes
        self.observed_memories = observed_memories
        self.registry = registry or ECOLOGY_ACTIONS.extend()
        self._tools = self.registry.names()
        self._lock = threading.RLock()
        self.ledger = Ledger(_starting_balances(ids, starting_scrip))
        self.artifacts: dict[str, Artifact] = {}
        self._agents: dict[str, _AgentState] = {a: _AgentState() for a in ids}
        self._messages: list[dict[str, Any]] = []
        self._messages_posted = 0
        self._unrecorded: list[tuple[int, str, str, str]] = []
        self._disk_used: dict[str, int] = {}
        self._sorted_ids: list[str] | None = None
        self._ranking: tuple[int, list[str], dict[str, int], int] | None = None
        for aid in ids:
            self.artifacts[aid] = Artifact(aid, aid, "agent")
            self.artifacts[aid + MEMORY_SUFFIX] = Artifact(aid + MEMORY_SUFFIX, aid, "memory")
        for seed in seed_artifacts:
            self._add_seed(seed)

    def _add_seed(self, raw: Mapping[str, Any]) -> None:
        try:
            seed = SeedArtifact.model_validate(dict(raw))
        except ValidationError as exc:
            raise ConfigError(f"seed_artifacts: {describe_validation_error(exc)}") from None
        where = f"seed_artifacts: {seed.id!r}"
        if seed.id in self.artifacts:
            raise ConfigError(f"{where}: the id is already taken")
        if not _ARTIFACT_ID.fullmatch(seed.id):
            raise ConfigError(f"{where}: bad artifact id")
        if seed.owner != WORLD_OWNER and seed.owner not in self._agents:
            raise ConfigError(f"{where}: owner {seed.owner!r} is neither an agent nor 'world'")
        if seed.owner == WORLD_OWNER and seed.price:
            raise ConfigError(f"{where}: world-owned artifacts must be free (price 0)")
        try:
            methods = _checked_methods(seed.executable, seed.price, seed.methods)
            content = _content_text(seed.content)
        except ActionError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        art = Artifact(seed.id, seed.owner, "data", content, seed.executable, seed.price, methods)
        self.artifacts[art.id] = art
        self._disk_used[art.owner] = self._disk_used.get(art.owner, 0) + art.size

    # What ``observe`` returns, key by key and in this order (the docs page and ``describe``
    # read this; a test checks it against ``observe()``).
    OBSERVATION_KEYS: ClassVar[tuple[ObservationKey, ...]] = (
        ObservationKey("time_step", "int", "The step being decided, counting from 0."),
        ObservationKey("agent_id", "str", "The id of the observing agent."),
        ObservationKey("tools", "tuple[str, ...]", "The names of the world's actions."),
        ObservationKey(
            "messages",
            "list[dict]",
            "The latest `message_history_limit` messages, oldest first, each "
            "`{time_step, author_id, content}`.",
        ),
        ObservationKey("balance", "int", "The agent's scrip."),
        ObservationKey(
            "quotas",
            "dict",
            "The agent's quotas and use: `disk_quota, disk_used, disk_available` (bytes of data "
            "artifacts it owns) and `llm_tokens_quota` (None: no limit), `llm_tokens_used`.",
        ),
        ObservationKey(
            "artifacts",
            "list[dict]",
            "Every artifact but the private memory ones, by id: `{id, owner, kind, executable, "
            "price, size, methods}` (`methods`: the method names).",
        ),
        ObservationKey("my_artifacts", "list[str]", "The ids of the artifacts the agent owns."),
        ObservationKey(
            "last_action_result",
            "dict | None",
            "The agent's previous outcome, `{action, success, reason}` (the reason is the "
            "summary on success); None before its first action.",
        ),
        ObservationKey(
            "failure_history",
            "list[dict]",
            "The last `failure_history_limit` failures, `{action, success, reason}` each.",
        ),
        ObservationKey(
            "action_history",
            "list[dict]",
            "The last `action_history_limit` actions, `{time_step, action, success}` each.",
        ),
        ObservationKey(
            "success_rate",
            "float | None",
            "The share of the agent's actions so far that succeeded; None before the first.",
        ),
        ObservationKey(
            "economic_context",
            "dict",
            "`total_scrip, agents, richest, my_rank` (1 = richest), `executable_artifacts, "
            "mean_price, min_price, max_price` (prices None when nothing is executable).",
        ),
        ObservationKey(
            "working_memory",
            "dict",
            "The agent's own notes, which it updates by writing to its own agent id "
            "(bounded by `working_memory_max_bytes`).",
        ),
        ObservationKey(
            "memory",
            "MemoryView (list[dict])",
            "The last `observed_memories` entries `{time_step, kind, text}` the world recorded "
            "for the agent; `memory.search(query, k)` ranks all its entries.",
        ),
        ObservationKey("steps_total", "int", "The run's length in steps."),
        ObservationKey("time_remaining", "int", "Steps left, this one included."),
        ObservationKey("progress_percent", "float", "How far the run is, 0 to 100."),
    )

    # -- the world protocol -------------------------------------------------------------------
    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        """What ``agent_id`` sees at ``time_step`` (keys as in ``OBSERVATION_KEYS``).

        Mutable parts are copies, so a policy that edits its observation cannot change the world.

        Raises:
            ConfigError: ``agent_id`` is not an agent of this world.
        """
        state = self._state(agent_id)
        with self._lock:
            limit, recent = self.message_history_limit, self.observed_memories
            total = state.actions_total
            return {
                "time_step": time_step,
                "agent_id": agent_id,
                "tools": self._tools,
                "messages": [dict(m) for m in self._messages[-limit:]] if limit > 0 else [],
                "balance": self.ledger.balance(agent_id),
                "quotas": self._quotas(agent_id, state),
                "artifacts": self._listing(),
                "my_artifacts": [i for i in self._ids() if self.artifacts[i].owner == agent_id],
                "last_action_result": (
                    dict(state.last_action_result) if state.last_action_result else None
                ),
                "failure_history": [dict(f) for f in state.failure_history],
                "action_history": [dict(h) for h in state.action_history],
                "success_rate": round(state.actions_succeeded / total, 4) if total else None,
                "economic_context": self._economic_context(agent_id),
                "working_memory": _loads(state.working_memory),
                "memory": MemoryView(
                    state.memory[-recent:] if recent > 0 else (),
                    search=frozen_search(self._index(state), self._lock),
                    total=len(state.memory),
                ),
                "steps_total": self.total_steps,
                "time_remaining": max(self.total_steps - time_step, 0),
                "progress_percent": round(
                    min(100.0, 100.0 * max(time_step, 0) / self.total_steps), 4
                ),
            }

    def apply(self, request: ActionRequest) -> ActionResult:
        """Perform one action and record it in the agent's histories and memory.

        Never raises for an agent's mistake: an unknown agent or action, bad arguments, a refusal
        or an agent over its LLM quota (which may only ``noop``) give a failed result.
        """
        state = self._agents.get(request.agent_id)
        if state is None:
            return ActionResult.failed(f"unknown agent {request.agent_id!r}")
        over = self.over_llm_quota(request.agent_id)
        if over is not None and request.action_name != "noop":
            result = ActionResult.failed(over)
        else:
            result = self.registry.dispatch(self, request)
        self._record(request, result)
        return result

    def state_digest(self) -> str:
        """SHA-256 of the canonical JSON of ``snapshot()``: any change of state changes it."""
        return hashlib.sha256(canonical_json(self.snapshot()).encode()).hexdigest()

    def take_messages(self) -> list[tuple[int, str, str, str]]:
        """Messages posted since the last call, as (seq, author, channel, content) for the trace."""
        with self._lock:
            out, self._unrecorded = self._unrecorded, []
            return out

    def over_llm_quota(self, agent_id: str) -> str | None:
        """Why ``agent_id`` may not act or call its model any more, or None if it may.

        The engine asks before each decision: no call is made for an agent over its quota. (One
        decision may still go past it: a workflow decision can make several calls, and tokens
        are known only once they are spent.)

        Args:
            agent_id: The agent to check; an unknown agent is never over quota.

        Returns:
            The failure reason when the agent's LLM tokens are past ``llm_token_quota``, else None.
        """
        quota = self.llm_token_quota
        state = self._agents.get(agent_id)
        if quota is None or state is None or state.llm_tokens <= quota:
            return None
        return f"over quota: llm tokens {state.llm_tokens} used > quota {quota}"

    def record_llm_usage(self, agent_id: str, tokens: int) -> None:
        """Count LLM tokens an agent spent; past ``llm_token_quota`` it can only ``noop``."""
        if type(tokens) is not int or tokens < 0:
            raise ConfigError(f"record_llm_usage: tokens must be an int >= 0, got {tokens!r}")
        state = self._state(agent_id)
        with self._lock:
            state.llm_tokens += tokens

    # -- queries ------------------------------------------------------------------------------
    def artifact(self, artifact_id: str) -> Artifact:
        """The artifact ``artifact_id``, for handlers (it is not a copy: do not change it).

        Raises:
            ActionError: There is no such artifact (the reason an agent is shown).
        """
        art = self.artifacts.get(artifact_id)
        if art is None:
            raise ActionError(f"not found: artifact {artifact_id!r}")
        return art

    def content_for(self, art: Artifact, reader: str) -> str:
        """What ``reader`` sees of an artifact (agent artifacts hide working memory from others)."""
        if art.kind == "memory":
            with self._lock:
                return _dumps(self._agents[art.owner].memory)
        if art.kind == "agent":
            public = {"agent_id": art.id, "has_standing": True}
            if reader != art.owner:
                return _dumps(public)
            memory = self._agents[art.id].working_memory
            return _dumps(public)[:-1] + f',"working_memory":{memory}}}'
        return art.content

    def is_agent(self, agent_id: str) -> bool:
        """Whether ``agent_id`` is an agent of this world (and so can hold scrip)."""
        return agent_id in self._agents

    def balance(self, agent_id: str) -> int:
        """The agent's scrip, as the ledger holds it."""
        return self.ledger.balance(agent_id)

    def disk_used(self, agent_id: str) -> int:
        """Bytes of data artifacts the agent owns (what counts against ``disk_quota_bytes``)."""
        return self._disk_used.get(agent_id, 0)

    def llm_tokens_used(self, agent_id: str) -> int:
        """LLM tokens recorded for the agent so far (see ``record_llm_usage``).

        Raises:
            ConfigError: ``agent_id`` is not an agent of this world.
        """
        return self._state(agent_id).llm_tokens

    def memory_entries(self, agent_id: str) -> list[dict[str, Any]]:
        """All memory entries of an agent, oldest first (copies)."""
        with self._lock:
            return [dict(e) for e in self._state(agent_id).memory]

    def search_memory(self, agent_id: str, query: str, k: int) -> list[dict[str, Any]]:
        """The ``k`` entries of all of the agent's memory most relevant to ``query`` (BM25).

        Raises:
            ConfigError: ``agent_id`` is not an agent of this world.
        """
        state = self._state(agent_id)
        with self._lock:
            return self._index(state).search(query, k)

    def agent_memory(self, agent_id: str, time_step: int = 0) -> AgentMemory:
        """The agent's memory with the agent ecology's agent-level API (``record_observation``).

        Entries it records go into the agent's memory artifact, as the world's own do.

        Raises:
            ConfigError: ``agent_id`` is not an agent of this world.
        """
        self._state(agent_id)
        return AgentMemory(agent_id, _WorldMemory(self, agent_id), time_step)

    def working_memory(self, agent_id: str) -> dict[str, Any]:
        """The agent's working memory, oldest key first (a fresh copy).

        Raises:
            ConfigError: ``agent_id`` is not an agent of this world.
        """
        return _loads(self._state(agent_id).working_memory)

    # -- operations used by handlers ----------------------------------------------------------
    def store(self, art: Artifact) -> ActionResult:
        """Create or replace a data artifact, within the owner's disk quota."""
        with self._lock:
            existing = self.artifacts.get(art.id)
            if existing is not None and not existing.can_write(art.owner):
                raise ActionError(f"permission denied: only {existing.owner} can write {art.id}")
            old = existing.size if existing is not None else 0
            used = self._disk_used.get(art.owner, 0) - old + art.size
            if used > self.disk_quota_bytes:
                raise ActionError(
                    f"over quota: disk {used} bytes > quota {self.disk_quota_bytes} bytes"
                )
            self.artifacts[art.id] = art
            self._disk_used[art.owner] = used
            if existing is None:
                self._sorted_ids = None
        verb = "created" if existing is None else "wrote"
        return ActionResult.ok(
            {
                "artifact_id": art.id,
                "created": existing is None,
                "size": art.size,
                "executable": art.executable,
                "price": art.price,
                "methods": list(art.methods),
                "disk_used": used,
                "disk_quota": self.disk_quota_bytes,
                "summary": f"{verb} {art.id} ({art.size} bytes)",
            }
        )

    def write_working_memory(self, request: ActionRequest, args: WriteArtifactArgs) -> ActionResult:
        """Update the requesting agent's working memory from a write to its own agent artifact.

        The content's ``working_memory`` object is merged in (null deletes a key; ``replace: true``
        starts afresh); written keys become the newest, so that when the memory is too big for
        ``working_memory_max_bytes`` the oldest keys are the ones dropped.

        Args:
            request: The ``write_artifact`` request, whose agent is the writer.
            args: Its validated arguments.

        Returns:
            A successful result describing the new working memory and any dropped keys.

        Raises:
            ActionError: The content is not of that shape, or asks to be executable or priced.
        """
        if args.executable or args.price or args.methods:
            raise ActionError("agent artifacts cannot be executable or priced")
        shape = "agent artifact content must be a JSON object with a working_memory object"
        update: Any = args.content
        if isinstance(update, str):
            try:
                update = _loads(update)
            except ValueError:
                raise ActionError(shape) from None
        if not isinstance(update, dict) or not isinstance(update.get("working_memory"), dict):
            raise ActionError(shape)
        extra = sorted(set(update) - _AGENT_CONTENT_KEYS)
        if extra:
            raise ActionError(
                f"agent artifact content takes working_memory (and replace), got: {', '.join(extra)}"
            )
        replace = update.get("replace", False)
        if not isinstance(replace, bool):
            raise ActionError("replace must be true or false")
        try:
            changes = _loads(_dumps(update["working_memory"]))
        except (TypeError, ValueError) as exc:
            raise ActionError(f"working_memory is not JSON: {exc}") from None
        state = self._agents[request.agent_id]
        limit = self.working_memory_max_bytes
        with self._lock:
            memory = {} if replace else _loads(state.working_memory)
            for key, value in changes.items():
                memory.pop(key, None)
                if value is not None:
                    memory[key] = value
            kept, dropped = _fit_working_memory(memory, limit)
            state.working_memory = _dumps(kept)
            size = _nbytes(state.working_memory)
        summary = f"updated working memory ({size} bytes, {len(kept)} keys)"
        if dropped:
            summary += f"; truncated to fit {limit} bytes: dropped oldest keys {', '.join(dropped)}"
        return ActionResult.ok(
            {
                "artifact_id": request.agent_id,
                "working_memory_bytes": size,
                "working_memory_keys": list(kept),
                "truncated": bool(dropped),
                "dropped_keys": dropped,
                "summary": summary,
            }
        )

    def run_method(
        self, art: Artifact, method: str, source: str, args: dict[str, Any], caller: str
    ) -> Any:
        """Evaluate one method in the sandbox; any failure is an ActionError (nothing charged)."""
        try:
            data: Any = _loads(art.content)
        except ValueError:
            data = art.content
        context = {"args": args, "caller": caller, "owner": art.owner, "data": data}
        where = f"method {method!r} of {art.id} failed"
        try:
            if _method_mode(source) == "eval":
                value = sandbox.evaluate(source, context)
            else:
                assigned = sandbox.execute(source, context)
                if "result" not in assigned:
                    raise ActionError(f"{where}: it assigned no result; nothing charged")
                value = assigned["result"]
        except ActionError:
            raise
        except (sandbox.UnsafeExpression, sandbox.EvaluationError) as exc:
            raise ActionError(f"{where}: {exc}; nothing charged") from None
        except Exception as exc:  # untrusted code must never break the run
            raise ActionError(f"{where}: {type(exc).__name__}: {exc}; nothing charged") from None
        try:
            return _loads(_dumps(value))
        except (TypeError, ValueError):
            raise ActionError(
                f"{where}: it returned a non-JSON value ({type(value).__name__}); nothing charged"
            ) from None

    def post(self, time_step: int, author_id: str, content: str, channel: str = "main") -> int:
        """Add a message; returns its index among all messages posted."""
        with self._lock:
            index = self._messages_posted
            self._messages_posted += 1
            self._messages.append(
                {"time_step": time_step, "author_id": author_id, "content": content}
            )
            if len(self._messages) > max(self.message_history_limit, 0):
                del self._messages[: len(self._messages) - max(self.message_history_limit, 0)]
            self._unrecorded.append((len(self._unrecorded), author_id, channel, content))
            return index

    def remember(self, agent_id: str, time_step: int, kind: str, text: str) -> None:
        """Add an entry to an agent's memory artifact, dropping the oldest past ``memory_limit``."""
        if self.memory_limit <= 0:
            return
        with self._lock:
            state = self._agents[agent_id]
            entry = memory_entry(time_step, kind, _clip(text, MAX_MEMORY_TEXT_CHARS))
            state.memory.append(entry)
            if len(state.memory) > self.memory_limit:
                del state.memory[: len(state.memory) - self.memory_limit]
            if state.index is not None:  # kept in step: drops the same oldest entries
                state.index.add(entry)

    # -- internals ----------------------------------------------------------------------------
    def _index(self, state: _AgentState) -> LexicalMemory:
        """The agent's memory index, built on first use and then updated with each entry."""
        if state.index is None:
            state.index = LexicalMemory(state.memory, limit=max(self.memory_limit, 0))
        return state.index

    def _quotas(self, agent_id: str, state: _AgentState) -> dict[str, Any]:
        """The agent's quotas and what it has used of them (the agent ecology shows both)."""
        used = self._disk_used.get(agent_id, 0)
        return {
            "disk_quota": self.disk_quota_bytes,
            "disk_used": used,
            "disk_available": max(self.disk_quota_bytes - used, 0),
            "llm_tokens_quota": self.llm_token_quota,
            "llm_tokens_used": state.llm_tokens,
        }

    def _state(self, agent_id: str) -> _AgentState:
        state = self._agents.get(agent_id)
        if state is None:
            raise ConfigError(
                f"unknown agent {agent_id!r} (ecology world agents: {len(self._agents)})"
            )
        return state

    def _record(self, request: ActionRequest, result: ActionResult) -> None:
        """Histories, success counts and memory: what the agent will see of this outcome."""
        name, t, success = request.action_name, request.time_step, bool(result.success)
        if success:
            reason = str((result.result or {}).get("summary") or "ok")
        else:
            reason = result.error or "failed"
        state = self._agents[request.agent_id]
        with self._lock:
            state.last_action_result = outcome(name, success, reason)
            state.actions_total += 1
            state.actions_succeeded += success
            state.action_history.append(history_item(t, name, success))
            _trim(state.action_history, self.action_history_limit)
            if not success:
                state.failure_history.append(outcome(name, success, reason))
                _trim(state.failure_history, self.failure_history_limit)
            if success and name == "post_message":
                self.remember(request.agent_id, t, "message", request.arguments["content"].strip())
            elif success and name != "noop":
                self.remember(request.agent_id, t, "action", reason)
            elif not success:
                self.remember(
                    request.agent_id, t, "action", f"{_describe(request)} failed: {reason}"
                )

    def _ids(self) -> list[str]:
        if self._sorted_ids is None:
            self._sorted_ids = sorted(self.artifacts)
        return self._sorted_ids

    def _listing(self) -> list[dict[str, Any]]:
        """Every artifact but the private memory ones, by id."""
        out = []
        for aid in self._ids():
            art = self.artifacts[aid]
            if art.kind == "memory":
                continue
            # An agent's size is that of its public part: working memory stays private.
            size = art.size if art.kind == "data" else _nbytes(self.content_for(art, ""))
            out.append(
                {
                    "id": art.id,
                    "owner": art.owner,
                    "kind": art.kind,
                    "executable": art.executable,
                    "price": art.price,
                    "size": size,
                    "methods": list(art.methods),
                }
            )
        return out

    def _economic_context(self, agent_id: str) -> dict[str, Any]:
        version = self.ledger.transfers
        if self._ranking is None or self._ranking[0] != version:
            balances = self.ledger.balances()
            order = sorted(balances, key=lambda a: (-balances[a], a))
            ranks = {a: i + 1 for i, a in enumerate(order)}
            self._ranking = (version, order, ranks, sum(balances.values()))
        _, order, ranks, total = self._ranking
        prices = [a.price for a in self.artifacts.values() if a.executable]
        return {
            "total_scrip": total,
            "agents": len(order),
            "richest": order[0] if order else None,
            "my_rank": ranks.get(agent_id),
            "executable_artifacts": len(prices),
            "mean_price": round(sum(prices) / len(prices), 4) if prices else None,
            "min_price": min(prices) if prices else None,
            "max_price": max(prices) if prices else None,
        }

    # -- checkpoints --------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-able data; ``restore`` on a world built alike gives it back."""
        with self._lock:
            return {
                "format": SNAPSHOT_FORMAT,
                "agent_ids": list(self.agent_ids),
                "ledger": self.ledger.snapshot(),
                "artifacts": [
                    {
                        "id": a.id,
                        "owner": a.owner,
                        "content": a.content,
                        "executable": a.executable,
                        "price": a.price,
                        "methods": dict(a.methods),
                    }
                    for a in (self.artifacts[i] for i in self._ids())
                    if a.kind == "data"
                ],
                "agents": {
                    aid: {
                        "working_memory": s.working_memory,
                        "llm_tokens": s.llm_tokens,
                        "memory": [dict(e) for e in s.memory],
                        "action_history": [dict(h) for h in s.action_history],
                        "failure_history": [dict(f) for f in s.failure_history],
                        "last_action_result": (
                            dict(s.last_action_result) if s.last_action_result else None
                        ),
                        "actions_total": s.actions_total,
                        "actions_succeeded": s.actions_succeeded,
                    }
                    for aid, s in self._agents.items()
                },
                "messages": [dict(m) for m in self._messages],
                "messages_posted": self._messages_posted,
            }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Replace the state with a ``snapshot()`` (also after a JSON round trip)."""
        if state.get("format") != SNAPSHOT_FORMAT:
            raise ConfigError(f"ecology restore: not a {SNAPSHOT_FORMAT} snapshot")
        if list(state["agent_ids"]) != list(self.agent_ids):
            raise ConfigError("ecology restore: the snapshot's agents differ from this world's")
        with self._lock:
            self.ledger.restore(state["ledger"])
            artifacts = {k: v for k, v in self.artifacts.items() if v.kind != "data"}
            disk: dict[str, int] = {}
            for a in state["artifacts"]:
                methods = {n: a["methods"][n] for n in sorted(a["methods"])}
                art = Artifact(
                    a["id"], a["owner"], "data", a["content"], a["executable"], a["price"], methods
                )
                artifacts[art.id] = art
                disk[art.owner] = disk.get(art.owner, 0) + art.size
            self.artifacts, self._disk_used = artifacts, disk
            for aid in self.agent_ids:
                s = state["agents"][aid]
                last = s["last_action_result"]
                self._agents[aid] = _AgentState(
                    working_memory=_dumps(_loads(s["working_memory"])),
                    llm_tokens=s["llm_tokens"],
                    memory=[
                        memory_entry(e["time_step"], e["kind"], e["text"]) for e in s["memory"]
                    ],
                    action_history=[
                        history_item(h["time_step"], h["action"], h["success"])
                        for h in s["action_history"]
                    ],
                    failure_history=[
                        outcome(f["action"], f["success"], f["reason"])
                        for f in s["failure_history"]
                    ],
                    last_action_result=(
                        outcome(last["action"], last["success"], last["reason"]) if last else None
                    ),
                    actions_total=s["actions_total"],
                    actions_succeeded=s["actions_succeeded"],
                )
            self._messages = [
                {"time_step": m["time_step"], "author_id": m["author_id"], "content": m["content"]}
                for m in state["messages"]
            ]
            self._messages_posted = state["messages_posted"]
            self._unrecorded = []
            self._sorted_ids = None
            self._ranking = None


def _trim(items: list[Any], limit: int) -> None:
    if len(items) > max(limit, 0):
        del items[: len(items) - max(limit, 0)]


def _starting_balances(ids: Sequence[str], starting: Mapping[str, int] | int) -> dict[str, int]:
    """Everyone gets ``starting`` scrip; a mapping names some agents (the rest get 100)."""
    if isinstance(starting, Mapping):
        unknown = sorted(set(starting) - set(ids))
        if unknown:
            raise ConfigError(f"starting_scrip: unknown agents: {', '.join(unknown)}")
        balances = {a: starting.get(a, DEFAULT_STARTING_SCRIP) for a in ids}
    else:
        balances = {a: starting for a in ids}
    for aid, amount in balances.items():
        if type(amount) is not int or amount < 0:
            raise ConfigError(f"starting_scrip: {aid}: must be an int >= 0, got {amount!r}")
    return balances


def _check_config(ids: list[str], options: Mapping[str, Any]) -> None:
    """One-line ConfigErrors for impossible settings, before anything is built."""
    if len(set(ids)) != len(ids):
        raise ConfigError("ecology: agent ids must be unique")
    names = set(ids)
    for aid in ids:
        if aid == WORLD_OWNER or not _ARTIFACT_ID.fullmatch(aid):
            raise ConfigError(f"ecology: {aid!r} cannot be an agent id")
        if aid + MEMORY_SUFFIX in names:
            raise ConfigError(
                f"ecology: agent id {aid + MEMORY_SUFFIX!r} clashes with {aid!r}'s memory"
            )
    minimums = {
        "disk_quota_bytes": 0,
        "total_steps": 1,
        "message_history_limit": 0,
        "memory_limit": 0,
        "failure_history_limit": 0,
        "action_history_limit": 0,
        "working_memory_max_bytes": 2,
        "observed_memories": 0,
    }
    for key, low in minimums.items():
        value = options[key]
        if type(value) is not int or value < low:
            raise ConfigError(f"ecology: {key} must be an int >= {low}, got {value!r}")
    quota = options["llm_token_quota"]
    if quota is not None and (type(quota) is not int or quota < 0):
        raise ConfigError(f"ecology: llm_token_quota must be an int >= 0 or None, got {quota!r}")


class _WorldMemory:
    """A ``MemoryStore`` onto one agent's memory in the world (for ``agent_memory``)."""

    def __init__(self, world: EcologyWorld, agent_id: str) -> None:
        self.world, self.agent_id = world, agent_id

    def add(self, entry: Mapping[str, Any]) -> None:
        """Record ``entry`` in the agent's memory artifact (clipped, bounded as the world's)."""
        self.world.remember(
            self.agent_id, int(entry["time_step"]), str(entry.get("kind", "note")), entry["text"]
        )

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        """The world's search over all of the agent's entries."""
        return self.world.search_memory(self.agent_id, query, k)
