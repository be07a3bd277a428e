"""Every code block of README.md runs, in order, as a new user would type it.

The README is the first thing a researcher copies from, so it must not drift from the code.
Blocks run top to bottom in one scratch folder that holds a copy of ``data/`` (as a fresh clone
does), sharing one Python namespace like a notebook session:

- ``python`` blocks are executed; ``pycon`` blocks are doctests (their printed output and error
  lines are compared).
- ``bash`` blocks run one command at a time (``\\`` continues a line, ``# ...`` after a command is
  a comment). A command must exit 0 unless its comment says ``(exits N)``. ``make X`` is checked
  with ``make -n X`` (running ``make test`` from inside ``make test`` would recurse).
- ``yaml`` blocks whose first line is ``# PATH`` are written to PATH; ``# PATH (abridged)`` is
  compared, key by key, with the real file at PATH.

Two substitutions keep the run offline and short, and are the only liberties taken: the LLM
server the README names (``http://127.0.0.1:8080/v1``) is a local fake OpenAI server started
here, and benchmark commands get small sizes (``QUICK``) and never rewrite ``RESULTS.md``.
"""

from __future__ import annotations

import doctest
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fake_openai import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_SERVER = "http://127.0.0.1:8080/v1"
QUICK = {
    "benchmarks/phase1.py": ["--agents", "50", "--steps", "20", "--repeat", "1"],
    "benchmarks/own_models_vs_mesa.py": ["--quick", "--no-write"],
    "benchmarks/phase1_vs_mesa.py": ["--sizes", "100x20", "--repeat", "1", "--no-write"],
    "benchmarks/llm_scale.py": [
        "--agents", "40", "--steps", "2", "--max-concurrency", "10", "--no-write",
    ],
    "benchmarks/trace_sql.py": ["--sizes", "40x10", "--repeat", "1", "--no-write"],
    "benchmarks/fixed_cost.py": ["--runs", "3", "--no-write"],
    "benchmarks/fork_cost.py": [
        "--agents", "3", "--steps", "4", "--latency-ms", "1", "--repeat", "1", "--no-write",
    ],
    "benchmarks/sweep_vs_mesa.py": ["--runs", "4", "--workers", "1", "--no-write"],
    "benchmarks/llm_concurrency.py": [
        "--agents", "4", "--steps", "2", "--latency-ms", "5", "--repeats", "1", "--no-write",
    ],
}  # fmt: skip
FENCE = re.compile(r"^```(\w*)\s*$")
EXPECTED_EXIT = re.compile(r"\(exits (\d+)\)")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # 1-based line of the opening fence

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.lang})"


def readme_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, in order."""
    blocks: list[Block] = []
    lang: str | None = None
    start = 0
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if lang is None and match:
            lang, start, body = match.group(1) or "text", number, []
        elif lang is not None and line.strip() == "```":
            blocks.append(Block(lang, "\n".join(body) + "\n", start))
            lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"README.md:{start}: unclosed code fence"
    return blocks


def shell_commands(code: str) -> list[tuple[str, int]]:
    """(command, expected exit code) for each command of a bash block."""
    commands: list[tuple[str, int]] = []
    pending = ""
    for raw in code.splitlines():
        line = raw.rstrip()
        if pending:
            line = pending + " " + line.strip()
            pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        command, _, comment = line.partition(" #")
        if line.lstrip().startswith("#") or not command.strip():
            continue
        expected = EXPECTED_EXIT.search(comment)
        commands.append((command.strip(), int(expected.group(1)) if expected else 0))
    assert not pending, "a bash block ends with a line continuation"
    return commands


BLOCKS = [b for b in readme_blocks(README.read_text(encoding="utf-8")) if b.lang != "text"]


class Session:
    """The scratch folder, the shared namespace and the fake LLM server of one README run."""

    def __init__(self, folder: Path, server_url: str) -> None:
        self.folder = folder
        self.server_url = server_url
        self.namespace: dict[str, Any] = {"__name__": "__main__"}
        bin_dir = str(Path(sys.executable).parent)
        self.env = {
            **os.environ,
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "VIVARIUM_PROGRESS": "0",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }

    def localise(self, code: str) -> str:
        return code.replace(README_SERVER, self.server_url)

    def run_python(self, block: Block) -> None:
        code = compile(self.localise(block.code), str(block), "exec")
        exec(code, self.namespace)  # noqa: S102 - the README's own code, run as a user would

    def run_pycon(self, block: Block) -> None:
        parser = doctest.DocTestParser()
        test = parser.get_doctest(
            self.localise(block.code), self.namespace, str(block), str(README), block.line
        )
        runner = doctest.DocTestRunner(
            optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
        )
        out: list[str] = []
        runner.run(test, out=out.append, clear_globs=False)
        assert runner.failures == 0, "".join(out)

    def run_bash(self, block: Block) -> None:
        for command, expected in shell_commands(self.localise(block.code)):
            argv = shlex.split(command)
            if argv[0] == "make":
                argv = ["make", "-n", "-C", str(ROOT), *argv[1:]]
            elif argv[0] in {".venv/bin/python", "python"}:
                argv = [sys.executable, *argv[1:]]
                script = argv[1]
                if script in QUICK:
                    argv = [argv[0], str(ROOT / script), *QUICK[script]]
            done = subprocess.run(
                argv, cwd=self.folder, env=self.env, capture_output=True, text=True, timeout=600
            )
            assert done.returncode == expected, (
                f"{block}: `{command}` exited {done.returncode}, expected {expected}\n"
                f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
            )

    def run_yaml(self, block: Block) -> None:
        first = block.code.splitlines()[0]
        match = re.match(r"#\s*(\S+)(\s*\(abridged\))?", first)
        assert match, f"{block}: a yaml block starts with `# PATH` (the file it is)"
        path = self.folder / match.group(1)
        shown = yaml.safe_load(block.code)
        if match.group(2):  # the block shows part of a real file: every key shown must match
            real = yaml.safe_load(path.read_text(encoding="utf-8"))
            for key, value in shown.items():
                assert real.get(key) == value, f"{block}: {key} differs from {path.name}"
        else:
            path.write_text(block.code, encoding="utf-8")


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    folder = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "data", folder / "data")
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        with FakeOpenAIServer() as server:
            yield Session(folder, server.base_url)
    finally:
        # A Ray the Sweeps block started is left running: Ray cannot be started again in a
        # process that shut it down (see tests.conftest.ray_once, which finds it started).
        os.chdir(cwd)


def test_readme_has_blocks_of_known_kinds() -> None:
    assert len(BLOCKS) >= 10
    assert {b.lang for b in BLOCKS} <= {"python", "pycon", "bash", "yaml"}, {b.lang for b in BLOCKS}


def test_shell_commands_are_split_as_a_user_types_them() -> None:
    code = "vvm a --x 1   # first\n# a comment\nvvm b \\\n    --y 2  # exits 3? (exits 3)\n"
    assert shell_commands(code) == [("vvm a --x 1", 0), ("vvm b --y 2", 3)]


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_readme_block_runs(block: Block, session: Session) -> None:
    getattr(session, f"run_{block.lang}")(block)
