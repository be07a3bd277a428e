"""Pydantic models at the boundaries: what policies return, what worlds answer, what runs record."""

from __future__ import annotations

from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

Observation: TypeAlias = dict[str, Any]
"""What a policy's ``decide`` receives: a JSON-like dict a world builds for one agent and step.

Every world gives ``time_step`` and ``agent_id``; the channel world adds ``messages`` and
``tools``, others their own keys. The original aam engine's ``Observation`` is the same type (a
``dict[str, Any]``), so policies annotated with it work unchanged.
"""


# Bound once: looked up per call they cost a quarter of ``trusted``.
_new = object.__new__
_set = object.__setattr__


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @classmethod
    def trusted(cls, **values: Any) -> Any:
        """Build from values known to be valid, skipping validation (for per-decision hot paths).

        Pydantic's ``model_construct`` costs ~4.5 us here; setting the instance state directly
        costs ~1.6 us. Every field must be given. Checked once against ``model_construct`` at
        import, with that as the fallback should pydantic's internals change.
        """
        obj = _new(cls)
        _set(obj, "__dict__", values)
        _set(obj, "__pydantic_fields_set__", set(values))
        _set(obj, "__pydantic_extra__", None)
        _set(obj, "__pydantic_private__", None)
        return obj


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
        """A successful outcome, with an optional result payload."""
        return cls.trusted(success=True, result=result, error=None)  # type: ignore[no-any-return]

    @classmethod
    def failed(cls, reason: str) -> ActionResult:
        """A failed outcome and its reason (recorded: a failed action is behaviour, not an error)."""
        return cls.trusted(success=False, result=None, error=reason)  # type: ignore[no-any-return]


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


def _check_trusted() -> None:
    """Fall back to ``model_construct`` if direct construction stops matching it."""
    values = {
        "run_id": "r",
        "time_step": 0,
        "agent_id": "a",
        "action_name": "noop",
        "arguments": {},
        "reasoning": None,
        "metadata": {},
    }
    try:
        fast = ActionRequest.trusted(**values)
        same = fast == ActionRequest.model_construct(**values) and fast.model_dump() == values
    except Exception:
        same = False
    if not same:  # pragma: no cover - depends on the pydantic version
        _Model.trusted = classmethod(lambda cls, **v: cls.model_construct(**v))  # type: ignore[assignment,method-assign]


_check_trusted()
