"""Agent folders: ``agent.yaml`` + ``system_prompt.md`` -> a validated ``AgentSpec``.

Everything a workflow agent does is data: states, the transitions allowed between them, and the
steps run in each state (LLM calls, safe-eval code, LLM-chosen transitions), plus prompt
components injected into named steps. ``load_agent`` checks the whole folder up front: a typo in a
state name, an unknown key or code the safe evaluator refuses is one ``ConfigError`` line naming
the file and the field, before any run starts, never a surprise at step 300.

Folders written for the agent ecology (agent_ecology2 at 599d43d3) load as written: each model
below also reads that project's spellings and shapes (``state_machine``, ``error_handling``,
``components: {traits}``, ``starting_credits``, ``condition``, ``output_key``, ``limit``,
``max_size_bytes``, a linear step list without states, no workflow at all) and turns them into
ours, so everything after loading sees one form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from vivarium import sandbox
from vivarium.errors import ConfigError
from vivarium.workflow.code_actions import CODE_ACTIONS, describe_unknown
from vivarium.workflow.names import DERIVED_KEYS, OBSERVATION_KEYS, RESERVED_NAMES
from vivarium.workflow.traits import KINDS as TRAIT_KINDS
from vivarium.workflow.traits import resolve as resolve_traits
from vivarium.workflow.traits import sources as trait_sources

AGENT_FILE = "agent.yaml"
SYSTEM_PROMPT_FILE = "system_prompt.md"
WILDCARD = "*"
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"

OnFailure = Literal["retry", "skip", "fail"]
StepType = Literal["llm", "code", "transition"]

# The agent ecology's format (agent_ecology 599d43d3), accepted beside ours:
SINGLE_STATE = "main"  # the one state of a workflow written without states (a linear step list)
PROPOSE_STEP = "propose_action"  # the one step of an agent written without a workflow
# Retries of a failed step when neither the step nor the workflow says: the original's default
# (its WorkflowConfig and its execution-model document both give 3).
DEFAULT_MAX_RETRIES = 3
# error_handling.on_step_failure, as that project's workflow document writes it
_STEP_FAILURE = {
    "continue": "skip",
    "abort": "fail",
    "retry": "retry",
    "skip": "skip",
    "fail": "fail",
}
_ERROR_HANDLING_KEYS = ("on_step_failure", "default_on_failure", "max_retries")
_STATE_MACHINE_KEYS = ("states", "initial_state", "transitions")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _renamed(data: Any, old: str, new: str) -> Any:
    """``data`` with the original's key ``old`` under our ``new`` (both given: refused)."""
    if not isinstance(data, Mapping) or old not in data:
        return data
    if new in data:
        raise ValueError(f"give {new} or {old} (the same setting), not both")
    out = dict(data)
    out[new] = out.pop(old)
    return out


class RagConfig(_Strict):
    """Retrieval from the agent's memory artifact: the ``k`` entries most relevant to the prompt.

    The agent ecology's ``limit`` is accepted for ``k``. ``query_template`` (``{variable}``
    text) is what retrieval searches with instead of the step prompt.
    """

    enabled: bool = False
    k: int = Field(3, ge=1, le=50)
    query_template: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _original(cls, data: Any) -> Any:
        return _renamed(data, "limit", "k")


class WorkingMemoryConfig(_Strict):
    """The agent's working memory (from the observation), shown in LLM prompts up to a size.

    The fields and defaults of the agent ecology's working-memory settings (its
    ``max_size_bytes`` is accepted for ``max_bytes``). ``auto_inject`` shows it in every prompt,
    ``include_in_rag`` lets retrieval search it, ``structured_format`` keeps it a mapping,
    ``warn_on_missing`` notes an agent without one.
    """

    enabled: bool = False
    auto_inject: bool = True
    max_bytes: int = Field(2000, ge=16, le=1 << 20)
    include_in_rag: bool = False
    structured_format: bool = True
    warn_on_missing: bool = False

    @model_validator(mode="before")
    @classmethod
    def _original(cls, data: Any) -> Any:
        return _renamed(data, "max_size_bytes", "max_bytes")


class VisibilityConfig(_Strict):
    """How much of the world's resources the agent is shown (the agent ecology's ``visibility``)."""

    detail_level: Literal["minimal", "standard", "verbose"] = "standard"
    resources: list[str] | None = None
    see_others: bool | None = None


class InterfaceDiscoveryConfig(_Strict):
    """The agent ecology's ``interface_discovery`` (accepted; no effect here, see the README)."""

    mode: Literal["try_and_learn", "check_first", "hybrid"] = "try_and_learn"
    cache_in_memory: bool = True


class TransitionConfig(_Strict):
    """One allowed state change.

    ``from: "*"`` matches every state; ``condition`` is a sandboxed expression over the context.
    The string ``"a -> b"`` is shorthand for ``{from: a, to: b}``.

    ``routine: true`` marks a move of the workflow's ordinary loop (the last state going back
    to the first, a periodic review returning to work). It is recorded with every transition
    the rule allows (the trace's ``transitions.routine``), so analysis does not count the loop
    going round as the agent changing its mind (``pivots``).
    """

    from_: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)
    condition: str | None = None
    routine: StrictBool = False

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "from" not in data and "from_" not in data:
            return {**data, "from": WILDCARD}  # the original's default source: any state
        if not isinstance(data, str):
            return data
        src, sep, dst = data.partition("->")
        if not sep or not src.strip() or not dst.strip() or "->" in dst:
            raise ValueError(f"expected 'from -> to', got {data!r}")
        return {"from": src.strip(), "to": dst.strip()}


class StepConfig(_Strict):
    """One step of a workflow, of one of three types.

    ``llm`` asks the model for an action, ``code`` runs sandboxed statements that set context
    variables (or, with ``action``, a named code action of ``vivarium.workflow.code_actions``),
    ``transition`` asks the model to pick a key of ``transition_map``.

    The agent ecology's spellings load too: ``condition`` for ``run_if``, ``output_key`` for
    ``output``, ``on_failure: continue | abort`` for ``skip | fail``. An unset ``type`` is the
    original's default, ``code``, except for a step with only a prompt, which is ``llm`` (the
    original refuses such a step).
    """

    name: str = Field(pattern=NAME_PATTERN)
    type: StepType = "code"
    prompt: str | None = None
    code: str | None = None
    action: str | None = Field(
        default=None, description="code steps: a named code action instead of code"
    )
    output: str | None = Field(
        default=None,
        description="llm/transition steps: the variable the step's result is stored in",
    )
    transition_map: dict[str, str] = Field(default_factory=dict)
    in_state: list[str] | None = Field(
        default=None, description="the states this step runs in (a name or a list); all if unset"
    )
    run_if: str | None = Field(default=None, description="safe-eval condition; skipped if false")
    transition_to: str | None = Field(default=None, description="the state to move to after it")
    transition_mode: Literal["llm", "condition", "auto"] | None = Field(
        default=None, description="accepted from the original, which parses it and never uses it"
    )
    on_failure: OnFailure | None = Field(default=None, description="unset: the workflow default")
    max_retries: int | None = Field(default=None, ge=0, le=10)

    @model_validator(mode="before")
    @classmethod
    def _original(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        for key in ("prompt_artifact_id", "transition_prompt_artifact_id"):
            if key in data:
                raise ValueError(
                    f"{key}: prompts stored in artifacts are not supported (write the prompt "
                    "inline under prompt:)"
                )
        data = _renamed(_renamed(data, "condition", "run_if"), "output_key", "output")
        data = dict(data)
        failure = data.get("on_failure")
        if isinstance(failure, str) and failure in _STEP_FAILURE:
            data["on_failure"] = _STEP_FAILURE[failure]
        if "type" not in data:
            only_prompt = data.get("prompt") is not None and not (
                data.get("code") is not None or data.get("action") is not None
            )
            data["type"] = "llm" if only_prompt else "code"
        return data

    @field_validator("in_state", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("action")
    @classmethod
    def _known_action(cls, value: str | None) -> str | None:
        if value is not None and value not in CODE_ACTIONS:
            raise ValueError(describe_unknown(value))
        return value

    @field_validator("output")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.isidentifier() or value.startswith("_"):
            raise ValueError(f"{value!r} is not a valid variable name")
        if value in RESERVED_NAMES:
            raise ValueError(f"{value!r} is reserved (set by the workflow)")
        return value


class ComponentConfig(_Strict):
    """Reusable prompt text appended to the prompts of the steps it names, in listed order."""

    name: str = Field(pattern=NAME_PATTERN)
    content: str = Field(validation_alias=AliasChoices("content", "prompt"), min_length=1)
    inject_into: list[str] = Field(default_factory=list)


class WorkflowConfig(_Strict):
    """States, allowed transitions, and the steps run in each state.

    The agent ecology's form loads too: ``state_machine: {states, initial_state, transitions}``
    nested, ``error_handling: {on_step_failure | default_on_failure, max_retries}``, and a
    workflow with no states at all (a linear list of steps), which gets the one state
    ``SINGLE_STATE`` so every step runs, in order, each decision.
    """

    states: list[str] = Field(min_length=1)
    initial_state: str | None = Field(default=None, description="unset: the first state")
    transitions: list[TransitionConfig] = Field(
        default_factory=list, description="none listed: any change of state is allowed"
    )
    steps: list[StepConfig] = Field(min_length=1)
    variables: dict[str, Any] = Field(
        default_factory=dict, description="initial context variables (JSON-like)"
    )
    default_on_failure: OnFailure = "retry"
    default_max_retries: int = Field(DEFAULT_MAX_RETRIES, ge=0, le=10)
    response_schema: Literal["simple", "ooda"] = "simple"
    keep_variables: Literal["all", "declared"] = Field(
        default="all",
        description=(
            "what code steps' names carry over to the next decision: all of them, or only "
            "those declared in variables (the rest last the turn); a workflow written without "
            "states defaults to declared, as the agent ecology's runner rebuilt each turn"
        ),
    )
    llm_calls_per_turn: int | None = Field(
        default=None,
        ge=1,
        description=(
            "model calls a turn may make; 1 is the agent ecology design's one call per turn "
            "(later model steps wait for the next turn); unset: no limit, as its runner did"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _original(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        machine = data.pop("state_machine", None)
        if machine is not None:
            if not isinstance(machine, Mapping):
                raise ValueError("state_machine: expected a mapping (states, initial_state, ...)")
            for key in machine:
                if key not in _STATE_MACHINE_KEYS:
                    raise ValueError(f"state_machine.{key}: unknown field")
                if key in data:
                    raise ValueError(
                        f"state_machine.{key}: also given as workflow.{key}; keep one of the two"
                    )
            data.update(machine)
        handling = data.pop("error_handling", None)
        if handling is not None:
            data.update(_error_handling(handling, data))
        if not data.get("states"):
            data["states"] = [SINGLE_STATE]
            data.setdefault("keep_variables", "declared")  # its context is built each turn
        return data

    @property
    def start(self) -> str:
        """The state a new agent starts in: ``initial_state``, else the first state."""
        return self.initial_state or self.states[0]

    def on_failure(self, step: StepConfig) -> OnFailure:
        """What a failed ``step`` does: its own ``on_failure``, else the workflow's default."""
        return step.on_failure or self.default_on_failure

    def max_retries(self, step: StepConfig) -> int:
        """How many more attempts a failed ``step`` gets: its own, else the workflow's default."""
        return self.default_max_retries if step.max_retries is None else step.max_retries


class AgentSpec(_Strict):
    """A workflow agent as loaded from its folder (``system_prompt`` and ``folder`` filled in).

    The agent ecology's ``agent.yaml`` loads as written: ``starting_credits`` for
    ``starting_scrip``, ``error_handling`` at the top level, ``components: {traits, goals}``
    (resolved by ``vivarium.workflow.traits``), ``visibility``, ``genotype``,
    ``interface_discovery``, and no ``workflow`` at all: the original then proposes an action
    with one prompt, here one ``llm`` step ``PROPOSE_STEP`` with ``PROPOSE_ACTION_PROMPT``.
    """

    id: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$")
    starting_scrip: int = Field(100, ge=0)
    enabled: bool = True
    llm_model: str | None = Field(default=None, description="unset: the experiment's model")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, ge=1, le=32768)
    rag: RagConfig = Field(default_factory=RagConfig)
    working_memory: WorkingMemoryConfig = Field(default_factory=WorkingMemoryConfig)
    visibility: VisibilityConfig = Field(default_factory=VisibilityConfig)
    genotype: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="descriptive labels (the original shows them only)"
    )
    interface_discovery: InterfaceDiscoveryConfig = Field(default_factory=InterfaceDiscoveryConfig)
    workflow: WorkflowConfig
    components: list[ComponentConfig] = Field(default_factory=list)
    system_prompt: str = ""
    folder: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _original(cls, data: Any) -> Any:
        return from_original(data) if isinstance(data, Mapping) else data

    def components_for(self, step: str) -> list[ComponentConfig]:
        """The components injected into ``step``, in the order they are listed."""
        return [c for c in self.components if step in c.inject_into]


# -- the agent ecology's form -------------------------------------------------------------------
def _error_handling(handling: Any, workflow: Mapping[str, Any]) -> dict[str, Any]:
    """``error_handling`` as our workflow fields (``default_on_failure``, ``default_max_retries``).

    ``on_step_failure: continue | abort`` (the workflow document's) and ``default_on_failure``
    (the runner's, ``retry | skip | fail``) name the same setting; ``max_retries`` is
    ``default_max_retries``.
    """
    if not isinstance(handling, Mapping):
        raise ValueError("error_handling: expected a mapping (on_step_failure, max_retries)")
    out: dict[str, Any] = {}
    for key, value in handling.items():
        if key not in _ERROR_HANDLING_KEYS:
            known = ", ".join(_ERROR_HANDLING_KEYS)
            raise ValueError(f"error_handling.{key}: unknown field (known: {known})")
        if key == "max_retries":
            target, value = "default_max_retries", value
        else:
            target = "default_on_failure"
            if not isinstance(value, str) or value not in _STEP_FAILURE:
                raise ValueError(
                    f"error_handling.{key}: {value!r} is not one of "
                    + ", ".join(sorted(_STEP_FAILURE))
                )
            value = _STEP_FAILURE[value]
        if target in out and out[target] != value:
            raise ValueError("error_handling: on_step_failure and default_on_failure disagree")
        if target in workflow:
            raise ValueError(f"error_handling.{key}: also given as workflow.{target}; keep one")
        out[target] = value
    return out


def propose_prompt() -> str:
    """The prompt of the single step of an agent without a workflow (``PROPOSE_STEP``)."""
    from vivarium.policies.sections import PROPOSE_ACTION_PROMPT

    return PROPOSE_ACTION_PROMPT


def _prompt_steps(workflow: Mapping[str, Any]) -> list[str]:
    """Names of the raw workflow's steps that have a prompt (where components can go)."""
    names: list[str] = []
    steps = workflow.get("steps") if isinstance(workflow, Mapping) else None
    for step in steps if isinstance(steps, list) else []:  # a wrong shape: validation says so
        if not isinstance(step, Mapping) or step.get("prompt") is None:
            continue
        coded = step.get("code") is not None or step.get("action") is not None
        if step.get("type", "code" if coded else "llm") != "code":
            names.append(str(step.get("name")))
    return names


def from_original(data: Mapping[str, Any]) -> dict[str, Any]:
    """An ``agent.yaml`` mapping in the agent ecology's form, in ours (ours passes unchanged).

    Agent-level rewrites only; the workflow and step models rewrite their own levels.

    Raises:
        ValueError: Two spellings of one setting, or an unknown trait / goal (one line).
    """
    data = _renamed(data, "starting_credits", "starting_scrip")
    data = dict(data)
    workflow = data.get("workflow")
    handling = data.pop("error_handling", None)
    fallback = workflow is None or (isinstance(workflow, Mapping) and not workflow.get("steps"))
    if fallback:
        # The original proposes an action with one prompt when there is no workflow (or it has
        # no steps); its error handling still applies to that one step.
        shape = {"steps", "state_machine", *_STATE_MACHINE_KEYS}
        kept = {k: v for k, v in (workflow or {}).items() if k not in shape}
        workflow = {
            **kept,
            "states": [SINGLE_STATE],
            "steps": [{"name": PROPOSE_STEP, "type": "llm", "prompt": propose_prompt()}],
        }
    if handling is not None:
        if not isinstance(workflow, Mapping):
            raise ValueError("error_handling: needs a workflow mapping")
        if "error_handling" in workflow:
            raise ValueError(
                "error_handling: given both at the top level and under workflow; keep one"
            )
        workflow = {**workflow, "error_handling": handling}
    if workflow is not None:
        data["workflow"] = workflow
    components = data.get("components")
    if isinstance(components, Mapping):
        targets = [PROPOSE_STEP] if fallback else _prompt_steps(workflow or {})
        found = resolve_traits(components, data.get("folder"))
        data["components"] = [
            {
                "name": item.name,
                "content": item.prompt_fragment.strip(),
                # The original appends a fragment to the listed steps that exist (others are
                # ignored); its single propose prompt gets every fragment.
                "inject_into": (
                    list(targets) if fallback else [s for s in item.inject_into if s in targets]
                ),
            }
            for item in found
        ]
    return data


# -- loading -----------------------------------------------------------------------------------
def format_loc(loc: Iterable[Any]) -> str:
    """``("workflow", "transitions", 2, "to")`` -> ``workflow.transitions[2].to``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = str(part) or "''"
            out += f".{name}" if out else name
    return out or "(root)"


def describe_validation(exc: ValidationError, where: str) -> str:
    """One line naming every bad field, with list indices: ``file: a.b[2].c: problem; ...``."""
    parts = []
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        # a model-level check names its fields in its message
        parts.append(f"{format_loc(err['loc'])}: {msg}" if err["loc"] else msg)
    return f"{where}: " + "; ".join(parts)


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return " ".join(lines) if lines else "error"


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {_one_line(str(exc))}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{path}: not valid YAML: {first}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def resolve_agent_folder(folder: str | Path, base_dir: str | Path | None = None) -> Path:
    """The agent folder a config names, as a path.

    A relative folder is looked up from the config's ``base_dir`` first, then from the working
    directory, so a config runs the same from a notebook folder or the project root.
    """
    path = Path(folder)
    if not path.is_absolute() and base_dir and (Path(base_dir) / path).exists():
        return Path(base_dir) / path
    return path


def folder_enabled(folder: str | Path) -> bool:
    """What the folder's ``agent.yaml`` says of ``enabled``.

    True when it cannot be read: loading the agent reports that, in one line, when the run is
    built.
    """
    import yaml

    path = Path(folder)
    if path.is_file():
        path = path.parent
    try:
        data = yaml.safe_load((path / AGENT_FILE).read_text(encoding="utf-8"))
        # the same reading of the value as AgentSpec's (``no``, ``"false"``, 0 are false too)
        return bool(TypeAdapter(bool).validate_python(data.get("enabled", True)))
    except Exception:
        return True


def spec_digest(folder: str | Path) -> str | None:
    """SHA-256 of what ``load_agent`` reads (``agent.yaml``, ``system_prompt.md``).

    None when there is no agent file. Editing an agent's folder changes the run it makes.
    """
    import hashlib

    path = Path(folder)
    if path.is_file():
        path = path.parent
    if not (path / AGENT_FILE).is_file():
        return None
    h = hashlib.sha256()
    for name in (AGENT_FILE, SYSTEM_PROMPT_FILE):
        file = path / name
        data = file.read_bytes() if file.is_file() else b""
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    for name, data in _component_files(path):
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _component_files(folder: Path) -> list[tuple[str, bytes]]:
    """The trait / goal files a ``components: {traits, goals}`` mapping names, with their bytes.

    Empty for our list form (and when anything cannot be read: loading reports that), so the
    digest of such a folder is what it always was.
    """
    import yaml

    try:
        data = yaml.safe_load((folder / AGENT_FILE).read_text(encoding="utf-8"))
        components = data.get("components") if isinstance(data, dict) else None
        if not isinstance(components, Mapping):
            return []
        out = []
        for kind in TRAIT_KINDS:
            files = trait_sources(kind, folder)
            for name in components.get(kind) or []:
                if str(name) in files:
                    out.append((f"{kind}/{name}", files[str(name)].read_bytes()))
        return out
    except Exception:
        return []


def load_agent(folder: str | Path) -> AgentSpec:
    """Read and check an agent folder (or its ``agent.yaml``); ``ConfigError`` in one line."""
    path = Path(folder)
    if path.is_file():
        path = path.parent
    agent_file = path / AGENT_FILE
    if not agent_file.is_file():
        raise ConfigError(f"{path}: no {AGENT_FILE} in the agent folder")
    where = str(agent_file)
    data = _read_yaml(agent_file)
    for key in ("folder",):
        if key in data:
            raise ConfigError(f"{where}: {key}: unknown field (set by the loader)")
    prompt_file = path / SYSTEM_PROMPT_FILE
    if prompt_file.is_file():
        if "system_prompt" in data:
            raise ConfigError(
                f"{where}: system_prompt: given both here and in {SYSTEM_PROMPT_FILE}; keep one"
            )
        try:
            data["system_prompt"] = prompt_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{prompt_file}: cannot read: {_one_line(str(exc))}") from None
    data.setdefault("id", path.name)
    data["folder"] = str(folder if Path(folder).is_dir() else path)
    try:
        spec = AgentSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation(exc, where)) from None
    check_spec(spec, where)
    return spec


def check_spec(spec: AgentSpec, where: str = "agent") -> None:
    """The cross-field checks pydantic cannot do.

    Names refer to things that exist, code and conditions are accepted by the sandbox, each step
    has what its type needs.

    Raises:
        ConfigError: The first problem, prefixed with ``where``.
    """
    errors = _problems(spec)
    if errors:
        raise ConfigError(f"{where}: {errors[0]}")


def _problems(spec: AgentSpec) -> list[str]:
    wf = spec.workflow
    states = wf.states
    known = set(states)
    shown = ", ".join(states)
    out: list[str] = []

    def undefined(field: str, name: str) -> None:
        out.append(f"{field}: state {name!r} is not defined (states: {shown})")

    def safe(field: str, source: str, mode: Literal["eval", "exec"]) -> None:
        if mode == "eval" and not source.strip():
            name = field.rpartition(".")[2]
            out.append(
                f"{field}: the condition is empty (write an expression, or leave {name} out)"
            )
            return
        try:
            sandbox.check(source, mode)
        except Exception as exc:  # UnsafeExpression, or a syntax error however it is reported
            out.append(f"{field}: {_one_line(str(exc))}")
            return
        # A name the context will not hold fails every evaluation at run time: refuse it now.
        unknown = sorted(sandbox.names_read(source, mode) - readable)
        if unknown:
            out.append(
                f"{field}: unknown name {unknown[0]!r} (not a workflow variable, an observation "
                "field or a name a code step assigns; declare it under workflow.variables)"
            )

    readable = _readable_names(spec)

    dupes = _duplicates(states)
    if dupes:
        out.append(f"workflow.states: {dupes[0]!r} is listed twice")
    for i, name in enumerate(states):
        if name == WILDCARD or not name.strip():
            out.append(f"workflow.states[{i}]: {name!r} cannot be a state name")
    if wf.initial_state is not None and wf.initial_state not in known:
        undefined("workflow.initial_state", wf.initial_state)

    for i, tr in enumerate(wf.transitions):
        field = f"workflow.transitions[{i}]"
        if tr.from_ != WILDCARD and tr.from_ not in known:
            undefined(f"{field}.from", tr.from_)
        if tr.to not in known:
            undefined(f"{field}.to", tr.to)
        if tr.condition is not None:
            safe(f"{field}.condition", tr.condition, "eval")
        for other in wf.transitions[:i]:
            same = (other.from_, other.to, other.condition) == (tr.from_, tr.to, tr.condition)
            if same and other.routine != tr.routine:
                out.append(
                    f"{field}.routine: {tr.from_} -> {tr.to} is listed twice, once routine and "
                    "once not (give them different conditions, or keep one)"
                )
                break

    step_names = [s.name for s in wf.steps]
    dupes = _duplicates(step_names)
    if dupes:
        out.append(f"workflow.steps: step {dupes[0]!r} is defined twice")
    for i, step in enumerate(wf.steps):
        out.extend(_step_problems(spec, i, step, known, shown, safe))

    for key in wf.variables:
        if not isinstance(key, str) or not key.isidentifier() or key.startswith("_"):
            out.append(f"workflow.variables.{key}: not a valid variable name")
        elif key in RESERVED_NAMES:
            out.append(f"workflow.variables.{key}: reserved (set by the workflow)")
    try:
        _check_json_like(wf.variables)
    except ValueError as exc:
        out.append(f"workflow.variables: {exc}")

    names = set(step_names)
    dupes = _duplicates([c.name for c in spec.components])
    if dupes:
        out.append(f"components: component {dupes[0]!r} is defined twice")
    for i, comp in enumerate(spec.components):
        for j, target in enumerate(comp.inject_into):
            if target not in names:
                out.append(
                    f"components[{i}].inject_into[{j}]: step {target!r} is not defined "
                    f"(steps: {', '.join(step_names)})"
                )
            elif next(s for s in wf.steps if s.name == target).type == "code":
                out.append(
                    f"components[{i}].inject_into[{j}]: step {target!r} is a code step "
                    "(components go into llm and transition steps)"
                )
    return out


def _step_problems(
    spec: AgentSpec, i: int, step: StepConfig, known: set[str], shown: str, safe: Any
) -> list[str]:
    wf = spec.workflow
    field = f"workflow.steps[{i}]"
    out: list[str] = []
    if step.type in ("llm", "transition"):
        # A transition step without a prompt asks with the runner's default (continue, pivot,
        # ship with the evidence), as the original's transition steps do.
        if step.type == "llm" and not (step.prompt or "").strip():
            out.append(f"{field}.prompt: a {step.type} step needs a prompt")
        if step.code is not None:
            out.append(f"{field}.code: only code steps run code")
        if step.action is not None:
            out.append(f"{field}.action: only code steps run a code action")
    else:
        if step.action is not None:
            if step.code is not None:
                out.append(f"{field}.action: give code or action, not both")
        elif not (step.code or "").strip():
            out.append(f"{field}.code: a code step needs code (or a named action)")
        else:
            safe(f"{field}.code", step.code, "exec")
            reserved = _assigned_names(step.code) & RESERVED_NAMES
            if reserved:
                out.append(
                    f"{field}.code: cannot assign {sorted(reserved)[0]!r} (set by the workflow)"
                )
        if step.prompt is not None:
            out.append(f"{field}.prompt: code steps have no prompt")
        if step.output is not None:
            out.append(f"{field}.output: code steps set their variables themselves")
    if step.type == "transition":
        if not step.transition_map:
            out.append(f"{field}.transition_map: a transition step needs at least one choice")
        if step.transition_to is not None:
            out.append(
                f"{field}.transition_to: a transition step moves by its transition_map instead"
            )
    elif step.transition_map:
        out.append(f"{field}.transition_map: only transition steps have a transition_map")
    for key, target in step.transition_map.items():
        if not key.strip():
            out.append(f"{field}.transition_map: an empty key cannot be chosen")
        if target not in known:
            out.append(
                f"{field}.transition_map.{key}: state {target!r} is not defined (states: {shown})"
            )
    for j, name in enumerate(step.in_state or []):
        if name not in known:
            out.append(f"{field}.in_state[{j}]: state {name!r} is not defined (states: {shown})")
    if step.in_state is not None and not step.in_state:
        out.append(f"{field}.in_state: give at least one state (or leave it out for all)")
    if step.transition_to is not None and step.transition_to not in known:
        out.append(
            f"{field}.transition_to: state {step.transition_to!r} is not defined (states: {shown})"
        )
    if step.run_if is not None:
        safe(f"{field}.run_if", step.run_if, "eval")
    if out:
        return out
    # Statically reachable: each state the step runs in has some rule to its transition_to
    # (conditions are decided at run time). Catches a forgotten transition before the run does.
    # A transition_map option no rule allows loads, as in the agent ecology (its beta_3 has
    # one); choosing it fails the step at run time, with the reason told to the model.
    targets = [("transition_to", step.transition_to)] if step.transition_to else []
    if wf.transitions and step.in_state:
        for src in step.in_state:
            for where, dst in targets:
                if dst != src and not any(
                    t.to == dst and t.from_ in (src, WILDCARD) for t in wf.transitions
                ):
                    out.append(
                        f"{field}.{where}: no transition allows {src} -> {dst} "
                        "(add it to workflow.transitions)"
                    )
    return out


def _readable_names(spec: AgentSpec) -> set[str]:
    """Every name the context of a decision can hold.

    The workflow's variables, the fields of an observation (``OBSERVATION_KEYS``, ``tick``), the
    names derived from it for agents written for the agent ecology (``DERIVED_KEYS``), the
    workflow's own facts, whatever a code step assigns (it is kept as a variable), and each
    llm / transition step's result (under its name and its ``output``).
    """
    names = {*spec.workflow.variables, *OBSERVATION_KEYS, *DERIVED_KEYS, "tick", *RESERVED_NAMES}
    for step in spec.workflow.steps:
        if step.type == "code" and step.code:
            names |= _assigned_names(step.code, defining=True)
        elif step.type != "code":
            # an llm / transition step's result: under its name, and its output variable
            names |= {n for n in (step.name, step.output) if n and n.isidentifier()}
    return names


def _assigned_names(code: str, *, defining: bool = False) -> set[str]:
    """Names a code block binds, as the run sees them.

    Plain and unpacked targets (``a, b = ...``) and the name under an item assignment or an
    augmented one (``d['k'] = v`` rebinds ``d``). A write through the ``context`` view binds the
    name it quotes, as the sandbox runs it: ``context['x'] = v`` is ``x = v``, and
    ``context['x'][k] = v`` is ``x[k] = v``. ``defining``: only the names a plain assignment
    creates (``x += 1``, ``d['k'] = v`` and ``context['x']['k'] = v`` need the name to exist).
    """
    import ast

    try:
        tree = ast.parse(code, mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    names: set[str] = set()

    def quoted(node: ast.AST) -> str | None:  # "x" for context['x'], else None
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == sandbox.SCOPE_NAME
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            return node.slice.value
        return None

    def bind(target: ast.AST, *, creates: bool = True) -> None:
        key = quoted(target)
        if key is not None:
            if creates or not defining:
                names.add(key)
        elif isinstance(target, ast.Name):
            if creates or not defining:
                names.add(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                bind(element, creates=creates)
        elif isinstance(target, ast.Starred):
            bind(target.value, creates=creates)
        elif isinstance(target, ast.Subscript):  # d[k] = v rebinds d, which must exist
            bind(target.value, creates=False)

    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AugAssign | ast.AnnAssign) and not defining:
            targets = [node.target]
        for target in targets:
            bind(target)
    return names


def _duplicates(names: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    dupes = []
    for name in names:
        if name in seen and name not in dupes:
            dupes.append(name)
        seen.add(name)
    return dupes


def _check_json_like(value: Any, path: str = "") -> None:
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json_like(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path or 'value'}: keys must be strings, got {key!r}")
            _check_json_like(item, f"{path}.{key}" if path else key)
        return
    raise ValueError(f"{path or 'value'}: {type(value).__name__} is not JSON-like")
