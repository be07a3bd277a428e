"""The cassette key is versioned: known keys stay, and a new request field changes none.

A cassette row is found by its request's key (``vivarium.gateways.request_key``). Before keys
had versions, the key hashed every field of ``LLMRequest``: adding a field (``top_p``, a new
tool option) changed every key, and every recorded cassette stopped replaying. Now version 1
hashes the fields requests had then (at their value, null included) and any other field only
when it is set away from its default. The expected keys below are hashlib over hand-written
canonical JSON, not the key function.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from vivarium.gateways import request_key as keys
from vivarium.gateways.base import LLMRequest
from vivarium.gateways.mock import MockLLMGateway
from vivarium.gateways.recorded import CallDiverged, CallRow, DecisionCalls

POST = {
    "type": "function",
    "function": {
        "name": "post_message",
        "description": "Post.",
        "parameters": {
            "type": "object",
            "properties": {"content": {"type": "string"}},
            "required": ["content"],
        },
    },
}

# (request, its canonical JSON written out by hand, the SHA-256 of that text)
KNOWN = [
    (
        {
            "model": "openai/smollm2",
            "messages": [
                {"role": "system", "content": "You post."},
                {"role": "user", "content": "step 3"},
            ],
            "tools": [POST],
            "tool_choice": {"type": "function", "function": {"name": "post_message"}},
            "temperature": 0,
            "max_tokens": 48,
            "seed": 7,
        },
        '{"max_tokens":48,"messages":[{"content":"You post.","role":"system"},{"content":'
        '"step 3","role":"user"}],"model":"openai/smollm2","seed":7,"temperature":0.0,'
        '"tool_choice":{"function":{"name":"post_message"},"type":"function"},"tools":[{'
        '"function":{"description":"Post.","name":"post_message","parameters":{"properties":'
        '{"content":{"type":"string"}},"required":["content"],"type":"object"}},"type":'
        '"function"}]}',
        "2eebba77fb78294fee4374009cd7cc93fec0629f0d9bd71b11ea106c45a13be5",
    ),
    (
        {
            "model": "mock",
            "messages": [{"role": "user", "content": "héllo"}],
            "tools": [],
            "tool_choice": "required",
        },
        '{"max_tokens":null,"messages":[{"content":"héllo","role":"user"}],"model":"mock",'
        '"seed":null,"temperature":null,"tool_choice":"required","tools":[]}',
        "cfe2f09056950b7c95e6a8a29e79f910cab7fe5f37280f71f0c3bad91143d533",
    ),
]


@pytest.mark.parametrize(("fields", "text", "key"), KNOWN)
def test_a_known_request_keeps_its_known_key(fields: dict[str, Any], text: str, key: str) -> None:
    assert hashlib.sha256(text.encode()).hexdigest() == key  # the pin is the text's hash
    request = LLMRequest(**fields)
    assert request.request_hash() == key
    assert keys.request_key(request, 1) == key
    assert list(keys.request_keys(request)) == [key]


def test_version_1_hashes_the_fields_requests_had_and_is_what_is_written() -> None:
    assert keys.KEY_FIELDS[1] == (
        "model",
        "messages",
        "tools",
        "tool_choice",
        "temperature",
        "max_tokens",
        "seed",
    )
    assert set(keys.KEY_FIELDS[1]) <= set(LLMRequest.model_fields)
    assert keys.KEY_VERSION == keys.written_version() == max(keys.KEY_FIELDS) == 1


class Newer(LLMRequest):
    """``LLMRequest`` as a later version might have it: four more fields, each with a default."""

    top_p: float | None = None
    stop: list[str] = Field(default_factory=list)
    stream: bool = False
    response_format: dict[str, Any] | None = None


texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)  # no lone surrogates
requests = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["mock", "openai/smollm2", "m"]),
        "messages": st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["system", "user", "assistant"]), "content": texts}
            ),
            min_size=1,
            max_size=3,
        ),
    },
    optional={
        "tools": st.none() | st.just([POST]) | st.just([]),
        "tool_choice": st.none() | st.sampled_from(["auto", "required", "none"]),
        "temperature": st.none() | st.floats(0, 2),
        "max_tokens": st.none() | st.integers(1, 4096),
        "seed": st.none() | st.integers(0, 2**31),
    },
)


@settings(max_examples=60, deadline=None)
@given(fields=requests)
def test_a_new_optional_field_left_at_its_default_changes_no_key(fields: dict[str, Any]) -> None:
    """The property that keeps cassettes replaying when ``LLMRequest`` grows a field."""
    before, after = LLMRequest(**fields), Newer(**fields)
    assert after.request_hash() == before.request_hash()
    assert keys.key_payload(after) == keys.key_payload(before) == before.model_dump(mode="json")
    # Nor any mock reply, so mock runs' traces stay what they were.
    mock = MockLLMGateway(seed=3)
    assert mock.reply(after) == mock.reply(before)
    # A request that sets a new field is another request.
    for change in ({"top_p": 0.5}, {"stop": ["\n"]}, {"stream": True}, {"response_format": {}}):
        assert Newer(**fields, **change).request_hash() != before.request_hash(), change


# -- a later key version, as a later Vivarium would declare it ----------------------------------
@pytest.fixture
def version_2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Key version 2 written: the sampling fields hashed only when set (another form)."""
    monkeypatch.setitem(keys.KEY_FIELDS, 2, ("model", "messages", "tools", "tool_choice"))
    monkeypatch.setattr(keys, "KEY_VERSION", 2)


@pytest.mark.usefixtures("version_2")
def test_each_key_version_is_its_own_form() -> None:
    fields, text, key_1 = KNOWN[1]
    request = LLMRequest(**fields)
    text_2 = '{"messages":[{"content":"héllo","role":"user"}],"model":"mock",'
    text_2 += '"tool_choice":"required","tools":[]}'
    key_2 = hashlib.sha256(text_2.encode()).hexdigest()
    assert request.request_hash() == key_2  # the version written
    assert request.request_hash(1) == key_1  # an older version, asked for
    assert list(keys.request_keys(request)) == [key_2, key_1]


def row(request_hash: str) -> CallRow:
    reply = {"content": "recorded", "tool_calls": None, "finish_reason": "stop"}
    return CallRow(1, "mock", request_hash, 3, 2, 0.0, 1.0, 0, "stop", None, {}, reply)


@pytest.mark.usefixtures("version_2")
def test_a_resume_matches_calls_recorded_under_an_older_key_version() -> None:
    fields = KNOWN[1][0]
    request = LLMRequest(**fields)
    recorded = DecisionCalls([row(request.request_hash(1))])  # a trace of version 1
    answer = recorded.take(request)
    assert answer is not None and answer().content == "recorded"
    other = DecisionCalls([row(request.request_hash(1))])
    with pytest.raises(CallDiverged):
        other.take(LLMRequest(**{**fields, "messages": [{"role": "user", "content": "else"}]}))
