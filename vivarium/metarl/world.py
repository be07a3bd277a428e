"""A MetaRLGym game as a Vivarium world: every agent plays its own episode, the rewards traced.

The games (``TwentyQuestionsEnv``, ``MastermindEnv``) are single-player. ``GameWorld`` gives each
agent its own game, seeded from the run's seed and the agent's id, so that a run of N LLM agents
is N independent episodes that the trace records side by side. An agent's move is the content of
its ``post_message``; the game's answer, the step's reward and whether the game is over go in
the action's ``result`` (``{"reward", "done", "reply", "turn", "won"}``): a ``reward`` in the
results is what ``run.to_trajectories()`` takes as the environment's own reward. Once an agent's game is over it
is barred from deciding (no model call is made and the row says why), so an episode ends where
the game does and no model tokens are spent on a finished game.

Example:
    >>> from vivarium import Experiment
    >>> from vivarium.metarl.world import GameWorld
    >>> exp = Experiment(world=GameWorld, policy="cognitive", agents=3, steps=5,
    ...                  llm={"mock": True}, world_options={"words": ["dog", "cat"]})
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vivarium.errors import ConfigError
from vivarium.metarl.env import MultistepEnv
from vivarium.metarl.mastermind import MastermindEnv
from vivarium.metarl.twenty_questions import TwentyQuestionsEnv
from vivarium.seeding import canonical_json, derive_seed
from vivarium.types import ActionRequest, ActionResult
from vivarium.worlds.registry import ActionRegistry

GAMES: dict[str, type[MultistepEnv]] = {
    TwentyQuestionsEnv.name: TwentyQuestionsEnv,
    MastermindEnv.name: MastermindEnv,
}
WORLD_PREFIX = "metarl:"
"""The world's name is the game's behind it (``metarl:twenty_questions``)."""
GAME_OVER = "the game is over"
MOVE_ACTION = "post_message"


# No docstring: pydantic would put it in the tool schema an LLM is shown.
class MoveArgs(BaseModel):  # noqa: D101
    model_config = ConfigDict(extra="forbid")
    content: str = Field(description="Your move in the game: what you say to the game master.")


def _move(world: GameWorld, request: ActionRequest, args: MoveArgs) -> ActionResult:
    return world.play(request.agent_id, args.content)


GAME_ACTIONS = ActionRegistry(default_tool=MOVE_ACTION)
GAME_ACTIONS.action(MOVE_ACTION, "Make your move in the game (a question or a guess).", MoveArgs)(
    _move
)


class GameWorld:
    """One MetaRLGym game per agent; the game's reward recorded in each move's ``result``.

    It implements ``World``, ``NamedWorld``, ``ActionWorld`` and ``LLMQuotaWorld`` (used only to
    bar an agent whose game is over) of ``vivarium.worlds.base``.

    Args:
        agent_ids: The run's agents; each gets its own game.
        seed: The run's seed; agent ``a``'s game is seeded with ``derive_seed(seed, "metarl",
            a)``, so its secret does not depend on how many agents play.
        game: ``"twenty_questions"`` or ``"mastermind"``.
        **options: Passed to the game (``words``, ``max_turns``, ``question_cost``, ...).

    Raises:
        ConfigError: An unknown game, or options the game refuses.
    """

    registry = GAME_ACTIONS

    def __init__(
        self, agent_ids: list[str], seed: int = 0, game: str = "twenty_questions", **options: Any
    ) -> None:
        if game not in GAMES:
            raise ConfigError(f"unknown game {game!r}; choose one of {', '.join(GAMES)}")
        self.game = game
        self.name = WORLD_PREFIX + game
        try:
            self.envs: dict[str, MultistepEnv] = {
                a: GAMES[game](derive_seed(seed, "metarl", a), **options) for a in agent_ids
            }
        except TypeError as exc:
            raise ConfigError(f"bad options for {game}: {exc}") from None
        for env in self.envs.values():
            env.reset()

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        """The agent's game so far as channel messages (its own moves authored by it).

        A policy written for the channel world reads it as is: the game's system and user
        messages are authored by ``system`` and ``user``.
        """
        messages: list[dict[str, Any]] = []
        turn = 0
        for m in self.envs[agent_id].messages:
            role = str(m["role"])
            if role == "assistant":
                messages.append({"time_step": turn, "author_id": agent_id, "content": m["content"]})
                turn += 1
            else:
                author = role
                messages.append(
                    {"time_step": max(turn - 1, 0), "author_id": author, "content": m["content"]}
                )
        return {
            "time_step": time_step,
            "agent_id": agent_id,
            "messages": messages,
            "tools": self.registry.names(),
        }

    def apply(self, request: ActionRequest) -> ActionResult:
        """Play the move through the registry (another action is refused, using no turn)."""
        return self.registry.dispatch(self, request)

    def play(self, agent_id: str, text: str) -> ActionResult:
        """One move of ``agent_id``'s game; its outcome and reward as the action's result."""
        env = self.envs[agent_id]
        if env.done:
            return ActionResult.failed(GAME_OVER)
        _, reward, done, info = env.turn(text)
        return ActionResult.ok(
            {
                "reward": reward,
                "done": done,
                "reply": info["reply"],
                "turn": info["turn"],
                "won": bool(info.get("won")),
            }
        )

    def over_llm_quota(self, agent_id: str) -> str | None:
        """Bar an agent whose game is over: its episode has ended."""
        return GAME_OVER if self.envs[agent_id].done else None

    def record_llm_usage(self, agent_id: str, tokens: int) -> None:
        """Games budget no tokens."""

    def state_digest(self) -> str:
        """A hash of every agent's chat so far."""
        chats = {a: env.messages for a, env in self.envs.items()}
        return hashlib.sha256(canonical_json(chats).encode()).hexdigest()[:16]
