"""Misuse of resuming, as a new user attacks it: each ends in the run that would have been (the
committed steps kept), or in one clear line with the trace left as it was.

The mechanism is ``vivarium.experiment.runner.resume_run`` (its property: ``tests/test_resume_property.py``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAIServer, default_reply
from tests.support.public_goods import run_status
from vivarium import ActionRequest, ActionResult, Experiment, Run
from vivarium.cli import main
from vivarium.errors import (
    ConfigError,
    ResumeDiverged,
    ResumedWarning,
    RunHealthWarning,
    RunInterrupted,
    TraceError,
)
from vivarium.experiment.runner import resume_run, run_experiment
from vivarium.trace.db import TraceDb
from vivarium.trace.validate import validate_trace
from vivarium.worlds import InMemoryChannel


def tables(path: Path, skip: tuple[str, ...] = ("interruptions",)) -> dict[str, list[Any]]:
    """Every table's rows (sorted: the contents, not the file's bytes)."""
    con = sqlite3.connect(path)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            n: sorted(con.execute(f"SELECT * FROM {n}").fetchall(), key=repr)
            for n in names
            if n not in skip
        }
    finally:
        con.close()


def stops(path: Path) -> list[tuple[int, str]]:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT step, ended FROM interruptions ORDER BY id").fetchall()
    finally:
        con.close()


def ctrl_c_at(step: int) -> Any:
    """An ``on_start`` that makes the world raise Ctrl-C once, when step ``step`` applies."""

    def on_start(engine: Any) -> None:
        world, fired = engine.world, []

        def stopping(original: Any) -> Any:
            def apply(*args: Any) -> Any:
                if engine.next_step == step and not fired:
                    fired.append(True)
                    raise KeyboardInterrupt
                return original(*args)

            return apply

        world.apply = stopping(world.apply)
        if hasattr(world, "apply_batch"):  # random agents decide a whole step at once
            world.apply_batch = stopping(world.apply_batch)

    return on_start


def interrupt(exp: Experiment, db: Path, step: int) -> None:
    """Run ``exp`` into ``db`` and press Ctrl-C while step ``step`` is under way."""
    with pytest.raises(KeyboardInterrupt), exp._started() as config:
        run_experiment(config, db, progress=False, on_start=ctrl_c_at(step))


# -- a world of one's own without snapshot() ---------------------------------------------------
class Jar:
    """A user's world with state and no ``snapshot``/``restore``."""

    def __init__(self) -> None:
        self.beans = 0

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"beans": self.beans}

    def apply(self, request: ActionRequest) -> ActionResult:
        self.beans += 1 if request.action_name == "emit_event" else 0
        return ActionResult.ok({"beans": self.beans})

    def state_digest(self) -> str:
        return str(self.beans)


class Alternate:
    """A user's policy: ``emit_event`` and ``noop`` in turn."""

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        action = "emit_event" if (time_step + len(agent_id)) % 2 == 0 else "noop"
        return ActionRequest(
            run_id=run_id, time_step=time_step, agent_id=agent_id, action_name=action
        )


def test_checkpoint_every_with_a_world_that_cannot_save_its_state_is_refused(
    tmp_path: Path,
) -> None:
    """Before: accepted; the checkpoints held no world, and a resume went on from a fresh jar,
    its trace diverging while validate said ok. After: one line before anything is written."""
    db = tmp_path / "jar.sqlite"
    exp = Experiment(name="jar", world=Jar, policy=Alternate, agents=2, steps=6, checkpoint_every=2)
    with pytest.raises(ConfigError) as info:
        exp.run(db, progress=False)
    line = str(info.value)
    assert "\n" not in line and "checkpoint_every=2" in line and "snapshot()" in line
    assert "leave checkpoint_every unset" in line
    assert not db.exists()


def test_a_world_that_cannot_save_its_state_resumes_exactly_without_checkpoints(
    tmp_path: Path,
) -> None:
    exp = Experiment(name="jar", world=Jar, policy=Alternate, agents=2, steps=6, seed=3)
    full, cut = tmp_path / "full.sqlite", tmp_path / "cut.sqlite"
    exp.run(full, progress=False)
    interrupt(exp, cut, 4)
    run = Run.open(cut).resume(progress=False)
    assert run.metadata["status"] == "complete"
    assert tables(cut) == tables(full)  # the jar's beans counted from step 0, not from a fresh jar
    assert validate_trace(cut).status == "ok"


# -- the same cell run again after Ctrl-C -----------------------------------------------------
def sampling(index: int, body: dict[str, Any]) -> dict[str, Any]:
    """A model at temperature > 0: a different reply every time it is asked."""
    reply = default_reply(index, body)
    call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
    if call["name"] == "post_message":
        call["arguments"] = f'{{"content": "sampled {random.random():.12f}"}}'
    return reply


def llm_exp(url: str, steps: int = 6, **llm: Any) -> Experiment:
    return Experiment(
        name="sampled",
        policy="cognitive",
        agents=2,
        steps=steps,
        seed=3,
        scheduling="simultaneous",
        llm={"model": "openai/fake", "api_base": url, "force_tool": True, **llm},
    )


def test_running_the_cell_again_after_ctrl_c_resumes_and_keeps_what_a_sampling_model_said(
    tmp_path: Path,
) -> None:
    """Before: the second ``exp.run()`` started at step 0 and threw the committed steps away;
    with a model that samples they were lost for good. After: it resumes from the step it
    stopped at (one warning says so, and how to start over), every committed row kept."""
    db = tmp_path / "sampled.sqlite"
    with FakeOpenAIServer(reply=sampling) as server:
        exp = llm_exp(server.base_url)
        interrupt(exp, db, 3)
        kept = tables(db, skip=("interruptions", "runs", "meta"))
        asked = server.request_count
        with pytest.warns(ResumedWarning) as seen:
            run = exp.run(db, progress=False)
        # Only the steps not committed asked the model again: the others were re-executed
        # from the trace's own replies.
        assert server.request_count - asked == 2 * 3
    (warning,) = seen
    text = str(warning.message)
    assert "\n" not in text and "resumed from step 3" in text and "overwrite=True" in text
    assert run.metadata["status"] == "complete" and run.health.ok
    now = tables(db, skip=("interruptions", "runs", "meta"))
    for name in ("steps", "decisions", "messages"):
        assert set(kept[name]) <= set(now[name]), name  # nothing committed was replaced
    assert stops(db) == [(3, "interrupted")]
    assert "resumed after 1 interruption (step 3)" in run.health.notes[0]
    # What the model said in the step the Ctrl-C discarded is kept, apart from the result.
    (stop,) = run.interruptions.to_dict("records")
    assert (stop["decisions"], stop["llm_calls"]) == (0, 2)
    said = {c["reply"]["tool_calls"][0]["function"]["arguments"] for c in stop["discarded"]}
    posted = set(run.messages.loc[run.messages["step"] == 3, "content"])
    assert len(said) == 2 and all("sampled" in a for a in said)
    assert not any(json.loads(a)["content"] in posted for a in said)  # the redo sampled anew


def test_overwrite_starts_the_interrupted_run_over(tmp_path: Path) -> None:
    db = tmp_path / "over.sqlite"
    exp = Experiment(name="over", agents=2, steps=5, seed=1)
    interrupt(exp, db, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResumedWarning)  # no resume: started over
        run = exp.run(db, overwrite=True, progress=False)
    assert run.metadata["status"] == "complete"
    assert run.interruptions.empty  # a new run: no history of the old one


# -- an LLM server that fails 1 request in 5 ----------------------------------------------------
def test_an_llm_run_against_a_flaky_server_completes_by_resuming_from_its_last_step(
    tmp_path: Path,
) -> None:
    """Before: no checkpoints unless asked, so every resume restarted at step 0, and against a
    server failing 20% of requests a 10-step run of 2 agents (20 calls in a row) practically
    never completed. After: each resume goes on from the last committed step, by default."""
    faults = random.Random(5)
    rule = lambda i, b: faults.choice(["500", "close_mid_body"]) if faults.random() < 0.2 else None  # noqa: E731
    db = tmp_path / "flaky.sqlite"
    interrupted = 0
    with FakeOpenAIServer(faults=rule) as server:
        exp = llm_exp(server.base_url, steps=10, num_retries=0)
        done_before = -1
        for _ in range(40):
            try:
                run = exp.run(db, progress=False) if interrupted == 0 else resume_run(db)
                break
            except RunInterrupted:
                interrupted += 1
                state, done = run_status(db)
                assert state == "interrupted" and done >= done_before  # never goes back
                done_before = done
        else:
            pytest.fail("the run never completed")
    assert interrupted >= 1  # the server did fail
    assert run.metadata["status"] == "complete"
    assert [s for s, _ in stops(db)] == sorted(s for s, _ in stops(db))
    assert len(stops(db)) == interrupted
    assert validate_trace(db).status == "ok"


# -- Ctrl-C twice, and a resume of a resumed run ----------------------------------------------
def test_ctrl_c_while_resuming_leaves_the_trace_as_it_was_and_resumes_later(tmp_path: Path) -> None:
    exp = Experiment(name="twice", agents=3, steps=8, seed=2, action_space=["noop", "post_message"])
    full, cut = tmp_path / "full.sqlite", tmp_path / "cut.sqlite"
    exp.run(full, progress=False)
    interrupt(exp, cut, 5)
    before = tables(cut)
    with pytest.raises(KeyboardInterrupt):  # pressed again while re-executing step 2
        resume_run(cut, progress=False, on_start=ctrl_c_at(2))
    assert tables(cut) == before and run_status(cut) == ("interrupted", 5)
    with pytest.raises(KeyboardInterrupt):  # and once more, live this time, at step 6
        resume_run(cut, progress=False, on_start=ctrl_c_at(6))
    assert run_status(cut) == ("interrupted", 6)
    resume_run(cut, progress=False)  # the resume of a resumed run
    assert tables(cut) == tables(full)
    assert stops(cut) == [(5, "interrupted"), (5, "interrupted"), (6, "interrupted")]


# -- what the identity cannot see changed --------------------------------------------------------
class Recipe:
    """A user's world that reads a file at run time (the identity cannot see it)."""

    def __init__(self, seed: int) -> None:
        self.seed, self.total = seed, 0

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"total": self.total}

    def apply(self, request: ActionRequest) -> ActionResult:
        self.total += int(Path(os.environ["VVM_TEST_RECIPE"]).read_text())
        return ActionResult.ok({"total": self.total})

    def state_digest(self) -> str:
        return str(self.total)


def test_a_resume_that_would_not_reproduce_the_run_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file the world reads changed while the run was stopped: re-executing step 0 gives
    another world. Before: the resume went on, joining two different runs under one id, and
    validate said ok. After: refused, naming the step and what differs, nothing changed."""
    recipe = tmp_path / "recipe.txt"
    recipe.write_text("2")
    monkeypatch.setenv("VVM_TEST_RECIPE", str(recipe))
    db = tmp_path / "recipe.sqlite"
    exp = Experiment(name="recipe", world=Recipe, policy=Alternate, agents=2, steps=6)
    interrupt(exp, db, 3)
    before = tables(db, skip=())
    recipe.write_text("3")
    with pytest.raises(ResumeDiverged) as info:
        Run.open(db).resume(progress=False)
    line = str(info.value)
    assert "\n" not in line and info.value.step == 0
    assert "at step 0 the decision of agent_000 (#0) differs in its result: now " in line
    assert """now '{"total":3}', recorded '{"total":2}'""" in line
    assert "overwrite=True" in line and "not reproducible" in line
    assert tables(db, skip=()) == before  # not a row, not the status
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResumedWarning)
        with pytest.raises(ResumeDiverged):  # the cell run again says the same
            exp.run(db, progress=False)
    run = exp.run(db, overwrite=True, progress=False)  # as the line says: start over
    assert run.metadata["status"] == "complete"


class Unowned:
    """A user's policy drawing from Python's shared generator: not reproducible from a seed."""

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        action = random.choice(["noop", "post_message", "emit_event"])
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=action,
            arguments={"content": "hi"} if action == "post_message" else {},
        )


def test_a_policy_with_randomness_it_does_not_own_is_named_when_resumed(tmp_path: Path) -> None:
    db = tmp_path / "unowned.sqlite"
    exp = Experiment(name="unowned", policy=Unowned, agents=3, steps=8)
    random.seed(1)
    interrupt(exp, db, 6)
    before = tables(db, skip=())
    with pytest.raises(ResumeDiverged) as info:
        resume_run(db)
    assert "the decision of agent_" in str(info.value) and "differs in its action" in str(
        info.value
    )
    assert tables(db, skip=()) == before


def test_resume_with_changed_world_options_is_another_run_not_a_resume(tmp_path: Path) -> None:
    db = tmp_path / "opts.sqlite"
    exp = Experiment(name="opts", world="ecology", agents=2, steps=5, seed=4)
    interrupt(exp, db, 2)
    other = Experiment(exp.config, world_options={"starting_scrip": 7})
    with pytest.raises(TraceError) as info:  # the named file holds the interrupted run
        other.run(db, progress=False)
    assert "\n" not in str(info.value) and "not this one" in str(info.value)
    assert run_status(db) == ("interrupted", 2)  # left as it was, still resumable
    assert Run.open(db).resume(progress=False).metadata["status"] == "complete"


def test_a_complete_run_run_again_is_not_resumed_and_not_changed(tmp_path: Path) -> None:
    db = tmp_path / "done.sqlite"
    exp = Experiment(name="done", agents=2, steps=3, seed=4)
    exp.run(db, progress=False)
    before = tables(db, skip=())
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResumedWarning)
        exp.run(db, progress=False)
        Run.open(db).resume()
    assert tables(db, skip=()) == before


def test_a_second_process_cannot_resume_while_the_first_still_writes(tmp_path: Path) -> None:
    db = tmp_path / "busy.sqlite"
    exp = Experiment(name="busy", agents=2, steps=5, seed=4)
    interrupt(exp, db, 2)
    holder = TraceDb.for_resume(db, from_step=2)  # as a resume in another process holds it
    try:
        with pytest.raises(TraceError, match="is being written by another run") as info:
            resume_run(db)
        assert "\n" not in str(info.value)
        with pytest.raises(TraceError, match="being written"):
            exp.run(db, progress=False)
    finally:
        holder.close()
    assert run_status(db) == ("interrupted", 2)
    with pytest.warns(ResumedWarning):
        assert exp.run(db, progress=False).metadata["status"] == "complete"


def test_a_killed_process_is_recorded_when_its_run_is_resumed(tmp_path: Path) -> None:
    """``kill -9`` leaves the trace ``running`` and records nothing: the resume records it."""
    exp = Experiment(name="killed", agents=2, steps=6, seed=8, checkpoint_every=2)
    full, cut = tmp_path / "full.sqlite", tmp_path / "cut.sqlite"
    exp.run(full, progress=False)
    trace = TraceDb(cut)
    exp.build(trace).run(3, finish=False)  # the process dies here
    trace.close()
    assert run_status(cut) == ("running", 3)
    with pytest.warns(ResumedWarning, match="resumed from step 3"):
        exp.run(cut, progress=False)
    assert tables(cut) == tables(full)
    assert stops(cut) == [(3, "killed")]
    assert validate_trace(cut).notes == ["resumed after 1 interruption (step 3)"]


def test_a_run_stopped_before_its_first_step_resumes_from_step_0(tmp_path: Path) -> None:
    exp = Experiment(name="zero", agents=2, steps=4, seed=8)
    full, cut = tmp_path / "full.sqlite", tmp_path / "cut.sqlite"
    exp.run(full, progress=False)
    interrupt(exp, cut, 0)
    assert run_status(cut) == ("interrupted", 0)
    with pytest.warns(ResumedWarning, match="resumed from step 0"):
        exp.run(cut, progress=False)
    assert tables(cut) == tables(full) and stops(cut) == [(0, "interrupted")]


def test_a_sweep_run_again_resumes_its_interrupted_run_exactly(tmp_path: Path) -> None:
    """Before: a sweep resumed only runs with a checkpoint, from it, and redid the others from
    step 0. After: its worker goes through the exact resume, committed steps kept."""
    exp = Experiment(name="sw", agents=2, steps=5, action_space=["noop", "post_message"])
    clean = exp.sweep(seed=[1, 2], folder=tmp_path / "clean", backend="inline")
    folder = tmp_path / "cut"
    first = exp.sweep(seed=[1, 2], folder=folder, backend="inline")
    victim = first.runs[1].path
    victim.unlink()  # its run, stopped by Ctrl-C at step 3 instead
    interrupt(Experiment(exp.config, seed=first.runs[1].metadata["config"]["seed"]), victim, 3)
    again = exp.sweep(seed=[1, 2], folder=folder, backend="inline")
    actions = dict(
        zip(again.index["path"].map(Path).map(lambda p: p.name), again.index["action"], strict=True)
    )
    assert actions[victim.name] == "resumed"
    by_name = {run.path.name: run.path for run in clean.runs}
    assert tables(victim) == tables(by_name[victim.name])
    assert stops(victim) == [(3, "interrupted")]


def test_an_autonomous_run_resumes_from_where_it_stopped(tmp_path: Path) -> None:
    """Before: redone from its start, its committed steps rewritten. After: re-executed on its
    virtual clock (the wake-ups and windows are rebuilt) and continued from the first step not
    committed, with its LLM calls answered from the trace."""
    exp = Experiment(
        name="auto",
        policy="cognitive",
        agents=3,
        seed=2,
        mode="autonomous",
        autonomous={"duration": 20, "think_s": 2},
        llm={"mock": True},
    )
    full, cut = tmp_path / "full.sqlite", tmp_path / "cut.sqlite"
    exp.run(full, progress=False)
    interrupt(exp, cut, 6)
    kept = tables(cut, skip=("interruptions", "runs", "meta"))
    asked: list[int] = []

    def spy(engine: Any) -> None:  # the model is asked only for steps not committed
        stack = engine.policies[0].gateway
        sync, concurrent = stack.complete, stack.acomplete

        def complete(request: Any) -> Any:
            asked.append(engine.next_step)
            return sync(request)

        async def acomplete(request: Any) -> Any:
            asked.append(engine.next_step)
            return await concurrent(request)

        stack.complete, stack.acomplete = complete, acomplete

    resume_run(cut, progress=False, on_start=spy)
    assert asked and min(asked) == 6
    assert tables(cut) == tables(full) and stops(cut) == [(6, "interrupted")]
    assert set(kept["llm_calls"]) <= set(tables(cut)["llm_calls"])


# -- SIGTERM, and vvm run again ------------------------------------------------------------------
class TermAtStep3:
    """Posts; once, at step 3, the process gets SIGTERM (a scheduler ending the job)."""

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        marker = Path(os.environ["VVM_TEST_MARKER"])  # read at run time: outside the identity
        if time_step == 3 and not marker.exists():
            marker.touch()
            signal.raise_signal(signal.SIGTERM)
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="post_message",
            arguments={"content": f"{agent_id} at {time_step}"},
        )


def test_sigterm_then_the_same_run_again_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VVM_TEST_MARKER", str(tmp_path / "marker"))
    exp = Experiment(name="term", policy=TermAtStep3, agents=2, steps=6)
    full, cut = tmp_path / "full.sqlite", tmp_path / "cut.sqlite"
    (tmp_path / "marker").touch()
    exp.run(full, progress=False)
    (tmp_path / "marker").unlink()
    with pytest.raises(KeyboardInterrupt):  # SIGTERM stops a run as Ctrl-C does
        exp.run(cut, progress=False)
    assert run_status(cut) == ("interrupted", 3)
    with pytest.warns(ResumedWarning):
        exp.run(cut, progress=False)
    assert tables(cut) == tables(full)
    ((step, ended),) = stops(cut)
    assert (step, ended) == (3, "interrupted")


def test_vvm_run_again_after_ctrl_c_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    full, cut = tmp_path / "full.sqlite", tmp_path / "cut.sqlite"
    flags = ["--steps", "6", "--agents", "2", "--no-progress", "--no-validate"]
    assert main(["phase1", *flags, "--db", str(full)]) == 0
    original, fired = InMemoryChannel.apply_batch, []

    def apply_batch(self: InMemoryChannel, decisions: Any, agent_ids: Any) -> Any:
        if decisions.time_step == 4 and not fired:  # Ctrl-C in the middle of step 4
            fired.append(True)
            raise KeyboardInterrupt
        return original(self, decisions, agent_ids)

    monkeypatch.setattr(InMemoryChannel, "apply_batch", apply_batch)
    assert main(["phase1", *flags, "--db", str(cut)]) == 130
    monkeypatch.setattr(InMemoryChannel, "apply_batch", original)
    capsys.readouterr()
    assert main(["phase1", *flags, "--db", str(cut)]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "resumed from step 4" in line]
    assert (
        len(notes) == 1 and notes[0].startswith("vvm phase1: note: ") and "--overwrite" in notes[0]
    )
    assert tables(cut) == tables(full)


def test_the_inspector_shows_where_the_run_was_resumed(tmp_path: Path) -> None:
    pytest.importorskip("ipywidgets")
    db = tmp_path / "seen.sqlite"
    exp = Experiment(name="seen", agents=2, steps=5, seed=4, action_space=["noop", "post_message"])
    interrupt(exp, db, 2)
    run = Run.open(db).resume(progress=False)
    inspector = run.inspect()
    assert "resumed after 1 interruption (step 2)" in inspector.status.value
    inspector.select("agent_001", 2)
    assert "resumed here" in inspector.detail.value
    assert "interrupted at this step" in inspector.detail.value
    assert "KeyboardInterrupt" in inspector.detail.value
    inspector.select("agent_001", 1)
    assert "resumed here" not in inspector.detail.value


def test_a_failed_resume_leaves_health_saying_so_and_ok_after(tmp_path: Path) -> None:
    """A resumed run is a whole result: its interruptions are a note, never a problem."""
    db = tmp_path / "notes.sqlite"
    exp = Experiment(name="notes", agents=2, steps=5, seed=4)
    interrupt(exp, db, 2)
    health = Run.open(db).health
    assert not health.ok and health.notes == ("1 interruption so far (step 2)",)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunHealthWarning)  # no health warning once resumed
        run = Run.open(db).resume(progress=False)
    assert run.health.ok and run.health.notes == ("resumed after 1 interruption (step 2)",)
    assert "history=resumed after 1 interruption (step 2)" in repr(run)
