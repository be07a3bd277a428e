"""The trace: one SQLite file per run, and the frames read from it."""

from vivarium.trace.db import TraceDb, check_trace_file
from vivarium.trace.records import StepRecord

__all__ = ["StepRecord", "TraceDb", "check_trace_file"]
