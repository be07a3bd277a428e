"""Golden cassettes: what this and older versions recorded replays into its golden trace today.

``tests/golden/cassettes`` holds a cassette of the schema this version writes (the mock's
replies, keyed by key version 1) and one of schema 3 (SmolLM2's, before provenance, a frozen
copy of what data/cassettes held), with what ``MANIFEST.json`` knows of each (plain SQL). This
is the compatibility promise of ``vivarium.gateways.cache``: each still opens, replays into
its golden trace byte for byte (but for who wrote it, ``golden.STAMPS``) without being
changed, and a recording made again today gives the golden rows. A later key version reads an
older cassette with that cassette's own key.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support import golden as g
from vivarium.gateways import request_key as keys
from vivarium.gateways.base import LLMRequest
from vivarium.gateways.cache import CacheMissError, CachingGateway, Cassette, CassetteError
from vivarium.gateways.mock import MockLLMGateway
from vivarium.trace.schema import SCHEMA_VERSION

MANIFEST = g.load_manifest()
CASSETTES: dict[str, dict[str, Any]] = MANIFEST["cassettes"]
KINDS = {kind.name: kind for kind in g.TRACE_KINDS}


def unpacked(name: str, into: Path) -> Path:
    entry = CASSETTES[name]
    path = g.unpack(entry["file"], into)
    assert g.sha256(path) == entry["sha256"], f"{entry['file']} is not the file the manifest names"
    return path


def dump(path: Path) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(con.iterdump())
    finally:
        con.close()


@pytest.mark.parametrize("name", sorted(CASSETTES))
def test_a_golden_cassette_opens_as_the_manifest_says(name: str, tmp_path: Path) -> None:
    entry = CASSETTES[name]
    path = unpacked(name, tmp_path)
    facts = g.cassette_facts(path)
    assert facts == {k: entry[k] for k in facts}
    with Cassette(path, readonly=True) as cassette:
        assert cassette.key_version == int(entry["key_version"] or 1) == 1
        assert len(cassette) == entry["rows"]
        listed = "\n".join(cassette.hashes()).encode()
        assert hashlib.sha256(listed).hexdigest() == entry["keys_sha256"]
        assert [[m, p] for m, p in cassette.sources()] == entry["sources"]
    assert entry["replays_into"], name


@pytest.mark.parametrize(
    ("name", "trace"),
    [(name, trace) for name, entry in sorted(CASSETTES.items()) for trace in entry["replays_into"]],
)
def test_a_golden_cassette_replays_into_its_golden_trace(
    name: str, trace: str, tmp_path: Path
) -> None:
    cassettes = tmp_path / "cassettes"
    cassette = unpacked(name, cassettes)
    golden_entry = MANIFEST["traces"][trace]
    golden = g.unpack(golden_entry["file"], tmp_path / "golden")
    made = tmp_path / "made.sqlite"
    make = KINDS[trace.split("/")[1]].make
    assert make is not None
    make(made, cassettes)
    assert g.sha256(cassette) == CASSETTES[name]["sha256"]  # a replay never writes
    assert g.content(made) == g.content(golden)
    stamped = g.bytes_as_written_by(made, golden_entry["written_by"])
    assert hashlib.sha256(stamped).hexdigest() == golden_entry["sha256"]


def test_recording_the_golden_run_again_gives_the_golden_cassette(tmp_path: Path) -> None:
    """Its rows and meta, as SQL: a change to what a cassette stores cannot pass unseen."""
    golden = unpacked(g.MOCK_CASSETTE, tmp_path / "golden")
    made = tmp_path / "made" / g.MOCK_CASSETTE
    made.parent.mkdir()
    g.record_mock_cassette(made, tmp_path / "recording.sqlite")
    assert dump(made) == dump(golden)


# -- key versions ---------------------------------------------------------------------------
@pytest.fixture
def version_2(monkeypatch: pytest.MonkeyPatch) -> None:
    """A later Vivarium: key version 2 written (the sampling fields hashed only when set)."""
    monkeypatch.setitem(keys.KEY_FIELDS, 2, ("model", "messages", "tools", "tool_choice"))
    monkeypatch.setattr(keys, "KEY_VERSION", 2)


@pytest.mark.usefixtures("version_2")
def test_a_later_key_version_replays_the_golden_cassette_with_its_own_key(
    tmp_path: Path,
) -> None:
    cassettes = tmp_path / "cassettes"
    unpacked(g.MOCK_CASSETTE, cassettes)
    golden = g.unpack(
        MANIFEST["traces"][f"schema{SCHEMA_VERSION}/channel_cognitive_cassette"]["file"], tmp_path
    )
    made = tmp_path / "made.sqlite"
    make = KINDS["channel_cognitive_cassette"].make
    assert make is not None
    make(made, cassettes)  # with version-2 keys it would miss every row: a CacheMissError
    assert g.content(made) == g.content(golden)


@pytest.mark.usefixtures("version_2")
def test_a_new_cassette_records_its_key_version_and_is_keyed_by_it(tmp_path: Path) -> None:
    path = tmp_path / "v2.cassette"
    request = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}
    recorder = CachingGateway(MockLLMGateway(seed=1), path, mode="record")
    said = recorder.chat(**request).content
    recorder.close()
    asked = LLMRequest(**request)
    with Cassette(path, readonly=True) as cassette:
        assert cassette.key_version == 2
        assert cassette.hashes() == [asked.request_hash(2)] != [asked.request_hash(1)]
    replay = CachingGateway(None, path, mode="replay")
    assert replay.chat(**request).content == said
    with pytest.raises(CacheMissError):
        replay.chat(model="mock", messages=[{"role": "user", "content": "other"}])
    replay.close()


def test_a_cassette_of_an_unknown_key_version_is_refused_in_one_line(tmp_path: Path) -> None:
    path = unpacked(g.MOCK_CASSETTE, tmp_path)
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE meta SET value = '9' WHERE key = 'key_version'")
    con.close()
    before = path.read_bytes()
    for readonly in (True, False):
        with pytest.raises(CassetteError) as info:
            Cassette(path, readonly=readonly)
        line = str(info.value)
        assert "\n" not in line and "key version 9" in line and "upgrade" in line
    assert path.read_bytes() == before


def test_a_cassette_from_before_key_versions_is_keyed_by_version_1(tmp_path: Path) -> None:
    """The schema-3 golden cassette says no key version; a run adding to it keeps version 1."""
    path = unpacked(g.SMOLLM2_CASSETTE, tmp_path)
    assert CASSETTES[g.SMOLLM2_CASSETTE]["key_version"] is None
    copy = tmp_path / "written.cassette"
    shutil.copyfile(path, copy)
    with Cassette(copy, provider="litellm") as cassette:
        assert cassette.key_version == 1
        request = LLMRequest(model="openai/smollm2", messages=[{"role": "user", "content": "x"}])
        cassette.put(request, MockLLMGateway().reply(request), [])
        assert request.request_hash(1) in cassette.hashes()
