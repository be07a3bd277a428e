"""One decision as HTML: the prompt as a chat, the raw reply, the parse, the outcome, the costs.

Everything from the trace is text the model or the world wrote, so every value goes through
``html.escape``: a prompt holding ``<script>`` shows as text, never as markup. Text keeps its
line breaks (``white-space: pre-wrap``), so what the page shows is what the agent was sent.
Styles are inline: the notebook's HTML widget takes no stylesheet of ours.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from html import escape
from typing import Any

ROLE_COLOURS = {
    "system": "#eeeeee",
    "user": "#e3f0fb",
    "assistant": "#e6f5e9",
    "tool": "#fdf3d8",
}
PRE = "white-space:pre-wrap;word-break:break-word;margin:0;font-family:monospace;font-size:12px"
BOX = "border:1px solid #ccc;border-radius:6px;padding:6px 8px;margin:4px 0"


def esc(value: Any) -> str:
    """A value as escaped text (None as an empty string)."""
    return "" if value is None else escape(str(value), quote=True)


def pretty(value: Any) -> str:
    """A value as indented JSON text (strings as they are)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def pre(value: Any, style: str = "") -> str:
    """A value as an escaped, line-preserving block."""
    return f"<pre style='{PRE};{style}'>{esc(pretty(value))}</pre>"


def section(title: str, body: str) -> str:
    """A titled part of the detail pane."""
    return f"<div style='margin:8px 0'><div><b>{esc(title)}</b></div>{body}</div>"


def table(rows: Iterable[tuple[str, Any]]) -> str:
    """(label, value) pairs as a two-column table, values escaped (a value of None is left out)."""
    cells = "".join(
        f"<tr><th style='text-align:left;padding-right:10px;vertical-align:top'>{esc(k)}</th>"
        f"<td style='text-align:left'>{pre(v) if isinstance(v, dict | list) else esc(v)}</td></tr>"
        for k, v in rows
        if v is not None
    )
    return f"<table style='border-collapse:collapse'>{cells}</table>"


def badge(text: str, colour: str) -> str:
    """A small coloured label (fallback, failed, pivot)."""
    return (
        f"<span style='background:{colour};color:#fff;border-radius:4px;padding:1px 6px;"
        f"margin-left:6px;font-size:11px'>{esc(text)}</span>"
    )


# -- the chat ------------------------------------------------------------------------------------
def content_html(content: Any) -> str:
    """A message's content: text as text, a list of parts part by part."""
    if content is None or content == "":
        return ""
    if isinstance(content, list):
        return "".join(
            pre(p["text"]) if isinstance(p, dict) and p.get("type") == "text" else pre(p)
            for p in content
        )
    return pre(content)


def tool_calls_html(calls: Any) -> str:
    """The tool calls of a message or reply: name, id and arguments (as sent, as text)."""
    if not calls:
        return ""
    out = []
    for call in calls if isinstance(calls, list) else [calls]:
        fn = (call.get("function") or {}) if isinstance(call, dict) else {}
        name = fn.get("name", "?")
        args = fn.get("arguments")
        ident = call.get("id") if isinstance(call, dict) else None
        head = f"tool call <code>{esc(name)}</code>" + (
            f" <span style='color:#777'>({esc(ident)})</span>" if ident else ""
        )
        out.append(f"<div style='margin-top:4px'>{head}{pre(args)}</div>")
    return "".join(out)


def bubble(role: str, body: str, note: str = "") -> str:
    """One chat message: a role-labelled bubble, assistant messages to the right."""
    colour = ROLE_COLOURS.get(role, "#f4f4f4")
    side = "margin-left:60px" if role == "assistant" else "margin-right:60px"
    label = f"<div style='font-size:11px;color:#555'><b>{esc(role)}</b>{note}</div>"
    return (
        f"<div class='vvm-msg vvm-{esc(role)}' style='background:{colour};{BOX};{side}'>"
        f"{label}{body}</div>"
    )


def message_html(message: Any) -> str:
    """A request message as a bubble: content, tool calls, and the tool it answers."""
    if not isinstance(message, dict):
        return bubble("?", pre(message))
    role = str(message.get("role") or "?")
    note = ""
    if message.get("name"):
        note += f" · name {esc(message['name'])}"
    if message.get("tool_call_id"):
        note += f" · answers {esc(message['tool_call_id'])}"
    body = content_html(message.get("content")) + tool_calls_html(message.get("tool_calls"))
    return bubble(role, body, note)


def request_html(request: dict[str, Any] | None) -> str:
    """What the model was sent: the messages as a chat, the tools and parameters folded."""
    if not request:
        return "<i>no prompt text in this trace (it was written before prompts were kept)</i>"
    chat = "".join(message_html(m) for m in request.get("messages") or [])
    tools = request.get("tools") or []
    names = [((t.get("function") or {}).get("name") or "?") for t in tools if isinstance(t, dict)]
    params = {k: v for k, v in request.items() if k not in ("messages", "tools")}
    extra = ""
    if tools:
        extra += (
            f"<details><summary>tools ({len(tools)}): {esc(', '.join(names))}</summary>"
            f"{pre(tools)}</details>"
        )
    if params:
        extra += f"<details><summary>parameters</summary>{pre(params)}</details>"
    return chat + extra


def reply_html(reply: dict[str, Any] | None) -> str:
    """What came back: the reply as a bubble, then the raw reply as recorded."""
    if not reply:
        return "<i>no reply text in this trace</i>"
    body = content_html(reply.get("content")) + tool_calls_html(reply.get("tool_calls"))
    if reply.get("error"):
        body += f"<div style='color:#c00000'>error: {pre(reply['error'])}</div>"
    note = f" · finish_reason {esc(reply.get('finish_reason'))}"
    raw = f"<div style='font-size:11px;color:#555'>raw reply</div>{pre(reply)}"
    return bubble("assistant", body or "<i>(empty)</i>", note) + raw


# -- the decision ----------------------------------------------------------------------------------
def _number(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if isinstance(value, int | float) else str(value)


def costs_html(calls: list[dict[str, Any]]) -> str:
    """Tokens, latency and cost: summed over the decision's attempts, then each attempt."""

    def total(key: str) -> float:
        return sum(float(c.get(key) or 0) for c in calls)

    head = (
        f"{len(calls)} call attempt(s): prompt tokens {_number(total('prompt_tokens'))}, "
        f"completion tokens {_number(total('completion_tokens'))}, "
        f"latency {_number(total('latency_ms'), 1)} ms, cost ${total('cost'):.6f}"
    )
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td style='padding-right:8px'>{esc(v)}</td>"
            for v in (
                i,
                c.get("attempt"),
                c.get("model"),
                c.get("prompt_tokens"),
                c.get("completion_tokens"),
                _number(c.get("latency_ms"), 1),
                f"{float(c.get('cost') or 0):.6f}",
                "yes" if c.get("cache_hit") else "no",
                c.get("finish_reason"),
                c.get("error"),
            )
        )
        + "</tr>"
        for i, c in enumerate(calls, 1)
    )
    names = ("call", "attempt", "model", "prompt", "completion", "ms", "cost $", "cached", "finish")
    header = "".join(f"<th style='text-align:left;padding-right:8px'>{n}</th>" for n in names)
    header += "<th style='text-align:left'>error</th>"
    return f"<div class='vvm-costs'>{esc(head)}</div><table><tr>{header}</tr>{rows}</table>"


def calls_html(calls: list[dict[str, Any]]) -> str:
    """Every LLM call attempt of the decision: its prompt as a chat and its raw reply."""
    if not calls:
        return "<i>no LLM call (this agent's policy decided without a model)</i>"
    parts = [costs_html(calls)]
    for i, c in enumerate(calls, 1):
        title = f"call {i} of {len(calls)} · attempt {c.get('attempt')} · id {c.get('call_id')}"
        parts.append(
            f"<div class='vvm-call' style='{BOX}'><div><b>{esc(title)}</b></div>"
            f"<div style='font-size:11px;color:#555'>prompt</div>{request_html(c.get('request'))}"
            f"<div style='font-size:11px;color:#555'>reply</div>{reply_html(c.get('reply'))}</div>"
        )
    return "".join(parts)


def parse_html(row: dict[str, Any]) -> str:
    """How the reply became the action: the parse path, and why it fell back if it did."""
    meta = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    # A fallback's reason leaves the metadata for the row's ``error`` (one layout for all).
    reason = meta.get("fallback_reason") or (row.get("error") if row.get("fallback") else None)
    rows = [
        ("parse path", meta.get("parse_path")),
        ("fallback reason", reason),
        ("tool call error", meta.get("tool_call_error")),
        ("finish reason", meta.get("finish_reason")),
        ("model", meta.get("model")),
    ]
    rest = {k: v for k, v in meta.items() if k not in {"parse_path", "fallback_reason"}}
    more = f"<details><summary>metadata</summary>{pre(rest)}</details>" if rest else ""
    if not any(v is not None for _, v in rows):
        return "<i>no parse recorded</i>" + more
    return table(rows) + more


def outcome_html(row: dict[str, Any]) -> str:
    """The action with its arguments, and what the world made of it."""
    ok = row.get("success")
    return table(
        [
            ("action", row.get("action")),
            ("arguments", row.get("arguments") if row.get("arguments") is not None else {}),
            ("success", "yes" if ok else "no"),
            ("fallback", "yes" if row.get("fallback") else "no"),
            ("result", row.get("result")),
            ("error", row.get("error")),
            ("reasoning", row.get("reasoning")),
        ]
    )


def transitions_html(moves: list[dict[str, Any]], pivot: str | None) -> str:
    """The agent's state transitions at this step, with the reason the model gave."""
    note = f"<div>pivot: {esc(pivot)}</div>" if pivot else ""
    if not moves:
        return note + "<i>no state transition at this step</i>"
    rows = "".join(
        f"<tr><td>{esc(m.get('from_state'))} &rarr; {esc(m.get('to_state'))}</td>"
        f"<td style='padding-left:8px'>{esc(m.get('trigger'))}</td>"
        f"<td style='padding-left:8px'>{'routine' if m.get('routine') else ''}</td>"
        f"<td style='padding-left:8px'>{esc(m.get('reason'))}</td></tr>"
        for m in moves
    )
    head = "<tr><th>move</th><th>trigger</th><th></th><th style='text-align:left'>reason</th></tr>"
    return f"{note}<table>{head}{rows}</table>"


def decision_html(
    row: dict[str, Any],
    calls: list[dict[str, Any]],
    moves: list[dict[str, Any]],
    *,
    pivot: str | None = None,
    run_label: str | None = None,
    stops: list[Any] | None = None,
) -> str:
    """The detail pane of one decision, every value escaped.

    Args:
        row: The decision (an ``actions`` row, JSON columns decoded).
        calls: Its LLM call attempts with ``request`` and ``reply`` (``llm_exchanges`` rows).
        moves: Its agent's state transitions at that step.
        pivot: How the agent pivoted at that step, if it did.
        run_label: The run's name, for a sweep.
        stops: The run's interruptions at this step (``trace.interruptions.Interruption``):
            the step was redone by a resume, and what the stopped try discarded is said.
    """
    badges = ""
    if row.get("fallback"):
        badges += badge("fallback", "#D55E00")
    if not row.get("success"):
        badges += badge("failed", "#000000")
    if pivot:
        badges += badge("pivot", "#CC79A7")
    if stops:
        badges += badge("resumed here", "#0072B2")
    where = f"{esc(run_label)} · " if run_label else ""
    title = (
        f"<div style='font-size:14px'>{where}<b>{esc(row.get('agent_id'))}</b> · step "
        f"{esc(row.get('step'))} · seq {esc(row.get('seq'))} · "
        f"<code>{esc(row.get('action'))}</code>{badges}</div>"
    )
    return (
        f"<div class='vvm-decision'>{title}"
        + section("action and outcome", outcome_html(row))
        + section("parse", parse_html(row))
        + section("state transition", transitions_html(moves, pivot))
        + section("LLM calls (the prompt is what the agent observed)", calls_html(calls))
        + (section("interrupted at this step", stops_html(stops, row)) if stops else "")
        + "</div>"
    )


def stops_html(stops: list[Any], row: dict[str, Any]) -> str:
    """The run's stops at a decision's step: when, why, and what of the stopped try is kept.

    The decision shown is the resume's (a stopped step is never committed); what the stopped
    try had decided and asked the model is in ``run.interruptions`` (its ``discarded``).
    """
    lines = []
    agent = row.get("agent_id")
    for stop in stops:
        mine = [c for c in stop.discarded if c.get("agent_id") == agent]
        kept = (
            f"; {len(mine)} LLM call attempts of {agent} in the stopped try are kept "
            "in run.interruptions"
            if mine
            else ""
        )
        lines.append(
            f"{esc(stop.ended)} at {esc(stop.recorded_at)}: {esc(stop.reason or 'no reason')}"
            f" ({stop.decisions} decisions and {stop.llm_calls} LLM call attempts of the step "
            f"discarded{esc(kept)}); this decision is the resume's"
        )
    return "<br>".join(lines)
