"""Result files an earlier run made that are missing or damaged now, and the jobs that rebuild them.

Snakemake does not redo a job whose outputs are missing while the files made from them are up to date, nor one
whose output was damaged after it was written: a plain rerun says "Nothing to be done". Snakemake's own metadata
(``.snakemake/metadata``, one record per output file a job of this directory made) says which files a run made;
:func:`find` names those under ``results/`` that are gone or unreadable now, each with the job (rule and wildcards)
that makes it. The workflow then renews each such job's run mark (:meth:`opcost.journal.RunMark.renew`): its params
change, so Snakemake redoes the job and everything made from its outputs, in a dry run as in a real one, and no
other job. A job of a model no longer configured is not in the run's DAG: its mark changes nothing.
"""
from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path

METADATA = ".snakemake/metadata"  # Snakemake's file-backed metadata: one record per output, named by its path


@dataclass(frozen=True)
class Repair:
    path: str  # the result file, relative to the run's directory
    why: str  # "missing" or "damaged (...)"
    rule: str  # the rule whose job makes it
    wildcards: tuple  # (name, value) pairs of that job

    @property
    def wildcard_dict(self) -> dict:
        return dict(self.wildcards)


def made_files(metadata=METADATA) -> list[str]:
    """The files Snakemake recorded as made by a job of this directory (its metadata; none without it)."""
    try:
        names = os.listdir(metadata)
    except OSError:
        return []
    paths = []
    for name in names:  # a long path is split over folders named "@..."; result paths are far shorter
        if name.startswith("@"):
            continue
        try:
            paths.append(base64.urlsafe_b64decode(name.encode()).decode())
        except (ValueError, UnicodeDecodeError):
            continue
    return sorted(paths)


def record_lost(results: str = "results", metadata=METADATA) -> bool:
    """Whether ``results`` holds tables of an earlier run while Snakemake's record of the jobs that made them is gone
    (``.snakemake/metadata`` deleted, or ``--cleanup-metadata``): neither a changed config nor a deleted or damaged
    result can then be told from a current one."""
    return not made_files(metadata) and any(Path(results).glob("*/**/*.parquet"))


CHECKED = (".parquet", ".json", ".tsv", ".txt", ".png", ".gz")  # the kinds of result file damage() reads back
FULL_READ = 64 << 20  # a compressed trace up to this size is decompressed whole (larger: its header only)


def damage(path) -> str | None:
    """Why a result file that exists cannot be read back (None: it reads, or its kind is not checked): an empty
    file; a Parquet table without its footer, and a database table (``db/<table>.parquet``) that does not read whole
    or holds another table's columns; a JSON file that does not parse; a text table that is not UTF-8 text; a PNG
    image without its signature or its end; a gzip file (a trace) cut short."""
    path = Path(path)
    if path.suffix not in CHECKED or not path.is_file():
        return None
    try:
        if path.stat().st_size == 0:
            return "empty"
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix in (".tsv", ".txt"):
            path.read_text(encoding="utf-8")
        elif path.suffix == ".png":
            return _png_damage(path)
        elif path.suffix == ".gz":
            return _gzip_damage(path)
        else:
            return _parquet_damage(path)
    except (OSError, ValueError, UnicodeDecodeError, EOFError) as e:  # pyarrow's ArrowInvalid is a ValueError
        said = (str(e).splitlines() or [""])[0]
        return (said if len(said) <= 100 else said[:100].rsplit(" ", 1)[0] + " ...") or type(e).__name__
    return None


def _parquet_damage(path: Path) -> str | None:
    import pyarrow.parquet as pq

    from opcost.tables import ALL

    meta = pq.read_metadata(path)
    table = next((t for t in ALL if path.parent.name == "db" and path.stem == t.name), None)
    if table is None:
        return None
    extra = sorted(set(meta.schema.names) - set(table.names) - {"__index_level_0__"})
    if extra:
        return f"columns of another table ({', '.join(extra[:3])})"
    pq.read_table(path)  # a database table: every page, as a query reads it
    return None


def _png_damage(path: Path) -> str | None:
    with open(path, "rb") as fh:
        head = fh.read(8)
        fh.seek(max(0, path.stat().st_size - 12))
        tail = fh.read()
    if head != b"\x89PNG\r\n\x1a\n":
        return "not a PNG image"
    return None if b"IEND" in tail else "a PNG image cut short"


def _gzip_damage(path: Path) -> str | None:
    import gzip

    with gzip.open(path, "rb") as fh:
        if path.stat().st_size > FULL_READ:
            fh.read(1)
        else:
            while fh.read(1 << 20):
                pass
    return None


def _changed_folder(path: str, metadata) -> str | None:
    """"changed since it was made" when a file of the folder output ``path`` was deleted, added or renamed after the
    job that made it ended (the folder's own time, against the job's end in Snakemake's record of it)."""
    try:
        record = json.loads((Path(metadata) / base64.urlsafe_b64encode(path.encode()).decode()).read_text())
        ended = float(record["endtime"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return "changed since it was made" if os.stat(path).st_mtime > ended + 1.0 else None


def find(rules, under: str = "results/", metadata=METADATA) -> list[Repair]:
    """The files under ``under`` that a job of ``rules`` (Snakemake rule objects) made in an earlier run and that
    are missing or damaged now, each with the job that makes it."""
    repairs = []
    for path in made_files(metadata):
        if not path.startswith(under):
            continue
        if os.path.isdir(path):  # a folder of files (the figures): one deleted, added or damaged since its job
            why = _changed_folder(path, metadata) or next(
                (f"{f.name} damaged ({d})" for f in sorted(Path(path).iterdir()) if (d := damage(f))), None)
            if why is None:
                continue
        elif os.path.lexists(path):
            why = damage(path)
            if why is None:
                continue
            why = f"damaged ({why})"
        else:
            why = "missing"
        producer = next((r for r in rules if r.is_producer(path)), None)
        if producer is None:  # made by a rule this workflow no longer has
            continue
        wildcards = producer.get_wildcards(path) or {}
        repairs.append(Repair(path, why, producer.name, tuple(sorted((k, str(v)) for k, v in wildcards.items()))))
    return repairs


def describe(repairs: list[Repair], shown: int = 3) -> str:
    """The repaired files in a few words: ``N result file(s) of an earlier run are missing or damaged (a, b, ...)``."""
    names = ", ".join(f"{r.path}{'' if r.why == 'missing' else ' ' + r.why}" for r in repairs[:shown])
    more = ", ..." if len(repairs) > shown else ""
    return f"{len(repairs)} result file(s) of an earlier run are missing or damaged ({names}{more})"
