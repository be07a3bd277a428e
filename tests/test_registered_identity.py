"""A policy registered by name is part of its runs' identity, as a class given as an object is.

The new-user pass of issue 16: editing a registered factory (or what it builds) gave the same
run id, so a rerun overwrote the old trace, a sweep handed back the old traces as the new
results, and a resume went on with the new code (steps of two policies in one trace).
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vivarium import Experiment, Run
from vivarium.errors import ConfigError
from vivarium.experiment.build import POLICIES, register_policy
from vivarium.types import ActionRequest

WORD = "PIRATE"  # read by Styled.decide: a global the factory's code reaches


class Styled:
    """Posts ``WORD`` each step (the registered code under test)."""

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Post the word."""
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="post_message",
            arguments={"content": f"SPEAK LIKE A {WORD}"},
        )


def _register() -> None:
    register_policy("styled_t", lambda config, agent, shared: Styled())


def _word(monkeypatch: pytest.MonkeyPatch, word: str) -> None:
    """Change the word and register again, as running the script or the cell again does."""
    monkeypatch.setattr(sys.modules[__name__], "WORD", word)
    _register()


@pytest.fixture
def styled(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """``styled_t`` registered; WORD put back and the name dropped afterwards."""
    monkeypatch.setattr(sys.modules[__name__], "WORD", "PIRATE")
    _register()
    try:
        yield monkeypatch
    finally:
        POLICIES.pop("styled_t", None)


def _exp(**kw: Any) -> Experiment:
    fields = {"name": "styled", "policy": "styled_t", "agents": 2, "steps": 4, "seed": 1}
    return Experiment(**{**fields, **kw})


def _words(run: Any) -> set[str]:
    return set(run.messages["content"])


def test_the_run_id_follows_the_registered_code(styled: pytest.MonkeyPatch) -> None:
    pirate = _exp().config.resolved_run_id()
    assert _exp().config.resolved_run_id() == pirate  # the same code: the same id
    _word(styled, "NINJA")
    ninja = _exp().config.resolved_run_id()
    assert ninja != pirate
    _word(styled, "PIRATE")
    assert _exp().config.resolved_run_id() == pirate
    # a built-in policy's id is what it was: no digest is added to its identity
    assert "code_digests" not in _exp(policy="random").config.identity()
    assert "policy:styled_t" in _exp().config.identity()["code_digests"]


def test_a_changed_factory_does_not_overwrite_the_old_trace(
    styled: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first = _exp().run(folder=tmp_path, progress=False)
    _word(styled, "NINJA")
    with pytest.warns(Warning, match="holds run"):
        second = _exp().run(folder=tmp_path, progress=False)
    assert second.path != first.path and second.run_id != first.run_id
    assert _words(Run.open(first.path)) == {"SPEAK LIKE A PIRATE"}
    assert _words(Run.open(second.path)) == {"SPEAK LIKE A NINJA"}
    # a path named for it is refused, not replaced
    with pytest.raises(Exception, match="holds run"):
        _exp().run(first.path, progress=False)


def test_a_resume_with_changed_registered_code_is_refused(
    styled: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def ctrl_c_after_step_2(step: int, record: Any) -> None:
        if step == 2:  # as Ctrl-C does, from outside the code under test (not part of its id)
            raise KeyboardInterrupt

    path = tmp_path / "s8.sqlite"
    with pytest.raises(KeyboardInterrupt):
        _exp(checkpoint_every=2).run(path, progress=False, on_step=ctrl_c_after_step_2)
    assert Run.open(path).metadata["status"] == "interrupted"
    _word(styled, "NINJA")
    with pytest.raises(ConfigError, match=r"policy 'styled_t' has changed since the run") as e:
        Run.open(path).resume(progress=False)
    assert "\n" not in str(e.value)
    assert Run.open(path).metadata["status"] == "interrupted"  # left as it was
    _word(styled, "PIRATE")
    done = Run.open(path).resume(progress=False)
    assert done.metadata["status"] == "complete" and done.health.ok
    assert _words(done) == {"SPEAK LIKE A PIRATE"}


def _register_cell(word: str) -> None:
    """``styled_cell`` registered from a notebook cell (``__main__``: sent to workers by value)."""
    cell = {"__name__": "__main__"}
    code = f"""
        from vivarium.experiment.build import register_policy
        from vivarium.types import ActionRequest
        WORD = {word!r}
        class Styled:
            def decide(self, *, run_id, time_step, agent_id, observation):
                return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                                     action_name="post_message",
                                     arguments={{"content": f"SPEAK LIKE A {{WORD}}"}})
        register_policy("styled_cell", lambda config, agent, shared: Styled())
        """
    exec(textwrap.dedent(code), cell)


def test_a_sweep_reruns_nothing_stale_after_the_factory_changed(tmp_path: Path) -> None:
    folder = tmp_path / "sw"
    try:
        _register_cell("PIRATE")
        first = _exp(policy="styled_cell").sweep(seed=[1, 2], folder=folder, max_workers=2)
        _register_cell("NINJA")
        second = _exp(policy="styled_cell").sweep(seed=[1, 2], folder=folder, max_workers=2)
        _register_cell("PIRATE")
        again = _exp(policy="styled_cell").sweep(seed=[1, 2], folder=folder, max_workers=2)
    finally:
        POLICIES.pop("styled_cell", None)
    assert first.ok and second.ok and again.ok
    assert set(first.index["run_id"]).isdisjoint(second.index["run_id"])
    assert list(again.index["run_id"]) == list(first.index["run_id"])
    assert set(second.messages["content"]) == {"SPEAK LIKE A NINJA"}
    for path, run_id in zip(second.index["path"], second.index["run_id"], strict=True):
        # the workers' run ids are the sweep's (the digest went with the factory)
        assert Run.open(path).run_id == run_id
    for path in first.index["path"]:
        assert _words(Run.open(path)) == {"SPEAK LIKE A PIRATE"}


def test_a_script_factory_in_main_keeps_its_id_from_process_to_process(tmp_path: Path) -> None:
    # The digest must not depend on the process (no ids, no hash seeds): run a script twice.
    import subprocess

    script = tmp_path / "s.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from vivarium import Experiment
            from vivarium.experiment.build import register_policy
            from vivarium.policies.random import RandomAgentPolicy
            WORD = sys.argv[1]
            class P(RandomAgentPolicy):
                def decide(self, **kw):
                    return super().decide(**kw) if WORD else None
            register_policy("p", lambda config, agent, shared: P.from_seed(1, ["noop"]))
            print(Experiment(name="s", policy="p", agents=2, steps=1).config.resolved_run_id())
            """
        )
    )

    def run_id(word: str) -> str:
        out = subprocess.run(
            [sys.executable, str(script), word], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()

    assert run_id("A") == run_id("A") != run_id("B")


# A script whose factory closes over a cached gateway stack (its cassette holds the process id)
# and over an object of the script's own (its state is the script's: it still counts).
_GATEWAY_SCRIPT = """
import sys
from vivarium import Experiment, Run
from vivarium.experiment.build import register_policy
from vivarium.gateways.stack import GatewaySettings, build_gateway
from vivarium.types import ActionRequest

class Style:
    def __init__(self, word):
        self.word = word

class Speaker:
    def __init__(self, gateway, style):
        self.gateway, self.style = gateway, style
    def decide(self, *, run_id, time_step, agent_id, observation):
        if time_step == 3 and sys.argv[2] == "stop":
            raise KeyboardInterrupt  # as Ctrl-C does
        return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                             action_name="post_message",
                             arguments={"content": f"SPEAK LIKE A {self.style.word}"})

def speaker(cassette, word):
    gateway = build_gateway(GatewaySettings(mock=True, cache=cassette), seed=1)
    style = Style(word)
    return lambda config, agent, shared: Speaker(gateway, style)

folder = sys.argv[3]
register_policy("speaker", speaker(folder + "/c.cassette", sys.argv[1]))
exp = Experiment(name="gw", policy="speaker", agents=2, steps=6, seed=1, checkpoint_every=2)
if sys.argv[2] == "id":
    print(exp.config.resolved_run_id())
elif sys.argv[2] == "stop":
    try:
        exp.run(folder + "/r.sqlite", progress=False)
    except KeyboardInterrupt:
        print(Run.open(folder + "/r.sqlite").metadata["status"])
else:
    run = Run.open(folder + "/r.sqlite").resume(progress=False)
    print(run.metadata["status"], sorted(set(run.messages["content"])), run.run_id)
"""


def _gateway_script(tmp_path: Path, word: str, mode: str) -> str:
    import subprocess

    script = tmp_path / "gw.py"
    script.write_text(_GATEWAY_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), word, mode, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_a_factory_holding_a_cached_gateway_keeps_its_id_from_process_to_process(
    tmp_path: Path,
) -> None:
    first = _gateway_script(tmp_path, "PIRATE", "id")
    assert first.startswith("gw-")
    assert _gateway_script(tmp_path, "PIRATE", "id") == first
    # the script's own object still counts: another word, another run
    assert _gateway_script(tmp_path, "NINJA", "id") != first


def test_a_run_stopped_with_a_cached_gateway_resumes_in_a_new_process(tmp_path: Path) -> None:
    assert _gateway_script(tmp_path, "PIRATE", "stop") == "interrupted"
    run_id = _gateway_script(tmp_path, "PIRATE", "id")
    done = _gateway_script(tmp_path, "PIRATE", "resume")
    assert done == f"complete ['SPEAK LIKE A PIRATE'] {run_id}"


def test_objects_that_hold_a_process_are_named_by_type_and_value_objects_by_value(
    tmp_path: Path,
) -> None:
    from vivarium.experiment.digest import fingerprint
    from vivarium.gateways.cache import Cassette
    from vivarium.gateways.stack import GatewaySettings

    cassette = Cassette(tmp_path / "c.cassette")
    assert fingerprint(cassette) == "<vivarium.gateways.cache.Cassette>"
    # a library value object (a dataclass, a pydantic model) counts by its fields
    a, b = GatewaySettings(mock=True, timeout=10), GatewaySettings(mock=True, timeout=20)
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a) == fingerprint(GatewaySettings(mock=True, timeout=10))
