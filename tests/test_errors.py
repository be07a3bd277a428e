"""Errors: one hierarchy drawn in ``vivarium.errors``, "fatal" as a type, and missing optional
packages that name the extra to install."""

from __future__ import annotations

import ast
import asyncio
import builtins
import importlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vivarium.errors
from vivarium.errors import MissingDependency, ResumeDiverged, RunStoppingError, VivariumError
from vivarium.gateways.base import LLMCallError, LLMUnavailable, run_stopper
from vivarium.gateways.cache import CacheMissError, ReplayedAgentTimeout
from vivarium.optional import install_hint, require

PACKAGE = Path(vivarium.errors.__file__).resolve().parent


def _exception_classes() -> dict[str, str]:
    """Every exception or warning class defined in the package, by name -> module.

    Read from the source (every ``class`` statement, nested ones too), whatever its name: a
    class is one when a base is a built-in exception or warning, or another such class.
    """
    defined: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rpartition(".")[2] for b in node.bases]
                defined[(module, node.name)] = bases
    found: dict[str, str] = {}
    while True:
        more = {
            (module, name)
            for (module, name), bases in defined.items()
            if name not in found and any(_builtin_exception(b) or b in found for b in bases)
        }
        if not more:
            return found
        for module, name in more:
            assert name not in found, f"two exception classes named {name}"
            found[name] = module


def _builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


_ROOT = re.compile(r"^(?P<name>[A-Z]\w+)$")
_ENTRY = re.compile(r"^(?P<rails>[│ ]*)[├└]── (?P<name>\w+)(?: \((?P<bases>[\w, ]+)\))?")
_MODULE = re.compile(r"\((vivarium(?:\.\w+)+)\)")


def _drawn_tree(doc: str) -> dict[str, tuple[str, set[str], str]]:
    """The tree drawn in ``doc``: name -> (base drawn above it, its other bases, its module)."""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]  # the literal block
    stack: list[str] = []
    entries: dict[str, list[Any]] = {}
    current = ""
    for line in (raw[4:] for raw in block.splitlines()):
        if root := _ROOT.match(line):
            assert _builtin_exception(root["name"]), f"a root is a built-in: {line}"
            stack, current = [root["name"]], ""
        elif entry := _ENTRY.match(line):
            depth = len(entry["rails"]) // 4 + 1
            del stack[depth:]
            current = entry["name"]
            assert current not in entries, f"{current} is drawn twice"
            others = {b.strip() for b in (entry["bases"] or "").split(",") if b.strip()}
            entries[current] = [stack[depth - 1], others, line[entry.end() :]]
            stack.append(current)
        elif current:  # the entry's description goes on
            assert not line.strip(" │").startswith(("├", "└")), line
            entries[current][2] += " " + line.strip(" │")
    return {
        name: (parent, others, (_MODULE.findall(text) or ["vivarium.errors"])[-1])
        for name, (parent, others, text) in entries.items()
    }


def _differences(drawn: dict[str, tuple[str, set[str], str]], code: dict[str, str]) -> list[str]:
    """What the drawn tree says that the code does not (empty: the tree is the code)."""
    problems = [f"not in the tree: {name}" for name in sorted(set(code) - set(drawn))]
    problems += [f"in the tree only: {name}" for name in sorted(set(drawn) - set(code))]
    for name, (parent, others, module) in sorted(drawn.items()):
        if name not in code:
            continue
        if code[name] != module:
            problems.append(f"{name} is defined in {code[name]}, drawn in {module}")
            continue
        cls = getattr(importlib.import_module(module), name)
        bases = {b.__name__ for b in cls.__bases__}
        if bases != {parent, *others}:
            problems.append(f"{name}({', '.join(sorted(bases))}) drawn as {parent} + {others}")
    return problems


def test_the_tree_in_the_docstring_is_the_code() -> None:
    """Every exception and warning class anywhere in the package is drawn, at its place (its
    bases, its module), and everything drawn is defined: both ways, against the code."""
    code = _exception_classes()
    assert {"Interrupted", "WireError", "StepFailed", "ServerWarning"} <= set(code)
    assert len(code) > 30, code
    assert _differences(_drawn_tree(vivarium.errors.__doc__ or ""), code) == []


def test_the_tree_check_finds_a_class_left_out_or_misplaced() -> None:
    doc = vivarium.errors.__doc__ or ""
    code = _exception_classes()
    drawn = _drawn_tree(doc)
    leaves = set(drawn) - {parent for parent, _, _ in drawn.values()}
    assert {"Interrupted", "CassetteMixError", "ServerWarning"} <= leaves
    for name in leaves:  # each one left out is found
        lines = [ln for ln in doc.splitlines() if not re.search(rf"[├└]── {name}\b", ln)]
        assert f"not in the tree: {name}" in _differences(_drawn_tree("\n".join(lines)), code)
    moved = doc.replace("│   │   └── ReplayedAgentTimeout", "│   │   └── CachedTimeout")
    assert "in the tree only: CachedTimeout" in _differences(_drawn_tree(moved), code)
    wrong = doc.replace("LLMUnavailable (RunStoppingError)", "LLMUnavailable")
    assert any(p.startswith("LLMUnavailable(") for p in _differences(_drawn_tree(wrong), code))


def test_dead_errors_are_gone() -> None:
    assert not hasattr(vivarium.errors, "UnknownNameError")
    assert "UnknownNameError" not in _exception_classes()


# -- "fatal" is a type -------------------------------------------------------------------------
def test_errors_that_stop_the_run_are_of_one_type() -> None:
    unavailable = LLMUnavailable.from_error(LLMCallError("down", kind="connection"))
    miss = CacheMissError("abc", "m1", "cassette.sqlite")
    cut = CacheMissError("abc", "m1", "c.sqlite", cut_short="cancelled: agent timeout after 2 s")
    diverged = ResumeDiverged("its LLM request abc is not the one recorded at this step")
    stopping = [unavailable, miss, cut, diverged, ReplayedAgentTimeout("t")]
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
    from vivarium.gateways import litellm_lib

    monkeypatch.setattr(litellm_lib, "_litellm", None)
    hide(monkeypatch, "litellm")
    with pytest.raises(LLMCallError) as info:
        litellm_lib.import_litellm()
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
