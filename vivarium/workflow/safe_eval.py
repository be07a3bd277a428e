"""A restricted evaluator for expressions and small code blocks written in configs.

Config text (workflow conditions, artifact methods) comes from agents and users, so it is never
given to Python's ``eval``/``exec``. It is parsed with ``ast.parse``, checked against a small
whitelist, and interpreted node by node here. Work is bounded by a step counter, and every value
an operation could blow up (``**``, ``*`` on sequences, ``<<``, ``join``, ``replace``) is
size-checked before it is computed.
"""

from __future__ import annotations

import ast
import copy
import functools
import operator
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from vivarium.errors import ConfigError, VivariumError, squash

__all__ = [
    "SCOPE_NAME",
    "EvaluationError",
    "Limits",
    "UnsafeExpression",
    "check",
    "evaluate",
    "execute",
    "names_read",
]

# ``context`` reads the mapping of every name in scope: ``context.get('x', 0)`` is ``x`` when it
# is defined and 0 when not, ``context['x']`` is ``x``. It is read-only: assigning it, or an item
# of it, is refused (assign the name itself).
SCOPE_NAME = "context"


class UnsafeExpression(ConfigError):
    """The text uses a construct the evaluator does not allow; the message names it."""


class EvaluationError(VivariumError, ValueError):
    """Evaluating allowed text failed: unknown name, division by zero, a limit, a type error."""


@dataclass(frozen=True)
class Limits:
    """Bounds on the text and on the work and values of one evaluation.

    ``max_collection_len`` bounds one list/tuple/dict/set; ``max_value_size`` bounds a whole
    computed value: one per item at every level (shared parts count each time they appear, so
    ``[[x] * 100] * 100`` weighs 10,000) plus one per 64 characters of text.
    """

    max_source_chars: int = 10_000
    max_nodes: int = 5_000
    max_depth: int = 100
    max_steps: int = 200_000
    max_collection_len: int = 10_000
    max_value_size: int = 100_000
    max_str_len: int = 100_000
    max_int_bits: int = 4096


DEFAULT_LIMITS = Limits()

# Values expressions can see and make: JSON-like data plus tuples and sets made by displays.
_VALUE_TYPES = frozenset({type(None), bool, int, float, str, list, tuple, dict, set})
_COLLECTIONS = (list, tuple, dict, set)
_INTS = (int, bool)
_SCALARS = frozenset({type(None), bool, int, float})
_MAX_FORMAT_FIELD = 100  # largest width / precision in an f-string format spec


def _short(value: Any) -> str:
    """A short rendering of an operand for error messages (huge numbers stay readable)."""
    if type(value) is int and value.bit_length() > 64:
        return f"<{value.bit_length()}-bit integer>"
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


# ---------------------------------------------------------------------------------------------
# Deterministic text: str()/repr() of sets would follow hash order, which varies between runs.


def _ordered(items: set) -> list:
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=lambda v: (type(v).__name__, _repr(v)))


def _repr(value: Any) -> str:
    kind = type(value)
    if kind is list:
        return "[" + ", ".join(map(_repr, value)) + "]"
    if kind is tuple:
        inner = ", ".join(map(_repr, value))
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if kind is dict:
        return "{" + ", ".join(f"{_repr(k)}: {_repr(v)}" for k, v in value.items()) + "}"
    if kind is set:
        return "{" + ", ".join(map(_repr, _ordered(value))) + "}" if value else "set()"
    return repr(value)


def _str(value: Any = "") -> str:
    return value if type(value) is str else _repr(value)


# ---------------------------------------------------------------------------------------------
# The whitelist: functions, methods, operators.


def _round(number: Any, ndigits: Any = None) -> Any:
    # int.__round__ computes 10 ** -ndigits, which never finishes for a huge negative ndigits.
    if type(number) in _INTS and type(ndigits) in _INTS and -ndigits > len(str(abs(number))):
        return 0
    return round(number) if ndigits is None else round(number, ndigits)


def _sum(items: Iterable, start: Any = 0) -> Any:
    # A numeric start keeps sum() from concatenating lists or strings (quadratic work).
    if type(start) not in (int, float, bool):
        raise TypeError("sum() only adds numbers")
    return sum(_ordered(items) if type(items) is set else items, start)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "all": all,
    "any": any,
    "bool": bool,
    "float": float,
    "int": int,
    "len": len,
    "max": max,
    "min": min,
    "round": _round,
    "sorted": sorted,
    "str": _str,
    "sum": _sum,
}
_KEYWORDS = frozenset({"reverse", "default", "ndigits", "base", "start", "sep", "maxsplit"})
# Functions and methods whose result is an existing element: type-checked, not size-checked.
_PASS_THROUGH = frozenset({"min", "max", "get"})

_STR_METHODS = [
    *("capitalize", "count", "endswith", "find", "index", "isalnum", "isalpha", "isdigit"),
    *("islower", "isspace", "isupper", "join", "lower", "lstrip", "removeprefix"),
    *("removesuffix", "replace", "rfind", "rsplit", "rstrip", "split", "splitlines"),
    *("startswith", "strip", "title", "upper"),
]
_METHODS: dict[type, dict[str, Callable[..., Any]]] = {
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
_METHOD_NAMES = frozenset(name for table in _METHODS.values() for name in table)

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
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
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
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

# ---------------------------------------------------------------------------------------------
# Static check: parse, bound the tree, and reject anything outside the whitelist.

_PLAIN_NODES = frozenset(
    {
        ast.Expression,
        ast.Module,
        ast.Expr,
        ast.If,
        ast.Pass,
        ast.BoolOp,
        ast.UnaryOp,
        ast.Compare,
        ast.IfExp,
        ast.Subscript,
        ast.Slice,
        ast.List,
        ast.Tuple,
        ast.Set,
        ast.JoinedStr,
        ast.Load,
        ast.And,
        ast.Or,
        *_BINARY,
        *_UNARY,
        *_COMPARE,
    }
)
_REFUSALS: dict[type, str] = {
    ast.Lambda: "lambda is not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "generator expressions are not allowed",
    ast.NamedExpr: "assignment expression ':=' is not allowed",
    ast.Starred: "starred expressions are not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
    ast.Await: "await is not allowed",
    ast.Import: "import is not allowed",
    ast.ImportFrom: "import is not allowed",
    ast.For: "for loop is not allowed",
    ast.AsyncFor: "for loop is not allowed",
    ast.While: "while loop is not allowed",
    ast.FunctionDef: "function definition is not allowed",
    ast.AsyncFunctionDef: "function definition is not allowed",
    ast.ClassDef: "class definition is not allowed",
    ast.Delete: "del is not allowed",
    ast.Global: "global is not allowed",
    ast.Nonlocal: "nonlocal is not allowed",
    ast.With: "with is not allowed",
    ast.AsyncWith: "with is not allowed",
    ast.Try: "try is not allowed",
    ast.TryStar: "try is not allowed",
    ast.Raise: "raise is not allowed",
    ast.Assert: "assert is not allowed",
    ast.Return: "return is not allowed",
    ast.Break: "break is not allowed",
    ast.Continue: "continue is not allowed",
    ast.Match: "match is not allowed",
    ast.AnnAssign: "annotated assignment is not allowed",
    ast.MatMult: "operator '@' is not allowed",
}
_FORMAT_SPEC = re.compile(
    r"(?:.?[<>=^])?[+\- ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d+))?[bcdeEfFgGnosxX%]?",
    re.DOTALL,
)


def _snippet(node: ast.AST) -> str:
    return repr(squash(ast.unparse(node), 40))


def _refuse_name(name: str) -> None:
    if name.startswith("_"):
        raise UnsafeExpression(f"name {name!r} is not allowed (names starting with '_')")


def _refuse_target(name: str) -> None:
    _refuse_name(name)
    if name == SCOPE_NAME:
        raise UnsafeExpression(
            f"{SCOPE_NAME!r} cannot be assigned (it reads the names in scope; assign a name)"
        )


def _validate(node: ast.AST, limits: Limits) -> None:
    """Raise UnsafeExpression for the first construct outside the whitelist."""
    kind = type(node)
    if kind is ast.Call:
        _validate_call(node, limits)
        return
    if kind is ast.Attribute:
        if node.attr in _METHOD_NAMES:
            raise UnsafeExpression(f"method {node.attr!r} can only be called, not used as a value")
        raise UnsafeExpression(f"attribute {node.attr!r} is not allowed")
    if kind is ast.Name:
        _refuse_name(node.id)
    elif kind is ast.Constant:
        _validate_constant(node.value, limits)
    elif kind is ast.Dict:
        if None in node.keys:
            raise UnsafeExpression("dict unpacking '**' is not allowed")
    elif kind is ast.BinOp:
        if type(node.op) is ast.Mod and _is_text(node.left):
            raise UnsafeExpression("string formatting with '%' is not allowed")
    elif kind is ast.FormattedValue:
        _validate_format_spec(node.format_spec)
        _validate(node.value, limits)
        return
    elif kind in (ast.Assign, ast.AugAssign):
        for target in node.targets if kind is ast.Assign else [node.target]:
            _validate_target(target, limits)
        _validate(node.value, limits)
        return
    elif kind not in _PLAIN_NODES:
        raise UnsafeExpression(_REFUSALS.get(kind) or f"{kind.__name__} is not allowed")
    for child in ast.iter_child_nodes(node):
        _validate(child, limits)


def _is_text(node: ast.AST) -> bool:
    return type(node) is ast.JoinedStr or (type(node) is ast.Constant and type(node.value) is str)


def _validate_constant(value: Any, limits: Limits) -> None:
    kind = type(value)
    if kind is int and value.bit_length() > limits.max_int_bits:
        raise UnsafeExpression(f"integer literal has more than {limits.max_int_bits} bits")
    if kind is str and len(value) > limits.max_str_len:
        raise UnsafeExpression(f"string literal is longer than {limits.max_str_len} characters")
    if kind not in (int, float, str, bool, type(None)):
        names = {bytes: "bytes literals are", complex: "complex numbers are", type(...): "'...' is"}
        raise UnsafeExpression(f"{names.get(kind, repr(kind.__name__) + ' is')} not allowed")


def _validate_format_spec(spec: ast.JoinedStr | None) -> None:
    if spec is None:
        return
    if any(type(part) is not ast.Constant for part in spec.values):
        raise UnsafeExpression("nested fields in f-string format specs are not allowed")
    text = "".join(part.value for part in spec.values)
    match = _FORMAT_SPEC.fullmatch(text)
    fields = [match["width"], match["precision"] or ""] if match else []
    if not match or any(len(f) > 3 or int(f or 0) > _MAX_FORMAT_FIELD for f in fields):
        raise UnsafeExpression(
            f"f-string format spec {text!r} is not allowed "
            f"(widths and precisions up to {_MAX_FORMAT_FIELD})"
        )


def _validate_call(node: ast.Call, limits: Limits) -> None:
    func = node.func
    if type(func) is ast.Name:
        if func.id not in _FUNCTIONS:
            raise UnsafeExpression(f"call of {func.id!r} is not allowed")
    elif type(func) is ast.Attribute:
        if func.attr.startswith("_"):
            raise UnsafeExpression(f"attribute {func.attr!r} is not allowed")
        if func.attr not in _METHOD_NAMES:
            raise UnsafeExpression(f"method {func.attr!r} is not allowed")
        _validate(func.value, limits)
    else:
        _validate(func, limits)  # a lambda or attribute inside gets its own message first
        raise UnsafeExpression(f"call of {_snippet(func)} is not allowed")
    for arg in node.args:
        if type(arg) is ast.Starred:
            raise UnsafeExpression("argument unpacking '*' is not allowed")
        _validate(arg, limits)
    for keyword in node.keywords:
        if keyword.arg is None:
            raise UnsafeExpression("keyword unpacking '**' is not allowed")
        if keyword.arg not in _KEYWORDS:
            raise UnsafeExpression(f"keyword argument {keyword.arg!r} is not allowed")
        _validate(keyword.value, limits)


def _validate_target(target: ast.AST, limits: Limits) -> None:
    kind = type(target)
    if kind is ast.Name:
        _refuse_target(target.id)
    elif kind in (ast.Tuple, ast.List):
        for element in target.elts:
            _validate_target(element, limits)
    elif kind is ast.Subscript:
        base = target
        while type(base) is ast.Subscript:
            if type(base.slice) is ast.Slice:
                raise UnsafeExpression("slice assignment is not allowed")
            _validate(base.slice, limits)
            base = base.value
        if type(base) is not ast.Name:
            raise UnsafeExpression("item assignment is only allowed on a name, like d['k'] = v")
        _refuse_target(base.id)
    elif kind is ast.Starred:
        raise UnsafeExpression("starred assignment is not allowed")
    elif kind is ast.Attribute:
        raise UnsafeExpression(f"assignment to attribute {target.attr!r} is not allowed")
    else:
        raise UnsafeExpression(f"assignment to {_snippet(target)} is not allowed")


def _bound_tree(tree: ast.AST, limits: Limits) -> None:
    """Count nodes and nesting without recursion, so deep trees fail cleanly before the walk."""
    stack = [(tree, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > limits.max_nodes:
            raise UnsafeExpression(f"expression is too large: more than {limits.max_nodes} nodes")
        if depth > limits.max_depth:
            raise UnsafeExpression(
                f"expression is nested too deeply: more than {limits.max_depth} levels"
            )
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


# CPython 3.11's parser keeps its recursion depth in shared state: parsing in two threads at once
# can fail with "AST constructor recursion depth mismatch" (gh-106905). catch_warnings is not
# thread-safe either. One lock makes both safe; parsed trees are cached, so it is rarely taken.
_PARSE_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1024)
def is_expression(source: str) -> bool:
    """Whether ``source`` parses as one expression (thread-safe; nothing is evaluated)."""
    try:
        with _PARSE_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(source, mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return False
    return True


def _parse(source: str, mode: str, limits: Limits) -> ast.AST:

    try:
        with _PARSE_LOCK, warnings.catch_warnings():  # "invalid escape sequence": not ours
            warnings.simplefilter("ignore")
            return ast.parse(source, mode=mode)
    except SyntaxError as exc:
        where = f" (line {exc.lineno}, column {exc.offset})" if exc.lineno else ""
        raise UnsafeExpression(f"invalid syntax: {squash(exc.msg, 200)}{where}") from None
    except (RecursionError, MemoryError):
        raise UnsafeExpression("expression is nested too deeply to parse") from None
    except ValueError as exc:
        raise UnsafeExpression(f"invalid source: {squash(exc, 200)}") from None


@functools.lru_cache(maxsize=1024)
def _compiled(source: str, mode: str, limits: Limits) -> ast.AST:
    """Parse and check once per (text, mode, limits); the evaluator never mutates the tree."""
    try:
        tree = _parse(source, mode, limits)
    except UnsafeExpression:
        if mode != "eval":
            raise
        # Statements (``import os``, ``x = 1``) do not parse as an expression: name them instead.
        try:
            module = _parse(source, "exec", limits)
        except UnsafeExpression:
            pass
        else:
            if not getattr(module, "body", None):  # blank, or only comments
                raise UnsafeExpression("expression is empty (write one, e.g. tick > 0)") from None
            _bound_tree(module, limits)
            _validate(module, limits)
            raise UnsafeExpression(
                "statements are not allowed in an expression (use execute for code)"
            ) from None
        raise
    _bound_tree(tree, limits)
    _validate(tree, limits)
    return tree


def _prepare(source: Any, mode: str, limits: Limits | None) -> tuple[ast.AST, Limits]:
    limits = DEFAULT_LIMITS if limits is None else limits
    if mode not in ("eval", "exec"):
        raise ConfigError(f"mode must be 'eval' or 'exec', not {mode!r}")
    if not isinstance(source, str):
        raise UnsafeExpression(f"expression must be a string, not {type(source).__name__}")
    if len(source) > limits.max_source_chars:
        raise UnsafeExpression(
            f"expression is too long: {len(source)} characters, limit {limits.max_source_chars}"
        )
    return _compiled(source, mode, limits), limits


# ---------------------------------------------------------------------------------------------
# The interpreter.


def _cost(value: Any) -> int:
    """Extra steps an operation producing or consuming ``value`` is charged."""
    kind = type(value)
    if kind is str:
        return len(value) >> 6
    return len(value) if kind in _COLLECTIONS else 0


class _Evaluator:
    """Interprets a checked tree. Nothing is ever mutated: item assignment copies the path."""

    __slots__ = ("context", "limits", "names", "steps")

    def __init__(self, context: Mapping[str, Any], limits: Limits) -> None:
        self.context = context
        self.limits = limits
        self.names: dict[str, Any] = {}  # what execute assigned
        self.steps = 0

    # -- bookkeeping ---------------------------------------------------------------------------

    def charge(self, steps: int) -> None:
        self.steps += steps
        if self.steps > self.limits.max_steps:
            raise EvaluationError(f"evaluation took more than {self.limits.max_steps} steps")

    def admit(self, value: Any, what: str) -> Any:
        """Let in an existing value (from the context) after checking its type."""
        if type(value) not in _VALUE_TYPES:
            raise EvaluationError(f"{what} holds a {type(value).__name__!r}, which is not allowed")
        return value

    def checked(self, value: Any) -> Any:
        """Check the type and size of a computed value and charge for its size."""
        kind, limits = type(value), self.limits
        if kind is int:
            if value.bit_length() > limits.max_int_bits:
                raise EvaluationError(
                    f"result too large: integer has more than {limits.max_int_bits} bits"
                )
        elif kind is str:
            if len(value) > limits.max_str_len:
                raise EvaluationError(
                    f"result too large: string has more than {limits.max_str_len} characters"
                )
            self.charge(len(value) >> 6)
        elif kind in _COLLECTIONS:
            self.check_len(value)
            self.measure(value)
        elif kind not in _VALUE_TYPES:
            raise EvaluationError(f"results of type {kind.__name__!r} are not allowed")
        return value

    def check_len(self, value: Any) -> None:
        if len(value) > self.limits.max_collection_len:
            raise EvaluationError(
                f"result too large: {type(value).__name__} has more than "
                f"{self.limits.max_collection_len} items"
            )

    def measure(self, value: Any) -> None:
        """Bound the total size and depth of a computed value, and charge for walking it.

        Every value this evaluator builds passes here, and values are never mutated, so nothing
        reachable can be larger than ``max_value_size``: comparing, hashing or printing any
        value is bounded work.
        """
        limits = self.limits
        total = 0
        stack = [(value, 1)]
        while stack:
            item, depth = stack.pop()
            kind = type(item)
            if kind in _COLLECTIONS:
                if depth > limits.max_depth:
                    raise EvaluationError(
                        f"value is nested more than {limits.max_depth} levels deep"
                    )
                parts = [*item, *item.values()] if kind is dict else item
                total += 1 + len(parts)
                stack.extend((part, depth + 1) for part in parts if type(part) not in _SCALARS)
            elif kind is str:
                total += len(item) >> 6
            elif kind not in _VALUE_TYPES:
                raise EvaluationError(f"values of type {kind.__name__!r} are not allowed")
            if total > limits.max_value_size:
                raise EvaluationError(
                    f"result too large: more than {limits.max_value_size} items in all"
                )
        self.charge(total)

    def eval(self, node: ast.AST) -> Any:
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise EvaluationError(f"evaluation took more than {self.limits.max_steps} steps")
        return _EVAL[type(node)](self, node)

    # -- expressions ---------------------------------------------------------------------------

    def constant(self, node: ast.Constant) -> Any:
        return node.value

    def name(self, node: ast.Name) -> Any:
        if node.id in self.names:
            return self.names[node.id]
        if node.id == SCOPE_NAME:
            return self.scope()
        if node.id not in self.context:  # `in` first: a defaultdict must not grow
            raise EvaluationError(f"unknown name {node.id!r}")
        return self.admit(self.context[node.id], f"name {node.id!r}")

    def scope(self) -> dict[str, Any]:
        """``context``: the caller's names, then those assigned so far (a fresh dict each time,
        so nothing the text does reaches the caller's mapping). Values are type-checked when
        read out of it, like any item."""
        self.charge(len(self.context) + len(self.names))
        merged = {k: v for k, v in self.context.items() if type(k) is str and k != SCOPE_NAME}
        merged.update(self.names)
        return merged

    def binop(self, node: ast.BinOp) -> Any:
        return self.arith(node.op, self.eval(node.left), self.eval(node.right))

    def arith(self, op: ast.operator, left: Any, right: Any) -> Any:
        kind, limits = type(op), self.limits
        if kind is ast.Pow and type(left) in _INTS and type(right) in _INTS:
            # |a| ** b has at least (bits(a) - 1) * b + 1 bits: refuse before computing.
            if (
                abs(left) > 1
                and right > 0
                and (abs(left).bit_length() - 1) * right + 1 > limits.max_int_bits
            ):
                raise EvaluationError(
                    f"result too large: {_short(left)}**{_short(right)} has more than "
                    f"{limits.max_int_bits} bits"
                )
        elif kind is ast.LShift and type(left) in _INTS and type(right) in _INTS:
            if left and right > 0 and left.bit_length() + right > limits.max_int_bits:
                raise EvaluationError(
                    f"result too large: {_short(left)} << {_short(right)} has more than "
                    f"{limits.max_int_bits} bits"
                )
        elif kind is ast.Mult:
            self.check_repeat(left, right)
        elif kind is ast.Mod and type(left) is str:
            raise UnsafeExpression("string formatting with '%' is not allowed")
        return self.checked(_BINARY[kind](left, right))

    def check_repeat(self, left: Any, right: Any) -> None:
        seq, count = (left, right) if type(right) in _INTS else (right, left)
        if type(count) not in _INTS or type(seq) not in (str, list, tuple) or count <= 0:
            return
        is_str = type(seq) is str
        limit = self.limits.max_str_len if is_str else self.limits.max_collection_len
        if len(seq) * count > limit:
            unit = "characters" if is_str else "items"
            raise EvaluationError(
                f"result too large: {_short(left)} * {_short(right)} has more than {limit} {unit}"
            )

    def unaryop(self, node: ast.UnaryOp) -> Any:
        return self.checked(_UNARY[type(node.op)](self.eval(node.operand)))

    def boolop(self, node: ast.BoolOp) -> Any:
        is_and = type(node.op) is ast.And
        for part in node.values:
            value = self.eval(part)
            if bool(value) is not is_and:  # `and` stops at a falsy value, `or` at a truthy one
                return value
        return value

    def compare(self, node: ast.Compare) -> bool:
        left = self.eval(node.left)
        for op, part in zip(node.ops, node.comparators, strict=True):
            right = self.eval(part)
            if type(op) in (ast.In, ast.NotIn):
                self.charge(_cost(right))
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def ifexp(self, node: ast.IfExp) -> Any:
        return self.eval(node.body if self.eval(node.test) else node.orelse)

    def subscript(self, node: ast.Subscript) -> Any:
        container = self.eval(node.value)
        index = node.slice
        if type(index) is ast.Slice:
            if type(container) not in (str, list, tuple):
                raise EvaluationError(f"cannot slice a {type(container).__name__!r}")
            parts = (index.lower, index.upper, index.step)
            bounds = [None if part is None else self.eval(part) for part in parts]
            return self.checked(container[slice(*bounds)])
        return self.admit(container[self.eval(index)], "item")

    def list_(self, node: ast.List) -> list:
        return self.checked([self.eval(element) for element in node.elts])

    def tuple_(self, node: ast.Tuple) -> tuple:
        return self.checked(tuple(self.eval(element) for element in node.elts))

    def set_(self, node: ast.Set) -> set:
        return self.checked({self.eval(element) for element in node.elts})

    def dict_(self, node: ast.Dict) -> dict:
        pairs = zip(node.keys, node.values, strict=True)
        return self.checked({self.eval(key): self.eval(value) for key, value in pairs})

    def joinedstr(self, node: ast.JoinedStr) -> str:
        parts = []
        size = 0
        for part in node.values:
            text = self.eval(part)
            size += len(text)
            if size > self.limits.max_str_len:
                raise EvaluationError(
                    f"result too large: string has more than {self.limits.max_str_len} characters"
                )
            parts.append(text)
        return self.checked("".join(parts))

    def formattedvalue(self, node: ast.FormattedValue) -> str:
        value = self.eval(node.value)
        if node.conversion == ord("r"):
            value = _repr(value)
        elif node.conversion == ord("a"):
            value = _repr(value).encode("ascii", "backslashreplace").decode("ascii")
        spec = "" if node.format_spec is None else "".join(p.value for p in node.format_spec.values)
        return format(value, spec) if spec else _str(value)

    def call(self, node: ast.Call) -> Any:
        func = node.func
        if type(func) is ast.Name:
            name, receiver = func.id, None
            function = _FUNCTIONS[name]
        else:
            name, receiver = func.attr, self.eval(func.value)
            function = _METHODS.get(type(receiver), {}).get(name)
            if function is None:
                raise EvaluationError(f"{type(receiver).__name__!r} values have no method {name!r}")
        args = [self.eval(arg) for arg in node.args]
        kwargs = {keyword.arg: self.eval(keyword.value) for keyword in node.keywords}
        self.charge(sum(map(_cost, args)) + _cost(receiver))
        if receiver is not None:
            args.insert(0, receiver)
            if type(receiver) is str and name in ("join", "replace") and len(args) > 1:
                args[1] = self.check_text_growth(name, args)
        result = function(*args, **kwargs)
        return self.admit(result, "result") if name in _PASS_THROUGH else self.checked(result)

    def check_text_growth(self, name: str, args: list) -> Any:
        """Bound the length of ``sep.join(items)`` / ``s.replace(old, new)`` before building it."""
        text, first = args[0], args[1]
        if name == "join":
            items = _ordered(first) if type(first) is set else list(first)
            self.charge(len(items))
            size = sum(len(item) for item in items if type(item) is str)
            size += len(text) * max(len(items) - 1, 0)
            first = items
        elif len(args) > 2 and type(first) is str and type(args[2]) is str:
            old, new = first, args[2]
            hits = text.count(old) if old else len(text) + 1
            if len(args) > 3 and type(args[3]) in _INTS and args[3] >= 0:
                hits = min(hits, args[3])
            size = len(text) + hits * (len(new) - len(old))
        else:
            return first
        if size > self.limits.max_str_len:
            raise EvaluationError(
                f"result too large: {name} would make more than {self.limits.max_str_len} "
                "characters"
            )
        return first

    # -- statements ----------------------------------------------------------------------------

    def run(self, body: list[ast.stmt]) -> None:
        for statement in body:
            self.steps += 1
            kind = type(statement)
            if kind is ast.Assign:
                value = self.eval(statement.value)
                for target in statement.targets:
                    self.assign(target, value)
            elif kind is ast.AugAssign:
                self.augassign(statement)
            elif kind is ast.If:
                self.run(statement.body if self.eval(statement.test) else statement.orelse)
            elif kind is ast.Expr:
                self.eval(statement.value)

    def assign(self, target: ast.AST, value: Any) -> None:
        kind = type(target)
        if kind is ast.Name:
            self.names[target.id] = value
        elif kind is ast.Subscript:
            self.set_item(target, lambda container, key: value)
        else:  # a tuple or list of targets
            if type(value) not in (list, tuple):
                raise EvaluationError(f"cannot unpack a {type(value).__name__!r}")
            if len(value) != len(target.elts):
                raise EvaluationError(
                    f"cannot unpack {len(value)} values into {len(target.elts)} targets"
                )
            for element, item in zip(target.elts, value, strict=True):
                self.assign(element, item)

    def augassign(self, statement: ast.AugAssign) -> None:
        target, op, value = statement.target, statement.op, self.eval(statement.value)
        if type(target) is ast.Name:
            self.assign(target, self.arith(op, self.name(target), value))
        else:
            self.set_item(
                target,
                lambda container, key: self.arith(op, self.admit(container[key], "item"), value),
            )

    def set_item(self, target: ast.Subscript, new_value: Callable[[Any, Any], Any]) -> None:
        """``name[k1]...[kn] = v``: rebind ``name`` to a copy with the containers on the path copied.

        The old value (which may be the context's, or shared with other names) is left as it was.
        """
        chain = []
        base: ast.AST = target
        while type(base) is ast.Subscript:
            chain.append(base.slice)
            base = base.value
        root = self.name(base)
        keys = [self.eval(index) for index in reversed(chain)]
        self.names[base.id] = self.checked(self.replaced(root, keys, new_value))

    def replaced(self, container: Any, keys: list, new_value: Callable[[Any, Any], Any]) -> Any:
        if type(container) not in (dict, list):
            raise EvaluationError(f"cannot assign to an item of a {type(container).__name__!r}")
        self.charge(len(container))
        key, copied = keys[0], container.copy()
        if len(keys) == 1:
            copied[key] = new_value(container, key)
        else:
            copied[key] = self.replaced(container[key], keys[1:], new_value)
        self.check_len(copied)
        return copied


_EVAL: dict[type, Callable[[_Evaluator, Any], Any]] = {
    ast.Constant: _Evaluator.constant,
    ast.Name: _Evaluator.name,
    ast.BinOp: _Evaluator.binop,
    ast.UnaryOp: _Evaluator.unaryop,
    ast.BoolOp: _Evaluator.boolop,
    ast.Compare: _Evaluator.compare,
    ast.IfExp: _Evaluator.ifexp,
    ast.Subscript: _Evaluator.subscript,
    ast.List: _Evaluator.list_,
    ast.Tuple: _Evaluator.tuple_,
    ast.Set: _Evaluator.set_,
    ast.Dict: _Evaluator.dict_,
    ast.JoinedStr: _Evaluator.joinedstr,
    ast.FormattedValue: _Evaluator.formattedvalue,
    ast.Call: _Evaluator.call,
}


def _guarded(run: Callable[[], Any]) -> Any:
    """Run the interpreter, turning Python's runtime errors into one-line EvaluationErrors."""
    try:
        return run()
    except VivariumError:
        raise
    except KeyError as exc:
        raise EvaluationError(f"key {_short(exc.args[0] if exc.args else None)} not found") from exc
    except ZeroDivisionError as exc:
        message = str(exc) if "power" in str(exc) else "division by zero"
        raise EvaluationError(message) from exc
    except (ArithmeticError, LookupError, TypeError, ValueError) as exc:
        raise EvaluationError(squash(exc, 200) or type(exc).__name__) from exc
    except RecursionError as exc:
        raise EvaluationError("value is nested too deeply") from exc
    except MemoryError as exc:
        raise EvaluationError("out of memory") from exc


# ---------------------------------------------------------------------------------------------
# Public API.


def check(
    source: str, mode: Literal["eval", "exec"] = "eval", *, limits: Limits | None = None
) -> None:
    """Raise UnsafeExpression if ``source`` uses anything not allowed; run nothing."""
    _prepare(source, mode, limits)


def names_read(source: str, mode: Literal["eval", "exec"] = "eval") -> set[str]:
    """The names ``source`` reads from its context (``x`` in ``y = x + 1`` and in ``x += 1``),
    functions called and ``context`` aside; run nothing. Check the text first (``check``):
    loaders compare these with the names the context will hold, so an unknown name is refused
    when the text is loaded, not at every evaluation."""
    tree, _limits = _prepare(source, mode, None)
    called = {
        id(node.func) for node in ast.walk(tree) if type(node) is ast.Call
    }  # ``len`` in ``len(x)`` is a function, not a name read
    names = set()
    for node in ast.walk(tree):
        if type(node) is ast.Name and type(node.ctx) is ast.Load and id(node) not in called:
            names.add(node.id)
        elif type(node) is ast.AugAssign and type(node.target) is ast.Name:
            names.add(node.target.id)
    names.discard(SCOPE_NAME)
    return names


def evaluate(expression: str, context: Mapping[str, Any], *, limits: Limits | None = None) -> Any:
    """Evaluate one expression over the names in ``context``."""
    tree, limits = _prepare(expression, "eval", limits)
    evaluator = _Evaluator(context, limits)
    return _guarded(lambda: evaluator.eval(tree.body))


def execute(
    code: str, context: Mapping[str, Any], *, limits: Limits | None = None
) -> dict[str, Any]:
    """Run assignments and if/elif/else; return only the names assigned. ``context`` is untouched."""
    tree, limits = _prepare(code, "exec", limits)
    evaluator = _Evaluator(context, limits)
    _guarded(lambda: evaluator.run(tree.body))
    return copy.deepcopy(evaluator.names)
