"""Several OpenAI-compatible servers behind the direct transport: least busy first, with failover.

A run that outgrows one server lists several (``api_base: [url, url, ...]``: vLLM replicas,
llama.cpp servers on several machines). ``ServerPool`` sends each attempt to the server with
the fewest calls in flight (ties go to the first listed, so a run against deterministic servers
sends the same calls to the same servers), and when that server fails the way a server fails
(``FAILOVER_KINDS``: refused or reset connections, timeouts, 5xx, 429, a reply that is not JSON)
the attempt moves on to the next server. A server that failed is cooled down for ``cooldown``
seconds, doubled with each failure in a row (a server that hangs costs one call its timeout
per cooldown, ever more rarely): tried only after every warm one, then, until it answers
again, as if it had one call more in flight than it has.

Only when every server has failed one attempt does the attempt fail, with the last server's
error, and the layers above decide as for one server (the retry layer retries; past the
retries an infrastructure failure stops the run). A failure another server made good is no
attempt of the agent's: it leaves no call record, so the trace of a run whose server died is
the trace of a run whose server never did. The server's address is in no record (the request
text and its hash never name it); ``answered`` and ``failed`` count, per server, what happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

from vivarium.gateways.openai_http import WireError, WireReply, apost, chat_url, post

# Failures that say the server (not the request) is the problem: another server may answer.
# Refused credentials, unknown models and rejected requests would fail on every server alike.
FAILOVER_KINDS = frozenset({"connection", "timeout", "server_error", "rate_limit", "bad_response"})
DEFAULT_COOLDOWN_S = 5.0
_MAX_DOUBLINGS = 6  # the longest cooldown: 64 times the first (5 s -> 320 s)


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

    def cool(self, index: int) -> None:
        """Put server ``index`` behind the others for a while (it failed)."""
        with self._lock:
            self._failed(index)

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

    def _release(self, index: int, outcome: str) -> None:
        """Count an attempt at ``index`` done: ``answered``, ``failed`` (cooled) or neither."""
        with self._lock:
            self._in_flight[index] -= 1
            if outcome == "failed":
                self.failed[index] += 1
                self._failed(index)
            elif outcome == "answered":
                self.answered[index] += 1
                self._cool_until[index] = 0.0  # it answers: warm again
                self._failures[index] = 0

    def _exhausted(self, last: WireError, tried: int) -> WireError:
        """The attempt's error once every server failed: the last one's, saying so."""
        if tried == 1:
            return last
        return WireError(
            f"{last.description} (all {tried} servers failed)",
            kind=last.kind,
            retryable=last.retryable,
            status_code=last.status_code,
            headers=last.headers,
            body=last.body,
        )

    # -- attempts ----------------------------------------------------------------------------
    def post(
        self, body: bytes, headers: Mapping[str, str], timeout: float, secrets: Sequence[str] = ()
    ) -> WireReply:
        """One attempt, blocking: each server at most once until one answers.

        Raises:
            WireError: A failure no other server can make good (a 4xx), or the last server's
                failure when every one failed.
        """
        tried: set[int] = set()
        last: WireError | None = None
        while (index := self._acquire(tried)) is not None:
            tried.add(index)
            outcome = "cancelled"  # until the server says otherwise
            try:
                reply = post(self._urls[index], body, headers, timeout, secrets)
                outcome = "answered"
                return reply
            except WireError as exc:
                if exc.kind not in FAILOVER_KINDS:  # the server answered: the request is wrong
                    outcome = "answered"
                    raise
                outcome, last = "failed", exc
            finally:
                self._release(index, outcome)
        assert last is not None  # at least one server, each tried once
        raise self._exhausted(last, len(tried))

    async def apost(
        self, body: bytes, headers: Mapping[str, str], timeout: float, secrets: Sequence[str] = ()
    ) -> WireReply:
        """``post`` on the running event loop (a cancelled attempt frees its server).

        Raises:
            WireError: As ``post``.
        """
        tried: set[int] = set()
        last: WireError | None = None
        while (index := self._acquire(tried)) is not None:
            tried.add(index)
            outcome = "cancelled"  # until the server says otherwise
            try:
                reply = await apost(self._urls[index], body, headers, timeout, secrets)
                outcome = "answered"
                return reply
            except WireError as exc:
                if exc.kind not in FAILOVER_KINDS:  # the server answered: the request is wrong
                    outcome = "answered"
                    raise
                outcome, last = "failed", exc
            finally:
                self._release(index, outcome)
        assert last is not None
        raise self._exhausted(last, len(tried))
