"""Misuse of sweeps: what a new user plausibly does wrong. Each ends in a right result or one
clear line, and nothing already made is lost."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.signals import ctrl_c_in_child
from tests.test_sweep import (
    KILL_GRID,
    TESTS,
    assert_only_the_rest_ran,
    checkpoints,
    group_alive,
    index_rows,
    kill_base,
)
from vivarium import Experiment, Run
from vivarium.errors import ConfigError, VivariumError
from vivarium.sweep import Sweep, run_sweep


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# A script with no main guard, its own policy, and a bug: on step 3 of the 2-agent runs the
# policy raises. That run's decisions of step 3 fall back; the other runs are clean.
RAISING_SCRIPT = """
from vivarium import Experiment
from vivarium.experiment.build import register_policy
from vivarium.types import ActionRequest

class Fragile:
    def __init__(self, agents):
        self.agents = agents

    def decide(self, *, run_id, time_step, agent_id, observation):
        if self.agents == 2 and time_step == 3:
            raise RuntimeError("fragile policy broke on step 3")
        return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                             action_name="noop")

register_policy("fragile", lambda config, agent, shared: Fragile(config.agent_count))
exp = Experiment(name="fragile", policy="fragile", agents=1, steps=5, seed=2)
sweep = exp.sweep(agents=[1, 2, 3], folder="sweep", max_workers=2, progress=False)
print("DONE", sweep.summary())
"""


def test_a_policy_raising_on_step_3_in_one_config_of_a_script_without_main_guard(
    tmp_path: Path,
) -> None:
    script = tmp_path / "fragile.py"
    script.write_text(RAISING_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("DONE sweep fragile: 3 runs: 3 complete") == 1
    warning = [line for line in out.stderr.splitlines() if "SweepWarning" in line]
    assert len(warning) == 1, out.stderr
    assert (
        "1 of 3 runs completed with problems; first: run 1 (agents=2, replication=0): "
        "2 of 10 decisions were fallbacks" in warning[0]
    )
    assert "first: step 3, agent_000: " in warning[0] and "fragile policy broke" in warning[0]
    assert "RunHealthWarning" not in out.stderr  # said once, by the sweep, not per worker
    sweep = Sweep.open(tmp_path / "sweep")
    assert list(sweep.index["status"]) == ["complete"] * 3
    actions = sweep.actions
    broken = actions[actions["fallback"]]
    assert set(broken["run"]) == {1} and set(broken["step"]) == {3} and len(broken) == 2
    assert len(actions) == (1 + 2 + 3) * 5


def test_ctrl_c_during_a_sweep_then_a_rerun_finishes_only_the_rest(tmp_path: Path) -> None:
    folder = tmp_path / "ctrl-c"
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        import test_sweep
        from vivarium.sweep import run_sweep
        run_sweep(test_sweep.kill_base(), test_sweep.KILL_GRID, folder={str(folder)!r},
                  max_workers=1, progress=False)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        start_new_session=True,
        preexec_fn=ctrl_c_in_child,  # Ctrl-C is heard, though this process was started ignoring it
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = index_rows(folder)
            if any(r[1] == "complete" for r in rows) and any(
                r[1] == "running" and checkpoints(folder / r[3]) for r in rows
            ):
                break
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.01)
        else:
            pytest.fail("no run completed within 60 s")
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole process group
        proc.wait(30)
        stderr = proc.stderr.read()
    finally:
        if group_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0 and "KeyboardInterrupt" in stderr
    rows = index_rows(folder)
    done = {r[0]: (folder / r[3]).stat().st_mtime_ns for r in rows if r[1] == "complete"}
    cut = [r for r in rows if r[1] == "failed"]
    assert len(cut) == 1 and 1 <= len(done) < 6
    assert Run.open(folder / cut[0][3]).metadata["status"] == "interrupted"
    assert all(r[1] == "pending" for r in rows if r[0] not in done and r != cut[0])

    again = run_sweep(kill_base(), KILL_GRID, folder=folder, max_workers=2)
    assert_only_the_rest_ran(again, done, [cut[0][0]], tmp_path / "clean")


def test_two_sweeps_on_one_folder_at_once(tmp_path: Path) -> None:
    # Two notebooks (two processes) point at the same sweep folder.
    folder = tmp_path / "shared"
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        import test_sweep
        from vivarium.sweep import run_sweep
        sweep = run_sweep(test_sweep.kill_base(), {{"agents": [2, 3]}}, folder={str(folder)!r},
                          max_workers=1, progress=False)
        print(sweep.summary())
        """
    )
    first = subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(r[1] == "running" for r in index_rows(folder)):
            assert time.monotonic() < deadline and first.poll() is None, first.stderr.read()
            time.sleep(0.01)
        with pytest.raises(VivariumError) as err:
            run_sweep(kill_base(), {"agents": [2, 3]}, folder=folder, max_workers=1)
        message = one_line(err)
        assert message == (
            f"sweep folder {folder.resolve()} is in use by another sweep process "
            f"(pid {first.pid}); wait for it or use another folder"
        )
        out, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0 and "2 runs: 2 complete" in out  # the first is unharmed
    # once it is done, the second sweep finds everything finished and runs nothing
    again = run_sweep(kill_base(), {"agents": [2, 3]}, folder=folder, max_workers=1)
    assert again.ok and list(again.index["attempts"]) == [1, 1]


def test_a_grid_axis_naming_an_unknown_field(tmp_path: Path) -> None:
    exp = Experiment(name="typo", agents=2, steps=3)
    with pytest.raises(ConfigError) as err:
        exp.sweep(agentz=[1, 2], folder=tmp_path / "typo")
    assert one_line(err) == "sweep: agentz: unknown field"
    assert not (tmp_path / "typo").exists()  # refused before anything was made
    config = tmp_path / "typo.yaml"
    config.write_text("name: typo\nagents: 2\nsteps: 3\n")
    out = run_cli("sweep", str(config), "--grid", "agentz=1,2", "--folder", str(tmp_path / "c"))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["vvm sweep: error: sweep: agentz: unknown field"]


def test_an_empty_grid_axis_is_an_error_not_an_empty_result(tmp_path: Path) -> None:
    exp = Experiment(name="empty", agents=2, steps=3)
    seeds: list[int] = []  # e.g. a filter that matched nothing
    with pytest.raises(ConfigError) as err:
        exp.sweep(seed=seeds, folder=tmp_path / "empty")
    assert one_line(err) == "sweep: grid: seed: give at least one value"
    config = tmp_path / "empty.yaml"
    config.write_text("name: empty\nagents: 2\nsteps: 3\nsweep: {grid: {seed: []}}\n")
    out = run_cli("sweep", str(config), "--folder", str(tmp_path / "c"))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "sweep.grid: expected a mapping of field -> list of values" in out.stderr


def test_vvm_sweep_with_a_failing_run_exits_1_with_one_line(tmp_path: Path) -> None:
    # One point of the grid gives the world an option it does not take.
    config = tmp_path / "part.yaml"
    config.write_text(
        "name: part\nworld: ecology\nagents: 2\nsteps: 3\n"
        "sweep: {grid: {world_options: [{}, {no_such_option: 1}]}, backend: inline}\n"
    )
    folder = tmp_path / "part"
    out = run_cli("sweep", str(config), "--folder", str(folder))
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(
        'vvm sweep: error: 1 of 2 runs failed; first: run 1 (world_options={"no_such_option":1}, '
        "replication=0): "
    )
    assert "no_such_option" in line and line.endswith("re-run the same command to retry them")
    assert "2 runs: 1 complete, 1 failed" in out.stdout
    assert Sweep.open(folder).runs[0].metadata["status"] == "complete"  # the good run is kept


def test_a_policy_registered_in_a_notebook_gives_the_same_trace_in_run_and_sweep(
    tmp_path: Path,
) -> None:
    from vivarium.experiment.build import POLICIES

    cell = {"__name__": "__main__"}
    exec(
        textwrap.dedent(
            """
            from vivarium.experiment.build import register_policy
            from vivarium.types import ActionRequest

            class Parrot:
                def __init__(self, seed):
                    self.seed = seed

                def decide(self, *, run_id, time_step, agent_id, observation):
                    return ActionRequest(
                        run_id=run_id, time_step=time_step, agent_id=agent_id,
                        action_name="post_message",
                        arguments={"content": f"{self.seed}:{agent_id}:{time_step}"})

            register_policy("parrot_nb", lambda config, agent, shared: Parrot(config.seed))
            """
        ),
        cell,
    )
    try:
        exp = Experiment(name="parrot", policy="parrot_nb", agents=2, steps=3)
        sweep = exp.sweep(seed=[3, 4], folder=tmp_path / "sweep", max_workers=2)
        alone = Experiment(name="parrot", policy="parrot_nb", agents=2, steps=3, seed=4).run(
            tmp_path / "alone.sqlite"
        )
    finally:
        POLICIES.pop("parrot_nb", None)
    assert sweep.ok
    # The same config and seed: the sweep's trace is byte-identical to the run's.
    assert (sweep.folder / f"{alone.run_id}.sqlite").read_bytes() == alone.path.read_bytes()
    assert sorted(sweep.messages["content"])[:2] == ["3:agent_000:0", "3:agent_000:1"]


def test_a_sweep_whose_policy_cannot_be_sent_to_workers_says_so(tmp_path: Path) -> None:
    import threading

    from vivarium.experiment.build import POLICIES, policy_factory, register_policy

    lock = threading.Lock()  # something a factory holds that no process can receive

    def factory(config, agent, shared):  # type: ignore[no-untyped-def]
        with lock:
            return policy_factory("random")(config, agent, shared)

    factory.__module__ = "__main__"  # as if defined in a notebook cell
    register_policy("locked", factory)
    try:
        exp = Experiment(name="locked", policy="locked", agents=2, steps=2)
        with pytest.raises(ConfigError) as err:
            exp.sweep(seed=[1, 2], folder=tmp_path / "locked")
        inline = exp.sweep(seed=[1, 2], folder=tmp_path / "inline", backend="inline")
    finally:
        POLICIES.pop("locked", None)
    assert one_line(err).startswith(
        "sweep: the policy 'locked' cannot be sent to worker processes ("
    )
    assert "backend='inline'" in str(err.value)
    assert inline.ok  # the advice works
