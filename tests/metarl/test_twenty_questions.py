"""Twenty Questions with MetaRLGym's rewards and guess format, seeded.

Original: andrewsiah/MetaRLGym (branch envinfo) ``agentsgym/envs/TwentyQuestions/env.py`` and
README: a guess is ``[word]`` in a reply without "?" (else it is a question); right word +1;
questions pay 0 (the README: "no question-count penalties"); a wrong word goes to TextArena's
``set_invalid_move`` (error_allowance 1: forgiven once, a second in a row pays -1 and ends);
``max_turns`` defaults to 21 (twenty questions, then the guess), ending at 0 ("Draw.");
near the end the player is told to make the final guess.
"""

from __future__ import annotations

import pytest

from vivarium.metarl import (
    MAX_TURNS,
    QUESTION_COST,
    BisectingAgent,
    TwentyQuestionsEnv,
    guessed,
    interpret,
    run_episode,
)


def game(word: str, **kwargs: object) -> TwentyQuestionsEnv:
    env = TwentyQuestionsEnv(0, words=[word], **kwargs)  # type: ignore[arg-type]
    env.reset()
    return env


def test_the_seed_fixes_the_secret() -> None:
    """reset(seed): the same seed chooses the same word; a new seed may choose another."""
    assert [TwentyQuestionsEnv(s).secret for s in range(10)] == [
        TwentyQuestionsEnv(s).secret for s in range(10)
    ]
    env = TwentyQuestionsEnv(1)
    env.reset(seed=8)
    assert env.secret == TwentyQuestionsEnv(8).secret


def test_bracketed_guess_and_question_mark_rule() -> None:
    """env.py: ``\\[([a-zA-Z\\s_]+)\\]`` is a guess unless the reply holds a '?'."""
    assert interpret("[elephant]") == ("guess", "elephant")
    assert interpret("My final word: [Diving Bell]") == ("guess", "diving bell")
    assert interpret("Is it an [animal]?")[0] == "question"
    env = game("dog")
    done, info = env.step("I am sure now. [dog]")
    assert (done, info["reward"], info["won"]) == (True, 1.0, True)


def test_questions_pay_nothing_and_a_right_word_pays_one() -> None:
    """README rewards: win +1; questions 0 (no question-count penalty)."""
    result = run_episode(TwentyQuestionsEnv(3), BisectingAgent())
    assert result.won
    assert result.rewards == [0.0] * (result.turns - 1) + [1.0]


def test_a_wrong_word_is_forgiven_once_then_loses() -> None:
    """env.py: a wrong guess is ``set_invalid_move``; with allowance 1, the second ends at -1."""
    env = game("dog")
    done, info = env.step("[cat]")
    assert (done, info["reward"], info["turn"]) == (False, 0.0, 0)
    assert info["invalid"] == "wrong guess: cat" and "dog" not in info["reply"]
    done, info = env.step("guess: cow")
    assert (done, info["reward"], info["secret"]) == (True, -1.0, "dog")
    assert env.close() == {0: -1.0}


def test_a_question_between_wrong_words_resets_the_allowance() -> None:
    """TextArena State.step: a valid move resets the error count."""
    env = game("dog")
    for _ in range(3):
        assert env.step("[cat]")[0] is False
        assert env.step("Is it an animal?")[0] is False
    assert env.turns == 3


def test_turn_limit_is_21_and_pays_zero() -> None:
    """env.py: ``max_turns`` default 21; the limit ends the game at 0; a last-guess prompt."""
    assert MAX_TURNS == 21
    env = game("dog")
    infos = [env.step("Is it an animal?")[1] for _ in range(21)]
    assert [i["reward"] for i in infos] == [0.0] * 21
    assert infos[-1]["reason"] == "turn limit reached" and env.done
    assert "last question" in infos[19]["reply"]  # after 20 questions: make the guess
    assert "last question" not in infos[18]["reply"]
    assert "Out of turns: it was dog." in infos[-1]["reply"]


def test_whole_word_match_and_the_optional_question_cost() -> None:
    """env.py checks ``game_word in guess``; here by whole words, so 'carrot' is not 'car'."""
    assert guessed("car", "a red car") and not guessed("car", "carrot")
    env = game("car")
    assert env.step("[carrot]")[1]["reward"] == 0.0  # wrong: forgiven once
    costly = game("dog", question_cost=QUESTION_COST)
    assert costly.step("Is it an animal?")[1]["reward"] == pytest.approx(-QUESTION_COST)
