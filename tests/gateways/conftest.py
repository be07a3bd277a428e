"""Fixtures for gateway tests: a fake OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # ``tests.support`` is importable however pytest was started
    sys.path.insert(0, str(ROOT))

from tests.support.fake_openai import FakeOpenAIServer  # noqa: E402


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv
