"""Your own world and policy as Python objects: no registration, no names to invent.

``Experiment(world=MyWorld, policy=MyPolicy)`` takes a class, a factory or an instance where a
config takes a name. Configs stay plain data (YAML, the recorded config, a sweep's index): each
object is named by a reference, ``"<module>.<qualname>@<digest>"``, and kept in this process's
table ``OBJECTS`` under it. The digest is of the code that defines the object: its module's
source file when it has one (so an edit to a helper the class calls counts too), else its own
source (``inspect.getsource``), else its cloudpickle bytes (code run by ``exec``); for an
instance also its pickled state. So a run id still derives from the config alone, is the same
in every process for the same code, and changes when the code is edited. A run that uses an object
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
import dataclasses
import difflib
import functools
import hashlib
import inspect
import linecache
import os
import pickle
import random
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from vivarium.errors import ConfigError

if TYPE_CHECKING:
    from vivarium.config import ExperimentConfig
    from vivarium.plan import PlannedAgent

__all__ = [
    "OBJECTS",
    "UserObject",
    "display_name",
    "dumps_by_value",
    "is_reference",
    "name_object",
    "name_objects",
    "pack_objects",
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
    """

    kind: Kind
    form: Form
    obj: Any
    pristine: Any = None
    used: bool = field(default=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        """What a sweep sends: the object as it was named, never a run's mutated one."""
        obj = self.pristine if self.form == "instance" and self.pristine is not None else self.obj
        return {"kind": self.kind, "form": self.form, "obj": obj}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A received object: every run on this side starts from a copy of it."""
        self.kind, self.form, self.obj = state["kind"], state["form"], state["obj"]
        self.pristine = state["obj"] if self.form == "instance" else None
        self.used = True

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
    """Whether ``obj`` is a world (``observe`` and ``apply``) or a policy (``decide``)."""
    if kind == "world":
        return callable(getattr(obj, "observe", None)) and callable(getattr(obj, "apply", None))
    return callable(getattr(obj, "decide", None)) or callable(getattr(obj, "adecide", None))


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


def _by_value(obj: Any) -> bytes:
    """``obj``'s cloudpickle bytes, its module's code included when workers cannot import it."""
    import cloudpickle

    modules = _unimportable_modules([obj])
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(obj, protocol=pickle.DEFAULT_PROTOCOL)
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)


def _module_text(target: Any) -> bytes | None:
    """The whole source file of ``target``'s module, when it has one on disk.

    Reading the file is cheap where ``inspect.getsource`` of a class parses the whole module
    (~80 ms for a long one, at every ``Experiment``), and it sees the helper functions and
    constants a class uses too: editing any of them names a new run.
    """
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return None
    lines = linecache.getlines(str(path), getattr(module, "__dict__", None))
    return "".join(lines).encode() if lines else None


_PRIMITIVES = (type(None), bool, int, float, complex, str, bytes)


def fingerprint(value: Any, depth: int = 0, *, opaque: bool = False) -> str:
    """A text that names ``value``'s code and data, the same in every process.

    Code objects by their bytecode, constants and names (recursively), functions with their
    closures and defaults, classes by their attributes, containers by their items (sets and
    dicts sorted), plain values by ``repr``; anything else by its type's name. Unlike
    cloudpickle bytes (which carry a per-process id for a class without a module), this does
    not change from one kernel to the next, and it sets apart two classes of one name whose
    code or closures differ.

    With ``opaque``, an instance of a library class (Python's, an installed package's,
    Vivarium's) is named by its type, not its state: a gateway stack or a client a factory
    closes over holds what differs per process (a connection, the process id) without being
    other code. Its declared values (a dataclass's or pydantic model's fields) still count.
    """
    if depth > 8:
        return "…"
    nxt = depth + 1
    if isinstance(value, _PRIMITIVES):
        return repr(value)
    if isinstance(value, types.CodeType):
        consts = ",".join(fingerprint(c, nxt, opaque=opaque) for c in value.co_consts)
        return f"code({value.co_code.hex()};{consts};{value.co_names})"
    if isinstance(value, functools.partial):
        return f"partial({fingerprint(value.func, nxt, opaque=opaque)};{fingerprint((value.args, value.keywords), nxt, opaque=opaque)})"
    if inspect.isfunction(value) or inspect.ismethod(value):
        func = getattr(value, "__func__", value)
        cells = [c.cell_contents for c in func.__closure__ or () if _filled(c)]
        extra = fingerprint((cells, func.__defaults__, func.__kwdefaults__), nxt, opaque=opaque)
        return f"fn({func.__qualname__};{fingerprint(func.__code__, nxt, opaque=opaque)};{extra})"
    if isinstance(value, staticmethod | classmethod | property):
        inner = value.fget if isinstance(value, property) else value.__func__
        return f"{type(value).__name__}({fingerprint(inner, nxt, opaque=opaque)})"
    if isinstance(value, type):
        if _from_a_library(value):  # its name says which it is; its body is not the user's
            return f"{value.__module__}.{value.__qualname__}"
        own = sorted((k, v) for k, v in vars(value).items() if k not in _CLASS_NOISE)
        body = ",".join(f"{k}={fingerprint(v, nxt, opaque=opaque)}" for k, v in own)
        bases = ",".join(
            fingerprint(b, nxt, opaque=opaque) for b in value.__bases__ if b is not object
        )
        return f"class({value.__module__}.{value.__qualname__};{bases};{body})"
    if isinstance(value, list | tuple):
        return "[" + ",".join(fingerprint(v, nxt, opaque=opaque) for v in value) + "]"
    if isinstance(value, set | frozenset):
        return "{" + ",".join(sorted(fingerprint(v, nxt, opaque=opaque) for v in value)) + "}"
    if isinstance(value, Mapping):
        try:
            items = sorted(
                (fingerprint(k, nxt, opaque=opaque), fingerprint(v, nxt, opaque=opaque))
                for k, v in value.items()
            )
        except Exception:  # a mapping that cannot be read (a lazy schema): its type names it
            return f"<{type(value).__module__}.{type(value).__qualname__}>"
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if hasattr(value, "tobytes") and hasattr(value, "dtype"):  # a numpy array: its contents
        data = hashlib.sha256(value.tobytes()).hexdigest()
        return f"array({value.dtype};{getattr(value, 'shape', '')};{data})"
    if isinstance(value, random.Random):
        return f"random({fingerprint(value.getstate(), nxt, opaque=opaque)})"
    if opaque and type(value).__module__ != "__main__" and _from_a_library(type(value)):
        return _library_instance(value, kind, nxt)
    if hasattr(value, "__dict__"):  # any other object: its type and its attributes
        return f"<{kind}:{fingerprint(vars(value), nxt, opaque=opaque)}>"
    return f"<{kind}>"


def _library_instance(value: Any, kind: str, depth: int) -> str:
    """``fingerprint(value, opaque=True)`` of a library class's instance.

    A value object (a dataclass, a pydantic model: a config such as ``GatewaySettings``) by
    its fields, each fingerprinted the same way; anything else (a gateway, a connection, a
    cassette) by its type alone.
    """
    if dataclasses.is_dataclass(value):
        names = [f.name for f in dataclasses.fields(value)]
    elif isinstance(getattr(type(value), "model_fields", None), dict):  # pydantic
        names = list(type(value).model_fields)
    else:
        return f"<{kind}>"
    try:
        fields = {name: getattr(value, name) for name in names}
    except AttributeError:  # a field not set: the type names it
        return f"<{kind}>"
    return f"<{kind}:{fingerprint(fields, depth, opaque=True)}>"


def _library_roots() -> tuple[str, ...]:
    """Where the standard library, installed packages and Vivarium itself live."""
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.add(os.path.dirname(os.path.abspath(__file__)))  # the vivarium package
    return tuple(sorted(os.path.join(r, "") for r in roots))


_LIBRARY_ROOTS = _library_roots()


def _from_a_library(cls: type) -> bool:
    """Whether ``cls`` comes from Python, an installed package or Vivarium (not user code)."""
    module = sys.modules.get(cls.__module__)
    if cls.__module__ == "builtins" or module is None:
        return cls.__module__ == "builtins"
    path = getattr(module, "__file__", None)
    return bool(path) and os.path.abspath(str(path)).startswith(_LIBRARY_ROOTS)


_CLASS_NOISE = frozenset({"__dict__", "__weakref__", "__module__", "__doc__", "__qualname__"})


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _code(target: Any) -> bytes:
    """The code that defines a class or function.

    Its ``fingerprint`` (bytecode, closures, attributes), with its module's whole source file
    when there is one (see ``_module_text``: helpers and constants it uses count too).
    """
    whole = _module_text(target) or b""
    return whole + fingerprint(target).encode()


def _digest(obj: Any, form: Form) -> str:
    """The hex digest that names ``obj``'s code (and an instance's or closure's data)."""
    h = hashlib.sha256()
    target = obj.func if isinstance(obj, functools.partial) else obj
    h.update(_code(type(obj) if form == "instance" else target))
    data: Any = None
    if form == "instance":
        data = obj.__getstate__() if hasattr(obj, "__getstate__") else vars(obj)
    elif isinstance(obj, functools.partial):
        data = (obj.args, obj.keywords)
    elif inspect.isfunction(obj) and (obj.__closure__ or obj.__defaults__ or obj.__kwdefaults__):
        cells = [c.cell_contents for c in obj.__closure__ or ()]
        data = (cells, obj.__defaults__, obj.__kwdefaults__)
    if data is not None:
        h.update(fingerprint(data).encode())  # sets sorted: the same for every hash seed
    return h.hexdigest()[:_DIGEST_CHARS]


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
    ref = f"{_label(obj, form)}@{_digest(obj, form)}"
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
