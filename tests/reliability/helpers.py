"""Shared pieces of the reliability tests: table comparison, a timestamping fake server."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.fake_openai import FakeOpenAIServer

TRACE_TABLES = ("runs", "agents", "steps", "messages", "llm_calls", "transitions", "checkpoints")


def rows(db: Path, table: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()  # noqa: S608
    finally:
        con.close()


def assert_same_trace(expected: Path, actual: Path, tables: tuple[str, ...] = TRACE_TABLES) -> None:
    """Every table of two traces equal, row for row."""
    for table in tables:
        want, got = rows(expected, table), rows(actual, table)
        assert len(want) == len(got), f"{table}: {len(got)} rows, expected {len(want)}"
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            assert a == b, f"{table} row {i} differs"


class TimedServer(FakeOpenAIServer):
    """The project's fake server, also keeping the arrival time of each request."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.arrivals: dict[int, float] = {}  # request index -> time.monotonic() on arrival
        self._arrival_lock = threading.Lock()

    def _register(self, body: dict[str, Any], headers: dict[str, str]) -> int:
        index = super()._register(body, headers)
        with self._arrival_lock:
            self.arrivals[index] = time.monotonic()
        return index
