"""Code blocks in the sandbox: assignments and if/elif/else, run by the expression interpreter.

Workflow code steps and artifact methods are statements. They run on the same interpreter as
expressions (``Evaluator``) with the same bounds; what they assign is collected apart from the
caller's context, and an item assignment (``d['k'] = v``) rebinds the name to a copy, so nothing
the code does reaches a value the caller holds. Writing through the ``context`` view is assigning
the name: ``context['x'] = v`` is ``x = v`` and ``context['x'][k] = v`` is ``x[k] = v``, so such a
write is one more assigned name in what ``execute`` returns.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Mapping
from typing import Any

from vivarium.sandbox.checker import is_scope, prepare
from vivarium.sandbox.expressions import Evaluator, guarded
from vivarium.sandbox.limits import EvaluationError, Limits

__all__ = ["StatementRunner", "execute"]


class StatementRunner(Evaluator):
    """The interpreter for statements; ``names`` collects what they assign."""

    __slots__ = ()

    def run(self, body: list[ast.stmt]) -> None:
        """Run statements in order: assignments, augmented ones, ``if``, bare expressions."""
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
        """Bind ``value`` to a name, an item path (``context['x']`` is ``x``) or a tuple."""
        kind = type(target)
        if kind is ast.Name:
            self.names[target.id] = value
        elif kind is ast.Subscript:
            name, path = self.item_path(target)
            if path:
                self.set_item(name, path, lambda container, key: value)
            else:
                self.names[name] = value
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
        """``x op= v``, for a name or an item path (the path is copied, as for ``=``)."""
        target, op, value = statement.target, statement.op, self.eval(statement.value)
        name, path = (target.id, []) if type(target) is ast.Name else self.item_path(target)
        if not path:
            self.names[name] = self.arith(op, self.variable(name), value)
        else:
            self.set_item(
                name,
                path,
                lambda container, key: self.arith(op, self.admit(container[key], "item"), value),
            )

    def item_path(self, target: ast.Subscript) -> tuple[str, list[ast.expr]]:
        """The name an item target changes and the keys under it: ``context['x'][k]`` is x[k]."""
        chain = []
        base: ast.AST = target
        while type(base) is ast.Subscript:
            chain.append(base.slice)
            base = base.value
        chain.reverse()
        if is_scope(base):  # the checker made the first key a quoted name
            return chain[0].value, chain[1:]  # type: ignore[attr-defined]
        return base.id, chain  # type: ignore[attr-defined]

    def set_item(
        self, name: str, path: list[ast.expr], new_value: Callable[[Any, Any], Any]
    ) -> None:
        """``name[k1]...[kn] = v``: rebind ``name`` to a copy, the containers on the path copied.

        The old value (which may be the context's, or shared with other names) is left as it was.
        """
        root = self.variable(name)
        keys = [self.eval(index) for index in path]
        self.names[name] = self.checked(self.replaced(root, keys, new_value))

    def replaced(self, container: Any, keys: list, new_value: Callable[[Any, Any], Any]) -> Any:
        """A copy of ``container`` with the item at the ``keys`` path replaced (a path copy)."""
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


def execute(
    code: str, context: Mapping[str, Any], *, limits: Limits | None = None
) -> dict[str, Any]:
    """Run assignments and if/elif/else over the names in ``context``.

    Args:
        code: The statements, e.g. ``streak = streak + 1 if ok else 0``.
        context: The names the code may read (never changed).
        limits: The bounds; ``DEFAULT_LIMITS`` when None.

    Returns:
        Only the names the code assigned, with their values (deep copies). A write through the
        view, ``context['x'] = v``, is the name ``x`` here, exactly as ``x = v`` would be.

    Raises:
        UnsafeExpression: The code is not allowed (nothing ran).
        EvaluationError: It failed while running.
    """
    tree, limits = prepare(code, "exec", limits)
    evaluator = StatementRunner(context, limits)
    guarded(lambda: evaluator.run(tree.body))
    return copy.deepcopy(evaluator.names)
