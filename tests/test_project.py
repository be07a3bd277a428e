"""Project files: the conda environment and pyproject name the same dependencies."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(spec: str) -> str:
    return re.split(r"[<>=!~\[ ;]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _normalise(spec: str) -> str:
    return re.sub(r"\s+", "", spec).lower().replace("_", "-")


def test_environment_yml_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        wanted |= set(extra)
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    listed: set[str] = set()
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            listed |= {d for d in dep["pip"] if not d.startswith("-")}
        elif _name(dep) not in {"python", "pip"}:
            listed.add(dep)
    assert {_normalise(d) for d in listed} == {_normalise(d) for d in wanted}


def test_ci_runs_make_test() -> None:
    text = (ROOT / ".ci" / "run").read_text()
    assert "make test" in text


def test_readme_names_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
