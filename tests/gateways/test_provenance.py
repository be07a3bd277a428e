"""Where a reply came from: each cassette row records its provider and model, and no run is ever
served (or stores) a reply of another provider than its own.

The property, over any sequence of runs against one cassette (the mock, the mock answering a
real model's name, real model A, real model B; record, auto, replay): every reply a run gets was
produced by what the run names, a run that would store replies beside another provider's is
refused before the file changes, and a replay never changes the file. Real models are answered
by the fake OpenAI server, which signs each reply with the model it was asked for.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fake_openai import FakeOpenAIServer, default_reply
from vivarium.errors import VivariumError
from vivarium.gateways import (
    CacheMissError,
    CachingGateway,
    Cassette,
    CassetteError,
    GatewaySettings,
    LLMRequest,
    MockLLMGateway,
    build_gateway,
    collect_calls,
)
from vivarium.gateways.cache import CassetteMixError

from .helpers import messages

SEED = 7
MODEL_A, MODEL_B = "openai/model-a", "openai/model-b"
MOCK, REAL = "vivarium-mock", "litellm"
# (what answers, the model the run names): the mock, the mock answering A's name, A, B.
PRODUCERS = [(MOCK, "mock"), (MOCK, MODEL_A), (REAL, MODEL_A), (REAL, MODEL_B)]
PROMPTS = ["p0", "p1", "p2"]
ROOT = Path(__file__).resolve().parents[2]


def signed(index: int, body: dict) -> dict:
    """The fake server's reply, its text naming the model it was asked for."""
    reply = default_reply(index, body)
    reply["choices"][0]["message"] = {"role": "assistant", "content": f"real {body['model']}"}
    reply["choices"][0]["finish_reason"] = "stop"
    return reply


@pytest.fixture(scope="module")
def real() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply=signed) as srv:
        yield srv


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def stack(path: Path, provider: str, model: str, mode: str, base_url: str) -> object:
    mock = provider == MOCK
    return build_gateway(
        GatewaySettings(
            model=model,
            mock=mock,
            api_base=None if mock else base_url,
            cache=str(path),
            cache_mode=mode,  # type: ignore[arg-type]
            retries=0,
        ),
        seed=SEED,
    )


def made_by(provider: str, model: str, prompt: str, content: str | None) -> bool:
    """Whether ``content`` is what ``provider`` answers to ``model`` for ``prompt``."""
    if provider == MOCK:
        asked = LLMRequest(model=model, messages=messages(prompt))
        return content == MockLLMGateway(seed=SEED).reply(asked).content
    return content == f"real {model.split('/', 1)[1]}"


def mixes(rows: dict[tuple[str, str], str | None], provider: str) -> bool:
    """The rule, stated independently: one provider per cassette; an old row of a real model
    (provider None) goes with any provider but the mock."""
    return any(
        (p is None and provider == MOCK) or (p is not None and p != provider) for p in rows.values()
    )


runs = st.lists(
    st.tuples(
        st.sampled_from(PRODUCERS),
        st.sampled_from(["record", "auto", "replay"]),
        st.lists(st.sampled_from(PROMPTS), min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=runs, legacy=st.sampled_from([None, (MOCK, "mock"), (REAL, MODEL_A)]))
def test_every_reply_comes_from_what_the_run_names(
    real: FakeOpenAIServer, runs: list, legacy: tuple[str, str] | None
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "one.cassette"
        rows: dict[tuple[str, str], str | None] = {}  # (model, prompt) -> provider stored
        if legacy is not None:  # a cassette from before provenance: rows attributed by model
            provider, model = legacy
            gw = stack(path, provider, model, "record", real.base_url)
            gw.chat(model=model, messages=messages("p0"))
            gw.close()
            make_old(path)
            rows[(model, "p0")] = MOCK if model == "mock" else None
        for (provider, model), mode, prompts in runs:
            before = digest(path)
            if mode != "replay" and mixes(rows, provider):
                with pytest.raises(CassetteMixError) as refused:
                    stack(path, provider, model, mode, real.base_url)
                assert "\n" not in str(refused.value)
                assert "another cassette file" in str(refused.value)
                assert digest(path) == before  # nothing in it changed
                continue
            if mode == "replay" and before is None:
                with pytest.raises(CassetteError, match="no cassette at"):
                    stack(path, provider, model, mode, real.base_url)
                continue
            gw = stack(path, provider, model, mode, real.base_url)
            for prompt in prompts:
                stored = rows.get((model, prompt), "nothing")
                ours = stored == provider or (stored is None and provider != MOCK)
                if mode == "replay" and not ours:
                    with pytest.raises(CacheMissError) as missed:
                        gw.chat(model=model, messages=messages(prompt))
                    assert "\n" not in str(missed.value)
                    if stored != "nothing":  # another provider's reply to this very request
                        assert "this run's replies come from" in str(missed.value)
                    continue
                reply = gw.chat(model=model, messages=messages(prompt))
                assert made_by(provider, model, prompt, reply.content), (provider, model, reply)
                if mode == "record" or stored == "nothing":
                    rows[(model, prompt)] = provider
            gw.close()
            if mode == "replay":
                assert digest(path) == before  # a replay never writes
        if path.exists():
            with Cassette(path, readonly=True) as cassette:
                written = {p for _, p in cassette.sources()}
            assert len(written - {None}) <= 1  # one provider per cassette, whatever happened


def make_old(path: Path) -> None:
    """Turn a cassette into one an older Vivarium wrote: no provider column, schema 3."""
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE replies DROP COLUMN provider")
    con.execute("DELETE FROM meta WHERE key = 'provider'")
    con.execute("DELETE FROM meta WHERE key = 'key_version'")  # keyed by version 1, unsaid
    con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    con.commit()
    con.execute("VACUUM")
    con.close()


# -- what a row records ---------------------------------------------------------------------------
def rows_of(path: Path) -> list[tuple[str, str | None]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT model, provider FROM replies ORDER BY model").fetchall()
    finally:
        con.close()


def test_each_row_records_the_provider_and_model_that_made_it(
    tmp_path: Path, real: FakeOpenAIServer
) -> None:
    mock = tmp_path / "mock.cassette"
    gw = stack(mock, MOCK, MODEL_A, "record", real.base_url)  # the mock, asked for A's name
    gw.chat(model=MODEL_A, messages=messages())
    gw.chat(model="mock", messages=messages())
    gw.close()
    assert rows_of(mock) == [("mock", MOCK), (MODEL_A, MOCK)]
    models = tmp_path / "models.cassette"
    gw = stack(models, REAL, MODEL_A, "auto", real.base_url)
    gw.chat(model=MODEL_A, messages=messages())
    gw.chat(model=MODEL_B, messages=messages())  # a workflow agent with its own model
    gw.close()
    assert rows_of(models) == [(MODEL_A, REAL), (MODEL_B, REAL)]
    con = sqlite3.connect(models)
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    con.close()
    assert (meta["provider"], meta["schema_version"]) == (REAL, "4")
    # No address, key or host is recorded: the server is where calls went, not what answered.
    assert b"127.0.0.1" not in models.read_bytes()


def test_the_mocks_call_records_say_mock_whatever_model_it_was_asked_for() -> None:
    gateway = MockLLMGateway(seed=1)
    with collect_calls() as records:
        reply = gateway.chat(model=MODEL_A, messages=messages())
    assert reply.model == MODEL_A  # the agent sees the reply as before
    assert [r.model for r in records] == ["mock"]  # llm_calls.model: who answered
    assert records[0].request is not None and records[0].request["model"] == MODEL_A


def test_a_bare_replay_layer_serves_any_provider_and_one_given_a_provider_only_its_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.cassette"
    recorder = CachingGateway(MockLLMGateway(seed=1), path, mode="record")
    recorded = recorder.chat(model=MODEL_A, messages=messages())
    recorder.close()
    assert recorder.provider == MOCK  # taken from the provider below
    bare = CachingGateway(None, path, mode="replay")
    assert bare.chat(model=MODEL_A, messages=messages()).content == recorded.content
    bare.close()
    strict = CachingGateway(None, path, mode="replay", provider=REAL)
    with pytest.raises(CacheMissError, match="from the deterministic mock"):
        strict.chat(model=MODEL_A, messages=messages())
    strict.close()


def test_a_shared_cassette_object_refuses_a_second_provider(tmp_path: Path) -> None:
    path = tmp_path / "shared.cassette"
    with Cassette(path) as cassette:
        CachingGateway(MockLLMGateway(), cassette, mode="auto").chat(
            model="mock", messages=messages()
        )
        before = rows_of(path)
        with pytest.raises(CassetteMixError, match="one provider's replies"):
            CachingGateway(MockLLMGateway(), cassette, mode="auto", provider=REAL)
    assert rows_of(path) == before


# -- committed cassettes: from before provenance, and after ---------------------------------------
COMMITTED = sorted((ROOT / "data" / "cassettes").glob("*.cassette"))
# Recorded with provenance (the provider that answered, litellm for a real server); the others
# before it, when a cassette did not say.
WITH_PROVENANCE = {"what_if_smollm2.cassette"}


@pytest.mark.parametrize("committed", COMMITTED, ids=lambda p: p.name)
def test_committed_cassettes_are_attributed_by_their_model_and_left_unchanged(
    committed: Path,
) -> None:
    before = digest(committed)
    provider = REAL if committed.name in WITH_PROVENANCE else None
    with Cassette(committed, readonly=True) as cassette:
        assert cassette.sources() == [("openai/smollm2", provider)]  # a real model
        key = cassette.hashes()[0]
        row = cassette.get(key)
    assert row is not None and (row.model, row.provider) == ("openai/smollm2", provider)
    assert digest(committed) == before


def meta_of(path: Path) -> dict[str, str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    finally:
        con.close()


def test_an_old_cassette_is_upgraded_only_when_a_run_writes_and_its_rows_stay(
    tmp_path: Path, real: FakeOpenAIServer
) -> None:
    path = tmp_path / "old.cassette"
    gw = stack(path, REAL, MODEL_A, "record", real.base_url)
    first = gw.chat(model=MODEL_A, messages=messages("p0"))
    gw.close()
    make_old(path)
    old = digest(path)
    cols = "request_hash, model, request_json, response_json, attempts_json"
    con = sqlite3.connect(path)
    old_rows = con.execute(f"SELECT {cols} FROM replies").fetchall()
    con.close()

    replay = stack(path, REAL, MODEL_A, "replay", real.base_url)
    assert replay.chat(model=MODEL_A, messages=messages("p0")).content == first.content
    replay.close()
    with pytest.raises(CassetteMixError):  # the mock, asked for A's name: refused, unchanged
        stack(path, MOCK, MODEL_A, "auto", real.base_url)
    assert digest(path) == old

    writer = stack(path, REAL, MODEL_A, "auto", real.base_url)
    assert writer.chat(model=MODEL_A, messages=messages("p0")).content == first.content  # a hit
    assert meta_of(path) == {"format": "vivarium-cassette", "schema_version": "3"}  # not yet
    writer.chat(model=MODEL_A, messages=messages("p1"))  # a miss: written, the file upgraded
    writer.close()
    con = sqlite3.connect(path)
    kept = con.execute(f"SELECT {cols} FROM replies WHERE provider IS NULL").fetchall()
    con.close()
    assert meta_of(path) == {"format": "vivarium-cassette", "schema_version": "4", "provider": REAL}
    assert kept == old_rows  # the old row, byte for byte, still attributed by its model
    assert rows_of(path) == [(MODEL_A, None), (MODEL_A, REAL)]


def test_a_cassette_left_mixed_by_an_older_vivarium_replays_each_provider_its_own(
    tmp_path: Path, real: FakeOpenAIServer
) -> None:
    """An older Vivarium let a mock run (model ``mock``) write into a real model's cassette:
    each kind of run replays its own rows from it, and no run may write to it any more."""
    path = tmp_path / "mixed.cassette"
    for provider, model in ((REAL, MODEL_A), (MOCK, "mock")):
        gw = stack(tmp_path / f"{model[-1]}.cassette", provider, model, "record", real.base_url)
        gw.chat(model=model, messages=messages())
        gw.close()
        make_old(tmp_path / f"{model[-1]}.cassette")
    path.write_bytes((tmp_path / "a.cassette").read_bytes())
    con = sqlite3.connect(path)
    con.execute("ATTACH ? AS other", (str(tmp_path / "k.cassette"),))
    con.execute("INSERT INTO replies SELECT * FROM other.replies")
    con.commit()
    con.close()
    before = digest(path)
    for provider, model in ((REAL, MODEL_A), (MOCK, "mock")):
        gw = stack(path, provider, model, "replay", real.base_url)
        assert made_by(provider, model, "hello", gw.chat(model=model, messages=messages()).content)
        gw.close()
        with pytest.raises(CassetteMixError, match="holds replies of mock .* openai/model-a"):
            stack(path, provider, model, "auto", real.base_url)
    assert digest(path) == before


def test_a_refused_writer_is_one_line_an_api_user_can_catch(tmp_path: Path) -> None:
    path = tmp_path / "m.cassette"
    CachingGateway(MockLLMGateway(), path, mode="record").chat(model="mock", messages=messages())
    with pytest.raises(VivariumError) as info:
        CachingGateway(MockLLMGateway(), path, mode="record", provider=REAL)
    assert str(info.value) == (
        f"cassette {path} holds replies of mock (vivarium-mock), and this run's replies come "
        "from a real model (litellm); a cassette keeps one provider's replies, so give "
        "this run another cassette file (llm cache=...)"
    )
    assert re.fullmatch(r"[^\n]+", str(info.value))


def test_two_writers_that_opened_one_empty_cassette_cannot_mix_it(tmp_path: Path) -> None:
    """Both open the new file before either writes (two processes starting together): the
    first write names the provider, the other writer's first write is refused."""
    path = tmp_path / "race.cassette"
    mock, real = Cassette(path, provider=MOCK), Cassette(path, provider=REAL)
    request = LLMRequest(model=MODEL_A, messages=messages())
    reply = MockLLMGateway(seed=1).reply(request)
    real.put(request, reply.model_copy(update={"content": "real"}), [], key="k-real")
    with pytest.raises(CassetteMixError, match="holds replies of openai/model-a \\(litellm\\)"):
        mock.put(request, reply, [], key="k-mock")
    mock.close()
    real.close()
    assert rows_of(path) == [(MODEL_A, REAL)]
    assert meta_of(path)["provider"] == REAL


def test_auto_mode_never_serves_nor_overwrites_a_row_of_another_provider(
    tmp_path: Path, real: FakeOpenAIServer
) -> None:
    """A row of the mock slipped into a model's cassette (by hand, or by an older Vivarium):
    a run of the model in ``auto`` mode stops on it in one line, serving nothing."""
    path = tmp_path / "edited.cassette"
    gw = stack(path, REAL, MODEL_A, "record", real.base_url)
    gw.chat(model=MODEL_A, messages=messages("p0"))
    gw.close()
    con = sqlite3.connect(path)
    con.execute("UPDATE replies SET provider = ?", (MOCK,))  # now says: made by the mock
    con.commit()
    con.close()
    before = rows_of(path)
    gw = stack(path, REAL, MODEL_A, "auto", real.base_url)
    asked = real.request_count
    with pytest.raises(CassetteMixError, match="openai/model-a \\(vivarium-mock\\)"):
        gw.chat(model=MODEL_A, messages=messages("p0"))
    gw.close()
    assert real.request_count == asked and rows_of(path) == before
