"""parse_action: tool calls, JSON in text, and a noop with the reason for everything else."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vivarium.gateways.base import LLMResponse, ToolCall
from vivarium.policies.parsing import MAX_REASONING_CHARS, ParsedAction, parse_action
from vivarium.worlds.channel import EmitEventArgs, PostMessageArgs
from vivarium.worlds.registry import NoArguments

ALLOWED = ("noop", "emit_event", "post_message")
MODELS = {"noop": NoArguments, "emit_event": EmitEventArgs, "post_message": PostMessageArgs}


def parse(content: str | None = None, *calls: ToolCall, finish: str | None = None) -> ParsedAction:
    response = LLMResponse(content=content, tool_calls=list(calls), finish_reason=finish)
    return parse_action(response, ALLOWED, MODELS)


def call(name: str, arguments: dict | None = None, error: str | None = None) -> ToolCall:
    return ToolCall(name=name, arguments=arguments or {}, parse_error=error)


# -- (A) native tool calls ---------------------------------------------------------------------
def test_tool_call() -> None:
    parsed = parse("I'll say hi.", call("post_message", {"content": "hi"}))
    assert parsed.action_name == "post_message"
    assert parsed.arguments == {"content": "hi"}
    assert parsed.reasoning == "I'll say hi."
    assert parsed.metadata == {"parse_path": "tool_call"}


def test_first_usable_tool_call_wins_and_parse_errors_are_kept() -> None:
    parsed = parse(
        None,
        call("dance"),
        call("post_message", error="Expecting ',' delimiter"),
        call("emit_event", {"value": "x"}),
        call("emit_event", {"value": 7}),
        call("post_message", {"content": "later"}),
    )
    assert (parsed.action_name, parsed.arguments) == ("emit_event", {"value": 7})
    assert parsed.metadata == {
        "parse_path": "tool_call",
        "tool_call_error": "Expecting ',' delimiter",
    }
    assert parsed.reasoning is None


def test_without_arg_models_any_object_is_accepted() -> None:
    response = LLMResponse(tool_calls=[call("post_message", {"whatever": 1})])
    parsed = parse_action(response, ["post_message"])
    assert parsed.arguments == {"whatever": 1}


# -- (B) JSON in the text ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"action": "post_message", "arguments": {"content": "hi"}}\n```',
        'Sure! {"tool": "post_message", "args": {"content": "hi"}} Done.',
        '{"name": "post_message", "parameters": {"content": "hi"}}',
        '{"action": "post_message", "content": "hi", "reasoning": "be nice"}',
        '{"name": "post_message", "arguments": "{\\"content\\": \\"hi\\"}"}',
        '{"type": "function", "function": {"name": "post_message", "arguments": {"content": "hi"}}}',
        '{"tool_calls": [{"function": {"name": "post_message", "arguments": {"content": "hi"}}}]}',
        '<tool_call>\n{"name": "post_message", "arguments": {"content": "hi"}}\n</tool_call>',
        '{"post_message": {"content": "hi"}}',
        '```\n[{"action": "post_message", "arguments": {"content": "hi"}}]\n```',
        '<think>maybe {"action": "noop"}</think>\n{"action": "post_message", "content": "hi"}',
        'text {not json} then {"action": "post_message", "arguments": {"content": "hi"}}',
        '{"action": "post_message", "arguments": {"content": "hi"}, "id": "call_1"}',
        '{"action_name": "post_message", "action_input": {"content": "hi"}}',
    ],
)
def test_json_in_text(text: str) -> None:
    parsed = parse(text)
    assert (parsed.action_name, parsed.arguments) == ("post_message", {"content": "hi"})
    assert parsed.metadata == {"parse_path": "json_text"}
    assert parsed.reasoning == text.strip()


def test_json_strings_with_braces_and_control_characters() -> None:
    text = 'ok {"action": "post_message", "arguments": {"content": "a } b {\n\\"c\\""}}'
    parsed = parse(text)
    assert parsed.arguments == {"content": 'a } b {\n"c"'}
    assert parsed.metadata["parse_path"] == "json_text"


def test_json_flat_shape_drops_unknown_keys_when_the_model_is_known() -> None:
    parsed = parse('{"action": "emit_event", "value": 3, "mood": "happy"}')
    assert (parsed.action_name, parsed.arguments) == ("emit_event", {"value": 3})


def test_text_path_used_when_tool_calls_are_unusable() -> None:
    parsed = parse('{"action": "noop"}', call("dance"))
    assert parsed.action_name == "noop"
    assert parsed.metadata == {"parse_path": "json_text"}


# -- (C) fallback reasons ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "calls", "finish", "reason"),
    [
        (None, [], "stop", "empty reply"),
        ("   \n", [], None, "empty reply"),
        ("I think I will post hello.", [], "stop", "no action found"),
        (None, [call("dance")], "tool_calls", "unknown tool 'dance'"),
        ('{"action": "dance"}', [], "stop", "unknown tool 'dance'"),
        (
            None,
            [call("post_message", {"text": "hi"})],
            "tool_calls",
            "bad arguments: post_message: content: Field required; text: Extra inputs are not "
            "permitted",
        ),
        (
            '{"action": "emit_event", "arguments": {"value": "7"}}',
            [],
            "stop",
            "bad arguments: emit_event: value: Input should be a valid integer",
        ),
        (
            '{"action": "post_message", "arguments": [1]}',
            [],
            "stop",
            "bad arguments: post_message: arguments must be a JSON object",
        ),
        (
            None,
            [call("post_message", error="Unterminated string")],
            "tool_calls",
            "bad arguments: post_message: Unterminated string",
        ),
        (
            None,
            [call("post_message", error="Unterminated string")],
            "length",
            "truncated tool call (finish_reason length)",
        ),
        (
            '{"action": "post_message", "arguments": {"content": "I was sayi',
            [],
            "length",
            "truncated tool call (finish_reason length)",
        ),
    ],
)
def test_fallback_reasons(
    content: str | None, calls: list[ToolCall], finish: str | None, reason: str
) -> None:
    parsed = parse(content, *calls, finish=finish)
    assert parsed.action_name == "noop"
    assert parsed.arguments == {}
    assert parsed.metadata["parse_path"] == "fallback"
    assert parsed.metadata["fallback_reason"] == reason


def test_fallback_keeps_the_tool_call_error() -> None:
    parsed = parse(None, call("post_message", error="Unterminated string"), finish="length")
    assert parsed.metadata["tool_call_error"] == "Unterminated string"


def test_reasoning_is_truncated() -> None:
    parsed = parse("x" * (MAX_REASONING_CHARS * 3))
    assert parsed.reasoning is not None
    assert len(parsed.reasoning) == MAX_REASONING_CHARS + 1


def test_noop_when_noop_is_not_even_allowed() -> None:
    parsed = parse_action(LLMResponse(content="hmm"), ["post_message"])
    assert parsed.action_name == "noop"


def test_hostile_text_is_bounded() -> None:
    parsed = parse("{" * 50_000 + '"' + "[" * 10_000)
    assert parsed.metadata["parse_path"] == "fallback"


# -- never crashes -----------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.sampled_from([*ALLOWED, "dance", ""]) | st.text(max_size=15)
tool_calls = st.builds(
    ToolCall,
    name=names,
    arguments=st.dictionaries(
        st.sampled_from(["content", "value", "x"]) | st.text(max_size=8), json_values, max_size=3
    ),
    parse_error=st.none() | st.text(max_size=30),
)
json_texts = st.builds(
    lambda name, args, shape: json.dumps({shape[0]: name, shape[1]: args}),
    names,
    json_values,
    st.sampled_from([("action", "arguments"), ("tool", "args"), ("name", "parameters")]),
)


@settings(max_examples=300, deadline=None)
@given(
    content=st.none() | st.text(max_size=300) | json_texts,
    calls=st.lists(tool_calls, max_size=3),
    finish=st.sampled_from([None, "stop", "length", "tool_calls"]),
)
def test_never_raises_and_always_allowed_or_noop(
    content: str | None, calls: list[ToolCall], finish: str | None
) -> None:
    parsed = parse(content, *calls, finish=finish)
    assert parsed.action_name in ALLOWED
    path = parsed.metadata["parse_path"]
    assert path in {"tool_call", "json_text", "fallback"}
    if path == "fallback":
        assert parsed.action_name == "noop" and parsed.metadata["fallback_reason"]
    else:
        MODELS[parsed.action_name].model_validate(parsed.arguments)
    json.dumps(parsed.model_dump())  # recordable
