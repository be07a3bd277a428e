"""Bad configs: any mapping of keys and values, any YAML or JSON text, and any agent.yaml is
either accepted (and then builds a runnable experiment) or rejected with one ``ConfigError``
line that names the file and the field."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from vivarium import Experiment
from vivarium.errors import ConfigError, one_line
from vivarium.experiment.config import (
    AgentGroup,
    AutonomousConfig,
    ExperimentConfig,
    LLMConfig,
    load_config,
    make_config,
)
from vivarium.workflow.config import AGENT_FILE, AgentSpec, load_agent

WORDS = [
    "channel", "ecology", "random", "cognitive", "workflow", "sequential", "simultaneous",
    "sorted", "shuffle", "stepped", "autonomous", "mock", "noop", "emit_event", "post_message",
    "record", "replay", "auto", "virtual", "real", "data/agents/alpha_2", "",
]  # fmt: skip
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=60)
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()
    | st.sampled_from(WORDS)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


def keyed(fields: list[str], values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts whose keys are mostly real field names, sometimes anything."""
    return st.dictionaries(st.sampled_from(fields) | st.text(max_size=10), values, max_size=5)


groups = keyed(
    list(AgentGroup.model_fields), scalars | st.lists(st.sampled_from(WORDS), max_size=3)
)
nested = {
    "llm": keyed(list(LLMConfig.model_fields), scalars),
    "autonomous": keyed(list(AutonomousConfig.model_fields), scalars),
    "agents": st.lists(groups, max_size=3),
    "world_options": st.dictionaries(st.text(max_size=10), json_values, max_size=3),
    "action_space": st.lists(st.sampled_from(WORDS) | st.text(max_size=6), max_size=3),
}


# Values a config could well have: most generated configs are then accepted, and run.
plausible: dict[str, st.SearchStrategy[Any]] = {
    "name": st.from_regex(r"[a-z][a-z0-9_.\-]{0,8}", fullmatch=True),
    "world": st.sampled_from(["channel", "ecology"]),
    "policy": st.sampled_from(["random", "cognitive"]),
    "agents": st.integers(1, 6),
    "steps": st.integers(0, 4),
    "seed": st.integers(0, 2**63 - 1),
    "scheduling": st.sampled_from(["sequential", "simultaneous"]),
    "order": st.sampled_from(["sorted", "shuffle"]),
    "message_history_limit": st.integers(0, 2**70),
    "checkpoint_every": st.none() | st.integers(1, 2**40),
    "deterministic_timestamps": st.booleans(),
    "action_space": st.lists(st.sampled_from(["noop", "emit_event", "post_message"]), min_size=1),
    "llm": st.fixed_dictionaries(
        {"mock": st.just(True)},
        optional={"temperature": st.floats(0, 2), "max_tokens": st.integers(1, 64)},
    ),
    "world_options": st.just({}),
}


@st.composite
def junk_dicts(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(
        st.lists(
            st.sampled_from(list(ExperimentConfig.model_fields)) | st.text(max_size=10), max_size=6
        )
    )
    data: dict[str, Any] = {}
    for key in keys:
        choices = [json_values]
        if key in nested:
            choices.append(nested[key])
        if key in plausible:
            choices += [plausible[key]] * 3
        data[key] = draw(st.one_of(choices))
    return data


valid_dicts = st.fixed_dictionaries({}, optional=plausible)
one_bad_field = st.builds(lambda good, bad: {**good, **bad}, valid_dicts, junk_dicts())


def config_dicts() -> st.SearchStrategy[dict[str, Any]]:
    """Configs that are valid, valid but for a field or two, or anything at all."""
    return valid_dicts | one_bad_field | junk_dicts()


@contextlib.contextmanager
def sandbox() -> Any:
    """A throwaway working directory: accepted configs may name cassettes and trace files."""
    folder = tempfile.mkdtemp(prefix="vvm-fuzz-")
    with contextlib.chdir(folder):
        try:
            yield Path(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def check_rejection(exc: ConfigError, where: str, keys: list[str] | None = None) -> str:
    message = str(exc)
    assert message.splitlines() == [message] and message, repr(message)
    assert message.startswith(f"{where}: "), message
    if keys is not None:  # the line names one of the fields given
        names = [one_line(str(k)) or "''" for k in keys]
        assert any(f"{n}:" in message or f"{n}." in message for n in names), message
    return message


def exercise(config: ExperimentConfig) -> None:
    """An accepted config is usable: it has a run id, and a small one builds and steps.

    Its id digests the declared input files as they are now: one that is not there is said
    when the run is identified, in one line naming the field (the config itself is valid
    wherever the file is).
    """
    try:
        config.resolved_run_id()
    except ConfigError as exc:
        assert config.input_files, str(exc)
        check_rejection(exc, "input_files")
        return
    json.dumps(config.identity(), default=str)
    if config.agent_count > 50 or config.world != "channel" and config.agent_count > 10:
        return
    llm = config.llm
    with sandbox():
        try:
            engine = Experiment(config).build(None)
        except ConfigError as exc:  # found when building: an agent folder, a cassette...
            assert str(exc).splitlines() == [str(exc)], str(exc)
            return
        if llm is None or llm.uses_mock:  # a real provider would reach for the network
            engine.step()


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=config_dicts())
@example(data={"world": "channel", "input_files": ["channel"]})  # a declared file not there
def test_any_config_mapping_is_accepted_or_one_line_naming_the_field(data: dict[str, Any]) -> None:
    try:
        config = make_config(ExperimentConfig, data)
    except ConfigError as exc:
        check_rejection(exc, "config", list(data))
        event("rejected")
        return
    event("accepted")
    exercise(config)


def yaml_texts() -> st.SearchStrategy[str]:
    dumped = config_dicts().map(lambda d: yaml.safe_dump(d, allow_unicode=True))
    mangled = st.tuples(dumped, st.integers(0, 400), st.text(max_size=6)).map(
        lambda t: t[0][: t[1]] + t[2] + t[0][t[1] :]
    )
    return dumped | mangled | st.text(max_size=200) | st.sampled_from(
        ["", "---", "[1, 2]", "just text", "a: [", "? [a]\n: 1", "1: 2", "!!python/object:os.system {}",
         "a: &x [*x]", "agents: [{agent: 5}]", "agents: [{agent: [1]}]"]
    )  # fmt: skip


def json_texts() -> st.SearchStrategy[str]:
    dumped = config_dicts().map(lambda d: json.dumps(d, default=str))
    return dumped | dumped.map(lambda s: s[: len(s) // 2]) | st.text(max_size=100) | st.just("NaN")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_any_config_file_is_accepted_or_one_line(suffix: str, tmp_path: Path) -> None:
    texts = yaml_texts() if suffix == ".yaml" else json_texts()
    path = tmp_path / f"experiment{suffix}"

    known = {  # found by this test: a value of no URL shape reached the lenient reader
        ".yaml": "llm:\n api_base: True",
        ".json": '{"llm":{"api_base":true}}',
    }[suffix]

    @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
    @given(text=texts)
    @example(text=known)
    def check(text: str) -> None:
        path.write_text(text, encoding="utf-8")
        for load in (load_config, Experiment.from_file):
            try:
                loaded = load(path)
            except ConfigError as exc:
                check_rejection(exc, str(path))
                event(f"{load.__name__}: rejected")
                continue
            event(f"{load.__name__}: accepted")
            exercise(loaded if isinstance(loaded, ExperimentConfig) else loaded.config)

    check()


def test_a_non_string_agent_folder_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "experiment.yaml"
    path.write_text("agents: [{policy: workflow, agent: 5}]\n")
    with pytest.raises(ConfigError) as err:
        Experiment.from_file(path)
    check_rejection(err.value, str(path))


# -- agent folders ----------------------------------------------------------------------------
ALPHA = ROOT / "data" / "agents" / "alpha_2"
ALPHA_DATA = yaml.safe_load((ALPHA / AGENT_FILE).read_text())


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


ALPHA_PATHS = _paths(ALPHA_DATA)


@st.composite
def mutated_agents(draw: st.DrawFn) -> str:
    """alpha_2's agent.yaml with a few fields replaced, deleted or added."""
    data = json.loads(json.dumps(ALPHA_DATA))
    rng = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 3))):
        path = rng.choice(_paths(data) or [()])
        if not path:
            break
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        kind = draw(st.sampled_from(["replace", "delete", "add"]))
        last = path[-1]
        if kind == "replace":
            parent[last] = draw(
                json_values | st.sampled_from(["*", "a -> b", "x +", "__import__('os')"])
            )
        elif kind == "delete" and isinstance(parent, dict):
            del parent[last]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(json_values)
    return yaml.safe_dump(data, allow_unicode=True)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    text=mutated_agents()
    | st.text(max_size=150)
    | keyed(list(AgentSpec.model_fields), json_values).map(yaml.safe_dump)
)
def test_any_agent_yaml_is_accepted_or_one_line_naming_the_file(text: str) -> None:
    with sandbox() as folder:
        agent = folder / "agent_x"
        agent.mkdir()
        (agent / AGENT_FILE).write_text(text, encoding="utf-8")
        try:
            spec = load_agent(agent)
        except ConfigError as exc:
            message = check_rejection(exc, str(agent / AGENT_FILE))
            problem = message.removeprefix(f"{agent / AGENT_FILE}: ")
            whole_file = ("not valid YAML", "expected a mapping", "cannot read")
            assert problem.startswith(whole_file) or ": " in problem, message  # field: problem
            event("rejected")
            return
        assert isinstance(spec, AgentSpec)
        event("accepted")
