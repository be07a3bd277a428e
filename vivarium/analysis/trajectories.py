"""A run's LLM decisions as training episodes: one per agent, in TRL's conversational format.

The trace keeps, for every model call, the request as sent and the reply as received
(``run.llm_exchanges()``), and for every decision its action and outcome (``run.actions``).
``to_trajectories`` joins the two per agent into one episode: each decision the model made is a
step holding exactly the chat the model was sent and the reply it produced, the action taken,
its outcome, and a reward. That is what training an LLM agent on its own runs needs (MetaRLGym's
purpose), without re-rendering prompts that may have changed since the run.

Format. Each step is one example of TRL's *conversational prompt-completion* type:
``prompt`` is the list of messages sent (``role``/``content``, and ``tool_calls`` /
``tool_call_id`` where the policy sent them), ``completion`` is ``[assistant message]`` (its
``content`` and, when the model called a tool, ``tool_calls`` as the server returned them,
arguments as a JSON string). That type, rather than one ``messages`` list per episode, because a
Vivarium policy sends a fresh prompt at every step (the history is summarised inside it): the
steps of an episode are not one growing chat, and gluing them together would train on text the
model never saw. ``tools`` is the tool list sent, as JSON text: tool schemas differ in shape,
and one Arrow column cannot hold them as structs (``json.loads`` it for
``tokenizer.apply_chat_template(..., tools=...)``). One row per episode keeps an agent's steps,
rewards and return together; for a trainer that wants one example per row, flatten them::

    steps = episodes.map(
        lambda batch: {k: [s[k] for ep in batch["steps"] for s in ep]
                       for k in ("prompt", "completion", "tools", "reward")},
        batched=True, remove_columns=episodes.column_names,
    )
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vivarium.errors import ConfigError, MissingDependency, TraceError
from vivarium.optional import install_hint
from vivarium.trace.run import TraceRun

__all__ = ["Reward", "action_rows", "environment_reward", "episodes", "to_trajectories"]

Reward = Callable[[dict[str, Any]], float]
"""A reward: one decision (an ``actions`` row as a dict, see ``action_rows``) -> a number."""

_JSON_COLUMNS = ("arguments", "metadata", "result")
RESULT_REWARD = "reward"
"""The key of an action's ``result`` that holds the environment's reward (MetaRLGym worlds)."""


def _clean(value: Any) -> Any:
    """A frame cell as plain Python: NaN/NA become None, numpy scalars Python ones."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    try:
        if value != value:  # pandas NA and friends
            return None
    except (TypeError, ValueError):
        return value
    return value


def action_rows(run: TraceRun) -> list[dict[str, Any]]:
    """The ``actions`` frame as dicts, in trace order, with its JSON columns decoded.

    This is what a ``reward`` function receives, one row at a time: ``step``, ``seq``,
    ``agent_id``, ``action``, ``arguments`` (dict or None), ``reasoning``, ``metadata`` (dict
    or None), ``success``, ``fallback``, ``result`` (dict or None) and ``error``. Decoded so that
    a reward reads ``row["result"]["reward"]`` rather than parsing JSON itself.
    """
    rows = []
    for record in run.actions.to_dict("records"):
        row = {str(k): _clean(v) for k, v in record.items()}
        for column in _JSON_COLUMNS:
            if isinstance(row.get(column), str):
                row[column] = json.loads(row[column])
        rows.append(row)
    return rows


def environment_reward(row: Mapping[str, Any]) -> float:
    """The environment's own reward for a decision: its result's ``reward``, else 0.0.

    A MetaRLGym world (``vivarium.metarl.world.GameWorld``) records each move's reward in the
    action's ``result``; an action it refused (no move was made) earns nothing.
    """
    result = row.get("result")
    if isinstance(result, Mapping) and RESULT_REWARD in result:
        return float(result[RESULT_REWARD])
    return 0.0


def _has_environment_reward(rows: list[dict[str, Any]]) -> bool:
    return any(isinstance(r["result"], Mapping) and RESULT_REWARD in r["result"] for r in rows)


def _final_replies(run: TraceRun) -> dict[tuple[int, str], tuple[dict[str, Any], dict[str, Any]]]:
    """(step, agent) -> (request, reply) of the attempt whose reply the decision used.

    A decision may make several calls (each starting at attempt 1) and a call several attempts;
    the last call is the one that chose the action, and its last attempt without an error is
    the reply it was given. A decision whose last call never succeeded has no entry.
    """
    exchanges = run.llm_exchanges()
    if not len(exchanges):
        raise TraceError(
            f"run {run.run_id} made no LLM calls: its decisions have no prompts to train on"
        )
    if exchanges["request"].isna().all():
        raise TraceError(
            f"run {run.run_id} holds no prompts or replies (its trace was written before "
            "Vivarium recorded them): re-run it to export trajectories"
        )
    calls: dict[tuple[int, str], list[tuple[int, Any, Any, Any]]] = {}
    for step, agent, attempt, error, request, reply in zip(
        exchanges["step"],
        exchanges["agent_id"],
        exchanges["attempt"],
        exchanges["error"],
        exchanges["request"],
        exchanges["reply"],
        strict=True,
    ):
        key = (int(step), str(agent))
        if int(attempt) == 1:
            calls[key] = []  # a new call: the earlier ones did not choose the action
        calls.setdefault(key, []).append((int(attempt), _clean(error), request, reply))
    chosen = {}
    for key, attempts in calls.items():
        succeeded = [(request, reply) for _, error, request, reply in attempts if error is None]
        if succeeded and not (
            isinstance(succeeded[-1][0], dict) and isinstance(succeeded[-1][1], dict)
        ):
            # A reply was used but its text is not in the trace (a cassette row recorded
            # before Vivarium kept texts): leaving the step out would change the episode.
            step, agent = key
            raise TraceError(
                f"the LLM call {agent} made at step {step} was recorded without its prompt "
                "and reply (replayed from an older cassette?): re-record it to export "
                "trajectories"
            )
        ok = [(q, r) for q, r in succeeded if not r.get("error")]
        if ok:
            chosen[key] = ok[-1]
    return chosen


def _assistant(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The reply as the assistant message a chat continues with (tool calls kept as sent)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if reply.get("tool_calls"):
        message["tool_calls"] = reply["tool_calls"]
    return message


def _reward_value(reward: Reward, row: dict[str, Any]) -> float:
    value = reward(row)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        name = getattr(reward, "__name__", "reward")
        raise ConfigError(
            f"reward {name}() returned {value!r} for {row['agent_id']} at step {row['step']}: "
            "a number was expected"
        )
    return float(value)


def episodes(run: TraceRun, reward: Reward | None = None) -> list[dict[str, Any]]:
    """The episodes as plain dicts, one per agent in the trace's agent order.

    See ``to_trajectories``; this is its content before it becomes a ``Dataset`` or JSONL.
    """
    rows = action_rows(run)
    if reward is None:
        if not _has_environment_reward(rows):
            raise ConfigError(
                f"run {run.run_id}'s world records no reward of its own: pass reward=, a "
                "function of one action row (a dict) returning a number"
            )
        reward = environment_reward
    elif not callable(reward):
        raise ConfigError(f"reward must be a function of an action row, not {reward!r}")
    replies = _final_replies(run)
    steps: dict[str, list[dict[str, Any]]] = {str(a): [] for a in run.agents["agent_id"]}
    for row in rows:
        exchange = replies.get((int(row["step"]), str(row["agent_id"])))
        if exchange is None:  # no model reply behind this decision: nothing to learn from
            continue
        request, reply = exchange
        tools = request.get("tools")
        steps[str(row["agent_id"])].append(
            {
                "step": int(row["step"]),
                "prompt": [dict(m) for m in request.get("messages") or []],
                "completion": [_assistant(reply)],
                "tools": None if tools is None else json.dumps(tools, ensure_ascii=False),
                "action": row["action"],
                "arguments": _json_text(row["arguments"]),
                "success": bool(row["success"]),
                "fallback": bool(row["fallback"]),
                "result": _json_text(row["result"]),
                "error": row["error"],
                "reward": _reward_value(reward, row),
            }
        )
    return [
        {
            "run_id": str(run.run_id),
            "episode": agent,
            "steps": entries,
            "rewards": [s["reward"] for s in entries],
            "return": float(sum(s["reward"] for s in entries)),
        }
        for agent, entries in steps.items()
    ]


def _json_text(value: Any) -> str | None:
    """A decoded JSON column back as the trace's text (one type per column for Arrow)."""
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def to_trajectories(
    run: TraceRun | str | os.PathLike[str],
    reward: Reward | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
) -> Any:
    """One training episode per agent: what the model saw, what it said, and what it earned.

    Each row is an episode: ``run_id``, ``episode`` (the agent id), ``steps``, ``rewards`` (one
    per step) and ``return`` (their sum). Each step is one decision the model made, in TRL's
    conversational prompt-completion format (see the module docstring for why): ``step``,
    ``prompt`` (the messages of the attempt whose reply was used, exactly as sent),
    ``completion`` (``[{"role": "assistant", "content", "tool_calls"}]`` as received),
    ``tools`` (the tool list sent, JSON text), ``action``, ``arguments`` and ``result`` (JSON
    text, as in the trace), ``success``, ``fallback``, ``error`` and ``reward``. Decisions with
    no model reply behind them (a random policy, a barred agent, every attempt failed) are not
    steps: there is no completion to learn from. In a ``Dataset`` every message has every field
    some message has (``datasets`` stores a list of dicts as Arrow structs); the missing ones
    read as None.

    Args:
        run: A run, or the path of its trace.
        reward: ``reward(row) -> float`` for one decision, ``row`` being the ``actions`` row
            as a dict with its JSON decoded (``action_rows``); a function of one row because
            a reward is a judgement of one decision, and anything else it needs (the run, the
            other rows) it can close over. Default: the environment's own reward, the
            ``reward`` a MetaRLGym world records in each action's ``result``.
        path: Where to write the episodes as JSONL, one per line. Required when ``datasets``
            is not installed; with it, the file is written as well when given.

    Returns:
        A ``datasets.Dataset`` when ``datasets`` (the ``rl`` extra) is installed, else the path
        of the JSONL file.

    Raises:
        ConfigError: No ``reward`` was given and the world records none, or ``reward`` returned
            something other than a number.
        MissingDependency: ``datasets`` is not installed and no ``path`` was given.
        TraceError: The trace holds no prompts (written before Vivarium recorded them).
    """
    if not isinstance(run, TraceRun):
        run = TraceRun.open(run)
    try:
        datasets = importlib.import_module("datasets")
    except ImportError:
        datasets = None
    if datasets is None and path is None:
        raise MissingDependency(
            f"{install_hint('datasets')}, or pass path= to write JSONL", name="datasets"
        )
    found = episodes(run, reward)
    if path is not None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8") as out:
            for episode in found:
                out.write(json.dumps(episode, ensure_ascii=False) + "\n")
    if datasets is None:
        return Path(path)  # type: ignore[arg-type]
    inferred = datasets.Dataset.from_list(found).features  # (a cast would print progress)
    features = datasets.Features(_no_nulls(inferred, datasets.Value))
    return datasets.Dataset.from_list(found, features=features)


def _no_nulls(feature: Any, value: type) -> Any:
    """The features with every all-None field typed as text rather than Arrow's ``null``.

    A field no row fills (``content`` when every reply was a tool call, ``error`` in a run
    without failures) would otherwise be typed ``null``, and datasets of two runs would not
    concatenate; every such field here holds text when it holds anything.
    """
    if isinstance(feature, value):
        return value("string") if feature.dtype == "null" else feature
    if isinstance(feature, dict):
        return {k: _no_nulls(v, value) for k, v in feature.items()}
    if isinstance(feature, list):  # datasets 3: a list of structs is [struct]
        return [_no_nulls(f, value) for f in feature]
    if dataclasses.is_dataclass(feature) and hasattr(feature, "feature"):  # List / Sequence
        return dataclasses.replace(feature, feature=_no_nulls(feature.feature, value))
    return feature
