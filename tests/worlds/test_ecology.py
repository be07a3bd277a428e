"""The ecology world: every action and failure reason, the ledger, quotas, memory, checkpoints."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vivarium.errors import ConfigError
from vivarium.seeding import canonical_json
from vivarium.types import ActionRequest, ActionResult
from vivarium.worlds.ecology import ECOLOGY_ACTIONS, Artifact, EcologyWorld
from vivarium.worlds.ledger import InsufficientScrip, Ledger, LedgerError

AGENTS = ["alice", "bob", "carol"]
OBSERVATION_KEYS = [
    "time_step",
    "agent_id",
    "tools",
    "messages",
    "balance",
    "quotas",  # agent_ecology 599d43d3 build_prompt shows the agent's quotas (issue 13)
    "artifacts",
    "my_artifacts",
    "last_action_result",
    "failure_history",
    "action_history",
    "success_rate",
    "economic_context",
    "working_memory",
    "memory",
    "steps_total",
    "time_remaining",
    "progress_percent",
]
ADD = {"add": 'args["x"] + args["y"]'}


def req(agent: str, action: str, t: int = 0, **arguments: Any) -> ActionRequest:
    return ActionRequest(
        run_id="r", time_step=t, agent_id=agent, action_name=action, arguments=arguments
    )


def make(**kwargs: Any) -> EcologyWorld:
    return EcologyWorld(AGENTS, **kwargs)


def ok(world: EcologyWorld, agent: str, action: str, t: int = 0, **arguments: Any) -> dict:
    result = world.apply(req(agent, action, t, **arguments))
    assert result.success, result.error
    return result.result or {}


def fails(world: EcologyWorld, agent: str, action: str, t: int = 0, **arguments: Any) -> str:
    result = world.apply(req(agent, action, t, **arguments))
    assert not result.success, result.result
    assert result.result is None
    assert result.error and "\n" not in result.error
    return result.error


def calc(world: EcologyWorld, owner: str = "alice", price: int = 5, **extra: Any) -> None:
    ok(
        world,
        owner,
        "write_artifact",
        artifact_id="calc",
        content="",
        executable=True,
        price=price,
        methods=extra.pop("methods", ADD),
        **extra,
    )


# -- actions -----------------------------------------------------------------------------------
def test_tools_and_tool_specs() -> None:
    world = make()
    assert world.name == "ecology"
    expected = (
        "noop",
        "read_artifact",
        "write_artifact",
        "invoke_artifact",
        "post_message",
        "transfer_scrip",
    )
    assert world.observe("alice", 0)["tools"] == expected
    specs = world.registry.tool_specs()
    assert [s["function"]["name"] for s in specs] == list(expected)
    json.dumps(specs)
    assert world.registry is not ECOLOGY_ACTIONS


def test_noop() -> None:
    world = make()
    assert ok(world, "alice", "noop") == {"summary": "did nothing"}
    last = world.observe("alice", 1)["last_action_result"]
    assert last == {"action": "noop", "success": True, "reason": "did nothing"}


def test_unknown_action_and_bad_arguments_are_recorded_failures() -> None:
    world = make()
    assert fails(world, "alice", "fly").startswith("unknown action 'fly'")
    reason = fails(world, "alice", "transfer_scrip", to="bob", amount=0)
    assert reason.startswith("bad arguments for transfer_scrip: amount:")
    reason = fails(world, "alice", "read_artifact", artifact_id="x", extra=1)
    assert "extra: Extra inputs are not permitted" in reason
    assert world.observe("alice", 1)["action_history"] == [
        {"time_step": 0, "action": "fly", "success": False},
        {"time_step": 0, "action": "transfer_scrip", "success": False},
        {"time_step": 0, "action": "read_artifact", "success": False},
    ]


def test_unknown_agent() -> None:
    world = make()
    result = world.apply(req("mallory", "noop"))
    assert not result.success and result.error == "unknown agent 'mallory'"
    with pytest.raises(ConfigError, match="unknown agent 'mallory'"):
        world.observe("mallory", 0)


def test_write_and_read_artifact() -> None:
    world = make()
    result = ok(world, "alice", "write_artifact", artifact_id="notes", content="héllo")
    assert result == {
        "artifact_id": "notes",
        "created": True,
        "size": 6,
        "executable": False,
        "price": 0,
        "methods": [],
        "disk_used": 6,
        "disk_quota": 65536,
        "summary": "created notes (6 bytes)",
    }
    read = ok(world, "bob", "read_artifact", artifact_id="notes")
    assert read == {
        "artifact_id": "notes",
        "owner": "alice",
        "kind": "data",
        "executable": False,
        "price": 0,
        "size": 6,
        "methods": {},
        "content": "héllo",
        "summary": "read notes (6 bytes)",
    }
    again = ok(world, "alice", "write_artifact", artifact_id="notes", content="hi")
    assert again["created"] is False and again["disk_used"] == 2
    assert again["summary"] == "wrote notes (2 bytes)"
    assert ok(world, "carol", "read_artifact", artifact_id="notes")["content"] == "hi"


def test_write_json_content_is_stored_as_json_text() -> None:
    world = make()
    ok(world, "alice", "write_artifact", artifact_id="cfg", content={"b": 1, "a": [1, "é"]})
    assert ok(world, "bob", "read_artifact", artifact_id="cfg")["content"] == '{"b":1,"a":[1,"é"]}'


def test_read_failures() -> None:
    world = make()
    assert (
        fails(world, "alice", "read_artifact", artifact_id="nope") == "not found: artifact 'nope'"
    )
    assert (
        fails(world, "bob", "read_artifact", artifact_id="alice_memory")
        == "permission denied: alice_memory is private to alice"
    )


def test_write_failures() -> None:
    world = make()
    ok(world, "alice", "write_artifact", artifact_id="notes", content="x")
    assert (
        fails(world, "bob", "write_artifact", artifact_id="notes", content="mine")
        == "permission denied: only alice can write notes"
    )
    assert (
        fails(world, "bob", "write_artifact", artifact_id="alice", content="{}")
        == "permission denied: only alice can write alice"
    )
    assert (
        fails(world, "alice", "write_artifact", artifact_id="alice_memory", content="[]")
        == "permission denied: alice_memory is kept by the world"
    )
    assert fails(world, "alice", "write_artifact", artifact_id="bad id", content="x").startswith(
        "bad artifact id 'bad id'"
    )
    assert (
        fails(world, "alice", "write_artifact", artifact_id="f", content="", methods=ADD)
        == "methods need executable=true"
    )
    assert (
        fails(world, "alice", "write_artifact", artifact_id="f", content="", price=3)
        == "a price needs executable=true"
    )
    assert (
        fails(world, "alice", "write_artifact", artifact_id="f", content="", executable=True)
        == "an executable artifact needs at least one method"
    )
    reason = fails(
        world,
        "alice",
        "write_artifact",
        artifact_id="f",
        content="",
        executable=True,
        methods={"bad-name": "1"},
    )
    assert reason == "bad method name 'bad-name': use a Python identifier"
    reason = fails(world, "alice", "write_artifact", artifact_id="f", content="", price=-1)
    assert reason.startswith("bad arguments for write_artifact: price:")
    assert ok(world, "bob", "read_artifact", artifact_id="notes")["content"] == "x"
    assert "f" not in world.artifacts


def test_write_with_an_unsafe_method_fails_with_the_checker_message() -> None:
    from vivarium.sandbox import UnsafeExpression, check

    source = '__import__("os").system("true")'
    with pytest.raises(UnsafeExpression) as info:
        check(source)
    reason = fails(
        world := make(),
        "alice",
        "write_artifact",
        artifact_id="evil",
        content="",
        executable=True,
        methods={"run": source},
    )
    assert reason == f"unsafe method 'run': {info.value}"
    assert "evil" not in world.artifacts


def test_disk_quota() -> None:
    world = make(disk_quota_bytes=10)
    ok(world, "alice", "write_artifact", artifact_id="a1", content="123456")
    assert (
        fails(world, "alice", "write_artifact", artifact_id="a2", content="12345")
        == "over quota: disk 11 bytes > quota 10 bytes"
    )
    # Overwriting replaces the old size; other agents have their own quota.
    ok(world, "alice", "write_artifact", artifact_id="a1", content="1234567890")
    assert world.disk_used("alice") == 10
    ok(world, "bob", "write_artifact", artifact_id="b1", content="1234567890")
    assert "a2" not in world.artifacts
    # Method sources count too (UTF-8 bytes).
    reason = fails(
        world,
        "carol",
        "write_artifact",
        artifact_id="c",
        content="é",
        executable=True,
        methods={"m": "1 + 22222"},
    )
    assert reason == "over quota: disk 11 bytes > quota 10 bytes"


def test_llm_token_quota() -> None:
    world = make(llm_token_quota=100)
    world.record_llm_usage("alice", 100)
    ok(world, "alice", "post_message", content="at the limit still works")
    world.record_llm_usage("alice", 1)
    assert world.llm_tokens_used("alice") == 101
    reason = fails(world, "alice", "post_message", content="hi")
    assert reason == "over quota: llm tokens 101 used > quota 100"
    ok(world, "alice", "noop")
    ok(world, "bob", "post_message", content="bob is fine")
    with pytest.raises(ConfigError, match="tokens must be an int >= 0"):
        world.record_llm_usage("alice", -1)
    with pytest.raises(ConfigError, match="unknown agent"):
        world.record_llm_usage("mallory", 1)
    # No quota: usage is counted but never blocks.
    free = make()
    free.record_llm_usage("alice", 10**9)
    ok(free, "alice", "post_message", content="hi")


# -- invoking ----------------------------------------------------------------------------------
def test_invoke_charges_the_caller_and_pays_the_owner() -> None:
    world = make(starting_scrip=20)
    calc(world, price=5)
    result = ok(
        world, "bob", "invoke_artifact", artifact_id="calc", method="add", args={"x": 2, "y": 40}
    )
    assert result == {
        "artifact_id": "calc",
        "method": "add",
        "result": 42,
        "price_paid": 5,
        "paid_to": "alice",
        "balance": 15,
        "summary": "invoked calc.add for 5 scrip: 42",
    }
    assert world.balance("alice") == 25 and world.balance("bob") == 15
    assert world.memory_entries("alice")[-1] == {
        "time_step": 0,
        "kind": "event",
        "text": "bob invoked calc.add: +5 scrip",
    }


def test_invoking_your_own_artifact_is_free() -> None:
    world = make(starting_scrip=0)
    calc(world, price=5)
    result = ok(
        world, "alice", "invoke_artifact", artifact_id="calc", method="add", args={"x": 1, "y": 1}
    )
    assert result["result"] == 2 and result["price_paid"] == 0 and result["paid_to"] is None


def test_invoke_context_statements_and_data() -> None:
    world = make()
    methods = {
        "who": "[caller, owner]",
        "rate": 'data["rate"] * args["n"]',
        "double": 'result = args["n"] * 2',
    }
    ok(
        world,
        "alice",
        "write_artifact",
        artifact_id="svc",
        content='{"rate": 3}',
        executable=True,
        methods=methods,
    )
    invoke = {"artifact_id": "svc"}
    assert ok(world, "bob", "invoke_artifact", **invoke, method="who")["result"] == ["bob", "alice"]
    assert (
        ok(world, "bob", "invoke_artifact", **invoke, method="rate", args={"n": 4})["result"] == 12
    )
    assert (
        ok(world, "bob", "invoke_artifact", **invoke, method="double", args={"n": 4})["result"] == 8
    )
    # Content that is not JSON is given to methods as text.
    ok(
        world,
        "carol",
        "write_artifact",
        artifact_id="txt",
        content="Hello",
        executable=True,
        methods={"shout": "data.upper()"},
    )
    assert ok(world, "bob", "invoke_artifact", artifact_id="txt", method="shout")["result"] == (
        "HELLO"
    )
    read = ok(world, "bob", "read_artifact", artifact_id="svc")
    assert read["methods"] == {n: methods[n] for n in sorted(methods)}
    assert read["executable"] is True


def test_invoke_failures_charge_nothing() -> None:
    world = make(starting_scrip={"alice": 0, "bob": 2, "carol": 100})
    methods = {
        "add": 'args["x"] + args["y"]',
        "boom": "1 / 0",
        "silent": "x = 1",
        "aset": "{1, 2}",
    }
    calc(world, price=5, methods=methods)
    ok(world, "carol", "write_artifact", artifact_id="plain", content="x")
    invoke = {"artifact_id": "calc"}
    assert (
        fails(world, "bob", "invoke_artifact", **invoke, method="add", args={"x": 1, "y": 1})
        == "insufficient scrip: need 5, have 2"
    )
    reason = fails(world, "carol", "invoke_artifact", **invoke, method="boom")
    assert reason.startswith("method 'boom' of calc failed: ") and reason.endswith(
        "; nothing charged"
    )
    reason = fails(world, "carol", "invoke_artifact", **invoke, method="add", args={"x": 1})
    assert reason.startswith("method 'add' of calc failed: ")
    assert (
        fails(world, "carol", "invoke_artifact", **invoke, method="silent")
        == "method 'silent' of calc failed: it assigned no result; nothing charged"
    )
    assert (
        fails(world, "carol", "invoke_artifact", **invoke, method="aset")
        == "method 'aset' of calc failed: it returned a non-JSON value (set); nothing charged"
    )
    assert (
        fails(world, "carol", "invoke_artifact", **invoke, method="mul")
        == "not found: method 'mul' of calc (methods: add, aset, boom, silent)"
    )
    assert (
        fails(world, "carol", "invoke_artifact", artifact_id="plain", method="x")
        == "not executable: plain"
    )
    assert (
        fails(world, "carol", "invoke_artifact", artifact_id="alice", method="x")
        == "not executable: alice"
    )
    assert (
        fails(world, "carol", "invoke_artifact", artifact_id="ghost", method="x")
        == "not found: artifact 'ghost'"
    )
    assert world.ledger.balances() == {"alice": 0, "bob": 2, "carol": 100}
    assert world.ledger.transfers == 0


def test_artifact_permissions() -> None:
    data = Artifact("d", "alice", "data", "x", True, 1, {"m": "1"})
    memory = Artifact("alice_memory", "alice", "memory")
    agent = Artifact("alice", "alice", "agent")
    assert data.can_read("bob") and not data.can_write("bob") and data.can_write("alice")
    assert data.can_execute("bob") and not Artifact("p", "alice").can_execute("bob")
    assert memory.can_read("alice") and not memory.can_read("bob")
    assert not memory.can_write("alice")
    assert agent.can_read("bob") and agent.can_write("alice") and not agent.can_execute("alice")


# -- messages and transfers --------------------------------------------------------------------
def test_post_message() -> None:
    world = make(message_history_limit=2)
    assert ok(world, "alice", "post_message", content="  one ") == {
        "message_index": 0,
        "summary": "posted message 0",
    }
    ok(world, "bob", "post_message", 1, content="two")
    ok(world, "carol", "post_message", 1, content="three")
    assert world.take_messages() == [
        (0, "alice", "main", "one"),
        (1, "bob", "main", "two"),
        (2, "carol", "main", "three"),
    ]
    assert world.take_messages() == []
    assert world.observe("alice", 2)["messages"] == [
        {"time_step": 1, "author_id": "bob", "content": "two"},
        {"time_step": 1, "author_id": "carol", "content": "three"},
    ]
    assert fails(world, "alice", "post_message", content="   ") == (
        "post_message needs non-empty content"
    )
    assert fails(world, "alice", "post_message", content="x" * 8001) == (
        "message too long: 8001 chars (limit 8000)"
    )
    assert world.memory_entries("alice")[0] == {"time_step": 0, "kind": "message", "text": "one"}


def test_transfer_scrip() -> None:
    world = make(starting_scrip={"alice": 10})
    assert ok(world, "alice", "transfer_scrip", to="bob", amount=4) == {
        "to": "bob",
        "amount": 4,
        "balance": 6,
        "summary": "sent 4 scrip to bob",
    }
    assert world.ledger.balances() == {"alice": 6, "bob": 104, "carol": 100}
    assert world.memory_entries("bob") == [
        {"time_step": 0, "kind": "event", "text": "received 4 scrip from alice"}
    ]
    assert fails(world, "alice", "transfer_scrip", to="bob", amount=7) == (
        "insufficient scrip: need 7, have 6"
    )
    assert fails(world, "alice", "transfer_scrip", to="alice", amount=1) == (
        "cannot transfer scrip to yourself"
    )
    assert fails(world, "alice", "transfer_scrip", to="zed", amount=1) == "not found: agent 'zed'"
    assert fails(world, "alice", "transfer_scrip", to="bob", amount="1").startswith(
        "bad arguments for transfer_scrip: amount:"
    )
    assert world.ledger.total() == 210


# -- working memory and agent artifacts --------------------------------------------------------
def write_self(world: EcologyWorld, agent: str, content: Any) -> ActionResult:
    return world.apply(req(agent, "write_artifact", artifact_id=agent, content=content))


def test_working_memory_merges_deletes_and_replaces() -> None:
    world = make()
    result = write_self(world, "alice", '{"working_memory": {"goal": "trade", "n": 1}}')
    assert result.success and result.result == {
        "artifact_id": "alice",
        "working_memory_bytes": 22,
        "working_memory_keys": ["goal", "n"],
        "truncated": False,
        "dropped_keys": [],
        "summary": "updated working memory (22 bytes, 2 keys)",
    }
    write_self(world, "alice", {"working_memory": {"goal": "sell", "plan": [1, 2]}})
    assert list(world.working_memory("alice").items()) == [
        ("n", 1),
        ("goal", "sell"),
        ("plan", [1, 2]),
    ]
    write_self(world, "alice", {"working_memory": {"n": None}})
    assert world.working_memory("alice") == {"goal": "sell", "plan": [1, 2]}
    write_self(world, "alice", {"working_memory": {"only": True}, "replace": True})
    assert world.observe("alice", 1)["working_memory"] == {"only": True}
    assert world.observe("bob", 1)["working_memory"] == {}


def test_agent_artifact_hides_working_memory_from_others() -> None:
    world = make()
    write_self(world, "alice", {"working_memory": {"secret": 42}})
    mine = ok(world, "alice", "read_artifact", artifact_id="alice")
    assert json.loads(mine["content"]) == {
        "agent_id": "alice",
        "has_standing": True,
        "working_memory": {"secret": 42},
    }
    assert mine["kind"] == "agent" and mine["owner"] == "alice"
    theirs = ok(world, "bob", "read_artifact", artifact_id="alice")
    assert json.loads(theirs["content"]) == {"agent_id": "alice", "has_standing": True}
    listed = {a["id"]: a for a in world.observe("bob", 1)["artifacts"]}
    assert (
        listed["alice"]["size"] == theirs["size"] == len('{"agent_id":"alice","has_standing":true}')
    )
    # Reading yourself and writing the content back is accepted (read-only keys are ignored).
    result = write_self(world, "alice", mine["content"])
    assert result.success and world.working_memory("alice") == {"secret": 42}


def test_working_memory_is_truncated_oldest_first_and_says_so() -> None:
    world = make(working_memory_max_bytes=40)
    write_self(world, "alice", {"working_memory": {"a": "x" * 10, "b": "y" * 10}})
    result = write_self(world, "alice", {"working_memory": {"c": "z" * 10}})
    assert result.success
    assert result.result["truncated"] is True
    assert result.result["dropped_keys"] == ["a"]
    assert result.result["summary"] == (
        "updated working memory (35 bytes, 2 keys); truncated to fit 40 bytes: "
        "dropped oldest keys a"
    )
    assert world.working_memory("alice") == {"b": "y" * 10, "c": "z" * 10}
    # Rewriting a key makes it the newest: now "b" is the oldest.
    write_self(world, "alice", {"working_memory": {"c": "w", "b": "v", "d": "u" * 20}})
    assert list(world.working_memory("alice")) == ["b", "d"]
    # A single value that cannot fit leaves an empty working memory, reported.
    result = write_self(world, "alice", {"working_memory": {"huge": "h" * 100}})
    assert result.success and result.result["dropped_keys"] == ["b", "d", "huge"]
    assert world.working_memory("alice") == {}
    last = world.observe("alice", 1)["last_action_result"]
    assert "truncated to fit 40 bytes" in last["reason"]


def test_working_memory_bytes_are_utf8() -> None:
    world = make(working_memory_max_bytes=14)
    result = write_self(world, "alice", {"working_memory": {"k": "ééé"}})
    # {"k":"ééé"} is 8 ASCII bytes plus 3 two-byte characters.
    assert result.result["working_memory_bytes"] == 14 and not result.result["truncated"]
    result = write_self(world, "alice", {"working_memory": {"k": "éééé"}})
    assert result.result["truncated"] is True


def test_working_memory_write_failures() -> None:
    world = make()
    shape = "agent artifact content must be a JSON object with a working_memory object"
    assert not write_self(world, "alice", "not json").success
    assert write_self(world, "alice", "not json").error == shape
    assert write_self(world, "alice", "[1]").error == shape
    assert write_self(world, "alice", {"working_memory": [1]}).error == shape
    assert write_self(world, "alice", '{"working_memory": {"x": NaN}}').error == shape
    assert write_self(world, "alice", {"working_memory": {}, "junk": 1, "aa": 2}).error == (
        "agent artifact content takes working_memory (and replace), got: aa, junk"
    )
    assert write_self(world, "alice", {"working_memory": {}, "replace": "yes"}).error == (
        "replace must be true or false"
    )
    assert (
        fails(
            world,
            "alice",
            "write_artifact",
            artifact_id="alice",
            content="{}",
            executable=True,
            methods=ADD,
        )
        == "agent artifacts cannot be executable or priced"
    )
    assert world.working_memory("alice") == {}


# -- memory and histories ----------------------------------------------------------------------
def test_actions_and_outcomes_go_to_memory() -> None:
    world = make(memory_limit=4, observed_memories=2)
    ok(world, "alice", "noop", 0)
    ok(world, "alice", "write_artifact", 1, artifact_id="n", content="abc")
    fails(world, "alice", "read_artifact", 2, artifact_id="zz")
    ok(world, "alice", "post_message", 3, content="hello all")
    fails(world, "alice", "transfer_scrip", 4, to="bob", amount=1000)
    assert world.memory_entries("alice") == [
        {"time_step": 1, "kind": "action", "text": "created n (3 bytes)"},
        {
            "time_step": 2,
            "kind": "action",
            "text": "read_artifact zz failed: not found: artifact 'zz'",
        },
        {"time_step": 3, "kind": "message", "text": "hello all"},
        {
            "time_step": 4,
            "kind": "action",
            "text": "transfer_scrip 1000 to bob failed: insufficient scrip: need 1000, have 100",
        },
    ]
    ok(world, "alice", "read_artifact", 5, artifact_id="n")
    memory = world.memory_entries("alice")
    assert len(memory) == 4 and memory[0]["time_step"] == 2
    assert world.observe("alice", 6)["memory"] == memory[-2:]
    before = world.memory_entries("alice")
    own = ok(world, "alice", "read_artifact", 6, artifact_id="alice_memory")
    assert json.loads(own["content"]) == before  # the read itself is remembered after it


def test_memory_can_be_disabled() -> None:
    world = make(memory_limit=0)
    ok(world, "alice", "post_message", content="hi")
    assert world.memory_entries("alice") == []


def test_failure_and_action_history_and_success_rate() -> None:
    world = make(failure_history_limit=2, action_history_limit=3)
    obs = world.observe("alice", 0)
    assert obs["success_rate"] is None and obs["last_action_result"] is None
    for t in range(4):
        fails(world, "alice", "read_artifact", t, artifact_id=f"x{t}")
    ok(world, "alice", "noop", 4)
    obs = world.observe("alice", 5)
    assert obs["failure_history"] == [
        {"action": "read_artifact", "success": False, "reason": "not found: artifact 'x2'"},
        {"action": "read_artifact", "success": False, "reason": "not found: artifact 'x3'"},
    ]
    assert obs["action_history"] == [
        {"time_step": 2, "action": "read_artifact", "success": False},
        {"time_step": 3, "action": "read_artifact", "success": False},
        {"time_step": 4, "action": "noop", "success": True},
    ]
    assert obs["success_rate"] == 0.2  # over all five actions, not just the visible history
    ok(world, "alice", "noop", 5)
    ok(world, "alice", "noop", 6)
    assert world.observe("alice", 7)["success_rate"] == round(3 / 7, 4)


# -- observations ------------------------------------------------------------------------------
def test_observation_shape() -> None:
    world = make(total_steps=8, starting_scrip={"alice": 10, "bob": 50, "carol": 50})
    calc(world, "bob", price=3)
    ok(
        world,
        "carol",
        "write_artifact",
        artifact_id="svc",
        content="",
        executable=True,
        price=6,
        methods={"f": "1"},
    )
    ok(world, "carol", "write_artifact", artifact_id="free", content="{}")
    obs = world.observe("alice", 2)
    assert list(obs) == OBSERVATION_KEYS
    assert obs["time_step"] == 2 and obs["agent_id"] == "alice" and obs["balance"] == 10
    assert obs["steps_total"] == 8 and obs["time_remaining"] == 6
    assert obs["progress_percent"] == 25.0
    assert [a["id"] for a in obs["artifacts"]] == ["alice", "bob", "calc", "carol", "free", "svc"]
    assert obs["artifacts"][2] == {
        "id": "calc",
        "owner": "bob",
        "kind": "data",
        "executable": True,
        "price": 3,
        "size": len(ADD["add"]),
        "methods": ["add"],
    }
    assert obs["my_artifacts"] == ["alice", "alice_memory"]
    assert world.observe("carol", 2)["my_artifacts"] == ["carol", "carol_memory", "free", "svc"]
    assert obs["economic_context"] == {
        "total_scrip": 110,
        "agents": 3,
        "richest": "bob",  # ties go to the smaller id
        "my_rank": 3,
        "executable_artifacts": 2,
        "mean_price": 4.5,
        "min_price": 3,
        "max_price": 6,
    }
    assert world.observe("carol", 2)["economic_context"]["my_rank"] == 2
    assert world.observe("alice", 9)["time_remaining"] == 0
    assert world.observe("alice", 9)["progress_percent"] == 100.0
    empty = make().observe("alice", 0)["economic_context"]
    assert empty["mean_price"] is None and empty["executable_artifacts"] == 0


def play(world: EcologyWorld, start: int = 0) -> None:
    """A script touching every action, success and failure alike."""
    t = start
    ok(
        world,
        "alice",
        "write_artifact",
        t,
        artifact_id=f"calc{t}",
        content='{"k": 2}',
        executable=True,
        price=3,
        methods={"mul": 'data["k"] * args["n"]'},
    )
    ok(world, "bob", "invoke_artifact", t, artifact_id=f"calc{t}", method="mul", args={"n": t})
    fails(world, "carol", "invoke_artifact", t, artifact_id=f"calc{t}", method="nope")
    ok(world, "carol", "post_message", t, content=f"step {t}: ünïcode")
    ok(world, "bob", "transfer_scrip", t + 1, to="carol", amount=2)
    write_self(world, "carol", {"working_memory": {f"k{t}": t, "z": "last"}})
    ok(world, "alice", "read_artifact", t + 1, artifact_id="alice_memory")
    world.record_llm_usage("bob", 7)
    fails(world, "bob", "read_artifact", t + 1, artifact_id="carol_memory")
    ok(world, "alice", "noop", t + 1)


def observations(world: EcologyWorld, t: int) -> list[dict[str, Any]]:
    return [world.observe(a, t) for a in AGENTS]


def test_observations_are_json_and_identical_across_fresh_worlds() -> None:
    first, second = make(), make()
    for world in (first, second):
        play(world, 0)
        play(world, 2)
    for a, b in zip(observations(first, 4), observations(second, 4), strict=True):
        assert canonical_json(a) == canonical_json(b)
        assert json.dumps(a) == json.dumps(b)  # key order too
        assert json.loads(json.dumps(a)) == {**a, "tools": list(a["tools"])}
    assert first.state_digest() == second.state_digest()
    assert first.take_messages() == second.take_messages()


# -- checkpoints -------------------------------------------------------------------------------
def test_snapshot_restore_round_trip() -> None:
    original = make()
    play(original, 0)
    snapshot = original.snapshot()
    encoded = canonical_json(snapshot)
    assert json.loads(encoded) == snapshot
    restored = make()
    restored.restore(json.loads(encoded))  # a JSON round trip, keys sorted on the way
    assert restored.state_digest() == original.state_digest()
    assert canonical_json(restored.snapshot()) == encoded
    for a, b in zip(observations(original, 2), observations(restored, 2), strict=True):
        assert json.dumps(a) == json.dumps(b)
    original.take_messages()
    for world in (original, restored):
        play(world, 2)
        play(world, 4)
    assert restored.state_digest() == original.state_digest()
    assert restored.take_messages() == original.take_messages()
    for a, b in zip(observations(original, 6), observations(restored, 6), strict=True):
        assert json.dumps(a) == json.dumps(b)


def test_restore_replaces_everything() -> None:
    blank = make()
    fresh_digest = blank.state_digest()
    busy = make()
    play(busy, 0)
    busy.restore(blank.snapshot())
    assert busy.state_digest() == fresh_digest
    assert busy.observe("alice", 0) == blank.observe("alice", 0)
    assert "calc0" not in busy.artifacts and busy.disk_used("alice") == 0


def test_restore_rejects_foreign_snapshots() -> None:
    with pytest.raises(ConfigError, match="not a vivarium.ecology/1 snapshot"):
        make().restore({"format": "other"})
    with pytest.raises(ConfigError, match="agents differ"):
        EcologyWorld(["x"]).restore(make().snapshot())


def test_state_digest_changes_with_every_state_change() -> None:
    world = make()
    seen = {world.state_digest()}

    def changed() -> None:
        digest = world.state_digest()
        assert digest not in seen
        seen.add(digest)

    for action, arguments in [
        ("noop", {}),
        ("write_artifact", {"artifact_id": "n", "content": "a"}),
        ("write_artifact", {"artifact_id": "n", "content": "b"}),
        ("read_artifact", {"artifact_id": "n"}),
        ("read_artifact", {"artifact_id": "missing"}),
        ("post_message", {"content": "hi"}),
        ("transfer_scrip", {"to": "bob", "amount": 1}),
        ("write_artifact", {"artifact_id": "alice", "content": {"working_memory": {"a": 1}}}),
    ]:
        world.apply(req("alice", action, **arguments))
        changed()
    world.record_llm_usage("carol", 1)
    changed()
    assert world.state_digest() == world.state_digest()


# -- configuration -----------------------------------------------------------------------------
def test_starting_scrip_and_config_errors() -> None:
    world = make(starting_scrip={"bob": 7})
    assert world.ledger.balances() == {"alice": 100, "bob": 7, "carol": 100}
    cases = [
        (dict(starting_scrip={"zed": 1}), "starting_scrip: unknown agents: zed"),
        (dict(starting_scrip=-1), "starting_scrip: alice: must be an int >= 0"),
        (dict(disk_quota_bytes=-1), "disk_quota_bytes must be an int >= 0"),
        (dict(total_steps=0), "total_steps must be an int >= 1"),
        (dict(llm_token_quota=-5), "llm_token_quota must be an int >= 0 or None"),
        (dict(working_memory_max_bytes=1), "working_memory_max_bytes must be an int >= 2"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=message):
            make(**kwargs)
    with pytest.raises(ConfigError, match="unique"):
        EcologyWorld(["a", "a"])
    with pytest.raises(ConfigError, match="clashes"):
        EcologyWorld(["a", "a_memory"])
    with pytest.raises(ConfigError, match="cannot be an agent id"):
        EcologyWorld(["world"])


def test_seed_artifacts() -> None:
    seeds = [
        {
            "id": "oracle",
            "content": {"answer": 42},
            "executable": True,
            "methods": {"ask": 'data["answer"]'},
        },
        {"id": "shop", "owner": "bob", "executable": True, "price": 4, "methods": {"buy": "1"}},
        {"id": "readme", "content": "welcome"},
    ]
    world = make(seed_artifacts=seeds)
    assert ok(world, "alice", "invoke_artifact", artifact_id="oracle", method="ask")["result"] == 42
    assert (
        ok(world, "alice", "invoke_artifact", artifact_id="shop", method="buy")["paid_to"] == "bob"
    )
    assert ok(world, "carol", "read_artifact", artifact_id="readme")["owner"] == "world"
    assert fails(world, "alice", "write_artifact", artifact_id="readme", content="x") == (
        "permission denied: only world can write readme"
    )
    assert world.disk_used("bob") == 1
    bad = [
        ([{"id": "alice"}], "already taken"),
        ([{"id": "x", "owner": "zed"}], "neither an agent nor 'world'"),
        ([{"id": "x", "executable": True, "price": 1, "methods": {"m": "1"}}], "must be free"),
        ([{"id": "x", "executable": True, "methods": {"m": "__import__('os')"}}], "unsafe method"),
        ([{"id": "x", "colour": "red"}], "seed_artifacts: colour: Extra inputs"),
    ]
    for seed, message in bad:
        with pytest.raises(ConfigError, match=message):
            make(seed_artifacts=seed)


# -- the ledger --------------------------------------------------------------------------------
def test_ledger_transfers_and_errors() -> None:
    ledger = Ledger({"a": 5, "b": 0})
    assert ledger.transfer("a", "b", 5, "all of it") == 0
    assert ledger.balances() == {"a": 0, "b": 5} and ledger.transfers == 1
    assert ledger.recent == [{"seq": 1, "src": "a", "dst": "b", "amount": 5, "reason": "all of it"}]
    with pytest.raises(InsufficientScrip, match="insufficient scrip: need 1, have 0"):
        ledger.transfer("a", "b", 1, "x")
    for args, message in [
        (("a", "b", 0), "amount must be a positive integer"),
        (("a", "b", True), "amount must be a positive integer"),
        (("a", "b", 1.0), "amount must be a positive integer"),
        (("a", "a", 1), "to itself"),
        (("a", "z", 1), "not found: no account 'z'"),
        (("z", "a", 1), "not found: no account 'z'"),
    ]:
        with pytest.raises(LedgerError, match=message):
            ledger.transfer(*args, reason="x")
    assert ledger.balances() == {"a": 0, "b": 5} and ledger.transfers == 1
    with pytest.raises(ConfigError):
        Ledger({"a": -1})


def test_ledger_is_safe_under_threads() -> None:
    """Two threads spend from each account at once: no overdraft, nothing created or lost."""
    accounts = [f"p{i}" for i in range(4)]
    ledger = Ledger({a: 10 for a in accounts})
    barrier = threading.Barrier(8)
    seen: list[int] = []

    def spend(i: int) -> None:
        src = accounts[i % 4]
        barrier.wait()
        for n in range(3000):
            dst = accounts[(i + 1 + n % 3) % 4]  # never src itself
            with contextlib.suppress(InsufficientScrip):
                ledger.transfer(src, dst, 1 + n % 4, "hammer")
            seen.append(ledger.balance(src))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=spend, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(old)
    balances = ledger.balances()
    assert sum(balances.values()) == 40 and min(balances.values()) >= 0
    assert len(seen) == 8 * 3000 and min(seen) >= 0


def test_concurrent_invokes_never_overdraw() -> None:
    """Poor agents hammer a priced artifact from many threads: scrip is conserved, none negative."""
    poor = [f"poor{i}" for i in range(6)]
    world = EcologyWorld(["rich", *poor], starting_scrip={"rich": 0, **{p: 7 for p in poor}})
    ok(
        world,
        "rich",
        "write_artifact",
        artifact_id="svc",
        content='{"k": 1}',
        executable=True,
        price=2,
        methods={"f": 'data["k"] + args["n"]'},
    )
    results: dict[str, list[bool]] = {p: [] for p in poor}
    errors: list[str] = []
    barrier = threading.Barrier(len(poor) * 2)

    def hammer(agent: str) -> None:
        barrier.wait()
        for n in range(60):
            result = world.apply(
                req(agent, "invoke_artifact", n, artifact_id="svc", method="f", args={"n": n})
            )
            results[agent].append(result.success)
            if not result.success:
                errors.append(result.error or "")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=hammer, args=(p,)) for p in poor for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(old)
    assert errors and all(e.startswith("insufficient scrip: need 2, have ") for e in errors)
    balances = world.ledger.balances()
    assert sum(balances.values()) == 6 * 7
    assert min(balances.values()) >= 0
    for p in poor:
        assert sum(results[p]) == 3 and balances[p] == 1  # 7 scrip buys exactly three calls
    assert balances["rich"] == 6 * 6
    assert world.ledger.transfers == 18


OPS = st.lists(
    st.tuples(
        st.sampled_from(["transfer", "invoke", "invoke_bad"]),
        st.sampled_from(AGENTS),
        st.sampled_from([*AGENTS, "ghost"]),
        st.integers(min_value=-3, max_value=40),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, start=st.lists(st.integers(0, 30), min_size=3, max_size=3))
def test_ledger_conserves_scrip_over_random_sequences(
    ops: list[tuple[str, str, str, int]], start: list[int]
) -> None:
    world = make(starting_scrip=dict(zip(AGENTS, start, strict=True)))
    prices = {"alice": 3, "bob": 0, "carol": 11}
    for owner, price in prices.items():
        ok(
            world,
            owner,
            "write_artifact",
            artifact_id=f"svc_{owner}",
            content="",
            executable=True,
            price=price,
            methods={"ok": "1", "bad": "1 // 0"},
        )
    model = dict(zip(AGENTS, start, strict=True))
    total = sum(start)
    for t, (kind, src, dst, amount) in enumerate(ops):
        if kind == "transfer":
            result = world.apply(req(src, "transfer_scrip", t, to=dst, amount=amount))
            expect = dst in model and dst != src and 0 < amount <= model[src]
            if expect:
                model[src] -= amount
                model[dst] += amount
        else:
            owner = dst if dst in prices else "alice"
            method = "ok" if kind == "invoke" else "bad"
            result = world.apply(
                req(src, "invoke_artifact", t, artifact_id=f"svc_{owner}", method=method)
            )
            price = 0 if owner == src else prices[owner]
            expect = method == "ok" and price <= model[src]
            if expect:
                model[src] -= price
                model[owner] += price
        assert result.success == expect, result.error
        balances = world.ledger.balances()
        assert balances == model
        assert sum(balances.values()) == total and min(balances.values()) >= 0
