"""A world's reference, drawn from its code: its observation keys and its actions' arguments.

A policy author needs two things from a world: the keys of the observation it is handed, and
the actions it may return with their arguments. Both are already data in the code, the keys in
the world class's ``OBSERVATION_KEYS`` (``vivarium.worlds.observation``) and the actions in its
``ActionRegistry``, whose argument schemas are the very tool specs an LLM is shown. ``describe``
turns them into Markdown; the docs site's page on the built-in worlds is ``worlds_page()``, made
by the same code, so neither can drift from the worlds.

```python
from vivarium.worlds import describe

print(describe("ecology"))  # a built-in world, by name
print(describe(MyWorld))  # your own: OBSERVATION_KEYS and a class attribute `registry`
print(describe(world))  # an instance: its own registry, extensions included
```
"""

from __future__ import annotations

import difflib
import html
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vivarium.errors import ConfigError
from vivarium.protocols import implements
from vivarium.worlds.base import ActionWorld, DocumentedWorld, NamedWorld, World
from vivarium.worlds.observation import ObservationKey
from vivarium.worlds.registry import ActionRegistry, ActionSpec


def _channel() -> tuple[type, ActionRegistry]:
    from vivarium.worlds.channel import CHANNEL_ACTIONS, InMemoryChannel

    return InMemoryChannel, CHANNEL_ACTIONS


def _ecology() -> tuple[type, ActionRegistry]:
    from vivarium.worlds.ecology import ECOLOGY_ACTIONS, EcologyWorld

    return EcologyWorld, ECOLOGY_ACTIONS


def _boltzmann() -> tuple[type, ActionRegistry]:
    from vivarium.worlds.boltzmann import BOLTZMANN_ACTIONS, BoltzmannWorld

    return BoltzmannWorld, BOLTZMANN_ACTIONS


# The built-in worlds (``vivarium.experiment.build.BUILTIN_WORLDS``; a test keeps the two lists equal),
# imported only when described: the ecology world pulls in the sandbox and the memory index.
BUILTIN_WORLDS: dict[str, Callable[[], tuple[type, ActionRegistry]]] = {
    "channel": _channel,
    "ecology": _ecology,
    "boltzmann": _boltzmann,
}
"""Built-in world name -> loader of its class and its default action registry (page order)."""


@dataclass(frozen=True, slots=True)
class ArgumentDoc:
    """One argument of an action, as the tool spec an LLM sees describes it.

    Attributes:
        name: The argument's name.
        type: Its type, from the JSON schema, written as Python (``"int"``, ``"str | None"``).
        required: Whether a request must give it.
        default: The default as Python writes it (``False``, ``0``), when the argument is
            optional and its default is not None; else None.
        description: What it means (the argument model's ``Field(description=...)``).
    """

    name: str
    type: str
    required: bool
    default: str | None
    description: str


def action_arguments(spec: ActionSpec) -> list[ArgumentDoc]:
    """The arguments of an action, from its tool spec (the JSON schema of its argument model).

    The tool spec rather than the pydantic model: it is what an LLM is shown, including any
    change a model makes to its own schema (the channel's ``emit_event`` shows ``value`` as
    required, though a request may leave it out).

    Args:
        spec: The action.

    Returns:
        One row per argument, in the model's field order.
    """
    schema = spec.tool_spec()["function"]["parameters"]
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    rows = []
    for name, prop in schema.get("properties", {}).items():
        default = prop.get("default") if name not in required else None
        rows.append(
            ArgumentDoc(
                name=name,
                type=_schema_type(prop, defs),
                required=name in required,
                default=None if default is None else repr(default),
                description=str(prop.get("description", "")),
            )
        )
    return rows


def describe(world: Any, *, heading_level: int = 1) -> str:
    """The Markdown reference of a world: its observation keys, then its actions' arguments.

    Args:
        world: A built-in world's name (``"ecology"``), a world class, or a world instance.
            A class documents its actions through a class attribute ``registry`` (an
            ``ActionRegistry``; built-in classes use their module's registry); an instance
            through its own ``registry``, so actions it added show too.
        heading_level: The level of the world's heading (1: ``#``); sections go one deeper.

    Returns:
        Markdown: a heading, the class's summary line, a table of observation keys (name, type,
        meaning) and, per action, its description and a table of arguments (name, type,
        required, description).

    Raises:
        ConfigError: ``world`` is a name no built-in world has, or not a world at all.
    """
    name, cls, registry = _resolve(world)
    h = "#" * heading_level
    lines = [f"{h} `{name}`", ""]
    where = f"`{cls.__module__}.{cls.__qualname__}`"
    summary = _summary(cls)
    lines += [f"{summary} ({where})" if summary else where, ""]
    lines += _observation_section(observation_keys(world) or observation_keys(cls), h + "#")
    lines += _actions_section(registry, h + "#")
    return "\n".join(lines).rstrip() + "\n"


def worlds_page() -> str:
    """The docs site's page on the built-in worlds: ``describe`` of each, in one page.

    Returns:
        The page as Markdown.
    """
    lines = [
        "# Worlds: observations and actions",
        "",
        "What each built-in world hands a policy (the keys of its observation) and what it",
        "accepts back (its actions and their arguments). This page is drawn from the code: the",
        "keys from each world class's `OBSERVATION_KEYS`, the actions from its `ActionRegistry`",
        "(their argument tables are the tool specs an LLM is shown). A test checks that",
        "`observe()` returns exactly the declared keys.",
        "",
        "The same reference for any world, your own included, is one call away:",
        "",
        "```python",
        "from vivarium.worlds import describe",
        "",
        'print(describe("ecology"))  # or describe(MyWorld), describe(world)',
        "```",
        "",
        "A policy's `decide` returns an `ActionRequest` whose `action_name` is one of a world's",
        "actions and whose `arguments` is a dict of that action's arguments. An unknown action or",
        "arguments the action refuses give a failed outcome with the reason (recorded, and shown",
        "to the agent), never an exception.",
        "",
    ]
    for name in BUILTIN_WORLDS:
        lines.append(describe(name, heading_level=2))
    return "\n".join(lines)


# -- internals --------------------------------------------------------------------------------
def _resolve(world: Any) -> tuple[str, type, ActionRegistry | None]:
    """The world's name, class and action registry (None when it has none to read)."""
    if isinstance(world, str):
        loader = BUILTIN_WORLDS.get(world)
        if loader is None:
            known = ", ".join(sorted(BUILTIN_WORLDS))
            close = difflib.get_close_matches(world, list(BUILTIN_WORLDS), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(
                f"describe: no built-in world '{world}' (built-in: {known}){hint} "
                "Pass your own world's class or an instance instead."
            )
        cls, registry = loader()
        return world, cls, registry
    builtin = dict(loader() for loader in BUILTIN_WORLDS.values())
    if inspect.isclass(world) or implements(world, World):
        # A class, or an instance: its own registry (``ActionWorld``), extensions included.
        cls = world if inspect.isclass(world) else type(world)
        own = world.registry if implements(world, ActionWorld) else None
        registry = own if isinstance(own, ActionRegistry) else builtin.get(cls)
    else:
        raise ConfigError(
            f"describe: {world!r} is not a world: pass a built-in world's name, a world class "
            "or a world instance (a factory function cannot be described without calling it)"
        )
    name = world.name if implements(world, NamedWorld) else None
    return (name if isinstance(name, str) and name else cls.__name__), cls, registry


def observation_keys(world: object) -> tuple[ObservationKey, ...] | None:
    """The keys a world (class or instance) declares in ``OBSERVATION_KEYS``, if it does.

    Args:
        world: A world class or instance (``vivarium.worlds.base.DocumentedWorld``).

    Returns:
        The declared keys, in order; None when the world declares none.
    """
    keys = world.OBSERVATION_KEYS if implements(world, DocumentedWorld) else None
    return None if keys is None else tuple(keys)


def _summary(cls: type) -> str:
    """The first paragraph of a class's own docstring, joined into one line."""
    doc = cls.__dict__.get("__doc__") or ""
    first = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return " ".join(first.split())


def _observation_section(keys: tuple[ObservationKey, ...] | None, h: str) -> list[str]:
    lines = [f"{h} Observation keys", ""]
    if keys is None:
        return [
            *lines,
            "Not declared: give the class an `OBSERVATION_KEYS` tuple of",
            "`vivarium.worlds.observation.ObservationKey(name, type, description)`.",
            "",
        ]
    lines += ["| key | type | meaning |", "|---|---|---|"]
    lines += [f"| `{k.name}` | {_code(k.type)} | {_cell(k.description)} |" for k in keys]
    return [*lines, ""]


def _actions_section(registry: ActionRegistry | None, h: str) -> list[str]:
    lines = [f"{h} Actions", ""]
    if registry is None:
        return [
            *lines,
            "No action registry: give the class a `registry` attribute (an `ActionRegistry`)",
            "to list its actions here and to offer them to LLM policies as tools.",
            "",
        ]
    names = registry.names()
    offered = ", ".join(f"`{n}`" for n in names)
    forced = registry.forced_default(names)
    lines += [f"Offered in this order: {offered}. An LLM agent with `force_tool` calls `{forced}`."]
    lines.append("")
    for spec in registry:
        lines += [f"{h}# `{spec.name}`", "", _cell(spec.description), ""]
        args = action_arguments(spec)
        if not args:
            lines += ["No arguments.", ""]
            continue
        lines += ["| argument | type | required (default) | description |", "|---|---|---|---|"]
        for a in args:
            required = "yes" if a.required else "no" if a.default is None else f"no, `{a.default}`"
            lines.append(f"| `{a.name}` | {_code(a.type)} | {required} | {_cell(a.description)} |")
        lines.append("")
    return lines


_JSON_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
    "array": "list",
    "object": "dict",
}


def _schema_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """A JSON-schema property's type written as Python, with its bounds (``int, > 0``)."""
    text = _base_type(prop, defs)
    bounds = [
        f"{op} {prop[key]}"
        for key, op in (
            ("minimum", ">="),
            ("exclusiveMinimum", ">"),
            ("maximum", "<="),
            ("exclusiveMaximum", "<"),
        )
        if key in prop
    ]
    return ", ".join([text, *bounds])


def _base_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        target = prop["$ref"].rsplit("/", 1)[-1]
        return str(defs.get(target, {}).get("title", target))
    for union in ("anyOf", "oneOf"):
        if union in prop:
            return " | ".join(_base_type(p, defs) for p in prop[union])
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    kind = prop.get("type")
    if isinstance(kind, list):
        return " | ".join(_JSON_TYPES.get(k, k) for k in kind)
    if kind == "array" and isinstance(prop.get("items"), dict) and prop["items"]:
        return f"list[{_base_type(prop['items'], defs)}]"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        value = prop["additionalProperties"]
        if value:
            return f"dict[str, {_base_type(value, defs)}]"
    return _JSON_TYPES.get(kind, str(kind)) if kind is not None else "any"


def _code(text: str) -> str:
    """Code in a table cell: HTML, so that a ``|`` splits no cell in any Markdown flavour."""
    return f"<code>{html.escape(text, quote=False).replace('|', '&#124;')}</code>"


def _cell(text: str) -> str:
    """Text in a table cell on one line, its ``|`` escaped outside code spans."""
    parts = " ".join(text.split()).split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


__all__ = ["BUILTIN_WORLDS", "ArgumentDoc", "action_arguments", "describe", "worlds_page"]
