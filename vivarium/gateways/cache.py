"""Record/replay: a cassette of LLM replies keyed by request hash, so runs replay offline.

A ``Cassette`` is one SQLite file (WAL, 30 s busy timeout) that several processes may write at
once: each write is one short ``BEGIN IMMEDIATE`` transaction. Each row keeps the request, the
normalized response (without ``raw``, so cassettes stay small and hold no provider payloads) and
the call records the original call produced (failed attempts and the final one), so a replay
writes the same ``llm_calls`` rows as the recording did, flagged as cache hits.

``CachingGateway`` returns replies as read back from their stored JSON in every mode, so an agent
sees byte-identical replies whether they were just recorded or replayed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Literal

from vivarium.errors import ConfigError
from vivarium.gateways.base import (
    CallRecord,
    GatewayBase,
    LLMCallError,
    LLMGateway,
    LLMRequest,
    LLMResponse,
    collect_calls,
    current_attempt,
    record_call,
)
from vivarium.gateways.retry import acomplete_via, complete_via
from vivarium.seeding import canonical_json

CASSETTE_FORMAT = "vivarium-cassette"
CASSETTE_VERSION = 1
CacheMode = Literal["record", "replay", "auto"]
MODES = ("record", "replay", "auto")

_DDL = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS replies (
    request_hash TEXT PRIMARY KEY,
    model TEXT,
    request_json TEXT,
    response_json TEXT,
    attempts_json TEXT
);
INSERT OR IGNORE INTO meta VALUES ('format', '{CASSETTE_FORMAT}');
INSERT OR IGNORE INTO meta VALUES ('schema_version', '{CASSETTE_VERSION}');
"""


class CassetteError(LLMCallError):
    """A cassette file cannot be opened, is not a cassette, or cannot be written."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="cassette", retryable=False)


class CacheMissError(LLMCallError):
    """Replay found no recorded reply for a request. The engine adds the agent and step."""

    fatal = True

    def __init__(self, request_hash: str, model: str, cassette: str | os.PathLike[str]) -> None:
        super().__init__(
            f"no recorded reply for request {request_hash} (model {model}) in cassette "
            f"{cassette}; record it first (cache mode 'record') or use cache mode 'auto'",
            kind="cache_miss",
            retryable=False,
        )
        self.request_hash = request_hash
        self.model = model


@dataclasses.dataclass(frozen=True, slots=True)
class CachedReply:
    """One cassette row: the stored response JSON and the call records that produced it."""

    response_json: str
    attempts: list[dict[str, Any]]

    def response(self, *, cache_hit: bool) -> LLMResponse:
        response = LLMResponse.model_validate_json(self.response_json)
        response.cache_hit = cache_hit
        return response

    def records(self, *, cache_hit: bool) -> list[CallRecord]:
        return [CallRecord(**{**a, "cache_hit": cache_hit}) for a in self.attempts]


def response_json(response: LLMResponse) -> str:
    """The canonical JSON a cassette stores: no ``raw``, ``cache_hit`` false."""
    data = response.model_dump(mode="json", exclude={"raw"})
    data["cache_hit"] = False
    return canonical_json(data)


class Cassette:
    """An SQLite file of recorded replies, safe for several processes and threads at once."""

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly  # replay never writes, so a committed cassette stays unchanged
        self._lock = threading.Lock()
        self._con: sqlite3.Connection | None = None
        self._pid = 0
        self._connection()  # open now, so a wrong file is reported at once

    def __repr__(self) -> str:
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
            raise CassetteError(f"no cassette at {p}; record one first (cache mode 'record')")
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
            if tables and int(meta.get("schema_version") or 0) > CASSETTE_VERSION:
                raise CassetteError(
                    f"{p} uses cassette schema {meta['schema_version']}, newer than this "
                    f"Vivarium reads ({CASSETTE_VERSION}); upgrade vivarium-lab"
                )
            if not tables:
                for statement in _DDL.strip().split(";"):
                    if statement.strip():
                        con.execute(statement)
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise

    # -- rows --------------------------------------------------------------------------------
    def get(self, request_hash: str) -> CachedReply | None:
        with self._lock:
            try:
                row = (
                    self._connection()
                    .execute(
                        "SELECT response_json, attempts_json FROM replies WHERE request_hash = ?",
                        (request_hash,),
                    )
                    .fetchone()
                )
            except sqlite3.Error as exc:
                raise CassetteError(f"cannot read cassette {self.path}: {exc}") from None
        if row is None:
            return None
        return CachedReply(row[0], json.loads(row[1] or "[]"))

    def put(
        self,
        request: LLMRequest,
        response: LLMResponse,
        records: list[CallRecord],
        *,
        replace: bool = True,
    ) -> CachedReply:
        """Store one reply (replacing, or keeping a row another writer stored first) and
        return the row as it now is in the file."""
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        row = (
            request.request_hash(),
            request.model,
            canonical_json(request.model_dump(mode="json")),
            response_json(response),
            canonical_json([dataclasses.asdict(r) for r in records]),
        )
        with self._lock:
            con = self._connection()
            try:
                con.execute("BEGIN IMMEDIATE")
                try:
                    con.execute(f"{verb} INTO replies VALUES (?, ?, ?, ?, ?)", row)
                    stored = con.execute(
                        "SELECT response_json, attempts_json FROM replies WHERE request_hash = ?",
                        (row[0],),
                    ).fetchone()
                    con.execute("COMMIT")
                except BaseException:
                    _rollback(con)
                    raise
            except sqlite3.Error as exc:
                raise CassetteError(f"cannot write cassette {self.path}: {exc}") from None
        return CachedReply(stored[0], json.loads(stored[1] or "[]"))

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT count(*) FROM replies").fetchone()[0])

    def __contains__(self, request_hash: object) -> bool:
        return isinstance(request_hash, str) and self.get(request_hash) is not None

    def hashes(self) -> list[str]:
        with self._lock:
            rows = self._connection().execute(
                "SELECT request_hash FROM replies ORDER BY request_hash"
            )
            return [r[0] for r in rows]

    def close(self) -> None:
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
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rollback(con: sqlite3.Connection) -> None:
    if con.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")


@dataclasses.dataclass(slots=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    writes: int = 0


class CachingGateway(GatewayBase):
    """Record replies to a cassette, replay them, or both (``auto``: replay, record misses)."""

    def __init__(
        self,
        inner: LLMGateway | GatewayBase | None,
        cassette: Cassette | str | os.PathLike[str],
        mode: CacheMode = "auto",
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"cache mode must be 'record', 'replay' or 'auto', not {mode!r}")
        if inner is None and mode != "replay":
            raise ConfigError(f"cache mode {mode!r} needs a gateway to record from")
        self.inner = inner
        self._owns_cassette = not isinstance(cassette, Cassette)
        self.cassette = (
            cassette
            if isinstance(cassette, Cassette)
            else Cassette(cassette, readonly=mode == "replay")
        )

        self.mode: CacheMode = mode
        self.stats = CacheStats()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CachingGateway({self.inner!r}, {self.cassette!r}, mode={self.mode!r})"

    def _count(self, field: str) -> None:
        with self._lock:
            setattr(self.stats, field, getattr(self.stats, field) + 1)

    def _lookup(self, request: LLMRequest) -> LLMResponse | None:
        """A stored reply, re-emitting its call records as cache hits; None on a miss."""
        if self.mode == "record":
            return None
        request_hash = request.request_hash()
        cached = self.cassette.get(request_hash)
        if cached is None:
            self._count("misses")
            if self.mode == "replay":
                raise CacheMissError(request_hash, request.model, self.cassette.path)
            return None
        self._count("hits")
        for record in cached.records(cache_hit=True):
            record_call(record)
        return cached.response(cache_hit=True)

    def _store(
        self, request: LLMRequest, response: LLMResponse, records: list[CallRecord]
    ) -> LLMResponse:
        if not records:  # a gateway that records nothing still made one call
            records = [CallRecord.from_response(response, current_attempt())]
            record_call(records[0])
        stored = self.cassette.put(request, response, records, replace=self.mode == "record")
        self._count("writes")
        return stored.response(cache_hit=False)

    def complete(self, request: LLMRequest) -> LLMResponse:
        hit = self._lookup(request)
        if hit is not None:
            return hit
        records: list[CallRecord] = []
        try:
            with collect_calls() as records:
                response = complete_via(self.inner, request)
        finally:
            for record in records:
                record_call(record)
        return self._store(request, response, records)

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        hit = self._lookup(request)
        if hit is not None:
            return hit
        records: list[CallRecord] = []
        try:
            with collect_calls() as records:
                response = await acomplete_via(self.inner, request)
        finally:
            for record in records:
                record_call(record)
        return self._store(request, response, records)

    def close(self) -> None:
        if self._owns_cassette:
            self.cassette.close()
