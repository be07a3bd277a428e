"""Pydantic models at the boundaries: what policies return, what worlds answer, what runs record."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ActionRequest(_Model):
    """What a policy decides: one action with its arguments, for one agent at one step."""

    run_id: str
    time_step: int
    agent_id: str
    action_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    reasoning: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ActionResult(_Model):
    """What the world made of a request: success, a result payload, or the reason it failed."""

    success: bool
    result: dict[str, Any] | None = None
    error: str | None = None

    @classmethod
    def ok(cls, result: dict[str, Any] | None = None) -> ActionResult:
        return cls.model_construct(success=True, result=result, error=None)

    @classmethod
    def failed(cls, reason: str) -> ActionResult:
        return cls.model_construct(success=False, result=None, error=reason)


class Message(_Model):
    """A message posted to a channel."""

    time_step: int
    author_id: str
    content: str
    channel: str = "main"


class RunMetadata(_Model):
    """The record of one run: who, what, with which seed and code version."""

    run_id: str
    name: str
    world: str
    policy: str
    seed: int
    agents: int
    steps: int
    scheduling: str
    vivarium_version: str
    config: dict[str, Any] = Field(default_factory=dict)
    status: str = "running"
    steps_done: int = 0
    created_at: str | None = None
    finished_at: str | None = None
