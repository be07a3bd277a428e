"""Mastermind: crack a secret code of digits from black/white peg feedback; a seeded game.

The game as MetaRLGym ships it (a TextArena environment): a code of ``code_length`` digits from
1 to ``num_numbers`` (no repeats unless ``duplicate_numbers``), guessed in square brackets
(``[1 2 3 4]``); a black peg is a right digit in the right place, a white peg a right digit in
another place. Rewards are MetaRLGym's (see ``vivarium.metarl.env``): +1 for cracking the code,
0 when the turns run out, -1 for a second invalid guess in a row (the first is forgiven).
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from vivarium.errors import ConfigError
from vivarium.metarl.agent import Agent
from vivarium.metarl.env import Move, MultistepEnv
from vivarium.seeding import derive_seed

# MetaRLGym's registered variants: code_length, num_numbers, max_turns, duplicate_numbers.
VARIANTS: dict[str, dict[str, Any]] = {
    "Mastermind-v0": {
        "code_length": 4,
        "num_numbers": 6,
        "max_turns": 20,
        "duplicate_numbers": False,
    },
    "Mastermind-v0-hard": {
        "code_length": 4,
        "num_numbers": 8,
        "max_turns": 30,
        "duplicate_numbers": False,
    },
    "Mastermind-v0-extreme": {
        "code_length": 6,
        "num_numbers": 12,
        "max_turns": 50,
        "duplicate_numbers": True,
    },
}
_CODE = re.compile(r"\[(\d+(?:\s+\d+)*)\]")  # the first bracketed run of numbers: [1 2 3 4]


def score_guess(secret: Sequence[int], guess: Sequence[int]) -> tuple[int, int]:
    """``(black, white)`` pegs: right digit in the right place; right digit elsewhere.

    Each digit of the secret is matched at most once, black pegs first.
    """
    black = sum(s == g for s, g in zip(secret, guess, strict=True))
    common = sum((Counter(secret) & Counter(guess)).values())
    return black, common - black


class MastermindEnv(MultistepEnv):
    """Crack the secret code from peg feedback. The code is fixed by the seed.

    A guess is the first bracketed run of numbers in the reply, so a reply may quote earlier
    codes without brackets. A guess of the wrong length, with a digit out of range, or with a
    repeat when repeats are off, or a reply without one, is an invalid move: explained, played
    again without using a turn, and a second in a row ends the game at -1. Play with ``step``
    (MetaRLGym's ``done, info``) or ``turn`` (``messages, reward, done, info``).
    """

    name = "mastermind"

    def __init__(
        self,
        seed: int,
        code_length: int = 4,
        num_numbers: int = 6,
        max_turns: int = 20,
        duplicate_numbers: bool = False,
        *,
        error_allowance: int = 1,
        episodes_per_trial: int = 1,
        free_shots: int = 0,
    ) -> None:
        if code_length < 1 or num_numbers < 1:
            raise ConfigError("code_length and num_numbers must be at least 1")
        if not duplicate_numbers and code_length > num_numbers:
            raise ConfigError(
                f"a code of {code_length} different digits needs num_numbers >= {code_length}"
            )
        self.code_length = code_length
        self.num_numbers = num_numbers
        self.duplicate_numbers = duplicate_numbers
        self.secret: list[int] = []
        self.history: list[dict[str, Any]] = []
        super().__init__(
            seed,
            max_turns=max_turns,
            error_allowance=error_allowance,
            episodes_per_trial=episodes_per_trial,
            free_shots=free_shots,
        )

    @classmethod
    def variant(cls, env_id: str, seed: int, **kwargs: Any) -> MastermindEnv:
        """One of MetaRLGym's registered variants (``VARIANTS``), by its env id."""
        if env_id not in VARIANTS:
            raise ConfigError(
                f"unknown Mastermind variant {env_id!r}; known: {', '.join(VARIANTS)}"
            )
        return cls(seed, **{**VARIANTS[env_id], **kwargs})

    def _new_task(self) -> None:
        rng = random.Random(derive_seed(self.seed, "mastermind"))
        digits = range(1, self.num_numbers + 1)
        if self.duplicate_numbers:
            self.secret = rng.choices(digits, k=self.code_length)
        else:
            self.secret = rng.sample(digits, k=self.code_length)

    def reset(self, seed: int | None = None, session_id: str | None = None) -> list[dict[str, Any]]:
        """Start an episode (same code, or a new one when ``seed`` is given); clears the history."""
        self.history = []
        return super().reset(seed, session_id)

    def _opening(self) -> list[dict[str, str]]:
        repeats = "digits may repeat" if self.duplicate_numbers else "no digit repeats"
        example = " ".join(str(d) for d in range(1, self.code_length + 1))
        return [
            {
                "role": "system",
                "content": (
                    f"Let's play Mastermind. The secret code has {self.code_length} digits, "
                    f"each from 1 to {self.num_numbers}; {repeats}. Submit a guess by writing "
                    f"the code in square brackets, like [{example}]; only the first bracketed "
                    "code in your reply counts, so quote other codes without brackets. After "
                    "each guess you get black pegs (right digit, right place) and white pegs "
                    f"(right digit, wrong place). You have {self.max_turns} guesses."
                ),
            },
            {"role": "user", "content": "The code is set. Your first guess?"},
        ]

    def _move(self, text: str) -> Move:
        found = _CODE.search(text)
        if found is None:
            return Move(
                "I found no guess: write it as numbers separated by spaces in square brackets.",
                invalid="no bracketed code",
            )
        guess = [int(d) for d in found.group(1).split()]
        info: dict[str, Any] = {"guess": guess}
        problem = self._problem(guess)
        if problem is not None:
            return Move(f"[{found.group(1)}] is not a valid code: {problem}.", problem, info=info)
        black, white = score_guess(self.secret, guess)
        self.history.append({"guess": guess, "black": black, "white": white})
        info.update(black=black, white=white)
        code = " ".join(str(d) for d in guess)
        if black == self.code_length:
            return Move(f"[{code}] cracks the code!", won=True, info=info)
        return Move(f"[{code}]: {black} black peg(s), {white} white peg(s).", info=info)

    def _problem(self, guess: list[int]) -> str | None:
        if len(guess) != self.code_length:
            return f"it needs exactly {self.code_length} numbers"
        if any(not 1 <= d <= self.num_numbers for d in guess):
            return f"every number must be from 1 to {self.num_numbers}"
        if not self.duplicate_numbers and len(set(guess)) != len(guess):
            return "numbers may not repeat"
        return None

    def _ending(self, won: bool, reason: str) -> tuple[str, dict[str, Any]]:
        code = " ".join(str(d) for d in self.secret)
        revealed = {"secret": list(self.secret)}
        return ("" if won else f"The code was [{code}]."), revealed


class ConsistentGuessAgent(Agent):
    """Guesses the first code (in order) that agrees with every feedback so far.

    Reads its own guesses and the pegs from the chat, so it keeps no state; it cracks the
    standard game (4 digits of 6, no repeats) within the 20 turns.
    """

    def __init__(
        self, code_length: int = 4, num_numbers: int = 6, duplicate_numbers: bool = False
    ) -> None:
        self.code_length = code_length
        self.num_numbers = num_numbers
        self.duplicate_numbers = duplicate_numbers

    def get_action(
        self, messages: list[dict[str, Any]], agent_state: Any = None, **kwargs: Any
    ) -> tuple[str, Any]:
        """The first candidate code consistent with the pegs heard so far, in brackets."""
        heard = _feedback(messages)
        digits = range(1, self.num_numbers + 1)
        codes = (
            itertools.product(digits, repeat=self.code_length)
            if self.duplicate_numbers
            else itertools.permutations(digits, self.code_length)
        )
        for code in codes:
            if all(score_guess(guess, code) == pegs for guess, pegs in heard):
                return "[" + " ".join(str(d) for d in code) + "]", agent_state
        return "[" + " ".join("1" * self.code_length) + "]", agent_state


_PEGS = re.compile(r"^\[(\d+(?:\s+\d+)*)\]: (\d+) black peg\(s\), (\d+) white peg\(s\)")


def _feedback(messages: list[dict[str, Any]]) -> list[tuple[list[int], tuple[int, int]]]:
    heard = []
    for m in messages:
        if m.get("role") == "assistant":
            continue
        if found := _PEGS.match(str(m.get("content") or "")):
            code = [int(d) for d in found.group(1).split()]
            heard.append((code, (int(found.group(2)), int(found.group(3)))))
    return heard
