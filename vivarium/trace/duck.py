"""A trace in DuckDB: the SQLite file attached read-only, every table and view queryable.

DuckDB reads SQLite files with its ``sqlite`` extension. That extension is normally
downloaded on first use; the ``duckdb-ext-sqlite`` package on PyPI carries it for one DuckDB
version, and when it is installed it is loaded from there, so no network is needed.

Example:
    >>> con = duckdb_connection("runs/demo.sqlite")  # doctest: +SKIP
    >>> con.sql("SELECT action, count(*) FROM run.actions GROUP BY action")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vivarium.errors import TraceError
from vivarium.optional import require

__all__ = ["duckdb_connection"]


def duckdb_connection(path: str | os.PathLike[str], alias: str = "run") -> Any:
    """A DuckDB connection with the trace at ``path`` attached (read-only) as ``alias``.

    Args:
        path: The trace file.
        alias: The schema name its tables get in DuckDB (``run.actions``, ``run.steps``).

    Returns:
        A ``duckdb.DuckDBPyConnection``.

    Raises:
        MissingDependency: DuckDB is not installed.
        TraceError: The file is not there, or DuckDB cannot load its sqlite extension.
    """
    from vivarium.trace.db import check_trace_file

    p = check_trace_file(path)
    duckdb = require("duckdb")
    con = duckdb.connect()
    try:
        bundled = _bundled_extension(duckdb.__version__)
        con.execute(f"LOAD '{bundled}'" if bundled else "INSTALL sqlite; LOAD sqlite")
    except duckdb.Error as exc:
        con.close()
        raise TraceError(
            f"DuckDB cannot load its sqlite extension ({str(exc).splitlines()[0]}); "
            f'pip install "duckdb-ext-sqlite=={duckdb.__version__}.*" carries it'
        ) from None
    quoted = str(p.resolve()).replace("'", "''")
    con.execute(f"ATTACH '{quoted}' AS {alias} (TYPE sqlite, READ_ONLY)")
    return con


def _bundled_extension(version: str) -> Path | None:
    """The sqlite extension file ``duckdb-ext-sqlite`` installed for this DuckDB, if any."""
    try:
        import duckdb_ext  # type: ignore[import-not-found]  # namespace of duckdb-ext-* packages
    except ImportError:
        return None
    for root in getattr(duckdb_ext, "__path__", []):
        found = sorted(Path(root).glob(f"extensions/v{version}/*/sqlite_scanner.duckdb_extension"))
        if found:
            return found[0]
    return None
