"""A load run in its own process, reporting its peak memory and row counts as one JSON line.

``python -m tests.reliability.load_child llm|random AGENTS STEPS DB`` (from the project root).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

from vivarium import Experiment, Run
from vivarium.gateways.base import LLMRequest, LLMResponse
from vivarium.gateways.mock import MockLLMGateway
from vivarium.trace.db import TraceDb

CONCURRENCY = 200


class InFlightMock(MockLLMGateway):
    """The mock gateway, counting how many calls are awaited at once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.in_flight = 0
        self.max_in_flight = 0

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await super().acomplete(request)
        finally:
            self.in_flight -= 1


def peak_rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(kind: str, agents: int, steps: int, db: str) -> dict[str, Any]:
    started = time.perf_counter()
    report: dict[str, Any] = {}
    if kind == "llm":
        exp = Experiment(
            name="load-llm",
            policy="cognitive",
            agents=agents,
            steps=steps,
            seed=1,
            scheduling="simultaneous",
            llm={
                "mock": True,
                "mock_latency_ms": 3,
                "max_concurrency": CONCURRENCY,
                "graph": False,
            },
        )
        gateway = InFlightMock(seed=1, latency_ms=3)
        trace = TraceDb(db)
        try:
            exp.build(trace, {"gateway": gateway}).run(steps)
        finally:
            trace.close()
        report["max_in_flight"] = gateway.max_in_flight
    else:
        Experiment(name="load-random", agents=agents, steps=steps, seed=1).run(db, progress=False)
    report["seconds"] = round(time.perf_counter() - started, 2)
    report["peak_rss_mb"] = round(peak_rss_mb(), 1)  # the run, before the frames are loaded
    run = Run.open(db)
    actions = run.to_polars("actions")
    report.update(
        status=run.metadata["status"],
        actions=actions.height,
        steps=run.to_polars("steps").height,
        llm_calls=run.to_polars("llm_calls").height,
        messages=run.to_polars("messages").height,
        posts=int(((actions["action"] == "post_message") & actions["success"]).sum()),
        agents_per_step=sorted(set(actions.group_by("step").len()["len"].to_list())),
    )
    return report


if __name__ == "__main__":
    kind, agents, steps, db = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    print(json.dumps(main(kind, agents, steps, db)))
