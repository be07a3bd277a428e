"""Random agents: the baseline every study starts from, and the engine's speed benchmark.

``RandomAgentPolicy`` is exactly the seed algorithm: ``action = rng.choice(action_space)``, and
for ``emit_event`` the arguments ``{"value": rng.randint(0, 1_000_000), "seen_time_step": t}``;
every decision's metadata is ``{"policy": "RandomAgentPolicy"}``, as the aam engine records it.

``RandomBatch`` makes the same decisions for many agents at once with numpy: each agent's
``random.Random`` state is copied into a numpy ``MT19937``, whose raw 32-bit words are the same
stream, and CPython's rejection sampling (``_randbelow``) is replayed on those words vectorised
across agents. The decisions are bit-identical to calling ``decide`` agent by agent, and each
policy's ``rng`` is left exactly where the per-agent path would have left it. It is the engine's
batch decider for random agents (``vivarium.policies.base.BatchDecider``): it hands the engine
each step's decisions as stored columns, the ``emit_event`` arguments written as JSON directly.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vivarium.seeding import CountingRandom, canonical_json
from vivarium.types import ActionRequest
from vivarium.worlds.base import BatchDecisions

if TYPE_CHECKING:
    import numpy as np

DEFAULT_ACTION_SPACE = ("noop", "emit_event")
EVENT_VALUE_MAX = 1_000_000
# What every decision records about its maker, as the original aam engine's random agents do.
POLICY_METADATA = {"policy": "RandomAgentPolicy"}
# That metadata as one stored row of the metadata column (a JSON string of canonical JSON).
_METADATA_ITEM = json.dumps(canonical_json(POLICY_METADATA))


class RandomAgentPolicy:
    """Picks uniformly from ``action_space`` with its own seeded ``random.Random``."""

    name = "random"

    def __init__(
        self, rng: random.Random, action_space: Sequence[str] = DEFAULT_ACTION_SPACE
    ) -> None:
        """A policy drawing from ``rng`` (see ``from_seed`` for the usual construction).

        Raises:
            ValueError: ``action_space`` is empty.
        """
        if not action_space:
            raise ValueError("action_space must name at least one action")
        self._rng: random.Random | None = rng
        self.action_space = tuple(action_space)
        self.seed: int | None = None
        # Set by a batch: (key matrix, row, pos, words) to become the generator when next used.
        self._pending: tuple[Any, int, int, int] | None = None

    @property
    def rng(self) -> random.Random:
        """The agent's generator, made on first use (a batch run may never need it)."""
        if self._rng is None:
            assert self.seed is not None
            rng = CountingRandom(self.seed)
            if self._pending is not None:
                keys, row, pos, words = self._pending
                rng.setstate((3, (*keys[row].tolist(), pos), None))
                rng.words = words
                self._pending = None
            self._rng = rng
        return self._rng

    @rng.setter
    def rng(self, value: random.Random) -> None:
        self._rng = value
        self._pending = None

    @property
    def fresh(self) -> bool:
        """True while the generator is exactly ``random.Random(seed)`` and unused."""
        if self.seed is None or self._pending is not None:
            return False
        return self._rng is None or (isinstance(self._rng, CountingRandom) and self._rng.words == 0)

    def words_drawn(self) -> int | None:
        """The 32-bit words drawn since seeding, or None when the generator does not count."""
        if self._pending is not None:
            return self._pending[3]
        if self._rng is None:
            return 0 if self.seed is not None else None
        return self._rng.words if isinstance(self._rng, CountingRandom) else None

    @classmethod
    def from_seed(
        cls, seed: int, action_space: Sequence[str] = DEFAULT_ACTION_SPACE
    ) -> RandomAgentPolicy:
        """The usual construction: ``random.Random(seed)``, with the seed kept for the record.

        The generator counts the 32-bit words it has drawn, so a checkpoint of this agent is two
        integers (seed, words) rather than the 625-word Mersenne Twister state.
        """
        policy = cls(None, action_space)  # type: ignore[arg-type]  # made lazily from the seed
        policy.seed = seed
        return policy

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """``rng.choice(action_space)``, with arguments drawn for actions that take them."""
        action = self.rng.choice(self.action_space)
        arguments: dict[str, Any] = {}
        if action == "emit_event":
            arguments = {
                "value": self.rng.randint(0, EVENT_VALUE_MAX),
                "seen_time_step": observation["time_step"],
            }
        elif action in ARGUMENT_MAKERS:
            arguments = ARGUMENT_MAKERS[action](self.rng, agent_id, observation)
        return ActionRequest.trusted(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=action,
            arguments=arguments,
            reasoning=None,
            metadata=dict(POLICY_METADATA),
        )

    @classmethod
    def batch_decider(
        cls, policies: Sequence[Any], world_actions: frozenset[str]
    ) -> RandomBatch | None:
        """One ``RandomBatch`` for every agent (``BatchPolicy``), or None.

        None unless all are plain ``RandomAgentPolicy`` with one action space, all of whose
        actions the world applies in batches.
        """
        return RandomBatch(policies) if RandomBatch.supports(policies, world_actions) else None

    # -- state the engine checkpoints -----------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The generator's position: (seed, words drawn) when known, else its full state."""
        words = self.words_drawn()
        if words is not None and self.seed is not None:
            return {"seed": self.seed, "words": words}
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def set_state(self, state: dict[str, Any]) -> None:
        """Put the generator where ``get_state`` found it."""
        if "words" in state:
            self.seed = state["seed"]
            rng = CountingRandom(state["seed"])
            rng.skip(state["words"])
            self.rng = rng
            return

        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


def _pick_artifact(rng: random.Random, observation: dict[str, Any]) -> str:
    artifacts = observation.get("artifacts") or []
    if not artifacts:
        return "none"
    item = artifacts[rng.randrange(len(artifacts))]
    return str(item["id"] if isinstance(item, dict) else item)


def _read_args(rng: random.Random, agent_id: str, observation: dict[str, Any]) -> dict[str, Any]:
    return {"artifact_id": _pick_artifact(rng, observation)}


def _invoke_args(rng: random.Random, agent_id: str, observation: dict[str, Any]) -> dict[str, Any]:
    artifact_id = _pick_artifact(rng, observation)
    methods = next(
        (
            list(a.get("methods") or [])
            for a in observation.get("artifacts") or []
            if isinstance(a, dict) and a.get("id") == artifact_id
        ),
        [],
    )
    method = methods[rng.randrange(len(methods))] if methods else "run"
    return {"artifact_id": artifact_id, "method": method, "args": {}}


def _write_args(rng: random.Random, agent_id: str, observation: dict[str, Any]) -> dict[str, Any]:
    n = rng.randint(0, EVENT_VALUE_MAX)
    return {"artifact_id": f"{agent_id}_note_{n % 8}", "content": f"note {n}"}


def _post_args(rng: random.Random, agent_id: str, observation: dict[str, Any]) -> dict[str, Any]:
    return {"content": f"random message {rng.randint(0, EVENT_VALUE_MAX)}"}


def _give_args(rng: random.Random, agent_id: str, observation: dict[str, Any]) -> dict[str, Any]:
    others = [a for a in observation.get("agents") or () if a != agent_id]
    return {"to": others[rng.randrange(len(others))] if others else agent_id}


# Arguments random agents make up for actions other than emit_event (drawn from their own rng,
# from what the observation shows), so a random baseline can act in richer worlds.
ARGUMENT_MAKERS = {
    "read_artifact": _read_args,
    "invoke_artifact": _invoke_args,
    "write_artifact": _write_args,
    "post_message": _post_args,
    "give": _give_args,
}


# -- MT19937, vectorised across agents ---------------------------------------------------------
_N, _M = 624, 397
_UPPER, _LOWER, _MATRIX_A = 0x80000000, 0x7FFFFFFF, 0x9908B0DF


def _twist(mt: np.ndarray, *, words_first: bool = False) -> np.ndarray:
    """One MT19937 twist of every generator in ``mt`` (uint32), as CPython's genrand does.

    ``mt`` is agents x 624, or 624 x agents with ``words_first`` (where each word's slice is
    contiguous: about 3x faster over a seeding chunk's fresh state, which it twists in place).
    A new word j depends on new words j-227, so three blocks of 227 run in order.
    """
    import numpy as np

    def words(lo: int, hi: int) -> tuple[slice, ...]:
        return (slice(lo, hi),) if words_first else (slice(None), slice(lo, hi))

    if not words_first:
        mt = mt.copy()
    a = np.uint32(_MATRIX_A)
    for lo, hi in ((0, 227), (227, 454), (454, 623)):
        y = (mt[words(lo, hi)] & _UPPER) | (mt[words(lo + 1, hi + 1)] & _LOWER)
        src = mt[words(lo + _M, hi + _M)] if lo == 0 else mt[words(lo + _M - _N, hi + _M - _N)]
        mt[words(lo, hi)] = src ^ (y >> 1) ^ ((y & 1) * a)
    y = (mt[words(623, 624)] & _UPPER) | (mt[words(0, 1)] & _LOWER)
    mt[words(623, 624)] = mt[words(_M - 1, _M)] ^ (y >> 1) ^ ((y & 1) * a)
    return mt


def _temper(mt: np.ndarray) -> np.ndarray:
    y = mt ^ (mt >> 11)
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    return y ^ (y >> 18)


def _untemper(y: np.ndarray) -> np.ndarray:
    """The words ``_temper`` was given (each of its four steps undone, last first)."""
    import numpy as np

    y = y ^ (y >> 18)
    y = y ^ ((y << 15) & np.uint32(0xEFC60000))
    t = y
    for _ in range(4):  # each pass fixes 7 more low bits of ``y ^= (y << 7) & mask``
        t = y ^ ((t << 7) & np.uint32(0x9D2C5680))
    y = t
    for _ in range(2):  # each pass fixes 11 more high bits of ``y ^= y >> 11``
        t = y ^ (t >> 11)
    return t


def first_blocks(seeds: Sequence[int]) -> np.ndarray:
    """The block each ``random.Random(seed)`` reads its first 624 words from.

    A freshly seeded generator is its key at position 624: its first read twists the key into
    this block and reads it from 0, so (block, 0) draws exactly what (key, 624) draws. Below
    ``SEED_ONE_BY_ONE_BELOW`` seeds CPython makes each block's words itself (``getrandbits``,
    tempered, in C), untempered here for all at once; above, CPython's seeding recurrences
    (``_init_by_array``) run ``SEED_CHUNK`` seeds at a time and each chunk is twisted at once,
    so that no step of it holds more than a chunk's temporaries, however many agents.
    """
    import numpy as np

    if any(s < 0 or s >> 64 for s in seeds):
        raise ValueError("first_blocks takes seeds in [0, 2**64)")
    if len(seeds) >= SEED_ONE_BY_ONE_BELOW:
        low, high = _seed_words(seeds)
        blocks = np.empty((len(seeds), _N), dtype=np.uint32)
        for start in range(0, len(seeds), SEED_CHUNK):
            part = slice(start, start + SEED_CHUNK)
            blocks[part] = _twist(_init_by_array(low[part], high[part]), words_first=True).T
        return blocks
    rng = random.Random()
    words = bytearray()
    for seed in seeds:
        rng.seed(seed)
        words += rng.getrandbits(32 * _N).to_bytes(4 * _N, "little")  # word 0 lowest
    return _untemper(np.frombuffer(words, dtype="<u4").reshape(len(seeds), _N).astype(np.uint32))


def _initial_state() -> list[int]:
    """``init_genrand(19650218)``: where every ``init_by_array`` seeding starts."""
    mt = [19650218]
    for i in range(1, _N):
        prev = mt[-1]
        mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    return mt


SEED_ONE_BY_ONE_BELOW = 200
"""Agents below which CPython makes each first block faster (about 13 us a seed) than the
vectorised recurrences, which cost about 8 ms whatever the count (1,248 numpy passes)."""

SEED_CHUNK = 4096
"""Seeds whose recurrences run together: their state (624 words each, 10 MB) stays in the
processor's caches, where all 100,000 of a large run at once (250 MB) would not."""


def _seed_words(seeds: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each seed's low and high 32-bit words (seeds checked to be below 2**64)."""
    import numpy as np

    n = len(seeds)
    low = np.fromiter((s & 0xFFFFFFFF for s in seeds), dtype=np.uint32, count=n)
    high = np.fromiter((s >> 32 for s in seeds), dtype=np.uint32, count=n)
    return low, high


def _init_by_array(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """CPython's ``init_by_array`` for keys of one word (``high`` 0) or two: (624, seeds).

    The recurrences run once over all the seeds (one row of the state per index, seeds along
    the row), in 32-bit words: numpy's unsigned arithmetic wraps as the C code's does, so no
    mask is needed. CPython seeds with the seed's 32-bit words, little end first.
    """
    import numpy as np

    two_words = high > 0
    # Key word j of a two-word key: low at even j, high (plus j, 1) at odd j; a one-word key
    # adds its only word and 0 every time.
    odd_word = np.where(two_words, high, low)
    odd_index = two_words.astype(np.uint32)
    first, second, thirty = np.uint32(1664525), np.uint32(1566083941), np.uint32(30)
    mt = np.repeat(np.array(_initial_state(), dtype=np.uint32)[:, None], len(low), axis=1)
    i = 1
    for j in range(_N):
        prev = mt[i - 1]
        word, index = (odd_word, odd_index) if j % 2 else (low, np.uint32(0))
        mt[i] = (mt[i] ^ ((prev ^ (prev >> thirty)) * first)) + word + index
        i += 1
        if i >= _N:
            mt[0] = mt[_N - 1]
            i = 1
    for _ in range(_N - 1):
        prev = mt[i - 1]
        mt[i] = (mt[i] ^ ((prev ^ (prev >> thirty)) * second)) - np.uint32(i)
        i += 1
        if i >= _N:
            mt[0] = mt[_N - 1]
            i = 1
    mt[0] = 0x80000000
    return mt


def _window_for(acceptance: float, agents: int, cap: int) -> int:
    """Words to look at so that, in expectation, under 1% of draws need a second look."""
    if acceptance >= 1.0 or agents == 0:
        return 1
    need = math.log(0.01 / agents) / math.log(1.0 - acceptance)
    return max(1, min(cap, math.ceil(need)))


class RandomBatch:
    """Vectorised decisions for a group of ``RandomAgentPolicy`` with one shared action space.

    Every agent's Mersenne Twister state is a row of one matrix: its current block (624 words)
    and a read pointer, exactly CPython's ``(key, pos)`` state, so any agent's
    ``random.Random`` can be restored at any point. The words a draw looks at are tempered as
    they are read, and a block is twisted when an agent needs a word past its end, as CPython
    twists lazily: 2.5 KB an agent (a tempered copy of the block and of the next one, kept
    before, made it 10 KB, and 100 MB at 10,000 agents).
    """

    MAX_WINDOW = 64  # words looked at per draw; an agent that rejects them all draws again

    def __init__(self, policies: Sequence[RandomAgentPolicy]) -> None:
        """Take over the generators of ``policies`` (check ``supports`` first)."""
        import numpy as np

        self._np = np
        self.policies = list(policies)
        self.action_space = self.policies[0].action_space
        self.emit_code = (
            self.action_space.index("emit_event") if "emit_event" in self.action_space else -1
        )
        n = len(self.policies)
        fresh = [i for i, p in enumerate(self.policies) if p.fresh]
        used = [i for i, p in enumerate(self.policies) if not p.fresh]
        self._gauss: list[float | None] = [None] * n
        self._fresh = np.zeros(n, dtype=bool)
        self._fresh[fresh] = True
        # A freshly seeded generator starts at its first block, position 0 (``first_blocks``:
        # seeding 10,000 generators one by one costs more than the whole run of them).
        blocks = first_blocks([self.policies[i].seed for i in fresh])  # type: ignore[misc]
        if len(fresh) == n:
            self._key = blocks  # no second copy of a large run's 2.5 KB an agent
        else:
            self._key = np.empty((n, _N), dtype=np.uint32)
            self._key[fresh] = blocks
        self._ptr = np.zeros(n, dtype=np.int64)
        for i in used:
            _, internal, gauss = self.policies[i].rng.getstate()
            self._key[i] = internal[:_N]
            self._ptr[i] = internal[_N]
            self._gauss[i] = gauss

        self._rows = np.arange(n)
        self._consumed = np.zeros(n, dtype=np.int64)
        self._start_words = [p.words_drawn() for p in self.policies]
        self._flat = self._key.reshape(-1)  # a view: twists in place show through it
        self._lent = False  # whether synced policies read ``_key`` (see ``sync_policies``)
        self._metadata: tuple[int, str] | None = None

    @classmethod
    def supports(cls, policies: Sequence[object], world_actions: frozenset[str]) -> bool:
        """Whether one batch can decide for ``policies`` in a world that batches these actions.

        Only plain ``RandomAgentPolicy`` (a subclass may decide differently) sharing one action
        space, every action of which the world can apply in a batch.
        """
        if not policies or not all(type(p) is RandomAgentPolicy for p in policies):
            return False
        space = policies[0].action_space  # type: ignore[attr-defined]
        if any(p.action_space != space for p in policies):  # type: ignore[attr-defined]
            return False
        if any(not p.fresh and p.rng.getstate()[0] != 3 for p in policies):  # type: ignore[attr-defined]
            return False
        return set(space) <= world_actions

    def _twist_spent(self, agents: np.ndarray) -> None:
        """Those of ``agents`` that have read their whole block twist it and read from 0.

        Done only when such an agent needs another word, as CPython's ``genrand_uint32`` does:
        a pointer of 624 is CPython's own state after a block's last word, so synced states
        match the per-agent path exactly.
        """
        rows = agents[self._ptr[agents] >= _N]
        if len(rows) and self._lent:  # the policies read the blocks lent: twist a copy
            self._key = self._key.copy()
            self._flat = self._key.reshape(-1)
            self._lent = False
        for start in range(0, len(rows), SEED_CHUNK):  # a chunk's temporaries at a time
            chunk = rows[start : start + SEED_CHUNK]
            self._key[chunk] = _twist(self._key[chunk])
        self._ptr[rows] = 0

    def _below(self, n: int, rows: np.ndarray) -> np.ndarray:
        """``random.Random._randbelow(n)`` for each agent in ``rows``, from their word streams."""
        np = self._np
        k = n.bit_length()
        shift = 32 - k
        window = np.arange(_window_for(n / (1 << k), len(rows), self.MAX_WINDOW))
        out = np.empty(len(rows), dtype=np.int64)
        pending = np.arange(len(rows))
        agents = rows
        while len(pending):
            self._twist_spent(agents)
            ptr = self._ptr[agents]
            # The window stops at the block's end: an agent that finds no word there reads
            # the rest of it, and its next look (a twist first) goes on from the new block.
            at = ptr[:, None] + window
            inside = at < _N
            rows_words = self._flat[agents[:, None] * _N + np.minimum(at, _N - 1)]
            words = _temper(rows_words) >> shift
            ok = inside & (words < n)
            first = ok.argmax(axis=1)
            found = ok[np.arange(len(agents)), first]
            taken = np.where(found, first + 1, np.minimum(len(window), _N - ptr))
            self._ptr[agents] += taken
            self._consumed[agents] += taken
            hit = pending[found]
            out[hit] = words[found, first[found]]
            pending = pending[~found]
            agents = rows[pending]
        return out

    def decide_batch(self, time_step: int, order: Sequence[int] | None) -> BatchDecisions:
        """Every agent's decision for ``time_step``, in commit order (``BatchDecider``).

        The arguments column is written directly: byte for byte what the per-agent path
        stores for each request's canonical-JSON arguments (a test compares the two files).
        """
        codes, values = self.decide()
        if order is not None:
            codes, values = codes[order], values[order]
        emitting = values >= 0
        return BatchDecisions(
            time_step=time_step,
            action_names=self.action_space,
            codes=codes,
            arguments=_event_arguments_json(values, emitting, time_step)
            if emitting.any()
            else None,
            metadata=self._metadata_column(len(codes)),
        )

    def _metadata_column(self, rows: int) -> str:
        """The stored metadata column: ``POLICY_METADATA`` on every row (built once per size)."""
        if self._metadata is None or self._metadata[0] != rows:
            self._metadata = (rows, "[" + ",".join([_METADATA_ITEM] * rows) + "]")
        return self._metadata[1]

    def decide(self) -> tuple[np.ndarray, np.ndarray]:
        """One step for every agent: (action code per agent, event value or -1)."""
        np = self._np
        codes = self._below(len(self.action_space), self._rows)
        values = np.full(len(self._rows), -1, dtype=np.int64)
        if self.emit_code >= 0:
            emitting = np.nonzero(codes == self.emit_code)[0]
            if len(emitting):
                values[emitting] = self._below(EVENT_VALUE_MAX + 1, emitting)
        return codes, values

    def sync_policies(self) -> None:
        """Leave each policy's ``random.Random`` exactly where the per-agent path would have.

        Seeded policies get the state as pending (made into a generator only if used again),
        so ending a 10,000-agent run does not build 10,000 generators.
        """
        # Lent, not copied (a large run's blocks are 2.5 KB an agent): the batch twists a copy
        # if it draws again (``_twist_spent``), the only place it changes them.
        keys = self._key
        self._lent = True
        for i, policy in enumerate(self.policies):
            if self._fresh[i] and not self._consumed[i]:
                continue  # drew nothing: still exactly random.Random(seed), as it was
            start = self._start_words[i]
            pos = int(self._ptr[i])
            if policy.seed is not None and start is not None and self._gauss[i] is None:
                policy._rng = None
                policy._pending = (keys, i, pos, start + int(self._consumed[i]))
                continue
            rng = policy.rng
            rng.setstate((3, (*keys[i].tolist(), pos), self._gauss[i]))
            if isinstance(rng, CountingRandom) and start is not None:
                rng.words = start + int(self._consumed[i])


def _event_arguments_json(values: np.ndarray, emitting: np.ndarray, t: int) -> str:
    """The stored arguments column of a step of ``noop`` and ``emit_event``.

    Each ``emit_event``'s canonical JSON as a JSON string, null for every other action (whose
    arguments are empty).
    """
    import numpy as np

    items = np.full(len(values), "null", dtype=object)
    prefix = '"{\\"seen_time_step\\":' + str(t) + ',\\"value\\":'
    items[emitting] = [f'{prefix}{v}}}"' for v in values[emitting].tolist()]
    return "[" + ",".join(items.tolist()) + "]"
