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
