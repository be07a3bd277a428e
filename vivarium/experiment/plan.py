"""The build plan of a run: every agent id, its group and its seeds, before anything is built.

A config names either a number of agents of one policy, or groups of agents (``agents:
[{policy: workflow, agent: data/agents/alpha_2}, {policy: random, count: 3}]``). The plan lists
every agent of the run in the engine's canonical order (``vivarium.seeding.agent_sort_key``: by
id, numbered ids in index order), with the group it comes from and the seeds it runs on
(``vivarium.seeding.AgentSeeds``). Worlds are built for the planned ids, then one policy per
planned agent, and the engine records the seed each agent runs on (``vivarium.experiment.build.
recorded_seeds`` decides it, from the plan): seeds are derived once (by ``vivarium.seeding``)
and handed down, never derived again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vivarium.errors import ConfigError
from vivarium.experiment.config import AgentGroup
from vivarium.seeding import AgentSeeds, agent_sort_key, numbered_id

if TYPE_CHECKING:
    from vivarium.experiment.config import ExperimentConfig

__all__ = ["PlannedAgent", "agent_plan", "load_spec"]


@dataclass(frozen=True, slots=True)
class PlannedAgent:
    """One agent of a run, as planned from its config.

    Attributes:
        agent_id: The agent's id in the trace.
        group: The config's agent group the agent comes from.
        seeds: The seeds the agent runs on; a policy takes the one it needs from here.
    """

    agent_id: str
    group: AgentGroup
    seeds: AgentSeeds


def agent_plan(
    config: ExperimentConfig, shared: dict[str, Any] | None = None
) -> list[PlannedAgent]:
    """Every agent of the run with its group and seeds, in the engine's order (``agent_sort_key``).

    Args:
        config: The experiment config.
        shared: What one run's builders share; receives the loaded agent specs and the
            config's ``base_dir``.

    Returns:
        The planned agents; agents of disabled groups are left out.

    Raises:
        ConfigError: Every agent is disabled, or two agents have the same id.
    """
    shared = {} if shared is None else shared
    if config.base_dir:
        shared.setdefault("base_dir", config.base_dir)
    groups = (
        config.agents
        if isinstance(config.agents, list)
        else [
            AgentGroup(
                policy=config.policy, count=config.agents, policy_options=config.policy_options
            )
        ]
    )
    plan: list[PlannedAgent] = []
    disabled: list[str] = []
    counter = 0
    for group in groups:
        if group.agent:
            spec = load_spec(group.agent, shared)
            base = group.id or spec.id
            ids = [base] if group.count == 1 else [f"{base}_{i}" for i in range(group.count)]
            enabled = spec.enabled and group.enabled is not False
        else:
            prefix = group.id or "agent"
            ids = [numbered_id(prefix, counter + i) for i in range(group.count)]
            counter += group.count
            enabled = group.enabled is not False
        if enabled:
            plan.extend(PlannedAgent(aid, group, AgentSeeds(config.seed, aid)) for aid in ids)
        else:  # left out of the run; the recorded config says so (ExperimentConfig.identity)
            disabled.append(group.agent or group.id or group.policy)
    if not plan:
        raise ConfigError(
            f"config: agents: every agent is disabled (enabled: false: {', '.join(disabled)}); "
            "enable one to run"
        )
    seen: set[str] = set()
    for p in plan:
        if p.agent_id in seen:
            raise ConfigError(f"config: agents: agent id '{p.agent_id}' is used twice")
        seen.add(p.agent_id)
    return sorted(plan, key=lambda p: agent_sort_key(p.agent_id))


def load_spec(folder: str, shared: dict[str, Any]) -> Any:
    """A workflow agent's spec, loaded once per run.

    A relative folder is looked up from the config's ``base_dir`` first, then from the working
    directory, so a config runs the same from a notebook folder or the project root.

    Args:
        folder: The agent folder the config names.
        shared: What one run's builders share; caches the specs under ``"specs"``.

    Returns:
        The loaded ``AgentSpec``.
    """
    specs = shared.setdefault("specs", {})
    if folder not in specs:
        from vivarium.workflow.config import load_agent, resolve_agent_folder

        specs[folder] = load_agent(resolve_agent_folder(folder, shared.get("base_dir")))
    return specs[folder]


def agents_with_changes(
    config: ExperimentConfig, changes: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The config's agent groups with some agents' own policy or options changed.

    Each changed agent becomes a group of its own, cut out of the group it was in, so that
    every agent keeps its id (hence its seeds): numbered ids count on across groups. A change
    is the agent's ``policy`` and its ``policy_options`` (a cognitive agent's
    ``system_prompt``, ``model``, ``temperature``, ...), merged over its group's.

    Args:
        config: The config whose agents change.
        changes: Agent id -> ``{"policy": ..., "system_prompt": ..., ...}``.

    Returns:
        The groups, as dumped ``AgentGroup`` fields (for ``agents=``).

    Raises:
        ConfigError: An agent id the config does not have, or one of a group of several agents
            made from one folder (their ids would change): one line.
    """
    source = (
        list(config.agents)
        if isinstance(config.agents, list)
        else [
            AgentGroup(
                policy=config.policy, count=config.agents, policy_options=config.policy_options
            )
        ]
    )
    planned = agent_plan(config.model_copy(update={"agents": source}))
    ids_of: dict[int, list[str]] = {}
    for p in planned:  # in each group, the ids in the order the group makes them
        ids_of.setdefault(id(p.group), []).append(p.agent_id)
    left = dict(changes)
    out: list[dict[str, Any]] = []
    for group in source:
        dumped = group.model_dump(exclude_none=True)
        ids = ids_of.get(id(group), [])
        hit = [i for i, aid in enumerate(ids) if aid in left]
        if hit and group.agent and group.count > 1:
            raise ConfigError(
                f"agent {ids[hit[0]]}: one of {group.count} agents made from the folder "
                f"{group.agent}; change the folder's group instead (their ids would change)"
            )
        start = 0
        for i in hit:
            if i > start:
                out.append({**dumped, "count": i - start})
            out.append(_changed({**dumped, "count": 1}, left.pop(ids[i])))
            start = i + 1
        if start < group.count:
            out.append({**dumped, "count": group.count - start})
    if left:
        raise ConfigError(f"agents: no agent {', '.join(sorted(left))} in this run")
    return out


def _changed(group: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(change, dict):
        raise ConfigError(f"an agent's change is a mapping of its settings, not {change!r}")
    change = dict(change)
    policy = change.pop("policy", None)
    options = {**(group.get("policy_options") or {}), **change}
    if policy is not None and policy != group.get("policy"):
        options = change  # another policy: the old one's options do not apply
        group = {**group, "policy": policy}
    return {**group, "policy_options": options}
