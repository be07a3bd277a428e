"""Every derived seed and id lives here, so that determinism has one home.

Nothing here may depend on ``hash()``, the wall clock or process state: the same inputs give the
same outputs on every machine and in every process.

The seeds of one agent of a run:

- ``stable_agent_seed(seed, agent_id)``: the agent's own generators (random and Boltzmann agents).
- ``llm_agent_seed(seed, agent_id)``: the provider seed an LLM agent built from a config runs on
  (cognitive agents send it with every request; it is what the trace records for LLM agents).
- ``workflow_request_seed(llm_seed, agent_id)``: the provider seed a workflow agent sends,
  derived from its seed once more (kept so that recorded traces and cassettes replay).
- ``shared_policy_seed(master_seed, agent_id)``: the provider seed of one agent of a cognitive
  policy object shared by several agents and given a master seed.

``AgentSeeds`` bundles them for one planned agent; the build plan carries one per agent, and
policies receive their seeds from it instead of deriving them.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

UINT64_MASK = (1 << 64) - 1
# Providers take 32-bit (llama.cpp) or signed 64-bit seeds: the seeds sent to them keep 31 bits.
PROVIDER_SEED_MASK = 0x7FFFFFFF


def stable_agent_seed(master_seed: int, agent_id: str) -> int:
    """The seed of one agent's own generators.

    Args:
        master_seed: The run's seed.
        agent_id: The agent's id.

    Returns:
        The first 8 bytes of SHA-256 of ``f"{master_seed}:{agent_id}"``, big-endian (64 bits).
    """
    digest = hashlib.sha256(f"{master_seed}:{agent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=False)


def derive_seed(master_seed: int, *parts: object) -> int:
    """A 64-bit seed for any named purpose (a shuffle, a sweep run), derived like agent seeds.

    Args:
        master_seed: The seed it derives from.
        *parts: What the seed is for; joined to the master seed with ``:`` and hashed.

    Returns:
        The first 8 bytes of SHA-256 of the joined label, big-endian.
    """
    label = ":".join(str(p) for p in (master_seed, *parts))
    return int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "big", signed=False)


def provider_seed(seed: int) -> int:
    """``seed`` cut to the 31 bits every LLM provider accepts."""
    return seed & PROVIDER_SEED_MASK


def llm_agent_seed(master_seed: int, agent_id: str) -> int:
    """The provider seed an LLM agent of a run runs on (recorded in the trace's agents table).

    Args:
        master_seed: The run's seed.
        agent_id: The agent's id.

    Returns:
        ``derive_seed(master_seed, "llm", agent_id)`` cut to 31 bits.
    """
    return provider_seed(derive_seed(master_seed, "llm", agent_id))


def workflow_request_seed(seed: int, agent_id: str) -> int:
    """The provider seed a workflow agent sends with its requests.

    Args:
        seed: The workflow agent's seed (``llm_agent_seed`` for an agent built from a config).
        agent_id: The agent's id.

    Returns:
        ``derive_seed(seed, "workflow", agent_id)`` cut to 31 bits.
    """
    return provider_seed(derive_seed(seed, "workflow", agent_id))


def shared_policy_seed(master_seed: int, agent_id: str) -> int:
    """The provider seed of one agent of an LLM policy shared by several agents.

    Args:
        master_seed: The seed the shared policy was given.
        agent_id: The agent whose request is made.

    Returns:
        ``derive_seed(master_seed, agent_id)`` cut to 31 bits.
    """
    return provider_seed(derive_seed(master_seed, agent_id))


class AgentSeeds:
    """The seeds one agent of a run runs on, each derived on first use, then kept.

    Deriving on first use keeps a run of a million random agents from hashing LLM seeds it
    never needs. (A plain slotted class: a frozen dataclass or ``functools.cached_property``
    would cost more than the hashing, once per agent.)

    Attributes:
        master_seed: The run's seed.
        agent_id: The agent's id.
    """

    __slots__ = ("_agent", "_llm", "_workflow", "agent_id", "master_seed")

    def __init__(self, master_seed: int, agent_id: str) -> None:
        """Seeds of ``agent_id`` in a run of seed ``master_seed`` (none derived yet)."""
        self.master_seed = master_seed
        self.agent_id = agent_id
        self._agent: int | None = None
        self._llm: int | None = None
        self._workflow: int | None = None

    def __repr__(self) -> str:
        """What the seeds derive from (the seeds themselves are derived on use)."""
        return f"AgentSeeds(master_seed={self.master_seed!r}, agent_id={self.agent_id!r})"

    @property
    def agent(self) -> int:
        """The seed of the agent's own generators (``stable_agent_seed``)."""
        if self._agent is None:
            self._agent = stable_agent_seed(self.master_seed, self.agent_id)
        return self._agent

    @property
    def llm(self) -> int:
        """The provider seed of an LLM agent (``llm_agent_seed``)."""
        if self._llm is None:
            self._llm = llm_agent_seed(self.master_seed, self.agent_id)
        return self._llm

    @property
    def workflow_request(self) -> int:
        """The provider seed a workflow agent sends (``workflow_request_seed`` of ``llm``)."""
        if self._workflow is None:
            self._workflow = workflow_request_seed(self.llm, self.agent_id)
        return self._workflow


# A numbered id's digits: at least 3 (``agent_000``), more only past 999 (``agent_1000``).
ID_DIGITS = 3
_ASCII_DIGITS = "0123456789"  # an id's trailing number: these only, not other Unicode digits
# Sorts after any text an id can hold, so ``agent_1000`` comes after every ``agent_999...``.
_PAST_THREE_DIGITS = "999\U0010ffff"


def numbered_id(prefix: str, index: int) -> str:
    """The id of the ``index``-th numbered agent: ``agent_000`` ... ``agent_999``, ``agent_1000``.

    The original aam engine formats ids as ``f"agent_{i:03d}"``; the padding does not widen with
    the run's size, so an agent keeps its id (and with it its seed) in a run of any size.
    """
    return f"{prefix}_{index:0{ID_DIGITS}d}"


def agent_ids(count: int) -> list[str]:
    """Agent ids ``agent_000, agent_001, ...`` (``numbered_id``), in the engine's order.

    Args:
        count: How many ids.

    Returns:
        The ids, in index order (which is also ``agent_sort_key`` order).
    """
    return [numbered_id("agent", i) for i in range(count)]


def agent_sort_key(agent_id: str) -> tuple[str, int, str]:
    """The engine's order of agent ids: as text, with numbered ids past 999 after ``*_999``.

    With ``agent_{i:03d}`` ids a plain text sort would put ``agent_1000`` between ``agent_100``
    and ``agent_101``; this key keeps every run in index order, and leaves the order of ids with
    three trailing digits or fewer exactly the text order (the order of every earlier run).

    Args:
        agent_id: An agent's id.

    Returns:
        A key for ``sorted``: ``(agent_id, 0, "")``, or, for an id ending in four or more
        digits, ``(prefix + "999" + a last character, number of digits, digits)``.
    """
    prefix = agent_id.rstrip(_ASCII_DIGITS)
    digits = len(agent_id) - len(prefix)
    if digits <= ID_DIGITS:
        return (agent_id, 0, "")
    return (prefix + _PAST_THREE_DIGITS, digits, agent_id[len(prefix) :])


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the one encoding that is hashed and recorded.

    A numpy value is written as its Python value (``np.int64(5)`` as ``5``, an array as a list),
    as the trace records it (``vivarium.trace.values``): were it written as its ``str``, a sweep
    over ``np.arange(3)`` would derive other seeds than one over ``range(3)``, and a world's
    snapshot would come back from a checkpoint holding strings. Anything else JSON cannot hold
    is written as its ``str``.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default
    )


def _json_default(value: Any) -> Any:
    """What ``canonical_json`` writes for a value JSON has no type for."""
    if type(value).__module__.startswith("numpy") and hasattr(value, "tolist"):
        converted = value.tolist()
        if type(converted) in (int, float, bool, str, list):
            return converted
    return str(value)


def digest(text: str | bytes) -> str:
    """Hex SHA-256 of text or bytes."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def derive_run_id(name: str, config_json: str) -> str:
    """A run id that names the experiment and is fixed by its config: ``name-<12 hex>``.

    Args:
        name: The experiment's name.
        config_json: The canonical JSON of the config's identity.

    Returns:
        ``name`` and the first 12 hex digits of the JSON's SHA-256.
    """
    return f"{name}-{digest(config_json)[:12]}"


class CountingRandom(random.Random):
    """``random.Random`` that counts the 32-bit words it draws (same stream, same results).

    ``skip(n)`` moves a fresh generator forward by n words in one C call, which is how a
    checkpointed agent is restored.
    """

    def __init__(self, seed: int) -> None:
        """``random.Random(seed)``, counting from 0."""
        self.words = 0
        super().__init__(seed)

    def seed(self, a: Any = None, version: int = 2) -> None:
        """Reseed, and count from 0 again."""
        super().seed(a, version)
        self.words = 0

    def getrandbits(self, k: int) -> int:
        """``random.Random.getrandbits``, counting the words it draws."""
        self.words += (k + 31) // 32
        return super().getrandbits(k)

    def random(self) -> float:
        """``random.Random.random``, counting its two words."""
        self.words += 2  # genrand_res53 draws two words
        return super().random()

    def skip(self, words: int) -> None:
        """Move forward by ``words`` words, as if they had been drawn."""
        if words > 0:
            self.getrandbits(32 * words)
