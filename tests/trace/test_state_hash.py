"""The state hash is pinned: its bytes as documented, its known values, and every golden chain.

Every trace ever written records a chain of state hashes, and ``vvm validate`` recomputes it;
a change to what is hashed (dropping the previous hash, the messages or the clock) would make
every existing trace corrupt, or let an edited row pass. The expected values here are computed
without the code under test: hand-written bytes hashed with ``hashlib`` (the formula in
``vivarium.trace.records.chain_hash``'s docstring), pinned hex digests, and a reference
implementation of that formula (``reference_chain``) run over traces this and older versions
wrote (``tests/golden``).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from tests.support import golden as g
from vivarium import Experiment
from vivarium.trace.records import GENESIS_HASH, StepRecord, chain_hash, hash_record

GS, RS = b"\x1d", b"\x1e"
NULL = b"\x00"

# Step 0: two decisions (agent 0 noops, agent 1 posts), one message, no clock, no fallback.
STEP_0_BYTES = (
    b"0" * 64
    + b"\x1d0\x1dtotal=3\x1d2"
    + GS + b"[0,1]"
    + GS + b'["noop","post_message"]'
    + GS + NULL  # arguments
    + GS + NULL  # reasoning
    + GS + NULL  # metadata
    + GS + b"[1,1]"  # success
    + GS + NULL  # result
    + GS + NULL  # error
    + b"\x1c" + b"0" + RS + b"agent_1" + RS + b"general" + RS + b"hello"
)  # fmt: skip
STEP_0_HASH = "945a151f3d29117e766baa6c56d9548576e0f646417ff8c2aef4a9e142acb69d"

# Step 1, chained on step 0: a clock, an argument, a refused decision that fell back, and two
# transitions (the first from no state, the second routine and with a reason, which is not hashed).
STEP_1_BYTES = (
    STEP_0_HASH.encode()
    + b"\x1d1\x1dtotal=4\x1d2"
    + b"\x1a2.5"
    + GS + b"[1,0]"
    + GS + b'["add","add"]'
    + GS + b'["{\\"amount\\":1}",null]'
    + GS + NULL
    + GS + NULL
    + GS + b"[1,0]"
    + GS + NULL
    + GS + b'[null,"refused"]'
    + b"\x1f" + b"[0,1]"
    + b"\x1b" + b"0" + RS + NULL + RS + b"work" + RS + b"start"
    + b"\x1b" + b"1" + RS + b"work" + RS + b"review" + RS + b"done" + RS + b"1"
)  # fmt: skip
STEP_1_HASH = "8c537ff54e39ac4d967826ed99578a878b2b1392809f4910342c5085be9da64a"


def test_the_documented_bytes_have_the_pinned_hashes() -> None:
    # The pins are what hashlib says of the bytes written out by hand: the formula, not the code.
    assert hashlib.sha256(STEP_0_BYTES).hexdigest() == STEP_0_HASH
    assert hashlib.sha256(STEP_1_BYTES).hexdigest() == STEP_1_HASH
    assert GENESIS_HASH == "0" * 64


def step_0() -> StepRecord:
    record = StepRecord(step=0, world_digest="total=3")
    record.add_action(0, "noop", None, None, None, True, None, None)
    record.add_action(1, "post_message", None, None, None, True, None, None)
    record.messages.append((0, "agent_1", "general", "hello"))
    return record


def step_1() -> StepRecord:
    record = StepRecord(step=1, world_digest="total=4", clock=2.5)
    record.add_action(1, "add", '{"amount":1}', None, None, True, None, None)
    record.add_action(0, "add", None, None, None, False, None, "refused", fallback=True)
    record.transitions += [
        (0, None, "work", "start", 0, None),
        (1, "work", "review", "done", 1, "why"),
    ]
    return record


def test_the_engines_step_records_hash_to_the_pinned_values() -> None:
    """``hash_record``, what the engine calls: the previous hash, messages and clock all count."""
    assert hash_record(GENESIS_HASH, step_0()) == STEP_0_HASH
    assert hash_record(STEP_0_HASH, step_1()) == STEP_1_HASH


def test_validates_recomputation_hashes_to_the_pinned_values() -> None:
    """``chain_hash`` with the columns as ``vvm validate`` reads them from the file."""
    columns = ("[0,1]", '["noop","post_message"]', None, None, None, "[1,1]", None, None, None)
    messages = [(0, "agent_1", "general", "hello")]
    assert chain_hash(GENESIS_HASH, 0, "total=3", 2, columns, messages, []) == STEP_0_HASH
    stored = step_1().encode()
    moves = [(0, None, "work", "start", 0), (1, "work", "review", "done", 1)]  # as read back
    assert chain_hash(STEP_0_HASH, 1, "total=4", 2, stored, [], moves, 2.5) == STEP_1_HASH


@pytest.mark.parametrize(
    "change",
    ["previous", "message", "clock", "digest", "routine", "fallback"],
)
def test_each_part_of_a_step_changes_its_hash(change: str) -> None:
    """Every part the formula names is hashed: change one, and the pinned hash is not met."""
    record, previous = step_1(), STEP_0_HASH
    if change == "previous":
        previous = GENESIS_HASH
    elif change == "message":
        record.messages.append((0, "agent_0", "general", "hi"))
    elif change == "clock":
        record.clock = 2.0
    elif change == "digest":
        record.world_digest = "total=5"
    elif change == "routine":
        record.transitions[1] = (1, "work", "review", "done", 0, "why")
    else:
        record.fallback[1] = 0
    assert hash_record(previous, record) != STEP_1_HASH


# -- the formula, written again from its documentation, over real files -----------------------
DECISION_COLUMNS = ("agent_idx", "action", "arguments", "reasoning", "metadata", "success")
DECISION_COLUMNS += ("result", "error")


def _array(values: list[object]) -> str | None:
    if all(v is None for v in values):
        return None
    return json.dumps(values, ensure_ascii=False, separators=(",", ":"))


def _field(value: object) -> bytes:
    return NULL if value is None else str(value).encode()


def reference_chain(path: Path) -> list[tuple[str, str]]:
    """(recorded, recomputed) state hash of each step of a trace, by the documented formula."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    step_columns = {r[1] for r in con.execute("PRAGMA table_info(steps)")}
    columns: dict[int, list[str | None]] = {}
    if "decisions" in tables:  # schema 3: one row per decision, in commit order
        names = ", ".join((*DECISION_COLUMNS, "fallback"))
        by_step: dict[int, list[tuple[object, ...]]] = {}
        for step, *row in con.execute(f"SELECT id >> 24, {names} FROM decisions ORDER BY id"):
            by_step.setdefault(step, []).append(tuple(row))
        for step, rows in by_step.items():
            *values, fallback = [list(c) for c in zip(*rows, strict=True)]
            flags = json.dumps(fallback, separators=(",", ":")) if any(fallback) else None
            columns[step] = [*(_array(v) for v in values), flags]
    else:  # schemas 1 and 2: each step's columns are the stored arrays
        fallback = "fallback" if "fallback" in step_columns else "NULL"
        names = ", ".join((*DECISION_COLUMNS, fallback))
        for step, *stored in con.execute(f"SELECT step, {names} FROM steps"):
            columns[step] = stored
    messages: dict[int, list[bytes]] = {}
    for rid, step, *row in con.execute(
        "SELECT id, step, author_id, channel, content FROM messages ORDER BY id"
    ):
        messages.setdefault(step, []).append(RS.join(_field(v) for v in (rid & 0xFFFFFF, *row)))
    moves: dict[int, list[bytes]] = {}
    routine = (
        ", routine"
        if "routine" in {r[1] for r in con.execute("PRAGMA table_info(transitions)")}
        else ""
    )
    for step, *row in con.execute(
        f"SELECT step, agent_idx, from_state, to_state, trigger{routine} FROM transitions ORDER BY id"
    ):
        fields = row[:4] + ([1] if routine and row[4] else [])
        moves.setdefault(step, []).append(RS.join(_field(v) for v in fields))
    out, previous = [], "0" * 64
    for step, n, digest, recorded, clock in con.execute(
        "SELECT step, n_actions, world_digest, state_hash, clock FROM steps ORDER BY step"
    ):
        data = f"{previous}\x1d{step}\x1d{digest}\x1d{n}".encode()
        if clock is not None:
            data += b"\x1a" + repr(clock).encode()
        *stored, fallback = columns.get(step, [None] * 9)
        data += b"".join(GS + _field(text) for text in stored)
        if fallback is not None:
            data += b"\x1f" + fallback.encode()
        data += b"".join(b"\x1c" + m for m in messages.get(step, []))
        data += b"".join(b"\x1b" + m for m in moves.get(step, []))
        out.append((recorded, hashlib.sha256(data).hexdigest()))
        previous = recorded
    con.close()
    return out


GOLDEN_TRACES = sorted(g.load_manifest()["traces"])


@pytest.mark.parametrize("name", GOLDEN_TRACES)
def test_every_golden_chain_is_the_documented_formula(name: str, tmp_path: Path) -> None:
    """Files this and older versions wrote: each step's hash is the formula's, to the last one."""
    entry = g.load_manifest()["traces"][name]
    chain = reference_chain(g.unpack(entry["file"], tmp_path))
    assert len(chain) == entry["rows"]["steps"] > 0
    assert [computed for _, computed in chain] == [recorded for recorded, _ in chain]
    assert chain[-1][0] == entry["final_state_hash"]


@pytest.mark.parametrize(
    "config",
    [
        {"policy": "random", "agents": 4, "steps": 5, "order": "shuffle",
         "action_space": ["noop", "emit_event", "post_message"]},
        {"policy": "cognitive", "agents": 2, "steps": 3, "llm": {"mock": True}},
        {"policy": "random", "agents": 2, "mode": "autonomous", "autonomous": {"duration": 3.0}},
    ],
    ids=["messages", "llm", "clock"],
)  # fmt: skip
def test_a_run_of_this_version_records_the_documented_chain(config: dict, tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    Experiment(name="chain", world="channel", seed=2, **config).run(path, progress=False)
    chain = reference_chain(path)
    assert chain and [computed for _, computed in chain] == [recorded for recorded, _ in chain]
    con = sqlite3.connect(path)
    counts = con.execute(
        "SELECT (SELECT count(*) FROM messages), (SELECT count(clock) FROM steps)"
    ).fetchone()
    con.close()
    assert counts[0] > 0 or "mode" in config  # the parts the chain must cover are there
    assert (counts[1] > 0) == ("mode" in config)
