"""The way from a config to a run: one package, its modules in the order of the flow.

Read it top to bottom; each module imports only the ones before it (an import-linter
contract, ``experiment-flow`` in ``pyproject.toml``, keeps that order):

1. ``config``: the experiment config (``ExperimentConfig``, its ``llm`` section ``LLMConfig``),
   loaded from YAML or JSON, every bad field one line.
2. ``overrides``: how changes merge into a config, the same way at every entry point (the
   constructor, ``from_file``, ``vvm`` flags, the panel, a sweep's axes).
3. ``sections``: aam's sectioned config files, translated to an ``ExperimentConfig``.
4. ``objects``: your own world and policy as Python objects, named by reference and digest.
5. ``plan``: every agent of the run, its group and its seeds, before anything is built.
6. ``build``: worlds and policies by name (built in or registered), built from the plan.
7. ``identity``: what a run is, every input its id covers (the config, the code of its objects
   and registered factories, its reporters, what cannot be digested), and the package code
   recorded beside it.
8. ``paths``: where a run's trace goes, never over another run's result.
9. ``runner``: one config into a trace, or a trace resumed; the engine, the progress bar, the
   one line an outage ends in.
10. ``interview``: an agent of a finished run asked a question in the context it had at a
    step, the trace left as it was and the exchange kept beside it.
11. ``bundle``: runs handed over in one archive, and re-run offline to check that every trace
    comes out the same (beside ``interview``: both use finished runs and the runner).

Under them all, ``digest``: how a piece of code or a value is digested, by value (a config
records the digest of an option JSON cannot hold, so it sits below ``config``).

``Experiment`` and ``Run``, the public face over this package, the sweep and the panel, live
above all three in ``vivarium.facade`` (they call the sweep and the panel, which call this
package). ``from vivarium.experiment import Experiment`` still works: the names below load on
first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# Every config's identity takes its sources from ``identity`` (registered code, objects as they
# are now, reporters): loaded with the package, so no config is identified without them.
from vivarium.experiment import identity as _identity  # noqa: F401
from vivarium.lazy import lazy_names

if TYPE_CHECKING:
    from vivarium.experiment.build import register_policy, register_world
    from vivarium.experiment.config import ExperimentConfig, LLMConfig, load_config
    from vivarium.experiment.overrides import merge_overrides

_LAZY = {
    "ExperimentConfig": "vivarium.experiment.config",
    "LLMConfig": "vivarium.experiment.config",
    "load_config": "vivarium.experiment.config",
    "merge_overrides": "vivarium.experiment.overrides",
    "register_policy": "vivarium.experiment.build",
    "register_world": "vivarium.experiment.build",
    # Older code's ``from vivarium.experiment import Experiment``: the one name this package
    # hands on from above it, on first access only (``vivarium.facade`` is where they live).
    "Experiment": "vivarium.facade",
    "Run": "vivarium.facade",
}

__all__ = [
    "Experiment",
    "ExperimentConfig",
    "LLMConfig",
    "Run",
    "load_config",
    "merge_overrides",
    "register_policy",
    "register_world",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, __all__)
