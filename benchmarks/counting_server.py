"""The project's fake OpenAI-compatible server in a process of its own, answering questions.

    python benchmarks/counting_server.py --latency-ms 100

Prints the base URL on one line, then reads commands on stdin, one a line, and answers each
with one line: ``stats`` gives ``{"requests": n, "max_in_flight": m}`` (the most requests the
server held at once since the last ``reset``), ``reset`` sets that maximum to what is in
flight now and answers ``ok``. It ends when stdin closes. Benchmarks run it so that the
server never shares the client's GIL, and still learn how many calls the client had in
flight at once (``FakeOpenAIServer.max_in_flight``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.fake_openai import FakeOpenAIServer  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    """Serve until stdin closes, answering ``stats`` and ``reset``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    with FakeOpenAIServer(latency_ms=args.latency_ms) as server:
        print(server.base_url, flush=True)
        for line in sys.stdin:
            command = line.strip()
            with server._lock:
                if command == "reset":
                    server.max_in_flight = server.in_flight
                    answer = "ok"
                elif command == "stats":
                    answer = json.dumps(
                        {"requests": len(server.requests), "max_in_flight": server.max_in_flight}
                    )
                else:
                    answer = json.dumps({"error": f"unknown command {command!r}"})
                # The bodies and replies are kept for tests; a benchmark needs neither.
                server.requests = [{}] * len(server.requests)
                server.replies = [None] * len(server.replies)
                server.headers = [{}] * len(server.headers)
            print(answer, flush=True)


if __name__ == "__main__":
    main()
