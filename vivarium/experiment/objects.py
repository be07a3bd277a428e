"""Your own world and policy as Python objects: no registration, no names to invent.

``Experiment(world=MyWorld, policy=MyPolicy)`` takes a class, a factory or an instance where a
config takes a name. Configs stay plain data (YAML, the recorded config, a sweep's index): each
object is named by a reference, ``"<module>.<qualname>@<digest>"``, and kept in this process's
table ``OBJECTS`` under it. The digest is ``vivarium.experiment.digest``'s: of the code that defines
the object and of every value that code reads (module globals, closures, defaults, an
instance's state), by value. A run's identity takes the reference as it is when the run starts
(``current_reference``): a notebook global changed after the object was named names a new
run. So a run id still derives from the config alone, is the same in every process for the
same code and values, and changes when either changes. A run that uses an object
needs it in the process that builds the run: a sweep sends the ones its runs use to its workers
by value (``pack_objects``), so objects defined in a notebook cell or a script without a main
guard work on local workers and on Ray; resuming needs the object given again.

How an object is built (see ``UserObject.build_world`` / ``build_policy``): a class or a
factory is called with the keywords its signature names among ``agent_ids``, ``seed`` and
``steps`` for a world (plus every ``world_options``), or ``agent_id``, ``seed`` (the agent's
own seed from the plan) and ``rng`` (``random.Random(seed)``) for a policy (plus every
``policy_options``). A world instance is used as is by the first run built from it in this
process and copied from its state at naming time for every later one (each run starts from
the same world); a policy instance is copied for each agent.
"""

from __future__ import annotations

import copy
import difflib
import functools
import inspect
import random
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from vivarium.errors import ConfigError
from vivarium.experiment.digest import CodeDigest, digest_code, say_opaque

if TYPE_CHECKING:
    from vivarium.experiment.config import ExperimentConfig
    from vivarium.experiment.plan import PlannedAgent

__all__ = [
    "OBJECTS",
    "UserObject",
    "current_reference",
    "digest_object",
    "display_name",
    "dumps_by_value",
    "is_reference",
    "name_object",
    "name_objects",
    "opaque_inputs",
    "pack_objects",
    "resolve_references",
    "suggest",
    "unpack_objects",
]

Kind = Literal["world", "policy"]
Form = Literal["class", "factory", "instance"]

_DIGEST_CHARS = 16
_WORLD_KEYWORDS = ("agent_ids", "seed", "steps")
_POLICY_KEYWORDS = ("agent_id", "seed", "rng")


def _accepted(target: Callable[..., Any], offered: Iterable[str]) -> list[str]:
    """The offered keywords ``target``'s signature names (a ``**kwargs`` takes none of them)."""
    try:
        names = _cached_keyword_names(target)
    except TypeError:  # an unhashable callable: read its signature each time
        names = _keyword_names(target)
    return [name for name in offered if name in names]


def _keyword_names(target: Callable[..., Any]) -> frozenset[str]:
    """The keywords ``target`` takes by name, read once per class or factory (not per agent)."""
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # no signature to read: offer nothing
        return frozenset()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(name for name, p in params.items() if p.kind in kinds)


_cached_keyword_names = functools.lru_cache(maxsize=256)(_keyword_names)


@dataclass(slots=True)
class UserObject:
    """A world or policy given as a Python object, and how runs are built from it.

    Attributes:
        kind: ``"world"`` or ``"policy"``.
        form: ``"class"``, ``"factory"`` or ``"instance"``.
        obj: The object as given.
        pristine: For an instance, a copy of it as it was named (None: it cannot be copied,
            and every run uses it as is).
        used: Whether a run has used a world instance as is already.
        received: Whether a sweep process sent it (its reference is the one it was sent
            under: its code is not in this process's files to digest again).
    """

    kind: Kind
    form: Form
    obj: Any
    pristine: Any = None
    used: bool = field(default=False, compare=False)
    received: bool = field(default=False, compare=False)

    @property
    def identity_target(self) -> Any:
        """What the next run built from it uses, which its identity digests.

        A world instance not used yet is used as it is now (changed since it was named, it is
        that state that runs); after that every run starts from its copy at naming time.
        """
        if self.form == "instance" and self.pristine is not None:
            if self.kind == "world" and not self.used:
                return self.obj
            return self.pristine
        return self.obj

    def __getstate__(self) -> dict[str, Any]:
        """What a sweep sends: the object as it was named, never a run's mutated one."""
        obj = self.pristine if self.form == "instance" and self.pristine is not None else self.obj
        return {"kind": self.kind, "form": self.form, "obj": obj}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A received object: every run on this side starts from a copy of it."""
        self.kind, self.form, self.obj = state["kind"], state["form"], state["obj"]
        self.pristine = state["obj"] if self.form == "instance" else None
        self.used = True
        self.received = True

    def build_world(self, config: ExperimentConfig, plan: list[PlannedAgent]) -> Any:
        """The run's world: the instance, or the class or factory called for the run.

        Args:
            config: The run's config (its seed, steps and ``world_options``).
            plan: The planned agents (their ids, in plan order).

        Returns:
            The world.
        """
        if self.form == "instance":
            if not self.used or self.pristine is None:
                self.used = True
                return self.obj
            return copy.deepcopy(self.pristine)
        offered = {
            "agent_ids": [p.agent_id for p in plan],
            "seed": config.seed,
            "steps": config.steps,
        }
        keywords = {k: offered[k] for k in _accepted(self.obj, _WORLD_KEYWORDS)}
        given = {**keywords, **dict(config.world_options)}
        _check_call(self.obj, given, "world", "world_options")
        return self.obj(**given)

    def build_policy(self, agent: PlannedAgent) -> Any:
        """One agent's policy: a copy of the instance, or the class or factory called for it.

        Args:
            agent: The planned agent (its id, seeds and group's ``policy_options``).

        Returns:
            The policy.
        """
        if self.form == "instance":
            return copy.deepcopy(self.pristine if self.pristine is not None else self.obj)
        seed = agent.seeds.agent
        offered: dict[str, Callable[[], Any]] = {
            "agent_id": lambda: agent.agent_id,
            "seed": lambda: seed,
            "rng": lambda: random.Random(seed),
        }
        keywords = {k: offered[k]() for k in _accepted(self.obj, _POLICY_KEYWORDS)}
        given = {**keywords, **dict(agent.group.policy_options)}
        _check_call(self.obj, given, "policy", "policy_options")
        return self.obj(**given)


def _check_call(
    target: Callable[..., Any], given: Mapping[str, Any], kind: str, options: str
) -> None:
    """Refuse, in one line, a call ``target(**given)`` its signature cannot take.

    A missing argument nobody supplies, or an option it does not accept, is the user's to fix;
    an error raised inside the call is the object's own and goes up as it is. Only the names
    matter, so each set of names is checked once per class or factory (not once per agent:
    reading a signature costs more than building a small policy).
    """
    names = tuple(given)
    try:
        _cached_check_names(target, names, kind, options)
    except TypeError as exc:
        if not str(exc).startswith("unhashable"):
            raise
        _check_names(target, names, kind, options)  # an unhashable callable: each time


def _check_names(
    target: Callable[..., Any], names: tuple[str, ...], kind: str, options: str
) -> None:
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # no signature to read: let the call decide
        return
    try:
        signature.bind(**dict.fromkeys(names))
    except TypeError as exc:
        name = getattr(target, "__qualname__", type(target).__qualname__)
        offered = ", ".join(_WORLD_KEYWORDS if kind == "world" else _POLICY_KEYWORDS)
        raise ConfigError(
            f"{kind} {name}: {exc} (it is called with the keywords it names among {offered}, "
            f"and {options})"
        ) from None


_cached_check_names = functools.lru_cache(maxsize=256)(_check_names)


OBJECTS: dict[str, UserObject] = {}
"""The worlds and policies given as objects in this process, by reference."""


def _looks_like(kind: Kind, obj: Any) -> bool:
    """Whether ``obj`` is a world instance or a policy instance (not a factory to call).

    A world has ``observe`` and ``apply`` (``World``: one without ``state_digest`` is taken as
    an instance, and the engine names what it lacks); a policy ``decide`` or ``adecide``.
    """
    from vivarium.policies.base import AgentPolicy, AsyncAgentPolicy
    from vivarium.protocols import implements, lacking
    from vivarium.worlds.base import World

    if kind == "world":
        return not {"observe", "apply"} & set(lacking(obj, World))
    return implements(obj, AgentPolicy) or implements(obj, AsyncAgentPolicy)


def _form(kind: Kind, obj: Any, where: str) -> Form:
    if isinstance(obj, type):
        return "class"
    if _looks_like(kind, obj):
        return "instance"
    if callable(obj):
        return "factory"
    raise ConfigError(
        f"{where}: a {kind} is a name, a class, a factory or an instance, not {type(obj).__name__}"
    )


def _label(obj: Any, form: Form) -> str:
    """``module.qualname`` of the object (of its class, for an instance)."""
    target = obj.func if isinstance(obj, functools.partial) else obj
    if form == "instance":
        target = type(obj)
    module = getattr(target, "__module__", None) or "__main__"
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}.{qualname}"


def digest_object(obj: Any, form: Form) -> CodeDigest:
    """The digest of ``obj``'s code and of what it reads (see ``vivarium.experiment.digest``).

    An instance is digested as its class's code with its own state; a class, factory or
    partial as code (its closures, defaults, bound arguments and the globals it reads).
    """
    return digest_code(obj, instance=form == "instance")


def current_reference(name: str) -> str:
    """``name``, or the reference its object has now, when the values it reads have changed.

    An object is named when it is given (``Experiment(world=Pot)``), but what its code reads
    (a notebook's ``R``) may change before the run starts: a run's identity takes the
    reference as it is then. The new reference is known in this process too (a resume by it
    finds the object). An object a sweep process sent keeps the reference it was sent under:
    its code is not in this process's files.

    Args:
        name: A world or policy name from a config.

    Returns:
        The name as is (a built-in or registered name, an unknown or received reference), or
        ``"<module>.<qualname>@<digest now>"``.
    """
    entry = OBJECTS.get(name)
    if entry is None or entry.received or not is_reference(name):
        return name
    found = digest_object(entry.identity_target, entry.form)
    say_opaque(f"{entry.kind} {display_name(name)}", found, stacklevel=4)
    head = name.rpartition("@")[0]
    now = f"{head}@{found.digest}"
    if now != name:
        OBJECTS.setdefault(now, entry)
    return now


def resolve_references(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` with each object it names referred to as it is now (``current_reference``).

    A run or a sweep starts from this, so every process that builds its runs (a sweep's
    workers receive the objects under these references) names them as the run's identity
    does.

    Args:
        config: The experiment config.

    Returns:
        ``config`` itself when nothing changed, else a copy with the current references.
    """
    update: dict[str, Any] = {}
    for key in ("world", "policy"):
        now = current_reference(getattr(config, key))
        if now != getattr(config, key):
            update[key] = now
    if isinstance(config.agents, list):
        groups = [
            g.model_copy(update={"policy": current_reference(g.policy)}) for g in config.agents
        ]
        if any(g.policy != old.policy for g, old in zip(groups, config.agents, strict=True)):
            update["agents"] = groups
    return config.model_copy(update=update) if update else config


def opaque_inputs(name: str) -> tuple[str, ...]:
    """What the object named ``name`` reads that cannot be digested (empty for any other name)."""
    entry = OBJECTS.get(name)
    if entry is None or entry.received or not is_reference(name):
        return ()
    return digest_object(entry.identity_target, entry.form).opaque


def name_object(kind: Kind, obj: Any, where: str | None = None) -> str:
    """The config's name for ``obj``, which this process can then build runs from.

    Args:
        kind: ``"world"`` or ``"policy"``.
        obj: A name (returned as is), a class, a factory or an instance.
        where: What an error message starts with (default: the kind).

    Returns:
        The name: ``obj`` itself for a name, else its reference ``"<module>.<qualname>@<digest>"``.

    Raises:
        ConfigError: ``obj`` is none of those (one line).
    """
    if isinstance(obj, str):
        return obj
    form = _form(kind, obj, where or kind)
    if form == "instance":
        first = _INSTANCES.get(id(obj))
        if first is not None and first[0] is obj:
            # Named again after a run changed it: every run starts from the state it had when
            # it was first named, under the name it had then.
            return first[1]
    found = digest_object(obj, form)
    say_opaque(f"{kind} {_label(obj, form).rsplit('.', 1)[-1]}", found, stacklevel=3)
    ref = f"{_label(obj, form)}@{found.digest}"
    known = OBJECTS.get(ref)
    # The latest object named wins (a notebook cell run again, an equal instance): same code.
    if known is None or known.obj is not obj:
        pristine = None
        if form == "instance":
            try:
                pristine = copy.deepcopy(obj)
            except Exception:  # not copyable: every run uses it as is
                pristine = None
            _INSTANCES[id(obj)] = (obj, ref)
        OBJECTS[ref] = UserObject(kind, form, obj, pristine)
    return ref


_INSTANCES: dict[int, tuple[Any, str]] = {}
"""Instances named in this process, by ``id``: the instance and the name it was first given."""


def name_objects(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Config fields with every world or policy object replaced by its name.

    Args:
        fields: ``Experiment`` keywords: ``world``, ``policy``, ``agents`` (groups as dicts
            whose ``policy`` may be an object), and any others (left as they are).

    Returns:
        The fields as plain config data.
    """
    out = dict(fields)
    if "world" in out:
        out["world"] = name_object("world", out["world"], "world")
    if "policy" in out:
        out["policy"] = name_object("policy", out["policy"], "policy")
    groups = out.get("agents")
    if isinstance(groups, list):
        named = []
        for i, group in enumerate(groups):
            if isinstance(group, Mapping) and "policy" in group:
                policy = name_object("policy", group["policy"], f"agents.{i}.policy")
                group = {**group, "policy": policy}
            named.append(group)
        out["agents"] = named
    return out


def is_reference(name: str) -> bool:
    """Whether ``name`` is an object's reference (``module.qualname@digest``), not a name."""
    head, sep, tail = name.rpartition("@")
    return bool(sep and head and len(tail) == _DIGEST_CHARS)


def display_name(name: str) -> str:
    """What to show for a world or policy: a name as is, an object as its ``qualname``."""
    if not is_reference(name):
        return name
    return name.rpartition("@")[0].rsplit(".", 1)[-1] or name


def suggest(kind: Kind, name: str, known: list[str]) -> str:
    """The unknown-name message's text after the name: what to do, or which names are known.

    Args:
        kind: ``"world"`` or ``"policy"``.
        name: The unknown name.
        known: The names known here.

    Returns:
        ``(known: a, b; did you mean 'a'?)``, or, for an object's reference, how to give the
        object again.
    """
    if is_reference(name):
        obj = display_name(name)
        return (
            f"(given as a Python object, unknown in this process: pass it again, "
            f"Experiment({kind}={obj}) or Run.resume({kind}={obj}))"
        )
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"(known: {', '.join(known)}{hint})"


def _unimportable_modules(objects: Iterable[Any]) -> list[Any]:
    """The loaded modules of ``objects`` that a worker could not import by name.

    ``__main__`` is always sent by value by cloudpickle; a module made at run time (a
    notebook's, ``types.ModuleType`` filled by ``exec``) has no file to import from.
    """
    modules = []
    for obj in objects:
        target = type(obj) if not (isinstance(obj, type) or callable(obj)) else obj
        target = target.func if isinstance(target, functools.partial) else target
        name = getattr(target, "__module__", None)
        module = sys.modules.get(name) if name else None
        if (
            module is not None
            and name != "__main__"
            and getattr(module, "__file__", None) is None
            and getattr(module, "__spec__", None) is None
            and module not in modules
        ):
            modules.append(module)
    return modules


def pack_objects(names: Iterable[str]) -> dict[str, UserObject]:
    """The objects of this process that ``names`` refer to, for a sweep's workers.

    Args:
        names: The world and policy names a sweep's runs use.

    Returns:
        Reference -> object, for those that are objects of this process.
    """
    return {n: OBJECTS[n] for n in sorted(set(names)) if n in OBJECTS}


def dumps_by_value(value: Any) -> bytes:
    """The cloudpickle bytes of ``value``, with the code of modules workers cannot import.

    Args:
        value: What to send (a sweep's registrations).

    Returns:
        The bytes.
    """
    import cloudpickle

    entries = [u.obj for u in _walk_objects(value)]
    modules = _unimportable_modules(entries)
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(value)
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)


def _walk_objects(value: Any) -> list[UserObject]:
    if isinstance(value, UserObject):
        return [value]
    if isinstance(value, Mapping):
        return [u for v in value.values() for u in _walk_objects(v)]
    return []


def unpack_objects(objects: Mapping[str, UserObject]) -> None:
    """Make the objects a sweep process sent known here (the ones already known stay).

    Args:
        objects: Reference -> object.
    """
    for ref, entry in objects.items():
        OBJECTS.setdefault(ref, entry)
