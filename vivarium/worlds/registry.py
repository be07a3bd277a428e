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


# No docstring: pydantic would put it in the tool's JSON schema (the prompt an LLM sees).
class NoArguments(BaseModel):  # noqa: D101
    model_config = ConfigDict(extra="forbid")


_NO_ARGUMENTS = NoArguments()

Handler = Callable[[Any, ActionRequest, BaseModel], ActionResult]


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One action a world offers: its name, handler, description and argument model.

    Frozen so that a registry copied by ``extend()`` can share specs safely; the description
    and the argument model's JSON schema make up the tool an LLM sees.
    """

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
    schema = _without_empty_items(arguments.model_json_schema())
    schema.pop("title", None)
    schema.setdefault("properties", {})
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


def _without_empty_items(schema: Any, names: bool = False) -> Any:
    """``schema`` without ``"items": {}`` anywhere (pydantic writes it for ``list[Any]``).

    An empty ``items`` schema allows anything, as its absence does, so the meaning is the same;
    but some servers' grammar converters (llama-cpp-python's) fail on it and then constrain
    nothing at all. ``names``: ``schema`` maps names to schemas (``properties``, ``$defs``),
    where a field called ``items`` is kept.
    """
    if isinstance(schema, list):
        return [_without_empty_items(value) for value in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: _without_empty_items(value, names=not names and key in _NAMED_SCHEMAS)
        for key, value in schema.items()
        if names or not (key == "items" and value == {})
    }


_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions", "patternProperties"})


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
        """Start a registry.

        Args:
            specs: Actions to register, in order (the order tools are offered in).
            default_tool: The action ``force_tool=True`` makes an LLM call; see the class.
        """
        self._specs: dict[str, ActionSpec] = {}
        self.default_tool = default_tool
        for spec in specs or []:
            self.register(spec)

    def register(self, spec: ActionSpec) -> None:
        """Add an action, replacing any of the same name (so a world can override a base action).

        Args:
            spec: The action to add.
        """
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
        """A copy to add to or override, leaving this registry (often a module constant) as is.

        Returns:
            A new registry with the same specs and default tool.
        """
        return ActionRegistry(list(self._specs.values()), default_tool=self.default_tool)

    def forced_default(self, offered: list[str] | tuple[str, ...]) -> str | None:
        """The tool ``force_tool=True`` forces among ``offered``.

        Forcing ``noop`` would make a forced agent idle, so it is chosen only when nothing else is
        offered.

        Args:
            offered: The action names offered to the agent this decision.

        Returns:
            The default tool if offered, else the first offered action other than ``noop``, else
            ``noop``; None if nothing is offered.
        """
        if self.default_tool in offered:
            return self.default_tool
        return next((n for n in offered if n != "noop"), offered[0] if offered else None)

    def get(self, name: str) -> ActionSpec | None:
        """The spec registered as ``name``, or None if there is none."""
        return self._specs.get(name)

    def names(self) -> tuple[str, ...]:
        """Registered action names in registration order (the ``tools`` observations list)."""
        return tuple(self._specs)

    def __contains__(self, name: object) -> bool:
        """Whether an action called ``name`` is registered."""
        return name in self._specs

    def __iter__(self) -> Iterator[ActionSpec]:
        """The specs in registration order."""
        return iter(self._specs.values())

    def tool_specs(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """The tool descriptions an LLM is offered.

        Args:
            names: The actions to describe, in this order; None for all, in registration order.

        Returns:
            One OpenAI-style tool description per action (shared, cached dicts: do not mutate).

        Raises:
            KeyError: A name is not registered.
        """
        specs = self._specs.values() if names is None else [self._specs[n] for n in names]
        return [s.tool_spec() for s in specs]

    def dispatch(self, world: Any, request: ActionRequest) -> ActionResult:
        """Validate a request's arguments and run its handler, turning every refusal into a result.

        An unknown action, arguments its model rejects, or an ``ActionError`` from the handler
        become a failed ``ActionResult`` with the reason, so that an agent's mistake is recorded
        and shown to it rather than ending the run.

        Args:
            world: The world passed to the handler.
            request: The action to perform.

        Returns:
            The handler's result, or a failed result saying why the action was refused.
        """
        spec = self._specs.get(request.action_name)
        if spec is None:
            known = ", ".join(self._specs)
            return ActionResult.failed(f"unknown action '{request.action_name}' (known: {known})")
        arguments = request.arguments
        try:
            # An action without arguments, called without any (every ``noop``): the one valid
            # value, shared, instead of a validation per decision.
            if spec.arguments is NoArguments and type(arguments) is dict and not arguments:
                args: BaseModel = _NO_ARGUMENTS
            else:
                args = spec.arguments.model_validate(arguments)
        except ValidationError as exc:
            return ActionResult.failed(
                f"bad arguments for {spec.name}: {describe_validation_error(exc)}"
            )
        try:
            return spec.handler(world, request, args)
        except ActionError as exc:
            return ActionResult.failed(str(exc))
