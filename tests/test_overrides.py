"""What the user asked for is what runs: overrides merge the same way at every entry point.

The property: an override names some fields of a section (``llm``, ``autonomous``,
``world_options``); the config that runs has exactly those set and every other field of the
base as it was, whether the override came through the constructor, ``from_file``, a sweep's
explicit configs or a sweep axis. The expected config is built here field by field.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vivarium import Experiment
from vivarium.errors import OverrideWarning
from vivarium.experiment.config import ExperimentConfig
from vivarium.sweep.plan import plan_sweep

_BASE_LLM = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["mock", "openai/smollm2", "ollama/gemma3"]),
        "temperature": st.sampled_from([0.0, 0.3]),
        "max_tokens": st.sampled_from([64, 128]),
    },
    optional={
        "api_base": st.sampled_from(["http://127.0.0.1:8080/v1", "http://10.0.0.2:9/v1"]),
        "mock": st.booleans(),
        "force_tool": st.booleans(),
    },
)
_LLM_OVERRIDE = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.sampled_from([0.7, 1.0]),
        "max_tokens": st.sampled_from([32, 256]),
        "system_prompt": st.just("Be brief."),
        "model": st.sampled_from(["openai/other", "mock"]),
    },
)
_OPTIONS = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 3), max_size=3)


def _expected(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """The base's fields with the override's set; a model named alone asks for that model."""
    out = {**base}
    for key, value in override.items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    llm_given = override.get("llm", {})
    if "model" in llm_given and "mock" not in llm_given and llm_given["model"] != "mock":
        out["llm"]["mock"] = False
    return out


def _section(config: ExperimentConfig, key: str) -> dict[str, Any]:
    value = getattr(config, key)
    return value if isinstance(value, dict) else value.model_dump(mode="json")


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    base_llm=_BASE_LLM,
    llm=_LLM_OVERRIDE,
    base_options=_OPTIONS,
    options=_OPTIONS,
    think=st.sampled_from([0.5, 2.0]),
    duration=st.sampled_from([5.0, 30.0]),
)
def test_every_entry_point_merges_an_override_into_the_base_the_same_way(
    tmp_path: Path,
    base_llm: dict[str, Any],
    llm: dict[str, Any],
    base_options: dict[str, Any],
    options: dict[str, Any],
    think: float,
    duration: float,
) -> None:
    base = {
        "name": "merge",
        "policy": "cognitive",
        "agents": 2,
        "seed": 3,
        "llm": base_llm,
        "world_options": base_options,
        "autonomous": {"think_s": think},
    }
    override = {"llm": llm, "world_options": options, "autonomous": {"duration": duration}}
    want = _expected({k: base[k] for k in ("llm", "world_options", "autonomous")}, override)
    file = tmp_path / "base.yaml"
    file.write_text(yaml.safe_dump(base))
    base_config = ExperimentConfig.model_validate(base)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OverrideWarning)  # said when mock and model swap
        made = {
            "constructor": Experiment(base_config, **override).config,
            "from_file": Experiment.from_file(file, **override).config,
            "sweep configs": plan_sweep(base_config, None, [override])[0].config,
            "sweep axes": plan_sweep(base_config, {k: [v] for k, v in override.items()})[0].config,
        }
    for where, config in made.items():
        for key, expected in want.items():
            got = _section(config, key)
            for field, value in expected.items():
                assert got[field] == value, (where, key, field, got[field], value)
        # nothing else of the base went missing (the model and server stay)
        assert config.llm is not None
        for field in base_llm:
            if field not in llm and not (field == "mock" and "model" in llm):
                assert _section(config, "llm")[field] == base_llm[field], (where, field)


def test_an_llm_override_keeps_the_model_and_server(tmp_path: Path) -> None:
    """The reported case: ``llm={"temperature": 0.7}`` left the run answering from the mock."""
    base = Experiment(
        name="pg",
        policy="cognitive",
        llm={"model": "openai/smollm2", "api_base": "http://127.0.0.1:8080/v1"},
    ).config
    config = Experiment(base, llm={"temperature": 0.7}).config
    assert config.llm is not None
    assert (config.llm.model, config.llm.api_base) == ("openai/smollm2", "http://127.0.0.1:8080/v1")
    assert config.llm.temperature == 0.7 and not config.llm.uses_mock


@pytest.mark.parametrize(
    ("base_llm", "given", "says"),
    [
        ({"model": "openai/smollm2"}, {"mock": True}, "the deterministic mock now answers"),
        ({"model": "openai/smollm2"}, {"model": "mock"}, "the deterministic mock now answers"),
        ({"model": "mock"}, {"model": "openai/smollm2"}, "openai/smollm2 now answers"),
        ({"model": "openai/a", "mock": True}, {"model": "openai/b"}, "openai/b now answers"),
    ],
)
def test_a_switch_between_the_mock_and_a_model_says_so(
    tmp_path: Path, base_llm: dict[str, Any], given: dict[str, Any], says: str
) -> None:
    base = Experiment(name="sw", policy="cognitive", llm=base_llm).config
    with pytest.warns(OverrideWarning, match=says):
        config = Experiment(base, llm=given).config
    file = tmp_path / "c.json"
    file.write_text(json.dumps(base.model_dump(mode="json", exclude={"llm": {"api_key"}})))
    with pytest.warns(OverrideWarning, match=says):
        from_file = Experiment.from_file(file, llm=given).config
    assert config.llm == from_file.llm
    with warnings.catch_warnings():
        warnings.simplefilter("error", OverrideWarning)  # the same answerer: nothing to say
        Experiment(base, llm={"temperature": 0.5})


def test_vvm_run_mock_llm_says_the_mock_answers(tmp_path: Path, capsys: Any) -> None:
    from vivarium.cli import main

    file = tmp_path / "real.yaml"
    file.write_text(
        yaml.safe_dump(
            {
                "name": "real",
                "policy": "cognitive",
                "agents": 1,
                "steps": 1,
                "llm": {"model": "openai/smollm2", "api_base": "http://127.0.0.1:9/v1"},
            }
        )
    )
    code = main(
        ["run", str(file), "--mock-llm", "--db", str(tmp_path / "r.sqlite"), "--no-progress"]
    )
    assert code == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "mock now answers" in line]
    assert len(notes) == 1 and notes[0].startswith("vvm run: note: llm: the deterministic mock")
