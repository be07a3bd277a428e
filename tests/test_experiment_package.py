"""The way from a config to a run is one package, and the older module paths still import.

The properties: the package's modules are the flow its docstring reads, in that order, and the
import contract keeps each module to the ones before it; no module of the flow is left at the
package root; every older path is the very module it moved to (so a monkeypatch or a pickle
through either is seen through both), and an older path that never existed still fails.
"""

from __future__ import annotations

import importlib
import pickle
import re
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "vivarium" / "experiment"
OLDER = {
    "vivarium.config": "vivarium.experiment.config",
    "vivarium.config_sections": "vivarium.experiment.sections",
    "vivarium.identity": "vivarium.experiment.digest",
    "vivarium.objects": "vivarium.experiment.objects",
    "vivarium.plan": "vivarium.experiment.plan",
    "vivarium.build": "vivarium.experiment.build",
    "vivarium.runner": "vivarium.experiment.runner",
}


def _flow_in_docstring() -> list[str]:
    text = (PACKAGE / "__init__.py").read_text(encoding="utf-8")
    return re.findall(r"^\d+\. ``(\w+)``", text, flags=re.MULTILINE)


def test_the_package_holds_the_flow_its_docstring_reads() -> None:
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    flow = _flow_in_docstring()
    assert flow == ["config", "overrides", "sections", "objects", "plan", "build", "identity",
                    "paths", "runner", "interview", "bundle"]  # fmt: skip
    assert sorted([*flow, "digest"]) == modules


def test_the_contract_orders_the_package_as_the_flow() -> None:
    """The layers contract lists every module, later steps above earlier ones, and the digest
    all of them use at the bottom."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "experiment-flow"
    ]
    assert contract["containers"] == ["vivarium.experiment"] and contract["exhaustive"]
    layers = [name.strip() for layer in contract["layers"] for name in layer.split("|")]
    flow = _flow_in_docstring()
    assert sorted(layers) == sorted([*flow, "digest"])
    position = {
        name: i for i, layer in enumerate(contract["layers"]) for name in layer.split(" | ")
    }
    later_above = [position[a] <= position[b] for a, b in zip(flow[1:], flow, strict=False)]
    assert all(later_above), position
    assert position["digest"] == len(contract["layers"]) - 1


def test_no_step_of_the_flow_is_left_at_the_package_root() -> None:
    root = {p.stem for p in (ROOT / "vivarium").glob("*.py")}
    assert not root & {name.rpartition(".")[2] for name in OLDER}
    assert not root & {"experiment", "config_sections"}


@pytest.mark.parametrize("older", sorted(OLDER))
def test_an_older_path_is_the_module_it_moved_to(older: str) -> None:
    assert importlib.import_module(older) is importlib.import_module(OLDER[older])


def test_older_paths_work_in_a_new_process_first_thing() -> None:
    """``from vivarium.config import X`` as a script's first line, before anything of vivarium
    is imported, and a change made through the older path is seen through the newer."""
    code = (
        "from vivarium.build import register_world, WORLDS\n"
        "from vivarium.config import ExperimentConfig\n"
        "import vivarium.experiment.build as new\n"
        "register_world('mine', lambda config, shared: None)\n"
        "assert 'mine' in new.WORLDS and WORLDS is new.WORLDS\n"
        "from vivarium.experiment import Experiment, ExperimentConfig as same\n"
        "assert same is ExperimentConfig and Experiment.__module__ == 'vivarium.facade'\n"
        "import vivarium\n"
        "assert vivarium.register_policy is new.register_policy\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_monkeypatch_through_the_older_path_reaches_the_newer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import vivarium.experiment.runner as runner

    monkeypatch.setattr("vivarium.runner.progress_enabled", lambda progress: "patched")
    assert runner.progress_enabled(None) == "patched"


def test_a_config_pickled_names_the_newer_path_and_loads() -> None:
    from vivarium.config import ExperimentConfig

    config = ExperimentConfig(name="p", agents=2, steps=3)
    data = pickle.dumps(config)
    assert b"vivarium.experiment.config" in data
    assert pickle.loads(data) == config


def test_a_name_that_never_existed_still_fails() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("vivarium.no_such_module")
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        importlib.import_module("vivarium.experiment").Nothing  # noqa: B018
