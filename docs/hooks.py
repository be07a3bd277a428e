"""MkDocs hooks: pages whose text lives outside ``docs/``, so nothing is written twice.

The README is the guide and becomes the site's first page (``index.md``); the notebooks and the
benchmark results are published at the same relative paths they have in the repository, so the
README's relative links (``benchmarks/RESULTS.md``, ``notebooks/...``) work in the site too.
The layers page is drawn from the import contracts in ``pyproject.toml``, the ones
``lint-imports`` checks, so the picture cannot drift from the rule. The worlds page (observation
keys and actions of each built-in world) is ``vivarium.worlds.docs.worlds_page()``, drawn from
the worlds' code by the same function users call as ``describe``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

from vivarium.worlds.docs import worlds_page

ROOT = Path(__file__).resolve().parents[1]
WORLDS_PAGE = "worlds.md"  # generated: the built-in worlds' observation keys and actions

# Repository files published at the same relative path, so that relative links to them work.
SAME_PATH = [
    "benchmarks/RESULTS.md",
    *sorted(f"notebooks/{p.name}" for p in ROOT.glob("notebooks/*.ipynb")),
]


def layers_page(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The layers page: the layers contract as a diagram, then every other contract's name.

    Args:
        pyproject: The file holding ``[tool.importlinter]``.

    Returns:
        The page as Markdown.
    """
    linter: dict[str, Any] = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    contracts = linter["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")
    root = linter["root_package"]
    rows = [
        "  |  ".join(f"{root}.{name.strip().strip('()')}" for name in layer.split("|"))
        for layer in layers["layers"]
    ]
    lines = [
        "# Layers",
        "",
        "A module imports only from the layers below its own (the arrows point the way imports",
        "go), including imports inside functions. Modules on one line separated by `|` are",
        "independent: neither imports the other. `make test` checks this with `lint-imports`",
        "(import-linter), from the contracts in `pyproject.toml`, which this page is drawn from.",
        "",
        "```text",
        "\n    ↓\n".join(rows),
        "```",
        "",
        "The other contracts:",
        "",
        *[f"- {c['name']}." for c in contracts if c is not layers],
        "",
    ]
    return "\n".join(lines)


@event_priority(100)  # before mkdocs-jupyter, which turns the added notebooks into pages
def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the README (as ``index.md``), the layers and worlds pages, the results, the notebooks.

    Args:
        files: The files MkDocs found in ``docs/``.
        config: The site's configuration.

    Returns:
        The same collection, with the pages that live elsewhere in the repository.
    """
    files.append(File.generated(config, "index.md", abs_src_path=str(ROOT / "README.md")))
    files.append(File.generated(config, "layers.md", content=layers_page()))
    files.append(File.generated(config, WORLDS_PAGE, content=worlds_page()))
    for path in SAME_PATH:
        # A plain File rooted at the repository (not a generated one): mkdocs-jupyter reads the
        # notebook from its source directory.
        files.append(
            File(
                path,
                src_dir=str(ROOT),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
    return files
