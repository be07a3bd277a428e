"""The bounds of one sandboxed evaluation, and the two errors raised when text or work crosses them.

``UnsafeExpression`` means the text itself is refused (a construct outside the allowed language,
or text too large to check); it is a ``ConfigError`` because the text comes from a config or an
agent and nothing ran. ``EvaluationError`` means allowed text failed while running (an unknown
name, a division by zero, a value or a step count over its limit).
"""

from __future__ import annotations

from dataclasses import dataclass

from vivarium.errors import ConfigError, VivariumError

__all__ = ["DEFAULT_LIMITS", "EvaluationError", "Limits", "UnsafeExpression"]


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

    Attributes:
        max_source_chars: Longest text accepted.
        max_nodes: Most syntax-tree nodes in one text.
        max_depth: Deepest nesting of the tree and of any computed value.
        max_steps: Most interpreter steps (work) in one evaluation.
        max_collection_len: Most items in one list, tuple, dict or set.
        max_value_size: Largest total size of one computed value (see above).
        max_str_len: Longest string literal or computed string.
        max_int_bits: Widest integer literal or computed integer.
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
