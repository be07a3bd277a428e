"""``LLMRequest.request_hash`` keys cassettes: it must give the documented form.

The form is the SHA-256 of ``canonical_json(request.model_dump(mode="json"))``; every case here
is hashed that way, independently of ``request_hash``, including the values a faster encoding
got wrong or must step aside for (keys that are not strings, NaN, dates, bytes, sets, an
unvalidated ``temperature=0``).
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import warnings
from typing import Any

import pytest

from vivarium.gateways.base import LLMRequest
from vivarium.seeding import canonical_json, digest


class Role(enum.StrEnum):
    USER = "user"


class One(enum.IntEnum):
    ONE = 1


CONTENTS: list[Any] = [
    "héllo \u2028 \x00 wörld",
    [{"type": "text", "text": "t"}, (1, 2.5, -0.0, 1e100, 10**30)],
    {"b": 1, "a": {"z": [1, {"y": None}]}},
    One.ONE,
    True,
    float("nan"),
    float("inf"),
    datetime.date(2024, 1, 1),
    b"bytes",
    {"s": {1, 2}},
    {10: "a", 2: "b"},  # sorted as numbers before they become strings, by a plain encoder
    {None: "a"},
    {True: 1, 2: 3},
]
SCALARS = [
    {"temperature": 0, "seed": 3, "max_tokens": 5},
    {"temperature": 0.5, "seed": None, "max_tokens": None},
    {"temperature": None, "seed": True, "max_tokens": 5.0},
]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def reference(request: LLMRequest) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic warns about unvalidated values it dumps
        return digest(canonical_json(request.model_dump(mode="json")))


def requests(content: Any, scalars: dict[str, Any]) -> list[LLMRequest]:
    fields = {
        "model": "m",
        "messages": [{"role": Role.USER, "content": content}],
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        **scalars,
    }
    made = [LLMRequest.model_construct(**fields)]  # as given, unvalidated
    with contextlib.suppress(ValueError):  # pydantic refuses some scalars: unvalidated only
        made.append(LLMRequest(**fields))
    return made


@pytest.mark.parametrize("scalars", SCALARS)
@pytest.mark.parametrize("content", CONTENTS, ids=repr)
def test_request_hash_is_the_documented_form(content: Any, scalars: dict[str, Any]) -> None:
    for request in requests(content, scalars):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert request.request_hash() == reference(request)


def test_a_known_request_keeps_its_key() -> None:
    """A plain request's key, written out by hand: cassettes recorded before stay valid."""
    request = LLMRequest(model="m", messages=[{"role": "user", "content": "hi"}], temperature=0)
    text = (
        '{"max_tokens":null,"messages":[{"content":"hi","role":"user"}],"model":"m",'
        '"seed":null,"temperature":0.0,"tool_choice":null,"tools":null}'
    )
    assert request.request_hash() == digest(text)
