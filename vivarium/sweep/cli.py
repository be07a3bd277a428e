"""The sweep from a config file: ``vvm sweep CONFIG`` and the ``sweep:`` section of a config.

A config file may hold, next to the experiment's fields, a ``sweep:`` section with the
arguments of ``run_sweep`` (grid, configs, replications, backend, max_workers, seed, folder,
ray_address, plugins); ``split_sweep_section`` checks it, ``parse_grid_items`` reads the
``--grid FIELD=VALUES`` flags, and ``main_sweep`` runs the whole.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vivarium.errors import ConfigError
from vivarium.experiment.config import MAX_SEED, ExperimentConfig, make_config
from vivarium.experiment.overrides import merge_overrides
from vivarium.sweep.backends import BACKENDS, Backend
from vivarium.sweep.results import Sweep
from vivarium.sweep.run import run_sweep
from vivarium.sweep.worker import error_line

__all__ = ["SWEEP_SETTINGS", "main_sweep", "parse_grid_items", "split_sweep_section"]

# The keys of a config file's ``sweep:`` section, with what each must be.
SWEEP_SETTINGS = {
    "grid": "a mapping of field -> list of values",
    "configs": "a list of dicts of overrides",
    "replications": "a whole number >= 1",
    "paired": "true or false",
    "backend": "local, ray or inline",
    "max_workers": "a whole number >= 1",
    "seed": "an integer in [0, 2**63)",
    "folder": "a folder path",
    "ray_address": "a Ray cluster address",
    "plugins": "a list of module names",
}


def split_sweep_section(
    data: Mapping[str, Any], where: str = "config"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a config mapping into (experiment fields, sweep settings), checking the latter.

    ``sweep: {grid: {seed: [1, 2, 3], agents: [5, 50]}, replications: 2, backend: local,
    max_workers: 4}``. Settings come back as keyword arguments of ``run_sweep`` (plus ``grid``
    and ``configs``); a wrong key or value raises a one-line ``ConfigError``.

    Args:
        data: A config file's mapping.
        where: The file's name, for errors.

    Returns:
        The experiment's fields (everything but ``sweep``) and the checked sweep settings.

    Raises:
        ConfigError: An unknown key or a wrong value in the section, every one named.
    """
    experiment = {k: v for k, v in data.items() if k != "sweep"}
    section = data.get("sweep")
    if section is None:
        return experiment, {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where}: sweep: expected a mapping, got {type(section).__name__}")
    problems = []
    settings: dict[str, Any] = {}
    for key, value in section.items():
        if key not in SWEEP_SETTINGS:
            problems.append(f"sweep.{key}: unknown field (known: {', '.join(SWEEP_SETTINGS)})")
            continue
        ok = True
        if key == "grid":
            ok = isinstance(value, Mapping) and all(
                isinstance(v, list) and v for v in value.values()
            )
        elif key == "configs":
            ok = isinstance(value, list) and all(isinstance(v, Mapping) for v in value) and value
        elif key in {"replications", "max_workers"}:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        elif key == "seed":
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEED
        elif key == "paired":
            ok = isinstance(value, bool)
        elif key == "backend":
            ok = value in BACKENDS
        elif key in {"folder", "ray_address"}:
            ok = isinstance(value, str) and bool(value)
        elif key == "plugins":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if not ok:
            problems.append(f"sweep.{key}: expected {SWEEP_SETTINGS[key]}, got {value!r}")
        else:
            settings[key] = dict(value) if isinstance(value, Mapping) else value
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
    return experiment, settings


def parse_grid_items(items: Iterable[str]) -> dict[str, list[Any]]:
    """``["agents=5,50", "llm.temperature=0,0.7"]`` -> a grid (values parsed as YAML scalars).

    For ``vvm sweep --grid agents=5,50``; a value that is a YAML list (``agents=[5, 50]``) is
    taken as it is.

    Args:
        items: ``FIELD=VALUE,VALUE,...`` items; a field given twice gets both values.

    Returns:
        The grid.

    Raises:
        ConfigError: An item is not ``FIELD=VALUES``.
    """
    import yaml

    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ConfigError(f"--grid {item!r}: expected FIELD=VALUE,VALUE,...")
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            parsed = None
        if isinstance(parsed, list):
            values = parsed
        else:
            values = [yaml.safe_load(part) if part.strip() else "" for part in text.split(",")]
        grid.setdefault(key, []).extend(values)
    return grid


def _set_base_dir(data: dict[str, Any], config_path: Path) -> None:
    """Resolve relative agent folders from the config's folder, as ``Experiment.from_file`` does.

    The base is the config's folder, or the nearest parent where every agent folder exists.
    """
    if "base_dir" not in ExperimentConfig.model_fields or "base_dir" in data:
        return
    groups = data.get("agents")
    if not isinstance(groups, list):
        return
    folders = [g["agent"] for g in groups if isinstance(g, Mapping) and g.get("agent")]
    if not folders:
        return
    here = config_path.resolve().parent
    for base in (here, *here.parents):
        if all((base / f).exists() for f in folders):
            data["base_dir"] = str(base)
            return


def main_sweep(
    config_path: str | os.PathLike[str],
    grid: Mapping[str, Sequence[Any]] | None = None,
    folder: str | os.PathLike[str] | None = None,
    backend: Backend | None = None,
    max_workers: int | None = None,
    *,
    replications: int | None = None,
    seed: int | None = None,
    ray_address: str | None = None,
    progress: bool | None = None,
    overrides: Mapping[str, Any] | None = None,
    plugins: Sequence[str] | None = None,
    paired: bool | None = None,
) -> Sweep:
    """``vvm sweep CONFIG``: run the sweep a config file describes; arguments given win.

    The file holds an experiment config and an optional ``sweep:`` section (see
    ``split_sweep_section``). ``grid`` entries replace the file's entries of the same field;
    ``overrides`` are experiment fields (the shared flags: steps, agents, ...). Plugin modules
    are imported before the config is checked, so it may name the worlds they register.

    Args:
        config_path: The config file (YAML or JSON).
        grid: Grid entries that replace the file's entries of the same field.
        folder: The sweep folder (default: the file's, else ``runs/<name>-sweep/``).
        backend: The backend (default: the file's, else ``local``).
        max_workers: Runs at once (default: the file's, else the CPUs).
        replications: Runs of each point (default: the file's, else 1).
        seed: The sweep's seed (default: the file's, else the config's).
        ray_address: The Ray cluster to join (default: the file's).
        progress: Show a progress bar.
        overrides: Experiment fields that replace the file's.
        plugins: Modules to import, after the file's ``sweep.plugins``.
        paired: Give every point of a replication the same seed (default: the file's
            ``sweep.paired``, else false).

    Returns:
        The sweep (see ``run_sweep``).

    Raises:
        ConfigError: The file, its ``sweep:`` section or an argument is invalid, or a plugin
            cannot be imported.
    """
    from vivarium.experiment.config import load_config_data

    data = load_config_data(config_path)
    experiment, settings = split_sweep_section(data, where=str(config_path))
    modules = [*settings.get("plugins", []), *(plugins or [])]
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise ConfigError(
                f"{config_path}: sweep.plugins: cannot import {module}: {error_line(exc)}"
            ) from None
    experiment = merge_overrides(experiment, overrides or {})
    _set_base_dir(experiment, Path(config_path))
    base = make_config(ExperimentConfig, experiment, where=str(config_path))
    merged_grid = {**settings.get("grid", {}), **(dict(grid) if grid else {})}
    return run_sweep(
        base,
        merged_grid or None,
        settings.get("configs"),
        folder=folder if folder is not None else settings.get("folder"),
        backend=backend or settings.get("backend", "local"),
        max_workers=max_workers if max_workers is not None else settings.get("max_workers"),
        ray_address=ray_address or settings.get("ray_address"),
        seed=seed if seed is not None else settings.get("seed"),
        progress=progress,
        replications=replications if replications is not None else settings.get("replications"),
        plugins=modules or None,
        paired=paired if paired is not None else settings.get("paired", False),
    )
