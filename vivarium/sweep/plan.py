"""The plan of a sweep: every run, in run order, with its parameters, seed, config and run id.

Planning runs nothing and writes nothing: it crosses the explicit configs with the grid, gives
each point ``replications`` runs, derives each run's seed from its parameters (never its
position) and names each run by its config's run id, so that the same sweep always plans the
same runs and a grown grid leaves the runs it already had as they were.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from vivarium.errors import ConfigError
from vivarium.experiment.build import check_names
from vivarium.experiment.config import MAX_SEED, ExperimentConfig, make_config
from vivarium.experiment.overrides import merge_overrides
from vivarium.seeding import canonical_json, derive_seed

__all__ = [
    "NOT_PARAMS",
    "ConfigSource",
    "PlannedRun",
    "as_config",
    "describe_run",
    "plan_sweep",
    "paired_seed_of",
    "run_seed_of",
]

# Config fields that say where a run is written, never what it is: not parameters.
NOT_PARAMS = frozenset({"db", "run_id"})


class ConfigSource(Protocol):
    """Anything that carries an experiment config, such as an ``Experiment``.

    The sweep reads only the config, so it accepts any object with one and needs no import of
    the layer that defines experiments.
    """

    @property
    def config(self) -> ExperimentConfig:
        """The experiment's config."""
        ...


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its position, parameters, seed and the full config.

    Attributes:
        index: The run's position in run order (the index's ``idx``).
        params: The run's grid values and explicit overrides, by dotted field name.
        replication: Which replication of its point this run is (0 for the first).
        seed: The run's seed, as recorded in its config.
        config: The run's full config.
        run_id: The run's id (the config's, numbered when two runs share a config).
        file: The trace's file name in the sweep folder.
    """

    index: int
    params: dict[str, Any]
    replication: int
    seed: int
    config: ExperimentConfig
    run_id: str
    file: str


def as_config(base: ConfigSource | ExperimentConfig | Mapping[str, Any]) -> ExperimentConfig:
    """The experiment config a sweep starts from.

    Args:
        base: An ``ExperimentConfig``, anything carrying one (an ``Experiment``), or a dict of
            config fields.

    Returns:
        The config.

    Raises:
        ConfigError: ``base`` is none of these, or the dict is not a valid config.
    """
    if isinstance(base, ExperimentConfig):
        return base
    config = getattr(base, "config", None)  # a ConfigSource, such as an Experiment
    if isinstance(config, ExperimentConfig):
        return config
    if isinstance(base, Mapping):
        return make_config(ExperimentConfig, dict(base))
    raise ConfigError(
        "sweep: base must be an Experiment, an ExperimentConfig or a dict, "
        f"not {type(base).__name__}"
    )


def _config_data(config: ExperimentConfig) -> dict[str, Any]:
    """A config as plain data (the API key stays a SecretStr, never printed)."""
    return config.model_dump(exclude=set(NOT_PARAMS))


def _nested(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"llm.temperature": 0.5}`` -> ``{"llm": {"temperature": 0.5}}``, each field checked."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        if not all(parts):
            raise ConfigError(f"sweep: '{key}' is not a field name")
        if parts[0] not in ExperimentConfig.model_fields:
            raise ConfigError(f"sweep: {key}: unknown field")
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(
                    f"sweep: {key}: '{'.'.join(parts[: i + 1])}' is not a group of fields"
                )
            node = child
        node[parts[-1]] = copy.deepcopy(value)
    return out


def _apply(data: dict[str, Any], flat: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the dotted fields ``flat`` set, merged as every entry point merges.

    A sweep axis or an explicit config sets the fields it names and keeps the others of a
    section (``llm.temperature`` keeps the model): ``vivarium.experiment.overrides.merge_overrides``.
    """
    nested = _nested(flat)
    for key, value in nested.items():
        old = data.get(key)
        if isinstance(value, dict) and old is not None and not isinstance(old, dict):
            raise ConfigError(f"sweep: {key}: '{key}' is not a group of fields")
    return merge_overrides(data, nested)


def _check_field(key: str) -> None:
    if key in NOT_PARAMS:
        raise ConfigError(f"sweep: {key}: set by the sweep for each run; it cannot be swept")


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"llm": {"temperature": 0.5}}`` -> ``{"llm.temperature": 0.5}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _grid_points(grid: Mapping[str, Sequence[Any]] | None) -> list[dict[str, Any]]:
    if not grid:
        return [{}]
    if not isinstance(grid, Mapping):
        raise ConfigError(
            f"sweep: grid must be a mapping of field -> values, not {type(grid).__name__}"
        )
    keys, values = [], []
    for key, options in grid.items():
        if not isinstance(key, str):
            raise ConfigError(f"sweep: grid: field names must be text, not {key!r}")
        if isinstance(options, str | bytes) or not isinstance(options, Sequence | range):
            raise ConfigError(
                f"sweep: grid: {key}: expected a list of values, got {type(options).__name__}"
            )
        if len(options) == 0:
            raise ConfigError(f"sweep: grid: {key}: give at least one value")
        _check_field(key)
        keys.append(key)
        values.append(list(options))
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def _explicit_points(
    base: ExperimentConfig, configs: Sequence[Any] | None
) -> list[tuple[dict[str, Any], dict[str, Any], bool]]:
    """(config data, params, seed given) for each explicit config, or the base alone."""
    base_data = _config_data(base)
    if configs is None:
        return [(base_data, {}, False)]
    if isinstance(configs, Mapping | str | bytes) or not isinstance(configs, Sequence):
        raise ConfigError("sweep: configs must be a list of configs or dicts of overrides")
    if not configs:
        raise ConfigError("sweep: configs is empty; give at least one config")
    base_flat = _flatten(base_data)
    out = []
    for i, item in enumerate(configs):
        if isinstance(item, ExperimentConfig):
            data = _config_data(item)
            flat = _flatten(data)
            params = {k: v for k, v in flat.items() if k != "seed" and base_flat.get(k, None) != v}
            out.append((data, params, "seed" in item.model_fields_set))
        elif isinstance(item, Mapping):
            flat = _flatten(item)
            for key in flat:
                _check_field(key)
            data = _apply(copy.deepcopy(base_data), flat)
            out.append((data, flat, "seed" in flat))
        else:
            raise ConfigError(
                f"sweep: configs[{i}] must be an ExperimentConfig or a dict, "
                f"not {type(item).__name__}"
            )
    return out


def plan_sweep(
    base: ConfigSource | ExperimentConfig | Mapping[str, Any],
    grid: Mapping[str, Sequence[Any]] | None = None,
    configs: Sequence[ExperimentConfig | Mapping[str, Any]] | None = None,
    *,
    seed: int | None = None,
    replications: int | None = None,
    paired: bool = False,
) -> list[PlannedRun]:
    """Every run of a sweep, in run order, with its config and seed (nothing is run).

    Two runs with the same config get the same run id; the later one is recorded as
    ``<run_id>-<n>`` (numbered by how often the config came before) with a warning.

    Args:
        base: The experiment every run starts from (see ``as_config``).
        grid: Config fields (dotted for nested ones) mapped to lists of values; every
            combination is a point.
        configs: Explicit configs (dicts of overrides of ``base``, or whole configs), each
            crossed with the grid.
        seed: The sweep's seed (default: the base config's), from which runs whose config
            gives no seed get theirs (see ``run_seed_of``).
        replications: Runs of each point (default 1).
        paired: Give every point of one replication the same seed (``paired_seed_of``): the
            arms of a replication share every random stream their parameters do not change
            (common random numbers), so their difference is measured with less noise.

    Returns:
        The planned runs, in run order.

    Raises:
        ConfigError: A grid, config, seed or replication count is invalid, naming which.
    """
    base_config = as_config(base)
    reps = 1 if replications is None else replications
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
        raise ConfigError(f"sweep: replications must be a whole number >= 1, not {replications!r}")
    sweep_seed = base_config.seed if seed is None else seed
    if not isinstance(sweep_seed, int) or not 0 <= sweep_seed <= MAX_SEED:
        raise ConfigError(f"sweep: seed must be an integer in [0, 2**63), not {seed!r}")
    runs: list[PlannedRun] = []
    files: dict[str, int] = {}
    twins: dict[str, int] = {}
    for data, explicit, seed_given in _explicit_points(base_config, configs):
        for point in _grid_points(grid):
            params = {**explicit, **point}
            given = seed_given or "seed" in point
            if paired and given:
                raise ConfigError(
                    "sweep: paired runs share their replication's seed, but "
                    f"{', '.join(f'{k}={_short(v)}' for k, v in params.items()) or 'the config'} "
                    "gives its own: drop the seed (axis or field), or paired"
                )
            for rep in range(reps):
                i = len(runs)
                run_data = _apply(copy.deepcopy(data), point)
                if paired:
                    run_seed = paired_seed_of(sweep_seed, rep)
                elif not given:
                    run_seed = run_seed_of(sweep_seed, params, rep)
                elif rep == 0:
                    run_seed = run_data.get("seed", base_config.seed)
                else:
                    run_seed = derive_seed(run_data["seed"], "replication", rep) % (MAX_SEED + 1)
                run_data["seed"] = run_seed
                run_data.pop("run_id", None)
                run_data.pop("db", None)
                where = f"sweep run {i} ({describe_run(params, rep)})"
                config = make_config(ExperimentConfig, run_data, where=where)
                check_names(config, where=where)  # before any run starts, not in each worker
                run_id = config.resolved_run_id()
                if run_id in files:
                    # Numbered by how often this config came before, not by position, so that
                    # adding other values to the grid leaves the name alone.
                    twins[run_id] = twins.get(run_id, 0) + 1
                    twin = f"{run_id}-{twins[run_id]}"
                    warnings.warn(
                        f"sweep runs {files[run_id]} and {i} have the same config (run id "
                        f"{run_id}); run {i} is recorded as {twin}",
                        stacklevel=2,
                    )
                    run_id = twin
                    config = config.model_copy(update={"run_id": run_id})
                files[run_id] = i
                runs.append(
                    PlannedRun(i, params, rep, config.seed, config, run_id, f"{run_id}.sqlite")
                )
    return runs


def paired_seed_of(sweep_seed: int, replication: int) -> int:
    """The seed of every run of replication ``replication`` of a paired sweep.

    ``derive_seed(sweep_seed, "paired", replication)`` reduced below 2**63: the same for each
    point, so that the arms of a replication draw the same numbers wherever their parameters
    leave a random stream alone (an agent's seed derives from the run's and the agent's id, the
    world's from the run's), and differ only where the treatment acts.

    Args:
        sweep_seed: The sweep's seed.
        replication: The replication number.

    Returns:
        The seed, in [0, 2**63).
    """
    return derive_seed(sweep_seed, "paired", replication) % (MAX_SEED + 1)


def run_seed_of(sweep_seed: int, params: Mapping[str, Any], replication: int) -> int:
    """The seed of a run whose config gives none: from its parameters, never its position.

    ``derive_seed(sweep_seed, "sweep", canonical_json(params), replication)`` reduced below
    2**63, where ``params`` are the run's grid values and explicit overrides. A value added to
    a grid leaves the seeds (and run ids) of every other run as they were, so a re-run of the
    grown sweep in the same folder runs only the new runs.

    Args:
        sweep_seed: The sweep's seed.
        params: The run's parameters.
        replication: The run's replication number.

    Returns:
        The run's seed, in [0, 2**63).
    """
    return derive_seed(sweep_seed, "sweep", canonical_json(dict(params)), replication) % (
        MAX_SEED + 1
    )


def describe_run(params: Mapping[str, Any], replication: int) -> str:
    """A run's parameters in one line, for errors and reports.

    Args:
        params: The run's parameters.
        replication: The run's replication number.

    Returns:
        ``agents=5, llm.temperature=0.7, replication=1`` (long values cut to 40 characters).
    """
    parts = [f"{k}={_short(v)}" for k, v in params.items()]
    parts.append(f"replication={replication}")
    return ", ".join(parts)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    return text if len(text) <= 40 else text[:37] + "..."
