"""Atomic file writes: a file either holds a complete result or does not exist."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import OpcostError
from .tables import SCHEMA_VERSION, Table, frame


def atomic(path: Path, write, suffix: str = "") -> None:
    """Write ``path`` through ``write(tmp)`` on a temporary file beside it (ending in ``suffix``), then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_parquet(df: pd.DataFrame, path, table: Table) -> None:
    df = frame(table, df)
    tab = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(tab.schema.metadata or {})
    meta[b"opcost_schema"] = f"{table.name}:{SCHEMA_VERSION}".encode()
    atomic(path, lambda tmp: pq.write_table(tab.replace_schema_metadata(meta), tmp))


def read_parquet(path, table: Table) -> pd.DataFrame:
    """Read a table, checking its columns. Columns added to the table since the file was written (by an older
    opcost) read as missing values, so older databases stay mergeable; a file with unknown columns or of another
    table gets a one-line error naming it."""
    try:
        df = pd.read_parquet(path)
        if len(df.columns):
            df = df.assign(**{c: pd.NA for c in table.names if c not in df.columns})
        return frame(table, df)
    except ValueError as e:
        raise OpcostError(str(path), f"{e}; it was written by another opcost version: delete it and rerun") from None


def read_many(paths, table: Table) -> pd.DataFrame:
    frames = [read_parquet(p, table) for p in paths]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else frame(table, [])


def write_text(text: str, path) -> None:
    atomic(path, lambda tmp: Path(tmp).write_text(text))


def read_json(path):
    """The JSON document at ``path``; None for no path (an optional input)."""
    return json.loads(Path(path).read_text()) if path else None


def write_json(obj, path) -> None:
    write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", path)
