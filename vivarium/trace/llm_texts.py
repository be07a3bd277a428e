"""The prompts and replies of LLM calls in a trace, each distinct text stored once.

Every call of a 1,000-agent run sends the same system prompt and tool specs; stored whole per
call they would outweigh everything else in the file. So a request is split into its parts
(each message, the tools list, the other parameters) and every text is kept once in
``llm_texts``, as canonical JSON; a call row refers to its texts by id (``llm_calls.messages``,
``tools``, ``reply``) and keeps the small rest (``params``) inline.

A prompt is mostly lines other prompts have too: the step, the recent messages every agent of
the step sees, the instructions; only a line or two (the agent's name, its own memory) is its
own. So from schema 4 a message whose content has several lines is stored as its lines: its
entry in ``llm_calls.messages`` is ``[fields, line, line, ...]``, the id of the message without
its content (``{"role":"user"}``, shared by every call) and then the id of each line of the
content (a JSON string), which joined by newlines give the content back exactly. A message of
one line (or whose content is not a string) is one id, as in schema 3. A call then adds to the
file only the lines no call had before, and its reply.

``TextStore`` hands out the ids while a run writes (it belongs to the trace writer, and knows
the texts a resumed trace has already); ``read_exchanges`` puts calls back together.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from vivarium.trace.onefile import read_connection
from vivarium.trace.schema import LLM_TEXTS, SCHEMA_VERSION

# The request fields stored as texts of their own; every other field goes to ``params``.
_SPLIT = ("messages", "tools")
# Canonical JSON (sorted keys), the form the cassette keeps the same request and reply in: a
# run replayed from a cassette stores the very texts the recorded run stored. (The order a
# tool's parameters were sent in is not kept: JSON objects have none.)
_canonical = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
).encode
LINES_SINCE = 4
"""The first schema version that stores a message of several lines as its lines."""


class TextStore:
    """The ids of the texts a trace holds, and the new ones waiting for the next commit.

    Args:
        known: ``(digest, id)`` of texts the file has already (a resumed trace).
        version: The schema version of the file written: a resumed file of schema 3 goes on in
            its own encoding (whole messages, a digest beside each text).
    """

    def __init__(
        self, known: Iterable[tuple[str, int]] = (), version: int = SCHEMA_VERSION
    ) -> None:
        """Start from the texts the file holds already (none for a new trace)."""
        self._ids: dict[str, int] = dict(known)
        self._next = max(self._ids.values(), default=0) + 1
        self.lines = version >= LINES_SINCE
        marks = ", ".join("?" * len(LLM_TEXTS.columns_of(version)))  # schema 3: a digest too
        self.insert_sql = f"INSERT INTO llm_texts VALUES ({marks})"
        # ``llm_calls.messages`` as written: compact from schema 4 ("[1,[2,3]]"), as before it.
        self.separators = (",", ":") if self.lines else (", ", ": ")
        self.pending: list[tuple[Any, ...]] = []  # rows of llm_texts not yet written

    def ref(self, body: str) -> int:
        """The id of ``body``, a new one (queued in ``pending``) if the trace lacks it."""
        digest = hashlib.sha256(body.encode()).hexdigest()
        found = self._ids.get(digest)
        if found is not None:
            return found
        self._ids[digest] = found = self._next
        self._next += 1
        self.pending.append((found, body) if self.lines else (found, digest, body))
        return found

    def message(self, message: Mapping[str, Any]) -> int | list[int]:
        """A message's entry in ``llm_calls.messages``: its id, or its fields' and lines' ids."""
        content = message.get("content")
        if not self.lines or not isinstance(content, str) or "\n" not in content:
            return self.ref(_canonical(message))
        fields = {k: v for k, v in message.items() if k != "content"}
        return [self.ref(_canonical(fields))] + [
            self.ref(_canonical(line)) for line in content.split("\n")
        ]

    def take(self) -> list[tuple[Any, ...]]:
        """The new texts since the last call (written with the step that first used them)."""
        pending, self.pending = self.pending, []
        return pending


def encode_exchange(
    request: Mapping[str, Any] | None, reply: Mapping[str, Any] | None, store: TextStore
) -> tuple[str | None, int | None, str | None, int | None]:
    """A call's request and reply as its ``messages``, ``tools``, ``params`` and ``reply`` cells.

    Args:
        request: The request as sent (None: not recorded, as in traces of older gateways).
        reply: The reply as received, or the error of a failed attempt.
        store: Gives each text its id.

    Returns:
        The four cells (None where there is nothing).
    """
    messages = tools = params = reply_id = None
    if request is not None:
        sent = request.get("messages")
        if sent is not None:
            entries = [store.message(m) for m in sent]
            messages = json.dumps(entries, separators=store.separators)
        if request.get("tools") is not None:
            tools = store.ref(_canonical(request["tools"]))
        rest = {k: v for k, v in request.items() if k not in _SPLIT}
        params = _canonical(rest) if rest else None
    if reply is not None:
        reply_id = store.ref(_canonical(reply))
    return messages, tools, params, reply_id


def known_texts(con: sqlite3.Connection) -> list[tuple[str, int]]:
    """``(digest, id)`` of every text a trace holds (for a resumed run's ``TextStore``).

    Schema 3 kept each text's digest beside it; from schema 4 the texts are hashed again here.
    """
    try:
        columns = {row[1] for row in con.execute("PRAGMA table_info(llm_texts)")}
        if "digest" in columns:
            return [(d, i) for i, d in con.execute("SELECT id, digest FROM llm_texts")]
        rows = con.execute("SELECT id, body FROM llm_texts")
        return [(hashlib.sha256(body.encode()).hexdigest(), i) for i, body in rows]
    except sqlite3.OperationalError:  # a trace of schema 2 or before: no texts
        return []


def read_exchanges(
    path: str | Path, call_ids: Iterable[int] | None = None
) -> dict[int, dict[str, Any]]:
    """The request and reply of LLM calls, put back together from a trace.

    Args:
        path: The trace file.
        call_ids: The ``llm_calls`` ids to read (None: every call).

    Returns:
        Call id -> ``{"request": dict | None, "reply": dict | None}``: the request with its
        ``messages`` (and ``tools``, when sent) in place, as the server received it; None for
        a call recorded without its text (a trace of schema 2 or before).
    """
    con = read_connection(Path(path))
    try:
        columns = {row[1] for row in con.execute("PRAGMA table_info(llm_calls)")}
        if "reply" not in columns:
            ids = list(call_ids) if call_ids is not None else None
            rows = con.execute("SELECT id FROM llm_calls").fetchall()
            return {i: {"request": None, "reply": None} for (i,) in rows if ids is None or i in ids}
        query = "SELECT id, messages, tools, params, reply FROM llm_calls"
        if call_ids is not None:
            wanted = sorted({int(i) for i in call_ids})
            query += f" WHERE id IN ({','.join(map(str, wanted))})" if wanted else " WHERE 0"
        rows = con.execute(query + " ORDER BY id").fetchall()
        needed: set[int] = set()
        for _, messages, tools, _, reply in rows:
            for entry in json.loads(messages) if messages else ():
                needed.update(entry if isinstance(entry, list) else (entry,))
            needed.update(i for i in (tools, reply) if i is not None)
        texts = _texts(con, needed)
    finally:
        con.close()
    out: dict[int, dict[str, Any]] = {}
    for call_id, messages, tools, params, reply in rows:
        request: dict[str, Any] | None = None
        if messages is not None or tools is not None or params is not None:
            request = json.loads(params) if params else {}
            if messages is not None:
                request["messages"] = [_message(e, texts) for e in json.loads(messages)]
            if tools is not None:
                request["tools"] = texts[tools]
        out[call_id] = {"request": request, "reply": None if reply is None else texts[reply]}
    return out


def _message(entry: int | list[int], texts: Mapping[int, Any]) -> Any:
    """A message from its entry in ``llm_calls.messages`` (an id, or fields and lines)."""
    if not isinstance(entry, list):
        return texts[entry]
    fields, *lines = entry
    message = {**texts[fields], "content": "\n".join(texts[i] for i in lines)}
    return dict(sorted(message.items()))  # as a message stored whole reads back: sorted keys


def _texts(con: sqlite3.Connection, ids: set[int]) -> dict[int, Any]:
    """The decoded texts of ``ids`` (read in chunks: SQLite limits a query's variables)."""
    found: dict[int, Any] = {}
    wanted = sorted(ids)
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for i, body in con.execute(f"SELECT id, body FROM llm_texts WHERE id IN ({marks})", chunk):
            found[i] = json.loads(body)
    return found
