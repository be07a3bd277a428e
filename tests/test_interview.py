"""Interviews: an agent of a finished run is asked in the context it had, the trace untouched.

The properties of ``vivarium.experiment.interview``: the request is the agent's recorded prompt
at that step, its own answer, then the question (checked against what the server received
during the run, not against the trace reader); the trace's bytes and the files beside it are as
they were; the exchange is in the log before the answer is returned, and asking again answers
from it without a call; the log belongs to the run (a new run at the same path finds none);
what cannot be asked is refused in one line.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Experiment, Run
from vivarium.cli import main
from vivarium.errors import ConfigError, TraceError
from vivarium.experiment import interview as interview_module


def files_beside(path: Path) -> dict[str, str]:
    """Every file in the trace's folder but the interview log, with the SHA-256 of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.parent.iterdir())
        if not p.name.endswith(interview_module.SUFFIX)
    }


def mock_run(path: Path, seed: int = 3) -> Run:
    return Experiment(
        name="iv", policy="cognitive", agents=2, steps=3, seed=seed, llm={"mock": True}
    ).run(path, progress=False)


def test_the_agent_is_asked_in_the_prompt_it_had_and_the_trace_is_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.sqlite"
    with FakeOpenAIServer() as server:
        run = Experiment(
            name="iv",
            policy="cognitive",
            agents=3,
            steps=3,
            llm={"model": "openai/fake", "api_base": server.base_url},
        ).run(path, progress=False)
        during_run = list(server.requests)
        before = files_beside(path)
        asked = run.interview("agent_001", 2, "Why did you say that?")
        assert files_beside(path) == before  # the trace and its folder: byte for byte
        sent = server.requests[-1]
    # What the agent was sent at step 2, found in what the server received during the run.
    (prompt,) = [
        b["messages"]
        for b in during_run
        if "You are agent_001." in b["messages"][1]["content"]
        and "Current step: 2." in b["messages"][1]["content"]
    ]
    assert sent["messages"][: len(prompt)] == prompt
    said, question = sent["messages"][len(prompt) :]
    assert question == {"role": "user", "content": "Why did you say that?"}
    (reply,) = [
        r
        for b, r in zip(during_run, server.replies[: len(during_run)], strict=True)
        if b["messages"] == prompt
    ]
    call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
    assert said == {"role": "assistant", "content": f"{call['name']}({call['arguments']})"}
    assert "tools" not in sent  # asked for words, not an action
    answer = server.replies[-1]["choices"][0]["message"]["content"]
    assert (asked.answer, asked.replayed, asked.model) == (answer, False, "openai/fake")


def test_asking_again_answers_from_the_log_without_a_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.sqlite"
    run = mock_run(path)
    first = run.interview("agent_000", 1, "What did you see?")
    other = run.interview("agent_000", 2, "What did you see?")
    assert first.answer and not first.replayed and not other.replayed

    def no_call(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a recorded interview made a call")

    monkeypatch.setattr(interview_module, "_ask", no_call)
    again = Run.open(path).interview("agent_000", 1, "What did you see?")
    assert (again.answer, again.replayed, again.request) == (first.answer, True, first.request)
    log = Run.open(path).interviews
    assert log[["agent_id", "step", "question", "answer"]].values.tolist() == [
        ["agent_000", 1, "What did you see?", first.answer],
        ["agent_000", 2, "What did you see?", other.answer],
    ]


def test_the_log_belongs_to_its_run(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    mock_run(path, seed=3).interview("agent_000", 1, "Why?")
    rerun = Experiment(
        name="iv", policy="cognitive", agents=2, steps=3, seed=4, llm={"mock": True}
    ).run(path, progress=False, overwrite=True)  # another run at the same path
    assert rerun.interviews.empty
    assert not rerun.interview("agent_000", 1, "Why?").replayed


def test_a_named_model_answers_instead_of_the_runs(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    with FakeOpenAIServer() as server:
        run = Experiment(
            name="iv", policy="cognitive", agents=1, steps=1,
            llm={"model": "openai/fake", "api_base": server.base_url},
        ).run(path, progress=False)  # fmt: skip
        calls = server.request_count
        asked = run.interview("agent_000", 0, "And now?", model="mock")
        assert server.request_count == calls  # the server was not asked
    assert asked.model == "mock" and asked.answer


def test_what_cannot_be_asked_is_refused_in_one_line(tmp_path: Path) -> None:
    random_run = Experiment(name="r", agents=2, steps=2).run(tmp_path / "r.sqlite", progress=False)
    llm_run = mock_run(tmp_path / "m.sqlite")
    cases = [
        (random_run, "agent_000", 1, "Why?", ConfigError, "made no LLM call at step 1"),
        (llm_run, "agent_000", 9, "Why?", ConfigError, "made no LLM call at step 9"),
        (llm_run, "agent_7", 1, "Why?", TraceError, "no agent 'agent_7'"),
        (llm_run, "agent_000", 1, "  ", ConfigError, "needs a question"),
    ]
    for run, agent, step, question, error, words in cases:
        with pytest.raises(error) as info:
            run.interview(agent, step, question)
        assert words in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "r.sqlite.interviews").exists()


def test_vvm_interview(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.sqlite"
    expected = mock_run(path).interview("agent_001", 0, "Who are you?").answer
    assert (
        main(["interview", str(path), "Who are you?", "--agent", "agent_001", "--step", "0"]) == 0
    )
    out, err = capsys.readouterr()
    assert out.strip() == expected and "answered by the interview log" in err
    assert main(["interview", str(path), "Who?", "--agent", "agent_001", "--step", "5"]) == 2
    assert "made no LLM call at step 5" in capsys.readouterr().err


def test_a_log_that_cannot_be_kept_is_said_before_any_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.sqlite"
    run = mock_run(path)
    (tmp_path / "run.sqlite.interviews").mkdir()  # where the log would go: not a file

    def no_call(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a call was made whose answer could not be kept")

    monkeypatch.setattr(interview_module, "_ask", no_call)
    with pytest.raises(TraceError, match="cannot keep interviews in") as info:
        run.interview("agent_000", 1, "Why?")
    assert "\n" not in str(info.value)


def test_vvm_interview_takes_the_key_from_the_environment_as_every_command_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.sqlite"
    mock_run(path)
    seen: list[Any] = []

    def answer(run: Any, settings: Any, request: Any) -> str:
        seen.append(settings.api_key.get_secret_value() if settings.api_key else None)
        return "because"

    monkeypatch.setattr(interview_module, "_ask", answer)
    monkeypatch.setenv("VIVARIUM_API_KEY", "sk-from-the-environment")
    assert main(["interview", str(path), "Why?", "--agent", "agent_000", "--step", "1"]) == 0
    given = ["--api-key", "sk-given"]
    assert (
        main(["interview", str(path), "How?", "--agent", "agent_000", "--step", "1", *given]) == 0
    )
    assert seen == ["sk-from-the-environment", "sk-given"]  # a flag wins, as everywhere


def test_a_folder_with_a_uri_character_in_its_name(tmp_path: Path) -> None:
    folder = tmp_path / "run #1?"
    folder.mkdir()
    run = mock_run(folder / "run.sqlite")
    asked = run.interview("agent_001", 1, "Still there?")
    assert run.interviews["answer"].tolist() == [asked.answer]
