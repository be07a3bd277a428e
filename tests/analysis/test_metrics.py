"""vivarium.analysis metrics: known answers on hand-made frames, every input kind, empty inputs."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from statistics import NormalDist

import pandas as pd
import polars as pl
import pytest

from tests.support.hand_made_frames import actions_frame
from vivarium import Experiment, Run
from vivarium.analysis import (
    action_counts,
    llm_usage,
    message_volume,
    pivot_events,
    pivots,
    success_ci,
    success_rate,
    summary,
    t_quantile,
    wilson_interval,
)

# -- hand-made traces ---------------------------------------------------------------------------


def transitions_frame() -> pl.DataFrame:
    rows = [
        # agent a visits A, B, C; C -> B and C -> A go back; b goes B -> A back, A -> A stays.
        ("r1", 0, "a", "A", "B"),
        ("r1", 1, "a", "B", "C"),
        ("r1", 1, "a", "C", "B"),
        ("r1", 2, "a", "B", "C"),
        ("r1", 2, "a", "C", "A"),
        ("r1", 0, "b", "A", "B"),
        ("r1", 1, "b", "B", "A"),
        ("r1", 2, "b", "A", "A"),
    ]
    return pl.DataFrame(
        rows, schema=["run_id", "step", "agent_id", "from_state", "to_state"], orient="row"
    ).with_columns(trigger=pl.lit("t"))


def messages_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "run_id": ["r1", "r1", "r1", "r2"],
            "step": [0, 0, 2, 1],
            "seq": [0, 1, 0, 0],
            "author_id": ["a", "b", "a", "a"],
            "channel": ["main"] * 4,
            "content": ["hi", "hello", "x", "abcd"],
        }
    )


def llm_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "run_id": ["r1", "r1", "r1", "r2"],
            "step": [0, 0, 1, 0],
            "agent_id": ["a", "b", "a", "a"],
            "attempt": [1, 1, 1, 1],
            "prompt_tokens": [100, 50, 10, 7],
            "completion_tokens": [10, 5, 1, 3],
            "cost": [0.5, 0.25, 0.125, 1.0],
            "latency_ms": [10.0, 30.0, 20.0, 5.0],
            "cache_hit": [True, False, False, True],
            "error": [None, None, "timeout", None],
        }
    )


def steps_frame() -> pl.DataFrame:
    return pl.DataFrame({"run_id": ["r1"] * 3 + ["r2"] * 2, "step": [0, 1, 2, 0, 1]})


def agents_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "run_id": ["r1", "r1", "r2"],
            "agent_idx": [0, 1, 0],
            "agent_id": ["a", "b", "a"],
            "policy": ["workflow", "random", "workflow"],
            "seed": ["1", "2", "3"],
        }
    )


def frames() -> dict[str, pl.DataFrame]:
    return {
        "actions": actions_frame(),
        "transitions": transitions_frame(),
        "messages": messages_frame(),
        "llm_calls": llm_frame(),
        "steps": steps_frame(),
        "agents": agents_frame(),
    }


def rows(df: pd.DataFrame, *cols: str) -> list[tuple]:
    return [tuple(r) for r in df[list(cols)].itertuples(index=False)]


# -- action counts --------------------------------------------------------------------------


def test_action_counts_per_step_fills_zeros_and_shares() -> None:
    out = action_counts(actions_frame())
    r1 = out[out.run_id == "r1"]
    assert rows(r1[r1.step == 0], "action", "count", "share") == [
        ("emit", 1, 0.5),
        ("noop", 1, 0.5),
        ("post", 0, 0.0),
    ]
    assert rows(r1[r1.step == 2], "action", "count") == [("emit", 0), ("noop", 1), ("post", 1)]
    assert list(out.columns) == ["run_id", "step", "action", "count", "share"]
    assert out.groupby(["run_id", "step"])["share"].sum().tolist() == pytest.approx([1.0] * 5)


def test_action_counts_per_agent_and_run() -> None:
    out = action_counts(actions_frame(), per="agent", as_="polars")
    a = out.filter(pl.col("run_id") == "r1", pl.col("agent_id") == "a")
    assert a.select("action", "count").rows() == [("emit", 1), ("noop", 2), ("post", 0)]
    per_run = action_counts(actions_frame(), per="run", as_="polars")
    assert per_run.filter(pl.col("run_id") == "r2").select("action", "count").rows() == [
        ("emit", 0),
        ("noop", 0),
        ("post", 2),
    ]
    both = action_counts(actions_frame(), per="agent_step")
    assert list(both.columns) == ["run_id", "agent_id", "step", "action", "count", "share"]


# -- success --------------------------------------------------------------------------------


def test_success_rate_per_agent_and_step() -> None:
    per_agent = success_rate(actions_frame(), per="agent")
    assert rows(per_agent, "run_id", "agent_id", "decisions", "successes", "success_rate") == [
        ("r1", "a", 3, 2, pytest.approx(2 / 3)),
        ("r1", "b", 3, 2, pytest.approx(2 / 3)),
        ("r2", "a", 2, 2, 1.0),
    ]
    per_step = success_rate(actions_frame())
    assert rows(per_step[per_step.run_id == "r1"], "step", "success_rate") == [
        (0, 1.0),
        (1, 0.5),
        (2, 0.5),
    ]


def test_rolling_success_rate_is_a_ratio_of_sums_over_steps() -> None:
    out = success_rate(actions_frame(), window=2)
    r1 = out[out.run_id == "r1"]
    # step 1: steps 0-1 -> 3 of 4; step 2: steps 1-2 -> 2 of 4
    assert r1.rolling_success_rate.tolist() == [1.0, 0.75, 0.5]
    assert r1.window_decisions.tolist() == [2, 4, 4]
    # A gap in the steps does not stretch the window: steps 0, 1, 5 with window 2.
    gappy = pl.DataFrame(
        {"step": [0, 1, 5], "agent_id": ["a"] * 3, "action": ["x"] * 3, "success": [1, 0, 1]}
    )
    g = success_rate(gappy, window=2, as_="polars")
    assert g["rolling_success_rate"].to_list() == [1.0, 0.5, 1.0]
    per_agent = success_rate(actions_frame(), per="agent_step", window=3, as_="polars")
    a = per_agent.filter(pl.col("run_id") == "r1", pl.col("agent_id") == "a")
    assert a["rolling_success_rate"].to_list() == pytest.approx([1.0, 0.5, 2 / 3])


def test_window_needs_steps() -> None:
    with pytest.raises(ValueError, match="window"):
        success_rate(actions_frame(), per="agent", window=3)
    with pytest.raises(ValueError, match="window"):
        success_rate(actions_frame(), window=0)


def test_t_quantile_matches_closed_forms_and_tables() -> None:
    # df=1: Cauchy, tan(pi (p - 1/2)); df=2: (2p - 1) / sqrt(2 p (1 - p)).
    for p in (0.9, 0.975, 0.995):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
        assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-9)
    table = {4: 2.776445105, 9: 2.262157163, 29: 2.045229642, 100: 1.983971519}
    for df, value in table.items():
        assert t_quantile(0.975, df) == pytest.approx(value, abs=1e-8)
    assert t_quantile(0.975, 1e7) == pytest.approx(NormalDist().inv_cdf(0.975), abs=1e-5)
    assert t_quantile(0.025, 4) == pytest.approx(-2.776445105, abs=1e-8)


def three_runs(rates: list[tuple[int, int]]) -> pl.DataFrame:
    """One agent per run, one step; run i has rates[i] = (successes, decisions)."""
    out = []
    for i, (ok, n) in enumerate(rates):
        for j in range(n):
            out.append((f"r{i}", 0, j, f"a{j}", "x", j < ok, 0.5 if i < 2 else 0.7))
    return pl.DataFrame(
        out,
        schema=["run_id", "step", "seq", "agent_id", "action", "success", "temp"],
        orient="row",
    )


def test_success_ci_t_interval_across_runs() -> None:
    data = three_runs([(2, 5), (5, 10), (3, 5)])  # rates 0.4, 0.5, 0.6
    out = success_ci(data)
    (row,) = out.to_dict("records")
    rates = [0.4, 0.5, 0.6]
    mean, sd = statistics.fmean(rates), statistics.stdev(rates)
    p = 0.975
    t = (2 * p - 1) / math.sqrt(2 * p * (1 - p))  # closed form for 2 degrees of freedom
    half = t * sd / math.sqrt(3)
    assert row["n_runs"] == 3 and row["decisions"] == 20 and row["successes"] == 10
    assert row["success_rate"] == pytest.approx(mean)
    assert row["std"] == pytest.approx(sd)
    assert row["ci_low"] == pytest.approx(mean - half)
    assert row["ci_high"] == pytest.approx(mean + half)


def test_success_ci_is_clipped_and_null_for_one_run() -> None:
    wide = success_ci(three_runs([(0, 2), (2, 2), (1, 2)]), as_="polars")
    assert wide.row(0, named=True)["ci_low"] == 0.0
    assert wide.row(0, named=True)["ci_high"] == 1.0
    one = success_ci(three_runs([(1, 4)]), as_="polars").row(0, named=True)
    assert one["n_runs"] == 1 and one["success_rate"] == 0.25
    assert one["ci_low"] is None and one["ci_high"] is None


def test_success_ci_wilson_pools_decisions() -> None:
    data = three_runs([(2, 5), (5, 10), (3, 5)])
    row = success_ci(data, method="wilson", as_="polars").row(0, named=True)
    n, k = 20, 10
    z = NormalDist().inv_cdf(0.975)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert row["success_rate"] == pytest.approx(0.5)
    assert row["ci_low"] == pytest.approx(centre - half)
    assert row["ci_high"] == pytest.approx(centre + half)
    assert wilson_interval(k, n) == pytest.approx((centre - half, centre + half))


def test_success_ci_groups_by_parameter_columns() -> None:
    data = three_runs([(2, 5), (5, 10), (3, 5)])
    out = success_ci(data, by="temp", per="run", as_="polars")
    assert out.select("temp", "n_runs", "success_rate").rows() == [
        (0.5, 2, pytest.approx(0.45)),
        (0.7, 1, pytest.approx(0.6)),
    ]
    t = t_quantile(0.975, 1)
    sd = statistics.stdev([0.4, 0.5])
    assert out["ci_high"][0] == pytest.approx(min(1.0, 0.45 + t * sd / math.sqrt(2)))


def test_success_ci_over_steps_with_a_window() -> None:
    r1 = actions_frame().filter(pl.col("run_id") == "r1")
    out = success_ci(pl.concat([r1, r1.with_columns(run_id=pl.lit("r3"))]), window=2, as_="polars")
    assert out["success_rate"].to_list() == [1.0, 0.75, 0.5]  # two identical runs
    assert out["std"].to_list() == [0.0, 0.0, 0.0]
    assert out["ci_low"].to_list() == out["ci_high"].to_list() == [1.0, 0.75, 0.5]


# -- pivots ---------------------------------------------------------------------------------


def test_pivots_in_visiting_order() -> None:
    ev = pivot_events(transitions_frame())
    assert rows(ev, "agent_id", "step", "from_state", "to_state", "source") == [
        ("a", 1, "C", "B", "transition"),
        ("b", 1, "B", "A", "transition"),
        ("a", 2, "C", "A", "transition"),
    ]


def test_pivots_in_a_given_state_order_and_excluded_moves() -> None:
    # Order C, B, A: moving towards C is going back.
    ev = pivot_events(transitions_frame(), state_order=["C", "B", "A"], as_="polars")
    assert ev.select("agent_id", "step", "from_state", "to_state").rows() == [
        ("a", 0, "A", "B"),
        ("b", 0, "A", "B"),
        ("a", 1, "B", "C"),
        ("a", 2, "B", "C"),
    ]
    ev = pivot_events(transitions_frame(), exclude=["C -> A"], as_="polars")
    assert ev.select("from_state", "to_state").rows() == [("C", "B"), ("B", "A")]
    ev = pivot_events(transitions_frame(), exclude=[("C", "B"), ("B", "A")], as_="polars")
    assert ev.select("from_state", "to_state").rows() == [("C", "A")]


def test_routine_transitions_are_not_pivots_unless_asked() -> None:
    # The workflow declared C -> A its routine loop (the trace's routine column says so).
    routine = transitions_frame().with_columns(
        routine=(pl.col("from_state") == "C") & (pl.col("to_state") == "A")
    )
    ev = pivot_events(routine, as_="polars")
    assert ev.select("agent_id", "step", "from_state", "to_state").rows() == [
        ("a", 1, "C", "B"),
        ("b", 1, "B", "A"),
    ]
    everything = pivot_events(routine, include_routine=True, as_="polars")
    assert everything.height == 3
    data = {"actions": actions_frame(), "transitions": routine}
    assert rows(pivots(data), "run_id", "agent_id", "pivots") == [
        ("r1", "a", 1),
        ("r1", "b", 1),
        ("r2", "a", 0),
    ]
    assert rows(pivots(data, include_routine=True), "agent_id", "pivots")[0] == ("a", 2)
    assert summary(data, as_="polars")["pivots"].to_list() == [2, 0]
    assert summary(data, include_routine=True, as_="polars")["pivots"].to_list() == [3, 0]
    # a trace from before routine was recorded (no column) counts every move, as it did
    assert pivot_events(transitions_frame(), as_="polars").height == 3


def test_should_pivot_flags_count_once_per_agent_and_step() -> None:
    meta = [None] * 8
    meta[2] = json.dumps({"should_pivot": True, "workflow_state": "C"})  # r1 step 1 a: dup
    meta[3] = json.dumps({"variables": {"should_pivot": True}})  # r1 step 1 b: dup
    meta[5] = json.dumps({"should_pivot": 1, "workflow_state": "W"})  # r1 step 2 b: new
    meta[4] = json.dumps({"should_pivot": False})
    acts = actions_frame().with_columns(metadata=pl.Series(meta, dtype=pl.String))
    data = {"actions": acts, "transitions": transitions_frame()}
    ev = pivot_events(data, as_="polars")
    assert ev.select("agent_id", "step", "from_state", "source").rows() == [
        ("a", 1, "C", "transition"),
        ("b", 1, "B", "transition"),
        ("a", 2, "C", "transition"),
        ("b", 2, "W", "should_pivot"),
    ]
    flags = pivot_events(data, source="flags", as_="polars")
    assert flags.height == 3
    assert pivot_events(data, source="transitions", as_="polars").height == 3


def test_pivot_counts_per_agent_and_over_time() -> None:
    data = {"actions": actions_frame(), "transitions": transitions_frame(), "steps": steps_frame()}
    per_agent = pivots(data)
    assert rows(per_agent, "run_id", "agent_id", "pivots") == [
        ("r1", "a", 2),
        ("r1", "b", 1),
        ("r2", "a", 0),
    ]
    per_step = pivots(data, per="step", as_="polars")
    assert per_step.select("run_id", "step", "pivots", "cumulative_pivots").rows() == [
        ("r1", 0, 0, 0),
        ("r1", 1, 2, 2),
        ("r1", 2, 1, 3),
        ("r2", 0, 0, 0),
        ("r2", 1, 0, 0),
    ]
    both = pivots(data, per="agent_step", as_="polars")
    a = both.filter(pl.col("run_id") == "r1", pl.col("agent_id") == "a")
    assert a["cumulative_pivots"].to_list() == [0, 1, 2]


# -- messages and LLM calls -------------------------------------------------------------------


def test_message_volume_per_step_fills_quiet_steps() -> None:
    data = {"messages": messages_frame(), "steps": steps_frame()}
    out = message_volume(data)
    assert rows(out, "run_id", "step", "messages", "characters") == [
        ("r1", 0, 2, 7),
        ("r1", 1, 0, 0),
        ("r1", 2, 1, 1),
        ("r2", 0, 0, 0),
        ("r2", 1, 1, 4),
    ]
    per_agent = message_volume({**data, "agents": agents_frame()}, per="agent", as_="polars")
    assert per_agent.select("run_id", "agent_id", "messages").rows() == [
        ("r1", "a", 2),
        ("r1", "b", 1),
        ("r2", "a", 1),
    ]
    # A lone messages frame: no steps to fill.
    assert message_volume(messages_frame(), as_="polars").height == 3


def test_llm_usage_per_agent_and_step() -> None:
    out = llm_usage(llm_frame(), per="agent")
    a = out[(out.run_id == "r1") & (out.agent_id == "a")].iloc[0]
    assert a.calls == 2 and a.prompt_tokens == 110 and a.completion_tokens == 11
    assert a.tokens == 121 and a.cost == pytest.approx(0.625)
    assert a.mean_latency_ms == pytest.approx(15.0)
    assert a.cache_hits == 1 and a.cache_hit_rate == pytest.approx(0.5) and a.errors == 1
    per_step = llm_usage({"llm_calls": llm_frame(), "steps": steps_frame()}, as_="polars")
    assert per_step.select("run_id", "step", "calls", "tokens").rows() == [
        ("r1", 0, 2, 165),
        ("r1", 1, 1, 11),
        ("r1", 2, 0, 0),
        ("r2", 0, 1, 10),
        ("r2", 1, 0, 0),
    ]
    quiet = per_step.filter(pl.col("calls") == 0)
    assert quiet["mean_latency_ms"].null_count() == 2 and quiet["cost"].to_list() == [0.0, 0.0]


# -- summary --------------------------------------------------------------------------------


def test_summary_one_row_per_run() -> None:
    out = summary(frames(), as_="polars")
    assert out.columns == [
        "run_id",
        "agents",
        "steps",
        "decisions",
        "success_rate",
        "fallbacks",
        "fallback_rate",
        "messages",
        "llm_calls",
        "tokens",
        "cost",
        "mean_latency_ms",
        "cache_hit_rate",
        "pivots",
    ]
    r1, r2 = out.rows(named=True)
    assert r1 == {
        "run_id": "r1",
        "agents": 2,
        "steps": 3,
        "decisions": 6,
        "success_rate": pytest.approx(4 / 6),
        "fallbacks": 0,
        "fallback_rate": 0.0,
        "messages": 3,
        "llm_calls": 3,
        "tokens": 176,
        "cost": pytest.approx(0.875),
        "mean_latency_ms": pytest.approx(20.0),
        "cache_hit_rate": pytest.approx(1 / 3),
        "pivots": 3,
    }
    assert r2["agents"] == 1 and r2["decisions"] == 2 and r2["success_rate"] == 1.0
    assert r2["llm_calls"] == 1 and r2["pivots"] == 0 and r2["messages"] == 1


def test_summary_of_an_actions_frame_alone_and_by_agent_attributes() -> None:
    alone = summary(actions_frame(), as_="polars")
    assert alone.select("run_id", "agents", "steps", "decisions", "llm_calls").rows() == [
        ("r1", 2, 3, 6, 0),
        ("r2", 1, 2, 2, 0),
    ]
    by_policy = summary(frames(), by="policy", as_="polars")
    assert by_policy.select("run_id", "policy", "agents", "decisions", "pivots").rows() == [
        ("r1", "random", 1, 3, 1),
        ("r1", "workflow", 1, 3, 2),
        ("r2", "workflow", 1, 2, 0),
    ]


def test_summary_keeps_a_parameter_named_like_a_column() -> None:
    data = {n: df.with_columns(agents=pl.lit(2)) for n, df in frames().items() if n != "agents"}
    out = summary(data, by="agents", as_="polars")
    assert out.columns[:3] == ["run_id", "agents", "agents_observed"]
    assert out["agents"].to_list() == [2, 2]
    assert out["agents_observed"].to_list() == [2, 1]


# -- inputs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Run]:
    folder = tmp_path_factory.mktemp("analysis")
    out = []
    for seed in (1, 2):
        exp = Experiment(
            name=f"eco{seed}",
            world="ecology",
            agents=3,
            steps=8,
            seed=seed,
            action_space=["noop", "read_artifact", "write_artifact", "invoke_artifact"],
        )
        out.append(exp.run(folder / f"eco{seed}.sqlite", progress=False))
    return out


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("analysis_llm")
    exp = Experiment(
        policy="cognitive", agents=2, steps=3, scheduling="simultaneous", llm={"mock": True}
    )
    return exp.run(folder / "llm.sqlite", progress=False)


def test_every_input_kind_gives_the_same_answer(runs: list[Run]) -> None:
    run = runs[0]
    expected = success_rate(run, per="agent", as_="polars")
    assert expected.height == 3 and set(expected["run_id"]) == {run.run_id}
    assert expected["decisions"].to_list() == [8, 8, 8]
    same = [
        success_rate(run.to_polars(), per="agent", as_="polars"),
        success_rate({"actions": run.actions}, per="agent", as_="polars"),
        success_rate(run.actions, per="agent", as_="polars"),
        success_rate(run.to_polars("actions"), per="agent", as_="polars"),
        success_rate(str(run.path), per="agent", as_="polars"),
        success_rate(run.arrow("actions"), per="agent", as_="polars"),
    ]
    for other in same:
        assert other.equals(expected)
    pandas_out = success_rate(run, per="agent")
    assert isinstance(pandas_out, pd.DataFrame)
    assert pandas_out["success_rate"].tolist() == expected["success_rate"].to_list()


def test_a_list_of_runs_and_merged_frames_agree(runs: list[Run]) -> None:
    from_list = summary(runs, by="seed", as_="polars")
    assert from_list["seed"].to_list() == [1, 2]
    assert from_list["decisions"].to_list() == [24, 24]
    merged = {
        name: pl.concat(
            [
                r.to_polars(name).with_columns(seed=pl.lit(s))
                for r, s in zip(runs, (1, 2), strict=True)
            ],
            how="vertical_relaxed",
        )
        for name in ("actions", "steps", "messages", "llm_calls", "transitions")
    }
    from_merged = summary(merged, by="seed", as_="polars")
    assert from_merged.drop("agents").equals(from_list.drop("agents"))
    ci = success_ci(merged, as_="polars")
    assert ci["n_runs"].to_list() == [2] * 8
    per_run = success_rate(merged, per="step", as_="polars").pivot(
        on="run_id", index="step", values="success_rate"
    )
    means = per_run.select(pl.mean_horizontal(pl.exclude("step")))
    assert ci["success_rate"].to_list() == pytest.approx(means.to_series().to_list())


def test_llm_metrics_on_a_real_run(llm_run: Run) -> None:
    usage = llm_usage(llm_run, per="agent", as_="polars")
    calls = llm_run.to_polars("llm_calls")
    assert usage["calls"].sum() == calls.height
    assert usage["tokens"].sum() == calls["prompt_tokens"].sum() + calls["completion_tokens"].sum()
    row = summary(llm_run, as_="polars").row(0, named=True)
    assert row["llm_calls"] == calls.height and row["agents"] == 2 and row["steps"] == 3
    assert row["messages"] == llm_run.messages.shape[0]


def test_by_columns_come_from_the_run_or_its_agents(runs: list[Run]) -> None:
    out = action_counts(runs[0], per="run", by=["seed", "world", "policy"], as_="polars")
    assert set(out.select("seed", "world", "policy").rows()) == {(1, "ecology", "random")}
    with pytest.raises(ValueError, match="by: column 'nope'"):
        action_counts(actions_frame(), by="nope")


def test_wrong_inputs_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="expected the actions table"):
        action_counts(messages_frame())
    with pytest.raises(ValueError, match="as_"):
        action_counts(actions_frame(), as_="arrow")
    with pytest.raises(ValueError, match="per"):
        action_counts(actions_frame(), per="week")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="success"):
        success_rate(actions_frame().drop("success"))
    with pytest.raises(ValueError, match="method"):
        success_ci(actions_frame(), method="z")  # type: ignore[arg-type]


# -- empty inputs -----------------------------------------------------------------------------


EMPTY_CALLS = {
    "action_counts": (action_counts, ["run_id", "step", "action", "count", "share"]),
    "success_rate": (success_rate, ["run_id", "step", "decisions", "successes", "success_rate"]),
    "success_ci": (
        success_ci,
        ["step", "n_runs", "decisions", "successes", "success_rate", "std", "ci_low", "ci_high"],
    ),
    "pivot_events": (
        pivot_events,
        ["run_id", "agent_id", "step", "from_state", "to_state", "source"],
    ),
    "pivots": (pivots, ["run_id", "agent_id", "pivots"]),
    "message_volume": (message_volume, ["run_id", "step", "messages", "characters"]),
    "llm_usage": (llm_usage, ["run_id", "step", "calls", "prompt_tokens", "completion_tokens"]),
    "summary": (summary, ["run_id", "agents", "steps", "decisions", "success_rate", "pivots"]),
}


@pytest.mark.parametrize("name", sorted(EMPTY_CALLS))
@pytest.mark.parametrize(
    "empty",
    [
        {},
        None,
        [],
        pd.DataFrame(),
        {"actions": actions_frame().clear(), "transitions": transitions_frame().clear()},
    ],
    ids=["dict", "none", "list", "pandas", "typed"],
)
def test_empty_inputs_give_empty_frames(name: str, empty: object) -> None:
    fn, columns = EMPTY_CALLS[name]
    out = fn(empty)
    assert isinstance(out, pd.DataFrame) and len(out) == 0
    assert all(c in out.columns for c in columns), list(out.columns)
    assert fn(empty, as_="polars").height == 0


def test_empty_inputs_keep_by_columns() -> None:
    out = success_ci({}, by=["temp"], window=3, as_="polars")
    assert out.height == 0 and out.columns[:2] == ["temp", "step"]
    assert summary({}, by="temp", as_="polars").columns[:2] == ["run_id", "temp"]


def test_window_on_an_empty_frame() -> None:
    out = success_rate(actions_frame().clear(), window=3, as_="polars")
    assert out.height == 0 and "rolling_success_rate" in out.columns


def test_random_run_has_no_llm_rows_but_zero_steps(runs: list[Run]) -> None:
    usage = llm_usage(runs[0], as_="polars")
    assert usage.height == 8 and usage["calls"].sum() == 0
    assert llm_usage(runs[0].to_polars("llm_calls"), as_="polars").height == 0


def test_importing_analysis_is_light() -> None:
    code = (
        "import sys, vivarium.analysis, vivarium.analysis.style;"
        "heavy = [m for m in ('matplotlib', 'polars', 'pandas') if m in sys.modules];"
        "import vivarium.analysis.plots;"
        "print(heavy, 'matplotlib' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout.split() == ["[]", "False"]
