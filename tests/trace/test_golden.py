"""Golden traces: what this and older versions wrote validates, reads and resumes today.

``tests/golden`` holds a trace of each kind (``tests.support.golden``), those of older schemas
written by the commits that last wrote them, and ``MANIFEST.json`` what was known of each when
it was written (hashes, run ids, row counts: plain SQL and hashlib, not the readers under test).
These tests are the compatibility promise of ``vivarium.trace.schema``:

- every golden file is still the file the manifest names (its SHA-256);
- it validates (``vvm validate``: the state-hash chain recomputed), and reads into every frame
  with the rows plain SQL counts in the file, and the values plain SQL reads from it;
- a run of this version is written as its golden file was: the same SQL dump, and the same
  bytes, but for who wrote it (``golden.STAMPS``: the package-code digest changes with any
  edit of the policies' or worlds' source, so it is masked; the rest must be equal);
- the interrupted golden run resumes into the resumed golden one, in each schema a resume
  continues (a schema-3 file goes on as schema 3); a trace of an older schema is refused a
  resume in one line and left as it was;
- each schema this version reads has golden files.

A difference here is a change of format or of behaviour. If it is meant, make the files again
(``scripts/make_golden.py --force``) and say so; a new schema adds files, it never replaces the
old ones. The cassettes' side is ``tests/gateways/test_cache_golden.py``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support import golden as g
from vivarium import Run
from vivarium.errors import TraceError
from vivarium.trace.db import TraceDb
from vivarium.trace.schema import (
    APPLICATION_ID,
    FRAME_NAMES,
    READABLE_VERSIONS,
    REPORTER_FRAMES,
    RESUMABLE_VERSIONS,
    SCHEMA_VERSION,
)
from vivarium.trace.validate import validate_trace

MANIFEST = g.load_manifest()
TRACES: dict[str, dict[str, Any]] = MANIFEST["traces"]
KINDS = {kind.name: kind for kind in g.TRACE_KINDS}
CURRENT = sorted(k for k, v in TRACES.items() if v["schema"] == SCHEMA_VERSION)
OLD = sorted(k for k, v in TRACES.items() if v["schema"] < SCHEMA_VERSION)
NOT_RESUMED = sorted(k for k in OLD if TRACES[k]["schema"] not in RESUMABLE_VERSIONS)
# Made again here; those replaying a golden cassette are made again by its test.
REMADE = sorted(k.name for k in g.TRACE_KINDS if k.make is not None and k.cassette is None)


def unpacked(name: str, into: Path) -> Path:
    entry = TRACES[name]
    path = g.unpack(entry["file"], into)
    assert g.sha256(path) == entry["sha256"], f"{entry['file']} is not the file the manifest names"
    return path


def sql(path: Path, query: str) -> list[Any]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [row[0] if len(row) == 1 else row for row in con.execute(query)]
    finally:
        con.close()


def same_content(made: Path, golden: Path) -> None:
    """The two dumps are equal but for the stamps; else the first lines that differ."""
    mine, theirs = g.content(made), g.content(golden)
    if mine != theirs:
        diff = list(difflib.unified_diff(theirs, mine, "golden", "made now", n=0, lineterm=""))
        pytest.fail(
            "content differs from the golden file:\n" + "\n".join(d[:300] for d in diff[:12])
        )


# -- what there is ------------------------------------------------------------------------------
def test_every_schema_this_version_reads_has_golden_traces() -> None:
    """A new schema version must come with a reader of the old ones: they stay listed and golden."""
    assert tuple(range(1, SCHEMA_VERSION + 1)) == READABLE_VERSIONS
    assert {entry["schema"] for entry in TRACES.values()} == set(READABLE_VERSIONS)
    assert {name.split("/")[1] for name in CURRENT} == set(KINDS)
    for schema in READABLE_VERSIONS[:-1]:  # each older schema: a run with LLM calls and workflows
        rows = [v["rows"] for v in TRACES.values() if v["schema"] == schema]
        assert any(r["llm_calls"] and r["transitions"] for r in rows), schema
    assert set(MANIFEST["cassettes"]) == set(g.CASSETTE_KINDS)


def test_the_golden_files_stay_small() -> None:
    size = sum(p.stat().st_size for p in g.GOLDEN.rglob("*") if p.is_file())
    assert size < 300_000


@pytest.mark.parametrize("name", sorted(TRACES))
def test_a_golden_trace_is_the_file_the_manifest_names(name: str, tmp_path: Path) -> None:
    entry = TRACES[name]
    path = unpacked(name, tmp_path)
    header = path.read_bytes()[:100]
    assert int.from_bytes(header[60:64], "big") == entry["schema"] == int(name[6])  # user_version
    assert int.from_bytes(header[68:72], "big") == APPLICATION_ID == entry["application_id"]
    assert sql(path, "SELECT run_id FROM runs") == [entry["run_id"]]


# -- validate and read ------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(TRACES))
def test_a_golden_trace_validates(name: str, tmp_path: Path) -> None:
    entry = TRACES[name]
    report = validate_trace(unpacked(name, tmp_path))
    expected = "ok" if entry["status"] == "complete" else "incomplete"
    assert report.status == expected, report.lines()
    assert report.run_id == entry["run_id"]
    rows = entry["rows"]
    assert (report.steps_found, report.agents, report.actions) == (
        rows["steps"],
        rows["agents"],
        rows["actions"],
    )
    if rows["interruptions"]:
        assert any("resumed after 1 interruption" in note for note in report.notes)


def stored_actions(path: Path, schema: int) -> list[str]:
    """Each decision's action, read with plain SQL (and json for the arrays of old schemas)."""
    if schema >= 3:
        return sql(path, "SELECT action FROM decisions ORDER BY id")
    arrays = sql(path, "SELECT action FROM steps ORDER BY step")
    return [action for text in arrays if text for action in json.loads(text)]


@pytest.mark.parametrize("name", sorted(TRACES))
def test_a_golden_trace_reads_into_every_frame(name: str, tmp_path: Path) -> None:
    entry = TRACES[name]
    path = unpacked(name, tmp_path)
    run = Run.open(path)
    assert run.metadata["run_id"] == entry["run_id"]
    assert run.metadata["status"] == entry["status"]
    rows = entry["rows"]
    for frame in (*FRAME_NAMES, *REPORTER_FRAMES):
        assert len(run.frame(frame)) == rows[frame], frame
    assert len(run.interruptions) == rows["interruptions"]
    # The values, against plain SQL over the file.
    assert run.actions["action"].tolist() == stored_actions(path, entry["schema"])
    steps = run.steps
    assert steps["state_hash"].tolist() == sql(path, "SELECT state_hash FROM steps ORDER BY step")
    assert steps["state_hash"].iloc[-1] == entry["final_state_hash"]
    assert run.agents["agent_id"].tolist() == sql(path, "SELECT agent_id FROM agents ORDER BY 1")
    assert run.messages["content"].tolist() == sql(path, "SELECT content FROM messages ORDER BY id")
    hashes = sql(path, "SELECT request_hash FROM llm_calls ORDER BY id")
    assert run.llm_calls["request_hash"].tolist() == hashes
    moves = sql(path, "SELECT to_state FROM transitions ORDER BY id")
    assert run.transitions["to_state"].astype(str).tolist() == moves
    if entry["rows"]["llm_calls"] and entry["schema"] >= 3:  # the texts of each call, stored once
        exchanges = run.llm_exchanges()
        assert len(exchanges) == rows["llm_calls"]
        assert exchanges["reply"].notna().all()


def test_the_own_worlds_reporters_read_as_their_world_counted(tmp_path: Path) -> None:
    """model_vars and agent_vars hold what the decisions add up to (computed from the actions)."""
    run = Run.open(unpacked(f"schema{SCHEMA_VERSION}/own_world_reporters", tmp_path))
    actions = run.actions
    amounts = actions["arguments"].map(lambda text: json.loads(text)["amount"])
    per_step = amounts.groupby(actions["step"]).sum().cumsum()
    model = run.model_vars.set_index("step")
    assert model.loc[-1, "total"] == 0
    assert model["total"].iloc[1:].tolist() == per_step.tolist()
    assert model["mean"].iloc[1:].tolist() == pytest.approx((per_step / 3).tolist())
    last = run.agent_vars[run.agent_vars["step"] == per_step.index.max()].set_index("agent_id")
    by_agent = amounts.groupby(actions["agent_id"]).sum()
    for agent, total in by_agent.items():
        assert last.loc[agent, "count"] == total
        assert bool(last.loc[agent, "even"]) == (total % 2 == 0)
        assert last.loc[agent, "label"] == f"{agent}:{total}"
    counts = json.loads(model["counts"].iloc[-1])  # a dict: JSON text in its column
    assert counts == by_agent.to_dict()
    assert model["leader"].iloc[-1] == max(sorted(by_agent.index), key=by_agent.to_dict().get)


# -- older schemas ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", NOT_RESUMED)
def test_an_older_schemas_trace_is_not_resumed_and_is_left_as_it_was(
    name: str, tmp_path: Path
) -> None:
    path = unpacked(name, tmp_path)
    before = path.read_bytes()
    assert Run.open(path).resume(progress=False).metadata["status"] == "complete"  # nothing to do
    with pytest.raises(TraceError) as info:  # what a resume of an unfinished one meets
        TraceDb.for_resume(path)
    assert "\n" not in str(info.value) and "cannot continue" in str(info.value)
    assert path.read_bytes() == before


@pytest.mark.parametrize("name", [n for n in OLD if "same_run_as" in TRACES[n]])
def test_an_older_schemas_trace_reads_as_the_same_run_written_today(
    name: str, tmp_path: Path
) -> None:
    """The same run (the same final state hash) read from the old file and the new: alike."""
    old = Run.open(unpacked(name, tmp_path / "old"))
    new = Run.open(unpacked(TRACES[name]["same_run_as"], tmp_path / "new"))
    pd.testing.assert_frame_equal(old.actions, new.actions)
    pd.testing.assert_frame_equal(old.steps, new.steps)
    pd.testing.assert_frame_equal(old.agents, new.agents)


# -- this version writes the same --------------------------------------------------------------
@pytest.mark.parametrize("kind", REMADE)
def test_a_run_made_again_is_its_golden_file(kind: str, tmp_path: Path) -> None:
    name = f"schema{SCHEMA_VERSION}/{kind}"
    entry = TRACES[name]
    golden = unpacked(name, tmp_path / "golden")
    made = tmp_path / "made" / f"{kind}.sqlite"
    made.parent.mkdir()
    make = KINDS[kind].make
    assert make is not None
    make(made, tmp_path)
    same_content(made, golden)
    versions = sql(made, "SELECT vivarium_version FROM runs") == sql(
        golden, "SELECT vivarium_version FROM runs"
    )
    if versions:  # a release changes the version in the runs row: the content says the rest
        stamped = g.bytes_as_written_by(made, entry["written_by"])
        assert hashlib.sha256(stamped).hexdigest() == entry["sha256"], "same rows, other bytes"


@pytest.mark.parametrize("schema", RESUMABLE_VERSIONS)
def test_the_interrupted_golden_run_resumes_into_the_resumed_one(
    schema: int, tmp_path: Path
) -> None:
    from vivarium.experiment.identity import CODE_META_KEY, package_code_digest

    name = f"schema{schema}/"
    interrupted = unpacked(name + "interrupted", tmp_path / "golden")
    resumed = unpacked(name + "resumed", tmp_path / "golden")
    path = tmp_path / "resume.sqlite"
    shutil.copyfile(interrupted, path)
    assert validate_trace(path).status == "incomplete"
    # A resume refuses other package code than the run's (its own test); the code here is the
    # code that made the golden files, but for edits the masked stamp says nothing about.
    con = sqlite3.connect(path)
    with con:
        con.execute(
            "UPDATE meta SET value = ? WHERE key = ?", (package_code_digest(), CODE_META_KEY)
        )
    con.close()
    run = Run.open(path).resume(progress=False)
    assert run.metadata["status"] == "complete" and validate_trace(path).status == "ok"
    same_content(path, resumed)
    (stop,) = run.interruptions.to_dict("records")
    assert (stop["step"], stop["ended"]) == (g.INTERRUPTED_AFTER, "killed")
