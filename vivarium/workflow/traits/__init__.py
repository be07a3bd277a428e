"""Trait and goal files: reusable prompt fragments an agent names under ``components``.

The agent ecology's format: ``components: {traits: [name, ...], goals: [name, ...]}`` in
``agent.yaml``, each name a YAML file with ``name``, ``type`` (trait / goal), ``version``,
``description``, ``inject_into`` (step names), ``prompt_fragment`` and ``requires_context``.
A name is looked up first in the agent folder's sibling ``_components/traits/`` (or
``_components/goals/``), as in that project's layout, then in the small library shipped here
(this package's ``*.yaml`` and ``goals/*.yaml``: our own text under the original's names), so a
project can override a built-in trait by writing one of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["KINDS", "TraitFile", "known", "library", "resolve", "sources"]

BUILTIN_DIR = Path(__file__).resolve().parent
# ``components`` key -> the ``type`` its files declare
KINDS: dict[str, str] = {"traits": "trait", "goals": "goal"}


class TraitFile(BaseModel):
    """One trait or goal file, as the agent ecology writes them."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    type: Literal["trait", "goal"]
    version: int = 1
    description: str = ""
    inject_into: list[str] = Field(default_factory=list)
    prompt_fragment: str = Field(min_length=1)
    requires_context: list[str] = Field(default_factory=list)


def _dirs(kind: str, folder: str | Path | None) -> list[Path]:
    """Where ``kind`` files are looked up, lowest priority first."""
    builtin = BUILTIN_DIR if kind == "traits" else BUILTIN_DIR / kind
    out = [builtin]
    if folder is not None:
        out.append(Path(folder).parent / "_components" / kind)
    return out


def _read(path: Path, kind: str) -> TraitFile:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: cannot read: {first}") from None
    try:
        found = TraitFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "file"
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        raise ValueError(f"{path}: {loc}: {msg}") from None
    if found.type != KINDS[kind]:
        raise ValueError(f"{path}: type: {found.type!r} in the {kind} folder")
    return found


def sources(kind: str, folder: str | Path | None = None) -> dict[str, Path]:
    """The file each ``kind`` name comes from (as ``library`` picks it), by name.

    Raises:
        ValueError: A file cannot be read or is not a valid trait/goal file (one line).
    """
    found: dict[str, Path] = {}
    for directory in _dirs(kind, folder):
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.yaml")):
            found[_read(path, kind).name] = path
    return found


def library(kind: str, folder: str | Path | None = None) -> dict[str, TraitFile]:
    """Every ``kind`` (``traits`` / ``goals``) an agent in ``folder`` can name, by ``name``.

    Files are indexed by their ``name`` field, as the original's registry does; a file in the
    project's ``_components`` wins over a built-in one of the same name.

    Raises:
        ValueError: A file cannot be read or is not a valid trait/goal file (one line).
    """
    return {name: _read(path, kind) for name, path in sources(kind, folder).items()}


def known(kind: str, folder: str | Path | None = None) -> list[str]:
    """The names ``library`` offers, sorted (for error messages)."""
    return sorted(library(kind, folder))


def resolve(config: Mapping[str, Any], folder: str | Path | None = None) -> list[TraitFile]:
    """The files a ``components: {traits, goals}`` mapping names: traits, then goals, in order.

    Raises:
        ValueError: An unknown key or name, as one line naming the field and the known names.
    """
    out: list[TraitFile] = []
    for key in config:
        if key not in KINDS:
            raise ValueError(f"components.{key}: unknown field (known: {', '.join(KINDS)})")
    for kind in KINDS:
        names = config.get(kind) or []
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise ValueError(f"components.{kind}: expected a list of names")
        available = library(kind, folder)
        for i, name in enumerate(names):
            item = available.get(str(name))
            if item is None:
                shown = ", ".join(sorted(available)) or "none"
                raise ValueError(
                    f"components.{kind}[{i}]: unknown {KINDS[kind]} {name!r} (known: {shown})"
                )
            out.append(item)
    return out
