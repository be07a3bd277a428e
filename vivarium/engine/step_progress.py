"""The decisions of the step under way, on the run's progress bar.

A run's bar counts steps; a step of 10,000 LLM agents takes seconds, and the bar would stand
still meanwhile. So once a step has run ``StepProgress.EVERY`` seconds, the bar's postfix says
how many of its decisions are in (``step 3: 4,512/10,000 decisions``), and again every
``EVERY`` seconds, until the step ends and the postfix is cleared. A quick step never touches
the bar.

The bar is only ever touched from the thread that drives the run: decisions made on the
background event loop are counted there (``Decider.decided``) and read from here, by the
caller's thread, while it waits for them (``run_async``'s ``tick``). A notebook's widget bar is
then never updated from another thread.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["StepProgress"]


class StepProgress:
    """Says a step's decisions so far on a tqdm-like bar (its ``set_postfix_str``).

    Args:
        bar: The run's bar; one without ``set_postfix_str`` is left alone.
        step: The step under way.
        total: Its decisions.
    """

    EVERY = 0.25
    """Seconds between two sayings (and before the first)."""

    def __init__(self, bar: Any, step: int, total: int) -> None:
        """Start timing the step (nothing is said yet)."""
        self._say = getattr(bar, "set_postfix_str", None)
        self.active = self._say is not None  # no bar to say on: the caller need not tell
        self.step, self.total = step, total
        self._next = time.monotonic() + self.EVERY
        self.said = False

    def __call__(self, done: int) -> None:
        """``done`` decisions are in: say so, if it is time to."""
        if self._say is None or (now := time.monotonic()) < self._next:
            return
        self._next = now + self.EVERY
        self.said = True
        self._try(f"step {self.step}: {done:,}/{self.total:,} decisions")

    def close(self) -> None:
        """The step is over: clear what was said (the bar goes on counting steps)."""
        if self.said and self._say is not None:
            self._try("", refresh=False)
            self.said = False

    def _try(self, text: str, **options: Any) -> None:
        """Say ``text``; a bar that fails to is left alone from then on (the run goes on)."""
        try:
            self._say(text, **options)  # type: ignore[misc]
        except Exception:  # noqa: BLE001 - a display's failure is no failure of the run
            self._say = None
