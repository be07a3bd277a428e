"""Autonomous mode: every agent runs its own loop, paced by rate limits, for a duration.

Agents are not stepped in lockstep: each has a next wake-up time. The loop takes the earliest
time, lets every agent due then act (one engine step with just those agents, their decisions
concurrent), and schedules each again after its think time, or later when a ``RateTracker``
window is full. With the default ``VirtualClock`` no real time passes and the run is
deterministic; with ``RealClock`` the loop sleeps until each wake-up.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from vivarium.config import AutonomousConfig


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep_until(self, when: float) -> None: ...


@dataclass
class VirtualClock:
    """Simulated seconds: jumps to each wake-up at once. Deterministic."""

    time: float = 0.0

    def now(self) -> float:
        return self.time

    def sleep_until(self, when: float) -> None:
        self.time = max(self.time, when)


@dataclass
class RealClock:
    """Wall-clock seconds since the run started."""

    start: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        return time.monotonic() - self.start

    def sleep_until(self, when: float) -> None:
        delay = when - self.now()
        if delay > 0:
            time.sleep(delay)


class RateTracker:
    """Rolling-window budgets per agent and resource, e.g. ``{"actions": (30, 60.0)}``.

    ``limits`` maps a resource to (amount allowed, window in seconds). Usage older than the
    window no longer counts. A resource without a limit always has capacity.
    """

    def __init__(self, limits: Mapping[str, tuple[float, float]], clock: Clock) -> None:
        self.limits = dict(limits)
        self.clock = clock
        self._usage: dict[tuple[str, str], deque[tuple[float, float]]] = {}

    def _window(self, agent_id: str, resource: str) -> deque[tuple[float, float]]:
        usage = self._usage.setdefault((agent_id, resource), deque())
        _, window = self.limits[resource]
        cutoff = self.clock.now() - window
        while usage and usage[0][0] <= cutoff:
            usage.popleft()
        return usage

    def used(self, agent_id: str, resource: str) -> float:
        if resource not in self.limits:
            return 0.0
        return sum(amount for _, amount in self._window(agent_id, resource))

    def has_capacity(self, agent_id: str, resource: str, amount: float = 1.0) -> bool:
        if resource not in self.limits:
            return True
        allowed, _ = self.limits[resource]
        used = self.used(agent_id, resource)
        # A single request larger than the whole budget runs once the window is empty.
        return used + amount <= allowed or used == 0

    def consume(self, agent_id: str, resource: str, amount: float = 1.0) -> None:
        if resource in self.limits and amount > 0:
            self._window(agent_id, resource).append((self.clock.now(), amount))

    def time_until_capacity(self, agent_id: str, resource: str, amount: float = 1.0) -> float:
        """Seconds until ``amount`` fits (0 when it fits now)."""
        if self.has_capacity(agent_id, resource, amount):
            return 0.0
        allowed, window = self.limits[resource]
        usage = self._window(agent_id, resource)
        now = self.clock.now()
        remaining = sum(a for _, a in usage)
        for stamp, spent in usage:  # oldest first: wait until enough has expired
            remaining -= spent
            if remaining + amount <= allowed or remaining == 0:
                return max(0.0, stamp + window - now)
        return window

    def wait_for_capacity(self, agent_id: str, resource: str, amount: float = 1.0) -> None:
        delay = self.time_until_capacity(agent_id, resource, amount)
        if delay > 0:
            self.clock.sleep_until(self.clock.now() + delay)


def run_autonomous(engine: Any, config: AutonomousConfig, progress: Any | None = None) -> int:
    """Run ``engine``'s agents autonomously; returns the number of engine steps taken."""
    clock: Clock = VirtualClock() if config.clock == "virtual" else RealClock()
    limits: dict[str, tuple[float, float]] = {}
    if config.actions_per_minute:
        limits["actions"] = (config.actions_per_minute, 60.0)
    if config.llm_tokens_per_minute:
        limits["llm_tokens"] = (config.llm_tokens_per_minute, 60.0)
    tracker = RateTracker(limits, clock)
    ids = engine.agent_ids
    # Agents start staggered by id within the first think time, so they do not all act at 0.
    n = len(ids)
    wake = [(round(config.think_s * i / n, 9), i) for i in range(n)]
    heapq.heapify(wake)
    events = 0
    while wake and events < config.max_events:
        when = wake[0][0]
        if when >= config.duration:
            break
        clock.sleep_until(when)
        due: list[int] = []
        while wake and wake[0][0] == when:
            due.append(heapq.heappop(wake)[1])
        ready = []
        for idx in sorted(due):
            delay = tracker.time_until_capacity(ids[idx], "actions")
            if delay > 0:
                heapq.heappush(wake, (round(when + delay, 9), idx))
            else:
                ready.append(idx)
        if not ready:
            continue
        record = engine.step(agents=ready, clock=round(when, 9))
        events += 1
        if progress is not None:
            progress.update(1)
        tokens = _tokens_by_agent(record)
        for idx in ready:
            tracker.consume(ids[idx], "actions")
            tracker.consume(ids[idx], "llm_tokens", tokens.get(idx, 0))
            nxt = when + config.think_s
            if "llm_tokens" in limits:
                clock_now = clock.now()
                nxt = max(nxt, clock_now + tracker.time_until_capacity(ids[idx], "llm_tokens", 1))
            heapq.heappush(wake, (round(nxt, 9), idx))
    return events


def _tokens_by_agent(record: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    for row in record.llm_calls:
        idx, prompt, completion = row[0], row[4] or 0, row[5] or 0
        out[idx] = out.get(idx, 0) + prompt + completion
    return out
