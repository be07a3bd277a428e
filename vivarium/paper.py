"""Paper figures, regenerated from what ``data/`` records: ``vvm figures`` / ``make figures``.

Every figure comes from a deterministic run: random agents, and LLM agents (the ecology's
workflow agents alpha_2 and beta_2, the channel world's cognitive agents) replayed from cassettes
recorded once against a real model, SmolLM2-135M-Instruct on llama-cpp-python's server
(``scripts/record_cassettes.py``). So the figures are the same on every machine, offline, and the
PDF and PNG files are byte-stable (no creation dates or software tags in them). A request missing
from a cassette stops the run with an error: a figure never silently mixes in a new model reply.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from vivarium.errors import ConfigError

# The ecology with SmolLM2 answering alpha_2 and beta_2 (the file's cache_mode is replay).
ECOLOGY_CONFIG = "ecology_smollm2.yaml"  # in data/experiments/
ECOLOGY_SEEDS = (1, 2, 3, 4)
# The channel world's LLM run: cognitive agents answered by SmolLM2-135M-Instruct, replayed from
# data/cassettes/channel_smollm2.cassette (scripts/record_cassettes.py records it).
CHANNEL_RUN: dict[str, Any] = {
    "name": "paper_llm",
    "policy": "cognitive",
    "agents": 4,
    "steps": 8,
    "seed": 42,
    "scheduling": "simultaneous",
    "llm": {"model": "openai/smollm2", "force_tool": True, "max_tokens": 48},
}


# The worked example of forks (notebook 08, ``scripts/record_cassettes.py --only what_if``):
# one agent told to be brief from a step on, in runs of three LLM agents on the channel.
WHAT_IF_RUN: dict[str, Any] = {
    "name": "what_if",
    "policy": "cognitive",
    "agents": 3,
    "steps": 8,
    "scheduling": "simultaneous",
    "llm": {"model": "openai/smollm2", "force_tool": True, "max_tokens": 40, "temperature": 0.8},
}
WHAT_IF_SEEDS = (1, 2, 3, 4, 5, 6, 7, 8)
WHAT_IF_STEP = 4
WHAT_IF_AGENT = "agent_001"
WHAT_IF_PROMPT = "You answer in at most five words."
WHAT_IF_QUESTION = "Why did you post your last message?"


def what_if_runs(llm: dict[str, Any], folder: str | Path) -> dict[str, Any]:
    """Notebook 08's runs: for each seed a parent and its fork, then two interviews.

    Args:
        llm: LLM settings over ``WHAT_IF_RUN``'s (the cassette, its mode, a server).
        folder: Where the traces go.

    Returns:
        ``parents`` and ``forks`` (seed -> run), and ``before`` and ``after``: the changed
        agent asked ``WHAT_IF_QUESTION`` at the step before the fork, in the parent, and at the
        fork step, in the fork (seed 1).
    """
    from vivarium import Experiment

    out = Path(folder)
    parents, forks = {}, {}
    for seed in WHAT_IF_SEEDS:
        config = {**WHAT_IF_RUN, "seed": seed, "llm": {**WHAT_IF_RUN["llm"], **llm}}
        parent = Experiment(**config).run(out / f"what_if_{seed}.sqlite", progress=False)
        parents[seed] = parent
        forks[seed] = parent.fork(
            WHAT_IF_STEP,
            agent_changes={WHAT_IF_AGENT: {"system_prompt": WHAT_IF_PROMPT}},
            db=out / f"what_if_{seed}_brief.sqlite",
        ).run(progress=False)
    first = WHAT_IF_SEEDS[0]
    before = parents[first].interview(WHAT_IF_AGENT, WHAT_IF_STEP - 1, WHAT_IF_QUESTION, llm=llm)
    after = forks[first].interview(WHAT_IF_AGENT, WHAT_IF_STEP, WHAT_IF_QUESTION, llm=llm)
    return {"parents": parents, "forks": forks, "before": before, "after": after}


def project_folder() -> Path:
    """The project's folder (the one holding ``data/``), as a path from the working folder.

    The notebooks name the project's files as ``project_folder() / "data" / ...``: from
    ``notebooks/`` that is ``../data/...``, as it always was, and a kernel started in another
    folder (an editor's workspace root, papermill, a script) finds the same files instead of
    none. It is the nearest folder at or above the working one that holds ``data/experiments``,
    else the checkout this package runs from (``pip install -e .``).

    Raises:
        ConfigError: Neither exists (the package installed without the project's checkout).
    """
    here = Path.cwd()
    checkout = Path(__file__).resolve().parent.parent
    for folder in (here, *here.parents, checkout):
        if (folder / "data" / "experiments").is_dir():
            return Path(os.path.relpath(folder, here))
    raise ConfigError(
        f"no project folder (one holding data/experiments) at or above {here}, nor at {checkout}"
        ": start from the project's checkout"
    )


def _runs(data_dir: Path, work: Path) -> dict[str, Any]:
    from vivarium.facade import Experiment

    baseline = Experiment(
        name="paper_baseline",
        agents=12,
        steps=60,
        seed=7,
        action_space=["noop", "emit_event", "post_message"],
    ).run(work / "baseline.sqlite", progress=False)
    cassettes = data_dir / "cassettes"
    replay = {"cache": str(cassettes / "ecology_smollm2.cassette"), "cache_mode": "replay"}
    ecology = [
        Experiment.from_file(data_dir / "experiments" / ECOLOGY_CONFIG, seed=seed, llm=replay).run(
            work / f"ecology_{seed}.sqlite", progress=False
        )
        for seed in ECOLOGY_SEEDS
    ]
    channel = {**CHANNEL_RUN["llm"], "cache": str(cassettes / "channel_smollm2.cassette")}
    llm = Experiment(**{**CHANNEL_RUN, "llm": {**channel, "cache_mode": "replay"}}).run(
        work / "llm.sqlite", progress=False
    )
    return {"baseline": baseline, "ecology": ecology, "llm": llm}


def make_figures(
    out_dir: str | Path = "paper/figures", data_dir: str | Path = "data"
) -> list[Path]:
    """Run the paper's experiments offline and write every figure as PDF and PNG."""
    from vivarium.analysis import plots
    from vivarium.analysis.style import save_figure

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the figures folder {out}: {exc.strerror}") from None
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = _runs(Path(data_dir), Path(tmp))
        figures = {
            "behaviour_timeline": plots.behaviour_timeline(
                runs["baseline"], width="double", title="Random agents in the channel world"
            ),
            "action_mix": plots.action_mix(runs["baseline"], window=5),
            "success_curves": plots.success_curves(runs["ecology"], by="policy", window=5),
            # alpha_2's should_pivot turns, seed 1 (state-machine loops marked routine left out).
            "pivot_raster": plots.pivot_raster(runs["ecology"][0]),
            "message_volume": plots.message_volume(runs["ecology"], cumulative=True),
            "token_use": plots.token_use(runs["llm"]),
        }
        for name, fig in figures.items():
            written.extend(save_figure(fig, out / name))
    return written
