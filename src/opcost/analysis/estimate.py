"""Predict any model's iteration from the database: measured costs where it holds the configuration, the cost
model's estimates (:mod:`opcost.analysis.costmodel`) for the rest, plus the overhead between operators.

The measurements used are one set of conditions (host, device, threads: :func:`conditions`); costs from different
machines or thread counts are never mixed. The overhead between operators comes from the nearest evidence the
database holds (:mod:`opcost.analysis.overhead_sources`: the workload's own trace, its model's traces, every
model's traced decode steps, a short trace taken now, the median per call over the database's workloads).

Intervals (:mod:`opcost.analysis.interval`): the estimated part spans the 90% range of a model's summed log error in
the cost model's held-out workloads, in quadrature with the method's own error (isolated costs + modelled overhead
against end-to-end times), never narrower than the timings the prediction rests on; measured parts count as exact.
:attr:`Prediction.widest` names the op type whose estimates widen the interval most.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from opcost.analysis import calibration, optypes
from opcost.analysis.calibration import ModelSpread
from opcost.analysis.composed import compose
from opcost.analysis.costmodel import CONTEXT
from opcost.analysis.interval import Overhead, workload_interval
from opcost.analysis.overhead_sources import (
    decode_overhead,
    is_prefill,
    memory_level_shift,
    on_conditions,
    overhead_now,
    overhead_of,
    overhead_per_call,
    traced_kind,
    traced_overheads,
)
from opcost.analysis.predict import (
    DEFAULT_STATISTIC,
    STATISTICS,
    baseline,
    one_run,
    references,
    rotation_first,
)
from opcost.analysis.training import context_bytes, load_or_fit
from opcost.database import of_workload, runs, variant_difference
from opcost.errors import OpcostError
from opcost.measure.engine import ENGINE_ID, ENGINE_OP_TYPE, engine_cost
from opcost.measure.plain import PROCESS, workload_gap  # the process the costs hold in; a plain one's gap
from opcost.model.modes import op_mode

CONDITIONS = (("host", "--host"), ("device", "--device"), ("threads", "--threads"))


def conditions(measurements: pd.DataFrame, **chosen) -> tuple[pd.DataFrame, dict]:
    """The isolated, baseline-placement, `ok` rows of one host, device and thread count, one per configuration and
    phase (:func:`~opcost.analysis.predict.rotation_first`, as the validation takes them), and that choice. A
    condition not given must be unique in the database; a given one must be present; else an error that names
    the choice to make (``--host``, ``--device``, ``--threads``)."""
    m, picked = _isolated(measurements, **chosen)
    return rotation_first(m, ("config_id", "phase")), picked


def alone_rows(measurements: pd.DataFrame, used: pd.DataFrame) -> pd.DataFrame:
    """The `ok` rows of the sources alone and in order (:mod:`opcost.measure.alone`) on the conditions of ``used``:
    what translates a sweep point's cost into a cost inside a model (:mod:`opcost.analysis.in_model`)."""
    from opcost.measure.alone import IN_ORDER, SOURCE

    ok = measurements["source"].isin([SOURCE, IN_ORDER]) & (measurements["status"] == "ok")
    return on_conditions(measurements[ok], used)


def _isolated(measurements: pd.DataFrame, **chosen) -> tuple[pd.DataFrame, dict]:
    """Every isolated, baseline-placement, `ok` row of the conditions :func:`conditions` chooses, and that choice."""
    m = measurements[(measurements["source"] == "isolated") & (measurements["status"] == "ok")
                     & baseline(measurements)]
    picked = {}
    for col, flag in CONDITIONS:
        held = sorted({str(v) for v in m[col].dropna()})
        want = chosen.get(col)
        if want is not None:
            if str(want) not in held:
                raise OpcostError(f"{flag} {want}", f"the database holds no isolated measurement with {col} {want} "
                                                    f"({col}: {', '.join(held) or 'none'})")
        elif len(held) > 1:
            raise OpcostError("database", f"it holds measurements from several {col} values ({', '.join(held)}): "
                                           f"choose one with {flag}")
        elif not held:
            raise OpcostError("database", "it holds no isolated measurement")
        else:
            want = held[0]
        picked[col] = want
        m = m[m[col].astype(str) == str(want)]
    return m, picked


def condition_key(picked: dict) -> str:
    """The name of one set of conditions (``host=..../device=.../threads=...``): the cost model's key."""
    return "/".join(f"{k}={v}" for k, v in picked.items())


@dataclass
class Prediction:
    """One workload's predicted time (and energy where the database has it), with its interval and parts."""

    model: str
    batch: int
    mode: str
    conditions: dict
    predicted_s: float
    low_s: float
    high_s: float
    estimated_s: float
    overhead_s: float
    overhead_from: str = "all models"  # where overhead_s comes from: one of OVERHEAD_FROM
    measured_s: float | None = None
    predicted_j: float | None = None
    layers: pd.DataFrame = field(default_factory=pd.DataFrame)  # per configuration and phase: cost, method
    tier: str | None = None  # the slower memory tier the operators' tensors are on (None: the fast tier)
    scenario: str | None = None  # which tensors are on it: a key of opcost.analysis.tiers.SCENARIOS
    tier_slowdown: float | None = None  # predicted_s / the same prediction on the fast tier
    tier_measured_share: float | None = None  # share of the fast-tier operator time with a measured slowdown
    run: str | None = None  # the run of the end-to-end reference, whose measured costs are preferred (see `run`)
    runs_s: dict = field(default_factory=dict)  # measured operator seconds per iteration by the run they come from
    runs_held: int = 1  # runs the database holds on these conditions (a merged database: several)
    plain_gap: float | None = None  # a plain process's iteration time over opcost's, minus 1 (plain_gap_of's)
    plain_gap_of: str | None = None  # "this workload", or the median over the database's workloads
    widest: str | None = None  # the op type whose estimates contribute most to the interval's width (None: none)
    interval_basis: str = ""  # what the estimated part's range rests on (opcost.analysis.interval); "": none estimated
    level_s: float = 0.0  # a decode step's operators' loss to a slower memory level (memory_level_shift), seconds
    beyond_share: float = 0.0  # share of the operator time estimated past BEYOND of anything measured of its type
    farthest: str | None = None  # of that part, the op type farthest from a measured configuration of its type

    @property
    def estimated_share(self) -> float:
        ops = self.predicted_s - self.overhead_s
        return min(1.0, self.estimated_s / ops) if ops > 0 else 0.0  # all estimated: 1 up to rounding

    def by_op_type(self) -> pd.Series:
        return self.layers.groupby("op_type")["total_s"].sum().sort_values(ascending=False)

    @property
    def other_runs_share(self) -> float:
        """The share of the measured operator time taken from other runs than :attr:`run`, the end-to-end
        reference's (0: costs and reference of one run, or no reference)."""
        total = sum(self.runs_s.values())
        if total <= 0 or self.run is None:
            return 0.0
        return 1 - self.runs_s.get(self.run, 0.0) / total

    def methods(self) -> dict:
        """Seconds per iteration by where they come from (`measured` or a cost-model method)."""
        return {k: float(v) for k, v in self.layers.groupby("method")["total_s"].sum().items()}

    def as_dict(self) -> dict:
        held = {k: int(v) if k == "threads" and str(v).isdigit() else v for k, v in self.conditions.items()}
        return {"model": self.model, "batch": self.batch, "mode": self.mode, **held,
                "predicted_s": self.predicted_s, "low_s": self.low_s, "high_s": self.high_s,
                "estimated_share": self.estimated_share, "overhead_s": self.overhead_s,
                "overhead_from": self.overhead_from,
                "measured_s": self.measured_s, "predicted_j": self.predicted_j, "tier": self.tier,
                "scenario": self.scenario,
                "tier_slowdown": self.tier_slowdown, "tier_measured_share": self.tier_measured_share,
                "run": self.run or None, "runs_held": self.runs_held, "other_runs_share": self.other_runs_share,
                "runs_s": {k or "(unnamed)": v for k, v in self.runs_s.items()},
                "process": PROCESS.format(threads=self.conditions.get("threads")), "plain_gap": self.plain_gap,
                "plain_gap_of": self.plain_gap_of,
                "plain_s": None if self.plain_gap is None else self.predicted_s * (1 + self.plain_gap),
                "by_method_s": self.methods(), "widest": self.widest,
                "interval_basis": self.interval_basis, "level_s": self.level_s,
                "beyond_share": self.beyond_share, "farthest": self.farthest,
                "top_op_types_s": {k: float(v) for k, v in self.by_op_type().head(10).items()}}


def _phases(layers: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and phase it runs (forward; in training also backward where it has one)."""
    fwd = layers.assign(phase="forward")
    if not (layers["mode"] == "training").any():
        return fwd
    has_bwd = layers["backward"].fillna("{}").map(lambda s: s not in ("{}", "", "null"))
    bwd = layers[(layers["mode"] == "training") & has_bwd].assign(phase="backward")
    return pd.concat([fwd, bwd], ignore_index=True)


def _on_tier(db: dict, rows: pd.DataFrame, used: pd.DataFrame, tier: str, scenario: str | None,
             statistic: str) -> tuple[str, float, float | None]:
    """Scale the operator costs of ``rows`` (in place: cost_s, low_s, high_s) by their slowdowns in ``scenario``
    on ``tier`` (:func:`opcost.analysis.tiers.slowdown_factors`, from the placement measurements on the conditions
    of ``used``; None: the scenario those measurements answer best, :func:`opcost.analysis.tiers.default_scenario`);
    (the scenario, the share of the fast-tier operator time whose slowdown was measured, the workload's end-to-end
    time in that scenario where the database holds a `tier` run)."""
    from opcost.analysis.tiers import (
        default_scenario,
        scenarios,
        slowdown_factors,
        tier_runs,
        unmoved,
    )

    slow = scenarios(on_conditions(db["measurements"], used))
    on_t = slow[slow["tier"] == tier]
    if on_t.empty:
        held = ", ".join(sorted(set(slow["tier"]))) or "none"
        raise OpcostError(f"--tier {tier}", f"the database holds no placement measured with tensors on {tier} on "
                                            f"these conditions (slower tiers: {held})")
    scenario = scenario or default_scenario(on_t)
    in_scenario = on_t[on_t["scenario"] == scenario]
    if scenario != "activations" and not in_scenario["params"].any():
        raise OpcostError(f"--scenario {scenario}", f"no parameters were placed on {tier} (config placement.params: "
                                                    "vary places them); the database answers --scenario activations")
    factor, own = slowdown_factors(rows, in_scenario, unmoved(slow, scenario))
    if not np.isfinite(factor).all():
        phases = ", ".join(sorted(set(rows.loc[~np.isfinite(factor), "phase"])))
        raise OpcostError(f"--tier {tier}", f"the database holds no {phases} placement on {tier}: profile a "
                                            f"{rows['mode'].iloc[0]} workload with placement.tiers first")
    fast = rows["count"].astype(float) * rows["cost_s"]
    share = float(fast[own].sum() / fast.sum()) if fast.sum() > 0 else 1.0
    for col in ("cost_s", "low_s", "high_s"):
        rows[col] = rows[col] * factor
    model, batch, mode = rows["model"].iloc[0], int(rows["batch"].iloc[0]), rows["mode"].iloc[0]
    run = tier_runs(db["e2e"], str(used["device"].iloc[0]), statistic).get((model, batch, mode, tier, scenario), {})
    return scenario, share, run.get("measured_s")


@dataclass(frozen=True)
class OnTier:
    """A slower memory tier the operators' tensors are on, and which of them (``scenario``: a key of
    :data:`opcost.analysis.tiers.SCENARIOS`; None: the one the database answers best)."""

    tier: str
    scenario: str | None = None


def predict_workload(db: dict, layers: pd.DataFrame, db_dir=None, statistic: str | None = None,
                     method: str | None = None, on_tier: OnTier | None = None, run: str | None = None,
                     trace_now: tuple | None = None, trace_keep=None, **chosen) -> Prediction:
    """The prediction for the workload whose `layers` rows are given (from the database or freshly extracted),
    on the conditions ``chosen`` (``host``, ``device``, ``threads``; see :func:`conditions`). ``method``: the cost
    model's estimate for every unmeasured configuration with a law (one of
    :data:`opcost.analysis.costmodel.METHODS`, to compare them); default: the one its cross-validation chose.
    ``on_tier``: with the operators' tensors on that slower memory tier (:class:`OnTier`), each operator's cost
    scaled by its slowdown there (:mod:`opcost.analysis.tiers`; the overhead between operators unchanged).
    ``run``: the run (a merged database holds several, `run` column) whose end-to-end reference the prediction is
    checked against and whose measured costs it prefers; default: the run of the workload's newest end-to-end
    reference (:func:`reference_run`). Costs the run lacks come from other runs: :attr:`Prediction.other_runs_share`.
    ``trace_now``: (model name, config entry) of a workload the database never traced: its overhead between
    operators from a short trace of its own, taken now (:func:`overhead_now`; ``trace_keep``: a folder that keeps
    it for a later call asking the same)."""
    statistic = statistic or DEFAULT_STATISTIC
    tier, scenario = (on_tier.tier, on_tier.scenario) if on_tier is not None else (None, None)
    pool, picked = _isolated(db["measurements"], **chosen)
    used = rotation_first(pool, ("config_id", "phase"))
    model, batch, mode = layers["model"].iloc[0], int(layers["batch"].iloc[0]), layers["mode"].iloc[0]
    e2e = on_conditions(db["e2e"], used)
    run = reference_run(pool, of_workload(e2e, model, batch, mode), run)
    costs = rotation_first(pool, ("config_id", "phase"), run=run) if run is not None else used
    source = CostSource(db_dir, condition_key(picked), STATISTICS[statistic], method)
    rows, cm = _costed(db, layers, costs, used, source)
    fast_ops = float((rows["count"].astype(float) * rows["cost_s"]).sum())
    tier_share = tier_measured = None
    if tier is not None:
        scenario, tier_share, tier_measured = _on_tier({**db, "e2e": one_run(e2e, run)}, rows, used, tier, scenario,
                                                       statistic)
    rows["total_s"] = rows["count"].astype(float) * rows["cost_s"]
    beyond_share, farthest = _beyond(cm, rows)
    per_call = overhead_per_call(db, used, mode, statistic)
    overhead_s, overhead_from = _overhead(db, used, layers, per_call[0], run, picked, trace_now, trace_keep)
    level = memory_level_shift(db, e2e, rows, layers, picked)
    band = workload_interval(db, used, rows, Overhead(overhead_s, overhead_from, per_call), statistic, mode, model,
                             model_spread(cm, db_dir, condition_key(picked), mode))
    centre, low, high, widest = band.centre, band.low, band.high, band.widest
    # the memory level's cost is the least certain part: the interval holds the step with it and without it
    centre, high = centre + level, high + level
    ref = references(of_workload(e2e, model, batch, mode), picked["device"], "isolated", statistic, run)
    energy = rows["count"].astype(float) * rows["energy_j"]
    gap, gap_of = workload_gap(one_run(e2e, run), model, batch, mode)
    by_run = rows[rows["method"] == "measured"].dropna(subset=["run"]).groupby("run")["total_s"].sum()
    est_rows = ~rows["method"].isin(["measured"])
    return Prediction(model=model, batch=batch, mode=mode, conditions=picked,
                      predicted_s=centre, low_s=max(low, 0.0), high_s=high,
                      estimated_s=float(rows.loc[est_rows, "total_s"].sum()) + level, overhead_s=overhead_s,
                      overhead_from=overhead_from, level_s=level,
                      measured_s=ref.get((model, batch, mode), (None,))[0] if tier is None else tier_measured,
                      predicted_j=(float(energy.sum()) if energy.notna().all() and len(energy) and tier is None
                                   else None),
                      layers=rows, tier=tier, scenario=scenario if tier is not None else None,
                      tier_slowdown=(centre - level) / (fast_ops + overhead_s) if tier is not None else None,
                      tier_measured_share=tier_share, run=run, runs_s={k: float(v) for k, v in by_run.items()},
                      runs_held=len(set(runs(pool)) | set(runs(e2e))),
                      plain_gap=gap, plain_gap_of=gap_of, widest=widest, beyond_share=beyond_share, farthest=farthest,
                      interval_basis="; ".join(b for b in (band.basis if est_rows.any() else "", band.untimed) if b))


BEYOND = 1.0  # decades (10x the FLOPs or bytes) past the nearest measured configuration of its type: extrapolated


def _beyond(cm, rows: pd.DataFrame) -> tuple[float, str | None]:
    """(the share of ``rows``' operator time that the cost model ``cm`` estimated more than :data:`BEYOND` decades
    from any configuration of its op type, mode and phase the database measured (or of its twins or family, whose
    laws answer for a type never measured), or for a type none of which was measured; the farthest of those op
    types, with its decades): what no held-out error, and no accuracy figure, covers."""
    est = rows[~rows["method"].isin(["measured", "composed"])]
    total = float(rows["total_s"].sum())
    if cm is None or est.empty or total <= 0:
        return 0.0, None
    data = cm.features_of(est)
    d = np.asarray(cm.distance(data), float)
    measured = set(cm.points["op_type"])
    for i in np.flatnonzero(~(d <= BEYOND)):  # a type estimated from its twins' or family's laws: from theirs
        t, base = data["op_type"].iloc[i], data["base"].iloc[i]
        fam = optypes.family(t, base)
        kin = [*optypes.twins(t, base), *(m for m in measured if fam is not None and optypes.family(m) == fam)]
        near = [v for v in (d[i], *(cm.distance(data.iloc[[i]].assign(op_type=k))[0] for k in dict.fromkeys(kin)))
                if np.isfinite(v)]
        d[i] = min(near) if near else np.nan
    far = ~(d <= BEYOND)  # a type never measured, nor its twins or family: beyond
    if not far.any():
        return 0.0, None
    at = np.where(far, np.nan_to_num(d, nan=np.inf), -1.0).argmax()
    say = "a type never measured" if not np.isfinite(d[at]) else f"{10 ** d[at]:.3g}x past its nearest measured"
    return float(est.loc[far, "total_s"].sum()) / total, f"{est['op_type'].iloc[at]} ({say})"


def model_spread(cm, db_dir, key: str, mode: str) -> ModelSpread | None:
    """How far a model's estimate may be off: from the database's `predict_only` models (:mod:`opcost.analysis.
    calibration`) where it holds two, else from the cost model's held-out models."""
    got = calibration.spread(db_dir, key, mode)
    held = cm.model_error.get(op_mode(mode)) if cm is not None and got is None else None
    if held is not None:
        got = ModelSpread(held[0], held[1], f"the cost model's {held[1]} held-out models' summed estimates")
    return got


@dataclass(frozen=True)
class CostSource:
    """Where the unmeasured configurations' costs come from: the cost model of the database at ``db_dir`` on the
    conditions ``key`` (:func:`condition_key`), fitted to the measurement column ``column``; ``method``: as for
    :func:`predict_workload`."""

    db_dir: object
    key: str
    column: str
    method: str | None = None


def _costed(db: dict, layers: pd.DataFrame, costs: pd.DataFrame, used: pd.DataFrame,
            source: CostSource) -> tuple[pd.DataFrame, object]:
    """(rows, the cost model that estimated some of them, else None): one row per configuration and phase of
    ``layers`` with its cost per call (``cost_s``, ``low_s``, ``high_s``), ``energy_j``, the ``run`` a measured
    cost comes from and its ``method`` (``measured`` or the cost model's): measured where ``costs`` holds it,
    estimated by the cost model of ``used`` for the rest; in training with the autograd engine's one call per
    iteration as a row of its own."""
    model, mode = layers["model"].iloc[0], layers["mode"].iloc[0]
    rows = _phases(layers)
    measured = costs.set_index(["config_id", "phase"])
    key = pd.MultiIndex.from_arrays([rows["config_id"], rows["phase"]])
    rows["cost_s"] = measured[source.column].reindex(key).to_numpy(dtype=float)
    rows["energy_j"] = measured["energy_j"].reindex(key).to_numpy(dtype=float)
    rows["run"] = runs(measured).reindex(key).to_numpy()
    rows["method"] = np.where(np.isfinite(rows["cost_s"]), "measured", "")
    rows["low_s"] = rows["high_s"] = rows["cost_s"]
    missing = ~np.isfinite(rows["cost_s"])
    cm = None
    if missing.any():
        rows[CONTEXT] = next(iter(context_bytes(layers).values()))  # the estimated operators' surroundings
        # fitted to the database alone (the workload asked for is not part of it): a fit is saved and reused by the
        # fingerprint of the database's rows, whatever workload is predicted
        alone = alone_rows(db["measurements"], used)
        cm = load_or_fit(source.db_dir, source.key, db["layers"], used, source.column, db.get("configs"), alone)
        if cm is None:
            raise OpcostError("database", f"too few measured configurations to estimate the {int(missing.sum())} "
                                          f"unmeasured ones of {model}")
        est = cm.estimate(rows[missing], source.method)
        for col, what in (("cost_s", "estimate"), ("low_s", "low"), ("high_s", "high"), ("method", "method")):
            rows.loc[missing, col] = est[what].to_numpy()
        compose(rows, measured[source.column], lambda r: cm.estimate(r, source.method))
        share = per_iteration_share(rows, getattr(cm, "in_model", None)) * missing.to_numpy()
        for col in ("cost_s", "low_s", "high_s"):
            rows[col] = rows[col].astype(float) + share
        if used["energy_j"].notna().sum() >= 3:
            em = load_or_fit(source.db_dir, source.key, db["layers"], used.dropna(subset=["energy_j"]), "energy_j",
                             db.get("configs"), alone)
            if em is not None:
                rows.loc[missing, "energy_j"] = em.estimate(rows[missing], source.method)["estimate"].to_numpy()
    unknown = rows["cost_s"].isna()
    if unknown.any():
        what = ", ".join(sorted({f"{t} ({p})"
                                 for t, p in zip(rows.loc[unknown, "op_type"], rows.loc[unknown, "phase"])}))
        raise OpcostError(f"model {model}", f"the database holds nothing to estimate {what} from: profile a {mode} "
                                            "workload first")
    e = engine_cost(costs) if mode == "training" else None  # one autograd engine call per iteration
    if e is not None:
        rows = pd.concat([rows, pd.DataFrame([{"config_id": ENGINE_ID, "op_type": ENGINE_OP_TYPE, "phase": "backward",
                                               "count": 1, "cost_s": e, "low_s": e, "high_s": e,
                                               "method": "measured"}])], ignore_index=True)
    return rows, cm


# a type's extra per iteration, at most this many times its calls' own cost (opcost.analysis.in_model: a small model)
ITERATION_CAP = 1.0


def per_iteration_share(rows: pd.DataFrame, table) -> np.ndarray:
    """Per row of a workload (``op_type``, ``mode``, ``phase``, ``count``, ``cost_s`` per call): its share of what
    its type's calls cost more per iteration in model order (``table``: :class:`opcost.analysis.in_model.InModel`,
    else none), at most :data:`ITERATION_CAP` times what those calls cost per iteration, divided among the
    workload's calls of the type in that phase (:mod:`opcost.analysis.in_model`)."""
    from opcost.analysis.optypes import family

    if table is None or rows.empty:
        return np.zeros(len(rows))
    by = [rows["op_type"], rows["phase"]]
    calls = rows["count"].astype(float).groupby(by).transform("sum").to_numpy()
    own = (rows["cost_s"].astype(float) * rows["count"].astype(float)).groupby(by).transform("sum").to_numpy()
    each = [table.iteration_of(t, family(t), m, ph) for t, m, ph in zip(rows["op_type"], rows["mode"], rows["phase"])]
    return np.minimum(np.asarray(each, float), ITERATION_CAP * np.nan_to_num(own)) / np.maximum(calls, 1.0)


def _overhead(db: dict, used: pd.DataFrame, layers: pd.DataFrame, per_call: float, run: str | None,
              picked: dict | None, trace_now: tuple | None, keep=None) -> tuple[float, str]:
    """(seconds per iteration between the operators of the workload ``layers``, where from: a key of
    :data:`~opcost.analysis.overhead_sources.OVERHEAD_FROM`) by :func:`~opcost.analysis.overhead_sources.overhead_of`,
    with a short trace taken now on the conditions ``picked`` where ``trace_now`` asks for one and nothing of its
    model was traced."""
    model, batch, mode = layers["model"].iloc[0], int(layers["batch"].iloc[0]), layers["mode"].iloc[0]
    traced = traced_overheads(db, used, mode, run)
    steps = decode_overhead(db, used, layers, mode, run) if (model, batch) not in traced else None
    kin = traced_kind(db, used, is_prefill, run) if is_prefill(mode) else {}  # prefills at other prompts
    now = None
    if (trace_now is not None and steps is None and not any(m == model for m, _ in traced)
            and not any(m == model for m, _, _ in kin)):  # its own glue
        now = overhead_now(trace_now, batch, mode, picked, keep=keep)
    return overhead_of(traced, model, batch, float(layers["count"].sum()), per_call, now, steps, kin)


def reference_run(pool: pd.DataFrame, e2e: pd.DataFrame, run: str | None = None) -> str | None:
    """The run a workload's prediction takes its end-to-end reference from and prefers its measured costs of:
    ``run`` where given (refused when neither the measurement rows ``pool`` nor the workload's end-to-end rows
    ``e2e`` hold it), else the run of its newest end-to-end reference (:func:`~opcost.analysis.predict.one_run`);
    None without one."""
    if run is not None:
        held = sorted(set(runs(pool)) | set(runs(e2e)))
        if run not in held:
            raise OpcostError(f"--run {run}", "the database holds no such run on these conditions (runs: "
                                              f"{', '.join(r or '(unnamed: a run database)' for r in held)})")
        return run
    chosen = one_run(e2e)
    return str(runs(chosen).iloc[0]) if len(chosen) else None


def refit(db_dir, statistic: str | None = None) -> dict[str, dict]:
    """Fit (or confirm up to date) and save the cost model of every set of conditions the database at ``db_dir``
    holds; their held-out summaries by condition key (after ``opcost db merge``)."""
    from opcost.database import read_db

    db = read_db(db_dir)
    col = STATISTICS[statistic or DEFAULT_STATISTIC]
    m = db["measurements"]
    m = m[(m["source"] == "isolated") & (m["status"] == "ok") & baseline(m)]
    out = {}
    for values, _ in m.groupby([c for c, _ in CONDITIONS]):
        used, picked = conditions(db["measurements"], **dict(zip([c for c, _ in CONDITIONS], values)))
        key = condition_key(picked)
        cm = load_or_fit(db_dir, key, db["layers"], used, col, db.get("configs"), alone_rows(db["measurements"], used))
        out[key] = cm.heldout_summary() if cm is not None else {}
    return out


def workload_layers(db: dict, model: str, batch: int, mode: str, spec: dict | None = None,
                    dtype: str | None = None) -> pd.DataFrame:
    """The workload's `layers` rows: from the database when it holds them, else extracted now (no timing) from
    the model's config entry ``spec`` (``{}``: a torchvision, built-in or zoo name) in ``dtype`` (default float32).
    With a ``dtype`` (a user's config: its entry and dtype), a workload the database holds is also built now and
    refused where the database's variant differs from it (another module, size or dtype): the answer is never for
    another model than the one asked about. A model the database holds at other batches or modes only is refused
    where its variant differs from the one built now."""
    layers = db["layers"]
    wl = of_workload(layers, model, batch, mode)
    if len(wl) and dtype is None:
        return wl.reset_index(drop=True)
    from opcost import preflight
    from opcost.errors import Problems
    from opcost.model.extract import extract
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    found = preflight.workload_problems(model, spec or {}, mode, batch, {"device": "cpu", "dtype": dtype or "float32"})
    if found:  # a sequence past the model's positions, a context past the memory free: said before it is built
        raise Problems(found)
    fresh = extract(make_workload(load_model(model, spec or {}, dtype=dtype or "float32"), batch, mode))
    held = wl if len(wl) else layers[layers["model"] == model]
    if len(held) and (diff := variant_difference(held, fresh)):
        got = held.iloc[0]
        fix = ("the config file of the run that profiled it is the one to give, unless the model's code or entry "
               "changed since: then run the workflow again (it reruns that model's jobs)" if dtype is not None else
               "give --config with the config file of the run that profiled it, so that it is built as profiled, "
               "or another name for another variant")
        raise OpcostError(f"model {model}", f"the database holds another variant of it than the one built now "
                                            f"(profiled at batch {got['batch']}, {got['mode']}; {diff}): {fix}")
    return wl.reset_index(drop=True) if len(wl) else fresh.reset_index(drop=True)
