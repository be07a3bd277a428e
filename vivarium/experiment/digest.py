"""What a run is: the digest of the user code a run uses and of every value that code reads.

A run id derives from its config (``ExperimentConfig.identity``). A config is plain data, so it
names the user's code by reference: a class, factory or instance given as an object is
``module.qualname@digest`` (``vivarium.experiment.objects``), a registered factory adds its digest to
``code_digests`` (``vivarium.experiment.build``), and so do an experiment's own reporters. This module
computes those digests, one way for all of them.

The property a digest keeps: **two pieces of user code get the same digest only if a run
cannot tell them apart**, as far as Python lets us see. It covers

- the code: the bytecode, constants and names of every function and method reached, a class's
  attributes and bases, and the source file of each user module passed through (so a helper
  it calls counts too);
- what the code reads: every module-level name a reached function reads (``co_names`` looked up
  in its globals), each default, closure cell and class attribute, followed recursively into
  user functions and classes, and an instance's own state; and what it reads as attributes of
  a module of the user's (``params.R``, a notebook having set ``params.R = 3.0``), imported at
  module level or inside the function;
- those values **by value**, as cloudpickle would carry them to a worker: numbers and texts,
  containers item by item (a set sorted, a dict in its order), numpy arrays by their bytes,
  dataclasses and pydantic models by their fields, user objects by their state, other
  objects of libraries by their pickle bytes.

Library code (Python's, an installed package's, Vivarium's) is named by its qualified name: its
version is the environment's. Objects whose class says ``__identity__ = "type"`` (a gateway
stack, a cassette, a trace: they hold a connection or the process id, never behaviour) are
named by their type, and so are locks and loggers.

What it cannot see: files and the network read at run time, and names looked up by a computed
string (``getattr(params, name)``, ``globals()[name]``). A value it cannot digest (an open socket, a generator, a client that will not
pickle) is listed in ``CodeDigest.opaque``: the run says so once (``IdentityWarning``) and a
stored result of it is never reused.

Digests are taken when a run or a sweep starts. Inside ``snapshot()`` each piece of code is
digested once (a sweep of a thousand runs walks a class once, not a thousand times).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import functools
import hashlib
import inspect
import io
import linecache
import logging
import os
import pickle
import random
import sys
import threading
import types
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vivarium.errors import ConfigError, IdentityWarning

__all__ = [
    "CodeDigest",
    "digest_code",
    "digest_files",
    "fingerprint",
    "from_a_library",
    "module_text",
    "say_opaque",
    "snapshot",
]

DIGEST_CHARS = 16
_MAX_DEPTH = 24  # how deep values and code are followed; deeper parts go by their pickle bytes
_BIG = 10_000  # containers larger than this are digested by their pickle bytes (C speed)


@dataclass(frozen=True, slots=True)
class CodeDigest:
    """The digest of a piece of user code and of what it reads.

    Attributes:
        digest: 16 hex digits; the same in every process for the same code and values.
        reads: ``"Class.method.NAME"`` -> 12 hex digits, for each module-level value the code
            reads (what a message or a diff can name when a digest changed).
        opaque: What could not be digested, one phrase each (``"Pot.apply reads client
            (socket.socket)"``): a run of it is never reused from a stored trace.
    """

    digest: str
    reads: Mapping[str, str]
    opaque: tuple[str, ...]


# -- where code comes from ----------------------------------------------------------------------
def _library_roots() -> tuple[str, ...]:
    """Where the standard library, installed packages and Vivarium itself live."""
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # vivarium
    return tuple(sorted(os.path.join(r, "") for r in roots))


_LIBRARY_ROOTS = _library_roots()


def _module_is_library(name: str | None) -> bool:
    """Whether the module called ``name`` is Python's, an installed package's or Vivarium's.

    ``__main__`` (a notebook, a script, even one run by an installed tool such as ``python -m
    pytest``) is always the user's.
    """
    if not name or name == "__main__":
        return False
    if name == "builtins":
        return True
    module = sys.modules.get(name)
    if module is None:
        return False
    path = getattr(module, "__file__", None)
    if not path:  # a built-in or frozen module is Python's; a module made by exec is the user's
        return name in sys.builtin_module_names or getattr(module, "__spec__", None) is not None
    return os.path.abspath(str(path)).startswith(_LIBRARY_ROOTS)


def from_a_library(obj: Any) -> bool:
    """Whether a class or function comes from Python, an installed package or Vivarium.

    Args:
        obj: A class, a function, or any object with ``__module__``.

    Returns:
        False for user code: ``__main__``, a notebook's cells, a module outside the library
        folders (a project's own package, a test file).
    """
    return _module_is_library(getattr(obj, "__module__", None))


def module_text(target: Any) -> bytes | None:
    """The whole source file of ``target``'s module, when it has one on disk.

    Reading the file is cheap (``linecache``) where ``inspect.getsource`` of a class parses the
    whole module, and it covers the helpers and constants the code uses.

    Args:
        target: A class or function.

    Returns:
        The file's bytes, or None (a notebook cell, ``python -c``, an extension module).
    """
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return None
    lines = linecache.getlines(str(path), getattr(module, "__dict__", None))
    return "".join(lines).encode() if lines else None


def _qualified(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or "?"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or "?"
    return f"{module}.{name}"


# Values that never change what a run does: named by their type, never listed as opaque.
_BY_TYPE: tuple[type, ...] = (
    type(threading.Lock()),
    type(threading.RLock()),
    threading.Event,
    threading.Condition,
    threading.Semaphore,
    logging.Logger,
    logging.Handler,
)


def _named_by_type(value: Any) -> bool:
    return getattr(type(value), "__identity__", None) == "type" or isinstance(value, _BY_TYPE)


# -- the walk -----------------------------------------------------------------------------------
class _Walk:
    """One digest's walk over code and values, memoising each object it has seen."""

    def __init__(self) -> None:
        self.seen: dict[int, str] = {}
        self.keep: list[Any] = []  # objects seen stay alive, so their ids stay theirs
        self.reads: dict[str, str] = {}
        self.opaque: list[str] = []
        self.modules: set[str] = set()  # user modules passed through (their files count)

    # values ---------------------------------------------------------------------------------
    def value(self, v: Any, where: str, depth: int = 0) -> str:
        """The text of a value: by value for data, by code for code."""
        if v is None or isinstance(v, bool | int | float | complex | str | bytes):
            return f"{type(v).__name__}:{v!r}"
        key = id(v)
        if key in self.seen:
            return self.seen[key]
        self.seen[key] = f"@{len(self.seen)}"  # a cycle back to this value names its place
        self.keep.append(v)
        text = self._value(v, where, depth)
        self.seen[key] = text if len(text) < 256 else "#" + _sha(text)[:24]
        return text

    def _value(self, v: Any, where: str, depth: int) -> str:
        if depth > _MAX_DEPTH:
            return self._pickled(v, where, depth)
        nxt = depth + 1
        if _is_code(v):
            return self._code(v, where, nxt)  # memoised by ``value`` already
        if isinstance(v, types.ModuleType):
            return self._module(v)
        if isinstance(v, enum.Enum):
            return f"enum:{_qualified(type(v))}.{v.name}"
        if isinstance(v, list | tuple | set | frozenset | dict):
            if len(v) > _BIG:
                return self._pickled(v, where)
            kind = type(v).__name__
            if type(v) not in (list, tuple, set, frozenset, dict):  # a namedtuple, a subclass
                kind = self.code(type(v), where, nxt)
            if isinstance(v, dict):
                items = (
                    f"{self.value(k, where, nxt)}:{self.value(x, where, nxt)}" for k, x in v.items()
                )
                return f"{kind}{{" + ",".join(items) + "}"
            texts = [self.value(x, where, nxt) for x in v]
            if isinstance(v, set | frozenset):  # iteration order is the hash seed's: sorted
                texts.sort()
            return f"{kind}[" + ",".join(texts) + "]"
        if isinstance(v, random.Random):
            return f"random({self.value(v.getstate(), where, nxt)})"
        if hasattr(v, "dtype") and hasattr(v, "tobytes") and hasattr(v, "shape"):  # numpy
            try:
                data = v.tobytes()
            except Exception:  # an object array: its items
                return self._pickled(v, where, depth)
            return f"array({v.dtype};{v.shape};{hashlib.sha256(data).hexdigest()})"
        if _named_by_type(v):
            return f"<{_qualified(type(v))}>"
        cls = type(v)
        if dataclasses.is_dataclass(v):
            fields = {f.name: getattr(v, f.name, None) for f in dataclasses.fields(v)}
            return f"<{self.code(cls, where, nxt)}:{self.value(fields, where, nxt)}>"
        model_fields = getattr(cls, "model_fields", None)
        if isinstance(model_fields, dict) and hasattr(v, "model_dump"):  # a pydantic model
            fields = {name: getattr(v, name, None) for name in model_fields}
            return f"<{self.code(cls, where, nxt)}:{self.value(fields, where, nxt)}>"
        if not from_a_library(cls):  # a user object: its class's code and its state
            state = self.value(_state(v), where, nxt)
            if any(from_a_library(b) and b is not object for b in cls.__mro__):
                state += self._pickled(
                    v, where, depth
                )  # a subclass of a library type: its data too
            return f"<{self.code(cls, where, nxt)}:{state}>"
        if isinstance(v, Mapping):  # a library mapping (OrderedDict, MappingProxy, ...)
            try:
                items = dict(v.items())
            except Exception:
                return self._pickled(v, where, depth)
            return f"<{_qualified(cls)}:{self.value(items, where, nxt)}>"
        return self._pickled(v, where, depth)

    def _pickled(self, v: Any, where: str, depth: int = 0) -> str:
        """A library object by its pickle bytes, else by its attributes; else opaque.

        Pickling follows the library's own idea of its state (a data frame's data, not its
        caches); user code met on the way (a function it holds, the class of an object it
        holds) would go by name only, so each is replaced by the digest of its code
        (``_CodePickler``). An object that will not pickle (it holds a lock) is followed
        through its attributes, as cloudpickle would carry it; what is left at the bottom that
        neither pickles nor has attributes (a socket, a generator) is opaque.
        """
        try:
            data = _CodePickler.dumps(v, self, where, depth)
        except Exception:
            state = _state(v) if depth <= _MAX_DEPTH else None
            if state and not _pickles(state, self, where, depth):  # an attribute is the cause
                return f"<{_qualified(type(v))}:{self.value(state, where, depth + 1)}>"
            self.opaque.append(f"{where} ({_qualified(type(v))})")
            return f"<opaque {_qualified(type(v))}>"
        return f"<{_qualified(type(v))}:{hashlib.sha256(data).hexdigest()}>"

    def _module(self, module: types.ModuleType) -> str:
        name = module.__name__
        if _module_is_library(name):
            return f"module:{name}"
        self.modules.add(name)
        text = module_text(types.SimpleNamespace(__module__=name)) or b""
        return f"module:{name}:{hashlib.sha256(text).hexdigest()}"

    # code -----------------------------------------------------------------------------------
    def code(self, obj: Any, where: str, depth: int = 0) -> str:
        """The text of a function, class, method, partial or callable object."""
        key = id(obj)
        if key in self.seen:
            return self.seen[key]
        self.seen[key] = f"@{len(self.seen)}"
        self.keep.append(obj)
        text = self._code(obj, where, depth)
        self.seen[key] = text if len(text) < 256 else "#" + _sha(text)[:24]
        return text

    def _code(self, obj: Any, where: str, depth: int) -> str:
        nxt = depth + 1
        if isinstance(obj, functools.partial):
            args = self.value((obj.args, obj.keywords), where, nxt)
            return f"partial({self.code(obj.func, where, nxt)};{args})"
        if isinstance(obj, types.MethodType):
            owner = self.value(obj.__self__, where, nxt)
            return f"method({self.code(obj.__func__, where, nxt)};{owner})"
        if isinstance(obj, staticmethod | classmethod):
            return f"{type(obj).__name__}({self.code(obj.__func__, where, nxt)})"
        if isinstance(obj, property):
            parts = [self.code(f, where, nxt) if f else "-" for f in (obj.fget, obj.fset, obj.fdel)]
            return f"property({';'.join(parts)})"
        if isinstance(obj, type):
            return self._class(obj, nxt)
        if inspect.isfunction(obj):
            return self._function(obj, nxt)
        if not isinstance(obj, types.BuiltinFunctionType | types.BuiltinMethodType):
            return self._value(obj, where, nxt)  # a callable object: its class and its state
        owner = getattr(obj, "__self__", None)
        if isinstance(obj, types.BuiltinMethodType) and not (
            owner is None or isinstance(owner, types.ModuleType)
        ):  # ``rng.random``: the method of an object whose state decides what it returns
            return f"lib:{_qualified(obj)}:{self.value(owner, where, nxt)}"
        return f"lib:{_qualified(obj)}"  # a built-in or a library's callable: its name

    def _class(self, cls: type, depth: int) -> str:
        if from_a_library(cls):
            return f"lib:{_qualified(cls)}"
        self.modules.add(cls.__module__)
        where = cls.__qualname__
        own = [(k, v) for k, v in vars(cls).items() if not _noise(k)]
        body = ",".join(
            f"{k}={self.code(v, f'{where}.{k}', depth) if _is_code(v) else self.value(v, f'{where}.{k}', depth)}"
            for k, v in sorted(own, key=lambda kv: kv[0])
        )
        bases = ",".join(self.code(b, where, depth) for b in cls.__bases__ if b is not object)
        return f"class({cls.__module__}.{cls.__qualname__};{bases};{body})"

    def _function(self, fn: types.FunctionType, depth: int) -> str:
        if from_a_library(fn):
            return f"lib:{_qualified(fn)}"
        module = str(fn.__globals__.get("__name__", "") or fn.__module__ or "")
        self.modules.add(module)
        where = fn.__qualname__
        parts = [f"fn({module}.{where}", _code_text(fn.__code__)]
        parts.append(self.value((fn.__defaults__, fn.__kwdefaults__), where, depth))
        cells = []
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned later)
                cells.append(f"{name}=<empty>")
                continue
            text = (
                self.code(content, f"{where}.{name}", depth)
                if _is_code(content)
                else self.value(content, f"{where}.{name}", depth)
            )
            cells.append(f"{name}={text}")
        parts.append("cells[" + ",".join(cells) + "]")
        reads = []
        names = _code_names(fn.__code__)
        for name in sorted(names):
            if name not in fn.__globals__:
                # A module imported inside the function (``import params``): its name is read
                # as an import, and what the function reads of it as attributes.
                module = sys.modules.get(name)
                if isinstance(module, types.ModuleType) and not _module_is_library(name):
                    attrs = self._module_reads(module, names, f"{where}.{name}", depth)
                    reads.append(f"{name}={self._module(module)}{attrs}")
                continue  # a builtin, an attribute name, or a global not yet assigned
            value = fn.__globals__[name]
            label = f"{where}.{name}"
            text = (
                self.code(value, label, depth)
                if _is_code(value)
                else self.value(value, label, depth)
            )
            if not _is_code(value) and not isinstance(value, types.ModuleType):
                self.reads[label] = _sha(text)[:12]
            if isinstance(value, types.ModuleType) and not _module_is_library(value.__name__):
                text += self._module_reads(value, names, label, depth)
            reads.append(f"{name}={text}")
        parts.append("globals[" + ",".join(reads) + "]")
        return ";".join(parts) + ")"

    def _module_reads(
        self,
        module: types.ModuleType,
        names: set[str],
        where: str,
        depth: int,
        passed: frozenset[str] = frozenset(),
    ) -> str:
        """The values a function reads as attributes of a module of the user's (``params.R``).

        A module's file says what its names were when it was imported, not what they are now:
        a notebook that sets ``params.R = 3.0`` runs other behaviour from the same file. Each
        name the function's code uses that is an attribute of the module is digested by value
        (its code, for a function or a class), and a user submodule among them the same way
        (``pkg.settings.R``). A name the code uses for something else that the module also
        has is counted too: it can only make the identity stricter.
        """
        if module.__name__ in passed:
            return ""
        passed = passed | {module.__name__}
        space = getattr(module, "__dict__", {})
        parts = []
        for name in sorted(names & set(space)):
            value = space[name]
            label = f"{where}.{name}"
            if isinstance(value, types.ModuleType):
                if _module_is_library(value.__name__):
                    continue
                text = self._module(value) + self._module_reads(value, names, label, depth, passed)
            elif _is_code(value):
                text = self.code(value, label, depth)
            else:
                text = self.value(value, label, depth)
                self.reads[label] = _sha(text)[:12]
            parts.append(f"{name}={text}")
        return "{" + ",".join(parts) + "}" if parts else ""


# Class attributes that Python or a library makes from the class body (already digested as the
# body) or fills lazily: caches, compiled schemas, ABC registries. ``__pydantic_fields__`` (a
# model's fields and defaults) and a dataclass's ``__dataclass_fields__`` stay.
_CLASS_NOISE = frozenset(
    {
        "__dict__",
        "__weakref__",
        "__module__",
        "__doc__",
        "__qualname__",
        "__firstlineno__",
        "__static_attributes__",
        "__abstractmethods__",
        "__signature__",
        "__parameters__",
        "__orig_bases__",
        "__protocol_attrs__",
        "__non_callable_proto_members__",
        "__callable_proto_members_only__",
        "__subclasshook__",
        "_is_protocol",
        "_is_runtime_protocol",
        "__class_getitem__",
    }
)


def _noise(name: str) -> bool:
    if name in _CLASS_NOISE or name.startswith("_abc_"):
        return True
    return name.startswith("__pydantic_") and name != "__pydantic_fields__"


_CODE_TYPES = (
    type,
    functools.partial,
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    staticmethod,
    classmethod,
    property,
)


def _is_code(v: Any) -> bool:
    return isinstance(v, _CODE_TYPES)


def _state(obj: Any) -> Any:
    """An object's own state: its ``__getstate__`` if its class defines one, else its attributes."""
    own = type(obj).__dict__.get("__getstate__") if hasattr(type(obj), "__dict__") else None
    if own is not None:
        try:
            return obj.__getstate__()
        except Exception:
            pass
    state: dict[str, Any] = dict(getattr(obj, "__dict__", {}) or {})
    for cls in type(obj).__mro__:
        for slot in cls.__dict__.get("__slots__", ()) if hasattr(cls, "__dict__") else ():
            if isinstance(slot, str) and slot not in ("__dict__", "__weakref__"):
                with contextlib.suppress(AttributeError):
                    state[slot] = getattr(obj, slot)
    return state


def _set_order(item: Any) -> tuple[str, str]:
    return type(item).__qualname__, repr(item)


class _CodePickler(pickle._Pickler):  # type: ignore[name-defined,misc]
    """A pickler that writes user code as the digest of its code, and sets in sorted order.

    Python's own pickler (not the C one, which never lets a set be reduced differently): user
    functions and classes it meets would go by their name alone, and a set's items in the
    process's hash order.
    """

    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, file: io.BytesIO, walk: _Walk, where: str, depth: int) -> None:
        super().__init__(file, protocol=4)
        self.walk, self.where, self.depth = walk, where, depth

    def persistent_id(self, obj: Any) -> str | None:
        """User functions and classes by their code; everything else pickled as usual."""
        if isinstance(obj, type | types.FunctionType) and not from_a_library(obj):
            return "code:" + _sha(self.walk.code(obj, self.where, self.depth + 1))
        if _named_by_type(obj):
            return f"type:{_qualified(type(obj))}"
        return None

    def _save_sorted(self, obj: set[Any] | frozenset[Any]) -> None:
        self.save_reduce(type(obj), (sorted(obj, key=_set_order),), obj=obj)

    dispatch[set] = _save_sorted
    dispatch[frozenset] = _save_sorted

    @classmethod
    def dumps(cls, value: Any, walk: _Walk, where: str, depth: int) -> bytes:
        buffer = io.BytesIO()
        cls(buffer, walk, where, depth).dump(value)
        return buffer.getvalue()


def _pickles(value: Any, walk: _Walk, where: str, depth: int) -> bool:
    try:
        _CodePickler.dumps(value, _Walk(), where, depth)
    except Exception:
        return False
    return True


def _code_names(code: types.CodeType) -> set[str]:
    """Every global name ``code`` and the code nested in it (lambdas, comprehensions) read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _code_text(code: types.CodeType) -> str:
    """A code object as text: its bytecode, constants (nested code too) and names."""
    consts = ",".join(_const_text(c) for c in code.co_consts)
    return f"code({code.co_code.hex()};{consts};{code.co_names};{code.co_freevars})"


def _const_text(const: Any) -> str:
    """A code constant as text; a frozenset (``x in {"a", "b"}``) sorted, not in hash order."""
    if isinstance(const, types.CodeType):
        return _code_text(const)
    if isinstance(const, frozenset):
        return "frozenset[" + ",".join(sorted(_const_text(c) for c in const)) + "]"
    if isinstance(const, tuple):
        return "tuple[" + ",".join(_const_text(c) for c in const) + "]"
    return f"{type(const).__name__}:{const!r}"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# -- digests ------------------------------------------------------------------------------------
_SNAPSHOT: contextvars.ContextVar[dict[Any, tuple[Any, CodeDigest]] | None] = (
    contextvars.ContextVar("vivarium_identity_snapshot", default=None)
)


@contextlib.contextmanager
def snapshot() -> Iterator[None]:
    """Digest each piece of code once inside the block (a run or a sweep starting).

    The values user code reads may change between runs (a notebook global set again), so a
    digest is never kept across runs; within one start (the trace's path, the run id, the
    recorded config, a sweep's thousand run ids) it is taken once.
    """
    if _SNAPSHOT.get() is not None:
        yield
        return
    token = _SNAPSHOT.set({})
    try:
        yield
    finally:
        _SNAPSHOT.reset(token)


def digest_code(obj: Any, *, instance: bool = False, value: bool = False) -> CodeDigest:
    """The digest of ``obj``'s code and of every value it reads (see the module docstring).

    Args:
        obj: A class, a function or factory, a ``functools.partial``, or (with ``instance``) an
            object whose class is the code and whose state is data.
        instance: Digest ``obj`` as an instance: its class's code and its own state.
        value: Digest ``obj`` as any value a run is given (an option that JSON cannot hold):
            code as code, anything else by value (a set by its items, an object by its class
            and state).

    Returns:
        The digest, the values read and what could not be digested.
    """
    cache = _SNAPSHOT.get()
    key = (id(obj), instance, value)
    if cache is not None and key in cache and cache[key][0] is obj:
        return cache[key][1]
    walk = _Walk()
    if value and not _is_code(obj):
        text = walk.value(obj, _where(obj))
    elif instance:
        text = f"{walk.code(type(obj), _where(obj))}:{walk.value(_state(obj), _where(obj))}"
    else:
        text = walk.code(obj, _where(obj))
    # A module's name depends on how it was imported (``tests.helpers`` here, ``helpers`` in a
    # worker, ``__main__`` in a script): the code is the same, so the names come out.
    for module in sorted(walk.modules - {""}, key=len, reverse=True):
        text = text.replace(f"({module}.", "(").replace(f"<{module}.", "<")
    h = hashlib.sha256()
    for module in sorted(walk.modules):
        source = module_text(types.SimpleNamespace(__module__=module))
        if source is not None:
            h.update(hashlib.sha256(source).digest())
    h.update(text.encode("utf-8", "surrogatepass"))
    found = CodeDigest(
        digest=h.hexdigest()[:DIGEST_CHARS],
        reads=dict(sorted(walk.reads.items())),
        opaque=tuple(dict.fromkeys(walk.opaque)),
    )
    if cache is not None:
        cache[key] = (obj, found)
    return found


def _where(obj: Any) -> str:
    target = obj.func if isinstance(obj, functools.partial) else obj
    if not (isinstance(target, type) or inspect.isfunction(target)):
        target = type(target)
    return getattr(target, "__qualname__", None) or type(target).__qualname__


def fingerprint(value: Any) -> str:
    """The text a digest hashes for ``value``: the same in every process for the same value.

    Args:
        value: Code or data.

    Returns:
        The text (long for large values; hash it).
    """
    walk = _Walk()
    return walk.code(value, _where(value)) if _is_code(value) else walk.value(value, "value")


_SAID: set[str] = set()


def say_opaque(what: str, found: CodeDigest, *, stacklevel: int = 2) -> None:
    """Warn once per process about each value of ``what`` that could not be digested.

    Args:
        what: The code's name as the user knows it (``world PotWorld``).
        found: Its digest.
        stacklevel: As for ``warnings.warn``.
    """
    for phrase in found.opaque:
        key = f"{what}|{phrase}"
        if key in _SAID:
            continue
        _SAID.add(key)
        warnings.warn(
            f"{what}: {phrase} cannot be digested, so Vivarium cannot tell when it changes: "
            "a stored run of it is never reused (declare what it stands for with "
            "inputs={...} or input_files=[...] to make the run's identity complete)",
            IdentityWarning,
            stacklevel=stacklevel + 1,
        )


def digest_files(paths: list[str], base: str | os.PathLike[str] | None) -> dict[str, str]:
    """The content digest of each declared input file or folder (``input_files``).

    Args:
        paths: The files or folders, as the config gives them (relative to ``base`` or the
            working directory).
        base: The folder relative paths resolve from (the config's ``base_dir``), or None.

    Returns:
        Each path as given -> SHA-256 of its content (a folder: of every file in it, by
        relative path).

    Raises:
        ConfigError: A path that does not exist (one line naming it).
    """
    out: dict[str, str] = {}
    for given in paths:
        p = Path(given)
        if not p.is_absolute() and base is not None and (Path(base) / p).exists():
            p = Path(base) / p
        if p.is_file():
            out[given] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            h = hashlib.sha256()
            for file in sorted(f for f in p.rglob("*") if f.is_file()):
                h.update(file.relative_to(p).as_posix().encode() + b"\0")
                h.update(hashlib.sha256(file.read_bytes()).digest())
            out[given] = h.hexdigest()
        else:
            raise ConfigError(f"input_files: {given} does not exist (from {Path.cwd()})")
    return out
