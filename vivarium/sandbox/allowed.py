"""What sandboxed text may use: the allowed value types, functions, methods and operators.

This table is the language. Everything outside it is refused by the checker
(``vivarium.sandbox.checker``) before anything runs, and the interpreter
(``vivarium.sandbox.expressions``) looks every call and operator up here. Text rendering of values
(``safe_repr``, ``safe_str``) is deterministic: sets print in sorted order, never in hash order,
so the same evaluation gives the same text in every process.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable
from typing import Any

# ``context`` is a mapping view of the names in scope (the caller's, then those the code assigned):
# ``context.get('x', 0)`` is ``x`` when it is defined and 0 when not, ``context['x']`` is ``x``
# (an unknown name when it is not), ``'x' in context`` tells which, and ``context['x'] = v`` is
# ``x = v``. Those and ``keys()``, ``values()``, ``items()`` are all it offers: it is never a value
# itself, so nothing reaches the caller's mapping or any Python object through it.
SCOPE_NAME = "context"
SCOPE_METHODS = frozenset({"get", "keys", "values", "items"})
SCOPE_USES = (
    f"{SCOPE_NAME!r} can only be used as {SCOPE_NAME}['x'], {SCOPE_NAME}.get('x', default), "
    f"'x' in {SCOPE_NAME}, {SCOPE_NAME}.keys()/values()/items() or {SCOPE_NAME}['x'] = value"
)

# Values expressions can see and make: JSON-like data plus tuples and sets made by displays.
VALUE_TYPES = frozenset({type(None), bool, int, float, str, list, tuple, dict, set})
COLLECTIONS = (list, tuple, dict, set)
INTS = (int, bool)
SCALARS = frozenset({type(None), bool, int, float})


def short(value: Any) -> str:
    """A short rendering of an operand for error messages (huge numbers stay readable)."""
    if type(value) is int and value.bit_length() > 64:
        return f"<{value.bit_length()}-bit integer>"
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


# ---------------------------------------------------------------------------------------------
# Deterministic text: str()/repr() of sets would follow hash order, which varies between runs.


def ordered(items: set) -> list:
    """The items of a set in a fixed order (sorted; by type name and text when not comparable)."""
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=lambda v: (type(v).__name__, safe_repr(v)))


def safe_repr(value: Any) -> str:
    """``repr`` with sets in a fixed order, so the same value always gives the same text."""
    kind = type(value)
    if kind is list:
        return "[" + ", ".join(map(safe_repr, value)) + "]"
    if kind is tuple:
        inner = ", ".join(map(safe_repr, value))
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if kind is dict:
        return "{" + ", ".join(f"{safe_repr(k)}: {safe_repr(v)}" for k, v in value.items()) + "}"
    if kind is set:
        return "{" + ", ".join(map(safe_repr, ordered(value))) + "}" if value else "set()"
    return repr(value)


def safe_str(value: Any = "") -> str:
    """``str`` as sandboxed text sees it: strings as they are, anything else ``safe_repr``."""
    return value if type(value) is str else safe_repr(value)


# ---------------------------------------------------------------------------------------------
# The whitelist: functions, methods, operators.


def _round(number: Any, ndigits: Any = None) -> Any:
    # int.__round__ computes 10 ** -ndigits, which never finishes for a huge negative ndigits.
    if type(number) in INTS and type(ndigits) in INTS and -ndigits > len(str(abs(number))):
        return 0
    return round(number) if ndigits is None else round(number, ndigits)


def in_order(items: Any) -> Any:
    """``items`` to iterate: a set in its fixed order (``ordered``), anything else as it is."""
    return ordered(items) if type(items) is set else items


def _set(items: Iterable = ()) -> set:
    return set(items)


def _list(items: Iterable = ()) -> list:
    # list(a_set) follows hash order in Python, which varies between runs: sorted here.
    return list(in_order(items))


def _tuple(items: Iterable = ()) -> tuple:
    return tuple(in_order(items))


def _dict(items: Any = ()) -> dict:
    return dict(in_order(items))


def _sum(items: Iterable, start: Any = 0) -> Any:
    # A numeric start keeps sum() from concatenating lists or strings (quadratic work).
    if type(start) not in (int, float, bool):
        raise TypeError("sum() only adds numbers")
    return sum(in_order(items), start)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "all": all,
    "any": any,
    "bool": bool,
    "dict": _dict,
    "float": float,
    "int": int,
    "len": len,
    "list": _list,
    "max": max,
    "min": min,
    "round": _round,
    "set": _set,
    "sorted": sorted,
    "str": safe_str,
    "sum": _sum,
    "tuple": _tuple,
}
KEYWORDS = frozenset({"reverse", "default", "ndigits", "base", "start", "sep", "maxsplit"})
# Functions and methods whose result is an existing element: type-checked, not size-checked.
PASS_THROUGH = frozenset({"min", "max", "get"})

_STR_METHODS = [
    *("capitalize", "count", "endswith", "find", "index", "isalnum", "isalpha", "isdigit"),
    *("islower", "isspace", "isupper", "join", "lower", "lstrip", "removeprefix"),
    *("removesuffix", "replace", "rfind", "rsplit", "rstrip", "split", "splitlines"),
    *("startswith", "strip", "title", "upper"),
]
METHODS: dict[type, dict[str, Callable[..., Any]]] = {
    str: {name: getattr(str, name) for name in _STR_METHODS},
    list: {"count": list.count, "index": list.index},
    tuple: {"count": tuple.count, "index": tuple.index},
    dict: {
        "get": dict.get,
        "keys": lambda d: list(d),
        "values": lambda d: list(d.values()),
        "items": lambda d: list(d.items()),
    },
}
METHOD_NAMES = frozenset(name for table in METHODS.values() for name in table)

BINARY_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
UNARY_OPS: dict[type, Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
COMPARE_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
