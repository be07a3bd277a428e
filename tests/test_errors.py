"""Errors: one hierarchy drawn in ``vivarium.errors``, "fatal" as a type, and missing optional
packages that name the extra to install."""

from __future__ import annotations

import ast
import asyncio
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vivarium.errors
from vivarium.errors import MissingDependency, RunStoppingError, VivariumError
from vivarium.gateways.base import LLMCallError, LLMUnavailable, run_stopper
from vivarium.gateways.cache import AgentTimeoutMismatch, CacheMissError, ReplayedAgentTimeout
from vivarium.optional import install_hint, require

PACKAGE = Path(vivarium.errors.__file__).resolve().parent


def _exception_classes() -> dict[str, str]:
    """Every exception or warning class defined in the package, by name -> module."""
    found: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(b).rpartition(".")[2] for b in node.bases}
            if node.name.endswith(("Error", "Warning")) or bases & {
                "Exception",
                "VivariumError",
                "ConfigError",
                "LLMCallError",
                "ActionError",
                "LedgerError",
                "RunStoppingError",
                "UserWarning",
                "TimeoutError",
            }:
                found[node.name] = module
    return found


def test_the_tree_in_the_docstring_lists_every_exception_class() -> None:
    tree = vivarium.errors.__doc__ or ""
    classes = _exception_classes()
    assert len(classes) > 15, classes
    missing = sorted(name for name in classes if not re.search(rf"\b{name}\b", tree))
    assert not missing, f"add to the tree in vivarium/errors.py: {missing}"
    # each class named with its module when it is not defined in errors.py
    for name, module in classes.items():
        if module != "vivarium.errors":
            assert module in tree, (name, module)


def test_dead_errors_are_gone() -> None:
    assert not hasattr(vivarium.errors, "UnknownNameError")
    assert "UnknownNameError" not in _exception_classes()


# -- "fatal" is a type -------------------------------------------------------------------------
def test_errors_that_stop_the_run_are_of_one_type() -> None:
    unavailable = LLMUnavailable.from_error(LLMCallError("down", kind="connection"))
    miss = CacheMissError("abc", "m1", "cassette.sqlite")
    stopping = [unavailable, miss, AgentTimeoutMismatch("cancelled"), ReplayedAgentTimeout("t")]
    for error in stopping:
        assert isinstance(error, RunStoppingError) and isinstance(error, VivariumError)
        assert run_stopper(error) is error  # checked by type, never by an attribute
        assert not hasattr(error, "fatal")
    assert isinstance(stopping[-1], TimeoutError)  # the engine's timeout path still sees it
    assert isinstance(miss, LLMCallError) and isinstance(unavailable, LLMCallError)
    # an agent's own failure is not run-stopping: it becomes a recorded fallback
    rejected = LLMCallError("bad request", kind="bad_request")
    assert not isinstance(rejected, RunStoppingError) and run_stopper(rejected) is None


def test_no_fatal_attribute_is_read_anywhere() -> None:
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        assert 'getattr(exc, "fatal"' not in text, path
        assert not re.search(r"\.fatal\b|\bfatal = (True|False)", text), path


# -- missing optional packages name the extra --------------------------------------------------
def hide(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Make ``package`` (and every submodule already loaded) fail to import."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, package, None)


def hint(package: str, extra: str) -> str:
    return f'{package} is not installed: pip install "vivarium-lab[{extra}]"'


def test_require_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    assert require("json").dumps([1]) == "[1]"
    hide(monkeypatch, "matplotlib")
    with pytest.raises(MissingDependency) as info:
        require("matplotlib.pyplot")
    assert str(info.value) == hint("matplotlib", "notebooks")
    assert isinstance(info.value, ImportError) and isinstance(info.value, VivariumError)
    assert "\n" not in str(info.value)
    assert install_hint("somepkg") == "somepkg is not installed: pip install somepkg"


def test_a_package_missing_its_own_dependency_names_that_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "wrapper_pkg.py").write_text("import inner_missing_pkg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    hide(monkeypatch, "inner_missing_pkg")
    with pytest.raises(
        MissingDependency, match="wrapper_pkg cannot be imported: inner_missing_pkg"
    ):
        require("wrapper_pkg", "llm")


def _plots(name: str) -> Callable[[], Any]:
    def call() -> Any:
        from vivarium.analysis import plots

        return getattr(plots, name)(None)

    return call


def _paper_style() -> None:
    from vivarium.analysis.style import paper_style

    with paper_style():
        pass


def _panel() -> None:
    from vivarium.widgets import ControlPanel

    ControlPanel()


def _langgraph() -> None:
    from vivarium.gateways import MockLLMGateway
    from vivarium.policies.cognitive import CognitiveAgentPolicy

    CognitiveAgentPolicy(MockLLMGateway(seed=1), model="mock")


def _aiohttp() -> None:
    from vivarium.gateways.openai_http import apost

    asyncio.run(apost("http://127.0.0.1:9/v1/chat/completions", b"{}", {}, 1.0))


def _ray() -> None:
    from vivarium.sweep.backends import execute_ray

    execute_ray([], lambda result: None, max_workers=1, ray_address=None)


@pytest.mark.parametrize(
    ("package", "extra", "call"),
    [
        ("matplotlib", "notebooks", _plots("behaviour_timeline")),
        ("matplotlib", "notebooks", _plots("action_mix")),
        ("matplotlib", "notebooks", _plots("success_curves")),
        ("matplotlib", "notebooks", _plots("pivot_raster")),
        ("matplotlib", "notebooks", _paper_style),
        ("ipywidgets", "notebooks", _panel),
        ("langgraph", "llm", _langgraph),
        ("aiohttp", "llm", _aiohttp),
        ("ray", "scale", _ray),
    ],
    ids=[
        "behaviour_timeline",
        "action_mix",
        "success_curves",
        "pivot_raster",
        "paper_style",
        "ipywidgets",
        "langgraph",
        "aiohttp",
        "ray",
    ],
)
def test_a_missing_optional_package_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, package: str, extra: str, call: Callable[[], Any]
) -> None:
    hide(monkeypatch, package)
    with pytest.raises(MissingDependency) as info:
        call()
    assert str(info.value) == hint(package, extra)


def test_a_missing_litellm_is_an_llm_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vivarium.gateways import litellm_gateway

    monkeypatch.setattr(litellm_gateway, "_litellm", None)
    hide(monkeypatch, "litellm")
    with pytest.raises(LLMCallError) as info:
        litellm_gateway._import_litellm()
    # an LLM error of kind "config": the run stops (resumably) instead of recording fallbacks
    assert info.value.kind == "config" and info.value.infrastructure
    assert str(info.value) == hint("litellm", "llm")


def test_langgraph_missing_falls_back_to_the_plain_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    from vivarium.gateways.mock import MockLLMGateway
    from vivarium.policies.cognitive import (
        CognitiveAgentPolicy,
        SimpleCognitivePolicy,
        default_cognitive_policy,
        langgraph_available,
    )

    assert type(default_cognitive_policy(MockLLMGateway(seed=1), "mock")) is CognitiveAgentPolicy
    hide(monkeypatch, "langgraph")
    assert langgraph_available() is False
    policy = default_cognitive_policy(MockLLMGateway(seed=1), "mock")
    assert type(policy) is SimpleCognitivePolicy
