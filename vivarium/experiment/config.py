"""Experiment configs: pydantic models, loadable from YAML or JSON, with one-line errors."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from vivarium.errors import ConfigError
from vivarium.settings import (
    DEFAULT_AGENT_RETRIES,
    DEFAULT_AGENTS,
    DEFAULT_CACHE_MODE,
    DEFAULT_DETERMINISTIC_TIMESTAMPS,
    DEFAULT_FORCED_TOOL_FORMAT,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MESSAGE_HISTORY_LIMIT,
    DEFAULT_MOCK_LATENCY_MS,
    DEFAULT_MODEL,
    DEFAULT_NUM_RETRIES,
    DEFAULT_ON_LLM_ERROR,
    DEFAULT_ORDER,
    DEFAULT_SCHEDULING,
    DEFAULT_SEED,
    DEFAULT_STEPS,
    DEFAULT_TEMPERATURE,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TRANSPORT,
    server_urls,
)

MAX_SEED = 2**63 - 1
MAX_STEPS = 2**39 - 1  # trace row ids are (step << 24) | seq, in SQLite's 64-bit integers


# LLM settings that say where and how calls are made, not what the run is: they are left out of
# the recorded config and the run id, so a run recorded against a server replays offline into
# the same trace. The API key is never recorded anywhere.
LLM_TRANSPORT_FIELDS = frozenset(
    {
        "api_base",
        "api_key",
        "cache",
        "cache_mode",
        "timeout",
        # The older place of the run's ``max_concurrency`` (the engine's setting, see
        # ``ExperimentConfig.max_concurrency``): how fast a run goes, never what it records.
        "max_concurrency",
        "rate_limit_rpm",
        "rate_limit_tpm",
        "transport",
        # What an outage does (stop or record fallbacks): a run without one is the same trace
        # either way, so it is recorded with the run but is not part of its identity.
        "on_llm_error",
    }
)


CodeDigests = Callable[["ExperimentConfig"], dict[str, str]]
"""``source(config)``: ``{"policy:<name>": digest}`` for the registered code a config uses."""

References = Callable[[str], str]
"""``resolve(name)``: a world or policy name as the run's identity names it (see below)."""

OpaqueInputs = Callable[["ExperimentConfig"], tuple[str, ...]]
"""``source(config)``: what the user code a config uses reads that cannot be digested."""

_CODE_DIGESTS: list[CodeDigests] = []
_REFERENCES: list[References] = []
_OPAQUE: list[OpaqueInputs] = []


def add_code_digests(source: CodeDigests) -> None:
    """Let the layer that knows registered worlds and policies name their code in run ids.

    A world or policy registered in a script or a notebook (``vivarium.experiment.build.register_policy``)
    is only a name in a config; its code is known to the registry, above this module, which
    adds its ``source`` here once (at import). Every ``identity`` then holds the digest of the
    registered code the config uses, as ``code_digests``: editing a registered factory, or the
    class it builds, names a new run, as editing a class given as an object does.

    Args:
        source: Returns the digests for a config (empty when it uses no registered name).
    """
    if source not in _CODE_DIGESTS:
        _CODE_DIGESTS.append(source)


def add_identity_sources(references: References, opaque: OpaqueInputs) -> None:
    """Let the layer that knows user objects name them in run ids as they are when a run starts.

    ``references`` maps an object's reference (``module.qualname@digest``, taken when it was
    given) to its reference now (a notebook global it reads may have changed since);
    ``opaque`` says what the config's user code reads that cannot be digested (such a run's
    identity says so, and a stored result of it is never reused). See ``vivarium.experiment.digest``.

    Args:
        references: ``resolve(name) -> name``.
        opaque: ``source(config) -> phrases``.
    """
    if references not in _REFERENCES:
        _REFERENCES.append(references)
    if opaque not in _OPAQUE:
        _OPAQUE.append(opaque)


def _resolved(name: str) -> str:
    for resolve in _REFERENCES:
        name = resolve(name)
    return name


class LLMConfig(BaseModel):
    """Which model answers LLM agents, and how the calls are made, cached and limited.

    Each field is the one definition of its setting; its default is the constant of
    ``vivarium.settings`` the field names (the gateway stack's ``GatewaySettings`` defaults to
    the same ones). ``max_concurrency`` here is the older place of the run's own
    (``ExperimentConfig.max_concurrency``, read by ``ExperimentConfig.decisions_in_flight``);
    ``api_base`` is read by ``api_bases``, in whatever shape it was given.
    """

    # Infinite or NaN latencies, timeouts and limits would hang a run or break the limiter.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    model: str = Field(
        default=DEFAULT_MODEL, min_length=1, description="litellm model name, or 'mock'"
    )
    mock: bool = Field(default=False, description="answer with the deterministic MockLLMGateway")
    api_base: str | list[str] | None = Field(
        default=None,
        description="e.g. http://127.0.0.1:8080/v1; several servers: a list of URLs (or one "
        "string of URLs separated by commas), each call to the least busy one, moving to "
        "another when one fails",
    )
    api_key: SecretStr | None = Field(default=None, description="never recorded or printed")
    transport: Literal["auto", "litellm", "direct"] = Field(
        default=DEFAULT_TRANSPORT,
        description="auto: openai/ models on an api_base go straight over HTTP, others via litellm",
    )

    temperature: float = Field(default=DEFAULT_TEMPERATURE, ge=0.0, le=2.0)
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=1, le=32768)
    system_prompt: str | None = None
    force_tool: bool | str = Field(
        default=False,
        description="force a tool call - small models need it (True: the world's main action, "
        "post_message in the channel, write_artifact in the ecology; a name: that action)",
    )
    # How a forced tool reaches the server. "tool_choice": tools and a named tool_choice, as
    # OpenAI defines them. "json_schema": for servers whose chat template cannot call tools
    # (llama.cpp's llama-server with SmolLM2's stock template ignores tools and rejects an
    # object tool_choice): the request is sent without tools, with a response_format
    # json_schema of the forced tool's parameters, and the reply's JSON is read back as a call
    # of that tool (vivarium.gateways.forced_schema). The request and its hash stay the same;
    # the model does answer differently (it sees no tool definitions), so a run id and a
    # cassette's key include it when it is not the default.
    forced_tool_format: Literal["tool_choice", "json_schema"] = Field(
        default=DEFAULT_FORCED_TOOL_FORMAT,
        description="how a forced tool is sent: tool_choice, or json_schema for servers "
        "whose chat template cannot call tools (response_format constrained to the tool's "
        "parameters)",
    )
    graph: bool = Field(default=True, description="use the LangGraph policy when installed")
    timeout: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    num_retries: int = Field(default=DEFAULT_NUM_RETRIES, ge=0, le=20)
    # Not a setting of its own: the older place of the run's ``max_concurrency``, still read
    # with the same meaning (``ExperimentConfig.decisions_in_flight``); no default of its own.
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="decisions in flight at once: the run's max_concurrency, written here by "
        "older configs (used when the run's own is not given)",
    )
    rate_limit_rpm: float | None = Field(default=None, gt=0)
    rate_limit_tpm: float | None = Field(default=None, gt=0)
    cache: str | None = Field(default=None, description="record/replay cassette file")
    cache_mode: Literal["record", "replay", "auto"] = DEFAULT_CACHE_MODE
    agent_timeout: float | None = Field(
        default=None, gt=0, description="seconds per decision (None: no limit)"
    )
    agent_retries: int = Field(default=DEFAULT_AGENT_RETRIES, ge=0, le=10)
    mock_latency_ms: float = Field(default=DEFAULT_MOCK_LATENCY_MS, ge=0.0)
    on_llm_error: Literal["stop", "fallback"] = Field(
        default=DEFAULT_ON_LLM_ERROR,
        description="when the LLM server fails past the retries: stop the run (interrupted, "
        "resumable) or record a fallback noop for the decision",
    )

    @field_validator("api_base", mode="before")
    @classmethod
    def _server_entries(cls, value: Any) -> Any:
        """Each entry of a list a URL: a ``null`` or a number is named in one plain line.

        Left to the type check, a YAML list with an empty entry gives two lines of union
        errors (``api_base.str: ...; api_base.list[str].1: ...``).
        """
        if value is None or isinstance(value, str):
            return value
        if not isinstance(value, list | tuple):
            raise ValueError(f"give a URL or a list of URLs, not {value!r}")
        for number, entry in enumerate(value, start=1):
            if entry is None:
                raise ValueError(f"entry {number} is empty")
            if not isinstance(entry, str):
                raise ValueError(f"entry {number} is {entry!r}, not a URL")
        return list(value)

    @field_validator("api_base")
    @classmethod
    def _servers(cls, value: str | list[str] | None) -> str | list[str] | None:
        """Kept as recorded: one URL as a string, several as a list; each http(s), none twice.

        A string of URLs separated by commas is a list too, so a command-line flag or a text
        field can name several servers (``vivarium.settings.server_urls`` reads every shape).
        """
        if value is None:
            return None
        urls = server_urls(value)
        return urls[0] if len(urls) == 1 else list(urls)

    @property
    def api_bases(self) -> tuple[str, ...]:
        """Every server's base URL, the one shape every layer reads (empty: none is set).

        ``api_base`` keeps the shape a run records (a string for one server, a list for
        several); this is the tuple ``vivarium.settings.server_urls`` makes of it, which the
        gateway stack, the panel and the notes about servers use.
        """
        return server_urls(self.api_base, check=False)  # checked when it was set

    @property
    def uses_mock(self) -> bool:
        """True when the deterministic mock LLM answers (``mock: true`` or ``model: mock``)."""
        return self.mock or self.model == "mock"

    def identity(self) -> dict[str, Any]:
        """The settings that decide what the model answers (``LLM_TRANSPORT_FIELDS`` left out).

        Returns:
            The dumped settings that go into the recorded config and the run id.
        """
        data = self.model_dump(exclude=set(LLM_TRANSPORT_FIELDS))
        if data["forced_tool_format"] == DEFAULT_FORCED_TOOL_FORMAT:  # run ids stay what they were
            del data["forced_tool_format"]
        return data


class AutonomousConfig(BaseModel):
    """Pacing of autonomous agents."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # The autonomous clock counts nanoseconds: a shorter time would round to none at all.
    duration: float = Field(default=60.0, ge=1e-9, description="seconds of (virtual) time to run")
    think_s: float = Field(default=1.0, ge=1e-9, description="time one action takes an agent")
    actions_per_minute: float | None = Field(default=30.0, gt=0)
    llm_tokens_per_minute: float | None = Field(default=None, gt=0)
    clock: str = Field(default="virtual", pattern="^(virtual|real)$")
    max_events: int = Field(default=100_000, ge=1, description="safety cap on engine steps")


class AgentGroup(BaseModel):
    """Agents of one kind: ``{policy: random, count: 3}`` or ``{policy: workflow, agent: DIR}``."""

    model_config = ConfigDict(extra="forbid")

    policy: str = "random"
    count: int = Field(default=1, ge=1, le=1 << 20)
    agent: str | None = Field(default=None, description="folder with agent.yaml (workflow agents)")
    id: str | None = Field(default=None, pattern=r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$")
    action_space: list[str] | None = Field(default=None, min_length=1)
    starting_scrip: int | None = Field(default=None, ge=0)
    enabled: bool | None = Field(
        default=None,
        description="false: the group is left out of the run (so is an agent folder whose "
        "agent.yaml says enabled: false); recorded with the run as enabled: false",
    )
    spec_digest: str | None = Field(
        default=None,
        pattern="^[0-9a-f]{64}$",
        description="SHA-256 of the agent folder's files, as recorded with a run (set by Vivarium)",
    )
    policy_options: dict[str, Any] = Field(
        default_factory=dict,
        description="extra keyword arguments for a policy given as a class or factory",
    )


class ForkOrigin(BaseModel):
    """Where a fork comes from: its parent run and the step from which it follows its own config.

    ``trace`` says where the parent's trace is, to copy its steps from; it is where, not what,
    and stays out of the run's identity (the parent's run id names the parent).
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(min_length=1)
    step: int = Field(ge=0, le=MAX_STEPS)
    trace: str | None = None
    parent_fork: dict[str, Any] | None = Field(
        default=None, description="the parent's own fork_of, as its identity holds it"
    )


class ExperimentConfig(BaseModel):
    """Everything that defines a run. Same config and seed -> byte-identical trace.

    Each field is the one definition of its setting, and defaults to the constant of
    ``vivarium.settings`` it names (the engine's ``WorldEngineConfig`` defaults to the same
    ones). A setting given in more than one place is read by one property, which every entry
    point goes through: ``decisions_in_flight`` (``max_concurrency``), ``llm_in_force`` (the
    ``llm`` section, or the mock's when there is none).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: str = Field(default="experiment", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
    # World and policy names are not checked here: which exist depends on what a notebook has
    # registered, and validation stays free of it. The run checks them when it is built.
    world: str = "channel"
    policy: str = "random"
    agents: int | list[AgentGroup] = Field(
        default=DEFAULT_AGENTS, description="a number of agents of `policy`, or groups of agents"
    )
    world_options: dict[str, Any] = Field(
        default_factory=dict, description="extra keyword arguments for the world"
    )
    policy_options: dict[str, Any] = Field(
        default_factory=dict,
        description="extra keyword arguments for `policy` given as a class or factory",
    )
    code_digests: dict[str, str] = Field(
        default_factory=dict,
        description="digest of the code of each registered world and policy the run uses "
        "(policy:<name>), as recorded with a run (set by Vivarium)",
    )
    inputs: dict[str, Any] = Field(
        default_factory=dict,
        description="values the run depends on that Vivarium cannot see (a data version, a "
        "setting read from the environment): part of the run's identity",
    )
    input_files: list[str] = Field(
        default_factory=list,
        description="files or folders the run reads at run time: their content is part of the "
        "run's identity",
    )
    input_digests: dict[str, str] = Field(
        default_factory=dict,
        description="SHA-256 of each input file's content, as recorded with a run (set by "
        "Vivarium)",
    )
    opaque_inputs: list[str] = Field(
        default_factory=list,
        description="what the run's user code reads that cannot be digested, as recorded with "
        "a run (set by Vivarium): a stored result of such a run is never reused",
    )
    checkpoint_every: int | None = Field(
        default=None, ge=1, description="save world and agent state every K steps (resume)"
    )
    mode: Literal["stepped", "autonomous"] = "stepped"
    autonomous: AutonomousConfig = Field(default_factory=AutonomousConfig)

    steps: int = Field(default=DEFAULT_STEPS, ge=0, le=MAX_STEPS)
    seed: int = Field(default=DEFAULT_SEED, ge=0, le=MAX_SEED)
    scheduling: Literal["sequential", "simultaneous"] = DEFAULT_SCHEDULING
    order: Literal["sorted", "shuffle"] = DEFAULT_ORDER
    # An engine setting (async decisions of one step in flight at once: LLM agents or any
    # async policy). Like the LLM transport fields it says how fast a run goes, not what it
    # records, so it is left out of the recorded config and the run id (``identity``): existing
    # runs keep their ids, and a run replays the same at any concurrency. None: not given here;
    # ``decisions_in_flight`` resolves it (``llm.max_concurrency`` where an older config gives
    # it there, else ``vivarium.settings.DEFAULT_MAX_CONCURRENCY``).
    max_concurrency: int | None = Field(
        default=None, ge=1, le=4096, description="async decisions in flight at once"
    )
    message_history_limit: int = Field(default=DEFAULT_MESSAGE_HISTORY_LIMIT, ge=0)
    action_space: list[str] | None = Field(
        default=None,
        min_length=1,
        description="actions agents may take (default: random agents noop/emit_event; LLM "
        "agents every tool of the world)",
    )

    deterministic_timestamps: bool = DEFAULT_DETERMINISTIC_TIMESTAMPS
    run_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
    db: str | None = None
    base_dir: str | None = Field(
        default=None, description="folder relative agent paths are resolved from (the config's)"
    )
    llm: LLMConfig | None = None
    fork_of: ForkOrigin | None = Field(
        default=None,
        description="the run this one forks, and the step from which it follows this config "
        "(set by Run.fork and vvm fork)",
    )

    @field_validator("inputs")
    @classmethod
    def _plain_inputs(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Declared inputs are recorded with the run: plain JSON values only."""

        def plain_only(item: Any) -> Any:
            if type(item).__module__.startswith("numpy") and hasattr(item, "tolist"):
                return item.tolist()
            raise TypeError

        for key, item in value.items():
            try:
                json.dumps(item, default=plain_only)
            except (TypeError, ValueError):
                raise ValueError(
                    f"{key}: {type(item).__name__} is not a plain value (numbers, text, lists "
                    "and dicts of them); declare what it stands for, such as a version or a "
                    "file in input_files"
                ) from None
        return value

    @field_validator("agents")
    @classmethod
    def _agent_count(cls, value: int | list[AgentGroup]) -> int | list[AgentGroup]:
        total = value if isinstance(value, int) else sum(g.count for g in value)
        if not isinstance(value, int) and not value:
            raise ValueError("give at least one agent group")
        if total < 1 or total > 1 << 24:
            raise ValueError(f"the number of agents must be between 1 and {1 << 24}, not {total}")
        return value

    @property
    def decisions_in_flight(self) -> int:
        """The run's ``max_concurrency``, resolved: the one reading of the setting.

        The run's own, else ``llm.max_concurrency`` (its older place, in older configs), else
        ``vivarium.settings.DEFAULT_MAX_CONCURRENCY``. The run's own wins when both are given
        (it is the override: a flag, a sweep axis, a notebook's keyword, a resume). The engine
        runs at it, and the trace records it for a resume (``runner.llm_settings``).
        """
        if self.max_concurrency is not None:
            return self.max_concurrency
        older = self.llm.max_concurrency if self.llm is not None else None
        return DEFAULT_MAX_CONCURRENCY if older is None else older

    @property
    def llm_in_force(self) -> LLMConfig:
        """The ``llm`` section, or for a config without one the mock's (``LLMConfig``'s defaults).

        Agents that call a model in a run without an ``llm`` section are answered by the
        deterministic mock, with every other LLM setting at its default: the one reading of
        "no section" that building the gateway, the policies and the engine share.
        """
        return self.llm if self.llm is not None else LLMConfig(mock=True)

    @property
    def agent_count(self) -> int:
        """How many agents the config names (disabled groups included)."""
        return self.agents if isinstance(self.agents, int) else sum(g.count for g in self.agents)

    def identity(self) -> dict[str, Any]:
        """The fields that decide the trace's content (not where it is written or read from).

        Returns:
            The dumped config without ``db``, ``run_id``, ``base_dir`` and
            ``max_concurrency`` (how fast, not what: see the field), with the LLM's
            identity only, each agent folder's current digest, ``enabled: false`` on the
            groups left out, ``policy_options`` only where some are given, and the current
            ``code_digests`` of registered worlds and policies only where the run uses some.
            Worlds and policies given as objects are named as they are now (their code and
            the values it reads: ``vivarium.experiment.digest``); declared ``inputs`` as given and
            ``input_files`` by their content, only where some are declared; and
            ``opaque_inputs``, what user code reads that cannot be digested, only where there
            is some (a stored result of such a run is never reused).
        """
        data = self.model_dump(
            exclude={
                "db",
                "run_id",
                "llm",
                "base_dir",
                "max_concurrency",
                "code_digests",
                "input_digests",
                "opaque_inputs",
                "fork_of",
            }
        )
        # User code given as objects: named as it is now (the values it reads included).
        data["world"] = _resolved(self.world)
        data["policy"] = _resolved(self.policy)
        # Registered code decides the run as much as the config does; only runs that use some
        # say so, and every other run keeps its id.
        digests = self.current_code_digests()
        if digests:
            data["code_digests"] = digests
        # Declared inputs, and what user code reads that cannot be digested: only runs that
        # have some say so (every other run keeps its id).
        if not data["inputs"]:
            del data["inputs"]
        if self.input_files:
            data["input_digests"] = self.current_input_digests()
        else:
            del data["input_files"]
        # Options JSON cannot hold (a function, a set, an object): named by their digest, as
        # user code is, never by ``str`` (an address that changes with each process).
        options_opaque: list[str] = []
        data["world_options"] = recorded_options(
            self.world_options, "world_options", options_opaque
        )
        data["policy_options"] = recorded_options(
            self.policy_options, "policy_options", options_opaque
        )
        if isinstance(self.agents, list):
            for i, (group, dumped) in enumerate(zip(self.agents, data["agents"], strict=True)):
                dumped["policy_options"] = recorded_options(
                    group.policy_options, f"agents.{i}.policy_options", options_opaque
                )
        # (a sweep's worker cannot digest what it received: it keeps what the sweep found)
        found = {phrase for source in _OPAQUE for phrase in source(self)}
        opaque = sorted(found | set(self.opaque_inputs) | set(options_opaque))
        if opaque:
            data["opaque_inputs"] = opaque
        # Policy options are newer than most recorded runs: only runs that give some say so,
        # and every other run keeps its id.
        if not data["policy_options"]:
            del data["policy_options"]
        if self.llm is not None:
            data["llm"] = self.llm.identity()
        if isinstance(self.agents, list):
            # What an agent folder holds decides the run as much as the config does.
            for group, dumped in zip(self.agents, data["agents"], strict=True):
                dumped["policy"] = _resolved(group.policy)
                dumped["spec_digest"] = self.agent_spec_digest(group)
                # Only a group left out says so: the run ids of other runs stay what they were.
                del dumped["enabled"]
                if not dumped["policy_options"]:
                    del dumped["policy_options"]
                if not self.group_enabled(group):
                    dumped["enabled"] = False
        if self.fork_of is not None:
            # A fork that changes nothing is its parent (same id, same bytes); any other
            # names its parent and step, so that two forks of two runs never share an id.
            from vivarium.seeding import canonical_json, derive_run_id

            fork = self.fork_of
            same = data if fork.parent_fork is None else {**data, "fork_of": fork.parent_fork}
            if derive_run_id(self.name, canonical_json(same)) == fork.run_id:
                data = same
            else:
                data["fork_of"] = {"run_id": fork.run_id, "step": fork.step}
        return data

    def current_input_digests(self) -> dict[str, str]:
        """The content digest of each declared input file, as it is now (``input_files``)."""
        from vivarium.experiment.digest import digest_files

        return digest_files(self.input_files, self.base_dir)

    def current_code_digests(self) -> dict[str, str]:
        """The digest of each registered world and policy the config uses, as it is now."""
        found: dict[str, str] = {}
        for source in _CODE_DIGESTS:
            found.update(source(self))
        return dict(sorted(found.items()))

    def group_enabled(self, group: AgentGroup) -> bool:
        """False when the group or its agent folder's ``agent.yaml`` says ``enabled: false``."""
        if group.enabled is False:
            return False
        if group.agent is None:
            return True
        from vivarium.workflow.config import folder_enabled, resolve_agent_folder

        return folder_enabled(resolve_agent_folder(group.agent, self.base_dir))

    def agent_spec_digest(self, group: AgentGroup) -> str | None:
        """The digest of ``group``'s agent folder as it is now (None: no folder, or none there)."""
        if group.agent is None:
            return None
        from vivarium.workflow.config import resolve_agent_folder, spec_digest

        return spec_digest(resolve_agent_folder(group.agent, self.base_dir))

    def resolved_run_id(self) -> str:
        """``run_id`` if given, else one derived from the name and the identity's JSON."""
        from vivarium.seeding import canonical_json, derive_run_id

        return self.run_id or derive_run_id(self.name, canonical_json(self.identity()))


OPTION_OBJECTS: dict[str, Any] = {}
"""Option values JSON cannot hold, given in this process, by the text a run records for them."""

_OPTION_TEXT = re.compile(r"^<python (?P<name>[^@<>]+)@[0-9a-f]{16}>$")


def _plain(value: Any) -> bool:
    """Whether JSON records ``value`` as it is (a numpy value as its Python value)."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if type(value).__module__.startswith("numpy") and hasattr(value, "tolist"):
        return _plain(value.tolist())
    if type(value) in (list, tuple):
        return all(_plain(item) for item in value)
    if type(value) is dict:
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _option_name(value: Any) -> str:
    target = value.func if isinstance(value, functools.partial) else value
    if isinstance(target, type) or callable(target) and hasattr(target, "__qualname__"):
        return str(getattr(target, "__qualname__", type(target).__qualname__))
    return type(value).__qualname__


def recorded_options(options: dict[str, Any], where: str, opaque: list[str]) -> dict[str, Any]:
    """``world_options`` / ``policy_options`` as a run records them and its identity digests.

    Plain data is recorded as it is. A value JSON cannot hold as it is (a function, a class, a
    set, a dict with other than text keys, an object) would be recorded as its ``str``: a
    memory address that changes with each process and not with the function's code or the
    values it reads. It is recorded instead as ``<python NAME@DIGEST>``, the digest of its
    code and of what it reads, by value (``vivarium.experiment.digest``), and kept in ``OPTION_OBJECTS``
    under that text, so that a resume in this process gets the object back
    (``restore_option_objects``).

    Args:
        options: The options as given.
        where: Their field (``world_options``), for messages.
        opaque: Receives what cannot be digested, one phrase each.

    Returns:
        ``options`` itself when all of it is plain data (every such run keeps its id), else a
        copy with each other value replaced by its text.
    """
    if _plain(options):
        return options
    return {k: _recorded_option(v, f"{where}.{k}", opaque) for k, v in options.items()}


def _recorded_option(value: Any, where: str, opaque: list[str]) -> Any:
    if _plain(value):
        return value
    if type(value) in (list, tuple):
        return [_recorded_option(v, f"{where}[{i}]", opaque) for i, v in enumerate(value)]
    if type(value) is dict and all(isinstance(k, str) for k in value):
        return {k: _recorded_option(v, f"{where}.{k}", opaque) for k, v in value.items()}
    from vivarium.experiment.digest import digest_code, say_opaque

    found = digest_code(value, value=True)
    say_opaque(where, found, stacklevel=6)
    opaque += [f"{where}: {phrase}" for phrase in found.opaque]
    text = f"<python {_option_name(value)}@{found.digest}>"
    OPTION_OBJECTS[text] = value
    return text


def restore_option_objects(data: dict[str, Any], where: str) -> dict[str, Any]:
    """A recorded config's data with the option objects it names given back (see above).

    Args:
        data: A recorded config (``runs.config_json``), as a resume rebuilds the run from it.
        where: What an error message starts with (``resume <trace>``).

    Returns:
        ``data``, with each ``<python NAME@DIGEST>`` option replaced by its object.

    Raises:
        ConfigError: An object this process was not given (one line: where to resume).
    """

    def back(value: Any, path: str) -> Any:
        if isinstance(value, str):
            found = _OPTION_TEXT.match(value)
            if found is None:
                return value
            if value in OPTION_OBJECTS:
                return OPTION_OBJECTS[value]
            raise ConfigError(
                f"{where}: {path} was given as a Python object ({found['name']}), which this "
                "process does not have (or has changed since): resume it in the process that "
                "gave it (a notebook: run its cells again, then the run), or give the world "
                "the object itself, world=functools.partial(MyWorld, ...)"
            )
        if isinstance(value, list):
            return [back(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {k: back(v, f"{path}.{k}") for k, v in value.items()}
        return value

    out = dict(data)
    for key in ("world_options", "policy_options"):
        if isinstance(out.get(key), dict):
            out[key] = back(out[key], key)
    if isinstance(out.get("agents"), list):
        out["agents"] = [
            {**g, "policy_options": back(g["policy_options"], f"agents.{i}.policy_options")}
            if isinstance(g, dict) and isinstance(g.get("policy_options"), dict)
            else g
            for i, g in enumerate(out["agents"])
        ]
    return out


def non_plain_options(config: ExperimentConfig) -> list[str]:
    """Where ``config``'s options hold values JSON cannot hold (``world_options.rule``)."""
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if _plain(value):
            return
        if type(value) in (list, tuple):
            for i, v in enumerate(value):
                walk(v, f"{path}[{i}]")
        elif type(value) is dict and all(isinstance(k, str) for k in value):
            for k, v in value.items():
                walk(v, f"{path}.{k}")
        else:
            found.append(f"{path} ({_option_name(value)})")

    walk(config.world_options, "world_options")
    walk(config.policy_options, "policy_options")
    if isinstance(config.agents, list):
        for i, group in enumerate(config.agents):
            walk(group.policy_options, f"agents.{i}.policy_options")
    return found


def describe_errors(exc: ValidationError, where: str = "config") -> str:
    """One line naming every bad field: ``config: agents: must be >= 1; seed: ...``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) or "''" for x in err["loc"]) or "(root)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{loc}: {msg}")
    return f"{where}: " + "; ".join(parts)


def make_config(model: type[BaseModel], data: dict[str, Any], where: str = "config") -> Any:
    """Validate ``data`` as ``model``, with every bad field in one line.

    Args:
        model: The config model (``ExperimentConfig``, ``LLMConfig``, ...).
        data: The fields.
        where: What the error message starts with (a file, ``config``).

    Returns:
        The validated config.

    Raises:
        ConfigError: A field is missing, unknown or invalid.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, where)) from None


def load_config_data(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON mapping from a file, with a one-line error for anything else."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {p}: {exc}") from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError, json.JSONDecodeError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"{p}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {first}"
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of config fields, got {type(data).__name__}")
    return data


def load_config(path: str | Path) -> ExperimentConfig:
    """Load an experiment config from a YAML or JSON file.

    The world and policy names are not checked here: the run checks them when it is built.

    Args:
        path: The file.

    Returns:
        The validated config.

    Raises:
        ConfigError: The file is missing, unreadable, not a mapping, or an invalid config.
    """
    return make_config(ExperimentConfig, load_config_data(path), where=str(path))
