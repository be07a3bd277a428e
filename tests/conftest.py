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


@pytest.fixture(scope="session")
def ray_once() -> object:
    """One local Ray (2 CPUs) for the whole test process, started once and never restarted.

    Ray's driver is not safe to shut down and start again in one process: threads of the first
    session live on against freed structures and crash the process later, in whatever test is
    running then (ray-project/ray#31145; seen here as a segfault of pytest in an unrelated
    test). Every test that needs Ray shares this one, as does the README's sweep (whose backend
    finds it started); it ends with the process.
    """
    import logging

    ray = pytest.importorskip(
        "ray", reason="Ray is not installed (pip install 'vivarium-lab[scale]' or 'ray>=2.9')"
    )
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    return ray
