"""The sweep package's shape: what importing it loads, and what it keeps public."""

from __future__ import annotations

import json
import subprocess
import sys

import vivarium.sweep


def _modules_after(code: str) -> set[str]:
    """The ``vivarium`` modules loaded in a fresh interpreter after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return {name for name in json.loads(out.splitlines()[-1]) if name.startswith("vivarium")}


def test_sweep_imports_neither_the_experiment_nor_the_widgets() -> None:
    # The sweep sits below the experiment facade and the widgets: they use it, not the reverse.
    loaded = _modules_after("import vivarium.sweep")
    assert "vivarium.sweep" in loaded
    assert "vivarium.facade" not in loaded
    assert "vivarium.widgets" not in loaded


def test_the_worker_entry_point_imports_only_the_sweep() -> None:
    # Local workers start with ``python -c`` and import the worker module; it must exist and
    # pull in neither the experiment facade nor the widgets.
    from vivarium.sweep.worker import WORKER_CODE

    assert "vivarium.sweep.worker import worker_main" in WORKER_CODE
    loaded = _modules_after("from vivarium.sweep.worker import worker_main")
    assert "vivarium.facade" not in loaded
    assert "vivarium.widgets" not in loaded


def test_public_names_stay_importable_from_the_package() -> None:
    for name in (
        "run_sweep",
        "Sweep",
        "plan_sweep",
        "split_sweep_section",
        "parse_grid_items",
        "main_sweep",
        "run_seed_of",
        "run_task",
        "PlannedRun",
        "SweepIndex",
        "BACKENDS",
        "SWEEP_FRAMES",
        "INDEX_FILE",
    ):
        assert hasattr(vivarium.sweep, name), name
    assert set(vivarium.sweep.__all__) <= set(dir(vivarium.sweep))


def test_a_resumed_sweep_run_goes_on_at_the_pace_it_ran() -> None:
    """The settings a sweep hands a resume are the ones the run recorded: the run's own
    ``max_concurrency`` (4) wins over ``llm.max_concurrency`` (8), as it did when it ran.
    The worker hands them as every resume does (``runner.transport_settings``)."""
    import vivarium.sweep.worker as worker
    from vivarium import Experiment
    from vivarium.experiment.runner import transport_settings as _llm_transport

    assert worker.transport_settings is _llm_transport

    both = Experiment(max_concurrency=4, llm={"mock": True, "max_concurrency": 8}).config
    assert _llm_transport(both)["max_concurrency"] == 4
    assert (
        _llm_transport(Experiment(llm={"mock": True, "max_concurrency": 8}).config)[
            "max_concurrency"
        ]
        == 8
    )
    assert _llm_transport(Experiment(max_concurrency=4).config) is None  # the trace holds it
