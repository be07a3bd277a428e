"""Names a package exports but loads on first use: one mechanism for every package that does.

``import vivarium`` (and ``vivarium.analysis``, ``vivarium.workflow``, ``vivarium.experiment``)
stays light by naming, in a table, the module each public name lives in, and importing that
module only when the name is first asked for (PEP 562's module ``__getattr__``). A name once
loaded is kept in the package's namespace, so the next access is a plain attribute read.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str,
    names: Mapping[str, str],
    exported: Iterable[str],
    submodules: Iterable[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, loading its names on first use.

    Args:
        package: The package's ``__name__``.
        names: Each public name -> the module (dotted, absolute) that defines it.
        exported: The package's public names (``__dir__`` lists them, loaded or not).
        submodules: Submodules of the package given by their own name (``vivarium.analysis.plots``
            as ``analysis.plots``).

    Returns:
        ``(__getattr__, __dir__)``, to assign at the package's module level.
    """
    namespace = sys.modules[package].__dict__
    modules = frozenset(submodules)
    listed = sorted(exported)

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
        elif name in modules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return list(listed)

    return __getattr__, __dir__
