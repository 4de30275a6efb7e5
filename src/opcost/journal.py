"""Progress journal of a long measuring job: one JSON line per finished configuration, fsynced; and one per model
iteration timed in a rotation (its `e2e` row and samples: the reference the configurations measured around it are
checked against, which a resumed job must not lose).

Snakemake deletes a job's declared outputs before running it, so the journal lives in an undeclared side folder
(``results/journal/``). A restarted job loads the journal, skips what it holds, and measures the rest: a kill at any
moment loses at most the configuration in flight. A damaged line (torn by a kill mid-write, or bytes that are not a
journal entry) is skipped with a warning: its configuration is measured again.

A job that has written its outputs marks its journal complete (:meth:`Journal.complete`). A job that starts on one of
its own runs with other settings discards it and measures afresh (:func:`for_job`); one forced to run again
(``-R``, ``-F``) discards a completed journal too; otherwise a completed journal at the same settings serves the rerun
(its outputs deleted or damaged, a workload added to its catalogue): what it holds that the job still measures is
kept, and the rest measured.

Beside it, the job's :class:`RunMark` makes a plain rerun redo the job when its last run failed or was stopped.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import time
import uuid
from pathlib import Path

import pandas as pd

from opcost.errors import OpcostError
from opcost.io import write_json

log = logging.getLogger(__name__)

FOLDER = "results/journal"  # the workflow's journals and run marks (undeclared: Snakemake leaves them alone)
# the journal's format: part of every key, so that journals of an older opcost (which had no completion mark) are
# never resumed
FORMAT = 2
_FIX = "delete it and rerun (the configurations it holds are measured again)"


def settings_key(*parts) -> str:
    """A short hash of what makes journaled measurements reusable (timing settings, device, threads...)."""
    return hashlib.sha1(json.dumps((FORMAT, *parts), sort_keys=True, default=str).encode()).hexdigest()[:10]


def for_job(folder, job: str, key: str, keep_completed: bool = False) -> Journal:
    """The journal of ``job`` (a name unique to one job of the workflow) measuring with settings ``key``
    (:func:`settings_key`), ``folder/{job}_{key}.jsonl``, holding at most the measurements of this job's interrupted
    run: the job's journals of other settings are discarded, one log line each, and so is a journal this job
    completed unless ``keep_completed`` (the caller then reuses it whole or calls :meth:`Journal.discard`)."""
    folder = Path(folder)
    journal = Journal(folder / f"{job}_{key}.jsonl")
    mine = re.compile(re.escape(job) + r"_[0-9a-f]+\.jsonl")
    stale = sorted(p for p in folder.glob(f"{job}_*.jsonl") if mine.fullmatch(p.name) and p != journal.path)
    for path in stale:
        log.info("journal %s: of this job's run with other settings: discarded", path)
        path.unlink()
    if not keep_completed and journal.completed():
        journal.discard("of a run that completed")
    return journal


PROFILE_JOB = "profile_iter{n}_chunk{chunk}"  # the name of a profiling job (its journal's and run mark's)


def profile_job(iteration: int, chunk: int) -> str:
    """The name of the profiling job of loop ``iteration`` and ``chunk``."""
    return PROFILE_JOB.format(n=int(iteration), chunk=int(chunk))


def _clean(v):
    """JSON-able scalar: NaN and pandas' NA become null, numpy scalars plain Python values."""
    if v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "item"):  # numpy scalars
        return _clean(v.item())
    return v


def _damage(entry) -> str | None:
    """What makes a decoded line no journal entry (None: a good entry or the completion mark)."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    if entry.get("complete") is True:
        return None
    if not all(isinstance(entry.get(k), list) and all(isinstance(x, dict) for x in entry[k])
               for k in ("rows", "samples")):
        return "no rows and samples"
    if not entry.get("e2e") and not isinstance(entry.get("config_id"), str):
        return "no configuration id"
    return None


class Journal:
    def __init__(self, path):
        self.path = Path(path)

    def unusable(self, why: str) -> OpcostError:
        """The one-line error of a journal that cannot be resumed at all."""
        return OpcostError(f"journal {self.path}", f"{why}: {_FIX}")

    def _lines(self) -> list[bytes]:
        try:
            with open(self.path, "rb") as f:
                return f.read().split(b"\n")
        except FileNotFoundError:
            return []
        except OSError as e:  # a folder in its place, no permission to read it...
            raise self.unusable(f"unreadable ({e.strerror or e})") from None

    def _entries(self, warn: bool = True):
        """The journal's entries in order (the completion mark included); a damaged line (torn by a kill mid-write,
        bytes that are not UTF-8 or not a journal entry) is skipped, with a warning naming the file and line."""
        lines = self._lines()
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw.decode("utf-8"))
                why = _damage(entry)
            except UnicodeDecodeError:
                why = "bytes that are not UTF-8"
            except ValueError:  # the last line has no end of line when a kill tore it mid-write
                why = "torn by a kill mid-write" if number == len(lines) else "not JSON"
            if why is None:
                yield entry
            elif warn:
                log.warning("journal %s: line %d skipped, damaged (%s): what it held is measured again", self.path,
                            number, why)

    def discard(self, why: str) -> None:
        """Delete the journal (its run's measurements are not resumed), with a log line saying ``why``."""
        log.info("journal %s: %s: discarded, measuring afresh", self.path, why)
        self.path.unlink(missing_ok=True)

    def completed(self) -> bool:
        """Whether the job that wrote this journal completed: a line of it is the mark of :meth:`complete` (a job
        discards a completed journal before it starts, so nothing is journaled after the mark but damage)."""
        try:
            with open(self.path, "rb") as f:
                lines = f.read().split(b"\n")
        except FileNotFoundError:
            return False
        except OSError as e:  # a folder in its place, no permission to read it...
            raise self.unusable(f"unreadable ({e.strerror or e})") from None
        for line in reversed(lines):
            if b'"complete"' not in line:
                continue
            try:
                if json.loads(line.decode()).get("complete") is True:
                    return True
            except (ValueError, AttributeError):  # a damaged line
                continue
        return False

    @staticmethod
    def _collect(entries) -> tuple[list[dict], list[dict]]:
        rows, samples = [], []
        for entry in entries:
            rows += entry["rows"]
            samples += entry["samples"]
        return rows, samples

    def load(self, keep_ids=None) -> tuple[list[dict], list[dict]]:
        """(rows, samples) of the configurations already done (restricted to ``keep_ids`` when given)."""
        return self._collect(e for e in self._entries() if "rows" in e and not e.get("e2e")
                             and (keep_ids is None or e["config_id"] in keep_ids))

    def config_ids(self) -> set[str]:
        """The configurations the journal holds measurements of."""
        return {e["config_id"] for e in self._entries(warn=False) if "rows" in e and not e.get("e2e")}

    def load_e2e(self) -> tuple[list[dict], list[dict]]:
        """(rows, samples) of the model iterations journaled by :meth:`append_e2e`."""
        return self._collect(e for e in self._entries(warn=False) if "rows" in e and e.get("e2e"))

    def append(self, rows: list[dict], samples: list[dict]) -> None:
        if not rows:
            return
        self._write({"config_id": rows[0]["config_id"], **self._entry(rows, samples)})

    def append_e2e(self, rows: list[dict], samples: list[dict]) -> None:
        """Journal the `e2e` row (and samples) of a model iteration timed in a rotation."""
        if rows:
            self._write({"e2e": True, **self._entry(rows, samples)})

    def complete(self) -> None:
        """Mark the journal's run complete (its job has written its outputs): a later run of the job measures
        afresh instead of resuming it."""
        self._write({"complete": True, "at": time.time()})

    @staticmethod
    def _entry(rows: list[dict], samples: list[dict]) -> dict:
        return {"rows": [{k: _clean(v) for k, v in r.items()} for r in rows],
                "samples": [{k: _clean(v) for k, v in s.items()} for s in samples]}

    def _write(self, entry: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as f:
            if f.tell() and not self._ends_with_newline():  # a torn last line (killed mid-write) is ended, not extended
                f.write(b"\n")
            f.write(json.dumps(entry).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"


_RENEWED: dict[Path, str] = {}  # run marks renewed in this process (RunMark.renew), a dry run's included


class RunMark:
    """Makes a plain rerun redo a job whose last run failed or was stopped.

    Snakemake deletes the outputs of a job that fails, and does not redo a job whose outputs are missing while the
    files made from them exist and are up to date: after a rerun forced with ``-R`` or ``--forceall`` failed, or was
    killed, in the job, a plain rerun says "Nothing to be done". It does redo a job whose params changed since its
    last run. The mark's :meth:`token` is part of the job's params: the job sets a new one when it starts
    (:meth:`start`) and puts back the one it was scheduled with when it completes (:meth:`done`), so the params differ
    from those Snakemake recorded exactly when the job's last run did not complete."""

    def __init__(self, folder, job: str):
        self.path = Path(folder) / f"{job}.run"

    def _read(self) -> dict:
        try:
            mark = json.loads(self.path.read_text())
        except (OSError, ValueError):  # none yet (or damaged: the job reruns when Snakemake says so)
            return {}
        return mark if isinstance(mark, dict) else {}

    def token(self) -> str:
        """The job's params part: empty until a run of the job fails or is stopped, or the job is renewed."""
        return _RENEWED.get(self.path) or str(self._read().get("token", ""))

    def unfinished(self) -> bool:
        """Whether the job's last run started and did not complete."""
        return self._read().get("running") is True

    def start(self) -> str:
        """Mark the job running; returns the token it was scheduled with, for :meth:`done`."""
        before = self.token()
        self._write({"token": uuid.uuid4().hex[:12], "running": True})
        return before

    def renew(self, persist: bool = True) -> str:
        """A new token for a job that is not running, so that Snakemake redoes it (a repair, :mod:`opcost.repair`):
        written to the mark, which the job puts back when it completes; with ``persist`` false (a dry run), held in
        this process only."""
        token = uuid.uuid4().hex[:12]
        if persist:
            self._write({"token": token, "running": False})
        _RENEWED[self.path] = token
        return token

    def done(self, before: str) -> None:
        """Mark the job complete: its token is again the one it was scheduled with (``before``)."""
        if before:
            self._write({"token": before, "running": False})
        else:
            self.path.unlink(missing_ok=True)

    def _write(self, mark: dict) -> None:
        write_json(mark, self.path)


def job_of(rule: str, wildcards) -> str:
    """The name of the job of ``rule`` with ``wildcards`` (name -> value): the name of its run mark."""
    return rule + "".join(f"_{k}-{v}" for k, v in sorted(dict(wildcards).items()))


def run_marked(params, rule: str, folder=FOLDER):
    """A rule's params function: ``params(wildcards)`` and the :class:`RunMark` of the job (:func:`job_of`), so that
    a plain rerun redoes the job when its last run did not complete. The job's script sets and clears the mark
    (:func:`opcost.rule.run_rule`)."""

    def with_mark(wildcards):
        token = RunMark(folder, job_of(rule, wildcards.items())).token()
        return params(wildcards) + (f" run mark {token}" if token else "")

    return with_mark


def unfinished(folder=FOLDER) -> list[str]:
    """The jobs whose last run started and did not complete (failed or stopped): the next run redoes them."""
    return sorted(p.stem for p in Path(folder).glob("*.run") if RunMark(folder, p.stem).unfinished())
