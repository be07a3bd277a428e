"""A prompt is stored as its lines, and read back as it was sent, whatever it holds.

The property of ``vivarium.trace.llm_texts`` (schema 4): for any request and reply, the call
read back from the file (``read_exchanges``) equals the one written, key for key and character
for character, whether a message was stored whole or as its lines; and a line two calls share
is stored once. Schema 3's encoding (a file a resume continues as it began) keeps every message
whole, with its digest beside it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from vivarium.trace.llm_texts import TextStore, encode_exchange, known_texts, read_exchanges
from vivarium.trace.schema import table

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
CONTENT = st.one_of(
    st.lists(TEXT, max_size=6).map("\n".join),  # lines, empty ones and "\r" included
    TEXT,
    st.none(),
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}), max_size=2),
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": CONTENT},
    optional={"name": TEXT, "tool_call_id": TEXT},
)
REQUEST = st.fixed_dictionaries(
    {"model": TEXT, "messages": st.lists(MESSAGE, max_size=4)},
    optional={"tools": st.lists(st.fixed_dictionaries({"name": TEXT}), max_size=2)},
)


def write_calls(
    path: Path, calls: list[tuple[dict[str, Any], dict[str, Any]]], version: int
) -> None:
    """A file with the two tables, and ``calls`` written as a run of schema ``version`` would."""
    store = TextStore(version=version)
    con = sqlite3.connect(path)
    with con:
        con.execute(table("llm_calls").ddl(version))
        con.execute(table("llm_texts").ddl(version))
        for i, (request, reply) in enumerate(calls, start=1):
            messages, tools, params, reply_id = encode_exchange(request, reply, store)
            con.execute(
                "INSERT INTO llm_calls (id, step, agent_idx, attempt, messages, tools, params, "
                "reply) VALUES (?, 0, 0, 1, ?, ?, ?, ?)",
                (i, messages, tools, params, reply_id),
            )
        con.executemany(store.insert_sql, store.take())
    con.close()


@settings(max_examples=150, deadline=None)
@given(calls=st.lists(st.tuples(REQUEST, st.fixed_dictionaries({"content": TEXT})), max_size=4))
def test_every_call_reads_back_as_written(calls: list[tuple[dict, dict]]) -> None:
    import tempfile

    for version in (3, 4):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.sqlite"
            write_calls(path, calls, version)
            back = read_exchanges(path)
        assert [back[i + 1] for i in range(len(calls))] == [
            {"request": request, "reply": reply} for request, reply in calls
        ], version


def test_a_line_two_prompts_share_is_stored_once(tmp_path: Path) -> None:
    shared = "Recent messages (oldest first):\n- agent_001: hello\n- agent_002: hi"
    calls = [
        (
            {"messages": [{"role": "user", "content": f"You are {who}.\n{shared}"}]},
            {"content": "ok"},
        )
        for who in ("agent_001", "agent_002")
    ]
    path = tmp_path / "t.sqlite"
    write_calls(path, calls, version=4)
    con = sqlite3.connect(path)
    bodies = [json.loads(b) for (b,) in con.execute("SELECT body FROM llm_texts")]
    entries = [json.loads(m) for (m,) in con.execute("SELECT messages FROM llm_calls ORDER BY id")]
    con.close()
    # {"role": "user"}, the two names, the three shared lines, the one reply.
    assert sorted(map(json.dumps, bodies)) == sorted(
        map(
            json.dumps,
            [{"role": "user"}, "You are agent_001.", "You are agent_002.", *shared.split("\n")]
            + [{"content": "ok"}],
        )
    )
    assert [len(e[0]) for e in entries] == [5, 5]  # [fields, name, three shared lines]
    assert entries[0][0][2:] == entries[1][0][2:]  # the shared lines: the same ids


def test_schema_3_keeps_messages_whole_with_their_digests(tmp_path: Path) -> None:
    request = {"messages": [{"role": "user", "content": "a\nb"}]}
    path = tmp_path / "t.sqlite"
    write_calls(path, [(request, {"content": "ok"})], version=3)
    con = sqlite3.connect(path)
    rows = con.execute("SELECT id, digest, body FROM llm_texts ORDER BY id").fetchall()
    (messages,) = con.execute("SELECT messages FROM llm_calls").fetchone()
    known = known_texts(con)
    con.close()
    assert json.loads(rows[0][2]) == request["messages"][0] and json.loads(messages) == [rows[0][0]]
    assert all(digest == hashlib.sha256(body.encode()).hexdigest() for _, digest, body in rows)
    assert sorted(known) == sorted((d, i) for i, d, _ in rows)


def test_a_resume_knows_the_texts_of_a_schema_4_file_by_their_hash(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    write_calls(path, [({"messages": [{"role": "user", "content": "a\nb"}]}, {"content": "ok"})], 4)
    con = sqlite3.connect(path)
    rows = con.execute("SELECT id, body FROM llm_texts").fetchall()
    known = dict(known_texts(con))
    con.close()
    assert known == {hashlib.sha256(body.encode()).hexdigest(): i for i, body in rows}
    store = TextStore(known.items(), version=4)  # a resumed writer refers to them, not to copies
    assert [store.ref(body) for _, body in rows] == [i for i, _ in rows] and store.take() == []
