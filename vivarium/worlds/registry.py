"""The action registry: names, argument schemas and handlers, shared by worlds that extend it.

A handler returns an ``ActionResult`` or raises ``ActionError(reason)``; arguments are checked
against the action's pydantic model first. Either way the engine records an outcome: an unknown
action or bad arguments never raise out of a run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from vivarium.types import ActionRequest, ActionResult


class ActionError(Exception):
    """Raised by a handler to fail an action with a reason that is recorded."""


class NoArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


Handler = Callable[[Any, ActionRequest, BaseModel], ActionResult]


@dataclass(frozen=True, slots=True)
class ActionSpec:
    name: str
    handler: Handler
    description: str
    arguments: type[BaseModel] = NoArguments

    def tool_spec(self) -> dict[str, Any]:
        """The OpenAI-style tool description an LLM sees for this action (built once; read-only)."""
        return _tool_spec(self.name, self.description, self.arguments)


@functools.lru_cache(maxsize=1024)
def _tool_spec(name: str, description: str, arguments: type[BaseModel]) -> dict[str, Any]:
    # Generating a JSON schema costs ~0.5 ms: far too much to repeat for every LLM decision.
    schema = arguments.model_json_schema()
    schema.pop("title", None)
    schema.setdefault("properties", {})
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


def describe_validation_error(exc: ValidationError) -> str:
    """One line from a pydantic error: ``field: problem; field: problem``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "arguments"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


class ActionRegistry:
    """Maps action names to specs. ``extend()`` gives a copy a new world can add to.

    ``default_tool`` is the world's main action: the one an LLM agent is made to call when its
    ``force_tool`` is ``True`` (small models act only when a tool is forced). Unset, it is the
    first action other than ``noop``.
    """

    def __init__(
        self, specs: list[ActionSpec] | None = None, *, default_tool: str | None = None
    ) -> None:
        self._specs: dict[str, ActionSpec] = {}
        self.default_tool = default_tool
        for spec in specs or []:
            self.register(spec)

    def register(self, spec: ActionSpec) -> None:
        self._specs[spec.name] = spec

    def action(
        self, name: str, description: str, arguments: type[BaseModel] = NoArguments
    ) -> Callable[[Handler], Handler]:
        """Decorator form of ``register``."""

        def wrap(fn: Handler) -> Handler:
            self.register(ActionSpec(name, fn, description, arguments))
            return fn

        return wrap

    def extend(self) -> ActionRegistry:
        return ActionRegistry(list(self._specs.values()), default_tool=self.default_tool)

    def forced_default(self, offered: list[str] | tuple[str, ...]) -> str | None:
        """The tool ``force_tool=True`` forces among ``offered``: the default tool if offered,
        else the first offered action other than ``noop`` (else ``noop``; None if none)."""
        if self.default_tool in offered:
            return self.default_tool
        return next((n for n in offered if n != "noop"), offered[0] if offered else None)

    def get(self, name: str) -> ActionSpec | None:
        return self._specs.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ActionSpec]:
        return iter(self._specs.values())

    def tool_specs(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        specs = self._specs.values() if names is None else [self._specs[n] for n in names]
        return [s.tool_spec() for s in specs]

    def dispatch(self, world: Any, request: ActionRequest) -> ActionResult:
        spec = self._specs.get(request.action_name)
        if spec is None:
            known = ", ".join(self._specs)
            return ActionResult.failed(f"unknown action '{request.action_name}' (known: {known})")
        try:
            args = spec.arguments.model_validate(request.arguments)
        except ValidationError as exc:
            return ActionResult.failed(
                f"bad arguments for {spec.name}: {describe_validation_error(exc)}"
            )
        try:
            return spec.handler(world, request, args)
        except ActionError as exc:
            return ActionResult.failed(str(exc))
