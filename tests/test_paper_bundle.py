"""The paper's figures, handed over: bundled, verified offline, and drawn again the same.

``make test`` bundles the runs the paper's figures are made from (``vivarium.paper``: random
agents, the ecology replayed from SmolLM2's cassette over its seeds, the channel replayed
from SmolLM2's), runs ``vvm verify`` on the bundle as a reviewer would, and draws figures again
from the re-run traces: the same bytes as from the bundled ones.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vivarium.analysis import plots
from vivarium.analysis.style import save_figure
from vivarium.experiment.bundle import make_bundle
from vivarium.facade import Run
from vivarium.paper import ECOLOGY_SEEDS, _runs

ROOT = Path(__file__).resolve().parents[1]


def test_the_papers_runs_verify_and_their_figures_come_out_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the ecology's agent folders are the project's, as for make figures
    work = tmp_path / "work"
    _runs(ROOT / "data", work)
    archive = tmp_path / "paper.zip"
    assert make_bundle([work], archive) == []
    rerun = tmp_path / "rerun"
    done = subprocess.run(
        [sys.executable, "-m", "vivarium.cli", "verify", str(archive), "--no-progress",
         "--keep", str(rerun)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    runs = 2 + len(ECOLOGY_SEEDS)  # the baseline, the ecology's seeds, the channel
    assert done.stdout.startswith("OK:") and f"{runs} run(s) re-run" in done.stdout
    for name, draw in (
        ("llm", lambda run: plots.token_use(run)),
        ("baseline", lambda run: plots.behaviour_timeline(run, width="double")),
    ):
        made = [
            save_figure(draw(Run.open(trace)), tmp_path / side / name, formats=["png"])[0]
            for side, trace in (
                ("bundled", work / f"{name}.sqlite"),
                ("again", rerun / f"{name}.sqlite"),
            )
        ]
        assert made[0].read_bytes() == made[1].read_bytes(), name
