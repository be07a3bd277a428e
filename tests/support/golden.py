"""The golden files: a trace of each kind and the cassettes they replay, with what is known of them.

``tests/golden`` holds files that a version of Vivarium wrote, each gzipped (a trace is mostly
empty SQLite pages: 80 KB of trace is 6 KB of gzip), and ``MANIFEST.json`` what is known of
each, computed when it was written with plain ``sqlite3`` and ``hashlib`` (never with the
readers under test): the SHA-256 of the file itself (unpacked), its schema, its run id, status
and final state hash, who wrote it, and its rows counted per frame.

Every later version must validate, read and, where the kind allows, resume and replay them
(``tests/trace/test_golden.py``, ``tests/gateways/test_cache_golden.py``). The files of the
schema this version writes are also made again by their recipe (``TRACE_KINDS``) and must come
out the same, byte for byte, but for who wrote them (``STAMPS``): no change of format or of
behaviour passes unnoticed. ``scripts/make_golden.py`` writes them, and only when asked to.

The files of older schemas (``OLD_SCHEMAS``) were written by the commits that last wrote those
schemas, run from ``git archive``: genuine old files, never made again by this version.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import re
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
MANIFEST = GOLDEN / "MANIFEST.json"

STAMPS = ("meta.vivarium_code", "runs.vivarium_version", "interruptions.recorded_at")
"""What names who wrote a trace and when, not what it holds: masked when a re-made trace is
compared with its golden file.

``vivarium_code`` is ``<version>+<digest of the source of vivarium/policies, worlds, workflow
and memory.py>``: it changes with any edit of that source (a comment, a docstring) while the
run stays the same, and recording it is its job (a resume refuses other code). Were it compared,
every such edit would need the golden files made again, and a habit of making them again would
let a real change of format through unseen. ``vivarium_version`` changes with a release for the
same reason; ``recorded_at`` is the wall-clock time a resume found a run stopped (history, kept
out of the state hash on purpose). Everything else must be equal."""


# -- the recipes of the current schema --------------------------------------------------------
def _experiment(**config: Any) -> Any:
    from vivarium import Experiment

    return Experiment(**config)


def _run(path: Path, **config: Any) -> None:
    _experiment(**config).run(path, progress=False)


ECOLOGY_WORKFLOW = {
    "name": "golden_ecology",
    "world": "ecology",
    "steps": 4,
    "seed": 7,
    "agents": [
        {"policy": "workflow", "agent": "tests/fixtures/agents/loop_alpha"},
        {"policy": "workflow", "agent": "tests/fixtures/agents/loop_beta"},
        {
            "policy": "random",
            "count": 3,
            "action_space": ["noop", "read_artifact", "write_artifact", "invoke_artifact"],
        },
    ],
    "llm": {"model": "mock", "mock": True},
    "world_options": {
        "seed_artifacts": [
            {
                "id": "calculator",
                "executable": True,
                "content": "A shared calculator anyone may invoke.",
                "methods": {"add": "args.get('a', 0) + args.get('b', 0)"},
            },
            {"id": "bulletin", "content": "Welcome to the ecology."},
        ]
    },
}
CHANNEL_RANDOM = {
    "name": "b1",
    "world": "channel",
    "policy": "random",
    "agents": 5,
    "steps": 30,
    "seed": 3,
}
CHANNEL_COGNITIVE = {
    "name": "golden_cognitive",
    "world": "channel",
    "policy": "cognitive",
    "agents": 3,
    "steps": 5,
    "seed": 7,
    "llm": {"mock": True, "force_tool": True},
}
MOCK_CASSETTE = "channel_cognitive_mock.cassette"
SMOLLM2_CASSETTE = "channel_smollm2.cassette"
INTERRUPTED = {
    **CHANNEL_COGNITIVE,
    "name": "golden_interrupted",
    "steps": 6,
    "seed": 11,
    "checkpoint_every": 2,
}
INTERRUPTED_AFTER = 3  # steps committed before the run was killed


def _channel_random(path: Path, work: Path) -> None:
    _run(path, **CHANNEL_RANDOM)


def _shuffle(path: Path, work: Path) -> None:
    _run(
        path,
        name="golden_shuffle",
        world="channel",
        policy="random",
        agents=7,
        steps=20,
        seed=4,
        order="shuffle",
        checkpoint_every=5,
        scheduling="simultaneous",
        action_space=["noop", "emit_event", "post_message"],
    )


def _boltzmann(path: Path, work: Path) -> None:
    _run(
        path,
        name="golden_boltzmann",
        world="boltzmann",
        policy="boltzmann",
        agents=50,
        steps=20,
        seed=5,
    )


def _ecology(path: Path, work: Path) -> None:
    with contextlib.chdir(ROOT):  # the agent folders, by the paths the config records
        _run(path, **ECOLOGY_WORKFLOW)


def record_mock_cassette(cassette: Path, trace: Path) -> None:
    """Record the golden mock cassette (``cassette``, a bare name in the working folder)."""
    llm = {**CHANNEL_COGNITIVE["llm"], "cache": cassette.name, "cache_mode": "record"}
    with contextlib.chdir(cassette.parent):
        _run(trace, **{**CHANNEL_COGNITIVE, "llm": llm})


def _cognitive_replay(path: Path, work: Path) -> None:
    # The cassette by a bare name: the trace records the path as given, so it is the same here
    # and in any folder the golden cassette is unpacked into.
    llm = {**CHANNEL_COGNITIVE["llm"], "cache": MOCK_CASSETTE, "cache_mode": "replay"}
    with contextlib.chdir(work):
        _run(path, **{**CHANNEL_COGNITIVE, "llm": llm})


def _smollm2_replay(path: Path, work: Path) -> None:
    from vivarium.paper import CHANNEL_RUN

    llm = {**CHANNEL_RUN["llm"], "cache": SMOLLM2_CASSETTE, "cache_mode": "replay"}
    with contextlib.chdir(work):
        _run(path, **{**CHANNEL_RUN, "llm": llm})


def _ecology_smollm2_replay(path: Path, work: Path) -> None:
    from vivarium import Experiment

    llm = {"cache": "data/cassettes/ecology_smollm2.cassette", "cache_mode": "replay"}
    with contextlib.chdir(ROOT):
        Experiment.from_file("data/experiments/ecology_smollm2.yaml", seed=1, steps=5, llm=llm).run(
            path, progress=False
        )


def _own_world(path: Path, work: Path) -> None:
    from tests.support.golden_models import Adder, Tally

    _run(path, name="golden_own", world=Tally, policy=Adder, agents=3, steps=10, seed=8)


def _autonomous(path: Path, work: Path) -> None:
    _run(
        path,
        name="golden_autonomous",
        world="channel",
        policy="random",
        agents=3,
        mode="autonomous",
        autonomous={"duration": 5.0},
        seed=9,
    )


def _interrupted(path: Path, work: Path) -> None:
    """The run killed after ``INTERRUPTED_AFTER`` steps: its status still says running."""
    from vivarium.trace.db import TraceDb

    trace = TraceDb(path)
    try:
        _experiment(**INTERRUPTED).build(trace).run(INTERRUPTED_AFTER, finish=False)
    finally:
        trace.close()


def resume_copy(interrupted: Path, path: Path) -> None:
    """Resume a copy (``path``) of the interrupted trace: a resumed run, with its interruption."""
    from vivarium import Run

    shutil.copyfile(interrupted, path)
    Run.open(path).resume(progress=False)


@dataclass(frozen=True)
class TraceKind:
    """A golden trace of the current schema and how to make it.

    Attributes:
        name: Its name (``schema<N>/<name>.sqlite.gz``).
        what: What it covers.
        make: Writes it at a path, given a folder holding the golden cassettes (unpacked).
        cassette: The golden cassette it replays, if any.
        resumes: The golden trace it is the resumption of (made by ``resume_copy``).
    """

    name: str
    what: str
    make: Callable[[Path, Path], None] | None
    cassette: str | None = None
    resumes: str | None = None


TRACE_KINDS = (
    TraceKind(
        "channel_random", "random agents in the channel (the lean batch path)", _channel_random
    ),
    TraceKind(
        "channel_random_shuffle_checkpoints",
        "seeded shuffle, simultaneous, messages, a checkpoint every 5 steps",
        _shuffle,
    ),
    TraceKind("boltzmann", "Boltzmann wealth, 50 agents", _boltzmann),
    TraceKind(
        "ecology_workflow_mock",
        "workflow agents (routine and reasoned transitions) and random ones, the mock LLM",
        _ecology,
    ),
    TraceKind(
        "channel_cognitive_cassette",
        "cognitive agents replayed from the golden mock cassette",
        _cognitive_replay,
        cassette=MOCK_CASSETTE,
    ),
    TraceKind(
        "channel_smollm2_cassette",
        "the paper's channel run, SmolLM2 replayed from a cassette of schema 3",
        _smollm2_replay,
        cassette=SMOLLM2_CASSETTE,
    ),
    TraceKind(
        "ecology_smollm2_replay",
        "the committed data/cassettes/ecology_smollm2.cassette replayed (seed 1, 5 steps)",
        _ecology_smollm2_replay,
    ),
    TraceKind(
        "own_world_reporters",
        "a user's world and policy, with model_vars and agent_vars of every stored kind",
        _own_world,
    ),
    TraceKind("autonomous", "an autonomous run (steps with a clock)", _autonomous),
    TraceKind(
        "interrupted",
        f"cognitive agents with checkpoints, killed after {INTERRUPTED_AFTER} steps",
        _interrupted,
    ),
    TraceKind(
        "resumed",
        "the interrupted run resumed: an interruptions table",
        None,
        resumes="interrupted",
    ),
)

CASSETTE_KINDS = {
    MOCK_CASSETTE: "the mock's replies to channel_cognitive_cassette's run (schema 4, keyed)",
    SMOLLM2_CASSETTE: "SmolLM2's replies to the paper's channel run (schema 3, as committed "
    "in data/cassettes before provenance; a frozen copy)",
}

# The commits that last wrote each older schema, and what was run there (paths in their tree).
OLD_SCHEMAS: dict[int, tuple[str, dict[str, dict[str, Any]]]] = {
    1: (
        "4d5992bf81201f17e23887839ecba7c62f07eb9f",
        {
            "channel_random": CHANNEL_RANDOM,
            "ecology_workflow_mock": {
                **ECOLOGY_WORKFLOW,
                "steps": 6,
                "agents": [
                    {"policy": "workflow", "agent": "data/agents/alpha_2"},
                    {"policy": "workflow", "agent": "data/agents/beta_2"},
                    ECOLOGY_WORKFLOW["agents"][2],
                ],
            },
        },
    ),
    2: (
        "64ae856e46d4c31efbc2c76faae302e8716755a0",
        {"channel_random": CHANNEL_RANDOM, "ecology_workflow_mock": ECOLOGY_WORKFLOW},
    ),
    # Every kind of TRACE_KINDS as that commit had them, written by its own make_golden.py
    # (interrupted and resumed, cassette replays): more than plain configs, so none is listed
    # for make_old; the files are written once and stay.
    3: ("35c8804acc39bb406234c9b3921e07f904ab897e", {}),
}


# -- files ------------------------------------------------------------------------------------
def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pack(source: Path, golden: Path) -> None:
    """Write ``source`` gzipped at ``golden`` (no name, no time in the header)."""
    golden.parent.mkdir(parents=True, exist_ok=True)
    golden.write_bytes(gzip.compress(source.read_bytes(), compresslevel=9, mtime=0))


def unpack(file: str, into: Path, name: str | None = None) -> Path:
    """Unpack the golden ``file`` (relative to ``tests/golden``) into the folder ``into``."""
    data = gzip.decompress((GOLDEN / file).read_bytes())
    into.mkdir(parents=True, exist_ok=True)
    out = into / (name or Path(file).name.removesuffix(".gz"))
    out.write_bytes(data)
    return out


def load_manifest() -> dict[str, Any]:
    """``MANIFEST.json`` (empty sections when there is none yet)."""
    if not MANIFEST.exists():
        return {"traces": {}, "cassettes": {}}
    return json.loads(MANIFEST.read_text())


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def trace_facts(path: Path) -> dict[str, Any]:
    """What plain SQL says of a trace: schema, run, final state hash, rows per frame."""
    con = _read_only(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        run_id, status, steps_done, agents = con.execute(
            "SELECT run_id, status, steps_done, agents FROM runs"
        ).fetchone()
        last = con.execute("SELECT state_hash FROM steps ORDER BY step DESC LIMIT 1").fetchone()

        def count(sql: str) -> int:
            return int(con.execute(sql).fetchone()[0] or 0)

        rows = {
            "actions": count("SELECT count(*) FROM decisions")
            if "decisions" in tables
            else count("SELECT sum(json_array_length(agent_idx)) FROM steps"),
        }
        for table in ("messages", "llm_calls", "transitions", "steps", "agents", "checkpoints"):
            rows[table] = count(f"SELECT count(*) FROM {table}")  # noqa: S608 - a name above
        rows["model_vars"] = (
            count("SELECT count(DISTINCT step) FROM model_vars") if "model_vars" in tables else 0
        )
        rows["agent_vars"] = (
            count("SELECT count(DISTINCT step) FROM agent_vars") * agents
            if "agent_vars" in tables
            else 0
        )
        rows["interruptions"] = (
            count("SELECT count(*) FROM interruptions") if "interruptions" in tables else 0
        )
        return {
            "schema": con.execute("PRAGMA user_version").fetchone()[0],
            "application_id": con.execute("PRAGMA application_id").fetchone()[0],
            "run_id": run_id,
            "status": status,
            "steps_done": steps_done,
            "final_state_hash": last[0] if last else None,
            "written_by": meta.get("vivarium_code"),
            "rows": rows,
        }
    finally:
        con.close()


def cassette_facts(path: Path) -> dict[str, Any]:
    """What plain SQL says of a cassette: its schema, key version, rows and their sources."""
    con = _read_only(path)
    try:
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        columns = {r[1] for r in con.execute("PRAGMA table_info(replies)")}
        provider = "provider" if "provider" in columns else "NULL"
        keys = [r[0] for r in con.execute("SELECT request_hash FROM replies ORDER BY request_hash")]
        sources = con.execute(
            f"SELECT DISTINCT model, {provider} FROM replies ORDER BY 1, 2"  # noqa: S608
        ).fetchall()
        return {
            "schema": int(meta["schema_version"]),
            "key_version": meta.get("key_version"),
            "rows": len(keys),
            "keys_sha256": hashlib.sha256("\n".join(keys).encode()).hexdigest(),
            "sources": [list(s) for s in sources],
        }
    finally:
        con.close()


_TIME = re.compile(r"'\d{4}-\d\d-\d\dT[0-9:.+\-Z]+'")


def content(path: Path) -> list[str]:
    """The trace's SQL dump, line by line, with the ``STAMPS`` masked."""
    con = _read_only(path)
    try:
        lines = []
        for line in con.iterdump():
            if line.startswith("INSERT INTO \"meta\" VALUES('vivarium_code',"):
                line = "<meta.vivarium_code>"
            elif line.startswith('INSERT INTO "runs"'):
                version = con.execute("SELECT vivarium_version FROM runs").fetchone()[0]
                line = line.replace(f"'{version}'", "<runs.vivarium_version>", 1)
            elif line.startswith('INSERT INTO "interruptions"'):
                line = _TIME.sub("<interruptions.recorded_at>", line)
            lines.append(line)
        return lines
    finally:
        con.close()


def code_stamp(path: Path) -> str | None:
    """The trace's ``vivarium_code`` (None: it has none)."""
    con = _read_only(path)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'vivarium_code'").fetchone()
        return row[0] if row else None
    finally:
        con.close()


def bytes_as_written_by(path: Path, code: str | None) -> bytes:
    """The trace's bytes with its ``vivarium_code`` replaced by ``code`` (of the same length).

    The value is stored once, as text, in the meta table's page: replacing it gives the file
    that code would have written, the bytes of every page included.

    Raises:
        ValueError: the two differ in length, or the value is not stored exactly once.
    """
    data = path.read_bytes()
    mine = code_stamp(path)
    if mine is None or code is None or mine == code:
        return data
    if len(mine) != len(code) or data.count(mine.encode()) != 1:
        raise ValueError(f"cannot stamp {path} as written by {code}")
    return data.replace(mine.encode(), code.encode())
