"""``MultistepEnv.run_trial(episodes_per_trial, free_shots)``: a trial of episodes, free shots.

Original: andrewsiah/MetaRLGym (branch envinfo): README glossary ("Lifetime/Trial: one or
multiple episodes of the same task"; "Free Shots: initial exploration episodes with zero
rewards"), ``.cursor/plan/trial.md`` (defaults 1 and 0, ``free_shots < episodes_per_trial``
so the final episode is scored), ``.cursor/plan/env_info.md`` (one session per trial, the final
episode's reward returned as ``final_rewards``), ``multistep_env.py`` (agent state kept per
session across the episodes).
"""

from __future__ import annotations

from typing import Any

import pytest

from vivarium.errors import ConfigError
from vivarium.metarl import Agent, MastermindEnv, TwentyQuestionsEnv


class Learner(Agent):
    """Explores with a fixed script the first episode, then guesses what it learnt.

    The state records the secret once an episode reveals it, so later episodes win at once.
    """

    def __init__(self) -> None:
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def get_action(
        self, messages: list[dict[str, Any]], agent_state: Any = None, **kwargs: Any
    ) -> tuple[str, Any]:
        state = dict(agent_state or {})
        if "secret" in state:
            return f"guess: {state['secret']}", state
        return "guess: banana", state

    def update_memory(self, messages, action, reward, agent_state):  # type: ignore[no-untyped-def]
        last = messages[-1]["content"]
        if "It was " in last:
            return {**agent_state, "secret": last.rsplit("It was ", 1)[1].rstrip(".")}
        return agent_state


def test_a_trial_plays_the_same_task_and_zeroes_free_shots() -> None:
    """README glossary + trial.md: K episodes of one task; the first ``free_shots`` unscored."""
    env = TwentyQuestionsEnv(11, words=["dog", "cat"], error_allowance=0)
    agent = Learner()
    trial = env.run_trial(agent, episodes_per_trial=3, free_shots=1)
    first, second, third = trial.episodes
    # Episode 1 loses (a wrong word with no allowance: -1) and reveals the word.
    assert (first.reward, first.won, first.free_shot) == (-1.0, False, True)
    # The state carried over: episodes 2 and 3 guess the word at once.
    assert (second.reward, second.won, third.won) == (1.0, True, True)
    assert [e.free_shot for e in trial.episodes] == [True, False, False]
    assert trial.rewards == [0.0, 1.0, 1.0]  # the free shot's -1 does not count
    assert trial.final_reward == 1.0 and trial.total_reward == 2.0
    assert agent.resets == 1  # reset once per trial, not per episode
    assert trial.agent_state == {"secret": env.secret}  # learnt in episode 1, the same task
    sessions = {m["session_id"] for e in trial.episodes for m in e.transcript}
    assert sessions == {trial.session_id}
    assert trial.final_completion_messages == third.transcript


def test_defaults_are_one_episode_and_no_free_shot() -> None:
    """trial.md: ``episodes_per_trial = 1`` and ``free_shots = 0`` by default."""
    env = MastermindEnv(2)
    trial = env.run_trial(Learner())  # "guess: banana" is no code: invalid twice, -1
    assert len(trial.episodes) == 1 and trial.rewards == [-1.0] and trial.final_reward == -1.0
    configured = MastermindEnv(2, episodes_per_trial=4, free_shots=2)
    trial = configured.run_trial(Learner())
    assert trial.rewards == [0.0, 0.0, -1.0, -1.0]


@pytest.mark.parametrize(
    ("episodes", "free", "message"),
    [
        (2, 2, "must be fewer than episodes_per_trial"),
        (1, 3, "must be fewer than episodes_per_trial"),
        (0, 0, "episodes_per_trial must be at least 1"),
        (2, -1, "free_shots must be 0 or more"),
    ],
)
def test_free_shots_must_leave_a_scored_episode(episodes: int, free: int, message: str) -> None:
    """trial.md: ``episodes_per_trial >= 1``, ``free_shots >= 0``, ``free_shots < episodes``."""
    with pytest.raises(ConfigError, match=message):
        MastermindEnv(0).run_trial(Learner(), episodes, free)
    with pytest.raises(ConfigError, match=message):
        MastermindEnv(0, episodes_per_trial=episodes, free_shots=free)
