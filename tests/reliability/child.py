"""Run an experiment in this process, to be killed or held at a chosen step.

``python -m tests.reliability.child '{"config": {...}, "db": "...", "kill_at": 7}'`` (from the
project root) SIGKILLs this process right after step 7 is handed to the trace writer, which may
still be committing when the process dies, as in a real crash. With ``"hold_at": 3`` and
``"release": PATH`` instead, the run waits after step 3 until PATH exists, then finishes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from vivarium import Experiment


def main(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    kill_at, hold_at = spec.get("kill_at"), spec.get("hold_at")

    def on_step(step: int, _record: object) -> None:
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == hold_at:
            release = Path(spec["release"])
            deadline = time.monotonic() + 120
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.01)

    Experiment(**spec["config"]).run(spec["db"], progress=False, on_step=on_step)
    if kill_at is not None:
        raise SystemExit("the run ended before it was killed")


if __name__ == "__main__":
    main(sys.argv[1:])
