"""A study handed over: its runs in one archive, and the check that they come out the same again.

``vvm bundle PATH... --out study.zip`` (``Run.bundle``, ``Sweep.bundle``) writes one zip:

- ``runs/``: every trace (a run's file, each run of a sweep folder, every trace in a folder);
- ``configs/``: each run's config as it re-runs from the bundle (paths made the bundle's own);
- ``cassettes/``: the recorded replies of each run with a cassette, so that it re-runs offline;
- ``agents/``: the agent folders the runs read (what their identity digests);
- ``code/``: the source files of worlds and policies given as Python objects (importable
  modules; one defined in a notebook or a script's ``__main__`` cannot be, and is said so);
- ``environment.txt``: the Python, the package version and every installed distribution;
- ``CITATION.cff`` and ``README.md`` (how to verify); ``MANIFEST.json``: each file's SHA-256.

``vvm verify study.zip`` checks the manifest first (a file changed, added or missing fails
before anything runs), then re-runs each run in a scratch folder from its config, offline (its
cassette replayed; a mock's replies are made again), and compares the new trace with the
bundled one: the same bytes, or every table's rows the same (aside from a replayed call's
cache-hit flag, the meta that says where and how calls were made, and a resumed run's history
of its stops). The first run that differs is said with
its first divergence. Exit 0 when every run matches, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vivarium.errors import ConfigError, TraceError

__all__ = ["BundleCheck", "make_bundle", "verify_bundle"]

MANIFEST = "MANIFEST.json"


# -- what a bundle holds -------------------------------------------------------------------------
def _traces(paths: list[Path]) -> list[Path]:
    """The traces ``paths`` name: files as given, a sweep's finished runs, a folder's traces."""
    from vivarium.trace.db import check_trace_file

    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*.sqlite") if p.name != "index.sqlite")
            if not inside:
                raise ConfigError(f"bundle: no trace in {path}")
            found += inside
        else:
            found.append(check_trace_file(path))
    # A fork re-runs from its parent's re-run: its ancestors come too, each before its forks.
    from vivarium.trace.fork_file import lineage

    ordered: list[Path] = []
    for trace in found:
        for ancestor in reversed(lineage(trace)):
            if ancestor.path is None:
                raise ConfigError(
                    f"bundle: {trace} is a fork of {ancestor.run_id}, whose trace is not where "
                    "the fork recorded it; put it back to bundle the fork"
                )
            ordered.append(ancestor.path.resolve())
    return list(dict.fromkeys(ordered))


@dataclass
class _Run:
    """One run as the bundle holds it."""

    trace: Path
    name: str
    config: dict[str, Any]
    files: dict[str, Path] = field(default_factory=dict)  # bundle name -> file to copy
    notes: list[str] = field(default_factory=list)


def _prepare(trace: Path, name: str) -> _Run:
    """A run's config made the bundle's own, and the files it needs."""
    from vivarium.experiment.runner import (
        _anchor_agent_folders,
        _anchor_cassette,
        _open_trace_run,
        _resume_config,
    )
    from vivarium.workflow.config import resolve_agent_folder

    meta = _open_trace_run(trace).metadata
    config = _anchor_cassette(
        trace, _anchor_agent_folders(trace, _resume_config(trace, meta, None))
    )
    run = _Run(trace, name, {})
    data = config.model_dump(mode="json")
    data.update(run_id=meta["run_id"], db=None, base_dir=None)
    # A fork names its parent by run id; verify re-runs it from the parent's re-run.
    data["fork_of"] = (
        None if config.fork_of is None else {**config.fork_of.model_dump(), "trace": None}
    )
    if isinstance(config.agents, list):
        # Each folder under the path the run recorded (part of its identity), found again from
        # the bundle's ``agents/<run>/`` as the run's base folder.
        for group in config.agents:
            if group.agent:
                folder = resolve_agent_folder(group.agent, config.base_dir)
                recorded = Path(group.agent)
                inside = (
                    recorded.relative_to(recorded.anchor) if recorded.is_absolute() else recorded
                )
                bundled = f"agents/{name}/{inside.as_posix()}"
                for file in sorted(p for p in folder.rglob("*") if p.is_file()):
                    run.files[f"{bundled}/{file.relative_to(folder).as_posix()}"] = file
                data["base_dir"] = f"agents/{name}"
    if config.llm is not None and config.llm.cache and Path(config.llm.cache).is_file():
        cassette = f"cassettes/{name}/{Path(config.llm.cache).name}"
        run.files[cassette] = Path(config.llm.cache)
        data["llm"].update(cache=cassette, cache_mode="replay")
    for key, ref in _object_refs(data):
        source = _source_of(ref)
        if source is None:
            run.notes.append(
                f"{name}: {key} {ref} has no importable source: verify cannot re-run it"
            )
        else:
            run.files[f"code/{name}/{source[0]}"] = source[1]
    run.config = data
    return run


def _object_refs(data: dict[str, Any]) -> list[tuple[str, str]]:
    """The worlds and policies the config names by an object's reference."""
    from vivarium.experiment.objects import is_reference

    refs = [("world", data.get("world")), ("policy", data.get("policy"))]
    if isinstance(data.get("agents"), list):
        refs += [(f"agents.{i}.policy", g.get("policy")) for i, g in enumerate(data["agents"])]
    return [(k, v) for k, v in refs if isinstance(v, str) and is_reference(v)]


def _source_of(ref: str) -> tuple[str, Path] | None:
    """(module file name, its source) of the object named by ``ref``, if it can be imported."""
    from vivarium.experiment.objects import OBJECTS

    entry = OBJECTS.get(ref)
    target = getattr(entry, "obj", None)
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    if target is None or module is None or module.__name__ == "__main__":
        return None
    file = getattr(module, "__file__", None)
    if not file or "." in module.__name__:  # a package's module: its package is installed
        return None
    return f"{module.__name__}.py", Path(file)


def _environment() -> str:
    from importlib import metadata

    from vivarium._version import __version__

    lines = [
        f"python {platform.python_version()} ({platform.platform()})",
        f"vivarium {__version__}",
    ]
    dists = sorted(
        {
            f"{d.metadata['Name']}=={d.version}"
            for d in metadata.distributions()
            if d.metadata["Name"]
        },
        key=str.lower,
    )
    return "\n".join([*lines, "", *dists]) + "\n"


def _citation(runs: list[_Run]) -> str:
    from vivarium._version import __version__

    ids = ", ".join(r.config["run_id"] for r in runs[:20]) + (", ..." if len(runs) > 20 else "")
    return (
        "cff-version: 1.2.0\n"
        'message: "If you use these runs, please cite them as below."\n'
        f'title: "Vivarium study: {len(runs)} run(s)"\n'
        "type: dataset\n"
        "authors:\n"
        '  - name: "The study\'s authors"\n'
        f'abstract: "Runs {ids}, recorded with Vivarium {__version__}; '
        'vvm verify re-runs them offline and checks every trace."\n'
        "keywords:\n  - agent-based simulation\n  - vivarium\n"
    )


_README = """# A Vivarium study

{count} run(s), bundled by Vivarium {version}. To check them on a clean machine:

    pip install vivarium-lab=={version}   # or the checkout this study names (environment.txt)
    vvm verify {archive}

`vvm verify` checks every file against `MANIFEST.json`, then re-runs each run offline in a
scratch folder (recorded replies from `cassettes/`, agent folders from `agents/`, worlds and
policies given as Python objects from `code/`) and compares each new trace with the one in
`runs/`. It exits 0 when every run comes out the same, and says the first divergence otherwise.

Runs: see `runs/`; configs: `configs/`; the environment they were made in: `environment.txt`.
"""


def make_bundle(
    paths: list[str | os.PathLike[str]], out: str | os.PathLike[str], *, progress: bool = False
) -> list[str]:
    """Write the study at ``paths`` (traces, sweep folders, folders of traces) to ``out``.

    Returns:
        Notes: what verify will not be able to re-run, and why (one line each).

    Raises:
        ConfigError: Nothing to bundle, or ``out`` is one of the inputs or exists as a folder.
        TraceError: A path is not a trace.
    """
    from vivarium._version import __version__

    target = Path(out)
    if target.is_dir():
        raise ConfigError(f"bundle: {target} is a folder; give the archive's file name")
    if target.exists() and not _is_bundle(target):
        raise ConfigError(f"bundle: {target} exists and is not a bundle; give another name")
    traces = _traces([Path(p) for p in paths])
    if not traces:
        raise ConfigError("bundle: nothing to bundle")
    runs = []
    names: set[str] = set()
    for trace in _progress(traces, "bundle", progress):
        name = trace.stem
        while name in names:
            name = f"{name}_"
        names.add(name)
        runs.append(_prepare(trace, name))
    files: dict[str, bytes | Path] = {}
    for run in runs:
        files[f"runs/{run.name}.sqlite"] = run.trace
        files[f"configs/{run.name}.json"] = json.dumps(
            run.config, indent=1, sort_keys=True
        ).encode()
        files.update(run.files)
    files["runs.json"] = json.dumps([run.name for run in runs]).encode()  # parents first
    files["environment.txt"] = _environment().encode()
    files["CITATION.cff"] = _citation(runs).encode()
    files["README.md"] = _README.format(
        count=len(runs), version=__version__, archive=target.name
    ).encode()
    manifest = {name: _sha256(body) for name, body in sorted(files.items())}
    partial = target.with_name(f".{target.name}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, body in sorted(files.items()):
                if isinstance(body, Path):
                    archive.write(body, name)
                else:
                    archive.writestr(name, body)
            archive.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        os.replace(partial, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise ConfigError(f"bundle: cannot write {target}: {exc.strerror or exc}") from None
    return [note for run in runs for note in run.notes]


def _is_bundle(path: Path) -> bool:
    """Whether ``path`` is a bundle (a zip with a manifest): one that may be replaced."""
    try:
        with zipfile.ZipFile(path) as archive:
            return MANIFEST in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def _sha256(body: bytes | Path) -> str:
    digest = hashlib.sha256()
    if isinstance(body, Path):
        with body.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    else:
        digest.update(body)
    return digest.hexdigest()


def _progress(items: list[Any], desc: str, show: bool) -> Any:
    if not show:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit="run")


# -- verify --------------------------------------------------------------------------------------
@dataclass
class BundleCheck:
    """What ``verify_bundle`` found: each run's outcome, and the first problem."""

    archive: Path
    runs: list[tuple[str, str]] = field(default_factory=list)  # (run, "same bytes" / ...)
    problem: str | None = None

    @property
    def ok(self) -> bool:
        """Whether every run came out as bundled (and the manifest held)."""
        return self.problem is None

    def lines(self) -> list[str]:
        """The check as ``vvm verify`` prints it: a head line, each run, the first problem."""
        head = f"{'OK' if self.ok else 'FAILED'}: {self.archive}: {len(self.runs)} run(s) re-run"
        return [head, *(f"  {name}: {what}" for name, what in self.runs)] + (
            [] if self.problem is None else [f"  first problem: {self.problem}"]
        )


def verify_bundle(
    archive: str | os.PathLike[str],
    *,
    progress: bool = False,
    keep: str | os.PathLike[str] | None = None,
) -> BundleCheck:
    """Check a bundle's manifest, re-run its runs offline, and compare every trace (see module).

    Args:
        archive: The bundle.
        progress: Show a progress bar over the runs.
        keep: A folder to keep the re-run traces in (``<run>.sqlite``), to make a figure
            from them; None: they go with the scratch folder.

    Raises:
        ConfigError: ``archive`` is no bundle (one line).
    """
    path = Path(archive)
    check = BundleCheck(path)
    if keep is not None:  # said before anything runs, not after
        try:
            Path(keep).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"verify: --keep {keep}: {exc.strerror or exc}") from None
    try:
        zipped = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ConfigError(f"verify: {path} is not a bundle: {exc}") from None
    with zipped, tempfile.TemporaryDirectory(prefix="vivarium-verify-") as scratch:
        folder = Path(scratch)
        problem = _check_manifest(zipped)
        if problem is not None:
            check.problem = problem
            return check
        zipped.extractall(folder / "bundle")
        root = folder / "bundle"
        names = json.loads((root / "runs.json").read_text())
        rerun: dict[str, Path] = {}  # run id -> its re-run trace (a fork's parent)
        for name in _progress(names, "verify", progress):
            what = _rerun(root, name, folder / "rerun", rerun)
            check.runs.append((name, what))
            if not what.startswith("same"):
                check.problem = f"{name}: {what}"
                break
        if keep is not None:
            kept = Path(keep)
            kept.mkdir(parents=True, exist_ok=True)
            for trace in sorted((folder / "rerun").glob("*.sqlite")):
                shutil.copyfile(trace, kept / trace.name)
    return check


def _check_manifest(zipped: zipfile.ZipFile) -> str | None:
    try:
        manifest = json.loads(zipped.read(MANIFEST))
    except (KeyError, ValueError):
        return f"no readable {MANIFEST}: not a bundle, or it was altered"
    held = {info.filename for info in zipped.infolist() if not info.is_dir()} - {MANIFEST}
    for name in sorted(held | set(manifest)):
        if name not in manifest:
            return f"{name} is not in the manifest (added after bundling)"
        if name not in held:
            return f"{name} is in the manifest but not in the archive (removed)"
        if hashlib.sha256(zipped.read(name)).hexdigest() != manifest[name]:
            return f"{name} changed since it was bundled (its SHA-256 is not the manifest's)"
    return None


def _rerun(root: Path, name: str, out: Path, rerun: dict[str, Path]) -> str:
    """Re-run one bundled run; how its new trace compares with the bundled one."""
    from vivarium.experiment.config import ExperimentConfig, make_config
    from vivarium.experiment.objects import name_objects
    from vivarium.experiment.runner import run_experiment
    from vivarium.trace.diff import diff_runs

    data = json.loads((root / "configs" / f"{name}.json").read_text())
    recorded = data.pop("run_id")
    if data.get("base_dir"):  # the run's agent folders, under the paths it recorded
        data["base_dir"] = str(root / data["base_dir"])
    if data.get("llm") and data["llm"].get("cache"):
        cassette = out / "cassettes" / name / Path(data["llm"]["cache"]).name
        cassette.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / data["llm"]["cache"], cassette)  # a replay never writes it
        data["llm"]["cache"] = str(cassette)
    fork = data.get("fork_of")
    if fork is not None:
        parent = rerun.get(fork["run_id"])
        if parent is None:
            return f"cannot re-run: it forks {fork['run_id']}, which did not re-run here"
        fork["trace"] = str(parent)
    fields = {k: v for k, v in data.items() if v is not None}
    bundled = root / "runs" / f"{name}.sqlite"
    fresh = out / f"{name}.sqlite"
    try:
        import warnings

        with warnings.catch_warnings(), _bundled_code(root / "code" / name, data) as objects:
            warnings.simplefilter("ignore")
            config = make_config(ExperimentConfig, name_objects({**fields, **objects}))
            run = run_experiment(config, fresh, progress=False)
    except (ImportError, AttributeError) as exc:
        return f"cannot re-run: {exc}"
    except Exception as exc:  # noqa: BLE001 - said in one line, as the first problem
        why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        # What it re-ran before it stopped (a replay missing a reply the run now asks for)
        # says where it left the bundled run.
        try:
            found = diff_runs(bundled, fresh).first if fresh.is_file() else None
        except TraceError:  # it stopped before its run was recorded
            found = None
        if found is not None:
            return f"{found.line()} (the re-run then stopped: {why})"
        return f"cannot re-run: {why}"
    rerun[run.run_id] = run.path
    if run.run_id != recorded:
        keys = ", ".join(k for k, _, _ in diff_runs(bundled, run.path).config[:4]) or "code"
        return f"another run: its config comes out as {run.run_id}, not {recorded} ({keys})"
    if run.path.read_bytes() == bundled.read_bytes():
        return "same bytes"
    found = diff_runs(bundled, run.path)
    if not found.identical:
        return found.first.line() if found.first is not None else "; ".join(found.lines()[1:3])
    other = _table_difference(bundled, run.path)  # what diff does not read: every table else
    if other is not None:
        return other
    return "same rows (the bytes differ only in where and how calls were made: cache hits, meta)"


# What may differ between a run and its offline re-run without being another result: where
# and how its calls were made (a replay is a cache hit, its settings name the scratch
# cassette), who wrote it, and the history of its stops (a resumed run's).
_VOLATILE_TABLES = frozenset({"interruptions", "meta"})
_VOLATILE_COLUMNS = {"llm_calls": frozenset({"cache_hit"})}


def _table_difference(a: Path, b: Path) -> str | None:
    """The first table whose rows differ between the traces, else None (``_VOLATILE_*`` aside).

    Every table is compared on its stored columns, row for row (``EXCEPT`` both ways): the
    reporters, the agents, the checkpoints, the texts, as much as the decisions.
    """
    import sqlite3

    from vivarium.trace.onefile import read_connection, read_uri

    con = read_connection(a)
    try:
        con.execute("ATTACH DATABASE ? AS other", (read_uri(b),))
        names = [
            {r[0] for r in con.execute(f"SELECT name FROM {s}.sqlite_master WHERE type='table'")}  # noqa: S608
            for s in ("main", "other")
        ]
        for name in sorted((names[0] | names[1]) - _VOLATILE_TABLES):
            if name not in names[0] or name not in names[1]:
                return (
                    f"table {name}: only in the {'bundled' if name in names[0] else 're-run'} trace"
                )
            skip = _VOLATILE_COLUMNS.get(name, frozenset())
            columns = ", ".join(
                r[1] for r in con.execute(f"PRAGMA main.table_info({name})") if r[1] not in skip
            )
            for x, y in (("main", "other"), ("other", "main")):
                row = con.execute(
                    f"SELECT 1 FROM (SELECT {columns} FROM {x}.{name} "  # noqa: S608
                    f"EXCEPT SELECT {columns} FROM {y}.{name}) LIMIT 1"
                ).fetchone()
                if row is not None:
                    return f"table {name}: its rows differ from the re-run's"
    except sqlite3.Error as exc:
        return f"cannot compare the traces: {exc}"
    finally:
        con.close()
    return None


@contextlib.contextmanager
def _bundled_code(code: Path, data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The worlds and policies given as objects, from the bundle's own source files.

    Each module is loaded from the bundle and stands in ``sys.modules`` under its name while
    the run is re-run (a module of that name this process has already is put back after): the
    identity digests the source the bundle holds, never a copy installed here.

    Raises:
        ImportError: The bundle has no source for one of them, or it does not load.
        AttributeError: Its module has no such object.
    """
    import importlib
    import importlib.util

    refs = _object_refs(data)
    saved: dict[str, Any] = {}
    found: dict[str, Any] = {}
    try:
        for key, ref in refs:
            module_name, _, qualname = ref.rpartition("@")[0].partition(".")
            source = code / f"{module_name}.py"
            if source.is_file():
                if module_name not in saved:
                    saved[module_name] = sys.modules.get(module_name)
                    spec = importlib.util.spec_from_file_location(module_name, source)
                    if spec is None or spec.loader is None:
                        raise ImportError(f"cannot load {source.name} from the bundle")
                    module = importlib.util.module_from_spec(spec)
                    sys.modules[module_name] = module
                    spec.loader.exec_module(module)
            else:  # an installed package's module
                try:
                    importlib.import_module(module_name)
                except ImportError:
                    raise ImportError(f"{ref} has no source in the bundle") from None
            obj: Any = sys.modules[module_name]
            for part in qualname.split("."):
                obj = getattr(obj, part)
            if key.startswith("agents."):
                index = int(key.split(".")[1])
                found.setdefault("agents", list(data["agents"]))
                found["agents"][index] = {**found["agents"][index], "policy": obj}
            else:
                found[key] = obj
        yield found
    finally:
        for name, before in saved.items():
            if before is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = before
