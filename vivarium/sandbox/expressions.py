"""The interpreter of sandboxed expressions: walks a checked tree, node by node.

Text reaches this module only through ``vivarium.sandbox.checker.prepare``, so every node here is
one the checker allowed. Work is bounded by a step counter, and every value an operation could
blow up (``**``, ``*`` on sequences, ``<<``, ``join``, ``replace``) is size-checked before it is
computed. Statements (code blocks) extend this interpreter in ``vivarium.sandbox.statements``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from vivarium.errors import VivariumError, squash
from vivarium.sandbox.allowed import (
    BINARY_OPS,
    COLLECTIONS,
    COMPARE_OPS,
    FUNCTIONS,
    INTS,
    METHODS,
    PASS_THROUGH,
    SCALARS,
    SCOPE_NAME,
    SCOPE_USES,
    UNARY_OPS,
    VALUE_TYPES,
    ordered,
    safe_repr,
    safe_str,
    short,
)
from vivarium.sandbox.checker import is_scope, prepare
from vivarium.sandbox.limits import EvaluationError, Limits, UnsafeExpression

__all__ = ["Evaluator", "evaluate", "guarded"]


def _cost(value: Any) -> int:
    """Extra steps an operation producing or consuming ``value`` is charged."""
    kind = type(value)
    if kind is str:
        return len(value) >> 6
    return len(value) if kind in COLLECTIONS else 0


class Evaluator:
    """Interprets a checked expression tree; every value it makes is type- and size-checked.

    Nothing is ever mutated: values are built fresh, and statements (``StatementRunner``) copy
    what they change.

    Attributes:
        context: The caller's names (read-only).
        limits: The bounds of this evaluation.
        names: What statements assigned so far (read before ``context``).
        scopes: The names of the comprehensions being run, innermost last (read before
            ``names``; never part of ``names`` nor of the ``context`` view).
        steps: The work done so far, in steps.
    """

    __slots__ = ("context", "limits", "names", "scopes", "steps")

    def __init__(self, context: Mapping[str, Any], limits: Limits) -> None:
        """Start an evaluation over ``context`` within ``limits``."""
        self.context = context
        self.limits = limits
        self.names: dict[str, Any] = {}  # what execute assigned
        self.scopes: list[dict[str, Any]] = []
        self.steps = 0

    # -- bookkeeping ---------------------------------------------------------------------------

    def charge(self, steps: int) -> None:
        """Add ``steps`` to the work done; past ``max_steps`` the evaluation fails."""
        self.steps += steps
        if self.steps > self.limits.max_steps:
            raise EvaluationError(f"evaluation took more than {self.limits.max_steps} steps")

    def admit(self, value: Any, what: str) -> Any:
        """Let in an existing value (from the context) after checking its type."""
        if type(value) not in VALUE_TYPES:
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
        elif kind in COLLECTIONS:
            self.check_len(value)
            self.measure(value)
        elif kind not in VALUE_TYPES:
            raise EvaluationError(f"results of type {kind.__name__!r} are not allowed")
        return value

    def check_len(self, value: Any) -> None:
        """Refuse a collection longer than ``max_collection_len``."""
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
            if kind in COLLECTIONS:
                if depth > limits.max_depth:
                    raise EvaluationError(
                        f"value is nested more than {limits.max_depth} levels deep"
                    )
                parts = [*item, *item.values()] if kind is dict else item
                total += 1 + len(parts)
                stack.extend((part, depth + 1) for part in parts if type(part) not in SCALARS)
            elif kind is str:
                total += len(item) >> 6
            elif kind not in VALUE_TYPES:
                raise EvaluationError(f"values of type {kind.__name__!r} are not allowed")
            if total > limits.max_value_size:
                raise EvaluationError(
                    f"result too large: more than {limits.max_value_size} items in all"
                )
        self.charge(total)

    def eval(self, node: ast.AST) -> Any:
        """The value of one expression node (one step of work)."""
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise EvaluationError(f"evaluation took more than {self.limits.max_steps} steps")
        return _EVAL[type(node)](self, node)

    # -- expressions ---------------------------------------------------------------------------

    def constant(self, node: ast.Constant) -> Any:
        """A literal."""
        return node.value

    def name(self, node: ast.Name) -> Any:
        """A name: a comprehension's, one assigned so far, or one of the caller's."""
        key = node.id
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return self.variable(key)

    def variable(self, key: str) -> Any:
        """A name of the step: one assigned so far, else one of the caller's."""
        if key in self.names:
            return self.names[key]
        if key == SCOPE_NAME:  # the checker allows ``context`` only where the view handles it
            raise UnsafeExpression(SCOPE_USES)
        if key not in self.context:  # `in` first: a defaultdict must not grow
            raise EvaluationError(f"unknown name {key!r}")
        return self.admit(self.context[key], f"name {key!r}")

    # -- ``context``: a read-only view of the step's names (writes are in ``statements``) -------

    def has_name(self, key: Any) -> bool:
        """``key in context``: whether the step has a name ``key`` (assigned, or the caller's)."""
        if type(key) is not str or key == SCOPE_NAME:
            return False
        return key in self.names or key in self.context

    def scope_item(self, key: Any) -> Any:
        """``context[key]``: the name's value; a missing name fails as an unknown name."""
        if not self.has_name(key):
            raise EvaluationError(
                f"unknown name {short(key)} (use {SCOPE_NAME}.get({short(key)}, default) "
                "for a name that may be missing)"
            )
        return self.variable(key)

    def scope_keys(self) -> list[str]:
        """The step's names: the caller's in their order, then those assigned since."""
        self.charge(len(self.context) + len(self.names))
        merged = dict.fromkeys(k for k in self.context if type(k) is str and k != SCOPE_NAME)
        merged.update(dict.fromkeys(self.names))
        return list(merged)

    def scope_call(self, method: str, args: list, kwargs: dict) -> Any:
        """``context.get/keys/values/items``, as a dict's (``keys`` etc. give lists)."""
        if kwargs or len(args) > (2 if method == "get" else 0) or (method == "get" and not args):
            usage = "a name and an optional default" if method == "get" else "no arguments"
            raise EvaluationError(f"{SCOPE_NAME}.{method}() takes {usage}")
        if method == "get":
            key = args[0]
            return self.variable(key) if self.has_name(key) else (args[1:] or [None])[0]
        keys = self.scope_keys()
        if method == "keys":
            return self.checked(keys)
        if method == "values":
            return self.checked([self.variable(k) for k in keys])
        return self.checked([(k, self.variable(k)) for k in keys])

    def binop(self, node: ast.BinOp) -> Any:
        """``a + b`` and the other binary operators."""
        return self.arith(node.op, self.eval(node.left), self.eval(node.right))

    def arith(self, op: ast.operator, left: Any, right: Any) -> Any:
        """``left op right``, refused before it is computed when the result would be too large."""
        kind, limits = type(op), self.limits
        if kind is ast.Pow and type(left) in INTS and type(right) in INTS:
            # |a| ** b has at least (bits(a) - 1) * b + 1 bits: refuse before computing.
            if (
                abs(left) > 1
                and right > 0
                and (abs(left).bit_length() - 1) * right + 1 > limits.max_int_bits
            ):
                raise EvaluationError(
                    f"result too large: {short(left)}**{short(right)} has more than "
                    f"{limits.max_int_bits} bits"
                )
        elif kind is ast.LShift and type(left) in INTS and type(right) in INTS:
            if left and right > 0 and left.bit_length() + right > limits.max_int_bits:
                raise EvaluationError(
                    f"result too large: {short(left)} << {short(right)} has more than "
                    f"{limits.max_int_bits} bits"
                )
        elif kind is ast.Mult:
            self.check_repeat(left, right)
        elif kind is ast.Mod and type(left) is str:
            raise UnsafeExpression("string formatting with '%' is not allowed")
        return self.checked(BINARY_OPS[kind](left, right))

    def check_repeat(self, left: Any, right: Any) -> None:
        """Refuse ``seq * n`` when the result would be longer than the limits allow."""
        seq, count = (left, right) if type(right) in INTS else (right, left)
        if type(count) not in INTS or type(seq) not in (str, list, tuple) or count <= 0:
            return
        is_str = type(seq) is str
        limit = self.limits.max_str_len if is_str else self.limits.max_collection_len
        if len(seq) * count > limit:
            unit = "characters" if is_str else "items"
            raise EvaluationError(
                f"result too large: {short(left)} * {short(right)} has more than {limit} {unit}"
            )

    def unaryop(self, node: ast.UnaryOp) -> Any:
        """``-a``, ``+a``, ``not a``, ``~a``."""
        return self.checked(UNARY_OPS[type(node.op)](self.eval(node.operand)))

    def boolop(self, node: ast.BoolOp) -> Any:
        """``and`` / ``or``, short-circuiting as in Python."""
        is_and = type(node.op) is ast.And
        for part in node.values:
            value = self.eval(part)
            if bool(value) is not is_and:  # `and` stops at a falsy value, `or` at a truthy one
                return value
        return value

    def compare(self, node: ast.Compare) -> bool:
        """A comparison chain, ``a < b <= c``; ``'x' in context`` (last in its chain)."""
        left = self.eval(node.left)
        for op, part in zip(node.ops, node.comparators, strict=True):
            if is_scope(part):
                return self.has_name(left) is (type(op) is ast.In)
            right = self.eval(part)
            if type(op) in (ast.In, ast.NotIn):
                self.charge(_cost(right))
            if not COMPARE_OPS[type(op)](left, right):
                return False
            left = right
        return True

    def ifexp(self, node: ast.IfExp) -> Any:
        """``a if test else b``."""
        return self.eval(node.body if self.eval(node.test) else node.orelse)

    def subscript(self, node: ast.Subscript) -> Any:
        """``x[i]`` and ``x[a:b:c]``; ``context['x']``."""
        if is_scope(node.value):
            return self.scope_item(self.eval(node.slice))
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
        """A list display."""
        return self.checked([self.eval(element) for element in node.elts])

    def tuple_(self, node: ast.Tuple) -> tuple:
        """A tuple display."""
        return self.checked(tuple(self.eval(element) for element in node.elts))

    def set_(self, node: ast.Set) -> set:
        """A set display."""
        return self.checked({self.eval(element) for element in node.elts})

    def dict_(self, node: ast.Dict) -> dict:
        """A dict display."""
        pairs = zip(node.keys, node.values, strict=True)
        return self.checked({self.eval(key): self.eval(value) for key, value in pairs})

    def comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp) -> Any:
        """``[e for a in items if c]`` and its set and dict forms; a generator gives a list.

        The first iterable is read in the enclosing scope, the rest in the comprehension's own,
        whose names are gone when it ends, as in Python. Every item is one step, and the result is
        bounded like any value.
        """
        kind = type(node)
        out: Any = {} if kind is ast.DictComp else set() if kind is ast.SetComp else []
        first = self.items_of(self.eval(node.generators[0].iter))
        self.scopes.append({})
        try:
            self.generate(node, 0, first, out)
        finally:
            self.scopes.pop()
        return self.checked(out)

    def generate(self, node: Any, level: int, items: Any, out: Any) -> None:
        """Run generator ``level`` of a comprehension over ``items``, emitting into ``out``."""
        generator, scope = node.generators[level], self.scopes[-1]
        last = level + 1 == len(node.generators)
        for item in items:
            self.charge(1)
            self.bind(generator.target, self.admit(item, "item"), scope)
            if not all(self.eval(condition) for condition in generator.ifs):
                continue
            if not last:
                following = node.generators[level + 1].iter
                self.generate(node, level + 1, self.items_of(self.eval(following)), out)
            elif type(node) is ast.DictComp:
                key = self.eval(node.key)
                out[key] = self.eval(node.value)
            elif type(out) is set:
                out.add(self.eval(node.elt))
            else:
                out.append(self.eval(node.elt))
            if len(out) > self.limits.max_collection_len:
                self.check_len(out)

    def items_of(self, value: Any) -> Any:
        """What a comprehension iterates: a dict's keys, a set's items in its fixed order."""
        kind = type(value)
        if kind in (list, tuple, str):
            return value
        if kind is dict:
            return list(value)
        if kind is set:
            return ordered(value)
        raise EvaluationError(f"cannot iterate over a {kind.__name__!r}")

    def bind(self, target: ast.AST, value: Any, scope: dict[str, Any]) -> None:
        """Bind a comprehension target (a name, or a tuple of them) in ``scope``."""
        if type(target) is ast.Name:
            scope[target.id] = value
            return
        if type(value) not in (list, tuple):
            raise EvaluationError(f"cannot unpack a {type(value).__name__!r}")
        if len(value) != len(target.elts):
            raise EvaluationError(
                f"cannot unpack {len(value)} values into {len(target.elts)} targets"
            )
        for element, item in zip(target.elts, value, strict=True):
            self.bind(element, self.admit(item, "item"), scope)

    def joinedstr(self, node: ast.JoinedStr) -> str:
        """An f-string, bounded in length as it is built."""
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
        """One ``{value!conversion:spec}`` field of an f-string."""
        value = self.eval(node.value)
        if node.conversion == ord("r"):
            value = safe_repr(value)
        elif node.conversion == ord("a"):
            value = safe_repr(value).encode("ascii", "backslashreplace").decode("ascii")
        spec = "" if node.format_spec is None else "".join(p.value for p in node.format_spec.values)
        return format(value, spec) if spec else safe_str(value)

    def call(self, node: ast.Call) -> Any:
        """A call of an allowed function or method (see ``vivarium.sandbox.allowed``)."""
        func = node.func
        if type(func) is ast.Attribute and is_scope(func.value):
            args = [self.eval(arg) for arg in node.args]
            kwargs = {keyword.arg: self.eval(keyword.value) for keyword in node.keywords}
            return self.scope_call(func.attr, args, kwargs)
        if type(func) is ast.Name:
            name, receiver = func.id, None
            function = FUNCTIONS[name]
        else:
            name, receiver = func.attr, self.eval(func.value)
            function = METHODS.get(type(receiver), {}).get(name)
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
        return self.admit(result, "result") if name in PASS_THROUGH else self.checked(result)

    def check_text_growth(self, name: str, args: list) -> Any:
        """Bound the length of ``sep.join(items)`` / ``s.replace(old, new)`` before building it."""
        text, first = args[0], args[1]
        if name == "join":
            items = ordered(first) if type(first) is set else list(first)
            self.charge(len(items))
            size = sum(len(item) for item in items if type(item) is str)
            size += len(text) * max(len(items) - 1, 0)
            first = items
        elif len(args) > 2 and type(first) is str and type(args[2]) is str:
            old, new = first, args[2]
            hits = text.count(old) if old else len(text) + 1
            if len(args) > 3 and type(args[3]) in INTS and args[3] >= 0:
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


_EVAL: dict[type, Callable[[Evaluator, Any], Any]] = {
    ast.Constant: Evaluator.constant,
    ast.Name: Evaluator.name,
    ast.BinOp: Evaluator.binop,
    ast.UnaryOp: Evaluator.unaryop,
    ast.BoolOp: Evaluator.boolop,
    ast.Compare: Evaluator.compare,
    ast.IfExp: Evaluator.ifexp,
    ast.Subscript: Evaluator.subscript,
    ast.List: Evaluator.list_,
    ast.Tuple: Evaluator.tuple_,
    ast.Set: Evaluator.set_,
    ast.Dict: Evaluator.dict_,
    ast.ListComp: Evaluator.comprehension,
    ast.SetComp: Evaluator.comprehension,
    ast.DictComp: Evaluator.comprehension,
    ast.GeneratorExp: Evaluator.comprehension,
    ast.JoinedStr: Evaluator.joinedstr,
    ast.FormattedValue: Evaluator.formattedvalue,
    ast.Call: Evaluator.call,
}


def guarded(run: Callable[[], Any]) -> Any:
    """Run the interpreter, turning Python's runtime errors into one-line EvaluationErrors.

    Args:
        run: The evaluation to run.

    Returns:
        What ``run`` returns.

    Raises:
        EvaluationError: ``run`` failed (a ``VivariumError`` passes through as it is).
    """
    try:
        return run()
    except VivariumError:
        raise
    except KeyError as exc:
        raise EvaluationError(f"key {short(exc.args[0] if exc.args else None)} not found") from exc
    except ZeroDivisionError as exc:
        message = str(exc) if "power" in str(exc) else "division by zero"
        raise EvaluationError(message) from exc
    except (ArithmeticError, LookupError, TypeError, ValueError) as exc:
        raise EvaluationError(squash(exc, 200) or type(exc).__name__) from exc
    except RecursionError as exc:
        raise EvaluationError("value is nested too deeply") from exc
    except MemoryError as exc:
        raise EvaluationError("out of memory") from exc


def evaluate(expression: str, context: Mapping[str, Any], *, limits: Limits | None = None) -> Any:
    """Evaluate one expression over the names in ``context``.

    Args:
        expression: The text, e.g. ``balance > 10 and tick % 5 == 0``.
        context: The names the expression may read (never changed).
        limits: The bounds; ``DEFAULT_LIMITS`` when None.

    Returns:
        The value: JSON-like data, tuples or sets.

    Raises:
        UnsafeExpression: The text is not allowed (nothing ran).
        EvaluationError: It failed while running (unknown name, a limit, a type error).
    """
    tree, limits = prepare(expression, "eval", limits)
    evaluator = Evaluator(context, limits)
    return guarded(lambda: evaluator.eval(tree.body))
