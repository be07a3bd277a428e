"""Ctrl-C and SIGTERM stop a run with its trace marked ``interrupted``, never left ``running``.

Python turns SIGINT into ``KeyboardInterrupt`` wherever the main thread happens to be, and
SIGTERM kills the process outright. The engine records how a run ended when the exception
passes through it (``WorldEngine._finishing``), so two things could leave a trace ``running``:

- SIGTERM: the process dies before anything is recorded (exit 143, no message).
- A second signal while the first is being handled: ``timeout -s INT`` (and a terminal's
  Ctrl-C pressed twice) sends SIGINT to the process and then to its whole process group, so
  one process can get it twice. The second ``KeyboardInterrupt`` lands in the middle of
  recording the first (inside ``finish_run``, or while the trace is closed), and the status
  is never written.

``interrupt_signals`` (around ``vvm``, ``Experiment.run`` and ``Run.resume``) makes SIGTERM
act as SIGINT does, and a signal after the first one that stops the run is noted, not raised:
the run stops once, and records that it did (a third one is raised all the same). ``interrupts_deferred`` (around recording the run's
start and end and closing its trace) holds a signal until that block is done, so the block
is never cut in the middle; it works with Python's own SIGINT handler too (the engine used
directly). Both do nothing outside the main thread, where Python delivers no signal.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["Interrupted", "interrupt_signals", "interrupts_deferred"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal (SIGINT or SIGTERM); a ``KeyboardInterrupt`` to callers.

    Attributes:
        signum: The signal's number (``128 + signum`` is the shell's exit code for it).
    """

    def __init__(self, signum: int) -> None:
        """Name the signal that stopped the run."""
        super().__init__()
        self.signum = signum

    def __str__(self) -> str:
        """Empty for SIGINT (as ``KeyboardInterrupt`` is), else the signal's name."""
        return "" if self.signum == signal.SIGINT else self.name

    @property
    def name(self) -> str:
        """``SIGINT`` or ``SIGTERM``."""
        return signal.Signals(self.signum).name


class _State:
    """What the handler knows (the main thread's alone: signals are delivered there)."""

    scopes = 0  # interrupt_signals blocks entered (our handler is installed while > 0)
    deferring = 0  # interrupts_deferred blocks entered
    raised = False  # a signal has stopped the run already: later ones are noted only
    noted = 0  # signals noted since then
    pending: int | None = None  # a signal held by interrupts_deferred


def _handler(signum: int, frame: Any) -> None:
    """Raise ``Interrupted`` once; hold a signal inside a deferred block; note any later one.

    A third signal is raised whatever is going on: someone insisting on stopping a process
    whose end hangs gets it back, at the cost of the record being cut.
    """
    if _State.raised:
        _State.noted += 1
        if _State.noted >= 2:
            raise Interrupted(signum)
        return
    if _State.deferring:
        _State.pending = _State.pending or signum
        return
    _State.raised = True
    raise Interrupted(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interrupt_signals() -> Iterator[None]:
    """SIGINT and SIGTERM stop the block once, as ``Interrupted``; the handlers are restored.

    Nested blocks share the outer one's handlers. Outside the main thread (a panel's run in
    a worker thread) nothing changes.
    """
    if not _main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    if _State.scopes == 0:
        try:
            for sig in _SIGNALS:
                previous[sig] = signal.signal(sig, _handler)
        except (ValueError, OSError):  # an embedded interpreter that forbids it
            for sig, old in previous.items():
                signal.signal(sig, old)
            yield
            return
        _State.raised, _State.pending, _State.noted = False, None, 0
    _State.scopes += 1
    try:
        yield
        if _State.scopes == 1 and _State.pending is not None and not _State.raised:
            signum, _State.pending = _State.pending, None
            _State.raised = True
            raise Interrupted(signum)
    finally:
        _State.scopes -= 1
        if _State.scopes == 0:
            for sig, old in previous.items():
                signal.signal(sig, old)
            _State.raised, _State.pending, _State.noted = False, None, 0


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT (and SIGTERM inside ``interrupt_signals``) until the block is done.

    A signal that came during the block is raised when it ends without an error of its own
    (an error is already stopping the run). With Python's own SIGINT handler in force (the
    engine used directly), the block installs one that holds the signal, and restores it.
    """
    if not _main_thread():
        yield
        return
    installed = None
    if _State.scopes == 0:
        try:
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                installed = signal.signal(signal.SIGINT, _handler)
        except (ValueError, OSError):
            installed = None
    _State.deferring += 1
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        _State.deferring -= 1
        signum = _State.pending if _State.deferring == 0 else None
        if installed is not None:
            signal.signal(signal.SIGINT, installed)
            _State.pending = None  # outside a scope nothing else would raise it
        if signum is not None and not failed and not _State.raised:
            _State.pending = None
            if _State.scopes:
                _State.raised = True
            raise Interrupted(signum)
