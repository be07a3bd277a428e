"""Misuse around run health and recorded values: a run that is not a result says so, a value
is recorded as the world saw it or refused in one line, and a name that clashes with the trace's
own columns is refused before step 0."""

from __future__ import annotations

import json
import math
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_cli
from vivarium import Experiment, Run
from vivarium.errors import ConfigError, RunHealthWarning, VivariumError
from vivarium.types import ActionRequest, ActionResult

# -- small user models, as a new user writes them ---------------------------------------------


class Mover:
    """A policy that always names one action, with arguments a test chooses."""

    def __init__(self, action: str = "move", arguments: Any = None) -> None:
        self.action, self.arguments = action, arguments

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: dict) -> Any:
        args = self.arguments(agent_id, time_step) if callable(self.arguments) else {}
        return ActionRequest(
            run_id=run_id, time_step=time_step, agent_id=agent_id, action_name=self.action,
            arguments=args,
        )  # fmt: skip


class Echo:
    """A world that accepts every action and answers with what ``answer`` gives."""

    name = "echo"

    def __init__(self, answer: Any = None, refuse: str | None = None) -> None:
        self.answer, self.refuse = answer, refuse

    def observe(self, agent_id: str, time_step: int) -> dict:
        return {"time_step": time_step, "agent_id": agent_id}

    def apply(self, request: ActionRequest) -> ActionResult:
        if self.refuse is not None and request.agent_id == self.refuse:
            return ActionResult.failed(f"{request.agent_id} is not on the board")
        return ActionResult.ok(self.answer(request) if callable(self.answer) else None)

    def state_digest(self) -> str:
        return "0"


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def quiet_run(exp: Experiment, db: Path) -> Run:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunHealthWarning)
        return exp.run(db, progress=False)


# -- health ------------------------------------------------------------------------------------


def test_every_decision_names_an_action_the_world_does_not_have(tmp_path: Path) -> None:
    # A policy written for a grid world, run in the channel world by mistake.
    exp = Experiment(name="lost", world="channel", policy=Mover, agents=3, steps=5)
    with pytest.warns(RunHealthWarning, match=r"every decision failed \(15 of 15\)") as caught:
        run = exp.run(tmp_path / "t.sqlite", progress=False)
    assert len([w for w in caught if issubclass(w.category, RunHealthWarning)]) == 1
    health = run.health
    assert not health.ok and health.failures == 15 and health.success_rate == 0.0
    assert health.problems == (
        "every decision failed (15 of 15); the commonest error (15): unknown action 'move' "
        f"(known: {', '.join(run.actions['error'][0].split('known: ')[1][:-1].split(', '))})",
    )
    assert f"health={health}" in repr(run)
    assert "every decision failed" in run._repr_html_() and "#c00000" in run._repr_html_()
    assert run.summary()["health"][0] == health.problems[0]


def test_a_misspelt_action_in_the_action_space_is_named(tmp_path: Path) -> None:
    # Half the random agents' decisions name "emit_evnt": before, health ok.
    exp = Experiment(name="typo", action_space=["noop", "emit_evnt"], agents=4, steps=10)
    with pytest.warns(RunHealthWarning, match="emit_evnt"):
        run = exp.run(tmp_path / "t.sqlite", progress=False)
    unknown = int((run.actions["action"] == "emit_evnt").sum())
    assert run.health.unknown_actions == unknown > 0
    assert any(
        line.startswith(f"{unknown} of 40 decisions named an action the world does not have: "
                        "unknown action 'emit_evnt'")
        or line.startswith(f"the same error in {unknown} of 40 decisions")
        for line in run.health.problems
    )  # fmt: skip


def test_the_command_line_warns_of_a_misspelt_action(tmp_path: Path) -> None:
    cfg = tmp_path / "typo.yaml"
    cfg.write_text("name: typo\nagents: 3\nsteps: 4\naction_space: [emit_evnt]\n")
    out = run_cli("run", str(cfg), "--db", str(tmp_path / "t.sqlite"))
    assert out.returncode == 0, out.stderr
    warning = [ln for ln in out.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and "every decision failed (12 of 12)" in warning[0]
    assert "unknown action 'emit_evnt'" in warning[0]


def test_the_panel_shows_a_run_where_every_decision_failed_in_red(tmp_path: Path) -> None:
    pytest.importorskip("ipywidgets")
    from vivarium.widgets import ControlPanel

    exp = Experiment(name="lost_panel", world="channel", policy=Mover, agents=2, steps=5)
    panel = ControlPanel(exp, folder=tmp_path)
    run = panel.run()
    assert run is not None and not run.health.ok
    assert "color:#b00" in panel.status.value  # before: "done", in black
    assert "every decision failed (10 of 10)" in panel.status.value


def test_most_decisions_fail_with_one_error_whose_ids_differ(tmp_path: Path) -> None:
    # Messages to agents that do not exist: the ids differ, the error is the same.
    def to_stranger(agent_id: str, t: int) -> dict:
        return {"to": f"agent_{100 + t}"} if t % 4 else {}

    class Sender(Echo):
        def apply(self, request: ActionRequest) -> ActionResult:
            if request.action_name == "send":
                return ActionResult.failed(f"{request.arguments['to']} not found")
            return ActionResult.ok()

    class Policy(Mover):
        def decide(self, **kw: Any) -> Any:
            return ActionRequest(
                run_id=kw["run_id"], time_step=kw["time_step"], agent_id=kw["agent_id"],
                action_name="send" if kw["time_step"] % 4 else "wait",
                arguments=to_stranger(kw["agent_id"], kw["time_step"]),
            )  # fmt: skip

    run = quiet_run(
        Experiment(name="dm", world=Sender, policy=Policy, agents=2, steps=8), tmp_path / "t.sqlite"
    )
    # 12 of 16 decisions are sends, every one refused; waits succeed.
    assert run.health.problems == (
        "the same error in 12 of 16 decisions, of actions that never succeeded: "
        "agent_107 not found (and 5 similar)",
    )


def test_a_crowded_world_refusing_most_moves_is_behaviour_not_a_problem(tmp_path: Path) -> None:
    # The same move is refused 3 times in 4 ("cell (x, y) is taken") and succeeds otherwise.
    class Crowded(Echo):
        def apply(self, request: ActionRequest) -> ActionResult:
            t, i = request.time_step, int(request.agent_id[-3:])
            if (t + i) % 4:
                return ActionResult.failed(f"cell ({t}, {i}) is taken")
            return ActionResult.ok()

    with warnings.catch_warnings():
        warnings.simplefilter("error", RunHealthWarning)
        run = Experiment(name="crowd", world=Crowded, policy=Mover, agents=8, steps=8).run(
            tmp_path / "t.sqlite", progress=False
        )
    health = run.health
    assert health.ok and health.failures == 48 and health.decisions == 64
    assert health.common_error is not None and health.common_error.count == 48


def test_an_agent_the_world_never_lets_act_is_named(tmp_path: Path) -> None:
    exp = Experiment(
        name="filtered", world=Echo, policy=Mover, agents=5, steps=12,
        world_options={"refuse": "agent_003"},
    )  # fmt: skip
    with pytest.warns(RunHealthWarning, match="agent_003"):
        run = exp.run(tmp_path / "t.sqlite", progress=False)
    assert run.health.problems == (
        "1 of 5 agents never acted successfully: agent_003 (0 of 12) "
        "(the run's decisions succeeded 80% of the time)",
    )
    assert [a.agent_id for a in run.health.inactive_agents] == ["agent_003"]


def test_a_short_run_is_not_flagged_for_an_agent_that_failed_by_chance(tmp_path: Path) -> None:
    exp = Experiment(
        name="short", world=Echo, policy=Mover, agents=5, steps=3,
        world_options={"refuse": "agent_003"},
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunHealthWarning)
        run = exp.run(tmp_path / "t.sqlite", progress=False)
    assert run.health.ok and run.health.failures == 3


def test_a_world_that_raises_is_a_bug_not_behaviour(tmp_path: Path) -> None:
    class Fragile(Echo):
        def apply(self, request: ActionRequest) -> ActionResult:
            if request.time_step == 2 and request.agent_id == "agent_001":
                raise ZeroDivisionError("division by zero")
            return ActionResult.ok()

    run = quiet_run(
        Experiment(name="fragile", world=Fragile, policy=Mover, agents=3, steps=10),
        tmp_path / "t.sqlite",
    )
    assert run.health.world_errors == 1
    assert run.health.problems == (
        "1 of 30 decisions failed because the world raised (a bug in its code): "
        "world error: ZeroDivisionError: division by zero",
    )


def test_a_sweep_names_the_broken_runs(tmp_path: Path) -> None:
    exp = Experiment(name="sw", world="channel", policy=Mover, agents=2, steps=5)
    with pytest.warns(Warning, match="completed with problems"):
        sweep = exp.sweep(seed=[1, 2], folder=tmp_path / "s", backend="inline", progress=False)
    assert len(sweep.problems) == 2
    assert all("every decision failed (10 of 10)" in line for line in sweep.problems)


def test_a_world_failing_with_an_exception_object_records_its_text(tmp_path: Path) -> None:
    # ``ActionResult.failed(exc)`` instead of ``failed(str(exc))``: before, a TypeError traceback.
    class Strict(Echo):
        def apply(self, request: ActionRequest) -> ActionResult:
            return ActionResult.failed(KeyError("cell"))  # type: ignore[arg-type]

    run = quiet_run(
        Experiment(name="strict", world=Strict, policy=Mover, agents=2, steps=2),
        tmp_path / "t.sqlite",
    )
    assert run.actions["error"].tolist() == ["'cell'"] * 4


# -- values as the world saw them --------------------------------------------------------------


def test_a_policy_returning_numpy_numbers_records_numbers(tmp_path: Path) -> None:
    def numpy_args(agent_id: str, t: int) -> dict:
        return {"x": np.int64(t), "p": np.float32(0.5), "ok": np.bool_(True)}

    exp = Experiment(
        name="np", world=Echo, policy=Mover, agents=2, steps=2,
        policy_options={"arguments": numpy_args},
    )  # fmt: skip
    run = quiet_run(exp, tmp_path / "t.sqlite")
    recorded = [json.loads(a) for a in run.actions["arguments"]]
    assert recorded == [
        {"ok": True, "p": 0.5, "x": t} for t in (0, 0, 1, 1)
    ]  # before: "0", "0.5", "True"
    assert all(type(r["x"]) is int and type(r["ok"]) is bool for r in recorded)
    frame = run.arguments
    assert frame["x"].tolist() == [0, 0, 1, 1] and frame["ok"].tolist() == [True] * 4


def test_a_reporter_returning_numpy_nan_reads_back_nan(tmp_path: Path) -> None:
    exp = Experiment(
        name="nan", world=Echo, policy=Mover, agents=2, steps=2,
        model_reporters={"mean": lambda w: np.float32("nan"), "inf": lambda w: np.inf},
    )  # fmt: skip
    run = quiet_run(exp, tmp_path / "t.sqlite")
    polars = run.frame("model_vars", "polars")
    # NaN, not a missing value (SQLite stores a NaN as NULL; its kind says it was a float)
    assert polars["mean"].is_nan().all() and polars["mean"].null_count() == 0
    assert run.model_vars["inf"].tolist() == [math.inf] * 3


@pytest.mark.parametrize(
    ("where", "name"),
    [("model_reporters", "step"), ("model_reporters", "run_id"), ("agent_reporters", "agent_id"),
     ("agent_reporters", "step"), ("model_reporters", "seed")],
)  # fmt: skip
def test_a_reporter_named_like_a_frame_column_is_refused_before_step_0(
    tmp_path: Path, where: str, name: str
) -> None:
    db = tmp_path / "t.sqlite"
    with pytest.raises(ConfigError) as err:
        Experiment(name="clash", agents=2, steps=2, **{where: {name: lambda w: [1, 1]}}).run(db)
    assert f"{where}: '{name}' is a column name the" in one_line(err)
    assert f"e.g. '{name}_value'" in one_line(err)
    assert not db.exists()


def test_a_world_reporter_named_step_is_refused_too(tmp_path: Path) -> None:
    class Counted(Echo):
        model_reporters = {"step": lambda w: 1}  # noqa: RUF012

    with pytest.raises(ConfigError, match="model_reporters: 'step' is a column name"):
        Experiment(name="c", world=Counted, policy=Mover, agents=2, steps=2).run(
            tmp_path / "t.sqlite", progress=False
        )


def test_a_reporter_named_like_a_sweep_column_is_refused_before_any_sweep(tmp_path: Path) -> None:
    # A sweep's merged frames start with run, replication and seed: refused when it is given.
    with pytest.raises(ConfigError, match="'replication' is a column name"):
        Experiment(name="s", agents=2, steps=2, agent_reporters={"replication": lambda w: [1, 1]})


def test_a_set_in_the_arguments_is_refused_in_one_line_naming_it(tmp_path: Path) -> None:
    def args(agent_id: str, t: int) -> dict:
        return {"cells": {1, 2}} if t == 2 else {"cells": [1, 2]}

    db = tmp_path / "t.sqlite"
    exp = Experiment(
        name="set", world=Echo, policy=Mover, agents=2, steps=4, policy_options={"arguments": args}
    )
    with pytest.raises(VivariumError) as err:
        exp.run(db, progress=False)
    assert one_line(err) == (
        "agent_000's action 'move' at step 2: the policy's arguments['cells']: is {1, 2} (set), "
        "which JSON cannot hold; give str, int, float, bool, None, or lists and str-keyed "
        "dicts of them"
    )  # before: recorded as the text "{1, 2}"
    run = Run.open(db)
    assert run.metadata["status"] == "failed" and run.metadata["steps_done"] == 2
    assert json.loads(run.actions["arguments"][0]) == {"cells": [1, 2]}


def test_a_result_with_int_keys_is_refused_not_turned_into_text_keys(tmp_path: Path) -> None:
    exp = Experiment(
        name="keys", world=Echo, policy=Mover, agents=1, steps=1,
        world_options={"answer": lambda r: {"counts": {1: 3, 2: 5}}},
    )  # fmt: skip
    with pytest.raises(VivariumError) as err:
        exp.run(tmp_path / "t.sqlite", progress=False)
    assert one_line(err) == (
        "agent_000's action 'move' at step 0: the world's result['counts']: has the key 1 "
        "(int): JSON keys are text, so it would be read back as '1'; use str keys"
    )


def test_an_object_in_the_metadata_is_refused_not_recorded_by_address(tmp_path: Path) -> None:
    class Tagger(Mover):
        def decide(self, **kw: Any) -> Any:
            request = super().decide(**kw)
            return request.model_copy(update={"metadata": {"me": self}})

    with pytest.raises(VivariumError, match=r"the policy's metadata\['me'\]: is <.*Tagger"):
        Experiment(name="obj", world=Echo, policy=Tagger, agents=1, steps=1).run(
            tmp_path / "t.sqlite", progress=False
        )


def test_a_model_reporter_beyond_64_bits_names_the_reporter(tmp_path: Path) -> None:
    exp = Experiment(
        name="big", world=Echo, policy=Mover, agents=1, steps=1,
        model_reporters={"total": lambda w: 2**64},
    )  # fmt: skip
    with pytest.raises(ConfigError) as err:  # before: "cannot write ... Python int too large"
        exp.run(tmp_path / "t.sqlite", progress=False)
    assert one_line(err).startswith(
        "model reporter 'total' before step 0: 18446744073709551616 is outside the 64-bit"
    )


def test_an_agent_reporter_of_large_unsigned_ints_is_refused_not_wrapped(tmp_path: Path) -> None:
    exp = Experiment(
        name="u64", world=Echo, policy=Mover, agents=2, steps=1,
        agent_reporters={"id": lambda w: np.array([5, 2**63 + 5], dtype=np.uint64)},
    )  # fmt: skip
    with pytest.raises(ConfigError) as err:  # before: read back as -9223372036854775803
        exp.run(tmp_path / "t.sqlite", progress=False)
    assert one_line(err).startswith(
        "agent reporter 'id' before step 0, agent_001: 9223372036854775813 is outside"
    )


def test_an_agent_reporter_mixing_booleans_and_numbers_keeps_the_booleans(tmp_path: Path) -> None:
    exp = Experiment(
        name="mix", world=Echo, policy=Mover, agents=2, steps=1,
        agent_reporters={"flag": lambda w: [True, 2]},
    )  # fmt: skip
    run = quiet_run(exp, tmp_path / "t.sqlite")
    con = sqlite3.connect(run.path)
    data = [json.loads(d) for (d,) in con.execute("SELECT data FROM agent_vars ORDER BY step")]
    con.close()
    assert data == [[True, 2], [True, 2]]  # before: packed as integers, [1, 2]


def test_a_seed_in_the_arguments_reads_back_exactly(tmp_path: Path) -> None:
    seeds = {"agent_000": 12276768965003079537, "agent_001": 5}
    exp = Experiment(
        name="seeds", world=Echo, policy=Mover, agents=2, steps=1,
        policy_options={"arguments": lambda a, t: {"seed": seeds[a]}},
    )  # fmt: skip
    run = quiet_run(exp, tmp_path / "t.sqlite")
    assert run.arguments["seed"].tolist() == [12276768965003079537, 5]  # before: 1.2276...e19


def test_arguments_named_like_the_frames_columns_are_kept(tmp_path: Path) -> None:
    exp = Experiment(
        name="named", world=Echo, policy=Mover, agents=2, steps=2,
        policy_options={"arguments": lambda a, t: {"step": 10 + t, "agent_id": "x", "__rows": t}},
    )  # fmt: skip
    frame = quiet_run(exp, tmp_path / "t.sqlite").arguments
    assert frame["step"].tolist() == [0, 0, 1, 1]
    assert frame["argument_step"].tolist() == [10, 10, 11, 11]
    assert frame["argument_agent_id"].tolist() == ["x"] * 4
    assert frame["__rows"].tolist() == [0, 0, 1, 1]  # before: dropped without a word


class Announcer(Echo):
    """A world that posts one message per action; its content is what ``content`` gives."""

    def __init__(self, content: Any = "hello") -> None:
        super().__init__()
        self.content, self.posted = content, []

    def apply(self, request: ActionRequest) -> ActionResult:
        self.posted.append((len(self.posted), request.agent_id, "main", self.content))
        return ActionResult.ok()

    def take_messages(self) -> list:
        out, self.posted = self.posted, []
        return out


@pytest.mark.parametrize("content", [np.int64(3), {"price": 5}, None, 7])
def test_a_message_that_is_not_text_is_refused_in_one_line(tmp_path: Path, content: Any) -> None:
    # Before: np.int64(3) was stored as its 8 raw bytes, 7 read back as "7", a dict or None
    # failed the write with "cannot write ... Error binding parameter 7".
    exp = Experiment(
        name="msg", world=Announcer, policy=Mover, agents=1, steps=1,
        world_options={"content": content},
    )  # fmt: skip
    with pytest.raises(VivariumError) as err:
        exp.run(tmp_path / "t.sqlite", progress=False)
    assert one_line(err).startswith(
        f"message 0 at step 0 from 'agent_000': its content is {content!r:.60} "
        f"({type(content).__name__}), not text"
    )
