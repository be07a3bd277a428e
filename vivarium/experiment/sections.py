"""aam's sectioned experiment config (``run`` / ``scheduler`` / ``policy``) as an ExperimentConfig.

The aam engine's ``vvm experiment --config X.json`` reads a JSON file of sections: ``run``
(steps, agents, seed, run_id, deterministic_timestamps, runs_dir), ``scheduler`` (the barrier
scheduler's per_agent_timeout_s, max_concurrency, sort_mode), ``policy`` (kind, model,
mock_llm, api_base, api_key, message_history, the rate limits, model_id) and an optional
``capture`` (activation capture, used only by the transformerlens policy). A researcher who
comes from aam brings such files; this module reads them as written, with aam's defaults for
every key left out, and translates them into a Vivarium ``ExperimentConfig``.

Why a translation and not a second config format: a run has one identity (its
``ExperimentConfig``, recorded with the trace), whichever file it came from. What the
translation does, key by key:

- ``run.*`` -> ``steps``, ``agents``, ``seed``, ``run_id``, ``deterministic_timestamps``;
  ``runs_dir`` is the folder the trace goes to (``SectionedConfig.runs_dir``).
- ``scheduler``: aam's barrier scheduler is Vivarium's ``scheduling: simultaneous``;
  ``sort_mode`` agent_id / seeded_shuffle -> ``order`` sorted / shuffle; ``max_concurrency``
  -> ``max_concurrency``, always given: a file that leaves it out ran aam's 50 decisions at once
  (``AAM_MAX_CONCURRENCY``), and its translation says so, so the run keeps aam's pace rather
  than Vivarium's default (``vivarium.settings.DEFAULT_MAX_CONCURRENCY``);
  ``per_agent_timeout_s`` -> ``llm.agent_timeout``, with the barrier's two retries
  (``llm.agent_retries: 2``).
- ``policy``: kind random / cognitive -> ``policy``; ``model``, ``mock_llm``, ``api_base``,
  ``api_key`` -> ``llm``; ``message_history`` -> ``message_history_limit`` (0 for random
  agents, as aam); ``rate_limit_rpm`` / ``rate_limit_tpm`` -> ``llm`` (dropped when
  ``rate_limit_enabled`` is false); ``rate_limit_max_concurrent``, when the file gives it,
  caps the run's ``max_concurrency`` (calls in flight across the run: Vivarium's agents share
  one gateway, where aam gave each agent its own limiter; ``capped_concurrency``, as
  ``vvm phase2 --rate-limit-max-concurrent`` does).

The defaults of the sections below are aam's, as its files mean them: they are what a file that
leaves a key out says, not Vivarium's defaults (``vivarium.settings``), and a translated config
gives each such value explicitly.

Unlike aam (whose pydantic models ignore unknown keys), an unknown or invalid key is an error
of one line naming its section and key: a typo such as ``"stpes"`` would otherwise run the
default silently. ``policy.kind: transformerlens`` (activation capture) has no Vivarium
counterpart and is refused in one line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vivarium.errors import ConfigError
from vivarium.experiment.config import ExperimentConfig, describe_errors, load_config_data

# The barrier scheduler retries a failed or timed-out decision twice (three attempts).
BARRIER_AGENT_RETRIES = 2

AAM_MAX_CONCURRENCY = 50
"""Decisions aam's barrier scheduler ran at once when a file did not say
(``scheduler.max_concurrency``): the pace of such a file, translated explicitly."""


def capped_concurrency(max_concurrency: int | None, max_concurrent: int | None) -> int | None:
    """The run's ``max_concurrency`` under aam's cap on LLM calls in flight.

    aam's ``rate_limit_max_concurrent`` (``--rate-limit-max-concurrent``) capped the calls in
    flight; Vivarium's agents share one gateway and make a decision's calls one at a time, so
    the cap is on the run's decisions in flight. Both aam entry points (the sectioned config,
    ``vvm phase2``) read it here.

    Args:
        max_concurrency: The run's own, as given (None: not given).
        max_concurrent: The cap (None: none).

    Returns:
        The tighter of the two, whichever is given (None when neither is).
    """
    if max_concurrent is None or max_concurrency is None:
        return max_concurrency if max_concurrent is None else max_concurrent
    return min(max_concurrency, max_concurrent)


class _Section(BaseModel):
    """A section: its keys are aam's, unknown ones are errors, NaN and infinities too."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RunSection(_Section):
    """``run``: what aam runs (its defaults)."""

    steps: int = Field(default=10, ge=0)
    agents: int = Field(default=2, ge=1)
    seed: int = Field(default=42, ge=0)
    run_id: str | None = None
    deterministic_timestamps: bool = True
    runs_dir: str = Field(default="./runs", min_length=1)


class SchedulerSection(_Section):
    """``scheduler``: aam's barrier scheduler."""

    per_agent_timeout_s: float = Field(default=60.0, gt=0)
    max_concurrency: int = Field(default=AAM_MAX_CONCURRENCY, gt=0)
    sort_mode: Literal["agent_id", "seeded_shuffle"] = "agent_id"


class PolicySection(_Section):
    """``policy``: which agents, and the LLM they call."""

    kind: Literal["random", "cognitive", "transformerlens"] = "cognitive"
    model: str = Field(default="gpt-3.5-turbo", min_length=1)
    mock_llm: bool = False
    api_base: str | None = None
    api_key: str | None = None
    message_history: int = Field(default=20, ge=0)
    rate_limit_rpm: int | None = Field(default=None, gt=0)
    rate_limit_tpm: int | None = Field(default=None, gt=0)
    rate_limit_max_concurrent: int = Field(default=10, gt=0)
    rate_limit_enabled: bool = True
    model_id: str | None = None


class CaptureSection(_Section):
    """``capture``: activation capture (used by aam's transformerlens policy only)."""

    layers: str = "0"
    components: str = "resid_post"
    trigger_actions: str = "post_message"
    token_position: int = -1
    dtype: Literal["float16", "float32"] = "float16"


class SectionedFile(_Section):
    """The whole file: its sections, each optional."""

    run: RunSection = Field(default_factory=RunSection)
    scheduler: SchedulerSection = Field(default_factory=SchedulerSection)
    policy: PolicySection = Field(default_factory=PolicySection)
    capture: CaptureSection | None = None


SECTIONS = ("run", "scheduler", "policy", "capture")

# Where each ExperimentConfig field came from, so its errors name the file's section and key.
_SOURCE = {
    "steps": "run.steps",
    "agents": "run.agents",
    "seed": "run.seed",
    "run_id": "run.run_id",
    "deterministic_timestamps": "run.deterministic_timestamps",
    "max_concurrency": "scheduler.max_concurrency",
    "order": "scheduler.sort_mode",
    "message_history_limit": "policy.message_history",
    "llm.model": "policy.model",
    "llm.mock": "policy.mock_llm",
    "llm.api_base": "policy.api_base",
    "llm.api_key": "policy.api_key",
    "llm.agent_timeout": "scheduler.per_agent_timeout_s",
    "llm.rate_limit_rpm": "policy.rate_limit_rpm",
    "llm.rate_limit_tpm": "policy.rate_limit_tpm",
}


@dataclass(frozen=True)
class SectionedConfig:
    """An aam config, translated.

    Attributes:
        config: The run, as a Vivarium ``ExperimentConfig``.
        runs_dir: The folder the trace goes to (``run.runs_dir``).
    """

    config: ExperimentConfig
    runs_dir: Path


def is_sectioned(data: object) -> bool:
    """Whether ``data`` looks like aam's sectioned config (every top-level key a section).

    Args:
        data: A parsed config file.

    Returns:
        True for a non-empty mapping whose keys are all aam sections.
    """
    return isinstance(data, dict) and bool(data) and all(k in SECTIONS for k in data)


def apply_overrides(data: dict[str, Any], items: list[str], where: str) -> dict[str, Any]:
    """Set ``section.key=value`` items (aam's ``--override run.steps=100``) in ``data``.

    A value is read as JSON where it parses (``100``, ``true``, ``null``, ``0.5``), else as a
    string (``policy.model=openai/smollm2``).

    Args:
        data: The file's sections (not changed).
        items: ``section.key=value`` strings.
        where: What errors start with.

    Returns:
        A copy of ``data`` with the items set.

    Raises:
        ConfigError: An item is not ``section.key=value`` or names an unknown section.
    """
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for item in items:
        key, eq, text = item.partition("=")
        section, dot, field = key.strip().partition(".")
        if not eq or not dot or not section or not field:
            raise ConfigError(
                f"--override {item!r}: expected SECTION.KEY=VALUE, e.g. run.steps=100"
            )
        if section not in SECTIONS:
            raise ConfigError(
                f"--override {item!r}: {section}: unknown section (aam's sections: "
                f"{', '.join(SECTIONS)})"
            )
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        if value is not None and not isinstance(value, str) and _takes_text(section, field):
            value = text  # capture.layers=0 is the text "0", as aam's "0,1,2"
        target = out.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{where}: {section}: expected a mapping of keys")
        target[field] = value
    return out


def _takes_text(section: str, key: str) -> bool:
    """Whether ``section.key`` holds text (so an override's value stays as typed)."""
    model = SectionedFile.model_fields[section].annotation
    models = [m for m in getattr(model, "__args__", (model,)) if isinstance(m, type)]
    for m in models:
        if issubclass(m, BaseModel) and key in m.model_fields:
            return m.model_fields[key].annotation in (str, str | None)
    return False


def _parse(data: dict[str, Any], where: str) -> SectionedFile:
    unknown = [k for k in data if k not in SECTIONS]
    if unknown:
        raise ConfigError(
            f"{where}: {unknown[0]}: unknown section (aam's experiment config has "
            f"{', '.join(SECTIONS)}; a Vivarium config runs with `vvm run`)"
        )
    try:
        parsed = SectionedFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, where)) from None
    if parsed.policy.kind == "transformerlens":
        raise ConfigError(
            f"{where}: policy.kind: transformerlens (activation capture) has no Vivarium "
            "counterpart; use random or cognitive"
        )
    return parsed


def _fields(parsed: SectionedFile, name: str) -> dict[str, Any]:
    run, scheduler, policy = parsed.run, parsed.scheduler, parsed.policy
    cognitive = policy.kind == "cognitive"
    limited = cognitive and policy.rate_limit_enabled
    capped = limited and "rate_limit_max_concurrent" in policy.model_fields_set
    concurrency = capped_concurrency(
        scheduler.max_concurrency, policy.rate_limit_max_concurrent if capped else None
    )
    fields: dict[str, Any] = {
        "name": name,
        "world": "channel",
        "policy": policy.kind,
        "agents": run.agents,
        "steps": run.steps,
        "seed": run.seed,
        "run_id": run.run_id,
        "deterministic_timestamps": run.deterministic_timestamps,
        "scheduling": "simultaneous",
        "order": "sorted" if scheduler.sort_mode == "agent_id" else "shuffle",
        "max_concurrency": concurrency,
        "message_history_limit": policy.message_history if cognitive else 0,
    }
    if cognitive:
        llm: dict[str, Any] = {
            "model": policy.model,
            "mock": policy.mock_llm,
            "api_base": policy.api_base,
            "api_key": policy.api_key,
            "agent_timeout": scheduler.per_agent_timeout_s,
            "agent_retries": BARRIER_AGENT_RETRIES,
        }
        if limited:
            llm["rate_limit_rpm"] = policy.rate_limit_rpm
            llm["rate_limit_tpm"] = policy.rate_limit_tpm
        fields["llm"] = llm
    return fields


def _describe(exc: ValidationError, where: str) -> str:
    """Our config's errors, named by the file's ``section.key`` each field came from."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{_SOURCE.get(loc, loc)}: {msg}")
    return f"{where}: " + "; ".join(parts)


def convert_sections(
    data: dict[str, Any], *, where: str = "config", name: str = "experiment"
) -> SectionedConfig:
    """Translate aam's sectioned config into an ``ExperimentConfig`` (see the module doc).

    Args:
        data: The parsed file: a mapping of sections.
        where: What error messages start with (the file).
        name: The experiment's name (the trace's default file name).

    Returns:
        The translated config and the runs folder.

    Raises:
        ConfigError: A section or key is unknown or invalid (one line naming section and key),
            or the policy kind has no Vivarium counterpart.
    """
    parsed = _parse(data, where)
    try:
        config = ExperimentConfig.model_validate(_fields(parsed, name))
    except ValidationError as exc:
        raise ConfigError(_describe(exc, where)) from None
    return SectionedConfig(config=config, runs_dir=Path(parsed.run.runs_dir))


def experiment_name(path: str | Path) -> str:
    """A config file's name as an experiment name (its stem, else ``experiment``)."""
    stem = Path(path).stem
    return stem if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}", stem) else "experiment"


def load_sectioned_config(path: str | Path, overrides: list[str] | None = None) -> SectionedConfig:
    """Read aam's sectioned JSON config from ``path`` and translate it.

    Args:
        path: The file (JSON, as aam writes it; YAML of the same shape reads too).
        overrides: ``section.key=value`` items applied first (aam's ``--override``).

    Returns:
        The translated config (see ``convert_sections``).

    Raises:
        ConfigError: The file is missing, unreadable or not a mapping, or a section or key
            is unknown or invalid.
    """
    where = str(path)
    data = load_config_data(path)
    if overrides:
        data = apply_overrides(data, overrides, where)
    return convert_sections(data, where=where, name=experiment_name(path))
