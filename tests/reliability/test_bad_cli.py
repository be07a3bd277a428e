"""The command line: every wrong flag or value, for every subcommand, exits 2 with one line on
stderr naming the command, and no traceback. Cases are generated from the parser itself (each
subcommand x each flag x bad values of its kind), run in-process; a few run as real processes.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from vivarium import Experiment
from vivarium.cli import build_parser, main
from vivarium.trace.db import TraceDb

NOT_NUMBERS = ["abc", "", " ", "1.5", "1e3", "nan", "0x1F", "½", "1 2"]
NOT_FLOATS = ["abc", "", "nan", "inf", "-inf", "1e999", "1,5"]
HUGE = "9" * 40
# Flags whose values have an upper bound: a huge value must be refused, not run.
BOUNDED = {"--steps", "--agents", "--seed", "--max-tokens", "--max-concurrency",
           "--num-retries", "--agent-retries"}  # fmt: skip
FLOAT_BAD = {
    "--temperature": ["-1", "2.5"],
    "--timeout": ["0", "-1"],
    "--agent-timeout": ["0", "-2"],
    "--mock-latency-ms": ["-1"],
    "--duration": ["0", "-5"],
}
TEXT_BAD = {
    "--run-id": ["", "bad id", "x/y", "a" * 300, ".hidden"],
    "--model": [""],
    "--agent": ["", "agent_9", "a b"],
    "question": ["", "   "],
    "--grid": ["noequals", "=1", "steps=", "bogusfield=1", "steps=a,b", "agents=0"],
    "--override": ["noequals", "=1", "run.steps", "nosection.x=1", "run.stepz=1", "run.steps=-1"],
    "--set": ["noequals", "=1", "stepz=3", "steps=-1", "llm..x=1", "seed=a", "fork_of=1"],
    "--set-agent": ["noequals", "agent_009.system_prompt=x", "agent_000.colour=red", "x"],
    "--endpoint": ["", "nothing://x", "http://127.0.0.1:9"],
    "--header": ["noequals", "=x"],
}
TEXT_FREE = {"--api-base", "--api-key", "--system-prompt", "--force-tool", "--ray-address"}
SKIP: set[tuple[str, str]] = set()


class Files:
    """Things that are not what a flag wants: folders, foreign files, a file where a folder
    should be, missing paths, and a trace for commands that need one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folder = root / "a-folder"
        self.folder.mkdir()
        self.text = root / "notes.txt"
        self.text.write_text("not a trace, not a config, not a cassette\n")
        self.empty = root / "empty.sqlite"
        self.empty.write_bytes(b"")
        self.foreign = root / "foreign.sqlite"
        con = sqlite3.connect(self.foreign)
        con.execute("CREATE TABLE t (x)")
        con.commit()
        con.close()
        self.under_file = self.text / "x.sqlite"
        self.missing = root / "missing" / "nothing.here"
        self.trace = root / "done.sqlite"
        Experiment(agents=1, steps=2).run(self.trace, progress=False)
        self.unstarted = root / "unstarted.sqlite"
        TraceDb(self.unstarted).close()
        self.config = root / "tiny.yaml"
        self.config.write_text("steps: 1\nagents: 1\n")
        self.bad_config = root / "bad.yaml"
        self.bad_config.write_text("steps: [\n")
        self.list_config = root / "list.yaml"
        self.list_config.write_text("- 1\n- 2\n")
        self.unknown_config = root / "unknown.yaml"
        self.unknown_config.write_text("stepz: 3\n")
        self.aam_config = root / "aam.json"  # aam's sectioned config, for `vvm experiment`
        self.aam_config.write_text(
            '{"run": {"steps": 1, "agents": 1}, "policy": {"kind": "random"}}'
        )
        self.db = root / "out" / "run.sqlite"
        llm = Experiment(agents=2, steps=4, policy="cognitive", llm={"mock": True})
        self.llm_partial = root / "llm-partial.sqlite"
        trace = TraceDb(self.llm_partial)
        llm.build(trace).run(2, finish=False)
        trace.close()
        self.copies = 0

    def bundle(self) -> Path:
        """A bundle of the finished trace (made once)."""
        from vivarium.experiment.bundle import make_bundle

        path = self.root / "study.zip"
        if not path.exists():
            make_bundle([self.trace], path)
        return path

    def partial_copy(self) -> Path:
        """A fresh copy of an interrupted LLM run: resume flags matter for it."""
        self.copies += 1
        path = self.root / "partials" / f"{self.copies}.sqlite"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(self.llm_partial.read_bytes())
        return path

    def fingerprint(self) -> dict[str, str]:
        files = (self.text, self.empty, self.foreign, self.trace, self.config, self.bad_config)
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}

    def bad_paths(self, flag: str) -> list[Path]:
        if flag in ("--db",):
            return [self.folder, self.text, self.foreign, self.under_file]
        if flag == "--cache":
            return [self.folder, self.text, self.foreign, self.under_file]
        if flag in ("--folder", "--out", "--export-parquet", "--runs-dir", "--otel", "--keep"):
            return [self.text, self.under_file]
        if flag == "--data":
            return [self.missing, self.text, self.folder]
        if flag in ("config", "--config"):
            return [self.missing, self.folder, self.trace, self.bad_config, self.list_config,
                    self.unknown_config, self.text]  # fmt: skip
        if (
            flag == "db"
        ):  # resume, validate, interview (validate: a never-started run is incomplete)
            return [self.missing, self.folder, self.text, self.empty, self.foreign]
        if flag in ("a", "b"):  # diff: a folder beside a trace, or no trace at all
            return [self.missing, self.folder, self.text, self.empty, self.foreign]
        if flag in ("paths", "archive"):  # bundle's traces, verify's archive
            return [self.missing, self.text, self.empty, self.foreign]
        raise AssertionError(f"no bad paths for {flag}")

    def base(self, command: str) -> list[str]:
        """Arguments that make the command valid and tiny: the flag under test comes last and
        overrides them, so anything wrongly accepted finishes at once."""
        small = ["--steps", "1", "--agents", "1", "--no-progress"]
        return {
            "phase1": [*small, "--db", str(self.db)],
            "phase2": [*small, "--db", str(self.db), "--mock-llm"],
            "run": [str(self.config), *small, "--db", str(self.db)],
            "sweep": [
                str(self.config),
                *small,
                "--folder",
                str(self.root / "sw"),
                "--backend",
                "inline",
            ],  # fmt: skip
            "experiment": ["--config", str(self.aam_config), "--db", str(self.db), "--no-progress"],
            "resume": [str(self.partial_copy()), "--no-progress"],
            "validate": [str(self.trace)],
            "interview": [str(self.llm_partial), "Why?", "--agent", "agent_000", "--step", "0"],
            "fork": [
                str(self.trace),
                "--at-step",
                "1",
                "--out",
                str(self.root / "fork.sqlite"),
                "--no-progress",
            ],  # fmt: skip
            "figures": ["--out", str(self.root / "figs"), "--data", str(self.missing)],
            "diff": [str(self.trace), str(self.trace)],
            "bundle": [str(self.trace), "--out", str(self.root / "b.zip"), "--no-progress"],
            "verify": [str(self.bundle()), "--no-progress"],
            "export": [str(self.trace), "--otel", str(self.root / "run.otlp.json")],
            "report": [str(self.trace), "--out", str(self.root / "run.html")],
        }[command]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _minimum(action: argparse.Action) -> int | None:
    try:
        return inspect.getclosurevars(action.type).nonlocals.get("minimum")
    except TypeError:
        return None


def cases(files: Files) -> Iterator[tuple[str, list[str]]]:
    """(description, argv) for every wrong flag or value the parser can be given."""
    commands = subcommands()
    all_flags = {f for p in commands.values() for a in p._actions for f in a.option_strings}
    for command, parser in commands.items():
        base = files.base(command)
        if command == "resume":
            yield "resume a never-started run", [command, str(files.unstarted)]
        mine = {f for a in parser._actions for f in a.option_strings}
        for flag in sorted(all_flags - mine - {"-h", "--help"}):  # another command's flag
            yield f"{command} {flag} (not its flag)", [command, *base, flag, "1"]
        yield f"{command} unknown flag", [command, *base, "--frobnicate"]
        yield f"{command} unknown short flag", [command, *base, "-Z"]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            name = action.option_strings[0] if action.option_strings else action.dest
            base = files.base(command)  # fresh for each flag (a resume must find work to do)
            if (command, name) in SKIP:
                continue
            values: list[str] = []
            if isinstance(action, argparse._StoreTrueAction):
                yield f"{command} {name}=yes", [command, *base, f"{name}=yes"]
                continue
            if action.option_strings and action.nargs is None:
                yield f"{command} {name} without a value", [command, *base, name]
            if action.choices:
                values = ["bogus", "", str(next(iter(action.choices))).upper() + "X"]
            elif getattr(action.type, "__name__", "") == "parse":  # the integer flags
                minimum = _minimum(action)
                values = [*NOT_NUMBERS, str((minimum or 0) - 1), "-99999999999999999999"]
                if name in BOUNDED:
                    values.append(HUGE)
            elif action.type is float:
                values = [*NOT_FLOATS, *FLOAT_BAD.get(name, [])]
            elif action.type is Path:
                values = [str(p) for p in files.bad_paths(name)]
            elif name in TEXT_BAD:
                values = TEXT_BAD[name]
            else:
                assert name in TEXT_FREE, f"{command} {name}: no bad values known; add them"
            for value in values:
                if action.option_strings:
                    argv = [command, *base, name, value]
                elif name == "question":  # interview's second positional
                    argv = [command, base[0], value, *base[2:]]
                elif command in ("resume", "validate"):
                    argv = [command, value, *base[1:]]
                else:  # run / sweep config
                    argv = [command, value, *base[1:]]
                yield f"{command} {name} {value!r}", argv
    # Combinations: a cassette that must exist, for replay.
    for command in ("phase2", "resume"):
        argv = [command, *files.base(command), "--cache", str(files.missing)]
        yield f"{command} replay of a missing cassette", [*argv, "--cache-mode", "replay"]
    yield "no such command", ["nosuchcommand"]
    yield "extra argument", ["phase1", *files.base("phase1"), "extra"]


def test_every_wrong_flag_or_value_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = Files(tmp_path)
    before = files.fingerprint()
    capsys.readouterr()
    failures = []
    seen = 0
    for description, argv in cases(files):
        seen += 1
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:  # a traceback for the user
            failures.append(f"{description}: raised {type(exc).__name__}: {exc}")
            capsys.readouterr()
            continue
        out, err = capsys.readouterr()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if code != 2 or len(lines) != 1 or "Traceback" in err or not lines[0].startswith("vvm"):
            failures.append(f"{description}: exit {code}, stderr {err!r}, stdout {out[:200]!r}")
    assert not failures, f"{len(failures)} of {seen} cases:\n" + "\n".join(failures)
    assert files.fingerprint() == before  # no wrong path was written to
    print(f"\n{seen} wrong command lines, each exit 2 with one line")


@pytest.mark.parametrize(
    "args",
    [
        ["phase1", "--agents", "-3"],
        ["phase2", "--mock-llm", "--temperature", "hot"],
        ["run", "/no/such/experiment.yaml"],
        ["validate", "/etc/hostname"],
        ["phase1", "--steps", HUGE, "--db", "{tmp}/huge.sqlite"],
        ["phase2", "--mock-llm", "--mock-latency-ms", "inf", "--db", "{tmp}/inf.sqlite"],
    ],
    ids=["negative", "non-numeric", "missing-file", "non-trace", "huge", "infinite"],
)
def test_real_processes_exit_2_with_one_line(args: list[str], tmp_path: Path) -> None:
    out = run_cli(*(a.format(tmp=tmp_path) for a in args))
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("vvm"), out.stderr
    assert "Traceback" not in out.stderr and not out.stdout
