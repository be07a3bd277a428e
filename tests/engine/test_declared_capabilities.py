"""Every optional ability of a world or a policy is a declared protocol, checked once at build.

A world (or policy) may lack any capability and still run; one it has in the wrong shape is
refused when the engine is built, in one line, before any step; and once built, the engine
never looks a member up on the world again to find out what it can do.
"""

from __future__ import annotations

import inspect
import re
import sqlite3
from pathlib import Path
from typing import Any, Protocol

import pytest

import vivarium
from vivarium import ActionRequest, TraceDb, WorldEngine, WorldEngineConfig
from vivarium.analysis.world_view import live_world
from vivarium.engine.capabilities import check_world
from vivarium.errors import ConfigError
from vivarium.policies import base as policy_protocols
from vivarium.policies.base import policy_name, policy_seed
from vivarium.protocols import implements, lacking, protocol_members
from vivarium.types import ActionResult
from vivarium.worlds import base as world_protocols
from vivarium.worlds.docs import describe, observation_keys
from vivarium.worlds.observation import ObservationKey

ROOT = Path(__file__).resolve().parents[2]


class Asked:
    """Records every member looked up that its class does not have (``__getattr__``)."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.ticks = 0

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("__"):  # copy and pickle ask for dunders: not a capability
            self.__dict__.setdefault("asked", []).append(name)
        raise AttributeError(name)

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"ticks": self.ticks}

    def apply(self, request: ActionRequest) -> ActionResult:
        self.ticks += 1
        return ActionResult.ok({"ticks": self.ticks})

    def state_digest(self) -> str:
        return str(self.ticks)


class Tick:
    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id, action_name="t")


def test_a_world_lacking_every_optional_capability_runs_and_is_never_probed_in_the_loop(
    tmp_path: Path,
) -> None:
    world = Asked()
    trace = TraceDb(tmp_path / "t.sqlite")
    engine = WorldEngine(WorldEngineConfig(run_id="a"), {"x": Tick(), "y": Tick()}, world, trace)
    at_build = list(world.asked)
    world.asked.clear()
    engine.run(4)
    trace.close()
    assert world.asked == []  # every question was asked at build
    assert world.ticks == 8
    # At build, each optional member was asked for (once each), and nothing was held against
    # the world for lacking it.
    optional = {
        name
        for protocol in (
            world_protocols.NamedWorld,
            world_protocols.ActionWorld,
            world_protocols.MessagingWorld,
            world_protocols.CheckpointableWorld,
            world_protocols.LLMQuotaWorld,
            world_protocols.BatchWorld,
            world_protocols.ModelReportingWorld,
            world_protocols.AgentReportingWorld,
            world_protocols.AgentListWorld,
        )
        for name in protocol_members(protocol)
    }
    assert set(at_build) <= optional
    assert {"model_reporters", "agent_reporters", "agent_ids", "snapshot"} <= set(at_build)
    caps = engine.world_capabilities
    assert not (caps.messages or caps.checkpoints or caps.llm_quota or caps.batch)
    assert (caps.model_reporters, caps.agent_reporters, caps.agent_list) == ({}, {}, False)


class Reporting(Asked):
    """Reports, and keeps its own (reversed) list of its agents, which its reporters follow."""

    model_reporters = {"ticks": lambda w: w.ticks}
    agent_reporters = {"rank": lambda w: list(range(len(w.agent_ids)))}

    def __init__(self) -> None:
        super().__init__()
        self.agent_ids = ["y", "x"]


class Unlisted(Asked):
    """Reports per agent in the run's order: it keeps no list of its agents."""

    agent_reporters = {"rank": lambda w: [0, 1]}


@pytest.mark.parametrize(("kind", "ranks"), [(Reporting, {"x": 1, "y": 0}), (Unlisted, None)])
def test_declared_reporters_and_agent_list_are_read_typed_every_step(
    kind: type, ranks: dict[str, int] | None, tmp_path: Path
) -> None:
    world = kind()
    db = tmp_path / "t.sqlite"
    trace = TraceDb(db)
    engine = WorldEngine(WorldEngineConfig(run_id="r"), {"x": Tick(), "y": Tick()}, world, trace)
    assert engine.world_capabilities.agent_list == (kind is Reporting)
    world.asked.clear()
    engine.run(2)
    trace.close()
    assert world.asked == []  # the agent list (or that there is none) known from the build
    run = vivarium.Run.open(db)
    last = run.agent_vars[run.agent_vars["step"] == 1]
    # rank 0 is the world's first agent ("y" in its own list): stored in the run's order.
    expected = ranks if ranks is not None else {"x": 0, "y": 1}
    assert dict(zip(last["agent_id"], last["rank"], strict=True)) == expected
    if kind is Reporting:
        assert run.model_vars["ticks"].tolist() == [0, 2, 4]  # before step 0, after each step


@pytest.mark.parametrize(
    ("member", "value", "says"),
    [
        ("model_reporters", ["ticks"], "model_reporters: expected a dict of name -> callable"),
        ("agent_reporters", {"rank": 3}, "agent_reporters['rank']: not callable (int)"),
        ("agent_reporters", {"": len}, "reporter names must be non-empty strings"),
        ("agent_ids", 7, "world Asked: agent_ids is int, not a sequence of agent ids"),
        ("agent_ids", "xy", "world Asked: agent_ids is str, not a sequence of agent ids"),
    ],
)
def test_a_capability_of_the_wrong_shape_is_refused_at_build_in_one_line(
    member: str, value: Any, says: str, tmp_path: Path
) -> None:
    world = Asked()
    setattr(world, member, value)
    db = tmp_path / "t.sqlite"
    trace = TraceDb(db)
    with pytest.raises(ConfigError) as caught:
        WorldEngine(WorldEngineConfig(run_id="w"), {"x": Tick()}, world, trace)
    trace.close()
    message = str(caught.value)
    assert says in message and "\n" not in message
    assert world.ticks == 0  # refused before any step
    with sqlite3.connect(db) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        assert "steps" not in tables or con.execute("SELECT count(*) FROM steps").fetchone() == (0,)


def test_an_agent_ids_of_none_means_no_list_for_now() -> None:
    world = Asked()
    world.agent_ids = None  # type: ignore[attr-defined]
    assert check_world(world).agent_list  # declared; read (as None: the run's order) each step


# -- the structural check itself ----------------------------------------------------------------
class TwoMembers(Protocol):
    name: str

    def go(self) -> None: ...


def test_implements_is_all_members_with_methods_callable_and_half_is_refused() -> None:
    class Both:
        name = "b"

        def go(self) -> None: ...

    class Neither: ...

    class DataNotMethod:
        name = "d"
        go = 3

    class OnlyName:
        name = "n"

    assert implements(Both(), TwoMembers) and implements(Both, TwoMembers)
    assert not implements(Neither(), TwoMembers, "thing Neither")
    assert lacking(DataNotMethod(), TwoMembers) == ["go"]  # data is not the method
    assert not implements(OnlyName(), TwoMembers)  # no owner: no refusal, just no
    with pytest.raises(ConfigError) as caught:
        implements(OnlyName(), TwoMembers, "thing OnlyName")
    assert str(caught.value) == (
        "thing OnlyName has name but no go() method (a TwoMembers needs name, go())"
    )


# -- policies ------------------------------------------------------------------------------------
def test_a_policys_name_and_seed_are_declared_capabilities() -> None:
    class Plain(Tick): ...

    class Named(Tick):
        name = "ticker"

    class Seeded(Tick):
        seed = 11

    class Shared(Tick):
        seed = None

        def request_seed(self, agent_id: str) -> int:
            return len(agent_id)

    class SeedNotMethod(Tick):
        request_seed = 5

    assert [policy_name(p) for p in (Plain(), Named(), Seeded())] == ["Plain", "ticker", "Seeded"]
    got = [policy_seed(p, "abc") for p in (Plain(), Seeded(), Shared(), SeedNotMethod())]
    assert got == [None, 11, 3, None]


# -- figures and docs ------------------------------------------------------------------------------
class Grid:
    width, height = 4, 3

    def positions(self) -> dict[str, tuple[int, int]]:
        return {"a": (0, 0), "b": (3, 2)}


def test_the_world_view_reads_a_live_world_through_its_protocols() -> None:
    class OnGrid(Asked):
        grid = Grid()
        agent_reporters = {"k": lambda w: [1, 2]}

    class OwnPositions(Asked):
        width, height = 9, 9

        def positions(self) -> dict[str, tuple[int, int]]:
            return {"a": (1, 1)}

    class ArrayGrid(Asked):  # a grid of its own kind and data named positions: not drawn from
        grid = [[0, 0]]
        positions = {"a": (0, 0)}
        agent_ids = ["a", "b"]
        agent_reporters = {"x": lambda w: [0, 5], "y": lambda w: [1, 6]}

    on_grid = live_world(OnGrid())
    assert (on_grid.positions, on_grid.size) == ({"a": (0, 0), "b": (3, 2)}, (4, 3))
    assert list(on_grid.agent_reporters) == ["k"] and on_grid.agent_ids is None
    own = live_world(OwnPositions())
    assert (own.positions, own.size) == ({"a": (1, 1)}, (9, 9))
    arrays = live_world(ArrayGrid())
    assert (arrays.positions, arrays.size) == ({"a": (0, 1), "b": (5, 6)}, None)
    assert live_world(Asked()).positions is None


def test_describe_reads_observation_keys_and_name_through_their_protocols() -> None:
    class Documented(Asked):
        """A documented world."""

        name = "documented"
        OBSERVATION_KEYS = (ObservationKey("ticks", "int", "How many ticks so far."),)

    assert observation_keys(Documented) == Documented.OBSERVATION_KEYS
    assert observation_keys(Asked) is None
    text = describe(Documented())
    assert text.startswith("# `documented`") and "| `ticks` | <code>int</code> |" in text
    assert describe(Asked).startswith("# `Asked`") and "Not declared" in describe(Asked)


# -- exported and documented -----------------------------------------------------------------------
def _protocols(module: Any) -> list[str]:
    return sorted(
        name
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and obj.__module__ == module.__name__
        and getattr(obj, "_is_protocol", False)
    )


GATEWAY_CAPABILITIES = [
    "AsyncGateway",
    "AsyncGatewayLayer",
    "ClosableGateway",
    "GatewayLayer",
    "ModelGateway",
    "ProvidedGateway",
    "WrappingGateway",
]


def test_every_protocol_a_user_object_is_checked_against_is_exported_and_on_the_reference() -> None:
    from vivarium import gateways, policies
    from vivarium.gateways import base as gateway_protocols

    declared = _protocols(world_protocols) + _protocols(policy_protocols)
    assert {"World", "GridWorld", "AgentReportingWorld", "SeededPolicy"} <= set(declared)
    assert set(GATEWAY_CAPABILITIES) <= set(_protocols(gateway_protocols))
    declared += [*GATEWAY_CAPABILITIES, "LLMGateway"]
    for name in declared:
        module = next(
            m for m in (world_protocols, policy_protocols, gateway_protocols) if name in vars(m)
        )
        assert name in vivarium.__all__ and getattr(vivarium, name) is vars(module)[name]
    contracts = (ROOT / "docs" / "reference" / "contracts.md").read_text()
    listed = set(re.findall(r"^ +- (\w+)$", contracts, flags=re.MULTILINE))
    # AgentPolicy and AsyncAgentPolicy are rendered with ``vivarium.policies`` (its exports),
    # LLMGateway with ``vivarium.gateways``.
    listed |= set(policies.__all__) | set(gateways.__all__)
    assert set(declared) <= listed, sorted(set(declared) - listed)
    assert "::: vivarium.protocols" in contracts
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "reference/contracts.md" in nav and "notebooks/07_your_own_model.ipynb" in nav


# -- gateways --------------------------------------------------------------------------------------
def test_a_gateway_is_asked_only_for_what_its_protocols_declare() -> None:
    import asyncio

    from vivarium.gateways.base import LLMRequest, LLMResponse, complete_via
    from vivarium.gateways.provenance import provider_of
    from vivarium.gateways.stack import layers
    from vivarium.policies.asking import Chat

    class ChatOnly:  # the least a gateway has
        def chat(self, **request: Any) -> LLMResponse:
            return LLMResponse(content=f"chat {request['model']}", model=request["model"])

    class Layer:  # a layer: asked with complete, names its provider, wraps another
        provider = "mine"

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def complete(self, request: LLMRequest) -> LLMResponse:
            return LLMResponse(content="complete", model=request.model)

    request = LLMRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    assert complete_via(ChatOnly(), request).content == "chat m"
    assert complete_via(Layer(None), request).content == "complete"
    assert asyncio.run(Chat(ChatOnly(), {"model": "m"}).arun()).content == "chat m"  # in a thread
    bottom, top = Layer(None), Layer(ChatOnly())
    assert provider_of(ChatOnly()) == "ChatOnly" and provider_of(bottom) == "mine"
    assert provider_of(top) == "ChatOnly" and provider_of(None) is None
    assert [type(g).__name__ for g in layers(top)] == ["Layer", "ChatOnly"]
