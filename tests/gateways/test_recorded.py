"""A recorded call answered again gives the policy what the gateway stack gave it, as a property.

``vivarium.gateways.recorded`` answers the LLM calls of a step a resume re-executes from the
trace's own rows. Over replies (text, tool calls with arguments of any JSON shape or that do
not parse, finish reasons, token counts) and failures (a server failing some attempts before
one succeeds, or every attempt), through the real retry layer and the litellm provider's own
parsing: the reply replayed from the rows, as the trace stores them, is the reply the policy
got, field for field, and a failed call raises what the stack raised.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from vivarium.errors import ResumeDiverged, RunStoppingError
from vivarium.gateways.base import (
    CallRecord,
    GatewayBase,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    answer_from,
    collect_calls,
    current_attempt,
    record_call,
    stop_answering,
)
from vivarium.gateways.exchange import error_reply, request_body
from vivarium.gateways.litellm_gateway import LiteLLMGateway
from vivarium.gateways.recorded import CallRow, DecisionCalls
from vivarium.gateways.retry import RetryGateway
from vivarium.trace.llm_texts import TextStore, encode_exchange

REQUEST = {
    "model": "openai/fake",
    "messages": [{"role": "user", "content": "go"}],
    "tools": [{"type": "function", "function": {"name": "post_message", "parameters": {}}}],
    "tool_choice": {"type": "function", "function": {"name": "post_message"}},
    "seed": 3,
}


class Server(GatewayBase):
    """One attempt per call, as ``LiteLLMGateway.complete`` makes and records it."""

    def __init__(self, script: list[dict[str, Any] | str], fmt: str) -> None:
        self.script = list(script)
        self.provider = LiteLLMGateway(api_base="http://127.0.0.1:9/v1", forced_tool_format=fmt)

    def complete(self, request: LLMRequest) -> LLMResponse:
        item = self.script.pop(0)
        sent = self.provider.wire_body(request, request_body(request))  # as it is sent
        if isinstance(
            item, str
        ):  # a failed attempt: what LiteLLMGateway records (failures.failure)
            record_call(
                CallRecord(
                    attempt=current_attempt(),
                    model=request.model,
                    request_hash=request.request_hash(),
                    latency_ms=3.25,
                    error=item,
                    request=sent,
                    reply=error_reply(item),
                )
            )
            raise LLMCallError(item, kind="server_error", retryable="retry" in item)
        response = self.provider.normalize(item, request, 12.5)
        record_call(CallRecord.from_response(response, current_attempt(), sent))
        return response


def as_stored(records: list[CallRecord]) -> list[CallRow]:
    """The records as the trace stores them and a resume reads them back (``llm_calls``)."""
    store, rows = TextStore(), []
    for record in records:
        fields = record.row(0)
        _, tools, params, reply = encode_exchange(record.request, record.reply, store)
        texts = {row[0]: json.loads(row[-1]) for row in store.pending}
        rows.append(
            CallRow(
                *fields[1:11],
                json.loads(params) if params else None,
                None if reply is None else texts[reply],
            )
        )
    return rows


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip


@st.composite
def wire_replies(draw: st.DrawFn) -> dict[str, Any]:
    """A chat completion as a server sends it: text, or tool calls whose arguments may not parse."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": draw(st.none() | st.text(max_size=20)),
    }
    if draw(st.booleans()):
        calls = []
        for i in range(draw(st.integers(1, 2))):
            args = draw(
                st.dictionaries(st.text(max_size=6), json_values, max_size=3).map(json.dumps)
                | st.sampled_from(['{"content": "cut', "[1, 2]", "", '{"a": "x\ny"}'])
            )
            name = draw(st.sampled_from(["post_message", "noop"]))
            calls.append(
                {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}
            )
        message["tool_calls"] = calls
    usage = {
        "prompt_tokens": draw(st.integers(0, 999)),
        "completion_tokens": draw(st.integers(0, 99)),
    }
    return {
        "choices": [{"message": message, "finish_reason": draw(st.sampled_from(["stop", "length", None]))}],
        "usage": usage,
    }  # fmt: skip


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    reply=wire_replies(),
    failures=st.lists(st.sampled_from(["ServerError: retry me", "BadRequest: no"]), max_size=3),
    retries=st.integers(0, 3),
    fmt=st.sampled_from(["tool_choice", "json_schema"]),
    ask_twice=st.booleans(),
)
def test_a_call_answered_from_its_rows_is_the_call_the_policy_had(
    reply: dict[str, Any], failures: list[str], retries: int, fmt: str, ask_twice: bool
) -> None:
    script: list[dict[str, Any] | str] = [*failures, reply] + ([reply] if ask_twice else [])
    stack = RetryGateway(Server(script, fmt), retries=retries, sleep=lambda _s: None)
    live: list[Any] = []
    with collect_calls() as records:
        for _ in range(2 if ask_twice else 1):  # a decision asking again (a retried decision)
            try:
                live.append(stack.chat(**REQUEST))
            except LLMCallError as exc:
                live.append(exc)
    rows = as_stored(records)
    token = answer_from(DecisionCalls(rows))
    replayed: list[Any] = []
    try:
        with collect_calls() as again:
            for _ in live:
                try:
                    replayed.append(stack.chat(**REQUEST))  # never reaches the server
                except LLMCallError as exc:
                    replayed.append(exc)
    finally:
        stop_answering(token)
    assert len(replayed) == len(live)
    for was, now in zip(live, replayed, strict=True):
        if isinstance(was, LLMCallError):
            assert isinstance(now, LLMCallError)
            assert (type(now).__name__, str(now)) == (type(was).__name__, str(was))
            continue
        assert isinstance(now, LLMResponse)
        keep = {"raw", "latency_ms", "usage", "cost"}
        assert now.model_dump(exclude=keep) == was.model_dump(exclude=keep)
        assert (now.usage.prompt_tokens, now.usage.completion_tokens) == (
            was.usage.prompt_tokens,
            was.usage.completion_tokens,
        )
        assert now.latency_ms == was.latency_ms and now.cost == was.cost
    # The records given again are the recorded attempts (tokens, errors: a quota world's count).
    assert [(r.attempt, r.error, r.prompt_tokens, r.completion_tokens) for r in again] == [
        (r.attempt, r.error, r.prompt_tokens, r.completion_tokens) for r in records
    ]


def test_a_request_that_is_not_the_recorded_one_stops_the_re_execution() -> None:
    stack = RetryGateway(Server([{"choices": [], "usage": {}}], "tool_choice"), retries=0)
    with collect_calls() as records:
        stack.chat(**REQUEST)
    token = answer_from(DecisionCalls(as_stored(records)))
    try:
        changed = {**REQUEST, "messages": [{"role": "user", "content": "another prompt"}]}
        try:
            stack.chat(**changed)
        except Exception as exc:  # noqa: BLE001 - the type is what is checked
            assert type(exc) is ResumeDiverged and "the prompt changed" in str(exc)
            assert isinstance(exc, RunStoppingError)  # policies let it through: the run stops
        else:
            raise AssertionError("a changed request was answered")
    finally:
        stop_answering(token)
