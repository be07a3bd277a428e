"""Several OpenAI-compatible servers behind the direct transport: least busy first, with failover.

A run that outgrows one server lists several (``api_base: [url, url, ...]``: vLLM replicas,
llama.cpp servers on several machines). ``ServerPool`` sends each attempt to the server with
the fewest calls in flight (ties go to the first listed, so a run against deterministic servers
sends the same calls to the same servers), and when that server fails the way a server fails
(``FAILOVER_KINDS``: refused or reset connections, timeouts, 5xx, 429, a reply that is not JSON,
a 404: a wrong path in one URL of the list) the attempt moves on to the next server. An attempt
cancelled in flight (an agent timeout) counts against its server as a timeout does: a hung
server is not sent one call of every step. A server that failed is cooled down for ``cooldown``
seconds, doubled with each failure in a row (a server that hangs costs one call its timeout
per cooldown, ever more rarely): tried only after every warm one, then, until it answers
again, as if it had one call more in flight than it has.

Only when every server has failed one attempt does the attempt fail, with the last server's
error, and the layers above decide as for one server (the retry layer retries; past the
retries an infrastructure failure stops the run). A failure another server made good is no
attempt of the agent's: it leaves no call record, so the trace of a run whose server died is
the trace of a run whose server never did. The server's address is in no call record (the
request text and its hash never name it); only a run stopped by 404s names the servers in its
one-line reason (``runs.error``, and a cassette's stored failure), so the wrong path can be
mended. ``answered`` and ``failed`` count, per server, what happened.
The first failure of each server (or finding it unreachable at the start) is said once, as a
``ServerWarning`` naming it and why: a list with a dead or wrong URL does not go unnoticed.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlsplit

from vivarium.errors import squash
from vivarium.gateways.base import cancel_reason
from vivarium.gateways.effects import Do, Flow, arun, run
from vivarium.gateways.openai_http import WireError, WireReply, apost, chat_url, post

# Failures that say the server (not the request) is the problem: another server may answer.
# Refused credentials, unknown models and rejected requests would fail on every server alike.
# A 404 is one server's too: of several URLs, one may lack its ``/v1`` (the others answer).
FAILOVER_KINDS = frozenset(
    {"connection", "timeout", "server_error", "rate_limit", "bad_response", "not_found"}
)
DEFAULT_COOLDOWN_S = 5.0
_MAX_DOUBLINGS = 6  # the longest cooldown: 64 times the first (5 s -> 320 s)
_CANCELLED = "had calls cancelled in flight twice in a row (hung? slower than the agent timeout?)"


class ServerWarning(UserWarning):
    """A server of a list failed, or cannot be reached: the others take its calls meanwhile.

    Said once per server (and pool): the run goes on, but the user should know that fewer
    servers than listed are doing the work.
    """


# Each pool says each server once; Python's default filter would also drop the same words from the
# same line in a later run (a re-run cell, the runs of a loop). Appended: a filter of the user's
# own (``ignore``) still wins.
warnings.filterwarnings("always", category=ServerWarning, append=True)


def not_found_hint(servers: Sequence[str], *, name: bool = True) -> str:
    """What a 404 from ``servers`` most likely means: a wrong path.

    A base URL without ``/v1`` is the usual slip (``http://host:8000`` for
    ``http://host:8000/v1``); with it, the path or the model is wrong.

    Args:
        servers: The servers that answered 404.
        name: Name them first (``from <url>: ...``); False when the text names them already.
    """
    named = f"from {', '.join(servers)}: " if servers and name else ""
    short = next((b for b in servers if "/v1" not in urlsplit(b).path), None)
    if short is not None:
        return f"({named}a wrong path? does {short.rstrip('/')} need /v1?)"
    return f"({named}a wrong path, or a model the server does not serve?)"


class ServerPool:
    """The servers of one gateway: who is busy, who is cooling down, and the attempt loop.

    Safe to share between threads (blocking calls) and between the tasks of an event loop:
    the bookkeeping is a few integers under a lock, never held across a request.

    Attributes:
        api_bases: The servers' base URLs, in the order given (the tie-break).
        cooldown: Seconds a server that failed waits behind the others.
        answered: Per server, attempts it answered (a reply, or an error no server could
            make good, such as a 400).
        failed: Per server, attempts it failed (each one moved on to another server or, the
            last, failed the attempt).
    """

    def __init__(
        self,
        api_bases: Sequence[str],
        cooldown: float = DEFAULT_COOLDOWN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Pool ``api_bases`` (at least one).

        Args:
            api_bases: The servers' base URLs (``http://host:8000/v1``).
            cooldown: Seconds a failed server is tried only after the others.
            clock: Monotonic seconds (tests inject one).

        Raises:
            ValueError: No server given, or a negative cooldown.
        """
        if not api_bases:
            raise ValueError("a server pool needs at least one server")
        if cooldown < 0:
            raise ValueError("cooldown must be >= 0")
        self.api_bases = tuple(api_bases)
        self.cooldown = cooldown
        self._urls = tuple(chat_url(base) for base in self.api_bases)
        self._clock = clock
        self._lock = threading.Lock()
        n = len(self.api_bases)
        self._in_flight = [0] * n
        self._cool_until = [0.0] * n
        self._failures = [0] * n  # failures in a row: the cooldown doubles with each
        self.answered = [0] * n
        self.failed = [0] * n
        self._warned = [False] * n  # each server's first failure is said once

    def __repr__(self) -> str:
        """The servers and their counts."""
        return (
            f"ServerPool({list(self.api_bases)!r}, answered={self.answered}, failed={self.failed})"
        )

    def __getstate__(self) -> dict[str, object]:
        """The pool's settings (for worker processes): no lock, fresh counts there."""
        return {"api_bases": self.api_bases, "cooldown": self.cooldown}

    def __setstate__(self, state: dict[str, object]) -> None:
        """A fresh pool of the pickled servers."""
        self.__init__(state["api_bases"], state["cooldown"])  # type: ignore[misc, arg-type]

    # -- bookkeeping -------------------------------------------------------------------------
    def in_flight(self) -> list[int]:
        """Calls in flight at each server now."""
        with self._lock:
            return list(self._in_flight)

    def cooling(self) -> list[bool]:
        """Whether each server is cooling down now."""
        now = self._clock()
        with self._lock:
            return [until > now for until in self._cool_until]

    def cool(self, index: int, reason: str | None = None) -> None:
        """Put server ``index`` behind the others for a while (it failed).

        Args:
            index: The server.
            reason: Why, when it is to be said (a ``ServerWarning``, once per server).
        """
        with self._lock:
            self._failed(index)
        if reason is not None:
            self._warn(index, f"cannot be reached ({reason})")

    def _warn(self, index: int, why: str) -> None:
        """Say, once per server, that ``index`` failed and the others take its calls."""
        with self._lock:
            if self._warned[index]:
                return
            self._warned[index] = True
        others = len(self.api_bases) - 1
        warnings.warn(
            f"LLM server {self.api_bases[index]} {squash(why, 240)}: its calls go to the "
            f"other {f'{others} servers' if others > 1 else 'server'} while it cools down",
            ServerWarning,
            stacklevel=3,
        )

    def _failed(self, index: int) -> None:
        """Count a failure of ``index`` and cool it down (call with the lock held)."""
        self._failures[index] += 1
        doubled = min(self._failures[index] - 1, _MAX_DOUBLINGS)
        self._cool_until[index] = self._clock() + self.cooldown * 2**doubled

    def _acquire(self, tried: set[int]) -> int | None:
        """The next server for an attempt (None: every one tried), counted as in flight.

        Warm servers first, least busy first (one that failed last counts one call more),
        ties by list order; then cooling ones, the one back soonest first.
        """
        now = self._clock()
        best, best_key = None, None
        with self._lock:
            for i, until in enumerate(self._cool_until):
                if i in tried:
                    continue
                busy = self._in_flight[i] + (1 if self._failures[i] else 0)
                key = (1, until, 0) if until > now else (0, 0.0, busy)
                if best_key is None or key < best_key:
                    best, best_key = i, key
            if best is not None:
                self._in_flight[best] += 1
        return best

    def _release(self, index: int, outcome: str) -> int:
        """Count an attempt at ``index`` done: ``answered``, ``failed`` or ``cut`` (cooled).

        ``cut``: cancelled in flight, a failure too. Any other outcome counts neither way.

        Returns:
            The server's failures in a row now.
        """
        with self._lock:
            self._in_flight[index] -= 1
            if outcome in ("failed", "cut"):
                self.failed[index] += 1
                self._failed(index)
            elif outcome == "answered":
                self.answered[index] += 1
                self._cool_until[index] = 0.0  # it answers: warm again
                self._failures[index] = 0
            return self._failures[index]

    def _failure(self, index: int, exc: WireError) -> WireError:
        """``exc`` of server ``index``, said once as a warning, and naming its server."""
        base = self.api_bases[index]
        hint = f" {not_found_hint((base,), name=False)}" if exc.kind == "not_found" else ""
        self._warn(index, f"failed: {exc.description}{hint}")
        exc.servers = (base,)
        return exc

    def _exhausted(
        self, last: WireError, tried: int, failed: Sequence[WireError] = ()
    ) -> WireError:
        """The attempt's error once every server failed: the last one's, saying so.

        It names the servers that failed as the last one did (``WireError.servers``).
        """
        servers = tuple(s for e in failed if e.kind == last.kind for s in e.servers)
        if tried == 1:
            return last
        merged = WireError(
            f"{last.description} (all {tried} servers failed)",
            kind=last.kind,
            retryable=last.retryable,
            status_code=last.status_code,
            headers=last.headers,
            body=last.body,
        )
        merged.servers = servers or last.servers
        return merged

    def _settle(self, index: int, exc: WireError, failed: list[WireError]) -> str:
        """The outcome of server ``index``'s ``exc``, for ``_release``.

        ``"answered"``: the server did answer, and the request is wrong (a 4xx every server
        would give). ``"failed"``: the server's own failure, kept in ``failed``; the call moves
        on to another server.
        """
        if exc.kind not in FAILOVER_KINDS:
            return "answered"
        failed.append(self._failure(index, exc))
        return "failed"

    # -- attempts: one flow, blocking or on the event loop (``effects``) ----------------------
    def post(
        self, body: bytes, headers: Mapping[str, str], timeout: float, secrets: Sequence[str] = ()
    ) -> WireReply:
        """One attempt, blocking: each server at most once until one answers.

        Raises:
            WireError: A failure no other server can make good (a 4xx), or the last server's
                failure when every one failed.
        """
        return run(self._attempt(body, headers, timeout, secrets))

    async def apost(
        self, body: bytes, headers: Mapping[str, str], timeout: float, secrets: Sequence[str] = ()
    ) -> WireReply:
        """``post`` on the running event loop.

        An attempt the agent timeout cancels in flight frees its server and cools it down, as a
        timeout does; one a stopping run cancels only frees it.

        Raises:
            WireError: As ``post``.
        """
        return await arun(self._attempt(body, headers, timeout, secrets))

    def _attempt(
        self, body: bytes, headers: Mapping[str, str], timeout: float, secrets: Sequence[str]
    ) -> Flow[WireReply]:
        """The attempt loop: the next server, until one answers or every one failed."""
        tried: set[int] = set()
        failed: list[WireError] = []
        while (index := self._acquire(tried)) is not None:
            tried.add(index)
            args = (self._urls[index], body, headers, timeout, secrets)
            outcome = "cancelled"  # until the server says otherwise
            try:
                reply = yield Do(functools.partial(post, *args), functools.partial(apost, *args))
                outcome = "answered"
                return reply
            except asyncio.CancelledError:
                # An agent timeout gave up on it: a hung server, cooled down as a timeout is,
                # or every step would send it a call to be cancelled again. A stopping run
                # cancels its calls too: that says nothing of the server.
                outcome = "cut" if cancel_reason() is not None else "cancelled"
                raise
            except WireError as exc:
                if (outcome := self._settle(index, exc, failed)) == "answered":
                    raise  # the request is wrong: no other server is tried
            finally:
                if self._release(index, outcome) > 1 and outcome == "cut":
                    # Said only when it happens again: a stopping run cancels healthy calls once.
                    self._warn(index, _CANCELLED)
        assert failed  # at least one server, each tried once
        raise self._exhausted(failed[-1], len(tried), failed)
