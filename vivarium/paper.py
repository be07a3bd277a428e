"""Paper figures, regenerated from what ``data/`` records: ``vvm figures`` / ``make figures``.

Every figure comes from a deterministic run: random agents, workflow agents answered by the
mock, and LLM agents replayed from a cassette recorded against a real model. So the figures
are the same on every machine, offline, and the PDF and PNG files are byte-stable (no
creation dates or software tags in them).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from vivarium.errors import ConfigError

ECOLOGY_SEEDS = (1, 2, 3, 4)


def _runs(data_dir: Path, work: Path) -> dict[str, Any]:
    from vivarium.experiment import Experiment

    baseline = Experiment(
        name="paper_baseline",
        agents=12,
        steps=60,
        seed=7,
        action_space=["noop", "emit_event", "post_message"],
    ).run(work / "baseline.sqlite", progress=False)
    ecology = [
        Experiment.from_file(data_dir / "experiments" / "ecology.yaml", seed=seed).run(
            work / f"ecology_{seed}.sqlite", progress=False
        )
        for seed in ECOLOGY_SEEDS
    ]
    llm = Experiment(
        name="paper_llm",
        policy="cognitive",
        agents=3,
        steps=4,
        seed=42,
        scheduling="simultaneous",
        llm={
            "model": "openai/smollm2",
            "force_tool": True,
            "max_tokens": 48,
            "cache": str(data_dir / "cassettes" / "smollm2_phase2.cassette"),
            "cache_mode": "replay",
        },
    ).run(work / "llm.sqlite", progress=False)
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
            # alpha_2's should_pivot turns (state-machine loops marked routine are left out).
            "pivot_raster": plots.pivot_raster(runs["ecology"][0]),
            "message_volume": plots.message_volume(runs["ecology"], cumulative=True),
            "token_use": plots.token_use(runs["llm"]),
        }
        for name, fig in figures.items():
            written.extend(save_figure(fig, out / name))
    return written
