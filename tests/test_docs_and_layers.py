"""The shape of the project, checked: the import layers hold, the docs build, the public face is documented.

The layers are written as import-linter contracts in ``pyproject.toml`` (``[tool.importlinter]``);
the docs site is ``mkdocs.yml`` + ``docs/``. Both tools come from extras (``dev``, ``docs``) that
``make test`` installs; without them these tests are skipped, saying which extra is missing.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vivarium

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _require(module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None:
        message = f"{module} is not installed: pip install -e '.[{extra}]' (make test does)"
        if os.environ.get("VIVARIUM_REQUIRE_DOCS_TOOLS") == "1":  # set by make test: no skip
            pytest.fail(message)
        pytest.skip(message)


def test_import_layers_contract_is_kept() -> None:
    """``lint-imports`` finds every contract kept (layers, no cycles, engine and trace apart)."""
    _require("importlinter", "dev")
    done = subprocess.run(
        [str(BIN / "lint-imports"), "--no-logo", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_docs_build_strict(tmp_path: Path) -> None:
    """The site builds with ``--strict``: no broken link, reference or notebook."""
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_jupyter"):
        _require(module, "docs")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The guide is the README, the notebooks are rendered, the reference has the public names,
    # the layers page is drawn from the contract.
    index = (site / "index.html").read_text()
    assert "make test" in index
    rendered = sorted(p.parent.name for p in (site / "notebooks").glob("*/index.html"))
    assert rendered == sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    facade = (site / "reference" / "vivarium" / "index.html").read_text()
    assert "Experiment" in facade and "stable_agent_seed" in facade
    assert "vivarium.engine" in (site / "layers" / "index.html").read_text()


@pytest.mark.parametrize("name", sorted(set(vivarium.__all__) - {"__version__"}))
def test_public_name_has_a_docstring(name: str) -> None:
    """Every name ``vivarium`` exports says what it is for (its own docstring, not a base's)."""
    obj = getattr(vivarium, name)
    doc = obj.__doc__ if inspect.isclass(obj) else inspect.getdoc(obj)
    assert doc and doc.strip(), f"vivarium.{name} has no docstring"


# -- no import circle at any level -----------------------------------------------------------------
def _modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The modules ``name`` imports (first line of each), however it imports them.

    At module level, in a function (a lazy import), under ``TYPE_CHECKING``, through
    ``importlib.import_module("vivarium...")``, and through a package's table of lazy names
    (``_LAZY``/``_MODULES`` in its ``__init__``). ``from a.b import c`` names ``a.b.c`` when that
    is a module, else ``a.b``. A module's implicit import of its parent packages is left out.
    """
    import ast

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    targets: list[tuple[str, int]] = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append((full if full in modules else base, node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets.append((node.args[0].value, node.lineno))
    if path.name == "__init__.py":  # the lazy tables: names -> the modules that define them
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("_LAZY", "_MODULES") for t in node.targets
            ):
                for text in ast.walk(node.value):
                    if isinstance(text, ast.Constant) and isinstance(text.value, str):
                        value = text.value
                        dotted = value if value.startswith("vivarium.") else f"{name}.{value}"
                        if dotted in modules:
                            targets.append((dotted, node.lineno))
    edges: dict[str, int] = {}
    for target, line in targets:
        module = known(target) if target.startswith("vivarium") else None
        if module is not None and module != name:
            edges.setdefault(module, line)
    return edges


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_import_graph_finds_a_lazy_circle(tmp_path: Path) -> None:
    """The check below sees a circle closed by a function-level or TYPE_CHECKING import."""
    pkg = tmp_path / "vivarium"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text('_LAZY = {"Thing": "vivarium.engine.b"}\n')
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "a.py").write_text("from vivarium.engine.b import f\n")
    (pkg / "engine" / "b.py").write_text("def f():\n    from vivarium.engine import a\n")
    (pkg / "engine" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n"
    )
    (pkg / "engine" / "d.py").write_text(
        "import importlib\nimportlib.import_module('vivarium.engine.c')\n"
    )
    modules = _modules(pkg)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph["vivarium"] == {"vivarium.engine.b": 1}
    assert _cycles(graph) == [
        ["vivarium.engine.a", "vivarium.engine.b"],
        ["vivarium.engine.c", "vivarium.engine.d"],
    ]


def test_no_import_circle_at_any_level() -> None:
    """No module of ``vivarium`` imports itself back, lazily or not (``acyclic_siblings`` sees
    circles between packages only, and no function-level or ``TYPE_CHECKING`` import)."""
    modules = _modules(ROOT / "vivarium")
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "vivarium.engine.lean" in graph["vivarium.engine.engine"]  # the graph is read
    circles = [
        " -> ".join(f"{a} (l.{graph[a][b]})" for a, b in zip(c, [*c[1:], c[0]], strict=True))
        for c in _cycles(graph)
    ]
    assert circles == [], "\n".join(circles)
