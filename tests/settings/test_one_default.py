"""Each setting has one default: the constant of ``vivarium.settings``, at every layer.

The config field, the engine's ``WorldEngineConfig``, the ``Decider``, the gateway stack's
``GatewaySettings``, the built-in worlds and the cognitive policy's config all default to the
same constant, and no module that reads settings writes a default of its own: a second default
that creeps back (a ``16`` in the engine, a ``60.0`` in the stack) fails here.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from vivarium import settings
from vivarium.experiment.config import ExperimentConfig, LLMConfig

ROOT = Path(__file__).resolve().parents[2] / "vivarium"

# setting -> (its constant, the config field that defines it)
RUN_SETTINGS: dict[str, Any] = {
    "seed": settings.DEFAULT_SEED,
    "steps": settings.DEFAULT_STEPS,
    "agents": settings.DEFAULT_AGENTS,
    "scheduling": settings.DEFAULT_SCHEDULING,
    "order": settings.DEFAULT_ORDER,
    "message_history_limit": settings.DEFAULT_MESSAGE_HISTORY_LIMIT,
    "deterministic_timestamps": settings.DEFAULT_DETERMINISTIC_TIMESTAMPS,
}
LLM_SETTINGS: dict[str, Any] = {
    "model": settings.DEFAULT_MODEL,
    "temperature": settings.DEFAULT_TEMPERATURE,
    "max_tokens": settings.DEFAULT_MAX_TOKENS,
    "transport": settings.DEFAULT_TRANSPORT,
    "forced_tool_format": settings.DEFAULT_FORCED_TOOL_FORMAT,
    "timeout": settings.DEFAULT_TIMEOUT_S,
    "num_retries": settings.DEFAULT_NUM_RETRIES,
    "cache_mode": settings.DEFAULT_CACHE_MODE,
    "mock_latency_ms": settings.DEFAULT_MOCK_LATENCY_MS,
    "agent_retries": settings.DEFAULT_AGENT_RETRIES,
    "on_llm_error": settings.DEFAULT_ON_LLM_ERROR,
}


def _default(model: type, field: str) -> Any:
    return model.model_fields[field].get_default(call_default_factory=True)


def _parameter_default(function: Any, name: str) -> Any:
    return inspect.signature(function).parameters[name].default


def test_the_documented_values() -> None:
    """The defaults the README and the docstrings name (written here by hand, not imported)."""
    assert (settings.DEFAULT_SEED, settings.DEFAULT_STEPS, settings.DEFAULT_AGENTS) == (42, 100, 5)
    assert settings.DEFAULT_MAX_CONCURRENCY == 16
    assert settings.DEFAULT_MESSAGE_HISTORY_LIMIT == 20
    assert (settings.DEFAULT_TIMEOUT_S, settings.DEFAULT_NUM_RETRIES) == (60.0, 2)
    assert (settings.DEFAULT_MODEL, settings.DEFAULT_ON_LLM_ERROR) == ("mock", "stop")
    assert Path("runs") == settings.DEFAULT_RUNS_DIR


@pytest.mark.parametrize(("field", "constant"), RUN_SETTINGS.items())
def test_the_run_config_defaults_to_the_constant(field: str, constant: Any) -> None:
    assert _default(ExperimentConfig, field) == constant
    assert getattr(ExperimentConfig(), field) == constant


@pytest.mark.parametrize(("field", "constant"), LLM_SETTINGS.items())
def test_the_llm_section_defaults_to_the_constant(field: str, constant: Any) -> None:
    assert _default(LLMConfig, field) == constant
    assert getattr(ExperimentConfig().llm_in_force, field) == constant


@pytest.mark.parametrize(
    ("engine_field", "constant"),
    [
        ("max_concurrency", settings.DEFAULT_MAX_CONCURRENCY),
        ("message_history_limit", settings.DEFAULT_MESSAGE_HISTORY_LIMIT),
        ("scheduling", settings.DEFAULT_SCHEDULING),
        ("order", settings.DEFAULT_ORDER),
        ("deterministic_timestamps", settings.DEFAULT_DETERMINISTIC_TIMESTAMPS),
        ("agent_retries", settings.DEFAULT_AGENT_RETRIES),
        ("on_llm_error", settings.DEFAULT_ON_LLM_ERROR),
    ],
)
def test_the_engine_defaults_to_the_same_constant(engine_field: str, constant: Any) -> None:
    """An engine built by hand steps as a run of the default config does."""
    from vivarium.engine.engine import WorldEngineConfig

    assert _default(WorldEngineConfig, engine_field) == constant


def test_the_decider_and_the_worlds_default_to_the_same_constants() -> None:
    from vivarium.engine.deciding import Decider
    from vivarium.policies.cognitive import CognitivePolicyConfig
    from vivarium.worlds.channel import InMemoryChannel
    from vivarium.worlds.ecology import EcologyWorld

    assert _parameter_default(Decider, "max_concurrency") == settings.DEFAULT_MAX_CONCURRENCY
    assert _parameter_default(Decider, "retries") == settings.DEFAULT_AGENT_RETRIES
    assert _parameter_default(Decider, "on_llm_error") == settings.DEFAULT_ON_LLM_ERROR
    from vivarium.trace.db import TraceDb

    stamps = _parameter_default(TraceDb, "deterministic_timestamps")
    assert stamps == settings.DEFAULT_DETERMINISTIC_TIMESTAMPS
    limit = settings.DEFAULT_MESSAGE_HISTORY_LIMIT
    assert InMemoryChannel().message_history_limit == limit
    assert _parameter_default(EcologyWorld, "message_history_limit") == limit
    assert _default(CognitivePolicyConfig, "temperature") == settings.DEFAULT_TEMPERATURE
    assert _default(CognitivePolicyConfig, "max_tokens") == settings.DEFAULT_MAX_TOKENS


def test_the_gateway_stack_defaults_to_the_llm_sections_constants() -> None:
    """``GatewaySettings()`` is what ``gateway_settings`` makes of the default ``llm`` section."""
    from vivarium.experiment.build import gateway_settings
    from vivarium.gateways.stack import GatewaySettings

    by_hand, from_config = GatewaySettings(), gateway_settings(LLMConfig())
    for field in ("model", "mock_latency_ms", "api_base", "transport", "forced_tool_format"):
        assert getattr(by_hand, field) == getattr(from_config, field), field
    for field in ("timeout", "retries", "cache_mode", "requests_per_minute", "cache"):
        assert getattr(by_hand, field) == getattr(from_config, field), field
    assert by_hand.timeout == settings.DEFAULT_TIMEOUT_S
    assert by_hand.retries == settings.DEFAULT_NUM_RETRIES
    assert by_hand.api_base == ()


def test_each_gateway_built_by_hand_defaults_as_a_run_does() -> None:
    from vivarium.gateways import CachingGateway, LiteLLMGateway, MockLLMGateway, RetryGateway
    from vivarium.gateways.base import current_on_llm_error

    assert _parameter_default(LiteLLMGateway, "timeout") == settings.DEFAULT_TIMEOUT_S
    assert _parameter_default(LiteLLMGateway, "transport") == settings.DEFAULT_TRANSPORT
    fmt = _parameter_default(LiteLLMGateway, "forced_tool_format")
    assert fmt == settings.DEFAULT_FORCED_TOOL_FORMAT
    assert _parameter_default(RetryGateway, "retries") == settings.DEFAULT_NUM_RETRIES
    assert _parameter_default(MockLLMGateway, "latency_ms") == settings.DEFAULT_MOCK_LATENCY_MS
    assert _parameter_default(CachingGateway, "mode") == settings.DEFAULT_CACHE_MODE
    assert current_on_llm_error() == settings.DEFAULT_ON_LLM_ERROR  # outside any run


def test_the_runs_folder_has_one_home() -> None:
    import vivarium.experiment.runner as runner
    from vivarium.widgets import ControlPanel

    assert runner.DEFAULT_RUNS_DIR is settings.DEFAULT_RUNS_DIR
    assert _parameter_default(ControlPanel, "folder") is settings.DEFAULT_RUNS_DIR


# -- no second default ---------------------------------------------------------------------------
# The modules that read settings. A parameter or field named after a setting may default to a
# constant of ``vivarium.settings`` (a name) or to None (not given), never to a literal value.
SCANNED = [
    "experiment/config.py",
    "experiment/overrides.py",
    "experiment/runner.py",
    "experiment/build.py",
    "cli.py",
    "widgets.py",
    "facade.py",
    "engine",
    "gateways",
    "sweep",
    "worlds/channel.py",
    "worlds/ecology.py",
    "trace/db.py",
]
SETTING_NAMES = {
    "max_concurrency",
    "message_history_limit",
    "scheduling",
    "order",
    "deterministic_timestamps",
    "timeout",
    "num_retries",
    "retries",
    "transport",
    "forced_tool_format",
    "cache_mode",
    "mock_latency_ms",
    "agent_retries",
    "on_llm_error",
    "temperature",
    "max_tokens",
    "folder",
}


def _literal_defaults(tree: ast.AST) -> list[tuple[str, int, Any]]:
    """(name, line, value) of every setting-named parameter or field with a literal default."""
    found = []

    def literal(node: ast.AST | None) -> Any:
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Field":
            node = (
                node.args[0]
                if node.args
                else next((k.value for k in node.keywords if k.arg == "default"), None)
            )
        if isinstance(node, ast.Constant) and node.value is not None:
            return node.value
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            with_default = positional[len(positional) - len(args.defaults) :]
            pairs = list(zip(with_default, args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
            for arg, value in pairs:
                if arg.arg in SETTING_NAMES and literal(value) is not None:
                    found.append((arg.arg, node.lineno, literal(value)))
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id in SETTING_NAMES
            and literal(node.value) is not None
        ):
            found.append((node.target.id, node.lineno, literal(node.value)))
    return found


def _scanned_files() -> list[Path]:
    files: list[Path] = []
    for entry in SCANNED:
        path = ROOT / entry
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def test_the_scan_finds_a_literal_default() -> None:
    """The scan itself: a second default written as a literal is found (and a name is not)."""
    code = (
        "class C:\n    max_concurrency: int = Field(default=16, ge=1)\n"
        "def f(*, timeout: float = 60.0, retries: int = DEFAULT_NUM_RETRIES): ...\n"
        "def g(order='sorted', other=3): ...\n"
    )
    assert sorted(_literal_defaults(ast.parse(code)), key=lambda f: f[1]) == [
        ("max_concurrency", 2, 16),
        ("timeout", 3, 60.0),
        ("order", 4, "sorted"),
    ]


@pytest.mark.parametrize("path", _scanned_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_that_reads_settings_writes_a_default_of_its_own(path: Path) -> None:
    found = _literal_defaults(ast.parse(path.read_text(encoding="utf-8")))
    assert not found, f"{path.name}: literal defaults {found}: use vivarium.settings"


def test_a_config_without_an_llm_section_is_read_as_the_mocks_everywhere() -> None:
    """``llm_in_force``: the engine's decision settings and the gateway stack of a run without
    an ``llm`` section are those of the mock's defaults, as every builder reads them."""
    from vivarium.experiment.build import gateway_settings, shared_gateway
    from vivarium.experiment.runner import build_engine

    config = ExperimentConfig(agents=2, steps=1)
    assert config.llm is None and config.llm_in_force == LLMConfig(mock=True)
    engine = build_engine(config, None, {})
    assert engine.config.agent_timeout_s is None
    assert engine.config.agent_retries == settings.DEFAULT_AGENT_RETRIES
    assert engine.config.on_llm_error == settings.DEFAULT_ON_LLM_ERROR
    assert engine.config.max_concurrency == settings.DEFAULT_MAX_CONCURRENCY
    from vivarium.gateways.mock import MockLLMGateway
    from vivarium.gateways.stack import layers

    assert gateway_settings(config.llm_in_force).uses_mock
    assert isinstance(layers(shared_gateway(config, {}))[-1], MockLLMGateway)
