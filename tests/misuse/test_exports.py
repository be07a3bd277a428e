"""Misuse: exporting frames where something else already is."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from vivarium import Experiment, TraceError


def test_two_seeds_exported_to_one_folder_keep_the_first(tmp_path: Path) -> None:
    """A loop over seeds with one export folder: the second export is refused, not mixed in."""
    out = tmp_path / "frames"
    runs = [
        Experiment(name="loop", agents=2, steps=4, seed=s).run(tmp_path / f"s{s}.sqlite")
        for s in (1, 2)
    ]
    runs[0].to_parquet(out)
    with pytest.raises(TraceError) as err:
        runs[1].to_parquet(out)
    assert "\n" not in str(err.value)
    kept = pd.read_parquet(out / "agents.parquet")
    assert kept["seed"].tolist() == runs[0].agents["seed"].tolist()


def test_export_to_a_file_path_is_one_line(tmp_path: Path) -> None:
    run = Experiment(agents=2, steps=2).run(tmp_path / "r.sqlite")
    target = tmp_path / "frames.parquet"
    target.write_bytes(b"x")
    with pytest.raises(TraceError, match="is a file; give a folder"):
        run.to_parquet(target)
    assert target.read_bytes() == b"x"
