"""MetaRLGym interop: agents that map chat messages to text, and a small text game to test them.

A MetaRLGym ``Agent`` maps ``(messages, agent_state)`` to ``(action_text, new_agent_state)``.

- ``AgentPolicyAdapter`` runs such an agent as a Vivarium policy. It stays pure: the agent state
  comes in through the observation (``"agent_state"``) and goes out in
  ``ActionRequest.metadata["agent_state"]``, so the engine owns, records and checkpoints it.
- ``PolicyAgent`` runs a Vivarium policy (an LLM policy, say) as a MetaRLGym agent.
- ``TwentyQuestionsEnv`` is a deterministic multi-step game; ``BisectingAgent`` wins it.
"""

from __future__ import annotations

import json
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vivarium.gateways.base import LLMResponse
from vivarium.policies.parsing import FALLBACK_ACTION, ParsedAction, parse_action
from vivarium.policies.prompting import arg_models_for, available_tools, default_registry
from vivarium.seeding import derive_seed
from vivarium.types import ActionRequest
from vivarium.worlds.registry import ActionRegistry


class Agent(ABC):
    """The MetaRLGym agent interface."""

    @abstractmethod
    def get_action(self, messages: list[dict[str, Any]], agent_state: Any) -> tuple[str, Any]:
        """The next action text and the new agent state."""

    def reset(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Forget anything kept between episodes (state passed in and out needs nothing)."""

    def update_memory(
        self, messages: list[dict[str, Any]], action: str, reward: float, agent_state: Any
    ) -> Any:
        """Fold a step's outcome into the agent state; by default the state is unchanged."""
        return agent_state


# -- a MetaRLGym agent as a Vivarium policy ----------------------------------------------------
ADAPTER_SYSTEM_PROMPT = (
    "You are {agent_id}, one of several agents in a shared message channel. "
    "Reply with the text to post."
)


def observation_to_chat(
    observation: Mapping[str, Any], agent_id: str, system_prompt: str | None = None
) -> list[dict[str, str]]:
    """Chat messages for an observation, as a MetaRLGym agent reads them.

    The agent's own posts become ``assistant`` turns, everyone else's ``user`` turns prefixed
    with the author (``agent_001: hello``). The system prompt names the other actions when the
    observation offers more than ``post_message``.

    Args:
        observation: A channel observation (``messages``, ``tools``).
        agent_id: The agent the chat is for.
        system_prompt: Replaces ``ADAPTER_SYSTEM_PROMPT``; ``{agent_id}`` is filled in.

    Returns:
        The chat, system message first.
    """
    tools = available_tools(observation)
    system = (system_prompt or ADAPTER_SYSTEM_PROMPT).replace("{agent_id}", agent_id)
    others = [t for t in tools if t != "post_message"]
    if others:
        system += (
            ' To take another action, reply with JSON: {"action": "<name>", "arguments": {...}}.'
            f" Actions: {', '.join(tools)}."
        )
    chat = [{"role": "system", "content": system}]
    for m in observation.get("messages") or []:
        author, content = str(m.get("author_id")), str(m.get("content"))
        if author == agent_id:
            chat.append({"role": "assistant", "content": content})
        else:
            chat.append({"role": "user", "content": f"{author}: {content}"})
    return chat


def text_to_action(
    text: str, allowed: Sequence[str], arg_models: Mapping[str, type[BaseModel]] | None = None
) -> ParsedAction:
    """The action a free-text reply stands for.

    A valid JSON action in the text wins; else the text is posted as is (when ``post_message``
    is allowed); else the reply becomes ``noop`` with the reason in its metadata.

    Args:
        text: The agent's reply.
        allowed: The action names the agent may take.
        arg_models: Argument schemas to check a JSON action against, by action name.

    Returns:
        The parsed action; ``metadata["parse_path"]`` says which rule applied.
    """
    parsed = parse_action(LLMResponse(content=text), allowed, arg_models)
    if parsed.metadata["parse_path"] != "fallback":
        return parsed
    content = text.strip()
    if content and "post_message" in allowed:
        return ParsedAction(
            action_name="post_message",
            arguments={"content": content},
            reasoning=parsed.reasoning,
            metadata={"parse_path": "plain_text"},
        )
    reason = parsed.metadata["fallback_reason"] if content else "empty reply"
    if content and reason == "no action found":
        reason = "plain text but post_message is not available"
    return ParsedAction(
        action_name=FALLBACK_ACTION,
        reasoning=parsed.reasoning,
        metadata={"parse_path": "fallback", "fallback_reason": reason},
    )


def _detached_json(value: Any) -> Any:
    """A JSON round trip: proves the state can be recorded and shares nothing with the agent."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"agent_state must be JSON-serialisable: {exc}") from exc


class AgentPolicyAdapter:
    """A MetaRLGym ``Agent`` as a Vivarium policy (``decide``), with the state kept outside."""

    name = "metarl"
    uses_agent_state = True  # the engine passes observation["agent_state"] and keeps the new one

    def __init__(
        self,
        agent: Agent,
        *,
        registry: ActionRegistry | None = None,
        system_prompt: str | None = None,
    ) -> None:
        self.agent = agent
        self._own_registry = registry is not None
        self.registry = registry or default_registry()
        self.system_prompt = system_prompt

    def use_world_actions(self, registry: ActionRegistry, world: str) -> None:
        """Check replies' arguments with the registry of the world the agent acts in.

        Called when a run is built; a registry given to the constructor is kept.
        """
        if not self._own_registry:
            self.registry = registry

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Ask the wrapped agent for its reply and turn it into an action.

        The agent state comes from ``observation["agent_state"]`` and the new one goes out in
        the request's ``metadata["agent_state"]``, both as detached JSON copies.

        Raises:
            TypeError: The agent state is not JSON-serialisable.
        """
        state = _detached_json(observation.get("agent_state"))
        chat = observation_to_chat(observation, agent_id, self.system_prompt)
        text, new_state = self.agent.get_action(chat, state)
        tools = available_tools(observation)
        parsed = text_to_action(str(text), tools, arg_models_for(tools, self.registry))
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=parsed.action_name,
            arguments=parsed.arguments,
            reasoning=parsed.reasoning,
            metadata={**parsed.metadata, "agent_state": _detached_json(new_state)},
        )


# -- a Vivarium policy as a MetaRLGym agent ----------------------------------------------------
def action_text(request: ActionRequest) -> str:
    """What an action says: a posted message's content, else the action name."""
    content = request.arguments.get("content")
    return content if isinstance(content, str) else request.action_name


class PolicyAgent(Agent):
    """A Vivarium policy as a MetaRLGym ``Agent``.

    Chat messages become channel messages (``assistant`` turns are this agent's, other roles are
    authors named by their role); the step is the number of turns taken. The agent state goes
    to the policy as ``observation["agent_state"]`` and comes back from
    ``metadata["agent_state"]`` when the policy returns one (an ``AgentPolicyAdapter`` does).
    """

    def __init__(
        self,
        policy: Any,
        *,
        agent_id: str = "agent_000",
        run_id: str = "metarl",
        tools: Sequence[str] = ("post_message",),
    ) -> None:
        self.policy = policy
        self.agent_id = agent_id
        self.run_id = run_id
        self.tools = tuple(tools)

    def observation(self, messages: list[dict[str, Any]], agent_state: Any) -> dict[str, Any]:
        """The channel observation the policy sees for a chat (the step is the turns taken)."""
        channel: list[dict[str, Any]] = []
        turns = 0
        for m in messages:
            role = str(m.get("role", "user"))
            content = str(m.get("content") or "")
            if role == "assistant":
                channel.append({"time_step": turns, "author_id": self.agent_id, "content": content})
                turns += 1
            else:
                step = max(turns - 1, 0)  # a reply belongs to the step it answers
                channel.append({"time_step": step, "author_id": role, "content": content})
        return {
            "time_step": turns,
            "agent_id": self.agent_id,
            "messages": channel,
            "tools": self.tools,
            "agent_state": agent_state,
        }

    def get_action(self, messages: list[dict[str, Any]], agent_state: Any) -> tuple[str, Any]:
        """The policy's decision as text, and the agent state it returned (else the same)."""
        observation = self.observation(messages, agent_state)
        request = self.policy.decide(
            run_id=self.run_id,
            time_step=observation["time_step"],
            agent_id=self.agent_id,
            observation=observation,
        )
        return action_text(request), request.metadata.get("agent_state", agent_state)


# -- twenty questions --------------------------------------------------------------------------
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

QUESTION_COST = 0.01
WIN_REWARD = 1.0
HELP = (
    "I can only answer yes/no questions about its kind (animal, food, plant, man-made), size, "
    "colour, and whether it flies, lives in water or has legs. To guess, say 'guess: <word>'."
)
_GUESS = re.compile(
    r"\b(?:guess|final answer)\b(?:\s+is\b)?\s*[:\-]?\s*(?:it\s+is\s+|it'?s\s+)?"
    r"(?:an?\s+|the\s+)?([a-z][a-z\-]*)"
)
_IS_IT = re.compile(r"^\s*is\s+it\s+(?:an?\s+|the\s+)?([a-z][a-z\-]*)\s*[?.!]*\s*$")
_TOKEN = re.compile(r"[a-z]+(?:-[a-z]+)*")


def interpret(text: str) -> tuple[str, Any]:
    """``("guess", word)``, ``("question", [attribute ids])`` or ``("invalid", None)``.

    Rules, in order: ``guess: X`` (or ``my guess is X``, ``final answer: X``) is a guess; a
    question naming attributes is asked about all of them (yes only if all hold; negations are
    not understood); ``is it X?`` with X a known word is a guess; anything else is invalid.
    """
    lowered = text.lower().replace("man made", "man-made")
    if m := _GUESS.search(lowered):
        return "guess", m.group(1)
    attributes = list(dict.fromkeys(KEYWORDS[t] for t in _TOKEN.findall(lowered) if t in KEYWORDS))
    if attributes:
        return "question", attributes
    if (m := _IS_IT.match(lowered)) and m.group(1) in WORDS:
        return "guess", m.group(1)
    return "invalid", None


def answer(word: str, attributes: Sequence[str]) -> bool:
    """Whether every attribute (an ``ATTRIBUTES`` id) holds for ``word``."""
    info = WORDS[word]
    return all(ATTRIBUTES[a](info) for a in attributes)


class TwentyQuestionsEnv:
    """Guess the secret word with yes/no questions. The secret is fixed by the seed.

    Each non-guess turn costs ``QUESTION_COST``; a guess ends the game with 1.0 if right, 0.0 if
    wrong; ``max_turns`` turns without a guess end it too. Messages are chat dicts
    (``role``/``content``); each ``step`` returns a fresh copy of all of them.
    """

    def __init__(self, seed: int, words: Sequence[str] | None = None, max_turns: int = 20) -> None:
        chosen = tuple(words) if words is not None else DEFAULT_WORDS
        unknown = [w for w in chosen if w not in WORDS]
        if not chosen or unknown:
            raise ValueError(
                f"words must be a non-empty subset of {', '.join(WORDS)}; unknown: {unknown}"
            )
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.words = chosen
        self.max_turns = max_turns
        self.seed = seed
        self.secret = ""
        self.turns = 0
        self.done = True
        self._messages: list[dict[str, str]] = []
        self._choose()

    def _choose(self) -> None:
        self.secret = random.Random(derive_seed(self.seed, "twenty_questions")).choice(self.words)

    def reset(self, seed: int | None = None) -> list[dict[str, str]]:
        """Start a game (with a new secret when ``seed`` is given); returns the opening chat."""
        if seed is not None:
            self.seed = seed
            self._choose()
        self.turns = 0
        self.done = False
        self._messages = [
            {
                "role": "system",
                "content": f"Let's play twenty questions. {HELP} You have {self.max_turns} turns.",
            },
            {
                "role": "user",
                "content": "I am thinking of one of these: " + ", ".join(sorted(self.words)) + ".",
            },
        ]
        return [dict(m) for m in self._messages]

    def step(self, action_text: str) -> tuple[list[dict[str, str]], float, bool, dict[str, Any]]:
        """Play one turn: a question is answered, a guess ends the game.

        Args:
            action_text: The agent's turn, read by ``interpret``.

        Returns:
            ``(messages, reward, done, info)``: the whole chat so far, this turn's reward,
            whether the game is over, and ``turn``/``kind``/``won`` (plus ``answer``, and
            ``secret`` once done).

        Raises:
            RuntimeError: The game is over; call ``reset()`` first.
        """
        if self.done:
            raise RuntimeError("the episode is over: call reset() first")
        self.turns += 1
        text = str(action_text)
        kind, value = interpret(text)
        info: dict[str, Any] = {"turn": self.turns, "kind": kind, "won": False}
        if kind == "guess":
            won = value == self.secret
            reward = WIN_REWARD if won else 0.0
            reply = f"Correct! It was {self.secret}." if won else f"No. It was {self.secret}."
            info["won"] = won
            self.done = True
        else:
            reward = -QUESTION_COST
            if kind == "question":
                yes = answer(self.secret, value)
                info["answer"] = "yes" if yes else "no"
                reply = "Yes." if yes else "No."
            else:
                info["answer"] = "invalid"
                reply = HELP
            if self.turns >= self.max_turns:
                reply += f" Out of turns: it was {self.secret}."
                self.done = True
        if self.done:
            info["secret"] = self.secret
        self._messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": reply},
        ]
        return [dict(m) for m in self._messages], reward, self.done, info


class EpisodeResult(BaseModel):
    """One game's outcome: total reward, turns taken, whether it was won, and the chat."""

    model_config = ConfigDict(extra="forbid")

    reward: float
    turns: int
    won: bool
    transcript: list[dict[str, Any]] = Field(default_factory=list)
    rewards: list[float] = Field(default_factory=list)


def run_episode(env: TwentyQuestionsEnv, agent: Agent) -> EpisodeResult:
    """One game: the agent's state is threaded through ``get_action`` and ``update_memory``."""
    agent.reset()
    messages = env.reset()
    state: Any = None
    rewards: list[float] = []
    won = False
    done = False
    while not done:
        text, state = agent.get_action(messages, state)
        messages, reward, done, info = env.step(text)
        state = agent.update_memory(messages, text, reward, state)
        rewards.append(reward)
        won = bool(info.get("won"))
    return EpisodeResult(
        reward=sum(rewards), turns=env.turns, won=won, transcript=messages, rewards=rewards
    )


_YES_NO = re.compile(r"^(?:[\w\-]+:\s*)?(yes|no)\b", re.IGNORECASE)  # "Yes." or "user: Yes."


class BisectingAgent(Agent):
    """Asks the question that best halves the remaining candidates, then guesses.

    Its state is ``{"candidates": [...], "asked": attribute id or None}``: plain JSON, so it
    also runs under ``AgentPolicyAdapter``. Wins whenever the answers follow ``WORDS``.
    """

    def __init__(self, words: Sequence[str] | None = None) -> None:
        self.words = tuple(words) if words is not None else DEFAULT_WORDS

    def get_action(self, messages: list[dict[str, Any]], agent_state: Any) -> tuple[str, Any]:
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
