"""Experiment configs: pydantic models, loadable from YAML or JSON, with one-line errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from vivarium.errors import ConfigError

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

_CODE_DIGESTS: list[CodeDigests] = []


def add_code_digests(source: CodeDigests) -> None:
    """Let the layer that knows registered worlds and policies name their code in run ids.

    A world or policy registered in a script or a notebook (``vivarium.build.register_policy``)
    is only a name in a config; its code is known to the registry, above this module, which
    adds its ``source`` here once (at import). Every ``identity`` then holds the digest of the
    registered code the config uses, as ``code_digests``: editing a registered factory, or the
    class it builds, names a new run, as editing a class given as an object does.

    Args:
        source: Returns the digests for a config (empty when it uses no registered name).
    """
    if source not in _CODE_DIGESTS:
        _CODE_DIGESTS.append(source)


def _check_server_url(url: str) -> None:
    """One server's base URL: http(s), a host, a valid port, nothing else in it.

    Raises:
        ValueError: What is wrong, in one line.
    """
    if not url:
        raise ValueError("an empty server URL (a comma too many?)")
    if url.startswith("$"):
        raise ValueError(f"{url!r}: environment variables are not expanded here; give the URL")
    if any(c.isspace() for c in url) or ";" in url:
        raise ValueError(f"{url!r} is not one URL (separate several with commas)")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    try:
        parts.port  # noqa: B018 - read for its check: a port that is not a number or too large
    except ValueError:
        raise ValueError(f"{url!r} has no valid port (1-65535)") from None


class LLMConfig(BaseModel):
    """Which model answers LLM agents, and how the calls are made, cached and limited."""

    # Infinite or NaN latencies, timeouts and limits would hang a run or break the limiter.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    model: str = Field(default="mock", min_length=1, description="litellm model name, or 'mock'")
    mock: bool = Field(default=False, description="answer with the deterministic MockLLMGateway")
    api_base: str | list[str] | None = Field(
        default=None,
        description="e.g. http://127.0.0.1:8080/v1; several servers: a list of URLs (or one "
        "string of URLs separated by commas), each call to the least busy one, moving to "
        "another when one fails",
    )
    api_key: SecretStr | None = Field(default=None, description="never recorded or printed")
    transport: Literal["auto", "litellm", "direct"] = Field(
        default="auto",
        description="auto: openai/ models on an api_base go straight over HTTP, others via litellm",
    )

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=128, ge=1, le=32768)
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
        default="tool_choice",
        description="how a forced tool is sent: tool_choice, or json_schema for servers "
        "whose chat template cannot call tools (response_format constrained to the tool's "
        "parameters)",
    )
    graph: bool = Field(default=True, description="use the LangGraph policy when installed")
    timeout: float = Field(default=60.0, gt=0)
    num_retries: int = Field(default=2, ge=0, le=20)
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
    cache_mode: Literal["record", "replay", "auto"] = "auto"
    agent_timeout: float | None = Field(default=None, gt=0, description="seconds per decision")
    agent_retries: int = Field(default=0, ge=0, le=10)
    mock_latency_ms: float = Field(default=0.0, ge=0.0)
    on_llm_error: Literal["stop", "fallback"] = Field(
        default="stop",
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
        """One URL as a string, several as a list: each http(s), none twice.

        A string of URLs separated by commas is a list too, so a command-line flag or a text
        field can name several servers.
        """
        if value is None:
            return None
        given = value.split(",") if isinstance(value, str) else value
        urls = [u.strip() if isinstance(u, str) else u for u in given]
        if not urls:
            raise ValueError("give at least one server URL")
        seen: set[str] = set()
        for url in urls:
            _check_server_url(url)
            if (key := url.rstrip("/")) in seen:
                raise ValueError(f"{url} is listed twice")
            seen.add(key)
        return urls[0] if len(urls) == 1 else list(urls)

    @property
    def api_bases(self) -> list[str]:
        """Every server's base URL (one for a single ``api_base``, none when it is not set)."""
        if self.api_base is None:
            return []
        return [self.api_base] if isinstance(self.api_base, str) else list(self.api_base)

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
        if data["forced_tool_format"] == "tool_choice":  # the default: run ids stay what they were
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


class ExperimentConfig(BaseModel):
    """Everything that defines a run. Same config and seed -> byte-identical trace."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: str = Field(default="experiment", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
    # World and policy names are not checked here: which exist depends on what a notebook has
    # registered, and validation stays free of it. The run checks them when it is built.
    world: str = "channel"
    policy: str = "random"
    agents: int | list[AgentGroup] = Field(
        default=5, description="a number of agents of `policy`, or groups of agents"
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
    checkpoint_every: int | None = Field(
        default=None, ge=1, description="save world and agent state every K steps (resume)"
    )
    mode: Literal["stepped", "autonomous"] = "stepped"
    autonomous: AutonomousConfig = Field(default_factory=AutonomousConfig)

    steps: int = Field(default=100, ge=0, le=MAX_STEPS)
    seed: int = Field(default=42, ge=0, le=MAX_SEED)
    scheduling: Literal["sequential", "simultaneous"] = "sequential"
    order: Literal["sorted", "shuffle"] = "sorted"
    # An engine setting (async decisions of one step in flight at once: LLM agents or any
    # async policy). Like the LLM transport fields it says how fast a run goes, not what it
    # records, so it is left out of the recorded config and the run id (``identity``): existing
    # runs keep their ids, and a run replays the same at any concurrency. None: the engine's
    # default (``DEFAULT_MAX_CONCURRENCY``), or ``llm.max_concurrency`` where an older config
    # gives it there (this one wins when both are given: see ``decisions_in_flight``).
    max_concurrency: int | None = Field(
        default=None, ge=1, le=4096, description="async decisions in flight at once"
    )
    message_history_limit: int = Field(default=20, ge=0)
    action_space: list[str] | None = Field(
        default=None,
        min_length=1,
        description="actions agents may take (default: random agents noop/emit_event; LLM "
        "agents every tool of the world)",
    )

    deterministic_timestamps: bool = True
    run_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
    db: str | None = None
    base_dir: str | None = Field(
        default=None, description="folder relative agent paths are resolved from (the config's)"
    )
    llm: LLMConfig | None = None

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
    def decisions_in_flight(self) -> int | None:
        """The run's ``max_concurrency``: its own, else ``llm.max_concurrency``, else None.

        The run's own wins when both are given (it is the override: a flag, a sweep axis, a
        notebook's keyword). None leaves the engine's default in force.
        """
        if self.max_concurrency is not None or self.llm is None:
            return self.max_concurrency
        return self.llm.max_concurrency

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
        """
        data = self.model_dump(
            exclude={"db", "run_id", "llm", "base_dir", "max_concurrency", "code_digests"}
        )
        # Registered code decides the run as much as the config does; only runs that use some
        # say so, and every other run keeps its id.
        digests = self.current_code_digests()
        if digests:
            data["code_digests"] = digests
        # Policy options are newer than most recorded runs: only runs that give some say so,
        # and every other run keeps its id.
        if not data["policy_options"]:
            del data["policy_options"]
        if self.llm is not None:
            data["llm"] = self.llm.identity()
        if isinstance(self.agents, list):
            # What an agent folder holds decides the run as much as the config does.
            for group, dumped in zip(self.agents, data["agents"], strict=True):
                dumped["spec_digest"] = self.agent_spec_digest(group)
                # Only a group left out says so: the run ids of other runs stay what they were.
                del dumped["enabled"]
                if not dumped["policy_options"]:
                    del dumped["policy_options"]
                if not self.group_enabled(group):
                    dumped["enabled"] = False
        return data

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
