"""The cache layer of a gateway stack: a cassette of LLM replies, so runs replay offline.

The cache sits on top of the stack (cache -> retry -> rate limit -> provider): a replayed reply
costs no attempt and no place in the rate limit, and a call stored after its retries carries
the records of every attempt.

A ``Cassette`` is one SQLite file (WAL, 30 s busy timeout) that several processes may write at
once: each write is one short ``BEGIN IMMEDIATE`` transaction. Each row keeps the request, the
normalized response (without ``raw``, so cassettes stay small and hold no provider payloads) and
the call records the original call produced (failed attempts and the final one), so a replay
writes the same ``llm_calls`` rows as the recording did, flagged as cache hits. Those records
carry each attempt's text (the body sent, the reply or error body received) in the one shape the
trace stores too (``exchange``), so a replayed call's prompt and reply reach the trace as
recorded: ``request_json`` is the body sent (kept once per row; attempts that sent it leave it
out), each attempt keeps its ``reply``. Rows written before records had text replay without it.

A call that failed after its retries is stored too (its error and every attempt), and a replay
raises the same error: a run recorded against a flaky server replays to the identical trace,
fallbacks included. In ``auto`` mode a stored infrastructure failure is tried again when the run
stops on such failures (``on_llm_error="stop"``, the default): that run stopped there, so the
resumed run must reach the server; the new reply then replaces the failure.

``CachingGateway`` returns replies as read back from their stored JSON in every mode, so an agent
sees byte-identical replies whether they were just recorded or replayed.

Each row records where its reply came from (``provenance``): the model asked for and the
provider that answered (``vivarium-mock`` for the mock). A cassette keeps one provider's replies:
a run whose replies come from another is refused in one line before it writes anything (a mock
run pointed at a real model's cassette would otherwise store mock replies that a later replay
serves as the model's). A replay serves only rows of the provider and model the run names.
Rows written before provenance was recorded are attributed by their ``model`` column; the file
is upgraded (a ``provider`` column, schema 4) only when a run writes to it.

The compatibility promise: a cassette written by any version replays, byte for byte, under
every later version. Two numbers in its ``meta`` say how to read it:

- ``schema_version``: what a reader must understand (1 replies, 2 stored failures, 3 the calls'
  texts, 4 provenance). A later Vivarium reads every earlier schema; an older one refuses a
  newer file in one line instead of misreading it.
- ``key_version``: the request key its rows are keyed by (``request_key``; a cassette that does
  not say is of version 1, the only one so far). Rows are looked up and written with the file's
  own key version, so a new form of the key never orphans a recorded cassette, and a field
  added to ``LLMRequest`` with a default changes no key at all.

A change to either ships with the reader of the old: ``tests/golden`` holds a cassette of each
kind with the trace it replays into (``tests/gateways/test_cache_golden.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Literal

from vivarium.errors import ConfigError, RunStoppingError
from vivarium.gateways.base import (
    Call,
    CallRecord,
    GatewayBase,
    LLMCallError,
    LLMGateway,
    LLMRequest,
    LLMResponse,
    cancel_deadline,
    cancel_reason,
    collect_calls,
    current_attempt,
    current_on_llm_error,
    next_occurrence,
    record_call,
)
from vivarium.gateways.effects import Flow, arun, run
from vivarium.gateways.exchange import error_reply, request_body
from vivarium.gateways.provenance import (
    attributed,
    compatible,
    describe,
    describe_sources,
    provider_of,
)
from vivarium.gateways.request_key import KEY_FIELDS, written_version
from vivarium.seeding import canonical_json, digest
from vivarium.settings import DEFAULT_CACHE_MODE

CASSETTE_FORMAT = "vivarium-cassette"
# The newest schema this Vivarium reads. A file says which it needs: 1 (replies only) until a
# failed call is stored, then 2, so that an older Vivarium refuses it in one line instead of
# misreading a failure as a reply; 3 once a row keeps its calls' text (``request_json`` is then
# the body sent, and the attempts carry ``request``/``reply``, which older readers cannot load);
# 4 once a row records its provider (older readers would serve a mock's reply as a model's).
CASSETTE_VERSION = 4
FAILURES_VERSION = 2
TEXTS_VERSION = 3
PROVENANCE_VERSION = 4
PROVIDER_META_KEY = "provider"  # the one provider whose replies the cassette keeps
# The request key version the rows are keyed by (``request_key``); a cassette without it: 1.
KEY_VERSION_META_KEY = "key_version"
_FAILURE_PREFIX = '{"failure":'  # a failure row's response_json (canonical JSON: keys sorted)
CacheMode = Literal["record", "replay", "auto"]
MODES = ("record", "replay", "auto")

_DDL = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS replies (
    request_hash TEXT PRIMARY KEY,
    model TEXT,
    request_json TEXT,
    response_json TEXT,
    attempts_json TEXT,
    provider TEXT
);
INSERT OR IGNORE INTO meta VALUES ('format', '{CASSETTE_FORMAT}');
INSERT OR IGNORE INTO meta VALUES ('schema_version', '1');
"""


class CassetteError(LLMCallError):
    """A cassette file cannot be opened, is not a cassette, or cannot be written."""

    def __init__(self, message: str) -> None:
        """Say what is wrong with the file, in one line."""
        super().__init__(message, kind="cassette", retryable=False)


class CacheMissError(LLMCallError, RunStoppingError):
    """Replay cannot answer a request as recorded: the run stops (the engine adds the step).

    Nothing is stored for it, or another provider's reply is, or the recording cancelled the
    call at its agent timeout and this run has no agent timeout to end it the same way.
    """

    def __init__(
        self,
        request_hash: str,
        model: str,
        cassette: str | os.PathLike[str],
        recorded_models: list[str] | None = None,
        *,
        provider: str | None = None,
        sources: list[tuple[str, str | None]] | None = None,
        foreign: bool = False,
        stored: str | None = None,
        cut_short: str | None = None,
    ) -> None:
        """Name the request and the cassette, and what it holds when that is not this run's.

        Args:
            request_hash: The key that was missing.
            model: The request's model.
            cassette: The cassette's path.
            recorded_models: The models the cassette holds replies of (None: unknown).
            provider: The provider this run's replies come from (None: any).
            sources: The (model, provider) pairs the cassette holds (None: unknown).
            foreign: A row is stored under the key, from a provider this run may not replay
                (another provider's reply to the same request).
            stored: That row's provider (None: a real model, provider not recorded).
            cut_short: The recording cancelled the call at its agent timeout, for this reason
                (``cancelled: agent timeout after 2 s``), and this run has no agent timeout.
        """
        self.request_hash = request_hash
        self.model = model
        if cut_short is not None:
            super().__init__(
                f"the recorded call was {cut_short}, and this run has no agent timeout: replay "
                f"it with the recorded agent_timeout",
                kind="cache_miss",
            )
            return
        if sources is not None:
            recorded_models = sorted({m for m, _ in sources})
        # Another provider's replies of this model: the one stored under the key, else any the
        # cassette holds when it holds none of this run's provider.
        others = [p for m, p in sources or [] if m == model]
        if not foreign and others and provider is not None:
            foreign = not any(compatible(p, provider) for p in others)
            stored = others[0]
        fix = "record it first (cache mode 'record') or use cache mode 'auto'"
        hint = ""
        if foreign:
            hint = (
                f" (it holds replies of {model} from {describe(stored)}, and this run's "
                f"replies come from {describe(provider)})"
            )
            fix = (
                "replay with the LLM settings it was recorded with (mock or not), or record "
                "this run into another cassette file"
            )
        elif recorded_models is not None and model not in recorded_models:
            # The usual mistake: a cassette recorded with another model (or none at all).
            shown = (
                describe_sources(sources)
                if sources is not None
                else ", ".join(recorded_models[:3]) or "none"
            )
            hint = f" (it holds no reply of {model}; models recorded: {shown})"
        super().__init__(
            f"no recorded reply for request {request_hash} (model {model}) in cassette "
            f"{cassette}{hint}; {fix}",
            kind="cache_miss",
            retryable=False,
        )


class CassetteMixError(CassetteError, RunStoppingError):
    """A run would store one provider's replies in a cassette that keeps another's.

    Raised before the run writes anything (when the cassette is opened), or, when another
    process claimed an empty cassette first, at the first write: it stops the run either way,
    so no reply is ever stored beside another provider's.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        provider: str,
        sources: list[tuple[str, str | None]],
    ) -> None:
        """Say what the cassette at ``path`` holds and what this run's replies come from."""
        super().__init__(
            f"cassette {path} holds replies of {describe_sources(sources)}, and this run's "
            f"replies come from {describe(provider)}; a cassette keeps one provider's replies, "
            "so give this run another cassette file (llm cache=...)"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class CachedReply:
    """One cassette row: the stored response JSON (or failure) and the records that produced it."""

    response_json: str
    attempts: list[dict[str, Any]]
    request_json: str | None = None
    model: str | None = None
    provider: str | None = None  # as ``provenance.attributed`` gives it (None: real, unrecorded)

    @property
    def failed(self) -> bool:
        """Whether the stored call failed after its retries (the row holds its error)."""
        return self.response_json.startswith(_FAILURE_PREFIX)

    def error(self) -> LLMCallError:
        """The stored failure as the same error (class name, message, kind).

        An attempt the agent timeout cancelled comes back as an ``LLMCallError`` of kind
        ``agent_timeout`` (stored as ``AGENT_TIMEOUT_TYPE``).
        """
        data = json.loads(self.response_json)["failure"]
        return _error_class(data["type"])(
            data["message"],
            kind=data["kind"],
            retryable=data["retryable"],
            status_code=data["status_code"],
            retry_after=data["retry_after"],
        )

    def response(self, *, cache_hit: bool) -> LLMResponse:
        """The stored reply, flagged ``cache_hit`` as asked."""
        response = LLMResponse.model_validate_json(self.response_json)
        response.cache_hit = cache_hit
        return response

    def records(self, *, cache_hit: bool) -> list[CallRecord]:
        """The stored call records (every attempt), flagged ``cache_hit`` as asked.

        An attempt stored without its ``request`` but with a ``reply`` sent the row's request
        (``attempts_json`` keeps it once, see ``Cassette.put``); one stored with neither is
        from before records had text, and comes back without it.
        """
        sent: Any = None
        records = []
        for a in self.attempts:
            fields = {**a, "cache_hit": cache_hit}
            if "reply" in a and "request" not in a:
                if sent is None and self.request_json is not None:
                    sent = json.loads(self.request_json)
                fields["request"] = sent
            records.append(CallRecord(**fields))
        return records


def _attempts_and_request(request: LLMRequest, records: list[CallRecord]) -> tuple[str, str, bool]:
    """(``attempts_json``, ``request_json``, whether they hold text) of one cassette row.

    ``request_json`` is the body the last attempt sent, in the trace's shape (``exchange``);
    attempts that sent that same body leave theirs out, so it is stored once per row. Records
    without text (a third-party gateway's) keep the request as asked, as before.
    """
    # Where a reply came from is the trace's to say (``source``), not the cassette's.
    attempts = [{k: v for k, v in dataclasses.asdict(r).items() if k != "source"} for r in records]
    sent = next((a["request"] for a in reversed(attempts) if a["request"] is not None), None)
    if sent is None:
        asked = canonical_json(request.model_dump(mode="json"))
        if any(a["reply"] is not None for a in attempts):
            return canonical_json(attempts), asked, True
        plain = [{k: v for k, v in a.items() if k not in ("request", "reply")} for a in attempts]
        return canonical_json(plain), asked, False
    for a in attempts:
        if a["request"] == sent:
            del a["request"]
    return canonical_json(attempts), canonical_json(sent), True


def response_json(response: LLMResponse) -> str:
    """The canonical JSON a cassette stores: no ``raw``, ``cache_hit`` false."""
    data = response.model_dump(mode="json", exclude={"raw"})
    data["cache_hit"] = False
    return canonical_json(data)


def failure_json(error: LLMCallError) -> str:
    """The canonical JSON of a failed call: everything needed to raise it again."""
    return canonical_json(
        {
            "failure": {
                "type": AGENT_TIMEOUT_TYPE if error.kind == AGENT_TIMEOUT else type(error).__name__,
                "message": str(error),
                "kind": error.kind,
                "retryable": error.retryable,
                "status_code": error.status_code,
                "retry_after": error.retry_after,
            }
        }
    )


class ReplayedAgentTimeout(RunStoppingError, TimeoutError):
    """A recorded agent timeout, replayed: the decision attempt ends as it did when recorded.

    A ``TimeoutError`` (the engine's timeout path) and a ``RunStoppingError``, so that policies,
    which turn other errors into fallbacks, let it through.
    """


AGENT_TIMEOUT = "agent_timeout"
# The type a cassette stores for a call the agent timeout cancelled (the name of the class that
# once stood for it): it never reaches a policy, so no class of its own is needed for it.
AGENT_TIMEOUT_TYPE = "AgentTimeoutCall"


@functools.cache
def _error_class(name: str) -> type[LLMCallError]:
    """``LLMCallError``, or a subclass of it with the stored class name.

    The policy's fallback reason names the class, so a replayed failure must carry the same name.
    """
    if name in (LLMCallError.__name__, AGENT_TIMEOUT_TYPE):
        return LLMCallError
    return type(name, (LLMCallError,), {"__module__": __name__})


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def storable(error: BaseException) -> bool:
    """Whether a failed call belongs in the cassette.

    It does when it is an ``LLMCallError`` the policy records: never a ``RunStoppingError``
    such as a replay miss, nor a cassette that cannot be written.
    """
    return (
        isinstance(error, LLMCallError)
        and not isinstance(error, RunStoppingError)
        and not isinstance(error, CassetteError)
        and error.kind != "cassette"
    )


class Cassette:
    """An SQLite file of recorded replies, safe for several processes and threads at once."""

    __identity__ = "type"  # a connection and the process id: named by type in run identities

    def __init__(
        self, path: str | os.PathLike[str], *, readonly: bool = False, provider: str | None = None
    ) -> None:
        """Open (or create, unless ``readonly``) the cassette at ``path``.

        Args:
            path: The cassette file.
            readonly: Never write (a replay): a committed cassette stays unchanged.
            provider: The provider whose replies this handle writes (``provenance``); each row
                it stores records it. A file that keeps another provider's replies is refused
                before anything in it changes. None: rows are attributed by their model.

        Raises:
            CassetteError: The file cannot be opened, is not a cassette, or needs a newer
                Vivarium.
            CassetteMixError: It keeps the replies of another provider than ``provider``.
        """
        self.path = Path(path)
        self.readonly = readonly  # replay never writes, so a committed cassette stays unchanged
        self.provider = provider
        self._claimed = False  # the file's meta names ``provider`` (it never changes once set)
        self.key_version = written_version()  # as the file's meta says, once it is open
        self._lock = threading.Lock()
        self._con: sqlite3.Connection | None = None
        self._pid = 0
        self._connection()  # open now, so a wrong file is reported at once

    def __repr__(self) -> str:
        """The cassette's path."""
        return f"Cassette({str(self.path)!r})"

    # -- opening -----------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._con is not None and self._pid == os.getpid():
            return self._con
        self._con = None  # a connection inherited through fork is never used
        self._con = self._open()
        self._pid = os.getpid()
        return self._con

    def _open(self) -> sqlite3.Connection:
        p = self.path
        if p.is_dir():
            raise CassetteError(f"cassette {p} is a directory; give a file path")
        if p.exists() and p.stat().st_size > 0:
            with open(p, "rb") as fh:
                if fh.read(16) != b"SQLite format 3\x00":
                    raise CassetteError(f"{p} is not a Vivarium cassette (not an SQLite file)")
        if self.readonly:
            return self._open_readonly(p)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(p, timeout=30, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise CassetteError(f"cannot open cassette {p}: {exc}") from None
        try:
            con.execute("PRAGMA busy_timeout=30000")
            self._check_or_create(con)  # first: another program's SQLite file is left unchanged
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            con.close()
            raise CassetteError(f"cannot open cassette {p}: {exc}") from None
        except CassetteError:
            con.close()
            raise
        return con

    def _open_readonly(self, p: Path) -> sqlite3.Connection:
        if not p.is_file():
            # Most often a relative path read from another working folder (a notebook's kernel
            # started elsewhere), not a cassette never recorded: say where it was looked for.
            where = p if p.is_absolute() else f"{p} (read from the working folder {Path.cwd()})"
            raise CassetteError(
                f"no cassette at {where}; check the path (cache mode 'record' makes a new one)"
            )
        try:
            con = sqlite3.connect(
                f"file:{p.resolve()}?mode=ro", uri=True, timeout=30, check_same_thread=False
            )
            con.execute("PRAGMA busy_timeout=30000")
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.Error as exc:
            raise CassetteError(f"{p} is not a Vivarium cassette ({exc})") from None
        if meta.get("format") != CASSETTE_FORMAT:
            con.close()
            raise CassetteError(f"{p} is not a Vivarium cassette")
        if _too_new(meta):
            con.close()
            raise CassetteError(_too_new_message(p, meta))
        try:
            self.key_version = _key_version(p, meta)
        except CassetteError:
            con.close()
            raise
        return con

    def _check_or_create(self, con: sqlite3.Connection) -> None:
        p = self.path
        con.execute("BEGIN IMMEDIATE")
        try:
            tables = {
                r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            meta: dict[str, str] = {}
            if "meta" in tables:
                meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            if tables and meta.get("format") != CASSETTE_FORMAT:
                what = meta.get("format") or "an SQLite file of another program"
                raise CassetteError(f"{p} is not a Vivarium cassette (it is {what})")
            if tables and _too_new(meta):
                raise CassetteError(_too_new_message(p, meta))
            if not tables:
                for statement in _DDL.strip().split(";"):
                    if statement.strip():
                        con.execute(statement)
                written = (KEY_VERSION_META_KEY, str(written_version()))
                con.execute("INSERT INTO meta VALUES (?, ?)", written)
                meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            elif self.provider is not None and self._conflicts(con, self.provider):
                # Said before anything changes: the file is left exactly as it was.
                raise CassetteMixError(p, self.provider, _sources(con))
            self.key_version = _key_version(p, meta)
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise

    @staticmethod
    def _conflicts(con: sqlite3.Connection, provider: str) -> bool:
        """Whether the file keeps replies of another provider than ``provider``."""
        held = con.execute("SELECT value FROM meta WHERE key = ?", (PROVIDER_META_KEY,)).fetchone()
        if held is not None:
            return held[0] != provider
        return any(not compatible(p, provider) for _, p in _sources(con))

    def _claim(self, con: sqlite3.Connection, provider: str) -> None:
        """Make the file keep ``provider``'s replies, inside the writing transaction.

        The first writer names the provider in ``meta``; a writer of another (a second process
        that opened the same empty cassette) is refused here, before its row is stored.
        """
        if self._conflicts(con, provider):
            raise CassetteMixError(self.path, provider, _sources(con))
        con.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (PROVIDER_META_KEY, provider))

    def write_for(self, provider: str) -> None:
        """Make this open handle write ``provider``'s replies (a cassette shared by layers).

        Raises:
            CassetteMixError: The file, or this handle, keeps another provider's replies.
        """
        with self._lock:
            con = self._connection()
            try:
                conflict = self._conflicts(con, provider)
                if conflict or self.provider not in (None, provider):
                    raise CassetteMixError(self.path, provider, _sources(con))
            except sqlite3.Error as exc:
                raise CassetteError(f"cannot read cassette {self.path}: {exc}") from None
            self.provider = provider

    # -- rows --------------------------------------------------------------------------------
    def get(self, request_hash: str) -> CachedReply | None:
        """The row stored under ``request_hash`` (None when there is none).

        Raises:
            CassetteError: The file cannot be read.
        """
        with self._lock:
            try:
                return _row(self._connection(), request_hash)
            except sqlite3.Error as exc:
                raise CassetteError(f"cannot read cassette {self.path}: {exc}") from None

    def put(
        self,
        request: LLMRequest,
        outcome: LLMResponse | LLMCallError,
        records: list[CallRecord],
        *,
        replace: bool = True,
        key: str | None = None,
    ) -> CachedReply:
        """Store one reply or failed call and return the row as it now is in the file.

        ``replace=False`` keeps a reply another writer stored first (several processes
        recording the same request agree on one reply); a stored failure is always replaced.
        ``key`` (default: the request hash) tells apart repeats of one request in a decision.
        The row records the cassette's ``provider``; a file from before provenance gets its
        ``provider`` column now (its rows stay as they were).

        Raises:
            CassetteError: The file cannot be written.
            CassetteMixError: Another process made the file keep another provider's replies.
        """
        failed = isinstance(outcome, LLMCallError)
        attempts, sent, texts = _attempts_and_request(request, records)
        row = (
            key or request.request_hash(self.key_version),
            request.model,
            sent,
            failure_json(outcome) if failed else response_json(outcome),  # type: ignore[arg-type]
            attempts,
            1 if replace else 0,
            len(_FAILURE_PREFIX),
            _FAILURE_PREFIX,
            self.provider,
        )
        with self._lock:
            con = self._connection()
            try:
                con.execute("BEGIN IMMEDIATE")
                try:
                    claiming = self.provider is not None and not self._claimed
                    if claiming:
                        self._claim(con, self.provider)  # type: ignore[arg-type]
                    if "provider" not in _columns(con):  # a file from before provenance
                        con.execute("ALTER TABLE replies ADD COLUMN provider TEXT")
                    con.execute(_UPSERT, row)
                    # Older readers must refuse the file, not misread a failure, the texts, or
                    # a mock's reply as a model's (they know no provenance).
                    needs = max(
                        FAILURES_VERSION if failed else 1,
                        TEXTS_VERSION if texts else 1,
                        PROVENANCE_VERSION,
                    )
                    con.execute(
                        "UPDATE meta SET value = ? WHERE key = 'schema_version' "
                        "AND CAST(value AS INTEGER) < ?",
                        (str(needs), needs),
                    )
                    stored = _row(con, row[0])
                    con.execute("COMMIT")
                except BaseException:
                    _rollback(con)
                    raise
            except sqlite3.Error as exc:
                raise CassetteError(f"cannot write cassette {self.path}: {exc}") from None
            if claiming:
                self._claimed = True  # committed: the meta names it from now on
        assert stored is not None  # written in the same transaction
        return stored

    def __len__(self) -> int:
        """The number of stored calls."""
        with self._lock:
            return int(self._connection().execute("SELECT count(*) FROM replies").fetchone()[0])

    def __contains__(self, request_hash: object) -> bool:
        """Whether a call is stored under ``request_hash``."""
        return isinstance(request_hash, str) and self.get(request_hash) is not None

    def models(self) -> list[str]:
        """The models the cassette holds replies of, sorted."""
        with self._lock:
            rows = self._connection().execute("SELECT DISTINCT model FROM replies ORDER BY model")
            return [r[0] for r in rows]

    def sources(self) -> list[tuple[str, str | None]]:
        """Where the cassette's replies came from: (model, provider) pairs, sorted.

        The provider as ``provenance.attributed`` gives it: rows from before provenance are
        attributed by their model (None: a real model whose provider was not recorded).
        """
        with self._lock:
            return _sources(self._connection())

    def hashes(self) -> list[str]:
        """The keys of every stored call, sorted."""
        with self._lock:
            rows = self._connection().execute(
                "SELECT request_hash FROM replies ORDER BY request_hash"
            )
            return [r[0] for r in rows]

    def close(self) -> None:
        """Close this process's connection (leaving one self-contained file when it can)."""
        with self._lock:
            if self._con is not None and self._pid == os.getpid():
                # Leave one self-contained file when no one else has it open (a cassette is
                # committed next to notebooks); while others write, WAL mode simply stays.
                if not self.readonly:
                    with contextlib.suppress(sqlite3.Error):
                        self._con.execute("PRAGMA journal_mode=DELETE")

                self._con.close()
            self._con = None

    def __enter__(self) -> Cassette:
        """The open cassette."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close it."""
        self.close()


_UPSERT = """
INSERT INTO replies (request_hash, model, request_json, response_json, attempts_json, provider)
VALUES (?1, ?2, ?3, ?4, ?5, ?9)
ON CONFLICT (request_hash) DO UPDATE SET
    model = excluded.model,
    request_json = excluded.request_json,
    response_json = excluded.response_json,
    attempts_json = excluded.attempts_json,
    provider = excluded.provider
WHERE ?6 OR substr(replies.response_json, 1, ?7) = ?8
"""


def _columns(con: sqlite3.Connection) -> set[str]:
    return {r[1] for r in con.execute("PRAGMA table_info(replies)")}


def _row(con: sqlite3.Connection, key: str) -> CachedReply | None:
    """The row under ``key``, its provider attributed (a file from before has no column)."""
    cursor = con.execute("SELECT * FROM replies WHERE request_hash = ?", (key,))
    values = cursor.fetchone()
    if values is None:
        return None
    row = dict(zip((d[0] for d in cursor.description), values, strict=True))
    return CachedReply(
        row["response_json"],
        json.loads(row["attempts_json"] or "[]"),
        row["request_json"],
        model=row["model"],
        provider=attributed(row.get("provider"), row["model"]),
    )


def _sources(con: sqlite3.Connection) -> list[tuple[str, str | None]]:
    """The (model, attributed provider) pairs of a cassette's rows, sorted."""
    provider = "provider" if "provider" in _columns(con) else "NULL"
    rows = con.execute(f"SELECT DISTINCT model, {provider} FROM replies")  # noqa: S608 - a name
    pairs = {(m, attributed(p, m)) for m, p in rows}
    return sorted(pairs, key=lambda mp: (mp[0] or "", mp[1] or ""))


def _key_version(path: Path, meta: dict[str, str]) -> int:
    """The request key version of a cassette's rows (1 for a cassette that does not say).

    Raises:
        CassetteError: a version this Vivarium does not know (a newer one wrote the file).
    """
    text = meta.get(KEY_VERSION_META_KEY, "1")
    version = int(text) if text.isdigit() else 0
    if version not in KEY_FIELDS:
        raise CassetteError(
            f"{path} is keyed by request key version {text}, which this Vivarium does not know "
            f"(it knows {', '.join(map(str, sorted(KEY_FIELDS)))}); upgrade vivarium-lab"
        )
    return version


def _too_new(meta: dict[str, str]) -> bool:
    try:
        return int(meta.get("schema_version") or 0) > CASSETTE_VERSION
    except ValueError:
        return True


def _too_new_message(path: Path, meta: dict[str, str]) -> str:
    return (
        f"{path} uses cassette schema {meta.get('schema_version')}, newer than this Vivarium "
        f"reads ({CASSETTE_VERSION}); upgrade vivarium-lab"
    )


def _rollback(con: sqlite3.Connection) -> None:
    if con.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")


@dataclasses.dataclass(slots=True)
class CacheStats:
    """What a ``CachingGateway`` did: replies replayed, calls missed, rows written."""

    hits: int = 0
    misses: int = 0
    writes: int = 0


class CachingGateway(GatewayBase):
    """Record replies to a cassette, replay them, or both (``auto``: replay, record misses)."""

    def __init__(
        self,
        inner: LLMGateway | GatewayBase | None,
        cassette: Cassette | str | os.PathLike[str],
        mode: CacheMode = DEFAULT_CACHE_MODE,
        variant: str | None = None,
        provider: str | None = None,
    ) -> None:
        """Wrap ``inner`` (None only to replay) with ``cassette`` in ``mode``.

        Args:
            inner: The stack below (retry -> rate limit -> provider).
            cassette: A ``Cassette``, or the path of one: the layer then owns and closes it.
            mode: ``record`` (always call, store), ``replay`` (never call), ``auto`` (replay,
                record misses).
            variant: How the stack below sends a request differently from the request itself
                (``forced_tool_format=json_schema``), or None: replies to another way of sending
                are other rows, so switching the format never replays the old format's replies.
            provider: Where this run's replies come from (``provenance``: ``vivarium-mock``,
                ``litellm``); default: the provider at the bottom of ``inner``. Only rows of it
                are replayed, and it is recorded with each row written. None with no ``inner``
                (a bare replay): rows of any provider are replayed.

        Raises:
            ConfigError: An unknown mode, or no gateway to record from.
            CassetteError: The cassette cannot be used.
            CassetteMixError: A run that records (``record``, ``auto``) into a cassette that
                keeps another provider's replies: refused before it changes.
        """
        if mode not in MODES:
            raise ConfigError(f"cache mode must be 'record', 'replay' or 'auto', not {mode!r}")
        if inner is None and mode != "replay":
            raise ConfigError(f"cache mode {mode!r} needs a gateway to record from")
        self.inner = inner
        self.provider = provider if provider is not None else provider_of(inner)
        writes = mode != "replay"
        self._owns_cassette = not isinstance(cassette, Cassette)
        if isinstance(cassette, Cassette):
            self.cassette = cassette
            if writes and self.provider is not None:
                cassette.write_for(self.provider)
        else:
            self.cassette = Cassette(
                cassette, readonly=not writes, provider=self.provider if writes else None
            )

        self.mode: CacheMode = mode
        self.variant = variant
        self.stats = CacheStats()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        """The layer, its cassette and mode, and the stack below it."""
        return f"CachingGateway({self.inner!r}, {self.cassette!r}, mode={self.mode!r})"

    def _count(self, field: str) -> None:
        with self._lock:
            setattr(self.stats, field, getattr(self.stats, field) + 1)

    def _key(self, request: LLMRequest) -> str:
        """The row of this call: the request hash, or a hash of both for a repeat.

        A repeat is the n-th time a decision sends the same request (a retried decision, a
        repeated workflow step). A ``variant`` of sending is hashed in too (the default way
        keeps the plain request hash).
        """
        request_hash = request.request_hash(self.cassette.key_version)
        n = next_occurrence(request_hash)
        key = request_hash if n == 1 else digest(f"{request_hash}#{n}")
        return key if self.variant is None else digest(f"{key}|{self.variant}")

    def _sources(self) -> list[tuple[str, str | None]] | None:
        try:
            return self.cassette.sources()
        except sqlite3.Error:
            return None

    def _serves(self, cached: CachedReply, request: LLMRequest) -> bool:
        """Whether ``cached`` came from this run's provider and model (``provenance``)."""
        if cached.model is not None and cached.model != request.model:
            return False
        return self.provider is None or compatible(cached.provider, self.provider)

    def _lookup(self, request: LLMRequest, key: str) -> LLMResponse | None:
        """A stored reply, re-emitting its call records as cache hits; None on a miss.

        A stored failure is raised again (after its records), except in ``auto`` mode for an
        outage (an infrastructure failure, an agent timeout) in a run that stops on those:
        that run stopped there, so the call is made again.
        """
        if self.mode == "record":
            return None
        cached = self.cassette.get(key)
        foreign = cached is not None and not self._serves(cached, request)
        if foreign and self.mode == "auto":  # never served, and never stored over
            raise CassetteMixError(self.cassette.path, self.provider or "?", self._sources() or [])
        if cached is None or foreign:
            self._count("misses")
            if self.mode == "replay":
                raise CacheMissError(
                    request.request_hash(self.cassette.key_version),
                    request.model,
                    self.cassette.path,
                    provider=self.provider,
                    sources=self._sources(),
                    foreign=foreign,
                    stored=cached.provider if cached is not None else None,
                )
            return None
        error = cached.error() if cached.failed else None
        if (
            error is not None
            and self.mode == "auto"
            and (error.infrastructure or error.kind == AGENT_TIMEOUT)
            and current_on_llm_error() == "stop"
        ):
            self._count("misses")
            return None
        self._count("hits")
        for record in cached.records(cache_hit=True):
            record_call(record)
        if error is None:
            return cached.response(cache_hit=True)
        if error.kind != AGENT_TIMEOUT:
            raise error
        if cancel_deadline() is None:  # nothing here would cancel it as the recording did
            raise CacheMissError(
                request.request_hash(self.cassette.key_version),
                request.model,
                self.cassette.path,
                cut_short=str(error),
            )
        raise ReplayedAgentTimeout(str(error))

    def _store(
        self, request: LLMRequest, key: str, response: LLMResponse, records: list[CallRecord]
    ) -> LLMResponse:
        if not records:  # a gateway that records nothing still made one call
            records = [CallRecord.from_response(response, current_attempt(), request_body(request))]
            record_call(records[0])
        stored = self.cassette.put(
            request, response, records, replace=self.mode == "record", key=key
        )
        self._count("writes")
        return stored.response(cache_hit=False)

    @staticmethod
    def _pass_on(records: list[CallRecord]) -> None:
        for record in records:
            record_call(record)

    def _failed(
        self, request: LLMRequest, key: str, exc: BaseException, records: list[CallRecord]
    ) -> None:
        """Pass the attempts on, and keep a failed call so that a replay ends the same way.

        Kept: a call that failed after its retries, or one the agent timeout cancelled. A call
        cancelled for another reason (the run is stopping) is not kept.
        """
        self._pass_on(records)
        error: LLMCallError | None = None
        if isinstance(exc, LLMCallError) and storable(exc):
            error = exc
        elif isinstance(exc, asyncio.CancelledError) and (reason := cancel_reason()):
            error = LLMCallError(reason, kind=AGENT_TIMEOUT)
        if error is None:
            return
        if not records:  # a gateway that records nothing still made one failed attempt
            text = str(error) if error.kind == AGENT_TIMEOUT else _describe(error)
            records = [
                CallRecord(
                    attempt=current_attempt(),
                    model=request.model,
                    request_hash=request.request_hash(),
                    error=text,
                    request=request_body(request),
                    reply=error_reply(text),
                )
            ]
            record_call(records[0])
        self.cassette.put(request, error, records, replace=self.mode == "record", key=key)
        self._count("writes")

    def complete(self, request: LLMRequest) -> LLMResponse:
        """The stored reply for ``request``, or the layer below's, stored (per ``mode``).

        Raises:
            LLMCallError: A stored failure, replayed; or the failure of the layer below.
            CacheMissError: Replay mode, and nothing stored for ``request``.
        """
        return run(self._answer(request))

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        """``complete`` for the event loop."""
        return await arun(self._answer(request))

    def _answer(self, request: LLMRequest) -> Flow[LLMResponse]:
        """The stored outcome, or the layer below's call, stored with its attempts."""
        key = self._key(request)
        hit = self._lookup(request, key)
        if hit is not None:
            return hit
        records: list[CallRecord] = []
        try:
            with collect_calls() as records:
                response = yield Call(self.inner, request)
        except BaseException as exc:  # interrupted, cancelled: the attempts made still count
            self._failed(request, key, exc, records)
            raise
        self._pass_on(records)
        return self._store(request, key, response, records)

    def close(self) -> None:
        """Close the cassette if this layer opened it (the run's end)."""
        if self._owns_cassette:
            self.cassette.close()
