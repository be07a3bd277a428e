"""The Mastermind environment, seeded, with MetaRLGym's rules and rewards.

Original: andrewsiah/MetaRLGym (branch envinfo) ``agentsgym/envs/Mastermind/env.py`` and its
README (defaults 4 digits of 1..6, 20 turns, no repeats; variants; a guess is the first
``[1 2 3 4]`` in the reply; black/white pegs; invalid: no brackets, wrong length, out of range,
a repeat when repeats are off). Its rewards come from TextArena 0.6.4's ``State`` (the version
MetaRLGym's uv.lock pins): ``set_winners`` pays +1; the turn limit pays 0 ("Draw."); with
``error_allowance=1`` the first invalid move is forgiven without using a turn, and a second in
a row pays -1 and ends the game; a valid move resets the error count.
"""

from __future__ import annotations

from itertools import permutations
from typing import Any

import pytest

from vivarium.errors import ConfigError
from vivarium.metarl import (
    VARIANTS,
    Agent,
    ConsistentGuessAgent,
    MastermindEnv,
    run_episode,
    score_guess,
)


def code(digits: list[int]) -> str:
    return "[" + " ".join(map(str, digits)) + "]"


def test_the_seed_fixes_the_secret() -> None:
    """env.py reset(seed): the code is drawn at reset; here the seed alone decides it."""
    secrets = [MastermindEnv(seed).secret for seed in range(30)]
    assert secrets == [MastermindEnv(seed).secret for seed in range(30)]
    assert len({tuple(s) for s in secrets}) > 20
    for s in secrets:  # defaults: 4 different digits from 1 to 6
        assert len(s) == 4 and len(set(s)) == 4 and all(1 <= d <= 6 for d in s)
    env = MastermindEnv(0)
    env.reset(seed=7)
    assert env.secret == MastermindEnv(7).secret
    before = list(env.secret)
    env.reset()  # no seed: the same task again
    assert env.secret == before


def test_variants_as_registered() -> None:
    """README Variants table: v0 4/6/20/no repeats, hard 4/8/30, extreme 6/12/50 with repeats."""
    assert VARIANTS["Mastermind-v0"] == {
        "code_length": 4,
        "num_numbers": 6,
        "max_turns": 20,
        "duplicate_numbers": False,
    }
    hard = MastermindEnv.variant("Mastermind-v0-hard", 1)
    assert (hard.code_length, hard.num_numbers, hard.max_turns) == (4, 8, 30)
    extreme = MastermindEnv.variant("Mastermind-v0-extreme", 1)
    assert (extreme.code_length, extreme.num_numbers, extreme.max_turns) == (6, 12, 50)
    assert extreme.duplicate_numbers and len(extreme.secret) == 6
    with pytest.raises(ConfigError, match="unknown Mastermind variant"):
        MastermindEnv.variant("Mastermind-v9", 1)


@pytest.mark.parametrize(
    ("secret", "guess", "pegs"),
    [
        ([1, 2, 3, 4], [1, 3, 5, 2], (1, 2)),  # the README's own example feedback
        ([1, 2, 3, 4], [1, 2, 3, 4], (4, 0)),
        ([1, 2, 3, 4], [4, 3, 2, 1], (0, 4)),
        ([1, 2, 3, 4], [5, 6, 5, 6], (0, 0)),
        ([1, 1, 2, 2], [1, 2, 1, 1], (1, 2)),  # each secret digit matched once, blacks first
        ([1, 2, 2, 3], [2, 2, 2, 2], (2, 0)),
    ],
)
def test_pegs(secret: list[int], guess: list[int], pegs: tuple[int, int]) -> None:
    """env.py _evaluate_guess: black = right place; white = right digit elsewhere, once each."""
    assert score_guess(secret, guess) == pegs


def test_a_scripted_solver_earns_plus_one() -> None:
    """set_winners: cracking the code pays +1 (the only reward, at the end) and ends the game."""
    env = MastermindEnv(4)
    secret = list(env.secret)
    env.reset()
    wrong = next(list(p) for p in permutations(range(1, 7), 4) if list(p) != secret)
    done, info = env.step(f"I'll try {code(wrong)} first.")
    assert (done, info["reward"], info["turn"]) == (False, 0.0, 1)
    assert "black peg(s)" in info["reply"]
    done, info = env.step(f"So far 1 2 3 4 told me little; now {code(secret)}.")
    assert (done, info["reward"], info["won"], info["turn"]) == (True, 1.0, True, 2)
    assert env.close() == {0: 1.0} and info["secret"] == secret


def test_consistent_guessing_cracks_every_seed_within_the_turns() -> None:
    """README: win by deducing the code within 20 turns; one +1 at the end, 0 before."""
    for seed in range(20):
        result = run_episode(MastermindEnv(seed), ConsistentGuessAgent())
        assert result.won, seed
        assert result.rewards == [0.0] * (result.turns - 1) + [1.0]
        assert result.turns <= 8


def test_a_win_on_the_last_turn_still_pays_plus_one() -> None:
    """TextArena State.step: a game set won returns before the turn-limit check."""
    env = MastermindEnv(9, max_turns=1)
    env.reset()
    done, info = env.step(code(env.secret))
    assert (done, info["reward"]) == (True, 1.0)


def test_running_out_of_turns_pays_zero() -> None:
    """TextArena State.step: at ``max_turns`` the game ends "Turn limit reached" at 0."""
    env = MastermindEnv(9, max_turns=3)
    env.reset()
    wrong = next(list(p) for p in permutations(range(1, 7), 4) if list(p) != env.secret)
    results = [env.step(code(wrong)) for _ in range(3)]
    assert [done for done, _ in results] == [False, False, True]
    assert [info["reward"] for _, info in results] == [0.0, 0.0, 0.0]
    assert results[-1][1]["reason"] == "turn limit reached"
    assert env.close() == {0: 0.0}
    assert "The code was" in results[-1][1]["reply"]


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("I think it is 1 2 3 4.", "no bracketed code"),  # quoted without brackets
        ("[1,2,3,4]", "no bracketed code"),  # not space-separated numbers
        ("[1 2 3]", "exactly 4 numbers"),
        ("[1 2 3 4 5]", "exactly 4 numbers"),
        ("[0 1 2 3]", "from 1 to 6"),
        ("[1 2 3 7]", "from 1 to 6"),
        ("[1 1 2 3]", "may not repeat"),
    ],
)
def test_an_invalid_guess_is_forgiven_once_then_loses(reply: str, why: str) -> None:
    """env.py validation + State.set_invalid_move (error_allowance 1): resubmit, then -1."""
    env = MastermindEnv(1)
    env.reset()
    done, info = env.step(reply)
    assert (done, info["reward"], info["turn"]) == (False, 0.0, 0)  # no turn used
    assert why in info["invalid"] and "play again" in info["reply"]
    done, info = env.step(reply)
    assert (done, info["reward"]) == (True, -1.0)
    assert info["reason"].startswith("Invalid move:") and env.close() == {0: -1.0}


def test_a_valid_guess_resets_the_error_count() -> None:
    """State.step: a valid move rotates the player and resets ``error_count`` to 0."""
    env = MastermindEnv(1)
    env.reset()
    wrong = next(list(p) for p in permutations(range(1, 7), 4) if list(p) != env.secret)
    for _ in range(3):
        assert env.step("[9 9 9 9]")[0] is False
        assert env.step(code(wrong))[0] is False
    assert env.turns == 3


def test_repeats_allowed_when_duplicate_numbers() -> None:
    """env.py: ``duplicate_numbers`` lets the code and the guesses repeat digits."""
    env = MastermindEnv(2, duplicate_numbers=True)
    env.reset()
    done, info = env.step("[1 1 1 1]")
    assert "invalid" not in info and info["black"] == env.secret.count(1)


def test_only_the_first_bracketed_code_counts() -> None:
    """env.py: ``re.search`` takes the first ``[..]``; quoted codes go without brackets."""
    env = MastermindEnv(3)
    env.reset()
    done, info = env.step("Not 6 5 4 3 again; [1 2 3 4] and later maybe [4 3 2 1]")
    assert info["guess"] == [1, 2, 3, 4]


def test_the_seed_decides_the_whole_game() -> None:
    """Same seed, same agent: the same transcript and rewards (the original left it unseeded)."""

    class Scripted(Agent):
        def get_action(
            self, messages: list[dict[str, Any]], agent_state: Any = None, **kwargs: Any
        ) -> tuple[str, Any]:
            n = agent_state or 0
            return ["[1 2 3 4]", "[2 3 4 5]", "[3 4 5 6]"][n % 3], n + 1

    runs = [run_episode(MastermindEnv(5, max_turns=4), Scripted()) for _ in range(2)]
    assert runs[0] == runs[1]
