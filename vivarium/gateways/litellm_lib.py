"""litellm, the library: imported once, quietly, never by ``import vivarium``; its price map.

Importing litellm takes seconds, during which every call in flight on the event loop would stall
(and be recorded as slow, or time out without reaching the server). So it is imported only by
``LiteLLMGateway.prepare`` (when a run's gateway is built) or off the loop, and only for models
that go through it or that its bundled price map can price: the map is read without importing
litellm (``in_price_map``). ``Pricing`` prices replies with it, and remembers what it cannot
price: direct calls are priced with litellm's map too, when it is loaded.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from vivarium.errors import MissingDependency
from vivarium.gateways.base import LLMCallError
from vivarium.optional import require

_litellm: Any = None
_import_lock = threading.Lock()


def import_litellm() -> Any:
    """Import litellm once, quietly: local cost map (no network), no telemetry, no banners."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _import_lock:
        if _litellm is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            try:
                litellm = require("litellm")
            except MissingDependency as exc:  # the run's LLM cannot be reached: say how to fix
                raise LLMCallError(str(exc), kind="config") from None
            litellm.telemetry = False
            litellm.suppress_debug_info = True
            litellm.set_verbose = False
            for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
                logging.getLogger(name).setLevel(logging.ERROR)
            _litellm = litellm
    return _litellm


def loaded_litellm() -> Any:
    """The litellm module once imported (``import_litellm``), else None; never imports it."""
    return _litellm


@functools.cache
def price_map_names() -> frozenset[str] | None:
    """Model names in litellm's bundled price map, read without importing litellm.

    Reading the map takes ~0.1 s against 3-4 s for the import. None when litellm or its map
    file is not there.
    """
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "model_prices_and_context_window_backup.json"
        try:
            with open(path, encoding="utf-8") as fh:
                return frozenset(json.load(fh))
        except (OSError, ValueError):
            continue
    return None


def in_price_map(model: str) -> bool:
    """Whether litellm could price ``model`` (``openai/gpt-4o-mini`` is ``gpt-4o-mini``).

    When the map cannot be read, only litellm can tell: True if it is installed.
    """
    names = price_map_names()
    if names is None:
        return importlib.util.find_spec("litellm") is not None
    return model in names or model.partition("/")[2] in names


class Pricing:
    """Cost from litellm's price map; None (unknown, not zero) for unpriced models.

    A failed look-up is remembered: litellm's price search costs about a millisecond, which
    would otherwise be paid again on every call to a local model. litellm is never imported
    here (this runs on the event loop): ``prepare`` imported it if the model can be priced.

    Attributes:
        unpriced: The model names known to have no price.
    """

    def __init__(self) -> None:
        """Nothing known unpriced yet."""
        self.unpriced: set[str] = set()

    def price(self, reply_model: str, model: str, prompt: int, completion: int) -> float | None:
        """The cost of a reply of ``reply_model`` to a request for ``model`` (None: unknown)."""
        names = [n for n in dict.fromkeys((model, reply_model)) if n not in self.unpriced]
        if not names:
            return None
        litellm = _litellm  # direct calls price with litellm's map too
        if litellm is None:  # the model was prepared as unpriced: cost unknown
            self.unpriced.update(names)
            return None
        for name in names:
            try:
                prompt_cost, completion_cost = litellm.cost_per_token(
                    model=name, prompt_tokens=prompt, completion_tokens=completion
                )
                return float(prompt_cost) + float(completion_cost)
            except Exception:  # unknown model or provider
                self.unpriced.add(name)
        return None
