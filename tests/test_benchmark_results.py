"""Every section of ``benchmarks/RESULTS.md`` names the commit its figures were measured at.

A figure is worth what the code that made it is known to be: the scripts write
``git rev-parse --short HEAD`` (``+dirty`` when tracked files had changed) into their section,
and the sections measured before that was so say ``before commit tracking``.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
COMMIT_LINE = re.compile(
    r"Commit: (`[0-9a-f]{7,40}(\+dirty)?`|before commit tracking \((HEAD then `[0-9a-f]{7}`; )?"
    r"recorded in `[0-9a-f]{7}`\))\."
)


@pytest.fixture
def results() -> ModuleType:
    """``benchmarks/results.py``, loaded from its file (the scripts import it as ``results``)."""
    spec = importlib.util.spec_from_file_location(
        "bench_results", ROOT / "benchmarks" / "results.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def test_every_section_names_its_commit() -> None:
    text = RESULTS.read_text(encoding="utf-8")
    names = re.findall(r"<!-- (\w+): begin -->", text)
    assert len(names) >= 8
    for name in names:
        section = text.split(f"<!-- {name}: begin -->")[1].split(f"<!-- {name}: end -->")[0]
        lines = [line for line in section.splitlines() if line.startswith("Commit:")]
        assert len(lines) == 1 and COMMIT_LINE.fullmatch(lines[0]), (name, lines)


def test_the_commit_is_head_and_dirty_only_when_tracked_code_changed(
    results: ModuleType, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "benchmarks" / "RESULTS.md").write_text("# Benchmark results\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    full = _git(repo, "log", "-1", "--format=%H")

    clean = results.commit(repo)
    assert 7 <= len(clean) < 40 and full.startswith(clean)
    (repo / "notes.txt").write_text("untracked\n")  # not code of the commit: still clean
    (repo / "benchmarks" / "RESULTS.md").write_text("# Benchmark results\n\nnew section\n")
    assert results.commit(repo) == clean  # the results being written are not a change
    (repo / "code.py").write_text("x = 2\n")
    assert results.commit(repo) == clean + "+dirty"
    (tmp_path / "unpacked").mkdir()  # a release unpacked, no git
    assert results.commit(tmp_path / "unpacked") == "unknown"


def test_a_written_section_names_the_commit_before_its_machine_line(
    results: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path / "RESULTS.md")
    monkeypatch.setattr(results, "commit", lambda: "abc1234+dirty")
    results.write_section("demo", "## Demo\n\nMachine: here.\n\n| a |\n|---|\n| 1 |\n")
    results.write_section("bare", "64 agents.\n")
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "## Demo\n\nCommit: `abc1234+dirty`.\nMachine: here.\n" in text
    assert (
        "<!-- bare: begin -->\nCommit: `abc1234+dirty`.\n\n64 agents.\n<!-- bare: end -->" in text
    )
    assert all(COMMIT_LINE.fullmatch(line) for line in re.findall(r"Commit: .*", text))
