"""How overrides merge into a config: one way at every entry point.

A config is given, then changed: ``Experiment(config, llm={...})``, ``from_file(path, **fields)``,
``vvm run --model X``, a panel's controls, a sweep's axes. Each merges its changes with
``merge_overrides``, so a mapping given for a mapping field sets the keys it names and keeps the
rest everywhere, and each says the same note (``llm_switch``) when the changes moved the LLM
calls from the mock to a model or back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vivarium.errors import ConfigError
from vivarium.experiment.config import LLMConfig
from vivarium.settings import DEFAULT_MODEL, server_urls

__all__ = ["llm_switch", "merge_overrides", "unused_server_note"]


def merge_overrides(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` on top, merged the same way at every entry point.

    A mapping given for a field that is a mapping (``llm``, ``autonomous``, ``world_options``,
    ``policy_options``, ``inputs``) sets the keys it names and keeps the others, at every
    depth: ``llm={"temperature": 0.7}`` changes the temperature of the model the config names
    instead of dropping its model and server (and answering from the mock). Anything else (a
    number, a list, ``None``) replaces the field. The constructor, ``from_file``, ``vvm``
    flags, the panel and sweep axes all go through here.

    An override that names a model but says nothing of ``mock`` is a request for that model:
    a ``mock: true`` inherited from the base gives way (``llm_switch`` says so).

    Args:
        base: The fields as they are (a config's ``model_dump``, a file's mapping).
        overrides: The fields given.

    Returns:
        The merged fields (``base`` is not changed).
    """
    out = dict(base)
    for key, value in overrides.items():
        old = out.get(key)
        if key == "agents" and "policy" not in overrides:
            _check_groups_kept(old, value)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            merged = merge_overrides(old, value)
            if (
                key == "llm"
                and "model" in value
                and "mock" not in value
                and value["model"] != "mock"
            ):
                merged["mock"] = False  # the model asked for answers, not the base's mock
            out[key] = merged
        else:
            out[key] = value
    return out


def _check_groups_kept(groups: Any, count: Any) -> None:
    """Refuse a number of agents given over agent groups (``--agents 10`` on a groups config).

    It would replace the groups with that many agents of the config's ``policy`` (random by
    default): the LLM agents, the workflow agents and their folders gone, and a run of random
    agents in their place that reports nothing wrong. Giving ``policy`` too says that is meant.

    Raises:
        ConfigError: ``groups`` is a list of agent groups and ``count`` a number (one line).
    """
    if not isinstance(groups, list) or not groups:
        return
    if not isinstance(count, int) or isinstance(count, bool):
        return

    def field(group: Any, name: str, default: Any) -> Any:
        got = group.get(name) if isinstance(group, Mapping) else getattr(group, name, None)
        return default if got is None else got

    def label(group: Any) -> str:
        name = str(field(group, "agent", "") or field(group, "policy", "random"))
        name = name.rpartition("@")[0].rsplit(".", 1)[-1] if "@" in name else name
        return f"{name} x{field(group, 'count', 1)}"

    kinds = ", ".join(label(g) for g in groups[:4]) + (", ..." if len(groups) > 4 else "")
    raise ConfigError(
        f"agents: the config gives agent groups ({kinds}); a number ({count}) would replace "
        "them with that many agents of its policy: set each group's count instead "
        "(agents=[{...}, ...]), or give policy= too to replace the groups"
    )


def _answerer(llm: Any) -> str | None:
    """Who answers a config's LLM calls: ``"mock"``, the model's name, or None (no LLM)."""
    if llm is None:
        return None
    if isinstance(llm, LLMConfig):
        return "mock" if llm.uses_mock else llm.model
    if isinstance(llm, Mapping):
        model = str(llm.get("model", DEFAULT_MODEL))
        return "mock" if llm.get("mock") or model == "mock" else model
    return None


def _servers(llm: Any) -> tuple[str, ...]:
    """The servers an ``llm`` section names (an ``LLMConfig`` or a mapping), as a tuple."""
    if llm is None:
        return ()
    if isinstance(llm, LLMConfig):
        return llm.api_bases
    value = llm.get("api_base") if isinstance(llm, Mapping) else None
    return server_urls(value, check=False) if value else ()  # validated later, in one line


def unused_server_note(servers: tuple[str, ...] | list[str]) -> str:
    """The note for a server given to a run that the mock answers (it is never called)."""
    return (
        f"llm: api_base {', '.join(servers)} is not used: the deterministic mock answers "
        "(the config says mock: true, or model: mock); name the model and set mock: false "
        "to call the server"
    )


def llm_switch(before: Any, after: Any) -> str | None:
    """The note for overrides that moved a config's LLM calls from the mock to a model, or back.

    Args:
        before: The base's ``llm`` (an ``LLMConfig``, a mapping or None).
        after: The ``llm`` that will run.

    Returns:
        ``llm: the deterministic mock now answers instead of openai/x`` (or the reverse);
        ``llm: api_base URL is not used: the deterministic mock answers ...`` when the
        overrides gave a server to a run the mock answers; or None when both are the mock,
        both are models, or either has no LLM.
    """
    was, now = _answerer(before), _answerer(after)
    if now == "mock" and _servers(after) and _servers(after) != _servers(before):
        return unused_server_note(_servers(after))
    if was is None or now is None or (was == "mock") == (now == "mock"):
        return None
    if now == "mock":
        return f"llm: the deterministic mock now answers instead of {was} (an override set it)"
    return f"llm: {now} now answers instead of the deterministic mock (an override set it)"
