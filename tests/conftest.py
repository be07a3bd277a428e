"""Shared fixtures: quiet progress bars and a per-test folder for traces."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.signals import ctrl_c_raises

ROOT = Path(__file__).resolve().parents[1]

os.environ.setdefault("VIVARIUM_PROGRESS", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "trace.sqlite"


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt`` in this test, though the suite was started ignoring it."""
    with ctrl_c_raises():
        yield


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``vvm`` in a fresh interpreter, as a user would."""
    full_env = {**os.environ, "VIVARIUM_PROGRESS": "0", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "vivarium.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or ROOT,
        timeout=600,
    )
