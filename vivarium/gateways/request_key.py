"""The request key: the hash that names an LLM request in cassettes and traces, versioned.

A cassette row is found by its request's key, a trace's ``llm_calls.request_hash`` is that key,
and a resume matches the calls it re-executes to the recorded ones by it. So the key must not
change when the code around it does: a key that hashed "every field of ``LLMRequest``" changed
for every request the day a field was added, and every recorded cassette stopped replaying.

The key of version ``v`` is the SHA-256 (hex) of the canonical JSON (``seeding.canonical_json``:
sorted keys, no spaces) of one object:

- every field ``KEY_FIELDS[v]`` names, always, at its value (``null`` included): the fields
  the key had when that version was declared;
- every other field of the request only when it is not at its default. A field added to
  ``LLMRequest`` with a default (``top_p: float | None = None``) leaves every request that does
  not set it with the key it had, so cassettes recorded before still replay; a request that
  sets it is another request, with another key.

Version 1 is the key every cassette and trace was written with before keys had versions (the
hash of every field of the request as it then was: model, messages, tools, tool_choice,
temperature, max_tokens, seed). A new version is declared only to change the form itself (a
field dropped from the key, a normalization): add its fields to ``KEY_FIELDS`` (or its form
here), raise ``KEY_VERSION``, and raise the cassette schema with it (``gateways.cache``), so
that an older Vivarium refuses the new cassettes in one line instead of missing every row. A
cassette records the key version it was written with (``key_version`` in its meta; a cassette
from before says nothing: version 1) and is always read and written with that version's key;
a resume matches recorded calls by the key of any known version (``request_keys``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined, to_jsonable_python

from vivarium.seeding import canonical_json, digest

KEY_VERSION = 1
"""The key version this Vivarium writes (new cassettes record it)."""

KEY_FIELDS: dict[int, tuple[str, ...]] = {
    1: ("model", "messages", "tools", "tool_choice", "temperature", "max_tokens", "seed"),
}
"""The fields each key version always hashes (at their value, ``null`` included)."""


def written_version() -> int:
    """The key version this Vivarium writes (``KEY_VERSION``, read when asked)."""
    return KEY_VERSION


def key_payload(request: BaseModel, version: int | None = None) -> dict[str, Any]:
    """The object whose canonical JSON key version ``version`` hashes (see the module).

    Args:
        request: An ``LLMRequest`` (a pydantic model).
        version: A key version of ``KEY_FIELDS`` (None: the one this Vivarium writes).

    Returns:
        The version's fields, then any other field that is not at its default, as JSON values.

    Raises:
        KeyError: ``version`` is not a known key version.
    """
    declared = KEY_FIELDS[written_version() if version is None else version]
    dumped = request.model_dump(mode="json")
    payload = {name: dumped[name] for name in declared}
    for name, info in type(request).model_fields.items():
        if name in declared or name not in dumped:
            continue
        default = info.get_default(call_default_factory=True)
        if default is PydanticUndefined or dumped[name] != to_jsonable_python(default):
            payload[name] = dumped[name]
    return payload


def request_key(request: BaseModel, version: int | None = None) -> str:
    """The key of ``request`` in key version ``version`` (None: the one written): its SHA-256.

    Raises:
        KeyError: ``version`` is not a known key version.
    """
    return digest(canonical_json(key_payload(request, version)))


def request_keys(request: BaseModel) -> Iterator[str]:
    """The key of ``request`` in every known version, the newest first (no repeats).

    A resume matches a re-executed call to the recorded one by whichever version the trace
    was written with.
    """
    seen: set[str] = set()
    for version in sorted(KEY_FIELDS, reverse=True):
        key = request_key(request, version)
        if key not in seen:
            seen.add(key)
            yield key
