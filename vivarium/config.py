"""Experiment configs: pydantic models, loadable from YAML or JSON, with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vivarium.errors import ConfigError

MAX_SEED = 2**63 - 1


class ExperimentConfig(BaseModel):
    """Everything that defines a run. Same config and seed -> byte-identical trace."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: str = Field(default="experiment", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
    world: str = "channel"
    policy: str = "random"
    agents: int = Field(default=5, ge=1, le=1 << 24)
    steps: int = Field(default=100, ge=0)
    seed: int = Field(default=42, ge=0, le=MAX_SEED)
    scheduling: Literal["sequential", "simultaneous"] = "sequential"
    order: Literal["sorted", "shuffle"] = "sorted"
    message_history_limit: int = Field(default=20, ge=0)
    action_space: list[str] = Field(default_factory=lambda: ["noop", "emit_event"], min_length=1)
    deterministic_timestamps: bool = True
    run_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
    db: str | None = None

    @field_validator("world", "policy")
    @classmethod
    def _known(cls, value: str, info: Any) -> str:
        from vivarium.build import known_names

        names = known_names(info.field_name)
        if value not in names:
            raise ValueError(f"unknown {info.field_name} '{value}' (known: {', '.join(names)})")
        return value

    def identity(self) -> dict[str, Any]:
        """The fields that decide the trace's content (not where it is written)."""
        return self.model_dump(exclude={"db", "run_id"})

    def resolved_run_id(self) -> str:
        from vivarium.seeding import canonical_json, derive_run_id

        return self.run_id or derive_run_id(self.name, canonical_json(self.identity()))


def describe_errors(exc: ValidationError, where: str = "config") -> str:
    """One line naming every bad field: ``config: agents: must be >= 1; seed: ...``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{loc}: {msg}")
    return f"{where}: " + "; ".join(parts)


def make_config(model: type[BaseModel], data: dict[str, Any], where: str = "config") -> Any:
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
    return make_config(ExperimentConfig, load_config_data(path), where=str(path))
