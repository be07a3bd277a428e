"""Loading: runs, trace files, frames and lists of them into polars tables, one per trace table.

Every metric takes ``data`` as any of:

- a run (anything with ``frame``, ``metadata`` and ``run_id``, like ``vivarium.Run``), or the
  path of a trace file (read with ``vivarium.trace.run.TraceRun``);
- a dict of frames by table name, as ``run.to_polars()`` gives (polars or pandas frames);
- one polars or pandas frame of the table the function reads (recognised by its columns);
- a list of any of these (their tables are concatenated, e.g. several seeds' runs);

and ``load_tables`` turns it into the polars tables a metric reads, categoricals as text. A
``by`` column that a table lacks is taken per agent from the agents table when it has it
(``by="policy"`` splits a mixed run by policy), else, for a run, from the run's recorded
config or metadata (``by=["seed"]``). In the agents table the agent's own seed is
``agent_seed`` (and a sweep's ``sweep.seed`` is ``seed``). A table that was not given, or is
empty, counts as empty, with the columns of ``TABLE_SCHEMAS``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import polars as pl

from vivarium.trace.run import TraceRun
from vivarium.trace.schema import FRAME_NAMES, Column, frame_columns

Frame = Any  # a pandas.DataFrame or polars.DataFrame, as the caller asked (as_=)

__all__ = [
    "TABLE_SCHEMAS",
    "Frame",
    "by_list",
    "load_tables",
    "require_columns",
    "to_output",
    "with_by_columns",
    "with_fallback",
]

# The polars type of each kind of trace column (see vivarium.trace.schema.Kind).
_POLARS_TYPES: dict[str, Any] = {
    "int": pl.Int64,
    "float": pl.Float64,
    "text": pl.String,
    "category": pl.String,
    "bool": pl.Boolean,
    "flag": pl.Boolean,
    "agent": pl.String,
}


def _analysis_name(table: str, column: Column) -> str:
    # In the agents table the agent's own seed is ``agent_seed`` (``seed`` is the run's).
    name = column.frame_name
    return "agent_seed" if table == "agents" and name == "seed" else name


TABLE_SCHEMAS: dict[str, dict[str, Any]] = {
    name: {
        "run_id": pl.String,
        **{_analysis_name(name, c): _POLARS_TYPES[str(c.kind)] for c in frame_columns(name)},
    }
    for name in FRAME_NAMES
}
"""The columns of each trace table as the metrics read them (categoricals as text).

Derived from ``vivarium.trace.schema``; an empty table is given these columns.
"""

_MARKERS: list[tuple[str, tuple[str, ...]]] = [
    ("transitions", ("from_state", "to_state")),
    ("llm_calls", ("prompt_tokens",)),
    ("llm_calls", ("request_hash",)),
    ("messages", ("author_id",)),
    ("steps", ("n_actions",)),
    ("steps", ("state_hash",)),
    ("agents", ("agent_idx",)),
    ("actions", ("action",)),
    ("actions", ("success",)),
]


def _is_run(obj: Any) -> bool:
    return hasattr(obj, "frame") and hasattr(obj, "metadata") and hasattr(obj, "run_id")


def _to_polars(obj: Any) -> pl.DataFrame:
    if isinstance(obj, pl.LazyFrame):
        obj = obj.collect()
    if isinstance(obj, pl.DataFrame):
        return obj
    if type(obj).__module__.startswith("pandas") and hasattr(obj, "columns"):
        return pl.from_pandas(obj)
    if hasattr(obj, "schema") and hasattr(obj, "num_rows"):  # a pyarrow table
        return pl.from_arrow(obj)  # type: ignore[return-value]
    raise TypeError(f"expected a polars or pandas frame, got {type(obj).__name__}")


def _identify(df: pl.DataFrame) -> str | None:
    cols = set(df.columns)
    for name, markers in _MARKERS:
        if all(m in cols for m in markers):
            return name
    return None


def _normalise(df: pl.DataFrame, name: str) -> pl.DataFrame:
    """Categoricals to text; agents' own columns apart from run-level ones; empty frames typed.

    In the agents table ``seed`` is the agent's seed: it becomes ``agent_seed`` here, and a
    sweep's run-level ``sweep.<x>`` columns become ``<x>`` (their clash renamed ``agent_<x>``).
    """
    import polars.selectors as cs

    df = df.with_columns((cs.categorical() | cs.enum()).cast(pl.String))
    if name == "agents":
        renames = {}
        for col in df.columns:
            if col.startswith("sweep."):
                own = col.removeprefix("sweep.")
                if own in df.columns:
                    renames[own] = f"agent_{own}"
                renames[col] = own
        if "seed" in df.columns and "seed" not in renames and "agent_seed" not in df.columns:
            renames["seed"] = "agent_seed"
        df = df.rename(renames)
    if df.height == 0:
        schema = TABLE_SCHEMAS[name]
        missing = [pl.lit(None, t).alias(c) for c, t in schema.items() if c not in df.columns]
        if missing:
            df = df.with_columns(missing) if df.width else pl.DataFrame(schema=schema)
    return df


def _empty(name: str) -> pl.DataFrame:
    return pl.DataFrame(schema=TABLE_SCHEMAS[name])


def _run_value(run: Any, column: str) -> Any:
    meta = getattr(run, "metadata", None) or {}
    config = meta.get("config") or {}
    for source in (config, meta):
        value = source.get(column)
        if value is not None and not isinstance(value, dict | list):
            return value
    return None


def _resolve_by(
    tables: dict[str, pl.DataFrame], by: Sequence[str], run: Any
) -> dict[str, pl.DataFrame]:
    """Give every table the ``by`` columns it lacks.

    Per agent from the agents table (e.g. ``policy``), else, for a run, from its metadata or
    recorded config (e.g. ``seed``).
    """
    agents = tables.get("agents")
    out = {}
    for name, df in tables.items():
        missing = [b for b in by if b not in df.columns]
        agent_col = next((c for c in ("agent_id", "author_id") if c in df.columns), None)
        if missing and name != "agents" and agent_col and agents is not None and agents.height:
            take = [b for b in missing if b in agents.columns]
            if take and "agent_id" in agents.columns:
                on = ["run_id"] if "run_id" in df.columns and "run_id" in agents.columns else []
                right = agents.select(*on, pl.col("agent_id").alias(agent_col), *take)
                right = right.unique([*on, agent_col], keep="first")
                right = right.cast({c: df.schema[c] for c in [*on, agent_col]}, strict=False)
                df = (
                    df.with_row_index("_ord")
                    .join(right, on=[*on, agent_col], how="left")
                    .sort("_ord")
                    .drop("_ord")
                )
                missing = [b for b in missing if b not in take]
        if missing and run is not None:
            values = {b: _run_value(run, b) for b in missing}
            df = df.with_columns(
                pl.lit(
                    v, pl.Int64 if isinstance(v, int) and not isinstance(v, bool) else None
                ).alias(b)
                for b, v in values.items()
                if v is not None
            )
        out[name] = df
    return out


def load_tables(
    data: Any, names: Sequence[str], by: Sequence[str], primary: str
) -> dict[str, pl.DataFrame]:
    """The tables ``names`` from ``data`` (those not given are empty), with the ``by`` columns.

    Args:
        data: A run, a trace path, a dict of frames, one frame or a list of these (see the
            module docstring).
        names: The tables to return.
        by: Columns every table must have (taken from the agents table or the run when a
            table lacks them).
        primary: The table an empty lone frame stands for.

    Returns:
        The polars tables by name, categoricals as text, in the order of ``names``.

    Raises:
        ValueError: a lone frame is none of the tables ``names``.
        TypeError: ``data`` holds something that is not a frame.
    """
    names = list(dict.fromkeys(names))
    wanted = [*names, "agents"] if by and "agents" not in names else names
    if isinstance(data, str | os.PathLike):
        data = TraceRun.open(data)
    run = None
    if data is None:
        tables = {n: _empty(n) for n in wanted}
    elif _is_run(data):
        run = data
        tables = {n: _normalise(_to_polars(data.frame(n, "polars")), n) for n in wanted}
    elif isinstance(data, Mapping):
        tables = {
            n: _empty(n) if data.get(n) is None else _normalise(_to_polars(data[n]), n)
            for n in wanted
        }
    elif isinstance(data, list | tuple):
        parts = [load_tables(item, names, by, primary) for item in data]
        return {
            n: _normalise(pl.concat([p[n] for p in parts], how="diagonal_relaxed"), n)
            if parts
            else _empty(n)
            for n in names
        }
    else:
        df = _to_polars(data)
        kind = _identify(df)
        if kind is None and df.height == 0:
            kind = primary
        if kind not in names:
            shown = ", ".join(df.columns) or "none"
            raise ValueError(
                f"expected the {' or '.join(names)} table, got a frame with columns: {shown}"
            )
        tables = {n: _normalise(df, n) if n == kind else _empty(n) for n in wanted}
    if by:
        tables = _resolve_by(tables, by, run)
    return {n: tables[n] for n in names}


def by_list(by: str | Iterable[str] | None) -> list[str]:
    """A metric's ``by=`` argument as a list of distinct columns (``run_id`` is always a key)."""
    if by is None:
        return []
    if isinstance(by, str):
        return [by]
    return [b for b in dict.fromkeys(by) if b != "run_id"]


def with_by_columns(df: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """Give an empty frame the ``by`` columns it lacks, so empty results keep their shape."""
    if df.height:
        return df
    return df.with_columns([pl.lit(None, pl.String).alias(b) for b in by if b not in df.columns])


def require_columns(df: pl.DataFrame, columns: Iterable[str], table: str, what: str) -> None:
    """Check that ``df`` (the ``table`` table) has ``columns``, which metric ``what`` reads.

    Raises:
        ValueError: naming the missing columns and the ones there are.
    """
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(
            f"{what} needs column(s) {', '.join(missing)} in the {table} table "
            f"(columns: {', '.join(df.columns)})"
        )


_FALLBACK_METADATA = '"parse_path":"fallback"'


def with_fallback(a: pl.DataFrame) -> pl.DataFrame:
    """The actions with a boolean ``fallback`` column, and ``success`` false where it is set.

    A fallback (no usable action: an unusable reply, a policy error, an outage recorded under
    ``on_llm_error="fallback"``) is never a success. Frames from before the ``fallback`` column
    recorded an unusable reply as a successful ``noop`` with ``parse_path: fallback`` in its
    metadata: that is read here as the fallback it was.
    """
    if "fallback" in a.columns:
        flag = pl.col("fallback").cast(pl.Boolean).fill_null(False)
    elif "metadata" in a.columns:
        text = pl.col("metadata").cast(pl.String)
        flag = text.str.contains(_FALLBACK_METADATA, literal=True).fill_null(False)
    else:
        flag = pl.lit(False)
    a = a.with_columns(flag.alias("fallback"))
    if "success" in a.columns:
        ok = pl.col("success").cast(pl.Boolean)
        a = a.with_columns(pl.when(pl.col("fallback")).then(False).otherwise(ok).alias("success"))
    return a


def to_output(df: pl.DataFrame, as_: str) -> Frame:
    """A result as the caller asked: ``as_="pandas"`` or ``"polars"``.

    Raises:
        ValueError: ``as_`` is neither.
    """
    if as_ == "polars":
        return df
    if as_ == "pandas":
        return df.to_pandas()
    raise ValueError(f"as_ must be 'pandas' or 'polars', not {as_!r}")
