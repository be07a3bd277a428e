"""Tool schemas an LLM server turns into a grammar: no empty ``items`` schema anywhere."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from vivarium.worlds.channel import CHANNEL_ACTIONS
from vivarium.worlds.ecology import ECOLOGY_ACTIONS
from vivarium.worlds.registry import ActionSpec


def _empty_items(schema: Any, names: bool = False) -> list[str]:
    """Paths of every ``"items": {}`` in ``schema`` (a field called ``items`` is not one)."""
    found = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if not names and key == "items" and value == {}:
                found.append(key)
            found += _empty_items(value, names=not names and key in ("properties", "$defs"))
    elif isinstance(schema, list):
        for value in schema:
            found += _empty_items(value)
    return found


def test_no_world_tool_has_an_empty_items_schema() -> None:
    # llama-cpp-python's grammar converter fails on `"items": {}` and then constrains nothing.
    for registry in (ECOLOGY_ACTIONS, CHANNEL_ACTIONS):
        for spec in registry.tool_specs():
            assert _empty_items(spec) == [], spec["function"]["name"]


def test_write_artifact_content_still_takes_a_list_of_anything() -> None:
    content = ECOLOGY_ACTIONS.get("write_artifact").tool_spec()["function"]["parameters"]
    variants = content["properties"]["content"]["anyOf"]
    assert {"type": "array"} in variants
    assert {"type": "string"} in variants


class _Listed(BaseModel):
    items: list[Any]
    nested: dict[str, list[Any]]


def test_a_field_called_items_is_kept_and_nested_lists_lose_only_the_empty_schema() -> None:
    spec = ActionSpec(
        name="listed", handler=lambda *a: None, description="Lists.", arguments=_Listed
    )
    parameters = spec.tool_spec()["function"]["parameters"]
    assert parameters["properties"]["items"] == {"type": "array", "title": "Items"}
    assert parameters["properties"]["nested"]["additionalProperties"] == {"type": "array"}
    assert parameters["required"] == ["items", "nested"]
    assert "{}" not in json.dumps(parameters)
