"""``api_base``: given in any shape, by any entry point, read as one tuple everywhere inside.

One URL, URLs separated by commas (a flag, the panel's text field), or a list (a config file):
``vivarium.settings.server_urls`` reads every shape, the config keeps the shape a run records
(one URL a string, several a list), and the gateway stack, ``LiteLLMGateway`` and the notes
about servers all see the same tuple of URLs, in the order given.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vivarium import Experiment, Run
from vivarium.cli import main
from vivarium.errors import ConfigError
from vivarium.experiment.config import LLMConfig
from vivarium.settings import server_urls

_NUMBER = itertools.count()


def _url(host: int, port: int, slash: bool) -> str:
    return f"http://h{host}.test:{port}/v1" + ("/" if slash else "")


URLS = st.lists(
    st.tuples(st.integers(0, 999), st.integers(1, 65535), st.booleans()),
    min_size=1,
    max_size=4,
    unique_by=lambda t: t[0],
).map(lambda found: [_url(*t) for t in found])


@st.composite
def shaped(draw: st.DrawFn) -> tuple[list[str], Any]:
    """(the URLs, ``api_base`` as some entry point gives them)."""
    urls = draw(URLS)
    shape = draw(st.sampled_from(["text", "list", "tuple"]))
    if shape == "text" or len(urls) == 1 and draw(st.booleans()):
        spaces = draw(st.lists(st.sampled_from(["", " ", "  "]), min_size=2, max_size=2))
        return urls, ",".join(f"{spaces[0]}{u}{spaces[1]}" for u in urls)
    return urls, urls if shape == "list" else tuple(urls)


def recorded_shape(urls: list[str]) -> str | list[str]:
    return urls[0] if len(urls) == 1 else urls


@given(shaped())
def test_every_shape_reads_as_the_same_tuple(case: tuple[list[str], Any]) -> None:
    from vivarium.experiment.build import gateway_settings
    from vivarium.gateways import LiteLLMGateway
    from vivarium.gateways.stack import GatewaySettings

    urls, value = case
    assert server_urls(value) == tuple(urls)
    llm = LLMConfig(model="openai/x", api_base=value)
    assert llm.api_base == recorded_shape(urls)  # as a run records it
    assert llm.api_bases == tuple(urls)
    assert gateway_settings(llm).api_base == tuple(urls)
    assert GatewaySettings(api_base=value).api_base == tuple(urls)
    provider = LiteLLMGateway(api_base=gateway_settings(llm).api_base)
    assert provider.api_bases == tuple(urls) and provider.api_base == urls[0]


def test_none_is_no_server_and_bad_entries_are_one_line() -> None:
    from vivarium.gateways.stack import GatewaySettings

    assert server_urls(None) == () and LLMConfig().api_bases == ()
    assert GatewaySettings(api_base=None).api_base == ()
    for value, says in [
        ("http://a:1/v1,http://a:1/v1/", "listed twice"),
        ("http://a:1/v1,", "empty server URL"),
        ([], "at least one"),
        ("ftp://a/v1", "not an http"),
    ]:
        with pytest.raises(ValueError, match=says):
            server_urls(value)
        with pytest.raises(ConfigError, match=says):
            Experiment(llm={"api_base": value})


class Built(ConfigError):
    """Raised once the gateway's settings are made: they are all these tests need."""


@pytest.fixture
def stacks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The ``GatewaySettings`` each run builds its gateway from (the run stops there)."""
    import vivarium.experiment.build as build

    seen: list[Any] = []
    original = build.gateway_settings

    def capture(llm: LLMConfig) -> Any:
        seen.append(original(llm))
        raise Built("built")

    monkeypatch.setattr(build, "gateway_settings", capture)
    return seen


ENTRIES = ["constructor", "from_file", "vvm phase2", "vvm run", "aam", "panel"]


def start(entry: str, value: Any, folder: Path) -> None:
    """Start a run whose LLM agents are sent to ``value`` (it stops at its gateway)."""
    n = next(_NUMBER)
    db = folder / f"r{n}.sqlite"
    base = {"policy": "cognitive", "agents": 1, "steps": 1, "llm": {"model": "openai/x"}}
    text = value if isinstance(value, str) else ",".join(value)  # what a flag or field holds
    if entry == "constructor":
        with pytest.raises(Built):
            Experiment(**{**base, "llm": {"model": "openai/x", "api_base": value}}).run(db)
    elif entry == "from_file":
        path = folder / f"c{n}.yaml"
        llm = {"model": "openai/x", "api_base": list(value) if isinstance(value, tuple) else value}
        path.write_text(yaml.safe_dump({**base, "llm": llm}))
        with pytest.raises(Built):
            Experiment.from_file(path).run(db)
    elif entry == "vvm phase2":
        args = ["phase2", "--model", "openai/x", "--api-base", text, "--db", str(db)]
        assert main([*args, "--steps", "1", "--agents", "1", "--no-progress"]) == 2
    elif entry == "vvm run":
        path = folder / f"c{n}.yaml"
        path.write_text(yaml.safe_dump(base))
        assert main(["run", str(path), "--api-base", text, "--db", str(db), "--no-progress"]) == 2
    elif entry == "aam":
        path = folder / f"c{n}.json"
        policy = {"kind": "cognitive", "model": "openai/x", "api_base": text}
        path.write_text(json.dumps({"run": {"steps": 1, "agents": 1}, "policy": policy}))
        assert main(["experiment", "--config", str(path), "--db", str(db)]) == 2
    elif entry == "panel":
        pytest.importorskip("ipywidgets")
        from vivarium.widgets import ControlPanel

        panel = ControlPanel(Experiment(**base), folder=folder)
        panel.api_base.value = text
        assert panel.run() is None  # it shows the error (Built) instead
    else:
        raise AssertionError(entry)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(entry=st.sampled_from(ENTRIES), case=shaped())
def test_every_entry_point_sends_the_calls_to_the_same_servers(
    stacks: list[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    entry: str,
    case: tuple[list[str], Any],
) -> None:
    urls, value = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start(entry, value, tmp_path)
    capsys.readouterr()
    assert stacks[-1].api_base == tuple(urls)


def test_a_resume_takes_servers_in_any_shape(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``Run.resume(llm={"api_base": ...})`` reads them as a run does, and records them so."""
    db = tmp_path / "run.sqlite"
    Experiment(policy="cognitive", agents=1, steps=2, llm={"mock": True}).run(db)
    urls = ["http://h1.test:81/v1", "http://h2.test:82/v1"]
    for value in (" , ".join(urls), urls, tuple(urls)):
        con = sqlite3.connect(db)
        with con:
            con.execute("UPDATE runs SET status = 'interrupted', steps_done = 1")
        con.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Run.open(db).resume(progress=False, llm={"api_base": value})
        from vivarium.trace.resume import recorded_llm_settings

        assert recorded_llm_settings(db)["api_base"] == urls  # recorded as a list
        assert LLMConfig(api_base=recorded_llm_settings(db)["api_base"]).api_bases == tuple(urls)
