"""Shared request parts for gateway tests."""

from __future__ import annotations

from typing import Any

POST_MESSAGE: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "post_message",
        "description": "Post a message to the channel.",
        "parameters": {
            "type": "object",
            "properties": {"content": {"type": "string"}},
            "required": ["content"],
        },
    },
}
VOTE: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "vote",
        "parameters": {
            "type": "object",
            "properties": {
                "candidate": {"type": "string"},
                "weight": {"type": "integer"},
                "note": {"type": "string"},
            },
            "required": ["candidate", "weight"],
        },
    },
}
TOOLS = [POST_MESSAGE]


def messages(text: str = "hello") -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are agent_000."}, {"role": "user", "content": text}]


def force(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}
