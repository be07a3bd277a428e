"""MetaRLGym's agent interface: ``get_action(messages, agent_state=None, **kwargs)``.

Original: andrewsiah/MetaRLGym (branch envinfo) ``agentsgym/agents/base.py`` and the agents
README (seed 004).
"""

from __future__ import annotations

from typing import Any

from vivarium.metarl import (
    Agent,
    AgentPolicyAdapter,
    BisectingAgent,
    ConsistentGuessAgent,
    MastermindEnv,
    PolicyAgent,
    TwentyQuestionsEnv,
    run_episode,
)


class EchoAgent(Agent):
    """The agents README's example, written as there: no ``**kwargs``, state always ``None``."""

    def get_action(self, messages: list[dict[str, Any]], agent_state: Any = None) -> Any:
        user_msgs = [m["content"] for m in messages if m.get("role") == "user"]
        return (user_msgs[-1] if user_msgs else ""), None


class OriginalStyle(Agent):
    """Overrides the original's hooks: ``reset_memory`` and a ``None``-returning ``update_memory``."""

    def __init__(self) -> None:
        self.resets = 0
        self.updates = 0

    def get_action(
        self, messages: list[dict[str, Any]], agent_state: Any = None, **kwargs: Any
    ) -> tuple[str, Any]:
        count = (agent_state or 0) + 1
        return ("guess: dog" if count == 2 else "Is it an animal?"), count

    def reset_memory(self) -> None:
        self.resets += 1

    def update_memory(self, *args: Any, **kwargs: Any) -> None:
        self.updates += 1


def test_agent_state_defaults_to_none_and_kwargs_are_accepted() -> None:
    """base.py: ``get_action(messages, agent_state=None, **kwargs) -> (action, agent_state)``."""
    messages = [{"role": "user", "content": "I am thinking of one of these: dog."}]
    action, state = BisectingAgent(["dog", "cat"]).get_action(messages)
    assert action == "Is it small?"  # cat is small, dog is not: the one question that splits
    assert state["candidates"] == ["dog", "cat"]
    again = BisectingAgent(["dog", "cat"]).get_action(messages, None, temperature=0.0)
    assert again == (action, state)
    code, kept = ConsistentGuessAgent().get_action([], agent_state={"k": 1}, verbose=True)
    assert (code, kept) == ("[1 2 3 4]", {"k": 1})


def test_policy_agent_accepts_the_original_signature() -> None:
    """base.py: the state argument is optional; a policy run as an agent honours that."""

    class Fixed:
        def decide(self, *, run_id, time_step, agent_id, observation):  # type: ignore[no-untyped-def]
            from vivarium.types import ActionRequest

            return ActionRequest(
                run_id=run_id,
                time_step=time_step,
                agent_id=agent_id,
                action_name="post_message",
                arguments={"content": "[1 2 3 4]"},
            )

    agent = PolicyAgent(Fixed())
    assert agent.get_action([{"role": "user", "content": "go"}]) == ("[1 2 3 4]", None)
    assert agent.get_action([], agent_state=3, extra=1) == ("[1 2 3 4]", 3)


def test_the_readme_echo_agent_runs_in_the_games_and_as_a_policy() -> None:
    """Agents README: an ``EchoAgent`` written against the interface runs unchanged."""
    env = MastermindEnv(0, max_turns=3)
    result = run_episode(env, EchoAgent())
    # It echoes the prompt, which holds no bracketed code: forgiven once, then lost at -1.
    assert result.transcript[2] == {
        "role": "assistant",
        "content": "The code is set. Your first guess?",
        "session_id": "mastermind-0-0",
    }
    assert (result.rewards, result.turns, result.won) == ([0.0, -1.0], 0, False)
    request = AgentPolicyAdapter(EchoAgent()).decide(
        run_id="r",
        time_step=0,
        agent_id="agent_000",
        observation={"messages": [{"author_id": "agent_001", "content": "hi"}], "tools": ()},
    )
    assert request.metadata["agent_state"] is None


def test_reset_memory_and_a_none_update_memory_are_honoured() -> None:
    """base.py: ``reset_memory()`` before an episode; ``update_memory`` deprecated, returns None."""
    agent = OriginalStyle()
    result = run_episode(TwentyQuestionsEnv(0, words=["dog"]), agent)
    assert agent.resets == 1 and agent.updates == 2
    assert result.won and result.turns == 2  # the state still counted: None kept it


def test_our_reset_hook_still_runs() -> None:
    """Vivarium's ``reset`` override keeps working: the base ``reset_memory`` calls it."""

    class Ours(OriginalStyle):
        reset_memory = Agent.reset_memory

        def reset(self) -> None:
            self.resets += 10

    agent = Ours()
    run_episode(TwentyQuestionsEnv(0, words=["dog"]), agent)
    assert agent.resets == 10
