"""Sweeps: grids, merged frames, worker counts, failures, resume after a kill, seeds, cassettes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from vivarium import Experiment
from vivarium.errors import ConfigError, SweepFailed, SweepWarning, VivariumError
from vivarium.experiment.build import register_world
from vivarium.experiment.config import MAX_SEED
from vivarium.gateways.cache import Cassette
from vivarium.seeding import derive_seed
from vivarium.sweep import (
    INDEX_FILE,
    SWEEP_FRAMES,
    Sweep,
    main_sweep,
    parse_grid_items,
    plan_sweep,
    run_sweep,
    split_sweep_section,
)
from vivarium.sweep import FolderLock as _FolderLock
from vivarium.worlds.channel import InMemoryChannel

TESTS = Path(__file__).resolve().parent


# -- a test world, registered at import (workers import this module to find it) ---------------
class SlowChannel(InMemoryChannel):
    """The channel, but each step takes ``delay`` seconds, and it can fail once on purpose."""

    def __init__(
        self, delay: float = 0.0, marker: str | None = None, fail_at: int | None = None, **kw: Any
    ) -> None:
        super().__init__(**kw)
        self.delay, self.marker, self.fail_at = delay, marker, fail_at
        self.digests = 0

    def state_digest(self) -> str:
        self.digests += 1
        if self.delay:
            time.sleep(self.delay)
        if self.marker and self.digests == self.fail_at and os.path.exists(self.marker):
            raise RuntimeError("the flaky world failed on purpose")
        return super().state_digest()


def _sweep_test_world(config: Any, plan: Any, shared: dict[str, Any]) -> Any:
    options = dict(config.world_options)
    if options.pop("crash_at_agents", None) == config.agent_count:
        os._exit(3)  # the worker process dies, as on a segfault or the OOM killer
    if options.pop("explode_at_agents", None) == config.agent_count:
        raise ValueError(f"exploding world: {config.agent_count} agents\nsecond line of the error")
    return SlowChannel(message_history_limit=config.message_history_limit, **options)


register_world("sweep_test", _sweep_test_world)


def frames_of(sweep: Sweep) -> dict[str, Any]:
    return {name: sweep.to_polars(name) for name in SWEEP_FRAMES}


def assert_same_frames(a: Sweep, b: Sweep) -> None:
    fa, fb = frames_of(a), frames_of(b)
    for name in SWEEP_FRAMES:
        assert fa[name].equals(fb[name]), name
    pd.testing.assert_frame_equal(a.actions, b.actions)


BASE = Experiment(name="sw", agents=3, steps=12, seed=11)
GRID = {"agents": [2, 4], "order": ["sorted", "shuffle"]}


# -- frames and workers -----------------------------------------------------------------------
def test_one_and_two_workers_give_identical_merged_frames(tmp_path: Path) -> None:
    one = run_sweep(BASE, GRID, folder=tmp_path / "one", max_workers=1, replications=2)
    two = run_sweep(BASE, GRID, folder=tmp_path / "two", max_workers=2, replications=2)
    inline = run_sweep(BASE, GRID, folder=tmp_path / "in", backend="inline", replications=2)
    assert one.ok and two.ok and len(one) == 8
    assert_same_frames(one, two)
    assert_same_frames(one, inline)

    actions = two.actions
    assert isinstance(actions, pd.DataFrame)
    assert list(actions.columns[:6]) == ["run_id", "run", "replication", "seed", "agents", "order"]
    # rows in run order, each run's rows carrying its parameters
    assert actions["run"].is_monotonic_increasing
    index = two.index
    assert list(index["run"]) == list(range(8))
    for row in index.itertuples():
        rows = actions[actions["run"] == row.run]
        assert len(rows) == row.agents * 12
        assert set(rows["order"]) == {row.order}
        assert set(rows["seed"]) == {row.seed}
        assert set(rows["run_id"].astype(str)) == {row.run_id}
    assert list(index["agents"]) == [2, 2, 2, 2, 4, 4, 4, 4]
    assert list(index["order"]) == ["sorted", "sorted", "shuffle", "shuffle"] * 2
    assert list(index["replication"]) == [0, 1] * 4
    # the same run read alone gives the same rows
    first = two.runs[0].actions
    merged_first = actions[actions["run"] == 0].drop(
        columns=["run", "replication", "seed", "agents", "order"]
    )
    pd.testing.assert_frame_equal(
        merged_first.reset_index(drop=True).astype(first.dtypes.to_dict()), first
    )
    assert len(two.steps) == 8 * 12
    assert set(two.to_polars()) == set(SWEEP_FRAMES)
    assert "sweep.seed" in two.agents.columns  # the agents frame has its own seed column


def test_rerun_skips_complete_runs_and_sweep_reopens(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    first = run_sweep(BASE, {"agents": [2, 3]}, folder=folder, backend="inline")
    mtimes = [Path(p).stat().st_mtime_ns for p in first.index["path"]]
    again = run_sweep(BASE, {"agents": [2, 3]}, folder=folder, backend="inline")
    assert list(again.index["attempts"]) == [1, 1]
    assert [Path(p).stat().st_mtime_ns for p in again.index["path"]] == mtimes
    reopened = Sweep.open(folder)
    assert_same_frames(first, reopened)
    assert reopened.summary().startswith("sweep sw: 2 runs: 2 complete")
    assert "Vivarium sweep" in reopened._repr_html_()


def test_default_folder_and_explicit_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = run_sweep(
        BASE.config,
        configs=[{"agents": 2}, {"agents": 3, "order": "shuffle"}],
        backend="inline",
    )
    assert sweep.folder == (tmp_path / "runs" / "sw-sweep").resolve()
    assert (sweep.folder / INDEX_FILE).is_file()
    index = sweep.index
    assert list(index["agents"]) == [2, 3]
    assert index["order"].isna().tolist() == [True, False]
    assert sweep.actions["order"].isna().sum() == 2 * 12


def test_folder_in_use_by_another_sweep(tmp_path: Path) -> None:
    folder = tmp_path / "busy"
    folder.mkdir()
    with _FolderLock(folder), pytest.raises(VivariumError, match="in use by another sweep"):
        run_sweep(BASE, folder=folder, backend="inline")


# -- failures ---------------------------------------------------------------------------------
def test_a_failing_run_is_recorded_and_the_others_complete(tmp_path: Path) -> None:
    base = Experiment(
        name="boom", world="sweep_test", agents=1, steps=5, world_options={"explode_at_agents": 2}
    )
    with pytest.warns(SweepWarning) as caught:
        sweep = run_sweep(base, {"agents": [1, 2, 3]}, folder=tmp_path / "boom", max_workers=2)
    (warning,) = caught
    message = str(warning.message)
    assert message.startswith(
        "sweep boom: 1 of 3 runs failed; first: run 1 (agents=2, replication=0)"
    )
    assert "exploding world: 2 agents" in message and "\n" not in message
    assert warning.filename == __file__  # points at the caller's line
    # the sweep shows its failures: the count and the first error
    assert "1 failed" in sweep.summary() and "first failure: run 1 (agents=2" in sweep.summary()
    assert "failed=1" in repr(sweep) and "exploding world: 2 agents" in repr(sweep)
    index = sweep.index
    assert list(index["status"]) == ["complete", "failed", "complete"]
    error = index.loc[1, "error"]
    assert "exploding world: 2 agents" in error and "\n" not in error
    assert not sweep.ok and len(sweep.failed) == 1
    assert sorted(set(sweep.actions["run"])) == [0, 2]
    assert len(sweep.runs) == 2


def test_a_run_that_kills_its_worker_is_failed_and_the_others_complete(tmp_path: Path) -> None:
    base = Experiment(
        name="crash", world="sweep_test", agents=1, steps=5, world_options={"crash_at_agents": 2}
    )
    with pytest.warns(SweepWarning, match="1 of 4 runs failed; first: run 1"):
        sweep = run_sweep(base, {"agents": [1, 2, 3, 4]}, folder=tmp_path / "crash", max_workers=2)
    index = sweep.index
    assert list(index["status"]) == ["complete", "failed", "complete", "complete"]
    assert index.loc[1, "error"] == "the worker process running this run died (exit code 3)"
    assert sorted(set(sweep.actions["run"])) == [0, 2, 3]


def test_a_failed_run_is_resumed_from_its_checkpoint(tmp_path: Path) -> None:
    marker = tmp_path / "fail-once"
    marker.touch()
    base = Experiment(
        name="flaky",
        world="sweep_test",
        agents=3,
        steps=12,
        checkpoint_every=2,
        world_options={"marker": str(marker), "fail_at": 7},
    )
    grid = {"order": ["sorted", "shuffle"]}
    with pytest.raises(SweepFailed) as err:
        run_sweep(base, grid, folder=tmp_path / "flaky", max_workers=2)
    assert str(err.value).startswith(
        "sweep flaky: all 2 runs failed; first: run 0 (order=sorted, replication=0): "
    )
    assert "failed on purpose" in str(err.value) and "\n" not in str(err.value)
    first = err.value.sweep
    assert list(first.index["status"]) == ["failed", "failed"]
    assert all("failed on purpose" in e for e in first.index["error"])
    marker.unlink()
    second = run_sweep(base, grid, folder=tmp_path / "flaky", max_workers=2)
    assert second.ok
    assert list(second.index["action"]) == ["resumed", "resumed"]
    assert list(second.index["attempts"]) == [2, 2]
    clean = run_sweep(base, grid, folder=tmp_path / "clean", backend="inline")
    assert_same_frames(second, clean)


# -- resume after SIGKILL ---------------------------------------------------------------------
KILL_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import test_sweep  # registers the sweep_test world
from vivarium.sweep import run_sweep
run_sweep(test_sweep.kill_base(), test_sweep.KILL_GRID, folder={folder!r}, max_workers=1,
          progress=False)
"""
KILL_GRID = {"order": ["sorted", "shuffle"], "agents": [2, 3, 4]}


def kill_base() -> Experiment:
    return Experiment(
        name="killed",
        world="sweep_test",
        agents=2,
        steps=20,
        seed=3,
        checkpoint_every=3,
        world_options={"delay": 0.02},
    )


def index_rows(folder: Path) -> list[tuple]:
    path = folder / INDEX_FILE
    if not path.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(
                "SELECT idx, status, attempts, path FROM runs ORDER BY idx"
            ).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []


def checkpoints(trace: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{trace}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def group_alive(pgid: int) -> bool:
    """Any process of the group still running (zombies do not count: nobody may reap them)."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in {"Z", "X"}:
            return True
    return False


def test_resume_after_sigkill_runs_only_the_missing_runs(tmp_path: Path) -> None:
    folder = tmp_path / "killed"
    script = KILL_SCRIPT.format(tests=str(TESTS), folder=str(folder))
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    try:
        # Kill once a run is complete and the next one is midway, past a checkpoint.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = index_rows(folder)
            if any(r[1] == "complete" for r in rows) and any(
                r[1] == "running" and checkpoints(folder / r[3]) for r in rows
            ):
                break
            if proc.poll() is not None:
                pytest.fail(f"the sweep ended before it was killed: {proc.stderr.read().decode()}")
            time.sleep(0.01)
        else:
            pytest.fail("no run completed within 60 s")
        os.kill(proc.pid, signal.SIGKILL)  # the sweep process only: its workers must stop too
        proc.wait(10)
        time.sleep(0.8)  # the workers' watchdog notices within 0.25 s
        leftover = group_alive(proc.pid)
    finally:
        if group_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert not leftover, "a worker outlived the killed sweep"

    before = index_rows(folder)
    done = {r[0]: (folder / r[3]).stat().st_mtime_ns for r in before if r[1] == "complete"}
    midway = [r[0] for r in before if r[1] == "running"]
    assert 1 <= len(done) < len(before) == 6
    assert len(midway) == 1
    resumed = run_sweep(kill_base(), KILL_GRID, folder=folder, max_workers=2, progress=False)
    assert_only_the_rest_ran(resumed, done, midway, tmp_path / "clean")


def assert_only_the_rest_ran(
    again: Sweep, done: dict[int, int], midway: list[int], clean_folder: Path
) -> None:
    """A stopped sweep (killed, Ctrl-C), run again: runs finished before the stop untouched
    (``done``: run -> trace mtime), the cut ones resumed from their checkpoints, the others run
    once, and the merged frames equal those of a sweep never stopped."""
    assert again.ok
    for row in again.index.itertuples():
        if row.run in done:  # finished before the stop: not run again
            assert row.attempts == 1
            assert Path(row.path).stat().st_mtime_ns == done[row.run]
        elif row.run in midway:  # cut midway: resumed from its checkpoint
            assert (row.action, row.attempts) == ("resumed", 2)
        else:
            assert (row.action, row.attempts) == ("ran", 1)
    clean = run_sweep(kill_base(), KILL_GRID, folder=clean_folder, backend="inline")
    assert_same_frames(again, clean)


# -- a shared cassette ------------------------------------------------------------------------
def test_concurrent_cassette_writers_lose_nothing(tmp_path: Path) -> None:
    cassette = tmp_path / "shared.cassette"
    base = Experiment(
        name="llm",
        policy="cognitive",
        agents=3,
        steps=3,
        scheduling="simultaneous",
        llm={"mock": True, "graph": False, "cache": str(cassette), "cache_mode": "record"},
    )
    grid = {"seed": [1, 2, 3, 4, 5, 6]}
    sweep = run_sweep(base, grid, folder=tmp_path / "rec", max_workers=2)
    assert sweep.ok
    calls = sweep.llm_calls
    assert len(calls) == 6 * 3 * 3
    with Cassette(cassette) as c:
        stored = set(c.hashes())
    assert set(calls["request_hash"]) <= stored
    assert len(stored) == calls["request_hash"].nunique()
    # replayed offline from the shared cassette: the same calls, now cache hits
    replay = base.config.model_copy(
        update={"llm": base.config.llm.model_copy(update={"cache_mode": "replay"})}
    )
    again = run_sweep(replay, grid, folder=tmp_path / "replay", max_workers=2)
    assert again.ok
    assert again.llm_calls["cache_hit"].all()
    cols = ["run", "step", "agent_id", "request_hash"]
    pd.testing.assert_frame_equal(again.llm_calls[cols], calls[cols])
    pd.testing.assert_frame_equal(again.actions, sweep.actions)


# -- seeds ------------------------------------------------------------------------------------
def test_seeds_are_derived_recorded_and_distinct(tmp_path: Path) -> None:
    plan = plan_sweep(BASE, {"agents": [2, 3]}, replications=3, seed=99)
    seeds = [r.seed for r in plan]
    # from the run's parameters (canonical JSON) and replication, not its position
    assert seeds == [
        derive_seed(99, "sweep", f'{{"agents":{a}}}', r) % (MAX_SEED + 1)
        for a in (2, 3)
        for r in range(3)
    ]
    assert len(set(seeds)) == 6 and all(0 <= s <= MAX_SEED for s in seeds)
    assert len({r.run_id for r in plan}) == 6
    assert [r.replication for r in plan] == [0, 1, 2, 0, 1, 2]
    # the sweep seed defaults to the base config's
    assert plan_sweep(BASE)[0].seed == derive_seed(11, "sweep", "{}", 0) % (MAX_SEED + 1)

    # seeds given by the grid are used; replications of a point get distinct derived seeds
    given = plan_sweep(BASE, {"seed": [5, 6]}, replications=2)
    assert [r.seed for r in given] == [
        5,
        derive_seed(5, "replication", 1) % (MAX_SEED + 1),
        6,
        derive_seed(6, "replication", 1) % (MAX_SEED + 1),
    ]

    sweep = run_sweep(
        BASE, {"agents": [2]}, folder=tmp_path / "s", backend="inline", replications=3, seed=99
    )
    assert list(sweep.index["seed"]) == seeds[:3]
    assert [int(run.metadata["seed"]) for run in sweep.runs] == seeds[:3]
    assert [run.config.seed for run in sweep.runs] == seeds[:3]
    # distinct seeds, distinct decisions
    per_run = sweep.actions.groupby("run")["action"].apply(lambda s: tuple(s.astype(str)))
    assert per_run.nunique() == 3


def test_dotted_fields_and_bad_grids() -> None:
    plan = plan_sweep(BASE, {"llm.temperature": [0.0, 0.5], "policy": ["cognitive"]})
    assert [r.config.llm.temperature for r in plan] == [0.0, 0.5]
    assert plan[1].params == {"llm.temperature": 0.5, "policy": "cognitive"}
    with pytest.raises(ConfigError, match="agentz: unknown field"):
        plan_sweep(BASE, {"agentz": [1]})
    with pytest.raises(ConfigError, match="expected a list"):
        plan_sweep(BASE, {"agents": 5})
    with pytest.raises(ConfigError, match="agents"):
        plan_sweep(BASE, {"agents": [0]})
    with pytest.raises(ConfigError, match="replications"):
        plan_sweep(BASE, replications=0)
    with pytest.warns(UserWarning, match="same config"):
        twins = plan_sweep(BASE, {"seed": [1, 1]})
    assert twins[0].run_id != twins[1].run_id


# -- the command line -------------------------------------------------------------------------
def test_sweep_section_and_main_sweep(tmp_path: Path) -> None:
    data = {"name": "x", "steps": 4, "sweep": {"grid": {"agents": [2, 3]}, "replications": 2}}
    experiment, settings = split_sweep_section(data)
    assert experiment == {"name": "x", "steps": 4}
    assert settings == {"grid": {"agents": [2, 3]}, "replications": 2}
    assert split_sweep_section({"name": "x"}) == ({"name": "x"}, {})
    with pytest.raises(ConfigError, match="sweep.grids: unknown field"):
        split_sweep_section({"sweep": {"grids": {}}})
    with pytest.raises(ConfigError, match="sweep.backend"):
        split_sweep_section({"sweep": {"backend": "dask"}})
    assert parse_grid_items(["agents=5,50", "llm.temperature=0,0.7", "order=[sorted]"]) == {
        "agents": [5, 50],
        "llm.temperature": [0, 0.7],
        "order": ["sorted"],
    }
    with pytest.raises(ConfigError, match="FIELD=VALUE"):
        parse_grid_items(["agents"])

    config = tmp_path / "sweep.yaml"
    config.write_text(
        textwrap.dedent(
            """
            name: cli
            steps: 5
            agents: 2
            sweep:
              grid: {seed: [1, 2], agents: [2, 3]}
              backend: inline
              plugins: [vivarium.worlds.boltzmann]
            """
        )
    )
    sweep = main_sweep(config, {"agents": [4]}, folder=tmp_path / "cli", progress=False)
    assert sweep.ok
    assert list(sweep.index["seed"]) == [1, 2]
    assert list(sweep.index["agents"]) == [4, 4]
    assert len(sweep.actions) == 2 * 4 * 5


# -- the user's own worlds and policies, from a script or a notebook --------------------------
# A new user's script: no `if __name__ == "__main__":`, a policy class and a world class
# defined in it and registered, then a sweep. Each value the policy emits is computed from
# the step, so the expected actions are known without running anything.
USER_SCRIPT = """
import sys
print("SCRIPT STARTED", flush=True)
from vivarium import Experiment
from vivarium.experiment.build import register_policy, register_world
from vivarium.types import ActionRequest
from vivarium.worlds.channel import InMemoryChannel

class Countdown:
    def __init__(self, start):
        self.start = start

    def decide(self, *, run_id, time_step, agent_id, observation):
        return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                             action_name="emit_event", arguments={{"value": self.start - time_step}})

class QuietChannel(InMemoryChannel):
    pass

register_policy("countdown", lambda config, agent, shared: Countdown(config.steps * 10))
register_world("quiet", lambda config, plan, shared: QuietChannel())
exp = Experiment(name="user", world="quiet", policy="countdown", agents=1, steps=3, seed=5)
sweep = exp.sweep(agents=[1, 2], folder={folder!r}, backend={backend!r}, max_workers=2,
                  progress=False)
print("SUMMARY", sweep.summary(), flush=True)
print("VALUES", sorted(set(sweep.actions["arguments"])), len(sweep.actions), flush=True)
"""
USER_VALUES = "VALUES ['{\"value\":28}', '{\"value\":29}', '{\"value\":30}'] 9"


def run_user_code(tmp_path: Path, how: str, backend: str = "local") -> subprocess.CompletedProcess:
    """Run USER_SCRIPT as ``python script.py`` (how="file") or ``python -c`` (a notebook-like
    ``__main__`` with no file behind it)."""
    code = USER_SCRIPT.format(folder=str(tmp_path / "sweep"), backend=backend)
    if how == "file":
        script = tmp_path / "my_sweep.py"
        script.write_text(code)
        argv = [sys.executable, str(script)]
    else:
        argv = [sys.executable, "-c", code]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        timeout=300,
    )


@pytest.mark.parametrize("how", ["file", "c"])
def test_user_classes_registered_in_main_run_in_a_local_sweep(tmp_path: Path, how: str) -> None:
    out = run_user_code(tmp_path, how)
    assert out.returncode == 0, out.stderr
    assert "SUMMARY sweep user: 2 runs: 2 complete" in out.stdout, out.stdout + out.stderr
    assert USER_VALUES in out.stdout
    # the workers never ran the user's script again (they would have printed this line)
    assert out.stdout.count("SCRIPT STARTED") == 1
    sweep = Sweep.open(tmp_path / "sweep")
    assert sweep.ok and list(sweep.index["agents"]) == [1, 2]


def test_a_class_defined_in_a_notebook_cell_runs_in_local_and_inline_sweeps(
    tmp_path: Path,
) -> None:
    # A notebook cell's classes live in a module named __main__: define one there.
    from vivarium.experiment.build import POLICIES

    cell = {"__name__": "__main__"}
    exec(
        textwrap.dedent(
            """
            from vivarium.experiment.build import register_policy
            from vivarium.types import ActionRequest

            class Echo:
                def decide(self, *, run_id, time_step, agent_id, observation):
                    return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                                         action_name="post_message",
                                         arguments={"content": f"{agent_id}@{time_step}"})

            register_policy("echo_cell", lambda config, agent, shared: Echo())
            """
        ),
        cell,
    )
    assert cell["Echo"].__module__ == "__main__"
    try:
        exp = Experiment(name="cell", policy="echo_cell", agents=2, steps=2)
        local = exp.sweep(seed=[1, 2], folder=tmp_path / "local", max_workers=2)
        inline = exp.sweep(seed=[1, 2], folder=tmp_path / "inline", backend="inline")
    finally:
        POLICIES.pop("echo_cell", None)
    assert local.ok, local.summary()
    expected = sorted(f"agent_00{a}@{t}" for a in range(2) for t in range(2)) * 2
    assert sorted(local.messages["content"]) == sorted(expected)
    assert_same_frames(local, inline)


# -- seeds follow the parameters, not the position --------------------------------------------
def test_seeds_and_run_ids_do_not_depend_on_grid_position(tmp_path: Path) -> None:
    short = plan_sweep(BASE, {"agents": [2, 3], "order": ["sorted"]}, replications=2)
    longer = plan_sweep(BASE, {"agents": [1, 2, 3], "order": ["sorted"]}, replications=2)
    by_point = {(r.params["agents"], r.replication): (r.seed, r.run_id) for r in longer}
    for run in short:
        assert by_point[(run.params["agents"], run.replication)] == (run.seed, run.run_id)
    # the seed is a function of the run's parameters and replication, computed here by hand
    expected = derive_seed(11, "sweep", '{"agents":3,"order":"sorted"}', 1) % (MAX_SEED + 1)
    assert by_point[(3, 1)][0] == expected

    folder = tmp_path / "grow"
    first = run_sweep(BASE, {"agents": [2, 3]}, folder=folder, backend="inline")
    mtimes = {p: Path(p).stat().st_mtime_ns for p in first.index["path"]}
    grown = run_sweep(BASE, {"agents": [1, 2, 3]}, folder=folder, max_workers=2)
    index = grown.index
    assert grown.ok and list(index["agents"]) == [1, 2, 3]
    assert list(index["action"]) == ["ran", "ran", "ran"]  # each run ran exactly once
    assert list(index["attempts"]) == [1, 1, 1]
    assert list(index["run_id"])[1:] == list(first.index["run_id"])
    for path, mtime in mtimes.items():
        assert Path(path).stat().st_mtime_ns == mtime  # not run again


def test_a_sweeps_arguments_carry_the_run_columns(tmp_path: Path) -> None:
    """``sweep.arguments``: each decision's typed arguments beside its run's parameters."""
    sweep = run_sweep(BASE, {"agents": [2, 3]}, folder=tmp_path / "args", backend="inline")
    actions, arguments = sweep.actions, sweep.arguments
    assert len(arguments) == len(actions)
    assert list(arguments.columns[:5]) == ["run_id", "run", "replication", "seed", "agents"]
    assert (arguments["agents"].to_numpy() == actions["agents"].to_numpy()).all()
    values = [
        json.loads(a).get("value") if isinstance(a, str) else None for a in actions["arguments"]
    ]
    got = arguments["value"].astype(object).where(arguments["value"].notna(), None).tolist()
    assert got == values
    assert str(arguments["value"].dtype) == "Int64"
