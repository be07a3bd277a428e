"""A sandbox for expressions and small code blocks written in configs and by agents.

Config text (workflow conditions, code steps, artifact methods) comes from agents and users, so it
is never given to Python's ``eval``/``exec``. It is parsed with ``ast.parse``, checked against a
small whitelist, and interpreted node by node. Work is bounded by a step counter, and every value
an operation could blow up is size-checked before it is computed.

The modules, each one concept:

- ``allowed``: the language, i.e. the value types, functions, methods and operators text may use;
- ``limits``: the bounds of one evaluation (``Limits``) and the two errors;
- ``checker``: the static check (``check``, ``names_read``), run before anything else;
- ``expressions``: the interpreter of expressions (``evaluate``);
- ``statements``: code blocks on the same interpreter (``execute``).

Text reads its names directly (``balance``) or through ``context``, a mapping view of the names in
scope as the agent ecology's code steps use it: ``context.get('x', 0)``, ``context['x']``,
``'x' in context``, ``keys()``/``values()``/``items()``, and ``context['x'] = v``, which is
``x = v`` (``execute`` returns it as the assigned name ``x``). Nothing else of it is open.

Example:
    >>> from vivarium import sandbox
    >>> sandbox.evaluate("balance > 10 and tick % 5 == 0", {"balance": 12, "tick": 10})
    True
    >>> sandbox.execute("streak = streak + 1 if ok else 0", {"streak": 2, "ok": True})
    {'streak': 3}
    >>> sandbox.execute("context['seen'] = context.get('seen', 0) + 1", {})
    {'seen': 1}
    >>> sandbox.evaluate("len({f['kind'] for f in fails[-3:]}) == 1", {"fails": [{"kind": "a"}]})
    True
"""

from __future__ import annotations

from vivarium.sandbox.allowed import SCOPE_NAME
from vivarium.sandbox.checker import check, is_expression, names_read
from vivarium.sandbox.expressions import evaluate
from vivarium.sandbox.limits import DEFAULT_LIMITS, EvaluationError, Limits, UnsafeExpression
from vivarium.sandbox.statements import execute

__all__ = [
    "DEFAULT_LIMITS",
    "SCOPE_NAME",
    "EvaluationError",
    "Limits",
    "UnsafeExpression",
    "check",
    "evaluate",
    "execute",
    "is_expression",
    "names_read",
]
