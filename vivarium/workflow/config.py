"""Agent folders: ``agent.yaml`` + ``system_prompt.md`` -> a validated ``AgentSpec``.

Everything a workflow agent does is data: states, the transitions allowed between them, and the
steps run in each state (LLM calls, safe-eval code, LLM-chosen transitions), plus prompt
components injected into named steps. ``load_agent`` checks the whole folder up front: a typo in a
state name, an unknown key or code the safe evaluator refuses is one ``ConfigError`` line naming
the file and the field, before any run starts, never a surprise at step 300.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
from vivarium.workflow.names import OBSERVATION_KEYS, RESERVED_NAMES

AGENT_FILE = "agent.yaml"
SYSTEM_PROMPT_FILE = "system_prompt.md"
WILDCARD = "*"
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"

OnFailure = Literal["retry", "skip", "fail"]
StepType = Literal["llm", "code", "transition"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class RagConfig(_Strict):
    """Retrieval from the agent's memory artifact: the ``k`` entries most relevant to the prompt."""

    enabled: bool = False
    k: int = Field(3, ge=1, le=50)


class WorkingMemoryConfig(_Strict):
    """The agent's working memory (from the observation), shown in LLM prompts up to a size."""

    enabled: bool = False
    max_bytes: int = Field(2048, ge=16, le=1 << 20)


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
        if not isinstance(data, str):
            return data
        src, sep, dst = data.partition("->")
        if not sep or not src.strip() or not dst.strip() or "->" in dst:
            raise ValueError(f"expected 'from -> to', got {data!r}")
        return {"from": src.strip(), "to": dst.strip()}


class StepConfig(_Strict):
    """One step of a workflow, of one of three types.

    ``llm`` asks the model for an action, ``code`` runs sandboxed statements that set context
    variables, ``transition`` asks the model to pick a key of ``transition_map``.
    """

    name: str = Field(pattern=NAME_PATTERN)
    type: StepType = "llm"
    prompt: str | None = None
    code: str | None = None
    transition_map: dict[str, str] = Field(default_factory=dict)
    in_state: list[str] | None = Field(
        default=None, description="the states this step runs in (a name or a list); all if unset"
    )
    run_if: str | None = Field(default=None, description="safe-eval condition; skipped if false")
    transition_to: str | None = Field(default=None, description="the state to move to after it")
    on_failure: OnFailure | None = Field(default=None, description="unset: the workflow default")
    max_retries: int | None = Field(default=None, ge=0, le=10)

    @field_validator("in_state", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class ComponentConfig(_Strict):
    """Reusable prompt text appended to the prompts of the steps it names, in listed order."""

    name: str = Field(pattern=NAME_PATTERN)
    content: str = Field(validation_alias=AliasChoices("content", "prompt"), min_length=1)
    inject_into: list[str] = Field(default_factory=list)


class WorkflowConfig(_Strict):
    """States, allowed transitions, and the steps run in each state."""

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
    default_max_retries: int = Field(1, ge=0, le=10)
    response_schema: Literal["simple", "ooda"] = "simple"

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
    """A workflow agent as loaded from its folder (``system_prompt`` and ``folder`` filled in)."""

    id: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$")
    starting_scrip: int = Field(100, ge=0)
    enabled: bool = True
    llm_model: str | None = Field(default=None, description="unset: the experiment's model")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, ge=1, le=32768)
    rag: RagConfig = Field(default_factory=RagConfig)
    working_memory: WorkingMemoryConfig = Field(default_factory=WorkingMemoryConfig)
    workflow: WorkflowConfig
    components: list[ComponentConfig] = Field(default_factory=list)
    system_prompt: str = ""
    folder: str | None = None

    def components_for(self, step: str) -> list[ComponentConfig]:
        """The components injected into ``step``, in the order they are listed."""
        return [c for c in self.components if step in c.inject_into]


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
        parts.append(f"{format_loc(err['loc'])}: {msg}")
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
    return h.hexdigest()


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
        if not (step.prompt or "").strip():
            out.append(f"{field}.prompt: a {step.type} step needs a prompt")
        if step.code is not None:
            out.append(f"{field}.code: only code steps run code")
    else:
        if not (step.code or "").strip():
            out.append(f"{field}.code: a code step needs code")
        else:
            safe(f"{field}.code", step.code, "exec")
            reserved = _assigned_names(step.code) & RESERVED_NAMES
            if reserved:
                out.append(
                    f"{field}.code: cannot assign {sorted(reserved)[0]!r} (set by the workflow)"
                )
        if step.prompt is not None:
            out.append(f"{field}.prompt: code steps have no prompt")
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
    # Statically reachable: each state the step runs in has some rule to each target (conditions
    # are decided at run time). Catches a forgotten transition before the run does.
    targets = ([("transition_to", step.transition_to)] if step.transition_to else []) + [
        (f"transition_map.{k}", v) for k, v in step.transition_map.items()
    ]
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
    workflow's own facts, and whatever a code step assigns (it is kept as a variable).
    """
    names = {*spec.workflow.variables, *OBSERVATION_KEYS, "tick", *RESERVED_NAMES}
    for step in spec.workflow.steps:
        if step.type == "code" and step.code:
            names |= _assigned_names(step.code, defining=True)
    return names


def _assigned_names(code: str, *, defining: bool = False) -> set[str]:
    """Names a code block binds, as the run sees them.

    Plain and unpacked targets (``a, b = ...``) and the name under an item assignment or an
    augmented one (``d['k'] = v`` rebinds ``d``). ``defining``: only the names a plain
    assignment creates (``x += 1`` and ``d['k'] = v`` need ``x`` and ``d`` to exist already).
    """
    import ast

    try:
        tree = ast.parse(code, mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    names: set[str] = set()

    def bind(target: ast.AST) -> None:
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                bind(element)
        elif isinstance(target, ast.Starred) or (
            isinstance(target, ast.Subscript) and not defining
        ):
            bind(target.value)

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
