"""Two sweeps compared run by run: each run of one against the run of the other at its place.

The runs are paired by their place in the sweep's plan (``idx``: the point of the grid and the
replication, in the order the plan made them), so a sweep made again, or with one setting
changed, is compared point by point (``vivarium.trace.diff`` for each pair). A run one sweep
has and the other lacks (or has not finished writing) is said as such.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vivarium.sweep.index import read_index
from vivarium.trace.diff import RunDiff, diff_runs

__all__ = ["SweepDiff", "diff_sweeps"]


@dataclass(frozen=True)
class SweepDiff:
    """Each pair of runs compared, and the runs only one sweep has."""

    a: Path
    b: Path
    pairs: list[tuple[int, RunDiff]]
    unpaired: list[tuple[int, str]]

    @property
    def identical(self) -> bool:
        """Whether every run has its pair and every pair is identical."""
        return not self.unpaired and all(d.identical for _, d in self.pairs)

    def __repr__(self) -> str:
        """The lines, as ``vvm diff`` prints them."""
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """One line per run that differs, then the count."""
        out = []
        for idx, d in self.pairs:
            if not d.identical:
                where = d.first.line() if d.first is not None else "no divergence in the rows"
                keys = ", ".join(k for k, _, _ in d.config[:4]) or "none"
                out.append(
                    f"run {idx}: config ({keys}); {where}; "
                    f"{d.decisions_differing:,} decisions differ"
                )
        out += [f"run {idx}: {what}" for idx, what in self.unpaired]
        same = sum(1 for _, d in self.pairs if d.identical)
        total = len(self.pairs) + len(self.unpaired)
        head = f"{self.a} vs {self.b}: {same} of {total} runs identical"
        return [head, *out]


def diff_sweeps(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> SweepDiff:
    """Compare the sweeps in folders ``a`` and ``b``, run by run (see the module).

    Raises:
        TraceError: Either folder holds no sweep index, or a trace cannot be read.
    """
    fa, fb = Path(a), Path(b)
    runs = [{row["idx"]: row for row in read_index(folder)[1]} for folder in (fa, fb)]
    pairs, unpaired = [], []
    for idx in sorted(runs[0].keys() | runs[1].keys()):
        ra, rb = runs[0].get(idx), runs[1].get(idx)
        paths = [_trace(folder, row) for folder, row in ((fa, ra), (fb, rb))]
        if paths[0] is None or paths[1] is None:
            gone = fa if paths[0] is None else fb
            unpaired.append((idx, f"only one has it (none finished in {gone})"))
            continue
        pairs.append((idx, diff_runs(paths[0], paths[1])))
    return SweepDiff(fa, fb, pairs, unpaired)


def _trace(folder: Path, row: dict[str, object] | None) -> Path | None:
    """A run's finished trace in the sweep's folder, if it has one."""
    if row is None or row.get("status") != "complete" or not row.get("path"):
        return None
    path = Path(str(row["path"]))
    return path if path.is_absolute() else folder / path
