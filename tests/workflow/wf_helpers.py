"""Shared pieces for workflow tests: agent folders on disk, a scripted gateway, observations."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from vivarium.errors import RunStoppingError
from vivarium.gateways.base import LLMResponse, ToolCall

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ["noop", "read_artifact", "write_artifact", "post_message"]


def write_agent(
    folder: Path, data: Mapping[str, Any], system_prompt: str | None = "You are {agent_id}."
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "agent.yaml").write_text(yaml.safe_dump(dict(data), sort_keys=False))
    if system_prompt is not None:
        (folder / "system_prompt.md").write_text(system_prompt)
    return folder


def agent_data(**workflow: Any) -> dict[str, Any]:
    """A small valid agent: states a -> b, one llm step in a."""
    base: dict[str, Any] = {
        "states": ["a", "b"],
        "steps": [{"name": "act", "type": "llm", "in_state": "a", "prompt": "Act now."}],
    }
    base.update(workflow)
    return {"id": "tester", "workflow": base}


def act(name: str = "noop", arguments: dict[str, Any] | None = None, **extra: Any) -> LLMResponse:
    """A reply calling ``act`` with one action."""
    payload = {"thought_process": "because", **extra}
    payload["action"] = {"name": name, "arguments": arguments or {}}
    return LLMResponse(
        tool_calls=[ToolCall(id="c1", name="act", arguments=payload)],
        finish_reason="tool_calls",
        model="scripted",
    )


def choose(choice: str, reason: str = "why not") -> LLMResponse:
    return LLMResponse(
        tool_calls=[
            ToolCall(id="c2", name="choose", arguments={"choice": choice, "reason": reason})
        ],
        finish_reason="tool_calls",
        model="scripted",
    )


def text(content: str) -> LLMResponse:
    return LLMResponse(content=content, finish_reason="stop", model="scripted")


class Boom(Exception):
    """A gateway failure."""


class FatalBoom(RunStoppingError):
    """A failure that must stop the run (as a replay miss does)."""


class ScriptedGateway:
    """Replies from a list, in order (an exception in the list is raised); records requests.
    ``by_tool`` picks replies per forced tool name instead, cycling through each list."""

    def __init__(
        self,
        replies: list[Any] | None = None,
        *,
        by_tool: Mapping[str, list[Any]] | None = None,
        model: str = "scripted",
    ) -> None:
        self.replies = list(replies or [])
        self.by_tool = {k: list(v) for k, v in (by_tool or {}).items()}
        self.counts: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []
        self.model = model

    def _next(self, request: dict[str, Any]) -> Any:
        self.requests.append(copy.deepcopy(request))
        tool = (request.get("tool_choice") or {}).get("function", {}).get("name")
        if self.by_tool and tool in self.by_tool:
            options = self.by_tool[tool]
            i = self.counts.get(tool, 0)
            self.counts[tool] = i + 1
            reply = options[i % len(options)]
        elif self.replies:
            reply = self.replies.pop(0)
        else:
            raise AssertionError("scripted gateway ran out of replies")
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def chat(self, **request: Any) -> LLMResponse:
        return self._next(request)

    async def achat(self, **request: Any) -> LLMResponse:
        return self._next(request)

    def user_prompts(self) -> list[str]:
        return [r["messages"][-1]["content"] for r in self.requests]


def observation(t: int = 0, agent_state: Any = None, **overrides: Any) -> dict[str, Any]:
    """An ecology-shaped observation."""
    obs: dict[str, Any] = {
        "time_step": t,
        "agent_id": "tester",
        "tools": list(ACTIONS),
        "messages": [],
        "balance": 100,
        "artifacts": [
            {"id": "a1", "owner": "x", "executable": False, "price": 0, "size": 3, "methods": []}
        ],
        "my_artifacts": [],
        "last_action_result": None,
        "failure_history": [],
        "action_history": [],
        "success_rate": None,
        "economic_context": {"total_scrip": 500, "agents": 5},
        "working_memory": {},
        "memory": [],
        "steps_total": 30,
        "time_remaining": 30 - t,
        "progress_percent": round(100 * t / 30, 4),
        "agent_state": agent_state,
    }
    obs.update(overrides)
    return obs
