"""Runs of LLM agents against a server of the tests' own (``tests.support.fake_openai``).

The tests of outages, server faults, several servers and cassettes each ran the same
experiment with their own name, size, seed and LLM settings; each now fixes those with
``functools.partial`` over ``llm_experiment``.
"""

from __future__ import annotations

from typing import Any

from vivarium import Experiment

__all__ = ["llm_experiment"]


def llm_experiment(
    api_base: str | list[str] | None,
    *,
    name: str,
    agents: int,
    steps: int,
    seed: int,
    scheduling: str = "simultaneous",
    model: str = "openai/fake",
    **llm: Any,
) -> Experiment:
    """Cognitive agents forced to call a tool, asking the server(s) at ``api_base``.

    Args:
        api_base: The server's URL (a list: several servers; None: a cassette answers).
        name: The experiment's name.
        agents: How many agents.
        steps: How many steps.
        seed: The master seed.
        scheduling: ``simultaneous`` (every call of a step in flight at once) or ``sequential``.
        model: The model the requests name.
        **llm: More LLM settings (``timeout``, ``num_retries``, ``cache``, ``graph`` ...), after
            ``model``, ``api_base`` and ``force_tool`` in the config.
    """
    return Experiment(
        name=name,
        policy="cognitive",
        agents=agents,
        steps=steps,
        seed=seed,
        scheduling=scheduling,
        llm={"model": model, "api_base": api_base, "force_tool": True, **llm},
    )
