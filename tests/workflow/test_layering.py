"""The workflow's place in the layers: it imports no world, its modules form no circle, and the
sandbox and the ledger stand alone. Checked over every import statement, lazy ones included."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import vivarium

PACKAGE = Path(vivarium.__file__).resolve().parent


def imports_of(path: Path) -> set[str]:
    """Every vivarium module ``path`` imports, at module level, inside functions or under
    ``TYPE_CHECKING`` (``from vivarium import sandbox`` counts as ``vivarium.sandbox``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("vivarium")}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_graph(folder: str) -> dict[str, set[str]]:
    """Imports among the modules of one package folder."""
    paths = sorted((PACKAGE / folder).glob("*.py"))
    names = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p) & names - {module_name(p)} for p in paths}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``graph``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_workflow_imports_no_world() -> None:
    for path in sorted((PACKAGE / "workflow").glob("*.py")):
        worlds = sorted(m for m in imports_of(path) if m.startswith("vivarium.worlds"))
        assert not worlds, f"{path.name} imports {worlds}: take the world's registry instead"


def test_workflow_modules_form_no_circle() -> None:
    graph = package_graph("workflow")
    assert "vivarium.workflow.prompt" not in graph["vivarium.workflow.config"]
    assert cycle(graph) is None, cycle(graph)


def test_the_sandbox_stands_alone() -> None:
    graph = package_graph("sandbox")
    assert cycle(graph) is None, cycle(graph)
    for path in sorted((PACKAGE / "sandbox").glob("*.py")):
        outside = {
            m
            for m in imports_of(path)
            if not m.startswith(("vivarium.sandbox", "vivarium.errors")) and m != "vivarium"
        }
        assert not outside, f"sandbox/{path.name} imports {sorted(outside)}"


def test_the_ledger_stands_alone() -> None:
    imported = imports_of(PACKAGE / "worlds" / "ledger.py")
    assert not any(m.startswith("vivarium.worlds.ecology") for m in imported), imported
    assert "vivarium.worlds.ledger" in imports_of(PACKAGE / "worlds" / "ecology.py")


def test_a_workflow_decision_loads_no_ecology_world(tmp_path: Path) -> None:
    """A workflow agent used alone never reaches for the ecology world's actions."""
    code = f"""
import sys
from pathlib import Path
from tests.support.scripted import ScriptedChat
from tests.workflow.wf_helpers import act, agent_data, observation, write_agent
from vivarium.workflow import WorkflowPolicy, load_agent

spec = load_agent(write_agent(Path({str(tmp_path)!r}) / "agent", agent_data()))
policy = WorkflowPolicy(spec, ScriptedChat([act("noop")]))
request = policy.decide(run_id="r", time_step=0, agent_id="tester", observation=observation())
assert request.action_name == "noop", request
loaded = sorted(m for m in sys.modules if m.startswith("vivarium.worlds.ecology"))
assert not loaded, loaded
"""
    root = PACKAGE.parent
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert done.returncode == 0, done.stderr
