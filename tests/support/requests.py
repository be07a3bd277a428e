"""The request test policies make most: post a message that names the agent and the step."""

from __future__ import annotations

from vivarium import ActionRequest


def post(run_id: str, time_step: int, agent_id: str, content: str | None = None) -> ActionRequest:
    """``post_message`` with ``content`` (default: ``"<agent> at <step>"``)."""
    return ActionRequest(
        run_id=run_id,
        time_step=time_step,
        agent_id=agent_id,
        action_name="post_message",
        arguments={"content": f"{agent_id} at {time_step}" if content is None else content},
    )
