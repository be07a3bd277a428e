"""The worlds' reference (observation keys, actions and arguments) says what the code does.

Each built-in world is built small and observed: the keys it returns must be exactly, and in
order, the ones its class declares in ``OBSERVATION_KEYS``. Every action of each registry must
appear in ``describe`` with the argument names of its pydantic model (read from the model's
fields, not from the schema ``describe`` reads), and the docs site's page must hold them all.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field

from vivarium.errors import ConfigError
from vivarium.experiment.build import BUILTIN_WORLDS as BUILD_WORLDS
from vivarium.types import ActionRequest, ActionResult
from vivarium.worlds import ObservationKey, describe
from vivarium.worlds.boltzmann import BOLTZMANN_ACTIONS, BoltzmannWorld
from vivarium.worlds.channel import CHANNEL_ACTIONS, InMemoryChannel
from vivarium.worlds.docs import BUILTIN_WORLDS, action_arguments, worlds_page
from vivarium.worlds.ecology import ECOLOGY_ACTIONS, EcologyWorld
from vivarium.worlds.registry import ActionRegistry

ROOT = Path(__file__).resolve().parents[2]


def _request(action: str, agent: str = "a", step: int = 0, **arguments: Any) -> ActionRequest:
    return ActionRequest(
        run_id="r", time_step=step, agent_id=agent, action_name=action, arguments=arguments
    )


def _observations(name: str) -> list[dict[str, Any]]:
    """Observations of a small world of each kind, before and after some actions."""
    if name == "channel":
        world = InMemoryChannel(message_history_limit=3)
        first = world.observe("a", 0)
        world.apply(_request("post_message", content="hello"))
        return [first, world.observe("b", 1), InMemoryChannel(0).observe("a", 0)]
    if name == "ecology":
        world = EcologyWorld(["a", "b"], total_steps=5)
        first = world.observe("a", 0)
        world.apply(_request("transfer_scrip", to="b", amount=3))
        world.apply(_request("read_artifact", agent="b", artifact_id="missing"))
        return [first, world.observe("a", 1), world.observe("b", 1)]
    if name == "boltzmann":
        world = BoltzmannWorld(["a", "b", "c"])
        first = world.observe("a", 0)
        world.apply(_request("give", to="b"))
        return [first, world.observe("a", 1), world.observe("b", 1)]
    raise AssertionError(f"no small {name} world in this test: add one")


WORLD_CLASSES = {"channel": InMemoryChannel, "ecology": EcologyWorld, "boltzmann": BoltzmannWorld}
REGISTRIES = {
    "channel": CHANNEL_ACTIONS,
    "ecology": ECOLOGY_ACTIONS,
    "boltzmann": BOLTZMANN_ACTIONS,
}


def test_every_builtin_world_is_documented() -> None:
    """The page covers the worlds a config can name: the two lists cannot part."""
    assert set(BUILTIN_WORLDS) == set(BUILD_WORLDS) == set(WORLD_CLASSES)


@pytest.mark.parametrize("name", sorted(WORLD_CLASSES))
def test_declared_keys_are_exactly_what_observe_returns(name: str) -> None:
    """Same keys, same order, before and after actions: the declaration cannot drift."""
    declared = [k.name for k in WORLD_CLASSES[name].OBSERVATION_KEYS]
    assert len(set(declared)) == len(declared)
    for observation in _observations(name):
        assert list(observation) == declared


@pytest.mark.parametrize("name", sorted(WORLD_CLASSES))
def test_declared_keys_have_a_type_and_a_meaning(name: str) -> None:
    for key in WORLD_CLASSES[name].OBSERVATION_KEYS:
        assert isinstance(key, ObservationKey)
        assert key.type.strip() and key.description.strip(), key.name


def _section(text: str, action: str) -> str:
    """The text of one action's section of ``describe``, up to the next heading."""
    start = text.index(f"# `{action}`\n")
    end = text.find("\n#", start + 1)
    return text[start : end if end >= 0 else len(text)]


@pytest.mark.parametrize("name", sorted(WORLD_CLASSES))
def test_describe_lists_every_key_action_and_argument(name: str) -> None:
    text = describe(name)
    assert text.startswith(f"# `{name}`\n")
    for key in WORLD_CLASSES[name].OBSERVATION_KEYS:
        assert f"| `{key.name}` |" in text
    registry = REGISTRIES[name]
    for spec in registry:
        section = _section(text, spec.name)
        assert spec.description in section
        fields = list(spec.arguments.model_fields)
        for field in fields:
            assert f"| `{field}` |" in section, (spec.name, field)
        if not fields:
            assert "No arguments." in section
    assert f"calls `{registry.default_tool}`" in text


def test_argument_rows_say_type_requirement_and_default() -> None:
    """Rows written out by hand from the argument models' fields."""
    write = _section(describe("ecology"), "write_artifact")
    assert "| `artifact_id` | <code>str</code> | yes |" in write
    assert "| `content` | <code>str &#124; dict &#124; list</code> | yes |" in write
    assert (
        "| `executable` | <code>bool</code> | no, `False` | Whether others can invoke it. |"
        in write
    )
    assert "| `price` | <code>int, &gt;= 0</code> | no, `0` |" in write
    assert "| `methods` | <code>dict[str, str] &#124; None</code> | no |" in write
    transfer = _section(describe("ecology"), "transfer_scrip")
    assert "| `amount` | <code>int, &gt; 0</code> | yes | How much scrip to send. |" in transfer
    give = _section(describe("boltzmann"), "give")
    assert "| `to` | <code>str</code> | yes |" in give
    # What an LLM is shown: emit_event's value is required in the tool, though optional in code.
    emit = {a.name: a for a in action_arguments(CHANNEL_ACTIONS.get("emit_event"))}  # type: ignore[arg-type]
    assert emit["value"].required and not emit["seen_time_step"].required
    assert emit["seen_time_step"].type == "int | None"


def test_the_page_holds_every_world_key_and_action() -> None:
    page = worlds_page()
    assert page.startswith("# ")
    for name, cls in WORLD_CLASSES.items():
        assert f"\n## `{name}`\n" in page
        body = page[page.index(f"\n## `{name}`\n") :]
        for key in cls.OBSERVATION_KEYS:
            assert f"| `{key.name}` |" in body
        for spec in REGISTRIES[name]:
            assert f"\n#### `{spec.name}`\n" in body


def test_the_docs_site_publishes_the_page() -> None:
    """The hook adds the generated page and the nav links it (the strict build checks links)."""
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    assert hooks.worlds_page is worlds_page
    assert f"Worlds: {hooks.WORLDS_PAGE}" in (ROOT / "mkdocs.yml").read_text()


# -- your own world ---------------------------------------------------------------------------
# No docstring: pydantic would put it in the tool's schema.
class MoveArgs(BaseModel):  # noqa: D101
    model_config = ConfigDict(extra="forbid")
    dx: int = Field(ge=-1, le=1, description="Columns to move | left or right.")
    dy: int = Field(default=0, description="Rows to move.")


def _move(world: Any, request: ActionRequest, args: MoveArgs) -> ActionResult:
    return ActionResult.ok()


MOVES = ActionRegistry(default_tool="move")
MOVES.action("move", "Move to a neighbouring cell.", MoveArgs)(_move)


class GridWorld:
    """A toy grid.

    More about it.
    """

    name = "grid"
    registry = MOVES
    OBSERVATION_KEYS: ClassVar[tuple[ObservationKey, ...]] = (
        ObservationKey("cell", "tuple[int, int]", "Where the agent stands."),
    )

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"cell": (0, 0)}


def test_describe_a_class_of_your_own() -> None:
    text = describe(GridWorld, heading_level=2)
    assert text.startswith("## `grid`\n\nA toy grid. (`")
    assert "| `cell` | <code>tuple[int, int]</code> | Where the agent stands. |" in text
    move = _section(text, "move")
    assert "| `dx` | <code>int, &gt;= -1, &lt;= 1</code> | yes | Columns to move \\| left" in move
    assert "| `dy` | <code>int</code> | no, `0` | Rows to move. |" in move


def test_describe_an_instance_shows_its_own_registry() -> None:
    world = InMemoryChannel()
    world.registry = CHANNEL_ACTIONS.extend()
    world.registry.action("shout", "Post in capitals.", MoveArgs)(_move)
    text = describe(world)
    assert "\n## Actions\n" in text and "`shout`" in text and "| `dx` |" in text
    assert "`shout`" not in describe(InMemoryChannel)


def test_describe_says_what_is_missing() -> None:
    class Bare:
        def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
            return {}

    text = describe(Bare)
    assert text.startswith("# `Bare`")
    assert "Not declared" in text and "No action registry" in text


def test_describe_refuses_unknown_names_and_non_worlds_in_one_line() -> None:
    with pytest.raises(ConfigError, match="did you mean 'ecology'") as caught:
        describe("ecolgy")
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="not a world"):
        describe(lambda: None)
