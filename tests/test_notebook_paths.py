"""The notebooks run from any working folder, and whatever an earlier Vivarium left in ``runs/``.

A comment added to a world changes the code every trace records; notebook 01 then failed until
``notebooks/runs`` was deleted (the default path wrote beside the old trace with a warning, the
named one refused). And 02, 03 and 06 named ``../data``: from another folder they found nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from vivarium import Experiment, paper
from vivarium.errors import ConfigError
from vivarium.experiment.identity import CODE_META_KEY

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _sources(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_notebook_names_the_project_from_its_own_folder(notebook: Path) -> None:
    code = _sources(notebook)
    assert '"../' not in code and "'../" not in code, "name the project's files by project_folder()"


def test_the_project_folder_is_found_from_wherever_one_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "study"
    (project / "data" / "experiments").mkdir(parents=True)
    (project / "notebooks" / "deep").mkdir(parents=True)
    for start, expected in [(project, "."), (project / "notebooks" / "deep", "../..")]:
        monkeypatch.chdir(start)
        assert paper.project_folder() == Path(expected)
    monkeypatch.chdir(tmp_path)  # outside it: the checkout vivarium runs from
    assert (paper.project_folder() / "data" / "experiments").resolve() == (
        ROOT / "data" / "experiments"
    )
    monkeypatch.setattr(paper, "__file__", str(tmp_path / "site-packages" / "vivarium" / "p.py"))
    with pytest.raises(ConfigError, match="no project folder") as info:
        paper.project_folder()
    assert "\n" not in str(info.value)


def test_notebook_01_passes_over_traces_an_earlier_vivarium_left(tmp_path: Path) -> None:
    folder = tmp_path / "notebooks"
    (folder / "runs").mkdir(parents=True)
    for name in ("01_quickstart.ipynb", "sanitize.cfg"):
        shutil.copy(ROOT / "notebooks" / name, folder / name)
    exp = Experiment(
        name="quickstart", world="channel", policy="random", agents=5, steps=100, seed=42
    )
    for file in ("quickstart.sqlite", "quickstart_again.sqlite"):  # the notebook's own run...
        exp.run(folder / "runs" / file, progress=False)
        con = sqlite3.connect(folder / "runs" / file)
        with con:  # ...made by other code
            con.execute("UPDATE meta SET value = '0.0.9+0123' WHERE key = ?", (CODE_META_KEY,))
        con.close()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
         "--nbval-sanitize-with", str(folder / "sanitize.cfg"), str(folder / "01_quickstart.ipynb"),
         "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "inner")],
        cwd=tmp_path, env={**os.environ, "VIVARIUM_PROGRESS": "0"}, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    assert sorted(p.name for p in (folder / "runs").glob("*.sqlite")) == [
        "quickstart.sqlite",
        "quickstart_again.sqlite",
    ]  # replaced, nothing written beside


def test_make_clean_removes_the_runs_the_notebooks_left() -> None:
    """``make clean`` deletes ``notebooks/runs`` too: traces there outlive code changes."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(
        ["make", "-n", "clean"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    removed = [
        w for line in out.stdout.splitlines() if line.startswith("rm ") for w in line.split()
    ]
    assert "notebooks/runs" in removed and "runs" in removed, out.stdout
