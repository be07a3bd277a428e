"""Autonomous mode: every agent runs its own loop, paced by rate limits, for a duration.

Agents are not stepped in lockstep: each has a next wake-up time. The loop takes the earliest
time, lets every agent due then act (one engine step with just those agents, their decisions
concurrent), and schedules each again after its think time, or later when a ``RateTracker``
window is full. With the default ``VirtualClock`` no real time passes and the run is
deterministic; with ``RealClock`` the loop sleeps until each wake-up.

The loop counts time in whole nanoseconds (``TICKS_PER_SECOND``), the resolution of the
recorded clock, so wake-ups and window expiries are exact: with float seconds an expiry
``stamp + 60`` could round to a time at which the window was still full, and an agent woke at
that same time again and again, forever.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from vivarium.errors import ConfigError, VivariumError

TICKS_PER_SECOND = 1_000_000_000
"""The loop's unit of time: a nanosecond, the precision of the clock recorded with each step."""


def to_ticks(seconds: float) -> int:
    """``seconds`` as whole ticks (nearest nanosecond): 0.7 s is 700_000_000 ticks exactly."""
    ticks = seconds * TICKS_PER_SECOND
    # Past ~1.8e299 s the float product overflows; such a time is a whole number of seconds.
    return round(ticks) if math.isfinite(ticks) else int(seconds) * TICKS_PER_SECOND


def to_seconds(ticks: int) -> float:
    """``ticks`` as seconds (a float, for the recorded clock and the progress bar)."""
    return ticks / TICKS_PER_SECOND


class AutonomousSettings(Protocol):
    """The pacing an autonomous run needs (``vivarium.experiment.config.AutonomousConfig`` has it)."""

    duration: float  # seconds of (virtual) time to run
    think_s: float  # time one action takes an agent
    actions_per_minute: float | None
    llm_tokens_per_minute: float | None
    clock: str  # "virtual" or "real"
    max_events: int  # safety cap on engine steps


class Clock(Protocol):
    """Time in some unit (the autonomous loop uses integer ticks, so its arithmetic is exact)."""

    def now(self) -> Any:
        """The current time."""
        ...

    def sleep_until(self, when: Any) -> None:
        """Return at ``when`` (at once when it has passed)."""
        ...


@dataclass
class VirtualClock:
    """Simulated time: jumps to each wake-up at once. Deterministic, in any unit."""

    time: Any = 0

    def now(self) -> Any:
        """The simulated time."""
        return self.time

    def sleep_until(self, when: Any) -> None:
        """Jump to ``when`` (never back)."""
        self.time = max(self.time, when)


@dataclass
class RealClock:
    """Wall-clock ticks (nanoseconds) since the run started."""

    start: int = field(default_factory=time.monotonic_ns)

    def now(self) -> int:
        """Nanoseconds since the run started."""
        return time.monotonic_ns() - self.start

    def sleep_until(self, when: int) -> None:
        """Sleep until ``when`` nanoseconds after the start."""
        delay = when - self.now()
        if delay > 0:
            time.sleep(delay / TICKS_PER_SECOND)


def _check_limit(resource: str, limit: object) -> None:
    """Refuse, in one line, a limit that is not (amount > 0, window > 0).

    A negative amount would never have capacity and a zero window would never forget, so
    either would stall agents.
    """

    def number(v: object) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v)

    if not isinstance(limit, tuple | list) or len(limit) != 2:
        raise ConfigError(
            f"rate limit {resource}: expected (amount allowed, window in seconds), got {limit!r}"
        )
    allowed, window = limit
    if not number(allowed) or allowed <= 0:
        raise ConfigError(
            f"rate limit {resource}: {allowed!r} is not an amount allowed (a number > 0)"
        )
    if not number(window) or window <= 0:
        raise ConfigError(
            f"rate limit {resource}: a window of {window!r} seconds is not a window (a number > 0)"
        )


class RateTracker:
    """Rolling-window budgets per agent and resource, e.g. ``{"actions": (30, 60.0)}``.

    ``limits`` maps a resource to (amount allowed, window in the clock's unit). Usage stamped
    at ``s`` counts until ``s + window``, then no longer. A resource without a limit always
    has capacity. Expiry is tested as ``s + window <= now``, the very sum ``capacity_at``
    returns, so after sleeping until that time there is capacity even with a float clock.
    """

    def __init__(self, limits: Mapping[str, tuple[float, float]], clock: Clock) -> None:
        """Budgets ``limits`` on ``clock``; a bad limit is a one-line ``ConfigError``."""
        for resource, limit in limits.items():
            _check_limit(resource, limit)
        self.limits = dict(limits)
        self.clock = clock
        self._usage: dict[tuple[str, str], deque[tuple[float, float]]] = {}

    def _window(self, agent_id: str, resource: str) -> deque[tuple[float, float]]:
        usage = self._usage.setdefault((agent_id, resource), deque())
        _, window = self.limits[resource]
        now = self.clock.now()
        while usage and usage[0][0] + window <= now:
            usage.popleft()
        return usage

    def used(self, agent_id: str, resource: str) -> float:
        """How much of ``resource`` the agent used within the window."""
        if resource not in self.limits:
            return 0.0
        return sum(amount for _, amount in self._window(agent_id, resource))

    def has_capacity(self, agent_id: str, resource: str, amount: float = 1.0) -> bool:
        """Whether ``amount`` more fits in the window now."""
        if resource not in self.limits:
            return True
        allowed, _ = self.limits[resource]
        used = self.used(agent_id, resource)
        # A single request larger than the whole budget runs once the window is empty.
        return used + amount <= allowed or used == 0

    def consume(self, agent_id: str, resource: str, amount: float = 1.0) -> None:
        """Record ``amount`` used now."""
        if resource in self.limits and amount > 0:
            self._window(agent_id, resource).append((self.clock.now(), amount))

    def capacity_at(self, agent_id: str, resource: str, amount: float = 1.0) -> Any:
        """The clock time at which ``amount`` fits: now, or when enough usage has expired.

        Always later than now when it does not fit now, so a loop that waits for it moves on.
        """
        now = self.clock.now()
        if self.has_capacity(agent_id, resource, amount):
            return now
        allowed, window = self.limits[resource]
        usage = self._window(agent_id, resource)
        remaining = sum(a for _, a in usage)
        for stamp, spent in usage:  # oldest first: wait until enough has expired
            remaining -= spent
            if remaining + amount <= allowed or remaining == 0:
                return stamp + window
        raise AssertionError("unreachable: the window empties when its newest usage expires")

    def time_until_capacity(self, agent_id: str, resource: str, amount: float = 1.0) -> Any:
        """How long until ``amount`` fits (0 when it fits now)."""
        return self.capacity_at(agent_id, resource, amount) - self.clock.now()

    def wait_for_capacity(self, agent_id: str, resource: str, amount: float = 1.0) -> None:
        """Sleep on the clock until ``amount`` fits."""
        # Sleep until the expiry itself, not now + (expiry - now): with a float clock that sum
        # can round to just before the expiry, when the window is still full.
        self.clock.sleep_until(self.capacity_at(agent_id, resource, amount))


def progress_bar_options(config: AutonomousSettings) -> dict[str, Any]:
    """The tqdm settings for a bar of an autonomous run: seconds of its clock of its duration."""
    kind = "virtual" if config.clock == "virtual" else "real"
    return {
        "total": config.duration,
        "unit": "s",
        "bar_format": "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:g} s of "
        + kind
        + " time [{elapsed}<{remaining}]",
    }


class EventCapReached(VivariumError):
    """An autonomous run needed more engine steps than ``autonomous.max_events`` allows."""


def run_autonomous(engine: Any, config: AutonomousSettings, progress: Any | None = None) -> int:
    """Run ``engine``'s agents autonomously; returns the number of engine steps taken.

    ``progress`` (tqdm-like, ``update(n)``) advances in seconds of the run's clock, up to
    ``config.duration``. A run that would need more than ``config.max_events`` steps stops
    with ``EventCapReached`` rather than end early as if complete.
    """
    clock: Clock = VirtualClock() if config.clock == "virtual" else RealClock()
    window = 60 * TICKS_PER_SECOND
    limits: dict[str, tuple[float, float]] = {}
    if config.actions_per_minute:
        limits["actions"] = (config.actions_per_minute, window)
    if config.llm_tokens_per_minute:
        limits["llm_tokens"] = (config.llm_tokens_per_minute, window)
    tracker = RateTracker(limits, clock)
    ids = engine.agent_ids
    duration, think = to_ticks(config.duration), to_ticks(config.think_s)
    # Agents start staggered by id within the first think time, so they do not all act at 0
    # (agent i at think * i / n, rounded to the nearest tick).
    n = len(ids)
    wake = [((2 * think * i + n) // (2 * n), i) for i in range(n)]
    heapq.heapify(wake)
    bar = _ClockBar(progress)
    events = 0
    # Each pass takes the earliest wake-up and puts every agent due then back strictly later
    # (after a think time of at least one tick, or at a window's expiry, which is later than
    # now): the earliest wake-up only grows, so the loop reaches the duration.
    while wake:
        when = wake[0][0]
        if when >= duration:
            break
        clock.sleep_until(when)
        bar.advance(when)
        due: list[int] = []
        while wake and wake[0][0] == when:
            due.append(heapq.heappop(wake)[1])
        ready = []
        for idx in sorted(due):
            if tracker.has_capacity(ids[idx], "actions"):
                ready.append(idx)
            else:  # the window is full until one of its actions expires, later than now
                heapq.heappush(wake, (tracker.capacity_at(ids[idx], "actions"), idx))
        if not ready:
            continue
        if events >= config.max_events:
            raise EventCapReached(
                f"autonomous run stopped at max_events={config.max_events} engine steps, "
                f"at {to_seconds(when):g} s of {config.duration:g} s; raise "
                "autonomous.max_events to run it to the end (committed steps are kept)"
            )
        record = engine.step(agents=ready, clock=to_seconds(when))
        events += 1
        tokens = _tokens_by_agent(record)
        for idx in ready:
            tracker.consume(ids[idx], "actions")
            tracker.consume(ids[idx], "llm_tokens", tokens.get(idx, 0))
            nxt = when + think
            if "llm_tokens" in limits:
                nxt = max(nxt, tracker.capacity_at(ids[idx], "llm_tokens", 1))
            heapq.heappush(wake, (nxt, idx))
    bar.advance(duration)  # nobody acts again before the end: the run has covered it all
    return events


class _ClockBar:
    """Moves a tqdm-like bar forward to a clock time, in seconds."""

    def __init__(self, progress: Any | None) -> None:
        self.progress = progress
        self.sent = 0.0  # the bar's own float sum of our updates (tqdm adds them up: n += step)

    def advance(self, ticks: int) -> None:
        target = to_seconds(ticks)
        if self.progress is None or target <= self.sent:
            return
        step = target - self.sent
        while self.sent + step > target:  # never past the clock (nor the total at the end)
            step = math.nextafter(step, 0.0)
        self.progress.update(step)
        self.sent += step


def _tokens_by_agent(record: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    for row in record.llm_calls:
        idx, prompt, completion = row[0], row[4] or 0, row[5] or 0
        out[idx] = out.get(idx, 0) + prompt + completion
    return out
