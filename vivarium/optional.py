"""Optional packages: import one where it is first used, or say which extra installs it.

``import vivarium`` needs none of them. Each belongs to an extra of the ``vivarium-lab``
distribution, and a missing one is a one-line ``MissingDependency`` that names it::

    matplotlib is not installed: pip install "vivarium-lab[notebooks]"

Example:
    >>> from vivarium.optional import require
    >>> json = require("json")  # any module; optional ones name their extra when missing
"""

from __future__ import annotations

import importlib
from types import ModuleType

from vivarium.errors import MissingDependency

__all__ = ["EXTRAS", "DISTRIBUTION", "available", "install_hint", "require"]

DISTRIBUTION = "vivarium-lab"

# Top-level package -> the extra of ``vivarium-lab`` that installs it (pyproject.toml).
EXTRAS: dict[str, str] = {
    "litellm": "llm",
    "aiohttp": "llm",
    "mcp": "llm",
    "langgraph": "llm",
    "matplotlib": "notebooks",
    "ipywidgets": "notebooks",
    "ray": "scale",
    "datasets": "rl",
}


def install_hint(module: str, extra: str | None = None) -> str:
    """The one-line message for a missing ``module``.

    Args:
        module: The module that failed to import (``"matplotlib.pyplot"`` names
            ``matplotlib``).
        extra: The extra that installs it; looked up in ``EXTRAS`` when None.

    Returns:
        ``<package> is not installed: pip install "vivarium-lab[<extra>]"``, or
        ``pip install <package>`` for a package no extra holds.
    """
    package = module.partition(".")[0]
    extra = extra or EXTRAS.get(package)
    target = f'"{DISTRIBUTION}[{extra}]"' if extra else package
    return f"{package} is not installed: pip install {target}"


def require(module: str, extra: str | None = None) -> ModuleType:
    """Import ``module``, or raise the error that says how to install it.

    Args:
        module: A module name, e.g. ``"matplotlib.pyplot"``.
        extra: The extra that installs it; looked up in ``EXTRAS`` when None.

    Returns:
        The imported module.

    Raises:
        MissingDependency: ``module`` cannot be imported; the message names the extra.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.partition(".")[0]
        missing = (exc.name or package).partition(".")[0]
        if missing != package:
            # The package is there but a package it needs is not: name that one.
            raise MissingDependency(
                f"{package} cannot be imported: {missing} is missing "
                f"({install_hint(package, extra).split(': ', 1)[1]} installs both)",
                name=module,
            ) from exc
        raise MissingDependency(install_hint(module, extra), name=module) from None


def available(module: str) -> bool:
    """Whether ``module`` can be imported (it is imported when it can).

    For code that has a fallback when an optional package is missing.
    """
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
