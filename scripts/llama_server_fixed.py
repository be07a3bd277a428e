"""llama-cpp-python's OpenAI-compatible server, with its JSON-schema grammar fixed for ``items: {}``.

The recording server for ``scripts/record_cassettes.py``. A forced tool (``tool_choice`` naming a
function) makes llama-cpp-python constrain decoding with a grammar built from the tool's JSON
schema. Its converter (``llama_cpp.llama_grammar.SchemaConverter``, 0.3.36) fails on an array
whose ``items`` is the empty schema ``{}`` ("any item": the ecology world's ``write_artifact``
``content`` allows a list), and the server then falls back, silently, to a grammar of *any* JSON
object: the model no longer sees the action names or argument shapes and replies with made-up
keys. ``items: {}`` means the same as no ``items`` at all, so this wrapper drops it before the
conversion; every other schema converts exactly as before. The request the client sends (and the
cassette stores) is unchanged.

    python scripts/llama_server_fixed.py --model M.gguf --n_threads 1 ...   # llama_cpp.server's flags
"""

from __future__ import annotations

import json
import sys
from typing import Any

from llama_cpp import llama_grammar

_convert = llama_grammar.json_schema_to_gbnf


def _drop_empty_items(node: Any) -> Any:
    """``node`` with every ``"items": {}`` removed (it constrains nothing)."""
    if isinstance(node, dict):
        return {k: _drop_empty_items(v) for k, v in node.items() if not (k == "items" and v == {})}
    if isinstance(node, list):
        return [_drop_empty_items(v) for v in node]
    return node


def json_schema_to_gbnf(schema: str, prop_order: list[str] | None = None) -> str:
    """llama-cpp-python's converter, given the schema without empty ``items``."""
    return _convert(json.dumps(_drop_empty_items(json.loads(schema))), prop_order)


def main() -> None:
    """Patch the converter, then run ``python -m llama_cpp.server`` with this command line."""
    llama_grammar.json_schema_to_gbnf = json_schema_to_gbnf
    from llama_cpp.server.__main__ import main as serve

    sys.argv[0] = "llama_cpp.server"
    serve()


if __name__ == "__main__":
    main()
