"""One run over several OpenAI-compatible servers: the same records as over one, and failover.

The servers are the project's fake ones answering ``outage.deterministic_reply`` (a reply that
depends on the request only), so which server answered cannot show in the trace: a run over
three servers, and one whose server dies mid-run, must record the trace of a run over one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import outage
from tests.support.experiments import llm_experiment
from tests.support.fake_openai import FakeOpenAIServer, wait_until
from vivarium import Run
from vivarium.errors import ConfigError, RunInterrupted
from vivarium.experiment.config import ExperimentConfig, LLMConfig, load_config, make_config
from vivarium.gateways import LiteLLMGateway, LLMCallError, collect_calls
from vivarium.gateways.openai_http import WireError
from vivarium.gateways.servers import ServerPool
from vivarium.trace.validate import validate_trace

STEPS, AGENTS = 12, 3
MODEL = "openai/fake"


# Simultaneous scheduling: three calls in flight at once, one per server.
_experiment = partial(
    llm_experiment, name="servers", agents=AGENTS, steps=STEPS, seed=7, model=MODEL, timeout=2,
    num_retries=1,
)  # fmt: skip


def _servers(count: int, latency_ms: float = 0.0) -> list[FakeOpenAIServer]:
    return [outage.server(latency_ms=latency_ms) for _ in range(count)]


def _texts(path: Path) -> list[tuple[Any, Any]]:
    frame = Run.open(path).llm_exchanges()
    return list(zip(frame["request"], frame["reply"], strict=True))


def _replies(servers: list[FakeOpenAIServer]) -> int:
    """Replies the servers delivered (a request cut off by a dying server got none)."""
    return sum(1 for srv in servers for reply in srv.replies if reply is not None)


def _kill_after(srv: FakeOpenAIServer, answered: int) -> threading.Thread:
    """Kill ``srv`` after it answered ``answered`` requests: the next one is cut mid-reply
    (a server dying with a call in flight), then it stops (later connections are refused)."""
    srv.faults = lambda index, body: "close_mid_body" if index >= answered else None

    def watch() -> None:
        wait_until(lambda: srv.request_count > answered, timeout=120)
        srv.stop()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> Callable[[bool], Path]:
    """The run against one server (LangGraph policy or plain), the expected trace."""
    made: dict[bool, Path] = {}

    def reference(graph: bool) -> Path:
        if graph not in made:
            db = tmp_path_factory.mktemp("one") / "one.sqlite"
            srv = outage.server()
            try:
                run = _experiment(srv.base_url, graph=graph).run(db)
            finally:
                srv.stop()
            assert run.metadata["status"] == "complete"
            assert srv.request_count == STEPS * AGENTS
            made[graph] = db
        return made[graph]

    return reference


def test_three_servers_record_the_trace_of_one(
    references: Callable[[bool], Path], tmp_path: Path
) -> None:
    reference = references(True)
    db = tmp_path / "three.sqlite"
    servers = _servers(3, latency_ms=20)  # the calls of a step overlap: each goes elsewhere
    try:
        run = _experiment([s.base_url for s in servers]).run(db)
    finally:
        for srv in servers:
            srv.stop()
    assert run.metadata["status"] == "complete" and run.health.ok
    # Spread over all three, every call made once.
    counts = [srv.request_count for srv in servers]
    assert all(n > 0 for n in counts) and sum(counts) == STEPS * AGENTS
    assert validate_trace(db).status == "ok"
    outage.assert_same_run(reference, db)  # actions, state hashes, messages, call rows
    assert _texts(db) == _texts(reference)  # the request and reply texts too
    assert run.run_id == Run.open(reference).run_id  # the servers are not the run's identity


@pytest.mark.parametrize("graph", [False, True], ids=["plain", "langgraph"])
def test_a_server_killed_mid_run_loses_nothing(
    references: Callable[[bool], Path], tmp_path: Path, graph: bool
) -> None:
    reference = references(graph)
    db = tmp_path / "failover.sqlite"
    servers = _servers(3, latency_ms=20)
    _kill_after(servers[1], 5)
    try:
        run = _experiment([s.base_url for s in servers], graph=graph).run(db)
    finally:
        for srv in servers:
            srv.stop()
    assert servers[1].request_count > 5  # cut off with calls in flight, then gone
    assert run.metadata["status"] == "complete" and run.metadata["steps_done"] == STEPS
    actions = run.actions
    assert len(actions) == STEPS * AGENTS
    assert not actions["fallback"].any() and actions["success"].all()
    assert run.llm_calls["error"].isna().all()  # the failovers are no attempts of the agents
    assert _replies(servers) == STEPS * AGENTS  # one reply per decision, none lost or doubled
    assert validate_trace(db).status == "ok"
    outage.assert_same_run(reference, db)
    assert _texts(db) == _texts(reference)


@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_every_server_dead_stops_the_run_as_an_outage(tmp_path: Path, transport: str) -> None:
    db = tmp_path / "dead.sqlite"
    servers = _servers(3)
    for srv in servers:
        outage.stop_after(srv, 6)  # about step 6 of 12 (three calls a step over three servers)
    try:
        with pytest.raises(RunInterrupted) as info:
            # Through litellm the second attempt finds every server cooling down (the Router
            # does not try them then) and waits for them: the third tries them all again.
            retries = 2 if transport == "litellm" else 1
            _experiment(
                [s.base_url for s in servers], transport=transport, num_retries=retries
            ).run(db)
    finally:
        for srv in servers:
            srv.stop()
    text = str(info.value)
    assert "\n" not in text and "(connection broken)" in text
    if transport == "direct":
        assert "all 3 servers failed" in text
    else:
        assert "in cooldown" not in text and "after 3 attempts" in text
    assert "vvm resume" in text
    run = Run.open(db)
    done = run.metadata["steps_done"]
    assert run.metadata["status"] == "interrupted" and 0 < done < STEPS
    actions = run.actions
    assert len(actions) == done * AGENTS  # the failing step is not committed
    assert not actions["fallback"].any() and actions["success"].all()
    assert run.llm_calls["error"].isna().all()
    assert validate_trace(db).status == "incomplete"


# -- configuration -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "llm: api_base: give at least one server URL"),
        (
            ["http://127.0.0.1:1/v1", "127.0.0.1:2/v1"],
            "llm: api_base: '127.0.0.1:2/v1' is not an http:// or https:// URL with a host",
        ),
        (
            "http://a:notaport/v1",
            "llm: api_base: 'http://a:notaport/v1' has no valid port (1-65535)",
        ),
        ("http://a:99999/v1", "llm: api_base: 'http://a:99999/v1' has no valid port (1-65535)"),
        (
            "http://:8000/v1",
            "llm: api_base: 'http://:8000/v1' is not an http:// or https:// URL with a host",
        ),
        (
            "http://a/v1 http://b/v1",
            "llm: api_base: 'http://a/v1 http://b/v1' is not one URL (separate several with "
            "commas)",
        ),
        ("http://a/v1,", "llm: api_base: an empty server URL (a comma too many?)"),
        (
            "$VLLM_URL",
            "llm: api_base: '$VLLM_URL': environment variables are not expanded here; give the URL",
        ),
        (
            ["http://a:1/v1", "http://b:1/v1", "http://a:1/v1/"],
            "llm: api_base: http://a:1/v1/ is listed twice",
        ),
        ("ftp://a/v1", "llm: api_base: 'ftp://a/v1' is not an http:// or https:// URL with a host"),
        (["http://a:1/v1", None], "llm: api_base: entry 2 is empty"),  # YAML's "- " or "- null"
        ([None], "llm: api_base: entry 1 is empty"),
        (["http://a:1/v1", 8000], "llm: api_base: entry 2 is 8000, not a URL"),
        (8000, "llm: api_base: give a URL or a list of URLs, not 8000"),
    ],
)
def test_bad_server_lists_are_one_line_errors(value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_config(LLMConfig, {"model": MODEL, "api_base": value}, where="llm")
    assert str(info.value) == message
    with pytest.raises(ConfigError) as info:  # the same from an experiment's llm section
        make_config(ExperimentConfig, {"llm": {"model": MODEL, "api_base": value}})
    assert str(info.value) == "config: " + message.replace("llm: ", "llm.")


def test_an_empty_entry_in_a_yaml_server_list_is_one_plain_line(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "policy: cognitive\nllm:\n  model: openai/fake\n  api_base:\n"
        "    - http://10.0.0.1:8000/v1\n    -\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: llm.api_base: entry 2 is empty"


def test_server_lists_from_python_yaml_and_a_comma_separated_string(tmp_path: Path) -> None:
    urls = ["http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1"]
    assert LLMConfig(api_base=urls).api_base == urls
    assert LLMConfig(api_base=" , ".join(urls)).api_base == urls  # a CLI flag, a text field
    assert LLMConfig(api_base=[urls[0]]).api_base == urls[0]  # one server stays a string
    assert LLMConfig(api_base=urls).api_bases == tuple(urls)  # the one shape inside
    assert LLMConfig(api_base=urls[0]).api_bases == (urls[0],) and LLMConfig().api_bases == ()
    path = tmp_path / "run.yaml"
    path.write_text(
        "policy: cognitive\nllm:\n  model: openai/fake\n  api_base:\n"
        + "".join(f"    - {u}\n" for u in urls)
    )
    config = load_config(path)
    assert config.llm is not None and config.llm.api_base == urls
    # Where calls go is no part of what the run is: one server or two, the same run id.
    one = make_config(
        ExperimentConfig, {"policy": "cognitive", "llm": {"model": MODEL, "api_base": urls[0]}}
    )
    assert config.resolved_run_id() == one.resolved_run_id()


# -- the pool ------------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_pool_picks_the_least_busy_server_ties_by_list_order() -> None:
    clock = Clock()
    pool = ServerPool(["http://a/v1", "http://b/v1", "http://c/v1"], cooldown=5, clock=clock)
    assert [pool._acquire(set()) for _ in range(4)] == [0, 1, 2, 0]
    assert pool.in_flight() == [2, 1, 1]
    pool._release(0, "answered")
    pool._release(0, "answered")
    assert pool._acquire(set()) == 0  # 0, 1, 1: the least busy
    pool._release(1, "failed")  # 1, 0, 1, and b cools down
    assert pool.cooling() == [False, True, False]
    assert pool._acquire(set()) == 0  # b is idle but cooling: the warm ones first
    assert pool._acquire({0, 2}) == 1  # and it is still tried when nothing else is left
    clock.now += 5.01
    assert pool.cooling() == [False, False, False]
    pool._release(1, "answered")
    assert pool.in_flight() == [2, 0, 1] and pool._acquire(set()) == 1  # back in rotation
    assert pool.answered == [2, 1, 0] and pool.failed == [0, 1, 0]


def test_a_server_failing_again_and_again_waits_ever_longer_and_ranks_behind() -> None:
    """A hung server costs one call its timeout per cooldown: the cooldown doubles with each
    failure in a row (5, 10, 20 s here), and until it answers it counts one call busier."""
    clock = Clock()
    pool = ServerPool(["http://a/v1", "http://b/v1"], cooldown=5, clock=clock)
    for expected_wait in (5, 10, 20):
        index = pool._acquire({1})
        assert index == 0
        pool._release(0, "failed")
        clock.now += expected_wait - 0.01
        assert pool.cooling() == [True, False]
        clock.now += 0.02
        assert pool.cooling() == [False, False]
    assert pool._acquire(set()) == 1  # both idle: the one that failed last ranks behind
    assert pool._acquire(set()) == 0  # b has a call in flight now: a is tried
    pool._release(0, "answered")  # a answers: warm, and its next failure cools it 5 s again
    pool._release(1, "answered")
    assert pool._acquire(set()) == 0  # no penalty left: ties by list order
    pool._release(0, "failed")
    clock.now += 5.01
    assert pool.cooling() == [False, False]


def _gateway(servers: list[FakeOpenAIServer], **kwargs: Any) -> LiteLLMGateway:
    return LiteLLMGateway(api_base=[s.base_url for s in servers], transport="direct", **kwargs)


def _ask(gateway: LiteLLMGateway, text: str = "hello") -> Any:
    return gateway.chat(model=MODEL, messages=[{"role": "user", "content": text}])


@pytest.mark.parametrize("fault", ["500", "503", "429", "not_json", "close_mid_body", "timeout"])
def test_a_server_failure_moves_the_attempt_on_without_a_record(fault: str) -> None:
    with (
        FakeOpenAIServer(faults=[fault], timeout_s=2) as bad,
        FakeOpenAIServer(reply=lambda i, b: outage.deterministic_reply(0, b)) as good,
    ):
        gateway = _gateway([bad, good], timeout=0.5)
        with collect_calls() as calls:
            reply = _ask(gateway)
        assert reply.tool_calls[0].name == "post_message"
        assert (bad.request_count, good.request_count) == (1, 1)
        assert len(calls) == 1 and calls[0].error is None and calls[0].attempt == 1
        assert gateway.servers is not None and gateway.servers.cooling() == [True, False]
        _ask(gateway, "again")  # the cooled server waits behind the warm one
        assert (bad.request_count, good.request_count) == (1, 2)


def test_a_request_the_server_rejects_is_not_sent_elsewhere() -> None:
    with FakeOpenAIServer(faults=["400"]) as first, FakeOpenAIServer() as second:
        gateway = _gateway([first, second])
        with collect_calls() as calls, pytest.raises(LLMCallError) as info:
            _ask(gateway)
    assert info.value.kind == "bad_request" and not info.value.retryable
    assert (first.request_count, second.request_count) == (1, 0)
    assert len(calls) == 1 and calls[0].error is not None
    assert gateway.servers is not None and gateway.servers.cooling() == [False, False]


def test_every_server_failing_fails_the_attempt_once_with_the_last_error() -> None:
    with FakeOpenAIServer(faults=["503"]) as first, FakeOpenAIServer(faults=["500"]) as second:
        gateway = _gateway([first, second])
        with collect_calls() as calls, pytest.raises(LLMCallError) as info:
            asyncio.run(gateway.achat(model=MODEL, messages=[{"role": "user", "content": "x"}]))
    assert info.value.kind == "server_error" and info.value.retryable
    assert str(info.value).startswith("InternalServerError: injected 500")
    assert str(info.value).endswith("(all 2 servers failed)")
    assert len(calls) == 1 and calls[0].error == str(info.value)  # one attempt, one record
    assert (first.request_count, second.request_count) == (1, 1)


def test_one_server_of_several_down_at_the_start_is_cooled_not_fatal() -> None:
    dead = FakeOpenAIServer().start()
    dead_url = dead.base_url
    dead.stop()
    with FakeOpenAIServer() as alive:
        alive_url = alive.base_url
        gateway = LiteLLMGateway(api_base=[dead_url, alive_url], transport="direct")
        gateway.check_reachable()
        assert gateway.servers is not None and gateway.servers.cooling() == [True, False]
        _ask(gateway)
        assert alive.request_count == 1
    with pytest.raises(ConfigError) as info:
        LiteLLMGateway(api_base=[dead_url, alive_url]).check_reachable()
    text = str(info.value)
    assert "\n" not in text and text.startswith("cannot reach any of the 2 LLM servers: ")


def test_the_server_address_is_in_no_record() -> None:
    with FakeOpenAIServer(faults=["503"]) as bad, FakeOpenAIServer() as good:
        ports = [bad.port, good.port]
        gateway = _gateway([bad, good])
        with collect_calls() as calls:
            reply = _ask(gateway)
        one = LiteLLMGateway(api_base=good.base_url, transport="direct")
        with collect_calls() as single:
            _ask(one)
    assert calls[0].request == single[0].request
    assert reply.request_hash == calls[0].request_hash == single[0].request_hash
    for port in ports:
        assert str(port) not in repr(calls[0].request)


def test_a_pickled_gateway_keeps_its_servers() -> None:
    import pickle

    gateway = LiteLLMGateway(api_base=["http://a:1/v1", "http://b:2/v1"], cooldown=3)
    copy = pickle.loads(pickle.dumps(gateway))
    assert copy.servers is not None and copy.servers.api_bases == ("http://a:1/v1", "http://b:2/v1")
    assert copy.servers.cooldown == 3 and copy.api_bases == gateway.api_bases
    assert "http://b:2/v1" in repr(copy)


def test_wire_errors_keep_their_kind_when_all_fail() -> None:
    pool = ServerPool(["http://a/v1"])
    error = WireError("Timeout: x", kind="timeout", retryable=True, status_code=408)
    assert pool._exhausted(error, 1) is error
    merged = pool._exhausted(error, 2)
    assert (merged.kind, merged.retryable, merged.status_code) == ("timeout", True, 408)


# -- through litellm: its Router -----------------------------------------------------------------
def test_through_litellm_the_router_records_the_trace_of_one_server(
    references: Callable[[bool], Path], tmp_path: Path
) -> None:
    reference = references(False)
    db = tmp_path / "router.sqlite"
    servers = _servers(3, latency_ms=20)
    _kill_after(servers[2], 4)
    try:
        experiment = _experiment([s.base_url for s in servers], graph=False, transport="litellm")
        run = experiment.run(db)
    finally:
        for srv in servers:
            srv.stop()
    assert run.metadata["status"] == "complete" and run.metadata["steps_done"] == STEPS
    assert servers[2].request_count > 4  # cut off with calls in flight, then gone
    assert all(srv.request_count > 0 for srv in servers)
    actions = run.actions
    assert not actions["fallback"].any() and actions["success"].all()
    assert run.llm_calls["error"].isna().all()
    assert _replies(servers) == STEPS * AGENTS
    assert validate_trace(db).status == "ok"
    outage.assert_same_run(reference, db)  # the same records as one server, directly
    assert _texts(db) == _texts(reference)


def test_through_litellm_every_server_failing_is_one_attempt_and_its_error() -> None:
    with FakeOpenAIServer(faults=["503"]) as first, FakeOpenAIServer(faults=["500"]) as second:
        gateway = LiteLLMGateway(api_base=[first.base_url, second.base_url], transport="litellm")
        gateway.prepare([MODEL])
        assert MODEL in gateway._litellm.routers
        with collect_calls() as calls, pytest.raises(LLMCallError) as info:
            asyncio.run(gateway.achat(model=MODEL, messages=[{"role": "user", "content": "x"}]))
    assert info.value.kind == "server_error" and info.value.retryable
    assert (first.request_count, second.request_count) == (1, 1)
    assert len(calls) == 1 and calls[0].error == str(info.value)
    assert calls[0].request == {"model": "fake", "messages": [{"role": "user", "content": "x"}]}


def test_the_cli_takes_several_servers_in_one_flag(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    servers = _servers(3, latency_ms=20)
    urls = [s.base_url for s in servers]
    flags = ["--steps", "4", "--agents", "3", "--seed", "5", "--model", MODEL, "--force-tool",
             "--scheduling", "simultaneous", "--no-progress"]  # fmt: skip
    try:
        one = run_cli("phase2", *flags, "--api-base", urls[0], "--db", str(tmp_path / "1.sqlite"))
        assert one.returncode == 0, one.stderr
        alone = servers[0].request_count
        three = run_cli("phase2", *flags, "--api-base", ",".join(urls), "--db", str(tmp_path / "3.sqlite"))  # fmt: skip
        assert three.returncode == 0, three.stderr
    finally:
        for srv in servers:
            srv.stop()
    assert alone == 12 and servers[1].request_count > 0 and servers[2].request_count > 0
    outage.assert_same_run(tmp_path / "1.sqlite", tmp_path / "3.sqlite")
    assert _texts(tmp_path / "1.sqlite") == _texts(tmp_path / "3.sqlite")
