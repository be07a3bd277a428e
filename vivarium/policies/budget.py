"""A context budget: a request longer than the model's window loses its oldest history first.

Tokens are counted the way the aam engine's gateway estimates them (4 characters a token, over
the messages' text and the tools' names, descriptions and parameter schemas): no tokenizer, so
the count is the same on every machine and a trimmed request is the same on every rerun. Above
the limit (``DEFAULT_CONTEXT_TOKENS``, the aam engine's 8k threshold) the user message loses
item lines, oldest first:

1. lines stamped ``[t=N]`` (events, messages, actions, memories), the smallest ``N`` first;
2. then the other items of history sections (recent failures, then the artifact listing), from
   the top of each section, which is where the oldest entries are.

Nothing else is touched: the system prompt, the step's instructions, section headers and the
action list stay whole, so a request still over the limit is sent as it is and recorded as such.
Each section that lost lines says so in the prompt, and the returned ``Trim`` record (what was
cut, from where, how many tokens) goes into the decision's metadata, so a trace shows it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_CONTEXT_TOKENS = 8000  # the aam engine's context threshold
CHARS_PER_TOKEN = 4
# History sections whose untimed items may go (in this order), normalised as ``section_title``.
UNTIMED_SECTIONS = ("recent failures", "your recent failures", "available artifacts")
# Sections whose lines are history: a timed line elsewhere (a user's own prompt) is left alone.
HISTORY_SECTIONS = frozenset(
    {
        "recent events",
        "recent messages",
        "recent messages (oldest first)",
        "relevant memories",
        "your memories",
        "recent actions",
        "your recent actions",
        *UNTIMED_SECTIONS,
    }
)
# Headers the policies write: inside a history entry these end it; any other header-like line
# there ("Summary:") is the entry's own text.
KNOWN_TITLES = HISTORY_SECTIONS | {"available tools", "available actions"}
_TIMED = re.compile(r"^\s*(?:- )?\[t=(-?\d+)\]")
_HEADER = re.compile(r"^(?:#+\s*(?P<hashed>.+?)|(?P<colon>[A-Z][^:\n]{0,60}):)\s*$")


def estimate_tokens(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    tool_chars: int | None = None,
) -> int:
    """Approximate tokens of a request: characters of text and tool specs, 4 to a token.

    ``tool_chars``: the tools' characters (``tool_characters(tools)``) when the caller has them
    already, so that they are not counted again for every request.
    """
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    chars += tool_characters(tools) if tool_chars is None else tool_chars
    return max(1, chars // CHARS_PER_TOKEN)


def tool_characters(tools: Sequence[Mapping[str, Any]] | None) -> int:
    """The characters tool specs count for: names, descriptions and parameter schemas."""
    chars = 0
    for tool in tools or ():
        spec = tool.get("function", tool)
        chars += len(str(spec.get("name", ""))) + len(str(spec.get("description", "")))
        chars += len(json.dumps(spec.get("parameters", {}), sort_keys=True))
    return chars


def section_title(line: str) -> str | None:
    """The normalised title of a section header line (``## Recent events``, ``Recent events:``)."""
    match = _HEADER.match(line.strip())
    if match is None:
        return None
    title = match.group("hashed") or match.group("colon") or ""
    return " ".join(title.strip().rstrip(":").lower().split())


@dataclass(slots=True)
class Trim:
    """What a context budget did to one request (``as_metadata`` for the trace).

    Attributes:
        limit: The budget, in estimated tokens.
        tokens_before: The request's estimate before trimming.
        tokens_after: Its estimate after.
        removed: Entries removed (a history line with the lines continuing it), by section.
        oldest_kept: The smallest ``[t=N]`` still shown, when timed lines were cut.
        over_budget: Still above the limit once nothing trimmable was left.
    """

    limit: int
    tokens_before: int
    tokens_after: int = 0
    removed: dict[str, int] = field(default_factory=dict)
    oldest_kept: int | None = None
    over_budget: bool = False

    @property
    def lines_removed(self) -> int:
        """How many history entries went (each a line and its continuation lines)."""
        return sum(self.removed.values())

    def as_metadata(self) -> dict[str, Any]:
        """A JSON-like record: limit, tokens before/after and saved, lines removed per section."""
        return {
            "limit": self.limit,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "tokens_removed": self.tokens_before - self.tokens_after,
            "lines_removed": self.lines_removed,
            "removed": dict(sorted(self.removed.items())),
            "oldest_kept": self.oldest_kept,
            "over_budget": self.over_budget,
        }


def _candidates(lines: Sequence[str]) -> list[tuple[tuple[int, int, int], list[int], str]]:
    """Trimmable items as (order key, their line indexes, section), the first to go first.

    An item is a ``[t=N]`` or ``- `` line of a history section with the lines that continue it
    (a message or memory of several lines), so it goes whole, and a continuation line that looks
    like a header (``Summary:``) neither ends the section nor escapes the trim.
    """
    out: list[tuple[tuple[int, int, int], list[int], str]] = []
    title: str | None = None
    item: list[int] | None = None  # the lines of the item being read, if any
    for i, line in enumerate(lines):
        if not line.strip():  # a blank line ends a section
            title, item = None, None
            continue
        stripped = line.lstrip()
        timed_line = _TIMED.match(line) is not None
        starts_item = timed_line or (stripped.startswith("- ") and title in UNTIMED_SECTIONS)
        header = section_title(line) if not stripped.startswith(("- ", "[t=")) else None
        ends_item = starts_item or stripped.startswith("#") or header in KNOWN_TITLES
        if item is not None and not ends_item:
            item.append(i)  # a continuation of the item above ("Summary:", "- a point")
            continue
        if header is not None:
            title, item = header, None
            continue
        if title not in HISTORY_SECTIONS:
            continue
        timed = _TIMED.match(line)
        if timed is not None:
            item = [i]
            out.append(((0, int(timed.group(1)), i), item, title))
        elif stripped.startswith("- ") and title in UNTIMED_SECTIONS:
            item = [i]
            out.append(((1, UNTIMED_SECTIONS.index(title), i), item, title))
        else:
            item = None
    out.sort(key=lambda c: c[0])
    return out


def trim_text(text: str, excess_chars: int) -> tuple[str, dict[str, int], int | None, bool]:
    """Remove at least ``excess_chars`` characters of history items from ``text``, oldest first.

    Returns:
        The new text, items removed per section, the oldest ``[t=N]`` kept when timed items
        were removed, and whether the excess could all be removed.
    """
    lines = text.split("\n")
    removed: dict[str, int] = {}
    gone: set[int] = set()
    first_gone: dict[str, int] = {}
    saved = 0
    for _, indexes, title in _candidates(lines):
        if saved >= excess_chars:
            break
        gone.update(indexes)
        saved += sum(len(lines[i]) + 1 for i in indexes)
        removed[title] = removed.get(title, 0) + 1
        first_gone[title] = min(first_gone.get(title, indexes[0]), indexes[0])
    if not gone:
        return text, {}, None, excess_chars <= 0
    out: list[str] = []
    notes = {index: title for title, index in first_gone.items()}
    for i, line in enumerate(lines):
        if i in notes:
            count = removed[notes[i]]
            out.append(f"- ({count} older {'entry' if count == 1 else 'entries'} left out to fit)")
        if i not in gone:
            out.append(line)
    oldest = None
    if any(_TIMED.match(lines[i]) for i in gone):
        kept = [m.group(1) for i, x in enumerate(lines) if i not in gone and (m := _TIMED.match(x))]
        oldest = min((int(t) for t in kept), default=None)
    return "\n".join(out), removed, oldest, saved >= excess_chars


def fit_messages(
    messages: list[dict[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    limit: int | None = DEFAULT_CONTEXT_TOKENS,
    *,
    tool_chars: int | None = None,
) -> tuple[list[dict[str, Any]], Trim | None]:
    """The messages within ``limit`` estimated tokens, trimming the last user message.

    Args:
        messages: Chat messages (not changed: trimmed ones are copies).
        tools: The tool specs sent with them (they count, as in the aam engine's estimate).
        limit: The budget in tokens; None for no budget.
        tool_chars: ``tool_characters(tools)``, when the caller keeps it (None: counted here).

    Returns:
        The messages to send and, when they were over the limit, the ``Trim`` record.
    """
    if limit is None:
        return messages, None
    if tool_chars is None:
        tool_chars = tool_characters(tools)
    before = estimate_tokens(messages, tool_chars=tool_chars)
    if before <= limit:
        return messages, None
    record = Trim(limit=limit, tokens_before=before)
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    out = list(messages)
    if users:
        i = users[-1]
        content = str(out[i].get("content") or "")
        # chars // 4 <= limit once the request has at most 4 * limit + 3 characters; the notes
        # the trim adds count too, so a shortfall is asked for again (a few rounds at most).
        excess = (before - limit) * CHARS_PER_TOKEN
        for _ in range(8):
            text, removed, oldest, done = trim_text(content, excess)
            trial = [*out[:i], {**out[i], "content": text}, *out[i + 1 :]]
            after = estimate_tokens(trial, tool_chars=tool_chars)
            if after <= limit or not done:
                break
            excess += (after - limit) * CHARS_PER_TOKEN + CHARS_PER_TOKEN
        out = trial
        record.removed, record.oldest_kept = removed, oldest
    record.tokens_after = estimate_tokens(out, tool_chars=tool_chars)
    record.over_budget = record.tokens_after > limit
    return out, record
