"""How far predictions of models never profiled came out on this host: the interval of such a prediction rests on it.

The run's `predict_only` workloads are extracted and timed end to end, never profiled, and predicted from the run's
database as ``opcost predict`` predicts any model (the `unseen` stage, :func:`opcost.stages.analysing.
predict_unseen`). Their log errors, kept beside the database (table `calibration`, :data:`opcost.tables.
CALIBRATION`), are draws of the very error a new model's prediction makes: their predictive spread
(:func:`opcost.analysis.heldout.model_spread`) bounds the estimated part of a prediction on the same conditions and
mode (:func:`opcost.analysis.interval.workload_interval`). The cost model's own held-out models (leave-model-out)
answer instead where no such rows exist: they are the few models the study profiled, each left out with operators
no sweep covers (an embedding model's tables), and their spread said a model never profiled could be off x2.3 where
the models drawn at random from timm and transformers were off by 9% in the median.

Rows hold a fingerprint of the database files they were predicted from: after a stage's rerun or ``opcost db
merge`` they no longer describe the database's predictions and are not used (the held-out spread answers).
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from opcost import io
from opcost.tables import CALIBRATION, frame

FILE = "calibration.parquet"
PREDICTED_FROM = ("measurements", "layers", "e2e", "overheads")  # the database files a prediction reads


@dataclass(frozen=True)
class ModelSpread:
    """The 90% predictive half-width of a model's log error, from ``models`` models, and what it rests on;
    ``whole``: errors of whole predictions against end-to-end times (the method's own error between operators and
    the timings' spread inside them), not of summed operator estimates against measured costs."""

    half: float
    models: int
    basis: str
    whole: bool = False


def fingerprint(db_dir) -> str:
    """The database files' sizes and SHA-1s, one token each (a missing file: its name alone). A prediction asks for
    it every time (generate() predicts each of its steps): each file is hashed once per size and modification time."""
    stamps = []
    for name in PREDICTED_FROM:
        path = Path(db_dir) / f"{name}.parquet"
        st = path.stat() if path.exists() else None
        stamps.append((name, str(path), st.st_size if st else None, st.st_mtime_ns if st else None))
    return ";".join(_token(*stamp) for stamp in stamps)


@functools.lru_cache(maxsize=64)
def _token(name: str, path: str, size: int | None, mtime_ns: int | None) -> str:
    """One file's token of :func:`fingerprint` (its size and modification time: the cache's key)."""
    if size is None:
        return name
    return f"{name}:{size}:{hashlib.sha1(Path(path).read_bytes()).hexdigest()[:16]}"


def _with_log_error(predictions: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``predictions`` with a predicted and a measured time, and their ``log_error``."""
    p = predictions[(predictions["measured_s"].astype(float) > 0) & (predictions["predicted_s"].astype(float) > 0)]
    return p.assign(log_error=np.log(p["predicted_s"].astype(float) / p["measured_s"].astype(float)))


def write(predictions: pd.DataFrame, conditions: pd.Series, db_dir, out) -> pd.DataFrame:
    """The `calibration` table of the `predict_only` workloads' ``predictions`` (`predictions` rows with
    `estimated_share`; ``conditions``: each row's condition key), predicted from the database at ``db_dir``,
    written to ``out``."""
    rows = _with_log_error(predictions.assign(conditions=list(conditions))).assign(database=fingerprint(db_dir))
    table = frame(CALIBRATION, rows[list(CALIBRATION.names)])
    io.write_parquet(table, out, CALIBRATION)
    return table


def rows_for(db_dir, conditions: str, mode: str) -> pd.DataFrame:
    """The calibration rows of the database at ``db_dir`` that describe its predictions on ``conditions`` in
    ``mode`` (empty where it has none, or only rows predicted from other files)."""
    path = Path(db_dir) / FILE if db_dir is not None else None
    if path is None or not path.exists():
        return frame(CALIBRATION, [])
    table = io.read_parquet(path, CALIBRATION)
    keep = (table["database"] == fingerprint(db_dir)) & (table["conditions"] == conditions) & (
        table["mode"] == mode) & np.isfinite(table["log_error"].astype(float))
    return table[keep.fillna(False).astype(bool)]


def _spread_of(rows: pd.DataFrame) -> tuple[float, int] | None:
    """(half-width, models) of the ``log_error`` of rows (`calibration`, or :func:`_with_log_error`'s):
    :func:`opcost.analysis.heldout.model_spread`, a model's batch sizes counted once."""
    from opcost.analysis.heldout import model_spread

    if rows.empty:
        return None
    sums = pd.DataFrame({"workload": rows["model"].astype(str) + "/" + rows["mode"].astype(str) + "/b"
                                     + rows["batch"].astype(str), "log_error": rows["log_error"].astype(float)})
    return model_spread(sums, "log_error")


def spread(db_dir, conditions: str, mode: str) -> ModelSpread | None:
    """The predictive spread of a model's log error from the calibration rows (:func:`rows_for`), or None with fewer
    than two models."""
    got = _spread_of(rows_for(db_dir, conditions, mode))
    if got is None:
        return None
    half, models = got
    return ModelSpread(half, models, f"{models} models never profiled (`predict_only`), predicted and timed on "
                                     "this host", whole=True)


def left_out(predictions: pd.DataFrame) -> tuple[float, int, int] | None:
    """(half-width from all, models, models whose error the others' half-width holds) of the `predict_only`
    ``predictions`` of one mode: each model left out in turn, as a model never profiled is predicted; None with
    fewer than three models."""
    p = _with_log_error(predictions)
    every = _spread_of(p)
    if every is None or every[1] < 3:
        return None
    held = 0
    for model, mine in p.groupby("model"):
        half = _spread_of(p[p["model"] != model])[0]
        held += bool((mine["log_error"].abs() <= half).all())
    return every[0], every[1], held
