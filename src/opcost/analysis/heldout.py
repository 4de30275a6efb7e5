"""The held-out errors of the cost model's cross-validation (:mod:`opcost.analysis.costmodel`), summarised: the
groups a fold holds out together (a model's workloads), each row's share of its group's time, the time-weighted
quantiles an interval is read from, the bootstrap standard error the choice of methods compares with, the
held-out sums per workload and the growth of the error with the distance to the nearest measured configuration."""
from __future__ import annotations

import numpy as np
import pandas as pd

MIN_INTERVAL = 8  # held-out errors of a type (op types or models, for a fallback) needed for an interval of its own
BOOTSTRAP = 200  # resamples of the held-out models for the standard error of a method's held-out error


def bootstrap_se(values: pd.Series, groups: pd.Series) -> float:
    """The standard error of the median of ``values`` over resamples of its ``groups`` with replacement (the
    held-out models: a model's configurations err together); 0 with fewer than two groups."""
    v = values.to_numpy(dtype=float)
    ok = np.isfinite(v)
    by = pd.Series(v[ok]).groupby(groups.to_numpy()[ok]).apply(lambda s: s.to_numpy()).tolist()
    if len(by) < 2:
        return 0.0
    rng = np.random.default_rng(0)
    meds = [np.median(np.concatenate([by[i] for i in rng.integers(0, len(by), len(by))]))
            for _ in range(BOOTSTRAP)]
    return float(np.std(meds, ddof=1))


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The ``q`` quantile of ``values`` under ``weights`` (the midpoints of the weighted steps)."""
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cum = (np.cumsum(w) - w / 2) / w.sum()
    return float(np.interp(q, cum, v))


def time_shares(held: pd.DataFrame, groups: pd.Series) -> pd.Series:
    """Per held-out row (``count``, ``measured``): its share of its group's measured time (count x measured; a
    group weighs 1). An interval is read on a model's total, which the costly configurations carry: a 10 us call
    estimated 40% off and a 10 ms one 4% off are not one error each; weighted by time, the quantiles are those of
    the error of a unit of the time estimated."""
    time = held["count"].astype(float).fillna(1.0) * held["measured"].astype(float)
    return time / time.groupby(groups.to_numpy()).transform("sum")


def quantiles(ratios: pd.Series, weights: pd.Series) -> tuple[float, float]:
    """(q05, q95) of held-out log ratios under ``weights`` (:func:`time_shares`)."""
    r, w = ratios.to_numpy(dtype=float), weights.to_numpy(dtype=float)
    ok = np.isfinite(r) & np.isfinite(w) & (w > 0)
    return weighted_quantile(r[ok], w[ok], 0.05), weighted_quantile(r[ok], w[ok], 0.95)


def method_quantiles(fallback: pd.DataFrame | None, held: pd.DataFrame | None, fallbacks) -> dict:
    """Fallback method (of ``fallbacks``) -> (q05, q95) of its held-out log ratios: the leave-type-out rows (each
    op type weighing 1), and the cross-validation's rows that fell back to it (weight 1 per model held out), each
    weighing by its share of the time (:func:`time_shares`), where at least :data:`MIN_INTERVAL` op types or models
    show it."""
    parts = []
    if fallback is not None and len(fallback):
        parts.append(fallback[["method", "ratio", "weight"]].assign(group=fallback["op_type"]))
    if held is not None and len(held):
        chosen = held["law"].astype(float)
        fell = held[held["method"].isin(fallbacks) & np.isfinite(chosen)]
        if len(fell):
            group = model_groups(fell)
            parts.append(pd.DataFrame({"method": fell["method"], "ratio": chosen[fell.index],
                                       "weight": time_shares(fell, group), "group": group}))
    if not parts:
        return {}
    pool = pd.concat(parts, ignore_index=True)
    out = {}
    for method, g in pool.groupby("method"):
        if g["group"].nunique() >= MIN_INTERVAL:
            r, w = g["ratio"].to_numpy(dtype=float), g["weight"].to_numpy(dtype=float)
            out[method] = (weighted_quantile(r, w, 0.05), weighted_quantile(r, w, 0.95))
    return out


def model_groups(rows: pd.DataFrame) -> pd.Series:
    """Per row, the model of the workload it was profiled among (column ``workload``): a model's workloads, its
    batch sizes, together, as for a model never profiled; a row without a workload is a group of its own."""
    return rows["workload"].map(model_of, na_action="ignore").fillna(rows["config_id"])


def model_of(workload: str) -> str:
    """The model of a workload key (``model/mode/bN``; anything else: itself)."""
    return workload.rsplit("/", 2)[0] if workload.count("/") >= 2 else workload


def workload_errors(held: pd.DataFrame, methods) -> pd.DataFrame:
    """Per held-out workload (and mode) of a cross-validation's rows: ``configs`` and, per method, log(Σ count x
    estimate / Σ count x measured) over its configurations and phases that have an estimate, as its prediction sums
    them (``count``: calls per iteration)."""
    held = held[np.isfinite(held[list(methods)].astype(float)).all(axis=1)]
    if held.empty:
        return pd.DataFrame(columns=["workload", "mode", "configs", *methods])
    weight = held["count"].astype(float) * held["measured"]
    est = pd.DataFrame({m: weight * np.exp(held[m]) for m in methods}).assign(
        measured=weight, workload=held["workload"], mode=held["mode"])
    g = est.groupby(["workload", "mode"])
    out = np.log(g[list(methods)].sum().div(g["measured"].sum(), axis=0))
    return out.assign(configs=held.groupby(["workload", "mode"])["config_id"].nunique()).reset_index()


def model_spread(sums: pd.DataFrame, column: str) -> tuple[float, int] | None:
    """(half-width, models) of the 90% predictive interval of a model's log error, from the held-out workloads'
    summed log errors ``sums[column]`` (:func:`workload_errors`, one row per workload): their root mean square about 0
    (a lean counts as error: no prediction is corrected for it) times Student's t at 95% and ``sqrt(1 + 1/models)``,
    with as many degrees of freedom as distinct models (a model's batch sizes err together); None with fewer than two
    models. The interval of a new draw from the same errors, their spread itself known only from these few."""
    from scipy.stats import t

    e = sums[column].astype(float)
    e = e[np.isfinite(e)]
    models = sums.loc[e.index, "workload"].map(model_of).nunique()
    if models < 2:
        return None
    rms = float(np.sqrt(np.mean(e.to_numpy() ** 2)))
    return rms * float(t.ppf(0.95, models)) * float(np.sqrt(1 + 1 / models)), int(models)


def error_growth(distance: pd.Series, abs_error: pd.Series) -> tuple[float, float]:
    """(a, b) of the least-squares line ``|log error| = a + b x distance``, both at least 0 (a flat line at the
    mean without a rise)."""
    ok = distance.notna() & abs_error.notna()
    d, e = distance[ok].to_numpy(dtype=float), abs_error[ok].to_numpy(dtype=float)
    if len(d) < 2 or np.ptp(d) == 0:
        return (float(e.mean()) if len(e) else 0.0, 0.0)
    b, a = np.polyfit(d, e, 1)
    return (float(max(a, 0.0)), float(b)) if b > 0 else (float(e.mean()), 0.0)
