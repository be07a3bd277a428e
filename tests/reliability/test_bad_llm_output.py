"""Bad input from a model: whatever text, tool calls or arguments a model sends, parsing never
crashes, never reaches its last-resort catch-all, and every decision is recordable as strict
JSON. Covers ``parse_action``, LiteLLM's reply normalisation, the cognitive policy with its
world, and the workflow policy's ``parse_act`` / ``parse_choice`` and whole decisions.

(Expressions: ``tests/workflow/test_safe_eval.py`` already generates expressions, statements
and arbitrary text and checks that the safe evaluator only evaluates or raises its own errors.)
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from vivarium import Experiment
from vivarium.gateways.base import LLMRequest, LLMResponse, ToolCall
from vivarium.gateways.litellm_gateway import LiteLLMGateway
from vivarium.policies.cognitive import SimpleCognitivePolicy
from vivarium.policies.parsing import MAX_REASON_CHARS, MAX_REASONING_CHARS, parse_action
from vivarium.policies.prompting import arg_models_for, default_registry
from vivarium.types import ActionRequest
from vivarium.workflow.replies import parse_act, parse_choice
from vivarium.workflow.tools import ACT_TOOL, CHOOSE_TOOL
from vivarium.worlds.channel import InMemoryChannel

CHANNEL_TOOLS = ("noop", "emit_event", "post_message")
ECOLOGY = ROOT / "data" / "experiments" / "ecology.yaml"
ECOLOGY_TOOLS = (
    "noop",
    "read_artifact",
    "write_artifact",
    "invoke_artifact",
    "post_message",
    "transfer_scrip",
)

# -- what a model can send ---------------------------------------------------------------------
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and infinities too: json.loads accepts them
    | st.text(max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=15,
)
names = st.sampled_from(
    [*ECOLOGY_TOOLS, "emit_event", ACT_TOOL, CHOOSE_TOOL, "", "NOOP"]
) | st.text(max_size=20)
shapes = st.sampled_from(
    [("action", "arguments"), ("tool", "args"), ("name", "parameters"), ("function", "input")]
)


def _action_json(name: str, args: Any, shape: tuple[str, str], nested: bool) -> str:
    payload: Any = {shape[0]: name, shape[1]: args}
    if nested:  # the workflow's act payload, or an OpenAI-style envelope
        payload = {"thought_process": "hmm", "action": {"name": name, "arguments": args}}
    return json.dumps(payload)


json_actions = st.builds(_action_json, names, json_values, shapes, st.booleans())


@st.composite
def model_texts(draw: st.DrawFn) -> str:
    """Prose, JSON actions (fenced, bare, cut off, in think tags), and arbitrary text."""
    parts = draw(
        st.lists(
            st.text(max_size=60)
            | json_actions
            | json_actions.map(lambda j: f"```json\n{j}\n```")
            | json_actions.map(lambda j: f"<think>{j}</think>")
            | st.sampled_from(["{", "}", "```", '"', "\\", "<tool_call>", "\x00", "{{{{"]),
            max_size=5,
        )
    )
    text = " ".join(parts)
    if text and draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]  # cut off, as at max_tokens
    return text


raw_arguments = (
    st.text(max_size=80)
    | json_values.map(json.dumps)
    | json_actions
    | st.builds(lambda s: s[: len(s) // 2], json_values.map(json.dumps))
)
tool_calls = st.builds(
    ToolCall,
    id=st.none() | st.text(max_size=8),
    name=names,
    arguments=st.dictionaries(
        st.sampled_from(["content", "value", "action", "choice", "reason"]) | st.text(max_size=8),
        json_values,
        max_size=4,
    ),
    raw_arguments=st.none() | st.text(max_size=20),
    parse_error=st.none() | st.text(max_size=40),
)
finishes = st.sampled_from([None, "stop", "length", "tool_calls", "content_filter"]) | st.text(
    max_size=10
)
responses = st.builds(
    LLMResponse,
    content=st.none() | model_texts(),
    tool_calls=st.lists(tool_calls, max_size=3),
    finish_reason=st.none() | finishes,
)


@st.composite
def raw_replies(draw: st.DrawFn) -> dict[str, Any]:
    """An OpenAI-shaped reply whose fields hold anything: litellm passes these through."""
    calls = [
        {
            "id": draw(st.none() | st.text(max_size=8)),
            "type": "function",
            "function": {
                "name": draw(st.none() | names),
                "arguments": draw(st.none() | raw_arguments),
            },
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    message = {"role": "assistant", "content": draw(st.none() | model_texts() | json_values)}
    if calls or draw(st.booleans()):
        message["tool_calls"] = calls
    usage = draw(
        st.none()
        | st.fixed_dictionaries(
            {"prompt_tokens": scalars, "completion_tokens": scalars, "total_tokens": scalars}
        )
    )
    return {
        "choices": draw(
            st.just([]) | st.just([{"message": message, "finish_reason": draw(finishes)}])
        ),
        "usage": usage,
        "model": draw(st.none() | st.text(max_size=10)),
    }


# -- checks ------------------------------------------------------------------------------------
def strict_json(value: Any) -> Any:
    """What the trace stores must be JSON that any reader accepts (no NaN or Infinity)."""
    text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    return json.loads(text)


def check_parsed(name: str, arguments: dict[str, Any], metadata: dict[str, Any], allowed) -> None:
    assert name in allowed or name == "noop"
    reason = metadata.get("fallback_reason")
    if metadata.get("parse_path") == "fallback":
        assert name == "noop" and isinstance(reason, str) and reason
        assert len(reason) <= MAX_REASON_CHARS + 1
        assert not reason.startswith("parse error:"), reason  # the catch-all: a parser bug
    strict_json({"arguments": arguments, "metadata": metadata})


CHANNEL_MODELS = arg_models_for(CHANNEL_TOOLS, default_registry())
NORMALIZER = LiteLLMGateway(api_base="http://127.0.0.1:9/v1")
REQUEST = LLMRequest(model="openai/x", messages=[{"role": "user", "content": "act"}])
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(response=responses)
def test_parse_action_handles_any_reply(response: LLMResponse) -> None:
    parsed = parse_action(response, CHANNEL_TOOLS, CHANNEL_MODELS)
    check_parsed(parsed.action_name, parsed.arguments, parsed.metadata, CHANNEL_TOOLS)
    if parsed.reasoning is not None:
        assert len(parsed.reasoning) <= MAX_REASONING_CHARS + 1
    if parsed.action_name != "noop":
        CHANNEL_MODELS[parsed.action_name].model_validate(parsed.arguments)


@FUZZ
@given(reply=raw_replies())
def test_raw_replies_normalise_and_parse(reply: dict[str, Any]) -> None:
    response = NORMALIZER.normalize(reply, REQUEST, 1.0)
    for call in response.tool_calls:
        assert isinstance(call.arguments, dict)
        assert (call.parse_error is None) == (call.raw_arguments is None)
    parsed = parse_action(response, CHANNEL_TOOLS, CHANNEL_MODELS)
    check_parsed(parsed.action_name, parsed.arguments, parsed.metadata, CHANNEL_TOOLS)


class Replies:
    """A gateway that answers with the given replies, in turn."""

    def __init__(self, replies: list[LLMResponse]) -> None:
        self.replies = replies or [LLMResponse()]
        self.calls = 0
        self.model = "fuzz"

    def chat(self, **request: Any) -> LLMResponse:
        LLMRequest(**request)  # what the policy asks is a valid request
        reply = self.replies[self.calls % len(self.replies)]
        self.calls += 1
        return reply

    async def achat(self, **request: Any) -> LLMResponse:
        return self.chat(**request)


@FUZZ
@given(response=responses)
def test_cognitive_decisions_on_any_reply_apply_to_the_world(response: LLMResponse) -> None:
    world = InMemoryChannel()
    policy = SimpleCognitivePolicy(Replies([response]), {"model": "fuzz", "force_tool": True})
    request = policy.decide(
        run_id="r", time_step=0, agent_id="agent_000", observation=world.observe("agent_000", 0)
    )
    assert isinstance(request, ActionRequest)
    check_parsed(request.action_name, request.arguments, request.metadata, CHANNEL_TOOLS)
    result = world.apply(request)
    strict_json(result.result)


@FUZZ
@given(
    response=responses, options=st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=4)
)
def test_workflow_parsers_handle_any_reply(response: LLMResponse, options: list[str]) -> None:
    models = arg_models_for(ECOLOGY_TOOLS, default_registry())
    act = parse_act(response, ECOLOGY_TOOLS, models)
    if isinstance(act, str):
        assert act and len(act) <= MAX_REASON_CHARS + 1
    else:
        name, arguments = act.value
        assert name in ECOLOGY_TOOLS
        strict_json(arguments)
    choice = parse_choice(response, options)
    if isinstance(choice, str):
        assert choice and len(choice) <= MAX_REASON_CHARS + 1
    else:
        assert choice.value in options


_ecology = Experiment.from_file(ECOLOGY, steps=2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies=st.lists(responses, min_size=1, max_size=6))
def test_workflow_agents_on_any_replies_never_fail_a_decision(replies: list[LLMResponse]) -> None:
    """Whole ecology steps (two workflow agents, three random ones) on arbitrary replies."""
    gateway = Replies(replies)
    engine = _ecology.build(None, {"gateway": gateway})
    for _ in range(2):
        record = engine.step()
        errors = [e for e in record.error if e]
        assert not any(e.startswith("policy error") for e in errors), errors
        for column in record.encode():
            if column is not None:
                json.loads(column, parse_constant=_no_constants)
    assert gateway.calls > 0


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} in a recorded column")
