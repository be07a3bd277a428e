"""Vivarium's errors and warnings: one hierarchy, each error one line that names what to change.

Every error a user can fix is a ``VivariumError``; its message is one line (line breaks and
control characters escaped), so the CLI prints it as ``vvm CMD: error: ...`` and a notebook shows
it whole. The general errors live here; errors that belong to one subsystem's interface live
with it and are listed below with their module. Outside ``VivariumError`` on purpose: an
``ActionError`` is an action the world refused, recorded as the action's outcome, never raised
to the user; ``WireError`` and ``StepFailed`` are signals inside the direct transport and a
workflow decision, which never leave them; ``Interrupted`` is a ``KeyboardInterrupt``, so that
code that stops on Ctrl-C stops on SIGTERM too; and the warnings are results that are not clean,
not errors.

The tree: every exception and warning class Vivarium defines, under the base it is drawn
from, with its other bases in parentheses and its module where it is not this one
(``tests/test_errors.py`` checks the tree against the code, both ways)::

    Exception
    ├── VivariumError                           a problem the user can fix, as one line
    │   ├── ConfigError (ValueError)            a config, flag or argument is invalid
    │   │   ├── UnsafeExpression                sandbox: text uses a construct not allowed
    │   │   │                                   (vivarium.sandbox.limits)
    │   │   ├── ReporterError                   a reporter raised or returned what cannot be
    │   │   │                                   recorded (vivarium.engine.reporters)
    │   │   └── UnrecordableValue               a decision's arguments, metadata or result hold a
    │   │                                       value the trace cannot record as it is
    │   │                                       (vivarium.trace.values)
    │   ├── EvaluationError (ValueError)        sandbox: allowed text failed while running
    │   │                                       (vivarium.sandbox.limits)
    │   ├── TransitionError (ValueError)        a state change the workflow does not allow
    │   │                                       (vivarium.workflow.state_machine)
    │   ├── MissingDependency (ImportError)     an optional package is not installed; the message
    │   │                                       names the extra that installs it
    │   ├── TraceError                          a trace file is missing, foreign, newer or damaged
    │   ├── RunStoppingError                    raised inside a decision, stops the run instead of
    │   │   │                                   becoming the agent's recorded fallback
    │   │   ├── ResumeDiverged                  a resume re-executed a committed step and it went
    │   │   │                                   otherwise (another state, a call the trace never
    │   │   │                                   recorded): the run is not reproducible; nothing
    │   │   │                                   changed
    │   │   └── ReplayedAgentTimeout (TimeoutError)
    │   │                                       a recorded agent timeout, replayed: the decision
    │   │                                       attempt ends as it did (vivarium.gateways.cache)
    │   ├── LLMCallError                        a failed LLM call, with its kind and status
    │   │   │                                   (vivarium.gateways.base)
    │   │   ├── LLMUnavailable (RunStoppingError)
    │   │   │                                   the LLM failed after every retry: the run stops,
    │   │   │                                   resumable (vivarium.gateways.base)
    │   │   ├── CacheMissError (RunStoppingError)
    │   │   │                                   a replay cannot answer a call as recorded: nothing
    │   │   │                                   (or another provider's reply) is stored for it, or
    │   │   │                                   it was cut short by an agent timeout this run does
    │   │   │                                   not have (vivarium.gateways.cache)
    │   │   └── CassetteError                   a cassette cannot be read or written
    │   │       │                               (vivarium.gateways.cache)
    │   │       └── CassetteMixError (RunStoppingError)
    │   │                                       a run would store one provider's replies in a
    │   │                                       cassette of another's (vivarium.gateways.cache)
    │   ├── RunInterrupted                      a run stopped by its infrastructure; resumable
    │   ├── RunAborted                          a decision failed in a way that stops the run
    │   │                                       (vivarium.engine.deciding)
    │   ├── EventCapReached                     an autonomous run hit its event cap
    │   │                                       (vivarium.engine.autonomous)
    │   └── SweepFailed                         every run of a sweep failed
    ├── ActionError                             an action the world refused; recorded as its
    │   │                                       outcome, never raised to the user
    │   │                                       (vivarium.worlds.registry)
    │   └── LedgerError                         a scrip transfer that cannot happen
    │       │                                   (vivarium.worlds.ledger)
    │       └── InsufficientScrip               the payer has too little scrip
    │                                           (vivarium.worlds.ledger)
    ├── WireError                               an HTTP exchange failed; the gateway turns it into
    │                                           an LLMCallError (vivarium.gateways.openai_http)
    └── StepFailed                              one attempt of a workflow step failed; never leaves
                                                the decision (vivarium.workflow.policy)
    KeyboardInterrupt
    └── Interrupted                             a run stopped by SIGINT or SIGTERM (Ctrl-C, a killed
                                                job); its trace says interrupted
                                                (vivarium.engine.interrupts)
    UserWarning
    ├── RunHealthWarning                        a run finished but is not a clean result
    ├── TracePathWarning                        a trace went elsewhere than its default path
    ├── SweepWarning                            some runs of a sweep failed
    ├── IdentityWarning                         user code reads a value that cannot be digested
    ├── OverrideWarning                         an override switched the LLM from mock to real or
    │                                           back
    ├── ResumedWarning                          a run call found its own interrupted trace and
    │                                           resumed it instead of starting over
    └── ServerWarning                           a server of a list cannot be used; its calls go to
                                                the others (vivarium.gateways.servers)

A name kept for code that uses it: ``vivarium.gateways.recorded.CallDiverged`` is
``ResumeDiverged``. A failed call replayed from a cassette is raised again as the class it was
stored with: ``LLMCallError``, or a subclass of it made then with the stored class name (a
policy's recorded fallback reason names the class, so the replay names it as the recording did).

"Fatal" is a type: code that turns an agent's failure into a recorded fallback lets a
``RunStoppingError`` through (``isinstance``), and the engine stops the run on it.
"""

from __future__ import annotations

import re

__all__ = [
    "ConfigError",
    "IdentityWarning",
    "MissingDependency",
    "OverrideWarning",
    "RunHealthWarning",
    "ResumeDiverged",
    "ResumedWarning",
    "RunInterrupted",
    "RunStoppingError",
    "SweepFailed",
    "SweepWarning",
    "TraceError",
    "TracePathWarning",
    "VivariumError",
    "one_line",
    "squash",
]

# Line breaks (``str.splitlines`` splits on all of these) and other control characters.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    r"""``text`` with line breaks and control characters escaped (``\n``).

    So it is one line even when it quotes a user's key, value or file name.
    """
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def squash(text: object, limit: int = 300) -> str:
    """``text`` with runs of whitespace (line breaks too) made one space, cut to ``limit``.

    A server's or parser's message fit for a one-line record; a cut ends with ``...``.
    """
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class VivariumError(Exception):
    """Base class: a problem the user can fix, reported as one clear line."""

    def __str__(self) -> str:
        """The message, with line breaks and control characters escaped."""
        return one_line(super().__str__())


class ConfigError(VivariumError, ValueError):
    """A config, flag or argument is invalid."""


class TraceError(VivariumError):
    """A trace file is missing, foreign, newer than this version, or damaged."""


class MissingDependency(VivariumError, ImportError):
    """An optional package is not installed; the message names the extra that installs it.

    Raised by ``vivarium.optional.require``, e.g.
    ``matplotlib is not installed: pip install "vivarium-lab[notebooks]"``. An ``ImportError``
    too, so code that falls back when a package is missing keeps working.
    """


class RunStoppingError(VivariumError):
    """An error raised inside a decision that must stop the run, not become a fallback.

    Policies turn an agent's own failures (an unusable reply, a broken condition) into a
    recorded fallback action; an error of this type passes through them, and the engine stops
    the run on it. Examples: a replay with no recorded reply (going on would silently produce a
    different run than the one replayed) and an LLM outage that outlasted the retries.
    """


class RunInterrupted(VivariumError):
    """A run stopped before finishing because its infrastructure failed.

    The LLM server is down, refuses the key, does not know the model, ... Every step before it
    is in the trace, the run's status is ``interrupted``, and ``Run.open(path).resume()`` /
    ``vvm resume PATH`` continues it once the cause is fixed.

    Attributes:
        step: The step that was not committed.
        reason: Why the run stopped (the message, unless given apart).
        run_id: The run's id, when known.
        path: The trace file, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        step: int | None = None,
        reason: str | None = None,
        run_id: str | None = None,
        path: str | None = None,
    ) -> None:
        """Record the stop; see the class attributes."""
        super().__init__(message)
        self.step = step
        self.reason = reason if reason is not None else message
        self.run_id = run_id
        self.path = path


class ResumeDiverged(RunStoppingError):
    """A resume re-executed a step the run committed and it went otherwise than recorded.

    A resume rebuilds the run's state by re-executing its committed steps (answering their
    LLM calls from the trace) and checks each step's state hash against the recorded one. A
    mismatch, or a decision asking the model what the trace never recorded (its prompt
    changed), means the run cannot be reproduced from its inputs (code or data it reads changed,
    or it draws randomness it does not own), so going on would join two different runs in one
    trace: the resume is refused and the trace left as it was. Raised inside a decision, it
    stops the run (a ``RunStoppingError``), never becoming the agent's fallback.

    Attributes:
        step: The step whose re-execution differs (None: not known where it was raised).
        record: What the re-execution produced (a ``StepRecord``), for saying what differs.
    """

    def __init__(self, message: str, *, step: int | None = None, record: object = None) -> None:
        """Say what differs at ``step``; see the class attributes."""
        super().__init__(message)
        self.step = step
        self.record = record


class RunHealthWarning(UserWarning):
    """A run finished but is not a clean result (see ``Run.health``).

    Every LLM call failed, decisions fell back, or it stopped early. Emitted once by
    ``Experiment.run()``.
    """


class TracePathWarning(UserWarning):
    """A run's trace went somewhere else than its default path.

    The trace there holds another run (another config or seed) that is kept. The message names
    both files.
    """


class SweepFailed(VivariumError):
    """Every run of a sweep failed: nothing in it is a result.

    The message names the first error; a re-run of the same sweep retries the failed runs.

    Attributes:
        sweep: The ``Sweep`` (its ``index`` has every run's error).
    """

    def __init__(self, message: str, sweep: object = None) -> None:
        """Record the failure and the sweep it belongs to."""
        super().__init__(message)
        self.sweep = sweep


class SweepWarning(UserWarning):
    """Some runs of a sweep failed: the merged frames hold only the complete runs.

    The message gives the count and the first error; ``Sweep.failed`` lists them all.
    """


class IdentityWarning(UserWarning):
    """User code reads a value Vivarium cannot digest into the run's identity.

    Said once per value and process (see ``vivarium.experiment.digest``): a stored run of that code is
    never reused, since nothing tells whether the value changed.
    """


class OverrideWarning(UserWarning):
    """An override changed what answers the run's LLM calls: the mock instead of a model, or back.

    The message names the model before and after, so a run never answers from the mock while
    its user believes a model did (or the reverse).
    """


class ResumedWarning(UserWarning):
    """A run call found an interrupted trace of this same run and went on from where it stopped.

    Calling ``Experiment.run()`` again after Ctrl-C (a notebook cell run again), a sweep run
    again, or ``vvm run`` again keeps the committed steps instead of throwing them away (lost for
    good with a model that samples). The message says from which step, and that
    ``overwrite=True`` (vvm: ``--overwrite``) starts over instead.
    """
