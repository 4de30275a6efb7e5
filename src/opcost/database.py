"""The operator database: the configuration catalogue and the merged measurement tables under results/db/."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opcost import io
from opcost.errors import OpcostError
from opcost.model.modes import op_mode
from opcost.model.workload import workload_keys
from opcost.tables import CONFIGS, DEFAULT_STATISTIC, E2E, LAYERS, MEASUREMENTS, OVERHEADS, STATISTICS, frame


def catalog(layers: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration id over all workloads (the profiling work list), with the models using it."""
    if layers.empty:
        return frame(CONFIGS, [])
    models = layers.groupby("config_id")["model"].agg(lambda s: json.dumps(sorted(set(s))))
    calls = layers["count"].astype(int).groupby([layers["config_id"], workload_keys(layers)], sort=False).sum()
    workloads = {cid: json.dumps({w: int(n) for w, n in g.droplevel(0).items()})
                 for cid, g in calls.groupby(level=0, sort=False)}
    first = layers.drop_duplicates("config_id", keep="first").set_index("config_id")
    out = first.assign(models=models, workload=workload_keys(first), workloads=first.index.map(workloads),
                       mode=first["mode"].map(op_mode)).reset_index()  # decode steps' operators: inference
    return frame(CONFIGS, out[CONFIGS.names])


def of_workload(table: pd.DataFrame, model: str, batch: int, mode: str) -> pd.DataFrame:
    """The rows of one workload (``model``, ``batch``, ``mode`` columns) of any table."""
    return table[(table["model"] == model) & (table["batch"] == batch) & (table["mode"] == mode)]


def variant(rows: pd.DataFrame) -> tuple[set, set]:
    """What of a workload does not change with its batch or mode: its modules' constructor parameters and the
    dtypes its operators take."""

    def built(params: str) -> str:  # the constructor's parameters, without what a call passed (tensors, kwargs)
        try:
            kept = {k: v for k, v in json.loads(params).items() if k != "kwargs" and '"T"' not in json.dumps(v)}
        except (ValueError, AttributeError, TypeError):
            return str(params)
        return json.dumps(kept, sort_keys=True)

    modules = rows[rows["scope"] == "module"]
    dtypes = set()
    for specs in rows["inputs"]:
        dtypes |= set(re.findall(r'"dtype":\s*"((?:b?float|complex)[0-9]+)"', str(specs)))  # floating only
    return set(zip(modules["op_type"], modules["params"].map(built))), dtypes


def variant_difference(held: pd.DataFrame, fresh: pd.DataFrame) -> str | None:
    """How the model the database ``held`` (its `layers` rows at any batch or mode) differs from the ``fresh``
    extraction of the same name (None: the same variant): another module, other constructor parameters or
    another dtype."""
    (h_mod, h_dt), (f_mod, f_dt) = variant(held), variant(fresh)
    if h_dt and f_dt and h_dt != f_dt:
        return f"dtype {', '.join(sorted(h_dt))} there, {', '.join(sorted(f_dt))} now"
    only_held, only_fresh = sorted(h_mod - f_mod), sorted(f_mod - h_mod)
    if not (only_held or only_fresh):
        return None
    if only_held and only_fresh and only_held[0][0] == only_fresh[0][0]:  # one module type, other parameters
        try:
            a, b = json.loads(only_held[0][1]), json.loads(only_fresh[0][1])
            keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)][:3]
            return (f"{only_held[0][0]} with " + ", ".join(f"{k} {a.get(k)}" for k in keys) + " there, "
                    + ", ".join(f"{k} {b.get(k)}" for k in keys) + " now")
        except (ValueError, AttributeError):
            pass
    return "its modules differ: " + "; ".join([f"{only_held[0][0]} only there"] * bool(only_held)
                                              + [f"{only_fresh[0][0]} only now"] * bool(only_fresh))


MEASUREMENT_KEY = ("config_id", "source", "phase", "workload", "device", "placement")


def latest(measurements: pd.DataFrame, keys=MEASUREMENT_KEY, preferred: pd.Series | None = None) -> pd.DataFrame:
    """The most recent row per key (a re-measurement supersedes the earlier one); with ``preferred`` (a boolean or
    integer Series on the rows), a preferred row (the highest rank) before any other, then the most recent."""
    if measurements.empty:
        return measurements
    keys = [k for k in keys if k in measurements.columns]
    if preferred is None:
        return measurements.sort_values("timestamp").drop_duplicates(keys, keep="last")
    ranked = measurements.assign(_preferred=preferred).sort_values(["_preferred", "timestamp"])
    return ranked.drop_duplicates(keys, keep="last").drop(columns="_preferred")


DB_TABLES = {"configs": CONFIGS, "layers": LAYERS, "measurements": MEASUREMENTS, "e2e": E2E, "overheads": OVERHEADS}
IDENTITY = {"configs": ["config_id"], "layers": ["model", "batch", "mode", "config_id"]}
RUN_TABLES = ("measurements", "e2e", "overheads")  # the tables whose rows name their run (column `run`)


def is_db(path) -> bool:
    """Whether ``path`` is a directory holding at least one opcost table."""
    path = Path(path)
    return path.is_dir() and any((path / f"{name}.parquet").exists() for name in DB_TABLES)


# what a prediction lacks where a database directory lacks the table (merged or copied by hand, a run stopped early)
LACKING = {"configs": "the operator configurations' shapes", "layers": "the models' operator calls",
           "measurements": "every operator's measured cost: each is estimated",
           "e2e": "the end-to-end times: no reference to compare with, the method's error not known",
           "overheads": "the traced overhead between operators: taken from a short trace now, or none"}


def missing_tables(path, names=tuple(DB_TABLES), db: dict | None = None) -> list[str]:
    """One line per table of ``names`` (default: :data:`DB_TABLES`) the database directory ``path`` lacks, or that
    holds no row (``db``: its tables, read), naming it and what an answer from it lacks."""
    return [f"database {path}: " + (f"{name}.parquet holds no row" if (Path(path) / f"{name}.parquet").exists()
                                    else f"no {name}.parquet") + f" ({LACKING[name]})" for name in names
            if not (Path(path) / f"{name}.parquet").exists() or (db is not None and db[name].empty)]


def read_db(path) -> dict[str, pd.DataFrame]:
    """The tables of a database directory (missing tables are empty; a directory with none of them is refused)."""
    path = Path(path)
    if not path.is_dir():
        raise OpcostError(f"database {path}", "not a directory")
    if not is_db(path):
        raise OpcostError(f"database {path}", f"holds no opcost table ({', '.join(f'{n}.parquet' for n in DB_TABLES)}"
                                              "): a run's database is results/db")
    return {name: io.read_parquet(path / f"{name}.parquet", t) if (path / f"{name}.parquet").exists()
            else frame(t, []) for name, t in DB_TABLES.items()}


def run_id(db: dict) -> str | None:
    """The name of the run a run's own database holds: the earliest `timestamp` of its measurement and end-to-end
    rows that name no run, i.e. the run's first measurement (None when none has a timestamp). The same database
    always gets the same name, so merging it again adds no row."""
    measured = ("measurements", "e2e")  # an `overheads` row bears the time of an end-to-end row
    stamps = pd.concat([db[t].loc[db[t]["run"].isna(), "timestamp"] for t in measured], ignore_index=True)
    stamps = stamps.dropna()
    return str(stamps.min()) if len(stamps) else None


def name_runs(db: dict) -> dict:
    """``db`` with its rows that name no run named by :func:`run_id` (rows merged earlier keep their run)."""
    run = run_id(db)
    if run is None:
        return db
    return {**db, **{t: db[t].assign(run=db[t]["run"].fillna(run)) for t in RUN_TABLES}}


def runs(table: pd.DataFrame) -> pd.Series:
    """Each row's run (`run` column); the rows of a run's own database, which name none, are one run: ``""``."""
    if "run" not in table:
        return pd.Series("", index=table.index, dtype="string")
    return table["run"].astype("string").fillna("")


def runs_table(db: dict) -> pd.DataFrame:
    """One row per run and measuring conditions the database holds (a merged database holds several; a run's own
    database one, its run named by :func:`run_id`): ``run``, ``host``, ``processor`` (the GPU's name, else the
    CPU's), ``device``, ``threads``, ``torch``, the ``first`` and ``last`` timestamp of its rows, the
    ``configurations`` it measured and the ``workloads`` it timed end to end."""
    named = name_runs(db)
    keys = ["run", "host", "processor", "device", "threads", "torch"]
    parts = []
    for name in ("measurements", "e2e"):
        t = named[name]
        if not len(t):
            continue
        proc = t["gpu_name"].astype("string").fillna(t["cpu_model"].astype("string"))
        parts.append(pd.DataFrame({"run": runs(t), "host": t["host"].astype("string"), "processor": proc,
                                   "device": t["device"].astype("string"), "threads": t["threads"].astype("string"),
                                   "torch": t["torch_version"].astype("string"), "timestamp": t["timestamp"],
                                   "config": t["config_id"] if name == "measurements" else pd.NA,
                                   "workload": workload_keys(t) if name == "e2e" else pd.NA}))
    if not parts:
        return pd.DataFrame(columns=[*keys, "first", "last", "configurations", "workloads"])
    rows = pd.concat(parts, ignore_index=True)
    rows[keys] = rows[keys].fillna("-")
    out = rows.groupby(keys, dropna=False).agg(first=("timestamp", "min"), last=("timestamp", "max"),
                                               configurations=("config", "nunique"),
                                               workloads=("workload", "nunique"))
    return out.reset_index().sort_values(["first", "run", "host"], ignore_index=True)


def _out_db(out: Path) -> dict | None:
    """The database already at ``out``, merged into (None when ``out`` is new or an empty directory); a file or a
    directory of other files is refused, before anything is written."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise OpcostError(f"--out {out}", "is a file, not a database directory: name a new or empty directory, or "
                                          "an existing database to merge into")
    if is_db(out):
        if (out.resolve().parent / "journal").is_dir():  # results/db beside results/journal: a run's own database
            raise OpcostError(f"--out {out}", "is a workflow run's own database, which its next run validates as "
                                              "that run's alone: merge into another directory")
        return read_db(out)
    if any(out.iterdir()):
        raise OpcostError(f"--out {out}", "holds other files and no opcost table: name a new or empty directory, or "
                                          "an existing database to merge into")
    return None


def _dedup_subset(name: str, df: pd.DataFrame) -> list[str] | None:
    """The columns that identify a row of table ``name``: configurations and layer rows by identity, run-named
    rows by every column but `run` (the same measurement merged again keeps the run it was first merged with)."""
    if name in RUN_TABLES:
        return [c for c in df.columns if c != "run"]
    return IDENTITY.get(name)


def merge(paths, out) -> dict[str, pd.DataFrame]:
    """Merge databases from several machines or runs into ``out``: a database already at ``out`` is one more input
    (its rows are kept; a directory holding other files is refused); a row present in several inputs is kept once
    (configurations and layer rows by identity, the others by every column but their run), so merging is
    idempotent. The measurement, end-to-end and overhead rows of each input that name no run are named by
    :func:`run_id`, so that predictions can take a workload's costs and reference from one run. Every input is
    read before anything is written; each table is written atomically."""
    out = Path(out)
    existing = _out_db(out)
    dbs, seen = ([existing], [out]) if existing is not None else ([], [])
    for p in paths:  # each directory once, the one at ``out`` included
        if Path(p).resolve() not in {s.resolve() for s in seen}:
            seen.append(Path(p))
            dbs.append(read_db(p))
    dbs = [name_runs(db) for db in dbs]
    _same_variants(dbs, seen)
    merged = {}
    for name, table in DB_TABLES.items():
        parts = [db[name] for db in dbs if len(db[name])]
        df = pd.concat(parts, ignore_index=True) if parts else frame(table, [])
        merged[name] = df.drop_duplicates(subset=_dedup_subset(name, df), keep="first").reset_index(drop=True)
    for name, table in DB_TABLES.items():
        io.write_parquet(merged[name], out / f"{name}.parquet", table)
    return merged


def _same_variants(dbs: list[dict], names: list) -> None:
    """Refuse a merge where one model name stands for two variants (another module, size or dtype) in two inputs:
    every prediction of that name would then be refused, and its costs and references would mix two models."""
    first: dict[str, tuple] = {}
    for db, name in zip(dbs, names):
        layers = db["layers"]
        for model, rows in layers.groupby("model", sort=False):
            if model not in first:
                first[model] = (rows, name)
            elif diff := variant_difference(first[model][0], rows):
                raise OpcostError(f"model {model}", f"is another variant in {name} than in {first[model][1]} ({diff}): "
                                                    "merge each variant into a database of its own, or profile one "
                                                    "under another name")


@dataclass(frozen=True)
class Filter:
    """Which measurements :func:`show` keeps: ``op`` (op type or full op name), ``device``, ``placement``,
    ``source``, ``host``, ``mode``, ``phase`` by equality; ``params`` by the value of each named parameter (as text:
    ``{"kernel_size": "[3, 3]"}`` or ``"[3,3]"``); ``shape`` by an input shape (``8,64,56,56``). None: any."""
    op: str | None = None
    device: str | None = None
    placement: str | None = None
    source: str | None = None
    host: str | None = None
    mode: str | None = None
    phase: str | None = None
    params: dict[str, str] | None = None
    shape: str | None = None


def why_none(db: dict, where: Filter) -> str:
    """Why :func:`show` kept nothing: the first filter no measurement matches on its own, with the nearest values the
    database holds (a misspelt op type); else that the filters match nothing together."""
    import difflib

    m = db["measurements"]
    asked = [("op", where.op, sorted(set(m["op_type"].astype(str))))]
    asked += [(name, getattr(where, name), sorted(set(m[name].dropna().astype(str))))
              for name in ("device", "placement", "source", "host", "mode", "phase")]
    for name, value, held in asked:
        if value is not None and str(value) not in held and not (name == "op" and value in set(db["configs"]["op"])):
            near = difflib.get_close_matches(str(value), held, n=3, cutoff=0.6)
            return (f"no measurement has {name} {value!r}" + (f" (closest: {', '.join(near)})" if near else "")
                    + (f"; the database holds: {', '.join(held[:20])}{' ...' if len(held) > 20 else ''}"))
    given = [f"{k} {v}" for k, v in (("op", where.op), ("device", where.device), ("placement", where.placement),
                                     ("source", where.source), ("host", where.host), ("mode", where.mode),
                                     ("phase", where.phase), ("shape", where.shape)) if v is not None]
    given += [f"param {k}={v}" for k, v in (where.params or {}).items()]
    return f"no measurement matches {', '.join(given)} together" if given else "the database holds no measurement"


def show(db: dict, where: Filter = Filter(), statistic: str | None = None) -> pd.DataFrame:
    """Measurements with their operator, parameters and input shapes, those ``where`` keeps (:class:`Filter`).
    ``cost_s`` is ``statistic`` (default: the one predictions use) per call; ``median_ci_low_s`` and
    ``median_ci_high_s`` the 95% confidence interval of the median, whatever ``statistic``."""
    col = STATISTICS[statistic or DEFAULT_STATISTIC]
    m = db["measurements"].merge(db["configs"][["config_id", "op", "params", "inputs"]], on="config_id", how="left")
    if where.op is not None:
        m = m[(m["op_type"] == where.op) | (m["op"] == where.op)]
    for name in ("device", "placement", "source", "host", "mode", "phase"):
        if (val := getattr(where, name)) is not None:
            m = m[m[name].astype(str) == str(val)]
    compact = lambda v: json.dumps(v, separators=(",", ":")) if not isinstance(v, str) else v  # noqa: E731
    for key, want in (where.params or {}).items():
        want = str(want).replace(" ", "")
        if want[:1] in "[{":  # a list or a mapping, as params hold them: it must parse as one
            try:
                json.loads(want)
            except ValueError:
                raise OpcostError(f"--param {key}={want}", "the value is no well-formed list or mapping (as in "
                                                           "kernel_size=[3,3])") from None
        m = m[m["params"].map(lambda p: p is not None and not pd.isna(p) and key in json.loads(p)
                              and compact(json.loads(p)[key]).strip('"') == want.strip('"'))]
    if where.shape is not None:
        parts = [d.strip() for d in str(where.shape).replace("x", ",").split(",")]
        if not parts or not all(d.isdigit() for d in parts):
            raise OpcostError(f"--shape {where.shape}", "expected an input's sizes as whole numbers, e.g. 8,64,56,56")
        dims = [int(d) for d in parts]
        m = m[m["inputs"].map(lambda s: s is not None and not pd.isna(s)
                              and any(t.get("T") == dims for t in json.loads(s) if isinstance(t, dict)))]
    # the stored interval is the median's: named so beside a cost_s that may be another statistic
    m = m.assign(cost_s=m[col], shapes=m["inputs"].map(_shapes), median_ci_low_s=m["ci_low_s"],
                 median_ci_high_s=m["ci_high_s"])
    cols = ["config_id", "op_type", "mode", "phase", "source", "host", "device", "threads", "placement", "cost_s",
            "median_ci_low_s", "median_ci_high_s", "n", "noisy", "status", "params", "shapes"]
    return m[cols].sort_values(["op_type", "config_id", "phase"]).reset_index(drop=True)


def _shapes(inputs) -> str:
    """``8x64x56x56, 64`` from a `configs` row's inputs JSON (tensors only)."""
    if inputs is None or pd.isna(inputs):
        return ""
    return ", ".join("x".join(map(str, t["T"])) for t in json.loads(inputs) if isinstance(t, dict) and "T" in t)
