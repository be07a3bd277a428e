"""Frames written as Parquet files that say whose frames they are, so none is overwritten blindly.

Each file carries the id of what it was exported from (a run id, or a sweep's name) in its
schema metadata. Exporting into a folder whose files came from something else is refused unless
``overwrite=True``: two runs exported to one ``out/`` folder would otherwise leave a mix of both,
or only the last, with nothing to tell. The same source may be exported again (it replaces its
own files). Each file is written beside its final name and moved into place, so an interrupted
export never leaves a half-written file under a frame's name.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vivarium.errors import TraceError

SOURCE_KEY = b"vivarium.source"


def exported_source(path: Path) -> str | None:
    """The source id recorded in a Parquet file of ours; None when the file is not one."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_schema(path).metadata or {}
    except Exception:  # not Parquet, unreadable: not ours either way
        return None
    value = metadata.get(SOURCE_KEY)
    return value.decode("utf-8") if value is not None else None


def write_frames(
    directory: str | os.PathLike[str],
    tables: Mapping[str, Any],
    source: str,
    *,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Write each Arrow table as ``<directory>/<name>.parquet``, tagged with ``source``.

    Raises:
        TraceError: a file there holds another source's frames (or is not ours) and
            ``overwrite`` is false. Nothing is written then.
    """
    import pyarrow.parquet as pq

    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise TraceError(f"{out} is a file; give a folder for the Parquet frames")
    paths = {name: out / f"{name}.parquet" for name in tables}
    if not overwrite:
        for path in paths.values():
            if not path.exists():
                continue
            held = exported_source(path)
            if held != source:
                what = f"frames of {held}" if held else "a file Vivarium did not write"
                raise TraceError(
                    f"{path} holds {what}; pass overwrite=True or choose another folder"
                )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TraceError(f"cannot create folder {out}: {exc.strerror}") from None
    for name, table in tables.items():
        tagged = table.replace_schema_metadata(
            {**(table.schema.metadata or {}), SOURCE_KEY: source.encode("utf-8")}
        )
        partial = paths[name].with_name(paths[name].name + ".partial")
        try:
            pq.write_table(tagged, partial)
            os.replace(partial, paths[name])
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
    return paths
