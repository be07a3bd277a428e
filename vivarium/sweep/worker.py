"""Running one sweep run, wherever it runs: ``run_task`` and the local worker process.

Every backend calls ``run_task`` with a task of plain data (the run's config as a dict, its
trace path, the index path, plugin modules, and the user's worlds and policies pickled by
``pack_registrations``); it runs or resumes the run, records its progress in the index and
returns a result dict, never raising.

The local backend's workers are fresh interpreters started with ``python -c WORKER_CODE``
(never multiprocessing's spawn or forkserver, which re-run the user's script or notebook kernel
module as ``__mp_main__`` in every worker: a script without a main guard would start its sweep
again in each one). A worker imports only Vivarium, gets the sweep process's ``sys.path``, and
exchanges pickled task and result dicts over pipes (``send_message`` / ``receive_message``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from vivarium.errors import (
    ConfigError,
    ResumeDiverged,
    ResumedWarning,
    RunHealthWarning,
    TraceError,
    VivariumError,
)
from vivarium.experiment.config import ExperimentConfig, make_config
from vivarium.experiment.runner import resume_run, run_experiment, transport_settings
from vivarium.sweep.index import SweepIndex, utc_now
from vivarium.sweep.plan import PlannedRun
from vivarium.trace.run import read_run_record
from vivarium.trace.status import is_resumable

__all__ = [
    "SYS_PATH_VAR",
    "WORKER_CODE",
    "error_line",
    "pack_registrations",
    "receive_message",
    "run_task",
    "send_message",
    "worker_main",
]

_MAX_ERROR_CHARS = 500

# The environment variable that carries the sweep process's ``sys.path`` to a worker (JSON).
SYS_PATH_VAR = "VIVARIUM_SWEEP_SYS_PATH"
# What a local worker runs: ``python -c WORKER_CODE TASK_FD RESULT_FD ALIVE_FD``.
WORKER_CODE = (
    "import json, os, sys; "
    f"sys.path[:] = json.loads(os.environ.pop({SYS_PATH_VAR!r})); "
    "from vivarium.sweep.worker import worker_main; worker_main()"
)
_HEADER = struct.Struct("!Q")

_IMPORTED_PLUGINS: set[str] = set()
_APPLIED_REGISTRATIONS: set[str] = set()


def error_line(exc: BaseException) -> str:
    """An exception as the one line the index records.

    Args:
        exc: The exception.

    Returns:
        ``Type: first line`` (a ``VivariumError``'s first line alone, since it already names
        what is wrong), cut to 500 characters.
    """
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if isinstance(exc, VivariumError) and first:
        line = first
    return line if len(line) <= _MAX_ERROR_CHARS else line[: _MAX_ERROR_CHARS - 3] + "..."


def _import_plugins(modules: Iterable[str]) -> None:
    for module in modules:
        if module not in _IMPORTED_PLUGINS:
            importlib.import_module(module)
            _IMPORTED_PLUGINS.add(module)


def pack_registrations(runs: Sequence[PlannedRun]) -> bytes | None:
    """The user's worlds and policies that the runs use, pickled for the workers.

    A world or policy registered in a notebook cell or a script exists only in that process:
    a worker process or a Ray node has never seen it. cloudpickle sends a factory defined in
    ``__main__`` (a notebook, a script, ``python -c``) by value, with the classes and closures
    it uses, and one from an importable module by reference (the worker imports the module).

    Args:
        runs: The sweep's planned runs.

    A world or policy given as a Python object (``Experiment(world=MyWorld)``) travels the
    same way, under ``"object"`` (see ``vivarium.experiment.objects``); one from a module made at run time
    (a notebook's) travels by value too.

    Returns:
        The pickled ``{"world": {name: factory}, "policy": {...}, "digests": {"policy:name":
        digest}, "object": {ref: object}}``,
        or None when every world and policy the runs use is built in.

    Raises:
        ConfigError: A factory cannot be pickled (naming it, and ``backend='inline'``).
    """
    from vivarium.engine.reporters import active_reporters
    from vivarium.experiment.build import POLICIES, WORLDS
    from vivarium.experiment.identity import factory_digest
    from vivarium.experiment.objects import dumps_by_value, pack_objects

    user: dict[str, dict[str, Any]] = {"world": {}, "policy": {}}
    names: set[str] = set()
    for run in runs:
        c = run.config
        groups = c.agents if isinstance(c.agents, list) else None
        used = [("world", c.world, WORLDS)]
        policies = {g.policy for g in groups} if groups else {c.policy}
        used += [("policy", name, POLICIES) for name in sorted(policies)]
        for kind, name, table in used:
            names.add(name)
            factory = table.get(name)  # registered in this process (None: built in)
            if factory is not None:
                user[kind].setdefault(name, factory)
    objects = pack_objects(names)
    reporters = active_reporters()  # the experiment's own, outside its config
    if not user["world"] and not user["policy"] and not objects and not reporters:
        return None
    if reporters:
        try:
            dumps_by_value(reporters)
        except Exception as exc:
            raise ConfigError(
                "sweep: the experiment's model_reporters/agent_reporters cannot be sent to "
                f"worker processes ({error_line(exc)}): make what they use picklable, declare "
                "them on the world, or use backend='inline'"
            ) from None
    for kind, table in [*user.items(), ("object", objects)]:
        for name, factory in sorted(table.items()):
            try:
                dumps_by_value(factory)
            except Exception as exc:
                what = factory.kind if kind == "object" else kind
                raise ConfigError(
                    f"sweep: the {what} '{name}' cannot be sent to worker processes "
                    f"({error_line(exc)}): make what it uses picklable, or use "
                    "backend='inline'"
                ) from None
    # Each factory's digest as named here, where its code is: a worker's copy is not in the
    # file it came from, and its runs must have the ids the sweep gave them.
    user["digests"] = {
        f"{kind}:{name}": factory_digest(kind, name, factory)
        for kind, table in user.items()
        for name, factory in table.items()
    }
    if objects:
        user["object"] = objects
    if reporters:
        from vivarium.experiment.identity import reporter_digests

        user["reporters"] = reporters
        # As named here, where their code is (a worker's copy is not in its file).
        user["reporter_digests"] = reporter_digests(runs[0].config) if runs else {}
    return dumps_by_value(user)


# The experiment reporters each registrations blob carried (by its hash), for the runs it serves.
_SENT_REPORTERS: dict[str, Any] = {}


def _sent_reporters(blob: bytes | None) -> Any:
    """A ``with`` block in which the reporters the sweep process sent are in force."""
    from vivarium.engine.reporters import experiment_reporters

    sent = _SENT_REPORTERS.get(hashlib.sha256(blob).hexdigest()) if blob else None
    return experiment_reporters(*(sent or (None, None, None)))


def _apply_registrations(blob: bytes | None) -> None:
    """Register, in this worker, the worlds and policies the sweep process sent (once each)."""
    if not blob:
        return
    key = hashlib.sha256(blob).hexdigest()
    if key in _APPLIED_REGISTRATIONS:
        return
    import cloudpickle  # noqa: F401  (objects pickled by value need it to load)

    from vivarium.experiment.build import keep_sent_digest, register_policy, register_world
    from vivarium.experiment.objects import unpack_objects

    user = pickle.loads(blob)
    reporters = user.get("reporters")
    _SENT_REPORTERS[key] = (*reporters, user.get("reporter_digests")) if reporters else None
    unpack_objects(user.get("object", {}))
    for name, factory in user["world"].items():
        register_world(name, factory)
    for name, factory in user["policy"].items():
        register_policy(name, factory)
    for key, digest in user.get("digests", {}).items():
        kind, _, name = key.partition(":")
        keep_sent_digest(kind, name, user[kind][name], digest)
    _APPLIED_REGISTRATIONS.add(key)


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run (or resume) one sweep run; never raises. The worker function of every backend.

    A run with an unfinished trace with committed steps is resumed exactly (``resume_run``:
    its committed steps kept; rerun from the start when it cannot go on: a damaged trace, or
    a run that is not reproducible); any other is run. Its row in the index goes to ``running``
    with one more attempt, then to its outcome.

    Args:
        task: Plain data: index, run_id, config (a ``model_dump``), path, index_path, plugins,
            cwd, and the user's worlds and policies (``registrations``, see
            ``pack_registrations``).

    Returns:
        index, run_id, status (``complete`` or ``failed``), error (one line, or None),
        action (``ran``, ``resumed``, ``reran`` or None) and seconds.
    """
    start = time.perf_counter()
    idx = task["index"]
    result: dict[str, Any] = {"index": idx, "run_id": task["run_id"], "action": None}
    index: SweepIndex | None = None
    with contextlib.suppress(Exception):
        index = SweepIndex(task["index_path"])
        index.update(
            idx,
            attempt=True,
            status="running",
            error=None,
            worker=f"{socket.gethostname()}:{os.getpid()}",
            started_at=utc_now(),
            finished_at=None,
        )
    try:
        cwd = task.get("cwd")
        if cwd and os.path.isdir(cwd) and os.getcwd() != cwd:
            os.chdir(cwd)
        try:
            _import_plugins(task.get("plugins") or ())
        except Exception as exc:
            raise ConfigError(f"cannot import plugin module: {error_line(exc)}") from None
        try:
            _apply_registrations(task.get("registrations"))
        except Exception as exc:
            raise ConfigError(
                f"cannot load the sweep's worlds and policies: {error_line(exc)}"
            ) from None
        config = make_config(ExperimentConfig, task["config"], where=f"sweep run {idx}")
        path = Path(task["path"])
        with warnings.catch_warnings(), _sent_reporters(task.get("registrations")):
            # The sweep reports every run's health at its end, in one warning (Sweep.problems).
            warnings.simplefilter("ignore", RunHealthWarning)
            # The index says which runs were resumed (``action``); no line per run.
            warnings.simplefilter("ignore", ResumedWarning)
            if is_resumable(path, task["run_id"]):
                try:  # the exact resume: the committed steps kept, re-executed, checked
                    # How its LLM calls go on: as ``Experiment.run`` resumes one (the settings
                    # the run records, the concurrency it used, and the key it never records).
                    resume_run(path, progress=False, llm=transport_settings(config))
                    result["action"] = "resumed"
                except (TraceError, ConfigError, ResumeDiverged):
                    # It cannot go on (damaged, or not reproducible): the run starts over.
                    run_experiment(config, path, progress=False, overwrite=True)
                    result["action"] = "reran"
            else:
                run_experiment(config, path, progress=False)
                result["action"] = "ran"
        meta = read_run_record(path)
        if meta["status"] != "complete":
            raise VivariumError(f"run ended with status '{meta['status']}'")
        result.update(status="complete", error=None)
    except Exception as exc:
        result.update(status="failed", error=error_line(exc))
    result["seconds"] = round(time.perf_counter() - start, 6)
    if index is not None:
        with contextlib.suppress(Exception):
            index.update(
                idx,
                status=result["status"],
                error=result["error"],
                action=result["action"],
                finished_at=utc_now(),
                seconds=result["seconds"],
            )
        index.close()
    return result


# -- the local worker process -----------------------------------------------------------------


def send_message(fd: int, message: Any) -> None:
    """Write one pickled message to a pipe, length first.

    Args:
        fd: The pipe's write end.
        message: Any picklable object (a task, a result).
    """
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive_message(fd: int) -> Any:
    """Read the next message ``send_message`` wrote.

    Args:
        fd: The pipe's read end.

    Returns:
        The message, or None when the other end is closed (or died).
    """
    head = _read_exactly(fd, _HEADER.size)
    if head is None:
        return None
    data = _read_exactly(fd, _HEADER.unpack(head)[0])
    return None if data is None else pickle.loads(data)


def _watch_sweep(alive_fd: int) -> None:
    """Exit when the sweep process is gone (killed, or its kernel died).

    The sweep process holds the only write end of this pipe and never writes to it: the read
    returns only when the kernel closes it, at the sweep's death. A worker would otherwise
    finish its run racing a resumed sweep for the same trace; exiting at once leaves the trace
    as a kill would: resumable.
    """
    with contextlib.suppress(OSError):
        os.read(alive_fd, 1)
    os._exit(70)


def _interrupt_once(signum: int, frame: Any) -> None:
    """Ctrl-C in a worker: interrupt the run once, then ignore further Ctrl-Cs.

    A terminal's Ctrl-C reaches the whole process group and the sweep process passes it on as
    well, so a worker often gets two. The second must not cut short the recording of the
    first (the run's ``interrupted`` status and the trace's close).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def worker_main() -> None:
    """A local worker: run each task the sweep process sends, send back its result.

    The pipes' file descriptors are the command line's three arguments (tasks in, results
    out, and the sweep's liveness pipe). The worker says it is ready, then runs tasks until
    the task pipe closes; Ctrl-C ends it with exit code 130, its run recorded as interrupted.
    """
    task_fd, result_fd, alive_fd = (int(arg) for arg in sys.argv[1:4])
    os.environ.setdefault("VIVARIUM_PROGRESS", "0")
    signal.signal(signal.SIGINT, _interrupt_once)
    threading.Thread(
        target=_watch_sweep, args=(alive_fd,), name="vivarium-sweep-watchdog", daemon=True
    ).start()
    try:
        send_message(result_fd, {"ready": os.getpid()})
        while (task := receive_message(task_fd)) is not None:
            send_message(result_fd, run_task(task))
    except KeyboardInterrupt:  # Ctrl-C: the run is recorded as interrupted, resumable
        sys.exit(130)
