"""What the benchmark scripts share: the machine line and their section of RESULTS.md.

Each section names the commit its figures were measured at (``Commit:``), so a figure can be
traced to the code that made it and measured again on that code.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
ROOT = RESULTS.parent.parent


def commit(root: Path = ROOT) -> str:
    """``git rev-parse --short HEAD``, with ``+dirty`` when tracked files have changed.

    RESULTS.md itself does not count: a script run after another would otherwise always find
    the tree dirty. Outside a git checkout (an unpacked release): ``unknown``.
    """
    try:
        head = _git(root, "rev-parse", "--short", "HEAD")
        results = f":(exclude){RESULTS.relative_to(ROOT).as_posix()}"
        changed = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", results)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if changed else "")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()


def machine() -> str:
    try:
        date = subprocess.run(
            ["date", "-u", "+%Y-%m-%d %H:%M UTC"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    return (
        f"{date}; {usable} cores usable ({cores} online), "
        f"{platform.processor() or platform.machine()}; Python {platform.python_version()}; "
        f"{platform.platform()}; load average {os.getloadavg()[0]:.2f} at the time"
    )


def with_commit(body: str, measured_at: str) -> str:
    """``body`` with a ``Commit:`` line before its ``Machine:`` line (else after its heading)."""
    lines = body.rstrip().splitlines()
    line = f"Commit: `{measured_at}`."
    machine_at = [i for i, text in enumerate(lines) if text.startswith("Machine:")]
    if machine_at:
        lines.insert(machine_at[0], line)
    elif lines and lines[0].startswith("#"):
        lines[1:1] = ["", line]
    else:
        lines[0:0] = [line, ""]
    return "\n".join(lines)


def write_section(name: str, body: str) -> None:
    """Replace (or append) this script's section of RESULTS.md, between its markers.

    The section names the commit it was measured at (``commit()``, taken now: the scripts
    write their section when the measurements are done).
    """
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n\n"
    block = f"{begin}\n{with_commit(body, commit())}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    tmp = RESULTS.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(RESULTS)


def measure_in_child(script: str, side: str, agents: int, steps: int) -> dict[str, Any]:
    """Run ``script --child SIDE AGENTS STEPS`` in a fresh process; its last line is JSON."""
    out = subprocess.run(
        [sys.executable, script, "--child", side, str(agents), str(steps)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
    )
    if out.returncode != 0:
        raise SystemExit(f"{side} {agents}x{steps} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])
