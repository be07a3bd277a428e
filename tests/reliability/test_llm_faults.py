"""LLM faults: a 200-step run against a server that fails in every way it can completes, and
every fault is on record: in ``llm_calls`` (an error row per failed attempt) or as a recorded
fallback action (a reply the policy could not use). Retries go through the rate limiter."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import time
from pathlib import Path

import pytest

from tests.reliability.helpers import TimedServer
from vivarium import Experiment, Run
from vivarium.experiment.build import gateway_settings
from vivarium.gateways.litellm_gateway import LiteLLMGateway
from vivarium.gateways.ratelimit import RateLimitedGateway, RateLimiter, Ticket
from vivarium.gateways.retry import RetryGateway
from vivarium.gateways.stack import build_gateway, layers
from vivarium.seeding import canonical_json
from vivarium.trace.db import TraceDb
from vivarium.trace.validate import validate_trace

# 10% of requests get each fault, in a fixed cycle over the request index.
SCHEDULE = [
    "500",
    "429",
    "timeout",
    "close_mid_body",
    "not_json",
    "bad_tool_args",
    "unknown_tool",
    "empty",
    "wrong_types",
    None,
]
# Faults the gateway sees (an error row in llm_calls, retried), by the text of the error column.
TRANSIENT = {
    "500": "InternalServerError: injected 500",
    "429": "RateLimitError: injected 429",
    "timeout": "Timeout: ",
    "close_mid_body": "(connection broken)",
    "not_json": "(reply is not JSON)",
}
# Faults in a well-formed reply: the policy records a fallback noop with this reason.
CONTENT = {
    "bad_tool_args": "bad arguments: post_message: arguments are not valid JSON",
    "unknown_tool": "unknown tool 'launch_rockets'",
    "empty": "empty reply",
    "wrong_types": "bad arguments: post_message: content: Input should be a valid string",
}
STEPS, AGENTS, RETRIES = 200, 2, 2
RETRY_AFTER = 0.05  # seconds the 429 replies ask for
# The limiter runs on a clock 240x faster than real time: its minute lasts 0.25 s.
SPEEDUP, RPM = 240.0, 8
WINDOW = 60.0 / SPEEDUP


def quick_stack(llm, seed: int, max_backoff: float):  # noqa: ANN001, ANN201
    """The stack the config builds (retry over the rate limit over the provider), with short
    backoffs; the limiter is then put on a fast clock."""
    settings = dataclasses.replace(gateway_settings(llm), backoff=0.005, max_backoff=max_backoff)
    gateway = build_gateway(settings, seed)
    kinds = [type(layer) for layer in layers(gateway)]
    assert kinds == [RetryGateway, RateLimitedGateway, LiteLLMGateway], kinds
    return gateway


def fast_counting(limiter: RateLimiter) -> list[float]:
    """Put the run's limiter on a clock SPEEDUP times faster; returns the list it fills with
    the (limiter) time of each call it admits."""
    limiter.clock = lambda: time.monotonic() * SPEEDUP
    limiter.sleep = lambda s: time.sleep(s / SPEEDUP)
    limiter.asleep = lambda s: asyncio.sleep(s / SPEEDUP)
    admitted: list[float] = []
    try_admit = limiter.try_admit

    def counting(estimated_tokens: int = 0) -> Ticket | float:
        result = try_admit(estimated_tokens)
        if isinstance(result, Ticket):
            admitted.append(result.time)
        return result

    limiter.try_admit = counting  # type: ignore[method-assign]
    return admitted


def busiest(times: list[float], window: float) -> int:
    """The most of ``times`` that fall within any ``window``."""
    times = sorted(times)
    most, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - window:
            j += 1
        most = max(most, i - j + 1)
    return most


@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_a_200_step_run_survives_every_fault_and_records_each(
    tmp_path: Path, transport: str
) -> None:
    db = tmp_path / "faults.sqlite"
    with TimedServer(faults=SCHEDULE, cycle=True, retry_after=RETRY_AFTER, timeout_s=0.8) as server:
        exp = Experiment(
            name="faults",
            policy="cognitive",
            agents=AGENTS,
            steps=STEPS,
            seed=3,
            scheduling="simultaneous",
            llm={
                "model": "openai/fake",
                "api_base": server.base_url,
                "transport": transport,
                "force_tool": True,
                "timeout": 0.3,  # the "timeout" fault hangs for 0.8 s; the client gives up first
                "num_retries": RETRIES,
                "rate_limit_rpm": RPM,
                # Decisions that run out of retries are recorded fallbacks here, not a stop
                # (the default; tests/reliability/test_llm_outage.py).
                "on_llm_error": "fallback",
            },
        )
        # The stack the config builds, with short backoffs and the limiter on a fast clock.
        gateway = quick_stack(exp.config.llm, exp.config.seed, max_backoff=0.02)
        limiter = layers(gateway)[1].limiter
        admitted = fast_counting(limiter)
        trace = TraceDb(db)
        try:
            exp.build(trace, {"gateway": gateway}).run(STEPS)
        finally:
            trace.close()
        faults = [server.fault_for(i, {}) for i in range(server.request_count)]
        bodies = [canonical_json(b) for b in server.requests]
        arrivals = [server.arrivals[i] for i in range(server.request_count)]

    run = Run.open(db)
    assert run.metadata["status"] == "complete"
    assert validate_trace(db).status == "ok"
    actions, calls = run.actions, run.llm_calls
    assert len(actions) == STEPS * AGENTS  # nothing dropped

    injected = collections.Counter(faults)
    # Every HTTP attempt has its llm_calls row, and each failed attempt says what went wrong.
    assert len(calls) == len(faults)
    errors = calls["error"].dropna()
    for fault, text in TRANSIENT.items():
        assert errors.str.contains(text, regex=False).sum() == injected[fault], fault
    assert len(errors) == sum(injected[f] for f in TRANSIENT)
    assert calls["error"].isna().sum() == sum(injected[f] for f in (*CONTENT, None))

    # Every unusable reply reaches the policy and becomes a recorded fallback noop: not a
    # success, the reason in the error column.
    reasons = actions["error"].where(actions["fallback"])
    assert not actions.loc[actions["fallback"], "success"].any()
    assert actions["metadata"].map(lambda m: "fallback_reason" not in json.loads(m)).all()
    for fault, text in CONTENT.items():
        assert reasons.str.startswith(text).sum() == injected[fault], fault
    # Decisions whose every attempt failed end as a fallback naming the last error.
    per_decision = calls.groupby(["step", "agent_id"])["error"].agg(["count", "size", "last"])
    gave_up = per_decision["count"] == RETRIES + 1
    assert (per_decision["size"] <= RETRIES + 1).all()
    llm_errors = reasons.str.startswith("llm error: LLMCallError", na=False)
    assert llm_errors.sum() == gave_up.sum() > 0
    assert ((actions["action"] == "noop") == reasons.notna()).all()
    ok = actions[reasons.isna()]
    assert (ok["action"] == "post_message").all() and len(ok) == injected[None]
    assert len(run.messages) == injected[None]

    # Retries go through the limiter: it admitted every request the server saw, never more than
    # RPM in one of its minutes; the server saw them spread out alike (half a window of slack
    # for the time a request takes from admission to the server).
    assert len(admitted) == len(faults)
    assert limiter.waits > 0  # the limit was reached, so this checks something
    assert busiest(admitted, 60.0) <= RPM
    assert busiest(arrivals, 0.5 * WINDOW) <= RPM
    # A 429's Retry-After is honoured: the same request comes back no sooner.
    last_seen: dict[str, tuple[float, str | None]] = {}
    waits = []
    for body, fault, t in zip(bodies, faults, arrivals, strict=True):
        if body in last_seen and last_seen[body][1] == "429":
            waits.append(t - last_seen[body][0])
        last_seen[body] = (t, fault)
    assert waits and min(waits) >= RETRY_AFTER

    summary = {fault or "none": injected[fault] for fault in SCHEDULE}
    print(
        f"\nfaults injected over {len(faults)} requests: {summary}; "
        f"{gave_up.sum()} decisions gave up after {RETRIES + 1} attempts; "
        f"limiter waited {limiter.waits} times, at most {busiest(admitted, 60.0)}/{RPM} per minute"
    )


@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_blocking_calls_take_the_limiter_for_every_attempt_too(transport: str) -> None:
    """``gateway.chat`` (the blocking path) also waits for the limiter before each retry."""
    with TimedServer(faults=["500", "429", "not_json", None], retry_after=0.01) as server:
        llm = {
            "model": "openai/fake",
            "api_base": server.base_url,
            "transport": transport,
            "num_retries": 3,
            "rate_limit_rpm": 2,
        }
        gateway = quick_stack(Experiment(policy="cognitive", llm=llm).config.llm, 0, 0.01)
        limiter = layers(gateway)[1].limiter
        admitted = fast_counting(limiter)
        reply = gateway.chat(model=llm["model"], messages=[{"role": "user", "content": "hi"}])
    assert reply.content and server.request_count == len(admitted) == 4
    assert limiter.waits > 0  # 2 per limiter minute: the third attempt had to wait
    assert admitted[2] - admitted[0] >= 60.0 and admitted[3] - admitted[1] >= 60.0
