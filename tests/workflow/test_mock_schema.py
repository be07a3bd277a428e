"""The mock fills forced tools whose schema has enums and nested objects (act / choose)."""

from __future__ import annotations

from vivarium.gateways import MockLLMGateway
from vivarium.workflow.tools import act_tool, choose_tool

FORCE_ACT = {"type": "function", "function": {"name": "act"}}
FORCE_CHOOSE = {"type": "function", "function": {"name": "choose"}}


def messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_enum_values_are_picked_deterministically_and_cover_the_options() -> None:
    gw = MockLLMGateway(seed=3)
    options = ["continue", "pivot", "wait"]
    picks = []
    for i in range(30):
        request = {
            "model": "mock",
            "messages": messages(f"tick {i}"),
            "tools": [choose_tool(options)],
            "tool_choice": FORCE_CHOOSE,
        }
        reply = gw.chat(**request)
        assert reply == gw.chat(**request)
        (call,) = reply.tool_calls
        assert call.name == "choose"
        assert set(call.arguments) == {"choice", "reason"}
        assert isinstance(call.arguments["reason"], str) and call.arguments["reason"]
        picks.append(call.arguments["choice"])
    assert set(picks) == set(options)


def test_nested_objects_are_filled_recursively() -> None:
    gw = MockLLMGateway(seed=1)
    actions = ["noop", "read_artifact", "post_message"]
    names = set()
    for i in range(20):
        reply = gw.chat(
            model="mock",
            messages=messages(str(i)),
            tools=[act_tool(actions, "ooda")],
            tool_choice=FORCE_ACT,
        )
        args = reply.tool_calls[0].arguments
        assert set(args) == {"situation_assessment", "action_rationale", "action"}
        assert set(args["action"]) == {"name", "arguments"}
        assert args["action"]["arguments"] == {}
        names.add(args["action"]["name"])
    assert names <= set(actions) and len(names) > 1


def test_enum_of_a_top_level_property() -> None:
    schema = {
        "type": "function",
        "function": {
            "name": "vote",
            "parameters": {
                "type": "object",
                "properties": {
                    "colour": {"type": "string", "enum": ["red", "green"]},
                    "n": {"type": "integer", "enum": [1, 2, 3]},
                },
                "required": ["colour", "n"],
            },
        },
    }
    force = {"type": "function", "function": {"name": "vote"}}
    reply = MockLLMGateway().chat(
        model="m", messages=messages("x"), tools=[schema], tool_choice=force
    )
    args = reply.tool_calls[0].arguments
    assert args["colour"] in ("red", "green") and args["n"] in (1, 2, 3)
