"""Checking an object against a protocol: the one way Vivarium asks what user code can do.

A world, a policy or a gateway is anything with the right methods; what it must have and what
it may have are written down as ``typing.Protocol``s (``vivarium.worlds.base``,
``vivarium.policies.base``, ``vivarium.gateways.base``). Vivarium never probes a user's object
for a member by name: it checks the object against a declared protocol, once, where the object
enters (an engine's build: ``vivarium.engine.capabilities``; a figure's input:
``vivarium.analysis.world_view``), and uses the answer typed afterwards.

The check is structural, as ``isinstance`` against a ``runtime_checkable`` protocol is, and a
little stricter: a method must be callable (``positions = {...}`` is data, not the method
``positions()``), and an object with some members of a capability but not all (``snapshot``
without ``restore``) is refused with one line naming what is missing, where ``isinstance`` would
quietly answer no.
"""

from __future__ import annotations

import functools
from typing import Generic, Protocol

from vivarium.errors import ConfigError

__all__ = ["implements", "lacking", "protocol_members", "require"]


@functools.cache
def protocol_members(protocol: type) -> tuple[str, ...]:
    """The public methods and attributes a protocol declares, in declaration order."""
    names: dict[str, None] = {}
    for base in reversed(protocol.__mro__):
        if base in (object, Protocol, Generic):
            continue
        for name in (*vars(base).get("__annotations__", {}), *vars(base)):
            if not name.startswith("_"):
                names[name] = None
    return tuple(names)


def _is_method(protocol: type, name: str) -> bool:
    member = next((vars(b)[name] for b in protocol.__mro__ if name in vars(b)), None)
    return callable(member) or isinstance(member, classmethod | staticmethod)


@functools.cache
def _members(protocol: type) -> tuple[tuple[str, bool], ...]:
    """Each member of ``protocol`` and whether it is a method (worked out once per protocol)."""
    return tuple((name, _is_method(protocol, name)) for name in protocol_members(protocol))


def lacking(obj: object, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks, in declaration order.

    A method ``obj`` has as something that cannot be called counts as lacking.
    """
    return [
        name
        for name, method in _members(protocol)
        if not hasattr(obj, name) or (method and not callable(getattr(obj, name)))
    ]


def _called(name: str, protocol: type) -> str:
    return f"{name}()" if _is_method(protocol, name) else name


def implements(obj: object, protocol: type, owner: str | None = None) -> bool:
    """Whether ``obj`` has every member of ``protocol`` (its methods callable).

    Args:
        obj: The object (or class) to check.
        protocol: The protocol, a capability of one or more members.
        owner: How to name ``obj`` in an error (``"world Pond"``). Given, an object with some
            members of the protocol but not all is refused; None: it just does not implement it.

    Raises:
        ConfigError: ``owner`` given, and ``obj`` has half of the capability (names the rest).
    """
    missing = lacking(obj, protocol)
    if not missing:
        return True
    members = protocol_members(protocol)
    if owner is None or len(missing) == len(members):
        return False
    present = next(m for m in members if m not in missing)
    raise ConfigError(
        f"{owner} has {_called(present, protocol)} but no {_called(missing[0], protocol)} "
        f"method (a {protocol.__name__} needs {', '.join(_called(m, protocol) for m in members)})"
    )


def require(obj: object, protocol: type, owner: str) -> None:
    """Refuse ``obj`` unless it has every member of ``protocol``.

    Raises:
        ConfigError: names the first member ``obj`` lacks (one line).
    """
    for name in lacking(obj, protocol):
        raise ConfigError(f"{owner} has no {_called(name, protocol)} method")
