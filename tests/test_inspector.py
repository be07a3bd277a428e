"""The decision inspector, driven without a browser: select, click, walk, filter, read the HTML.

Expected values come from the trace's own frames (``actions``, ``transitions``,
``llm_exchanges``) or are counted by hand here, never from the inspector's code.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.support.fake_openai import FakeOpenAIServer, default_reply
from vivarium import Experiment, Run
from vivarium.errors import VivariumError
from vivarium.inspector import Inspector

SCRIPT = "<script>alert('x')</script> & <b>bold</b>"


class _Text(HTMLParser):
    """The text a browser would show (entities decoded), and the tags it would build."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def shown(html: str) -> _Text:
    parser = _Text()
    parser.feed(html)
    parser.close()
    return parser


def text_of(html: str) -> str:
    return "".join(shown(html).parts)


@pytest.fixture(scope="module")
def mock_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("mock")
    exp = Experiment(name="t", policy="cognitive", agents=3, steps=4, seed=1, llm={"mock": True})
    return exp.run(folder / "t.sqlite", progress=False)


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The ecology with loop_alpha: state transitions, a fallback, failures and pivots."""
    exp = Experiment.from_file(ROOT / "data/experiments/ecology.yaml", steps=20, llm={"mock": True})
    exp.config.agents[0].agent = str(ROOT / "tests/fixtures/agents/loop_alpha")
    return exp.run(tmp_path_factory.mktemp("loop") / "eco.sqlite", progress=False)


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """agent_000 posts a ``<script>`` message; agent_001 gets an empty reply at step 1."""

    def fault(index: int, body: dict[str, Any]) -> str | None:
        messages = body["messages"]
        mine = "You are agent_001." in messages[-1]["content"]
        return "empty" if mine and "Current step: 1." in messages[-1]["content"] else None

    def reply(index: int, body: dict[str, Any]) -> dict[str, Any]:
        answer = default_reply(index, body)
        if "You are agent_000." in body["messages"][-1]["content"]:
            call = {"name": "post_message", "arguments": json.dumps({"content": SCRIPT})}
            message = answer["choices"][0]["message"]
            message["tool_calls"] = [{"id": f"call_{index}", "type": "function", "function": call}]
        return answer

    with FakeOpenAIServer(reply=reply, faults=fault) as server:
        llm = {"model": "openai/fake", "api_base": server.base_url, "num_retries": 0}
        exp = Experiment(name="fake", policy="cognitive", agents=2, steps=3, seed=3, llm=llm)
        return exp.run(tmp_path_factory.mktemp("fake") / "fake.sqlite", progress=False)


def order_of(run: Run) -> list[tuple[str, int]]:
    a = run.actions.sort_values(["step", "seq"])
    return list(zip(a["agent_id"].astype(str), a["step"].astype(int), strict=True))


def here(inspector: Inspector) -> tuple[str, int]:
    row = inspector.current
    assert row is not None
    return str(row["agent_id"]), int(row["step"])


def walk(inspector: Inspector) -> list[tuple[str, int]]:
    """Every decision ``next`` reaches from the current one, the current one first."""
    seen = [here(inspector)]
    while inspector.next():
        seen.append(here(inspector))
    return seen


# -- what the detail shows ------------------------------------------------------------------------
def test_the_detail_holds_the_exact_prompt_and_reply(mock_run: Run) -> None:
    inspector = mock_run.inspect()
    for agent, step in [("agent_001", 2), ("agent_002", 0), ("agent_000", 3)]:
        inspector.select(agent, step)
        text = text_of(inspector.detail.value)
        calls = mock_run.llm_exchanges(agent_id=agent, step=step)
        assert len(calls) == 1
        request, reply = calls["request"].iloc[0], calls["reply"].iloc[0]
        for message in request["messages"]:
            assert message["content"] in text  # byte for byte, line breaks included
        for call in reply["tool_calls"]:
            assert call["function"]["arguments"] in text
        # the other agents' prompts are not there (their user messages; the system prompt is
        # the same for every agent)
        others = mock_run.llm_exchanges(step=step)
        for other in others[others["agent_id"] != agent]["request"]:
            assert other["messages"][-1]["content"] not in text
        row = mock_run.actions.query("agent_id == @agent and step == @step").iloc[0]
        assert row["arguments"] in text or json.loads(row["arguments"])["content"] in text
        assert f"prompt tokens {int(calls['prompt_tokens'].sum()):,}" in text
        assert f"completion tokens {int(calls['completion_tokens'].sum()):,}" in text
        assert "tool_call" in text  # the parse path


def test_roles_are_labelled_bubbles(mock_run: Run) -> None:
    inspector = Inspector(mock_run)
    inspector.select("agent_000", 1)
    html = inspector.detail.value
    assert html.count("vvm-msg vvm-system") == 1 and html.count("vvm-msg vvm-user") == 1
    assert "vvm-msg vvm-assistant" in html  # the reply
    assert "tools (3): noop, emit_event, post_message" in text_of(html)


def test_the_transition_and_its_reason_show(loop_run: Run) -> None:
    t = loop_run.transitions
    moves = t[t["reason"].notna()]
    agent, step, reason = (
        str(moves["agent_id"].iloc[0]),
        int(moves["step"].iloc[0]),
        moves["reason"].iloc[0],
    )
    inspector = loop_run.inspect()
    inspector.select(agent, step)
    text = text_of(inspector.detail.value)
    assert reason in text
    here_moves = t[(t["agent_id"] == agent) & (t["step"] == step)]
    for frm, to in zip(here_moves["from_state"], here_moves["to_state"], strict=True):
        assert f"{frm} \u2192 {to}" in text
    # every call of a several-call decision is listed, with its prompt
    calls = loop_run.llm_exchanges(agent_id=agent, step=step)
    assert f"{len(calls)} call attempt(s)" in text
    for request in calls["request"]:
        assert request["messages"][-1]["content"] in text


def test_a_fallback_shows_its_parse_path_and_reason(fake_run: Run) -> None:
    inspector = fake_run.inspect()
    inspector.select("agent_001", 1)
    text = text_of(inspector.detail.value)
    assert "parse pathfallback" in text and "fallback reasonempty reply" in text
    (reply,) = fake_run.llm_exchanges(agent_id="agent_001", step=1)["reply"]
    assert reply["content"] == "" and json.dumps(reply, indent=2) in text  # the raw reply


def test_text_from_the_model_is_escaped(fake_run: Run) -> None:
    inspector = fake_run.inspect()
    inspector.select("agent_000", 1)
    html = inspector.detail.value
    page = shown(html)
    assert "script" not in page.tags
    assert "<script>" not in html and "<b>bold</b>" not in html
    (request,) = fake_run.llm_exchanges(agent_id="agent_000", step=1)["request"]
    user = request["messages"][-1]["content"]
    assert SCRIPT in user and user in "".join(page.parts)  # shown as text, exactly


# -- choosing a decision --------------------------------------------------------------------------
def test_clicking_a_timeline_cell_selects_it(mock_run: Run) -> None:
    inspector = mock_run.inspect()
    cell = inspector.cell("agent_002", 3)
    assert "agent_002 \u00b7 step 3: " in cell.tooltip
    cell.click()
    assert here(inspector) == ("agent_002", 3)
    assert inspector.agent.value == "agent_002" and inspector.step.value == 3
    assert cell.layout.border.startswith("2px")
    (request,) = mock_run.llm_exchanges(agent_id="agent_002", step=3)["request"]
    assert request["messages"][-1]["content"] in text_of(inspector.detail.value)


def test_cells_are_coloured_by_action(mock_run: Run) -> None:
    inspector = mock_run.inspect()
    actions = mock_run.actions
    by_colour: dict[str, set[str]] = {}
    for agent, step, action in zip(
        actions["agent_id"], actions["step"], actions["action"], strict=True
    ):
        colour = inspector.cell(str(agent), int(step)).style.button_color
        by_colour.setdefault(colour, set()).add(str(action))
    assert all(len(names) == 1 for names in by_colour.values())  # one colour, one action
    assert len(by_colour) == actions["action"].nunique()


def test_the_dropdowns_select(mock_run: Run) -> None:
    inspector = mock_run.inspect()
    inspector.agent.value = "agent_001"
    assert here(inspector) == ("agent_001", 0)
    inspector.step.value = 2
    assert here(inspector) == ("agent_001", 2)
    inspector.agent.value = "agent_002"  # the step stays
    assert here(inspector) == ("agent_002", 2)


def test_a_big_run_shows_a_window_that_follows_the_selection(mock_run: Run) -> None:
    inspector = mock_run.inspect(max_agents=2, max_steps=2)
    assert len(inspector.cells) == 2 and len(inspector.cells[0]) == 2
    assert inspector.cell("agent_002", 3) is None
    inspector.select("agent_002", 3)
    cell = inspector.cell("agent_002", 3)
    assert cell is not None and cell.layout.border.startswith("2px")
    inspector.earlier.click()
    assert inspector.cell("agent_002", 2) is not None and here(inspector) == ("agent_002", 3)


def test_bad_choices_are_one_line(mock_run: Run) -> None:
    inspector = mock_run.inspect()
    for call in (
        lambda: inspector.select("nobody", 0),
        lambda: inspector.select("agent_000", 99),
        lambda: inspector.set_filters("typos"),
        lambda: Inspector(42),
        lambda: Inspector(mock_run, max_steps=0),
    ):
        with pytest.raises(VivariumError) as info:
            call()
        assert "\n" not in str(info.value)


# -- walking and filtering ------------------------------------------------------------------------
def test_next_and_previous_walk_the_trace_order(mock_run: Run) -> None:
    inspector = mock_run.inspect()
    expected = order_of(mock_run)
    assert walk(inspector) == expected
    assert inspector.next() is False and "no later decision" in inspector.status.value
    back = [here(inspector)]
    while inspector.previous():
        back.append(here(inspector))
    assert back == expected[::-1]
    inspector.next_button.click()
    assert here(inspector) == expected[1]
    inspector.previous_button.click()
    assert here(inspector) == expected[0]


def test_this_agent_only(mock_run: Run) -> None:
    inspector = mock_run.inspect()
    inspector.select("agent_001", 0)
    inspector.this_agent.value = True
    assert walk(inspector) == [("agent_001", s) for s in range(4)]


def _expected_pivots(run: Run) -> set[tuple[str, int]]:
    """Counted by hand, as tests/test_ecology_run.py counts them: loop_alpha's one non-routine
    move back (review_strategy -> self_audit), or a decision flagged should_pivot."""
    t = run.transitions
    back = t[(t["from_state"] == "review_strategy") & (t["to_state"] == "self_audit")]
    found = set(zip(back["agent_id"].astype(str), back["step"].astype(int), strict=True))
    for agent, step, meta in zip(
        run.actions["agent_id"], run.actions["step"], run.actions["metadata"], strict=True
    ):
        data = json.loads(meta) if isinstance(meta, str) else {}
        if data.get("should_pivot") or (data.get("variables") or {}).get("should_pivot"):
            found.add((str(agent), int(step)))
    return found


@pytest.mark.parametrize("name", ["fallbacks", "failures", "pivots", "fallbacks+pivots"])
def test_each_filter_keeps_its_decisions_in_order(loop_run: Run, name: str) -> None:
    a = loop_run.actions.sort_values(["step", "seq"])
    keys = list(zip(a["agent_id"].astype(str), a["step"].astype(int), strict=True))
    kinds = {
        "fallbacks": {k for k, f in zip(keys, a["fallback"], strict=True) if f},
        "failures": {k for k, s in zip(keys, a["success"], strict=True) if not s},
        "pivots": _expected_pivots(loop_run),
    }
    wanted = set().union(*(kinds[n] for n in name.split("+")))
    expected = [k for k in keys if k in wanted]
    assert expected  # the run has some of each
    inspector = loop_run.inspect()
    inspector.set_filters(*name.split("+"))
    assert here(inspector) == expected[0]  # the first decision did not match: moved on
    assert walk(inspector) == expected
    # a decision the filters leave out is greyed on the timeline
    left_out = next(k for k in keys if k not in wanted)
    assert inspector.cell(*left_out).style.button_color == "#f4f4f4"


def test_a_filter_toggle_keeps_a_matching_selection(loop_run: Run) -> None:
    a = loop_run.actions
    failed = a[~a["success"]].sort_values(["step", "seq"]).iloc[1]
    inspector = loop_run.inspect()
    inspector.select(str(failed["agent_id"]), int(failed["step"]))
    inspector.failures.value = True  # the toggle, as a click sets it
    assert here(inspector) == (str(failed["agent_id"]), int(failed["step"]))
    assert f"{int((~a['success']).sum())} kept by the filters" in inspector.status.value


# -- sweeps ---------------------------------------------------------------------------------------
def test_it_works_on_a_sweep(tmp_path: Path) -> None:
    exp = Experiment(name="sw", policy="cognitive", agents=2, steps=2, llm={"mock": True})
    sweep = exp.sweep(seed=[1, 2], folder=tmp_path / "sweep", max_workers=1, progress=False)
    runs = sweep.runs
    inspector = sweep.inspect()
    assert [value for _, value in inspector.run.options] == [0, 1]
    assert "seed" in inspector.run.options[1][0]
    # next walks on from the first run's last decision into the second run
    assert len(walk(inspector)) == len(runs[0].actions) + len(runs[1].actions)
    assert inspector.run_index == 1
    inspector.select("agent_001", 1, run=0)
    (request,) = runs[0].llm_exchanges(agent_id="agent_001", step=1)["request"]
    (other,) = runs[1].llm_exchanges(agent_id="agent_001", step=1)["request"]
    assert request["messages"][-1]["content"] != other["messages"][-1]["content"]
    assert request["messages"][-1]["content"] in text_of(inspector.detail.value)
    inspector.run.value = 1  # the same agent and step, in the other run
    assert inspector.run_index == 1 and here(inspector) == ("agent_001", 1)
    assert other["messages"][-1]["content"] in text_of(inspector.detail.value)


def test_a_filter_nothing_matches_says_so(mock_run: Run) -> None:
    assert not mock_run.actions["fallback"].any()
    inspector = mock_run.inspect()
    inspector.select("agent_001", 2)
    inspector.fallbacks.value = True
    assert here(inspector) == ("agent_001", 2)  # the selection stays
    assert "no decision matches the filters" in inspector.status.value
    assert inspector.next() is False and inspector.previous() is False


def test_a_trace_without_texts_says_so() -> None:
    from vivarium.inspector.render import decision_html

    row = {"agent_id": "a", "step": 0, "seq": 0, "action": "noop", "success": True}
    call = {"call_id": 1, "attempt": 1, "prompt_tokens": 5, "request": None, "reply": None}
    text = text_of(decision_html(row, [call], []))
    assert "no prompt text in this trace" in text and "no reply text in this trace" in text
    assert "prompt tokens 5" in text
    assert "no LLM call" in text_of(decision_html(row, [], []))


def test_the_interview_panel_asks_the_selected_agent_and_shows_the_answers(
    tmp_path: Path,
) -> None:
    exp = Experiment(name="iv", policy="cognitive", agents=2, steps=3, seed=1, llm={"mock": True})
    run = exp.run(tmp_path / "iv.sqlite", progress=False)
    inspector = Inspector(run)
    inspector.select("agent_001", 2)
    inspector.question.value = "Why <that>?"
    inspector.ask_button.click()
    (row,) = run.interviews.to_dict("records")  # asked as Run.interview asks: the same log
    assert (row["agent_id"], row["step"], row["question"]) == ("agent_001", 2, "Why <that>?")
    shown = inspector.answers.value
    assert "Why &lt;that&gt;?" in shown and str(row["answer"]) in shown  # escaped
    assert inspector.question.value == ""
    inspector.select("agent_000", 2)
    assert inspector.answers.value == ""  # another decision: its own interviews (none)
    inspector.select("agent_001", 2)
    assert str(row["answer"]) in inspector.answers.value


def test_an_agent_that_cannot_be_asked_is_said_in_the_status(tmp_path: Path) -> None:
    run = Experiment(name="r", agents=2, steps=2).run(tmp_path / "r.sqlite", progress=False)
    inspector = Inspector(run)
    inspector.select("agent_000", 1)
    inspector.question.value = "Why?"
    inspector.ask_button.click()  # a random agent: no prompt to ask in
    assert "made no LLM call at step 1" in inspector.status.value
    with pytest.raises(VivariumError, match="made no LLM call"):
        inspector.ask("Why?")
