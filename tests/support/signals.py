"""Ctrl-C in the tests that send it, however the test process itself was started.

A process started with SIGINT ignored (a background job ``cmd &`` in a script, ``nohup``,
some CI runners) keeps it ignored, and so do the processes it starts: Python installs its
``KeyboardInterrupt`` handler only where SIGINT was at its default. A test that sends SIGINT
then sends it to nobody, and fails. Each such test sets the handler it needs: in its own
process with ``ctrl_c_raises`` (the ``ctrl_c`` fixture), in a child with ``ctrl_c_in_child``.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

__all__ = ["ctrl_c_in_child", "ctrl_c_raises", "ignoring_ctrl_c"]


@contextlib.contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """Within the block SIGINT raises ``KeyboardInterrupt``, as in a terminal; then as before."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def ctrl_c_in_child() -> None:
    """A ``preexec_fn``: the child starts with SIGINT at its default, as from a terminal.

    Set before the child's interpreter starts, so Python installs its own handler there.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ignoring_ctrl_c() -> None:
    """A ``preexec_fn``: the child starts with SIGINT ignored, as a background job does."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
