"""What the cost model of a database is fitted to, and where a fit is kept.

:func:`training_data`: one row per measured configuration and phase, with the workload it was profiled among and
that workload's :func:`context_bytes`; :func:`load_or_fit`: the :class:`~opcost.analysis.costmodel.CostModel` of
those rows, from the user's cache (:func:`cache_path`) when its fingerprint still matches the rows, else fitted
and saved again: a database that changed since is refitted, never answered from a stale model."""
from __future__ import annotations

import hashlib
import logging
import math
import pickle
from pathlib import Path

import numpy as np
import pandas as pd

from opcost.analysis import in_model
from opcost.analysis.costmodel import CONTEXT, FIT_VERSION, MIN_CONFIGS, CostModel
from opcost.analysis.features import features
from opcost.tables import STATISTICS

log = logging.getLogger(__name__)

FILE = "costmodel.pkl"  # its name in the cache folder (:func:`cache_path`), after the database's own folder
CACHE_ENV = "OPCOST_CACHE"  # the cache folder, when set; else $XDG_CACHE_HOME/opcost, else ~/.cache/opcost
_FITTED: dict[str, CostModel] = {}  # this process's fits by fingerprint (a database without a directory)


def context_bytes(layers: pd.DataFrame) -> dict[str, float]:
    """Per workload of ``layers`` (its key, ``model/mode/bN``): log10 of the bytes its operators move in one
    forward pass (Σ count x bytes). An operator's measured cost depends on what the operators around it leave in the
    caches: an inference Dropout, a call that does nothing, measured 6-16 µs among tiny_bert's operators, 8-15 µs
    among convnext_atto's at batch 1 and 10-46 µs at batch 4 (docs/methodology.md, section 11)."""
    from opcost.model.workload import workload_keys

    if layers.empty:
        return {}
    moved = layers["count"].astype(float) * features(layers.assign(phase="forward"))["bytes"].astype(float)
    total = moved.groupby(workload_keys(layers)).sum()
    return {key: math.log10(max(float(v), 1.0)) for key, v in total.items()}


def training_data(layers: pd.DataFrame, used: pd.DataFrame, column: str, configs: pd.DataFrame | None = None,
                  alone: pd.DataFrame | None = None, fitted: in_model.InModel | None = None) -> pd.DataFrame:
    """One row per measured (configuration, phase) of ``used`` (baseline-placement isolated `measurements` of one
    set of conditions): its `layers` description, ``column`` as ``seconds``, the ``workload`` it was profiled among
    and that workload's :func:`context_bytes` (the `configs` table's ``workload``; without ``configs``, the catalogue of
    ``layers``; missing where that workload is not in ``layers``) and its ``count`` of calls per iteration there.
    A plain sweep point's time is its cost inside a model: its type's extra in model order at its time added, from
    ``alone`` (the rows of the sources alone and in order on the same conditions; :mod:`opcost.analysis.in_model`);
    energy is left as measured. ``fitted``: ``alone``'s :func:`opcost.analysis.in_model.fit`, when the caller
    has it."""
    from opcost.database import catalog
    from opcost.model.workload import workload_keys

    desc = layers.drop_duplicates("config_id")[["config_id", "op_type", "mode", "params", "inputs", "outputs"]]
    val = used.groupby(["config_id", "phase"], as_index=False)[column].median().rename(columns={column: "seconds"})
    where = configs if configs is not None and len(configs) else catalog(layers)
    val["workload"] = val["config_id"].map(where.drop_duplicates("config_id").set_index("config_id")["workload"])
    calls = layers.groupby([workload_keys(layers), layers["config_id"]])["count"].sum()
    val["count"] = calls.reindex(pd.MultiIndex.from_arrays([val["workload"], val["config_id"]])).to_numpy()
    val[CONTEXT] = val["workload"].map(context_bytes(layers)).astype(float)
    out = val.merge(desc, on="config_id").dropna(subset=["seconds"])
    if alone is not None and len(alone) and column in STATISTICS.values():
        table = fitted if fitted is not None else in_model.fit(alone, layers, column)
        out["seconds"] = out["seconds"] + in_model_extras(out, table)
    return out


def in_model_extras(rows: pd.DataFrame, table: in_model.InModel) -> np.ndarray:
    """Per training row (``op_type``, ``mode``, ``phase``, ``workload``, ``seconds`` alone; ``params``, ``inputs``,
    ``outputs`` for its bytes): the seconds its time takes more per call in model order, its type's cold roofline
    at that time (:meth:`opcost.analysis.in_model.InModel.extra_of`) for a plain sweep point's row (not a ``block``
    or ``evict`` one), else 0. What a type's calls cost more per iteration is the estimate's
    (:func:`opcost.analysis.estimate.per_iteration_share`)."""
    from opcost.analysis.optypes import family
    from opcost.model.sweep_points import BLOCKED, EVICTED, PREFIX

    work = rows["workload"].astype(str)
    name = work.map(lambda w: w.rsplit("/", 2)[0] if w.count("/") >= 2 else w)
    plain = (work.str.startswith(PREFIX) & ~name.str.endswith(BLOCKED) & ~name.str.endswith(EVICTED)).to_numpy()
    nbytes = np.zeros(len(rows))
    if plain.any():  # the bytes only of the rows that take an extra
        nbytes[plain] = features(rows[plain])[in_model.FETCHED].to_numpy(dtype=float)
    return np.array([table.extra_of(t, family(t), m, ph, s, b) if p else 0.0
                     for t, m, ph, s, b, p in zip(rows["op_type"], rows["mode"], rows["phase"], rows["seconds"],
                                                  nbytes, plain)], dtype=float)


def fingerprint(used: pd.DataFrame, configs: pd.DataFrame | None = None, alone: pd.DataFrame | None = None) -> str:
    """A digest of the measurement rows a model is fitted to (configuration ids, phases, timestamps; a
    configuration's description is fixed by its id), of the workloads they were profiled among (``configs``) and of
    the rows of source alone that translate the sweep points (``alone``)."""
    h = hashlib.sha256()
    for rows in (used, alone if alone is not None else used.iloc[:0]):
        for col in ("config_id", "phase", "timestamp"):
            h.update("\x00".join(sorted(map(str, rows[col]))).encode() if col in rows else b"")
        h.update(b"\x01")
    if configs is not None and len(configs) and "config_id" in used:
        among = configs[configs["config_id"].isin(set(used["config_id"]))]
        h.update("\x00".join(sorted(f"{c}={w}" for c, w in zip(among["config_id"], among["workload"]))).encode())
    return h.hexdigest()[:16]


_FITTED: dict[str, CostModel] = {}  # this process's fits by fingerprint (a database without a directory)


def cache_path(db_dir) -> Path:
    """Where the fitted cost models of the database folder ``db_dir`` are kept: a file of the user's cache folder
    (``$OPCOST_CACHE``, else ``$XDG_CACHE_HOME/opcost``, else ``~/.cache/opcost``) named after the database's
    absolute path, never inside the database, which commands that read it leave as it was. A stale or unreadable
    file is refitted (each model carries the fingerprint of the rows it was fitted on)."""
    import os

    root = os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opcost"
    where = str(Path(db_dir).resolve())
    return Path(root) / f"{Path(where).name}-{hashlib.sha1(where.encode()).hexdigest()[:12]}-{FILE}"


def load_or_fit(db_dir, key: str, layers: pd.DataFrame, used: pd.DataFrame, column: str,
                configs: pd.DataFrame | None = None, alone: pd.DataFrame | None = None) -> CostModel | None:
    """The cost model of ``used`` kept for the database at ``db_dir`` under ``key`` (the conditions) in the cache
    (:func:`cache_path`), refitted and saved again when the rows changed since (or on a load failure); None when
    fewer than :data:`MIN_CONFIGS` rows. ``layers`` and ``configs``: as for :func:`training_data`."""
    fp = fingerprint(used, configs, alone) + column + f"/v{FIT_VERSION}"
    path = cache_path(db_dir) if db_dir is not None else None
    saved = {}
    if path is not None and path.exists():
        try:
            with open(path, "rb") as fh:
                saved = pickle.load(fh)
        except Exception as e:  # an unreadable or incompatible pickle is refitted, not trusted
            log.warning("%s: %s; refitting the cost model", path, e)
            saved = {}
    model = saved.get((key, column))
    if model is not None and model.fingerprint == fp:
        return model
    model = _FITTED.get(fp)  # the same rows fitted in this process (another copy of the database): kept for it too
    if model is None:
        timed = alone is not None and len(alone) and column in STATISTICS.values()
        fitted = in_model.fit(alone, layers, column) if timed else in_model.NONE
        data = training_data(layers, used, column, configs, alone, fitted)
        if len(data) < MIN_CONFIGS:
            return None
        model = CostModel.fit(data)
        model.fingerprint, model.in_model = fp, fitted
        _FITTED[fp] = model
    if path is not None:
        saved[(key, column)] = model
        try:
            from opcost.io import atomic

            path.parent.mkdir(parents=True, exist_ok=True)
            atomic(path, lambda tmp: Path(tmp).write_bytes(pickle.dumps(saved)))
        except OSError as e:  # a cache that cannot be written: the model is fitted again next time
            log.warning("%s: cannot save the cost model (%s)", path, e)
    return model
