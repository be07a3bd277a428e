"""MetaRLGym interop: its agent interface, adapters both ways, and two seeded text games.

A MetaRLGym ``Agent`` maps ``(messages, agent_state)`` to ``(action, new_agent_state)``
(``get_action(messages, agent_state=None, **kwargs)``).

- ``AgentPolicyAdapter`` runs such an agent as a Vivarium policy (the engine keeps the state);
  ``PolicyAgent`` runs a Vivarium policy as an agent.
- ``MultistepEnv`` is the games' shared interface: ``done, info = env.step(action)`` as
  MetaRLGym's loop, ``messages, reward, done, info = env.turn(action)``, episodes, and
  ``run_trial(agent, episodes_per_trial, free_shots)``.
- ``TwentyQuestionsEnv`` (``BisectingAgent`` wins it) and ``MastermindEnv``
  (``ConsistentGuessAgent`` cracks it) are seeded: the same seed, the same secret.
"""

from vivarium.metarl.adapters import (
    ADAPTER_SYSTEM_PROMPT,
    AgentPolicyAdapter,
    PolicyAgent,
    action_text,
    observation_to_chat,
    text_to_action,
)
from vivarium.metarl.agent import Agent, remember, reset_agent
from vivarium.metarl.env import (
    INVALID_MOVE_REWARD,
    TURN_LIMIT_REWARD,
    WIN_REWARD,
    EpisodeResult,
    Move,
    MultistepEnv,
    TrialResult,
    Turn,
    run_episode,
)
from vivarium.metarl.mastermind import (
    VARIANTS,
    ConsistentGuessAgent,
    MastermindEnv,
    score_guess,
)
from vivarium.metarl.twenty_questions import (
    ATTRIBUTES,
    COLORS,
    DEFAULT_WORDS,
    HELP,
    KEYWORDS,
    MAX_TURNS,
    QUESTION_COST,
    QUESTIONS,
    WORDS,
    BisectingAgent,
    TwentyQuestionsEnv,
    WordInfo,
    answer,
    guessed,
    interpret,
)

__all__ = [
    "ADAPTER_SYSTEM_PROMPT",
    "ATTRIBUTES",
    "COLORS",
    "DEFAULT_WORDS",
    "HELP",
    "INVALID_MOVE_REWARD",
    "KEYWORDS",
    "MAX_TURNS",
    "QUESTIONS",
    "QUESTION_COST",
    "TURN_LIMIT_REWARD",
    "VARIANTS",
    "WIN_REWARD",
    "WORDS",
    "Agent",
    "AgentPolicyAdapter",
    "BisectingAgent",
    "ConsistentGuessAgent",
    "EpisodeResult",
    "MastermindEnv",
    "Move",
    "MultistepEnv",
    "PolicyAgent",
    "TrialResult",
    "Turn",
    "TwentyQuestionsEnv",
    "WordInfo",
    "action_text",
    "answer",
    "guessed",
    "interpret",
    "observation_to_chat",
    "remember",
    "reset_agent",
    "run_episode",
    "score_guess",
    "text_to_action",
]
