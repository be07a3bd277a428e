"""The signal tests pass when the suite is started with Ctrl-C ignored.

A background job (``make test &`` in a script), ``nohup`` and some CI runners start the suite
with SIGINT ignored, and every process it starts inherits that. Three signal tests failed
there: they sent SIGINT to a process that ignored it. Each now sets the handler it needs
(``tests.support.signals``); this runs them again in a pytest started that way.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.support.signals import ignoring_ctrl_c

# In-process signals (the ``ctrl_c`` fixture), and a child that is sent Ctrl-C (``preexec_fn``).
SIGNAL_TESTS = [
    "tests/test_interrupt_signals.py",
    "tests/misuse/test_sweeps.py::test_ctrl_c_during_a_sweep_then_a_rerun_finishes_only_the_rest",
]


def _ignoring(*args: str) -> subprocess.CompletedProcess[str]:
    """``python *args`` started with SIGINT ignored."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        preexec_fn=ignoring_ctrl_c,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_child_starts_ignoring_ctrl_c_as_a_background_job_does() -> None:
    # The condition itself: without it the test below would prove nothing.
    out = _ignoring("-c", "import signal; print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)")
    assert out.stdout.strip() == "True", out.stderr


def test_the_signal_tests_pass_in_a_suite_started_ignoring_ctrl_c(tmp_path: Path) -> None:
    out = _ignoring(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "inner"),
        *SIGNAL_TESTS,
    )  # fmt: skip
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr
    assert out.returncode == 0, out.stdout[-3000:]
    assert re.fullmatch(r"\d+ passed in .*", summary), summary  # none failed, none skipped
