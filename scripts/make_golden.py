"""Write the golden traces and cassettes of tests/golden, and their MANIFEST.json.

    .venv/bin/python scripts/make_golden.py                 # check; write only what is missing
    .venv/bin/python scripts/make_golden.py --force         # replace what differs (a format change)
    .venv/bin/python scripts/make_golden.py --old-schema 2  # the schema-2 files, from their commit

Every later version of Vivarium must validate, read, resume and replay these files
(tests/trace/test_golden.py, tests/gateways/test_cache_golden.py), so replacing one is a
decision, never a side effect: without ``--force`` the script makes each file again in a
temporary folder, compares it with the golden one (``tests.support.golden.content``: the SQL
dump but for who wrote it, then the bytes), says which differ and how, and exits 1 having
written nothing. A file that is missing is written. A new schema version keeps the files of
the old one: they stay, under their schema's folder, for as long as Vivarium reads that schema.

Files of older schemas come from the commit that last wrote each (``OLD_SCHEMAS``): ``git
archive`` of it into a temporary folder, run there with this Python. They are written once and
never replaced by this version's code.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VIVARIUM_PROGRESS", "0")

from tests.support import golden as g  # noqa: E402
from vivarium.trace.schema import SCHEMA_VERSION  # noqa: E402

# Runs an old commit's experiments: argv = out folder, then JSON {name: config}.
_OLD_DRIVER = """
import json, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from vivarium import Experiment
out = Path(sys.argv[1])
for name, config in json.loads(sys.argv[2]).items():
    Experiment(**config).run(out / f"{name}.sqlite", progress=False)
"""


def trace_file(name: str, schema: int = SCHEMA_VERSION) -> str:
    """The golden trace's path in tests/golden."""
    return f"schema{schema}/{name}.sqlite.gz"


def cassette_file(name: str) -> str:
    """The golden cassette's path in tests/golden."""
    return f"cassettes/{name}.gz"


def make_candidates(work: Path) -> dict[str, Path]:
    """Make every current-schema file in ``work``: golden path -> the file just made."""
    made: dict[str, Path] = {}
    cassettes = work / "cassettes"
    cassettes.mkdir()
    g.record_mock_cassette(cassettes / g.MOCK_CASSETTE, work / "recording.sqlite")
    made[cassette_file(g.MOCK_CASSETTE)] = cassettes / g.MOCK_CASSETTE
    frozen = cassette_file(g.SMOLLM2_CASSETTE)
    if (g.GOLDEN / frozen).exists():  # a frozen copy: written once, never made again
        g.unpack(frozen, cassettes)
    else:
        shutil.copyfile(
            ROOT / "data" / "cassettes" / g.SMOLLM2_CASSETTE, cassettes / g.SMOLLM2_CASSETTE
        )
        made[frozen] = cassettes / g.SMOLLM2_CASSETTE
    traces = work / "traces"
    traces.mkdir()
    for kind in g.TRACE_KINDS:
        path = traces / f"{kind.name}.sqlite"
        if kind.resumes is not None:
            g.resume_copy(traces / f"{kind.resumes}.sqlite", path)
        else:
            assert kind.make is not None
            kind.make(path, cassettes)
        made[trace_file(kind.name)] = path
    return made


def difference(file: str, candidate: Path, scratch: Path) -> str | None:
    """How ``candidate`` differs from the golden ``file`` (None: it does not)."""
    golden = g.unpack(file, scratch, name="golden")
    if file.startswith("cassettes/"):
        same = list(_dump(candidate)) == list(_dump(golden))
        return None if same else "its rows or meta differ"
    before, after = g.trace_facts(golden), g.trace_facts(candidate)
    if g.content(candidate) != g.content(golden):
        changed = [k for k in before if k != "written_by" and before[k] != after[k]]
        return "its content differs" + (f" ({', '.join(changed)})" if changed else "")
    if file.endswith("resumed.sqlite.gz"):
        return None  # its interruption's time is its own
    try:
        stamped = g.bytes_as_written_by(candidate, before["written_by"])
    except ValueError as exc:
        return str(exc)
    same_bytes = hashlib.sha256(stamped).hexdigest() == g.sha256(golden)
    if _version(candidate) == _version(golden) and not same_bytes:  # a release: rows alone
        return "same rows, other bytes (the file's layout changed)"
    return None


def _dump(path: Path) -> Any:
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        yield from con.iterdump()
    finally:
        con.close()


def _version(path: Path) -> str:
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT vivarium_version FROM runs").fetchone()[0]
    finally:
        con.close()


def make_current(force: bool) -> int:
    """Make this schema's files; write the missing, and the differing ones when ``force``."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        work = Path(tmp)
        made = make_candidates(work)
        writes, differ = [], []
        for file, candidate in made.items():
            if not (g.GOLDEN / file).exists():
                writes.append((file, candidate, "new"))
                continue
            why = difference(file, candidate, work / "scratch")
            if why is not None:
                differ.append((file, candidate, why))
        for file, _, why in differ:
            print(f"{'replace' if force else 'DIFFERS'} {file}: {why}")
        if differ and not force:
            print(
                "nothing written: a golden file is what every later version must read; if this "
                "change of format or behaviour is meant, run again with --force and say so in "
                "the commit"
            )
            return 1
        for file, candidate, why in [*writes, *differ]:
            g.pack(candidate, g.GOLDEN / file)
            print(f"wrote {file} ({why})")
        write_manifest()
    return 0


def make_old(schema: int, force: bool) -> int:
    """Write the files of an older schema by running the commit that last wrote it."""
    commit, kinds = g.OLD_SCHEMAS[schema]
    files = {name: trace_file(name, schema) for name in kinds}
    there = [f for f in files.values() if (g.GOLDEN / f).exists()]
    if there and not force:
        print(f"{', '.join(there)} exist: old files are written once (--force to replace)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        tree, out = Path(tmp) / "tree", Path(tmp) / "out"
        tree.mkdir()
        out.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        env = {**os.environ, "PYTHONPATH": str(tree), "VIVARIUM_PROGRESS": "0"}
        subprocess.run(
            [sys.executable, "-c", _OLD_DRIVER, str(out), json.dumps(kinds)],
            cwd=tree,
            env=env,
            check=True,
        )
        for name, file in files.items():
            g.pack(out / f"{name}.sqlite", g.GOLDEN / file)
            print(f"wrote {file} (run by {commit[:12]})")
    write_manifest()
    return 0


def _newest_first(packed: Path) -> tuple[int, str]:
    return (-int(packed.parent.name.removeprefix("schema")), packed.name)


def write_manifest() -> None:
    """MANIFEST.json: what plain SQL and hashlib say of every golden file."""
    kinds = {k.name: k for k in g.TRACE_KINDS}
    traces: dict[str, Any] = {}
    cassettes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for packed in sorted(g.GOLDEN.glob("schema*/*.sqlite.gz"), key=_newest_first):
            file = packed.relative_to(g.GOLDEN).as_posix()
            path = g.unpack(file, Path(tmp))
            facts = g.trace_facts(path)
            name = packed.name.removesuffix(".sqlite.gz")
            entry: dict[str, Any] = {"file": file, "sha256": g.sha256(path), **facts}
            if facts["schema"] == SCHEMA_VERSION and name in kinds:
                kind = kinds[name]
                entry.update(what=kind.what, cassette=kind.cassette, resumes=kind.resumes)
            elif facts["schema"] in g.OLD_SCHEMAS:
                entry["commit"] = g.OLD_SCHEMAS[facts["schema"]][0]
                today = traces.get(f"schema{SCHEMA_VERSION}/{name}")
                if today is not None and today["final_state_hash"] == facts["final_state_hash"]:
                    entry["same_run_as"] = f"schema{SCHEMA_VERSION}/{name}"  # the very same run
            traces[file.removesuffix(".sqlite.gz")] = entry
        for packed in sorted(g.GOLDEN.glob("cassettes/*.gz")):
            file = packed.relative_to(g.GOLDEN).as_posix()
            path = g.unpack(file, Path(tmp))
            name = path.name
            into = [f"schema{SCHEMA_VERSION}/{k.name}" for k in g.TRACE_KINDS if k.cassette == name]
            cassettes[name] = {
                "file": file,
                "sha256": g.sha256(path),
                "what": g.CASSETTE_KINDS[name],
                "replays_into": into,
                **g.cassette_facts(path),
            }
    manifest = {
        "about": "Golden files: every later Vivarium must validate, read, resume and replay "
        "them. Written by scripts/make_golden.py; sha256 is of the unpacked file.",
        "traces": traces,
        "cassettes": cassettes,
    }
    g.MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def main() -> int:
    """Parse the flags and make the files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="replace golden files that differ")
    parser.add_argument("--old-schema", type=int, choices=sorted(g.OLD_SCHEMAS))
    args = parser.parse_args()
    if args.old_schema is not None:
        return make_old(args.old_schema, args.force)
    return make_current(args.force)


if __name__ == "__main__":
    sys.exit(main())
