"""Multi-step text games played by MetaRLGym agents: episodes, trials, free shots, sessions.

The rules every game here shares are MetaRLGym's (its games keep their state in TextArena's
``State``): a secret fixed for a task, one reward at the end of an episode (+1 a win, 0 the turn
limit, -1 a second invalid move in a row), and an invalid move (a malformed guess, a wrong word)
forgiven once per turn: the player is told why and plays again without using up a turn.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from vivarium.errors import ConfigError
from vivarium.metarl.agent import remember, reset_agent

WIN_REWARD = 1.0
INVALID_MOVE_REWARD = -1.0
TURN_LIMIT_REWARD = 0.0
PLAYER_ID = 0  # the single player, as TextArena numbers it


@dataclass(slots=True)
class Move:
    """A game's reading of one action, before the shared rules (turns, errors, rewards) apply.

    Attributes:
        reply: What the game says back.
        invalid: Why the move is invalid (``None`` for a valid move).
        won: The move wins the game.
        reward: A per-move reward on top of the end-of-episode one (a question cost, say).
        info: Game-specific facts for ``info`` (the answer, the pegs).
    """

    reply: str
    invalid: str | None = None
    won: bool = False
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


class Turn(NamedTuple):
    """One turn in Vivarium's (Gym's) form: ``messages, reward, done, info = env.turn(action)``."""

    messages: list[dict[str, Any]]
    reward: float
    done: bool
    info: dict[str, Any]


class EpisodeResult(BaseModel):
    """One game's outcome: total reward, turns taken, whether it was won, and the chat.

    ``free_shot`` marks an episode of a trial whose reward does not count (``run_trial``).
    """

    model_config = ConfigDict(extra="forbid")

    reward: float
    turns: int
    won: bool
    transcript: list[dict[str, Any]] = Field(default_factory=list)
    rewards: list[float] = Field(default_factory=list)
    session_id: str = ""
    free_shot: bool = False


class TrialResult(BaseModel):
    """A trial: several episodes of the same task, the agent state carried from one to the next.

    Attributes:
        session_id: The trial's session; every message of every episode carries it.
        episodes: Each episode as played (``reward`` is what the game paid).
        rewards: Each episode's counted reward: 0.0 for the free shots.
        final_reward: The last episode's reward, the one MetaRLGym's ``run_trial`` reports
            (``final_rewards``); always counted, since free shots are fewer than the episodes.
        total_reward: The sum of ``rewards``.
        final_completion_messages: The last episode's chat (MetaRLGym's key of that name).
        agent_state: The agent state after the last episode.
    """

    model_config = ConfigDict(extra="forbid")

    session_id: str
    episodes: list[EpisodeResult]
    rewards: list[float]
    final_reward: float
    total_reward: float
    final_completion_messages: list[dict[str, Any]] = Field(default_factory=list)
    agent_state: Any = None


class MultistepEnv(ABC):
    """A seeded single-player text game with MetaRLGym's step, episode and trial interface.

    Two ways to play a turn: ``done, info = env.step(action)`` as MetaRLGym's agent loop and
    TextArena do (the reward in ``info["reward"]``, the final one also in ``env.rewards`` as
    ``{0: reward}``), and ``messages, reward, done, info = env.turn(action)``, Vivarium's form.
    Every message carries the episode's ``session_id``; ``step`` accepts the assistant message
    itself (``{"role": "assistant", "content": ..., "session_id": ...}``) or its text, and refuses
    a message of another session.

    Subclasses choose the secret (``_new_task``), write the opening (``_opening``) and read a
    move (``_move``); the turn limit, the error allowance and the rewards are applied here.
    """

    name: ClassVar[str] = "multistep"

    def __init__(
        self,
        seed: int,
        *,
        max_turns: int,
        error_allowance: int = 1,
        episodes_per_trial: int = 1,
        free_shots: int = 0,
    ) -> None:
        if max_turns < 1:
            raise ConfigError("max_turns must be at least 1")
        if error_allowance < 0:
            raise ConfigError("error_allowance must be 0 or more")
        _check_trial(episodes_per_trial, free_shots)
        self.seed = seed
        self.max_turns = max_turns
        self.error_allowance = error_allowance
        self.episodes_per_trial = episodes_per_trial
        self.free_shots = free_shots
        self.session_id = ""
        self.turns = 0  # valid moves made (an invalid move uses up no turn)
        self.done = True
        self.rewards: dict[int, float] | None = None  # TextArena's shape, set when the game ends
        self._errors = 0
        self._sessions = 0
        self._messages: list[dict[str, Any]] = []
        self._new_task()

    # -- what a game defines ------------------------------------------------------------------
    @abstractmethod
    def _new_task(self) -> None:
        """Choose the task (the secret) from ``self.seed``."""

    @abstractmethod
    def _opening(self) -> list[dict[str, str]]:
        """The chat an episode starts with (``role``/``content``; the session is added)."""

    @abstractmethod
    def _move(self, text: str) -> Move:
        """Read one action and say what it does (the turn counter is not yet advanced)."""

    @abstractmethod
    def _ending(self, won: bool, reason: str) -> tuple[str, dict[str, Any]]:
        """What to add to the last reply, and the facts to reveal in ``info`` (the secret)."""

    # -- episodes -----------------------------------------------------------------------------
    @property
    def messages(self) -> list[dict[str, Any]]:
        """The episode's chat so far (copies)."""
        return [dict(m) for m in self._messages]

    def reset(self, seed: int | None = None, session_id: str | None = None) -> list[dict[str, Any]]:
        """Start an episode: the same task again, or a new one when ``seed`` is given.

        Args:
            seed: Chooses a new task; ``None`` replays the current one (a trial's next episode).
            session_id: The session the episode belongs to; by default a new one, numbered
                from the seed (``mastermind-7-0``), so runs are reproducible.

        Returns:
            The opening chat, each message carrying the session id.
        """
        if seed is not None:
            self.seed = seed
            self._new_task()
        if session_id is None:
            session_id = f"{self.name}-{self.seed}-{self._sessions}"
            self._sessions += 1
        self.session_id = str(session_id)
        self.turns = 0
        self.done = False
        self.rewards = None
        self._errors = 0
        self._messages = [{**m, "session_id": self.session_id} for m in self._opening()]
        return self.messages

    def turn(self, action: Any) -> Turn:
        """Play one action; Vivarium's form of ``step``.

        Args:
            action: The agent's reply: its text, or the assistant message holding it.

        Returns:
            ``(messages, reward, done, info)``: the whole chat so far, this turn's reward,
            whether the game is over, and ``info`` (``reward``, ``session_id``, ``turn``,
            ``reply``, the game's own keys, and ``reason`` plus the secret once over).

        Raises:
            RuntimeError: The game is over; call ``reset()`` first.
            ConfigError: The message belongs to another session.
        """
        text = self._action_text(action)
        if self.done:
            raise RuntimeError("the episode is over: call reset() first")
        move = self._move(text)
        reward = move.reward
        info: dict[str, Any] = {"session_id": self.session_id, **move.info}
        reply = move.reply
        reason = ""
        if move.invalid is not None:
            info["invalid"] = move.invalid
            if self._errors < self.error_allowance:
                self._errors += 1
                reply += " That move was not valid; play again (it does not use up a turn)."
            else:
                reward += INVALID_MOVE_REWARD
                reason = f"Invalid move: {move.invalid}"
                self.done = True
        else:
            self._errors = 0
            self.turns += 1
            if move.won:
                reward += WIN_REWARD
                reason = "won"
                self.done = True
            elif self.turns >= self.max_turns:
                reward += TURN_LIMIT_REWARD
                reason = "turn limit reached"
                self.done = True
        info["turn"] = self.turns
        info["won"] = move.won
        if self.done:
            self.rewards = {PLAYER_ID: reward}
            info["reason"] = reason
            closing, revealed = self._ending(move.won, reason)
            info.update(revealed)
            reply = f"{reply} {closing}".strip()
        info["reply"] = reply
        info["reward"] = reward
        self._messages += [
            {"role": "assistant", "content": text, "session_id": self.session_id},
            {"role": "user", "content": reply, "session_id": self.session_id},
        ]
        return Turn(self.messages, reward, self.done, info)

    def step(self, action: Any, session_id: str | None = None) -> tuple[bool, dict[str, Any]]:
        """Play one action; MetaRLGym's form: ``done, info = env.step(action)``.

        Args:
            action: The agent's reply: its text, or the assistant message holding it (with the
                ``session_id`` MetaRLGym's loop puts on every message).
            session_id: The session the action belongs to, when not in the message.

        Returns:
            ``(done, info)``; ``info["reward"]`` is this step's reward, ``info["reply"]`` what
            the game said, ``info["messages"]`` the chat so far.

        Raises:
            RuntimeError: The game is over; call ``reset()`` first.
            ConfigError: The action belongs to another session.
        """
        if session_id is not None:
            self._check_session(str(session_id))
        messages, _, done, info = self.turn(action)
        return done, {**info, "messages": messages}

    def close(self) -> dict[int, float] | None:
        """The final rewards by player, ``{0: reward}`` (``None`` while the game runs), as TextArena."""
        return self.rewards

    def run_episode(
        self, agent: Any, agent_state: Any = None, *, session_id: str | None = None
    ) -> tuple[EpisodeResult, Any]:
        """Play one episode of the current task, threading the agent state through it.

        The loop is MetaRLGym's: ``action, agent_state = agent.get_action(messages,
        agent_state)``, then the step; ``update_memory`` follows each step when the agent has it.

        Returns:
            The episode's result and the agent state after it.
        """
        messages = self.reset(session_id=session_id)
        rewards: list[float] = []
        won = False
        done = False
        while not done:
            action, agent_state = agent.get_action(messages, agent_state)
            messages, reward, done, info = self.turn(action)
            agent_state = remember(agent, messages, action, reward, agent_state)
            rewards.append(reward)
            won = bool(info.get("won"))
        result = EpisodeResult(
            reward=sum(rewards),
            turns=self.turns,
            won=won,
            transcript=messages,
            rewards=rewards,
            session_id=self.session_id,
        )
        return result, agent_state

    def run_trial(
        self,
        agent: Any,
        episodes_per_trial: int | None = None,
        free_shots: int | None = None,
        *,
        session_id: str | None = None,
    ) -> TrialResult:
        """A trial: ``episodes_per_trial`` episodes of the same task in one session.

        MetaRLGym's meta-RL trial: the agent is reset once, before the first episode, and its
        state carries from each episode into the next, so it can learn the task across them.
        The first ``free_shots`` episodes are free shots: played for exploration, their reward
        zeroed. At least the last episode is always scored (``free_shots < episodes_per_trial``).

        Args:
            agent: A MetaRLGym agent (``get_action(messages, agent_state)``).
            episodes_per_trial: Episodes in the trial (default: the env's, 1 unless set).
            free_shots: Unscored first episodes (default: the env's, 0 unless set).
            session_id: The trial's session (default: a new one numbered from the seed).

        Returns:
            The episodes, the counted rewards and the final episode's reward.

        Raises:
            ConfigError: ``episodes_per_trial < 1``, ``free_shots < 0`` or
                ``free_shots >= episodes_per_trial``.
        """
        episodes = self.episodes_per_trial if episodes_per_trial is None else episodes_per_trial
        free = self.free_shots if free_shots is None else free_shots
        _check_trial(episodes, free)
        if session_id is None:
            session_id = f"{self.name}-{self.seed}-{self._sessions}"
            self._sessions += 1
        reset_agent(agent)
        state: Any = None
        played: list[EpisodeResult] = []
        for index in range(episodes):
            result, state = self.run_episode(agent, state, session_id=session_id)
            played.append(result.model_copy(update={"free_shot": index < free}))
        counted = [0.0 if e.free_shot else e.reward for e in played]
        return TrialResult(
            session_id=str(session_id),
            episodes=played,
            rewards=counted,
            final_reward=counted[-1],
            total_reward=sum(counted),
            final_completion_messages=played[-1].transcript,
            agent_state=state,
        )

    # -- helpers --------------------------------------------------------------------------------
    def _action_text(self, action: Any) -> str:
        if isinstance(action, Mapping):
            if "session_id" in action:
                self._check_session(str(action["session_id"]))
            return str(action.get("content") or "")
        return str(action)

    def _check_session(self, session_id: str) -> None:
        if session_id != self.session_id:
            raise ConfigError(
                f"session {session_id!r} is not the one this env is playing ({self.session_id!r})"
            )


def _check_trial(episodes_per_trial: int, free_shots: int) -> None:
    if episodes_per_trial < 1:
        raise ConfigError(f"episodes_per_trial must be at least 1, not {episodes_per_trial}")
    if free_shots < 0:
        raise ConfigError(f"free_shots must be 0 or more, not {free_shots}")
    if free_shots >= episodes_per_trial:
        raise ConfigError(
            f"free_shots ({free_shots}) must be fewer than episodes_per_trial "
            f"({episodes_per_trial}): the last episode is always scored"
        )


def run_episode(env: MultistepEnv, agent: Any) -> EpisodeResult:
    """One game with a freshly reset agent (``reset_memory``/``reset``), its state threaded."""
    reset_agent(agent)
    return env.run_episode(agent)[0]
