"""What the benchmark scripts share: the machine line and their section of RESULTS.md."""

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


def write_section(name: str, body: str) -> None:
    """Replace (or append) this script's section of RESULTS.md, between its markers."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
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
