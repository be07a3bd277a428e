"""Older import paths of the modules that moved into ``vivarium.experiment``, kept working.

The way from a config to a run was eight modules at the package root; it is now one package,
``vivarium.experiment``, whose modules read in the order of the flow. Code written against the
older paths (``from vivarium.config import ExperimentConfig``, ``from vivarium.build import
register_policy``, a pickle or a monkeypatch naming ``vivarium.runner``) keeps working: the
older name is the same module object as the newer one, so a change made through either is
seen through both. The table is the one place that knows the older names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

MOVED: dict[str, str] = {
    "vivarium.config": "vivarium.experiment.config",
    "vivarium.config_sections": "vivarium.experiment.sections",
    "vivarium.identity": "vivarium.experiment.digest",
    "vivarium.objects": "vivarium.experiment.objects",
    "vivarium.plan": "vivarium.experiment.plan",
    "vivarium.build": "vivarium.experiment.build",
    "vivarium.runner": "vivarium.experiment.runner",
}


class _Alias(importlib.abc.Loader):
    """Loads an older name as the module it moved to (the very object, not a copy)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module it names has run already."""


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds an older module name of ``MOVED`` and hands back the module it moved to."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        moved = MOVED.get(fullname)
        if moved is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(moved))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``import vivarium`` calls this)."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())
