"""``done, info = env.step(action)`` with a ``session_id``, as MetaRLGym's loop; and ours.

Original: andrewsiah/MetaRLGym (branch envinfo): the agents README's integration loop (seed
004), ``agentsgym/envs/environment.py`` (``step(action) -> (done, info)``) and
``multistep_env.py`` (every message carries the episode's ``session_id``).
"""

from __future__ import annotations

import pytest

from vivarium.errors import ConfigError
from vivarium.metarl import BisectingAgent, MastermindEnv, TwentyQuestionsEnv


def test_the_readme_loop_runs_as_written() -> None:
    """Agents README: append the assistant message with its session_id, ``done, info = step``."""
    env = TwentyQuestionsEnv(5)
    messages = env.reset()
    session_id = messages[0]["session_id"]
    agent, agent_state = BisectingAgent(), None
    done = False
    infos = []
    while not done:
        action, agent_state = agent.get_action(messages, agent_state)
        messages.append({"role": "assistant", "content": action, "session_id": session_id})
        done, info = env.step(action)
        messages.append({"role": "user", "content": info["reply"], "session_id": session_id})
        infos.append(info)
    assert infos[-1]["won"] and infos[-1]["reward"] == 1.0
    assert [i["reward"] for i in infos[:-1]] == [0.0] * (len(infos) - 1)
    assert env.close() == {0: 1.0}  # TextArena's rewards: by player id, set at the end
    assert messages == env.messages  # the env's chat is the one the loop built


def test_every_message_carries_the_session_id() -> None:
    """multistep_env.py: each user and assistant message holds the episode's session_id."""
    env = MastermindEnv(3)
    opening = env.reset(session_id="trial-A")
    env.step("[1 2 3 4]")
    assert {m["session_id"] for m in env.messages} == {"trial-A"}
    assert len(env.messages) == len(opening) + 2
    auto = MastermindEnv(3)
    assert auto.reset()[0]["session_id"] == "mastermind-3-0"
    assert auto.reset()[0]["session_id"] == "mastermind-3-1"  # a new session per reset


def test_step_takes_the_assistant_message_and_checks_its_session() -> None:
    """README loop: the assistant message (with session_id) is what the agent produced."""
    env = MastermindEnv(3)
    env.reset(session_id="s1")
    done, info = env.step({"role": "assistant", "content": "[1 2 3 4]", "session_id": "s1"})
    assert not done and info["session_id"] == "s1" and "black" in info
    done, info = env.step("[2 1 3 4]", session_id="s1")
    assert info["turn"] == 2
    with pytest.raises(ConfigError, match="'s2' is not the one this env is playing"):
        env.step({"role": "assistant", "content": "[1 2 3 4]", "session_id": "s2"})
    with pytest.raises(ConfigError, match="not the one"):
        env.step("[1 2 3 4]", session_id="other")
    assert env.turns == 2  # a refused step plays nothing


def test_vivarium_form_still_available_as_turn() -> None:
    """Vivarium's Gym form: ``messages, reward, done, info = env.turn(action)``."""
    env = TwentyQuestionsEnv(0, words=["dog"])
    env.reset()
    messages, reward, done, info = env.turn("guess: dog")
    assert (reward, done, info["won"]) == (1.0, True, True)
    assert messages[-1]["content"] == "Correct! It was dog."
    with pytest.raises(RuntimeError, match="reset"):
        env.step("guess: dog")
