"""``vvm bundle`` / ``vvm verify``: a study handed over, re-run offline and checked.

Fresh bundles of a random run, a mock LLM run, a replayed real-model run, a workflow ecology
run, a fork and a sweep verify; a bundle altered after the fact fails, naming the file (a byte
changed without the manifest knowing) or the divergence (a trace, a cassette entry, a config
value or a user's class changed, with the manifest made to match, as a careful forger would).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from vivarium import Experiment
from vivarium.experiment.bundle import make_bundle, verify_bundle
from vivarium.paper import CHANNEL_RUN

ROOT = Path(__file__).resolve().parents[1]
CASSETTE = ROOT / "data" / "cassettes" / "channel_smollm2.cassette"

OWN_WORLD = '''
from vivarium.types import ActionResult


class Jar:
    """A jar agents drop coins in and take them out of; it saves its state."""

    def __init__(self, agent_ids, seed):
        self.agent_ids = list(agent_ids)
        self.coins = seed % 4 + 1

    def observe(self, agent_id, time_step):
        return {"coins": self.coins}

    def apply(self, request):
        if request.action_name == "drop":
            self.coins += 1
            return ActionResult.ok({"coins": self.coins})
        if self.coins > 0:
            self.coins -= 1
            return ActionResult.ok({"coins": self.coins})
        return ActionResult.failed("empty")

    def state_digest(self):
        return str(self.coins)

    def snapshot(self):
        return {"coins": self.coins}

    def restore(self, state):
        self.coins = state["coins"]
'''


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A bundle of every kind of run, made from the project's folder (its agent folders)."""
    folder = tmp_path_factory.mktemp("study")
    code = folder / "code"
    code.mkdir()
    (code / "jarworld.py").write_text(OWN_WORLD)
    sys.path.insert(0, str(code))
    try:
        import jarworld
    finally:
        sys.path.remove(str(code))
    runs = folder / "runs"
    Experiment(name="rand", agents=3, steps=4).run(runs / "rand.sqlite", progress=False)
    mock = Experiment(name="mock", policy="cognitive", agents=2, steps=3).run(
        runs / "mock.sqlite", progress=False
    )
    mock.fork(1, llm={"temperature": 0.5}, db=runs / "fork.sqlite").run(progress=False)
    real = {**CHANNEL_RUN["llm"], "cache": str(CASSETTE), "cache_mode": "replay"}
    Experiment(**{**CHANNEL_RUN, "llm": real}).run(runs / "real.sqlite", progress=False)
    own = Experiment(
        name="own", world=jarworld.Jar, agents=2, steps=3, action_space=["drop", "take"]
    )
    own.run(runs / "own.sqlite", progress=False)
    sweep = Experiment(name="sw", agents=2, steps=2).sweep(
        seed=[1, 2], folder=folder / "sweep", backend="inline", progress=False
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)  # the ecology's agent folders are the project's
        Experiment.from_file(ROOT / "data/experiments/ecology.yaml", steps=2).run(
            runs / "eco.sqlite", progress=False
        )
        archive = folder / "study.zip"
        notes = make_bundle(
            [runs / "rand.sqlite", runs / "fork.sqlite", runs / "real.sqlite", runs / "own.sqlite",
             runs / "eco.sqlite", sweep.folder],
            archive,
        )  # fmt: skip
    return archive, notes


def test_a_fresh_bundle_verifies(study: tuple[Path, list[str]]) -> None:
    archive, notes = study
    assert notes == []
    names = set(zipfile.ZipFile(archive).namelist())
    assert {"MANIFEST.json", "CITATION.cff", "README.md", "environment.txt"} <= names
    assert "code/own/jarworld.py" in names and "cassettes/real/channel_smollm2.cassette" in names
    assert any(n.startswith("agents/eco/data/agents/alpha_2/") for n in names)
    check = verify_bundle(archive)
    assert check.ok, check.lines()
    # The fork's parent came too, and re-ran first.
    ran = [name for name, _ in check.runs]
    assert ran.index("mock") < ran.index("fork")
    assert len(ran) == 8 and all(what.startswith("same") for _, what in check.runs)


def altered(
    archive: Path, tmp_path: Path, member: str, change: Callable[[Path], None], *, sign: bool
) -> Path:
    """A copy of ``archive`` with ``member`` changed (and the manifest made to match if ``sign``)."""
    out = tmp_path / "altered.zip"
    work = tmp_path / "work"
    shutil.rmtree(work, ignore_errors=True)
    with zipfile.ZipFile(archive) as z:
        z.extractall(work)
    change(work / member)
    manifest = json.loads((work / "MANIFEST.json").read_text())
    if sign:
        manifest[member] = hashlib.sha256((work / member).read_bytes()).hexdigest()
    (work / "MANIFEST.json").write_text(json.dumps(manifest))
    with zipfile.ZipFile(out, "w") as z:
        for path in sorted(p for p in work.rglob("*") if p.is_file()):
            z.write(path, path.relative_to(work).as_posix())
    return out


def sql(statement: str) -> Callable[[Path], None]:
    def run(path: Path) -> None:
        con = sqlite3.connect(path)
        try:
            assert con.execute(statement).rowcount >= 1
            con.commit()
        finally:
            con.close()

    return run


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_byte_changed_fails_on_the_manifest_before_anything_runs(
    study: tuple[Path, list[str]], tmp_path: Path
) -> None:
    bad = altered(study[0], tmp_path, "runs/rand.sqlite", flip_byte, sign=False)
    check = verify_bundle(bad)
    assert not check.ok and check.runs == []
    assert (
        check.problem
        == "runs/rand.sqlite changed since it was bundled (its SHA-256 is not the manifest's)"
    )


@pytest.mark.parametrize(
    ("member", "change", "found"),
    [
        (
            "runs/rand.sqlite",
            sql(f"UPDATE decisions SET action = 'planted' WHERE id = {(2 << 24) | 1}"),
            "rand: first divergence: step 2, agent_001: action",
        ),
        (  # a table diff does not read: every table is compared (it once passed as same)
            "runs/rand.sqlite",
            sql("UPDATE agents SET policy = 'planted' WHERE agent_idx = 0"),
            "rand: table agents: its rows differ",
        ),
        (
            "cassettes/real/channel_smollm2.cassette",
            sql("UPDATE replies SET response_json = replace(response_json, 'e', 'E')"),
            "real: first divergence: step 0",
        ),
        (
            "configs/mock.json",
            lambda p: p.write_text(p.read_text().replace('"seed": 42', '"seed": 43')),
            "mock: another run",
        ),
        (
            "code/own/jarworld.py",
            lambda p: p.write_text(p.read_text().replace("seed % 4 + 1", "seed % 4 + 2")),
            "own: another run",
        ),
    ],
)
def test_an_altered_bundle_with_a_matching_manifest_fails_at_its_divergence(
    study: tuple[Path, list[str]],
    tmp_path: Path,
    member: str,
    change: Callable[[Path], None],
    found: str,
) -> None:
    check = verify_bundle(altered(study[0], tmp_path, member, change, sign=True))
    assert not check.ok
    assert check.problem is not None and check.problem.startswith(found), check.problem


def test_vvm_bundle_and_verify(study: tuple[Path, list[str]], tmp_path: Path) -> None:
    def vvm(*words: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "vivarium.cli", *words]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    ok = vvm("verify", str(study[0]), "--no-progress")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("OK:")
    bad = altered(study[0], tmp_path, "runs/rand.sqlite", flip_byte, sign=False)
    failed = vvm("verify", str(bad), "--no-progress")
    assert failed.returncode == 1 and "runs/rand.sqlite changed" in failed.stdout
    trace = tmp_path / "one.sqlite"
    Experiment(name="one", agents=2, steps=2).run(trace, progress=False)
    made = vvm("bundle", str(trace), "--out", str(tmp_path / "one.zip"), "--no-progress")
    assert made.returncode == 0, made.stderr
    assert vvm("verify", str(tmp_path / "one.zip"), "--no-progress").returncode == 0
    nothing = vvm("verify", str(tmp_path / "none.zip"))
    assert nothing.returncode == 2 and nothing.stderr.count("\n") == 1
