"""Reading a workflow step's reply: the action of an ``act`` call, the option of a ``choose``.

Replies are read the way models give them: a tool call, JSON in the text, or plain words
(``Ship.``, ``B``, ``I choose B) PIVOT``), with the model's stated reasoning kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from vivarium.gateways.base import LLMResponse
from vivarium.policies.parsing import (
    MAX_REASON_CHARS,
    MAX_REASONING_CHARS,
    check_arguments,
    json_values,
    parse_action,
    truncate,
)
from vivarium.workflow.tools import ACT_TOOL


@dataclass(frozen=True, slots=True)
class ParsedStep:
    """What a reply said, read: the value, the model's reasoning, and how it was found.

    Attributes:
        value: ``(action name, arguments)`` for ``act``, the chosen key for ``choose``.
        reasoning: The model's reasoning fields, joined (None when it gave none).
        path: How the value was found: ``tool_call``, ``json_text`` or ``text``.
    """

    value: Any  # (action name, arguments) for act, the key for choose
    reasoning: str | None
    path: str


def _reasoning(payload: Mapping[str, Any]) -> str | None:
    parts = []
    for key, label in (
        ("thought_process", ""),
        ("situation_assessment", "Situation: "),
        ("action_rationale", "Rationale: "),
        ("reasoning", ""),
        ("reason", ""),
    ):
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            parts.append(label + value.strip())
    return truncate("\n".join(parts), MAX_REASONING_CHARS) if parts else None


def _action_in(
    payload: Any, allowed: tuple[str, ...], arg_models: Mapping[str, type[BaseModel]]
) -> tuple[str, dict[str, Any]] | str:
    """``(name, arguments)`` from an ``act`` payload, or the reason it holds no usable action."""
    if not isinstance(payload, Mapping):
        return "act arguments must be a JSON object"
    action = payload.get("action")
    error = None
    if isinstance(action, Mapping):
        name = action.get("name", action.get("action"))
        arguments = action.get("arguments", action.get("args", {}))
    elif isinstance(action, str):
        name, arguments = action, payload.get("arguments", {})
    else:
        return "no action in the reply"
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            error = "arguments are not valid JSON"
    checked = check_arguments(name, arguments, error, allowed, arg_models)
    return checked if isinstance(checked, str) else (str(name), checked)


def parse_act(
    response: LLMResponse,
    allowed: Sequence[str],
    arg_models: Mapping[str, type[BaseModel]] | None = None,
) -> ParsedStep | str:
    """The action in a reply, or the reason there is none.

    An ``act`` tool call, else an action tool call or JSON in the text
    (``{"action": {"name", "arguments"}}`` and the shapes ``parse_action`` knows).
    """
    allowed = tuple(allowed)
    models = arg_models or {}
    reasons: list[str] = []
    others = []
    for call in response.tool_calls:
        if call.name != ACT_TOOL:
            others.append(call)
            continue
        if call.parse_error is not None:
            reasons.append(f"bad arguments: {ACT_TOOL}: {call.parse_error}")
            continue
        found = _action_in(call.arguments, allowed, models)
        if isinstance(found, str):
            reasons.append(found)
        else:
            return ParsedStep(found, _reasoning(call.arguments), "tool_call")
    content = response.content if isinstance(response.content, str) else ""
    # JSON in the text, the act payload shape first
    values, _ = json_values(content) if content.strip() else ([], False)
    for value in values:
        if isinstance(value, Mapping) and "action" in value:
            found = _action_in(value, allowed, models)
            if not isinstance(found, str):
                return ParsedStep(found, _reasoning(value), "json_text")
            reasons.append(found)
    rest = response.model_copy(update={"tool_calls": others})
    parsed = parse_action(rest, allowed, models)
    if parsed.metadata.get("parse_path") != "fallback":
        return ParsedStep(
            (parsed.action_name, parsed.arguments),
            parsed.reasoning,
            str(parsed.metadata.get("parse_path")),
        )
    if reasons:
        return truncate(reasons[0], MAX_REASON_CHARS)
    if response.tool_calls and not others:
        return "no action in the reply"
    return str(parsed.metadata.get("fallback_reason") or "no action found")


_MARKUP = " \t\r\n`'\"*_~#>.,;:!?()[]{}<>"
_DECIDED = re.compile(
    r"(?:choose|chose|choice|decision|decide|answer|option|select|pick|go with|going with)"
    r"(?:\s+is)?\s*[:=\-]?\s*[*`'\"(\[]*\s*([A-Za-z][A-Za-z0-9_\- ]{0,40})",
    re.IGNORECASE,
)
_LETTERED = re.compile(r"(?:^|[\s(\[*])\(?([A-Z])\)(?=\s|$|[*:.,-])")


def option_letters(options: Sequence[str]) -> dict[str, str]:
    """``{"A": first option, "B": second, ...}``: how the choose prompt labels the options."""
    return {chr(ord("A") + i): key for i, key in enumerate(options[:26])}


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.strip(_MARKUP).lower()).strip()


def match_option(text: str, options: Sequence[str]) -> tuple[str, bool] | None:
    """The option a free-form answer names, and whether the answer was just that option.

    Reads answers the way models give them: ``Ship.``, ``ship``, ``**pivot**``, ``B``, ``B)``,
    ``Option C``, ``I choose B) PIVOT``, ``Decision: continue``; case, markup, punctuation and
    ``_``/``-``/space are ignored, and a letter stands for the option listed at that place.
    When the answer names several options and no decision phrase picks one, it names none.
    """
    keys = {_norm(k): k for k in options}
    letters = option_letters(options)
    whole = _norm(text)
    if whole in keys:
        return keys[whole], True
    if len(whole) == 1 and whole.upper() in letters:
        return letters[whole.upper()], True
    if whole.startswith("option ") and whole[7:].upper() in letters:
        return letters[whole[7:].upper()], True

    def spoken(fragment: str) -> set[str]:
        plain = _norm(fragment.replace("_", " "))
        return {
            key
            for norm, key in keys.items()
            if re.search(rf"(?<![a-z0-9]){re.escape(norm)}(?![a-z0-9])", plain)
        }

    def named(fragment: str, lower_letter: bool = False) -> str | None:
        words = _norm(fragment).split()
        for size in range(len(words), 0, -1):  # the longest key the fragment starts with
            head = " ".join(words[:size])
            if head in keys:
                return keys[head]
        raw = fragment.strip(_MARKUP)
        if not raw:  # nothing but markup: "{", "**"
            return None
        letter = raw[:1]
        alone = len(raw) == 1 or not raw[1].isalnum()
        # "a" is a word; "A", "A)" or "option a" a letter
        if letter.upper() in letters and alone and (letter.isupper() or lower_letter):
            return letters[letter.upper()]
        return None

    for found in _DECIDED.finditer(text):  # "I choose B) PIVOT", "Decision: ship"
        marker = found.group(0)[:6].lower() == "option"
        hit = named(found.group(1), lower_letter=marker)
        if hit is not None:
            return hit, False
    lettered = {letters[m.group(1)] for m in _LETTERED.finditer(text) if m.group(1) in letters}
    if len(lettered) == 1:  # "B) pivot: I am stuck"
        return lettered.pop(), False
    first_line = next((line for line in text.splitlines() if line.strip()), "")
    first = first_line.split(".")[0]
    hit = named(first) if first.strip() else None
    if hit is not None and len(spoken(first)) <= 1:  # "Ship. It works well enough."
        return hit, False
    anywhere = spoken(text)
    if len(anywhere) == 1:  # one option named anywhere
        return anywhere.pop(), False
    return None


def parse_choice(response: LLMResponse, options: Sequence[str]) -> ParsedStep | str:
    """One of ``options`` from a reply, with the model's stated reason, or why there is none.

    A ``choose`` call, JSON with ``choice`` (or ``option``, ``next``, ``transition``,
    ``decision``), or a plain answer (``match_option``: ``Ship.``, ``B``, ``I choose B) PIVOT``).
    The reason is the call's ``reason``/``reasoning``, or the answer's text when it says more
    than the option.
    """
    shown = ", ".join(options)
    reasons = []

    def pick(value: Any) -> str | None:
        if isinstance(value, str):
            if value.strip() in options:
                return value.strip()
            hit = match_option(value, options)
            if hit is not None:
                return hit[0]
        reasons.append(f"unknown choice {truncate(str(value), 80)!r} (options: {shown})")
        return None

    for call in response.tool_calls:
        if call.parse_error is not None:
            reasons.append(f"bad arguments: {call.name}: {call.parse_error}")
            continue
        if "choice" in call.arguments or "decision" in call.arguments:
            choice = pick(call.arguments.get("choice", call.arguments.get("decision")))
            if choice is not None:
                return ParsedStep(choice, _reasoning(call.arguments), "tool_call")
        elif call.name in options:  # the model called the option itself
            return ParsedStep(call.name, _reasoning(call.arguments), "tool_call")
    content = response.content if isinstance(response.content, str) else ""
    if content.strip():
        values, _ = json_values(content)
        for value in values:
            if isinstance(value, Mapping):
                for key in ("choice", "option", "next", "transition", "decision"):
                    if key in value:
                        choice = pick(value[key])
                        if choice is not None:
                            return ParsedStep(choice, _reasoning(value), "json_text")
                        break
        if not values:
            hit = match_option(content, options)
            if hit is not None:
                reason = None if hit[1] else truncate(content.strip(), MAX_REASONING_CHARS)
                return ParsedStep(hit[0], reason, "text")
    if reasons:
        return truncate(reasons[0], MAX_REASON_CHARS)
    return f"no choice found (options: {shown})"
