"""Code and conditions written against ``context``, as the agent ecology's agents write them.

Issue 13: the agent ecology's code steps (agent ecology 599d43d3 ``src/agents/*/agent.yaml``,
design doc 002 "Code Steps") read ``context.get('x', 0)`` and ``context['x']``, write
``context['x'] = v``, and use list comprehensions, ``set()``, ``len``, ``max``, slices, dict
literals, ``.get``, conditional expressions, ``%``, comparison chains and ``round``. The snippets
here are our own; the expected values come from Python itself (``exec`` on the same text, the way
the original ran its code steps) or are worked out by hand.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted import ScriptedChat
from tests.workflow.wf_helpers import act, observation, write_agent
from vivarium import sandbox
from vivarium.errors import ConfigError
from vivarium.sandbox import EvaluationError, UnsafeExpression, evaluate, execute
from vivarium.workflow.config import _assigned_names, load_agent
from vivarium.workflow.policy import WorkflowPolicy


def python_exec(code: str, names: dict[str, Any]) -> dict[str, Any]:
    """What Python's own ``exec`` assigns, with ``context`` the namespace itself.

    The oracle for results: one namespace for globals and locals, so comprehensions see the
    step's names (as in Python 3.12, see ``test_comprehensions_see_the_steps_names``), and
    ``context['x'] = v`` is ``x = v`` there by construction.
    """
    space = copy.deepcopy(names)
    space["context"] = space
    exec(code, space)  # noqa: S102 - our own test text, as the original ran its code steps
    space.pop("__builtins__")
    space.pop("context")
    return {k: v for k, v in space.items() if k not in names or names[k] != v}


# Contexts shaped as the agent ecology documents them: recent failures as dicts with an
# action_type, working memory a dict or None, artifacts as dicts with created_by.
FAILURES = [
    {"action_type": "invoke_artifact", "error": "no such method", "tick": 4},
    {"action_type": "write_artifact", "error": "too large", "tick": 6},
    {"action_type": "write_artifact", "error": "too large", "tick": 7},
    {"action_type": "write_artifact", "error": "too large", "tick": 8},
]
ARTIFACTS = [
    {"id": "ledger", "created_by": "ana", "type": "executable", "tick": 2},
    {"id": "notes", "created_by": "bo", "type": "data", "tick": 7},
    {"id": "bot_registry", "created_by": "cy", "type": "agent", "tick": 9},
]
MEMORY = {"goal": "run a shop", "stage": {"since": 3, "done": 1}}


def shaped(**overrides: Any) -> dict[str, Any]:
    names = {
        "agent_id": "bo",
        "tick": 20,
        "balance": 35,
        "recent_failures": FAILURES,
        "recent_successes": [{"action_type": "read_artifact"}],
        "working_memory": MEMORY,
        "artifacts": ARTIFACTS,
        "my_artifacts": ["notes"],
    }
    names.update(overrides)
    return names


# ---------------------------------------------------------------------------------------------
# The view: reads.


def test_context_reads_like_a_mapping_of_the_steps_names() -> None:
    """Design doc 002 "Code Steps": code reads its names through ``context.get('x', 0)``."""
    names = {"wins": 3, "games": 4, "label": "x"}
    assert evaluate("context.get('wins', 0)", names) == 3
    assert evaluate("context.get('losses', 0)", names) == 0
    assert evaluate("context.get('losses')", names) is None
    assert evaluate("context['games'] * 2", names) == 8
    assert evaluate("'wins' in context and 'losses' not in context", names) is True
    assert evaluate("context.keys()", names) == ["wins", "games", "label"]
    assert evaluate("context.values()", names) == [3, 4, "x"]
    assert evaluate("context.items()[0]", names) == ("wins", 3)
    assert evaluate("len(context.keys())", {}) == 0
    # a missing name is not "in" context, whatever its type
    assert evaluate("3 in context", names) is False


def test_reading_a_missing_name_through_context_fails_like_an_unknown_name() -> None:
    """agent_ecology 599d43d3 workflow.py runs code with ``exec``: a missing name is an error."""
    with pytest.raises(EvaluationError) as err:
        execute("total = context['spent'] + 1", {"earned": 2})
    text = str(err.value)
    assert text.startswith("unknown name 'spent'")
    assert "context.get('spent', default)" in text
    assert "\n" not in text


def test_context_sees_assignments_in_order() -> None:
    """agent_ecology 599d43d3 workflow.py: a code step's names are one namespace, in order."""
    code = "a = 2\nbefore = context.get('b', 'unset')\nb = context['a'] + 1\nafter = context['b']"
    assert execute(code, {}) == {"a": 2, "before": "unset", "b": 3, "after": 3}


# ---------------------------------------------------------------------------------------------
# The view: writes.


def test_a_context_write_is_an_assigned_name() -> None:
    """Design doc 002 "Code Steps": ``context['x'] = v`` sets the context variable x."""
    names = {"wins": 1, "games": 4}
    code = (
        "ratio = context.get('wins', 0) / max(context.get('games', 1), 1)\n"
        "context['ratio'] = ratio\n"
        "context['switch'] = ratio < 0.5\n"
    )
    assert execute(code, names) == {"ratio": 0.25, "switch": True}
    assert execute(code, names) == python_exec(code, names)


def test_a_context_write_is_exactly_a_plain_assignment() -> None:
    """Design doc 002 "Code Steps": the write and ``x = v`` are the same variable."""
    names = {"streak": 2, "book": {"pages": [1, 2]}}
    code = (
        "context['streak'] += 1\n"
        "context['fresh'] = {'n': streak}\n"
        "context['fresh']['n'] *= 10\n"
        "context['book']['pages'][0] = 'cover'\n"
        "seen = fresh['n'] + context['streak']\n"
    )
    expected = {
        "streak": 3,
        "fresh": {"n": 30},
        "book": {"pages": ["cover", 2]},
        "seen": 33,
    }
    snapshot = copy.deepcopy(names)
    assert execute(code, names) == expected == python_exec(code, names)
    assert names == snapshot  # the caller's values are never changed


def test_a_context_write_to_a_missing_name_fails_as_the_plain_form_would() -> None:
    """agent_ecology 599d43d3 workflow.py (``exec``): ``x += 1`` with no x is a NameError."""
    for code in ("context['n'] += 1", "context['d']['k'] = 1"):
        with pytest.raises(EvaluationError, match="^unknown name '(n|d)'$"):
            execute(code, {})


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("context[key] = 1", "context[...] = value needs a quoted name as the key"),
        ("context['two words'] = 1", "context['two words'] = value: not a valid name"),
        ("context['_hidden'] = 1", "name '_hidden' is not allowed"),
        ("context['context'] = 1", "'context' cannot be assigned"),
        ("context = {}", "'context' cannot be assigned"),
        ("snapshot = context", "'context' can only be used as context['x']"),
        ("context.clear()", "'context' can only be used as context['x']"),
        ("n = len(context)", "'context' can only be used as context['x']"),
        ("n = context.get", "method 'get' can only be called"),
    ],
)
def test_everything_else_about_context_is_refused_in_one_line(code: str, message: str) -> None:
    """Issue 13: the view opens reads and writes of names and nothing else (no Python object)."""
    with pytest.raises(UnsafeExpression) as err:
        sandbox.check(code, "exec")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------
# The constructs the original agents' code uses, in code of our own.

OWN_STEPS = {
    # metrics over recent failures (alpha_2's kind): len, max, slice, set, comprehension
    "metrics": """
fails = len(recent_failures) if recent_failures else 0
wins = len(recent_successes) if recent_successes else 0
rate = wins / max(fails + wins, 1)
looping = False
if fails >= 3 and recent_failures:
    kinds = [r.get('action_type', '') for r in recent_failures[-3:]]
    looping = len(set(kinds)) == 1
switch = rate < 0.3 or looping
""",
    # goals out of working memory that may be None (beta_2's kind): `or {}`, nested .get, %
    "goals": """
mem = working_memory or {}
goal = mem.get('goal', 'survive')
stage = mem.get('stage', {})
since = stage.get('since', tick)
stalled = tick - since > 10 and stage.get('done', 0) < 2
review = (tick % 10 == 0) or stalled
others = [a for a in artifacts if a.get('created_by') != agent_id]
plan = {
    'goal': goal,
    'stage': {'since': since, 'done': stage.get('done', 0) + 1},
    'reviewed': tick if review else mem.get('reviewed', 0),
}
""",
    # filters on text and recency (gamma/epsilon's kind): str(...).lower(), chains, round
    "scan": """
agents = [a for a in artifacts if 'agent' in str(a).lower() and a != agent_id]
fresh = [a['id'] for a in artifacts[-2:] if a.get('tick', 0) >= tick - 15]
mid = 10 <= balance < 50
share = round(len(fresh) / max(len(artifacts), 1), 2)
by_kind = {a['type']: a['id'] for a in artifacts}
makers = sorted({a['created_by'] for a in artifacts})
""",
}
CONTEXTS = [
    shaped(),
    shaped(recent_failures=[], recent_successes=[], working_memory=None, artifacts=[]),
    shaped(tick=30, balance=5, working_memory={}, recent_failures=FAILURES[:2]),
    shaped(tick=14, working_memory={"goal": "g", "stage": {"since": 1, "done": 0}}),
]


@pytest.mark.parametrize("step", sorted(OWN_STEPS))
@pytest.mark.parametrize("index", range(len(CONTEXTS)))
def test_code_in_the_style_of_the_original_agents_runs_as_python_runs_it(
    step: str, index: int
) -> None:
    """agent_ecology 599d43d3 alpha_2/beta_2/gamma/epsilon agent.yaml: their code steps' constructs
    (comprehensions with conditions, set(), len, max, slices, dict literals, .get, conditional
    expressions, %, comparison chains, round) give what Python gives."""
    names = CONTEXTS[index]
    assert execute(OWN_STEPS[step], names) == python_exec(OWN_STEPS[step], names)


def test_the_metrics_by_hand() -> None:
    """agent_ecology 599d43d3 alpha_2: three same-type failures in a row mean stuck in a loop."""
    result = execute(OWN_STEPS["metrics"], shaped())
    assert result["fails"] == 4 and result["wins"] == 1
    assert result["rate"] == 1 / 5
    assert result["kinds"] == ["write_artifact"] * 3
    assert result["looping"] is True and result["switch"] is True
    calm = execute(OWN_STEPS["metrics"], shaped(recent_failures=FAILURES[:3]))
    assert calm["looping"] is False  # invoke, write, write: two types


def test_conditions_over_what_code_steps_computed() -> None:
    """agent_ecology 599d43d3 *_3 agent.yaml: transition conditions are plain names and simple
    expressions over the step's results (``tick % 20 == 0``, ``flag and balance < 20``)."""
    names = {**shaped(), **execute(OWN_STEPS["goals"], shaped())}
    assert evaluate("review", names) is True  # tick 20 % 10 == 0
    assert evaluate("tick % 20 == 0", names) is True
    assert evaluate("bool(others) and balance < 20", names) is False
    assert evaluate("not context.get('never_set', False)", names) is True


# ---------------------------------------------------------------------------------------------
# Comprehensions and the collection functions.


def test_comprehensions_see_the_steps_names() -> None:
    """agent_ecology 599d43d3 beta/epsilon agent.yaml: a comprehension's condition reads step
    names (``agent_id``, ``tick``). Python 3.11's ``exec(code, {}, locals)`` hides those from a
    comprehension (NameError); we follow Python 3.12, where they are seen."""
    names = {"me": "bo", "items": [{"by": "bo"}, {"by": "ana"}]}
    assert execute("mine = [i for i in items if i['by'] == me]", names) == {"mine": [{"by": "bo"}]}


def test_comprehension_names_stay_inside() -> None:
    """Python 3 semantics, which the original's ``exec`` has: loop names do not leak."""
    code = "pairs = [(a, b) for a in [1, 2] for b in range_ if b != a]"
    assert execute(code, {"range_": [1, 2, 3]}) == {"pairs": [(1, 2), (1, 3), (2, 1), (2, 3)]}
    assert evaluate("[[a * b for b in [1, 2]] for a in [3, 4]]", {}) == [[3, 6], [4, 8]]
    # the first iterable is read outside: an `a` of the step is there, then shadowed
    assert evaluate("[a + 1 for a in a]", {"a": [1, 2]}) == [2, 3]
    assert execute("x = [v for v in [1]]", {}) == {"x": [1]}  # no `v` assigned


def test_the_other_comprehension_forms() -> None:
    """Python's set, dict and generator forms; a set is iterated in sorted order."""
    assert evaluate("{k: v * 2 for k, v in d.items() if v}", {"d": {"a": 1, "b": 0}}) == {"a": 2}
    assert evaluate("{len(w) for w in ws}", {"ws": ["ab", "cd", "e"]}) == {1, 2}
    assert evaluate("sum(n * n for n in ns)", {"ns": [1, 2, 3]}) == 14
    assert evaluate("any(n > 2 for n in ns)", {"ns": [1, 2, 3]}) is True
    assert evaluate("[k for k in d]", {"d": {"b": 1, "a": 2}}) == ["b", "a"]
    assert evaluate("[w for w in ws]", {"ws": {"pear", "apple", "fig"}}) == ["apple", "fig", "pear"]
    assert evaluate("[c for c in 'abc']", {}) == ["a", "b", "c"]


def test_set_list_tuple_dict() -> None:
    """agent_ecology 599d43d3 alpha_2: ``len(set(...))`` counts distinct failure types."""
    assert evaluate("set()", {}) == set()
    assert evaluate("len(set(['a', 'b', 'a']))", {}) == 2
    assert evaluate("list({3, 1, 2})", {}) == [1, 2, 3]  # sorted: hash order varies by process
    assert evaluate("tuple([1, 2])", {}) == (1, 2)
    assert evaluate("dict([('a', 1)])", {}) == {"a": 1}
    assert evaluate("list('ab')", {}) == ["a", "b"]
    with pytest.raises(EvaluationError, match="unhashable type: 'dict'"):
        evaluate("set([{}])", {})


# ---------------------------------------------------------------------------------------------
# Loading: the static checks agree with the view.


def test_assigned_names_count_context_writes() -> None:
    """Design doc 002 "Code Steps": ``context['x'] = v`` assigns x (a later step may read x)."""
    code = "context['a'] = 1\ncontext['b'] += 1\ncontext['c']['k'] = 2\nd = 3\ncontext[k] = 4"
    assert _assigned_names(code) == {"a", "b", "c", "d", "context"}
    assert _assigned_names(code, defining=True) == {"a", "d"}


def test_names_read_count_context_reads_that_must_exist() -> None:
    """``context['x']`` fails without x, as ``x`` does; ``context.get`` and ``in`` do not."""
    code = (
        "a = context['must'] + context.get('may', 0)\n"
        "b = 'maybe' in context\n"
        "context['grown'] += 1\n"
        "c = [f for f in fs if f != me]\n"
    )
    assert sandbox.names_read(code, "exec") == {"must", "grown", "fs", "me"}
    assert sandbox.names_read("[x for y in ys for x in y]") == {"ys"}
    assert sandbox.names_read("[y for y in y]") == {"y"}


def agent_with(tmp_path: Path, code: str, condition: str | None = None) -> Path:
    steps = [
        {"name": "count", "type": "code", "code": code, "on_failure": "fail"},
        {"name": "act", "type": "llm", "prompt": "Act."},
    ]
    if condition is not None:
        steps[1]["run_if"] = condition
    workflow = {"states": ["a"], "steps": steps}
    return write_agent(tmp_path / "agent", {"id": "tester", "workflow": workflow})


def test_an_agent_reading_a_never_assigned_name_with_get_loads(tmp_path: Path) -> None:
    """Design doc 002 "Code Steps": ``context.get('x', 0)`` is how a first decision reads x."""
    load_agent(agent_with(tmp_path, "seen = context.get('seen_before', 0) + 1"))


def test_a_name_written_through_context_is_known_to_later_conditions(tmp_path: Path) -> None:
    """Design doc 002 "Code Steps": a variable set with ``context['x'] = v`` is a variable."""
    load_agent(agent_with(tmp_path, "context['eager'] = balance > 10", condition="eager"))
    with pytest.raises(ConfigError, match="cannot assign 'state'"):
        load_agent(agent_with(tmp_path, "context['state'] = 'b'"))


def test_context_writes_persist_across_decisions(tmp_path: Path) -> None:
    """agent_ecology 599d43d3 workflow.py: what a code step assigns stays in the context; here a
    counter kept only through ``context`` counts the decisions."""
    spec = load_agent(
        agent_with(tmp_path, "context['visits'] = context.get('visits', 0) + 1", condition="visits")
    )
    policy = WorkflowPolicy(spec, ScriptedChat(by_tool={"act": [act("noop")]}))
    state = None
    for t in range(3):
        req = policy.decide(
            run_id="r", time_step=t, agent_id="tester", observation=observation(t, state)
        )
        assert req.metadata["steps"][0]["status"] == "ok", req.metadata["steps"][0]
        state = req.metadata["agent_state"]
    assert state["variables"]["visits"] == 3
