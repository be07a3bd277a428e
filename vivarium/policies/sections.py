"""Prompt sections of an ecology decision: what the agent is shown, built from its observation.

One piece of code for both LLM policies. The workflow policy fills ``{sections.<name>}``
placeholders (``PROPOSE_ACTION_PROMPT`` is the single step of agents without a workflow, and any
step prompt may use them) and the cognitive policy shows the same sections for a world's state,
so the two show an agent the same facts in the same words: the event number, balances, quotas,
available artifacts, recent events, relevant memories, working memory, the last action's result
and recent failures (what the agent ecology's propose prompt shows).

Each section is a ``## Title`` header and its lines, or ``""`` when the observation has nothing
it is built from (a world without artifacts has no artifact section). History lines carry a
``[t=N]`` stamp and come oldest first, so a context budget (``vivarium.policies.budget``) can
drop the oldest first. Everything here is a pure function of its arguments.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

SECTION_NAMES = (
    "agent_id",
    "tick",
    "balances",
    "quotas",
    "available_artifacts",
    "recent_events",
    "relevant_memories",
    "working_memory",
    "last_action",
    "recent_failures",
)
# After the header: the sections every agent of a step is shown alike, then the agent's own
# (its recent events include its own actions); a prompt shows them in this order.
SHARED_SECTIONS = ("available_artifacts",)
OWN_SECTIONS = tuple(n for n in SECTION_NAMES[2:] if n not in SHARED_SECTIONS)
# The observation keys the sections are built from (the ecology world's); a policy shows the
# sections instead of these keys, and any other key of a world's state as it is.
SECTION_SOURCES = frozenset(
    {
        "balance",
        "economic_context",
        "quotas",
        "artifacts",
        "messages",
        "action_history",
        "memory",
        "working_memory",
        "last_action_result",
        "failure_history",
    }
)
MAX_ITEM_CHARS = 300  # one event, memory or failure line
NO_MEMORIES = "(No relevant memories)"
WORKING_MEMORY_CUT = "[…truncated]"
# The agent ecology's working-memory schema, shown as labelled lines in structured format.
_SCHEMA_LABELS = (
    ("current_goal", "Current goal"),
    ("progress.stage", "Stage"),
    ("progress.completed", "Completed"),
    ("progress.next_steps", "Next"),
    ("lessons", "Lessons"),
    ("strategic_objectives", "Objectives"),
)
_SECTION_PLACEHOLDER = re.compile(r"\{sections\.([a-z_]+)\}")
_WORD_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def defuse(text: str) -> str:
    """``text`` with any ``{sections.`` in it made inert (``{ sections.``).

    World content (a message, an artifact) is substituted into prompts before the sections are
    filled; written as a placeholder, it would pull memories or listings into the quoted text.
    """
    return text.replace("{sections.", "{ sections.") if "{sections." in text else text


def placeholder(name: str) -> str:
    """``{sections.<name>}``: where a prompt template wants a section."""
    return "{sections." + name + "}"


# Filled by ``fill_sections``; an empty section leaves no blank line behind. What every agent
# of the step is shown comes first and the agent's own part after its name, so a server's
# prompt cache serves the shared part once for all agents.
PROPOSE_ACTION_PROMPT = "\n\n".join(
    [
        "This is event {sections.tick}.",
        *(placeholder(n) for n in SHARED_SECTIONS),
        "You are {sections.agent_id}.",
        *(placeholder(n) for n in OWN_SECTIONS),
        "Weigh what you have, what others offer and what went wrong before, then choose the "
        "one action that best serves your goals now.",
    ]
)


def _text(value: Any, limit: int = MAX_ITEM_CHARS) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, float) and math.isfinite(value):
        text = f"{value:g}"
    else:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _section(title: str, lines: Iterable[str], empty: str = "(none yet)") -> str:
    body = [line for line in lines if line]
    return f"## {title}\n" + "\n".join(body or [empty])


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


# -- the sections --------------------------------------------------------------------------------
def balances_section(observation: Mapping[str, Any]) -> str:
    """Your scrip, and where it stands in the economy (rank, richest agent, total scrip)."""
    if "balance" not in observation:
        return ""
    line = f"- You: {_text(observation.get('balance'))} scrip"
    econ = observation.get("economic_context")
    if isinstance(econ, Mapping) and econ.get("agents"):
        line += (
            f" (rank {econ.get('my_rank')} of {econ.get('agents')}; richest: "
            f"{econ.get('richest')}; scrip in the world: {econ.get('total_scrip')})"
        )
    lines = [line]
    if isinstance(econ, Mapping) and econ.get("executable_artifacts"):
        lines.append(
            f"- Services: {econ['executable_artifacts']} executable artifacts, prices "
            f"{econ.get('min_price')}..{econ.get('max_price')} (mean {econ.get('mean_price')})"
        )
    return _section("Balances", lines)


def quotas_section(observation: Mapping[str, Any]) -> str:
    """Disk bytes and LLM tokens: the quota and what is used of it."""
    quotas = observation.get("quotas")
    if not isinstance(quotas, Mapping):
        return ""
    lines = []
    if "disk_quota" in quotas:
        lines.append(
            f"- Disk: {quotas.get('disk_used', 0)} of {quotas['disk_quota']} bytes used "
            f"({quotas.get('disk_available', '?')} available)"
        )
    if "llm_tokens_used" in quotas or "llm_tokens_quota" in quotas:
        limit = quotas.get("llm_tokens_quota")
        lines.append(
            f"- LLM tokens: {quotas.get('llm_tokens_used', 0)} used of "
            f"{'no limit' if limit is None else limit}"
        )
    return _section("Quotas", lines)


def artifacts_section(observation: Mapping[str, Any]) -> str:
    """One line per artifact: id, owner, kind; price and methods of the executable ones."""
    if "artifacts" not in observation:
        return ""
    lines = []
    for art in _dicts(observation.get("artifacts")):
        owner = art.get("owner", art.get("created_by", "?"))
        line = f"- {art.get('id', '?')} (owner: {owner}, {art.get('kind', 'data')}"
        if art.get("size") is not None:
            line += f", {art.get('size')} bytes"
        line += ")"
        if art.get("executable"):
            methods = ", ".join(str(m) for m in art.get("methods") or [])
            line += f" executable, price {art.get('price', 0)}, methods: {methods or '-'}"
        lines.append(line)
    return _section("Available artifacts", lines, "(no artifacts yet)")


def _outcome(success: Any) -> str:
    return "ok" if success else "FAILED"


def recent_events_section(observation: Mapping[str, Any], agent_id: str | None = None) -> str:
    """Messages posted and your own actions, oldest first, each stamped with its step."""
    if "messages" not in observation and "action_history" not in observation:
        return ""
    me = agent_id or observation.get("agent_id")
    events: list[tuple[int, int, int, str]] = []
    for i, h in enumerate(_dicts(observation.get("action_history"))):
        t = _step(h.get("time_step"))
        events.append(
            (t, 0, i, f"- [t={t}] you: {h.get('action')} -> {_outcome(h.get('success'))}")
        )
    for i, m in enumerate(_dicts(observation.get("messages"))):
        t = _step(m.get("time_step"))
        author = m.get("author_id", "?")
        who = "you" if author == me else author
        text = _text(m.get("content", ""))
        events.append((t, 1, i, f"- [t={t}] {who} posted: {text}"))
    events.sort()
    return _section("Recent events", (e[3] for e in events), "(nothing has happened yet)")


def _step(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def memories_section(entries: Sequence[Mapping[str, Any]] | None) -> str:
    """The memories retrieved for this decision, best first: ``- [t=3] action: text``."""
    if entries is None:
        return ""
    lines = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        kind = entry.get("kind")
        text = _text(entry.get("text", entry.get("content", "")))
        lines.append(f"- [t={_step(entry.get('time_step'))}] {kind + ': ' if kind else ''}{text}")
    return _section("Relevant memories", lines, NO_MEMORIES)


def format_working_memory(value: Any, max_bytes: int, structured: bool = True) -> str:
    """Working memory as text of at most ``max_bytes`` UTF-8 bytes (cut ones end in a mark).

    Structured (the agent ecology's default): the fields of its schema as labelled lines
    (current goal, stage, completed, next steps, lessons, objectives), then any other key as
    ``key: value``. Free form: the compact JSON of the whole memory.
    """
    if isinstance(value, str):
        text = value
    elif structured and isinstance(value, Mapping):
        text = "\n".join(_structured_lines(value))
    else:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    room = max(max_bytes - len(WORKING_MEMORY_CUT.encode("utf-8")) - 1, 0)
    return data[:room].decode("utf-8", errors="ignore").rstrip() + "\n" + WORKING_MEMORY_CUT


def _structured_lines(memory: Mapping[str, Any]) -> list[str]:
    lines = []
    used: set[str] = set()
    for path, label in _SCHEMA_LABELS:
        head, _, tail = path.partition(".")
        value = memory.get(head)
        if tail:
            value = value.get(tail) if isinstance(value, Mapping) else None
        if value in (None, "", [], {}):
            continue
        used.add(head)
        if isinstance(value, list):
            sep = "; " if head == "lessons" else ", "
            value = sep.join(_text(v, 200) for v in value)
        lines.append(f"{label}: {_text(value, 1000)}")
    progress = memory.get("progress")
    if isinstance(progress, Mapping):
        for key, value in progress.items():
            if key not in {"stage", "completed", "next_steps"}:
                lines.append(f"progress.{key}: {_text(value, 1000)}")
    for key, value in memory.items():
        if key not in used and key != "progress":
            lines.append(f"{key}: {_text(value, 1000)}")
    return lines


def working_memory_section(
    observation: Mapping[str, Any],
    max_bytes: int = 2000,
    *,
    structured: bool = True,
    agent_id: str | None = None,
) -> str:
    """The agent's working memory, or how to start one when it has none (as the original)."""
    if "working_memory" not in observation:
        return ""
    value = observation.get("working_memory")
    if value in (None, {}, ""):
        me = agent_id or observation.get("agent_id") or "your agent id"
        return _section(
            "Working memory",
            [
                "(empty) To keep goals and lessons from one step to the next, write to your own "
                f'agent artifact `{me}` with content {{"working_memory": {{...}}}}.'
            ],
        )
    return _section("Working memory", [format_working_memory(value, max_bytes, structured)])


def last_action_section(observation: Mapping[str, Any]) -> str:
    """What the last action did: its name, success or failure, and the world's reason."""
    if "last_action_result" not in observation:
        return ""
    last = observation.get("last_action_result")
    if not isinstance(last, Mapping):
        return _section("Last action result", [], "(no action yet)")
    status = "succeeded" if last.get("success") else "FAILED"
    reason = _text(last.get("reason") or "", 500)
    return _section(
        "Last action result",
        [f"- {last.get('action')} {status}" + (f": {reason}" if reason else "")],
    )


def recent_failures_section(observation: Mapping[str, Any]) -> str:
    """Recent failures with the world's reasons, oldest first (``[t=N]`` where it is known).

    The world keeps failures and actions in the same order, so the n-th last failure is the
    n-th last failed action of the action history, which has the step.
    """
    if "failure_history" not in observation:
        return ""
    failures = _dicts(observation.get("failure_history"))
    failed_steps = [
        _step(h.get("time_step"))
        for h in _dicts(observation.get("action_history"))
        if not h.get("success")
    ]
    lines = []
    for back, item in enumerate(reversed(failures), start=1):
        stamp = f"[t={failed_steps[-back]}] " if back <= len(failed_steps) else ""
        lines.append(f"- {stamp}{item.get('action')}: {_text(item.get('reason') or '')}")
    lines.reverse()
    return _section("Recent failures", lines, "(no failures)")


# -- all of them ---------------------------------------------------------------------------------
def prompt_sections(
    observation: Mapping[str, Any],
    *,
    memories: Sequence[Mapping[str, Any]] | None = None,
    working_memory: bool = True,
    working_memory_bytes: int = 2000,
    structured: bool = True,
    agent_id: str | None = None,
) -> dict[str, str]:
    """Every section by name (``SECTION_NAMES``), from one observation.

    Args:
        observation: The agent's observation (or a workflow context: the same keys).
        memories: The retrieved memories, best first; None shows no memory section.
        working_memory: Whether to show the working memory (``auto_inject``).
        working_memory_bytes: Its size limit in the prompt.
        structured: Working memory as labelled schema lines (else compact JSON).
        agent_id: The agent, when the observation does not say.
    """
    me = agent_id or str(observation.get("agent_id") or "")
    tick = observation.get("tick", observation.get("time_step"))
    return {
        "agent_id": me,
        "tick": _text(tick),
        "balances": balances_section(observation),
        "quotas": quotas_section(observation),
        "available_artifacts": artifacts_section(observation),
        "recent_events": recent_events_section(observation, me),
        "relevant_memories": memories_section(memories),
        "working_memory": (
            working_memory_section(
                observation, working_memory_bytes, structured=structured, agent_id=me
            )
            if working_memory
            else ""
        ),
        "last_action": last_action_section(observation),
        "recent_failures": recent_failures_section(observation),
    }


def sections_in(text: str) -> list[str]:
    """The section names a text has placeholders for, in order of first appearance."""
    return list(dict.fromkeys(_SECTION_PLACEHOLDER.findall(text)))


def fill_sections(text: str, sections: Mapping[str, str] | Callable[[str], str]) -> str:
    """Replace ``{sections.<name>}`` with each section; an empty one takes its blank line along.

    Unknown names stay as written. One pass: a section's text is not expanded again.
    """
    get = sections if callable(sections) else sections.get

    def sub(match: re.Match[str]) -> str:
        value = get(match.group(1))
        return match.group(0) if value is None else defuse(value)

    out = _SECTION_PLACEHOLDER.sub(sub, text)
    if out != text:
        out = re.sub(r"\n{3,}", "\n\n", out).strip("\n")
    return out


def render_query(template: str, values: Mapping[str, Any]) -> str:
    """A retrieval query from a ``{name}`` template (unknown names stay, as the original's did)."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        return _text(values[name], 1000) if name in values else match.group(0)

    return _WORD_PLACEHOLDER.sub(sub, template)


def working_memory_query_text(value: Any) -> str:
    """The working memory as words for a retrieval query (``include_in_rag``)."""
    if value in (None, {}, ""):
        return ""
    if isinstance(value, Mapping):
        return " ".join(_structured_lines(value))
    return _text(value, 2000)
