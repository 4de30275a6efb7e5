"""Atomic file writes: a file either holds a complete result or does not exist."""
from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from opcost import rerun
from opcost.errors import OpcostError
from opcost.tables import SCHEMA_VERSION, Table, frame


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what open() would give: a shared database stays readable by the group


def atomic(path: Path, write, suffix: str = "") -> None:
    """Write ``path`` through ``write(tmp)`` on a temporary file beside it (ending in ``suffix``), then rename.
    The file gets the mode a plain ``open()`` would give it (the user's umask), not the temporary file's 0600. An
    OS error that names no file (a full disk fails a write, not an open; pyarrow's says so in words alone) is raised
    again naming ``path``, so that its one line says which result could not be written."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    except OSError as e:
        raise _naming(e, path) from e
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise _naming(e, path) from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_IN_WORDS = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
             "Permission denied": errno.EACCES, "Read-only file system": errno.EROFS}


def _naming(e: OSError, path: Path) -> OSError:
    """``e`` naming ``path`` where it names no file (or only the temporary file), with its errno where it says it in
    words alone (pyarrow's errors)."""
    if e.filename and not Path(str(e.filename)).name.startswith(f".{path.name}."):
        return e
    code = e.errno or next((c for words, c in _IN_WORDS.items() if words in str(e)), None)
    return OSError(code, e.strerror or os.strerror(code) if code else str(e), str(path))


def write_parquet(df: pd.DataFrame, path, table: Table) -> None:
    df = frame(table, df)
    tab = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(tab.schema.metadata or {})
    meta[b"opcost_schema"] = f"{table.name}:{SCHEMA_VERSION}".encode()
    atomic(path, lambda tmp: pq.write_table(tab.replace_schema_metadata(meta), tmp))


def read_parquet(path, table: Table) -> pd.DataFrame:
    """Read a table, checking its columns. Columns added to the table since the file was written (by an older
    opcost) read as missing values, so older databases stay mergeable; a file with unknown columns or of another
    table gets a one-line error naming it, as does a file that is not Parquet (truncated, corrupt)."""
    rebuild = f"delete it and rebuild it (in a run: {rerun.command([path])})"
    try:
        df = pd.read_parquet(path)
    except FileNotFoundError:
        raise OpcostError(str(path), "no such file") from None
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError: not Parquet, truncated
        raise OpcostError(str(path), f"unreadable ({str(e).splitlines()[0] if str(e) else type(e).__name__}): "
                                     f"{rebuild}") from None
    try:
        if len(df.columns):
            df = df.assign(**{c: pd.NA for c in table.names if c not in df.columns})
        return frame(table, df)
    except ValueError as e:
        raise OpcostError(str(path), f"{e}; it was written by another opcost version: {rebuild}") from None


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
