"""Random agents: the baseline every study starts from, and the engine's speed benchmark.

``RandomAgentPolicy`` is exactly the seed algorithm: ``action = rng.choice(action_space)``, and
for ``emit_event`` the arguments ``{"value": rng.randint(0, 1_000_000), "seen_time_step": t}``.

``RandomBatch`` makes the same decisions for many agents at once with numpy: each agent's
``random.Random`` state is copied into a numpy ``MT19937``, whose raw 32-bit words are the same
stream, and CPython's rejection sampling (``_randbelow``) is replayed on those words vectorised
across agents. The decisions are bit-identical to calling ``decide`` agent by agent, and each
policy's ``rng`` is left exactly where the per-agent path would have left it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vivarium.types import ActionRequest

if TYPE_CHECKING:
    import numpy as np

DEFAULT_ACTION_SPACE = ("noop", "emit_event")
EVENT_VALUE_MAX = 1_000_000


class RandomAgentPolicy:
    """Picks uniformly from ``action_space`` with its own seeded ``random.Random``."""

    name = "random"

    def __init__(
        self, rng: random.Random, action_space: Sequence[str] = DEFAULT_ACTION_SPACE
    ) -> None:
        if not action_space:
            raise ValueError("action_space must name at least one action")
        self.rng = rng
        self.action_space = tuple(action_space)
        self.seed: int | None = None

    @classmethod
    def from_seed(
        cls, seed: int, action_space: Sequence[str] = DEFAULT_ACTION_SPACE
    ) -> RandomAgentPolicy:
        """The usual construction: ``random.Random(seed)``, with the seed kept for the record.

        The generator counts the 32-bit words it has drawn, so a checkpoint of this agent is two
        integers (seed, words) rather than the 625-word Mersenne Twister state.
        """
        policy = cls(CountingRandom(seed), action_space)
        policy.seed = seed
        return policy

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        action = self.rng.choice(self.action_space)
        arguments: dict[str, Any] = {}
        if action == "emit_event":
            arguments = {
                "value": self.rng.randint(0, EVENT_VALUE_MAX),
                "seen_time_step": observation["time_step"],
            }
        elif action in ARGUMENT_MAKERS:
            arguments = ARGUMENT_MAKERS[action](self.rng, agent_id, observation)
        return ActionRequest.model_construct(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=action,
            arguments=arguments,
            reasoning=None,
            metadata={},
        )

    # -- state the engine checkpoints -----------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        if isinstance(self.rng, CountingRandom) and self.seed is not None:
            return {"seed": self.seed, "words": self.rng.words}
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def set_state(self, state: dict[str, Any]) -> None:
        if "words" in state:
            self.seed = state["seed"]
            self.rng = CountingRandom(state["seed"])
            self.rng.skip(state["words"])
            return
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


class CountingRandom(random.Random):
    """``random.Random`` that counts the 32-bit words it draws (same stream, same results).

    ``skip(n)`` moves a fresh generator forward by n words in one C call, which is how a
    checkpointed agent is restored.
    """

    def __init__(self, seed: int) -> None:
        self.words = 0
        super().__init__(seed)

    def seed(self, a: Any = None, version: int = 2) -> None:
        super().seed(a, version)
        self.words = 0

    def getrandbits(self, k: int) -> int:
        self.words += (k + 31) // 32
        return super().getrandbits(k)

    def random(self) -> float:
        self.words += 2  # genrand_res53 draws two words
        return super().random()

    def skip(self, words: int) -> None:
        if words > 0:
            self.getrandbits(32 * words)


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


# Arguments random agents make up for actions other than emit_event (drawn from their own rng,
# from what the observation shows), so a random baseline can act in richer worlds.
ARGUMENT_MAKERS = {
    "read_artifact": _read_args,
    "invoke_artifact": _invoke_args,
    "write_artifact": _write_args,
    "post_message": _post_args,
}


def emit_event_arguments_json(value: int, time_step: int) -> str:
    """The canonical JSON of emit_event's arguments (sorted keys), as the batch path writes it."""
    return f'{{"seen_time_step":{time_step},"value":{value}}}'


# -- MT19937, vectorised across agents ---------------------------------------------------------
_N, _M = 624, 397
_UPPER, _LOWER, _MATRIX_A = 0x80000000, 0x7FFFFFFF, 0x9908B0DF


def _twist(mt: np.ndarray) -> np.ndarray:
    """One MT19937 twist of every row of ``mt`` (agents x 624, uint32), as CPython's genrand.

    Row i's new word j depends on new words j-227, so three blocks of 227 run in order.
    """
    import numpy as np

    mt = mt.copy()
    for lo, hi in ((0, 227), (227, 454), (454, 623)):
        y = (mt[:, lo:hi] & _UPPER) | (mt[:, lo + 1 : hi + 1] & _LOWER)
        src = mt[:, lo + _M : hi + _M] if lo == 0 else mt[:, lo + _M - _N : hi + _M - _N]
        mt[:, lo:hi] = src ^ (y >> 1) ^ ((y & 1) * np.uint32(_MATRIX_A))
    y = (mt[:, 623] & _UPPER) | (mt[:, 0] & _LOWER)
    mt[:, 623] = mt[:, _M - 1] ^ (y >> 1) ^ ((y & 1) * np.uint32(_MATRIX_A))
    return mt


def _temper(mt: np.ndarray) -> np.ndarray:
    y = mt ^ (mt >> 11)
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    return y ^ (y >> 18)


def _window_for(acceptance: float, agents: int, cap: int) -> int:
    """Words to look at so that, in expectation, under 1% of draws need a second look."""
    if acceptance >= 1.0 or agents == 0:
        return 1
    need = math.log(0.01 / agents) / math.log(1.0 - acceptance)
    return max(1, min(cap, math.ceil(need)))


class RandomBatch:
    """Vectorised decisions for a group of ``RandomAgentPolicy`` with one shared action space.

    Every agent's Mersenne Twister state is a row of one matrix; each row's output is kept as
    two tempered blocks (current and next, 1248 words) with a read pointer, exactly CPython's
    ``(key, pos)`` state, so any agent's ``random.Random`` can be restored at any point.
    """

    MAX_WINDOW = 64  # words looked at per draw; an agent that rejects them all draws again

    def __init__(self, policies: Sequence[RandomAgentPolicy]) -> None:
        import numpy as np

        self._np = np
        self.policies = list(policies)
        self.action_space = self.policies[0].action_space
        self.emit_code = (
            self.action_space.index("emit_event") if "emit_event" in self.action_space else -1
        )
        states = [p.rng.getstate() for p in self.policies]
        self._gauss = [g for _, _, g in states]
        n = len(states)
        self._key = np.array([s[1][:_N] for s in states], dtype=np.uint32)
        self._key_next = _twist(self._key)
        self._buf = np.empty((n, 2 * _N), dtype=np.uint32)
        self._buf[:, :_N] = _temper(self._key)
        self._buf[:, _N:] = _temper(self._key_next)
        self._ptr = np.array([s[1][_N] for s in states], dtype=np.int64)
        self._rows = np.arange(n)
        self._consumed = np.zeros(n, dtype=np.int64)
        self._start_words = [getattr(p.rng, "words", 0) for p in self.policies]
        self._flat = self._buf.reshape(-1)

    @classmethod
    def supports(cls, policies: Sequence[object], world_actions: frozenset[str]) -> bool:
        if not policies or not all(type(p) is RandomAgentPolicy for p in policies):
            return False
        space = policies[0].action_space  # type: ignore[attr-defined]
        if any(p.action_space != space for p in policies):  # type: ignore[attr-defined]
            return False
        if any(p.rng.getstate()[0] != 3 for p in policies):  # type: ignore[attr-defined]
            return False
        return set(space) <= world_actions

    def _advance(self) -> None:
        """Agents that have read into their next block make it current and twist a new next.

        A pointer of exactly 624 stays put: that is CPython's own state after the last word of a
        block (it twists lazily), so synced states match the per-agent path exactly.
        """
        rows = self._np.nonzero(self._ptr > _N)[0]
        if not len(rows):
            return
        self._key[rows] = self._key_next[rows]
        self._key_next[rows] = _twist(self._key[rows])
        self._buf[rows, :_N] = self._buf[rows, _N:]
        self._buf[rows, _N:] = _temper(self._key_next[rows])
        self._ptr[rows] -= _N

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
            self._advance()
            start = agents * (2 * _N) + self._ptr[agents]
            words = self._flat[start[:, None] + window] >> shift
            ok = words < n
            first = ok.argmax(axis=1)
            found = ok[np.arange(len(agents)), first]
            taken = np.where(found, first + 1, len(window))
            self._ptr[agents] += taken
            self._consumed[agents] += taken
            hit = pending[found]
            out[hit] = words[found, first[found]]
            pending = pending[~found]
            agents = rows[pending]
        return out

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
        """Leave each policy's ``random.Random`` exactly where the per-agent path would have."""
        self._advance()
        for i, policy in enumerate(self.policies):
            key = self._key[i].tolist()
            policy.rng.setstate((3, (*key, int(self._ptr[i])), self._gauss[i]))
            if isinstance(policy.rng, CountingRandom):
                policy.rng.words = self._start_words[i] + int(self._consumed[i])
