"""The static check of sandboxed text: parse it, bound its tree, refuse what is not allowed.

Nothing here runs the text. ``check`` is what loaders call to refuse a config up front;
``prepare`` is what the interpreter calls first, and its parsed, checked trees are cached per
``(text, mode, limits)``, so a condition evaluated at every step is parsed once.
"""

from __future__ import annotations

import ast
import functools
import re
import threading
import warnings
from keyword import iskeyword
from typing import Any, Literal

from vivarium.errors import ConfigError, squash
from vivarium.sandbox.allowed import (
    BINARY_OPS,
    COMPARE_OPS,
    FUNCTIONS,
    KEYWORDS,
    METHOD_NAMES,
    SCOPE_METHODS,
    SCOPE_NAME,
    SCOPE_USES,
    UNARY_OPS,
)
from vivarium.sandbox.limits import DEFAULT_LIMITS, Limits, UnsafeExpression

__all__ = [
    "COMPREHENSIONS",
    "check",
    "compiled",
    "is_expression",
    "is_scope",
    "names_read",
    "prepare",
    "scope_key",
]

_MAX_FORMAT_FIELD = 100  # largest width / precision in an f-string format spec

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
        *BINARY_OPS,
        *UNARY_OPS,
        *COMPARE_OPS,
    }
)
_REFUSALS: dict[type, str] = {
    ast.Lambda: "lambda is not allowed",
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
# Comprehensions run over a value's items (bounded like everything else); a generator expression
# is computed at once, as a list.
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
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
            f"{SCOPE_NAME!r} cannot be assigned (it is the view of the names in scope; "
            f"write x = value or {SCOPE_NAME}['x'] = value)"
        )


def is_scope(node: ast.AST) -> bool:
    """Whether ``node`` is the name ``context`` (the view of the names in scope)."""
    return type(node) is ast.Name and node.id == SCOPE_NAME


def scope_key(node: ast.Subscript) -> str | None:
    """``'x'`` for ``context['x']`` (a quoted key), None for any other subscript."""
    key = node.slice
    if is_scope(node.value) and type(key) is ast.Constant and type(key.value) is str:
        return key.value
    return None


def _validate_scope_key(node: ast.Subscript) -> None:
    """``context[k] = v`` binds the name ``k``: it must be a quoted name a plain ``=`` could bind."""
    key = scope_key(node)
    if key is None:
        raise UnsafeExpression(
            f"{SCOPE_NAME}[...] = value needs a quoted name as the key, "
            f"like {SCOPE_NAME}['x'] = value"
        )
    if not key.isidentifier() or iskeyword(key):
        raise UnsafeExpression(f"{SCOPE_NAME}[{short_key(key)}] = value: not a valid name")
    _refuse_target(key)


def short_key(key: str) -> str:
    """A key for an error message, clipped so the message stays one short line."""
    return repr(squash(key, 40))


def _validate(node: ast.AST, limits: Limits) -> None:
    """Raise UnsafeExpression for the first construct outside the whitelist."""
    kind = type(node)
    if kind is ast.Call:
        _validate_call(node, limits)
        return
    if kind is ast.Attribute:
        if node.attr in METHOD_NAMES:
            raise UnsafeExpression(f"method {node.attr!r} can only be called, not used as a value")
        raise UnsafeExpression(f"attribute {node.attr!r} is not allowed")
    if kind is ast.Name:
        if node.id == SCOPE_NAME:
            raise UnsafeExpression(SCOPE_USES)
        _refuse_name(node.id)
    elif kind is ast.Subscript and is_scope(node.value):
        if type(node.slice) is ast.Slice:
            raise UnsafeExpression(SCOPE_USES)
        _validate(node.slice, limits)
        return
    elif kind is ast.Compare:
        _validate_compare(node, limits)
        return
    elif kind in COMPREHENSIONS:
        _validate_comprehension(node, limits)
        return
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


def _validate_compare(node: ast.Compare, limits: Limits) -> None:
    """A comparison chain; ``'x' in context`` is allowed as its last comparison."""
    _validate(node.left, limits)
    last = len(node.comparators) - 1
    for i, (op, part) in enumerate(zip(node.ops, node.comparators, strict=True)):
        if is_scope(part) and i == last and type(op) in (ast.In, ast.NotIn):
            continue
        _validate(part, limits)


def _validate_comprehension(node: ast.AST, limits: Limits) -> None:
    """``[e for a in items if c]`` and the set, dict and generator forms: names as targets."""
    for generator in node.generators:
        if generator.is_async:
            raise UnsafeExpression("async comprehensions are not allowed")
        _validate_loop_target(generator.target)
        _validate(generator.iter, limits)
        for condition in generator.ifs:
            _validate(condition, limits)
    parts = [node.key, node.value] if type(node) is ast.DictComp else [node.elt]
    for part in parts:
        _validate(part, limits)


def _validate_loop_target(target: ast.AST) -> None:
    kind = type(target)
    if kind is ast.Name:
        _refuse_target(target.id)
    elif kind in (ast.Tuple, ast.List):
        for element in target.elts:
            _validate_loop_target(element)
    else:
        raise UnsafeExpression(
            f"comprehension target {_snippet(target)} is not allowed "
            "(use names, like [a for a in items] or [k for k, v in pairs])"
        )


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
        if func.id not in FUNCTIONS:
            raise UnsafeExpression(f"call of {func.id!r} is not allowed")
    elif type(func) is ast.Attribute:
        if func.attr.startswith("_"):
            raise UnsafeExpression(f"attribute {func.attr!r} is not allowed")
        if is_scope(func.value):
            if func.attr not in SCOPE_METHODS:
                raise UnsafeExpression(SCOPE_USES)
        elif func.attr not in METHOD_NAMES:
            raise UnsafeExpression(f"method {func.attr!r} is not allowed")
        else:
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
        if keyword.arg not in KEYWORDS:
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
        base: ast.AST = target
        innermost = target
        while type(base) is ast.Subscript:
            if type(base.slice) is ast.Slice:
                raise UnsafeExpression("slice assignment is not allowed")
            _validate(base.slice, limits)
            innermost, base = base, base.value
        if type(base) is not ast.Name:
            raise UnsafeExpression("item assignment is only allowed on a name, like d['k'] = v")
        if base.id == SCOPE_NAME:  # context['x'] = v is x = v; context['x'][k] = v is x[k] = v
            _validate_scope_key(innermost)
        else:
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
def compiled(source: str, mode: str, limits: Limits) -> ast.AST:
    """Parse and check once per (text, mode, limits); the evaluator never mutates the tree.

    Args:
        source: The text.
        mode: ``"eval"`` (one expression) or ``"exec"`` (statements).
        limits: The bounds the tree must fit.

    Returns:
        The checked tree (cached: treat it as read-only).

    Raises:
        UnsafeExpression: The text does not parse, or uses something not allowed.
    """
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


def prepare(source: Any, mode: str, limits: Limits | None) -> tuple[ast.AST, Limits]:
    """The checked tree of ``source`` and the limits in force (``DEFAULT_LIMITS`` for None).

    Raises:
        ConfigError: ``mode`` is neither ``"eval"`` nor ``"exec"``.
        UnsafeExpression: ``source`` is not a string, is too long, or is refused.
    """
    limits = DEFAULT_LIMITS if limits is None else limits
    if mode not in ("eval", "exec"):
        raise ConfigError(f"mode must be 'eval' or 'exec', not {mode!r}")
    if not isinstance(source, str):
        raise UnsafeExpression(f"expression must be a string, not {type(source).__name__}")
    if len(source) > limits.max_source_chars:
        raise UnsafeExpression(
            f"expression is too long: {len(source)} characters, limit {limits.max_source_chars}"
        )
    return compiled(source, mode, limits), limits


def check(
    source: str, mode: Literal["eval", "exec"] = "eval", *, limits: Limits | None = None
) -> None:
    """Check ``source`` against the allowed language and the limits; run nothing.

    Args:
        source: An expression (``mode="eval"``) or statements (``mode="exec"``).
        mode: Which of the two ``source`` must be.
        limits: The bounds; ``DEFAULT_LIMITS`` when None.

    Raises:
        UnsafeExpression: ``source`` uses something not allowed; the message names it.
    """
    prepare(source, mode, limits)


def names_read(source: str, mode: Literal["eval", "exec"] = "eval") -> set[str]:
    """The names ``source`` reads from its context; run nothing.

    ``x`` in ``y = x + 1``, in ``x += 1`` and in ``context['x']`` (each fails when ``x`` is not
    defined); not ``context.get('x', 0)`` nor ``'x' in context`` (they are how text reads a name
    that may be missing), not functions called, not a comprehension's own names. Loaders compare
    these with the names the context will hold, so an unknown name is refused when the text is
    loaded, not at every evaluation.

    Raises:
        UnsafeExpression: ``source`` is refused (check the text first with ``check``).
    """
    tree, _limits = prepare(source, mode, None)
    names: set[str] = set()
    _collect_reads(tree, frozenset(), names)
    names.discard(SCOPE_NAME)
    return names


def _collect_reads(node: ast.AST, bound: frozenset[str], out: set[str]) -> None:
    """Add to ``out`` the names ``node`` reads; ``bound``: comprehension names in scope."""
    kind = type(node)
    if kind is ast.Name:
        if type(node.ctx) is ast.Load and node.id not in bound:
            out.add(node.id)
        return
    if kind is ast.Call and type(node.func) is ast.Name:  # ``len`` in ``len(x)`` is no name read
        for child in [*node.args, *(k.value for k in node.keywords)]:
            _collect_reads(child, bound, out)
        return
    if kind in COMPREHENSIONS:
        inner = set(bound)
        for generator in node.generators:  # each iterable sees the targets before it
            _collect_reads(generator.iter, frozenset(inner), out)
            inner |= {n.id for n in ast.walk(generator.target) if type(n) is ast.Name}
            for condition in generator.ifs:
                _collect_reads(condition, frozenset(inner), out)
        for part in [node.key, node.value] if kind is ast.DictComp else [node.elt]:
            _collect_reads(part, frozenset(inner), out)
        return
    if kind is ast.Subscript and type(node.ctx) is ast.Load:
        key = scope_key(node)
        if key is not None:
            out.add(key)
    elif kind is ast.AugAssign:  # ``x += 1`` and ``context['x'] += 1`` read x
        target = node.target
        if type(target) is ast.Name:
            out.add(target.id)
        elif type(target) is ast.Subscript and scope_key(target) is not None:
            out.add(scope_key(target))  # type: ignore[arg-type]
    for child in ast.iter_child_nodes(node):
        _collect_reads(child, bound, out)
