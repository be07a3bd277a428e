"""``run.to_trajectories``: one episode per agent, in TRL's conversational format.

The run: three cognitive agents answered by the mock LLM, each playing its own game of twenty
questions (``GameWorld``) with a question cost, so every move earns a non-zero reward. The
expected values come from elsewhere than the code under test: the prompts and replies from
``run.llm_exchanges()``, the rewards from replaying each agent's moves in a fresh game.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from vivarium import Experiment
from vivarium.analysis.trajectories import episodes, to_trajectories
from vivarium.errors import ConfigError, MissingDependency, TraceError
from vivarium.facade import Run
from vivarium.metarl import TwentyQuestionsEnv
from vivarium.metarl.world import GAME_OVER, GameWorld
from vivarium.seeding import derive_seed

SEED = 3
AGENTS = 3
MAX_TURNS = 3  # each game ends after 3 moves; the run goes on 2 more steps
STEPS = 5
COST = 0.1
OPTIONS = {"max_turns": MAX_TURNS, "question_cost": COST}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    path = tmp_path_factory.mktemp("traj") / "tq.sqlite"
    exp = Experiment(
        name="tq",
        world=GameWorld,
        policy="cognitive",
        agents=AGENTS,
        steps=STEPS,
        seed=SEED,
        llm={"mock": True},
        world_options=OPTIONS,
    )
    return exp.run(path, progress=False)


@pytest.fixture(scope="module")
def dataset(run: Run) -> Any:
    pytest.importorskip("datasets")
    return run.to_trajectories()


def present(message: dict[str, Any]) -> dict[str, Any]:
    """A message without the None fields Arrow gives every message another message has."""
    return {k: v for k, v in message.items() if v is not None}


def replayed_rewards(agent_id: str, moves: list[str]) -> list[float]:
    """The rewards a fresh game, seeded as GameWorld seeds it, pays for these moves."""
    env = TwentyQuestionsEnv(derive_seed(SEED, "metarl", agent_id), **OPTIONS)
    env.reset()
    return [env.turn(move).reward for move in moves]


def test_the_world_records_rewards_and_bars_finished_players(run: Run) -> None:
    rows = run.actions
    played = rows[rows["step"] < MAX_TURNS]
    assert len(played) == AGENTS * MAX_TURNS
    results = [json.loads(r) for r in played["result"]]
    assert all(r["reward"] == pytest.approx(-COST) for r in results)
    assert [r["done"] for r in results] == [False] * 2 * AGENTS + [True] * AGENTS
    after = rows[rows["step"] >= MAX_TURNS]
    assert len(after) == AGENTS * (STEPS - MAX_TURNS)
    assert set(after["error"]) == {f"{GAME_OVER}: no model call"}
    # no model call for a finished game
    assert sorted(set(run.llm_exchanges()["step"])) == list(range(MAX_TURNS))


def test_one_episode_per_agent(run: Run, dataset: Any) -> None:
    assert dataset.num_rows == AGENTS
    assert dataset["episode"] == list(run.agents["agent_id"])
    assert set(dataset["run_id"]) == {run.run_id}
    for episode in dataset:
        assert [s["step"] for s in episode["steps"]] == list(range(MAX_TURNS))


def test_messages_are_what_the_model_saw_and_said(run: Run, dataset: Any) -> None:
    exchanges = run.llm_exchanges()
    for episode in dataset:
        agent = episode["episode"]
        for entry in episode["steps"]:
            sent = exchanges[
                (exchanges["agent_id"] == agent) & (exchanges["step"] == entry["step"])
            ]
            assert len(sent) == 1
            request, reply = sent.iloc[0]["request"], sent.iloc[0]["reply"]
            prompt = [present(m) for m in entry["prompt"]]
            assert prompt == request["messages"]
            assert [m["role"] for m in prompt] == ["system", "user"]
            assert f"You are {agent}." in prompt[1]["content"]
            (assistant,) = entry["completion"]
            assert present(assistant) == present(
                {
                    "role": "assistant",
                    "content": reply["content"],
                    "tool_calls": reply["tool_calls"],
                }
            )
            assert json.loads(entry["tools"]) == request["tools"]


def test_tool_calls_match_the_recorded_actions(run: Run, dataset: Any) -> None:
    rows = run.actions.set_index(["agent_id", "step"])
    for episode in dataset:
        for entry in episode["steps"]:
            row = rows.loc[(episode["episode"], entry["step"])]
            (call,) = entry["completion"][0]["tool_calls"]
            assert call["type"] == "function" and call["id"].startswith("call_")
            assert call["function"]["name"] == row["action"] == entry["action"] == "post_message"
            assert json.loads(call["function"]["arguments"]) == json.loads(row["arguments"])
            assert json.loads(entry["arguments"]) == json.loads(row["arguments"])
            assert json.loads(entry["result"]) == json.loads(row["result"])
            assert entry["success"] is True and entry["fallback"] is False
            assert entry["error"] is None


def test_rewards_are_the_games_own(dataset: Any) -> None:
    for episode in dataset:
        moves = [json.loads(s["arguments"])["content"] for s in episode["steps"]]
        expected = replayed_rewards(episode["episode"], moves)
        assert expected == [pytest.approx(-COST)] * MAX_TURNS
        assert episode["rewards"] == pytest.approx(expected)
        assert [s["reward"] for s in episode["steps"]] == pytest.approx(expected)
        assert episode["return"] == pytest.approx(sum(expected))


def test_a_reward_function_of_the_row(run: Run) -> None:
    pytest.importorskip("datasets")
    seen: list[dict[str, Any]] = []

    def length(row: dict[str, Any]) -> float:
        seen.append(row)
        return len(row["arguments"]["content"])

    data = run.to_trajectories(reward=length)
    for episode in data:
        for entry in episode["steps"]:
            assert entry["reward"] == len(json.loads(entry["arguments"])["content"])
    # one call per model decision, with the row decoded
    assert len(seen) == AGENTS * MAX_TURNS
    assert all(isinstance(r["result"], dict) and r["agent_id"].startswith("agent_") for r in seen)


def test_a_reward_that_is_not_a_number_is_refused(run: Run, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="a number was expected"):
        to_trajectories(run, lambda row: "good", path=tmp_path / "x.jsonl")
    with pytest.raises(ConfigError, match="reward must be a function"):
        to_trajectories(run, 1.0, path=tmp_path / "x.jsonl")  # type: ignore[arg-type]


def test_dataset_features(dataset: Any) -> None:
    datasets = pytest.importorskip("datasets")
    assert isinstance(dataset, datasets.Dataset)
    features = dataset.features
    assert set(features) == {"run_id", "episode", "steps", "rewards", "return"}
    step = features["steps"].feature
    assert {"prompt", "completion", "tools", "action", "reward", "step"} <= set(step)
    assert set(step["prompt"].feature) >= {"role", "content"}
    call = step["completion"].feature["tool_calls"].feature
    assert set(call) == {"id", "type", "function"}
    assert features["return"] == datasets.Value("float64")


def test_steps_flatten_to_trl_prompt_completion_rows(dataset: Any) -> None:
    """The module docstring's recipe gives one conversational prompt-completion row per step."""
    steps = dataset.map(
        lambda batch: {
            k: [s[k] for ep in batch["steps"] for s in ep]
            for k in ("prompt", "completion", "tools", "reward")
        },
        batched=True,
        remove_columns=dataset.column_names,
    )
    assert steps.num_rows == AGENTS * MAX_TURNS
    assert steps.column_names == ["prompt", "completion", "tools", "reward"]
    row = steps[0]
    assert row["prompt"][-1]["role"] == "user"
    assert row["completion"][0]["role"] == "assistant"


def test_jsonl_without_datasets(run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(MissingDependency) as info:
        run.to_trajectories()
    assert str(info.value) == (
        'datasets is not installed: pip install "vivarium-lab[rl]", or pass path= to write JSONL'
    )
    target = tmp_path / "out" / "episodes.jsonl"
    assert run.to_trajectories(path=target) == target
    lines = target.read_text(encoding="utf-8").splitlines()
    loaded = [json.loads(line) for line in lines]
    assert loaded == episodes(run)
    assert [e["episode"] for e in loaded] == list(run.agents["agent_id"])
    first = loaded[0]["steps"][0]
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert first["completion"][0]["tool_calls"][0]["function"]["name"] == "post_message"
    assert loaded[0]["rewards"] == pytest.approx([-COST] * MAX_TURNS)


def test_the_dataset_and_the_jsonl_agree(run: Run, dataset: Any, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    target = tmp_path / "e.jsonl"
    again = to_trajectories(run.path, path=target)  # a path works as the run
    assert again.to_list() == dataset.to_list()
    reloaded = datasets.load_dataset("json", data_files=str(target), split="train")
    assert reloaded["episode"] == dataset["episode"]
    assert reloaded["rewards"] == dataset["rewards"]


def test_a_world_without_rewards_asks_for_one(tmp_path: Path) -> None:
    run = Experiment(
        name="ch", policy="cognitive", agents=2, steps=2, seed=1, llm={"mock": True}
    ).run(tmp_path / "ch.sqlite", progress=False)
    with pytest.raises(ConfigError, match="pass reward=") as info:
        to_trajectories(run, path=tmp_path / "ch.jsonl")
    assert "\n" not in str(info.value)
    data = episodes(run, reward=lambda row: 1.0)
    assert [len(e["steps"]) for e in data] == [2, 2]
    assert data[0]["return"] == 2.0


def test_a_run_without_llm_calls_is_refused(tmp_path: Path) -> None:
    run = Experiment(name="rnd", policy="random", agents=2, steps=2, seed=1).run(
        tmp_path / "r.sqlite", progress=False
    )
    with pytest.raises(TraceError, match="made no LLM calls"):
        to_trajectories(run, lambda row: 0.0, path=tmp_path / "r.jsonl")


def test_game_world_refuses_unknown_games_and_options() -> None:
    with pytest.raises(ConfigError, match="unknown game 'chess'"):
        GameWorld(["agent_000"], game="chess")
    with pytest.raises(ConfigError, match="bad options for twenty_questions"):
        GameWorld(["agent_000"], colours=3)


def test_features_have_no_null_type(dataset: Any) -> None:
    """Fields no row fills are text, so two runs' datasets concatenate."""
    datasets = pytest.importorskip("datasets")
    step = dataset.features["steps"].feature
    assert "null" not in str(dataset.features)
    assert step["completion"].feature["content"] == datasets.Value("string")  # all tool calls
    assert step["error"] == datasets.Value("string")  # no failures
    both = datasets.concatenate_datasets([dataset, dataset])
    assert both.num_rows == 2 * AGENTS


class StubRun:
    """What ``episodes`` reads of a run, for decisions the mock never makes (retries)."""

    run_id = "stub"

    def __init__(self, actions: list[dict[str, Any]], calls: list[dict[str, Any]]) -> None:
        import pandas as pd

        self.actions = pd.DataFrame(actions)
        self.agents = pd.DataFrame({"agent_id": ["agent_000"]})
        self._calls = pd.DataFrame(calls)

    def llm_exchanges(self) -> Any:
        return self._calls


def _call(step: int, attempt: int, text: str, error: str | None = None) -> dict[str, Any]:
    reply = {"content": text, "tool_calls": None, "finish_reason": "stop"}
    if error is not None:
        reply = {"content": None, "tool_calls": None, "finish_reason": None, "error": error}
    request = {"messages": [{"role": "user", "content": f"step {step} call {text}"}]}
    return {
        "step": step,
        "agent_id": "agent_000",
        "attempt": attempt,
        "error": error,
        "request": request,
        "reply": reply,
    }


def _noop_row(step: int, result: str | None) -> dict[str, Any]:
    """An actions row of agent_000's successful noop at ``step``."""
    return {
        "step": step,
        "seq": 0,
        "agent_id": "agent_000",
        "action": "noop",
        "arguments": None,
        "reasoning": None,
        "metadata": None,
        "success": True,
        "fallback": False,
        "result": result,
        "error": None,
    }


def test_the_reply_used_is_the_last_calls_last_good_attempt() -> None:
    def action(step: int) -> dict[str, Any]:
        return _noop_row(step, '{"reward": 0.5}')

    calls = [
        _call(0, 1, "a", error="HTTP 500"),  # step 0: a retry succeeds
        _call(0, 2, "b"),
        _call(1, 1, "c"),  # step 1: two calls (a workflow's), the second chose the action
        _call(1, 1, "d"),
        _call(2, 1, "e"),  # step 2: the last call never succeeded
        _call(2, 1, "f", error="timeout"),
    ]
    (episode,) = episodes(StubRun([action(0), action(1), action(2)], calls))  # type: ignore[arg-type]
    got = [
        (s["step"], s["completion"][0]["content"], s["prompt"][0]["content"])
        for s in episode["steps"]
    ]
    assert got == [(0, "b", "step 0 call b"), (1, "d", "step 1 call d")]
    assert episode["rewards"] == [0.5, 0.5]
    assert "tool_calls" not in episode["steps"][0]["completion"][0]  # a plain-text reply


def test_game_world_pays_a_win() -> None:
    """BisectingAgent, run as a policy in the world, wins each agent's own game: +1 at the end."""
    from vivarium.metarl import AgentPolicyAdapter, BisectingAgent

    ids = ["agent_000", "agent_001"]
    world = GameWorld(ids, seed=SEED)
    policy = AgentPolicyAdapter(BisectingAgent())
    state: dict[str, Any] = dict.fromkeys(ids)
    rewards: dict[str, list[float]] = {a: [] for a in ids}
    for t in range(30):
        for agent in ids:
            if world.over_llm_quota(agent) is not None:
                continue
            observation = {**world.observe(agent, t), "agent_state": state[agent]}
            request = policy.decide(
                run_id="r", time_step=t, agent_id=agent, observation=observation
            )
            state[agent] = request.metadata["agent_state"]
            rewards[agent].append(world.apply(request).result["reward"])  # type: ignore[index]
    for agent in ids:
        assert rewards[agent][-1] == 1.0 and sum(rewards[agent][:-1]) == 0.0
        assert world.over_llm_quota(agent) == GAME_OVER
        secret = world.envs[agent].secret
        assert TwentyQuestionsEnv(derive_seed(SEED, "metarl", agent)).secret == secret


def test_a_trace_without_texts_says_so() -> None:
    call = {**_call(0, 1, "a"), "request": None, "reply": None}
    action = _noop_row(0, None)
    with pytest.raises(TraceError, match="written before Vivarium recorded them"):
        episodes(StubRun([action], [call]), reward=lambda row: 0.0)  # type: ignore[arg-type]


def test_a_used_reply_without_its_text_is_an_error_not_a_shorter_episode(tmp_path: Path) -> None:
    """A successful call recorded without its prompt and reply (replayed from a cassette row
    written before texts were kept) must not drop its step: the return would be wrong."""
    import warnings

    from vivarium.gateways.base import CallRecord
    from vivarium.trace.db import TraceDb
    from vivarium.trace.records import StepRecord
    from vivarium.trace.run import TraceRun
    from vivarium.types import RunMetadata

    path = tmp_path / "gap.sqlite"
    trace = TraceDb(path)
    meta = RunMetadata(
        run_id="r", name="n", world="w", policy="p", seed=0, agents=1, steps=2,
        scheduling="sequential", vivarium_version="x",
    )  # fmt: skip
    trace.begin_run(meta, [(0, "a0", "p", None)])
    request = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
    reply = {"content": "ok", "tool_calls": None, "finish_reason": "stop"}
    for step in range(2):
        record = StepRecord(step=step, world_digest="d", state_hash="h")
        record.add_action(0, "post_message", None, None, None, True, '{"reward":1.0}', None)
        text = step == 0
        call = CallRecord(
            attempt=1, model="m", request_hash="x", cache_hit=not text,
            request=request if text else None, reply=reply if text else None,
        )  # fmt: skip
        record.llm_calls.append(call.row(0))
        trace.write_step(record)
    trace.finish_run("complete")
    trace.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = TraceRun.open(path)
    with pytest.raises(TraceError, match="a0 made at step 1 was recorded without its prompt"):
        episodes(run)
