"""The trace: one SQLite file per run, and the frames read from it.

- ``schema``: every column declared once, the DDL and the frames' types derived from it;
- ``records``, ``db``: what one step leaves behind, and the writer that commits it;
- ``frames``, ``views``, ``parquet``: the tables as Arrow, pandas, polars or Parquet;
- ``reporter_frames``: the Mesa-style reporters' ``model_vars`` and ``agent_vars`` frames;
- ``run``: ``TraceRun``, one run read from its file (``vivarium.Run`` builds on it);
- ``llm_texts``: every prompt and reply of the LLM calls, each distinct text stored once;
- ``duck``: the trace attached in DuckDB;
- ``validate``, ``health``: whether a trace is intact, and whether it is a result to trust;
- ``resume``, ``status``: what a resume and a sweep ask of a trace without loading it.
"""

from vivarium.trace.db import TraceDb, check_trace_file
from vivarium.trace.records import StepRecord
from vivarium.trace.run import TraceRun

__all__ = ["StepRecord", "TraceDb", "TraceRun", "check_trace_file"]
