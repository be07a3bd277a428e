"""MetaRLGym interop: the agent interface, both adapters, and the twenty questions game.

The games' MetaRLGym forms (``step``, trials, rewards) are tested in ``tests/metarl``; here the
tests play through ``env.turn`` (Vivarium's ``messages, reward, done, info``), and the rewards
are MetaRLGym's: questions 0, the right word +1, a wrong word forgiven once, then -1.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.scripted import ScriptedGateway, posting
from vivarium.metarl import (
    DEFAULT_WORDS,
    QUESTIONS,
    WORDS,
    Agent,
    AgentPolicyAdapter,
    BisectingAgent,
    PolicyAgent,
    TwentyQuestionsEnv,
    answer,
    interpret,
    observation_to_chat,
    run_episode,
    text_to_action,
)
from vivarium.policies.cognitive import CognitiveAgentPolicy, SimpleCognitivePolicy
from vivarium.worlds.channel import InMemoryChannel


# -- twenty questions --------------------------------------------------------------------------
def test_secret_is_fixed_by_the_seed() -> None:
    secrets = [TwentyQuestionsEnv(seed).secret for seed in range(40)]
    assert secrets == [TwentyQuestionsEnv(seed).secret for seed in range(40)]
    assert len(set(secrets)) > 5
    assert set(secrets) <= set(DEFAULT_WORDS)
    assert TwentyQuestionsEnv(3, words=["dog"]).secret == "dog"
    env = TwentyQuestionsEnv(0)
    env.reset(seed=3)
    assert env.secret == TwentyQuestionsEnv(3).secret


def test_built_in_words() -> None:
    assert 18 <= len(WORDS) <= 25
    signatures = {(w.category, w.size, w.color, w.can_fly, w.in_water) for w in WORDS.values()}
    assert len(signatures) == len(WORDS)  # every word can be told apart


def game(word: str) -> TwentyQuestionsEnv:
    env = TwentyQuestionsEnv(0, words=[word])
    env.reset()
    return env


@pytest.mark.parametrize(
    ("word", "question", "reply"),
    [
        ("dog", "Is it an animal?", "Yes."),
        ("dog", "Can it fly?", "No."),
        ("dog", "Does it have legs?", "Yes."),
        ("dog", "Is it brown?", "Yes."),
        ("eagle", "Can it fly?", "Yes."),
        ("eagle", "Is it a living thing that flies?", "Yes."),
        ("whale", "Does it live in the ocean?", "Yes."),
        ("whale", "Is it big?", "Yes."),
        ("whale", "Is it small?", "No."),
        ("apple", "Is it something you can eat?", "Yes."),
        ("apple", "Is it red?", "Yes."),
        ("apple", "Is it a red animal?", "No."),
        ("car", "Is it man made?", "Yes."),
        ("car", "Is it alive?", "No."),
        ("elephant", "Is it grey?", "Yes."),
        ("tree", "Is it a plant?", "Yes."),
    ],
)
def test_answers(word: str, question: str, reply: str) -> None:
    messages, reward, done, info = game(word).turn(question)
    session = messages[0]["session_id"]
    assert messages[-2:] == [
        {"role": "assistant", "content": question, "session_id": session},
        {"role": "user", "content": reply, "session_id": session},
    ]
    assert (reward, done, info["kind"]) == (0.0, False, "question")
    assert "secret" not in info


def test_every_scripted_question_is_understood() -> None:
    for attribute, question in QUESTIONS.items():
        assert interpret(question) == ("question", [attribute])
        for word in WORDS:
            reply = game(word).turn(question)[0][-1]["content"]
            assert reply == ("Yes." if answer(word, [attribute]) else "No.")


@pytest.mark.parametrize(
    ("text", "won"),
    [
        ("guess: dog", True),
        ("Is it a dog?", True),
        ("My guess is a dog.", True),
        ("Final answer: DOG", True),
        ("guess: cat", False),
        ("Is it an elephant?", False),
    ],
)
def test_guesses_end_the_game(text: str, won: bool) -> None:
    env = game("dog")
    messages, reward, done, info = env.turn(text)
    if not won:  # a wrong word is an invalid move, forgiven once; the second ends it at -1
        assert (done, reward, info["won"]) == (False, 0.0, False)
        messages, reward, done, info = env.turn(text)
    assert done and info["won"] is won and info["secret"] == "dog"
    assert reward == (1.0 if won else -1.0)
    last = messages[-1]["content"]
    assert last == "Correct! It was dog." if won else last.endswith("It was dog.")
    with pytest.raises(RuntimeError):
        env.turn("guess: dog")


def test_invalid_questions_and_running_out_of_turns() -> None:
    env = TwentyQuestionsEnv(1, max_turns=3)
    env.reset()
    rewards = []
    for text in ["Tell me a story", "Is it a fish?", "Is it an animal?"]:
        _, reward, done, info = env.turn(text)
        rewards.append(reward)
    assert rewards == [0.0] * 3
    assert done and not info["won"] and info["secret"] == env.secret
    assert env.turns == 3


def test_bad_words_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown"):
        TwentyQuestionsEnv(0, words=["dragon"])
    with pytest.raises(ValueError):
        TwentyQuestionsEnv(0, words=[])


def test_bisecting_agent_wins_and_rewards_add_up() -> None:
    for seed in range(25):
        env = TwentyQuestionsEnv(seed)
        result = run_episode(env, BisectingAgent())
        assert result.won, seed
        questions = result.turns - 1
        assert 1 <= questions <= 6
        assert result.rewards == [0.0] * questions + [1.0]
        assert result.reward == 1.0
        assert result.reward == sum(result.rewards)
        assert result.transcript[-2]["content"] == f"guess: {env.secret}"
    assert run_episode(TwentyQuestionsEnv(4), BisectingAgent()) == run_episode(
        TwentyQuestionsEnv(4), BisectingAgent()
    )


def test_episode_runner_threads_state_and_memory() -> None:
    class Counting(Agent):
        def __init__(self) -> None:
            self.resets = 0
            self.seen: list[tuple[str, float]] = []

        def reset(self) -> None:
            self.resets += 1

        def get_action(self, messages: list[dict], agent_state: Any) -> tuple[str, Any]:
            n = (agent_state or 0) + 1
            return ("guess: dog" if n == 3 else "Is it an animal?"), n

        def update_memory(self, messages, action, reward, agent_state):  # type: ignore[no-untyped-def]
            self.seen.append((action, reward))
            return agent_state

    agent = Counting()
    result = run_episode(TwentyQuestionsEnv(0, words=["dog"]), agent)
    assert agent.resets == 1
    assert result.won and result.turns == 3
    assert agent.seen == [("Is it an animal?", 0.0)] * 2 + [("guess: dog", 1.0)]


# -- a MetaRLGym agent as a policy -------------------------------------------------------------
OBS = {
    "time_step": 2,
    "agent_id": "agent_001",
    "messages": [
        {"time_step": 0, "author_id": "agent_000", "content": "hello"},
        {"time_step": 1, "author_id": "agent_001", "content": "hi"},
    ],
    "tools": ("noop", "emit_event", "post_message"),
}


class Echo(Agent):
    """Says what it was told to say and counts its turns in the state."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls: list[tuple[list[dict], Any]] = []

    def get_action(self, messages: list[dict], agent_state: Any) -> tuple[str, Any]:
        self.calls.append((messages, agent_state))
        state = agent_state or {"turns": 0}
        return self.text, {"turns": state["turns"] + 1}


def adapt(text: str, observation: dict[str, Any]) -> tuple[Any, Echo]:
    agent = Echo(text)
    request = AgentPolicyAdapter(agent).decide(
        run_id="r", time_step=2, agent_id="agent_001", observation=observation
    )
    return request, agent


def test_adapter_keeps_state_in_metadata() -> None:
    request, agent = adapt("hello back", OBS)
    assert (request.action_name, request.arguments) == ("post_message", {"content": "hello back"})
    assert request.metadata == {"parse_path": "plain_text", "agent_state": {"turns": 1}}
    request2, agent = adapt("again", {**OBS, "agent_state": request.metadata["agent_state"]})
    assert request2.metadata["agent_state"] == {"turns": 2}
    assert agent.calls[0][1] == {"turns": 1}
    json.dumps(request2.model_dump())


def test_adapter_is_pure() -> None:
    state = {"turns": 5}
    observation = {**OBS, "agent_state": state}
    first, _ = adapt("x", observation)
    second, _ = adapt("x", observation)
    assert first == second and state == {"turns": 5}


def test_adapter_chat_messages() -> None:
    _, agent = adapt("x", OBS)
    messages = agent.calls[0][0]
    assert messages[0]["role"] == "system" and "agent_001" in messages[0]["content"]
    assert messages[1:] == [
        {"role": "user", "content": "agent_000: hello"},
        {"role": "assistant", "content": "hi"},
    ]
    assert observation_to_chat(OBS, "agent_001") == messages


def test_adapter_json_action_and_fallbacks() -> None:
    request, _ = adapt('{"action": "emit_event", "arguments": {"value": 4}}', OBS)
    assert (request.action_name, request.arguments) == ("emit_event", {"value": 4})
    assert request.metadata["parse_path"] == "json_text"
    request, _ = adapt("   ", OBS)
    assert request.action_name == "noop"
    assert request.metadata["fallback_reason"] == "empty reply"
    request, _ = adapt("just words", {**OBS, "tools": ("noop",)})
    assert request.action_name == "noop"
    assert "post_message is not available" in request.metadata["fallback_reason"]
    assert text_to_action("hi", ["post_message"]).arguments == {"content": "hi"}


def test_adapter_refuses_state_it_cannot_record() -> None:
    class Bad(Agent):
        def get_action(self, messages: list[dict], agent_state: Any) -> tuple[str, Any]:
            return "x", {1, 2}

    with pytest.raises(TypeError, match="JSON-serialisable"):
        AgentPolicyAdapter(Bad()).decide(run_id="r", time_step=0, agent_id="a", observation=OBS)


def test_adapter_in_the_channel_world() -> None:
    world = InMemoryChannel()
    policy = AgentPolicyAdapter(Echo("hello world"))
    state = None
    for t in range(3):
        observation = {**world.observe("agent_000", t), "agent_state": state}
        request = policy.decide(
            run_id="r", time_step=t, agent_id="agent_000", observation=observation
        )
        assert world.apply(request).success
        state = request.metadata["agent_state"]
    assert state == {"turns": 3}
    assert [m["content"] for m in world.messages] == ["hello world"] * 3


# -- a Vivarium policy as a MetaRLGym agent ----------------------------------------------------
@pytest.mark.parametrize("cls", [SimpleCognitivePolicy, CognitiveAgentPolicy])
def test_policy_agent_plays_with_a_cognitive_policy(cls: type) -> None:
    gateway = ScriptedGateway(posting("Is it an animal?"), posting("guess: dog"))
    agent = PolicyAgent(cls(gateway, model="m", force_tool=True))
    result = run_episode(TwentyQuestionsEnv(0, words=["dog"]), agent)
    assert result.won and result.turns == 2
    assert result.reward == 1.0
    first, second = (r.messages[1]["content"] for r in gateway.requests)
    assert "user: I am thinking of one of these: dog." in first
    assert "[t=0] agent_000: Is it an animal?\n[t=0] user: Yes." in second
    assert "Current step: 1." in second
    assert gateway.requests[0].tool_choice == {
        "type": "function",
        "function": {"name": "post_message"},
    }


def test_policy_agent_returns_the_action_name_without_content() -> None:
    class Quiet:
        def decide(self, *, run_id, time_step, agent_id, observation):  # type: ignore[no-untyped-def]
            from vivarium.types import ActionRequest

            return ActionRequest(
                run_id=run_id, time_step=time_step, agent_id=agent_id, action_name="noop"
            )

    text, state = PolicyAgent(Quiet()).get_action([{"role": "user", "content": "hi"}], {"k": 1})
    assert (text, state) == ("noop", {"k": 1})


def test_round_trip_agent_to_policy_to_agent() -> None:
    """BisectingAgent -> AgentPolicyAdapter -> PolicyAgent: same game, state kept outside."""
    for seed in range(6):
        direct = run_episode(TwentyQuestionsEnv(seed), BisectingAgent())
        wrapped = run_episode(
            TwentyQuestionsEnv(seed), PolicyAgent(AgentPolicyAdapter(BisectingAgent()))
        )
        assert wrapped.won
        assert wrapped.transcript == direct.transcript
        assert wrapped.rewards == direct.rewards
