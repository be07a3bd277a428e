"""Disk and files: a read-only trace path, a full disk and two runs aimed at one trace file
each give one clear line, before the run starts or at the failing step, and whatever was
committed before stays intact and readable."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.reliability.helpers import assert_same_trace, rows
from vivarium import Experiment, Run
from vivarium.cli import main
from vivarium.errors import TraceError
from vivarium.trace.db import TraceDb
from vivarium.trace.validate import validate_trace

BIG = Experiment(name="big", agents=100, steps=300, seed=1)  # ~2 MB of trace


def one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def _sh(*cmd: str) -> bool:
    if shutil.which(cmd[0]) is None:
        return False
    return subprocess.run(cmd, capture_output=True).returncode == 0


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[str]:
    """Make ``folder`` read-only even for root; yields how. Skips if nothing works here."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield "chmod 555"
        finally:
            folder.chmod(0o755)
        return
    if _sh("mount", "--bind", str(folder), str(folder)):
        if _sh("mount", "-o", "remount,bind,ro", str(folder)):
            try:
                yield "read-only bind mount"
            finally:
                _sh("umount", str(folder))
            return
        _sh("umount", str(folder))
    if _sh("chattr", "+i", str(folder)):
        try:
            yield "chattr +i"
        finally:
            _sh("chattr", "-i", str(folder))
        return
    pytest.skip("root here can neither mount nor chattr: no way to make a folder read-only")


@contextlib.contextmanager
def small_disk(folder: Path, size: str) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not _sh(
        "mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)
    ):
        pytest.skip("cannot mount a small tmpfs here (not root, or no mount permission)")
    try:
        yield
    finally:
        _sh("umount", str(folder))


def interrupted(exp: Experiment, db: Path, steps: int) -> None:
    trace = TraceDb(db)
    exp.build(trace).run(steps, finish=False)
    trace.close()


# -- read-only ---------------------------------------------------------------------------------
def test_a_read_only_trace_path_is_one_line_before_the_run_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    exp = Experiment(name="ro", agents=3, steps=20, seed=2, checkpoint_every=5)
    existing, partial = folder / "existing.sqlite", folder / "partial.sqlite"
    exp.run(existing, progress=False)
    interrupted(exp, partial, 7)
    before = {p: p.read_bytes() for p in (existing, partial)}
    built: list[int] = []
    with read_only(folder) as how:
        for target in (folder / "new.sqlite", existing, folder / "sub" / "new.sqlite"):
            with pytest.raises(TraceError) as err:
                exp.run(target, progress=False, on_step=lambda t, r: built.append(t))
            line = one_line(str(err.value))
            assert str(target.parent) in line, line
        assert not built  # refused before any step ran
        out = run_cli("phase1", "--db", str(folder / "cli.sqlite"))
        assert out.returncode == 2
        assert "read-only" in one_line(out.stderr) or "Read-only" in out.stderr
        assert main(["resume", str(partial), "--no-progress"]) == 2
        one_line(capsys.readouterr().err)
        assert main(["validate", str(partial)]) == 3  # still readable
        assert Run.open(existing).metadata["status"] == "complete"
    assert {p: p.read_bytes() for p in before} == before  # nothing changed
    assert sorted(p.name for p in folder.iterdir()) == ["existing.sqlite", "partial.sqlite"]
    print(f"\nread-only folder made with: {how}")


def test_a_trace_path_under_a_file_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(TraceError, match="cannot create folder") as err:
        Experiment(agents=2, steps=3).run(blocker / "run.sqlite", progress=False)
    one_line(str(err.value))
    assert blocker.read_text() == "a file where a folder should be"


# -- a full disk -------------------------------------------------------------------------------
def check_full(db: Path, error: str, reference: Path) -> int:
    """The error names the failing step; every step before it is committed and intact."""
    line = one_line(error)
    assert "database or disk is full" in line and "everything committed before is kept" in line
    run = Run.open(db)
    done = run.metadata["steps_done"]
    assert f"at step {done}" in line, line
    assert 0 < done < BIG.config.steps
    assert validate_trace(db).status == "incomplete"
    assert len(run.actions) == done * BIG.config.agent_count
    assert rows(db, "steps") == rows(reference, "steps")[:done]
    return done


def test_a_full_disk_stops_at_the_failing_step_and_keeps_the_rest(tmp_path: Path) -> None:
    reference = tmp_path / "reference.sqlite"
    BIG.run(reference, progress=False)
    disk = tmp_path / "disk"
    with small_disk(disk, "256k"):
        db = disk / "big.sqlite"
        with pytest.raises(TraceError) as err:
            BIG.run(db, progress=False)
        done = check_full(db, str(err.value), reference)
        # Free some space: the run resumes into exactly the uninterrupted trace.
        assert _sh("mount", "-o", "remount,size=16m", str(disk))
        assert main(["resume", str(db), "--no-progress"]) == 0
        assert_same_trace(reference, db)
    print(f"\ntmpfs of 256 KiB full at step {done}; resumed after remounting it larger")


def test_a_page_limit_full_trace_stops_at_the_failing_step(tmp_path: Path) -> None:
    """The same with SQLite's page cap (``TraceDb(max_pages=)``): needs no mount."""
    reference = tmp_path / "reference.sqlite"
    BIG.run(reference, progress=False)
    db = tmp_path / "capped.sqlite"
    trace = TraceDb(db, max_pages=60)
    with pytest.raises(TraceError) as err:
        BIG.build(trace).run(BIG.config.steps)
    with pytest.raises(TraceError):
        trace.close()  # closing says it again; the file is closed all the same
    done = check_full(db, str(err.value), reference)
    assert main(["resume", str(db), "--no-progress"]) == 0  # no cap now
    assert_same_trace(reference, db)
    print(f"\npage-capped trace full at step {done}")


# -- two writers -------------------------------------------------------------------------------
HELD = {
    "name": "held",
    "policy": "cognitive",
    "agents": 3,
    "steps": 12,
    "seed": 6,
    "scheduling": "simultaneous",
    "llm": {"mock": True},
}


def test_a_second_run_on_the_same_trace_is_refused_and_nothing_is_corrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, release = tmp_path / "shared.sqlite", tmp_path / "release"
    spec = json.dumps({"config": HELD, "db": str(db), "hold_at": 4, "release": str(release)})
    first = subprocess.Popen(  # runs 5 steps, then waits for the release file
        [sys.executable, "-m", "tests.reliability.child", spec],
        cwd=ROOT,
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the first run has committed a few steps
            with contextlib.suppress(TraceError):
                if Run.open(db).metadata["steps_done"] >= 3:
                    break
            assert first.poll() is None, first.communicate()
            time.sleep(0.02)
        refusals = []
        out = run_cli("phase1", "--db", str(db))  # another process
        assert out.returncode == 2
        refusals.append(one_line(out.stderr))
        with pytest.raises(TraceError) as err:  # Python
            Experiment(agents=2, steps=5).run(db, progress=False)
        refusals.append(one_line(str(err.value)))
        with pytest.raises(TraceError) as err:
            TraceDb.for_resume(db)
        refusals.append(one_line(str(err.value)))
        for argv in (["phase1", "--db", str(db)], ["resume", str(db), "--no-progress"]):
            assert main(argv) == 2  # the command line
            refusals.append(one_line(capsys.readouterr().err))
        for line in refusals:
            assert "is being written by another run" in line, line
        assert validate_trace(db).status == "running"  # reading while it runs is fine
        assert first.poll() is None
    finally:
        release.touch()
        _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    assert validate_trace(db).status == "ok"
    clean = tmp_path / "clean.sqlite"
    Experiment(**HELD).run(clean, progress=False)
    assert_same_trace(clean, db)  # the refused writers changed nothing
