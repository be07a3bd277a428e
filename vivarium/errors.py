"""Errors that name what the user should change. Each renders as one line."""

from __future__ import annotations

import re

# Line breaks (``str.splitlines`` splits on all of these) and other control characters.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with line breaks and control characters escaped (``\\n``), so it is one line
    even when it quotes a user's key, value or file name."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def squash(text: object, limit: int = 300) -> str:
    """``text`` with runs of whitespace (line breaks too) made one space, cut to ``limit``
    characters with ``...``: a server's or parser's message fit for a one-line record."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class VivariumError(Exception):
    """Base class: a problem the user can fix, reported as one clear line."""

    def __str__(self) -> str:
        return one_line(super().__str__())


class ConfigError(VivariumError, ValueError):
    """A config, flag or argument is invalid."""


class TraceError(VivariumError):
    """A trace file is missing, foreign, newer than this version, or damaged."""


class UnknownNameError(ConfigError):
    """A world, policy or action name is not registered."""


class RunInterrupted(VivariumError):
    """A run stopped before finishing because its infrastructure failed (the LLM server is down,
    refuses the key, does not know the model, ...). Every step before it is in the trace, the
    run's status is ``interrupted``, and ``Run.open(path).resume()`` / ``vvm resume PATH``
    continues it once the cause is fixed. ``step`` is the step that was not committed."""

    def __init__(
        self,
        message: str,
        *,
        step: int | None = None,
        reason: str | None = None,
        run_id: str | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.step = step
        self.reason = reason if reason is not None else message
        self.run_id = run_id
        self.path = path


class RunHealthWarning(UserWarning):
    """A run finished but is not a clean result (see ``Run.health``): every LLM call failed,
    decisions fell back, or it stopped early. Emitted once by ``Experiment.run()``."""


class TracePathWarning(UserWarning):
    """A run's trace went somewhere else than its default path, because the trace there holds
    another run (another config or seed) that is kept. The message names both files."""


class SweepFailed(VivariumError):
    """Every run of a sweep failed: nothing in it is a result. The message names the first
    error; ``sweep`` is the ``Sweep`` (its ``index`` has every run's error) and a re-run of the
    same sweep retries the failed runs."""

    def __init__(self, message: str, sweep: object = None) -> None:
        super().__init__(message)
        self.sweep = sweep


class SweepWarning(UserWarning):
    """Some runs of a sweep failed: the merged frames hold only the complete runs. The message
    gives the count and the first error; ``Sweep.failed`` lists them all."""
