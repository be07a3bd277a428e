"""Twenty questions: guess the secret word with yes/no questions; a seeded, rule-based game.

MetaRLGym's game asks an LLM gamemaster; this one answers from a table of word attributes, so a
run is reproducible and costs nothing. The rewards are MetaRLGym's (see ``vivarium.metarl.env``):
+1 for the right word, 0 when the turns run out, -1 for a second wrong guess in a row; the
first wrong guess is an invalid move, forgiven once per turn. ``BisectingAgent`` always wins.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vivarium.errors import ConfigError
from vivarium.metarl.agent import Agent
from vivarium.metarl.env import Move, MultistepEnv
from vivarium.seeding import derive_seed

Category = Literal["animal", "food", "plant", "object"]
Size = Literal["small", "medium", "large"]


@dataclass(frozen=True, slots=True)
class WordInfo:
    """What the game knows about a word. ``object`` means man-made."""

    word: str
    category: Category
    size: Size
    color: str
    can_fly: bool = False
    in_water: bool = False
    has_legs: bool = False


WORDS: dict[str, WordInfo] = {
    w.word: w
    for w in (
        WordInfo("dog", "animal", "medium", "brown", has_legs=True),
        WordInfo("cat", "animal", "small", "black", has_legs=True),
        WordInfo("elephant", "animal", "large", "gray", has_legs=True),
        WordInfo("mouse", "animal", "small", "gray", has_legs=True),
        WordInfo("eagle", "animal", "medium", "brown", can_fly=True, has_legs=True),
        WordInfo("shark", "animal", "large", "gray", in_water=True),
        WordInfo("goldfish", "animal", "small", "orange", in_water=True),
        WordInfo("whale", "animal", "large", "blue", in_water=True),
        WordInfo("apple", "food", "small", "red"),
        WordInfo("banana", "food", "small", "yellow"),
        WordInfo("carrot", "food", "small", "orange"),
        WordInfo("bread", "food", "small", "brown"),
        WordInfo("egg", "food", "small", "white"),
        WordInfo("tree", "plant", "large", "green"),
        WordInfo("rose", "plant", "small", "red"),
        WordInfo("car", "object", "large", "red"),
        WordInfo("chair", "object", "medium", "brown", has_legs=True),
        WordInfo("phone", "object", "small", "black"),
        WordInfo("airplane", "object", "large", "white", can_fly=True),
        WordInfo("boat", "object", "large", "white", in_water=True),
    )
}
DEFAULT_WORDS: tuple[str, ...] = tuple(WORDS)
COLORS = ("black", "blue", "brown", "gray", "green", "orange", "red", "white", "yellow")

# Attribute ids and their yes/no rule; the keywords a question may use for each.
ATTRIBUTES: dict[str, Callable[[WordInfo], bool]] = {
    "animal": lambda w: w.category == "animal",
    "food": lambda w: w.category == "food",
    "plant": lambda w: w.category == "plant",
    "man_made": lambda w: w.category == "object",
    "alive": lambda w: w.category in ("animal", "plant"),
    "can_fly": lambda w: w.can_fly,
    "in_water": lambda w: w.in_water,
    "has_legs": lambda w: w.has_legs,
    "small": lambda w: w.size == "small",
    "medium": lambda w: w.size == "medium",
    "large": lambda w: w.size == "large",
    **{c: (lambda w, c=c: w.color == c) for c in COLORS},
}
KEYWORDS: dict[str, str] = {
    **dict.fromkeys(("animal", "animals", "creature"), "animal"),
    **dict.fromkeys(("food", "edible", "eat", "eaten"), "food"),
    **dict.fromkeys(("plant", "plants"), "plant"),
    **dict.fromkeys(("man-made", "manmade", "artificial", "object"), "man_made"),
    **dict.fromkeys(("alive", "living"), "alive"),
    **dict.fromkeys(("fly", "flies", "flying"), "can_fly"),
    **dict.fromkeys(("water", "swim", "swims", "sea", "ocean"), "in_water"),
    **dict.fromkeys(("legs", "leg"), "has_legs"),
    **dict.fromkeys(("small", "tiny", "little", "smaller"), "small"),
    **dict.fromkeys(("medium", "medium-sized"), "medium"),
    **dict.fromkeys(("big", "large", "huge", "bigger", "larger"), "large"),
    **{c: c for c in COLORS},
    "grey": "gray",
}
# The questions BisectingAgent asks, in tie-break order; the game must answer each as its rule.
QUESTIONS: dict[str, str] = {
    "animal": "Is it an animal?",
    "food": "Is it food?",
    "plant": "Is it a plant?",
    "man_made": "Is it man-made?",
    "can_fly": "Can it fly?",
    "in_water": "Does it live in water?",
    "has_legs": "Does it have legs?",
    "small": "Is it small?",
    "medium": "Is it medium-sized?",
    "large": "Is it large?",
    **{c: f"Is it {c}?" for c in COLORS},
}

QUESTION_COST = 0.01  # Vivarium's former per-question cost; opt in with question_cost=
MAX_TURNS = 21  # MetaRLGym: twenty questions, then the final guess
HELP = (
    "I can only answer yes/no questions about its kind (animal, food, plant, man-made), size, "
    "colour, and whether it flies, lives in water or has legs. To guess, say 'guess: <word>' "
    "or put the word in square brackets, like [word]."
)
LAST_QUESTION = " That was your last question: make your guess."
_BRACKETED = re.compile(r"\[([a-zA-Z\s_]+)\]")
_GUESS = re.compile(
    r"\b(?:guess|final answer)\b(?:\s+is\b)?\s*[:\-]?\s*(?:it\s+is\s+|it'?s\s+)?"
    r"(?:an?\s+|the\s+)?([a-z][a-z\-]*)"
)
_IS_IT = re.compile(r"^\s*is\s+it\s+(?:an?\s+|the\s+)?([a-z][a-z\-]*)\s*[?.!]*\s*$")
_TOKEN = re.compile(r"[a-z]+(?:-[a-z]+)*")


def interpret(text: str) -> tuple[str, Any]:
    """``("guess", words)``, ``("question", [attribute ids])`` or ``("invalid", None)``.

    Rules, in order: a bracketed word in a reply without a question mark is a guess
    (MetaRLGym's form, ``[elephant]``); ``guess: X`` (or ``my guess is X``, ``final answer:
    X``) is a guess; a question naming attributes is asked about all of them (yes only if all
    hold; negations are not understood); ``is it X?`` with X a known word is a guess; anything
    else is invalid.
    """
    if "?" not in text and (m := _BRACKETED.search(text)):
        return "guess", " ".join(m.group(1).lower().replace("_", " ").split())
    lowered = text.lower().replace("man made", "man-made")
    if m := _GUESS.search(lowered):
        return "guess", m.group(1)
    attributes = list(dict.fromkeys(KEYWORDS[t] for t in _TOKEN.findall(lowered) if t in KEYWORDS))
    if attributes:
        return "question", attributes
    if (m := _IS_IT.match(lowered)) and m.group(1) in WORDS:
        return "guess", m.group(1)
    return "invalid", None


def guessed(secret: str, guess: str) -> bool:
    """Whether a guess names the secret: MetaRLGym's "the word is in the guess", by whole words."""
    return re.search(rf"(?<![a-z\-]){re.escape(secret)}(?![a-z\-])", guess.lower()) is not None


def answer(word: str, attributes: Sequence[str]) -> bool:
    """Whether every attribute (an ``ATTRIBUTES`` id) holds for ``word``."""
    info = WORDS[word]
    return all(ATTRIBUTES[a](info) for a in attributes)


class TwentyQuestionsEnv(MultistepEnv):
    """Guess the secret word with yes/no questions. The secret is fixed by the seed.

    A question (or a reply the game cannot read) uses up a turn and pays 0 (``question_cost``
    makes it cost); the right word wins +1; a wrong word is an invalid move: told "no", the
    player plays again, and a second wrong word in a row ends the game at -1. After
    ``max_turns`` turns the game ends at 0. Play with ``step`` (MetaRLGym's ``done, info``) or
    ``turn`` (``messages, reward, done, info``); see ``MultistepEnv``.
    """

    name = "twenty_questions"

    def __init__(
        self,
        seed: int,
        words: Sequence[str] | None = None,
        max_turns: int = MAX_TURNS,
        *,
        question_cost: float = 0.0,
        error_allowance: int = 1,
        episodes_per_trial: int = 1,
        free_shots: int = 0,
    ) -> None:
        chosen = tuple(words) if words is not None else DEFAULT_WORDS
        unknown = [w for w in chosen if w not in WORDS]
        if not chosen or unknown:
            raise ConfigError(
                f"words must be a non-empty subset of {', '.join(WORDS)}; unknown: {unknown}"
            )
        self.words = chosen
        self.question_cost = question_cost
        self.secret = ""
        super().__init__(
            seed,
            max_turns=max_turns,
            error_allowance=error_allowance,
            episodes_per_trial=episodes_per_trial,
            free_shots=free_shots,
        )

    def _new_task(self) -> None:
        self.secret = random.Random(derive_seed(self.seed, "twenty_questions")).choice(self.words)

    def _opening(self) -> list[dict[str, str]]:
        return [
            {
                "role": "system",
                "content": f"Let's play twenty questions. {HELP} You have {self.max_turns} turns.",
            },
            {
                "role": "user",
                "content": "I am thinking of one of these: " + ", ".join(sorted(self.words)) + ".",
            },
        ]

    def _move(self, text: str) -> Move:
        kind, value = interpret(text)
        info: dict[str, Any] = {"kind": kind}
        if kind == "guess":
            info["guess"] = value
            if guessed(self.secret, value):
                return Move(f"Correct! It was {self.secret}.", won=True, info=info)
            return Move(f"No, it is not {value}.", invalid=f"wrong guess: {value}", info=info)
        if kind == "question":
            yes = answer(self.secret, value)
            info["answer"] = "yes" if yes else "no"
            reply = "Yes." if yes else "No."
        else:
            info["answer"] = "invalid"
            reply = HELP
        if self.turns + 2 == self.max_turns:  # one turn left after this one
            reply += LAST_QUESTION
        return Move(reply, reward=0.0 - self.question_cost, info=info)  # never -0.0

    def _ending(self, won: bool, reason: str) -> tuple[str, dict[str, Any]]:
        if won:
            return "", {"secret": self.secret}
        if reason == "turn limit reached":
            return f"Out of turns: it was {self.secret}.", {"secret": self.secret}
        return f"It was {self.secret}.", {"secret": self.secret}


_YES_NO = re.compile(r"^(?:[\w\-]+:\s*)?(yes|no)\b", re.IGNORECASE)  # "Yes." or "user: Yes."


class BisectingAgent(Agent):
    """Asks the question that best halves the remaining candidates, then guesses.

    Its state is ``{"candidates": [...], "asked": attribute id or None}``: plain JSON, so it
    also runs under ``AgentPolicyAdapter``. Wins whenever the answers follow ``WORDS``.
    """

    def __init__(self, words: Sequence[str] | None = None) -> None:
        self.words = tuple(words) if words is not None else DEFAULT_WORDS

    def get_action(
        self, messages: list[dict[str, Any]], agent_state: Any = None, **kwargs: Any
    ) -> tuple[str, Any]:
        """Drop the candidates the last answer ruled out; ask the next question or guess."""
        state = agent_state or {"candidates": list(self.words), "asked": None}
        candidates = [w for w in state["candidates"] if w in WORDS]
        asked = state.get("asked")
        if asked is not None:
            heard = _last_yes_no(messages)
            if heard is not None:
                candidates = [w for w in candidates if answer(w, [asked]) == heard]
        question = self._best_question(candidates)
        if question is None or len(candidates) <= 1:
            guess = candidates[0] if candidates else self.words[0]
            return f"guess: {guess}", {"candidates": candidates, "asked": None}
        return QUESTIONS[question], {"candidates": candidates, "asked": question}

    @staticmethod
    def _best_question(candidates: list[str]) -> str | None:
        best, best_gap = None, len(candidates)
        for attribute in QUESTIONS:
            yes = sum(answer(w, [attribute]) for w in candidates)
            if 0 < yes < len(candidates) and abs(2 * yes - len(candidates)) < best_gap:
                best, best_gap = attribute, abs(2 * yes - len(candidates))
        return best


def _last_yes_no(messages: list[dict[str, Any]]) -> bool | None:
    for m in reversed(messages):
        if m.get("role") == "assistant":
            continue
        found = _YES_NO.match(str(m.get("content") or "").strip())
        return None if found is None else found.group(1).lower() == "yes"
    return None
