"""Mesa-style reporters: values a run records about its world at every step.

A world declares them as class or instance attributes (``ModelReportingWorld``,
``AgentReportingWorld`` of ``vivarium.worlds.base``, checked when the engine is built), and an
experiment may add its own (``Experiment(model_reporters=..., agent_reporters=...)``, which
override the world's of the same name)::

    class MyWorld:
        model_reporters = {"gini": lambda world: gini(world.wealth)}
        agent_reporters = {"wealth": lambda world: world.wealth}  # one value per agent

A model reporter returns one value (a number, bool, string, or anything JSON can hold); an
agent reporter returns one value per agent: a sequence or array in the world's agent order
(its ``agent_ids``, ``AgentListWorld``, else the run's sorted agent ids) or a mapping
agent_id -> value.

When: as Mesa's ``DataCollector`` does, once before step 0 (recorded as step -1, with step 0's
rows) and after every step, once the step's actions are applied. A reporter that raises stops
the run (status ``failed``, the step not committed) with one line naming the reporter: a null
recorded instead would pass a model bug off as a measurement.

The callables never enter the config: the trace records their names in its ``meta`` table
(``reporters``), and the run id their code's digests (``vivarium.experiment.digest``: a reporter changed,
or a value it reads, names another run).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from vivarium.errors import ConfigError
from vivarium.trace.records import encode_agent_values, encode_model_value
from vivarium.trace.values import UnrecordableValue
from vivarium.worlds.base import AgentListWorld, Reporter

REPORTERS_META_KEY = "reporters"
"""The trace ``meta`` key holding the reporters' names (``{"model": [...], "agent": [...]}``)."""

_EXPERIMENT: contextvars.ContextVar[tuple[dict[str, Reporter], dict[str, Reporter]] | None] = (
    contextvars.ContextVar("vivarium_experiment_reporters", default=None)
)


class ReporterError(ConfigError):
    """A reporter raised, or returned what cannot be recorded (the message names it)."""


RESERVED_NAMES: dict[str, tuple[str, ...]] = {
    "model_reporters": ("step", "run_id"),
    "agent_reporters": ("step", "agent_id", "run_id"),
}
"""Names a reporter cannot have: the columns its frame has already (``run_id`` when read with it).

A reporter named ``step`` would replace the frame's step column; one named ``run_id`` would
stand beside the run's. A sweep's merged frames also start with ``run``, ``replication`` and
``seed`` (``SWEEP_COLUMNS``): refused too, before step 0.
"""
SWEEP_COLUMNS = ("run", "replication", "seed")


def check_reporters(value: Any, what: str) -> dict[str, Reporter]:
    """A reporters mapping as given (None: none), checked: names to callables.

    Raises:
        ConfigError: not a mapping of non-empty names to callables (one line naming it).
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{what}: expected a dict of name -> callable, not {type(value).__name__}"
        )
    reserved = (*RESERVED_NAMES.get(what, ()), *SWEEP_COLUMNS)
    for name, reporter in value.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{what}: reporter names must be non-empty strings, not {name!r}")
        if name in reserved:
            frame = "model_vars" if what == "model_reporters" else "agent_vars"
            own = ", ".join(RESERVED_NAMES.get(what, ()))
            raise ConfigError(
                f"{what}: '{name}' is a column name the {frame} frame uses ({own}; a sweep's "
                f"also {', '.join(SWEEP_COLUMNS)}); give the reporter another name, "
                f"e.g. '{name}_value'"
            )
        if not callable(reporter):
            raise ConfigError(f"{what}['{name}']: not callable ({type(reporter).__name__})")
    return dict(value)


def active_reporters() -> tuple[dict[str, Reporter], dict[str, Reporter]] | None:
    """The experiment's (model, agent) reporters in force here, if any (a sweep sends them)."""
    return _EXPERIMENT.get()


_SENT_DIGESTS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "vivarium_sent_reporter_digests", default=None
)


def sent_reporter_digests() -> dict[str, str] | None:
    """The reporters' identity digests a sweep process sent with them (None: digest them here).

    A worker's copy of a reporter defined in a notebook or a script is not in the file it came
    from, so its run ids use the digests taken where it was defined (``vivarium.experiment.digest``).
    """
    return _SENT_DIGESTS.get()


@contextlib.contextmanager
def experiment_reporters(
    model: Mapping[str, Reporter] | None,
    agent: Mapping[str, Reporter] | None,
    digests: Mapping[str, str] | None = None,
) -> Iterator[None]:
    """Add these reporters to every engine built inside the block (``Experiment`` uses it).

    ``digests``: their identity digests as a sweep process sent them (a worker's).
    """
    if not model and not agent:
        yield
        return
    token = _EXPERIMENT.set((dict(model or {}), dict(agent or {})))
    sent = _SENT_DIGESTS.set(dict(digests) if digests is not None else None)
    try:
        yield
    finally:
        _SENT_DIGESTS.reset(sent)
        _EXPERIMENT.reset(token)


@dataclass(slots=True)
class Reporters:
    """The reporters of one run and how to collect them.

    Attributes:
        model: Model reporters by name, in recording order.
        agent: Agent reporters by name.
        agent_ids: The run's agents in agent_idx order (the order values are stored in).
        agent_list: The world keeps its own list of its agents (``AgentListWorld``): an agent
            reporter's sequence follows it.
    """

    model: dict[str, Reporter]
    agent: dict[str, Reporter]
    agent_ids: list[str]
    agent_list: bool = False
    _order: list[int] | None = field(default=None, init=False)
    _order_known: bool = field(default=False, init=False)
    _seen_ids: list[str] | None = field(default=None, init=False)

    @classmethod
    def of(
        cls,
        model: Mapping[str, Reporter],
        agent: Mapping[str, Reporter],
        agent_ids: list[str],
        agent_list: bool = False,
    ) -> Reporters | None:
        """The world's reporters with the experiment's in force on top; None when there are none.

        Args:
            model: The world's model reporters (checked: ``check_reporters``).
            agent: The world's agent reporters (checked).
            agent_ids: The run's agents in agent_idx order.
            agent_list: The world keeps its own list of its agents (``AgentListWorld``).
        """
        model, agent = dict(model), dict(agent)
        extra = _EXPERIMENT.get()
        if extra is not None:
            model.update(extra[0])
            agent.update(extra[1])
        if not model and not agent:
            return None
        return cls(model, agent, list(agent_ids), agent_list)

    def names(self) -> dict[str, list[str]]:
        """The names the trace records (``meta``: ``reporters``)."""
        return {"model": list(self.model), "agent": list(self.agent)}

    def _world_order(self, world: AgentListWorld) -> list[int] | None:
        """Where each value of an aligned sequence goes: None when the orders are the same.

        Read again whenever the world's ``agent_ids`` change (a world may shuffle its own list
        each step, as Mesa's models do), so values always land on their agents.
        """
        ids = world.agent_ids if self.agent_list else None
        current = list(ids) if ids is not None else None
        if not self._order_known or current != self._seen_ids:
            self._order_known, self._seen_ids = True, current
            self._order = None
            if current is not None and current != self.agent_ids:
                try:
                    position = {a: i for i, a in enumerate(current)}
                    self._order = [position[a] for a in self.agent_ids]
                except (KeyError, TypeError):
                    self._order = None  # not the run's agents: read in run order
        return self._order

    def collect(self, world: Any, step: int) -> tuple[list[Any], list[Any]]:
        """Every reporter's value after ``step`` (-1: before step 0), as stored rows.

        Raises:
            ReporterError: a reporter raised or returned a value that cannot be recorded.
        """
        model_rows = []
        for name, reporter in self.model.items():
            value = _call(reporter, world, name, "model", step)
            try:
                model_rows.append((step, name, *encode_model_value(value)))
            except UnrecordableValue as exc:
                raise ReporterError(str(exc.at(f"model reporter '{name}' {_when(step)}"))) from None
        agent_rows = []
        n = len(self.agent_ids)
        for name, reporter in self.agent.items():
            values = _call(reporter, world, name, "agent", step)
            if isinstance(values, Mapping):
                if values and not any(a in values for a in self.agent_ids):
                    raise ReporterError(
                        f"agent reporter '{name}' at step {step} returned a mapping whose keys "
                        f"are not agent ids (e.g. {next(iter(values))!r})"
                    )
                values = [values.get(a) for a in self.agent_ids]
            elif isinstance(values, str) or not hasattr(values, "__len__"):
                raise ReporterError(
                    f"agent reporter '{name}' at step {step} returned "
                    f"{type(values).__name__}: expected one value per agent "
                    "(a sequence, array or dict agent_id -> value)"
                )
            elif len(values) != n:
                raise ReporterError(
                    f"agent reporter '{name}' at step {step} returned {len(values)} values "
                    f"for {n} agents"
                )
            else:
                order = self._world_order(world)
                if order is not None:
                    values = [values[i] for i in order]
            try:
                agent_rows.append((step, name, *encode_agent_values(values)))
            except UnrecordableValue as exc:
                where = f"agent reporter '{name}' {_when(step)}"
                if exc.path:  # "[i]": the value of agent i (run order)
                    agent = self.agent_ids[int(exc.path[0][1:-1])]
                    exc = UnrecordableValue(
                        exc.reason, path=exc.path[1:], where=f"{where}, {agent}"
                    )
                raise ReporterError(str(exc.at(exc.where or where))) from None
        return model_rows, agent_rows


def check_resumed(trace: Any, reporters: Reporters | None) -> None:
    """Refuse to resume a run without the reporters it recorded (before anything is written).

    The experiment's reporters are not in the config: a resume must be given them again, or
    the steps it redoes would lack their columns.

    Raises:
        ReporterError: the trace recorded reporters this run does not have (names them).
    """
    if trace is None or not trace.resuming:
        return
    import json

    from vivarium.trace.db import read_meta

    text = read_meta(trace.path, REPORTERS_META_KEY)
    if text is None:
        return
    recorded = json.loads(text)
    have = reporters.names() if reporters is not None else {"model": [], "agent": []}
    missing = [
        f"{kind} reporter '{name}'"
        for kind in ("model", "agent")
        for name in recorded.get(kind, [])
        if name not in have[kind]
    ]
    if missing:
        raise ReporterError(
            f"this run recorded {', '.join(missing)}: resume it with them "
            "(Run.resume(model_reporters=..., agent_reporters=...))"
        )


def _when(step: int) -> str:
    return "before step 0" if step < 0 else f"at step {step}"


def _call(reporter: Reporter, world: Any, name: str, kind: str, step: int) -> Any:
    try:
        return reporter(world)
    except Exception as exc:
        at = "before step 0" if step < 0 else f"at step {step}"
        raise ReporterError(
            f"{kind} reporter '{name}' failed {at}: {type(exc).__name__}: {exc}"
        ) from exc
