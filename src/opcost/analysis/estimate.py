"""Predict any model's iteration from the database: measured costs where it holds the configuration, the cost
model's estimates (:mod:`opcost.analysis.costmodel`) for the rest, plus the overhead between operators.

The measurements used are one set of conditions (host, device, threads: :func:`conditions`); costs from different
machines or thread counts are never mixed. The overhead between operators of a workload the database traced is the
one its own trace models (the `overheads` table, as in its validation's `+overhead` row); of a decode step whose
model's steps were traced at other contexts or batches, a fit in the key/value cache bytes over every model's traced
steps (:func:`decode_overhead`); of a model traced at other batch sizes (a prefill: or prompt lengths), the median
per call of those traces; of a model never traced, a short trace of its own taken at predict time where asked; of
any other, it is modelled per call from the database's workloads: the overhead their traces model per call (without
traces, (end-to-end time − Σ measured isolated costs) / calls of the workloads with an end-to-end time), the median
over the models' workloads of the same mode (their 10–90% range is its interval), floored at 0.

Intervals: measured parts count as exact (their own noise is small next to an estimate's); an estimated part
contributes count × its interval (the 5–95% range of the held-out errors of the rule that estimated it:
:meth:`opcost.analysis.costmodel.CostModel.interval_of`; never of zero width). :attr:`Prediction.widest` names the op
type whose estimates widen the interval most. Within an op type and phase
the ends add up (one law errs the same way on all its configurations); across them they combine in quadrature
(different laws, independent errors), as does the method's own error: the 5–95% range of how far the database's
fully measured workloads' predictions (isolated costs + their modelled overhead) are off each end-to-end time their
run took of them (:func:`method_error`: the machine's drift between minutes included), which holds the overhead's
spread between workloads; with fewer than three such workloads, the overhead's 10–90% range instead. An interval
is never narrower than the spread of the end-to-end times of its model's measured workloads of its kind (every
model's where its own has none: :func:`timing_spread`), the timings the prediction rests on and is checked
against.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from opcost.analysis.costmodel import CONTEXT, context_bytes, load_or_fit
from opcost.analysis.predict import (DEFAULT_STATISTIC, REFERENCES, STATISTICS, baseline, one_run, references,
                                     rotation_first)
from opcost.database import latest, of_workload, runs
from opcost.errors import OpcostError
from opcost.measure.engine import ENGINE_ID, ENGINE_OP_TYPE, engine_cost
from opcost.measure.plain import PROCESS  # the process the costs hold in
from opcost.model.modes import decode_context, is_decode, prefill_length
from opcost.model.sweep_points import PREFIX as SWEEP_PREFIX

CONDITIONS = (("host", "--host"), ("device", "--device"), ("threads", "--threads"))


def conditions(measurements: pd.DataFrame, **chosen) -> tuple[pd.DataFrame, dict]:
    """The isolated, baseline-placement, `ok` rows of one host, device and thread count, one per configuration and
    phase (:func:`~opcost.analysis.predict.rotation_first`, as the validation takes them), and that choice. A
    condition not given must be unique in the database; a given one must be present; else an error that names
    the choice to make (``--host``, ``--device``, ``--threads``)."""
    m, picked = _isolated(measurements, **chosen)
    return rotation_first(m, ("config_id", "phase")), picked


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
    level_s: float = 0.0  # a decode step's operators' loss to a slower memory level (memory_level_shift), seconds

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
        return {"model": self.model, "batch": self.batch, "mode": self.mode, **self.conditions,
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
                "by_method_s": self.methods(), "widest": self.widest, "level_s": self.level_s,
                "top_op_types_s": {k: float(v) for k, v in self.by_op_type().head(10).items()}}




def plain_gap(e2e: pd.DataFrame, model: str, batch: int, mode: str) -> tuple[float | None, str | None]:
    """How much longer a plain process (`e2e` method `plain`) took than opcost's dedicated run: the workload's own
    newest pair, else the median over the workloads that have one; (None, None) without any."""
    from opcost.measure.plain import plain_gaps

    gaps = plain_gaps(e2e)
    own = gaps.get(f"{model}/{mode}/b{int(batch)}")
    if own is not None:
        return own, "this workload"
    if gaps:
        return float(np.median(list(gaps.values()))), f"median of {len(gaps)} workloads"
    return None, None


def _phases(layers: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and phase it runs (forward; in training also backward where it has one)."""
    fwd = layers.assign(phase="forward")
    if not (layers["mode"] == "training").any():
        return fwd
    has_bwd = layers["backward"].fillna("{}").map(lambda s: s not in ("{}", "", "null"))
    bwd = layers[(layers["mode"] == "training") & has_bwd].assign(phase="backward")
    return pd.concat([fwd, bwd], ignore_index=True)


def _on_conditions(table: pd.DataFrame, used: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``table`` on the device, host and thread count of ``used`` (one set of conditions)."""
    for key in ("device", "host", "threads"):
        if key in table and key in used and len(used):
            table = table[table[key].astype(str) == str(used[key].iloc[0])]
    return table


def traced_overheads(db: dict, used: pd.DataFrame, mode: str,
                     run: str | None = None) -> dict[tuple[str, int], tuple[float, float]]:
    """(model, batch) -> (overhead seconds per iteration its trace models, its calls) for the database's model
    workloads of ``mode`` on the conditions of ``used`` (the `overheads` table, the newest row of each, a row of
    ``run`` before any other; not the sweep chains, whose few calls are not a model's glue)."""
    traced = _on_conditions(db.get("overheads", pd.DataFrame()), used)
    if len(traced):
        traced = traced[(traced["mode"] == mode) & ~traced["model"].str.startswith(SWEEP_PREFIX)
                        & (traced["calls"] > 0)]
    if not len(traced):
        return {}
    own = None if run is None else (runs(traced) == run)
    traced = latest(traced, ("model", "batch", "mode"), preferred=own)
    return {(r.model, int(r.batch)): (float(r.overhead_s), float(r.calls)) for r in traced.itertuples()}


def _traced_decode_steps(db: dict, used: pd.DataFrame, run: str | None = None) -> dict[tuple, tuple[float, float]]:
    """(model, batch, mode) -> (overhead seconds per step its trace models, its calls) of every decode step the
    database traced, at any context length (:func:`traced_overheads` of each ``decode<L>`` mode)."""
    return _traced_kind(db, used, is_decode, run)


def _traced_kind(db: dict, used: pd.DataFrame, kind, run: str | None = None) -> dict[tuple, tuple[float, float]]:
    """(model, batch, mode) -> (overhead seconds per iteration its trace models, its calls) of every workload the
    database traced in a mode for which ``kind(mode)`` holds (:func:`traced_overheads` of each)."""
    held = set(db.get("overheads", pd.DataFrame(columns=["mode"]))["mode"])
    return {(m, b, mode): v for mode in sorted(filter(kind, held))
            for (m, b), v in traced_overheads(db, used, mode, run).items()}


def _is_prefill(mode: str) -> bool:
    return prefill_length(mode) is not None


def overhead_per_call(db: dict, used: pd.DataFrame, mode: str, statistic: str) -> tuple[float, float, float]:
    """(median, 10th, 90th percentile) seconds of overhead per operator call on the conditions of ``used``, over
    the database's model workloads of ``mode``: the overhead their traces model (:func:`traced_overheads`) where the
    database holds it; else (end-to-end time − Σ measured isolated costs) / calls of its fully measured workloads
    with an end-to-end time; 0 when neither. A decode step at a context length never traced: the decode steps traced
    at the others; a prefill at a prompt length never traced: the prefills traced at the others."""
    traced = list(traced_overheads(db, used, mode).values())
    if not traced and (is_decode(mode) or _is_prefill(mode)):
        traced = list(_traced_kind(db, used, is_decode if is_decode(mode) else _is_prefill).values())
    if traced:
        gaps = np.array([overhead / calls for overhead, calls in traced])
    else:
        gaps = _residual_per_call(db, used, mode, statistic)
    if not len(gaps):
        return 0.0, 0.0, 0.0
    g = np.clip(gaps, 0, None)
    return float(np.median(g)), float(np.quantile(g, 0.1)), float(np.quantile(g, 0.9))


def _measured_workloads(db: dict, used: pd.DataFrame, mode: str,
                        statistic: str) -> list[tuple[tuple[str, int], float, float, float]]:
    """((model, batch), end-to-end time, Σ count × isolated cost + the autograd engine's call, calls) of each fully
    measured model workload of ``mode`` with an end-to-end time on the conditions of ``used`` (not the sweep
    chains); the end-to-end time is its reference (:func:`~opcost.analysis.predict.references`)."""
    col = STATISTICS[statistic]
    e2e = _on_conditions(db["e2e"], used)
    refs = references(e2e, str(used["device"].iloc[0]), "isolated", statistic) if len(used) else {}
    cost = used.groupby("config_id")[col].sum()
    # training: the one autograd engine call per iteration is a row of its own, not overhead
    engine = (engine_cost(used) or 0.0) if mode == "training" else 0.0
    out = []
    layers = db["layers"]
    for (model, batch, mo), (ref, _) in refs.items():
        if mo != mode or model.startswith(SWEEP_PREFIX):
            continue
        wl = of_workload(layers, model, batch, mo)
        c = cost.reindex(wl["config_id"])
        if wl.empty or c.isna().any():
            continue
        out.append(((model, int(batch)), ref, engine + float((wl["count"].to_numpy() * c.to_numpy()).sum()),
                    float(wl["count"].sum())))
    return out


def _every_time(db: dict, used: pd.DataFrame, statistic: str) -> dict[tuple, list[float]]:
    """(model, batch, mode) -> every end-to-end time its run took of the workload on the conditions of ``used``,
    seconds per iteration: each rotation's, each dedicated and interleaved run's (the reference methods of
    isolated costs; not the plain process, whose allocator differs), taken in other minutes than one another."""
    col = STATISTICS[statistic]
    e2e = one_run(_on_conditions(db["e2e"], used))
    e2e = e2e[e2e["method"].isin(REFERENCES["isolated"]) & e2e[col].notna()]
    return {(m, int(b), mo): g[col].astype(float).tolist()
            for (m, b, mo), g in e2e.groupby(["model", "batch", "mode"])}


def _residual_per_call(db: dict, used: pd.DataFrame, mode: str, statistic: str) -> list[float]:
    """Per fully measured model workload of ``mode`` with an end-to-end time on the conditions of ``used``:
    (end-to-end time − Σ count × isolated cost − the autograd engine's call) / calls."""
    return [(ref - ops) / calls for _, ref, ops, calls in _measured_workloads(db, used, mode, statistic)]


def method_error(db: dict, used: pd.DataFrame, mode: str, statistic: str, per_call: float,
                 times: dict | None = None) -> tuple[float, float] | None:
    """(5th, 95th percentile) of end-to-end time / prediction − 1 over the database's fully measured model
    workloads of ``mode`` with an end-to-end time, each predicted as :func:`predict_workload` predicts it (Σ count ×
    isolated cost + its overhead by :func:`_overhead_of`, ``per_call`` the median per call of all), against each
    end-to-end time its run took of it (:func:`_every_time`: a time taken in other minutes than the costs moves
    with the machine, and the interval is to hold such a time too), i.e. how far the method is off where nothing
    is estimated; None with fewer than 3 such workloads. ``times``: :func:`_every_time`'s, where the caller has them."""
    traced = traced_overheads(db, used, mode)
    times = _every_time(db, used, statistic) if times is None else times
    rel, workloads = [], 0
    for (model, batch), ref, ops, calls in _measured_workloads(db, used, mode, statistic):
        predicted = ops + _overhead_of(traced, model, batch, calls, per_call)[0]
        if predicted > 0:
            rel += [t / predicted - 1 for t in times.get((model, batch, mode), [ref])]
            workloads += 1
    if workloads < 3:
        return None
    return float(np.quantile(rel, 0.05)), float(np.quantile(rel, 0.95))


def _same_kind(mode: str, other: str) -> bool:
    """Whether workloads of ``other`` mode rest on the same evidence as ``mode``'s: the same mode, or both decode
    steps (at any context), or both prefills (of any prompt)."""
    return other == mode or (is_decode(mode) and is_decode(other)) or (_is_prefill(mode) and _is_prefill(other))


def timing_spread(times: dict, model: str, mode: str) -> tuple[float, float] | None:
    """(5th, 95th percentile) of how far each end-to-end time of ``model``'s measured workloads of ``mode``'s kind
    (:func:`_same_kind`) lies from its workload's median time (``times``: :func:`_every_time`'s, every run that
    timed it), i.e. the spread of the timings a prediction of that model rests on and is checked against, which no
    interval can be narrower than; of every model's such workloads where ``model`` has none with two times; None
    where no workload of that kind has two. (Not :func:`opcost.analysis.predict.reference_spread`: one workload's
    rotations, largest over smallest.)"""
    for mine in (True, False):
        rel = [t / float(np.median(ts)) - 1 for (name, _, m), ts in times.items()
               if (name == model or not mine) and _same_kind(mode, m) and len(ts) >= 2 for t in ts]
        if rel:
            return float(np.quantile(rel, 0.05)), float(np.quantile(rel, 0.95))
    return None


OVERHEAD_FROM = {"own trace": "its trace", "trace now": "a short trace of its own, taken now",
                 "decode steps": "the traced decode steps, linear in the key/value cache bytes (its model's intercept)",
                 "same model": "per call, its model's traces at other batch sizes (a prefill: and prompt lengths)",
                 "all models": "median per call of the traced workloads"}  # Prediction.overhead_from -> its meaning


def decode_overhead(db: dict, used: pd.DataFrame, layers: pd.DataFrame, mode: str,
                    run: str | None = None) -> float | None:
    """Seconds per step of overhead of the decode step ``layers`` (one workload's rows) at the context of ``mode``
    (``decode<L>``), from the database's traced decode steps: a least-squares fit of their overheads in the bytes
    of key/value cache a step reads (:func:`opcost.analysis.decode.cache_bytes`), one slope shared by every model
    (what a byte of cache costs a step around its operators: the operators finding their weights and code evicted
    by the cache's traffic, the update's bookkeeping) and an intercept per model (its glue without a cache), floored
    at 0. A median per call cannot follow that growth to a longer context; one slope from every model's steps moves
    less with one trace's noise than a line through one model's two or three. None where ``mode`` is no decode
    step, the model has no traced decode step, or no model's traced steps hold two cache sizes. The slope is held
    at 0 or above in the fit itself (:func:`_cache_line`)."""
    from opcost.analysis.decode import cache_bytes

    context = decode_context(mode)
    if context is None or layers.empty:
        return None
    model = str(layers["model"].iloc[0])
    points = []  # (model, cache bytes, overhead seconds) of each traced decode step
    for (name, b, m), (overhead, _) in _traced_decode_steps(db, used, run).items():
        wl = of_workload(db["layers"], name, b, m)
        if len(wl):
            points.append((name, cache_bytes(wl, decode_context(m)), overhead))
    names = sorted({n for n, _, _ in points})
    sizes = {n: {c for m, c, _ in points if m == n} for n in names}
    if model not in names or max(len(v) for v in sizes.values()) < 2:
        return None
    return max(float(_cache_line(points, names, model)(cache_bytes(layers, context))), 0.0)


def memory_level_shift(db: dict, e2e: pd.DataFrame, rows: pd.DataFrame, layers: pd.DataFrame,
                       picked: dict) -> float:
    """Seconds per step a decode step (``layers``; ``rows``: its per-configuration costs) loses to a slower memory
    level than its model's measured steps ran in (:func:`opcost.analysis.decode.level_shift`): its working set
    against the largest of its model's decode steps with an end-to-end time in ``e2e`` (the conditions'), on this
    host's read-bandwidth curve (:func:`opcost.analysis.decode.bandwidth_curve`). The measured costs and the
    overhead fitted to those steps hold the rates of their own memory level; a step at a longer context or larger
    batch whose cache no longer fits that level reads every byte at the next one's. 0 where ``layers`` is no
    decode step, its model has no measured decode step, or the database is of another host (whose bandwidth this
    one's cannot stand for)."""
    from opcost.analysis.decode import bandwidth_curve, footprint, level_shift

    context = decode_context(layers["mode"].iloc[0])
    model = layers["model"].iloc[0]
    if context is None:
        return 0.0
    steps = e2e.loc[e2e["model"] == model, ["batch", "mode"]].drop_duplicates()
    held = [footprint(of_workload(db["layers"], model, int(b), m), decode_context(m))
            for b, m in zip(steps["batch"], steps["mode"]) if decode_context(m) is not None]
    held = [f for f in held if f > 0]
    step = footprint(layers, context)
    if not held or step <= max(held):
        return 0.0
    curve = bandwidth_curve(picked)
    return level_shift(rows, step, max(held), curve) if curve else 0.0


def _cache_line(points: list, names: list, model: str):
    """The decode overhead's line in cache bytes for ``model``, fitted to ``points`` (model, cache bytes, overhead
    seconds) by least squares with the shared slope held at 0 or above *in the fit* (``scipy.optimize.lsq_linear``):
    a step never gets cheaper as its cache grows, and the intercepts are fitted under that constraint, not floored
    after an unconstrained fit that two noisy points tilted downwards."""
    from scipy.optimize import lsq_linear

    x = np.array([[c / 1e6] + [float(n == k) for k in names] for n, c, _ in points])
    lower = np.r_[0.0, np.full(len(names), -np.inf)]
    coef = lsq_linear(x, np.array([o for _, _, o in points]), bounds=(lower, np.inf), method="bvls").x
    return lambda nbytes: coef[0] * nbytes / 1e6 + coef[1 + names.index(model)]


def _overhead_of(traced: dict, model: str, batch: int, calls: float, per_call: float,
                 now: float | None = None, steps: float | None = None, kin: dict | None = None) -> tuple[float, str]:
    """(overhead seconds per iteration, where from: a key of :data:`OVERHEAD_FROM`) of a workload of ``calls``
    calls, the nearest evidence first, as for operator costs: the workload's own trace (:func:`traced_overheads`,
    as its validation's `+overhead` row); else the median per call of its model's traced workloads at other batch
    sizes (the same Python glue between the same calls); else, for a model never traced, ``now``, the overhead of a
    short trace of its own taken at predict time (:func:`overhead_now`); else ``per_call``, the median per call of
    all. A decode step whose model was traced at other context lengths or batches: ``steps``
    (:func:`decode_overhead`), after its own trace. ``kin``: (model, batch, mode) -> (overhead, calls) of traced
    workloads of the same kind in other modes (a prefill's at other prompt lengths), which count as its model's
    traces at other batch sizes do."""
    own = traced.get((model, batch))
    if own is not None:
        return own[0], "own trace"
    if steps is not None:
        return steps, "decode steps"
    sibling = [max(o / c, 0.0) for (m, _), (o, c) in traced.items() if m == model]
    sibling += [max(o / c, 0.0) for (m, _, _), (o, c) in (kin or {}).items() if m == model]
    if sibling:
        return float(np.median(sibling)) * calls, "same model"
    if now is not None:
        return now, "trace now"
    return per_call * calls, "all models"


def _on_tier(db: dict, rows: pd.DataFrame, used: pd.DataFrame, tier: str, scenario: str | None,
             statistic: str) -> tuple[str, float, float | None]:
    """Scale the operator costs of ``rows`` (in place: cost_s, low_s, high_s) by their slowdowns in ``scenario``
    on ``tier`` (:func:`opcost.analysis.tiers.slowdown_factors`, from the placement measurements on the conditions
    of ``used``; None: the scenario those measurements answer best, :func:`opcost.analysis.tiers.default_scenario`);
    (the scenario, the share of the fast-tier operator time whose slowdown was measured, the workload's end-to-end
    time in that scenario where the database holds a `tier` run)."""
    from opcost.analysis.tiers import default_scenario, scenarios, slowdown_factors, tier_runs, unmoved

    slow = scenarios(_on_conditions(db["measurements"], used))
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
                     trace_now: tuple | None = None, **chosen) -> Prediction:
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
    operators from a short trace of its own, taken now (:func:`overhead_now`)."""
    statistic = statistic or DEFAULT_STATISTIC
    tier, scenario = (on_tier.tier, on_tier.scenario) if on_tier is not None else (None, None)
    col = STATISTICS[statistic]
    pool, picked = _isolated(db["measurements"], **chosen)
    used = rotation_first(pool, ("config_id", "phase"))
    model, batch, mode = layers["model"].iloc[0], int(layers["batch"].iloc[0]), layers["mode"].iloc[0]
    e2e = _on_conditions(db["e2e"], used)
    run = reference_run(pool, of_workload(e2e, model, batch, mode), run)
    costs = rotation_first(pool, ("config_id", "phase"), run=run) if run is not None else used
    rows = _phases(layers)
    measured = costs.set_index(["config_id", "phase"])
    key = pd.MultiIndex.from_arrays([rows["config_id"], rows["phase"]])
    rows["cost_s"] = measured[col].reindex(key).to_numpy(dtype=float)
    rows["energy_j"] = measured["energy_j"].reindex(key).to_numpy(dtype=float)
    rows["run"] = runs(measured).reindex(key).to_numpy()
    rows["method"] = np.where(np.isfinite(rows["cost_s"]), "measured", "")
    rows["low_s"] = rows["high_s"] = rows["cost_s"]
    missing = ~np.isfinite(rows["cost_s"])
    cond_key = condition_key(picked)
    if missing.any():
        rows[CONTEXT] = next(iter(context_bytes(layers).values()))  # the estimated operators' surroundings
        # fitted to the database alone (the workload asked for is not part of it): a fit is saved and reused by the
        # fingerprint of the database's rows, whatever workload is predicted
        cm = load_or_fit(db_dir, cond_key, db["layers"], used, col, db.get("configs"))
        if cm is None:
            raise OpcostError("database", f"too few measured configurations to estimate the {int(missing.sum())} "
                                          f"unmeasured ones of {model}")
        est = cm.estimate(rows[missing], method)
        rows.loc[missing, "cost_s"] = est["estimate"].to_numpy()
        rows.loc[missing, "low_s"] = est["low"].to_numpy()
        rows.loc[missing, "high_s"] = est["high"].to_numpy()
        rows.loc[missing, "method"] = est["method"].to_numpy()
        if used["energy_j"].notna().sum() >= 3:
            em = load_or_fit(db_dir, cond_key, db["layers"], used.dropna(subset=["energy_j"]), "energy_j",
                             db.get("configs"))
            if em is not None:
                rows.loc[missing, "energy_j"] = em.estimate(rows[missing], method)["estimate"].to_numpy()
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
    fast_ops = float((rows["count"].astype(float) * rows["cost_s"]).sum())
    tier_share = tier_measured = None
    if tier is not None:
        scenario, tier_share, tier_measured = _on_tier({**db, "e2e": one_run(e2e, run)}, rows, used, tier, scenario,
                                                       statistic)
    rows["total_s"] = rows["count"].astype(float) * rows["cost_s"]
    per_call, lo_call, hi_call = overhead_per_call(db, used, mode, statistic)
    calls = float(layers["count"].sum())
    ops = float(rows["total_s"].sum())
    traced = traced_overheads(db, used, mode, run)
    steps = decode_overhead(db, used, layers, mode, run) if (model, batch) not in traced else None
    now = None
    kin = _traced_kind(db, used, _is_prefill, run) if _is_prefill(mode) else {}  # prefills at other prompts
    if (trace_now is not None and steps is None and not any(m == model for m, _ in traced)
            and not any(m == model for m, _, _ in kin)):  # its own glue
        now = overhead_now(trace_now, batch, mode, picked)
    overhead_s, overhead_from = _overhead_of(traced, model, batch, calls, per_call, now, steps, kin)
    level = memory_level_shift(db, e2e, rows, layers, picked)
    est_rows = ~rows["method"].isin(["measured"])
    n = rows["count"].astype(float)
    down = (n * (rows["cost_s"] - rows["low_s"])).groupby([rows["op_type"], rows["phase"]]).sum()
    up = (n * (rows["high_s"] - rows["cost_s"])).groupby([rows["op_type"], rows["phase"]]).sum()
    centre = ops + overhead_s
    # the method's own error (isolated costs + modelled overhead against end-to-end times), which includes the
    # overhead's spread between workloads; the overhead's range alone where too few workloads show it
    times = _every_time(db, used, statistic)
    off = method_error(db, used, mode, statistic, per_call, times)
    below, above = ((per_call - lo_call) * calls, (hi_call - per_call) * calls) if off is None else \
        (centre * max(0.0, -off[0]), centre * max(0.0, off[1]))
    spread = down ** 2 + up ** 2
    widest = str(spread.idxmax()[0]) if len(spread) and spread.max() > 0 else None
    low = centre - float(np.sqrt((down ** 2).sum() + below ** 2))
    high = centre + float(np.sqrt((up ** 2).sum() + above ** 2))
    floor = timing_spread(times, model, mode)  # never narrower than the timings it rests on
    if floor is not None:
        low, high = min(low, centre * (1 + floor[0])), max(high, centre * (1 + floor[1]))
    # the memory level's cost is the least certain part: the interval holds the step with it and without it
    centre, high = centre + level, high + level
    ref = references(of_workload(e2e, model, batch, mode), picked["device"], "isolated", statistic, run)
    energy = rows["count"].astype(float) * rows["energy_j"]
    gap, gap_of = plain_gap(one_run(e2e, run), model, batch, mode)
    by_run = rows[rows["method"] == "measured"].dropna(subset=["run"]).groupby("run")["total_s"].sum()
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
                      plain_gap=gap, plain_gap_of=gap_of, widest=widest)


def overhead_now(model: tuple, batch: int, mode: str, conditions: dict, dtype: str = "float32") -> float:
    """Seconds per iteration of overhead between operators of the workload (``model``: its name and config entry)
    at ``batch`` in ``mode``, modelled from a short trace of its own taken now, as the trace stage models a
    profiled workload's (:func:`opcost.analysis.predict.trace_overhead`: each gap before a call, less the gap its
    isolated replay already includes), in a process of its own set up as the measuring ones were (``conditions``:
    the database's device and threads; glibc keeping freed memory): :func:`opcost.analysis.overhead.trace_now`."""
    from opcost.analysis.overhead import trace_now
    from opcost.analysis.predict import trace_overhead

    parts = trace_now(model, batch, mode, conditions, dtype)
    return float(trace_overhead(parts["trace_overheads"], parts["trace_op_types"])[(model[0], int(batch), mode)])


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
        cm = load_or_fit(db_dir, key, db["layers"], used, col, db.get("configs"))
        out[key] = cm.heldout_summary() if cm is not None else {}
    return out


def workload_layers(db: dict, model: str, batch: int, mode: str, spec: dict | None = None) -> pd.DataFrame:
    """The workload's `layers` rows: from the database when it holds them, else extracted now (no timing) from
    the model's config entry ``spec`` (``{}``: a torchvision, built-in or zoo name)."""
    layers = db["layers"]
    wl = of_workload(layers, model, batch, mode)
    if len(wl):
        return wl.reset_index(drop=True)
    from opcost.model.extract import extract
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    fresh = extract(make_workload(load_model(model, spec or {}), batch, mode)).reset_index(drop=True)
    held = layers[layers["model"] == model]
    if len(held) and (diff := variant_difference(held, fresh)):
        got = held.iloc[0]
        raise OpcostError(f"model {model}", f"the database holds another variant of it than the one built now "
                                            f"(profiled at batch {got['batch']}, {got['mode']}; {diff}): give "
                                            "--config with the config file of the run that profiled it, so that "
                                            "it is built as profiled, or another name for another variant")
    return fresh


def _variant(rows: pd.DataFrame) -> tuple[set, set]:
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
    (h_mod, h_dt), (f_mod, f_dt) = _variant(held), _variant(fresh)
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


