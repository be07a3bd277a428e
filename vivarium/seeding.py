"""Every derived seed and id lives here, so that determinism has one home.

Nothing here may depend on ``hash()``, the wall clock or process state: the same inputs give the
same outputs on every machine and in every process.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

UINT64_MASK = (1 << 64) - 1


def stable_agent_seed(master_seed: int, agent_id: str) -> int:
    """Seed for one agent: first 8 bytes of SHA-256 of ``f"{master_seed}:{agent_id}"``, big-endian."""
    digest = hashlib.sha256(f"{master_seed}:{agent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=False)


def derive_seed(master_seed: int, *parts: object) -> int:
    """A 64-bit seed for any named purpose (a shuffle, a sweep run), derived like agent seeds."""
    label = ":".join(str(p) for p in (master_seed, *parts))
    return int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "big", signed=False)


def agent_ids(count: int, width: int | None = None) -> list[str]:
    """Agent ids ``agent_000, agent_001, ...``: zero-padded to at least 3 digits, so they sort."""
    width = max(3, len(str(max(count - 1, 0)))) if width is None else width
    return [f"agent_{i:0{width}d}" for i in range(count)]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the one encoding that is hashed and recorded."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(text: str | bytes) -> str:
    """Hex SHA-256 of text or bytes."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def derive_run_id(name: str, config_json: str) -> str:
    """A run id that names the experiment and is fixed by its config: ``name-<12 hex>``."""
    return f"{name}-{digest(config_json)[:12]}"
