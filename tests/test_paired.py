"""Paired designs: a sweep's arms share their replication's random streams; their difference.

The properties: in a ``paired=True`` sweep every point of a replication runs with one seed, so
two arms whose parameter leaves the agents' draws alone decide identically, draw for draw
(common random numbers), and an unpaired sweep's do not; ``paired_difference`` and
``independent_difference`` are the paired t and Welch intervals (checked against scipy), in
pandas and polars; what cannot be paired or compared is refused in one line.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest
from scipy import stats

from vivarium import Experiment
from vivarium.analysis import independent_difference, paired_difference
from vivarium.errors import ConfigError
from vivarium.experiment.config import MAX_SEED
from vivarium.seeding import derive_seed
from vivarium.sweep.cli import split_sweep_section
from vivarium.sweep.plan import plan_sweep

BASE = {"name": "pair", "agents": 4, "steps": 6, "seed": 11}


def test_every_point_of_a_replication_runs_with_one_seed() -> None:
    runs = plan_sweep(BASE, {"message_history_limit": [5, 50, 80]}, replications=3, paired=True)
    seeds = {(r.replication, r.params["message_history_limit"]): r.seed for r in runs}
    for rep in range(3):
        assert {seeds[(rep, m)] for m in (5, 50, 80)} == {
            derive_seed(11, "paired", rep) % (MAX_SEED + 1)
        }
    assert len({seeds[(rep, 5)] for rep in range(3)}) == 3  # replications: independent
    assert len({r.run_id for r in runs}) == 9  # each arm its own run
    unpaired = plan_sweep(BASE, {"message_history_limit": [5, 50, 80]}, replications=3)
    assert len({r.seed for r in unpaired}) == 9


def two_arms(folder: Path, paired: bool, replications: int) -> pd.DataFrame:
    """The decisions of a sweep whose two arms differ by what random agents never read."""
    sweep = Experiment(**BASE).sweep(
        folder=folder / str(paired),
        backend="inline",
        replications=replications,
        paired=paired,
        progress=False,
        message_history_limit=[5, 50],  # no effect on what random agents draw
    )
    return sweep.actions


def test_paired_arms_draw_the_same_numbers_unpaired_ones_do_not(tmp_path: Path) -> None:
    for paired in (True, False):
        actions = two_arms(tmp_path, paired, 2)
        by_arm = {
            (rep, m): group[["step", "agent_id", "action", "arguments"]].reset_index(drop=True)
            for (rep, m), group in actions.groupby(["replication", "message_history_limit"])
        }
        same = [by_arm[(rep, 5)].equals(by_arm[(rep, 50)]) for rep in (0, 1)]
        assert same == ([True, True] if paired else [False, False]), paired


def test_common_random_numbers_narrow_the_interval_to_the_treatment(tmp_path: Path) -> None:
    """A treatment that changes nothing the agents do: paired, no difference at all is seen."""
    widths = {}
    for paired in (True, False):
        actions = two_arms(tmp_path, paired, 4)
        per_run = (
            actions.assign(emitted=actions["action"] == "emit_event")
            .groupby(["replication", "message_history_limit"], as_index=False)["emitted"]
            .sum()
        )
        compare = paired_difference if paired else independent_difference
        kwargs = {"pair": "replication"} if paired else {}
        (row,) = compare(per_run, "emitted", "message_history_limit", 5, **kwargs).to_dict(
            "records"
        )
        widths[paired] = row["ci_high"] - row["ci_low"]
        if paired:
            assert row["mean_diff"] == 0.0 and row["std"] == 0.0
    assert widths[True] == 0.0 < widths[False]


def test_a_paired_sweep_cannot_be_given_seeds() -> None:
    with pytest.raises(ConfigError) as info:
        plan_sweep(BASE, {"seed": [1, 2]}, paired=True)
    assert "paired runs share their replication's seed" in str(info.value)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="gives its own"):
        plan_sweep(BASE, configs=[{"seed": 3}, {"seed": 4}], paired=True)


def test_a_config_files_sweep_section_says_paired() -> None:
    _, settings = split_sweep_section({"sweep": {"paired": True, "replications": 2}})
    assert settings == {"paired": True, "replications": 2}
    with pytest.raises(ConfigError, match="sweep.paired: expected true or false, got 1"):
        split_sweep_section({"sweep": {"paired": 1}}, where="f.yaml")


# -- the intervals, against scipy ------------------------------------------------------------------
def frame(n: int = 12, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    shared = rng.normal(10, 3, n)  # what a replication's randomness does to every arm
    rows = []
    for rep in range(n):
        for step in (0, 1):
            for arm, effect in (("control", 0.0), ("b", 1.0), ("c", -0.5)):
                noise = rng.normal(0, 1)
                rows.append((rep, step, arm, shared[rep] + effect * (step + 1) + noise))
    return pd.DataFrame(rows, columns=["replication", "step", "prompt", "score"])


def test_paired_difference_is_the_paired_t_interval() -> None:
    df = frame()
    out = paired_difference(df, "score", "prompt", "control", per="step")
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == [
        "step", "prompt", "n", "mean_diff", "std", "ci_low", "ci_high", "correlation"
    ]  # fmt: skip
    assert out[["step", "prompt"]].values.tolist() == [[0, "b"], [0, "c"], [1, "b"], [1, "c"]]
    for row in out.to_dict("records"):
        one = df[df["step"] == row["step"]].pivot(
            index="replication", columns="prompt", values="score"
        )
        d = (one[row["prompt"]] - one["control"]).to_numpy()
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
        assert row["n"] == len(d) == 12
        assert row["mean_diff"] == pytest.approx(d.mean())
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half))
        r = np.corrcoef(one[row["prompt"]], one["control"])[0, 1]
        assert row["correlation"] == pytest.approx(r)
    polars = paired_difference(
        pl.from_pandas(df), "score", "prompt", "control", per="step", level=0.9
    )
    assert isinstance(polars, pl.DataFrame) and polars.height == 4


def test_independent_difference_is_welchs_interval() -> None:
    df = frame(n=9)
    last = df[df["step"] == 1]
    out = independent_difference(last, "score", "prompt", "control", level=0.9)
    for row in out.to_dict("records"):
        a = last.loc[last["prompt"] == row["prompt"], "score"].to_numpy()
        c = last.loc[last["prompt"] == "control", "score"].to_numpy()
        welch = stats.ttest_ind(a, c, equal_var=False)
        low, high = welch.confidence_interval(0.9)
        assert row["mean_diff"] == pytest.approx(a.mean() - c.mean())
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high))
    # The shared randomness, ignored: a wider interval than the paired one on the same runs.
    paired = paired_difference(last, "score", "prompt", "control", level=0.9)
    assert ((out["ci_high"] - out["ci_low"]) > (paired["ci_high"] - paired["ci_low"])).all()


def test_what_cannot_be_compared_is_refused_in_one_line() -> None:
    df = frame(n=3)
    cases = [
        (
            lambda: paired_difference(df, "score", "prompt", "nobody"),
            "the control 'nobody' is not an arm",
        ),
        (lambda: paired_difference(df, "points", "prompt", "control"), "no column 'points'"),
        (lambda: paired_difference(df, "score", "prompt", "control"), "several rows for"),
        (
            lambda: independent_difference(df, "score", "prompt", "control", level=1.5),
            "level must be in",
        ),
    ]
    for call, words in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert words in str(info.value) and "\n" not in str(info.value)
