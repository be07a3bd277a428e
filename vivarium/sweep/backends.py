"""Where a sweep's runs run: in this process, in local worker processes, or on Ray.

An executor takes the tasks still to do and a ``done`` callback, runs each task with
``run_task`` somewhere, and calls ``done`` with each result in this process as it arrives.
Every backend and worker count gives the same traces, hence the same merged frames.

- ``inline`` runs the tasks in this process, in turn.
- ``local`` starts up to ``max_workers`` worker processes with ``python -c`` (see
  ``vivarium.sweep.worker``), each once, and feeds them tasks over pipes. A worker that dies
  fails only the run it was running; Ctrl-C is passed on to the workers, whose runs end as
  interrupted and resumable.
- ``ray`` runs one Ray task per run (``ray_address`` joins a cluster whose nodes share the
  sweep folder).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from vivarium.errors import ConfigError
from vivarium.optional import require
from vivarium.sweep.worker import (
    SYS_PATH_VAR,
    WORKER_CODE,
    error_line,
    receive_message,
    run_task,
    send_message,
)

__all__ = [
    "BACKENDS",
    "EXECUTORS",
    "Backend",
    "Done",
    "Executor",
    "default_workers",
    "execute_inline",
    "execute_local",
    "execute_ray",
]

Backend = Literal["local", "ray", "inline"]
BACKENDS = ("local", "ray", "inline")
# Called in the sweep process with each run's result dict (see ``run_task``).
Done = Callable[[dict[str, Any]], None]

_MAX_START_FAILURES = 3
_STOP_SECONDS = 10.0


class Executor(Protocol):
    """Runs a sweep's tasks on one backend and reports each result to ``done``."""

    def __call__(self, tasks: list[dict[str, Any]], done: Done, **options: Any) -> None:
        """Run every task, calling ``done`` once per task with its result.

        Args:
            tasks: The tasks (see ``run_task``), in run order.
            done: Called in this process with each result, as it arrives.
            **options: ``max_workers`` (at most this many runs at once; None: the backend's
                default), ``ray_address`` (the Ray cluster to join) and others; a backend
                ignores those it has no use for.
        """
        ...


def default_workers() -> int:
    """How many runs at once by default: the CPUs this process may use.

    Returns:
        At least 1.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


def execute_inline(tasks: list[dict[str, Any]], done: Done, **_: Any) -> None:
    """Run ``tasks`` in this process, one after the other.

    Args:
        tasks: The tasks, in run order.
        done: Called with each result.
        **_: Other executor settings (unused).
    """
    for task in tasks:
        done(run_task(task))


class _LocalWorker:
    """One worker process, its pipes, and the task it is running."""

    def __init__(self, env: dict[str, str]) -> None:
        task_r, self.task_w = os.pipe()
        self.result_r, result_w = os.pipe()
        alive_r, self.alive_w = os.pipe()
        child = (task_r, result_w, alive_r)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", WORKER_CODE, *map(str, child)],
                pass_fds=child,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            for fd in (self.task_w, self.result_r, self.alive_w):
                os.close(fd)
            raise
        finally:
            for fd in child:
                os.close(fd)
        self.task: dict[str, Any] | None = None
        self.ready = False

    def give(self, task: dict[str, Any]) -> None:
        self.task = task
        with contextlib.suppress(OSError):  # gone: its closed result pipe says so
            send_message(self.task_w, task)

    def finish(self) -> None:
        """No more tasks: the worker exits when it reads the end of its task pipe."""
        if self.task_w >= 0:
            os.close(self.task_w)
            self.task_w = -1

    def close(self, timeout: float) -> int:
        self.finish()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        for fd in (self.result_r, self.alive_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        return code


def _worker_env() -> dict[str, str]:
    paths = [os.getcwd() if p == "" else p for p in sys.path]
    return {**os.environ, "VIVARIUM_PROGRESS": "0", SYS_PATH_VAR: json.dumps(paths)}


def _death(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


def _failure(task: dict[str, Any], error: str) -> dict[str, Any]:
    return {
        "index": task["index"],
        "run_id": task["run_id"],
        "status": "failed",
        "error": error,
        "action": None,
    }


def execute_local(
    tasks: list[dict[str, Any]],
    done: Done,
    *,
    max_workers: int,
    **_: Any,
) -> None:
    """Run ``tasks`` on up to ``max_workers`` worker processes, each started once.

    A worker that dies fails only the run it was running (a segfault, the OOM killer); a new
    worker takes its place. Workers that cannot start at all fail the runs with that reason.

    Args:
        tasks: The tasks, in run order.
        done: Called with each result.
        max_workers: How many worker processes at most.
        **_: Other executor settings (unused).

    Raises:
        ConfigError: There is no Python executable to start workers with.
    """
    if not sys.executable:
        raise ConfigError("sweep: no Python executable to start workers with; use backend='inline'")
    queue = collections.deque(tasks)
    env = _worker_env()
    selector = selectors.DefaultSelector()
    workers: list[_LocalWorker] = []
    start_failures = 0
    started_once = False

    def start() -> None:
        worker = _LocalWorker(env)
        workers.append(worker)
        selector.register(worker.result_r, selectors.EVENT_READ, worker)
        feed(worker)

    def feed(worker: _LocalWorker) -> None:
        if queue:
            worker.give(queue.popleft())
        else:
            worker.finish()

    try:
        for _ in range(min(max_workers, len(queue))):
            start()
        while any(w.task is not None for w in workers):
            for key, _events in selector.select():
                worker = key.data
                message = receive_message(worker.result_r)
                if message is not None and "ready" in message:
                    worker.ready = started_once = True
                    continue
                if message is not None:
                    worker.task = None
                    done(message)
                    feed(worker)
                    continue
                # The worker is gone.
                selector.unregister(worker.result_r)
                workers.remove(worker)
                code = worker.close(_STOP_SECONDS)
                task, worker.task = worker.task, None
                if worker.ready:
                    if task is not None:
                        died = f"the worker process running this run died ({_death(code)})"
                        done(_failure(task, died))
                    if queue:
                        start()
                    continue
                if task is not None:
                    queue.appendleft(task)
                start_failures += 1
                if started_once and start_failures < _MAX_START_FAILURES:
                    start()
                elif not any(w.task is not None for w in workers):
                    error = (
                        f"the worker processes could not start ({_death(code)}; their error is "
                        "on stderr); use backend='inline' to run in this process"
                    )
                    while queue:
                        done(_failure(queue.popleft(), error))
    except BaseException:
        _stop_workers(workers)
        raise
    finally:
        for worker in workers:
            worker.close(_STOP_SECONDS)
        selector.close()


def _stop_workers(workers: Sequence[_LocalWorker]) -> None:
    """Interrupted: Ctrl-C the workers (their runs end as interrupted, resumable), then wait.

    A terminal's Ctrl-C reaches the workers itself; a notebook's interrupt reaches only the
    kernel, so it is passed on. A worker that does not stop in time is killed, as a crash
    would: its trace stays resumable.
    """
    for worker in workers:
        if worker.process.poll() is None:
            with contextlib.suppress(OSError):
                worker.process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + _STOP_SECONDS
    for worker in workers:
        worker.close(max(0.0, deadline - time.monotonic()))


def execute_ray(
    tasks: list[dict[str, Any]],
    done: Done,
    *,
    max_workers: int | None,
    ray_address: str | None,
    **_: Any,
) -> None:
    """Run each task as a Ray task, at most ``max_workers`` at once.

    Ray is started here (on this machine, or joining ``ray_address``) unless it already runs.
    Interrupted, the running tasks are cancelled.

    Args:
        tasks: The tasks, in run order.
        done: Called with each result.
        max_workers: At most this many at once (None: the cluster's CPUs).
        ray_address: The cluster to join (None: a local Ray).
        **_: Other executor settings (unused).

    Raises:
        MissingDependency: Ray is not installed (naming the extra to install).
    """
    ray = require("ray")
    import logging

    if not ray.is_initialized():
        if ray_address:
            ray.init(address=ray_address, logging_level=logging.WARNING)
        else:
            ray.init(
                num_cpus=max_workers or default_workers(),
                include_dashboard=False,
                logging_level=logging.WARNING,
            )
    remote = ray.remote(num_cpus=1, max_retries=0)(run_task)
    limit = max_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    queue = list(tasks)
    running: dict[Any, dict[str, Any]] = {}
    try:
        while queue or running:
            while queue and len(running) < limit:
                task = queue.pop(0)
                running[remote.remote(task)] = task
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                task = running.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # the worker died, or Ray could not run the task
                    result = {"index": task["index"], "run_id": task["run_id"], "action": None}
                    result.update(status="failed", error=error_line(exc))
                done(result)
    except BaseException:
        for ref in running:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise


EXECUTORS: dict[str, Executor] = {
    "inline": execute_inline,
    "local": execute_local,
    "ray": execute_ray,
}
