"""Progress journal of a long measuring job: one JSON line per finished configuration, fsynced; and one per model
iteration timed in a rotation (its `e2e` row and samples: the reference the configurations measured around it are
checked against, which a resumed job must not lose).

Snakemake deletes a job's declared outputs before running it, so the journal lives in an undeclared side folder
(``results/journal/``). A restarted job loads the journal, skips what it holds, and measures the rest: a kill at any
moment loses at most the configuration in flight. A torn last line (killed mid-write) is ignored.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from pathlib import Path

import pandas as pd

log = logging.getLogger(__name__)


def settings_key(*parts) -> str:
    """A short hash of what makes journaled measurements reusable (timing settings, device, threads...)."""
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _clean(v):
    """JSON-able scalar: NaN and pandas' NA become null, numpy scalars plain Python values."""
    if v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "item"):  # numpy scalars
        return _clean(v.item())
    return v


class Journal:
    def __init__(self, path):
        self.path = Path(path)

    def _entries(self, warn: bool = True):
        """The journal's entries in order; a torn line (killed mid-write) is skipped."""
        if not self.path.exists():
            return
        with open(self.path) as f:
            for line in f:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    if warn:
                        log.warning("journal %s: ignoring a torn line", self.path)

    @staticmethod
    def _collect(entries) -> tuple[list[dict], list[dict]]:
        rows, samples = [], []
        for entry in entries:
            rows += entry["rows"]
            samples += entry["samples"]
        return rows, samples

    def load(self, keep_ids=None) -> tuple[list[dict], list[dict]]:
        """(rows, samples) of the configurations already done (restricted to ``keep_ids`` when given)."""
        return self._collect(e for e in self._entries() if not e.get("e2e")
                             and (keep_ids is None or e["config_id"] in keep_ids))

    def load_e2e(self) -> tuple[list[dict], list[dict]]:
        """(rows, samples) of the model iterations journaled by :meth:`append_e2e`."""
        return self._collect(e for e in self._entries(warn=False) if e.get("e2e"))

    def append(self, rows: list[dict], samples: list[dict]) -> None:
        if not rows:
            return
        self._write({"config_id": rows[0]["config_id"], **self._entry(rows, samples)})

    def append_e2e(self, rows: list[dict], samples: list[dict]) -> None:
        """Journal the `e2e` row (and samples) of a model iteration timed in a rotation."""
        if rows:
            self._write({"e2e": True, **self._entry(rows, samples)})

    @staticmethod
    def _entry(rows: list[dict], samples: list[dict]) -> dict:
        return {"rows": [{k: _clean(v) for k, v in r.items()} for r in rows],
                "samples": [{k: _clean(v) for k, v in s.items()} for s in samples]}

    def _write(self, entry: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
