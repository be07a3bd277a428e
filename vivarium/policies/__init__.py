"""Agent policies: anything with ``decide`` is one."""

from vivarium.policies.base import AgentPolicy, AsyncAgentPolicy
from vivarium.policies.random import RandomAgentPolicy

__all__ = ["AgentPolicy", "AsyncAgentPolicy", "RandomAgentPolicy"]
