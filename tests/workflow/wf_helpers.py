"""Shared pieces for workflow tests: agent folders on disk, replies, observations.

The scripted gateway they are handed is ``tests.support.scripted.ScriptedChat``.
"""

from __future__ import annotations

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
